//! Kafka transactions (KIP-98, ARCHITECTURE §12): a transactional id's state as its
//! coordinator stores it, and the check a partition's owner makes of a transactional batch
//! against it (KIP-890's verification: the partition is in the producer's ongoing
//! transaction, at its epoch).

use kafka_protocol::ResponseError;

use crate::{Refused, code};

pub const INVALID_TXN_STATE: i16 = ResponseError::InvalidTxnState.code();
pub const PRODUCER_FENCED: i16 = ResponseError::ProducerFenced.code();
pub const CONCURRENT_TRANSACTIONS: i16 = ResponseError::ConcurrentTransactions.code();
pub const INVALID_PRODUCER_ID_MAPPING: i16 = ResponseError::InvalidProducerIdMapping.code();
pub const INVALID_TRANSACTION_TIMEOUT: i16 = ResponseError::InvalidTransactionTimeout.code();

/// How long a transactional id with no transaction under way is kept after its last change
/// (Kafka's `transactional.id.expiration.ms`, 7 days): then it is forgotten, and its next
/// InitProducerId starts it afresh, at a new producer id.
pub const ID_EXPIRATION_MS: i64 = 7 * 24 * 3_600_000;

/// The longest transaction a producer may ask for (Kafka's `transaction.max.timeout.ms`).
pub const MAX_TIMEOUT_MS: i32 = 900_000;
/// The epoch past which a producer id is rotated rather than bumped (Kafka's).
const LAST_EPOCH: i32 = i16::MAX as i32 - 1;

/// Where a transaction is (Kafka's `TransactionState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum TxnPhase {
    Empty = 0,
    Ongoing = 1,
    PrepareCommit = 2,
    PrepareAbort = 3,
    CompleteCommit = 4,
    CompleteAbort = 5,
    /// Being fenced: an InitProducerId found it ongoing; it is aborted at the bumped epoch.
    PrepareEpochFence = 6,
}

impl TxnPhase {
    /// Kafka's name for it (DescribeTransactions, ListTransactions).
    pub fn name(self) -> &'static str {
        match self {
            TxnPhase::Empty => "Empty",
            TxnPhase::Ongoing => "Ongoing",
            TxnPhase::PrepareCommit => "PrepareCommit",
            TxnPhase::PrepareAbort | TxnPhase::PrepareEpochFence => "PrepareAbort",
            TxnPhase::CompleteCommit => "CompleteCommit",
            TxnPhase::CompleteAbort => "CompleteAbort",
        }
    }
}

/// A transaction marker for one partition (WriteTxnMarkers): it ends producer
/// (`producer_id`, `producer_epoch`)'s transaction there, committed or aborted, written for
/// the coordinator at `coordinator_epoch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marker {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub coordinator_epoch: i32,
}

/// A marker a coordinator asked a partition's owner to write, as it waits in the metadata
/// store (`kafka/txns/markers/<topic>/<partition>/<producer id>`) until written.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StoredMarker {
    #[prost(string, tag = "1")]
    pub transactional_id: String,
    #[prost(int32, tag = "2")]
    pub producer_epoch: i32,
    #[prost(bool, tag = "3")]
    pub commit: bool,
    #[prost(int32, tag = "4")]
    pub coordinator_epoch: i32,
}

impl StoredMarker {
    pub fn encode(&self) -> Vec<u8> {
        prost::Message::encode_to_vec(self)
    }

    pub fn decode_from(bytes: &[u8]) -> Option<StoredMarker> {
        prost::Message::decode(bytes).ok()
    }
}

/// A partition in a transaction.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Message)]
pub struct TxnPartition {
    #[prost(string, tag = "1")]
    pub topic: String,
    #[prost(int32, tag = "2")]
    pub partition: i32,
}

/// A transactional id's state, as its coordinator stores it (`kafka/txns/states/<id>`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct StoredTxn {
    #[prost(int64, tag = "1")]
    pub producer_id: i64,
    #[prost(int32, tag = "2")]
    pub producer_epoch: i32,
    #[prost(enumeration = "TxnPhase", tag = "3")]
    pub phase: i32,
    #[prost(int32, tag = "4")]
    pub timeout_ms: i32,
    /// The partitions of the transaction under way (or being ended).
    #[prost(message, repeated, tag = "5")]
    pub partitions: Vec<TxnPartition>,
    /// The groups whose offsets it commits (AddOffsetsToTxn).
    #[prost(string, repeated, tag = "6")]
    pub groups: Vec<String>,
    /// When the transaction began (its first partition added), ms since the Unix epoch.
    #[prost(int64, tag = "7")]
    pub started_ms: i64,
    /// When the state last changed.
    #[prost(int64, tag = "8")]
    pub updated_ms: i64,
    /// The producer id and epoch the markers of the transaction being ended (or last ended)
    /// carry, when the ending moved the producer on: its epoch bumped (transactions V2's
    /// EndTxn, a zombie fenced, a timeout), perhaps to a new producer id once its epochs were
    /// spent. The transaction ran at the epoch before. Unset: the markers carry
    /// (`producer_id`, `producer_epoch`), which the transaction ran at.
    #[prost(int64, optional, tag = "9")]
    pub marker_producer_id: Option<i64>,
    #[prost(int32, optional, tag = "10")]
    pub marker_epoch: Option<i32>,
}

impl StoredTxn {
    /// A stored state, decoded.
    pub fn decode_from(bytes: &[u8]) -> Result<StoredTxn, Refused> {
        prost::Message::decode(bytes)
            .map_err(|e| Refused::server(format!("transaction state: {e}")))
    }

    /// Encoded, to store.
    pub fn encode(&self) -> Vec<u8> {
        prost::Message::encode_to_vec(self)
    }

    /// The producer id and epoch the markers of the transaction being ended carry.
    pub fn marker_producer(&self) -> (i64, i32) {
        match (self.marker_producer_id, self.marker_epoch) {
            (Some(id), Some(epoch)) => (id, epoch),
            _ => (self.producer_id, self.producer_epoch),
        }
    }

    /// The producer id and epoch the transaction being ended ran at (its batches', and its
    /// staged offsets').
    pub fn txn_producer(&self) -> (i64, i32) {
        match (self.marker_producer_id, self.marker_epoch) {
            (Some(id), Some(epoch)) => (id, epoch - 1),
            _ => (self.producer_id, self.producer_epoch),
        }
    }

    /// Whether a transactional batch of producer (`producer_id`, `epoch`) to `topic`'s
    /// `partition` belongs to this transaction: it is ongoing, at that producer and epoch, and
    /// has the partition. Kafka's answers otherwise: PRODUCER_FENCED for an older epoch of
    /// the producer, INVALID_PRODUCER_ID_MAPPING for another producer, INVALID_TXN_STATE for a
    /// partition not added or a transaction not under way.
    pub fn verify(
        &self,
        producer_id: i64,
        epoch: i16,
        topic: &str,
        partition: i32,
    ) -> Result<(), Refused> {
        let added = self.partitions.iter().any(|p| p.topic == topic && p.partition == partition);
        self.check_member(producer_id, epoch, added, || format!("{topic}-{partition}"))
    }

    /// Whether producer (`producer_id`, `epoch`) may commit offsets of `group` in this
    /// transaction (TxnOffsetCommit): it is ongoing at that producer and epoch and has the
    /// group (AddOffsetsToTxn). Kafka's codes otherwise, as [`StoredTxn::verify`]'s.
    pub fn verify_group(&self, producer_id: i64, epoch: i16, group: &str) -> Result<(), Refused> {
        let added = self.groups.iter().any(|g| g == group);
        self.check_member(producer_id, epoch, added, || format!("group {group}"))
    }

    /// The checks [`StoredTxn::verify`] and [`StoredTxn::verify_group`] share: producer
    /// (`producer_id`, `epoch`) is this transaction's, at its epoch, it is ongoing, and the
    /// partition or group (`what`) is in it (`added`).
    fn check_member(
        &self,
        producer_id: i64,
        epoch: i16,
        added: bool,
        what: impl FnOnce() -> String,
    ) -> Result<(), Refused> {
        if producer_id != self.producer_id {
            return Err(Refused::new(
                INVALID_PRODUCER_ID_MAPPING,
                format!("producer {producer_id} is not the transactional id's"),
            ));
        }
        if i32::from(epoch) < self.producer_epoch {
            return Err(Refused::new(
                PRODUCER_FENCED,
                format!("epoch {epoch} is older than {}", self.producer_epoch),
            ));
        }
        if self.phase() != TxnPhase::Ongoing || i32::from(epoch) != self.producer_epoch || !added {
            return Err(Refused::new(
                INVALID_TXN_STATE,
                format!(
                    "{} is not in an ongoing transaction of producer {producer_id} at epoch {epoch}",
                    what()
                ),
            ));
        }
        Ok(())
    }
}

/// An offset a transaction commits for a group (TxnOffsetCommit), as it waits in the
/// metadata store (`kafka/groups/pending/<group>/<producer id>/<log>`) for the transaction's
/// end: applied to the group's offsets by a commit, dropped by an abort.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PendingOffset {
    #[prost(int32, tag = "1")]
    pub producer_epoch: i32,
    #[prost(string, tag = "2")]
    pub topic: String,
    #[prost(int32, tag = "3")]
    pub partition: i32,
    #[prost(int64, tag = "4")]
    pub offset: i64,
    #[prost(int32, tag = "5")]
    pub leader_epoch: i32,
    #[prost(string, optional, tag = "6")]
    pub metadata: Option<String>,
}

impl PendingOffset {
    pub fn encode(&self) -> Vec<u8> {
        prost::Message::encode_to_vec(self)
    }

    pub fn decode_from(bytes: &[u8]) -> Option<PendingOffset> {
        prost::Message::decode(bytes).ok()
    }
}

/// How a transactional id's state moves (Kafka's `TransactionCoordinator`, transactions V1:
/// the client bumps no epoch of its own). Each function is the transition a request makes,
/// the new state to store (by compare-and-set) or Kafka's error code; `Ok(None)` is an answer
/// that changes nothing.
pub mod machine {
    use super::*;

    /// What InitProducerId does.
    #[derive(Debug, PartialEq)]
    pub enum Init {
        /// Store this and answer its producer id and epoch.
        Ready(StoredTxn),
        /// The transaction under way is aborted at a bumped epoch first (its producer is a
        /// zombie): store this, write its markers, answer CONCURRENT_TRANSACTIONS (the client
        /// retries, and then gets the next epoch).
        FenceFirst(StoredTxn),
    }

    fn fresh(producer_id: i64, timeout_ms: i32, now: i64) -> StoredTxn {
        StoredTxn {
            producer_id,
            producer_epoch: 0,
            phase: TxnPhase::Empty as i32,
            timeout_ms,
            updated_ms: now,
            ..Default::default()
        }
    }

    /// InitProducerId with a transactional id: `cur` its state (none yet for a new id),
    /// `expected` the producer id and epoch the client has (KIP-360), `new_id` a producer id
    /// to take if one is needed.
    pub fn init(
        cur: Option<&StoredTxn>,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
        new_id: i64,
        now: i64,
    ) -> Result<Init, i16> {
        if timeout_ms <= 0 || timeout_ms > MAX_TIMEOUT_MS {
            return Err(INVALID_TRANSACTION_TIMEOUT);
        }
        let Some(cur) = cur else { return Ok(Init::Ready(fresh(new_id, timeout_ms, now))) };
        if let Some((id, epoch)) = expected
            && (id != cur.producer_id || i32::from(epoch) != cur.producer_epoch)
        {
            return Err(PRODUCER_FENCED);
        }
        match cur.phase() {
            TxnPhase::PrepareCommit | TxnPhase::PrepareAbort | TxnPhase::PrepareEpochFence => {
                Err(CONCURRENT_TRANSACTIONS)
            }
            TxnPhase::Ongoing => {
                let mut next = ending(cur, new_id);
                next.phase = TxnPhase::PrepareAbort as i32;
                next.updated_ms = now;
                Ok(Init::FenceFirst(next))
            }
            TxnPhase::Empty | TxnPhase::CompleteCommit | TxnPhase::CompleteAbort => {
                let mut next = bumped(cur, new_id);
                (next.marker_producer_id, next.marker_epoch) = (None, None);
                next.phase = TxnPhase::Empty as i32;
                next.timeout_ms = timeout_ms;
                next.partitions.clear();
                next.groups.clear();
                next.updated_ms = now;
                Ok(Init::Ready(next))
            }
        }
    }

    /// `cur`'s transaction under way ended by moving its producer on ([`bumped`]): its markers
    /// carry the producer id it ran at and the epoch after.
    fn ending(cur: &StoredTxn, new_id: i64) -> StoredTxn {
        let mut next = bumped(cur, new_id);
        next.marker_producer_id = Some(cur.producer_id);
        next.marker_epoch = Some(cur.producer_epoch + 1);
        next
    }

    /// Whether `cur`'s next epoch needs a new producer id.
    pub fn spent(cur: &StoredTxn) -> bool {
        cur.producer_epoch >= LAST_EPOCH
    }

    /// `cur` at the next epoch, or a new producer id once its epochs are spent.
    fn bumped(cur: &StoredTxn, new_id: i64) -> StoredTxn {
        let mut next = cur.clone();
        if cur.producer_epoch >= LAST_EPOCH {
            next.producer_id = new_id;
            next.producer_epoch = 0;
        } else {
            next.producer_epoch += 1;
        }
        next
    }

    /// The producer's checks every request of a transaction makes.
    fn owned_by(cur: &StoredTxn, producer_id: i64, epoch: i16) -> Result<(), i16> {
        if cur.producer_id != producer_id {
            return Err(INVALID_PRODUCER_ID_MAPPING);
        }
        if cur.producer_epoch != i32::from(epoch) {
            return Err(PRODUCER_FENCED);
        }
        Ok(())
    }

    /// AddPartitionsToTxn (and AddOffsetsToTxn, with the group): the transaction begins, or
    /// takes more.
    pub fn add(
        cur: Option<&StoredTxn>,
        (producer_id, epoch): (i64, i16),
        partitions: &[TxnPartition],
        group: Option<&str>,
        now: i64,
    ) -> Result<Option<StoredTxn>, i16> {
        let cur = cur.ok_or(INVALID_PRODUCER_ID_MAPPING)?;
        owned_by(cur, producer_id, epoch)?;
        let phase = cur.phase();
        if matches!(
            phase,
            TxnPhase::PrepareCommit | TxnPhase::PrepareAbort | TxnPhase::PrepareEpochFence
        ) {
            return Err(CONCURRENT_TRANSACTIONS);
        }
        let has = |p: &TxnPartition| cur.partitions.contains(p);
        let has_group = group.is_none_or(|g| cur.groups.iter().any(|x| x == g));
        if phase == TxnPhase::Ongoing && partitions.iter().all(has) && has_group {
            return Ok(None);
        }
        let mut next = cur.clone();
        if phase != TxnPhase::Ongoing {
            next.partitions.clear();
            next.groups.clear();
            next.started_ms = now;
            (next.marker_producer_id, next.marker_epoch) = (None, None);
        }
        next.phase = TxnPhase::Ongoing as i32;
        for p in partitions {
            if !next.partitions.contains(p) {
                next.partitions.push(p.clone());
            }
        }
        if let Some(g) = group
            && !next.groups.iter().any(|x| x == g)
        {
            next.groups.push(g.to_owned());
        }
        next.updated_ms = now;
        Ok(Some(next))
    }

    /// EndTxn: the transaction under way is to be committed or aborted (its markers follow);
    /// a retry of an end already done is answered as it was.
    pub fn end(
        cur: Option<&StoredTxn>,
        (producer_id, epoch): (i64, i16),
        commit: bool,
        now: i64,
    ) -> Result<Option<StoredTxn>, i16> {
        let cur = cur.ok_or(INVALID_PRODUCER_ID_MAPPING)?;
        owned_by(cur, producer_id, epoch)?;
        match (cur.phase(), commit) {
            (TxnPhase::Ongoing, _) => {
                let mut next = cur.clone();
                next.phase =
                    if commit { TxnPhase::PrepareCommit } else { TxnPhase::PrepareAbort } as i32;
                next.updated_ms = now;
                Ok(Some(next))
            }
            (TxnPhase::CompleteCommit, true) | (TxnPhase::CompleteAbort, false) => Ok(None),
            (TxnPhase::PrepareCommit, true) | (TxnPhase::PrepareAbort, false) => {
                Err(CONCURRENT_TRANSACTIONS)
            }
            _ => Err(INVALID_TXN_STATE),
        }
    }

    /// EndTxn v5 (transactions V2, KIP-890 part 2): the transaction under way is to be
    /// committed or aborted at the next epoch (its markers carry it, fencing any batch of the
    /// epoch it ran at; a new producer id once the epochs are spent); the client goes on at
    /// the producer id and epoch of the state after. Aborting with no transaction under way
    /// bumps the epoch too (a produce the client sent may still add a partition at the old
    /// one). A retry of an end already made, at the epoch before, is answered as it was.
    pub fn end_v2(
        cur: Option<&StoredTxn>,
        (producer_id, epoch): (i64, i16),
        commit: bool,
        new_id: i64,
        now: i64,
    ) -> Result<Option<StoredTxn>, i16> {
        let cur = cur.ok_or(INVALID_PRODUCER_ID_MAPPING)?;
        let phase = cur.phase();
        let prepared = if commit { TxnPhase::PrepareCommit } else { TxnPhase::PrepareAbort };
        let complete = if commit { TxnPhase::CompleteCommit } else { TxnPhase::CompleteAbort };
        let retry = cur.marker_producer_id == Some(producer_id)
            && cur.marker_epoch == Some(i32::from(epoch) + 1);
        if retry && phase == complete {
            return Ok(None);
        }
        if retry && phase == prepared {
            return Err(CONCURRENT_TRANSACTIONS);
        }
        owned_by(cur, producer_id, epoch)?;
        match phase {
            TxnPhase::Ongoing => {
                let mut next = ending(cur, new_id);
                next.phase = prepared as i32;
                next.updated_ms = now;
                Ok(Some(next))
            }
            TxnPhase::Empty | TxnPhase::CompleteCommit | TxnPhase::CompleteAbort if !commit => {
                let mut next = bumped(cur, new_id);
                (next.marker_producer_id, next.marker_epoch) = (None, None);
                next.phase = TxnPhase::CompleteAbort as i32;
                next.partitions.clear();
                next.groups.clear();
                next.updated_ms = now;
                Ok(Some(next))
            }
            TxnPhase::PrepareCommit | TxnPhase::PrepareAbort | TxnPhase::PrepareEpochFence => {
                Err(CONCURRENT_TRANSACTIONS)
            }
            _ => Err(INVALID_TXN_STATE),
        }
    }

    /// Every marker of a transaction being ended is written: it is complete.
    pub fn complete(cur: &StoredTxn, now: i64) -> Option<StoredTxn> {
        let done = match cur.phase() {
            TxnPhase::PrepareCommit => TxnPhase::CompleteCommit,
            TxnPhase::PrepareAbort | TxnPhase::PrepareEpochFence => TxnPhase::CompleteAbort,
            _ => return None,
        };
        let mut next = cur.clone();
        next.phase = done as i32;
        next.partitions.clear();
        next.groups.clear();
        next.updated_ms = now;
        Some(next)
    }

    /// Whether `cur` has had no transaction under way for [`ID_EXPIRATION_MS`]: its id is
    /// forgotten.
    pub fn expired(cur: &StoredTxn, now: i64) -> bool {
        let idle = matches!(
            cur.phase(),
            TxnPhase::Empty | TxnPhase::CompleteCommit | TxnPhase::CompleteAbort
        );
        idle && now.saturating_sub(cur.updated_ms) >= ID_EXPIRATION_MS
    }

    /// A transaction under way past its timeout: aborted at the next epoch, so its producer,
    /// should it come back, is fenced.
    pub fn timed_out(cur: &StoredTxn, new_id: i64, now: i64) -> Option<StoredTxn> {
        let due = cur.started_ms.saturating_add(i64::from(cur.timeout_ms));
        if cur.phase() != TxnPhase::Ongoing || now < due {
            return None;
        }
        let mut next = ending(cur, new_id);
        next.phase = TxnPhase::PrepareAbort as i32;
        next.updated_ms = now;
        Some(next)
    }
}

/// The system clock, in ms since the Unix epoch.
pub fn system_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A transactional id as it appears in keys (as a group's id does), if it can.
pub fn key_of(id: &str) -> Option<String> {
    crate::groups::cursor_name(id).and_then(|c| c.strip_prefix("kafka.").map(str::to_owned))
}

/// Refusal for a transactional id that cannot name a key.
pub fn invalid_id(id: &str) -> Refused {
    Refused::new(code::INVALID_REQUEST, format!("transactional id `{id}` is not valid here"))
}

#[cfg(test)]
mod tests {
    use super::machine::{self, Init};
    use super::*;

    fn part(p: i32) -> TxnPartition {
        TxnPartition { topic: "t".into(), partition: p }
    }

    /// Transactions V2 (KIP-890 part 2): each end moves the producer to the next epoch, which
    /// the markers carry and the next transaction runs at; a retry at the epoch before is
    /// answered as it was; an abort with nothing under way bumps too; once the epochs are
    /// spent the producer goes on at a new id while the markers carry the old one.
    #[test]
    fn a_v2_end_moves_the_producer_to_the_next_epoch_and_its_markers_carry_it() {
        let Ok(Init::Ready(t)) = machine::init(None, 60_000, None, 7, 1) else { panic!() };
        let t = machine::add(Some(&t), (7, 0), &[part(0)], Some("g"), 2).unwrap().unwrap();
        let ending = machine::end_v2(Some(&t), (7, 0), true, -1, 3).unwrap().unwrap();
        assert_eq!(
            (ending.phase(), ending.producer_id, ending.producer_epoch),
            (TxnPhase::PrepareCommit, 7, 1)
        );
        assert_eq!((ending.marker_producer(), ending.txn_producer()), ((7, 1), (7, 0)));
        assert_eq!(ending.partitions, [part(0)], "its markers go to its partitions");
        assert_eq!(
            machine::end_v2(Some(&ending), (7, 0), true, -1, 4),
            Err(CONCURRENT_TRANSACTIONS)
        );
        let done = machine::complete(&ending, 5).unwrap();
        assert_eq!(machine::end_v2(Some(&done), (7, 0), true, -1, 6), Ok(None), "a retry");
        assert_eq!(machine::end_v2(Some(&done), (7, 0), false, -1, 6), Err(PRODUCER_FENCED));
        assert_eq!(machine::add(Some(&done), (7, 0), &[part(1)], None, 6), Err(PRODUCER_FENCED));
        // The next transaction, at the new epoch: the markers of the last one are forgotten.
        let next = machine::add(Some(&done), (7, 1), &[part(1)], None, 7).unwrap().unwrap();
        assert_eq!((next.marker_producer(), next.started_ms), ((7, 1), 7));
        assert_eq!(next.marker_producer_id, None);
        assert_eq!(
            machine::end_v2(Some(&next), (7, 1), true, -1, 8).unwrap().unwrap().producer_epoch,
            2
        );
        // Aborting with nothing under way: the next epoch, complete at once (no marker).
        let idle = machine::end_v2(Some(&done), (7, 1), false, -1, 9).unwrap().unwrap();
        assert_eq!((idle.phase(), idle.producer_epoch), (TxnPhase::CompleteAbort, 2));
        assert_eq!(machine::end_v2(Some(&done), (7, 1), true, -1, 9), Err(INVALID_TXN_STATE));
        // Epochs spent: a new producer id, the markers at the old id's last epoch.
        let mut old = t.clone();
        old.producer_epoch = i32::from(i16::MAX) - 1;
        assert!(machine::spent(&old) && !machine::spent(&t));
        let epoch = i16::MAX - 1;
        let rotated = machine::end_v2(Some(&old), (7, epoch), false, 99, 10).unwrap().unwrap();
        assert_eq!((rotated.producer_id, rotated.producer_epoch), (99, 0));
        assert_eq!(rotated.marker_producer(), (7, i32::from(i16::MAX)));
        assert_eq!(rotated.txn_producer(), (7, i32::from(epoch)));
        // A zombie fenced by InitProducerId at its last epoch: the same.
        let Ok(Init::FenceFirst(f)) = machine::init(Some(&old), 60_000, None, 98, 11) else {
            panic!()
        };
        assert_eq!((f.producer_id, f.marker_producer()), (98, (7, i32::from(i16::MAX))));
        // A V1 end leaves the markers at the producer's own epoch.
        let v1 = machine::end(Some(&t), (7, 0), true, 12).unwrap().unwrap();
        assert_eq!((v1.marker_producer(), v1.txn_producer()), ((7, 0), (7, 0)));
    }

    #[test]
    fn a_transaction_begins_grows_ends_and_completes_as_in_kafka() {
        let Ok(Init::Ready(t)) = machine::init(None, 60_000, None, 7, 1) else { panic!() };
        assert_eq!((t.producer_id, t.producer_epoch, t.phase()), (7, 0, TxnPhase::Empty));
        // Re-initialized: the next epoch.
        let Ok(Init::Ready(t)) = machine::init(Some(&t), 60_000, None, 8, 2) else { panic!() };
        assert_eq!((t.producer_id, t.producer_epoch), (7, 1));
        assert_eq!(machine::end(Some(&t), (7, 1), true, 3), Err(INVALID_TXN_STATE), "empty");
        let t = machine::add(Some(&t), (7, 1), &[part(0)], None, 4).unwrap().unwrap();
        assert_eq!((t.phase(), t.started_ms), (TxnPhase::Ongoing, 4));
        assert_eq!(machine::add(Some(&t), (7, 1), &[part(0)], None, 5), Ok(None), "has it");
        let t = machine::add(Some(&t), (7, 1), &[part(1)], Some("g"), 6).unwrap().unwrap();
        assert_eq!((t.partitions.len(), t.groups.len(), t.started_ms), (2, 1, 4));
        assert_eq!(machine::add(Some(&t), (7, 0), &[part(2)], None, 7), Err(PRODUCER_FENCED));
        assert_eq!(
            machine::add(Some(&t), (9, 1), &[part(2)], None, 7),
            Err(INVALID_PRODUCER_ID_MAPPING)
        );
        let ending = machine::end(Some(&t), (7, 1), true, 8).unwrap().unwrap();
        assert_eq!(ending.phase(), TxnPhase::PrepareCommit);
        assert_eq!(machine::end(Some(&ending), (7, 1), true, 9), Err(CONCURRENT_TRANSACTIONS));
        assert_eq!(machine::end(Some(&ending), (7, 1), false, 9), Err(INVALID_TXN_STATE));
        assert_eq!(
            machine::add(Some(&ending), (7, 1), &[part(0)], None, 9),
            Err(CONCURRENT_TRANSACTIONS)
        );
        assert_eq!(machine::init(Some(&ending), 60_000, None, 8, 9), Err(CONCURRENT_TRANSACTIONS));
        let done = machine::complete(&ending, 10).unwrap();
        assert_eq!((done.phase(), done.partitions.len()), (TxnPhase::CompleteCommit, 0));
        assert_eq!(machine::end(Some(&done), (7, 1), true, 11), Ok(None), "a retry");
        // The next transaction starts afresh.
        let next = machine::add(Some(&done), (7, 1), &[part(3)], None, 12).unwrap().unwrap();
        assert_eq!((next.partitions, next.started_ms), (vec![part(3)], 12));
    }

    #[test]
    fn a_zombies_transaction_is_aborted_at_a_bumped_epoch_and_timeouts_too() {
        let Ok(Init::Ready(t)) = machine::init(None, 1_000, None, 7, 0) else { panic!() };
        let t = machine::add(Some(&t), (7, 0), &[part(0)], None, 100).unwrap().unwrap();
        // A new instance of the producer: the ongoing one is aborted at epoch 1 first.
        let Ok(Init::FenceFirst(f)) = machine::init(Some(&t), 1_000, None, 8, 200) else {
            panic!()
        };
        assert_eq!((f.producer_epoch, f.phase()), (1, TxnPhase::PrepareAbort));
        assert_eq!(machine::add(Some(&f), (7, 0), &[part(1)], None, 201), Err(PRODUCER_FENCED));
        let aborted = machine::complete(&f, 300).unwrap();
        let Ok(Init::Ready(r)) = machine::init(Some(&aborted), 1_000, None, 8, 301) else {
            panic!()
        };
        assert_eq!((r.producer_id, r.producer_epoch, r.phase()), (7, 2, TxnPhase::Empty));
        // KIP-360: a client naming another producer or epoch is fenced.
        assert_eq!(machine::init(Some(&r), 1_000, Some((7, 1)), 8, 302), Err(PRODUCER_FENCED));
        assert!(machine::init(Some(&r), 1_000, Some((7, 2)), 8, 302).is_ok());
        // Timeouts and bounds.
        let t = machine::add(Some(&r), (7, 2), &[part(0)], None, 400).unwrap().unwrap();
        assert_eq!(machine::timed_out(&t, 8, 1_399), None);
        let expired = machine::timed_out(&t, 8, 1_401).unwrap();
        assert_eq!((expired.producer_epoch, expired.phase()), (3, TxnPhase::PrepareAbort));
        for bad in [0, -1, MAX_TIMEOUT_MS + 1] {
            assert_eq!(machine::init(None, bad, None, 7, 0), Err(INVALID_TRANSACTION_TIMEOUT));
        }
        // Epochs spent: a new producer id.
        let spent = StoredTxn { producer_epoch: i32::from(i16::MAX) - 1, ..r };
        let Ok(Init::Ready(n)) = machine::init(Some(&spent), 1_000, None, 8, 500) else { panic!() };
        assert_eq!((n.producer_id, n.producer_epoch), (8, 0));
    }

    #[test]
    fn a_batch_is_verified_against_its_producers_ongoing_transaction() {
        let txn = StoredTxn {
            producer_id: 7,
            producer_epoch: 2,
            phase: TxnPhase::Ongoing as i32,
            partitions: vec![TxnPartition { topic: "t".into(), partition: 1 }],
            ..Default::default()
        };
        assert!(txn.verify(7, 2, "t", 1).is_ok());
        let code = |r: Result<(), Refused>| r.err().map(|e| e.code);
        assert_eq!(code(txn.verify(7, 2, "t", 0)), Some(INVALID_TXN_STATE), "not added");
        assert_eq!(code(txn.verify(7, 1, "t", 1)), Some(PRODUCER_FENCED));
        assert_eq!(code(txn.verify(8, 2, "t", 1)), Some(INVALID_PRODUCER_ID_MAPPING));
        let ending = StoredTxn { phase: TxnPhase::PrepareCommit as i32, ..txn };
        assert_eq!(code(ending.verify(7, 2, "t", 1)), Some(INVALID_TXN_STATE), "ending");
    }
}
