//! The group APIs over [`Groups`] (membership, this broker's memory) and the [`Broker`]
//! (coordinator choice and committed offsets, durable): FindCoordinator, JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups.
//! Every request about a group this broker does not coordinate is NOT_COORDINATOR (and what it
//! held of the group is dropped): clients find the coordinator again, which resumes the group
//! from its stored state ([`Groups::hold`]).

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    BrokerId, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest,
    SyncGroupResponse, TopicName, delete_groups_response::DeletableGroupResult,
};
use kafka_protocol::protocol::StrBytes;

use crate::groups::{Groups, Join, MayCommit, errors::*};
use crate::{Broker, CommittedOffset, OffsetCommit, code};
use kafka_protocol::messages::{ApiKey, OffsetDeleteRequest};
use security::acl::Operation;

use crate::api::{Admission, Ctx, Handler};
use crate::session::Session;

/// Now, on Tokio's clock (the system's outside tests; virtual under the simulation's paused
/// runtime, so its groups' sessions and rebalances keep virtual time).
pub(crate) fn clock_now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Kafka's `offset.metadata.max.bytes`.
pub const MAX_OFFSET_METADATA: usize = 4096;

pub(crate) fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// NOT_COORDINATOR (forgetting the group) unless this broker coordinates `group`; if it does,
/// the group is held here (taken from the store, resumed, when it was not).
pub(crate) async fn check_coordinator(
    broker: &dyn Broker,
    groups: &Groups,
    group: &str,
) -> Option<i16> {
    // A group id its offsets could not be stored under is refused for every request.
    if crate::groups::cursor_name(group).is_none() {
        return Some(INVALID_GROUP_ID);
    }
    match broker.coordinator_view(group).await {
        Ok((Some(c), view)) if c.node_id == broker.node_id() => {
            groups.hold(group, view, broker, clock_now()).await.err()
        }
        Ok((Some(_), _)) => {
            groups.forget(group);
            Some(NOT_COORDINATOR)
        }
        Ok((None, _)) | Err(_) => Some(COORDINATOR_NOT_AVAILABLE),
    }
}

pub(crate) async fn find_coordinator(
    req: FindCoordinatorRequest,
    version: i16,
    broker: &dyn Broker,
) -> FindCoordinatorResponse {
    let keys: Vec<String> = if version >= 4 {
        req.coordinator_keys.iter().map(|k| k.to_string()).collect()
    } else {
        vec![req.key.to_string()]
    };
    let mut found = Vec::with_capacity(keys.len());
    for key in keys {
        let mut c = Coordinator::default().with_key(s(key.clone())).with_node_id(BrokerId(-1));
        if !matches!(req.key_type, 0 | 1) {
            c.error_code = code::INVALID_REQUEST;
            c.error_message = Some(s("key type 0 (a group) or 1 (a transactional id)"));
        } else if key.is_empty() && req.key_type == 0 {
            c.error_code = INVALID_GROUP_ID;
        } else if key.is_empty() || crate::transactions::key_of(&key).is_none() {
            c.error_code = code::INVALID_REQUEST;
        } else {
            match broker.coordinator(&key).await {
                Ok(Some(b)) => {
                    c.node_id = BrokerId(b.node_id);
                    c.host = s(b.host);
                    c.port = b.port;
                }
                Ok(None) | Err(_) => c.error_code = COORDINATOR_NOT_AVAILABLE,
            }
        }
        found.push(c);
    }
    let mut resp = FindCoordinatorResponse::default();
    if version >= 4 {
        resp.coordinators = found;
    } else if let Some(c) = found.pop() {
        resp.error_code = c.error_code;
        resp.error_message = c.error_message;
        resp.node_id = c.node_id;
        resp.host = c.host;
        resp.port = c.port;
    }
    resp
}

pub async fn join_group(
    req: JoinGroupRequest,
    version: i16,
    client_id: &str,
    client_host: &str,
    broker: &dyn Broker,
    groups: &Groups,
) -> JoinGroupResponse {
    let group = req.group_id.0.to_string();
    let fail = |code: i16, member: &str| {
        JoinGroupResponse::default()
            .with_error_code(code)
            .with_generation_id(-1)
            .with_member_id(s(member))
    };
    if let Some(e) = check_coordinator(broker, groups, &group).await {
        return fail(e, &req.member_id);
    }
    let ms = |v: i32| Duration::from_millis(u64::try_from(v).unwrap_or(0));
    let join = Join {
        group,
        member_id: req.member_id.to_string(),
        instance_id: req.group_instance_id.as_ref().map(|i| i.to_string()),
        client_id: client_id.to_owned(),
        client_host: client_host.to_owned(),
        session_timeout: ms(req.session_timeout_ms),
        // v0 has no rebalance timeout: the session timeout stands for it, as in Kafka.
        rebalance_timeout: ms(if version >= 1 {
            req.rebalance_timeout_ms
        } else {
            req.session_timeout_ms
        }),
        protocol_type: req.protocol_type.to_string(),
        protocols: req.protocols.iter().map(|p| (p.name.to_string(), p.metadata.clone())).collect(),
        require_known_member: version >= 4,
    };
    let j = groups.join(join, clock_now()).await;
    // A static member that took its old incarnation's place is stored before it is answered.
    groups.store_changed(broker).await;
    let mut resp = JoinGroupResponse::default()
        .with_error_code(j.error)
        .with_generation_id(j.generation)
        .with_protocol_name(j.protocol.map(s))
        .with_leader(s(j.leader))
        .with_member_id(s(j.member_id))
        .with_members(
            j.members
                .into_iter()
                .map(|(id, instance, metadata)| {
                    JoinGroupResponseMember::default()
                        .with_member_id(s(id))
                        .with_group_instance_id(instance.map(s))
                        .with_metadata(metadata)
                })
                .collect(),
        );
    if version >= 7 {
        resp.protocol_type = j.protocol_type.map(s);
    }
    resp
}

pub async fn sync_group(
    req: SyncGroupRequest,
    broker: &dyn Broker,
    groups: &Groups,
) -> SyncGroupResponse {
    let group = req.group_id.0.to_string();
    if let Some(e) = check_coordinator(broker, groups, &group).await {
        return SyncGroupResponse::default().with_error_code(e);
    }
    let assignments: Vec<(String, Bytes)> =
        req.assignments.iter().map(|a| (a.member_id.to_string(), a.assignment.clone())).collect();
    let (error, ptype, pname, assignment) = groups
        .sync(
            &group,
            req.generation_id,
            &req.member_id,
            req.group_instance_id.as_deref(),
            req.protocol_type.as_deref(),
            req.protocol_name.as_deref(),
            assignments,
            broker,
            clock_now(),
        )
        .await;
    SyncGroupResponse::default()
        .with_error_code(error)
        .with_protocol_type(ptype.map(s))
        .with_protocol_name(pname.map(s))
        .with_assignment(assignment)
}

pub async fn heartbeat(
    req: HeartbeatRequest,
    broker: &dyn Broker,
    groups: &Groups,
) -> HeartbeatResponse {
    let group = req.group_id.0.to_string();
    let code = match check_coordinator(broker, groups, &group).await {
        Some(e) => e,
        None => groups.heartbeat(
            &group,
            req.generation_id,
            &req.member_id,
            req.group_instance_id.as_deref(),
            clock_now(),
        ),
    };
    HeartbeatResponse::default().with_error_code(code)
}

pub(crate) async fn leave_group(
    req: LeaveGroupRequest,
    version: i16,
    broker: &dyn Broker,
    groups: &Groups,
) -> LeaveGroupResponse {
    let group = req.group_id.0.to_string();
    if let Some(e) = check_coordinator(broker, groups, &group).await {
        return LeaveGroupResponse::default().with_error_code(e);
    }
    // v3 names members in a list (with instance ids); before, one member id.
    let members: Vec<(String, Option<String>)> = if version >= 3 {
        req.members
            .iter()
            .map(|m| (m.member_id.to_string(), m.group_instance_id.as_ref().map(|i| i.to_string())))
            .collect()
    } else {
        vec![(req.member_id.to_string(), None)]
    };
    let codes = groups.leave(&group, &members, clock_now());
    // A group the last member left is stored empty (its offsets expire from then).
    groups.store_changed(broker).await;
    if version < 3 {
        return LeaveGroupResponse::default().with_error_code(codes.first().copied().unwrap_or(0));
    }
    LeaveGroupResponse::default().with_members(
        members
            .into_iter()
            .zip(codes)
            .map(|((id, instance), code)| {
                MemberResponse::default()
                    .with_member_id(s(id))
                    .with_group_instance_id(instance.map(s))
                    .with_error_code(code)
            })
            .collect(),
    )
}

pub async fn offset_commit(
    req: OffsetCommitRequest,
    version: i16,
    broker: &dyn Broker,
    groups: &Groups,
) -> OffsetCommitResponse {
    let group = req.group_id.0.to_string();
    let may = match check_coordinator(broker, groups, &group).await {
        Some(e) => MayCommit::All(e),
        None => groups.check_commit(
            &group,
            req.generation_id_or_member_epoch,
            &req.member_id,
            req.group_instance_id.as_deref(),
            version,
        ),
    };
    let refused = may.refusal();
    let mut items = Vec::new();
    let mut codes: Vec<Vec<i16>> = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let mut per = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let metadata = p.committed_metadata.as_ref().map(|m| m.to_string());
            let code = match may.code(&t.name.0, p.partition_index) {
                code::NONE if metadata.as_ref().is_some_and(|m| m.len() > MAX_OFFSET_METADATA) => {
                    OFFSET_METADATA_TOO_LARGE
                }
                code::NONE => {
                    items.push(OffsetCommit {
                        topic: t.name.0.to_string(),
                        partition: p.partition_index,
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata,
                    });
                    // Filled in from the broker's answer below.
                    i16::MIN
                }
                refused => refused,
            };
            per.push(code);
        }
        codes.push(per);
    }
    let mut stored = match (refused, groups.tenure(&group)) {
        (None, _) if items.is_empty() => Vec::new(),
        (None, Some(tenure)) => {
            let outcomes = broker.commit_offsets(&group, tenure, items).await;
            if outcomes.iter().any(Result::is_ok) {
                groups.ensure_stored(&group, broker).await;
                groups.committed(&group);
            }
            // Refused as another coordinator's: this one lets the group go.
            if outcomes.iter().any(|o| o.as_ref().is_err_and(|r| r.code == NOT_COORDINATOR)) {
                groups.forget(&group);
            }
            outcomes
        }
        (None, None) => {
            items.iter().map(|_| Err(crate::Refused::new(NOT_COORDINATOR, "not held"))).collect()
        }
        (Some(_), _) => Vec::new(),
    }
    .into_iter();
    let topics = req
        .topics
        .iter()
        .zip(codes)
        .map(|(t, per)| {
            OffsetCommitResponseTopic::default().with_name(t.name.clone()).with_partitions(
                t.partitions
                    .iter()
                    .zip(per)
                    .map(|(p, code)| {
                        let code = if code == i16::MIN {
                            match stored.next() {
                                Some(Ok(())) => code::NONE,
                                Some(Err(e)) => e.code,
                                None => code::UNKNOWN_SERVER_ERROR,
                            }
                        } else {
                            code
                        };
                        OffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(code)
                    })
                    .collect(),
            )
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// One group's committed offsets for OffsetFetch: the partitions named (all when `None`).
/// With `require_stable`, a partition with offsets a transaction has staged and not ended
/// is UNSTABLE_OFFSET_COMMIT (its consumer asks again), as Kafka answers.
async fn fetch_one(
    broker: &dyn Broker,
    groups: &Groups,
    group: &str,
    asked: Option<Vec<(String, Vec<i32>)>>,
    require_stable: bool,
) -> Result<Vec<CommittedOffset>, i16> {
    if let Some(e) = check_coordinator(broker, groups, group).await {
        return Err(e);
    }
    let mut offsets = broker.committed_offsets(group, asked).await.map_err(|e| e.code)?;
    if require_stable {
        let unstable = broker.unstable_offsets(group).await.map_err(|e| e.code)?;
        for o in offsets.iter_mut().filter(|o| unstable.contains(&(o.topic.clone(), o.partition))) {
            *o = CommittedOffset {
                offset: -1,
                leader_epoch: -1,
                metadata: Some(String::new()),
                error: UNSTABLE_OFFSET_COMMIT,
                ..o.clone()
            };
        }
    }
    Ok(offsets)
}

const UNSTABLE_OFFSET_COMMIT: i16 = kafka_protocol::ResponseError::UnstableOffsetCommit.code();

/// Topic → its partitions' offsets, in the order met.
fn by_topic(offsets: Vec<CommittedOffset>) -> Vec<(String, Vec<CommittedOffset>)> {
    let mut out: Vec<(String, Vec<CommittedOffset>)> = Vec::new();
    for o in offsets {
        match out.iter_mut().find(|(t, _)| *t == o.topic) {
            Some((_, v)) => v.push(o),
            None => out.push((o.topic.clone(), vec![o])),
        }
    }
    out
}

pub async fn offset_fetch(
    req: OffsetFetchRequest,
    version: i16,
    broker: &dyn Broker,
    groups: &Groups,
) -> OffsetFetchResponse {
    if version >= 8 {
        let mut out = Vec::with_capacity(req.groups.len());
        for g in req.groups {
            let asked = g.topics.map(|ts| {
                ts.into_iter().map(|t| (t.name.0.to_string(), t.partition_indexes)).collect()
            });
            let group = g.group_id.0.to_string();
            let mut r = OffsetFetchResponseGroup::default().with_group_id(g.group_id);
            // v9: a consumer group's member fetches at its epoch (KIP-848).
            let member = groups.check_offset_fetch(&group, g.member_id.as_deref(), g.member_epoch);
            if member != code::NONE {
                r.error_code = member;
                out.push(r);
                continue;
            }
            match fetch_one(broker, groups, &group, asked, req.require_stable).await {
                Ok(offsets) => {
                    r.topics = by_topic(offsets)
                        .into_iter()
                        .map(|(t, ps)| {
                            OffsetFetchResponseTopics::default()
                                .with_name(TopicName(s(t)))
                                .with_partitions(
                                    ps.into_iter()
                                        .map(|p| {
                                            OffsetFetchResponsePartitions::default()
                                                .with_partition_index(p.partition)
                                                .with_committed_offset(p.offset)
                                                .with_committed_leader_epoch(p.leader_epoch)
                                                .with_metadata(p.metadata.map(s))
                                                .with_error_code(p.error)
                                        })
                                        .collect(),
                                )
                        })
                        .collect();
                }
                Err(e) => r.error_code = e,
            }
            out.push(r);
        }
        return OffsetFetchResponse::default().with_groups(out);
    }
    let asked = req
        .topics
        .map(|ts| ts.into_iter().map(|t| (t.name.0.to_string(), t.partition_indexes)).collect());
    let group = req.group_id.0.to_string();
    let mut resp = OffsetFetchResponse::default();
    match fetch_one(broker, groups, &group, asked, req.require_stable).await {
        Ok(offsets) => {
            resp.topics = by_topic(offsets)
                .into_iter()
                .map(|(t, ps)| {
                    OffsetFetchResponseTopic::default().with_name(TopicName(s(t))).with_partitions(
                        ps.into_iter()
                            .map(|p| {
                                OffsetFetchResponsePartition::default()
                                    .with_partition_index(p.partition)
                                    .with_committed_offset(p.offset)
                                    .with_committed_leader_epoch(p.leader_epoch)
                                    .with_metadata(p.metadata.map(s))
                                    .with_error_code(p.error)
                            })
                            .collect(),
                    )
                })
                .collect();
        }
        // v2+ have a top-level error; v1 only per partition (none to carry it: empty).
        Err(e) => resp.error_code = e,
    }
    resp
}

pub(crate) async fn list_groups(
    req: ListGroupsRequest,
    broker: &dyn Broker,
    groups: &Groups,
) -> ListGroupsResponse {
    // (name, protocol type, state, group type)
    let mut all: Vec<(String, String, &'static str, &'static str)> = groups
        .list()
        .into_iter()
        .map(|(n, ptype, state)| (n, ptype, state.name(), "classic"))
        .collect();
    all.extend(
        groups
            .consumer_list()
            .into_iter()
            .map(|(n, state)| (n, "consumer".to_owned(), state.name(), "consumer")),
    );
    all.extend(
        groups
            .shares()
            .groups
            .lock()
            .list()
            .into_iter()
            .map(|(n, state)| (n, "share".to_owned(), state, "share")),
    );
    // Stored groups this broker coordinates that it does not hold yet are taken (resumed),
    // as Kafka loads a coordinator's groups, then listed with the rest.
    match broker.stored_groups().await {
        Ok(stored) => {
            for (name, bytes) in stored {
                if all.iter().any(|(n, ..)| *n == name) {
                    continue;
                }
                let here = match groups.tenure(&name) {
                    Some(_) => true,
                    None => {
                        matches!(broker.coordinator(&name).await, Ok(Some(c)) if c.node_id == broker.node_id())
                            && check_coordinator(broker, groups, &name).await.is_none()
                    }
                };
                if !here {
                    continue;
                }
                // Its membership as held now; a group with no members here (offsets only, or
                // a KIP-848 group whose members left) is Empty, as Kafka lists it.
                match groups.list().into_iter().find(|(n, ..)| *n == name) {
                    Some((n, ptype, state)) => all.push((n, ptype, state.name(), "classic")),
                    None if Groups::stored_is_share(&bytes) => {
                        all.push((name, "share".to_owned(), "Empty", "share"));
                    }
                    None => all.push((name, "consumer".to_owned(), "Empty", "classic")),
                }
            }
            all.sort();
        }
        Err(e) => return ListGroupsResponse::default().with_error_code(e.code),
    }
    // Kafka matches both filters without regard to case.
    let listed = all
        .into_iter()
        .filter(|(_, _, state, _)| {
            req.states_filter.is_empty()
                || req.states_filter.iter().any(|f| f.as_str().eq_ignore_ascii_case(state))
        })
        .filter(|(_, _, _, kind)| {
            req.types_filter.is_empty()
                || req.types_filter.iter().any(|t| t.as_str().eq_ignore_ascii_case(kind))
        })
        .map(|(name, ptype, state, kind)| {
            ListedGroup::default()
                .with_group_id(GroupId(s(name)))
                .with_protocol_type(s(ptype))
                .with_group_state(s(state))
                .with_group_type(s(kind))
        })
        .collect();
    ListGroupsResponse::default().with_groups(listed)
}

pub(crate) async fn describe_groups(
    req: DescribeGroupsRequest,
    broker: &dyn Broker,
    groups: &Groups,
) -> DescribeGroupsResponse {
    let mut out = Vec::with_capacity(req.groups.len());
    for g in req.groups {
        let name = g.0.to_string();
        let mut d = DescribedGroup::default().with_group_id(g).with_authorized_operations(i32::MIN);
        if let Some(e) = check_coordinator(broker, groups, &name).await {
            d.error_code = e;
            out.push(d);
            continue;
        }
        match groups.describe(&name) {
            // A consumer group (KIP-848) is not a classic one: Dead, as Kafka answers v0-v5.
            None if groups.is_consumer_group(&name) => d.group_state = s("Dead"),
            // No members here: Empty if the group has committed offsets, else Dead, as Kafka
            // says.
            None => {
                let has_offsets =
                    broker.committed_offsets(&name, None).await.is_ok_and(|o| !o.is_empty());
                d.group_state = s(if has_offsets { "Empty" } else { "Dead" });
                if has_offsets {
                    d.protocol_type = s("consumer");
                }
            }
            Some(x) => {
                d.group_state = s(x.state.name());
                d.protocol_type = s(x.protocol_type);
                d.protocol_data = s(x.protocol);
                d.members = x
                    .members
                    .into_iter()
                    .map(|m| {
                        DescribedGroupMember::default()
                            .with_member_id(s(m.member_id))
                            .with_group_instance_id(m.instance_id.map(s))
                            .with_client_id(s(m.client_id))
                            .with_client_host(s(m.client_host))
                            .with_member_metadata(m.metadata)
                            .with_member_assignment(m.assignment)
                    })
                    .collect();
            }
        }
        out.push(d);
    }
    DescribeGroupsResponse::default().with_groups(out)
}

pub(crate) async fn delete_groups(
    req: DeleteGroupsRequest,
    broker: &dyn Broker,
    groups: &Groups,
) -> DeleteGroupsResponse {
    let mut results = Vec::with_capacity(req.groups_names.len());
    for g in req.groups_names {
        let name = g.0.to_string();
        let code = match check_coordinator(broker, groups, &name).await {
            Some(e) => e,
            None if groups.has_members(&name) => NON_EMPTY_GROUP,
            None => match groups.tenure(&name) {
                None => NOT_COORDINATOR,
                Some(tenure) => match broker.delete_group(&name, tenure).await {
                    Ok(existed) => {
                        // Its coordinator record went with it: the next request takes it anew.
                        groups.forget(&name);
                        groups.shares().forget_group(&name);
                        if existed { code::NONE } else { GROUP_ID_NOT_FOUND }
                    }
                    Err(e) => e.code,
                },
            },
        };
        results.push(DeletableGroupResult::default().with_group_id(g).with_error_code(code));
    }
    DeleteGroupsResponse::default().with_results(results)
}

/// Kafka's GROUP_SUBSCRIBED_TO_TOPIC.
const GROUP_SUBSCRIBED_TO_TOPIC: i16 = kafka_protocol::ResponseError::GroupSubscribedToTopic.code();

/// OffsetDelete: a group's committed offsets on the partitions named, unless a member
/// subscribes to the topic (GROUP_SUBSCRIBED_TO_TOPIC, as Kafka).
pub(crate) async fn offset_delete(
    req: kafka_protocol::messages::OffsetDeleteRequest,
    broker: &dyn Broker,
    groups: &Groups,
) -> kafka_protocol::messages::OffsetDeleteResponse {
    use kafka_protocol::messages::offset_delete_response::{
        OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
    };
    let group = req.group_id.0.to_string();
    let mut resp = kafka_protocol::messages::OffsetDeleteResponse::default();
    if let Some(e) = check_coordinator(broker, groups, &group).await {
        resp.error_code = e;
        return resp;
    }
    let subscribed = groups.subscribed(&group).unwrap_or_default();
    let Some(tenure) = groups.tenure(&group) else {
        resp.error_code = NOT_COORDINATOR;
        return resp;
    };
    for t in req.topics {
        let topic = t.name.0.to_string();
        let busy = subscribed.iter().any(|s| *s == topic || s == "*");
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let code = if busy {
                GROUP_SUBSCRIBED_TO_TOPIC
            } else {
                match broker.delete_offset(&group, tenure, &topic, p.partition_index).await {
                    Ok(()) => code::NONE,
                    Err(e) => e.code,
                }
            };
            partitions.push(
                OffsetDeleteResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code),
            );
        }
        resp.topics.push(
            OffsetDeleteResponseTopic::default().with_name(t.name).with_partitions(partitions),
        );
    }
    resp
}

// The classic group APIs: CONSUME on a group to take part, DESCRIBE to read it, DELETE to
// delete it or its offsets; READ on each topic a commit names (as in Kafka).

/// A group refused whole: `resp` with GROUP_AUTHORIZATION_FAILED.
fn group_refused<M: kafka_protocol::protocol::Encodable>(ctx: &Ctx, resp: M) -> Admission<'static> {
    ctx.now(&resp)
}

/// FindCoordinator: DESCRIBE on each group (before v4 one key, refused whole; from v4 a
/// batch, each key on its own).
#[derive(Debug)]
pub struct FindCoordinator;

impl Handler for FindCoordinator {
    const KEY: ApiKey = ApiKey::FindCoordinator;
    const VERSIONS: (i16, i16) = (0, 6);
    type Request = FindCoordinatorRequest;

    fn serve(mut req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let access = ctx.access();
        let refused_one = match req.key_type {
            0 if !crate::authz::group(access, Operation::Describe, &req.key) => {
                Some(crate::authz::GROUP_AUTHORIZATION_FAILED)
            }
            1 if !crate::authz::transactional_id(access, Operation::Describe, &req.key) => {
                Some(crate::authz::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            }
            _ => None,
        };
        if let (true, Some(code)) = (ctx.reply.version < 4, refused_one) {
            let resp = FindCoordinatorResponse::default()
                .with_error_code(code)
                .with_node_id(BrokerId(-1))
                .with_port(-1);
            return group_refused(&ctx, resp);
        }
        let refused = authorize::find_coordinator(access, &mut req);
        ctx.later(|ctx| async move {
            let mut resp = find_coordinator(req, ctx.reply.version, ctx.broker.as_ref()).await;
            resp.coordinators.extend(refused);
            resp
        })
    }
}

/// JoinGroup.
#[derive(Debug)]
pub struct JoinGroup;

impl Handler for JoinGroup {
    const KEY: ApiKey = ApiKey::JoinGroup;
    const VERSIONS: (i16, i16) = (0, 9);
    type Request = JoinGroupRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        if !crate::authz::group(ctx.access(), Operation::Consume, &req.group_id) {
            let resp = JoinGroupResponse::default()
                .with_error_code(crate::authz::GROUP_AUTHORIZATION_FAILED)
                .with_generation_id(-1);
            return group_refused(&ctx, resp);
        }
        ctx.later(|ctx| async move {
            let (broker, groups) = (ctx.broker.as_ref(), &ctx.groups);
            join_group(req, ctx.reply.version, &ctx.client_id, &ctx.client_host, broker, groups)
                .await
        })
    }
}

/// SyncGroup.
#[derive(Debug)]
pub struct SyncGroup;

impl Handler for SyncGroup {
    const KEY: ApiKey = ApiKey::SyncGroup;
    const VERSIONS: (i16, i16) = (0, 5);
    type Request = SyncGroupRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        if !crate::authz::group(ctx.access(), Operation::Consume, &req.group_id) {
            let resp = SyncGroupResponse::default()
                .with_error_code(crate::authz::GROUP_AUTHORIZATION_FAILED);
            return group_refused(&ctx, resp);
        }
        ctx.later(|ctx| async move { sync_group(req, ctx.broker.as_ref(), &ctx.groups).await })
    }
}

/// Heartbeat.
#[derive(Debug)]
pub struct Heartbeat;

impl Handler for Heartbeat {
    const KEY: ApiKey = ApiKey::Heartbeat;
    const VERSIONS: (i16, i16) = (0, 4);
    type Request = HeartbeatRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        if !crate::authz::group(ctx.access(), Operation::Consume, &req.group_id) {
            let resp = HeartbeatResponse::default()
                .with_error_code(crate::authz::GROUP_AUTHORIZATION_FAILED);
            return group_refused(&ctx, resp);
        }
        ctx.later(|ctx| async move { heartbeat(req, ctx.broker.as_ref(), &ctx.groups).await })
    }
}

/// LeaveGroup.
#[derive(Debug)]
pub struct LeaveGroup;

impl Handler for LeaveGroup {
    const KEY: ApiKey = ApiKey::LeaveGroup;
    const VERSIONS: (i16, i16) = (0, 5);
    type Request = LeaveGroupRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        if !crate::authz::group(ctx.access(), Operation::Consume, &req.group_id) {
            let resp = LeaveGroupResponse::default()
                .with_error_code(crate::authz::GROUP_AUTHORIZATION_FAILED);
            return group_refused(&ctx, resp);
        }
        ctx.later(|ctx| async move {
            leave_group(req, ctx.reply.version, ctx.broker.as_ref(), &ctx.groups).await
        })
    }
}

/// OffsetCommit: READ on each topic; the group's CONSUME refuses every topic.
#[derive(Debug)]
pub struct CommitOffsets;

impl Handler for CommitOffsets {
    const KEY: ApiKey = ApiKey::OffsetCommit;
    const VERSIONS: (i16, i16) = (2, 9);
    type Request = OffsetCommitRequest;

    fn serve(mut req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let refused = authorize::offset_commit(ctx.access(), &mut req);
        // Its place in the group's order is taken as it is admitted (a connection's requests
        // are admitted in order): it is applied after every commit of the group admitted
        // before it, as Kafka applies them, so a later commit never lands first.
        let (before, applied) = ctx.groups.commit_turn(&req.group_id.0);
        ctx.later(|ctx| async move {
            if let Some(before) = before {
                let _ = before.await;
            }
            let mut resp = match req.topics.is_empty() && !refused.is_empty() {
                true => OffsetCommitResponse::default(),
                false => {
                    offset_commit(req, ctx.reply.version, ctx.broker.as_ref(), &ctx.groups).await
                }
            };
            let _ = applied.send(());
            resp.topics.extend(refused);
            resp
        })
    }
}

/// OffsetFetch: DESCRIBE on each group (before v8 one group, refused whole), then only the
/// topics the principal may DESCRIBE are shown.
#[derive(Debug)]
pub struct OffsetFetch;

impl Handler for OffsetFetch {
    const KEY: ApiKey = ApiKey::OffsetFetch;
    const VERSIONS: (i16, i16) = (1, 9);
    type Request = OffsetFetchRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        if ctx.reply.version < 8
            && !crate::authz::group(ctx.access(), Operation::Describe, &req.group_id)
        {
            let resp = OffsetFetchResponse::default()
                .with_error_code(crate::authz::GROUP_AUTHORIZATION_FAILED);
            return group_refused(&ctx, resp);
        }
        ctx.later(|ctx| async move {
            let mut resp =
                offset_fetch(req, ctx.reply.version, ctx.broker.as_ref(), &ctx.groups).await;
            authorize::offset_fetch(ctx.access(), &mut resp);
            resp
        })
    }
}

/// ListGroups: only the groups the principal may DESCRIBE are listed.
#[derive(Debug)]
pub struct ListGroups;

impl Handler for ListGroups {
    const KEY: ApiKey = ApiKey::ListGroups;
    const VERSIONS: (i16, i16) = (0, 5);
    type Request = ListGroupsRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        ctx.later(|ctx| async move {
            let mut resp = list_groups(req, ctx.broker.as_ref(), &ctx.groups).await;
            authorize::list_groups(ctx.access(), &mut resp);
            resp
        })
    }
}

use security::acl::ResourceType::Group;

/// DescribeGroups: DESCRIBE on each group.
#[derive(Debug)]
pub struct DescribeGroups;

impl Handler for DescribeGroups {
    const KEY: ApiKey = ApiKey::DescribeGroups;
    const VERSIONS: (i16, i16) = (0, 5);
    type Request = DescribeGroupsRequest;

    fn serve(mut req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let refused = authorize::describe_groups(ctx.access(), &mut req);
        let operations = req.include_authorized_operations;
        ctx.later(move |ctx| async move {
            let mut resp = describe_groups(req, ctx.broker.as_ref(), &ctx.groups).await;
            if operations {
                for g in resp.groups.iter_mut().filter(|g| g.error_code == 0) {
                    let access = ctx.access();
                    g.authorized_operations = access.authorized_operations(Group, &g.group_id);
                }
            }
            resp.groups.extend(refused);
            resp
        })
    }
}

/// DeleteGroups: DELETE on each group.
#[derive(Debug)]
pub struct DeleteGroups;

impl Handler for DeleteGroups {
    const KEY: ApiKey = ApiKey::DeleteGroups;
    const VERSIONS: (i16, i16) = (0, 2);
    type Request = DeleteGroupsRequest;

    fn serve(mut req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let refused = authorize::delete_groups(ctx.access(), &mut req);
        ctx.later(|ctx| async move {
            let mut resp = delete_groups(req, ctx.broker.as_ref(), &ctx.groups).await;
            resp.results.extend(refused);
            resp
        })
    }
}

/// OffsetDelete: DELETE on the group, READ on each topic.
#[derive(Debug)]
pub struct OffsetDelete;

impl Handler for OffsetDelete {
    const KEY: ApiKey = ApiKey::OffsetDelete;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = OffsetDeleteRequest;

    fn serve(mut req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let access = ctx.access();
        if !crate::authz::group(access, Operation::Delete, &req.group_id) {
            let resp = kafka_protocol::messages::OffsetDeleteResponse::default()
                .with_error_code(crate::authz::GROUP_AUTHORIZATION_FAILED);
            return group_refused(&ctx, resp);
        }
        let refused = authorize::offset_delete(access, &mut req);
        ctx.later(|ctx| async move {
            let mut resp = offset_delete(req, ctx.broker.as_ref(), &ctx.groups).await;
            resp.topics.extend(refused);
            resp
        })
    }
}

/// What this area's APIs need of the connection's principal (the helpers are
/// [`crate::authz`]'s).
mod authorize {
    use kafka_protocol::messages::*;

    use security::acl::Operation;

    use crate::authz::{
        Access, GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED, group, split,
    };

    /// FindCoordinator v4+: the keys not allowed (DESCRIBE on the group), answered refused.
    pub fn find_coordinator(
        a: Access<'_>,
        req: &mut FindCoordinatorRequest,
    ) -> Vec<find_coordinator_response::Coordinator> {
        if !a.checks() {
            return Vec::new();
        }
        // DESCRIBE on each group (key type 0) or transactional id (1).
        let txn = req.key_type == 1;
        let code = match txn {
            true => crate::authz::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            false => GROUP_AUTHORIZATION_FAILED,
        };
        let allowed = |k: &kafka_protocol::protocol::StrBytes| match txn {
            true => a.transactional_id(Operation::Describe, k),
            false => a.group(Operation::Describe, k),
        };
        split(&mut req.coordinator_keys, allowed)
            .into_iter()
            .map(|k| {
                find_coordinator_response::Coordinator::default()
                    .with_key(k)
                    .with_node_id(BrokerId(-1))
                    .with_port(-1)
                    .with_error_code(code)
            })
            .collect()
    }

    /// OffsetCommit: the group's READ (refused whole by the caller) and each topic's READ.
    pub fn offset_commit(
        a: Access<'_>,
        req: &mut OffsetCommitRequest,
    ) -> Vec<offset_commit_response::OffsetCommitResponseTopic> {
        use offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
        let refuse_all = !group(a, Operation::Consume, &req.group_id);
        if !a.checks() {
            return Vec::new();
        }
        let code = |whole: bool| {
            if whole { GROUP_AUTHORIZATION_FAILED } else { TOPIC_AUTHORIZATION_FAILED }
        };
        split(&mut req.topics, |t| !refuse_all && a.topic(Operation::Consume, &t.name))
            .into_iter()
            .map(|t| {
                OffsetCommitResponseTopic::default().with_name(t.name).with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code(refuse_all))
                        })
                        .collect(),
                )
            })
            .collect()
    }

    /// OffsetDelete: DELETE on the group (refused whole by the caller), READ on each topic.
    pub fn offset_delete(
        a: Access<'_>,
        req: &mut OffsetDeleteRequest,
    ) -> Vec<offset_delete_response::OffsetDeleteResponseTopic> {
        use offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
        if !a.checks() {
            return Vec::new();
        }
        split(&mut req.topics, |t| a.topic(Operation::Consume, &t.name))
            .into_iter()
            .map(|t| {
                OffsetDeleteResponseTopic::default().with_name(t.name).with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            OffsetDeleteResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(TOPIC_AUTHORIZATION_FAILED)
                        })
                        .collect(),
                )
            })
            .collect()
    }

    /// DescribeGroups: each group's DESCRIBE.
    pub fn describe_groups(
        a: Access<'_>,
        req: &mut DescribeGroupsRequest,
    ) -> Vec<describe_groups_response::DescribedGroup> {
        if !a.checks() {
            return Vec::new();
        }
        split(&mut req.groups, |g| a.group(Operation::Describe, g))
            .into_iter()
            .map(|g| {
                describe_groups_response::DescribedGroup::default()
                    .with_group_id(g)
                    .with_error_code(GROUP_AUTHORIZATION_FAILED)
            })
            .collect()
    }

    /// DeleteGroups: each group's DELETE.
    pub fn delete_groups(
        a: Access<'_>,
        req: &mut DeleteGroupsRequest,
    ) -> Vec<delete_groups_response::DeletableGroupResult> {
        if !a.checks() {
            return Vec::new();
        }
        split(&mut req.groups_names, |g| a.group(Operation::Delete, g))
            .into_iter()
            .map(|g| {
                delete_groups_response::DeletableGroupResult::default()
                    .with_group_id(g)
                    .with_error_code(GROUP_AUTHORIZATION_FAILED)
            })
            .collect()
    }

    /// ListGroups: every group with DESCRIBE on the cluster, else those the principal may
    /// describe.
    pub fn list_groups(a: Access<'_>, resp: &mut ListGroupsResponse) {
        if a.checks() && !a.cluster(Operation::Describe) {
            resp.groups.retain(|g| a.group(Operation::Describe, &g.group_id));
        }
    }

    /// OffsetFetch: the groups' DESCRIBE (v8+: per group; before: the one group, refused whole
    /// by the caller) and the topics' DESCRIBE: a topic not allowed is answered refused, and a
    /// fetch of every topic leaves it out.
    pub fn offset_fetch(a: Access<'_>, resp: &mut OffsetFetchResponse) {
        if !a.checks() {
            return;
        }
        for t in &mut resp.topics {
            if !a.topic(Operation::Describe, &t.name) {
                for p in &mut t.partitions {
                    (p.committed_offset, p.metadata, p.error_code) =
                        (-1, None, TOPIC_AUTHORIZATION_FAILED);
                }
            }
        }
        for g in &mut resp.groups {
            if !a.group(Operation::Describe, &g.group_id) {
                g.topics.clear();
                g.error_code = GROUP_AUTHORIZATION_FAILED;
                continue;
            }
            for t in &mut g.topics {
                if !a.topic(Operation::Describe, &t.name) {
                    for p in &mut t.partitions {
                        (p.committed_offset, p.metadata, p.error_code) =
                            (-1, None, TOPIC_AUTHORIZATION_FAILED);
                    }
                }
            }
        }
    }
}
