//! The roles' Kafka brokers (ARCHITECTURE §11): what the Kafka front end asks of a writer or
//! a reader, answered from the catalog, the logs and the live members. Topics are streams;
//! partition p is the stream's log p; a partition's leader is the writer the routing function
//! picks for the client's zone, named by its node id; brokers are the live members that serve
//! Kafka. A writer's broker takes produce (with Kafka's idempotence, carried across owner
//! changes) for the partitions it owns; a reader's is read-only: it fetches any partition
//! from object storage and answers produce NOT_LEADER_OR_FOLLOWER.
//!
//! Depends on libs only: the writer and reader roles both build theirs from here.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// Tokio's clock (the std one outside tests): virtual under the simulation's paused runtime.
use tokio::time::Instant;

use catalog::{Catalog, CatalogError, StreamInfo, StreamProps, Target};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use kafka::producers::{Check, Producers};
use kafka::{
    BrokerError, BrokerNode, CommittedOffset, Fetched, OffsetCommit, PartitionInfo, Produced,
    Refused, TopicInfo, TopicSettings, code,
};
use logstore::{LogError, LogId, LogReader, LogStorage};

/// The Kafka broker of one writer (or standalone), or of one reader.
#[derive(Clone, Debug)]
pub struct LogBroker {
    catalog: Catalog,
    cluster: String,
    /// Reads of the logs (a writer's own reader, with its tail cache).
    reader: LogReader,
    /// A writer's log storage; `None` for a reader.
    storage: Option<LogStorage>,
    /// Idempotent producers' state per (log, slot) this writer serves.
    producers: Arc<Mutex<BTreeMap<(LogId, String), SlotProducers>>>,
    /// Producer ids this writer may hand out (a block from the metadata store).
    producer_ids: Arc<tokio::sync::Mutex<std::ops::Range<i64>>>,
    /// This broker's Kafka node id (-1 until [`with_node_id`](Self::with_node_id)).
    node_id: i32,
    /// Record bytes answered to Fetch requests so far.
    fetched: Arc<std::sync::atomic::AtomicU64>,
    /// Bytes of the log read to catch producer state up (a metric, and tests').
    caught_up: Arc<std::sync::atomic::AtomicU64>,
}

/// A slot's idempotent producers: being rebuilt from its checkpoint and the log, or ready.
enum SlotProducers {
    Loading(Shared<BoxFuture<'static, Result<(), Refused>>>),
    Ready(Tenure),
}

impl std::fmt::Debug for SlotProducers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SlotProducers::Loading(_) => write!(f, "Loading"),
            SlotProducers::Ready(t) => write!(f, "Ready(epoch {}, {:?})", t.epoch, t.producers),
        }
    }
}

/// The producers of a slot under one tenure: the epoch this writer serves it at.
struct Tenure {
    epoch: i64,
    /// The log's end when the tenure began: every batch admitted in it commits at or after.
    floor: u64,
    /// The state has seen every producer's batches below this offset, in any slot.
    caught_up: u64,
    producers: Producers,
    /// Idempotent batches admitted since the last checkpoint.
    dirty: u64,
    saved_at: Instant,
    saved_upto: u64,
}

/// Producer ids taken from the metadata store at a time.
const PRODUCER_ID_BLOCK: i64 = 1000;

/// A slot's producer state is checkpointed after this many idempotent batches, or this long
/// after the first one since the last checkpoint (ARCHITECTURE §11: N entries or T seconds)...
pub const CHECKPOINT_BATCHES: u64 = 2000;
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(10);
/// ...and, with no new batch, this often while the log moves on (other producers, other
/// slots), so a next owner's replay stays short.
pub const CHECKPOINT_IDLE: Duration = Duration::from_secs(60);
/// How long a produce waits for its partition's producer state to be rebuilt before it is
/// answered with a retryable error.
const LOAD_WAIT: Duration = Duration::from_secs(10);
/// Bytes of the log read at a time when replaying its batch headers.
const REPLAY_PAGE_BYTES: u64 = 8 << 20;
/// Bytes of the log read at most to look for a producer's batches before refusing a gap.
const CATCH_UP_BYTES: u64 = 64 << 20;

impl LogBroker {
    /// A writer's broker.
    pub fn writer(catalog: Catalog, cluster: &str, storage: LogStorage) -> Self {
        let reader = storage.reader().clone();
        LogBroker::new(catalog, cluster, reader, Some(storage))
    }

    /// A reader's broker: read-only.
    pub fn reader(catalog: Catalog, cluster: &str, reader: LogReader) -> Self {
        LogBroker::new(catalog, cluster, reader, None)
    }

    fn new(
        catalog: Catalog,
        cluster: &str,
        reader: LogReader,
        storage: Option<LogStorage>,
    ) -> Self {
        LogBroker {
            catalog,
            cluster: cluster.to_owned(),
            reader,
            storage,
            producers: Default::default(),
            producer_ids: Arc::new(tokio::sync::Mutex::new(0..0)),
            node_id: -1,
            fetched: Default::default(),
            caught_up: Default::default(),
        }
    }

    /// Bytes of the log read so far to catch producer state up with other owner slots.
    pub fn caught_up_bytes(&self) -> u64 {
        self.caught_up.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Record bytes this broker has answered Fetch requests with: a role's metric.
    pub fn fetched_bytes(&self) -> u64 {
        self.fetched.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// This broker's Kafka node id (the one its member record carries).
    pub fn with_node_id(mut self, node_id: i32) -> Self {
        self.node_id = node_id;
        self
    }

    /// The logs of a topic's partitions, as one read of the stream gives them.
    async fn partition_logs(&self, topic: &str) -> Result<Vec<LogId>, CatalogError> {
        Ok(self.catalog.get(topic).await?.partitions)
    }

    /// The first record at or after `entry` whose timestamp is at least `t` (`exact`: equal
    /// to it), as (offset, timestamp), reading at most [`SCAN_BYTES`] of batches; the entry's
    /// own offset and timestamp when none of them says (batches that are not Kafka's, or a
    /// record beyond the bound).
    async fn record_with_timestamp(
        &self,
        log: LogId,
        entry: &logstore::LogEntryHeader,
        t: i64,
        exact: bool,
    ) -> Result<(i64, i64), Refused> {
        let fallback = Ok((to_i64(entry.offset)?, entry.timestamp));
        let entries = self
            .reader
            .read_entries(log, entry.offset, MAX_FETCH_RECORDS, SCAN_BYTES)
            .await
            .map_err(refused)?;
        for e in entries {
            let Ok(h) = recordbatch::BatchHeader::parse(&e.payload) else { continue };
            if h.max_timestamp < t {
                continue;
            }
            let Ok((_, records)) = recordbatch::decode(&e.payload) else { continue };
            let hit = records
                .iter()
                .find(|r| if exact { r.timestamp_ms == t } else { r.timestamp_ms >= t });
            if let Some(r) = hit {
                return Ok((to_i64(e.header.offset + u64::from(r.offset_delta))?, r.timestamp_ms));
            }
        }
        fallback
    }

    /// The epoch this writer serves (log, slot) at, once its idempotent producers' state for
    /// that tenure is ready: on the first idempotent batch of a tenure the slot is taken
    /// (fencing its previous owner), the state rebuilt from its checkpoint and the log, and
    /// saved, before any batch is accepted (ARCHITECTURE §11). Until then: a retryable error.
    async fn ready(&self, log: LogId, slot: &str) -> Result<i64, Refused> {
        let key = (log, slot.to_owned());
        for _ in 0..3 {
            let served = self.store()?.served_epoch(log, slot);
            let loading = {
                let mut map = lock(&self.producers);
                match map.get(&key) {
                    Some(SlotProducers::Ready(t)) if Some(t.epoch) == served => return Ok(t.epoch),
                    Some(SlotProducers::Loading(f)) => f.clone(),
                    _ => {
                        let f = self.clone().rebuild(log, slot.to_owned()).boxed().shared();
                        map.insert(key.clone(), SlotProducers::Loading(f.clone()));
                        f
                    }
                }
            };
            match tokio::time::timeout(LOAD_WAIT, loading).await {
                Ok(Ok(())) => continue,
                Ok(Err(r)) => return Err(r),
                Err(_) => break,
            }
        }
        Err(Refused::new(
            code::NOT_LEADER_OR_FOLLOWER,
            format!("log {log}: idempotent producer state still loading after a change of owner"),
        ))
    }

    /// Rebuilds (log, slot)'s producers for a new tenure and installs them (or removes the
    /// attempt, so the next batch tries again).
    async fn rebuild(self, log: LogId, slot: String) -> Result<(), Refused> {
        let started = Instant::now();
        let built = self.load(log, &slot).await;
        let mut map = lock(&self.producers);
        match built {
            Ok(t) => {
                tracing::info!(
                    log = %log, slot, epoch = t.epoch, from = t.floor,
                    producers = t.producers.len(), took = ?started.elapsed(),
                    "Kafka: idempotent producer state ready"
                );
                map.insert((log, slot), SlotProducers::Ready(t));
                Ok(())
            }
            Err(r) => {
                map.remove(&(log, slot));
                Err(r)
            }
        }
    }

    async fn load(&self, log: LogId, slot: &str) -> Result<Tenure, Refused> {
        let unavailable = |what: &str, e: LogError| {
            tracing::warn!(log = %log, slot, error = %e, "Kafka: {what}");
            Refused::new(code::NOT_LEADER_OR_FOLLOWER, format!("{what}: {e}"))
        };
        // Fence the previous owner's slot first: nothing it commits after is missed.
        let (epoch, end) = self.store()?.serve_slot(log, slot).await.map_err(refused)?;
        let reader = &self.reader;
        // A producer moves between the log's slots as its zone's writers go and come, so the
        // state starts from every slot's checkpoint, and the replay from the lowest of them. A
        // slot with none never accepted an idempotent batch (each tenure saves one before it
        // does): with none at all there is nothing to replay.
        let mut producers = Producers::default();
        let mut from = end;
        let mut others = Vec::new();
        let slots = logstore::slot_state::slots(reader, log)
            .await
            .map_err(|e| unavailable("producer state checkpoints not listed", e))?;
        for s in slots {
            // What this slot's checkpoint is true below, if one could be used: one lost or
            // unreadable means the log, the source of truth, is replayed whole.
            let upto = match logstore::slot_state::load(reader, log, &s).await {
                Ok(None) => continue,
                Ok(Some(c)) => match Producers::restore(&c.state) {
                    Ok(p) => {
                        producers.merge(p);
                        Ok(c.upto)
                    }
                    Err(e) => Err(e),
                },
                Err(e @ LogError::Corrupt(_)) => Err(e.to_string()),
                Err(e) => return Err(unavailable("producer state checkpoint unreadable", e)),
            };
            let upto = upto.unwrap_or_else(|e| {
                tracing::warn!(log = %log, slot = s, error = %e, "Kafka: producer state checkpoint lost; replaying the log from its start");
                0
            });
            from = from.min(upto);
            // Moved forward below if its owner is gone.
            if s != slot {
                others.push(s);
            }
        }
        let start = self.reader.info(log).await.map_err(refused)?.first_offset;
        if start > from {
            // Trimmed past the state's offset: batches between were never replayed.
            producers.mark_behind();
        }
        let mut at = from.max(start);
        'replay: while at < end {
            let entries = reader
                .read_entries(log, at, u64::MAX, REPLAY_PAGE_BYTES)
                .await
                .map_err(|e| unavailable("log replay failed", e))?;
            if entries.is_empty() {
                break;
            }
            for e in entries {
                if e.header.offset >= end {
                    break 'replay;
                }
                at = e.header.end_offset();
                let Ok(h) = recordbatch::BatchHeader::parse(&e.payload) else { continue };
                let p = h.producer;
                if p.producer_id >= 0 {
                    producers.replayed(
                        p.producer_id,
                        p.producer_epoch,
                        p.base_sequence,
                        h.last_sequence(),
                        to_i64(e.header.offset)?,
                    );
                }
            }
        }
        // Saved before any batch is accepted: the next owner then knows to replay.
        let (state, upto) = producers.checkpoint(end, end);
        let state = bytes::Bytes::from(state);
        logstore::slot_state::save(reader, log, slot, epoch, upto, state.clone())
            .await
            .map_err(|e| unavailable("producer state checkpoint not saved", e))?;
        self.refresh_ownerless(log, others, upto, state).await;
        Ok(Tenure {
            epoch,
            floor: end,
            caught_up: end,
            producers,
            dirty: 0,
            saved_at: Instant::now(),
            saved_upto: upto,
        })
    }

    /// Moves forward the checkpoints of the log's other `slots` whose owner is gone, to
    /// `state`: true of the whole log below `upto` ([`logstore::slot_state::refresh`]). Best
    /// effort: one left behind only makes the next replay longer.
    async fn refresh_ownerless(
        &self,
        log: LogId,
        slots: Vec<String>,
        upto: u64,
        state: bytes::Bytes,
    ) {
        for slot in slots {
            match logstore::slot_state::refresh(&self.reader, log, &slot, upto, state.clone()).await
            {
                Ok(moved) => {
                    tracing::debug!(log = %log, slot, upto, moved, "Kafka: checkpoint of an ownerless slot")
                }
                Err(e) => {
                    tracing::debug!(log = %log, slot, error = %e, "Kafka: checkpoint of an ownerless slot not refreshed")
                }
            }
        }
    }

    /// Checkpoints each ready slot that is due (crate doc of [`CHECKPOINT_BATCHES`]); forgets
    /// the slots this writer no longer serves. Runs until `shutdown`, then checkpoints once
    /// more.
    pub async fn checkpoints(self, shutdown: role::Shutdown) {
        let wait = shutdown.wait();
        tokio::pin!(wait);
        loop {
            let stop = tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => false,
                _ = &mut wait => true,
            };
            self.checkpoint_due(stop).await;
            if stop {
                return;
            }
        }
    }

    /// Checkpoints every ready slot now (as at shutdown).
    pub async fn checkpoint_all(&self) {
        self.checkpoint_due(true).await;
    }

    /// Checkpoints the ready slots that are due, or `all` of them.
    async fn checkpoint_due(&self, all: bool) {
        let due: Vec<(LogId, String, i64)> = lock(&self.producers)
            .iter()
            .filter_map(|(k, v)| match v {
                SlotProducers::Ready(t) => {
                    let age = t.saved_at.elapsed();
                    let due = all
                        || t.dirty >= CHECKPOINT_BATCHES
                        || (t.dirty > 0 && age >= CHECKPOINT_INTERVAL)
                        || age >= CHECKPOINT_IDLE;
                    due.then(|| (k.0, k.1.clone(), t.epoch))
                }
                SlotProducers::Loading(_) => None,
            })
            .collect();
        for (log, slot, epoch) in due {
            if let Err(e) = self.checkpoint(log, &slot, epoch).await {
                tracing::warn!(log = %log, slot, error = %e, "Kafka: producer state checkpoint failed");
            }
        }
    }

    async fn checkpoint(&self, log: LogId, slot: &str, epoch: i64) -> Result<(), LogError> {
        let reader = &self.reader;
        let key = (log, slot.to_owned());
        let Some(end) = logstore::slot_state::end_if_served(reader, log, slot, epoch).await? else {
            // Another owner took the slot, or the log is gone: this state is stale.
            let mut map = lock(&self.producers);
            if matches!(map.get(&key), Some(SlotProducers::Ready(t)) if t.epoch == epoch) {
                map.remove(&key);
            }
            return Ok(());
        };
        let (state, upto, dirty, saved_upto) = {
            let map = lock(&self.producers);
            let Some(SlotProducers::Ready(t)) = map.get(&key) else { return Ok(()) };
            if t.epoch != epoch {
                return Ok(());
            }
            let (state, upto) = t.producers.checkpoint(t.floor, end);
            (state, upto, t.dirty, t.saved_upto)
        };
        let saved = upto > saved_upto
            && logstore::slot_state::save(reader, log, slot, epoch, upto, state.into()).await?;
        let mut map = lock(&self.producers);
        if let Some(SlotProducers::Ready(t)) = map.get_mut(&key)
            && t.epoch == epoch
        {
            // Batches still committing held it back: they count until a checkpoint has them.
            t.saved_at = Instant::now();
            if saved {
                t.dirty = t.dirty.saturating_sub(dirty);
                t.saved_upto = upto;
            }
        }
        Ok(())
    }

    /// Whether a slot of `log` other than `slot` has a producer state checkpoint: has taken
    /// (or is about to take) idempotent batches. Unknown (the store did not answer): true.
    async fn other_slots_take_producers(&self, log: LogId, slot: &str) -> bool {
        match logstore::slot_state::slots(&self.reader, log).await {
            Ok(slots) => slots.iter().any(|s| s != slot),
            Err(_) => true,
        }
    }

    /// Learns batches committed in `log` in any owner slot that this tenure of (log, slot)
    /// has not seen, up to the log's end now, reading at most [`CATCH_UP_BYTES`]: with `only`,
    /// that producer's after the newest of its batches known (from the tenure's start if
    /// none); else every producer's after where the tenure last caught up. A producer moves
    /// between slots when its zone's writers go or come, and each slot's state sees only its
    /// own commits after its tenure began. What could not be read (trimmed, or past the bound)
    /// marks the producers behind (a forward gap accepted) rather than refused on a guess.
    async fn catch_up(
        &self,
        log: LogId,
        slot: &str,
        epoch: i64,
        only: Option<i64>,
    ) -> Result<(), Refused> {
        let key = (log, slot.to_owned());
        let from = match lock(&self.producers).get(&key) {
            Some(SlotProducers::Ready(t)) if t.epoch == epoch => match only {
                Some(id) => t
                    .producers
                    .last_offset(id)
                    .and_then(|o| u64::try_from(o).ok())
                    .map_or(t.floor, |o| o + 1),
                None => t.caught_up,
            },
            _ => return Ok(()),
        };
        let info = self.reader.info(log).await.map_err(refused)?;
        let (mut at, end) = (from.max(info.first_offset), info.next_offset);
        if at >= end {
            return Ok(());
        }
        let (mut found, mut read) = (Vec::new(), 0u64);
        while at < end && read < CATCH_UP_BYTES {
            let entries = self
                .reader
                .read_entries(log, at, u64::MAX, REPLAY_PAGE_BYTES)
                .await
                .map_err(refused)?;
            if entries.is_empty() {
                break;
            }
            for e in entries {
                if e.header.offset >= end {
                    break;
                }
                at = e.header.end_offset();
                read += e.payload.len() as u64;
                self.caught_up
                    .fetch_add(e.payload.len() as u64, std::sync::atomic::Ordering::Relaxed);
                let Ok(h) = recordbatch::BatchHeader::parse(&e.payload) else { continue };
                let p = h.producer;
                if p.producer_id >= 0 && only.is_none_or(|id| id == p.producer_id) {
                    let offset = to_i64(e.header.offset)?;
                    found.push((
                        p.producer_id,
                        p.producer_epoch,
                        p.base_sequence,
                        h.last_sequence(),
                        offset,
                    ));
                }
            }
        }
        if let Some(SlotProducers::Ready(t)) = lock(&self.producers).get_mut(&key)
            && t.epoch == epoch
        {
            for (id, producer_epoch, first, last, offset) in found {
                t.producers.replayed(id, producer_epoch, first, last, offset);
            }
            // Trimmed past where it looked, or read only part: they may still be behind.
            let missed = at < end || info.first_offset > from;
            match only {
                Some(id) if missed => t.producers.mark_behind_one(id),
                Some(_) => {}
                None => {
                    if missed {
                        t.producers.mark_behind();
                    }
                    t.caught_up = t.caught_up.max(end);
                }
            }
        }
        Ok(())
    }

    /// `refusal` (a sequence or epoch error, fatal to most clients) if the state that gave it
    /// is current: the head, read now, shows the slot still served at `epoch`. A writer learns
    /// that another took its slot only when it next commits, so a stale tenure's state can be
    /// behind the log; then the state is dropped and the answer is NOT_LEADER_OR_FOLLOWER
    /// (retryable): the retry rebuilds it from the log.
    async fn confirm_refusal(
        &self,
        log: LogId,
        slot: &str,
        epoch: i64,
        refusal: Refused,
    ) -> Refused {
        match logstore::slot_state::end_if_served(&self.reader, log, slot, epoch).await {
            Ok(Some(_)) => refusal,
            Ok(None) => {
                let key = (log, slot.to_owned());
                let mut map = lock(&self.producers);
                if matches!(map.get(&key), Some(SlotProducers::Ready(t)) if t.epoch == epoch) {
                    map.remove(&key);
                }
                Refused::new(
                    code::NOT_LEADER_OR_FOLLOWER,
                    format!("log {log}: slot {slot} changed owner; producer state is rebuilt"),
                )
            }
            Err(e) => refused(e),
        }
    }

    /// The log of a topic's partition, and the owner slot a client in `zone` appends in, if
    /// this writer owns it; else NOT_LEADER_OR_FOLLOWER naming the owner.
    async fn led(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
    ) -> Result<(logstore::LogId, String), Refused> {
        let (log, slot, _) = self.led_with_props(topic, partition, zone).await?;
        Ok((log, slot))
    }

    /// [`led`](Self::led), with the stream's properties as read for the route.
    async fn led_with_props(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
    ) -> Result<(logstore::LogId, String, StreamProps), Refused> {
        let unknown = || {
            Refused::new(
                code::UNKNOWN_TOPIC_OR_PARTITION,
                format!("topic {topic} has no partition {partition}"),
            )
        };
        let p = u32::try_from(partition).map_err(|_| unknown())?;
        let route = match self.catalog.route_to(topic, Target::Partition(p), zone).await {
            Ok(r) => r,
            Err(CatalogError::NotFound(_)) | Err(CatalogError::InvalidArgument(_)) => {
                return Err(unknown());
            }
            Err(e) => return Err(Refused::new(code::NOT_LEADER_OR_FOLLOWER, e.to_string())),
        };
        match &route.owner {
            Some(o) if self.storage.as_ref().is_some_and(|s| o.id == s.config().writer_id) => {
                Ok((route.log, route.slot, route.props))
            }
            Some(o) => Err(Refused {
                code: code::NOT_LEADER_OR_FOLLOWER,
                message: format!("partition {partition} of {topic} is led by {}", o.id),
                leader: (o.node_id >= 0).then_some(o.node_id),
            }),
            None => Err(Refused::new(code::NOT_LEADER_OR_FOLLOWER, "no writer lives")),
        }
    }

    /// The log of a partition this broker serves reads of: a writer those it leads, a reader
    /// any.
    async fn readable(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
    ) -> Result<LogId, Refused> {
        if self.storage.is_some() {
            return Ok(self.led(topic, partition, zone).await?.0);
        }
        let unknown = || {
            Refused::new(
                code::UNKNOWN_TOPIC_OR_PARTITION,
                format!("topic {topic} has no partition {partition}"),
            )
        };
        let p = u32::try_from(partition).map_err(|_| unknown())?;
        match self.catalog.route(topic, p).await {
            Ok(log) => Ok(log),
            Err(CatalogError::NotFound(_)) | Err(CatalogError::InvalidArgument(_)) => {
                Err(unknown())
            }
            Err(e) => Err(Refused::new(code::NOT_LEADER_OR_FOLLOWER, e.to_string())),
        }
    }

    /// A writer's log storage; a reader takes no writes.
    fn store(&self) -> Result<&LogStorage, Refused> {
        self.storage
            .as_ref()
            .ok_or_else(|| Refused::new(code::NOT_LEADER_OR_FOLLOWER, "a reader takes no writes"))
    }

    /// The live readers that serve Kafka (none when they cannot be read: they are optional).
    async fn kafka_readers(&self) -> Vec<routing::Member> {
        match self.catalog.members("reader").await {
            Ok(m) => m.into_iter().filter(serves_kafka).collect(),
            Err(e) => {
                tracing::debug!(error = %e, "Kafka: readers unreadable");
                Vec::new()
            }
        }
    }

    /// A reader of `rack` to send a consumer at `offset` to instead (KIP-392): only from a
    /// writer, only for a consumer more than [`CATCH_UP_RECORDS`] behind the end, so the
    /// writers keep the tail (their tail cache) and readers take the catch-up reads (seed 001:
    /// batch reads do not load ingest). Partitions spread over the zone's readers.
    async fn preferred_reader(
        &self,
        log: LogId,
        partition: i32,
        rack: &str,
        behind: u64,
    ) -> Option<i32> {
        if self.storage.is_none() || behind <= CATCH_UP_RECORDS {
            return None;
        }
        let readers: Vec<routing::Member> =
            self.kafka_readers().await.into_iter().filter(|m| m.zone == rack).collect();
        let p = u32::try_from(partition).ok()?;
        routing::choose_owner(&readers, &format!("kafka-reads/{log}"), p, None).map(|m| m.node_id)
    }

    async fn writers(&self) -> Result<Vec<routing::Member>, BrokerError> {
        self.catalog.members("writer").await.map_err(|e| BrokerError(e.to_string()))
    }

    /// A stream as a topic, each partition led by its owner for `zone`, with the readers
    /// (node ids) as its other replicas.
    fn topic(
        s: &StreamInfo,
        writers: &[routing::Member],
        readers: &[i32],
        zone: Option<&str>,
    ) -> TopicInfo {
        let partitions = (0..s.partitions.len() as u32)
            .map(|p| PartitionInfo {
                index: p as i32,
                leader: routing::choose_owner(writers, &s.identity, p, zone)
                    .filter(|m| serves_kafka(m))
                    .map(|m| m.node_id),
                followers: readers.to_vec(),
            })
            .collect();
        TopicInfo {
            name: s.name.clone(),
            error: code::NONE,
            id: uuid::Uuid::parse_str(&s.identity).unwrap_or_default(),
            partitions,
        }
    }

    /// One named stream; created with `create` partitions when it does not exist.
    async fn named(&self, name: &str, create: Option<u32>) -> Result<StreamInfo, i16> {
        let failed = |e: CatalogError| match e {
            CatalogError::NotFound(_) => code::UNKNOWN_TOPIC_OR_PARTITION,
            CatalogError::InvalidArgument(_) => code::INVALID_TOPIC_EXCEPTION,
            other => {
                tracing::warn!(topic = name, error = %other, "Kafka Metadata: topic unreadable");
                code::UNKNOWN_SERVER_ERROR
            }
        };
        match (self.catalog.get(name).await, create) {
            (Ok(s), _) => Ok(s),
            (Err(CatalogError::NotFound(_)), Some(n)) => {
                match self.catalog.create(name, n, StreamProps::default()).await {
                    Ok(s) => {
                        tracing::info!(topic = name, partitions = n, "Kafka: topic auto-created");
                        Ok(s)
                    }
                    // Another broker created it first.
                    Err(CatalogError::AlreadyExists(_)) => {
                        self.catalog.get(name).await.map_err(failed)
                    }
                    Err(e) => Err(failed(e)),
                }
            }
            (Err(e), _) => Err(failed(e)),
        }
    }
}

#[async_trait::async_trait]
impl kafka::Broker for LogBroker {
    fn cluster_id(&self) -> String {
        self.cluster.clone()
    }

    async fn brokers(&self) -> Result<Vec<BrokerNode>, BrokerError> {
        let writers = self.writers().await?.into_iter().filter_map(|m| node_of(m, false));
        let readers = self.kafka_readers().await.into_iter().filter_map(|m| node_of(m, true));
        let mut out: Vec<BrokerNode> = writers.chain(readers).collect();
        out.sort_by_key(|b| b.node_id);
        Ok(out)
    }

    async fn topics(
        &self,
        names: Option<&[String]>,
        zone: Option<&str>,
        create: Option<u32>,
    ) -> Result<Vec<TopicInfo>, BrokerError> {
        let writers = self.writers().await?;
        let readers: Vec<i32> = self.kafka_readers().await.iter().map(|m| m.node_id).collect();
        let Some(names) = names else {
            let all = self.catalog.list().await.map_err(|e| BrokerError(e.to_string()))?;
            return Ok(all.iter().map(|s| Self::topic(s, &writers, &readers, zone)).collect());
        };
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            out.push(match self.named(name, create).await {
                Ok(s) => Self::topic(&s, &writers, &readers, zone),
                Err(code) => TopicInfo::failed(name, code),
            });
        }
        Ok(out)
    }

    async fn produce(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
        batch: bytes::Bytes,
        header: &recordbatch::BatchHeader,
    ) -> Result<kafka::Commit, Refused> {
        let (log, slot, props) = self.led_with_props(topic, partition, zone).await?;
        if let Some(max) = props.max_message_bytes
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
                    conditions(header, self.store()?.now_ms(), None)?,
                )
                .await
                .map_err(refused)?;
            return Ok(commit(committing));
        }
        let epoch = self.ready(log, &slot).await?;
        let key = (log, slot);
        let (first, last) = (p.base_sequence, header.last_sequence());
        let check =
            |producers: &Mutex<BTreeMap<(LogId, String), SlotProducers>>| match lock(producers)
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
        let first_here = match lock(&self.producers).get(&key) {
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
        // Commits only in this tenure: the state checked belongs to it.
        let committing = self
            .store()?
            .submit_in_slot(
                log,
                &key.1,
                record_count,
                batch,
                conditions(header, self.store()?.now_ms(), Some(epoch))?,
            )
            .await
            .map_err(refused)?;
        let shared = kafka::producers::shared(commit(committing));
        // Resolved whether or not anyone awaits it (a client may hang up), so the state and
        // its checkpoints see the outcome.
        tokio::spawn(shared.clone().map(drop));
        if let Some(SlotProducers::Ready(t)) = lock(&self.producers).get_mut(&key)
            && t.epoch == epoch
        {
            t.producers.admitted(p.producer_id, p.producer_epoch, first, last, shared.clone());
            t.dirty += 1;
        }
        Ok(Box::pin(shared))
    }

    async fn init_producer_id(&self, current: Option<(i64, i16)>) -> Result<(i64, i16), i16> {
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
                code::COORDINATOR_NOT_AVAILABLE
            })?;
        }
        let id = ids.start;
        ids.start += 1;
        Ok((id, 0))
    }

    async fn fetch(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
        rack: Option<&str>,
        offset: i64,
        max_bytes: usize,
    ) -> Result<Fetched, Refused> {
        let log = self.readable(topic, partition, zone).await?;
        let info = self.reader.info(log).await.map_err(refused)?;
        let (hw, start) = (to_i64(info.next_offset)?, to_i64(info.first_offset)?);
        if offset < start || offset > hw {
            return Err(Refused::new(
                code::OFFSET_OUT_OF_RANGE,
                format!("offset {offset} is outside [{start}, {hw}]"),
            ));
        }
        let mut fetched =
            Fetched { high_watermark: hw, log_start_offset: start, ..Default::default() };
        // Nothing to send, or no room to send it in (a fetch's budget is spent): the offsets.
        if offset == hw || max_bytes == 0 {
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
            .read_entries(log, offset as u64, MAX_FETCH_RECORDS, max_bytes as u64)
            .await
            .map_err(refused)?;
        let mut batches = Vec::with_capacity(entries.len());
        for e in entries {
            // Nothing at or past the high watermark this answer names (entries committed
            // since it was read), as Kafka answers: a client's lag is never negative.
            if to_i64(e.header.offset)? >= hw {
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

    async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        settings: TopicSettings,
        validate_only: bool,
    ) -> Result<uuid::Uuid, Refused> {
        // The name first, then the count, as the catalog checks them.
        catalog::validate_name(name).map_err(topic_refused)?;
        if partitions == 0 || partitions > catalog::MAX_PARTITIONS {
            return Err(Refused::new(code::INVALID_PARTITIONS, format!("{partitions} partitions")));
        }
        let props = props_of(settings);
        // Configs that do not go together (lake.retention.ms below retention.ms) are the
        // configs' error, not the topic's.
        catalog::Catalog::check_props(&props)
            .map_err(|e| admin_refused(e, code::INVALID_CONFIG))?;
        if validate_only {
            return match self.catalog.get(name).await {
                Ok(_) => Err(topic_refused(CatalogError::AlreadyExists(name.to_owned()))),
                Err(CatalogError::NotFound(_)) => Ok(uuid::Uuid::nil()),
                Err(e) => Err(topic_refused(e)),
            };
        }
        let s = self.catalog.create(name, partitions, props).await.map_err(topic_refused)?;
        Ok(uuid::Uuid::parse_str(&s.identity).unwrap_or_default())
    }

    async fn delete_topic(&self, name: &str) -> Result<uuid::Uuid, Refused> {
        let s = self.catalog.get(name).await.map_err(topic_refused)?;
        self.catalog.delete(name).await.map_err(topic_refused)?;
        Ok(uuid::Uuid::parse_str(&s.identity).unwrap_or_default())
    }

    async fn create_partitions(
        &self,
        name: &str,
        count: u32,
        validate_only: bool,
    ) -> Result<(), Refused> {
        let s = self.catalog.get(name).await.map_err(topic_refused)?;
        let have = s.partitions.len() as u32;
        // Kafka refuses a count that adds nothing as well as one that removes partitions.
        if count <= have {
            return Err(Refused::new(
                code::INVALID_PARTITIONS,
                format!("topic {name} has {have} partitions; asked for {count}"),
            ));
        }
        if count > catalog::MAX_PARTITIONS {
            return Err(Refused::new(code::INVALID_PARTITIONS, format!("{count} partitions")));
        }
        if !validate_only {
            self.catalog
                .add_partitions(name, count)
                .await
                .map_err(|e| admin_refused(e, code::INVALID_PARTITIONS))?;
        }
        Ok(())
    }

    async fn topic_settings(&self, name: &str) -> Result<TopicSettings, Refused> {
        let p = self.catalog.get(name).await.map_err(topic_refused)?.props;
        Ok(TopicSettings {
            retention_ms: p.retention_ms,
            retention_bytes: p.retention_bytes,
            max_message_bytes: p.max_message_bytes,
            lake_table: p.lake_table,
            lake_retention_ms: p.lake_retention_ms,
        })
    }

    async fn set_topic_settings(
        &self,
        name: &str,
        settings: TopicSettings,
        validate_only: bool,
    ) -> Result<(), Refused> {
        let props = props_of(settings);
        if validate_only {
            self.catalog.get(name).await.map_err(topic_refused)?;
            return catalog::Catalog::check_props(&props)
                .map_err(|e| admin_refused(e, code::INVALID_CONFIG));
        }
        self.catalog
            .set_props(name, props)
            .await
            .map_err(|e| admin_refused(e, code::INVALID_CONFIG))?;
        tracing::info!(topic = name, "Kafka: topic configs altered");
        Ok(())
    }

    async fn delete_records(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
        offset: i64,
    ) -> Result<i64, Refused> {
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

    fn node_id(&self) -> i32 {
        self.node_id
    }

    async fn coordinator(&self, key: &str) -> Result<Option<BrokerNode>, BrokerError> {
        // Over the writers that serve Kafka, by the group id: every writer picks the same one.
        // Every group request asks this: the watched writers only, no read of the readers.
        let writers: Vec<routing::Member> =
            self.writers().await?.into_iter().filter(serves_kafka).collect();
        let owner = routing::choose_owner(&writers, &format!("kafka-group/{key}"), 0, None);
        Ok(owner.and_then(|m| node_of(m.clone(), false)))
    }

    async fn commit_offsets(&self, group: &str, offsets: Vec<OffsetCommit>) -> Vec<i16> {
        let Some(name) = kafka::groups::cursor_name(group) else {
            return vec![kafka::groups::errors::INVALID_GROUP_ID; offsets.len()];
        };
        let reader = &self.reader;
        let mut logs: HashMap<String, Result<Vec<LogId>, i16>> = HashMap::new();
        let mut out = Vec::with_capacity(offsets.len());
        for o in offsets {
            if !logs.contains_key(&o.topic) {
                let found = self.partition_logs(&o.topic).await.map_err(|e| match e {
                    CatalogError::NotFound(_) | CatalogError::InvalidArgument(_) => {
                        code::UNKNOWN_TOPIC_OR_PARTITION
                    }
                    _ => code::UNKNOWN_SERVER_ERROR,
                });
                logs.insert(o.topic.clone(), found);
            }
            let log = match logs.get(&o.topic) {
                Some(Ok(l)) => usize::try_from(o.partition).ok().and_then(|p| l.get(p).copied()),
                Some(Err(e)) => {
                    out.push(*e);
                    continue;
                }
                None => None,
            };
            let (Some(log), Ok(offset)) = (log, u64::try_from(o.offset)) else {
                out.push(if o.offset < 0 {
                    code::OFFSET_OUT_OF_RANGE
                } else {
                    code::UNKNOWN_TOPIC_OR_PARTITION
                });
                continue;
            };
            let position = logstore::cursor::Position {
                offset,
                properties: [(LEADER_EPOCH.to_owned(), i64::from(o.leader_epoch))].into(),
                labels: o.metadata.map(|m| (METADATA.to_owned(), m)).into_iter().collect(),
            };
            out.push(match logstore::cursor::set_position(reader, log, &name, position).await {
                Ok(()) => code::NONE,
                Err(e) => refused(e).code,
            });
        }
        out
    }

    async fn committed_offsets(
        &self,
        group: &str,
        partitions: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<Vec<CommittedOffset>, i16> {
        let name =
            kafka::groups::cursor_name(group).ok_or(kafka::groups::errors::INVALID_GROUP_ID)?;
        let reader = &self.reader;
        let all = partitions.is_none();
        let asked: Vec<(String, Vec<i32>)> = match partitions {
            Some(p) => p,
            None => self
                .catalog
                .list()
                .await
                .map_err(|_| code::UNKNOWN_SERVER_ERROR)?
                .into_iter()
                .map(|s| (s.name, (0..s.partitions.len() as i32).collect()))
                .collect(),
        };
        let mut out = Vec::new();
        for (topic, parts) in asked {
            // A topic that does not exist has no committed offsets: -1, as Kafka answers.
            let logs = self.partition_logs(&topic).await.unwrap_or_default();
            for p in parts {
                let none = CommittedOffset {
                    topic: topic.clone(),
                    partition: p,
                    offset: -1,
                    leader_epoch: -1,
                    metadata: Some(String::new()),
                    error: code::NONE,
                };
                let Some(log) = usize::try_from(p).ok().and_then(|i| logs.get(i).copied()) else {
                    out.push(none);
                    continue;
                };
                match logstore::cursor::position(reader, log, &name).await {
                    Ok(Some(pos)) => out.push(CommittedOffset {
                        offset: to_i64(pos.offset).unwrap_or(-1),
                        leader_epoch: pos
                            .properties
                            .get(LEADER_EPOCH)
                            .and_then(|e| i32::try_from(*e).ok())
                            .unwrap_or(-1),
                        metadata: Some(pos.labels.get(METADATA).cloned().unwrap_or_default()),
                        ..none
                    }),
                    // Every partition asked for is answered; with none asked, only those with
                    // an offset are.
                    Ok(None) if !all => out.push(none),
                    Ok(None) => {}
                    Err(e) => out.push(CommittedOffset { error: refused(e).code, ..none }),
                }
            }
        }
        Ok(out)
    }

    async fn groups_with_offsets(&self) -> Result<Vec<String>, i16> {
        let streams = self.catalog.list().await.map_err(|_| code::UNKNOWN_SERVER_ERROR)?;
        let mut groups = std::collections::BTreeSet::new();
        for s in streams {
            for log in s.partitions {
                match logstore::LogCursor::list(&self.reader, log).await {
                    Ok(names) => groups
                        .extend(names.iter().filter_map(|n| kafka::groups::group_of_cursor(n))),
                    Err(LogError::NotFound(_)) => {}
                    Err(e) => return Err(refused(e).code),
                }
            }
        }
        Ok(groups.into_iter().collect())
    }

    async fn delete_offsets(&self, group: &str) -> Result<usize, i16> {
        let name =
            kafka::groups::cursor_name(group).ok_or(kafka::groups::errors::INVALID_GROUP_ID)?;
        let reader = &self.reader;
        let streams = self.catalog.list().await.map_err(|_| code::UNKNOWN_SERVER_ERROR)?;
        let mut deleted = 0;
        for s in streams {
            for log in s.partitions {
                match logstore::LogCursor::delete(reader, log, &name).await {
                    Ok(()) => deleted += 1,
                    Err(LogError::CursorNotFound { .. }) | Err(LogError::NotFound(_)) => {}
                    Err(e) => return Err(refused(e).code),
                }
            }
        }
        Ok(deleted)
    }

    async fn delete_offset(&self, group: &str, topic: &str, partition: i32) -> i16 {
        let Some(name) = kafka::groups::cursor_name(group) else {
            return kafka::groups::errors::INVALID_GROUP_ID;
        };
        let logs = match self.partition_logs(topic).await {
            Ok(l) => l,
            Err(_) => return code::UNKNOWN_TOPIC_OR_PARTITION,
        };
        let Some(log) = usize::try_from(partition).ok().and_then(|p| logs.get(p).copied()) else {
            return code::UNKNOWN_TOPIC_OR_PARTITION;
        };
        match logstore::LogCursor::delete(&self.reader, log, &name).await {
            // No offset there: nothing to delete, as Kafka answers.
            Ok(()) | Err(LogError::CursorNotFound { .. }) => code::NONE,
            Err(e) => refused(e).code,
        }
    }

    async fn list_offset(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
        timestamp: i64,
    ) -> Result<(i64, i64), Refused> {
        let log = self.readable(topic, partition, zone).await?;
        let info = self.reader.info(log).await.map_err(refused)?;
        let reader = &self.reader;
        match timestamp {
            // -4, earliest local (KIP-405): all of the log is as near as any of it.
            -2 | -4 => Ok((to_i64(info.first_offset)?, -1)),
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
}

/// Whether a live member serves Kafka: it has a Kafka address and a node id.
fn serves_kafka(m: &routing::Member) -> bool {
    !m.kafka.is_empty() && m.node_id >= 0
}

/// A member as a Kafka broker, if it serves Kafka at an address that parses.
fn node_of(m: routing::Member, read_only: bool) -> Option<BrokerNode> {
    if !serves_kafka(&m) {
        return None;
    }
    let (host, port) = m.kafka.rsplit_once(':')?;
    Some(BrokerNode {
        node_id: m.node_id,
        host: host.trim_matches(['[', ']']).to_owned(),
        port: port.parse().ok()?,
        rack: (m.zone != "*").then_some(m.zone),
        read_only,
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How far ahead of this writer's clock a batch's timestamps may be (Kafka 4's
/// `log.message.timestamp.after.max.ms`).
const TIMESTAMP_AFTER_MAX_MS: i64 = 3_600_000;
/// Kafka's INVALID_TIMESTAMP.
const INVALID_TIMESTAMP: i16 = 32;

/// A batch's append conditions: its entry carries the batch's largest record timestamp
/// (CreateTime, as Kafka's time index and retention use it), or the writer's clock when the
/// batch has none; a batch too far ahead of `now` is INVALID_TIMESTAMP, as in Kafka.
fn conditions(
    h: &recordbatch::BatchHeader,
    now: i64,
    tenure: Option<i64>,
) -> Result<logstore::Conditions, Refused> {
    let ts = (h.max_timestamp >= 0 && !h.log_append_time()).then_some(h.max_timestamp);
    if let Some(ts) = ts
        && ts > now.saturating_add(TIMESTAMP_AFTER_MAX_MS)
    {
        return Err(Refused::new(
            INVALID_TIMESTAMP,
            format!(
                "timestamp {ts} is more than {TIMESTAMP_AFTER_MAX_MS} ms ahead of the broker's clock"
            ),
        ));
    }
    Ok(logstore::Conditions { tenure, timestamp: ts, ..Default::default() })
}

/// A commit as the Kafka front end awaits it.
fn commit(committing: logstore::Committing) -> kafka::Commit {
    Box::pin(async move {
        let h = committing.await.map_err(refused)?;
        Ok(Produced { base_offset: to_i64(h.offset)? })
    })
}

fn props_of(s: TopicSettings) -> StreamProps {
    StreamProps {
        retention_ms: s.retention_ms,
        retention_bytes: s.retention_bytes,
        max_message_bytes: s.max_message_bytes,
        lake_table: s.lake_table,
        lake_retention_ms: s.lake_retention_ms,
    }
}

/// [`admin_refused`] where an invalid argument is the topic's name or a setting.
fn topic_refused(e: CatalogError) -> Refused {
    admin_refused(e, code::INVALID_TOPIC_EXCEPTION)
}

/// A catalog error as Kafka's code for an admin request; `invalid` is what an invalid
/// argument means for the request (a bad name or setting, or a bad partition count).
fn admin_refused(e: CatalogError, invalid: i16) -> Refused {
    let code = match &e {
        CatalogError::NotFound(_) => code::UNKNOWN_TOPIC_OR_PARTITION,
        CatalogError::AlreadyExists(_) => code::TOPIC_ALREADY_EXISTS,
        CatalogError::InvalidArgument(_) => invalid,
        _ => code::UNKNOWN_SERVER_ERROR,
    };
    Refused::new(code, e.to_string())
}

/// The cursor property holding a committed offset's leader epoch, and the label holding its
/// metadata string.
const LEADER_EPOCH: &str = "kafka.leader_epoch";
const METADATA: &str = "kafka.metadata";

/// How far behind the end (records) a consumer of a rack with a reader is sent to it.
pub const CATCH_UP_RECORDS: u64 = 10_000;

/// Bytes of batches a ListOffsets by timestamp reads past the entry the index finds.
const SCAN_BYTES: u64 = 8 << 20;

/// Records one fetch reads at most (its bytes bound it first).
const MAX_FETCH_RECORDS: u64 = 100_000;

fn to_i64(n: u64) -> Result<i64, Refused> {
    i64::try_from(n).map_err(|_| Refused::new(code::UNKNOWN_SERVER_ERROR, "offset past i64"))
}

/// A log-storage error as Kafka's code for a produce or fetch: retryable ones as the codes
/// clients retry on (after a metadata refresh for leadership).
pub fn refused(e: LogError) -> Refused {
    let code = match &e {
        LogError::NotFound(_) => code::UNKNOWN_TOPIC_OR_PARTITION,
        LogError::Fenced { .. } | LogError::NotOwner { .. } | LogError::ReadOnly(_) => {
            code::NOT_LEADER_OR_FOLLOWER
        }
        LogError::OffsetOutOfRange { .. } => code::OFFSET_OUT_OF_RANGE,
        LogError::InvalidArgument(m) if m.contains("maximum entry size") => code::MESSAGE_TOO_LARGE,
        LogError::InvalidArgument(_) => code::INVALID_RECORD,
        LogError::Unavailable { outcome_unknown: true, .. } => code::REQUEST_TIMED_OUT,
        LogError::Unavailable { .. } => code::NOT_LEADER_OR_FOLLOWER,
        // No room (buffer, or a full metadata store at commit): definitely not applied, so
        // not REQUEST_TIMED_OUT, which the idempotent window keeps as in doubt.
        LogError::ResourceExhausted(_) => code::KAFKA_STORAGE_ERROR,
        _ => code::UNKNOWN_SERVER_ERROR,
    };
    Refused::new(code, e.to_string())
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
    use kafka::producers::{Check, Producers, SharedCommit};

    use super::*;

    fn commit(e: LogError) -> SharedCommit {
        futures::future::ready(Err(refused(e))).boxed().shared()
    }

    /// A commit refused definitely for room (etcd's NOSPACE) leaves the idempotent window, so
    /// the client's retry of the batch is appended once room is back; an unknown outcome stays
    /// in it (the retry is answered as the first attempt was, never appended again).
    #[tokio::test]
    async fn a_batch_whose_commit_found_no_room_is_appended_when_retried() {
        let mut p = Producers::default();
        p.admitted(
            1,
            0,
            0,
            4,
            commit(LogError::ResourceExhausted("metadata store out of space".into())),
        );
        assert!(matches!(p.check(1, 0, 0, 4), Check::Append), "{:?}", p.check(1, 0, 0, 4));
        let unknown = LogError::Unavailable { message: "no answer".into(), outcome_unknown: true };
        p.admitted(2, 0, 0, 4, commit(unknown));
        assert!(matches!(p.check(2, 0, 0, 4), Check::Duplicate(_)), "{:?}", p.check(2, 0, 0, 4));
    }
}
