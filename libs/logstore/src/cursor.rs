//! Level 0 cursors (seed 000's `LogCursor`): a named consumer position on one log, persisted
//! in the metadata store.
//!
//! State: the mark-delete position (everything below `acked_before` is acknowledged), the
//! properties stored with the last `mark_delete`, and the individually acknowledged offsets
//! above it, kept as ranges and folded into the mark-delete position once contiguous with it.
//!
//! Persistence (ARCHITECTURE §4, `logs/<id>/cursors/<name>/…`): `state` holds the mark-delete
//! position and properties; the ranges live in chunks under `acks/<offset>`, each covering the
//! offsets from its key to the next chunk's key and at most [`CHUNK_MAX_BYTES`] long (varint
//! pairs), so no value nears etcd's request limit however many ranges there are. A change
//! rewrites only the chunks it touched, in transactions that compare the state's revision (one
//! writer of a cursor at a time); the state is put last, so a crash midway leaves at worst
//! extra acknowledgements the caller asked for, never lost ones below the mark-delete position.
//!
//! The read position is the handle's, not persisted: a cursor opened again (after any restart)
//! reads from its mark-delete position, skipping individually acknowledged entries, so what
//! was read but not acknowledged is delivered again (at least once).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use metadata::{Compare, CompareOp, KeyRange, MetadataStore, RangeRequest, Txn, TxnOp};
use prost::Message;

use crate::keys::Keys;
use crate::reader::LogReader;
use crate::{LogEntry, LogError, LogId, decode};

/// Largest encoded chunk of acknowledged ranges.
pub const CHUNK_MAX_BYTES: usize = 64 << 10;

/// Chunk bytes one persisting transaction carries at most (etcd's default request limit is
/// 1.5 MiB).
const TXN_MAX_BYTES: usize = 1 << 20;

/// Chunks read per page when a cursor is opened.
const LOAD_PAGE: i64 = 16;

/// `logs/<id>/cursors/<name>/state`.
#[derive(Clone, PartialEq, prost::Message)]
struct CursorRecord {
    /// Every offset below this is acknowledged.
    #[prost(uint64, tag = "1")]
    acked_before: u64,
    #[prost(btree_map = "string, int64", tag = "2")]
    properties: BTreeMap<String, i64>,
    /// Text stored with the position (a Kafka commit's metadata string), kept by every change.
    #[prost(btree_map = "string, string", tag = "3")]
    labels: BTreeMap<String, String>,
}

/// A cursor's stored position as one read returns it ([`position`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Position {
    /// Every offset below this is acknowledged: a Kafka group's committed offset.
    pub offset: u64,
    pub properties: BTreeMap<String, i64>,
    pub labels: BTreeMap<String, String>,
}

/// The named cursor's stored position, or `None` if the log has no such cursor: one read.
pub async fn position(
    reader: &LogReader,
    log: LogId,
    name: &str,
) -> Result<Option<Position>, LogError> {
    validate_cursor_name(name)?;
    let Some(kv) = reader.meta().get(&reader.keys().cursor_state(log, name)).await? else {
        return Ok(None);
    };
    let r: CursorRecord = decode("cursor state", &kv.value)?;
    Ok(Some(Position { offset: r.acked_before, properties: r.properties, labels: r.labels }))
}

/// A position as its cursor's stored state holds it.
pub fn decode_position(value: &[u8]) -> Result<Position, LogError> {
    let r: CursorRecord = decode("cursor state", value)?;
    Ok(Position { offset: r.acked_before, properties: r.properties, labels: r.labels })
}

/// What sets the named cursor's position, whatever it was (its state put, its individual
/// acknowledgements dropped), for a caller committing it in a transaction of its own: a Kafka
/// group's offset commit, under its coordinator's tenure. Any offset is taken, as Kafka takes
/// any committed offset.
pub fn position_ops(
    keys: &Keys,
    log: LogId,
    name: &str,
    position: Position,
) -> Result<[TxnOp; 2], LogError> {
    validate_cursor_name(name)?;
    let record = CursorRecord {
        acked_before: position.offset,
        properties: position.properties,
        labels: position.labels,
    };
    Ok([
        TxnOp::put(keys.cursor_state(log, name), record.encode_to_vec()),
        TxnOp::delete(KeyRange::prefix(keys.cursor_acks_prefix(log, name))),
    ])
}

/// Sets the named cursor's position, creating the cursor if the log has none of that name: a
/// Kafka group's offset commit. Any offset up to the high watermark is taken (one below the
/// log's start stands for it, as a commit of a trimmed offset does in Kafka); individually
/// acknowledged offsets are dropped. Last writer wins: a commit replaces whatever is stored.
pub async fn set_position(
    reader: &LogReader,
    log: LogId,
    name: &str,
    position: Position,
) -> Result<(), LogError> {
    validate_cursor_name(name)?;
    let info = reader.info(log).await?;
    if info.state == crate::records::LogState::Deleted {
        return Err(LogError::NotFound(log));
    }
    if position.offset > info.next_offset {
        return Err(LogError::OffsetOutOfRange {
            log,
            offset: position.offset,
            start: info.first_offset,
            end: info.next_offset,
        });
    }
    let keys = reader.keys();
    let record = CursorRecord {
        acked_before: position.offset,
        properties: position.properties,
        labels: position.labels,
    };
    let txn = Txn::new().and_then([
        TxnOp::put(keys.cursor_state(log, name), record.encode_to_vec()),
        TxnOp::delete(KeyRange::prefix(keys.cursor_acks_prefix(log, name))),
    ]);
    reader.meta().txn(txn).await?;
    Ok(())
}

/// Where a new cursor starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CursorStart {
    /// At the log's first retained offset.
    Beginning,
    /// At the high watermark: only later records are its backlog.
    End,
    /// At this offset.
    Offset(u64),
}

/// What a cursor holds back, for `cursor stats`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CursorStats {
    /// The last offset acknowledged by mark-delete, if any.
    pub mark_delete_offset: Option<u64>,
    /// Where this handle reads next.
    pub read_position: u64,
    pub high_watermark: u64,
    /// Records at or above the mark-delete position not individually acknowledged.
    pub backlog_records: u64,
    /// Payload bytes from the entry holding the first unacknowledged offset to the high
    /// watermark, from cumulative sizes (individually acknowledged entries are not subtracted).
    pub backlog_bytes: u64,
    /// Individually acknowledged records above the mark-delete position, and their ranges.
    pub acked_records: u64,
    pub ack_ranges: usize,
    pub properties: BTreeMap<String, i64>,
}

/// Acknowledged offsets above the mark-delete position: disjoint, non-adjacent ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct AckSet {
    /// start → end (exclusive).
    ranges: BTreeMap<u64, u64>,
}

impl AckSet {
    /// Adds `[start, end)`, merging with overlapping or adjacent ranges.
    pub fn insert(&mut self, mut start: u64, mut end: u64) {
        if start >= end {
            return;
        }
        if let Some((&s, &e)) = self.ranges.range(..=start).next_back()
            && e >= start
        {
            start = s;
            end = end.max(e);
            self.ranges.remove(&s);
        }
        while let Some((&s, &e)) = self.ranges.range(start..).next() {
            if s > end {
                break;
            }
            end = end.max(e);
            self.ranges.remove(&s);
        }
        self.ranges.insert(start, end);
    }

    /// The end of the range holding `offset`, if acknowledged.
    pub fn covering(&self, offset: u64) -> Option<u64> {
        self.ranges.range(..=offset).next_back().filter(|(_, e)| **e > offset).map(|(_, e)| *e)
    }

    /// Drops what lies below `bound`.
    pub fn remove_below(&mut self, bound: u64) {
        let below: Vec<u64> = self.ranges.range(..bound).map(|(s, _)| *s).collect();
        for s in below {
            if let Some(e) = self.ranges.remove(&s)
                && e > bound
            {
                self.ranges.insert(bound, e);
            }
        }
    }

    /// The ranges clipped to `[lo, hi)`.
    pub fn clipped(&self, lo: u64, hi: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        if lo >= hi {
            return out;
        }
        if let Some((_, &e)) = self.ranges.range(..lo).next_back()
            && e > lo
        {
            out.push((lo, e.min(hi)));
        }
        for (&s, &e) in self.ranges.range(lo..hi) {
            out.push((s, e.min(hi)));
        }
        out
    }

    /// Acknowledged offsets in `[lo, hi)`.
    pub fn count_in(&self, lo: u64, hi: u64) -> u64 {
        self.clipped(lo, hi).iter().map(|(s, e)| e - s).sum()
    }

    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn first(&self) -> Option<(u64, u64)> {
        self.ranges.iter().next().map(|(s, e)| (*s, *e))
    }

    pub fn pop_first(&mut self) {
        self.ranges.pop_first();
    }
}

/// Encodes ranges (ascending, disjoint, each `≥ base`) as varint (gap, length) pairs.
fn encode_ranges(base: u64, ranges: &[(u64, u64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ranges.len() * 4);
    let mut at = base;
    for &(s, e) in ranges {
        prost::encoding::encode_varint(s - at, &mut out);
        prost::encoding::encode_varint(e - s, &mut out);
        at = e;
    }
    out
}

fn decode_ranges(base: u64, mut bytes: &[u8]) -> Result<Vec<(u64, u64)>, LogError> {
    let corrupt = || LogError::Corrupt(format!("cursor ack chunk at {base}"));
    let mut out = Vec::new();
    let mut at = base;
    while !bytes.is_empty() {
        let gap = prost::encoding::decode_varint(&mut bytes).map_err(|_| corrupt())?;
        let len = prost::encoding::decode_varint(&mut bytes).map_err(|_| corrupt())?;
        let s = at.checked_add(gap).ok_or_else(corrupt)?;
        let e = s.checked_add(len).ok_or_else(corrupt)?;
        if len == 0 {
            return Err(corrupt());
        }
        out.push((s, e));
        at = e;
    }
    Ok(out)
}

/// Splits ranges into pieces whose encoding stays within [`CHUNK_MAX_BYTES`]; each piece is
/// keyed by its first range's start, the first by `key`.
fn split_chunk(key: u64, ranges: &[(u64, u64)]) -> Vec<(u64, Vec<u8>)> {
    let mut pieces = Vec::new();
    let mut from = 0;
    while from < ranges.len() {
        let base = if pieces.is_empty() { key } else { ranges[from].0 };
        let (mut to, mut size, mut at) = (from, 0usize, base);
        while to < ranges.len() {
            let (s, e) = ranges[to];
            let add = varint_len(s - at) + varint_len(e - s);
            if size + add > CHUNK_MAX_BYTES && to > from {
                break;
            }
            size += add;
            at = e;
            to += 1;
        }
        pieces.push((base, encode_ranges(base, &ranges[from..to])));
        from = to;
    }
    pieces
}

fn varint_len(v: u64) -> usize {
    prost::encoding::encoded_len_varint(v)
}

/// Cursor names: 1–128 of `A-Z a-z 0-9 . _ -`.
pub fn validate_cursor_name(name: &str) -> Result<(), LogError> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(LogError::InvalidArgument(format!(
            "cursor name `{name}` must be 1-128 of A-Z a-z 0-9 . _ -"
        )))
    }
}

/// A cursor handle. Operations change the persisted state only through compare transactions
/// on the state's revision: a second handle that changed it makes this one fail with
/// `Unavailable` ("open it again").
#[derive(Debug)]
pub struct LogCursor {
    meta: Arc<dyn MetadataStore>,
    reader: LogReader,
    log: LogId,
    name: String,
    acked_before: u64,
    properties: BTreeMap<String, i64>,
    labels: BTreeMap<String, String>,
    acks: AckSet,
    /// First offsets of the chunks as stored.
    chunks: BTreeSet<u64>,
    /// Offset ranges whose chunks must be rewritten.
    dirty: Vec<(u64, u64)>,
    state_revision: i64,
    read_position: u64,
}

impl LogCursor {
    fn keys(&self) -> &Keys {
        self.reader.keys()
    }

    /// Creates a cursor; `AlreadyExists` if the log has one of that name.
    pub async fn create(
        reader: &LogReader,
        log: LogId,
        name: &str,
        start: CursorStart,
    ) -> Result<(), LogError> {
        validate_cursor_name(name)?;
        let snap = reader.snapshot(log).await?;
        if snap.head.log_state() == crate::records::LogState::Deleted {
            return Err(LogError::NotFound(log));
        }
        let hw = snap.head.next_offset;
        let at = match start {
            CursorStart::Beginning => snap.start,
            CursorStart::End => hw,
            CursorStart::Offset(o) if (snap.start..=hw).contains(&o) => o,
            CursorStart::Offset(o) => {
                return Err(LogError::OffsetOutOfRange {
                    log,
                    offset: o,
                    start: snap.start,
                    end: hw,
                });
            }
        };
        let key = reader.keys().cursor_state(log, name);
        let record =
            CursorRecord { acked_before: at, properties: BTreeMap::new(), labels: BTreeMap::new() };
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, record.encode_to_vec())]);
        if reader.meta().txn(txn).await?.succeeded {
            Ok(())
        } else {
            Err(LogError::AlreadyExists(format!("cursor {name} of log {log}")))
        }
    }

    /// Opens a cursor: loads its state and every ack chunk at one revision. The read position
    /// starts at the mark-delete position.
    pub async fn open(reader: &LogReader, log: LogId, name: &str) -> Result<LogCursor, LogError> {
        validate_cursor_name(name)?;
        let meta = reader.meta().clone();
        let keys = reader.keys();
        let state = meta.range(RangeRequest::key(keys.cursor_state(log, name))).await?;
        let Some(kv) = state.kvs.first() else {
            return Err(LogError::CursorNotFound { log, name: name.to_owned() });
        };
        let record: CursorRecord = decode("cursor state", &kv.value)?;
        let mut c = LogCursor {
            meta: meta.clone(),
            reader: reader.clone(),
            log,
            name: name.to_owned(),
            acked_before: record.acked_before,
            properties: record.properties,
            labels: record.labels,
            acks: AckSet::default(),
            chunks: BTreeSet::new(),
            dirty: Vec::new(),
            state_revision: kv.mod_revision,
            read_position: record.acked_before,
        };
        let prefix = keys.cursor_acks_prefix(log, name);
        let end = metadata::prefix_end(&prefix);
        let mut from = prefix.clone();
        loop {
            let page = meta
                .range(
                    RangeRequest::between(from.clone(), end.clone())
                        .limit(LOAD_PAGE)
                        .at_revision(state.revision),
                )
                .await?;
            for kv in &page.kvs {
                let first = std::str::from_utf8(&kv.key[prefix.len()..])
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or_else(|| LogError::Corrupt("cursor ack chunk key".to_owned()))?;
                c.chunks.insert(first);
                for (s, e) in decode_ranges(first, &kv.value)? {
                    c.acks.insert(s, e);
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
        c.acks.remove_below(c.acked_before);
        // Chunks left wholly below the mark-delete position by a crash are cleaned up by the
        // next change.
        if let Some(&first) = c.chunks.first()
            && first < c.acked_before
        {
            c.dirty.push((first, c.acked_before));
        }
        c.fold();
        c.read_position = c.acked_before;
        Ok(c)
    }

    /// Brings the handle up to date: one read of the state; the acknowledgements are loaded
    /// again only if another handle changed them. The read position is kept.
    pub async fn refresh(&mut self) -> Result<(), LogError> {
        let key = self.keys().cursor_state(self.log, &self.name);
        match self.meta.get(&key).await? {
            Some(kv) if kv.mod_revision == self.state_revision => Ok(()),
            Some(_) => {
                let position = self.read_position;
                *self = LogCursor::open(&self.reader, self.log, &self.name).await?;
                self.read_position = position.max(self.acked_before);
                Ok(())
            }
            None => Err(LogError::CursorNotFound { log: self.log, name: self.name.clone() }),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn log(&self) -> LogId {
        self.log
    }

    /// The last offset acknowledged by mark-delete, if any.
    pub fn mark_delete_offset(&self) -> Option<u64> {
        self.acked_before.checked_sub(1)
    }

    /// Where `read_entries` reads next.
    pub fn read_offset(&self) -> u64 {
        self.read_position
    }

    /// Moves this handle's read position (not persisted; never below the mark-delete
    /// position when reading).
    pub fn set_read_offset(&mut self, offset: u64) {
        self.read_position = offset;
    }

    pub fn properties(&self) -> &BTreeMap<String, i64> {
        &self.properties
    }

    /// Whether `offset` is acknowledged (by mark-delete or individually).
    pub fn is_acked(&self, offset: u64) -> bool {
        offset < self.acked_before || self.acks.covering(offset).is_some()
    }

    /// Entries from the read position, skipping those wholly acknowledged, up to
    /// `max_records` records and `max_bytes` bytes (at least one entry while any is left);
    /// advances the read position past them. Empty at the high watermark.
    pub async fn read_entries(
        &mut self,
        max_records: u64,
        max_bytes: u64,
    ) -> Result<Vec<LogEntry>, LogError> {
        let info = self.reader.info(self.log).await?;
        let mut pos = self.read_position.max(self.acked_before).max(info.first_offset);
        let mut out = Vec::new();
        let mut budget = max_records.max(1);
        while pos < info.next_offset && budget > 0 {
            if let Some(end) = self.acks.covering(pos) {
                pos = end;
                continue;
            }
            let entries = self.reader.read_entries(self.log, pos, budget, max_bytes).await?;
            let Some(last) = entries.last() else { break };
            pos = pos.max(last.header.end_offset());
            for e in entries {
                let (s, end) = (e.header.offset, e.header.end_offset());
                let all_acked = end <= self.acked_before
                    || self.acks.covering(s.max(self.acked_before)).is_some_and(|x| x >= end);
                if !all_acked {
                    budget = budget.saturating_sub(u64::from(e.header.record_count));
                    out.push(e);
                }
            }
            if !out.is_empty() {
                break;
            }
        }
        self.read_position = pos;
        Ok(out)
    }

    /// Acknowledges everything up to and including `offset` and stores `properties` with it.
    pub async fn mark_delete(
        &mut self,
        offset: u64,
        properties: BTreeMap<String, i64>,
    ) -> Result<(), LogError> {
        let hw = self.reader.info(self.log).await?.next_offset;
        if offset >= hw {
            return Err(LogError::OffsetOutOfRange {
                log: self.log,
                offset,
                start: self.acked_before,
                end: hw,
            });
        }
        if offset + 1 > self.acked_before {
            self.dirty.push((self.acked_before, offset + 1));
            self.acked_before = offset + 1;
            self.acks.remove_below(self.acked_before);
            self.fold();
        }
        self.properties = properties;
        self.persist().await
    }

    /// Acknowledges single offsets, out of order; contiguous ones fold into the mark-delete
    /// position. Persists once for all of them.
    pub async fn ack(&mut self, offsets: &[u64]) -> Result<(), LogError> {
        let hw = self.reader.info(self.log).await?.next_offset;
        if let Some(&bad) = offsets.iter().find(|o| **o >= hw) {
            return Err(LogError::OffsetOutOfRange {
                log: self.log,
                offset: bad,
                start: self.acked_before,
                end: hw,
            });
        }
        for &o in offsets {
            if o >= self.acked_before {
                self.acks.insert(o, o + 1);
                self.dirty.push((o, o + 1));
            }
        }
        self.fold();
        self.persist().await
    }

    /// Acknowledges the offset ranges `[from, to)` of `ranges`, everything below `start`, and
    /// stores `properties`, persisting once for all of it (a share group's share-partition
    /// moving on: ARCHITECTURE §12). The caller knows every offset is below the high watermark
    /// (it read them), so the log is not asked. `Unavailable` if another handle changed the
    /// cursor since this one loaded it: this handle is stale.
    pub async fn apply(
        &mut self,
        ranges: &[(u64, u64)],
        start: u64,
        properties: BTreeMap<String, i64>,
    ) -> Result<(), LogError> {
        if start > self.acked_before {
            self.dirty.push((self.acked_before, start));
            self.acked_before = start;
            self.acks.remove_below(start);
        }
        for &(a, b) in ranges {
            let a = a.max(self.acked_before);
            if a < b {
                self.acks.insert(a, b);
                self.dirty.push((a, b));
            }
        }
        self.fold();
        self.properties = properties;
        self.persist().await
    }

    /// The individually acknowledged ranges `[from, to)` above the mark-delete position.
    pub fn acked_ranges(&self) -> Vec<(u64, u64)> {
        self.acks.clipped(self.acked_before, u64::MAX)
    }

    /// Moves the cursor to `offset`: everything below is acknowledged, nothing above is (the
    /// individual acknowledgements are dropped), and reading continues there.
    pub async fn seek(&mut self, offset: u64) -> Result<(), LogError> {
        let info = self.reader.info(self.log).await?;
        if !(info.first_offset..=info.next_offset).contains(&offset) {
            return Err(LogError::OffsetOutOfRange {
                log: self.log,
                offset,
                start: info.first_offset,
                end: info.next_offset,
            });
        }
        let record = CursorRecord {
            acked_before: offset,
            properties: self.properties.clone(),
            labels: self.labels.clone(),
        };
        let keys = self.keys();
        let state = keys.cursor_state(self.log, &self.name);
        let txn = Txn::new()
            .when([Compare::mod_revision(state.clone(), CompareOp::Equal, self.state_revision)])
            .and_then([
                TxnOp::put(state, record.encode_to_vec()),
                TxnOp::delete(KeyRange::prefix(keys.cursor_acks_prefix(self.log, &self.name))),
            ]);
        let resp = self.meta.txn(txn).await?;
        if !resp.succeeded {
            return Err(self.conflict());
        }
        self.state_revision = resp.revision;
        self.acked_before = offset;
        self.acks = AckSet::default();
        self.chunks.clear();
        self.dirty.clear();
        self.read_position = offset;
        Ok(())
    }

    /// Backlog and acknowledgement figures, against the log as it is now.
    pub async fn stats(&self) -> Result<CursorStats, LogError> {
        let info = self.reader.info(self.log).await?;
        let hw = info.next_offset;
        let from = self.acked_before.max(info.first_offset);
        let acked_above = self.acks.count_in(from, hw);
        let backlog_bytes = if from >= hw {
            0
        } else {
            let idx = self.reader.read_index_range(self.log, from, 1).await?;
            let before = idx.first().map_or(0, |i| i.header.cumulative_size - i.header.entry_size);
            info.bytes.saturating_sub(before)
        };
        Ok(CursorStats {
            mark_delete_offset: self.mark_delete_offset(),
            read_position: self.read_position.max(self.acked_before),
            high_watermark: hw,
            backlog_records: hw.saturating_sub(from) - acked_above,
            backlog_bytes,
            acked_records: self.acks.count_in(self.acked_before, u64::MAX),
            ack_ranges: self.acks.len(),
            properties: self.properties.clone(),
        })
    }

    /// Folds acknowledged ranges that start at the mark-delete position into it.
    fn fold(&mut self) {
        while let Some((s, e)) = self.acks.first() {
            if s > self.acked_before {
                break;
            }
            self.acks.pop_first();
            self.dirty.push((self.acked_before, e));
            self.acked_before = self.acked_before.max(e);
        }
    }

    fn conflict(&self) -> LogError {
        LogError::unavailable(format!(
            "cursor {} of log {} was changed by another client; open it again",
            self.name, self.log
        ))
    }

    /// Writes the chunks the dirty ranges touch, then the state.
    async fn persist(&mut self) -> Result<(), LogError> {
        let keys = self.keys().clone();
        let (log, name) = (self.log, self.name.clone());
        // The chunks (by first offset) whose territory a dirty range touches; a range below
        // the first chunk starts a chunk of its own.
        let mut touched: BTreeSet<u64> = BTreeSet::new();
        let mut below_first: Option<u64> = None;
        for &(a, b) in &self.dirty {
            match self.chunks.range(..=a).next_back() {
                Some(&c) => {
                    touched.insert(c);
                }
                None => below_first = Some(below_first.map_or(a, |x| x.min(a))),
            }
            if a < b {
                touched.extend(self.chunks.range(a..b).copied());
            }
        }
        // One new territory, up to the first stored chunk, for everything below it (split
        // below if it outgrows a chunk).
        touched.extend(below_first);
        let mut puts: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut deletes: Vec<u64> = Vec::new();
        let mut chunks = self.chunks.clone();
        for &t in &touched {
            let next = self.chunks.range(t + 1..).next().copied().unwrap_or(u64::MAX);
            let ranges = self.acks.clipped(t.max(self.acked_before), next);
            if ranges.is_empty() {
                if chunks.remove(&t) {
                    deletes.push(t);
                }
                continue;
            }
            for (key, bytes) in split_chunk(t, &ranges) {
                chunks.insert(key);
                puts.push((key, bytes));
            }
        }
        let state_key = keys.cursor_state(log, &name);
        let record = CursorRecord {
            acked_before: self.acked_before,
            properties: self.properties.clone(),
            labels: self.labels.clone(),
        };
        // Chunk puts first, in as many transactions as they need; the state last, with as many
        // deletes as fit; leftover deletes after it (stale chunks below the mark-delete
        // position are ignored when a cursor is opened).
        let guard =
            || Compare::mod_revision(state_key.clone(), CompareOp::Equal, self.state_revision);
        let mut batch: Vec<TxnOp> = Vec::new();
        let mut bytes = 0;
        for (key, value) in puts {
            if !batch.is_empty()
                && (bytes + value.len() > TXN_MAX_BYTES || batch.len() + 1 >= metadata::MAX_TXN_OPS)
            {
                self.send(guard(), std::mem::take(&mut batch)).await?;
                bytes = 0;
            }
            bytes += value.len();
            batch.push(TxnOp::put(keys.cursor_ack_chunk(log, &name, key), value));
        }
        batch.push(TxnOp::put(state_key.clone(), record.encode_to_vec()));
        let mut deletes = deletes.into_iter();
        for d in deletes.by_ref() {
            if batch.len() + 1 >= metadata::MAX_TXN_OPS {
                break;
            }
            batch.push(TxnOp::delete(KeyRange::key(keys.cursor_ack_chunk(log, &name, d))));
        }
        self.state_revision = self.send(guard(), batch).await?;
        let rest: Vec<TxnOp> = deletes
            .map(|d| TxnOp::delete(KeyRange::key(keys.cursor_ack_chunk(log, &name, d))))
            .collect();
        for ops in rest.chunks(metadata::MAX_TXN_OPS - 1) {
            let txn = Txn::new().and_then(ops.to_vec());
            self.meta.txn(txn).await?;
        }
        self.chunks = chunks;
        self.dirty.clear();
        Ok(())
    }

    async fn send(&self, guard: Compare, ops: Vec<TxnOp>) -> Result<i64, LogError> {
        let resp = self.meta.txn(Txn::new().when([guard]).and_then(ops)).await?;
        if !resp.succeeded {
            return Err(self.conflict());
        }
        Ok(resp.revision)
    }

    /// The names of a log's cursors, sorted.
    pub async fn list(reader: &LogReader, log: LogId) -> Result<Vec<String>, LogError> {
        let prefix = reader.keys().cursors_prefix(log);
        let resp = reader.meta().range(RangeRequest::prefix(prefix.clone()).keys_only()).await?;
        let mut names: Vec<String> = resp
            .kvs
            .iter()
            .filter_map(|kv| {
                let rest = std::str::from_utf8(&kv.key[prefix.len()..]).ok()?;
                rest.strip_suffix("/state").filter(|n| !n.contains('/')).map(str::to_owned)
            })
            .collect();
        names.sort();
        Ok(names)
    }

    /// Deletes a cursor and its acknowledgements.
    pub async fn delete(reader: &LogReader, log: LogId, name: &str) -> Result<(), LogError> {
        validate_cursor_name(name)?;
        let keys = reader.keys();
        let state = keys.cursor_state(log, name);
        let mut all = keys.cursors_prefix(log);
        all.extend_from_slice(name.as_bytes());
        all.push(b'/');
        let txn = Txn::new()
            .when([Compare::create_revision(state, CompareOp::Greater, 0)])
            .and_then([TxnOp::delete(KeyRange::prefix(all))]);
        if reader.meta().txn(txn).await?.succeeded {
            Ok(())
        } else {
            Err(LogError::CursorNotFound { log, name: name.to_owned() })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn ack_set_matches_a_plain_set(ops in proptest::collection::vec((0u64..200, 1u64..6), 0..120), bound in 0u64..200) {
            let mut set = AckSet::default();
            let mut plain = std::collections::BTreeSet::new();
            for (s, n) in ops {
                set.insert(s, s + n);
                plain.extend(s..s + n);
            }
            for o in 0..210 {
                prop_assert_eq!(set.covering(o).is_some(), plain.contains(&o), "offset {}", o);
            }
            // Ranges are disjoint and never adjacent.
            let r: Vec<(u64, u64)> = set.ranges.iter().map(|(s, e)| (*s, *e)).collect();
            for w in r.windows(2) {
                prop_assert!(w[0].1 < w[1].0, "{:?}", r);
            }
            prop_assert_eq!(set.count_in(0, 300), plain.len() as u64);
            set.remove_below(bound);
            prop_assert_eq!(set.count_in(0, 300), plain.iter().filter(|o| **o >= bound).count() as u64);
        }

        #[test]
        fn chunks_round_trip_and_stay_small(gaps in proptest::collection::vec((1u64..1000, 1u64..50), 1..3000)) {
            let mut ranges = Vec::new();
            let mut at = 7;
            for (gap, len) in gaps {
                ranges.push((at + gap, at + gap + len));
                at += gap + len;
            }
            let pieces = split_chunk(7, &ranges);
            let mut back = Vec::new();
            for (key, bytes) in &pieces {
                prop_assert!(bytes.len() <= CHUNK_MAX_BYTES);
                back.extend(decode_ranges(*key, bytes).map_err(|e| TestCaseError::fail(e.to_string()))?);
            }
            prop_assert_eq!(back, ranges);
            prop_assert_eq!(pieces[0].0, 7);
        }
    }

    #[test]
    fn a_corrupt_chunk_is_an_error() {
        assert!(decode_ranges(0, &[0x80]).is_err());
        assert!(decode_ranges(0, &[1, 0]).is_err(), "a zero-length range");
    }
}
