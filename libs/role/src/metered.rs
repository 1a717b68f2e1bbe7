//! Object-store requests as process metrics: `lakelog_object_store_{puts,put_bytes,gets,
//! deletes,lists}_total`, from a counting wrapper followed into the registry every second.

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
