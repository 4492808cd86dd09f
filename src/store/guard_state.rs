//! The guardrails' state as of the last commit, for readers: the policy, the evacuation
//! buckets and the share caps' figures. The committer's own copies are the ones it decides
//! with; these are published after each commit (and by a replica after each entry it
//! applies) for `/metrics`, `/policy` and the standing a guard refusal reports.

use std::sync::Mutex;

use crate::policy::{Bucket, Exposure, Policy};

/// See the module doc. Std mutexes: each is held for a copy, never across an await.
pub(crate) struct GuardState {
    /// The evacuation buckets, one per kind.
    pub buckets: Mutex<[Bucket; 2]>,
    pub policy: Mutex<Policy>,
    pub exposure: Mutex<Exposure>,
}

impl GuardState {
    pub fn new(policy: Policy, exposure: Exposure) -> GuardState {
        GuardState {
            // The buckets live in memory only: an empty one at time 0 is full at its first
            // use.
            buckets: Mutex::new([Bucket::EMPTY; 2]),
            policy: Mutex::new(policy),
            exposure: Mutex::new(exposure),
        }
    }
}
