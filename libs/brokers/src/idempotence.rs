//! Kafka's idempotence on Lakelog (ARCHITECTURE §11): each partition slot's producers, under
//! one tenure of the writer that owns the slot. A new tenure rebuilds them from the slot's
//! checkpoint and a replay of the log since ([`LogBroker::load`]); the state is checkpointed
//! every N batches or T seconds and when idle; a producer not known here is looked for in
//! the log before a gap is refused ([`LogBroker::catch_up`]). The sequence rules themselves are
//! [`crate::producers`]'; their persistence is `logstore::slot_state`'s.

use std::time::Duration;

// Tokio's clock (the std one outside tests): virtual under the simulation's paused runtime.
use tokio::time::Instant;

use crate::producers::Producers;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use kafka::{Refused, code};
use logstore::{LogError, LogId};

use crate::{LogBroker, refused, to_i64};

/// A slot's idempotent producers: being rebuilt from its checkpoint and the log, or ready.
pub(crate) enum SlotProducers {
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
pub(crate) struct Tenure {
    pub(crate) epoch: i64,
    /// The log's end when the tenure began: every batch admitted in it commits at or after.
    pub(crate) floor: u64,
    /// The state has seen every producer's batches below this offset, in any slot.
    pub(crate) caught_up: u64,
    pub(crate) producers: Producers,
    /// Idempotent batches admitted since the last checkpoint.
    pub(crate) dirty: u64,
    pub(crate) saved_at: Instant,
    pub(crate) saved_upto: u64,
    /// Producers whose ongoing transaction this tenure verified with its coordinator's state,
    /// at this epoch: their next batches need no read. A marker for one removes it.
    pub(crate) verified: std::collections::HashMap<i64, i16>,
}

/// Producer ids taken from the metadata store at a time.
pub(crate) const PRODUCER_ID_BLOCK: i64 = 1000;

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
    /// The epoch this writer serves (log, slot) at, once its idempotent producers' state for
    /// that tenure is ready: on the first idempotent batch of a tenure the slot is taken
    /// (fencing its previous owner), the state rebuilt from its checkpoint and the log, and
    /// saved, before any batch is accepted (ARCHITECTURE §11). Until then: a retryable error.
    pub(crate) async fn ready(&self, log: LogId, slot: &str) -> Result<i64, Refused> {
        let key = (log, slot.to_owned());
        for _ in 0..3 {
            let served = self.store()?.served_epoch(log, slot);
            let loading = {
                let mut map = self.producers.lock();
                match map.get(&key) {
                    Some(SlotProducers::Ready(t)) if Some(t.epoch) == served => return Ok(t.epoch),
                    Some(SlotProducers::Loading(f)) => f.clone(),
                    _ => {
                        // A task of its own: it runs on when every batch waiting for it
                        // gave up, and the map holds no future owning this broker (which
                        // owns the map: a cycle that outlived a broker stopped mid-rebuild).
                        let rebuild = tokio::spawn(self.clone().rebuild(log, slot.to_owned()));
                        let f = async move {
                            rebuild.await.unwrap_or_else(|e| {
                                Err(Refused::server(format!("rebuilding producers: {e}")))
                            })
                        }
                        .boxed()
                        .shared();
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
    pub(crate) async fn rebuild(self, log: LogId, slot: String) -> Result<(), Refused> {
        let started = Instant::now();
        let built = self.load(log, &slot).await;
        let mut map = self.producers.lock();
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

    pub(crate) async fn load(&self, log: LogId, slot: &str) -> Result<Tenure, Refused> {
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
            verified: Default::default(),
        })
    }

    /// Moves forward the checkpoints of the log's other `slots` whose owner is gone, to
    /// `state`: true of the whole log below `upto` ([`logstore::slot_state::refresh`]). Best
    /// effort: one left behind only makes the next replay longer.
    pub(crate) async fn refresh_ownerless(
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
    pub(crate) async fn checkpoint_due(&self, all: bool) {
        let due: Vec<(LogId, String, i64)> = self
            .producers
            .lock()
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

    pub(crate) async fn checkpoint(
        &self,
        log: LogId,
        slot: &str,
        epoch: i64,
    ) -> Result<(), LogError> {
        let reader = &self.reader;
        let key = (log, slot.to_owned());
        let Some(end) = logstore::slot_state::end_if_served(reader, log, slot, epoch).await? else {
            // Another owner took the slot, or the log is gone: this state is stale.
            let mut map = self.producers.lock();
            if matches!(map.get(&key), Some(SlotProducers::Ready(t)) if t.epoch == epoch) {
                map.remove(&key);
            }
            return Ok(());
        };
        let (state, upto, dirty, saved_upto) = {
            let map = self.producers.lock();
            let Some(SlotProducers::Ready(t)) = map.get(&key) else { return Ok(()) };
            if t.epoch != epoch {
                return Ok(());
            }
            let (state, upto) = t.producers.checkpoint(t.floor, end);
            (state, upto, t.dirty, t.saved_upto)
        };
        let saved = upto > saved_upto
            && logstore::slot_state::save(reader, log, slot, epoch, upto, state.into()).await?;
        let mut map = self.producers.lock();
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
    pub(crate) async fn other_slots_take_producers(&self, log: LogId, slot: &str) -> bool {
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
    pub(crate) async fn catch_up(
        &self,
        log: LogId,
        slot: &str,
        epoch: i64,
        only: Option<i64>,
    ) -> Result<(), Refused> {
        let key = (log, slot.to_owned());
        let from = match self.producers.lock().get(&key) {
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
        if let Some(SlotProducers::Ready(t)) = self.producers.lock().get_mut(&key)
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
    pub(crate) async fn confirm_refusal(
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
                let mut map = self.producers.lock();
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
}
