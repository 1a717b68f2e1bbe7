//! A metadata store wrapper that loses answers to writes (applied or not), or hangs them:
//! the ambiguous commits ARCHITECTURE §3.8 resolves.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use metadata::*;

#[derive(Debug)]
pub struct FaultyMeta {
    inner: Arc<dyn MetadataStore>,
    /// Every nth write txn: applied, answer lost.
    pub lose_applied_every: AtomicU64,
    /// Every nth write txn: not applied, answer lost.
    pub lose_unapplied_every: AtomicU64,
    /// Every write txn hangs forever (a writer stuck between PUT and commit).
    pub hang_writes: AtomicBool,
    /// With `lose_applied_every`: the lease the lost txn put under is revoked before the
    /// answer is lost, so the writer's re-send finds its incarnation gone.
    pub revoke_lease_on_loss: AtomicBool,
    writes: AtomicU64,
    pub injected: AtomicU64,
}

impl FaultyMeta {
    pub fn new(inner: Arc<dyn MetadataStore>) -> Arc<FaultyMeta> {
        Arc::new(FaultyMeta {
            inner,
            lose_applied_every: AtomicU64::new(0),
            lose_unapplied_every: AtomicU64::new(0),
            hang_writes: AtomicBool::new(false),
            revoke_lease_on_loss: AtomicBool::new(false),
            writes: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        })
    }
}

fn every(n: &AtomicU64, i: u64) -> bool {
    let n = n.load(Ordering::SeqCst);
    n > 0 && i.is_multiple_of(n)
}

#[async_trait]
impl MetadataStore for FaultyMeta {
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse, MetaError> {
        self.inner.range(req).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, MetaError> {
        let writes = txn.success.iter().any(|op| matches!(op, TxnOp::Put { .. }));
        if !writes {
            return self.inner.txn(txn).await;
        }
        if self.hang_writes.load(Ordering::SeqCst) {
            futures::future::pending::<()>().await;
        }
        let i = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
        let lost =
            || MetaError::OutcomeUnknown { op: "txn", reason: "injected: answer lost".to_owned() };
        if every(&self.lose_unapplied_every, i) {
            self.injected.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(5)).await;
            return Err(lost());
        }
        let lease = txn.success.iter().find_map(|op| match op {
            TxnOp::Put { lease, .. } if *lease != 0 => Some(*lease),
            _ => None,
        });
        let r = self.inner.txn(txn).await;
        if every(&self.lose_applied_every, i) && r.as_ref().is_ok_and(|r| r.succeeded) {
            self.injected.fetch_add(1, Ordering::SeqCst);
            if self.revoke_lease_on_loss.load(Ordering::SeqCst)
                && let Some(lease) = lease
            {
                let _ = self.inner.lease_revoke(lease).await;
            }
            return Err(lost());
        }
        r
    }

    async fn lease_grant(&self, ttl: Duration) -> Result<LeaseId, MetaError> {
        self.inner.lease_grant(ttl).await
    }

    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<Duration, MetaError> {
        self.inner.lease_keep_alive(lease).await
    }

    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), MetaError> {
        self.inner.lease_revoke(lease).await
    }

    async fn watch(&self, req: WatchRequest) -> Result<WatchStream, MetaError> {
        self.inner.watch(req).await
    }

    async fn compact(&self, revision: Revision) -> Result<(), MetaError> {
        self.inner.compact(revision).await
    }
}
