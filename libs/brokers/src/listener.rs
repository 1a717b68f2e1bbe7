//! One Kafka listener setup for every role that serves Kafka (a writer, a reader): the
//! listener's settings from its config section, its TLS and the role's authorization, then
//! the listener served until the role shuts down.

use std::sync::Arc;

use crate::LogBroker;

/// The listener's settings from `k`, with `tls` and `role`'s authorization (and its ACL store
/// when authorization is on). What differs by role (the largest batch a writer takes, topic
/// auto-creation) the caller sets after.
pub fn kafka_config(
    k: &config::KafkaSection,
    role: &role::Role,
    tls: Option<Arc<security::ServerTls>>,
) -> kafka::KafkaConfig {
    kafka::KafkaConfig {
        max_frame_bytes: usize::try_from(k.max_request_size.0).unwrap_or(usize::MAX),
        request_budget: kafka::budget::RequestBudget::new(
            usize::try_from(k.request_budget.0).unwrap_or(usize::MAX),
        ),
        max_connections: k.max_connections,
        max_connections_per_ip: k.max_connections_per_ip,
        connections_max_idle: k.connections_max_idle.0,
        default_partitions: k.default_partitions,
        consumer_session_timeout: k.consumer_session_timeout.0,
        consumer_heartbeat_interval: k.consumer_heartbeat_interval.0,
        offsets_retention: k.offsets_retention.0,
        tls,
        authz: role.authorizer(),
        acls: role.authorizer().enabled().then(|| role.auth_store()),
        ..Default::default()
    }
}

/// Serves Kafka for `broker` on `listener` with `cfg` until `role` shuts down, and (a
/// writer's) the transaction markers its partitions are asked for.
pub fn listen(
    role: &mut role::Role,
    listener: tokio::net::TcpListener,
    broker: Arc<LogBroker>,
    cfg: kafka::KafkaConfig,
) {
    let markers = broker.clone();
    role.spawn(move |shutdown| markers.serve_markers(shutdown.wait()));
    role.spawn(move |shutdown| kafka::serve(listener, broker, cfg, shutdown.wait()));
}
