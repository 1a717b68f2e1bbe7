//! The Kafka protocol front end (ARCHITECTURE §11): unmodified Kafka clients talk to Lakelog.
//! [`frame`] reads bounded frames; [`serve`] runs the listener: each connection's requests are
//! admitted one at a time in request order (as a Kafka broker processes them; a produce's
//! batches are queued for commit then) and answered in that order, with up to
//! [`KafkaConfig::max_in_flight`] of them awaiting their answers (commits, long polls) at
//! once; [`api`] decodes each request with the `kafka-protocol` codec (every wire count
//! bounded by the bytes present), answers it through a [`Broker`], and encodes the response in
//! the version asked for.
//!
//! The roles implement [`Broker`]: what the front end needs of a writer or a reader, in four
//! capabilities ([`Cluster`], [`Partitions`], [`Topics`], [`GroupOffsets`]). Topics are streams, partition p is the stream's log p, a partition's leader is the
//! owner the routing function picks for the client's zone (`zone_id=` in `client.id`).
//!
//! Served: the APIs of [`registry::APIS`], one [`api::Handler`] each — produce (idempotent: the
//! brokers' idempotence), fetch, the admin and config APIs, consumer groups, classic and KIP-848
//! ([`groups`]), transactions ([`transactions`]) and share groups ([`share`]).
//!
//! Depends on the codec, `recordbatch` and `security` (TLS, SASL, ACLs); never on a storage
//! crate, the metadata store or the object store (the roles adapt their stores to
//! [`Broker`]; `scripts/check-deps.py` checks it).

pub mod acl_api;
mod admin;
pub mod api;
pub mod authz;
pub mod budget;
pub mod configs;
mod consumer_api;
mod fetch;
pub mod fetch_session;
pub mod frame;
mod group_api;

/// The classic group APIs as their handlers run them (the coordinator check, then the group's
/// state), without the wire or authorization: for the simulation's group members.
pub mod coordination {
    pub use crate::group_api::{heartbeat, join_group, offset_commit, offset_fetch, sync_group};
    /// A transaction coordinator's steps (InitProducerId with a transactional id,
    /// AddPartitionsToTxn and AddOffsetsToTxn, EndTxn, and its periodic look for transactions
    /// past their timeout), as its handlers run them.
    pub use crate::txn_api::coordinator as transactions;
}
pub mod groups;
mod leader_epoch;
mod metadata;
mod produce;
mod scram_api;
pub(crate) mod txn_api;

pub mod registry;
mod server;
pub mod session;
pub mod share;
mod share_api;
pub mod splice;
pub mod transactions;

pub use server::{KafkaConfig, serve};
pub use streamconfig::{GroupConfig, StreamConfig};

/// Kafka's error codes this front end answers with: the protocol crate's `ResponseError`
/// numbers (none typed here), as the `i16` a response's `error_code` holds.
pub mod code {
    use kafka_protocol::ResponseError;

    pub const NONE: i16 = 0;
    pub const OFFSET_OUT_OF_RANGE: i16 = ResponseError::OffsetOutOfRange.code();
    pub const CORRUPT_MESSAGE: i16 = ResponseError::CorruptMessage.code();
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = ResponseError::UnknownTopicOrPartition.code();
    pub const LEADER_NOT_AVAILABLE: i16 = ResponseError::LeaderNotAvailable.code();
    pub const NOT_LEADER_OR_FOLLOWER: i16 = ResponseError::NotLeaderOrFollower.code();
    pub const REQUEST_TIMED_OUT: i16 = ResponseError::RequestTimedOut.code();
    pub const MESSAGE_TOO_LARGE: i16 = ResponseError::MessageTooLarge.code();
    pub const INVALID_TOPIC_EXCEPTION: i16 = ResponseError::InvalidTopicException.code();
    pub const TOPIC_ALREADY_EXISTS: i16 = ResponseError::TopicAlreadyExists.code();
    pub const INVALID_PARTITIONS: i16 = ResponseError::InvalidPartitions.code();
    pub const INVALID_REPLICATION_FACTOR: i16 = ResponseError::InvalidReplicationFactor.code();
    pub const INVALID_REPLICA_ASSIGNMENT: i16 = ResponseError::InvalidReplicaAssignment.code();
    pub const INVALID_CONFIG: i16 = ResponseError::InvalidConfig.code();
    pub const INVALID_REQUIRED_ACKS: i16 = ResponseError::InvalidRequiredAcks.code();
    pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = ResponseError::OutOfOrderSequenceNumber.code();
    /// Retryable after a metadata refresh (Java's `KafkaStorageException`): storage refused
    /// the write definitely, nothing of it applied.
    pub const KAFKA_STORAGE_ERROR: i16 = ResponseError::KafkaStorageError.code();
    pub const INVALID_PRODUCER_EPOCH: i16 = ResponseError::InvalidProducerEpoch.code();
    pub const COORDINATOR_NOT_AVAILABLE: i16 = ResponseError::CoordinatorNotAvailable.code();
    pub const UNSUPPORTED_VERSION: i16 = ResponseError::UnsupportedVersion.code();
    pub const INVALID_REQUEST: i16 = ResponseError::InvalidRequest.code();
    pub const UNSUPPORTED_FOR_MESSAGE_FORMAT: i16 =
        ResponseError::UnsupportedForMessageFormat.code();
    pub const INVALID_RECORD: i16 = ResponseError::InvalidRecord.code();
    pub const UNKNOWN_SERVER_ERROR: i16 = ResponseError::UnknownServerError.code();
    pub const INVALID_TIMESTAMP: i16 = ResponseError::InvalidTimestamp.code();
    pub const POLICY_VIOLATION: i16 = ResponseError::PolicyViolation.code();
    pub const UNKNOWN_TOPIC_ID: i16 = ResponseError::UnknownTopicId.code();
}

/// A live broker: a member that serves Kafka.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerNode {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    /// Its zone; `None` for no zone.
    pub rack: Option<String>,
    /// A read-only broker (a reader): never named controller.
    pub read_only: bool,
}

/// The controller Metadata and DescribeCluster name: the first broker that takes writes.
pub(crate) fn controller(brokers: &[BrokerNode]) -> i32 {
    brokers.iter().find(|b| !b.read_only).map_or(-1, |b| b.node_id)
}

/// A partition of a topic, and who leads it for the asking client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionInfo {
    pub index: i32,
    /// The leader's node id; `None` while no live broker owns it.
    pub leader: Option<i32>,
    /// Brokers that serve reads of it besides its leader (readers): listed as replicas, so a
    /// client takes one as its preferred read replica (KIP-392).
    pub followers: Vec<i32>,
}

/// A topic as Metadata describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    /// Kafka's error code for the topic (NONE, UNKNOWN_TOPIC_OR_PARTITION,
    /// INVALID_TOPIC_EXCEPTION, …).
    pub error: i16,
    /// The stream's identity: a re-created topic has a new one.
    pub id: uuid::Uuid,
    pub partitions: Vec<PartitionInfo>,
    /// One of Kafka's internal topics ([`internal`]), not a stream.
    pub internal: bool,
}

impl TopicInfo {
    /// A topic that could not be described.
    pub fn failed(name: &str, error: i16) -> TopicInfo {
        TopicInfo {
            name: name.to_owned(),
            error,
            id: uuid::Uuid::nil(),
            partitions: Vec::new(),
            internal: false,
        }
    }
}

/// Kafka's internal topics. Lakelog keeps groups' offsets and state in the metadata store, not
/// in a topic, but clients expect `__consumer_offsets` in Metadata (listed, `is_internal`), so
/// it is shown there, with Kafka's 50 partitions, each led by a coordinating writer; it holds
/// no records, takes none (INVALID_TOPIC_EXCEPTION, as Kafka answers a client's produce to
/// it), and its name cannot be a stream's.
pub mod internal {
    /// The consumer groups' topic.
    pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
    /// Its partitions (Kafka's `offsets.topic.num.partitions`).
    pub const OFFSETS_PARTITIONS: u32 = 50;
    /// Kafka's internal topics: the groups', transactions' and share groups' state.
    pub const TOPICS: [&str; 3] = [OFFSETS_TOPIC, "__transaction_state", "__share_group_state"];

    /// Whether `topic` is one of Kafka's internal topics.
    pub fn is_internal(topic: &str) -> bool {
        TOPICS.contains(&topic)
    }

    /// The internal topic `topic` refused for a client's write or trim.
    pub fn refused(topic: &str) -> crate::Refused {
        crate::Refused::new(
            crate::code::INVALID_TOPIC_EXCEPTION,
            format!("Cannot append to internal topic {topic}"),
        )
    }
}

/// A failure of the store behind the broker: the request is answered with
/// UNKNOWN_SERVER_ERROR (or the API's nearest retryable code), never a closed connection.
/// An admitted batch's commit.
pub type Commit = futures::future::BoxFuture<'static, Result<Produced, Refused>>;

/// A batch appended: where it landed, and when for a LogAppendTime topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Produced {
    pub base_offset: i64,
    /// The time the writer stamped the batch with (`message.timestamp.type=LogAppendTime`);
    /// -1 when it keeps its producer's timestamps.
    pub log_append_time_ms: i64,
}

impl Produced {
    /// A batch at `base_offset` that keeps its producer's timestamps.
    pub fn at(base_offset: i64) -> Self {
        Produced { base_offset, log_append_time_ms: -1 }
    }
}

/// A partition's request refused: Kafka's error code, a message, and the partition's leader
/// when the refusal is NOT_LEADER_OR_FOLLOWER and the leader is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub code: i16,
    pub message: String,
    pub leader: Option<i32>,
}

impl Refused {
    pub fn new(code: i16, message: impl Into<String>) -> Self {
        Refused { code, message: message.into(), leader: None }
    }

    /// What the role could not read or write (its stores): UNKNOWN_SERVER_ERROR, the
    /// handlers answering with their API's own code where Kafka has one.
    pub fn server(message: impl std::fmt::Display) -> Self {
        Refused::new(code::UNKNOWN_SERVER_ERROR, message.to_string())
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "error {}: {}", self.code, self.message)
    }
}

impl std::error::Error for Refused {}

/// A partition's records from an offset: whole batches (the first may start before it), each
/// with the base offset it is sent at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fetched {
    pub high_watermark: i64,
    /// The last stable offset: below it every transaction has ended (the high watermark when
    /// none is open).
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// Read committed: the aborted transactions the records sent overlap, each its producer id
    /// and first offset (Kafka's `aborted_transactions`); empty otherwise.
    pub aborted: Vec<(i64, i64)>,
    /// Whole record batches as stored, in offset order; none at the high watermark.
    pub records: Vec<StoredBatch>,
    /// Fetch from this broker instead (KIP-392; then no records): a reader of the client's
    /// rack, for a consumer far behind the tail.
    pub preferred_read_replica: Option<i32>,
}

/// Which records a read may see (Kafka's `isolation_level`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Isolation {
    /// Every record below the high watermark.
    #[default]
    ReadUncommitted,
    /// Records below the last stable offset, with the aborted transactions among them.
    ReadCommitted,
}

impl Isolation {
    /// Kafka's `isolation_level`: 1 is read committed, anything else read uncommitted.
    pub fn from_kafka(level: i8) -> Isolation {
        if level == 1 { Isolation::ReadCommitted } else { Isolation::ReadUncommitted }
    }
}

/// One record batch as the log stores it, and the offset it is sent at: it goes out as stored
/// (by reference, not copied) but for its first 8 bytes, its base offset, which its CRC does
/// not cover.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoredBatch {
    pub base_offset: i64,
    pub bytes: bytes::Bytes,
}

impl StoredBatch {
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The batch as it goes out, its base offset written in (a copy: for checks and tests;
    /// the Fetch path sends it without one).
    pub fn to_wire(&self) -> bytes::Bytes {
        let mut out = bytes::BytesMut::with_capacity(self.bytes.len().max(8));
        self.put_wire(&mut out);
        out.freeze()
    }

    /// The batch as it goes out, copied into `out`.
    pub(crate) fn put_wire(&self, out: &mut bytes::BytesMut) {
        out.extend_from_slice(&self.base_offset.to_be_bytes());
        out.extend_from_slice(self.bytes.get(8..).unwrap_or_default());
    }
}

/// A committed offset to store (OffsetCommit).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetCommit {
    pub topic: String,
    pub partition: i32,
    /// The next offset the group will consume.
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

/// A producer a partition's owner knows (DescribeProducers): its id and epoch, the last
/// sequence it wrote there, and the first offset of its transaction open there (-1: none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveProducer {
    pub producer_id: i64,
    pub epoch: i16,
    pub last_sequence: i32,
    pub txn_start_offset: i64,
}

/// A committed offset as OffsetFetch answers it: offset -1 when the group has none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    pub error: i16,
}

/// The cluster as a client sees it: its id, the live brokers, topics and their leaders, and
/// group coordinators.
#[async_trait::async_trait]
pub trait Cluster: Send + Sync + 'static {
    /// Kafka's cluster id.
    fn cluster_id(&self) -> String;

    /// The live brokers, sorted by node id.
    async fn brokers(&self) -> Result<Vec<BrokerNode>, Refused>;

    /// The topics named (every topic when `None`), each partition's leader for a client in
    /// `zone`. With `create` set, a topic that does not exist is created with that many
    /// partitions first (Kafka's `auto.create.topics.enable`).
    async fn topics(
        &self,
        names: Option<&[String]>,
        zone: Option<&str>,
        create: Option<u32>,
    ) -> Result<Vec<TopicInfo>, Refused>;

    /// This broker's node id.
    fn node_id(&self) -> i32;

    /// The broker that coordinates group `key`, if any lives: the same answer from every
    /// broker (ARCHITECTURE §11: the owner function over live writers, on the group id).
    async fn coordinator(&self, key: &str) -> Result<Option<BrokerNode>, Refused>;

    /// [`Self::coordinator`], with the revision of the member view it was chosen from (a
    /// coordinator takes a group under that view: [`GroupOffsets::take_group`]).
    async fn coordinator_view(&self, key: &str) -> Result<(Option<BrokerNode>, i64), Refused>;
}

/// A partition's records: produce (idempotence included), fetch and its long poll, offsets by
/// timestamp, trims.
#[async_trait::async_trait]
pub trait Partitions: Send + Sync + 'static {
    /// Admits one record batch (as sent; `header` is its header, validated by the front end)
    /// to a partition this broker leads for a client in `zone`: returns once it is queued
    /// behind every batch admitted before it (the front end admits a connection's batches in
    /// request order), with the future of its commit, which resolves once it is durable.
    ///
    /// A transactional batch (of `transactional_id`'s producer) is taken only while the
    /// partition is in that producer's ongoing transaction, as its coordinator stored it
    /// (KIP-890's verification); its commit opens the transaction in the log.
    async fn produce(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
        batch: bytes::Bytes,
        header: &recordbatch::BatchHeader,
        txn: Option<TxnProduce<'_>>,
    ) -> Result<Commit, Refused>;

    /// DescribeProducers: the producers the owner of `topic`'s `partition` knows
    /// (NOT_LEADER_OR_FOLLOWER from a broker that does not lead it).
    async fn producers(&self, topic: &str, partition: i32) -> Result<Vec<ActiveProducer>, Refused> {
        let _ = (topic, partition);
        Err(Refused::new(code::NOT_LEADER_OR_FOLLOWER, "no producers known here"))
    }

    /// WriteTxnMarkers: appends `marker` to a partition this broker leads, ending its
    /// producer's transaction there (its records readable by read_committed consumers, or
    /// named aborted). PRODUCER_FENCED for a marker older than the producer's epoch.
    async fn write_marker(
        &self,
        topic: &str,
        partition: i32,
        marker: transactions::Marker,
    ) -> Result<Commit, Refused>;

    /// Batches of a partition this broker serves from `offset`, about `max_bytes` of them (at
    /// least one whole batch when any is there; none for `max_bytes` 0: only the offsets),
    /// below the high watermark, or the last stable offset when `isolation` is read committed
    /// (with the aborted transactions they overlap). OFFSET_OUT_OF_RANGE outside [start, high
    /// watermark]. `rack` is the client's (Fetch v11+), for a preferred read replica.
    #[allow(clippy::too_many_arguments)]
    async fn fetch(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
        rack: Option<&str>,
        offset: i64,
        max_bytes: usize,
        isolation: Isolation,
    ) -> Result<Fetched, Refused>;

    /// Resolves once any of `targets` (topic, partition, offset) has a record at or past its
    /// offset, or after `max_wait`; registered before it looks, so no commit is missed.
    async fn wait_for(&self, targets: Vec<(String, i32, i64)>, max_wait: std::time::Duration);

    /// ListOffsets: the offset for `timestamp` (-2: the log start, -1: the high watermark,
    /// or the last stable offset when `isolation` is read committed; otherwise the first entry
    /// whose timestamp is at or after it, or the high watermark), and the timestamp it answers
    /// with (-1 for -2 and -1).
    async fn list_offset(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
        timestamp: i64,
        isolation: Isolation,
    ) -> Result<(i64, i64), Refused>;

    /// DeleteRecords: makes the records below `offset` (-1: the high watermark) of a partition
    /// this broker leads unreadable; the partition's start after.
    async fn delete_records(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
        offset: i64,
    ) -> Result<i64, Refused>;

    /// InitProducerId for an idempotent (not transactional) producer: a new producer id at
    /// epoch 0, or, given the producer's current id and epoch (KIP-360), the same id at the
    /// next epoch. Kafka's error code otherwise.
    async fn init_producer_id(&self, current: Option<(i64, i16)>) -> Result<(i64, i16), Refused>;
}

/// Topics administered: created, deleted, grown, configured.
#[async_trait::async_trait]
pub trait Topics: Send + Sync + 'static {
    /// Creates a topic (a stream) of `partitions` partitions; with `validate_only`, only
    /// checks that it could. Its id on success.
    async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        config: StreamConfig,
        validate_only: bool,
    ) -> Result<uuid::Uuid, Refused>;

    /// Deletes a topic; its id.
    async fn delete_topic(&self, name: &str) -> Result<uuid::Uuid, Refused>;

    /// Grows a topic to `count` partitions (never shrinks); with `validate_only`, only checks.
    async fn create_partitions(
        &self,
        name: &str,
        count: u32,
        validate_only: bool,
    ) -> Result<(), Refused>;

    /// A topic's configs (DescribeConfigs).
    async fn topic_config(&self, name: &str) -> Result<StreamConfig, Refused>;

    /// Replaces a topic's configs; with `validate_only`, only checks the topic exists.
    async fn set_topic_config(
        &self,
        name: &str,
        config: StreamConfig,
        validate_only: bool,
    ) -> Result<(), Refused>;
}

/// A group coordinator's tenure: every write it makes for the group compares it, so once
/// another coordinator takes the group the old one writes nothing (ARCHITECTURE §11 "Groups").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tenure(pub i64);

/// A group as a coordinator takes it ([`GroupOffsets::take_group`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taken {
    pub tenure: Tenure,
    /// The group's membership as last stored (`None`: none stored, or `kept`).
    pub state: Option<bytes::Bytes>,
    /// The group was still this coordinator's under the tenure it held: what it holds in
    /// memory is current.
    pub kept: bool,
}

/// Consumer groups' durable part: who coordinates each (a tenure per take), their stored
/// membership, and their committed offsets (their live membership is the front end's own,
/// in [`groups`]). Every write is under the coordinator's tenure: NOT_COORDINATOR once
/// another coordinator has taken the group.
#[async_trait::async_trait]
pub trait GroupOffsets: Send + Sync + 'static {
    /// Becomes `group`'s coordinator, chosen from the member view at revision `view`: from
    /// now on, writes under an earlier tenure fail. With `held` (the tenure this coordinator
    /// holds it under) still current, nothing is written (`kept`). NOT_COORDINATOR when a
    /// coordinator chosen from a newer view holds it (this broker's view trails).
    async fn take_group(
        &self,
        group: &str,
        view: i64,
        held: Option<Tenure>,
    ) -> Result<Taken, Refused>;

    /// Stores a group's membership under `tenure`.
    async fn store_group(
        &self,
        group: &str,
        tenure: Tenure,
        state: bytes::Bytes,
    ) -> Result<(), Refused>;

    /// Stores a group's committed offsets under `tenure`; each item's outcome, in order.
    async fn commit_offsets(
        &self,
        group: &str,
        tenure: Tenure,
        offsets: Vec<OffsetCommit>,
    ) -> Vec<Result<(), Refused>>;

    /// A group's committed offsets for the partitions named (topic, partitions), or every
    /// partition it has one for when `None`; a group-wide error code otherwise.
    async fn committed_offsets(
        &self,
        group: &str,
        partitions: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<Vec<CommittedOffset>, Refused>;

    /// Every group with a stored state (a group that committed offsets has one), with that
    /// state: one read, whatever the number of partitions.
    async fn stored_groups(&self) -> Result<Vec<(String, bytes::Bytes)>, Refused>;

    /// Deletes a group: its committed offsets, its stored state and its coordinator record
    /// (DeleteGroups, expiry); whether it had any of them stored.
    async fn delete_group(&self, group: &str, tenure: Tenure) -> Result<bool, Refused>;

    /// Deletes the group's coordinator record if it is still `tenure`'s and the group has no
    /// stored state: what taking a group that never formed (to describe it, or fetch its
    /// offsets) left behind, once let go.
    async fn release_group(&self, group: &str, tenure: Tenure) -> Result<(), Refused>;

    /// Group `group`'s configs (DescribeConfigs on a GROUP resource; a consumer group's
    /// timeouts at each of its heartbeats): what this broker follows in memory, no read of
    /// the store once it follows them. Any group may have configs, formed or not.
    async fn group_config(&self, group: &str) -> Result<GroupConfig, Refused>;

    /// The groups with configs set, by name (ListConfigResources).
    async fn configured_groups(&self) -> Result<Vec<String>, Refused>;

    /// Replaces a group's configs (back to the defaults when empty); with `validate_only`,
    /// only checks it could. Once done, this broker's [`Self::group_config`] answers them.
    async fn set_group_config(
        &self,
        group: &str,
        config: GroupConfig,
        validate_only: bool,
    ) -> Result<(), Refused>;

    /// Deletes a group's committed offset on one partition (OffsetDelete).
    async fn delete_offset(
        &self,
        group: &str,
        tenure: Tenure,
        topic: &str,
        partition: i32,
    ) -> Result<(), Refused>;
}

/// Transactions' durable part (ARCHITECTURE §12): each transactional id's state, moved only by
/// compare-and-set, and the markers its coordinator asks partition owners to write.
#[async_trait::async_trait]
pub trait TxnStates: Send + Sync + 'static {
    /// A transactional id's stored state and its revision (none yet: `None`).
    async fn txn_state(&self, id: &str) -> Result<Option<(transactions::StoredTxn, i64)>, Refused>;

    /// Stores `state` if the stored one is still at `revision` (0: none is stored); `false`
    /// when another write came first (nothing is written then).
    async fn put_txn_state(
        &self,
        id: &str,
        state: &transactions::StoredTxn,
        revision: i64,
    ) -> Result<bool, Refused>;

    /// Removes a transactional id's state if the stored one is still at `revision` (Kafka's
    /// `transactional.id.expiration.ms`); `false` when another write came first.
    async fn remove_txn_state(&self, id: &str, revision: i64) -> Result<bool, Refused>;

    /// Every transactional id's state (the coordinator's periodic look for transactions past
    /// their timeout, or left half ended by another coordinator).
    async fn txn_states(&self) -> Result<Vec<(String, transactions::StoredTxn)>, Refused>;

    /// Asks the owner of each partition of transaction `t` (as its coordinator prepared it) to
    /// write `marker`, ending `id`'s transaction there; each stays pending until its owner has
    /// written it. Asked only while `id`'s stored state is still `t` (`false`: it has moved
    /// on, and nothing was asked): a late ask never ends a later transaction.
    async fn send_markers(
        &self,
        id: &str,
        marker: transactions::Marker,
        t: &transactions::StoredTxn,
    ) -> Result<bool, Refused>;

    /// How many of producer `producer_id`'s markers to `partitions` are still pending.
    async fn markers_pending(
        &self,
        producer_id: i64,
        partitions: &[transactions::TxnPartition],
    ) -> Result<usize, Refused>;

    /// Stages offsets transaction `id` commits for `group` (TxnOffsetCommit) under the
    /// group's `tenure`, as producer `producer` at its epoch, each written only while the
    /// transaction's state is still at `revision`; each item's outcome.
    /// [`Staged::TxnMoved`] when the state moved first (nothing of it written then).
    async fn stage_offsets(
        &self,
        group: &str,
        tenure: Tenure,
        txn: (&str, i64),
        producer: (i64, i16),
        offsets: Vec<OffsetCommit>,
    ) -> Staged;

    /// Ends producer `marker.producer_id`'s staged offsets of `group`: a commit makes them the
    /// group's committed offsets, an abort drops them; done only while transaction `id`'s
    /// state is still at `revision` (the prepared state the marker is for).
    async fn end_offsets(
        &self,
        id: &str,
        revision: i64,
        group: &str,
        marker: transactions::Marker,
    ) -> Result<(), Refused>;

    /// The partitions of `group` with offsets staged by a transaction not ended yet
    /// (OffsetFetch's `require_stable` answers them UNSTABLE_OFFSET_COMMIT).
    async fn unstable_offsets(&self, group: &str) -> Result<Vec<(String, i32)>, Refused>;

    /// Now, in ms since the Unix epoch, by the clock transactions are timed by (the role's).
    fn now_ms(&self) -> i64 {
        transactions::system_now_ms()
    }
}

/// What [`TxnStates::stage_offsets`] did.
#[derive(Debug)]
pub enum Staged {
    /// Each item's outcome.
    Done(Vec<Result<(), Refused>>),
    /// The transaction's state moved since it was read: nothing was written.
    TxnMoved,
}

/// Transactions V2: partition `p` joins transactional id `id`'s transaction (of producer
/// `producer`, beginning it if none is under way), by the coordinator's compare-and-set; done by
/// the partition's owner on a Produce v12. The stored state after.
pub async fn add_to_transaction(
    states: &dyn TxnStates,
    id: &str,
    producer: (i64, i16),
    p: transactions::TxnPartition,
) -> Result<transactions::StoredTxn, i16> {
    txn_api::coordinator::add_implicitly(states, id, producer, &[p], None).await
}

/// The request a transactional batch came in: its producer's transactional id, and whether
/// the partition joins the producer's transaction by this batch (Produce v12: transactions
/// V2) rather than by an AddPartitionsToTxn before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnProduce<'a> {
    pub transactional_id: &'a str,
    pub add_partition: bool,
}

/// Share groups' share-partition states (KIP-932), as the partition's owner keeps them: each a
/// cursor of the partition's log (ARCHITECTURE §12), written by one owner at a time. A role
/// without them refuses every call (NOT_LEADER_OR_FOLLOWER: a reader owns none).
#[async_trait::async_trait]
pub trait ShareStates: Send + Sync + 'static {
    /// Whether this broker owns `group`'s share-partitions of `topic`'s `partition`: it leads
    /// the partition (for a client of no zone). NOT_LEADER_OR_FOLLOWER, naming the leader,
    /// otherwise.
    async fn share_owner(&self, topic: &str, partition: i32) -> Result<(), Refused> {
        let _ = (topic, partition);
        Err(Refused::new(code::NOT_LEADER_OR_FOLLOWER, "no share-partitions are owned here"))
    }

    /// The share-partition's stored state, taken for this owner (a later write by another
    /// owner makes this one's next [`ShareStates::store_share`] fail); `None` if the group
    /// never had one on the partition.
    async fn load_share(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> Result<Option<share::Stored>, Refused> {
        let _ = (group, topic, partition);
        Err(Refused::new(code::NOT_LEADER_OR_FOLLOWER, "no share-partitions are owned here"))
    }

    /// Stores a change of a share-partition loaded (or created: `create`) by this owner,
    /// before it is answered. NOT_LEADER_OR_FOLLOWER if another owner wrote it since: this
    /// owner's state is stale and must be loaded again.
    async fn store_share(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        change: &share::Change,
        create: bool,
    ) -> Result<(), Refused> {
        let _ = (group, topic, partition, change, create);
        Err(Refused::new(code::NOT_LEADER_OR_FOLLOWER, "no share-partitions are owned here"))
    }

    /// Every share-partition `group` has, with its start offset and lag
    /// (DescribeShareGroupOffsets, at the group's coordinator).
    async fn share_offsets(&self, group: &str) -> Result<Vec<ShareOffset>, Refused> {
        let _ = group;
        Ok(Vec::new())
    }

    /// Sets `group`'s share-partitions' start offsets (AlterShareGroupOffsets: `(topic,
    /// partition, start)`), creating those it has not, under the coordinator's tenure; each
    /// item's outcome. Their owners find their state moved on and load it again.
    async fn alter_share_offsets(
        &self,
        group: &str,
        tenure: Tenure,
        items: &[(String, i32, i64)],
    ) -> Result<Vec<Result<(), Refused>>, Refused> {
        let _ = (group, tenure);
        Ok(items
            .iter()
            .map(|_| Err(Refused::new(code::UNKNOWN_SERVER_ERROR, "no share groups here")))
            .collect())
    }

    /// Removes `group`'s share-partitions of `topics` (DeleteShareGroupOffsets), under the
    /// coordinator's tenure; the topics it had some on.
    async fn delete_share_offsets(
        &self,
        group: &str,
        tenure: Tenure,
        topics: &[String],
    ) -> Result<Vec<String>, Refused> {
        let _ = (group, tenure, topics);
        Ok(Vec::new())
    }
}

/// A share-partition as DescribeShareGroupOffsets shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareOffset {
    pub topic: String,
    pub partition: i32,
    /// The share-partition start offset.
    pub start: i64,
    /// Records at or past the start not yet done (KIP-1226); -1 when unknown.
    pub lag: i64,
}

/// What the front end needs of the role it runs in: the capabilities above. A role implements
/// each; handlers take a `&dyn Broker`.
pub trait Broker: Cluster + Partitions + Topics + GroupOffsets + TxnStates + ShareStates {}

impl<T: Cluster + Partitions + Topics + GroupOffsets + TxnStates + ShareStates> Broker for T {}

/// The zone a client names in its `client.id` with a `zone_id=<zone>` token (seed 002);
/// tokens are separated by commas, semicolons or spaces.
pub fn zone_of(client_id: &str) -> Option<&str> {
    client_id
        .split([',', ';', ' '])
        .find_map(|t| t.strip_prefix("zone_id="))
        .filter(|z| !z.is_empty())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_zone_is_the_zone_id_token_of_the_client_id() {
        assert_eq!(super::zone_of("app,zone_id=eu-1a"), Some("eu-1a"));
        assert_eq!(super::zone_of("zone_id=b app"), Some("b"));
        assert_eq!(super::zone_of("app;zone_id=c;x=1"), Some("c"));
        assert_eq!(super::zone_of("rdkafka"), None);
        assert_eq!(super::zone_of("zone_id="), None);
    }
}
