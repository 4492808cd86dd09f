//! etcd's reference rows for `add` and `check`, measured once per run with the same
//! concurrency as ours (`crate::etcd_peer`). Without the bench's `etcd` feature every row is
//! skipped with a note saying how to build it.

use crate::dataset::ItemFn;
use crate::report::{Role, Row};

use super::Bench;

/// Why etcd's rows are missing from a bench built without its `etcd` feature.
#[cfg(not(feature = "etcd"))]
pub(super) const NOT_BUILT: &str = "etcd skipped: the bench was built without its `etcd` \
    feature (cargo run --release -p blocklist-bench --features etcd; needs protoc)";

impl Bench {
    pub(super) fn etcd_skipped(&self, scenario: &str) -> Row {
        #[cfg(feature = "etcd")]
        let why = crate::etcd_peer::NOT_INSTALLED;
        #[cfg(not(feature = "etcd"))]
        let why = NOT_BUILT;
        self.peer_skipped(scenario, Role::Etcd, why)
    }
}

#[cfg(not(feature = "etcd"))]
impl Bench {
    #[expect(
        clippy::unused_async,
        reason = "the signature of the etcd build's twin"
    )]
    pub(super) async fn etcd_add(&mut self) -> Result<Option<Row>, String> {
        Ok(None)
    }

    #[expect(
        clippy::unused_async,
        reason = "the signature of the etcd build's twin"
    )]
    pub(super) async fn etcd_check(
        &mut self,
        _items: usize,
        _item: ItemFn,
        _registered: u64,
    ) -> Result<Option<Row>, String> {
        Ok(None)
    }
}

#[cfg(feature = "etcd")]
impl Bench {
    pub(super) async fn start_etcd(&mut self) -> Result<Option<crate::etcd_peer::Etcd>, String> {
        if !self.settings.peer {
            return Ok(None);
        }
        let dir = self.fresh_dir("etcd");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        match &self.settings.etcd_peer_endpoints {
            Some(endpoints) => crate::etcd_peer::Etcd::existing(endpoints.clone())
                .await
                .map(Some),
            None => crate::etcd_peer::Etcd::start(&dir, &self.settings.etcd_bin).await,
        }
    }

    pub(super) async fn etcd_add(&mut self) -> Result<Option<Row>, String> {
        use crate::etcd_peer::AddWorker;
        if let Some(row) = &self.refs.etcd_add {
            return Ok(row.clone());
        }
        let row = match self.start_etcd().await? {
            None => None,
            Some(etcd) => {
                let mut workers = Vec::new();
                for worker in 0..self.settings.concurrency {
                    workers.push(AddWorker::new(&etcd, worker, None).await?);
                }
                let (_, phase, cpu) = self.measure(workers, etcd.pids()).await;
                let mut row = Row::from_phase("add", Role::Etcd, &phase, cpu, false);
                row.add_note(
                    "etcd: txn(if create_revision = 0 then put with lease) per add, a lease per \
                     worker and end-second, one gRPC connection per worker",
                );
                Some(row)
            }
        };
        self.refs.etcd_add = Some(row.clone());
        Ok(row)
    }

    pub(super) async fn etcd_check(
        &mut self,
        items: usize,
        item: ItemFn,
        registered: u64,
    ) -> Result<Option<Row>, String> {
        use crate::etcd_peer::CheckWorker;
        if let Some(row) = &self.refs.etcd_check {
            return Ok(row.clone());
        }
        let row = match self.start_etcd().await? {
            None => None,
            Some(etcd) => {
                etcd.load(items, &*item).await?;
                let mut workers = Vec::new();
                for w in 0..self.settings.concurrency {
                    workers.push(CheckWorker::new(&etcd, w as u64, registered).await?);
                }
                let (_, phase, cpu) = self.measure(workers, etcd.pids()).await;
                let mut row = Row::from_phase("check", Role::Etcd, &phase, cpu, false);
                row.add_note(&format!(
                    "etcd: linearizable get of a random registered task manager, {items} items \
                     stored, one gRPC connection per worker"
                ));
                Some(row)
            }
        };
        self.refs.etcd_check = Some(row.clone());
        Ok(row)
    }
}
