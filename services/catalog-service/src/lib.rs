//! The catalog role: serves the `CatalogService` (proto/lakelog/catalog/v1) in front of
//! [`catalog::Catalog`]. A thin adapter: proto ↔ domain conversions, and in [`to_status`] the
//! one mapping of catalog errors to gRPC statuses.
//!
//! Depends on libs only; never on another service.

pub mod auth_service;
pub mod iceberg_rest;

use std::future::Future;

use catalog::{Catalog, CatalogError, StreamConfig, StreamInfo, Target};
use proto::catalog::v1 as pb;
use tonic::{Request, Response, Status};

/// Why the role could not start or stopped.
pub type RunError = role::RoleError;

/// Runs the catalog role until `shutdown` resolves: registers as a member (role `catalog`)
/// under a lease, serves the CatalogService and gRPC health on `catalog.listen`, then
/// deregisters.
pub async fn run(
    node: &config::NodeConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), RunError> {
    let c = &node.catalog;
    let mut role = role::Role::open("catalog", Some(c.listen), c.tls.as_ref(), node).await?;
    let id = c.id.clone().unwrap_or_else(|| logstore::membership::random_id("catalog"));
    role.register(role::Member {
        role: "catalog".to_owned(),
        id: id.clone(),
        address: c.advertise.clone().unwrap_or_else(|| config::url_of(c.listen, &c.tls)),
        zone: "*".to_owned(),
        lease_ttl: c.lease_ttl.0,
        kafka: String::new(),
    })
    .await?;
    let catalog =
        Catalog::new(role.meta().clone(), role.reader(), &node.cluster).with_followed_streams();
    install(&mut role, catalog, &node.object_store);
    tracing::info!(addr = %c.listen, catalog = %id, "catalog serving");
    role.serve(shutdown, async {}).await
}

/// Adds the catalog's services to `role` (the catalog role's whole work; `standalone` adds
/// them beside the writer): the CatalogService, the AuthService and the Iceberg REST catalog
/// over `objects`' files.
pub fn install(role: &mut role::Role, catalog: Catalog, objects: &config::ObjectStoreConfig) {
    let authz = role.authorizer();
    role.add_service(
        CatalogServiceImpl::new(catalog.clone()).with_authorizer(authz.clone()).server(),
    );
    role.add_service(auth_service::AuthServiceImpl::new(role.auth_store(), authz).server());
    let access = iceberg_rest::FileAccess::of(objects);
    role.add_http_routes(iceberg_rest::routes(catalog, access));
}

/// The CatalogService over one catalog.
#[derive(Clone, Debug)]
pub struct CatalogServiceImpl {
    catalog: Catalog,
    authz: std::sync::Arc<security::Authorizer>,
}

impl CatalogServiceImpl {
    pub fn new(catalog: Catalog) -> Self {
        CatalogServiceImpl { catalog, authz: security::Authorizer::off() }
    }

    /// Lists only the streams the caller may describe (the gRPC guard decides the rest).
    pub fn with_authorizer(mut self, authz: std::sync::Arc<security::Authorizer>) -> Self {
        self.authz = authz;
        self
    }

    /// The tonic service, ready to add to a server.
    pub fn server(self) -> pb::catalog_service_server::CatalogServiceServer<Self> {
        pb::catalog_service_server::CatalogServiceServer::new(self)
    }
}

/// The one place catalog errors become statuses, with the `lakelog-code` metadata entry (the
/// codes and their names are the `codes` crate's, shared with the log service and the client).
pub fn to_status(e: CatalogError) -> Status {
    use logstore::Code;
    let (code, unknown) = match &e {
        CatalogError::InvalidArgument(_) => (Code::InvalidArgument, false),
        CatalogError::NotFound(_) => (Code::NotFound, false),
        CatalogError::AlreadyExists(_) => (Code::AlreadyExists, false),
        CatalogError::Meta(metadata::MetaError::NoSpace(_)) => (Code::ResourceExhausted, false),
        CatalogError::Meta(m) if m.is_retryable() => (Code::Unavailable, !m.outcome_known()),
        CatalogError::Log(l) => (l.code(), l.outcome_unknown()),
        CatalogError::Meta(_) | CatalogError::Corrupt(_) => (Code::Internal, false),
    };
    codes::grpc::error(code, e, unknown)
}

/// The configs a create asks for: its typed fields, then its `configs`, each checked.
fn config_of(r: &pb::CreateStreamRequest) -> Result<StreamConfig, streamconfig::Invalid> {
    let typed = [
        ("retention.ms", r.retention_ms.map(|v| v.to_string())),
        ("retention.bytes", r.retention_bytes.map(|v| v.to_string())),
        ("lake.table", r.lake_table.then(|| "true".to_owned())),
        ("lake.retention.ms", r.lake_retention_ms.map(|v| v.to_string())),
    ];
    let typed = typed.into_iter().filter_map(|(k, v)| Some((k.to_owned(), v?)));
    let all: Vec<(String, String)> =
        typed.chain(r.configs.iter().map(|(k, v)| (k.clone(), v.clone()))).collect();
    StreamConfig::from_pairs(all.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

fn stream(s: StreamInfo) -> pb::Stream {
    pb::Stream {
        name: s.name,
        identity: s.identity,
        partitions: s.partitions.into_iter().map(|l| l.0).collect(),
        retention_ms: s.config.get("retention.ms").and_then(|v| v.parse().ok()),
        retention_bytes: s.config.get("retention.bytes").and_then(|v| v.parse().ok()),
        lake_table: s.config.lake_table(),
        lake_retention_ms: s.config.lake_retention_ms(),
        configs: s.config.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect(),
    }
}

#[tonic::async_trait]
impl pb::catalog_service_server::CatalogService for CatalogServiceImpl {
    async fn create_stream(
        &self,
        req: Request<pb::CreateStreamRequest>,
    ) -> Result<Response<pb::CreateStreamResponse>, Status> {
        let r = req.into_inner();
        let config = config_of(&r).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let s = self.catalog.create(&r.name, r.partitions, config).await.map_err(to_status)?;
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
        req: Request<pb::ListStreamsRequest>,
    ) -> Result<Response<pb::ListStreamsResponse>, Status> {
        let p = req.extensions().get::<security::Principal>().cloned();
        let p = p.unwrap_or_else(security::Principal::anonymous);
        let all = self.catalog.list().await.map_err(to_status)?;
        let describe = security::acl::Operation::Describe;
        let stream_kind = security::acl::ResourceType::Stream;
        Ok(Response::new(pb::ListStreamsResponse {
            streams: all
                .into_iter()
                .filter(|s| self.authz.allows(&p, describe, stream_kind, &s.name))
                .map(stream)
                .collect(),
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

    async fn get_lake_table(
        &self,
        req: Request<pb::GetLakeTableRequest>,
    ) -> Result<Response<pb::GetLakeTableResponse>, Status> {
        let name = req.into_inner().name;
        let s = self.catalog.get(&name).await.map_err(to_status)?;
        if !s.config.lake_table() {
            return Err(to_status(CatalogError::InvalidArgument(format!(
                "stream {name} does not have lake.table set"
            ))));
        }
        let logs = self.catalog.logs();
        let key = logstore::keys::Keys::new(logs.keys().cluster()).lake_table(&s.identity);
        let kv = logs.meta().get(&key).await.map_err(|e| to_status(e.into()))?;
        let state = match kv {
            Some(kv) => {
                Some(maintenance::lakes::decode_table(&kv.value).map_err(|e| to_status(e.into()))?)
            }
            None => None,
        };
        let mut partitions = Vec::with_capacity(s.partitions.len());
        for (i, log) in s.partitions.iter().enumerate() {
            let info = logs.info(*log).await.map_err(|e| to_status(e.into()))?;
            let in_table = state
                .as_ref()
                .and_then(|t| t.ends.get(&log.0.to_string()).copied())
                .unwrap_or(0)
                .max(info.first_offset);
            let behind = match in_table < info.next_offset {
                true => logs.ingest_ms_at(*log, in_table).await.map_err(|e| to_status(e.into()))?,
                false => None,
            };
            partitions.push(pb::LakePartition {
                partition: u32::try_from(i).unwrap_or(u32::MAX),
                log_id: log.0,
                table_end_offset: in_table,
                log_end_offset: info.next_offset,
                oldest_behind_ms: behind.unwrap_or(0),
            });
        }
        let t = state.as_ref();
        Ok(Response::new(pb::GetLakeTableResponse {
            location: t.map(|t| t.location.clone()).unwrap_or_default(),
            metadata_location: t.and_then(|t| t.metadata_location()).unwrap_or_default(),
            snapshots: t.map_or(0, |t| u32::try_from(t.snapshots.len()).unwrap_or(u32::MAX)),
            last_commit_ms: t.and_then(|t| t.snapshots.last()).map_or(0, |s| s.timestamp_ms),
            partitions,
            data_files: t.map_or(0, |t| t.data_files().count() as u64),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code_of(s: &Status) -> Option<&str> {
        s.metadata().get(codes::CODE_KEY).and_then(|v| v.to_str().ok())
    }

    #[test]
    fn catalog_errors_carry_the_shared_codes() {
        let full = to_status(CatalogError::Meta(metadata::MetaError::NoSpace("quota".into())));
        assert_eq!(full.code(), tonic::Code::ResourceExhausted);
        assert_eq!(code_of(&full), Some("RESOURCE_EXHAUSTED"));
        let down = to_status(CatalogError::Meta(metadata::MetaError::Unavailable("x".into())));
        assert_eq!((down.code(), code_of(&down)), (tonic::Code::Unavailable, Some("UNAVAILABLE")));
        let unknown = to_status(CatalogError::Meta(metadata::MetaError::OutcomeUnknown {
            op: "txn",
            reason: "lost".into(),
        }));
        assert_eq!(
            unknown.metadata().get(codes::OUTCOME_KEY).and_then(|v| v.to_str().ok()),
            Some(codes::OUTCOME_UNKNOWN)
        );
        let lost = to_status(CatalogError::Log(logstore::LogError::from(
            metadata::MetaError::LeaseNotFound(3),
        )));
        assert_eq!(code_of(&lost), Some("UNAVAILABLE"));
        // Every code the client can parse comes from the one table.
        for c in logstore::Code::ALL {
            assert_eq!(codes::Code::parse(c.as_str()), Some(c));
        }
    }
}
