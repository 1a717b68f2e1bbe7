//! Kafka consumer groups for the simulation's groups plan: each member behaves as a classic
//! Kafka consumer would — it finds its group's coordinator through any live broker, joins
//! (the leader assigns the topic's partitions round-robin), reads its partitions' committed
//! offsets, then heartbeats and commits ever larger offsets until told to rejoin — through the
//! group APIs as the Kafka front end runs them ([`kafka::coordination`]), against the writers'
//! coordinators, while the nemesis crashes, pauses and starts writers, so coordinators change
//! under the groups all the time.
//!
//! Sessions are long (no member's can end in a run) and no member leaves, so once every member
//! has synced at one generation the group must stay at it: the history records every JoinGroup
//! and SyncGroup answered, every commit acknowledged, and every read of committed offsets (the
//! members' own, and an observer's), for [`crate::history::check`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    GroupId, HeartbeatRequest, JoinGroupRequest, OffsetCommitRequest, OffsetFetchRequest,
    SyncGroupRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::kafka::TOPIC;
use crate::scenario::SharedRef;

/// How long a heartbeat, commit or offset fetch waits for its answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a JoinGroup or SyncGroup waits (a rebalance waits for every member).
const JOIN_TIMEOUT: Duration = Duration::from_secs(20);
/// No member's session ends in a run: a rebalance after the group is stable is a violation.
const SESSION_MS: i32 = 600_000;
const REBALANCE_MS: i32 = 60_000;
/// How often a member heartbeats (every third time, it commits instead).
const HEARTBEAT: Duration = Duration::from_millis(500);

const REBALANCE_IN_PROGRESS: i16 = 27;
const ILLEGAL_GENERATION: i16 = 22;
const UNKNOWN_MEMBER_ID: i16 = 25;
const MEMBER_ID_REQUIRED: i16 = 79;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// Group `g`'s id.
pub(crate) fn group_id(g: u64) -> String {
    format!("sim-group-{g}")
}

/// The broker and coordinator state of the writer coordinating `group`, as a live broker
/// finds it; `None` if it is not live (or no broker answered).
async fn coordinator(
    shared: &SharedRef,
    group: &str,
) -> Option<(Arc<brokers::LogBroker>, Arc<kafka::groups::Groups>)> {
    let any = crate::kafka::broker(shared, None)?;
    let found =
        tokio::time::timeout(REQUEST_TIMEOUT, kafka::Cluster::coordinator(any.as_ref(), group));
    let node = found.await.ok()?.ok()??.node_id;
    let s = shared.lock();
    s.brokers
        .iter()
        .flatten()
        .find(|b| b.node == node)
        .map(|b| (b.broker.clone(), b.groups.clone()))
}

/// Virtual milliseconds since the run started.
fn now_ms(shared: &SharedRef) -> u64 {
    shared.lock().trace.now_ms()
}

/// A member's place in its group.
struct Membership {
    id: String,
    generation: i32,
    owned: Vec<i32>,
    /// Where it consumes from: `None` until its partitions' committed offsets are read (a
    /// failed read is retried; the member stays in the group meanwhile, as a client does).
    positions: Option<BTreeMap<i32, i64>>,
}

/// Member `m` of group `g`, over a topic of `partitions` partitions, until aborted.
pub(crate) async fn member(g: u64, m: u64, partitions: u32, shared: SharedRef) {
    let group = group_id(g);
    let mut id = String::new();
    let mut joined: Option<Membership> = None;
    let mut beats = 0u64;
    loop {
        tokio::time::sleep(HEARTBEAT).await;
        let Some((b, groups)) = coordinator(&shared, &group).await else { continue };
        let Some(mut me) = joined.take() else {
            joined = join(&shared, g, m, &mut id, b.as_ref(), &groups, partitions).await;
            continue;
        };
        if me.positions.is_none() {
            me.positions = fetch(&shared, g, &me.owned, b.as_ref(), &groups).await;
        }
        beats += 1;
        let code = if beats.is_multiple_of(3) && me.positions.is_some() {
            commit(&shared, g, &mut me, b.as_ref(), &groups).await
        } else {
            heartbeat(&group, &me, b.as_ref(), &groups).await
        };
        if let Some(c) = code.filter(|c| *c != 0) {
            let node = kafka::Cluster::node_id(b.as_ref());
            shared.lock().trace.record(("member told", g, m, c, node));
        }
        match code {
            Some(REBALANCE_IN_PROGRESS) | Some(ILLEGAL_GENERATION) => {}
            Some(UNKNOWN_MEMBER_ID) => id.clear(),
            // Answered, or another coordinator now (found again next time): still a member.
            _ => joined = Some(me),
        }
    }
}

/// Joins and syncs (the leader assigning): the member's place, or `None` when either step
/// failed (it tries again).
async fn join(
    shared: &SharedRef,
    g: u64,
    m: u64,
    id: &mut String,
    b: &brokers::LogBroker,
    groups: &kafka::groups::Groups,
    partitions: u32,
) -> Option<Membership> {
    let group = group_id(g);
    let mut answer = None;
    for _ in 0..2 {
        let req = JoinGroupRequest::default()
            .with_group_id(GroupId(s(&group)))
            .with_session_timeout_ms(SESSION_MS)
            .with_rebalance_timeout_ms(REBALANCE_MS)
            .with_member_id(s(id))
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![
                JoinGroupRequestProtocol::default()
                    .with_name(s("sim"))
                    .with_metadata(Bytes::from(m.to_string())),
            ]);
        let client = format!("m{g}-{m}");
        let call = kafka::coordination::join_group(req, 9, &client, "/sim", b, groups);
        let r = tokio::time::timeout(JOIN_TIMEOUT, call).await.ok()?;
        if r.error_code != 0 {
            let node = kafka::Cluster::node_id(b);
            shared.lock().trace.record(("join told", g, m, r.error_code, node, id.clone()));
        }
        match r.error_code {
            MEMBER_ID_REQUIRED => *id = r.member_id.to_string(),
            0 => {
                answer = Some(r);
                break;
            }
            UNKNOWN_MEMBER_ID => {
                id.clear();
                return None;
            }
            _ => return None,
        }
    }
    let r = answer?;
    *id = r.member_id.to_string();
    shared.lock().history.memberships.push((g, m, r.generation_id, false));
    shared.lock().trace.record(("joined", g, m, r.generation_id));
    // The leader assigns partition p to the (p mod n)-th member by id.
    let assignments = if r.leader == r.member_id {
        let mut ids: Vec<String> = r.members.iter().map(|x| x.member_id.to_string()).collect();
        ids.sort();
        let n = ids.len().max(1);
        ids.iter()
            .enumerate()
            .map(|(i, mid)| {
                let mine: Vec<String> = (0..partitions as usize)
                    .filter(|p| p % n == i)
                    .map(|p| p.to_string())
                    .collect();
                SyncGroupRequestAssignment::default()
                    .with_member_id(s(mid))
                    .with_assignment(Bytes::from(mine.join(",")))
            })
            .collect()
    } else {
        Vec::new()
    };
    let sync = SyncGroupRequest::default()
        .with_group_id(GroupId(s(&group)))
        .with_generation_id(r.generation_id)
        .with_member_id(s(id))
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("sim")))
        .with_assignments(assignments);
    let call = kafka::coordination::sync_group(sync, b, groups);
    let synced = tokio::time::timeout(JOIN_TIMEOUT, call).await.ok()?;
    if synced.error_code != 0 {
        shared.lock().trace.record(("sync told", g, m, synced.error_code));
    }
    if synced.error_code == UNKNOWN_MEMBER_ID {
        id.clear();
    }
    if synced.error_code != 0 {
        return None;
    }
    shared.lock().history.memberships.push((g, m, r.generation_id, true));
    shared.lock().trace.record(("synced", g, m, r.generation_id));
    let owned: Vec<i32> = String::from_utf8_lossy(&synced.assignment)
        .split(',')
        .filter_map(|p| p.parse().ok())
        .collect();
    Some(Membership { id: id.clone(), generation: r.generation_id, owned, positions: None })
}

/// The committed offsets of `owned` (0 where none), recorded as reads.
async fn fetch(
    shared: &SharedRef,
    g: u64,
    owned: &[i32],
    b: &brokers::LogBroker,
    groups: &kafka::groups::Groups,
) -> Option<BTreeMap<i32, i64>> {
    let req = OffsetFetchRequest::default().with_group_id(GroupId(s(&group_id(g)))).with_topics(
        Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(s(TOPIC)))
                .with_partition_indexes(owned.to_vec()),
        ]),
    );
    let began = now_ms(shared);
    let call = kafka::coordination::offset_fetch(req, 7, b, groups);
    let r = tokio::time::timeout(REQUEST_TIMEOUT, call).await.ok()?;
    if r.error_code != 0 {
        return None;
    }
    let mut out = BTreeMap::new();
    let mut s = shared.lock();
    for p in r.topics.iter().flat_map(|t| t.partitions.iter()) {
        if p.error_code != 0 {
            return None;
        }
        s.history.offset_reads.push((g, p.partition_index, p.committed_offset, began));
        out.insert(p.partition_index, p.committed_offset.max(0));
    }
    Some(out)
}

/// Moves each owned partition on a little and commits: the first error code, or `None`
/// unanswered. Each partition's acknowledged commit is recorded.
async fn commit(
    shared: &SharedRef,
    g: u64,
    me: &mut Membership,
    b: &brokers::LogBroker,
    groups: &kafka::groups::Groups,
) -> Option<i16> {
    let positions = me.positions.get_or_insert_default();
    {
        let mut s = shared.lock();
        for p in &me.owned {
            let step = i64::try_from(s.rng.below(5) + 1).unwrap_or(1);
            *positions.entry(*p).or_insert(0) += step;
        }
    }
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(&group_id(g))))
        .with_generation_id_or_member_epoch(me.generation)
        .with_member_id(s(&me.id))
        .with_topics(vec![
            OffsetCommitRequestTopic::default().with_name(TopicName(s(TOPIC))).with_partitions(
                positions
                    .iter()
                    .map(|(p, o)| {
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(*p)
                            .with_committed_offset(*o)
                    })
                    .collect(),
            ),
        ]);
    let call = kafka::coordination::offset_commit(req, 8, b, groups);
    let r = tokio::time::timeout(REQUEST_TIMEOUT, call).await.ok()?;
    let at = now_ms(shared);
    let mut first = 0;
    let mut s = shared.lock();
    for p in r.topics.iter().flat_map(|t| t.partitions.iter()) {
        match (p.error_code, positions.get(&p.partition_index)) {
            (0, Some(o)) => s.history.commits.push((g, p.partition_index, *o, at)),
            (0, None) => {}
            (e, _) if first == 0 => first = e,
            _ => {}
        }
    }
    Some(first)
}

async fn heartbeat(
    group: &str,
    me: &Membership,
    b: &brokers::LogBroker,
    groups: &kafka::groups::Groups,
) -> Option<i16> {
    let req = HeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id(me.generation)
        .with_member_id(s(&me.id));
    let call = kafka::coordination::heartbeat(req, b, groups);
    Some(tokio::time::timeout(REQUEST_TIMEOUT, call).await.ok()?.error_code)
}

/// The plan's group members and the offsets' observer, started (aborted when the run ends).
pub(crate) fn spawn(
    plan: &crate::scenario::Plan,
    shared: &SharedRef,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    let partitions = u32::try_from(plan.logs).unwrap_or(1);
    for g in 0..plan.groups {
        shared.lock().history.group_sizes.insert(g, plan.members);
        for m in 0..plan.members {
            let shared = shared.clone();
            tasks.push(tokio::spawn(async move { member(g, m, partitions, shared).await }));
        }
    }
    if plan.groups > 0 {
        let (shared, groups) = (shared.clone(), plan.groups);
        tasks.push(tokio::spawn(async move { observer(groups, shared).await }));
    }
    tasks
}

/// Reads every group's committed offsets now and then, through any live broker's store (a
/// linearizable read), recording each as a read: an offset gone backwards shows.
pub(crate) async fn observer(groups: u64, shared: SharedRef) {
    loop {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let Some(b) = crate::kafka::broker(&shared, None) else { continue };
        for g in 0..groups {
            let began = now_ms(&shared);
            let name = group_id(g);
            let read = kafka::GroupOffsets::committed_offsets(b.as_ref(), &name, None);
            let Ok(Ok(found)) = tokio::time::timeout(REQUEST_TIMEOUT, read).await else {
                continue;
            };
            let mut s = shared.lock();
            for o in found.iter().filter(|o| o.error == 0) {
                s.history.offset_reads.push((g, o.partition, o.offset, began));
            }
        }
    }
}
