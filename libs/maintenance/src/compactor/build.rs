//! A rewrite's segment: the runs it takes, read several at once and in order, written through
//! one [`SegmentWriter`] in the log's segment format (plain, or its lake table's Parquet data
//! file).

use bytes::Bytes;
use futures::StreamExt;

use super::plan::{LakeView, Rewrite};
use crate::lakes::{self, LakeLogs};
use logstore::LogReader;
use logstore::records::{LakeFile, Locator};
use logstore::{LogEntry, LogError, LogId};

/// Runs a rewrite fetches at once.
const RUN_FETCHES: usize = 16;

/// What a rewrite reads of one run it takes.
enum Run {
    /// A WAL chunk's or plain segment's entries, and the run's ingest time.
    Entries(Vec<LogEntry>, i64),
    /// A lake segment's rows.
    Rows(Vec<lake::segment::Served>),
}

/// A segment built, not yet stored.
pub(crate) struct Built {
    pub object: Bytes,
    /// Its index locator (`compacted_claim` set; placed at the rewrite's first offset).
    pub locator: Locator,
    /// A lake segment's Parquet file, for its table's commit.
    pub lake: Option<lake::segment::Segment>,
    /// The rows of a lake segment its table must not show (aborted transactions' records and
    /// markers), by position in the file.
    pub hidden: Vec<u64>,
}

/// Reads the runs of `rw` and writes them as one segment of `log`, claimed at `claim`.
pub(crate) async fn build(
    reader: &LogReader,
    lakes: &LakeLogs,
    log: LogId,
    lake: Option<&LakeView>,
    rw: &Rewrite,
    claim: i64,
) -> Result<Built, LogError> {
    let plain_bytes = rw.runs.iter().map(|l| l.byte_len as usize).sum();
    let mut writer = match lake {
        Some(l) => SegmentWriter::lake(l, lakes.row_group_bytes),
        None => SegmentWriter::plain(log, plain_bytes),
    };
    // One ranged GET per run, several at once and taken in order: a log written in many small
    // flushes has thousands of chunks, and one GET at a time made a cycle take minutes. The
    // segment's size bounds what they hold together. Each fetch owns what it reads with (a
    // future borrowing the run list is not Send for every lifetime the role's task needs). A
    // lake segment merged is read as its rows (each as written); anything else as entries (a
    // lake log's rows then take their run's ingest time).
    let fetches: Vec<_> = rw
        .runs
        .iter()
        .map(|loc| {
            let (reader, loc) = (reader.clone(), loc.clone());
            async move {
                if loc.lake.is_some() {
                    return Ok(Run::Rows(reader.lake_served(log, &loc).await?));
                }
                let ingest_ms = loc.ingest_time();
                Ok::<_, LogError>(Run::Entries(reader.run_entries(log, &loc).await?, ingest_ms))
            }
        })
        .collect();
    let mut runs = futures::stream::iter(fetches).buffered(RUN_FETCHES);
    let (mut records, mut entries) = (0u64, 0u32);
    while let Some(run) = runs.next().await {
        match run? {
            Run::Entries(got, ingest_ms) => {
                for e in got {
                    records += u64::from(e.header.record_count);
                    entries += 1;
                    writer.push_entry(e, ingest_ms)?;
                }
            }
            Run::Rows(rows) => {
                writer.merged_lake += 1;
                for s in rows {
                    records += u64::from(writer.push_row(s)?);
                    entries += 1;
                }
            }
        }
    }
    // A lake segment with transactional batches hides the aborted ones' rows from its table:
    // the plan kept it below the last stable offset, so each of its transactions has ended and
    // the log's aborted index names every abort among them.
    if writer.transactional() {
        writer.aborted = aborted_in(reader, log, rw.first_offset, rw.end_offset).await?;
    }
    let payload_bytes = rw.runs.iter().map(|l| l.payload_bytes).sum();
    finish(log, rw, writer, Counted { records, entries, payload_bytes }, claim)
}

/// Every aborted transaction of `log` overlapping `[from, to)`: (producer id, first offset,
/// marker offset).
pub(crate) async fn aborted_in(
    reader: &LogReader,
    log: LogId,
    from: u64,
    to: u64,
) -> Result<Vec<(i64, u64, u64)>, LogError> {
    let found = reader.aborted_overlapping(log, from, to).await?;
    Ok(found.iter().map(|a| (a.producer_id, a.first_offset, a.last_offset)).collect())
}

/// What a segment's entries add up to.
pub(crate) struct Counted {
    /// Offsets they span (a compacted log's entries span offsets that hold no record now).
    pub records: u64,
    pub entries: u32,
    pub payload_bytes: u64,
}

/// The segment `writer` holds for the rewrite `rw`, and its index locator.
pub(crate) fn finish(
    log: LogId,
    rw: &Rewrite,
    writer: SegmentWriter,
    counted: Counted,
    claim: i64,
) -> Result<Built, LogError> {
    let Counted { records, entries, payload_bytes } = counted;
    let (a, b) = (rw.first_offset, rw.end_offset);
    if records != b - a {
        return Err(LogError::Corrupt(format!(
            "log {log}: chunks [{a}, {b}) hold {records} records"
        )));
    }
    let (Some(first), Some(last)) = (rw.runs.first(), rw.runs.last()) else {
        return Err(LogError::Internal("a rewrite of no runs".to_owned()));
    };
    let claim = u64::try_from(claim)
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
        payload_bytes,
        compacted_claim: claim,
        ingest_ms: rw.runs.iter().map(Locator::ingest_time).max().unwrap_or_default(),
        lake: None,
    };
    let (object, lake, hidden) = match writer.finish(log)? {
        Written::Plain { object, byte_start, byte_len } => {
            locator.byte_start = byte_start;
            locator.byte_len = byte_len;
            (object, None, Vec::new())
        }
        Written::Lake { segment, place, hidden } => {
            locator.byte_len = segment.file.len() as u64;
            locator.ingest_ms = segment.ingest_ms.1;
            locator.lake = Some(place);
            (segment.file.clone(), Some(segment), hidden)
        }
    };
    Ok(Built { object, locator, lake, hidden })
}

/// One entry of a lake segment to write: its record count, its timestamp and the row.
struct Row {
    record_count: u32,
    timestamp: i64,
    served: lake::segment::Served,
}

/// Where a rewrite's entries go, in the log's segment format. The one seam every segment
/// format is written through.
pub(crate) struct SegmentWriter {
    format: Format,
    /// Lake segments merged in so far.
    merged_lake: usize,
    /// The log's aborted transactions overlapping a lake segment with transactional batches.
    aborted: Vec<(i64, u64, u64)>,
}

enum Format {
    /// A plain segment: the entries as stored, as one chunk of one log.
    Plain { builder: wal::ObjectBuilder },
    /// A lake segment: the rows, written as the table's Parquet data file at the end.
    Lake { rows: Vec<Row>, options: lake::segment::Options, table_full: bool },
}

/// A segment written.
pub(crate) enum Written {
    /// A plain segment: the object and its one chunk's bytes in it.
    Plain { object: Bytes, byte_start: u64, byte_len: u64 },
    /// A lake segment, its place map and the rows its table must not show.
    Lake { segment: lake::segment::Segment, place: LakeFile, hidden: Vec<u64> },
}

impl SegmentWriter {
    /// A plain segment of `log`, about `capacity` bytes.
    pub(crate) fn plain(log: LogId, capacity: usize) -> Self {
        let builder = plain_builder(log, capacity);
        SegmentWriter { format: Format::Plain { builder }, merged_lake: 0, aborted: Vec::new() }
    }

    /// A lake log's segment: its table's data file (row groups of `row_group_bytes`, else the
    /// format's default).
    fn lake(view: &LakeView, row_group_bytes: Option<usize>) -> Self {
        let mut options = lake::segment::Options {
            partition: i32::try_from(view.log.partition).unwrap_or(i32::MAX),
            ..Default::default()
        };
        if let Some(bytes) = row_group_bytes {
            options.row_group_bytes = bytes;
        }
        let format = Format::Lake { rows: Vec::new(), options, table_full: view.full };
        SegmentWriter { format, merged_lake: 0, aborted: Vec::new() }
    }

    /// An entry as stored; `ingest_ms` is its run's ingest time.
    pub(crate) fn push_entry(&mut self, e: LogEntry, ingest_ms: i64) -> Result<(), LogError> {
        match &mut self.format {
            Format::Plain { builder, .. } => {
                let h = &e.header;
                builder.push_entry(h.record_count, h.timestamp, &e.payload)?;
            }
            Format::Lake { rows, .. } => {
                let attributes =
                    recordbatch::BatchHeader::parse(&e.payload).map_or(0, |h| h.attributes);
                let stored_len = u32::try_from(e.payload.len()).unwrap_or(u32::MAX);
                let entry =
                    lake::segment::Entry { offset: e.header.offset, ingest_ms, batch: e.payload };
                rows.push(Row {
                    record_count: e.header.record_count,
                    timestamp: e.header.timestamp,
                    served: lake::segment::Served { entry, stored_len, attributes },
                });
            }
        }
        Ok(())
    }

    /// A lake segment holding transaction batches or markers.
    fn transactional(&self) -> bool {
        const TXN_BITS: i16 = 0x30;
        match &self.format {
            Format::Lake { rows, .. } => rows.iter().any(|r| r.served.attributes & TXN_BITS != 0),
            Format::Plain { .. } => false,
        }
    }

    /// A row of a lake segment merged (read back as written); returns its record count.
    fn push_row(&mut self, s: lake::segment::Served) -> Result<u32, LogError> {
        let h = recordbatch::BatchHeader::parse(&s.entry.batch)
            .map_err(|e| LogError::Corrupt(format!("a lake row's batch: {e}")))?;
        let record_count = u32::try_from(h.record_count).unwrap_or(0);
        let row = Row { record_count, timestamp: h.max_timestamp, served: s };
        match &mut self.format {
            Format::Lake { rows, .. } => rows.push(row),
            Format::Plain { builder, .. } => {
                builder.push_entry(row.record_count, row.timestamp, &row.served.entry.batch)?;
            }
        }
        Ok(record_count)
    }

    /// The segment. A lake log's is a plain one when an entry is no record batch (a stream
    /// written around its format) or its table takes no more files, unless lake rows (framed
    /// again, not as stored) would go in with it: then it is refused for now.
    fn finish(self, log: LogId) -> Result<Written, LogError> {
        let (merged_lake, aborted) = (self.merged_lake, self.aborted);
        let (rows, options, table_full) = match self.format {
            Format::Plain { builder } => return plain(builder),
            Format::Lake { rows, options, table_full } => (rows, options, table_full),
        };
        if table_full {
            tracing::error!(
                %log,
                "its lake table's state is over {} bytes (manifests are not merged yet): this segment is written as a plain one",
                lakes::MAX_TABLE_STATE
            );
            if merged_lake > 0 {
                return Err(LogError::Unavailable {
                    message: format!("log {log}: its lake table is full; lake segments wait"),
                    outcome_unknown: false,
                });
            }
            return plain_of(log, rows);
        }
        let served: Vec<lake::segment::Served> = rows.iter().map(|r| r.served.clone()).collect();
        match lake::segment::rewrite(&served, &options) {
            Ok(segment) => {
                let max_ts =
                    |b: &Bytes| recordbatch::BatchHeader::parse(b).map_or(0, |h| h.max_timestamp);
                let place = lakes::lake_file(
                    &segment,
                    served
                        .iter()
                        .map(|r| (r.entry.offset, u64::from(r.stored_len), max_ts(&r.entry.batch))),
                );
                let hidden = lake::deletes::hidden_rows(
                    served.iter().map(|r| {
                        let h = recordbatch::BatchHeader::parse(&r.entry.batch).ok();
                        let pid = h.as_ref().map_or(-1, |h| h.producer.producer_id);
                        let records = h.map_or(0, |h| u32::try_from(h.record_count).unwrap_or(0));
                        (r.attributes, pid, r.entry.offset, records)
                    }),
                    &aborted,
                );
                Ok(Written::Lake { segment, place, hidden })
            }
            Err(lake::LakeError::Batch { offset, source }) if merged_lake == 0 => {
                tracing::warn!(%log, offset, error = %source, "an entry of a lake log is no record batch; its segment is written as a plain one");
                plain_of(log, rows)
            }
            Err(e) => Err(lakes::lake_error(e)),
        }
    }
}

/// A lake log's rows as a plain segment.
fn plain_of(log: LogId, rows: Vec<Row>) -> Result<Written, LogError> {
    let mut builder = plain_builder(log, 0);
    for r in rows {
        builder.push_entry(r.record_count, r.timestamp, &r.served.entry.batch)?;
    }
    plain(builder)
}

/// A plain segment's object, about `capacity` bytes, its one chunk `log`'s.
fn plain_builder(log: LogId, capacity: usize) -> wal::ObjectBuilder {
    let mut builder = wal::ObjectBuilder::with_capacity(wal::ObjectKind::Segment, capacity);
    builder.begin_chunk(log.0);
    builder
}

fn plain(builder: wal::ObjectBuilder) -> Result<Written, LogError> {
    let (object, metas) = builder.finish()?;
    let meta = metas.first().ok_or_else(|| LogError::Internal("empty segment".to_owned()))?;
    Ok(Written::Plain { object, byte_start: meta.byte_start, byte_len: meta.byte_len })
}
