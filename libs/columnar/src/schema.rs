//! The segment's schema: Parquet types with the Iceberg field ids a table reader maps columns
//! by. The ids are fixed here for the columns every lake segment has; ids of columns a
//! stream's schema adds later are allocated above [`LAST_FIXED_ID`].

use std::sync::Arc;

use parquet::schema::types::Type;

/// The segment's Parquet schema (message type syntax; `= n` is the field id). `timestamp` and
/// `ingest_ts` are Iceberg `timestamptz` (microseconds, UTC; saturating for times a
/// millisecond count allows and microseconds do not); the batch timestamps are Kafka's
/// milliseconds as the batch carried them, `timestamp_delta` the record's exact
/// milliseconds after `batch_base_timestamp`, as Kafka frames it, and `batch_bytes` the
/// stored batch's length (a re-framed compressed batch is longer; the log's byte positions
/// stay the stored ones).
pub const MESSAGE: &str = "
message lakelog_segment {
  required int64 offset = 1;
  required int64 timestamp (TIMESTAMP(MICROS,true)) = 2;
  required int64 ingest_ts (TIMESTAMP(MICROS,true)) = 3;
  required int32 partition = 4;
  optional binary key = 5;
  optional binary value = 6;
  required group headers (LIST) = 7 {
    repeated group list {
      required group element = 8 {
        required binary key = 9;
        optional binary value = 10;
      }
    }
  }
  required int32 crc32c = 11;
  required int64 batch_offset = 12;
  required int32 batch_attributes = 13;
  required int64 batch_base_timestamp = 14;
  required int64 batch_max_timestamp = 15;
  required int64 producer_id = 16;
  required int32 producer_epoch = 17;
  required int32 base_sequence = 18;
  required int64 timestamp_delta = 19;
  required int32 batch_bytes = 20;
}
";

/// The highest field id of the fixed columns.
pub const LAST_FIXED_ID: i32 = 20;

/// The leaf columns, in the file's order (a row group's column chunks come in this order;
/// `headers` contributes two, its entries' key and value).
pub const COLUMNS: [&str; 18] = [
    "offset",
    "timestamp",
    "ingest_ts",
    "partition",
    "key",
    "value",
    "headers.list.element.key",
    "headers.list.element.value",
    "crc32c",
    "batch_offset",
    "batch_attributes",
    "batch_base_timestamp",
    "batch_max_timestamp",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "timestamp_delta",
    "batch_bytes",
];

/// Leaf column indexes, as in [`COLUMNS`].
pub(crate) mod col {
    pub const OFFSET: usize = 0;
    pub const TIMESTAMP: usize = 1;
    pub const INGEST_TS: usize = 2;
    pub const PARTITION: usize = 3;
    pub const KEY: usize = 4;
    pub const VALUE: usize = 5;
    pub const HEADER_KEY: usize = 6;
    pub const HEADER_VALUE: usize = 7;
    pub const CRC: usize = 8;
    pub const BATCH_OFFSET: usize = 9;
    pub const BATCH_ATTRIBUTES: usize = 10;
    pub const BATCH_BASE_TIMESTAMP: usize = 11;
    pub const BATCH_MAX_TIMESTAMP: usize = 12;
    pub const PRODUCER_ID: usize = 13;
    pub const PRODUCER_EPOCH: usize = 14;
    pub const BASE_SEQUENCE: usize = 15;
    pub const TIMESTAMP_DELTA: usize = 16;
    pub const BATCH_BYTES: usize = 17;
}

/// The schema as Parquet's type tree.
pub fn parquet_schema() -> Result<Arc<Type>, crate::LakeError> {
    parquet::schema::parser::parse_message_type(MESSAGE)
        .map(Arc::new)
        .map_err(|e| crate::LakeError::Invalid(format!("the segment schema: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leaves_are_in_column_order_with_their_field_ids() {
        let schema = parquet_schema().unwrap();
        let descr = parquet::schema::types::SchemaDescriptor::new(schema);
        let paths: Vec<String> = descr.columns().iter().map(|c| c.path().string()).collect();
        assert_eq!(paths, COLUMNS);
        let ids: Vec<i32> =
            descr.columns().iter().map(|c| c.self_type().get_basic_info().id()).collect();
        assert_eq!(ids, [1, 2, 3, 4, 5, 6, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]);
        assert_eq!(ids.iter().max(), Some(&LAST_FIXED_ID));
    }
}
