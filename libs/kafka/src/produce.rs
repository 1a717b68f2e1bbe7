//! Produce (ARCHITECTURE §11): each partition's record batch checked (exactly one RecordBatch
//! v2, its CRC, lengths and counts, at most `max.message.bytes`; control batches refused (the
//! coordinator writes markers); a transactional batch needs the request's transactional id;
//! an idempotent batch's sequence, and a transactional one's transaction, are the broker's to
//! check, with the role's idempotence, `brokers::producers`), then admitted as one entry, in
//! request order; the answer is the commit, so acks=1 and acks=-1 both mean durable. Each
//! partition gets its own error.

use bytes::Bytes;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{BrokerId, ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;
use recordbatch::BatchError;

use crate::{Broker, KafkaConfig, Refused, code};
use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use security::acl::Operation;

use crate::api::{Admission, Answer, Close, Ctx, Handler};
use crate::session::Session;

/// Checks and admits every partition's batch, in the request's order (so a connection's
/// batches commit in the order it sent them); returns the future of the response, which
/// resolves once every admitted batch is committed or refused.
pub(crate) async fn admit(
    (req, version): (ProduceRequest, i16),
    client_id: &str,
    broker: &dyn Broker,
    cfg: &KafkaConfig,
) -> impl std::future::Future<Output = ProduceResponse> + Send + 'static {
    let zone = crate::zone_of(client_id);
    let acks_ok = matches!(req.acks, -1..=1);
    let transactional_id = req.transactional_id.as_ref().map(|t| t.to_string());
    // From v12 a transactional batch adds its partition to its transaction (KIP-890 part 2).
    let txn = transactional_id
        .as_deref()
        .map(|id| crate::TxnProduce { transactional_id: id, add_partition: version >= 12 });
    let mut topics = Vec::with_capacity(req.topic_data.len());
    for t in req.topic_data {
        let topic = t.name.0.to_string();
        let mut partitions = Vec::with_capacity(t.partition_data.len());
        for p in t.partition_data {
            let admitted = if !acks_ok {
                Err(Refused::new(code::INVALID_REQUIRED_ACKS, "acks must be -1, 0 or 1"))
            } else {
                let to = (topic.as_str(), p.index, zone);
                one(broker, cfg, to, p.records, txn).await
            };
            partitions.push((p.index, admitted));
        }
        topics.push((t.name, t.topic_id, partitions));
    }
    async move {
        let mut responses = Vec::with_capacity(topics.len());
        for (name, topic_id, partitions) in topics {
            let answers = partitions.into_iter().map(|(index, admitted)| async move {
                let r = match admitted {
                    Ok(commit) => commit.await,
                    Err(refused) => Err(refused),
                };
                partition_response(index, r)
            });
            responses.push(
                TopicProduceResponse::default()
                    .with_name(name)
                    .with_topic_id(topic_id)
                    .with_partition_responses(futures::future::join_all(answers).await),
            );
        }
        ProduceResponse::default().with_responses(responses)
    }
}

fn partition_response(index: i32, r: Result<crate::Produced, Refused>) -> PartitionProduceResponse {
    let p = PartitionProduceResponse::default().with_index(index);
    match r {
        Ok(done) => {
            p.with_base_offset(done.base_offset).with_log_append_time_ms(done.log_append_time_ms)
        }
        Err(refused) => {
            let mut p = p
                .with_error_code(refused.code)
                .with_base_offset(-1)
                .with_error_message(Some(StrBytes::from_string(refused.message)));
            if let Some(leader) = refused.leader {
                p.current_leader.leader_id = BrokerId(leader);
            }
            p
        }
    }
}

/// One partition's batch: checked, then admitted.
async fn one(
    broker: &dyn Broker,
    cfg: &KafkaConfig,
    (topic, partition, zone): (&str, i32, Option<&str>),
    records: Option<Bytes>,
    txn: Option<crate::TxnProduce<'_>>,
) -> Result<crate::Commit, Refused> {
    let Some(batch) = records.filter(|b| !b.is_empty()) else {
        return Err(Refused::new(code::CORRUPT_MESSAGE, "no record batch"));
    };
    if batch.len() > cfg.max_batch_bytes {
        return Err(Refused::new(
            code::MESSAGE_TOO_LARGE,
            format!(
                "a batch of {} bytes; at most {} (max.message.bytes)",
                batch.len(),
                cfg.max_batch_bytes
            ),
        ));
    }
    let h = validate(batch.clone()).await.map_err(|e| match e {
        BatchError::Unsupported(m) => Refused::new(code::UNSUPPORTED_FOR_MESSAGE_FORMAT, m),
        BatchError::Length(m) => Refused::new(
            code::INVALID_RECORD,
            format!("exactly one record batch per partition, whole: {m}"),
        ),
        BatchError::Corrupt(m) => Refused::new(code::CORRUPT_MESSAGE, m),
        BatchError::TooLarge(m) => Refused::new(code::MESSAGE_TOO_LARGE, m),
    })?;
    // Markers are the coordinator's to write (WriteTxnMarkers), never a client's.
    if h.is_control() {
        return Err(Refused::new(code::INVALID_RECORD, "control batches come from brokers only"));
    }
    if h.is_transactional() && txn.is_none() {
        return Err(Refused::new(
            TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "a transactional batch in a request without a transactional id",
        ));
    }
    if h.is_transactional() && h.producer.producer_id < 0 {
        return Err(Refused::new(code::INVALID_RECORD, "a transactional batch without a producer"));
    }
    broker.produce(topic, partition, zone, batch, &h, txn).await
}

const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 =
    kafka_protocol::ResponseError::TransactionalIdAuthorizationFailed.code();

/// Bytes of decompressed records this process holds at once while validating compressed
/// batches: each reserves what it may decompress to before it starts.
const DECOMPRESSING: usize = recordbatch::compression::MAX_DECOMPRESSED;

/// Checks a batch (as [`recordbatch::validate`]); a compressed one on a blocking thread, off the
/// connection's task, within [`DECOMPRESSING`]: it reserves 16 times its size (1 MiB at least),
/// and only one that decompresses past that is tried again with the most a batch may take.
async fn validate(batch: Bytes) -> Result<recordbatch::BatchHeader, BatchError> {
    use recordbatch::compression::MAX_DECOMPRESSED;
    static ROOM: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(DECOMPRESSING);
    let compressed = recordbatch::BatchHeader::parse(&batch)
        .and_then(|h| h.compression())
        .is_ok_and(|c| c != recordbatch::Compression::None);
    if !compressed {
        return recordbatch::validate(&batch);
    }
    let first = batch.len().saturating_mul(16).clamp(1 << 20, MAX_DECOMPRESSED);
    let mut caps = vec![first];
    if first < MAX_DECOMPRESSED {
        caps.push(MAX_DECOMPRESSED);
    }
    let mut last = Err(BatchError::TooLarge("records decompress past their room".to_owned()));
    for cap in caps {
        let n = u32::try_from(cap).unwrap_or(u32::MAX);
        let Ok(_room) = ROOM.acquire_many(n).await else { break };
        let b = batch.clone();
        last = tokio::task::spawn_blocking(move || recordbatch::validate_within(&b, cap))
            .await
            .unwrap_or_else(|e| Err(BatchError::Corrupt(format!("validation failed: {e}"))));
        if !matches!(last, Err(BatchError::TooLarge(_))) {
            break;
        }
    }
    last
}

/// Produce: WRITE on each topic; each partition's batch admitted in connection order, then
/// answered once committed.
#[derive(Debug)]
pub struct Produce;

impl Handler for Produce {
    const KEY: ApiKey = ApiKey::Produce;
    const VERSIONS: (i16, i16) = (3, 12);
    type Request = ProduceRequest;

    fn serve(mut req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        Box::pin(async move {
            let acks = req.acks;
            // A transactional producer's batches need WRITE on its transactional id: without
            // it every partition is refused TRANSACTIONAL_ID_AUTHORIZATION_FAILED, whatever its
            // topic's ACLs (Kafka's answer), else each topic needs WRITE.
            let refused = match &req.transactional_id {
                Some(id)
                    if !crate::authz::transactional_id(ctx.access(), Operation::Produce, id) =>
                {
                    authorize::refuse_all(&mut req)
                }
                _ => authorize::produce(ctx.access(), &mut req),
            };
            let version = ctx.reply.version;
            let committing =
                admit((req, version), &ctx.client_id, ctx.broker.as_ref(), &ctx.cfg).await;
            let reply = ctx.reply;
            let answer: Answer = Box::pin(async move {
                let mut resp = committing.await;
                resp.responses.extend(refused);
                if acks == 0 {
                    return fire_and_forget(&resp);
                }
                reply.encode(&resp).map(Some)
            });
            Ok(answer)
        })
    }
}

/// acks=0: the client expects no answer. One that failed closes the connection, as Kafka
/// does: the producer then refreshes its metadata (a moved leader) instead of sending on into
/// the void.
fn fire_and_forget(resp: &ProduceResponse) -> Result<Option<crate::splice::Outgoing>, Close> {
    let failed = resp
        .responses
        .iter()
        .flat_map(|t| t.partition_responses.iter().map(move |p| (t, p)))
        .find(|(_, p)| p.error_code != 0);
    match failed {
        Some((t, p)) => Err(Close::FireAndForgetFailed {
            topic: t.name.0.to_string(),
            partition: p.index,
            code: p.error_code,
        }),
        None => Ok(None),
    }
}

/// InitProducerId: IDEMPOTENT_WRITE on the cluster (or WRITE on a topic); idempotent producers
/// only (a transactional id is INVALID_REQUEST until transactions exist).
#[derive(Debug)]
pub struct InitProducerId;

impl Handler for InitProducerId {
    const KEY: ApiKey = ApiKey::InitProducerId;
    const VERSIONS: (i16, i16) = (0, 4);
    type Request = InitProducerIdRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        // A transactional producer needs WRITE on its transactional id (Kafka's rule).
        if let Some(id) = &req.transactional_id
            && !crate::authz::transactional_id(ctx.access(), Operation::Produce, id)
        {
            let resp = InitProducerIdResponse::default()
                .with_error_code(crate::authz::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1);
            return ctx.now(&resp);
        }
        if req.transactional_id.is_none() && !authorize::init_producer_id(ctx.access()) {
            let resp = InitProducerIdResponse::default()
                .with_error_code(crate::authz::CLUSTER_AUTHORIZATION_FAILED)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1);
            return ctx.now(&resp);
        }
        ctx.later(|ctx| async move { init_producer_id(req, &ctx.broker).await })
    }
}

async fn init_producer_id(
    req: InitProducerIdRequest,
    broker: &std::sync::Arc<dyn Broker>,
) -> InitProducerIdResponse {
    let resp = InitProducerIdResponse::default();
    let current = (req.producer_id.0 >= 0).then_some((req.producer_id.0, req.producer_epoch));
    let answer = match req.transactional_id {
        // A transactional producer: its coordinator's (KIP-98).
        Some(id) => {
            let timeout = req.transaction_timeout_ms;
            crate::txn_api::coordinator::init_producer_id(broker, &id.0, timeout, current)
                .await
                .map_err(|code| Refused::new(code, "transactional id"))
        }
        None => broker.init_producer_id(current).await,
    };
    match answer {
        Ok((id, epoch)) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(epoch),
        Err(e) => {
            resp.with_error_code(e.code).with_producer_id(ProducerId(-1)).with_producer_epoch(-1)
        }
    }
}

/// What this area's APIs need of the connection's principal (the helpers are
/// [`crate::authz`]'s).
mod authorize {
    use kafka_protocol::messages::*;

    use security::acl::{Operation, ResourceType};

    use crate::authz::{Access, TOPIC_AUTHORIZATION_FAILED, split};

    pub fn produce(
        a: Access<'_>,
        req: &mut ProduceRequest,
    ) -> Vec<produce_response::TopicProduceResponse> {
        if !a.checks() {
            return Vec::new();
        }
        let out = split(&mut req.topic_data, |t| a.topic(Operation::Produce, &t.name));
        refused(out, TOPIC_AUTHORIZATION_FAILED)
    }

    /// Every partition of `req`, taken out and refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
    pub fn refuse_all(req: &mut ProduceRequest) -> Vec<produce_response::TopicProduceResponse> {
        let all = std::mem::take(&mut req.topic_data);
        refused(all, crate::authz::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    }

    /// The answer to `topics`' partitions, each refused with `code`.
    fn refused(
        topics: Vec<produce_request::TopicProduceData>,
        code: i16,
    ) -> Vec<produce_response::TopicProduceResponse> {
        use produce_response::{PartitionProduceResponse, TopicProduceResponse};
        topics
            .into_iter()
            .map(|t| {
                TopicProduceResponse::default().with_name(t.name).with_partition_responses(
                    t.partition_data
                        .iter()
                        .map(|p| {
                            PartitionProduceResponse::default()
                                .with_index(p.index)
                                .with_error_code(code)
                                .with_base_offset(-1)
                        })
                        .collect(),
                )
            })
            .collect()
    }

    /// InitProducerId: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (as Kafka 3).
    pub fn init_producer_id(a: Access<'_>) -> bool {
        !a.checks()
            || a.cluster(Operation::Produce)
            || a.authz.may_anywhere(a.principal, Operation::Produce, ResourceType::Stream)
    }
}
