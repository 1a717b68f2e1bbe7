//! The LogService (proto/lakelog/log/v1) over log storage, shared by the writer role (every
//! call) and the reader role (reads only: every mutating call answers READ_ONLY, and reads
//! never wait at the high watermark). A thin adapter: proto ↔ domain conversions in
//! [`service`], and in [`status`] the one mapping of log-storage errors to gRPC statuses;
//! [`health`] keeps gRPC health NOT_SERVING while a store does not answer.

pub mod health;
pub mod metered;
pub mod service;
pub mod status;

pub use service::LogServiceImpl;
