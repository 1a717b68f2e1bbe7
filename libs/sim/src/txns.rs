//! Kafka transactions for the simulation's transactions plan: each transactional producer
//! behaves as a Kafka client with a `transactional.id` would — InitProducerId at its id's
//! coordinator (the writer the owner function picks), then per transaction AddPartitionsToTxn,
//! a transactional batch to each partition's owner (retried with its sequence until answered),
//! EndTxn to commit or abort; now and then a new instance of it starts mid-transaction (the
//! coordinator aborts the old one's), or after one (the old instance's next commit must be
//! refused). Odd-numbered producers run transactions V2 (a Kafka 4 client): no
//! AddPartitionsToTxn, each batch adds its partition (Produce v12), and each EndTxn (v5) moves
//! the producer to the next epoch, its sequences starting again. Every writer's broker writes the markers coordinators ask of it and aborts
//! transactions past their timeout, as its Kafka listener does; the nemesis crashes, pauses
//! and starts writers meanwhile, so coordinators and owners change under the transactions.
//!
//! Readers fetch read committed all along (from the writers' brokers and the reader role's)
//! and filter what they get as a Kafka consumer does (the aborted transactions named, up to
//! their abort markers); at the end each partition is read committed whole. The history
//! records each transaction's batches and how its producer saw it end, for
//! [`crate::history::check`]'s transaction rules.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kafka::Partitions as _;
use kafka::coordination::transactions as coordinator;
use kafka::transactions::TxnPartition;
use recordbatch::{BatchHeader, ProducerFields, Record};

use crate::history::{Append, Outcome, Txn, TxnEnd, payload};
use crate::kafka::{TOPIC, broker, id_in};
use crate::scenario::{Plan, SharedRef};

/// How long one request waits for its answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a batch, or an EndTxn, is retried before the producer gives it up.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(20);
/// The producers' `transaction.timeout.ms`.
const TXN_TIMEOUT_MS: i32 = 10_000;
/// How often each writer looks for transactions past their timeout.
const EXPIRE_EVERY: Duration = Duration::from_secs(1);
/// How long the final read waits for every partition's last stable offset to reach its end.
const SETTLE: Duration = Duration::from_secs(60);

/// Kafka's codes a transactional client retries on (at the coordinator found again).
const RETRIABLE: [i16; 4] = [
    14, // COORDINATOR_LOAD_IN_PROGRESS
    15, // COORDINATOR_NOT_AVAILABLE
    16, // NOT_COORDINATOR
    51, // CONCURRENT_TRANSACTIONS
];

/// A writer's broker's part in transactions, as its Kafka listener runs it: the markers
/// coordinators ask of it, and its look for transactions past their timeout.
pub(crate) async fn broker_tasks(b: Arc<brokers::LogBroker>) {
    let coordinating: Arc<dyn kafka::Broker> = b.clone();
    let expiring = async move {
        loop {
            tokio::time::sleep(EXPIRE_EVERY).await;
            coordinator::expire(&coordinating).await;
        }
    };
    tokio::join!(b.serve_markers(std::future::pending::<()>()), expiring);
}

/// The live broker coordinating transactional id `id` (or any live one, which then answers
/// NOT_COORDINATOR).
async fn coordinator_of(shared: &SharedRef, id: &str) -> Option<Arc<dyn kafka::Broker>> {
    let any = broker(shared, None)?;
    let found =
        tokio::time::timeout(REQUEST_TIMEOUT, kafka::Cluster::coordinator(any.as_ref(), id));
    let node = found.await.ok()?.ok()??.node_id;
    let b: Arc<dyn kafka::Broker> = broker(shared, Some(node))?;
    Some(b)
}

/// InitProducerId for `id` until answered: the producer id and epoch of a new instance.
async fn init(shared: &SharedRef, id: &str) -> Option<(i64, i16)> {
    for _ in 0..600 {
        if let Some(b) = coordinator_of(shared, id).await {
            let asked = coordinator::init_producer_id(&b, id, TXN_TIMEOUT_MS, None);
            if let Ok(Ok(p)) = tokio::time::timeout(REQUEST_TIMEOUT, asked).await {
                shared.lock().trace.record(("init", id.to_owned(), p));
                return Some(p);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// AddPartitionsToTxn for `producer` until a definite answer: NONE, or why not.
async fn add(shared: &SharedRef, id: &str, producer: (i64, i16), parts: &[TxnPartition]) -> i16 {
    let deadline = tokio::time::Instant::now() + DELIVERY_TIMEOUT;
    while tokio::time::Instant::now() < deadline {
        if let Some(b) = coordinator_of(shared, id).await {
            let asked = coordinator::add(b.as_ref(), id, producer, parts, None);
            match tokio::time::timeout(REQUEST_TIMEOUT, asked).await {
                Ok(c) if !RETRIABLE.contains(&c) => return c,
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    RETRIABLE[1]
}

/// EndTxn for `producer` until a definite answer (v5 when `v2`: transactions V2): how the
/// transaction ended as its producer knows it, and the producer id and epoch it goes on at
/// (V1: the same; V2: the next epoch), or `None` when it must start over (a new instance).
async fn end(
    shared: &SharedRef,
    (id, v2): (&str, bool),
    producer: (i64, i16),
    commit: bool,
) -> (TxnEnd, Option<(i64, i16)>) {
    let deadline = tokio::time::Instant::now() + DELIVERY_TIMEOUT;
    // A commit asked whose answer was lost may have been taken.
    let mut lost = false;
    while tokio::time::Instant::now() < deadline {
        if let Some(b) = coordinator_of(shared, id).await {
            let asked = async {
                match v2 {
                    true => coordinator::end_v2(&b, id, producer, commit).await,
                    false => match coordinator::end(&b, id, producer, commit).await {
                        kafka::code::NONE => Ok(producer),
                        c => Err(c),
                    },
                }
            };
            match tokio::time::timeout(REQUEST_TIMEOUT, asked).await {
                Ok(Ok(next)) => {
                    if v2 {
                        shared.lock().trace.record(("ended v2", id.to_owned(), next));
                    }
                    let ended = if commit { TxnEnd::Committed } else { TxnEnd::Aborted };
                    return (ended, Some(next));
                }
                Ok(Err(c)) if RETRIABLE.contains(&c) => {}
                Ok(Err(_)) => break,
                Err(_) => lost = true,
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (if commit && lost { TxnEnd::Unknown } else { TxnEnd::Aborted }, None)
}

/// One transactional batch of `count` records carrying `id`, sent to partition `p`'s owner
/// until answered; its offset, or `None` (given up, or refused).
async fn send(
    shared: &SharedRef,
    (txn, zone): (kafka::TxnProduce<'_>, Option<&str>),
    id: u64,
    p: usize,
    count: u32,
    fields: ProducerFields,
) -> Option<u64> {
    let records: Vec<Record> = (0..count)
        .map(|k| Record {
            offset_delta: k,
            timestamp_ms: 0,
            value: Some(payload(id, 16)),
            ..Default::default()
        })
        .collect();
    let framing = recordbatch::Framing {
        attributes: recordbatch::TRANSACTIONAL,
        base_timestamp: 0,
        max_timestamp: 0,
        producer: fields,
    };
    let batch = recordbatch::encode_framed(&records, framing).ok()?;
    let header = recordbatch::validate(&batch).ok()?;
    let deadline = tokio::time::Instant::now() + DELIVERY_TIMEOUT;
    let mut leader = None;
    while tokio::time::Instant::now() < deadline {
        if let Some(to) = broker(shared, leader) {
            let attempt = async {
                let committing =
                    to.produce(TOPIC, p as i32, zone, batch.clone(), &header, Some(txn));
                committing.await?.await
            };
            match tokio::time::timeout(REQUEST_TIMEOUT, attempt).await {
                Ok(Ok(done)) => {
                    let offset = u64::try_from(done.base_offset).unwrap_or(u64::MAX);
                    let mut s = shared.lock();
                    s.history.answers.push((id, offset));
                    s.trace.record(("answered", id, offset));
                    return Some(offset);
                }
                Ok(Err(r))
                    if r.leader.is_some() || r.code == kafka::code::NOT_LEADER_OR_FOLLOWER =>
                {
                    leader = r.leader
                }
                Ok(Err(r)) if is_retriable_produce(r.code) => leader = None,
                Ok(Err(r)) => {
                    shared.lock().trace.record(("refused", id, r.code));
                    return None;
                }
                Err(_) => leader = None,
            }
        }
        let backoff = shared.lock().rng.below(80) + 20;
        tokio::time::sleep(Duration::from_millis(backoff)).await;
    }
    None
}

/// A produce answer a client retries (the partition's owner moving, storage busy).
fn is_retriable_produce(code: i16) -> bool {
    use kafka::code;
    [code::NOT_LEADER_OR_FOLLOWER, code::REQUEST_TIMED_OUT, code::LEADER_NOT_AVAILABLE]
        .contains(&code)
        || code == 56 // KAFKA_STORAGE_ERROR
        || code == 15 // COORDINATOR_NOT_AVAILABLE: the transaction's state unreadable now
        || code == 51 // CONCURRENT_TRANSACTIONS: V2, the previous transaction still ending
}

/// Transactional producer `t` runs `txns` transactions over the topic's partitions (`logs`),
/// as a client in `zone` (its batches go to the zone's owner slots).
pub(crate) async fn producer(
    t: u64,
    txns: usize,
    logs: Vec<u64>,
    zone: Option<String>,
    shared: SharedRef,
) {
    let id = format!("sim-txn-{t}");
    let v2 = t % 2 == 1;
    let Some(mut me) = init(&shared, &id).await else { return };
    let mut seqs = vec![0i32; logs.len()];
    let mut next_batch = 0u64;
    for k in 0..txns as u64 {
        let (parts, commit, restart_mid, zombie) = {
            let mut s = shared.lock();
            let r = &mut s.rng;
            let mut parts: Vec<usize> =
                (0..logs.len()).filter(|_| r.chance(0.5)).collect::<Vec<_>>();
            if parts.is_empty() {
                parts.push(r.below(logs.len() as u64) as usize);
            }
            (parts, r.chance(0.7), r.chance(0.1), r.chance(0.15))
        };
        let txn = (t << 32) | k;
        let added: Vec<TxnPartition> = parts
            .iter()
            .map(|p| TxnPartition { topic: TOPIC.to_owned(), partition: *p as i32 })
            .collect();
        let mut batches = Vec::new();
        let mut broken = !v2 && add(&shared, &id, me, &added).await != kafka::code::NONE;
        for p in parts.iter().copied() {
            if broken {
                break;
            }
            let count = 1 + shared.lock().rng.below(3) as u32;
            let bid = (1 << 48) | (t << 32) | next_batch;
            next_batch += 1;
            let fields =
                ProducerFields { producer_id: me.0, producer_epoch: me.1, base_sequence: seqs[p] };
            let to = kafka::TxnProduce { transactional_id: &id, add_partition: v2 };
            let offset = send(&shared, (to, zone.as_deref()), bid, p, count, fields).await;
            {
                let mut s = shared.lock();
                let outcome = offset.map_or(Outcome::Unknown, Outcome::Ok);
                s.history.appends.push(Append { id: bid, log: logs[p], records: count, outcome });
                s.trace.record(("batch", bid, logs[p], outcome));
            }
            batches.push(bid);
            match offset {
                Some(_) => seqs[p] = seqs[p].wrapping_add(count as i32) & i32::MAX,
                None => broken = true,
            }
        }
        let (ended, restart) = if broken || restart_mid {
            // A new instance of the producer: the coordinator aborts this one's transaction.
            (TxnEnd::Aborted, true)
        } else {
            match end(&shared, (&id, v2), me, commit).await {
                (ended, Some(next)) => {
                    // V2 goes on at the next epoch, its sequences starting again.
                    if next != me {
                        me = next;
                        seqs.iter_mut().for_each(|s| *s = 0);
                    }
                    (ended, false)
                }
                (ended, None) => (ended, true),
            }
        };
        {
            let mut s = shared.lock();
            s.trace.record(("txn", txn, &batches, ended));
            s.history.txns.push(Txn { id: txn, batches, end: ended });
        }
        if restart || zombie {
            let old = me;
            let Some(next) = init(&shared, &id).await else { return };
            me = next;
            seqs.iter_mut().for_each(|s| *s = 0);
            if zombie && !restart {
                fenced_try(&shared, (&id, v2), old, &added, txn).await;
            }
        }
    }
}

/// A fenced instance (`old`) tries another transaction: its AddPartitionsToTxn (V2: the
/// partition its produce would add) and its EndTxn(commit) must both be refused.
async fn fenced_try(
    shared: &SharedRef,
    (id, v2): (&str, bool),
    old: (i64, i16),
    parts: &[TxnPartition],
    txn: u64,
) {
    let (added, ended) = if v2 {
        let added = match (coordinator_of(shared, id).await, parts.first()) {
            (Some(b), Some(p)) => {
                let states: &dyn kafka::TxnStates = b.as_ref();
                let joined = kafka::add_to_transaction(states, id, old, p.clone());
                match tokio::time::timeout(REQUEST_TIMEOUT, joined).await {
                    Ok(Ok(_)) => kafka::code::NONE,
                    Ok(Err(c)) => c,
                    Err(_) => RETRIABLE[1],
                }
            }
            _ => RETRIABLE[1],
        };
        (added, end(shared, (id, v2), old, true).await.0)
    } else {
        (add(shared, id, old, parts).await, end(shared, (id, v2), old, true).await.0)
    };
    if added == kafka::code::NONE || ended == TxnEnd::Committed {
        let mut s = shared.lock();
        s.trace.record(("zombie committed", txn, added));
        s.history.zombie_txns.push(txn);
    }
}

/// The batches (ids) a read_committed Kafka consumer keeps of a fetch: transactional batches
/// of an aborted transaction named (from its first offset to its producer's abort marker) and
/// markers dropped.
fn visible(f: &kafka::Fetched) -> Vec<u64> {
    let mut aborted = f.aborted.clone();
    aborted.sort_by_key(|a| a.1);
    let mut pending = aborted.into_iter().peekable();
    let mut skipping = BTreeSet::new();
    let mut out = Vec::new();
    for b in f.records.iter().map(kafka::StoredBatch::to_wire) {
        let Ok(h) = BatchHeader::parse(&b) else { continue };
        let last = h.base_offset + i64::from(h.last_offset_delta);
        while let Some((pid, first)) = pending.peek().copied()
            && first <= last
        {
            skipping.insert(pid);
            pending.next();
        }
        if h.is_control() {
            if recordbatch::marker_commits(&b) == Some(false) {
                skipping.remove(&h.producer.producer_id);
            }
            continue;
        }
        if h.is_transactional() && skipping.contains(&h.producer.producer_id) {
            continue;
        }
        out.extend(id_in(&b));
    }
    out
}

/// The transactions plan's read_committed readers, fetching until stopped.
pub(crate) fn readers(
    plan: &Plan,
    logs: &[u64],
    shared: &SharedRef,
) -> Vec<tokio::task::JoinHandle<()>> {
    if plan.transactions == 0 {
        return Vec::new();
    }
    (0..2u64)
        .map(|c| {
            let (logs, shared) = (logs.to_vec(), shared.clone());
            tokio::spawn(async move { reader(c, logs, shared).await })
        })
        .collect()
}

/// Reader `c` fetches a partition read committed now and then, from its start or anywhere
/// below its end, at the reader role's broker or a writer's.
async fn reader(c: u64, logs: Vec<u64>, shared: SharedRef) {
    let mut ends = vec![0u64; logs.len()];
    loop {
        let (p, from, at_reader, think) = {
            let mut s = shared.lock();
            let r = &mut s.rng;
            let p = r.below(logs.len() as u64) as usize;
            let from = if r.chance(0.5) { 0 } else { r.below(ends[p] + 1) };
            (p, from, r.chance(0.5), r.below(60) + 20)
        };
        tokio::time::sleep(Duration::from_millis(think)).await;
        let to = if at_reader { shared.lock().reader.clone() } else { broker(&shared, None) };
        let (Some(to), Ok(offset)) = (to, i64::try_from(from)) else { continue };
        let committed = kafka::Isolation::ReadCommitted;
        let fetch = to.fetch(TOPIC, p as i32, None, None, offset, 64 << 10, committed);
        let Ok(Ok(f)) = tokio::time::timeout(REQUEST_TIMEOUT, fetch).await else { continue };
        ends[p] = u64::try_from(f.last_stable_offset).unwrap_or(0);
        let ids = visible(&f);
        let mut s = shared.lock();
        s.trace.record(("read committed", c, logs[p], offset, &ids));
        s.history.committed_reads.push((logs[p], ids));
    }
}

/// Each partition read committed whole at the reader role's broker, once its last stable
/// offset has reached its end (every transaction over) or [`SETTLE`] has passed.
pub(crate) async fn read_finals(logs: &[u64], shared: &SharedRef) {
    let Some(to) = shared.lock().reader.clone() else { return };
    let committed = kafka::Isolation::ReadCommitted;
    for (p, log) in logs.iter().enumerate() {
        let start = shared.lock().history.starts.get(log).copied().unwrap_or(0);
        let began = tokio::time::Instant::now();
        let (mut ids, mut stable, mut high) = (Vec::new(), 0u64, 0u64);
        loop {
            ids.clear();
            let mut at = i64::try_from(start).unwrap_or(0);
            let mut whole = true;
            loop {
                match to.fetch(TOPIC, p as i32, None, None, at, 1 << 20, committed).await {
                    Ok(f) => {
                        stable = u64::try_from(f.last_stable_offset).unwrap_or(0);
                        high = u64::try_from(f.high_watermark).unwrap_or(0);
                        ids.extend(visible(&f));
                        shared.lock().trace.record(("aborted", *log, at, f.aborted.clone()));
                        let next = f.records.last().and_then(|b| {
                            let h = BatchHeader::parse(&b.to_wire()).ok()?;
                            Some(h.base_offset + i64::from(h.last_offset_delta) + 1)
                        });
                        match next {
                            Some(n) if n < f.last_stable_offset => at = n,
                            _ => break,
                        }
                    }
                    Err(_) => {
                        whole = false;
                        break;
                    }
                }
            }
            if whole && stable >= high || began.elapsed() > SETTLE {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let mut s = shared.lock();
        s.trace.record(("read committed whole", *log, &ids, stable, high));
        s.history.committed_finals.insert(*log, (ids, stable, high));
    }
}
