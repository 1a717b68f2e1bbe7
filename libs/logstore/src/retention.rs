//! Trims and retention (ARCHITECTURE §5), over the metadata store and a [`LogReader`] alone, so
//! any role applies them (writers through [`LogStorage`](crate::LogStorage), the compaction
//! cycle for streams' `retention_ms` / `retention_bytes`). Timestamp search and retention use
//! the RUNNING MAXIMUM timestamp: timestamps from several writers are not monotone.

use metadata::{Compare, CompareOp, KeyRange, RangeRequest, Txn, TxnOp};

use crate::records::{Locator, LogState};
use crate::{LogEntryHeader, LogError, LogId, LogReader};

/// Makes offsets below `offset` unreadable. Never moves the start back; `offset` may not pass
/// the high watermark. Returns the start after the call.
pub async fn soft_trim(reader: &LogReader, log: LogId, offset: u64) -> Result<u64, LogError> {
    let (meta, keys) = (reader.meta(), reader.keys());
    for _ in 0..100 {
        let snap = reader.snapshot(log).await?;
        if snap.head.log_state() == LogState::Deleted {
            return Err(LogError::NotFound(log));
        }
        if offset > snap.head.next_offset {
            return Err(LogError::OffsetOutOfRange {
                log,
                offset,
                start: snap.start,
                end: snap.head.next_offset,
            });
        }
        if offset <= snap.start {
            return Ok(snap.start);
        }
        // The start's revision as read with it: a trim landing since fails the compare, so a
        // lower trim never overwrites a higher one.
        let txn = Txn::new()
            .when([Compare::mod_revision(keys.start(log), CompareOp::Equal, snap.start_revision)])
            .and_then([TxnOp::put(keys.start(log), offset.to_string())]);
        if meta.txn(txn).await?.succeeded {
            reader.moved_start(log);
            return Ok(offset);
        }
    }
    Err(LogError::unavailable(format!("could not trim log {log}: too much contention")))
}

/// Soft-trims to `offset` (the start moves first), then deletes the index pages wholly below
/// it, comparing the start as read, and the aborted transactions ended below it. Their
/// objects are reclaimed by the cleaner.
pub async fn hard_trim(reader: &LogReader, log: LogId, offset: u64) -> Result<u64, LogError> {
    let start = soft_trim(reader, log, offset).await?;
    let (meta, keys) = (reader.meta(), reader.keys());
    let snap = reader.snapshot(log).await?;
    // The pages as they stood with that head (read apart, a page spilled in between ended
    // where the head's recent runs had begun, and was deleted though it held entries above
    // the start: found by the simulation, maintenance seed 14).
    let pages = meta
        .range(RangeRequest::prefix(keys.index_prefix(log)).keys_only().at_revision(snap.revision))
        .await?;
    let firsts: Vec<u64> =
        pages.kvs.iter().filter_map(|kv| keys.parse_index_page(log, &kv.key)).collect();
    // A page ends where the next begins; the last one where the head's recent runs begin.
    let recent_start = snap.head.recent.first().map_or(snap.head.next_offset, |l| l.first_offset);
    let ends = firsts.iter().skip(1).copied().chain(std::iter::once(recent_start));
    let doomed: Vec<u64> =
        firsts.iter().zip(ends).filter(|(_, end)| *end <= start).map(|(f, _)| *f).collect();
    if let Some(last) = doomed.last() {
        let mut end = keys.index_page(log, *last);
        end.push(0);
        // Only if no page in the range was written since (a spill, a compaction's swap).
        let txn = Txn::new()
            .when([
                Compare::mod_revision(keys.start(log), CompareOp::Equal, snap.start_revision),
                Compare::mod_revision(keys.index_prefix(log), CompareOp::Less, snap.revision + 1)
                    .with_range_end(end.clone()),
            ])
            .and_then([TxnOp::delete(KeyRange::between(keys.index_prefix(log), end))]);
        meta.txn(txn).await?;
    }
    // Aborted transactions whose marker is below the start: no read needs them. Each key is
    // written once, by the commit of a marker at or past the high watermark, so none below
    // the start is ever written again.
    if snap.head.aborted_paged > 0 {
        let below = KeyRange::between(keys.aborted(log, 0), keys.aborted(log, start));
        meta.txn(Txn::new().and_then([TxnOp::delete(below)])).await?;
    }
    Ok(start)
}

/// The first row group of lake segment `loc` whose entries' running maximum timestamp (from
/// `running` before the segment) reaches `t` and that ends above `start`; `None` for other
/// segments, or ones written before row groups kept their timestamps.
fn lake_group_reaching(loc: &Locator, mut running: i64, t: i64, start: u64) -> Option<usize> {
    let groups = &loc.lake.as_ref()?.row_groups;
    if groups.iter().any(|g| g.max_timestamp == 0) {
        return None;
    }
    groups.iter().position(|g| {
        running = running.max(g.max_timestamp);
        running >= t && g.first_offset + g.records > start
    })
}

/// The row group of lake segment `loc` holding log byte position `cutoff`, if it is one
/// whose row groups place their bytes.
fn lake_group_at(loc: &Locator, cutoff: u64) -> Option<usize> {
    let groups = &loc.lake.as_ref()?.row_groups;
    let i = groups.partition_point(|g| loc.cumulative_before + g.bytes_before <= cutoff);
    i.checked_sub(1)
}

async fn locators(reader: &LogReader, log: LogId) -> Result<(Vec<Locator>, u64), LogError> {
    let snap = reader.snapshot(log).await?;
    Ok((reader.all_locators(&snap).await?, snap.start))
}

/// The first readable entry whose running-maximum timestamp is ≥ `t`, or `None` if every entry
/// is older.
pub async fn find_by_timestamp(
    reader: &LogReader,
    log: LogId,
    t: i64,
) -> Result<Option<LogEntryHeader>, LogError> {
    let (locators, start) = locators(reader, log).await?;
    // Running maxima are monotone, so the first readable run reaching `t` holds the answer
    // (or, if its qualifying entries are trimmed, a later run does).
    let from = locators
        .partition_point(|l| l.max_timestamp < t)
        .max(locators.partition_point(|l| l.end_offset() <= start));
    for (i, loc) in locators.iter().enumerate().skip(from) {
        let mut running = if i == 0 { i64::MIN } else { locators[i - 1].max_timestamp };
        // A lake segment: only the row group where the running maximum reaches `t`.
        if let Some(g) = lake_group_reaching(loc, running, t, start) {
            let before = loc.lake.iter().flat_map(|l| &l.row_groups[..g]).map(|r| r.max_timestamp);
            let mut in_group = before.fold(running, i64::max);
            for h in reader.lake_group_headers(log, loc, g).await? {
                in_group = in_group.max(h.timestamp);
                if in_group >= t && h.end_offset() > start {
                    return Ok(Some(h));
                }
            }
        }
        for h in reader.run_headers(log, loc).await? {
            running = running.max(h.timestamp);
            if running >= t && h.end_offset() > start {
                return Ok(Some(h));
            }
        }
    }
    Ok(None)
}

/// The offset retention may trim to (never past the high watermark, never below the current
/// start): everything whose running-max timestamp is below `now_ms − retention_ms`, and the
/// oldest entries beyond the newest `retention_bytes` payload bytes.
pub async fn trim_offset(
    reader: &LogReader,
    log: LogId,
    retention_ms: Option<i64>,
    retention_bytes: Option<u64>,
    now_ms: i64,
) -> Result<u64, LogError> {
    let info = reader.info(log).await?;
    let mut trim = info.first_offset;
    if let Some(ms) = retention_ms {
        let cutoff = now_ms.saturating_sub(ms);
        let by_time = match find_by_timestamp(reader, log, cutoff).await? {
            Some(h) => h.offset,
            None => info.next_offset,
        };
        trim = trim.max(by_time);
    }
    if let Some(keep) = retention_bytes
        && info.bytes > keep
    {
        // The first entry boundary after which at most `keep` bytes remain.
        let cutoff = info.bytes - keep;
        let (locators, _) = locators(reader, log).await?;
        let i = locators.partition_point(|l| l.cumulative_before + l.payload_bytes <= cutoff);
        let by_bytes = match locators.get(i) {
            None => info.next_offset,
            Some(loc) => {
                // A lake segment: only the row group holding the cutoff (and the next one's
                // first offset when the cutoff is past its last entry).
                let headers = match lake_group_at(loc, cutoff) {
                    Some(g) => reader.lake_group_headers(log, loc, g).await?,
                    None => reader.run_headers(log, loc).await?,
                };
                let next = match lake_group_at(loc, cutoff) {
                    Some(g) => loc
                        .lake
                        .as_ref()
                        .and_then(|l| l.row_groups.get(g + 1))
                        .map_or(loc.end_offset(), |n| n.first_offset),
                    None => loc.end_offset(),
                };
                headers
                    .iter()
                    .find(|h| h.cumulative_size - h.entry_size >= cutoff)
                    .map_or(next, |h| h.offset)
            }
        };
        trim = trim.max(by_bytes);
    }
    Ok(trim.min(info.next_offset))
}

/// Applies retention to one log: hard-trims to [`trim_offset`] when that passes the start.
/// Returns the new start, or `None` when nothing was trimmed.
pub async fn apply(
    reader: &LogReader,
    log: LogId,
    retention_ms: Option<i64>,
    retention_bytes: Option<u64>,
    now_ms: i64,
) -> Result<Option<u64>, LogError> {
    if retention_ms.is_none() && retention_bytes.is_none() {
        return Ok(None);
    }
    let start = reader.info(log).await?.first_offset;
    let to = trim_offset(reader, log, retention_ms, retention_bytes, now_ms).await?;
    if to <= start {
        return Ok(None);
    }
    Ok(Some(hard_trim(reader, log, to).await?))
}
