//! Classic consumer groups (ARCHITECTURE §11, "Groups"): the coordinator's in-memory state of
//! each group it coordinates, with Kafka's rules (`GroupCoordinator`, `GroupMetadata`). A
//! group is Empty, PreparingRebalance (members rejoin; JoinGroup answers wait), Completing-
//! Rebalance (joined; waiting for the leader's SyncGroup) or Stable. A rebalance completes when
//! every member has rejoined or its deadline passes (the members that did not are removed); a
//! group formed from empty waits the initial delay for more members first, as Kafka's
//! `group.initial.rebalance.delay.ms` does. Members that miss heartbeats for their session
//! timeout are removed and the group rebalances. Membership is durable ([`stored`]): a
//! coordinator takes a group under a tenure ([`Groups::hold`]) and resumes what the previous
//! one stored, so a coordinator change alone rebalances nothing; every write it makes for the
//! group (membership, offsets) is refused once another coordinator has taken it.
//!
//! Time is passed in (`now`), so the rules are tested without sleeping; [`Groups::tick`] is
//! called periodically by the server.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::{GroupOffsets, Tenure, code};

pub mod consumer;
mod stored;

pub use stored::MAX_STORED_BYTES;

/// Kafka's group error codes.
pub mod errors {
    pub const COORDINATOR_NOT_AVAILABLE: i16 =
        kafka_protocol::ResponseError::CoordinatorNotAvailable.code();
    pub const NOT_COORDINATOR: i16 = kafka_protocol::ResponseError::NotCoordinator.code();
    pub const OFFSET_METADATA_TOO_LARGE: i16 =
        kafka_protocol::ResponseError::OffsetMetadataTooLarge.code();
    pub const ILLEGAL_GENERATION: i16 = kafka_protocol::ResponseError::IllegalGeneration.code();
    pub const INCONSISTENT_GROUP_PROTOCOL: i16 =
        kafka_protocol::ResponseError::InconsistentGroupProtocol.code();
    pub const INVALID_GROUP_ID: i16 = kafka_protocol::ResponseError::InvalidGroupId.code();
    pub const UNKNOWN_MEMBER_ID: i16 = kafka_protocol::ResponseError::UnknownMemberId.code();
    pub const INVALID_SESSION_TIMEOUT: i16 =
        kafka_protocol::ResponseError::InvalidSessionTimeout.code();
    pub const REBALANCE_IN_PROGRESS: i16 =
        kafka_protocol::ResponseError::RebalanceInProgress.code();
    pub const GROUP_ID_NOT_FOUND: i16 = kafka_protocol::ResponseError::GroupIdNotFound.code();
    pub const NON_EMPTY_GROUP: i16 = kafka_protocol::ResponseError::NonEmptyGroup.code();
    pub const MEMBER_ID_REQUIRED: i16 = kafka_protocol::ResponseError::MemberIdRequired.code();
    pub const GROUP_MAX_SIZE_REACHED: i16 =
        kafka_protocol::ResponseError::GroupMaxSizeReached.code();
    pub const FENCED_INSTANCE_ID: i16 = kafka_protocol::ResponseError::FencedInstanceId.code();
}
use errors::*;

/// Which partitions an OffsetCommit may commit, by its group, member and generation (epoch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MayCommit {
    /// All of them (NONE), or none, refused with that code.
    All(i16),
    /// Only these (topic, partition): a KIP-848 member committing at an epoch older than its
    /// own may commit what it has held since that epoch (KIP-1251).
    Only(std::collections::BTreeSet<(String, i32)>),
}

impl MayCommit {
    /// The refusal of the whole commit, if it is refused whole.
    pub fn refusal(&self) -> Option<i16> {
        match self {
            MayCommit::All(code::NONE) | MayCommit::Only(_) => None,
            MayCommit::All(e) => Some(*e),
        }
    }

    /// The code for committing this partition: NONE, or why not.
    pub fn code(&self, topic: &str, partition: i32) -> i16 {
        match self {
            MayCommit::All(e) => *e,
            MayCommit::Only(held) if held.contains(&(topic.to_owned(), partition)) => code::NONE,
            MayCommit::Only(_) => consumer::errors::STALE_MEMBER_EPOCH,
        }
    }
}

/// Kafka's `group.min.session.timeout.ms` and `group.max.session.timeout.ms`.
pub const MIN_SESSION_TIMEOUT: Duration = Duration::from_secs(6);
pub const MAX_SESSION_TIMEOUT: Duration = Duration::from_secs(1800);
/// Members one group may have (Kafka's `group.max.size` is unbounded; memory here is not).
pub const MAX_MEMBERS: usize = 1000;
/// Groups one coordinator keeps; a join for a new group beyond is COORDINATOR_NOT_AVAILABLE.
pub const MAX_GROUPS: usize = 10_000;

/// The name of the cursor that holds `group`'s committed offset on each partition's log
/// (ARCHITECTURE §11: committed offsets are cursors): `kafka.` then the group id, bytes outside
/// `A-Z a-z 0-9 . -` written `_xx` (hex), so distinct groups never share a cursor. `None` for a
/// group id too long for a cursor name (128 characters): INVALID_GROUP_ID.
pub fn cursor_name(group: &str) -> Option<String> {
    let mut out = String::with_capacity(6 + group.len());
    out.push_str("kafka.");
    for b in group.bytes() {
        if out.len() > 128 {
            return None;
        }
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-' => out.push(b as char),
            _ => out.push_str(&format!("_{b:02x}")),
        }
    }
    (!group.is_empty() && out.len() <= 128).then_some(out)
}

/// The group whose committed offsets a cursor of this name holds ([`cursor_name`]'s inverse);
/// `None` for any other cursor.
pub fn group_of_cursor(name: &str) -> Option<String> {
    let enc = name.strip_prefix("kafka.")?.as_bytes();
    let mut out = Vec::with_capacity(enc.len());
    let mut i = 0;
    while i < enc.len() {
        match enc[i] {
            b'_' => {
                let hex = std::str::from_utf8(enc.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    let group = String::from_utf8(out).ok()?;
    // Only the one spelling cursor_name makes.
    (cursor_name(&group).as_deref() == Some(name)).then_some(group)
}

/// A group's state, as DescribeGroups and ListGroups name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum State {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Empty => "Empty",
            State::PreparingRebalance => "PreparingRebalance",
            State::CompletingRebalance => "CompletingRebalance",
            State::Stable => "Stable",
        }
    }
}

/// A JoinGroup, as the coordinator needs it.
#[derive(Clone, Debug)]
pub struct Join {
    pub group: String,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: a member without an id is given one and asked to join again with it
    /// (MEMBER_ID_REQUIRED, KIP-394).
    pub require_known_member: bool,
}

/// A JoinGroup's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Joined {
    pub error: i16,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// For the leader: every member's id, instance id and metadata for the chosen protocol.
    pub members: Vec<(String, Option<String>, Bytes)>,
}

impl Joined {
    fn error(error: i16, member_id: &str) -> Joined {
        Joined { error, generation: -1, member_id: member_id.to_owned(), ..Default::default() }
    }
}

/// A SyncGroup's answer: error, protocol type and name, the member's assignment.
pub type Synced = (i16, Option<String>, Option<String>, Bytes);

/// A member as DescribeGroups shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescribedMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// A group as DescribeGroups shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Described {
    pub state: State,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<DescribedMember>,
}

struct Member {
    instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    last_heard: Instant,
    /// Join order: the leader is the earliest still present.
    order: u64,
    /// Waiting for this rebalance's JoinGroup answer.
    joining: Option<oneshot::Sender<Joined>>,
    /// Waiting for the leader's SyncGroup.
    syncing: Option<oneshot::Sender<Synced>>,
}

struct Group {
    state: State,
    generation: i32,
    protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<String>,
    /// Ordered maps throughout: what a tick or a completed rebalance answers goes out in one
    /// order every run (the simulation replays runs exactly).
    members: BTreeMap<String, Member>,
    /// Ids handed out with MEMBER_ID_REQUIRED, not joined yet, and when.
    pending: BTreeMap<String, Instant>,
    /// Static members: instance id → member id.
    instances: BTreeMap<String, String>,
    /// When the current rebalance completes at the latest.
    deadline: Option<Instant>,
    /// A group formed from empty waits until then for more members.
    not_before: Option<Instant>,
    next_order: u64,
    /// When it last became empty (ms since the Unix epoch; 0 while it has members).
    emptied_at_ms: i64,
    /// Changed in a way its stored state must learn (it emptied; a static member came back).
    unstored: bool,
    /// The leader's assignments are being stored (the rebalance completes once they are).
    storing: bool,
    /// Empty, stored and unasked since then.
    idle_since: Option<Instant>,
}

impl Group {
    fn new() -> Group {
        Group {
            state: State::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            pending: BTreeMap::new(),
            instances: BTreeMap::new(),
            deadline: None,
            not_before: None,
            next_order: 0,
            emptied_at_ms: 0,
            unstored: false,
            storing: false,
            idle_since: None,
        }
    }

    /// Starts a rebalance (or extends nothing if one is under way): sync waiters are told to
    /// rejoin.
    fn prepare(&mut self, now: Instant, initial_delay: Duration) {
        if self.state == State::PreparingRebalance {
            return;
        }
        let longest = self.members.values().map(|m| m.rebalance_timeout).max();
        let timeout = longest.unwrap_or(Duration::from_secs(60));
        if self.state == State::Empty {
            self.not_before = Some(now + initial_delay.min(timeout));
        }
        self.deadline = Some(now + timeout);
        self.state = State::PreparingRebalance;
        self.storing = false;
        for m in self.members.values_mut() {
            if let Some(s) = m.syncing.take() {
                let _ = s.send((REBALANCE_IN_PROGRESS, None, None, Bytes::new()));
            }
        }
    }

    /// A protocol every member supports, the one most members list first among those
    /// (Kafka's vote).
    fn choose_protocol(&self) -> Option<String> {
        let mut candidates: Option<Vec<&str>> = None;
        for m in self.members.values() {
            let names: Vec<&str> = m.protocols.iter().map(|(n, _)| n.as_str()).collect();
            candidates = Some(match candidates {
                None => names,
                Some(c) => c.into_iter().filter(|n| names.contains(n)).collect(),
            });
        }
        let candidates = candidates?;
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(first) =
                m.protocols.iter().map(|(n, _)| n.as_str()).find(|n| candidates.contains(n))
            {
                *votes.entry(first).or_default() += 1;
            }
        }
        votes.into_iter().max_by_key(|(_, v)| *v).map(|(n, _)| n.to_owned())
    }

    /// The last member is gone: a new generation of no one.
    fn empty(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        self.state = State::Empty;
        self.protocol = None;
        self.leader = None;
        self.emptied_at_ms = unix_ms();
        self.unstored = true;
    }

    fn remove(&mut self, id: &str) {
        if let Some(m) = self.members.remove(id) {
            if let Some(i) = &m.instance_id {
                self.instances.remove(i);
            }
            if let Some(j) = m.joining {
                let _ = j.send(Joined::error(UNKNOWN_MEMBER_ID, id));
            }
            if let Some(s) = m.syncing {
                let _ = s.send((UNKNOWN_MEMBER_ID, None, None, Bytes::new()));
            }
        }
        if self.leader.as_deref() == Some(id) {
            self.leader = None;
        }
    }

    /// Moves static member `old` to a new member id `new` (its instance id's new incarnation),
    /// keeping its assignment and place; the old incarnation's waiting requests are fenced.
    fn replace(&mut self, old: &str, new: &str, j: &Join, now: Instant) {
        let Some(mut m) = self.members.remove(old) else { return };
        if let Some(w) = m.joining.take() {
            let _ = w.send(Joined::error(FENCED_INSTANCE_ID, old));
        }
        if let Some(w) = m.syncing.take() {
            let _ = w.send((FENCED_INSTANCE_ID, None, None, Bytes::new()));
        }
        m.protocols = j.protocols.clone();
        m.session_timeout = j.session_timeout;
        m.rebalance_timeout = j.rebalance_timeout;
        m.client_id = j.client_id.clone();
        m.client_host = j.client_host.clone();
        m.last_heard = now;
        if let Some(i) = &m.instance_id {
            self.instances.insert(i.clone(), new.to_owned());
        }
        self.members.insert(new.to_owned(), m);
        if self.leader.as_deref() == Some(old) {
            self.leader = Some(new.to_owned());
        }
    }

    /// A JoinGroup answer naming the current generation (no rebalance): the member list only
    /// for a leader asked to assign (`members`). `leader` is named as given: a static member
    /// that took the leader's place is told the old id, so it does not assign again.
    fn current(&self, id: &str, leader: String, members: bool) -> Joined {
        let protocol = self.protocol.clone().unwrap_or_default();
        let everyone = if members {
            let mut v: Vec<(&String, &Member)> = self.members.iter().collect();
            v.sort_by_key(|(_, m)| m.order);
            v.into_iter()
                .map(|(id, m)| {
                    let meta = m.protocols.iter().find(|(n, _)| *n == protocol);
                    (
                        id.clone(),
                        m.instance_id.clone(),
                        meta.map(|(_, b)| b.clone()).unwrap_or_default(),
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        Joined {
            error: code::NONE,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            leader,
            member_id: id.to_owned(),
            members: everyone,
        }
    }

    /// Completes the rebalance if every member rejoined (and a new group waited its initial
    /// delay), or its deadline passed.
    fn maybe_complete(&mut self, now: Instant) {
        if self.state != State::PreparingRebalance {
            return;
        }
        let all_joined = self.members.values().all(|m| m.joining.is_some());
        let waited = self.not_before.is_none_or(|t| now >= t);
        let late = self.deadline.is_some_and(|d| now >= d);
        if !(late || (all_joined && waited)) {
            return;
        }
        // Members that did not rejoin in time are out.
        let gone: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| m.joining.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.remove(&id);
        }
        self.deadline = None;
        self.not_before = None;
        if self.members.is_empty() {
            self.empty();
            return;
        }
        self.generation = self.generation.wrapping_add(1);
        self.protocol = self.choose_protocol();
        if self.leader.as_ref().is_none_or(|l| !self.members.contains_key(l)) {
            self.leader =
                self.members.iter().min_by_key(|(_, m)| m.order).map(|(id, _)| id.clone());
        }
        self.state = State::CompletingRebalance;
        let protocol = self.protocol.clone().unwrap_or_default();
        let everyone: Vec<(String, Option<String>, Bytes)> = {
            let mut v: Vec<(&String, &Member)> = self.members.iter().collect();
            v.sort_by_key(|(_, m)| m.order);
            v.into_iter()
                .map(|(id, m)| {
                    let meta = m
                        .protocols
                        .iter()
                        .find(|(n, _)| *n == protocol)
                        .map(|(_, b)| b.clone())
                        .unwrap_or_default();
                    (id.clone(), m.instance_id.clone(), meta)
                })
                .collect()
        };
        let leader = self.leader.clone().unwrap_or_default();
        for (id, m) in self.members.iter_mut() {
            m.last_heard = now;
            m.assignment = Bytes::new();
            if let Some(j) = m.joining.take() {
                let _ = j.send(Joined {
                    error: code::NONE,
                    generation: self.generation,
                    protocol_type: self.protocol_type.clone(),
                    protocol: self.protocol.clone(),
                    leader: leader.clone(),
                    member_id: id.clone(),
                    members: if *id == leader { everyone.clone() } else { Vec::new() },
                });
            }
        }
    }
}

/// Every group this coordinator holds.
pub struct Groups {
    groups: Mutex<BTreeMap<String, Group>>,
    /// KIP-848 groups ([`consumer`]); locked after `groups` when both are.
    consumer: Mutex<HashMap<String, consumer::Group>>,
    initial_delay: Duration,
    /// KIP-848: a member silent this long is removed (Kafka's
    /// `group.consumer.session.timeout.ms`, 45 s).
    consumer_session_timeout: Duration,
    /// KIP-848: how often members heartbeat (`group.consumer.heartbeat.interval.ms`, 5 s).
    heartbeat_interval: Duration,
    ids: std::sync::atomic::AtomicU64,
    id_prefix: String,
    /// A group's offsets expire once it has had no member this long (and none was committed).
    offsets_retention: Duration,
    /// The groups this coordinator has taken: the tenure it writes under, the member view it
    /// took them at.
    held: Mutex<HashMap<String, Held>>,
    /// Takes under way, one at a time per group.
    taking: Mutex<HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
    /// Each group's last offset commit admitted, done when it has been applied: a commit is
    /// applied after those admitted before it, as Kafka applies a group's commits in order.
    commits: Mutex<HashMap<String, Applied>>,
    /// Groups let go that were never stored (only asked about): their coordinator records,
    /// to remove.
    released: Mutex<Vec<(String, Tenure)>>,
    /// Share groups coordinated here, and the share-partitions owned here (KIP-932).
    shares: crate::share::Shares,
}

/// A group as this coordinator holds it.
#[derive(Clone, Copy, Debug)]
struct Held {
    tenure: Tenure,
    view: i64,
    /// The group has a stored state (it exists in the store, and is listed).
    stored: bool,
    /// When it was taken: one held with nothing in memory (a group only described or
    /// fetched) is let go once it is older than [`UNUSED_HELD`].
    since: Instant,
}

/// How long a group taken but holding nothing in memory stays held: the tenures of groups a
/// client only asks about cannot pile up.
const UNUSED_HELD: Duration = Duration::from_secs(60);

/// An offset commit's completion, awaited by the next commit of its group.
type Applied = futures::future::Shared<oneshot::Receiver<()>>;

/// Empty groups idle this long leave memory (taken again from the store when asked for).
const IDLE_EMPTY: Duration = Duration::from_secs(600);

/// How often groups' offsets are checked for expiry (Kafka's
/// `offsets.retention.check.interval.ms`, 10 minutes).
pub const RETENTION_CHECK_INTERVAL: Duration = Duration::from_secs(600);

/// Now, in ms since the Unix epoch (when a group emptied: what offsets' expiry counts from).
fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Groups").field("initial_delay", &self.initial_delay).finish()
    }
}

impl Groups {
    /// `initial_delay`: how long a group formed from empty waits for more members (Kafka's
    /// `group.initial.rebalance.delay.ms`, 3 s).
    pub fn new(initial_delay: Duration) -> Groups {
        Groups {
            groups: Mutex::new(BTreeMap::new()),
            consumer: Mutex::new(HashMap::new()),
            initial_delay,
            consumer_session_timeout: Duration::from_secs(45),
            heartbeat_interval: Duration::from_secs(5),
            ids: Default::default(),
            id_prefix: uuid::Uuid::new_v4().simple().to_string(),
            offsets_retention: Duration::from_secs(7 * 24 * 3600),
            held: Default::default(),
            taking: Default::default(),
            commits: Default::default(),
            released: Default::default(),
            shares: Default::default(),
        }
    }

    /// How long a group's offsets outlive its last member (Kafka's
    /// `offsets.retention.minutes`, 7 days).
    pub fn with_offsets_retention(mut self, retention: Duration) -> Groups {
        self.offsets_retention = retention;
        self
    }

    /// Deletes the offsets (and stored state) of every group this coordinator coordinates
    /// that has had no member for the offsets' retention and took no commit meanwhile: one
    /// read of the stored groups, then a take and a deletion of each expired one.
    pub async fn expire(&self, broker: &dyn crate::Broker) {
        let stored = match broker.stored_groups().await {
            Ok(s) => s,
            Err(r) => {
                tracing::warn!(error = %r.message, "Kafka offsets' expiry: groups unreadable");
                return;
            }
        };
        let retention = i64::try_from(self.offsets_retention.as_millis()).unwrap_or(i64::MAX);
        let now = unix_ms();
        for (group, state) in stored {
            // What is held here is newer than what is stored (a commit since, say).
            let quiet = match self.quiet_since(&group) {
                Some(q) => q,
                None => match stored::quiet_since(&state) {
                    Some(q) if self.tenure(&group).is_none() => q,
                    _ => continue,
                },
            };
            if now.saturating_sub(quiet) < retention {
                continue;
            }
            let Ok((Some(c), view)) = broker.coordinator_view(&group).await else { continue };
            if c.node_id != broker.node_id() {
                continue;
            }
            let at = tokio::time::Instant::now().into_std();
            let Ok(tenure) = self.hold(&group, view, broker, at).await else {
                continue;
            };
            // Taken again: what the store said may have changed under another coordinator.
            if self.quiet_since(&group).is_none_or(|q| now.saturating_sub(q) < retention) {
                continue;
            }
            match broker.delete_group(&group, tenure).await {
                Ok(_) => {
                    tracing::info!(group, "Kafka group's offsets expired (offsets.retention)");
                    self.forget(&group);
                }
                Err(r) => {
                    tracing::warn!(group, error = %r.message, "expiring a Kafka group failed")
                }
            }
        }
    }

    /// Since when a group held here has had no member (ms since the Unix epoch): `None` if it
    /// has members, or is not held in memory.
    fn quiet_since(&self, group: &str) -> Option<i64> {
        if let Some(g) = self.groups.lock().get(group) {
            return g.members.is_empty().then_some(g.emptied_at_ms);
        }
        let consumer = self.consumer_lock();
        let g = consumer.get(group)?;
        (!g.has_members()).then_some(g.quiet_since_ms)
    }

    /// A commit landed on `group`: a group without members counts its offsets' retention from
    /// now (stored again at most every tenth of the retention, so commits cost no extra write).
    pub fn committed(&self, group: &str) {
        let now = unix_ms();
        let step = i64::try_from(self.offsets_retention.as_millis() / 10).unwrap_or(i64::MAX);
        if let Some(g) = self.groups.lock().get_mut(group) {
            if g.members.is_empty() && now.saturating_sub(g.emptied_at_ms) > step {
                g.emptied_at_ms = now;
                g.unstored = true;
            }
            return;
        }
        if let Some(g) = self.consumer_lock().get_mut(group)
            && !g.has_members()
            && now.saturating_sub(g.quiet_since_ms) > step
        {
            g.quiet_since_ms = now;
            g.mark_dirty();
        }
    }

    /// Holds `group` as its coordinator, chosen from the member view at revision `view`:
    /// taken from the store (its stored membership resumed) if this coordinator does not hold
    /// it, or holds it from an earlier view (it may have been taken since, then given back);
    /// otherwise no request at all. The tenure its writes go under, or the error code for the
    /// client (NOT_COORDINATOR: the group is another's; it is forgotten here).
    pub async fn hold(
        &self,
        group: &str,
        view: i64,
        store: &dyn GroupOffsets,
        now: Instant,
    ) -> Result<Tenure, i16> {
        if let Some(h) = self.held.lock().get(group).filter(|h| h.view == view) {
            return Ok(h.tenure);
        }
        let turn = self.taking.lock().entry(group.to_owned()).or_default().clone();
        let _turn = turn.lock().await;
        let prior = self.held.lock().get(group).copied();
        if let Some(h) = prior.filter(|h| h.view == view) {
            return Ok(h.tenure);
        }
        let taken = store.take_group(group, view, prior.map(|h| h.tenure)).await;
        self.taking.lock().remove(group);
        let taken = match taken {
            Ok(t) => t,
            Err(r) => {
                tracing::debug!(group, code = r.code, error = %r.message, "Kafka group not taken");
                self.forget(group);
                return Err(r.code);
            }
        };
        if !taken.kept {
            // Whatever was held of it is stale: the stored state is the group now.
            self.forget(group);
            if let Some(bytes) = &taken.state {
                match stored::decode_any(bytes, now) {
                    Some(stored::Stored::Classic(g)) => {
                        tracing::info!(
                            group,
                            generation = g.generation,
                            members = g.members.len(),
                            "Kafka group resumed from its stored state"
                        );
                        self.groups.lock().insert(group.to_owned(), *g);
                    }
                    Some(stored::Stored::Share) => {
                        self.shares.groups.lock().resume(group);
                    }
                    Some(stored::Stored::Consumer(c, quiet)) => {
                        tracing::info!(group, "Kafka consumer group resumed from its stored state");
                        self.consumer_resume(group, c, quiet, bytes.clone(), now);
                    }
                    None => tracing::warn!(
                        group,
                        "a stored Kafka group does not decode: it starts empty"
                    ),
                }
            }
        }
        let stored =
            if taken.kept { prior.is_some_and(|h| h.stored) } else { taken.state.is_some() };
        let held = Held { tenure: taken.tenure, view, stored, since: now };
        self.held.lock().insert(group.to_owned(), held);
        Ok(taken.tenure)
    }

    /// The share groups coordinated here and the share-partitions owned here.
    pub fn shares(&self) -> &crate::share::Shares {
        &self.shares
    }

    /// Whether `group` is a classic group with members here.
    pub fn is_classic_group(&self, group: &str) -> bool {
        self.groups.lock().get(group).is_some_and(|g| !g.members.is_empty())
    }

    /// The tenure `group` is held under here, if it is.
    pub fn tenure(&self, group: &str) -> Option<Tenure> {
        self.held.lock().get(group).map(|h| h.tenure)
    }

    /// A held group's state was stored.
    fn stored(&self, group: &str) {
        if let Some(h) = self.held.lock().get_mut(group) {
            h.stored = true;
        }
    }

    /// Stores a held group that has no stored state yet (it committed offsets without ever
    /// forming: a simple consumer's), Empty, so it is listed and its offsets expire.
    pub async fn ensure_stored(&self, group: &str, store: &dyn GroupOffsets) {
        let Some(h) = self.held.lock().get(group).copied().filter(|h| !h.stored) else { return };
        let state = {
            let mut groups = self.groups.lock();
            if self.consumer_lock().contains_key(group) {
                // A KIP-848 group is stored by its heartbeats.
                return;
            }
            let g = groups.entry(group.to_owned()).or_insert_with(|| {
                let mut g = Group::new();
                g.emptied_at_ms = unix_ms();
                g
            });
            stored::encode(g, None)
        };
        let Some(state) = state else { return };
        match store.store_group(group, h.tenure, state).await {
            Ok(()) => self.stored(group),
            Err(r) if r.code == NOT_COORDINATOR => self.forget(group),
            Err(r) => tracing::warn!(group, error = %r.message, "storing a Kafka group failed"),
        }
    }

    /// Stores a share group held here that has no stored state yet (its first member joined,
    /// or its offsets were set), so it is listed as a share group and deleted with its
    /// share-partitions.
    pub async fn ensure_share_stored(
        &self,
        group: &str,
        store: &dyn GroupOffsets,
    ) -> Result<(), i16> {
        let Some(h) = self.held.lock().get(group).copied().filter(|h| !h.stored) else {
            return Ok(());
        };
        match store.store_group(group, h.tenure, stored::encode_share()).await {
            Ok(()) => {
                self.stored(group);
                Ok(())
            }
            Err(r) if r.code == NOT_COORDINATOR => {
                self.forget(group);
                Err(NOT_COORDINATOR)
            }
            Err(r) => {
                tracing::warn!(group, error = %r.message, "storing a Kafka share group failed");
                Err(COORDINATOR_NOT_AVAILABLE)
            }
        }
    }

    /// Whether a group's stored state is a share group's.
    pub fn stored_is_share(bytes: &[u8]) -> bool {
        matches!(stored::decode_any(bytes, Instant::now()), Some(stored::Stored::Share))
    }

    /// Takes the next place in `group`'s order of offset commits: the commit admitted before
    /// it (to await before applying), and what to complete once applied.
    pub fn commit_turn(&self, group: &str) -> (Option<Applied>, oneshot::Sender<()>) {
        use futures::FutureExt;
        let (tx, rx) = oneshot::channel();
        let mut commits = self.commits.lock();
        // Those applied already need no awaiting.
        commits.retain(|_, a| a.peek().is_none());
        let before = commits.insert(group.to_owned(), rx.shared());
        (before, tx)
    }

    /// Stores a KIP-848 group's state if a heartbeat (or a tick) changed it, before the
    /// heartbeat is answered; the error code to answer when it could not be (NOT_COORDINATOR:
    /// the group is another's now, and is forgotten).
    pub async fn store_consumer(&self, group: &str, store: &dyn GroupOffsets) -> Result<(), i16> {
        let Some(state) = self.consumer_changed(group) else { return Ok(()) };
        let Some(tenure) = self.tenure(group) else { return Err(NOT_COORDINATOR) };
        match store.store_group(group, tenure, state.clone()).await {
            Ok(()) => {
                self.consumer_stored(group, state);
                self.stored(group);
                Ok(())
            }
            Err(r) if r.code == NOT_COORDINATOR => {
                self.forget(group);
                Err(NOT_COORDINATOR)
            }
            Err(r) => {
                tracing::warn!(group, error = %r.message, "storing a Kafka consumer group failed");
                if let Some(g) = self.consumer_lock().get_mut(group) {
                    g.mark_dirty();
                }
                Err(COORDINATOR_NOT_AVAILABLE)
            }
        }
    }

    /// Stores what changed in the groups held since it was last stored (groups that emptied,
    /// static members that came back); a group found taken by another coordinator is
    /// forgotten, one not stored for another reason is tried again next time. Removes the
    /// coordinator records of groups let go that never formed.
    pub async fn store_changed(&self, store: &dyn GroupOffsets) {
        let changed: Vec<(String, Tenure, Option<Bytes>)> = {
            let mut groups = self.groups.lock();
            let held = self.held.lock();
            groups
                .iter_mut()
                .filter(|(_, g)| g.unstored)
                .filter_map(|(name, g)| {
                    g.unstored = false;
                    Some((name.clone(), held.get(name)?.tenure, stored::encode(g, None)))
                })
                .collect()
        };
        let released = std::mem::take(&mut *self.released.lock());
        for (group, tenure) in released {
            if let Err(r) = store.release_group(&group, tenure).await {
                tracing::debug!(group, error = %r.message, "removing a group's record failed");
            }
        }
        for group in self.consumer_dirty() {
            if let Err(code) = self.store_consumer(&group, store).await {
                tracing::warn!(group, code, "storing a Kafka consumer group failed");
            }
        }
        for (group, tenure, state) in changed {
            let Some(state) = state else {
                tracing::warn!(group, "a Kafka group too large to store: kept in memory only");
                continue;
            };
            match store.store_group(&group, tenure, state).await {
                Ok(()) => self.stored(&group),
                Err(r) if r.code == NOT_COORDINATOR => self.forget(&group),
                Err(r) => {
                    tracing::warn!(group, error = %r.message, "storing a Kafka group failed; retrying");
                    if let Some(g) = self.groups.lock().get_mut(&group) {
                        g.unstored = true;
                    }
                }
            }
        }
    }

    /// KIP-848 groups' session timeout and heartbeat interval (Kafka's 45 s and 5 s).
    pub fn with_consumer_timeouts(mut self, session: Duration, heartbeat: Duration) -> Groups {
        self.consumer_session_timeout = session;
        self.heartbeat_interval = heartbeat;
        self
    }

    fn new_member_id(&self, client_id: &str) -> String {
        let n = self.ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{client_id}-{}-{n}", self.id_prefix)
    }

    /// Member ids this coordinator hands out are `<client id>-<prefix>-<n>`: the prefix is
    /// random per coordinator by default (ids never repeat across coordinators, whose groups
    /// move between them); the simulation gives one from its seed, so runs replay exactly.
    pub fn with_member_id_prefix(mut self, prefix: String) -> Groups {
        self.id_prefix = prefix;
        self
    }

    /// JoinGroup: resolves when the rebalance it takes part in completes.
    pub async fn join(&self, j: Join, now: Instant) -> Joined {
        let rx = match self.admit_join(j, now) {
            Ok(rx) => rx,
            Err(joined) => return *joined,
        };
        // The sender is dropped only when the member is replaced by a newer join of its own.
        rx.await.unwrap_or_else(|_| Joined::error(REBALANCE_IN_PROGRESS, ""))
    }

    fn admit_join(&self, j: Join, now: Instant) -> Result<oneshot::Receiver<Joined>, Box<Joined>> {
        let fail = |code: i16| Err(Box::new(Joined::error(code, &j.member_id)));
        if j.group.is_empty() {
            return fail(INVALID_GROUP_ID);
        }
        if j.session_timeout < MIN_SESSION_TIMEOUT || j.session_timeout > MAX_SESSION_TIMEOUT {
            return fail(INVALID_SESSION_TIMEOUT);
        }
        if j.protocol_type.is_empty() || j.protocols.is_empty() {
            return fail(INCONSISTENT_GROUP_PROTOCOL);
        }
        let mut groups = self.groups.lock();
        if !groups.contains_key(&j.group) && groups.len() >= MAX_GROUPS {
            return fail(COORDINATOR_NOT_AVAILABLE);
        }
        // A consumer group (KIP-848) with members takes no classic members, as Kafka with
        // its migration policy off.
        if self.consumer_lock().get(&j.group).is_some_and(consumer::Group::has_members) {
            return fail(INCONSISTENT_GROUP_PROTOCOL);
        }
        let g = groups.entry(j.group.clone()).or_insert_with(Group::new);
        if !g.members.is_empty() {
            if g.protocol_type.as_deref() != Some(j.protocol_type.as_str()) {
                return fail(INCONSISTENT_GROUP_PROTOCOL);
            }
            let theirs: Vec<&str> = j.protocols.iter().map(|(n, _)| n.as_str()).collect();
            let shared = g
                .members
                .iter()
                .filter(|(id, _)| **id != j.member_id)
                .all(|(_, m)| m.protocols.iter().any(|(n, _)| theirs.contains(&n.as_str())));
            if !shared {
                return fail(INCONSISTENT_GROUP_PROTOCOL);
            }
        }
        let mut id = j.member_id.clone();
        let mut replaced = false;
        if id.is_empty() {
            match &j.instance_id {
                // A static member coming back under a new incarnation takes its old one's
                // place (KIP-345): its assignment, and no rebalance while the group is stable
                // and the protocol it would choose stays the same.
                Some(instance) => {
                    id = self.new_member_id(&j.client_id);
                    if let Some(old) = g.instances.get(instance).cloned() {
                        let leader = g.leader.clone().unwrap_or_default();
                        g.replace(&old, &id, &j, now);
                        replaced = true;
                        if g.state == State::Stable && g.choose_protocol() == g.protocol {
                            g.unstored = true;
                            return Err(Box::new(g.current(&id, leader, false)));
                        }
                    }
                }
                None if j.require_known_member => {
                    // Member ids handed out and not joined yet count toward the group's size:
                    // a loop of joins cannot grow them without bound.
                    if g.members.len() + g.pending.len() >= MAX_MEMBERS {
                        return fail(GROUP_MAX_SIZE_REACHED);
                    }
                    let id = self.new_member_id(&j.client_id);
                    g.pending.insert(id.clone(), now);
                    return Err(Box::new(Joined::error(MEMBER_ID_REQUIRED, &id)));
                }
                None => id = self.new_member_id(&j.client_id),
            }
        } else if !g.members.contains_key(&id) && g.pending.remove(&id).is_none() {
            return fail(UNKNOWN_MEMBER_ID);
        } else if let Some(instance) = &j.instance_id
            && g.instances.get(instance).is_some_and(|known| *known != id)
        {
            return fail(FENCED_INSTANCE_ID);
        }
        if !g.members.contains_key(&id) && g.members.len() >= MAX_MEMBERS {
            return fail(GROUP_MAX_SIZE_REACHED);
        }
        // A known member rejoining with the metadata it has (it lost an answer, or restarted
        // its consumer): the current generation, no rebalance, as Kafka answers — unless it
        // leads a stable group (its JoinGroup asks for a rebalance).
        if let Some(m) = g.members.get_mut(&id).filter(|_| !replaced)
            && m.protocols == j.protocols
            && m.joining.is_none()
        {
            let leader = g.leader.clone().unwrap_or_default();
            let leads = leader == id;
            match g.state {
                State::Stable if !leads => {
                    m.last_heard = now;
                    return Err(Box::new(g.current(&id, leader, false)));
                }
                State::CompletingRebalance => {
                    m.last_heard = now;
                    return Err(Box::new(g.current(&id, leader, leads)));
                }
                _ => {}
            }
        }
        let (tx, rx) = oneshot::channel();
        let order = g.next_order;
        g.next_order += 1;
        match g.members.get_mut(&id) {
            Some(m) => {
                m.protocols = j.protocols.clone();
                m.session_timeout = j.session_timeout;
                m.rebalance_timeout = j.rebalance_timeout;
                m.last_heard = now;
                m.joining = Some(tx);
            }
            None => {
                g.members.insert(
                    id.clone(),
                    Member {
                        instance_id: j.instance_id.clone(),
                        client_id: j.client_id.clone(),
                        client_host: j.client_host.clone(),
                        session_timeout: j.session_timeout,
                        rebalance_timeout: j.rebalance_timeout,
                        protocols: j.protocols.clone(),
                        assignment: Bytes::new(),
                        last_heard: now,
                        order,
                        joining: Some(tx),
                        syncing: None,
                    },
                );
                if let Some(instance) = &j.instance_id {
                    g.instances.insert(instance.clone(), id.clone());
                }
            }
        }
        if g.members.len() == 1 || g.protocol_type.is_none() {
            g.protocol_type = Some(j.protocol_type.clone());
        }
        g.prepare(now, self.initial_delay);
        g.maybe_complete(now);
        Ok(rx)
    }

    /// SyncGroup: the leader's assignments complete the rebalance, once stored (a new
    /// coordinator resumes the group from them); every member's answer is its own assignment
    /// (a follower's answer waits for the leader's SyncGroup).
    #[allow(clippy::too_many_arguments)]
    pub async fn sync(
        &self,
        group: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        protocol_type: Option<&str>,
        protocol: Option<&str>,
        assignments: Vec<(String, Bytes)>,
        store: &dyn GroupOffsets,
        now: Instant,
    ) -> Synced {
        let (rx, completes) = {
            let mut groups = self.groups.lock();
            let fail = |c: i16| (c, None, None, Bytes::new());
            let Some(g) = groups.get_mut(group) else { return fail(UNKNOWN_MEMBER_ID) };
            if let Some(e) = check_member(g, member_id, instance_id) {
                return fail(e);
            }
            if generation != g.generation {
                return fail(ILLEGAL_GENERATION);
            }
            if protocol_type.is_some_and(|t| Some(t) != g.protocol_type.as_deref())
                || protocol.is_some_and(|p| Some(p) != g.protocol.as_deref())
            {
                return fail(INCONSISTENT_GROUP_PROTOCOL);
            }
            let (ptype, pname) = (g.protocol_type.clone(), g.protocol.clone());
            match g.state {
                State::Empty => return fail(UNKNOWN_MEMBER_ID),
                State::PreparingRebalance => return fail(REBALANCE_IN_PROGRESS),
                State::Stable => {
                    let a = g.members.get(member_id).map(|m| m.assignment.clone());
                    return (code::NONE, ptype, pname, a.unwrap_or_default());
                }
                State::CompletingRebalance => {}
            }
            let (tx, rx) = oneshot::channel();
            if let Some(m) = g.members.get_mut(member_id) {
                m.last_heard = now;
                m.syncing = Some(tx);
            }
            // Only the leader's assignments count, as in Kafka; a second SyncGroup of the
            // leader while they are stored adds nothing.
            let leads = g.leader.as_deref() == Some(member_id) && !g.storing;
            let completes = leads.then(|| {
                g.storing = true;
                let given: HashMap<String, Bytes> = assignments.into_iter().collect();
                (stored::encode(g, Some(&given)), given)
            });
            (rx, completes)
        };
        if let Some((state, given)) = completes {
            self.complete(group, generation, state, given, store, now).await;
        }
        rx.await.unwrap_or((REBALANCE_IN_PROGRESS, None, None, Bytes::new()))
    }

    /// Completes a rebalance with the leader's assignments: stored under the tenure, then
    /// answered to every member waiting in SyncGroup. Not stored: a coordinator that lost
    /// the group forgets it (NOT_COORDINATOR to all); otherwise the members are told
    /// COORDINATOR_NOT_AVAILABLE and the group rebalances, as Kafka does.
    async fn complete(
        &self,
        group: &str,
        generation: i32,
        state: Option<Bytes>,
        given: HashMap<String, Bytes>,
        store: &dyn GroupOffsets,
        now: Instant,
    ) {
        let outcome = match (self.tenure(group), state) {
            (Some(t), Some(state)) => store.store_group(group, t, state).await.map_err(|r| r.code),
            (Some(_), None) => {
                tracing::warn!(group, "a Kafka group too large to store: kept in memory only");
                Ok(())
            }
            (None, _) => Err(NOT_COORDINATOR),
        };
        if outcome == Err(NOT_COORDINATOR) {
            self.forget(group);
            return;
        }
        if outcome.is_ok() {
            self.stored(group);
        }
        let mut groups = self.groups.lock();
        let Some(g) = groups.get_mut(group) else { return };
        // A rebalance began meanwhile: its members were told to rejoin.
        if g.generation != generation || g.state != State::CompletingRebalance {
            return;
        }
        g.storing = false;
        let (ptype, pname) = (g.protocol_type.clone(), g.protocol.clone());
        for (id, m) in g.members.iter_mut() {
            m.assignment = given.get(id).cloned().unwrap_or_default();
            let answer = match outcome {
                Ok(()) => (code::NONE, ptype.clone(), pname.clone(), m.assignment.clone()),
                Err(_) => (COORDINATOR_NOT_AVAILABLE, None, None, Bytes::new()),
            };
            if let Some(s) = m.syncing.take() {
                let _ = s.send(answer);
            }
        }
        match outcome {
            Ok(()) => g.state = State::Stable,
            Err(_) => {
                for m in g.members.values_mut() {
                    m.assignment = Bytes::new();
                }
                g.prepare(now, Duration::ZERO);
            }
        }
    }

    /// Heartbeat: keeps the member's session; REBALANCE_IN_PROGRESS tells it to rejoin.
    pub fn heartbeat(
        &self,
        group: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        now: Instant,
    ) -> i16 {
        let mut groups = self.groups.lock();
        let Some(g) = groups.get_mut(group) else { return UNKNOWN_MEMBER_ID };
        if let Some(e) = check_member(g, member_id, instance_id) {
            return e;
        }
        if let Some(m) = g.members.get_mut(member_id) {
            m.last_heard = now;
        }
        match g.state {
            State::Empty => UNKNOWN_MEMBER_ID,
            State::PreparingRebalance => REBALANCE_IN_PROGRESS,
            _ if generation != g.generation => ILLEGAL_GENERATION,
            _ => code::NONE,
        }
    }

    /// LeaveGroup: each member (id, instance id) leaves; the group rebalances if any did.
    pub fn leave(
        &self,
        group: &str,
        members: &[(String, Option<String>)],
        now: Instant,
    ) -> Vec<i16> {
        let mut groups = self.groups.lock();
        let Some(g) = groups.get_mut(group) else {
            return vec![UNKNOWN_MEMBER_ID; members.len()];
        };
        let mut out = Vec::with_capacity(members.len());
        let mut left = false;
        for (id, instance) in members {
            // A static member may leave by instance id alone.
            let id = match (id.is_empty(), instance) {
                (true, Some(i)) => g.instances.get(i).cloned().unwrap_or_default(),
                _ => id.clone(),
            };
            match check_member(g, &id, instance.as_deref()) {
                Some(e) => out.push(e),
                None => {
                    g.remove(&id);
                    left = true;
                    out.push(code::NONE);
                }
            }
        }
        if left {
            if g.members.is_empty() && g.state != State::PreparingRebalance {
                g.empty();
            } else {
                g.prepare(now, Duration::ZERO);
                g.maybe_complete(now);
            }
        }
        out
    }

    /// May a member commit offsets for `group` at `generation`? Kafka's rules: a simple
    /// consumer (generation < 0, no member) only while the group has no members.
    /// A consumer group's commit is checked by member epoch instead ([`consumer`]).
    pub fn check_commit(
        &self,
        group: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        version: i16,
    ) -> MayCommit {
        if let Some(may) = self.consumer_check_commit(group, generation, member_id, version) {
            return may;
        }
        MayCommit::All(self.classic_check_commit(group, generation, member_id, instance_id))
    }

    /// May a transaction commit offsets for `group` (TxnOffsetCommit, KIP-447)? Kafka's
    /// rules: a producer naming no member (generation < 0) commits while the group has no
    /// members, or any time to a classic group; one naming a member commits at its
    /// generation (a consumer group's: its epoch) only, whatever the group's state.
    pub fn check_txn_commit(
        &self,
        group: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> i16 {
        if let Some(code) = self.consumer_check_txn_commit(group, generation, member_id) {
            return code;
        }
        let groups = self.groups.lock();
        let Some(g) = groups.get(group) else {
            return if generation < 0 { code::NONE } else { ILLEGAL_GENERATION };
        };
        if generation < 0 && (g.members.is_empty() || member_id.is_empty() && instance_id.is_none())
        {
            return code::NONE;
        }
        if let Some(e) = check_member(g, member_id, instance_id) {
            return e;
        }
        if generation != g.generation { ILLEGAL_GENERATION } else { code::NONE }
    }

    /// A classic group's member may commit at its generation only.
    fn classic_check_commit(
        &self,
        group: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> i16 {
        let groups = self.groups.lock();
        let Some(g) = groups.get(group) else {
            return if generation < 0 { code::NONE } else { ILLEGAL_GENERATION };
        };
        if generation < 0 && member_id.is_empty() {
            return if g.members.is_empty() { code::NONE } else { UNKNOWN_MEMBER_ID };
        }
        if let Some(e) = check_member(g, member_id, instance_id) {
            return e;
        }
        if generation != g.generation {
            return ILLEGAL_GENERATION;
        }
        match g.state {
            State::CompletingRebalance => REBALANCE_IN_PROGRESS,
            _ => code::NONE,
        }
    }

    /// Ends sessions past their timeout and rebalances past their deadline.
    pub fn tick(&self, now: Instant) {
        self.shares.groups.lock().tick(now);
        let mut groups = self.groups.lock();
        for (name, g) in groups.iter_mut() {
            g.pending.retain(|_, at| {
                now.duration_since(*at) < MAX_SESSION_TIMEOUT.min(Duration::from_secs(300))
            });
            let expired: Vec<String> = g
                .members
                .iter()
                .filter(|(_, m)| {
                    m.joining.is_none() && now.duration_since(m.last_heard) > m.session_timeout
                })
                .map(|(id, _)| id.clone())
                .collect();
            for id in &expired {
                tracing::info!(group = %name, member = %id, "Kafka group: session expired");
                g.remove(id);
            }
            if !expired.is_empty() {
                if g.members.is_empty() {
                    g.empty();
                } else {
                    g.prepare(now, Duration::ZERO);
                }
            }
            g.maybe_complete(now);
            if g.state != State::Empty || g.unstored || !g.pending.is_empty() {
                g.idle_since = None;
            } else if g.idle_since.is_none() {
                g.idle_since = Some(now);
            }
        }
        // Empty groups, stored, leave memory once idle: the next request takes them again.
        let idle: Vec<String> = groups
            .iter()
            .filter(|(_, g)| g.idle_since.is_some_and(|t| now.duration_since(t) >= IDLE_EMPTY))
            .map(|(n, _)| n.clone())
            .collect();
        for name in &idle {
            groups.remove(name);
        }
        drop(groups);
        let gone = self.consumer_tick(now);
        let classic = self.groups.lock();
        let consumer = self.consumer_lock();
        let mut held = self.held.lock();
        for name in idle.into_iter().chain(gone) {
            if !consumer.contains_key(&name) && !classic.contains_key(&name) {
                held.remove(&name);
            }
        }
        let committing = self.commits.lock();
        let mut released = self.released.lock();
        held.retain(|name, h| {
            let keep = classic.contains_key(name)
                || consumer.contains_key(name)
                || now.saturating_duration_since(h.since) < UNUSED_HELD
                || committing.get(name).is_some_and(|a| a.peek().is_none());
            if !keep && !h.stored {
                released.push((name.clone(), h.tenure));
            }
            keep
        });
    }

    /// Forgets a group (this coordinator no longer owns it): its members are told to find the
    /// new coordinator.
    pub fn forget(&self, group: &str) {
        self.held.lock().remove(group);
        self.consumer_forget(group);
        self.shares.groups.lock().forget(group);
        if let Some(mut g) = self.groups.lock().remove(group) {
            let ids: Vec<String> = g.members.keys().cloned().collect();
            for id in ids {
                if let Some(m) = g.members.get_mut(&id) {
                    if let Some(j) = m.joining.take() {
                        let _ = j.send(Joined::error(NOT_COORDINATOR, &id));
                    }
                    if let Some(s) = m.syncing.take() {
                        let _ = s.send((NOT_COORDINATOR, None, None, Bytes::new()));
                    }
                }
            }
        }
    }

    /// The groups held: name, protocol type, state.
    pub fn list(&self) -> Vec<(String, String, State)> {
        let mut v: Vec<_> = self
            .groups
            .lock()
            .iter()
            .map(|(n, g)| (n.clone(), g.protocol_type.clone().unwrap_or_default(), g.state))
            .collect();
        v.sort();
        v
    }

    pub fn describe(&self, group: &str) -> Option<Described> {
        let groups = self.groups.lock();
        let g = groups.get(group)?;
        let protocol = g.protocol.clone().unwrap_or_default();
        let mut members: Vec<(&String, &Member)> = g.members.iter().collect();
        members.sort_by_key(|(_, m)| m.order);
        Some(Described {
            state: g.state,
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            protocol: protocol.clone(),
            members: members
                .into_iter()
                .map(|(id, m)| DescribedMember {
                    member_id: id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: m
                        .protocols
                        .iter()
                        .find(|(n, _)| *n == protocol)
                        .map(|(_, b)| b.clone())
                        .unwrap_or_default(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        })
    }

    /// The topics the group's members subscribe to (their consumer-protocol metadata), or
    /// `None` when it has no members. A member whose metadata does not parse counts as
    /// subscribed to everything (`Some` with `"*"`), so nothing it may read is deleted.
    pub fn subscribed(&self, group: &str) -> Option<Vec<String>> {
        use kafka_protocol::protocol::Decodable;
        if let Some(topics) = self.consumer_subscribed(group) {
            return Some(topics);
        }
        let groups = self.groups.lock();
        let g = groups.get(group).filter(|g| !g.members.is_empty())?;
        let mut topics = Vec::new();
        for m in g.members.values() {
            for (_, meta) in &m.protocols {
                let mut b = meta.clone();
                let parsed = (b.len() >= 2)
                    .then(|| {
                        let version = bytes::Buf::get_i16(&mut b).clamp(0, 3);
                        kafka_protocol::messages::ConsumerProtocolSubscription::decode(
                            &mut b, version,
                        )
                        .ok()
                    })
                    .flatten();
                match parsed {
                    Some(s) => topics.extend(s.topics.iter().map(|t| t.to_string())),
                    None => topics.push("*".to_owned()),
                }
            }
        }
        topics.sort();
        topics.dedup();
        Some(topics)
    }

    /// Whether the group has members now (DeleteGroups refuses those: NON_EMPTY_GROUP).
    pub fn has_members(&self, group: &str) -> bool {
        self.groups.lock().get(group).is_some_and(|g| !g.members.is_empty())
            || self.is_consumer_group(group)
            || self.shares.groups.lock().has_members(group)
    }
}

/// UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID for a member the group does not know as this.
fn check_member(g: &Group, member_id: &str, instance_id: Option<&str>) -> Option<i16> {
    if let Some(i) = instance_id
        && let Some(known) = g.instances.get(i)
        && known != member_id
    {
        return Some(FENCED_INSTANCE_ID);
    }
    (!g.members.contains_key(member_id)).then_some(UNKNOWN_MEMBER_ID)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CommittedOffset, OffsetCommit, Refused, Taken};

    /// Groups' stored part in memory: tenures and states (offsets are the Broker's tests').
    #[derive(Default)]
    struct Store {
        tenures: Mutex<HashMap<String, i64>>,
        states: Mutex<HashMap<String, Bytes>>,
        next: std::sync::atomic::AtomicI64,
    }

    impl Store {
        fn fenced(&self, group: &str, tenure: Tenure) -> Result<(), Refused> {
            match self.tenures.lock().get(group) {
                Some(t) if *t == tenure.0 => Ok(()),
                _ => Err(Refused::new(NOT_COORDINATOR, "taken")),
            }
        }
    }

    #[async_trait::async_trait]
    impl GroupOffsets for Store {
        async fn take_group(
            &self,
            g: &str,
            _: i64,
            held: Option<Tenure>,
        ) -> Result<Taken, Refused> {
            let mut tenures = self.tenures.lock();
            if let Some(h) = held.filter(|h| tenures.get(g) == Some(&h.0)) {
                return Ok(Taken { tenure: h, state: None, kept: true });
            }
            let t = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            tenures.insert(g.to_owned(), t);
            let state = self.states.lock().get(g).cloned();
            Ok(Taken { tenure: Tenure(t), state, kept: false })
        }
        async fn store_group(&self, g: &str, t: Tenure, state: Bytes) -> Result<(), Refused> {
            self.fenced(g, t)?;
            self.states.lock().insert(g.to_owned(), state);
            Ok(())
        }
        async fn commit_offsets(
            &self,
            g: &str,
            t: Tenure,
            o: Vec<OffsetCommit>,
        ) -> Vec<Result<(), Refused>> {
            o.iter().map(|_| self.fenced(g, t)).collect()
        }
        async fn committed_offsets(
            &self,
            _: &str,
            _: Option<Vec<(String, Vec<i32>)>>,
        ) -> Result<Vec<CommittedOffset>, Refused> {
            Ok(Vec::new())
        }
        async fn stored_groups(&self) -> Result<Vec<(String, Bytes)>, Refused> {
            Ok(self.states.lock().iter().map(|(g, s)| (g.clone(), s.clone())).collect())
        }
        async fn delete_group(&self, g: &str, t: Tenure) -> Result<bool, Refused> {
            self.fenced(g, t)?;
            Ok(self.states.lock().remove(g).is_some())
        }
        async fn release_group(&self, g: &str, t: Tenure) -> Result<(), Refused> {
            if self.fenced(g, t).is_ok() && !self.states.lock().contains_key(g) {
                self.tenures.lock().remove(g);
            }
            Ok(())
        }
        async fn delete_offset(&self, g: &str, t: Tenure, _: &str, _: i32) -> Result<(), Refused> {
            self.fenced(g, t)
        }
        async fn group_config(&self, _: &str) -> Result<crate::GroupConfig, Refused> {
            Ok(Default::default())
        }
        async fn configured_groups(&self) -> Result<Vec<String>, Refused> {
            Ok(Vec::new())
        }
        async fn set_group_config(
            &self,
            _: &str,
            _: crate::GroupConfig,
            _: bool,
        ) -> Result<(), Refused> {
            Err(Refused::new(code::INVALID_REQUEST, "no group configs in this test"))
        }
    }

    fn join(group: &str, member: &str, client: &str) -> Join {
        Join {
            group: group.to_owned(),
            member_id: member.to_owned(),
            instance_id: None,
            client_id: client.to_owned(),
            client_host: "/127.0.0.1".to_owned(),
            session_timeout: Duration::from_secs(10),
            rebalance_timeout: Duration::from_secs(30),
            protocol_type: "consumer".to_owned(),
            protocols: vec![("range".to_owned(), Bytes::from_static(b"m"))],
            require_known_member: true,
        }
    }

    /// Joins with MEMBER_ID_REQUIRED first, as v4+ clients do; the member's id.
    fn member_id(g: &Groups, group: &str, client: &str, now: Instant) -> String {
        let j = g.admit_join(join(group, "", client), now).err().map(|j| *j).unwrap_or_default();
        assert_eq!(j.error, MEMBER_ID_REQUIRED, "{j:?}");
        j.member_id
    }

    #[tokio::test]
    async fn members_join_sync_and_rebalance_when_one_joins_leaves_or_goes_silent() {
        let t0 = Instant::now();
        let g = Groups::new(Duration::from_secs(3));
        let store = Store::default();
        g.hold("g", 1, &store, t0).await.expect("held");
        let a = member_id(&g, "g", "a", t0);
        // A new group waits the initial delay for more members.
        let ja = g.admit_join(join("g", &a, "a"), t0).expect("admitted");
        let b = member_id(&g, "g", "b", t0);
        let jb = g.admit_join(join("g", &b, "b"), t0 + Duration::from_secs(1)).expect("admitted");
        g.tick(t0 + Duration::from_secs(2));
        assert_eq!(g.describe("g").map(|d| d.state), Some(State::PreparingRebalance));
        g.tick(t0 + Duration::from_secs(3));
        let (ja, jb) = (ja.await.expect("answered"), jb.await.expect("answered"));
        assert_eq!((ja.error, jb.error, ja.generation, jb.generation), (0, 0, 1, 1));
        assert_eq!(ja.leader, a, "the first to join leads");
        assert_eq!(ja.members.len(), 2);
        assert!(jb.members.is_empty(), "only the leader gets the members");
        assert_eq!(ja.protocol.as_deref(), Some("range"));
        // A follower's SyncGroup waits for the leader's; a follower's assignments are ignored.
        let now = t0 + Duration::from_secs(4);
        let follower = g.sync(
            "g",
            1,
            &b,
            None,
            None,
            None,
            vec![(a.clone(), Bytes::from_static(b"x"))],
            &store,
            now,
        );
        let leader = g.sync(
            "g",
            1,
            &a,
            None,
            Some("consumer"),
            Some("range"),
            vec![(a.clone(), Bytes::from_static(b"A")), (b.clone(), Bytes::from_static(b"B"))],
            &store,
            now,
        );
        let (f, l) = tokio::join!(follower, leader);
        assert_eq!((f.0, f.3.as_ref()), (0, b"B".as_slice()));
        assert_eq!((l.0, l.3.as_ref()), (0, b"A".as_slice()));
        assert_eq!(g.describe("g").map(|d| d.state), Some(State::Stable));
        assert_eq!(g.heartbeat("g", 1, &a, None, now), 0);
        assert_eq!(g.heartbeat("g", 0, &a, None, now), ILLEGAL_GENERATION);
        assert_eq!(g.heartbeat("g", 1, "stranger", None, now), UNKNOWN_MEMBER_ID);
        assert_eq!(g.check_commit("g", 1, &a, None, 9), MayCommit::All(0));
        assert_eq!(g.check_commit("g", 0, &a, None, 9), MayCommit::All(ILLEGAL_GENERATION));
        assert_eq!(
            g.check_commit("g", -1, "", None, 9),
            MayCommit::All(UNKNOWN_MEMBER_ID),
            "the group has members"
        );
        // A third joins: the others are told by heartbeat and rejoin; generation 2.
        let c = member_id(&g, "g", "c", now);
        let jc = g.admit_join(join("g", &c, "c"), now).expect("admitted");
        assert_eq!(g.heartbeat("g", 1, &a, None, now), REBALANCE_IN_PROGRESS);
        let ja = g.admit_join(join("g", &a, "a"), now).expect("admitted");
        let jb = g.admit_join(join("g", &b, "b"), now).expect("admitted");
        let (ja, jb, jc) = (ja.await.expect("a"), jb.await.expect("b"), jc.await.expect("c"));
        assert_eq!((ja.generation, jb.generation, jc.generation), (2, 2, 2));
        assert_eq!((ja.leader.as_str(), ja.members.len()), (a.as_str(), 3));
        // b goes silent past its session; a and c heartbeat; b is removed and the group
        // rebalances without it.
        let later = now + Duration::from_secs(11);
        assert_eq!(g.heartbeat("g", 2, &a, None, later - Duration::from_secs(1)), 0);
        assert_eq!(g.heartbeat("g", 2, &c, None, later - Duration::from_secs(1)), 0);
        g.tick(later);
        assert_eq!(g.heartbeat("g", 2, &b, None, later), UNKNOWN_MEMBER_ID);
        assert_eq!(g.heartbeat("g", 2, &a, None, later), REBALANCE_IN_PROGRESS);
        let ja = g.admit_join(join("g", &a, "a"), later).expect("admitted");
        let jc = g.admit_join(join("g", &c, "c"), later).expect("admitted");
        let (ja, jc) = (ja.await.expect("a"), jc.await.expect("c"));
        assert_eq!((ja.generation, jc.generation, ja.members.len()), (3, 3, 2));
        // c leaves: a alone rejoins.
        assert_eq!(g.leave("g", &[(c.clone(), None)], later), vec![0]);
        assert_eq!(g.leave("g", &[(c.clone(), None)], later), vec![UNKNOWN_MEMBER_ID]);
        let ja = g.admit_join(join("g", &a, "a"), later).expect("admitted").await.expect("a");
        assert_eq!((ja.generation, ja.members.len()), (4, 1));
    }

    #[tokio::test]
    async fn a_member_that_does_not_rejoin_in_time_is_dropped_from_the_rebalance() {
        let t0 = Instant::now();
        let g = Groups::new(Duration::ZERO);
        let a = member_id(&g, "g", "a", t0);
        let ja = g.admit_join(join("g", &a, "a"), t0).expect("admitted").await.expect("a");
        assert_eq!(ja.generation, 1);
        let b = member_id(&g, "g", "b", t0);
        let jb = g.admit_join(join("g", &b, "b"), t0).expect("admitted");
        // a never rejoins; past the rebalance timeout (30 s) b completes alone and leads.
        g.tick(t0 + Duration::from_secs(29));
        g.tick(t0 + Duration::from_secs(31));
        let jb = jb.await.expect("b");
        assert_eq!((jb.generation, jb.leader.as_str(), jb.members.len()), (2, b.as_str(), 1));
        assert_eq!(g.heartbeat("g", 2, &a, None, t0 + Duration::from_secs(31)), UNKNOWN_MEMBER_ID);
    }

    #[test]
    fn cursor_names_are_distinct_and_bounded() {
        assert_eq!(cursor_name("orders-app.v2").as_deref(), Some("kafka.orders-app.v2"));
        assert_eq!(cursor_name("a_b").as_deref(), Some("kafka.a_5fb"));
        assert_ne!(cursor_name("a_5fb"), cursor_name("a_b"));
        assert_eq!(cursor_name("a b:c").as_deref(), Some("kafka.a_20b_3ac"));
        assert_eq!(cursor_name(""), None);
        assert_eq!(cursor_name(&"x".repeat(122)).map(|n| n.len()), Some(128));
        assert_eq!(cursor_name(&"x".repeat(123)), None);
        assert_eq!(cursor_name(&"x".repeat(10_000)), None);
        for g in ["orders-app.v2", "a_b", "a b:c", "ünï"] {
            assert_eq!(cursor_name(g).and_then(|n| group_of_cursor(&n)).as_deref(), Some(g));
        }
        assert_eq!(group_of_cursor("app-cursor"), None);
        assert_eq!(group_of_cursor("kafka.a_zz"), None);
        assert_eq!(group_of_cursor("kafka.a_2d"), None, "`-` is never escaped");
    }

    /// L4: member ids handed out with MEMBER_ID_REQUIRED count toward the group's size: 100,000
    /// joins with no member id leave at most MAX_MEMBERS of them, the rest refused.
    #[tokio::test]
    async fn member_ids_handed_out_are_bounded_per_group() {
        let now = Instant::now();
        let g = Groups::new(Duration::ZERO);
        let mut refused = 0;
        for i in 0..100_000 {
            match g.admit_join(join("g", "", &format!("c{i}")), now).err().map(|j| j.error) {
                Some(MEMBER_ID_REQUIRED) => {}
                Some(GROUP_MAX_SIZE_REACHED) => refused += 1,
                other => panic!("join {i}: {other:?}"),
            }
        }
        assert_eq!(refused, 100_000 - MAX_MEMBERS);
        assert_eq!(g.groups.lock().get("g").map(|g| g.pending.len()), Some(MAX_MEMBERS));
    }

    #[tokio::test]
    async fn bad_joins_get_kafkas_errors() {
        let now = Instant::now();
        let g = Groups::new(Duration::ZERO);
        let err = |j: Join| g.admit_join(j, now).err().map(|j| j.error);
        assert_eq!(err(join("", "", "a")), Some(INVALID_GROUP_ID));
        let mut short = join("g", "", "a");
        short.session_timeout = Duration::from_secs(1);
        assert_eq!(err(short), Some(INVALID_SESSION_TIMEOUT));
        let mut none = join("g", "", "a");
        none.protocols.clear();
        assert_eq!(err(none), Some(INCONSISTENT_GROUP_PROTOCOL));
        assert_eq!(err(join("g", "made-up", "a")), Some(UNKNOWN_MEMBER_ID));
        // A member of another protocol type, or with no protocol in common, cannot join.
        let a = member_id(&g, "g", "a", now);
        let _ja = g.admit_join(join("g", &a, "a"), now).expect("admitted");
        let mut other_type = join("g", "", "b");
        other_type.protocol_type = "connect".to_owned();
        assert_eq!(err(other_type), Some(INCONSISTENT_GROUP_PROTOCOL));
        let mut other_protocol = join("g", "", "b");
        other_protocol.protocols = vec![("roundrobin".to_owned(), Bytes::new())];
        assert_eq!(err(other_protocol), Some(INCONSISTENT_GROUP_PROTOCOL));
    }

    #[tokio::test]
    async fn a_static_member_coming_back_replaces_its_old_incarnation() {
        let now = Instant::now();
        let g = Groups::new(Duration::ZERO);
        let mut s = join("g", "", "a");
        s.instance_id = Some("pod-0".to_owned());
        let first = g.admit_join(s.clone(), now).expect("admitted").await.expect("joined");
        assert_eq!(first.error, 0, "static members need no second join");
        let again = g.admit_join(s, now).expect("admitted").await.expect("joined");
        assert_ne!(again.member_id, first.member_id);
        assert_eq!(
            g.heartbeat("g", again.generation, &first.member_id, Some("pod-0"), now),
            FENCED_INSTANCE_ID
        );
        assert_eq!(g.describe("g").map(|d| d.members.len()), Some(1));
    }

    /// A group "g" of `a` (the leader; static `pod-a` when `static_a`) and `b`, stable at
    /// generation 1 with assignments "A" and "B", held by `g` from `store`.
    async fn stable(g: &Groups, store: &Store, t0: Instant, static_a: bool) -> (String, String) {
        g.hold("g", 1, store, t0).await.expect("held");
        let mut ja = join("g", "", "a");
        let wa = if static_a {
            // A static member joins at once, without being asked to join again.
            ja.instance_id = Some("pod-a".to_owned());
            g.admit_join(ja, t0).expect("admitted")
        } else {
            ja.member_id = member_id(g, "g", "a", t0);
            g.admit_join(ja, t0).expect("admitted")
        };
        let b = member_id(g, "g", "b", t0);
        let wb = g.admit_join(join("g", &b, "b"), t0).expect("admitted");
        g.tick(t0 + Duration::from_secs(3));
        let (ja, jb) = (wa.await.expect("a"), wb.await.expect("b"));
        let a = ja.member_id.clone();
        assert_eq!((ja.generation, jb.generation, ja.leader.as_str()), (1, 1, a.as_str()));
        let now = t0 + Duration::from_secs(3);
        let assign =
            vec![(a.clone(), Bytes::from_static(b"A")), (b.clone(), Bytes::from_static(b"B"))];
        let (l, f) = tokio::join!(
            g.sync("g", 1, &a, None, None, None, assign, store, now),
            g.sync("g", 1, &b, None, None, None, Vec::new(), store, now)
        );
        assert_eq!((l.0, f.0, f.3.as_ref()), (0, 0, b"B".as_slice()));
        (a, b)
    }

    #[tokio::test]
    async fn a_new_coordinator_resumes_a_stable_group_and_the_old_one_writes_nothing() {
        let t0 = Instant::now();
        let store = Store::default();
        let old = Groups::new(Duration::from_secs(3));
        let (a, b) = stable(&old, &store, t0, false).await;
        let stale = old.tenure("g").expect("held");
        // The group's coordinator moves: the new one resumes it from what was stored.
        let new = Groups::new(Duration::from_secs(3));
        let now = t0 + Duration::from_secs(5);
        new.hold("g", 2, &store, now).await.expect("taken");
        assert_eq!(new.describe("g").map(|d| (d.state, d.members.len())), Some((State::Stable, 2)));
        assert_eq!(new.heartbeat("g", 1, &a, None, now), 0, "members keep heartbeating");
        assert_eq!(new.heartbeat("g", 1, &b, None, now), 0);
        assert_eq!(
            new.check_commit("g", 1, &b, None, 9),
            MayCommit::All(0),
            "and committing at their generation"
        );
        let synced = new.sync("g", 1, &b, None, None, None, Vec::new(), &store, now).await;
        assert_eq!((synced.0, synced.3.as_ref()), (0, b"B".as_slice()), "assignments kept");
        // The old coordinator's writes are refused, whatever it still holds in memory.
        let commit = OffsetCommit {
            topic: "t".into(),
            partition: 0,
            offset: 5,
            leader_epoch: -1,
            metadata: None,
        };
        let refused = store.commit_offsets("g", stale, vec![commit]).await;
        assert!(matches!(refused.as_slice(), [Err(r)] if r.code == NOT_COORDINATOR));
        // Its members' sessions run from the move: silent ones leave after their timeout.
        assert_eq!(new.heartbeat("g", 1, &a, None, now + Duration::from_secs(6)), 0);
        new.tick(now + Duration::from_secs(11));
        assert_eq!(new.describe("g").map(|d| d.state), Some(State::PreparingRebalance));
    }

    #[tokio::test]
    async fn a_static_member_coming_back_to_a_stable_group_takes_its_place_without_a_rebalance() {
        let t0 = Instant::now();
        let store = Store::default();
        let g = Groups::new(Duration::from_secs(3));
        let (a, b) = stable(&g, &store, t0, true).await;
        let now = t0 + Duration::from_secs(4);
        let mut back = join("g", "", "a");
        back.instance_id = Some("pod-a".to_owned());
        let again = g.admit_join(back, now).err().map(|j| *j).expect("answered at once");
        assert_eq!((again.error, again.generation), (0, 1), "{again:?}");
        assert_ne!(again.member_id, a);
        assert_eq!(again.leader, a, "told the old leader id: it does not assign again");
        assert_eq!(g.heartbeat("g", 1, &b, None, now), 0, "the others see no rebalance");
        assert_eq!(g.heartbeat("g", 1, &a, Some("pod-a"), now), FENCED_INSTANCE_ID);
        let synced = g
            .sync("g", 1, &again.member_id, Some("pod-a"), None, None, Vec::new(), &store, now)
            .await;
        assert_eq!((synced.0, synced.3.as_ref()), (0, b"A".as_slice()), "its assignment kept");
        // Stored: a new coordinator knows the new incarnation.
        g.store_changed(&store).await;
        let next = Groups::new(Duration::from_secs(3));
        next.hold("g", 2, &store, now).await.expect("taken");
        assert_eq!(next.heartbeat("g", 1, &again.member_id, Some("pod-a"), now), 0);
        // A follower rejoining with its metadata unchanged: the current generation, as is.
        let rejoin = g.admit_join(join("g", &b, "b"), now).err().map(|j| *j).expect("at once");
        assert_eq!((rejoin.error, rejoin.generation), (0, 1));
        assert_eq!(g.describe("g").map(|d| d.state), Some(State::Stable));
    }

    #[tokio::test]
    async fn a_new_coordinator_resumes_a_consumer_group_at_its_epochs() {
        use consumer::{Assignment, Heartbeat, TopicView};
        let now = Instant::now();
        let store = Store::default();
        let topic = uuid::Uuid::from_u128(1);
        let view = TopicView {
            topics: [("t".to_owned(), (topic, 4))].into(),
            looked: Default::default(),
            complete: true,
        };
        let hb = |epoch: i32, owned: Assignment| Heartbeat {
            group: "g".into(),
            member_id: "m1".into(),
            member_epoch: epoch,
            rebalance_timeout: (epoch == 0).then(|| Duration::from_secs(30)),
            topic_names: (epoch == 0).then(|| vec!["t".to_owned()]),
            owned: Some(owned),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            ..Default::default()
        };
        let old = Groups::new(Duration::ZERO);
        old.hold("g", 1, &store, now).await.expect("held");
        let joined = old.consumer_heartbeat(hb(0, Assignment::new()), &view, now);
        assert_eq!(joined.error, 0, "{joined:?}");
        old.store_consumer("g", &store).await.expect("stored");
        let owned = joined.assignment.clone().expect("assigned");
        assert_eq!(owned.get(&topic).map(|p| p.len()), Some(4));
        let steady = old.consumer_heartbeat(hb(joined.member_epoch, owned.clone()), &view, now);
        old.store_consumer("g", &store).await.expect("stored");
        let before = old.consumer_describe("g").expect("described");
        // The coordinator moves: the new one resumes the group at its epochs.
        let new = Groups::new(Duration::ZERO);
        new.hold("g", 2, &store, now).await.expect("taken");
        let after = new.consumer_describe("g").expect("resumed");
        assert_eq!((after.epoch, after.assignment_epoch), (before.epoch, before.assignment_epoch));
        assert_eq!(after.members, before.members);
        let next = new.consumer_heartbeat(hb(steady.member_epoch, owned), &view, now);
        assert_eq!((next.error, next.member_epoch), (0, steady.member_epoch), "{next:?}");
        let still = new.consumer_describe("g").expect("described");
        assert_eq!(still.epoch, before.epoch, "no new group epoch: nothing rebalanced");
        assert_eq!(still.state, consumer::State::Stable);
    }

    #[tokio::test]
    async fn groups_only_asked_about_are_let_go_and_formed_ones_kept() {
        let t0 = Instant::now();
        let store = Store::default();
        let g = Groups::new(Duration::from_secs(3));
        stable(&g, &store, t0, false).await;
        g.hold("ghost", 1, &store, t0).await.expect("held");
        assert!(g.tenure("ghost").is_some());
        g.tick(t0 + Duration::from_secs(30));
        assert!(g.tenure("ghost").is_some(), "let go too soon");
        g.tick(t0 + UNUSED_HELD + Duration::from_secs(1));
        assert!(g.tenure("ghost").is_none(), "a group held with nothing in memory stays held");
        assert!(g.tenure("g").is_some(), "a formed group was let go");
        g.store_changed(&store).await;
        assert!(!store.tenures.lock().contains_key("ghost"), "its coordinator record stays");
        assert!(store.tenures.lock().contains_key("g"));
    }
}
