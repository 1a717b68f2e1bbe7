//! OffsetForLeaderEpoch (API 23, KIP-320), answered as Kafka answers it for a log without
//! leader epochs: Lakelog's partitions have no leader epoch (Metadata says -1, and so does
//! every batch it serves), so a consumer has none to validate its position against, and
//! each partition this broker leads answers NONE with leader epoch -1 and end offset -1
//! (Kafka's `UNDEFINED_EPOCH` and `UNDEFINED_EPOCH_OFFSET`: no epoch entry found). A request
//! naming a current leader epoch is refused as Kafka refuses one above its own:
//! UNKNOWN_LEADER_EPOCH. A partition led elsewhere is NOT_LEADER_OR_FOLLOWER, an unknown one
//! UNKNOWN_TOPIC_OR_PARTITION; DESCRIBE on each topic (as Kafka allows consumers),
//! TOPIC_AUTHORIZATION_FAILED for each partition of a topic refused.
//!
//! Versions 2-4: the ones Kafka 4 serves (KIP-896 removed 0 and 1).

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{ApiKey, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use security::acl::Operation;

use crate::api::{Admission, Ctx, Handler};
use crate::session::Session;
use crate::{Broker, code};

/// Kafka's UNKNOWN_LEADER_EPOCH: the epoch named is above the broker's.
pub const UNKNOWN_LEADER_EPOCH: i16 = kafka_protocol::ResponseError::UnknownLeaderEpoch.code();

/// OffsetForLeaderEpoch.
#[derive(Debug)]
pub struct OffsetForLeaderEpoch;

impl Handler for OffsetForLeaderEpoch {
    const KEY: ApiKey = ApiKey::OffsetForLeaderEpoch;
    const VERSIONS: (i16, i16) = (2, 4);
    type Request = OffsetForLeaderEpochRequest;

    fn serve(mut req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let access = ctx.access();
        let refused: Vec<OffsetForLeaderTopicResult> =
            crate::authz::split(&mut req.topics, |t| access.topic(Operation::Describe, &t.topic))
                .into_iter()
                .map(|t| {
                    let partitions = t
                        .partitions
                        .iter()
                        .map(|p| answer(p.partition, crate::authz::TOPIC_AUTHORIZATION_FAILED))
                        .collect();
                    OffsetForLeaderTopicResult::default()
                        .with_topic(t.topic)
                        .with_partitions(partitions)
                })
                .collect();
        ctx.later(|ctx| async move {
            let zone = crate::zone_of(&ctx.client_id);
            let mut topics = end_offsets(req, ctx.broker.as_ref(), zone).await;
            topics.extend(refused);
            OffsetForLeaderEpochResponse::default().with_topics(topics)
        })
    }
}

fn answer(partition: i32, error: i16) -> EpochEndOffset {
    EpochEndOffset::default()
        .with_partition(partition)
        .with_error_code(error)
        .with_leader_epoch(-1)
        .with_end_offset(-1)
}

/// Each partition's answer: where this broker leads it for a client in `zone`, no epoch
/// entry (NONE, -1, -1), unless the request names a current leader epoch.
async fn end_offsets(
    req: OffsetForLeaderEpochRequest,
    broker: &dyn Broker,
    zone: Option<&str>,
) -> Vec<OffsetForLeaderTopicResult> {
    let names: Vec<String> = req.topics.iter().map(|t| t.topic.0.to_string()).collect();
    let known = match broker.topics(Some(&names), zone, None).await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "Kafka OffsetForLeaderEpoch: topics unreadable");
            Vec::new()
        }
    };
    let me = broker.node_id();
    req.topics
        .into_iter()
        .map(|t| {
            let info = known.iter().find(|k| k.name == t.topic.0.as_str() && k.error == code::NONE);
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let led = info
                        .and_then(|i| i.partitions.iter().find(|q| q.index == p.partition))
                        .map(|q| q.leader == Some(me));
                    let error = match led {
                        None => code::UNKNOWN_TOPIC_OR_PARTITION,
                        Some(false) => code::NOT_LEADER_OR_FOLLOWER,
                        Some(true) if p.current_leader_epoch >= 0 => UNKNOWN_LEADER_EPOCH,
                        Some(true) => code::NONE,
                    };
                    answer(p.partition, error)
                })
                .collect();
            OffsetForLeaderTopicResult::default().with_topic(t.topic).with_partitions(partitions)
        })
        .collect()
}
