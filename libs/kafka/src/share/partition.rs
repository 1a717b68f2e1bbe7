//! One share-partition's state (KIP-932's `SharePartition`): which of a partition's records a
//! share group still has to deliver, to whom each is lent, and how often each went out.
//!
//! The window is `[start, end)`: `start` is Kafka's share-partition start offset (SPSO, every
//! record below it acknowledged or archived), `end` the first offset never acquired. Runs of
//! offsets with one state cover the window, contiguous and in order: available (never taken,
//! released, or its lock expired), acquired by a member until a deadline on the owner's
//! clock, or done (accepted, rejected or archived: Kafka's acknowledged and archived states,
//! which deliver alike). Each run keeps its records' delivery count: how often they were
//! acquired. A record is acquired only while its count is below the delivery limit; one at the
//! limit is archived instead. Done runs at the window's front move `start` on, so the state
//! is bounded by the window, and the window by the record-lock limit.
//!
//! What outlives an owner ([`Stored`]): the window's bounds, the done ranges above `start`
//! and the delivery counts. A change is stored before it is answered ([`Change`]); an
//! acquisition too (its counts move), so a record never goes out more often than the limit
//! whatever owner fails. Who holds a lock is not stored: a new owner finds those records
//! available (with their counts), as a new Kafka share-partition leader does.

use std::collections::BTreeMap;
use std::sync::Arc;

/// What a share-partition's state is stored as (KIP-932's share-group state, here a cursor's
/// position, acknowledgements and properties).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    /// The share-partition start offset.
    pub start: i64,
    /// The first offset never acquired (at least `start`).
    pub end: i64,
    /// Offset ranges `[from, to)` above `start` whose records are done.
    pub done: Vec<(i64, i64)>,
    /// Delivery counts: `(first, last inclusive, count)` of records not done.
    pub counts: Vec<(i64, i64, i16)>,
}

/// A change to store: the state's new bounds and counts (whole), and the ranges newly done.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Change {
    pub start: i64,
    pub end: i64,
    /// Ranges `[from, to)` done by this change.
    pub done: Vec<(i64, i64)>,
    pub counts: Vec<(i64, i64, i16)>,
}

/// A record's state in the window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordState {
    Available,
    Acquired { member: Arc<str>, deadline_ms: i64 },
    Done,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Run {
    /// One past its last offset.
    to: u64,
    state: RecordState,
    count: u16,
}

/// An acknowledgement's type (ShareFetch and ShareAcknowledge's `AcknowledgeTypes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckType {
    /// The offset holds no record (a compacted or control offset): archived.
    Gap,
    /// Processed: done.
    Accept,
    /// Not processed: available again, for this or another member.
    Release,
    /// Unprocessable: archived, never delivered again.
    Reject,
    /// Still being processed: the lock is extended (KIP-1222).
    Renew,
}

impl AckType {
    /// The wire's type, `None` for one no client may send.
    pub fn from_wire(t: i8) -> Option<AckType> {
        Some(match t {
            0 => AckType::Gap,
            1 => AckType::Accept,
            2 => AckType::Release,
            3 => AckType::Reject,
            4 => AckType::Renew,
            _ => return None,
        })
    }
}

/// Acquired records as ShareFetch names them: `(first, last inclusive, delivery count)`.
pub type Acquired = Vec<(i64, i64, i16)>;

/// Why an acknowledgement was refused: Kafka's INVALID_RECORD_STATE (a record not held by
/// the member) or INVALID_REQUEST (a malformed batch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AckRefused {
    InvalidRecordState(String),
    InvalidRequest(String),
}

/// One share-partition's state, held by its owner.
#[derive(Clone, Debug)]
pub struct SharePartition {
    start: u64,
    end: u64,
    /// Keyed by first offset; they cover `[start, end)` exactly.
    runs: BTreeMap<u64, Run>,
    /// Ranges done since the last [`SharePartition::take_change`].
    newly_done: Vec<(i64, i64)>,
}

fn off(o: u64) -> i64 {
    i64::try_from(o).unwrap_or(i64::MAX)
}

fn unoff(o: i64) -> u64 {
    u64::try_from(o).unwrap_or(0)
}

impl SharePartition {
    /// A share-partition starting at `start`, nothing taken yet.
    pub fn new(start: i64) -> SharePartition {
        let s = unoff(start);
        SharePartition { start: s, end: s, runs: BTreeMap::new(), newly_done: Vec::new() }
    }

    /// The state a stored one describes: every record in its window available (locks are
    /// not stored), with its count, or done.
    pub fn from_stored(stored: &Stored) -> SharePartition {
        let (start, end) = (unoff(stored.start), unoff(stored.end).max(unoff(stored.start)));
        let mut p = SharePartition { start, end, runs: BTreeMap::new(), newly_done: Vec::new() };
        if start < end {
            p.runs.insert(start, Run { to: end, state: RecordState::Available, count: 0 });
        }
        for &(first, last, count) in &stored.counts {
            let (a, b) = (unoff(first).max(start), unoff(last).saturating_add(1).min(end));
            p.each_run(a, b, |r| r.count = u16::try_from(count).unwrap_or(0));
        }
        for &(from, to) in &stored.done {
            let (a, b) = (unoff(from).max(start), unoff(to).min(end));
            p.each_run(a, b, |r| r.state = RecordState::Done);
        }
        p.settle();
        p.newly_done.clear();
        p
    }

    /// The share-partition start offset.
    pub fn start(&self) -> i64 {
        off(self.start)
    }

    /// The first offset never acquired.
    pub fn end(&self) -> i64 {
        off(self.end)
    }

    /// Records in the window (acquired, available or done above the start).
    pub fn window(&self) -> u64 {
        self.end - self.start
    }

    /// The state and delivery count of `offset`; `None` outside the window.
    pub fn record(&self, offset: i64) -> Option<(RecordState, u16)> {
        let o = unoff(offset);
        let (_, r) = self.runs.range(..=o).next_back()?;
        (o < r.to && o >= self.start).then(|| (r.state.clone(), r.count))
    }

    /// Runs of alike records the state holds (what it costs in memory: about 64 bytes each).
    pub fn run_count(&self) -> usize {
        self.runs.len()
    }

    /// Records acquired now, by anyone.
    pub fn acquired_count(&self) -> u64 {
        self.runs
            .iter()
            .filter(|(_, r)| matches!(r.state, RecordState::Acquired { .. }))
            .map(|(a, r)| r.to - a)
            .sum()
    }

    /// Makes a run start at `at` (inside the window), splitting the one across it.
    fn split(&mut self, at: u64) {
        let Some((&a, r)) = self.runs.range_mut(..at).next_back() else { return };
        if a < at && at < r.to {
            let tail = r.clone();
            r.to = at;
            self.runs.insert(at, tail);
        }
    }

    /// Applies `f` to every run in `[a, b)`, split at both ends first.
    fn each_run(&mut self, a: u64, b: u64, mut f: impl FnMut(&mut Run)) {
        if a >= b {
            return;
        }
        self.split(a);
        self.split(b);
        for (_, r) in self.runs.range_mut(a..b) {
            f(r);
        }
    }

    /// Merges neighbours alike, and moves the start past done runs at the front.
    fn settle(&mut self) {
        while let Some(e) = self.runs.first_entry() {
            if e.get().state != RecordState::Done {
                break;
            }
            let (_, r) = e.remove_entry();
            self.start = r.to;
        }
        if self.runs.is_empty() {
            self.start = self.end;
        }
        let keys: Vec<u64> = self.runs.keys().copied().collect();
        let mut prev: Option<u64> = None;
        for k in keys {
            match prev {
                Some(p)
                    if {
                        let (pr, r) = (&self.runs[&p], &self.runs[&k]);
                        pr.to == k && pr.state == r.state && pr.count == r.count
                    } =>
                {
                    let to = self.runs[&k].to;
                    self.runs.remove(&k);
                    if let Some(pr) = self.runs.get_mut(&p) {
                        pr.to = to;
                    }
                }
                _ => prev = Some(k),
            }
        }
    }

    /// Locks whose deadline passed are released: their records are available again.
    pub fn expire(&mut self, now_ms: i64) {
        let mut any = false;
        for r in self.runs.values_mut() {
            if matches!(&r.state, RecordState::Acquired { deadline_ms, .. } if *deadline_ms <= now_ms)
            {
                r.state = RecordState::Available;
                any = true;
            }
        }
        if any {
            self.settle();
        }
    }

    /// Every record `member` holds is available again (it left, or its session closed).
    pub fn release_member(&mut self, member: &str) {
        let mut any = false;
        for r in self.runs.values_mut() {
            if matches!(&r.state, RecordState::Acquired { member: m, .. } if &**m == member) {
                r.state = RecordState::Available;
                any = true;
            }
        }
        if any {
            self.settle();
        }
    }

    /// Available records whose delivery count reached `limit` are archived (done): released,
    /// or their lock expired, at their last delivery.
    pub fn archive_exhausted(&mut self, limit: u16) {
        let mut any = false;
        for (&a, r) in self.runs.iter_mut() {
            if r.state == RecordState::Available && r.count >= limit {
                r.state = RecordState::Done;
                self.newly_done.push((off(a), off(r.to)));
                any = true;
            }
        }
        if any {
            self.settle();
        }
    }

    /// The first available record of the window still under the delivery `limit`, if any.
    pub fn first_available(&self, limit: u16) -> Option<i64> {
        self.runs
            .iter()
            .find(|(_, r)| r.state == RecordState::Available && r.count < limit)
            .map(|(a, _)| off(*a))
    }

    /// Acquires available records of the window below `below` for `member`, oldest first, up
    /// to `max_records`: each locked until `deadline_ms`, its delivery count one more. A
    /// record whose count reached `limit` is archived instead (done).
    pub fn acquire_available(
        &mut self,
        member: &Arc<str>,
        deadline_ms: i64,
        limit: u16,
        max_records: u64,
        below: i64,
    ) -> Acquired {
        let mut out = Acquired::new();
        let mut budget = max_records;
        let below = unoff(below);
        let starts: Vec<u64> = self
            .runs
            .range(..below)
            .filter(|(_, r)| r.state == RecordState::Available)
            .map(|(a, _)| *a)
            .collect();
        for a in starts {
            if budget == 0 {
                break;
            }
            let Some(r) = self.runs.get_mut(&a) else { continue };
            let (to, count) = (r.to, r.count);
            if count >= limit {
                r.state = RecordState::Done;
                self.newly_done.push((off(a), off(to)));
                continue;
            }
            let b = to.min(below).min(a.saturating_add(budget));
            self.split(b);
            if let Some(r) = self.runs.get_mut(&a) {
                r.state = RecordState::Acquired { member: member.clone(), deadline_ms };
                r.count = count.saturating_add(1);
            }
            budget -= b - a;
            out.push((off(a), off(b - 1), i16::try_from(count + 1).unwrap_or(i16::MAX)));
        }
        self.settle();
        out
    }

    /// Available records of `[from, to)` are done (they hold no record any more: compacted
    /// away, or a control batch).
    pub fn drop_available(&mut self, from: i64, to: i64) {
        let (a, b) = (unoff(from).max(self.start), unoff(to).min(self.end));
        if a >= b {
            return;
        }
        let mut done = Vec::new();
        self.each_run(a, b, |r| {
            if r.state == RecordState::Available {
                r.state = RecordState::Done;
            }
        });
        for (&k, r) in self.runs.range(a..b) {
            if r.state == RecordState::Done {
                done.push((off(k), off(r.to)));
            }
        }
        self.newly_done.extend(done);
        self.settle();
    }

    /// Records the window may still take in before reaching `max_window` (the record-lock
    /// limit).
    pub fn room(&self, max_window: u64) -> u64 {
        max_window.saturating_sub(self.window())
    }

    /// Takes the log's records `[first, last]` into the window, acquired by `member` (their
    /// first delivery): the part at or past `end` only, at most `max` records. Offsets between
    /// `end` and `first` hold no record (compacted, trimmed, or a control batch skipped): done.
    /// Returns what was acquired.
    pub fn acquire_new(
        &mut self,
        first: i64,
        last: i64,
        member: &Arc<str>,
        deadline_ms: i64,
        max: u64,
    ) -> Option<(i64, i64, i16)> {
        let (first, last) = (unoff(first), unoff(last));
        if last < self.end || max == 0 {
            return None;
        }
        if first > self.end {
            self.skip(off(first));
        }
        let a = self.end;
        let b = last.saturating_add(1).min(a.saturating_add(max));
        self.runs.insert(
            a,
            Run {
                to: b,
                state: RecordState::Acquired { member: member.clone(), deadline_ms },
                count: 1,
            },
        );
        self.end = b;
        self.settle();
        Some((off(a), off(b - 1), 1))
    }

    /// Offsets from `end` up to `to` hold nothing to deliver (a control batch, a gap): done.
    pub fn skip(&mut self, to: i64) {
        let to = unoff(to);
        if to <= self.end {
            return;
        }
        self.runs.insert(self.end, Run { to, state: RecordState::Done, count: 0 });
        self.newly_done.push((off(self.end), off(to)));
        self.end = to;
        self.settle();
    }

    /// The log's start moved past records of the window (retention, DeleteRecords): those
    /// below `log_start` are gone, and the window starts there at the earliest.
    pub fn trim_to(&mut self, log_start: i64) {
        let s = unoff(log_start);
        if s <= self.start {
            return;
        }
        if s >= self.end {
            self.runs.clear();
            self.start = s;
            self.end = s;
            return;
        }
        self.split(s);
        let below: Vec<u64> = self.runs.range(..s).map(|(a, _)| *a).collect();
        for a in below {
            self.runs.remove(&a);
        }
        self.start = s;
        self.settle();
    }

    /// Applies `member`'s acknowledgements of `[first, last]` batches, all or none: each
    /// offset must be acquired by `member` (INVALID_RECORD_STATE otherwise), and a batch names
    /// one type for all its offsets or one per offset.
    pub fn acknowledge(
        &mut self,
        member: &str,
        now_ms: i64,
        lock_ms: i64,
        batches: &[(i64, i64, Vec<i8>)],
    ) -> Result<(), AckRefused> {
        let mut plan: Vec<(u64, u64, AckType)> = Vec::new();
        for (first, last, types) in batches {
            if *first < 0 || last < first {
                return Err(AckRefused::InvalidRequest(format!(
                    "an acknowledgement batch [{first}, {last}]"
                )));
            }
            let (a, b) = (unoff(*first), unoff(*last) + 1);
            let per_offset = types.len() as u64 == b - a && types.len() > 1;
            if types.len() != 1 && !per_offset {
                return Err(AckRefused::InvalidRequest(format!(
                    "{} acknowledge types for the {} offsets [{first}, {last}]",
                    types.len(),
                    b - a
                )));
            }
            for (i, t) in types.iter().enumerate() {
                let Some(t) = AckType::from_wire(*t) else {
                    return Err(AckRefused::InvalidRequest(format!("acknowledge type {t}")));
                };
                let (x, y) = if per_offset { (a + i as u64, a + i as u64 + 1) } else { (a, b) };
                self.check_held(member, x, y)?;
                plan.push((x, y, t));
            }
        }
        let deadline = now_ms.saturating_add(lock_ms);
        for (a, b, t) in plan {
            match t {
                AckType::Accept | AckType::Reject | AckType::Gap => {
                    self.each_run(a, b, |r| r.state = RecordState::Done);
                    self.newly_done.push((off(a), off(b)));
                }
                AckType::Release => self.each_run(a, b, |r| r.state = RecordState::Available),
                AckType::Renew => self.each_run(a, b, |r| {
                    if let RecordState::Acquired { deadline_ms, .. } = &mut r.state {
                        *deadline_ms = deadline;
                    }
                }),
            }
        }
        self.settle();
        Ok(())
    }

    /// Whether every offset of `[a, b)` is acquired by `member`.
    fn check_held(&self, member: &str, a: u64, b: u64) -> Result<(), AckRefused> {
        let refused = || {
            AckRefused::InvalidRecordState(format!(
                "records [{a}, {}] are not acquired by member {member}",
                b - 1
            ))
        };
        if a < self.start || b > self.end {
            return Err(refused());
        }
        let mut at = a;
        let first = self.runs.range(..=a).next_back().map(|(k, _)| *k).unwrap_or(a);
        for (&k, r) in self.runs.range(first..b) {
            if k > at {
                return Err(refused());
            }
            match &r.state {
                RecordState::Acquired { member: m, .. } if &**m == member => at = r.to,
                _ => return Err(refused()),
            }
            if at >= b {
                return Ok(());
            }
        }
        if at >= b { Ok(()) } else { Err(refused()) }
    }

    /// What to store for the changes since the last call: the bounds, every delivery count,
    /// and the ranges done since.
    pub fn take_change(&mut self) -> Change {
        let done = std::mem::take(&mut self.newly_done)
            .into_iter()
            .filter(|&(_, to)| to > off(self.start))
            .map(|(from, to)| (from.max(off(self.start)), to))
            .collect();
        Change { start: off(self.start), end: off(self.end), done, counts: self.counts() }
    }

    /// Delivery counts of the records not done, as ranges.
    fn counts(&self) -> Vec<(i64, i64, i16)> {
        let mut out: Vec<(i64, i64, i16)> = Vec::new();
        for (&a, r) in &self.runs {
            if r.state == RecordState::Done || r.count == 0 {
                continue;
            }
            let c = i16::try_from(r.count).unwrap_or(i16::MAX);
            match out.last_mut() {
                Some((_, last, lc)) if *last + 1 == off(a) && *lc == c => *last = off(r.to) - 1,
                _ => out.push((off(a), off(r.to) - 1, c)),
            }
        }
        out
    }

    /// The state as it would be stored now.
    pub fn stored(&self) -> Stored {
        let mut done: Vec<(i64, i64)> = Vec::new();
        for (&a, r) in &self.runs {
            if r.state == RecordState::Done {
                match done.last_mut() {
                    Some((_, to)) if *to == off(a) => *to = off(r.to),
                    _ => done.push((off(a), off(r.to))),
                }
            }
        }
        Stored { start: off(self.start), end: off(self.end), done, counts: self.counts() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[test]
    fn records_are_acquired_in_order_then_acknowledged_and_the_start_moves_past_them() {
        let mut p = SharePartition::new(0);
        let a = m("a");
        assert_eq!(p.acquire_new(0, 9, &a, 100, 500), Some((0, 9, 1)));
        assert_eq!(p.window(), 10);
        p.acknowledge("a", 0, 100, &[(0, 4, vec![1])]).unwrap();
        assert_eq!(p.start(), 5);
        // Another member cannot acknowledge what a holds.
        assert!(matches!(
            p.acknowledge("b", 0, 100, &[(5, 5, vec![1])]),
            Err(AckRefused::InvalidRecordState(_))
        ));
        // Per-offset types: 5 accepted, 6 released, 7 rejected.
        p.acknowledge("a", 0, 100, &[(5, 7, vec![1, 2, 3])]).unwrap();
        assert_eq!(p.start(), 6);
        assert_eq!(p.record(6), Some((RecordState::Available, 1)));
        assert_eq!(p.record(7), Some((RecordState::Done, 1)));
        let change = p.take_change();
        assert_eq!(change.start, 6);
        assert_eq!(change.done, vec![(7, 8)], "0..6 is below the start: it is the start");
    }

    #[test]
    fn a_released_record_goes_to_the_next_fetch_with_its_count_up_until_the_limit_archives_it() {
        let mut p = SharePartition::new(10);
        let (a, b) = (m("a"), m("b"));
        p.acquire_new(10, 10, &a, 100, 500);
        for delivery in 2..=3u16 {
            p.acknowledge(if delivery == 2 { "a" } else { "b" }, 0, 100, &[(10, 10, vec![2])])
                .unwrap();
            assert_eq!(p.acquire_available(&b, 100, 3, 10, 100), vec![(10, 10, delivery as i16)]);
        }
        // Third delivery released: the count is at the limit, so it is archived, not lent.
        p.acknowledge("b", 0, 100, &[(10, 10, vec![2])]).unwrap();
        assert_eq!(p.first_available(3), None);
        p.archive_exhausted(3);
        assert_eq!(p.start(), 11);
        assert_eq!(p.take_change().start, 11);
    }

    #[test]
    fn an_expired_lock_makes_records_available_and_the_old_holder_may_not_acknowledge_them() {
        let mut p = SharePartition::new(0);
        let (a, b) = (m("a"), m("b"));
        p.acquire_new(0, 3, &a, 1_000, 500);
        p.expire(999);
        assert_eq!(p.acquired_count(), 4);
        p.expire(1_000);
        assert_eq!(p.acquired_count(), 0);
        assert_eq!(p.acquire_available(&b, 5_000, 5, 2, 100), vec![(0, 1, 2)]);
        assert!(p.acknowledge("a", 0, 100, &[(0, 0, vec![1])]).is_err());
        // A renewal extends b's lock.
        p.acknowledge("b", 4_000, 10_000, &[(0, 1, vec![4])]).unwrap();
        p.expire(6_000);
        assert_eq!(
            p.record(0).map(|r| r.0),
            Some(RecordState::Acquired { member: b, deadline_ms: 14_000 })
        );
    }

    #[test]
    fn the_stored_form_restores_counts_and_done_records_with_no_locks() {
        let mut p = SharePartition::new(0);
        let a = m("a");
        p.acquire_new(0, 9, &a, 100, 500);
        p.acknowledge("a", 0, 100, &[(2, 3, vec![1]), (5, 5, vec![2])]).unwrap();
        p.acquire_available(&a, 100, 5, 10, 100);
        let stored = p.stored();
        assert_eq!(stored.done, vec![(2, 4)]);
        let q = SharePartition::from_stored(&stored);
        assert_eq!(q.start(), 0);
        assert_eq!(q.end(), 10);
        assert_eq!(q.record(5), Some((RecordState::Available, 2)));
        assert_eq!(q.record(2).map(|r| r.0), Some(RecordState::Done));
        assert_eq!(q.record(9), Some((RecordState::Available, 1)));
        assert_eq!(q.stored().done, stored.done);
        assert_eq!(q.stored().counts, stored.counts);
    }

    #[test]
    fn malformed_batches_and_records_outside_the_window_are_refused_and_nothing_applies() {
        let mut p = SharePartition::new(0);
        let a = m("a");
        p.acquire_new(0, 4, &a, 100, 500);
        let bad = [(0, 1, vec![1]), (3, 5, vec![1])];
        assert!(matches!(p.acknowledge("a", 0, 100, &bad), Err(AckRefused::InvalidRecordState(_))));
        assert_eq!(p.start(), 0, "the valid first batch did not apply");
        assert!(matches!(
            p.acknowledge("a", 0, 100, &[(0, 2, vec![1, 1])]),
            Err(AckRefused::InvalidRequest(_))
        ));
        assert!(matches!(
            p.acknowledge("a", 0, 100, &[(0, 0, vec![9])]),
            Err(AckRefused::InvalidRequest(_))
        ));
    }

    #[test]
    fn gaps_and_a_moved_log_start_are_skipped() {
        let mut p = SharePartition::new(0);
        let a = m("a");
        // The log's next batch starts at 5: 0..5 hold nothing.
        assert_eq!(p.acquire_new(5, 7, &a, 100, 500), Some((5, 7, 1)));
        assert_eq!(p.start(), 5);
        p.trim_to(7);
        assert_eq!((p.start(), p.end()), (7, 8));
        p.trim_to(20);
        assert_eq!((p.start(), p.end(), p.window()), (20, 20, 0));
        // A batch straddling the end gives only its part past it, at most `max` records.
        assert_eq!(p.acquire_new(15, 40, &a, 100, 5), Some((20, 24, 1)));
    }
}
