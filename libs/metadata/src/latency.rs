//! A [`MetadataStore`] wrapper that delays each request as a store a zone away would: a draw
//! of a [`Spread`] before the inner store is asked (watches start at once: their events come as
//! the inner store's do). For benchmarks on one machine (`--latency-profile`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use config::latency::{Draws, Spread};
use parking_lot::Mutex;

use crate::store::{MetadataStore, WatchStream};
use crate::types::*;

/// Delays every request to `inner` but a watch by a draw of `spread`.
#[derive(Debug)]
pub struct DelayedMeta {
    inner: Arc<dyn MetadataStore>,
    spread: Spread,
    draws: Mutex<Draws>,
}

impl DelayedMeta {
    pub fn new(inner: Arc<dyn MetadataStore>, spread: Spread, seed: u64) -> DelayedMeta {
        DelayedMeta { inner, spread, draws: Mutex::new(Draws::new(seed)) }
    }

    async fn wait(&self) {
        let d = self.draws.lock().delay(&self.spread);
        tokio::time::sleep(d).await;
    }
}

#[async_trait]
impl MetadataStore for DelayedMeta {
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse, MetaError> {
        self.wait().await;
        self.inner.range(req).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, MetaError> {
        self.wait().await;
        self.inner.txn(txn).await
    }

    async fn lease_grant(&self, ttl: Duration) -> Result<LeaseId, MetaError> {
        self.wait().await;
        self.inner.lease_grant(ttl).await
    }

    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<Duration, MetaError> {
        self.wait().await;
        self.inner.lease_keep_alive(lease).await
    }

    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), MetaError> {
        self.wait().await;
        self.inner.lease_revoke(lease).await
    }

    async fn watch(&self, req: WatchRequest) -> Result<WatchStream, MetaError> {
        self.inner.watch(req).await
    }

    async fn compact(&self, revision: Revision) -> Result<(), MetaError> {
        self.wait().await;
        self.inner.compact(revision).await
    }
}
