//! The WAL cleaner role (ARCHITECTURE §2, §5), the only role that deletes objects: every
//! `maintenance.interval` a cleaner cycle (the cutoff at one metadata revision, WAL objects
//! below it and past the grace period deleted, orphan segments, etcd history compaction); its
//! metrics; gRPC health on `maintenance.health_listen`. Shutdown waits for the cycle under way.
//!
//! Depends on libs only; never on another service.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use logstore::SystemClock;
use logstore::cleaner::{CleanReport, Cleaner, Cutoff};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

/// Runs the cleaner until `shutdown` resolves: its stores from `node`, its metrics in
/// `metrics`. Logs `cleaner running` once it is.
pub async fn run(
    node: &config::NodeConfig,
    metrics: &telemetry::Metrics,
    shutdown: impl Future<Output = ()>,
) -> Result<(), logservice::RoleError> {
    let cleaner_metrics = CleanerMetrics::register(metrics);
    let reader = logservice::open_reader(node).await?;
    let health = logservice::serve_maintenance_health(node, &reader).await?;
    let cleaner = cleaner_for(&reader, &node.cluster, &node.maintenance);
    tracing::info!(every = ?node.maintenance.interval.0, "cleaner running");
    clean_every(cleaner, cleaner_metrics, shutdown).await;
    if let Some(h) = health {
        h.abort();
    }
    Ok(())
}

/// A cleaner over `reader`'s stores, with the cleaner's default grace period and history.
pub fn cleaner_over(reader: &logstore::LogReader, cluster: &str) -> Cleaner {
    Cleaner::new(reader.meta().clone(), reader.objects().clone(), cluster, Arc::new(SystemClock))
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

/// One line: the cutoff, its revision, what holds it and how far it would rise without it.
pub fn held_line(cut: &Cutoff) -> String {
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

type Labels = Vec<(String, String)>;

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
pub async fn clean_every(
    (mut cleaner, interval): (Cleaner, Duration),
    metrics: CleanerMetrics,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        // Shutdown is heard between cycles only.
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = &mut shutdown => return,
        }
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
