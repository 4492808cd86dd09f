//! Export and import as JSON lines: the guardrail policy, then one record per allowlist
//! entry, item and registration.
//!
//! ```text
//! {"type":"policy","nodes":{…},"taskManagers":{…},"minRegistered":10,…}
//! {"type":"allowlist","kind":"node","id":"db-","prefix":true,"comment":"databases",…}
//! {"type":"item","kind":"node","id":"n1","action":"MARK_BLOCKED","startTimestamp":1,"endTimestamp":2,"cause":"disk","source":"d","reportCount":1,…,"reports":[…]}
//! {"type":"registration","id":"tm-1","node":"n1"}
//! {"type":"past","kind":"node","id":"n0",…,"ended":{"how":"expired","timestamp":3}}
//! ```
//!
//! Items keep their `startTimestamp`, their provenance and their kept reports (newest
//! first, as `GET /blocklist/{kind}/{id}` lists them), and past blocks follow oldest first
//! per id, so an export/import round trip reproduces the store.
//! Import parses and checks the whole input before writing anything.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::allowlist::Entry;
use crate::listing::Listing;
use crate::model::{
    validate_id, validate_source, Item, Kind, MAX_CAUSE_BYTES, MAX_MERGED_CAUSE_BYTES,
};
use crate::policy::Policy;
use crate::progress::{Progress, Unit};
use crate::provenance::{Ending, PastBlock, Report, MAX_REASON_BYTES, MAX_REPORTS};
use crate::store::{self, Store};

/// One line of an export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum Record {
    Item {
        kind: Kind,
        /// The item's kept reports, newest first.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        reports: Vec<Report>,
        #[serde(flatten)]
        item: Item,
    },
    /// A past block of an id: the item as it was, and how it ended (a [`PastBlock`]'s
    /// fields, flattened here as the item's are above: serde refuses unknown fields of a
    /// flattened struct only one level down).
    Past {
        kind: Kind,
        ended: Ending,
        #[serde(flatten)]
        item: Item,
    },
    Registration {
        id: String,
        node: String,
    },
    Policy {
        #[serde(flatten)]
        policy: Policy,
    },
    Allowlist {
        #[serde(flatten)]
        entry: Entry,
    },
}

/// The lines an export starts with: the policy and every allowlist entry in force.
pub fn export_head(policy: &Policy, entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    write_record(
        &mut out,
        &Record::Policy {
            policy: policy.clone(),
        },
    );
    out.extend(export_head_entries(entries));
    out
}

/// The allowlist lines of [`export_head`].
pub fn export_head_entries(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in entries {
        write_record(
            &mut out,
            &Record::Allowlist {
                entry: entry.clone(),
            },
        );
    }
    out
}

/// `head` ([`export_head`]), then every active item at `now` (task managers, then nodes,
/// each by id) and every registration, as JSON lines, produced in chunks
/// (`GET /blocklist/export` streams it).
pub fn export_listing(head: Vec<u8>, now: i64) -> Listing {
    Listing::new(now)
        .text(head)
        .items(Kind::TaskManager, item_line, b"")
        .items(Kind::Node, item_line, b"")
        .registrations(registration_line, b"")
        .past_blocks(past_line)
}

/// The whole export at once, as [`export_listing`] produces it.
pub fn export(store: &Store, now: i64) -> store::Result<String> {
    let bytes = export_listing(stored_head(store, now)?, now).collect(store)?;
    Ok(String::from_utf8(bytes).expect("JSON is UTF-8"))
}

/// An export collected in one buffer, and what it holds.
#[derive(Debug, Default)]
pub struct Exported {
    pub text: Vec<u8>,
    pub items: u64,
    pub registrations: u64,
}

/// The whole export, as [`export`], reporting each record to `progress`: a stage of items
/// (as many as the store's item counts say, which also count expired items not yet
/// announced: the export skips those) and then one of registrations (not counted anywhere,
/// so without a total).
pub fn export_reporting(
    store: &Store,
    now: i64,
    progress: &dyn Progress,
) -> store::Result<Exported> {
    let items: u64 = store.item_counts().iter().sum();
    progress.stage("exporting items", Unit::Count("records"), Some(items));
    let mut listing = export_listing(stored_head(store, now)?, now);
    let mut done = Exported::default();
    loop {
        let start = done.text.len();
        let finished = listing.next_chunk(store, &mut done.text)?;
        // Items come first: a chunk holds items, then perhaps the first registrations.
        for line in done.text[start..].split(|&b| b == b'\n') {
            if line.is_empty() {
                continue;
            }
            if HEAD_TAGS.iter().any(|tag| line.starts_with(tag)) {
                continue;
            }
            if line.starts_with(REGISTRATION_TAG) {
                if done.registrations == 0 {
                    progress.stage("exporting registrations", Unit::Count("records"), None);
                }
                done.registrations += 1;
            } else {
                done.items += 1;
            }
            progress.advance(1);
        }
        if finished {
            return Ok(done);
        }
    }
}

/// The head of an export of a stopped daemon's store.
fn stored_head(store: &Store, now: i64) -> store::Result<Vec<u8>> {
    Ok(export_head(
        &store.stored_policy()?,
        &store.stored_allowlist(None, now)?,
    ))
}

/// How every head line begins.
const HEAD_TAGS: [&[u8]; 2] = [br#"{"type":"policy""#, br#"{"type":"allowlist""#];

/// How every registration line begins: serde writes an internally tagged enum's tag first.
const REGISTRATION_TAG: &[u8] = br#"{"type":"registration""#;

fn item_line(store: &Store, kind: Kind, item: Item, out: &mut Vec<u8>) -> store::Result<()> {
    // An export waits for the horizon of its whole scan before its last chunk.
    let reports = store.reports(kind, &item.id, &mut store.seen())?;
    write_record(
        out,
        &Record::Item {
            kind,
            reports,
            item,
        },
    );
    Ok(())
}

fn past_line(kind: Kind, past: PastBlock, out: &mut Vec<u8>) {
    let PastBlock { item, ended } = past;
    write_record(out, &Record::Past { kind, ended, item });
}

fn registration_line(id: &str, node: &str, out: &mut Vec<u8>) {
    write_record(
        out,
        &Record::Registration {
            id: id.to_owned(),
            node: node.to_owned(),
        },
    );
}

/// Appends `record` as one line.
pub fn write_record(out: &mut Vec<u8>, record: &Record) {
    serde_json::to_writer(&mut *out, record).expect("records serialize");
    out.push(b'\n');
}

/// What an import file holds, checked and de-duplicated (a later line for the same item or
/// task manager wins).
#[derive(Debug, Default)]
pub struct Parsed {
    pub policy: Option<Policy>,
    pub allowlist: Vec<Entry>,
    pub items: Vec<(Kind, Item)>,
    /// The kept reports of items, newest first.
    pub reports: BTreeMap<(Kind, String), Vec<Report>>,
    /// Past blocks, oldest first per id.
    pub past: Vec<(Kind, PastBlock)>,
    pub registrations: Vec<(String, String)>,
}

/// Parses and checks an export; errors name the line.
pub fn parse(text: &str) -> Result<Parsed, Vec<String>> {
    parse_reporting(text, &())
}

/// Lines between two reports of [`parse_reporting`].
const LINES_PER_REPORT: usize = 1024;

/// [`parse`], reporting to `progress` the bytes parsed (in the caller's stage).
pub fn parse_reporting(text: &str, progress: &dyn Progress) -> Result<Parsed, Vec<String>> {
    let mut items = BTreeMap::new();
    let mut reports = BTreeMap::new();
    let mut past = Vec::new();
    let mut registrations = BTreeMap::new();
    let mut policy = None;
    let mut allowlist = BTreeMap::new();
    let mut errors = Vec::new();
    let mut unreported = 0;
    // As `str::lines` splits (LF or CRLF), keeping count of the bytes.
    for (n, raw) in text.split_inclusive('\n').enumerate() {
        unreported += raw.len();
        if n % LINES_PER_REPORT == LINES_PER_REPORT - 1 {
            progress.advance(unreported as u64);
            unreported = 0;
        }
        let line = match raw.strip_suffix('\n') {
            Some(line) => line.strip_suffix('\r').unwrap_or(line),
            None => raw,
        };
        if line.trim().is_empty() {
            continue;
        }
        let n = n + 1;
        match serde_json::from_str::<Record>(line) {
            Err(e) => errors.push(format!("line {n}: {e}")),
            Ok(Record::Item {
                kind,
                reports: kept,
                item,
            }) => match item_problem(&item, &kept) {
                Some(e) => errors.push(format!("line {n}: {e}")),
                None => {
                    reports.insert((kind, item.id.clone()), kept);
                    items.insert((kind, item.id.clone()), item);
                }
            },
            Ok(Record::Past { kind, ended, item }) => {
                match item_problem(&item, &[]).or_else(|| ending_problem(&ended)) {
                    Some(e) => errors.push(format!("line {n}: {e}")),
                    None => past.push((kind, PastBlock { item, ended })),
                }
            }
            Ok(Record::Policy { policy: p }) => {
                let problems = p.problems();
                if problems.is_empty() {
                    policy = Some(p);
                } else {
                    errors.push(format!("line {n}: {}", problems.join("; ")));
                }
            }
            Ok(Record::Allowlist { entry }) => match validate_id(&entry.id) {
                Err(e) => errors.push(format!("line {n}: id {e}")),
                Ok(()) => {
                    allowlist.insert((entry.kind, entry.id.clone()), entry);
                }
            },
            Ok(Record::Registration { id, node }) => {
                match validate_id(&id).and_then(|()| validate_id(&node)) {
                    Err(e) => errors.push(format!("line {n}: id or node {e}")),
                    Ok(()) => {
                        registrations.insert(id, node);
                    }
                }
            }
        }
    }
    progress.advance(unreported as u64);
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Parsed {
        policy,
        allowlist: allowlist.into_values().collect(),
        items: items
            .into_iter()
            .map(|((kind, _), item)| (kind, item))
            .collect(),
        reports,
        past,
        registrations: registrations.into_iter().collect(),
    })
}

/// What makes an item record (with its kept reports) one the store cannot take.
fn item_problem(item: &Item, reports: &[Report]) -> Option<String> {
    let checks = [
        validate_id(&item.id).err().map(|e| format!("id {e}")),
        (item.cause.len() > MAX_MERGED_CAUSE_BYTES).then(|| "cause is too long".into()),
        (item.end_timestamp < 0).then(|| "endTimestamp is negative".into()),
        validate_source(&item.source)
            .err()
            .map(|e| format!("source {e}")),
        (reports.len() as u64 > MAX_REPORTS.min(item.report_count))
            .then(|| "more reports than the item keeps".into()),
        reports.iter().find_map(|r| {
            validate_source(&r.source)
                .err()
                .map(|e| format!("a report's source {e}"))
                .or_else(|| {
                    (r.cause.len() > MAX_CAUSE_BYTES).then(|| "a report's cause is too long".into())
                })
        }),
    ];
    checks.into_iter().flatten().next()
}

/// What makes how a past block ended one the store cannot take: the bounds an unblock's
/// source and reason have when they arrive over HTTP.
fn ending_problem(ended: &Ending) -> Option<String> {
    let source = ended.source.as_deref().and_then(|source| {
        validate_source(source)
            .err()
            .map(|e| format!("ended.source {e}"))
    });
    source.or_else(|| {
        ended
            .reason
            .as_ref()
            .filter(|reason| reason.len() > MAX_REASON_BYTES)
            .map(|_| format!("ended.reason is longer than {MAX_REASON_BYTES} bytes"))
    })
}

/// What an import did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Imported {
    pub allowlist: usize,
    pub items: usize,
    pub skipped_expired: usize,
    pub past: usize,
    pub registrations: usize,
    pub cleared: usize,
}

/// Items (or registrations) per transaction.
const CHUNK: usize = 10_000;

impl Parsed {
    /// Every record: the policy, allowlist entries, items and registrations.
    pub fn records(&self) -> usize {
        usize::from(self.policy.is_some())
            + self.allowlist.len()
            + self.past.len()
            + self.items.len()
            + self.registrations.len()
    }
}

/// Loads parsed records; with `replace`, first removes every item and registration.
/// Applied in transactions of 10,000 records: re-running a merge import is harmless.
pub async fn import(
    store: &Store,
    parsed: Parsed,
    replace: bool,
    now: i64,
) -> store::Result<Imported> {
    import_reporting(store, parsed, replace, now, &()).await
}

/// [`import`], reporting to `progress`: a stage of clearing (with `replace`), then one of
/// writing every record, each with its total.
pub async fn import_reporting(
    store: &Store,
    parsed: Parsed,
    replace: bool,
    now: i64,
    progress: &dyn Progress,
) -> store::Result<Imported> {
    let mut done = Imported::default();
    if replace {
        let mut items = Vec::new();
        for kind in Kind::ALL {
            items.extend(store.list(kind, now)?.into_iter().map(|i| (kind, i.id)));
        }
        let tms: Vec<String> = store
            .registrations()?
            .into_iter()
            .map(|(tm, _)| tm)
            .collect();
        let total = (items.len() + tms.len()) as u64;
        progress.stage("clearing", Unit::Count("records"), Some(total));
        for chunk in items.chunks(CHUNK) {
            done.cleared += store.clear(chunk.to_vec(), Vec::new()).await?;
            progress.advance(chunk.len() as u64);
        }
        for chunk in tms.chunks(CHUNK) {
            store.clear(Vec::new(), chunk.to_vec()).await?;
            progress.advance(chunk.len() as u64);
        }
        for entry in store.stored_allowlist(None, now)? {
            store.remove_allow(entry.kind, entry.id).await?;
        }
    }
    let records = parsed.records() as u64;
    progress.stage("importing", Unit::Count("records"), Some(records));
    if let Some(policy) = parsed.policy {
        store.set_policy(policy).await?;
        progress.advance(1);
    }
    // Before the items: an entry lifts the blocks it covers (an export holds none).
    for entry in parsed.allowlist {
        if entry.is_active(now) {
            store.put_allow(entry).await?;
            done.allowlist += 1;
        }
        progress.advance(1);
    }
    let total = parsed.items.len();
    let mut reports = parsed.reports;
    for chunk in parsed.items.chunks(CHUNK) {
        let kept = chunk
            .iter()
            .filter_map(|(kind, item)| {
                let key = (*kind, item.id.clone());
                reports.remove(&key).map(|r| (key, r))
            })
            .collect();
        done.items += store
            .import_with(chunk.to_vec(), kept, Vec::new(), !replace)
            .await?;
        progress.advance(chunk.len() as u64);
    }
    done.skipped_expired = total - done.items;
    for chunk in parsed.past.chunks(CHUNK) {
        store
            .import_with(Vec::new(), BTreeMap::new(), chunk.to_vec(), !replace)
            .await?;
        done.past += chunk.len();
        progress.advance(chunk.len() as u64);
    }
    for chunk in parsed.registrations.chunks(CHUNK) {
        store.register(chunk.to_vec()).await?;
        done.registrations += chunk.len();
        progress.advance(chunk.len() as u64);
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_later_lines_win() {
        let text = concat!(
            r#"{"type":"item","kind":"node","id":"n1","action":"MARK_BLOCKED","startTimestamp":1,"endTimestamp":9,"cause":"a"}"#,
            "\n",
            r#"{"type":"registration","id":"tm","node":"n1"}"#,
            "\n\n",
            r#"{"type":"item","kind":"node","id":"n1","action":"MARK_BLOCKED","startTimestamp":1,"endTimestamp":9,"cause":"b"}"#,
            "\n",
        );
        let parsed = parse(text).unwrap();
        assert_eq!(parsed.items.len(), 1);
        assert_eq!(parsed.items[0].1.cause, "b");
        assert_eq!(parsed.registrations, [("tm".to_owned(), "n1".to_owned())]);
    }

    #[test]
    fn registration_lines_begin_with_their_tag() {
        let mut line = Vec::new();
        write_record(
            &mut line,
            &Record::Registration {
                id: "tm".into(),
                node: "n".into(),
            },
        );
        assert!(line.starts_with(REGISTRATION_TAG), "{line:?}");
    }

    #[test]
    fn parsing_reports_every_byte() {
        struct Sum(std::sync::atomic::AtomicU64);
        impl Progress for Sum {
            fn stage(&self, _: &'static str, _: Unit, _: Option<u64>) {}
            fn advance(&self, n: u64) {
                self.0.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let line = "{\"type\":\"registration\",\"id\":\"tm\",\"node\":\"n1\"}\n";
        let text = line.repeat(3 * LINES_PER_REPORT + 7) + "\n";
        let sum = Sum(std::sync::atomic::AtomicU64::new(0));
        parse_reporting(&text, &sum).unwrap();
        assert_eq!(sum.0.into_inner(), text.len() as u64);
    }

    #[test]
    fn bad_lines_are_named() {
        let text = "{\"type\":\"item\"}\nnot json\n{\"type\":\"registration\",\"id\":\"\",\"node\":\"n\"}\n";
        let errors = parse(text).unwrap_err();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].starts_with("line 1:"));
        assert!(errors[1].starts_with("line 2:"));
        assert!(errors[2].starts_with("line 3:"));
    }
}
