//! A lake table's Iceberg metadata (format v2): the table schema matching the segment's
//! Parquet field ids, a partition spec of `day(ingest_ts)`, and the files a snapshot adds —
//! its manifest (one entry per segment file), its manifest list, and the table metadata JSON
//! that names them. Built here rather than through an Iceberg library: Lakelog is the
//! table's catalog, and its commits are its own metadata transactions.

use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};

use crate::avro::{self, Value};

/// The table schema, as Iceberg writes it: the segment's columns (`schema::MESSAGE`) by the
/// same field ids.
pub fn table_schema() -> Json {
    let field = |id: i32, name: &str, required: bool, ty: Json| json!({"id": id, "name": name, "required": required, "type": ty});
    json!({
        "type": "struct",
        "schema-id": 0,
        "fields": [
            field(1, "offset", true, json!("long")),
            field(2, "timestamp", true, json!("timestamptz")),
            field(3, "ingest_ts", true, json!("timestamptz")),
            field(4, "partition", true, json!("int")),
            field(5, "key", false, json!("binary")),
            field(6, "value", false, json!("binary")),
            field(7, "headers", true, json!({
                "type": "list",
                "element-id": 8,
                "element-required": true,
                "element": {
                    "type": "struct",
                    "fields": [
                        field(9, "key", true, json!("binary")),
                        field(10, "value", false, json!("binary")),
                    ],
                },
            })),
            field(11, "crc32c", true, json!("int")),
            field(12, "batch_offset", true, json!("long")),
            field(13, "batch_attributes", true, json!("int")),
            field(14, "batch_base_timestamp", true, json!("long")),
            field(15, "batch_max_timestamp", true, json!("long")),
            field(16, "producer_id", true, json!("long")),
            field(17, "producer_epoch", true, json!("int")),
            field(18, "base_sequence", true, json!("int")),
            field(19, "timestamp_delta", true, json!("long")),
            field(20, "batch_bytes", true, json!("int")),
        ],
    })
}

/// The partition field's id (Iceberg numbers partition fields from 1000).
const DAY_FIELD_ID: i32 = 1000;

/// The partition spec: one field, the day of `ingest_ts` (a segment is cut at day
/// boundaries, so each file has one value).
pub fn partition_spec() -> Json {
    json!({
        "spec-id": 0,
        "fields": [{
            "name": "ingest_ts_day",
            "transform": "day",
            "source-id": 3,
            "field-id": DAY_FIELD_ID,
        }],
    })
}

/// A segment file as a table data file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataFile {
    /// Its full location (`s3://bucket/…`, `file:///…`).
    pub path: String,
    pub file_size: u64,
    pub record_count: u64,
    /// Days since 1970-01-01 of its records' ingest times (one value per file).
    pub ingest_day: i32,
    /// Its records' first and last offsets.
    pub offsets: (i64, i64),
    /// Its records' smallest and largest timestamps, and first and last ingest times (ms).
    pub timestamps_ms: (i64, i64),
    pub ingest_ms: (i64, i64),
    /// The partition (stream partition) all its records are in.
    pub partition: i32,
    /// Where its row groups start, for readers that split files.
    pub split_offsets: Vec<i64>,
}

/// The segment `seg` as a data file of its table, at `path`, of stream partition `partition`.
/// A segment spanning two ingest days is refused: cut it at [`crate::segment::day_cuts`].
pub fn data_file(
    seg: &crate::segment::Segment,
    path: impl Into<String>,
    partition: i32,
) -> Result<DataFile, crate::LakeError> {
    let day_of = crate::segment::day_of;
    let (first, last) = (day_of(seg.ingest_ms.0), day_of(seg.ingest_ms.1));
    if first != last {
        return Err(crate::LakeError::Invalid(format!(
            "the segment spans ingest days {first} to {last}: one day a segment"
        )));
    }
    Ok(DataFile {
        path: path.into(),
        file_size: seg.file.len() as u64,
        record_count: seg.end_offset - seg.first_offset,
        ingest_day: first,
        offsets: (seg.first_offset as i64, seg.end_offset as i64 - 1),
        timestamps_ms: seg.timestamps_ms,
        ingest_ms: seg.ingest_ms,
        partition,
        split_offsets: seg.row_groups.iter().map(|g| g.start as i64).collect(),
    })
}

/// A position-delete file hiding rows of one data file ([`crate::deletes`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteFile {
    pub path: String,
    pub file_size: u64,
    /// Rows it hides.
    pub record_count: u64,
    /// Its data file's partition day (a delete file is in its data file's partition).
    pub ingest_day: i32,
    /// The data file it applies to, and the first and last positions it hides there.
    pub data_path: String,
    pub positions: (u64, u64),
}

/// A file's bounds for a field: Iceberg's single-value serialization (little-endian).
fn bounds(f: &DataFile, lower: bool) -> Value {
    let pick = |(lo, hi): (i64, i64)| if lower { lo } else { hi };
    let micros = crate::segment::micros;
    let entries = [
        (1, pick(f.offsets).to_le_bytes().to_vec()),
        (2, micros(pick(f.timestamps_ms)).to_le_bytes().to_vec()),
        (3, micros(pick(f.ingest_ms)).to_le_bytes().to_vec()),
        (4, f.partition.to_le_bytes().to_vec()),
    ];
    bounds_of(entries)
}

/// A delete file's bounds: its one data file's path (so a reader matches it to that file
/// alone) and the positions it hides.
fn delete_bounds(d: &DeleteFile, lower: bool) -> Value {
    let pos = if lower { d.positions.0 } else { d.positions.1 };
    let pos = i64::try_from(pos).unwrap_or(i64::MAX);
    bounds_of([
        (crate::deletes::FILE_PATH_ID, d.data_path.as_bytes().to_vec()),
        (crate::deletes::POS_ID, pos.to_le_bytes().to_vec()),
    ])
}

fn bounds_of(entries: impl IntoIterator<Item = (i32, Vec<u8>)>) -> Value {
    Value::optional(Some(Value::Array(
        entries
            .into_iter()
            .map(|(id, b)| Value::Record(vec![Value::Int(id), Value::Bytes(b)]))
            .collect(),
    )))
}

const MANIFEST_ENTRY: &str = r#"{"type":"record","name":"manifest_entry","fields":[
{"name":"status","type":"int","field-id":0},
{"name":"snapshot_id","type":["null","long"],"default":null,"field-id":1},
{"name":"sequence_number","type":["null","long"],"default":null,"field-id":3},
{"name":"file_sequence_number","type":["null","long"],"default":null,"field-id":4},
{"name":"data_file","type":{"type":"record","name":"r2","fields":[
 {"name":"content","type":"int","field-id":134},
 {"name":"file_path","type":"string","field-id":100},
 {"name":"file_format","type":"string","field-id":101},
 {"name":"partition","type":{"type":"record","name":"r102","fields":[
  {"name":"ingest_ts_day","type":["null",{"type":"int","logicalType":"date"}],"default":null,"field-id":1000}]},"field-id":102},
 {"name":"record_count","type":"long","field-id":103},
 {"name":"file_size_in_bytes","type":"long","field-id":104},
 {"name":"column_sizes","type":["null",{"type":"array","items":{"type":"record","name":"k117_v118","fields":[{"name":"key","type":"int","field-id":117},{"name":"value","type":"long","field-id":118}]},"logicalType":"map"}],"default":null,"field-id":108},
 {"name":"value_counts","type":["null",{"type":"array","items":{"type":"record","name":"k119_v120","fields":[{"name":"key","type":"int","field-id":119},{"name":"value","type":"long","field-id":120}]},"logicalType":"map"}],"default":null,"field-id":109},
 {"name":"null_value_counts","type":["null",{"type":"array","items":{"type":"record","name":"k121_v122","fields":[{"name":"key","type":"int","field-id":121},{"name":"value","type":"long","field-id":122}]},"logicalType":"map"}],"default":null,"field-id":110},
 {"name":"nan_value_counts","type":["null",{"type":"array","items":{"type":"record","name":"k138_v139","fields":[{"name":"key","type":"int","field-id":138},{"name":"value","type":"long","field-id":139}]},"logicalType":"map"}],"default":null,"field-id":137},
 {"name":"lower_bounds","type":["null",{"type":"array","items":{"type":"record","name":"k126_v127","fields":[{"name":"key","type":"int","field-id":126},{"name":"value","type":"bytes","field-id":127}]},"logicalType":"map"}],"default":null,"field-id":125},
 {"name":"upper_bounds","type":["null",{"type":"array","items":{"type":"record","name":"k129_v130","fields":[{"name":"key","type":"int","field-id":129},{"name":"value","type":"bytes","field-id":130}]},"logicalType":"map"}],"default":null,"field-id":128},
 {"name":"key_metadata","type":["null","bytes"],"default":null,"field-id":131},
 {"name":"split_offsets","type":["null",{"type":"array","items":"long","element-id":133}],"default":null,"field-id":132},
 {"name":"equality_ids","type":["null",{"type":"array","items":"int","element-id":136}],"default":null,"field-id":135},
 {"name":"sort_order_id","type":["null","int"],"default":null,"field-id":140}
]},"field-id":2}]}"#;

const MANIFEST_FILE: &str = r#"{"type":"record","name":"manifest_file","fields":[
{"name":"manifest_path","type":"string","field-id":500},
{"name":"manifest_length","type":"long","field-id":501},
{"name":"partition_spec_id","type":"int","field-id":502},
{"name":"content","type":"int","field-id":517},
{"name":"sequence_number","type":"long","field-id":515},
{"name":"min_sequence_number","type":"long","field-id":516},
{"name":"added_snapshot_id","type":"long","field-id":503},
{"name":"added_files_count","type":"int","field-id":504},
{"name":"existing_files_count","type":"int","field-id":505},
{"name":"deleted_files_count","type":"int","field-id":506},
{"name":"added_rows_count","type":"long","field-id":512},
{"name":"existing_rows_count","type":"long","field-id":513},
{"name":"deleted_rows_count","type":"long","field-id":514},
{"name":"partitions","type":["null",{"type":"array","items":{"type":"record","name":"r508","fields":[
 {"name":"contains_null","type":"boolean","field-id":509},
 {"name":"contains_nan","type":["null","boolean"],"default":null,"field-id":518},
 {"name":"lower_bound","type":["null","bytes"],"default":null,"field-id":510},
 {"name":"upper_bound","type":["null","bytes"],"default":null,"field-id":511}]},"element-id":508}],"default":null,"field-id":507},
{"name":"key_metadata","type":["null","bytes"],"default":null,"field-id":519}
]}"#;

/// A sync marker derived from a file's name: the same file written twice is the same bytes.
fn sync_of(name: &str) -> [u8; 16] {
    let a = crc32c::crc32c(name.as_bytes());
    let b = crc32c::crc32c_append(a, b"sync");
    let c = crc32c::crc32c_append(b, b"marker");
    let d = crc32c::crc32c_append(c, name.as_bytes());
    let mut out = [0u8; 16];
    for (i, w) in [a, b, c, d].into_iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// The manifest of a snapshot that adds `files` (status ADDED, their sequence number
/// inherited from the snapshot's). `name` is its file name (it seeds the sync marker).
pub fn manifest(name: &str, snapshot_id: i64, files: &[DataFile]) -> Vec<u8> {
    let entries: Vec<Value> = files
        .iter()
        .map(|f| {
            let split = f.split_offsets.iter().map(|o| Value::Long(*o)).collect();
            let file = Added {
                content: 0,
                path: &f.path,
                day: f.ingest_day,
                records: f.record_count,
                size: f.file_size,
                bounds: (bounds(f, true), bounds(f, false)),
                split_offsets: Value::optional(Some(Value::Array(split))),
            };
            file.entry(snapshot_id)
        })
        .collect();
    manifest_of(name, &entries, Content::Data)
}

/// The delete manifest of a snapshot that adds the position-delete file `d`.
pub fn delete_manifest(name: &str, snapshot_id: i64, d: &DeleteFile) -> Vec<u8> {
    let file = Added {
        content: 1,
        path: &d.path,
        day: d.ingest_day,
        records: d.record_count,
        size: d.file_size,
        bounds: (delete_bounds(d, true), delete_bounds(d, false)),
        split_offsets: Value::optional(None),
    };
    manifest_of(name, &[file.entry(snapshot_id)], Content::Deletes)
}

/// A file a snapshot adds, as its manifest entry has it.
struct Added<'a> {
    /// 0 data, 1 position deletes.
    content: i32,
    path: &'a str,
    day: i32,
    records: u64,
    size: u64,
    bounds: (Value, Value),
    split_offsets: Value,
}

impl Added<'_> {
    fn entry(self, snapshot_id: i64) -> Value {
        Value::Record(vec![
            Value::Int(1),
            Value::optional(Some(Value::Long(snapshot_id))),
            Value::optional(None),
            Value::optional(None),
            Value::Record(vec![
                Value::Int(self.content),
                Value::String(self.path.to_owned()),
                Value::String("PARQUET".to_owned()),
                Value::Record(vec![Value::optional(Some(Value::Int(self.day)))]),
                Value::Long(i64::try_from(self.records).unwrap_or(i64::MAX)),
                Value::Long(i64::try_from(self.size).unwrap_or(i64::MAX)),
                Value::optional(None),
                Value::optional(None),
                Value::optional(None),
                Value::optional(None),
                self.bounds.0,
                self.bounds.1,
                Value::optional(None),
                self.split_offsets,
                Value::optional(None),
                Value::optional(None),
            ]),
        ])
    }
}

/// What a manifest's files are: data files, or (Iceberg v2) delete files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(into = "i32", try_from = "i32")]
pub enum Content {
    #[default]
    Data,
    Deletes,
}

impl From<Content> for i32 {
    fn from(c: Content) -> i32 {
        match c {
            Content::Data => 0,
            Content::Deletes => 1,
        }
    }
}

impl TryFrom<i32> for Content {
    type Error = String;
    fn try_from(n: i32) -> Result<Self, String> {
        match n {
            0 => Ok(Content::Data),
            1 => Ok(Content::Deletes),
            n => Err(format!("manifest content {n}")),
        }
    }
}

/// A manifest's entries, read back (to merge manifests, or to take files out of one).
pub fn read_manifest(bytes: &[u8]) -> Result<Vec<Value>, crate::LakeError> {
    avro::read_container(bytes, MANIFEST_ENTRY)
        .map_err(|e| crate::LakeError::Corrupt(e.to_string()))
}

/// A manifest entry's data file path, record count and partition day, if it is one of ours.
pub fn entry_fields(entry: &Value) -> Option<(&str, u64, i32)> {
    let Value::Record(f) = entry else { return None };
    let Value::Record(file) = f.get(4)? else { return None };
    let (Value::String(path), Value::Long(records)) = (file.get(1)?, file.get(4)?) else {
        return None;
    };
    let Value::Record(partition) = file.get(3)? else { return None };
    let Value::Union(1, day) = partition.first()? else { return None };
    let Value::Int(day) = **day else { return None };
    Some((path, u64::try_from(*records).ok()?, day))
}

/// An entry carried into a new manifest as EXISTING, its snapshot id and sequence numbers
/// made explicit (an ADDED entry inherits them from the manifest that added it, `sequence`
/// here).
pub fn existing_entry(entry: &Value, snapshot_id: i64, sequence: i64) -> Option<(Value, i64)> {
    let Value::Record(f) = entry else { return None };
    let explicit = |v: &Value, default: i64| match v {
        Value::Union(1, inner) => match **inner {
            Value::Long(n) => Some(n),
            _ => None,
        },
        Value::Union(0, _) => Some(default),
        _ => None,
    };
    let snapshot = explicit(f.get(1)?, snapshot_id)?;
    let seq = explicit(f.get(2)?, sequence)?;
    let file_seq = explicit(f.get(3)?, sequence)?;
    let entry = Value::Record(vec![
        Value::Int(0),
        Value::optional(Some(Value::Long(snapshot))),
        Value::optional(Some(Value::Long(seq))),
        Value::optional(Some(Value::Long(file_seq))),
        f.get(4)?.clone(),
    ]);
    Some((entry, seq))
}

/// A manifest of `entries` as they are (EXISTING ones carried over by a merge), all files of
/// `content`.
pub fn manifest_of(name: &str, entries: &[Value], content: Content) -> Vec<u8> {
    let content = match content {
        Content::Data => "data",
        Content::Deletes => "deletes",
    };
    let meta = [
        ("schema", table_schema().to_string()),
        ("schema-id", "0".to_owned()),
        ("partition-spec", partition_spec()["fields"].to_string()),
        ("partition-spec-id", "0".to_owned()),
        ("format-version", "2".to_owned()),
        ("content", content.to_owned()),
    ];
    avro::container(MANIFEST_ENTRY, &meta, entries, sync_of(name))
}

/// A manifest a manifest list names: where it is, how long, and what it adds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestFile {
    pub path: String,
    pub length: u64,
    /// The snapshot that added it and that snapshot's sequence number.
    pub snapshot_id: i64,
    pub sequence_number: i64,
    pub files: u32,
    pub records: u64,
    /// Smallest and largest partition day of its files.
    pub days: (i32, i32),
    /// Its data files' paths (not written to the manifest list: what Lakelog's cleaner keeps).
    #[serde(default)]
    pub data_files: Vec<String>,
    /// It only carries files earlier snapshots added (a merge of manifests).
    #[serde(default)]
    pub existing_only: bool,
    /// The smallest sequence number of its files, when below its own.
    #[serde(default)]
    pub min_sequence_number: Option<i64>,
    /// Data files, or position-delete files (`data_files` then names those).
    #[serde(default, skip_serializing_if = "is_data")]
    pub content: Content,
}

fn is_data(c: &Content) -> bool {
    *c == Content::Data
}

/// The manifest list of a snapshot: every live manifest, the new one included.
pub fn manifest_list(
    name: &str,
    snapshot_id: i64,
    parent: Option<i64>,
    sequence_number: i64,
    manifests: &[ManifestFile],
) -> Vec<u8> {
    let records: Vec<Value> = manifests
        .iter()
        .map(|m| {
            let added = m.snapshot_id == snapshot_id && !m.existing_only;
            let (files, rows) = (i32::try_from(m.files).unwrap_or(i32::MAX), m.records as i64);
            Value::Record(vec![
                Value::String(m.path.clone()),
                Value::Long(m.length as i64),
                Value::Int(0),
                Value::Int(m.content.into()),
                Value::Long(m.sequence_number),
                Value::Long(m.min_sequence_number.unwrap_or(m.sequence_number)),
                Value::Long(m.snapshot_id),
                Value::Int(if added { files } else { 0 }),
                Value::Int(if added { 0 } else { files }),
                Value::Int(0),
                Value::Long(if added { rows } else { 0 }),
                Value::Long(if added { 0 } else { rows }),
                Value::Long(0),
                Value::optional(Some(Value::Array(vec![Value::Record(vec![
                    Value::Boolean(false),
                    Value::optional(None),
                    Value::optional(Some(Value::Bytes(m.days.0.to_le_bytes().to_vec()))),
                    Value::optional(Some(Value::Bytes(m.days.1.to_le_bytes().to_vec()))),
                ])]))),
                Value::optional(None),
            ])
        })
        .collect();
    let meta = [
        ("snapshot-id", snapshot_id.to_string()),
        ("parent-snapshot-id", parent.map_or("null".to_owned(), |p| p.to_string())),
        ("sequence-number", sequence_number.to_string()),
        ("format-version", "2".to_owned()),
    ];
    avro::container(MANIFEST_FILE, &meta, &records, sync_of(name))
}

/// One snapshot of the table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub id: i64,
    pub parent: Option<i64>,
    pub sequence_number: i64,
    pub timestamp_ms: i64,
    pub manifest_list: String,
    /// `operation` and the rest of the summary (Lakelog's `lakelog.*` keys).
    pub summary: Vec<(String, String)>,
}

/// The table's metadata as of its newest snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    pub uuid: String,
    pub location: String,
    pub snapshots: Vec<Snapshot>,
    pub last_updated_ms: i64,
    pub properties: Vec<(String, String)>,
}

impl Table {
    /// The table metadata JSON (format v2), its current snapshot the last of `snapshots`.
    pub fn metadata_json(&self) -> String {
        let current = self.snapshots.last();
        let snapshots: Vec<Json> = self
            .snapshots
            .iter()
            .map(|s| {
                let mut summary = serde_json::Map::new();
                for (k, v) in &s.summary {
                    summary.insert(k.clone(), Json::String(v.clone()));
                }
                let mut j = json!({
                    "snapshot-id": s.id,
                    "sequence-number": s.sequence_number,
                    "timestamp-ms": s.timestamp_ms,
                    "manifest-list": s.manifest_list,
                    "summary": summary,
                    "schema-id": 0,
                });
                if let Some(p) = s.parent {
                    j["parent-snapshot-id"] = json!(p);
                }
                j
            })
            .collect();
        let log: Vec<Json> = self
            .snapshots
            .iter()
            .map(|s| json!({"snapshot-id": s.id, "timestamp-ms": s.timestamp_ms}))
            .collect();
        let mut properties = serde_json::Map::new();
        for (k, v) in &self.properties {
            properties.insert(k.clone(), Json::String(v.clone()));
        }
        let mut m = json!({
            "format-version": 2,
            "table-uuid": self.uuid,
            "location": self.location,
            "last-sequence-number": current.map_or(0, |s| s.sequence_number),
            "last-updated-ms": self.last_updated_ms,
            "last-column-id": crate::schema::LAST_FIXED_ID,
            "current-schema-id": 0,
            "schemas": [table_schema()],
            "default-spec-id": 0,
            "partition-specs": [partition_spec()],
            "last-partition-id": DAY_FIELD_ID,
            "default-sort-order-id": 1,
            "sort-orders": [{
                "order-id": 1,
                "fields": [
                    {"transform": "identity", "source-id": 4, "direction": "asc", "null-order": "nulls-first"},
                    {"transform": "identity", "source-id": 1, "direction": "asc", "null-order": "nulls-first"},
                ],
            }],
            "properties": properties,
            "current-snapshot-id": current.map_or(json!(-1), |s| json!(s.id)),
            "snapshots": snapshots,
            "snapshot-log": log,
            "metadata-log": [],
        });
        if let Some(s) = current {
            m["refs"] = json!({"main": {"snapshot-id": s.id, "type": "branch"}});
        }
        m.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_is_a_data_file_of_one_ingest_day() {
        use crate::segment::{Entry, Options, write};
        let day = 86_400_000i64;
        let batch = |offset: u64, ingest_ms: i64| {
            let r = recordbatch::Record {
                offset_delta: 0,
                timestamp_ms: 5,
                key: None,
                value: Some(bytes::Bytes::from_static(b"v")),
                headers: vec![],
            };
            let batch = recordbatch::encode(
                &[r.clone(), recordbatch::Record { offset_delta: 1, ..r }],
                recordbatch::ProducerFields::NONE,
            )
            .unwrap();
            Entry { offset, ingest_ms, batch }
        };
        let input =
            [batch(100, 19_000 * day + 5), batch(102, 19_001 * day - 1), batch(104, 19_001 * day)];
        let one_day = write(&input[..2], &Options::default()).unwrap();
        let f = data_file(&one_day, "s3://b/t/data/x.parquet", 4).unwrap();
        assert_eq!((f.ingest_day, f.partition, f.record_count), (19_000, 4, 4));
        assert_eq!(f.offsets, (100, 103));
        assert_eq!(f.split_offsets.len(), one_day.row_groups.len());
        let two_days = write(&input, &Options::default()).unwrap();
        assert!(matches!(data_file(&two_days, "p", 0), Err(crate::LakeError::Invalid(_))));
    }

    /// The table schema's field ids are the Parquet schema's, leaf for leaf.
    #[test]
    fn the_table_schema_and_the_parquet_schema_agree() {
        fn ids(fields: &Json, out: &mut Vec<i64>) {
            for f in fields.as_array().into_iter().flatten() {
                if let Some(id) = f["id"].as_i64() {
                    out.push(id);
                }
                let ty = &f["type"];
                if ty["type"] == "list" {
                    out.push(ty["element-id"].as_i64().unwrap_or(-1));
                    ids(&ty["element"]["fields"], out);
                }
            }
        }
        let mut table = Vec::new();
        ids(&table_schema()["fields"], &mut table);
        let parquet = crate::schema::parquet_schema().unwrap();
        let mut ours = Vec::new();
        fn walk(t: &parquet::schema::types::Type, out: &mut Vec<i64>) {
            for f in t.get_fields() {
                if f.get_basic_info().has_id() {
                    out.push(i64::from(f.get_basic_info().id()));
                }
                if f.is_group() {
                    walk(f, out);
                }
            }
        }
        walk(&parquet, &mut ours);
        assert_eq!(table, ours);
    }
}
