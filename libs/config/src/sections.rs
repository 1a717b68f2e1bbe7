//! The typed config sections shared by every role. Role-specific sections join here as the
//! roles arrive; each has `deny_unknown_fields` and sane defaults.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::{AuthSection, ByteSize, Duration, Invalid, TlsConfig, Validate};

/// What every Lakelog process reads: where its metadata and objects live, and its telemetry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Cluster name: every metadata key lives under `/<cluster>/`.
    #[serde(default = "default_cluster")]
    pub cluster: String,
    pub metadata: MetadataConfig,
    pub object_store: ObjectStoreConfig,
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// The writer role's settings (used by `lakelog writer` and `standalone`).
    #[serde(default)]
    pub writer: WriterSection,
    /// The catalog role's settings (used by `lakelog catalog`; `standalone` serves the
    /// catalog on the writer's port).
    #[serde(default)]
    pub catalog: CatalogSection,
    /// The reader role's settings (used by `lakelog reader`).
    #[serde(default)]
    pub reader: ReaderSection,
    /// Retention, compaction and cleaning (used by `lakelog compactor`, `lakelog cleaner run`
    /// and `standalone`).
    #[serde(default)]
    pub maintenance: MaintenanceSection,
    /// Authentication and ACLs, for every role of the process.
    #[serde(default)]
    pub auth: AuthSection,
    /// Delays added to every request of both stores (benchmarks: `standalone
    /// --latency-profile`); never read from a file.
    #[serde(skip)]
    pub latency: Option<crate::latency::LatencyProfile>,
}

/// What `lakelog standalone --config` reads: the sections that tune the roles it runs. Its
/// metadata and objects live in its data directory, and it serves every role on the writer's
/// listen address (`--listen` wins over `writer.listen`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StandaloneConfig {
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    #[serde(default)]
    pub writer: WriterSection,
    #[serde(default)]
    pub maintenance: MaintenanceSection,
    #[serde(default)]
    pub auth: AuthSection,
}

impl Validate for StandaloneConfig {
    fn validate(&self) -> Result<(), Invalid> {
        self.telemetry.validate()?;
        self.writer.validate()?;
        self.auth.check()?;
        self.maintenance.validate()
    }
}

/// Retention, compaction and the WAL cleaner (ARCHITECTURE §5).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceSection {
    /// How often a cycle runs (retention then compaction; cleaning).
    #[serde(default = "default_maintenance_interval")]
    pub interval: Duration,
    /// Eligible WAL chunks (spilled to index pages, below every writer's low-water mark) a log
    /// needs before it is compacted.
    #[serde(default = "default_min_chunks")]
    pub min_chunks: usize,
    /// Payload bytes a compacted segment is built up to: WAL chunks are compacted, and small
    /// segments merged, into segments of about this size (at most this plus one piece).
    /// `max_segment_size`, its earlier name, is read too.
    #[serde(default = "default_target_segment", alias = "max_segment_size")]
    pub target_segment_size: ByteSize,
    /// A log with no append for this long has its small segments merged whatever their sizes
    /// (before that, a segment is rewritten only into one at least twice its size, or a full
    /// one, so a log written in rare bursts does not rewrite its tail on every burst).
    #[serde(default = "default_settle_after")]
    pub settle_after: Duration,
    /// Memory of key compaction's key map (compacted topics: each key's latest offset, 24
    /// bytes a key; Kafka's `log.cleaner.dedupe.buffer.size`): a pass cleans as far as this
    /// many keys' worth, the next goes on from there.
    #[serde(default = "default_key_map")]
    pub key_map_size: ByteSize,
    /// Objects below the cleaner's cutoff younger than this are kept (readers may hold them).
    #[serde(default = "default_grace")]
    pub grace: Duration,
    /// Metadata history kept when the cleaner compacts it (etcd hygiene).
    #[serde(default = "default_grace")]
    pub metadata_history: Duration,
    /// Where the compactor and cleaner serve their gRPC API (CompactorService, CleanerService)
    /// and gRPC health (NOT_SERVING until etcd and object storage answer); none when unset.
    /// `health_listen`, its name when it served only health, is read too.
    #[serde(default, alias = "health_listen")]
    pub listen: Option<std::net::SocketAddr>,
    /// TLS on `listen` (docs/security.md); plaintext when absent.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
}

fn default_maintenance_interval() -> Duration {
    Duration(std::time::Duration::from_secs(60))
}
fn default_min_chunks() -> usize {
    16
}
fn default_target_segment() -> ByteSize {
    ByteSize(64 << 20)
}
fn default_settle_after() -> Duration {
    Duration(std::time::Duration::from_secs(3600))
}
fn default_key_map() -> ByteSize {
    ByteSize(32 << 20)
}
fn default_grace() -> Duration {
    Duration(std::time::Duration::from_secs(600))
}

impl Default for MaintenanceSection {
    fn default() -> Self {
        MaintenanceSection {
            interval: default_maintenance_interval(),
            min_chunks: default_min_chunks(),
            target_segment_size: default_target_segment(),
            settle_after: default_settle_after(),
            key_map_size: default_key_map(),
            grace: default_grace(),
            metadata_history: default_grace(),
            listen: None,
            tls: None,
        }
    }
}

impl Validate for MaintenanceSection {
    fn validate(&self) -> Result<(), Invalid> {
        if self.interval.0 < std::time::Duration::from_secs(1) {
            return Err(Invalid::new("maintenance.interval", "must be at least 1s"));
        }
        if self.min_chunks == 0 {
            return Err(Invalid::new("maintenance.min_chunks", "must be at least 1"));
        }
        if self.target_segment_size.0 < (1 << 20) {
            return Err(Invalid::new("maintenance.target_segment_size", "must be at least 1MiB"));
        }
        if self.key_map_size.0 < (1 << 20) {
            return Err(Invalid::new("maintenance.key_map_size", "must be at least 1MiB"));
        }
        match &self.tls {
            Some(t) => t.check_listener("maintenance.tls"),
            None => Ok(()),
        }
    }
}

/// The reader role: read-only Tier-2 reads of committed data, with bounded caches.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReaderSection {
    /// gRPC listen address.
    #[serde(default = "default_reader_listen")]
    pub listen: SocketAddr,
    /// Unique among live readers; defaults to a random id per process.
    #[serde(default)]
    pub id: Option<String>,
    /// The URL clients reach this reader at; defaults to `http://<listen>`.
    #[serde(default)]
    pub advertise: Option<String>,
    /// Its zone; `*` for none.
    #[serde(default = "default_zone")]
    pub zone: String,
    /// The reader's lease in the metadata store.
    #[serde(default = "default_lease_ttl")]
    pub lease_ttl: Duration,
    /// Object byte ranges kept in memory.
    #[serde(default = "default_reader_cache")]
    pub cache_size: ByteSize,
    /// Index pages (≤ 8 chunk locators each) kept in memory.
    #[serde(default = "default_index_pages")]
    pub index_cache_pages: usize,
    /// A read-only Kafka listener (ARCHITECTURE §11): consumers of the reader's zone far
    /// behind a partition's end are sent here by the writers (KIP-392). None when absent.
    #[serde(default)]
    pub kafka: Option<KafkaSection>,
    /// TLS on `listen` (docs/security.md); plaintext when absent.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
}

fn default_reader_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7542))
}
fn default_reader_cache() -> ByteSize {
    ByteSize(256 << 20)
}
fn default_index_pages() -> usize {
    4096
}

impl Default for ReaderSection {
    fn default() -> Self {
        ReaderSection {
            listen: default_reader_listen(),
            id: None,
            advertise: None,
            zone: default_zone(),
            lease_ttl: default_lease_ttl(),
            cache_size: default_reader_cache(),
            index_cache_pages: default_index_pages(),
            kafka: None,
            tls: None,
        }
    }
}

impl Validate for ReaderSection {
    fn validate(&self) -> Result<(), Invalid> {
        if self.index_cache_pages == 0 {
            return Err(Invalid::new("reader.index_cache_pages", "must be at least 1"));
        }
        if let Some(k) = &self.kafka {
            k.check("reader.kafka")?;
        }
        check_listener_tls("reader", &self.tls)?;
        check_membership("reader", &self.id, &self.advertise, self.lease_ttl)
    }
}

/// The catalog role: where it listens and how it registers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogSection {
    /// gRPC listen address.
    #[serde(default = "default_catalog_listen")]
    pub listen: SocketAddr,
    /// Unique among live catalogs; defaults to a random id per process.
    #[serde(default)]
    pub id: Option<String>,
    /// The URL clients reach this catalog at; defaults to `http://<listen>`.
    #[serde(default)]
    pub advertise: Option<String>,
    /// The catalog's lease in the metadata store.
    #[serde(default = "default_lease_ttl")]
    pub lease_ttl: Duration,
    /// TLS on `listen` (docs/security.md); plaintext when absent.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
}

fn default_catalog_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7541))
}

impl Default for CatalogSection {
    fn default() -> Self {
        CatalogSection {
            listen: default_catalog_listen(),
            id: None,
            advertise: None,
            lease_ttl: default_lease_ttl(),
            tls: None,
        }
    }
}

impl Validate for CatalogSection {
    fn validate(&self) -> Result<(), Invalid> {
        check_listener_tls("catalog", &self.tls)?;
        check_membership("catalog", &self.id, &self.advertise, self.lease_ttl)
    }
}

/// The writer role: where it listens and how it batches.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriterSection {
    /// gRPC listen address.
    #[serde(default = "default_writer_listen")]
    pub listen: SocketAddr,
    /// Unique among live writers; defaults to a random id per process.
    #[serde(default)]
    pub id: Option<String>,
    /// The URL clients reach this writer at; defaults to `http://<listen>`.
    #[serde(default)]
    pub advertise: Option<String>,
    /// The zone whose owner slot the writer takes; `*` for none.
    #[serde(default = "default_zone")]
    pub zone: String,
    /// Flush when the oldest buffered append is this old (≥ 1ms).
    #[serde(default = "default_flush_interval")]
    pub flush_interval: Duration,
    /// ...or when this many bytes are buffered.
    #[serde(default = "default_flush_bytes")]
    pub flush_bytes: ByteSize,
    /// The eager flush policy: flush as soon as an append waits, fewer than `eager_puts` PUTs
    /// are out and this long has passed since the previous flush began (PUTs per second at
    /// most one per this, and `eager_puts` per PUT's latency; at most `flush_interval`; 0: no
    /// spacing). Unset: 0 ([`DEFAULT_MIN_FLUSH_INTERVAL`]); set it to `flush_interval` for
    /// the fewest PUTs (a flush every `flush_interval` under load).
    #[serde(default)]
    pub min_flush_interval: Option<Duration>,
    /// Under the eager policy, how many flushes' PUTs may be out at once before a waiting
    /// append waits for one to answer (1: one at a time, the fewest objects). Unset: 4
    /// ([`DEFAULT_EAGER_PUTS`]); `standalone` on its local directory: 1.
    #[serde(default)]
    pub eager_puts: Option<usize>,
    /// PUT hedging: a WAL PUT not answered by this quantile of recent PUTs of its size (at
    /// least 5ms) is raced by a second PUT of the same object under a new sequence, the loser
    /// left to the cleaner (about `1 - q` of PUTs are sent twice). 0: off. Unset: 0.9
    /// ([`DEFAULT_HEDGE_QUANTILE`]); `standalone` on its local directory: off.
    #[serde(default)]
    pub hedge_quantile: Option<f64>,
    /// The commit budget: commit rounds start at most once per this, so a log commits at most
    /// once per it; flushes stored meanwhile commit together. Unset: the flush cadence
    /// (`min_flush_interval` when set, else `flush_interval`), at least 5ms. The writer
    /// lengthens it while the metadata store's commit p99 exceeds `flush_interval`.
    #[serde(default)]
    pub commit_interval: Option<Duration>,
    /// Largest payload of one append (16 MiB; at most `buffer_size`): also the largest Kafka
    /// record batch, and what a topic's `max.message.bytes` may be set to.
    #[serde(default = "default_max_entry")]
    pub max_entry_size: ByteSize,
    /// Bytes buffered or being written (until their PUT succeeds), plus what each append holds
    /// until its commit is answered (256 bytes; a gRPC request 12 KiB more) and, for each unary
    /// gRPC append being received, 32 KiB or its message's length and 8 KiB, at most. Appends asking up to an eighth of it wait
    /// for room, then fail RESOURCE_EXHAUSTED; beyond that eighth an append is refused with
    /// RESOURCE_EXHAUSTED at once, a gRPC one unread when no room is left (clients back off).
    #[serde(default = "default_buffer")]
    pub buffer_size: ByteSize,
    /// Deadline of one flush's PUT and commit.
    #[serde(default = "default_flush_deadline")]
    pub flush_deadline: Duration,
    /// The writer's lease in the metadata store.
    #[serde(default = "default_lease_ttl")]
    pub lease_ttl: Duration,
    /// Recently committed entries kept in memory, so reads of the tail need no GET. Inside
    /// `buffer_size`: the cache uses room appends do not hold and gives it back when they need
    /// it (under overload it is empty, and tail reads GET).
    #[serde(default = "default_tail_cache")]
    pub tail_cache_size: ByteSize,
    /// The Kafka listener (ARCHITECTURE §11); none when the section is absent.
    #[serde(default)]
    pub kafka: Option<KafkaSection>,
    /// TLS on `listen` (docs/security.md); plaintext when absent. `standalone` serves every
    /// role on this listener.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
}

/// A writer's Kafka listener.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSection {
    /// Where Kafka clients connect.
    pub listen: SocketAddr,
    /// The `host:port` clients are told to connect to (Metadata's broker address); defaults
    /// to `listen`.
    #[serde(default)]
    pub advertise: Option<String>,
    /// A Metadata request for a topic that does not exist creates it (Kafka's
    /// `auto.create.topics.enable`, on by default).
    #[serde(default = "default_true")]
    pub auto_create_topics: bool,
    /// Partitions of an auto-created topic (Kafka's `num.partitions`).
    #[serde(default = "default_partitions")]
    pub default_partitions: u32,
    /// The largest request frame (Kafka's `socket.request.max.bytes`); with what decoding it
    /// may allocate (8 times its size, at most 16 MiB) it must fit in seven eighths of
    /// `request_budget`.
    #[serde(default = "default_max_request")]
    pub max_request_size: ByteSize,
    /// The bytes this listener's requests may hold at once, frames and what decoding them
    /// allocates, from when a frame's size arrives until it is answered (Kafka's
    /// `queued.max.request.bytes`): a connection whose next frame does not fit waits, unread.
    /// An eighth is kept for small requests, so large produces cannot hold up other clients.
    #[serde(default = "default_request_budget")]
    pub request_budget: ByteSize,
    /// Connections this listener keeps at once (Kafka's `max.connections`); more are closed
    /// at accept.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Connections from one address at once (Kafka's `max.connections.per.ip`).
    #[serde(default = "default_max_connections_per_ip")]
    pub max_connections_per_ip: usize,
    /// A connection with no request for this long and nothing to answer is closed (Kafka's
    /// `connections.max.idle.ms`).
    #[serde(default = "default_connections_max_idle")]
    pub connections_max_idle: Duration,
    /// KIP-848 consumer groups (`group.protocol=consumer`): a member silent this long is
    /// removed and its partitions reassigned (Kafka's `group.consumer.session.timeout.ms`).
    #[serde(default = "default_consumer_session_timeout")]
    pub consumer_session_timeout: Duration,
    /// KIP-848: how often members heartbeat (Kafka's `group.consumer.heartbeat.interval.ms`);
    /// below `consumer_session_timeout`.
    #[serde(default = "default_consumer_heartbeat_interval")]
    pub consumer_heartbeat_interval: Duration,
    /// A group's committed offsets are deleted once it has had no member for this long (and
    /// none was committed meanwhile): Kafka's `offsets.retention.minutes`, 7 days.
    #[serde(default = "default_offsets_retention")]
    pub offsets_retention: Duration,
    /// TLS on the Kafka listener (clients' `security.protocol=SSL`); plaintext when absent.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
}

fn default_consumer_session_timeout() -> Duration {
    Duration(std::time::Duration::from_secs(45))
}
fn default_consumer_heartbeat_interval() -> Duration {
    Duration(std::time::Duration::from_secs(5))
}
fn default_offsets_retention() -> Duration {
    Duration(std::time::Duration::from_secs(7 * 24 * 3600))
}

fn default_partitions() -> u32 {
    1
}
fn default_max_request() -> ByteSize {
    ByteSize(64 << 20)
}
fn default_request_budget() -> ByteSize {
    ByteSize(100 << 20)
}
fn default_max_connections() -> usize {
    4096
}
fn default_max_connections_per_ip() -> usize {
    1024
}
fn default_connections_max_idle() -> Duration {
    Duration(std::time::Duration::from_secs(600))
}

impl KafkaSection {
    /// Listening on `listen`, every other setting its default.
    pub fn on(listen: SocketAddr) -> Self {
        KafkaSection {
            listen,
            advertise: None,
            auto_create_topics: true,
            default_partitions: default_partitions(),
            max_request_size: default_max_request(),
            request_budget: default_request_budget(),
            max_connections: default_max_connections(),
            max_connections_per_ip: default_max_connections_per_ip(),
            connections_max_idle: default_connections_max_idle(),
            consumer_session_timeout: default_consumer_session_timeout(),
            consumer_heartbeat_interval: default_consumer_heartbeat_interval(),
            offsets_retention: default_offsets_retention(),
            tls: None,
        }
    }

    /// Checks the section at `key` (`writer.kafka`, `reader.kafka`).
    fn check(&self, key: &str) -> Result<(), Invalid> {
        if self.default_partitions == 0 || self.default_partitions > 10_000 {
            return Err(Invalid::new(
                format!("{key}.default_partitions"),
                "must be between 1 and 10000",
            ));
        }
        if self.max_request_size.0 < 1024 || self.max_request_size.0 > 1 << 30 {
            return Err(Invalid::new(
                format!("{key}.max_request_size"),
                "must be between 1KiB and 1GiB",
            ));
        }
        let frame = self.max_request_size.0;
        let needs = frame + (frame.saturating_mul(8)).min(16 << 20) + (64 << 10);
        if self.request_budget.0 < 8 << 20
            || needs > self.request_budget.0 - self.request_budget.0 / 8
        {
            return Err(Invalid::new(
                format!("{key}.request_budget"),
                format!(
                    "must be at least 8MiB, and hold max_request_size with what decoding it may allocate in seven eighths: at least {} bytes",
                    (needs * 8).div_ceil(7).max(8 << 20)
                ),
            ));
        }
        if self.max_connections == 0 || self.max_connections_per_ip == 0 {
            return Err(Invalid::new(
                format!("{key}.max_connections"),
                "max_connections and max_connections_per_ip must be at least 1",
            ));
        }
        if self.connections_max_idle.0 < std::time::Duration::from_secs(1) {
            return Err(Invalid::new(format!("{key}.connections_max_idle"), "must be at least 1s"));
        }
        let host_port = self.advertise.as_deref().and_then(|a| a.rsplit_once(':'));
        if self.advertise.is_some()
            && !host_port.is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
        {
            return Err(Invalid::new(format!("{key}.advertise"), "must be host:port"));
        }
        let (session, beat) = (self.consumer_session_timeout.0, self.consumer_heartbeat_interval.0);
        if beat < std::time::Duration::from_millis(100) || beat >= session {
            return Err(Invalid::new(
                format!("{key}.consumer_heartbeat_interval"),
                format!("must be at least 100ms and below {key}.consumer_session_timeout"),
            ));
        }
        if self.offsets_retention.0 < std::time::Duration::from_secs(1) {
            return Err(Invalid::new(format!("{key}.offsets_retention"), "must be at least 1s"));
        }
        match &self.tls {
            Some(t) => t.check_listener(&format!("{key}.tls")),
            None => Ok(()),
        }
    }

    /// The `host:port` Metadata names.
    pub fn advertised(&self) -> String {
        self.advertise.clone().unwrap_or_else(|| self.listen.to_string())
    }
}

fn default_writer_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7540))
}
fn default_zone() -> String {
    "*".to_owned()
}
/// A writer's `min_flush_interval` when its config sets none: eager flushes, unspaced (a light
/// load is acknowledged after about one PUT and one commit).
pub const DEFAULT_MIN_FLUSH_INTERVAL: std::time::Duration = std::time::Duration::ZERO;
/// A writer's `eager_puts` when its config sets none: no append waits a whole slow PUT behind
/// another; PUTs at most four per PUT latency.
pub const DEFAULT_EAGER_PUTS: usize = 4;
/// A writer's `hedge_quantile` when its config sets none.
pub const DEFAULT_HEDGE_QUANTILE: f64 = 0.9;

fn default_flush_interval() -> Duration {
    Duration(std::time::Duration::from_millis(250))
}
fn default_flush_bytes() -> ByteSize {
    ByteSize(8 << 20)
}
fn default_max_entry() -> ByteSize {
    ByteSize(16 << 20)
}
fn default_buffer() -> ByteSize {
    ByteSize(64 << 20)
}
fn default_tail_cache() -> ByteSize {
    ByteSize(64 << 20)
}
fn default_flush_deadline() -> Duration {
    Duration(std::time::Duration::from_secs(30))
}
fn default_lease_ttl() -> Duration {
    Duration(std::time::Duration::from_secs(10))
}

impl Default for WriterSection {
    fn default() -> Self {
        WriterSection {
            listen: default_writer_listen(),
            id: None,
            advertise: None,
            zone: default_zone(),
            flush_interval: default_flush_interval(),
            flush_bytes: default_flush_bytes(),
            min_flush_interval: None,
            eager_puts: None,
            hedge_quantile: None,
            commit_interval: None,
            max_entry_size: default_max_entry(),
            buffer_size: default_buffer(),
            flush_deadline: default_flush_deadline(),
            lease_ttl: default_lease_ttl(),
            tail_cache_size: default_tail_cache(),
            kafka: None,
            tls: None,
        }
    }
}

impl Validate for WriterSection {
    fn validate(&self) -> Result<(), Invalid> {
        if self.flush_interval.0 < std::time::Duration::from_millis(1) {
            return Err(Invalid::new("writer.flush_interval", "must be at least 1ms"));
        }
        if let Some(min) = self.min_flush_interval
            && min.0 > self.flush_interval.0
        {
            return Err(Invalid::new(
                "writer.min_flush_interval",
                "must be at most writer.flush_interval",
            ));
        }
        if self.eager_puts == Some(0) {
            return Err(Invalid::new("writer.eager_puts", "must be at least 1"));
        }
        if let Some(q) = self.hedge_quantile
            && q != 0.0
            && !(0.5..1.0).contains(&q)
        {
            return Err(Invalid::new(
                "writer.hedge_quantile",
                "must be 0 (off) or at least 0.5 and below 1",
            ));
        }
        if let Some(c) = self.commit_interval
            && c.0 > self.flush_deadline.0 / 8
        {
            return Err(Invalid::new(
                "writer.commit_interval",
                "must be at most an eighth of writer.flush_deadline",
            ));
        }
        if self.max_entry_size.0 == 0 || self.max_entry_size.0 > self.buffer_size.0 {
            return Err(Invalid::new(
                "writer.max_entry_size",
                "must be between 1 byte and writer.buffer_size",
            ));
        }
        if self.max_entry_size.0 > u64::from(u32::MAX) {
            return Err(Invalid::new("writer.max_entry_size", "must be below 4GiB"));
        }
        if let Some(k) = &self.kafka {
            k.check("writer.kafka")?;
        }
        check_listener_tls("writer", &self.tls)?;
        check_membership("writer", &self.id, &self.advertise, self.lease_ttl)
    }
}

fn check_listener_tls(role: &str, tls: &Option<TlsConfig>) -> Result<(), Invalid> {
    match tls {
        Some(t) => t.check_listener(&format!("{role}.tls")),
        None => Ok(()),
    }
}

/// What every role's section says about its membership: id, advertised URL, lease.
fn check_membership(
    role: &str,
    id: &Option<String>,
    advertise: &Option<String>,
    lease_ttl: Duration,
) -> Result<(), Invalid> {
    if lease_ttl.0 < std::time::Duration::from_secs(2) {
        return Err(Invalid::new(format!("{role}.lease_ttl"), "must be at least 2s"));
    }
    if let Some(a) = advertise {
        check_url(&format!("{role}.advertise"), a)?;
    }
    if let Some(id) = id
        && (id.is_empty() || id.contains('/'))
    {
        return Err(Invalid::new(format!("{role}.id"), "must be non-empty and without `/`"));
    }
    Ok(())
}

fn default_cluster() -> String {
    "lakelog".to_owned()
}

impl Validate for NodeConfig {
    fn validate(&self) -> Result<(), Invalid> {
        if self.cluster.is_empty()
            || !self.cluster.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(Invalid::new(
                "cluster",
                format!("`{}` must be non-empty ASCII letters, digits, `-` or `_`", self.cluster),
            ));
        }
        self.metadata.validate()?;
        self.object_store.validate()?;
        self.telemetry.validate()?;
        self.writer.validate()?;
        // etcd's commit rate is shared by every writer (ARCHITECTURE §4): no log commits
        // more often than once per 5ms there.
        if let (MetadataConfig::Etcd(_), Some(c)) = (&self.metadata, self.writer.commit_interval)
            && c.0 < std::time::Duration::from_millis(5)
        {
            return Err(Invalid::new("writer.commit_interval", "must be at least 5ms over etcd"));
        }
        self.catalog.validate()?;
        self.reader.validate()?;
        self.auth.check()?;
        self.maintenance.validate()
    }
}

/// The metadata store: etcd in every multi-process setup, embedded for `standalone`.
/// Written as a section with exactly one of `etcd:` or `embedded:`.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "MetadataSection")]
pub enum MetadataConfig {
    Etcd(EtcdConfig),
    Embedded(EmbeddedConfig),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MetadataSection {
    #[serde(default)]
    etcd: Option<EtcdConfig>,
    #[serde(default)]
    embedded: Option<EmbeddedConfig>,
}

impl TryFrom<MetadataSection> for MetadataConfig {
    type Error = String;

    fn try_from(s: MetadataSection) -> Result<Self, String> {
        match (s.etcd, s.embedded) {
            (Some(e), None) => Ok(MetadataConfig::Etcd(e)),
            (None, Some(e)) => Ok(MetadataConfig::Embedded(e)),
            _ => Err("set exactly one of `etcd` or `embedded`".to_owned()),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdConfig {
    /// `http://host:port` of each etcd member.
    pub endpoints: Vec<String>,
    /// How long one request may take before its outcome is declared unknown.
    #[serde(default = "default_request_timeout")]
    pub request_timeout: Duration,
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: Duration,
    /// TLS to etcd (`https://` endpoints): the CA that signed etcd's certificate, and this
    /// role's client certificate when etcd requires one (`--client-cert-auth`).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
}

fn default_request_timeout() -> Duration {
    Duration(std::time::Duration::from_secs(5))
}

fn default_connect_timeout() -> Duration {
    Duration(std::time::Duration::from_secs(3))
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddedConfig {
    /// The database file; its folder is created if missing.
    pub path: PathBuf,
}

impl Validate for MetadataConfig {
    fn validate(&self) -> Result<(), Invalid> {
        match self {
            MetadataConfig::Etcd(c) => {
                if c.endpoints.is_empty() {
                    return Err(Invalid::new(
                        "metadata.etcd.endpoints",
                        "needs at least one endpoint",
                    ));
                }
                for e in &c.endpoints {
                    check_url("metadata.etcd.endpoints", e)?;
                }
                if c.request_timeout.0.is_zero() {
                    return Err(Invalid::new(
                        "metadata.etcd.request_timeout",
                        "must be above zero",
                    ));
                }
                let https = c.endpoints.iter().filter(|e| e.starts_with("https://")).count();
                match &c.tls {
                    Some(t) => {
                        if https != c.endpoints.len() {
                            return Err(Invalid::new(
                                "metadata.etcd.endpoints",
                                "with metadata.etcd.tls, every endpoint is https://",
                            ));
                        }
                        t.check_client("metadata.etcd.tls")
                    }
                    None if https > 0 => Err(Invalid::new(
                        "metadata.etcd.tls",
                        "https:// endpoints need a tls section (at least `ca`)",
                    )),
                    None => Ok(()),
                }
            }
            MetadataConfig::Embedded(c) => {
                if c.path.as_os_str().is_empty() {
                    return Err(Invalid::new("metadata.embedded.path", "must not be empty"));
                }
                Ok(())
            }
        }
    }
}

/// Object storage: a section with exactly one of `local:`, `s3:` or `memory: {}` (tests only).
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "ObjectStoreSection")]
// Built once per process: the S3 variant's size costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub enum ObjectStoreConfig {
    Local(LocalStoreConfig),
    S3(S3Config),
    Memory,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ObjectStoreSection {
    #[serde(default)]
    local: Option<LocalStoreConfig>,
    #[serde(default)]
    s3: Option<S3Config>,
    #[serde(default)]
    memory: Option<MemorySection>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MemorySection {}

impl TryFrom<ObjectStoreSection> for ObjectStoreConfig {
    type Error = String;

    fn try_from(s: ObjectStoreSection) -> Result<Self, String> {
        match (s.local, s.s3, s.memory) {
            (Some(l), None, None) => Ok(ObjectStoreConfig::Local(l)),
            (None, Some(c), None) => Ok(ObjectStoreConfig::S3(c)),
            (None, None, Some(_)) => Ok(ObjectStoreConfig::Memory),
            _ => Err("set exactly one of `local`, `s3` or `memory`".to_owned()),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalStoreConfig {
    /// The root folder; created if missing. Every write is fsynced.
    pub path: PathBuf,
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Config {
    /// e.g. `http://127.0.0.1:8333`; omit for AWS.
    #[serde(default)]
    pub endpoint: Option<String>,
    pub bucket: String,
    #[serde(default = "default_region")]
    pub region: String,
    /// With `credentials: keys` (the default), both keys must be set, here or through
    /// `LAKELOG_S3_ACCESS_KEY_ID` / `LAKELOG_S3_SECRET_ACCESS_KEY`.
    #[serde(default)]
    pub access_key_id: Option<String>,
    #[serde(default)]
    pub secret_access_key: Option<String>,
    /// Where credentials come from: `keys` (default), `instance` or `web_identity`.
    #[serde(default)]
    pub credentials: S3Credentials,
    /// Allow plain-HTTP endpoints (local servers).
    #[serde(default)]
    pub allow_http: bool,
    /// Path-style requests (`endpoint/bucket/key`), as most S3-compatible servers want.
    #[serde(default = "default_true")]
    pub path_style: bool,
    /// A key prefix under which every object of this cluster lives.
    #[serde(default)]
    pub prefix: String,
    /// HTTPS to an endpoint whose certificate a private CA signed: `ca` is trusted beside the
    /// system's roots (the only key it takes: no client certificates to S3).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
}

impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &self.secret_access_key.as_ref().map(|_| "<redacted>"))
            .field("credentials", &self.credentials)
            .field("allow_http", &self.allow_http)
            .field("path_style", &self.path_style)
            .field("prefix", &self.prefix)
            .field("tls", &self.tls)
            .finish()
    }
}

/// Where an S3 store's credentials come from. Never a silent fall-back: without keys, a role
/// asks the cloud's metadata service only when the config says so.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum S3Credentials {
    /// `access_key_id` and `secret_access_key`, from the config or the environment overrides.
    #[default]
    Keys,
    /// The instance's (EC2 instance metadata) or the container's (ECS task role) credentials.
    Instance,
    /// AssumeRoleWithWebIdentity from `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN`
    /// (Kubernetes service-account roles, EKS IRSA).
    WebIdentity,
}

fn default_region() -> String {
    "us-east-1".to_owned()
}

fn default_true() -> bool {
    true
}

impl Validate for ObjectStoreConfig {
    fn validate(&self) -> Result<(), Invalid> {
        match self {
            ObjectStoreConfig::Local(c) if c.path.as_os_str().is_empty() => {
                Err(Invalid::new("object_store.local.path", "must not be empty"))
            }
            ObjectStoreConfig::S3(c) => {
                if c.bucket.is_empty() {
                    return Err(Invalid::new("object_store.s3.bucket", "must not be empty"));
                }
                if let Some(e) = &c.endpoint {
                    if e.starts_with("http://") && !c.allow_http {
                        return Err(Invalid::new(
                            "object_store.s3.endpoint",
                            format!("`{e}` is plain HTTP: set object_store.s3.allow_http: true"),
                        ));
                    }
                    check_url("object_store.s3.endpoint", e)?;
                }
                if c.access_key_id.is_some() != c.secret_access_key.is_some() {
                    return Err(Invalid::new(
                        "object_store.s3",
                        "access_key_id and secret_access_key go together",
                    ));
                }
                match &c.tls {
                    Some(t) if t.cert.is_some() || t.key.is_some() => Err(Invalid::new(
                        "object_store.s3.tls",
                        "takes `ca` only (no client certificates to object storage)",
                    )),
                    Some(t) => t.check_client("object_store.s3.tls"),
                    None => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Logs, traces and metrics.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// A tracing filter: `info`, `warn,lakelog=debug`, ...
    #[serde(default = "default_log_level")]
    pub log_level: String,
    #[serde(default)]
    pub log_format: LogFormat,
    /// When set, spans are exported over OTLP/gRPC to this URL.
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
    /// `service.name` on exported spans; defaults to the role's name.
    #[serde(default)]
    pub service_name: Option<String>,
    /// Where the role serves `/metrics`; none when unset.
    #[serde(default)]
    pub metrics_listen: Option<SocketAddr>,
}

fn default_log_level() -> String {
    "info".to_owned()
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            log_level: default_log_level(),
            log_format: LogFormat::Text,
            otlp_endpoint: None,
            service_name: None,
            metrics_listen: None,
        }
    }
}

impl Validate for TelemetryConfig {
    fn validate(&self) -> Result<(), Invalid> {
        match &self.otlp_endpoint {
            Some(e) => check_url("telemetry.otlp_endpoint", e),
            None => Ok(()),
        }
    }
}

fn check_url(key: &str, url: &str) -> Result<(), Invalid> {
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(())
    } else {
        Err(Invalid::new(key, format!("`{url}` must start with http:// or https://")))
    }
}
