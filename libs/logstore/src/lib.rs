//! Lakelog log storage: Levels 0 and 1 of ARCHITECTURE §1.
//!
//! - [`LogStorage`] (Level 1): create, append, read, offset queries, index reads, trims and
//!   delete, keyed by [`LogId`]. Appends follow ARCHITECTURE §3: buffered across logs, one
//!   create-only WAL object per flush, then offsets committed in metadata transactions that
//!   compare the log's head and the writer's incarnation; acknowledged only after the commit.
//! - [`Log`] (Level 0): the per-log handle: fence/activate, offset and timestamp search over
//!   entry headers, retention computation.
//!
//! Reads are served by [`LogReader`], which needs no writer identity (read-only readers use it
//! alone). Knows streams only as far as a writer must: a stream's log carries its (stream
//! identity, partition) in its head, and [`routing`] / [`membership`] hold the owner function
//! over live members that both the catalog and a writer taking a slot evaluate. Depends on
//! `metadata`, `objstore`, `wal`, `recordbatch`, `routing` and `codes` (and, for lake segments'
//! reads alone, their format), never on the gRPC layer, config files, a service or what
//! maintains the logs (compaction, cleaning and lake tables are `libs/maintenance`); reaches
//! etcd and object storage only through their traits. Metadata keys: [`keys`]; object keys:
//! `objstore::keys`.

pub mod admin;
pub mod cursor;
pub mod keys;
mod log;
pub mod membership;
#[doc(hidden)]
pub mod mutations;
mod range_cache;
mod reader;
pub mod records;
pub mod retention;
pub mod slot_state;
pub use routing;
mod storage;
mod writer;

pub use cursor::{CursorStart, CursorStats, LogCursor};
pub use log::Log;
pub use reader::{
    DEFAULT_FOLLOWED_HEADS, DEFAULT_INDEX_PAGES, LogReader, MAX_BY_INDEX_BYTES,
    MAX_BY_INDEX_ENTRIES, StoredRun,
};
pub use storage::{Committing, Conditions, LogStorage, Reserved, TxnMark};
pub use wal::KnownCrc;
pub use writer::{Chain, LogStorageConfig};
pub use writer::{FlushObserver, WriterHook, WriterStep};

/// Chunk locators a log head keeps before spilling them to an index page.
pub const RECENT_MAX: usize = 8;
/// Kafka transactions open at once in one log at most: a transactional batch that would open
/// one more is refused (its head carries them all).
pub const MAX_OPEN_TXNS: usize = 1000;
/// Aborted transactions a log's head keeps; older ones are paged out (one key each).
pub const ABORTED_RECENT: usize = 32;

/// A log's identity: never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogId(pub u64);

impl std::fmt::Display for LogId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What an append is acknowledged with (seed 000's `LogEntryHeader`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogEntryHeader {
    /// The entry's first record's offset.
    pub offset: u64,
    pub record_count: u32,
    /// Milliseconds since the Unix epoch, as the writer stamped it.
    pub timestamp: i64,
    /// Payload bytes of the entry.
    pub entry_size: u64,
    /// Payload bytes of the log up to and including this entry.
    pub cumulative_size: u64,
}

impl LogEntryHeader {
    /// Offset just past the entry.
    pub fn end_offset(&self) -> u64 {
        self.offset + u64::from(self.record_count)
    }
}

/// An entry's descriptor without its payload (seed 000's `LogOffset`): same fields.
pub type LogOffset = LogEntryHeader;

/// An entry read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub header: LogEntryHeader,
    pub payload: bytes::Bytes,
}

/// Where one entry lives, so it can be read again without resolving its offset
/// (seed 000's `EntryIndex`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryIndex {
    /// The log the entry belongs to: a read by index whose object is gone (compacted, then
    /// cleaned) finds the entry again through this log's index.
    pub log: LogId,
    pub header: LogEntryHeader,
    /// The object holding it.
    pub object: objstore::Path,
    /// Its bytes (entry header and payload) in that object.
    pub byte_start: u64,
    pub byte_len: u64,
}

/// What a log looks like now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogInfo {
    pub log: LogId,
    pub state: records::LogState,
    pub epoch: i64,
    /// The soft-trim start: the first readable offset.
    pub first_offset: u64,
    /// The high watermark.
    pub next_offset: u64,
    /// The last stable offset: the first offset of the oldest open Kafka transaction, else
    /// the high watermark.
    pub last_stable_offset: u64,
    pub entries: u64,
    pub bytes: u64,
    /// The largest entry timestamp ever committed (trimmed entries included).
    pub max_timestamp: i64,
    /// The metadata revision this was read at.
    pub revision: i64,
}

/// The closed set of error codes (one crate, shared with the server adapters and the client).
pub use codes::Code;

/// Errors of log storage. Each says whether the outcome is known: only `Unavailable` with
/// `outcome_unknown` may hide a committed append.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    #[error("log {0} not found")]
    NotFound(LogId),
    #[error("cursor {name} of log {log} not found")]
    CursorNotFound { log: LogId, name: String },
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// The log (`whole_log`: by `fence()`, until `activate`), or this writer's slot of it
    /// (another writer took it over), was fenced: nothing of the append committed.
    #[error("{} {log} is fenced (epoch held {held}, epoch now {current})", if *.whole_log { "log" } else { "this writer's slot of log" })]
    Fenced { log: LogId, held: i64, current: i64, whole_log: bool },
    /// This writer does not own the log's slot; `owner` (an address, maybe empty) does.
    #[error("writer does not own log {log} (slot {slot}); owner: {owner_id} at {owner}")]
    NotOwner { log: LogId, slot: String, owner_id: String, owner: String },
    #[error("offset {offset} is out of range [{start}, {end}] of log {log}")]
    OffsetOutOfRange { log: LogId, offset: u64, start: u64, end: u64 },
    #[error("expected offset {expected} but log {log} is at {actual}")]
    OffsetMismatch { log: LogId, expected: u64, actual: u64 },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Retryable. With `outcome_unknown`, an append may have committed: read before retrying.
    #[error("unavailable{}: {message}", if *.outcome_unknown { " (commit outcome unknown)" } else { "" })]
    Unavailable { message: String, outcome_unknown: bool },
    #[error("resource exhausted: {0}")]
    ResourceExhausted(String),
    /// A mutating call sent to a read-only reader.
    #[error("read-only: {0}")]
    ReadOnly(String),
    #[error("internal error: {0}")]
    Internal(String),
    /// Stored data failed its checksum: never returned as data.
    #[error("corrupt data: {0}")]
    Corrupt(String),
}

impl LogError {
    pub fn code(&self) -> Code {
        match self {
            LogError::NotFound(_) | LogError::CursorNotFound { .. } => Code::NotFound,
            LogError::AlreadyExists(_) => Code::AlreadyExists,
            LogError::Fenced { .. } => Code::Fenced,
            LogError::NotOwner { .. } => Code::NotOwner,
            LogError::OffsetOutOfRange { .. } => Code::OffsetOutOfRange,
            LogError::OffsetMismatch { .. } => Code::OffsetMismatch,
            LogError::InvalidArgument(_) => Code::InvalidArgument,
            LogError::Unavailable { .. } => Code::Unavailable,
            LogError::ResourceExhausted(_) => Code::ResourceExhausted,
            LogError::ReadOnly(_) => Code::ReadOnly,
            LogError::Internal(_) | LogError::Corrupt(_) => Code::Internal,
        }
    }

    /// Whether an append answered with this may have committed.
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, LogError::Unavailable { outcome_unknown: true, .. })
    }

    /// A refusal that applied nothing: worth retrying.
    pub fn unavailable(message: impl Into<String>) -> Self {
        LogError::Unavailable { message: message.into(), outcome_unknown: false }
    }

    pub(crate) fn unknown(message: impl Into<String>) -> Self {
        LogError::Unavailable { message: message.into(), outcome_unknown: true }
    }
}

impl From<metadata::MetaError> for LogError {
    fn from(e: metadata::MetaError) -> Self {
        use metadata::MetaError as M;
        match e {
            M::OutcomeUnknown { .. } => LogError::unknown(e.to_string()),
            M::Unavailable(_) => LogError::unavailable(e.to_string()),
            M::NoSpace(_) => LogError::ResourceExhausted(e.to_string()),
            // The caller's lease ended, or a read raced history compaction or a lagging
            // member: each is retryable (a new incarnation, a fresh read), never INTERNAL.
            M::LeaseNotFound(_) | M::Compacted { .. } | M::FutureRevision { .. } => {
                LogError::unavailable(e.to_string())
            }
            M::InvalidArgument(_) | M::Internal(_) => LogError::Internal(e.to_string()),
        }
    }
}

impl From<object_store_error::Error> for LogError {
    fn from(e: object_store_error::Error) -> Self {
        LogError::unavailable(format!("object store: {e}"))
    }
}

impl From<wal::FormatError> for LogError {
    fn from(e: wal::FormatError) -> Self {
        LogError::Corrupt(e.to_string())
    }
}

mod object_store_error {
    pub use objstore::object_store::Error;
}

/// Milliseconds since the Unix epoch: the only clock this crate reads, passed in so tests and
/// the simulation can drive it.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

/// A record of the metadata store decoded, or [`LogError::Corrupt`] naming `what` it is.
pub fn decode<M: prost::Message + Default>(what: &str, bytes: &[u8]) -> Result<M, LogError> {
    M::decode(bytes).map_err(|e| LogError::Corrupt(format!("{what}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use metadata::MetaError;

    #[test]
    fn a_lost_lease_or_a_raced_revision_is_retryable_never_internal() {
        for e in [
            MetaError::LeaseNotFound(7),
            MetaError::Compacted { requested: 3, compact_revision: 9 },
            MetaError::FutureRevision { requested: 9, current: 3 },
            MetaError::Unavailable("down".into()),
        ] {
            let l = LogError::from(e.clone());
            assert_eq!(l.code(), Code::Unavailable, "{e} became {l}");
            assert!(!l.outcome_unknown(), "{e}: nothing was applied");
        }
        let unknown = LogError::from(MetaError::OutcomeUnknown { op: "txn", reason: "x".into() });
        assert!(unknown.code() == Code::Unavailable && unknown.outcome_unknown());
        assert_eq!(
            LogError::from(MetaError::NoSpace("quota".into())).code(),
            Code::ResourceExhausted
        );
        assert_eq!(LogError::from(MetaError::Internal("io".into())).code(), Code::Internal);
    }
}
