//! The `lakelog` command: every role (`lakelog writer|catalog|reader --config FILE`,
//! `lakelog compactor|cleaner run --config FILE`), `lakelog standalone` (the writer, the
//! catalog, the compactor and the cleaner in one process on one port, with the embedded
//! metadata store and a local object-store directory), and the clients of their gRPC APIs
//! (`log …`, `stream …`, `cursor …`, `produce`, `consume`, `compactor status`,
//! `cleaner status`, `admin …`).
//!
//! The composition root: the only crate that may depend on service crates.

mod auth;
mod bench;
mod bench_compact;
mod bench_lake;
mod bench_lake_compact;
mod bench_produce;
mod catchup;
mod groups;
mod kafka_client;
mod maintenance;
mod streams;

// `--features system-allocator` builds with the C library's allocator instead, for heap
// profilers that hook malloc (heaptrack; docs/performance.md, "Memory under overload").
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use client::{ClientError, LogClient, batch};

#[derive(Parser, Debug)]
#[command(name = "lakelog", version, about = "Lakelog: a diskless, leaderless log store")]
struct Cli {
    /// The role to talk to: a writer (or a standalone) for logs, streams and cursors; a
    /// compactor or a cleaner (their `maintenance.listen`) for `compactor …`, `cleaner status`
    /// and `admin …`.
    #[arg(long, global = true, env = "LAKELOG_ENDPOINT", default_value = "http://127.0.0.1:7540")]
    endpoint: String,
    /// Send reads (`log read` without --follow, `log info`, `cursor read|list|stats`) to this
    /// read-only reader instead.
    #[arg(long, global = true, env = "LAKELOG_READER")]
    reader: Option<String>,
    /// CA certificates (PEM) trusted for https:// endpoints, beside the system's roots.
    #[arg(long, global = true, env = "LAKELOG_CA")]
    ca: Option<PathBuf>,
    /// A client certificate (PEM) for servers that require mutual TLS; with --key.
    #[arg(long, global = true, env = "LAKELOG_CERT", requires = "key")]
    cert: Option<PathBuf>,
    /// The private key of --cert (PEM).
    #[arg(long, global = true, env = "LAKELOG_KEY", requires = "cert")]
    key: Option<PathBuf>,
    /// A bearer token sent with every call (`lakelog auth token create`).
    #[arg(long, global = true, env = "LAKELOG_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// How `lakelog group` and `bench catchup` reach Kafka listeners: PLAINTEXT, SSL (with
    /// --ca), SASL_PLAINTEXT or SASL_SSL (Kafka's `security.protocol`).
    #[arg(
        long,
        global = true,
        env = "LAKELOG_KAFKA_SECURITY_PROTOCOL",
        default_value = "PLAINTEXT"
    )]
    kafka_security_protocol: String,
    /// SASL mechanism: SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN (over SSL only).
    #[arg(
        long,
        global = true,
        env = "LAKELOG_KAFKA_SASL_MECHANISM",
        default_value = "SCRAM-SHA-512"
    )]
    kafka_sasl_mechanism: String,
    /// SASL user.
    #[arg(long, global = true, env = "LAKELOG_KAFKA_USER")]
    kafka_user: Option<String>,
    /// SASL password (better from the environment).
    #[arg(long, global = true, env = "LAKELOG_KAFKA_PASSWORD", hide_env_values = true)]
    kafka_password: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
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
        command: auth::AuthCommand,
    },
    /// ACLs: who may do what to which stream, group or the cluster (docs/security.md).
    Acl {
        #[command(subcommand)]
        command: auth::AclCommand,
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
enum LakeCommand {
    /// A lake stream's table: its location and metadata, snapshots, and how far it is behind
    /// the log (records, and the age of the oldest record not in it).
    Status { stream: String },
}

#[derive(Subcommand, Debug)]
enum StreamCommand {
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
enum GroupCommand {
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
enum CursorCommand {
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

fn parse_property(s: &str) -> Result<(String, i64), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("`{s}` is not key=value"))?;
    let v = v.parse().map_err(|_| format!("`{v}` is not an integer"))?;
    Ok((k.to_owned(), v))
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Append throughput, acknowledgement latency, PUTs and metadata transactions per GiB.
    Append(bench::AppendArgs),
    /// Tail latency and catch-up throughput, against a raw GET baseline.
    Read(bench::ReadArgs),
    /// Records through the SDK producer to a stream at `--endpoint`: MB/s and ack latency.
    Produce(bench_produce::ProduceArgs),
    /// One log written in many small flushes while compaction runs, then read back: segments
    /// left, rewrites, and GETs against bytes / target_segment_size + 2.
    Compact(bench_compact::CompactArgs),
    /// What a lake segment (Parquet) costs one compactor core against a plain one: the same
    /// batches built into each and read back, in process, no store.
    Lake(bench_lake::LakeArgs),
    /// Lake segments through the compactor, in process: compaction MB/s per core for lake and
    /// plain segments, and table freshness (ack to visible) at the compaction interval.
    LakeCompact(bench_lake_compact::LakeCompactArgs),
    /// Ingest alone, then while a Kafka consumer group reads a backlog through the readers
    /// (on a running cluster, `make cluster`): the ingest ratio, seed 001's promise.
    Catchup(catchup::CatchupArgs),
}

#[derive(Subcommand, Debug)]
enum LogCommand {
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

/// Threads of the runtime's blocking pool (file and embedded-store I/O) at most.
const BLOCKING_THREADS: usize = 16;

/// mimalloc's options (`mi_option_e` in its `mimalloc.h`, the same numbers in its v2 and v3).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Freed memory goes back to the OS at once rather than after mimalloc's default 10 ms (and
/// arenas reserved from now on are committed as they are used): a writer frees megabyte-sized
/// flush buffers at a high rate, and kept them (docs/performance.md, "Memory under overload").
/// An operator's `MIMALLOC_*` environment still wins, as it is read at start.
fn return_freed_memory() {
    for (option, name) in [
        (MI_OPTION_PURGE_DELAY, "MIMALLOC_PURGE_DELAY"),
        (MI_OPTION_ARENA_EAGER_COMMIT, "MIMALLOC_ARENA_EAGER_COMMIT"),
    ] {
        if std::env::var_os(name).is_none() {
            #[allow(unsafe_code)]
            // SAFETY: mi_option_set only stores the value in mimalloc's option table.
            unsafe {
                libmimalloc_sys::mi_option_set(option, 0)
            };
        }
    }
}

fn main() -> ExitCode {
    return_freed_memory();
    let cli = Cli::parse();
    // Local-directory object stores and the embedded metadata store do their I/O on the
    // blocking pool. Its default of up to 512 threads, each coming and going, left one allocator
    // heap per thread holding freed flush buffers: a writer under overload peaked at 585–649 MiB
    // RSS for a heap of about 120 MiB, 350–404 MiB with 16 threads at the same throughput
    // (docs/performance.md, "Memory").
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .max_blocking_threads(BLOCKING_THREADS)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lakelog: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let msg = match e.downcast_ref::<ClientError>() {
                Some(c) => c.to_string(),
                None => one_line(&e),
            };
            eprintln!("lakelog: {}", msg.replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, each cause once: errors that already print their
/// source (`#[error("object store: {0}")]`) are not followed by it again.
fn one_line(e: &anyhow::Error) -> String {
    let mut line = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !line.contains(&cause) {
            line = format!("{line}: {cause}");
        }
    }
    line
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = ctrl_c.await;
}

/// Operator commands.
#[derive(Subcommand, Debug)]
enum AdminCommand {
    /// Run one compaction cycle now (streams' retention, then every live log; or only LOG):
    /// rewrite runs of WAL chunks as compacted segments; print what it did.
    Compact {
        log: Option<u64>,
        /// Eligible WAL chunks a log needs before it is compacted (default: the role's
        /// `maintenance.min_chunks`, 16).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        min_chunks: Option<u32>,
        #[command(flatten)]
        at: maintenance::DataDirArg,
    },
    /// Run one cleaner cycle now: delete WAL objects below the cutoff older than the grace
    /// period; print what it did.
    Clean {
        /// Objects below the cutoff younger than this are kept (readers may hold them).
        /// Default: the role's `maintenance.grace`, 10m.
        #[arg(long)]
        grace: Option<config::Duration>,
        #[command(flatten)]
        at: maintenance::DataDirArg,
    },
}

/// The cleaner.
#[derive(Subcommand, Debug)]
enum CleanerCommand {
    /// Run the cleaner from a config file: one cycle every `maintenance.interval`.
    Run {
        #[arg(long)]
        config: PathBuf,
    },
    /// The cutoff, which log or writer holds it back and by how much, the bytes reclaimable,
    /// the lowest inputs and the last cycle (of the running cleaner at --endpoint).
    Status {
        #[command(flatten)]
        at: maintenance::DataDirArg,
    },
}

/// The compactor.
#[derive(Subcommand, Debug)]
enum CompactorCommand {
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

/// The config `standalone` and `--data-dir` commands use: the embedded metadata store and a
/// local object directory inside `dir`, cluster `lakelog`.
fn data_dir_node(dir: &std::path::Path) -> config::NodeConfig {
    config::NodeConfig {
        cluster: "lakelog".to_owned(),
        metadata: config::MetadataConfig::Embedded(config::EmbeddedConfig {
            path: dir.join("meta.redb"),
        }),
        object_store: config::ObjectStoreConfig::Local(config::LocalStoreConfig {
            path: dir.join("objects"),
        }),
        telemetry: Default::default(),
        writer: Default::default(),
        catalog: Default::default(),
        reader: Default::default(),
        maintenance: Default::default(),
        auth: Default::default(),
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    kafka_client::configure(kafka_security(&cli)?);
    let sec = client::Security {
        ca: cli.ca.clone(),
        cert: cli.cert.clone(),
        key: cli.key.clone(),
        token: cli.token.clone(),
    };
    match cli.command {
        Command::CheckConfig { files } => {
            for f in files {
                config::load_file::<config::NodeConfig>(&f)?;
                println!("{}: ok", f.display());
            }
            Ok(())
        }
        Command::Admin { command: AdminCommand::Compact { log, min_chunks, at } } => {
            maintenance::compact(&cli.endpoint, &sec, &at, log, min_chunks).await
        }
        Command::Admin { command: AdminCommand::Clean { grace, at } } => {
            maintenance::clean(&cli.endpoint, &sec, &at, grace.map(|g| g.0)).await
        }
        Command::Compactor { command: CompactorCommand::Run { config } } => {
            let node: config::NodeConfig = config::load_file(&config)?;
            let _telemetry = telemetry::init(&node.telemetry, "compactor")?;
            compactor::run(&node, shutdown_signal()).await?;
            Ok(())
        }
        Command::Compactor { command: CompactorCommand::Status } => {
            maintenance::compactor_status(&cli.endpoint, &sec).await
        }
        Command::Cleaner { command: CleanerCommand::Run { config } } => {
            let node: config::NodeConfig = config::load_file(&config)?;
            let _telemetry = telemetry::init(&node.telemetry, "cleaner")?;
            cleaner::run(&node, shutdown_signal()).await?;
            Ok(())
        }
        Command::Cleaner { command: CleanerCommand::Status { at } } => {
            maintenance::cleaner_status(&cli.endpoint, &sec, &at).await
        }
        Command::Standalone { data_dir, listen, config, kafka_listen } => {
            let mut tuned = match &config {
                Some(file) => config::load_file::<config::StandaloneConfig>(file)?,
                None => config::StandaloneConfig::default(),
            };
            tuned.writer.kafka = match kafka_listen.as_str() {
                "off" => None,
                addr => {
                    let listen: SocketAddr = addr.parse().map_err(|_| {
                        anyhow::anyhow!(
                            "INVALID_ARGUMENT: --kafka-listen `{addr}` is neither host:port nor off"
                        )
                    })?;
                    let from_file = tuned.writer.kafka.take();
                    Some(config::KafkaSection {
                        listen,
                        ..from_file.unwrap_or_else(|| config::KafkaSection::on(listen))
                    })
                }
            };
            standalone(data_dir, listen, tuned).await
        }
        Command::Writer { config } => {
            let node: config::NodeConfig = config::load_file(&config)?;
            let _telemetry = telemetry::init(&node.telemetry, "writer")?;
            writer::run(&node, shutdown_signal()).await?;
            Ok(())
        }
        Command::Catalog { config } => {
            let node: config::NodeConfig = config::load_file(&config)?;
            let _telemetry = telemetry::init(&node.telemetry, "catalog")?;
            catalog_service::run(&node, shutdown_signal()).await?;
            Ok(())
        }
        Command::Reader { config } => {
            let node: config::NodeConfig = config::load_file(&config)?;
            let _telemetry = telemetry::init(&node.telemetry, "reader")?;
            reader::run(&node, shutdown_signal()).await?;
            Ok(())
        }
        Command::Bench { command: BenchCommand::Append(args) } => {
            bench::append(args, &cli.endpoint).await
        }
        Command::Bench { command: BenchCommand::Read(args) } => bench::read(args).await,
        Command::Bench { command: BenchCommand::Compact(args) } => bench_compact::run(args).await,
        Command::Bench { command: BenchCommand::Lake(args) } => bench_lake::run(args),
        Command::Bench { command: BenchCommand::LakeCompact(args) } => {
            bench_lake_compact::run(args).await
        }
        Command::Bench { command: BenchCommand::Produce(args) } => {
            bench_produce::run(args, &cli.endpoint, &sec).await
        }
        Command::Bench { command: BenchCommand::Catchup(args) } => {
            catchup::run(args, &cli.endpoint).await
        }
        Command::Log { command } => {
            let c = LogClient::connect_with(&cli.endpoint, &sec).await?;
            let follow = matches!(command, LogCommand::Read { follow: true, .. });
            let r = match &cli.reader {
                Some(r) if !follow => LogClient::connect_with(r, &sec).await?,
                _ => c.clone(),
            };
            log_command(&c, &r, command).await
        }
        Command::Cursor { command } => {
            let c = LogClient::connect_with(&cli.endpoint, &sec).await?;
            let r = match &cli.reader {
                Some(r) => LogClient::connect_with(r, &sec).await?,
                None => c.clone(),
            };
            cursor_command(&c, &r, command).await
        }
        Command::Group { kafka, command } => match command {
            GroupCommand::List => groups::list(&kafka).await,
            GroupCommand::Describe { group } => {
                let catalog = client::CatalogClient::connect_with(&cli.endpoint, &sec).await?;
                let logs = LogClient::connect_with(&cli.endpoint, &sec).await?;
                groups::describe(&kafka, &catalog, &logs, &group).await
            }
            GroupCommand::Reset { group, topic, to_earliest, to_latest, to_offset } => {
                let to = match (to_earliest, to_latest, to_offset) {
                    (_, _, Some(o)) => groups::ResetTo::Offset(o),
                    (_, true, _) => groups::ResetTo::Latest,
                    _ => groups::ResetTo::Earliest,
                };
                let catalog = client::CatalogClient::connect_with(&cli.endpoint, &sec).await?;
                let logs = LogClient::connect_with(&cli.endpoint, &sec).await?;
                groups::reset(&kafka, &catalog, &logs, &group, &topic, to).await
            }
            GroupCommand::Delete { group } => groups::delete(&kafka, &group).await,
        },
        Command::Stream { command } => {
            let c = client::CatalogClient::connect_with(&cli.endpoint, &sec).await?;
            stream_command(&c, command).await
        }
        Command::Auth { command } => {
            auth::auth(&client::AuthClient::connect_with(&cli.endpoint, &sec).await?, command).await
        }
        Command::Acl { command } => {
            auth::acl(&client::AuthClient::connect_with(&cli.endpoint, &sec).await?, command).await
        }
        Command::Lake { command: LakeCommand::Status { stream } } => {
            let c = client::CatalogClient::connect_with(&cli.endpoint, &sec).await?;
            let t = c.lake_table(&stream).await?;
            let now = logstore::Clock::now_ms(&logstore::SystemClock);
            print_lake(&mut std::io::stdout().lock(), &stream, &t, now)?;
            Ok(())
        }
        Command::Produce { stream, record_key, key_separator, zone, linger_ms } => {
            let mut cfg = client::ClientConfig::new(&cli.endpoint).with_security(sec);
            cfg.zone = zone;
            let keying = match (record_key, key_separator) {
                (Some(k), _) => streams::Keying::Fixed(k),
                (None, Some(sep)) if sep.is_empty() => {
                    anyhow::bail!("INVALID_ARGUMENT: --key-separator must not be empty")
                }
                (None, Some(sep)) => streams::Keying::Separator(sep),
                (None, None) => streams::Keying::None,
            };
            streams::produce(cfg, &stream, keying, std::time::Duration::from_millis(linger_ms))
                .await
        }
        Command::Consume { stream, partition, from_beginning, offset, max, follow, zone } => {
            let mut cfg = client::ClientConfig::new(&cli.endpoint).with_security(sec);
            cfg.zone = zone;
            let start = match (from_beginning, offset) {
                (true, _) => client::StartAt::Beginning,
                (false, Some(o)) => client::StartAt::Offset(o),
                (false, None) => client::StartAt::End,
            };
            streams::consume(cfg, &stream, partition, start, max, follow).await
        }
    }
}

/// The Kafka client's TLS and SASL from the command line.
fn kafka_security(cli: &Cli) -> anyhow::Result<kafka_client::KafkaSecurity> {
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
    Ok(kafka_client::KafkaSecurity { tls: tls.then(|| cli.ca.clone()), sasl })
}

/// `standalone`'s default `writer.min_flush_interval`: light loads are acknowledged in about
/// one file write and one metadata commit; at most 200 WAL objects a second (one per
/// `flush_interval`, if that is shorter).
const STANDALONE_MIN_FLUSH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(5);

async fn standalone(
    data_dir: PathBuf,
    listen: SocketAddr,
    tuned: config::StandaloneConfig,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        tuned.maintenance.listen.is_none(),
        "INVALID_ARGUMENT: maintenance.listen does not apply to standalone: every role serves on --listen"
    );
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("data dir {}", data_dir.display()))?;
    let mut telemetry = tuned.telemetry;
    if let Ok(level) = std::env::var("LAKELOG_LOG_LEVEL") {
        telemetry.log_level = level;
    }
    let node = config::NodeConfig {
        telemetry,
        writer: config::WriterSection {
            listen,
            // A local directory: a PUT is cheap, so flush eagerly by default.
            min_flush_interval: tuned.writer.min_flush_interval.or(Some(config::Duration(
                STANDALONE_MIN_FLUSH_INTERVAL.min(tuned.writer.flush_interval.0),
            ))),
            ..tuned.writer
        },
        maintenance: tuned.maintenance,
        auth: tuned.auth,
        ..data_dir_node(&data_dir)
    };
    let _telemetry = telemetry::init(&node.telemetry, "standalone")?;
    let url = config::url_of(listen, &node.writer.tls);
    match &node.writer.kafka {
        Some(k) => eprintln!(
            "lakelog standalone: serving on {url} (Kafka on {}), data in {}",
            k.listen,
            data_dir.display()
        ),
        None => eprintln!("lakelog standalone: serving on {url}, data in {}", data_dir.display()),
    }
    // One port serves every role: the writer's LogService, the catalog, the compactor's and the
    // cleaner's services; SIGTERM waits for a maintenance cycle under way, then the writer's
    // drain.
    writer::run_with(&node, "standalone", shutdown_signal(), |storage, role| {
        let catalog =
            catalog::Catalog::new(storage.metadata(), storage.reader().clone(), &node.cluster);
        catalog_service::install(role, catalog.clone(), &node.object_store);
        let base_uri = objstore::base_uri(&node.object_store);
        compactor::install(role, catalog, "standalone".to_owned(), &node.maintenance, base_uri);
        cleaner::install(role, storage.reader().clone(), &node.maintenance);
    })
    .await?;
    Ok(())
}

/// `w` takes writes; `r` reads (a reader with --reader, else the same writer).
async fn log_command(w: &LogClient, r: &LogClient, command: LogCommand) -> anyhow::Result<()> {
    let c = w;
    let mut out = std::io::stdout().lock();
    match command {
        LogCommand::Create => writeln!(out, "{}", c.create_log().await?)?,
        LogCommand::Append { log, batch, expected_offset } => {
            let stdin = std::io::stdin();
            let mut lines = stdin.lock().lines();
            let mut expected = expected_offset;
            let mut appended = 0u64;
            loop {
                let mut records = Vec::with_capacity(batch as usize);
                for line in lines.by_ref() {
                    records.push(batch::Record::value(line.context("reading stdin")?));
                    if records.len() == batch as usize {
                        break;
                    }
                }
                if records.is_empty() {
                    break;
                }
                let n = records.len() as u32;
                let h = c.append(log, n, batch::encode(&records)?, expected).await?;
                writeln!(out, "{}", h.offset)?;
                expected = expected.map(|_| h.offset + u64::from(h.record_count));
                appended += 1;
            }
            if appended == 0 {
                anyhow::bail!("INVALID_ARGUMENT: no records on stdin: nothing appended");
            }
        }
        LogCommand::Read { log, from, max_records, follow } => {
            let c = r;
            let info = c.info(log).await?;
            let mut at = from.unwrap_or(info.first_offset);
            let mut left = max_records.unwrap_or(u64::MAX);
            while left > 0 {
                let wait = if follow { 10_000 } else { 0 };
                let resp = c.read_entries(log, at, left.min(10_000), wait).await?;
                if resp.entries.is_empty() {
                    if follow {
                        continue;
                    }
                    break;
                }
                for e in resp.entries {
                    let Some(h) = e.header else { continue };
                    for (i, r) in batch::decode(&e.payload)?.into_iter().enumerate() {
                        let offset = h.offset + i as u64;
                        if offset >= at && left > 0 {
                            writeln!(out, "{offset}\t{}", String::from_utf8_lossy(&r.value))?;
                            left -= 1;
                        }
                    }
                    at = h.offset + u64::from(h.record_count);
                }
                out.flush()?;
            }
        }
        LogCommand::Info { log, json } => {
            let i = r.info(log).await?;
            if json {
                writeln!(
                    out,
                    "{{\"log\":{},\"state\":\"{}\",\"epoch\":{},\"first_offset\":{},\"next_offset\":{},\"entries\":{},\"bytes\":{}}}",
                    i.log_id, i.state, i.epoch, i.first_offset, i.next_offset, i.entries, i.bytes
                )?;
            } else {
                writeln!(out, "log:          {}", i.log_id)?;
                writeln!(out, "state:        {}", i.state)?;
                writeln!(out, "epoch:        {}", i.epoch)?;
                writeln!(out, "first offset: {}", i.first_offset)?;
                writeln!(out, "next offset:  {}", i.next_offset)?;
                writeln!(out, "entries:      {}", i.entries)?;
                writeln!(out, "bytes:        {}", i.bytes)?;
            }
        }
        LogCommand::Fence { log } => writeln!(out, "{}", c.fence(log).await?)?,
        LogCommand::Activate { log, epoch } => {
            let epoch = match epoch {
                Some(e) => e,
                None => c.info(log).await?.epoch,
            };
            c.activate(log, epoch).await?;
        }
        LogCommand::Trim { log, soft: _, hard, offset } => {
            let start = if hard {
                c.hard_trim(log, offset).await?
            } else {
                c.soft_trim(log, offset).await?
            };
            writeln!(out, "{start}")?;
        }
        LogCommand::Delete { log } => c.delete_log(log).await?,
    }
    Ok(())
}

async fn cursor_command(
    w: &LogClient,
    r: &LogClient,
    command: CursorCommand,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match command {
        CursorCommand::Create { log, name, offset, from_end } => {
            w.create_cursor(log, &name, offset, from_end).await?
        }
        CursorCommand::List { log } => {
            for n in r.list_cursors(log).await? {
                writeln!(out, "{n}")?;
            }
        }
        CursorCommand::Delete { log, name } => w.delete_cursor(log, &name).await?,
        CursorCommand::Read { log, name, max } => {
            let mut left = max;
            let mut from = None;
            while left > 0 {
                let resp = r.read_cursor(log, &name, left.min(10_000), from).await?;
                if resp.entries.is_empty() {
                    break;
                }
                for e in resp.entries {
                    let Some(h) = e.header else { continue };
                    for (i, rec) in batch::decode(&e.payload)?.into_iter().enumerate() {
                        if left > 0 {
                            let offset = h.offset + i as u64;
                            writeln!(out, "{offset}\t{}", String::from_utf8_lossy(&rec.value))?;
                            left -= 1;
                        }
                    }
                }
                from = Some(resp.next_offset);
            }
        }
        CursorCommand::Ack { log, name, offset, individual, properties } => {
            let props = properties.into_iter().collect();
            let md = if individual {
                w.ack_cursor(log, &name, None, vec![offset], props).await?
            } else {
                w.ack_cursor(log, &name, Some(offset), Vec::new(), props).await?
            };
            writeln!(out, "{}", md.map_or("none".to_owned(), |m| m.to_string()))?;
        }
        CursorCommand::Seek { log, name, offset } => w.seek_cursor(log, &name, offset).await?,
        CursorCommand::Stats { log, name } => {
            let s = r.cursor_stats(log, &name).await?;
            let md = s.mark_delete_offset.map_or("none".to_owned(), |m| m.to_string());
            writeln!(out, "mark-delete offset: {md}")?;
            writeln!(out, "read position:      {}", s.read_position)?;
            writeln!(out, "high watermark:     {}", s.high_watermark)?;
            writeln!(out, "backlog records:    {}", s.backlog_records)?;
            writeln!(out, "backlog bytes:      {}", s.backlog_bytes)?;
            writeln!(
                out,
                "individual acks:    {} records in {} ranges",
                s.acked_records, s.ack_ranges
            )?;
            let mut props: Vec<_> = s.properties.into_iter().collect();
            props.sort();
            for (k, v) in props {
                writeln!(out, "property:           {k}={v}")?;
            }
        }
    }
    Ok(())
}

fn print_stream(out: &mut impl Write, s: &client::Stream) -> std::io::Result<()> {
    let logs: Vec<String> = s.partitions.iter().map(|l| l.to_string()).collect();
    writeln!(out, "name:       {}", s.name)?;
    writeln!(out, "identity:   {}", s.identity)?;
    writeln!(out, "partitions: {} (logs {})", s.partitions.len(), logs.join(","))?;
    if let Some(ms) = s.retention_ms {
        writeln!(out, "retention:  {ms} ms")?;
    }
    if let Some(b) = s.retention_bytes {
        writeln!(out, "retention:  {b} bytes")?;
    }
    if s.lake_table {
        writeln!(out, "lake table: yes")?;
    }
    if let Some(ms) = s.lake_retention_ms {
        writeln!(out, "lake retention: {ms} ms")?;
    }
    Ok(())
}

/// `lakelog lake status`: the table, then one line per partition with its lag.
fn print_lake(
    out: &mut impl Write,
    stream: &str,
    t: &client::GetLakeTableResponse,
    now_ms: i64,
) -> std::io::Result<()> {
    let behind: u64 =
        t.partitions.iter().map(|p| p.log_end_offset.saturating_sub(p.table_end_offset)).sum();
    let oldest =
        t.partitions.iter().filter(|p| p.oldest_behind_ms > 0).map(|p| p.oldest_behind_ms).min();
    let lag_s = oldest.map_or(0.0, |o| (now_ms - o).max(0) as f64 / 1000.0);
    writeln!(out, "table:      lakelog.{stream}")?;
    if t.metadata_location.is_empty() {
        writeln!(out, "location:   none yet (no segment committed)")?;
    } else {
        writeln!(out, "location:   {}", t.location)?;
        writeln!(out, "metadata:   {}", t.metadata_location)?;
    }
    writeln!(out, "snapshots:  {} kept, {} data files", t.snapshots, t.data_files)?;
    if t.last_commit_ms > 0 {
        let ago = (now_ms - t.last_commit_ms).max(0) as f64 / 1000.0;
        writeln!(out, "last commit: {ago:.1} s ago")?;
    }
    writeln!(out, "lag:        {behind} records, {lag_s:.1} s")?;
    for p in &t.partitions {
        let lag = p.log_end_offset.saturating_sub(p.table_end_offset);
        writeln!(
            out,
            "partition {} (log {}): table [.., {}), log [.., {}), {lag} behind",
            p.partition, p.log_id, p.table_end_offset, p.log_end_offset
        )?;
    }
    Ok(())
}

async fn stream_command(c: &client::CatalogClient, command: StreamCommand) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match command {
        StreamCommand::Create {
            name,
            partitions,
            retention_ms,
            retention_bytes,
            lake_table,
            lake_retention_ms,
        } => {
            let req = client::CreateStreamRequest {
                name,
                partitions,
                retention_ms,
                retention_bytes,
                lake_table,
                lake_retention_ms,
            };
            print_stream(&mut out, &c.create_with(req).await?)?;
        }
        StreamCommand::List => {
            for s in c.list().await? {
                writeln!(out, "{}\t{}\t{}", s.name, s.partitions.len(), s.identity)?;
            }
        }
        StreamCommand::Describe { name } => print_stream(&mut out, &c.get(&name).await?)?,
        StreamCommand::AddPartitions { name, to } => {
            print_stream(&mut out, &c.add_partitions(&name, to).await?)?
        }
        StreamCommand::Delete { name } => c.delete(&name).await?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_error_line_names_each_cause_once() {
        #[derive(Debug)]
        struct Wraps(std::io::Error);
        impl std::fmt::Display for Wraps {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "object store: {}", self.0)
            }
        }
        impl std::error::Error for Wraps {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = anyhow::Error::new(Wraps(std::io::Error::other("no credentials")));
        assert_eq!(super::one_line(&e), "object store: no credentials");
        let e = anyhow::Error::new(std::io::Error::other("refused")).context("etcd at 127.0.0.1:1");
        assert_eq!(super::one_line(&e), "etcd at 127.0.0.1:1: refused");
    }
}
