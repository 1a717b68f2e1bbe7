//! A partition owner's part in Kafka transactions (ARCHITECTURE §12): a transactional batch is
//! taken only while its partition is in its producer's ongoing transaction, as the
//! transactional id's coordinator stored it (KIP-890's verification, one read per producer and
//! tenure), and its commit opens the transaction in the log's head; a marker ends it there.
//! Per slot, transactional batches and markers are checked and admitted one at a time: a
//! batch verified before a marker is admitted before it, and a batch that comes after the
//! marker is verified again (and refused once the transaction is ending or over).

use std::sync::Arc;

use kafka::transactions::{Marker, StoredTxn};
use kafka::{Refused, code};
use logstore::{LogId, TxnMark};

use crate::idempotence::SlotProducers;
use crate::{LogBroker, commit, refused};

impl LogBroker {
    /// The lock that orders (log, slot)'s transactional batches and markers.
    pub(crate) fn txn_order(&self, log: LogId, slot: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut order = self.txn_order.lock();
        order.entry((log, slot.to_owned())).or_default().clone()
    }

    /// Whether producer (`producer_id`, `epoch`)'s batch to `topic`'s `partition` (log, slot
    /// served at `tenure`) belongs to `transactional_id`'s ongoing transaction: known in this
    /// tenure, or read from the coordinator's stored state (then known).
    pub(crate) async fn verify_txn(
        &self,
        transactional_id: &str,
        (topic, partition): (&str, i32),
        (log, slot, tenure): (LogId, &str, i64),
        (producer_id, epoch): (i64, i16),
    ) -> Result<(), Refused> {
        let key = (log, slot.to_owned());
        type Map = std::collections::BTreeMap<(LogId, String), SlotProducers>;
        let known = |producers: &Map| match producers.get(&key) {
            Some(SlotProducers::Ready(t)) if t.epoch == tenure => {
                Ok(t.verified.get(&producer_id) == Some(&epoch))
            }
            _ => Err(Refused::new(code::NOT_LEADER_OR_FOLLOWER, "partition changed owner")),
        };
        if known(&self.producers.lock())? {
            return Ok(());
        }
        let id = kafka::transactions::key_of(transactional_id)
            .ok_or_else(|| kafka::transactions::invalid_id(transactional_id))?;
        let stored = self
            .reader
            .meta()
            .get(&self.reader.keys().txn_state(&id))
            .await
            .map_err(|e| Refused::new(code::NOT_LEADER_OR_FOLLOWER, e.to_string()))?;
        let txn: StoredTxn = match stored {
            Some(kv) => StoredTxn::decode_from(&kv.value)?,
            None => {
                return Err(Refused::new(
                    kafka::transactions::INVALID_TXN_STATE,
                    format!("transactional id {transactional_id} has no transaction"),
                ));
            }
        };
        txn.verify(producer_id, epoch, topic, partition)?;
        if let Some(SlotProducers::Ready(t)) = self.producers.lock().get_mut(&key)
            && t.epoch == tenure
        {
            if t.verified.len() >= logstore::MAX_OPEN_TXNS {
                t.verified.clear();
            }
            t.verified.insert(producer_id, epoch);
        }
        Ok(())
    }

    /// Appends `marker` to (`topic`, `partition`), led here: under the slot's transactional
    /// order, its producer forgotten as verified in every slot of the log this writer serves,
    /// then the control batch, whose commit ends the transaction in the log's head.
    pub(crate) async fn append_marker(
        &self,
        topic: &str,
        partition: i32,
        marker: Marker,
    ) -> Result<kafka::Commit, Refused> {
        let (log, slot, _) = self.led_with_config(topic, partition, None).await?;
        let order = self.txn_order(log, &slot);
        let _ordered = order.lock().await;
        let tenure = self.ready(log, &slot).await?;
        {
            let mut producers = self.producers.lock();
            for ((l, _), s) in producers.iter_mut() {
                if let (true, SlotProducers::Ready(t)) = (*l == log, s) {
                    t.verified.remove(&marker.producer_id);
                }
            }
            if let Some(SlotProducers::Ready(t)) = producers.get_mut(&(log, slot.clone())) {
                if let Some(current) = t.producers.epoch_of(marker.producer_id)
                    && marker.producer_epoch < current
                {
                    return Err(Refused::new(
                        kafka::transactions::PRODUCER_FENCED,
                        format!(
                            "marker at epoch {} for producer {} at epoch {current}",
                            marker.producer_epoch, marker.producer_id
                        ),
                    ));
                }
                // A zombie's batches, at the epoch the coordinator fenced, are refused now.
                t.producers.marked(marker.producer_id, marker.producer_epoch);
            }
        }
        let store = self.store()?;
        let now = store.now_ms();
        let batch = recordbatch::encode_marker(
            marker.producer_id,
            marker.producer_epoch,
            marker.commit,
            marker.coordinator_epoch,
            now,
        )
        .map_err(|e| Refused::server(e.to_string()))?;
        let conditions = logstore::Conditions {
            tenure: Some(tenure),
            timestamp: Some(now),
            txn: Some(TxnMark::End { producer_id: marker.producer_id, abort: !marker.commit }),
            ..Default::default()
        };
        let committing =
            store.submit_in_slot(log, &slot, 1, batch, conditions).await.map_err(refused)?;
        Ok(commit(committing, -1))
    }
}
