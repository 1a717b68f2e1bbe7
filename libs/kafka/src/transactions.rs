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
        let added = self.partitions.iter().any(|p| p.topic == topic && p.partition == partition);
        if self.phase() != TxnPhase::Ongoing || i32::from(epoch) != self.producer_epoch || !added {
            return Err(Refused::new(
                INVALID_TXN_STATE,
                format!(
                    "{topic}-{partition} is not in an ongoing transaction of producer {producer_id} at epoch {epoch}"
                ),
            ));
        }
        Ok(())
    }
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
    use super::*;

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
