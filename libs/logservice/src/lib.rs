//! The LogService (proto/lakelog/log/v1) over log storage, shared by the writer role (every
//! call) and the reader role (reads only: every mutating call answers READ_ONLY, and reads
//! never wait at the high watermark). A thin adapter: proto ↔ domain conversions in
//! [`service`] (and [`pipeline`] for streamed appends), and in [`status`] the one mapping of log-storage errors to gRPC statuses.
//! Serving it (listener, health, drain) is the role runner's (`role`).
//!
//! Depends on `logstore`, `proto`, `codes` and the stores' crates; never on a service crate or
//! the catalog (the roles compose it).

pub mod pipeline;
pub mod service;
pub mod status;

pub use service::LogServiceImpl;
