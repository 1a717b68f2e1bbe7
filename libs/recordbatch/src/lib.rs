//! Kafka RecordBatch v2: the one record format of a stream's entries (ARCHITECTURE §5b). An
//! entry is one batch, stored as its producer sent it; the Kafka listener, the Rust SDK and the
//! CLI write and read it, so every client sees every record.
//!
//! ```text
//! batch  := base_offset:i64 batch_length:i32 partition_leader_epoch:i32 magic:i8 (=2)
//!           crc:u32 attributes:i16 last_offset_delta:i32 base_timestamp:i64
//!           max_timestamp:i64 producer_id:i64 producer_epoch:i16 base_sequence:i32
//!           record_count:i32 record*              (big-endian; crc = CRC-32C(attributes..end))
//! record := length:varint attributes:i8 timestamp_delta:varlong offset_delta:varint
//!           key_length:varint key value_length:varint value header_count:varint header*
//! header := key_length:varint key value_length:varint value       (lengths -1: null)
//! ```
//! Varints are zigzag (Kafka's). `base_offset` and `partition_leader_epoch` lie outside the
//! CRC: a server writes the assigned offset in without re-encoding ([`set_base_offset`]).
//!
//! Untrusted input: every length and count is checked against the bytes present before
//! anything is allocated; a batch whose CRC, lengths or counts disagree is an error, never
//! records. Compressed batches (every codec Kafka has, [`Compression`]) are decompressed to
//! at most [`compression::MAX_DECOMPRESSED`] bytes to be checked and read.
//!
//! Depends on nothing of Lakelog's.

use bytes::{BufMut, Bytes, BytesMut};

pub mod compression;

/// Bytes of the batch header, up to and including the record count.
pub const HEADER_LEN: usize = 61;
/// Offset of the first byte the CRC covers (attributes): a batch's `crc` is CRC-32C of its
/// bytes from here to its end.
pub const CRC_FROM: usize = 21;
/// The only magic this format has.
pub const MAGIC: i8 = 2;
/// The smallest record: length, attributes, timestamp delta, offset delta, key length,
/// value length, header count, one byte each.
const MIN_RECORD: usize = 7;

/// Why bytes are not a valid batch.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("record batch: {0}")]
    Corrupt(String),
    /// The bytes are not exactly one batch: `batch_length` says more or less than is there
    /// (a truncated batch, or several batches where one was expected).
    #[error("record batch: {0}")]
    Length(String),
    #[error("record batch: {0}")]
    Unsupported(String),
    #[error("record batch: {0}")]
    TooLarge(String),
}

fn corrupt(m: impl Into<String>) -> BatchError {
    BatchError::Corrupt(m.into())
}

/// How the records of a batch are compressed (attributes bits 0–2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    fn from_attributes(a: i16) -> Result<Self, BatchError> {
        Ok(match a & 0x7 {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            n => return Err(corrupt(format!("unknown compression codec {n}"))),
        })
    }
}

/// The producer fields of a batch: id, epoch and first sequence (-1 each: not idempotent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerFields {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

impl ProducerFields {
    /// A producer that is not idempotent.
    pub const NONE: ProducerFields =
        ProducerFields { producer_id: -1, producer_epoch: -1, base_sequence: -1 };
}

/// A batch's header, read without touching its records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// Bytes after this field: the batch is `batch_length + 12` bytes.
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer: ProducerFields,
    pub record_count: i32,
}

impl BatchHeader {
    /// Reads the header of `b` (at least [`HEADER_LEN`] bytes; magic 2).
    pub fn parse(b: &[u8]) -> Result<BatchHeader, BatchError> {
        if b.len() < HEADER_LEN {
            return Err(corrupt(format!(
                "{} bytes, shorter than a header ({HEADER_LEN})",
                b.len()
            )));
        }
        let i16_at = |at: usize| i16::from_be_bytes([b[at], b[at + 1]]);
        let i32_at = |at: usize| i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let i64_at = |at: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[at..at + 8]);
            i64::from_be_bytes(a)
        };
        let magic = b[16] as i8;
        if magic != MAGIC {
            return Err(BatchError::Unsupported(format!(
                "magic {magic}: only RecordBatch v2 (magic 2) is supported"
            )));
        }
        Ok(BatchHeader {
            base_offset: i64_at(0),
            batch_length: i32_at(8),
            partition_leader_epoch: i32_at(12),
            magic,
            crc: u32::from_be_bytes([b[17], b[18], b[19], b[20]]),
            attributes: i16_at(21),
            last_offset_delta: i32_at(23),
            base_timestamp: i64_at(27),
            max_timestamp: i64_at(35),
            producer: ProducerFields {
                producer_id: i64_at(43),
                producer_epoch: i16_at(51),
                base_sequence: i32_at(53),
            },
            record_count: i32_at(57),
        })
    }

    pub fn compression(&self) -> Result<Compression, BatchError> {
        Compression::from_attributes(self.attributes)
    }

    /// Timestamps are the broker's append time (bit 3), not the producer's create time.
    pub fn log_append_time(&self) -> bool {
        self.attributes & 0x8 != 0
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & 0x10 != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & 0x20 != 0
    }

    /// The last sequence of an idempotent batch (Kafka's wrap at i32::MAX).
    pub fn last_sequence(&self) -> i32 {
        let base = self.producer.base_sequence;
        if base < 0 {
            return base;
        }
        let last = i64::from(base) + i64::from(self.last_offset_delta);
        if last > i64::from(i32::MAX) {
            (last - i64::from(i32::MAX) - 1) as i32
        } else {
            last as i32
        }
    }
}

/// Checks a whole batch as it came off the wire: its length, magic, CRC, and record count
/// (= last_offset_delta + 1, at least 1), and that its records — decompressed, if they are
/// compressed — parse and fill it exactly. Returns its header.
pub fn validate(b: &[u8]) -> Result<BatchHeader, BatchError> {
    validate_within(b, compression::MAX_DECOMPRESSED)
}

/// [`validate`], its records decompressing to at most `cap` bytes (else
/// [`BatchError::TooLarge`]).
pub fn validate_within(b: &[u8], cap: usize) -> Result<BatchHeader, BatchError> {
    let h = check(b)?;
    match h.compression()? {
        Compression::None => records_of(&h, &b[HEADER_LEN..], |_| Ok(()))?,
        c => {
            let body = compression::decompress(c, &b[HEADER_LEN..], cap)?;
            records_of(&h, &body, |_| Ok(()))?;
        }
    }
    Ok(h)
}

/// The offset delta of the first record of a valid batch that has no key, if any (a compacted
/// log keeps each key's latest record, so it takes none without one); its records
/// decompressing to at most `cap` bytes.
pub fn first_unkeyed(b: &[u8], cap: usize) -> Result<Option<u32>, BatchError> {
    let h = check(b)?;
    let mut first = None;
    let mut note = |r: RawRecord| {
        if r.key.is_none() && first.is_none() {
            first = Some(r.offset_delta);
        }
        Ok(())
    };
    match h.compression()? {
        Compression::None => records_of(&h, &b[HEADER_LEN..], &mut note)?,
        c => records_of(&h, &compression::decompress(c, &b[HEADER_LEN..], cap)?, &mut note)?,
    }
    Ok(first)
}

/// Which batches a check takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kept {
    /// As a producer sends them: `record_count` is `last_offset_delta + 1` (at least 1), the
    /// records' offset deltas run 0, 1, 2…
    Sent,
    /// As a compacted log keeps them too (ARCHITECTURE §12): records gone from the batch,
    /// those left keeping their offset deltas (increasing, at most `last_offset_delta`), none
    /// at all in an empty batch; `last_offset_delta` still spans every offset the batch held.
    Stored,
}

/// The header checks of [`validate`], without the records.
fn check(b: &[u8]) -> Result<BatchHeader, BatchError> {
    check_as(b, Kept::Sent)
}

/// [`check`] of a batch as `kept`.
fn check_as(b: &[u8], kept: Kept) -> Result<BatchHeader, BatchError> {
    let h = BatchHeader::parse(b)?;
    let total = usize::try_from(h.batch_length).ok().and_then(|n| n.checked_add(12));
    if total != Some(b.len()) {
        return Err(BatchError::Length(format!(
            "batch_length {} does not match the {} bytes present",
            h.batch_length,
            b.len()
        )));
    }
    if crc32c::crc32c(&b[CRC_FROM..]) != h.crc {
        return Err(corrupt("CRC mismatch"));
    }
    let span = i64::from(h.last_offset_delta) + 1;
    let count = i64::from(h.record_count);
    let counted = match kept {
        Kept::Sent => count >= 1 && count == span,
        Kept::Stored => count >= 0 && count <= span && span >= 1,
    };
    if !counted {
        return Err(corrupt(format!(
            "record count {} does not match last_offset_delta {}",
            h.record_count, h.last_offset_delta
        )));
    }
    h.compression()?;
    Ok(h)
}

/// Makes a batch's timestamps the broker's append time `now_ms` (Kafka's LogAppendTime: the
/// timestamp-type bit set, the max timestamp `now_ms`, which every record is read as having),
/// its CRC computed again.
pub fn stamp_log_append_time(b: &mut [u8], now_ms: i64) -> Result<(), BatchError> {
    let h = BatchHeader::parse(b)?;
    b[21..23].copy_from_slice(&(h.attributes | 0x8).to_be_bytes());
    b[35..43].copy_from_slice(&now_ms.to_be_bytes());
    let crc = crc32c::crc32c(&b[CRC_FROM..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// Writes `offset` as the batch's base offset (outside the CRC: nothing else changes).
pub fn set_base_offset(b: &mut [u8], offset: i64) -> Result<(), BatchError> {
    if b.len() < HEADER_LEN {
        return Err(corrupt("shorter than a header"));
    }
    b[..8].copy_from_slice(&offset.to_be_bytes());
    Ok(())
}

/// One record of a batch, its timestamp and offset made absolute against the batch's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// Its offset within the batch (0 for the first).
    pub offset_delta: u32,
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(Bytes, Option<Bytes>)>,
}

/// Reads a batch's records (checking it as [`validate`] does, but for what compaction takes
/// out of a batch: records gone, those left at their offset deltas), decompressed if they
/// are compressed.
pub fn decode(b: &Bytes) -> Result<(BatchHeader, Vec<Record>), BatchError> {
    let h = check_as(b, Kept::Stored)?;
    let body = match h.compression()? {
        Compression::None => b.slice(HEADER_LEN..),
        c => Bytes::from(compression::decompress(
            c,
            &b[HEADER_LEN..],
            compression::MAX_DECOMPRESSED,
        )?),
    };
    // records_of() checks the count fits the bytes before anything is pushed.
    let mut out = Vec::with_capacity((h.record_count as usize).min(body.len() / MIN_RECORD));
    records_as(&h, &body, Kept::Stored, |r| {
        out.push(Record {
            offset_delta: r.offset_delta,
            timestamp_ms: h.base_timestamp.wrapping_add(r.timestamp_delta),
            key: r.key.map(|(a, z)| body.slice(a..z)),
            value: r.value.map(|(a, z)| body.slice(a..z)),
            headers: r
                .headers
                .iter()
                .map(|(k, v)| (body.slice(k.0..k.1), v.map(|(a, z)| body.slice(a..z))))
                .collect(),
        });
        Ok(())
    })?;
    Ok((h, out))
}

/// A field's place in the records' bytes: `[start, end)`.
type Span = (usize, usize);

/// A record's fields as spans of the records' bytes.
struct RawRecord {
    offset_delta: u32,
    timestamp_delta: i64,
    key: Option<Span>,
    value: Option<Span>,
    headers: Vec<(Span, Option<Span>)>,
}

/// Walks the records of an uncompressed batch: each must fit its length, their offset deltas
/// run 0, 1, 2…, and they fill `body` exactly.
fn records_of(
    h: &BatchHeader,
    body: &[u8],
    each: impl FnMut(RawRecord) -> Result<(), BatchError>,
) -> Result<(), BatchError> {
    records_as(h, body, Kept::Sent, each)
}

/// [`records_of`] of a batch as `kept`.
fn records_as(
    h: &BatchHeader,
    body: &[u8],
    kept: Kept,
    mut each: impl FnMut(RawRecord) -> Result<(), BatchError>,
) -> Result<(), BatchError> {
    let mut previous: i64 = -1;
    let count = usize::try_from(h.record_count).map_err(|_| corrupt("negative record count"))?;
    if count > body.len() / MIN_RECORD {
        return Err(corrupt(format!("{count} records cannot fit in {} bytes", body.len())));
    }
    let mut c = Reader { b: body, at: 0 };
    for i in 0..count {
        let len = c.length("record length")?.ok_or_else(|| corrupt("null record length"))?;
        let end = c.at + len;
        let [_attributes] = c.array::<1>()?;
        let timestamp_delta = c.varlong()?;
        let offset_delta = c.varint()?;
        let delta = i64::from(offset_delta);
        let in_place = match kept {
            Kept::Sent => delta == i as i64,
            Kept::Stored => delta > previous && delta <= i64::from(h.last_offset_delta),
        };
        if !in_place {
            return Err(corrupt(format!("record {i} has offset delta {offset_delta}")));
        }
        previous = delta;
        let key = c.nullable("key")?;
        let value = c.nullable("value")?;
        let n = c.length("header count")?.ok_or_else(|| corrupt("null header count"))?;
        if n > (end - c.at.min(end)) / 2 {
            return Err(corrupt(format!("{n} headers cannot fit in record {i}")));
        }
        let mut headers = Vec::with_capacity(n);
        for _ in 0..n {
            let k = c.nullable("header key")?.ok_or_else(|| corrupt("null header key"))?;
            headers.push((k, c.nullable("header value")?));
        }
        if c.at != end {
            return Err(corrupt(format!("record {i} is not its length ({len} bytes)")));
        }
        each(RawRecord {
            offset_delta: offset_delta as u32,
            timestamp_delta,
            key,
            value,
            headers,
        })?;
    }
    if c.at != body.len() {
        return Err(corrupt(format!("{} bytes after the last record", body.len() - c.at)));
    }
    Ok(())
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn array<const N: usize>(&mut self) -> Result<[u8; N], BatchError> {
        let s = self.b.get(self.at..self.at + N).ok_or_else(|| corrupt("ends early"))?;
        self.at += N;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn varlong(&mut self) -> Result<i64, BatchError> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let [byte] = self.array::<1>()?;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(((v >> 1) as i64) ^ -((v & 1) as i64));
            }
        }
        Err(corrupt("varint longer than 10 bytes"))
    }

    fn varint(&mut self) -> Result<i32, BatchError> {
        i32::try_from(self.varlong()?).map_err(|_| corrupt("varint out of range"))
    }

    /// A length: -1 is null; others must fit in the bytes left.
    fn length(&mut self, what: &str) -> Result<Option<usize>, BatchError> {
        match self.varint()? {
            -1 => Ok(None),
            n if n < 0 => Err(corrupt(format!("{what} {n}"))),
            n => {
                let n = n as usize;
                if n > self.b.len() - self.at {
                    return Err(corrupt(format!("{what} {n} past the end")));
                }
                Ok(Some(n))
            }
        }
    }

    /// A length-prefixed field, as a range.
    fn nullable(&mut self, what: &str) -> Result<Option<Span>, BatchError> {
        Ok(self.length(what)?.map(|n| {
            let r = (self.at, self.at + n);
            self.at += n;
            r
        }))
    }
}

fn put_varlong(out: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

fn put_bytes(out: &mut BytesMut, b: Option<&[u8]>) -> Result<(), BatchError> {
    match b {
        None => put_varlong(out, -1),
        Some(b) => {
            let n = i32::try_from(b.len())
                .map_err(|_| BatchError::TooLarge(format!("a field of {} bytes", b.len())))?;
            put_varlong(out, i64::from(n));
            out.put_slice(b);
        }
    }
    Ok(())
}

/// Encodes `records` as one uncompressed batch at base offset 0 (their offset deltas are
/// their positions; their timestamps are kept). At least one record.
pub fn encode(records: &[Record], producer: ProducerFields) -> Result<Bytes, BatchError> {
    let Some(first) = records.first() else {
        return Err(corrupt("a batch holds at least one record"));
    };
    let base_timestamp = first.timestamp_ms;
    let max_timestamp = records.iter().map(|r| r.timestamp_ms).max().unwrap_or(base_timestamp);
    encode_framed(records, Framing { attributes: 0, base_timestamp, max_timestamp, producer })
}

/// A batch's fields besides its records, for [`encode_framed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Framing {
    /// Timestamp type, transactional and control bits; the compression bits are cleared (the
    /// batch is written uncompressed).
    pub attributes: i16,
    pub base_timestamp: i64,
    /// For a log-append-time batch, the time its records are read as having.
    pub max_timestamp: i64,
    pub producer: ProducerFields,
}

/// Encodes `records` as one uncompressed batch at base offset 0 with `framing`'s fields: a
/// batch read from somewhere else framed again (its offset deltas are the records'
/// positions; their timestamps are kept, as deltas from `base_timestamp`).
pub fn encode_framed(records: &[Record], framing: Framing) -> Result<Bytes, BatchError> {
    if records.is_empty() {
        return Err(corrupt("a batch holds at least one record"));
    }
    let last_offset_delta = i32::try_from(records.len() - 1)
        .map_err(|_| BatchError::TooLarge(format!("{} records", records.len())))?;
    let fields = Fields { base_offset: 0, leader_epoch: -1, last_offset_delta, framing };
    write_batch(&fields, records.iter().enumerate().map(|(i, r)| (i as i64, r)))
}

/// A batch's transactional attribute bit.
pub const TRANSACTIONAL: i16 = 0x10;
/// A batch's control attribute bit (a transaction marker).
pub const CONTROL: i16 = 0x20;

/// A transaction marker (Kafka's `EndTransactionMarker`): a control batch of one record ending
/// `producer`'s transaction, COMMIT or ABORT, written by a coordinator at
/// `coordinator_epoch`, at `timestamp_ms`.
pub fn encode_marker(
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
    timestamp_ms: i64,
) -> Result<Bytes, BatchError> {
    // Key: version 0, type (0 abort, 1 commit); value: version 0, the coordinator's epoch.
    let mut key = Vec::with_capacity(4);
    key.extend_from_slice(&0i16.to_be_bytes());
    key.extend_from_slice(&i16::from(commit).to_be_bytes());
    let mut value = Vec::with_capacity(6);
    value.extend_from_slice(&0i16.to_be_bytes());
    value.extend_from_slice(&coordinator_epoch.to_be_bytes());
    let record = Record {
        offset_delta: 0,
        timestamp_ms,
        key: Some(Bytes::from(key)),
        value: Some(Bytes::from(value)),
        headers: Vec::new(),
    };
    let producer = ProducerFields { producer_id, producer_epoch, base_sequence: -1 };
    let framing = Framing {
        attributes: TRANSACTIONAL | CONTROL,
        base_timestamp: timestamp_ms,
        max_timestamp: timestamp_ms,
        producer,
    };
    encode_framed(&[record], framing)
}

/// A transaction marker's outcome: `Some(true)` for COMMIT, `Some(false)` for ABORT; `None`
/// for a batch that is not a marker.
pub fn marker_commits(b: &Bytes) -> Option<bool> {
    let h = BatchHeader::parse(b).ok()?;
    if !h.is_control() {
        return None;
    }
    let (_, records) = decode(b).ok()?;
    let key = records.first()?.key.as_ref()?;
    match key.get(2..4)? {
        [0, 0] => Some(false),
        [0, 1] => Some(true),
        _ => None,
    }
}

/// A stored batch with only `kept` of its records (a compacted log's, ARCHITECTURE §12): its
/// header's fields as they were (base offset, last offset delta, timestamps, producer), its
/// records at their own offset deltas, none at all for an empty batch; uncompressed, its
/// CRC computed again.
pub fn encode_kept(h: &BatchHeader, kept: &[Record]) -> Result<Bytes, BatchError> {
    if kept.iter().any(|r| i64::from(r.offset_delta) > i64::from(h.last_offset_delta)) {
        return Err(corrupt("a record kept past its batch's last offset delta"));
    }
    let framing = Framing {
        attributes: h.attributes,
        base_timestamp: h.base_timestamp,
        max_timestamp: h.max_timestamp,
        producer: h.producer,
    };
    let fields = Fields {
        base_offset: h.base_offset,
        leader_epoch: h.partition_leader_epoch,
        last_offset_delta: h.last_offset_delta,
        framing,
    };
    write_batch(&fields, kept.iter().map(|r| (i64::from(r.offset_delta), r)))
}

/// An empty batch standing for `span` offsets whose records a compaction took out (none of
/// them a producer's last batch): no producer, its max timestamp `max_timestamp`.
pub fn encode_gap(span: u32, max_timestamp: i64) -> Result<Bytes, BatchError> {
    let last_offset_delta = i32::try_from(span.saturating_sub(1))
        .ok()
        .filter(|_| span >= 1)
        .ok_or_else(|| BatchError::TooLarge(format!("a gap of {span} offsets")))?;
    let framing = Framing {
        attributes: 0,
        base_timestamp: max_timestamp,
        max_timestamp,
        producer: ProducerFields::NONE,
    };
    let fields = Fields { base_offset: 0, leader_epoch: -1, last_offset_delta, framing };
    write_batch(&fields, std::iter::empty())
}

/// A batch's header fields, for [`write_batch`].
struct Fields {
    base_offset: i64,
    leader_epoch: i32,
    last_offset_delta: i32,
    framing: Framing,
}

/// Writes one uncompressed batch of `records`, each at its offset delta.
fn write_batch<'a>(
    fields: &Fields,
    records: impl Iterator<Item = (i64, &'a Record)>,
) -> Result<Bytes, BatchError> {
    let Framing { attributes, base_timestamp, max_timestamp, producer } = fields.framing;
    let mut body = BytesMut::new();
    let mut rec = BytesMut::new();
    let mut count: i32 = 0;
    for (delta, r) in records {
        rec.clear();
        rec.put_i8(0);
        put_varlong(&mut rec, r.timestamp_ms.wrapping_sub(base_timestamp));
        put_varlong(&mut rec, delta);
        put_bytes(&mut rec, r.key.as_deref())?;
        put_bytes(&mut rec, r.value.as_deref())?;
        put_varlong(&mut rec, r.headers.len() as i64);
        for (k, v) in &r.headers {
            put_bytes(&mut rec, Some(k))?;
            put_bytes(&mut rec, v.as_deref())?;
        }
        put_varlong(&mut body, rec.len() as i64);
        body.put_slice(&rec);
        count = count.checked_add(1).ok_or_else(|| BatchError::TooLarge("records".into()))?;
    }
    let total = HEADER_LEN + body.len();
    let batch_length = i32::try_from(total - 12)
        .map_err(|_| BatchError::TooLarge(format!("a batch of {total} bytes")))?;
    let mut out = BytesMut::with_capacity(total);
    out.put_i64(fields.base_offset);
    out.put_i32(batch_length);
    out.put_i32(fields.leader_epoch);
    out.put_i8(MAGIC);
    out.put_u32(0); // the CRC, written below
    out.put_i16(attributes & !0x7);
    out.put_i32(fields.last_offset_delta);
    out.put_i64(base_timestamp);
    out.put_i64(max_timestamp);
    out.put_i64(producer.producer_id);
    out.put_i16(producer.producer_epoch);
    out.put_i32(producer.base_sequence);
    out.put_i32(count);
    out.put_slice(&body);
    let crc = crc32c::crc32c(&out[CRC_FROM..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(out.freeze())
}

#[cfg(test)]
mod tests;
