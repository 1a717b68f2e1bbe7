//! The consumer: one partition of a stream, read in offset order from a chosen start; at the
//! high watermark it long-polls the writer, which answers as soon as a commit lands.

use std::time::Duration;

use bytes::Bytes;

use crate::batch;
use crate::router::{Backoff, ClientConfig, Route, Router};
use crate::{ClientError, LogClient};

/// Where a consumer starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartAt {
    /// The first offset still retained.
    Beginning,
    /// The high watermark when the consumer is made: only records committed later.
    End,
    /// This offset (between the first retained offset and the high watermark).
    Offset(u64),
}

/// One record read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumedRecord {
    pub partition: u32,
    pub offset: u64,
    /// The record's own timestamp if it has one, else its entry's (the writer's clock).
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub headers: Vec<(String, Bytes)>,
    pub value: Bytes,
}

/// Reads one partition. Reads go to the partition's serving writer (any writer can serve
/// committed data; the owner also answers long polls first).
#[derive(Debug)]
pub struct Consumer {
    router: Router,
    stream: String,
    partition: u32,
    route: Route,
    position: u64,
}

/// Retries of a read on UNAVAILABLE (re-routing each time) before giving up.
const READ_ATTEMPTS: u32 = 8;

impl Consumer {
    pub async fn new(
        client: ClientConfig,
        stream: &str,
        partition: u32,
        start: StartAt,
    ) -> Result<Self, ClientError> {
        let router = Router::connect(client).await?;
        let route = router.route(stream, partition).await?;
        let mut c = Consumer { router, stream: stream.to_owned(), partition, route, position: 0 };
        let info = c.with_writer(|w, log| async move { w.info(log).await }).await?;
        c.position = match start {
            StartAt::Beginning => info.first_offset,
            StartAt::End => info.next_offset,
            StartAt::Offset(o) if (info.first_offset..=info.next_offset).contains(&o) => o,
            StartAt::Offset(o) => {
                return Err(ClientError::new(
                    crate::Code::OffsetOutOfRange,
                    format!(
                        "offset {o} of {stream}/{partition} is outside [{}, {}]",
                        info.first_offset, info.next_offset
                    ),
                ));
            }
        };
        Ok(c)
    }

    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// The offset of the next record `poll` returns.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The partition's high watermark now.
    pub async fn high_watermark(&mut self) -> Result<u64, ClientError> {
        Ok(self.with_writer(|w, log| async move { w.info(log).await }).await?.next_offset)
    }

    /// Up to `max_records` records from the position on; at the high watermark waits up to
    /// `max_wait` for a commit (zero: never waits). Advances the position past what it returns.
    pub async fn poll(
        &mut self,
        max_records: u64,
        max_wait: Duration,
    ) -> Result<Vec<ConsumedRecord>, ClientError> {
        let start = self.position;
        let wait_ms = u32::try_from(max_wait.as_millis()).unwrap_or(u32::MAX);
        let resp = self
            .with_writer(|w, log| async move {
                w.read_entries(log, start, max_records.max(1), wait_ms).await
            })
            .await?;
        let mut out = Vec::new();
        let mut next = self.position;
        for entry in resp.entries {
            let Some(h) = entry.header else { continue };
            let records = batch::decode_at(&entry.payload).map_err(|e| {
                ClientError::new(
                    crate::Code::Internal,
                    format!(
                        "{}/{} entry at offset {}: {e} (not written by a Lakelog producer?)",
                        self.stream, self.partition, h.offset
                    ),
                )
            })?;
            let mut whole = true;
            for (at, r) in records {
                let offset = h.offset + at;
                if offset < self.position {
                    continue;
                }
                if out.len() as u64 >= max_records {
                    whole = false;
                    break;
                }
                next = offset + 1;
                out.push(ConsumedRecord {
                    partition: self.partition,
                    offset,
                    timestamp_ms: r.timestamp_ms.unwrap_or(h.timestamp_ms),
                    key: r.key,
                    headers: r.headers,
                    value: r.value,
                });
            }
            // Past the entry's last offset, records or not (a compacted log's entry may end in
            // offsets that hold none, or hold none at all).
            if !whole {
                break;
            }
            next = next.max(h.offset + u64::from(h.record_count));
        }
        self.position = next;
        Ok(out)
    }

    /// Calls the serving writer, re-routing through the catalog while it is unreachable.
    async fn with_writer<T, F, Fut>(&mut self, call: F) -> Result<T, ClientError>
    where
        F: Fn(LogClient, u64) -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        let timeout = self.router.cfg.request_timeout;
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
        let mut attempt = 0;
        loop {
            attempt += 1;
            let r = async {
                let w = self.router.writer(&self.route.owner_address).await?;
                match tokio::time::timeout(timeout, call(w, self.route.log_id)).await {
                    Ok(r) => r,
                    Err(_) => {
                        Err(ClientError::new(crate::Code::Unavailable, "read: no answer in time"))
                    }
                }
            }
            .await;
            match r {
                Err(e) if e.code == "UNAVAILABLE" && attempt < READ_ATTEMPTS => {
                    backoff.wait().await;
                    if let Ok(route) = self.router.route(&self.stream, self.partition).await {
                        self.route = route;
                    }
                }
                r => return r,
            }
        }
    }
}
