//! `lakelog admin compact`, `lakelog admin clean` and `lakelog cleaner status`: one compaction
//! or cleaner cycle now, or what holds reclamation back, run in this process against the
//! stores of a config file or a data directory (ARCHITECTURE §5). `standalone` runs both on a
//! schedule itself.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use logstore::SystemClock;
use logstore::cleaner::{CleanReport, Cleaner, Cutoff, read_cutoff};
use logstore::compactor::Skipped;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

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
        Ok(cleaner_over(&open_reader(&node).await?, &node.cluster))
    }
}

/// A reader over a node config's metadata store and object store.
pub async fn open_reader(node: &config::NodeConfig) -> anyhow::Result<logstore::LogReader> {
    // The object store first: building it makes no request, and a config it refuses (no
    // credentials) stops the role before it reaches any server.
    let objects = objstore::build(&node.object_store)?;
    let meta = metadata::open(&node.metadata).await?;
    Ok(logstore::LogReader::new(meta, objects, &node.cluster))
}

/// Serves gRPC health on `maintenance.health_listen`, if set, following `reader`'s stores.
pub async fn serve_health(
    node: &config::NodeConfig,
    reader: &logstore::LogReader,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    let Some(addr) = node.maintenance.health_listen else { return Ok(None) };
    let served =
        logservice::health::serve_alone(addr, reader.meta().clone(), reader.objects().clone())
            .await
            .map_err(|e| anyhow::anyhow!("cannot serve health on {addr}: {e}"))?;
    Ok(Some(served))
}

/// A cleaner over `reader`'s stores, with the cleaner's default grace period and history.
fn cleaner_over(reader: &logstore::LogReader, cluster: &str) -> Cleaner {
    Cleaner::new(reader.meta().clone(), reader.objects().clone(), cluster, Arc::new(SystemClock))
}

/// Runs one compaction cycle (streams' retention first, then every live log, or just `log`)
/// and prints what it did.
pub async fn compact(
    stores: &StoreArgs,
    log: Option<u64>,
    min_chunks: usize,
) -> anyhow::Result<()> {
    let node = stores.node()?;
    let reader = open_reader(&node).await?;
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
    println!("{}", held_line(&r.cutoff));
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
    println!("{}", held_line(&cut));
    println!("lowest inputs (of {}):", cut.inputs.len());
    for (who, seq) in cut.inputs.iter().take(20) {
        println!("  {:<40} {seq}", who.to_string());
    }
    Ok(())
}

fn held_line(cut: &Cutoff) -> String {
    let (holders, rise) = cut.held_by();
    let who: Vec<String> = holders.iter().map(|h| h.to_string()).collect();
    let rise = match rise {
        Some(n) => format!("without it the cutoff would rise by {n} sequence(s)"),
        None => "nothing else bounds the cutoff".to_owned(),
    };
    format!(
        "cutoff {} at metadata revision {}: WAL objects below it are reclaimable; held back by {} ({rise})",
        cut.cutoff,
        cut.revision,
        who.join(", ")
    )
}

/// A cleaner over `reader`'s stores with the section's grace period and history.
pub fn cleaner_for(
    reader: &logstore::LogReader,
    cluster: &str,
    m: &config::MaintenanceSection,
) -> (Cleaner, Duration) {
    let mut c = cleaner_over(reader, cluster);
    c.grace = m.grace.0;
    c.history = Some(m.metadata_history.0);
    (c, m.interval.0)
}

/// Every interval: streams' retention, then a compaction cycle; logs what each did. Errors are
/// logged and the next interval tries again.
pub async fn compact_every(
    catalog: catalog::Catalog,
    id: String,
    m: config::MaintenanceSection,
    metrics: CompactorMetrics,
) {
    let cfg = logstore::compactor::CompactorConfig {
        min_chunks: m.min_chunks,
        max_segment_bytes: m.max_segment_size.0,
    };
    // Kept across cycles: a log idle for a whole cycle has its head spilled and compacted.
    let idle = logstore::compactor::IdleLogs::default();
    loop {
        tokio::time::sleep(m.interval.0).await;
        let now_ms = logstore::Clock::now_ms(&SystemClock);
        match catalog::retention::apply_all(&catalog, now_ms).await {
            Ok(t) => {
                metrics.trimmed.inc_by(t.len() as u64);
                tracing::info!(trimmed = t.len(), "retention pass");
            }
            Err(e) => {
                metrics
                    .failed
                    .get_or_create(&vec![("pass".to_owned(), "retention".to_owned())])
                    .inc();
                tracing::warn!(error = %e, "retention pass failed; retrying next interval");
            }
        }
        let start = std::time::Instant::now();
        let r =
            logstore::compactor::compact_all(catalog.logs().clone(), &id, cfg.clone(), None, &idle)
                .await;
        metrics.observe(&r, start.elapsed());
        match r {
            Ok(r) => tracing::info!(
                compacted = r.compacted.len(),
                segment_bytes = r.compacted.iter().map(|c| c.bytes).sum::<u64>(),
                skipped = r.skipped.len(),
                "compaction cycle"
            ),
            Err(e) => tracing::warn!(error = %e, "compaction cycle failed; retrying next interval"),
        }
    }
}

type Labels = Vec<(String, String)>;

/// The compactor's metrics: cycles, logs compacted, segment bytes written, logs skipped by
/// reason, retention trims, failed passes.
#[derive(Clone, Debug, Default)]
pub struct CompactorMetrics {
    cycles: Counter,
    cycle_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    compacted: Counter,
    segment_bytes: Counter,
    skipped: Family<Labels, Counter>,
    trimmed: Counter,
    failed: Family<Labels, Counter>,
    failed_logs: Counter,
}

impl CompactorMetrics {
    /// Registers the metrics in a role's registry.
    pub fn register(m: &telemetry::Metrics) -> Self {
        let c = CompactorMetrics::default();
        m.register("compactor_cycles", "Compaction cycles completed", c.cycles.clone());
        m.register(
            "compactor_last_cycle_seconds",
            "How long the last compaction cycle took",
            c.cycle_seconds.clone(),
        );
        m.register(
            "compactor_logs_compacted",
            "Logs compacted (one segment each)",
            c.compacted.clone(),
        );
        m.register(
            "compactor_segment_bytes",
            "Payload bytes written into compacted segments",
            c.segment_bytes.clone(),
        );
        m.register(
            "compactor_skipped_logs",
            "Logs a cycle left alone, by reason (claimed, too_few, deleted, raced, appended)",
            c.skipped.clone(),
        );
        m.register(
            "retention_trimmed_logs",
            "Partitions hard-trimmed by retention",
            c.trimmed.clone(),
        );
        m.register("compactor_failed_passes", "Passes that failed, by pass", c.failed.clone());
        m.register(
            "compactor_failed_logs",
            "Logs whose compaction failed (the cycle went on with the next log)",
            c.failed_logs.clone(),
        );
        c
    }

    fn observe(
        &self,
        r: &Result<logstore::compactor::CycleReport, logstore::LogError>,
        took: Duration,
    ) {
        let r = match r {
            Ok(r) => r,
            Err(_) => {
                self.failed
                    .get_or_create(&vec![("pass".to_owned(), "compaction".to_owned())])
                    .inc();
                return;
            }
        };
        self.cycles.inc();
        self.cycle_seconds.set(took.as_secs_f64());
        if !r.failed.is_empty() {
            self.failed_logs.inc_by(r.failed.len() as u64);
        }
        self.compacted.inc_by(r.compacted.len() as u64);
        self.segment_bytes.inc_by(r.compacted.iter().map(|c| c.bytes).sum());
        for (_, why) in &r.skipped {
            let reason = match why {
                Skipped::Claimed => "claimed",
                Skipped::TooFew { .. } => "too_few",
                Skipped::Deleted => "deleted",
                Skipped::Raced { .. } => "raced",
                Skipped::Appended => "appended",
            };
            self.skipped.get_or_create(&vec![("reason".to_owned(), reason.to_owned())]).inc();
        }
    }
}

/// The cleaner's metrics: the cutoff, which log or writer holds it back and by how many
/// sequences, and what it deleted.
#[derive(Clone, Debug, Default)]
pub struct CleanerMetrics {
    cutoff: Gauge,
    lag: Gauge,
    kept: Gauge,
    held_back: Family<Labels, Gauge>,
    deleted_objects: Counter,
    deleted_bytes: Counter,
    deleted_segments: Counter,
    failed_cycles: Counter,
}

impl CleanerMetrics {
    /// Registers the metrics in a role's registry.
    pub fn register(m: &telemetry::Metrics) -> Self {
        let c = CleanerMetrics::default();
        m.register(
            "cleaner_cutoff",
            "WAL sequence below which objects are reclaimable",
            c.cutoff.clone(),
        );
        m.register(
            "cleaner_lag_sequences",
            "WAL sequences allocated to writers and not yet reclaimable: next_seq minus the cutoff",
            c.lag.clone(),
        );
        m.register(
            "cleaner_kept_objects",
            "WAL objects at or above the cutoff, kept, as of the last cycle",
            c.kept.clone(),
        );
        m.register(
            "cleaner_held_back_sequences",
            "By holder at the cutoff: how far the cutoff would rise without it",
            c.held_back.clone(),
        );
        m.register("cleaner_deleted_objects", "WAL objects deleted", c.deleted_objects.clone());
        m.register(
            "cleaner_deleted_bytes",
            "Bytes of WAL objects and segments deleted",
            c.deleted_bytes.clone(),
        );
        m.register(
            "cleaner_deleted_segments",
            "Orphaned compacted segments deleted",
            c.deleted_segments.clone(),
        );
        m.register("cleaner_failed_cycles", "Cleaner cycles that failed", c.failed_cycles.clone());
        c
    }

    fn observe(&self, r: &Result<CleanReport, logstore::LogError>) {
        let Ok(r) = r else {
            self.failed_cycles.inc();
            return;
        };
        self.cutoff.set(i64::try_from(r.cutoff.cutoff).unwrap_or(i64::MAX));
        self.lag.set(i64::try_from(r.cutoff.lag()).unwrap_or(i64::MAX));
        self.kept.set(i64::try_from(r.above_cutoff).unwrap_or(i64::MAX));
        self.held_back.clear();
        let (holders, rise) = r.cutoff.held_by();
        for h in holders {
            let by = rise.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
            self.held_back.get_or_create(&vec![("holder".to_owned(), h.to_string())]).set(by);
        }
        self.deleted_objects.inc_by(r.deleted + r.segments_deleted);
        self.deleted_bytes.inc_by(r.deleted_bytes + r.segments_deleted_bytes);
        self.deleted_segments.inc_by(r.segments_deleted);
    }
}

/// One cleaner cycle every interval, logging what it did and what holds the cutoff back, and
/// updating `metrics`.
pub async fn clean_every((mut cleaner, interval): (Cleaner, Duration), metrics: CleanerMetrics) {
    loop {
        tokio::time::sleep(interval).await;
        let r = cleaner.cycle().await;
        metrics.observe(&r);
        match r {
            Ok(r) => tracing::info!(
                cutoff = r.cutoff.cutoff,
                held_by = %held_line(&r.cutoff),
                deleted = r.deleted,
                deleted_bytes = r.deleted_bytes,
                segments_deleted = r.segments_deleted,
                young = r.young,
                history_compacted_to = r.history_compacted_to,
                "cleaner cycle"
            ),
            Err(e) => tracing::warn!(error = %e, "cleaner cycle failed; retrying next interval"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use logstore::cleaner::Holder;

    #[test]
    fn a_cycle_sets_the_cutoff_its_holder_and_the_deleted_counts() {
        let metrics = telemetry::Metrics::new("cleaner");
        let c = CleanerMetrics::register(&metrics);
        let cutoff = Cutoff {
            revision: 9,
            cutoff: 40,
            inputs: vec![(Holder::Log(logstore::LogId(7)), 40), (Holder::NextSeq, 1000)],
        };
        let report = CleanReport {
            cutoff,
            deleted: 3,
            deleted_bytes: 300,
            young: 0,
            above_cutoff: 5,
            segments_deleted: 1,
            segments_deleted_bytes: 50,
            history_compacted_to: None,
        };
        c.observe(&Ok(report));
        c.observe(&Err(logstore::LogError::Internal("etcd down".to_owned())));
        let text = metrics.encode();
        for line in [
            "lakelog_cleaner_cleaner_cutoff 40",
            "lakelog_cleaner_cleaner_held_back_sequences{holder=\"log 7 (wal_floor)\"} 960",
            "lakelog_cleaner_cleaner_deleted_objects_total 4",
            "lakelog_cleaner_cleaner_deleted_bytes_total 350",
            "lakelog_cleaner_cleaner_deleted_segments_total 1",
            "lakelog_cleaner_cleaner_failed_cycles_total 1",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }
}
