//! The roles' Kafka brokers (ARCHITECTURE §11): what the Kafka front end asks of a writer or
//! a reader, answered from the catalog, the logs and the live members. Topics are streams;
//! partition p is the stream's log p; a partition's leader is the writer the routing function
//! picks for the client's zone, named by its node id; brokers are the live members that serve
//! Kafka. A writer's broker takes produce (with Kafka's idempotence, carried across owner
//! changes) for the partitions it owns; a reader's is read-only: it fetches any partition
//! from object storage and answers produce NOT_LEADER_OR_FOLLOWER.
//!
//! Depends on libs only: the writer and reader roles both build theirs from here.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

// Tokio's clock (the std one outside tests): virtual under the simulation's paused runtime.

use catalog::{Catalog, CatalogError, StreamConfig, StreamInfo, Target};
use kafka::{BrokerNode, PartitionInfo, Produced, Refused, TopicInfo, code};
use logstore::{LogError, LogId, LogReader, LogStorage};

mod cluster;
mod idempotence;
mod listener;
mod offsets;
mod partitions;
pub mod producers;
pub mod shares;
mod topics;
mod transactions;

pub use idempotence::{CHECKPOINT_BATCHES, CHECKPOINT_IDLE, CHECKPOINT_INTERVAL};
pub(crate) use idempotence::{PRODUCER_ID_BLOCK, SlotProducers};
pub use listener::{kafka_config, listen};

/// Per (log, slot), the lock its transactional batches and markers are admitted under.
type TxnOrder = std::collections::HashMap<(LogId, String), Arc<tokio::sync::Mutex<()>>>;

/// The Kafka broker of one writer (or standalone), or of one reader.
#[derive(Clone, Debug)]
pub struct LogBroker {
    catalog: Catalog,
    cluster: String,
    /// Reads of the logs (a writer's own reader, with its tail cache).
    reader: LogReader,
    /// A writer's log storage; `None` for a reader.
    storage: Option<LogStorage>,
    /// Idempotent producers' state per (log, slot) this writer serves.
    producers: Arc<Mutex<BTreeMap<(LogId, String), SlotProducers>>>,
    /// Producer ids this writer may hand out (a block from the metadata store).
    producer_ids: Arc<tokio::sync::Mutex<std::ops::Range<i64>>>,
    /// This broker's Kafka node id (-1 until [`with_node_id`](Self::with_node_id)).
    node_id: i32,
    /// Record bytes answered to Fetch requests so far.
    fetched: Arc<std::sync::atomic::AtomicU64>,
    /// Bytes of the log read to catch producer state up (a metric, and tests').
    caught_up: Arc<std::sync::atomic::AtomicU64>,
    /// Every group's configs, followed from the first time one is asked for.
    group_configs: Arc<tokio::sync::OnceCell<offsets::FollowedConfigs>>,
    /// Per (log, slot): transactional batches and markers are checked and admitted one at a
    /// time, so a marker is never overtaken by a batch verified before it.
    txn_order: Arc<Mutex<TxnOrder>>,
    /// Share-partition cursors this writer owns ([`shares`]).
    share_handles: shares::Handles,
}

impl LogBroker {
    /// A writer's broker.
    pub fn writer(catalog: Catalog, cluster: &str, storage: LogStorage) -> Self {
        let reader = storage.reader().clone();
        LogBroker::new(catalog, cluster, reader, Some(storage))
    }

    /// A reader's broker: read-only.
    pub fn reader(catalog: Catalog, cluster: &str, reader: LogReader) -> Self {
        LogBroker::new(catalog, cluster, reader, None)
    }

    fn new(
        catalog: Catalog,
        cluster: &str,
        reader: LogReader,
        storage: Option<LogStorage>,
    ) -> Self {
        LogBroker {
            catalog,
            cluster: cluster.to_owned(),
            reader,
            storage,
            producers: Default::default(),
            producer_ids: Arc::new(tokio::sync::Mutex::new(0..0)),
            node_id: -1,
            fetched: Default::default(),
            caught_up: Default::default(),
            group_configs: Default::default(),
            txn_order: Default::default(),
            share_handles: Default::default(),
        }
    }

    /// Bytes of the log read so far to catch producer state up with other owner slots.
    pub fn caught_up_bytes(&self) -> u64 {
        self.caught_up.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Record bytes this broker has answered Fetch requests with: a role's metric.
    pub fn fetched_bytes(&self) -> u64 {
        self.fetched.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Each partition this writer serves (a slot of): (topic, partition, high watermark, last
    /// stable offset), as its commits last saw them; no metadata request. Partitions of topics
    /// the followed catalog does not name yet are left out; a reader's broker serves none.
    pub fn partition_offsets(&self) -> Vec<(String, u32, u64, u64)> {
        let Some(storage) = &self.storage else { return Vec::new() };
        let names = self.catalog.followed_partitions();
        let mut out: Vec<(String, u32, u64, u64)> = storage
            .served_offsets()
            .into_iter()
            .filter_map(|(log, hw, lso)| {
                names.get(&log).map(|(topic, p)| (topic.clone(), *p, hw, lso))
            })
            .collect();
        out.sort();
        out
    }

    /// This broker's Kafka node id (the one its member record carries).
    pub fn with_node_id(mut self, node_id: i32) -> Self {
        self.node_id = node_id;
        self
    }

    /// The logs of a topic's partitions, as one read of the stream gives them.
    async fn partition_logs(&self, topic: &str) -> Result<Vec<LogId>, CatalogError> {
        Ok(self.catalog.get(topic).await?.partitions)
    }

    /// The first record at or after `entry` whose timestamp is at least `t` (`exact`: equal
    /// to it), as (offset, timestamp), reading at most [`SCAN_BYTES`] of batches; the entry's
    /// own offset and timestamp when none of them says (batches that are not Kafka's, or a
    /// record beyond the bound).
    async fn record_with_timestamp(
        &self,
        log: LogId,
        entry: &logstore::LogEntryHeader,
        t: i64,
        exact: bool,
    ) -> Result<(i64, i64), Refused> {
        let fallback = Ok((to_i64(entry.offset)?, entry.timestamp));
        let entries = self
            .reader
            .read_entries(log, entry.offset, MAX_FETCH_RECORDS, SCAN_BYTES)
            .await
            .map_err(refused)?;
        for e in entries {
            let Ok(h) = recordbatch::BatchHeader::parse(&e.payload) else { continue };
            if h.max_timestamp < t {
                continue;
            }
            let Ok((_, records)) = recordbatch::decode(&e.payload) else { continue };
            let hit = records
                .iter()
                .find(|r| if exact { r.timestamp_ms == t } else { r.timestamp_ms >= t });
            if let Some(r) = hit {
                return Ok((to_i64(e.header.offset + u64::from(r.offset_delta))?, r.timestamp_ms));
            }
        }
        fallback
    }

    /// The log of a topic's partition, and the owner slot a client in `zone` appends in, if
    /// this writer owns it; else NOT_LEADER_OR_FOLLOWER naming the owner.
    async fn led(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
    ) -> Result<(logstore::LogId, String), Refused> {
        let (log, slot, _) = self.led_with_config(topic, partition, zone).await?;
        Ok((log, slot))
    }

    /// [`led`](Self::led), with the stream's configs as read for the route.
    async fn led_with_config(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
    ) -> Result<(logstore::LogId, String, StreamConfig), Refused> {
        let unknown = || {
            Refused::new(
                code::UNKNOWN_TOPIC_OR_PARTITION,
                format!("topic {topic} has no partition {partition}"),
            )
        };
        let p = u32::try_from(partition).map_err(|_| unknown())?;
        let route = match self.catalog.route_to(topic, Target::Partition(p), zone).await {
            Ok(r) => r,
            Err(CatalogError::NotFound(_)) | Err(CatalogError::InvalidArgument(_)) => {
                return Err(unknown());
            }
            Err(e) => return Err(Refused::new(code::NOT_LEADER_OR_FOLLOWER, e.to_string())),
        };
        match &route.owner {
            Some(o) if self.storage.as_ref().is_some_and(|s| o.id == s.config().writer_id) => {
                Ok((route.log, route.slot, route.config))
            }
            Some(o) => Err(Refused {
                code: code::NOT_LEADER_OR_FOLLOWER,
                message: format!("partition {partition} of {topic} is led by {}", o.id),
                leader: (o.node_id >= 0).then_some(o.node_id),
            }),
            None => Err(Refused::new(code::NOT_LEADER_OR_FOLLOWER, "no writer lives")),
        }
    }

    /// The log of a partition this broker serves reads of: a writer those it leads, a reader
    /// any.
    async fn readable(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
    ) -> Result<LogId, Refused> {
        if self.storage.is_some() {
            return Ok(self.led(topic, partition, zone).await?.0);
        }
        let unknown = || {
            Refused::new(
                code::UNKNOWN_TOPIC_OR_PARTITION,
                format!("topic {topic} has no partition {partition}"),
            )
        };
        let p = u32::try_from(partition).map_err(|_| unknown())?;
        match self.catalog.route(topic, p).await {
            Ok(log) => Ok(log),
            Err(CatalogError::NotFound(_)) | Err(CatalogError::InvalidArgument(_)) => {
                Err(unknown())
            }
            Err(e) => Err(Refused::new(code::NOT_LEADER_OR_FOLLOWER, e.to_string())),
        }
    }

    /// A writer's log storage; a reader takes no writes.
    fn store(&self) -> Result<&LogStorage, Refused> {
        self.storage
            .as_ref()
            .ok_or_else(|| Refused::new(code::NOT_LEADER_OR_FOLLOWER, "a reader takes no writes"))
    }

    /// The live readers that serve Kafka (none when they cannot be read: they are optional).
    async fn kafka_readers(&self) -> Vec<routing::Member> {
        match self.catalog.members("reader").await {
            Ok(m) => m.into_iter().filter(serves_kafka).collect(),
            Err(e) => {
                tracing::debug!(error = %e, "Kafka: readers unreadable");
                Vec::new()
            }
        }
    }

    /// A reader of `rack` to send a consumer at `offset` to instead (KIP-392): only from a
    /// writer, only for a consumer more than [`CATCH_UP_RECORDS`] behind the end, so the
    /// writers keep the tail (their tail cache) and readers take the catch-up reads (seed 001:
    /// batch reads do not load ingest). Partitions spread over the zone's readers.
    async fn preferred_reader(
        &self,
        log: LogId,
        partition: i32,
        rack: &str,
        behind: u64,
    ) -> Option<i32> {
        if self.storage.is_none() || behind <= CATCH_UP_RECORDS {
            return None;
        }
        let readers: Vec<routing::Member> =
            self.kafka_readers().await.into_iter().filter(|m| m.zone == rack).collect();
        let p = u32::try_from(partition).ok()?;
        routing::choose_owner(&readers, &format!("kafka-reads/{log}"), p, None).map(|m| m.node_id)
    }

    async fn writers(&self) -> Result<Vec<routing::Member>, Refused> {
        self.catalog.members("writer").await.map_err(Refused::server)
    }

    /// A stream as a topic, each partition led by its owner for `zone`, with the readers
    /// (node ids) as its other replicas.
    fn topic(
        s: &StreamInfo,
        writers: &[routing::Member],
        readers: &[i32],
        zone: Option<&str>,
    ) -> TopicInfo {
        let partitions = (0..s.partitions.len() as u32)
            .map(|p| PartitionInfo {
                index: p as i32,
                leader: routing::choose_owner(writers, &s.identity, p, zone)
                    .filter(|m| serves_kafka(m))
                    .map(|m| m.node_id),
                followers: readers.to_vec(),
            })
            .collect();
        TopicInfo {
            name: s.name.clone(),
            error: code::NONE,
            id: uuid::Uuid::parse_str(&s.identity).unwrap_or_default(),
            partitions,
            internal: false,
        }
    }

    /// `__consumer_offsets` as Metadata shows it ([`kafka::internal`]): partition p led by the
    /// writer the owner function picks for it, as a coordinator is picked; its id the same
    /// from every broker of the cluster.
    fn offsets_topic(&self, writers: &[routing::Member]) -> TopicInfo {
        let name = kafka::internal::OFFSETS_TOPIC;
        let writers: Vec<routing::Member> =
            writers.iter().filter(|m| serves_kafka(m)).cloned().collect();
        let partitions = (0..kafka::internal::OFFSETS_PARTITIONS)
            .map(|p| PartitionInfo {
                index: p as i32,
                leader: routing::choose_owner(&writers, name, p, None).map(|m| m.node_id),
                followers: Vec::new(),
            })
            .collect();
        let seed = format!("{}/{name}", self.cluster);
        let half = |salt: u8| {
            seed.bytes().fold(0xcbf2_9ce4_8422_2325_u64 ^ u64::from(salt), |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            })
        };
        let id = uuid::Uuid::from_u64_pair(half(1), half(2));
        TopicInfo { name: name.to_owned(), error: code::NONE, id, partitions, internal: true }
    }

    /// One named stream; created with `create` partitions when it does not exist.
    async fn named(&self, name: &str, create: Option<u32>) -> Result<StreamInfo, i16> {
        let failed = |e: CatalogError| match e {
            CatalogError::NotFound(_) => code::UNKNOWN_TOPIC_OR_PARTITION,
            CatalogError::InvalidArgument(_) => code::INVALID_TOPIC_EXCEPTION,
            other => {
                tracing::warn!(topic = name, error = %other, "Kafka Metadata: topic unreadable");
                code::UNKNOWN_SERVER_ERROR
            }
        };
        match (self.catalog.get(name).await, create) {
            (Ok(s), _) => Ok(s),
            (Err(CatalogError::NotFound(_)), Some(n)) => {
                match self.catalog.create(name, n, StreamConfig::default()).await {
                    Ok(s) => {
                        tracing::info!(topic = name, partitions = n, "Kafka: topic auto-created");
                        Ok(s)
                    }
                    // Another broker created it first.
                    Err(CatalogError::AlreadyExists(_)) => {
                        self.catalog.get(name).await.map_err(failed)
                    }
                    Err(e) => Err(failed(e)),
                }
            }
            (Err(e), _) => Err(failed(e)),
        }
    }
}

/// Whether a live member serves Kafka: it has a Kafka address and a node id.
pub(crate) fn serves_kafka(m: &routing::Member) -> bool {
    !m.kafka.is_empty() && m.node_id >= 0
}

/// A member as a Kafka broker, if it serves Kafka at an address that parses.
pub(crate) fn node_of(m: routing::Member, read_only: bool) -> Option<BrokerNode> {
    if !serves_kafka(&m) {
        return None;
    }
    let (host, port) = m.kafka.rsplit_once(':')?;
    Some(BrokerNode {
        node_id: m.node_id,
        host: host.trim_matches(['[', ']']).to_owned(),
        port: port.parse().ok()?,
        rack: (m.zone != "*").then_some(m.zone),
        read_only,
    })
}

/// A batch's append conditions: its entry carries the batch's largest record timestamp
/// (CreateTime, as Kafka's time index and retention use it), or the writer's clock when the
/// batch has none; a batch too far ahead of `now` is INVALID_TIMESTAMP, as in Kafka. The
/// batch's CRC, checked against its bytes by the front end (or computed again by [`stamp`]),
/// is what its entry's checksum is derived from.
pub(crate) fn conditions(
    h: &recordbatch::BatchHeader,
    now: i64,
    tenure: Option<i64>,
    config: &StreamConfig,
) -> Result<logstore::Conditions, Refused> {
    let known_crc = Some(logstore::KnownCrc { from: recordbatch::CRC_FROM, crc: h.crc });
    // A LogAppendTime batch was stamped with `now` ([`stamp`]); its entry has that time.
    if h.log_append_time() {
        let timestamp = Some(now);
        return Ok(logstore::Conditions { tenure, timestamp, known_crc, ..Default::default() });
    }
    let ts = (h.max_timestamp >= 0).then_some(h.max_timestamp);
    let (before, after) = config.timestamp_bounds_ms();
    // Kafka checks each record; the batch's first and largest timestamps stand for them here.
    let first = (h.base_timestamp >= 0).then_some(h.base_timestamp);
    let refuse = |ts: i64, what: &str, bound: i64| {
        Err(Refused::new(
            code::INVALID_TIMESTAMP,
            format!("timestamp {ts} is more than {bound} ms {what} the broker's clock ({now})"),
        ))
    };
    if let Some(ts) = ts
        && ts > now.saturating_add(after)
    {
        return refuse(ts, "ahead of", after);
    }
    if let Some(first) = first
        && first < now.saturating_sub(before)
    {
        return refuse(first, "behind", before);
    }
    Ok(logstore::Conditions { tenure, timestamp: ts, known_crc, ..Default::default() })
}

/// For a LogAppendTime topic (`message.timestamp.type`), `batch` stamped with the writer's
/// time `now` (a copy: the batch as sent is shared) and its header; else both as they are.
pub(crate) fn stamp(
    batch: bytes::Bytes,
    header: &recordbatch::BatchHeader,
    config: &StreamConfig,
    now: i64,
) -> Result<(bytes::Bytes, recordbatch::BatchHeader, i64), Refused> {
    if !config.log_append_time() {
        return Ok((batch, *header, -1));
    }
    let mut b = batch.to_vec();
    recordbatch::stamp_log_append_time(&mut b, now)
        .map_err(|e| Refused::new(code::CORRUPT_MESSAGE, e.to_string()))?;
    let h = recordbatch::BatchHeader::parse(&b)
        .map_err(|e| Refused::new(code::CORRUPT_MESSAGE, e.to_string()))?;
    Ok((bytes::Bytes::from(b), h, now))
}

/// A commit as the Kafka front end awaits it.
pub(crate) fn commit(committing: logstore::Committing, log_append_time_ms: i64) -> kafka::Commit {
    Box::pin(async move {
        let h = committing.await.map_err(refused)?;
        Ok(Produced { base_offset: to_i64(h.offset)?, log_append_time_ms })
    })
}

/// [`admin_refused`] where an invalid argument is the topic's name or a setting.
pub(crate) fn topic_refused(e: CatalogError) -> Refused {
    admin_refused(e, code::INVALID_TOPIC_EXCEPTION)
}

/// A catalog error as Kafka's code for an admin request; `invalid` is what an invalid
/// argument means for the request (a bad name or setting, or a bad partition count).
pub(crate) fn admin_refused(e: CatalogError, invalid: i16) -> Refused {
    let code = match &e {
        CatalogError::NotFound(_) => code::UNKNOWN_TOPIC_OR_PARTITION,
        CatalogError::AlreadyExists(_) => code::TOPIC_ALREADY_EXISTS,
        CatalogError::InvalidArgument(_) => invalid,
        _ => code::UNKNOWN_SERVER_ERROR,
    };
    Refused::new(code, e.to_string())
}

/// The cursor property holding a committed offset's leader epoch, and the label holding its
/// metadata string.
pub(crate) const LEADER_EPOCH: &str = "kafka.leader_epoch";
pub(crate) const METADATA: &str = "kafka.metadata";

/// How far behind the end (records) a consumer of a rack with a reader is sent to it.
pub const CATCH_UP_RECORDS: u64 = 10_000;

/// Bytes of batches a ListOffsets by timestamp reads past the entry the index finds.
const SCAN_BYTES: u64 = 8 << 20;

/// Records one fetch reads at most (its bytes bound it first).
pub(crate) const MAX_FETCH_RECORDS: u64 = 100_000;

pub(crate) fn to_i64(n: u64) -> Result<i64, Refused> {
    i64::try_from(n).map_err(|_| Refused::new(code::UNKNOWN_SERVER_ERROR, "offset past i64"))
}

/// A log-storage error as Kafka's code for a produce or fetch: retryable ones as the codes
/// clients retry on (after a metadata refresh for leadership).
pub fn refused(e: LogError) -> Refused {
    let code = match &e {
        LogError::NotFound(_) => code::UNKNOWN_TOPIC_OR_PARTITION,
        LogError::Fenced { .. } | LogError::NotOwner { .. } | LogError::ReadOnly(_) => {
            code::NOT_LEADER_OR_FOLLOWER
        }
        LogError::OffsetOutOfRange { .. } => code::OFFSET_OUT_OF_RANGE,
        LogError::InvalidArgument(m) if m.contains("maximum entry size") => code::MESSAGE_TOO_LARGE,
        LogError::InvalidArgument(_) => code::INVALID_RECORD,
        LogError::Unavailable { outcome_unknown: true, .. } => code::REQUEST_TIMED_OUT,
        LogError::Unavailable { .. } => code::NOT_LEADER_OR_FOLLOWER,
        // No room (buffer, or a full metadata store at commit): definitely not applied, so
        // not REQUEST_TIMED_OUT, which the idempotent window keeps as in doubt.
        LogError::ResourceExhausted(_) => code::KAFKA_STORAGE_ERROR,
        _ => code::UNKNOWN_SERVER_ERROR,
    };
    Refused::new(code, e.to_string())
}

#[cfg(test)]
mod tests {
    use crate::producers::{Check, Producers, SharedCommit};
    use futures::FutureExt;

    use super::*;

    fn commit(e: LogError) -> SharedCommit {
        futures::future::ready(Err(refused(e))).boxed().shared()
    }

    /// A commit refused definitely for room (etcd's NOSPACE) leaves the idempotent window, so
    /// the client's retry of the batch is appended once room is back; an unknown outcome stays
    /// in it (the retry is answered as the first attempt was, never appended again).
    #[tokio::test]
    async fn a_batch_whose_commit_found_no_room_is_appended_when_retried() {
        let mut p = Producers::default();
        p.admitted(
            1,
            0,
            0,
            4,
            commit(LogError::ResourceExhausted("metadata store out of space".into())),
        );
        assert!(matches!(p.check(1, 0, 0, 4), Check::Append), "{:?}", p.check(1, 0, 0, 4));
        let unknown = LogError::Unavailable { message: "no answer".into(), outcome_unknown: true };
        p.admitted(2, 0, 0, 4, commit(unknown));
        assert!(matches!(p.check(2, 0, 0, 4), Check::Duplicate(_)), "{:?}", p.check(2, 0, 0, 4));
    }
}
