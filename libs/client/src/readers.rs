//! Reads spread over read-only readers (seed 001): catch-up and batch reads go round-robin to
//! the live readers (found through the catalog, or given directly); a reader that cannot be
//! reached is skipped and the call tried on the next, so a scan survives a reader's death.
//! Tail reads (waiting at the high watermark) belong to writers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::router::Connections;
use crate::{CatalogClient, ClientError, LogClient, Security};

/// A set of readers, called round-robin with failover. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct ReaderPool {
    addresses: Vec<String>,
    clients: Connections,
    next: AtomicUsize,
}

/// How long connecting to one reader may take before the pool moves on.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

impl ReaderPool {
    /// The readers at these addresses.
    pub fn new(addresses: Vec<String>) -> Result<Self, ClientError> {
        if addresses.is_empty() {
            return Err(ClientError::new(crate::Code::Unavailable, "no reader to read from"));
        }
        Ok(ReaderPool { addresses, clients: Connections::default(), next: AtomicUsize::new(0) })
    }

    /// Reaches the readers with `security`'s TLS files and token.
    pub fn with_security(mut self, security: Security) -> Self {
        self.clients = Connections::new(security);
        self
    }

    /// The live readers the catalog lists.
    pub async fn discover(catalog: &str) -> Result<Self, ClientError> {
        Self::discover_with(catalog, &Security::default()).await
    }

    /// The live readers the catalog lists, both reached with `security`.
    pub async fn discover_with(catalog: &str, security: &Security) -> Result<Self, ClientError> {
        let members =
            CatalogClient::connect_with(catalog, security).await?.members("reader").await?;
        Ok(Self::new(members.into_iter().map(|m| m.address).collect())?
            .with_security(security.clone()))
    }

    pub fn addresses(&self) -> &[String] {
        &self.addresses
    }

    /// Calls the next reader; on UNAVAILABLE tries each other reader once before failing.
    pub async fn call<T, F, Fut>(&self, f: F) -> Result<T, ClientError>
    where
        F: Fn(LogClient) -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        let mut last = None;
        for i in 0..self.addresses.len() {
            let address = &self.addresses[(first + i) % self.addresses.len()];
            let r = match self.clients.get(address, CONNECT_TIMEOUT).await {
                Ok(c) => f(c).await,
                Err(e) => Err(e),
            };
            match r {
                Err(e) if e.code == "UNAVAILABLE" => last = Some(e),
                r => return r,
            }
        }
        Err(last
            .unwrap_or_else(|| ClientError::new(crate::Code::Unavailable, "no reader answered")))
    }

    /// Entries from `start` (never past the high watermark; readers do not wait).
    pub async fn read_entries(
        &self,
        log_id: u64,
        start: u64,
        max_records: u64,
    ) -> Result<proto::log::v1::ReadEntriesResponse, ClientError> {
        self.call(|c| async move { c.read_entries(log_id, start, max_records, 0).await }).await
    }
}
