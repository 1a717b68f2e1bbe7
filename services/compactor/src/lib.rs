//! The compactor role (ARCHITECTURE §2, §5): every `maintenance.interval`, streams' retention
//! (hard trims), then a compaction cycle over every live log (claims under a lease, so several
//! compactors share the logs); its metrics; gRPC health on `maintenance.health_listen`.
//! Shutdown waits for the cycle under way, so no cycle is cut off holding its claims.
//!
//! Depends on libs only; never on another service.

use std::future::Future;
use std::time::Duration;

use logstore::SystemClock;
use logstore::compactor::Skipped;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

/// Runs the compactor until `shutdown` resolves: its stores from `node`, its metrics in
/// `metrics`. Logs `compactor running` once it is.
pub async fn run(
    node: &config::NodeConfig,
    metrics: &telemetry::Metrics,
    shutdown: impl Future<Output = ()>,
) -> Result<(), logservice::RoleError> {
    let compactor_metrics = CompactorMetrics::register(metrics);
    let reader = logservice::open_reader(node).await?;
    let health = logservice::serve_maintenance_health(node, &reader).await?;
    let catalog = catalog::Catalog::new(reader.meta().clone(), reader, &node.cluster);
    let id = logstore::membership::random_id("compactor");
    tracing::info!(%id, every = ?node.maintenance.interval.0, "compactor running");
    compact_every(catalog, id, node.maintenance.clone(), compactor_metrics, shutdown).await;
    if let Some(h) = health {
        h.abort();
    }
    Ok(())
}

/// Every interval: streams' retention, then a compaction cycle; logs what each did. Errors are
/// logged and the next interval tries again. Returns once `shutdown` resolves, between cycles.
pub async fn compact_every(
    catalog: catalog::Catalog,
    id: String,
    m: config::MaintenanceSection,
    metrics: CompactorMetrics,
    shutdown: impl Future<Output = ()>,
) {
    let cfg = logstore::compactor::CompactorConfig {
        min_chunks: m.min_chunks,
        max_segment_bytes: m.max_segment_size.0,
    };
    // Kept across cycles: a log idle for a whole cycle has its head spilled and compacted.
    let idle = logstore::compactor::IdleLogs::default();
    tokio::pin!(shutdown);
    loop {
        // Shutdown is heard between cycles only: a cycle is never cut off holding its claims.
        tokio::select! {
            _ = tokio::time::sleep(m.interval.0) => {}
            _ = &mut shutdown => return,
        }
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
