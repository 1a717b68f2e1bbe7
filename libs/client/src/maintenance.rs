//! The maintenance roles' APIs (proto/lakelog/maintenance/v1): a running compactor's or
//! cleaner's status, and a cycle now. A standalone serves both on its one port.

use proto::maintenance::v1 as mpb;
use proto::maintenance::v1::cleaner_service_client::CleanerServiceClient;
use proto::maintenance::v1::compactor_service_client::CompactorServiceClient;

use crate::{ClientError, Code, Security, Transport, transport};

/// A call to an endpoint that serves no such service reads as this, naming what to point at.
fn not_served(endpoint: &str, service: &str, role: &str) -> impl Fn(tonic::Status) -> ClientError {
    let (endpoint, service, role) = (endpoint.to_owned(), service.to_owned(), role.to_owned());
    move |s| {
        if s.code() == tonic::Code::Unimplemented {
            ClientError {
                code: Code::InvalidArgument,
                message: format!(
                    "{endpoint} serves no {service}: point --endpoint at a {role}'s \
                     maintenance.listen address, or at a standalone"
                ),
                ..Default::default()
            }
        } else {
            s.into()
        }
    }
}

/// A running compactor's CompactorService.
#[derive(Clone, Debug)]
pub struct CompactorClient {
    endpoint: String,
    inner: CompactorServiceClient<Transport>,
}

impl CompactorClient {
    pub async fn connect(endpoint: &str) -> Result<Self, ClientError> {
        Self::connect_with(endpoint, &Security::default()).await
    }

    pub async fn connect_with(endpoint: &str, security: &Security) -> Result<Self, ClientError> {
        let inner = CompactorServiceClient::new(transport(endpoint, security).await?);
        Ok(CompactorClient { endpoint: endpoint.to_owned(), inner })
    }

    /// The settings, the last cycle and the claims held now.
    pub async fn status(&self) -> Result<mpb::CompactorStatusResponse, ClientError> {
        let r = self.inner.clone().status(mpb::CompactorStatusRequest {}).await;
        Ok(r.map_err(not_served(&self.endpoint, "CompactorService", "compactor"))?.into_inner())
    }

    /// One cycle now in the running compactor: every live log (after streams' retention) or
    /// only `log`; `min_chunks` overrides its setting.
    pub async fn compact_now(
        &self,
        log: Option<u64>,
        min_chunks: Option<u32>,
    ) -> Result<mpb::CompactionCycle, ClientError> {
        let req = mpb::CompactNowRequest { log_id: log, min_chunks };
        let r = self.inner.clone().compact_now(req).await;
        let r = r.map_err(not_served(&self.endpoint, "CompactorService", "compactor"))?;
        Ok(r.into_inner().cycle.unwrap_or_default())
    }
}

/// A running cleaner's CleanerService.
#[derive(Clone, Debug)]
pub struct CleanerClient {
    endpoint: String,
    inner: CleanerServiceClient<Transport>,
}

impl CleanerClient {
    pub async fn connect(endpoint: &str) -> Result<Self, ClientError> {
        Self::connect_with(endpoint, &Security::default()).await
    }

    pub async fn connect_with(endpoint: &str, security: &Security) -> Result<Self, ClientError> {
        let inner = CleanerServiceClient::new(transport(endpoint, security).await?);
        Ok(CleanerClient { endpoint: endpoint.to_owned(), inner })
    }

    /// The cutoff read now, who holds it back and by how much, the bytes reclaimable, the
    /// last cycle.
    pub async fn status(&self) -> Result<mpb::CleanerStatusResponse, ClientError> {
        let r = self.inner.clone().status(mpb::CleanerStatusRequest {}).await;
        Ok(r.map_err(not_served(&self.endpoint, "CleanerService", "cleaner"))?.into_inner())
    }

    /// One cycle now in the running cleaner, with `grace_ms` instead of its setting if given.
    pub async fn clean_now(&self, grace_ms: Option<u64>) -> Result<mpb::CleanCycle, ClientError> {
        let r = self.inner.clone().clean_now(mpb::CleanNowRequest { grace_ms }).await;
        let r = r.map_err(not_served(&self.endpoint, "CleanerService", "cleaner"))?;
        Ok(r.into_inner().cycle.unwrap_or_default())
    }
}
