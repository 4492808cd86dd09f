//! Importing exported items as they were (start included): items expired since the export
//! are skipped, and an active item is replaced, or merged into when the import merges.

use super::{earlier, Applied, Command, Mode, Op, Request, Tx, TxResult};
use std::collections::BTreeMap;

use crate::model::{Details, Item, Kind};
use crate::provenance::{Operation, PastBlock, Report};
use crate::store::{Result, Store, Watched};

pub(crate) struct Import {
    /// Distinct ids.
    items: Vec<(Kind, Item)>,
    /// The kept reports of some of them, newest first.
    reports: BTreeMap<(Kind, String), Vec<Report>>,
    /// Past blocks, oldest first per id.
    past: Vec<(Kind, PastBlock)>,
    /// Merge into active items rather than replace them.
    merge: bool,
}

impl Command for Import {
    /// How many items it wrote.
    type Outcome = usize;

    fn op(request: Request<Import>) -> Op {
        Op::Import(request)
    }

    fn weight(&self) -> usize {
        self.items.len() + self.past.len()
    }

    fn touched(&self, _due: &[Vec<u8>], mut visit: impl FnMut(Watched<'_>)) {
        for (kind, item) in &self.items {
            visit(Watched::Item(*kind, &item.id));
        }
        for (kind, past) in &self.past {
            visit(Watched::Item(*kind, &past.item.id));
        }
    }

    fn apply(&self, tx: &Tx<'_>, _due: &[Vec<u8>]) -> TxResult<Result<Applied<usize>>> {
        // Read everything first, so a corrupt value fails the request before any write.
        let mut olds = Vec::with_capacity(self.items.len());
        for (kind, item) in &self.items {
            match tx.read(*kind, &item.id)? {
                Ok(old) => olds.push(old),
                Err(e) => return Ok(Err(e)),
            }
        }
        let mut written = 0;
        let mut earliest_end = None;
        for ((kind, item), old) in self.items.iter().zip(olds) {
            if item.end_timestamp <= tx.now {
                continue; // expired since the export
            }
            let (kind, id) = (*kind, item.id.as_str());
            let active = old.as_ref().filter(|b| b.is_active(tx.now));
            let (mut block, reports) = match active {
                Some(existing) if self.merge => {
                    let mut holders = match tx.holders(kind, id)? {
                        Ok(holders) => holders,
                        Err(e) => return Ok(Err(e)),
                    };
                    let claim = (item.action, item.end_timestamp, item.cause.as_str());
                    holders.report(existing, &item.source, claim, tx.now, &Details::new());
                    holders.store(tx, kind, id)?;
                    let mut merged = existing.clone();
                    merged.merge(item.action, item.end_timestamp, &item.cause);
                    merged.reported(tx.now);
                    // The merge is a report like any other, from the imported item's source.
                    let report = Report {
                        timestamp: tx.now,
                        source: item.source.clone(),
                        operation: Operation::Add,
                        action: item.action,
                        end_timestamp: item.end_timestamp,
                        cause: item.cause.clone(),
                    };
                    tx.add_reports(kind, id, Some(existing), &merged, &[report])?;
                    (merged, None)
                }
                _ => {
                    // Replaced: the stored block's reports are not the imported one's.
                    if let Some(old) = &old {
                        tx.drop_reports(kind, id, old)?;
                        tx.drop_live(kind, id)?;
                    }
                    (item.block(), self.reports.get(&(kind, item.id.clone())))
                }
            };
            tx.store(kind, id, old.as_ref(), &mut block)?;
            // Kept newest first; stored numbered oldest first, ending at the count.
            if let Some(reports) = reports {
                let oldest_first: Vec<Report> = reports.iter().rev().cloned().collect();
                tx.add_reports(kind, id, None, &block, &oldest_first)?;
            }
            if !block.is_permanent() {
                earliest_end = earlier(earliest_end, Some(block.end));
            }
            written += 1;
        }
        for (kind, past) in &self.past {
            tx.keep_past(*kind, &past.item.id, &past.item.block(), &past.ended)?;
        }
        Ok(Ok(Applied {
            outcome: written,
            earliest_end,
        }))
    }
}

impl Store {
    /// Writes exported items (see [`crate::backup`]) as they were, merging into active ones
    /// when `merge`. The ids must be distinct. Returns how many were written.
    pub async fn import(&self, items: Vec<(Kind, Item)>, merge: bool) -> Result<usize> {
        self.import_with(items, BTreeMap::new(), Vec::new(), merge)
            .await
    }

    /// [`Store::import`], with the kept reports of the items (newest first) and past blocks
    /// (oldest first per id; kept within the history's bounds).
    pub async fn import_with(
        &self,
        items: Vec<(Kind, Item)>,
        reports: BTreeMap<(Kind, String), Vec<Report>>,
        past: Vec<(Kind, PastBlock)>,
        merge: bool,
    ) -> Result<usize> {
        let import = Import {
            items,
            reports,
            past,
            merge,
        };
        let (written, _) = self.submit(import, Mode::Commit).await?;
        Ok(written)
    }
}
