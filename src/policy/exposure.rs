//! What the share caps count: how far the blocklist reaches into the registered ids.

use super::slot;
use crate::model::{Action, Kind};

/// Where one kind stands against its guardrails.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standing {
    pub kind: Kind,
    /// Items of the kind stored, as the count cap counts them (an item past its end counts
    /// until the sweeper has announced it).
    pub items: u64,
    /// Its registered ids, and how many of them are effectively blocked and evacuating.
    pub registered: u64,
    pub blocked: u64,
    pub evacuating: u64,
    /// The evacuation tokens available now, with a rate set.
    pub evacuation_tokens: Option<f64>,
}

/// How far the blocklist reaches into the registered ids, per kind ([`slot`]): what the
/// share caps count. A registered node is a node with at least one registered task
/// manager; a registered task manager is effectively blocked by its own item or by its
/// node's, and evacuating when either evacuates. An item counts until it is announced
/// expired, like [`Standing::items`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Exposure {
    pub registered: [i64; 2],
    pub blocked: [i64; 2],
    pub evacuating: [i64; 2],
}

impl Exposure {
    pub fn add(&mut self, other: &Exposure) {
        for i in 0..2 {
            self.registered[i] += other.registered[i];
            self.blocked[i] += other.blocked[i];
            self.evacuating[i] += other.evacuating[i];
        }
    }

    pub fn sub(&mut self, other: &Exposure) {
        for i in 0..2 {
            self.registered[i] -= other.registered[i];
            self.blocked[i] -= other.blocked[i];
            self.evacuating[i] -= other.evacuating[i];
        }
    }

    /// One registered id of `kind`, blocked to `level`.
    pub fn one(kind: Kind, level: Level) -> Exposure {
        let mut exposure = Exposure::default();
        let i = slot(kind);
        exposure.registered[i] = 1;
        exposure.blocked[i] = i64::from(level >= Level::Blocked);
        exposure.evacuating[i] = i64::from(level == Level::Evacuating);
        exposure
    }
}

/// How strongly an id is blocked, as the share caps see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Free,
    Blocked,
    Evacuating,
}

impl Level {
    pub fn of(action: Option<Action>) -> Level {
        match action {
            None => Level::Free,
            Some(Action::MarkBlocked) => Level::Blocked,
            Some(Action::MarkBlockedAndEvacuateTasks) => Level::Evacuating,
        }
    }
}
