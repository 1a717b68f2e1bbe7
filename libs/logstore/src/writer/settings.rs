//! A writer's settings, with the documented defaults.

use std::time::Duration;

use crate::LogError;

/// The shortest commit interval the writer derives from its flush cadence, and the first step
/// of the AIMD's lengthening from a shorter one (ARCHITECTURE §4).
pub const MIN_COMMIT_INTERVAL: Duration = Duration::from_millis(5);

/// A PUT is never hedged sooner than this: a store that answers within it is not worth a
/// second copy (and a local disk under load would only get slower).
pub const MIN_HEDGE_AFTER: Duration = Duration::from_millis(5);

/// Settings of one log-storage writer. `new` gives the documented defaults.
#[derive(Clone, Debug)]
pub struct LogStorageConfig {
    /// Metadata keys live under `/<cluster>/`.
    pub cluster: String,
    /// This writer's id: unique among live writers.
    pub writer_id: String,
    /// The zone whose owner slot this writer takes (`*`: no zone).
    pub zone: String,
    /// Where clients reach this writer (published in its member record); may be empty.
    pub advertise: String,
    /// Where Kafka clients reach this writer, `host:port` (its member record, with a node id
    /// from `kafka/node_ids/`); empty when it serves no Kafka.
    pub kafka_advertise: String,
    /// A flush happens when the oldest buffered append is this old (default 250 ms, ≥ 1 ms)...
    pub flush_interval: Duration,
    /// ...or when this many payload bytes are buffered (default 8 MiB).
    pub flush_bytes: usize,
    /// The eager policy, when set: a flush happens as soon as an append waits, fewer than
    /// `eager_puts` flushes' PUTs are out, and this long has passed since the previous flush
    /// began (0: no spacing). Appends that come while the PUTs are out gather for the next
    /// (group commit), so a light load is acknowledged after about one PUT and one commit, and
    /// PUTs per second stay at most one per this interval and `eager_puts` per PUT's latency;
    /// `flush_interval` and `flush_bytes` still bound a flush's wait and size (their flushes
    /// do not wait for a PUT out). `None` (the default): flushes wait for `flush_interval` or
    /// `flush_bytes`.
    pub min_flush_interval: Option<Duration>,
    /// Under the eager policy, how many flushes' PUTs may be out at once before a waiting
    /// append waits for one of them to answer (default 1: one at a time, the fewest objects;
    /// more shortens the wait behind a slow PUT, at more PUTs).
    pub eager_puts: usize,
    /// PUT hedging, when set: a flush's PUT that has not answered by this quantile of recent
    /// PUTs of its size (and at least [`MIN_HEDGE_AFTER`]) is raced by a second PUT of the
    /// same bytes under a new WAL sequence; the first to succeed is the one its chunks
    /// reference, the other is an orphan the cleaner deletes with the sequences below its
    /// cutoff. About `1 - q` of PUTs are sent twice; a slow PUT's tail is cut to about the
    /// quantile plus one more PUT. `None` (the default): no hedging. At least 0.5, below 1.
    pub hedge_quantile: Option<f64>,
    /// The commit budget (ARCHITECTURE §4): commit rounds start at most once per this, so a
    /// log commits at most once per it; flushes stored meanwhile commit together, each log's
    /// chunks in one transaction. `None` (the default): the flush cadence, `min_flush_interval`
    /// under the eager policy and `flush_interval` otherwise, at least 5 ms
    /// ([`MIN_COMMIT_INTERVAL`]). Set, it may be shorter, down to 0: a round starts as soon as
    /// the previous one ended (`standalone`'s default over its embedded store). While the
    /// metadata store's commit p99 exceeds `flush_interval`, the writer lengthens it (AIMD)
    /// before flushes reach their deadline.
    pub commit_interval: Option<Duration>,
    /// The largest payload one append may carry (default 16 MiB).
    pub max_entry_bytes: usize,
    /// Payload bytes buffered or being written (until their PUT succeeds), plus
    /// `ENTRY_BOOKKEEPING` (256) bytes per append until it is answered, at most; appends wait
    /// for room (default 64 MiB). Appends asking an eighth of it may wait at once (always
    /// one); when more would, the next is refused at once with RESOURCE_EXHAUSTED. From 8 MiB
    /// up, an eighth of it (whole MiB) is set aside for WAL object buffers kept for later
    /// flushes, and appends have the rest.
    pub buffer_bytes: usize,
    /// How long an append waits for buffer room before RESOURCE_EXHAUSTED (default 5 s).
    pub append_timeout: Duration,
    /// Deadline for a flush's PUT and commit (default 30 s).
    pub flush_deadline: Duration,
    /// The writer's lease (default 10 s).
    pub lease_ttl: Duration,
    /// WAL sequences allocated at a time (default 1000).
    pub seq_block: u64,
    /// The tail cache: bytes of recently committed entries kept in memory, so reads of the
    /// tail (a caught-up consumer) need no GET (default 64 MiB; 0 turns it off). It lives in
    /// `buffer_bytes`' room that appends do not hold, and gives it back when they need it.
    pub tail_cache_bytes: usize,
}

impl LogStorageConfig {
    pub fn new(cluster: impl Into<String>, writer_id: impl Into<String>) -> Self {
        LogStorageConfig {
            cluster: cluster.into(),
            writer_id: writer_id.into(),
            zone: "*".to_owned(),
            advertise: String::new(),
            kafka_advertise: String::new(),
            flush_interval: Duration::from_millis(250),
            flush_bytes: 8 << 20,
            min_flush_interval: None,
            eager_puts: 1,
            hedge_quantile: None,
            commit_interval: None,
            max_entry_bytes: 16 << 20,
            buffer_bytes: 64 << 20,
            append_timeout: Duration::from_secs(5),
            flush_deadline: Duration::from_secs(30),
            lease_ttl: Duration::from_secs(10),
            seq_block: 1000,
            tail_cache_bytes: 64 << 20,
        }
    }

    /// The commit budget's base interval: `commit_interval`, or else the flush cadence and at
    /// least [`MIN_COMMIT_INTERVAL`].
    pub fn commit_interval(&self) -> Duration {
        self.commit_interval.unwrap_or_else(|| {
            self.min_flush_interval.unwrap_or(self.flush_interval).max(MIN_COMMIT_INTERVAL)
        })
    }

    pub(crate) fn validate(&self) -> Result<(), LogError> {
        let bad = |m: String| Err(LogError::InvalidArgument(m));
        if self.writer_id.is_empty() || self.writer_id.contains('/') {
            return bad(format!(
                "writer id `{}` must be non-empty and without `/`",
                self.writer_id
            ));
        }
        if self.flush_interval < Duration::from_millis(1) {
            return bad(format!("flush_interval {:?} is below 1 ms", self.flush_interval));
        }
        if let Some(min) = self.min_flush_interval
            && min > self.flush_interval
        {
            return bad(format!(
                "min_flush_interval {min:?} must be at most flush_interval {:?}",
                self.flush_interval
            ));
        }
        if self.eager_puts == 0 {
            return bad("eager_puts must be at least 1".to_owned());
        }
        if let Some(q) = self.hedge_quantile
            && !(0.5..1.0).contains(&q)
        {
            return bad(format!("hedge_quantile {q} must be at least 0.5 and below 1"));
        }
        if let Some(c) = self.commit_interval
            && c > self.flush_deadline / 8
        {
            return bad(format!(
                "commit_interval {c:?} must be at most an eighth of flush_deadline {:?}",
                self.flush_deadline
            ));
        }
        if self.max_entry_bytes == 0 || self.max_entry_bytes > self.buffer_bytes {
            return bad(format!(
                "max_entry_bytes {} must be between 1 and buffer_bytes {}",
                self.max_entry_bytes, self.buffer_bytes
            ));
        }
        if u32::try_from(self.max_entry_bytes).is_err() {
            return bad(format!("max_entry_bytes {} is over 4 GiB", self.max_entry_bytes));
        }
        if self.seq_block == 0 || self.lease_ttl < Duration::from_secs(2) {
            return bad("seq_block must be ≥ 1 and lease_ttl ≥ 2 s".to_owned());
        }
        Ok(())
    }
}
