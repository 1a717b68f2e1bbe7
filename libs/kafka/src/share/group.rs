//! A share group's membership at its coordinator (KIP-932's `ShareGroup`): members join with
//! an id they made, heartbeat at their epoch, and are given every partition of the topics they
//! subscribe to (Kafka's simple assignor, as it assigns when members outnumber partitions:
//! a share-partition's records are shared out per fetch, not per member). The group's epoch
//! moves when a member joins, leaves, is removed, or when what a member is given changes (a
//! subscription, a topic's partitions); a member is told its assignment with each new epoch.
//!
//! Membership is held in memory only: nothing a member holds depends on it (its records are
//! the share-partitions' owners' to lend, by member id), so a new coordinator answers a
//! member it does not know UNKNOWN_MEMBER_ID, and the member joins again under the same id
//! with what it held untouched. Time is passed in.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::code;
use crate::groups::consumer::Assignment;
use crate::groups::consumer::errors::FENCED_MEMBER_EPOCH;
use crate::groups::errors::{GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID};
use crate::groups::{MAX_GROUPS, MAX_MEMBERS};

/// A ShareGroupHeartbeat as the coordinator needs it; `topics` is `None` when unchanged.
#[derive(Clone, Debug, Default)]
pub struct Heartbeat {
    pub group: String,
    pub member_id: String,
    /// 0 to join, -1 to leave.
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    pub topics: Option<Vec<String>>,
    pub client_id: String,
    pub client_host: String,
    /// How long the member may be silent (the group's `share.session.timeout.ms`).
    pub session_timeout: Duration,
}

/// A heartbeat's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Beat {
    pub error: i16,
    pub message: Option<String>,
    pub member_epoch: i32,
    /// Given with each new epoch of the member.
    pub assignment: Option<Assignment>,
}

impl Beat {
    fn refused(error: i16, message: impl Into<String>) -> Beat {
        Beat { error, message: Some(message.into()), member_epoch: -1, assignment: None }
    }
}

/// The subscribed topics as the heartbeat found them: name → (id, partitions).
pub type Topics = BTreeMap<String, (Uuid, u32)>;

#[derive(Clone, Debug)]
struct Member {
    epoch: i32,
    rack_id: Option<String>,
    client_id: String,
    client_host: String,
    topics: BTreeSet<String>,
    assignment: Assignment,
    last_heard: Instant,
    session_timeout: Duration,
}

/// One share group.
#[derive(Clone, Debug, Default)]
pub struct Group {
    epoch: i32,
    members: BTreeMap<String, Member>,
}

/// A member as ShareGroupDescribe shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescribedMember {
    pub member_id: String,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub topics: Vec<String>,
    pub assignment: Assignment,
}

/// A share group as ShareGroupDescribe shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Described {
    pub epoch: i32,
    pub members: Vec<DescribedMember>,
}

impl Described {
    /// Kafka's share group states: Empty or Stable (it has no rebalance to wait for).
    pub fn state(&self) -> &'static str {
        if self.members.is_empty() { "Empty" } else { "Stable" }
    }
}

/// What a member is given: every partition of each topic it subscribes to that exists.
fn assignment_of(topics: &BTreeSet<String>, view: &Topics) -> Assignment {
    topics
        .iter()
        .filter_map(|t| view.get(t))
        .filter(|(_, n)| *n > 0)
        .map(|(id, n)| (*id, (0..i32::try_from(*n).unwrap_or(i32::MAX)).collect()))
        .collect()
}

/// The share groups a coordinator holds.
#[derive(Debug, Default)]
pub struct ShareGroups {
    groups: BTreeMap<String, Group>,
}

impl ShareGroups {
    /// Whether `group` is a share group held here.
    pub fn contains(&self, group: &str) -> bool {
        self.groups.contains_key(group)
    }

    /// The topics `hb`'s member subscribes to after it (what to look up for it).
    pub fn wanted(&self, hb: &Heartbeat) -> BTreeSet<String> {
        match &hb.topics {
            Some(t) => t.iter().cloned().collect(),
            None => self
                .groups
                .get(&hb.group)
                .and_then(|g| g.members.get(&hb.member_id))
                .map(|m| m.topics.clone())
                .unwrap_or_default(),
        }
    }

    /// A heartbeat, with Kafka's rules: an empty member id or a join without topics is
    /// INVALID_REQUEST; an unknown member UNKNOWN_MEMBER_ID; an epoch not the member's
    /// FENCED_MEMBER_EPOCH.
    pub fn heartbeat(&mut self, hb: &Heartbeat, view: &Topics, now: Instant) -> Beat {
        if hb.member_id.is_empty() {
            return Beat::refused(code::INVALID_REQUEST, "MemberId can't be empty.");
        }
        if hb.member_epoch == -1 {
            if let Some(g) = self.groups.get_mut(&hb.group)
                && g.members.remove(&hb.member_id).is_some()
            {
                g.epoch = g.epoch.wrapping_add(1);
            }
            return Beat { member_epoch: -1, ..Default::default() };
        }
        if hb.member_epoch == 0 && hb.topics.is_none() {
            return Beat::refused(
                code::INVALID_REQUEST,
                "SubscribedTopicNames must be set in first request.",
            );
        }
        if hb.member_epoch < -1 {
            return Beat::refused(code::INVALID_REQUEST, "MemberEpoch is invalid.");
        }
        if !self.groups.contains_key(&hb.group) && self.groups.len() >= MAX_GROUPS {
            return Beat::refused(
                crate::groups::errors::COORDINATOR_NOT_AVAILABLE,
                "this coordinator holds as many groups as it may",
            );
        }
        let g = self.groups.entry(hb.group.clone()).or_default();
        match g.members.get(&hb.member_id) {
            None if hb.member_epoch != 0 => {
                return Beat::refused(
                    UNKNOWN_MEMBER_ID,
                    format!("Member {} is not a member of group {}.", hb.member_id, hb.group),
                );
            }
            None if g.members.len() >= MAX_MEMBERS => {
                return Beat::refused(GROUP_MAX_SIZE_REACHED, "The share group is full.");
            }
            Some(m) if hb.member_epoch != 0 && hb.member_epoch != m.epoch => {
                return Beat::refused(
                    FENCED_MEMBER_EPOCH,
                    format!("The member epoch {} is not {}.", hb.member_epoch, m.epoch),
                );
            }
            _ => {}
        }
        let joining = hb.member_epoch == 0;
        let m = g.members.entry(hb.member_id.clone()).or_insert_with(|| Member {
            epoch: 0,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            topics: BTreeSet::new(),
            assignment: Assignment::new(),
            last_heard: now,
            session_timeout: hb.session_timeout,
        });
        m.last_heard = now;
        m.session_timeout = hb.session_timeout;
        m.client_id = hb.client_id.clone();
        m.client_host = hb.client_host.clone();
        if hb.rack_id.is_some() {
            m.rack_id = hb.rack_id.clone();
        }
        if let Some(t) = &hb.topics {
            m.topics = t.iter().cloned().collect();
        }
        let assignment = assignment_of(&m.topics, view);
        let changed = joining || assignment != m.assignment;
        if changed {
            g.epoch = g.epoch.wrapping_add(1).max(1);
            m.epoch = g.epoch;
            m.assignment = assignment;
        }
        Beat {
            error: code::NONE,
            message: None,
            member_epoch: m.epoch,
            assignment: changed.then(|| m.assignment.clone()),
        }
    }

    /// Members silent longer than their session timeout are removed (a group left empty
    /// stays held, Empty, until deleted or moved). Returns the members removed, by group.
    pub fn tick(&mut self, now: Instant) -> Vec<(String, String)> {
        let mut gone = Vec::new();
        for (name, g) in self.groups.iter_mut() {
            let expired: Vec<String> = g
                .members
                .iter()
                .filter(|(_, m)| now.duration_since(m.last_heard) > m.session_timeout)
                .map(|(id, _)| id.clone())
                .collect();
            for id in expired {
                tracing::info!(group = %name, member = %id, "Kafka share group: session expired");
                g.members.remove(&id);
                g.epoch = g.epoch.wrapping_add(1);
                gone.push((name.clone(), id));
            }
        }
        gone
    }

    /// The group as ShareGroupDescribe shows it, if held here.
    pub fn describe(&self, group: &str) -> Option<Described> {
        let g = self.groups.get(group)?;
        Some(Described {
            epoch: g.epoch,
            members: g
                .members
                .iter()
                .map(|(id, m)| DescribedMember {
                    member_id: id.clone(),
                    member_epoch: m.epoch,
                    rack_id: m.rack_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    topics: m.topics.iter().cloned().collect(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        })
    }

    /// Every share group held here, with its state's name.
    pub fn list(&self) -> Vec<(String, &'static str)> {
        self.groups
            .iter()
            .map(|(n, g)| (n.clone(), if g.members.is_empty() { "Empty" } else { "Stable" }))
            .collect()
    }

    /// Whether `group` has members here.
    pub fn has_members(&self, group: &str) -> bool {
        self.groups.get(group).is_some_and(|g| !g.members.is_empty())
    }

    /// A stored share group taken up here: held, with no members until they join.
    pub fn resume(&mut self, group: &str) {
        self.groups.entry(group.to_owned()).or_default();
    }

    /// Forgets `group` (it moved to another coordinator, or was deleted).
    pub fn forget(&mut self, group: &str) {
        self.groups.remove(group);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hb(member: &str, epoch: i32, topics: Option<&[&str]>) -> Heartbeat {
        Heartbeat {
            group: "g".into(),
            member_id: member.into(),
            member_epoch: epoch,
            topics: topics.map(|t| t.iter().map(|s| s.to_string()).collect()),
            session_timeout: Duration::from_secs(45),
            ..Default::default()
        }
    }

    #[test]
    fn every_member_is_given_every_partition_and_the_epoch_moves_with_membership() {
        let mut groups = ShareGroups::default();
        let id = Uuid::new_v4();
        let view: Topics = [("t".to_string(), (id, 3))].into();
        let now = Instant::now();
        let a = groups.heartbeat(&hb("a", 0, Some(&["t"])), &view, now);
        assert_eq!(a.member_epoch, 1);
        assert_eq!(a.assignment, Some([(id, [0, 1, 2].into())].into()));
        let b = groups.heartbeat(&hb("b", 0, Some(&["t"])), &view, now);
        assert_eq!(b.member_epoch, 2);
        assert_eq!(b.assignment, a.assignment, "both hold every partition");
        // a heartbeats at its epoch: nothing new for it.
        let again = groups.heartbeat(&hb("a", 1, None), &view, now);
        assert_eq!((again.error, again.member_epoch, again.assignment), (0, 1, None));
        // A partition added: a is told at a new epoch.
        let grown: Topics = [("t".to_string(), (id, 4))].into();
        let grew = groups.heartbeat(&hb("a", 1, None), &grown, now);
        assert_eq!(grew.member_epoch, 3);
        assert_eq!(grew.assignment.map(|a| a[&id].len()), Some(4));
        // A stale epoch is fenced; an unknown member is told so and joins again under its id.
        assert_eq!(groups.heartbeat(&hb("a", 1, None), &grown, now).error, FENCED_MEMBER_EPOCH);
        assert_eq!(groups.heartbeat(&hb("c", 5, None), &grown, now).error, UNKNOWN_MEMBER_ID);
        assert_eq!(
            groups.heartbeat(&hb("", 0, Some(&["t"])), &grown, now).error,
            code::INVALID_REQUEST
        );
        assert_eq!(groups.heartbeat(&hb("c", 0, None), &grown, now).error, code::INVALID_REQUEST);
        let left = groups.heartbeat(&hb("b", -1, None), &grown, now);
        assert_eq!(left.member_epoch, -1);
        assert_eq!(groups.describe("g").map(|d| d.members.len()), Some(1));
    }

    #[test]
    fn a_silent_member_is_removed_after_its_session_and_the_group_is_empty() {
        let mut groups = ShareGroups::default();
        let view: Topics = [("t".to_string(), (Uuid::new_v4(), 1))].into();
        let t0 = Instant::now();
        groups.heartbeat(&hb("a", 0, Some(&["t"])), &view, t0);
        assert!(groups.tick(t0 + Duration::from_secs(45)).is_empty());
        let gone = groups.tick(t0 + Duration::from_secs(46));
        assert_eq!(gone, vec![("g".to_string(), "a".to_string())]);
        assert_eq!(groups.list(), vec![("g".to_string(), "Empty")]);
    }
}
