//! One request in, one response out, through the registry of handlers ([`crate::registry`]):
//! the API key and version checked first (the header's encoding depends on them), the header
//! and body decoded by the API's [`Handler`], which authorizes and answers it through the
//! [`crate::Broker`] and encodes the response in the version asked for.
//!
//! As Kafka does: ApiVersions at a version above ours is answered in its v0 body with
//! UNSUPPORTED_VERSION and our ranges (KIP-511); any other API key or version we do not serve,
//! or a request that does not decode, closes the connection.
//!
//! Adding an API is one file (a [`Handler`]: its key, versions, request type and `serve`,
//! which authorizes, does what must happen in connection order, and answers) and one line in
//! the registry.

use std::fmt::Debug;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use futures::future::BoxFuture;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::fetch::Answer as FetchAnswer;
use crate::frame::Frame;
use crate::registry::APIS;
use crate::session::Session;
use crate::splice::{Outgoing, Splicer};
use crate::{Broker, KafkaConfig, code, frame};

/// Why a request closes its connection instead of being answered.
#[derive(Debug, thiserror::Error)]
pub enum Close {
    #[error("a frame too short for a request header")]
    Short,
    #[error("API key {0} is not served")]
    UnknownApi(i16),
    #[error("{api:?} v{version} is not served (v{min}-v{max} are)")]
    UnsupportedVersion { api: ApiKey, version: i16, min: i16, max: i16 },
    #[error("{api:?} v{version}: {message}")]
    Malformed { api: ApiKey, version: i16, message: String },
    #[error("{0:?} before authentication")]
    Unauthenticated(ApiKey),
    #[error("no authentication within {0:?}")]
    AuthTimeout(std::time::Duration),
    #[error("an acks=0 produce to {topic}-{partition} failed with error {code}")]
    FireAndForgetFailed { topic: String, partition: i32, code: i16 },
}

/// A request admitted: the future of its response frame (size included; none for a Produce
/// with acks=0), or why the connection closes.
pub type Answer = BoxFuture<'static, Result<Option<Outgoing>, Close>>;

/// What a handler does in its connection's order, before the next request is taken (most do
/// nothing there; a produce queues its batches for commit, a SASL exchange moves the session
/// on); it ends in the [`Answer`] to wait for.
pub type Admission<'a> = BoxFuture<'a, Result<Answer, Close>>;

/// One Kafka API served: its key, the versions served (every one implemented, old encodings
/// too), its request, and how it is served.
pub trait Handler: 'static {
    const KEY: ApiKey;
    /// The lowest and highest versions served.
    const VERSIONS: (i16, i16);
    /// Served before the connection authenticated (the handshake's APIs alone).
    const BEFORE_AUTH: bool = false;
    type Request: Decodable + Debug + Send + 'static;

    /// Authorizes `req` (the handler decides what a refusal answers), does what must happen in
    /// connection order, and returns the future of the answer.
    fn serve(req: Self::Request, ctx: Ctx, session: &mut Session) -> Admission<'_>;
}

/// One API in the registry: what decoding and dispatch need of its [`Handler`].
#[derive(Clone, Copy)]
pub struct Registration {
    pub key: ApiKey,
    pub min: i16,
    pub max: i16,
    pub before_auth: bool,
    decode: fn(&mut Bytes, i16) -> anyhow::Result<Box<dyn Request>>,
}

impl Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} v{}-v{}", self.key, self.min, self.max)
    }
}

/// The registry's entry of handler `H`.
pub const fn register<H: Handler>() -> Registration {
    Registration {
        key: H::KEY,
        min: H::VERSIONS.0,
        max: H::VERSIONS.1,
        before_auth: H::BEFORE_AUTH,
        decode: decode_as::<H>,
    }
}

fn decode_as<H: Handler>(buf: &mut Bytes, version: i16) -> anyhow::Result<Box<dyn Request>> {
    Ok(Box::new(Typed::<H>(H::Request::decode(buf, version)?)))
}

/// A request of some API, decoded and ready to be served by its handler.
pub trait Request: Debug + Send {
    fn api(&self) -> ApiKey;
    fn serve(self: Box<Self>, ctx: Ctx, session: &mut Session) -> Admission<'_>;
}

/// A request of `H`'s API.
struct Typed<H: Handler>(H::Request);

impl<H: Handler> Debug for Typed<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<H: Handler> Request for Typed<H> {
    fn api(&self) -> ApiKey {
        H::KEY
    }

    fn serve(self: Box<Self>, ctx: Ctx, session: &mut Session) -> Admission<'_> {
        H::serve(self.0, ctx, session)
    }
}

/// The registration of `api`, if it is served.
pub fn registration(api: ApiKey) -> Option<&'static Registration> {
    APIS.iter().find(|r| r.key == api)
}

/// The versions of `api` served.
pub fn versions(api: ApiKey) -> Option<(i16, i16)> {
    registration(api).map(|r| (r.min, r.max))
}

/// What an answer is encoded as: the request's API, version and correlation id.
#[derive(Clone, Copy, Debug)]
pub struct Reply {
    pub api: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
}

impl Reply {
    /// The response frame of `body`.
    pub fn encode<M: Encodable>(&self, body: &M) -> Result<Outgoing, Close> {
        encode_response(self.api, self.version, self.correlation_id, body)
    }

    /// A Fetch response with its stored batches spliced in by reference ([`crate::splice`]).
    pub(crate) fn encode_fetch(&self, answer: FetchAnswer) -> Result<Outgoing, Close> {
        encode_fetch(self.version, self.correlation_id, answer)
    }
}

/// Everything a handler serves a request with.
#[derive(Clone)]
pub struct Ctx {
    /// The request's API, version and correlation id.
    pub reply: Reply,
    pub client_id: String,
    /// The client's address, as Kafka shows it (`/<ip>`).
    pub client_host: Arc<str>,
    pub broker: Arc<dyn Broker>,
    pub cfg: Arc<KafkaConfig>,
    pub groups: Arc<crate::groups::Groups>,
    pub principal: security::Principal,
}

impl Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("reply", &self.reply)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

impl Ctx {
    /// Who asks, for authorization.
    pub fn access(&self) -> crate::authz::Access<'_> {
        crate::authz::Access {
            authz: &self.cfg.authz,
            principal: &self.principal,
            peer: &self.client_host,
        }
    }

    /// `body` answered now: nothing to wait for.
    pub fn now<M: Encodable>(&self, body: &M) -> Admission<'static> {
        admitted(Box::pin(std::future::ready(self.reply.encode(body).map(Some))))
    }

    /// The response `answer` computes with this context, after admission.
    pub fn later<M, F, Fut>(self, answer: F) -> Admission<'static>
    where
        M: Encodable,
        F: FnOnce(Ctx) -> Fut,
        Fut: Future<Output = M> + Send + 'static,
    {
        let reply = self.reply;
        let body = answer(self);
        admitted(Box::pin(async move { reply.encode(&body.await).map(Some) }))
    }
}

/// An admission with nothing to do in connection order.
pub fn admitted(answer: Answer) -> Admission<'static> {
    Box::pin(std::future::ready(Ok(answer)))
}

/// Takes one request frame, in its connection's order: decodes it and has its handler do what
/// must happen before the next request of the connection is taken (a produce's batches are
/// queued for commit), then returns the rest as a future. A request that cannot be served is
/// `Err`: the connection closes once the answers before it are written. The frame's budget
/// (its bytes and what its decoding allocated) is held until its answer is ready.
pub async fn handle(
    frame: Frame,
    session: &mut Session,
    broker: Arc<dyn Broker>,
    cfg: Arc<KafkaConfig>,
    groups: Arc<crate::groups::Groups>,
    client_host: Arc<str>,
) -> Result<Answer, Close> {
    let Frame { bytes, mut held } = frame;
    // Before authentication only the handshake is served: anything else is refused from its
    // API key, before a byte of it is decoded.
    if !session.authenticated()
        && let Some((key, _)) = frame::peek_api(&bytes)
        && let Ok(api) = ApiKey::try_from(key)
        && !registration(api).is_some_and(|r| r.before_auth)
    {
        return Err(Close::Unauthenticated(api));
    }
    let (decoded, allocated) = decode_counted(&bytes)?;
    held.keep(bytes.len() + allocated);
    let (reply, client_id, request) = match decoded {
        Decoded::Request { correlation_id, version, client_id, request } => {
            (Reply { api: request.api(), version, correlation_id }, client_id, request)
        }
        Decoded::ApiVersionsTooNew { correlation_id } => {
            let body = api_versions(code::UNSUPPORTED_VERSION);
            let out = encode_response(ApiKey::ApiVersions, 0, correlation_id, &body);
            return Ok(Box::pin(std::future::ready(out.map(Some))));
        }
    };
    let ctx = Ctx {
        reply,
        client_id,
        client_host,
        broker,
        cfg,
        groups,
        principal: session.principal().clone(),
    };
    let answer = request.serve(ctx, session).await?;
    Ok(Box::pin(async move {
        let out = answer.await;
        drop(held);
        out
    }))
}

/// What a frame holds.
#[derive(Debug)]
pub enum Decoded {
    Request {
        correlation_id: i32,
        version: i16,
        client_id: String,
        request: Box<dyn Request>,
    },
    /// ApiVersions at a version above ours: answered in its v0 body (KIP-511).
    ApiVersionsTooNew {
        correlation_id: i32,
    },
}

/// Decodes a request frame (without its size): the API key and version checked first, then
/// the header and body, every count bounded by the bytes present and what the structures
/// decoded take by [`crate::budget::decode_allowance`]. Untrusted input: never panics
/// (fuzzed: `make fuzz`).
pub fn decode(frame: &Bytes) -> Result<Decoded, Close> {
    decode_counted(frame).map(|(d, _)| d)
}

/// [`decode`], and the bytes the structures decoded took (within the frame's allowance).
pub fn decode_counted(frame: &Bytes) -> Result<(Decoded, usize), Close> {
    let allowance = crate::budget::decode_allowance(frame.len());
    let (decoded, allocated) =
        kafka_protocol::protocol::allowance::within(allowance, || decode_whole(frame));
    Ok((decoded?, allocated))
}

/// Bytes after a request's body that are ignored (a client's unfilled placeholder).
const MAX_BYTES_AFTER_BODY: usize = 8;

fn decode_whole(frame: &Bytes) -> Result<Decoded, Close> {
    let (key, version) = frame::peek_api(frame).ok_or(Close::Short)?;
    let api = ApiKey::try_from(key).map_err(|_| Close::UnknownApi(key))?;
    let r = registration(api).ok_or(Close::UnknownApi(key))?;
    if api == ApiKey::ApiVersions && version > r.max {
        let correlation_id = frame::peek_correlation_id(frame).ok_or(Close::Short)?;
        return Ok(Decoded::ApiVersionsTooNew { correlation_id });
    }
    if version < r.min || version > r.max {
        return Err(Close::UnsupportedVersion { api, version, min: r.min, max: r.max });
    }
    let malformed = |e: anyhow::Error| Close::Malformed { api, version, message: e.to_string() };
    let mut buf = frame.clone();
    let header =
        RequestHeader::decode(&mut buf, api.request_header_version(version)).map_err(malformed)?;
    let request = (r.decode)(&mut buf, version).map_err(malformed)?;
    // A frame is one request. A few bytes after its body are ignored, as Kafka ignores them:
    // librdkafka 2.16 leaves three after Metadata's null topic count (the rest of its 4-byte
    // placeholder). More are refused, not carried along: a padded produce would pin its whole
    // frame while it commits (its batches are slices of the frame).
    if buf.len() > MAX_BYTES_AFTER_BODY {
        return Err(Close::Malformed {
            api,
            version,
            message: format!("{} bytes after the request body", buf.len()),
        });
    }
    Ok(Decoded::Request {
        correlation_id: header.correlation_id,
        version,
        client_id: header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default(),
        request,
    })
}

/// A response that does not encode is this front end's bug, not the client's: said loudly.
fn unencodable(api: ApiKey, version: i16, e: impl std::fmt::Display) -> Close {
    tracing::error!(?api, version, error = %e, "Kafka response does not encode; closing the connection");
    Close::Malformed { api, version, message: format!("encoding the response: {e}") }
}

/// A response's header and body, into `out`.
fn encode_into<M: Encodable, B: ByteBufMut>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &M,
    out: &mut B,
) -> Result<(), Close> {
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(out, api.response_header_version(version))
        .map_err(|e| unencodable(api, version, e))?;
    body.encode(out, version).map_err(|e| unencodable(api, version, e))
}

/// A Fetch response with its stored batches spliced in by reference ([`crate::splice`]).
fn encode_fetch(version: i16, correlation_id: i32, answer: FetchAnswer) -> Result<Outgoing, Close> {
    let mut out = Splicer::new(answer.spliced);
    encode_into(ApiKey::Fetch, version, correlation_id, &answer.resp, &mut out)?;
    out.finish().map_err(|e| unencodable(ApiKey::Fetch, version, e))
}

/// Header and body, behind the frame's size.
fn encode_response<M: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &M,
) -> Result<Outgoing, Close> {
    let mut out = BytesMut::new();
    out.put_i32(0); // the size, written below
    encode_into(api, version, correlation_id, body, &mut out)?;
    let size = i32::try_from(out.len() - 4).map_err(|_| Close::Malformed {
        api,
        version,
        message: "a response over 2 GiB".to_owned(),
    })?;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Ok(Outgoing::whole(out.freeze()))
}

/// The transactions version every broker runs at (Kafka's `transaction.version` feature):
/// 2, KIP-890 part 2. A Kafka 4 client seeing it finalized there ends each transaction at a
/// new epoch (EndTxn v5) and adds partitions and groups by its Produce v12 and TxnOffsetCommit
/// v5 requests; older clients and librdkafka run transactions V1.
pub const TRANSACTION_VERSION: i16 = 2;

/// The epoch of the finalized features (they never change here; a client takes them as news
/// once, from -1).
const FEATURES_EPOCH: i64 = 1;

/// The ApiVersions response: every API of the registry and its versions, and the features.
pub fn api_versions(error_code: i16) -> ApiVersionsResponse {
    use kafka_protocol::messages::api_versions_response::{
        FinalizedFeatureKey, SupportedFeatureKey,
    };
    let name = || kafka_protocol::protocol::StrBytes::from_static_str("transaction.version");
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(
            APIS.iter()
                .map(|r| {
                    ApiVersion::default()
                        .with_api_key(r.key as i16)
                        .with_min_version(r.min)
                        .with_max_version(r.max)
                })
                .collect(),
        )
        .with_supported_features(vec![
            SupportedFeatureKey::default()
                .with_name(name())
                .with_min_version(0)
                .with_max_version(TRANSACTION_VERSION),
        ])
        .with_finalized_features_epoch(FEATURES_EPOCH)
        .with_finalized_features(vec![
            FinalizedFeatureKey::default()
                .with_name(name())
                .with_min_version_level(TRANSACTION_VERSION)
                .with_max_version_level(TRANSACTION_VERSION),
        ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoredBatch;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::{FetchResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use std::collections::VecDeque;

    fn batch(base: i64, fill: u8, len: usize) -> StoredBatch {
        let mut b = vec![fill; len];
        b[..8].copy_from_slice(&(-1i64).to_be_bytes());
        StoredBatch { base_offset: base, bytes: Bytes::from(b) }
    }

    /// A frame holds one request and at most a few bytes after it: a valid ApiVersions padded
    /// with 1 MiB is refused (a padded produce would pin its whole frame while it commits),
    /// one with three bytes more (librdkafka's unfilled placeholder) is answered.
    #[test]
    fn bytes_after_a_request_body_close_the_connection() {
        use kafka_protocol::messages::{ApiVersionsRequest, RequestHeader};
        use kafka_protocol::protocol::Encodable;
        let mut b = bytes::BytesMut::new();
        let api = ApiKey::ApiVersions;
        RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(3)
            .with_correlation_id(7)
            .encode(&mut b, api.request_header_version(3))
            .expect("encodes");
        ApiVersionsRequest::default().encode(&mut b, 3).expect("encodes");
        let whole = b.clone().freeze();
        assert!(matches!(decode(&whole), Ok(Decoded::Request { correlation_id: 7, .. })));
        b.extend_from_slice(&[1, 0, 0]);
        assert!(matches!(decode(&b.clone().freeze()), Ok(Decoded::Request { .. })));
        b.extend_from_slice(&vec![0u8; 1 << 20]);
        assert!(
            matches!(decode(&b.freeze()), Err(Close::Malformed { .. })),
            "1 MiB after the body was taken"
        );
    }

    /// The spliced Fetch response is, byte for byte, the one encoded with the batches copied
    /// in, at every version served; the large batches go out by reference.
    #[test]
    fn a_spliced_fetch_response_is_the_copied_one_at_every_version() {
        let partitions: Vec<Vec<StoredBatch>> = vec![
            vec![batch(0, 1, 70), batch(3, 2, 40_000), batch(9, 3, 90)],
            vec![],
            vec![batch(100, 4, 20_000)],
            vec![batch(7, 5, 61)],
        ];
        let (lo, hi) = versions(ApiKey::Fetch).unwrap_or((0, -1));
        assert!(hi >= lo, "Fetch is served");
        for version in lo..=hi {
            let (mut copied, mut spliced) = (Vec::new(), VecDeque::new());
            let mut stood_in = Vec::new();
            for (i, batches) in partitions.iter().enumerate() {
                let mut whole = Vec::new();
                for b in batches {
                    whole.extend_from_slice(&b.base_offset.to_be_bytes());
                    whole.extend_from_slice(&b.bytes[8..]);
                }
                let p = PartitionData::default().with_partition_index(i as i32);
                copied.push(p.clone().with_records(Some(Bytes::from(whole))));
                let (field, stand_in) = crate::splice::records_field(batches);
                if stand_in {
                    spliced.push_back(batches.clone());
                }
                stood_in.push(p.with_records(Some(field)));
            }
            let topic = |ps| {
                vec![
                    FetchableTopicResponse::default()
                        .with_topic(TopicName(StrBytes::from_static_str("orders")))
                        .with_partitions(ps),
                ]
            };
            let plain = FetchResponse::default().with_responses(topic(copied));
            let want = encode_response(ApiKey::Fetch, version, 42, &plain).expect("encodes");
            let answer = FetchAnswer {
                resp: FetchResponse::default().with_responses(topic(stood_in)),
                spliced,
            };
            let got = encode_fetch(version, 42, answer).expect("splices");
            assert_eq!(got.to_bytes(), want.to_bytes(), "v{version}");
            assert!(
                got.parts().iter().any(|p| p.as_ptr() == partitions[0][1].bytes[8..].as_ptr()),
                "v{version}: the 40 kB batch was copied"
            );
        }
    }
}
