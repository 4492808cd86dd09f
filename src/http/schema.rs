//! JSON Schemas of request rules that utoipa's derive cannot state: the batch bodies, the
//! numbers and booleans that may arrive as strings, and "at most one of these fields".
//!
//! The request parsers in `crate::validate` are the rules; these schemas describe them
//! exactly (`tests/contract.rs` holds the two side by side), except for what JSON Schema
//! cannot say at all, which docs/api.md lists: byte lengths and "in the future".

use std::fmt::Write;

use serde_json::{json, Value};
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::schema::{
    AdditionalProperties, ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, Type,
};
use utoipa::openapi::{KnownFormat, RefOr};

/// A batch body: a non-empty array of `element`, or `{"items": [...]}` holding one.
pub(super) fn batch(element: &RefOr<Schema>, description: &str) -> RefOr<Schema> {
    let elements = || {
        ArrayBuilder::new()
            .items(element.clone())
            .min_items(Some(1))
    };
    OneOfBuilder::new()
        .item(elements().title(Some("Elements")))
        .item(
            ObjectBuilder::new()
                .title(Some("Wrapped"))
                .schema_type(Type::Object)
                .property("items", elements())
                .required("items")
                .additional_properties(Some(AdditionalProperties::FreeForm(false))),
        )
        .description(Some(description))
        .into()
}

/// An integer in `1..=max`, sent as a JSON number or as a decimal string (an optional `+`
/// and leading zeros allowed, as Rust's integer parsing takes them); `null` counts as
/// absent.
pub(super) fn lenient_positive(max: i64, description: &str) -> RefOr<Schema> {
    OneOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                .minimum(Some(1))
                .maximum(Some(max)),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(decimal_up_to(max))),
        )
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .description(Some(description))
        .into()
}

/// A boolean that may also be sent as the string `"true"` or `"false"`; `null` counts as
/// absent.
pub(super) fn lenient_boolean(description: &str) -> RefOr<Schema> {
    OneOfBuilder::new()
        .item(ObjectBuilder::new().schema_type(Type::Boolean))
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(["true", "false"])),
        )
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .description(Some(description))
        .into()
}

/// The `not` keyword (which utoipa has no field for; its extensions are written into the
/// schema object as they are) that refuses an object giving two or more of `groups`' fields
/// of one group with a value other than `null` (the parsers take `null` as absent).
pub(super) fn at_most_one_of_each(groups: &[&[&str]]) -> Extensions {
    let given = json!({"not": {"type": "null"}});
    let pairs: Vec<Value> = groups
        .iter()
        .flat_map(|group| {
            group.iter().enumerate().flat_map(move |(i, a)| {
                group[i + 1..].iter().map(move |b| (*a, *b))
            })
        })
        .map(|(a, b)| {
            json!({"required": [a, b], "properties": {a: given.clone(), b: given.clone()}})
        })
        .collect();
    Extensions::from_iter([("not", json!({ "anyOf": pairs }))])
}

/// An ECMA-262 pattern of the decimal strings of `1..=max`: an optional `+`, any leading
/// zeros, then the digits.
pub(super) fn decimal_up_to(max: i64) -> String {
    format!(r"^\+?0*(?:{})$", digits_up_to(max))
}

/// The alternatives of a pattern of the digits of `1..=max`, without leading zeros. Built
/// digit by digit from `max`: every number with fewer digits, then for each leading part of
/// `max`, the numbers that continue it with a smaller digit.
pub(super) fn digits_up_to(max: i64) -> String {
    assert!(max >= 1, "a positive range");
    let digits: Vec<u8> = max.to_string().into_bytes();
    let n = digits.len();
    let mut alternatives = Vec::new();
    match n {
        1 => {}
        2 => alternatives.push("[1-9]".to_owned()),
        _ => alternatives.push(format!("[1-9][0-9]{{0,{}}}", n - 2)),
    }
    for (i, &digit) in digits.iter().enumerate() {
        let low = if i == 0 { b'1' } else { b'0' };
        if digit > low {
            let mut alternative = String::from_utf8(digits[..i].to_vec()).expect("ASCII");
            let high = char::from(digit - 1);
            if high == char::from(low) {
                alternative.push(high);
            } else {
                write!(alternative, "[{}-{high}]", char::from(low)).expect("a String");
            }
            match n - 1 - i {
                0 => {}
                1 => alternative.push_str("[0-9]"),
                rest => write!(alternative, "[0-9]{{{rest}}}").expect("a String"),
            }
            alternatives.push(alternative);
        }
    }
    alternatives.push(String::from_utf8(digits).expect("ASCII"));
    alternatives.join("|")
}

/// A source given in a body (`"source"`): 1–128 bytes of UTF-8 without control characters
/// (`maxLength` counts characters), or `null` for the request's.
pub(super) fn source(description: &str) -> RefOr<Schema> {
    OneOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .max_length(Some(crate::model::MAX_SOURCE_BYTES))
                .pattern(Some(crate::model::NO_CONTROL_CHARACTERS)),
        )
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .description(Some(description))
        .into()
}

/// A report's `details`: an object of at most 16 strings, keys of 1–64 and values of up to
/// 1024 characters, none with a control character (the 4 KiB they may hold together is
/// prose: docs/api.md), or `null` for none.
pub(super) fn details(description: &str) -> RefOr<Schema> {
    use crate::model::{
        MAX_DETAILS, MAX_DETAILS_KEY_BYTES, MAX_DETAILS_VALUE_BYTES, NO_CONTROL_CHARACTERS,
    };
    let value = ObjectBuilder::new()
        .schema_type(Type::String)
        .max_length(Some(MAX_DETAILS_VALUE_BYTES))
        .pattern(Some(NO_CONTROL_CHARACTERS));
    let key = ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(MAX_DETAILS_KEY_BYTES))
        .pattern(Some(NO_CONTROL_CHARACTERS));
    OneOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .max_properties(Some(MAX_DETAILS))
                .additional_properties(Some(AdditionalProperties::RefOr(RefOr::T(Schema::Object(
                    value.build(),
                )))))
                .property_names(Some(key)),
        )
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .description(Some(description))
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_patterns_spell_out_their_range() {
        assert_eq!(decimal_up_to(1), r"^\+?0*(?:1)$");
        assert_eq!(decimal_up_to(9), r"^\+?0*(?:[1-8]|9)$");
        assert_eq!(decimal_up_to(10), r"^\+?0*(?:[1-9]|10)$");
        assert_eq!(decimal_up_to(25), r"^\+?0*(?:[1-9]|1[0-9]|2[0-4]|25)$");
        assert_eq!(
            decimal_up_to(1_000_000_000_000_000_000),
            r"^\+?0*(?:[1-9][0-9]{0,17}|1000000000000000000)$"
        );
        assert_eq!(
            decimal_up_to(307),
            r"^\+?0*(?:[1-9][0-9]{0,1}|[1-2][0-9]{2}|30[0-6]|307)$"
        );
    }

    #[test]
    fn at_most_one_names_every_pair() {
        let not =
            serde_json::to_value(at_most_one_of_each(&[&["a", "b", "c"], &["d", "e"]])).unwrap();
        let pairs: Vec<&Value> = not["not"]["anyOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| &p["required"])
            .collect();
        assert_eq!(
            pairs,
            [
                &json!(["a", "b"]),
                &json!(["a", "c"]),
                &json!(["b", "c"]),
                &json!(["d", "e"])
            ]
        );
    }
}
