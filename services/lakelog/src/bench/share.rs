//! `lakelog bench share`: a share group's (KIP-932) throughput over the Kafka wire, against any
//! Kafka port (Lakelog's, or Apache Kafka's: `scripts/bench-peers.sh --shares` runs it on both
//! in one run). For each number of partitions and of members: a fresh topic is filled with
//! `--records` records (Produce, acks=all), the group set to start at the earliest record, and
//! the members — share consumers written on [`crate::kafka_client`], one connection each —
//! join (ShareGroupHeartbeat), then fetch from each partition's leader (ShareFetch, every
//! record acquired accepted in the member's next request, as a client in implicit mode
//! acknowledges) until every record is acknowledged. The figure is records acknowledged per
//! second, from the members' first fetch to the last acknowledgement answered.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::share_fetch_request::{
    AcknowledgementBatch, FetchPartition, FetchTopic,
};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, GroupId, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, MetadataRequest, MetadataResponse, ProduceRequest,
    ProduceResponse, ShareFetchRequest, ShareFetchResponse, ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse, TopicName, metadata_request::MetadataRequestTopic,
};
use uuid::Uuid;

use crate::kafka_client::{Conn, coordinator, error_name, s};

/// Options of `lakelog bench share`.
#[derive(clap::Args, Debug)]
pub struct ShareArgs {
    /// A Kafka listener (Lakelog's or any Kafka's).
    #[arg(long, env = "LAKELOG_KAFKA", default_value = "127.0.0.1:9092")]
    kafka: String,
    /// Records in each run's topic.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    records: u64,
    /// Bytes per record.
    #[arg(long, default_value = "1KiB")]
    record_size: config::ByteSize,
    /// Members of the share group, one run each (comma-separated).
    #[arg(long, default_value = "1,4,16")]
    members: String,
    /// Partitions of the topic, one run each (comma-separated).
    #[arg(long, default_value = "1,8")]
    partitions: String,
    /// Records one ShareFetch acquires at most (the client's `max.poll.records`).
    #[arg(long, default_value_t = 500)]
    max_records: i32,
    /// Print each run as a JSON line too.
    #[arg(long)]
    json: bool,
}

fn list(v: &str) -> anyhow::Result<Vec<u32>> {
    v.split(',')
        .map(|x| x.trim().parse::<u32>().with_context(|| format!("`{x}` in `{v}`")))
        .collect()
}

pub async fn run(a: ShareArgs) -> anyhow::Result<()> {
    let size = usize::try_from(a.record_size.0).unwrap_or(1024).clamp(1, 1 << 20);
    // A warm-up run, not reported: a server's first share group starts its coordinators.
    one_run(&a, 1, 1, size, a.records.min(1_000)).await?;
    println!("| partitions | members | records | seconds | records/s acknowledged | redelivered |");
    println!("|---|---|---|---|---|---|");
    for partitions in list(&a.partitions)? {
        for members in list(&a.members)? {
            let r = one_run(&a, partitions, members, size, a.records).await?;
            println!(
                "| {partitions} | {members} | {} | {:.2} | {:.0} | {} |",
                r.acked,
                r.took.as_secs_f64(),
                r.acked as f64 / r.took.as_secs_f64().max(1e-9),
                r.redelivered
            );
            if a.json {
                println!(
                    "{{\"partitions\":{partitions},\"members\":{members},\"records\":{},\"seconds\":{:.3},\"records_per_s\":{:.0},\"redelivered\":{}}}",
                    r.acked,
                    r.took.as_secs_f64(),
                    r.acked as f64 / r.took.as_secs_f64().max(1e-9),
                    r.redelivered
                );
            }
        }
    }
    Ok(())
}

struct Outcome {
    acked: u64,
    took: Duration,
    redelivered: u64,
}

/// One run: a fresh topic of `partitions`, filled, drained by `members`.
async fn one_run(
    a: &ShareArgs,
    partitions: u32,
    members: u32,
    size: usize,
    records: u64,
) -> anyhow::Result<Outcome> {
    let tag = Uuid::new_v4().simple().to_string();
    let (topic, group) =
        (format!("share-bench-{partitions}-{members}-{tag}"), format!("share-bench-{tag}"));
    let mut c = Conn::connect(&a.kafka).await?;
    create_topic(&mut c, &topic, partitions).await?;
    let leaders = fill(&mut c, &topic, partitions, records, size).await?;
    set_earliest(&mut c, &group).await?;
    let topic_id = topic_id(&mut c, &topic).await?;
    let (acked, redelivered) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..members {
        let m = Member {
            kafka: a.kafka.clone(),
            group: group.clone(),
            topic: topic.clone(),
            topic_id,
            leaders: leaders.clone(),
            max_records: a.max_records,
            want: records,
            acked: acked.clone(),
            redelivered: redelivered.clone(),
        };
        tasks.spawn(async move { m.run().await });
    }
    while let Some(done) = tasks.join_next().await {
        done.context("a member")??;
    }
    Ok(Outcome {
        acked: acked.load(Ordering::Relaxed),
        took: start.elapsed(),
        redelivered: redelivered.load(Ordering::Relaxed),
    })
}

async fn create_topic(c: &mut Conn, topic: &str, partitions: u32) -> anyhow::Result<()> {
    let req = CreateTopicsRequest::default().with_timeout_ms(30_000).with_topics(vec![
        CreatableTopic::default()
            .with_name(TopicName(s(topic)))
            .with_num_partitions(i32::try_from(partitions)?)
            .with_replication_factor(1),
    ]);
    let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 5, &req).await?;
    for t in r.topics {
        if t.error_code != 0 {
            bail!("{}: creating topic {topic}", error_name(t.error_code));
        }
    }
    Ok(())
}

/// Each partition's leader's address, once the topic is known everywhere.
async fn leaders(c: &mut Conn, topic: &str) -> anyhow::Result<BTreeMap<i32, String>> {
    for _ in 0..100 {
        let req = MetadataRequest::default().with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(TopicName(s(topic)))),
        ]));
        let md: MetadataResponse = c.call(ApiKey::Metadata, 9, &req).await?;
        let brokers: BTreeMap<i32, String> =
            md.brokers.iter().map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port))).collect();
        if let Some(t) = md.topics.first()
            && t.error_code == 0
            && !t.partitions.is_empty()
        {
            let found: Option<BTreeMap<i32, String>> = t
                .partitions
                .iter()
                .map(|p| brokers.get(&p.leader_id.0).map(|b| (p.partition_index, b.clone())))
                .collect();
            if let Some(f) = found {
                return Ok(f);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("UNAVAILABLE: topic {topic} has no leaders")
}

async fn topic_id(c: &mut Conn, topic: &str) -> anyhow::Result<Uuid> {
    let req = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(TopicName(s(topic)))),
    ]));
    let md: MetadataResponse = c.call(ApiKey::Metadata, 12, &req).await?;
    md.topics.first().map(|t| t.topic_id).filter(|id| !id.is_nil()).context("the topic's id")
}

/// Produces `records` records of `size` bytes round-robin over the partitions, 1,000 to a
/// batch, each batch acknowledged (acks=all) before the next to its leader.
async fn fill(
    c: &mut Conn,
    topic: &str,
    partitions: u32,
    records: u64,
    size: usize,
) -> anyhow::Result<BTreeMap<i32, String>> {
    let leaders = leaders(c, topic).await?;
    let mut conns: BTreeMap<String, Conn> = BTreeMap::new();
    for addr in leaders.values().collect::<BTreeSet<_>>() {
        conns.insert(addr.clone(), Conn::connect(addr).await?);
    }
    let value = Bytes::from(vec![b'x'; size]);
    let (mut sent, mut p) = (0u64, 0i32);
    while sent < records {
        let n = (records - sent).min(1000);
        let batch: Vec<recordbatch::Record> = (0..n)
            .map(|i| recordbatch::Record {
                offset_delta: u32::try_from(i).unwrap_or(0),
                value: Some(value.clone()),
                ..Default::default()
            })
            .collect();
        let bytes = recordbatch::encode(&batch, recordbatch::ProducerFields::NONE)?;
        let req =
            ProduceRequest::default().with_acks(-1).with_timeout_ms(30_000).with_topic_data(vec![
                TopicProduceData::default().with_name(TopicName(s(topic))).with_partition_data(
                    vec![PartitionProduceData::default().with_index(p).with_records(Some(bytes))],
                ),
            ]);
        let conn = conns.get_mut(&leaders[&p]).context("a leader's connection")?;
        // A new topic's partitions may not be led yet (Kafka): retried a while.
        let mut tries = 0;
        loop {
            let r: ProduceResponse = conn.call(ApiKey::Produce, 9, &req).await?;
            let code = r
                .responses
                .iter()
                .flat_map(|t| t.partition_responses.iter())
                .map(|pr| pr.error_code)
                .find(|c| *c != 0);
            match code {
                None => break,
                // NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION
                Some(6 | 5 | 3) if tries < 100 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Some(c) => bail!("{}: producing to {topic}-{p}", error_name(c)),
            }
        }
        sent += n;
        p = (p + 1) % i32::try_from(partitions)?;
    }
    Ok(leaders)
}

/// `share.auto.offset.reset=earliest` for `group`.
async fn set_earliest(c: &mut Conn, group: &str) -> anyhow::Result<()> {
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(32)
            .with_resource_name(s(group))
            .with_configs(vec![
                AlterableConfig::default()
                    .with_name(s("share.auto.offset.reset"))
                    .with_config_operation(0)
                    .with_value(Some(s("earliest"))),
            ]),
    ]);
    let r: IncrementalAlterConfigsResponse =
        c.call(ApiKey::IncrementalAlterConfigs, 1, &req).await?;
    for x in r.responses {
        if x.error_code != 0 {
            bail!("{}: setting group {group}'s configs", error_name(x.error_code));
        }
    }
    Ok(())
}

struct Member {
    kafka: String,
    group: String,
    topic: String,
    topic_id: Uuid,
    leaders: BTreeMap<i32, String>,
    max_records: i32,
    want: u64,
    acked: Arc<AtomicU64>,
    redelivered: Arc<AtomicU64>,
}

impl Member {
    /// Joins, then fetches from every leader in turn, acknowledging what the last fetch from
    /// it acquired, until every record of the run is acknowledged; then leaves.
    async fn run(self) -> anyhow::Result<()> {
        let id = Uuid::new_v4().to_string();
        // A coordinator may not be ready at first (Kafka creates its offsets topic on demand,
        // then loads it): found again until it answers the join.
        let mut joined = None;
        for _ in 0..300 {
            if let Ok(mut c) = coordinator(&self.kafka, &self.group).await
                && let Ok(epoch) = self.heartbeat(&mut c, &id, 0).await
            {
                joined = Some((c, epoch));
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (mut coord, mut epoch) =
            joined.context("UNAVAILABLE: the share group's coordinator")?;
        let mut last_beat = Instant::now();
        // One share session per leader: its connection, epoch, partitions, pending acks.
        let mut sessions = Vec::new();
        for addr in self.leaders.values().collect::<BTreeSet<_>>() {
            let parts: Vec<i32> =
                self.leaders.iter().filter(|(_, a)| *a == addr).map(|(p, _)| *p).collect();
            sessions.push((
                Conn::connect(addr).await?,
                0i32,
                parts,
                BTreeMap::<i32, Vec<(i64, i64)>>::new(),
            ));
        }
        let deadline = Instant::now() + Duration::from_secs(600);
        while self.acked.load(Ordering::Relaxed) < self.want {
            if Instant::now() > deadline {
                bail!(
                    "DEADLINE_EXCEEDED: {} of {} records acknowledged",
                    self.acked.load(Ordering::Relaxed),
                    self.want
                );
            }
            if last_beat.elapsed() > Duration::from_secs(2) {
                epoch = self.heartbeat(&mut coord, &id, epoch).await?;
                last_beat = Instant::now();
            }
            for (conn, session, parts, pending) in sessions.iter_mut() {
                self.fetch(conn, &id, session, parts, pending).await?;
            }
        }
        // Leave: close each session with what it still owes, and the group.
        for (mut conn, session, parts, mut pending) in sessions {
            if !pending.is_empty() {
                let mut closing = -1;
                let _ = self
                    .fetch_at(&mut conn, &id, &mut closing, &parts, &mut pending, session)
                    .await;
            }
        }
        let _ = self.heartbeat(&mut coord, &id, -1).await;
        Ok(())
    }

    async fn heartbeat(&self, c: &mut Conn, id: &str, epoch: i32) -> anyhow::Result<i32> {
        let req = ShareGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(&self.group)))
            .with_member_id(s(id))
            .with_member_epoch(epoch)
            .with_subscribed_topic_names((epoch == 0).then(|| vec![TopicName(s(&self.topic))]));
        let r: ShareGroupHeartbeatResponse = c.call(ApiKey::ShareGroupHeartbeat, 1, &req).await?;
        if r.error_code != 0 {
            bail!("{}: share group heartbeat: {:?}", error_name(r.error_code), r.error_message);
        }
        Ok(r.member_epoch)
    }

    /// One ShareFetch of the session's next epoch.
    async fn fetch(
        &self,
        c: &mut Conn,
        id: &str,
        session: &mut i32,
        parts: &[i32],
        pending: &mut BTreeMap<i32, Vec<(i64, i64)>>,
    ) -> anyhow::Result<()> {
        let epoch = *session;
        self.fetch_at(c, id, session, parts, pending, epoch).await
    }

    /// A ShareFetch at `epoch` (0 opens the session, -1 closes it), carrying the pending
    /// acknowledgements (ACCEPT); what it acquires is pending next.
    async fn fetch_at(
        &self,
        c: &mut Conn,
        id: &str,
        session: &mut i32,
        parts: &[i32],
        pending: &mut BTreeMap<i32, Vec<(i64, i64)>>,
        epoch: i32,
    ) -> anyhow::Result<()> {
        let sending: BTreeMap<i32, Vec<(i64, i64)>> = std::mem::take(pending);
        let partitions: Vec<FetchPartition> = parts
            .iter()
            .map(|p| {
                FetchPartition::default().with_partition_index(*p).with_acknowledgement_batches(
                    sending
                        .get(p)
                        .into_iter()
                        .flatten()
                        .map(|(f, l)| {
                            AcknowledgementBatch::default()
                                .with_first_offset(*f)
                                .with_last_offset(*l)
                                .with_acknowledge_types(vec![1])
                        })
                        .collect(),
                )
            })
            .collect();
        let req = ShareFetchRequest::default()
            .with_group_id(Some(GroupId(s(&self.group))))
            .with_member_id(Some(s(id)))
            .with_share_session_epoch(if *session == 0 && epoch != -1 { 0 } else { epoch })
            .with_max_wait_ms(if epoch == -1 { 0 } else { 200 })
            .with_min_bytes(1)
            .with_max_bytes(8 << 20)
            .with_max_records(self.max_records)
            .with_batch_size(self.max_records)
            .with_topics(vec![FetchTopic::default().with_topic_id(self.topic_id).with_partitions(
                // The opening request names the partitions; acks wait for the next.
                if *session == 0 {
                    parts
                        .iter()
                        .map(|p| FetchPartition::default().with_partition_index(*p))
                        .collect()
                } else {
                    partitions
                },
            )]);
        // An opening request carries no acknowledgements: they wait for the next.
        let sending = if *session == 0 && epoch != -1 {
            *pending = sending;
            BTreeMap::new()
        } else {
            sending
        };
        let r: ShareFetchResponse = c.call(ApiKey::ShareFetch, 1, &req).await?;
        if r.error_code != 0 {
            bail!("{}: share fetch: {:?}", error_name(r.error_code), r.error_message);
        }
        if epoch != -1 {
            *session = if *session == i32::MAX { 1 } else { *session + 1 };
        }
        for t in r.responses {
            for p in t.partitions {
                if p.acknowledge_error_code == 0 {
                    let n: i64 = sending
                        .get(&p.partition_index)
                        .into_iter()
                        .flatten()
                        .map(|(f, l)| l - f + 1)
                        .sum();
                    self.acked.fetch_add(u64::try_from(n).unwrap_or(0), Ordering::Relaxed);
                }
                for a in &p.acquired_records {
                    if a.delivery_count > 1 {
                        self.redelivered.fetch_add(
                            u64::try_from(a.last_offset - a.first_offset + 1).unwrap_or(0),
                            Ordering::Relaxed,
                        );
                    }
                    pending
                        .entry(p.partition_index)
                        .or_default()
                        .push((a.first_offset, a.last_offset));
                }
            }
        }
        Ok(())
    }
}
