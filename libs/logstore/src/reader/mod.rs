//! Reads of committed data: straight from the metadata store's index and the objects it
//! points at. Needs no writer identity, so read-only readers use it alone. Runs are WAL
//! chunks and plain segments (`libs/wal`'s format, read here) or lake segments (Parquet, read
//! in [`lake`] alone).

mod heads;
mod lake;

pub use heads::DEFAULT_FOLLOWED_HEADS;

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use metadata::{MetadataStore, OpResult, RangeRequest, Txn, TxnOp};
use objstore::object_store::{ObjectStore, ObjectStoreExt};

use crate::keys::{Keys, parse_u64};
use crate::range_cache::RangeCache;
use crate::records::{IndexPage, Locator, LogHead, LogState};
use crate::{EntryIndex, LogEntry, LogEntryHeader, LogError, LogId, LogInfo, LogOffset, decode};
use lake::LakeFooterCache;

/// Index pages kept in memory by default. A cached page serves only a listing that shows the
/// mod_revision it was read at, so it never goes stale; a full cache evicts one page at a time.
pub const DEFAULT_INDEX_PAGES: usize = 4096;

/// Indexes one read by index may name at most.
pub const MAX_BY_INDEX_ENTRIES: usize = 10_000;

/// Bytes one read by index may ask for at most.
pub const MAX_BY_INDEX_BYTES: u64 = 16 << 20;

/// Runs fetched at once by one read.
const PARALLEL_FETCHES: usize = 16;

/// Blocks of one large segment fetched at once by one read (its read-ahead).
const PARALLEL_BLOCKS: usize = 4;

/// Bytes of the footers of large segments kept at least (the entry tables block reads need).
const MIN_FOOTER_CACHE: u64 = 8 << 20;

/// What part of a run a read needs: the entries from `from` on, until `max_records` records,
/// `max_bytes` payload bytes or `max_entries` entries (in whole blocks of a large segment, so
/// a little more).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Want {
    from: u64,
    max_records: u64,
    max_bytes: u64,
    max_entries: usize,
    /// Checksum the entries taken (off where the client checks them: stored reads).
    verify: bool,
}

impl Want {
    /// The whole run, fetched with one GET however large (the compactor's input, searches).
    const ALL: Want = Want {
        from: 0,
        max_records: u64::MAX,
        max_bytes: u64::MAX,
        max_entries: usize::MAX,
        verify: true,
    };
}

/// Footers of large segments by object path, weighed by their entry tables.
type FooterCache = quick_cache::sync::Cache<String, Arc<wal::ChunkMeta>, FooterWeight>;

#[derive(Clone, Copy, Debug, Default)]
struct FooterWeight;

impl quick_cache::Weighter<String, Arc<wal::ChunkMeta>> for FooterWeight {
    fn weight(&self, key: &String, val: &Arc<wal::ChunkMeta>) -> u64 {
        (key.len() + 64 + val.entries.len() * std::mem::size_of::<wal::EntryMeta>()) as u64
    }
}

/// The chunk tables of objects read by index, by object path: which log owns which bytes, the
/// check that a range a client names is an entry of the log it names (ARCHITECTURE §7: a
/// principal reads only the logs it may). Objects never change, so an entry is never stale.
type ChunkTables = quick_cache::sync::Cache<String, Arc<[wal::ChunkMeta]>, TableWeight>;

#[derive(Clone, Copy, Debug, Default)]
struct TableWeight;

impl quick_cache::Weighter<String, Arc<[wal::ChunkMeta]>> for TableWeight {
    fn weight(&self, key: &String, val: &Arc<[wal::ChunkMeta]>) -> u64 {
        let entries: usize = val.iter().map(|c| c.entries.len()).sum();
        (key.len() + 64 * val.len() + entries * std::mem::size_of::<wal::EntryMeta>()) as u64
    }
}

/// Bytes of chunk tables kept (a WAL object of a thousand small entries: about 25 KiB).
const CHUNK_TABLE_BYTES: u64 = 4 << 20;

/// The bytes of an object's end fetched to find its footer: most footers fit, so one GET.
const FOOTER_PROBE: u64 = 64 << 10;

/// The largest footer read (a WAL object's entry table: 24 bytes an entry).
const MAX_FOOTER: u64 = 64 << 20;

fn chunk_tables() -> Arc<ChunkTables> {
    Arc::new(ChunkTables::with_weighter(256, CHUNK_TABLE_BYTES, TableWeight))
}

fn footer_cache(range_bytes: usize) -> Arc<FooterCache> {
    let bytes = (range_bytes as u64 / 8).max(MIN_FOOTER_CACHE);
    Arc::new(FooterCache::with_weighter(64, bytes, FooterWeight))
}

/// Index pages a scan lists with one metadata read.
const PAGES_PER_READ: i64 = 16;
/// Listings of one index window a read makes while compactions keep swapping its pages.
const RELISTS: usize = 4;

/// Index pages by (log, first offset), with the mod_revision of the key they were read from:
/// the compaction swap overwrites a page's key, so a cached page serves only a listing that
/// shows the same mod_revision.
/// Bounded by entries; full, it evicts the pages least worth keeping (S3-FIFO), one at a time.
type PageCache = quick_cache::sync::Cache<(LogId, u64), (i64, Arc<IndexPage>)>;

/// A consistent view of one log: its head and start, read in one linearizable transaction.
#[derive(Clone, Debug)]
pub(crate) struct Snapshot {
    pub log: LogId,
    pub head: LogHead,
    /// The head's mod_revision.
    pub head_revision: i64,
    pub start: u64,
    /// `start`'s mod_revision (0: no key), read in the same transaction: a trim compares it.
    pub start_revision: i64,
    /// The metadata revision of the read.
    pub revision: i64,
}

impl Snapshot {
    fn check_readable(&self) -> Result<(), LogError> {
        if self.head.log_state() == LogState::Deleted {
            return Err(LogError::NotFound(self.log));
        }
        Ok(())
    }
}

/// Checks that `bytes` hold exactly the one entry `idx` names, intact.
fn entry_at(
    object: &objstore::Path,
    idx: &EntryIndex,
    bytes: &Bytes,
) -> Result<LogEntry, LogError> {
    let entries = wal::decode_entries(bytes)?;
    let [e] = entries.as_slice() else {
        return Err(LogError::Corrupt(format!("{object} at {}: not one entry", idx.byte_start)));
    };
    if e.record_count != idx.header.record_count || e.payload.len() as u64 != idx.header.entry_size
    {
        return Err(LogError::Corrupt(format!(
            "{object} at {}: entry differs from its index",
            idx.byte_start
        )));
    }
    Ok(LogEntry { header: idx.header, payload: e.payload.clone() })
}

/// Checks that `idx` names one whole entry of its log's chunk in the object `table` describes
/// (a client's index that does not is INVALID_ARGUMENT: it names bytes that are not its log's).
fn check_entry(table: &[wal::ChunkMeta], idx: &EntryIndex) -> Result<(), LogError> {
    let found = table
        .iter()
        .find(|c| {
            c.log == idx.log.0
                && (c.byte_start..c.byte_start + c.byte_len).contains(&idx.byte_start)
        })
        .and_then(|c| {
            let rel = idx.byte_start - c.byte_start;
            let i = c.entries.binary_search_by_key(&rel, |e| u64::from(e.byte_offset)).ok()?;
            Some((c, i))
        });
    match found {
        Some((c, i))
            if c.entry_size(i) == idx.byte_len
                && c.entries[i].record_count == idx.header.record_count =>
        {
            Ok(())
        }
        _ => Err(LogError::InvalidArgument(format!(
            "bytes {}+{} of {} are no entry of log {}",
            idx.byte_start, idx.byte_len, idx.object, idx.log
        ))),
    }
}

/// One entry found in an object, with where it lives.
#[derive(Clone, Debug)]
struct Located {
    header: LogEntryHeader,
    object: objstore::Path,
    payload: Bytes,
    byte_start: u64,
    byte_len: u64,
    /// The fetched bytes it was read from (a run or a block) and where it starts in them: its
    /// stored framing is `fetched[at..at + byte_len]`.
    fetched: Bytes,
    at: usize,
}

/// Consecutive entries of a log as stored (ARCHITECTURE §5b): framed as in a WAL object, each
/// with its checksum, for a client to split and check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRun {
    pub first_offset: u64,
    /// The offset after its last entry.
    pub end_offset: u64,
    /// The log's payload bytes before the first entry.
    pub cumulative_before: u64,
    pub data: Bytes,
}

/// Reads committed entries. Cheap to clone.
#[derive(Clone)]
pub struct LogReader {
    meta: Arc<dyn MetadataStore>,
    objects: Arc<dyn ObjectStore>,
    keys: Keys,
    pages: Arc<PageCache>,
    ranges: RangeCache,
    footers: Arc<FooterCache>,
    lake_footers: Arc<LakeFooterCache>,
    tables: Arc<ChunkTables>,
    /// Followed heads of the logs read through `tail_*` and long polls; `None`: each reads
    /// the store.
    heads: Option<Arc<heads::Heads>>,
}

/// Lake segment footers kept.
const LAKE_FOOTERS: usize = 32;

impl std::fmt::Debug for LogReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogReader").field("keys", &self.keys).finish()
    }
}

/// Paged-out aborted transactions read at a time.
const ABORTED_PAGE: usize = 1000;

/// How far [`LogReader::aborted_of`] reads the paged-out aborted transactions.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// To the first whose marker is at or past the range's end (a read's).
    UntilPastEnd,
    /// To the head's (a rewrite's: every one overlapping).
    Whole,
}

impl LogReader {
    /// A reader caching index pages (the default number) and no object bytes.
    pub fn new(meta: Arc<dyn MetadataStore>, objects: Arc<dyn ObjectStore>, cluster: &str) -> Self {
        LogReader {
            meta,
            objects,
            keys: Keys::new(cluster),
            pages: Arc::new(PageCache::new(DEFAULT_INDEX_PAGES)),
            ranges: RangeCache::new(0),
            footers: footer_cache(0),
            lake_footers: Arc::new(LakeFooterCache::new(LAKE_FOOTERS)),
            tables: chunk_tables(),
            heads: None,
        }
    }

    /// Follows the heads of up to `logs` logs read through [`Self::tail_info`],
    /// [`Self::read_tail`] and [`Self::wait_beyond`] (a serving role's reader): one watch each
    /// instead of a read per request. Needs a Tokio runtime.
    pub fn with_followed_heads(mut self, logs: usize) -> Self {
        self.heads = Some(Arc::new(heads::Heads::new(self.meta.clone(), self.keys.clone(), logs)));
        self
    }

    /// Logs whose heads are followed now.
    pub fn followed_heads(&self) -> usize {
        self.heads.as_ref().map_or(0, |h| h.len())
    }

    /// A head this process committed at `revision`, for the followed heads.
    pub(crate) fn committed_head(&self, log: LogId, head: &LogHead, revision: i64) {
        if let Some(h) = &self.heads {
            h.committed(log, head, revision);
        }
    }

    /// This process changed `log`'s start: the followed head is read again.
    pub(crate) fn moved_start(&self, log: LogId) {
        if let Some(h) = &self.heads {
            h.forget(log);
        }
    }

    /// The log's followed snapshot and its changes: followed from now on if it was not (one
    /// linearizable read and a watch), else no request at all. `None` without followed heads.
    async fn followed(
        &self,
        log: LogId,
    ) -> Result<Option<tokio::sync::watch::Receiver<Arc<Snapshot>>>, LogError> {
        let Some(heads) = &self.heads else { return Ok(None) };
        if let Some(rx) = heads.current(log) {
            return Ok(Some(rx));
        }
        let snap = self.snapshot(log).await?;
        Ok(Some(heads.follow(snap).await?))
    }

    /// A snapshot for a tail read: the followed one, else one read now.
    async fn tail_snapshot(&self, log: LogId) -> Result<Arc<Snapshot>, LogError> {
        match self.followed(log).await? {
            Some(rx) => Ok(rx.borrow().clone()),
            None => Ok(Arc::new(self.snapshot(log).await?)),
        }
    }

    /// Caches up to `range_bytes` of object byte ranges and `index_pages` index pages (a
    /// read-only reader's caches). Concurrent reads of one range share one GET either way.
    pub fn with_caches(mut self, range_bytes: usize, index_pages: usize) -> Self {
        self.ranges = RangeCache::new(range_bytes);
        self.pages = Arc::new(PageCache::new(index_pages.max(1)));
        self.footers = footer_cache(range_bytes);
        self
    }

    /// Keeps the byte-range cache within `budget`'s free permits (a writer's append buffer):
    /// it caches in room appends do not hold, and gives it back when they need it.
    pub(crate) fn with_cache_budget(mut self, budget: Arc<tokio::sync::Semaphore>) -> Self {
        self.ranges = self.ranges.with_budget(budget);
        self
    }

    /// Gives at least `bytes` of the byte-range cache back to its budget (or all of it).
    pub(crate) fn shrink_cache(&self, bytes: usize) {
        self.ranges.shrink(bytes);
    }

    /// Puts a whole WAL object in the byte-range cache, so reads of its runs find them there:
    /// a writer's write-through of the object it just committed runs from (its tail cache,
    /// ARCHITECTURE §11).
    pub(crate) fn cache_object(&self, path: &objstore::Path, bytes: Bytes) {
        self.ranges.insert_object(path.as_ref(), bytes);
    }

    /// Bytes in the byte-range cache now.
    pub fn cache_bytes(&self) -> usize {
        self.ranges.len_bytes()
    }

    /// The byte-range cache (a writer's tail cache), shared.
    pub(crate) fn range_cache(&self) -> RangeCache {
        self.ranges.clone()
    }

    /// (hits, misses) of the byte-range cache.
    pub fn cache_counts(&self) -> (u64, u64) {
        self.ranges.counts()
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    pub fn meta(&self) -> &Arc<dyn MetadataStore> {
        &self.meta
    }

    pub fn objects(&self) -> &Arc<dyn ObjectStore> {
        &self.objects
    }

    pub(crate) async fn snapshot(&self, log: LogId) -> Result<Snapshot, LogError> {
        Ok(self.snapshot_and(log, []).await?.0)
    }

    /// A snapshot, with the results of `more` reads made in the same transaction.
    async fn snapshot_and<const N: usize>(
        &self,
        log: LogId,
        more: [TxnOp; N],
    ) -> Result<(Snapshot, Vec<OpResult>), LogError> {
        let txn = Txn::new().and_then(
            [
                TxnOp::get(RangeRequest::key(self.keys.head(log))),
                TxnOp::get(RangeRequest::key(self.keys.start(log))),
            ]
            .into_iter()
            .chain(more),
        );
        let resp = self.meta.txn(txn).await?;
        let mut results = resp.results.into_iter();
        let (Some(OpResult::Get(head)), Some(OpResult::Get(start))) =
            (results.next(), results.next())
        else {
            return Err(LogError::Internal("snapshot read answered the wrong shape".to_owned()));
        };
        let head_kv = head.kvs.first().ok_or(LogError::NotFound(log))?;
        let (start, start_revision) = match start.kvs.first() {
            Some(kv) => (
                parse_u64(&kv.value)
                    .ok_or_else(|| LogError::Corrupt(format!("start of log {log}")))?,
                kv.mod_revision,
            ),
            None => (0, 0),
        };
        let snap = Snapshot {
            log,
            head: decode("log head", &head_kv.value)?,
            head_revision: head_kv.mod_revision,
            start,
            start_revision,
            revision: resp.revision,
        };
        Ok((snap, results.collect()))
    }

    /// What a log looks like now.
    pub async fn info(&self, log: LogId) -> Result<LogInfo, LogError> {
        Ok(Self::info_of(&self.snapshot(log).await?))
    }

    /// What a log looks like as its followed head says (it may trail the store by a watch
    /// round trip, never this process's own commits): no metadata request once followed.
    /// [`Self::info`] without followed heads.
    pub async fn tail_info(&self, log: LogId) -> Result<LogInfo, LogError> {
        Ok(Self::info_of(&*self.tail_snapshot(log).await?))
    }

    fn info_of(s: &Snapshot) -> LogInfo {
        LogInfo {
            log: s.log,
            state: s.head.log_state(),
            epoch: s.head.epoch,
            first_offset: s.start,
            next_offset: s.head.next_offset,
            last_stable_offset: s.head.last_stable_offset(),
            entries: s.head.entry_count,
            bytes: s.head.cumulative_bytes,
            max_timestamp: s.head.max_timestamp,
            revision: s.revision,
        }
    }

    /// The aborted Kafka transactions a read of `[from, to)` must know of: those whose abort
    /// marker is at or after `from` and whose first batch is before `to`, by marker offset.
    /// From the followed head when it holds every one ending at or after `from` (no metadata
    /// request); else the paged-out ones are read from `from` on, a page at a time, up to the
    /// first whose marker is at or past `to` (Kafka's transaction index search: what a read
    /// costs is bounded by the markers in its range, not by every abort after it; a
    /// transaction open across `to` whose marker comes after another's past `to` is missed,
    /// as Kafka misses it).
    pub async fn aborted_txns(
        &self,
        log: LogId,
        from: u64,
        to: u64,
    ) -> Result<Vec<crate::records::AbortedTxn>, LogError> {
        let snap = self.tail_snapshot(log).await?;
        self.aborted_of(log, &snap.head, (from, to), ABORTED_PAGE, Scan::UntilPastEnd).await
    }

    /// Every aborted Kafka transaction overlapping `[from, to)` (its marker at or after `from`,
    /// its first batch before `to`), by marker offset, however late its marker: the paged-out
    /// ones are read [`ABORTED_PAGE`] keys at a time from `from` to the head's and only those
    /// overlapping kept, so what this holds is at most the markers in the range and one
    /// transaction per producer open at `to`. For a rewrite of the range (the compactor's,
    /// which must know every one), not a read's hot path.
    pub async fn aborted_overlapping(
        &self,
        log: LogId,
        from: u64,
        to: u64,
    ) -> Result<Vec<crate::records::AbortedTxn>, LogError> {
        self.aborted_overlapping_in_pages(log, from, to, ABORTED_PAGE).await
    }

    /// [`Self::aborted_overlapping`], reading `page` paged-out transactions at a time.
    pub async fn aborted_overlapping_in_pages(
        &self,
        log: LogId,
        from: u64,
        to: u64,
        page: usize,
    ) -> Result<Vec<crate::records::AbortedTxn>, LogError> {
        let snap = self.snapshot(log).await?;
        self.aborted_of(log, &snap.head, (from, to), page, Scan::Whole).await
    }

    /// The aborted transactions of `log` (its head `head`) overlapping `[from, to)`: the
    /// head's, and the paged-out ones read `page` keys at a time as `scan` says.
    async fn aborted_of(
        &self,
        log: LogId,
        head: &LogHead,
        (from, to): (u64, u64),
        page: usize,
        scan: Scan,
    ) -> Result<Vec<crate::records::AbortedTxn>, LogError> {
        use crate::records::AbortedTxn;
        let overlaps = |a: &AbortedTxn| a.last_offset >= from && a.first_offset < to;
        let page = page.max(1);
        let recent = &head.aborted;
        // Paged out ones end before the head's oldest.
        let end = recent.first().map_or(u64::MAX, |a| a.last_offset);
        let mut found = Vec::new();
        let mut at = from;
        while head.aborted_paged > 0 && at < end {
            let range =
                RangeRequest::between(self.keys.aborted(log, at), self.keys.aborted(log, end))
                    .limit(i64::try_from(page).unwrap_or(i64::MAX));
            let resp = self.meta.range(range).await?;
            for kv in &resp.kvs {
                let a: AbortedTxn = decode("aborted transaction", &kv.value)?;
                at = a.last_offset + 1;
                if overlaps(&a) {
                    found.push(a);
                }
                if scan == Scan::UntilPastEnd && a.last_offset >= to {
                    at = end;
                    break;
                }
            }
            if resp.kvs.len() < page {
                break;
            }
        }
        found.extend(recent.iter().copied().filter(overlaps));
        Ok(found)
    }

    /// The page a keys-only listing found: from the cache if it holds the version listed.
    async fn page(
        &self,
        log: LogId,
        listed: &metadata::KeyValue,
        cached_ok: bool,
    ) -> Result<Arc<IndexPage>, LogError> {
        let first = self
            .keys
            .parse_index_page(log, &listed.key)
            .ok_or_else(|| LogError::Corrupt("index page key".to_owned()))?;
        if cached_ok && let Some(p) = self.cached_page(log, first, listed.mod_revision) {
            return Ok(p);
        }
        let kv = self.meta.get(&listed.key).await?.ok_or_else(|| {
            LogError::unavailable(format!("index page {first} of log {log} vanished"))
        })?;
        self.cache_page(log, first, &kv)
    }

    fn cached_page(&self, log: LogId, first: u64, mod_revision: i64) -> Option<Arc<IndexPage>> {
        match self.pages.get(&(log, first)) {
            Some((rev, page)) if rev == mod_revision => Some(page),
            _ => None,
        }
    }

    /// Decodes a page read from the store and caches it under its mod_revision.
    fn cache_page(
        &self,
        log: LogId,
        first: u64,
        kv: &metadata::KeyValue,
    ) -> Result<Arc<IndexPage>, LogError> {
        let page: Arc<IndexPage> = Arc::new(decode("index page", &kv.value)?);
        self.pages.insert((log, first), (kv.mod_revision, page.clone()));
        Ok(page)
    }

    /// The locator of the run holding `offset` (which must be below the snapshot's high
    /// watermark): the head's recent locators, else the index page at or below `offset`.
    async fn locator_at(&self, snap: &Snapshot, offset: u64) -> Result<Locator, LogError> {
        self.find_locator(snap, offset, true).await?.ok_or_else(|| {
            LogError::Corrupt(format!("no index record covers offset {offset} of log {}", snap.log))
        })
    }

    /// The locator of the run holding `offset`, if an index record covers it. With
    /// `cached_ok` false the index page is read from the store, linearizably.
    pub(crate) async fn find_locator(
        &self,
        snap: &Snapshot,
        offset: u64,
        cached_ok: bool,
    ) -> Result<Option<Locator>, LogError> {
        if let Some(l) = snap.head.recent.iter().find(|l| l.contains(offset)) {
            return Ok(Some(l.clone()));
        }
        let Some(page) = self.page_at(snap.log, offset, cached_ok).await? else { return Ok(None) };
        Ok(page.locators.iter().find(|l| l.contains(offset)).cloned())
    }

    /// When the log took the record at `offset` (ms; its run's ingest time, or its running
    /// maximum timestamp for runs written before ingest times were kept); `None` at or past
    /// the high watermark or below the start.
    pub async fn ingest_ms_at(&self, log: LogId, offset: u64) -> Result<Option<i64>, LogError> {
        let snap = self.snapshot(log).await?;
        snap.check_readable()?;
        if offset < snap.start || offset >= snap.head.next_offset {
            return Ok(None);
        }
        Ok(self.find_locator(&snap, offset, true).await?.map(|l| l.ingest_time()))
    }

    /// The index page at or below `offset` (a floor look-up), if any.
    async fn page_at(
        &self,
        log: LogId,
        offset: u64,
        cached_ok: bool,
    ) -> Result<Option<Arc<IndexPage>>, LogError> {
        let mut upto = self.keys.index_page(log, offset);
        upto.push(0);
        let req =
            RangeRequest::between(self.keys.index_prefix(log), upto).reverse().limit(1).keys_only();
        let found = self.meta.range(req).await?;
        let Some(kv) = found.kvs.first() else { return Ok(None) };
        Ok(Some(self.page(log, kv, cached_ok).await?))
    }

    /// Every locator of the log, oldest first (index pages, then the head's recent ones).
    pub(crate) async fn all_locators(&self, snap: &Snapshot) -> Result<Vec<Locator>, LogError> {
        let req = RangeRequest::prefix(self.keys.index_prefix(snap.log)).keys_only();
        let keys = self.meta.range(req).await?;
        let mut out = Vec::new();
        for kv in keys.kvs {
            out.extend(self.page(snap.log, &kv, true).await?.locators.iter().cloned());
        }
        out.extend(snap.head.recent.iter().cloned());
        Ok(out)
    }

    /// Fetches one run's entries; if its object is gone (compacted, then cleaned), resolves the
    /// run again through the index, linearizably, before reporting an error.
    async fn fetch_run_resolving(
        &self,
        log: LogId,
        loc: Locator,
        want: Want,
    ) -> Result<Vec<Located>, LogError> {
        match self.fetch_run(log, &loc, want).await {
            Err(Missing::Object(path)) => {
                let fresh = self.snapshot(log).await?;
                fresh.check_readable()?;
                match self.find_locator(&fresh, loc.first_offset, false).await? {
                    Some(l) if l != loc => {
                        let entries =
                            self.fetch_run(log, &l, want).await.map_err(LogError::from)?;
                        let (lo, hi) = (loc.first_offset, loc.end_offset());
                        Ok(entries
                            .into_iter()
                            .filter(|e| e.header.offset >= lo && e.header.offset < hi)
                            .collect())
                    }
                    _ if fresh.start >= loc.end_offset() => Err(LogError::OffsetOutOfRange {
                        log,
                        offset: loc.first_offset,
                        start: fresh.start,
                        end: fresh.head.next_offset,
                    }),
                    _ => Err(LogError::Corrupt(format!(
                        "{path}, which the index of log {log} references, is missing"
                    ))),
                }
            }
            r => r.map_err(LogError::from),
        }
    }

    /// Fetches and checks one run's entries (through the byte-range cache): the whole run with
    /// one GET, unless it is a segment too large to cache beside others (over half the cache),
    /// of which only the blocks `want` needs are fetched ([`Self::fetch_blocks`]).
    async fn fetch_run(
        &self,
        log: LogId,
        loc: &Locator,
        want: Want,
    ) -> Result<Vec<Located>, Missing> {
        if loc.lake.is_some() {
            return self.fetch_row_groups(log, loc, want).await;
        }
        if want != Want::ALL && !loc.in_wal() && loc.byte_len > self.ranges.capacity() as u64 / 2 {
            return self.fetch_blocks(log, loc, want).await;
        }
        let path = loc.object(log);
        let (start, end) = (loc.byte_start, loc.byte_start + loc.byte_len);
        let bytes = self.get_cached(&path, start, end).await?;
        // The entries' headers, walked without checksums. With `want.verify`, the run's
        // entries are checksummed once while it is cached (a writer's own objects never: their
        // bytes are those the checksums were computed over); uncached, only the entries `want`
        // takes (a read of a few entries of a 64 MiB segment checksummed all of it, on every
        // read).
        let layout = wal::entry_layout(&bytes).map_err(|e| Missing::Other(e.into()))?;
        let cached = self.ranges.checked(path.as_ref(), start, end, &bytes);
        let checked = !want.verify || cached == Some(true);
        let records: u64 = layout.iter().map(|(_, h)| u64::from(h.record_count)).sum();
        if layout.len() != loc.entry_count as usize || records != loc.record_count {
            return Err(Missing::Other(LogError::Corrupt(format!(
                "{path} at {}: {} entries of {records} records where the index says {} of {}",
                loc.byte_start,
                layout.len(),
                loc.entry_count,
                loc.record_count
            ))));
        }
        let whole_run = !checked && cached.is_some();
        if whole_run {
            for (at, h) in &layout {
                let len = wal::ENTRY_HEADER_LEN + h.payload_len as usize;
                wal::decode_entry(&bytes[*at..at + len]).map_err(|e| Missing::Other(e.into()))?;
            }
            self.ranges.mark_checked(path.as_ref(), start, end, &bytes);
        }
        let (mut offset, mut cumulative) = (loc.first_offset, loc.cumulative_before);
        let (mut out, mut taken_records, mut taken_bytes) = (Vec::new(), 0u64, 0u64);
        for (at, h) in layout {
            let size = u64::from(h.payload_len);
            let header = LogEntryHeader {
                offset,
                record_count: h.record_count,
                timestamp: h.timestamp,
                entry_size: size,
                cumulative_size: cumulative + size,
            };
            offset += u64::from(h.record_count);
            cumulative += size;
            if header.end_offset() <= want.from {
                continue;
            }
            if taken_records >= want.max_records
                || taken_bytes >= want.max_bytes
                || out.len() >= want.max_entries
            {
                break;
            }
            let len = wal::ENTRY_HEADER_LEN + h.payload_len as usize;
            if !checked && !whole_run {
                wal::decode_entry(&bytes[at..at + len]).map_err(|e| Missing::Other(e.into()))?;
            }
            taken_records += u64::from(h.record_count);
            taken_bytes += size;
            out.push(Located {
                header,
                object: path.clone(),
                payload: bytes.slice(at + wal::ENTRY_HEADER_LEN..at + len),
                byte_start: loc.byte_start + at as u64,
                byte_len: len as u64,
                fetched: bytes.clone(),
                at,
            });
        }
        Ok(out)
    }

    /// A ranged GET of `path`; a missing object is [`Missing::Object`] (its run is resolved again).
    async fn get_range(&self, path: &objstore::Path, range: Range<u64>) -> Result<Bytes, Missing> {
        match self.objects.get_range(path, range).await {
            Ok(b) => Ok(b),
            Err(objstore::object_store::Error::NotFound { .. }) => {
                Err(Missing::Object(path.to_string()))
            }
            Err(e) => Err(Missing::Other(e.into())),
        }
    }

    /// Reads ahead for a reader catching up: the runs `after` the ones it reads, up to `bytes`
    /// of them (what this read planned: about what the next read of the log asks for), that
    /// are not in the byte-range cache (nor on their way there) are fetched into it in the
    /// background, so the next read finds them in memory instead of waiting for the store. A
    /// read served from what an earlier one read ahead reads on ahead too, so a reader catching
    /// up never waits for the store every other read. A tailing reader has nothing after its
    /// runs; a run too large to cache beside others (a segment over an eighth of the cache) is
    /// not read ahead. A failed read ahead is dropped: the read that wants the run fetches it.
    fn read_ahead(&self, log: LogId, after: Vec<Locator>, bytes: u64) {
        let cacheable = |l: &Locator| {
            l.lake.is_none() && l.byte_len <= self.ranges.capacity() as u64 / 8 && l.byte_len > 0
        };
        let end = |l: &Locator| l.byte_start + l.byte_len;
        let cached =
            |l: &Locator| self.ranges.contains(l.object(log).as_ref(), l.byte_start, end(l));
        let mut ahead = 0u64;
        for loc in after.into_iter().take(PARALLEL_FETCHES) {
            if ahead >= bytes || !cacheable(&loc) {
                break;
            }
            ahead += loc.payload_bytes;
            let (path, start, end) = (loc.object(log), loc.byte_start, end(&loc));
            if cached(&loc) {
                continue;
            }
            let (ranges, objects) = (self.ranges.clone(), self.objects.clone());
            tokio::spawn(async move {
                let fetch = || async { objects.get_range(&path, start..end).await };
                let _ = ranges.get_or_fetch(path.as_ref(), start, end, fetch).await;
            });
        }
    }

    /// [`Self::get_range`] through the byte-range cache (concurrent asks share one GET).
    async fn get_cached(
        &self,
        path: &objstore::Path,
        start: u64,
        end: u64,
    ) -> Result<Bytes, Missing> {
        self.ranges
            .get_or_fetch(path.as_ref(), start, end, || self.get_range(path, start..end))
            .await
    }

    /// The bytes of blocks a large segment is read in: a sixteenth of the cache, 1–8 MiB.
    fn block_bytes(&self) -> u64 {
        (self.ranges.capacity() as u64 / 16).clamp(1 << 20, 8 << 20)
    }

    /// The entry table of the large segment `loc` names: from its footer, fetched with one
    /// ranged GET (its length follows from the entry count) and cached.
    async fn segment_footer(
        &self,
        log: LogId,
        loc: &Locator,
    ) -> Result<Arc<wal::ChunkMeta>, Missing> {
        let path = loc.object(log);
        if let Some(m) = self.footers.get(path.as_ref()) {
            return Ok(m);
        }
        let corrupt = |what: String| Missing::Other(LogError::Corrupt(format!("{path}: {what}")));
        let footer_len = wal::single_chunk_footer_len(loc.entry_count);
        let at = loc.byte_start + loc.byte_len;
        let bytes = self.get_range(&path, at..at + footer_len + wal::TRAILER_LEN as u64).await?;
        let split = usize::try_from(footer_len).map_err(|_| corrupt("footer size".to_owned()))?;
        if bytes.len() != split + wal::TRAILER_LEN {
            return Err(corrupt(format!("footer read {} bytes, not {}", bytes.len(), split + 16)));
        }
        let (len, crc) = wal::decode_trailer(&bytes[split..], wal::ObjectKind::Segment)
            .map_err(|e| Missing::Other(e.into()))?;
        if u64::from(len) != footer_len {
            return Err(corrupt(format!("footer of {len} bytes where {footer_len} were expected")));
        }
        let metas =
            wal::decode_footer(&bytes[..split], crc, at).map_err(|e| Missing::Other(e.into()))?;
        let meta = match <[wal::ChunkMeta; 1]>::try_from(metas) {
            Ok([m])
                if m.log == log.0
                    && m.byte_start == loc.byte_start
                    && m.byte_len == loc.byte_len
                    && m.record_count == loc.record_count =>
            {
                Arc::new(m)
            }
            _ => return Err(corrupt("its footer disagrees with the index".to_owned())),
        };
        self.footers.insert(path.to_string(), meta.clone());
        Ok(meta)
    }

    /// The entries of a large segment `want` needs, in whole blocks (entries grouped by which
    /// [`Self::block_bytes`]-sized stretch of the segment they start in, so every read of a
    /// block asks for the same byte range and shares its cache entry), a few blocks at once.
    async fn fetch_blocks(
        &self,
        log: LogId,
        loc: &Locator,
        want: Want,
    ) -> Result<Vec<Located>, Missing> {
        use futures::{StreamExt, TryStreamExt};
        let meta = self.segment_footer(log, loc).await?;
        let table = &meta.entries;
        let block = self.block_bytes();
        // Where entry `i` starts in the chunk (its end for `i` past the last).
        let at = |i: usize| table.get(i).map_or(loc.byte_len, |e| u64::from(e.byte_offset));
        // The entries `[first, hi)` of the block entry `i` is in.
        let block_of = |i: usize| {
            let k = at(i) / block;
            let first = table.partition_point(|e| u64::from(e.byte_offset) / block < k);
            (first, table.partition_point(|e| u64::from(e.byte_offset) / block <= k))
        };
        let rel = want.from.saturating_sub(loc.first_offset);
        // The entry holding `from`, then whole blocks until the read has what it wants.
        let mut lo =
            table.partition_point(|e| e.rel_record_offset + u64::from(e.record_count) <= rel);
        let (mut blocks, mut payload, mut entries, mut records) = (Vec::new(), 0u64, 0usize, 0u64);
        while lo < table.len()
            && payload < want.max_bytes
            && entries < want.max_entries
            && records < want.max_records
        {
            let (first, hi) = block_of(lo);
            payload += at(hi) - at(first) - (wal::ENTRY_HEADER_LEN * (hi - first)) as u64;
            entries += hi - first;
            let last = &table[hi - 1];
            records += last.rel_record_offset + u64::from(last.record_count)
                - table[first].rel_record_offset;
            blocks.push((first, hi));
            lo = hi;
        }
        let path = loc.object(log);
        // Read-ahead: the block after these goes into the cache in the background, so a read
        // going on from here finds it there. Only where the cache has room for it.
        if lo < table.len() {
            let (first, hi) = block_of(lo);
            let (start, end) = (loc.byte_start + at(first), loc.byte_start + at(hi));
            if end - start <= self.ranges.capacity() as u64 / 4 {
                let (reader, path) = (self.clone(), path.clone());
                tokio::spawn(async move {
                    let _ = reader.get_cached(&path, start, end).await;
                });
            }
        }
        let fetches =
            blocks.into_iter().map(|(first, hi)| {
                let (start, end) = (loc.byte_start + at(first), loc.byte_start + at(hi));
                let path = &path;
                async move {
                    Ok::<_, Missing>((first, hi, start, self.get_cached(path, start, end).await?))
                }
            });
        let fetched: Vec<_> =
            futures::stream::iter(fetches).buffered(PARALLEL_BLOCKS).try_collect().await?;
        let mut out = Vec::with_capacity(entries);
        for (first, hi, start, bytes) in fetched {
            let decoded = wal::decode_entries(&bytes).map_err(|e| Missing::Other(e.into()))?;
            if decoded.len() != hi - first {
                return Err(Missing::Other(LogError::Corrupt(format!(
                    "{path} at {start}: {} entries where its footer says {}",
                    decoded.len(),
                    hi - first
                ))));
            }
            for (i, e) in (first..hi).zip(decoded) {
                let m = &table[i];
                if e.record_count != m.record_count || e.timestamp != m.timestamp {
                    return Err(Missing::Other(LogError::Corrupt(format!(
                        "{path} at {start}: an entry disagrees with its footer"
                    ))));
                }
                // Payload bytes before it: its position less the headers of those before it.
                let before = u64::from(m.byte_offset) - (wal::ENTRY_HEADER_LEN * i) as u64;
                let size = e.payload.len() as u64;
                out.push(Located {
                    header: LogEntryHeader {
                        offset: loc.first_offset + m.rel_record_offset,
                        record_count: e.record_count,
                        timestamp: e.timestamp,
                        entry_size: size,
                        cumulative_size: loc.cumulative_before + before + size,
                    },
                    object: path.clone(),
                    payload: e.payload,
                    byte_start: start + e.byte_offset as u64,
                    byte_len: e.size as u64,
                    fetched: bytes.clone(),
                    at: e.byte_offset,
                });
            }
        }
        Ok(out)
    }

    /// Whole entries from the one holding `start`, up to `max_records` records and `max_bytes`
    /// payload bytes — but always at least one entry. Empty at the high watermark.
    pub async fn read_entries(
        &self,
        log: LogId,
        start: u64,
        max_records: u64,
        max_bytes: u64,
    ) -> Result<Vec<LogEntry>, LogError> {
        self.entries(log, start, max_records, max_bytes, false).await
    }

    /// [`Self::read_entries`] from the followed head ([`Self::tail_info`]): a read of the
    /// log's recent runs costs no metadata request; the index is listed only further back.
    pub async fn read_tail(
        &self,
        log: LogId,
        start: u64,
        max_records: u64,
        max_bytes: u64,
    ) -> Result<Vec<LogEntry>, LogError> {
        self.entries(log, start, max_records, max_bytes, true).await
    }

    /// Checked entries within the limits, from a fresh snapshot or the followed head (`tail`).
    async fn entries(
        &self,
        log: LogId,
        start: u64,
        max_records: u64,
        max_bytes: u64,
        tail: bool,
    ) -> Result<Vec<LogEntry>, LogError> {
        let want =
            Want { from: start, max_records, max_bytes, max_entries: usize::MAX, verify: true };
        Ok(self
            .scan(log, want, tail)
            .await?
            .into_iter()
            .map(|l| LogEntry { header: l.header, payload: l.payload })
            .collect())
    }

    /// [`Self::read_entries`]' entries as stored: each run of them that lies back to back in
    /// what was fetched is one slice of it, not copied. Entries of whole runs are not
    /// checksummed here: the caller checks them (the SDK does, splitting the runs).
    pub async fn read_stored(
        &self,
        log: LogId,
        start: u64,
        max_records: u64,
        max_bytes: u64,
    ) -> Result<Vec<StoredRun>, LogError> {
        // Each run with the bytes it was fetched in and its range in them.
        let mut runs: Vec<(StoredRun, Bytes, Range<usize>)> = Vec::new();
        // The client checks every entry's checksum (split_stored): not checked here too.
        let want =
            Want { from: start, max_records, max_bytes, max_entries: usize::MAX, verify: false };
        for l in self.scan(log, want, false).await? {
            let end = l.at + l.byte_len as usize;
            if let Some((run, fetched, range)) = runs.last_mut()
                && fetched.as_ptr() == l.fetched.as_ptr()
                && fetched.len() == l.fetched.len()
                && range.end == l.at
            {
                range.end = end;
                run.end_offset = l.header.end_offset();
                continue;
            }
            let run = StoredRun {
                first_offset: l.header.offset,
                end_offset: l.header.end_offset(),
                cumulative_before: l.header.cumulative_size - l.header.entry_size,
                data: Bytes::new(),
            };
            runs.push((run, l.fetched, l.at..end));
        }
        Ok(runs
            .into_iter()
            .map(|(run, fetched, range)| StoredRun { data: fetched.slice(range), ..run })
            .collect())
    }

    /// Where each entry from the one holding `start` lives, at most `max_entries` of them.
    pub async fn read_index_range(
        &self,
        log: LogId,
        start: u64,
        max_entries: usize,
    ) -> Result<Vec<EntryIndex>, LogError> {
        if max_entries == 0 {
            return Err(LogError::InvalidArgument("max_entries must be at least 1".to_owned()));
        }
        Ok(self
            .scan(log, Want { from: start, max_entries, ..Want::ALL }, false)
            .await?
            .into_iter()
            .map(|l| EntryIndex {
                log,
                header: l.header,
                object: l.object,
                byte_start: l.byte_start,
                byte_len: l.byte_len,
            })
            .collect())
    }

    /// Entries from the one holding `want.from` within its limits (`want.verify`: checksum
    /// each one taken from a whole run; entries read in blocks are always checked). `tail`:
    /// from the followed head, listing the index only when the head's recent runs do not
    /// hold the start (no metadata request at all for a read of the tail).
    async fn scan(&self, log: LogId, want: Want, tail: bool) -> Result<Vec<Located>, LogError> {
        let Want { from: start, max_records, max_bytes, max_entries, .. } = want;
        if max_records == 0 {
            return Err(LogError::InvalidArgument("max_records must be at least 1".to_owned()));
        }
        let (snap, listed) = if tail {
            let snap = self.tail_snapshot(log).await?;
            let hw = snap.head.next_offset;
            let listed = if start >= hw || snap.head.recent.iter().any(|l| l.contains(start)) {
                Vec::new()
            } else {
                self.meta.txn(Txn::new().and_then(self.page_reads(log, start))).await?.results
            };
            (snap, listed)
        } else {
            // One transaction: the head, the start and a listing of the index pages from `start`.
            let (snap, listed) = self.snapshot_and(log, self.page_reads(log, start)).await?;
            (Arc::new(snap), listed)
        };
        snap.check_readable()?;
        let hw = snap.head.next_offset;
        let below =
            start < snap.start && !crate::mutations::on(crate::mutations::Mutation::ReadBelowStart);
        if below || start > hw {
            return Err(LogError::OffsetOutOfRange {
                log,
                offset: start,
                start: snap.start,
                end: hw,
            });
        }
        // Plan the runs the limits need (locators carry their counts), then fetch them
        // concurrently, in order.
        let mut plan: Vec<Locator> = Vec::new();
        // The window's runs after the plan's (what a reader reading on asks for next).
        let mut after: Vec<Locator> = Vec::new();
        let (mut records, mut bytes, mut entries) = (0u64, 0u64, 0usize);
        let mut offset = start;
        let mut batch =
            if start < hw { self.window(&snap, start, listed).await? } else { Vec::new() };
        'plan: while offset < hw {
            if batch.is_empty() {
                let listed =
                    self.meta.txn(Txn::new().and_then(self.page_reads(log, offset))).await?;
                batch = self.window(&snap, offset, listed.results).await?;
            }
            if batch.is_empty() {
                return Err(LogError::Corrupt(format!(
                    "no index record covers offset {offset} of log {log}"
                )));
            }
            let mut window = std::mem::take(&mut batch).into_iter();
            while let Some(loc) = window.next() {
                if !plan.is_empty()
                    && (records >= max_records || bytes >= max_bytes || entries >= max_entries)
                {
                    after = std::iter::once(loc).chain(window).collect();
                    break 'plan;
                }
                records += loc.record_count;
                bytes += loc.payload_bytes;
                entries += loc.entry_count as usize;
                offset = loc.end_offset();
                plan.push(loc);
                if offset >= hw {
                    break 'plan;
                }
            }
        }
        self.read_ahead(log, after, bytes);
        use futures::{StreamExt, TryStreamExt};
        let runs: Vec<Vec<Located>> = futures::stream::iter(
            plan.into_iter().map(|loc| self.fetch_run_resolving(log, loc, want)),
        )
        .buffered(PARALLEL_FETCHES)
        .try_collect()
        .await?;
        let (mut out, mut records, mut bytes) = (Vec::new(), 0u64, 0u64);
        // A run listed after a compaction may be a segment that also holds entries planned
        // from the WAL before it: each entry is returned once, in offset order.
        let mut next = start;
        for e in runs.into_iter().flatten() {
            if e.header.end_offset() <= next {
                continue;
            }
            next = e.header.end_offset();
            let full = records + u64::from(e.header.record_count) > max_records
                || bytes + e.header.entry_size > max_bytes
                || out.len() >= max_entries;
            if full && !out.is_empty() {
                return Ok(out);
            }
            records += u64::from(e.header.record_count);
            bytes += e.header.entry_size;
            out.push(e);
        }
        Ok(out)
    }

    /// Two reads of a log's index, keys only: the page at or below `offset`, and up to
    /// [`PAGES_PER_READ`] pages after it.
    fn page_reads(&self, log: LogId, offset: u64) -> [TxnOp; 2] {
        let prefix = self.keys.index_prefix(log);
        let mut above = self.keys.index_page(log, offset);
        above.push(0);
        let end = metadata::prefix_end(&prefix);
        [
            TxnOp::get(RangeRequest::between(prefix, above.clone()).reverse().limit(1).keys_only()),
            TxnOp::get(RangeRequest::between(above, end).limit(PAGES_PER_READ).keys_only()),
        ]
    }

    /// [`Self::locators_listed`] for a window of the index [`Self::page_reads`] listed,
    /// listed again (at the newer revision) while a listed page vanished before its value was
    /// read: a compaction swapped the pages between the two reads.
    async fn window(
        &self,
        snap: &Snapshot,
        offset: u64,
        mut listed: Vec<OpResult>,
    ) -> Result<Vec<Locator>, LogError> {
        for _ in 0..RELISTS {
            if let Some(locators) = self.locators_listed(snap, offset, listed).await? {
                return Ok(locators);
            }
            let again = self.meta.txn(Txn::new().and_then(self.page_reads(snap.log, offset)));
            listed = again.await?.results;
        }
        Err(LogError::unavailable(format!(
            "the index of log {} changed under {RELISTS} listings at offset {offset}; retry",
            snap.log
        )))
    }

    /// The locators from the one holding `offset` on, as far as they run without a gap: those
    /// of the pages [`Self::page_reads`] listed (cached ones from the cache, the others in one
    /// range read), then the snapshot head's recent ones. Empty if none holds `offset`; `None`
    /// if a listed page was gone when its value was read (list again).
    async fn locators_listed(
        &self,
        snap: &Snapshot,
        offset: u64,
        listed: Vec<OpResult>,
    ) -> Result<Option<Vec<Locator>>, LogError> {
        if let Some(i) = snap.head.recent.iter().position(|l| l.contains(offset)) {
            return Ok(Some(snap.head.recent[i..].to_vec()));
        }
        let mut keys: Vec<metadata::KeyValue> = Vec::new();
        for r in listed {
            let OpResult::Get(found) = r else {
                return Err(LogError::Internal(
                    "index listing answered the wrong shape".to_owned(),
                ));
            };
            keys.extend(found.kvs);
        }
        let first_of = |key: &[u8]| {
            self.keys
                .parse_index_page(snap.log, key)
                .ok_or_else(|| LogError::Corrupt(format!("index page key of log {}", snap.log)))
        };
        let mut pages: Vec<Option<Arc<IndexPage>>> = Vec::with_capacity(keys.len());
        for kv in &keys {
            pages.push(self.cached_page(snap.log, first_of(&kv.key)?, kv.mod_revision));
        }
        let missing: Vec<usize> = (0..keys.len()).filter(|i| pages[*i].is_none()).collect();
        if let (Some(lo), Some(hi)) = (missing.first(), missing.last()) {
            let mut end = keys[*hi].key.clone();
            end.push(0);
            let found = self.meta.range(RangeRequest::between(keys[*lo].key.clone(), end)).await?;
            for kv in found.kvs {
                let Some(i) = keys.iter().position(|k| k.key == kv.key) else { continue };
                pages[i] = Some(self.cache_page(snap.log, first_of(&kv.key)?, &kv)?);
            }
            if missing.iter().any(|i| pages[*i].is_none()) {
                return Ok(None);
            }
        }
        let listed = pages.iter().flatten().flat_map(|p| p.locators.iter());
        let mut out: Vec<Locator> = Vec::new();
        for l in listed.chain(snap.head.recent.iter()) {
            match out.last() {
                None if l.contains(offset) => out.push(l.clone()),
                None => {}
                // A page spilled from the recent ones after the snapshot: seen already.
                Some(last) if l.end_offset() <= last.end_offset() => {}
                Some(last) if l.first_offset == last.end_offset() => out.push(l.clone()),
                Some(_) => break,
            }
        }
        Ok(Some(out))
    }

    /// Reads entries where `indexes` say they are, without resolving offsets again. Adjacent
    /// byte ranges of one object are coalesced into one ranged GET. Returned in the given order.
    /// At most [`MAX_BY_INDEX_ENTRIES`] indexes and [`MAX_BY_INDEX_BYTES`] bytes; each names a
    /// WAL object or a compacted segment and a byte range inside it. An object found gone (the
    /// cleaner reclaimed it after compaction) is looked up again through its log's index.
    pub async fn read_entries_by_index(
        &self,
        indexes: &[EntryIndex],
    ) -> Result<Vec<LogEntry>, LogError> {
        let bad = |m: String| Err(LogError::InvalidArgument(m));
        if indexes.len() > MAX_BY_INDEX_ENTRIES {
            return bad(format!(
                "{} indexes in one read; at most {MAX_BY_INDEX_ENTRIES}",
                indexes.len()
            ));
        }
        let mut total = 0u64;
        for idx in indexes {
            let compacted = objstore::keys::parse_compacted_object(&idx.object);
            if objstore::keys::parse_wal_object(&idx.object).is_none() && compacted.is_none() {
                return bad(format!("`{}` is not a Lakelog object", idx.object));
            }
            // A segment holds one log's entries: the one its key names, and no other.
            if let Some(k) = compacted
                && k.log != idx.log.0
            {
                return bad(format!(
                    "`{}` is a segment of log {}, not {}",
                    idx.object, k.log, idx.log
                ));
            }
            if idx.byte_len == 0 || idx.byte_start.checked_add(idx.byte_len).is_none() {
                return bad(format!(
                    "byte range {}+{} of {} is empty or overflows",
                    idx.byte_start, idx.byte_len, idx.object
                ));
            }
            total = total.saturating_add(idx.byte_len);
        }
        if total > MAX_BY_INDEX_BYTES {
            return bad(format!("{total} bytes in one read; at most {MAX_BY_INDEX_BYTES}"));
        }
        // Ordered: the GETs go out in one order whatever the hasher (the simulation replays it).
        let mut by_object: std::collections::BTreeMap<&objstore::Path, Vec<usize>> =
            std::collections::BTreeMap::new();
        for (i, idx) in indexes.iter().enumerate() {
            by_object.entry(&idx.object).or_default().push(i);
        }
        let mut out: Vec<Option<LogEntry>> = vec![None; indexes.len()];
        for (object, mut members) in by_object {
            // A lake segment's entries are framed from its rows, not stored framed: found
            // again through the index (which reads their row group).
            if objstore::keys::parse_compacted_object(object).is_some_and(|k| k.lake) {
                for i in members {
                    out[i] = Some(self.re_resolve(&indexes[i]).await?);
                }
                continue;
            }
            // Each range must be an entry of the log it names, as the object's own footer says:
            // a WAL object holds every log of its flush, so a range of it is authorized only
            // as an entry of the named log's chunk.
            let table = match self.chunk_table(object).await {
                Ok(t) => t,
                Err(Missing::Object(_)) => {
                    for i in members {
                        out[i] = Some(self.re_resolve(&indexes[i]).await?);
                    }
                    continue;
                }
                Err(Missing::Other(e)) => return Err(e),
            };
            for i in &members {
                check_entry(&table, &indexes[*i])?;
            }
            members.sort_by_key(|i| indexes[*i].byte_start);
            // Coalesce: runs of entries whose byte ranges touch (checked above: no overflow).
            let mut ranges: Vec<(std::ops::Range<u64>, Vec<usize>)> = Vec::new();
            for i in members {
                let idx = &indexes[i];
                let r = idx.byte_start..idx.byte_start + idx.byte_len;
                match ranges.last_mut() {
                    Some((last, ids)) if last.end == r.start => {
                        last.end = r.end;
                        ids.push(i);
                    }
                    _ => ranges.push((r, vec![i])),
                }
            }
            let spans: Vec<_> = ranges.iter().map(|(r, _)| r.clone()).collect();
            let fetched = match self.objects.get_ranges(object, &spans).await {
                Ok(f) => f,
                Err(objstore::object_store::Error::NotFound { .. }) => {
                    for (_, ids) in &ranges {
                        for i in ids {
                            out[*i] = Some(self.re_resolve(&indexes[*i]).await?);
                        }
                    }
                    continue;
                }
                Err(e) => return Err(self.range_error(object, &spans, e).await),
            };
            for ((range, ids), bytes) in ranges.iter().zip(fetched) {
                if bytes.len() as u64 != range.end - range.start {
                    return bad(format!(
                        "bytes {}..{} of {object}: the object ends before",
                        range.start, range.end
                    ));
                }
                for i in ids {
                    let idx = &indexes[*i];
                    let at = (idx.byte_start - range.start) as usize;
                    let slice = bytes.slice(at..at + idx.byte_len as usize);
                    out[*i] = Some(entry_at(object, idx, &slice)?);
                }
            }
        }
        out.into_iter()
            .map(|e| e.ok_or_else(|| LogError::Internal("entry not read".to_owned())))
            .collect()
    }

    /// The chunk table of the object at `path` (a WAL object or a segment) from its footer:
    /// one GET of its last [`FOOTER_PROBE`] bytes (a second for a larger footer), cached.
    async fn chunk_table(&self, path: &objstore::Path) -> Result<Arc<[wal::ChunkMeta]>, Missing> {
        use objstore::object_store::{GetOptions, GetRange};
        if let Some(t) = self.tables.get(path.as_ref()) {
            return Ok(t);
        }
        let kind = match objstore::keys::parse_wal_object(path) {
            Some(_) => wal::ObjectKind::Wal,
            None => wal::ObjectKind::Segment,
        };
        let corrupt = |what: String| Missing::Other(LogError::Corrupt(format!("{path}: {what}")));
        let opts =
            GetOptions { range: Some(GetRange::Suffix(FOOTER_PROBE)), ..GetOptions::default() };
        let got = match self.objects.get_opts(path, opts).await {
            Ok(g) => g,
            Err(objstore::object_store::Error::NotFound { .. }) => {
                return Err(Missing::Object(path.to_string()));
            }
            Err(e) => return Err(Missing::Other(e.into())),
        };
        let (size, start) = (got.meta.size, got.range.start);
        let tail = got.bytes().await.map_err(|e| Missing::Other(e.into()))?;
        let trailer_at = match tail.len().checked_sub(wal::TRAILER_LEN) {
            Some(at) if start.checked_add(tail.len() as u64) == Some(size) => at,
            _ => return Err(corrupt(format!("{} bytes at its end of {size}", tail.len()))),
        };
        let (len, crc) =
            wal::decode_trailer(&tail[trailer_at..], kind).map_err(|e| Missing::Other(e.into()))?;
        let footer_at = (size - wal::TRAILER_LEN as u64)
            .checked_sub(u64::from(len))
            .filter(|_| u64::from(len) <= MAX_FOOTER)
            .ok_or_else(|| corrupt(format!("a footer of {len} bytes")))?;
        let footer = match footer_at.checked_sub(start) {
            Some(at) => tail.slice(at as usize..trailer_at),
            None => self.get_range(path, footer_at..size - wal::TRAILER_LEN as u64).await?,
        };
        let chunks =
            wal::decode_footer(&footer, crc, footer_at).map_err(|e| Missing::Other(e.into()))?;
        let table: Arc<[wal::ChunkMeta]> = chunks.into();
        self.tables.insert(path.to_string(), table.clone());
        Ok(table)
    }

    /// The entry an index named, found again through its log's index (linearizably), after its
    /// object was found gone: the same offset and header, wherever it lives now.
    async fn re_resolve(&self, idx: &EntryIndex) -> Result<LogEntry, LogError> {
        let h = idx.header;
        let found = self
            .scan(
                idx.log,
                Want {
                    from: h.offset,
                    max_records: u64::from(h.record_count.max(1)),
                    max_entries: 1,
                    ..Want::ALL
                },
                false,
            )
            .await?;
        match found.into_iter().next() {
            Some(e) if e.header == h => Ok(LogEntry { header: e.header, payload: e.payload }),
            _ => Err(LogError::InvalidArgument(format!(
                "no entry of log {} at offset {} matches the index (object {} is gone)",
                idx.log, h.offset, idx.object
            ))),
        }
    }

    /// A ranged GET failed: a range past the object's end is the caller's error, not the
    /// store's (one HEAD, only on this path).
    async fn range_error(
        &self,
        object: &objstore::Path,
        spans: &[std::ops::Range<u64>],
        e: objstore::object_store::Error,
    ) -> LogError {
        let end = spans.iter().map(|r| r.end).max().unwrap_or(0);
        match self.objects.head(object).await {
            Ok(meta) if meta.size < end => LogError::InvalidArgument(format!(
                "bytes up to {end} of {object}: the object holds {}",
                meta.size
            )),
            _ => e.into(),
        }
    }

    /// The first readable entry, or `None` for an empty (or wholly trimmed) log.
    pub async fn get_first_offset(&self, log: LogId) -> Result<Option<LogOffset>, LogError> {
        let snap = self.snapshot(log).await?;
        snap.check_readable()?;
        if snap.start >= snap.head.next_offset {
            return Ok(None);
        }
        let loc = self.locator_at(&snap, snap.start).await?;
        let want =
            Want { from: snap.start, max_records: 1, max_bytes: 1, max_entries: 1, verify: true };
        let entries = self.fetch_run_resolving(snap.log, loc, want).await?;
        Ok(entries.into_iter().find(|e| e.header.end_offset() > snap.start).map(|e| e.header))
    }

    /// The last committed entry, or `None` for an empty log.
    pub async fn get_last_offset(&self, log: LogId) -> Result<Option<LogOffset>, LogError> {
        let snap = self.snapshot(log).await?;
        snap.check_readable()?;
        if snap.start >= snap.head.next_offset {
            return Ok(None);
        }
        Ok(snap.head.last_entry.map(|d| LogEntryHeader {
            offset: d.offset,
            record_count: d.record_count,
            timestamp: d.timestamp,
            entry_size: d.entry_size,
            cumulative_size: d.cumulative_size,
        }))
    }

    /// Waits until the log's high watermark passes `offset`, it stops being writable, or
    /// `max_wait` passes (a long poll: ARCHITECTURE §2, tail reads). Watches the head from the
    /// revision it read, so no commit in between is missed.
    pub async fn wait_beyond(
        &self,
        log: LogId,
        offset: u64,
        max_wait: std::time::Duration,
    ) -> Result<(), LogError> {
        if let Some(mut rx) = self.followed(log).await? {
            // The followed head: no request of its own (a commit seen here or by the watch
            // wakes it); it stops early, harmlessly, if the log stops being followed.
            let moved = |s: &Arc<Snapshot>| {
                s.head.next_offset > offset || s.head.log_state() != LogState::Normal
            };
            let s = rx.borrow().clone();
            s.check_readable()?;
            if moved(&s) || max_wait.is_zero() {
                return Ok(());
            }
            let _ = tokio::time::timeout(max_wait, rx.wait_for(moved)).await;
            return Ok(());
        }
        use futures::StreamExt;
        let snap = self.snapshot(log).await?;
        snap.check_readable()?;
        if snap.head.next_offset > offset || max_wait.is_zero() {
            return Ok(());
        }
        let req = metadata::WatchRequest {
            range: metadata::KeyRange::key(self.keys.head(log)),
            start_revision: snap.revision + 1,
        };
        let mut watch = self.meta.watch(req).await?;
        let moved = async {
            while let Some(Ok(events)) = watch.next().await {
                for ev in events {
                    let Ok(head) = decode::<LogHead>("log head", &ev.kv.value) else { return };
                    if ev.kind == metadata::EventKind::Delete
                        || head.next_offset > offset
                        || head.log_state() != LogState::Normal
                    {
                        return;
                    }
                }
            }
        };
        let _ = tokio::time::timeout(max_wait, moved).await;
        Ok(())
    }

    /// Entries of one run (the compactor's input).
    pub async fn run_entries(&self, log: LogId, loc: &Locator) -> Result<Vec<LogEntry>, LogError> {
        Ok(self
            .fetch_run(log, loc, Want::ALL)
            .await
            .map_err(LogError::from)?
            .into_iter()
            .map(|l| LogEntry { header: l.header, payload: l.payload })
            .collect())
    }

    /// Entries of one run, with their headers (for Level 0 searches). A segment's come from its
    /// footer (24 bytes an entry, cached), not from its entries: a timestamp search or a
    /// retention pass fetched the whole segment, up to 64 MiB, for them.
    pub(crate) async fn run_headers(
        &self,
        log: LogId,
        loc: &Locator,
    ) -> Result<Vec<LogEntryHeader>, LogError> {
        if !loc.in_wal() && loc.lake.is_none() {
            let meta = self.segment_footer(log, loc).await.map_err(LogError::from)?;
            let table = &meta.entries;
            let mut out = Vec::with_capacity(table.len());
            for (i, e) in table.iter().enumerate() {
                let end = table.get(i + 1).map_or(loc.byte_len, |n| u64::from(n.byte_offset));
                let header_bytes = (wal::ENTRY_HEADER_LEN * i) as u64;
                let (Some(size), Some(before)) = (
                    (end - u64::from(e.byte_offset)).checked_sub(wal::ENTRY_HEADER_LEN as u64),
                    u64::from(e.byte_offset).checked_sub(header_bytes),
                ) else {
                    return Err(LogError::Corrupt(format!(
                        "{}: entry {i} of its footer is shorter than a header",
                        loc.object(log)
                    )));
                };
                out.push(LogEntryHeader {
                    offset: loc.first_offset + e.rel_record_offset,
                    record_count: e.record_count,
                    timestamp: e.timestamp,
                    entry_size: size,
                    cumulative_size: loc.cumulative_before + before + size,
                });
            }
            return Ok(out);
        }
        Ok(self
            .fetch_run(log, loc, Want::ALL)
            .await
            .map_err(LogError::from)?
            .into_iter()
            .map(|l| l.header)
            .collect())
    }
}

/// Why a run could not be fetched: its object is gone (re-resolve), or anything else.
enum Missing {
    Object(String),
    Other(LogError),
}

impl From<Missing> for LogError {
    fn from(m: Missing) -> Self {
        match m {
            Missing::Object(path) => LogError::Corrupt(format!("{path} is missing")),
            Missing::Other(e) => e,
        }
    }
}
