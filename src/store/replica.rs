//! A replica's store (`--store etcd`, a daemon that is not the writer): the prefix loaded
//! into a mirror, kept current by the log's entries as the writer puts them
//! ([`super::etcd`]'s follow), and read exactly as the writer's store is read.
//!
//! A replica runs no committer: writes go to the writer (the HTTP layer forwards them; one
//! that reaches this store is refused as [`StoreError::Closed`]). Each entry is applied as
//! the committer applies a transaction, so that every reader's protocol holds unchanged:
//! the seqlock odd, the keys it changes stamped (and the check cache told), the writes
//! replayed, the seqlock even; then the counters read back from `meta`, everything marked
//! durable (etcd has it), and the entry's events published to the feed's subscribers.
//!
//! Reads are linearizable through [`Store::catch_up`]: before answering, a read learns how
//! far etcd's log reached after it began and waits until this replica applied that far.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use tokio::sync::mpsc;

use super::etcd::FollowState;
use super::feed::read_events;
use super::members::Members;
use super::open::{read_figures, read_opened};
use super::writes::{replay, Write};
use super::TreeId;
use super::{
    error::registration, keys, mirror, sweep_signal, Feed, GuardState, Handles, Result, Store,
    StoreConfig, StoreError, StoreState, Watched,
};
use crate::sweep_signal::SweepSignal;

/// The longest a read waits for this replica to apply what etcd's log holds, before it
/// answers 503: a replica further behind is cut off or overloaded, and another serves.
pub const CATCH_UP: Duration = Duration::from_secs(2);

impl Store {
    /// Opens the store as a replica of `config`'s etcd prefix, following its log. Blocking.
    pub fn open_replica(config: &StoreConfig) -> Result<Store> {
        let Some(etcd) = config.etcd.clone() else {
            return Err(StoreError::Etcd("a replica needs --store etcd".into()));
        };
        let (db, loaded) = mirror::open_replica_mirror(config, &etcd)?;
        let opened = read_opened(db)?;
        let policy = opened
            .policy
            .clone()
            .unwrap_or_else(|| config.policy.apply(config.new_policy.clone()));
        let feed = Arc::new(Feed::new(&opened, config.feed_buffer));
        let guards = Arc::new(GuardState::new(policy, opened.exposure));
        let sweep = Arc::new(sweep_signal(opened.watermark.clone()));
        let handles = Arc::new(opened.handles);
        let applier = Applier {
            handles: handles.clone(),
            feed: feed.clone(),
            guards: guards.clone(),
            sweep: sweep.clone(),
            members: opened.members,
        };
        let following = etcd.watch_log(
            &loaded,
            applier.into_apply(),
            config.metrics.replica_head_reads.clone(),
        );
        // No committer reads the queue: a write that reaches a replica's store is refused.
        let (commits, _) = mpsc::channel(1);
        Ok(Store {
            shared: Arc::new(StoreState {
                handles: Arc::new(ArcSwapOption::new(Some(handles))),
                commits,
                committer: Mutex::new(None),
                sweep,
                feed,
                guards,
                etcd: Some(etcd),
                following: Some(following),
            }),
        })
    }

    /// Stops following the prefix (this daemon became the writer, with a store of its
    /// own): reads of this store answer 503 from then on.
    pub fn stop_following(&self) {
        if let Some(following) = &self.shared.following {
            following.stop();
        }
    }

    /// [`Store::catch_up`] on a replica.
    pub(super) async fn catch_up_replica(&self) -> Result<()> {
        let Some(progress) = self.follow_state() else {
            return Ok(());
        };
        if let Some(why) = progress.failed() {
            return Err(StoreError::Behind(why));
        }
        let head = progress.head().await.map_err(StoreError::Behind)?;
        progress
            .reach(head, CATCH_UP)
            .await
            .map_err(StoreError::Behind)
    }

    /// A replica's following, for its probes and metrics.
    pub(crate) fn follow_state(&self) -> Option<&FollowState> {
        self.shared.following.as_ref().map(|f| &*f.progress)
    }
}

/// Where a replica's follow applies each entry.
struct Applier {
    handles: Arc<Handles>,
    feed: Arc<Feed>,
    guards: Arc<GuardState>,
    sweep: Arc<SweepSignal>,
    /// The task managers on each node, kept from the registrations the entries write: a
    /// node's change tells the check cache of its task managers.
    members: Members,
}

impl Applier {
    fn into_apply(mut self) -> super::etcd::Apply {
        Box::new(move |number, writes| {
            self.apply(&writes).map_err(|e| {
                StoreError::Etcd(format!("applying log entry {number} on a replica: {e}"))
            })
        })
    }

    /// Applies one entry's writes as the committer applies a transaction.
    fn apply(&mut self, writes: &[Write]) -> Result<()> {
        let trees = &self.handles.trees;
        let feed = &self.feed;
        let registrations: Vec<&str> = writes
            .iter()
            .filter(|w| w.tree == TreeId::TmNode)
            .filter_map(|w| std::str::from_utf8(&w.key).ok())
            .collect();
        let settled = feed.seq.fetch_add(1, Ordering::SeqCst) + 2;
        feed.stamps.stamp_touched(settled, &self.members, |visit| {
            for write in writes {
                match write.tree {
                    TreeId::Items => {
                        if let Some((kind, id)) = keys::parse_item_key(&write.key) {
                            visit(Watched::Item(kind, id));
                        }
                    }
                    TreeId::TmNode => {
                        if let Ok(tm) = std::str::from_utf8(&write.key) {
                            visit(Watched::Registration(tm));
                        }
                    }
                    _ => {}
                }
            }
        });
        let replayed = replay(trees, writes);
        feed.seq.fetch_add(1, Ordering::SeqCst);
        replayed?;
        for tm in registrations {
            self.members.values_mut().for_each(|tms| {
                tms.remove(tm);
            });
            if let Some(value) = trees.tm_node.get(tm.as_bytes())? {
                let node = registration(tm, &value)?;
                self.members.entry(node).or_default().insert(tm.to_owned());
            }
        }
        self.members.retain(|_, tms| !tms.is_empty());
        let figures = read_figures(trees)?;
        if let Some(counts) = figures.counts {
            for (slot, count) in feed.counts.iter().zip(counts) {
                slot.store(count, Ordering::Relaxed);
            }
        }
        feed.unreclaimed
            .store(figures.unreclaimed, Ordering::Relaxed);
        feed.first_retained
            .store(figures.first_retained, Ordering::SeqCst);
        if let Some(policy) = figures.policy {
            *self.guards.policy.lock().expect("not poisoned") = policy;
        }
        if let Some(exposure) = figures.exposure {
            *self.guards.exposure.lock().expect("not poisoned") = exposure;
        }
        if !figures.watermark.is_empty() {
            self.sweep.set_watermark(&figures.watermark);
        }
        let before = feed.committed.swap(figures.revision, Ordering::SeqCst);
        feed.durability.publish(settled);
        feed.durable.send_replace(figures.revision);
        for event in read_events(&trees.events, before, figures.revision, usize::MAX)? {
            // No subscriber: nobody to tell.
            let _ = feed.live.send(Arc::new(event));
        }
        Ok(())
    }
}
