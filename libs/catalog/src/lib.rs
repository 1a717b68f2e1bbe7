//! Lakelog Level 2 (ARCHITECTURE §1–§3): the stream catalog maps routing keys to logs, and
//! owner selection picks the writer that serves each log.
//!
//! - [`routing`]: the documented, stable key → partition hash (Kafka's murmur2, so a Kafka
//!   client's default partitioner agrees) and owner selection over the live writers.
//! - [`Catalog`]: streams (name, identity, partitions → LogIds, retention) in the metadata
//!   store under `streams/<name>`.
//!
//! The catalog service (gRPC), membership watching and the SDK build on this crate (issue 5).
//! Depends on `metadata` and `logstore` only.

mod catalog;
pub mod retention;
pub use logstore::{membership, routing};

pub use catalog::{
    Catalog, CatalogError, LogStreams, MAX_PARTITIONS, Route, StreamConfig, StreamInfo, Target,
    follow_log_streams, validate_name,
};
