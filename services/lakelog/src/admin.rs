//! `lakelog compactor status`, `lakelog cleaner status` and `lakelog admin compact|clean`:
//! asked of the running compactor, cleaner or standalone at `--endpoint` over gRPC
//! (proto/lakelog/maintenance/v1), or, with `--data-dir`, run in this process against a
//! stopped standalone's data directory (ARCHITECTURE §5). Either way the answer is printed
//! the same way.

use std::path::PathBuf;
use std::time::Duration;

use client::maintenance_pb as pb;

/// Where the work runs: the role at `--endpoint`, or this process over a data directory.
#[derive(clap::Args, Debug)]
pub struct DataDirArg {
    /// Run in this process against a stopped standalone's data directory instead of asking
    /// the running role at --endpoint (the embedded metadata store admits one process).
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

impl DataDirArg {
    /// The data directory's stores, if one was given.
    async fn open(&self) -> anyhow::Result<Option<(config::NodeConfig, logstore::LogReader)>> {
        let Some(dir) = &self.data_dir else { return Ok(None) };
        anyhow::ensure!(
            dir.join("meta.redb").exists(),
            "NOT_FOUND: {} is not a Lakelog data directory (no meta.redb)",
            dir.display()
        );
        let node = crate::standalone::data_dir_node(dir);
        let objects = objstore::build(&node.object_store)?;
        let meta = metadata::open(&node.metadata).await?;
        let reader = logstore::LogReader::new(meta, objects, &node.cluster);
        Ok(Some((node, reader)))
    }
}

/// A cleaner in this process over a data directory's stores, with the default settings.
fn local_cleaner(node: config::NodeConfig, reader: logstore::LogReader) -> cleaner::CleanerRole {
    cleaner::CleanerRole::new(reader, &node.cluster, node.maintenance, Default::default())
}

/// One compaction cycle now (streams' retention first, then every live log, or just `log`).
pub async fn compact(
    endpoint: &str,
    sec: &client::Security,
    at: &DataDirArg,
    log: Option<u64>,
    min_chunks: Option<u32>,
) -> anyhow::Result<()> {
    let cycle = match at.open().await? {
        Some((node, reader)) => {
            let catalog = catalog::Catalog::new(reader.meta().clone(), reader, &node.cluster);
            let id = format!("cli-{}", std::process::id());
            let base_uri = objstore::base_uri(&node.object_store);
            let c = compactor::Compactor::new(catalog, id, node.maintenance, Default::default())
                .with_base_uri(base_uri);
            let cycle = c.cycle(log.map(logstore::LogId), min_chunks.map(|m| m as usize), true);
            let cycle = cycle.await;
            anyhow::ensure!(cycle.error.is_empty(), "compaction cycle failed: {}", cycle.error);
            cycle
        }
        None => {
            client::CompactorClient::connect_with(endpoint, sec)
                .await?
                .compact_now(log, min_chunks)
                .await?
        }
    };
    print_compaction(&cycle);
    Ok(())
}

/// One cleaner cycle now, with `grace` instead of the role's if given.
pub async fn clean(
    endpoint: &str,
    sec: &client::Security,
    at: &DataDirArg,
    grace: Option<Duration>,
) -> anyhow::Result<()> {
    let cycle = match at.open().await? {
        Some((node, reader)) => {
            let cycle = local_cleaner(node, reader).cycle(grace, true).await;
            anyhow::ensure!(cycle.error.is_empty(), "cleaner cycle failed: {}", cycle.error);
            cycle
        }
        None => {
            let grace = grace.map(|g| u64::try_from(g.as_millis()).unwrap_or(u64::MAX));
            client::CleanerClient::connect_with(endpoint, sec).await?.clean_now(grace).await?
        }
    };
    print_clean(&cycle);
    Ok(())
}

/// The cutoff, what holds it back and by how much, the WAL objects against it, the last cycle.
pub async fn cleaner_status(
    endpoint: &str,
    sec: &client::Security,
    at: &DataDirArg,
) -> anyhow::Result<()> {
    let status = match at.open().await? {
        Some((node, reader)) => local_cleaner(node, reader).status().await?,
        None => client::CleanerClient::connect_with(endpoint, sec).await?.status().await?,
    };
    let cut = status.cutoff.unwrap_or_default();
    println!("{}", cleaner::held_line(&cut));
    println!(
        "reclaimable now: {} WAL objects ({} bytes); below the cutoff but younger than {}: {} ({} bytes); at or above it: {} ({} bytes)",
        status.reclaimable_objects,
        status.reclaimable_bytes,
        ms(status.grace_ms),
        status.young_objects,
        status.young_bytes,
        status.kept_objects,
        status.kept_bytes
    );
    println!("lag: {} sequence(s) handed out and not yet reclaimable", cut.lag);
    println!("lowest inputs (of {}):", cut.inputs);
    for i in &cut.lowest_inputs {
        println!("  {:<40} {}", i.holder, i.sequence);
    }
    match &status.last_cycle {
        Some(c) => println!("last cycle: {}", clean_summary(c)),
        None if at.data_dir.is_none() => println!("last cycle: none yet"),
        None => {}
    }
    Ok(())
}

/// A running compactor's settings, last cycle and the claims held now.
pub async fn compactor_status(endpoint: &str, sec: &client::Security) -> anyhow::Result<()> {
    let s = client::CompactorClient::connect_with(endpoint, sec).await?.status().await?;
    println!(
        "compactor {}: a cycle every {}, logs need {} eligible WAL chunks; {} cycle(s) since it started",
        s.compactor_id,
        ms(s.interval_ms),
        s.min_chunks,
        s.cycles
    );
    if s.claims.is_empty() {
        println!("claims held now: none");
    }
    for c in &s.claims {
        println!("claim: log {} held by {}", c.log_id, c.holder);
    }
    match &s.last_cycle {
        Some(c) => {
            println!("last cycle:");
            print_compaction(c);
        }
        None => println!("last cycle: none yet"),
    }
    Ok(())
}

fn ms(n: u64) -> String {
    format!("{:?}", Duration::from_millis(n))
}

fn print_compaction(c: &pb::CompactionCycle) {
    for t in &c.trimmed {
        println!(
            "stream {} partition {} (log {}): retention trimmed to {}",
            t.stream, t.partition, t.log_id, t.start
        );
    }
    for c in &c.compacted {
        let merged = match c.segments {
            0 => String::new(),
            n => format!(" and {n} segments"),
        };
        let table = match c.table_snapshot {
            Some(s) => format!("; table snapshot {s}"),
            None => String::new(),
        };
        println!(
            "log {}: offsets [{}, {}) from {} WAL chunks{merged} -> {} ({} bytes); wal_floor {}{table}",
            c.log_id, c.first_offset, c.end_offset, c.chunks, c.object, c.bytes, c.wal_floor
        );
    }
    for s in &c.skipped {
        match s.detail.as_str() {
            "" => println!("log {}: skipped ({})", s.log_id, s.reason),
            d => println!("log {}: skipped ({}: {d})", s.log_id, s.reason),
        }
    }
    for f in &c.failed {
        println!("log {}: failed: {}", f.log_id, f.error);
    }
    if !c.error.is_empty() {
        println!("cycle failed: {}", c.error);
    }
    let bytes: u64 = c.compacted.iter().map(|c| c.bytes).sum();
    let logs: std::collections::BTreeSet<u64> = c.compacted.iter().map(|c| c.log_id).collect();
    println!(
        "compacted {} logs: {} segments, {bytes} bytes written in {}",
        logs.len(),
        c.compacted.len(),
        ms(c.took_ms)
    );
}

fn clean_summary(c: &pb::CleanCycle) -> String {
    if !c.error.is_empty() {
        return format!("failed: {}", c.error);
    }
    format!(
        "deleted {} WAL objects ({} bytes) and {} orphaned segments ({} bytes) in {}",
        c.deleted,
        c.deleted_bytes,
        c.segments_deleted,
        c.segments_deleted_bytes,
        ms(c.took_ms)
    )
}

fn print_clean(c: &pb::CleanCycle) {
    println!("{}", cleaner::held_line(&c.cutoff.clone().unwrap_or_default()));
    println!(
        "deleted {} WAL objects ({} bytes); kept {} below the cutoff younger than {}, {} at or above it",
        c.deleted,
        c.deleted_bytes,
        c.young,
        ms(c.grace_ms),
        c.above_cutoff
    );
    println!(
        "deleted {} compacted segments ({} bytes) no index record references",
        c.segments_deleted, c.segments_deleted_bytes
    );
}
