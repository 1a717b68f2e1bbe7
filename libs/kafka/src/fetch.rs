//! Fetch and ListOffsets (ARCHITECTURE §11). Fetch reads whole batches from each partition's
//! fetch offset (sent as stored, by reference, each base offset written as it goes out;
//! nothing re-encoded or copied: [`crate::splice`]), answers at once when
//! `min_bytes` are there, else waits (registered before looking) until any partition has more
//! or `max_wait_ms` passes, then reads again. Sessionless (session id 0); the last stable
//! offset is the high watermark (no transactions exist); records are never null.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{
    BrokerId, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse,
};

use crate::{Broker, Refused, StoredBatch};

/// The longest a fetch waits, whatever the client asks.
const MAX_WAIT: Duration = Duration::from_secs(30);
/// A partition's bytes when the client gives none.
const DEFAULT_PARTITION_BYTES: usize = 1 << 20;

/// A fetch's response, its records fields stand-ins for the stored batches in `spliced` (one
/// list per partition whose field is a stand-in, in the order the response holds them), to be
/// encoded by [`crate::splice`].
pub(crate) struct Answer {
    pub resp: FetchResponse,
    pub spliced: VecDeque<Vec<StoredBatch>>,
}

pub(crate) async fn fetch(req: FetchRequest, client_id: &str, broker: &dyn Broker) -> Answer {
    let zone = crate::zone_of(client_id);
    let wait = Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0)).min(MAX_WAIT);
    let min_bytes = usize::try_from(req.min_bytes).unwrap_or(0);
    let read_committed = req.isolation_level == 1;
    let total_max = usize::try_from(req.max_bytes).ok().filter(|n| *n > 0).unwrap_or(usize::MAX);
    // KIP-392: the client's rack (v11+; empty when it names none).
    let rack = Some(req.rack_id.as_str()).filter(|r| !r.is_empty()).map(str::to_owned);
    let rack = rack.as_deref();
    let mut resp = read(&req, zone, rack, broker, total_max, read_committed).await;
    let got: usize = bytes_of(&resp.resp);
    // A client sent to another replica is answered at once, as Kafka does.
    let redirected = resp
        .resp
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .any(|p| p.preferred_read_replica.0 >= 0);
    if got < min_bytes.max(1) && !wait.is_zero() && !redirected {
        let targets: Vec<(String, i32, i64)> = req
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| (t.topic.0.to_string(), p.partition, p.fetch_offset))
            })
            .collect();
        if !targets.is_empty() {
            broker.wait_for(targets, wait).await;
            resp = read(&req, zone, rack, broker, total_max, read_committed).await;
        }
    }
    resp
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

/// Reads every partition the request names, several at once (each its own metadata reads and
/// GETs: one after the other, an 8-partition fetch took the sum of eight reads), then lays
/// them out in the request's order within its byte budget as Kafka fills it: each partition
/// gets at most its `partition_max_bytes` and what the response has left, in whole batches,
/// at least one.
async fn read(
    req: &FetchRequest,
    zone: Option<&str>,
    rack: Option<&str>,
    broker: &dyn Broker,
    total_max: usize,
    read_committed: bool,
) -> Answer {
    use futures::StreamExt;
    let partition_max = |p: &kafka_protocol::messages::fetch_request::FetchPartition| {
        usize::try_from(p.partition_max_bytes)
            .ok()
            .filter(|n| *n > 0)
            .unwrap_or(DEFAULT_PARTITION_BYTES)
    };
    let asks: Vec<(String, i32, i64, usize)> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                let want = partition_max(p).min(total_max.max(1));
                (t.topic.0.to_string(), p.partition, p.fetch_offset, want)
            })
        })
        .collect();
    let reads = asks.into_iter().map(|(topic, partition, offset, want)| {
        fetch_partition(broker, topic, partition, zone, rack, offset, want)
    });
    let fetched: Vec<Result<crate::Fetched, Refused>> =
        futures::stream::iter(reads).buffered(PARALLEL_PARTITIONS).collect().await;
    let mut fetched = fetched.into_iter();
    let mut left = total_max;
    let mut responses = Vec::with_capacity(req.topics.len());
    let mut spliced = VecDeque::new();
    for t in &req.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let want = partition_max(p).min(left.max(1));
            let mut data = PartitionData::default().with_partition_index(p.partition);
            // Null for read_uncommitted, empty for read_committed, as Kafka answers.
            data.aborted_transactions = read_committed.then(Vec::new);
            match fetched.next() {
                Some(Ok(f)) => {
                    let batches = first_batches(f.records, want);
                    let (records, stand_in) = crate::splice::records_field(&batches);
                    left = left.saturating_sub(records.len());
                    data.high_watermark = f.high_watermark;
                    data.last_stable_offset = f.high_watermark;
                    data.log_start_offset = f.log_start_offset;
                    data.records = Some(records);
                    if stand_in {
                        spliced.push_back(batches);
                    }
                    if let Some(node) = f.preferred_read_replica {
                        data.preferred_read_replica = BrokerId(node);
                    }
                }
                Some(Err(r)) => refuse(&mut data, r),
                None => refuse(
                    &mut data,
                    Refused::new(crate::code::UNKNOWN_SERVER_ERROR, "partition not read"),
                ),
            }
            partitions.push(data);
        }
        responses.push(
            FetchableTopicResponse::default()
                .with_topic(t.topic.clone())
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    Answer { resp: FetchResponse::default().with_session_id(0).with_responses(responses), spliced }
}

async fn fetch_partition(
    broker: &dyn Broker,
    topic: String,
    partition: i32,
    zone: Option<&str>,
    rack: Option<&str>,
    offset: i64,
    want: usize,
) -> Result<crate::Fetched, Refused> {
    broker.fetch(&topic, partition, zone, rack, offset, want).await
}

/// The first whole batches of `batches` within `budget` bytes, and always the first one (a
/// batch larger than the budget is still sent, as Kafka does, so a consumer never stalls).
fn first_batches(mut batches: Vec<StoredBatch>, budget: usize) -> Vec<StoredBatch> {
    let mut total = 0usize;
    let keep = batches
        .iter()
        .take_while(|b| {
            let first = total == 0;
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
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let topic = t.name.0.to_string();
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let r = ListOffsetsPartitionResponse::default().with_partition_index(p.partition_index);
            partitions.push(
                match broker.list_offset(&topic, p.partition_index, zone, p.timestamp).await {
                    Ok((offset, timestamp)) => r.with_offset(offset).with_timestamp(timestamp),
                    Err(refused) => {
                        r.with_error_code(refused.code).with_offset(-1).with_timestamp(-1)
                    }
                },
            );
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
        first_batches(batches(lens), budget).iter().map(StoredBatch::len).sum()
    }

    #[test]
    fn a_budget_keeps_whole_batches_and_always_the_first() {
        assert_eq!(kept(&[100, 50, 70], 1000), 220);
        assert_eq!(kept(&[100, 50, 70], 150), 150);
        assert_eq!(kept(&[100, 50, 70], 149), 100);
        assert_eq!(kept(&[100, 50, 70], 10), 100, "the first batch, whatever the budget");
        assert_eq!(kept(&[], 10), 0);
    }
}
