//! Following the prefix as a replica: the log's entries as the writer puts them, applied in
//! order, and the read barrier that keeps a replica's answers linearizable.
//!
//! **The watch.** A replica loads the prefix at one etcd revision ([`Etcd::load`]), then
//! watches `P/log/` from the next revision and hands each whole entry, in number order, to
//! the store ([`Apply`]). etcd 3.4.23's watch may repeat events or deliver them out of
//! order (docs/architecture.md), so nothing is taken on trust: an entry at or below the last
//! applied is dropped, and one that is not the next (a gap) or whose parts did not arrive
//! restarts the watch from the revision after the last applied entry — entries a fold
//! deleted since are still delivered from etcd's history. A watch that is quiet is asked
//! for progress every [`PROBE`]; one that answers nothing for [`SILENT`] (a member that
//! went away without closing the connection) is opened again on the next member. A
//! compacted start revision cannot be resumed: the replica stops following and says so
//! (`/readyz`); etcd compacts nothing unless an operator configures it to.
//!
//! **The barrier.** A read must not show a state older than a write acknowledged before
//! it began. The writer puts `P/head`, the last entry's number, in each entry's own
//! transaction, and acknowledges a write only once that transaction committed; so a
//! linearizable read of `P/head` begun after the read began names an entry that covers
//! every such write, and the read waits until this replica applied it. Progress
//! notifications are no barrier here (3.4.23 may send one before the events it covers).
//! One read of `P/head` is in flight at a time and answers every read that arrived before
//! it was sent ([`FollowState::head`]), so the cost is shared by all concurrent readers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{EventType, WatchOptions, WatchResponse};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::{mpsc, oneshot, watch, Notify};

use super::log::{decode_head, Loaded, ENTRY_FORMAT};
use super::members::Members;
use super::{attempts, Etcd};
use crate::store::writes::Write;
use crate::store::{StoreError, Trees};

/// How often a quiet watch is asked for progress.
const PROBE: Duration = Duration::from_secs(1);

/// A watch that answers nothing for this long is given up and opened again.
const SILENT: Duration = Duration::from_secs(3);

/// Applies entry `number`'s writes to the replica's store, in number order.
pub(crate) type Apply = Box<dyn FnMut(u64, Vec<Write>) -> Result<(), StoreError> + Send>;

/// Where a replica's following of the log stands, shared by the watch task and readers.
pub(crate) struct FollowState {
    /// The last entry applied.
    applied: watch::Sender<u64>,
    /// The highest `P/head` read so far, and since when the replica has been behind it
    /// (`None`: it has applied it).
    behind: Mutex<(u64, Option<Instant>)>,
    /// Whether the watch is open and answering.
    watching: AtomicBool,
    /// Why following stopped for good; reads answer 503 with it.
    failed: Mutex<Option<String>>,
    /// Reads of `P/head` wanted: each asker gets the result of one begun after it asked.
    heads: mpsc::UnboundedSender<oneshot::Sender<Result<u64, String>>>,
    /// Counts the reads of `P/head` sent.
    head_reads: Counter,
    stop: Arc<Notify>,
    stopped: AtomicBool,
}

/// A replica's following: its progress, kept alive while the store is.
pub(crate) struct Following {
    pub progress: Arc<FollowState>,
}

impl Following {
    /// Ends the following: the watch stops, and reads wait for nothing more.
    pub fn stop(&self) {
        *self.progress.failed.lock().expect("not poisoned") =
            Some("this daemon no longer follows the prefix as a replica".into());
        self.progress.stop();
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        self.progress.stop();
    }
}

impl FollowState {
    /// The last entry applied.
    pub fn applied(&self) -> u64 {
        *self.applied.borrow()
    }

    /// How many entries the replica is behind the last `P/head` it read, and for how long.
    pub fn lag(&self) -> (u64, Duration) {
        let (head, since) = *self.behind.lock().expect("not poisoned");
        let behind = head.saturating_sub(self.applied());
        match since {
            Some(since) if behind > 0 => (behind, since.elapsed()),
            _ => (0, Duration::ZERO),
        }
    }

    /// Whether the watch is open and answering.
    pub fn watching(&self) -> bool {
        self.watching.load(Ordering::SeqCst)
    }

    /// Why the replica stopped following, if it did.
    pub fn failed(&self) -> Option<String> {
        self.failed.lock().expect("not poisoned").clone()
    }

    /// The number of the last entry etcd had committed at some moment after this call
    /// began (a linearizable read of `P/head`, shared with every caller waiting for the same
    /// read).
    pub async fn head(&self) -> Result<u64, String> {
        let (answer, answered) = oneshot::channel();
        self.heads
            .send(answer)
            .map_err(|_| "this replica has stopped following etcd".to_owned())?;
        let head = answered
            .await
            .map_err(|_| "this replica has stopped following etcd".to_owned())??;
        let mut behind = self.behind.lock().expect("not poisoned");
        if head > behind.0 {
            behind.0 = head;
        }
        if behind.0 > self.applied() && behind.1.is_none() {
            behind.1 = Some(Instant::now());
        }
        Ok(head)
    }

    /// Waits until entry `head` is applied, at most `within`.
    pub async fn reach(&self, head: u64, within: Duration) -> Result<(), String> {
        if let Some(why) = self.failed() {
            return Err(why);
        }
        let mut applied = self.applied.subscribe();
        let reached = tokio::time::timeout(within, applied.wait_for(|a| *a >= head))
            .await
            .map(|waited| waited.map(|_| ()));
        match reached {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err("this replica has stopped following etcd".into()),
            Err(_) => Err(format!(
                "this replica is behind the etcd prefix's log (applied entry {}, etcd has \
                 {head}; its watch is {}) and did not catch up within {within:?}",
                self.applied(),
                if self.watching() { "open" } else { "cut off" }
            )),
        }
    }

    fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.stop.notify_waiters();
    }

    fn advance(&self, entry: u64) {
        self.applied.send_replace(entry);
        let mut behind = self.behind.lock().expect("not poisoned");
        if entry >= behind.0 {
            behind.1 = None;
        }
    }

    fn fail(&self, why: String) {
        tracing::error!(error = %why, "this replica stopped following the etcd prefix");
        *self.failed.lock().expect("not poisoned") = Some(why);
        self.watching.store(false, Ordering::SeqCst);
    }
}

impl Etcd {
    /// Loads the prefix onto `trees` (empty) as a replica: without the writer key, and
    /// without taking the writer's place in the log.
    pub fn load_replica(&self, trees: &Trees) -> Result<Loaded, StoreError> {
        self.load(trees)
    }

    /// Starts following the log after what `loaded` read: every later entry goes to
    /// `apply`, in order, until the returned [`Following`] is dropped.
    pub fn watch_log(&self, loaded: &Loaded, apply: Apply, head_reads: Counter) -> Following {
        let (heads, asked) = mpsc::unbounded_channel();
        let progress = Arc::new(FollowState {
            applied: watch::Sender::new(loaded.log.last_entry()),
            behind: Mutex::new((0, None)),
            watching: AtomicBool::new(false),
            failed: Mutex::new(None),
            heads,
            head_reads,
            stop: Arc::new(Notify::new()),
            stopped: AtomicBool::new(false),
        });
        let watcher = Watcher {
            members: self.members.clone(),
            log_prefix: self.key("log/"),
            progress: progress.clone(),
            apply,
            applied_revision: loaded.revision,
            parts: BTreeMap::new(),
        };
        self.runtime().spawn(watcher.run());
        let head_key = self.head_key();
        let (members, deadline) = (self.members.clone(), self.config.call_timeout);
        self.runtime().spawn(read_heads(
            members,
            deadline,
            head_key,
            progress.clone(),
            asked,
        ));
        Following { progress }
    }
}

/// Answers the askers of `P/head`: one linearizable read at a time, for every asker that
/// was waiting when it was sent.
async fn read_heads(
    members: Arc<Members>,
    deadline: Duration,
    key: String,
    progress: Arc<FollowState>,
    mut asked: mpsc::UnboundedReceiver<oneshot::Sender<Result<u64, String>>>,
) {
    while let Some(first) = asked.recv().await {
        let mut askers = vec![first];
        while let Ok(more) = asked.try_recv() {
            askers.push(more);
        }
        if progress.stopped.load(Ordering::SeqCst) {
            return;
        }
        progress.head_reads.inc();
        let key = key.clone();
        let read = attempts(members.clone(), deadline, move |mut client| {
            let key = key.clone();
            async move { client.get(key, None).await }
        })
        .await;
        let head = read
            .map_err(|e| format!("etcd could not be read: {e}"))
            .and_then(|response| match response.kvs().first() {
                Some(kv) => kv
                    .value_str()
                    .ok()
                    .and_then(|text| text.parse::<u64>().ok())
                    .ok_or_else(|| "the log's head key is malformed".to_owned()),
                None => Ok(0),
            });
        for asker in askers {
            let _ = asker.send(head.clone());
        }
    }
}

/// The watch task's state.
struct Watcher {
    members: Arc<Members>,
    log_prefix: String,
    progress: Arc<FollowState>,
    apply: Apply,
    /// The etcd revision of the last entry applied (or of the load): the watch resumes
    /// after it.
    applied_revision: i64,
    /// Parts of entries not applied yet, by entry and part.
    parts: BTreeMap<(u64, u32), Vec<u8>>,
}

/// Why a watch stream ended.
enum Ended {
    /// Open it again, from after the last applied entry.
    Reopen(String),
    /// Following cannot go on.
    Fatal(String),
    Stopped,
}

impl Watcher {
    async fn run(mut self) {
        let mut pause = Duration::from_millis(50);
        loop {
            // Registered before the flag is read: a stop in between still wakes it.
            let stop = self.progress.stop.clone();
            let stopped = stop.notified();
            tokio::pin!(stopped);
            stopped.as_mut().enable();
            if self.progress.stopped.load(Ordering::SeqCst) {
                return;
            }
            let member = self.members.current();
            let ended = tokio::select! {
                ended = self.watch(member) => ended,
                () = &mut stopped => Ended::Stopped,
            };
            self.progress.watching.store(false, Ordering::SeqCst);
            match ended {
                Ended::Stopped => return,
                Ended::Fatal(why) => {
                    self.progress.fail(why);
                    return;
                }
                Ended::Reopen(why) => {
                    tracing::warn!(error = %why, "the replica's watch of the etcd log ended; opening it again");
                    self.members.failed(member, &why);
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    /// One watch stream on `member`, from after the last applied entry, until it ends.
    async fn watch(&mut self, member: usize) -> Ended {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(self.applied_revision + 1);
        let prefix = self.log_prefix.clone();
        let opened = tokio::time::timeout(SILENT, async {
            let mut client = self.members.client(member).await?;
            client.watch(prefix, Some(options)).await
        })
        .await;
        let mut stream = match opened {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Ended::Reopen(e.to_string()),
            Err(_) => return Ended::Reopen(format!("no watch within {SILENT:?}")),
        };
        self.progress.watching.store(true, Ordering::SeqCst);
        let mut last_heard = Instant::now();
        loop {
            let message = tokio::time::timeout(PROBE, stream.message()).await;
            match message {
                Err(_) => {
                    if last_heard.elapsed() >= SILENT {
                        self.progress.watching.store(false, Ordering::SeqCst);
                        return Ended::Reopen(format!("the watch was silent for {SILENT:?}"));
                    }
                    if let Err(e) = stream.request_progress().await {
                        return Ended::Reopen(e.to_string());
                    }
                }
                Ok(Err(e)) => return Ended::Reopen(e.to_string()),
                Ok(Ok(None)) => return Ended::Reopen("the watch stream ended".into()),
                Ok(Ok(Some(response))) => {
                    last_heard = Instant::now();
                    self.progress.watching.store(true, Ordering::SeqCst);
                    if let Some(ended) = self.take(&response) {
                        return ended;
                    }
                }
            }
        }
    }

    /// Applies what `response` completes; `Some` when the stream must end.
    fn take(&mut self, response: &WatchResponse) -> Option<Ended> {
        if response.canceled() {
            if response.compact_revision() > 0 {
                return Some(Ended::Fatal(format!(
                    "etcd compacted the prefix's history past revision {} before this replica \
                     read it (compacted to {}): restart the replica to load the prefix anew",
                    self.applied_revision,
                    response.compact_revision()
                )));
            }
            return Some(Ended::Reopen(format!(
                "etcd cancelled the watch: {}",
                response.cancel_reason()
            )));
        }
        for event in response.events() {
            if event.event_type() != EventType::Put {
                continue; // a fold's deletions: what they removed was applied already
            }
            let Some(kv) = event.kv() else { continue };
            let key = String::from_utf8_lossy(kv.key());
            let Some(rest) = key.strip_prefix(&self.log_prefix) else {
                continue;
            };
            let applied = self.progress.applied();
            match rest.split_once('/') {
                Some((entry, part)) => {
                    let (Ok(entry), Ok(part)) = (entry.parse::<u64>(), part.parse::<u32>()) else {
                        return Some(Ended::Fatal(format!("malformed log key {key}")));
                    };
                    if entry > applied {
                        self.parts.insert((entry, part), kv.value().to_vec());
                    }
                }
                None => {
                    let Ok(number) = rest.parse::<u64>() else {
                        return Some(Ended::Fatal(format!("malformed log key {key}")));
                    };
                    if number <= applied {
                        continue; // repeated by the watch
                    }
                    if number > applied + 1 {
                        return Some(Ended::Reopen(format!(
                            "the watch skipped from entry {applied} to {number}"
                        )));
                    }
                    let writes = match self.assemble(number, kv.value()) {
                        Ok(Some(writes)) => writes,
                        Ok(None) => {
                            return Some(Ended::Reopen(format!(
                                "entry {number}'s parts did not arrive before it"
                            )))
                        }
                        Err(why) => return Some(Ended::Fatal(why)),
                    };
                    let outcome = tokio::task::block_in_place(|| (self.apply)(number, writes));
                    if let Err(e) = outcome {
                        return Some(Ended::Fatal(format!("applying log entry {number}: {e}")));
                    }
                    self.applied_revision = kv.mod_revision();
                    self.parts = self.parts.split_off(&(number + 1, 0));
                    self.progress.advance(number);
                }
            }
        }
        None
    }

    /// Entry `number`'s writes from its head and the parts received; `None` when a part
    /// is missing.
    fn assemble(&mut self, number: u64, value: &[u8]) -> Result<Option<Vec<Write>>, String> {
        let (head, first) =
            decode_head(value).map_err(|e| format!("log entry {number}'s head: {e}"))?;
        if head.format != ENTRY_FORMAT {
            return Err(format!(
                "log entry {number} has format {}, which this build does not read",
                head.format
            ));
        }
        let mut bytes = value[first..].to_vec();
        for part in 1..=head.parts {
            match self.parts.get(&(number, part)) {
                Some(more) => bytes.extend_from_slice(more),
                None => return Ok(None),
            }
        }
        let (writes, _): (Vec<Write>, usize) =
            bincode::serde::decode_from_slice(&bytes, bincode::config::standard())
                .map_err(|e| format!("log entry {number}: {e}"))?;
        Ok(Some(writes))
    }
}
