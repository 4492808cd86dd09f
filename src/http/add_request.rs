//! The add request's schema (`POST /blocklist/{kind}`), for the `OpenAPI` document.
//!
//! `add` parses its body by hand in `crate::validate` (lenient numbers and booleans, every
//! error named), not by serde, so these types only document it: field names and optionality
//! mirror `validate`, which rejects any other field. `Serialize` is derived only so that the
//! serde attributes the schema derive reads (`rename_all`, `deny_unknown_fields`) are
//! accepted by the compiler.

use serde::Serialize;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::{Ref, RefOr};
use utoipa::{Modify, PartialSchema, ToSchema};

use super::schema;
use crate::model::Id;
use crate::validate;

/// One element of an add request.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct AddElement {
    /// The id to block.
    #[schema(value_type = Id)]
    id: String,
    action: crate::model::Action,
    /// Why: 1 byte to 1 KiB of UTF-8, not only `,` separators (merged causes are joined
    /// with `,`).
    #[schema(min_length = 1, max_length = 1024, pattern = "[^,]")]
    cause: String,
    #[schema(schema_with = lenient_timeout)]
    timeout: Option<i64>,
    #[schema(schema_with = lenient_end)]
    end_timestamp: Option<i64>,
    #[schema(schema_with = lenient_allow_merge)]
    allow_merge: Option<bool>,
    #[schema(schema_with = lenient_merge_on_conflict)]
    merge_on_conflict: Option<bool>,
    #[serde(rename = "mergeOnConflictallowMerge")]
    #[schema(schema_with = lenient_merge_flip_spelling)]
    merge_on_conflict_allow_merge: Option<bool>,
    #[schema(schema_with = element_source)]
    source: Option<String>,
    #[schema(schema_with = element_details)]
    details: Option<std::collections::BTreeMap<String, String>>,
}

fn element_source() -> RefOr<Schema> {
    schema::source(
        "Who reports this element; default the request's source (`Blocklist-Source`, else \
         the token's name). A `detector` token's is its own name whatever this says.",
    )
}

fn element_details() -> RefOr<Schema> {
    schema::details(
        "The evidence the source keeps with its live report; a report whose details equal \
         those of its source's live report is a repeat, and writes nothing.",
    )
}

/// The fields of an add element of which one gives at most one (`null` counting as absent):
/// the end, and the merge flag's spellings. The derive cannot state it, so [`AtMostOne`]
/// adds it to the `AddElement` schema.
const EXCLUSIVE: [&[&str]; 2] = [&["timeout", "endTimestamp"], &validate::MERGE_FLAG];

/// Adds "at most one of" ([`EXCLUSIVE`]) to the `AddElement` schema.
pub(super) struct AtMostOne;

impl Modify for AtMostOne {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let element = openapi
            .components
            .as_mut()
            .and_then(|c| c.schemas.get_mut("AddElement"));
        if let Some(RefOr::T(Schema::Object(element))) = element {
            element.extensions = Some(schema::at_most_one_of_each(&EXCLUSIVE));
        }
    }
}

/// The body of an add: a non-empty array of elements, or `{"items": [...]}`. Validated whole
/// and applied atomically, or not at all.
pub(super) struct AddRequest;

impl PartialSchema for AddRequest {
    fn schema() -> RefOr<Schema> {
        schema::batch(
            &Ref::from_schema_name(AddElement::name()).into(),
            "A non-empty array of elements, or `{\"items\": [...]}`. Validated whole and \
             applied atomically, or not at all.",
        )
    }
}

impl ToSchema for AddRequest {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((AddElement::name().into(), AddElement::schema()));
        AddElement::schemas(schemas);
    }
}

fn lenient_timeout() -> RefOr<Schema> {
    schema::lenient_positive(
        validate::MAX_TIMEOUT_MS,
        "The item ends this many ms after the request arrives: 1 to 10^18 (for longer, omit \
         it: permanent). A JSON integer or a decimal string. At most one of `timeout` and \
         `endTimestamp`; neither means permanent.",
    )
}

fn lenient_end() -> RefOr<Schema> {
    schema::lenient_positive(
        i64::MAX,
        "The item ends at this unix ms, which must be in the future (9223372036854775807: \
         permanent). A JSON integer or a decimal string.",
    )
}

fn lenient_allow_merge() -> RefOr<Schema> {
    schema::lenient_boolean(
        "Merge into an active item with the same id instead of answering 409. Default false.",
    )
}

fn lenient_merge_on_conflict() -> RefOr<Schema> {
    schema::lenient_boolean("Alias of `allowMerge` (give one spelling at most).")
}

fn lenient_merge_flip_spelling() -> RefOr<Schema> {
    schema::lenient_boolean(
        "Alias of `allowMerge`, spelled as FLIP-224's own request example spells it (give \
         one spelling at most).",
    )
}
