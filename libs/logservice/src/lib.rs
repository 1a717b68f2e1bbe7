//! The LogService (proto/lakelog/log/v1) over log storage, shared by the writer role (every
//! call) and the reader role (reads only: every mutating call answers READ_ONLY, and reads
//! never wait at the high watermark). A thin adapter: proto ↔ domain conversions in
//! [`service`] (and [`pipeline`] for streamed appends), and in [`status`] the one mapping of log-storage errors to gRPC statuses.
//! Serving it (listener, health, drain) is the role runner's (`role`).
//!
//! Depends on `logstore`, `proto`, `codes` and the stores' crates; never on a service crate or
//! the catalog (the roles compose it).

pub mod pipeline;
pub mod reception;
pub mod service;
pub mod status;

pub use service::LogServiceImpl;

/// Payloads under this size are copied out of the request they came in.
const COPY_BELOW: usize = 64 << 10;

/// An append's payload as the writer keeps it. A decoded payload is a slice of the buffer its
/// request was received into, which for a small message is up to twice its size and stays
/// allocated while the payload waits for room and then for its flush; a small payload is
/// copied so the buffer goes at once (a large one's buffer is about its size).
pub(crate) fn own(payload: bytes::Bytes) -> bytes::Bytes {
    if payload.len() < COPY_BELOW { bytes::Bytes::copy_from_slice(&payload) } else { payload }
}

/// What a unary Append holds in the writer while it waits for its commit, besides its payload:
/// its HTTP/2 stream, task, headers, and the futures of the layers it passes through, and its
/// share of the allocator's pages. Counted in the buffer (`Conditions::overhead`), so thousands
/// of small appends from many connections cannot hold more than the buffer allows. (A heap
/// profile of 2,000 remote appends in flight found ~10 KiB each; a writer at 5x overload in
/// 10 kB appends peaked at 119-150 MiB RSS counting 4 or 8 KiB, 115-127 counting 12.)
pub const UNARY_OVERHEAD: usize = 12 << 10;

/// The same for one append of an AppendStream: its answer's future in the stream's queue.
pub const STREAMED_OVERHEAD: usize = 512;
