//! The producer: records to a stream's partitions, batched per partition by linger and size,
//! each batch one entry appended at the partition's owning writer.
//!
//! Order: each partition has one task and at most one batch in flight, so a partition's
//! records commit in the order they were sent. Retries: NOT_OWNER (to the owner it names),
//! FENCED out of a slot (a handoff) and UNAVAILABLE (re-routed through the catalog, with
//! backoff, until `retry_timeout`) — all answers that say nothing was applied. A log an
//! operator fenced fails at once: it stays fenced until activated. An append whose outcome is
//! unknown (connection lost after sending, no answer within the request timeout, or a writer
//! saying so) is never retried: it may have committed, and a retry could write it twice. Its
//! records fail with `outcome_unknown` set; the caller decides.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::ClientError;
use crate::batch::{self, Record};
use crate::router::{Backoff, ClientConfig, Route, Router};

/// Producer settings; `Default` gives the documented defaults.
#[derive(Clone, Debug)]
pub struct ProducerConfig {
    /// How long a batch waits for more records once it has one (default 5 ms).
    pub linger: Duration,
    /// A batch is sent once its records' values and keys reach this many bytes (default
    /// 3 MiB: below the writers' default max entry size of 4 MiB with room for the batch
    /// encoding). With one batch in flight per partition, a partition's throughput is about
    /// this much per writer flush.
    pub batch_bytes: usize,
    /// Records queued per partition before `send` waits (default 10,000).
    pub queue_records: usize,
    /// How long a batch is retried on retryable answers before it fails (default 60 s: longer
    /// than a dead writer's lease, after which the catalog routes around it).
    pub retry_timeout: Duration,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            linger: Duration::from_millis(5),
            batch_bytes: 3 << 20,
            queue_records: 10_000,
            retry_timeout: Duration::from_secs(60),
        }
    }
}

/// Where a record was committed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordAck {
    pub partition: u32,
    pub offset: u64,
    /// The writer (id) that committed it.
    pub writer: String,
}

type Reply = oneshot::Sender<Result<RecordAck, ClientError>>;

struct Item {
    record: Record,
    reply: Reply,
}

/// A record's pending outcome.
#[derive(Debug)]
pub struct Delivery(oneshot::Receiver<Result<RecordAck, ClientError>>);

impl Delivery {
    /// Waits for the record's commit or failure.
    pub async fn wait(self) -> Result<RecordAck, ClientError> {
        self.0
            .await
            .unwrap_or_else(|_| Err(ClientError::new(crate::Code::Unavailable, "producer stopped")))
    }
}

struct Inner {
    router: Router,
    stream: String,
    partitions: u32,
    cfg: ProducerConfig,
    queues: Mutex<HashMap<u32, mpsc::Sender<Item>>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    round_robin: AtomicU32,
}

/// Sends records to one stream. Cheap to clone; `close` waits for every queued record.
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer").field("stream", &self.inner.stream).finish()
    }
}

impl Producer {
    /// A producer for `stream` (which must exist; its partition count is read once).
    pub async fn new(
        client: ClientConfig,
        stream: &str,
        cfg: ProducerConfig,
    ) -> Result<Self, ClientError> {
        if cfg.batch_bytes == 0 || cfg.queue_records == 0 {
            return Err(ClientError::new(
                crate::Code::InvalidArgument,
                "batch_bytes and queue_records must be at least 1",
            ));
        }
        let router = Router::connect(client).await?;
        let info = router.stream(stream).await?;
        let partitions = u32::try_from(info.partitions.len()).unwrap_or(u32::MAX);
        Ok(Producer {
            inner: Arc::new(Inner {
                router,
                stream: stream.to_owned(),
                partitions,
                cfg,
                queues: Mutex::new(HashMap::new()),
                tasks: Mutex::new(Vec::new()),
                round_robin: AtomicU32::new(0),
            }),
        })
    }

    /// The stream's partition count, as read when the producer was made.
    pub fn partitions(&self) -> u32 {
        self.inner.partitions
    }

    /// The partition a record goes to: its key's (Kafka's murmur2 partitioner), else the next
    /// partition round-robin.
    pub fn partition_of(&self, key: Option<&[u8]>) -> u32 {
        match key {
            Some(k) => routing::partition_for_key(k, self.inner.partitions),
            None => self.inner.round_robin.fetch_add(1, Ordering::Relaxed) % self.inner.partitions,
        }
    }

    /// Queues a record for its key's partition; waits while that partition's queue is full.
    pub async fn send(&self, record: Record) -> Result<Delivery, ClientError> {
        let p = self.partition_of(record.key.as_deref());
        self.send_to(p, record).await
    }

    /// Queues a record for partition `partition`.
    pub async fn send_to(&self, partition: u32, record: Record) -> Result<Delivery, ClientError> {
        if partition >= self.inner.partitions {
            return Err(ClientError::new(
                crate::Code::InvalidArgument,
                format!(
                    "partition {partition} out of range: stream {} has {}",
                    self.inner.stream, self.inner.partitions
                ),
            ));
        }
        let queue = self.queue(partition);
        let (tx, rx) = oneshot::channel();
        queue
            .send(Item { record, reply: tx })
            .await
            .map_err(|_| ClientError::new(crate::Code::Unavailable, "producer closed"))?;
        Ok(Delivery(rx))
    }

    fn queue(&self, partition: u32) -> mpsc::Sender<Item> {
        let mut queues = self.inner.queues.lock().unwrap_or_else(|e| e.into_inner());
        queues
            .entry(partition)
            .or_insert_with(|| {
                let (tx, rx) = mpsc::channel(self.inner.cfg.queue_records);
                let task = tokio::spawn(partition_task(self.inner.clone(), partition, rx));
                self.inner.tasks.lock().unwrap_or_else(|e| e.into_inner()).push(task);
                tx
            })
            .clone()
    }

    /// Sends what is queued and waits until every record sent so far has its outcome.
    pub async fn close(self) {
        self.inner.queues.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let tasks =
            std::mem::take(&mut *self.inner.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for t in tasks {
            let _ = t.await;
        }
    }
}

/// A record's size in a batch, give or take its few bytes of framing.
fn record_bytes(r: &Record) -> usize {
    let headers: usize = r.headers.iter().map(|(k, v)| k.len() + v.len() + 6).sum();
    r.value.len() + r.key.as_ref().map_or(0, Bytes::len) + headers + 19
}

async fn partition_task(inner: Arc<Inner>, partition: u32, mut rx: mpsc::Receiver<Item>) {
    let mut route: Option<Route> = None;
    let mut carry: Option<Item> = None;
    loop {
        let first = match carry.take() {
            Some(i) => i,
            None => match rx.recv().await {
                Some(i) => i,
                None => return,
            },
        };
        let mut bytes = record_bytes(&first.record);
        let mut items = vec![first];
        let until = Instant::now() + inner.cfg.linger;
        while bytes < inner.cfg.batch_bytes {
            match tokio::time::timeout_at(until, rx.recv()).await {
                Ok(Some(i)) => {
                    let size = record_bytes(&i.record);
                    if bytes + size > inner.cfg.batch_bytes {
                        carry = Some(i);
                        break;
                    }
                    bytes += size;
                    items.push(i);
                }
                Ok(None) | Err(_) => break,
            }
        }
        send_batch(&inner, partition, &mut route, items).await;
    }
}

/// Appends one batch as one entry, retrying as the module doc says; answers every record.
async fn send_batch(inner: &Inner, partition: u32, route: &mut Option<Route>, items: Vec<Item>) {
    let (records, replies): (Vec<Record>, Vec<Reply>) =
        items.into_iter().map(|i| (i.record, i.reply)).unzip();
    let fail = |replies: Vec<Reply>, e: ClientError| {
        for r in replies {
            let _ = r.send(Err(e.clone()));
        }
    };
    let payload = match batch::encode(&records) {
        Ok(p) => p,
        Err(e) => {
            return fail(replies, ClientError::new(crate::Code::InvalidArgument, e.to_string()));
        }
    };
    drop(records);
    let n = u32::try_from(replies.len()).unwrap_or(u32::MAX);
    let give_up = Instant::now() + inner.cfg.retry_timeout;
    let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1));
    let timeout = inner.router.cfg.request_timeout;
    loop {
        let attempt = async {
            let r = match route.clone() {
                Some(r) => r,
                None => inner.router.route(&inner.stream, partition).await?,
            };
            *route = Some(r.clone());
            let writer = inner.router.writer(&r.owner_address).await?;
            let call = writer.append_in_slot(r.log_id, &r.slot, n, payload.clone());
            match tokio::time::timeout(timeout, call).await {
                Ok(Ok(h)) => Ok((h, r.owner_id)),
                Ok(Err((e, owner))) => {
                    // Go straight to a named owner; else ask the catalog again.
                    *route = match owner {
                        Some((id, address)) if e.code == "NOT_OWNER" && !address.is_empty() => {
                            Some(Route { owner_id: id, owner_address: address, ..r })
                        }
                        _ => None,
                    };
                    Err(e)
                }
                Err(_) => Err(ClientError {
                    code: crate::Code::Unavailable,
                    message: format!("append to {}: no answer within {timeout:?}", r.owner_address),
                    outcome_unknown: true,
                    log_fenced: false,
                }),
            }
        };
        match attempt.await {
            Ok((h, writer)) => {
                for (i, reply) in replies.into_iter().enumerate() {
                    let ack = RecordAck {
                        partition,
                        offset: h.offset + i as u64,
                        writer: writer.clone(),
                    };
                    let _ = reply.send(Ok(ack));
                }
                return;
            }
            Err(e) if e.is_retryable() && Instant::now() < give_up => {
                if e.code != "NOT_OWNER" {
                    *route = None;
                }
                tracing::debug!(stream = %inner.stream, partition, error = %e, "append retried");
                backoff.wait().await;
            }
            Err(e) => {
                *route = None;
                return fail(replies, e);
            }
        }
    }
}
