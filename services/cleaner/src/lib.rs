//! The WAL cleaner role (ARCHITECTURE §2, §5), the only role that deletes objects: every
//! `maintenance.interval` a cleaner cycle (the cutoff at one metadata revision, WAL objects
//! below it and past the grace period deleted, orphan segments, etcd history compaction); its
//! metrics; the CleanerService (proto/lakelog/maintenance/v1: Status, CleanNow) and gRPC health
//! on `maintenance.listen`. One cycle at a time per process; the drain waits for the cycle
//! under way.
//!
//! Depends on libs only; never on another service.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use logstore::SystemClock;
use maintenance::cleaner::{CleanReport, Cleaner, Cutoff};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use proto::maintenance::v1 as pb;
use role::{Role, RoleError, Shutdown};
use tonic::{Request, Response, Status};

/// Inputs of the cutoff a status lists, lowest first.
pub const LOWEST_INPUTS: usize = 20;

/// Runs the cleaner role until `signal`: see the crate doc.
pub async fn run(
    node: &config::NodeConfig,
    signal: impl std::future::Future<Output = ()> + Send,
) -> Result<(), RoleError> {
    let m = &node.maintenance;
    let mut role = Role::open("cleaner", m.listen, m.tls.as_ref(), node).await?;
    tracing::info!(every = ?node.maintenance.interval.0, "cleaner running");
    let reader = role.reader();
    install(&mut role, reader, &node.maintenance);
    role.serve(signal, async {}).await
}

/// Adds the cleaner to `role`: its CleanerService, its metrics and its scheduled cycles over
/// `reader`'s stores (the cleaner role's whole work; `standalone` adds it beside the writer).
pub fn install(
    role: &mut Role,
    reader: logstore::LogReader,
    m: &config::MaintenanceSection,
) -> CleanerRole {
    let metrics = CleanerMetrics::register(role.metrics());
    let c = CleanerRole::new(reader, role.cluster(), m.clone(), metrics);
    role.add_service(c.clone().server());
    let every = c.clone();
    role.spawn(move |shutdown| every.every(shutdown));
    c
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
) -> Cleaner {
    let mut c = cleaner_over(reader, cluster);
    c.grace = m.grace.0;
    c.history = Some(m.metadata_history.0);
    c
}

/// One line: the cutoff, its revision, what holds it and how far it would rise without it.
pub fn held_line(cut: &pb::Cutoff) -> String {
    let rise = match cut.rise_without {
        Some(n) => format!("without it the cutoff would rise by {n} sequence(s)"),
        None => "nothing else bounds the cutoff".to_owned(),
    };
    format!(
        "cutoff {} at metadata revision {}: WAL objects below it are reclaimable; held back by {} ({rise})",
        cut.cutoff,
        cut.revision,
        cut.held_by.join(", ")
    )
}

/// The cutoff as the API shows it: who holds it, by how much, the lowest inputs.
pub fn to_pb(cut: &Cutoff) -> pb::Cutoff {
    let (holders, rise) = cut.held_by();
    pb::Cutoff {
        revision: cut.revision,
        cutoff: cut.cutoff,
        held_by: holders.iter().map(|h| h.to_string()).collect(),
        rise_without: rise,
        lag: cut.lag(),
        lowest_inputs: cut
            .inputs
            .iter()
            .take(LOWEST_INPUTS)
            .map(|(h, seq)| pb::CutoffInput { holder: h.to_string(), sequence: *seq })
            .collect(),
        inputs: cut.inputs.len() as u64,
    }
}

/// The cleaner role: its cycles, one at a time, and what the last one did. Cheap to clone.
#[derive(Clone, Debug)]
pub struct CleanerRole(Arc<State>);

#[derive(Debug)]
struct State {
    reader: logstore::LogReader,
    cleaner: tokio::sync::Mutex<Cleaner>,
    settings: config::MaintenanceSection,
    metrics: CleanerMetrics,
    last: parking_lot::Mutex<Option<pb::CleanCycle>>,
    cycles: AtomicU64,
}

impl CleanerRole {
    /// A cleaner over `reader`'s stores with `settings`' grace period and history.
    pub fn new(
        reader: logstore::LogReader,
        cluster: &str,
        settings: config::MaintenanceSection,
        metrics: CleanerMetrics,
    ) -> Self {
        let cleaner = cleaner_for(&reader, cluster, &settings);
        CleanerRole(Arc::new(State {
            reader,
            cleaner: tokio::sync::Mutex::new(cleaner),
            settings,
            metrics,
            last: parking_lot::Mutex::new(None),
            cycles: AtomicU64::new(0),
        }))
    }

    /// The tonic service, ready to add to a role.
    pub fn server(self) -> pb::cleaner_service_server::CleanerServiceServer<Self> {
        pb::cleaner_service_server::CleanerServiceServer::new(self)
    }

    /// Every interval a cycle, until `shutdown`, heard between cycles only.
    pub async fn every(self, shutdown: Shutdown) {
        let interval = self.0.settings.interval.0;
        role::every(interval, shutdown, || async {
            self.cycle(None, false).await;
        })
        .await
    }

    /// One cycle now, with `grace` instead of the setting if given. Waits for a cycle under
    /// way first. What it did is also the status's last cycle.
    pub async fn cycle(&self, grace: Option<Duration>, on_demand: bool) -> pb::CleanCycle {
        let s = &self.0;
        let mut cleaner = s.cleaner.lock().await;
        let grace = grace.unwrap_or(s.settings.grace.0);
        cleaner.grace = grace;
        let started_at_ms = logstore::Clock::now_ms(&SystemClock);
        let start = std::time::Instant::now();
        let r = cleaner.cycle().await;
        cleaner.grace = s.settings.grace.0;
        drop(cleaner);
        s.metrics.observe(&r);
        let mut out = pb::CleanCycle {
            started_at_ms,
            on_demand,
            grace_ms: millis(grace),
            ..Default::default()
        };
        match r {
            Ok(r) => {
                tracing::info!(
                    cutoff = r.cutoff.cutoff,
                    held_by = %held_line(&to_pb(&r.cutoff)),
                    deleted = r.deleted,
                    deleted_bytes = r.deleted_bytes,
                    segments_deleted = r.segments_deleted,
                    checkpoints_deleted = r.checkpoints_deleted,
                    young = r.young,
                    history_compacted_to = r.history_compacted_to,
                    on_demand,
                    "cleaner cycle"
                );
                out.cutoff = Some(to_pb(&r.cutoff));
                out.deleted = r.deleted;
                out.deleted_bytes = r.deleted_bytes;
                out.young = r.young;
                out.above_cutoff = r.above_cutoff;
                out.segments_deleted = r.segments_deleted;
                out.segments_deleted_bytes = r.segments_deleted_bytes;
                out.checkpoints_deleted = r.checkpoints_deleted;
                out.history_compacted_to = r.history_compacted_to;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cleaner cycle failed; retrying next interval");
                out.error = e.to_string();
            }
        }
        out.took_ms = millis(start.elapsed());
        s.cycles.fetch_add(1, Ordering::Relaxed);
        *s.last.lock() = Some(out.clone());
        out
    }

    /// The cutoff read now, the WAL objects against it, the settings and the last cycle.
    pub async fn status(&self) -> Result<pb::CleanerStatusResponse, logstore::LogError> {
        let s = &self.0;
        let cut =
            maintenance::cleaner::read_cutoff(s.reader.meta().as_ref(), s.reader.keys()).await?;
        let now_ms = logstore::Clock::now_ms(&SystemClock);
        let objects = s.reader.objects().as_ref();
        let survey =
            maintenance::cleaner::survey(objects, cut.cutoff, s.settings.grace.0, now_ms).await?;
        Ok(pb::CleanerStatusResponse {
            cutoff: Some(to_pb(&cut)),
            reclaimable_objects: survey.reclaimable.objects,
            reclaimable_bytes: survey.reclaimable.bytes,
            young_objects: survey.young.objects,
            young_bytes: survey.young.bytes,
            kept_objects: survey.kept.objects,
            kept_bytes: survey.kept.bytes,
            grace_ms: millis(s.settings.grace.0),
            interval_ms: millis(s.settings.interval.0),
            cycles: s.cycles.load(Ordering::Relaxed),
            last_cycle: s.last.lock().clone(),
        })
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[tonic::async_trait]
impl pb::cleaner_service_server::CleanerService for CleanerRole {
    async fn status(
        &self,
        _: Request<pb::CleanerStatusRequest>,
    ) -> Result<Response<pb::CleanerStatusResponse>, Status> {
        Ok(Response::new(CleanerRole::status(self).await.map_err(logservice::status::to_status)?))
    }

    async fn clean_now(
        &self,
        req: Request<pb::CleanNowRequest>,
    ) -> Result<Response<pb::CleanNowResponse>, Status> {
        let grace = req.into_inner().grace_ms.map(Duration::from_millis);
        let cycle = self.cycle(grace, true).await;
        if !cycle.error.is_empty() {
            return Err(codes::grpc::status(
                codes::Code::Unavailable,
                format!("cleaner cycle failed: {}", cycle.error),
            ));
        }
        Ok(Response::new(pb::CleanNowResponse { cycle: Some(cycle) }))
    }
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
        self.deleted_objects.inc_by(r.deleted + r.segments_deleted + r.checkpoints_deleted);
        self.deleted_bytes.inc_by(r.deleted_bytes + r.segments_deleted_bytes);
        self.deleted_segments.inc_by(r.segments_deleted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use maintenance::cleaner::Holder;

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
            checkpoints_deleted: 2,
            history_compacted_to: None,
        };
        c.observe(&Ok(report));
        c.observe(&Err(logstore::LogError::Internal("etcd down".to_owned())));
        let text = metrics.encode();
        for line in [
            "lakelog_cleaner_cleaner_cutoff 40",
            "lakelog_cleaner_cleaner_held_back_sequences{holder=\"log 7 (wal_floor)\"} 960",
            "lakelog_cleaner_cleaner_deleted_objects_total 6",
            "lakelog_cleaner_cleaner_deleted_bytes_total 350",
            "lakelog_cleaner_cleaner_deleted_segments_total 1",
            "lakelog_cleaner_cleaner_failed_cycles_total 1",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }
}
