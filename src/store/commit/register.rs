//! Registering task managers on nodes (or moving them), and unregistering them: `tm_node`
//! and its inverse index `node_tms` change together, with one event per change.

use std::collections::HashMap;

use super::{Applied, Command, Keying, Mode, Op, Request, Tx, TxResult, Writer};
use crate::model::{Change, EventType};
use crate::store::{Result, Store, Watched};

pub(crate) struct Register {
    /// `(task manager, node)` pairs; a later pair for the same task manager wins.
    registrations: Vec<(String, String)>,
}

/// What registering one task manager did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registered {
    Created,
    Moved,
    Unchanged,
}

impl Command for Register {
    /// One result per pair, in order.
    type Outcome = Vec<Registered>;

    fn op(request: Request<Register>) -> Op {
        Op::Register(request)
    }

    fn weight(&self) -> usize {
        self.registrations.len()
    }

    fn touched(&self, _due: &[Vec<u8>], mut visit: impl FnMut(Watched<'_>)) {
        for (tm, _) in &self.registrations {
            visit(Watched::Registration(tm));
        }
    }

    fn apply(&self, tx: &Tx<'_>, _due: &[Vec<u8>]) -> TxResult<Result<Applied<Vec<Registered>>>> {
        // Read every old node first, so a corrupt value fails the request before any write.
        let mut current: HashMap<&str, Option<String>> = HashMap::new();
        for (tm, _) in &self.registrations {
            if !current.contains_key(tm.as_str()) {
                match tx.node_of(tm)? {
                    Ok(old) => current.insert(tm, old),
                    Err(e) => return Ok(Err(e)),
                };
            }
        }
        let mut results = Vec::with_capacity(self.registrations.len());
        for (tm, node) in &self.registrations {
            // A repeated task manager moves from where the earlier pair put it.
            let old = current.insert(tm, Some(node.clone())).flatten();
            let result = match &old {
                Some(old) if old == node => Registered::Unchanged,
                Some(_) => Registered::Moved,
                None => Registered::Created,
            };
            if result != Registered::Unchanged {
                tx.set_registration(tm, old.as_deref(), Some(node))?;
                tx.emit(EventType::Registered, registration_change(tm, node));
            }
            results.push(result);
        }
        Ok(Ok(Applied::endless(results)))
    }
}

pub(crate) struct Unregister {
    tm: String,
}

impl Command for Unregister {
    /// The node the task manager was registered on, if it was.
    type Outcome = Option<String>;

    fn op(request: Request<Unregister>) -> Op {
        Op::Unregister(request)
    }

    fn weight(&self) -> usize {
        1
    }

    fn touched(&self, _due: &[Vec<u8>], mut visit: impl FnMut(Watched<'_>)) {
        visit(Watched::Registration(&self.tm));
    }

    fn apply(&self, tx: &Tx<'_>, _due: &[Vec<u8>]) -> TxResult<Result<Applied<Option<String>>>> {
        Ok(unregister(tx, &self.tm)?.map(Applied::endless))
    }
}

/// Removes `tm`'s registration in `tx`; the node it was on.
pub(super) fn unregister(tx: &Tx<'_>, tm: &str) -> TxResult<Result<Option<String>>> {
    let old = match tx.node_of(tm)? {
        Ok(old) => old,
        Err(e) => return Ok(Err(e)),
    };
    if let Some(node) = &old {
        tx.set_registration(tm, Some(node), None)?;
        tx.emit(EventType::Unregistered, registration_change(tm, node));
    }
    Ok(Ok(old))
}

fn registration_change(tm: &str, node: &str) -> Change {
    Change::Registration {
        tm: tm.to_owned(),
        node: node.to_owned(),
    }
}

impl<K> Writer<'_, K> {
    /// Registers (or moves) task managers on nodes, atomically; one result per pair.
    pub async fn register(
        &self,
        registrations: Vec<(String, String)>,
    ) -> Result<(Vec<Registered>, u64)>
    where
        K: Keying<Vec<Registered>>,
    {
        self.submit(Register { registrations }).await
    }

    /// Removes a task manager's registration; the node it was on, or `None`.
    pub async fn unregister(&self, tm: String) -> Result<(Option<String>, u64)>
    where
        K: Keying<Option<String>>,
    {
        self.submit(Unregister { tm }).await
    }
}

impl Store {
    /// [`Writer::register`], committed.
    pub async fn register(
        &self,
        registrations: Vec<(String, String)>,
    ) -> Result<(Vec<Registered>, u64)> {
        self.with_mode(Mode::Commit).register(registrations).await
    }

    /// [`Writer::unregister`], committed.
    pub async fn unregister(&self, tm: String) -> Result<(Option<String>, u64)> {
        self.with_mode(Mode::Commit).unregister(tm).await
    }
}
