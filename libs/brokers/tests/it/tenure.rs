//! A partition's owner changes between two batches of an idempotent producer: the new owner
//! rebuilds the producer's state from the log before it accepts, so a retry of a batch the old
//! owner committed is answered with its original offset and appended nowhere, the next
//! sequence is appended after it, and a gap is refused.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use brokers::LogBroker;
use catalog::Catalog;
use kafka::{Cluster, Partitions, Refused};
use logstore::{LogStorage, LogStorageConfig, SystemClock};
use metadata::MetadataStore;
use objstore::object_store::ObjectStore;
use recordbatch::{BatchHeader, ProducerFields, Record};

const CLUSTER: &str = "t";

/// Writer `id` on the stores, with its Kafka broker.
async fn writer(
    meta: &Arc<dyn MetadataStore>,
    objects: &Arc<dyn ObjectStore>,
    id: &str,
) -> Result<(LogStorage, LogBroker)> {
    let mut cfg = LogStorageConfig::new(CLUSTER, id);
    cfg.kafka_advertise = format!("{id}.test:9092");
    cfg.flush_interval = Duration::from_millis(5);
    let w = LogStorage::open(meta.clone(), objects.clone(), cfg, Arc::new(SystemClock)).await?;
    let node = logstore::membership::node_id(meta.as_ref(), CLUSTER, id).await?;
    let catalog = Catalog::new(meta.clone(), w.reader().clone(), CLUSTER);
    let broker = LogBroker::writer(catalog, CLUSTER, w.clone()).with_node_id(node);
    Ok((w, broker))
}

/// A batch of `n` records of producer `id` at epoch 0 from sequence `seq`.
fn batch(id: i64, seq: i32, n: usize) -> Result<bytes::Bytes> {
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            offset_delta: i as u32,
            value: Some(bytes::Bytes::from(format!("{seq}-{i}"))),
            ..Default::default()
        })
        .collect();
    let producer = ProducerFields { producer_id: id, producer_epoch: 0, base_sequence: seq };
    Ok(recordbatch::encode(&records, producer)?)
}

/// Produces one batch to partition 0 of `t` through `broker`, waiting for its commit.
async fn produce(broker: &LogBroker, id: i64, seq: i32, n: usize) -> Result<Result<i64, Refused>> {
    let b = batch(id, seq, n)?;
    let header = BatchHeader::parse(&b)?;
    let commit = match broker.produce("t", 0, None, b, &header, None).await {
        Ok(c) => c,
        Err(r) => return Ok(Err(r)),
    };
    Ok(commit.await.map(|p| p.base_offset))
}

/// Whether `broker` leads partition 0 of `t` now.
async fn leads(broker: &LogBroker) -> Result<bool> {
    let topics = broker.topics(Some(&["t".to_owned()]), None, None).await?;
    let leader = topics.first().and_then(|t| t.partitions.first()).and_then(|p| p.leader);
    Ok(leader == Some(broker.node_id()))
}

/// Waits (20 s at most) until `broker` leads partition 0 of `t`.
async fn until_leads(broker: &LogBroker) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !leads(broker).await? {
        ensure!(tokio::time::Instant::now() < deadline, "the writer never led the partition");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_producer_is_carried_from_one_owner_to_the_next() -> Result<()> {
    let meta: Arc<dyn MetadataStore> = Arc::new(metadata::MemoryStore::new());
    let objects: Arc<dyn ObjectStore> = Arc::new(objstore::object_store::memory::InMemory::new());
    let (w0, b0) = writer(&meta, &objects, "w0").await?;
    let catalog = Catalog::new(meta.clone(), w0.reader().clone(), CLUSTER);
    catalog.create("t", 1, Default::default()).await?;
    ensure!(leads(&b0).await?, "the only writer leads the partition");
    let (id, epoch) =
        b0.init_producer_id(None).await.map_err(|c| anyhow!("InitProducerId: error {c}"))?;
    ensure!(epoch == 0);
    ensure!(produce(&b0, id, 0, 3).await? == Ok(0));
    ensure!(produce(&b0, id, 3, 3).await? == Ok(3));

    // The owner leaves (its lease revoked): the partition moves to the next writer.
    w0.shutdown().await;
    let (w1, b1) = writer(&meta, &objects, "w1").await?;
    until_leads(&b1).await?;
    // The retry of the old owner's last batch: its original offset, nothing appended.
    ensure!(produce(&b1, id, 3, 3).await? == Ok(3), "a retry was not answered as committed");
    // The next batch follows it; a gap is refused.
    ensure!(produce(&b1, id, 6, 2).await? == Ok(6));
    let gap = produce(&b1, id, 10, 1).await?.err().context("a gap was appended")?;
    ensure!(gap.code == kafka::code::OUT_OF_ORDER_SEQUENCE_NUMBER, "{gap:?}");
    let log = catalog.get("t").await?.partitions[0];
    let end = w1.info(log).await?.next_offset;
    ensure!(end == 8, "the log ends at {end}: the retry was appended again");
    w1.shutdown().await;
    Ok(())
}

/// One batch of producer `id` at epoch 0, sequence `seq`: one record of key `k`, through
/// `broker`, waiting for its commit.
async fn keyed(broker: &LogBroker, id: i64, seq: i32) -> Result<Result<i64, Refused>> {
    let records = [Record {
        key: Some(bytes::Bytes::from_static(b"k")),
        value: Some(bytes::Bytes::from(format!("v{seq}"))),
        ..Default::default()
    }];
    let producer = ProducerFields { producer_id: id, producer_epoch: 0, base_sequence: seq };
    let b = recordbatch::encode(&records, producer)?;
    let header = BatchHeader::parse(&b)?;
    Ok(match broker.produce("t", 0, None, b, &header, None).await {
        Ok(c) => c.await.map(|p| p.base_offset),
        Err(r) => Err(r),
    })
}

/// Key compaction takes out an idempotent producer's superseded batches (below the owner's
/// state checkpoint, never above it); the next owner still carries the producer: the retry of
/// its last batch is answered with the original offset, the next batch follows, a gap is
/// refused (ARCHITECTURE §12).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_producer_is_carried_to_the_next_owner_after_key_compaction() -> Result<()> {
    use maintenance::compactor::{Cleanup, Compactor, CompactorConfig, IdleLogs};
    let meta: Arc<dyn MetadataStore> = Arc::new(metadata::MemoryStore::new());
    let objects: Arc<dyn ObjectStore> = Arc::new(objstore::object_store::memory::InMemory::new());
    let (w0, b0) = writer(&meta, &objects, "w0").await?;
    let catalog = Catalog::new(meta.clone(), w0.reader().clone(), CLUSTER);
    let compacted = catalog::StreamConfig::from_pairs([("cleanup.policy", "compact")])?;
    catalog.create("t", 1, compacted).await?;
    let log = catalog.get("t").await?.partitions[0];
    let (id, _) =
        b0.init_producer_id(None).await.map_err(|c| anyhow!("InitProducerId: error {c}"))?;
    // 20 batches of one record, all of key k: 19 of them superseded.
    for seq in 0..20 {
        ensure!(keyed(&b0, id, seq).await? == Ok(i64::from(seq)));
    }
    b0.checkpoint_all().await;
    // A flush after theirs moves the writer's low-water mark past their chunks.
    let other = w0.create_log().await?;
    w0.append(other, 1, bytes::Bytes::from_static(b"x"), None).await?;
    let cleanup = Cleanup { min_dirty_ratio: 0.0, ..Default::default() };
    let cfg = CompactorConfig {
        min_chunks: 1,
        compacted: Arc::new(std::collections::HashMap::from([(log, cleanup)])),
        ..Default::default()
    };
    let lease = meta.lease_grant(Duration::from_secs(30)).await?;
    let c = Compactor::new(w0.reader().clone(), "c", lease, cfg).with_idle(IdleLogs::default());
    for _ in 0..4 {
        let _ = c.compact_log_fully(log).await?;
    }
    let entries = w0.read_entries(log, 0, 1000, u64::MAX).await?;
    let left: usize = entries
        .iter()
        .map(|e| recordbatch::decode(&e.payload).map(|(_, r)| r.len()).unwrap_or(0))
        .sum();
    ensure!(left == 1, "{left} records left of 20: key compaction did not run");

    w0.shutdown().await;
    let (w1, b1) = writer(&meta, &objects, "w1").await?;
    until_leads(&b1).await?;
    ensure!(keyed(&b1, id, 19).await? == Ok(19), "the retry of the last batch");
    ensure!(keyed(&b1, id, 20).await? == Ok(20), "the next batch");
    let gap = keyed(&b1, id, 25).await?.err().context("a gap was appended")?;
    ensure!(gap.code == kafka::code::OUT_OF_ORDER_SEQUENCE_NUMBER, "{gap:?}");
    w1.shutdown().await;
    Ok(())
}
