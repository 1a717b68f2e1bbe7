//! The catalog role: serves the `CatalogService` (proto/lakelog/catalog/v1) in front of
//! [`catalog::Catalog`]. A thin adapter: proto ↔ domain conversions, and in [`to_status`] the
//! one mapping of catalog errors to gRPC statuses.
//!
//! Depends on libs only; never on another service.

use std::future::Future;

use catalog::{Catalog, CatalogError, StreamInfo, StreamProps, Target};
use proto::catalog::v1 as pb;
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status};

/// Why the role could not start or stopped.
pub type RunError = logservice::RoleError;

/// Runs the catalog role until `shutdown` resolves: registers as a member (role `catalog`)
/// under a lease, serves the CatalogService and gRPC health on `catalog.listen`, then
/// deregisters.
pub async fn run(
    node: &config::NodeConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), RunError> {
    let c = &node.catalog;
    let listener = logservice::bind(c.listen).await?;
    let meta = metadata::open(&node.metadata).await?;
    let objects = objstore::build(&node.object_store)?;
    let reader = logstore::LogReader::new(meta.clone(), objects, &node.cluster);
    let id = c.id.clone().unwrap_or_else(|| logstore::membership::random_id("catalog"));
    let record = logstore::records::MemberRecord {
        id: id.clone(),
        role: "catalog".to_owned(),
        address: c.advertise.clone().unwrap_or_else(|| format!("http://{}", c.listen)),
        zone: "*".to_owned(),
    };
    let registration =
        logstore::membership::register(meta.clone(), &node.cluster, record, c.lease_ttl.0).await?;
    let (health, health_service) = tonic_health::server::health_reporter();
    type Named = pb::catalog_service_server::CatalogServiceServer<CatalogServiceImpl>;
    let name = <Named as tonic::server::NamedService>::NAME;
    let follow = logservice::health::follow_stores(
        health,
        vec![name.to_owned()],
        meta.clone(),
        reader.objects().clone(),
    )
    .await;
    let catalog = Catalog::new(meta, reader, &node.cluster);
    tracing::info!(addr = %c.listen, catalog = %id, "catalog serving");
    let served = tonic::transport::Server::builder()
        .layer(telemetry::GrpcServerLayer::global())
        .add_service(health_service)
        .add_service(CatalogServiceImpl::new(catalog).server())
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener),
            shutdown,
        )
        .await;
    follow.abort();
    registration.close().await;
    Ok(served?)
}

/// The CatalogService over one catalog.
#[derive(Clone, Debug)]
pub struct CatalogServiceImpl {
    catalog: Catalog,
}

impl CatalogServiceImpl {
    pub fn new(catalog: Catalog) -> Self {
        CatalogServiceImpl { catalog }
    }

    /// The tonic service, ready to add to a server.
    pub fn server(self) -> pb::catalog_service_server::CatalogServiceServer<Self> {
        pb::catalog_service_server::CatalogServiceServer::new(self)
    }
}

/// The one place catalog errors become statuses, with the `lakelog-code` metadata entry.
pub fn to_status(e: CatalogError) -> Status {
    let (grpc, code) = match &e {
        CatalogError::InvalidArgument(_) => (tonic::Code::InvalidArgument, "INVALID_ARGUMENT"),
        CatalogError::NotFound(_) => (tonic::Code::NotFound, "NOT_FOUND"),
        CatalogError::AlreadyExists(_) => (tonic::Code::AlreadyExists, "ALREADY_EXISTS"),
        CatalogError::Meta(m) if m.is_retryable() => (tonic::Code::Unavailable, "UNAVAILABLE"),
        CatalogError::Log(l) if l.code() == logstore::Code::Unavailable => {
            (tonic::Code::Unavailable, "UNAVAILABLE")
        }
        CatalogError::Meta(_) | CatalogError::Log(_) | CatalogError::Corrupt(_) => {
            (tonic::Code::Internal, "INTERNAL")
        }
    };
    let mut status = Status::new(grpc, e.to_string());
    status.metadata_mut().insert("lakelog-code", MetadataValue::from_static(code));
    status
}

fn stream(s: StreamInfo) -> pb::Stream {
    pb::Stream {
        name: s.name,
        identity: s.identity,
        partitions: s.partitions.into_iter().map(|l| l.0).collect(),
        retention_ms: s.props.retention_ms,
        retention_bytes: s.props.retention_bytes,
    }
}

#[tonic::async_trait]
impl pb::catalog_service_server::CatalogService for CatalogServiceImpl {
    async fn create_stream(
        &self,
        req: Request<pb::CreateStreamRequest>,
    ) -> Result<Response<pb::CreateStreamResponse>, Status> {
        let r = req.into_inner();
        let props =
            StreamProps { retention_ms: r.retention_ms, retention_bytes: r.retention_bytes };
        let s = self.catalog.create(&r.name, r.partitions, props).await.map_err(to_status)?;
        Ok(Response::new(pb::CreateStreamResponse { stream: Some(stream(s)) }))
    }

    async fn get_stream(
        &self,
        req: Request<pb::GetStreamRequest>,
    ) -> Result<Response<pb::GetStreamResponse>, Status> {
        let s = self.catalog.get(&req.into_inner().name).await.map_err(to_status)?;
        Ok(Response::new(pb::GetStreamResponse { stream: Some(stream(s)) }))
    }

    async fn list_streams(
        &self,
        _: Request<pb::ListStreamsRequest>,
    ) -> Result<Response<pb::ListStreamsResponse>, Status> {
        let all = self.catalog.list().await.map_err(to_status)?;
        Ok(Response::new(pb::ListStreamsResponse {
            streams: all.into_iter().map(stream).collect(),
        }))
    }

    async fn add_partitions(
        &self,
        req: Request<pb::AddPartitionsRequest>,
    ) -> Result<Response<pb::AddPartitionsResponse>, Status> {
        let r = req.into_inner();
        let s = self.catalog.add_partitions(&r.name, r.to).await.map_err(to_status)?;
        Ok(Response::new(pb::AddPartitionsResponse { stream: Some(stream(s)) }))
    }

    async fn delete_stream(
        &self,
        req: Request<pb::DeleteStreamRequest>,
    ) -> Result<Response<pb::DeleteStreamResponse>, Status> {
        self.catalog.delete(&req.into_inner().name).await.map_err(to_status)?;
        Ok(Response::new(pb::DeleteStreamResponse {}))
    }

    async fn route(
        &self,
        req: Request<pb::RouteRequest>,
    ) -> Result<Response<pb::RouteResponse>, Status> {
        let r = req.into_inner();
        let target = match &r.target {
            Some(pb::route_request::Target::Partition(p)) => Target::Partition(*p),
            Some(pb::route_request::Target::Key(k)) => Target::Key(k),
            None => return Err(Status::invalid_argument("route needs a partition or a key")),
        };
        let zone = Some(r.zone.as_str()).filter(|z| !z.is_empty());
        let route = self.catalog.route_to(&r.name, target, zone).await.map_err(to_status)?;
        let (owner_id, owner_address) = route.owner.map(|m| (m.id, m.address)).unwrap_or_default();
        Ok(Response::new(pb::RouteResponse {
            partition: route.partition,
            log_id: route.log.0,
            identity: route.identity,
            partitions: route.partitions,
            owner_id,
            owner_address,
            slot: route.slot,
        }))
    }

    async fn list_members(
        &self,
        req: Request<pb::ListMembersRequest>,
    ) -> Result<Response<pb::ListMembersResponse>, Status> {
        let members = self.catalog.members(&req.into_inner().role).await.map_err(to_status)?;
        Ok(Response::new(pb::ListMembersResponse {
            members: members
                .into_iter()
                .map(|m| pb::Member { id: m.id, address: m.address, zone: m.zone })
                .collect(),
        }))
    }
}
