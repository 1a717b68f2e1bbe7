//! The command line: its clap tree (`lakelog --help`) and the options every command shares.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "lakelog", version, about = "Lakelog: a diskless, leaderless log store")]
pub(crate) struct Cli {
    /// The role to talk to: a writer (or a standalone) for logs, streams and cursors; a
    /// compactor or a cleaner (their `maintenance.listen`) for `compactor …`, `cleaner status`
    /// and `admin …`.
    #[arg(long, global = true, env = "LAKELOG_ENDPOINT", default_value = "http://127.0.0.1:7540")]
    pub(crate) endpoint: String,
    /// Send reads (`log read` without --follow, `log info`, `cursor read|list|stats`) to this
    /// read-only reader instead.
    #[arg(long, global = true, env = "LAKELOG_READER")]
    pub(crate) reader: Option<String>,
    /// CA certificates (PEM) trusted for https:// endpoints, beside the system's roots.
    #[arg(long, global = true, env = "LAKELOG_CA")]
    pub(crate) ca: Option<PathBuf>,
    /// A client certificate (PEM) for servers that require mutual TLS; with --key.
    #[arg(long, global = true, env = "LAKELOG_CERT", requires = "key")]
    pub(crate) cert: Option<PathBuf>,
    /// The private key of --cert (PEM).
    #[arg(long, global = true, env = "LAKELOG_KEY", requires = "cert")]
    pub(crate) key: Option<PathBuf>,
    /// A bearer token sent with every call (`lakelog auth token create`).
    #[arg(long, global = true, env = "LAKELOG_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// How `lakelog group` and `bench catchup` reach Kafka listeners: PLAINTEXT, SSL (with
    /// --ca), SASL_PLAINTEXT or SASL_SSL (Kafka's `security.protocol`).
    #[arg(
        long,
        global = true,
        env = "LAKELOG_KAFKA_SECURITY_PROTOCOL",
        default_value = "PLAINTEXT"
    )]
    pub(crate) kafka_security_protocol: String,
    /// SASL mechanism: SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN (over SSL only).
    #[arg(
        long,
        global = true,
        env = "LAKELOG_KAFKA_SASL_MECHANISM",
        default_value = "SCRAM-SHA-512"
    )]
    pub(crate) kafka_sasl_mechanism: String,
    /// SASL user.
    #[arg(long, global = true, env = "LAKELOG_KAFKA_USER")]
    pub(crate) kafka_user: Option<String>,
    /// SASL password (better from the environment).
    #[arg(long, global = true, env = "LAKELOG_KAFKA_PASSWORD", hide_env_values = true)]
    pub(crate) kafka_password: Option<String>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Run every role in one process: embedded metadata, objects in a local directory.
    Standalone {
        /// Where metadata and objects live.
        #[arg(long, default_value = "./lakelog-data")]
        data_dir: PathBuf,
        /// gRPC listen address (every role on one port).
        #[arg(long, default_value = "127.0.0.1:7540")]
        listen: SocketAddr,
        /// A YAML file with `writer:` (flush interval, buffer, ...), `maintenance:` and
        /// `telemetry:` sections to tune the embedded roles (deploy/config/standalone.yaml).
        #[arg(long)]
        config: Option<PathBuf>,
        /// The Kafka listener (`off`: none); its other settings from the config file's
        /// `writer.kafka`.
        #[arg(long, default_value = "127.0.0.1:9092")]
        kafka_listen: String,
        /// Benchmarks only: delay every object-store and metadata request as a remote store
        /// would (`s3-standard`: first byte p50 25 ms, p99 120 ms, 100 MB/s; `s3-express`: 5 /
        /// 15 ms; both with etcd a zone away, 2 / 4 ms). The writer then takes the cluster
        /// roles' flush defaults, not the local directory's.
        #[arg(long)]
        latency_profile: Option<String>,
    },
    /// Run the writer role from a config file (see deploy/config/node.example.yaml).
    Writer {
        #[arg(long)]
        config: PathBuf,
    },
    /// Run the catalog role from a config file (its `catalog:` section).
    Catalog {
        #[arg(long)]
        config: PathBuf,
    },
    /// Run a read-only reader from a config file (its `reader:` section).
    Reader {
        #[arg(long)]
        config: PathBuf,
    },
    /// The compactor: run it, or ask a running one what it did.
    Compactor {
        #[command(subcommand)]
        command: CompactorCommand,
    },
    /// Load generators reporting ratios against same-run baselines.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
    /// Work with streams (the catalog).
    Stream {
        #[command(subcommand)]
        command: StreamCommand,
    },
    /// Credentials: who you are, bearer tokens, SASL users (docs/security.md).
    Auth {
        #[command(subcommand)]
        command: crate::auth::AuthCommand,
    },
    /// ACLs: who may do what to which stream, group or the cluster (docs/security.md).
    Acl {
        #[command(subcommand)]
        command: crate::auth::AclCommand,
    },
    /// Lake tables: a lake stream's Iceberg table (docs/lake.md).
    Lake {
        #[command(subcommand)]
        command: LakeCommand,
    },
    /// Work with logs.
    Log {
        #[command(subcommand)]
        command: LogCommand,
    },
    /// Parse and validate config files (every role's schema), as the roles would at start.
    CheckConfig {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Operator commands: a compaction or cleaner cycle now, in the running role at
    /// --endpoint (or, with --data-dir, in this process over a stopped standalone's data).
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
    /// The WAL cleaner: what holds reclamation back.
    Cleaner {
        #[command(subcommand)]
        command: CleanerCommand,
    },
    /// Kafka consumer groups: members, committed offsets and lag; reset and delete.
    Group {
        /// A Kafka listener of the cluster (any writer's); the group's coordinator is found
        /// through it.
        #[arg(long, global = true, env = "LAKELOG_KAFKA", default_value = "127.0.0.1:9092")]
        kafka: String,
        #[command(subcommand)]
        command: GroupCommand,
    },
    /// Durable cursors on a log: mark-delete position, individual acks, backlog.
    Cursor {
        #[command(subcommand)]
        command: CursorCommand,
    },
    /// Send stdin to a stream, one record per line, routed by key to partitions.
    Produce {
        stream: String,
        /// Every record's key (`--key` is the TLS key's flag).
        #[arg(long, short = 'k', conflicts_with = "key_separator")]
        record_key: Option<String>,
        /// Each line is `key SEP value` (split at the first SEP).
        #[arg(long)]
        key_separator: Option<String>,
        /// This client's zone: writers of the zone serve it while any lives.
        #[arg(long, env = "LAKELOG_ZONE")]
        zone: Option<String>,
        /// How long a batch waits for more records (milliseconds).
        #[arg(long, default_value_t = 5)]
        linger_ms: u64,
    },
    /// Print a stream's records as `partition<TAB>offset<TAB>key<TAB>value`.
    ///
    /// Starts at the end (only new records) unless --from-beginning or --offset; without
    /// --follow, stops at the high watermark read when it started.
    Consume {
        stream: String,
        /// Only this partition (default: every partition).
        #[arg(long)]
        partition: Option<u32>,
        /// Start at each partition's first retained offset.
        #[arg(long, conflicts_with = "offset")]
        from_beginning: bool,
        /// Start at this offset (needs --partition).
        #[arg(long, requires = "partition")]
        offset: Option<u64>,
        /// Stop after this many records.
        #[arg(long)]
        max: Option<u64>,
        /// Keep waiting for new records.
        #[arg(long)]
        follow: bool,
        /// This client's zone.
        #[arg(long, env = "LAKELOG_ZONE")]
        zone: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum LakeCommand {
    /// A lake stream's table: its location and metadata, snapshots, and how far it is behind
    /// the log (records, and the age of the oldest record not in it).
    Status { stream: String },
}

/// `NAME=VALUE`.
fn parse_config(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((n, v)) if !n.is_empty() => Ok((n.to_owned(), v.to_owned())),
        _ => Err(format!("`{s}`: expected NAME=VALUE")),
    }
}

#[derive(Subcommand, Debug)]
pub(crate) enum StreamCommand {
    /// Create a stream; prints its identity and partitions' logs.
    Create {
        name: String,
        #[arg(long, default_value_t = 1)]
        partitions: u32,
        #[arg(long)]
        retention_ms: Option<i64>,
        #[arg(long)]
        retention_bytes: Option<u64>,
        /// Make its compacted segments the Parquet data files of its Iceberg table, served by
        /// the catalog's Iceberg REST catalog (`lake.table`; docs/lake.md).
        #[arg(long)]
        lake_table: bool,
        /// How long the table keeps a day (`lake.retention.ms`; at least --retention-ms).
        #[arg(long, requires = "lake_table")]
        lake_retention_ms: Option<i64>,
        /// A config as a Kafka topic's, NAME=VALUE (cleanup.policy=compact,
        /// max.message.bytes=8388608, …; docs/kafka.md lists them); repeatable.
        #[arg(long = "config", value_name = "NAME=VALUE", value_parser = parse_config)]
        configs: Vec<(String, String)>,
    },
    /// List streams, one per line: name, partitions, identity.
    List,
    /// Show one stream.
    Describe { name: String },
    /// Grow a stream to N partitions.
    AddPartitions {
        name: String,
        #[arg(long)]
        to: u32,
    },
    /// Delete a stream (its logs are marked deleted).
    Delete { name: String },
}

#[derive(Subcommand, Debug)]
pub(crate) enum GroupCommand {
    /// Every group a coordinator holds members of, as `group<TAB>state<TAB>protocol type`.
    List,
    /// A group's state, members and their partitions, and per partition its committed offset,
    /// the partition's end and the lag.
    Describe { group: String },
    /// Move an inactive group's committed offsets on one topic.
    Reset {
        group: String,
        #[arg(long)]
        topic: String,
        /// To each partition's first offset.
        #[arg(long, conflicts_with_all = ["to_latest", "to_offset"], required_unless_present_any = ["to_latest", "to_offset"])]
        to_earliest: bool,
        /// To each partition's end: only new records are consumed.
        #[arg(long, conflicts_with = "to_offset")]
        to_latest: bool,
        /// To this offset on every partition (a partition's nearest end where it is outside it).
        #[arg(long)]
        to_offset: Option<u64>,
    },
    /// Delete an inactive group and its committed offsets.
    Delete { group: String },
}

#[derive(Subcommand, Debug)]
pub(crate) enum CursorCommand {
    /// Create a cursor (at the log's first offset unless --offset or --from-end).
    Create {
        log: u64,
        name: String,
        #[arg(long, conflicts_with = "from_end")]
        offset: Option<u64>,
        #[arg(long)]
        from_end: bool,
    },
    /// A log's cursors, one per line.
    List { log: u64 },
    /// Delete a cursor.
    Delete { log: u64, name: String },
    /// Print unacknowledged records as `offset<TAB>record`, from the mark-delete position
    /// (reading does not acknowledge: unacked records come again next time).
    Read {
        log: u64,
        name: String,
        #[arg(long, default_value_t = 100)]
        max: u64,
    },
    /// Acknowledge everything up to and including OFFSET (or only OFFSET with --individual).
    Ack {
        log: u64,
        name: String,
        offset: u64,
        #[arg(long)]
        individual: bool,
        /// A property stored with the mark-delete position, `key=value` (integer value).
        #[arg(long = "property", value_parser = parse_property)]
        properties: Vec<(String, i64)>,
    },
    /// Move a cursor: everything below OFFSET acknowledged, nothing above.
    Seek { log: u64, name: String, offset: u64 },
    /// Mark-delete offset, read position, backlog records and bytes.
    Stats { log: u64, name: String },
}

pub(crate) fn parse_property(s: &str) -> Result<(String, i64), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("`{s}` is not key=value"))?;
    let v = v.parse().map_err(|_| format!("`{v}` is not an integer"))?;
    Ok((k.to_owned(), v))
}

#[derive(Subcommand, Debug)]
pub(crate) enum BenchCommand {
    /// Append throughput, acknowledgement latency, PUTs and metadata transactions per GiB.
    Append(crate::bench::append::AppendArgs),
    /// Tail latency and catch-up throughput, against a raw GET baseline.
    Read(crate::bench::read::ReadArgs),
    /// Records through the SDK producer to a stream at `--endpoint`: MB/s and ack latency.
    Produce(crate::bench::produce::ProduceArgs),
    /// One log written in many small flushes while compaction runs, then read back: segments
    /// left, rewrites, and GETs against bytes / target_segment_size + 2.
    Compact(crate::bench::compact::CompactArgs),
    /// Key compaction (compacted topics) through the compactor, in process: keys and bytes
    /// compacted per compactor core, records and bytes before and after, the key map's memory.
    CompactKeys(crate::bench::compact_keys::CompactKeysArgs),
    /// What a lake segment (Parquet) costs one compactor core against a plain one: the same
    /// batches built into each and read back, in process, no store.
    Lake(crate::bench::lake::LakeArgs),
    /// Lake segments through the compactor, in process: compaction MB/s per core for lake and
    /// plain segments, and table freshness (ack to visible) at the compaction interval.
    LakeCompact(crate::bench::lake_compact::LakeCompactArgs),
    /// Ingest alone, then while a Kafka consumer group reads a backlog through the readers
    /// (on a running cluster, `make cluster`): the ingest ratio, seed 001's promise.
    Catchup(crate::bench::catchup::CatchupArgs),
    /// A share group's records/s acknowledged over the Kafka wire (any Kafka port: Lakelog's or
    /// Apache Kafka's), for 1, 4 and 16 members on 1 and 8 partitions.
    Share(crate::bench::share::ShareArgs),
}

#[derive(Subcommand, Debug)]
pub(crate) enum LogCommand {
    /// Create a log; prints its id.
    Create,
    /// Append stdin, one record per line; prints each entry's offset.
    Append {
        log: u64,
        /// Records per entry.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        batch: u32,
        /// The first entry must land at this offset (each next one where the last ended).
        #[arg(long)]
        expected_offset: Option<u64>,
    },
    /// Print records as `offset<TAB>record`.
    Read {
        log: u64,
        /// Start at this offset (default: the log's first offset).
        #[arg(long)]
        from: Option<u64>,
        /// Stop after this many records.
        #[arg(long)]
        max_records: Option<u64>,
        /// Keep waiting for new records.
        #[arg(long)]
        follow: bool,
    },
    /// Print a log's state, offsets and size.
    Info {
        log: u64,
        #[arg(long)]
        json: bool,
    },
    /// Fence a log; prints the epoch `activate` needs.
    Fence { log: u64 },
    /// Activate a fenced log (at its current epoch unless given).
    Activate {
        log: u64,
        #[arg(long)]
        epoch: Option<i64>,
    },
    /// Trim a log below an offset.
    Trim {
        log: u64,
        /// Make offsets unreadable; keep the index.
        #[arg(long, conflicts_with = "hard", required_unless_present = "hard")]
        soft: bool,
        /// Make offsets unreadable and remove their index.
        #[arg(long)]
        hard: bool,
        offset: u64,
    },
    /// Delete a log.
    Delete { log: u64 },
}

/// Operator commands.
#[derive(Subcommand, Debug)]
pub(crate) enum AdminCommand {
    /// Run one compaction cycle now (streams' retention, then every live log; or only LOG):
    /// rewrite runs of WAL chunks as compacted segments; print what it did.
    Compact {
        log: Option<u64>,
        /// Eligible WAL chunks a log needs before it is compacted (default: the role's
        /// `maintenance.min_chunks`, 16).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        min_chunks: Option<u32>,
        #[command(flatten)]
        at: crate::admin::DataDirArg,
    },
    /// Run one cleaner cycle now: delete WAL objects below the cutoff older than the grace
    /// period; print what it did.
    Clean {
        /// Objects below the cutoff younger than this are kept (readers may hold them).
        /// Default: the role's `maintenance.grace`, 10m.
        #[arg(long)]
        grace: Option<config::Duration>,
        #[command(flatten)]
        at: crate::admin::DataDirArg,
    },
}

/// The cleaner.
#[derive(Subcommand, Debug)]
pub(crate) enum CleanerCommand {
    /// Run the cleaner from a config file: one cycle every `maintenance.interval`.
    Run {
        #[arg(long)]
        config: PathBuf,
    },
    /// The cutoff, which log or writer holds it back and by how much, the bytes reclaimable,
    /// the lowest inputs and the last cycle (of the running cleaner at --endpoint).
    Status {
        #[command(flatten)]
        at: crate::admin::DataDirArg,
    },
}

/// The compactor.
#[derive(Subcommand, Debug)]
pub(crate) enum CompactorCommand {
    /// Run the compactor from a config file: streams' retention, then compaction, every
    /// `maintenance.interval` (several compactors share the logs through claims).
    Run {
        #[arg(long)]
        config: PathBuf,
    },
    /// The running compactor's last cycle (logs compacted, skipped and why), the claims held
    /// now, its settings.
    Status,
}

/// The Kafka client's TLS and SASL from the command line.
pub(crate) fn kafka_security(cli: &Cli) -> anyhow::Result<crate::kafka_client::KafkaSecurity> {
    let (tls, sasl) = match cli.kafka_security_protocol.to_ascii_uppercase().as_str() {
        "PLAINTEXT" => (false, false),
        "SSL" => (true, false),
        "SASL_PLAINTEXT" => (false, true),
        "SASL_SSL" => (true, true),
        other => anyhow::bail!(
            "INVALID_ARGUMENT: --kafka-security-protocol `{other}`: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
        ),
    };
    let sasl = match (sasl, &cli.kafka_user, &cli.kafka_password) {
        (false, _, _) => None,
        (true, Some(u), Some(p)) => Some((cli.kafka_sasl_mechanism.clone(), u.clone(), p.clone())),
        (true, _, _) => anyhow::bail!(
            "INVALID_ARGUMENT: SASL needs --kafka-user and --kafka-password (or LAKELOG_KAFKA_PASSWORD)"
        ),
    };
    Ok(crate::kafka_client::KafkaSecurity { tls: tls.then(|| cli.ca.clone()), sasl })
}
