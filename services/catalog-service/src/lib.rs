//! The catalog role: serves the `CatalogService` (proto/lakelog/catalog/v1) in front of
//! [`catalog::Catalog`]. A thin adapter: proto ↔ domain conversions, and in [`to_status`] the
//! one mapping of catalog errors to gRPC statuses.
//!
//! Depends on libs only; never on another service.

use catalog::{Catalog, CatalogError, StreamInfo, StreamProps};
use proto::catalog::v1 as pb;
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status};

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
        let (partition, log) = match r.target {
            Some(pb::route_request::Target::Partition(p)) => {
                (p, self.catalog.route(&r.name, p).await.map_err(to_status)?)
            }
            Some(pb::route_request::Target::Key(k)) => {
                self.catalog.route_key(&r.name, &k).await.map_err(to_status)?
            }
            None => return Err(Status::invalid_argument("route needs a partition or a key")),
        };
        Ok(Response::new(pb::RouteResponse { partition, log_id: log.0 }))
    }
}
