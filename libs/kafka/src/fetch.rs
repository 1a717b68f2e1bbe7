//! Fetch and ListOffsets (ARCHITECTURE §11). Fetch reads whole batches from each partition's
//! fetch offset (sent as stored, by reference, each base offset written as it goes out;
//! nothing re-encoded or copied: [`crate::splice`]) within the response's budget as Kafka
//! fills it (KIP-74: in order, the first partition with records at least one batch), answers
//! at once when `min_bytes` are there, the limits held records back, or a partition has an
//! error, else waits (registered before looking) until a partition has more or `max_wait_ms`
//! passes, reading again each time something arrives. Fetch sessions (KIP-227) are
//! [`crate::fetch_session`]'s: an incremental fetch is read as the full one its session stands
//! for, and answered with what is new.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{
    BrokerId, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse, ProducerId,
};

use crate::{Broker, Refused, StoredBatch};
use kafka_protocol::messages::ApiKey;

use crate::api::{Admission, Ctx, Handler, admitted};
use crate::session::Session;

/// The longest a fetch waits, whatever the client asks.
const MAX_WAIT: Duration = Duration::from_secs(30);

/// The most one Fetch answers, whatever the client asks (Kafka's broker `fetch.max.bytes`,
/// 55 MiB): one batch past it at most.
pub const FETCH_MAX_BYTES: usize = 55 << 20;

/// A fetch's response, its records fields stand-ins for the stored batches in `spliced` (one
/// list per partition whose field is a stand-in, in the order the response holds them), to be
/// encoded by [`crate::splice`].
pub(crate) struct Answer {
    pub resp: FetchResponse,
    pub spliced: VecDeque<Vec<StoredBatch>>,
}

pub(crate) async fn fetch(req: &FetchRequest, client_id: &str, broker: &dyn Broker) -> Answer {
    let zone = crate::zone_of(client_id);
    let wait = Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0)).min(MAX_WAIT);
    let deadline = tokio::time::Instant::now() + wait;
    let min_bytes = usize::try_from(req.min_bytes).unwrap_or(0);
    let read_committed = req.isolation_level == 1;
    // Kafka's response limit: 0 (or less) leaves room for the one batch `read` allows past it.
    let total_max = usize::try_from(req.max_bytes).unwrap_or(0).min(FETCH_MAX_BYTES);
    // KIP-392: the client's rack (v11+; empty when it names none).
    let rack = Some(req.rack_id.as_str()).filter(|r| !r.is_empty()).map(str::to_owned);
    let rack = rack.as_deref();
    let asks = asks(req);
    loop {
        let read = read(req, &asks, zone, rack, broker, total_max, read_committed).await;
        let partitions = || read.answer.resp.responses.iter().flat_map(|t| t.partitions.iter());
        // Answered at once, as Kafka does: enough bytes, more there than the limits let in
        // (waiting adds nothing), a client sent to another replica, or any partition in error
        // (it must learn of it, say to find its new leader).
        let done = bytes_of(&read.answer.resp) >= min_bytes.max(1)
            || read.limited
            || partitions().any(|p| p.preferred_read_replica.0 >= 0 || p.error_code != 0);
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if done || left.is_zero() || read.tails.is_empty() {
            return read.answer;
        }
        // Until a record past each high watermark read arrives (then read again: `min_bytes`
        // may still not be met, and the wait goes on), or the wait is over.
        broker.wait_for(read.tails, left).await;
    }
}

/// The records' bytes of a response (a stand-in is as long as the batches it stands for).
fn bytes_of(resp: &FetchResponse) -> usize {
    resp.responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| p.records.as_ref().map_or(0, Bytes::len))
        .sum()
}

/// Partitions of one fetch read at once.
const PARALLEL_PARTITIONS: usize = 16;

/// One partition a fetch reads: where it is in the request (topic, partition), from where,
/// at most how much.
struct Ask {
    topic: usize,
    partition: usize,
    offset: i64,
    max: usize,
}

/// The partitions a request names, in its order, each once (a partition named again is left
/// out, as Kafka's map of them keeps one; the later fetch offset wins, as there).
fn asks(req: &FetchRequest) -> Vec<Ask> {
    let mut at: std::collections::HashMap<(&str, i32), usize> = std::collections::HashMap::new();
    let mut out: Vec<Ask> = Vec::new();
    for (ti, t) in req.topics.iter().enumerate() {
        for (pi, p) in t.partitions.iter().enumerate() {
            let max = usize::try_from(p.partition_max_bytes).unwrap_or(0);
            match at.entry((t.topic.0.as_str(), p.partition)) {
                std::collections::hash_map::Entry::Occupied(e) => {
                    let a = &mut out[*e.get()];
                    (a.offset, a.max) = (p.fetch_offset, max);
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(out.len());
                    out.push(Ask { topic: ti, partition: pi, offset: p.fetch_offset, max });
                }
            }
        }
    }
    out
}

/// One read of a fetch's partitions.
struct Read {
    answer: Answer,
    /// Each partition read without error, at its high watermark: what a wait waits past.
    tails: Vec<(String, i32, i64)>,
    /// A partition holds records past those answered (the limits stopped them).
    limited: bool,
}

/// Reads the partitions `asks` names as Kafka fills a response (KIP-74): in the request's
/// order against what the response has left, each at most its `partition_max_bytes`, in whole
/// batches; the first partition with any records gets at least one batch whatever the limits
/// (so a consumer never stalls on a large batch), no other more than the limits. Several are
/// read at once, each asked for what is left once those before it take what they were asked
/// for, so storage is asked for about the response's budget, not each partition's; once
/// nothing is left, the rest are asked for their offsets only.
async fn read(
    req: &FetchRequest,
    asks: &[Ask],
    zone: Option<&str>,
    rack: Option<&str>,
    broker: &dyn Broker,
    total_max: usize,
    read_committed: bool,
) -> Read {
    use futures::StreamExt;
    let mut fetched: Vec<Option<Result<crate::Fetched, Refused>>> = Vec::new();
    fetched.resize_with(asks.len(), || None);
    let mut in_flight = futures::stream::FuturesUnordered::new();
    // Of the budget: what the partitions laid out took, and what the reads in flight were
    // asked for.
    let (mut used, mut promised) = (0usize, 0usize);
    // Partitions laid out (in order, as they come back), and asked.
    let (mut laid, mut next) = (0usize, 0usize);
    // No partition laid out has records: the next may get one batch past the limits.
    let mut min_one = true;
    loop {
        while let Some(Some(r)) = fetched.get_mut(laid).filter(|_| laid < next) {
            if let Ok(f) = r {
                let left = total_max.saturating_sub(used);
                let budget = asks[laid].max.min(left);
                let returned = f.records.len();
                f.records = first_batches(std::mem::take(&mut f.records), budget, min_one);
                let got: usize = f.records.iter().map(StoredBatch::len).sum();
                min_one &= got == 0;
                used = used.saturating_add(got);
                // A batch that did not fit in what the response has left: storage answers at
                // least a batch, so the rest is not asked for (Kafka would give a later
                // partition's smaller batch that room).
                if f.records.len() < returned && budget == left {
                    used = total_max;
                }
            }
            laid += 1;
        }
        if next == asks.len() && in_flight.is_empty() {
            break;
        }
        if next < asks.len() && in_flight.len() < PARALLEL_PARTITIONS {
            let room = asks[next].max.min(total_max.saturating_sub(used + promised));
            // The one batch past the limits goes to the first partition with records: once
            // every one before this came back empty, it is this one's (a byte asked brings a
            // whole batch); while some are in flight, this one waits for them.
            let want = match (room, min_one, in_flight.is_empty()) {
                (0, true, true) => Some(1),
                (0, true, false) => None,
                (room, _, _) => Some(room),
            };
            if let Some(want) = want {
                let a = &asks[next];
                let t = &req.topics[a.topic];
                let (topic, partition) =
                    (t.topic.0.to_string(), t.partitions[a.partition].partition);
                let (offset, i) = (a.offset, next);
                promised += want;
                let isolation = if read_committed {
                    crate::Isolation::ReadCommitted
                } else {
                    crate::Isolation::ReadUncommitted
                };
                in_flight.push(async move {
                    let f = broker.fetch(&topic, partition, zone, rack, offset, want, isolation);
                    (i, want, f.await)
                });
                next += 1;
                continue;
            }
        }
        if let Some((i, want, r)) = in_flight.next().await {
            promised -= want;
            fetched[i] = Some(r);
        }
    }
    let mut results: std::collections::HashMap<(usize, usize), Result<crate::Fetched, Refused>> =
        asks.iter().zip(fetched).filter_map(|(a, r)| Some(((a.topic, a.partition), r?))).collect();
    let (mut tails, mut limited) = (Vec::new(), false);
    let mut responses = Vec::with_capacity(req.topics.len());
    let mut spliced = VecDeque::new();
    for (ti, t) in req.topics.iter().enumerate() {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for (pi, p) in t.partitions.iter().enumerate() {
            // A partition named again was read once, and is answered once.
            let Some(r) = results.remove(&(ti, pi)) else { continue };
            let mut data = PartitionData::default().with_partition_index(p.partition);
            // Null for read_uncommitted, empty for read_committed, as Kafka answers.
            data.aborted_transactions = read_committed.then(Vec::new);
            match r {
                Ok(f) => {
                    let end = f.records.last().map_or(p.fetch_offset, end_of);
                    // Read committed stops at the last stable offset: more there only once
                    // it moves (a marker commits, which moves the high watermark too).
                    let readable =
                        if read_committed { f.last_stable_offset } else { f.high_watermark };
                    limited |= f.preferred_read_replica.is_none() && end < readable;
                    tails.push((t.topic.0.to_string(), p.partition, f.high_watermark));
                    let (records, stand_in) = crate::splice::records_field(&f.records);
                    data.high_watermark = f.high_watermark;
                    data.last_stable_offset = f.last_stable_offset;
                    if read_committed {
                        data.aborted_transactions = Some(
                            f.aborted
                                .iter()
                                .map(|(producer_id, first_offset)| {
                                    AbortedTransaction::default()
                                        .with_producer_id(ProducerId(*producer_id))
                                        .with_first_offset(*first_offset)
                                })
                                .collect(),
                        );
                    }
                    data.log_start_offset = f.log_start_offset;
                    data.records = Some(records);
                    if stand_in {
                        spliced.push_back(f.records);
                    }
                    if let Some(node) = f.preferred_read_replica {
                        data.preferred_read_replica = BrokerId(node);
                    }
                }
                Err(r) => refuse(&mut data, r),
            }
            partitions.push(data);
        }
        if partitions.is_empty() && !t.partitions.is_empty() {
            continue;
        }
        responses.push(
            FetchableTopicResponse::default()
                .with_topic(t.topic.clone())
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    let resp = FetchResponse::default().with_session_id(0).with_responses(responses);
    Read { answer: Answer { resp, spliced }, tails, limited }
}

/// The offset after a stored batch's last record.
fn end_of(b: &StoredBatch) -> i64 {
    let delta = recordbatch::BatchHeader::parse(&b.bytes).map_or(0, |h| h.last_offset_delta);
    b.base_offset.saturating_add(i64::from(delta)).saturating_add(1)
}

/// The first whole batches of `batches` within `budget` bytes; with `min_one`, always the
/// first one (a batch larger than the budget is still sent, as Kafka does for the first
/// partition with records, so a consumer never stalls).
fn first_batches(mut batches: Vec<StoredBatch>, budget: usize, min_one: bool) -> Vec<StoredBatch> {
    let mut total = 0usize;
    let keep = batches
        .iter()
        .take_while(|b| {
            let first = total == 0 && min_one;
            total = total.saturating_add(b.len());
            first || total <= budget
        })
        .count();
    batches.truncate(keep);
    batches
}

fn refuse(data: &mut PartitionData, r: Refused) {
    data.error_code = r.code;
    data.high_watermark = -1;
    data.records = Some(Bytes::new());
    if let Some(l) = r.leader {
        data.current_leader.leader_id = BrokerId(l);
    }
}

pub(crate) async fn list_offsets(
    req: ListOffsetsRequest,
    client_id: &str,
    broker: &dyn Broker,
) -> ListOffsetsResponse {
    let zone = crate::zone_of(client_id);
    let isolation = crate::Isolation::from_kafka(req.isolation_level);
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let topic = t.name.0.to_string();
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let r = ListOffsetsPartitionResponse::default().with_partition_index(p.partition_index);
            let at = broker.list_offset(&topic, p.partition_index, zone, p.timestamp, isolation);
            partitions.push(match at.await {
                Ok((offset, timestamp)) => r.with_offset(offset).with_timestamp(timestamp),
                Err(refused) => r.with_error_code(refused.code).with_offset(-1).with_timestamp(-1),
            });
        }
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions),
        );
    }
    ListOffsetsResponse::default().with_topics(topics)
}

#[cfg(test)]
mod tests {
    use super::first_batches;
    use crate::StoredBatch;

    fn batches(lens: &[usize]) -> Vec<StoredBatch> {
        lens.iter().map(|l| StoredBatch { base_offset: 0, bytes: vec![0u8; *l].into() }).collect()
    }

    fn kept(lens: &[usize], budget: usize) -> usize {
        first_batches(batches(lens), budget, true).iter().map(StoredBatch::len).sum()
    }

    #[test]
    fn a_budget_keeps_whole_batches_and_always_the_first() {
        assert_eq!(kept(&[100, 50, 70], 1000), 220);
        assert_eq!(kept(&[100, 50, 70], 150), 150);
        assert_eq!(kept(&[100, 50, 70], 149), 100);
        assert_eq!(kept(&[100, 50, 70], 10), 100, "the first batch, whatever the budget");
        assert_eq!(kept(&[], 10), 0);
        let past = first_batches(batches(&[100, 50]), 10, false);
        assert!(past.is_empty(), "no batch past the budget but the first partition's");
    }
}

/// Fetch: READ on each topic; refused partitions answered apart. Stored batches go out by
/// reference ([`crate::splice`]).
#[derive(Debug)]
pub struct Fetch;

impl Handler for Fetch {
    const KEY: ApiKey = ApiKey::Fetch;
    const VERSIONS: (i16, i16) = (4, 12);
    type Request = FetchRequest;

    fn serve(mut req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        // Sessions from v7 (KIP-227); an incremental fetch now names its session's partitions.
        let sessions = ctx.cfg.fetch_sessions.clone();
        let context = match ctx.reply.version {
            v if v >= 7 => sessions.begin(&mut req, &ctx.principal),
            _ => Ok(crate::fetch_session::Context::Sessionless),
        };
        let context = match context {
            Ok(c) => c,
            Err(error) => {
                let resp = FetchResponse::default().with_error_code(error).with_session_id(0);
                let answer = Answer { resp, spliced: VecDeque::new() };
                return admitted(Box::pin(async move { ctx.reply.encode_fetch(answer).map(Some) }));
            }
        };
        // A new session holds every partition asked for, refused ones too (as Kafka's does):
        // each of its fetches answers them with their error again.
        let asked = match context {
            crate::fetch_session::Context::New => req.topics.clone(),
            _ => Vec::new(),
        };
        let refused = authorize::fetch(ctx.access(), &mut req);
        admitted(Box::pin(async move {
            let mut answer = fetch(&req, &ctx.client_id, ctx.broker.as_ref()).await;
            sessions.finish(context, &asked, &mut answer.resp, &ctx.principal);
            answer.resp.responses.extend(refused);
            ctx.reply.encode_fetch(answer).map(Some)
        }))
    }
}

/// ListOffsets: DESCRIBE on each topic.
#[derive(Debug)]
pub struct ListOffsets;

impl Handler for ListOffsets {
    const KEY: ApiKey = ApiKey::ListOffsets;
    const VERSIONS: (i16, i16) = (1, 8);
    type Request = ListOffsetsRequest;

    fn serve(mut req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let refused = authorize::list_offsets(ctx.access(), &mut req);
        ctx.later(|ctx| async move {
            let mut resp = list_offsets(req, &ctx.client_id, ctx.broker.as_ref()).await;
            resp.topics.extend(refused);
            resp
        })
    }
}

/// What this area's APIs need of the connection's principal (the helpers are
/// [`crate::authz`]'s).
mod authorize {
    use kafka_protocol::messages::*;

    use security::acl::Operation;

    use crate::authz::{Access, TOPIC_AUTHORIZATION_FAILED, split};

    pub fn fetch(
        a: Access<'_>,
        req: &mut FetchRequest,
    ) -> Vec<fetch_response::FetchableTopicResponse> {
        use fetch_response::{FetchableTopicResponse, PartitionData};
        if !a.checks() {
            return Vec::new();
        }
        split(&mut req.topics, |t| a.topic(Operation::Consume, &t.topic))
            .into_iter()
            .map(|t| {
                FetchableTopicResponse::default().with_topic(t.topic).with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            PartitionData::default()
                                .with_partition_index(p.partition)
                                .with_error_code(TOPIC_AUTHORIZATION_FAILED)
                                .with_high_watermark(-1)
                                .with_last_stable_offset(-1)
                                .with_log_start_offset(-1)
                        })
                        .collect(),
                )
            })
            .collect()
    }

    pub fn list_offsets(
        a: Access<'_>,
        req: &mut ListOffsetsRequest,
    ) -> Vec<list_offsets_response::ListOffsetsTopicResponse> {
        use list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
        if !a.checks() {
            return Vec::new();
        }
        split(&mut req.topics, |t| a.topic(Operation::Describe, &t.name))
            .into_iter()
            .map(|t| {
                ListOffsetsTopicResponse::default().with_name(t.name).with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            ListOffsetsPartitionResponse::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(TOPIC_AUTHORIZATION_FAILED)
                                .with_timestamp(-1)
                                .with_offset(-1)
                        })
                        .collect(),
                )
            })
            .collect()
    }
}
