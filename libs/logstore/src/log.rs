//! [`Log`] (Level 0): the per-log handle — fence/activate, offset and timestamp search over
//! entry headers, and retention computation (seed 000).

use bytes::Bytes;

use crate::records::Locator;
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
        let (locators, start) = self.locators().await?;
        // Running maxima are monotone, so the first readable run reaching `t` holds the answer
        // (or, if its qualifying entries are trimmed, a later run does).
        let from = locators
            .partition_point(|l| l.max_timestamp < t)
            .max(locators.partition_point(|l| l.end_offset() <= start));
        for (i, loc) in locators.iter().enumerate().skip(from) {
            let mut running = if i == 0 { i64::MIN } else { locators[i - 1].max_timestamp };
            for h in self.storage.reader().run_headers(self.id, loc).await? {
                running = running.max(h.timestamp);
                if running >= t && h.end_offset() > start {
                    return Ok(Some(h));
                }
            }
        }
        Ok(None)
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
        let info = self.storage.info(self.id).await?;
        let mut trim = info.first_offset;
        if let Some(ms) = retention_ms {
            let cutoff = now_ms.saturating_sub(ms);
            let by_time = match self.find_by_timestamp(cutoff).await? {
                Some(h) => h.offset,
                None => info.next_offset,
            };
            trim = trim.max(by_time);
        }
        if let Some(keep) = retention_bytes
            && info.bytes > keep
        {
            // The first entry boundary after which at most `keep` bytes remain.
            let cutoff = info.bytes - keep;
            let (locators, _) = self.locators().await?;
            let i = locators.partition_point(|l| l.cumulative_before + l.payload_bytes <= cutoff);
            let by_bytes = match locators.get(i) {
                None => info.next_offset,
                Some(loc) => {
                    let headers = self.storage.reader().run_headers(self.id, loc).await?;
                    headers
                        .iter()
                        .find(|h| h.cumulative_size - h.entry_size >= cutoff)
                        .map_or(loc.end_offset(), |h| h.offset)
                }
            };
            trim = trim.max(by_bytes);
        }
        Ok(trim.min(info.next_offset))
    }

    async fn locators(&self) -> Result<(Vec<Locator>, u64), LogError> {
        let reader = self.storage.reader();
        let snap = reader.snapshot(self.id).await?;
        let start = snap.start;
        Ok((reader.all_locators(&snap).await?, start))
    }
}
