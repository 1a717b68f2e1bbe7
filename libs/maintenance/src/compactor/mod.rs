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

mod build;
pub mod clean;
mod plan;
mod swap;

use std::sync::Arc;

use metadata::{
    Compare, CompareOp, KeyRange, LeaseId, MetadataStore, OpResult, RangeRequest, Txn, TxnOp,
};
use objstore::object_store::ObjectStore;
use prost::Message;

pub use clean::{Cleanup, CompactedLogs};
pub use plan::{
    Activity, IDLE_MERGE_GROWTH, LakeView, LogView, MERGE_GROWTH, Page, Piece, Plan, Policy,
    Rewrite, choose, plan,
};

use crate::lakes::{self, LakeLogs};
use logstore::LogReader;
use logstore::keys::{Keys, parse_u64};
use logstore::records::{IndexPage, LogHead, LogState};
use logstore::{Clock, LogError, LogId, decode};

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
    /// The time a lake table's snapshot is stamped with, and key compaction's now.
    pub clock: Arc<dyn Clock>,
    /// The logs of compacted streams (`cleanup.policy=compact`), each key compacted after its
    /// plain compaction ([`clean`]).
    pub compacted: Arc<clean::CompactedLogs>,
    /// Bytes of key compaction's key map ([`clean::KeyMap`]; Kafka's
    /// `log.cleaner.dedupe.buffer.size`): a pass maps at most this many keys' worth.
    pub key_map_bytes: usize,
}

impl Default for CompactorConfig {
    fn default() -> Self {
        CompactorConfig {
            min_chunks: 16,
            target_segment_bytes: 64 << 20,
            settle_after: DEFAULT_SETTLE_AFTER,
            lakes: Default::default(),
            clock: Arc::new(logstore::SystemClock),
            compacted: Default::default(),
            key_map_bytes: clean::DEFAULT_KEY_MAP_BYTES,
        }
    }
}

/// [`CompactorConfig::settle_after`] by default.
pub const DEFAULT_SETTLE_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// Rewrites one claim does at most before letting the cycle go on to the next log.
pub const MAX_REWRITES_PER_CLAIM: usize = 64;

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
        let Some(claim_rev) = self.claim(log).await? else {
            return Ok(Err(Skipped::Claimed));
        };
        if let Some(h) = &hook {
            h(Step::Claimed).await;
        }
        let done = self.compact_claimed(log, claim_rev, hook.clone(), max.max(1)).await;
        if let (Ok(Ok(_)), Some(h)) = (&done, &hook) {
            h(Step::Swapped).await;
        }
        let released = self.release(log, claim_rev).await;
        let done = done?;
        released?;
        Ok(done)
    }

    /// Claims `log` for this compactor (create-only, under its lease): the claim's revision,
    /// or `None` when another holds it.
    async fn claim(&self, log: LogId) -> Result<Option<i64>, LogError> {
        let claim = self.keys.compaction_task(log);
        let resp = self
            .meta
            .txn(
                Txn::new()
                    .when([Compare::create_revision(claim.clone(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put_with_lease(claim, self.id.clone(), self.lease)]),
            )
            .await?;
        Ok(resp.succeeded.then_some(resp.revision))
    }

    /// Releases this compactor's claim of `log` made at `claim_rev`, only if it is still its
    /// own (an expired lease may have let another take it).
    async fn release(&self, log: LogId, claim_rev: i64) -> Result<(), LogError> {
        let claim = self.keys.compaction_task(log);
        let release = Txn::new()
            .when([Compare::create_revision(claim.clone(), CompareOp::Equal, claim_rev)])
            .and_then([TxnOp::delete(KeyRange::key(claim))]);
        self.meta.txn(release).await?;
        Ok(())
    }

    /// Claims `log` and makes one key compaction pass over it as `cleanup` says (nothing
    /// else: its chunks are compacted by [`Self::compact_log`]), then releases it.
    pub async fn clean_log(
        &self,
        log: LogId,
        cleanup: &Cleanup,
    ) -> Result<Result<clean::Cleaning, Skipped>, LogError> {
        let Some(claim_rev) = self.claim(log).await? else {
            return Ok(Err(Skipped::Claimed));
        };
        let done = self.clean(log, claim_rev, cleanup).await;
        let released = self.release(log, claim_rev).await;
        let done = done?;
        released?;
        Ok(Ok(done))
    }

    async fn compact_claimed(
        &self,
        log: LogId,
        claim_rev: i64,
        hook: Option<StepHook>,
        max: usize,
    ) -> Result<Result<Vec<Compaction>, Skipped>, LogError> {
        let plain = self.compact_plainly(log, claim_rev, hook, max).await?;
        // A compacted log's keys, once its chunks are segments.
        let Some(cleanup) = self.cfg.compacted.get(&log).copied() else { return Ok(plain) };
        let cleaning = self.clean(log, claim_rev, &cleanup).await?;
        if cleaning.compactions.is_empty() {
            return Ok(plain);
        }
        tracing::info!(
            %log,
            keys = cleaning.keys,
            dropped = cleaning.dropped,
            bytes_in = cleaning.bytes_in,
            bytes_out = cleaning.bytes_out,
            "key compaction"
        );
        let mut done = plain.unwrap_or_default();
        done.extend(cleaning.compactions);
        Ok(Ok(done))
    }

    /// Up to `max` plain rewrites of `log` under the claim.
    async fn compact_plainly(
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
        let Some(view) = self.read(log, claim_rev).await? else {
            return Ok(Pass::Done(Err(Skipped::Deleted)));
        };
        // Idle: the head is where this compactor saw it a cycle ago (or it was just spilled).
        // Every pass records the head it saw, so a spilled head counts as unmoved next cycle.
        let seen = self.idle.observe(log, view.head_revision, self.cfg.settle_after);
        let activity = *activity.get_or_insert(seen);
        let activity = if spilled { activity.max(Activity::Idle) } else { activity };
        let policy = Policy {
            min_chunks: self.cfg.min_chunks,
            target_segment_bytes: self.cfg.target_segment_bytes,
        };
        match plan(&view, &policy, activity, spilled) {
            Plan::Spill { first } => self.spill(&view, first).await,
            Plan::Nothing { eligible, raise_floor } => {
                if let Some(floor) = raise_floor {
                    self.raise_floor(&view, floor).await?;
                }
                Ok(Pass::Done(Err(Skipped::TooFew { eligible })))
            }
            Plan::Rewrite(rw) => {
                let built = build::build(
                    &self.reader,
                    &self.cfg.lakes,
                    log,
                    view.lake.as_ref(),
                    &rw,
                    claim_rev,
                )
                .await?;
                let path = built.locator.object(log);
                objstore::put_create_only(self.objects.as_ref(), &path, built.object.clone())
                    .await?;
                if let Some(h) = &hook {
                    h(Step::Written).await;
                }
                self.swap(&view, &rw, built, path, hook).await
            }
        }
    }

    /// The log read at one revision under the claim at `claim`: its head, start, marks, index
    /// pages and floor (and a lake log's table); `None` if it is deleted.
    async fn read(&self, log: LogId, claim: i64) -> Result<Option<LogView>, LogError> {
        let keys = &self.keys;
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
        let shape = || LogError::Internal("compaction read answered the wrong shape".to_owned());
        let mut gets: Vec<metadata::RangeResponse> = resp
            .results
            .into_iter()
            .map(|o| match o {
                OpResult::Get(g) => Ok(g),
                _ => Err(shape()),
            })
            .collect::<Result<_, _>>()?;
        let table = match table_key {
            Some(_) => gets.pop().and_then(|g| g.kvs.into_iter().next()),
            None => None,
        };
        let [head, start, next_seq, marks, pages, floor] =
            <[_; 6]>::try_from(gets).map_err(|_| shape())?;
        let Some(head_kv) = head.kvs.first() else { return Err(LogError::NotFound(log)) };
        let head: LogHead = decode("log head", &head_kv.value)?;
        let Some(start_kv) = start.kvs.first() else { return Ok(None) };
        if head.log_state() == LogState::Deleted {
            return Ok(None);
        }
        let seq =
            |v: &[u8]| parse_u64(v).ok_or_else(|| LogError::Corrupt("a WAL sequence".to_owned()));
        let mut min_mark = next_seq.kvs.first().map_or(Ok(0), |kv| seq(&kv.value))?;
        for kv in &marks.kvs {
            if logstore::mutations::on(logstore::mutations::Mutation::IgnoreLowWater) {
                break;
            }
            min_mark = min_mark.min(seq(&kv.value)?);
        }
        let mut listed = Vec::new();
        for kv in &pages.kvs {
            let Some(first) = keys.parse_index_page(log, &kv.key) else { continue };
            let page = decode("index page", &kv.value)?;
            listed.push(Page { first, revision: kv.mod_revision, page });
        }
        let floor = match floor.kvs.first() {
            Some(kv) => Some((seq(&kv.value)?, kv.mod_revision)),
            None => None,
        };
        let lake = match lake {
            Some(l) => Some(self.lake_view(log, l, table, &listed)?),
            None => None,
        };
        Ok(Some(LogView {
            log,
            revision: resp.revision,
            claim,
            head,
            head_revision: head_kv.mod_revision,
            start: seq(&start_kv.value)?,
            start_revision: start_kv.mod_revision,
            min_mark,
            pages: listed,
            floor,
            lake,
        }))
    }

    /// A lake log's table as read: whether it takes more files, and which of the log's lake
    /// segments are its files now.
    fn lake_view(
        &self,
        log: LogId,
        l: lakes::LakeLog,
        table: Option<metadata::KeyValue>,
        pages: &[Page],
    ) -> Result<LakeView, LogError> {
        // A table whose state outgrew its record (manifests are not merged yet) takes no more
        // segments: the log's compaction goes on with plain ones (a failing swap would hold the
        // cleaner's cutoff for the whole cluster).
        let full = table.as_ref().is_some_and(|kv| kv.value.len() > lakes::MAX_TABLE_STATE);
        let files: std::collections::HashSet<String> = match &table {
            Some(kv) if !full => {
                lakes::decode_table(&kv.value)?.current_files().map(str::to_owned).collect()
            }
            _ => Default::default(),
        };
        let current = pages
            .iter()
            .flat_map(|p| p.page.locators.iter())
            .filter(|loc| {
                loc.lake.is_some() && files.contains(&self.cfg.lakes.uri(&loc.object(log)))
            })
            .map(|loc| loc.first_offset)
            .collect();
        Ok(LakeView { log: l, table, full, current })
    }

    /// Moves an idle log's `recent` chunks to an index page of their own at `first`, if its
    /// head has not moved since the view (a writer racing it re-bases on the moved head).
    async fn spill(&self, view: &LogView, first: u64) -> Result<Pass, LogError> {
        let (keys, log) = (&self.keys, view.log);
        let mut emptied = view.head.clone();
        let page = IndexPage { locators: std::mem::take(&mut emptied.recent) };
        let spill = Txn::new()
            .when([
                Compare::mod_revision(keys.head(log), CompareOp::Equal, view.head_revision),
                Compare::create_revision(keys.compaction_task(log), CompareOp::Equal, view.claim),
                Compare::create_revision(keys.index_page(log, first), CompareOp::Equal, 0),
            ])
            .and_then([
                TxnOp::put(keys.index_page(log, first), page.encode_to_vec()),
                TxnOp::put(keys.head(log), emptied.encode_to_vec()),
            ]);
        if !self.meta.txn(spill).await?.succeeded {
            return Ok(Pass::Done(Err(Skipped::Appended)));
        }
        Ok(Pass::Spilled)
    }

    /// Raises the log's floor to `floor`, unless it changed since the view (a swap's is newer).
    async fn raise_floor(&self, view: &LogView, floor: u64) -> Result<(), LogError> {
        let (keys, log) = (&self.keys, view.log);
        let Some((_, revision)) = view.floor else { return Ok(()) };
        let raise = Txn::new()
            .when([
                Compare::mod_revision(keys.wal_floor(log), CompareOp::Equal, revision),
                Compare::create_revision(keys.compaction_task(log), CompareOp::Equal, view.claim),
            ])
            .and_then([TxnOp::put(keys.wal_floor(log), floor.to_string())]);
        self.meta.txn(raise).await?;
        Ok(())
    }
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
    Arc<parking_lot::Mutex<std::collections::HashMap<LogId, (i64, tokio::time::Instant)>>>,
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
        let mut seen = self.0.lock();
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
        self.0.lock().retain(|l, _| live.contains(l));
    }
}

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
