//! A tower layer over a role's gRPC server that
//! - counts requests and times them, by method and status code:
//!   `lakelog_grpc_requests_total{method,code}` and `lakelog_grpc_request_seconds{method}`.
//!   The code is the response head's `grpc-status` (tonic answers an error trailers-only, so
//!   it is there) or `0` when the head carries none (a body follows: OK);
//! - when spans are exported (OTLP configured), handles each request in a `grpc.server` span
//!   whose parent is the trace context the caller sent (W3C `traceparent`, through the global
//!   propagator [`crate::init`] sets), so a role's spans join the caller's trace.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use opentelemetry::propagation::Extractor;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::Metrics;

/// Reads propagation fields from request headers.
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// The span a request is handled in, a child of the caller's trace context if it sent one.
fn server_span<B>(req: &http::Request<B>) -> tracing::Span {
    let method = req.uri().path();
    let span = tracing::info_span!(
        "grpc.server",
        otel.name = method,
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.grpc.status_code = tracing::field::Empty,
    );
    let parent =
        opentelemetry::global::get_text_map_propagator(|p| p.extract(&Headers(req.headers())));
    // Fails only when no OpenTelemetry layer is installed: then nothing is exported anyway.
    let _ = span.set_parent(parent);
    span
}

type Labels = Vec<(String, String)>;

fn latency_histogram() -> Histogram {
    // 100 µs .. ~3.3 s
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

/// Layer over a tonic server's services. Cheap to clone.
#[derive(Clone, Debug)]
pub struct GrpcServerLayer {
    requests: Family<Labels, Counter>,
    latency: Family<Labels, Histogram, fn() -> Histogram>,
}

impl GrpcServerLayer {
    /// The process's layer, its families in [`Metrics::global`] (registered once, however
    /// many servers a process runs).
    pub fn global() -> Self {
        static GLOBAL: std::sync::OnceLock<GrpcServerLayer> = std::sync::OnceLock::new();
        GLOBAL.get_or_init(|| GrpcServerLayer::new(Metrics::global())).clone()
    }

    /// Registers the two families in `metrics`.
    pub fn new(metrics: &Metrics) -> Self {
        let layer = GrpcServerLayer {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
        };
        metrics.register(
            "grpc_requests",
            "gRPC requests served, by method and status code",
            layer.requests.clone(),
        );
        metrics.register(
            "grpc_request_seconds",
            "gRPC request handling time, by method",
            layer.latency.clone(),
        );
        layer
    }
}

impl<S> tower_layer::Layer<S> for GrpcServerLayer {
    type Service = GrpcServer<S>;
    fn layer(&self, inner: S) -> GrpcServer<S> {
        GrpcServer { inner, layer: self.clone() }
    }
}

/// The layer's service.
#[derive(Clone, Debug)]
pub struct GrpcServer<S> {
    inner: S,
    layer: GrpcServerLayer,
}

impl<S, B, R> tower_service::Service<http::Request<B>> for GrpcServer<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let method = req.uri().path().to_owned();
        let start = Instant::now();
        let span = if crate::exporting() { server_span(&req) } else { tracing::Span::none() };
        let fut = span.in_scope(|| self.inner.call(req));
        let layer = self.layer.clone();
        let record = span.clone();
        let handled = async move {
            let resp = fut.await;
            let code = match &resp {
                Ok(r) => r
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("0")
                    .to_owned(),
                Err(_) => "transport".to_owned(),
            };
            record.record("rpc.grpc.status_code", code.as_str());
            let m = vec![("method".to_owned(), method)];
            layer.latency.get_or_create(&m).observe(start.elapsed().as_secs_f64());
            let mut labels = m;
            labels.push(("code".to_owned(), code));
            layer.requests.get_or_create(&labels).inc();
            resp
        };
        Box::pin(handled.instrument(span))
    }
}
