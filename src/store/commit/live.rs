//! Live reports in the transaction: each block's holders as a write changes them.
//!
//! Layout (`live` tree, `keys::live_key`): a block several sources hold, or whose reports
//! carry details, has its *roster* under its item key (the sources holding it, in the
//! order of their first reports) and one live report per source under
//! `kind ++ id ++ 0x00 ++ source`. Invariants, which `blocklistd check` verifies:
//! - a block without a roster is held by its first source alone, by the block itself
//!   ([`LiveReport::implied`]); nothing of it is in `live`;
//! - a block with a roster has exactly one report per source of the roster and no other,
//!   and is the merge of them ([`crate::model::Block::held_by`]) as of its last change;
//! - a roster outlives no block: the transaction that ends or replaces a block drops it
//!   ([`Tx::drop_live`]).
//!
//! [`LiveReport::implied`]: crate::model::LiveReport::implied

use super::{Tx, TxResult};
use crate::model::{Action, Block, Details, Kind, LiveReport, MAX_HOLDERS, OTHER_SOURCES};
use crate::store::{codec, keys, Result, StoreError};

/// The live reports of one block as a transaction changes them.
#[derive(Debug, Clone)]
pub(super) struct Holders {
    /// The roster stored before the transaction (empty: none).
    before: Vec<String>,
    /// The live reports, once kept apart; `None` while the block's first source alone
    /// holds it by the block itself.
    pub(super) reports: Option<Vec<LiveReport>>,
    changed: bool,
}

impl Holders {
    /// The holders of a block that has none stored (a new one).
    pub(super) fn none() -> Holders {
        Holders {
            before: Vec::new(),
            reports: None,
            changed: false,
        }
    }

    /// Whether a report by `source` with `details` repeats the source's live report
    /// ([`LiveReport::repeats`]): the same evidence again, which changes nothing.
    pub(super) fn repeats(&self, source: &str, details: &Details) -> bool {
        self.reports
            .iter()
            .flatten()
            .any(|r| r.source == source && r.repeats(details))
    }

    /// Takes `source`'s report (at `at`, asking for `claim`, with `details`) into the live
    /// reports of `block`, as it was before the report merged into it. A block that its
    /// first source alone held by itself gets its reports kept apart once another source
    /// reports, or a report carries details. Past [`MAX_HOLDERS`] sources, a new source's
    /// report merges into [`OTHER_SOURCES`]'s.
    pub(super) fn report(
        &mut self,
        block: &Block,
        source: &str,
        claim: (Action, i64, &str),
        at: i64,
        details: &Details,
    ) {
        let reports = match &mut self.reports {
            Some(reports) => reports,
            None if source == block.provenance.source && details.is_empty() => return,
            None => self.reports.insert(vec![LiveReport::implied(block)]),
        };
        self.changed = true;
        let own = |r: &LiveReport| r.source == source;
        let holders = reports.iter().filter(|r| r.source != OTHER_SOURCES).count();
        let held = if reports.iter().any(own) || holders < MAX_HOLDERS {
            source
        } else {
            OTHER_SOURCES
        };
        match reports.iter_mut().find(|r| r.source == held) {
            Some(report) => report.merge(claim, at, details),
            None => reports.push(LiveReport::new(held, claim, at, details.clone())),
        }
    }

    /// The first report of a new block, made by `source` with `details`: kept apart only
    /// when it carries details. `block` is the block it created (its end escalated).
    pub(super) fn created(&mut self, block: &Block, details: &Details) {
        if !details.is_empty() {
            let mut report = LiveReport::implied(block);
            report.details.clone_from(details);
            self.reports = Some(vec![report]);
            self.changed = true;
        }
    }

    /// Applies an in-place update to every live report: a `PATCH` is the word on the
    /// block as a whole, so what a later retraction leaves still says it.
    pub(super) fn update(&mut self, end: Option<i64>, action: Option<Action>, cause: Option<&str>) {
        for report in self.reports.iter_mut().flatten() {
            if let Some(end) = end {
                report.end = end;
            }
            if let Some(action) = action {
                report.action = action;
            }
            if let Some(cause) = cause {
                report.cause = crate::model::merge_causes(&report.cause, cause);
            }
            self.changed = true;
        }
    }

    /// Takes `source`'s live report out, if it holds the block and its details contain
    /// `wanted`: the report taken, and whether it was the last.
    pub(super) fn retract(
        &mut self,
        block: &Block,
        source: &str,
        wanted: &Details,
    ) -> Option<LiveReport> {
        let reports = self
            .reports
            .get_or_insert_with(|| vec![LiveReport::implied(block)]);
        let at = reports
            .iter()
            .position(|r| r.source == source && r.matches(wanted))?;
        self.changed = true;
        Some(reports.remove(at))
    }

    /// Drops the live reports that ended by `now`: they ask for nothing any more.
    pub(super) fn prune(&mut self, now: i64) {
        if let Some(reports) = &mut self.reports {
            let before = reports.len();
            reports.retain(|r| r.is_active(now));
            self.changed |= reports.len() != before;
        }
    }

    /// The live reports there are (the implied one included).
    pub(super) fn all(&self, block: &Block) -> Vec<LiveReport> {
        match &self.reports {
            Some(reports) => reports.clone(),
            None => vec![LiveReport::implied(block)],
        }
    }

    /// The roster: the sources holding the block, in the order of their first reports;
    /// empty while its first source alone holds it by the block itself.
    pub(super) fn roster(&self) -> Vec<String> {
        let mut reports: Vec<&LiveReport> = self.reports.iter().flatten().collect();
        reports.sort_by_key(|r| r.first_report);
        reports.iter().map(|r| r.source.clone()).collect()
    }

    /// Writes what changed: every live report, the roster, and the removal of the reports
    /// of sources no longer in it.
    pub(super) fn store(&self, tx: &Tx<'_>, kind: Kind, id: &str) -> TxResult<()> {
        if !self.changed {
            return Ok(());
        }
        let roster = self.roster();
        for gone in self.before.iter().filter(|s| !roster.contains(s)) {
            tx.live.remove(keys::live_key(kind, id, gone))?;
        }
        for report in self.reports.iter().flatten() {
            tx.live.insert(
                keys::live_key(kind, id, &report.source),
                codec::encode_live(report),
            )?;
        }
        if roster.is_empty() {
            tx.live.remove(keys::item_key(kind, id))?;
        } else if roster != self.before {
            tx.live
                .insert(keys::item_key(kind, id), codec::encode_roster(&roster))?;
        }
        Ok(())
    }
}

impl Tx<'_> {
    /// The stored roster of `(kind, id)` (empty: none).
    pub(super) fn roster(&self, kind: Kind, id: &str) -> TxResult<Result<Vec<String>>> {
        let Some(bytes) = self.live.get(keys::item_key(kind, id))? else {
            return Ok(Ok(Vec::new()));
        };
        Ok(
            codec::decode_roster(&bytes).map_err(|source| StoreError::Corrupt {
                key: format!("live/{}/{id}", kind.plural()),
                source,
            }),
        )
    }

    /// The holders of `(kind, id)`'s active block, as stored.
    pub(super) fn holders(&self, kind: Kind, id: &str) -> TxResult<Result<Holders>> {
        let before = match self.roster(kind, id)? {
            Ok(roster) => roster,
            Err(e) => return Ok(Err(e)),
        };
        if before.is_empty() {
            return Ok(Ok(Holders::none()));
        }
        let mut reports = Vec::with_capacity(before.len());
        for source in &before {
            let key = keys::live_key(kind, id, source);
            let corrupt = |error| StoreError::Corrupt {
                key: format!("live/{}/{id}/{source}", kind.plural()),
                source: error,
            };
            let Some(bytes) = self.live.get(&key)? else {
                return Ok(Err(corrupt(codec::CodecError::Decode(
                    "a source of the roster has no live report".into(),
                ))));
            };
            match codec::decode_live(source, &bytes) {
                Ok(report) => reports.push(report),
                Err(e) => return Ok(Err(corrupt(e))),
            }
        }
        Ok(Ok(Holders {
            before,
            reports: Some(reports),
            changed: false,
        }))
    }

    /// Drops the live reports and the roster of `(kind, id)`, whose block ends or is
    /// replaced. A roster that does not decode is dropped too (its reports stay for
    /// `blocklistd check`): ending a block must never fail on it.
    pub(super) fn drop_live(&self, kind: Kind, id: &str) -> TxResult<()> {
        let Some(bytes) = self.live.remove(keys::item_key(kind, id))? else {
            return Ok(());
        };
        if let Ok(roster) = codec::decode_roster(&bytes) {
            for source in roster {
                self.live.remove(keys::live_key(kind, id, &source))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Provenance, PERMANENT};

    const MB: Action = Action::MarkBlocked;
    const EV: Action = Action::MarkBlockedAndEvacuateTasks;

    fn block(source: &str) -> Block {
        Block {
            action: MB,
            start: 10,
            end: PERMANENT,
            cause: "disk".into(),
            forced: None,
            provenance: Provenance::first(source, 10),
            revision: 1,
            escalated: None,
        }
    }

    fn fingerprint(f: &str) -> Details {
        Details::from([("fingerprint".to_owned(), f.to_owned())])
    }

    #[test]
    fn the_first_source_alone_keeps_nothing_apart() {
        let mut h = Holders::none();
        h.report(&block("op"), "op", (EV, 50, "x"), 20, &Details::new());
        assert!(h.reports.is_none() && !h.changed);
        assert!(h.roster().is_empty());
    }

    #[test]
    fn a_second_source_keeps_both_apart_in_order() {
        let b = block("op");
        let mut h = Holders::none();
        h.report(&b, "alerts", (EV, 50, "smart"), 20, &fingerprint("f1"));
        assert_eq!(h.roster(), ["op", "alerts"]);
        let all = h.all(&b);
        assert_eq!(all[0], LiveReport::implied(&b));
        assert_eq!((all[1].action, all[1].end), (EV, 50));
        assert!(h.repeats("alerts", &fingerprint("f1")));
        assert!(!h.repeats("op", &fingerprint("f1")));
    }

    #[test]
    fn details_alone_keep_the_report_apart() {
        let b = block("alerts");
        let mut h = Holders::none();
        h.created(&b, &fingerprint("f1"));
        assert_eq!(h.roster(), ["alerts"]);
        assert!(h.repeats("alerts", &fingerprint("f1")));
    }

    #[test]
    fn a_retraction_takes_the_sources_report_if_its_details_match() {
        let b = block("op");
        let mut h = Holders::none();
        h.report(&b, "alerts", (EV, 50, "smart"), 20, &fingerprint("f1"));
        assert!(
            h.retract(&b, "alerts", &fingerprint("f0")).is_none(),
            "another episode"
        );
        assert!(h.retract(&b, "nobody", &Details::new()).is_none());
        let taken = h.retract(&b, "alerts", &fingerprint("f1")).unwrap();
        assert_eq!(taken.source, "alerts");
        assert_eq!(h.roster(), ["op"]);
        // The implied report, retracted by its source: nothing is left.
        let mut alone = Holders::none();
        assert!(alone.retract(&b, "op", &Details::new()).is_some());
        assert!(alone.roster().is_empty() && alone.all(&b).is_empty());
    }

    #[test]
    fn past_the_most_holders_the_others_hold_together() {
        let b = block("s0");
        let mut h = Holders::none();
        for n in 1..MAX_HOLDERS {
            h.report(&b, &format!("s{n}"), (MB, 50, "c"), 20, &Details::new());
        }
        assert_eq!(h.roster().len(), MAX_HOLDERS);
        h.report(&b, "one-more", (EV, 60, "x"), 30, &Details::new());
        h.report(&b, "and-another", (MB, 70, "y"), 40, &Details::new());
        let roster = h.roster();
        assert_eq!(roster.len(), MAX_HOLDERS + 1);
        assert_eq!(roster.last().map(String::as_str), Some(OTHER_SOURCES));
        let others = h
            .all(&b)
            .into_iter()
            .find(|r| r.source == OTHER_SOURCES)
            .unwrap();
        assert_eq!((others.action, others.end, others.reports), (EV, 70, 2));
        // A source kept apart still merges into its own.
        h.report(&b, "s3", (EV, 50, "c"), 50, &Details::new());
        assert_eq!(h.roster().len(), MAX_HOLDERS + 1);
        // One of the others retracts nothing alone.
        assert!(h.retract(&b, "one-more", &Details::new()).is_none());
    }

    #[test]
    fn an_update_is_said_by_every_live_report() {
        let b = block("op");
        let mut h = Holders::none();
        h.report(&b, "alerts", (EV, 50, "smart"), 20, &Details::new());
        h.update(Some(99), Some(MB), Some("patched"));
        for r in h.all(&b) {
            assert_eq!((r.action, r.end), (MB, 99));
            assert!(r.cause.ends_with("patched"), "{r:?}");
        }
    }
}
