//! The operation history of a run and the checker over it (issue 17, deliverable 2). Clients
//! record every append with its outcome — acknowledged at an offset, definitely failed, or
//! unknown (an answer lost, a deadline passed) — every read with what it returned, and every
//! high watermark they observed; at the end each log is read whole. [`check`] then reports
//! what ARCHITECTURE §7 forbids:
//!
//! - lost write: acknowledged, not in the log at its offset;
//! - inconsistent offsets: acknowledged at one offset, found at another, or the log's entries
//!   not contiguous (a gap or an overlap);
//! - duplicate: one append's records twice in the log;
//! - aborted read: a definitely failed append visible;
//! - phantom: an entry no client appended;
//! - dirty read: a read during the run returned an entry the final log does not hold there;
//! - stale read: a read issued after a hard trim to offset t completed returned an entry
//!   wholly below t;
//! - high-watermark regression: an observer saw a log's end go back;
//! - reordered: appends one client had in flight at once to one log landed out of order;
//! - for idempotent (Kafka) producers, whose retries carry the append's id again: a batch
//!   answered twice with different offsets, and a retry refused with a sequence error
//!   (OUT_OF_ORDER_SEQUENCE_NUMBER and the like: fatal to librdkafka, so never spurious);
//! - unreadable: the final read could not read an entry the log's index names (a dangling
//!   reference: its object gone);
//! - data past the high watermark: a read returned an entry at or past a high watermark read
//!   with its answer or after it (an entry served before it committed);
//! - zombie commits: a writer paused past its lease sent a head write (a commit, a takeover)
//!   before or during the pause, and it succeeded after (the incarnation's compares must
//!   refuse it);
//! - orphans left: WAL objects still stored after, at the end, every chunk was compacted and
//!   the cleaner ran with no grace (an object nothing references that is never reclaimed);
//! - for Kafka consumer groups: a committed offset gone backwards (a read of a group's offsets
//!   that began after a commit was acknowledged saw an older one: a lost commit, or a stale
//!   coordinator's applied after a newer one), and a stable group rebalanced (once every
//!   member had synced at one generation, a member joined at a later one, though no member
//!   left and no session could end: a coordinator change alone must rebalance nothing).
//!
//! Offsets below a log's final start (hard-trimmed) are not checked against the final log.
//!
//! Appends carry a unique id in their payload (8 bytes, little-endian, first), so the checker
//! needs nothing else from the store.

use std::collections::{BTreeMap, BTreeSet};

/// How an append ended, as its client saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Acknowledged: its first record is at this offset.
    Ok(u64),
    /// Definitely not applied (fenced, refused, failed before anything committed).
    Failed,
    /// Maybe applied: the answer was lost or did not come in time.
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Append {
    pub id: u64,
    pub log: u64,
    pub records: u32,
    pub outcome: Outcome,
}

/// An entry as a read returned it: its offset, record count and the id in its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Seen {
    pub offset: u64,
    pub records: u32,
    pub id: u64,
}

/// A read during the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    pub log: u64,
    /// The highest hard trim of the log completed before the read was issued.
    pub floor: u64,
    pub seen: Vec<Seen>,
    /// A high watermark read with the answer (a Kafka fetch's) or after it: every entry the
    /// read returned must lie below it (one at or past it was served before it committed).
    pub high: Option<u64>,
}

#[derive(Clone, Debug, Default)]
pub struct History {
    pub appends: Vec<Append>,
    /// Reads during the run.
    pub reads: Vec<Read>,
    /// High watermarks in the order one observer saw them: log, next offset.
    pub watermarks: Vec<(u64, u64)>,
    /// Each log read whole at the end, from its first offset.
    pub finals: BTreeMap<u64, Vec<Seen>>,
    /// Each log's first offset at the end (above it all was read into `finals`).
    pub starts: BTreeMap<u64, u64>,
    /// Appends (ids) one client had in flight at once to one writer and log, in the order it
    /// issued them: acknowledged ones must land in that order (invariant 7).
    pub pipelined: Vec<Vec<u64>>,
    /// Every answer an idempotent producer got for a batch (id, base offset), retries included.
    pub answers: Vec<(u64, u64)>,
    /// Sequence errors idempotent producers were answered with (id, Kafka error code).
    pub refusals: Vec<(u64, i16)>,
    /// The final read of a log failed here (log, offset it read from, the error).
    pub unreadable: Vec<(u64, u64, String)>,
    /// WAL objects left after everything was compacted and cleaned at the end (none may be).
    pub orphans: u64,
    /// Head writes (commits, takeovers) a writer sent before or during a pause that outlived
    /// its lease and that then succeeded: zombie commits under an old incarnation.
    pub zombies: u64,
    /// Kafka group offset commits acknowledged: group, partition, offset, when (virtual ms).
    pub commits: Vec<(u64, i32, i64, u64)>,
    /// Reads of groups' committed offsets: group, partition, offset seen, when the read began.
    pub offset_reads: Vec<(u64, i32, i64, u64)>,
    /// Group members' JoinGroup and SyncGroup answers: group, member, generation, and whether
    /// it was a sync; in the order answered.
    pub memberships: Vec<(u64, u64, i32, bool)>,
    /// Members of each group (none ever leaves).
    pub group_sizes: BTreeMap<u64, u64>,
    /// Kafka transactions: their batches and how each ended.
    pub txns: Vec<Txn>,
    /// Last stable offsets in the order one observer saw them: log, offset.
    pub stable_offsets: Vec<(u64, u64)>,
    /// Reads committed (Kafka read_committed fetches, filtered as a consumer filters them):
    /// log, the batches (ids) visible.
    pub committed_reads: Vec<(u64, Vec<u64>)>,
    /// Each log read committed whole at the end: the batches visible, and its last stable
    /// offset and high watermark then.
    pub committed_finals: BTreeMap<u64, (Vec<u64>, u64, u64)>,
    /// Transactions a fenced producer (an older epoch than an InitProducerId had answered
    /// for its id) was let commit: the transaction's id.
    pub zombie_txns: Vec<u64>,
    /// Kafka share groups: what their members were given and acknowledged.
    pub shares: crate::shares::ShareHistory,
}

/// A Kafka transaction of the simulation: its id, the batches it wrote, how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Txn {
    pub id: u64,
    pub batches: Vec<u64>,
    pub end: TxnEnd,
}

/// How a transaction ended, as its producer knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TxnEnd {
    /// EndTxn(commit) answered NONE.
    Committed,
    /// EndTxn(abort) answered NONE, or the producer was fenced (or its commit refused) before
    /// any commit of it could have been taken.
    Aborted,
    /// A commit asked whose answer was lost, then refused: either.
    Unknown,
}

/// The id a transaction marker (a control batch) is seen with: no client appended it.
pub const MARKER: u64 = u64::MAX - 1;

/// A payload carrying `id` and `pad` more bytes.
pub fn payload(id: u64, pad: usize) -> bytes::Bytes {
    let mut v = id.to_le_bytes().to_vec();
    v.resize(8 + pad, 0xab);
    bytes::Bytes::from(v)
}

/// The id a payload carries; `None` for one too short to be ours.
pub fn id_of(payload: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(payload.get(..8)?.try_into().ok()?))
}

/// What the checker found wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    LostWrite {
        log: u64,
        id: u64,
        offset: u64,
    },
    InconsistentOffset {
        log: u64,
        id: u64,
        acked: u64,
        found: u64,
    },
    Gap {
        log: u64,
        expected: u64,
        found: u64,
    },
    Duplicate {
        log: u64,
        id: u64,
        offsets: Vec<u64>,
    },
    AbortedRead {
        log: u64,
        id: u64,
        offset: u64,
    },
    Phantom {
        log: u64,
        id: u64,
        offset: u64,
    },
    DirtyRead {
        log: u64,
        id: u64,
        offset: u64,
    },
    StaleRead {
        log: u64,
        id: u64,
        offset: u64,
        floor: u64,
    },
    WatermarkRegression {
        log: u64,
        from: u64,
        to: u64,
    },
    /// Two appends issued in this order landed in the other.
    Reordered {
        log: u64,
        first: u64,
        then: u64,
    },
    /// An idempotent producer's batch answered with different offsets.
    AnsweredTwice {
        id: u64,
        offsets: Vec<u64>,
    },
    /// An idempotent producer's batch refused with a sequence error.
    SequenceRefused {
        id: u64,
        code: i16,
    },
    Unreadable {
        log: u64,
        offset: u64,
        error: String,
    },
    /// WAL objects no index references that the cleaner never reclaimed.
    OrphansLeft {
        objects: u64,
    },
    /// A read returned an entry at or past the high watermark read with or after it.
    PastHighWatermark {
        log: u64,
        id: u64,
        offset: u64,
        high: u64,
    },
    /// Head writes of a writer paused past its lease that succeeded after the pause.
    ZombieCommits {
        count: u64,
    },
    /// A read of a group's committed offset saw `seen` after `acked` had been acknowledged.
    CommitRegressed {
        group: u64,
        partition: i32,
        acked: i64,
        seen: i64,
    },
    /// Every member of the group had synced at generation `stable`; then one joined at
    /// `generation`.
    StableGroupRebalanced {
        group: u64,
        member: u64,
        stable: i32,
        generation: i32,
    },
    /// A committed transaction whose batches are not all read committed at the end, or one of
    /// unknown outcome read in part.
    TxnPartlyVisible {
        txn: u64,
        visible: Vec<u64>,
        missing: Vec<u64>,
    },
    /// A batch of an aborted transaction was read committed.
    AbortedTxnRead {
        txn: u64,
        id: u64,
    },
    /// A log's last stable offset went back.
    StableOffsetRegression {
        log: u64,
        from: u64,
        to: u64,
    },
    /// At the end, with every transaction over, a log's last stable offset is below its high
    /// watermark (a transaction left open in it).
    StableOffsetStuck {
        log: u64,
        stable: u64,
        high: u64,
    },
    /// A fenced producer committed a transaction.
    ZombieTxnCommitted {
        txn: u64,
    },
    /// A share group's record went out more often than its delivery limit, or with a count
    /// past it.
    ShareDeliveredPastLimit {
        partition: u32,
        offset: i64,
        count: i16,
    },
    /// A share group's record accepted more than once.
    ShareAcceptedTwice {
        partition: u32,
        offset: i64,
        times: u32,
    },
    /// A share-partition's state went back: a delivery count not above an earlier one, or a
    /// record delivered again after its acceptance or rejection was answered.
    ShareStateRegressed {
        partition: u32,
        offset: i64,
        what: String,
    },
    /// At the end, with every member gone but one accepting everything, records of a
    /// share-partition are left undone (or its state could not be read: -1).
    ShareRecordsLeft {
        partition: u32,
        start: i64,
        left: i64,
    },
}

impl Violation {
    /// The appends (ids) it names.
    pub fn names(&self) -> Vec<u64> {
        use Violation::*;
        match self {
            LostWrite { id, .. }
            | InconsistentOffset { id, .. }
            | Duplicate { id, .. }
            | AbortedRead { id, .. }
            | Phantom { id, .. }
            | DirtyRead { id, .. }
            | StaleRead { id, .. }
            | AnsweredTwice { id, .. }
            | SequenceRefused { id, .. }
            | PastHighWatermark { id, .. }
            | AbortedTxnRead { id, .. } => vec![*id],
            TxnPartlyVisible { visible, missing, .. } => {
                visible.iter().chain(missing).copied().collect()
            }
            Reordered { first, then, .. } => vec![*first, *then],
            Gap { .. }
            | WatermarkRegression { .. }
            | Unreadable { .. }
            | OrphansLeft { .. }
            | ZombieCommits { .. }
            | CommitRegressed { .. }
            | StableGroupRebalanced { .. }
            | StableOffsetRegression { .. }
            | StableOffsetStuck { .. }
            | ZombieTxnCommitted { .. }
            | ShareDeliveredPastLimit { .. }
            | ShareAcceptedTwice { .. }
            | ShareStateRegressed { .. }
            | ShareRecordsLeft { .. } => Vec::new(),
        }
    }
}

/// Every violation in `h`, in a stable order.
pub fn check(h: &History) -> Vec<Violation> {
    let mut out = crate::shares::check(&h.shares);
    let by_id: BTreeMap<u64, &Append> = h.appends.iter().map(|a| (a.id, a)).collect();
    let start = |log: &u64| h.starts.get(log).copied().unwrap_or(0);
    for (log, entries) in &h.finals {
        let mut at: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        let mut next: Option<u64> = Some(start(log));
        for (i, e) in entries.iter().enumerate() {
            // A trim inside an entry leaves that entry readable whole: the first may begin
            // below the start if it covers it.
            let covers = |n: u64| i == 0 && e.offset < n && e.offset + u64::from(e.records) > n;
            if let Some(n) = next
                && e.offset != n
                && !covers(n)
            {
                out.push(Violation::Gap { log: *log, expected: n, found: e.offset });
            }
            next = Some(e.offset + u64::from(e.records));
            if e.id == MARKER {
                continue;
            }
            at.entry(e.id).or_default().push(e.offset);
            match by_id.get(&e.id) {
                None => out.push(Violation::Phantom { log: *log, id: e.id, offset: e.offset }),
                Some(a) if a.log != *log => {
                    out.push(Violation::Phantom { log: *log, id: e.id, offset: e.offset })
                }
                Some(a) if a.outcome == Outcome::Failed => {
                    out.push(Violation::AbortedRead { log: *log, id: e.id, offset: e.offset })
                }
                Some(_) => {}
            }
        }
        for (id, offsets) in at {
            if offsets.len() > 1 {
                out.push(Violation::Duplicate { log: *log, id, offsets });
            }
        }
    }
    let found: BTreeMap<(u64, u64), u64> = h
        .finals
        .iter()
        .flat_map(|(log, es)| es.iter().map(move |e| ((*log, e.id), e.offset)))
        .collect();
    for a in &h.appends {
        if let Outcome::Ok(acked) = a.outcome
            && acked >= start(&a.log)
        {
            match found.get(&(a.log, a.id)) {
                None => out.push(Violation::LostWrite { log: a.log, id: a.id, offset: acked }),
                Some(f) if *f != acked => out.push(Violation::InconsistentOffset {
                    log: a.log,
                    id: a.id,
                    acked,
                    found: *f,
                }),
                Some(_) => {}
            }
        }
    }
    let held: BTreeSet<(u64, Seen)> =
        h.finals.iter().flat_map(|(log, es)| es.iter().map(move |e| (*log, *e))).collect();
    for r in &h.reads {
        if let Some(high) = r.high {
            for s in r.seen.iter().filter(|s| s.offset >= high) {
                out.push(Violation::PastHighWatermark {
                    log: r.log,
                    id: s.id,
                    offset: s.offset,
                    high,
                });
            }
        }
        for s in &r.seen {
            // Wholly below the trim (a batch that covers the trim point may be served whole).
            if s.offset + u64::from(s.records) <= r.floor {
                out.push(Violation::StaleRead {
                    log: r.log,
                    id: s.id,
                    offset: s.offset,
                    floor: r.floor,
                });
            } else if s.offset >= start(&r.log) && !held.contains(&(r.log, *s)) {
                out.push(Violation::DirtyRead { log: r.log, id: s.id, offset: s.offset });
            }
        }
    }
    for issued in &h.pipelined {
        let acked: Vec<(u64, u64, u64)> = issued
            .iter()
            .filter_map(|id| {
                let a = by_id.get(id)?;
                match a.outcome {
                    Outcome::Ok(o) => Some((a.id, a.log, o)),
                    _ => None,
                }
            })
            .collect();
        for w in acked.windows(2) {
            if w[1].2 <= w[0].2 {
                out.push(Violation::Reordered { log: w[0].1, first: w[0].0, then: w[1].0 });
            }
        }
    }
    let mut answered: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    for (id, offset) in &h.answers {
        answered.entry(*id).or_default().insert(*offset);
    }
    for (id, offsets) in answered {
        if offsets.len() > 1 {
            out.push(Violation::AnsweredTwice { id, offsets: offsets.into_iter().collect() });
        }
    }
    for (id, code) in &h.refusals {
        out.push(Violation::SequenceRefused { id: *id, code: *code });
    }
    for (log, offset, error) in &h.unreadable {
        out.push(Violation::Unreadable { log: *log, offset: *offset, error: error.clone() });
    }
    if h.orphans > 0 {
        out.push(Violation::OrphansLeft { objects: h.orphans });
    }
    if h.zombies > 0 {
        out.push(Violation::ZombieCommits { count: h.zombies });
    }
    check_groups(h, &mut out);
    check_txns(h, &mut out);
    let mut last: BTreeMap<u64, u64> = BTreeMap::new();
    for (log, end) in &h.watermarks {
        if let Some(prev) = last.get(log)
            && end < prev
        {
            out.push(Violation::WatermarkRegression { log: *log, from: *prev, to: *end });
        }
        last.insert(*log, *end);
    }
    out
}

/// The transaction rules (ARCHITECTURE §12): a transaction's batches are all read committed
/// or none (all, once it committed; none, once it aborted), at any time and at the end; the
/// last stable offset never goes back, and at the end, every transaction over, it is the high
/// watermark; a fenced producer commits nothing.
fn check_txns(h: &History, out: &mut Vec<Violation>) {
    let txn_of: BTreeMap<u64, &Txn> =
        h.txns.iter().flat_map(|t| t.batches.iter().map(move |b| (*b, t))).collect();
    let aborted_read =
        |id: &u64| txn_of.get(id).filter(|t| t.end == TxnEnd::Aborted).map(|t| (t.id, *id));
    let during = h.committed_reads.iter().flat_map(|(_, ids)| ids);
    let at_end = h.committed_finals.values().flat_map(|(ids, ..)| ids);
    let read: BTreeSet<(u64, u64)> =
        during.chain(at_end.clone()).filter_map(aborted_read).collect();
    out.extend(read.into_iter().map(|(txn, id)| Violation::AbortedTxnRead { txn, id }));
    let visible: BTreeSet<u64> = at_end.copied().collect();
    // A batch is looked for at the end if it was acknowledged at or above its log's start
    // then (every batch of a transaction that was ended was acknowledged).
    let by_id: BTreeMap<u64, &Append> = h.appends.iter().map(|a| (a.id, a)).collect();
    let kept = |b: &&u64| {
        by_id.get(b).is_some_and(|a| {
            matches!(a.outcome, Outcome::Ok(o) if o >= h.starts.get(&a.log).copied().unwrap_or(0))
        })
    };
    for t in &h.txns {
        let (seen, missing): (Vec<u64>, Vec<u64>) =
            t.batches.iter().filter(kept).partition(|b| visible.contains(b));
        let partly = match t.end {
            TxnEnd::Committed => !missing.is_empty(),
            TxnEnd::Unknown => !seen.is_empty() && !missing.is_empty(),
            TxnEnd::Aborted => false,
        };
        if partly {
            out.push(Violation::TxnPartlyVisible { txn: t.id, visible: seen, missing });
        }
    }
    let mut last: BTreeMap<u64, u64> = BTreeMap::new();
    for (log, lso) in &h.stable_offsets {
        if let Some(prev) = last.get(log)
            && lso < prev
        {
            out.push(Violation::StableOffsetRegression { log: *log, from: *prev, to: *lso });
        }
        last.insert(*log, *lso);
    }
    for (log, (_, stable, high)) in &h.committed_finals {
        if stable < high {
            out.push(Violation::StableOffsetStuck { log: *log, stable: *stable, high: *high });
        }
    }
    for txn in &h.zombie_txns {
        out.push(Violation::ZombieTxnCommitted { txn: *txn });
    }
}

/// The consumer-group rules: committed offsets never go backwards, stable groups stay so.
fn check_groups(h: &History, out: &mut Vec<Violation>) {
    for &(group, partition, seen, began) in &h.offset_reads {
        let acked = h
            .commits
            .iter()
            .filter(|c| c.0 == group && c.1 == partition && c.3 < began)
            .map(|c| c.2)
            .max();
        if let Some(acked) = acked
            && seen < acked
        {
            out.push(Violation::CommitRegressed { group, partition, acked, seen });
        }
    }
    for (&group, &size) in &h.group_sizes {
        // Per generation, the members that synced at it; the first complete one is stable.
        let mut synced: BTreeMap<i32, BTreeSet<u64>> = BTreeMap::new();
        let mut stable: Option<i32> = None;
        for &(g, member, generation, sync) in &h.memberships {
            if g != group {
                continue;
            }
            match stable {
                Some(st) if generation > st => {
                    out.push(Violation::StableGroupRebalanced {
                        group,
                        member,
                        stable: st,
                        generation,
                    });
                    break;
                }
                Some(_) => {}
                None if sync => {
                    let at = synced.entry(generation).or_default();
                    at.insert(member);
                    if at.len() as u64 == size {
                        stable = Some(generation);
                    }
                }
                None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(id: u64, log: u64, offset: u64) -> Append {
        Append { id, log, records: 1, outcome: Outcome::Ok(offset) }
    }

    fn seen(offset: u64, id: u64) -> Seen {
        Seen { offset, records: 1, id }
    }

    fn clean() -> History {
        History {
            appends: vec![
                ok(1, 7, 0),
                ok(2, 7, 1),
                Append { id: 3, log: 7, records: 1, outcome: Outcome::Unknown },
                Append { id: 4, log: 7, records: 1, outcome: Outcome::Failed },
                Append { id: 5, log: 7, records: 1, outcome: Outcome::Unknown },
            ],
            reads: vec![Read { log: 7, floor: 0, seen: vec![seen(0, 1)], high: Some(1) }],
            watermarks: vec![(7, 1), (7, 3)],
            finals: [(7, vec![seen(0, 1), seen(1, 2), seen(2, 3)])].into_iter().collect(),
            pipelined: vec![vec![1, 4, 2]],
            starts: [(7, 0)].into_iter().collect(),
            answers: vec![(1, 0), (1, 0), (2, 1)],
            refusals: vec![],
            unreadable: vec![],
            orphans: 0,
            zombies: 0,
            // Group 0 of 2 members: both synced at generation 2; a commit of 7 then reads of
            // 7 and more; a join at generation 1 before it was stable.
            commits: vec![(0, 3, 7, 10)],
            offset_reads: vec![(0, 3, 5, 10), (0, 3, 7, 11), (0, 3, 9, 12)],
            memberships: vec![(0, 0, 1, false), (0, 0, 2, true), (0, 1, 2, true)],
            group_sizes: [(0, 2)].into_iter().collect(),
            // Appends 1 and 2 are transaction 10's, committed, read committed at the end; the
            // last stable offset rises to the end.
            txns: vec![Txn { id: 10, batches: vec![1, 2], end: TxnEnd::Committed }],
            stable_offsets: vec![(7, 0), (7, 3)],
            committed_reads: vec![(7, vec![1])],
            committed_finals: [(7, (vec![1, 2], 3, 3))].into_iter().collect(),
            zombie_txns: vec![],
            shares: Default::default(),
        }
    }

    /// Each transaction rule catches what it is for (ARCHITECTURE §12): a committed
    /// transaction read in part; an aborted one's batch read committed, during the run or at
    /// the end; the last stable offset going back, or left below the end; a fenced
    /// producer's commit.
    #[test]
    fn each_transaction_rule_catches_its_violation() {
        assert_eq!(check(&clean()), vec![]);
        let mut h = clean();
        h.committed_finals.insert(7, (vec![1], 3, 3));
        assert_eq!(
            check(&h),
            vec![Violation::TxnPartlyVisible { txn: 10, visible: vec![1], missing: vec![2] }]
        );
        let mut h = clean();
        h.txns[0].end = TxnEnd::Unknown;
        h.committed_finals.insert(7, (vec![2], 3, 3));
        assert_eq!(
            check(&h),
            vec![Violation::TxnPartlyVisible { txn: 10, visible: vec![2], missing: vec![1] }]
        );
        h.committed_finals.insert(7, (vec![], 3, 3));
        assert_eq!(check(&h), vec![], "unknown and not read: aborted");
        let mut h = clean();
        h.txns[0].end = TxnEnd::Aborted;
        h.committed_finals.insert(7, (vec![], 3, 3));
        assert_eq!(check(&h), vec![Violation::AbortedTxnRead { txn: 10, id: 1 }], "read during");
        let mut h = clean();
        h.stable_offsets.push((7, 2));
        assert_eq!(check(&h), vec![Violation::StableOffsetRegression { log: 7, from: 3, to: 2 }]);
        let mut h = clean();
        h.committed_finals.insert(7, (vec![1, 2], 2, 3));
        assert_eq!(check(&h), vec![Violation::StableOffsetStuck { log: 7, stable: 2, high: 3 }]);
        let mut h = clean();
        h.zombie_txns.push(11);
        assert_eq!(check(&h), vec![Violation::ZombieTxnCommitted { txn: 11 }]);
        // A transaction marker in a log is no client's append.
        let mut h = clean();
        h.finals.insert(7, vec![seen(0, 1), seen(1, 2), seen(2, MARKER)]);
        assert_eq!(check(&h), vec![]);
    }

    #[test]
    fn a_committed_offset_read_older_than_an_acknowledged_commit_is_caught() {
        let mut h = clean();
        h.offset_reads.push((0, 3, 6, 20));
        let want = Violation::CommitRegressed { group: 0, partition: 3, acked: 7, seen: 6 };
        assert_eq!(check(&h), vec![want]);
        // One begun before the commit was acknowledged may see the older offset.
        let mut h = clean();
        h.offset_reads.push((0, 3, 6, 9));
        assert_eq!(check(&h), vec![]);
    }

    #[test]
    fn a_stable_group_joined_at_a_later_generation_is_caught() {
        let mut h = clean();
        h.memberships.push((0, 1, 3, false));
        let want =
            Violation::StableGroupRebalanced { group: 0, member: 1, stable: 2, generation: 3 };
        assert_eq!(check(&h), vec![want]);
        // Before every member synced, rebalances are the group forming.
        let mut h = clean();
        h.memberships.insert(1, (0, 1, 2, false));
        h.memberships.insert(2, (0, 0, 2, false));
        assert_eq!(check(&h), vec![]);
    }

    #[test]
    fn a_clean_history_passes_and_unknown_outcomes_may_go_either_way() {
        assert_eq!(check(&clean()), vec![]);
    }

    #[test]
    fn each_kind_of_violation_is_found() {
        let mut h = clean();
        h.finals.insert(7, vec![seen(0, 1), seen(2, 3)]);
        assert!(check(&h).contains(&Violation::LostWrite { log: 7, id: 2, offset: 1 }));
        assert!(check(&h).contains(&Violation::Gap { log: 7, expected: 1, found: 2 }));

        let mut h = clean();
        h.finals.insert(7, vec![seen(0, 2), seen(1, 1), seen(2, 3)]);
        assert!(check(&h).contains(&Violation::InconsistentOffset {
            log: 7,
            id: 2,
            acked: 1,
            found: 0
        }));

        let mut h = clean();
        if let Some(f) = h.finals.get_mut(&7) {
            f.push(seen(3, 3));
        }
        assert!(check(&h).contains(&Violation::Duplicate { log: 7, id: 3, offsets: vec![2, 3] }));

        let mut h = clean();
        if let Some(f) = h.finals.get_mut(&7) {
            f.push(seen(3, 4));
        }
        assert_eq!(check(&h), vec![Violation::AbortedRead { log: 7, id: 4, offset: 3 }]);

        let mut h = clean();
        if let Some(f) = h.finals.get_mut(&7) {
            f.push(seen(3, 99));
        }
        assert_eq!(check(&h), vec![Violation::Phantom { log: 7, id: 99, offset: 3 }]);

        let mut h = clean();
        h.reads.push(Read { log: 7, floor: 0, seen: vec![seen(2, 5)], high: None });
        assert_eq!(check(&h), vec![Violation::DirtyRead { log: 7, id: 5, offset: 2 }]);

        let mut h = clean();
        h.reads.push(Read { log: 7, floor: 1, seen: vec![seen(0, 1)], high: None });
        assert_eq!(check(&h), vec![Violation::StaleRead { log: 7, id: 1, offset: 0, floor: 1 }]);

        let mut h = clean();
        h.pipelined.push(vec![2, 1]);
        assert_eq!(check(&h), vec![Violation::Reordered { log: 7, first: 2, then: 1 }]);

        let mut h = clean();
        h.watermarks.push((7, 2));
        assert_eq!(check(&h), vec![Violation::WatermarkRegression { log: 7, from: 3, to: 2 }]);

        let mut h = clean();
        h.answers.push((2, 5));
        assert_eq!(check(&h), vec![Violation::AnsweredTwice { id: 2, offsets: vec![1, 5] }]);

        let mut h = clean();
        h.refusals.push((2, 45));
        assert_eq!(check(&h), vec![Violation::SequenceRefused { id: 2, code: 45 }]);

        let mut h = clean();
        h.reads.push(Read { log: 7, floor: 0, seen: vec![seen(1, 2)], high: Some(1) });
        assert_eq!(
            check(&h),
            vec![Violation::PastHighWatermark { log: 7, id: 2, offset: 1, high: 1 }]
        );

        let mut h = clean();
        h.zombies = 1;
        assert_eq!(check(&h), vec![Violation::ZombieCommits { count: 1 }]);

        let mut h = clean();
        h.orphans = 2;
        assert_eq!(check(&h), vec![Violation::OrphansLeft { objects: 2 }]);

        let mut h = clean();
        h.unreadable.push((7, 1, "not found".into()));
        assert_eq!(
            check(&h),
            vec![Violation::Unreadable { log: 7, offset: 1, error: "not found".into() }]
        );
    }

    #[test]
    fn trimmed_offsets_are_not_held_against_the_final_log() {
        let mut h = clean();
        // Trimmed to 2: ids 1 and 2 are gone, legitimately; an earlier read of them is fine.
        h.starts.insert(7, 2);
        h.finals.insert(7, vec![seen(2, 3)]);
        assert_eq!(check(&h), vec![]);
        h.finals.insert(7, vec![seen(3, 3)]);
        assert_eq!(check(&h), vec![Violation::Gap { log: 7, expected: 2, found: 3 }]);
    }

    #[test]
    fn payloads_carry_their_id() {
        assert_eq!(id_of(&payload(42, 10)), Some(42));
        assert_eq!(payload(1, 5).len(), 13);
        assert_eq!(id_of(b"short"), None);
    }
}
