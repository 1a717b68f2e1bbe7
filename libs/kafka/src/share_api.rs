//! The share group APIs (KIP-932) over [`crate::share`]: ShareGroupHeartbeat and
//! ShareGroupDescribe at the group's coordinator; ShareFetch and ShareAcknowledge at the
//! partitions' owner.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition, AlterShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic;
use kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::share_acknowledge_response::{
    PartitionData as AckPartitionData, ShareAcknowledgeTopicResponse,
};
use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, PartitionData, ShareFetchableTopicResponse,
};
use kafka_protocol::messages::share_group_describe_response::{
    self as describe_resp, DescribedGroup,
};
use kafka_protocol::messages::share_group_heartbeat_response::{
    Assignment as WireAssignment, TopicPartitions,
};
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse, DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
};
use kafka_protocol::messages::{
    ApiKey, ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest,
    ShareFetchResponse, ShareGroupDescribeRequest, ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse, TopicName,
};
use security::acl::Operation;
use uuid::Uuid;

use crate::api::{Admission, Ctx, Handler};
use crate::authz::{GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED};
use crate::group_api::{check_coordinator, clock_now, s};
use crate::groups::Groups;
use crate::groups::errors::*;
use crate::session::Session;
use crate::share::group::{Heartbeat, Topics};
use crate::share::{SessionStep, Settings, Shares};
use crate::{Broker, Refused, code};

/// The longest a ShareFetch waits for records (as a Fetch).
const MAX_WAIT: Duration = Duration::from_secs(30);

/// A share group's session timeout and heartbeat interval: its configs, else Kafka's.
async fn timeouts(broker: &dyn Broker, group: &str) -> Result<(Duration, Duration), Refused> {
    let c = broker.group_config(group).await?;
    let ms = |name: &str, d: u64| {
        Duration::from_millis(c.get(name).and_then(|v| v.parse().ok()).unwrap_or(d))
    };
    Ok((ms("share.session.timeout.ms", 45_000), ms("share.heartbeat.interval.ms", 5_000)))
}

/// The share-partition settings of `group`.
async fn settings(broker: &dyn Broker, group: &str) -> Result<Settings, Refused> {
    Ok(Settings::of(&broker.group_config(group).await?))
}

pub(crate) async fn heartbeat(
    req: ShareGroupHeartbeatRequest,
    client_id: &str,
    client_host: &str,
    broker: &dyn Broker,
    groups: &Groups,
    access: crate::authz::Access<'_>,
) -> ShareGroupHeartbeatResponse {
    let fail = |code: i16, message: Option<String>| {
        ShareGroupHeartbeatResponse::default()
            .with_error_code(code)
            .with_error_message(message.map(s))
            .with_member_epoch(-1)
    };
    let group = req.group_id.0.to_string();
    if let Some(e) = check_coordinator(broker, groups, &group).await {
        return fail(e, None);
    }
    if groups.is_consumer_group(&group) || groups.is_classic_group(&group) {
        return fail(GROUP_ID_NOT_FOUND, Some(format!("Group {group} is not a share group.")));
    }
    let (session_timeout, interval) = match timeouts(broker, &group).await {
        Ok(t) => t,
        Err(e) => return fail(COORDINATOR_NOT_AVAILABLE, Some(e.message)),
    };
    let hb = Heartbeat {
        group: group.clone(),
        member_id: req.member_id.to_string(),
        member_epoch: req.member_epoch,
        rack_id: req.rack_id.map(|r| r.to_string()),
        topics: req
            .subscribed_topic_names
            .map(|ts| ts.into_iter().map(|t| t.0.to_string()).collect()),
        client_id: client_id.to_owned(),
        client_host: client_host.to_owned(),
        session_timeout,
    };
    let wanted = groups.shares().groups.lock().wanted(&hb);
    let view: Topics = if hb.member_epoch < 0 || wanted.is_empty() {
        Topics::new()
    } else {
        let names: Vec<String> = wanted.into_iter().collect();
        match broker.topics(Some(&names), None, None).await {
            Ok(found) => found
                .into_iter()
                .filter(|t| t.error == code::NONE && access.topic(Operation::Describe, &t.name))
                .map(|t| (t.name, (t.id, u32::try_from(t.partitions.len()).unwrap_or(0))))
                .collect(),
            Err(e) => return fail(COORDINATOR_NOT_AVAILABLE, Some(e.message)),
        }
    };
    let beat = groups.shares().groups.lock().heartbeat(&hb, &view, clock_now());
    // A share group is stored once (that it is one): listed, and deleted with its
    // share-partitions, whatever coordinator comes next.
    if beat.error == code::NONE
        && hb.member_epoch == 0
        && let Err(e) = groups.ensure_share_stored(&group, broker).await
    {
        return fail(e, None);
    }
    ShareGroupHeartbeatResponse::default()
        .with_error_code(beat.error)
        .with_error_message(beat.message.map(s))
        .with_member_id((beat.error == code::NONE).then(|| s(hb.member_id.clone())))
        .with_member_epoch(beat.member_epoch)
        .with_heartbeat_interval_ms(i32::try_from(interval.as_millis()).unwrap_or(i32::MAX))
        .with_assignment(beat.assignment.map(|a| {
            WireAssignment::default().with_topic_partitions(
                a.iter()
                    .map(|(id, ps)| {
                        TopicPartitions::default()
                            .with_topic_id(*id)
                            .with_partitions(ps.iter().copied().collect())
                    })
                    .collect(),
            )
        }))
}

pub(crate) async fn describe(
    req: ShareGroupDescribeRequest,
    broker: &dyn Broker,
    groups: &Groups,
) -> ShareGroupDescribeResponse {
    let mut out = Vec::with_capacity(req.group_ids.len());
    for g in req.group_ids {
        let name = g.0.to_string();
        let mut d = DescribedGroup::default().with_group_id(g).with_authorized_operations(i32::MIN);
        if let Some(e) = check_coordinator(broker, groups, &name).await {
            d.error_code = e;
            out.push(d);
            continue;
        }
        let Some(x) = groups.shares().groups.lock().describe(&name) else {
            d.error_code = GROUP_ID_NOT_FOUND;
            d.error_message = Some(s(format!("Group {name} not found.")));
            out.push(d);
            continue;
        };
        d.group_state = s(x.state());
        d.group_epoch = x.epoch;
        d.assignment_epoch = x.epoch;
        d.assignor_name = s("simple");
        let mut members = Vec::with_capacity(x.members.len());
        for m in &x.members {
            let mut tps = Vec::with_capacity(m.assignment.len());
            for (id, ps) in &m.assignment {
                let topic = groups.shares().topic_name(*id, broker).await.unwrap_or_default();
                tps.push(
                    describe_resp::TopicPartitions::default()
                        .with_topic_id(*id)
                        .with_topic_name(TopicName(s(topic)))
                        .with_partitions(ps.iter().copied().collect()),
                );
            }
            members.push(
                describe_resp::Member::default()
                    .with_member_id(s(m.member_id.clone()))
                    .with_rack_id(m.rack_id.clone().map(s))
                    .with_member_epoch(m.member_epoch)
                    .with_client_id(s(m.client_id.clone()))
                    .with_client_host(s(m.client_host.clone()))
                    .with_subscribed_topic_names(
                        m.topics.iter().map(|t| TopicName(s(t.clone()))).collect(),
                    )
                    .with_assignment(
                        describe_resp::Assignment::default().with_topic_partitions(tps),
                    ),
            );
        }
        d.members = members;
        out.push(d);
    }
    ShareGroupDescribeResponse::default().with_groups(out)
}

/// A partition's acknowledgement batches as the share-partition takes them.
type AckBatches = Vec<(i64, i64, Vec<i8>)>;

/// A partition's answer being built: acknowledgement outcome, fetch outcome, what it lent.
#[derive(Default)]
struct Answered {
    ack: Option<Refused>,
    acked: bool,
    fetch: Option<Refused>,
    lent: crate::share::Lent,
}

/// Applies each partition's acknowledgements, in request order; the outcome by partition.
async fn acknowledge_all(
    shares: &Shares,
    broker: &dyn Broker,
    group: &str,
    member: &str,
    acks: Vec<((Uuid, i32), AckBatches)>,
    settings: &Settings,
    may_read: &(dyn Fn(&str) -> bool + Send + Sync),
) -> BTreeMap<(Uuid, i32), Option<Refused>> {
    let mut out = BTreeMap::new();
    for ((id, partition), batches) in acks {
        let outcome = match shares.topic_name(id, broker).await {
            None => Some(Refused::new(code::UNKNOWN_TOPIC_ID, "unknown topic id")),
            Some(t) if !may_read(&t) => {
                Some(Refused::new(TOPIC_AUTHORIZATION_FAILED, "read the topic"))
            }
            Some(topic) => shares
                .acknowledge(broker, group, member, &topic, partition, &batches, settings)
                .await
                .err(),
        };
        out.insert((id, partition), outcome);
    }
    out
}

pub(crate) async fn share_fetch(
    req: ShareFetchRequest,
    broker: &dyn Broker,
    shares: &Shares,
    may_read: &(dyn Fn(&str) -> bool + Send + Sync),
    connection: u64,
) -> ShareFetchResponse {
    let fail = |code: i16, message: String| {
        ShareFetchResponse::default().with_error_code(code).with_error_message(Some(s(message)))
    };
    let (Some(group), Some(member)) = (req.group_id.as_ref(), req.member_id.as_ref()) else {
        return fail(code::INVALID_REQUEST, "a share fetch names its group and member".into());
    };
    let (group, member) = (group.0.to_string(), member.to_string());
    if member.is_empty() {
        return fail(code::INVALID_REQUEST, "a share fetch names its member".into());
    }
    let mut acks: Vec<((Uuid, i32), AckBatches)> = Vec::new();
    let mut add = Vec::new();
    for t in &req.topics {
        for p in &t.partitions {
            add.push((t.topic_id, p.partition_index));
            if !p.acknowledgement_batches.is_empty() {
                let batches = p
                    .acknowledgement_batches
                    .iter()
                    .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()))
                    .collect();
                acks.push(((t.topic_id, p.partition_index), batches));
            }
        }
    }
    if req.share_session_epoch == 0 && !acks.is_empty() {
        return fail(
            code::INVALID_REQUEST,
            "acknowledgements in a request opening a share session".into(),
        );
    }
    if !req.is_renew_ack && acks.iter().any(|(_, b)| crate::share::renews(b)) {
        return fail(code::INVALID_REQUEST, "a renew acknowledgement without IsRenewAck".into());
    }
    let forget: Vec<(Uuid, i32)> = req
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p)))
        .collect();
    let settings = match settings(broker, &group).await {
        Ok(s) => s,
        Err(e) => return fail(code::UNKNOWN_SERVER_ERROR, e.message),
    };
    let (session, step) = match shares.session(
        &group,
        &member,
        req.share_session_epoch,
        &add,
        &forget,
        clock_now(),
        connection,
    ) {
        Ok(x) => x,
        Err((code, message)) => return fail(code, message),
    };
    let lock_ms = i32::try_from(settings.lock.as_millis()).unwrap_or(i32::MAX);
    let mut answered: BTreeMap<(Uuid, i32), Answered> = BTreeMap::new();
    let acked = acknowledge_all(shares, broker, &group, &member, acks, &settings, may_read).await;
    for (k, outcome) in acked {
        let a = answered.entry(k).or_default();
        a.acked = true;
        a.ack = outcome;
    }
    if step == SessionStep::Close {
        release_all(shares, broker, &group, &member, &session).await;
    } else if !req.is_renew_ack {
        let member: Arc<str> = Arc::from(member.as_str());
        lend(&req, broker, shares, &group, &member, &session, &settings, may_read, &mut answered)
            .await;
    }
    let mut topics: BTreeMap<Uuid, Vec<PartitionData>> = BTreeMap::new();
    for ((id, partition), a) in answered {
        if !a.acked && a.fetch.is_none() && a.lent.acquired.is_empty() {
            continue;
        }
        let mut d = PartitionData::default().with_partition_index(partition);
        if let Some(r) = a.ack {
            d.acknowledge_error_code = r.code;
            d.acknowledge_error_message = Some(s(r.message));
        }
        if let Some(r) = a.fetch {
            d.error_code = r.code;
            d.error_message = Some(s(r.message));
            if let Some(l) = r.leader {
                d.current_leader.leader_id = l;
            }
        }
        if !a.lent.acquired.is_empty() {
            let mut out = BytesMut::with_capacity(a.lent.batches.iter().map(|b| b.len()).sum());
            for b in &a.lent.batches {
                b.put_wire(&mut out);
            }
            d.records = Some(out.freeze());
            d.acquired_records = a
                .lent
                .acquired
                .iter()
                .map(|&(first, last, count)| {
                    AcquiredRecords::default()
                        .with_first_offset(first)
                        .with_last_offset(last)
                        .with_delivery_count(count)
                })
                .collect();
        } else {
            d.records = Some(Bytes::new());
        }
        topics.entry(id).or_default().push(d);
    }
    ShareFetchResponse::default().with_acquisition_lock_timeout_ms(lock_ms).with_responses(
        topics
            .into_iter()
            .map(|(id, ps)| {
                ShareFetchableTopicResponse::default().with_topic_id(id).with_partitions(ps)
            })
            .collect(),
    )
}

/// Releases what `member` holds on each partition of its closed session.
async fn release_all(
    shares: &Shares,
    broker: &dyn Broker,
    group: &str,
    member: &str,
    session: &BTreeSet<(Uuid, i32)>,
) {
    for (id, partition) in session {
        if let Some(topic) = shares.topic_name(*id, broker).await {
            shares.release(group, member, &topic, *partition).await;
        }
    }
}

/// Acquires records of the session's partitions for `member`, up to the request's record and
/// byte limits, waiting up to its wait for some when none is there at first.
#[allow(clippy::too_many_arguments)]
async fn lend(
    req: &ShareFetchRequest,
    broker: &dyn Broker,
    shares: &Shares,
    group: &str,
    member: &Arc<str>,
    session: &BTreeSet<(Uuid, i32)>,
    settings: &Settings,
    may_read: &(dyn Fn(&str) -> bool + Send + Sync),
    answered: &mut BTreeMap<(Uuid, i32), Answered>,
) {
    let max_records = u64::try_from(req.max_records).ok().filter(|m| *m > 0).unwrap_or(500);
    let max_bytes =
        usize::try_from(req.max_bytes).unwrap_or(0).clamp(1, crate::fetch::FETCH_MAX_BYTES);
    let wait = Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0)).min(MAX_WAIT);
    let deadline = tokio::time::Instant::now() + wait;
    let mut named = Vec::with_capacity(session.len());
    for &(id, partition) in session {
        match shares.topic_name(id, broker).await {
            Some(t) if may_read(&t) => named.push((id, partition, t)),
            Some(_) => {
                answered.entry((id, partition)).or_default().fetch =
                    Some(Refused::new(TOPIC_AUTHORIZATION_FAILED, "read the topic"));
            }
            None => {
                answered.entry((id, partition)).or_default().fetch =
                    Some(Refused::new(code::UNKNOWN_TOPIC_ID, "unknown topic id"));
            }
        }
    }
    loop {
        let (mut records_left, mut bytes_left) = (max_records, max_bytes);
        let mut waits = Vec::new();
        for (id, partition, topic) in &named {
            if records_left == 0 || bytes_left == 0 {
                break;
            }
            let got = shares
                .acquire(
                    broker,
                    group,
                    member,
                    topic,
                    *partition,
                    records_left,
                    bytes_left,
                    settings,
                )
                .await;
            let a = answered.entry((*id, *partition)).or_default();
            match got {
                Ok(lent) => {
                    let n: u64 = lent
                        .acquired
                        .iter()
                        .map(|(f, l, _)| u64::try_from(l - f + 1).unwrap_or(0))
                        .sum();
                    records_left = records_left.saturating_sub(n);
                    bytes_left =
                        bytes_left.saturating_sub(lent.batches.iter().map(|b| b.len()).sum());
                    if n == 0 {
                        waits.push((topic.clone(), *partition, lent.end));
                    }
                    a.lent = lent;
                    a.fetch = None;
                }
                Err(r) => a.fetch = Some(r),
            }
        }
        let now = tokio::time::Instant::now();
        if records_left < max_records || now >= deadline || waits.is_empty() {
            return;
        }
        // Nothing to lend: wait for a record past a window's end, or for a lock to expire (a
        // second at most between looks), then look again.
        let step = (deadline - now).min(Duration::from_secs(1));
        broker.wait_for(waits, step).await;
    }
}

pub(crate) async fn share_acknowledge(
    req: ShareAcknowledgeRequest,
    broker: &dyn Broker,
    shares: &Shares,
    may_read: &(dyn Fn(&str) -> bool + Send + Sync),
    connection: u64,
) -> ShareAcknowledgeResponse {
    let fail = |code: i16, message: String| {
        ShareAcknowledgeResponse::default()
            .with_error_code(code)
            .with_error_message(Some(s(message)))
    };
    let (Some(group), Some(member)) = (req.group_id.as_ref(), req.member_id.as_ref()) else {
        return fail(code::INVALID_REQUEST, "an acknowledgement names its group and member".into());
    };
    let (group, member) = (group.0.to_string(), member.to_string());
    if req.share_session_epoch == 0 {
        return fail(code::INVALID_REQUEST, "ShareAcknowledge cannot open a share session".into());
    }
    let mut acks: Vec<((Uuid, i32), AckBatches)> = Vec::new();
    for t in &req.topics {
        for p in &t.partitions {
            let batches = p
                .acknowledgement_batches
                .iter()
                .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()))
                .collect();
            acks.push(((t.topic_id, p.partition_index), batches));
        }
    }
    if !req.is_renew_ack && acks.iter().any(|(_, b)| crate::share::renews(b)) {
        return fail(code::INVALID_REQUEST, "a renew acknowledgement without IsRenewAck".into());
    }
    let settings = match settings(broker, &group).await {
        Ok(s) => s,
        Err(e) => return fail(code::UNKNOWN_SERVER_ERROR, e.message),
    };
    let (session, step) = match shares.session(
        &group,
        &member,
        req.share_session_epoch,
        &[],
        &[],
        clock_now(),
        connection,
    ) {
        Ok(x) => x,
        Err((code, message)) => return fail(code, message),
    };
    let lock_ms = i32::try_from(settings.lock.as_millis()).unwrap_or(i32::MAX);
    let acked = acknowledge_all(shares, broker, &group, &member, acks, &settings, may_read).await;
    if step == SessionStep::Close {
        release_all(shares, broker, &group, &member, &session).await;
    }
    let mut topics: BTreeMap<Uuid, Vec<AckPartitionData>> = BTreeMap::new();
    for ((id, partition), outcome) in acked {
        let mut d = AckPartitionData::default().with_partition_index(partition);
        if let Some(r) = outcome {
            d.error_code = r.code;
            d.error_message = Some(s(r.message));
            if let Some(l) = r.leader {
                d.current_leader.leader_id = l;
            }
        }
        topics.entry(id).or_default().push(d);
    }
    ShareAcknowledgeResponse::default().with_acquisition_lock_timeout_ms(lock_ms).with_responses(
        topics
            .into_iter()
            .map(|(id, ps)| {
                ShareAcknowledgeTopicResponse::default().with_topic_id(id).with_partitions(ps)
            })
            .collect(),
    )
}

/// ShareGroupHeartbeat: READ on the group, then DESCRIBE on each topic it names.
#[derive(Debug)]
pub struct ShareGroupHeartbeat;

impl Handler for ShareGroupHeartbeat {
    const KEY: ApiKey = ApiKey::ShareGroupHeartbeat;
    const VERSIONS: (i16, i16) = (1, 1);
    type Request = ShareGroupHeartbeatRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let access = ctx.access();
        let topics_ok = req
            .subscribed_topic_names
            .iter()
            .flatten()
            .all(|t| access.topic(Operation::Describe, &t.0));
        let refusal = if !crate::authz::group(access, Operation::Consume, &req.group_id) {
            Some((GROUP_AUTHORIZATION_FAILED, "read the group"))
        } else if !topics_ok {
            Some((TOPIC_AUTHORIZATION_FAILED, "describe every subscribed topic"))
        } else {
            None
        };
        if let Some((code, what)) = refusal {
            let resp = ShareGroupHeartbeatResponse::default()
                .with_error_code(code)
                .with_member_epoch(-1)
                .with_error_message(crate::authz::refused_message(access, what));
            return ctx.now(&resp);
        }
        ctx.later(|ctx| async move {
            let (broker, groups) = (ctx.broker.as_ref(), &ctx.groups);
            heartbeat(req, &ctx.client_id, &ctx.client_host, broker, groups, ctx.access()).await
        })
    }
}

/// ShareGroupDescribe: DESCRIBE on each group.
#[derive(Debug)]
pub struct ShareGroupDescribe;

impl Handler for ShareGroupDescribe {
    const KEY: ApiKey = ApiKey::ShareGroupDescribe;
    const VERSIONS: (i16, i16) = (1, 1);
    type Request = ShareGroupDescribeRequest;

    fn serve(mut req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let access = ctx.access();
        let (allowed, refused): (Vec<_>, Vec<_>) = std::mem::take(&mut req.group_ids)
            .into_iter()
            .partition(|g| access.group(Operation::Describe, g));
        req.group_ids = allowed;
        let operations = req.include_authorized_operations;
        ctx.later(move |ctx| async move {
            let mut resp = describe(req, ctx.broker.as_ref(), &ctx.groups).await;
            if operations {
                for g in resp.groups.iter_mut().filter(|g| g.error_code == 0) {
                    let group = security::acl::ResourceType::Group;
                    g.authorized_operations =
                        ctx.access().authorized_operations(group, &g.group_id);
                }
            }
            resp.groups.extend(refused.into_iter().map(|g| {
                DescribedGroup::default()
                    .with_group_id(g)
                    .with_error_code(GROUP_AUTHORIZATION_FAILED)
                    .with_authorized_operations(i32::MIN)
            }));
            resp
        })
    }
}

/// ShareFetch: READ on the group (refused whole), READ on each topic (per partition).
#[derive(Debug)]
pub struct ShareFetch;

impl Handler for ShareFetch {
    const KEY: ApiKey = ApiKey::ShareFetch;
    const VERSIONS: (i16, i16) = (1, 2);
    type Request = ShareFetchRequest;

    fn serve(req: Self::Request, ctx: Ctx, session: &mut Session) -> Admission<'_> {
        let connection = session.connection();
        let access = ctx.access();
        let group_ok = req.group_id.as_ref().is_none_or(|g| access.group(Operation::Consume, g));
        if !group_ok {
            let resp = ShareFetchResponse::default()
                .with_error_code(GROUP_AUTHORIZATION_FAILED)
                .with_error_message(crate::authz::refused_message(access, "read the group"));
            return ctx.now(&resp);
        }
        ctx.later(|ctx| async move {
            let may_read = |t: &str| ctx.access().topic(Operation::Consume, t);
            share_fetch(req, ctx.broker.as_ref(), ctx.groups.shares(), &may_read, connection).await
        })
    }
}

/// ShareAcknowledge: READ on the group (refused whole), READ on each topic (per partition).
#[derive(Debug)]
pub struct ShareAcknowledge;

impl Handler for ShareAcknowledge {
    const KEY: ApiKey = ApiKey::ShareAcknowledge;
    const VERSIONS: (i16, i16) = (1, 2);
    type Request = ShareAcknowledgeRequest;

    fn serve(req: Self::Request, ctx: Ctx, session: &mut Session) -> Admission<'_> {
        let connection = session.connection();
        let access = ctx.access();
        let group_ok = req.group_id.as_ref().is_none_or(|g| access.group(Operation::Consume, g));
        if !group_ok {
            let resp = ShareAcknowledgeResponse::default()
                .with_error_code(GROUP_AUTHORIZATION_FAILED)
                .with_error_message(crate::authz::refused_message(access, "read the group"));
            return ctx.now(&resp);
        }
        ctx.later(|ctx| async move {
            let may_read = |t: &str| ctx.access().topic(Operation::Consume, t);
            share_acknowledge(req, ctx.broker.as_ref(), ctx.groups.shares(), &may_read, connection)
                .await
        })
    }
}

/// The ids of `topics` (nil for one not found).
async fn topic_ids(broker: &dyn Broker, topics: &[String]) -> BTreeMap<String, Uuid> {
    match broker.topics(Some(topics), None, None).await {
        Ok(found) => {
            found.into_iter().filter(|t| t.error == code::NONE).map(|t| (t.name, t.id)).collect()
        }
        Err(_) => BTreeMap::new(),
    }
}

pub(crate) async fn describe_offsets(
    req: DescribeShareGroupOffsetsRequest,
    broker: &dyn Broker,
    groups: &Groups,
    may_describe: &(dyn Fn(&str) -> bool + Send + Sync),
) -> DescribeShareGroupOffsetsResponse {
    let mut out = Vec::with_capacity(req.groups.len());
    for g in req.groups {
        let name = g.group_id.0.to_string();
        let mut d =
            DescribeShareGroupOffsetsResponseGroup::default().with_group_id(g.group_id.clone());
        if let Some(e) = check_coordinator(broker, groups, &name).await {
            d.error_code = e;
            out.push(d);
            continue;
        }
        let held = match broker.share_offsets(&name).await {
            Ok(h) => h,
            Err(e) => {
                d.error_code = e.code;
                d.error_message = Some(s(e.message));
                out.push(d);
                continue;
            }
        };
        // Asked: the partitions named (those the group has none on answer -1), or all it has.
        let asked: Vec<(String, Vec<i32>)> = match &g.topics {
            Some(ts) => {
                ts.iter().map(|t| (t.topic_name.0.to_string(), t.partitions.clone())).collect()
            }
            None => {
                let mut by: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                for o in &held {
                    by.entry(o.topic.clone()).or_default().push(o.partition);
                }
                by.into_iter().collect()
            }
        };
        let names: Vec<String> = asked.iter().map(|(t, _)| t.clone()).collect();
        let ids = topic_ids(broker, &names).await;
        for (topic, partitions) in asked {
            if !may_describe(&topic) {
                continue;
            }
            let parts = partitions
                .into_iter()
                .map(|p| {
                    let o = held.iter().find(|o| o.topic == topic && o.partition == p);
                    DescribeShareGroupOffsetsResponsePartition::default()
                        .with_partition_index(p)
                        .with_start_offset(o.map_or(-1, |o| o.start))
                        .with_leader_epoch(-1)
                        .with_lag(o.map_or(-1, |o| o.lag))
                })
                .collect();
            d.topics.push(
                DescribeShareGroupOffsetsResponseTopic::default()
                    .with_topic_id(ids.get(&topic).copied().unwrap_or_default())
                    .with_topic_name(TopicName(s(topic)))
                    .with_partitions(parts),
            );
        }
        out.push(d);
    }
    DescribeShareGroupOffsetsResponse::default().with_groups(out)
}

/// NON_EMPTY_GROUP while `group` has members (Kafka alters and deletes a share group's
/// offsets only when it is empty), else the tenure to write under.
async fn empty_group(
    broker: &dyn Broker,
    groups: &Groups,
    group: &str,
) -> Result<crate::Tenure, i16> {
    if let Some(e) = check_coordinator(broker, groups, group).await {
        return Err(e);
    }
    if groups.is_consumer_group(group) || groups.is_classic_group(group) {
        return Err(GROUP_ID_NOT_FOUND);
    }
    if groups.shares().groups.lock().has_members(group) {
        return Err(NON_EMPTY_GROUP);
    }
    groups.tenure(group).ok_or(NOT_COORDINATOR)
}

pub(crate) async fn alter_offsets(
    req: AlterShareGroupOffsetsRequest,
    broker: &dyn Broker,
    groups: &Groups,
    may_read: &(dyn Fn(&str) -> bool + Send + Sync),
) -> AlterShareGroupOffsetsResponse {
    let group = req.group_id.0.to_string();
    let fail = |code: i16, message: Option<String>| {
        AlterShareGroupOffsetsResponse::default()
            .with_error_code(code)
            .with_error_message(message.map(s))
    };
    let tenure = match empty_group(broker, groups, &group).await {
        Ok(t) => t,
        Err(e) => return fail(e, None),
    };
    groups.shares().groups.lock().resume(&group);
    if let Err(e) = groups.ensure_share_stored(&group, broker).await {
        return fail(e, None);
    }
    let names: Vec<String> = req.topics.iter().map(|t| t.topic_name.0.to_string()).collect();
    let ids = topic_ids(broker, &names).await;
    let mut items = Vec::new();
    for t in &req.topics {
        if may_read(&t.topic_name) {
            for p in &t.partitions {
                items.push((t.topic_name.0.to_string(), p.partition_index, p.start_offset));
            }
        }
    }
    let outcomes = match broker.alter_share_offsets(&group, tenure, &items).await {
        Ok(o) => o,
        Err(e) => return fail(e.code, Some(e.message)),
    };
    groups.shares().forget_group(&group);
    let mut done = items.iter().zip(outcomes);
    let mut responses = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let allowed = may_read(&t.topic_name);
        let parts = t
            .partitions
            .iter()
            .map(|p| {
                let mut r = AlterShareGroupOffsetsResponsePartition::default()
                    .with_partition_index(p.partition_index);
                if !allowed {
                    r.error_code = TOPIC_AUTHORIZATION_FAILED;
                } else if let Some((_, Err(e))) = done.next() {
                    r.error_code = e.code;
                    r.error_message = Some(s(e.message));
                }
                r
            })
            .collect();
        responses.push(
            AlterShareGroupOffsetsResponseTopic::default()
                .with_topic_id(ids.get(t.topic_name.as_str()).copied().unwrap_or_default())
                .with_topic_name(t.topic_name)
                .with_partitions(parts),
        );
    }
    AlterShareGroupOffsetsResponse::default().with_responses(responses)
}

pub(crate) async fn delete_offsets(
    req: DeleteShareGroupOffsetsRequest,
    broker: &dyn Broker,
    groups: &Groups,
    may_read: &(dyn Fn(&str) -> bool + Send + Sync),
) -> DeleteShareGroupOffsetsResponse {
    let group = req.group_id.0.to_string();
    let fail = |code: i16, message: Option<String>| {
        DeleteShareGroupOffsetsResponse::default()
            .with_error_code(code)
            .with_error_message(message.map(s))
    };
    let tenure = match empty_group(broker, groups, &group).await {
        Ok(t) => t,
        Err(e) => return fail(e, None),
    };
    let names: Vec<String> = req.topics.iter().map(|t| t.topic_name.0.to_string()).collect();
    let allowed: Vec<String> = names.iter().filter(|t| may_read(t)).cloned().collect();
    if let Err(e) = broker.delete_share_offsets(&group, tenure, &allowed).await {
        return fail(e.code, Some(e.message));
    }
    groups.shares().forget_group(&group);
    let ids = topic_ids(broker, &names).await;
    let responses = names
        .into_iter()
        .map(|t| {
            let mut r = DeleteShareGroupOffsetsResponseTopic::default()
                .with_topic_id(ids.get(&t).copied().unwrap_or_default());
            if !allowed.contains(&t) {
                r.error_code = TOPIC_AUTHORIZATION_FAILED;
            } else if !ids.contains_key(&t) {
                r.error_code = code::UNKNOWN_TOPIC_OR_PARTITION;
            }
            r.with_topic_name(TopicName(s(t)))
        })
        .collect();
    DeleteShareGroupOffsetsResponse::default().with_responses(responses)
}

/// DescribeShareGroupOffsets: DESCRIBE on each group (refused ones answered so), DESCRIBE on
/// each topic (others left out).
#[derive(Debug)]
pub struct DescribeShareGroupOffsets;

impl Handler for DescribeShareGroupOffsets {
    const KEY: ApiKey = ApiKey::DescribeShareGroupOffsets;
    const VERSIONS: (i16, i16) = (0, 1);
    type Request = DescribeShareGroupOffsetsRequest;

    fn serve(mut req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let access = ctx.access();
        let (allowed, refused): (Vec<_>, Vec<_>) = std::mem::take(&mut req.groups)
            .into_iter()
            .partition(|g| access.group(Operation::Describe, &g.group_id));
        req.groups = allowed;
        ctx.later(move |ctx| async move {
            let may = |t: &str| ctx.access().topic(Operation::Describe, t);
            let mut resp = describe_offsets(req, ctx.broker.as_ref(), &ctx.groups, &may).await;
            resp.groups.extend(refused.into_iter().map(|g| {
                DescribeShareGroupOffsetsResponseGroup::default()
                    .with_group_id(g.group_id)
                    .with_error_code(GROUP_AUTHORIZATION_FAILED)
            }));
            resp
        })
    }
}

/// AlterShareGroupOffsets: READ on the group, READ on each topic.
#[derive(Debug)]
pub struct AlterShareGroupOffsets;

impl Handler for AlterShareGroupOffsets {
    const KEY: ApiKey = ApiKey::AlterShareGroupOffsets;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = AlterShareGroupOffsetsRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        if !ctx.access().group(Operation::Consume, &req.group_id) {
            let resp = AlterShareGroupOffsetsResponse::default()
                .with_error_code(GROUP_AUTHORIZATION_FAILED);
            return ctx.now(&resp);
        }
        ctx.later(|ctx| async move {
            let may = |t: &str| ctx.access().topic(Operation::Consume, t);
            alter_offsets(req, ctx.broker.as_ref(), &ctx.groups, &may).await
        })
    }
}

/// DeleteShareGroupOffsets: DELETE on the group, READ on each topic.
#[derive(Debug)]
pub struct DeleteShareGroupOffsets;

impl Handler for DeleteShareGroupOffsets {
    const KEY: ApiKey = ApiKey::DeleteShareGroupOffsets;
    const VERSIONS: (i16, i16) = (0, 0);
    type Request = DeleteShareGroupOffsetsRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        if !ctx.access().group(Operation::Delete, &req.group_id) {
            let resp = DeleteShareGroupOffsetsResponse::default()
                .with_error_code(GROUP_AUTHORIZATION_FAILED);
            return ctx.now(&resp);
        }
        ctx.later(|ctx| async move {
            let may = |t: &str| ctx.access().topic(Operation::Consume, t);
            delete_offsets(req, ctx.broker.as_ref(), &ctx.groups, &may).await
        })
    }
}
