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
use role::Role;
use tokio::net::TcpListener;

/// Concurrent requests one client connection may have open.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 256;

/// Why the role could not start or stopped.
pub type WriterError = role::RoleError;

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
    c.advertise = w.advertise.clone().unwrap_or_else(|| config::url_of(w.listen, &w.tls));
    c.flush_interval = w.flush_interval.0;
    c.flush_bytes = usize::try_from(w.flush_bytes.0).unwrap_or(usize::MAX);
    c.min_flush_interval = Some(
        w.min_flush_interval
            .map_or(config::DEFAULT_MIN_FLUSH_INTERVAL, |d| d.0)
            .min(c.flush_interval),
    );
    c.eager_puts = w.eager_puts.unwrap_or(config::DEFAULT_EAGER_PUTS);
    c.hedge_quantile =
        Some(w.hedge_quantile.unwrap_or(config::DEFAULT_HEDGE_QUANTILE)).filter(|q| *q > 0.0);
    c.commit_interval = w.commit_interval.map(|d| d.0);
    c.max_entry_bytes = usize::try_from(w.max_entry_size.0).unwrap_or(usize::MAX);
    c.buffer_bytes = usize::try_from(w.buffer_size.0).unwrap_or(usize::MAX);
    c.flush_deadline = w.flush_deadline.0;
    c.lease_ttl = w.lease_ttl.0;
    c.tail_cache_bytes = usize::try_from(w.tail_cache_size.0).unwrap_or(usize::MAX);
    c.kafka_advertise = w.kafka.as_ref().map(|k| k.advertised()).unwrap_or_default();
    c
}

/// Runs the writer until `shutdown` resolves: opens the metadata and object stores, registers,
/// serves gRPC (with health NOT_SERVING until storage is up), then drains and releases its
/// lease.
pub async fn run(
    node: &config::NodeConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), WriterError> {
    run_with(node, "writer", shutdown, |_, _| {}).await
}

/// [`run`] as role `name`, with more on the same role (`standalone` adds the catalog and the
/// maintenance roles), added by `extra` once log storage is open.
pub async fn run_with(
    node: &config::NodeConfig,
    name: &'static str,
    shutdown: impl Future<Output = ()> + Send,
    extra: impl FnOnce(&LogStorage, &mut Role),
) -> Result<(), WriterError> {
    let mut role =
        Role::open(name, Some(node.writer.listen), node.writer.tls.as_ref(), node).await?;
    let kafka_listener = match &node.writer.kafka {
        Some(k) => Some((k, role::bind(k.listen).await?, role::kafka_tls(k)?)),
        None => None,
    };
    let storage = LogStorage::open(
        role.meta().clone(),
        role.objects().clone(),
        storage_config(node),
        Arc::new(SystemClock),
    )
    .await?;
    storage.observe_flushes(metrics::FlushMetrics::global());
    tracing::info!(addr = %node.writer.listen, writer = %storage.config().writer_id, "writer serving");
    let mut follow = None;
    let mut partitions = None;
    if let Some((k, listener, tls)) = kafka_listener {
        let catalog =
            catalog::Catalog::new(storage.metadata(), storage.reader().clone(), &node.cluster)
                .with_followed_streams();
        // Taken when the writer registered (create-only per writer id): this reads it back.
        let node_id = logstore::membership::node_id(
            storage.metadata().as_ref(),
            &node.cluster,
            &storage.config().writer_id,
        )
        .await?;
        let broker = Arc::new(
            brokers::LogBroker::writer(catalog, &node.cluster, storage.clone())
                .with_node_id(node_id),
        );
        let mut cfg = brokers::kafka_config(k, &role, tls);
        // Kafka's max.message.bytes: the largest entry this writer takes.
        cfg.max_batch_bytes = storage.config().max_entry_bytes;
        cfg.auto_create_topics = k.auto_create_topics;
        tracing::info!(addr = %k.listen, advertised = %k.advertised(), "Kafka serving");
        let counted = broker.as_ref().clone();
        follow = Some(telemetry::follow_counts(vec![(
            "writer_kafka_fetch_bytes",
            "Record bytes answered to Kafka fetches",
            Box::new(move || counted.fetched_bytes()),
        )]));
        partitions = Some(metrics::PartitionMetrics::follow(broker.as_ref().clone()));
        let checkpoints = broker.as_ref().clone();
        role.spawn(move |shutdown| checkpoints.checkpoints(shutdown));
        brokers::listen(&mut role, listener, broker, cfg);
    }
    let served = serve_on(role, storage, shutdown, extra).await;
    for f in [follow, partitions].into_iter().flatten() {
        f.abort();
    }
    served
}

/// Serves the LogService for `storage` on `listener` until `shutdown`; then shuts storage
/// down (flushes, commits, revokes the lease). No metrics server (tests and benchmarks).
pub async fn serve(
    storage: LogStorage,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), WriterError> {
    let role = Role::from_parts(
        "writer",
        &storage.config().cluster,
        Some(listener),
        storage.metadata(),
        storage.reader().objects().clone(),
    );
    serve_on(role, storage, shutdown, |_, _| {}).await
}

async fn serve_on(
    mut role: Role,
    storage: LogStorage,
    shutdown: impl Future<Output = ()> + Send,
    extra: impl FnOnce(&LogStorage, &mut Role),
) -> Result<(), WriterError> {
    let svc = LogServiceServer::new(service::LogServiceImpl::new(storage.clone()))
        // Room for an entry somewhat over the limit, so storage answers it with a clear
        // INVALID_ARGUMENT rather than the transport with a bare size error.
        .max_decoding_message_size(storage.config().max_entry_bytes.saturating_mul(2) + (1 << 20))
        // A read answers at most its capped size plus one entry.
        .max_encoding_message_size(
            logservice::service::MAX_RESPONSE_BYTES.max(storage.config().max_entry_bytes * 2),
        );
    role.add_service(
        logservice::reception::Reception::new(svc, RECEPTION_SLOTS).with_room(storage.clone()),
    );
    // Requests being received or decoded hold their payload outside the buffer's accounting:
    // per connection, a cap on streams (HTTP/2 makes the client wait beyond) and on bytes
    // received ahead of reading; for the whole writer, a cap on unary Appends being received
    // and buffer room taken for each from its headers on (beyond either they are refused
    // unread); storage bounds those waiting for room (beyond an eighth of the buffer it
    // refuses) and counts what an answered-later append holds.
    role.limit_streams_per_connection(MAX_STREAMS_PER_CONNECTION);
    role.limit_receive_window(RECEIVE_WINDOW);
    extra(&storage, &mut role);
    // On `shutdown`, drain while still serving: NOT_SERVING (the runner); appends answered
    // UNAVAILABLE (nothing applied: clients re-route) while storage commits what it accepted;
    // the lease revoked (its slots move); a moment for clients to learn the new owners. Only
    // then do the connections close, so no append is cut off unanswered.
    let draining = storage.clone();
    let drain = async move {
        let start = std::time::Instant::now();
        draining.drain().await;
        tracing::info!(took = ?start.elapsed(), "drained: accepted appends committed, lease revoked");
        tokio::time::sleep(DRAIN_LINGER).await;
    };
    let served = role.serve(shutdown, drain).await;
    storage.shutdown().await;
    served
}

/// Unary Appends the writer receives at once, from their headers to storage's answer on
/// admission; one more is refused with RESOURCE_EXHAUSTED before its body is read
/// (`logservice::reception`).
pub const RECEPTION_SLOTS: usize = 1024;

/// The writer's HTTP/2 receive window per connection and per stream: request bytes a
/// connection may send before the writer reads them. 256 KiB keeps a connection at hundreds
/// of MB/s over a sub-millisecond round trip, and 79 connections at 20 MiB unread at most
/// (1 MiB each by default: 60 MiB measured under overload).
pub const RECEIVE_WINDOW: u32 = 256 << 10;

/// How long a drained writer keeps answering (appends: UNAVAILABLE) before it closes its
/// connections: time for clients to re-route to the slots' new owners.
pub const DRAIN_LINGER: std::time::Duration = std::time::Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    fn node(writer: &str) -> config::NodeConfig {
        let yaml = format!(
            "cluster: c\nmetadata:\n  embedded:\n    path: m.redb\nobject_store:\n  memory: {{}}\n{writer}"
        );
        config::from_yaml("node.yaml", &yaml, |_| None).expect("a valid node config")
    }

    /// The cluster roles' flush defaults: eager, unspaced, four PUTs out, hedged at the p90;
    /// each may be set, hedging turned off with 0.
    #[test]
    fn the_cluster_roles_flush_eagerly_four_puts_out_hedged_by_default() {
        let c = storage_config(&node(""));
        assert_eq!(c.min_flush_interval, Some(config::DEFAULT_MIN_FLUSH_INTERVAL));
        assert_eq!((c.eager_puts, c.hedge_quantile), (4, Some(0.9)));
        let c = storage_config(&node(
            "writer:\n  min_flush_interval: 250ms\n  eager_puts: 1\n  hedge_quantile: 0\n",
        ));
        assert_eq!(c.min_flush_interval, Some(std::time::Duration::from_millis(250)));
        assert_eq!((c.eager_puts, c.hedge_quantile), (1, None));
        // A short flush interval bounds the default spacing.
        let c = storage_config(&node("writer:\n  flush_interval: 1ms\n"));
        assert!(c.min_flush_interval <= Some(c.flush_interval));
    }
}
