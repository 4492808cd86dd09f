//! What detectors send beside their reports: retractions (`POST /blocklist/retract/{kind}`).

use serde_json::Value;

use super::{
    batch_elements, details, element_errors, element_object, optional, required_id, unknown_fields,
    wrong_type, Invalid,
};
use crate::model::validate_source;
use crate::provenance::Retraction;

/// The fields of a retraction.
const RETRACT_FIELDS: &[&str] = &["id", "source", "details"];

/// Parses the body of a retraction: an array of `{"id", "source"?, "details"?}` (or
/// `{"items": [...]}`); an element without `source` retracts `source`'s (the request's)
/// report, and one with `details` only a report whose details hold them all. Every
/// element is retracted with `reason`.
pub fn retractions(
    body: &Value,
    max_batch: usize,
    source: &str,
    reason: Option<&str>,
) -> Result<Vec<Retraction>, Invalid> {
    let elements = batch_elements(body, max_batch)?;
    let mut errors = Vec::new();
    let mut out = Vec::with_capacity(elements.len());
    for (index, element) in elements.iter().enumerate() {
        let Some(map) = element_object(index, element, &mut errors) else {
            continue;
        };
        let mut errs = unknown_fields(map, RETRACT_FIELDS);
        let id = required_id(map, "id", &mut errs);
        let source = match optional(map, "source") {
            None => Some(source.to_owned()),
            Some(Value::String(s)) => match validate_source(s) {
                Ok(()) => Some(s.clone()),
                Err(e) => {
                    errs.push(format!(".source: {e}"));
                    None
                }
            },
            Some(other) => wrong_type("source", "a string", other, &mut errs),
        };
        let details = details(map, &mut errs);
        match (id, source) {
            (Some(id), Some(source)) if errs.is_empty() => out.push(Retraction {
                id,
                source,
                details,
                reason: reason.map(str::to_owned),
            }),
            _ => errors.extend(element_errors(index, map, errs)),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(Invalid::BadRequest(errors))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_retraction_names_its_id_and_may_name_a_source_and_details() {
        let body = json!([
            {"id": "n1"},
            {"id": "n2", "source": "am/x", "details": {"fingerprint": "f"}},
        ]);
        let got = retractions(&body, 10, "me", Some("disk replaced")).unwrap();
        assert_eq!(got[0].source, "me");
        assert_eq!(got[0].reason.as_deref(), Some("disk replaced"));
        assert_eq!(got[1].source, "am/x");
        assert_eq!(got[1].details["fingerprint"], "f");
    }

    #[test]
    fn every_bad_element_is_named() {
        let body = json!([
            {"source": "x"},
            {"id": "n2", "details": {"k": 1}},
            {"id": "n3", "extra": true},
            7,
        ]);
        let Err(Invalid::BadRequest(errors)) = retractions(&body, 10, "me", None) else {
            panic!("not refused")
        };
        assert_eq!(errors.len(), 4, "{errors:?}");
        assert!(errors[0].starts_with("items[0].id: "), "{errors:?}");
        assert!(
            errors[1].contains("items[1] (id \"n2\").details.k"),
            "{errors:?}"
        );
        assert!(errors[2].contains(".extra: unknown field"), "{errors:?}");
        assert!(
            errors[3].contains("items[3]: must be an object"),
            "{errors:?}"
        );
    }
}
