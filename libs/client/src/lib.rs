//! Lakelog's Rust client SDK:
//! - [`Producer`]: records to a stream, batched by linger and size, routed by key (Kafka's
//!   murmur2 partitioner) to each partition's owning writer, retried on NOT_OWNER / FENCED /
//!   UNAVAILABLE, in order per partition;
//! - [`Consumer`]: one partition of a stream from an offset, the beginning or the end; tails
//!   by long poll;
//! - [`CatalogClient`] (the admin): create, list, describe, grow, delete and route streams;
//! - [`LogClient`]: one writer's (or reader's) LogService, by log id, with cursors;
//! - [`ReaderPool`]: reads round-robin over read-only readers, failing over between them;
//! - [`CompactorClient`], [`CleanerClient`]: a running maintenance role's status, a cycle now;
//! - [`AuthClient`]: who the caller is, bearer tokens, SASL users, ACLs; [`Security`]: a
//!   client's TLS files and token;
//! - [`batch`]: records to and from entries: one Kafka RecordBatch v2 each (ARCHITECTURE §5b).
//!
//! ```no_run
//! # async fn example() -> Result<(), client::ClientError> {
//! use client::batch::Record;
//! use std::time::Duration;
//! let cfg = client::ClientConfig::new("http://127.0.0.1:7540").with_zone("a");
//! let producer = client::Producer::new(cfg.clone(), "orders", Default::default()).await?;
//! let record = Record { key: Some("alice".into()), ..Record::value("paid") };
//! let ack = producer.send(record).await?.wait().await?;
//! let start = client::StartAt::Offset(ack.offset);
//! let mut consumer = client::Consumer::new(cfg, "orders", ack.partition, start).await?;
//! let records = consumer.poll(100, Duration::from_secs(5)).await?; // long-polls at the end
//! assert_eq!(records[0].value, "paid");
//! producer.close().await;
//! # Ok(())
//! # }
//! ```
//!
//! Depends on `proto`, `routing`, `codes` and `recordbatch` (plus tokio and tonic).

pub mod auth;
pub mod batch;
mod consumer;
mod maintenance;
mod producer;
mod readers;
mod router;

pub use auth::AuthClient;
pub use codes::Code;
pub use consumer::{ConsumedRecord, Consumer, StartAt};
pub use maintenance::{CleanerClient, CompactorClient};
pub use producer::{Delivery, Producer, ProducerConfig, RecordAck};
pub use proto::log::v1 as log_pb;
pub use proto::maintenance::v1 as maintenance_pb;
pub use readers::ReaderPool;
pub use router::{ClientConfig, Route};

use proto::catalog::v1 as cpb;
use proto::log::v1 as pb;
use proto::log::v1::log_service_client::LogServiceClient;
use tonic::transport::Channel;

pub use cpb::{CreateStreamRequest, GetLakeTableResponse, LakePartition, Stream};
pub use pb::{
    AppendRequest, Entry, EntryHeader, GetCursorStatsResponse as CursorStats,
    GetLogInfoResponse as LogInfo,
};

/// A failed call: the server's `lakelog-code` (or a transport failure as UNAVAILABLE) and
/// message.
#[derive(Debug, Clone, Default, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ClientError {
    /// `NOT_FOUND`, `FENCED`, `OFFSET_OUT_OF_RANGE`, ... (see log.proto); a name this version
    /// does not know reads as INTERNAL.
    pub code: Code,
    pub message: String,
    /// The call may have committed (an append whose answer was lost).
    pub outcome_unknown: bool,
    /// FENCED by an operator's `fence()` (the whole log, until `activate`), not a slot handoff.
    pub log_fenced: bool,
}

/// `top`, then each cause under it not already said (a TLS alert under a transport error).
fn with_causes(top: String, mut cause: Option<&(dyn std::error::Error + 'static)>) -> String {
    let mut m = top;
    while let Some(c) = cause {
        let text = c.to_string();
        if !m.contains(&text) {
            m = format!("{m}: {text}");
        }
        cause = c.source();
    }
    m
}

impl From<tonic::Status> for ClientError {
    fn from(s: tonic::Status) -> Self {
        let meta = |k: &str| s.metadata().get(k).and_then(|v| v.to_str().ok()).map(str::to_owned);
        // The connection failed under the call (a server that refused this client's
        // certificate closes it after the handshake): nothing answered.
        let transport =
            std::error::Error::source(&s).is_some_and(|e| e.is::<tonic::transport::Error>());
        let code = match meta(codes::CODE_KEY) {
            Some(name) => Code::parse(&name).unwrap_or(Code::Internal),
            None if transport => Code::Unavailable,
            None => match s.code() {
                tonic::Code::Unavailable
                | tonic::Code::DeadlineExceeded
                | tonic::Code::Cancelled => Code::Unavailable,
                tonic::Code::InvalidArgument | tonic::Code::OutOfRange => Code::InvalidArgument,
                tonic::Code::ResourceExhausted => Code::ResourceExhausted,
                tonic::Code::Unauthenticated => Code::Unauthenticated,
                tonic::Code::PermissionDenied => Code::PermissionDenied,
                _ => Code::Internal,
            },
        };
        ClientError {
            code,
            message: with_causes(s.message().to_owned(), std::error::Error::source(&s)),
            outcome_unknown: meta(codes::OUTCOME_KEY).as_deref() == Some(codes::OUTCOME_UNKNOWN),
            log_fenced: meta("lakelog-fenced").as_deref() == Some("log"),
        }
    }
}

impl ClientError {
    fn transport(endpoint: &str, e: impl std::fmt::Display) -> Self {
        ClientError {
            code: Code::Unavailable,
            message: format!("cannot reach {endpoint}: {e}"),
            outcome_unknown: false,
            log_fenced: false,
        }
    }

    pub(crate) fn new(code: Code, message: impl Into<String>) -> Self {
        ClientError { code, message: message.into(), ..Default::default() }
    }

    /// Retrying elsewhere may succeed and nothing was applied: the owner moved (NOT_OWNER,
    /// FENCED out of a slot) or the server could not be reached or answer. A log an operator
    /// fenced stays fenced until activated: not retryable.
    pub fn is_retryable(&self) -> bool {
        !self.outcome_unknown && !self.log_fenced && self.code.is_retryable()
    }

    /// A failed append: a server's answer says whether it may have committed; a call that
    /// failed without one (connection reset, timeout) may have, unless the connection was
    /// never made.
    fn of_append(s: tonic::Status) -> Self {
        let answered = s.metadata().get(codes::CODE_KEY).is_some();
        let never_sent =
            s.message().contains("tcp connect error") || s.message().contains("Connection refused");
        let mut e = ClientError::from(s);
        if !answered && !never_sent {
            e.outcome_unknown = true;
        }
        e
    }
}

/// An open AppendStream ([`LogClient::append_stream`]).
#[derive(Debug)]
pub struct AppendPipe {
    requests: tokio::sync::mpsc::Sender<pb::AppendRequest>,
    answers: tonic::Streaming<pb::AppendStreamResponse>,
}

/// One AppendStream answer: the entry's header, or why it was not acknowledged with the owner
/// a NOT_OWNER answer named.
pub type PipeAnswer = Result<EntryHeader, (ClientError, Option<(String, String)>)>;

impl AppendPipe {
    /// Sends one append; `false` if the stream is gone (the request was not sent).
    pub async fn send(&self, req: pb::AppendRequest) -> bool {
        self.requests.send(req).await.is_ok()
    }

    /// The next answer, in the order the appends were sent. `Err` when the stream ended
    /// before it: with `outcome_unknown`, every append sent and not answered may have
    /// committed; without (the writer ended it, closing), none of them was admitted.
    pub async fn answer(&mut self) -> Result<PipeAnswer, ClientError> {
        let lost = |why: String| ClientError {
            code: Code::Unavailable,
            message: why,
            outcome_unknown: true,
            log_fenced: false,
        };
        let a = match self.answers.message().await {
            Ok(Some(a)) => a,
            Ok(None) => return Err(lost("append stream ended before every answer".into())),
            Err(s) => return Err(ClientError::of_append(s)),
        };
        Ok(match (a.header, a.error) {
            (Some(h), None) => Ok(h),
            (_, Some(e)) => {
                let owner = (!e.owner.is_empty()).then(|| (e.owner_id.clone(), e.owner.clone()));
                Err((
                    ClientError {
                        code: Code::parse(&e.code).unwrap_or(Code::Internal),
                        message: e.message,
                        outcome_unknown: e.outcome_unknown,
                        log_fenced: e.fenced == "log",
                    },
                    owner,
                ))
            }
            (None, None) => Err((lost("append answered without a header".into()), None)),
        })
    }
}

/// A NOT_OWNER answer's owner: (id, address), when the writer named one.
fn owner_of(s: &tonic::Status) -> Option<(String, String)> {
    let meta = |k: &str| s.metadata().get(k).and_then(|v| v.to_str().ok()).map(str::to_owned);
    Some((meta("lakelog-owner-id")?, meta("lakelog-owner")?))
}

/// How a client proves who it is and what it trusts (docs/security.md). `https://` endpoints
/// use TLS: `ca` is trusted beside the system's roots, and `cert` with `key` is presented when
/// the server asks for a certificate (mutual TLS). A `token` goes with every call as
/// `authorization: Bearer <token>`.
#[derive(Clone, Default)]
pub struct Security {
    pub ca: Option<std::path::PathBuf>,
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
    pub token: Option<String>,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security")
            .field("ca", &self.ca)
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Security {
    /// The TLS settings for an `https://` endpoint: the files read now.
    fn tls(&self, endpoint: &str) -> Result<tonic::transport::ClientTlsConfig, ClientError> {
        use tonic::transport::{Certificate, ClientTlsConfig, Identity};
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| {
                ClientError::new(Code::InvalidArgument, format!("{}: {e}", p.display()))
            })
        };
        let mut tls = ClientTlsConfig::new().with_native_roots();
        if let Some(ca) = &self.ca {
            tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
        }
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
            }
            (None, None) => {}
            _ => {
                return Err(ClientError::new(
                    Code::InvalidArgument,
                    format!("{endpoint}: a client certificate and its key go together"),
                ));
            }
        }
        Ok(tls)
    }
}

/// What every call carries: the caller's trace context (the current `tracing` span's
/// OpenTelemetry context, written by the global propagator: an application that exports
/// traces sets one, the Lakelog roles set W3C trace context; without either, nothing), and
/// the bearer token when the client has one.
#[derive(Clone, Debug, Default)]
pub struct Calls {
    token: Option<tonic::metadata::AsciiMetadataValue>,
}

impl tonic::service::Interceptor for Calls {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let cx = tracing_opentelemetry::OpenTelemetrySpanExt::context(&tracing::Span::current());
        opentelemetry::global::get_text_map_propagator(|p| {
            p.inject_context(&cx, &mut Metadata(req.metadata_mut()));
        });
        if let Some(t) = &self.token {
            req.metadata_mut().insert("authorization", t.clone());
        }
        Ok(req)
    }
}

/// Writes propagation fields into a request's metadata.
struct Metadata<'a>(&'a mut tonic::metadata::MetadataMap);

impl opentelemetry::propagation::Injector for Metadata<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) =
            (tonic::metadata::MetadataKey::from_bytes(key.as_bytes()), value.parse())
        {
            self.0.insert(k, v);
        }
    }
}

/// What every client's calls go through: a channel whose calls carry [`Calls`].
pub type Transport = tonic::service::interceptor::InterceptedService<Channel, Calls>;

/// HTTP/2 receive window of a stream (bytes); a connection's is four times it.
const RECEIVE_WINDOW: u32 = 8 << 20;

/// Largest HTTP/2 frame a server may send (h2's default is 16 KiB): fewer frames per response.
const MAX_FRAME: u32 = 1 << 20;

/// A connection to `endpoint` (`http://` or `https://host:port`) whose calls carry what
/// `security` says.
async fn transport(endpoint: &str, security: &Security) -> Result<Transport, ClientError> {
    let invalid = |message: String| ClientError::new(Code::InvalidArgument, message);
    let mut ep = Channel::from_shared(endpoint.to_owned())
        .map_err(|e| invalid(format!("endpoint `{endpoint}`: {e}")))?;
    if endpoint.starts_with("https://") {
        ep = ep.tls_config(security.tls(endpoint)?).map_err(|e| {
            let e = with_causes(e.to_string(), std::error::Error::source(&e));
            invalid(format!("{endpoint}: TLS: {e}"))
        })?;
    } else if security.ca.is_some() || security.cert.is_some() {
        return Err(invalid(format!(
            "{endpoint} is plain http://: TLS options need an https:// endpoint"
        )));
    }
    let token = match &security.token {
        Some(t) => Some(
            format!("Bearer {t}")
                .parse()
                .map_err(|_| invalid("the token is not printable ASCII".to_owned()))?,
        ),
        None => None,
    };
    // Receive windows sized for batch reads (up to 4 MiB a response): h2's 64 KiB default
    // makes a large response wait on window updates.
    let channel = ep
        .connect_timeout(std::time::Duration::from_secs(5))
        .initial_stream_window_size(RECEIVE_WINDOW)
        .initial_connection_window_size(4 * RECEIVE_WINDOW)
        .max_frame_size(MAX_FRAME)
        .connect()
        .await
        .map_err(|e| ClientError::transport(endpoint, e))?;
    Ok(tonic::service::interceptor::InterceptedService::new(channel, Calls { token }))
}

/// A client of the CatalogService. Cheap to clone.
#[derive(Clone, Debug)]
pub struct CatalogClient {
    inner: cpb::catalog_service_client::CatalogServiceClient<Transport>,
}

fn stream_of(s: Option<Stream>) -> Result<Stream, ClientError> {
    s.ok_or_else(|| ClientError {
        code: Code::Internal,
        message: "answer without a stream".into(),
        outcome_unknown: false,
        log_fenced: false,
    })
}

impl CatalogClient {
    /// Connects to `endpoint` without TLS options or a token.
    pub async fn connect(endpoint: &str) -> Result<Self, ClientError> {
        Self::connect_with(endpoint, &Security::default()).await
    }

    pub async fn connect_with(endpoint: &str, security: &Security) -> Result<Self, ClientError> {
        Ok(CatalogClient {
            inner: cpb::catalog_service_client::CatalogServiceClient::new(
                transport(endpoint, security).await?,
            ),
        })
    }

    pub async fn create(
        &self,
        name: &str,
        partitions: u32,
        retention_ms: Option<i64>,
        retention_bytes: Option<u64>,
    ) -> Result<Stream, ClientError> {
        let req = cpb::CreateStreamRequest {
            name: name.to_owned(),
            partitions,
            retention_ms,
            retention_bytes,
            lake_table: false,
            lake_retention_ms: None,
            configs: Default::default(),
        };
        self.create_with(req).await
    }

    /// Creates a stream as `req` says (every property, `lake_table` included).
    pub async fn create_with(&self, req: cpb::CreateStreamRequest) -> Result<Stream, ClientError> {
        stream_of(self.inner.clone().create_stream(req).await?.into_inner().stream)
    }

    /// A lake stream's table: where it is and how far behind the log (docs/lake.md).
    pub async fn lake_table(&self, name: &str) -> Result<cpb::GetLakeTableResponse, ClientError> {
        let req = cpb::GetLakeTableRequest { name: name.to_owned() };
        Ok(self.inner.clone().get_lake_table(req).await?.into_inner())
    }

    pub async fn get(&self, name: &str) -> Result<Stream, ClientError> {
        stream_of(
            self.inner
                .clone()
                .get_stream(cpb::GetStreamRequest { name: name.to_owned() })
                .await?
                .into_inner()
                .stream,
        )
    }

    pub async fn list(&self) -> Result<Vec<Stream>, ClientError> {
        Ok(self.inner.clone().list_streams(cpb::ListStreamsRequest {}).await?.into_inner().streams)
    }

    pub async fn add_partitions(&self, name: &str, to: u32) -> Result<Stream, ClientError> {
        let req = cpb::AddPartitionsRequest { name: name.to_owned(), to };
        stream_of(self.inner.clone().add_partitions(req).await?.into_inner().stream)
    }

    pub async fn delete(&self, name: &str) -> Result<(), ClientError> {
        self.inner
            .clone()
            .delete_stream(cpb::DeleteStreamRequest { name: name.to_owned() })
            .await?;
        Ok(())
    }

    /// The live members of a role (`writer`, `reader`, `catalog`): (id, address, zone).
    pub async fn members(&self, role: &str) -> Result<Vec<cpb::Member>, ClientError> {
        let req = cpb::ListMembersRequest { role: role.to_owned() };
        Ok(self.inner.clone().list_members(req).await?.into_inner().members)
    }

    /// Where a partition goes, and the writer serving it for a caller in `zone`.
    pub async fn route(
        &self,
        name: &str,
        partition: u32,
        zone: Option<&str>,
    ) -> Result<cpb::RouteResponse, ClientError> {
        let req = cpb::RouteRequest {
            name: name.to_owned(),
            target: Some(cpb::route_request::Target::Partition(partition)),
            zone: zone.unwrap_or_default().to_owned(),
        };
        Ok(self.inner.clone().route(req).await?.into_inner())
    }
}

/// A client of one writer's LogService. Cheap to clone.
#[derive(Clone, Debug)]
pub struct LogClient {
    inner: LogServiceClient<Transport>,
}

impl LogClient {
    /// Connects to `endpoint` (`http://host:port`) without TLS options or a token.
    pub async fn connect(endpoint: &str) -> Result<Self, ClientError> {
        Self::connect_with(endpoint, &Security::default()).await
    }

    pub async fn connect_with(endpoint: &str, security: &Security) -> Result<Self, ClientError> {
        Ok(LogClient {
            inner: LogServiceClient::new(transport(endpoint, security).await?)
                .max_decoding_message_size(64 << 20),
        })
    }

    pub async fn create_log(&self) -> Result<u64, ClientError> {
        Ok(self.inner.clone().create_log(pb::CreateLogRequest {}).await?.into_inner().log_id)
    }

    pub async fn append(
        &self,
        log_id: u64,
        record_count: u32,
        payload: bytes::Bytes,
        expected_offset: Option<u64>,
    ) -> Result<EntryHeader, ClientError> {
        let req = pb::AppendRequest {
            log_id,
            record_count,
            payload,
            expected_offset,
            slot: String::new(),
        };
        self.send_append(req).await.map_err(|(e, _)| e)
    }

    /// An append in an owner slot (the `slot` a route answered). A NOT_OWNER answer comes
    /// with the owner the writer named, if any.
    pub async fn append_in_slot(
        &self,
        log_id: u64,
        slot: &str,
        record_count: u32,
        payload: bytes::Bytes,
    ) -> Result<EntryHeader, (ClientError, Option<(String, String)>)> {
        let req = pb::AppendRequest {
            log_id,
            record_count,
            payload,
            expected_offset: None,
            slot: slot.to_owned(),
        };
        self.send_append(req).await
    }

    /// Opens an AppendStream: appends sent on it are admitted in the order sent and answered
    /// in that order (log.proto). `depth` requests may wait to be sent at most.
    pub async fn append_stream(&self, depth: usize) -> Result<AppendPipe, ClientError> {
        let (tx, mut rx) = tokio::sync::mpsc::channel(depth.max(1));
        let requests = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
        let answers = self.inner.clone().append_stream(requests).await?.into_inner();
        Ok(AppendPipe { requests: tx, answers })
    }

    async fn send_append(
        &self,
        req: pb::AppendRequest,
    ) -> Result<EntryHeader, (ClientError, Option<(String, String)>)> {
        let resp = match self.inner.clone().append(req).await {
            Ok(r) => r.into_inner(),
            Err(s) => {
                let owner = owner_of(&s);
                return Err((ClientError::of_append(s), owner));
            }
        };
        resp.header.ok_or_else(|| {
            (
                ClientError {
                    code: Code::Internal,
                    message: "append answered without a header".into(),
                    outcome_unknown: true,
                    log_fenced: false,
                },
                None,
            )
        })
    }

    /// Entries from `start`; with `max_wait_ms`, waits at the high watermark for a commit.
    pub async fn read_entries(
        &self,
        log_id: u64,
        start_offset: u64,
        max_records: u64,
        max_wait_ms: u32,
    ) -> Result<pb::ReadEntriesResponse, ClientError> {
        let req = pb::ReadEntriesRequest {
            log_id,
            start_offset,
            max_records,
            max_bytes: 0,
            max_wait_ms,
            stored: true,
        };
        let mut resp = self.inner.clone().read_entries(req).await?.into_inner();
        let runs = std::mem::take(&mut resp.runs);
        for run in runs {
            resp.entries.extend(split_stored(log_id, run)?);
        }
        Ok(resp)
    }

    /// Where each entry from the one holding `start_offset` lives, at most `max_entries`.
    pub async fn read_index_range(
        &self,
        log_id: u64,
        start_offset: u64,
        max_entries: u32,
    ) -> Result<Vec<pb::EntryIndex>, ClientError> {
        let req = pb::ReadIndexRangeRequest { log_id, start_offset, max_entries };
        Ok(self.inner.clone().read_index_range(req).await?.into_inner().indexes)
    }

    /// The entries at the places `indexes` name (as [`Self::read_index_range`] returned them),
    /// in that order; each must be an entry of the log it names.
    pub async fn read_entries_by_index(
        &self,
        indexes: Vec<pb::EntryIndex>,
    ) -> Result<Vec<pb::Entry>, ClientError> {
        let req = pb::ReadEntriesByIndexRequest { indexes };
        Ok(self.inner.clone().read_entries_by_index(req).await?.into_inner().entries)
    }

    pub async fn info(&self, log_id: u64) -> Result<LogInfo, ClientError> {
        Ok(self.inner.clone().get_log_info(pb::GetLogInfoRequest { log_id }).await?.into_inner())
    }

    pub async fn first_offset(&self, log_id: u64) -> Result<Option<EntryHeader>, ClientError> {
        Ok(self
            .inner
            .clone()
            .get_first_offset(pb::GetFirstOffsetRequest { log_id })
            .await?
            .into_inner()
            .header)
    }

    pub async fn last_offset(&self, log_id: u64) -> Result<Option<EntryHeader>, ClientError> {
        Ok(self
            .inner
            .clone()
            .get_last_offset(pb::GetLastOffsetRequest { log_id })
            .await?
            .into_inner()
            .header)
    }

    pub async fn fence(&self, log_id: u64) -> Result<i64, ClientError> {
        Ok(self.inner.clone().fence(pb::FenceRequest { log_id }).await?.into_inner().epoch)
    }

    pub async fn activate(&self, log_id: u64, epoch: i64) -> Result<(), ClientError> {
        self.inner.clone().activate(pb::ActivateRequest { log_id, epoch }).await?;
        Ok(())
    }

    pub async fn soft_trim(&self, log_id: u64, offset: u64) -> Result<u64, ClientError> {
        Ok(self
            .inner
            .clone()
            .soft_trim(pb::SoftTrimRequest { log_id, offset })
            .await?
            .into_inner()
            .start_offset)
    }

    pub async fn hard_trim(&self, log_id: u64, offset: u64) -> Result<u64, ClientError> {
        Ok(self
            .inner
            .clone()
            .hard_trim(pb::HardTrimRequest { log_id, offset })
            .await?
            .into_inner()
            .start_offset)
    }

    pub async fn delete_log(&self, log_id: u64) -> Result<(), ClientError> {
        self.inner.clone().delete_log(pb::DeleteLogRequest { log_id }).await?;
        Ok(())
    }

    /// Creates a cursor at `offset`, else at the log's start, or its end with `from_end`.
    pub async fn create_cursor(
        &self,
        log_id: u64,
        name: &str,
        offset: Option<u64>,
        from_end: bool,
    ) -> Result<(), ClientError> {
        let req = pb::CreateCursorRequest { log_id, name: name.to_owned(), offset, from_end };
        self.inner.clone().create_cursor(req).await?;
        Ok(())
    }

    pub async fn list_cursors(&self, log_id: u64) -> Result<Vec<String>, ClientError> {
        let req = pb::ListCursorsRequest { log_id };
        Ok(self.inner.clone().list_cursors(req).await?.into_inner().names)
    }

    pub async fn delete_cursor(&self, log_id: u64, name: &str) -> Result<(), ClientError> {
        let req = pb::DeleteCursorRequest { log_id, name: name.to_owned() };
        self.inner.clone().delete_cursor(req).await?;
        Ok(())
    }

    /// Entries not wholly acknowledged, from `from_offset` or the mark-delete position.
    pub async fn read_cursor(
        &self,
        log_id: u64,
        name: &str,
        max_records: u64,
        from_offset: Option<u64>,
    ) -> Result<pb::ReadCursorResponse, ClientError> {
        let req = pb::ReadCursorRequest {
            log_id,
            name: name.to_owned(),
            max_records,
            max_bytes: 0,
            from_offset,
        };
        Ok(self.inner.clone().read_cursor(req).await?.into_inner())
    }

    /// Acknowledges up to `mark_delete` (with `properties`) and single offsets; returns the
    /// mark-delete offset after.
    pub async fn ack_cursor(
        &self,
        log_id: u64,
        name: &str,
        mark_delete: Option<u64>,
        individual: Vec<u64>,
        properties: std::collections::HashMap<String, i64>,
    ) -> Result<Option<u64>, ClientError> {
        let req = pb::AckCursorRequest {
            log_id,
            name: name.to_owned(),
            mark_delete,
            individual,
            properties,
        };
        Ok(self.inner.clone().ack_cursor(req).await?.into_inner().mark_delete_offset)
    }

    pub async fn seek_cursor(
        &self,
        log_id: u64,
        name: &str,
        offset: u64,
    ) -> Result<(), ClientError> {
        let req = pb::SeekCursorRequest { log_id, name: name.to_owned(), offset };
        self.inner.clone().seek_cursor(req).await?;
        Ok(())
    }

    pub async fn cursor_stats(
        &self,
        log_id: u64,
        name: &str,
    ) -> Result<pb::GetCursorStatsResponse, ClientError> {
        let req = pb::GetCursorStatsRequest { log_id, name: name.to_owned() };
        Ok(self.inner.clone().get_cursor_stats(req).await?.into_inner())
    }
}

/// A stored run's entries (ARCHITECTURE §5b), each checksum checked: a run that does not
/// split into whole entries, or an entry whose CRC-32C does not match, is INTERNAL (as the
/// server answers corrupt data), naming what is corrupt.
pub fn split_stored(log_id: u64, run: pb::StoredRun) -> Result<Vec<pb::Entry>, ClientError> {
    let entries = wal::decode_entries(&run.data).map_err(|e| {
        ClientError::new(
            crate::Code::Internal,
            format!("log {log_id}: the entries read from offset {}: {e}", run.first_offset),
        )
    })?;
    let (mut offset, mut cumulative) = (run.first_offset, run.cumulative_before);
    Ok(entries
        .into_iter()
        .map(|e| {
            let size = e.payload.len() as u64;
            let header = pb::EntryHeader {
                offset,
                record_count: e.record_count,
                timestamp_ms: e.timestamp,
                entry_size: size,
                cumulative_size: cumulative + size,
            };
            offset += u64::from(e.record_count);
            cumulative += size;
            pb::Entry { header: Some(header), payload: e.payload }
        })
        .collect())
}

#[cfg(test)]
mod stored_tests {
    use super::*;

    fn run_of(entries: &[(u32, i64, &[u8])]) -> bytes::Bytes {
        let mut b = wal::ObjectBuilder::with_capacity(wal::ObjectKind::Wal, 1024);
        b.begin_chunk(7);
        let mut range = 0..0;
        for (i, (records, ts, payload)) in entries.iter().enumerate() {
            let r = b.push_entry(*records, *ts, payload).expect("push");
            range = if i == 0 { r } else { range.start..r.end };
        }
        let (object, _) = b.finish().expect("finish");
        object.slice(range.start as usize..range.end as usize)
    }

    #[test]
    fn a_stored_run_splits_into_its_entries_and_a_flipped_byte_is_an_error() {
        let data = run_of(&[(3, 10, b"abc"), (1, 11, b""), (2, 12, b"defgh")]);
        let run = pb::StoredRun { first_offset: 100, cumulative_before: 50, data: data.clone() };
        let entries = split_stored(1, run).expect("split");
        let got: Vec<_> = entries
            .iter()
            .map(|e| {
                let h = e.header.unwrap_or_default();
                (h.offset, h.record_count, h.timestamp_ms, h.cumulative_size, e.payload.clone())
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (100, 3, 10, 53, bytes::Bytes::from_static(b"abc")),
                (103, 1, 11, 53, bytes::Bytes::new()),
                (104, 2, 12, 58, bytes::Bytes::from_static(b"defgh")),
            ]
        );
        for i in 0..data.len() {
            let mut bad = data.to_vec();
            bad[i] ^= 0x40;
            let run = pb::StoredRun {
                first_offset: 100,
                cumulative_before: 50,
                data: bytes::Bytes::from(bad),
            };
            match split_stored(1, run) {
                Err(e) => assert_eq!(e.code, "INTERNAL", "byte {i}: {e}"),
                Ok(es) => panic!("byte {i} flipped, {} entries accepted", es.len()),
            }
        }
        let cut = pb::StoredRun { first_offset: 0, cumulative_before: 0, data: data.slice(..5) };
        assert!(split_stored(1, cut).is_err(), "a run cut inside an entry");
    }
}
