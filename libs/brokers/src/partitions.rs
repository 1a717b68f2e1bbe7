//! A partition's records: produce (admitted in order behind idempotence's checks), fetch
//! (from the writer's tail or object storage; a preferred reader for far-behind consumers), the
//! long poll, offsets by timestamp, DeleteRecords, producer ids.

use parking_lot::Mutex;
use std::collections::BTreeMap;

use crate::producers::Check;
use futures::FutureExt;
use kafka::{Fetched, Refused, code};
use logstore::LogId;

use crate::{
    LogBroker, MAX_FETCH_RECORDS, PRODUCER_ID_BLOCK, SlotProducers, commit, conditions, refused,
    to_i64,
};

#[async_trait::async_trait]
impl kafka::Partitions for LogBroker {
    async fn produce(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
        batch: bytes::Bytes,
        header: &recordbatch::BatchHeader,
        txn: Option<kafka::TxnProduce<'_>>,
    ) -> Result<kafka::Commit, Refused> {
        if kafka::internal::is_internal(topic) {
            return Err(kafka::internal::refused(topic));
        }
        let (log, slot, config) = self.led_with_config(topic, partition, zone).await?;
        if let Some(max) = config.max_message_bytes()
            && batch.len() as u64 > max
        {
            return Err(Refused::new(
                code::MESSAGE_TOO_LARGE,
                format!(
                    "a batch of {} bytes; topic {topic} takes at most {max} (max.message.bytes)",
                    batch.len()
                ),
            ));
        }
        // A compacted log keeps each key's latest record: a record without a key has no
        // place in it (Kafka's answer and words).
        if config.cleanup().compact {
            let cap = recordbatch::compression::MAX_DECOMPRESSED;
            match recordbatch::first_unkeyed(&batch, cap) {
                Ok(None) => {}
                Ok(Some(_)) => {
                    return Err(Refused::new(
                        code::INVALID_RECORD,
                        format!(
                            "Compacted topic cannot accept message without key in topic partition {topic}-{partition}"
                        ),
                    ));
                }
                Err(e) => return Err(Refused::new(code::CORRUPT_MESSAGE, e.to_string())),
            }
        }
        let now = self.store()?.now_ms();
        let (batch, stamped, append_time) = crate::stamp(batch, header, &config, now)?;
        let header = &stamped;
        // validate() checked the count is last_offset_delta + 1 and at least 1.
        let record_count = u32::try_from(header.record_count)
            .map_err(|_| Refused::new(code::CORRUPT_MESSAGE, "record count"))?;
        let p = header.producer;
        if p.producer_id < 0 {
            let committing = self
                .store()?
                .submit_in_slot(
                    log,
                    &slot,
                    record_count,
                    batch,
                    conditions(header, now, None, &config)?,
                )
                .await
                .map_err(refused)?;
            return Ok(commit(committing, append_time));
        }
        // A transactional batch: checked and admitted in the slot's transactional order.
        let txn = match (header.is_transactional(), txn) {
            (false, _) => None,
            (true, Some(t)) => Some((t, self.txn_order(log, &slot))),
            (true, None) => {
                return Err(Refused::new(
                    kafka::transactions::INVALID_TXN_STATE,
                    "a transactional batch without a transactional id",
                ));
            }
        };
        let _ordered = match &txn {
            Some((_, order)) => Some(order.clone().lock_owned().await),
            None => None,
        };
        let epoch = self.ready(log, &slot).await?;
        let key = (log, slot);
        let (first, last) = (p.base_sequence, header.last_sequence());
        let check = |producers: &Mutex<BTreeMap<(LogId, String), SlotProducers>>| match producers
            .lock()
            .get_mut(&key)
        {
            Some(SlotProducers::Ready(t)) if t.epoch == epoch => {
                Ok(t.producers.check(p.producer_id, p.producer_epoch, first, last))
            }
            _ => Err(Refused::new(code::NOT_LEADER_OR_FOLLOWER, "partition changed owner")),
        };
        // A producer's first batch in this tenure: it may come from another owner slot (its
        // zone's writers went or came) with batches in the log this state never saw, one of
        // them perhaps this very batch, sent there with its answer lost.
        let first_here = match self.producers.lock().get(&key) {
            Some(SlotProducers::Ready(t)) => !t.producers.admitted_here(p.producer_id),
            _ => false,
        };
        // Only if another slot ever took idempotent batches (each saves a checkpoint before
        // its first): in a log served by this slot alone, every batch of any producer since
        // the tenure began was admitted here, and those before it were replayed.
        if first_here && self.other_slots_take_producers(log, &key.1).await {
            self.catch_up(log, &key.1, epoch, None).await?;
        }
        let check = match check(&self.producers)? {
            // A gap: it may have been elsewhere since; look in the log before calling it real.
            Check::Refuse(r) if r.code == code::OUT_OF_ORDER_SEQUENCE_NUMBER => {
                self.catch_up(log, &key.1, epoch, Some(p.producer_id)).await?;
                check(&self.producers)?
            }
            c => c,
        };
        match check {
            Check::Append => {}
            Check::Duplicate(original) => return Ok(Box::pin(original)),
            Check::Refuse(r) => return Err(self.confirm_refusal(log, &key.1, epoch, r).await),
        }
        let mut conditions = conditions(header, now, Some(epoch), &config)?;
        if let Some((t, _)) = txn {
            let at = (log, key.1.as_str(), epoch);
            self.verify_txn(t, (topic, partition), at, (p.producer_id, p.producer_epoch)).await?;
            conditions.txn = Some(logstore::TxnMark::Data { producer_id: p.producer_id });
        }
        // Commits only in this tenure: the state checked belongs to it.
        let committing = self
            .store()?
            .submit_in_slot(log, &key.1, record_count, batch, conditions)
            .await
            .map_err(refused)?;
        let shared = crate::producers::shared(commit(committing, append_time));
        // Resolved whether or not anyone awaits it (a client may hang up), so the state and
        // its checkpoints see the outcome.
        tokio::spawn(shared.clone().map(drop));
        if let Some(SlotProducers::Ready(t)) = self.producers.lock().get_mut(&key)
            && t.epoch == epoch
        {
            t.producers.admitted(p.producer_id, p.producer_epoch, first, last, shared.clone());
            t.dirty += 1;
        }
        Ok(Box::pin(shared))
    }

    async fn producers(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Vec<kafka::ActiveProducer>, Refused> {
        let (log, slot, _) = self.led_with_config(topic, partition, None).await?;
        self.ready(log, &slot).await?;
        let known = match self.producers.lock().get(&(log, slot)) {
            Some(crate::idempotence::SlotProducers::Ready(t)) => t.producers.active(),
            _ => Vec::new(),
        };
        // The transactions open in the log, as its head has them (one read: an admin's ask).
        let open = self.store()?.head(log).await.map_err(crate::refused)?.open_txns;
        Ok(known
            .into_iter()
            .map(|(producer_id, epoch, last_sequence)| kafka::ActiveProducer {
                producer_id,
                epoch,
                last_sequence,
                txn_start_offset: open
                    .iter()
                    .find(|t| t.producer_id == producer_id)
                    .and_then(|t| i64::try_from(t.first_offset).ok())
                    .unwrap_or(-1),
            })
            .collect())
    }

    async fn write_marker(
        &self,
        topic: &str,
        partition: i32,
        marker: kafka::transactions::Marker,
    ) -> Result<kafka::Commit, Refused> {
        if kafka::internal::is_internal(topic) {
            return Err(kafka::internal::refused(topic));
        }
        self.append_marker(topic, partition, marker).await
    }

    async fn fetch(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
        rack: Option<&str>,
        offset: i64,
        max_bytes: usize,
        isolation: kafka::Isolation,
    ) -> Result<Fetched, Refused> {
        if let Some(empty) = internal_partition(topic, partition, offset)? {
            return Ok(empty);
        }
        let log = self.readable(topic, partition, zone).await?;
        // The followed head: a caught-up consumer's poll costs the metadata store nothing.
        let info = self.reader.tail_info(log).await.map_err(refused)?;
        let (hw, start) = (to_i64(info.next_offset)?, to_i64(info.first_offset)?);
        let lso = to_i64(info.last_stable_offset)?;
        if offset < start || offset > hw {
            return Err(Refused::new(
                code::OFFSET_OUT_OF_RANGE,
                format!("offset {offset} is outside [{start}, {hw}]"),
            ));
        }
        let committed = isolation == kafka::Isolation::ReadCommitted;
        // What this read may see: read committed stops at the last stable offset.
        let end = if committed { lso } else { hw };
        let mut fetched = Fetched {
            high_watermark: hw,
            last_stable_offset: lso,
            log_start_offset: start,
            ..Default::default()
        };
        // Nothing to send, or no room to send it in (a fetch's budget is spent): the offsets.
        if offset >= end || max_bytes == 0 {
            return Ok(fetched);
        }
        if let Some(rack) = rack {
            let behind = (hw - offset) as u64;
            if let Some(node) = self.preferred_reader(log, partition, rack, behind).await {
                fetched.preferred_read_replica = Some(node);
                return Ok(fetched);
            }
        }
        let entries = self
            .reader
            .read_tail(log, offset as u64, MAX_FETCH_RECORDS, max_bytes as u64)
            .await
            .map_err(refused)?;
        let mut batches = Vec::with_capacity(entries.len());
        for e in entries {
            // Nothing at or past the high watermark this answer names (entries committed
            // since it was read), as Kafka answers: a client's lag is never negative; nor,
            // read committed, past the last stable offset.
            if to_i64(e.header.offset)? >= end {
                break;
            }
            // Entries that are not Kafka batches (written in Lakelog's first record format)
            // are left out: a Kafka client could not read them.
            if recordbatch::BatchHeader::parse(&e.payload).is_err() {
                continue;
            }
            // Sent as read, by reference; its base offset is written as it goes out.
            batches.push(kafka::StoredBatch {
                base_offset: to_i64(e.header.offset)?,
                bytes: e.payload,
            });
        }
        let bytes: usize = batches.iter().map(kafka::StoredBatch::len).sum();
        if committed && let Some(last) = batches.last() {
            let to = last.base_offset.saturating_add(1) as u64;
            let aborted =
                self.reader.aborted_txns(log, offset as u64, to).await.map_err(refused)?;
            fetched.aborted = aborted
                .iter()
                .map(|a| Ok((a.producer_id, to_i64(a.first_offset)?)))
                .collect::<Result<_, Refused>>()?;
        }
        fetched.records = batches;
        self.fetched.fetch_add(bytes as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(fetched)
    }

    async fn wait_for(&self, targets: Vec<(String, i32, i64)>, max_wait: std::time::Duration) {
        let reader = &self.reader;
        let mut waits = Vec::with_capacity(targets.len());
        for (topic, partition, offset) in targets {
            let (Ok(p), Ok(offset)) = (u32::try_from(partition), u64::try_from(offset)) else {
                continue;
            };
            let Ok(log) = self.catalog.route(&topic, p).await else { continue };
            waits.push(Box::pin(async move {
                let _ = reader.wait_beyond(log, offset, max_wait).await;
            }));
        }
        if waits.is_empty() {
            tokio::time::sleep(max_wait).await;
            return;
        }
        // The first partition with more, or the wait's end (each wait ends by then too).
        let _ = tokio::time::timeout(max_wait, futures::future::select_all(waits)).await;
    }

    async fn list_offset(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
        timestamp: i64,
        isolation: kafka::Isolation,
    ) -> Result<(i64, i64), Refused> {
        if internal_partition(topic, partition, 0)?.is_some() {
            return Ok(if timestamp < 0 && timestamp != -3 { (0, -1) } else { (-1, -1) });
        }
        let log = self.readable(topic, partition, zone).await?;
        let info = self.reader.tail_info(log).await.map_err(refused)?;
        let reader = &self.reader;
        match timestamp {
            // -4, earliest local (KIP-405): all of the log is as near as any of it.
            -2 | -4 => Ok((to_i64(info.first_offset)?, -1)),
            -1 if isolation == kafka::Isolation::ReadCommitted => {
                Ok((to_i64(info.last_stable_offset)?, -1))
            }
            -1 => Ok((to_i64(info.next_offset)?, -1)),
            // The record with the largest timestamp (KIP-734); none in an empty log.
            -3 if info.first_offset == info.next_offset => Ok((-1, -1)),
            -3 => {
                let found = logstore::retention::find_by_timestamp(reader, log, info.max_timestamp)
                    .await
                    .map_err(refused)?;
                match found {
                    Some(h) => self.record_with_timestamp(log, &h, info.max_timestamp, true).await,
                    None => Ok((-1, -1)),
                }
            }
            t if t < 0 => Err(Refused::new(
                code::INVALID_REQUEST,
                format!("timestamp {t}: -1, -2, -3, -4 or a time are served"),
            )),
            t => {
                // The running-max index finds the first entry that may hold a record at or
                // after `t`; its records' own timestamps say which one.
                let found = logstore::retention::find_by_timestamp(reader, log, t)
                    .await
                    .map_err(refused)?;
                match found {
                    Some(h) => self.record_with_timestamp(log, &h, t, false).await,
                    // No record is that recent: Kafka answers no offset.
                    None => Ok((-1, -1)),
                }
            }
        }
    }

    async fn delete_records(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
        offset: i64,
    ) -> Result<i64, Refused> {
        if kafka::internal::is_internal(topic) {
            return Err(kafka::internal::refused(topic));
        }
        let (log, _) = self.led(topic, partition, zone).await?;
        let to = match offset {
            -1 => self.reader.info(log).await.map_err(refused)?.next_offset,
            o => u64::try_from(o)
                .map_err(|_| Refused::new(code::OFFSET_OUT_OF_RANGE, format!("offset {o}")))?,
        };
        // A soft trim: the records below become unreadable at once; retention's hard trim and
        // the cleaner reclaim their storage later.
        let start = logstore::retention::soft_trim(&self.reader, log, to).await.map_err(refused)?;
        to_i64(start)
    }

    async fn init_producer_id(&self, current: Option<(i64, i16)>) -> Result<(i64, i16), Refused> {
        // KIP-360: the same producer at its next epoch, while epochs last.
        if let Some((id, epoch)) = current
            && (0..i16::MAX - 1).contains(&epoch)
        {
            return Ok((id, epoch + 1));
        }
        let mut ids = self.producer_ids.lock().await;
        if ids.is_empty() {
            *ids = logstore::membership::producer_ids(
                self.reader.meta().as_ref(),
                &self.cluster,
                PRODUCER_ID_BLOCK,
            )
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "Kafka: no producer ids");
                Refused::new(code::COORDINATOR_NOT_AVAILABLE, format!("no producer ids: {e}"))
            })?;
        }
        let id = ids.start;
        ids.start += 1;
        Ok((id, 0))
    }
}

/// A partition of `__consumer_offsets` read from `offset`: empty, and always will be
/// ([`kafka::internal`]); `None` for any other topic.
fn internal_partition(
    topic: &str,
    partition: i32,
    offset: i64,
) -> Result<Option<Fetched>, Refused> {
    if topic != kafka::internal::OFFSETS_TOPIC {
        return Ok(None);
    }
    if !(0..kafka::internal::OFFSETS_PARTITIONS as i32).contains(&partition) {
        return Err(Refused::new(
            code::UNKNOWN_TOPIC_OR_PARTITION,
            format!("topic {topic} has no partition {partition}"),
        ));
    }
    if offset != 0 {
        return Err(Refused::new(
            code::OFFSET_OUT_OF_RANGE,
            format!("offset {offset} is outside [0, 0]"),
        ));
    }
    Ok(Some(Fetched::default()))
}
