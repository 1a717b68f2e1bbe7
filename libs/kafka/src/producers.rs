//! Idempotent producers' state for one partition under one owner (ARCHITECTURE §11), with
//! Kafka's rules (`ProducerAppendInfo`, `ProducerStateEntry`): per producer id the epoch and the
//! last [`WINDOW`] batches' sequence ranges. A batch of an older epoch is
//! INVALID_PRODUCER_EPOCH; one equal to a batch in the window is answered with that batch's
//! outcome — its original base offset — and not appended again (a batch still committing is
//! answered when it commits); the next in sequence is appended; a gap is
//! OUT_OF_ORDER_SEQUENCE_NUMBER; a new epoch starts at sequence 0. A producer with no state
//! here (new, or this owner just took the partition over) is accepted at any sequence: never a
//! spurious OUT_OF_ORDER, which librdkafka treats as fatal. A batch whose commit failed leaves
//! the window, so its retry is appended.
//!
//! Not built yet: checkpoints, and the replay a new owner does of the log's tail to rebuild
//! this state before it accepts produce, so that an in-doubt batch retried across a handoff is
//! found.

use std::collections::{HashMap, VecDeque};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

use crate::{Produced, Refused, code};

/// Batches remembered per producer: Kafka's `NUM_BATCHES_TO_RETAIN`.
pub const WINDOW: usize = 5;
/// Producers remembered per partition; the least recently seen is forgotten beyond.
pub const MAX_PRODUCERS: usize = 10_000;

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
    /// Its commit failed: it is not in the log, and a retry must be appended.
    fn failed(&self) -> bool {
        matches!(self.commit.peek(), Some(Err(_)))
    }
}

struct Window {
    epoch: i16,
    batches: VecDeque<Seen>,
    used: u64,
}

/// The producers of one partition under one owner tenure.
#[derive(Default)]
pub struct Producers {
    by_id: HashMap<i64, Window>,
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

impl Producers {
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
        self.clock += 1;
        let used = self.clock;
        if !self.by_id.contains_key(&id)
            && self.by_id.len() >= MAX_PRODUCERS
            && let Some(oldest) = self.by_id.iter().min_by_key(|(_, w)| w.used).map(|(k, _)| *k)
        {
            self.by_id.remove(&oldest);
        }
        let w = self.by_id.entry(id).or_insert_with(|| Window {
            epoch,
            batches: VecDeque::new(),
            used,
        });
        if epoch != w.epoch {
            w.epoch = epoch;
            w.batches.clear();
        }
        w.used = used;
        w.batches.push_back(Seen { first, last, commit });
        while w.batches.len() > WINDOW {
            w.batches.pop_front();
        }
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
pub fn shared(commit: crate::Commit) -> SharedCommit {
    commit.shared()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(offset: i64) -> SharedCommit {
        shared(Box::pin(async move { Ok(Produced { base_offset: offset }) }))
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
            Check::Duplicate(first) => assert_eq!(first.await, Ok(Produced { base_offset: 100 })),
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
    async fn a_duplicate_of_a_batch_still_committing_waits_for_its_commit() {
        let mut p = Producers::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<i64>();
        let commit =
            shared(Box::pin(async move { Ok(Produced { base_offset: rx.await.unwrap_or(-1) }) }));
        p.admitted(4, 0, 0, 0, commit);
        match p.check(4, 0, 0, 0) {
            Check::Duplicate(d) => {
                let _ = tx.send(42);
                assert_eq!(d.await, Ok(Produced { base_offset: 42 }));
            }
            other => assert_eq!(code_of(&other), -100, "not a duplicate"),
        }
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
