//! The producer: records to a stream's partitions, batched per partition by linger and size,
//! each batch one entry appended at the partition's owning writer.
//!
//! Order: each partition has one task, which keeps up to `max_in_flight` batches in flight on
//! one AppendStream to the owner; the writer admits and commits them in the order sent, and
//! once one fails it fails every later one of the stream with nothing applied, so the task
//! sends the failed ones again in order and a partition's records commit in the order they
//! were sent. Retries: NOT_OWNER (to the owner it names), FENCED out of a slot (a handoff),
//! UNAVAILABLE (re-routed through the catalog) and RESOURCE_EXHAUSTED (a writer too busy to
//! take more: the same writer), with backoff, until `retry_timeout` — all answers that say
//! nothing was applied. A log an operator fenced fails at once: it stays
//! fenced until activated. An append whose outcome is unknown (stream lost after sending, no
//! answer within the request timeout, or a writer saying so) is never retried: it may have
//! committed, and a retry could write it twice. Its records fail with `outcome_unknown` set;
//! the caller decides.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
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
    /// encoding). A partition moves at most `max_in_flight` batches per writer flush.
    pub batch_bytes: usize,
    /// Records queued per partition before `send` waits (default 10,000).
    pub queue_records: usize,
    /// How long a batch is retried on retryable answers before it fails (default 60 s: longer
    /// than a dead writer's lease, after which the catalog routes around it).
    pub retry_timeout: Duration,
    /// Batches of one partition sent and not yet answered, at most (default 5, as Kafka's
    /// idempotent producer). They go on one AppendStream, which commits them in order; 1
    /// waits for each batch's answer before sending the next.
    pub max_in_flight: usize,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            linger: Duration::from_millis(5),
            batch_bytes: 3 << 20,
            queue_records: 10_000,
            retry_timeout: Duration::from_secs(60),
            max_in_flight: 5,
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
        if cfg.batch_bytes == 0 || cfg.queue_records == 0 || cfg.max_in_flight == 0 {
            return Err(ClientError::new(
                crate::Code::InvalidArgument,
                "batch_bytes, queue_records and max_in_flight must be at least 1",
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
        let mut queues = self.inner.queues.lock();
        queues
            .entry(partition)
            .or_insert_with(|| {
                let (tx, rx) = mpsc::channel(self.inner.cfg.queue_records);
                let task = tokio::spawn(partition_task(self.inner.clone(), partition, rx));
                self.inner.tasks.lock().push(task);
                tx
            })
            .clone()
    }

    /// Sends what is queued and waits until every record sent so far has its outcome.
    pub async fn close(self) {
        self.inner.queues.lock().clear();
        let tasks = std::mem::take(&mut *self.inner.tasks.lock());
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

/// One batch, encoded: one entry.
struct Batch {
    payload: Bytes,
    replies: Vec<Reply>,
    /// Retried until then, at most.
    give_up: Instant,
}

impl Batch {
    /// Answers each record: appended at `offset` on, by `writer`.
    fn acked(self, partition: u32, offset: u64, writer: &str) {
        for (i, reply) in self.replies.into_iter().enumerate() {
            let ack = RecordAck { partition, offset: offset + i as u64, writer: writer.to_owned() };
            let _ = reply.send(Ok(ack));
        }
    }

    fn fail(self, e: &ClientError) {
        for r in self.replies {
            let _ = r.send(Err(e.clone()));
        }
    }
}

async fn partition_task(inner: Arc<Inner>, partition: u32, rx: mpsc::Receiver<Item>) {
    // The batcher hands over one batch at a time: records queue in `rx`, not as batches.
    let (tx, batches) = mpsc::channel(1);
    tokio::join!(batcher(&inner, rx, tx), sender(&inner, partition, batches));
}

/// Groups a partition's records into batches by `linger` and `batch_bytes`, in order.
async fn batcher(inner: &Inner, mut rx: mpsc::Receiver<Item>, out: mpsc::Sender<Batch>) {
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
        let (records, replies): (Vec<Record>, Vec<Reply>) =
            items.into_iter().map(|i| (i.record, i.reply)).unzip();
        let payload = match batch::encode(&records) {
            Ok(p) => p,
            Err(e) => {
                let e = ClientError::new(crate::Code::InvalidArgument, e.to_string());
                Batch { payload: Bytes::new(), replies, give_up: Instant::now() }.fail(&e);
                continue;
            }
        };
        drop(records);
        let give_up = Instant::now() + inner.cfg.retry_timeout;
        if out.send(Batch { payload, replies, give_up }).await.is_err() {
            return;
        }
    }
}

/// An open AppendStream to the partition's owner.
struct Pipe {
    pipe: crate::AppendPipe,
    route: Route,
    /// An answer failed: the writer fails every later append of the stream, so nothing more
    /// is sent on it; once its answers are in, the failed batches go again on a new one.
    broken: bool,
}

/// Sends a partition's batches in order, up to `max_in_flight` at once on one AppendStream,
/// retrying as the module doc says; answers every record.
async fn sender(inner: &Inner, partition: u32, mut batches: mpsc::Receiver<Batch>) {
    let max = inner.cfg.max_in_flight;
    let timeout = inner.router.cfg.request_timeout;
    let mut route: Option<Route> = None;
    let mut pipe: Option<Pipe> = None;
    // Sent and not answered, oldest first, each with when it was sent.
    let mut in_flight: VecDeque<(Batch, Instant)> = VecDeque::new();
    // To send, in order, before any batch still to come from the batcher: batches to retry.
    let mut queue: VecDeque<Batch> = VecDeque::new();
    // Answered with a retryable failure on a broken stream, oldest first.
    let mut retry: Vec<Batch> = Vec::new();
    let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1));
    let mut open = true;
    loop {
        // Send while there is room and a stream that takes more, and nothing waits to be sent
        // again (it goes first, once every answer of its stream is in).
        loop {
            let takes_more = pipe.as_ref().is_none_or(|p| !p.broken);
            if in_flight.len() >= max || !retry.is_empty() || !takes_more {
                break;
            }
            let next = match queue.pop_front() {
                Some(b) => b,
                None if !open => break,
                None => match batches.try_recv() {
                    Ok(b) => b,
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        open = false;
                        break;
                    }
                },
            };
            if pipe.is_none() {
                match open_pipe(inner, partition, &mut route, max).await {
                    Ok(p) => pipe = Some(p),
                    // Nothing was sent.
                    Err(e) if e.is_retryable() && Instant::now() < next.give_up => {
                        tracing::debug!(stream = %inner.stream, partition, error = %e, "append retried");
                        queue.push_front(next);
                        backoff.wait().await;
                        continue;
                    }
                    Err(e) => {
                        next.fail(&e);
                        continue;
                    }
                }
            }
            let Some(p) = pipe.as_ref() else { continue };
            let req = crate::AppendRequest {
                log_id: p.route.log_id,
                record_count: u32::try_from(next.replies.len()).unwrap_or(u32::MAX),
                payload: next.payload.clone(),
                expected_offset: None,
                slot: p.route.slot.clone(),
            };
            if p.pipe.send(req).await {
                in_flight.push_back((next, Instant::now()));
            } else {
                // The stream is gone: this batch was not sent; what was is in doubt.
                queue.push_front(next);
                lose(&mut in_flight, &mut pipe, &mut route, "append stream closed");
            }
        }
        let Some(p) = pipe.as_mut().filter(|_| !in_flight.is_empty()) else {
            // Every answer of a broken stream is in: a new stream for what goes next.
            pipe.take_if(|p| p.broken);
            if !retry.is_empty() {
                // The failed batches go again, first, in their order.
                for b in retry.drain(..).rev() {
                    queue.push_front(b);
                }
                backoff.wait().await;
                continue;
            }
            if !queue.is_empty() {
                continue;
            }
            if !open {
                return;
            }
            match batches.recv().await {
                Some(b) => queue.push_back(b),
                None => open = false,
            }
            continue;
        };
        // Wait for the oldest answer, or for a batch to send while there is room.
        let deadline = in_flight.front().map_or_else(Instant::now, |(_, sent)| *sent + timeout);
        let room = open && !p.broken && in_flight.len() < max && queue.is_empty();
        tokio::select! {
            biased;
            answer = tokio::time::timeout_at(deadline, p.pipe.answer()) => match answer {
                Ok(Ok(a)) => {
                    let Some((b, _)) = in_flight.pop_front() else { continue };
                    match a {
                        Ok(h) => {
                            b.acked(partition, h.offset, &p.route.owner_id);
                            backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1));
                        }
                        Err((e, owner)) => {
                            if !p.broken {
                                // The first failure: it says where to go next.
                                p.broken = true;
                                route = next_route(&p.route, &e, owner);
                            }
                            if e.is_retryable() && Instant::now() < b.give_up {
                                tracing::debug!(stream = %inner.stream, partition, error = %e, "append retried");
                                retry.push(b);
                            } else {
                                b.fail(&e);
                            }
                        }
                    }
                }
                // The writer ended the stream (closing): what it did not answer it did not
                // admit, so it goes again, in order, wherever the partition is served now.
                Ok(Err(e)) if e.is_retryable() => {
                    pipe = None;
                    route = None;
                    for (b, _) in in_flight.drain(..) {
                        if Instant::now() < b.give_up {
                            retry.push(b);
                        } else {
                            b.fail(&e);
                        }
                    }
                }
                // The writer ended the stream refusing what was not yet answered (its guard:
                // PERMISSION_DENIED): none of it was admitted, and a retry would be refused.
                Ok(Err(e)) if !e.outcome_unknown && !e.is_retryable() => {
                    (pipe, route) = (None, None);
                    for (b, _) in in_flight.drain(..) {
                        b.fail(&e);
                    }
                }
                Ok(Err(e)) => lose(&mut in_flight, &mut pipe, &mut route, &e.message),
                Err(_) => {
                    let why = format!("no answer within {timeout:?}");
                    lose(&mut in_flight, &mut pipe, &mut route, &why);
                }
            },
            b = batches.recv(), if room => match b {
                Some(b) => queue.push_back(b),
                None => open = false,
            },
        }
    }
}

/// Where a partition's appends go after its stream's first failure `e`: to the owner it names
/// (NOT_OWNER), to the same writer after the back-off (busy, not moved), or wherever the
/// catalog says (anything else).
fn next_route(now: &Route, e: &ClientError, owner: Option<(String, String)>) -> Option<Route> {
    match owner {
        Some((id, address)) if e.code == "NOT_OWNER" && !address.is_empty() => {
            Some(Route { owner_id: id, owner_address: address, ..now.clone() })
        }
        _ if e.code == "RESOURCE_EXHAUSTED" => Some(now.clone()),
        _ => None,
    }
}

/// Opens an AppendStream at the partition's owner (as routed, or asked of the catalog).
async fn open_pipe(
    inner: &Inner,
    partition: u32,
    route: &mut Option<Route>,
    depth: usize,
) -> Result<Pipe, ClientError> {
    let r = match route.clone() {
        Some(r) => r,
        None => inner.router.route(&inner.stream, partition).await?,
    };
    *route = Some(r.clone());
    let opened = async {
        let writer = inner.router.writer(&r.owner_address).await?;
        writer.append_stream(depth).await
    };
    match opened.await {
        Ok(pipe) => Ok(Pipe { pipe, route: r, broken: false }),
        Err(e) => {
            *route = None;
            Err(e)
        }
    }
}

/// The stream broke or went silent: every batch in flight may have committed, so each fails
/// with `outcome_unknown` (never retried: a retry could write it twice).
fn lose(
    in_flight: &mut VecDeque<(Batch, Instant)>,
    pipe: &mut Option<Pipe>,
    route: &mut Option<Route>,
    why: &str,
) {
    let address = pipe.take().map(|p| p.route.owner_address).unwrap_or_default();
    *route = None;
    let e = ClientError {
        code: crate::Code::Unavailable,
        message: format!("append to {address}: {why}"),
        outcome_unknown: true,
        log_fenced: false,
    };
    for (b, _) in in_flight.drain(..) {
        b.fail(&e);
    }
}
