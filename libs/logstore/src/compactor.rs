//! The compactor (ARCHITECTURE §5): rewrites a log's run of WAL chunks, and small segments
//! earlier rewrites made, as one compacted segment of about `target_segment_bytes`, and swaps
//! the index in ONE constant-size transaction, so readers see the old pieces or the new
//! segment, never neither. Claims each log under its lease so no log is compacted by two
//! at once; a crash or pause at any step leaves at worst an orphan segment, which the swap's
//! compares keep out of the index.
//!
//! The steps: claim `compaction/tasks/<log>` (create-only, under the lease; its create_revision
//! is the claim revision); read at one revision R the head, `start`, `wal/next_seq`, every
//! low-water mark and the index pages; pick whole pages `[a, b)` ([`choose`]): WAL pages whose
//! every chunk is in a WAL object below every live writer's low-water mark, and segments
//! smaller than the target, from the oldest at or above `start` until the target; read them;
//! PUT `compacted/<log>/<a>-<claim>.seg` create-only; swap (compares: the claim, `start` and
//! `index/<a>` unchanged since R, no key of `index/[a, b)` modified after R; operations: put
//! `index/<a>` = the compacted locator, delete-range `index/(a, b)`, put `wal_floor` = the
//! minimum of the log's WAL chunks left, `wal/next_seq` and the marks at R); release the claim.
//!
//! Idle logs (ARCHITECTURE §5): chunks still in the head's `recent` wait until they spill to a
//! page, which an idle log's never do, and a log with fewer than `min_chunks` eligible chunks
//! is never compacted; either way its floor would hold the cleaner's cutoff at its oldest chunk
//! forever. So a log whose head has not moved for a whole cycle ([`IdleLogs`]) has its
//! `recent` spilled to an index page (compare: the head's mod_revision and the claim; a writer
//! racing it re-bases on the moved head) and every eligible chunk compacted, however few.
//! Chunks wholly below `start` are trimmed: they never hold a floor.

use std::sync::Arc;

use futures::StreamExt;
use metadata::{
    Compare, CompareOp, KeyRange, LeaseId, MetadataStore, OpResult, RangeRequest, Txn, TxnOp,
};
use objstore::object_store::ObjectStore;
use prost::Message;

use crate::keys::{Keys, parse_u64};
use crate::lakes::{self, LakeLogs};
use crate::reader::LogReader;
use crate::records::{IndexPage, Locator, LogHead, LogState};
use crate::{Clock, LogEntry, LogError, LogId, decode};

/// When a log is worth compacting, and how large its segments grow.
#[derive(Clone, Debug)]
pub struct CompactorConfig {
    /// Eligible WAL chunks (spilled to index pages, below every writer's low-water mark) a log
    /// needs before they are compacted on their own.
    pub min_chunks: usize,
    /// Payload bytes a segment is built up to: a rewrite takes whole pieces (index pages of WAL
    /// chunks, segments smaller than this) until it holds this much, so a segment ends below
    /// this plus one piece. Segments this large are never rewritten.
    pub target_segment_bytes: u64,
    /// A log whose head has not moved for this long is settled: its small segments are merged
    /// whatever their sizes, so its old range ends in segments of the target size and at most
    /// one smaller. (Sooner would rewrite the tail of a log written in rare bursts on every
    /// burst.)
    pub settle_after: std::time::Duration,
    /// The logs whose segments are lake table data files (docs/lake.md).
    pub lakes: Arc<LakeLogs>,
    /// The time a lake table's snapshot is stamped with.
    pub clock: Arc<dyn Clock>,
}

impl Default for CompactorConfig {
    fn default() -> Self {
        CompactorConfig {
            min_chunks: 16,
            target_segment_bytes: 64 << 20,
            settle_after: DEFAULT_SETTLE_AFTER,
            lakes: Default::default(),
            clock: Arc::new(crate::SystemClock),
        }
    }
}

/// [`CompactorConfig::settle_after`] by default.
pub const DEFAULT_SETTLE_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// How long a log has gone without appends, as the compactor sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Activity {
    /// Its head moved since the last look (or this is the first).
    Active,
    /// Its head has not moved for a whole cycle: nothing else would compact its last chunks.
    Idle,
    /// Its head has not moved for [`CompactorConfig::settle_after`].
    Settled,
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

/// Rewrites one claim does at most before letting the cycle go on to the next log.
pub const MAX_REWRITES_PER_CLAIM: usize = 64;

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

/// What one compaction did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compaction {
    pub log: LogId,
    /// Offsets `[first_offset, end_offset)` now live in `object`.
    pub first_offset: u64,
    pub end_offset: u64,
    /// WAL chunks replaced.
    pub chunks: usize,
    /// Segments merged into it (0: WAL chunks only).
    pub segments: usize,
    /// Bytes of the segment written.
    pub bytes: u64,
    pub object: String,
    /// The log's new `wal_floor`.
    pub wal_floor: u64,
    /// For a lake log's segment: the table snapshot that added it.
    pub table_snapshot: Option<i64>,
}

/// Why a log was not compacted this time (none of these is an error).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skipped {
    /// Another compactor holds the claim.
    Claimed,
    /// Fewer eligible chunks than the threshold.
    TooFew { eligible: usize },
    /// The log is deleted.
    Deleted,
    /// An idle log took an append while its head was being spilled: it is not idle after all.
    Appended,
    /// The index changed between the read and the swap (a trim, a delete, another swap): the
    /// segment written is an orphan the cleaner reclaims.
    Raced { orphan: String },
}

/// A compactor: one identity and lease, any number of logs. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Compactor {
    meta: Arc<dyn MetadataStore>,
    objects: Arc<dyn ObjectStore>,
    reader: LogReader,
    keys: Keys,
    id: String,
    lease: LeaseId,
    cfg: CompactorConfig,
    idle: IdleLogs,
}

/// The steps of one compaction, where a test hook may pause or crash it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The claim is taken; nothing read or written yet.
    Claimed,
    /// The segment is PUT; the swap is next (for a lake log, its table's files first).
    Written,
    /// A lake log's table files (manifest, manifest list, metadata JSON) are written too; the
    /// swap is next.
    TableWritten,
    /// The swap committed; the claim is released next.
    Swapped,
}

/// A test hook run at each [`Step`] (pause there, or never return to crash there).
pub type StepHook = Arc<dyn Fn(Step) -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

impl Compactor {
    /// A compactor named `id` whose claims live under `lease` (its member registration's).
    pub fn new(reader: LogReader, id: &str, lease: LeaseId, cfg: CompactorConfig) -> Self {
        Compactor {
            meta: reader.meta().clone(),
            objects: reader.objects().clone(),
            keys: reader.keys().clone(),
            reader,
            id: id.to_owned(),
            lease,
            cfg,
            idle: IdleLogs::default(),
        }
    }

    /// Remembers heads across cycles in `idle` (a fresh compactor knows none, so it treats no
    /// log as idle before its second look).
    pub fn with_idle(mut self, idle: IdleLogs) -> Self {
        self.idle = idle;
        self
    }

    /// Claims `log`, makes the first rewrite worth doing (WAL chunks compacted, or segments
    /// merged), releases the claim.
    pub async fn compact_log(&self, log: LogId) -> Result<Result<Compaction, Skipped>, LogError> {
        self.compact_log_with(log, None).await
    }

    /// [`Self::compact_log`] with a hook run at each [`Step`].
    pub async fn compact_log_with(
        &self,
        log: LogId,
        hook: Option<StepHook>,
    ) -> Result<Result<Compaction, Skipped>, LogError> {
        let done = self.claim_and_rewrite(log, hook, 1).await?;
        Ok(done.map(|mut d| d.remove(0)))
    }

    /// Claims `log` and makes every rewrite worth doing, up to [`MAX_REWRITES_PER_CLAIM`], one
    /// after the other under the claim (compacting WAL chunks, then merging the segments that
    /// made), then releases it.
    pub async fn compact_log_fully(
        &self,
        log: LogId,
    ) -> Result<Result<Vec<Compaction>, Skipped>, LogError> {
        self.compact_log_fully_with(log, None).await
    }

    /// [`Self::compact_log_fully`] with a hook run at each [`Step`] of each rewrite.
    pub async fn compact_log_fully_with(
        &self,
        log: LogId,
        hook: Option<StepHook>,
    ) -> Result<Result<Vec<Compaction>, Skipped>, LogError> {
        self.claim_and_rewrite(log, hook, MAX_REWRITES_PER_CLAIM).await
    }

    /// Claims `log`, makes up to `max` rewrites (at least one, or says why not), releases.
    async fn claim_and_rewrite(
        &self,
        log: LogId,
        hook: Option<StepHook>,
        max: usize,
    ) -> Result<Result<Vec<Compaction>, Skipped>, LogError> {
        let claim = self.keys.compaction_task(log);
        let resp = self
            .meta
            .txn(
                Txn::new()
                    .when([Compare::create_revision(claim.clone(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put_with_lease(claim.clone(), self.id.clone(), self.lease)]),
            )
            .await?;
        if !resp.succeeded {
            return Ok(Err(Skipped::Claimed));
        }
        let claim_rev = resp.revision;
        if let Some(h) = &hook {
            h(Step::Claimed).await;
        }
        let done = self.compact_claimed(log, claim_rev, hook.clone(), max.max(1)).await;
        if let (Ok(Ok(_)), Some(h)) = (&done, &hook) {
            h(Step::Swapped).await;
        }
        // Release only our own claim (an expired lease may have let another take it).
        let release = Txn::new()
            .when([Compare::create_revision(claim.clone(), CompareOp::Equal, claim_rev)])
            .and_then([TxnOp::delete(KeyRange::key(claim))]);
        let released = self.meta.txn(release).await;
        let done = done?;
        released?;
        Ok(done)
    }

    async fn compact_claimed(
        &self,
        log: LogId,
        claim_rev: i64,
        hook: Option<StepHook>,
        max: usize,
    ) -> Result<Result<Vec<Compaction>, Skipped>, LogError> {
        // Whether the log is idle is decided at the first look: this claim's own swaps and
        // spill move nothing a writer does.
        let (mut activity, mut spilled, mut done) = (None, false, Vec::new());
        loop {
            match self.compact_pass(log, claim_rev, hook.clone(), &mut activity, spilled).await? {
                // An idle log's head is spilled first; the pass after that sees the spilled page.
                Pass::Spilled if spilled => {
                    return Err(LogError::Internal(
                        "a log's head was spilled twice under one claim".to_owned(),
                    ));
                }
                Pass::Spilled => spilled = true,
                Pass::Done(Ok(c)) => {
                    done.push(c);
                    if done.len() >= max {
                        return Ok(Ok(done));
                    }
                }
                Pass::Done(Err(skipped)) if done.is_empty() => return Ok(Err(skipped)),
                // Something was rewritten; what stopped the next one is the next cycle's.
                Pass::Done(Err(_)) => return Ok(Ok(done)),
            }
        }
    }

    /// One read of the log at one revision, and what it allows: the head spilled (an idle log,
    /// unless `spilled` says this claim did so already), a floor raise, or a rewrite.
    /// `activity` is what the claim's first pass saw (set here on the first).
    async fn compact_pass(
        &self,
        log: LogId,
        claim_rev: i64,
        hook: Option<StepHook>,
        activity: &mut Option<Activity>,
        spilled: bool,
    ) -> Result<Pass, LogError> {
        let keys = &self.keys;
        // A lake log's table state is read at the same revision.
        let lake = self.cfg.lakes.get(log).cloned();
        let table_key = lake.as_ref().map(|l| keys.lake_table(&l.stream_identity));
        let mut reads = vec![
            TxnOp::get(RangeRequest::key(keys.head(log))),
            TxnOp::get(RangeRequest::key(keys.start(log))),
            TxnOp::get(RangeRequest::key(keys.next_seq())),
            TxnOp::get(RangeRequest::prefix(keys.low_water_prefix())),
            TxnOp::get(RangeRequest::prefix(keys.index_prefix(log))),
            TxnOp::get(RangeRequest::key(keys.wal_floor(log))),
        ];
        if let Some(k) = &table_key {
            reads.push(TxnOp::get(RangeRequest::key(k.clone())));
        }
        let resp = self.meta.txn(Txn::new().and_then(reads)).await?;
        let r = resp.revision;
        let mut gets: Vec<metadata::RangeResponse> = resp
            .results
            .into_iter()
            .map(|o| match o {
                OpResult::Get(g) => Ok(g),
                _ => Err(LogError::Internal("compaction read answered the wrong shape".to_owned())),
            })
            .collect::<Result<_, _>>()?;
        let table_kv = match table_key {
            Some(_) => gets.pop().map(|g| g.kvs.into_iter().next()),
            None => None,
        };
        let [head, start, next_seq, marks, pages, floor_now] =
            <[_; 6]>::try_from(gets).map_err(|_| {
                LogError::Internal("compaction read answered the wrong shape".to_owned())
            })?;
        let Some(head_kv) = head.kvs.first() else { return Err(LogError::NotFound(log)) };
        let head: LogHead = decode("log head", &head_kv.value)?;
        // Idle: the head is where this compactor saw it a cycle ago (or it was just spilled).
        // Every pass records the head it saw, so a spilled head counts as unmoved next cycle.
        let seen = self.idle.observe(log, head_kv.mod_revision, self.cfg.settle_after);
        let activity = *activity.get_or_insert(seen);
        let activity = if spilled { activity.max(Activity::Idle) } else { activity };
        let idle = activity >= Activity::Idle;
        let Some(start_kv) = start.kvs.first() else {
            return Ok(Pass::Done(Err(Skipped::Deleted)));
        };
        if head.log_state() == LogState::Deleted {
            return Ok(Pass::Done(Err(Skipped::Deleted)));
        }
        let seq =
            |v: &[u8]| parse_u64(v).ok_or_else(|| LogError::Corrupt("a WAL sequence".to_owned()));
        let start = seq(&start_kv.value)?;
        let next_seq = next_seq.kvs.first().map_or(Ok(0), |kv| seq(&kv.value))?;
        let mut min_mark = next_seq;
        for kv in &marks.kvs {
            if crate::mutations::on(crate::mutations::Mutation::IgnoreLowWater) {
                break;
            }
            min_mark = min_mark.min(seq(&kv.value)?);
        }
        let mut listed: Vec<(u64, &metadata::KeyValue, IndexPage)> = Vec::new();
        for kv in &pages.kvs {
            let Some(first) = keys.parse_index_page(log, &kv.key) else { continue };
            listed.push((first, kv, decode("index page", &kv.value)?));
        }
        // An idle log's recent chunks go to a page of their own, so they can be compacted.
        let eligible = |l: &Locator| l.in_wal() && l.wal_seq < min_mark;
        if idle
            && !spilled
            && !head.recent.is_empty()
            && head.recent.iter().all(eligible)
            && head.recent.iter().any(|l| l.end_offset() > start)
        {
            let first = head.recent[0].first_offset;
            let mut emptied = head.clone();
            let page = IndexPage { locators: std::mem::take(&mut emptied.recent) };
            let spill = Txn::new()
                .when([
                    Compare::mod_revision(keys.head(log), CompareOp::Equal, head_kv.mod_revision),
                    Compare::create_revision(
                        keys.compaction_task(log),
                        CompareOp::Equal,
                        claim_rev,
                    ),
                    Compare::create_revision(keys.index_page(log, first), CompareOp::Equal, 0),
                ])
                .and_then([
                    TxnOp::put(keys.index_page(log, first), page.encode_to_vec()),
                    TxnOp::put(keys.head(log), emptied.encode_to_vec()),
                ]);
            if !self.meta.txn(spill).await?.succeeded {
                return Ok(Pass::Done(Err(Skipped::Appended)));
            }
            return Ok(Pass::Spilled);
        }
        // A table whose state outgrew its record (manifests are not merged yet) takes no more
        // segments: the log's compaction goes on with plain ones (a failing swap would hold the
        // cleaner's cutoff for the whole cluster).
        let table_full = table_kv
            .as_ref()
            .and_then(Option::as_ref)
            .is_some_and(|kv| kv.value.len() > lakes::MAX_TABLE_STATE);
        // The table's current files: a lake segment merges only while its file is one (table
        // retention may have taken it out; the merge's commit would be refused every time).
        let in_table: std::collections::HashSet<String> = match (&lake, table_kv.as_ref()) {
            (Some(_), Some(Some(kv))) if !table_full => {
                lakes::decode_table(&kv.value)?.current_files().map(str::to_owned).collect()
            }
            _ => Default::default(),
        };
        let mergeable = |l: &Locator| match &l.lake {
            None => true,
            Some(_) => in_table.contains(&self.cfg.lakes.uri(&l.object(log))),
        };
        // Chunks wholly below the start are trimmed: no floor counts them.
        let live = |l: &&Locator| l.in_wal() && l.end_offset() > start;

        // Each page as a piece a rewrite may take: every chunk of a WAL page eligible (a page a
        // trim cut through is taken whole but for its chunks wholly below the start, whose
        // objects may be reclaimed already; skipping it held the cleaner's cutoff for good), or
        // a segment below the target wholly at or above the start.
        let target = self.cfg.target_segment_bytes.max(1);
        let claim = u64::try_from(claim_rev).unwrap_or(0);
        let pieces: Vec<Piece> = listed
            .iter()
            .map(|(_, _, page)| {
                let above = || page.locators.iter().filter(|l| l.end_offset() > start);
                let below = above().next().is_none();
                let segment = page.locators.iter().any(|l| !l.in_wal());
                let bytes = above().map(|l| l.payload_bytes).sum();
                // A segment this claim wrote is not taken again under it: its object's key
                // (first offset and claim) would be the new one's too. A lake segment is
                // merged only into a lake segment (its rows are not its stored batches), and
                // not while its table takes no more.
                let open = !below
                    && if segment {
                        page.locators.len() == 1
                            && page.locators[0].first_offset >= start
                            && page.locators[0].compacted_claim != claim
                            && (page.locators[0].lake.is_none() || lake.is_some())
                            && mergeable(&page.locators[0])
                            && bytes < target
                    } else {
                        page.locators.iter().all(eligible)
                    };
                let wal_chunks = if segment { 0 } else { above().count() };
                Piece { bytes, wal_chunks, segment, open }
            })
            .collect();
        // An idle log is compacted however few its chunks: nothing else ever would be.
        let threshold = if idle { 1 } else { self.cfg.min_chunks.max(1) };
        let Some((from, to)) = choose(&pieces, target, threshold, activity) else {
            // Nothing to rewrite, but an idle log's floor may hold the cleaner's cutoff back:
            // recompute it at R (a lower bound ever after, ARCHITECTURE §5) and raise it,
            // unless the floor changed since (a swap's is newer).
            let all = listed.iter().flat_map(|(_, _, p)| p.locators.iter()).chain(&head.recent);
            let floor = all.filter(live).map(|l| l.wal_seq).fold(min_mark, u64::min);
            if let Some(kv) = floor_now.kvs.first()
                && seq(&kv.value)? < floor
            {
                let raise = Txn::new()
                    .when([
                        Compare::mod_revision(
                            keys.wal_floor(log),
                            CompareOp::Equal,
                            kv.mod_revision,
                        ),
                        Compare::create_revision(
                            keys.compaction_task(log),
                            CompareOp::Equal,
                            claim_rev,
                        ),
                    ])
                    .and_then([TxnOp::put(keys.wal_floor(log), floor.to_string())]);
                self.meta.txn(raise).await?;
            }
            let eligible = pieces.iter().filter(|p| p.open).map(|p| p.wal_chunks).sum();
            return Ok(Pass::Done(Err(Skipped::TooFew { eligible })));
        };
        let mut chosen: Vec<usize> = (from..to).collect();
        let mut taken: Vec<(usize, &Locator)> = chosen
            .iter()
            .flat_map(|i| listed[*i].2.locators.iter().map(move |l| (*i, l)))
            .filter(|(_, l)| l.end_offset() > start)
            .collect();
        // A lake segment holds one ingest day (its table partition): it ends before the first
        // run of the next day. The rest of that run's page stays, as a page of its own.
        let mut rest: Option<IndexPage> = None;
        if lake.is_some() {
            let runs: Vec<&Locator> = taken.iter().map(|(_, l)| *l).collect();
            if let Some(k) = lakes::day_cut(&runs) {
                let (page, cut) = (taken[k].0, taken[k].1.first_offset);
                let left: Vec<Locator> = taken[k..]
                    .iter()
                    .filter(|(i, _)| *i == page)
                    .map(|(_, l)| (*l).clone())
                    .collect();
                let whole = listed[page].0 == cut
                    && k == taken.iter().position(|(i, _)| *i == page).unwrap_or(k);
                taken.truncate(k);
                if whole {
                    chosen.retain(|i| *i < page);
                } else {
                    chosen.retain(|i| *i <= page);
                    rest = Some(IndexPage { locators: left });
                }
            }
        }
        let chunks: Vec<&Locator> = taken.iter().map(|(_, l)| *l).collect();
        let (Some(first), Some(last)) = (chunks.first(), chunks.last()) else {
            return Ok(Pass::Done(Err(Skipped::TooFew { eligible: 0 })));
        };
        let (a, b) = (first.first_offset, last.end_offset());
        // The end of the index range the swap replaces: past the page left as the rest.
        let range_end =
            rest.as_ref().and_then(|p| p.locators.last()).map_or(b, Locator::end_offset);
        // The first page's key: `a` unless a trim cut through that page (then below `a`).
        let (page_a, a_kv) = (listed[chosen[0]].0, listed[chosen[0]].1);

        // The segment: the entries of the chunks and segments taken, in order, as one chunk of
        // one log (or, for a lake log, as its table's Parquet data file).
        let mut builder = wal::ObjectBuilder::with_capacity(
            wal::ObjectKind::Segment,
            if lake.is_some() { 0 } else { chunks.iter().map(|l| l.byte_len as usize).sum() },
        );
        builder.begin_chunk(log.0);
        let (mut records, mut entries) = (0u64, 0u32);
        // A lake log's entries as rows to write: (record count, timestamp, row).
        let mut kept: Vec<(u32, i64, lake::segment::Served)> = Vec::new();
        // One ranged GET per chunk, several at once and taken in order: a log written in many
        // small flushes has thousands of chunks, and one GET at a time made a cycle take
        // minutes. The segment's size bounds what they hold together. Each fetch owns what it
        // reads with (a future borrowing the chunk list is not Send for every lifetime the
        // role's task needs).
        // A lake segment merged is read as its rows (each as written); anything else as
        // entries (a lake log's rows then take their run's ingest time).
        let lake_log = lake.is_some();
        let fetches: Vec<_> = chunks
            .iter()
            .map(|loc| {
                let (reader, loc) = (self.reader.clone(), Locator::clone(loc));
                async move {
                    if loc.lake.is_some() {
                        return Ok(Run::Rows(reader.lake_served(log, &loc).await?));
                    }
                    let ingest_ms = lakes::ingest_of(&loc);
                    Ok::<_, LogError>(Run::Entries(reader.run_entries(log, &loc).await?, ingest_ms))
                }
            })
            .collect();
        let mut runs = futures::stream::iter(fetches).buffered(RUN_FETCHES);
        let mut merged_lake = 0usize;
        while let Some(run) = runs.next().await {
            match run? {
                Run::Entries(got, ingest_ms) => {
                    for e in got {
                        records += u64::from(e.header.record_count);
                        entries += 1;
                        if !lake_log {
                            let h = &e.header;
                            builder.push_entry(h.record_count, h.timestamp, &e.payload)?;
                            continue;
                        }
                        let attributes =
                            recordbatch::BatchHeader::parse(&e.payload).map_or(0, |h| h.attributes);
                        let stored_len = u32::try_from(e.payload.len()).unwrap_or(u32::MAX);
                        let entry = lake::segment::Entry {
                            offset: e.header.offset,
                            ingest_ms,
                            batch: e.payload,
                        };
                        let served = lake::segment::Served { entry, stored_len, attributes };
                        kept.push((e.header.record_count, e.header.timestamp, served));
                    }
                }
                Run::Rows(rows) => {
                    merged_lake += 1;
                    for s in rows {
                        let h = recordbatch::BatchHeader::parse(&s.entry.batch)
                            .map_err(|e| LogError::Corrupt(format!("a lake row's batch: {e}")))?;
                        let count = u32::try_from(h.record_count).unwrap_or(0);
                        records += u64::from(count);
                        entries += 1;
                        kept.push((count, h.max_timestamp, s));
                    }
                }
            }
        }
        if records != b - a {
            return Err(LogError::Corrupt(format!(
                "log {log}: chunks [{a}, {b}) hold {records} records"
            )));
        }
        let claim = u64::try_from(claim_rev)
            .map_err(|_| LogError::Internal("negative claim revision".to_owned()))?;
        let mut locator = Locator {
            first_offset: a,
            record_count: records,
            entry_count: entries,
            wal_seq: 0,
            byte_start: 0,
            byte_len: 0,
            max_timestamp: last.max_timestamp,
            cumulative_before: first.cumulative_before,
            payload_bytes: chunks.iter().map(|l| l.payload_bytes).sum(),
            compacted_claim: claim,
            ingest_ms: chunks.iter().map(|l| lakes::ingest_of(l)).max().unwrap_or_default(),
            lake: None,
        };
        // A lake log's segment as a Parquet file; if an entry is no record batch (a stream
        // written around its format), this segment is a plain one instead.
        if lake.is_some() && table_full {
            tracing::error!(
                %log,
                "its lake table's state is over {} bytes (manifests are not merged yet): this segment is written as a plain one",
                lakes::MAX_TABLE_STATE
            );
        }
        let lake_seg = match &lake {
            Some(_) if table_full && merged_lake == 0 => None,
            Some(_) if table_full => {
                return Err(LogError::Unavailable {
                    message: format!("log {log}: its lake table is full; lake segments wait"),
                    outcome_unknown: false,
                });
            }
            Some(l) => {
                let rows: Vec<lake::segment::Served> =
                    kept.iter().map(|(_, _, s)| s.clone()).collect();
                let mut opts = lake::segment::Options {
                    partition: i32::try_from(l.partition).unwrap_or(i32::MAX),
                    ..Default::default()
                };
                if let Some(bytes) = self.cfg.lakes.row_group_bytes {
                    opts.row_group_bytes = bytes;
                }
                match lake::segment::rewrite(&rows, &opts) {
                    Ok(seg) => {
                        let max_ts = |b: &bytes::Bytes| {
                            recordbatch::BatchHeader::parse(b).map_or(0, |h| h.max_timestamp)
                        };
                        let place = lakes::lake_file(
                            &seg,
                            rows.iter().map(|r| {
                                (r.entry.offset, u64::from(r.stored_len), max_ts(&r.entry.batch))
                            }),
                        );
                        Some((seg, place))
                    }
                    // Only an entry appended around the stream's format (the log API): its
                    // segment is a plain one, unless lake rows (framed again, not as stored)
                    // would go in with it.
                    Err(lake::LakeError::Batch { offset, source }) if merged_lake == 0 => {
                        tracing::warn!(%log, offset, error = %source, "an entry of a lake log is no record batch; its segment is written as a plain one");
                        None
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            None => None,
        };
        let object = match &lake_seg {
            Some((seg, place)) => {
                locator.byte_len = seg.file.len() as u64;
                locator.ingest_ms = seg.ingest_ms.1;
                locator.lake = Some(place.clone());
                seg.file.clone()
            }
            None => {
                for (count, timestamp, s) in &kept {
                    builder.push_entry(*count, *timestamp, &s.entry.batch)?;
                }
                drop(kept);
                let (object, metas) = builder.finish()?;
                let meta =
                    metas.first().ok_or_else(|| LogError::Internal("empty segment".to_owned()))?;
                locator.byte_start = meta.byte_start;
                locator.byte_len = meta.byte_len;
                object
            }
        };
        let path = locator.object(log);
        let size = object.len() as u64;
        objstore::put_create_only(self.objects.as_ref(), &path, object).await?;
        if let Some(h) = &hook {
            h(Step::Written).await;
        }

        // The floor: the log's WAL chunks left (other pages, what a day's cut left of its page,
        // the head's recent), next_seq, marks.
        let compacted: std::collections::HashSet<usize> = chosen.iter().copied().collect();
        let left = listed
            .iter()
            .enumerate()
            .filter(|(i, _)| !compacted.contains(i))
            .flat_map(|(_, (_, _, p))| p.locators.iter())
            .chain(rest.iter().flat_map(|p| p.locators.iter()))
            .chain(head.recent.iter())
            .filter(live)
            .map(|l| l.wal_seq);
        let floor = left.fold(min_mark, u64::min);

        let index_page_a = keys.index_page(log, page_a);
        let index_a = keys.index_page(log, a);
        let after = |k: &[u8]| {
            let mut k = k.to_vec();
            k.push(0);
            k
        };
        let index_b = keys.index_page(log, b);
        let index_end = keys.index_page(log, range_end);
        let mut ops = Vec::with_capacity(6);
        if page_a < a {
            // The page a trim cut through goes; the segment's page is keyed at its first
            // offset, as every page is.
            ops.push(TxnOp::delete(KeyRange::between(index_page_a.clone(), index_a.clone())));
        }
        ops.extend([
            TxnOp::put(index_a.clone(), IndexPage { locators: vec![locator] }.encode_to_vec()),
            TxnOp::delete(KeyRange::between(after(&index_a), index_b.clone())),
            TxnOp::put(keys.wal_floor(log), floor.to_string()),
        ]);
        if let Some(rest) = &rest {
            // What a day's cut left of its page: a page at the cut (no key is both put and
            // deleted in one transaction).
            ops.push(TxnOp::put(index_b.clone(), rest.encode_to_vec()));
            ops.push(TxnOp::delete(KeyRange::between(after(&index_b), index_end.clone())));
        }
        let compares = vec![
            Compare::create_revision(keys.compaction_task(log), CompareOp::Equal, claim_rev),
            Compare::mod_revision(keys.start(log), CompareOp::Equal, start_kv.mod_revision),
            Compare::mod_revision(index_page_a.clone(), CompareOp::Equal, a_kv.mod_revision),
            Compare::mod_revision(index_page_a, CompareOp::Less, r + 1).with_range_end(index_end),
        ];
        // What the rewrite did, once swapped in (for a lake segment, with its table snapshot).
        let done = |table_snapshot| Compaction {
            log,
            first_offset: a,
            end_offset: b,
            chunks: chunks.iter().filter(|l| l.in_wal()).count(),
            segments: chunks.iter().filter(|l| !l.in_wal()).count(),
            bytes: size,
            object: path.to_string(),
            wal_floor: floor,
            table_snapshot,
        };
        let (Some(l), Some((seg, _))) = (&lake, &lake_seg) else {
            if !self.meta.txn(Txn::new().when(compares).and_then(ops)).await?.succeeded {
                return Ok(Pass::Done(Err(Skipped::Raced { orphan: path.to_string() })));
            }
            return Ok(Pass::Done(Ok(done(None))));
        };
        // A lake segment: the table's commit goes in the same transaction, comparing the
        // table's state as read. Another partition's commit moving the table first is no
        // race of this log's: the commit is planned again on the table as it is now.
        let table_key = keys.lake_table(&l.stream_identity);
        let mut table_kv = table_kv.flatten();
        let segment = format!("{:020}-{a:020}-{claim:020}", log.0);
        let file = seg.data_file(self.cfg.lakes.uri(&path), opts_partition(l))?;
        let summary = vec![
            ("lakelog.log-id".to_owned(), log.0.to_string()),
            ("lakelog.segment".to_owned(), path.to_string()),
            ("lakelog.first-offset".to_owned(), a.to_string()),
            ("lakelog.end-offset".to_owned(), b.to_string()),
            ("lakelog.metadata-revision".to_owned(), r.to_string()),
        ];
        for attempt in 0.. {
            let state = match &table_kv {
                Some(kv) => lakes::decode_table(&kv.value)?,
                None => self.cfg.lakes.new_table(l),
            };
            let append = lake::table::Append {
                segment: segment.clone(),
                file: file.clone(),
                now_ms: self.cfg.clock.now_ms(),
                summary: summary.clone(),
            };
            // The lake segments merged leave the table in the same snapshot (a replace); one
            // no longer in it (table retention took it out) must not come back. Manifests the
            // commit rewrites (one a replace cuts through; each day's, once there are many)
            // are read first.
            let replaced: Vec<String> = chunks
                .iter()
                .filter(|l| l.lake.is_some())
                .map(|l| self.cfg.lakes.uri(&l.object(log)))
                .collect();
            let read = lakes::read_manifests(
                &self.objects,
                &self.cfg.lakes,
                &state.manifests_to_read(&replaced),
            )
            .await?;
            let Some(mut commit) = state.commit(&append, &replaced, &read) else { break };
            commit.state.ends.insert(log.0.to_string(), b);
            lakes::write_commit_files(&self.objects, &self.cfg.lakes, &commit).await?;
            if attempt == 0
                && let Some(h) = &hook
            {
                h(Step::TableWritten).await;
            }
            let table_compare = match &table_kv {
                Some(kv) => {
                    Compare::mod_revision(table_key.clone(), CompareOp::Equal, kv.mod_revision)
                }
                None => Compare::create_revision(table_key.clone(), CompareOp::Equal, 0),
            };
            let mut when = compares.clone();
            when.push(table_compare);
            let mut then = ops.clone();
            then.push(TxnOp::put(table_key.clone(), lakes::encode_table(&commit.state)?));
            if self.meta.txn(Txn::new().when(when).and_then(then)).await?.succeeded {
                return Ok(Pass::Done(Ok(done(commit.state.snapshots.last().map(|s| s.id)))));
            }
            // Did only the table move? The log's own compares, evaluated alone, say.
            if attempt >= lakes::TABLE_RETRIES
                || !self.meta.txn(Txn::new().when(compares.clone())).await?.succeeded
            {
                break;
            }
            table_kv = self.meta.get(&table_key).await?;
        }
        Ok(Pass::Done(Err(Skipped::Raced { orphan: path.to_string() })))
    }
}

/// A lake log's stream partition as a table column holds it.
fn opts_partition(l: &lakes::LakeLog) -> i32 {
    i32::try_from(l.partition).unwrap_or(i32::MAX)
}

/// What a rewrite reads of one run it takes.
enum Run {
    /// A WAL chunk's or plain segment's entries, and the run's ingest time.
    Entries(Vec<LogEntry>, i64),
    /// A lake segment's rows.
    Rows(Vec<lake::segment::Served>),
}

/// What one pass of [`Compactor::compact_pass`] came to.
enum Pass {
    Done(Result<Compaction, Skipped>),
    /// The idle log's head was spilled: read it again.
    Spilled,
}

/// What a compaction cycle did.
#[derive(Clone, Debug, Default)]
pub struct CycleReport {
    pub compacted: Vec<Compaction>,
    pub skipped: Vec<(LogId, Skipped)>,
    /// Logs whose compaction failed this cycle (the cycle went on with the others).
    pub failed: Vec<(LogId, LogError)>,
    /// Renewals of the cycle's lease that failed (each retried a third of the lease later).
    pub keep_alive_failures: u64,
}

/// The heads a compactor saw in its last cycle, and since when, kept from one cycle to the
/// next: a log whose head has not moved for a whole cycle is idle, for `settle_after` settled.
/// Cheap to clone (shared).
#[derive(Clone, Debug, Default)]
pub struct IdleLogs(
    Arc<std::sync::Mutex<std::collections::HashMap<LogId, (i64, tokio::time::Instant)>>>,
);

impl IdleLogs {
    /// Records `log`'s head at `head_revision` (and when it was first seen there); how long it
    /// has been there, if it was there at the last look.
    fn observe(
        &self,
        log: LogId,
        head_revision: i64,
        settle_after: std::time::Duration,
    ) -> Activity {
        let now = tokio::time::Instant::now();
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match seen.get(&log) {
            Some((rev, since)) if *rev == head_revision => {
                if now.duration_since(*since) >= settle_after {
                    Activity::Settled
                } else {
                    Activity::Idle
                }
            }
            _ => {
                seen.insert(log, (head_revision, now));
                Activity::Active
            }
        }
    }

    /// Forgets logs not in `live` (deleted ones), so the map stays as large as the log set.
    fn retain(&self, live: &[LogId]) {
        let live: std::collections::HashSet<&LogId> = live.iter().collect();
        self.0.lock().unwrap_or_else(|e| e.into_inner()).retain(|l, _| live.contains(l));
    }
}

/// Chunks a compaction fetches at once.
const RUN_FETCHES: usize = 16;

/// The claims' lease of one cycle (kept alive while the cycle runs).
const CYCLE_LEASE: std::time::Duration = std::time::Duration::from_secs(30);

/// One compaction cycle over every live log (or just `only`): a lease granted for the cycle and
/// kept alive while it runs, each log claimed in turn, the lease revoked at the end. A log
/// whose compaction fails is reported in [`CycleReport::failed`] and the cycle goes on with
/// the next. `idle` carries the heads seen from one cycle to the next.
pub async fn compact_all(
    reader: LogReader,
    id: &str,
    cfg: CompactorConfig,
    only: Option<LogId>,
    idle: &IdleLogs,
) -> Result<CycleReport, LogError> {
    let meta = reader.meta().clone();
    let logs = match only {
        Some(log) => vec![log],
        None => {
            let logs = live_logs(meta.as_ref(), reader.keys()).await?;
            idle.retain(&logs);
            logs
        }
    };
    let lease = meta.lease_grant(CYCLE_LEASE).await?;
    let keep_alive_failures = Arc::new(std::sync::atomic::AtomicU64::new(0));
    // Stopped when the cycle ends or is dropped half way (a cancelled on-demand cycle): a
    // keep-alive outliving its cycle would hold the claims, and so the logs' floors and the
    // cleaner's cutoff, for as long as the process lives.
    let keep = {
        let (meta, failures) = (meta.clone(), keep_alive_failures.clone());
        AbortOnDrop(tokio::spawn(async move {
            loop {
                tokio::time::sleep(CYCLE_LEASE / 3).await;
                match meta.lease_keep_alive(lease).await {
                    Ok(_) => {}
                    // Gone: the claims went with it; later claims fail and are reported.
                    Err(metadata::MetaError::LeaseNotFound(_)) => return,
                    Err(e) => {
                        failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tracing::warn!(error = %e, "compaction lease keep-alive failed; retrying");
                    }
                }
            }
        }))
    };
    let compactor = Compactor::new(reader, id, lease, cfg).with_idle(idle.clone());
    let mut report = CycleReport::default();
    for log in logs {
        match compactor.compact_log_fully(log).await {
            Ok(Ok(c)) => report.compacted.extend(c),
            Ok(Err(s)) => report.skipped.push((log, s)),
            Err(LogError::NotFound(_)) => report.skipped.push((log, Skipped::Deleted)),
            Err(e) => {
                tracing::warn!(log = %log, error = %e, "compaction of a log failed; going on with the next");
                report.failed.push((log, e));
            }
        }
    }
    drop(keep);
    report.keep_alive_failures = keep_alive_failures.load(std::sync::atomic::Ordering::Relaxed);
    let _ = meta.lease_revoke(lease).await;
    Ok(report)
}

/// A task aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Keys one page of the live-log listing reads (keys only, every page at one revision).
const LOGS_PAGE: i64 = 1000;

/// Every log that is not deleted (each has a `wal_floor` key), in id order: a keys-only
/// listing in pages pinned to the first page's revision, so no answer grows with the cluster.
/// Claims read at most by [`claims`]: one per log being compacted now, so a handful.
pub const MAX_CLAIMS_LISTED: i64 = 1000;

/// The claims held now, by any compactor: the log and the claiming compactor's id, at most
/// [`MAX_CLAIMS_LISTED`] (the second value says whether there were more).
pub async fn claims(
    meta: &dyn MetadataStore,
    keys: &Keys,
) -> Result<(Vec<(LogId, String)>, bool), LogError> {
    let page = meta
        .range(RangeRequest::prefix(keys.compaction_tasks_prefix()).limit(MAX_CLAIMS_LISTED))
        .await?;
    let held = page
        .kvs
        .iter()
        .filter_map(|kv| {
            let log = keys.parse_compaction_task(&kv.key)?;
            Some((log, String::from_utf8_lossy(&kv.value).into_owned()))
        })
        .collect();
    Ok((held, page.more))
}

async fn live_logs(meta: &dyn MetadataStore, keys: &Keys) -> Result<Vec<LogId>, LogError> {
    let end = metadata::prefix_end(&keys.logs_prefix());
    let (mut from, mut revision, mut logs) = (keys.logs_prefix(), 0, Vec::new());
    loop {
        let mut req = RangeRequest::between(from.clone(), end.clone()).keys_only().limit(LOGS_PAGE);
        if revision != 0 {
            req = req.at_revision(revision);
        }
        let page = meta.range(req).await?;
        if revision == 0 {
            revision = page.revision;
        }
        logs.extend(page.kvs.iter().filter_map(|kv| keys.parse_wal_floor(&kv.key)));
        match page.kvs.last() {
            Some(last) if page.more => {
                from = last.key.clone();
                from.push(0);
            }
            _ => return Ok(logs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wal(bytes: u64, chunks: usize) -> Piece {
        Piece { bytes, wal_chunks: chunks, segment: false, open: true }
    }
    fn seg(bytes: u64) -> Piece {
        Piece { bytes, wal_chunks: 0, segment: true, open: bytes < 64 }
    }
    const ACTIVE: Activity = Activity::Active;
    const IDLE: Activity = Activity::Idle;

    #[test]
    fn wal_chunks_wait_for_the_threshold_unless_the_log_is_idle() {
        let pieces = [wal(4, 8), wal(4, 7)];
        assert_eq!(choose(&pieces, 64, 16, ACTIVE), None);
        assert_eq!(choose(&pieces, 64, 15, ACTIVE), Some((0, 2)));
        assert_eq!(choose(&pieces[..1], 64, 16, IDLE), None, "idle passes threshold 1 itself");
        assert_eq!(choose(&pieces[..1], 64, 1, IDLE), Some((0, 1)));
    }

    #[test]
    fn a_window_takes_pieces_until_the_target_and_stops_at_a_closed_one() {
        let pieces = [wal(30, 8), wal(30, 8), wal(30, 8), wal(30, 8)];
        assert_eq!(choose(&pieces, 64, 1, ACTIVE), Some((0, 3)), "stops once it holds 64");
        let mut closed = pieces;
        closed[1].open = false;
        assert_eq!(choose(&closed, 64, 1, ACTIVE), Some((0, 1)));
        assert_eq!(choose(&closed, 64, 9, ACTIVE), Some((2, 4)), "the first window is too small");
    }

    #[test]
    fn a_segment_is_rewritten_only_into_one_four_times_its_size() {
        // 8 + 16 < 4 × 8: the WAL is compacted alone.
        assert_eq!(choose(&[seg(8), wal(16, 16)], 64, 16, ACTIVE), Some((1, 2)));
        assert_eq!(choose(&[seg(8), wal(24, 16)], 64, 16, ACTIVE), Some((0, 2)));
        // Small segments merge among themselves; a full one is never taken.
        let pieces = [seg(64), seg(20), seg(2), seg(2), seg(2), seg(2)];
        assert_eq!(choose(&pieces, 64, 16, ACTIVE), Some((2, 6)));
        assert_eq!(choose(&pieces[..5], 64, 16, ACTIVE), None, "three of 2 make 6 < 4 × 2");
        // Segments over a quarter of the target merge once they make a full one.
        let quarters = [seg(20), seg(20), seg(20), seg(20)];
        assert_eq!(choose(&quarters[..3], 64, 16, ACTIVE), None);
        assert_eq!(choose(&quarters, 64, 16, ACTIVE), Some((0, 4)));
    }

    #[test]
    fn an_idle_logs_tail_merges_into_twice_its_largest() {
        let tail = [seg(30), seg(20), seg(10), seg(1)];
        assert_eq!(choose(&tail, 64, 1, ACTIVE), None);
        assert_eq!(choose(&tail, 64, 1, IDLE), Some((0, 4)));
        assert_eq!(choose(&[seg(40), seg(1)], 64, 1, IDLE), None, "41 < 2 × 40");
    }

    #[test]
    fn a_settled_logs_small_segments_merge_whatever_their_sizes() {
        let tail = [seg(40), seg(20), seg(1)];
        assert_eq!(choose(&tail, 64, 1, IDLE), None);
        assert_eq!(choose(&tail, 64, 1, Activity::Settled), Some((0, 3)));
        let long = [seg(40), seg(20), seg(10), seg(1)];
        assert_eq!(choose(&long, 64, 1, Activity::Settled), Some((0, 3)), "up to the target");
        assert_eq!(choose(&tail[2..], 64, 1, Activity::Settled), None, "one piece is left be");
    }

    #[tokio::test(start_paused = true)]
    async fn a_log_is_idle_after_one_unmoved_look_and_settled_after_settle_after() {
        let (idle, log, settle) =
            (IdleLogs::default(), LogId(1), std::time::Duration::from_secs(60));
        assert_eq!(idle.observe(log, 5, settle), Activity::Active);
        assert_eq!(idle.observe(log, 5, settle), Activity::Idle);
        tokio::time::advance(settle).await;
        assert_eq!(idle.observe(log, 5, settle), Activity::Settled);
        assert_eq!(idle.observe(log, 6, settle), Activity::Active, "it moved");
        assert_eq!(idle.observe(log, 6, settle), Activity::Idle, "settling starts again");
    }

    #[test]
    fn wal_pages_before_a_segment_too_large_to_take_them_are_compacted_alone() {
        let pieces = [seg(10), wal(1, 3), seg(20)];
        assert_eq!(choose(&pieces, 64, 1, IDLE), Some((1, 2)));
        assert_eq!(choose(&pieces, 64, 4, ACTIVE), None, "3 chunks < 4");
    }
}
