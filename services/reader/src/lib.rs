//! The reader role (seed 001, Pravega's read-only segment store): a stateless process serving
//! reads of committed data for any log straight from object storage and the metadata store.
//! Mutating calls answer READ_ONLY; reads never wait at the high watermark. It registers under
//! a lease (role `reader`) so clients can spread reads over the live readers, and its reads
//! never touch the writers.
//!
//! Depends on libs only; never on another service.

use std::future::Future;

use logservice::LogServiceImpl;
use proto::log::v1::log_service_server::LogServiceServer;

/// Why the role could not start or stopped.
pub type ReaderError = logservice::RoleError;

/// Runs the reader role until `shutdown` resolves: registers, serves the read-only LogService
/// and gRPC health on `reader.listen`, then deregisters.
pub async fn run(
    node: &config::NodeConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ReaderError> {
    let r = &node.reader;
    let listener = logservice::bind(r.listen).await?;
    // The object store first: building it makes no request, and a config it refuses (no
    // credentials) stops the role before it reaches any server.
    let objects = logservice::metered::metered(objstore::build(&node.object_store)?);
    let meta = metadata::open(&node.metadata).await?;
    let cache = usize::try_from(r.cache_size.0).unwrap_or(usize::MAX);
    let reader = logstore::LogReader::new(meta.clone(), objects, &node.cluster)
        .with_caches(cache, r.index_cache_pages);
    let id = r.id.clone().unwrap_or_else(|| logstore::membership::random_id("reader"));
    let record = logstore::records::MemberRecord {
        id: id.clone(),
        role: "reader".to_owned(),
        address: r.advertise.clone().unwrap_or_else(|| format!("http://{}", r.listen)),
        zone: r.zone.clone(),
    };
    let registration =
        logstore::membership::register(meta, &node.cluster, record, r.lease_ttl.0).await?;
    let (for_hits, for_misses) = (reader.clone(), reader.clone());
    let follow = telemetry::follow_counts(vec![
        ("reader_cache_hits", "Byte-range cache hits", Box::new(move || for_hits.cache_counts().0)),
        (
            "reader_cache_misses",
            "Byte-range cache misses (GETs, or joins of one in flight)",
            Box::new(move || for_misses.cache_counts().1),
        ),
    ]);
    tracing::info!(addr = %r.listen, reader = %id, "reader serving");
    let served = serve(reader, listener, shutdown).await;
    follow.abort();
    registration.close().await;
    served
}

/// Serves the read-only LogService (and gRPC health) for `reader` on `listener` until
/// `shutdown`; no registration (`run` registers; benchmarks call this directly).
pub async fn serve(
    reader: logstore::LogReader,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ReaderError> {
    let (health, health_service) = tonic_health::server::health_reporter();
    let name = <LogServiceServer<LogServiceImpl> as tonic::server::NamedService>::NAME;
    let follow = logservice::health::follow_stores(
        health,
        vec![name.to_owned()],
        reader.meta().clone(),
        reader.objects().clone(),
    )
    .await;
    let served = tonic::transport::Server::builder()
        .layer(telemetry::GrpcServerLayer::global())
        .add_service(health_service)
        .add_service(
            LogServiceServer::new(LogServiceImpl::read_only(reader))
                .max_encoding_message_size(logservice::service::MAX_RESPONSE_BYTES),
        )
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener),
            shutdown,
        )
        .await;
    follow.abort();
    Ok(served?)
}
