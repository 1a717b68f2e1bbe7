//! Values stored in the metadata store, as protobuf messages (prost derives; no .proto file,
//! these never leave Lakelog's own processes). Field numbers are forever.

/// The state of a log (`LogHead::state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum LogState {
    Normal = 0,
    Fenced = 1,
    Deleted = 2,
}

/// Who holds (or fenced) a log: a writer incarnation.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Owner {
    #[prost(string, tag = "1")]
    pub writer_id: String,
    /// create_revision of the writer's member key: its incarnation.
    #[prost(int64, tag = "2")]
    pub member_revision: i64,
}

/// One owner slot of a log (one per zone with producers, plus `*`), with its own epoch.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Slot {
    #[prost(string, tag = "1")]
    pub zone: String,
    #[prost(int64, tag = "2")]
    pub epoch: i64,
    #[prost(message, optional, tag = "3")]
    pub owner: Option<Owner>,
}

/// Where a contiguous run of one log's entries lives.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Locator {
    #[prost(uint64, tag = "1")]
    pub first_offset: u64,
    #[prost(uint64, tag = "2")]
    pub record_count: u64,
    #[prost(uint32, tag = "3")]
    pub entry_count: u32,
    /// The WAL object's sequence.
    #[prost(uint64, tag = "4")]
    pub wal_seq: u64,
    /// Byte range of the run in the object.
    #[prost(uint64, tag = "5")]
    pub byte_start: u64,
    #[prost(uint64, tag = "6")]
    pub byte_len: u64,
    /// Running maximum timestamp at the run's last entry.
    #[prost(int64, tag = "7")]
    pub max_timestamp: i64,
    /// Payload bytes of the log before the run's first entry.
    #[prost(uint64, tag = "8")]
    pub cumulative_before: u64,
    /// Payload bytes of the run.
    #[prost(uint64, tag = "9")]
    pub payload_bytes: u64,
    /// 0 for a chunk of WAL object `wal_seq`; else the run is the compacted segment the
    /// compactor claim with this create_revision wrote (ARCHITECTURE §5).
    #[prost(uint64, tag = "10")]
    pub compacted_claim: u64,
    /// When the log took the run (ms, the committing writer's clock, never below the log's
    /// earlier runs'): for a chunk its commit, for a segment its last entry's. 0 if unknown
    /// (runs written before it was kept).
    #[prost(int64, tag = "11")]
    pub ingest_ms: i64,
    /// Set for a segment written as a lake table's Parquet data file (docs/lake.md):
    /// what a read needs to fetch one row group with one ranged GET.
    #[prost(message, optional, tag = "12")]
    pub lake: Option<LakeFile>,
}

/// A lake segment's place map: its footer's length and checksum, and its row groups.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct LakeFile {
    #[prost(uint64, tag = "1")]
    pub footer_len: u64,
    #[prost(uint32, tag = "2")]
    pub footer_crc32c: u32,
    #[prost(message, repeated, tag = "3")]
    pub row_groups: Vec<RowGroupRef>,
}

/// One row group of a lake segment: its first offset and record count, and its bytes in the
/// file with their CRC-32C (checked before a byte is decoded).
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct RowGroupRef {
    #[prost(uint64, tag = "1")]
    pub first_offset: u64,
    #[prost(uint64, tag = "2")]
    pub records: u64,
    #[prost(uint64, tag = "3")]
    pub start: u64,
    #[prost(uint64, tag = "4")]
    pub len: u64,
    #[prost(uint32, tag = "5")]
    pub crc32c: u32,
    /// Payload bytes of the segment before it, as stored (the entries' log positions).
    #[prost(uint64, tag = "6")]
    pub bytes_before: u64,
    /// The largest timestamp of its entries as read (their batches' max timestamps); 0 for
    /// segments written before it was kept. A timestamp search reads only the group it needs.
    #[prost(int64, tag = "7")]
    pub max_timestamp: i64,
}

impl Locator {
    /// The object holding the run (of log `log`).
    pub fn object(&self, log: crate::LogId) -> objstore::Path {
        if self.compacted_claim == 0 {
            objstore::keys::wal_object(self.wal_seq)
        } else {
            objstore::keys::compacted_object(objstore::keys::CompactedKey {
                log: log.0,
                first_offset: self.first_offset,
                claim_revision: self.compacted_claim,
                lake: self.lake.is_some(),
            })
        }
    }

    /// Whether the run is a chunk of a WAL object (not yet compacted).
    pub fn in_wal(&self) -> bool {
        self.compacted_claim == 0
    }

    /// When the log took the run's entries: its own ingest time, or (a run written before
    /// ingest times were kept) its running maximum timestamp.
    pub fn ingest_time(&self) -> i64 {
        if self.ingest_ms != 0 { self.ingest_ms } else { self.max_timestamp }
    }

    pub fn end_offset(&self) -> u64 {
        self.first_offset + self.record_count
    }

    pub fn contains(&self, offset: u64) -> bool {
        self.first_offset <= offset && offset < self.end_offset()
    }
}

/// Describes one entry without its payload (seed 000's `LogOffset`).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct EntryDescriptor {
    #[prost(uint64, tag = "1")]
    pub offset: u64,
    #[prost(uint32, tag = "2")]
    pub record_count: u32,
    #[prost(int64, tag = "3")]
    pub timestamp: i64,
    #[prost(uint64, tag = "4")]
    pub entry_size: u64,
    #[prost(uint64, tag = "5")]
    pub cumulative_size: u64,
}

/// `logs/<id>/head`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct LogHead {
    #[prost(enumeration = "LogState", tag = "1")]
    pub state: i32,
    /// Log-wide epoch: set by `fence()` to a revision unique to this log and increasing.
    #[prost(int64, tag = "2")]
    pub epoch: i64,
    #[prost(message, repeated, tag = "3")]
    pub slots: Vec<Slot>,
    #[prost(message, optional, tag = "4")]
    pub fenced_by: Option<Owner>,
    /// The high watermark: offset just past the last committed record.
    #[prost(uint64, tag = "5")]
    pub next_offset: u64,
    #[prost(uint64, tag = "6")]
    pub cumulative_bytes: u64,
    #[prost(int64, tag = "7")]
    pub max_timestamp: i64,
    #[prost(uint64, tag = "8")]
    pub entry_count: u64,
    #[prost(message, optional, tag = "9")]
    pub last_entry: Option<EntryDescriptor>,
    /// The newest chunk locators, oldest first; at most [`RECENT_MAX`](crate::RECENT_MAX).
    #[prost(message, repeated, tag = "10")]
    pub recent: Vec<Locator>,
    /// The stream partition this log serves, if a stream's: owner selection hashes it.
    #[prost(message, optional, tag = "11")]
    pub route: Option<StreamRoute>,
    /// The largest `ingest_ms` of its runs: a commit's runs take at least this, so ingest
    /// time never goes back within a log whatever the writers' clocks.
    #[prost(int64, tag = "12")]
    pub ingest_ms: i64,
    /// Kafka transactions open in the log: each producer's first offset in its open
    /// transaction, oldest first. The last stable offset is the first of them (the high
    /// watermark when none is open). At most [`MAX_OPEN_TXNS`](crate::MAX_OPEN_TXNS).
    #[prost(message, repeated, tag = "13")]
    pub open_txns: Vec<OpenTxn>,
    /// The newest aborted transactions, oldest first (by their abort marker's offset); at
    /// most [`ABORTED_RECENT`](crate::ABORTED_RECENT): older ones are paged out to
    /// `logs/<id>/aborted/<marker offset>` by the commit that ends them here.
    #[prost(message, repeated, tag = "14")]
    pub aborted: Vec<AbortedTxn>,
    /// How many aborted transactions were ever paged out of [`Self::aborted`].
    #[prost(uint64, tag = "15")]
    pub aborted_paged: u64,
}

/// A Kafka transaction open in a log (ARCHITECTURE §12): its producer and the offset of its
/// first batch here.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct OpenTxn {
    #[prost(int64, tag = "1")]
    pub producer_id: i64,
    #[prost(uint64, tag = "2")]
    pub first_offset: u64,
}

/// An aborted Kafka transaction of a log: its producer, its first batch's offset here and its
/// abort marker's (`last_offset`). A read_committed consumer skips that producer's batches
/// from `first_offset` until the marker; `logs/<id>/aborted/<last_offset>` once paged out.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct AbortedTxn {
    #[prost(int64, tag = "1")]
    pub producer_id: i64,
    #[prost(uint64, tag = "2")]
    pub first_offset: u64,
    #[prost(uint64, tag = "3")]
    pub last_offset: u64,
}

/// Which stream partition a log is: set once, at creation.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct StreamRoute {
    /// The stream's identity (a UUID; new when a name is re-created).
    #[prost(string, tag = "1")]
    pub stream_identity: String,
    #[prost(uint32, tag = "2")]
    pub partition: u32,
}

impl LogHead {
    pub fn log_state(&self) -> LogState {
        LogState::try_from(self.state).unwrap_or(LogState::Fenced)
    }

    pub fn slot(&self, zone: &str) -> Option<&Slot> {
        self.slots.iter().find(|s| s.zone == zone)
    }

    /// The last stable offset: the first offset of the oldest open transaction, else the
    /// high watermark. Below it every transaction has ended (its marker is in the log).
    pub fn last_stable_offset(&self) -> u64 {
        self.open_txns.iter().map(|t| t.first_offset).min().unwrap_or(self.next_offset)
    }
}

/// `logs/<id>/index/<offset>`: an immutable page of locators.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct IndexPage {
    #[prost(message, repeated, tag = "1")]
    pub locators: Vec<Locator>,
}

/// `members/<role>/<id>`: a live process, under its lease. The key's create_revision is the
/// incarnation; commits compare it.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct MemberRecord {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub role: String,
    /// Where clients reach it, e.g. `http://10.0.0.5:7540`; empty if it serves no clients.
    #[prost(string, tag = "3")]
    pub address: String,
    /// Its zone; `*` for none.
    #[prost(string, tag = "4")]
    pub zone: String,
    /// Where Kafka clients reach it, `host:port`; empty when it serves no Kafka.
    #[prost(string, tag = "5")]
    pub kafka: String,
    /// Its Kafka node id (`kafka/node_ids/<id>`); -1 when it has none.
    #[prost(int32, tag = "6")]
    pub node_id: i32,
}
