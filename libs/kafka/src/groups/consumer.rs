//! KIP-848 consumer groups (`group.protocol=consumer`): the coordinator assigns partitions
//! itself and each member reconciles toward its target by heartbeats (ConsumerGroupHeartbeat),
//! with Kafka's rules (`GroupMetadataManager`, `CurrentAssignmentBuilder`):
//!
//! - The group has an epoch, bumped when a member joins, leaves, is removed or changes its
//!   subscription, or when a subscribed topic's partitions change. When the group epoch passes
//!   the target assignment's, the group's assignor (uniform or range, the one most members ask
//!   for) computes a new target for every member, at that epoch.
//! - A member moves to the target epoch only once it no longer owns a partition the target took
//!   away from it: until then it stays at its epoch, told to keep only the rest (revoke before
//!   assign). A partition another member still owns (assigned or being revoked) is not given
//!   until it is released; the member gets it on a later heartbeat.
//! - A request's epoch must be the member's (or its previous one, with owned partitions within
//!   its assignment: the answer that bumped it was lost), else FENCED_MEMBER_EPOCH: the member
//!   drops its partitions and rejoins with epoch 0.
//! - Members silent for the session timeout, or that do not revoke within their rebalance
//!   timeout, are removed. A static member (instance id) that leaves with epoch -2 keeps its
//!   partitions until its session ends; a member rejoining with its instance id takes them over.
//!
//! Membership is durable, as for classic groups: the group epoch, the target assignment and
//! every member's epochs, assignment, partitions being revoked and subscription are stored
//! (with the topics as the group last saw them) before a heartbeat that changed them is
//! answered, so a new coordinator resumes the group and its members go on heartbeating at
//! their epochs. One deviation from Kafka, which fences it: a known member that rejoins with epoch 0 (it
//! dropped its partitions) is taken back at epoch 0 instead of being fenced again.
//! Time is passed in, as for classic groups.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::errors::*;
use super::{Groups, MAX_GROUPS, MAX_MEMBERS, MayCommit};
use crate::code;

/// Kafka's KIP-848 error codes.
pub mod errors {
    pub const FENCED_MEMBER_EPOCH: i16 = kafka_protocol::ResponseError::FencedMemberEpoch.code();
    pub const UNRELEASED_INSTANCE_ID: i16 =
        kafka_protocol::ResponseError::UnreleasedInstanceId.code();
    pub const UNSUPPORTED_ASSIGNOR: i16 = kafka_protocol::ResponseError::UnsupportedAssignor.code();
    pub const STALE_MEMBER_EPOCH: i16 = kafka_protocol::ResponseError::StaleMemberEpoch.code();
    pub const INVALID_REGULAR_EXPRESSION: i16 =
        kafka_protocol::ResponseError::InvalidRegularExpression.code();
}
use errors::*;

/// Partitions by topic id.
pub type Assignment = BTreeMap<Uuid, BTreeSet<i32>>;

/// The server-side assignors (Kafka's `group.consumer.assignors`); the first is the default.
pub const ASSIGNORS: &[&str] = &["uniform", "range"];

/// The longest subscription regex accepted (its compiled size is bounded as well).
const MAX_REGEX_LEN: usize = 1024;

/// A ConsumerGroupHeartbeat, as the coordinator needs it. `None` fields did not change since
/// the member's last heartbeat.
#[derive(Clone, Debug, Default)]
pub struct Heartbeat {
    pub group: String,
    pub member_id: String,
    /// 0 to join, -1 to leave, -2 for a static member leaving for a while.
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout: Option<Duration>,
    pub topic_names: Option<Vec<String>>,
    pub topic_regex: Option<String>,
    pub assignor: Option<String>,
    /// The partitions the member owns now.
    pub owned: Option<Assignment>,
    pub client_id: String,
    pub client_host: String,
    /// The group's own session timeout and heartbeat interval (its group configs), where set.
    pub timeouts: Timeouts,
}

/// A consumer group's own session timeout and heartbeat interval (its
/// `consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms` group configs), where
/// set; the coordinator's otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timeouts {
    pub session: Option<Duration>,
    pub heartbeat: Option<Duration>,
}

impl Heartbeat {
    /// Kafka's request checks (INVALID_REQUEST, UNSUPPORTED_ASSIGNOR), before any state.
    pub fn check(&self) -> Result<(), (i16, String)> {
        let invalid = |m: &str| Err((code::INVALID_REQUEST, m.to_owned()));
        if self.group.is_empty() {
            return invalid("GroupId can't be empty.");
        }
        if self.instance_id.as_deref() == Some("") {
            return invalid("InstanceId can't be empty.");
        }
        if self.rack_id.as_deref() == Some("") {
            return invalid("RackId can't be empty.");
        }
        match self.member_epoch {
            0 => {
                if self.rebalance_timeout.is_none() {
                    return invalid("RebalanceTimeoutMs must be provided in first request.");
                }
                if self.owned.as_ref().is_none_or(|o| !o.is_empty()) {
                    return invalid("TopicPartitions must be empty when (re-)joining.");
                }
                if self.topic_names.is_none() && self.topic_regex.is_none() {
                    return invalid(
                        "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                    );
                }
            }
            -2 if self.instance_id.is_none() => return invalid("InstanceId can't be null."),
            e if e > 0 || e == -1 || e == -2 => {}
            _ => return invalid("MemberEpoch is invalid."),
        }
        if self.member_epoch != 0 && self.member_id.is_empty() {
            return invalid("MemberId can't be empty.");
        }
        if let Some(a) = &self.assignor
            && !ASSIGNORS.contains(&a.as_str())
        {
            return Err((
                UNSUPPORTED_ASSIGNOR,
                format!(
                    "ServerAssignor {a} is not supported. Supported assignors: {}.",
                    ASSIGNORS.join(", ")
                ),
            ));
        }
        if let Some(r) = self.topic_regex.as_deref().filter(|r| !r.is_empty()) {
            compile(r).map_err(|e| (INVALID_REGULAR_EXPRESSION, e))?;
        }
        Ok(())
    }
}

/// A subscription regex matches whole topic names, as Kafka's does.
fn compile(re: &str) -> Result<regex::Regex, String> {
    if re.len() > MAX_REGEX_LEN {
        return Err(format!("a regular expression of at most {MAX_REGEX_LEN} bytes"));
    }
    regex::RegexBuilder::new(&format!("^(?:{re})$"))
        .size_limit(1 << 20)
        .build()
        .map_err(|e| format!("invalid regular expression {re:?}: {e}"))
}

/// A heartbeat's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Beat {
    pub error: i16,
    pub message: Option<String>,
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval: Duration,
    /// The member's partitions, when they changed or the request was a full one.
    pub assignment: Option<Assignment>,
}

impl Beat {
    fn error(error: i16, message: impl Into<String>) -> Beat {
        Beat { error, message: Some(message.into()), member_epoch: -1, ..Default::default() }
    }
}

/// The topics the coordinator looked up for a heartbeat: those found (id, partitions), and
/// whether every topic was listed (then one not found does not exist) or only `looked`.
#[derive(Clone, Debug, Default)]
pub struct TopicView {
    pub topics: BTreeMap<String, (Uuid, u32)>,
    pub looked: BTreeSet<String>,
    pub complete: bool,
}

/// Which topics a heartbeat needs looked up: every topic (a regex subscription) or these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wanted {
    All,
    Names(BTreeSet<String>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reconciling {
    Stable,
    /// Told to give up partitions; stays at its epoch until it has.
    Unrevoked,
    /// At the target epoch, waiting for partitions other members still own.
    Unreleased,
}

struct Member {
    epoch: i32,
    previous_epoch: i32,
    state: Reconciling,
    assigned: Assignment,
    revoking: Assignment,
    /// The member epoch at which each partition it holds (assigned or being revoked) became
    /// its: KIP-1251's assignment epoch. A commit at an epoch older than the member's is
    /// accepted for a partition held since then. Missing: since the member's current epoch.
    since: BTreeMap<(Uuid, i32), i32>,
    instance_id: Option<String>,
    rack_id: Option<String>,
    client_id: String,
    client_host: String,
    topic_names: Vec<String>,
    topic_regex: Option<String>,
    regex: Option<regex::Regex>,
    assignor: Option<String>,
    rebalance_timeout: Duration,
    last_heard: Instant,
    revoke_deadline: Option<Instant>,
    /// A static member that left with epoch -2: its partitions wait for its return.
    away: bool,
}

impl Member {
    fn new(now: Instant) -> Member {
        Member {
            epoch: 0,
            previous_epoch: 0,
            state: Reconciling::Stable,
            assigned: Assignment::new(),
            revoking: Assignment::new(),
            since: BTreeMap::new(),
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            topic_names: Vec::new(),
            topic_regex: None,
            regex: None,
            assignor: None,
            rebalance_timeout: Duration::from_secs(300),
            last_heard: now,
            revoke_deadline: None,
            away: false,
        }
    }

    /// Back to epoch 0 owning nothing (it rejoined having dropped its partitions).
    fn reset(&mut self) {
        self.epoch = 0;
        self.previous_epoch = 0;
        self.state = Reconciling::Stable;
        self.assigned.clear();
        self.revoking.clear();
        self.since.clear();
        self.revoke_deadline = None;
    }

    /// The epoch since which it holds the partition (assigned or being revoked), if it does.
    fn held_since(&self, topic: &Uuid, p: i32) -> Option<i32> {
        let holds = |a: &Assignment| a.get(topic).is_some_and(|s| s.contains(&p));
        (holds(&self.assigned) || holds(&self.revoking))
            .then(|| self.since.get(&(*topic, p)).copied().unwrap_or(self.epoch))
    }

    /// The topics of `metadata` it subscribes to.
    fn subscribes(&self, topic: &str) -> bool {
        self.topic_names.iter().any(|n| n == topic)
            || self.regex.as_ref().is_some_and(|r| r.is_match(topic))
    }
}

/// A group's state, as ConsumerGroupDescribe and ListGroups name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum State {
    Empty,
    Assigning,
    Reconciling,
    Stable,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Empty => "Empty",
            State::Assigning => "Assigning",
            State::Reconciling => "Reconciling",
            State::Stable => "Stable",
        }
    }
}

pub(super) struct Group {
    epoch: i32,
    assignment_epoch: i32,
    members: HashMap<String, Member>,
    /// Static members: instance id → member id.
    instances: HashMap<String, String>,
    target: HashMap<String, Assignment>,
    /// The subscribed topics as last seen: name → (id, partitions).
    metadata: BTreeMap<String, (Uuid, u32)>,
    /// The group as last stored (or taken), to store only what changed.
    stored: Option<bytes::Bytes>,
    /// Changed by a tick or a leave: stored by the next store of changed groups.
    dirty: bool,
    /// Its own timeouts, as its last heartbeat carried them.
    timeouts: Timeouts,
    /// When it last had no member left, or last took a commit without members (ms since the
    /// Unix epoch): its offsets expire from then.
    pub(super) quiet_since_ms: i64,
}

impl Group {
    fn new() -> Group {
        Group {
            epoch: 0,
            assignment_epoch: 0,
            members: HashMap::new(),
            instances: HashMap::new(),
            target: HashMap::new(),
            metadata: BTreeMap::new(),
            stored: None,
            dirty: false,
            timeouts: Timeouts::default(),
            quiet_since_ms: 0,
        }
    }

    pub(super) fn mark_dirty(&mut self) {
        self.dirty = true;
    }

    pub(super) fn has_members(&self) -> bool {
        !self.members.is_empty()
    }

    fn state(&self) -> State {
        if self.members.is_empty() {
            State::Empty
        } else if self.epoch > self.assignment_epoch {
            State::Assigning
        } else if self
            .members
            .values()
            .any(|m| m.epoch != self.assignment_epoch || m.state != Reconciling::Stable)
        {
            State::Reconciling
        } else {
            State::Stable
        }
    }

    fn remove(&mut self, id: &str) {
        if let Some(m) = self.members.remove(id)
            && let Some(i) = &m.instance_id
            && self.instances.get(i).is_some_and(|known| known == id)
        {
            self.instances.remove(i);
        }
        self.target.remove(id);
        self.epoch += 1;
        if self.members.is_empty() {
            self.quiet_since_ms = super::unix_ms();
        }
    }

    /// The assignor most members ask for (the default when none does).
    fn assignor(&self) -> &'static str {
        let mut votes: BTreeMap<&'static str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(a) = m.assignor.as_deref().and_then(|a| ASSIGNORS.iter().find(|n| **n == a))
            {
                *votes.entry(a).or_default() += 1;
            }
        }
        votes.into_iter().max_by_key(|(_, v)| *v).map_or(ASSIGNORS[0], |(n, _)| n)
    }

    /// Recomputes the subscribed topics from `view` (keeping what it did not look up); true
    /// if they changed.
    fn refresh_metadata(&mut self, view: &TopicView) -> bool {
        let mut next = BTreeMap::new();
        let mut names: BTreeSet<&str> = BTreeSet::new();
        for m in self.members.values() {
            names.extend(m.topic_names.iter().map(String::as_str));
        }
        let consider = |name: &str, next: &mut BTreeMap<String, (Uuid, u32)>| {
            if let Some(t) = view.topics.get(name) {
                next.insert(name.to_owned(), *t);
            } else if !(view.complete || view.looked.contains(name))
                && let Some(t) = self.metadata.get(name)
            {
                next.insert(name.to_owned(), *t);
            }
        };
        for name in names {
            consider(name, &mut next);
        }
        let regexes: Vec<&regex::Regex> =
            self.members.values().filter_map(|m| m.regex.as_ref()).collect();
        if !regexes.is_empty() {
            // Regex subscriptions match the topics listed, or those seen before if not listed.
            let pool: Vec<&String> = if view.complete {
                view.topics.keys().collect()
            } else {
                self.metadata.keys().chain(view.topics.keys()).collect()
            };
            for name in pool {
                if regexes.iter().any(|r| r.is_match(name)) {
                    consider(name, &mut next);
                }
            }
        }
        let changed = next != self.metadata;
        self.metadata = next;
        changed
    }

    /// A new target assignment at the group epoch.
    fn assign(&mut self) {
        let mut members: Vec<(&String, &Member)> = self.members.iter().collect();
        members.sort_by(|a, b| a.0.cmp(b.0));
        let subs: Vec<(String, BTreeSet<String>)> = members
            .iter()
            .map(|(id, m)| {
                let topics = self
                    .metadata
                    .keys()
                    .filter(|t| m.subscribes(t))
                    .cloned()
                    .collect::<BTreeSet<_>>();
                ((*id).clone(), topics)
            })
            .collect();
        self.target = match self.assignor() {
            "range" => range(&subs, &self.metadata),
            _ => uniform(&subs, &self.metadata, &self.target),
        };
        self.assignment_epoch = self.epoch;
    }

    /// Whether a member other than `id` owns (or is giving up) the partition.
    fn held_by_other(&self, id: &str, topic: &Uuid, p: i32) -> bool {
        self.members.iter().any(|(other, m)| {
            other != id
                && (m.assigned.get(topic).is_some_and(|s| s.contains(&p))
                    || m.revoking.get(topic).is_some_and(|s| s.contains(&p)))
        })
    }

    /// Moves member `id` toward its target (Kafka's `CurrentAssignmentBuilder`).
    fn reconcile(&mut self, id: &str, owned: Option<&Assignment>, now: Instant) {
        let Some(m) = self.members.get(id) else { return };
        match m.state {
            Reconciling::Unrevoked => {
                let still_owns = owned.is_none_or(|o| overlaps(o, &m.revoking));
                if still_owns {
                    return;
                }
            }
            Reconciling::Stable if m.epoch == self.assignment_epoch => return,
            Reconciling::Stable | Reconciling::Unreleased => {}
        }
        let target = self.target.get(id).cloned().unwrap_or_default();
        let current = m.assigned.clone();
        let mut keep = Assignment::new();
        let mut revoke = Assignment::new();
        for (t, ps) in &current {
            for p in ps {
                let side = if target.get(t).is_some_and(|s| s.contains(p)) {
                    &mut keep
                } else {
                    &mut revoke
                };
                side.entry(*t).or_default().insert(*p);
            }
        }
        let owns_revoked = owned.is_none_or(|o| overlaps(o, &revoke));
        if !revoke.is_empty() && owns_revoked {
            if let Some(m) = self.members.get_mut(id) {
                m.assigned = keep;
                m.revoking = revoke;
                m.state = Reconciling::Unrevoked;
                m.revoke_deadline = Some(now + m.rebalance_timeout);
            }
            return;
        }
        let mut assigned = keep;
        let mut unreleased = false;
        for (t, ps) in &target {
            for p in ps {
                if assigned.get(t).is_some_and(|s| s.contains(p)) {
                    continue;
                }
                if self.held_by_other(id, t, *p) {
                    unreleased = true;
                } else {
                    assigned.entry(*t).or_default().insert(*p);
                }
            }
        }
        let epoch = self.assignment_epoch;
        if let Some(m) = self.members.get_mut(id) {
            if m.epoch != epoch {
                m.previous_epoch = m.epoch;
                m.epoch = epoch;
            }
            for (t, ps) in &assigned {
                for p in ps {
                    if !current.get(t).is_some_and(|s| s.contains(p)) {
                        m.since.insert((*t, *p), epoch);
                    }
                }
            }
            m.since.retain(|(t, p), _| assigned.get(t).is_some_and(|s| s.contains(p)));
            m.assigned = assigned;
            m.revoking.clear();
            m.revoke_deadline = None;
            m.state = if unreleased { Reconciling::Unreleased } else { Reconciling::Stable };
        }
    }
}

fn overlaps(a: &Assignment, b: &Assignment) -> bool {
    a.iter().any(|(t, ps)| b.get(t).is_some_and(|q| !ps.is_disjoint(q)))
}

fn is_subset(owned: Option<&Assignment>, of: &Assignment) -> bool {
    owned.is_some_and(|o| o.iter().all(|(t, ps)| of.get(t).is_some_and(|q| ps.is_subset(q))))
}

/// Every partition of the subscribed topics spread evenly over the members subscribed to each
/// (counts differ by at most one when subscriptions are the same), moving as few partitions
/// from the previous target as that allows.
fn uniform(
    members: &[(String, BTreeSet<String>)],
    metadata: &BTreeMap<String, (Uuid, u32)>,
    previous: &HashMap<String, Assignment>,
) -> HashMap<String, Assignment> {
    let mut owner: BTreeMap<(Uuid, i32), usize> = BTreeMap::new();
    let mut counts = vec![0usize; members.len()];
    let eligible = |topic: &str| -> Vec<usize> {
        (0..members.len()).filter(|i| members[*i].1.contains(topic)).collect()
    };
    let mut partitions: Vec<(Uuid, i32, Vec<usize>)> = Vec::new();
    for (name, (id, n)) in metadata {
        let who = eligible(name);
        if who.is_empty() {
            continue;
        }
        for p in 0..i32::try_from(*n).unwrap_or(i32::MAX) {
            partitions.push((*id, p, who.clone()));
        }
    }
    // Keep the previous owner where it still subscribes.
    for (id, p, who) in &partitions {
        if let Some(i) = who.iter().copied().find(|i| {
            previous.get(&members[*i].0).is_some_and(|a| a.get(id).is_some_and(|s| s.contains(p)))
        }) {
            owner.insert((*id, *p), i);
            counts[i] += 1;
        }
    }
    // The rest to the least loaded, topics with the fewest subscribers first.
    let mut order: Vec<usize> = (0..partitions.len()).collect();
    order.sort_by_key(|i| partitions[*i].2.len());
    for i in order {
        let (id, p, who) = &partitions[i];
        if owner.contains_key(&(*id, *p)) {
            continue;
        }
        if let Some(m) = who.iter().copied().min_by_key(|m| (counts[*m], *m)) {
            owner.insert((*id, *p), m);
            counts[m] += 1;
        }
    }
    // Move partitions from the most to the least loaded until none moves (bounded passes).
    for _ in 0..64 {
        let mut moved = false;
        for (id, p, who) in &partitions {
            let Some(from) = owner.get(&(*id, *p)).copied() else { continue };
            let Some(to) = who.iter().copied().min_by_key(|m| (counts[*m], *m)) else { continue };
            if counts[from] > counts[to] + 1 {
                owner.insert((*id, *p), to);
                counts[from] -= 1;
                counts[to] += 1;
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    let mut out: HashMap<String, Assignment> =
        members.iter().map(|(id, _)| (id.clone(), Assignment::new())).collect();
    for ((t, p), i) in owner {
        if let Some(a) = out.get_mut(&members[i].0) {
            a.entry(t).or_default().insert(p);
        }
    }
    out
}

/// Each topic's partitions in contiguous ranges over its subscribers in member order (the first
/// `n % m` one more), so co-partitioned topics line up.
fn range(
    members: &[(String, BTreeSet<String>)],
    metadata: &BTreeMap<String, (Uuid, u32)>,
) -> HashMap<String, Assignment> {
    let mut out: HashMap<String, Assignment> =
        members.iter().map(|(id, _)| (id.clone(), Assignment::new())).collect();
    for (name, (id, n)) in metadata {
        let who: Vec<&String> =
            members.iter().filter(|(_, t)| t.contains(name)).map(|(m, _)| m).collect();
        if who.is_empty() {
            continue;
        }
        let n = i32::try_from(*n).unwrap_or(i32::MAX);
        let m = i32::try_from(who.len()).unwrap_or(i32::MAX);
        let (each, extra) = (n / m, n % m);
        let mut next = 0;
        for (i, member) in who.into_iter().enumerate() {
            let i = i32::try_from(i).unwrap_or(i32::MAX);
            let take = each + i32::from(i < extra);
            if take > 0
                && let Some(a) = out.get_mut(member)
            {
                a.entry(*id).or_default().extend(next..next + take);
            }
            next += take;
        }
    }
    out
}

/// A member as ConsumerGroupDescribe shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescribedMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub member_epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub topic_names: Vec<String>,
    pub topic_regex: Option<String>,
    pub assignment: Assignment,
    pub target: Assignment,
}

/// A consumer group as ConsumerGroupDescribe shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Described {
    pub state: State,
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: String,
    pub members: Vec<DescribedMember>,
    /// Topic id → name, for the assignments.
    pub topic_names: BTreeMap<Uuid, String>,
}

impl Groups {
    pub(super) fn consumer_lock(&self) -> parking_lot::MutexGuard<'_, HashMap<String, Group>> {
        self.consumer.lock()
    }

    /// The topics a heartbeat needs looked up: the group's and the request's subscriptions.
    pub fn wanted(&self, hb: &Heartbeat) -> Wanted {
        let groups = self.consumer_lock();
        let mut names: BTreeSet<String> =
            hb.topic_names.iter().flatten().filter(|n| !n.is_empty()).cloned().collect();
        if hb.topic_regex.as_deref().is_some_and(|r| !r.is_empty()) {
            return Wanted::All;
        }
        if let Some(g) = groups.get(&hb.group) {
            for (id, m) in &g.members {
                if m.regex.is_some() && *id != hb.member_id {
                    return Wanted::All;
                }
                names.extend(m.topic_names.iter().cloned());
            }
            // A member that keeps its regex (None: unchanged) needs every topic too.
            if hb.topic_regex.is_none()
                && g.members.get(&hb.member_id).is_some_and(|m| m.regex.is_some())
            {
                return Wanted::All;
            }
        }
        Wanted::Names(names)
    }

    /// ConsumerGroupHeartbeat ([`Heartbeat::check`]ed first): joins, keeps, reconciles or
    /// removes the member.
    pub fn consumer_heartbeat(&self, hb: Heartbeat, view: &TopicView, now: Instant) -> Beat {
        if let Err((code, message)) = hb.check() {
            return Beat::error(code, message);
        }
        // Lock order: classic groups, then consumer groups.
        let classic = self.groups.lock();
        if classic.get(&hb.group).is_some_and(|g| !g.members.is_empty()) {
            return Beat::error(
                GROUP_ID_NOT_FOUND,
                format!("Group {} is not a consumer group.", hb.group),
            );
        }
        let mut groups = self.consumer_lock();
        drop(classic);
        let interval = hb.timeouts.heartbeat.unwrap_or(self.heartbeat_interval);
        if hb.member_epoch < 0 {
            return leave(&mut groups, &hb, interval);
        }
        if !groups.contains_key(&hb.group) {
            if hb.member_epoch != 0 {
                return Beat::error(
                    UNKNOWN_MEMBER_ID,
                    format!("Member {} is not a member of group {}.", hb.member_id, hb.group),
                );
            }
            if groups.len() >= MAX_GROUPS {
                return Beat::error(COORDINATOR_NOT_AVAILABLE, "too many groups on this broker");
            }
        }
        let g = groups.entry(hb.group.clone()).or_insert_with(Group::new);
        g.timeouts = hb.timeouts;
        let mut member_id = hb.member_id.clone();
        if member_id.is_empty() {
            // v0: the coordinator names the member.
            member_id = Uuid::new_v4().to_string();
        }
        if let Err(beat) = admit(g, &hb, &member_id, now) {
            return *beat;
        }
        let before = g.members.get(&member_id).map(|m| m.assigned.clone());
        let Some(m) = g.members.get_mut(&member_id) else {
            return Beat::error(code::UNKNOWN_SERVER_ERROR, "member vanished");
        };
        let is_new = before.is_none();
        let mut changed = false;
        if let Some(i) = &hb.instance_id {
            m.instance_id = Some(i.clone());
        }
        if let Some(r) = &hb.rack_id {
            m.rack_id = Some(r.clone());
        }
        if let Some(t) = hb.rebalance_timeout {
            m.rebalance_timeout = t;
        }
        if let Some(a) = &hb.assignor {
            m.assignor = Some(a.clone());
        }
        if let Some(names) = &hb.topic_names {
            let mut names = names.clone();
            names.sort();
            names.dedup();
            changed |= names != m.topic_names;
            m.topic_names = names;
        }
        if let Some(re) = &hb.topic_regex {
            let re = (!re.is_empty()).then(|| re.clone());
            if re != m.topic_regex {
                changed = true;
                m.regex = re.as_deref().and_then(|r| compile(r).ok());
                m.topic_regex = re;
            }
        }
        m.client_id = hb.client_id.clone();
        m.client_host = hb.client_host.clone();
        m.last_heard = now;
        m.away = false;
        let metadata_changed = g.refresh_metadata(view);
        if is_new || changed || metadata_changed {
            g.epoch += 1;
        }
        if g.epoch > g.assignment_epoch {
            g.assign();
        }
        g.reconcile(&member_id, hb.owned.as_ref(), now);
        let Some(m) = g.members.get(&member_id) else {
            return Beat::error(code::UNKNOWN_SERVER_ERROR, "member vanished");
        };
        let full = hb.member_epoch == 0
            || (hb.rebalance_timeout.is_some() && hb.topic_names.is_some() && hb.owned.is_some());
        let assignment = (full || before.as_ref() != Some(&m.assigned)).then(|| m.assigned.clone());
        Beat {
            error: code::NONE,
            message: None,
            member_id,
            member_epoch: m.epoch,
            heartbeat_interval: interval,
            assignment,
        }
    }

    /// May a member commit offsets (OffsetCommit `version`) at `epoch`? `None` when `group`
    /// is not a consumer group (the classic rules apply).
    ///
    /// At the member's epoch, any partition; at an older one, those it has held since that
    /// epoch or before (KIP-1251): its raised epoch may not have reached it yet (the answer
    /// waits for the group to be stored), while a zombie commit for a partition it gave up,
    /// or that another member holds, stays fenced.
    pub(super) fn consumer_check_commit(
        &self,
        group: &str,
        epoch: i32,
        member_id: &str,
        version: i16,
    ) -> Option<MayCommit> {
        let groups = self.consumer_lock();
        let g = groups.get(group)?;
        // An admin or simple consumer commits only while the group has no members.
        if epoch < 0 && member_id.is_empty() {
            return Some(MayCommit::All(if g.members.is_empty() {
                code::NONE
            } else {
                UNKNOWN_MEMBER_ID
            }));
        }
        let Some(m) = g.members.get(member_id) else {
            return Some(MayCommit::All(UNKNOWN_MEMBER_ID));
        };
        if version < 9 {
            return Some(MayCommit::All(code::UNSUPPORTED_VERSION));
        }
        if epoch >= m.epoch {
            return Some(MayCommit::All(if epoch == m.epoch {
                code::NONE
            } else {
                STALE_MEMBER_EPOCH
            }));
        }
        let held = g
            .metadata
            .iter()
            .flat_map(|(name, (id, _))| {
                let ps = m.assigned.get(id).into_iter().chain(m.revoking.get(id)).flatten();
                ps.filter(|p| m.held_since(id, **p).is_some_and(|since| since <= epoch))
                    .map(move |p| (name.clone(), *p))
            })
            .collect();
        Some(MayCommit::Only(held))
    }

    /// TxnOffsetCommit's check of a consumer group's member (`None` when `group` is not a
    /// consumer group): at its epoch only; an epoch not its own is ILLEGAL_GENERATION, as
    /// Kafka answers a transaction (its producer cannot act on STALE_MEMBER_EPOCH).
    pub(super) fn consumer_check_txn_commit(
        &self,
        group: &str,
        epoch: i32,
        member_id: &str,
    ) -> Option<i16> {
        let groups = self.consumer_lock();
        let g = groups.get(group)?;
        if epoch < 0 && g.members.is_empty() {
            return Some(code::NONE);
        }
        Some(match g.members.get(member_id) {
            None => UNKNOWN_MEMBER_ID,
            Some(m) if m.epoch != epoch => ILLEGAL_GENERATION,
            Some(_) => code::NONE,
        })
    }

    /// OffsetFetch v9's member check: UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH for a consumer
    /// group's member that is not this; NONE for an admin (no member id, epoch < 0) or any
    /// other group.
    pub fn check_offset_fetch(&self, group: &str, member_id: Option<&str>, epoch: i32) -> i16 {
        if epoch < 0 && member_id.is_none() {
            return code::NONE;
        }
        let groups = self.consumer_lock();
        let Some(g) = groups.get(group) else { return code::NONE };
        match g.members.get(member_id.unwrap_or_default()) {
            None => UNKNOWN_MEMBER_ID,
            Some(m) if m.epoch != epoch => STALE_MEMBER_EPOCH,
            Some(_) => code::NONE,
        }
    }

    /// Removes members silent past the session timeout and members that did not revoke
    /// within their rebalance timeout; forgets groups left without members.
    pub(super) fn consumer_tick(&self, now: Instant) -> Vec<String> {
        let mut groups = self.consumer_lock();
        for (name, g) in groups.iter_mut() {
            let session = g.timeouts.session.unwrap_or(self.consumer_session_timeout);
            let gone: Vec<(String, &'static str)> = g
                .members
                .iter()
                .filter_map(|(id, m)| {
                    if now.duration_since(m.last_heard) > session {
                        Some((id.clone(), "session expired"))
                    } else if m.revoke_deadline.is_some_and(|d| now >= d) {
                        Some((id.clone(), "did not revoke within its rebalance timeout"))
                    } else {
                        None
                    }
                })
                .collect();
            for (id, why) in gone {
                tracing::info!(group = %name, member = %id, "Kafka consumer group: {why}");
                g.remove(&id);
                g.dirty = true;
            }
        }
        // Groups left without members leave memory once stored so (the next request takes
        // them again, with their epoch).
        let gone: Vec<String> = groups
            .iter()
            .filter(|(_, g)| g.members.is_empty() && !g.dirty)
            .map(|(n, _)| n.clone())
            .collect();
        for n in &gone {
            groups.remove(n);
        }
        gone
    }

    pub(super) fn consumer_forget(&self, group: &str) {
        self.consumer_lock().remove(group);
    }

    /// The consumer groups held: name and state.
    pub fn consumer_list(&self) -> Vec<(String, State)> {
        let mut v: Vec<_> =
            self.consumer_lock().iter().map(|(n, g)| (n.clone(), g.state())).collect();
        v.sort();
        v
    }

    /// Whether `group` is a consumer group with members here.
    pub fn is_consumer_group(&self, group: &str) -> bool {
        self.consumer_lock().get(group).is_some_and(Group::has_members)
    }

    /// The topics a consumer group's members subscribe to (by name, and matched by regex).
    pub(super) fn consumer_subscribed(&self, group: &str) -> Option<Vec<String>> {
        let groups = self.consumer_lock();
        let g = groups.get(group).filter(|g| g.has_members())?;
        let mut topics: BTreeSet<String> = g.metadata.keys().cloned().collect();
        for m in g.members.values() {
            topics.extend(m.topic_names.iter().cloned());
        }
        Some(topics.into_iter().collect())
    }

    pub fn consumer_describe(&self, group: &str) -> Option<Described> {
        let groups = self.consumer_lock();
        let g = groups.get(group)?;
        let mut members: Vec<DescribedMember> = g
            .members
            .iter()
            .map(|(id, m)| DescribedMember {
                member_id: id.clone(),
                instance_id: m.instance_id.clone(),
                rack_id: m.rack_id.clone(),
                member_epoch: m.epoch,
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                topic_names: m.topic_names.clone(),
                topic_regex: m.topic_regex.clone(),
                assignment: m.assigned.clone(),
                target: g.target.get(id).cloned().unwrap_or_default(),
            })
            .collect();
        members.sort_by(|a, b| a.member_id.cmp(&b.member_id));
        Some(Described {
            state: g.state(),
            epoch: g.epoch,
            assignment_epoch: g.assignment_epoch,
            assignor: g.assignor().to_owned(),
            members,
            topic_names: g.metadata.iter().map(|(n, (id, _))| (*id, n.clone())).collect(),
        })
    }
}

/// Finds or creates the member a (non-leaving) heartbeat is from, with Kafka's checks.
fn admit(g: &mut Group, hb: &Heartbeat, member_id: &str, now: Instant) -> Result<(), Box<Beat>> {
    let fail = |code: i16, message: String| Err(Box::new(Beat::error(code, message)));
    let joining = hb.member_epoch == 0;
    let known = g.members.contains_key(member_id);
    if !known && g.members.len() >= MAX_MEMBERS {
        return fail(
            GROUP_MAX_SIZE_REACHED,
            format!(
                "The consumer group has reached its maximum capacity of {MAX_MEMBERS} members."
            ),
        );
    }
    if let Some(instance) = &hb.instance_id {
        let existing = g.instances.get(instance).cloned();
        if joining {
            match existing {
                Some(old) if old != member_id => {
                    let away = g.members.get(&old).is_some_and(|m| m.away);
                    if !away {
                        return fail(
                            UNRELEASED_INSTANCE_ID,
                            format!(
                                "Static member {old} with instance id {instance} is still in the group; it must leave first."
                            ),
                        );
                    }
                    // The new incarnation takes over the old one's partitions and target.
                    if let Some(mut m) = g.members.remove(&old) {
                        m.epoch = 0;
                        m.previous_epoch = 0;
                        // It held nothing at any earlier epoch.
                        m.since.clear();
                        m.away = false;
                        g.members.insert(member_id.to_owned(), m);
                    }
                    if let Some(t) = g.target.remove(&old) {
                        g.target.insert(member_id.to_owned(), t);
                    }
                    g.instances.insert(instance.clone(), member_id.to_owned());
                    return Ok(());
                }
                _ => {
                    g.instances.insert(instance.clone(), member_id.to_owned());
                }
            }
        } else {
            match existing {
                None => {
                    return fail(UNKNOWN_MEMBER_ID, format!("Instance id {instance} is unknown."));
                }
                Some(old) if old != member_id => {
                    return fail(
                        FENCED_INSTANCE_ID,
                        format!(
                            "Static member {member_id} with instance id {instance} was replaced by {old}."
                        ),
                    );
                }
                Some(_) => {}
            }
        }
    }
    match g.members.get_mut(member_id) {
        None if joining => {
            g.members.insert(member_id.to_owned(), Member::new(now));
        }
        None => {
            return fail(
                UNKNOWN_MEMBER_ID,
                format!("Member {member_id} is not a member of group {}.", hb.group),
            );
        }
        // Rejoining having dropped every partition.
        Some(m) if joining => m.reset(),
        Some(m) => {
            let e = hb.member_epoch;
            let fenced = e > m.epoch
                || (e < m.epoch
                    && (e != m.previous_epoch || !is_subset(hb.owned.as_ref(), &m.assigned)));
            if fenced {
                return fail(
                    FENCED_MEMBER_EPOCH,
                    format!(
                        "The consumer group member has epoch {e}; the coordinator knows {}. The member must abandon all its partitions and rejoin.",
                        m.epoch
                    ),
                );
            }
        }
    }
    Ok(())
}

/// Epoch -1 (leave) or -2 (a static member away for a while).
fn leave(groups: &mut HashMap<String, Group>, hb: &Heartbeat, interval: Duration) -> Beat {
    let unknown = || {
        Beat::error(
            UNKNOWN_MEMBER_ID,
            format!("Member {} is not a member of group {}.", hb.member_id, hb.group),
        )
    };
    let Some(g) = groups.get_mut(&hb.group) else { return unknown() };
    let id = match &hb.instance_id {
        Some(i) => match g.instances.get(i) {
            Some(known) if *known != hb.member_id => {
                return Beat::error(
                    FENCED_INSTANCE_ID,
                    format!("Instance id {i} belongs to member {known}."),
                );
            }
            Some(known) => known.clone(),
            None => return unknown(),
        },
        None => hb.member_id.clone(),
    };
    if !g.members.contains_key(&id) {
        return unknown();
    }
    if hb.member_epoch == -2 {
        if let Some(m) = g.members.get_mut(&id) {
            m.away = true;
        }
    } else {
        g.remove(&id);
    }
    g.dirty = true;
    Beat {
        error: code::NONE,
        message: None,
        member_id: id,
        member_epoch: hb.member_epoch,
        heartbeat_interval: interval,
        assignment: None,
    }
}

/// A consumer group as its coordinator stores it (inside the classic group's stored record).
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct StoredConsumer {
    #[prost(int32, tag = "1")]
    epoch: i32,
    #[prost(int32, tag = "2")]
    assignment_epoch: i32,
    #[prost(message, repeated, tag = "3")]
    members: Vec<StoredMember>,
    #[prost(message, repeated, tag = "4")]
    target: Vec<StoredTarget>,
    #[prost(message, repeated, tag = "5")]
    metadata: Vec<StoredTopic>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct StoredMember {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(int32, tag = "2")]
    epoch: i32,
    #[prost(int32, tag = "3")]
    previous_epoch: i32,
    /// 0 stable, 1 unrevoked, 2 unreleased.
    #[prost(uint32, tag = "4")]
    state: u32,
    #[prost(message, repeated, tag = "5")]
    assigned: Vec<StoredPartitions>,
    #[prost(message, repeated, tag = "6")]
    revoking: Vec<StoredPartitions>,
    #[prost(string, optional, tag = "7")]
    instance_id: Option<String>,
    #[prost(string, optional, tag = "8")]
    rack_id: Option<String>,
    #[prost(string, tag = "9")]
    client_id: String,
    #[prost(string, tag = "10")]
    client_host: String,
    #[prost(string, repeated, tag = "11")]
    topic_names: Vec<String>,
    #[prost(string, optional, tag = "12")]
    topic_regex: Option<String>,
    #[prost(string, optional, tag = "13")]
    assignor: Option<String>,
    #[prost(uint64, tag = "14")]
    rebalance_timeout_ms: u64,
    #[prost(bool, tag = "15")]
    away: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
struct StoredPartitions {
    #[prost(bytes = "vec", tag = "1")]
    topic_id: Vec<u8>,
    #[prost(int32, repeated, tag = "2")]
    partitions: Vec<i32>,
    /// A member's: the epoch since which it holds each partition (none for a target).
    #[prost(int32, repeated, tag = "3")]
    since: Vec<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct StoredTarget {
    #[prost(string, tag = "1")]
    member: String,
    #[prost(message, repeated, tag = "2")]
    assignment: Vec<StoredPartitions>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct StoredTopic {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(bytes = "vec", tag = "2")]
    id: Vec<u8>,
    #[prost(uint32, tag = "3")]
    partitions: u32,
}

impl StoredConsumer {
    pub(super) fn member_count(&self) -> usize {
        self.members.len()
    }
}

fn stored_partitions(a: &Assignment) -> Vec<StoredPartitions> {
    a.iter()
        .map(|(t, ps)| StoredPartitions {
            topic_id: t.as_bytes().to_vec(),
            partitions: ps.iter().copied().collect(),
            since: Vec::new(),
        })
        .collect()
}

/// A member's partitions as stored, each with the epoch since which it holds it.
fn stored_held(a: &Assignment, m: &Member) -> Vec<StoredPartitions> {
    let mut stored = stored_partitions(a);
    for (s, (t, ps)) in stored.iter_mut().zip(a) {
        s.since = ps.iter().map(|p| m.held_since(t, *p).unwrap_or(m.epoch)).collect();
    }
    stored
}

/// The epochs since which a member holds its stored partitions (those stored with one).
fn since_of(stored: &[StoredPartitions]) -> impl Iterator<Item = ((Uuid, i32), i32)> + '_ {
    stored.iter().flat_map(|s| {
        let topic = Uuid::from_slice(&s.topic_id).ok();
        s.partitions.iter().zip(&s.since).filter_map(move |(p, e)| Some(((topic?, *p), *e)))
    })
}

fn assignment_of(stored: Vec<StoredPartitions>) -> Assignment {
    stored
        .into_iter()
        .filter_map(|p| {
            Some((Uuid::from_slice(&p.topic_id).ok()?, p.partitions.into_iter().collect()))
        })
        .collect()
}

impl Group {
    /// The group as stored (members sorted, so equal groups encode equal).
    pub(super) fn to_stored(&self) -> StoredConsumer {
        let mut members: Vec<StoredMember> = self
            .members
            .iter()
            .map(|(id, m)| StoredMember {
                id: id.clone(),
                epoch: m.epoch,
                previous_epoch: m.previous_epoch,
                state: match m.state {
                    Reconciling::Stable => 0,
                    Reconciling::Unrevoked => 1,
                    Reconciling::Unreleased => 2,
                },
                assigned: stored_held(&m.assigned, m),
                revoking: stored_held(&m.revoking, m),
                instance_id: m.instance_id.clone(),
                rack_id: m.rack_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                topic_names: m.topic_names.clone(),
                topic_regex: m.topic_regex.clone(),
                assignor: m.assignor.clone(),
                rebalance_timeout_ms: m.rebalance_timeout.as_millis() as u64,
                away: m.away,
            })
            .collect();
        members.sort_by(|a, b| a.id.cmp(&b.id));
        let mut target: Vec<StoredTarget> = self
            .target
            .iter()
            .map(|(m, a)| StoredTarget { member: m.clone(), assignment: stored_partitions(a) })
            .collect();
        target.sort_by(|a, b| a.member.cmp(&b.member));
        StoredConsumer {
            epoch: self.epoch,
            assignment_epoch: self.assignment_epoch,
            members,
            target,
            metadata: self
                .metadata
                .iter()
                .map(|(name, (id, n))| StoredTopic {
                    name: name.clone(),
                    id: id.as_bytes().to_vec(),
                    partitions: *n,
                })
                .collect(),
        }
    }

    /// The group a stored state describes, its members heard from `now` (a member still to
    /// revoke has its rebalance timeout from now).
    pub(super) fn from_stored(s: StoredConsumer, now: Instant) -> Group {
        let mut g = Group::new();
        g.epoch = s.epoch;
        g.assignment_epoch = s.assignment_epoch;
        for m in s.members {
            let mut member = Member::new(now);
            member.epoch = m.epoch;
            member.previous_epoch = m.previous_epoch;
            member.state = match m.state {
                1 => Reconciling::Unrevoked,
                2 => Reconciling::Unreleased,
                _ => Reconciling::Stable,
            };
            member.since = since_of(&m.assigned).chain(since_of(&m.revoking)).collect();
            member.assigned = assignment_of(m.assigned);
            member.revoking = assignment_of(m.revoking);
            member.rack_id = m.rack_id;
            member.client_id = m.client_id;
            member.client_host = m.client_host;
            member.topic_names = m.topic_names;
            member.regex = m.topic_regex.as_deref().and_then(|r| compile(r).ok());
            member.topic_regex = m.topic_regex;
            member.assignor = m.assignor;
            member.rebalance_timeout = Duration::from_millis(m.rebalance_timeout_ms);
            member.away = m.away;
            if member.state == Reconciling::Unrevoked {
                member.revoke_deadline = Some(now + member.rebalance_timeout);
            }
            if let Some(i) = &m.instance_id {
                g.instances.insert(i.clone(), m.id.clone());
            }
            member.instance_id = m.instance_id;
            g.members.insert(m.id, member);
        }
        g.target = s.target.into_iter().map(|t| (t.member, assignment_of(t.assignment))).collect();
        g.metadata = s
            .metadata
            .into_iter()
            .filter_map(|t| Some((t.name, (Uuid::from_slice(&t.id).ok()?, t.partitions))))
            .collect();
        g
    }
}

impl Groups {
    /// A consumer group resumed from its stored state.
    pub(super) fn consumer_resume(
        &self,
        group: &str,
        s: StoredConsumer,
        quiet_since_ms: i64,
        bytes: bytes::Bytes,
        now: Instant,
    ) {
        let mut g = Group::from_stored(s, now);
        g.stored = Some(bytes);
        g.quiet_since_ms = quiet_since_ms;
        self.consumer_lock().insert(group.to_owned(), g);
    }

    /// The consumer group's state to store, if it changed since it was last stored (`all`:
    /// whatever changed it; else only what a tick or a leave changed).
    pub(super) fn consumer_changed(&self, group: &str) -> Option<bytes::Bytes> {
        let mut groups = self.consumer_lock();
        let g = groups.get_mut(group)?;
        let quiet = if g.members.is_empty() { g.quiet_since_ms } else { 0 };
        let state = super::stored::encode_consumer(g.to_stored(), quiet)?;
        g.dirty = false;
        (g.stored.as_ref() != Some(&state)).then_some(state)
    }

    /// The consumer groups a tick or a leave changed.
    pub(super) fn consumer_dirty(&self) -> Vec<String> {
        self.consumer_lock().iter().filter(|(_, g)| g.dirty).map(|(n, _)| n.clone()).collect()
    }

    /// The consumer group's state as stored now.
    pub(super) fn consumer_stored(&self, group: &str, state: bytes::Bytes) {
        if let Some(g) = self.consumer_lock().get_mut(group) {
            g.stored = Some(state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T1: Uuid = Uuid::from_u128(1);
    const T2: Uuid = Uuid::from_u128(2);

    fn view(topics: &[(&str, Uuid, u32)]) -> TopicView {
        TopicView {
            topics: topics.iter().map(|(n, id, p)| ((*n).to_owned(), (*id, *p))).collect(),
            looked: BTreeSet::new(),
            complete: true,
        }
    }

    fn join(group: &str, member: &str, topics: &[&str]) -> Heartbeat {
        Heartbeat {
            group: group.to_owned(),
            member_id: member.to_owned(),
            member_epoch: 0,
            rebalance_timeout: Some(Duration::from_secs(30)),
            topic_names: Some(topics.iter().map(|t| (*t).to_owned()).collect()),
            owned: Some(Assignment::new()),
            client_id: member.to_owned(),
            client_host: "/127.0.0.1".to_owned(),
            ..Default::default()
        }
    }

    fn beat(group: &str, member: &str, epoch: i32, owned: Option<&Assignment>) -> Heartbeat {
        Heartbeat {
            group: group.to_owned(),
            member_id: member.to_owned(),
            member_epoch: epoch,
            owned: owned.cloned(),
            ..Default::default()
        }
    }

    fn groups() -> Groups {
        Groups::new(Duration::ZERO)
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    /// Heartbeats `member` until it is stable, as a client does: owning what it was told.
    fn settle(g: &Groups, v: &TopicView, member: &str, b: Beat, now: Instant) -> Beat {
        settle_in(g, "g", v, member, b, now)
    }

    fn settle_in(
        g: &Groups,
        group: &str,
        v: &TopicView,
        member: &str,
        mut b: Beat,
        now: Instant,
    ) -> Beat {
        let mut owned = b.assignment.clone().unwrap_or_default();
        for _ in 0..10 {
            let next =
                g.consumer_heartbeat(beat(group, member, b.member_epoch, Some(&owned)), v, now);
            assert_eq!(next.error, code::NONE, "{next:?}");
            if let Some(a) = &next.assignment {
                owned = a.clone();
            }
            let done = next.member_epoch == b.member_epoch && next.assignment.is_none();
            b = Beat { assignment: Some(owned.clone()), ..next };
            if done {
                break;
            }
        }
        b
    }

    #[test]
    fn a_joining_member_gets_partitions_only_after_the_owner_revokes_them() {
        let (g, t0) = (groups(), Instant::now());
        let v = view(&[("a", T1, 4)]);
        let one = g.consumer_heartbeat(join("g", "m1", &["a"]), &v, t0);
        assert_eq!((one.error, one.member_epoch), (code::NONE, 1));
        assert_eq!(one.assignment.as_ref().map(count), Some(4));
        let m1_owned = one.assignment.clone().unwrap_or_default();

        // m2 joins: the target splits 2/2, but m1 still owns all four.
        let two = g.consumer_heartbeat(join("g", "m2", &["a"]), &v, t0);
        assert_eq!(two.member_epoch, 2);
        assert_eq!(two.assignment.as_ref().map(count), Some(0), "{two:?}");
        assert_eq!(g.consumer_describe("g").map(|d| d.state), Some(State::Reconciling));

        // m1 is told to keep two; it stays at epoch 1 until it says it gave the others up.
        let r = g.consumer_heartbeat(beat("g", "m1", 1, Some(&m1_owned)), &v, t0);
        assert_eq!(r.member_epoch, 1);
        let kept = r.assignment.clone().unwrap_or_default();
        assert_eq!(count(&kept), 2);
        let again = g.consumer_heartbeat(beat("g", "m1", 1, Some(&m1_owned)), &v, t0);
        assert_eq!((again.member_epoch, again.assignment), (1, None));
        // m2 still waits for them.
        let w = g.consumer_heartbeat(beat("g", "m2", 2, Some(&Assignment::new())), &v, t0);
        assert_eq!(w.assignment, None);
        // Revoked: m1 moves to epoch 2; then m2 gets the released two.
        let r = g.consumer_heartbeat(beat("g", "m1", 1, Some(&kept)), &v, t0);
        assert_eq!(r.member_epoch, 2);
        let w = g.consumer_heartbeat(beat("g", "m2", 2, Some(&Assignment::new())), &v, t0);
        let got = w.assignment.clone().unwrap_or_default();
        assert_eq!(count(&got), 2);
        assert!(!overlaps(&got, &kept), "{got:?} {kept:?}");
        assert_eq!(g.consumer_describe("g").map(|d| d.state), Some(State::Stable));
    }

    #[test]
    fn epochs_are_fenced_except_the_previous_one_with_owned_partitions_inside() {
        let (g, t0) = (groups(), Instant::now());
        let v = view(&[("a", T1, 2)]);
        let one = g.consumer_heartbeat(join("g", "m1", &["a"]), &v, t0);
        let owned = one.assignment.clone().unwrap_or_default();
        // Ahead of the coordinator.
        let b = g.consumer_heartbeat(beat("g", "m1", 7, Some(&owned)), &v, t0);
        assert_eq!(b.error, FENCED_MEMBER_EPOCH);
        // m2 joins and leaves: m1 reconciles to epoch 3, owning the same partitions.
        let two = g.consumer_heartbeat(join("g", "m2", &["a"]), &v, t0);
        let r = g.consumer_heartbeat(beat("g", "m1", 1, Some(&owned)), &v, t0);
        let kept = r.assignment.clone().unwrap_or_default();
        let r = g.consumer_heartbeat(beat("g", "m1", 1, Some(&kept)), &v, t0);
        assert_eq!(r.member_epoch, 2);
        // The answer with epoch 2 was lost: epoch 1 with owned ⊆ assigned is accepted...
        let lost = g.consumer_heartbeat(beat("g", "m1", 1, Some(&kept)), &v, t0);
        assert_eq!((lost.error, lost.member_epoch), (code::NONE, 2));
        // ...but not without owned partitions, nor with partitions it no longer has.
        let b = g.consumer_heartbeat(beat("g", "m1", 1, None), &v, t0);
        assert_eq!(b.error, FENCED_MEMBER_EPOCH);
        let b = g.consumer_heartbeat(beat("g", "m1", 1, Some(&owned)), &v, t0);
        assert_eq!(b.error, FENCED_MEMBER_EPOCH);
        // Unknown members and groups.
        let b = g.consumer_heartbeat(beat("g", "nobody", 2, None), &v, t0);
        assert_eq!(b.error, UNKNOWN_MEMBER_ID);
        let b = g.consumer_heartbeat(beat("h", "m1", 2, None), &v, t0);
        assert_eq!(b.error, UNKNOWN_MEMBER_ID);
        // Commits at OffsetCommit v9+: at the member's epoch, any partition; at an older
        // epoch, the partitions held since then (KIP-1251); never at a newer one.
        let commit = |epoch, p| g.check_commit("g", epoch, "m1", None, 9).code("a", p);
        let held = |p: &i32| kept.get(&T1).is_some_and(|s| s.contains(p));
        for p in 0..2 {
            assert_eq!(commit(2, p), code::NONE);
            let at_one = if held(&p) { code::NONE } else { STALE_MEMBER_EPOCH };
            assert_eq!(commit(1, p), at_one, "partition {p} at epoch 1");
            assert_eq!(commit(0, p), STALE_MEMBER_EPOCH, "partition {p} at epoch 0");
            assert_eq!(commit(3, p), STALE_MEMBER_EPOCH, "partition {p} at epoch 3");
        }
        assert_eq!(g.check_commit("g", 1, "m1", None, 9).code("b", 0), STALE_MEMBER_EPOCH);
        // The epochs since which partitions are held survive the group being stored.
        let stored = g.consumer_lock()["g"].to_stored();
        let resumed = Group::from_stored(stored.clone(), t0).to_stored();
        assert_eq!(resumed, stored);
        assert!(stored.members.iter().all(|m| m.assigned.iter().all(|a| !a.since.is_empty())));
        let refused = |epoch, member: &str, v| g.check_commit("g", epoch, member, None, v);
        assert_eq!(refused(2, "m1", 8), MayCommit::All(code::UNSUPPORTED_VERSION));
        assert_eq!(refused(2, "zz", 9), MayCommit::All(UNKNOWN_MEMBER_ID));
        assert_eq!(refused(-1, "", 9), MayCommit::All(UNKNOWN_MEMBER_ID));
        assert_eq!(g.check_offset_fetch("g", Some("m1"), 1), STALE_MEMBER_EPOCH);
        assert_eq!(g.check_offset_fetch("g", Some("m1"), 2), code::NONE);
        assert_eq!(g.check_offset_fetch("g", None, -1), code::NONE);
        // A known member rejoining at epoch 0 is taken back (it dropped everything).
        let back = g.consumer_heartbeat(join("g", "m1", &["a"]), &v, t0);
        assert_eq!(back.error, code::NONE);
        let _ = two;
    }

    #[test]
    fn leaving_silence_and_missed_revocations_remove_members() {
        let (g, t0) = (groups(), Instant::now());
        let v = view(&[("a", T1, 6)]);
        let one = g.consumer_heartbeat(join("g", "m1", &["a"]), &v, t0);
        let one = settle(&g, &v, "m1", one, t0);
        let two = g.consumer_heartbeat(join("g", "m2", &["a"]), &v, t0);
        // m1 never revokes: after its rebalance timeout (30 s) it is removed and m2 gets all.
        let r = g.consumer_heartbeat(
            beat("g", "m1", one.member_epoch, one.assignment.as_ref()),
            &v,
            t0,
        );
        assert_eq!(r.assignment.as_ref().map(count), Some(3));
        g.tick(t0 + Duration::from_secs(31));
        let w = g.consumer_heartbeat(
            beat("g", "m2", two.member_epoch, Some(&Assignment::new())),
            &v,
            t0 + Duration::from_secs(31),
        );
        let w = settle(&g, &v, "m2", w, t0 + Duration::from_secs(31));
        assert_eq!(w.assignment.as_ref().map(count), Some(6), "{w:?}");
        let gone = g.consumer_heartbeat(beat("g", "m1", one.member_epoch, None), &v, t0);
        assert_eq!(gone.error, UNKNOWN_MEMBER_ID);

        // Silence past the session timeout (45 s) removes m2: the group is empty (kept until
        // stored so, then it leaves memory).
        g.tick(t0 + Duration::from_secs(31 + 46));
        let left = g.consumer_describe("g").map(|d| (d.state, d.members.len()));
        assert_eq!(left, Some((State::Empty, 0)));

        // Leaving: the rest take over at once.
        let a = g.consumer_heartbeat(join("h", "a", &["a"]), &v, t0);
        let b = g.consumer_heartbeat(join("h", "b", &["a"]), &v, t0);
        let left = g.consumer_heartbeat(
            Heartbeat { member_epoch: -1, ..beat("h", "a", -1, None) },
            &v,
            t0,
        );
        assert_eq!((left.error, left.member_epoch), (code::NONE, -1));
        let b = Beat { assignment: Some(Assignment::new()), ..b };
        let b = settle_in(&g, "h", &v, "b", b, t0);
        assert_eq!(b.assignment.as_ref().map(count), Some(6));
        let _ = a;
    }

    #[test]
    fn a_groups_own_timeouts_set_its_heartbeat_interval_and_session() {
        let (g, t0) = (groups(), Instant::now());
        let v = view(&[("a", T1, 2)]);
        let own = Timeouts {
            session: Some(Duration::from_secs(55)),
            heartbeat: Some(Duration::from_secs(7)),
        };
        let joined =
            g.consumer_heartbeat(Heartbeat { timeouts: own, ..join("g", "m", &["a"]) }, &v, t0);
        assert_eq!(joined.heartbeat_interval, Duration::from_secs(7), "the group's own");
        let other = g.consumer_heartbeat(join("h", "m", &["a"]), &v, t0);
        assert_eq!(other.heartbeat_interval, Duration::from_secs(5), "the coordinator's");
        // Past the coordinator's 45 s, within the group's 55 s: only the other group's member
        // is removed.
        g.tick(t0 + Duration::from_secs(50));
        let members = |group: &str| g.consumer_describe(group).map(|d| d.members.len());
        assert_eq!((members("g"), members("h")), (Some(1), Some(0)));
        g.tick(t0 + Duration::from_secs(56));
        assert_eq!(members("g"), Some(0), "silent past its own session timeout");
        // Set back to the defaults: its next heartbeat carries none.
        let back = g.consumer_heartbeat(join("g", "m2", &["a"]), &v, t0 + Duration::from_secs(60));
        assert_eq!(back.heartbeat_interval, Duration::from_secs(5));
    }

    #[test]
    fn a_static_member_away_keeps_its_partitions_for_its_next_incarnation() {
        let (g, t0) = (groups(), Instant::now());
        let v = view(&[("a", T1, 4)]);
        let with = |mut h: Heartbeat, i: &str| {
            h.instance_id = Some(i.to_owned());
            h
        };
        let a = g.consumer_heartbeat(with(join("g", "a1", &["a"]), "A"), &v, t0);
        let a = settle(&g, &v, "a1", a, t0);
        let b = g.consumer_heartbeat(with(join("g", "b1", &["a"]), "B"), &v, t0);
        let _ = g.consumer_heartbeat(
            with(beat("g", "a1", a.member_epoch, a.assignment.as_ref()), "A"),
            &v,
            t0,
        );
        let b = settle(&g, &v, "b1", b, t0);
        let a_parts = g
            .consumer_describe("g")
            .and_then(|d| d.members.into_iter().find(|m| m.member_id == "a1"))
            .map(|m| m.target)
            .unwrap_or_default();
        // Another process with instance A while a1 is in the group: refused.
        let dup = g.consumer_heartbeat(with(join("g", "a2", &["a"]), "A"), &v, t0);
        assert_eq!(dup.error, UNRELEASED_INSTANCE_ID);
        // a1 leaves for a while (-2): the group epoch stays, and a2 takes a1's partitions.
        let epoch = g.consumer_describe("g").map(|d| d.epoch);
        let away = g.consumer_heartbeat(with(beat("g", "a1", -2, None), "A"), &v, t0);
        assert_eq!((away.error, away.member_epoch), (code::NONE, -2));
        let a2 = g.consumer_heartbeat(with(join("g", "a2", &["a"]), "A"), &v, t0);
        assert_eq!(a2.error, code::NONE, "{a2:?}");
        assert_eq!(a2.assignment, Some(a_parts));
        assert_eq!(g.consumer_describe("g").map(|d| d.epoch), epoch);
        // The old incarnation is fenced.
        let old = g.consumer_heartbeat(with(beat("g", "a1", 3, None), "A"), &v, t0);
        assert_eq!(old.error, FENCED_INSTANCE_ID);
        let _ = b;
    }

    #[test]
    fn topic_changes_and_subscriptions_reassign() {
        let (g, t0) = (groups(), Instant::now());
        let v1 = view(&[("a", T1, 2)]);
        let one = g.consumer_heartbeat(join("g", "m", &["a", "b"]), &v1, t0);
        assert_eq!(one.assignment.as_ref().map(count), Some(2));
        // Topic b appears: a new epoch with its partitions.
        let v2 = view(&[("a", T1, 2), ("b", T2, 3)]);
        let r = g.consumer_heartbeat(beat("g", "m", 1, one.assignment.as_ref()), &v2, t0);
        assert_eq!(r.member_epoch, 2);
        assert_eq!(r.assignment.as_ref().map(count), Some(5));
        // A regex subscription replaces the names: only b matches.
        let mut re = beat("g", "m", 2, r.assignment.as_ref());
        re.topic_names = Some(Vec::new());
        re.topic_regex = Some("b|c.*".to_owned());
        let r = g.consumer_heartbeat(re, &v2, t0);
        let kept = r.assignment.clone().unwrap_or_default();
        assert_eq!(kept.keys().copied().collect::<Vec<_>>(), vec![T2], "{r:?}");
    }

    #[test]
    fn bad_heartbeats_are_refused_with_kafkas_codes() {
        let (g, t0) = (groups(), Instant::now());
        let v = view(&[("a", T1, 2)]);
        let mut h = join("g", "m", &["a"]);
        h.rebalance_timeout = None;
        assert_eq!(g.consumer_heartbeat(h, &v, t0).error, code::INVALID_REQUEST);
        let mut h = join("g", "m", &["a"]);
        h.owned = None;
        assert_eq!(g.consumer_heartbeat(h, &v, t0).error, code::INVALID_REQUEST);
        let mut h = join("g", "m", &["a"]);
        h.topic_names = None;
        assert_eq!(g.consumer_heartbeat(h, &v, t0).error, code::INVALID_REQUEST);
        let mut h = join("g", "m", &["a"]);
        h.assignor = Some("sticky".to_owned());
        assert_eq!(g.consumer_heartbeat(h, &v, t0).error, UNSUPPORTED_ASSIGNOR);
        let mut h = join("g", "m", &["a"]);
        h.topic_regex = Some("(".to_owned());
        assert_eq!(g.consumer_heartbeat(h, &v, t0).error, INVALID_REGULAR_EXPRESSION);
        assert_eq!(
            g.consumer_heartbeat(beat("g", "m", -3, None), &v, t0).error,
            code::INVALID_REQUEST
        );
        assert_eq!(
            g.consumer_heartbeat(beat("g", "", 4, None), &v, t0).error,
            code::INVALID_REQUEST
        );
        assert_eq!(
            g.consumer_heartbeat(join("", "m", &["a"]), &v, t0).error,
            code::INVALID_REQUEST
        );
        // v0: the coordinator names a member that comes without an id.
        let named = g.consumer_heartbeat(join("g", "", &["a"]), &v, t0);
        assert_eq!(named.error, code::NONE);
        assert!(!named.member_id.is_empty());
    }

    #[test]
    fn uniform_balances_and_keeps_partitions_where_it_can() {
        let md: BTreeMap<String, (Uuid, u32)> =
            [("a".to_owned(), (T1, 7)), ("b".to_owned(), (T2, 5))].into_iter().collect();
        let all: BTreeSet<String> = ["a", "b"].iter().map(|s| (*s).to_owned()).collect();
        let subs: Vec<(String, BTreeSet<String>)> =
            (0..3).map(|i| (format!("m{i}"), all.clone())).collect();
        let first = uniform(&subs, &md, &HashMap::new());
        let counts: Vec<usize> = subs.iter().map(|(m, _)| count(&first[m])).collect();
        assert_eq!(counts.iter().sum::<usize>(), 12);
        assert!(counts.iter().all(|c| *c == 4), "{counts:?}");
        // A fourth member: each of the three gives up exactly one partition.
        let mut four = subs.clone();
        four.push(("m3".to_owned(), all.clone()));
        let next = uniform(&four, &md, &first);
        for (m, _) in &subs {
            let kept = next[m]
                .iter()
                .map(|(t, ps)| first[m].get(t).map_or(0, |q| ps.intersection(q).count()))
                .sum::<usize>();
            assert_eq!((count(&next[m]), kept), (3, 3), "{m}");
        }
        assert_eq!(count(&next["m3"]), 3);
        // Heterogeneous: a member only on b gets only b's partitions.
        let only_b: BTreeSet<String> = ["b".to_owned()].into_iter().collect();
        let het = vec![("x".to_owned(), all.clone()), ("y".to_owned(), only_b)];
        let a = uniform(&het, &md, &HashMap::new());
        assert!(a["y"].keys().all(|t| *t == T2));
        assert_eq!(count(&a["x"]) + count(&a["y"]), 12);
        assert_eq!(count(&a["x"]), 7 + 5 - count(&a["y"]));
        assert!(count(&a["y"]) >= 5, "{a:?}");
    }

    #[test]
    fn range_gives_contiguous_ranges_per_topic() {
        let md: BTreeMap<String, (Uuid, u32)> =
            [("a".to_owned(), (T1, 5)), ("b".to_owned(), (T2, 5))].into_iter().collect();
        let all: BTreeSet<String> = ["a", "b"].iter().map(|s| (*s).to_owned()).collect();
        let subs = vec![("m0".to_owned(), all.clone()), ("m1".to_owned(), all)];
        let r = range(&subs, &md);
        let m0: Vec<i32> = r["m0"][&T1].iter().copied().collect();
        let m1: Vec<i32> = r["m1"][&T1].iter().copied().collect();
        assert_eq!((m0, m1), (vec![0, 1, 2], vec![3, 4]));
        assert_eq!(r["m0"][&T1], r["m0"][&T2], "co-partitioned topics line up");
    }
}
