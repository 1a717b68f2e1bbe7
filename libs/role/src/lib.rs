//! The role runner: what every role (writer, reader, catalog, compactor, cleaner, standalone)
//! does around its own work, written once. [`Role::open`] binds the role's gRPC listener and
//! `telemetry.metrics_listen` (a taken port fails the start), builds the object store (no
//! request: a config without credentials stops here) and opens the metadata store. The role
//! then adds its gRPC services ([`Role::add_service`]), background loops ([`Role::spawn`]) and,
//! if it is found by clients, a member registration under a lease ([`Role::register`]).
//! [`Role::serve`] serves them with gRPC health that follows the stores, until the shutdown
//! signal; then it drains: NOT_SERVING, the loops told to stop and awaited (a cycle under way
//! finishes), the role's own drain, in-flight requests answered, the lease revoked.
//!
//! Every request to the port goes through [`guard`] first: the one place the gRPC front end
//! authenticates callers and checks the ACLs (docs/security.md). The port serves TLS when the
//! role's `tls:` is set ([`Role::open`], [`Role::use_tls`]), its files re-read as they change.
//! It keeps at most [`MAX_CONNECTIONS`] connections: one more is closed at accept.
//!
//! Depends on libs only (stores, membership, telemetry, security, catalog); never on a service
//! crate. A new listener (the Kafka front end) is a [`Role::spawn`] of its accept loop, with
//! [`Role::authorizer`] and [`kafka_tls`] for its security.

mod capped;
pub mod guard;
pub mod health;
pub mod metered;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use metadata::MetadataStore;
use objstore::object_store::ObjectStore;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Why a role could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum RoleError {
    #[error("metadata store: {0}")]
    Metadata(#[from] metadata::MetaError),
    #[error("object store: {0}")]
    Objects(#[from] objstore::BuildError),
    /// Registering as a member, or opening log storage.
    #[error("log storage: {0}")]
    Storage(#[from] logstore::LogError),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error("gRPC server: {0}")]
    Serve(#[from] tonic::transport::Error),
    #[error("TLS: {0}")]
    Tls(#[from] security::TlsError),
    #[error("auth: {0}")]
    Auth(#[from] security::store::AuthError),
}

/// gRPC health's service name: every role serves it.
const HEALTH: &str = "grpc.health.v1.Health";

/// gRPC connections a role keeps at once unless told otherwise ([`Role::limit_connections`]);
/// one more is closed at accept (the Kafka listener's `max_connections` is the same).
pub const MAX_CONNECTIONS: usize = 4096;

/// Binds a listener; a taken or invalid address is [`RoleError::Listen`].
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, RoleError> {
    TcpListener::bind(addr).await.map_err(|source| RoleError::Listen { addr, source })
}

/// A Kafka listener's TLS (`<role>.kafka.tls`), its files read now; none for plaintext.
pub fn kafka_tls(k: &config::KafkaSection) -> Result<Option<Arc<security::ServerTls>>, RoleError> {
    Ok(match &k.tls {
        Some(t) => Some(security::ServerTls::new(t, &[])?),
        None => None,
    })
}

/// Told when the role drains. Cheap to clone; every background loop gets one.
#[derive(Clone, Debug)]
pub struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    /// A shutdown of work run outside a role (the simulation's): set when the sender sends
    /// `true` or is dropped.
    pub fn channel() -> (watch::Sender<bool>, Shutdown) {
        let (tx, rx) = watch::channel(false);
        (tx, Shutdown(rx))
    }

    /// Resolves once the role drains (at once if it already does).
    pub async fn wait(mut self) {
        // The sender gone means the role is gone: as good as a shutdown.
        let _ = self.0.wait_for(|stop| *stop).await;
    }

    /// Whether the role drains now.
    pub fn is_set(&self) -> bool {
        *self.0.borrow()
    }
}

/// Runs `cycle` every `interval` until `shutdown`, which is heard between cycles only: a
/// cycle under way is never cut off (a compactor's claims, a cleaner's deletions).
pub async fn every<F, Fut>(interval: Duration, shutdown: Shutdown, mut cycle: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let wait = shutdown.wait();
    tokio::pin!(wait);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = &mut wait => return,
        }
        cycle().await;
    }
}

/// Where a member registration says the role is: `advertise`, else `http://<listen>`.
#[derive(Clone, Debug)]
pub struct Member {
    /// `writer`, `reader`, `catalog`: how clients find the role's members.
    pub role: String,
    pub id: String,
    pub address: String,
    /// Its zone, `*` for none.
    pub zone: String,
    pub lease_ttl: Duration,
    /// Where Kafka clients reach it (`host:port`), with its node id; empty: no Kafka.
    pub kafka: String,
}

/// A role being assembled, then served: see the crate doc.
pub struct Role {
    name: &'static str,
    cluster: String,
    grpc: Option<(SocketAddr, TcpListener)>,
    metrics: Option<(SocketAddr, TcpListener)>,
    meta: Arc<dyn MetadataStore>,
    objects: Arc<dyn ObjectStore>,
    routes: tonic::service::Routes,
    /// Plain HTTP routes were added: HTTP/1.1 is accepted too.
    http: bool,
    services: Vec<String>,
    registration: Option<logstore::membership::Registration>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    stop: watch::Sender<bool>,
    max_streams: Option<u32>,
    receive_window: Option<u32>,
    max_connections: usize,
    tls: Option<Arc<security::ServerTls>>,
    guard: Arc<guard::Guard>,
}

impl std::fmt::Debug for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Role")
            .field("name", &self.name)
            .field("grpc", &self.grpc.as_ref().map(|(a, _)| a))
            .field("services", &self.services)
            .field("tasks", &self.tasks.len())
            .finish_non_exhaustive()
    }
}

impl Role {
    /// Opens role `name` (it names the role in logs) on `node`'s stores, with its gRPC server
    /// on `listen` (none: the role serves no gRPC, e.g. a compactor without
    /// `maintenance.listen`), over TLS when `tls` is set ([`Role::use_tls`]), and metrics on
    /// `telemetry.metrics_listen` when set. Binds both listeners and reads the TLS files first, then builds the object store (that makes no request, and a config it
    /// refuses stops the role before it reaches any server), then opens the metadata store.
    pub async fn open(
        name: &'static str,
        listen: Option<SocketAddr>,
        tls: Option<&config::TlsConfig>,
        node: &config::NodeConfig,
    ) -> Result<Role, RoleError> {
        let grpc = match listen {
            Some(addr) => Some((addr, bind(addr).await?)),
            None => None,
        };
        let tls = match tls {
            Some(t) if grpc.is_some() => Some(security::ServerTls::new(t, &[b"h2", b"http/1.1"])?),
            _ => None,
        };
        let metrics = match node.telemetry.metrics_listen {
            Some(addr) => Some((addr, bind(addr).await?)),
            None => None,
        };
        let mut objects = objstore::build(&node.object_store)?;
        let mut meta = metadata::open(&node.metadata).await?;
        if let Some(p) = &node.latency {
            objects = Arc::new(objstore::latency::DelayedStore::new(objects, p.objects, 1));
            meta = Arc::new(metadata::latency::DelayedMeta::new(meta, p.metadata, 2));
        }
        let (objects, meta) = (metered::metered(objects), metered::metered_meta(meta));
        let mut role = Role::from_parts(name, &node.cluster, grpc.map(|(_, l)| l), meta, objects);
        role.metrics = metrics;
        role.tls = tls;
        role.use_auth(&node.auth).await?;
        Ok(role)
    }

    /// A role over stores and a listener already open (tests, benchmarks): no metrics server.
    pub fn from_parts(
        name: &'static str,
        cluster: &str,
        listener: Option<TcpListener>,
        meta: Arc<dyn MetadataStore>,
        objects: Arc<dyn ObjectStore>,
    ) -> Role {
        let grpc = listener.and_then(|l| l.local_addr().ok().map(|a| (a, l)));
        Role {
            name,
            cluster: cluster.to_owned(),
            grpc,
            metrics: None,
            meta,
            objects,
            routes: tonic::service::Routes::default(),
            http: false,
            services: Vec::new(),
            registration: None,
            tasks: Vec::new(),
            stop: watch::channel(false).0,
            max_streams: None,
            receive_window: None,
            max_connections: MAX_CONNECTIONS,
            tls: None,
            guard: Arc::new(guard::Guard::new(security::Authorizer::off(), None)),
        }
    }

    pub fn meta(&self) -> &Arc<dyn MetadataStore> {
        &self.meta
    }

    pub fn objects(&self) -> &Arc<dyn ObjectStore> {
        &self.objects
    }

    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// Where the gRPC server listens, if the role has one.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc.as_ref().map(|(a, _)| *a)
    }

    /// A reader over the role's stores (no caches; a role that serves reads sets its own).
    pub fn reader(&self) -> logstore::LogReader {
        logstore::LogReader::new(self.meta.clone(), self.objects.clone(), &self.cluster)
    }

    /// The process's metrics registry (served on `telemetry.metrics_listen`).
    pub fn metrics(&self) -> &'static telemetry::Metrics {
        telemetry::Metrics::global()
    }

    /// A handle that resolves when the role drains, for work the role starts itself.
    pub fn shutdown(&self) -> Shutdown {
        Shutdown(self.stop.subscribe())
    }

    /// Adds a gRPC service on the role's port; gRPC health reports it by name. A service of a
    /// name already served (health is the runner's own) is left out with an error logged: two
    /// routes for one name would fail the server when it starts.
    pub fn add_service<S>(&mut self, svc: S)
    where
        S: tower_like::GrpcService,
    {
        if S::NAME == HEALTH || self.services.iter().any(|s| s == S::NAME) {
            tracing::error!(
                role = self.name,
                service = S::NAME,
                "served twice; the second left out"
            );
            return;
        }
        self.services.push(S::NAME.to_owned());
        self.routes = std::mem::take(&mut self.routes).add_service(svc);
    }

    /// Adds plain HTTP routes (HTTP/1.1 and HTTP/2) beside the gRPC services on the role's port:
    /// the catalog's Iceberg REST catalog. Paths must not be a gRPC service's (`/pkg.Service/`).
    pub fn add_http_routes(&mut self, router: axum::Router) {
        self.http = true;
        let routes = self.routes.axum_router_mut();
        *routes = std::mem::take(routes).merge(router);
    }

    /// Serves the role's port over TLS as `tls` says (none: plaintext): the certificate and CA
    /// files are read now (a file that does not load fails the start) and again when they
    /// change. Offers HTTP/2 and HTTP/1.1 by ALPN.
    pub fn use_tls(&mut self, tls: Option<&config::TlsConfig>) -> Result<(), RoleError> {
        self.tls = match tls {
            Some(t) => Some(security::ServerTls::new(t, &[b"h2", b"http/1.1"])?),
            None => None,
        };
        Ok(())
    }

    /// Authenticates callers and enforces the ACLs as `section` says (off: says so in the
    /// log, and everyone may do everything), on the gRPC port ([`guard`]) and, through
    /// [`Role::authorizer`], the Kafka listener. Stores the users and tokens of the section's
    /// bootstrap files first (idempotent: every role may).
    pub async fn use_auth(&mut self, section: &config::AuthSection) -> Result<(), RoleError> {
        let store = security::store::AuthStore::new(self.meta.clone(), &self.cluster);
        if section.enabled && (section.users_file.is_some() || section.tokens_file.is_some()) {
            let now = logstore::Clock::now_ms(&logstore::SystemClock);
            let (users, tokens) = store.bootstrap(section, now).await?;
            tracing::info!(role = self.name, users, tokens, "bootstrap users and tokens stored");
        }
        let authz = security::Authorizer::start(section, &store, self.name).await?;
        let logs = match authz.enabled() {
            true => Some(catalog::follow_log_streams(self.meta.clone(), &self.cluster).await?),
            false => None,
        };
        self.guard = Arc::new(guard::Guard::new(authz, logs));
        Ok(())
    }

    /// What decides who may do what: for the role's other front ends (Kafka).
    pub fn authorizer(&self) -> Arc<security::Authorizer> {
        self.guard.authorizer().clone()
    }

    /// The credential and ACL store of the role's cluster.
    pub fn auth_store(&self) -> security::store::AuthStore {
        security::store::AuthStore::new(self.meta.clone(), &self.cluster)
    }

    /// Caps the gRPC connections kept at once (default [`MAX_CONNECTIONS`]): one more is closed
    /// at accept.
    pub fn limit_connections(&mut self, n: usize) {
        self.max_connections = n;
    }

    /// Caps concurrent requests per client connection (HTTP/2 makes clients wait beyond).
    pub fn limit_streams_per_connection(&mut self, n: u32) {
        self.max_streams = Some(n);
    }

    /// Caps the request bytes a client connection may send ahead of the server reading
    /// them (its HTTP/2 receive windows, connection and stream alike; otherwise 1 MiB each):
    /// what sits received and unread is at most this per connection.
    pub fn limit_receive_window(&mut self, bytes: u32) {
        self.receive_window = Some(bytes);
    }

    /// Registers the role as a member under a lease, kept alive until the role stops.
    pub async fn register(&mut self, m: Member) -> Result<(), RoleError> {
        let node_id = match m.kafka.is_empty() {
            true => -1,
            false => {
                logstore::membership::node_id(self.meta.as_ref(), &self.cluster, &m.id).await?
            }
        };
        let record = logstore::records::MemberRecord {
            id: m.id,
            role: m.role,
            address: m.address,
            zone: m.zone,
            kafka: m.kafka,
            node_id,
        };
        let r =
            logstore::membership::register(self.meta.clone(), &self.cluster, record, m.lease_ttl)
                .await?;
        self.registration = Some(r);
        Ok(())
    }

    /// Runs `work` in the background until the role drains: it gets a [`Shutdown`] and the
    /// drain waits for it to return (a loop hears the shutdown between cycles, so a cycle
    /// under way finishes).
    pub fn spawn<F, Fut>(&mut self, work: F)
    where
        F: FnOnce(Shutdown) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let task = tokio::spawn(work(self.shutdown()));
        self.tasks.push(task);
    }

    /// Serves until `signal`, then drains (crate doc) and runs `drain` before the connections
    /// close; returns once everything stopped and the registration is revoked.
    pub async fn serve(
        self,
        signal: impl Future<Output = ()> + Send,
        drain: impl Future<Output = ()> + Send,
    ) -> Result<(), RoleError> {
        let Role { name, grpc, metrics, meta, objects, routes, services, registration, .. } = self;
        let (stop, tasks) = (self.stop, self.tasks);
        let metrics = metrics.map(|(addr, listener)| {
            tracing::info!(%addr, "metrics on /metrics");
            tokio::spawn(async move {
                let served = telemetry::serve_metrics(
                    telemetry::Metrics::global().clone(),
                    listener,
                    std::future::pending(),
                );
                if let Err(e) = served.await {
                    tracing::error!(error = %e, %addr, "metrics server stopped");
                }
            })
        });
        let (reporter, health_service) = tonic_health::server::health_reporter();
        let follow = health::follow_stores(reporter.clone(), services.clone(), meta, objects).await;
        let drained = async move {
            signal.await;
            follow.abort();
            telemetry::set_serving(false);
            for s in std::iter::once("").chain(services.iter().map(String::as_str)) {
                reporter.set_service_status(s, tonic_health::ServingStatus::NotServing).await;
            }
            let start = std::time::Instant::now();
            let _ = stop.send(true);
            for t in tasks {
                if let Err(e) = t.await {
                    tracing::error!(error = %e, "a background task of the role failed");
                }
            }
            drain.await;
            tracing::info!(role = name, took = ?start.elapsed(), "drained");
        };
        let served = match grpc {
            Some((addr, listener)) => {
                let tls = self.tls;
                tracing::info!(role = name, %addr, tls = tls.is_some(), "gRPC serving");
                let router = tonic::transport::Server::builder()
                    .layer(telemetry::GrpcServerLayer::global())
                    .layer(guard::GuardLayer(self.guard))
                    .max_concurrent_streams(self.max_streams)
                    .initial_connection_window_size(self.receive_window)
                    .initial_stream_window_size(self.receive_window)
                    .accept_http1(self.http)
                    .add_routes(routes.add_service(health_service));
                let max = self.max_connections;
                match tls {
                    Some(tls) => {
                        let incoming = capped::capped(tls.incoming(listener), max, name);
                        router.serve_with_incoming_shutdown(incoming, drained).await
                    }
                    None => {
                        let incoming = tonic::transport::server::TcpIncoming::from(listener)
                            .with_nodelay(Some(true));
                        let incoming = capped::capped(incoming, max, name);
                        router.serve_with_incoming_shutdown(incoming, drained).await
                    }
                }
            }
            None => {
                drained.await;
                Ok(())
            }
        };
        if let Some(r) = registration {
            r.close().await;
        }
        if let Some(m) = metrics {
            m.abort();
        }
        Ok(served?)
    }
}

/// The bound of [`Role::add_service`]: a generated tonic server.
pub mod tower_like {
    use super::Infallible;

    /// A tonic-generated gRPC server (`FooServiceServer<T>`).
    pub trait GrpcService:
        tonic::codegen::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
            Future: Send + 'static,
        > + tonic::server::NamedService
        + Clone
        + Send
        + Sync
        + 'static
    {
    }

    impl<S> GrpcService for S where
        S: tonic::codegen::Service<
                http::Request<tonic::body::Body>,
                Response = http::Response<tonic::body::Body>,
                Error = Infallible,
                Future: Send + 'static,
            > + tonic::server::NamedService
            + Clone
            + Send
            + Sync
            + 'static
    {
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    async fn role(dir: &std::path::Path, listen: bool) -> Result<Role, Box<dyn std::error::Error>> {
        let meta = metadata::open(&config::MetadataConfig::Embedded(config::EmbeddedConfig {
            path: dir.join("meta.redb"),
        }))
        .await?;
        let objects =
            objstore::build(&config::ObjectStoreConfig::Local(config::LocalStoreConfig {
                path: dir.join("objects"),
            }))?;
        let listener = match listen {
            true => Some(TcpListener::bind("127.0.0.1:0").await?),
            false => None,
        };
        Ok(Role::from_parts("test", "role-test", listener, meta, objects))
    }

    /// Serves `role` in the background, with no drain of its own, until the sender is used.
    fn serve_until_signalled(
        role: Role,
    ) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<Result<(), RoleError>>) {
        let (signal, signalled) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(role.serve(
            async move {
                let _ = signalled.await;
            },
            async {},
        ));
        (signal, served)
    }

    #[tokio::test]
    async fn the_drain_waits_for_every_loop_then_the_roles_own_drain_then_revokes_the_lease()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut role = role(dir.path(), false).await?;
        role.register(Member {
            role: "tester".to_owned(),
            id: "t1".to_owned(),
            address: "http://127.0.0.1:1".to_owned(),
            zone: "*".to_owned(),
            lease_ttl: Duration::from_secs(30),
            kafka: String::new(),
        })
        .await?;
        let meta = role.meta().clone();
        let order = Arc::new(Mutex::new(Vec::new()));
        for n in 0..2 {
            let order = order.clone();
            role.spawn(move |shutdown| async move {
                shutdown.wait().await;
                // A cycle under way when the signal came: it finishes first.
                tokio::time::sleep(Duration::from_millis(100 * (n + 1))).await;
                order.lock().push(format!("loop {n}"));
            });
        }
        let early = role.shutdown();
        assert!(!early.is_set());
        let (signal, signalled) = tokio::sync::oneshot::channel::<()>();
        let drained = order.clone();
        let served = tokio::spawn(role.serve(
            async move {
                let _ = signalled.await;
            },
            async move {
                drained.lock().push("drain".to_owned());
            },
        ));
        let (live, _) =
            logstore::membership::live_members(meta.as_ref(), "role-test", "tester").await?;
        assert_eq!(live.len(), 1, "registered while serving");
        let _ = signal.send(());
        served.await??;
        assert!(early.is_set());
        let order = order.lock().clone();
        assert_eq!(order, ["loop 0", "loop 1", "drain"]);
        let (live, _) =
            logstore::membership::live_members(meta.as_ref(), "role-test", "tester").await?;
        assert!(live.is_empty(), "the lease outlived the role: {live:?}");
        Ok(())
    }

    #[tokio::test]
    async fn a_role_serves_health_following_the_stores_and_not_serving_once_it_drains()
    -> Result<(), Box<dyn std::error::Error>> {
        use tonic_health::pb::health_check_response::ServingStatus;
        use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
        let dir = tempfile::tempdir()?;
        let mut role = role(dir.path(), true).await?;
        let addr = role.grpc_addr().ok_or("no address")?;
        // A second health service (or any name served twice) is left out, not a server that
        // fails to start.
        let (_, extra) = tonic_health::server::health_reporter();
        role.add_service(extra);
        let (hold, held) = tokio::sync::oneshot::channel::<()>();
        role.spawn(move |shutdown| async move {
            shutdown.wait().await;
            let _ = held.await; // the drain stays open until the test lets it go
        });
        let (signal, served) = serve_until_signalled(role);
        let mut health = HealthClient::new(
            tonic::transport::Channel::from_shared(format!("http://{addr}"))?.connect().await?,
        );
        let status = |s: &str| HealthCheckRequest { service: s.to_owned() };
        let start = std::time::Instant::now();
        while health.check(status("")).await?.into_inner().status != ServingStatus::Serving as i32 {
            assert!(start.elapsed() < Duration::from_secs(10), "never SERVING");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = signal.send(());
        let start = std::time::Instant::now();
        while health.check(status("")).await?.into_inner().status
            != ServingStatus::NotServing as i32
        {
            assert!(start.elapsed() < Duration::from_secs(10), "still SERVING while draining");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = hold.send(());
        served.await??;
        Ok(())
    }

    /// A role keeps at most its cap of gRPC connections: one more is closed at accept, and a
    /// place freed (a connection closed) takes the next.
    #[tokio::test]
    async fn a_connection_past_the_cap_is_closed_and_a_freed_place_is_taken_again()
    -> Result<(), Box<dyn std::error::Error>> {
        use tonic::transport::Channel;
        use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
        let dir = tempfile::tempdir()?;
        let mut role = role(dir.path(), true).await?;
        role.limit_connections(2);
        let addr = role.grpc_addr().ok_or("no address")?;
        let (signal, served) = serve_until_signalled(role);
        let url = format!("http://{addr}");
        let check = |c: Channel| async move {
            let mut health = HealthClient::new(c);
            let asked = HealthCheckRequest { service: String::new() };
            tokio::time::timeout(Duration::from_secs(5), health.check(asked)).await
        };
        let first = Channel::from_shared(url.clone())?.connect().await?;
        let second = Channel::from_shared(url.clone())?.connect().await?;
        check(first.clone()).await??;
        check(second.clone()).await??;
        let third = Channel::from_shared(url.clone())?.connect().await;
        let answered = match third {
            Ok(c) => matches!(check(c).await, Ok(Ok(_))),
            Err(_) => false,
        };
        assert!(!answered, "a third connection was served past a cap of two");
        drop(first);
        let start = std::time::Instant::now();
        loop {
            let next = Channel::from_shared(url.clone())?.connect().await;
            if let Ok(c) = next
                && matches!(check(c).await, Ok(Ok(_)))
            {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "the freed place never taken");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        check(second).await??;
        let _ = signal.send(());
        served.await??;
        Ok(())
    }

    #[tokio::test]
    async fn a_role_serves_grpc_over_mutual_tls_to_clients_the_ca_signed_only()
    -> Result<(), Box<dyn std::error::Error>> {
        use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
        use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
        let dir = tempfile::tempdir()?;
        let pki = testkit::certs::Pki::new(dir.path(), "role")?;
        let server = pki.issue("server", "writer")?;
        let mut role = role(dir.path(), true).await?;
        role.use_tls(Some(&config::TlsConfig {
            cert: Some(server.cert),
            key: Some(server.key),
            ca: Some(pki.ca()),
            client_auth: config::ClientAuth::Required,
        }))?;
        let addr = role.grpc_addr().ok_or("no address")?;
        let (signal, served) = serve_until_signalled(role);
        let ca = Certificate::from_pem(std::fs::read(pki.ca())?);
        let check = |tls: ClientTlsConfig, url: String| async move {
            let channel = Channel::from_shared(url)?.tls_config(tls)?.connect().await?;
            let req = HealthCheckRequest { service: String::new() };
            HealthClient::new(channel).check(req).await?;
            Ok::<_, Box<dyn std::error::Error>>(())
        };
        let alice = pki.issue("alice", "alice")?;
        let identity = Identity::from_pem(std::fs::read(&alice.cert)?, std::fs::read(&alice.key)?);
        let https = format!("https://localhost:{}", addr.port());
        let mutual = ClientTlsConfig::new().ca_certificate(ca.clone()).identity(identity);
        check(mutual, https.clone()).await?;
        let no_cert = ClientTlsConfig::new().ca_certificate(ca);
        assert!(check(no_cert, https).await.is_err(), "a client without a certificate got in");
        // Plaintext HTTP/2 to the TLS port: no answer.
        let plain = async {
            let channel = Channel::from_shared(format!("http://{addr}"))?.connect().await?;
            let req = HealthCheckRequest { service: String::new() };
            HealthClient::new(channel).check(req).await?;
            Ok::<_, Box<dyn std::error::Error>>(())
        };
        let plain = tokio::time::timeout(Duration::from_secs(15), plain).await;
        assert!(!matches!(plain, Ok(Ok(()))), "a plaintext client was answered");
        let _ = signal.send(());
        served.await??;
        Ok(())
    }
}
