//! `lakelog bench catchup`: seed 001's promise that catch-up reads do not load the ingest path,
//! measured in one run against a running cluster (`make cluster`: writers and readers with
//! Kafka listeners). Ingest (the SDK producer, acked) runs alone for `--duration`, then again
//! while a Kafka consumer group of `--members` reads a backlog from its start with `client.rack`
//! = the readers' zone, so the writers send it to the readers (KIP-392); the report is the
//! ingest ratio (with / alone; seed 001 wants at least 0.9), the group's read rate, and the
//! Kafka fetch bytes the writers and the readers served (their `/metrics`).
//!
//! The group's members are KIP-848 consumers written on [`crate::kafka_client`]: they heartbeat
//! to the coordinator for their partitions, fetch each from its leader until told of a
//! preferred read replica, then from that replica; they commit their positions with every
//! heartbeat and before they give a partition up, and start a partition they are given at the
//! group's committed offset. A run's group has a fresh name, so it starts at offset 0.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, FetchRequest,
    FetchResponse, GroupId, MetadataRequest, MetadataResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, TopicName,
    metadata_request::MetadataRequestTopic,
    offset_fetch_request::{OffsetFetchRequestGroup, OffsetFetchRequestTopics},
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use crate::kafka_client::{Conn, coordinator, error_name, s};

/// Options of `lakelog bench catchup`.
#[derive(clap::Args, Debug)]
pub struct CatchupArgs {
    /// The writers' Kafka listeners (any one will do; comma-separated).
    #[arg(long, env = "LAKELOG_KAFKA", default_value = "127.0.0.1:9092")]
    kafka: String,
    /// The catch-up group's `client.rack`: the readers' zone.
    #[arg(long, default_value = "*")]
    rack: String,
    /// Each ingest phase runs this long.
    #[arg(long, default_value = "10s")]
    duration: config::Duration,
    /// Records written to the backlog topic before the phases.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    backlog: u64,
    /// Bytes per record.
    #[arg(long, default_value = "1KiB")]
    record_size: config::ByteSize,
    /// Members of the catch-up group.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    members: u32,
    /// Partitions of each topic the bench creates (`bench-ingest`, `bench-backlog`).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1000))]
    partitions: u32,
    /// The writers' `/metrics` addresses (host:port, comma-separated).
    #[arg(long, default_value = "127.0.0.1:9540,127.0.0.1:9550")]
    writer_metrics: String,
    /// The readers' `/metrics` addresses.
    #[arg(long, default_value = "127.0.0.1:9542,127.0.0.1:9552")]
    reader_metrics: String,
    /// Print one JSON object on the last stdout line.
    #[arg(long)]
    json: bool,
}

const INGEST: &str = "bench-ingest";
const BACKLOG: &str = "bench-backlog";

pub async fn run(args: CatchupArgs, endpoint: &str) -> anyhow::Result<()> {
    let size = usize::try_from(args.record_size.0).context("--record-size")?;
    if size == 0 || size > 1 << 20 {
        bail!("INVALID_ARGUMENT: --record-size must be between 1 byte and 1MiB");
    }
    let catalog = client::CatalogClient::connect(endpoint).await?;
    for topic in [INGEST, BACKLOG] {
        match catalog.create(topic, args.partitions, None, None).await {
            Ok(_) => {}
            Err(e) if e.code == client::Code::AlreadyExists => {}
            Err(e) => return Err(e.into()),
        }
    }
    let value = Bytes::from(vec![b'x'; size]);
    let backlog = produce(endpoint, BACKLOG, &value, Phase::Records(args.backlog)).await?;
    eprintln!("backlog: {} records in {BACKLOG} ({:.1} MB/s)", args.backlog, backlog.mb_per_s());
    let alone = produce(endpoint, INGEST, &value, Phase::For(args.duration.0)).await?;
    eprintln!("ingest alone: {:.2} MB/s", alone.mb_per_s());

    let writers_before = fetch_bytes(&args.writer_metrics).await?;
    let readers_before = fetch_bytes(&args.reader_metrics).await?;
    let group = format!("lakelog-bench-catchup-{}", uuid::Uuid::new_v4().simple());
    let (stop, stopped) = watch::channel(false);
    let read = Arc::new(Counts::default());
    let mut members = tokio::task::JoinSet::new();
    let owned = Arc::new(parking_lot::Mutex::new(BTreeMap::<usize, usize>::new()));
    for i in 0..args.members as usize {
        let m = Member {
            bootstrap: args.kafka.clone(),
            group: group.clone(),
            rack: args.rack.clone(),
            read: read.clone(),
            owned: owned.clone(),
            index: i,
        };
        let stopped = stopped.clone();
        members.spawn(async move { m.run(stopped).await });
    }
    // Ingest starts once the group owns every partition of the backlog.
    let formed = Instant::now();
    loop {
        let total: usize = owned.lock().values().sum();
        if total == args.partitions as usize {
            break;
        }
        if let Some(done) = members.try_join_next() {
            done.context("a group member")??;
            bail!("INTERNAL: a group member stopped before the group formed");
        }
        if formed.elapsed() > Duration::from_secs(60) {
            bail!(
                "UNAVAILABLE: the catch-up group owned {total} of {} partitions after 60 s",
                args.partitions
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("catch-up group formed in {:.1}s", formed.elapsed().as_secs_f64());
    let reading = Instant::now();
    let during = produce(endpoint, INGEST, &value, Phase::For(args.duration.0)).await?;
    let _ = stop.send(true);
    while let Some(done) = members.join_next().await {
        done.context("a group member")??;
    }
    let read_secs = reading.elapsed().as_secs_f64();
    // The roles export their counters every second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let writers_after = fetch_bytes(&args.writer_metrics).await?;
    let readers_after = fetch_bytes(&args.reader_metrics).await?;
    let ratio = if alone.mb_per_s() > 0.0 { during.mb_per_s() / alone.mb_per_s() } else { 0.0 };
    let (read_bytes, read_records) =
        (read.bytes.load(Ordering::Relaxed), read.records.load(Ordering::Relaxed));
    let catch_up_mb_s = read_bytes as f64 / read_secs / 1e6;
    let from_writers = writers_after.saturating_sub(writers_before);
    let from_readers = readers_after.saturating_sub(readers_before);
    let report = crate::bench::Report {
        rows: vec![
            ("ingest alone".into(), format!("{:.2} MB/s", alone.mb_per_s())),
            ("ingest with catch-up".into(), format!("{:.2} MB/s", during.mb_per_s())),
            ("ingest ratio".into(), format!("{ratio:.3} (seed 001: at least 0.9)")),
            (
                "catch-up read".into(),
                format!(
                    "{read_records} records, {catch_up_mb_s:.2} MB/s ({} members)",
                    args.members
                ),
            ),
            ("fetch bytes from writers".into(), from_writers.to_string()),
            ("fetch bytes from readers".into(), from_readers.to_string()),
        ],
        json: vec![
            ("record_size".into(), size.to_string()),
            ("backlog_records".into(), args.backlog.to_string()),
            ("ingest_alone_mb_per_s".into(), format!("{:.3}", alone.mb_per_s())),
            ("ingest_with_catch_up_mb_per_s".into(), format!("{:.3}", during.mb_per_s())),
            ("ingest_ratio".into(), format!("{ratio:.3}")),
            ("catch_up_records_read".into(), read_records.to_string()),
            ("catch_up_mb_per_s".into(), format!("{catch_up_mb_s:.3}")),
            ("kafka_fetch_bytes_writers".into(), from_writers.to_string()),
            ("kafka_fetch_bytes_readers".into(), from_readers.to_string()),
            ("members".into(), args.members.to_string()),
            ("duration_s".into(), format!("{:.2}", args.duration.0.as_secs_f64())),
        ],
    };
    report.print(args.json);
    Ok(())
}

enum Phase {
    Records(u64),
    For(Duration),
}

struct Produced {
    bytes: u64,
    took: Duration,
}

impl Produced {
    fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / self.took.as_secs_f64().max(1e-9) / 1e6
    }
}

/// Produces `value` records to `topic` with the SDK producer until the phase ends; every
/// record acked (a failed one fails the bench).
async fn produce(
    endpoint: &str,
    topic: &str,
    value: &Bytes,
    phase: Phase,
) -> anyhow::Result<Produced> {
    let producer = client::Producer::new(
        client::ClientConfig::new(endpoint),
        topic,
        client::ProducerConfig::default(),
    )
    .await?;
    let start = Instant::now();
    let (acks, mut waiting) = (Arc::new(AtomicU64::new(0)), tokio::task::JoinSet::new());
    let mut sent = 0u64;
    loop {
        let more = match phase {
            Phase::Records(n) => sent < n,
            Phase::For(d) => start.elapsed() < d,
        };
        if !more {
            break;
        }
        let delivery = producer.send(client::batch::Record::value(value.clone())).await?;
        sent += 1;
        let acks = acks.clone();
        waiting.spawn(async move {
            delivery.wait().await?;
            acks.fetch_add(1, Ordering::Relaxed);
            Ok::<_, client::ClientError>(())
        });
        // Bounded memory: reap what is done as it goes.
        while let Some(done) = waiting.try_join_next() {
            done.context("a delivery")??;
        }
    }
    producer.close().await;
    while let Some(done) = waiting.join_next().await {
        done.context("a delivery")??;
    }
    let took = start.elapsed();
    Ok(Produced { bytes: acks.load(Ordering::Relaxed) * value.len() as u64, took })
}

/// The sum of `*_kafka_fetch_bytes_total` over the `/metrics` of `addrs`.
async fn fetch_bytes(addrs: &str) -> anyhow::Result<u64> {
    let mut total = 0u64;
    for addr in addrs.split(',').filter(|a| !a.is_empty()) {
        let body = http_get(addr, "/metrics").await?;
        for line in body.lines().filter(|l| !l.starts_with('#') && l.contains("kafka_fetch_bytes"))
        {
            if let Some(v) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
                total += v as u64;
            }
        }
    }
    Ok(total)
}

/// A bounded HTTP/1.0 GET.
async fn http_get(addr: &str, path: &str) -> anyhow::Result<String> {
    let io = async {
        let mut c = tokio::net::TcpStream::connect(addr).await?;
        c.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).await?;
        let mut body = Vec::new();
        c.take(16 << 20).read_to_end(&mut body).await?;
        Ok::<_, std::io::Error>(body)
    };
    let body = tokio::time::timeout(Duration::from_secs(10), io)
        .await
        .map_err(|_| anyhow::anyhow!("UNAVAILABLE: {addr}{path} not answered in 10 s"))?
        .with_context(|| {
            format!("UNAVAILABLE: {addr}{path} (--writer-metrics/--reader-metrics)")
        })?;
    let text = String::from_utf8_lossy(&body).into_owned();
    match text.split_once("\r\n\r\n") {
        Some((head, rest)) if head.starts_with("HTTP/1.") && head.contains(" 200") => {
            Ok(rest.to_owned())
        }
        _ => {
            bail!("UNAVAILABLE: {addr}{path} answered {}", text.lines().next().unwrap_or("nothing"))
        }
    }
}

#[derive(Default)]
struct Counts {
    bytes: AtomicU64,
    records: AtomicU64,
}

/// One KIP-848 member of the catch-up group.
struct Member {
    bootstrap: String,
    group: String,
    rack: String,
    read: Arc<Counts>,
    /// Partitions each member owns now (for the bench to see the group formed).
    owned: Arc<parking_lot::Mutex<BTreeMap<usize, usize>>>,
    index: usize,
}

/// The backlog topic as Metadata names it: its id, each partition's leader, the brokers.
struct Topic {
    id: uuid::Uuid,
    leaders: Vec<i32>,
    brokers: HashMap<i32, String>,
}

async fn describe(bootstrap: &str) -> anyhow::Result<Topic> {
    let mut c = Conn::connect(bootstrap.split(',').next().unwrap_or(bootstrap)).await?;
    let md: MetadataResponse = c
        .call(
            ApiKey::Metadata,
            12,
            &MetadataRequest::default().with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(TopicName(s(BACKLOG)))),
            ])),
        )
        .await?;
    let t = md.topics.first().context("INTERNAL: Metadata answered no topic")?;
    if t.error_code != 0 {
        bail!("{}: topic {BACKLOG}", error_name(t.error_code));
    }
    let mut leaders = vec![-1; t.partitions.len()];
    for p in &t.partitions {
        if let Some(l) = usize::try_from(p.partition_index).ok().and_then(|i| leaders.get_mut(i)) {
            *l = p.leader_id.0;
        }
    }
    Ok(Topic {
        id: t.topic_id,
        leaders,
        brokers: md
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port)))
            .collect(),
    })
}

impl Member {
    async fn run(self, stopped: watch::Receiver<bool>) -> anyhow::Result<()> {
        let topic = describe(&self.bootstrap).await?;
        let first = self.bootstrap.split(',').next().unwrap_or(&self.bootstrap).to_owned();
        let mut coord = coordinator(&first, &self.group).await?;
        let member_id = uuid::Uuid::new_v4().to_string();
        let topic_id = topic.id;
        let (assigned_tx, assigned) = watch::channel(BTreeSet::<i32>::new());
        // What the fetch loop's current round fetches: a revoked partition is committed once
        // no round that fetches it is under way.
        let (fetching_tx, mut fetching_rx) = watch::channel(BTreeSet::<i32>::new());
        let positions = Arc::new(parking_lot::Mutex::new(BTreeMap::<i32, i64>::new()));
        let fetching = {
            let (read, positions, stopped) =
                (self.read.clone(), positions.clone(), stopped.clone());
            let rack = self.rack.clone();
            tokio::spawn(fetch_loop(topic, rack, assigned, fetching_tx, positions, read, stopped))
        };
        let mut epoch = 0;
        let mut owned: BTreeSet<i32> = BTreeSet::new();
        let mut stop = stopped.clone();
        let beat = |epoch: i32, owned: &BTreeSet<i32>, id: uuid::Uuid| {
            let mut r = ConsumerGroupHeartbeatRequest::default()
                .with_group_id(GroupId(s(&self.group)))
                .with_member_id(s(&member_id))
                .with_member_epoch(epoch)
                .with_rack_id(Some(s(&self.rack)))
                .with_rebalance_timeout_ms(-1)
                .with_topic_partitions(Some(vec![
                    TopicPartitions::default()
                        .with_topic_id(id)
                        .with_partitions(owned.iter().copied().collect()),
                ]));
            if epoch == 0 {
                r = r
                    .with_rebalance_timeout_ms(30_000)
                    .with_subscribed_topic_names(Some(vec![TopicName(s(BACKLOG))]))
                    .with_topic_partitions(Some(Vec::new()));
            }
            r
        };
        loop {
            let r: ConsumerGroupHeartbeatResponse = coord
                .call(ApiKey::ConsumerGroupHeartbeat, 1, &beat(epoch, &owned, topic_id))
                .await?;
            match r.error_code {
                0 => {}
                // Fenced or forgotten (a new coordinator): drop everything and rejoin.
                25 | 110 => {
                    epoch = 0;
                    owned.clear();
                    let _ = assigned_tx.send(owned.clone());
                    positions.lock().clear();
                    continue;
                }
                code => bail!("{}: heartbeat of group {}", error_name(code), self.group),
            }
            epoch = r.member_epoch;
            let interval =
                Duration::from_millis(u64::try_from(r.heartbeat_interval_ms).unwrap_or(500))
                    .min(Duration::from_secs(1));
            match r.assignment {
                Some(a) => {
                    let next: BTreeSet<i32> = a
                        .topic_partitions
                        .iter()
                        .filter(|t| t.topic_id == topic_id)
                        .flat_map(|t| t.partitions.iter().copied())
                        .collect();
                    // Revoked: stop fetching them, commit where they are, then forget them.
                    if owned.difference(&next).next().is_some() {
                        let keep: BTreeSet<i32> = next.intersection(&owned).copied().collect();
                        let _ = assigned_tx.send(keep.clone());
                        let quiet = fetching_rx.wait_for(|f| f.is_subset(&keep));
                        let _ = tokio::time::timeout(Duration::from_secs(30), quiet).await;
                        self.commit(&mut coord, &member_id, epoch, &positions).await?;
                        positions.lock().retain(|p, _| next.contains(p));
                    }
                    // Assigned: start where the group committed (its previous owner committed
                    // before it let go), else at 0.
                    let added: Vec<i32> = next.difference(&owned).copied().collect();
                    if !added.is_empty() {
                        let at = self.committed(&mut coord, &member_id, epoch, &added).await?;
                        let mut pos = positions.lock();
                        for p in added {
                            pos.insert(p, at.get(&p).copied().unwrap_or(0));
                        }
                    }
                    owned = next;
                    let _ = assigned_tx.send(owned.clone());
                    self.owned.lock().insert(self.index, owned.len());
                }
                None => self.commit(&mut coord, &member_id, epoch, &positions).await?,
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stop.changed() => break,
            }
        }
        fetching.await.context("the fetch loop")??;
        self.commit(&mut coord, &member_id, epoch, &positions).await?;
        // Leave the group.
        let _: ConsumerGroupHeartbeatResponse =
            coord.call(ApiKey::ConsumerGroupHeartbeat, 1, &beat(-1, &owned, topic_id)).await?;
        Ok(())
    }

    /// The group's committed offsets of `partitions` (OffsetFetch v9, at the member's epoch).
    async fn committed(
        &self,
        coord: &mut Conn,
        member_id: &str,
        epoch: i32,
        partitions: &[i32],
    ) -> anyhow::Result<BTreeMap<i32, i64>> {
        let req = OffsetFetchRequest::default().with_groups(vec![
            OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(s(&self.group)))
                .with_member_id(Some(s(member_id)))
                .with_member_epoch(epoch)
                .with_topics(Some(vec![
                    OffsetFetchRequestTopics::default()
                        .with_name(TopicName(s(BACKLOG)))
                        .with_partition_indexes(partitions.to_vec()),
                ])),
        ]);
        let r: OffsetFetchResponse = coord.call(ApiKey::OffsetFetch, 9, &req).await?;
        let g = r.groups.first().context("INTERNAL: OffsetFetch answered no group")?;
        if g.error_code != 0 {
            bail!("{}: offsets of group {}", error_name(g.error_code), self.group);
        }
        Ok(g.topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .filter(|p| p.error_code == 0 && p.committed_offset >= 0)
            .map(|p| (p.partition_index, p.committed_offset))
            .collect())
    }

    /// OffsetCommit v9 of the positions read, at the member's epoch.
    async fn commit(
        &self,
        coord: &mut Conn,
        member_id: &str,
        epoch: i32,
        positions: &parking_lot::Mutex<BTreeMap<i32, i64>>,
    ) -> anyhow::Result<()> {
        let at: Vec<(i32, i64)> = positions.lock().iter().map(|(p, o)| (*p, *o)).collect();
        if at.is_empty() || epoch <= 0 {
            return Ok(());
        }
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(s(&self.group)))
            .with_member_id(s(member_id))
            .with_generation_id_or_member_epoch(epoch)
            .with_topics(vec![
                OffsetCommitRequestTopic::default()
                    .with_name(TopicName(s(BACKLOG)))
                    .with_partitions(
                        at.iter()
                            .map(|(p, o)| {
                                OffsetCommitRequestPartition::default()
                                    .with_partition_index(*p)
                                    .with_committed_offset(*o)
                                    .with_committed_leader_epoch(-1)
                            })
                            .collect(),
                    ),
            ]);
        let r: OffsetCommitResponse = coord.call(ApiKey::OffsetCommit, 9, &req).await?;
        for t in &r.topics {
            for p in &t.partitions {
                // A partition just revoked, or an epoch that moved since: the next commit.
                if !matches!(p.error_code, 0 | 113 | 25) {
                    bail!(
                        "{}: committing partition {}",
                        error_name(p.error_code),
                        p.partition_index
                    );
                }
            }
        }
        Ok(())
    }
}

/// Fetches the assigned partitions until stopped: from each one's leader, or from the
/// preferred read replica the leader named.
async fn fetch_loop(
    topic: Topic,
    rack: String,
    mut assigned: watch::Receiver<BTreeSet<i32>>,
    fetching: watch::Sender<BTreeSet<i32>>,
    positions: Arc<parking_lot::Mutex<BTreeMap<i32, i64>>>,
    read: Arc<Counts>,
    stopped: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let mut conns: HashMap<i32, Conn> = HashMap::new();
    let mut replica: HashMap<i32, i32> = HashMap::new();
    while !*stopped.borrow() {
        let now: BTreeSet<i32> = assigned.borrow_and_update().clone();
        fetching.send_replace(now.clone());
        if now.is_empty() {
            let _ = tokio::time::timeout(Duration::from_millis(200), assigned.changed()).await;
            continue;
        }
        // Positions are set by the member when it is assigned a partition.
        let mut by_node: BTreeMap<i32, Vec<(i32, i64)>> = BTreeMap::new();
        for p in &now {
            let Some(at) = positions.lock().get(p).copied() else {
                continue;
            };
            let node = replica.get(p).copied().unwrap_or_else(|| {
                usize::try_from(*p).ok().and_then(|i| topic.leaders.get(i)).copied().unwrap_or(-1)
            });
            by_node.entry(node).or_default().push((*p, at));
        }
        for (node, parts) in by_node {
            let addr = topic.brokers.get(&node).with_context(|| format!("broker {node}"))?;
            let c = match conns.entry(node) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(Conn::connect(addr).await?)
                }
            };
            let req = FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(200)
                .with_min_bytes(1)
                .with_max_bytes(32 << 20)
                .with_rack_id(s(&rack))
                .with_topics(vec![
                    FetchTopic::default().with_topic(TopicName(s(BACKLOG))).with_partitions(
                        parts
                            .iter()
                            .map(|(p, at)| {
                                FetchPartition::default()
                                    .with_partition(*p)
                                    .with_fetch_offset(*at)
                                    .with_partition_max_bytes(8 << 20)
                            })
                            .collect(),
                    ),
                ]);
            let r: FetchResponse = c.call(ApiKey::Fetch, 12, &req).await?;
            for t in &r.responses {
                for p in &t.partitions {
                    match p.error_code {
                        0 => {}
                        // Not here (an owner moved): ask the leader again.
                        6 => {
                            replica.remove(&p.partition_index);
                            continue;
                        }
                        code => {
                            bail!("{}: fetching partition {}", error_name(code), p.partition_index)
                        }
                    }
                    if p.preferred_read_replica.0 >= 0 {
                        replica.insert(p.partition_index, p.preferred_read_replica.0);
                        continue;
                    }
                    let Some(records) = &p.records else { continue };
                    let (mut at, mut rest) = (None, &records[..]);
                    while rest.len() >= recordbatch::HEADER_LEN {
                        let h = recordbatch::BatchHeader::parse(rest)?;
                        let len = usize::try_from(h.batch_length)
                            .unwrap_or(usize::MAX)
                            .saturating_add(12);
                        if len > rest.len() {
                            break;
                        }
                        read.bytes.fetch_add(len as u64, Ordering::Relaxed);
                        read.records.fetch_add(
                            u64::try_from(h.record_count).unwrap_or(0),
                            Ordering::Relaxed,
                        );
                        at = Some(h.base_offset + i64::from(h.last_offset_delta) + 1);
                        rest = &rest[len..];
                    }
                    if let Some(next) = at {
                        let mut pos = positions.lock();
                        if let Some(o) = pos.get_mut(&p.partition_index) {
                            *o = (*o).max(next);
                        }
                    }
                }
            }
        }
    }
    Ok(())
}
