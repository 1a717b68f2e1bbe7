//! Lakelog's metadata store.
//!
//! Owns the [`MetadataStore`] trait — a small, etcd-shaped contract: ranges, transactions with
//! compares on value, version, create_revision and mod_revision (also over key ranges), reads
//! at a revision, leases, watches and history compaction — and its backends: [`EtcdStore`]
//! for every multi-process deployment, [`EmbeddedStore`] (redb) for `lakelog standalone`, and
//! [`MemoryStore`] (in memory, on tokio's clock) for tests and the deterministic simulation.
//! One conformance suite (`tests/it/conformance.rs`) pins all three to etcd's semantics.
//!
//! Rules: this is the only crate that imports `etcd-client`. It depends on no Lakelog crate but
//! `config`. A write whose answer is lost is never retried here: it surfaces as
//! [`MetaError::OutcomeUnknown`] and the caller resolves it by reading (ARCHITECTURE §3.8).

pub mod counting;
mod embedded;
mod etcd;
pub mod follow;
pub mod latency;
mod memory;
mod store;
mod types;
mod watchers;

pub use embedded::EmbeddedStore;
pub use etcd::EtcdStore;
pub use memory::MemoryStore;
pub use store::{MetadataStore, WatchStream};
pub use types::*;

use std::sync::Arc;

/// Opens the store a config names.
pub async fn open(config: &config::MetadataConfig) -> Result<Arc<dyn MetadataStore>, MetaError> {
    Ok(match config {
        config::MetadataConfig::Etcd(c) => Arc::new(EtcdStore::connect(c).await?),
        config::MetadataConfig::Embedded(c) => Arc::new(EmbeddedStore::open(&c.path).await?),
    })
}
