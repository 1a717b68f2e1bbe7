//! The compactor (ARCHITECTURE §5): rewrites a log's run of WAL chunks as one compacted segment
//! and swaps the index in ONE constant-size transaction, so readers see the old chunks or the
//! new segment, never neither. Claims each log under its lease so no log is compacted by two
//! at once; a crash or pause at any step leaves at worst an orphan segment, which the swap's
//! compares keep out of the index.
//!
//! The steps: claim `compaction/tasks/<log>` (create-only, under the lease; its create_revision
//! is the claim revision); read at one revision R the head, `start`, `wal/next_seq`, every
//! low-water mark and the index pages; pick whole pages `[a, b)` from the first WAL (not yet compacted) page at or above
//! `start`, every chunk in a WAL object below every live writer's low-water mark; read them;
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
use crate::reader::LogReader;
use crate::records::{IndexPage, Locator, LogHead, LogState};
use crate::{LogError, LogId, decode};

/// When a log is worth compacting, and how much one segment takes.
#[derive(Clone, Debug)]
pub struct CompactorConfig {
    /// Eligible WAL chunks (spilled to index pages, below every writer's low-water mark) a log
    /// needs before it is compacted.
    pub min_chunks: usize,
    /// Payload bytes one segment takes at most (whole index pages; at least one page).
    pub max_segment_bytes: u64,
}

impl Default for CompactorConfig {
    fn default() -> Self {
        CompactorConfig { min_chunks: 16, max_segment_bytes: 256 << 20 }
    }
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
    /// Bytes of the segment written.
    pub bytes: u64,
    pub object: String,
    /// The log's new `wal_floor`.
    pub wal_floor: u64,
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
    /// The segment is PUT; the swap is next.
    Written,
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

    /// Claims `log`, compacts what is eligible, releases the claim.
    pub async fn compact_log(&self, log: LogId) -> Result<Result<Compaction, Skipped>, LogError> {
        self.compact_log_with(log, None).await
    }

    /// [`Self::compact_log`] with a hook run at each [`Step`].
    pub async fn compact_log_with(
        &self,
        log: LogId,
        hook: Option<StepHook>,
    ) -> Result<Result<Compaction, Skipped>, LogError> {
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
        let done = self.compact_claimed(log, claim_rev, hook.clone()).await;
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
    ) -> Result<Result<Compaction, Skipped>, LogError> {
        // An idle log's head is spilled first; the pass after that sees the spilled page.
        match self.compact_pass(log, claim_rev, hook.clone(), false).await? {
            Pass::Done(done) => Ok(done),
            Pass::Spilled => match self.compact_pass(log, claim_rev, hook, true).await? {
                Pass::Done(done) => Ok(done),
                Pass::Spilled => Err(LogError::Internal(
                    "a log's head was spilled twice under one claim".to_owned(),
                )),
            },
        }
    }

    /// One read of the log at one revision, and what it allows: the head spilled (an idle log,
    /// unless `spilled` says this claim did so already), a floor raise, or a compaction.
    async fn compact_pass(
        &self,
        log: LogId,
        claim_rev: i64,
        hook: Option<StepHook>,
        spilled: bool,
    ) -> Result<Pass, LogError> {
        let keys = &self.keys;
        let read = Txn::new().and_then([
            TxnOp::get(RangeRequest::key(keys.head(log))),
            TxnOp::get(RangeRequest::key(keys.start(log))),
            TxnOp::get(RangeRequest::key(keys.next_seq())),
            TxnOp::get(RangeRequest::prefix(keys.low_water_prefix())),
            TxnOp::get(RangeRequest::prefix(keys.index_prefix(log))),
            TxnOp::get(RangeRequest::key(keys.wal_floor(log))),
        ]);
        let resp = self.meta.txn(read).await?;
        let r = resp.revision;
        let gets: Vec<metadata::RangeResponse> = resp
            .results
            .into_iter()
            .map(|o| match o {
                OpResult::Get(g) => Ok(g),
                _ => Err(LogError::Internal("compaction read answered the wrong shape".to_owned())),
            })
            .collect::<Result<_, _>>()?;
        let [head, start, next_seq, marks, pages, floor_now] =
            <[_; 6]>::try_from(gets).map_err(|_| {
                LogError::Internal("compaction read answered the wrong shape".to_owned())
            })?;
        let Some(head_kv) = head.kvs.first() else { return Err(LogError::NotFound(log)) };
        let head: LogHead = decode("log head", &head_kv.value)?;
        // Idle: the head is where this compactor saw it a cycle ago (or it was just spilled).
        let idle = self.idle.observe(log, head_kv.mod_revision) || spilled;
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
            if crate::mutations::on(&crate::mutations::IGNORE_LOW_WATER) {
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
        // Chunks wholly below the start are trimmed: no floor counts them.
        let live = |l: &&Locator| l.in_wal() && l.end_offset() > start;

        // [a, b): whole pages from the first at or above `start`, every chunk eligible.
        let (mut chosen, mut bytes) = (Vec::new(), 0u64);
        for (i, (_, _, page)) in listed.iter().enumerate() {
            // Wholly below the start, or compacted already (segments are not merged again yet).
            // A page a trim cut through is compacted whole: its chunks above the start hold the
            // floor, and skipping it held the cleaner's cutoff there for good.
            let below = page.locators.iter().all(|l| l.end_offset() <= start);
            if below || (chosen.is_empty() && page.locators.iter().all(|l| !l.in_wal())) {
                continue;
            }
            let page_eligible = page.locators.iter().all(eligible);
            if !page_eligible || (!chosen.is_empty() && bytes >= self.cfg.max_segment_bytes) {
                break;
            }
            bytes += page.locators.iter().map(|l| l.payload_bytes).sum::<u64>();
            chosen.push(i);
        }
        // Chunks wholly below the start (in a page a trim cut through) are left out: their
        // objects may be reclaimed already.
        let chunks: Vec<&Locator> = chosen
            .iter()
            .flat_map(|i| listed[*i].2.locators.iter())
            .filter(|l| l.end_offset() > start)
            .collect();
        // An idle log is compacted however few its chunks: nothing else ever would be.
        let threshold = if idle { 1 } else { self.cfg.min_chunks.max(1) };
        if chunks.len() < threshold {
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
            return Ok(Pass::Done(Err(Skipped::TooFew { eligible: chunks.len() })));
        }
        let (Some(first), Some(last)) = (chunks.first(), chunks.last()) else {
            return Ok(Pass::Done(Err(Skipped::TooFew { eligible: 0 })));
        };
        let (a, b) = (first.first_offset, last.end_offset());
        // The first page's key: `a` unless a trim cut through that page (then below `a`).
        let (page_a, a_kv) = (listed[chosen[0]].0, listed[chosen[0]].1);

        // The segment: the chunks' entries, in order, as one chunk of one log.
        let mut builder = wal::ObjectBuilder::with_capacity(
            wal::ObjectKind::Segment,
            chunks.iter().map(|l| l.byte_len as usize).sum(),
        );
        builder.begin_chunk(log.0);
        let (mut records, mut entries) = (0u64, 0u32);
        // One ranged GET per chunk, several at once and taken in order: a log written in many
        // small flushes has thousands of chunks, and one GET at a time made a cycle take
        // minutes. The segment's size bounds what they hold together. Each fetch owns what it
        // reads with (a future borrowing the chunk list is not Send for every lifetime the
        // role's task needs).
        let fetches: Vec<_> = chunks
            .iter()
            .map(|loc| {
                let (reader, loc) = (self.reader.clone(), Locator::clone(loc));
                async move { reader.run_entries(log, &loc).await }
            })
            .collect();
        let mut runs = futures::stream::iter(fetches).buffered(RUN_FETCHES);
        while let Some(run) = runs.next().await {
            for e in run? {
                builder.push_entry(e.header.record_count, e.header.timestamp, &e.payload)?;
                records += u64::from(e.header.record_count);
                entries += 1;
            }
        }
        let (object, metas) = builder.finish()?;
        let meta = metas.first().ok_or_else(|| LogError::Internal("empty segment".to_owned()))?;
        if records != b - a {
            return Err(LogError::Corrupt(format!(
                "log {log}: chunks [{a}, {b}) hold {records} records"
            )));
        }
        let locator = Locator {
            first_offset: a,
            record_count: records,
            entry_count: entries,
            wal_seq: 0,
            byte_start: meta.byte_start,
            byte_len: meta.byte_len,
            max_timestamp: last.max_timestamp,
            cumulative_before: first.cumulative_before,
            payload_bytes: chunks.iter().map(|l| l.payload_bytes).sum(),
            compacted_claim: u64::try_from(claim_rev)
                .map_err(|_| LogError::Internal("negative claim revision".to_owned()))?,
        };
        let path = locator.object(log);
        let size = object.len() as u64;
        objstore::put_create_only(self.objects.as_ref(), &path, object).await?;
        if let Some(h) = hook {
            h(Step::Written).await;
        }

        // The floor: the log's WAL chunks left (other pages, the head's recent), next_seq, marks.
        let compacted: std::collections::HashSet<usize> = chosen.iter().copied().collect();
        let left = listed
            .iter()
            .enumerate()
            .filter(|(i, _)| !compacted.contains(i))
            .flat_map(|(_, (_, _, p))| p.locators.iter())
            .chain(head.recent.iter())
            .filter(live)
            .map(|l| l.wal_seq);
        let floor = left.fold(min_mark, u64::min);

        let index_page_a = keys.index_page(log, page_a);
        let index_a = keys.index_page(log, a);
        let mut after_a = index_a.clone();
        after_a.push(0);
        let index_b = keys.index_page(log, b);
        let mut ops = Vec::with_capacity(4);
        if page_a < a {
            // The page a trim cut through goes; the segment's page is keyed at its first
            // offset, as every page is.
            ops.push(TxnOp::delete(KeyRange::between(index_page_a.clone(), index_a.clone())));
        }
        ops.extend([
            TxnOp::put(index_a, IndexPage { locators: vec![locator] }.encode_to_vec()),
            TxnOp::delete(KeyRange::between(after_a, index_b.clone())),
            TxnOp::put(keys.wal_floor(log), floor.to_string()),
        ]);
        let swap = Txn::new()
            .when([
                Compare::create_revision(keys.compaction_task(log), CompareOp::Equal, claim_rev),
                Compare::mod_revision(keys.start(log), CompareOp::Equal, start_kv.mod_revision),
                Compare::mod_revision(index_page_a.clone(), CompareOp::Equal, a_kv.mod_revision),
                Compare::mod_revision(index_page_a, CompareOp::Less, r + 1).with_range_end(index_b),
            ])
            .and_then(ops);
        if !self.meta.txn(swap).await?.succeeded {
            return Ok(Pass::Done(Err(Skipped::Raced { orphan: path.to_string() })));
        }
        Ok(Pass::Done(Ok(Compaction {
            log,
            first_offset: a,
            end_offset: b,
            chunks: chunks.len(),
            bytes: size,
            object: path.to_string(),
            wal_floor: floor,
        })))
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

/// The heads a compactor saw in its last cycle, kept from one cycle to the next: a log whose
/// head has not moved for a whole cycle is idle. Cheap to clone (shared).
#[derive(Clone, Debug, Default)]
pub struct IdleLogs(Arc<std::sync::Mutex<std::collections::HashMap<LogId, i64>>>);

impl IdleLogs {
    /// Records `log`'s head at `head_revision`; true if it was there at the last look.
    fn observe(&self, log: LogId, head_revision: i64) -> bool {
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        seen.insert(log, head_revision) == Some(head_revision)
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
        match compactor.compact_log(log).await {
            Ok(Ok(c)) => report.compacted.push(c),
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
