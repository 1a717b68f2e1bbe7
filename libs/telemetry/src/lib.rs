//! Lakelog telemetry: one place that sets up logs, traces and metrics for a role.
//!
//! - Logs: a `tracing` subscriber with structured fields, text or JSON on stderr, filtered by
//!   `telemetry.log_level` (an `EnvFilter` directive).
//! - Traces: when `telemetry.otlp_endpoint` is set, spans are batched and exported over
//!   OTLP/gRPC (tonic, the workspace's one version) with `service.name` = the role. Each gRPC
//!   request is handled in a span that continues the caller's trace (W3C trace context).
//! - Metrics: a Prometheus registry ([`Metrics`]) that roles register their metrics in and
//!   serve as text exposition.
//!
//! Depends on no Lakelog crate but `config`.

use parking_lot::Mutex;
use std::sync::{Arc, OnceLock};

mod grpc;
mod http;

pub use grpc::{GrpcServer, GrpcServerLayer};
pub use http::{serve_metrics, set_serving, to_prometheus_text};
/// The metric types roles register (one version across the workspace).
pub use prometheus_client;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use prometheus_client::registry::Registry;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("telemetry.log_level: `{level}` is not a valid filter: {message}")]
    Filter { level: String, message: String },
    #[error("telemetry.otlp_endpoint: {0}")]
    Otlp(String),
    #[error("a global tracing subscriber is already installed")]
    AlreadyInstalled,
}

/// Whether spans are exported (an OTLP endpoint is configured): per-request spans are made
/// only then (they cost about 1 µs a request even when nothing exports them).
static EXPORTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub(crate) fn exporting() -> bool {
    EXPORTING.load(std::sync::atomic::Ordering::Relaxed)
}

/// Keeps telemetry running; flushes and shuts down trace export on drop.
#[derive(Debug)]
pub struct Telemetry {
    pub metrics: Metrics,
    tracer: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(p) = self.tracer.take()
            && let Err(e) = p.shutdown()
        {
            eprintln!("telemetry: trace export shutdown: {e}");
        }
    }
}

/// Parses the log filter; `role` only names the service in traces.
pub fn filter(config: &config::TelemetryConfig) -> Result<EnvFilter, TelemetryError> {
    EnvFilter::try_new(&config.log_level).map_err(|e| TelemetryError::Filter {
        level: config.log_level.clone(),
        message: e.to_string(),
    })
}

/// Builds the OTLP trace pipeline if one is configured. Needs a tokio runtime.
fn tracer_provider(
    config: &config::TelemetryConfig,
    role: &str,
) -> Result<Option<SdkTracerProvider>, TelemetryError> {
    let Some(endpoint) = &config.otlp_endpoint else { return Ok(None) };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| TelemetryError::Otlp(e.to_string()))?;
    let name = config.service_name.clone().unwrap_or_else(|| format!("lakelog-{role}"));
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(Resource::builder().with_service_name(name).build())
            .build(),
    ))
}

/// Installs the process-wide subscriber (logs + optional trace export) and creates the metrics
/// registry. Call once, from `main`, inside the tokio runtime.
pub fn init(config: &config::TelemetryConfig, role: &str) -> Result<Telemetry, TelemetryError> {
    let filter = filter(config)?;
    let fmt = match config.log_format {
        config::LogFormat::Text => {
            // Colours only on a terminal: a log file or collector gets plain text.
            tracing_subscriber::fmt::layer()
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_writer(std::io::stderr)
                .boxed()
        }
        config::LogFormat::Json => {
            tracing_subscriber::fmt::layer().json().with_writer(std::io::stderr).boxed()
        }
    };
    let tracer = tracer_provider(config, role)?;
    // Trace context crosses gRPC calls as W3C `traceparent` (read by the server layer).
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let otel =
        tracer.as_ref().map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer("lakelog")));
    EXPORTING.store(otel.is_some(), std::sync::atomic::Ordering::Relaxed);
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(otel)
        .try_init()
        .map_err(|_| TelemetryError::AlreadyInstalled)?;
    Ok(Telemetry { metrics: Metrics::global().clone(), tracer })
}

/// A counter that follows a monotone count kept elsewhere (a storage layer's own atomics):
/// [`Follow::to`] adds what the count grew by since the last call; [`follow_counts`] calls it
/// every second.
#[derive(Debug, Default)]
pub struct Follow {
    counter: prometheus_client::metrics::counter::Counter,
    last: std::sync::atomic::AtomicU64,
}

impl Follow {
    /// Registers a counter following a count.
    pub fn register(metrics: &Metrics, name: &str, help: &str) -> Arc<Follow> {
        let f = Arc::new(Follow::default());
        metrics.register(name, help, f.counter.clone());
        f
    }

    /// The count is `now`: the counter rises by the growth since the last call.
    pub fn to(&self, now: u64) {
        let before = self.last.swap(now, std::sync::atomic::Ordering::Relaxed);
        self.counter.inc_by(now.saturating_sub(before));
    }
}

/// Where a followed count is read from.
pub type CountSource = Box<dyn Fn() -> u64 + Send + Sync>;

/// Registers a counter per `(name, help, source)` in the process's registry and raises each to
/// its source's count every second, until the returned task is aborted.
pub fn follow_counts(sources: Vec<(&str, &str, CountSource)>) -> tokio::task::JoinHandle<()> {
    let follows: Vec<(Arc<Follow>, CountSource)> = sources
        .into_iter()
        .map(|(name, help, source)| (Follow::register(Metrics::global(), name, help), source))
        .collect();
    tokio::spawn(async move {
        loop {
            for (f, source) in &follows {
                f.to(source());
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    })
}

/// A Prometheus registry shared by the parts of one role. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
}

impl Metrics {
    /// The process's registry (prefix `lakelog_`): what `/metrics` serves; the parts of a role
    /// (or of `standalone`'s several) register here.
    pub fn global() -> &'static Metrics {
        static GLOBAL: OnceLock<Metrics> = OnceLock::new();
        GLOBAL.get_or_init(|| Metrics::new_prefixed("lakelog"))
    }

    fn new_prefixed(prefix: &str) -> Self {
        Metrics { registry: Arc::new(Mutex::new(Registry::with_prefix(prefix))) }
    }

    /// The text exposition in Prometheus' format 0.0.4 (what `/metrics` serves).
    pub fn encode_prometheus(&self) -> String {
        to_prometheus_text(&self.encode())
    }

    /// A registry whose metrics are all prefixed `lakelog_<role>_`.
    pub fn new(role: &str) -> Self {
        let registry = Registry::with_prefix(format!("lakelog_{role}"));
        Metrics { registry: Arc::new(Mutex::new(registry)) }
    }

    /// Registers a metric (a `prometheus_client` counter, gauge, histogram or family).
    pub fn register(
        &self,
        name: &str,
        help: &str,
        metric: impl prometheus_client::registry::Metric,
    ) {
        self.registry.lock().register(name, help, metric);
    }

    /// The text exposition format, as served on `/metrics`.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry.lock()) {
            tracing::error!(error = %e, "metrics encoding failed");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    #[test]
    fn invalid_log_level_is_a_clear_error() {
        let cfg =
            config::TelemetryConfig { log_level: "lakelog=loud".to_owned(), ..Default::default() };
        let err = filter(&cfg).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.starts_with("telemetry.log_level: `lakelog=loud`"), "{err}");
        let ok = config::TelemetryConfig {
            log_level: "warn,lakelog=debug".to_owned(),
            ..Default::default()
        };
        assert!(filter(&ok).is_ok());
    }

    #[test]
    fn metrics_encode_registered_counters_with_the_role_prefix() {
        let m = Metrics::new("writer");
        let appends = Counter::<u64>::default();
        m.register("appends", "Appends acknowledged", appends.clone());
        appends.inc_by(3);
        let text = m.encode();
        assert!(text.contains("lakelog_writer_appends_total 3"), "{text}");
        assert!(text.contains("# HELP lakelog_writer_appends Appends acknowledged"), "{text}");
    }

    #[tokio::test]
    async fn otlp_pipeline_builds_when_configured_and_not_otherwise() -> Result<(), TelemetryError>
    {
        let off = config::TelemetryConfig::default();
        assert!(tracer_provider(&off, "writer")?.is_none());
        let on = config::TelemetryConfig {
            otlp_endpoint: Some("http://127.0.0.1:4317".to_owned()),
            ..Default::default()
        };
        let provider = tracer_provider(&on, "writer")?;
        assert!(provider.is_some());
        Ok(())
    }
}
