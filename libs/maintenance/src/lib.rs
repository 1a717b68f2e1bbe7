//! What maintains Lakelog's logs once they are written (ARCHITECTURE §5), over Level 1's
//! [`logstore::LogReader`] and the metadata and object stores alone:
//!
//! - [`compactor`]: rewrites a log's runs of WAL chunks and small segments as compacted
//!   segments, in four steps: read the log at one revision, [`compactor::plan`] (pure: what to
//!   rewrite), build the segment through one segment writer (plain, or a lake table's Parquet
//!   data file), swap it into the index in one transaction.
//! - [`cleaner`]: the only deleter of objects: the cutoff, the WAL objects below it, orphaned
//!   segments, the metadata store's history.
//! - [`lakes`]: lake logs' tables: which logs they are, the day cut, the table's state in the
//!   metadata store and the commit that adds a segment.
//!
//! The roles that run these on a schedule are `services/compactor` and `services/cleaner`; the
//! simulation (`libs/sim`) runs the same code on its virtual clock. Depends on `logstore`,
//! `lake`, `metadata`, `objstore`, `wal` and `recordbatch`; never on the gRPC layer, the
//! catalog, the Kafka front end or a service.

pub mod cleaner;
pub mod compactor;
pub mod lakes;
