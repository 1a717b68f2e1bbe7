//! The reader's one door to the lake segment format (`libs/columnar`): a lake segment's
//! footer (cached), its row groups as entries framed again, as the rows a merge rewrites, and
//! as headers. [`LogReader::fetch_run`](super) sends a run here when its locator says it is a
//! lake segment; nothing else of Level 1 reads Parquet.

use std::sync::Arc;

use bytes::Bytes;

use super::{Located, LogReader, Missing, Want};
use crate::records::Locator;
use crate::{LogEntryHeader, LogError, LogId};

/// Parsed footers of lake segments by object path (each some tens of KiB decoded).
pub(super) type LakeFooterCache = quick_cache::sync::Cache<String, Arc<columnar::segment::Footer>>;

impl LogReader {
    /// The parsed footer of the lake segment `loc` names: one ranged GET of its last
    /// `footer_len` bytes, checked against the index's checksum before it is decoded, and its
    /// row-group table against the index's; cached.
    async fn lake_footer(
        &self,
        log: LogId,
        loc: &Locator,
    ) -> Result<Arc<columnar::segment::Footer>, Missing> {
        let path = loc.object(log);
        if let Some(f) = self.lake_footers.get(path.as_ref()) {
            return Ok(f);
        }
        let corrupt = |what: String| Missing::Other(LogError::Corrupt(format!("{path}: {what}")));
        let Some(place) = &loc.lake else { return Err(corrupt("not a lake segment".to_owned())) };
        if place.footer_len > columnar::segment::MAX_FOOTER as u64
            || place.footer_len > loc.byte_len
        {
            return Err(corrupt(format!("a footer of {} bytes", place.footer_len)));
        }
        let at = loc.byte_len - place.footer_len;
        let tail = self.get_range(&path, at..loc.byte_len).await?;
        let footer = columnar::segment::Footer::parse(&tail, place.footer_crc32c)
            .map_err(|e| corrupt(e.to_string()))?;
        let agrees = footer.row_groups().len() == place.row_groups.len()
            && footer.row_groups().iter().zip(&place.row_groups).all(|(f, i)| {
                (f.first_offset, f.records, f.start, f.len, f.crc32c)
                    == (i.first_offset, i.records, i.start, i.len, i.crc32c)
            });
        if !agrees {
            return Err(corrupt("its row groups disagree with the index".to_owned()));
        }
        let footer = Arc::new(footer);
        self.lake_footers.insert(path.to_string(), footer.clone());
        Ok(footer)
    }

    /// Every row group of the lake segment `loc` names, read back as stored rows (the
    /// compactor's input when it merges lake segments: each entry's ingest time, stored
    /// length and attributes as written, so a merge writes the same rows).
    pub async fn lake_served(
        &self,
        log: LogId,
        loc: &Locator,
    ) -> Result<Vec<columnar::segment::Served>, LogError> {
        let path = loc.object(log);
        let corrupt = |what: String| LogError::Corrupt(format!("{path}: {what}"));
        let Some(place) = &loc.lake else { return Err(corrupt("not a lake segment".to_owned())) };
        let footer = self.lake_footer(log, loc).await.map_err(LogError::from)?;
        let mut out = Vec::new();
        for (i, g) in place.row_groups.iter().enumerate() {
            let bytes =
                self.get_range(&path, g.start..g.start + g.len).await.map_err(LogError::from)?;
            out.extend(
                columnar::segment::read_row_group(&footer, i, bytes)
                    .map_err(|e| corrupt(format!("row group {i}: {e}")))?,
            );
        }
        let records: u64 = out.iter().map(|s| u64::from(s.entry_records())).sum();
        if records != loc.record_count {
            return Err(corrupt(format!(
                "{records} records where the index says {}",
                loc.record_count
            )));
        }
        Ok(out)
    }

    /// The entries of a lake segment `want` needs, a row group at a time (one ranged GET
    /// each, through the byte-range cache): each batch framed again from its rows, every
    /// row's checksum verified, and framed as an entry as stored (docs/lake.md). An
    /// entry's timestamp is its batch's largest; its log position counts its stored length.
    pub(super) async fn fetch_row_groups(
        &self,
        log: LogId,
        loc: &Locator,
        want: Want,
    ) -> Result<Vec<Located>, Missing> {
        let path = loc.object(log);
        let corrupt = |what: String| Missing::Other(LogError::Corrupt(format!("{path}: {what}")));
        let Some(place) = &loc.lake else { return Err(corrupt("not a lake segment".to_owned())) };
        let footer = self.lake_footer(log, loc).await?;
        let groups = &place.row_groups;
        let mut i = groups.partition_point(|g| g.first_offset + g.records <= want.from);
        let (mut out, mut taken_records, mut taken_bytes) = (Vec::new(), 0u64, 0u64);
        'groups: while i < groups.len() {
            // Nothing more wanted: no GET of the next group.
            if taken_records >= want.max_records
                || taken_bytes >= want.max_bytes
                || out.len() >= want.max_entries
            {
                break;
            }
            let g = groups[i];
            let bytes = self.get_cached(&path, g.start, g.start + g.len).await?;
            let served = columnar::segment::read_row_group(&footer, i, bytes)
                .map_err(|e| corrupt(format!("row group {i}: {e}")))?;
            let mut framed = Vec::with_capacity(
                served.iter().map(|s| s.entry.batch.len() + wal::ENTRY_HEADER_LEN).sum(),
            );
            let mut heads = Vec::with_capacity(served.len());
            let (mut before, mut records) = (loc.cumulative_before + g.bytes_before, 0u64);
            for s in &served {
                let h = recordbatch::BatchHeader::parse(&s.entry.batch)
                    .map_err(|e| corrupt(format!("the batch at {}: {e}", s.entry.offset)))?;
                let count = u32::try_from(h.record_count)
                    .map_err(|_| corrupt(format!("{} records", h.record_count)))?;
                let at = framed.len();
                wal::frame_entry(&mut framed, count, h.max_timestamp, &s.entry.batch)
                    .map_err(|e| Missing::Other(e.into()))?;
                let size = s.entry.batch.len() as u64;
                heads.push((
                    at,
                    LogEntryHeader {
                        offset: s.entry.offset,
                        record_count: count,
                        timestamp: h.max_timestamp,
                        entry_size: size,
                        cumulative_size: before + size,
                    },
                ));
                before += u64::from(s.stored_len);
                records += u64::from(count);
            }
            if records != g.records || heads.first().map(|(_, h)| h.offset) != Some(g.first_offset)
            {
                return Err(corrupt(format!(
                    "row group {i} holds other records than the index says"
                )));
            }
            let fetched = Bytes::from(framed);
            for (at, header) in heads {
                if header.end_offset() <= want.from {
                    continue;
                }
                if taken_records >= want.max_records
                    || taken_bytes >= want.max_bytes
                    || out.len() >= want.max_entries
                {
                    break 'groups;
                }
                let len = wal::ENTRY_HEADER_LEN + header.entry_size as usize;
                taken_records += u64::from(header.record_count);
                taken_bytes += header.entry_size;
                out.push(Located {
                    header,
                    object: path.clone(),
                    payload: fetched.slice(at + wal::ENTRY_HEADER_LEN..at + len),
                    byte_start: g.start,
                    byte_len: len as u64,
                    fetched: fetched.clone(),
                    at,
                });
            }
            i += 1;
        }
        Ok(out)
    }

    /// The headers of the entries of row group `i` of the lake segment `loc` (one ranged GET).
    pub(crate) async fn lake_group_headers(
        &self,
        log: LogId,
        loc: &Locator,
        i: usize,
    ) -> Result<Vec<LogEntryHeader>, LogError> {
        let Some(g) = loc.lake.as_ref().and_then(|l| l.row_groups.get(i)) else {
            return Err(LogError::Internal(format!("no row group {i} in {}", loc.object(log))));
        };
        let want = Want { from: g.first_offset, max_records: g.records, ..Want::ALL };
        let got = self.fetch_run(log, loc, want).await.map_err(LogError::from)?;
        Ok(got.into_iter().map(|l| l.header).collect())
    }
}
