//! Share groups (KIP-932, queues for Kafka) over Lakelog's cursors (ARCHITECTURE §12).
//!
//! Two parts, as in Kafka. The group's coordinator (placed as every group's) keeps its
//! membership ([`group`]): members heartbeat and are given every partition of their topics.
//! The partition's owner — the writer leading it — keeps each group's share-partition
//! ([`partition`]): the window of records lent out, with their locks and delivery counts,
//! stored through [`crate::ShareStates`] as a cursor of the partition's log before anything
//! that changed it is answered. A member fetches records from the owner ([`Shares::acquire`]),
//! each locked to it for the group's `share.record.lock.duration.ms`, and acknowledges them
//! ([`Shares::acknowledge`]): accepted and rejected records are done; released ones, and those
//! whose lock expired, go to the next fetch until the group's `share.delivery.count.limit`
//! archives them. Each member's fetches run in a share session ([`Shares::session`]): the
//! partitions it fetches, and an epoch each request must carry.
//!
//! Why the leader owns them: a Kafka client sends its ShareFetch to the partition's leader,
//! as it learns it from Metadata, with no preferred read replica; readers (which serve
//! catch-up fetches) are never named leaders, so they own none. An owner reads the records it
//! lends from the log as any fetch does (its tail, or object storage through the range cache
//! for old ones), so lending old records costs it what a catch-up read costs a reader.
//!
//! Bounds: sessions ([`MAX_SESSIONS`], then SHARE_SESSION_LIMIT_REACHED), share-partitions
//! held ([`MAX_PARTITIONS`], the least recently used let go: a share-partition let go is
//! loaded again from its store, its locks lost, its records lent again), records a fetch
//! acquires (its `MaxRecords`, at most [`MAX_FETCH_RECORDS`]), and each window by the group's
//! `share.partition.max.record.locks`.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use uuid::Uuid;

use crate::{Broker, Isolation, Refused, StoredBatch, code};

pub mod group;
pub mod partition;

pub use partition::{AckRefused, AckType, Acquired, Change, SharePartition, Stored};

/// Share sessions a broker keeps (Kafka's `group.share.max.share.sessions`).
pub const MAX_SESSIONS: usize = 2000;
/// Share-partitions an owner holds in memory at once.
pub const MAX_PARTITIONS: usize = 10_000;
/// Records one fetch acquires at most, whatever it asks.
pub const MAX_FETCH_RECORDS: u64 = 10_000;
/// Partitions one share session may hold.
pub const MAX_SESSION_PARTITIONS: usize = 10_000;
/// Partitions all the share sessions of a broker hold at most (about 40 bytes each).
pub const MAX_SESSIONS_PARTITIONS: usize = 200_000;
/// Runs of alike records the share-partitions held here may hold in all (about 64 bytes
/// each): past it, the least recently used are let go.
pub const MAX_HELD_RUNS: usize = 1_000_000;
/// A share session unused this long is gone.
pub const SESSION_IDLE: Duration = Duration::from_secs(120);

/// Kafka's share error codes.
pub mod errors {
    pub const INVALID_RECORD_STATE: i16 = kafka_protocol::ResponseError::InvalidRecordState.code();
    pub const SHARE_SESSION_NOT_FOUND: i16 =
        kafka_protocol::ResponseError::ShareSessionNotFound.code();
    pub const INVALID_SHARE_SESSION_EPOCH: i16 =
        kafka_protocol::ResponseError::InvalidShareSessionEpoch.code();
    pub const SHARE_SESSION_LIMIT_REACHED: i16 =
        kafka_protocol::ResponseError::ShareSessionLimitReached.code();
}
use errors::*;

/// A group's settings for its share-partitions (its group configs, else Kafka's defaults).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub lock: Duration,
    pub delivery_limit: u16,
    pub max_locks: u64,
    /// Where a new share-partition starts: ListOffsets' -2 (earliest), -1 (latest) or a
    /// timestamp (`by_duration`).
    pub reset: Reset,
    pub isolation: Isolation,
    pub renew: bool,
}

/// `share.auto.offset.reset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reset {
    Earliest,
    Latest,
    /// Records no older than this.
    ByDuration(Duration),
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            lock: Duration::from_secs(30),
            delivery_limit: 5,
            max_locks: 2000,
            reset: Reset::Latest,
            isolation: Isolation::ReadUncommitted,
            renew: true,
        }
    }
}

impl Settings {
    /// A group's settings from its configs.
    pub fn of(c: &crate::GroupConfig) -> Settings {
        let d = Settings::default();
        let int = |name: &str| c.get(name).and_then(|v| v.parse::<u64>().ok());
        Settings {
            lock: int("share.record.lock.duration.ms").map_or(d.lock, Duration::from_millis),
            delivery_limit: int("share.delivery.count.limit")
                .and_then(|v| u16::try_from(v).ok())
                .unwrap_or(d.delivery_limit),
            max_locks: int("share.partition.max.record.locks").unwrap_or(d.max_locks),
            reset: match c.get("share.auto.offset.reset") {
                Some("earliest") => Reset::Earliest,
                Some(v) if v.starts_with("by_duration:") => {
                    streamconfig::iso8601_ms(&v["by_duration:".len()..])
                        .map_or(d.reset, |ms| Reset::ByDuration(Duration::from_millis(ms)))
                }
                _ => d.reset,
            },
            isolation: match c.get("share.isolation.level") {
                Some("read_committed") => Isolation::ReadCommitted,
                _ => d.isolation,
            },
            renew: c.get("share.renew.acknowledge.enable") != Some("false"),
        }
    }

    fn lock_ms(&self) -> i64 {
        i64::try_from(self.lock.as_millis()).unwrap_or(i64::MAX)
    }
}

/// One member's share session at this broker.
#[derive(Clone, Debug)]
struct Session {
    /// The epoch its next request must carry.
    epoch: i32,
    partitions: BTreeSet<(Uuid, i32)>,
    last_used: Instant,
    /// The connection it was opened on (0: none); it ends with it.
    connection: u64,
}

/// What a request does to its member's share session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionStep {
    /// Epoch 0: a new session of these partitions (any earlier one is replaced).
    Open,
    /// Epoch -1: the session closes once its acknowledgements are applied; nothing fetched.
    Close,
    /// Any other epoch: the session's next request.
    Next,
}

type PartKey = (String, String, i32);

/// A share session's partitions, by topic id.
pub type SessionPartitions = BTreeSet<(Uuid, i32)>;

/// A share-partition held here: its state once loaded, what was stored of it last, when it
/// was last used.
#[derive(Debug, Default)]
struct Slot {
    state: Option<SharePartition>,
    stored: Option<Change>,
    last_used: Option<Instant>,
    /// Its state's runs, as last counted into [`Shares::held_runs`].
    runs: usize,
}

/// The share groups and share-partitions this broker holds.
#[derive(Debug, Default)]
pub struct Shares {
    /// Where the owner's lock clock starts.
    epoch: Epoch,
    /// Membership of the share groups this broker coordinates.
    pub(crate) groups: Mutex<group::ShareGroups>,
    sessions: Mutex<HashMap<(String, String), Session>>,
    partitions: Mutex<HashMap<PartKey, Arc<tokio::sync::Mutex<Slot>>>>,
    /// Topic names by id, learned from the broker's topics.
    names: Mutex<HashMap<Uuid, String>>,
    /// Runs held by every share-partition here ([`MAX_HELD_RUNS`]).
    held_runs: std::sync::atomic::AtomicUsize,
}

/// The start of an owner's lock clock: tokio's clock (virtual under the simulation's paused
/// runtime), as locks are never compared across owners (a new owner finds none).
#[derive(Debug)]
struct Epoch(tokio::time::Instant);

impl Default for Epoch {
    fn default() -> Self {
        Epoch(tokio::time::Instant::now())
    }
}

/// What a fetch acquired on one partition: the ranges, and the stored batches holding them.
#[derive(Clone, Debug, Default)]
pub struct Lent {
    pub acquired: Acquired,
    pub batches: Vec<StoredBatch>,
    /// The window's end after it: where new records would come from.
    pub end: i64,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A stored batch's first and last offsets; whether it holds nothing to lend (a control
/// batch, or the empty batch standing for records a compaction took out); whether it is
/// transactional; its producer.
fn batch_span(b: &StoredBatch) -> (i64, i64, bool, bool, i64) {
    match recordbatch::BatchHeader::parse(&b.bytes) {
        Ok(h) => (
            b.base_offset,
            b.base_offset.saturating_add(i64::from(h.last_offset_delta)),
            h.is_control() || h.record_count == 0,
            h.is_transactional(),
            h.producer.producer_id,
        ),
        Err(_) => (b.base_offset, b.base_offset, false, false, -1),
    }
}

impl Shares {
    /// Now on the lock clock, in ms.
    fn clock_ms(&self) -> i64 {
        let d = tokio::time::Instant::now().saturating_duration_since(self.epoch.0);
        i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
    }

    /// Steps `member`'s share session in `group` by a request at `epoch`, adding `add` and
    /// dropping `forget`: the session's partitions after it, and what the step is. Kafka's
    /// codes for a session not found, an epoch not the session's, or no room for a new one.
    #[allow(clippy::too_many_arguments)]
    pub fn session(
        &self,
        group: &str,
        member: &str,
        epoch: i32,
        add: &[(Uuid, i32)],
        forget: &[(Uuid, i32)],
        now: Instant,
        connection: u64,
    ) -> Result<(SessionPartitions, SessionStep), (i16, String)> {
        let key = (group.to_owned(), member.to_owned());
        let mut sessions = self.sessions.lock();
        match epoch {
            0 => {
                if !sessions.contains_key(&key) && sessions.len() >= MAX_SESSIONS {
                    // The least recently used session idle for a lock's worth goes first.
                    let idle = sessions
                        .iter()
                        .filter(|(_, s)| now.duration_since(s.last_used) > Duration::from_secs(60))
                        .min_by_key(|(_, s)| s.last_used)
                        .map(|(k, _)| k.clone());
                    match idle {
                        Some(k) => {
                            sessions.remove(&k);
                        }
                        None => {
                            return Err((
                                SHARE_SESSION_LIMIT_REACHED,
                                format!("this broker holds {MAX_SESSIONS} share sessions"),
                            ));
                        }
                    }
                }
                let partitions: BTreeSet<(Uuid, i32)> =
                    add.iter().copied().take(MAX_SESSION_PARTITIONS).collect();
                // Sessions idle past SESSION_IDLE are gone (their members stopped fetching).
                sessions.retain(|_, s| now.duration_since(s.last_used) <= SESSION_IDLE);
                let alone = !sessions.keys().any(|(g, m)| g == group && m != member);
                let others: usize = sessions
                    .iter()
                    .filter(|(k, _)| **k != key)
                    .map(|(_, s)| s.partitions.len())
                    .sum();
                if others + partitions.len() > MAX_SESSIONS_PARTITIONS {
                    return Err((
                        SHARE_SESSION_LIMIT_REACHED,
                        format!("this broker's share sessions hold {others} partitions"),
                    ));
                }
                let session = Session {
                    epoch: 1,
                    partitions: partitions.clone(),
                    last_used: now,
                    connection,
                };
                sessions.insert(key, session);
                drop(sessions);
                // The group's first session here: its share-partitions held here may be stale
                // (its offsets altered or deleted while it was empty), so they are loaded again.
                if alone {
                    self.forget_group(group);
                }
                Ok((partitions, SessionStep::Open))
            }
            _ => {
                let held: usize = sessions.values().map(|s| s.partitions.len()).sum();
                let Some(s) = sessions.get_mut(&key) else {
                    return Err((
                        SHARE_SESSION_NOT_FOUND,
                        format!("no share session of member {member} in group {group}"),
                    ));
                };
                if epoch != -1 && epoch != s.epoch {
                    return Err((
                        INVALID_SHARE_SESSION_EPOCH,
                        format!("the share session's epoch is {}, not {epoch}", s.epoch),
                    ));
                }
                if epoch == -1 {
                    let s = sessions.remove(&key).map(|s| s.partitions).unwrap_or_default();
                    return Ok((s, SessionStep::Close));
                }
                // Checked before anything changes: a refused step leaves the session as it was.
                let adding = add.iter().filter(|p| !s.partitions.contains(p)).count();
                if held + adding > MAX_SESSIONS_PARTITIONS
                    || s.partitions.len() + adding > MAX_SESSION_PARTITIONS
                {
                    return Err((
                        SHARE_SESSION_LIMIT_REACHED,
                        format!("this broker's share sessions hold {held} partitions"),
                    ));
                }
                for p in forget {
                    s.partitions.remove(p);
                }
                s.partitions.extend(add.iter().copied());
                s.epoch = if s.epoch == i32::MAX { 1 } else { s.epoch + 1 };
                s.last_used = now;
                Ok((s.partitions.clone(), SessionStep::Next))
            }
        }
    }

    /// Connection `connection` closed: the share sessions opened on it end, and what their
    /// members hold on the partitions here is available again.
    pub async fn disconnected(&self, connection: u64, broker: &dyn Broker) {
        let ended: Vec<((String, String), Session)> = {
            let mut sessions = self.sessions.lock();
            let keys: Vec<(String, String)> = sessions
                .iter()
                .filter(|(_, s)| s.connection == connection && connection != 0)
                .map(|(k, _)| k.clone())
                .collect();
            keys.into_iter().filter_map(|k| sessions.remove(&k).map(|s| (k, s))).collect()
        };
        for ((group, member), s) in ended {
            for (id, partition) in s.partitions {
                if let Some(topic) = self.topic_name(id, broker).await {
                    self.release(&group, &member, &topic, partition).await;
                }
            }
        }
    }

    /// The name of the topic `id`, looked up through the broker when not known here.
    pub async fn topic_name(&self, id: Uuid, broker: &dyn Broker) -> Option<String> {
        if let Some(n) = self.names.lock().get(&id) {
            return Some(n.clone());
        }
        let all = broker.topics(None, None, None).await.ok()?;
        let mut names = self.names.lock();
        if names.len() > 100_000 {
            names.clear();
        }
        for t in all.into_iter().filter(|t| t.error == code::NONE) {
            names.insert(t.id, t.name);
        }
        names.get(&id).cloned()
    }

    /// The slot of a share-partition, made if new (the least recently used let go past
    /// [`MAX_PARTITIONS`]).
    fn slot(&self, key: &PartKey) -> Arc<tokio::sync::Mutex<Slot>> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut parts = self.partitions.lock();
        if let Some(s) = parts.get(key) {
            return s.clone();
        }
        // Room first: the least recently used not in use go (64 at most a time). The count
        // is made anew first (slots forgotten while in use leave theirs behind).
        if self.held_runs.load(Relaxed) > MAX_HELD_RUNS {
            let sum = parts.values().filter_map(|s| s.try_lock().ok().map(|g| g.runs)).sum();
            self.held_runs.store(sum, Relaxed);
        }
        for _ in 0..64 {
            if parts.len() < MAX_PARTITIONS && self.held_runs.load(Relaxed) <= MAX_HELD_RUNS {
                break;
            }
            let oldest = parts
                .iter()
                .filter_map(|(k, s)| s.try_lock().ok().map(|g| (k.clone(), g.last_used, g.runs)))
                .min_by_key(|(_, used, _)| *used);
            let Some((k, _, runs)) = oldest else { break };
            parts.remove(&k);
            self.held_runs.fetch_sub(runs, Relaxed);
        }
        parts.entry(key.clone()).or_default().clone()
    }

    /// Counts a slot's runs anew into [`Self::held_runs`].
    fn recount(&self, slot: &mut Slot) {
        use std::sync::atomic::Ordering::Relaxed;
        let now = slot.state.as_ref().map_or(0, SharePartition::run_count);
        if now >= slot.runs {
            self.held_runs.fetch_add(now - slot.runs, Relaxed);
        } else {
            self.held_runs.fetch_sub(slot.runs - now, Relaxed);
        }
        slot.runs = now;
    }

    /// Runs `f` on a share-partition this broker owns, loading it first if it is not held
    /// (created where the group's `share.auto.offset.reset` says, if it has no state), then
    /// stores what `f` changed before returning. A failed store drops the state held: it is
    /// loaded again next time.
    async fn with<T>(
        &self,
        broker: &dyn Broker,
        key: &PartKey,
        settings: &Settings,
        f: impl AsyncFnOnce(&mut SharePartition) -> Result<T, Refused>,
    ) -> Result<T, Refused> {
        let (group, topic, partition) = (key.0.as_str(), key.1.as_str(), key.2);
        broker.share_owner(topic, partition).await?;
        let slot = self.slot(key);
        let mut slot = slot.lock().await;
        slot.last_used = Some(Instant::now());
        let mut create = false;
        if slot.state.is_none() {
            let (state, created) = match broker.load_share(group, topic, partition).await? {
                Some(stored) => (SharePartition::from_stored(&stored), false),
                None => {
                    let at = match settings.reset {
                        Reset::Earliest => -2,
                        Reset::Latest => -1,
                        Reset::ByDuration(d) => {
                            now_ms().saturating_sub(i64::try_from(d.as_millis()).unwrap_or(0))
                        }
                    };
                    let (start, _) = broker
                        .list_offset(topic, partition, None, at, Isolation::ReadUncommitted)
                        .await?;
                    (SharePartition::new(start), true)
                }
            };
            create = created;
            slot.stored = (!created).then(|| state_change(&state));
            slot.state = Some(state);
        }
        let Some(state) = slot.state.as_mut() else {
            return Err(Refused::server("share-partition state not loaded"));
        };
        let out = f(state).await;
        let mut change = state.take_change();
        let same = slot.stored.as_ref().is_some_and(|s| {
            change.done.is_empty()
                && (s.start, s.end, &s.counts) == (change.start, change.end, &change.counts)
        });
        if !same {
            match broker.store_share(group, topic, partition, &change, create).await {
                Ok(()) => {
                    change.done.clear();
                    slot.stored = Some(change);
                }
                Err(e) => {
                    tracing::debug!(group, topic, partition, error = %e.message, "share-partition state not stored: dropped");
                    slot.state = None;
                    slot.stored = None;
                    self.recount(&mut slot);
                    return Err(e);
                }
            }
        }
        self.recount(&mut slot);
        out
    }

    /// Acquires up to `max_records` records of `topic`'s `partition` for `member` (about
    /// `max_bytes` of them): available records of the window first (released, or their lock
    /// expired), else the log's next ones while the window has room. Stored before returned.
    #[allow(clippy::too_many_arguments)]
    pub async fn acquire(
        &self,
        broker: &dyn Broker,
        group: &str,
        member: &Arc<str>,
        topic: &str,
        partition: i32,
        max_records: u64,
        max_bytes: usize,
        settings: &Settings,
    ) -> Result<Lent, Refused> {
        let key = (group.to_owned(), topic.to_owned(), partition);
        let max_records = max_records.clamp(1, MAX_FETCH_RECORDS);
        self.with(broker, &key, settings, async |p| {
            let now = self.clock_ms();
            p.expire(now);
            let deadline = now.saturating_add(settings.lock_ms());
            p.archive_exhausted(settings.delivery_limit);
            // The window's available records, if any.
            if let Some(first) = p.first_available(settings.delivery_limit) {
                let read = read_window(broker, topic, partition, p, first, max_bytes, settings);
                let Some(f) = read.await? else {
                    return Ok(Lent { end: p.end(), ..Lent::default() });
                };
                // Offsets of the window that hold no record any more (compacted away, or a
                // control batch) are done: nothing is lent for them.
                let mut at = first;
                for b in &f.records {
                    let (from, last, control, ..) = batch_span(b);
                    if from > at {
                        p.drop_available(at, from);
                    }
                    if control {
                        p.drop_available(from, last + 1);
                    }
                    at = at.max(last + 1);
                }
                let acquired =
                    p.acquire_available(member, deadline, settings.delivery_limit, max_records, at);
                if !acquired.is_empty() {
                    let batches = overlapping(f.records, &acquired);
                    return Ok(Lent { acquired, batches, end: p.end() });
                }
            }
            let room = p.room(settings.max_locks).min(max_records);
            if room == 0 {
                return Ok(Lent { end: p.end(), ..Lent::default() });
            }
            let end = p.end();
            let read = read_window(broker, topic, partition, p, end, max_bytes, settings);
            let Some(f) = read.await? else {
                return Ok(Lent { end: p.end(), ..Lent::default() });
            };
            let mut left = room;
            let mut acquired = Acquired::new();
            let aborted = aborted_batches(&f);
            for (i, b) in f.records.iter().enumerate() {
                if left == 0 {
                    break;
                }
                let (first, last, control, _, _) = batch_span(b);
                if control || aborted.contains(&i) {
                    p.skip(last + 1);
                    continue;
                }
                if let Some(got) = p.acquire_new(first, last, member, deadline, left) {
                    left -= u64::try_from(got.1 - got.0 + 1).unwrap_or(left);
                    acquired.push(got);
                }
            }
            let batches = overlapping(f.records, &acquired);
            Ok(Lent { acquired, batches, end: p.end() })
        })
        .await
    }

    /// Applies `member`'s acknowledgements on a share-partition, stored before returned.
    /// INVALID_RECORD_STATE (none applied) if it holds not every record named.
    #[allow(clippy::too_many_arguments)]
    pub async fn acknowledge(
        &self,
        broker: &dyn Broker,
        group: &str,
        member: &str,
        topic: &str,
        partition: i32,
        batches: &[(i64, i64, Vec<i8>)],
        settings: &Settings,
    ) -> Result<(), Refused> {
        if !settings.renew && renews(batches) {
            return Err(Refused::new(
                code::INVALID_REQUEST,
                "renew acknowledgements are disabled (share.renew.acknowledge.enable)",
            ));
        }
        let key = (group.to_owned(), topic.to_owned(), partition);
        self.with(broker, &key, settings, async |p| {
            let now = self.clock_ms();
            p.expire(now);
            p.acknowledge(member, now, settings.lock_ms(), batches).map_err(|e| match e {
                AckRefused::InvalidRecordState(m) => Refused::new(INVALID_RECORD_STATE, m),
                AckRefused::InvalidRequest(m) => Refused::new(code::INVALID_REQUEST, m),
            })
        })
        .await
    }

    /// Releases what `member` holds on a share-partition held here (its session closed).
    pub async fn release(&self, group: &str, member: &str, topic: &str, partition: i32) {
        let key = (group.to_owned(), topic.to_owned(), partition);
        let slot = self.partitions.lock().get(&key).cloned();
        if let Some(slot) = slot
            && let Some(p) = slot.lock().await.state.as_mut()
        {
            p.release_member(member);
        }
    }

    /// Forgets every share-partition state of `group` held here (its offsets were altered or
    /// deleted elsewhere: they are loaded again).
    pub fn forget_group(&self, group: &str) {
        self.partitions.lock().retain(|k, s| {
            if k.0 != group {
                return true;
            }
            // One in use is counted out when its user recounts it; the rest now.
            if let Ok(g) = s.try_lock() {
                self.held_runs.fetch_sub(g.runs, std::sync::atomic::Ordering::Relaxed);
            }
            false
        });
    }
}

/// Whether acknowledgement batches hold a renewal (type 4, KIP-1222).
pub(crate) fn renews(batches: &[(i64, i64, Vec<i8>)]) -> bool {
    batches.iter().any(|(_, _, t)| t.contains(&4))
}

/// The state a share-partition's store holds, as a change (none done).
fn state_change(p: &SharePartition) -> Change {
    let s = p.stored();
    Change { start: s.start, end: s.end, done: Vec::new(), counts: s.counts }
}

/// Reads batches of a partition from `offset` for lending, the window trimmed to the log's
/// start where that moved past it (retention, DeleteRecords). `None` when `offset` itself was
/// trimmed away: the window now starts at the log's start, and nothing is read this time.
async fn read_window(
    broker: &dyn Broker,
    topic: &str,
    partition: i32,
    p: &mut SharePartition,
    offset: i64,
    max_bytes: usize,
    settings: &Settings,
) -> Result<Option<crate::Fetched>, Refused> {
    let isolation = settings.isolation;
    match broker.fetch(topic, partition, None, None, offset, max_bytes.max(1), isolation).await {
        Ok(f) => {
            if f.log_start_offset > p.start() {
                p.trim_to(f.log_start_offset);
            }
            Ok(Some(f))
        }
        Err(e) if e.code == code::OFFSET_OUT_OF_RANGE => {
            let (start, _) =
                broker.list_offset(topic, partition, None, -2, Isolation::ReadUncommitted).await?;
            p.trim_to(start);
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Indexes of the batches of a read_committed read that belong to aborted transactions (as
/// a Kafka consumer finds them: a producer's batches from its aborted transaction's first
/// offset up to its next control batch).
fn aborted_batches(f: &crate::Fetched) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    if f.aborted.is_empty() {
        return out;
    }
    let mut pending: Vec<(i64, i64)> = f.aborted.clone();
    pending.sort_by_key(|(_, first)| *first);
    let mut open: BTreeSet<i64> = BTreeSet::new();
    for (i, b) in f.records.iter().enumerate() {
        let (first, _, control, transactional, pid) = batch_span(b);
        while let Some(&(p, at)) = pending.first() {
            if at > first {
                break;
            }
            open.insert(p);
            pending.remove(0);
        }
        if control {
            open.remove(&pid);
        } else if transactional && open.contains(&pid) {
            out.insert(i);
        }
    }
    out
}

/// The batches holding any of `acquired`'s records.
fn overlapping(batches: Vec<StoredBatch>, acquired: &Acquired) -> Vec<StoredBatch> {
    batches
        .into_iter()
        .filter(|b| {
            let (first, last, ..) = batch_span(b);
            acquired.iter().any(|&(a, z, _)| a <= last && first <= z)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(topic: Uuid, n: i32) -> Vec<(Uuid, i32)> {
        (0..n).map(|p| (topic, p)).collect()
    }

    #[test]
    fn a_share_session_steps_by_epoch_with_kafkas_codes() {
        let (shares, t, now) = (Shares::default(), Uuid::new_v4(), Instant::now());
        let (p, step) = shares.session("g", "m", 0, &parts(t, 2), &[], now, 0).unwrap();
        assert_eq!((p.len(), step), (2, SessionStep::Open));
        assert_eq!(
            shares.session("g", "m", 2, &[], &[], now, 0).unwrap_err().0,
            INVALID_SHARE_SESSION_EPOCH
        );
        let (p, step) = shares.session("g", "m", 1, &[(t, 5)], &[(t, 0)], now, 0).unwrap();
        assert_eq!(
            (p.into_iter().collect::<Vec<_>>(), step),
            (vec![(t, 1), (t, 5)], SessionStep::Next)
        );
        assert_eq!(
            shares.session("g", "x", 1, &[], &[], now, 0).unwrap_err().0,
            SHARE_SESSION_NOT_FOUND
        );
        assert_eq!(shares.session("g", "m", -1, &[], &[], now, 0).unwrap().1, SessionStep::Close);
        assert_eq!(
            shares.session("g", "m", 3, &[], &[], now, 0).unwrap_err().0,
            SHARE_SESSION_NOT_FOUND
        );
    }

    #[test]
    fn share_sessions_hold_a_bounded_number_of_partitions_and_a_refused_step_changes_nothing() {
        let (shares, t, now) = (Shares::default(), Uuid::new_v4(), Instant::now());
        let full = i32::try_from(MAX_SESSION_PARTITIONS).unwrap();
        shares.session("g", "m", 0, &parts(t, full), &[], now, 0).unwrap();
        let refused = shares.session("g", "m", 1, &[(Uuid::new_v4(), 0)], &[(t, 0)], now, 0);
        assert_eq!(refused.unwrap_err().0, SHARE_SESSION_LIMIT_REACHED);
        // Still at epoch 1, with partition 0.
        let (p, _) = shares.session("g", "m", 1, &[], &[], now, 0).unwrap();
        assert!(p.contains(&(t, 0)));
        // Across sessions: 200,000 partitions in all.
        let sessions = MAX_SESSIONS_PARTITIONS / MAX_SESSION_PARTITIONS;
        for m in 1..sessions {
            shares
                .session("g", &format!("m{m}"), 0, &parts(Uuid::new_v4(), full), &[], now, 0)
                .unwrap();
        }
        let one_more = shares.session("g", "late", 0, &parts(t, 1), &[], now, 0);
        assert_eq!(one_more.unwrap_err().0, SHARE_SESSION_LIMIT_REACHED);
    }
}
