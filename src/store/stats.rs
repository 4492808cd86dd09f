//! How much the store holds: the counters the committer keeps (read without a scan), and
//! what each tree and the files on disk hold (read by scanning, for diagnostics).

use std::sync::atomic::Ordering;

use super::meta::kind_count;
use super::{count_slot, Counts, Result, Store, TreeId};
use crate::metrics::StoreGauges;
use crate::model::{Action, Kind};
use crate::policy::{slot, Policy, Standing};
use crate::progress::{Progress, Ticks};

/// Live entries and bytes of one tree; see [`Store::disk_usage`].
#[derive(Debug, Clone)]
pub struct TreeUsage {
    /// The sled tree's name.
    pub name: String,
    pub entries: u64,
    /// Bytes of keys and values, without sled's own overhead.
    pub bytes: u64,
}

/// The live contents of the trees against the size of the database files.
#[derive(Debug, Clone)]
pub struct DiskUsage {
    pub trees: Vec<TreeUsage>,
    /// What sled reports as its size on disk (the log and its snapshot).
    pub on_disk: u64,
}

impl DiskUsage {
    pub fn live_bytes(&self) -> u64 {
        self.trees.iter().map(|t| t.bytes).sum()
    }
}

impl Store {
    /// Items announced expired whose storage is not reclaimed yet, as of the last commit.
    pub fn unreclaimed(&self) -> u64 {
        self.shared.feed.unreclaimed.load(Ordering::Relaxed)
    }

    /// Stored items per (kind, action) (expired ones count until announced); see
    /// [`count_slot`].
    pub fn item_counts(&self) -> Counts {
        let c = &self.shared.feed.counts;
        [0, 1, 2, 3].map(|i| c[i].load(Ordering::Relaxed))
    }

    /// What a metrics scrape reports of the store, read now: counters, but for the size on
    /// disk, which reads the data dir (blocking: call off the async workers).
    pub fn gauges(&self) -> StoreGauges {
        let counts = self.item_counts();
        let items = Kind::ALL
            .into_iter()
            .flat_map(|kind| {
                Action::ALL.map(|action| (kind, action, counts[count_slot(kind, action)]))
            })
            .collect();
        let (policy, standing) = self.guard_standing(self.now());
        let etcd = self.etcd_standing();
        StoreGauges {
            items,
            revision: self.revision(),
            unreclaimed: self.unreclaimed(),
            sweeper_next_deadline_ms: self.sweep_signal().sleeping_on(),
            disk_bytes: self.size_on_disk().ok(),
            guards: policy.figures(&standing),
            registered: standing.iter().map(|s| (s.kind, s.registered)).collect(),
            evacuation_tokens: standing
                .iter()
                .filter_map(|s| Some((s.kind, s.evacuation_tokens?)))
                .collect(),
            // Every term won but the one running now was lost.
            etcd_elections: etcd.as_ref().map(|etcd| {
                let current = u64::from(etcd.writer);
                (
                    etcd.elections_won,
                    etcd.elections_won.saturating_sub(current),
                )
            }),
            etcd_writer: etcd.as_ref().and_then(|etcd| etcd.writer_name.clone()),
            etcd_nospace: etcd.as_ref().is_some_and(|etcd| etcd.refusal.is_some()),
            etcd_member_versions: etcd
                .as_ref()
                .map(|etcd| {
                    etcd.member_versions
                        .iter()
                        .filter_map(|(member, version, fixed)| {
                            Some((member.clone(), version.clone()?, *fixed))
                        })
                        .collect()
                })
                .unwrap_or_default(),
            etcd_role: etcd.map(|standing| {
                if self.is_replica() {
                    "replica"
                } else if standing.writer {
                    "writer"
                } else {
                    "candidate"
                }
            }),
            replica_lag: self.replica_lag(),
        }
    }

    /// What each kind's guardrails stand at `now`: the items blocked (as the cap counts
    /// them) and the evacuation bucket refilled to `now`.
    pub fn guard_standing(&self, now: i64) -> (Policy, [Standing; 2]) {
        let guards = &self.shared.guards;
        let policy = guards.policy.lock().expect("not poisoned").clone();
        let exposure = *guards.exposure.lock().expect("not poisoned");
        let counts = self.item_counts();
        let buckets = *guards.buckets.lock().expect("not poisoned");
        let figure = |n: i64| n.max(0).unsigned_abs();
        let standing = Kind::ALL.map(|kind| {
            let i = slot(kind);
            Standing {
                kind,
                items: kind_count(&counts, kind),
                registered: figure(exposure.registered[i]),
                blocked: figure(exposure.blocked[i]),
                evacuating: figure(exposure.evacuating[i]),
                evacuation_tokens: policy
                    .of(kind)
                    .evacuations
                    .map(|rate| buckets[i].at(rate, now).level),
            }
        });
        (policy, standing)
    }

    /// The database's size on disk, in bytes.
    pub fn size_on_disk(&self) -> Result<u64> {
        Ok(self.handles()?.db.size_on_disk()?)
    }

    /// Counts of entries per tree, for tests and diagnostics: `(items, expiry)`.
    pub fn tree_sizes(&self) -> Result<(usize, usize)> {
        let handles = self.handles()?;
        Ok((handles.trees.items.len(), handles.trees.expiry.len()))
    }

    /// What each tree holds (entries and bytes of keys and values) against the size of the
    /// database on disk: sled's log keeps whole leaves and superseded copies of them, so the
    /// file runs to a few times the live bytes (see `docs/operations.md`). Reads every entry.
    pub fn disk_usage(&self) -> Result<DiskUsage> {
        self.disk_usage_reporting(&())
    }

    /// [`Store::disk_usage`], reporting each entry read to `progress`, in the caller's
    /// stage.
    pub fn disk_usage_reporting(&self, progress: &dyn Progress) -> Result<DiskUsage> {
        let mut ticks = Ticks::new(progress);
        let handles = self.handles()?;
        let mut trees = Vec::with_capacity(TreeId::ALL.len());
        for id in TreeId::ALL {
            let mut usage = TreeUsage {
                name: id.name().to_owned(),
                entries: 0,
                bytes: 0,
            };
            for entry in id.of(&handles.trees) {
                let (key, value) = entry?;
                ticks.tick();
                usage.entries += 1;
                usage.bytes += (key.len() + value.len()) as u64;
            }
            trees.push(usage);
        }
        Ok(DiskUsage {
            trees,
            on_disk: handles.db.size_on_disk()?,
        })
    }
}
