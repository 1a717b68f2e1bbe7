//! Fetch and ListOffsets (ARCHITECTURE §11). Fetch reads whole batches from each partition's
//! fetch offset (base offsets written in, nothing re-encoded), answers at once when
//! `min_bytes` are there, else waits (registered before looking) until any partition has more
//! or `max_wait_ms` passes, then reads again. Sessionless (session id 0); the last stable
//! offset is the high watermark (no transactions exist); records are never null.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{
    BrokerId, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse,
};

use crate::{Broker, Refused};

/// The longest a fetch waits, whatever the client asks.
const MAX_WAIT: Duration = Duration::from_secs(30);
/// A partition's bytes when the client gives none.
const DEFAULT_PARTITION_BYTES: usize = 1 << 20;

pub(crate) async fn fetch(
    req: FetchRequest,
    client_id: &str,
    broker: &dyn Broker,
) -> FetchResponse {
    let zone = crate::zone_of(client_id);
    let wait = Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0)).min(MAX_WAIT);
    let min_bytes = usize::try_from(req.min_bytes).unwrap_or(0);
    let read_committed = req.isolation_level == 1;
    let total_max = usize::try_from(req.max_bytes).ok().filter(|n| *n > 0).unwrap_or(usize::MAX);
    // KIP-392: the client's rack (v11+; empty when it names none).
    let rack = Some(req.rack_id.as_str()).filter(|r| !r.is_empty()).map(str::to_owned);
    let rack = rack.as_deref();
    let mut resp = read(&req, zone, rack, broker, total_max, read_committed).await;
    let got: usize = bytes_of(&resp);
    // A client sent to another replica is answered at once, as Kafka does.
    let redirected = resp
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

fn bytes_of(resp: &FetchResponse) -> usize {
    resp.responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| p.records.as_ref().map_or(0, Bytes::len))
        .sum()
}

async fn read(
    req: &FetchRequest,
    zone: Option<&str>,
    rack: Option<&str>,
    broker: &dyn Broker,
    total_max: usize,
    read_committed: bool,
) -> FetchResponse {
    let mut left = total_max;
    let mut responses = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let topic = t.topic.0.to_string();
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let want = usize::try_from(p.partition_max_bytes)
                .ok()
                .filter(|n| *n > 0)
                .unwrap_or(DEFAULT_PARTITION_BYTES)
                .min(left.max(1));
            let mut data = PartitionData::default().with_partition_index(p.partition);
            // Null for read_uncommitted, empty for read_committed, as Kafka answers.
            data.aborted_transactions = read_committed.then(Vec::new);
            match broker.fetch(&topic, p.partition, zone, rack, p.fetch_offset, want).await {
                Ok(f) => {
                    left = left.saturating_sub(f.records.len());
                    data.high_watermark = f.high_watermark;
                    data.last_stable_offset = f.high_watermark;
                    data.log_start_offset = f.log_start_offset;
                    data.records = Some(f.records);
                    if let Some(node) = f.preferred_read_replica {
                        data.preferred_read_replica = BrokerId(node);
                    }
                }
                Err(r) => refuse(&mut data, r),
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
    FetchResponse::default().with_session_id(0).with_responses(responses)
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
