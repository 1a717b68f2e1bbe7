//! The writer role: serves the `LogService` (proto/lakelog/log/v1) over gRPC in front of
//! [`logstore::LogStorage`]. A domain core (log storage) and a thin adapter ([`service`])
//! that converts proto ↔ domain types and errors ([`status`]: the one error mapping).
//!
//! Depends on libs only; never on another service.

pub use logservice::{service, status};

pub mod metrics;

use std::future::Future;
use std::sync::Arc;

use logstore::{LogStorage, LogStorageConfig, SystemClock};
use proto::log::v1::log_service_server::LogServiceServer;
use tokio::net::TcpListener;

/// Concurrent requests one client connection may have open.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 256;

/// Why the role could not start or stopped.
pub type WriterError = logservice::RoleError;

/// A random writer id, when the config names none: `writer-<pid>-<nanos>`.
pub fn default_writer_id() -> String {
    logstore::membership::random_id("writer")
}

/// Log-storage settings from the node config.
pub fn storage_config(node: &config::NodeConfig) -> LogStorageConfig {
    let w = &node.writer;
    let mut c =
        LogStorageConfig::new(&node.cluster, w.id.clone().unwrap_or_else(default_writer_id));
    c.zone = w.zone.clone();
    c.advertise = w.advertise.clone().unwrap_or_else(|| format!("http://{}", w.listen));
    c.flush_interval = w.flush_interval.0;
    c.flush_bytes = usize::try_from(w.flush_bytes.0).unwrap_or(usize::MAX);
    c.max_entry_bytes = usize::try_from(w.max_entry_size.0).unwrap_or(usize::MAX);
    c.buffer_bytes = usize::try_from(w.buffer_size.0).unwrap_or(usize::MAX);
    c.flush_deadline = w.flush_deadline.0;
    c.lease_ttl = w.lease_ttl.0;
    c
}

/// Runs the writer until `shutdown` resolves: opens the metadata and object stores, registers,
/// serves gRPC (with health NOT_SERVING until storage is up), then drains and releases its
/// lease.
pub async fn run(
    node: &config::NodeConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), WriterError> {
    run_with(node, shutdown, |_, routes| routes).await
}

/// [`run`], with more services on the same port, built from the opened metadata store.
pub async fn run_with(
    node: &config::NodeConfig,
    shutdown: impl Future<Output = ()> + Send,
    extra: impl FnOnce(&LogStorage, tonic::service::Routes) -> tonic::service::Routes,
) -> Result<(), WriterError> {
    let listener = logservice::bind(node.writer.listen).await?;
    // The object store first: building it makes no request, and a config it refuses (no
    // credentials) stops the role before it reaches any server.
    let objects = logservice::metered::metered(objstore::build(&node.object_store)?);
    let meta = metadata::open(&node.metadata).await?;
    let storage =
        LogStorage::open(meta, objects, storage_config(node), Arc::new(SystemClock)).await?;
    storage.observe_flushes(metrics::FlushMetrics::global());
    tracing::info!(addr = %node.writer.listen, writer = %storage.config().writer_id, "writer serving");
    let with = storage.clone();
    serve_with(storage, listener, shutdown, move |routes| extra(&with, routes)).await
}

/// Serves the LogService for `storage` on `listener` until `shutdown`; then shuts storage
/// down (flushes, commits, revokes the lease).
pub async fn serve(
    storage: LogStorage,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), WriterError> {
    serve_with(storage, listener, shutdown, |routes| routes).await
}

/// [`serve`], with more services on the same port (`standalone` adds the catalog).
pub async fn serve_with(
    storage: LogStorage,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
    extra: impl FnOnce(tonic::service::Routes) -> tonic::service::Routes,
) -> Result<(), WriterError> {
    let (health, health_service) = tonic_health::server::health_reporter();
    let name = <LogServiceServer<service::LogServiceImpl> as tonic::server::NamedService>::NAME;
    let follow = logservice::health::follow_stores(
        health.clone(),
        vec![name.to_owned()],
        storage.metadata(),
        storage.reader().objects().clone(),
    )
    .await;
    let svc = LogServiceServer::new(service::LogServiceImpl::new(storage.clone()))
        // Room for an entry somewhat over the limit, so storage answers it with a clear
        // INVALID_ARGUMENT rather than the transport with a bare size error.
        .max_decoding_message_size(storage.config().max_entry_bytes.saturating_mul(2) + (1 << 20))
        // A read answers at most its capped size plus one entry.
        .max_encoding_message_size(
            logservice::service::MAX_RESPONSE_BYTES.max(storage.config().max_entry_bytes * 2),
        );
    // Requests waiting for buffer room hold their payload outside the buffer's accounting;
    // capping streams per connection keeps that bounded (HTTP/2 makes the client wait).
    let routes = extra(tonic::service::Routes::new(health_service).add_service(svc));
    // On `shutdown`, drain while still serving: NOT_SERVING; appends answered UNAVAILABLE
    // (nothing applied: clients re-route) while storage commits what it accepted; the lease
    // revoked (its slots move); a moment for clients to learn the new owners. Only then do the
    // connections close, so no append is cut off unanswered.
    let draining = storage.clone();
    let drained = async move {
        shutdown.await;
        follow.abort();
        health.set_service_status("", tonic_health::ServingStatus::NotServing).await;
        health.set_not_serving::<LogServiceServer<service::LogServiceImpl>>().await;
        let start = std::time::Instant::now();
        draining.drain().await;
        tracing::info!(took = ?start.elapsed(), "drained: accepted appends committed, lease revoked");
        tokio::time::sleep(DRAIN_LINGER).await;
    };
    let served = tonic::transport::Server::builder()
        .layer(telemetry::GrpcServerLayer::global())
        .max_concurrent_streams(Some(MAX_STREAMS_PER_CONNECTION))
        .add_routes(routes)
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener),
            drained,
        )
        .await;
    storage.shutdown().await;
    Ok(served?)
}

/// How long a drained writer keeps answering (appends: UNAVAILABLE) before it closes its
/// connections: time for clients to re-route to the slots' new owners.
pub const DRAIN_LINGER: std::time::Duration = std::time::Duration::from_secs(1);
