//! Lakelog's object formats: pure code, no I/O.
//!
//! A **WAL object** holds the entries one writer flush buffered, for many logs, grouped into
//! one **chunk** per log. A **compacted segment** holds one chunk: a contiguous run of one log.
//! Both share the framing below and differ only in their magic. Offsets are not stored: they
//! are assigned when the writer commits (ARCHITECTURE §3); an entry carries its record count.
//!
//! ```text
//! object  := chunk* footer footer_len:u32 footer_crc:u32 magic:[u8; 8]
//! chunk   := entry*                                    (the entries of one log)
//! entry   := payload_len:u32 record_count:u32 timestamp_ms:i64 crc:u32 payload
//!            crc = CRC32C(payload_len ‖ record_count ‖ timestamp_ms ‖ payload)
//! footer  := version:u16 chunk_count:u32 chunk_meta*
//! chunk_meta := log:u64 byte_start:u64 byte_len:u64 record_count:u64 min_ts:i64 max_ts:i64
//!               entry_count:u32 (rel_record_offset:u64 byte_offset:u32 record_count:u32 timestamp:i64)*
//! ```
//! All integers little-endian. Every byte of an object is covered by a checksum: entries by
//! their own CRC, the footer by `footer_crc`, and the decoder checks that chunks tile the data
//! region and entries tile each chunk exactly, so a flipped bit or a truncation is always an
//! error, never data. Length fields are checked against the bytes actually present before
//! anything is allocated, so a hostile footer cannot make a reader allocate more than the
//! object's size.
//!
//! Depends on no Lakelog crate.

use bytes::{BufMut, Bytes};

mod crc;

pub use crc::KnownCrc;

/// Magic of a WAL object, version 1.
pub const WAL_MAGIC: [u8; 8] = *b"LKLWAL01";
/// Magic of a compacted segment, version 1.
pub const SEGMENT_MAGIC: [u8; 8] = *b"LKLSEG01";
/// Bytes of an entry's header.
pub const ENTRY_HEADER_LEN: usize = 20;
/// Bytes after the footer: footer_len, footer_crc, magic.
pub const TRAILER_LEN: usize = 16;
const FOOTER_VERSION: u16 = 1;
const CHUNK_META_FIXED: usize = 8 * 6 + 4;
const ENTRY_META_LEN: usize = 24;

/// Which kind of object: they differ only in magic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectKind {
    Wal,
    Segment,
}

impl ObjectKind {
    /// The last 8 bytes of an object of this kind.
    pub fn magic(self) -> [u8; 8] {
        match self {
            ObjectKind::Wal => WAL_MAGIC,
            ObjectKind::Segment => SEGMENT_MAGIC,
        }
    }
}

/// Why bytes are not a valid object or chunk. Always corruption or truncation of stored data
/// (or a reader pointed at the wrong bytes): never returned as data.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("corrupt object: {0}")]
    Corrupt(String),
    #[error("object too large to encode: {0}")]
    TooLarge(String),
}

fn corrupt(msg: impl Into<String>) -> FormatError {
    FormatError::Corrupt(msg.into())
}

/// What one entry's header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryHeader {
    pub payload_len: u32,
    pub record_count: u32,
    pub timestamp: i64,
}

/// One entry as a chunk's footer describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryMeta {
    /// Records before this entry in its chunk.
    pub rel_record_offset: u64,
    /// Where the entry starts, from the chunk's first byte.
    pub byte_offset: u32,
    pub record_count: u32,
    pub timestamp: i64,
}

/// One chunk as the footer describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkMeta {
    pub log: u64,
    /// Byte range of the chunk in the object.
    pub byte_start: u64,
    pub byte_len: u64,
    pub record_count: u64,
    pub min_timestamp: i64,
    pub max_timestamp: i64,
    pub entries: Vec<EntryMeta>,
}

impl ChunkMeta {
    /// Byte size of entry `i` (header and payload).
    pub fn entry_size(&self, i: usize) -> u64 {
        let start = u64::from(self.entries[i].byte_offset);
        let end = self.entries.get(i + 1).map_or(self.byte_len, |e| u64::from(e.byte_offset));
        end - start
    }
}

/// A decoded entry: header and payload (a zero-copy slice of the object).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub record_count: u32,
    pub timestamp: i64,
    pub payload: Bytes,
    /// Where it started in the bytes it was decoded from.
    pub byte_offset: usize,
    /// Header plus payload.
    pub size: usize,
}

/// Builds one object: chunks in the order begun, entries in the order pushed.
#[derive(Debug)]
pub struct ObjectBuilder {
    kind: ObjectKind,
    buf: Vec<u8>,
    /// Where in `buf` the object begins (the bytes before it unused).
    start: usize,
    chunks: Vec<ChunkMeta>,
}

/// An object laid out in a caller's buffer: `buf[start..]`.
#[derive(Debug)]
pub struct LaidOut {
    pub buf: Vec<u8>,
    pub start: usize,
}

impl LaidOut {
    /// The object's bytes.
    pub fn object(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

impl ObjectBuilder {
    pub fn new(kind: ObjectKind) -> Self {
        Self::with_capacity(kind, 0)
    }

    /// A builder whose buffer is allocated once for `bytes` (payloads plus
    /// [`ENTRY_HEADER_LEN`] per entry), so building never reallocates and copies.
    pub fn with_capacity(kind: ObjectKind, bytes: usize) -> Self {
        ObjectBuilder { kind, buf: Vec::with_capacity(bytes), start: 0, chunks: Vec::new() }
    }

    /// A builder that writes into `buf` (emptied first, its capacity kept: a caller recycling
    /// buffers gets it back from [`Self::finish_vec`]), the object beginning at the first
    /// address in `buf` aligned to `align` (a power of two) when its capacity leaves room for
    /// that much more: a store that writes with direct I/O writes such an object from where it
    /// lies. It stays aligned while the object fits the capacity (a larger one moves the
    /// buffer, and is laid out anyway).
    pub fn with_aligned_buffer(kind: ObjectKind, mut buf: Vec<u8>, align: usize) -> Self {
        buf.clear();
        let start = buf.as_ptr().align_offset(align);
        let start = if start < align && start <= buf.capacity() { start } else { 0 };
        buf.resize(start, 0);
        ObjectBuilder { kind, buf, start, chunks: Vec::new() }
    }

    /// Starts the chunk of `log`. Every chunk of a WAL object belongs to a different log.
    pub fn begin_chunk(&mut self, log: u64) {
        self.chunks.push(ChunkMeta {
            log,
            byte_start: self.data_len() as u64,
            byte_len: 0,
            record_count: 0,
            min_timestamp: i64::MAX,
            max_timestamp: i64::MIN,
            entries: Vec::new(),
        });
    }

    /// Appends an entry to the current chunk; returns its byte range in the object.
    pub fn push_entry(
        &mut self,
        record_count: u32,
        timestamp: i64,
        payload: &[u8],
    ) -> Result<std::ops::Range<u64>, FormatError> {
        self.push_entry_known(record_count, timestamp, payload, None)
    }

    /// [`Self::push_entry`] with the checksum of the payload's tail its caller computed and
    /// checked (`known`): the entry's checksum is derived from it, the tail not read again.
    pub fn push_entry_known(
        &mut self,
        record_count: u32,
        timestamp: i64,
        payload: &[u8],
        known: Option<KnownCrc>,
    ) -> Result<std::ops::Range<u64>, FormatError> {
        let Some(chunk) = self.chunks.last_mut() else {
            return Err(FormatError::TooLarge("push_entry before begin_chunk".to_owned()));
        };
        let payload_len = u32::try_from(payload.len())
            .map_err(|_| FormatError::TooLarge(format!("payload of {} bytes", payload.len())))?;
        let start = (self.buf.len() - self.start) as u64;
        let byte_offset = u32::try_from(start - chunk.byte_start)
            .map_err(|_| FormatError::TooLarge("chunk over 4 GiB".to_owned()))?;
        self.buf.put_slice(&entry_head(payload_len, record_count, timestamp, payload, known));
        self.buf.put_slice(payload);
        chunk.entries.push(EntryMeta {
            rel_record_offset: chunk.record_count,
            byte_offset,
            record_count,
            timestamp,
        });
        chunk.record_count += u64::from(record_count);
        chunk.min_timestamp = chunk.min_timestamp.min(timestamp);
        chunk.max_timestamp = chunk.max_timestamp.max(timestamp);
        let end = (self.buf.len() - self.start) as u64;
        chunk.byte_len = end - chunk.byte_start;
        Ok(start..end)
    }

    /// Bytes so far (without the footer).
    pub fn data_len(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Writes the footer and trailer; returns the object and its chunks.
    pub fn finish(self) -> Result<(Bytes, Vec<ChunkMeta>), FormatError> {
        self.finish_vec().map(|(object, chunks)| {
            let start = object.start;
            (Bytes::from(object.buf).slice(start..), chunks)
        })
    }

    /// [`Self::finish`], the object in the buffer it was built in.
    pub fn finish_vec(mut self) -> Result<(LaidOut, Vec<ChunkMeta>), FormatError> {
        self.chunks.retain(|c| !c.entries.is_empty());
        let footer_start = self.buf.len();
        self.buf.put_u16_le(FOOTER_VERSION);
        self.buf.put_u32_le(self.chunks.len() as u32);
        for c in &self.chunks {
            self.buf.put_u64_le(c.log);
            self.buf.put_u64_le(c.byte_start);
            self.buf.put_u64_le(c.byte_len);
            self.buf.put_u64_le(c.record_count);
            self.buf.put_i64_le(c.min_timestamp);
            self.buf.put_i64_le(c.max_timestamp);
            self.buf.put_u32_le(c.entries.len() as u32);
            for e in &c.entries {
                self.buf.put_u64_le(e.rel_record_offset);
                self.buf.put_u32_le(e.byte_offset);
                self.buf.put_u32_le(e.record_count);
                self.buf.put_i64_le(e.timestamp);
            }
        }
        let footer_len = u32::try_from(self.buf.len() - footer_start)
            .map_err(|_| FormatError::TooLarge("footer over 4 GiB".to_owned()))?;
        let crc = crc32c::crc32c(&self.buf[footer_start..]);
        self.buf.put_u32_le(footer_len);
        self.buf.put_u32_le(crc);
        self.buf.put_slice(&self.kind.magic());
        Ok((LaidOut { buf: self.buf, start: self.start }, self.chunks))
    }
}

/// A little-endian reader that never reads past its slice.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.b.len()).ok_or_else(|| {
            corrupt(format!("truncated: need {n} bytes at {} of {}", self.at, self.b.len()))
        })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u16(&mut self) -> Result<u16, FormatError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().map_err(|_| corrupt("u16"))?))
    }
    fn u32(&mut self) -> Result<u32, FormatError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| corrupt("u32"))?))
    }
    fn u64(&mut self) -> Result<u64, FormatError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| corrupt("u64"))?))
    }
    fn i64(&mut self) -> Result<i64, FormatError> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into().map_err(|_| corrupt("i64"))?))
    }
    fn remaining(&self) -> usize {
        self.b.len() - self.at
    }
}

/// An entry's header and checksum (the [`ENTRY_HEADER_LEN`] bytes before its payload), with
/// what is `known` of the payload's checksum.
fn entry_head(
    payload_len: u32,
    record_count: u32,
    timestamp: i64,
    payload: &[u8],
    known: Option<KnownCrc>,
) -> [u8; 20] {
    let mut head = [0u8; ENTRY_HEADER_LEN];
    head[0..4].copy_from_slice(&payload_len.to_le_bytes());
    head[4..8].copy_from_slice(&record_count.to_le_bytes());
    head[8..16].copy_from_slice(&timestamp.to_le_bytes());
    let crc = crc::of_entry(&head[..16], payload, known);
    head[16..20].copy_from_slice(&crc.to_le_bytes());
    head
}

/// Appends one entry to `out`, framed as in an object (header, checksum, payload): what a
/// reader serving entries from elsewhere (a lake segment's row group) hands out as stored.
pub fn frame_entry(
    out: &mut Vec<u8>,
    record_count: u32,
    timestamp: i64,
    payload: &[u8],
) -> Result<(), FormatError> {
    let payload_len = u32::try_from(payload.len())
        .map_err(|_| FormatError::TooLarge(format!("payload of {} bytes", payload.len())))?;
    out.extend_from_slice(&entry_head(payload_len, record_count, timestamp, payload, None));
    out.extend_from_slice(payload);
    Ok(())
}

/// Decodes the entry at the start of `bytes`, checking its CRC.
pub fn decode_entry(bytes: &[u8]) -> Result<(EntryHeader, &[u8]), FormatError> {
    let mut c = Cursor { b: bytes, at: 0 };
    let payload_len = c.u32()?;
    let record_count = c.u32()?;
    let timestamp = c.i64()?;
    let crc = c.u32()?;
    let payload = c.take(payload_len as usize)?;
    let actual = crc32c::crc32c_append(crc32c::crc32c(&bytes[..16]), payload);
    if actual != crc {
        return Err(corrupt(format!("entry checksum {actual:08x} != stored {crc:08x}")));
    }
    if record_count == 0 {
        return Err(corrupt("entry with zero records"));
    }
    Ok((EntryHeader { payload_len, record_count, timestamp }, payload))
}

/// Decodes every entry of a chunk (or of a run of whole entries cut from one), which must
/// end exactly at the last entry's end. Payloads are zero-copy slices of `chunk`.
pub fn decode_entries(chunk: &Bytes) -> Result<Vec<Entry>, FormatError> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < chunk.len() {
        let (h, _) = decode_entry(&chunk[at..])?;
        let size = ENTRY_HEADER_LEN + h.payload_len as usize;
        out.push(Entry {
            record_count: h.record_count,
            timestamp: h.timestamp,
            payload: chunk.slice(at + ENTRY_HEADER_LEN..at + size),
            byte_offset: at,
            size,
        });
        at += size;
    }
    Ok(out)
}

/// Where each entry of a chunk starts and what its header says, checking that the entries
/// tile the chunk exactly but not their payloads' checksums ([`decode_entry`] checks those):
/// for finding a few entries in a large run without checksumming all of it.
pub fn entry_layout(chunk: &[u8]) -> Result<Vec<(usize, EntryHeader)>, FormatError> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < chunk.len() {
        let mut c = Cursor { b: &chunk[at..], at: 0 };
        let payload_len = c.u32()?;
        let record_count = c.u32()?;
        let timestamp = c.i64()?;
        c.u32()?;
        c.take(payload_len as usize)?;
        if record_count == 0 {
            return Err(corrupt("entry with zero records"));
        }
        out.push((at, EntryHeader { payload_len, record_count, timestamp }));
        at += ENTRY_HEADER_LEN + payload_len as usize;
    }
    Ok(out)
}

/// Bytes of the footer of an object of one chunk of `entries` entries (a compacted segment),
/// without the trailer: what a reader fetches to find entries inside a large segment.
pub fn single_chunk_footer_len(entries: u32) -> u64 {
    6 + CHUNK_META_FIXED as u64 + ENTRY_META_LEN as u64 * u64::from(entries)
}

/// Reads the trailer (the last [`TRAILER_LEN`] bytes): the footer's length and checksum.
pub fn decode_trailer(trailer: &[u8], kind: ObjectKind) -> Result<(u32, u32), FormatError> {
    if trailer.len() != TRAILER_LEN {
        return Err(corrupt(format!("trailer of {} bytes", trailer.len())));
    }
    let mut c = Cursor { b: trailer, at: 0 };
    let footer_len = c.u32()?;
    let crc = c.u32()?;
    if c.take(8)? != kind.magic() {
        return Err(corrupt("bad magic: not a Lakelog object of this kind, or truncated"));
    }
    Ok((footer_len, crc))
}

/// Decodes and checks an object's footer; `data_len` is the size of the region before it,
/// which the chunks must tile exactly.
pub fn decode_footer(
    footer: &[u8],
    crc: u32,
    data_len: u64,
) -> Result<Vec<ChunkMeta>, FormatError> {
    let actual = crc32c::crc32c(footer);
    if actual != crc {
        return Err(corrupt(format!("footer checksum {actual:08x} != stored {crc:08x}")));
    }
    let mut c = Cursor { b: footer, at: 0 };
    let version = c.u16()?;
    if version != FOOTER_VERSION {
        return Err(corrupt(format!("footer version {version}")));
    }
    let count = c.u32()? as usize;
    if count > c.remaining() / CHUNK_META_FIXED {
        return Err(corrupt(format!("{count} chunks cannot fit in the footer")));
    }
    let mut chunks = Vec::with_capacity(count);
    let mut expect_start = 0u64;
    for _ in 0..count {
        let log = c.u64()?;
        let byte_start = c.u64()?;
        let byte_len = c.u64()?;
        let record_count = c.u64()?;
        let min_timestamp = c.i64()?;
        let max_timestamp = c.i64()?;
        let n = c.u32()? as usize;
        if n == 0 || n > c.remaining() / ENTRY_META_LEN {
            return Err(corrupt(format!("chunk of log {log} claims {n} entries")));
        }
        if byte_start != expect_start || byte_len > data_len - byte_start {
            return Err(corrupt(format!(
                "chunk of log {log} at {byte_start}+{byte_len} breaks the layout"
            )));
        }
        expect_start = byte_start + byte_len;
        let mut entries = Vec::with_capacity(n);
        let mut records = 0u64;
        for _ in 0..n {
            let e = EntryMeta {
                rel_record_offset: c.u64()?,
                byte_offset: c.u32()?,
                record_count: c.u32()?,
                timestamp: c.i64()?,
            };
            if e.rel_record_offset != records || u64::from(e.byte_offset) >= byte_len {
                return Err(corrupt(format!("entry table of log {log} is inconsistent")));
            }
            records += u64::from(e.record_count);
            entries.push(e);
        }
        if records != record_count {
            return Err(corrupt(format!(
                "chunk of log {log}: {records} records != {record_count}"
            )));
        }
        chunks.push(ChunkMeta {
            log,
            byte_start,
            byte_len,
            record_count,
            min_timestamp,
            max_timestamp,
            entries,
        });
    }
    if expect_start != data_len || c.remaining() != 0 {
        return Err(corrupt("chunks do not tile the object"));
    }
    Ok(chunks)
}

/// Decodes a whole object and checks every byte of it: the footer, and each chunk's entries
/// against the footer's table.
pub fn decode_object(
    object: &Bytes,
    kind: ObjectKind,
) -> Result<Vec<(ChunkMeta, Vec<Entry>)>, FormatError> {
    if object.len() < TRAILER_LEN {
        return Err(corrupt(format!("{} bytes is too short for an object", object.len())));
    }
    let trailer_at = object.len() - TRAILER_LEN;
    let (footer_len, crc) = decode_trailer(&object[trailer_at..], kind)?;
    let footer_at = trailer_at
        .checked_sub(footer_len as usize)
        .ok_or_else(|| corrupt(format!("footer of {footer_len} bytes does not fit")))?;
    let chunks = decode_footer(&object[footer_at..trailer_at], crc, footer_at as u64)?;
    let mut out = Vec::with_capacity(chunks.len());
    for meta in chunks {
        let range = meta.byte_start as usize..(meta.byte_start + meta.byte_len) as usize;
        let entries = decode_entries(&object.slice(range))?;
        let agrees = entries.len() == meta.entries.len()
            && entries.iter().zip(&meta.entries).all(|(e, m)| {
                e.byte_offset == m.byte_offset as usize
                    && e.record_count == m.record_count
                    && e.timestamp == m.timestamp
            });
        if !agrees {
            return Err(corrupt(format!("entries of log {} disagree with the footer", meta.log)));
        }
        out.push((meta, entries));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
