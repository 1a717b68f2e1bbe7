//! [`Log`] (Level 0): the per-log handle — fence/activate, offset and timestamp search over
//! entry headers, and retention computation (seed 000).

use bytes::Bytes;

use crate::{LogEntry, LogEntryHeader, LogError, LogId, LogStorage};

/// A handle on one log. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Log {
    id: LogId,
    storage: LogStorage,
}

impl Log {
    pub fn new(storage: LogStorage, id: LogId) -> Self {
        Log { id, storage }
    }

    pub fn id(&self) -> LogId {
        self.id
    }

    pub async fn append(
        &self,
        record_count: u32,
        payload: Bytes,
    ) -> Result<LogEntryHeader, LogError> {
        self.storage.append(self.id, record_count, payload, None).await
    }

    /// The entry holding `offset`.
    pub async fn read_entry(&self, offset: u64) -> Result<LogEntry, LogError> {
        let mut entries = self.storage.read_entries(self.id, offset, 1, 1).await?;
        if entries.is_empty() {
            let info = self.storage.info(self.id).await?;
            return Err(LogError::OffsetOutOfRange {
                log: self.id,
                offset,
                start: info.first_offset,
                end: info.next_offset,
            });
        }
        Ok(entries.remove(0))
    }

    pub async fn fence(&self) -> Result<i64, LogError> {
        self.storage.fence(self.id).await
    }

    pub async fn activate(&self, epoch: i64) -> Result<(), LogError> {
        self.storage.activate(self.id, epoch).await
    }

    /// The first readable entry whose running-maximum timestamp is ≥ `t` (Kafka's time
    /// index semantics: timestamps from several writers are not monotone), or `None` if every
    /// entry is older.
    pub async fn find_by_timestamp(&self, t: i64) -> Result<Option<LogEntryHeader>, LogError> {
        crate::retention::find_by_timestamp(self.storage.reader(), self.id, t).await
    }

    /// The offset retention may trim to (never past the high watermark, never below the
    /// current start): everything whose running-max timestamp is below `now_ms − retention_ms`,
    /// and the oldest entries beyond the newest `retention_bytes` payload bytes.
    pub async fn compute_retention_trim_offset(
        &self,
        retention_ms: Option<i64>,
        retention_bytes: Option<u64>,
        now_ms: i64,
    ) -> Result<u64, LogError> {
        crate::retention::trim_offset(
            self.storage.reader(),
            self.id,
            retention_ms,
            retention_bytes,
            now_ms,
        )
        .await
    }
}
