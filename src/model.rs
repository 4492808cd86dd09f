//! The pure blocklist domain: kinds, actions, items and the FLIP-224 merge rule.
//!
//! Nothing here does I/O or reads the clock; callers pass `now` in. That keeps the rules
//! unit- and property-testable, and lets the committer apply them inside a sled transaction.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `endTimestamp` of a permanent item: Java's `Long.MAX_VALUE`, as FLIP-224 uses it.
pub const PERMANENT: i64 = i64::MAX;

/// The longest id accepted, in UTF-8 bytes.
pub const MAX_ID_BYTES: usize = 256;

/// The longest cause one request may carry, in UTF-8 bytes.
pub const MAX_CAUSE_BYTES: usize = 1024;

/// The longest merged cause kept on an item. A merge whose new cause would push the joined
/// causes past this keeps the old causes and drops the new one (action and end still merge),
/// so a detector that reports a fresh cause string every minute cannot grow an item forever.
pub const MAX_MERGED_CAUSE_BYTES: usize = 16 * 1024;

/// The separator FLIP-224 uses between merged causes.
pub const CAUSE_SEPARATOR: char = ',';

/// The id rule's character set as an ECMA-262 regular expression (JSON Schema's dialect): no
/// control character, which is Unicode's category Cc, U+0000–U+001F and U+007F–U+009F,
/// exactly what `char::is_control` finds.
pub const NO_CONTROL_CHARACTERS: &str = r"^[^\u0000-\u001f\u007f-\u009f]*$";

/// The two namespaces of the blocklist. The same id may be blocked in both.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    TaskManager,
    Node,
}

impl Kind {
    pub const ALL: [Kind; 2] = [Kind::TaskManager, Kind::Node];

    /// The path segment of the REST API (`/blocklist/taskmanagers`).
    pub fn plural(self) -> &'static str {
        match self {
            Kind::TaskManager => "taskmanagers",
            Kind::Node => "nodes",
        }
    }

    /// The name used inside JSON documents (`"kind": "taskmanager"`).
    pub fn singular(self) -> &'static str {
        match self {
            Kind::TaskManager => "taskmanager",
            Kind::Node => "node",
        }
    }
}

/// What a block asks the scheduler to do. The derive order is the strength order:
/// `MarkBlocked < MarkBlockedAndEvacuateTasks`, so the stronger action is `max`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[schema(
    description = "What a block asks the scheduler to do; MARK_BLOCKED_AND_EVACUATE_TASKS is \
                   the stronger."
)]
pub enum Action {
    #[serde(rename = "MARK_BLOCKED")]
    MarkBlocked,
    #[serde(rename = "MARK_BLOCKED_AND_EVACUATE_TASKS")]
    MarkBlockedAndEvacuateTasks,
}

impl Action {
    pub const ALL: [Action; 2] = [Action::MarkBlocked, Action::MarkBlockedAndEvacuateTasks];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::MarkBlocked => "MARK_BLOCKED",
            Action::MarkBlockedAndEvacuateTasks => "MARK_BLOCKED_AND_EVACUATE_TASKS",
        }
    }

    pub fn parse(s: &str) -> Option<Action> {
        match s {
            "MARK_BLOCKED" => Some(Action::MarkBlocked),
            "MARK_BLOCKED_AND_EVACUATE_TASKS" => Some(Action::MarkBlockedAndEvacuateTasks),
            _ => None,
        }
    }
}

/// The state of one blocked resource, without its id and kind (those are its key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub action: Action,
    /// Unix ms when the item was first created; kept across merges.
    pub start: i64,
    /// Unix ms when the item stops blocking; [`PERMANENT`] for never.
    pub end: i64,
    /// Distinct causes in arrival order, joined by [`CAUSE_SEPARATOR`].
    pub cause: String,
    /// Set when a write passed a guardrail by force to make this block what it is.
    pub forced: Option<Forced>,
}

/// A write admitted past guardrails by `?force=true`: which, by whom, when. Kept through
/// later merges, so an operator can always tell a forced block; a later forced write
/// replaces it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Forced {
    /// The guards it passed, by name (as in errors and in
    /// `blocklist_guard_refusals_total`).
    pub guards: Vec<String>,
    /// The name of the token that forced it; `null` when the token has none.
    pub by: Option<String>,
    /// Unix ms of the forced write.
    pub at: i64,
}

impl Block {
    /// Whether the item still blocks at `now`. Every reader applies this itself rather than
    /// trusting the sweeper to have removed due items already.
    pub fn is_active(&self, now: i64) -> bool {
        self.end > now
    }

    pub fn is_permanent(&self) -> bool {
        self.end == PERMANENT
    }

    /// Merges a newer report into this item (FLIP-224): the stronger action, the later end
    /// (permanent wins), the existing start, and the causes as a set in arrival order.
    pub fn merge(&mut self, action: Action, end: i64, cause: &str) {
        self.action = self.action.max(action);
        self.end = self.end.max(end);
        self.cause = merge_causes(&self.cause, cause);
    }
}

/// Appends the parts of `new` (split on `,`) that `existing` does not hold yet. Empty parts
/// are dropped, so merging is idempotent and the result is a set in arrival order. When the
/// result would exceed [`MAX_MERGED_CAUSE_BYTES`], the parts that do not fit are dropped.
pub fn merge_causes(existing: &str, new: &str) -> String {
    let mut merged = existing.to_owned();
    for part in new.split(CAUSE_SEPARATOR).filter(|p| !p.is_empty()) {
        if existing_parts(&merged).any(|p| p == part) {
            continue;
        }
        let extra = part.len() + usize::from(!merged.is_empty());
        if merged.len() + extra > MAX_MERGED_CAUSE_BYTES {
            continue;
        }
        if !merged.is_empty() {
            merged.push(CAUSE_SEPARATOR);
        }
        merged.push_str(part);
    }
    merged
}

fn existing_parts(causes: &str) -> impl Iterator<Item = &str> {
    causes.split(CAUSE_SEPARATOR).filter(|p| !p.is_empty())
}

/// The id rule as a JSON Schema, the `Id` component of the `OpenAPI` document: what
/// [`validate_id`] accepts, except that `maxLength` counts characters where the limit counts
/// bytes of UTF-8. JSON Schema has no byte length, and the limit stays in bytes because the
/// store's bound on its leaf sizes (`store::blobs`) is computed from it.
pub struct Id;

impl utoipa::PartialSchema for Id {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::Type::String)
            .min_length(Some(1))
            .max_length(Some(MAX_ID_BYTES))
            .pattern(Some(NO_CONTROL_CHARACTERS))
            .description(Some(
                "An id: 1–256 bytes of UTF-8 without control characters (U+0000–U+001F, \
                 U+007F–U+009F); `/`, spaces, `%` and non-ASCII are fine. `maxLength` counts \
                 characters, so a non-ASCII id reaches the byte limit sooner.",
            ))
            .into()
    }
}

impl ToSchema for Id {}

/// A blocked item as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Item {
    #[schema(value_type = Id)]
    pub id: String,
    pub action: Action,
    /// Unix ms when the item was first created; kept across merges.
    pub start_timestamp: i64,
    /// Unix ms when the item stops blocking; 9223372036854775807 (Long.MAX_VALUE) = permanent.
    #[expect(
        clippy::doc_markdown,
        reason = "the published OpenAPI text of the field"
    )]
    pub end_timestamp: i64,
    /// Why; merged causes are joined with `,`.
    pub cause: String,
    /// Present only when the block was admitted past a guardrail by force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forced: Option<Forced>,
}

impl Item {
    /// The stored part of the item.
    pub fn block(&self) -> Block {
        Block {
            action: self.action,
            start: self.start_timestamp,
            end: self.end_timestamp,
            cause: self.cause.clone(),
            forced: self.forced.clone(),
        }
    }

    pub fn new(id: String, block: Block) -> Item {
        Item {
            id,
            action: block.action,
            start_timestamp: block.start,
            end_timestamp: block.end,
            cause: block.cause,
            forced: block.forced,
        }
    }
}

/// What a committed change did, the `event:` name of the change feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Added,
    Merged,
    Removed,
    Expired,
    Registered,
    Unregistered,
    /// The guardrail policy changed (data: the new policy).
    PolicyChanged,
    /// An allowlist entry was added or replaced (data: the entry).
    Allowlisted,
    /// An allowlist entry was removed (data: the entry as it was).
    Unallowlisted,
    /// An allowlist entry reached its end (data: the entry as it was).
    AllowlistExpired,
}

impl EventType {
    /// Every type, in the order of their stored codes: append only.
    pub const ALL: [EventType; 10] = [
        EventType::Added,
        EventType::Merged,
        EventType::Removed,
        EventType::Expired,
        EventType::Registered,
        EventType::Unregistered,
        EventType::PolicyChanged,
        EventType::Allowlisted,
        EventType::Unallowlisted,
        EventType::AllowlistExpired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "added",
            EventType::Merged => "merged",
            EventType::Removed => "removed",
            EventType::Expired => "expired",
            EventType::Registered => "registered",
            EventType::Unregistered => "unregistered",
            EventType::PolicyChanged => "policy",
            EventType::Allowlisted => "allowlisted",
            EventType::Unallowlisted => "unallowlisted",
            EventType::AllowlistExpired => "allowlist-expired",
        }
    }
}

/// One committed change: its revision, what happened, when (unix ms, commit time), and the
/// item or registration after the change (as it was, for removals).
#[derive(Debug, Clone)]
pub struct Event {
    pub revision: u64,
    pub event: EventType,
    pub at: i64,
    pub change: Change,
    /// The JSON the feed sends, built on first use: never on the committer, once however
    /// many watchers share the event, and not at all when nobody watches.
    data: std::sync::OnceLock<String>,
}

impl Event {
    pub fn new(revision: u64, event: EventType, at: i64, change: Change) -> Event {
        Event {
            revision,
            event,
            at,
            change,
            data: std::sync::OnceLock::new(),
        }
    }

    /// The event's `data:` JSON: the item with its kind, or `{"id", "node"}`.
    pub fn data(&self) -> &str {
        self.data.get_or_init(|| match &self.change {
            Change::Item { kind, item } => item_event_data(*kind, item),
            Change::Registration { tm, node } => registration_event_data(tm, node),
            Change::Json(json) => json.clone(),
        })
    }
}

impl PartialEq for Event {
    /// Equal when the same change is recorded, whether or not its JSON was built yet.
    fn eq(&self, other: &Event) -> bool {
        (self.revision, self.event, self.at, &self.change)
            == (other.revision, other.event, other.at, &other.change)
    }
}

impl Eq for Event {}

/// What an event records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// An item's state after the change (as it was, for removals and expiries).
    Item { kind: Kind, item: Item },
    /// A task manager's registration (the node it was on, for unregistrations).
    Registration { tm: String, node: String },
    /// An event kept as its finished JSON: a policy or allowlist change (rare, and shaped
    /// by the API rather than by the store), or an event an older version stored so.
    Json(String),
}

/// The `data:` of an item's event in the change feed: the item plus its kind.
#[derive(Serialize, ToSchema)]
pub struct ItemEvent<'a> {
    // Always a `Kind::singular()`, so its schema is `Kind`'s.
    #[schema(value_type = Kind)]
    kind: &'static str,
    #[serde(flatten)]
    item: &'a Item,
}

/// The `data:` of a registration's event in the change feed.
#[derive(Serialize, ToSchema)]
pub struct RegistrationEvent<'a> {
    /// The task manager.
    #[schema(value_type = Id)]
    id: &'a str,
    /// Its node (the node it was on, for an unregistration).
    #[schema(value_type = Id)]
    node: &'a str,
}

/// Event data of an item change.
fn item_event_data(kind: Kind, item: &Item) -> String {
    serde_json::to_string(&ItemEvent {
        kind: kind.singular(),
        item,
    })
    .expect("items serialize")
}

/// Event data of a registration change.
fn registration_event_data(tm: &str, node: &str) -> String {
    serde_json::to_string(&RegistrationEvent { id: tm, node }).expect("registrations serialize")
}

/// One validated element of an add request, its end already resolved to an absolute time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewItem {
    pub id: String,
    pub action: Action,
    pub end: i64,
    pub cause: String,
    pub allow_merge: bool,
}

impl NewItem {
    /// The block this element creates when nothing active holds its id.
    pub fn to_block(&self, now: i64) -> Block {
        Block {
            action: self.action,
            start: now,
            end: self.end,
            cause: merge_causes("", &self.cause),
            forced: None,
        }
    }
}

/// Checks an id (from a body or a decoded path): 1–256 bytes of UTF-8 and no control
/// characters. Everything else (`/`, spaces, `%`, non-ASCII) is allowed. The error text
/// completes "id …".
pub fn validate_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("must not be empty".into());
    }
    if id.len() > MAX_ID_BYTES {
        return Err(format!(
            "is {} bytes long; the limit is {MAX_ID_BYTES} bytes of UTF-8",
            id.len()
        ));
    }
    if let Some(c) = id.chars().find(|c| c.is_control()) {
        return Err(format!(
            "contains the control character U+{:04X}; control characters are not allowed",
            u32::from(c)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(action: Action, end: i64, cause: &str) -> Block {
        Block {
            action,
            start: 100,
            end,
            cause: cause.into(),
            forced: None,
        }
    }

    #[test]
    fn merge_takes_stronger_action_later_end_and_keeps_start() {
        let mut b = block(Action::MarkBlockedAndEvacuateTasks, 5_000, "a");
        b.merge(Action::MarkBlocked, 9_000, "b");
        assert_eq!(b.action, Action::MarkBlockedAndEvacuateTasks);
        assert_eq!(b.end, 9_000);
        assert_eq!(b.start, 100);
        assert_eq!(b.cause, "a,b");

        let mut b = block(Action::MarkBlocked, 9_000, "a");
        b.merge(Action::MarkBlockedAndEvacuateTasks, 5_000, "a");
        assert_eq!(b.action, Action::MarkBlockedAndEvacuateTasks);
        assert_eq!(b.end, 9_000);
        assert_eq!(b.cause, "a");
    }

    #[test]
    fn permanent_wins_a_merge_either_way() {
        let mut b = block(Action::MarkBlocked, PERMANENT, "a");
        b.merge(Action::MarkBlocked, 9_000, "a");
        assert!(b.is_permanent());
        let mut b = block(Action::MarkBlocked, 9_000, "a");
        b.merge(Action::MarkBlocked, PERMANENT, "a");
        assert!(b.is_permanent());
    }

    #[test]
    fn repeated_causes_are_not_repeated() {
        let mut b = block(Action::MarkBlocked, 1, "disk");
        for _ in 0..100 {
            b.merge(Action::MarkBlocked, 1, "disk");
            b.merge(Action::MarkBlocked, 1, "net");
        }
        assert_eq!(b.cause, "disk,net");
    }

    #[test]
    fn causes_with_separators_merge_part_by_part() {
        assert_eq!(merge_causes("a,b", "b,c"), "a,b,c");
        assert_eq!(merge_causes("", "x,,y"), "x,y");
        assert_eq!(merge_causes("a", ""), "a");
    }

    #[test]
    fn merged_cause_is_bounded() {
        let mut cause = String::new();
        for i in 0..10_000 {
            cause = merge_causes(&cause, &format!("cause-{i:05}"));
        }
        assert!(cause.len() <= MAX_MERGED_CAUSE_BYTES);
        assert!(cause.starts_with("cause-00000,cause-00001"));
    }

    #[test]
    fn action_strength_order() {
        assert!(Action::MarkBlocked < Action::MarkBlockedAndEvacuateTasks);
        for a in Action::ALL {
            assert_eq!(Action::parse(a.as_str()), Some(a));
        }
        assert_eq!(Action::parse("mark_blocked"), None);
    }

    mod algebra {
        use super::*;
        use proptest::prelude::*;

        fn report() -> impl Strategy<Value = (Action, i64, String)> {
            (
                prop_oneof![
                    Just(Action::MarkBlocked),
                    Just(Action::MarkBlockedAndEvacuateTasks)
                ],
                prop_oneof![1i64..1_000_000, Just(PERMANENT)],
                "[a-d]{1,2}(,[a-d]{1,2}){0,2}",
            )
        }

        fn fold(reports: &[(Action, i64, String)]) -> Block {
            let (action, end, cause) = &reports[0];
            let mut block = Block {
                action: *action,
                start: 7,
                end: *end,
                cause: merge_causes("", cause),
                forced: None,
            };
            for (action, end, cause) in &reports[1..] {
                block.merge(*action, *end, cause);
            }
            block
        }

        proptest! {
            /// Action and end do not depend on the order reports arrive in; start never moves.
            #[test]
            fn action_and_end_are_order_independent(
                reports in prop::collection::vec(report(), 1..8),
                seed in any::<u64>(),
            ) {
                let mut shuffled = reports.clone();
                let n = shuffled.len();
                for i in (1..n).rev() {
                    shuffled.swap(i, (seed.rotate_left(i as u32) % (i as u64 + 1)) as usize);
                }
                let (a, b) = (fold(&reports), fold(&shuffled));
                prop_assert_eq!(a.action, b.action);
                prop_assert_eq!(a.end, b.end);
                prop_assert_eq!(a.start, 7);
                prop_assert_eq!(a.action, reports.iter().map(|r| r.0).max().unwrap());
                prop_assert_eq!(a.end, reports.iter().map(|r| r.1).max().unwrap());
            }

            /// Merging the same report again changes nothing.
            #[test]
            fn merging_is_idempotent(reports in prop::collection::vec(report(), 1..6), again in 0usize..6) {
                let once = fold(&reports);
                let mut twice = once.clone();
                let (action, end, cause) = &reports[again % reports.len()];
                twice.merge(*action, *end, cause);
                prop_assert_eq!(once, twice);
            }

            /// Causes are the set of reported parts, in order of first arrival.
            #[test]
            fn causes_are_a_set_in_arrival_order(reports in prop::collection::vec(report(), 1..8)) {
                let block = fold(&reports);
                let mut expected: Vec<&str> = Vec::new();
                for (_, _, cause) in &reports {
                    for part in cause.split(',') {
                        if !expected.contains(&part) {
                            expected.push(part);
                        }
                    }
                }
                prop_assert_eq!(block.cause, expected.join(","));
            }
        }
    }

    #[test]
    fn id_rules() {
        assert!(validate_id("tm-1").is_ok());
        assert!(validate_id("a/b c%20ü🦀").is_ok());
        assert!(validate_id(&"x".repeat(MAX_ID_BYTES)).is_ok());
        assert!(validate_id(&"x".repeat(MAX_ID_BYTES + 1)).is_err());
        // 128 two-byte characters are 256 bytes; one more is over.
        assert!(validate_id(&"ü".repeat(128)).is_ok());
        assert!(validate_id(&"ü".repeat(129)).is_err());
        assert!(validate_id("").is_err());
        assert!(validate_id("a\nb").is_err());
        assert!(validate_id("a\u{7f}").is_err());
        assert!(validate_id("a\u{0}").is_err());
    }

    /// The ranges `NO_CONTROL_CHARACTERS` excludes are exactly the characters the id rule
    /// refuses (the regular expression's own meaning is checked against a JSON Schema
    /// validator in `tests/contract.rs`).
    #[test]
    fn the_documented_character_ranges_are_the_control_characters() {
        assert_eq!(NO_CONTROL_CHARACTERS, r"^[^\u0000-\u001f\u007f-\u009f]*$");
        let documented = |c: char| matches!(u32::from(c), 0..=0x1f | 0x7f..=0x9f);
        for c in (0..=0x10_ffff).filter_map(char::from_u32) {
            assert_eq!(
                validate_id(&format!("a{c}")).is_err(),
                documented(c),
                "U+{:04X}",
                u32::from(c)
            );
        }
    }
}
