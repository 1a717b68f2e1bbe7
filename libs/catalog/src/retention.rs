//! Streams' retention (ARCHITECTURE §5): each stream's `retention_ms` / `retention_bytes`
//! become hard trims of its partitions' logs, computed over the running-maximum timestamp
//! (`logstore::retention`); the cleaner then reclaims what the compactor and the trims freed.

use logstore::{LogError, LogId};

use crate::{Catalog, CatalogError};

/// One partition retention trimmed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trimmed {
    pub stream: String,
    pub partition: u32,
    pub log: LogId,
    /// The log's start after the trim.
    pub start: u64,
}

/// Applies every stream's retention once, at `now_ms`. A partition whose log vanished
/// meanwhile (the stream was deleted) is skipped.
pub async fn apply_all(catalog: &Catalog, now_ms: i64) -> Result<Vec<Trimmed>, CatalogError> {
    let mut out = Vec::new();
    for s in catalog.list().await? {
        let (ms, bytes) = (s.config.retention_ms(), s.config.retention_bytes());
        if ms.is_none() && bytes.is_none() {
            continue;
        }
        for (partition, log) in s.partitions.iter().enumerate() {
            match logstore::retention::apply(catalog.logs(), *log, ms, bytes, now_ms).await {
                Ok(Some(start)) => out.push(Trimmed {
                    stream: s.name.clone(),
                    partition: partition as u32,
                    log: *log,
                    start,
                }),
                Ok(None) | Err(LogError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(out)
}
