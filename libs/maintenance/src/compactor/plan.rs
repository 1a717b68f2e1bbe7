//! What to rewrite: a pure function of one read of a log at one revision (a [`LogView`]), the
//! [`Policy`] and how long the log has gone without appends. Nothing here reads or writes a
//! store, so every rule (the eligibility of a chunk, the pieces a rewrite takes, the idle
//! spill, the lake day cut, the floor) is tested on views made up in memory.

use std::collections::HashSet;

use crate::lakes::{self, LakeLog};
use logstore::LogId;
use logstore::records::{IndexPage, Locator, LogHead};

/// When a rewrite is worth doing, and how large segments grow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Eligible WAL chunks a log needs before they are compacted on their own (an idle log
    /// needs one).
    pub min_chunks: usize,
    /// Payload bytes a segment is built up to ([`super::CompactorConfig::target_segment_bytes`]).
    pub target_segment_bytes: u64,
}

/// How long a log has gone without appends, as the compactor sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Activity {
    /// Its head moved since the last look (or this is the first).
    Active,
    /// Its head has not moved for a whole cycle: nothing else would compact its last chunks.
    Idle,
    /// Its head has not moved for [`super::CompactorConfig::settle_after`].
    Settled,
}

/// One index page as read: its key's first offset and its mod revision.
#[derive(Clone, Debug, PartialEq)]
pub struct Page {
    pub first: u64,
    pub revision: i64,
    pub page: IndexPage,
}

/// A log as one read at one revision saw it, under a compaction claim.
#[derive(Clone, Debug)]
pub struct LogView {
    pub log: LogId,
    /// The revision everything was read at (R).
    pub revision: i64,
    /// The claim's revision: segments this claim wrote carry it.
    pub claim: i64,
    pub head: LogHead,
    pub head_revision: i64,
    pub start: u64,
    pub start_revision: i64,
    /// The lowest of `wal/next_seq` and every writer's low-water mark: a WAL chunk below it
    /// is in an object no writer will still commit a chunk of.
    pub min_mark: u64,
    /// The index pages, in offset order.
    pub pages: Vec<Page>,
    /// The log's `wal_floor` and its mod revision, if it has one.
    pub floor: Option<(u64, i64)>,
    /// A lake log's table, as read at the same revision.
    pub lake: Option<LakeView>,
}

/// A lake log's table as a [`LogView`] saw it.
#[derive(Clone, Debug)]
pub struct LakeView {
    pub log: LakeLog,
    /// The table's state as stored (`None`: no table yet).
    pub table: Option<metadata::KeyValue>,
    /// The state outgrew its record (manifests are not merged yet): the table takes no more
    /// segments, so the log is compacted into plain ones.
    pub full: bool,
    /// First offsets of the lake segments whose files are in the table now: only those merge
    /// (table retention may have taken one out; a merge's commit would be refused every time).
    pub current: HashSet<u64>,
}

/// One index page from the compactor's point of view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Payload bytes of what a rewrite would take from it (chunks wholly below the start left out).
    pub bytes: u64,
    /// WAL chunks it holds that a rewrite would take (0 for a segment).
    pub wal_chunks: usize,
    /// A compacted segment (a rewrite of it is a merge).
    pub segment: bool,
    /// A rewrite may take it: every chunk eligible, or a segment smaller than the target that
    /// starts at or above the log's start.
    pub open: bool,
}

/// What the view allows.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// An idle log's `recent` chunks go to an index page of their own, keyed `first`, so they
    /// can be compacted (they never spill otherwise).
    Spill {
        first: u64,
    },
    /// Nothing worth rewriting: `eligible` WAL chunks wait. `raise_floor`: the floor recomputed
    /// at R, when it is above the one stored (an idle log's floor would otherwise hold the
    /// cleaner's cutoff back).
    Nothing {
        eligible: usize,
        raise_floor: Option<u64>,
    },
    Rewrite(Rewrite),
}

/// One rewrite: the pages it replaces, what it reads, what the swap puts.
#[derive(Clone, Debug, PartialEq)]
pub struct Rewrite {
    /// Indexes into [`LogView::pages`] of the pages the swap replaces, consecutive.
    pub pages: Vec<usize>,
    /// The runs it reads, in offset order (chunks wholly below the start left out).
    pub runs: Vec<Locator>,
    /// What a lake day's cut left of the last page: a page of its own at `end_offset`.
    pub rest: Option<IndexPage>,
    /// The segment holds offsets `[first_offset, end_offset)`.
    pub first_offset: u64,
    pub end_offset: u64,
    /// The end of the index range the swap replaces (past `rest`, if any).
    pub range_end: u64,
    /// The log's `wal_floor` once swapped: the lowest WAL sequence of its chunks left above
    /// the start, or the marks'.
    pub floor: u64,
}

impl Rewrite {
    /// The key of the first page replaced: `first_offset`, unless a trim cut through that
    /// page (then below it).
    pub fn first_page(&self, view: &LogView) -> u64 {
        self.pages.first().map_or(self.first_offset, |i| view.pages[*i].first)
    }
}

/// A segment is rewritten only into one at least this many times its size, or into one of the
/// target size (which is never rewritten again): each rewrite multiplies the segment a byte
/// lives in by this much or makes it full, so a byte is rewritten at most
/// log_4(target / first segment) + 1 times (4 from 1 MiB to 64 MiB).
pub const MERGE_GROWTH: u64 = 4;

/// [`MERGE_GROWTH`] on an idle log: at least twice (any merge at all made a log written in
/// bursts, idle between them, rewrite its tail segment on every burst: 30–125 rewrites of each
/// byte in a model of it, 3–4 with this). A settled log's small segments merge whatever their
/// sizes.
pub const IDLE_MERGE_GROWTH: u64 = 2;

impl LogView {
    /// A WAL chunk in an object below every writer's low-water mark.
    fn eligible(&self, l: &Locator) -> bool {
        l.in_wal() && l.wal_seq < self.min_mark
    }

    /// A WAL chunk not wholly below the start (chunks below it are trimmed: no floor counts
    /// them).
    fn live(&self, l: &Locator) -> bool {
        l.in_wal() && l.end_offset() > self.start
    }

    /// Each page as a piece a rewrite may take: every chunk of a WAL page eligible (a page a
    /// trim cut through is taken whole but for its chunks wholly below the start, whose
    /// objects may be reclaimed already; skipping it held the cleaner's cutoff for good), or
    /// a segment below the target wholly at or above the start.
    pub fn pieces(&self, target: u64) -> Vec<Piece> {
        let (start, claim) = (self.start, u64::try_from(self.claim).unwrap_or(0));
        // A lake log's records go into its table only once their transactions ended (below
        // the last stable offset): a record's commit or abort must be known to hide it or not.
        let stable = match self.lake {
            Some(_) => self.head.last_stable_offset(),
            None => u64::MAX,
        };
        self.pages
            .iter()
            .map(|Page { page, .. }| {
                let above = || page.locators.iter().filter(|l| l.end_offset() > start);
                let below = above().next().is_none();
                let segment = page.locators.iter().any(|l| !l.in_wal());
                let bytes = above().map(|l| l.payload_bytes).sum();
                // A segment this claim wrote is not taken again under it: its object's key
                // (first offset and claim) would be the new one's too. A lake segment is
                // merged only into a lake segment (its rows are not its stored batches), and
                // only while its file is in the table.
                let open = !below
                    && if segment {
                        let l = &page.locators[0];
                        page.locators.len() == 1
                            && l.first_offset >= start
                            && l.compacted_claim != claim
                            && match (&l.lake, &self.lake) {
                                (None, _) => true,
                                (Some(_), None) => false,
                                (Some(_), Some(t)) => t.current.contains(&l.first_offset),
                            }
                            && bytes < target
                    } else {
                        page.locators.iter().all(|l| self.eligible(l) && l.end_offset() <= stable)
                    };
                let wal_chunks = if segment { 0 } else { above().count() };
                Piece { bytes, wal_chunks, segment, open }
            })
            .collect()
    }

    /// The lowest WAL sequence of the live chunks `left` holds, or the marks'.
    fn floor_of<'a>(&self, left: impl Iterator<Item = &'a Locator>) -> u64 {
        left.filter(|l| self.live(l)).map(|l| l.wal_seq).fold(self.min_mark, u64::min)
    }
}

/// What `view` allows under `policy`, the log being `activity`; `spilled`: this claim spilled
/// its head already (it is not spilled twice).
pub fn plan(view: &LogView, policy: &Policy, activity: Activity, spilled: bool) -> Plan {
    let idle = activity >= Activity::Idle;
    let recent = &view.head.recent;
    if idle
        && !spilled
        && !recent.is_empty()
        && recent.iter().all(|l| view.eligible(l))
        && recent.iter().any(|l| l.end_offset() > view.start)
    {
        return Plan::Spill { first: recent[0].first_offset };
    }
    let target = policy.target_segment_bytes.max(1);
    let pieces = view.pieces(target);
    // An idle log is compacted however few its chunks: nothing else ever would be.
    let threshold = if idle { 1 } else { policy.min_chunks.max(1) };
    let Some((from, to)) = choose(&pieces, target, threshold, activity) else {
        // The floor recomputed at R is a lower bound ever after (ARCHITECTURE §5).
        let all = view.pages.iter().flat_map(|p| p.page.locators.iter()).chain(recent);
        let floor = view.floor_of(all);
        let raise_floor = view.floor.filter(|(now, _)| *now < floor).map(|_| floor);
        let eligible = pieces.iter().filter(|p| p.open).map(|p| p.wal_chunks).sum();
        return Plan::Nothing { eligible, raise_floor };
    };
    rewrite(view, (from..to).collect())
}

/// The rewrite of `pages` (consecutive, of a log that is no lake log), if they hold runs above
/// the start: what key compaction swaps its filtered segments in with.
pub(crate) fn rewrite_of(view: &LogView, pages: Vec<usize>) -> Option<Rewrite> {
    match rewrite(view, pages) {
        Plan::Rewrite(rw) => Some(rw),
        _ => None,
    }
}

/// The rewrite of `pages` (chosen): their runs above the start, cut at a lake day's end.
fn rewrite(view: &LogView, mut pages: Vec<usize>) -> Plan {
    let mut taken: Vec<(usize, &Locator)> = pages
        .iter()
        .flat_map(|i| view.pages[*i].page.locators.iter().map(move |l| (*i, l)))
        .filter(|(_, l)| l.end_offset() > view.start)
        .collect();
    // A lake segment holds one ingest day (its table partition): it ends before the first
    // run of the next day. The rest of that run's page stays, as a page of its own.
    let mut rest: Option<IndexPage> = None;
    if view.lake.is_some() {
        let runs: Vec<&Locator> = taken.iter().map(|(_, l)| *l).collect();
        if let Some(k) = lakes::day_cut(&runs) {
            let (page, cut) = (taken[k].0, taken[k].1.first_offset);
            let left: Vec<Locator> =
                taken[k..].iter().filter(|(i, _)| *i == page).map(|(_, l)| (*l).clone()).collect();
            let whole = view.pages[page].first == cut
                && k == taken.iter().position(|(i, _)| *i == page).unwrap_or(k);
            taken.truncate(k);
            if whole {
                pages.retain(|i| *i < page);
            } else {
                pages.retain(|i| *i <= page);
                rest = Some(IndexPage { locators: left });
            }
        }
    }
    let runs: Vec<Locator> = taken.into_iter().map(|(_, l)| l.clone()).collect();
    let (Some(first), Some(last)) = (runs.first(), runs.last()) else {
        return Plan::Nothing { eligible: 0, raise_floor: None };
    };
    let (first_offset, end_offset) = (first.first_offset, last.end_offset());
    let range_end =
        rest.as_ref().and_then(|p| p.locators.last()).map_or(end_offset, Locator::end_offset);
    // The floor: the log's WAL chunks left (other pages, what a day's cut left of its page,
    // the head's recent), next_seq, marks.
    let replaced: HashSet<usize> = pages.iter().copied().collect();
    let left = view
        .pages
        .iter()
        .enumerate()
        .filter(|(i, _)| !replaced.contains(i))
        .flat_map(|(_, p)| p.page.locators.iter())
        .chain(rest.iter().flat_map(|p| p.locators.iter()))
        .chain(view.head.recent.iter());
    let floor = view.floor_of(left);
    debug_assert!(
        runs.iter().all(|l| !l.in_wal() || view.eligible(l)),
        "a rewrite takes only WAL chunks below every writer's low-water mark"
    );
    Plan::Rewrite(Rewrite { pages, runs, rest, first_offset, end_offset, range_end, floor })
}

/// The pieces `[i, j)` the next rewrite takes, if any: the first window, scanning from the
/// oldest open piece, that is worth its cost. A window takes consecutive open pieces until it
/// holds `target` bytes. WAL chunks alone are worth compacting once there are `threshold` of
/// them (`threshold`); a window with a segment in it only when the result is at least
/// [`MERGE_GROWTH`] times its largest segment ([`IDLE_MERGE_GROWTH`] on an idle log), or of
/// the target size, or, on a settled log, when it joins two pieces or more.
pub fn choose(
    pieces: &[Piece],
    target: u64,
    threshold: usize,
    activity: Activity,
) -> Option<(usize, usize)> {
    for i in 0..pieces.len() {
        if !pieces[i].open {
            continue;
        }
        let (mut j, mut bytes, mut chunks, mut largest, mut segments) = (i, 0u64, 0usize, 0u64, 0);
        // The WAL pages before the window's first segment: (end, chunks).
        let mut wal_prefix = None;
        while j < pieces.len() && pieces[j].open && (j == i || bytes < target) {
            let p = pieces[j];
            if p.segment && wal_prefix.is_none() {
                wal_prefix = Some((j, chunks));
            }
            bytes += p.bytes;
            chunks += p.wal_chunks;
            if p.segment {
                segments += 1;
                largest = largest.max(p.bytes);
            }
            j += 1;
        }
        let growth = if activity == Activity::Active { MERGE_GROWTH } else { IDLE_MERGE_GROWTH };
        let worth = if segments == 0 {
            chunks >= threshold.max(1)
        } else if activity == Activity::Settled {
            j - i >= 2
        } else {
            bytes >= largest.saturating_mul(growth) || bytes >= target
        };
        if worth {
            return Some((i, j));
        }
        // WAL pages followed by a segment too large to merge them into (a page compacted after
        // the ones behind it, which then waited for a writer's low-water mark): on their own.
        if let Some((end, wal)) = wal_prefix
            && end > i
            && wal >= threshold.max(1)
        {
            return Some((i, end));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use logstore::records::LakeFile;

    const DAY: i64 = 86_400_000;

    /// A run of `records` at `first`: a WAL chunk of object `wal_seq`, or (claim ≠ 0) a
    /// segment, a lake one if `lake`.
    fn run(
        first: u64,
        records: u64,
        wal_seq: u64,
        claim: u64,
        ingest_ms: i64,
        lake: bool,
    ) -> Locator {
        Locator {
            first_offset: first,
            record_count: records,
            entry_count: 1,
            wal_seq,
            payload_bytes: records * 10,
            compacted_claim: claim,
            ingest_ms,
            lake: (lake && claim != 0).then(LakeFile::default),
            ..Default::default()
        }
    }

    /// A page as generated: WAL chunks (wal_seq, records, ingest day) or one segment
    /// (records, claim, lake, ingest day).
    #[derive(Clone, Debug)]
    enum Shape {
        Wal(Vec<(u64, u64, i64)>),
        Segment(u64, u64, bool, i64),
    }

    fn shape() -> impl Strategy<Value = Shape> {
        prop_oneof![
            3 => prop::collection::vec((0u64..40, 1u64..8, 0i64..3), 1..5).prop_map(Shape::Wal),
            1 => (1u64..40, 1u64..4, any::<bool>(), 0i64..3)
                .prop_map(|(n, c, l, d)| Shape::Segment(n, c, l, d)),
        ]
    }

    prop_compose! {
        fn view()(
            shapes in prop::collection::vec(shape(), 0..10),
            recent in prop::collection::vec((0u64..40, 1u64..8), 0..4),
            start_at in 0u64..100,
            min_mark in 0u64..45,
            floor in prop::option::of(0u64..45),
            lake in any::<bool>(),
            current in prop::collection::hash_set(0u64..200, 0..20),
            claim in 1i64..4,
        ) -> LogView {
            let (mut at, mut pages, mut ingest) = (0u64, Vec::new(), 0i64);
            for (i, s) in shapes.into_iter().enumerate() {
                let first = at;
                let locators = match s {
                    Shape::Wal(chunks) => chunks
                        .into_iter()
                        .map(|(seq, n, day)| {
                            ingest = ingest.max(day * DAY + 1);
                            let l = run(at, n, seq, 0, ingest, false);
                            at += n;
                            l
                        })
                        .collect(),
                    Shape::Segment(n, c, l, day) => {
                        ingest = ingest.max(day * DAY + 1);
                        let s = run(at, n, 0, c, ingest, l);
                        at += n;
                        vec![s]
                    }
                };
                pages.push(Page { first, revision: i as i64 + 1, page: IndexPage { locators } });
            }
            let recent = recent
                .into_iter()
                .map(|(seq, n)| {
                    let l = run(at, n, seq, 0, ingest, false);
                    at += n;
                    l
                })
                .collect();
            let head = LogHead { next_offset: at, recent, ..Default::default() };
            let lake = lake.then(|| LakeView {
                log: LakeLog { stream_identity: "s".to_owned(), partition: 0 },
                table: None,
                full: false,
                current,
            });
            LogView {
                log: LogId(1),
                revision: 100,
                claim,
                head,
                head_revision: 50,
                start: start_at.min(at),
                start_revision: 7,
                min_mark,
                pages,
                floor: floor.map(|f| (f, 9)),
                lake,
            }
        }
    }

    fn activity() -> impl Strategy<Value = Activity> {
        prop_oneof![Just(Activity::Active), Just(Activity::Idle), Just(Activity::Settled)]
    }

    /// The live WAL chunks a rewrite leaves: pages not replaced, `rest`, the head's recent.
    fn left<'a>(v: &'a LogView, rw: &'a Rewrite) -> impl Iterator<Item = &'a Locator> {
        v.pages
            .iter()
            .enumerate()
            .filter(|(i, _)| !rw.pages.contains(i))
            .flat_map(|(_, p)| p.page.locators.iter())
            .chain(rw.rest.iter().flat_map(|p| p.locators.iter()))
            .chain(v.head.recent.iter())
            .filter(|l| l.in_wal() && l.end_offset() > v.start)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// No chunk lost: the pages a rewrite replaces are consecutive, and each of their runs
        /// above the start is either read into the segment, in order and without a gap, or
        /// kept in the page left after a day's cut.
        #[test]
        fn a_rewrite_loses_no_chunk(
            v in view(),
            min_chunks in 1usize..20,
            target in 1u64..400,
            a in activity(),
            spilled in any::<bool>(),
        ) {
            let policy = Policy { min_chunks, target_segment_bytes: target };
            let Plan::Rewrite(rw) = plan(&v, &policy, a, spilled) else { return Ok(()) };
            prop_assert!(!rw.pages.is_empty());
            prop_assert!(rw.pages.windows(2).all(|w| w[1] == w[0] + 1), "{:?}", rw.pages);
            let taken: Vec<&Locator> = rw
                .pages
                .iter()
                .flat_map(|i| v.pages[*i].page.locators.iter())
                .filter(|l| l.end_offset() > v.start)
                .collect();
            let kept: Vec<&Locator> =
                rw.runs.iter().chain(rw.rest.iter().flat_map(|p| p.locators.iter())).collect();
            prop_assert_eq!(taken, kept);
            prop_assert!(rw.runs.windows(2).all(|w| w[0].end_offset() == w[1].first_offset));
            prop_assert_eq!(rw.first_offset, rw.runs[0].first_offset);
            prop_assert_eq!(rw.end_offset, rw.runs[rw.runs.len() - 1].end_offset());
            prop_assert!(rw.range_end >= rw.end_offset);
            prop_assert!(rw.first_page(&v) <= rw.first_offset);
        }

        /// Nothing chosen below the floor: a rewrite takes only WAL chunks in objects below
        /// every writer's low-water mark and segments wholly at or above the start, none this
        /// claim wrote; the floor it puts is at most every live WAL chunk it leaves and the
        /// marks. A floor raised without a rewrite is above the one stored and at most every
        /// live chunk.
        #[test]
        fn nothing_is_taken_or_floored_past_what_it_may(
            v in view(),
            min_chunks in 1usize..20,
            target in 1u64..400,
            a in activity(),
            spilled in any::<bool>(),
        ) {
            let policy = Policy { min_chunks, target_segment_bytes: target };
            match plan(&v, &policy, a, spilled) {
                Plan::Rewrite(rw) => {
                    for l in &rw.runs {
                        if l.in_wal() {
                            prop_assert!(l.wal_seq < v.min_mark, "{l:?} at mark {}", v.min_mark);
                        } else {
                            prop_assert!(l.first_offset >= v.start);
                            prop_assert_ne!(l.compacted_claim, v.claim as u64);
                        }
                    }
                    prop_assert!(rw.floor <= v.min_mark);
                    for l in left(&v, &rw) {
                        prop_assert!(rw.floor <= l.wal_seq, "floor {} above {l:?}", rw.floor);
                    }
                }
                Plan::Nothing { raise_floor: Some(f), .. } => {
                    prop_assert!(v.floor.is_some_and(|(now, _)| now < f));
                    prop_assert!(f <= v.min_mark);
                    let all = v.pages.iter().flat_map(|p| p.page.locators.iter());
                    for l in all.chain(&v.head.recent).filter(|l| l.in_wal() && l.end_offset() > v.start) {
                        prop_assert!(f <= l.wal_seq);
                    }
                }
                Plan::Spill { first } => {
                    prop_assert!(a >= Activity::Idle && !spilled);
                    prop_assert_eq!(Some(first), v.head.recent.first().map(|l| l.first_offset));
                    prop_assert!(v.head.recent.iter().all(|l| l.wal_seq < v.min_mark));
                }
                Plan::Nothing { .. } => {}
            }
        }

        /// A lake plan never spans two days: by the running maximum of the runs' ingest times,
        /// every run it reads is in its first run's UTC day.
        #[test]
        fn a_lake_rewrite_holds_one_ingest_day(
            v in view(),
            min_chunks in 1usize..20,
            target in 1u64..400,
            a in activity(),
        ) {
            let policy = Policy { min_chunks, target_segment_bytes: target };
            let Plan::Rewrite(rw) = plan(&v, &policy, a, true) else { return Ok(()) };
            if v.lake.is_none() {
                return Ok(());
            }
            let mut ingest = i64::MIN;
            let days: Vec<i64> = rw
                .runs
                .iter()
                .map(|l| {
                    ingest = ingest.max(l.ingest_time());
                    ingest.div_euclid(DAY)
                })
                .collect();
            prop_assert!(days.windows(2).all(|d| d[0] == d[1]), "{days:?}");
        }
    }
}
