//! Export and import as JSON lines: one record per item or registration.
//!
//! ```text
//! {"type":"item","kind":"node","id":"n1","action":"MARK_BLOCKED","startTimestamp":1,"endTimestamp":2,"cause":"disk"}
//! {"type":"registration","id":"tm-1","node":"n1"}
//! ```
//!
//! Items keep their `startTimestamp`, so an export/import round trip reproduces the store.
//! Import parses and checks the whole input before writing anything.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::listing::Listing;
use crate::model::{validate_id, Item, Kind, MAX_MERGED_CAUSE_BYTES};
use crate::store::{self, Store};

/// One line of an export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum Record {
    Item {
        kind: Kind,
        #[serde(flatten)]
        item: Item,
    },
    Registration {
        id: String,
        node: String,
    },
}

/// Every active item at `now` (task managers, then nodes, each by id) and every
/// registration, as JSON lines, produced in chunks (`GET /blocklist/export` streams it).
pub fn export_listing(now: i64) -> Listing {
    Listing::new(now)
        .items(Kind::TaskManager, item_line, b"")
        .items(Kind::Node, item_line, b"")
        .registrations(registration_line, b"")
}

/// The whole export at once, as [`export_listing`] produces it.
pub fn export(store: &Store, now: i64) -> store::Result<String> {
    let bytes = export_listing(now).collect(store)?;
    Ok(String::from_utf8(bytes).expect("JSON is UTF-8"))
}

#[expect(
    clippy::unnecessary_wraps,
    reason = "the signature of every listing producer"
)]
fn item_line(_: &Store, kind: Kind, item: Item, out: &mut Vec<u8>) -> store::Result<()> {
    write_record(out, &Record::Item { kind, item });
    Ok(())
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
    pub items: Vec<(Kind, Item)>,
    pub registrations: Vec<(String, String)>,
}

/// Parses and checks an export; errors name the line.
pub fn parse(text: &str) -> Result<Parsed, Vec<String>> {
    let mut items = BTreeMap::new();
    let mut registrations = BTreeMap::new();
    let mut errors = Vec::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let n = n + 1;
        match serde_json::from_str::<Record>(line) {
            Err(e) => errors.push(format!("line {n}: {e}")),
            Ok(Record::Item { kind, item }) => {
                let checks = [
                    validate_id(&item.id).err().map(|e| format!("id {e}")),
                    (item.cause.len() > MAX_MERGED_CAUSE_BYTES).then(|| "cause is too long".into()),
                    (item.end_timestamp < 0).then(|| "endTimestamp is negative".into()),
                ];
                match checks.into_iter().flatten().next() {
                    Some(e) => errors.push(format!("line {n}: {e}")),
                    None => {
                        items.insert((kind, item.id.clone()), item);
                    }
                }
            }
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
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Parsed {
        items: items
            .into_iter()
            .map(|((kind, _), item)| (kind, item))
            .collect(),
        registrations: registrations.into_iter().collect(),
    })
}

/// What an import did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Imported {
    pub items: usize,
    pub skipped_expired: usize,
    pub registrations: usize,
    pub cleared: usize,
}

/// Items (or registrations) per transaction.
const CHUNK: usize = 10_000;

/// Loads parsed records; with `replace`, first removes every item and registration.
/// Applied in transactions of 10,000 records: re-running a merge import is harmless.
pub async fn import(
    store: &Store,
    parsed: Parsed,
    replace: bool,
    now: i64,
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
        for chunk in items.chunks(CHUNK) {
            done.cleared += store.clear(chunk.to_vec(), Vec::new()).await?;
        }
        for chunk in tms.chunks(CHUNK) {
            store.clear(Vec::new(), chunk.to_vec()).await?;
        }
    }
    let total = parsed.items.len();
    for chunk in parsed.items.chunks(CHUNK) {
        done.items += store.import(chunk.to_vec(), !replace).await?;
    }
    done.skipped_expired = total - done.items;
    for chunk in parsed.registrations.chunks(CHUNK) {
        store.register(chunk.to_vec()).await?;
        done.registrations += chunk.len();
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
    fn bad_lines_are_named() {
        let text = "{\"type\":\"item\"}\nnot json\n{\"type\":\"registration\",\"id\":\"\",\"node\":\"n\"}\n";
        let errors = parse(text).unwrap_err();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].starts_with("line 1:"));
        assert!(errors[1].starts_with("line 2:"));
        assert!(errors[2].starts_with("line 3:"));
    }
}
