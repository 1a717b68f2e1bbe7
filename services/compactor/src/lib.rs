//! The compactor role (ARCHITECTURE §2, §5): every `maintenance.interval`, streams' retention
//! (hard trims), then a compaction cycle over every live log (claims under a lease, so several
//! compactors share the logs); its metrics; the CompactorService
//! (proto/lakelog/maintenance/v1: Status, CompactNow) and gRPC health on `maintenance.listen`.
//! One cycle at a time per process: CompactNow waits for a scheduled cycle under way, and the
//! drain waits for the cycle under way, so no cycle is cut off holding its claims.
//!
//! Depends on libs only; never on another service.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use logstore::{LogId, SystemClock};
use maintenance::compactor::{CycleReport, Skipped};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use proto::maintenance::v1 as pb;
use role::{Role, RoleError, Shutdown};
use tonic::{Request, Response, Status};

/// Runs the compactor role until `signal`: see the crate doc.
pub async fn run(
    node: &config::NodeConfig,
    signal: impl std::future::Future<Output = ()> + Send,
) -> Result<(), RoleError> {
    let m = &node.maintenance;
    let mut role = Role::open("compactor", m.listen, m.tls.as_ref(), node).await?;
    let catalog = catalog::Catalog::new(role.meta().clone(), role.reader(), &node.cluster);
    let id = logstore::membership::random_id("compactor");
    tracing::info!(%id, every = ?node.maintenance.interval.0, "compactor running");
    install(&mut role, catalog, id, &node.maintenance, objstore::base_uri(&node.object_store));
    role.serve(signal, async {}).await
}

/// Adds the compactor to `role`: its CompactorService, its metrics and its scheduled cycles
/// (the compactor role's whole work; `standalone` adds it beside the writer). `base_uri` is
/// the object store's root as lake tables name their files (`objstore::base_uri`).
pub fn install(
    role: &mut Role,
    catalog: catalog::Catalog,
    id: String,
    m: &config::MaintenanceSection,
    base_uri: String,
) -> Compactor {
    let metrics = CompactorMetrics::register(role.metrics());
    let c = Compactor::new(catalog, id, m.clone(), metrics).with_base_uri(base_uri);
    role.add_service(c.clone().server());
    let every = c.clone();
    role.spawn(move |shutdown| every.every(shutdown));
    c
}

/// The compactor: its cycles, one at a time, and what the last one did. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Compactor(Arc<State>);

#[derive(Debug)]
struct State {
    catalog: catalog::Catalog,
    id: String,
    settings: config::MaintenanceSection,
    metrics: CompactorMetrics,
    // Kept across cycles: a log idle for a whole cycle has its head spilled and compacted.
    idle: maintenance::compactor::IdleLogs,
    one_at_a_time: tokio::sync::Mutex<()>,
    last: parking_lot::Mutex<Option<pb::CompactionCycle>>,
    cycles: AtomicU64,
    /// The object store's root as lake tables name their files.
    base_uri: String,
}

impl Compactor {
    pub fn new(
        catalog: catalog::Catalog,
        id: String,
        settings: config::MaintenanceSection,
        metrics: CompactorMetrics,
    ) -> Self {
        Compactor(Arc::new(State {
            catalog,
            id,
            settings,
            metrics,
            idle: Default::default(),
            one_at_a_time: tokio::sync::Mutex::new(()),
            last: parking_lot::Mutex::new(None),
            cycles: AtomicU64::new(0),
            base_uri: "memory://".to_owned(),
        }))
    }

    /// Names lake tables' files under `base_uri` (before the compactor is shared).
    pub fn with_base_uri(self, base_uri: String) -> Self {
        match Arc::try_unwrap(self.0) {
            Ok(mut s) => {
                s.base_uri = base_uri;
                Compactor(Arc::new(s))
            }
            Err(shared) => Compactor(shared),
        }
    }

    /// The lake logs (every partition of each stream with `lake.table` set) and the compacted
    /// ones (`cleanup.policy` with `compact`), as listed now.
    async fn streams(
        &self,
    ) -> Result<
        (maintenance::lakes::LakeLogs, maintenance::compactor::CompactedLogs),
        catalog::CatalogError,
    > {
        let s = &self.0;
        let (mut logs, mut compacted) =
            (std::collections::HashMap::new(), std::collections::HashMap::new());
        for stream in s.catalog.list().await? {
            let c = &stream.config;
            if c.cleanup().compact {
                let cleanup = maintenance::compactor::Cleanup {
                    min_lag_ms: c.min_compaction_lag_ms(),
                    max_lag_ms: c.max_compaction_lag_ms(),
                    delete_retention_ms: c.delete_retention_ms(),
                    min_dirty_ratio: c.min_cleanable_dirty_ratio(),
                };
                compacted.extend(stream.partitions.iter().map(|log| (*log, cleanup)));
            }
            if !c.lake_table() {
                continue;
            }
            for (partition, log) in stream.partitions.iter().enumerate() {
                let lake = maintenance::lakes::LakeLog {
                    stream_identity: stream.identity.clone(),
                    partition: u32::try_from(partition).unwrap_or(u32::MAX),
                };
                logs.insert(*log, lake);
            }
        }
        let lakes = maintenance::lakes::LakeLogs {
            base_uri: s.base_uri.clone(),
            logs,
            row_group_bytes: None,
        };
        Ok((lakes, compacted))
    }

    /// The tonic service, ready to add to a role.
    pub fn server(self) -> pb::compactor_service_server::CompactorServiceServer<Self> {
        pb::compactor_service_server::CompactorServiceServer::new(self)
    }

    /// Every interval a cycle, until `shutdown`, heard between cycles only: a cycle is never
    /// cut off holding its claims. Errors are logged and the next interval tries again.
    pub async fn every(self, shutdown: Shutdown) {
        let interval = self.0.settings.interval.0;
        role::every(interval, shutdown, || async {
            self.cycle(None, None, false).await;
        })
        .await
    }

    /// One cycle now: streams' retention then every live log, or only `log` (no retention);
    /// `min_chunks` overrides the setting. Waits for a cycle under way first. What it did is
    /// also the status's last cycle.
    pub async fn cycle(
        &self,
        log: Option<LogId>,
        min_chunks: Option<usize>,
        on_demand: bool,
    ) -> pb::CompactionCycle {
        let s = &self.0;
        let _one = s.one_at_a_time.lock().await;
        let started_at_ms = logstore::Clock::now_ms(&SystemClock);
        let start = std::time::Instant::now();
        let mut out = pb::CompactionCycle { started_at_ms, on_demand, ..Default::default() };
        if log.is_none() {
            self.retention(started_at_ms, &mut out).await;
        }
        // Which logs are lake logs and which compacted, listed each cycle (a stream's configs
        // may have changed).
        let r = match self.streams().await {
            Ok((lakes, compacted)) => {
                let cfg = maintenance::compactor::CompactorConfig {
                    min_chunks: min_chunks.unwrap_or(s.settings.min_chunks),
                    target_segment_bytes: s.settings.target_segment_size.0,
                    settle_after: s.settings.settle_after.0,
                    lakes: Arc::new(lakes),
                    compacted: Arc::new(compacted),
                    key_map_bytes: usize::try_from(s.settings.key_map_size.0).unwrap_or(usize::MAX),
                    ..Default::default()
                };
                let logs = s.catalog.logs().clone();
                maintenance::compactor::compact_all(logs, &s.id, cfg, log, &s.idle).await
            }
            Err(catalog::CatalogError::Log(e)) => Err(e),
            Err(e) => Err(logstore::LogError::Unavailable {
                message: format!("listing streams: {e}"),
                outcome_unknown: false,
            }),
        };
        s.metrics.observe(&r, start.elapsed());
        match r {
            Ok(r) => {
                tracing::info!(
                    compacted = r.compacted.len(),
                    segment_bytes = r.compacted.iter().map(|c| c.bytes).sum::<u64>(),
                    skipped = r.skipped.len(),
                    on_demand,
                    "compaction cycle"
                );
                fill(&mut out, r);
            }
            Err(e) => {
                tracing::warn!(error = %e, "compaction cycle failed; retrying next interval");
                out.error = e.to_string();
            }
        }
        out.took_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        s.cycles.fetch_add(1, Ordering::Relaxed);
        *s.last.lock() = Some(out.clone());
        out
    }

    async fn retention(&self, now_ms: i64, out: &mut pb::CompactionCycle) {
        self.table_retention(now_ms).await;
        let s = &self.0;
        // Deletions of streams a crash or an error cut short: their logs marked deleted now.
        if let Err(e) = s.catalog.finish_deletions().await {
            tracing::warn!(error = %e, "finishing stream deletions failed; retrying next interval");
        }
        match catalog::retention::apply_all(&s.catalog, now_ms).await {
            Ok(t) => {
                s.metrics.trimmed.inc_by(t.len() as u64);
                tracing::info!(trimmed = t.len(), "retention pass");
                out.trimmed = t
                    .into_iter()
                    .map(|t| pb::RetentionTrim {
                        stream: t.stream,
                        partition: t.partition,
                        log_id: t.log.0,
                        start: t.start,
                    })
                    .collect();
            }
            Err(e) => {
                s.metrics
                    .failed
                    .get_or_create(&vec![("pass".to_owned(), "retention".to_owned())])
                    .inc();
                tracing::warn!(error = %e, "retention pass failed; retrying next interval");
            }
        }
    }

    /// Table retention (`lake.retention.ms`) of every lake stream that has it: days the table
    /// keeps no longer leave it in a delete snapshot, old snapshots expire (docs/lake.md). A
    /// table that fails is logged; the others go on.
    async fn table_retention(&self, now_ms: i64) {
        let s = &self.0;
        let streams = match s.catalog.list().await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "table retention: listing streams failed; retrying next interval");
                return;
            }
        };
        let reader = s.catalog.logs();
        for st in streams.iter().filter(|st| st.config.lake_table()) {
            let Some(ms) = st.config.lake_retention_ms() else { continue };
            let done = maintenance::lakes::retain_table(
                reader.meta().as_ref(),
                reader.objects(),
                reader.keys(),
                &s.base_uri,
                &st.identity,
                ms,
                now_ms,
            )
            .await;
            match done {
                Ok(Some(t)) => tracing::info!(
                    stream = st.name,
                    data_files = t.current_files().count(),
                    snapshots = t.snapshots.len(),
                    "table retention"
                ),
                Ok(None) => {}
                Err(e) => {
                    s.metrics
                        .failed
                        .get_or_create(&vec![("pass".to_owned(), "table_retention".to_owned())])
                        .inc();
                    tracing::warn!(stream = st.name, error = %e, "table retention failed; retrying next interval");
                }
            }
        }
    }

    /// The settings, the last cycle and the claims held now.
    pub async fn status(&self) -> Result<pb::CompactorStatusResponse, logstore::LogError> {
        let s = &self.0;
        let reader = s.catalog.logs();
        let (held, _more) =
            maintenance::compactor::claims(reader.meta().as_ref(), reader.keys()).await?;
        Ok(pb::CompactorStatusResponse {
            compactor_id: s.id.clone(),
            interval_ms: millis(s.settings.interval.0),
            min_chunks: u32::try_from(s.settings.min_chunks).unwrap_or(u32::MAX),
            cycles: s.cycles.load(Ordering::Relaxed),
            last_cycle: s.last.lock().clone(),
            claims: held
                .into_iter()
                .map(|(log, holder)| pb::Claim { log_id: log.0, holder })
                .collect(),
        })
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A skip's reason as the metrics and the API name it, and its detail.
fn reason(why: &Skipped) -> (&'static str, String) {
    match why {
        Skipped::Claimed => ("claimed", String::new()),
        Skipped::TooFew { eligible } => ("too_few", format!("{eligible} eligible chunk(s)")),
        Skipped::Deleted => ("deleted", String::new()),
        Skipped::Raced { orphan } => ("raced", format!("orphaned segment {orphan}")),
        Skipped::Appended => ("appended", String::new()),
    }
}

fn fill(out: &mut pb::CompactionCycle, r: CycleReport) {
    out.compacted = r
        .compacted
        .into_iter()
        .map(|c| pb::CompactedLog {
            log_id: c.log.0,
            first_offset: c.first_offset,
            end_offset: c.end_offset,
            chunks: c.chunks as u64,
            bytes: c.bytes,
            object: c.object,
            wal_floor: c.wal_floor,
            segments: c.segments as u64,
            table_snapshot: c.table_snapshot,
        })
        .collect();
    out.skipped = r
        .skipped
        .iter()
        .map(|(log, why)| {
            let (reason, detail) = reason(why);
            pb::SkippedLog { log_id: log.0, reason: reason.to_owned(), detail }
        })
        .collect();
    out.failed = r
        .failed
        .into_iter()
        .map(|(log, e)| pb::FailedLog { log_id: log.0, error: e.to_string() })
        .collect();
}

#[tonic::async_trait]
impl pb::compactor_service_server::CompactorService for Compactor {
    async fn status(
        &self,
        _: Request<pb::CompactorStatusRequest>,
    ) -> Result<Response<pb::CompactorStatusResponse>, Status> {
        Ok(Response::new(Compactor::status(self).await.map_err(logservice::status::to_status)?))
    }

    async fn compact_now(
        &self,
        req: Request<pb::CompactNowRequest>,
    ) -> Result<Response<pb::CompactNowResponse>, Status> {
        let req = req.into_inner();
        let min_chunks = match req.min_chunks {
            Some(0) => {
                return Err(codes::grpc::status(
                    codes::Code::InvalidArgument,
                    "min_chunks must be at least 1".to_owned(),
                ));
            }
            m => m.map(|m| m as usize),
        };
        let cycle = self.cycle(req.log_id.map(LogId), min_chunks, true).await;
        if !cycle.error.is_empty() {
            return Err(codes::grpc::status(
                codes::Code::Unavailable,
                format!("compaction cycle failed: {}", cycle.error),
            ));
        }
        Ok(Response::new(pb::CompactNowResponse { cycle: Some(cycle) }))
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
    merged: Counter,
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
            "Segments written (a log's WAL chunks compacted, or its small segments merged)",
            c.compacted.clone(),
        );
        m.register(
            "compactor_segments_merged",
            "Segments rewritten into larger ones (rewrites of bytes already compacted)",
            c.merged.clone(),
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

    fn observe(&self, r: &Result<CycleReport, logstore::LogError>, took: Duration) {
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
        self.merged.inc_by(r.compacted.iter().map(|c| c.segments as u64).sum());
        self.segment_bytes.inc_by(r.compacted.iter().map(|c| c.bytes).sum());
        for (_, why) in &r.skipped {
            let (reason, _) = reason(why);
            self.skipped.get_or_create(&vec![("reason".to_owned(), reason.to_owned())]).inc();
        }
    }
}
