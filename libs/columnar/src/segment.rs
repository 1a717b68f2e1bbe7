//! Writing a segment file from a log's entries, and reading one row group of it back as
//! batches.

use std::sync::Arc;

use bytes::Bytes;
use parquet::basic::Compression;
use parquet::column::reader::get_typed_column_reader;
use parquet::data_type::{ByteArray, ByteArrayType, DataType, Int32Type, Int64Type};
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use parquet::file::properties::{EnabledStatistics, ReaderProperties, WriterProperties};
use parquet::file::reader::{ChunkReader, Length, RowGroupReader};
use parquet::file::serialized_reader::SerializedRowGroupReader;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnPath;
use recordbatch::{Framing, ProducerFields, Record};

use crate::schema::col;
use crate::{LakeError, record_crc};

/// One entry of a log: a Kafka RecordBatch v2 whose first record is at `offset`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub offset: u64,
    /// When the log took it (ms): its records' ingest timestamp. The running maximum over a
    /// segment is written, so `ingest_ts` never goes back within a log.
    pub ingest_ms: i64,
    pub batch: Bytes,
}

/// An entry read back from a segment: its batch framed again, and the length it was stored
/// with (the log's byte positions count that; a compressed batch comes back longer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    pub entry: Entry,
    pub stored_len: u32,
    /// The stored batch's attributes (its compression codec included; the batch served is
    /// uncompressed).
    pub attributes: i16,
}

impl Served {
    /// Its batch's record count (0 for a batch too short to say).
    pub fn entry_records(&self) -> u32 {
        recordbatch::BatchHeader::parse(&self.entry.batch)
            .map_or(0, |h| u32::try_from(h.record_count).unwrap_or(0))
    }
}

/// How a segment is written.
#[derive(Clone, Debug)]
pub struct Options {
    /// The stream partition the log is.
    pub partition: i32,
    /// A row group ends at the first batch boundary after this many bytes of keys, values
    /// and headers (default 1 MiB: one Kafka fetch of a partition is about one row group).
    pub row_group_bytes: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { partition: 0, row_group_bytes: 1 << 20 }
    }
}

/// One row group's place in the file: its records' first offset and count, and its bytes
/// (its column chunks are contiguous, so one ranged GET fetches it) with their CRC-32C,
/// checked before a byte of them is decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowGroup {
    pub first_offset: u64,
    pub records: u64,
    pub start: u64,
    pub len: u64,
    pub crc32c: u32,
}

/// The footer's key holding the row-group table (`first,records,start,len,crc;…`).
const ROW_GROUPS_KEY: &str = "lakelog.row_groups";

fn table_text(groups: &[RowGroup]) -> String {
    let rows: Vec<String> = groups
        .iter()
        .map(|g| format!("{},{},{},{},{}", g.first_offset, g.records, g.start, g.len, g.crc32c))
        .collect();
    rows.join(";")
}

fn parse_table(text: &str) -> Option<Vec<RowGroup>> {
    text.split(';')
        .map(|row| {
            let mut f = row.split(',');
            let mut next = || f.next()?.parse::<u64>().ok();
            let g = RowGroup {
                first_offset: next()?,
                records: next()?,
                start: next()?,
                len: next()?,
                crc32c: u32::try_from(next()?).ok()?,
            };
            Some(g)
        })
        .collect()
}

/// A written segment file and what a table and a reader need of it.
#[derive(Clone, Debug)]
pub struct Segment {
    pub file: Bytes,
    pub row_groups: Vec<RowGroup>,
    pub first_offset: u64,
    /// One past the last record's offset.
    pub end_offset: u64,
    /// Smallest and largest record timestamps (ms).
    pub timestamps_ms: (i64, i64),
    /// First and last ingest timestamps (ms).
    pub ingest_ms: (i64, i64),
    /// The footer's length (the file's last bytes) and CRC-32C, checked before it is decoded:
    /// what a reader keeps of the segment besides its row groups.
    pub footer_len: u64,
    pub footer_crc32c: u32,
}

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;

/// The UTC day (days since 1970-01-01) of a time in milliseconds: a lake table's partition.
pub fn day_of(ms: i64) -> i32 {
    i32::try_from(ms.div_euclid(DAY_MS)).unwrap_or(if ms < 0 { i32::MIN } else { i32::MAX })
}

/// Where a run of a log's entries must be cut so each segment holds one ingest day: the
/// indexes of the entries that start a new day, by the running maximum of their ingest times
/// (what the segment writes). Empty when the run is one day.
pub fn day_cuts(entries: &[Entry]) -> Vec<usize> {
    let mut cuts = Vec::new();
    let mut ingest = i64::MIN;
    let mut day = None;
    for (i, e) in entries.iter().enumerate() {
        ingest = ingest.max(e.ingest_ms);
        let d = day_of(ingest);
        if day.is_some_and(|prev| prev != d) {
            cuts.push(i);
        }
        day = Some(d);
    }
    cuts
}

/// What a row holds besides its record: its place and its batch's framing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RowFields {
    offset: i64,
    /// As stored: microseconds, saturating.
    ingest_micros: i64,
    partition: i32,
    batch_offset: i64,
    framing: Framing,
    /// The stored batch's length.
    batch_bytes: i32,
}

/// A row's checksum: [`record_crc`] continued over its other fields (big-endian), so a
/// damaged offset, time, partition or framing field is found as surely as a damaged value.
fn row_crc(f: &RowFields, r: &Record) -> u32 {
    let p = f.framing.producer;
    let mut crc = record_crc(r);
    for b in [
        &f.offset.to_be_bytes()[..],
        &f.ingest_micros.to_be_bytes(),
        &f.partition.to_be_bytes(),
        &f.batch_offset.to_be_bytes(),
        &f.framing.attributes.to_be_bytes(),
        &f.framing.base_timestamp.to_be_bytes(),
        &f.framing.max_timestamp.to_be_bytes(),
        &p.producer_id.to_be_bytes(),
        &p.producer_epoch.to_be_bytes(),
        &p.base_sequence.to_be_bytes(),
        &f.batch_bytes.to_be_bytes(),
    ] {
        crc = crc32c::crc32c_append(crc, b);
    }
    crc
}

/// Microseconds of Iceberg's `timestamptz` from Kafka's milliseconds (saturating).
pub fn micros(ms: i64) -> i64 {
    ms.saturating_mul(1000)
}

/// One row group's columns, filled record by record.
#[derive(Default)]
struct Columns {
    offset: Vec<i64>,
    timestamp: Vec<i64>,
    ingest: Vec<i64>,
    partition: Vec<i32>,
    key: Vec<ByteArray>,
    key_def: Vec<i16>,
    value: Vec<ByteArray>,
    value_def: Vec<i16>,
    header_key: Vec<ByteArray>,
    header_key_def: Vec<i16>,
    header_value: Vec<ByteArray>,
    header_value_def: Vec<i16>,
    header_rep: Vec<i16>,
    crc: Vec<i32>,
    batch_offset: Vec<i64>,
    batch_attributes: Vec<i32>,
    batch_base_timestamp: Vec<i64>,
    batch_max_timestamp: Vec<i64>,
    producer_id: Vec<i64>,
    producer_epoch: Vec<i32>,
    base_sequence: Vec<i32>,
    timestamp_delta: Vec<i64>,
    batch_bytes: Vec<i32>,
    /// Key, value and header bytes so far.
    bytes: usize,
}

fn bytes_of(b: &Option<Bytes>) -> ByteArray {
    ByteArray::from(b.clone().unwrap_or_default())
}

impl Columns {
    fn push(
        &mut self,
        offset: u64,
        ingest_ms: i64,
        partition: i32,
        h: &recordbatch::BatchHeader,
        batch_bytes: i32,
        r: &Record,
    ) {
        self.offset.push(offset as i64);
        self.timestamp.push(micros(r.timestamp_ms));
        self.ingest.push(micros(ingest_ms));
        self.partition.push(partition);
        for (v, def, col) in [
            (&r.key, &mut self.key_def, &mut self.key),
            (&r.value, &mut self.value_def, &mut self.value),
        ] {
            def.push(i16::from(v.is_some()));
            if v.is_some() {
                self.bytes += v.as_ref().map_or(0, Bytes::len);
                col.push(bytes_of(v));
            }
        }
        if r.headers.is_empty() {
            self.header_key_def.push(0);
            self.header_value_def.push(0);
            self.header_rep.push(0);
        }
        for (i, (k, v)) in r.headers.iter().enumerate() {
            self.header_rep.push(i16::from(i > 0));
            self.header_key_def.push(1);
            self.header_key.push(ByteArray::from(k.clone()));
            self.header_value_def.push(if v.is_some() { 2 } else { 1 });
            if v.is_some() {
                self.header_value.push(bytes_of(v));
            }
            self.bytes += k.len() + v.as_ref().map_or(0, Bytes::len);
        }
        let fields = RowFields {
            offset: offset as i64,
            ingest_micros: micros(ingest_ms),
            partition,
            batch_offset: h.base_offset,
            framing: Framing {
                attributes: h.attributes,
                base_timestamp: h.base_timestamp,
                max_timestamp: h.max_timestamp,
                producer: h.producer,
            },
            batch_bytes,
        };
        self.crc.push(row_crc(&fields, r) as i32);
        self.batch_offset.push(h.base_offset);
        self.batch_attributes.push(i32::from(h.attributes));
        self.batch_base_timestamp.push(h.base_timestamp);
        self.batch_max_timestamp.push(h.max_timestamp);
        self.producer_id.push(h.producer.producer_id);
        self.producer_epoch.push(i32::from(h.producer.producer_epoch));
        self.base_sequence.push(h.producer.base_sequence);
        self.timestamp_delta.push(r.timestamp_ms.wrapping_sub(h.base_timestamp));
        self.batch_bytes.push(batch_bytes);
    }
}

fn properties() -> WriterProperties {
    let mut b = WriterProperties::builder()
        .set_compression(Compression::LZ4_RAW)
        // Keys and values are rarely repeated: dictionaries and their statistics cost encode
        // time (measured 2x) for no gain. Offsets and times keep page statistics for pruning.
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::None)
        .set_data_page_size_limit(1 << 20)
        .set_created_by("lakelog".to_owned());
    for c in ["offset", "timestamp", "ingest_ts", "partition"] {
        b = b.set_column_statistics_enabled(ColumnPath::from(c), EnabledStatistics::Page);
    }
    b.build()
}

fn write_column<T: DataType>(
    c: &mut parquet::file::writer::SerializedColumnWriter<'_>,
    values: &[T::T],
    def: Option<&[i16]>,
    rep: Option<&[i16]>,
) -> Result<(), LakeError> {
    c.typed::<T>().write_batch(values, def, rep)?;
    Ok(())
}

/// Writes `entries` (one log's, in offset order, gap-free) as one segment file.
pub fn write(entries: &[Entry], opts: &Options) -> Result<Segment, LakeError> {
    write_rows(entries.iter().map(|e| (e, None)), opts)
}

/// Writes entries read back from segments (a merge of small ones) as one segment file: each
/// row as it was (its stored batch length and attributes, its ingest time), so the rows a
/// merge replaces and the rows it writes are the same.
pub fn rewrite(served: &[Served], opts: &Options) -> Result<Segment, LakeError> {
    write_rows(served.iter().map(|s| (&s.entry, Some((s.stored_len, s.attributes)))), opts)
}

/// [`write`] with each entry's stored length and attributes, where they are not its batch's.
fn write_rows<'a>(
    entries: impl Iterator<Item = (&'a Entry, Option<(u32, i16)>)>,
    opts: &Options,
) -> Result<Segment, LakeError> {
    let mut entries = entries.peekable();
    let Some(first) = entries.peek().map(|(e, _)| *e) else {
        return Err(LakeError::Invalid("a segment holds at least one entry".to_owned()));
    };
    let mut out = SerializedFileWriter::new(
        Vec::new(),
        crate::schema::parquet_schema()?,
        Arc::new(properties()),
    )?;
    let mut row_groups = Vec::new();
    let mut cols = Columns::default();
    let mut next = first.offset;
    let mut ingest = i64::MIN;
    let mut timestamps = (i64::MAX, i64::MIN);
    let mut ingest_range = (i64::MAX, i64::MIN);
    for (e, stored) in entries {
        if e.offset != next {
            return Err(LakeError::Invalid(format!(
                "entry at offset {} where {next} was next: a segment is gap-free",
                e.offset
            )));
        }
        let (mut h, records) = recordbatch::decode(&e.batch)
            .map_err(|source| LakeError::Batch { offset: e.offset, source })?;
        h.base_offset = e.offset as i64;
        let stored_len = match stored {
            Some((len, attributes)) => {
                h.attributes = attributes;
                len as usize
            }
            None => e.batch.len(),
        };
        // (A batch decodes only if its length fits its own i32 length field.)
        let batch_bytes = i32::try_from(stored_len).map_err(|_| {
            LakeError::Invalid(format!("the batch at {} is {stored_len} bytes", e.offset))
        })?;
        ingest = ingest.max(e.ingest_ms);
        ingest_range = (ingest_range.0.min(ingest), ingest_range.1.max(ingest));
        for r in &records {
            timestamps = (timestamps.0.min(r.timestamp_ms), timestamps.1.max(r.timestamp_ms));
            let offset = e.offset + u64::from(r.offset_delta);
            cols.push(offset, ingest, opts.partition, &h, batch_bytes, r);
        }
        next = e.offset + records.len() as u64;
        if cols.bytes >= opts.row_group_bytes {
            row_groups.push(write_row_group(&mut out, &std::mem::take(&mut cols))?);
        }
    }
    if !cols.offset.is_empty() {
        row_groups.push(write_row_group(&mut out, &cols)?);
    }
    out.append_key_value_metadata(parquet::file::metadata::KeyValue::new(
        ROW_GROUPS_KEY.to_owned(),
        table_text(&row_groups),
    ));
    let file = out.into_inner()?;
    let footer_len =
        Footer::len_from_tail(file.get(file.len().saturating_sub(8)..).unwrap_or(&[]))?;
    let footer_crc32c = crc32c::crc32c(&file[file.len().saturating_sub(footer_len)..]);
    let file = Bytes::from(file);
    Ok(Segment {
        file,
        row_groups,
        first_offset: first.offset,
        end_offset: next,
        timestamps_ms: timestamps,
        ingest_ms: ingest_range,
        footer_len: footer_len as u64,
        footer_crc32c,
    })
}

fn write_row_group(
    out: &mut SerializedFileWriter<Vec<u8>>,
    c: &Columns,
) -> Result<RowGroup, LakeError> {
    let mut rg = out.next_row_group()?;
    let mut i = 0;
    while let Some(mut w) = rg.next_column()? {
        match i {
            col::OFFSET => write_column::<Int64Type>(&mut w, &c.offset, None, None)?,
            col::TIMESTAMP => write_column::<Int64Type>(&mut w, &c.timestamp, None, None)?,
            col::INGEST_TS => write_column::<Int64Type>(&mut w, &c.ingest, None, None)?,
            col::PARTITION => write_column::<Int32Type>(&mut w, &c.partition, None, None)?,
            col::KEY => write_column::<ByteArrayType>(&mut w, &c.key, Some(&c.key_def), None)?,
            col::VALUE => {
                write_column::<ByteArrayType>(&mut w, &c.value, Some(&c.value_def), None)?
            }
            col::HEADER_KEY => write_column::<ByteArrayType>(
                &mut w,
                &c.header_key,
                Some(&c.header_key_def),
                Some(&c.header_rep),
            )?,
            col::HEADER_VALUE => write_column::<ByteArrayType>(
                &mut w,
                &c.header_value,
                Some(&c.header_value_def),
                Some(&c.header_rep),
            )?,
            col::CRC => write_column::<Int32Type>(&mut w, &c.crc, None, None)?,
            col::BATCH_OFFSET => write_column::<Int64Type>(&mut w, &c.batch_offset, None, None)?,
            col::BATCH_ATTRIBUTES => {
                write_column::<Int32Type>(&mut w, &c.batch_attributes, None, None)?
            }
            col::BATCH_BASE_TIMESTAMP => {
                write_column::<Int64Type>(&mut w, &c.batch_base_timestamp, None, None)?
            }
            col::BATCH_MAX_TIMESTAMP => {
                write_column::<Int64Type>(&mut w, &c.batch_max_timestamp, None, None)?
            }
            col::PRODUCER_ID => write_column::<Int64Type>(&mut w, &c.producer_id, None, None)?,
            col::PRODUCER_EPOCH => {
                write_column::<Int32Type>(&mut w, &c.producer_epoch, None, None)?
            }
            col::BASE_SEQUENCE => write_column::<Int32Type>(&mut w, &c.base_sequence, None, None)?,
            col::TIMESTAMP_DELTA => {
                write_column::<Int64Type>(&mut w, &c.timestamp_delta, None, None)?
            }
            col::BATCH_BYTES => write_column::<Int32Type>(&mut w, &c.batch_bytes, None, None)?,
            n => return Err(LakeError::Invalid(format!("the schema has no column {n}"))),
        }
        w.close()?;
        i += 1;
    }
    let meta = rg.close()?;
    let (start, end) = meta.columns().iter().fold((u64::MAX, 0), |(s, e), c| {
        let (start, len) = c.byte_range();
        (s.min(start), e.max(start + len))
    });
    // Its checksum, over its bytes as written.
    out.flush().map_err(|e| LakeError::Invalid(format!("writing a row group: {e}")))?;
    let bytes = out
        .inner()
        .get(start as usize..end as usize)
        .ok_or_else(|| LakeError::Invalid("a row group outside the bytes written".to_owned()))?;
    Ok(RowGroup {
        first_offset: c.offset.first().copied().unwrap_or_default() as u64,
        records: c.offset.len() as u64,
        start,
        len: end.saturating_sub(start),
        crc32c: crc32c::crc32c(bytes),
    })
}

/// The largest footer (Parquet metadata) a segment may have; a longer one is corrupt. A
/// segment of 64 MiB in 1 MiB row groups has a footer of about 50 KiB.
pub const MAX_FOOTER: usize = 16 << 20;

/// A segment file's footer: its row groups and how to decode them.
#[derive(Debug)]
pub struct Footer {
    meta: ParquetMetaData,
    /// Its row-group table, read from the metadata once.
    row_groups: Vec<RowGroup>,
}

impl Footer {
    /// How many bytes at the end of the file the footer takes, from its last 8 bytes.
    pub fn len_from_tail(last8: &[u8]) -> Result<usize, LakeError> {
        let tail: &[u8; 8] = last8
            .try_into()
            .map_err(|_| LakeError::Invalid(format!("{} tail bytes, not 8", last8.len())))?;
        let meta = parquet::file::metadata::FooterTail::try_from(*tail)?.metadata_length();
        if meta > MAX_FOOTER {
            return Err(LakeError::Corrupt(format!(
                "footer of {meta} bytes, over the maximum of {MAX_FOOTER}"
            )));
        }
        Ok(meta + 8)
    }

    /// Reads the footer from the file's last bytes (at least [`Self::len_from_tail`] of
    /// them), whose CRC-32C must be `crc32c` ([`Segment::footer_crc32c`]): only bytes this
    /// crate wrote are ever decoded.
    pub fn parse(tail: &[u8], crc32c: u32) -> Result<Footer, LakeError> {
        let last8 = tail.len().checked_sub(8).map(|at| &tail[at..]).ok_or_else(|| {
            LakeError::Corrupt(format!("{} bytes, shorter than a footer", tail.len()))
        })?;
        let len = Self::len_from_tail(last8)?;
        let at = tail.len().checked_sub(len).ok_or_else(|| {
            LakeError::Invalid(format!("the footer is {len} bytes; {} given", tail.len()))
        })?;
        let found = crc32c::crc32c(&tail[at..]);
        if found != crc32c {
            return Err(LakeError::Corrupt(format!(
                "footer checksum {found:08x}, expected {crc32c:08x}"
            )));
        }
        let meta = ParquetMetaDataReader::decode_metadata(&tail[at..tail.len() - 8])?;
        let expected = crate::schema::parquet_schema()?;
        if meta.file_metadata().schema_descr().root_schema() != expected.as_ref() {
            return Err(LakeError::Corrupt("not a lake segment's schema".to_owned()));
        }
        let row_groups = meta
            .file_metadata()
            .key_value_metadata()
            .and_then(|kv| kv.iter().find(|kv| kv.key == ROW_GROUPS_KEY))
            .and_then(|kv| parse_table(kv.value.as_deref()?))
            .ok_or_else(|| LakeError::Corrupt("no row-group table in the footer".to_owned()))?;
        if row_groups.len() != meta.num_row_groups() {
            return Err(LakeError::Corrupt(format!(
                "{} row groups in the table, {} in the file",
                row_groups.len(),
                meta.num_row_groups()
            )));
        }
        Ok(Footer { meta, row_groups })
    }

    /// The row groups, as [`write`] reported them.
    pub fn row_groups(&self) -> &[RowGroup] {
        &self.row_groups
    }
}

/// A row group's bytes, as fetched by one ranged GET, addressed by file offset.
struct Fetched {
    start: u64,
    bytes: Bytes,
}

impl Length for Fetched {
    fn len(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }
}

impl Fetched {
    fn range(&self, start: u64, len: usize) -> parquet::errors::Result<Bytes> {
        let from = start.checked_sub(self.start).and_then(|f| usize::try_from(f).ok());
        match from.and_then(|f| Some(f..f.checked_add(len)?)) {
            Some(r) if r.end <= self.bytes.len() => Ok(self.bytes.slice(r)),
            _ => Err(parquet::errors::ParquetError::EOF(format!(
                "bytes [{start}, +{len}) are outside the fetched row group"
            ))),
        }
    }
}

impl ChunkReader for Fetched {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        let rest = (self.len().saturating_sub(start)) as usize;
        Ok(bytes::Buf::reader(self.range(start, rest)?))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.range(start, length)
    }
}

/// A column's values (nulls left out), definition levels and repetition levels.
type ColumnValues<T> = (Vec<T>, Vec<i16>, Vec<i16>);

/// Every value of one column of a row group: its values (nulls left out) and, when asked,
/// its definition and repetition levels.
fn read_column<T: DataType>(
    rg: &dyn RowGroupReader,
    i: usize,
    rows: usize,
    levels: (bool, bool),
) -> Result<ColumnValues<T::T>, LakeError>
where
    T::T: Default + Clone,
{
    let mut r = get_typed_column_reader::<T>(rg.get_column_reader(i)?);
    let cap = rows.min(1 << 20);
    let (mut values, mut def, mut rep) = (Vec::with_capacity(cap), Vec::new(), Vec::new());
    let mut read = 0;
    while read < rows {
        let (n, _, _) = r.read_records(
            rows - read,
            levels.0.then_some(&mut def),
            levels.1.then_some(&mut rep),
            &mut values,
        )?;
        if n == 0 {
            return Err(LakeError::Corrupt(format!(
                "column {} has {read} of {rows} rows",
                crate::schema::COLUMNS[i]
            )));
        }
        read += n;
    }
    Ok((values, def, rep))
}

/// A batch framed again from its records, at its first offset `start`, with the length it
/// was stored with; why not, if it cannot be.
fn framed(
    records: Vec<Record>,
    framing: Framing,
    start: i64,
    ingest_ms: i64,
    stored: i32,
) -> Result<Served, String> {
    let framed = recordbatch::encode_framed(&records, framing).map_err(|e| e.to_string())?;
    let mut framed = framed.to_vec();
    recordbatch::set_base_offset(&mut framed, start).map_err(|e| e.to_string())?;
    let entry = Entry { offset: start as u64, ingest_ms, batch: Bytes::from(framed) };
    let stored_len =
        u32::try_from(stored).map_err(|_| format!("the batch at {start} is {stored} bytes"))?;
    Ok(Served { entry, stored_len, attributes: framing.attributes })
}

/// A row group's columns as read, each checked to hold one value (or level) a row.
struct ReadColumns {
    offset: Vec<i64>,
    timestamp: Vec<i64>,
    ingest: Vec<i64>,
    partition: Vec<i32>,
    key: Vec<ByteArray>,
    key_def: Vec<i16>,
    value: Vec<ByteArray>,
    value_def: Vec<i16>,
    hkey: Vec<ByteArray>,
    hkey_def: Vec<i16>,
    hrep: Vec<i16>,
    hvalue: Vec<ByteArray>,
    hvalue_def: Vec<i16>,
    crc: Vec<i32>,
    batch_offset: Vec<i64>,
    attributes: Vec<i32>,
    base_ts: Vec<i64>,
    max_ts: Vec<i64>,
    producer_id: Vec<i64>,
    producer_epoch: Vec<i32>,
    base_sequence: Vec<i32>,
    delta: Vec<i64>,
    batch_bytes: Vec<i32>,
}

impl ReadColumns {
    /// Every column of row group `index` (`rows` rows) from `rg`.
    fn of(rg: &dyn RowGroupReader, rows: usize, index: usize) -> Result<Self, LakeError> {
        let flat = (false, false);
        let i64s = |i| read_column::<Int64Type>(rg, i, rows, flat).map(|c| c.0);
        let i32s = |i| read_column::<Int32Type>(rg, i, rows, flat).map(|c| c.0);
        let bytes = |i, levels| read_column::<ByteArrayType>(rg, i, rows, levels);
        let (key, key_def, _) = bytes(col::KEY, (true, false))?;
        let (value, value_def, _) = bytes(col::VALUE, (true, false))?;
        let (hkey, hkey_def, hrep) = bytes(col::HEADER_KEY, (true, true))?;
        let (hvalue, hvalue_def, hvrep) = bytes(col::HEADER_VALUE, (true, true))?;
        let c = ReadColumns {
            offset: i64s(col::OFFSET)?,
            timestamp: i64s(col::TIMESTAMP)?,
            ingest: i64s(col::INGEST_TS)?,
            partition: i32s(col::PARTITION)?,
            key,
            key_def,
            value,
            value_def,
            hkey,
            hkey_def,
            hrep,
            hvalue,
            hvalue_def,
            crc: i32s(col::CRC)?,
            batch_offset: i64s(col::BATCH_OFFSET)?,
            attributes: i32s(col::BATCH_ATTRIBUTES)?,
            base_ts: i64s(col::BATCH_BASE_TIMESTAMP)?,
            max_ts: i64s(col::BATCH_MAX_TIMESTAMP)?,
            producer_id: i64s(col::PRODUCER_ID)?,
            producer_epoch: i32s(col::PRODUCER_EPOCH)?,
            base_sequence: i32s(col::BASE_SEQUENCE)?,
            delta: i64s(col::TIMESTAMP_DELTA)?,
            batch_bytes: i32s(col::BATCH_BYTES)?,
        };
        let corrupt = |m: String| LakeError::Corrupt(format!("row group {index}: {m}"));
        for (name, n) in [
            ("offset", c.offset.len()),
            ("timestamp", c.timestamp.len()),
            ("ingest_ts", c.ingest.len()),
            ("partition", c.partition.len()),
            ("key levels", c.key_def.len()),
            ("value levels", c.value_def.len()),
            ("crc32c", c.crc.len()),
            ("batch_offset", c.batch_offset.len()),
            ("batch_attributes", c.attributes.len()),
            ("batch_base_timestamp", c.base_ts.len()),
            ("batch_max_timestamp", c.max_ts.len()),
            ("producer_id", c.producer_id.len()),
            ("producer_epoch", c.producer_epoch.len()),
            ("base_sequence", c.base_sequence.len()),
            ("timestamp_delta", c.delta.len()),
            ("batch_bytes", c.batch_bytes.len()),
        ] {
            if n != rows {
                return Err(corrupt(format!("{name} has {n} values for {rows} rows")));
            }
        }
        if c.hkey_def.len() != c.hrep.len() || c.hrep != hvrep || c.hvalue_def.len() != c.hrep.len()
        {
            return Err(corrupt("the headers' key and value levels disagree".to_owned()));
        }
        Ok(c)
    }
}

/// Reads row group `index` from its bytes (`bytes` starts at its `start`) and frames its
/// records as batches again, each at its first offset, every record's checksum verified.
/// Batches are uncompressed; their records, timestamps, producer fields and timestamp type
/// are the stored batch's.
pub fn read_row_group(
    footer: &Footer,
    index: usize,
    bytes: Bytes,
) -> Result<Vec<Served>, LakeError> {
    let (Some(meta), Some(place)) =
        (footer.meta.row_groups().get(index), footer.row_groups.get(index))
    else {
        return Err(LakeError::Invalid(format!(
            "row group {index} of {}",
            footer.meta.num_row_groups()
        )));
    };
    if bytes.len() as u64 != place.len {
        return Err(LakeError::Invalid(format!(
            "row group {index} is {} bytes; {} given",
            place.len,
            bytes.len()
        )));
    }
    let found = crc32c::crc32c(&bytes);
    if found != place.crc32c {
        return Err(LakeError::Corrupt(format!(
            "row group {index}: checksum {found:08x}, expected {:08x}",
            place.crc32c
        )));
    }
    let rows = usize::try_from(meta.num_rows())
        .map_err(|_| LakeError::Corrupt(format!("{} rows", meta.num_rows())))?;
    let chunk = Arc::new(Fetched { start: place.start, bytes });
    let props = Arc::new(ReaderProperties::builder().build());
    let rg = SerializedRowGroupReader::new(chunk, meta, None, props)?;
    let ReadColumns {
        offset,
        timestamp,
        ingest,
        partition,
        key,
        key_def,
        value,
        value_def,
        hkey,
        hkey_def,
        hrep,
        hvalue,
        hvalue_def,
        crc,
        batch_offset,
        attributes,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        delta,
        batch_bytes,
    } = ReadColumns::of(&rg, rows, index)?;
    let corrupt = |m: String| LakeError::Corrupt(format!("row group {index}: {m}"));
    let mut values = (key.into_iter(), value.into_iter(), hkey.into_iter(), hvalue.into_iter());
    // (The decoder sets every value's bytes.)
    let take = |it: &mut std::vec::IntoIter<ByteArray>, what: &str| {
        it.next()
            .map(|b| Bytes::copy_from_slice(b.data()))
            .ok_or_else(|| corrupt(format!("fewer {what} values than their levels say")))
    };
    let mut level = 0;
    let mut out: Vec<Served> = Vec::new();
    let mut batch: Vec<Record> = Vec::new();
    let mut batch_framing: Option<(Framing, i32)> = None;
    for row in 0..rows {
        let key = if key_def[row] == 1 { Some(take(&mut values.0, "key")?) } else { None };
        let value = if value_def[row] == 1 { Some(take(&mut values.1, "value")?) } else { None };
        let mut headers = Vec::new();
        if hrep.get(level) != Some(&0) {
            return Err(corrupt(format!("row {row}'s headers do not start a row")));
        }
        if hkey_def[level] == 0 {
            level += 1;
        } else {
            while level < hrep.len() && (headers.is_empty() || hrep[level] == 1) {
                let k = take(&mut values.2, "header key")?;
                let v = match hvalue_def[level] {
                    2 => Some(take(&mut values.3, "header value")?),
                    _ => None,
                };
                headers.push((k, v));
                level += 1;
            }
        }
        let start = batch_offset[row];
        let position = offset[row].wrapping_sub(start);
        if position != batch.len() as i64 {
            return Err(corrupt(format!(
                "offset {} is record {} of the batch at {start}",
                offset[row],
                batch.len()
            )));
        }
        let r = Record {
            offset_delta: position as u32,
            timestamp_ms: base_ts[row].wrapping_add(delta[row]),
            key,
            value,
            headers,
        };
        let framing = Framing {
            attributes: attributes[row] as i16,
            base_timestamp: base_ts[row],
            max_timestamp: max_ts[row],
            producer: ProducerFields {
                producer_id: producer_id[row],
                producer_epoch: producer_epoch[row] as i16,
                base_sequence: base_sequence[row],
            },
        };
        let ingest_ms = ingest[row] / 1000;
        let fields = RowFields {
            offset: offset[row],
            ingest_micros: ingest[row],
            partition: partition[row],
            batch_offset: start,
            framing,
            batch_bytes: batch_bytes[row],
        };
        if row_crc(&fields, &r) != crc[row] as u32 || timestamp[row] != micros(r.timestamp_ms) {
            return Err(corrupt(format!("the row at offset {} fails its checksum", offset[row])));
        }
        // A batch's rows share its framing.
        if !batch.is_empty() && Some((framing, batch_bytes[row])) != batch_framing {
            return Err(corrupt(format!("the batch at {start} changes its framing")));
        }
        batch_framing = Some((framing, batch_bytes[row]));
        batch.push(r);
        let last = row + 1 == rows || batch_offset[row + 1] != start;
        if last {
            batch_framing = None;
            let records = std::mem::take(&mut batch);
            out.push(
                framed(records, framing, start, ingest_ms, batch_bytes[row]).map_err(corrupt)?,
            );
        }
    }
    if level != hrep.len() {
        return Err(corrupt("header levels left over after the last row".to_owned()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
