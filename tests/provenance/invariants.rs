//! Random sequences of adds (new, merged, escalated), updates, removals and expiries of
//! a few ids, on the store in-process with a history of 2 per id and a 1 ms sweeper:
//! every block that ended is the newest past block of its id until 2 more end, no id
//! keeps more than 2, and once the sweeper settles the store passes `verify` (every
//! expiry entry matches its item's end, the counts match the items) and the trees of
//! provenance agree with the items (kept reports, history counters, history index).
//!
//! Requests carry a request time up to 40 ms before they commit, as a request validated
//! before it queued behind others does: an end can have come by then, even one the
//! sweeper has passed.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use blocklistd::model::{Action, ItemChange, Kind, NewItem, PERMANENT};
use blocklistd::policy::{Escalation, Policy};
use blocklistd::provenance::MAX_REPORTS;
use blocklistd::store::{codec, keys, Mode, Store, StoreConfig};
use proptest::prelude::*;

const PER_ID: u64 = 2;

#[derive(Debug, Clone)]
enum Op {
    Add {
        kind: Kind,
        ids: Vec<u8>,
        evacuate: bool,
        timeout_ms: Option<i64>,
        merge: bool,
        lag: i64,
    },
    Patch {
        kind: Kind,
        id: u8,
        end: NewEnd,
        evacuate: Option<bool>,
        cause: bool,
        lag: i64,
    },
    Remove(Kind, u8),
    Wait(u64),
}

/// What an update does to the end.
#[derive(Debug, Clone, Copy)]
enum NewEnd {
    Keep,
    Permanent,
    /// This many ms after the request time.
    In(i64),
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![Just(Kind::Node), Just(Kind::TaskManager)]
}

fn lag() -> impl Strategy<Value = i64> {
    prop_oneof![3 => Just(0i64), 1 => 1i64..40]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (
            kind(),
            prop::collection::vec(0u8..3, 1..4),
            any::<bool>(),
            prop_oneof![Just(None), (1i64..30).prop_map(Some), Just(Some(3_600_000))],
            any::<bool>(),
            lag(),
        )
            .prop_map(|(kind, ids, evacuate, timeout_ms, merge, lag)| Op::Add {
                kind,
                ids,
                evacuate,
                timeout_ms,
                merge,
                lag
            }),
        3 => (
            kind(),
            0u8..3,
            prop_oneof![
                Just(NewEnd::Keep),
                Just(NewEnd::Permanent),
                (1i64..30).prop_map(NewEnd::In),
                Just(NewEnd::In(3_600_000)),
            ],
            prop::option::of(any::<bool>()),
            any::<bool>(),
            lag(),
        )
            .prop_map(|(kind, id, end, evacuate, cause, lag)| Op::Patch {
                kind,
                id,
                end,
                evacuate,
                cause,
                lag
            }),
        2 => (kind(), 0u8..3).prop_map(|(kind, id)| Op::Remove(kind, id)),
        2 => (0u64..25).prop_map(Op::Wait),
    ]
}

fn action(evacuate: bool) -> Action {
    if evacuate {
        Action::MarkBlockedAndEvacuateTasks
    } else {
        Action::MarkBlocked
    }
}

/// The guardrails off, and escalation on (short), so escalated adds are among the ops.
fn policy() -> Policy {
    let mut policy = Policy::OFF;
    policy.escalation = Some(Escalation {
        factor: 2,
        max_secs: 1,
        window_secs: 60,
    });
    policy
}

const KINDS: [Kind; 2] = [Kind::Node, Kind::TaskManager];

/// When each id's past blocks ended, newest first, as the store serves them; asserts
/// that none keeps more than [`PER_ID`].
async fn histories(store: &Store) -> BTreeMap<(String, String), Vec<i64>> {
    let mut out = BTreeMap::new();
    for kind in KINDS {
        for id in 0..3u8 {
            let id = format!("i{id}");
            let (reader, read_id) = (store.clone(), id.clone());
            let past = store
                .read_durably(move |seen| reader.past_blocks(kind, &read_id, seen))
                .await
                .unwrap();
            assert!(
                past.len() as u64 <= PER_ID,
                "{} {id:?} keeps {} past blocks: {past:?}",
                kind.plural(),
                past.len()
            );
            let ends = past.iter().map(|p| p.ended.timestamp).collect();
            out.insert((kind.plural().to_owned(), id), ends);
        }
    }
    out
}

/// The furthest a short block can end from its request: an escalated timeout's cap
/// ([`policy`]), with room for the request lag and a slow machine.
const SHORT_HORIZON_MS: i64 = 5_000;

/// Waits until every short block has ended and been announced: no stored item of the
/// kind both inactive and counted, and no active one ending within [`SHORT_HORIZON_MS`]
/// (the rest end in an hour or never). Checking only the first would let a short block
/// expire between the test's read of the log and its read of the histories.
async fn settle(store: &Store) {
    let deadline = std::time::Instant::now() + Duration::from_millis(2 * SHORT_HORIZON_MS as u64);
    loop {
        let now = store.now();
        let mut active = 0u64;
        let mut ending_soon = Vec::new();
        for kind in KINDS {
            for item in store.list(kind, now).unwrap() {
                active += 1;
                if item.end_timestamp != PERMANENT && item.end_timestamp < now + SHORT_HORIZON_MS {
                    ending_soon.push((kind, item.id, item.end_timestamp - now));
                }
            }
        }
        if store.item_counts().iter().sum::<u64>() == active && ending_soon.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the counts keep {:?} for {active} active items; ending soon: {ending_soon:?}",
            store.item_counts()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The trees of provenance against the items, on the closed data dir: each item keeps
/// exactly its most recent reports, numbered by arrival; every history counter spans
/// exactly its id's entries, at most [`PER_ID`]; every entry has its index key and
/// every index key its entry.
fn provenance_trees_agree(dir: &std::path::Path) {
    let db = blocklistd::store::sled_config(dir).unwrap().open().unwrap();
    let items = db.open_tree("items").unwrap();
    let reports = db.open_tree("reports").unwrap();
    let history = db.open_tree("history").unwrap();
    let ends = db.open_tree("history_ends").unwrap();
    let mut expected_reports = Vec::new();
    for entry in &items {
        let (key, bytes) = entry.unwrap();
        let (kind, id) = keys::parse_item_key(&key).unwrap();
        let block = codec::decode_block(&bytes).unwrap();
        let total = block.provenance.reports;
        for n in total.saturating_sub(MAX_REPORTS)..total {
            let key = keys::report_key(kind, id, n);
            // A block's only report may be implied by the block instead of stored.
            if total > 1 || reports.get(&key).unwrap().is_some() {
                expected_reports.push(key);
            }
        }
    }
    expected_reports.sort();
    let stored_reports: Vec<Vec<u8>> = reports.iter().keys().map(|k| k.unwrap().to_vec()).collect();
    assert_eq!(stored_reports, expected_reports, "reports kept");

    let mut counters: HashMap<Vec<u8>, (u64, u64)> = HashMap::new();
    let mut entries: Vec<Vec<u8>> = Vec::new();
    let mut indexed: Vec<Vec<u8>> = Vec::new();
    for entry in &history {
        let (key, bytes) = entry.unwrap();
        if key.contains(&0) {
            // kind tag ++ id ++ 0x00 ++ n (8 bytes)
            let (_, ending) = codec::decode_past(&bytes).unwrap();
            let kind = keys::kind_from_tag(key[0]).unwrap();
            let id = std::str::from_utf8(&key[1..key.len() - 9]).unwrap();
            let n = keys::parse_number(&key).unwrap();
            assert_eq!(key.as_ref(), keys::past_key(kind, id, n).as_slice());
            indexed.push(keys::past_end_key(ending.timestamp, kind, id, n));
            entries.push(key.to_vec());
        } else {
            counters.insert(key.to_vec(), codec::decode_history_count(&bytes).unwrap());
        }
    }
    let mut spanned: Vec<Vec<u8>> = Vec::new();
    for (key, (first, next)) in &counters {
        let (kind, id) = keys::parse_item_key(key).unwrap();
        assert!(next - first <= PER_ID, "{key:?} spans {first}..{next}");
        spanned.extend((*first..*next).map(|n| keys::past_key(kind, id, n)));
    }
    spanned.sort();
    assert_eq!(entries, spanned, "every counter spans exactly its entries");
    indexed.sort();
    let stored_ends: Vec<Vec<u8>> = ends.iter().keys().map(|k| k.unwrap().to_vec()).collect();
    assert_eq!(
        stored_ends, indexed,
        "history_ends indexes every entry, only them"
    );
}

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut config = StoreConfig::new(&data);
    config.fsync = false;
    config.new_policy = policy();
    config.history.per_id = PER_ID;
    let store = Store::open(&config).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let sweeper = tokio::spawn(blocklistd::sweeper::run(
            store.clone(),
            Duration::from_millis(1),
            blocklistd::sweeper::Reclaim {
                idle: Duration::from_millis(50),
                min_rate: 1000,
            },
            std::sync::Arc::default(),
        ));
        let writer = store.with_mode(Mode::Commit);
        for op in ops {
            match op {
                Op::Add {
                    kind,
                    ids,
                    evacuate,
                    timeout_ms,
                    merge,
                    lag,
                } => {
                    let now = store.now() - lag;
                    let items = ids
                        .iter()
                        .map(|id| NewItem {
                            id: format!("i{id}"),
                            action: action(evacuate),
                            end: timeout_ms.map_or(PERMANENT, |t| now + t),
                            cause: format!("c{id}"),
                            allow_merge: merge,
                            source: "prop".into(),
                            timeout: timeout_ms,
                            details: blocklistd::model::Details::new(),
                        })
                        .collect();
                    writer.add(kind, items, now).await.unwrap();
                }
                Op::Patch {
                    kind,
                    id,
                    end,
                    evacuate,
                    cause,
                    lag,
                } => {
                    let now = store.now() - lag;
                    let mut change = ItemChange {
                        end: match end {
                            NewEnd::Keep => None,
                            NewEnd::Permanent => Some(PERMANENT),
                            NewEnd::In(ms) => Some(now + ms),
                        },
                        action: evacuate.map(action),
                        cause: cause.then(|| "patched".to_owned()),
                    };
                    if change == ItemChange::default() {
                        change.cause = Some("patched".to_owned());
                    }
                    writer
                        .update(
                            kind,
                            format!("i{id}"),
                            change,
                            None,
                            "prop".into(),
                            now,
                            None,
                        )
                        .await
                        .unwrap();
                }
                Op::Remove(kind, id) => {
                    writer.remove(kind, format!("i{id}")).await.unwrap();
                }
                Op::Wait(ms) => {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
            }
            histories(&store).await;
        }
        settle(&store).await;
        // Every block that ended is in its id's history, newest first, up to the bound:
        // the log's `removed` and `expired` events of each id, in reverse.
        let events = store.events_between(0, store.revision(), 100_000).unwrap();
        let mut ended: BTreeMap<(String, String), Vec<i64>> = BTreeMap::new();
        for event in &events {
            let name = event.event.as_str();
            if name != "removed" && name != "expired" {
                continue;
            }
            if let blocklistd::model::Change::Item { kind, item } = &event.change {
                ended
                    .entry((kind.plural().to_owned(), item.id.clone()))
                    .or_default()
                    .push(event.at);
            }
        }
        let kept = histories(&store).await;
        for (key, ends) in &kept {
            let mut expected: Vec<i64> = ended.get(key).cloned().unwrap_or_default();
            expected.reverse();
            expected.truncate(PER_ID as usize);
            assert_eq!(ends, &expected, "{key:?}: the history of what ended");
        }
        sweeper.abort();
        let _ = sweeper.await;
        let problems = store.verify().unwrap();
        assert!(problems.is_empty(), "{problems:?}");
    });
    store.shutdown().unwrap();
    drop(store);
    super::wait_until_unlocked(&data);
    provenance_trees_agree(&data);
}

/// An update validated while its new end was still ahead, committed after the sweeper
/// passed that end (it announced an item ending later): the update announces it, as an
/// add would (the sweeper never looks behind its watermark). Its `expired` event follows
/// its `updated` one, it leaves the counts, it is in the history, and `verify` is clean.
#[test]
fn an_update_to_an_end_the_sweeper_has_passed_announces_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut config = StoreConfig::new(&data);
    config.fsync = false;
    config.new_policy = Policy::OFF;
    let store = Store::open(&config).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let writer = store.with_mode(Mode::Commit);
        let now = store.now();
        let block = |id: &str, timeout: i64| NewItem {
            id: id.into(),
            action: Action::MarkBlocked,
            end: now + timeout,
            cause: "c".into(),
            allow_merge: false,
            source: "prop".into(),
            timeout: Some(timeout),
            details: blocklistd::model::Details::new(),
        };
        let kind = Kind::TaskManager;
        writer
            .add(kind, vec![block("a", 10), block("b", 3_600_000)], now)
            .await
            .unwrap();
        let deadline = std::time::Instant::now() + super::DEADLINE;
        while store.now() <= now + 10 {
            assert!(std::time::Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let (expired, _) = store.announce(store.now(), 100).await.unwrap();
        assert_eq!(expired.len(), 1, "a is announced: {expired:?}");
        let before = store.revision();
        // Asked for at `now + 1`, when `now + 5` was still ahead; a ends after it.
        let change = ItemChange {
            end: Some(now + 5),
            ..ItemChange::default()
        };
        writer
            .update(kind, "b".into(), change, None, "late".into(), now + 1, None)
            .await
            .unwrap();
        let events = store.events_between(before, store.revision(), 10).unwrap();
        let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
        assert_eq!(names, ["updated", "expired"], "{events:?}");
        assert_eq!(store.item_counts().iter().sum::<u64>(), 0);
        let reader = store.clone();
        let past = store
            .read_durably(move |seen| reader.past_blocks(kind, "b", seen))
            .await
            .unwrap();
        assert_eq!(past.len(), 1, "{past:?}");
        assert_eq!(past[0].item.end_timestamp, now + 5);
        let problems = store.verify().unwrap();
        assert!(problems.is_empty(), "{problems:?}");
    });
    store.shutdown().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test]
    fn history_stays_bounded_and_every_index_matches(ops in prop::collection::vec(op(), 1..40)) {
        run(ops);
    }
}
