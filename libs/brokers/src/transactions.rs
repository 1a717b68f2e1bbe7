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
    /// served at `tenure`) belongs to its transactional id's ongoing transaction: known in this
    /// tenure, or read from the coordinator's stored state (then known). With
    /// `add_partition` (transactions V2) a partition not in it yet joins it first, beginning it
    /// if none is under way, as the coordinator would.
    pub(crate) async fn verify_txn(
        &self,
        kafka::TxnProduce { transactional_id, add_partition }: kafka::TxnProduce<'_>,
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
        match txn.verify(producer_id, epoch, topic, partition) {
            Err(r) if add_partition && r.code == kafka::transactions::INVALID_TXN_STATE => {
                if logstore::mutations::on(logstore::mutations::Mutation::SkipImplicitAdd)
                    && txn.phase() == kafka::transactions::TxnPhase::Ongoing
                {
                    return Ok(());
                }
                let p = kafka::transactions::TxnPartition { topic: topic.to_owned(), partition };
                let joined = self.add_partition(transactional_id, (producer_id, epoch), p).await?;
                joined.verify(producer_id, epoch, topic, partition)?;
            }
            r => r?,
        }
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

    /// Transactions V2: partition `p` joins its producer's transaction. While the previous
    /// transaction is still ending (CONCURRENT_TRANSACTIONS) it is tried again here for a
    /// little (Kafka's brokers' `add.partitions.to.txn.retry.backoff.ms`, 20, and `…max.ms`,
    /// 100) before the client is told to retry: its own backoff is longer.
    async fn add_partition(
        &self,
        id: &str,
        producer: (i64, i16),
        p: kafka::transactions::TxnPartition,
    ) -> Result<StoredTxn, Refused> {
        const BACKOFF: std::time::Duration = std::time::Duration::from_millis(20);
        const WITHIN: std::time::Duration = std::time::Duration::from_millis(100);
        let began = tokio::time::Instant::now();
        loop {
            match kafka::add_to_transaction(self, id, producer, p.clone()).await {
                Err(kafka::transactions::CONCURRENT_TRANSACTIONS)
                    if began.elapsed() + BACKOFF <= WITHIN =>
                {
                    tokio::time::sleep(BACKOFF).await;
                }
                r => {
                    return r.map_err(|code| {
                        Refused::new(code, format!("{}-{} not added to {id}", p.topic, p.partition))
                    });
                }
            }
        }
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
        self.append_marker_asked(topic, partition, marker, None)
            .await?
            .ok_or_else(|| Refused::server("no marker asked"))
    }

    /// [`LogBroker::append_marker`]; with `asked` (the key and revision a coordinator asked
    /// for it by, and the transactional id), only while that ask stands and the transaction
    /// is being ended that way, checked once this writer holds the slot's order and tenure:
    /// an ask answered and removed meanwhile, or a stale one (its transaction over, the
    /// producer's next under way, or ended the other way), is not written (`None`). A marker
    /// written while the producer's transaction is prepared to end so is that transaction's,
    /// whichever ask brought it: its batches were all taken before it was prepared.
    pub(crate) async fn append_marker_asked(
        &self,
        topic: &str,
        partition: i32,
        marker: Marker,
        asked: Option<(&[u8], i64, &str)>,
    ) -> Result<Option<kafka::Commit>, Refused> {
        let (log, slot, _) = self.led_with_config(topic, partition, None).await?;
        let order = self.txn_order(log, &slot);
        let _ordered = order.lock().await;
        let tenure = self.ready(log, &slot).await?;
        if let Some((key, revision, id)) = asked
            && !self.ask_stands(key, revision, id, marker).await?
        {
            return Ok(None);
        }
        self.forget_verified(log, marker.producer_id);
        {
            let mut producers = self.producers.lock();
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
        Ok(Some(commit(committing, -1)))
    }
}

/// Operations one metadata transaction carries at most here (etcd takes 128).
const OPS_PER_TXN: usize = 100;
/// Markers written at once by one writer.
const MARKERS_AT_ONCE: usize = 64;

fn unavailable(e: impl std::fmt::Display) -> Refused {
    Refused::new(kafka::groups::errors::COORDINATOR_NOT_AVAILABLE, e.to_string())
}

#[async_trait::async_trait]
impl kafka::TxnStates for LogBroker {
    async fn txn_state(&self, id: &str) -> Result<Option<(StoredTxn, i64)>, Refused> {
        let enc =
            kafka::transactions::key_of(id).ok_or_else(|| kafka::transactions::invalid_id(id))?;
        let kv = self
            .reader
            .meta()
            .get(&self.reader.keys().txn_state(&enc))
            .await
            .map_err(unavailable)?;
        match kv {
            Some(kv) => Ok(Some((StoredTxn::decode_from(&kv.value)?, kv.mod_revision))),
            None => Ok(None),
        }
    }

    async fn put_txn_state(
        &self,
        id: &str,
        state: &StoredTxn,
        revision: i64,
    ) -> Result<bool, Refused> {
        use metadata::{Compare, CompareOp, Txn, TxnOp};
        let enc =
            kafka::transactions::key_of(id).ok_or_else(|| kafka::transactions::invalid_id(id))?;
        let key = self.reader.keys().txn_state(&enc);
        let unchanged = if revision == 0 {
            Compare::version(key.clone(), CompareOp::Equal, 0)
        } else {
            Compare::mod_revision(key.clone(), CompareOp::Equal, revision)
        };
        let txn = Txn::new().when([unchanged]).and_then([TxnOp::put(key, state.encode())]);
        Ok(self.reader.meta().txn(txn).await.map_err(unavailable)?.succeeded)
    }

    async fn remove_txn_state(&self, id: &str, revision: i64) -> Result<bool, Refused> {
        use metadata::{Compare, CompareOp, KeyRange, Txn, TxnOp};
        let enc =
            kafka::transactions::key_of(id).ok_or_else(|| kafka::transactions::invalid_id(id))?;
        let key = self.reader.keys().txn_state(&enc);
        let txn = Txn::new()
            .when([Compare::mod_revision(key.clone(), CompareOp::Equal, revision)])
            .and_then([TxnOp::delete(KeyRange::key(key))]);
        Ok(self.reader.meta().txn(txn).await.map_err(unavailable)?.succeeded)
    }

    async fn txn_states(&self) -> Result<Vec<(String, StoredTxn)>, Refused> {
        // A reader coordinates nothing.
        if self.storage.is_none() {
            return Ok(Vec::new());
        }
        let prefix = self.reader.keys().txn_states();
        let resp = self
            .reader
            .meta()
            .range(metadata::RangeRequest::prefix(prefix.clone()))
            .await
            .map_err(unavailable)?;
        Ok(resp
            .kvs
            .iter()
            .filter_map(|kv| {
                let enc = std::str::from_utf8(kv.key.get(prefix.len()..)?).ok()?;
                let id = kafka::groups::group_of_cursor(&format!("kafka.{enc}"))?;
                Some((id, StoredTxn::decode_from(&kv.value).ok()?))
            })
            .collect())
    }

    async fn send_markers(&self, id: &str, marker: Marker, t: &StoredTxn) -> Result<bool, Refused> {
        use metadata::{Compare, CompareOp, Txn, TxnOp};
        let enc =
            kafka::transactions::key_of(id).ok_or_else(|| kafka::transactions::invalid_id(id))?;
        let stored = kafka::transactions::StoredMarker {
            transactional_id: id.to_owned(),
            producer_epoch: i32::from(marker.producer_epoch),
            commit: marker.commit,
            coordinator_epoch: marker.coordinator_epoch,
        }
        .encode();
        let keys = self.reader.keys();
        let unmoved = Compare::value(keys.txn_state(&enc), CompareOp::Equal, t.encode());
        for chunk in t.partitions.chunks(OPS_PER_TXN) {
            let puts = chunk.iter().map(|p| {
                TxnOp::put(
                    keys.txn_marker(&p.topic, p.partition, marker.producer_id),
                    stored.clone(),
                )
            });
            let txn = Txn::new().when([unmoved.clone()]).and_then(puts);
            if !self.reader.meta().txn(txn).await.map_err(unavailable)?.succeeded {
                return Ok(false);
            }
        }
        Ok(true)
    }

    async fn markers_pending(
        &self,
        producer_id: i64,
        partitions: &[kafka::transactions::TxnPartition],
    ) -> Result<usize, Refused> {
        use metadata::{OpResult, RangeRequest, Txn, TxnOp};
        let keys = self.reader.keys();
        let mut pending = 0;
        for chunk in partitions.chunks(OPS_PER_TXN) {
            let gets = chunk.iter().map(|p| {
                TxnOp::get(
                    RangeRequest::key(keys.txn_marker(&p.topic, p.partition, producer_id))
                        .keys_only(),
                )
            });
            let resp =
                self.reader.meta().txn(Txn::new().and_then(gets)).await.map_err(unavailable)?;
            pending += resp
                .results
                .iter()
                .filter(|r| matches!(r, OpResult::Get(g) if !g.kvs.is_empty()))
                .count();
        }
        Ok(pending)
    }

    async fn stage_offsets(
        &self,
        group: &str,
        tenure: kafka::Tenure,
        txn: (&str, i64),
        producer: (i64, i16),
        offsets: Vec<kafka::OffsetCommit>,
    ) -> kafka::Staged {
        use metadata::{Compare, CompareOp, OpResult, RangeRequest, Txn, TxnOp};
        let all =
            |r: Refused| kafka::Staged::Done(offsets.iter().map(|_| Err(r.clone())).collect());
        let enc = match crate::offsets::encoded(group) {
            Ok(e) => e,
            Err(r) => return all(r),
        };
        let Some(txn_key) = kafka::transactions::key_of(txn.0) else {
            return all(kafka::transactions::invalid_id(txn.0));
        };
        let keys = self.reader.keys();
        let state = keys.txn_state(&txn_key);
        let mut when = match self.fence(group, &enc, tenure).await {
            Ok(f) => f,
            Err(r) => return all(r),
        };
        when.push(Compare::mod_revision(state.clone(), CompareOp::Equal, txn.1));
        let (mut out, logs) = self.offset_logs(&offsets).await;
        for chunk in logs.chunks(OPS_PER_TXN) {
            let puts = chunk.iter().map(|(i, log)| {
                let o = &offsets[*i];
                let pending = kafka::transactions::PendingOffset {
                    producer_epoch: i32::from(producer.1),
                    topic: o.topic.clone(),
                    partition: o.partition,
                    offset: o.offset,
                    leader_epoch: o.leader_epoch,
                    metadata: o.metadata.clone(),
                };
                TxnOp::put(keys.group_pending_offset(&enc, producer.0, *log), pending.encode())
            });
            let look = TxnOp::get(RangeRequest::key(state.clone()).keys_only());
            let txn_op = Txn::new().when(when.clone()).and_then(puts).or_else([look]);
            let outcome = match self.reader.meta().txn(txn_op).await {
                Ok(resp) if resp.succeeded => Ok(()),
                Ok(resp) => {
                    let now = match resp.results.first() {
                        Some(OpResult::Get(g)) => g.kvs.first().map(|kv| kv.mod_revision),
                        _ => None,
                    };
                    if now != Some(txn.1) {
                        return kafka::Staged::TxnMoved;
                    }
                    Err(crate::offsets::not_coordinator(group))
                }
                Err(e) => Err(unavailable(e)),
            };
            for (i, _) in chunk {
                out[*i] = outcome.clone();
            }
        }
        kafka::Staged::Done(out)
    }

    async fn end_offsets(
        &self,
        id: &str,
        revision: i64,
        group: &str,
        marker: Marker,
    ) -> Result<(), Refused> {
        use metadata::{Compare, CompareOp, KeyRange, RangeRequest, Txn, TxnOp};
        let enc = crate::offsets::encoded(group)?;
        let txn_key =
            kafka::transactions::key_of(id).ok_or_else(|| kafka::transactions::invalid_id(id))?;
        let keys = self.reader.keys();
        let state = keys.txn_state(&txn_key);
        let prefix = keys.group_pending_of(&enc, marker.producer_id);
        let meta = self.reader.meta();
        let staged = meta.range(RangeRequest::prefix(prefix.clone())).await.map_err(unavailable)?;
        let cursor = format!("kafka.{enc}");
        for chunk in staged.kvs.chunks(OFFSETS_ENDED_PER_TXN) {
            let mut ops = Vec::with_capacity(chunk.len() * 4);
            for kv in chunk {
                ops.push(TxnOp::delete(KeyRange::key(kv.key.clone())));
                let log =
                    std::str::from_utf8(&kv.key[prefix.len()..]).ok().and_then(|l| l.parse().ok());
                let pending = kafka::transactions::PendingOffset::decode_from(&kv.value);
                let (Some(log), Some(p), true) = (log, pending, marker.commit) else { continue };
                // An offset staged at another epoch is no part of this transaction.
                if p.producer_epoch != i32::from(marker.producer_epoch) {
                    continue;
                }
                let commit = kafka::OffsetCommit {
                    topic: p.topic,
                    partition: p.partition,
                    offset: p.offset,
                    leader_epoch: p.leader_epoch,
                    metadata: p.metadata,
                };
                let position = crate::offsets::position_of(&commit);
                let log = LogId(log);
                ops.extend(
                    logstore::cursor::position_ops(keys, log, &cursor, position)
                        .map_err(refused)?,
                );
                let indexed = format!("{} {}", commit.partition, commit.topic);
                ops.push(TxnOp::put(keys.group_offset(&enc, log), indexed));
            }
            let same = Compare::mod_revision(state.clone(), CompareOp::Equal, revision);
            let resp =
                meta.txn(Txn::new().when([same]).and_then(ops)).await.map_err(unavailable)?;
            if !resp.succeeded {
                return Err(Refused::new(
                    kafka::transactions::CONCURRENT_TRANSACTIONS,
                    format!("transactional id {id}'s state moved"),
                ));
            }
        }
        Ok(())
    }

    fn now_ms(&self) -> i64 {
        match &self.storage {
            Some(s) => s.now_ms(),
            None => kafka::transactions::system_now_ms(),
        }
    }

    async fn unstable_offsets(&self, group: &str) -> Result<Vec<(String, i32)>, Refused> {
        let enc = crate::offsets::encoded(group)?;
        let prefix = self.reader.keys().group_pending(&enc);
        let resp = self
            .reader
            .meta()
            .range(metadata::RangeRequest::prefix(prefix))
            .await
            .map_err(unavailable)?;
        Ok(resp
            .kvs
            .iter()
            .filter_map(|kv| kafka::transactions::PendingOffset::decode_from(&kv.value))
            .map(|p| (p.topic, p.partition))
            .collect())
    }
}

/// Staged offsets ended in one transaction: up to four operations each (the pending key, the
/// cursor's two, the group's index), within etcd's 128.
const OFFSETS_ENDED_PER_TXN: usize = 30;

impl LogBroker {
    /// A writer's part in ending transactions: every marker a coordinator asks for (read
    /// whole at first, then watched) is written by the owner of its partition, which then
    /// removes it; a writer that does not lead the partition forgets the producer as verified
    /// in the log's slots it serves. Runs until `shutdown`.
    pub async fn serve_markers(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        if self.storage.is_none() {
            return;
        }
        tokio::pin!(shutdown);
        let limit = Arc::new(tokio::sync::Semaphore::new(MARKERS_AT_ONCE));
        let busy: Arc<parking_lot::Mutex<std::collections::HashSet<Vec<u8>>>> = Default::default();
        loop {
            tokio::select! {
                biased;
                _ = &mut shutdown => return,
                _ = self.follow_markers(&limit, &busy) => {}
            }
            tokio::select! {
                biased;
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
            }
        }
    }

    /// Reads the pending markers, then watches for more, each handled in a task of its own;
    /// returns when the watch ends (the caller starts again).
    async fn follow_markers(
        self: &Arc<Self>,
        limit: &Arc<tokio::sync::Semaphore>,
        busy: &Arc<parking_lot::Mutex<std::collections::HashSet<Vec<u8>>>>,
    ) {
        use futures::StreamExt;
        let prefix = self.reader.keys().txn_markers();
        let meta = self.reader.meta().clone();
        let Ok(listed) = meta.range(metadata::RangeRequest::prefix(prefix.clone())).await else {
            return;
        };
        for kv in listed.kvs {
            self.spawn_marker(kv, limit, busy).await;
        }
        let watch = metadata::WatchRequest {
            range: metadata::KeyRange::prefix(prefix),
            start_revision: listed.revision + 1,
        };
        let Ok(mut events) = meta.watch(watch).await else { return };
        while let Some(batch) = events.next().await {
            let Ok(batch) = batch else { return };
            for e in batch {
                if e.kind == metadata::EventKind::Put {
                    self.spawn_marker(e.kv, limit, busy).await;
                }
            }
        }
    }

    async fn spawn_marker(
        self: &Arc<Self>,
        kv: metadata::KeyValue,
        limit: &Arc<tokio::sync::Semaphore>,
        busy: &Arc<parking_lot::Mutex<std::collections::HashSet<Vec<u8>>>>,
    ) {
        if !busy.lock().insert(kv.key.clone()) {
            return;
        }
        let Ok(permit) = limit.clone().acquire_owned().await else { return };
        let (me, busy) = (self.clone(), busy.clone());
        tokio::spawn(async move {
            me.write_pending_marker(&kv).await;
            busy.lock().remove(&kv.key);
            drop(permit);
        });
    }

    /// Writes one pending marker if this writer leads its partition, then removes it.
    async fn write_pending_marker(&self, kv: &metadata::KeyValue) {
        use metadata::{Compare, CompareOp, KeyRange, Txn, TxnOp};
        let prefix = self.reader.keys().txn_markers();
        let Some(rest) = kv.key.get(prefix.len()..).and_then(|r| std::str::from_utf8(r).ok())
        else {
            return;
        };
        let mut parts = rest.rsplitn(3, '/');
        let (Some(pid), Some(partition), Some(topic)) = (parts.next(), parts.next(), parts.next())
        else {
            return;
        };
        let (Ok(producer_id), Ok(partition)) = (pid.parse::<i64>(), partition.parse::<i32>())
        else {
            return;
        };
        let Some(stored) = kafka::transactions::StoredMarker::decode_from(&kv.value) else {
            return;
        };
        let Ok(producer_epoch) = i16::try_from(stored.producer_epoch) else { return };
        let marker = Marker {
            producer_id,
            producer_epoch,
            commit: stored.commit,
            coordinator_epoch: stored.coordinator_epoch,
        };
        if let Ok(p) = u32::try_from(partition)
            && let Ok(log) = self.catalog.route(topic, p).await
        {
            self.forget_verified(log, producer_id);
        }
        let asked = Some((kv.key.as_slice(), kv.mod_revision, stored.transactional_id.as_str()));
        let done = match self.append_marker_asked(topic, partition, marker, asked).await {
            // Answered already (by this writer or the partition's owner before it), or stale:
            // removed if it is still this ask.
            Ok(None) => true,
            Ok(Some(commit)) => match commit.await {
                Ok(_) => true,
                Err(e) => {
                    tracing::warn!(topic, partition, error = %e.message, "Kafka transaction marker not written");
                    false
                }
            },
            // Another writer leads it, and writes it.
            Err(e) if e.code == code::NOT_LEADER_OR_FOLLOWER => false,
            // A stale marker (the producer has moved on), or a partition gone: nothing to do.
            Err(e)
                if e.code == kafka::transactions::PRODUCER_FENCED
                    || e.code == code::UNKNOWN_TOPIC_OR_PARTITION =>
            {
                true
            }
            Err(e) => {
                tracing::warn!(topic, partition, error = %e.message, "Kafka transaction marker not written");
                false
            }
        };
        if done {
            let txn = Txn::new()
                .when([Compare::mod_revision(kv.key.clone(), CompareOp::Equal, kv.mod_revision)])
                .and_then([TxnOp::delete(KeyRange::key(kv.key.clone()))]);
            if let Err(e) = self.reader.meta().txn(txn).await {
                tracing::warn!(topic, partition, error = %e, "a written marker's request left");
            }
        }
    }

    /// Whether the ask at `key` is still there at `revision`, and transactional id `id`'s
    /// stored state is prepared to end `marker`'s transaction as `marker` does (one read).
    async fn ask_stands(
        &self,
        key: &[u8],
        revision: i64,
        id: &str,
        marker: Marker,
    ) -> Result<bool, Refused> {
        use metadata::{OpResult, RangeRequest, Txn, TxnOp};
        let Some(enc) = kafka::transactions::key_of(id) else { return Ok(false) };
        let state = self.reader.keys().txn_state(&enc);
        let reads = Txn::new().and_then([
            TxnOp::get(RangeRequest::key(key.to_vec()).keys_only()),
            TxnOp::get(RangeRequest::key(state)),
        ]);
        let resp = self.reader.meta().txn(reads).await.map_err(unavailable)?;
        let found = |i: usize| match resp.results.get(i) {
            Some(OpResult::Get(g)) => g.kvs.first().cloned(),
            _ => None,
        };
        let asked = found(0).is_some_and(|kv| kv.mod_revision == revision);
        let prepared =
            found(1).and_then(|kv| StoredTxn::decode_from(&kv.value).ok()).is_some_and(|t| {
                let phase = match marker.commit {
                    true => kafka::transactions::TxnPhase::PrepareCommit,
                    false => kafka::transactions::TxnPhase::PrepareAbort,
                };
                t.marker_producer() == (marker.producer_id, i32::from(marker.producer_epoch))
                    && t.phase() == phase
            });
        Ok(asked && prepared)
    }

    /// Producer `producer_id` is no longer verified in any slot of `log` this writer serves.
    fn forget_verified(&self, log: LogId, producer_id: i64) {
        for ((l, _), s) in self.producers.lock().iter_mut() {
            if let (true, SlotProducers::Ready(t)) = (*l == log, s) {
                t.verified.remove(&producer_id);
            }
        }
    }
}
