//! One request in, one response out: the API key and version checked first (the header's
//! encoding depends on them), the header and body decoded, the answer built through the
//! [`Broker`] and encoded in the version asked for.
//!
//! As Kafka does: ApiVersions at a version above ours is answered in its v0 body with
//! UNSUPPORTED_VERSION and our ranges (KIP-511); any other API key or version we do not serve,
//! or a request that does not decode, closes the connection.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId,
    ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, CreatePartitionsRequest,
    CreateTopicsRequest, DeleteGroupsRequest, DeleteRecordsRequest, DeleteTopicsRequest,
    DescribeClusterRequest, DescribeConfigsRequest, DescribeGroupsRequest, FetchRequest,
    FindCoordinatorRequest, HeartbeatRequest, IncrementalAlterConfigsRequest,
    InitProducerIdRequest, InitProducerIdResponse, JoinGroupRequest, LeaveGroupRequest,
    ListGroupsRequest, ListOffsetsRequest, MetadataRequest, MetadataResponse, OffsetCommitRequest,
    OffsetDeleteRequest, OffsetFetchRequest, ProduceRequest, ProducerId, RequestHeader,
    ResponseHeader, SaslAuthenticateRequest, SaslHandshakeRequest, SyncGroupRequest, TopicName,
};
use kafka_protocol::messages::{
    ConsumerGroupHeartbeatResponse, DescribeClusterResponse, FindCoordinatorResponse,
    HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse, OffsetCommitResponse,
    OffsetFetchResponse, SyncGroupResponse,
};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use security::acl::Operation;

use crate::fetch::Answer as FetchAnswer;
use crate::frame::Frame;
use crate::splice::{Outgoing, Splicer};
use crate::{Broker, KafkaConfig, TopicInfo, code, frame};

/// The APIs served, and the versions of each (every one implemented, old encodings too).
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 8),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    // v0 advertised because librdkafka requires it to use SASL at all; the v0 exchange's raw
    // tokens are not served (every current client sends SaslAuthenticate after v1).
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
];

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

fn versions(api: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED.iter().find(|(k, _, _)| *k == api).map(|(_, lo, hi)| (*lo, *hi))
}

/// A request admitted: the future of its response frame (size included; none for a Produce
/// with acks=0), or why the connection closes.
pub type Answer = futures::future::BoxFuture<'static, Result<Option<Outgoing>, Close>>;

/// Admits one request frame, in its connection's order: decodes it and does what must happen
/// before the next request of the connection is admitted (a produce's batches are queued for
/// commit), then returns the rest as a future. A request that cannot be served is `Err`: the
/// connection closes once the answers before it are written. The frame's budget (its bytes and
/// what its decoding allocated) is held until its answer is ready.
pub async fn admit(
    frame: Frame,
    session: &mut crate::session::Session,
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
        && !matches!(api, ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate)
    {
        return Err(Close::Unauthenticated(api));
    }
    let (decoded, allocated) = decode_counted(&bytes)?;
    held.keep(bytes.len() + allocated);
    let answer = serve(decoded, session, broker, cfg, groups, client_host).await?;
    Ok(Box::pin(async move {
        let out = answer.await;
        drop(held);
        out
    }))
}

/// Serves a request decoded (see [`admit`]).
async fn serve(
    decoded: Decoded,
    session: &mut crate::session::Session,
    broker: Arc<dyn Broker>,
    cfg: Arc<KafkaConfig>,
    groups: Arc<crate::groups::Groups>,
    client_host: Arc<str>,
) -> Result<Answer, Close> {
    let (id, version, client_id, request) = match decoded {
        Decoded::Request { correlation_id, version, client_id, request } => {
            (correlation_id, version, client_id, request)
        }
        Decoded::ApiVersionsTooNew { correlation_id } => {
            let body = api_versions(code::UNSUPPORTED_VERSION);
            return Ok(ready(encode_response(ApiKey::ApiVersions, 0, correlation_id, &body)));
        }
    };
    // Before authentication only the handshake is served (module doc of `session`).
    if !session.authenticated() {
        match &request {
            Request::ApiVersions | Request::SaslHandshake(_) | Request::SaslAuthenticate(_) => {}
            other => return Err(Close::Unauthenticated(other.api())),
        }
    }
    let authz = cfg.authz.clone();
    let principal = session.principal().clone();
    let access = crate::authz::Access { authz: &authz, principal: &principal, peer: &client_host };
    match request {
        Request::ApiVersions => {
            let body = api_versions(code::NONE);
            Ok(ready(encode_response(ApiKey::ApiVersions, version, id, &body)))
        }
        Request::SaslHandshake(req) => {
            let body = session.handshake(&req);
            Ok(ready(encode_response(ApiKey::SaslHandshake, version, id, &body)))
        }
        Request::SaslAuthenticate(req) => {
            let body = session.authenticate(&req, &cfg.authz).await;
            Ok(ready(encode_response(ApiKey::SaslAuthenticate, version, id, &body)))
        }
        // ACLs: DESCRIBE on the cluster to list them, ALTER to change them (as in Kafka).
        Request::DescribeAcls(req) => {
            if !crate::authz::cluster(access, Operation::Describe) {
                let resp = DescribeAclsResponse::default()
                    .with_error_code(crate::authz::CLUSTER_AUTHORIZATION_FAILED)
                    .with_error_message(crate::authz::refused_message(access, "describe ACLs"));
                return Ok(ready(encode_response(ApiKey::DescribeAcls, version, id, &resp)));
            }
            Ok(Box::pin(async move {
                let resp = crate::acl_api::describe(*req, cfg.acls.as_ref()).await;
                encode_response(ApiKey::DescribeAcls, version, id, &resp).map(Some)
            }))
        }
        Request::CreateAcls(req) => {
            if !crate::authz::cluster(access, Operation::Alter) {
                let refused =
                    kafka_protocol::messages::create_acls_response::AclCreationResult::default()
                        .with_error_code(crate::authz::CLUSTER_AUTHORIZATION_FAILED)
                        .with_error_message(crate::authz::refused_message(access, "create ACLs"));
                let resp = CreateAclsResponse::default()
                    .with_results(req.creations.iter().map(|_| refused.clone()).collect());
                return Ok(ready(encode_response(ApiKey::CreateAcls, version, id, &resp)));
            }
            Ok(Box::pin(async move {
                let resp = crate::acl_api::create(*req, cfg.acls.as_ref()).await;
                encode_response(ApiKey::CreateAcls, version, id, &resp).map(Some)
            }))
        }
        Request::DeleteAcls(req) => {
            if !crate::authz::cluster(access, Operation::Alter) {
                let refused = kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult::default()
                    .with_error_code(crate::authz::CLUSTER_AUTHORIZATION_FAILED)
                    .with_error_message(crate::authz::refused_message(access, "delete ACLs"));
                let resp = DeleteAclsResponse::default()
                    .with_filter_results(req.filters.iter().map(|_| refused.clone()).collect());
                return Ok(ready(encode_response(ApiKey::DeleteAcls, version, id, &resp)));
            }
            Ok(Box::pin(async move {
                let resp = crate::acl_api::delete(*req, cfg.acls.as_ref()).await;
                encode_response(ApiKey::DeleteAcls, version, id, &resp).map(Some)
            }))
        }
        Request::InitProducerId(req) => {
            if !crate::authz::init_producer_id(access) {
                let resp = InitProducerIdResponse::default()
                    .with_error_code(crate::authz::CLUSTER_AUTHORIZATION_FAILED)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1);
                return Ok(ready(encode_response(ApiKey::InitProducerId, version, id, &resp)));
            }
            Ok(Box::pin(async move {
                let resp = init_producer_id(*req, broker.as_ref()).await;
                encode_response(ApiKey::InitProducerId, version, id, &resp).map(Some)
            }))
        }
        Request::CreateTopics(mut req) => {
            let refused = crate::authz::create_topics(access, &mut req);
            Ok(Box::pin(async move {
                let mut resp =
                    crate::admin::create_topics(*req, version, broker.as_ref(), &cfg).await;
                resp.topics.extend(refused);
                encode_response(ApiKey::CreateTopics, version, id, &resp).map(Some)
            }))
        }
        Request::DeleteTopics(mut req) => {
            let refused = crate::authz::delete_topics(access, &mut req);
            Ok(Box::pin(async move {
                let mut resp = crate::admin::delete_topics(*req, version, broker.as_ref()).await;
                resp.responses.extend(refused);
                encode_response(ApiKey::DeleteTopics, version, id, &resp).map(Some)
            }))
        }
        Request::CreatePartitions(mut req) => {
            let refused = crate::authz::create_partitions(access, &mut req);
            Ok(Box::pin(async move {
                let mut resp = crate::admin::create_partitions(*req, broker.as_ref()).await;
                resp.results.extend(refused);
                encode_response(ApiKey::CreatePartitions, version, id, &resp).map(Some)
            }))
        }
        Request::DescribeConfigs(mut req) => {
            let refused = crate::authz::describe_configs(access, &mut req);
            Ok(Box::pin(async move {
                let mut resp = crate::configs::describe(*req, version, broker.as_ref(), &cfg).await;
                resp.results.extend(refused);
                encode_response(ApiKey::DescribeConfigs, version, id, &resp).map(Some)
            }))
        }
        Request::AlterConfigs(mut req) => {
            let refused = crate::authz::alter_configs(access, &mut req);
            Ok(Box::pin(async move {
                let mut resp = crate::configs::alter(*req, broker.as_ref(), &cfg).await;
                resp.responses.extend(refused);
                encode_response(ApiKey::AlterConfigs, version, id, &resp).map(Some)
            }))
        }
        Request::IncrementalAlterConfigs(mut req) => {
            let refused = crate::authz::incremental_alter_configs(access, &mut req);
            Ok(Box::pin(async move {
                let mut resp = crate::configs::incremental_alter(*req, broker.as_ref(), &cfg).await;
                resp.responses.extend(refused);
                encode_response(ApiKey::IncrementalAlterConfigs, version, id, &resp).map(Some)
            }))
        }
        Request::DeleteRecords(mut req) => {
            let refused = crate::authz::delete_records(access, &mut req);
            Ok(Box::pin(async move {
                let mut resp =
                    crate::admin::delete_records(*req, &client_id, broker.as_ref()).await;
                resp.topics.extend(refused);
                encode_response(ApiKey::DeleteRecords, version, id, &resp).map(Some)
            }))
        }
        Request::DescribeCluster(req) => {
            if !crate::authz::cluster(access, Operation::Describe) {
                let resp = DescribeClusterResponse::default()
                    .with_error_code(crate::authz::CLUSTER_AUTHORIZATION_FAILED)
                    .with_error_message(crate::authz::refused_message(
                        access,
                        "describe the cluster",
                    ));
                return Ok(ready(encode_response(ApiKey::DescribeCluster, version, id, &resp)));
            }
            Ok(Box::pin(async move {
                let resp = crate::admin::describe_cluster(*req, version, broker.as_ref()).await;
                encode_response(ApiKey::DescribeCluster, version, id, &resp).map(Some)
            }))
        }
        Request::FindCoordinator(mut req) => {
            // Before v4 one key, refused whole; from v4 a batch, each key on its own.
            if version < 4
                && req.key_type == 0
                && !crate::authz::group(access, Operation::Describe, &req.key)
            {
                let resp = FindCoordinatorResponse::default()
                    .with_error_code(crate::authz::GROUP_AUTHORIZATION_FAILED)
                    .with_node_id(BrokerId(-1))
                    .with_port(-1);
                return Ok(ready(encode_response(ApiKey::FindCoordinator, version, id, &resp)));
            }
            let refused = crate::authz::find_coordinator(access, &mut req);
            Ok(Box::pin(async move {
                let mut resp =
                    crate::group_api::find_coordinator(*req, version, broker.as_ref()).await;
                resp.coordinators.extend(refused);
                encode_response(ApiKey::FindCoordinator, version, id, &resp).map(Some)
            }))
        }
        Request::JoinGroup(req) => {
            if !crate::authz::group(access, Operation::Consume, &req.group_id) {
                let resp = JoinGroupResponse::default()
                    .with_error_code(crate::authz::GROUP_AUTHORIZATION_FAILED)
                    .with_generation_id(-1);
                return Ok(ready(encode_response(ApiKey::JoinGroup, version, id, &resp)));
            }
            Ok(Box::pin(async move {
                let resp = crate::group_api::join_group(
                    *req,
                    version,
                    &client_id,
                    &client_host,
                    broker.as_ref(),
                    &groups,
                )
                .await;
                encode_response(ApiKey::JoinGroup, version, id, &resp).map(Some)
            }))
        }
        Request::SyncGroup(req) => {
            if !crate::authz::group(access, Operation::Consume, &req.group_id) {
                let resp = SyncGroupResponse::default()
                    .with_error_code(crate::authz::GROUP_AUTHORIZATION_FAILED);
                return Ok(ready(encode_response(ApiKey::SyncGroup, version, id, &resp)));
            }
            Ok(Box::pin(async move {
                let resp = crate::group_api::sync_group(*req, broker.as_ref(), &groups).await;
                encode_response(ApiKey::SyncGroup, version, id, &resp).map(Some)
            }))
        }
        Request::Heartbeat(req) => {
            if !crate::authz::group(access, Operation::Consume, &req.group_id) {
                let resp = HeartbeatResponse::default()
                    .with_error_code(crate::authz::GROUP_AUTHORIZATION_FAILED);
                return Ok(ready(encode_response(ApiKey::Heartbeat, version, id, &resp)));
            }
            Ok(Box::pin(async move {
                let resp = crate::group_api::heartbeat(*req, broker.as_ref(), &groups).await;
                encode_response(ApiKey::Heartbeat, version, id, &resp).map(Some)
            }))
        }
        Request::LeaveGroup(req) => {
            if !crate::authz::group(access, Operation::Consume, &req.group_id) {
                let resp = LeaveGroupResponse::default()
                    .with_error_code(crate::authz::GROUP_AUTHORIZATION_FAILED);
                return Ok(ready(encode_response(ApiKey::LeaveGroup, version, id, &resp)));
            }
            Ok(Box::pin(async move {
                let resp =
                    crate::group_api::leave_group(*req, version, broker.as_ref(), &groups).await;
                encode_response(ApiKey::LeaveGroup, version, id, &resp).map(Some)
            }))
        }
        Request::OffsetCommit(mut req) => {
            let refused = crate::authz::offset_commit(access, &mut req);
            Ok(Box::pin(async move {
                let mut resp = match req.topics.is_empty() && !refused.is_empty() {
                    true => OffsetCommitResponse::default(),
                    false => {
                        crate::group_api::offset_commit(*req, version, broker.as_ref(), &groups)
                            .await
                    }
                };
                resp.topics.extend(refused);
                encode_response(ApiKey::OffsetCommit, version, id, &resp).map(Some)
            }))
        }
        Request::OffsetFetch(req) => {
            // Before v8: one group, refused whole.
            if version < 8 && !crate::authz::group(access, Operation::Describe, &req.group_id) {
                let resp = OffsetFetchResponse::default()
                    .with_error_code(crate::authz::GROUP_AUTHORIZATION_FAILED);
                return Ok(ready(encode_response(ApiKey::OffsetFetch, version, id, &resp)));
            }
            let (authz, principal) = (cfg.authz.clone(), session.principal().clone());
            Ok(Box::pin(async move {
                let mut resp =
                    crate::group_api::offset_fetch(*req, version, broker.as_ref(), &groups).await;
                let access = crate::authz::Access {
                    authz: &authz,
                    principal: &principal,
                    peer: &client_host,
                };
                crate::authz::offset_fetch(access, &mut resp);
                encode_response(ApiKey::OffsetFetch, version, id, &resp).map(Some)
            }))
        }
        Request::ListGroups(req) => {
            let (authz, principal) = (cfg.authz.clone(), session.principal().clone());
            Ok(Box::pin(async move {
                let mut resp = crate::group_api::list_groups(*req, broker.as_ref(), &groups).await;
                let access = crate::authz::Access {
                    authz: &authz,
                    principal: &principal,
                    peer: &client_host,
                };
                crate::authz::list_groups(access, &mut resp);
                encode_response(ApiKey::ListGroups, version, id, &resp).map(Some)
            }))
        }
        Request::DescribeGroups(mut req) => {
            let refused = crate::authz::describe_groups(access, &mut req);
            Ok(Box::pin(async move {
                let mut resp =
                    crate::group_api::describe_groups(*req, broker.as_ref(), &groups).await;
                resp.groups.extend(refused);
                encode_response(ApiKey::DescribeGroups, version, id, &resp).map(Some)
            }))
        }
        Request::OffsetDelete(mut req) => {
            if !crate::authz::group(access, Operation::Delete, &req.group_id) {
                let resp = kafka_protocol::messages::OffsetDeleteResponse::default()
                    .with_error_code(crate::authz::GROUP_AUTHORIZATION_FAILED);
                return Ok(ready(encode_response(ApiKey::OffsetDelete, version, id, &resp)));
            }
            let refused = crate::authz::offset_delete(access, &mut req);
            Ok(Box::pin(async move {
                let mut resp =
                    crate::group_api::offset_delete(*req, broker.as_ref(), &groups).await;
                resp.topics.extend(refused);
                encode_response(ApiKey::OffsetDelete, version, id, &resp).map(Some)
            }))
        }
        Request::DeleteGroups(mut req) => {
            let refused = crate::authz::delete_groups(access, &mut req);
            Ok(Box::pin(async move {
                let mut resp =
                    crate::group_api::delete_groups(*req, broker.as_ref(), &groups).await;
                resp.results.extend(refused);
                encode_response(ApiKey::DeleteGroups, version, id, &resp).map(Some)
            }))
        }
        Request::ConsumerGroupHeartbeat(req) => {
            // CONSUME on the group, then DESCRIBE on each topic it names (refused whole, as
            // Kafka does).
            let refusal = if !crate::authz::group(access, Operation::Consume, &req.group_id) {
                Some((crate::authz::GROUP_AUTHORIZATION_FAILED, "consume in the group"))
            } else if !crate::authz::consumer_subscription(access, &req) {
                Some((crate::authz::TOPIC_AUTHORIZATION_FAILED, "describe every subscribed topic"))
            } else {
                None
            };
            if let Some((code, what)) = refusal {
                let resp = ConsumerGroupHeartbeatResponse::default()
                    .with_error_code(code)
                    .with_error_message(crate::authz::refused_message(access, what));
                let api = ApiKey::ConsumerGroupHeartbeat;
                return Ok(ready(encode_response(api, version, id, &resp)));
            }
            let (authz, principal) = (cfg.authz.clone(), session.principal().clone());
            Ok(Box::pin(async move {
                let access = crate::authz::Access {
                    authz: &authz,
                    principal: &principal,
                    peer: &client_host,
                };
                let resp = crate::consumer_api::heartbeat(
                    *req,
                    &client_id,
                    &client_host,
                    broker.as_ref(),
                    &groups,
                    access,
                )
                .await;
                encode_response(ApiKey::ConsumerGroupHeartbeat, version, id, &resp).map(Some)
            }))
        }
        Request::ConsumerGroupDescribe(mut req) => {
            let refused = crate::authz::consumer_group_describe(access, &mut req);
            let (authz, principal) = (cfg.authz.clone(), session.principal().clone());
            Ok(Box::pin(async move {
                let mut resp = crate::consumer_api::describe(*req, broker.as_ref(), &groups).await;
                let access = crate::authz::Access {
                    authz: &authz,
                    principal: &principal,
                    peer: &client_host,
                };
                crate::authz::consumer_group_described(access, &mut resp);
                resp.groups.extend(refused);
                encode_response(ApiKey::ConsumerGroupDescribe, version, id, &resp).map(Some)
            }))
        }
        Request::Metadata(req) => {
            let (authz, principal) = (cfg.authz.clone(), session.principal().clone());
            Ok(Box::pin(async move {
                let access = crate::authz::Access {
                    authz: &authz,
                    principal: &principal,
                    peer: &client_host,
                };
                let resp = metadata(*req, version, &client_id, broker.as_ref(), &cfg, access).await;
                encode_response(ApiKey::Metadata, version, id, &resp).map(Some)
            }))
        }
        Request::Fetch(mut req) => {
            let refused = crate::authz::fetch(access, &mut req);
            Ok(Box::pin(async move {
                let mut answer = crate::fetch::fetch(*req, &client_id, broker.as_ref()).await;
                answer.resp.responses.extend(refused);
                encode_fetch(version, id, answer).map(Some)
            }))
        }
        Request::ListOffsets(mut req) => {
            let refused = crate::authz::list_offsets(access, &mut req);
            Ok(Box::pin(async move {
                let mut resp = crate::fetch::list_offsets(*req, &client_id, broker.as_ref()).await;
                resp.topics.extend(refused);
                encode_response(ApiKey::ListOffsets, version, id, &resp).map(Some)
            }))
        }
        Request::Produce(mut req) => {
            let acks = req.acks;
            let refused = crate::authz::produce(access, &mut req);
            let committing = crate::produce::admit(*req, &client_id, broker.as_ref(), &cfg).await;
            Ok(Box::pin(async move {
                let mut resp = committing.await;
                resp.responses.extend(refused);
                // acks=0: the client expects no answer. One that failed closes the connection,
                // as Kafka does: the producer then refreshes its metadata (a moved leader)
                // instead of sending on into the void.
                if acks == 0 {
                    let failed = resp
                        .responses
                        .iter()
                        .flat_map(|t| t.partition_responses.iter().map(move |p| (t, p)))
                        .find(|(_, p)| p.error_code != 0);
                    return match failed {
                        Some((t, p)) => Err(Close::FireAndForgetFailed {
                            topic: t.name.0.to_string(),
                            partition: p.index,
                            code: p.error_code,
                        }),
                        None => Ok(None),
                    };
                }
                encode_response(ApiKey::Produce, version, id, &resp).map(Some)
            }))
        }
    }
}

/// A request this front end serves, decoded.
#[derive(Debug)]
pub enum Request {
    ApiVersions,
    InitProducerId(Box<InitProducerIdRequest>),
    CreateTopics(Box<CreateTopicsRequest>),
    DeleteTopics(Box<DeleteTopicsRequest>),
    CreatePartitions(Box<CreatePartitionsRequest>),
    DescribeConfigs(Box<DescribeConfigsRequest>),
    AlterConfigs(Box<AlterConfigsRequest>),
    IncrementalAlterConfigs(Box<IncrementalAlterConfigsRequest>),
    DeleteRecords(Box<DeleteRecordsRequest>),
    DescribeCluster(Box<DescribeClusterRequest>),
    FindCoordinator(Box<FindCoordinatorRequest>),
    JoinGroup(Box<JoinGroupRequest>),
    SyncGroup(Box<SyncGroupRequest>),
    Heartbeat(Box<HeartbeatRequest>),
    LeaveGroup(Box<LeaveGroupRequest>),
    OffsetCommit(Box<OffsetCommitRequest>),
    OffsetFetch(Box<OffsetFetchRequest>),
    ListGroups(Box<ListGroupsRequest>),
    DescribeGroups(Box<DescribeGroupsRequest>),
    DeleteGroups(Box<DeleteGroupsRequest>),
    OffsetDelete(Box<OffsetDeleteRequest>),
    ConsumerGroupHeartbeat(Box<ConsumerGroupHeartbeatRequest>),
    ConsumerGroupDescribe(Box<ConsumerGroupDescribeRequest>),
    Metadata(Box<MetadataRequest>),
    Fetch(Box<FetchRequest>),
    ListOffsets(Box<ListOffsetsRequest>),
    Produce(Box<ProduceRequest>),
    SaslHandshake(Box<SaslHandshakeRequest>),
    SaslAuthenticate(Box<SaslAuthenticateRequest>),
    DescribeAcls(Box<DescribeAclsRequest>),
    CreateAcls(Box<CreateAclsRequest>),
    DeleteAcls(Box<DeleteAclsRequest>),
}

impl Request {
    /// Its API.
    pub fn api(&self) -> ApiKey {
        match self {
            Request::ApiVersions => ApiKey::ApiVersions,
            Request::InitProducerId(_) => ApiKey::InitProducerId,
            Request::CreateTopics(_) => ApiKey::CreateTopics,
            Request::DeleteTopics(_) => ApiKey::DeleteTopics,
            Request::CreatePartitions(_) => ApiKey::CreatePartitions,
            Request::DescribeConfigs(_) => ApiKey::DescribeConfigs,
            Request::AlterConfigs(_) => ApiKey::AlterConfigs,
            Request::IncrementalAlterConfigs(_) => ApiKey::IncrementalAlterConfigs,
            Request::DeleteRecords(_) => ApiKey::DeleteRecords,
            Request::DescribeCluster(_) => ApiKey::DescribeCluster,
            Request::FindCoordinator(_) => ApiKey::FindCoordinator,
            Request::JoinGroup(_) => ApiKey::JoinGroup,
            Request::SyncGroup(_) => ApiKey::SyncGroup,
            Request::Heartbeat(_) => ApiKey::Heartbeat,
            Request::LeaveGroup(_) => ApiKey::LeaveGroup,
            Request::OffsetCommit(_) => ApiKey::OffsetCommit,
            Request::OffsetFetch(_) => ApiKey::OffsetFetch,
            Request::ListGroups(_) => ApiKey::ListGroups,
            Request::DescribeGroups(_) => ApiKey::DescribeGroups,
            Request::DeleteGroups(_) => ApiKey::DeleteGroups,
            Request::OffsetDelete(_) => ApiKey::OffsetDelete,
            Request::ConsumerGroupHeartbeat(_) => ApiKey::ConsumerGroupHeartbeat,
            Request::ConsumerGroupDescribe(_) => ApiKey::ConsumerGroupDescribe,
            Request::Metadata(_) => ApiKey::Metadata,
            Request::Fetch(_) => ApiKey::Fetch,
            Request::ListOffsets(_) => ApiKey::ListOffsets,
            Request::Produce(_) => ApiKey::Produce,
            Request::SaslHandshake(_) => ApiKey::SaslHandshake,
            Request::SaslAuthenticate(_) => ApiKey::SaslAuthenticate,
            Request::DescribeAcls(_) => ApiKey::DescribeAcls,
            Request::CreateAcls(_) => ApiKey::CreateAcls,
            Request::DeleteAcls(_) => ApiKey::DeleteAcls,
        }
    }
}

/// What a frame holds.
#[derive(Debug)]
pub enum Decoded {
    Request {
        correlation_id: i32,
        version: i16,
        client_id: String,
        request: Request,
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

fn decode_whole(frame: &Bytes) -> Result<Decoded, Close> {
    let (key, version) = frame::peek_api(frame).ok_or(Close::Short)?;
    let api = ApiKey::try_from(key).map_err(|_| Close::UnknownApi(key))?;
    let (min, max) = versions(api).ok_or(Close::UnknownApi(key))?;
    if api == ApiKey::ApiVersions && version > max {
        let correlation_id = frame::peek_correlation_id(frame).ok_or(Close::Short)?;
        return Ok(Decoded::ApiVersionsTooNew { correlation_id });
    }
    if version < min || version > max {
        return Err(Close::UnsupportedVersion { api, version, min, max });
    }
    let malformed = |e: anyhow::Error| Close::Malformed { api, version, message: e.to_string() };
    let mut buf = frame.clone();
    let header =
        RequestHeader::decode(&mut buf, api.request_header_version(version)).map_err(malformed)?;
    let request = request_of(api, version, &mut buf).map_err(malformed)?;
    // A frame is one request: bytes after its body are refused, not carried along (a
    // produce's batches are slices of the frame, alive until it is answered).
    if !buf.is_empty() {
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

/// The body of a request of `api` at `version`, decoded from `buf` (left after its end).
fn request_of(api: ApiKey, version: i16, buf: &mut Bytes) -> anyhow::Result<Request> {
    let request = match api {
        ApiKey::ApiVersions => {
            ApiVersionsRequest::decode(buf, version)?;
            Request::ApiVersions
        }
        ApiKey::Metadata => Request::Metadata(Box::new(MetadataRequest::decode(buf, version)?)),
        ApiKey::Fetch => Request::Fetch(Box::new(FetchRequest::decode(buf, version)?)),
        ApiKey::ListOffsets => {
            Request::ListOffsets(Box::new(ListOffsetsRequest::decode(buf, version)?))
        }
        ApiKey::Produce => Request::Produce(Box::new(ProduceRequest::decode(buf, version)?)),
        ApiKey::CreateTopics => {
            Request::CreateTopics(Box::new(CreateTopicsRequest::decode(buf, version)?))
        }
        ApiKey::InitProducerId => {
            Request::InitProducerId(Box::new(InitProducerIdRequest::decode(buf, version)?))
        }
        ApiKey::DeleteTopics => {
            Request::DeleteTopics(Box::new(DeleteTopicsRequest::decode(buf, version)?))
        }
        ApiKey::CreatePartitions => {
            Request::CreatePartitions(Box::new(CreatePartitionsRequest::decode(buf, version)?))
        }
        ApiKey::DescribeConfigs => {
            Request::DescribeConfigs(Box::new(DescribeConfigsRequest::decode(buf, version)?))
        }
        ApiKey::AlterConfigs => {
            Request::AlterConfigs(Box::new(AlterConfigsRequest::decode(buf, version)?))
        }
        ApiKey::IncrementalAlterConfigs => Request::IncrementalAlterConfigs(Box::new(
            IncrementalAlterConfigsRequest::decode(buf, version)?,
        )),
        ApiKey::DeleteRecords => {
            Request::DeleteRecords(Box::new(DeleteRecordsRequest::decode(buf, version)?))
        }
        ApiKey::DescribeCluster => {
            Request::DescribeCluster(Box::new(DescribeClusterRequest::decode(buf, version)?))
        }
        ApiKey::FindCoordinator => {
            Request::FindCoordinator(Box::new(FindCoordinatorRequest::decode(buf, version)?))
        }
        ApiKey::JoinGroup => Request::JoinGroup(Box::new(JoinGroupRequest::decode(buf, version)?)),
        ApiKey::SyncGroup => Request::SyncGroup(Box::new(SyncGroupRequest::decode(buf, version)?)),
        ApiKey::Heartbeat => Request::Heartbeat(Box::new(HeartbeatRequest::decode(buf, version)?)),
        ApiKey::LeaveGroup => {
            Request::LeaveGroup(Box::new(LeaveGroupRequest::decode(buf, version)?))
        }
        ApiKey::OffsetCommit => {
            Request::OffsetCommit(Box::new(OffsetCommitRequest::decode(buf, version)?))
        }
        ApiKey::OffsetFetch => {
            Request::OffsetFetch(Box::new(OffsetFetchRequest::decode(buf, version)?))
        }
        ApiKey::ListGroups => {
            Request::ListGroups(Box::new(ListGroupsRequest::decode(buf, version)?))
        }
        ApiKey::DescribeGroups => {
            Request::DescribeGroups(Box::new(DescribeGroupsRequest::decode(buf, version)?))
        }
        ApiKey::DeleteGroups => {
            Request::DeleteGroups(Box::new(DeleteGroupsRequest::decode(buf, version)?))
        }
        ApiKey::OffsetDelete => {
            Request::OffsetDelete(Box::new(OffsetDeleteRequest::decode(buf, version)?))
        }
        ApiKey::ConsumerGroupHeartbeat => Request::ConsumerGroupHeartbeat(Box::new(
            ConsumerGroupHeartbeatRequest::decode(buf, version)?,
        )),
        ApiKey::ConsumerGroupDescribe => Request::ConsumerGroupDescribe(Box::new(
            ConsumerGroupDescribeRequest::decode(buf, version)?,
        )),
        ApiKey::SaslHandshake => {
            Request::SaslHandshake(Box::new(SaslHandshakeRequest::decode(buf, version)?))
        }
        ApiKey::SaslAuthenticate => {
            Request::SaslAuthenticate(Box::new(SaslAuthenticateRequest::decode(buf, version)?))
        }
        ApiKey::DescribeAcls => {
            Request::DescribeAcls(Box::new(DescribeAclsRequest::decode(buf, version)?))
        }
        ApiKey::CreateAcls => {
            Request::CreateAcls(Box::new(CreateAclsRequest::decode(buf, version)?))
        }
        ApiKey::DeleteAcls => {
            Request::DeleteAcls(Box::new(DeleteAclsRequest::decode(buf, version)?))
        }
        other => anyhow::bail!("{other:?} is not served"),
    };
    Ok(request)
}

fn ready(r: Result<Outgoing, Close>) -> Answer {
    Box::pin(std::future::ready(r.map(Some)))
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

fn api_versions(error_code: i16) -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_error_code(error_code).with_api_keys(
        SUPPORTED
            .iter()
            .map(|(k, lo, hi)| {
                ApiVersion::default()
                    .with_api_key(*k as i16)
                    .with_min_version(*lo)
                    .with_max_version(*hi)
            })
            .collect(),
    )
}

async fn metadata(
    req: MetadataRequest,
    version: i16,
    client_id: &str,
    broker: &dyn Broker,
    cfg: &KafkaConfig,
    access: crate::authz::Access<'_>,
) -> MetadataResponse {
    let cluster_id = broker.cluster_id();
    let mut resp =
        MetadataResponse::default().with_cluster_id(Some(StrBytes::from_string(cluster_id)));
    let brokers = match broker.brokers().await {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "Kafka Metadata: brokers unreadable");
            Vec::new()
        }
    };
    resp.controller_id = BrokerId(crate::controller(&brokers));
    resp.brokers = brokers
        .into_iter()
        .map(|b| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(b.node_id))
                .with_host(StrBytes::from_string(b.host))
                .with_port(b.port)
                .with_rack(b.rack.map(StrBytes::from_string))
        })
        .collect();
    // v0: an empty list asks for every topic; v1+: a null list does, an empty one for none.
    let asked: Option<Vec<MetadataAsk>> = match req.topics {
        None => None,
        Some(t) if t.is_empty() && version == 0 => None,
        Some(t) => Some(
            t.into_iter()
                .map(|t| match t.name {
                    Some(n) => MetadataAsk::Name(n.0.to_string()),
                    None => MetadataAsk::Id(t.topic_id),
                })
                .collect(),
        ),
    };
    // Versions before 4 carry no flag: the broker's setting decides, as in Kafka.
    let allow = version < 4 || req.allow_auto_topic_creation;
    let create = (cfg.auto_create_topics && allow).then_some(cfg.default_partitions);
    let zone = crate::zone_of(client_id);
    let asked_all = asked.is_none();
    let topics = match &asked {
        None => broker.topics(None, zone, None).await,
        Some(asks) => {
            let names: Vec<String> = asks
                .iter()
                .filter_map(|a| match a {
                    MetadataAsk::Name(n) => Some(n.clone()),
                    MetadataAsk::Id(_) => None,
                })
                .collect();
            let by_id = asks.iter().any(|a| matches!(a, MetadataAsk::Id(_)));
            match (names.is_empty(), by_id) {
                (true, false) => Ok(Vec::new()),
                // Topics named by id are looked up among all of them.
                (_, true) => broker.topics(None, zone, None).await.map(|all| {
                    let mut got: Vec<TopicInfo> = Vec::new();
                    for a in asks {
                        match a {
                            MetadataAsk::Name(n) => {
                                got.push(all.iter().find(|t| &t.name == n).cloned().unwrap_or_else(
                                    || TopicInfo::failed(n, code::UNKNOWN_TOPIC_OR_PARTITION),
                                ))
                            }
                            MetadataAsk::Id(id) => got.push(
                                all.iter()
                                    .find(|t| &t.id == id)
                                    .cloned()
                                    .unwrap_or_else(|| TopicInfo::failed("", UNKNOWN_TOPIC_ID)),
                            ),
                        }
                    }
                    got
                }),
                (false, false) => {
                    let create = create.filter(|_| crate::authz::may_auto_create(access, &names));
                    broker.topics(Some(&names), zone, create).await
                }
            }
        }
    };
    let topics = match topics {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "Kafka Metadata: topics unreadable");
            let names = asked.unwrap_or_default();
            names
                .iter()
                .map(|a| match a {
                    MetadataAsk::Name(n) => TopicInfo::failed(n, code::UNKNOWN_SERVER_ERROR),
                    MetadataAsk::Id(_) => TopicInfo::failed("", code::UNKNOWN_SERVER_ERROR),
                })
                .collect()
        }
    };
    resp.topics = topics.into_iter().map(|t| topic(t, version)).collect();
    crate::authz::metadata(access, &mut resp, asked_all);
    resp
}

/// Kafka's UNKNOWN_TOPIC_ID.
const UNKNOWN_TOPIC_ID: i16 = 100;

enum MetadataAsk {
    Name(String),
    Id(uuid::Uuid),
}

fn topic(t: TopicInfo, version: i16) -> MetadataResponseTopic {
    let partitions = t
        .partitions
        .into_iter()
        .map(|p| {
            let (error, leader) = match p.leader {
                Some(id) => (code::NONE, id),
                None => (code::LEADER_NOT_AVAILABLE, -1),
            };
            // The leader, then the readers that serve its reads (as in sync as the leader: they
            // read the same storage).
            let mut replicas = if leader >= 0 { vec![BrokerId(leader)] } else { Vec::new() };
            replicas.extend(p.followers.iter().filter(|f| **f != leader).map(|f| BrokerId(*f)));
            MetadataResponsePartition::default()
                .with_error_code(error)
                .with_partition_index(p.index)
                .with_leader_id(BrokerId(leader))
                .with_leader_epoch(-1)
                .with_replica_nodes(replicas.clone())
                .with_isr_nodes(replicas)
        })
        .collect();
    let mut out = MetadataResponseTopic::default()
        .with_error_code(t.error)
        .with_name(Some(TopicName(StrBytes::from_string(t.name))))
        .with_partitions(partitions);
    if version >= 10 {
        out.topic_id = t.id;
    }
    out
}

/// InitProducerId: idempotent producers only (a transactional id is INVALID_REQUEST until
/// transactions exist).
async fn init_producer_id(
    req: InitProducerIdRequest,
    broker: &dyn Broker,
) -> InitProducerIdResponse {
    let resp = InitProducerIdResponse::default();
    if req.transactional_id.is_some() {
        return resp.with_error_code(code::INVALID_REQUEST);
    }
    let current = (req.producer_id.0 >= 0).then_some((req.producer_id.0, req.producer_epoch));
    match broker.init_producer_id(current).await {
        Ok((id, epoch)) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(epoch),
        Err(code) => {
            resp.with_error_code(code).with_producer_id(ProducerId(-1)).with_producer_epoch(-1)
        }
    }
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

    /// A frame holds one request and nothing after it: a valid ApiVersions padded with 1 MiB
    /// is refused (a padded produce would pin its whole frame while it commits).
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
