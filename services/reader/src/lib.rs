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
use role::{Member, Role};

/// Why the role could not start or stopped.
pub type ReaderError = role::RoleError;

/// Runs the reader role until `shutdown` resolves: registers, serves the read-only LogService
/// and gRPC health on `reader.listen`, then deregisters.
pub async fn run(
    node: &config::NodeConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ReaderError> {
    let r = &node.reader;
    let mut role = Role::open("reader", Some(r.listen), r.tls.as_ref(), node).await?;
    let kafka_listener = match &r.kafka {
        Some(k) => Some((k, role::bind(k.listen).await?, role::kafka_tls(k)?)),
        None => None,
    };
    let cache = usize::try_from(r.cache_size.0).unwrap_or(usize::MAX);
    let reader = role
        .reader()
        .with_caches(cache, r.index_cache_pages)
        .with_followed_heads(logstore::DEFAULT_FOLLOWED_HEADS);
    let id = r.id.clone().unwrap_or_else(|| logstore::membership::random_id("reader"));
    role.register(Member {
        role: "reader".to_owned(),
        id: id.clone(),
        address: r.advertise.clone().unwrap_or_else(|| config::url_of(r.listen, &r.tls)),
        zone: r.zone.clone(),
        lease_ttl: r.lease_ttl.0,
        kafka: r.kafka.as_ref().map(|k| k.advertised()).unwrap_or_default(),
    })
    .await?;
    // Read-only Kafka: fetches of any partition from object storage; produce refused.
    let mut fetched: Option<brokers::LogBroker> = None;
    if let Some((k, listener, tls)) = kafka_listener {
        let node_id =
            logstore::membership::node_id(role.meta().as_ref(), &node.cluster, &id).await?;
        let catalog = catalog::Catalog::new(role.meta().clone(), reader.clone(), &node.cluster)
            .with_followed_streams();
        let broker = brokers::LogBroker::reader(catalog, &node.cluster, reader.clone())
            .with_node_id(node_id);
        fetched = Some(broker.clone());
        let mut cfg = brokers::kafka_config(k, &role, tls);
        // A reader creates no topics.
        cfg.auto_create_topics = false;
        tracing::info!(addr = %k.listen, advertised = %k.advertised(), node_id, "Kafka serving (read-only)");
        let broker = std::sync::Arc::new(broker);
        brokers::listen(&mut role, listener, broker, cfg);
    }
    let (for_hits, for_misses) = (reader.clone(), reader.clone());
    let follow = telemetry::follow_counts(vec![
        (
            "reader_kafka_fetch_bytes",
            "Record bytes answered to Kafka fetches",
            Box::new(move || fetched.as_ref().map_or(0, |b| b.fetched_bytes())),
        ),
        ("reader_cache_hits", "Byte-range cache hits", Box::new(move || for_hits.cache_counts().0)),
        (
            "reader_cache_misses",
            "Byte-range cache misses (GETs, or joins of one in flight)",
            Box::new(move || for_misses.cache_counts().1),
        ),
    ]);
    tracing::info!(addr = %r.listen, reader = %id, "reader serving");
    add_service(&mut role, reader);
    let served = role.serve(shutdown, async {}).await;
    follow.abort();
    served
}

/// Serves the read-only LogService (and gRPC health) for `reader` on `listener` until
/// `shutdown`; no registration and no metrics server (`run` has both; benchmarks call this).
pub async fn serve(
    reader: logstore::LogReader,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ReaderError> {
    let cluster = reader.keys().cluster().to_owned();
    let mut role = Role::from_parts(
        "reader",
        &cluster,
        Some(listener),
        reader.meta().clone(),
        reader.objects().clone(),
    );
    add_service(&mut role, reader);
    role.serve(shutdown, async {}).await
}

fn add_service(role: &mut Role, reader: logstore::LogReader) {
    role.add_service(
        LogServiceServer::new(LogServiceImpl::read_only(reader))
            .max_encoding_message_size(logservice::service::MAX_RESPONSE_BYTES),
    );
}
