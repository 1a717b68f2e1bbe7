//! Iceberg v2 position deletes: the rows of a data file its table must not show. A lake
//! segment is at once the log's segment and a table data file, so it holds every record the
//! log does (read_uncommitted consumers are served them); the records of aborted Kafka
//! transactions and the transaction markers (control batches) are hidden from the table by a
//! position-delete file committed with the segment (ARCHITECTURE §12).

use std::sync::Arc;

use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;

use crate::LakeError;

/// Iceberg's reserved field ids of a position-delete file's columns.
pub const FILE_PATH_ID: i32 = 2_147_483_546;
pub const POS_ID: i32 = 2_147_483_545;

const MESSAGE: &str = "
message position_delete {
  required binary file_path (STRING) = 2147483546;
  required int64 pos = 2147483545;
}";

/// Rows written per row group: a delete file's rows are 8 bytes and a dictionary index each.
const ROWS_PER_GROUP: usize = 1 << 20;

/// The Parquet bytes of a position-delete file hiding the rows `positions` (0-based, strictly
/// increasing) of the data file at `data_path`.
pub fn position_deletes(data_path: &str, positions: &[u64]) -> Result<Vec<u8>, LakeError> {
    if positions.windows(2).any(|w| w[0] >= w[1]) {
        return Err(LakeError::Invalid("delete positions out of order".to_owned()));
    }
    let schema = Arc::new(parquet::schema::parser::parse_message_type(MESSAGE)?);
    let props = WriterProperties::builder()
        .set_compression(Compression::LZ4_RAW)
        .set_created_by("lakelog".to_owned())
        .build();
    let mut out = SerializedFileWriter::new(Vec::new(), schema, Arc::new(props))?;
    for chunk in positions.chunks(ROWS_PER_GROUP) {
        let mut rg = out.next_row_group()?;
        let path = ByteArray::from(data_path.as_bytes().to_vec());
        let mut i = 0;
        while let Some(mut w) = rg.next_column()? {
            if i == 0 {
                let paths = vec![path.clone(); chunk.len()];
                w.typed::<ByteArrayType>().write_batch(&paths, None, None)?;
            } else {
                let pos: Vec<i64> =
                    chunk.iter().map(|p| i64::try_from(*p).unwrap_or(i64::MAX)).collect();
                w.typed::<Int64Type>().write_batch(&pos, None, None)?;
            }
            w.close()?;
            i += 1;
        }
        rg.close()?;
    }
    Ok(out.into_inner()?)
}

/// The rows of a lake segment its table must not show, from its batches in offset order:
/// each `(attributes, producer id, first offset, record count)`, and the log's aborted
/// transactions overlapping the segment `(producer id, first offset, marker offset)`. A control
/// batch's rows (a marker) and a transactional batch's rows inside one of its producer's
/// aborted transactions are hidden; positions count rows from the segment's first.
pub fn hidden_rows(
    batches: impl IntoIterator<Item = (i16, i64, u64, u32)>,
    aborted: &[(i64, u64, u64)],
) -> Vec<u64> {
    const TRANSACTIONAL: i16 = 0x10;
    const CONTROL: i16 = 0x20;
    let mut by_producer: std::collections::HashMap<i64, Vec<(u64, u64)>> = Default::default();
    for (pid, first, last) in aborted {
        by_producer.entry(*pid).or_default().push((*first, *last));
    }
    let mut hidden = Vec::new();
    let mut row = 0u64;
    for (attributes, producer_id, offset, records) in batches {
        let records = u64::from(records);
        let hide = attributes & CONTROL != 0
            || attributes & TRANSACTIONAL != 0
                && by_producer
                    .get(&producer_id)
                    .is_some_and(|r| r.iter().any(|(a, b)| *a <= offset && offset <= *b));
        if hide {
            hidden.extend(row..row + records);
        }
        row += records;
    }
    hidden
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_and_aborted_transactions_rows_are_hidden_and_nothing_else() {
        // Offsets: 0 plain (2 rows), 2 pid 7 txn (3), 5 pid 8 txn (1), 6 abort marker of 7,
        // 7 commit marker of 8, 8 pid 7 txn again (2: a later transaction, committed), 10 a
        // non-transactional batch of pid 7 (1).
        let batches = [
            (0, -1, 0, 2),
            (0x10, 7, 2, 3),
            (0x10, 8, 5, 1),
            (0x30, 7, 6, 1),
            (0x30, 8, 7, 1),
            (0x10, 7, 8, 2),
            (0, 7, 10, 1),
        ];
        let hidden = hidden_rows(batches, &[(7, 2, 6), (9, 0, 11)]);
        assert_eq!(hidden, [2, 3, 4, 6, 7]);
        assert_eq!(hidden_rows(batches[..3].iter().copied(), &[]), Vec::<u64>::new());
    }

    #[test]
    fn a_delete_file_reads_back_as_its_path_and_positions() {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let bytes = position_deletes("s3://b/x.parquet", &[1, 5, 9]).unwrap();
        let reader = SerializedFileReader::new(bytes::Bytes::from(bytes)).unwrap();
        let fields = reader.metadata().file_metadata().schema().get_fields().to_vec();
        let ids: Vec<i32> = fields.iter().map(|f| f.get_basic_info().id()).collect();
        assert_eq!(ids, [FILE_PATH_ID, POS_ID]);
        let rows: Vec<String> =
            reader.get_row_iter(None).unwrap().map(|r| r.unwrap().to_string()).collect();
        assert_eq!(rows.len(), 3);
        assert!(rows[1].contains("s3://b/x.parquet") && rows[1].contains("pos: 5"), "{rows:?}");
        assert!(position_deletes("p", &[3, 3]).is_err());
    }
}
