//! `lakelog admin compact`, `lakelog admin clean` and `lakelog cleaner status`: one compaction
//! or cleaner cycle now, or what holds reclamation back, run in this process against the
//! stores of a config file or a data directory (ARCHITECTURE §5). The scheduled roles are the
//! `compactor` and `cleaner` crates; `standalone` runs both itself.

use std::path::PathBuf;
use std::time::Duration;

use logstore::SystemClock;
use logstore::cleaner::{Cleaner, read_cutoff};

/// Which stores: a config file's, or a standalone data directory's (stop that standalone
/// first: its embedded metadata store admits one process).
#[derive(clap::Args, Debug)]
pub struct StoreArgs {
    /// A standalone data directory.
    #[arg(long, conflicts_with = "config", required_unless_present = "config")]
    data_dir: Option<PathBuf>,
    /// A config file (its metadata and object_store sections).
    #[arg(long)]
    config: Option<PathBuf>,
}

impl StoreArgs {
    fn node(&self) -> anyhow::Result<config::NodeConfig> {
        match (&self.data_dir, &self.config) {
            (Some(dir), _) => {
                anyhow::ensure!(
                    dir.join("meta.redb").exists(),
                    "NOT_FOUND: {} is not a Lakelog data directory (no meta.redb)",
                    dir.display()
                );
                Ok(crate::data_dir_node(dir))
            }
            (None, Some(file)) => Ok(config::load_file(file)?),
            (None, None) => anyhow::bail!("INVALID_ARGUMENT: give --data-dir or --config"),
        }
    }

    async fn cleaner(&self) -> anyhow::Result<Cleaner> {
        let node = self.node()?;
        Ok(cleaner::cleaner_over(&logservice::open_reader(&node).await?, &node.cluster))
    }
}

/// Runs one compaction cycle (streams' retention first, then every live log, or just `log`)
/// and prints what it did.
pub async fn compact(
    stores: &StoreArgs,
    log: Option<u64>,
    min_chunks: usize,
) -> anyhow::Result<()> {
    let node = stores.node()?;
    let reader = logservice::open_reader(&node).await?;
    if log.is_none() {
        let catalog = catalog::Catalog::new(reader.meta().clone(), reader.clone(), &node.cluster);
        let now_ms = logstore::Clock::now_ms(&SystemClock);
        for t in catalog::retention::apply_all(&catalog, now_ms).await? {
            println!(
                "stream {} partition {} (log {}): retention trimmed to {}",
                t.stream, t.partition, t.log, t.start
            );
        }
    }
    let cfg = logstore::compactor::CompactorConfig { min_chunks, ..Default::default() };
    let id = format!("cli-{}", std::process::id());
    let r = logstore::compactor::compact_all(
        reader,
        &id,
        cfg,
        log.map(logstore::LogId),
        &Default::default(),
    )
    .await?;
    for c in &r.compacted {
        println!(
            "log {}: offsets [{}, {}) from {} WAL chunks -> {} ({} bytes); wal_floor {}",
            c.log, c.first_offset, c.end_offset, c.chunks, c.object, c.bytes, c.wal_floor
        );
    }
    for (log, why) in &r.skipped {
        println!("log {log}: skipped ({why:?})");
    }
    let bytes: u64 = r.compacted.iter().map(|c| c.bytes).sum();
    println!(
        "compacted {} logs: {} segments, {bytes} bytes written",
        r.compacted.len(),
        r.compacted.len()
    );
    Ok(())
}

/// Runs one cycle with this grace period and prints what it did.
pub async fn clean(stores: &StoreArgs, grace: Duration) -> anyhow::Result<()> {
    let mut c = stores.cleaner().await?;
    c.grace = grace;
    // A one-off run has no earlier revisions to compact the history to.
    c.history = None;
    let r = c.cycle().await?;
    println!("{}", cleaner::held_line(&r.cutoff));
    println!(
        "deleted {} WAL objects ({} bytes); kept {} below the cutoff younger than {:?}, {} at or above it",
        r.deleted, r.deleted_bytes, r.young, grace, r.above_cutoff
    );
    println!(
        "deleted {} compacted segments ({} bytes) no index record references",
        r.segments_deleted, r.segments_deleted_bytes
    );
    Ok(())
}

/// Prints the cutoff, what holds it, and the lowest inputs.
pub async fn status(stores: &StoreArgs) -> anyhow::Result<()> {
    let node = stores.node()?;
    let meta = metadata::open(&node.metadata).await?;
    let cut = read_cutoff(meta.as_ref(), &logstore::keys::Keys::new(&node.cluster)).await?;
    println!("{}", cleaner::held_line(&cut));
    println!("lowest inputs (of {}):", cut.inputs.len());
    for (who, seq) in cut.inputs.iter().take(20) {
        println!("  {:<40} {seq}", who.to_string());
    }
    Ok(())
}
