//! Idempotent producers' state for one partition under one owner (ARCHITECTURE §11), with
//! Kafka's rules (`ProducerAppendInfo`, `ProducerStateEntry`): per producer id the epoch and the
//! last [`WINDOW`] batches' sequence ranges. A batch of an older epoch is
//! INVALID_PRODUCER_EPOCH; one equal to a batch in the window is answered with that batch's
//! outcome — its original base offset — and not appended again (a batch still committing is
//! answered when it commits); the next in sequence is appended; a gap is
//! OUT_OF_ORDER_SEQUENCE_NUMBER; a new epoch starts at sequence 0. A producer with no state
//! here (new, or this owner just took the partition over) is accepted at any sequence: never a
//! spurious OUT_OF_ORDER, which librdkafka treats as fatal. A batch whose commit failed
//! definitely leaves the window, so its retry is appended; one whose outcome is unknown stays
//! (its retry answered the same) until a new tenure's replay of the log finds out.
//!
//! A new owner rebuilds this state before it accepts produce ([`Producers::replayed`], from a
//! checkpoint made by [`Producers::checkpoint`] and the log's batch headers after it), so an
//! in-doubt batch retried across a handoff is found in the log.

use std::collections::{BTreeMap, VecDeque};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

use kafka::{Produced, Refused, code};

/// Batches remembered per producer: Kafka's `NUM_BATCHES_TO_RETAIN`.
pub const WINDOW: usize = 5;
/// Producers remembered per partition; the least recently seen is forgotten beyond.
pub const MAX_PRODUCERS: usize = 10_000;

/// The first bytes of a producer state checkpoint (format version 1): then the producer count
/// (u32), per producer its id (i64), epoch (i16), batch count (u8, its top bit [`BEHIND`]) and
/// per batch its first and last sequence (i32) and base offset (i64); last a CRC-32C of all
/// before it. Big-endian.
const CHECKPOINT_MAGIC: &[u8; 4] = b"LKP1";
/// The batch count's top bit: the producer may be behind the log ([`Producers::mark_behind`]).
const BEHIND: u8 = 0x80;

/// A commit's outcome, shareable among the batch and its duplicates.
pub type SharedCommit = Shared<BoxFuture<'static, Result<Produced, Refused>>>;

/// What to do with a batch.
pub enum Check {
    /// In sequence (or first seen): append it, then [`Producers::admitted`].
    Append,
    /// Equal to a batch in the window: answer with its outcome.
    Duplicate(SharedCommit),
    Refuse(Refused),
}

impl std::fmt::Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Check::Append => write!(f, "Append"),
            Check::Duplicate(c) => write!(f, "Duplicate({:?})", c.peek()),
            Check::Refuse(r) => write!(f, "Refuse({r:?})"),
        }
    }
}

struct Seen {
    first: i32,
    last: i32,
    commit: SharedCommit,
}

impl Seen {
    /// Its commit failed definitely: it is not in the log, and a retry must be appended. One
    /// answered REQUEST_TIMED_OUT (the answer was lost) is in doubt, not failed: it may be in
    /// the log, so its retry is answered the same until a new tenure's replay finds out (an
    /// unknown outcome ends the writer's incarnation, so the tenure ends too).
    fn failed(&self) -> bool {
        matches!(self.outcome(), Some(Err(c)) if c != code::REQUEST_TIMED_OUT)
    }

    /// Its base offset, once committed.
    fn offset(&self) -> Option<i64> {
        self.outcome().and_then(Result::ok)
    }

    /// The commit's outcome if it has one, a failure as its error code (polled here: a commit
    /// nobody awaited yet counts).
    fn outcome(&self) -> Option<Result<i64, i16>> {
        let of =
            |r: &Result<Produced, Refused>| r.as_ref().map(|p| p.base_offset).map_err(|e| e.code);
        match self.commit.peek() {
            Some(r) => Some(of(r)),
            None => self.commit.clone().now_or_never().map(|r| of(&r)),
        }
    }
}

struct Window {
    epoch: i16,
    batches: VecDeque<Seen>,
    used: u64,
    /// The log may hold later batches of this producer than the window (they were trimmed
    /// away before a replay could read them): a forward gap is then accepted, not refused,
    /// until a batch of it is seen again.
    behind: bool,
    /// A batch of it was admitted under this state (its owner tenure), not only learned.
    admitted_here: bool,
}

impl Window {
    /// Adds a batch in sequence order and keeps the newest [`WINDOW`]. In order, not at the
    /// back: a batch admitted late (its writer paused between the check and the admission) can
    /// come after later batches of its producer learned from the log, and the newest sequence
    /// is what the next batch must follow.
    fn insert(&mut self, b: Seen) {
        let at = self
            .batches
            .iter()
            .position(|x| precedes(b.first, x.first))
            .unwrap_or(self.batches.len());
        self.batches.insert(at, b);
        while self.batches.len() > WINDOW {
            self.batches.pop_front();
        }
    }
}

/// The producers of one partition under one owner tenure.
#[derive(Default)]
pub struct Producers {
    /// Ordered, so a checkpoint's bytes depend only on the state.
    by_id: BTreeMap<i64, Window>,
    clock: u64,
}

impl std::fmt::Debug for Producers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producers").field("producers", &self.by_id.len()).finish()
    }
}

/// The sequence after `last`, wrapping as Kafka's do.
fn next(last: i32) -> i32 {
    if last == i32::MAX { 0 } else { last + 1 }
}

/// Whether sequence `a` comes before `b`, sequences being 0..=i32::MAX and wrapping to 0:
/// `b` is less than half the sequence space (2^30) ahead of `a`. A window spans a few batches,
/// so its order is this one across the wrap, where raw comparison would put the batch after
/// the wrap first.
fn precedes(a: i32, b: i32) -> bool {
    let ahead = (i64::from(b) - i64::from(a)).rem_euclid(1 << 31);
    ahead > 0 && ahead < 1 << 30
}

impl Producers {
    /// Every producer known, as (id, epoch, the last sequence of its newest batch; -1 when
    /// none is kept), by id.
    pub fn active(&self) -> Vec<(i64, i16, i32)> {
        self.by_id
            .iter()
            .map(|(id, w)| (*id, w.epoch, w.batches.back().map_or(-1, |b| b.last)))
            .collect()
    }

    /// Checks a batch of producer `id` at `epoch` covering sequences `first..=last`.
    pub fn check(&mut self, id: i64, epoch: i16, first: i32, last: i32) -> Check {
        let Some(w) = self.by_id.get_mut(&id) else { return Check::Append };
        w.batches.retain(|b| !b.failed());
        if epoch < w.epoch {
            return Check::Refuse(Refused::new(
                code::INVALID_PRODUCER_EPOCH,
                format!("producer {id} epoch {epoch} is older than {}", w.epoch),
            ));
        }
        if epoch > w.epoch {
            return match first {
                0 => Check::Append,
                _ => Check::Refuse(Refused::new(
                    code::OUT_OF_ORDER_SEQUENCE_NUMBER,
                    format!(
                        "producer {id}: a new epoch {epoch} must start at sequence 0, not {first}"
                    ),
                )),
            };
        }
        if let Some(b) = w.batches.iter().find(|b| b.first == first && b.last == last) {
            return Check::Duplicate(b.commit.clone());
        }
        match w.batches.back() {
            None => Check::Append,
            Some(b) if first == next(b.last) => Check::Append,
            Some(b) if w.behind && precedes(b.last, first) => Check::Append,
            Some(b) => Check::Refuse(Refused::new(
                code::OUT_OF_ORDER_SEQUENCE_NUMBER,
                format!(
                    "producer {id}: sequence {first} after {}, expected {}",
                    b.last,
                    next(b.last)
                ),
            )),
        }
    }

    /// Records an appended batch (after [`Check::Append`]) and its commit.
    pub fn admitted(&mut self, id: i64, epoch: i16, first: i32, last: i32, commit: SharedCommit) {
        let w = self.window(id, epoch);
        if epoch != w.epoch {
            w.epoch = epoch;
            w.batches.clear();
        }
        w.behind = false;
        w.admitted_here = true;
        w.insert(Seen { first, last, commit });
    }

    /// Learns a batch found committed in the log at `offset` (a checkpoint's, or the replay of
    /// the log after it, in log order). One already known, or older than the newest known, or
    /// of an older epoch, changes nothing.
    pub fn replayed(&mut self, id: i64, epoch: i16, first: i32, last: i32, offset: i64) {
        let w = self.window(id, epoch);
        if epoch < w.epoch {
            return;
        }
        if epoch > w.epoch {
            w.epoch = epoch;
            w.batches.clear();
        }
        let known = w.batches.iter().any(|b| b.first == first && b.last == last);
        let older = w.batches.back().and_then(Seen::offset).is_some_and(|o| o >= offset);
        if known || older {
            return;
        }
        w.behind = false;
        let commit = shared(Box::pin(async move { Ok(Produced::at(offset)) }));
        w.insert(Seen { first, last, commit });
    }

    /// Adds what another slot's state knows (a checkpoint restored): per producer the newer
    /// epoch's committed batches, the newest [`WINDOW`] of both in sequence order, behind if
    /// either is. A producer moves between a partition's owner slots, so each slot's state
    /// may hold batches of it the others never saw.
    pub fn merge(&mut self, other: Producers) {
        for (id, mut theirs) in other.by_id {
            theirs.batches.retain(|b| b.offset().is_some());
            if theirs.batches.is_empty() {
                continue;
            }
            let Some(ours) = self.by_id.get(&id).map(|w| w.epoch) else {
                let w = self.window(id, theirs.epoch);
                w.batches = std::mem::take(&mut theirs.batches);
                w.behind = theirs.behind;
                continue;
            };
            if theirs.epoch < ours {
                continue;
            }
            let w = self.window(id, theirs.epoch);
            if theirs.epoch > w.epoch {
                w.epoch = theirs.epoch;
                w.batches.clear();
                w.behind = false;
            }
            w.behind |= theirs.behind;
            for b in theirs.batches {
                if !w.batches.iter().any(|x| x.first == b.first && x.last == b.last) {
                    w.insert(b);
                }
            }
        }
    }

    /// The window of producer `id` (made at `epoch` if new; beyond [`MAX_PRODUCERS`], the
    /// least recently used producer with no batch still committing is forgotten: one whose
    /// batch may still land must stay, for its retry and the checkpoint), marked used.
    fn window(&mut self, id: i64, epoch: i16) -> &mut Window {
        self.clock += 1;
        let used = self.clock;
        if !self.by_id.contains_key(&id)
            && self.by_id.len() >= MAX_PRODUCERS
            && let Some(oldest) = self
                .by_id
                .iter()
                .filter(|(_, w)| w.batches.iter().all(|b| b.outcome().is_some()))
                .min_by_key(|(_, w)| w.used)
                .map(|(k, _)| *k)
        {
            self.by_id.remove(&oldest);
        }
        let w = self.by_id.entry(id).or_insert_with(|| Window {
            epoch,
            batches: VecDeque::new(),
            used,
            behind: false,
            admitted_here: false,
        });
        w.used = used;
        w
    }

    /// Whether a batch of producer `id` was admitted under this state: if not, the producer may
    /// come from another owner slot, with batches there this state never saw.
    /// A marker at `epoch` for producer `id` (KIP-98): a later epoch fences the producer's
    /// batches of older ones, and its next batch starts a sequence of its own.
    pub fn marked(&mut self, id: i64, epoch: i16) {
        if let Some(w) = self.by_id.get_mut(&id)
            && epoch > w.epoch
        {
            w.epoch = epoch;
            w.batches.clear();
        }
    }

    /// Producer `id`'s epoch, if known here.
    pub fn epoch_of(&self, id: i64) -> Option<i16> {
        self.by_id.get(&id).map(|w| w.epoch)
    }

    pub fn admitted_here(&self, id: i64) -> bool {
        self.by_id.get(&id).is_some_and(|w| w.admitted_here)
    }

    /// The base offset of producer `id`'s newest committed batch known here.
    pub fn last_offset(&self, id: i64) -> Option<i64> {
        self.by_id.get(&id)?.batches.iter().rev().find_map(Seen::offset)
    }

    /// Marks producer `id` (if known) as possibly behind the log, as
    /// [`mark_behind`](Self::mark_behind) does every producer.
    pub fn mark_behind_one(&mut self, id: i64) {
        if let Some(w) = self.by_id.get_mut(&id) {
            w.behind = true;
        }
    }

    /// Marks every producer known as possibly behind the log: the log's start passed the
    /// offset the state is true of (a trim), so batches between were never replayed. Kafka
    /// keeps producer state when records are deleted; here a producer's next batch after a
    /// gap is then accepted (never a spurious OUT_OF_ORDER), and exact duplicates of the
    /// batches still known are still caught.
    pub fn mark_behind(&mut self) {
        for w in self.by_id.values_mut() {
            w.behind = true;
        }
    }

    /// A checkpoint of the committed batches, and the offset it is true of the log below:
    /// `end` (the log's next offset read before this call, while this owner served the slot),
    /// lowered so that a batch still committing or in doubt — it commits after its producer's
    /// previous batch, and at or after `floor`, the log's end when this tenure began — lies
    /// above it.
    /// Replaying the log from there finds every batch left out.
    pub fn checkpoint(&self, floor: u64, end: u64) -> (Vec<u8>, u64) {
        let mut upto = end;
        let mut out = Vec::with_capacity(16 + self.by_id.len() * 16);
        out.extend_from_slice(CHECKPOINT_MAGIC);
        out.extend_from_slice(&0u32.to_be_bytes());
        let mut count = 0u32;
        for (id, w) in &self.by_id {
            let mut batches = Vec::with_capacity(w.batches.len());
            let mut before = floor;
            for b in &w.batches {
                match (b.offset(), b.failed()) {
                    (Some(o), _) => {
                        batches.push((b.first, b.last, o));
                        before = u64::try_from(o).unwrap_or(0);
                    }
                    // Still committing, or in doubt: it may land (or have landed) above its
                    // producer's previous batch, so the replay must cover from there.
                    (None, false) => upto = upto.min(before),
                    (None, true) => {}
                }
            }
            if batches.is_empty() {
                continue;
            }
            count += 1;
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&w.epoch.to_be_bytes());
            out.push(batches.len() as u8 | if w.behind { BEHIND } else { 0 });
            for (first, last, offset) in batches {
                out.extend_from_slice(&first.to_be_bytes());
                out.extend_from_slice(&last.to_be_bytes());
                out.extend_from_slice(&offset.to_be_bytes());
            }
        }
        out[CHECKPOINT_MAGIC.len()..CHECKPOINT_MAGIC.len() + 4]
            .copy_from_slice(&count.to_be_bytes());
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        (out, upto)
    }

    /// The state a [`checkpoint`](Self::checkpoint) holds. Counts are bounded by the bytes
    /// present before anything is allocated.
    pub fn restore(b: &[u8]) -> Result<Producers, String> {
        let bad = |m: &str| Err(format!("producer state checkpoint: {m}"));
        let head = CHECKPOINT_MAGIC.len() + 4;
        if b.len() < head + 4 || !b.starts_with(CHECKPOINT_MAGIC) {
            return bad("not a checkpoint");
        }
        let (body, crc) = b.split_at(b.len() - 4);
        if crc32c::crc32c(body).to_be_bytes() != crc {
            return bad("checksum mismatch");
        }
        let count = u32::from_be_bytes([body[4], body[5], body[6], body[7]]) as usize;
        // A producer takes at least 11 + 16 bytes.
        if count > MAX_PRODUCERS || count > (body.len() - head) / 27 {
            return bad("producer count larger than the checkpoint");
        }
        let mut p = Producers::default();
        let mut at = head;
        let take = |at: &mut usize, n: usize| -> Option<&[u8]> {
            let s = body.get(*at..*at + n)?;
            *at += n;
            Some(s)
        };
        for _ in 0..count {
            let Some(f) = take(&mut at, 11) else { return bad("truncated") };
            let id = i64::from_be_bytes(f[0..8].try_into().unwrap_or_default());
            let epoch = i16::from_be_bytes([f[8], f[9]]);
            let n = usize::from(f[10] & !BEHIND);
            if n == 0 || n > WINDOW {
                return bad("batch count");
            }
            for _ in 0..n {
                let Some(b) = take(&mut at, 16) else { return bad("truncated") };
                let first = i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                let last = i32::from_be_bytes([b[4], b[5], b[6], b[7]]);
                let offset = i64::from_be_bytes(b[8..16].try_into().unwrap_or_default());
                p.replayed(id, epoch, first, last, offset);
            }
            if f[10] & BEHIND != 0
                && let Some(w) = p.by_id.get_mut(&id)
            {
                w.behind = true;
            }
        }
        if at != body.len() {
            return bad("trailing bytes");
        }
        Ok(p)
    }

    /// Producers remembered.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

/// A commit future made shareable.
pub fn shared(commit: kafka::Commit) -> SharedCommit {
    commit.shared()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(offset: i64) -> SharedCommit {
        shared(Box::pin(async move { Ok(Produced::at(offset)) }))
    }

    fn failed() -> SharedCommit {
        shared(Box::pin(async { Err(Refused::new(code::NOT_LEADER_OR_FOLLOWER, "moved")) }))
    }

    fn code_of(c: &Check) -> i16 {
        match c {
            Check::Append => 0,
            Check::Duplicate(_) => -100,
            Check::Refuse(r) => r.code,
        }
    }

    #[tokio::test]
    async fn kafkas_sequence_rules() {
        let mut p = Producers::default();
        // Unknown producer: accepted at any sequence.
        assert_eq!(code_of(&p.check(7, 0, 40, 44)), 0);
        p.admitted(7, 0, 40, 44, done(100));
        // In sequence; a gap; an exact duplicate answered with the original offset.
        assert_eq!(code_of(&p.check(7, 0, 45, 49)), 0);
        p.admitted(7, 0, 45, 49, done(105));
        assert_eq!(code_of(&p.check(7, 0, 51, 55)), code::OUT_OF_ORDER_SEQUENCE_NUMBER);
        match p.check(7, 0, 40, 44) {
            Check::Duplicate(first) => assert_eq!(first.await, Ok(Produced::at(100))),
            other => assert_eq!(code_of(&other), -100, "not a duplicate"),
        }
        // An older epoch is fenced; a newer one starts at 0.
        assert_eq!(code_of(&p.check(7, -1, 50, 50)), code::INVALID_PRODUCER_EPOCH);
        assert_eq!(code_of(&p.check(7, 1, 3, 3)), code::OUT_OF_ORDER_SEQUENCE_NUMBER);
        assert_eq!(code_of(&p.check(7, 1, 0, 0)), 0);
        p.admitted(7, 1, 0, 0, done(110));
        assert_eq!(code_of(&p.check(7, 0, 50, 50)), code::INVALID_PRODUCER_EPOCH);
        // Only the last five batches are remembered.
        for i in 1..=6 {
            p.admitted(7, 1, i, i, done(110 + i64::from(i)));
        }
        assert_eq!(code_of(&p.check(7, 1, 1, 1)), code::OUT_OF_ORDER_SEQUENCE_NUMBER);
        assert!(matches!(p.check(7, 1, 2, 2), Check::Duplicate(_)));
        // Sequences wrap at i32::MAX.
        p.admitted(8, 0, i32::MAX - 1, i32::MAX, done(200));
        assert_eq!(code_of(&p.check(8, 0, 0, 3)), 0);
    }

    /// L7: beyond the producers kept, the one forgotten is never one whose batch is still
    /// committing: its retry must be answered as a duplicate, not appended again.
    #[tokio::test]
    async fn a_producer_with_a_batch_committing_is_never_the_one_forgotten() {
        let mut p = Producers::default();
        let committing = shared(Box::pin(futures::future::pending()));
        p.admitted(1, 0, 0, 4, committing);
        for id in 2..=MAX_PRODUCERS as i64 {
            p.admitted(id, 0, 0, 0, done(id));
        }
        assert_eq!(p.len(), MAX_PRODUCERS);
        // Producer 1 is the least recently used; a new one comes.
        p.admitted(MAX_PRODUCERS as i64 + 1, 0, 0, 0, done(0));
        assert_eq!(p.len(), MAX_PRODUCERS);
        assert!(
            matches!(p.check(1, 0, 0, 4), Check::Duplicate(_)),
            "the committing batch was forgotten"
        );
        assert_eq!(p.last_offset(2), None, "the oldest producer with nothing committing goes");
        assert_eq!(p.last_offset(3), Some(3));
    }

    /// A full window across the wrap: the batch after it is the newest (its successor is in
    /// sequence, its retry a duplicate), in arrival order as in the log.
    #[tokio::test]
    async fn the_window_keeps_its_order_across_the_sequence_wrap() {
        let mut p = Producers::default();
        for i in 0..5 {
            let first = i32::MAX - 49 + i * 10;
            p.admitted(8, 0, first, first + 9, done(i64::from(i) * 10));
        }
        assert_eq!(code_of(&p.check(8, 0, 0, 9)), 0);
        p.admitted(8, 0, 0, 9, done(50));
        assert_eq!(code_of(&p.check(8, 0, 10, 19)), 0, "the batch after the wrapped one");
        assert!(matches!(p.check(8, 0, 0, 9), Check::Duplicate(_)), "a retry after the wrap");
        assert_eq!(p.last_offset(8), Some(50));
        // The same learned from the log, and through a checkpoint.
        let mut q = Producers::default();
        for i in 0..5 {
            let first = i32::MAX - 49 + i * 10;
            q.replayed(8, 0, first, first + 9, i64::from(i) * 10);
        }
        q.replayed(8, 0, 0, 9, 50);
        let (bytes, _) = q.checkpoint(0, 60);
        let mut r = Producers::restore(&bytes).expect("restores");
        assert_eq!(code_of(&r.check(8, 0, 10, 19)), 0);
        assert!(matches!(r.check(8, 0, 0, 9), Check::Duplicate(_)));
        // A producer possibly behind accepts a forward gap across the wrap, never a step back.
        r.mark_behind();
        assert_eq!(code_of(&r.check(8, 0, 30, 39)), 0);
        assert_eq!(
            code_of(&r.check(8, 0, i32::MAX - 100, i32::MAX - 90)),
            code::OUT_OF_ORDER_SEQUENCE_NUMBER
        );
    }

    #[tokio::test]
    async fn a_failed_commit_leaves_the_window_and_its_retry_is_appended() {
        let mut p = Producers::default();
        p.admitted(3, 0, 0, 4, done(0));
        let f = failed();
        let _ = f.clone().await;
        p.admitted(3, 0, 5, 9, f);
        // The retry of the failed batch is in sequence again, not a duplicate of a failure.
        assert_eq!(code_of(&p.check(3, 0, 5, 9)), 0);
    }

    #[tokio::test]
    async fn a_batch_in_doubt_is_never_appended_twice_and_holds_the_checkpoint_back() {
        let mut p = Producers::default();
        p.admitted(3, 0, 0, 4, done(10));
        let lost = shared(Box::pin(async {
            Err(Refused::new(code::REQUEST_TIMED_OUT, "the commit's answer was lost"))
        }));
        let _ = lost.clone().await;
        p.admitted(3, 0, 5, 9, lost);
        // Its retry gets the same unknown answer, not a second append.
        match p.check(3, 0, 5, 9) {
            Check::Duplicate(d) => {
                assert_eq!(d.await.map_err(|r| r.code), Err(code::REQUEST_TIMED_OUT))
            }
            other => assert_eq!(code_of(&other), -100, "not a duplicate"),
        }
        // A checkpoint stops below it: it may be in the log above offset 10.
        assert_eq!(p.checkpoint(0, 30).1, 10);
    }

    #[tokio::test]
    async fn a_producer_behind_a_trimmed_log_may_skip_ahead_until_seen_again() {
        let mut p = Producers::default();
        p.admitted(5, 0, 0, 0, done(1));
        p.mark_behind();
        let (state, _) = p.checkpoint(0, 2);
        let mut q = Producers::restore(&state).expect("restores");
        // Its batches 1..=6 were trimmed away unread: 7 is accepted, an exact duplicate still
        // caught, and once a batch of it is known again, gaps are refused again.
        assert!(matches!(q.check(5, 0, 0, 0), Check::Duplicate(_)));
        assert_eq!(code_of(&q.check(5, 0, 7, 7)), 0);
        q.admitted(5, 0, 7, 7, done(9));
        assert_eq!(code_of(&q.check(5, 0, 9, 9)), code::OUT_OF_ORDER_SEQUENCE_NUMBER);
        // Without the mark, the gap is refused.
        assert_eq!(code_of(&p.check(5, 0, 7, 7)), 0, "marked before the checkpoint");
        let mut r = Producers::default();
        r.admitted(5, 0, 0, 0, done(1));
        assert_eq!(code_of(&r.check(5, 0, 7, 7)), code::OUT_OF_ORDER_SEQUENCE_NUMBER);
    }

    #[tokio::test]
    async fn a_batch_admitted_after_later_ones_were_replayed_keeps_the_window_in_sequence() {
        let mut p = Producers::default();
        p.admitted(0, 0, 11, 11, done(25));
        // Learned from the log while the writer was paused...
        p.replayed(0, 0, 14, 16, 39);
        p.replayed(0, 0, 17, 17, 42);
        // ...then the admission it was paused in returns.
        p.admitted(0, 0, 12, 13, done(26));
        assert_eq!(code_of(&p.check(0, 0, 18, 18)), 0, "18 follows 17");
        assert!(matches!(p.check(0, 0, 12, 13), Check::Duplicate(_)));
    }

    #[tokio::test]
    async fn states_of_two_slots_merge_per_producer() {
        // Producer 1 wrote in slot a, then moved to slot b; producer 2 only in a; producer 3
        // is at a newer epoch in b than in a.
        let mut a = Producers::default();
        a.admitted(1, 0, 0, 0, done(10));
        a.admitted(1, 0, 1, 1, done(11));
        a.admitted(2, 0, 5, 5, done(12));
        a.admitted(3, 0, 9, 9, done(13));
        let mut b = Producers::default();
        b.admitted(1, 0, 2, 2, done(20));
        b.admitted(3, 1, 0, 0, done(21));
        b.admitted(4, 0, 0, 0, failed());
        let restore = |p: &Producers| {
            let (state, _) = p.checkpoint(0, 30);
            Producers::restore(&state).expect("restores")
        };
        let mut m = restore(&a);
        m.merge(restore(&b));
        // Both slots' batches of producer 1 are known, in sequence.
        for (first, offset) in [(0, 10), (1, 11), (2, 20)] {
            match m.check(1, 0, first, first) {
                Check::Duplicate(c) => assert_eq!(c.await, Ok(Produced::at(offset))),
                other => assert_eq!(code_of(&other), -100, "sequence {first} not a duplicate"),
            }
        }
        assert_eq!(code_of(&m.check(1, 0, 3, 3)), 0, "3 follows 2");
        assert_eq!(code_of(&m.check(1, 0, 4, 4)), code::OUT_OF_ORDER_SEQUENCE_NUMBER);
        assert!(matches!(m.check(2, 0, 5, 5), Check::Duplicate(_)));
        // The newer epoch wins, whichever side it came from.
        assert_eq!(code_of(&m.check(3, 0, 10, 10)), code::INVALID_PRODUCER_EPOCH);
        assert!(matches!(m.check(3, 1, 0, 0), Check::Duplicate(_)));
        let mut n = restore(&b);
        n.merge(restore(&a));
        assert_eq!(code_of(&n.check(3, 0, 10, 10)), code::INVALID_PRODUCER_EPOCH);
        assert_eq!(code_of(&n.check(1, 0, 3, 3)), 0, "the merge is the same either way");
        // A failed batch is in neither.
        assert_eq!(n.len(), 3);
    }

    #[tokio::test]
    async fn a_duplicate_of_a_batch_still_committing_waits_for_its_commit() {
        let mut p = Producers::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<i64>();
        let commit = shared(Box::pin(async move { Ok(Produced::at(rx.await.unwrap_or(-1))) }));
        p.admitted(4, 0, 0, 0, commit);
        match p.check(4, 0, 0, 0) {
            Check::Duplicate(d) => {
                let _ = tx.send(42);
                assert_eq!(d.await, Ok(Produced::at(42)));
            }
            other => assert_eq!(code_of(&other), -100, "not a duplicate"),
        }
    }

    #[tokio::test]
    async fn a_checkpoint_restores_the_windows_and_stops_below_batches_still_committing() {
        let mut p = Producers::default();
        p.admitted(1, 2, 0, 4, done(10));
        p.admitted(1, 2, 5, 9, done(15));
        p.admitted(2, 0, 7, 7, done(20));
        let (state, upto) = p.checkpoint(8, 21);
        assert_eq!(upto, 21, "nothing committing: true of the log up to its end");
        let mut q = Producers::restore(&state).expect("restores");
        assert_eq!(q.len(), 2);
        match q.check(1, 2, 5, 9) {
            Check::Duplicate(c) => assert_eq!(c.await, Ok(Produced::at(15))),
            other => assert_eq!(code_of(&other), -100, "not a duplicate"),
        }
        assert_eq!(code_of(&q.check(1, 2, 11, 11)), code::OUT_OF_ORDER_SEQUENCE_NUMBER);
        assert_eq!(code_of(&q.check(1, 1, 10, 10)), code::INVALID_PRODUCER_EPOCH);
        assert_eq!(code_of(&q.check(2, 0, 8, 8)), 0);
        // A batch still committing lowers the checkpoint to its producer's previous batch, or
        // to the tenure's floor for a producer with none; a failed one is left out.
        let (tx, rx) = tokio::sync::oneshot::channel::<i64>();
        let pending = shared(Box::pin(async move { Ok(Produced::at(rx.await.unwrap_or(-1))) }));
        p.admitted(1, 2, 10, 10, pending.clone());
        assert_eq!(p.checkpoint(8, 30).1, 15);
        p.admitted(3, 0, 0, 0, failed());
        let _ = p.by_id.get(&3).map(|w| w.batches[0].commit.clone()).expect("kept").await;
        assert_eq!(p.checkpoint(8, 30).1, 15);
        p.admitted(4, 0, 0, 0, shared(Box::pin(futures::future::pending())));
        assert_eq!(p.checkpoint(8, 30).1, 8);
        let _ = tx.send(25);
        let _ = pending.await;
        let (state, _) = p.checkpoint(8, 30);
        let q = Producers::restore(&state).expect("restores");
        assert_eq!(q.len(), 2, "producers with no committed batch are left out");
    }

    #[test]
    fn replayed_batches_are_learned_once_and_in_log_order() {
        let mut p = Producers::default();
        p.replayed(5, 0, 0, 1, 100);
        p.replayed(5, 0, 0, 1, 100);
        p.replayed(5, 0, 2, 3, 110);
        // Older than the newest known (a checkpoint replayed over): ignored.
        p.replayed(5, 0, 9, 9, 105);
        assert_eq!(code_of(&p.check(5, 0, 4, 4)), 0);
        assert!(matches!(p.check(5, 0, 0, 1), Check::Duplicate(_)));
        // A newer epoch replaces the window; an older one is ignored.
        p.replayed(5, 1, 0, 0, 120);
        p.replayed(5, 0, 4, 4, 130);
        assert_eq!(code_of(&p.check(5, 1, 1, 1)), 0);
        assert_eq!(code_of(&p.check(5, 0, 4, 4)), code::INVALID_PRODUCER_EPOCH);
    }

    #[test]
    fn corrupt_checkpoints_are_refused_without_large_allocations() {
        let mut p = Producers::default();
        p.replayed(1, 0, 0, 0, 0);
        let (good, _) = p.checkpoint(0, 1);
        assert!(Producers::restore(&good).is_ok());
        for cut in 0..good.len() {
            assert!(Producers::restore(&good[..cut]).is_err(), "truncated at {cut}");
        }
        let mut flipped = good.clone();
        flipped[10] ^= 1;
        assert!(Producers::restore(&flipped).is_err());
        // A count far beyond the bytes present, with a valid checksum.
        let mut huge = good[..good.len() - 4].to_vec();
        huge[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        let crc = crc32c::crc32c(&huge);
        huge.extend_from_slice(&crc.to_be_bytes());
        assert!(Producers::restore(&huge).is_err());
    }

    #[test]
    fn producers_per_partition_are_bounded() {
        let mut p = Producers::default();
        for id in 0..(MAX_PRODUCERS as i64 + 10) {
            p.admitted(id, 0, 0, 0, done(id));
        }
        assert_eq!(p.len(), MAX_PRODUCERS);
        // The first ones seen were forgotten: accepted anew at any sequence.
        assert_eq!(code_of(&p.check(0, 0, 9, 9)), 0);
    }
}
