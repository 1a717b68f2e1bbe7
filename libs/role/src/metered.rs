//! Object-store requests as process metrics: `lakelog_object_store_{puts,put_bytes,gets,
//! deletes,lists}_total`, and metadata-store requests: `lakelog_metadata_{write_txns,reads,
//! log_commits,watches}_total`, from counting wrappers followed into the registry every second.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use objstore::counting::{CountingStore, Counts};
use objstore::object_store::ObjectStore;
use telemetry::CountSource;

/// Wraps a role's object store so its requests are counted in the process's metrics. Only the
/// first store of a process is metered (a role has one); later calls return `objects` as is.
pub fn metered(objects: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
    static METERED: OnceLock<()> = OnceLock::new();
    if METERED.set(()).is_err() {
        return objects;
    }
    let (counted, counts) = CountingStore::new(objects);
    let count = |pick: fn(&Counts) -> &AtomicU64| -> CountSource {
        let counts = counts.clone();
        Box::new(move || counts.get(pick(&counts)))
    };
    telemetry::follow_counts(vec![
        ("object_store_puts", "Object PUTs (WAL objects, segments)", count(|c| &c.puts)),
        ("object_store_put_bytes", "Bytes PUT", count(|c| &c.put_bytes)),
        ("object_store_gets", "Object GETs (whole or ranged)", count(|c| &c.gets)),
        ("object_store_deletes", "Object DELETEs", count(|c| &c.deletes)),
        ("object_store_lists", "Object LISTs", count(|c| &c.lists)),
    ]);
    counted
}

/// Wraps a role's metadata store so its requests are counted in the process's metrics. Only the
/// first store of a process is metered; later calls return `meta` as is.
pub fn metered_meta(meta: Arc<dyn metadata::MetadataStore>) -> Arc<dyn metadata::MetadataStore> {
    static METERED: OnceLock<()> = OnceLock::new();
    if METERED.set(()).is_err() {
        return meta;
    }
    let (counted, counts) = metadata::counting::CountingMeta::new(meta);
    let count = |pick: fn(&metadata::counting::MetaCounts) -> &AtomicU64| -> CountSource {
        let counts = counts.clone();
        Box::new(move || pick(&counts).load(std::sync::atomic::Ordering::Relaxed))
    };
    telemetry::follow_counts(vec![
        ("metadata_write_txns", "Metadata transactions with a write", count(|c| &c.write_txns)),
        ("metadata_reads", "Metadata reads (ranges, read-only transactions)", count(|c| &c.reads)),
        (
            "metadata_log_commits",
            "Log heads put by transactions that succeeded",
            count(|c| &c.log_commits),
        ),
        ("metadata_watches", "Metadata watches started", count(|c| &c.watches)),
    ]);
    counted
}
