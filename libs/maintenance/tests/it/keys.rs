//! Key compaction against both environments (ARCHITECTURE §12, invariant 9): a compacted log
//! keeps each key's latest record at its offset, drops the superseded ones and, once
//! `delete.retention.ms` has passed since they were cleaned, its tombstones.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use bytes::Bytes;
use logstore::{LogId, LogStorage};
use maintenance::compactor::{Cleanup, Compactor, CompactorConfig, IdleLogs};

use crate::env::{Env, ManualClock};

both_envs!(
    a_compacted_log_keeps_each_keys_latest_record_at_its_offset_then_drops_its_tombstones,
    a_compacted_logs_transactions_are_cleaned_as_kafkas_cleaner_cleans_them,
);

/// Keys, and updates of them.
const KEYS: u64 = 1_000;
const UPDATES: u64 = 100_000;
/// Records a batch (an entry).
const BATCH: u64 = 500;
/// Keys deleted at the end (a tombstone each).
const DELETED: u64 = 100;
const RETENTION_MS: i64 = 60_000;

/// Every record of the log: offset → (key, value; `None` for a tombstone).
type Records = BTreeMap<u64, (String, Option<String>)>;

async fn records(w: &LogStorage, log: LogId) -> Result<Records> {
    let info = w.info(log).await?;
    let (mut out, mut at) = (BTreeMap::new(), info.first_offset);
    while at < info.next_offset {
        let got = w.read_entries(log, at, 1000, u64::MAX).await?;
        let last = got.last().context("empty read below the high watermark")?;
        at = last.header.end_offset();
        for e in got {
            let (_, rs) = recordbatch::decode(&e.payload)?;
            for r in rs {
                let s = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
                let key = r.key.as_ref().map(s).context("a record without a key")?;
                out.insert(
                    e.header.offset + u64::from(r.offset_delta),
                    (key, r.value.as_ref().map(s)),
                );
            }
        }
    }
    Ok(out)
}

/// Appends `records` as one batch.
async fn append(w: &LogStorage, log: LogId, records: &[(String, Option<String>)]) -> Result<()> {
    let rs: Vec<recordbatch::Record> = records
        .iter()
        .enumerate()
        .map(|(i, (k, v))| recordbatch::Record {
            offset_delta: i as u32,
            timestamp_ms: 1_700_000_000_000,
            key: Some(Bytes::from(k.clone())),
            value: v.clone().map(Bytes::from),
            headers: Vec::new(),
        })
        .collect();
    let batch = recordbatch::encode(&rs, recordbatch::ProducerFields::NONE)?;
    w.append(log, rs.len() as u32, batch, None).await?;
    Ok(())
}

/// Compacts `log` until a whole claim changes nothing (its chunks to segments, then its keys).
async fn compact(env: &Env, log: LogId, clock: &Arc<ManualClock>) -> Result<()> {
    let cleanup =
        Cleanup { delete_retention_ms: RETENTION_MS, min_dirty_ratio: 0.0, ..Default::default() };
    let cfg = CompactorConfig {
        min_chunks: 1,
        compacted: Arc::new(HashMap::from([(log, cleanup)])),
        clock: clock.clone(),
        ..Default::default()
    };
    let lease = env.meta.lease_grant(Duration::from_secs(30)).await?;
    let reader = logstore::LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster);
    let c = Compactor::new(reader, "keys", lease, cfg).with_idle(IdleLogs::default());
    // The first look finds the log active; the next ones idle (its head is spilled).
    for _ in 0..4 {
        let _ = c.compact_log_fully(log).await?;
    }
    Ok(())
}

async fn a_compacted_log_keeps_each_keys_latest_record_at_its_offset_then_drops_its_tombstones(
    env: Env,
) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    let mut batch = Vec::new();
    for i in 0..UPDATES {
        batch.push((format!("k{}", i % KEYS), Some(format!("v{i}"))));
        if batch.len() as u64 == BATCH {
            append(&w, log, &std::mem::take(&mut batch)).await?;
        }
    }
    let tombstones: Vec<(String, Option<String>)> =
        (0..DELETED).map(|k| (format!("k{k}"), None)).collect();
    append(&w, log, &tombstones).await?;
    // A flush after theirs moves the writer's low-water mark past their chunks: none is left
    // in the uncompacted tail (which key compaction never touches).
    let other = w.create_log().await?;
    w.append(other, 1, Bytes::from_static(b"x"), None).await?;
    let before = records(&w, log).await?;
    ensure!(before.len() as u64 == UPDATES + DELETED);
    let latest: HashMap<&String, u64> = before.iter().map(|(o, (k, _))| (k, *o)).collect();
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64;
    let clock = Arc::new(ManualClock(AtomicI64::new(now)));
    compact(&env, log, &clock).await?;

    let after = records(&w, log).await?;
    ensure!(after.len() as u64 <= KEYS, "{} records left of {}", after.len(), before.len());
    // Every survivor is the record written at its offset; every key's latest is there.
    for (o, r) in &after {
        ensure!(before.get(o) == Some(r), "offset {o} reads {r:?}, was {:?}", before.get(o));
    }
    for (k, o) in &latest {
        ensure!(after.contains_key(o), "{k}'s latest record, at {o}, is gone");
    }
    let info = w.info(log).await?;
    ensure!(info.next_offset == UPDATES + DELETED, "the log's end moved: {}", info.next_offset);

    // Past delete.retention.ms, the tombstones go too (no new record: the pass is due for them).
    clock.0.fetch_add(RETENTION_MS, Ordering::SeqCst);
    compact(&env, log, &clock).await?;
    let last = records(&w, log).await?;
    ensure!(last.len() as u64 == KEYS - DELETED, "{} records left", last.len());
    ensure!(last.values().all(|(_, v)| v.is_some()), "a tombstone is left");
    ensure!(last.iter().all(|(o, r)| before.get(o) == Some(r)));
    w.shutdown().await;
    Ok(())
}

/// A log's records by offset: (key, value).
type Kept = BTreeMap<u64, (String, String)>;

/// A compacted log's Kafka transactions, cleaned as Kafka's cleaner cleans them: an aborted
/// transaction's records go, a committed one's are compacted as any (a Kafka Streams
/// `exactly_once_v2` changelog is all transactional), a COMMIT marker goes once
/// `delete.retention.ms` has passed, an ABORT marker stays; a segment holding an open
/// transaction waits until it ends; offsets never move.
async fn a_compacted_logs_transactions_are_cleaned_as_kafkas_cleaner_cleans_them(
    env: Env,
) -> Result<()> {
    use logstore::TxnMark::{Data, End};
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    let other = w.create_log().await?;
    let txn = async |pid: i64, value: &str, keys: std::ops::Range<u32>| -> Result<u64> {
        let rs: Vec<recordbatch::Record> = keys
            .enumerate()
            .map(|(i, k)| recordbatch::Record {
                offset_delta: i as u32,
                timestamp_ms: 1_700_000_000_000,
                key: Some(Bytes::from(format!("k{k}"))),
                value: Some(Bytes::from(value.to_owned())),
                headers: Vec::new(),
            })
            .collect();
        let producer =
            recordbatch::ProducerFields { producer_id: pid, producer_epoch: 0, base_sequence: 0 };
        let framing = recordbatch::Framing {
            attributes: 0x10,
            base_timestamp: 1_700_000_000_000,
            max_timestamp: 1_700_000_000_000,
            producer,
        };
        let batch = recordbatch::encode_framed(&rs, framing)?;
        let opts =
            logstore::Conditions { txn: Some(Data { producer_id: pid }), ..Default::default() };
        Ok(w.submit_in_slot(log, "*", rs.len() as u32, batch, opts).await?.await?.offset)
    };
    let end = async |pid: i64, commit: bool| -> Result<u64> {
        let marker = recordbatch::encode_marker(pid, 0, commit, 0, 1_700_000_000_000)?;
        let opts = logstore::Conditions {
            txn: Some(End { producer_id: pid, abort: !commit }),
            ..Default::default()
        };
        Ok(w.submit_in_slot(log, "*", 1, marker, opts).await?.await?.offset)
    };
    // Its records (offset → key, value), and the offsets of its COMMIT and ABORT markers.
    let read = async || -> Result<(Kept, Vec<u64>, Vec<u64>)> {
        let info = w.info(log).await?;
        let (mut records, mut commits, mut aborts) = (BTreeMap::new(), Vec::new(), Vec::new());
        let mut at = info.first_offset;
        while at < info.next_offset {
            let got = w.read_entries(log, at, 1000, u64::MAX).await?;
            at = got.last().context("an empty read")?.header.end_offset();
            for e in got {
                match recordbatch::marker_commits(&e.payload) {
                    Some(true) => commits.push(e.header.offset),
                    Some(false) => aborts.push(e.header.offset),
                    None => {
                        for r in recordbatch::decode(&e.payload)?.1 {
                            let s = |b: &Option<Bytes>| {
                                String::from_utf8_lossy(b.as_deref().unwrap_or_default())
                                    .into_owned()
                            };
                            let o = e.header.offset + u64::from(r.offset_delta);
                            records.insert(o, (s(&r.key), s(&r.value)));
                        }
                    }
                }
            }
        }
        Ok((records, commits, aborts))
    };
    let flush_other = async || w.append(other, 1, Bytes::from_static(b"x"), None).await;
    ensure!(txn(6, "c1", 0..10).await? == 0);
    ensure!(txn(5, "aborted", 0..10).await? == 10);
    ensure!(end(5, false).await? == 20);
    ensure!(end(6, true).await? == 21);
    ensure!(txn(6, "c2", 0..5).await? == 22);
    ensure!(end(6, true).await? == 27);
    flush_other().await?;
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64;
    let clock = Arc::new(ManualClock(AtomicI64::new(now)));
    compact(&env, log, &clock).await?;
    let (records, commits, aborts) = read().await?;
    let want = |o: u64, k: u32, v: &str| (o, (format!("k{k}"), v.to_owned()));
    let expected: Kept = (5..10)
        .map(|k| want(u64::from(k), k, "c1"))
        .chain((0..5).map(|k| want(22 + u64::from(k), k, "c2")))
        .collect();
    ensure!(records == expected, "{records:?}");
    ensure!(commits == [21, 27] && aborts == [20], "markers {commits:?} {aborts:?}");
    // A transaction left open: its segment is not cleaned, its records stay for now.
    ensure!(txn(7, "open", 0..2).await? == 28);
    ensure!(txn(8, "later", 3..4).await? == 30);
    ensure!(end(8, true).await? == 31);
    flush_other().await?;
    compact(&env, log, &clock).await?;
    let (records, _, _) = read().await?;
    ensure!(records.len() == expected.len() + 3, "{records:?}");
    // Past delete.retention.ms the COMMIT markers below the open transaction go; the ABORT
    // marker stays.
    clock.0.fetch_add(RETENTION_MS, Ordering::SeqCst);
    compact(&env, log, &clock).await?;
    let (_, commits, aborts) = read().await?;
    ensure!(commits == [31] && aborts == [20], "markers {commits:?} {aborts:?}");
    // Its abort ends it: its records go, and k3's latest is 8's.
    ensure!(end(7, false).await? == 32);
    flush_other().await?;
    compact(&env, log, &clock).await?;
    let (records, _, aborts) = read().await?;
    let mut last = expected.clone();
    last.remove(&25);
    last.insert(30, ("k3".to_owned(), "later".to_owned()));
    ensure!(records == last, "{records:?}");
    ensure!(aborts == [20, 32], "{aborts:?}");
    ensure!(w.info(log).await?.next_offset == 33, "the log's end moved");
    w.shutdown().await;
    Ok(())
}
