//! A detector's signals in one transaction: reports and retractions of either kind, each
//! decided on its own, in order, against what the ones before it left (a guardrail refuses
//! one report, not the rest), and committed together. Alertmanager's webhook sends one per
//! delivery: everything that could be stored is durable before it answers.

use super::add::{Add, AddOutcome};
use super::retract::{retract, Retracted};
use super::{earlier, Applied, Command, Keying, Op, Request, Tx, TxResult, Writer};
use crate::metrics::Metrics;
use crate::provenance::Signal;
use crate::store::{Result, Watched};

pub(crate) struct Ingest {
    signals: Vec<Signal>,
    /// Request time.
    now: i64,
}

/// What one signal did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ingested {
    /// A report's outcome, as an add of it alone would have had.
    Reported(AddOutcome),
    Retracted(Retracted),
}

impl Command for Ingest {
    /// One outcome per signal, in order.
    type Outcome = Vec<Ingested>;

    fn op(request: Request<Ingest>) -> Op {
        Op::Ingest(request)
    }

    fn weight(&self) -> usize {
        self.signals.len()
    }

    fn touched(&self, _due: &[Vec<u8>], mut visit: impl FnMut(Watched<'_>)) {
        for signal in &self.signals {
            let (kind, id) = signal.item();
            visit(Watched::Item(kind, id));
        }
    }

    fn apply(&self, tx: &Tx<'_>, due: &[Vec<u8>]) -> TxResult<Result<Applied<Vec<Ingested>>>> {
        let mut outcomes = Vec::with_capacity(self.signals.len());
        let mut earliest_end = None;
        for signal in &self.signals {
            let (outcome, end) = match signal {
                Signal::Report(kind, item) => {
                    let add = Add::new(*kind, vec![item.clone()], self.now, None);
                    match add.apply(tx, due)? {
                        Ok(applied) => (Ingested::Reported(applied.outcome), applied.earliest_end),
                        Err(e) => return Ok(Err(e)),
                    }
                }
                Signal::Retract(kind, retraction) => {
                    match retract(tx, *kind, retraction, self.now)? {
                        Ok(applied) => (Ingested::Retracted(applied.outcome), applied.earliest_end),
                        Err(e) => return Ok(Err(e)),
                    }
                }
            };
            earliest_end = earlier(earliest_end, end);
            outcomes.push(outcome);
        }
        Ok(Ok(Applied {
            outcome: outcomes,
            earliest_end,
        }))
    }

    fn record(outcome: &Vec<Ingested>, metrics: &Metrics) {
        for ingested in outcome {
            match ingested {
                Ingested::Reported(added) => Add::record(added, metrics),
                Ingested::Retracted(retracted) => metrics.detectors.retracted(retracted.as_str()),
            }
        }
    }
}

impl<K: Keying<Vec<Ingested>>> Writer<'_, K> {
    /// Applies `signals`, each on its own and in order, in one transaction.
    pub async fn ingest(&self, signals: Vec<Signal>, now: i64) -> Result<(Vec<Ingested>, u64)> {
        self.submit(Ingest { signals, now }).await
    }
}
