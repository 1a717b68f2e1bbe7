//! The KIP-848 APIs over [`crate::groups::consumer`]: ConsumerGroupHeartbeat and
//! ConsumerGroupDescribe. The coordinator looks up the subscribed topics through the
//! [`Broker`] for each heartbeat (their ids and partition counts), so a new topic or partition
//! reaches the assignment at the next heartbeat.

use std::collections::BTreeSet;
use std::time::Duration;

use kafka_protocol::messages::consumer_group_describe_response::{
    self as describe_resp, DescribedGroup,
};
use kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment as WireAssignment, TopicPartitions,
};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, TopicName,
};

use crate::group_api::{check_coordinator, clock_now, s};
use crate::groups::Groups;
use crate::groups::consumer::{Assignment, Heartbeat, Timeouts, TopicView, Wanted};
use crate::groups::errors::*;
use crate::{Broker, code};
use kafka_protocol::messages::ApiKey;
use security::acl::Operation;

use crate::api::{Admission, Ctx, Handler};
use crate::session::Session;

fn wire(a: &Assignment) -> WireAssignment {
    WireAssignment::default().with_topic_partitions(
        a.iter()
            .map(|(id, ps)| {
                TopicPartitions::default()
                    .with_topic_id(*id)
                    .with_partitions(ps.iter().copied().collect())
            })
            .collect(),
    )
}

pub(crate) async fn heartbeat(
    req: ConsumerGroupHeartbeatRequest,
    client_id: &str,
    client_host: &str,
    broker: &dyn Broker,
    groups: &Groups,
    access: crate::authz::Access<'_>,
) -> ConsumerGroupHeartbeatResponse {
    let fail = |code: i16, message: Option<String>| {
        ConsumerGroupHeartbeatResponse::default()
            .with_error_code(code)
            .with_error_message(message.map(s))
    };
    let group = req.group_id.0.to_string();
    if let Some(e) = check_coordinator(broker, groups, &group).await {
        return fail(e, None);
    }
    let mut hb = Heartbeat {
        group,
        member_id: req.member_id.to_string(),
        member_epoch: req.member_epoch,
        instance_id: req.instance_id.map(|i| i.to_string()),
        rack_id: req.rack_id.map(|r| r.to_string()),
        rebalance_timeout: u64::try_from(req.rebalance_timeout_ms).ok().map(Duration::from_millis),
        topic_names: req
            .subscribed_topic_names
            .map(|ts| ts.into_iter().map(|t| t.0.to_string()).collect()),
        topic_regex: req.subscribed_topic_regex.map(|r| r.to_string()),
        assignor: req.server_assignor.map(|a| a.to_string()),
        owned: req.topic_partitions.map(|tps| {
            let mut owned = Assignment::new();
            for t in tps {
                owned.entry(t.topic_id).or_default().extend(t.partitions);
            }
            owned
        }),
        client_id: client_id.to_owned(),
        client_host: client_host.to_owned(),
        timeouts: Default::default(),
    };
    if let Err((code, message)) = hb.check() {
        return fail(code, Some(message));
    }
    // The group's own timeouts: followed in memory, no read per heartbeat.
    match broker.group_config(&hb.group).await {
        Ok(c) => {
            hb.timeouts = Timeouts {
                session: c.consumer_session_timeout(),
                heartbeat: c.consumer_heartbeat_interval(),
            }
        }
        Err(e) => return fail(COORDINATOR_NOT_AVAILABLE, Some(e.message)),
    }
    let view = if hb.member_epoch < 0 {
        TopicView::default()
    } else {
        let (names, complete) = match groups.wanted(&hb) {
            Wanted::All => (None, true),
            Wanted::Names(n) => (Some(n.into_iter().collect::<Vec<_>>()), false),
        };
        match broker.topics(names.as_deref(), None, None).await {
            Ok(found) => TopicView {
                topics: found
                    .into_iter()
                    // Only topics the member may describe (a regex's matches, as Kafka
                    // resolves them for the member; named ones were checked before).
                    .filter(|t| {
                        t.error == code::NONE
                            && access.topic(security::acl::Operation::Describe, &t.name)
                    })
                    .map(|t| (t.name, (t.id, u32::try_from(t.partitions.len()).unwrap_or(0))))
                    .collect(),
                looked: names.map(|n| n.into_iter().collect()).unwrap_or_else(BTreeSet::new),
                complete,
            },
            Err(e) => return fail(COORDINATOR_NOT_AVAILABLE, Some(e.message)),
        }
    };
    let group = hb.group.clone();
    let beat = groups.consumer_heartbeat(hb, &view, clock_now());
    // What it changed is stored before it is answered: a new coordinator resumes from it.
    if beat.error == code::NONE
        && let Err(e) = groups.store_consumer(&group, broker).await
    {
        return fail(e, None);
    }
    ConsumerGroupHeartbeatResponse::default()
        .with_error_code(beat.error)
        .with_error_message(beat.message.map(s))
        .with_member_id((!beat.member_id.is_empty()).then(|| s(beat.member_id)))
        .with_member_epoch(beat.member_epoch)
        .with_heartbeat_interval_ms(
            i32::try_from(beat.heartbeat_interval.as_millis()).unwrap_or(i32::MAX),
        )
        .with_assignment(beat.assignment.as_ref().map(wire))
}

pub(crate) async fn describe(
    req: ConsumerGroupDescribeRequest,
    broker: &dyn Broker,
    groups: &Groups,
) -> ConsumerGroupDescribeResponse {
    let mut out = Vec::with_capacity(req.group_ids.len());
    for g in req.group_ids {
        let name = g.0.to_string();
        let mut d = DescribedGroup::default().with_group_id(g).with_authorized_operations(i32::MIN);
        if let Some(e) = check_coordinator(broker, groups, &name).await {
            d.error_code = e;
            out.push(d);
            continue;
        }
        let Some(x) = groups.consumer_describe(&name) else {
            // A classic group, one with only committed offsets, or none: not a consumer group
            // (clients then describe it with DescribeGroups, as with Kafka).
            d.error_code = GROUP_ID_NOT_FOUND;
            d.error_message = Some(s(format!("Group {name} is not a consumer group.")));
            out.push(d);
            continue;
        };
        let named = |a: &Assignment| {
            describe_resp::Assignment::default().with_topic_partitions(
                a.iter()
                    .map(|(id, ps)| {
                        describe_resp::TopicPartitions::default()
                            .with_topic_id(*id)
                            .with_topic_name(TopicName(s(x
                                .topic_names
                                .get(id)
                                .cloned()
                                .unwrap_or_default())))
                            .with_partitions(ps.iter().copied().collect())
                    })
                    .collect(),
            )
        };
        d.group_state = s(x.state.name());
        d.group_epoch = x.epoch;
        d.assignment_epoch = x.assignment_epoch;
        d.assignor_name = s(x.assignor.clone());
        d.members = x
            .members
            .iter()
            .map(|m| {
                describe_resp::Member::default()
                    .with_member_id(s(m.member_id.clone()))
                    .with_instance_id(m.instance_id.clone().map(s))
                    .with_rack_id(m.rack_id.clone().map(s))
                    .with_member_epoch(m.member_epoch)
                    .with_client_id(s(m.client_id.clone()))
                    .with_client_host(s(m.client_host.clone()))
                    .with_subscribed_topic_names(
                        m.topic_names.iter().map(|t| TopicName(s(t.clone()))).collect(),
                    )
                    .with_subscribed_topic_regex(m.topic_regex.clone().map(s))
                    .with_assignment(named(&m.assignment))
                    .with_target_assignment(named(&m.target))
                    // v1: a member of the consumer protocol.
                    .with_member_type(1)
            })
            .collect();
        out.push(d);
    }
    ConsumerGroupDescribeResponse::default().with_groups(out)
}

/// ConsumerGroupHeartbeat: CONSUME on the group, then DESCRIBE on each topic it names
/// (refused whole, as Kafka does).
#[derive(Debug)]
pub struct ConsumerGroupHeartbeat;

impl Handler for ConsumerGroupHeartbeat {
    const KEY: ApiKey = ApiKey::ConsumerGroupHeartbeat;
    const VERSIONS: (i16, i16) = (0, 1);
    type Request = ConsumerGroupHeartbeatRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let access = ctx.access();
        let refusal = if !crate::authz::group(access, Operation::Consume, &req.group_id) {
            Some((crate::authz::GROUP_AUTHORIZATION_FAILED, "consume in the group"))
        } else if !authorize::consumer_subscription(access, &req) {
            Some((crate::authz::TOPIC_AUTHORIZATION_FAILED, "describe every subscribed topic"))
        } else {
            None
        };
        if let Some((code, what)) = refusal {
            let resp = ConsumerGroupHeartbeatResponse::default()
                .with_error_code(code)
                .with_error_message(crate::authz::refused_message(access, what));
            return ctx.now(&resp);
        }
        ctx.later(|ctx| async move {
            let (broker, groups) = (ctx.broker.as_ref(), &ctx.groups);
            heartbeat(req, &ctx.client_id, &ctx.client_host, broker, groups, ctx.access()).await
        })
    }
}

/// ConsumerGroupDescribe: DESCRIBE on each group; topics the principal may not DESCRIBE are
/// left out of what is shown.
#[derive(Debug)]
pub struct ConsumerGroupDescribe;

impl Handler for ConsumerGroupDescribe {
    const KEY: ApiKey = ApiKey::ConsumerGroupDescribe;
    const VERSIONS: (i16, i16) = (0, 1);
    type Request = ConsumerGroupDescribeRequest;

    fn serve(mut req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let refused = authorize::consumer_group_describe(ctx.access(), &mut req);
        let operations = req.include_authorized_operations;
        ctx.later(move |ctx| async move {
            let mut resp = describe(req, ctx.broker.as_ref(), &ctx.groups).await;
            authorize::consumer_group_described(ctx.access(), &mut resp);
            if operations {
                for g in resp.groups.iter_mut().filter(|g| g.error_code == 0) {
                    let group = security::acl::ResourceType::Group;
                    g.authorized_operations =
                        ctx.access().authorized_operations(group, &g.group_id);
                }
            }
            resp.groups.extend(refused);
            resp
        })
    }
}

/// What this area's APIs need of the connection's principal (the helpers are
/// [`crate::authz`]'s).
mod authorize {
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    use security::acl::Operation;

    use crate::authz::{Access, GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED, split};

    /// ConsumerGroupHeartbeat: DESCRIBE on every topic the member names (a regex's matches are
    /// filtered where they are resolved).
    pub fn consumer_subscription(a: Access<'_>, req: &ConsumerGroupHeartbeatRequest) -> bool {
        !a.checks()
            || req.subscribed_topic_names.iter().flatten().all(|t| a.topic(Operation::Describe, t))
    }

    /// ConsumerGroupDescribe, answered: a group whose members subscribe to, hold or are to hold a
    /// topic the caller may not describe is answered TOPIC_AUTHORIZATION_FAILED with no members,
    /// as Kafka answers, so no topic's name or layout reaches a principal that may not see it.
    pub fn consumer_group_described(a: Access<'_>, resp: &mut ConsumerGroupDescribeResponse) {
        if !a.checks() {
            return;
        }
        for g in &mut resp.groups {
            let hidden = g.members.iter().any(|m| {
                let held = [&m.assignment, &m.target_assignment]
                    .into_iter()
                    .flat_map(|x| x.topic_partitions.iter().map(|t| &t.topic_name));
                m.subscribed_topic_names
                    .iter()
                    .chain(held)
                    .any(|t| !a.topic(Operation::Describe, t))
            });
            if hidden {
                g.error_code = TOPIC_AUTHORIZATION_FAILED;
                g.error_message = Some(StrBytes::from_static_str(
                    "The group has described topic(s) that the client is not authorized to describe.",
                ));
                g.members.clear();
                g.assignor_name = StrBytes::default();
            }
        }
    }

    pub fn consumer_group_describe(
        a: Access<'_>,
        req: &mut ConsumerGroupDescribeRequest,
    ) -> Vec<consumer_group_describe_response::DescribedGroup> {
        if !a.checks() {
            return Vec::new();
        }
        split(&mut req.group_ids, |g| a.group(Operation::Describe, g))
            .into_iter()
            .map(|g| {
                consumer_group_describe_response::DescribedGroup::default()
                    .with_group_id(g)
                    .with_error_code(GROUP_AUTHORIZATION_FAILED)
            })
            .collect()
    }
}
