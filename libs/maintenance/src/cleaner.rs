//! The WAL cleaner (ARCHITECTURE §5), the only role that deletes objects. Each cycle reads, at
//! ONE metadata revision, `wal/next_seq`, every writer's low-water mark and every live log's
//! `wal_floor`; their minimum is the cutoff. A WAL object below the cutoff holds no chunk a
//! live log's index still references uncompacted and none a live writer may still commit, so
//! once it is older than the grace period (readers holding an old location re-resolve) it is
//! deleted: objects of compacted ranges, of deleted logs, and uploads never committed alike.
//! Each cycle also compacts the metadata store's history to the newest revision seen at least
//! `history` ago (etcd hygiene).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

// Tokio's clock (std's outside tests): virtual under the simulation's paused runtime.
use tokio::time::Instant;

use futures::{StreamExt, TryStreamExt};
use metadata::{MetaError, MetadataStore, OpResult, RangeRequest, Txn, TxnOp};
use objstore::object_store::ObjectStore;

use logstore::keys::{Keys, parse_u64};
use logstore::{Clock, LogError, LogId};

/// Keys a paginated read of the floors fetches at once (every page at the same revision).
const FLOOR_PAGE: i64 = 1000;

/// Objects deleted in one batch (one S3 DeleteObjects call holds up to 1000).
const DELETE_BATCH: usize = 1000;

/// Compacted segments checked in one metadata transaction (two reads each).
const SEGMENT_CHECKS: usize = 50;

/// What holds the cutoff where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// No sequence at or above `wal/next_seq` has been handed out.
    NextSeq,
    /// A live writer may still commit from its low-water mark.
    Writer(String),
    /// A live log has an uncompacted chunk at or above its `wal_floor`.
    Log(LogId),
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Holder::NextSeq => write!(f, "wal/next_seq"),
            Holder::Writer(w) => write!(f, "writer {w} (low-water mark)"),
            Holder::Log(l) => write!(f, "log {l} (wal_floor)"),
        }
    }
}

/// The reclamation cutoff and its inputs, all read at one metadata revision.
#[derive(Clone, Debug)]
pub struct Cutoff {
    pub revision: i64,
    /// WAL objects with a lower sequence may be deleted (after the grace period).
    pub cutoff: u64,
    /// Every input: who, and the sequence it allows reclamation up to. Lowest first.
    pub inputs: Vec<(Holder, u64)>,
}

impl Cutoff {
    /// WAL sequences handed out (in blocks, to writers) and not reclaimable yet: the next
    /// unallocated sequence minus the cutoff.
    pub fn lag(&self) -> u64 {
        let next = self.inputs.iter().find(|(h, _)| matches!(h, Holder::NextSeq));
        next.map_or(0, |(_, s)| s.saturating_sub(self.cutoff))
    }

    /// The inputs at the cutoff, and how far the cutoff would rise without them (`None`: it
    /// would not be bounded by anything else).
    pub fn held_by(&self) -> (Vec<&Holder>, Option<u64>) {
        let at: Vec<&Holder> =
            self.inputs.iter().filter(|(_, s)| *s == self.cutoff).map(|(h, _)| h).collect();
        let next = self.inputs.iter().map(|(_, s)| *s).find(|s| *s > self.cutoff);
        (at, next.map(|n| n - self.cutoff))
    }
}

/// Reads the cutoff at one revision: `wal/next_seq` and the marks in one transaction, then
/// every live log's floor in pages pinned to that transaction's revision.
pub async fn read_cutoff(meta: &dyn MetadataStore, keys: &Keys) -> Result<Cutoff, LogError> {
    let resp = meta
        .txn(Txn::new().and_then([
            TxnOp::get(RangeRequest::key(keys.next_seq())),
            TxnOp::get(RangeRequest::prefix(keys.low_water_prefix())),
        ]))
        .await?;
    let revision = resp.revision;
    let mut inputs = Vec::new();
    let mut results = resp.results.into_iter();
    let (Some(OpResult::Get(next)), Some(OpResult::Get(marks))) = (results.next(), results.next())
    else {
        return Err(LogError::Internal("cutoff read answered the wrong shape".to_owned()));
    };
    let seq = |v: &[u8], what: &str| {
        parse_u64(v).ok_or_else(|| LogError::Corrupt(format!("{what} is not a sequence")))
    };
    inputs
        .push((Holder::NextSeq, next.kvs.first().map_or(Ok(0), |kv| seq(&kv.value, "next_seq"))?));
    let mark_prefix = keys.low_water_prefix();
    for kv in marks.kvs {
        if logstore::mutations::on(logstore::mutations::Mutation::IgnoreLowWater) {
            continue;
        }
        let writer = String::from_utf8_lossy(&kv.key[mark_prefix.len()..]).into_owned();
        inputs.push((Holder::Writer(writer), seq(&kv.value, "a low-water mark")?));
    }
    let end = metadata::prefix_end(&keys.logs_prefix());
    let mut from = keys.logs_prefix();
    loop {
        let page = meta
            .range(
                RangeRequest::between(from.clone(), end.clone())
                    .limit(FLOOR_PAGE)
                    .at_revision(revision),
            )
            .await?;
        for kv in &page.kvs {
            if let Some(log) = keys.parse_wal_floor(&kv.key) {
                inputs.push((Holder::Log(log), seq(&kv.value, "a wal_floor")?));
            }
        }
        match page.kvs.last() {
            Some(last) if page.more => {
                from = last.key.clone();
                from.push(0);
            }
            _ => break,
        }
    }
    inputs.sort_by_key(|(_, s)| *s);
    let cutoff = inputs.first().map_or(0, |(_, s)| *s);
    Ok(Cutoff { revision, cutoff, inputs })
}

/// What one cleaning cycle did.
#[derive(Clone, Debug)]
pub struct CleanReport {
    pub cutoff: Cutoff,
    /// WAL objects deleted, and their bytes.
    pub deleted: u64,
    pub deleted_bytes: u64,
    /// Objects below the cutoff kept because they are younger than the grace period.
    pub young: u64,
    /// WAL objects at or above the cutoff (kept).
    pub above_cutoff: u64,
    /// Compacted segments deleted (no live index record references them and their claim is
    /// gone), and their bytes.
    pub segments_deleted: u64,
    pub segments_deleted_bytes: u64,
    /// Per-slot state checkpoints deleted: older than the grace period and named by no
    /// pointer (left by a crash between their PUT and their pointer's move, or by a deleted log).
    pub checkpoints_deleted: u64,
    /// The revision the metadata history was compacted to this cycle, if it was.
    pub history_compacted_to: Option<i64>,
}

/// Where a WAL object stands against a cutoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WalClass {
    /// At or above the cutoff.
    Kept,
    /// Below it, inside the grace period.
    Young,
    /// Below it and past the grace period: a cycle deletes it.
    Reclaimable,
}

/// `m`'s class, `None` if it is no WAL object.
fn classify(
    m: &objstore::object_store::ObjectMeta,
    cutoff: u64,
    now_ms: i64,
    grace_ms: i64,
) -> Option<WalClass> {
    let seq = objstore::keys::parse_wal_object(&m.location)?;
    Some(if seq >= cutoff {
        WalClass::Kept
    } else if now_ms.saturating_sub(m.last_modified.timestamp_millis()) < grace_ms {
        WalClass::Young
    } else {
        WalClass::Reclaimable
    })
}

/// Objects and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub objects: u64,
    pub bytes: u64,
}

impl Tally {
    fn add(&mut self, bytes: u64) {
        self.objects += 1;
        self.bytes += bytes;
    }
}

/// The WAL objects against a cutoff, listed and deleted nothing: what a cycle with this
/// grace period would delete now, what it would keep because it is young, what is above.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Survey {
    pub reclaimable: Tally,
    pub young: Tally,
    pub kept: Tally,
}

/// Surveys the WAL objects against `cutoff` (a streamed listing: memory stays constant).
pub async fn survey(
    objects: &dyn ObjectStore,
    cutoff: u64,
    grace: Duration,
    now_ms: i64,
) -> Result<Survey, LogError> {
    let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
    let mut listed = objects.list(Some(&objstore::Path::from(objstore::keys::WAL_DIR)));
    let mut s = Survey::default();
    while let Some(m) = listed.try_next().await? {
        match classify(&m, cutoff, now_ms, grace_ms) {
            None => {}
            Some(WalClass::Kept) => s.kept.add(m.size),
            Some(WalClass::Young) => s.young.add(m.size),
            Some(WalClass::Reclaimable) => s.reclaimable.add(m.size),
        }
    }
    Ok(s)
}

/// A test hook of the cleaner's ([`Cleaner::after_cutoff`]).
#[derive(Clone)]
pub struct Hook(pub Arc<dyn Fn() -> futures::future::BoxFuture<'static, ()> + Send + Sync>);

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("cleaner::Hook")
    }
}

/// The cleaner: [`Cleaner::cycle`] once per interval. Keeps the revisions it saw, to compact
/// the metadata history to the newest one at least `history` old.
#[derive(Debug)]
pub struct Cleaner {
    meta: Arc<dyn MetadataStore>,
    objects: Arc<dyn ObjectStore>,
    keys: Keys,
    clock: Arc<dyn Clock>,
    /// Objects below the cutoff are deleted only once at least this old.
    pub grace: Duration,
    /// Metadata history kept (etcd hygiene); `None` never compacts it.
    pub history: Option<Duration>,
    /// A test hook run between the cutoff read and the first delete (the simulation pauses or
    /// crashes the cleaner there); `None` in every role.
    pub after_cutoff: Option<Hook>,
    seen: VecDeque<(Instant, i64)>,
}

impl Cleaner {
    pub fn new(
        meta: Arc<dyn MetadataStore>,
        objects: Arc<dyn ObjectStore>,
        cluster: &str,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Cleaner {
            meta,
            objects,
            keys: Keys::new(cluster),
            clock,
            grace: Duration::from_secs(600),
            history: Some(Duration::from_secs(600)),
            after_cutoff: None,
            seen: VecDeque::new(),
        }
    }

    /// One cycle: the cutoff, the WAL objects below it and older than the grace period
    /// deleted, then the metadata history compacted.
    /// The listing is streamed and deletions go in batches, so memory stays bounded by a
    /// batch however many objects the store holds.
    pub async fn cycle(&mut self) -> Result<CleanReport, LogError> {
        let cutoff = read_cutoff(self.meta.as_ref(), &self.keys).await?;
        if let Some(h) = &self.after_cutoff {
            (h.0)().await;
        }
        let now_ms = self.clock.now_ms();
        let grace_ms = i64::try_from(self.grace.as_millis()).unwrap_or(i64::MAX);
        let mut listed = self.objects.list(Some(&objstore::Path::from(objstore::keys::WAL_DIR)));
        let mut doomed = Vec::with_capacity(DELETE_BATCH);
        let mut report = CleanReport {
            cutoff,
            deleted: 0,
            deleted_bytes: 0,
            young: 0,
            above_cutoff: 0,
            segments_deleted: 0,
            segments_deleted_bytes: 0,
            checkpoints_deleted: 0,
            history_compacted_to: None,
        };
        while let Some(m) = listed.try_next().await? {
            match classify(&m, report.cutoff.cutoff, now_ms, grace_ms) {
                None => {}
                Some(WalClass::Kept) => report.above_cutoff += 1,
                Some(WalClass::Young) => report.young += 1,
                Some(WalClass::Reclaimable) => {
                    doomed.push(m);
                    if doomed.len() == DELETE_BATCH {
                        let (n, bytes) = self.delete_batch(&mut doomed).await?;
                        report.deleted += n;
                        report.deleted_bytes += bytes;
                    }
                }
            }
        }
        let (n, bytes) = self.delete_batch(&mut doomed).await?;
        report.deleted += n;
        report.deleted_bytes += bytes;
        self.clean_segments(&mut report, now_ms, grace_ms).await?;
        self.clean_checkpoints(&mut report, now_ms, grace_ms).await?;
        report.history_compacted_to = self.compact_history(report.cutoff.revision).await?;
        Ok(report)
    }

    /// Deletes compacted segments older than the grace period that no index record references
    /// and no live claim owns, both read in one transaction after the listing (ARCHITECTURE
    /// §5): a segment listed is either swapped in, still claimed (the claim precedes the PUT),
    /// or an orphan.
    async fn clean_segments(
        &self,
        report: &mut CleanReport,
        now_ms: i64,
        grace_ms: i64,
    ) -> Result<(), LogError> {
        let mut listed =
            self.objects.list(Some(&objstore::Path::from(objstore::keys::COMPACTED_DIR)));
        let mut old = Vec::with_capacity(SEGMENT_CHECKS);
        while let Some(m) = listed.try_next().await? {
            if objstore::keys::parse_compacted_object(&m.location).is_none()
                || now_ms.saturating_sub(m.last_modified.timestamp_millis()) < grace_ms
            {
                continue;
            }
            old.push(m);
            if old.len() == SEGMENT_CHECKS {
                self.delete_orphans(&mut old, report).await?;
            }
        }
        self.delete_orphans(&mut old, report).await
    }

    /// Deletes per-slot state checkpoints (`state/`) older than the grace period that no
    /// pointer names, the pointers read after the listing: a checkpoint is PUT before its
    /// pointer moves to it, and the grace period covers that step.
    async fn clean_checkpoints(
        &self,
        report: &mut CleanReport,
        now_ms: i64,
        grace_ms: i64,
    ) -> Result<(), LogError> {
        let mut listed = self.objects.list(Some(&objstore::Path::from(objstore::keys::STATE_DIR)));
        let mut old = Vec::with_capacity(SEGMENT_CHECKS);
        while let Some(m) = listed.try_next().await? {
            if objstore::keys::parse_state_object(&m.location).is_none()
                || now_ms.saturating_sub(m.last_modified.timestamp_millis()) < grace_ms
            {
                continue;
            }
            old.push(m);
            if old.len() == SEGMENT_CHECKS {
                report.checkpoints_deleted += self.delete_unnamed(&mut old).await?;
            }
        }
        report.checkpoints_deleted += self.delete_unnamed(&mut old).await?;
        Ok(())
    }

    /// Deletes the checkpoints of `old` (emptying it) that no pointer of their log names.
    async fn delete_unnamed(
        &self,
        old: &mut Vec<objstore::object_store::ObjectMeta>,
    ) -> Result<u64, LogError> {
        if old.is_empty() {
            return Ok(0);
        }
        let mut logs: Vec<u64> =
            old.iter().filter_map(|m| objstore::keys::parse_state_object(&m.location)).collect();
        logs.sort_unstable();
        logs.dedup();
        let reads = logs
            .iter()
            .map(|l| TxnOp::get(RangeRequest::prefix(self.keys.producers_prefix(LogId(*l)))));
        let resp = self.meta.txn(Txn::new().and_then(reads)).await?;
        let mut named = std::collections::HashSet::new();
        for r in &resp.results {
            if let OpResult::Get(g) = r {
                for kv in &g.kvs {
                    // `<upto> <epoch> <object key>`
                    if let Some(object) =
                        std::str::from_utf8(&kv.value).ok().and_then(|v| v.splitn(3, ' ').nth(2))
                    {
                        named.insert(object.to_owned());
                    }
                }
            }
        }
        let mut unnamed: Vec<_> =
            old.drain(..).filter(|m| !named.contains(m.location.as_ref())).collect();
        Ok(self.delete_batch(&mut unnamed).await?.0)
    }

    /// Deletes the orphans among `old` (emptying it), counting them in `report`.
    async fn delete_orphans(
        &self,
        old: &mut Vec<objstore::object_store::ObjectMeta>,
        report: &mut CleanReport,
    ) -> Result<(), LogError> {
        if old.is_empty() {
            return Ok(());
        }
        let mut orphans = self.orphans(std::mem::take(old)).await?;
        let (n, bytes) = self.delete_batch(&mut orphans).await?;
        report.segments_deleted += n;
        report.segments_deleted_bytes += bytes;
        Ok(())
    }

    /// The segments of `listed` that no index record references and no live claim owns, read
    /// in one transaction (two reads a segment).
    async fn orphans(
        &self,
        listed: Vec<objstore::object_store::ObjectMeta>,
    ) -> Result<Vec<objstore::object_store::ObjectMeta>, LogError> {
        let keys: Vec<_> = listed
            .iter()
            .filter_map(|m| objstore::keys::parse_compacted_object(&m.location))
            .collect();
        let reads = keys.iter().flat_map(|k| {
            let log = LogId(k.log);
            [
                TxnOp::get(RangeRequest::key(self.keys.index_page(log, k.first_offset))),
                TxnOp::get(RangeRequest::key(self.keys.compaction_task(log))),
            ]
        });
        let resp = self.meta.txn(Txn::new().and_then(reads)).await?;
        if resp.results.len() != keys.len() * 2 {
            return Err(LogError::Internal("segment check answered the wrong shape".to_owned()));
        }
        let mut orphans = Vec::new();
        for ((m, k), pair) in listed.into_iter().zip(&keys).zip(resp.results.chunks(2)) {
            let [OpResult::Get(page), OpResult::Get(claim)] = pair else {
                return Err(LogError::Internal(
                    "segment check answered the wrong shape".to_owned(),
                ));
            };
            let referenced = match page.kvs.first() {
                Some(kv) => {
                    logstore::decode::<logstore::records::IndexPage>("index page", &kv.value)?
                        .locators
                        .iter()
                        .any(|l| {
                            l.compacted_claim == k.claim_revision
                                && l.first_offset == k.first_offset
                        })
                }
                None => false,
            };
            let claimed = claim
                .kvs
                .first()
                .is_some_and(|kv| u64::try_from(kv.create_revision) == Ok(k.claim_revision));
            if !referenced && !claimed {
                orphans.push(m);
            }
        }
        self.keep_table_files(&mut orphans).await?;
        Ok(orphans)
    }

    /// Takes out of `orphans` the lake segments their stream's table still names: a table keeps
    /// its files after the log trims them (its retention is its own). Read after the index:
    /// a file no index record and no live claim held is never added to a table later (only
    /// the swap that puts it in the index adds it).
    async fn keep_table_files(
        &self,
        orphans: &mut Vec<objstore::object_store::ObjectMeta>,
    ) -> Result<(), LogError> {
        let mut logs: Vec<LogId> = orphans
            .iter()
            .filter_map(|m| objstore::keys::parse_compacted_object(&m.location))
            .filter(|k| k.lake)
            .map(|k| LogId(k.log))
            .collect();
        logs.sort_unstable();
        logs.dedup();
        if logs.is_empty() {
            return Ok(());
        }
        let heads = logs.iter().map(|l| TxnOp::get(RangeRequest::key(self.keys.head(*l))));
        let resp = self.meta.txn(Txn::new().and_then(heads)).await?;
        let mut streams = std::collections::BTreeSet::new();
        for r in &resp.results {
            if let OpResult::Get(g) = r
                && let Some(kv) = g.kvs.first()
            {
                let head: logstore::records::LogHead = logstore::decode("log head", &kv.value)?;
                if let Some(route) = head.route {
                    streams.insert(route.stream_identity);
                }
            }
        }
        if streams.is_empty() {
            return Ok(());
        }
        let tables = streams.iter().map(|s| TxnOp::get(RangeRequest::key(self.keys.lake_table(s))));
        let resp = self.meta.txn(Txn::new().and_then(tables)).await?;
        let mut named = std::collections::HashSet::new();
        for r in &resp.results {
            if let OpResult::Get(g) = r
                && let Some(kv) = g.kvs.first()
            {
                for uri in crate::lakes::decode_table(&kv.value)?.data_files() {
                    // A URI under the store's root: its key is what follows the root.
                    if let Some(at) = uri.rfind("/compacted/") {
                        named.insert(uri[at + 1..].to_owned());
                    }
                }
            }
        }
        orphans.retain(|m| !named.contains(m.location.as_ref()));
        Ok(())
    }

    /// Deletes the objects of `batch` (emptying it) in one batched call; ones already gone
    /// (another cleaner's cycle) count as deleted. Returns how many, and their bytes.
    async fn delete_batch(
        &self,
        batch: &mut Vec<objstore::object_store::ObjectMeta>,
    ) -> Result<(u64, u64), LogError> {
        if batch.is_empty() {
            return Ok((0, 0));
        }
        let bytes = batch.iter().map(|m| m.size).sum();
        let n = batch.len() as u64;
        let paths: Vec<_> = batch.drain(..).map(|m| Ok(m.location)).collect();
        let mut results = self.objects.delete_stream(futures::stream::iter(paths).boxed());
        while let Some(r) = results.next().await {
            match r {
                Ok(_) | Err(objstore::object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok((n, bytes))
    }

    async fn compact_history(&mut self, revision: i64) -> Result<Option<i64>, LogError> {
        let Some(history) = self.history else { return Ok(None) };
        self.seen.push_back((Instant::now(), revision));
        let mut target = None;
        while let Some(&(at, rev)) = self.seen.front() {
            if at.elapsed() < history {
                break;
            }
            target = Some(rev);
            self.seen.pop_front();
        }
        let Some(rev) = target else { return Ok(None) };
        match self.meta.compact(rev).await {
            Ok(()) => Ok(Some(rev)),
            // Compacted past it already (another cleaner, or the store's own backstop).
            Err(MetaError::Compacted { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}
