//! The lake segment's file format. A lake-enabled stream's compacted segment is ONE Parquet
//! file: a data file of the stream's Iceberg table, and the segment Kafka fetches and readers
//! are served from. [`segment::write`] turns a log's entries (Kafka RecordBatch v2,
//! ARCHITECTURE §5b) into the file and its row-group table; [`segment::Footer`] and
//! [`segment::read_row_group`] turn one row group, fetched with one ranged GET, back into
//! batches. What a table makes of the file (its Iceberg metadata, commits) is `libs/lake`'s.
//!
//! One row per record. Columns, with the Iceberg field ids embedded in the Parquet schema
//! ([`schema::MESSAGE`]): `offset` (sorted), `timestamp` (the record's), `ingest_ts` (the
//! entry's, made monotonic per log), `partition`, `key`, `value` (raw bytes, always: every
//! record is representable), `headers` (a list of key/value), `crc32c` (of the record, see
//! [`record_crc`]), and what frames a batch again (`batch_offset`, `batch_attributes`,
//! `batch_base_timestamp`, `batch_max_timestamp`, `producer_id`, `producer_epoch`,
//! `base_sequence`). A batch never spans row groups, so a row group frames whole batches.
//!
//! Depends on nothing of Lakelog's but the record-batch codec: the log store reads segments
//! through it without knowing of tables.

pub mod schema;
pub mod segment;

/// Why a segment could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum LakeError {
    /// An entry is not a valid record batch.
    #[error("lake segment: entry at offset {offset}: {source}")]
    Batch { offset: u64, source: recordbatch::BatchError },
    /// The file or a row group is damaged: a checksum, a length or the encoding disagrees.
    #[error("lake segment: {0}")]
    Corrupt(String),
    /// The caller asked for something the file does not have, or gave bad input.
    #[error("lake segment: {0}")]
    Invalid(String),
}

impl From<parquet::errors::ParquetError> for LakeError {
    fn from(e: parquet::errors::ParquetError) -> Self {
        LakeError::Corrupt(e.to_string())
    }
}

/// A record's checksum: CRC-32C over its timestamp (i64), key and value (each an i32 length,
/// -1 when null, then the bytes), its header count (i32) and each header's key and value the
/// same way; big-endian. A segment row's `crc32c` continues it over the row's other columns
/// ([`segment`]'s `row_crc`). Computed when a segment is written from batches whose own CRC
/// was verified, and verified on every read of the row.
pub fn record_crc(r: &recordbatch::Record) -> u32 {
    fn field(crc: u32, b: Option<&[u8]>) -> u32 {
        match b {
            None => crc32c::crc32c_append(crc, &(-1i32).to_be_bytes()),
            Some(b) => {
                let len = i32::try_from(b.len()).unwrap_or(i32::MAX);
                crc32c::crc32c_append(crc32c::crc32c_append(crc, &len.to_be_bytes()), b)
            }
        }
    }
    let mut crc = crc32c::crc32c(&r.timestamp_ms.to_be_bytes());
    crc = field(crc, r.key.as_deref());
    crc = field(crc, r.value.as_deref());
    let n = i32::try_from(r.headers.len()).unwrap_or(i32::MAX);
    crc = crc32c::crc32c_append(crc, &n.to_be_bytes());
    for (k, v) in &r.headers {
        crc = field(crc, Some(k));
        crc = field(crc, v.as_deref());
    }
    crc
}
