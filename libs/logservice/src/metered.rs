//! Object-store requests as process metrics: `lakelog_object_store_{puts,put_bytes,gets,
//! deletes,lists}_total`, from a counting wrapper followed into the registry every second.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use objstore::counting::CountingStore;
use objstore::object_store::ObjectStore;
use telemetry::{Follow, Metrics};

/// Wraps a role's object store so its requests are counted in the process's metrics. Only the
/// first store of a process is metered (a role has one); later calls return `objects` as is.
pub fn metered(objects: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
    static METERED: OnceLock<()> = OnceLock::new();
    if METERED.set(()).is_err() {
        return objects;
    }
    let (counted, counts) = CountingStore::new(objects);
    let m = Metrics::global();
    let follows = [
        Follow::register(m, "object_store_puts", "Object PUTs (WAL objects, segments)"),
        Follow::register(m, "object_store_put_bytes", "Bytes PUT"),
        Follow::register(m, "object_store_gets", "Object GETs (whole or ranged)"),
        Follow::register(m, "object_store_deletes", "Object DELETEs"),
        Follow::register(m, "object_store_lists", "Object LISTs"),
    ];
    tokio::spawn(async move {
        loop {
            let now =
                [&counts.puts, &counts.put_bytes, &counts.gets, &counts.deletes, &counts.lists];
            for (f, c) in follows.iter().zip(now) {
                f.to(counts.get(c));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    counted
}
