//! Enforcers' statuses of blocked items ([`crate::enforcement`]): stored only for an item
//! blocked now, dropped in the transaction that ends the block ([`Tx::drop_statuses`]).
//!
//! All of an item's statuses are one value under the item's key in `enforcement`: sled's
//! transactions cannot scan a prefix, so the end of a block finds them by that one key.
//! A report that changes nothing (the same state, detail and revision) writes nothing, so
//! an enforcer that reports its whole view after every reconcile costs no write in a
//! steady state.

use super::{Applied, Command, Keying, Op, Request, Tx, TxResult, Writer};
use crate::enforcement::{self, EnforcementStatus, Reported, Statuses};
use crate::model::Kind;
use crate::store::{keys, Result, Watched};

pub(crate) struct Report {
    enforcer: String,
    reports: Vec<Reported>,
}

/// What storing an enforcer's reports did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReportOutcome {
    /// Reports that changed a status (or added one).
    pub stored: usize,
    /// Reports equal to the stored status.
    pub unchanged: usize,
    /// Reports about items not blocked now, which are not stored.
    pub not_blocked: Vec<(Kind, String)>,
}

impl Command for Report {
    type Outcome = ReportOutcome;

    fn op(request: Request<Report>) -> Op {
        Op::Report(request)
    }

    fn weight(&self) -> usize {
        self.reports.len()
    }

    fn touched(&self, _due: &[Vec<u8>], mut visit: impl FnMut(Watched<'_>)) {
        for report in &self.reports {
            visit(Watched::Item(report.kind, &report.id));
        }
    }

    fn apply(&self, tx: &Tx<'_>, _due: &[Vec<u8>]) -> TxResult<Result<Applied<ReportOutcome>>> {
        let mut outcome = ReportOutcome::default();
        for report in &self.reports {
            let (kind, id) = (report.kind, report.id.as_str());
            let blocked = match tx.read(kind, id)? {
                Ok(Some(block)) => block.is_active(tx.now) && !tx.is_announced(kind, id, &block),
                Ok(None) => false,
                Err(e) => return Ok(Err(e)),
            };
            if !blocked {
                outcome.not_blocked.push((kind, id.to_owned()));
                continue;
            }
            let key = keys::item_key(kind, id);
            let mut statuses = tx.statuses(kind, id)?;
            let old = statuses.get(&self.enforcer);
            let same = old.is_some_and(|old| {
                old.state == report.state
                    && old.detail == report.detail
                    && old.observed_revision == report.observed_revision
            });
            if same {
                outcome.unchanged += 1;
                continue;
            }
            let since = match old {
                Some(old) if old.state == report.state => old.since,
                _ => tx.now,
            };
            statuses.insert(
                self.enforcer.clone(),
                EnforcementStatus {
                    state: report.state,
                    since,
                    detail: report.detail.clone(),
                    observed_revision: report.observed_revision,
                },
            );
            tx.enforcement.insert(key, enforcement::encode(&statuses))?;
            outcome.stored += 1;
        }
        Ok(Ok(Applied::endless(outcome)))
    }
}

impl Tx<'_> {
    /// The statuses of `(kind, id)`; none when its value does not decode (logged; `check`
    /// reports it): the next report replaces it.
    fn statuses(&self, kind: Kind, id: &str) -> TxResult<Statuses> {
        let Some(bytes) = self.enforcement.get(keys::item_key(kind, id))? else {
            return Ok(Statuses::new());
        };
        Ok(enforcement::decode(&bytes).unwrap_or_else(|e| {
            tracing::error!(
                key = %format!("enforcement/{}/{id}", kind.plural()),
                error = %e,
                "enforcement statuses do not decode; replaced by the next report"
            );
            Statuses::new()
        }))
    }

    /// Drops `(kind, id)`'s statuses: its block ended. Reads first, so the common end of a
    /// block no enforcer reported on writes nothing more.
    pub(super) fn drop_statuses(&self, kind: Kind, id: &str) -> TxResult<()> {
        let key = keys::item_key(kind, id);
        if self.enforcement.get(&key)?.is_some() {
            self.enforcement.remove(key)?;
        }
        Ok(())
    }
}

impl<K> Writer<'_, K> {
    /// Stores `enforcer`'s reports, atomically.
    pub async fn report_enforcement(
        &self,
        enforcer: String,
        reports: Vec<Reported>,
    ) -> Result<(ReportOutcome, u64)>
    where
        K: Keying<ReportOutcome>,
    {
        self.submit(Report { enforcer, reports }).await
    }
}
