//! Finding a stream partition's log and serving writer through the catalog, and keeping one
//! connection per writer.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Duration;

use crate::{CatalogClient, ClientError, LogClient, Security, Stream};

/// How a client reaches a cluster.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The catalog's endpoint, `http://host:port` (`lakelog standalone` serves it on its one
    /// port).
    pub catalog: String,
    /// This client's zone: writers of the zone are chosen while any lives, then any writer.
    pub zone: Option<String>,
    /// How long one call may go unanswered; an append past it has an unknown outcome
    /// (default 30 s, the writers' default flush deadline).
    pub request_timeout: Duration,
    /// TLS files and token, for the catalog and every writer alike.
    pub security: Security,
}

impl ClientConfig {
    pub fn new(catalog: impl Into<String>) -> Self {
        ClientConfig {
            catalog: catalog.into(),
            zone: None,
            request_timeout: Duration::from_secs(30),
            security: Security::default(),
        }
    }

    pub fn with_security(mut self, security: Security) -> Self {
        self.security = security;
        self
    }

    pub fn with_zone(mut self, zone: impl Into<String>) -> Self {
        let zone = zone.into();
        self.zone = (!zone.is_empty()).then_some(zone);
        self
    }
}

/// Where one partition's appends go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub partition: u32,
    pub log_id: u64,
    /// The serving writer; empty when no writer lives.
    pub owner_id: String,
    pub owner_address: String,
    /// The owner slot to append in.
    pub slot: String,
}

/// One LogService connection per address, made on first use, then shared (a channel
/// reconnects by itself).
#[derive(Debug, Default)]
pub(crate) struct Connections {
    open: Mutex<HashMap<String, LogClient>>,
    security: Security,
}

impl Connections {
    /// The connection to `address`; making it may take at most `timeout`.
    pub fn new(security: Security) -> Self {
        Connections { open: Mutex::default(), security }
    }

    pub async fn get(&self, address: &str, timeout: Duration) -> Result<LogClient, ClientError> {
        if let Some(c) = self.open.lock().get(address) {
            return Ok(c.clone());
        }
        let connect = LogClient::connect_with(address, &self.security);
        let c = match tokio::time::timeout(timeout, connect).await {
            Ok(c) => c?,
            Err(_) => {
                return Err(ClientError::new(
                    crate::Code::Unavailable,
                    format!("{address}: no answer"),
                ));
            }
        };
        self.open.lock().insert(address.to_owned(), c.clone());
        Ok(c)
    }
}

/// The catalog connection and a connection per writer, shared by producers and consumers.
#[derive(Debug)]
pub(crate) struct Router {
    pub cfg: ClientConfig,
    pub catalog: CatalogClient,
    writers: Connections,
}

impl Router {
    pub async fn connect(cfg: ClientConfig) -> Result<Self, ClientError> {
        let catalog = CatalogClient::connect_with(&cfg.catalog, &cfg.security).await?;
        let writers = Connections::new(cfg.security.clone());
        Ok(Router { cfg, catalog, writers })
    }

    pub async fn stream(&self, name: &str) -> Result<Stream, ClientError> {
        self.catalog.get(name).await
    }

    pub async fn route(&self, stream: &str, partition: u32) -> Result<Route, ClientError> {
        let r = self.catalog.route(stream, partition, self.cfg.zone.as_deref()).await?;
        Ok(Route {
            partition: r.partition,
            log_id: r.log_id,
            owner_id: r.owner_id,
            owner_address: r.owner_address,
            slot: r.slot,
        })
    }

    /// A connection to the writer at `address`.
    pub async fn writer(&self, address: &str) -> Result<LogClient, ClientError> {
        if address.is_empty() {
            return Err(ClientError::new(
                crate::Code::Unavailable,
                "no live writer serves this partition",
            ));
        }
        self.writers.get(address, self.cfg.request_timeout).await
    }
}

/// Doubling waits between retries, from `first` up to `max`.
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub fn new(first: Duration, max: Duration) -> Self {
        Backoff { next: first, max }
    }

    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(self.max);
    }
}
