//! Scenario "compacted": compacted logs (`cleanup.policy=compact`, ARCHITECTURE §12). Two
//! writers take keyed batches (1–3 records, 6 keys) from clients appending to two logs through
//! either writer, under metadata and object faults; two compactors run key compaction over the
//! logs all along (plain compaction first, then keys), one of them crashing at random steps;
//! readers read the logs whole all along. Each record's value is its own id, so the checker
//! needs nothing from the store. The rules ([`check`]):
//!
//! - latest lost: the acknowledged record of a key with the highest offset, or a later record
//!   of that key, is in the final log;
//! - moved: a record seen anywhere is at the offset its append was acknowledged at (plus its
//!   place in the batch);
//! - resurrected: a record a read did not return, though the read began after the record was
//!   acknowledged and went past its offset, is returned by no read that began later;
//! - phantom or duplicate: every record seen was appended, and no read returns one twice.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use logstore::{Clock, LogId, LogStorage};
use metadata::MetadataStore;
use objstore::faults::{Action, FaultError, FaultyStore, Op, Trigger};
use objstore::object_store::ObjectStore;
use parking_lot::Mutex;

use crate::history::{Seen, Violation};
use crate::meta_faults::FaultyMeta;
use crate::rng::Rng;
use crate::scenario::{Plan, Report, SimClock, Trace};

const KEYS: u64 = 6;
/// Logs, ids 1 and 2.
const LOGS: u64 = 2;

/// One record appended: its log, key, and offset once acknowledged.
#[derive(Clone, Debug)]
struct Sent {
    log: u64,
    key: u64,
    acked: Option<u64>,
    /// When the ack came (virtual ms).
    acked_at: u64,
}

/// A whole-log read: when it began, how far it went, the records (id → offset) it returned.
#[derive(Clone, Debug)]
struct Whole {
    log: u64,
    began: u64,
    end: u64,
    seen: Vec<(u64, u64)>,
}

#[derive(Default)]
struct Log {
    sent: BTreeMap<u64, Sent>,
    reads: Vec<Whole>,
    finals: BTreeMap<u64, Vec<(u64, u64)>>,
}

type Shared = Arc<Mutex<(Log, Trace, Rng)>>;

/// What the rules find in a run's records (the module's rules).
fn check(h: &Log) -> Vec<Violation> {
    let mut out = Vec::new();
    let key_of = |id: u64| h.sent.get(&id).map(|s| (s.log, s.key));
    // Latest lost: per (log, key) the acknowledged record of the highest offset.
    let mut latest: BTreeMap<(u64, u64), (u64, u64)> = BTreeMap::new();
    for (id, s) in &h.sent {
        if let Some(o) = s.acked {
            let e = latest.entry((s.log, s.key)).or_insert((o, *id));
            if o > e.0 {
                *e = (o, *id);
            }
        }
    }
    for ((log, key), (offset, id)) in &latest {
        let fin = h.finals.get(log).map(Vec::as_slice).unwrap_or_default();
        let kept = fin.iter().any(|(i, o)| key_of(*i) == Some((*log, *key)) && o >= offset);
        if !kept {
            out.push(Violation::LostWrite { log: *log, id: *id, offset: *offset });
        }
    }
    // The final reads began after everything.
    let finals: Vec<Whole> = h
        .finals
        .iter()
        .map(|(log, seen)| Whole { log: *log, began: u64::MAX, end: u64::MAX, seen: seen.clone() })
        .collect();
    let reads: Vec<&Whole> = h.reads.iter().chain(finals.iter()).collect();
    for r in &reads {
        let mut once = BTreeSet::new();
        for (id, offset) in &r.seen {
            match h.sent.get(id) {
                None => out.push(Violation::Phantom { log: r.log, id: *id, offset: *offset }),
                Some(s) if s.acked.is_some_and(|a| a != *offset) => {
                    let acked = s.acked.unwrap_or_default();
                    out.push(Violation::InconsistentOffset {
                        log: r.log,
                        id: *id,
                        acked,
                        found: *offset,
                    });
                }
                Some(_) => {}
            }
            if !once.insert(*id) {
                out.push(Violation::Duplicate { log: r.log, id: *id, offsets: vec![*offset] });
            }
        }
    }
    // Resurrected: absent from a read that should have seen it, present in a later one.
    for (id, s) in &h.sent {
        let Some(offset) = s.acked else { continue };
        let mut gone = false;
        let mut ordered: Vec<&&Whole> = reads.iter().filter(|r| r.log == s.log).collect();
        ordered.sort_by_key(|r| r.began);
        for r in ordered {
            let has = r.seen.iter().any(|(i, _)| i == id);
            if gone && has {
                out.push(Violation::DirtyRead { log: s.log, id: *id, offset });
                break;
            }
            if !has && r.began > s.acked_at && r.end > offset {
                gone = true;
            }
        }
    }
    out
}

/// A batch of `records` keyed records, values their ids (`first`, `first + 1`, …).
fn batch(rng: &mut Rng, first: u64, records: u64) -> (Bytes, Vec<u64>) {
    let keys: Vec<u64> = (0..records).map(|_| rng.below(KEYS)).collect();
    let rs: Vec<recordbatch::Record> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| recordbatch::Record {
            offset_delta: i as u32,
            timestamp_ms: 0,
            key: Some(Bytes::from(format!("k{k}"))),
            value: Some(Bytes::copy_from_slice(&(first + i as u64).to_le_bytes())),
            headers: Vec::new(),
        })
        .collect();
    let b = recordbatch::encode(&rs, recordbatch::ProducerFields::NONE).unwrap_or_default();
    (b, keys)
}

/// Every record of `log` from its start: (id, offset), and its end.
async fn read_whole(w: &LogStorage, log: u64) -> Option<(Vec<(u64, u64)>, u64)> {
    let info = w.info(LogId(log)).await.ok()?;
    let (mut at, mut seen) = (info.first_offset, Vec::new());
    while at < info.next_offset {
        let got = w.read_entries(LogId(log), at, 1000, u64::MAX).await.ok()?;
        let last = got.last()?;
        at = last.header.end_offset();
        for e in got {
            let (_, rs) = recordbatch::decode(&e.payload).ok()?;
            for r in rs {
                let v = r.value.as_deref().unwrap_or_default();
                let id = u64::from_le_bytes(v.get(..8)?.try_into().ok()?);
                seen.push((id, e.header.offset + u64::from(r.offset_delta)));
            }
        }
    }
    Some((seen, info.next_offset))
}

async fn client(c: u64, plan: Plan, writers: Arc<Vec<LogStorage>>, shared: Shared) {
    for n in 0..plan.appends as u64 {
        let (log, w, records, first) = {
            let mut s = shared.lock();
            let rng = &mut s.2;
            let log = 1 + rng.below(LOGS);
            let w = rng.below(writers.len() as u64) as usize;
            (log, w, 1 + rng.below(3), ((c * 10_000 + n) << 8) + 1)
        };
        let (payload, keys) = {
            let mut s = shared.lock();
            batch(&mut s.2, first, records)
        };
        {
            let mut s = shared.lock();
            for (i, key) in keys.iter().enumerate() {
                s.0.sent
                    .insert(first + i as u64, Sent { log, key: *key, acked: None, acked_at: 0 });
            }
        }
        let r = writers[w].append(LogId(log), records as u32, payload, None).await;
        if let Ok(h) = r {
            let mut s = shared.lock();
            let now = s.1.now_ms();
            for i in 0..records {
                let id = first + i;
                if let Some(sent) = s.0.sent.get_mut(&id) {
                    sent.acked = Some(h.offset + i);
                    sent.acked_at = now;
                }
                s.1.record(("append", id, log, h.offset + i));
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn reader(writers: Arc<Vec<LogStorage>>, shared: Shared) {
    loop {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let (log, began) = {
            let mut s = shared.lock();
            (1 + s.2.below(LOGS), s.1.now_ms())
        };
        if let Some((seen, end)) = read_whole(&writers[0], log).await {
            let mut s = shared.lock();
            let shown: Vec<Seen> =
                seen.iter().map(|(id, o)| Seen { offset: *o, records: 1, id: *id }).collect();
            s.1.record(("read", log, shown));
            s.0.reads.push(Whole { log, began, end, seen });
        }
    }
}

/// Key compaction all along; `crashing` crashes at a random step now and then.
async fn compactor(
    id: &'static str,
    crashing: bool,
    stores: (Arc<dyn MetadataStore>, Arc<dyn ObjectStore>, Arc<dyn Clock>),
    shared: Shared,
) {
    use maintenance::compactor::{Cleanup, Compactor, CompactorConfig, IdleLogs, Step};
    let (meta, objects, clock) = stores;
    let cleanup = Cleanup { min_dirty_ratio: 0.0, delete_retention_ms: 0, ..Default::default() };
    let cfg = CompactorConfig {
        min_chunks: 1,
        target_segment_bytes: 2 << 10,
        settle_after: Duration::ZERO,
        compacted: Arc::new((1..=LOGS).map(|l| (LogId(l), cleanup)).collect()),
        clock,
        ..Default::default()
    };
    let idle = IdleLogs::default();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let Ok(lease) = meta.lease_grant(Duration::from_secs(2)).await else { continue };
        let reader = logstore::LogReader::new(meta.clone(), objects.clone(), "sim");
        let c = Compactor::new(reader, id, lease, cfg.clone()).with_idle(idle.clone());
        let log = LogId(1 + shared.lock().2.below(LOGS));
        let crash_at = crashing.then(|| shared.lock().2.below(8)).filter(|n| *n < 3);
        let Some(at) = crash_at else {
            let _ = c.compact_log_fully(log).await;
            continue;
        };
        let step = [Step::Claimed, Step::Written, Step::Swapped][at as usize];
        let hook: maintenance::compactor::StepHook = Arc::new(move |s| {
            Box::pin(async move {
                if s == step {
                    std::future::pending::<()>().await;
                }
            })
        });
        let task = tokio::spawn(async move { c.compact_log_fully_with(log, Some(hook)).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        task.abort();
        shared.lock().1.record(("compactor crash", log.0, at));
        let _ = meta.lease_revoke(lease).await;
    }
}

/// Runs the scenario: the module's steps, then [`check`].
pub(crate) async fn simulate(seed: u64, plan: Plan, store: Arc<metadata::MemoryStore>) -> Report {
    let start = tokio::time::Instant::now();
    let root = Rng::new(seed);
    let faulty_meta = FaultyMeta::new(store, plan.meta, root.fork(1));
    let meta: Arc<dyn MetadataStore> = faulty_meta.clone();
    let (faulty_objects, faults) =
        FaultyStore::new(Arc::new(objstore::object_store::memory::InMemory::new()));
    let objects: Arc<dyn ObjectStore> = faulty_objects;
    faults.delay(Op::Put, Duration::from_millis(8));
    let clock: Arc<dyn Clock> = Arc::new(SimClock(start));
    let mut writers = Vec::new();
    for i in 0..plan.writers {
        let cfg = crate::scenario::config(&format!("w{i}"), "*", false);
        match LogStorage::open(meta.clone(), objects.clone(), cfg, clock.clone()).await {
            Ok(w) => writers.push(w),
            Err(e) => return crate::scenario::failed(seed, format!("writer: {e}")),
        }
    }
    // Logs 1 and 2 (ids start at 1).
    for l in 1..=LOGS {
        match writers[0].create_log().await {
            Ok(log) if log.0 == l => {}
            other => return crate::scenario::failed(seed, format!("log {l}: {other:?}")),
        }
    }
    let writers = Arc::new(writers);
    let shared: Shared = Arc::new(Mutex::new((Log::default(), Trace::new(), root.fork(2))));
    faulty_meta.set_on(true);
    let fraction = |tag: u64, p: f64| Trigger::Fraction { p, seed: root.fork(tag).next_u64() };
    faults.add(Op::Put, fraction(3, plan.put_fail), Action::Fail(FaultError::Unavailable));
    faults.add(Op::Put, fraction(4, plan.put_lose), Action::LoseResponse(FaultError::Unavailable));
    faults.add(Op::Get, fraction(5, plan.get_fail), Action::Fail(FaultError::Unavailable));

    let mut clients = tokio::task::JoinSet::new();
    for c in 0..plan.clients as u64 {
        let (p, w, s) = (plan.clone(), writers.clone(), shared.clone());
        clients.spawn(async move { client(c, p, w, s).await });
    }
    let stores = (meta.clone(), objects.clone(), clock.clone());
    let background = vec![
        tokio::spawn(reader(writers.clone(), shared.clone())),
        tokio::spawn(compactor("c1", false, stores.clone(), shared.clone())),
        tokio::spawn(compactor("c2", true, stores, shared.clone())),
    ];
    while clients.join_next().await.is_some() {}
    // Compaction goes on a while after the last append.
    tokio::time::sleep(Duration::from_secs(5)).await;
    for t in background {
        t.abort();
    }
    faulty_meta.set_on(false);
    faults.clear();
    tokio::time::sleep(Duration::from_secs(5)).await;
    for l in 1..=LOGS {
        let Some((seen, _)) = read_whole(&writers[0], l).await else {
            return crate::scenario::failed(seed, format!("the final read of log {l} failed"));
        };
        let mut s = shared.lock();
        let shown: Vec<Seen> =
            seen.iter().map(|(id, o)| Seen { offset: *o, records: 1, id: *id }).collect();
        s.1.record(("final", l, shown));
        s.0.finals.insert(l, seen);
    }
    for w in writers.iter() {
        w.abort();
    }
    let s = shared.lock();
    let violations = check(&s.0);
    let minimal_trace = if violations.is_empty() { Vec::new() } else { s.1.minimal(&violations) };
    Report {
        seed,
        trace: s.1.finish(),
        acked: s.0.sent.values().filter(|x| x.acked.is_some()).count(),
        failed: 0,
        unknown: s.0.sent.values().filter(|x| x.acked.is_none()).count(),
        crashes: 0,
        zombie_attempts: 0,
        reads: s.0.reads.len(),
        read_entries: s.0.reads.iter().map(|r| r.seen.len()).sum(),
        share_deliveries: 0,
        share_acks: 0,
        meta_faults: faulty_meta.counts.total(),
        virtual_ms: s.1.now_ms(),
        error: None,
        minimal_trace,
        violations,
    }
}
