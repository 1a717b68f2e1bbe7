//! Read committed over a partition's log (ARCHITECTURE §12): what a transaction's batches and
//! marker make of the last stable offset and the aborted transactions a fetch names.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use brokers::LogBroker;
use catalog::Catalog;
use kafka::Isolation::{ReadCommitted, ReadUncommitted};
use kafka::Partitions;
use kafka::transactions::{Marker, StoredTxn, TxnPartition, TxnPhase};
use logstore::{LogStorage, TxnMark};
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
    let (w, broker) = crate::writer(&meta, &objects, CLUSTER, "w").await?;
    let catalog = Catalog::new(meta.clone(), w.reader().clone(), CLUSTER);
    catalog.create("t", 1, Default::default()).await?;
    let log = catalog.get("t").await?.partitions[0];
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

/// A transactional batch of 2 records of producer (`pid`, `epoch`) at sequence `seq`, of
/// transactional id `app`, to partition `partition` of `t` (adding it to the transaction when
/// `add_partition`: transactions V2): its base offset once committed, or the refusal's code.
async fn send_txn(
    broker: LogBroker,
    (pid, epoch, seq): (i64, i16, i32),
    partition: i32,
    add_partition: bool,
) -> Result<Result<i64, i16>> {
    let producer = ProducerFields { producer_id: pid, producer_epoch: epoch, base_sequence: seq };
    let b = framed(2, producer, true)?;
    let h = BatchHeader::parse(&b)?;
    let txn = kafka::TxnProduce { transactional_id: "app", add_partition };
    let r = match broker.produce("t", partition, None, b, &h, Some(txn)).await {
        Ok(c) => c.await.map(|p| p.base_offset),
        Err(e) => Err(e),
    };
    Ok(r.map_err(|e| e.code))
}

/// One writer and its broker on fresh in-memory stores, with topic `t` of 2 partitions.
async fn one_writer() -> Result<(Arc<dyn MetadataStore>, LogStorage, LogBroker)> {
    let meta: Arc<dyn MetadataStore> = Arc::new(metadata::MemoryStore::new());
    let objects: Arc<dyn ObjectStore> = Arc::new(objstore::object_store::memory::InMemory::new());
    let (w, broker) = crate::writer(&meta, &objects, CLUSTER, "w").await?;
    Catalog::new(meta.clone(), w.reader().clone(), CLUSTER)
        .create("t", 2, Default::default())
        .await?;
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
        send_txn(broker.clone(), (pid, epoch, seq), partition, false)
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

/// Offsets a transaction commits for a group (TxnOffsetCommit) are staged under the group's
/// tenure and only while the transaction's state stands; they are not the group's offsets until
/// the transaction's end applies them (a commit) or drops them (an abort), which is done only
/// while the state is the prepared one it was read at; meanwhile the partitions are unstable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactions_staged_offsets_are_applied_by_its_commit_and_dropped_by_its_abort()
-> Result<()> {
    use kafka::{GroupOffsets, OffsetCommit, Staged, TxnStates};
    let (_meta, w, broker) = one_writer().await?;
    let (pid, _) = broker.init_producer_id(None).await.map_err(|r| anyhow!("{r:?}"))?;
    let tenure = broker.take_group("g", 1, None).await.map_err(|r| anyhow!("{r:?}"))?.tenure;
    let state = |phase: TxnPhase| StoredTxn {
        producer_id: pid,
        producer_epoch: 0,
        phase: phase as i32,
        groups: vec!["g".into()],
        ..Default::default()
    };
    // Moves the transaction's state, its revision after.
    let put = |phase: TxnPhase| {
        let broker = broker.clone();
        async move {
            let rev =
                broker.txn_state("app").await.map_err(|r| anyhow!("{r:?}"))?.map_or(0, |s| s.1);
            let stored = broker.put_txn_state("app", &state(phase), rev).await;
            ensure!(stored.map_err(|r| anyhow!("{r:?}"))?, "stored");
            let now = broker.txn_state("app").await.map_err(|r| anyhow!("{r:?}"))?;
            now.map(|s| s.1).ok_or_else(|| anyhow!("no state"))
        }
    };
    let offset = |partition: i32, offset: i64| OffsetCommit {
        topic: "t".into(),
        partition,
        offset,
        leader_epoch: 3,
        metadata: Some("m".into()),
    };
    let stage = |tenure: kafka::Tenure, rev: i64, offsets: Vec<OffsetCommit>| {
        let broker = broker.clone();
        async move {
            match broker.stage_offsets("g", tenure, ("app", rev), (pid, 0), offsets).await {
                Staged::Done(o) => Some(o.into_iter().map(|r| r.map_err(|e| e.code)).collect()),
                Staged::TxnMoved => None::<Vec<Result<(), i16>>>,
            }
        }
    };
    let committed = || {
        let broker = broker.clone();
        async move {
            let asked = Some(vec![("t".to_owned(), vec![0, 1])]);
            let c = broker.committed_offsets("g", asked).await.map_err(|r| anyhow!("{r:?}"))?;
            anyhow::Ok(c.iter().map(|c| c.offset).collect::<Vec<_>>())
        }
    };
    let unstable = || {
        let broker = broker.clone();
        async move {
            let mut u = broker.unstable_offsets("g").await.map_err(|r| anyhow!("{r:?}"))?;
            u.sort();
            anyhow::Ok(u)
        }
    };
    let marker =
        |commit: bool| Marker { producer_id: pid, producer_epoch: 0, commit, coordinator_epoch: 0 };

    let rev = put(TxnPhase::Ongoing).await?;
    let staged = stage(tenure, rev, vec![offset(0, 5), offset(1, 7), offset(9, 1)]).await;
    ensure!(
        staged == Some(vec![Ok(()), Ok(()), Err(kafka::code::UNKNOWN_TOPIC_OR_PARTITION)]),
        "{staged:?}"
    );
    ensure!(stage(tenure, rev - 1, vec![offset(0, 6)]).await.is_none(), "the state moved since");
    let stale = stage(kafka::Tenure(tenure.0 - 1), rev, vec![offset(0, 6)]).await;
    ensure!(stale == Some(vec![Err(kafka::groups::errors::NOT_COORDINATOR)]), "{stale:?}");
    ensure!(unstable().await? == [("t".to_owned(), 0), ("t".to_owned(), 1)]);
    ensure!(committed().await? == [-1, -1], "staged only");

    let prepared = put(TxnPhase::PrepareCommit).await?;
    let moved = broker.end_offsets("app", rev, "g", marker(true)).await;
    ensure!(moved.is_err_and(|r| r.code == kafka::transactions::CONCURRENT_TRANSACTIONS));
    ensure!(committed().await? == [-1, -1], "not ended at a state gone");
    broker.end_offsets("app", prepared, "g", marker(true)).await.map_err(|r| anyhow!("{r:?}"))?;
    ensure!(committed().await? == [5, 7] && unstable().await?.is_empty());
    let c = broker.committed_offsets("g", None).await.map_err(|r| anyhow!("{r:?}"))?;
    ensure!(c.iter().all(|c| c.leader_epoch == 3 && c.metadata.as_deref() == Some("m")), "{c:?}");

    // The next transaction stages 9 on partition 0, and aborts.
    let rev = put(TxnPhase::Ongoing).await?;
    ensure!(stage(tenure, rev, vec![offset(0, 9)]).await == Some(vec![Ok(())]));
    let prepared = put(TxnPhase::PrepareAbort).await?;
    broker.end_offsets("app", prepared, "g", marker(false)).await.map_err(|r| anyhow!("{r:?}"))?;
    ensure!(committed().await? == [5, 7] && unstable().await?.is_empty());
    w.shutdown().await;
    Ok(())
}

/// Transactions V2 (KIP-890 part 2) through the coordinator's steps and the owner: a batch of
/// a Produce v12 adds its partition (no AddPartitionsToTxn), beginning the transaction; each
/// EndTxn v5 moves the producer to the next epoch, which its markers carry, so a late batch of
/// the epoch before is refused; the next transaction begins at the new epoch by its first
/// batch; a V1 batch is still refused a partition not added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_batches_add_their_partitions_and_each_end_moves_the_producer_on() -> Result<()> {
    use kafka::coordination::transactions as coordinator;
    let (_meta, w, broker) = one_writer().await?;
    let broker = Arc::new(broker);
    let b: Arc<dyn kafka::Broker> = broker.clone();
    // The owner writes the markers the coordinator asks for, as its Kafka listener does.
    let markers = tokio::spawn(broker.clone().serve_markers(std::future::pending::<()>()));
    let (pid, epoch) = coordinator::init_producer_id(&b, "app", 60_000, None)
        .await
        .map_err(|c| anyhow!("init: {c}"))?;
    ensure!(epoch == 0);
    let send = |partition: i32, epoch: i16, seq: i32, add_partition: bool| {
        send_txn(broker.as_ref().clone(), (pid, epoch, seq), partition, add_partition)
    };
    let state = || {
        let b = b.clone();
        async move {
            let got = b.txn_state("app").await.map_err(|r| anyhow!("{r:?}"))?;
            let t = got.context("no state")?.0;
            anyhow::Ok((t.phase(), t.producer_epoch, t.partitions.len()))
        }
    };
    // The end of each partition's read_committed range, once its markers are written.
    let settled = |partition: i32, end: i64| {
        let broker = broker.clone();
        async move {
            for _ in 0..200 {
                let f = broker.fetch("t", partition, None, None, 0, 1 << 20, ReadCommitted).await;
                let f = f.map_err(|r| anyhow!("{r:?}"))?;
                if f.last_stable_offset == end && f.high_watermark == end {
                    return anyhow::Ok(f);
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            Err(anyhow!("partition {partition} never settled at {end}"))
        }
    };
    ensure!(send(0, 0, 0, true).await? == Ok(0));
    ensure!(send(1, 0, 0, true).await? == Ok(0));
    ensure!(state().await? == (TxnPhase::Ongoing, 0, 2), "{:?}", state().await?);
    let next = coordinator::end_v2(&b, "app", (pid, 0), true).await;
    ensure!(next == Ok((pid, 1)), "{next:?}");
    settled(0, 3).await?;
    settled(1, 3).await?;
    // A late batch at the epoch before: fenced by the marker's epoch.
    let late = send(0, 0, 2, true).await?;
    ensure!(late == Err(kafka::code::INVALID_PRODUCER_EPOCH), "{late:?}");
    // A retry of the end, at the epoch before, is answered as it was.
    ensure!(coordinator::end_v2(&b, "app", (pid, 0), true).await == Ok((pid, 1)));
    // The next transaction begins with its first batch, at the new epoch, sequences from 0.
    ensure!(send(1, 1, 0, true).await? == Ok(3));
    ensure!(state().await? == (TxnPhase::Ongoing, 1, 1));
    let v1 = send(0, 1, 0, false).await?;
    ensure!(v1 == Err(kafka::transactions::INVALID_TXN_STATE), "not added: {v1:?}");
    ensure!(coordinator::end_v2(&b, "app", (pid, 1), false).await == Ok((pid, 2)));
    let f = settled(1, 6).await?;
    ensure!(f.aborted == [(pid, 3)], "{f:?}");
    markers.abort();
    w.shutdown().await;
    Ok(())
}

/// Kafka's `transactional.id.expiration.ms` (7 days): the coordinator's periodic look forgets
/// an id with no transaction under way for that long (its next InitProducerId starts afresh,
/// at a new producer id); an id idle for less, or with a transaction under way, stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_ids_idle_past_their_expiration_are_forgotten() -> Result<()> {
    use kafka::coordination::transactions as coordinator;
    let (meta, w, broker) = one_writer().await?;
    let b: Arc<dyn kafka::Broker> = Arc::new(broker);
    let now = b.now_ms();
    let day = 24 * 3_600_000;
    let keys = logstore::keys::Keys::new(CLUSTER);
    for (id, phase, updated) in [
        ("old-done", TxnPhase::CompleteCommit, now - 8 * day),
        ("old-empty", TxnPhase::Empty, now - 8 * day),
        ("recent", TxnPhase::CompleteAbort, now - 6 * day),
        ("old-ongoing", TxnPhase::Ongoing, now - 8 * day),
    ] {
        let t = StoredTxn {
            producer_id: 9,
            phase: phase as i32,
            timeout_ms: 60_000,
            started_ms: updated,
            updated_ms: updated,
            ..Default::default()
        };
        meta.put(&keys.txn_state(id), &t.encode(), 0).await?;
    }
    coordinator::expire(&b).await;
    let phase = |id: &'static str| {
        let b = b.clone();
        async move {
            let got = b.txn_state(id).await.map_err(|r| anyhow!("{r:?}"))?;
            anyhow::Ok(got.map(|(t, _)| t.phase()))
        }
    };
    ensure!(phase("old-done").await?.is_none() && phase("old-empty").await?.is_none());
    ensure!(phase("recent").await? == Some(TxnPhase::CompleteAbort));
    let ongoing = phase("old-ongoing").await?;
    ensure!(ongoing.is_some_and(|p| p != TxnPhase::Ongoing), "aborted, not forgotten: {ongoing:?}");
    // A forgotten id starts afresh.
    let (pid, epoch) = coordinator::init_producer_id(&b, "old-done", 60_000, None)
        .await
        .map_err(|c| anyhow!("init: {c}"))?;
    ensure!(pid != 9 && epoch == 0, "({pid}, {epoch})");
    w.shutdown().await;
    Ok(())
}
