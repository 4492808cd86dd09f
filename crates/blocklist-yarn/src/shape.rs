//! The ResourceManager's JSON as it really comes (Hadoop's JAXB/Jettison mapping): a list
//! of one element is written as that element, a list of none as `null` or as an empty
//! wrapper, several as an array — `{"nodes":{"node":[…]}}`, `{"nodes":{"node":{…}}}`,
//! `{"nodes":null}` are the same kind of answer. Every list the bridge reads goes through
//! [`list`], so each of those forms reads as the list it means.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// The list at `path` (object keys, outermost first) of `answer`: an array's elements, a
/// lone object as a list of one, `null` or a missing key as none. An element that does not
/// read as `T` fails the whole answer: the bridge never acts on half of what it read.
pub fn list<T: DeserializeOwned>(answer: &Value, path: &[&str]) -> Result<Vec<T>, String> {
    let mut at = answer;
    for (depth, key) in path.iter().enumerate() {
        match at {
            Value::Object(map) => match map.get(*key) {
                Some(next) => at = next,
                None => return Ok(Vec::new()),
            },
            Value::Null => return Ok(Vec::new()),
            // An empty wrapper comes as "" from some versions.
            Value::String(s) if s.is_empty() => return Ok(Vec::new()),
            other => {
                return Err(format!(
                    "{}: expected an object, found {}",
                    path[..depth].join("."),
                    blocklistd::validate::type_name(other)
                ))
            }
        }
    }
    let elements: Vec<&Value> = match at {
        Value::Null => Vec::new(),
        Value::String(s) if s.is_empty() => Vec::new(),
        Value::Array(all) => all.iter().collect(),
        one => vec![one],
    };
    elements
        .into_iter()
        .enumerate()
        .map(|(i, element)| {
            serde_json::from_value(element.clone())
                .map_err(|e| format!("{}[{i}]: {e}", path.join(".")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Node {
        id: String,
    }

    fn ids(answer: &Value) -> Vec<String> {
        list::<Node>(answer, &["nodes", "node"])
            .expect("reads")
            .into_iter()
            .map(|n| n.id)
            .collect()
    }

    #[test]
    fn every_form_of_a_list_reads_as_the_list_it_means() {
        assert_eq!(
            ids(&json!({"nodes": {"node": [{"id": "a:1"}, {"id": "b:1"}]}})),
            ["a:1", "b:1"]
        );
        assert_eq!(ids(&json!({"nodes": {"node": {"id": "a:1"}}})), ["a:1"]);
        assert!(ids(&json!({"nodes": null})).is_empty());
        assert!(ids(&json!({"nodes": {}})).is_empty());
        assert!(ids(&json!({"nodes": ""})).is_empty());
        assert!(ids(&json!({"nodes": {"node": []}})).is_empty());
        assert!(ids(&json!({})).is_empty());
        // A lone string is a list of one; a bare value reads with an empty path.
        assert_eq!(list::<String>(&json!("gpu"), &[]).unwrap(), ["gpu"]);
        assert_eq!(
            list::<String>(&json!(["gpu", "x"]), &[]).unwrap(),
            ["gpu", "x"]
        );
        assert!(list::<String>(&Value::Null, &[]).unwrap().is_empty());
    }

    #[test]
    fn an_answer_of_another_shape_is_refused_whole() {
        let wrong = list::<Node>(
            &json!({"nodes": {"node": [{"id": "a:1"}, {"x": 1}]}}),
            &["nodes", "node"],
        );
        assert!(wrong.unwrap_err().contains("nodes.node[1]"));
        let wrong = list::<Node>(&json!({"nodes": 7}), &["nodes", "node"]);
        assert!(wrong.unwrap_err().contains("expected an object"));
    }
}
