//! The pure blocklist domain: kinds, actions, items and the FLIP-224 merge rule (and, in
//! `live`, the block its sources' live reports make).
//!
//! Nothing here does I/O or reads the clock; callers pass `now` in. That keeps the rules
//! unit- and property-testable, and lets the committer apply them inside a sled transaction.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

mod live;

pub use live::{
    merge_claim, validate_details, Details, LiveReport, MAX_DETAILS, MAX_DETAILS_BYTES,
    MAX_DETAILS_KEY_BYTES, MAX_DETAILS_VALUE_BYTES, MAX_HOLDERS, OTHER_SOURCES,
};

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
    /// Who reported it, how often and when.
    pub provenance: Provenance,
    /// The revision of the change that made the block what it is: its `ETag`. A block not
    /// yet written has 0; the store stamps it.
    pub revision: u64,
    /// Set when escalation lengthened the add that created the block.
    pub escalated: Option<Escalated>,
}

/// The source recorded when a request names none and its token has no name.
pub const UNKNOWN_SOURCE: &str = "unknown";

/// The longest source accepted, in UTF-8 bytes.
pub const MAX_SOURCE_BYTES: usize = 128;

/// An item's reports in summary: who made the first, how many there were, when the first and
/// the last came. The reports themselves (the most recent [`crate::provenance::MAX_REPORTS`])
/// are stored beside the item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    /// The source of the first report: who blocked it.
    pub source: String,
    /// Every report the block received, including the one that created it (at least 1).
    pub reports: u64,
    /// Unix ms of the first and of the last report.
    pub first_report: i64,
    pub last_report: i64,
}

impl Provenance {
    /// The provenance of a block created at `at` by `source`.
    pub fn first(source: &str, at: i64) -> Provenance {
        Provenance {
            source: source.to_owned(),
            reports: 1,
            first_report: at,
            last_report: at,
        }
    }
}

/// How escalation lengthened a block ([`crate::policy::Escalation`]): the timeout asked for,
/// the timeout applied, and how many past blocks of the id within the window made it so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Escalated {
    /// The timeout the add asked for, in ms.
    pub requested_timeout: i64,
    /// The timeout applied, in ms: `requestedTimeout × factor^pastBlocks`, capped.
    pub timeout: i64,
    /// The id's blocks that ended within the policy's window before this add.
    pub past_blocks: u32,
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
        merge_claim(
            (&mut self.action, &mut self.end, &mut self.cause),
            (action, end, cause),
        );
    }

    /// Counts one more report, made at `at`.
    pub fn reported(&mut self, at: i64) {
        self.provenance.reports = self.provenance.reports.saturating_add(1);
        self.provenance.last_report = self.provenance.last_report.max(at);
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
    /// Who made the first report: who blocked it.
    #[serde(default = "unknown_source")]
    #[schema(min_length = 1, max_length = 128)]
    pub source: String,
    /// How many reports the block received (merges included); the most recent are listed by
    /// `GET /blocklist/{kind}/{id}`.
    #[serde(default = "one")]
    pub report_count: u64,
    /// Unix ms of the first and of the last report.
    #[serde(default)]
    pub first_report_timestamp: i64,
    #[serde(default)]
    pub last_report_timestamp: i64,
    /// The revision of the change that made the item what it is: its `ETag`, for `If-Match`.
    #[serde(default)]
    pub revision: u64,
    /// Present only when escalation lengthened the add that created the item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalated: Option<Escalated>,
    /// The sources whose live reports hold the block, in the order of their first reports;
    /// present only when that is not `source` alone (another source reported it too, or
    /// the first retracted its report). Shown by reads; the feed's items leave it out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_by: Vec<String>,
}

fn unknown_source() -> String {
    UNKNOWN_SOURCE.to_owned()
}

fn one() -> u64 {
    1
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
            provenance: Provenance {
                source: self.source.clone(),
                reports: self.report_count,
                first_report: self.first_report_timestamp,
                last_report: self.last_report_timestamp,
            },
            revision: self.revision,
            escalated: self.escalated,
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
            source: block.provenance.source,
            report_count: block.provenance.reports,
            first_report_timestamp: block.provenance.first_report,
            last_report_timestamp: block.provenance.last_report,
            revision: block.revision,
            escalated: block.escalated,
            held_by: Vec::new(),
        }
    }

    /// This item with the sources that hold it, as [`Item::held_by`] shows them: `holders`
    /// (the store's roster, in the order of their first reports; empty while the block's
    /// first source alone holds it by the block itself) unless that is `source` alone.
    pub fn with_holders(mut self, holders: Vec<String>) -> Item {
        self.held_by = if holders.len() == 1 && holders[0] == self.source {
            Vec::new()
        } else {
            holders
        };
        self
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
    /// An item was changed in place (`PATCH`; data: the item after it).
    Updated,
}

impl EventType {
    /// Every type, in the order of their stored codes: append only.
    pub const ALL: [EventType; 11] = [
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
        EventType::Updated,
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
            EventType::Updated => "updated",
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
    /// Who reports it ([`validate_source`]).
    pub source: String,
    /// The timeout asked for, in ms, when the end was given as one (escalation lengthens
    /// only those).
    pub timeout: Option<i64>,
    /// The evidence the source keeps with its live report ([`LiveReport::details`]).
    pub details: Details,
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
            provenance: Provenance::first(&self.source, now),
            revision: 0,
            escalated: None,
        }
    }
}

/// What an update of an item (`PATCH`) sets; `None` leaves it as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ItemChange {
    /// The new end (unix ms, in the future), or [`PERMANENT`].
    pub end: Option<i64>,
    pub action: Option<Action>,
    /// A cause to append (merged as an add's is).
    pub cause: Option<String>,
}

/// Checks a source (a request's `Blocklist-Source`, an element's `source`): 1–128 bytes of
/// UTF-8 and no control characters, like an id. The error text completes "source …".
pub fn validate_source(source: &str) -> Result<(), String> {
    validate_text(source, MAX_SOURCE_BYTES)
}

/// Checks an id (from a body or a decoded path): 1–256 bytes of UTF-8 and no control
/// characters. Everything else (`/`, spaces, `%`, non-ASCII) is allowed. The error text
/// completes "id …".
pub fn validate_id(id: &str) -> Result<(), String> {
    validate_text(id, MAX_ID_BYTES)
}

/// 1 to `limit` bytes of UTF-8 and no control characters.
fn validate_text(id: &str, limit: usize) -> Result<(), String> {
    if id.is_empty() {
        return Err("must not be empty".into());
    }
    if id.len() > limit {
        return Err(format!(
            "is {} bytes long; the limit is {limit} bytes of UTF-8",
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
mod tests;
