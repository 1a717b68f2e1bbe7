//! A [`MetadataStore`] adapter that counts requests: write transactions are the metadata
//! store's cost (each is a raft round and an fsync in etcd).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;

use crate::store::{MetadataStore, WatchStream};
use crate::types::*;

/// Request counts so far.
#[derive(Debug, Default)]
pub struct MetaCounts {
    /// Transactions with at least one put or delete.
    pub write_txns: AtomicU64,
    /// Read-only transactions and ranges.
    pub reads: AtomicU64,
    /// Puts of a log's head (`…/head`) by transactions that succeeded: log commits, the unit of
    /// the commit budget (ARCHITECTURE §4).
    pub log_commits: AtomicU64,
    /// Watches started (each a request, and a stream the store keeps).
    pub watches: AtomicU64,
}

/// Counts every request that reaches the inner store.
#[derive(Debug)]
pub struct CountingMeta {
    inner: Arc<dyn MetadataStore>,
    counts: Arc<MetaCounts>,
}

impl CountingMeta {
    pub fn new(inner: Arc<dyn MetadataStore>) -> (Arc<CountingMeta>, Arc<MetaCounts>) {
        let counts = Arc::new(MetaCounts::default());
        (Arc::new(CountingMeta { inner, counts: counts.clone() }), counts)
    }
}

#[async_trait]
impl MetadataStore for CountingMeta {
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse, MetaError> {
        self.counts.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.range(req).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, MetaError> {
        let writes = txn.success.iter().chain(&txn.failure).any(|op| !matches!(op, TxnOp::Get(_)));
        let c = if writes { &self.counts.write_txns } else { &self.counts.reads };
        c.fetch_add(1, Ordering::Relaxed);
        let heads = txn
            .success
            .iter()
            .filter(|op| matches!(op, TxnOp::Put { key, .. } if key.ends_with(b"/head")))
            .count() as u64;
        let resp = self.inner.txn(txn).await?;
        if resp.succeeded && heads > 0 {
            self.counts.log_commits.fetch_add(heads, Ordering::Relaxed);
        }
        Ok(resp)
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
        self.counts.watches.fetch_add(1, Ordering::Relaxed);
        self.inner.watch(req).await
    }

    async fn compact(&self, revision: Revision) -> Result<(), MetaError> {
        self.inner.compact(revision).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryStore;

    #[tokio::test]
    async fn log_commits_count_the_head_puts_of_transactions_that_succeeded()
    -> Result<(), MetaError> {
        let (store, counts) = CountingMeta::new(Arc::new(MemoryStore::new()));
        let commit = |n: i64| {
            Txn::new()
                .when([Compare::mod_revision(b"c/logs/1/head".to_vec(), CompareOp::Equal, n)])
                .and_then([
                    TxnOp::put(b"c/logs/1/head".to_vec(), b"h".to_vec()),
                    TxnOp::put(b"c/logs/2/head".to_vec(), b"h".to_vec()),
                    TxnOp::put(b"c/logs/1/index/0".to_vec(), b"p".to_vec()),
                ])
        };
        assert!(store.txn(commit(0)).await?.succeeded);
        assert!(!store.txn(commit(0)).await?.succeeded, "the head moved");
        assert_eq!(counts.log_commits.load(Ordering::Relaxed), 2);
        assert_eq!(counts.write_txns.load(Ordering::Relaxed), 2);
        Ok(())
    }
}
