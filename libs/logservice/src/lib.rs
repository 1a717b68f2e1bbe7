//! The LogService (proto/lakelog/log/v1) over log storage, shared by the writer role (every
//! call) and the reader role (reads only: every mutating call answers READ_ONLY, and reads
//! never wait at the high watermark). A thin adapter: proto ↔ domain conversions in
//! [`service`], and in [`status`] the one mapping of log-storage errors to gRPC statuses;
//! [`health`] keeps gRPC health NOT_SERVING while a store does not answer.
//!
//! Depends on `logstore`, `proto`, `codes` and the stores' crates; never on a service crate or
//! the catalog (the roles compose it).

pub mod health;
pub mod metered;
pub mod service;
pub mod status;

pub use service::LogServiceImpl;

/// Why a role (catalog, writer, reader) could not start, or stopped.
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
    Listen { addr: std::net::SocketAddr, source: std::io::Error },
    #[error("gRPC server: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// A reader over a node config's stores. The object store is built first: that makes no
/// request, and a config it refuses (no credentials) stops the role before it reaches any
/// server.
pub async fn open_reader(node: &config::NodeConfig) -> Result<logstore::LogReader, RoleError> {
    let objects = objstore::build(&node.object_store)?;
    let meta = metadata::open(&node.metadata).await?;
    Ok(logstore::LogReader::new(meta, objects, &node.cluster))
}

/// Serves gRPC health on `maintenance.health_listen`, if set, following `reader`'s stores (the
/// compactor and the cleaner, which serve nothing else over gRPC yet).
pub async fn serve_maintenance_health(
    node: &config::NodeConfig,
    reader: &logstore::LogReader,
) -> Result<Option<tokio::task::JoinHandle<()>>, RoleError> {
    let Some(addr) = node.maintenance.health_listen else { return Ok(None) };
    let served = health::serve_alone(addr, reader.meta().clone(), reader.objects().clone())
        .await
        .map_err(|source| RoleError::Listen { addr, source })?;
    Ok(Some(served))
}

/// Binds a role's gRPC listener; a taken or invalid address is [`RoleError::Listen`].
pub async fn bind(addr: std::net::SocketAddr) -> Result<tokio::net::TcpListener, RoleError> {
    tokio::net::TcpListener::bind(addr).await.map_err(|source| RoleError::Listen { addr, source })
}
