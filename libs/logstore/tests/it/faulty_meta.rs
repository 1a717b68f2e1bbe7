//! A metadata store wrapper that loses answers to writes (applied or not), hangs them, applies
//! one after its caller gave up on it, or fails one with a definite error: the ambiguous and
//! failed commits ARCHITECTURE §3.8 resolves.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use metadata::*;

/// A hook run between a read and the caller's next step.
pub type GetHook = Arc<dyn Fn() -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

pub struct FaultyMeta {
    inner: Arc<dyn MetadataStore>,
    /// Every nth write txn: applied, answer lost.
    pub lose_applied_every: AtomicU64,
    /// Every nth write txn: not applied, answer lost.
    pub lose_unapplied_every: AtomicU64,
    /// Every write txn hangs forever (a writer stuck between PUT and commit).
    pub hang_writes: AtomicBool,
    /// Write txns that hung so far.
    pub hung: AtomicU64,
    /// With `lose_applied_every`: the lease the lost txn put under is revoked before the
    /// answer is lost, so the writer's re-send finds its incarnation gone.
    pub revoke_lease_on_loss: AtomicBool,
    /// The next write txn putting this key is applied only after this delay, by a task of
    /// its own: a caller that stops waiting (a deadline) does not stop it, as a timed-out etcd
    /// write may still land (TiDB#47060).
    pub apply_late: Mutex<Option<(Vec<u8>, Duration)>>,
    /// The next write txn putting this key waits this long, then fails definitely (nothing
    /// applied, outcome known).
    pub fail_put: Mutex<Option<(Vec<u8>, Duration)>>,
    /// After the next read-only txn that reads this key has answered, the hook runs (once)
    /// before the answer is returned: a concurrent client's step in the window between a
    /// caller's read and its write.
    pub after_read: Mutex<Option<(Vec<u8>, GetHook)>>,
    /// Every write txn waits this many milliseconds first (an overloaded store).
    pub slow_writes_ms: AtomicU64,
    /// The next write txn putting this key is applied and its answer lost; the write txn
    /// after it fails with the error (definite: nothing applied), as a re-send that meets a
    /// full store (NOSPACE) does.
    pub lose_then_fail: Mutex<Option<(Vec<u8>, MetaError)>>,
    /// The error `lose_then_fail` left for the next write txn.
    then_fail: Mutex<Option<MetaError>>,
    writes: AtomicU64,
    pub injected: AtomicU64,
}

impl std::fmt::Debug for FaultyMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyMeta").field("inner", &self.inner).finish_non_exhaustive()
    }
}

impl FaultyMeta {
    pub fn new(inner: Arc<dyn MetadataStore>) -> Arc<FaultyMeta> {
        Arc::new(FaultyMeta {
            inner,
            lose_applied_every: AtomicU64::new(0),
            lose_unapplied_every: AtomicU64::new(0),
            hang_writes: AtomicBool::new(false),
            hung: AtomicU64::new(0),
            revoke_lease_on_loss: AtomicBool::new(false),
            apply_late: Mutex::new(None),
            fail_put: Mutex::new(None),
            after_read: Mutex::new(None),
            slow_writes_ms: AtomicU64::new(0),
            lose_then_fail: Mutex::new(None),
            then_fail: Mutex::new(None),
            writes: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        })
    }

    fn take_if<T>(slot: &Mutex<Option<(Vec<u8>, T)>>, hit: impl Fn(&[u8]) -> bool) -> Option<T> {
        let mut s = slot.lock().unwrap_or_else(|e| e.into_inner());
        if s.as_ref().is_some_and(|(k, _)| hit(k)) { s.take().map(|(_, v)| v) } else { None }
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
            let reads = |k: &[u8]| {
                txn.success.iter().any(|op| matches!(op, TxnOp::Get(r) if r.range.key == k))
            };
            let hook = Self::take_if(&self.after_read, reads);
            let r = self.inner.txn(txn).await;
            if let Some(h) = hook {
                self.injected.fetch_add(1, Ordering::SeqCst);
                h().await;
            }
            return r;
        }
        let slow = self.slow_writes_ms.load(Ordering::SeqCst);
        if slow > 0 {
            tokio::time::sleep(Duration::from_millis(slow)).await;
        }
        if self.hang_writes.load(Ordering::SeqCst) {
            self.hung.fetch_add(1, Ordering::SeqCst);
            futures::future::pending::<()>().await;
        }
        let puts = |k: &[u8]| {
            txn.success.iter().any(|op| matches!(op, TxnOp::Put { key, .. } if key == k))
        };
        if let Some(delay) = Self::take_if(&self.apply_late, puts) {
            self.injected.fetch_add(1, Ordering::SeqCst);
            let inner = self.inner.clone();
            let late = tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                inner.txn(txn).await
            });
            return late.await.map_err(|e| MetaError::Internal(e.to_string()))?;
        }
        if let Some(e) = self.then_fail.lock().unwrap_or_else(|e| e.into_inner()).take() {
            self.injected.fetch_add(1, Ordering::SeqCst);
            return Err(e);
        }
        if let Some(e) = Self::take_if(&self.lose_then_fail, puts) {
            let r = self.inner.txn(txn).await?;
            if r.succeeded {
                self.injected.fetch_add(1, Ordering::SeqCst);
                *self.then_fail.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                return Err(MetaError::OutcomeUnknown {
                    op: "txn",
                    reason: "injected: answer lost".to_owned(),
                });
            }
            return Ok(r);
        }
        if let Some(delay) = Self::take_if(&self.fail_put, puts) {
            self.injected.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(delay).await;
            return Err(MetaError::Unavailable("injected: write refused".to_owned()));
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
