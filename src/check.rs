//! The effective "is it blocked?" question a scheduler asks on every allocation: a task
//! manager is blocked if it is blocked itself or its node is.
//!
//! A check is at most three point reads (the task manager's item, its registration, its
//! node's item); it never scans, and it waits only when a key it read is being changed by
//! a group commit not yet durable — until that group is (see `store::durable`): a verdict
//! is never one a crash could take back. A [`Checker`] keeps
//! recent verdicts, so a scheduler asking about the same task managers over and over is
//! answered from memory: a kept verdict is served until the committer, about to change a
//! key it was read from, drops it (exactly: a storm of writes to other keys drops none) or
//! an item it shows ends; it is kept only once durable, so a hit never waits, and served
//! only once no change after its read shows in the stamps of its keys.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use quick_cache::sync::Cache;
use quick_cache::Weighter;
use serde::Serialize;
use utoipa::ToSchema;

use crate::model::{Action, Item, Kind};
use crate::store::{ReadMark, Result, Seen, Stale, Store, Watched};

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

/// A verdict as a [`Checker`] answers it: shared, with its JSON built once, on first use.
#[derive(Debug)]
pub struct Checked {
    pub verdict: Verdict,
    json: OnceLock<Bytes>,
    /// Whether its copy in the cache may be served: set once no change to a key it was read
    /// from came after its read ([`Checker::settle`]).
    settled: AtomicBool,
}

impl Checked {
    fn new(verdict: Verdict) -> Arc<Checked> {
        Arc::new(Checked {
            verdict,
            json: OnceLock::new(),
            settled: AtomicBool::new(false),
        })
    }

    /// The verdict as JSON; a kept verdict serialises once however often it is served.
    pub fn json(&self) -> Bytes {
        self.json
            .get_or_init(|| {
                // Strings, bools, numbers and enums only: serialising cannot fail.
                let json = serde_json::to_vec(&self.verdict).expect("a verdict serialises");
                Bytes::from(json)
            })
            .clone()
    }
}

impl Serialize for Checked {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.verdict.serialize(serializer)
    }
}

fn active(
    store: &Store,
    kind: Kind,
    id: &str,
    now: i64,
    seen: &mut Seen,
) -> Result<Option<BlockedBy>> {
    Ok(store.get(kind, id, now, seen)?.map(|block| BlockedBy {
        kind: kind.singular(),
        item: Item::new(id.to_owned(), block),
    }))
}

/// Checks task manager `tm`: its own item, and its node's item when it is registered.
/// `seen` records what the verdict depends on; it may be answered once that is durable.
pub fn task_manager(store: &Store, tm: &str, now: i64, seen: &mut Seen) -> Result<Verdict> {
    let own = active(store, Kind::TaskManager, tm, now, seen)?;
    let node = store.node_of(tm, seen)?;
    let via_node = match &node {
        Some(node) => active(store, Kind::Node, node, now, seen)?,
        None => None,
    };
    let blocked_by = own.into_iter().chain(via_node).collect();
    Ok(Verdict::new(tm.to_owned(), node, blocked_by))
}

/// Checks node `node`: its own item (`seen` as for [`task_manager`]).
pub fn node(store: &Store, node: &str, now: i64, seen: &mut Seen) -> Result<Verdict> {
    let blocked_by = active(store, Kind::Node, node, now, seen)?
        .into_iter()
        .collect();
    Ok(Verdict::new(node.to_owned(), None, blocked_by))
}

/// Answers checks from the store, keeping recent verdicts (see the module docs).
#[derive(Clone)]
pub struct Checker {
    store: Store,
    /// `None` when caching is off.
    kept: Option<Arc<Kept>>,
}

/// Recent verdicts, per kind of check, bounded by their approximate size in bytes.
struct Kept {
    task_managers: Cache<String, KeptVerdict, BySize>,
    nodes: Cache<String, KeptVerdict, BySize>,
}

#[derive(Clone)]
struct KeptVerdict {
    verdict: Arc<Checked>,
    /// When the first item it shows ends (`i64::MAX` when it shows none or only permanent).
    until: i64,
}

/// Weighs a kept verdict by roughly the bytes it holds, so long causes cannot make the
/// cache grow past its budget.
#[derive(Clone)]
struct BySize;

impl Weighter<String, KeptVerdict> for BySize {
    fn weight(&self, key: &String, kept: &KeptVerdict) -> u64 {
        const OVERHEAD: usize = 160;
        let verdict = &kept.verdict.verdict;
        let items: usize = verdict
            .blocked_by
            .iter()
            .map(|b| b.item.id.len() + b.item.cause.len() + 64)
            .sum();
        let node = verdict.node.as_ref().map_or(0, String::len);
        // The key, the verdict's strings, and once more in its JSON.
        (OVERHEAD + key.len() + 2 * (key.len() + node + items)) as u64
    }
}

impl Checker {
    /// A checker keeping up to about `cache_bytes` of verdicts; 0 turns keeping off.
    pub fn new(store: Store, cache_bytes: u64) -> Checker {
        let kept = (cache_bytes > 0).then(|| {
            // Half the budget per kind; the item estimate only sizes the tables up front.
            let half = cache_bytes / 2;
            let estimate = (half / 256).max(16) as usize;
            let kept = Arc::new(Kept {
                task_managers: Cache::with_weighter(estimate, half, BySize),
                nodes: Cache::with_weighter(estimate, half, BySize),
            });
            let stale: Arc<dyn Stale> = kept.clone();
            store.tell_changes(Arc::downgrade(&stale));
            kept
        });
        Checker { store, kept }
    }

    /// Checks task manager `tm` (see [`task_manager`]); answers once nothing the verdict
    /// shows can be taken back by a crash.
    ///
    /// A kept verdict is answered on the calling (async) thread: it reads nothing. A fresh
    /// one is read on the blocking pool, because a point read of sled waits for the whole
    /// of any transaction applying meanwhile (sled's reads and transactions exclude each
    /// other): on an async worker, that wait would hold up every request queued behind it.
    pub async fn task_manager(&self, tm: &str, now: i64) -> Result<Arc<Checked>> {
        if let Some(kept) = self.kept_now(Which::TaskManager, tm, now) {
            return Ok(kept);
        }
        let checker = self.clone();
        let tm = tm.to_owned();
        self.fresh(move |seen| checker.task_manager_now(&tm, now, seen))
            .await
    }

    /// Checks node `node_id` (see [`node`]), durably as [`Checker::task_manager`].
    pub async fn node(&self, node_id: &str, now: i64) -> Result<Arc<Checked>> {
        if let Some(kept) = self.kept_now(Which::Node, node_id, now) {
            return Ok(kept);
        }
        let checker = self.clone();
        let node_id = node_id.to_owned();
        self.fresh(move |seen| checker.node_now(&node_id, now, seen))
            .await
    }

    /// A verdict `read` on the blocking pool, answered once durable and then kept.
    async fn fresh(
        &self,
        read: impl Fn(&mut Seen) -> Result<Found> + Send + Sync + 'static,
    ) -> Result<Arc<Checked>> {
        let found = self.store.read_durably(read).await?;
        Ok(self.keep(found))
    }

    /// The kept verdict for `id`, if there is one still right at `now`: none of the items
    /// it shows has ended (a change to a key it was read from would have dropped it).
    fn kept_now(&self, which: Which, id: &str, now: i64) -> Option<Arc<Checked>> {
        let hit = self.kept.as_ref()?.cache(which).get(id)?;
        // Kept only once durable, and unchanged since: nothing to wait for. One offered but
        // not settled yet may be stale (see [`Checker::keep`]).
        let settled = hit.verdict.settled.load(Ordering::Acquire);
        (settled && hit.until > now).then(|| hit.verdict.clone())
    }

    /// Whether no key `verdict` was read from has been stamped since `mark` (false may also
    /// mean that a key sharing a slot with one was).
    fn unchanged_since(&self, which: Which, verdict: &Verdict, mark: ReadMark) -> bool {
        let unchanged = |key| self.store.unchanged_since(mark, key);
        let id = verdict.id.as_str();
        match which {
            Which::TaskManager => {
                unchanged(Watched::Item(Kind::TaskManager, id))
                    && unchanged(Watched::Registration(id))
                    && verdict
                        .node
                        .as_deref()
                        .is_none_or(|node| unchanged(Watched::Item(Kind::Node, node)))
            }
            Which::Node => unchanged(Watched::Item(Kind::Node, id)),
        }
    }

    /// Checks task manager `tm` now: a kept verdict, or a fresh one whose dependencies
    /// `seen` records. Answer it only once [`Store::confirm`]ed, then [`Checker::keep`] it.
    pub fn task_manager_now(&self, tm: &str, now: i64, seen: &mut Seen) -> Result<Found> {
        self.answer(Which::TaskManager, tm, now, seen, |seen| {
            task_manager(&self.store, tm, now, seen)
        })
    }

    /// Checks node `node_id` now (see [`Checker::task_manager_now`]).
    pub fn node_now(&self, node_id: &str, now: i64, seen: &mut Seen) -> Result<Found> {
        self.answer(Which::Node, node_id, now, seen, |seen| {
            node(&self.store, node_id, now, seen)
        })
    }

    /// The kept verdict for `id` while it is still right at `now`, else a fresh `read`.
    fn answer(
        &self,
        which: Which,
        id: &str,
        now: i64,
        seen: &mut Seen,
        read: impl Fn(&mut Seen) -> Result<Verdict>,
    ) -> Result<Found> {
        if let Some(kept) = self.kept_now(which, id, now) {
            return Ok(Found::Kept(kept));
        }
        // The mark comes first: a change committed after it stamps a larger number.
        let mark = self.store.read_mark();
        let verdict = Checked::new(read(seen)?);
        Ok(Found::Fresh {
            which,
            verdict,
            mark,
        })
    }

    /// The verdict `found` holds, kept for later checks if it is fresh. Call only once what
    /// it was read from is durable: a kept verdict is answered without waiting.
    pub fn keep(&self, found: Found) -> Arc<Checked> {
        match found {
            Found::Kept(verdict) => verdict,
            Found::Fresh {
                which,
                verdict,
                mark,
            } => {
                self.offer(which, &verdict);
                self.settle(which, &verdict, mark);
                verdict
            }
        }
    }

    /// The first half of keeping a fresh verdict: into the cache, not to be served yet.
    ///
    /// Why two halves: a transaction about to change a key stamps it, then drops the
    /// verdicts it may change from the cache, then applies. A verdict read before that
    /// change and offered after the drop is caught only by comparing the stamps with its
    /// mark after the offer ([`Checker::settle`]); until then it must not be served, or a
    /// check that starts after the change was acknowledged could answer from it. Once
    /// settled, any later change finds it in the cache and drops it (the offer and the drop
    /// take the same lock, so one of the two sees the other).
    fn offer(&self, which: Which, verdict: &Arc<Checked>) {
        if let Some(kept) = &self.kept {
            let cache = kept.cache(which);
            cache.insert(verdict.verdict.id.clone(), KeptVerdict::new(verdict));
        }
    }

    /// The second half: served from now on if no key the verdict was read from has been
    /// stamped since its read, else dropped.
    fn settle(&self, which: Which, verdict: &Arc<Checked>, mark: ReadMark) {
        if let Some(kept) = &self.kept {
            if self.unchanged_since(which, &verdict.verdict, mark) {
                verdict.settled.store(true, Ordering::Release);
            } else {
                kept.cache(which).remove(&verdict.verdict.id);
            }
        }
    }
}

/// Which kind of check, for the cache it is kept in.
#[derive(Debug, Clone, Copy)]
pub enum Which {
    TaskManager,
    Node,
}

/// The committer drops exactly the verdicts a transaction may change.
impl Stale for Kept {
    fn task_manager(&self, tm: &str) {
        self.task_managers.remove(tm);
    }

    fn node(&self, node: &str) {
        self.nodes.remove(node);
    }

    fn everything(&self) {
        self.task_managers.clear();
        self.nodes.clear();
    }
}

impl Kept {
    fn cache(&self, which: Which) -> &Cache<String, KeptVerdict, BySize> {
        match which {
            Which::TaskManager => &self.task_managers,
            Which::Node => &self.nodes,
        }
    }
}

/// A verdict as a check found it, before it is answered.
pub enum Found {
    /// Kept from an earlier check and still right: durable already.
    Kept(Arc<Checked>),
    /// Read now: answer it once what it was read from is durable.
    Fresh {
        which: Which,
        verdict: Arc<Checked>,
        /// Taken before the reads.
        mark: ReadMark,
    },
}

impl KeptVerdict {
    fn new(verdict: &Arc<Checked>) -> KeptVerdict {
        let until = verdict
            .verdict
            .blocked_by
            .iter()
            .map(|b| b.item.end_timestamp)
            .min()
            .unwrap_or(i64::MAX);
        KeptVerdict {
            verdict: verdict.clone(),
            until,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NewItem, PERMANENT};
    use crate::store::StoreConfig;

    fn block(id: &str) -> NewItem {
        NewItem {
            id: id.to_owned(),
            action: Action::MarkBlocked,
            end: PERMANENT,
            cause: "c".to_owned(),
            allow_merge: false,
            source: "test".to_owned(),
            timeout: None,
            details: crate::model::Details::new(),
        }
    }

    /// Checks `tm` as a request does: whether the verdict was a kept one, and blocked.
    async fn check(checker: &Checker, tm: &str) -> (bool, bool) {
        let now = crate::clock::now_ms();
        let mut seen = checker.store.seen();
        let found = checker.task_manager_now(tm, now, &mut seen).unwrap();
        let kept = matches!(found, Found::Kept(_));
        assert!(checker.store.confirm(&seen).await.unwrap());
        (kept, checker.keep(found).verdict.blocked)
    }

    /// A write to another key keeps the verdict even when that key shares a change-stamp
    /// slot with one it was read from; a change to its own item or its node's drops it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_kept_verdict_outlives_writes_to_other_keys_and_not_to_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreConfig::new(dir.path().join("data"))).unwrap();
        let checker = Checker::new(store.clone(), 1 << 20);
        let now = crate::clock::now_ms();
        let pairs = [("tm-a", "node-a"), ("tm-b", "node-b")];
        let pairs = pairs.map(|(tm, node)| (tm.to_owned(), node.to_owned()));
        store.register(pairs.to_vec()).await.unwrap();
        for tm in ["tm-a", "tm-b"] {
            assert_eq!(check(&checker, tm).await, (false, false), "{tm} read");
            assert_eq!(check(&checker, tm).await, (true, false), "{tm} kept");
        }

        let other = store.id_sharing_a_slot_with(Watched::Item(Kind::TaskManager, "tm-a"));
        store
            .add(Kind::TaskManager, vec![block(&other)], now)
            .await
            .unwrap();
        assert_eq!(check(&checker, "tm-a").await, (true, false), "another key");

        store
            .add(Kind::Node, vec![block("node-a")], now)
            .await
            .unwrap();
        assert_eq!(check(&checker, "tm-a").await, (false, true), "its node");
        assert_eq!(check(&checker, "tm-a").await, (true, true), "kept blocked");

        store
            .add(Kind::TaskManager, vec![block("tm-b")], now)
            .await
            .unwrap();
        assert_eq!(check(&checker, "tm-b").await, (false, true), "its own item");
        tokio::task::spawn_blocking(move || store.shutdown().unwrap())
            .await
            .unwrap();
    }
    /// A verdict read before a change and offered to the cache after the change told it is
    /// never served, not even between the offer and the settling that drops it: a check
    /// that starts after the change is acknowledged must see it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_verdict_read_before_an_acknowledged_change_is_never_served() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreConfig::new(dir.path().join("data"))).unwrap();
        let checker = Checker::new(store.clone(), 1 << 20);
        let now = crate::clock::now_ms();
        let mut seen = store.seen();
        let found = checker.task_manager_now("tm-a", now, &mut seen).unwrap();
        let Found::Fresh {
            which,
            verdict,
            mark,
        } = found
        else {
            panic!("nothing kept yet");
        };
        assert!(!verdict.verdict.blocked);

        store
            .add(Kind::TaskManager, vec![block("tm-a")], now)
            .await
            .unwrap();
        checker.offer(which, &verdict);
        let served = checker.kept_now(Which::TaskManager, "tm-a", now);
        assert!(
            served.is_none(),
            "a check after the add was answered from a verdict read before it: {:?}",
            served.map(|checked| checked.verdict.clone())
        );
        checker.settle(which, &verdict, mark);
        assert_eq!(check(&checker, "tm-a").await, (false, true), "read again");
        assert_eq!(check(&checker, "tm-a").await, (true, true), "kept blocked");
        tokio::task::spawn_blocking(move || store.shutdown().unwrap())
            .await
            .unwrap();
    }
}
