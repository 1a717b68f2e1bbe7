//! The [`MetadataStore`] trait: the small, etcd-shaped contract every Lakelog role reaches its
//! metadata through.

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use futures::Stream;

use crate::types::*;

/// A stream of watch batches: each batch holds the events of one or more revisions, in
/// revision order, with no gap. An `Err` ends the stream (compacted start, fell behind,
/// connection lost): the caller re-reads and watches again from the revision it has.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<Vec<WatchEvent>, MetaError>> + Send>>;

/// A linearizable key-value store with revisions, transactions, leases and watches: etcd's
/// model. Every read is linearizable unless it names an older revision.
///
/// Contract (checked by the conformance suite against every backend):
/// - every write transaction advances the revision by exactly one; reads report the revision
///   they were served at;
/// - `txn` is atomic over all its keys; compares see the state before the txn;
/// - a write whose answer was lost returns [`MetaError::OutcomeUnknown`]; it is never
///   retried inside the store, because it may have been applied;
/// - a key put under a lease is deleted when the lease expires or is revoked.
#[async_trait]
pub trait MetadataStore: Send + Sync + std::fmt::Debug + 'static {
    /// Reads one key or a range.
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse, MetaError>;

    /// Runs a transaction. Oversized or self-conflicting transactions are refused whole
    /// with `InvalidArgument` (see [`Txn::validate`]).
    async fn txn(&self, txn: Txn) -> Result<TxnResponse, MetaError>;

    /// Grants a lease of at least `ttl` (rounded up to whole seconds; etcd may raise it to its
    /// minimum TTL).
    async fn lease_grant(&self, ttl: Duration) -> Result<LeaseId, MetaError>;

    /// Renews a lease once; returns its TTL. The caller runs the keep-alive loop, so it
    /// notices when renewal fails.
    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<Duration, MetaError>;

    /// Revokes a lease, deleting every key attached to it.
    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), MetaError>;

    /// Watches a range from a revision.
    async fn watch(&self, req: WatchRequest) -> Result<WatchStream, MetaError>;

    /// Discards history before `revision`: reads and watches at older revisions then fail
    /// with `Compacted`.
    async fn compact(&self, revision: Revision) -> Result<(), MetaError>;

    // ---- provided conveniences, all built on the calls above ----

    /// Reads one key.
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>, MetaError> {
        Ok(self.range(RangeRequest::key(key)).await?.kvs.into_iter().next())
    }

    /// Puts one key (lease 0: none); returns the write's revision.
    async fn put(&self, key: &[u8], value: &[u8], lease: LeaseId) -> Result<Revision, MetaError> {
        let resp =
            self.txn(Txn::new().and_then([TxnOp::put_with_lease(key, value, lease)])).await?;
        Ok(resp.revision)
    }

    /// Deletes a key or range; returns how many keys were deleted.
    async fn delete(&self, range: KeyRange) -> Result<i64, MetaError> {
        let resp = self.txn(Txn::new().and_then([TxnOp::delete(range)])).await?;
        match resp.results.first() {
            Some(OpResult::Delete { deleted }) => Ok(*deleted),
            other => Err(MetaError::Internal(format!("delete answered {other:?}"))),
        }
    }

    /// The store's current revision.
    async fn current_revision(&self) -> Result<Revision, MetaError> {
        Ok(self.range(RangeRequest::key(&b"\0"[..]).keys_only()).await?.revision)
    }
}
