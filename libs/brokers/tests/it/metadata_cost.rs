//! What Kafka clients cost the metadata store, counted (ARCHITECTURE §11: a caught-up client
//! costs it nothing): a long poll of idle partitions makes no request once their heads are
//! followed, and a produce costs its flush's commit and nothing more.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use anyhow::{Result, anyhow, ensure};
use brokers::LogBroker;
use catalog::Catalog;
use kafka::{Partitions, Produced};
use logstore::{LogStorage, LogStorageConfig, SystemClock};
use metadata::MetadataStore;
use metadata::counting::{CountingMeta, MetaCounts};
use objstore::object_store::ObjectStore;
use recordbatch::{BatchHeader, ProducerFields, Record};

const CLUSTER: &str = "t";
const PARTITIONS: i32 = 100;

/// Requests so far: (reads, write transactions, watches).
fn counts(c: &MetaCounts) -> (u64, u64, u64) {
    (c.reads.load(Relaxed), c.write_txns.load(Relaxed), c.watches.load(Relaxed))
}

fn batch(n: usize) -> Result<bytes::Bytes> {
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            offset_delta: i as u32,
            value: Some(bytes::Bytes::from(format!("r{i}"))),
            ..Default::default()
        })
        .collect();
    let none = ProducerFields { producer_id: -1, producer_epoch: -1, base_sequence: -1 };
    Ok(recordbatch::encode(&records, none)?)
}

async fn produce(broker: &LogBroker, partition: i32) -> Result<i64> {
    let b = batch(3)?;
    let header = BatchHeader::parse(&b)?;
    let commit = broker
        .produce("t", partition, None, b, &header, None)
        .await
        .map_err(|r| anyhow!("{r:?}"))?;
    let Produced { base_offset, .. } = commit.await.map_err(|r| anyhow!("{r:?}"))?;
    Ok(base_offset)
}

/// One long poll of every partition at its end, as the Kafka front end runs it: a fetch of
/// each, the wait, a fetch of each again; read committed (librdkafka's default) the second
/// time.
async fn poll(broker: &LogBroker, at: i64, wait: Duration) -> Result<()> {
    use kafka::Isolation::{ReadCommitted, ReadUncommitted};
    for p in 0..PARTITIONS {
        let f = broker.fetch("t", p, None, None, at, 1 << 20, ReadUncommitted).await;
        let f = f.map_err(|r| anyhow!("{r:?}"))?;
        ensure!(f.high_watermark == at && f.records.is_empty(), "partition {p}: {f:?}");
    }
    let targets = (0..PARTITIONS).map(|p| ("t".to_owned(), p, at)).collect();
    broker.wait_for(targets, wait).await;
    for p in 0..PARTITIONS {
        let f = broker.fetch("t", p, None, None, at, 1 << 20, ReadCommitted).await;
        let f = f.map_err(|r| anyhow!("{r:?}"))?;
        ensure!(f.last_stable_offset == at && f.aborted.is_empty(), "partition {p}: {f:?}");
    }
    Ok(())
}

/// A writer over a counting in-memory store serving topic `t` of `partitions`, each holding
/// one batch of 3 records (offsets 0-2), its leadership and followed views settled.
async fn writer(partitions: i32) -> Result<(LogStorage, LogBroker, Arc<MetaCounts>)> {
    let (meta, c) = CountingMeta::new(Arc::new(metadata::MemoryStore::new()));
    let meta: Arc<dyn MetadataStore> = meta;
    let objects: Arc<dyn ObjectStore> = Arc::new(objstore::object_store::memory::InMemory::new());
    let mut cfg = LogStorageConfig::new(CLUSTER, "w0");
    cfg.kafka_advertise = "w0.test:9092".to_owned();
    cfg.flush_interval = Duration::from_millis(5);
    let w = LogStorage::open(meta.clone(), objects.clone(), cfg, Arc::new(SystemClock)).await?;
    let node = logstore::membership::node_id(meta.as_ref(), CLUSTER, "w0").await?;
    let catalog = Catalog::new(meta.clone(), w.reader().clone(), CLUSTER).with_followed_streams();
    catalog.create("t", partitions as u32, Default::default()).await?;
    let broker = LogBroker::writer(catalog, CLUSTER, w.clone()).with_node_id(node);
    // Leadership and the followed views settle (the writer's member watch, the streams).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while produce(&broker, 0).await.is_err() {
        ensure!(std::time::Instant::now() < deadline, "the writer never led partition 0");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for p in 1..partitions {
        ensure!(produce(&broker, p).await? == 0);
    }
    Ok((w, broker, c))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caught_up_consumers_and_producers_cost_no_metadata_reads() -> Result<()> {
    let (w, broker, c) = writer(PARTITIONS).await?;
    // The first poll follows each partition's head: one read and one watch each, once.
    poll(&broker, 3, Duration::from_millis(1)).await.map_err(|e| anyhow!("{e}"))?;
    let first = counts(&c);
    for _ in 0..3 {
        poll(&broker, 3, Duration::from_millis(200)).await?;
    }
    let idle = counts(&c);
    ensure!(
        idle == first,
        "three idle long polls of {PARTITIONS} partitions made {} reads, {} writes, {} watches",
        idle.0 - first.0,
        idle.1 - first.1,
        idle.2 - first.2
    );
    // A produce: its commit (one write transaction per flush), no read.
    let before = counts(&c);
    ensure!(produce(&broker, 7).await? == 3);
    let after = counts(&c);
    ensure!(after.0 == before.0 && after.2 == before.2, "a produce read: {before:?} → {after:?}");
    ensure!(
        after.1 - before.1 == 1,
        "a produce's flush: {} write transactions",
        after.1 - before.1
    );
    // The consumer of partition 7 sees it at once (the writer's own commit feeds its head),
    // still reading nothing from the store: the records come from the tail cache.
    let committed = kafka::Isolation::ReadCommitted;
    let f = broker.fetch("t", 7, None, None, 3, 1 << 20, committed).await;
    let f = f.map_err(|r| anyhow!("{r:?}"))?;
    ensure!(f.high_watermark == 6 && f.records.len() == 1, "{f:?}");
    ensure!(counts(&c).0 == after.0, "reading the tail read the store");
    w.shutdown().await;
    Ok(())
}

/// A share group's members on caught-up partitions cost the store nothing; an acquisition and
/// an acknowledgement cost one write transaction each (the share-partition's cursor), no read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caught_up_share_consumers_cost_nothing_and_each_acquisition_one_write() -> Result<()> {
    use kafka::share::{Reset, Settings, Shares};
    let (w, broker, c) = writer(10).await?;
    let shares = Shares::default();
    let settings = Settings { reset: Reset::Earliest, ..Settings::default() };
    let member: Arc<str> = Arc::from("m");
    let b: &dyn kafka::Broker = &broker;
    // Every record of the ten partitions acquired and accepted: the share-partitions made.
    let drain = |p: i32| {
        let (member, settings, shares) = (member.clone(), settings.clone(), &shares);
        async move {
            let lent = shares.acquire(b, "g", &member, "t", p, 500, 1 << 20, &settings).await;
            let lent = lent.map_err(|r| anyhow!("{r:?}"))?;
            let acks: Vec<(i64, i64, Vec<i8>)> =
                lent.acquired.iter().map(|(f, l, _)| (*f, *l, vec![1])).collect();
            if !acks.is_empty() {
                let done = shares.acknowledge(b, "g", &member, "t", p, &acks, &settings).await;
                done.map_err(|r| anyhow!("{r:?}"))?;
            }
            Ok::<usize, anyhow::Error>(lent.acquired.len())
        }
    };
    for p in 0..10 {
        ensure!(drain(p).await? == 1, "partition {p}: nothing lent");
    }
    let first = counts(&c);
    for _ in 0..3 {
        for p in 0..10 {
            ensure!(drain(p).await? == 0, "partition {p}: lent again");
        }
    }
    let idle = counts(&c);
    ensure!(idle == first, "three rounds of caught-up share fetches: {first:?} → {idle:?}");
    // A new batch: its acquisition and its acknowledgement, one write transaction each.
    ensure!(produce(&broker, 3).await? == 3);
    let before = counts(&c);
    let lent = shares.acquire(b, "g", &member, "t", 3, 500, 1 << 20, &settings).await;
    let lent = lent.map_err(|r| anyhow!("{r:?}"))?;
    ensure!(lent.acquired == vec![(3, 5, 1)], "{:?}", lent.acquired);
    let acquired = counts(&c);
    let done = shares.acknowledge(b, "g", &member, "t", 3, &[(3, 5, vec![1])], &settings).await;
    done.map_err(|r| anyhow!("{r:?}"))?;
    let acked = counts(&c);
    ensure!(
        (acquired.0, acquired.1 - before.1) == (before.0, 1)
            && (acked.0, acked.1 - acquired.1) == (acquired.0, 1),
        "acquire {before:?} → {acquired:?}, acknowledge → {acked:?}"
    );
    w.shutdown().await;
    Ok(())
}
