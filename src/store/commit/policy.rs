//! Replacing the guardrail policy: stored in `meta` with the transaction's other changes,
//! a `policy` event when it changed, and in force for every later operation of the same
//! transaction.

use super::{Applied, Command, Keying, Mode, Op, Request, Tx, TxResult, Writer};
use crate::model::{Change, EventType};
use crate::policy::Policy;
use crate::store::{Result, Store, Watched};

pub(crate) struct SetPolicy {
    /// Boxed: the committer's queue holds every operation at the size of the largest.
    pub(crate) policy: Box<Policy>,
}

impl Command for SetPolicy {
    /// Whether it changed anything.
    type Outcome = bool;

    fn op(request: Request<SetPolicy>) -> Op {
        Op::SetPolicy(request)
    }

    fn weight(&self) -> usize {
        1
    }

    fn touched(&self, _due: &[Vec<u8>], _visit: impl FnMut(Watched<'_>)) {}

    fn apply(&self, tx: &Tx<'_>, _due: &[Vec<u8>]) -> TxResult<Result<Applied<bool>>> {
        if *tx.policy.borrow() == *self.policy {
            return Ok(Ok(Applied::endless(false)));
        }
        *tx.policy.borrow_mut() = (*self.policy).clone();
        tx.policy_changed.set(true);
        let data = serde_json::to_string(&self.policy).expect("policies serialize");
        tx.emit(EventType::PolicyChanged, Change::Json(data));
        Ok(Ok(Applied::endless(true)))
    }
}

impl<K: Keying<bool>> Writer<'_, K> {
    /// Replaces the policy; true when it changed.
    pub async fn set_policy(&self, policy: Policy) -> Result<(bool, u64)> {
        self.submit(SetPolicy {
            policy: Box::new(policy),
        })
        .await
    }
}

impl Store {
    pub async fn set_policy(&self, policy: Policy) -> Result<(bool, u64)> {
        self.with_mode(Mode::Commit).set_policy(policy).await
    }
}
