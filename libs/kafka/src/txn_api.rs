//! The transaction APIs (ARCHITECTURE §12): the coordinator's (InitProducerId with a
//! transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn), served by the writer the
//! owner function picks for the transactional id; and WriteTxnMarkers, the inter-broker
//! request that appends a marker to a partition its owner leads (CLUSTER_ACTION, as in Kafka).

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, ApiKey, EndTxnRequest, EndTxnResponse, ProducerId,
    TxnOffsetCommitRequest, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use security::acl::Operation;

use crate::api::{Admission, Ctx, Handler};
use crate::session::Session;
use crate::transactions::{Marker, TxnPartition};
use crate::{Broker, Refused};

/// WriteTxnMarkers: each marker appended to each of its partitions (those led elsewhere
/// answered NOT_LEADER_OR_FOLLOWER), each answered once its marker is durable.
#[derive(Debug)]
pub struct WriteTxnMarkers;

impl Handler for WriteTxnMarkers {
    const KEY: ApiKey = ApiKey::WriteTxnMarkers;
    const VERSIONS: (i16, i16) = (1, 1);
    type Request = WriteTxnMarkersRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let allowed = crate::authz::cluster(ctx.access(), Operation::Admin);
        ctx.later(move |ctx| async move {
            let code = (!allowed).then_some(crate::authz::CLUSTER_AUTHORIZATION_FAILED);
            write_markers(req, ctx.broker.as_ref(), code).await
        })
    }
}

/// Whether the principal may run transactions under transactional id `id` (Kafka's WRITE on
/// the TRANSACTIONAL_ID).
fn may_write(a: crate::authz::Access<'_>, id: &str) -> bool {
    crate::authz::transactional_id(a, Operation::Produce, id)
}

/// AddPartitionsToTxn (v0–3, a client's): the partitions join the producer's transaction,
/// all or none; a topic the principal may not write is TOPIC_AUTHORIZATION_FAILED and the
/// rest OPERATION_NOT_ATTEMPTED, as Kafka answers.
#[derive(Debug)]
pub struct AddPartitionsToTxn;

impl Handler for AddPartitionsToTxn {
    const KEY: ApiKey = ApiKey::AddPartitionsToTxn;
    const VERSIONS: (i16, i16) = (0, 3);
    type Request = AddPartitionsToTxnRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let access = ctx.access();
        // Without WRITE on the transactional id every partition is refused for it; then each
        // topic without WRITE, and the rest are not attempted (Kafka's answers).
        let whole = !may_write(access, &req.v3_and_below_transactional_id);
        let denied: Vec<bool> = req
            .v3_and_below_topics
            .iter()
            .map(|t| access.checks() && !access.topic(Operation::Produce, &t.name))
            .collect();
        ctx.later(move |ctx| async move {
            let any_denied = denied.iter().any(|d| *d);
            let partitions: Vec<TxnPartition> = req
                .v3_and_below_topics
                .iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(|p| TxnPartition { topic: t.name.0.to_string(), partition: *p })
                })
                .collect();
            let code = if whole || any_denied {
                OPERATION_NOT_ATTEMPTED
            } else {
                let producer = (req.v3_and_below_producer_id.0, req.v3_and_below_producer_epoch);
                let id = req.v3_and_below_transactional_id.0.to_string();
                coordinator::add(ctx.broker.as_ref(), &id, producer, &partitions, None).await
            };
            let results = req
                .v3_and_below_topics
                .iter()
                .zip(&denied)
                .map(|(t, denied)| {
                    let code = match (whole, *denied) {
                        (true, _) => TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                        (false, true) => crate::authz::TOPIC_AUTHORIZATION_FAILED,
                        (false, false) => code,
                    };
                    AddPartitionsToTxnTopicResult::default()
                        .with_name(t.name.clone())
                        .with_results_by_partition(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    AddPartitionsToTxnPartitionResult::default()
                                        .with_partition_index(*p)
                                        .with_partition_error_code(code)
                                })
                                .collect(),
                        )
                })
                .collect();
            AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results)
        })
    }
}

/// AddOffsetsToTxn: the group whose offsets the transaction will commit joins it.
#[derive(Debug)]
pub struct AddOffsetsToTxn;

impl Handler for AddOffsetsToTxn {
    const KEY: ApiKey = ApiKey::AddOffsetsToTxn;
    const VERSIONS: (i16, i16) = (0, 3);
    type Request = AddOffsetsToTxnRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let access = ctx.access();
        if !may_write(access, &req.transactional_id) {
            let resp = AddOffsetsToTxnResponse::default()
                .with_error_code(TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
            return ctx.now(&resp);
        }
        if access.checks() && !access.group(Operation::Consume, &req.group_id) {
            let resp = AddOffsetsToTxnResponse::default()
                .with_error_code(crate::authz::GROUP_AUTHORIZATION_FAILED);
            return ctx.now(&resp);
        }
        ctx.later(move |ctx| async move {
            let producer = (req.producer_id.0, req.producer_epoch);
            let (id, group) = (req.transactional_id.0.to_string(), req.group_id.0.to_string());
            let code =
                coordinator::add(ctx.broker.as_ref(), &id, producer, &[], Some(&group)).await;
            AddOffsetsToTxnResponse::default().with_error_code(code)
        })
    }
}

/// EndTxn: the transaction commits or aborts; from v5 (transactions V2) at the next epoch,
/// which the answer carries.
#[derive(Debug)]
pub struct EndTxn;

impl Handler for EndTxn {
    const KEY: ApiKey = ApiKey::EndTxn;
    const VERSIONS: (i16, i16) = (0, 5);
    type Request = EndTxnRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        if !may_write(ctx.access(), &req.transactional_id) {
            let resp = EndTxnResponse::default()
                .with_error_code(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1);
            return ctx.now(&resp);
        }
        let v2 = ctx.reply.version >= 5;
        ctx.later(move |ctx| async move {
            let producer = (req.producer_id.0, req.producer_epoch);
            let id = req.transactional_id.0.to_string();
            let resp = EndTxnResponse::default();
            if v2 {
                return match coordinator::end_v2(&ctx.broker, &id, producer, req.committed).await {
                    Ok((pid, epoch)) => {
                        resp.with_producer_id(ProducerId(pid)).with_producer_epoch(epoch)
                    }
                    Err(code) => resp
                        .with_error_code(code)
                        .with_producer_id(ProducerId(-1))
                        .with_producer_epoch(-1),
                };
            }
            let code = coordinator::end(&ctx.broker, &id, producer, req.committed).await;
            resp.with_error_code(code).with_producer_id(ProducerId(-1)).with_producer_epoch(-1)
        })
    }
}

/// TxnOffsetCommit (v0–4, sent to the group's coordinator): offsets a transaction commits
/// for a group (KIP-447: at the member's generation when it names one), staged until the
/// transaction ends: its commit makes them the group's, its abort drops them, and until then
/// OffsetFetch with `require_stable` answers them UNSTABLE_OFFSET_COMMIT. The group must be in
/// the producer's ongoing transaction (AddOffsetsToTxn), checked against the transaction's
/// stored state and staged only while that state stands.
#[derive(Debug)]
pub struct TxnOffsetCommit;

impl Handler for TxnOffsetCommit {
    const KEY: ApiKey = ApiKey::TxnOffsetCommit;
    const VERSIONS: (i16, i16) = (0, 5);
    type Request = TxnOffsetCommitRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let access = ctx.access();
        let whole = if !may_write(access, &req.transactional_id) {
            Some(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        } else if !crate::authz::group(access, Operation::Consume, &req.group_id) {
            Some(crate::authz::GROUP_AUTHORIZATION_FAILED)
        } else {
            None
        };
        let denied: Vec<bool> = req
            .topics
            .iter()
            .map(|t| access.checks() && !access.topic(Operation::Consume, &t.name))
            .collect();
        // From v5 (transactions V2) the group joins the transaction here, not through
        // AddOffsetsToTxn.
        let implicit = ctx.reply.version >= 5;
        ctx.later(move |ctx| async move {
            let to = (ctx.broker.as_ref(), ctx.groups.as_ref());
            txn_offsets::commit(req, whole, denied, to, implicit).await
        })
    }
}

const OPERATION_NOT_ATTEMPTED: i16 = kafka_protocol::ResponseError::OperationNotAttempted.code();
use crate::authz::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;

/// Appends every marker of `req` (each refused with `refused`, when given), in order: a
/// partition's markers are admitted in the request's order; all are awaited together.
pub(crate) async fn write_markers(
    req: WriteTxnMarkersRequest,
    broker: &dyn Broker,
    refused: Option<i16>,
) -> WriteTxnMarkersResponse {
    let mut admitted = Vec::new();
    for m in &req.markers {
        let marker = Marker {
            producer_id: m.producer_id.0,
            producer_epoch: m.producer_epoch,
            commit: m.transaction_result,
            coordinator_epoch: m.coordinator_epoch,
        };
        let mut topics = Vec::with_capacity(m.topics.len());
        for t in &m.topics {
            let mut partitions = Vec::with_capacity(t.partition_indexes.len());
            for p in &t.partition_indexes {
                let r = match refused {
                    Some(code) => Err(Refused::new(code, "may not write transaction markers")),
                    None => broker.write_marker(&t.name.0, *p, marker).await,
                };
                partitions.push((*p, r));
            }
            topics.push((t.name.clone(), partitions));
        }
        admitted.push((m.producer_id, topics));
    }
    let mut markers = Vec::with_capacity(admitted.len());
    for (producer_id, topics) in admitted {
        let mut out = Vec::with_capacity(topics.len());
        for (name, partitions) in topics {
            let mut results = Vec::with_capacity(partitions.len());
            for (index, r) in partitions {
                let code = match r {
                    Ok(commit) => commit.await.err().map_or(0, |e| e.code),
                    Err(e) => e.code,
                };
                results.push(
                    WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(index)
                        .with_error_code(code),
                );
            }
            out.push(
                WritableTxnMarkerTopicResult::default().with_name(name).with_partitions(results),
            );
        }
        markers.push(
            WritableTxnMarkerResult::default().with_producer_id(producer_id).with_topics(out),
        );
    }
    WriteTxnMarkersResponse::default().with_markers(markers)
}

/// The coordinator side (KIP-98): a transactional id's requests, served by the writer the
/// owner function picks for it (as a group's), its state moved by compare-and-set only, so
/// two writers that both think they coordinate it never both move it.
pub mod coordinator {
    use std::time::Duration;

    use crate::transactions::machine::{self, Init};
    use crate::transactions::{self as txn, Marker, StoredTxn, TxnPartition, TxnPhase};
    use crate::{Broker, Refused, code};

    /// Attempts at a transition whose compare-and-set keeps losing.
    const ATTEMPTS: usize = 5;
    /// How long a transaction's markers are waited for before they are asked for again.
    const RESEND_AFTER: Duration = Duration::from_secs(5);
    /// How often a coordinator looks for transactions past their timeout (Kafka's
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`).
    pub(crate) const CHECK_INTERVAL: Duration = Duration::from_secs(10);
    /// How long one completion waits at most (the periodic look takes over after).
    const COMPLETE_WITHIN: Duration = Duration::from_secs(60);

    pub(crate) const NOT_COORDINATOR: i16 = crate::groups::errors::NOT_COORDINATOR;
    const COORDINATOR_NOT_AVAILABLE: i16 = crate::groups::errors::COORDINATOR_NOT_AVAILABLE;

    /// NONE when this broker coordinates transactional id `id`; Kafka's code otherwise.
    pub(crate) async fn coordinates(broker: &dyn Broker, id: &str) -> i16 {
        if id.is_empty() || txn::key_of(id).is_none() {
            return code::INVALID_REQUEST;
        }
        match broker.coordinator(id).await {
            Ok(Some(c)) if c.node_id == broker.node_id() => code::NONE,
            Ok(Some(_)) => NOT_COORDINATOR,
            Ok(None) | Err(_) => COORDINATOR_NOT_AVAILABLE,
        }
    }

    /// Moves `id`'s state by `step` (its new state, `None` for no change) under
    /// compare-and-set, read again and retried when another write came first; the state after.
    pub(crate) async fn transition(
        broker: &dyn crate::TxnStates,
        id: &str,
        step: impl Fn(Option<&StoredTxn>) -> Result<Option<StoredTxn>, i16>,
    ) -> Result<Option<StoredTxn>, i16> {
        for _ in 0..ATTEMPTS {
            let (cur, revision) = match broker.txn_state(id).await {
                Ok(Some((t, r))) => (Some(t), r),
                Ok(None) => (None, 0),
                Err(r) => return Err(unavailable(r)),
            };
            let Some(next) = step(cur.as_ref())? else { return Ok(cur) };
            match broker.put_txn_state(id, &next, revision).await {
                Ok(true) => return Ok(Some(next)),
                Ok(false) => continue,
                Err(r) => return Err(unavailable(r)),
            }
        }
        Err(txn::CONCURRENT_TRANSACTIONS)
    }

    fn unavailable(r: Refused) -> i16 {
        tracing::warn!(error = %r.message, "Kafka transaction state unreadable or unwritable");
        COORDINATOR_NOT_AVAILABLE
    }

    /// InitProducerId with a transactional id: the producer id and epoch, or Kafka's code.
    pub async fn init_producer_id(
        broker: &std::sync::Arc<dyn Broker>,
        id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), i16> {
        let c = coordinates(broker.as_ref(), id).await;
        if c != code::NONE {
            return Err(c);
        }
        // A producer id to take if one is needed (a new id, or epochs spent).
        let new_id = broker.init_producer_id(None).await.map_err(|r| r.code)?.0;
        let fence = std::sync::Mutex::new(false);
        let after = transition(broker.as_ref(), id, |cur| {
            match machine::init(cur, timeout_ms, expected, new_id, broker.now_ms())? {
                Init::Ready(next) => Ok(Some(next)),
                Init::FenceFirst(next) => {
                    *fence.lock().unwrap_or_else(|e| e.into_inner()) = true;
                    Ok(Some(next))
                }
            }
        })
        .await?
        .ok_or(code::UNKNOWN_SERVER_ERROR)?;
        if *fence.lock().unwrap_or_else(|e| e.into_inner()) {
            end_markers(broker.clone(), id.to_owned(), after).await;
            return Err(txn::CONCURRENT_TRANSACTIONS);
        }
        let epoch = i16::try_from(after.producer_epoch).map_err(|_| code::UNKNOWN_SERVER_ERROR)?;
        Ok((after.producer_id, epoch))
    }

    /// EndTxn: the transaction prepared to commit or abort, its markers asked for; answered
    /// once the decision is durable (as Kafka answers once it is in its transaction log).
    pub async fn end(
        broker: &std::sync::Arc<dyn Broker>,
        id: &str,
        producer: (i64, i16),
        commit: bool,
    ) -> i16 {
        let c = coordinates(broker.as_ref(), id).await;
        if c != code::NONE {
            return c;
        }
        let ended = transition(broker.as_ref(), id, |cur| {
            machine::end(cur, producer, commit, broker.now_ms())
        });
        match ended.await {
            Ok(Some(t))
                if matches!(t.phase(), TxnPhase::PrepareCommit | TxnPhase::PrepareAbort) =>
            {
                end_markers(broker.clone(), id.to_owned(), t).await;
                code::NONE
            }
            Ok(_) => code::NONE,
            Err(c) => c,
        }
    }

    /// A code no answer carries: the transition needs a new producer id (the epochs spent).
    const NEEDS_NEW_ID: i16 = i16::MIN;

    /// EndTxn v5 (transactions V2): the transaction prepared to commit or abort at the next
    /// epoch, its markers asked for; the producer id and epoch the client goes on at.
    pub async fn end_v2(
        broker: &std::sync::Arc<dyn Broker>,
        id: &str,
        producer: (i64, i16),
        commit: bool,
    ) -> Result<(i64, i16), i16> {
        let c = coordinates(broker.as_ref(), id).await;
        if c != code::NONE {
            return Err(c);
        }
        let mut new_id = -1;
        let after = loop {
            let ended = transition(broker.as_ref(), id, |cur| {
                if new_id < 0 && cur.is_some_and(machine::spent) {
                    return Err(NEEDS_NEW_ID);
                }
                machine::end_v2(cur, producer, commit, new_id, broker.now_ms())
            });
            match ended.await {
                Err(NEEDS_NEW_ID) => {
                    new_id = broker.init_producer_id(None).await.map_err(|r| r.code)?.0;
                }
                Ok(after) => break after.ok_or(code::UNKNOWN_SERVER_ERROR)?,
                Err(c) => return Err(c),
            }
        };
        if matches!(after.phase(), TxnPhase::PrepareCommit | TxnPhase::PrepareAbort) {
            end_markers(broker.clone(), id.to_owned(), after.clone()).await;
        }
        let epoch = i16::try_from(after.producer_epoch).map_err(|_| code::UNKNOWN_SERVER_ERROR)?;
        Ok((after.producer_id, epoch))
    }

    /// Transactions V2: a partition (Produce v12) or group (TxnOffsetCommit v5) a producer's
    /// request names joins its transaction, which begins with its first, as AddPartitionsToTxn
    /// would have joined it; done by the partition's owner or the group's coordinator, by the
    /// same compare-and-set as the coordinator's. The state after.
    pub async fn add_implicitly(
        states: &dyn crate::TxnStates,
        id: &str,
        producer: (i64, i16),
        partitions: &[TxnPartition],
        group: Option<&str>,
    ) -> Result<StoredTxn, i16> {
        let added = transition(states, id, |cur| {
            machine::add(cur, producer, partitions, group, states.now_ms())
        });
        added.await?.ok_or(txn::INVALID_PRODUCER_ID_MAPPING)
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn: the partitions (or group) joined to the
    /// transaction under way, which begins with its first.
    pub async fn add(
        broker: &dyn Broker,
        id: &str,
        producer: (i64, i16),
        partitions: &[TxnPartition],
        group: Option<&str>,
    ) -> i16 {
        let c = coordinates(broker, id).await;
        if c != code::NONE {
            return c;
        }
        let added = transition(broker, id, |cur| {
            machine::add(cur, producer, partitions, group, broker.now_ms())
        });
        match added.await {
            Ok(_) => code::NONE,
            Err(c) => c,
        }
    }

    /// Asks for the markers of a transaction being ended and completes it, in a task of its
    /// own, once every one is written.
    pub(crate) async fn end_markers(broker: std::sync::Arc<dyn Broker>, id: String, t: StoredTxn) {
        let (producer_id, epoch) = t.marker_producer();
        let Ok(epoch) = i16::try_from(epoch) else { return };
        let marker = Marker {
            producer_id,
            producer_epoch: epoch,
            commit: t.phase() == TxnPhase::PrepareCommit,
            coordinator_epoch: 0,
        };
        tokio::spawn(async move { complete(broker.as_ref(), &id, marker, &t).await });
    }

    /// Asks for `marker` on every partition of `t` until the asking is durable (a failed ask
    /// may have left some asked, some not: all are asked again); whether it was, within
    /// [`COMPLETE_WITHIN`] of `began` and while the state was still `t`.
    async fn ask_markers(
        broker: &dyn Broker,
        id: &str,
        marker: Marker,
        t: &StoredTxn,
        began: tokio::time::Instant,
    ) -> bool {
        let mut pause = Duration::from_millis(5);
        loop {
            match broker.send_markers(id, marker, t).await {
                Ok(asked) => return asked,
                Err(r) if began.elapsed() > COMPLETE_WITHIN => {
                    tracing::warn!(id, error = %r.message, "Kafka transaction markers not asked for yet");
                    return false;
                }
                Err(_) => {}
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// Waits for the markers of `id`'s transaction `t` (asked for again every
    /// [`RESEND_AFTER`]), ends its groups' staged offsets, then moves it to complete.
    async fn complete(broker: &dyn Broker, id: &str, marker: Marker, t: &StoredTxn) {
        let partitions = &t.partitions;
        let began = tokio::time::Instant::now();
        // None pending means each written only once each was asked for.
        if !ask_markers(broker, id, marker, t, began).await {
            return;
        }
        let mut asked = tokio::time::Instant::now();
        let mut pause = Duration::from_millis(5);
        loop {
            match broker.markers_pending(marker.producer_id, partitions).await {
                Ok(0) if end_offsets(broker, id, marker, t).await => break,
                Ok(_) | Err(_) if began.elapsed() > COMPLETE_WITHIN => return,
                Ok(_) | Err(_) => {}
            }
            if asked.elapsed() > RESEND_AFTER {
                asked = tokio::time::Instant::now();
                if let Ok(false) = broker.send_markers(id, marker, t).await {
                    return;
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
        let done = transition(broker, id, |cur| {
            // Only the transaction whose markers these were, still as it was prepared: a later
            // one of the producer (at the same epoch: transactions V1) is not this one.
            Ok(cur.filter(|c| *c == t).and_then(|c| machine::complete(c, broker.now_ms())))
        });
        if let Err(c) = done.await {
            tracing::warn!(id, code = c, "Kafka transaction not completed yet");
        }
    }

    /// Forgets transactional id `id` if its state (read again) is still expired, unmoved.
    async fn forget(broker: &dyn Broker, id: &str) {
        let Ok(Some((cur, revision))) = broker.txn_state(id).await else { return };
        if !machine::expired(&cur, broker.now_ms()) {
            return;
        }
        match broker.remove_txn_state(id, revision).await {
            Ok(true) => tracing::info!(id, "transactional id idle past its expiration: forgotten"),
            Ok(false) => {}
            Err(r) => tracing::warn!(id, error = %r.message, "transactional id not forgotten yet"),
        }
    }

    /// Ends the offsets the groups of transaction `t` staged, while its state is still `t`,
    /// the prepared one `marker` is for (a state moved on was ended by whoever moved it);
    /// whether that is done.
    async fn end_offsets(broker: &dyn Broker, id: &str, marker: Marker, t: &StoredTxn) -> bool {
        // The offsets were staged at the epoch the transaction ran at.
        let Ok(epoch) = i16::try_from(t.txn_producer().1) else { return true };
        let marker = Marker { producer_epoch: epoch, ..marker };
        for group in &t.groups {
            let revision = match broker.txn_state(id).await {
                Ok(Some((cur, revision))) if cur == *t => revision,
                Ok(_) => return true,
                Err(_) => return false,
            };
            if let Err(r) = broker.end_offsets(id, revision, group, marker).await {
                tracing::debug!(id, group, error = %r.message, "staged offsets not ended yet");
                return false;
            }
        }
        true
    }

    /// The coordinator's periodic look: transactions it coordinates that are past their
    /// timeout are aborted; those left prepared (by a coordinator gone, say) are ended; ids
    /// idle past their expiration are forgotten.
    pub async fn expire(broker: &std::sync::Arc<dyn Broker>) {
        let Ok(states) = broker.txn_states().await else { return };
        let now = broker.now_ms();
        for (id, t) in states {
            if machine::expired(&t, now) {
                if coordinates(broker.as_ref(), &id).await == code::NONE {
                    forget(broker.as_ref(), &id).await;
                }
                continue;
            }
            let phase = t.phase();
            let stale = now.saturating_sub(t.updated_ms) > RESEND_AFTER.as_millis() as i64;
            let due = phase == TxnPhase::Ongoing
                && now >= t.started_ms.saturating_add(i64::from(t.timeout_ms));
            let prepared = matches!(phase, TxnPhase::PrepareCommit | TxnPhase::PrepareAbort);
            if !(due || prepared && stale) || coordinates(broker.as_ref(), &id).await != code::NONE
            {
                continue;
            }
            if prepared {
                end_markers(broker.clone(), id, t).await;
                continue;
            }
            let Ok((new_id, _)) = broker.init_producer_id(None).await else { continue };
            let aborted = transition(broker.as_ref(), &id, |cur| {
                Ok(cur.and_then(|c| machine::timed_out(c, new_id, broker.now_ms())))
            });
            if let Ok(Some(t)) = aborted.await
                && t.phase() == TxnPhase::PrepareAbort
            {
                tracing::info!(id, "Kafka transaction past its timeout: aborted");
                end_markers(broker.clone(), id, t).await;
            }
        }
    }
}

/// TxnOffsetCommit's work at the group's coordinator.
mod txn_offsets {
    use kafka_protocol::messages::txn_offset_commit_response::{
        TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
    };
    use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};

    use crate::group_api::{MAX_OFFSET_METADATA, check_coordinator};
    use crate::groups::Groups;
    use crate::groups::errors::{NOT_COORDINATOR, OFFSET_METADATA_TOO_LARGE};
    use crate::transactions as txn;
    use crate::{Broker, OffsetCommit, Refused, Staged, code};

    /// Attempts at staging while the transaction's state keeps moving (partitions added).
    const ATTEMPTS: usize = 5;

    /// Answers `req`: refused whole with `whole`, a topic refused where `denied`.
    pub(super) async fn commit(
        req: TxnOffsetCommitRequest,
        whole: Option<i16>,
        denied: Vec<bool>,
        (broker, groups): (&dyn Broker, &Groups),
        implicit: bool,
    ) -> TxnOffsetCommitResponse {
        let group = req.group_id.0.to_string();
        let mut whole = whole;
        if whole.is_none() {
            whole = check_coordinator(broker, groups, &group).await;
        }
        if whole.is_none() {
            let member = req.group_instance_id.as_deref();
            let c = groups.check_txn_commit(&group, req.generation_id, &req.member_id, member);
            whole = (c != code::NONE).then_some(c);
        }
        let mut items = Vec::new();
        let mut codes: Vec<Vec<i16>> = Vec::with_capacity(req.topics.len());
        for (t, denied) in req.topics.iter().zip(&denied) {
            let per = t.partitions.iter().map(|p| {
                let metadata = p.committed_metadata.as_ref().map(|m| m.to_string());
                match (whole, denied) {
                    (Some(c), _) => c,
                    (None, true) => crate::authz::TOPIC_AUTHORIZATION_FAILED,
                    _ if metadata.as_ref().is_some_and(|m| m.len() > MAX_OFFSET_METADATA) => {
                        OFFSET_METADATA_TOO_LARGE
                    }
                    _ => {
                        items.push(OffsetCommit {
                            topic: t.name.0.to_string(),
                            partition: p.partition_index,
                            offset: p.committed_offset,
                            leader_epoch: p.committed_leader_epoch,
                            metadata,
                        });
                        // Filled in from the staging's outcome below.
                        i16::MIN
                    }
                }
            });
            codes.push(per.collect());
        }
        let producer = (req.producer_id.0, req.producer_epoch);
        let id = req.transactional_id.0.to_string();
        let mut staged = match items.is_empty() {
            true => Ok(Vec::new()),
            false => stage((broker, groups), &group, (&id, producer), items, implicit).await,
        }
        .map(Vec::into_iter);
        let topics = req
            .topics
            .iter()
            .zip(codes)
            .map(|(t, per)| {
                let partitions = t.partitions.iter().zip(per).map(|(p, code)| {
                    let code = match (code, &mut staged) {
                        (i16::MIN, Err(e)) => *e,
                        (i16::MIN, Ok(outcomes)) => match outcomes.next() {
                            Some(Ok(())) => code::NONE,
                            Some(Err(r)) => r.code,
                            None => code::UNKNOWN_SERVER_ERROR,
                        },
                        (c, _) => c,
                    };
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                });
                TxnOffsetCommitResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(partitions.collect())
            })
            .collect();
        TxnOffsetCommitResponse::default().with_topics(topics)
    }

    /// Stages `items` for transactional id `id` while its stored state has the group in the
    /// producer's ongoing transaction (joined to it first when `implicit`: transactions V2);
    /// each item's outcome, or one code for all.
    async fn stage(
        (broker, groups): (&dyn Broker, &Groups),
        group: &str,
        (id, producer): (&str, (i64, i16)),
        items: Vec<OffsetCommit>,
        implicit: bool,
    ) -> Result<Vec<Result<(), Refused>>, i16> {
        let Some(tenure) = groups.tenure(group) else { return Err(NOT_COORDINATOR) };
        for _ in 0..ATTEMPTS {
            let (state, revision) = match broker.txn_state(id).await {
                Ok(Some(found)) => found,
                Ok(None) => return Err(txn::INVALID_PRODUCER_ID_MAPPING),
                Err(r) => return Err(r.code),
            };
            match state.verify_group(producer.0, producer.1, group) {
                Ok(()) => {}
                Err(r) if implicit && r.code == txn::INVALID_TXN_STATE => {
                    let states: &dyn crate::TxnStates = broker;
                    let joined =
                        super::coordinator::add_implicitly(states, id, producer, &[], Some(group));
                    joined.await?;
                    continue;
                }
                Err(r) => return Err(r.code),
            }
            match broker.stage_offsets(group, tenure, (id, revision), producer, items.clone()).await
            {
                Staged::Done(outcomes) => {
                    if outcomes.iter().any(|o| o.as_ref().is_err_and(|r| r.code == NOT_COORDINATOR))
                    {
                        groups.forget(group);
                    }
                    return Ok(outcomes);
                }
                Staged::TxnMoved => continue,
            }
        }
        Err(txn::CONCURRENT_TRANSACTIONS)
    }
}

/// Whether the principal may see transactional id `id` (Kafka's DESCRIBE on it).
fn may_see(a: crate::authz::Access<'_>, id: &str) -> bool {
    crate::authz::transactional_id(a, Operation::Describe, id)
}

/// DescribeTransactions (v0): each transactional id's state as its coordinator stores it.
#[derive(Debug)]
pub struct DescribeTransactions;

impl Handler for DescribeTransactions {
    const KEY: ApiKey = ApiKey::DescribeTransactions;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = kafka_protocol::messages::DescribeTransactionsRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        use kafka_protocol::messages::describe_transactions_response::{
            TopicData, TransactionState,
        };
        let access = ctx.access();
        let allowed: Vec<bool> =
            req.transactional_ids.iter().map(|id| may_see(access, id)).collect();
        ctx.later(move |ctx| async move {
            let broker = ctx.broker.as_ref();
            let mut out = Vec::with_capacity(req.transactional_ids.len());
            let mut allowed = allowed.into_iter();
            for id in req.transactional_ids {
                let name = id.0.to_string();
                let mut st = TransactionState::default()
                    .with_transactional_id(id)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1)
                    .with_transaction_start_time_ms(-1);
                st.error_code = if allowed.next().unwrap_or(false) {
                    coordinator::coordinates(broker, &name).await
                } else {
                    TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                };
                if st.error_code == crate::code::NONE {
                    match broker.txn_state(&name).await {
                        Ok(Some((t, _))) => {
                            st.transaction_state = crate::group_api::s(t.phase().name());
                            st.transaction_timeout_ms = t.timeout_ms;
                            st.producer_id = ProducerId(t.producer_id);
                            st.producer_epoch = i16::try_from(t.producer_epoch).unwrap_or(-1);
                            if t.phase() == crate::transactions::TxnPhase::Ongoing {
                                st.transaction_start_time_ms = t.started_ms;
                            }
                            let mut topics: Vec<TopicData> = Vec::new();
                            for p in &t.partitions {
                                match topics.iter_mut().find(|d| d.topic.0.as_str() == p.topic) {
                                    Some(d) => d.partitions.push(p.partition),
                                    None => topics.push(
                                        TopicData::default()
                                            .with_topic(kafka_protocol::messages::TopicName(
                                                crate::group_api::s(p.topic.clone()),
                                            ))
                                            .with_partitions(vec![p.partition]),
                                    ),
                                }
                            }
                            st.topics = topics;
                        }
                        Ok(None) => st.error_code = TRANSACTIONAL_ID_NOT_FOUND,
                        Err(r) => st.error_code = r.code,
                    }
                }
                out.push(st);
            }
            kafka_protocol::messages::DescribeTransactionsResponse::default()
                .with_transaction_states(out)
        })
    }
}

/// ListTransactions (v0–1): the transactions this broker coordinates, by state, producer id
/// and (v1) how long they have run.
#[derive(Debug)]
pub struct ListTransactions;

impl Handler for ListTransactions {
    const KEY: ApiKey = ApiKey::ListTransactions;
    const VERSIONS: (i16, i16) = (0, 1);
    type Request = kafka_protocol::messages::ListTransactionsRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        use kafka_protocol::messages::list_transactions_response::TransactionState;
        use kafka_protocol::messages::{ListTransactionsResponse, TransactionalId};
        ctx.later(move |ctx| async move {
            let broker = ctx.broker.as_ref();
            let known = |s: &str| TXN_STATE_NAMES.contains(&s);
            let unknown: Vec<_> =
                req.state_filters.iter().filter(|s| !known(s.as_str())).cloned().collect();
            let states = match broker.txn_states().await {
                Ok(s) => s,
                Err(r) => return ListTransactionsResponse::default().with_error_code(r.code),
            };
            let now = broker.now_ms();
            let mut out = Vec::new();
            for (id, t) in states {
                let name = t.phase().name();
                let wanted = (req.state_filters.is_empty()
                    || req.state_filters.iter().any(|s| s.as_str() == name))
                    && (req.producer_id_filters.is_empty()
                        || req.producer_id_filters.iter().any(|p| p.0 == t.producer_id))
                    && (req.duration_filter < 0
                        || t.phase() == crate::transactions::TxnPhase::Ongoing
                            && now.saturating_sub(t.started_ms) >= req.duration_filter);
                // Only those the principal may see (as Kafka lists them).
                let seen = || {
                    let a = ctx.access();
                    !a.checks()
                        || a.authz.allows(
                            a.principal,
                            Operation::Describe,
                            security::acl::ResourceType::TransactionalId,
                            &id,
                        )
                };
                if wanted
                    && seen()
                    && coordinator::coordinates(broker, &id).await == crate::code::NONE
                {
                    out.push(
                        TransactionState::default()
                            .with_transactional_id(TransactionalId(crate::group_api::s(id)))
                            .with_producer_id(ProducerId(t.producer_id))
                            .with_transaction_state(crate::group_api::s(name)),
                    );
                }
            }
            ListTransactionsResponse::default()
                .with_unknown_state_filters(unknown)
                .with_transaction_states(out)
        })
    }
}

/// Kafka's transaction state names (ListTransactions' filters).
const TXN_STATE_NAMES: [&str; 8] = [
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
];

const TRANSACTIONAL_ID_NOT_FOUND: i16 =
    kafka_protocol::ResponseError::TransactionalIdNotFound.code();

/// DescribeProducers (v0): the producers each partition's owner knows, with the first offset
/// of any transaction each has open there (what KIP-664's tools find hanging ones by).
#[derive(Debug)]
pub struct DescribeProducers;

impl Handler for DescribeProducers {
    const KEY: ApiKey = ApiKey::DescribeProducers;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = kafka_protocol::messages::DescribeProducersRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        use kafka_protocol::messages::describe_producers_response::{
            PartitionResponse, ProducerState, TopicResponse,
        };
        let access = ctx.access();
        let denied: Vec<bool> = req
            .topics
            .iter()
            .map(|t| access.checks() && !access.topic(Operation::Consume, &t.name))
            .collect();
        ctx.later(move |ctx| async move {
            let mut topics = Vec::with_capacity(req.topics.len());
            for (t, denied) in req.topics.into_iter().zip(denied) {
                let mut partitions = Vec::with_capacity(t.partition_indexes.len());
                for p in t.partition_indexes {
                    let mut r = PartitionResponse::default().with_partition_index(p);
                    let found = match denied {
                        true => Err(Refused::new(crate::authz::TOPIC_AUTHORIZATION_FAILED, "")),
                        false => ctx.broker.producers(&t.name.0, p).await,
                    };
                    match found {
                        Ok(ps) => {
                            r.active_producers = ps
                                .into_iter()
                                .map(|a| {
                                    ProducerState::default()
                                        .with_producer_id(ProducerId(a.producer_id))
                                        .with_producer_epoch(i32::from(a.epoch))
                                        .with_last_sequence(a.last_sequence)
                                        .with_last_timestamp(-1)
                                        .with_coordinator_epoch(-1)
                                        .with_current_txn_start_offset(a.txn_start_offset)
                                })
                                .collect()
                        }
                        Err(e) => r.error_code = e.code,
                    }
                    partitions.push(r);
                }
                topics.push(TopicResponse::default().with_name(t.name).with_partitions(partitions));
            }
            kafka_protocol::messages::DescribeProducersResponse::default().with_topics(topics)
        })
    }
}
