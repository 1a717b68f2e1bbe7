//! Read committed over a partition's log (ARCHITECTURE §12): what a transaction's batches and
//! marker make of the last stable offset and the aborted transactions a fetch names.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow, ensure};
use brokers::LogBroker;
use catalog::Catalog;
use kafka::Isolation::{ReadCommitted, ReadUncommitted};
use kafka::Partitions;
use kafka::transactions::{Marker, StoredTxn, TxnPartition, TxnPhase};
use logstore::{LogStorage, LogStorageConfig, SystemClock, TxnMark};
use metadata::MetadataStore;
use objstore::object_store::ObjectStore;
use recordbatch::{BatchHeader, Framing, ProducerFields, Record};

const CLUSTER: &str = "x";

/// A batch of `n` records; transactional (producer 5, epoch 0) when `txn`.
fn batch(n: usize, txn: bool) -> Result<bytes::Bytes> {
    let producer = if txn {
        ProducerFields { producer_id: 5, producer_epoch: 0, base_sequence: 0 }
    } else {
        ProducerFields::NONE
    };
    framed(n, producer, txn)
}

fn framed(n: usize, producer: ProducerFields, txn: bool) -> Result<bytes::Bytes> {
    let records: Vec<Record> = (0..n)
        .map(|i| Record { offset_delta: i as u32, timestamp_ms: 1, ..Default::default() })
        .collect();
    let attributes = if txn { recordbatch::TRANSACTIONAL } else { 0 };
    let framing = Framing { attributes, base_timestamp: 1, max_timestamp: 1, producer };
    Ok(recordbatch::encode_framed(&records, framing)?)
}

/// The base offsets of a fetch's batches.
fn offsets(f: &kafka::Fetched) -> Vec<i64> {
    f.records.iter().map(|b| b.base_offset).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_stops_at_an_open_transaction_and_names_aborted_ones() -> Result<()> {
    let meta: Arc<dyn MetadataStore> = Arc::new(metadata::MemoryStore::new());
    let objects: Arc<dyn ObjectStore> = Arc::new(objstore::object_store::memory::InMemory::new());
    let mut cfg = LogStorageConfig::new(CLUSTER, "w");
    cfg.kafka_advertise = "w.test:9092".to_owned();
    cfg.flush_interval = Duration::from_millis(5);
    let w = LogStorage::open(meta.clone(), objects.clone(), cfg, Arc::new(SystemClock)).await?;
    let node = logstore::membership::node_id(meta.as_ref(), CLUSTER, "w").await?;
    let catalog = Catalog::new(meta.clone(), w.reader().clone(), CLUSTER).with_followed_streams();
    catalog.create("t", 1, Default::default()).await?;
    let log = catalog.get("t").await?.partitions[0];
    let broker = LogBroker::writer(catalog, CLUSTER, w.clone()).with_node_id(node);
    let zone = w.config().zone.clone();
    let append = |payload: bytes::Bytes, mark: Option<TxnMark>| {
        let (w, zone) = (w.clone(), zone.clone());
        async move {
            let count = BatchHeader::parse(&payload)?.record_count as u32;
            let opts = logstore::Conditions { txn: mark, ..Default::default() };
            anyhow::Ok(w.submit_in_slot(log, &zone, count, payload, opts).await?.await?.offset)
        }
    };
    let fetch = |isolation| {
        let broker = broker.clone();
        async move {
            let f = broker.fetch("t", 0, None, None, 0, 1 << 20, isolation).await;
            f.map_err(|r| anyhow!("{r:?}"))
        }
    };
    ensure!(append(batch(2, false)?, None).await? == 0);
    ensure!(append(batch(3, true)?, Some(TxnMark::Data { producer_id: 5 })).await? == 2);
    ensure!(append(batch(1, false)?, None).await? == 5);
    // Open from 2: read committed sees only what is below it.
    let c = fetch(ReadCommitted).await?;
    ensure!((c.high_watermark, c.last_stable_offset) == (6, 2), "{c:?}");
    ensure!(offsets(&c) == [0] && c.aborted.is_empty(), "{:?}", offsets(&c));
    let u = fetch(ReadUncommitted).await?;
    ensure!(offsets(&u) == [0, 2, 5], "{:?}", offsets(&u));
    let latest = |isolation| {
        let broker = broker.clone();
        async move {
            broker.list_offset("t", 0, None, -1, isolation).await.map_err(|r| anyhow!("{r:?}"))
        }
    };
    ensure!(latest(ReadCommitted).await? == (2, -1));
    ensure!(latest(ReadUncommitted).await? == (6, -1));
    // Aborted: everything is readable, and the fetch names producer 5's transaction from 2.
    let marker = recordbatch::encode_marker(5, 0, false, 0, 1)?;
    ensure!(append(marker, Some(TxnMark::End { producer_id: 5, abort: true })).await? == 6);
    let c = fetch(ReadCommitted).await?;
    ensure!((c.high_watermark, c.last_stable_offset) == (7, 7), "{c:?}");
    ensure!(offsets(&c) == [0, 2, 5, 6] && c.aborted == [(5, 2)], "{c:?}");
    ensure!(fetch(ReadUncommitted).await?.aborted.is_empty(), "named only when committed");
    // A read from past the abort names none.
    let past = broker.fetch("t", 0, None, None, 7, 1 << 20, ReadCommitted).await;
    ensure!(past.map_err(|r| anyhow!("{r:?}"))?.aborted.is_empty());
    w.shutdown().await;
    Ok(())
}

/// One writer and its broker on fresh in-memory stores, with topic `t` of 2 partitions.
async fn one_writer() -> Result<(Arc<dyn MetadataStore>, LogStorage, LogBroker)> {
    let meta: Arc<dyn MetadataStore> = Arc::new(metadata::MemoryStore::new());
    let objects: Arc<dyn ObjectStore> = Arc::new(objstore::object_store::memory::InMemory::new());
    let mut cfg = LogStorageConfig::new(CLUSTER, "w");
    cfg.kafka_advertise = "w.test:9092".to_owned();
    cfg.flush_interval = Duration::from_millis(5);
    let w = LogStorage::open(meta.clone(), objects, cfg, Arc::new(SystemClock)).await?;
    let node = logstore::membership::node_id(meta.as_ref(), CLUSTER, "w").await?;
    let catalog = Catalog::new(meta.clone(), w.reader().clone(), CLUSTER).with_followed_streams();
    catalog.create("t", 2, Default::default()).await?;
    let broker = LogBroker::writer(catalog, CLUSTER, w.clone()).with_node_id(node);
    Ok((meta, w, broker))
}

/// A transactional batch is taken only while its partition is in its producer's ongoing
/// transaction as the coordinator stored it, at its epoch (KIP-890's verification); it holds
/// the last stable offset until its marker; once the transaction is ending, a batch that comes
/// after the marker is refused; a marker older than the producer's epoch is PRODUCER_FENCED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_batches_are_verified_and_their_markers_end_them() -> Result<()> {
    let (meta, w, broker) = one_writer().await?;
    let (pid, _) = broker.init_producer_id(None).await.map_err(|r| anyhow!("{r:?}"))?;
    let key = logstore::keys::Keys::new(CLUSTER).txn_state("app");
    let store = |phase: TxnPhase, epoch: i32| {
        let (meta, key) = (meta.clone(), key.clone());
        let txn = StoredTxn {
            producer_id: pid,
            producer_epoch: epoch,
            phase: phase as i32,
            partitions: vec![TxnPartition { topic: "t".into(), partition: 0 }],
            ..Default::default()
        };
        async move { anyhow::Ok(meta.put(&key, &txn.encode(), 0).await?) }
    };
    let send = |partition: i32, epoch: i16, seq: i32| {
        let broker = broker.clone();
        async move {
            let producer =
                ProducerFields { producer_id: pid, producer_epoch: epoch, base_sequence: seq };
            let b = framed(2, producer, true)?;
            let h = BatchHeader::parse(&b)?;
            let r = match broker.produce("t", partition, None, b, &h, Some("app")).await {
                Ok(c) => c.await.map(|p| p.base_offset),
                Err(e) => Err(e),
            };
            anyhow::Ok(r.map_err(|e| e.code))
        }
    };
    let lso = || {
        let broker = broker.clone();
        async move {
            let f = broker.fetch("t", 0, None, None, 0, 1 << 20, ReadCommitted).await;
            let f = f.map_err(|r| anyhow!("{r:?}"))?;
            anyhow::Ok((f.last_stable_offset, f.high_watermark))
        }
    };
    // No transaction stored: refused.
    ensure!(send(0, 0, 0).await? == Err(kafka::transactions::INVALID_TXN_STATE));
    store(TxnPhase::Ongoing, 0).await?;
    ensure!(send(0, 0, 0).await? == Ok(0));
    ensure!(send(0, 0, 2).await? == Ok(2), "the next, known verified");
    ensure!(lso().await? == (0, 4), "open from 0");
    // Partition 1 was not added.
    ensure!(send(1, 0, 0).await? == Err(kafka::transactions::INVALID_TXN_STATE));
    // The coordinator is ending it, and its marker commits it: a batch after is refused.
    store(TxnPhase::PrepareCommit, 0).await?;
    let marker = Marker { producer_id: pid, producer_epoch: 0, commit: true, coordinator_epoch: 1 };
    let c = broker.write_marker("t", 0, marker).await.map_err(|r| anyhow!("{r:?}"))?;
    ensure!(c.await.map_err(|r| anyhow!("{r:?}"))?.base_offset == 4);
    ensure!(lso().await? == (5, 5), "committed: readable to the end");
    ensure!(send(0, 0, 4).await? == Err(kafka::transactions::INVALID_TXN_STATE));
    // The next transaction at epoch 1; a marker at epoch 0 is a zombie's.
    store(TxnPhase::Ongoing, 1).await?;
    ensure!(send(0, 1, 0).await? == Ok(5));
    let zombie = Marker { producer_epoch: 0, ..marker };
    let fenced = broker.write_marker("t", 0, zombie).await.err().map(|e| e.code);
    ensure!(fenced == Some(kafka::transactions::PRODUCER_FENCED), "{fenced:?}");
    ensure!(lso().await? == (5, 7), "still open");
    // The coordinator fences the producer at epoch 2 (a new instance came): its abort marker
    // ends the transaction, and the old epoch's batches are refused after it.
    let abort = Marker { producer_epoch: 2, commit: false, ..marker };
    let c = broker.write_marker("t", 0, abort).await.map_err(|r| anyhow!("{r:?}"))?;
    ensure!(c.await.map_err(|r| anyhow!("{r:?}"))?.base_offset == 7);
    let f = broker.fetch("t", 0, None, None, 0, 1 << 20, ReadCommitted).await;
    let f = f.map_err(|r| anyhow!("{r:?}"))?;
    ensure!(f.aborted == [(pid, 5)] && f.last_stable_offset == 8, "{f:?}");
    store(TxnPhase::Ongoing, 1).await?;
    let late = send(0, 1, 2).await?;
    ensure!(late == Err(kafka::code::INVALID_PRODUCER_EPOCH), "{late:?}");
    w.shutdown().await;
    Ok(())
}
