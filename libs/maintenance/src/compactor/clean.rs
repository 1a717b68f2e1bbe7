//! Key compaction (Kafka's `cleanup.policy=compact`; ARCHITECTURE §12): a compacted log keeps,
//! for every key, at least its latest record. A pass, under the log's compaction claim:
//!
//! 1. [`plan_clean`] (pure) takes the log's leading run of plain segments: not its WAL chunks
//!    (the uncompacted tail), none younger than `min.compaction.lag.ms`, none at or above the
//!    lowest offset its producers' state checkpoints cover (below it, a new owner rebuilds
//!    idempotence from the checkpoints, never from the batches, so a producer's batches there
//!    may go). Offsets below the log's cleaned end ([`Cleaned`]) are clean, those above dirty;
//!    the pass runs when the dirty share reaches `min.cleanable.dirty.ratio`, or the oldest
//!    dirty segment has waited `max.compaction.lag.ms`.
//! 2. The dirty segments' keys go into a [`KeyMap`] (a hash per key and its latest offset), of
//!    bounded size: when it fills, the pass cleans up to the entry it stopped at, and the next
//!    pass goes on from there.
//! 3. Every segment up to there is rewritten: a record is dropped when a later record has its
//!    key, when it has no key (as Kafka's cleaner drops one), or when it is a tombstone (a null
//!    value) cleaned more than `delete.retention.ms` ago. Offsets never change: a batch keeps
//!    its base offset and span, its records theirs; a batch left with no record becomes part
//!    of a gap batch (an empty batch spanning those offsets). Kafka transactions (as Kafka's
//!    cleaner treats them): only segments below the last stable offset are taken, so every
//!    transaction there has ended; an aborted transaction's batches go whole (the log's
//!    aborted index says which), a committed one's records are compacted as any; a COMMIT
//!    marker goes as a tombstone does (`delete.retention.ms` after its offset is cleaned), an
//!    ABORT marker stays (the aborted index still names its transaction, and a read_committed
//!    consumer ends the transaction at its marker). Entries that are no record batch are kept
//!    as they are.
//! 4. Each rewritten group of segments is swapped in as compaction swaps (one transaction,
//!    compared against the read), then the cleaned end moves (compare-and-set).

use std::collections::HashMap;

use bytes::Bytes;
use metadata::{Compare, CompareOp, RangeRequest, Txn, TxnOp};

use super::build::{self, Counted, SegmentWriter};
use super::plan::{LogView, rewrite_of};
use super::{Compaction, Compactor, Pass};
use logstore::keys::parse_u64;
use logstore::mutations::{self, Mutation};
use logstore::{LogEntry, LogEntryHeader, LogError, LogId};

/// A compacted log's settings: its stream's configs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cleanup {
    /// `min.compaction.lag.ms`: a segment holding a record younger than this is not cleaned.
    pub min_lag_ms: i64,
    /// `max.compaction.lag.ms`: a dirty segment older than this is cleaned whatever the ratio.
    pub max_lag_ms: i64,
    /// `delete.retention.ms`: how long a tombstone stays once its offset is cleaned.
    pub delete_retention_ms: i64,
    /// `min.cleanable.dirty.ratio`.
    pub min_dirty_ratio: f64,
}

impl Default for Cleanup {
    /// Kafka's defaults.
    fn default() -> Self {
        Cleanup {
            min_lag_ms: 0,
            max_lag_ms: i64::MAX,
            delete_retention_ms: 86_400_000,
            min_dirty_ratio: 0.5,
        }
    }
}

/// The logs of compacted streams, and their settings.
pub type CompactedLogs = HashMap<LogId, Cleanup>;

/// [`super::CompactorConfig::key_map_bytes`] by default (Kafka's cleaner has 128 MiB for all
/// its threads).
pub const DEFAULT_KEY_MAP_BYTES: usize = 32 << 20;

/// Passes a log's [`Cleaned`] remembers; older ones merge (later time kept: a tombstone waits
/// longer, never less).
const MAX_PASSES: usize = 32;

/// How far a log is cleaned, and when each part first was: `(end, time)` pairs, ends rising;
/// offsets below `end_i` (and at or above `end_{i-1}`) were first cleaned at `time_i`; and
/// when the oldest tombstone the last pass kept was first cleaned (a pass is due once it may
/// go, with nothing dirty). Stored in `logs/<id>/cleaned` as `end:time,end:time,…[;time]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cleaned {
    passes: Vec<(u64, i64)>,
    tombstones: Option<i64>,
}

impl Cleaned {
    /// The stored value; `None` if it is not one.
    pub fn parse(v: &[u8]) -> Option<Cleaned> {
        let s = std::str::from_utf8(v).ok()?;
        let (s, tombstones) = match s.split_once(';') {
            Some((s, t)) => (s, Some(t.parse().ok()?)),
            None => (s, None),
        };
        let mut passes: Vec<(u64, i64)> = Vec::new();
        for pair in s.split(',').filter(|p| !p.is_empty()) {
            let (end, time) = pair.split_once(':')?;
            let (end, time) = (end.parse().ok()?, time.parse().ok()?);
            if passes.last().is_some_and(|(e, _)| *e >= end) {
                return None;
            }
            passes.push((end, time));
        }
        Some(Cleaned { passes, tombstones })
    }

    pub fn encode(&self) -> String {
        let pairs: Vec<String> = self.passes.iter().map(|(e, t)| format!("{e}:{t}")).collect();
        match self.tombstones {
            Some(t) => format!("{};{t}", pairs.join(",")),
            None => pairs.join(","),
        }
    }

    /// When the oldest tombstone the last pass kept was first cleaned.
    pub fn tombstones(&self) -> Option<i64> {
        self.tombstones
    }

    /// The end of what is cleaned (0: nothing yet).
    pub fn end(&self) -> u64 {
        self.passes.last().map_or(0, |(e, _)| *e)
    }

    /// When `offset` was first cleaned, if it was.
    pub fn first_cleaned(&self, offset: u64) -> Option<i64> {
        self.passes.iter().find(|(end, _)| offset < *end).map(|(_, t)| *t)
    }

    /// This, cleaned up to `end` at `now_ms`, the oldest tombstone kept first cleaned at
    /// `tombstones`.
    pub fn advanced(&self, end: u64, now_ms: i64, tombstones: Option<i64>) -> Cleaned {
        let mut passes = self.passes.clone();
        if end > self.end() {
            passes.push((end, now_ms));
        }
        while passes.len() > MAX_PASSES {
            let (end, newer) = passes.remove(1);
            passes[0] = (end, passes[0].1.max(newer));
        }
        Cleaned { passes, tombstones }
    }
}

/// What a pass cleans.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Clean {
    /// Indexes into [`LogView::pages`] of the segments it may rewrite, consecutive.
    pub pages: Vec<usize>,
    /// The dirty part starts here (the log's cleaned end, or its start).
    pub dirty_from: u64,
    /// And ends here: the end of the last segment.
    pub end: u64,
}

/// Whether, and what, a pass over `view` cleans at `now_ms` (step 1 of the module's): `upto`
/// is the lowest offset the log's producer state checkpoints are true below (`None`: it never
/// had an idempotent batch).
pub fn plan_clean(
    view: &LogView,
    cleaned: &Cleaned,
    cleanup: &Cleanup,
    upto: Option<u64>,
    now_ms: i64,
) -> Option<Clean> {
    let claim = u64::try_from(view.claim).unwrap_or(0);
    let clean_end = cleaned.end().max(view.start);
    let (mut pages, mut end) = (Vec::new(), None);
    let (mut clean_bytes, mut dirty_bytes, mut oldest_dirty) = (0u64, 0u64, None);
    for (i, p) in view.pages.iter().enumerate() {
        let locs = &p.page.locators;
        if locs.iter().all(|l| l.end_offset() <= view.start) {
            continue;
        }
        // Plain segments only, from the oldest on; a segment this claim wrote keeps its key
        // (first offset and claim), which a rewrite under the same claim would take again.
        let [l] = locs.as_slice() else { break };
        let young = now_ms.saturating_sub(l.ingest_time()) < cleanup.min_lag_ms;
        if l.in_wal() || l.lake.is_some() || l.compacted_claim == claim || young {
            break;
        }
        if upto.is_some_and(|u| l.end_offset() > u) {
            break;
        }
        // A transaction open there: whether its records stay is not known yet.
        if l.end_offset() > view.head.last_stable_offset() {
            break;
        }
        let from = l.first_offset.max(view.start);
        let span = (l.end_offset() - from).max(1);
        let dirty = l.end_offset().saturating_sub(from.max(clean_end));
        let dirty_share = l.payload_bytes.saturating_mul(dirty) / span;
        dirty_bytes += dirty_share;
        clean_bytes += l.payload_bytes - dirty_share;
        if dirty > 0 && oldest_dirty.is_none() {
            oldest_dirty = Some(l.ingest_time());
        }
        pages.push(i);
        end = Some(l.end_offset());
    }
    let end = end?;
    // Tombstones kept by the last pass that may go now: a pass with nothing dirty.
    let expired = |t: i64| now_ms.saturating_sub(t) >= cleanup.delete_retention_ms;
    let tombstones = cleaned.tombstones().is_some_and(expired);
    if end <= clean_end {
        return tombstones.then_some(Clean { pages, dirty_from: clean_end, end });
    }
    let total = (clean_bytes + dirty_bytes).max(1) as f64;
    let due = oldest_dirty.is_some_and(|t| now_ms.saturating_sub(t) >= cleanup.max_lag_ms);
    (dirty_bytes as f64 / total >= cleanup.min_dirty_ratio || due || tombstones).then_some(Clean {
        pages,
        dirty_from: clean_end,
        end,
    })
}

/// Each key's latest offset, by a 128-bit hash of the key, in a table of fixed size (step 2):
/// 24 bytes a slot, filled to 90% at most.
pub struct KeyMap {
    hashes: Vec<[u64; 2]>,
    offsets: Vec<u64>,
    used: usize,
    limit: usize,
}

impl std::fmt::Debug for KeyMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyMap").field("keys", &self.used).field("bytes", &self.bytes()).finish()
    }
}

impl KeyMap {
    /// A map of at most `bytes`, and of no more slots than `keys` need.
    pub fn new(bytes: usize, keys: u64) -> KeyMap {
        let need = usize::try_from(keys).unwrap_or(usize::MAX).saturating_mul(10) / 9 + 16;
        let slots = (bytes / 24).min(need).max(16);
        KeyMap {
            hashes: vec![[0; 2]; slots],
            offsets: vec![0; slots],
            used: 0,
            limit: slots * 9 / 10,
        }
    }

    /// The hash of `key` ([0, 0] marks an empty slot, so no key hashes to it).
    pub fn hash(key: &[u8]) -> [u64; 2] {
        let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, key);
        let b = d.as_ref();
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(w)
        };
        [word(0) | 1, word(8)]
    }

    fn slot(&self, h: [u64; 2]) -> Result<usize, usize> {
        let n = self.hashes.len();
        let mut i = (h[0] % n as u64) as usize;
        loop {
            match self.hashes[i] {
                x if x == h => return Ok(i),
                [0, 0] => return Err(i),
                _ => i = (i + 1) % n,
            }
        }
    }

    /// Records `offset` as the latest of the key hashed `h`; false (nothing recorded) when the
    /// key is new and the map full.
    pub fn put(&mut self, h: [u64; 2], offset: u64) -> bool {
        match self.slot(h) {
            Ok(i) => {
                self.offsets[i] = self.offsets[i].max(offset);
                true
            }
            Err(_) if self.used >= self.limit => false,
            Err(i) => {
                self.hashes[i] = h;
                self.offsets[i] = offset;
                self.used += 1;
                true
            }
        }
    }

    /// The latest offset of the key hashed `h`, if it is in the map.
    pub fn get(&self, h: [u64; 2]) -> Option<u64> {
        self.slot(h).ok().map(|i| self.offsets[i])
    }

    /// Keys in the map.
    pub fn len(&self) -> usize {
        self.used
    }

    pub fn is_empty(&self) -> bool {
        self.used == 0
    }

    /// Bytes the map holds.
    pub fn bytes(&self) -> usize {
        self.hashes.len() * 24
    }
}

/// The log's aborted transactions a pass must know of: by producer id, the offsets from each
/// one's first batch to its marker.
#[derive(Debug, Default)]
pub(crate) struct Aborted(HashMap<i64, Vec<(u64, u64)>>);

impl Aborted {
    pub(crate) fn new(txns: impl IntoIterator<Item = (i64, u64, u64)>) -> Aborted {
        let mut by: HashMap<i64, Vec<(u64, u64)>> = HashMap::new();
        for (pid, first, last) in txns {
            by.entry(pid).or_default().push((first, last));
        }
        Aborted(by)
    }

    /// Whether the transactional batch of `h` at `offset` is in an aborted transaction.
    fn holds(&self, h: &recordbatch::BatchHeader, offset: u64) -> bool {
        h.is_transactional()
            && self
                .0
                .get(&h.producer.producer_id)
                .is_some_and(|r| r.iter().any(|(a, b)| *a <= offset && offset <= *b))
    }
}

/// What a pass makes of one entry.
enum Batch {
    /// Left as it is: no record batch, or an ABORT marker.
    Leave,
    /// A record batch whose records are compacted (plain, or a committed transaction's).
    Records(recordbatch::BatchHeader, Vec<recordbatch::Record>),
    /// An aborted transaction's batch: every record goes.
    Aborted,
    /// A COMMIT marker: it goes as a tombstone does.
    Commit,
}

fn batch_of(e: &LogEntry, aborted: &Aborted) -> Batch {
    let Ok((h, records)) = recordbatch::decode(&e.payload) else { return Batch::Leave };
    if h.is_control() {
        return match recordbatch::marker_commits(&e.payload) {
            Some(true) => Batch::Commit,
            _ => Batch::Leave,
        };
    }
    if aborted.holds(&h, e.header.offset) {
        return Batch::Aborted;
    }
    Batch::Records(h, records)
}

/// What one pass did: its rewrites, and the keys and bytes it looked at.
#[derive(Clone, Debug, Default)]
pub struct Cleaning {
    pub compactions: Vec<Compaction>,
    /// Keys mapped (step 2).
    pub keys: usize,
    /// The map's size.
    pub map_bytes: usize,
    /// Records dropped.
    pub dropped: u64,
    /// Payload bytes read and written.
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// How a pass drops records: the map, the history before it, the retention of tombstones.
struct Rules<'a> {
    map: &'a KeyMap,
    cleaned: &'a Cleaned,
    /// The log's aborted transactions overlapping the pass.
    aborted: &'a Aborted,
    /// Offsets at or past this are left as they are (the map stopped there).
    end: u64,
    delete_retention_ms: i64,
    now_ms: i64,
    /// When the oldest tombstone kept so far was first cleaned (now, for one this pass cleans
    /// first).
    tombstones: parking_lot::Mutex<Option<i64>>,
}

impl Rules<'_> {
    /// Whether the record at `offset` stays.
    fn keep(&self, offset: u64, r: &recordbatch::Record) -> bool {
        let Some(key) = &r.key else { return false };
        let latest = self.map.get(KeyMap::hash(key));
        if mutations::on(Mutation::KeepSuperseded) {
            // The bug: the latest goes, the ones before it stay.
            return latest != Some(offset);
        }
        if latest.is_some_and(|latest| latest > offset) {
            return false;
        }
        if r.value.is_some() {
            return true;
        }
        self.keep_tombstone(offset)
    }

    /// Whether a tombstone (or a COMMIT marker) at `offset` stays: until `delete.retention.ms`
    /// after its offset was first cleaned; the oldest kept is noted.
    fn keep_tombstone(&self, offset: u64) -> bool {
        let first_cleaned = self.cleaned.first_cleaned(offset);
        if first_cleaned.is_some_and(|t| self.now_ms.saturating_sub(t) >= self.delete_retention_ms)
        {
            return false;
        }
        let t = first_cleaned.unwrap_or(self.now_ms);
        let mut oldest = self.tombstones.lock();
        *oldest = Some(oldest.map_or(t, |o| o.min(t)));
        true
    }

    /// `entries` (a segment's) as the pass leaves them, and the records it dropped.
    fn filter(&self, entries: Vec<LogEntry>) -> Result<(Vec<LogEntry>, u64), LogError> {
        let (mut out, mut dropped) = (Vec::with_capacity(entries.len()), 0u64);
        // Offsets whose records all went, not yet written as a gap: (first, span, max ts).
        let mut gap: Option<(u64, u64, i64)> = None;
        for e in entries {
            let first = e.header.offset;
            let batch = if first >= self.end { Batch::Leave } else { batch_of(&e, self.aborted) };
            let (h, records) = match batch {
                Batch::Records(h, records) => (h, records),
                Batch::Commit if !self.keep_tombstone(first) => {
                    dropped += 1;
                    into_gap(&mut gap, &mut out, &e.header)?;
                    continue;
                }
                Batch::Aborted => {
                    dropped += u64::from(e.header.record_count);
                    into_gap(&mut gap, &mut out, &e.header)?;
                    continue;
                }
                Batch::Leave | Batch::Commit => {
                    flush_gap(&mut gap, &mut out)?;
                    out.push(e);
                    continue;
                }
            };
            let kept: Vec<recordbatch::Record> = records
                .iter()
                .filter(|r| self.keep(first + u64::from(r.offset_delta), r))
                .cloned()
                .collect();
            dropped += (records.len() - kept.len()) as u64;
            if kept.len() == records.len() {
                flush_gap(&mut gap, &mut out)?;
                out.push(e);
            } else if kept.is_empty() {
                into_gap(&mut gap, &mut out, &e.header)?;
            } else {
                flush_gap(&mut gap, &mut out)?;
                let mut kept = kept;
                if mutations::on(Mutation::ShiftCompactedOffsets) {
                    for (i, r) in kept.iter_mut().enumerate() {
                        r.offset_delta = i as u32;
                    }
                }
                let payload = recordbatch::encode_kept(&h, &kept).map_err(corrupt)?;
                out.push(LogEntry { header: header(&e.header, &payload), payload });
            }
        }
        flush_gap(&mut gap, &mut out)?;
        Ok((out, dropped))
    }
}

fn corrupt(e: recordbatch::BatchError) -> LogError {
    LogError::Corrupt(format!("key compaction: {e}"))
}

/// `h` for an entry now holding `payload`.
fn header(h: &LogEntryHeader, payload: &Bytes) -> LogEntryHeader {
    LogEntryHeader { entry_size: payload.len() as u64, ..*h }
}

/// The entry of `h` (every record of it dropped) added to the pending gap.
fn into_gap(
    gap: &mut Option<(u64, u64, i64)>,
    out: &mut Vec<LogEntry>,
    h: &LogEntryHeader,
) -> Result<(), LogError> {
    let g = gap.get_or_insert((h.offset, 0, i64::MIN));
    g.1 += u64::from(h.record_count);
    g.2 = g.2.max(h.timestamp);
    if g.1 >= i32::MAX as u64 / 2 {
        flush_gap(gap, out)?;
    }
    Ok(())
}

/// The pending gap, written as one empty batch.
fn flush_gap(gap: &mut Option<(u64, u64, i64)>, out: &mut Vec<LogEntry>) -> Result<(), LogError> {
    let Some((first, span, ts)) = gap.take() else { return Ok(()) };
    let count = u32::try_from(span).map_err(|_| LogError::Internal("a gap too wide".into()))?;
    let payload = recordbatch::encode_gap(count, ts).map_err(corrupt)?;
    let h = LogEntryHeader {
        offset: first,
        record_count: count,
        timestamp: ts,
        entry_size: payload.len() as u64,
        cumulative_size: 0,
    };
    out.push(LogEntry { header: h, payload });
    Ok(())
}

impl Compactor {
    /// One key compaction pass over `log`, claimed at `claim` (the module's steps).
    pub(super) async fn clean(
        &self,
        log: LogId,
        claim: i64,
        cleanup: &Cleanup,
    ) -> Result<Cleaning, LogError> {
        let Some(view) = self.read(log, claim).await? else { return Ok(Cleaning::default()) };
        let (cleaned, cleaned_revision, upto) = self.cleaned_state(log).await?;
        let now_ms = self.cfg.clock.now_ms();
        let Some(plan) = plan_clean(&view, &cleaned, cleanup, upto, now_ms) else {
            return Ok(Cleaning::default());
        };
        // The aborted transactions of the dirty part (none to read when the log never had
        // one): the clean part holds none of their batches (its first pass dropped them, and it
        // was below the last stable offset then).
        let aborted = if view.head.aborted.is_empty() && view.head.aborted_paged == 0 {
            Aborted::default()
        } else {
            Aborted::new(build::aborted_in(&self.reader, log, plan.dirty_from, plan.end).await?)
        };
        let (map, end) = self.map_keys(&view, &plan, &aborted).await?;
        let mut done = Cleaning { keys: map.len(), map_bytes: map.bytes(), ..Default::default() };
        if end <= plan.dirty_from && plan.end > plan.dirty_from {
            tracing::warn!(%log, map_bytes = map.bytes(), "key compaction: the key map holds not one batch's keys; nothing cleaned");
            return Ok(done);
        }
        let rules = Rules {
            map: &map,
            cleaned: &cleaned,
            aborted: &aborted,
            end,
            delete_retention_ms: cleanup.delete_retention_ms,
            now_ms,
            tombstones: Default::default(),
        };
        let pages: Vec<usize> =
            plan.pages.iter().copied().filter(|i| view.pages[*i].first < end).collect();
        if !self.rewrite_groups(&view, &pages, &rules, &mut done).await? {
            return Ok(done);
        }
        // Every group swapped in: the cleaned end moves, unless it moved meanwhile.
        let key = self.keys.cleaned(log);
        let txn = Txn::new()
            .when([
                Compare::mod_revision(key.clone(), CompareOp::Equal, cleaned_revision),
                Compare::create_revision(
                    self.keys.compaction_task(log),
                    CompareOp::Equal,
                    view.claim,
                ),
            ])
            .and_then([TxnOp::put(
                key,
                cleaned.advanced(end, now_ms, *rules.tombstones.lock()).encode(),
            )]);
        self.meta.txn(txn).await?;
        Ok(done)
    }

    /// The log's cleaned history and its mod revision (0: none yet), and the lowest offset its
    /// producer state checkpoints are true below.
    async fn cleaned_state(&self, log: LogId) -> Result<(Cleaned, i64, Option<u64>), LogError> {
        let got = self.meta.get(&self.keys.cleaned(log)).await?;
        let (cleaned, revision) = match got {
            Some(kv) => (Cleaned::parse(&kv.value).unwrap_or_default(), kv.mod_revision),
            None => (Cleaned::default(), 0),
        };
        let producers =
            self.meta.range(RangeRequest::prefix(self.keys.producers_prefix(log))).await?;
        let upto = producers
            .kvs
            .iter()
            .map(|kv| {
                let v = std::str::from_utf8(&kv.value).unwrap_or_default();
                v.split(' ').next().and_then(|u| parse_u64(u.as_bytes())).unwrap_or(0)
            })
            .min();
        Ok((cleaned, revision, upto))
    }

    /// The dirty segments' keys (step 2), and where the map stopped: the plan's end, or the
    /// first offset of the entry whose keys did not fit.
    async fn map_keys(
        &self,
        view: &LogView,
        plan: &Clean,
        aborted: &Aborted,
    ) -> Result<(KeyMap, u64), LogError> {
        let dirty: Vec<&logstore::records::Locator> = plan
            .pages
            .iter()
            .map(|i| &view.pages[*i].page.locators[0])
            .filter(|l| l.end_offset() > plan.dirty_from)
            .collect();
        let offsets = plan.end - plan.dirty_from;
        let mut map = KeyMap::new(self.cfg.key_map_bytes, offsets);
        for loc in dirty {
            for e in self.reader.run_entries(view.log, loc).await? {
                let first = e.header.offset;
                if first + u64::from(e.header.record_count) <= plan.dirty_from {
                    continue;
                }
                let Batch::Records(_, records) = batch_of(&e, aborted) else { continue };
                for r in &records {
                    let (offset, Some(key)) = (first + u64::from(r.offset_delta), &r.key) else {
                        continue;
                    };
                    if offset >= plan.dirty_from && !map.put(KeyMap::hash(key), offset) {
                        return Ok((map, first.max(plan.dirty_from)));
                    }
                }
            }
        }
        Ok((map, plan.end))
    }

    /// Rewrites `pages` (step 3) in groups of about the target size, each swapped in (step 4);
    /// false when a swap lost a race (the rest waits for the next pass).
    async fn rewrite_groups(
        &self,
        view: &LogView,
        pages: &[usize],
        rules: &Rules<'_>,
        done: &mut Cleaning,
    ) -> Result<bool, LogError> {
        let target = self.cfg.target_segment_bytes.max(1);
        let (mut group, mut entries, mut bytes, mut changed) =
            (Vec::new(), Vec::new(), 0u64, false);
        for (n, i) in pages.iter().enumerate() {
            let loc = &view.pages[*i].page.locators[0];
            let read = self.reader.run_entries(view.log, loc).await?;
            let before: u64 = read.iter().map(|e| e.payload.len() as u64).sum();
            let (out, dropped) = rules.filter(read)?;
            let after: u64 = out.iter().map(|e| e.payload.len() as u64).sum();
            done.dropped += dropped;
            done.bytes_in += before;
            changed |= dropped > 0 || after != before;
            bytes += after;
            group.push(*i);
            entries.extend(out.into_iter().map(|e| (e, loc.ingest_time())));
            if bytes < target && n + 1 < pages.len() {
                continue;
            }
            // A lone segment with nothing dropped stays as it is.
            if changed || group.len() > 1 {
                done.bytes_out += bytes;
                match self
                    .swap_cleaned(view, std::mem::take(&mut group), std::mem::take(&mut entries))
                    .await?
                {
                    Some(c) => done.compactions.push(c),
                    None => return Ok(false),
                }
            }
            (group, entries, bytes, changed) = (Vec::new(), Vec::new(), 0, false);
        }
        Ok(true)
    }

    /// The segment of `entries` put in place of the segments `pages`; `None` if the swap lost
    /// a race (the segment is an orphan the cleaner reclaims).
    async fn swap_cleaned(
        &self,
        view: &LogView,
        pages: Vec<usize>,
        entries: Vec<(LogEntry, i64)>,
    ) -> Result<Option<Compaction>, LogError> {
        let log = view.log;
        let Some(rw) = rewrite_of(view, pages) else { return Ok(None) };
        let capacity = entries.iter().map(|(e, _)| e.payload.len()).sum();
        let mut writer = SegmentWriter::plain(log, capacity);
        let mut counted = Counted { records: 0, entries: 0, payload_bytes: 0 };
        for (e, ingest_ms) in entries {
            counted.records += u64::from(e.header.record_count);
            counted.entries += 1;
            counted.payload_bytes += e.payload.len() as u64;
            writer.push_entry(e, ingest_ms)?;
        }
        let built = build::finish(log, &rw, writer, counted, view.claim)?;
        let path = built.locator.object(log);
        objstore::put_create_only(self.objects.as_ref(), &path, built.object.clone()).await?;
        match self.swap(view, &rw, built, path, None).await? {
            Pass::Done(Ok(c)) => Ok(Some(c)),
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests;
