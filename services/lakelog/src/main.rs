//! The `lakelog` command: every role (`lakelog writer|catalog|reader --config FILE`,
//! `lakelog compactor|cleaner run --config FILE`), `lakelog standalone` (the writer, the
//! catalog, the compactor and the cleaner in one process on one port, with the embedded
//! metadata store and a local object-store directory), and the clients of their gRPC APIs
//! (`log …`, `stream …`, `cursor …`, `produce`, `consume`, `compactor status`,
//! `cleaner status`, `admin …`).
//!
//! The composition root: the only crate that may depend on service crates.

mod admin;
mod auth;
mod bench;
mod cli;
mod commands;
mod groups;
mod kafka_client;

mod standalone;
mod streams;

// `--features system-allocator` builds with the C library's allocator instead, for heap
// profilers that hook malloc (heaptrack; docs/performance.md, "Memory under overload").
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use clap::Parser;
use client::{ClientError, LogClient};

use cli::{
    AdminCommand, CleanerCommand, Cli, Command, CompactorCommand, GroupCommand, LakeCommand,
    LogCommand,
};

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

pub(crate) async fn shutdown_signal() {
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

async fn run(cli: Cli) -> anyhow::Result<()> {
    kafka_client::configure(cli::kafka_security(&cli)?);
    let sec = client::Security {
        ca: cli.ca.clone(),
        cert: cli.cert.clone(),
        key: cli.key.clone(),
        token: cli.token.clone(),
    };
    let (endpoint, reader) = (cli.endpoint, cli.reader);
    match cli.command {
        Command::CheckConfig { files } => {
            for f in files {
                config::load_file::<config::NodeConfig>(&f)?;
                println!("{}: ok", f.display());
            }
            Ok(())
        }
        Command::Standalone { data_dir, listen, config, kafka_listen, latency_profile } => {
            let tuned = standalone::tuned(config.as_deref(), &kafka_listen)?;
            let latency = latency_profile
                .map(|p| config::latency::LatencyProfile::named(&p))
                .transpose()
                .map_err(|e| anyhow::anyhow!("INVALID_ARGUMENT: {e}"))?;
            standalone::standalone(data_dir, listen, tuned, latency).await
        }
        Command::Writer { config } => role(Role::Writer, &config).await,
        Command::Catalog { config } => role(Role::Catalog, &config).await,
        Command::Reader { config } => role(Role::Reader, &config).await,
        Command::Compactor { command: CompactorCommand::Run { config } } => {
            role(Role::Compactor, &config).await
        }
        Command::Cleaner { command: CleanerCommand::Run { config } } => {
            role(Role::Cleaner, &config).await
        }
        Command::Compactor { command: CompactorCommand::Status } => {
            admin::compactor_status(&endpoint, &sec).await
        }
        Command::Cleaner { command: CleanerCommand::Status { at } } => {
            admin::cleaner_status(&endpoint, &sec, &at).await
        }
        Command::Admin { command: AdminCommand::Compact { log, min_chunks, at } } => {
            admin::compact(&endpoint, &sec, &at, log, min_chunks).await
        }
        Command::Admin { command: AdminCommand::Clean { grace, at } } => {
            admin::clean(&endpoint, &sec, &at, grace.map(|g| g.0)).await
        }
        Command::Bench { command } => bench::run(command, &endpoint, &sec).await,
        Command::Log { command } => {
            let c = LogClient::connect_with(&endpoint, &sec).await?;
            let follow = matches!(command, LogCommand::Read { follow: true, .. });
            let r = match &reader {
                Some(r) if !follow => LogClient::connect_with(r, &sec).await?,
                _ => c.clone(),
            };
            commands::log_command(&c, &r, command).await
        }
        Command::Cursor { command } => {
            let c = LogClient::connect_with(&endpoint, &sec).await?;
            let r = match &reader {
                Some(r) => LogClient::connect_with(r, &sec).await?,
                None => c.clone(),
            };
            commands::cursor_command(&c, &r, command).await
        }
        Command::Group { kafka, command } => group(&kafka, command, &endpoint, &sec).await,
        Command::Stream { command } => {
            let c = client::CatalogClient::connect_with(&endpoint, &sec).await?;
            commands::stream_command(&c, command).await
        }
        Command::Auth { command } => {
            auth::auth(&client::AuthClient::connect_with(&endpoint, &sec).await?, command).await
        }
        Command::Acl { command } => {
            auth::acl(&client::AuthClient::connect_with(&endpoint, &sec).await?, command).await
        }
        Command::Lake { command: LakeCommand::Status { stream } } => {
            let c = client::CatalogClient::connect_with(&endpoint, &sec).await?;
            let t = c.lake_table(&stream).await?;
            let now = logstore::Clock::now_ms(&logstore::SystemClock);
            commands::print_lake(&mut std::io::stdout().lock(), &stream, &t, now)?;
            Ok(())
        }
        Command::Produce { stream, record_key, key_separator, zone, linger_ms } => {
            let mut cfg = client::ClientConfig::new(&endpoint).with_security(sec);
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
            let mut cfg = client::ClientConfig::new(&endpoint).with_security(sec);
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

/// The roles a config file runs.
#[derive(Clone, Copy, Debug)]
enum Role {
    Writer,
    Catalog,
    Reader,
    Compactor,
    Cleaner,
}

/// Runs one role from its config file until SIGINT or SIGTERM.
async fn role(role: Role, config: &std::path::Path) -> anyhow::Result<()> {
    let node: config::NodeConfig = config::load_file(config)?;
    let name = format!("{role:?}").to_ascii_lowercase();
    let _telemetry = telemetry::init(&node.telemetry, &name)?;
    match role {
        Role::Writer => writer::run(&node, shutdown_signal()).await?,
        Role::Catalog => catalog_service::run(&node, shutdown_signal()).await?,
        Role::Reader => reader::run(&node, shutdown_signal()).await?,
        Role::Compactor => compactor::run(&node, shutdown_signal()).await?,
        Role::Cleaner => cleaner::run(&node, shutdown_signal()).await?,
    }
    Ok(())
}

/// `lakelog group …`: over the Kafka port, and the catalog and logs for `describe` and `reset`.
async fn group(
    kafka: &str,
    command: GroupCommand,
    endpoint: &str,
    sec: &client::Security,
) -> anyhow::Result<()> {
    match command {
        GroupCommand::List => groups::list(kafka).await,
        GroupCommand::Describe { group } => {
            let catalog = client::CatalogClient::connect_with(endpoint, sec).await?;
            let logs = LogClient::connect_with(endpoint, sec).await?;
            groups::describe(kafka, &catalog, &logs, &group).await
        }
        GroupCommand::Reset { group, topic, to_earliest, to_latest, to_offset } => {
            let to = match (to_earliest, to_latest, to_offset) {
                (_, _, Some(o)) => groups::ResetTo::Offset(o),
                (_, true, _) => groups::ResetTo::Latest,
                _ => groups::ResetTo::Earliest,
            };
            let catalog = client::CatalogClient::connect_with(endpoint, sec).await?;
            let logs = LogClient::connect_with(endpoint, sec).await?;
            groups::reset(kafka, &catalog, &logs, &group, &topic, to).await
        }
        GroupCommand::Delete { group } => groups::delete(kafka, &group).await,
    }
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
