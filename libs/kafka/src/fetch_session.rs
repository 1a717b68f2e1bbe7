//! Fetch sessions (KIP-227): a consumer's fetch names only the partitions whose fetch position
//! changed, and the answer only the partitions with something new (records, a moved high
//! watermark, last stable offset or log start, an error). The broker keeps each session's
//! partitions with their fetch positions and what it last answered.
//!
//! A request (Fetch v7+) opens a session with epoch 0 (session id 0: a new one; another id is
//! closed first), continues one with its next epoch (`FETCH_SESSION_ID_NOT_FOUND` when the
//! session is gone, `INVALID_FETCH_SESSION_EPOCH` when the epoch is not the next), and closes
//! one with epoch -1 (a sessionless fetch, as are all before v7). A full cache answers a new
//! session sessionless (id 0): the client keeps sending full fetches. The cache is bounded in
//! sessions and in the partitions they hold (counted with their topic names' bytes); a session
//! idle for [`EVICTABLE_AFTER`] makes room for a new one. A session belongs to the principal
//! that opened it: another's request for it finds none.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::fetch_request::FetchPartition;
use kafka_protocol::messages::fetch_request::{FetchTopic, ForgottenTopic};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::code;

/// Sessions a broker keeps at most (Kafka's `max.incremental.fetch.session.cache.slots`)...
pub const MAX_SESSIONS: usize = 1000;
/// ...and the bytes their partitions may take: a partition counts 96 bytes and its topic
/// name's length.
pub const MAX_SESSION_BYTES: usize = 32 << 20;
/// A session idle this long gives its room to a new one (Kafka's 120 s).
pub const EVICTABLE_AFTER: Duration = Duration::from_secs(120);

const PARTITION_BYTES: usize = 96;
/// The epoch that opens a session, and the one that closes it.
const INITIAL_EPOCH: i32 = 0;
const FINAL_EPOCH: i32 = -1;
pub const FETCH_SESSION_ID_NOT_FOUND: i16 =
    kafka_protocol::ResponseError::FetchSessionIdNotFound.code();
pub const INVALID_FETCH_SESSION_EPOCH: i16 =
    kafka_protocol::ResponseError::InvalidFetchSessionEpoch.code();

type Key = (Arc<str>, i32);

/// One partition of a session: where the client fetches from, and what it was last answered.
#[derive(Debug, Clone)]
struct Part {
    fetch_offset: i64,
    max_bytes: i32,
    high_watermark: i64,
    last_stable_offset: i64,
    log_start_offset: i64,
}

#[derive(Debug)]
struct Session {
    owner: security::Principal,
    /// The epoch its next request must carry.
    epoch: i32,
    /// Its partitions in fetch order (those answered with records move to the end, so a full
    /// response does not starve the ones after them).
    order: VecDeque<Key>,
    parts: HashMap<Key, Part>,
    bytes: usize,
    used: Instant,
}

#[derive(Debug, Default)]
struct Cache {
    sessions: HashMap<i32, Session>,
    bytes: usize,
    ids: u64,
}

/// The fetch sessions of one broker (every connection's: a client may reconnect).
#[derive(Debug, Default)]
pub struct FetchSessions {
    cache: Mutex<Cache>,
}

/// What a fetch is, once its session part is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Context {
    /// No session: the request names every partition, the answer holds them all.
    Sessionless,
    /// Opens a session once answered (if the cache has room).
    New,
    /// A session's next fetch: the request now names all its partitions; the answer is to
    /// hold only those with something new.
    Incremental(i32),
}

impl Session {
    /// Names `topics`' partitions in the session at the fetch positions given: one it has takes
    /// its new position (a partition named twice, the later, as the read takes it); one new to it
    /// goes at the back, answered the first time whatever it holds.
    fn name(&mut self, topics: &[FetchTopic]) {
        for t in topics {
            let topic: Arc<str> = t.topic.0.as_str().into();
            for p in &t.partitions {
                let k = (topic.clone(), p.partition);
                let part = self.parts.entry(k.clone()).or_insert_with(|| {
                    self.bytes += key_bytes(&k);
                    self.order.push_back(k);
                    Part {
                        fetch_offset: 0,
                        max_bytes: 0,
                        high_watermark: -1,
                        last_stable_offset: -1,
                        log_start_offset: -1,
                    }
                });
                (part.fetch_offset, part.max_bytes) = (p.fetch_offset, p.partition_max_bytes);
            }
        }
    }

    /// Drops the partitions `forgotten` names.
    fn forget(&mut self, forgotten: &[ForgottenTopic]) {
        let mut gone = HashSet::new();
        for t in forgotten {
            let topic: Arc<str> = t.topic.0.as_str().into();
            for p in &t.partitions {
                let k = (topic.clone(), *p);
                if self.parts.remove(&k).is_some() {
                    self.bytes -= key_bytes(&k);
                    gone.insert(k);
                }
            }
        }
        if !gone.is_empty() {
            self.order.retain(|k| !gone.contains(k));
        }
    }

    /// Moves `keys` (in the session) to the back of its order, in their order: one pass,
    /// however many.
    fn move_to_back(&mut self, keys: Vec<Key>) {
        if keys.is_empty() {
            return;
        }
        let moved: HashSet<&Key> = keys.iter().collect();
        self.order.retain(|k| !moved.contains(k));
        self.order.extend(keys);
    }
}

fn key_bytes(k: &Key) -> usize {
    PARTITION_BYTES + k.0.len()
}

fn next_epoch(e: i32) -> i32 {
    if e == i32::MAX { 1 } else { e + 1 }
}

impl FetchSessions {
    /// Reads a Fetch (v7+)'s session fields: the request is rewritten to name every partition
    /// of an incremental session at its fetch position; `Err`: the top-level error to answer.
    pub(crate) fn begin(
        &self,
        req: &mut FetchRequest,
        owner: &security::Principal,
    ) -> Result<Context, i16> {
        let (id, epoch) = (req.session_id, req.session_epoch);
        let mut cache = self.cache.lock();
        if epoch == INITIAL_EPOCH || epoch == FINAL_EPOCH {
            // A full fetch closes the session it names.
            if id != 0 && cache.sessions.get(&id).is_some_and(|s| s.owner == *owner) {
                cache.remove(id);
            }
            return Ok(if epoch == INITIAL_EPOCH { Context::New } else { Context::Sessionless });
        }
        let Some(s) = cache.sessions.get_mut(&id).filter(|s| s.owner == *owner) else {
            return Err(FETCH_SESSION_ID_NOT_FOUND);
        };
        if s.epoch != epoch {
            return Err(INVALID_FETCH_SESSION_EPOCH);
        }
        s.epoch = next_epoch(epoch);
        s.used = Instant::now();
        let before = s.bytes;
        s.forget(&req.forgotten_topics_data);
        s.name(&req.topics);
        let after = s.bytes;
        cache.bytes = cache.bytes - before + after;
        if cache.bytes > MAX_SESSION_BYTES {
            // Grown past the cache: gone (the client opens a new one, sessionless if it does
            // not fit either).
            cache.remove(id);
            return Err(FETCH_SESSION_ID_NOT_FOUND);
        }
        let s = &cache.sessions[&id];
        req.topics = topics_of(s);
        req.forgotten_topics_data.clear();
        Ok(Context::Incremental(id))
    }

    /// Completes a fetch's answer for its context: a new session of the partitions `asked` for
    /// is opened (its id in the answer, or 0 when the cache has no room), an incremental answer
    /// keeps only the partitions with something new. Partitions left out hold no records (so the answer's
    /// stored batches stay as they are).
    pub(crate) fn finish(
        &self,
        context: Context,
        asked: &[FetchTopic],
        resp: &mut FetchResponse,
        owner: &security::Principal,
    ) {
        match context {
            Context::Sessionless => resp.session_id = 0,
            Context::New => resp.session_id = self.open(asked, resp, owner).unwrap_or(0),
            Context::Incremental(id) => {
                let mut cache = self.cache.lock();
                let Some(s) = cache.sessions.get_mut(&id) else {
                    // Closed meanwhile (a full fetch of it on another connection): answered
                    // in full, sessionless.
                    resp.session_id = 0;
                    return;
                };
                resp.session_id = id;
                let mut answered = Vec::new();
                for t in &mut resp.responses {
                    let topic: Arc<str> = t.topic.0.as_str().into();
                    t.partitions.retain(|p| {
                        let k = (topic.clone(), p.partition_index);
                        let Some(part) = s.parts.get_mut(&k) else { return true };
                        let records = p.records.as_ref().is_some_and(|r| !r.is_empty());
                        if records {
                            answered.push(k);
                        }
                        news(part, p) || records
                    });
                }
                resp.responses.retain(|t| !t.partitions.is_empty());
                s.move_to_back(answered);
            }
        }
    }

    /// Opens a session of the partitions `asked` for, answered as `resp`; its id, or `None`
    /// when the cache has no room for it.
    fn open(
        &self,
        asked: &[FetchTopic],
        resp: &FetchResponse,
        owner: &security::Principal,
    ) -> Option<i32> {
        let mut s = Session {
            owner: owner.clone(),
            epoch: 1,
            order: VecDeque::new(),
            parts: HashMap::new(),
            bytes: 0,
            used: Instant::now(),
        };
        s.name(asked);
        if s.parts.is_empty() {
            return None;
        }
        for t in &resp.responses {
            let topic: Arc<str> = t.topic.0.as_str().into();
            for p in &t.partitions {
                if let Some(part) = s.parts.get_mut(&(topic.clone(), p.partition_index)) {
                    news(part, p);
                }
            }
        }
        let mut cache = self.cache.lock();
        if !cache.make_room(s.bytes) {
            return None;
        }
        let id = cache.new_id();
        cache.bytes += s.bytes;
        cache.sessions.insert(id, s);
        Some(id)
    }

    /// Sessions open, and the bytes their partitions count.
    pub fn usage(&self) -> (usize, usize) {
        let c = self.cache.lock();
        (c.sessions.len(), c.bytes)
    }
}

/// Whether answer `p` has news for the client against what `part` was last answered; records
/// what it answers. An error is always news, and makes the next answer news too.
fn news(part: &mut Part, p: &kafka_protocol::messages::fetch_response::PartitionData) -> bool {
    if p.error_code != code::NONE {
        part.high_watermark = -1;
        return true;
    }
    let moved = part.high_watermark != p.high_watermark
        || part.last_stable_offset != p.last_stable_offset
        || part.log_start_offset != p.log_start_offset
        || p.preferred_read_replica.0 >= 0;
    part.high_watermark = p.high_watermark;
    part.last_stable_offset = p.last_stable_offset;
    part.log_start_offset = p.log_start_offset;
    moved
}

/// A session's partitions as a request's topics, in its order (a topic's consecutive
/// partitions under one entry).
fn topics_of(s: &Session) -> Vec<FetchTopic> {
    let mut topics: Vec<FetchTopic> = Vec::new();
    for k in &s.order {
        let part = &s.parts[k];
        let p = FetchPartition::default()
            .with_partition(k.1)
            .with_fetch_offset(part.fetch_offset)
            .with_partition_max_bytes(part.max_bytes);
        match topics.last_mut() {
            Some(t) if *t.topic.0 == *k.0 => t.partitions.push(p),
            _ => topics.push(
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(k.0.to_string())))
                    .with_partitions(vec![p]),
            ),
        }
    }
    topics
}

impl Cache {
    fn remove(&mut self, id: i32) {
        if let Some(s) = self.sessions.remove(&id) {
            self.bytes -= s.bytes;
        }
    }

    /// Room for a session of `bytes`: evicts sessions idle for [`EVICTABLE_AFTER`], the
    /// longest idle first, until it fits; false when it does not.
    fn make_room(&mut self, bytes: usize) -> bool {
        let fits =
            |c: &Cache| c.sessions.len() < MAX_SESSIONS && c.bytes + bytes <= MAX_SESSION_BYTES;
        while !fits(self) {
            let idle = self
                .sessions
                .iter()
                .filter(|(_, s)| s.used.elapsed() >= EVICTABLE_AFTER)
                .min_by_key(|(_, s)| s.used)
                .map(|(id, _)| *id);
            match idle {
                Some(id) => self.remove(id),
                None => return false,
            }
        }
        true
    }

    /// A session id not in use: positive, hard to guess.
    fn new_id(&mut self) -> i32 {
        loop {
            self.ids += 1;
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(self.ids);
            let id = (h.finish() & 0x7fff_ffff) as i32;
            if id != 0 && !self.sessions.contains_key(&id) {
                return id;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};

    fn asked(topic: &str, partitions: std::ops::Range<i32>) -> Vec<FetchTopic> {
        vec![
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partitions(
                    partitions.map(|p| FetchPartition::default().with_partition(p)).collect(),
                ),
        ]
    }

    /// Opens a session of `asked`, every partition answered at high watermark 5: its id.
    fn open(s: &FetchSessions, asked: &[FetchTopic], owner: &security::Principal) -> i32 {
        let mut resp = FetchResponse::default().with_responses(
            asked
                .iter()
                .map(|t| {
                    FetchableTopicResponse::default().with_topic(t.topic.clone()).with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                PartitionData::default()
                                    .with_partition_index(p.partition)
                                    .with_high_watermark(5)
                            })
                            .collect(),
                    )
                })
                .collect(),
        );
        let mut req = FetchRequest::default().with_session_epoch(0).with_topics(asked.to_vec());
        let context = s.begin(&mut req, owner).expect("a full fetch");
        assert_eq!(context, Context::New);
        s.finish(context, asked, &mut resp, owner);
        resp.session_id
    }

    fn next(
        s: &FetchSessions,
        id: i32,
        epoch: i32,
        owner: &security::Principal,
    ) -> Result<FetchRequest, i16> {
        let mut req = FetchRequest::default().with_session_id(id).with_session_epoch(epoch);
        s.begin(&mut req, owner).map(|_| req)
    }

    #[test]
    fn a_session_is_its_owners_and_stands_for_its_partitions() {
        let s = FetchSessions::default();
        let (alice, bob) = (security::Principal::user("alice"), security::Principal::user("bob"));
        let id = open(&s, &asked("t", 0..3), &alice);
        assert!(id > 0);
        assert_eq!(next(&s, id, 1, &bob).err(), Some(FETCH_SESSION_ID_NOT_FOUND));
        let req = next(&s, id, 1, &alice).expect("the owner's next fetch");
        let named: Vec<i32> = req.topics[0].partitions.iter().map(|p| p.partition).collect();
        assert_eq!(named, [0, 1, 2]);
        assert_eq!(next(&s, id, 1, &alice).err(), Some(INVALID_FETCH_SESSION_EPOCH));
        assert_eq!(s.usage(), (1, 3 * (PARTITION_BYTES + 1)));
        // Another's full fetch naming it does not close it.
        let mut req = FetchRequest::default().with_session_id(id).with_session_epoch(-1);
        assert_eq!(s.begin(&mut req, &bob), Ok(Context::Sessionless));
        assert_eq!(s.usage().0, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_cache_answers_sessionless_until_a_session_idles_out() {
        let s = FetchSessions::default();
        let owner = security::Principal::user("c");
        for _ in 0..MAX_SESSIONS {
            assert!(open(&s, &asked("t", 0..1), &owner) > 0);
        }
        assert_eq!(open(&s, &asked("t", 0..1), &owner), 0, "no room: sessionless");
        tokio::time::advance(EVICTABLE_AFTER).await;
        assert!(open(&s, &asked("t", 0..1), &owner) > 0, "an idle session gave its room");
        assert_eq!(s.usage().0, MAX_SESSIONS);
    }

    #[test]
    fn sessions_hold_at_most_their_bytes() {
        let s = FetchSessions::default();
        let owner = security::Principal::user("c");
        let long = "t".repeat(249);
        let per = PARTITION_BYTES + long.len();
        let fits = i32::try_from(MAX_SESSION_BYTES / per).expect("small");
        let id = open(&s, &asked(&long, 0..fits), &owner);
        assert!(id > 0);
        assert_eq!(open(&s, &asked(&long, 0..1), &owner), 0, "past the bytes: sessionless");
        assert!(s.usage().1 <= MAX_SESSION_BYTES);
        // A session that grows past them is gone.
        let mut req = FetchRequest::default()
            .with_session_id(id)
            .with_session_epoch(1)
            .with_topics(asked(&long, fits..fits + 1));
        assert_eq!(s.begin(&mut req, &owner), Err(FETCH_SESSION_ID_NOT_FOUND));
        assert_eq!(s.usage(), (0, 0));
    }
}
