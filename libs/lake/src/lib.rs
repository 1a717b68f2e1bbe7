//! Lake tables (issue: zero-copy Iceberg): what a lake stream's Iceberg table makes of its
//! segments. Each compacted segment of a lake log is ONE Parquet file (its format is
//! `libs/columnar`, re-exported here as [`segment`] and [`schema`]) that is at once the log's
//! segment and a data file of the table; this crate holds the table: its state
//! ([`table::TableState`]: snapshots, manifests, the commit that adds or replaces files,
//! retention) and the Iceberg v2 metadata a commit writes ([`iceberg`]: manifests and manifest
//! lists in Avro ([`avro`]), table metadata JSON).
//!
//! Depends on nothing of Lakelog's but the segment format.

pub mod avro;
pub mod deletes;
pub mod iceberg;
pub mod table;

pub use columnar::{LakeError, record_crc, schema, segment};
