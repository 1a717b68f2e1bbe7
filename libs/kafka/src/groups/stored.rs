//! A classic group's membership as its coordinator stores it (ARCHITECTURE §11 "Groups"), as
//! Kafka keeps a group's metadata record in `__consumer_offsets`: generation, protocol, leader,
//! members with their subscriptions, assignments and timeouts. Stored when a rebalance
//! completes (before the members learn their assignments), when the group empties, and when a
//! static member comes back under a new member id; a new coordinator resumes the group from it:
//! its members keep heartbeating and committing at their generation, with no rebalance.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message;

use super::{Group, Member, State};

/// The largest state stored: a group whose membership encodes larger (a thousand members with
/// large subscriptions) is kept in memory only, as before, with a warning.
pub const MAX_STORED_BYTES: usize = 1 << 20;

#[derive(Clone, PartialEq, prost::Message)]
struct StoredGroup {
    #[prost(int32, tag = "1")]
    generation: i32,
    #[prost(string, tag = "2")]
    protocol_type: String,
    #[prost(string, tag = "3")]
    protocol: String,
    #[prost(string, tag = "4")]
    leader: String,
    /// Empty for an empty group.
    #[prost(message, repeated, tag = "5")]
    members: Vec<StoredMember>,
    /// When the group last became empty (ms since the Unix epoch; 0 while it has members).
    #[prost(int64, tag = "6")]
    emptied_at_ms: i64,
    /// A KIP-848 consumer group's state (then the classic fields are empty).
    #[prost(message, optional, tag = "7")]
    consumer: Option<super::consumer::StoredConsumer>,
    /// A share group (KIP-932): its membership is not stored, only that it is one.
    #[prost(message, optional, tag = "8")]
    share: Option<StoredShare>,
}

/// That a stored group is a share group.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct StoredShare {}

/// A share group's stored state.
pub(super) fn encode_share() -> Bytes {
    Bytes::from(StoredGroup { share: Some(StoredShare {}), ..Default::default() }.encode_to_vec())
}

/// A consumer group's state as stored; `None` past [`MAX_STORED_BYTES`].
pub(super) fn encode_consumer(
    c: super::consumer::StoredConsumer,
    emptied_at_ms: i64,
) -> Option<Bytes> {
    let bytes =
        StoredGroup { consumer: Some(c), emptied_at_ms, ..Default::default() }.encode_to_vec();
    (bytes.len() <= MAX_STORED_BYTES).then(|| Bytes::from(bytes))
}

/// Whether a stored group has no members, and since when (ms since the Unix epoch): what
/// its offsets' expiry counts from. `None` for a group with members, or a state that does not
/// decode.
pub(super) fn quiet_since(bytes: &[u8]) -> Option<i64> {
    let s = StoredGroup::decode(bytes).ok()?;
    let members = match &s.consumer {
        Some(c) => c.member_count(),
        None => s.members.len(),
    };
    (members == 0).then_some(s.emptied_at_ms)
}

/// What a stored state holds: a classic group, or a KIP-848 consumer group.
pub(super) enum Stored {
    Classic(Box<Group>),
    /// A share group.
    Share,
    /// With when it last became empty (0: it has members).
    Consumer(super::consumer::StoredConsumer, i64),
}

/// [`decode`], telling the two kinds apart.
pub(super) fn decode_any(bytes: &[u8], now: Instant) -> Option<Stored> {
    let s = StoredGroup::decode(bytes).ok()?;
    if s.share.is_some() {
        return Some(Stored::Share);
    }
    match s.consumer {
        Some(c) => Some(Stored::Consumer(c, s.emptied_at_ms)),
        None => decode(bytes, now).map(|g| Stored::Classic(Box::new(g))),
    }
}

#[derive(Clone, PartialEq, prost::Message)]
struct StoredMember {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(string, optional, tag = "2")]
    instance_id: Option<String>,
    #[prost(string, tag = "3")]
    client_id: String,
    #[prost(string, tag = "4")]
    client_host: String,
    #[prost(uint64, tag = "5")]
    session_timeout_ms: u64,
    #[prost(uint64, tag = "6")]
    rebalance_timeout_ms: u64,
    #[prost(message, repeated, tag = "7")]
    protocols: Vec<StoredProtocol>,
    #[prost(bytes = "bytes", tag = "8")]
    assignment: Bytes,
    /// Join order: the leader is the earliest still present.
    #[prost(uint64, tag = "9")]
    order: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct StoredProtocol {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(bytes = "bytes", tag = "2")]
    metadata: Bytes,
}

/// The group as stored: Stable with its members' assignments (`given` replaces them: the
/// assignments a leader's SyncGroup brings, stored before they are answered), or Empty.
/// `None` if it encodes larger than [`MAX_STORED_BYTES`].
pub(super) fn encode(g: &Group, given: Option<&HashMap<String, Bytes>>) -> Option<Bytes> {
    let mut members: Vec<StoredMember> = g
        .members
        .iter()
        .map(|(id, m)| StoredMember {
            id: id.clone(),
            instance_id: m.instance_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            session_timeout_ms: m.session_timeout.as_millis() as u64,
            rebalance_timeout_ms: m.rebalance_timeout.as_millis() as u64,
            protocols: m
                .protocols
                .iter()
                .map(|(name, metadata)| StoredProtocol {
                    name: name.clone(),
                    metadata: metadata.clone(),
                })
                .collect(),
            assignment: match given {
                Some(a) => a.get(id).cloned().unwrap_or_default(),
                None => m.assignment.clone(),
            },
            order: m.order,
        })
        .collect();
    members.sort_by_key(|m| m.order);
    let stored = StoredGroup {
        generation: g.generation,
        protocol_type: g.protocol_type.clone().unwrap_or_default(),
        protocol: g.protocol.clone().unwrap_or_default(),
        leader: g.leader.clone().unwrap_or_default(),
        members,
        emptied_at_ms: g.emptied_at_ms,
        consumer: None,
        share: None,
    };
    let bytes = stored.encode_to_vec();
    (bytes.len() <= MAX_STORED_BYTES).then(|| Bytes::from(bytes))
}

/// The group a stored state describes, its members heard from `now` (each has its session
/// timeout to reach the new coordinator). `None` for a state that does not decode.
pub(super) fn decode(bytes: &[u8], now: Instant) -> Option<Group> {
    let s = StoredGroup::decode(bytes).ok()?;
    let mut g = Group::new();
    g.generation = s.generation;
    g.protocol_type = Some(s.protocol_type).filter(|t| !t.is_empty());
    g.protocol = Some(s.protocol).filter(|p| !p.is_empty());
    g.leader = Some(s.leader).filter(|l| !l.is_empty());
    g.emptied_at_ms = s.emptied_at_ms;
    for m in s.members {
        if let Some(i) = &m.instance_id {
            g.instances.insert(i.clone(), m.id.clone());
        }
        g.next_order = g.next_order.max(m.order + 1);
        g.members.insert(
            m.id,
            Member {
                instance_id: m.instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                session_timeout: Duration::from_millis(m.session_timeout_ms),
                rebalance_timeout: Duration::from_millis(m.rebalance_timeout_ms),
                protocols: m.protocols.into_iter().map(|p| (p.name, p.metadata)).collect(),
                assignment: m.assignment,
                last_heard: now,
                order: m.order,
                joining: None,
                syncing: None,
            },
        );
    }
    g.state = if g.members.is_empty() { State::Empty } else { State::Stable };
    if g.leader.as_ref().is_some_and(|l| !g.members.contains_key(l)) {
        g.leader = None;
    }
    Some(g)
}
