//! The effective "is it blocked?" question a scheduler asks on every allocation: a task
//! manager is blocked if it is blocked itself or its node is.
//!
//! A check is at most three point reads (the task manager's item, its registration, its
//! node's item); it never scans and never waits for the committer.

use serde::Serialize;
use utoipa::ToSchema;

use crate::model::{Action, Item, Kind};
use crate::store::{Result, Store};

/// The answer for one id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// The checked id.
    pub id: String,
    /// The node a checked task manager is registered on (absent when unregistered, and for
    /// node checks).
    #[serde(skip_serializing_if = "Option::is_none")]
    // Absent rather than null: the schema says string, not nullable.
    #[schema(value_type = String)]
    pub node: Option<String>,
    /// Whether any item applies.
    pub blocked: bool,
    /// The strongest action of the items that apply; `null` when none does.
    // Always present, possibly null: required even though it is an Option.
    #[schema(required = true)]
    pub action: Option<Action>,
    /// The items that apply: the task manager's own item first, then its node's.
    pub blocked_by: Vec<BlockedBy>,
}

/// An item that applies to the checked id, tagged with its kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct BlockedBy {
    // Always a `Kind::singular()`, so its schema is `Kind`'s.
    #[schema(value_type = Kind)]
    pub kind: &'static str,
    #[serde(flatten)]
    pub item: Item,
}

impl Verdict {
    fn new(id: String, node: Option<String>, blocked_by: Vec<BlockedBy>) -> Verdict {
        Verdict {
            id,
            node,
            blocked: !blocked_by.is_empty(),
            action: blocked_by.iter().map(|b| b.item.action).max(),
            blocked_by,
        }
    }
}

fn active(store: &Store, kind: Kind, id: &str, now: i64) -> Result<Option<BlockedBy>> {
    Ok(store.get(kind, id, now)?.map(|block| BlockedBy {
        kind: kind.singular(),
        item: Item::new(id.to_owned(), block),
    }))
}

/// Checks task manager `tm`: its own item, and its node's item when it is registered.
pub fn task_manager(store: &Store, tm: &str, now: i64) -> Result<Verdict> {
    let own = active(store, Kind::TaskManager, tm, now)?;
    let node = store.node_of(tm)?;
    let via_node = match &node {
        Some(node) => active(store, Kind::Node, node, now)?,
        None => None,
    };
    let blocked_by = own.into_iter().chain(via_node).collect();
    Ok(Verdict::new(tm.to_owned(), node, blocked_by))
}

/// Checks node `node`: its own item.
pub fn node(store: &Store, node: &str, now: i64) -> Result<Verdict> {
    let blocked_by = active(store, Kind::Node, node, now)?.into_iter().collect();
    Ok(Verdict::new(node.to_owned(), None, blocked_by))
}
