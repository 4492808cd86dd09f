//! What a Node carries for the blocklist, as a pure function of the Node read and the
//! block: one taint of the bridge's own key (effect `NoSchedule`, value the action), and
//! annotations of the bridge's own prefix with what a taint cannot say — the cause, who
//! blocked it, until when, and the item's revision in the daemon.
//!
//! Invariant: only the bridge's key and prefix are ever changed; every other taint and
//! annotation is carried over as read. `spec.taints` is an atomic list, so the patch
//! holds the whole list computed from the Node read, and its `resourceVersion`: a Node
//! changed since is a 409, read again and recomputed ([`crate::nodes`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Taint};
use serde_json::{json, Value};

/// The bridge's own names on a Node.
#[derive(Debug, Clone)]
pub struct Marking {
    /// The taint's key (`--taint-key`).
    pub taint_key: String,
    /// The annotations' prefix, ending in `/` (`--annotation-prefix`).
    pub annotation_prefix: String,
    /// `--dry-run`: every patch is sent as the API server's dry run (checked, not stored),
    /// and no Event is written.
    pub dry_run: bool,
}

impl Marking {
    /// Whether `node` carries the bridge's taint.
    pub fn carries(&self, node: &Node) -> bool {
        node.spec
            .as_ref()
            .and_then(|spec| spec.taints.as_ref())
            .is_some_and(|taints| taints.iter().any(|t| t.key == self.taint_key))
    }

    /// The taint `block` puts, as `kubectl` shows it: `KEY=VALUE:NoSchedule`.
    pub fn taint(&self, block: &Block) -> String {
        format!("{}={}:NoSchedule", self.taint_key, block.action)
    }

    /// The annotation of an evacuation's progress.
    pub fn progress_annotation(&self) -> String {
        format!("{}{PROGRESS}", self.annotation_prefix)
    }

    /// Whether `node` carries any of the bridge's annotations.
    pub fn annotated(&self, node: &Node) -> bool {
        node.metadata.annotations.as_ref().is_some_and(|all| {
            ANNOTATIONS
                .iter()
                .any(|name| all.contains_key(&format!("{}{name}", self.annotation_prefix)))
        })
    }
}

/// The annotations the bridge writes, after its prefix.
const ANNOTATIONS: [&str; 4] = ["cause", "source", "end", "revision"];

/// The annotation of an evacuation's progress, after the prefix: written by the evacuation
/// ([`crate::evacuation`]) while the block asks for one, taken off with the rest of the
/// bridge's marks by an unblock.
const PROGRESS: &str = "evacuation";

pub use blocklist::enforcer::{Block, EVACUATE, PERMANENT};

/// The annotations' values of `block`, by name after the prefix.
fn annotations(block: &Block) -> BTreeMap<&'static str, String> {
    let end = if block.end_timestamp == PERMANENT {
        "permanent".to_owned()
    } else {
        rfc3339(block.end_timestamp)
    };
    BTreeMap::from([
        ("cause", block.cause.clone()),
        ("source", block.source.clone()),
        ("end", end),
        ("revision", block.revision.to_string()),
    ])
}

/// Unix milliseconds as RFC 3339 in UTC, to the second (`2026-01-01T00:00:00Z`).
pub fn rfc3339(ms: i64) -> String {
    let since_epoch = std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + since_epoch).to_string()
}

/// The merge patch that makes `node` carry `block` (`None`: carry nothing of the
/// bridge's), with the `resourceVersion` it was computed from; `None` when the Node
/// already does.
pub fn patch(node: &Node, marking: &Marking, block: Option<&Block>) -> Option<Value> {
    let taints = node
        .spec
        .as_ref()
        .and_then(|spec| spec.taints.clone())
        .unwrap_or_default();
    let (ours, others): (Vec<Taint>, Vec<Taint>) = taints
        .iter()
        .cloned()
        .partition(|t| t.key == marking.taint_key);
    let wanted: Vec<Taint> = block
        .map(|block| Taint {
            key: marking.taint_key.clone(),
            value: Some(block.action.clone()),
            effect: "NoSchedule".to_owned(),
            time_added: None,
        })
        .into_iter()
        .collect();
    let taints_differ = ours.len() != wanted.len()
        || ours
            .iter()
            .zip(&wanted)
            .any(|(a, b)| a.value != b.value || a.effect != b.effect);

    let present = node.metadata.annotations.clone().unwrap_or_default();
    let wanted_annotations = block.map(annotations).unwrap_or_default();
    let mut annotations = serde_json::Map::new();
    for name in ANNOTATIONS {
        let key = format!("{}{name}", marking.annotation_prefix);
        match (present.get(&key), wanted_annotations.get(name)) {
            (Some(now), Some(want)) if now == want => {}
            (None, None) => {}
            (_, Some(want)) => {
                annotations.insert(key, json!(want));
            }
            (Some(_), None) => {
                annotations.insert(key, Value::Null);
            }
        }
    }
    let progress = marking.progress_annotation();
    if block.is_none() && present.contains_key(&progress) {
        annotations.insert(progress, Value::Null);
    }
    if !taints_differ && annotations.is_empty() {
        return None;
    }
    let mut metadata = json!({ "resourceVersion": node.metadata.resource_version });
    if !annotations.is_empty() {
        metadata["annotations"] = Value::Object(annotations);
    }
    let mut patch = json!({ "metadata": metadata });
    if taints_differ {
        let all: Vec<Taint> = others.into_iter().chain(wanted).collect();
        patch["spec"] = json!({ "taints": all });
    }
    Some(patch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSpec;
    use kube::api::ObjectMeta;

    fn marking() -> Marking {
        Marking {
            taint_key: "blocklistd.io/blocked".into(),
            annotation_prefix: "blocklistd.io/".into(),
            dry_run: false,
        }
    }

    fn node(taints: Vec<Taint>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                taints: Some(taints),
                ..NodeSpec::default()
            }),
            status: None,
        }
    }

    fn foreign() -> Taint {
        Taint {
            key: "example.com/other".into(),
            value: None,
            effect: "NoExecute".into(),
            time_added: None,
        }
    }

    fn block(action: &str) -> Block {
        Block {
            id: "n1".into(),
            action: action.into(),
            cause: "disk,net".into(),
            source: "detector".into(),
            end_timestamp: 1_767_225_600_000,
            revision: 42,
            ..Block::default()
        }
    }

    #[test]
    fn a_block_adds_the_taint_after_the_others_and_the_annotations() {
        let patch = patch(
            &node(vec![foreign()]),
            &marking(),
            Some(&block("MARK_BLOCKED")),
        )
        .expect("a change");
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        assert_eq!(
            patch["spec"]["taints"],
            json!([
                {"key": "example.com/other", "effect": "NoExecute"},
                {"key": "blocklistd.io/blocked", "value": "MARK_BLOCKED", "effect": "NoSchedule"},
            ])
        );
        let annotations = &patch["metadata"]["annotations"];
        assert_eq!(annotations["blocklistd.io/cause"], "disk,net");
        assert_eq!(annotations["blocklistd.io/source"], "detector");
        assert_eq!(annotations["blocklistd.io/end"], "2026-01-01T00:00:00Z");
        assert_eq!(annotations["blocklistd.io/revision"], "42");
    }

    #[test]
    fn a_node_that_already_carries_the_block_needs_no_write() {
        let marking = marking();
        let block = block("MARK_BLOCKED");
        let mut marked = node(vec![foreign()]);
        let patch = patch(&marked, &marking, Some(&block)).expect("a change");
        marked.spec.as_mut().unwrap().taints =
            serde_json::from_value(patch["spec"]["taints"].clone()).unwrap();
        marked.metadata.annotations =
            serde_json::from_value(patch["metadata"]["annotations"].clone()).unwrap();
        assert_eq!(super::patch(&marked, &marking, Some(&block)), None);
        // An evacuation's progress is the evacuation's to write, not the marking's.
        marked
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(marking.progress_annotation(), "evacuating: …".into());
        assert_eq!(super::patch(&marked, &marking, Some(&block)), None);
    }

    #[test]
    fn an_unblock_removes_exactly_what_the_bridge_wrote() {
        let marking = marking();
        let ours = Taint {
            key: marking.taint_key.clone(),
            value: Some("MARK_BLOCKED".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        };
        let mut node = node(vec![foreign(), ours]);
        node.metadata.annotations = Some(BTreeMap::from([
            ("blocklistd.io/cause".to_owned(), "x".to_owned()),
            (
                "blocklistd.io/evacuation".to_owned(),
                "evacuated at …".to_owned(),
            ),
            ("example.com/keep".to_owned(), "y".to_owned()),
        ]));
        let patch = patch(&node, &marking, None).expect("a change");
        assert_eq!(
            patch["spec"]["taints"],
            json!([{"key": "example.com/other", "effect": "NoExecute"}])
        );
        assert_eq!(
            patch["metadata"]["annotations"],
            json!({"blocklistd.io/cause": null, "blocklistd.io/evacuation": null})
        );
    }

    #[test]
    fn a_downgrade_changes_the_value() {
        let marking = marking();
        let mut node = node(vec![Taint {
            key: marking.taint_key.clone(),
            value: Some("MARK_BLOCKED_AND_EVACUATE_TASKS".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        }]);
        node.metadata.annotations = Some(
            annotations(&block("MARK_BLOCKED"))
                .into_iter()
                .map(|(k, v)| (format!("blocklistd.io/{k}"), v))
                .collect(),
        );
        let patch = patch(&node, &marking, Some(&block("MARK_BLOCKED"))).expect("a change");
        assert_eq!(patch["spec"]["taints"][0]["value"], "MARK_BLOCKED");
        assert!(patch["metadata"].get("annotations").is_none(), "{patch}");
    }
}
