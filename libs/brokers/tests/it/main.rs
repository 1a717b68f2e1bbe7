//! The writer's Kafka broker over the in-memory metadata and object stores: what no other
//! crate's tests pin on their own, the idempotent producer's state carried from one owner of
//! a partition to the next (ARCHITECTURE §11: checkpoints and a replay of the log).

mod checksums;
mod groups;
mod metadata_cost;
mod tenure;
mod transactions;

use std::sync::Arc;
use std::time::Duration;

use brokers::LogBroker;
use catalog::Catalog;
use logstore::{LogStorage, LogStorageConfig, SystemClock};
use metadata::MetadataStore;
use objstore::object_store::ObjectStore;

/// Writer `id` of `cluster` on the stores (5 ms flushes), with its Kafka broker, whose catalog
/// follows the streams.
async fn writer(
    meta: &Arc<dyn MetadataStore>,
    objects: &Arc<dyn ObjectStore>,
    cluster: &str,
    id: &str,
) -> anyhow::Result<(LogStorage, LogBroker)> {
    let mut cfg = LogStorageConfig::new(cluster, id);
    cfg.kafka_advertise = format!("{id}.test:9092");
    cfg.flush_interval = Duration::from_millis(5);
    let w = LogStorage::open(meta.clone(), objects.clone(), cfg, Arc::new(SystemClock)).await?;
    let node = logstore::membership::node_id(meta.as_ref(), cluster, id).await?;
    let catalog = Catalog::new(meta.clone(), w.reader().clone(), cluster).with_followed_streams();
    let broker = LogBroker::writer(catalog, cluster, w.clone()).with_node_id(node);
    Ok((w, broker))
}
