//! Kafka idempotent producers for the simulation's Kafka plan: each behaves as a Kafka client
//! with `enable.idempotence` and one batch in flight per partition — a producer id from
//! InitProducerId, per partition a sequence, each batch retried with the same sequence on any
//! retryable answer or a lost one (to the leader a refusal names, else any live broker) until
//! answered or its delivery timeout passes; then, as KIP-360 has it, the producer bumps its
//! epoch and starts its sequences over. It calls the writers' brokers directly (the wire is the
//! Kafka crate's, tested on its own), so what is tested is the idempotence: the state per (log,
//! slot), carried across owner changes by checkpoints and log replay.
//!
//! Each batch carries its id in every record's value; the history records one append per batch
//! (acknowledged if any attempt was answered), every answer, and every sequence error.
//!
//! Consumers fetch the partitions meanwhile, from the reader role's broker (caches of its own,
//! restarted cold by the nemesis) or a writer's; every batch a fetch returns is recorded as a
//! read, so a fetch that serves what the log does not hold, or what a completed trim removed,
//! is caught.

use std::time::Duration;

use kafka::Partitions as _;
use kafka::code;
use recordbatch::{ProducerFields, Record};

use crate::history::{Append, Outcome, id_of, payload};
use crate::scenario::SharedRef;

/// The topic the Kafka plan produces to.
pub const TOPIC: &str = "sim";

/// How long a batch is retried before the producer gives it up (Kafka's `delivery.timeout.ms`,
/// scaled to the simulation's deadlines).
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one attempt waits for its answer (`request.timeout.ms`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Kafka's other sequence errors (the front end answers neither today; a client treats both
/// as fatal or bumps its epoch, so either would be a violation too).
const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;
const UNKNOWN_PRODUCER_ID: i16 = 59;

/// The id a Kafka entry carries: its batch's first record's value's.
pub(crate) fn id_in(batch: &bytes::Bytes) -> Option<u64> {
    let (_, records) = recordbatch::decode(batch).ok()?;
    id_of(records.first()?.value.as_ref()?)
}

/// A live broker: the one of node `node` if it lives, else one chosen by the run's generator.
pub(crate) fn broker(
    shared: &SharedRef,
    node: Option<i32>,
) -> Option<std::sync::Arc<brokers::LogBroker>> {
    let mut s = shared.lock();
    if let Some(n) = node
        && let Some(b) = s.brokers.iter().flatten().find(|b| b.node == n)
    {
        return Some(b.broker.clone());
    }
    let s = &mut *s;
    let i = crate::scenario::pick_live(&mut s.rng, &s.brokers)?;
    s.brokers[i].as_ref().map(|b| b.broker.clone())
}

/// InitProducerId at any live broker until it answers: a new producer, or (given the current
/// one) the same at its next epoch. `None` if no broker answered for a minute.
async fn init(shared: &SharedRef, current: Option<(i64, i16)>) -> Option<(i64, i16)> {
    for _ in 0..600 {
        if let Some(b) = broker(shared, None)
            && let Ok(Ok(p)) =
                tokio::time::timeout(REQUEST_TIMEOUT, b.init_producer_id(current)).await
        {
            return Some(p);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Producer `c` sends `batches` batches to the topic's partitions (`logs`, in order) as a
/// client in `zone`.
pub(crate) async fn producer(
    c: u64,
    batches: usize,
    logs: Vec<u64>,
    zone: Option<String>,
    shared: SharedRef,
) {
    let Some(mut me) = init(&shared, None).await else { return };
    // Every other producer starts just below the sequence wrap (Kafka's sequences run to
    // i32::MAX, then 0), so each run's windows cross it; a new epoch starts from 0 (KIP-360).
    let start = if c % 2 == 1 { i32::MAX - 15 } else { 0 };
    let mut seqs = vec![start; logs.len()];
    // Per partition, the batches in the order sent: one in flight at a time, so those
    // answered must land in that order.
    let mut sent: Vec<Vec<u64>> = vec![Vec::new(); logs.len()];
    for b in 0..batches as u64 {
        let (partition, count, think) = {
            let mut s = shared.lock();
            let r = &mut s.rng;
            (r.below(logs.len() as u64) as usize, 1 + r.below(3) as u32, r.below(20))
        };
        let id = (c << 32) | b;
        let records: Vec<Record> = (0..count)
            .map(|k| Record {
                offset_delta: k,
                timestamp_ms: 0,
                value: Some(payload(id, 16)),
                ..Default::default()
            })
            .collect();
        let fields = ProducerFields {
            producer_id: me.0,
            producer_epoch: me.1,
            base_sequence: seqs[partition],
        };
        let Ok(batch) = recordbatch::encode(&records, fields) else { return };
        let Ok(header) = recordbatch::validate(&batch) else { return };
        let log = logs[partition];
        let deadline = tokio::time::Instant::now() + DELIVERY_TIMEOUT;
        let (mut leader, mut answered, mut fatal) = (None, None, false);
        while tokio::time::Instant::now() < deadline {
            let Some(to) = broker(&shared, leader) else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let attempt = async {
                let committing = to.produce(
                    TOPIC,
                    partition as i32,
                    zone.as_deref(),
                    batch.clone(),
                    &header,
                    None,
                );
                committing.await?.await
            };
            match tokio::time::timeout(REQUEST_TIMEOUT, attempt).await {
                Ok(Ok(done)) => {
                    let offset = u64::try_from(done.base_offset).unwrap_or(u64::MAX);
                    let mut s = shared.lock();
                    s.history.answers.push((id, offset));
                    s.trace.record(("answered", id, offset));
                    answered = Some(offset);
                    break;
                }
                Ok(Err(refused)) => match refused.code {
                    code::OUT_OF_ORDER_SEQUENCE_NUMBER
                    | code::INVALID_PRODUCER_EPOCH
                    | DUPLICATE_SEQUENCE_NUMBER
                    | UNKNOWN_PRODUCER_ID => {
                        if std::env::var_os("SIM_DEBUG").is_some() {
                            eprintln!("sim: batch {id} refused: {refused:?}");
                        }
                        let mut s = shared.lock();
                        s.history.refusals.push((id, refused.code));
                        s.trace.record(("refused", id, refused.code));
                        fatal = true;
                        break;
                    }
                    _ => leader = refused.leader,
                },
                Err(_) => leader = None,
            }
            let backoff = shared.lock().rng.below(80) + 20;
            tokio::time::sleep(Duration::from_millis(backoff)).await;
        }
        {
            let mut s = shared.lock();
            let outcome = answered.map_or(Outcome::Unknown, Outcome::Ok);
            s.history.appends.push(Append { id, log, records: count, outcome });
            s.trace.record(("batch", id, log, outcome));
        }
        sent[partition].push(id);
        if answered.is_some() && !fatal {
            seqs[partition] = seqs[partition].wrapping_add(count as i32) & i32::MAX;
        } else {
            // Given up (or refused): the next epoch, every sequence from 0 (KIP-360).
            let Some(next) = init(&shared, Some(me)).await else { return };
            me = next;
            seqs.iter_mut().for_each(|s| *s = 0);
        }
        tokio::time::sleep(Duration::from_millis(think)).await;
    }
    let mut s = shared.lock();
    for ids in sent.into_iter().filter(|ids| ids.len() > 1) {
        s.history.pipelined.push(ids);
    }
}

/// The batches in a Fetch answer's records, as the history records entries.
pub(crate) fn batches(records: &bytes::Bytes) -> Vec<crate::history::Seen> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < records.len() {
        let rest = records.slice(at..);
        let Ok(h) = recordbatch::BatchHeader::parse(&rest) else { break };
        let Some(len) = usize::try_from(h.batch_length).ok().map(|l| l + 12) else { break };
        if len > rest.len() {
            break;
        }
        let batch = rest.slice(..len);
        let id = if h.is_control() { Some(crate::history::MARKER) } else { id_in(&batch) };
        out.push(crate::history::Seen {
            offset: u64::try_from(h.base_offset).unwrap_or(u64::MAX),
            records: u32::try_from(h.record_count).unwrap_or(0),
            id: id.unwrap_or(u64::MAX),
        });
        at += len;
    }
    out
}

/// How long a trim takes at most to reach every writer's Kafka broker in the simulation.
const TRIM_REACHES_BROKERS: Duration = Duration::from_secs(2);

/// Consumer `c` fetches a partition now and then — from its start, near the end last seen, or
/// anywhere below — at the reader's broker or a writer's, until stopped; each answer's batches
/// go into the history as a read.
pub(crate) async fn consumer(c: u64, logs: Vec<u64>, shared: SharedRef) {
    let mut ends = vec![0u64; logs.len()];
    loop {
        let (partition, from, at_reader, think) = {
            let mut s = shared.lock();
            let r = &mut s.rng;
            let p = r.below(logs.len() as u64) as usize;
            let from = match r.below(3) {
                0 => 0,
                1 => ends[p].saturating_sub(4),
                _ => r.below(ends[p] + 1),
            };
            (p, from, r.chance(0.5), r.below(40) + 10)
        };
        tokio::time::sleep(Duration::from_millis(think)).await;
        let to = if at_reader { shared.lock().reader.clone() } else { broker(&shared, None) };
        let Some(to) = to else { continue };
        let log = logs[partition];
        // A writer's broker reads the log's start from its followed head, which learns of a
        // trim another process made by its watch (ARCHITECTURE §11): a fetch is held to the
        // trims done long enough before it to have reached it (the watch batches the
        // simulation delays, each up to 200 ms, in order).
        let floor = {
            let s = shared.lock();
            let seen_by = tokio::time::Instant::now().checked_sub(TRIM_REACHES_BROKERS);
            s.trims
                .iter()
                .filter(|(at, l, _)| *l == log && seen_by.is_some_and(|t| *at <= t))
                .map(|(_, _, to)| *to)
                .max()
                .unwrap_or(0)
        };
        let Ok(offset) = i64::try_from(from) else { continue };
        let fetched = tokio::time::timeout(
            REQUEST_TIMEOUT,
            to.fetch(TOPIC, partition as i32, None, None, offset, 64 << 10, Default::default()),
        )
        .await;
        let Ok(Ok(f)) = fetched else { continue };
        ends[partition] = u64::try_from(f.high_watermark).unwrap_or(0);
        // The batches as they go out on the wire, base offsets written in.
        let wire: Vec<bytes::Bytes> = f.records.iter().map(kafka::StoredBatch::to_wire).collect();
        let seen = batches(&wire.concat().into());
        let mut s = shared.lock();
        s.trace.record(("fetched", c, log, offset, &seen));
        let high = u64::try_from(f.high_watermark).ok();
        s.history.reads.push(crate::history::Read { log, floor, seen, high });
    }
}
