//! [`LogStorage`] (Level 1): the public API over the writer pipeline, the reader and the
//! administrative operations (create, trim, delete, fence, activate).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use metadata::{Compare, CompareOp, MetadataStore, Txn, TxnOp};
use objstore::object_store::ObjectStore;
use prost::Message;
use tokio::sync::{OwnedSemaphorePermit, TryAcquireError, oneshot};

use crate::reader::{LogReader, Snapshot};
use crate::records::{LogHead, LogState};
use crate::writer::{Chain, Core, LogStorageConfig, Pending};
use crate::{
    Clock, EntryIndex, LogEntry, LogEntryHeader, LogError, LogId, LogInfo, LogOffset, decode,
};

/// Stops the writer's tasks when the last handle goes.
struct CloseGuard(Arc<Core>);

impl Drop for CloseGuard {
    fn drop(&mut self) {
        self.0.close();
        self.0.wake();
    }
}

/// Buffer room taken for an append before it is known ([`LogStorage::reserve`]): a remote
/// request's, from its headers on, while its body is received and decoded. Given with the
/// append (`Conditions::reserved`), it becomes part of the append's room; dropped, it goes back.
#[derive(Debug)]
pub struct Reserved(OwnedSemaphorePermit);

impl Reserved {
    /// Bytes of buffer room it holds.
    pub fn bytes(&self) -> usize {
        self.0.num_permits()
    }

    /// Adds `more` (reserved from the same writer) to it.
    pub fn merge(&mut self, more: Reserved) {
        self.0.merge(more.0);
    }
}

/// What an append asks beyond its payload ([`LogStorage::submit_in_slot`]).
#[derive(Debug, Default)]
pub struct Conditions {
    /// Commit only at this offset, else `OffsetMismatch`.
    pub expected_offset: Option<u64>,
    /// Commit only while the slot is served at this epoch
    /// ([`serve_slot`](LogStorage::serve_slot)), else `Fenced`: state the caller keeps per
    /// tenure stays true of the log.
    pub tenure: Option<i64>,
    /// The entry's timestamp (ms); the writer's clock when unset. The Kafka front end gives
    /// the batch's largest record timestamp, so time search and retention follow the records'
    /// timestamps, as in Kafka.
    pub timestamp: Option<i64>,
    /// The pipeline the append belongs to: it commits only if none of the chain's earlier
    /// appends failed, else it fails `Unavailable` with nothing applied. A chain that already
    /// failed refuses the append at once; an append refused at admission or failed breaks
    /// its chain for every append after it.
    pub chain: Option<Arc<Chain>>,
    /// Memory the caller holds for the append until it is answered, beyond its payload (a
    /// remote request's stream, task and futures): counted in the buffer with the append's
    /// own bookkeeping, so that what many small appends hold while they wait for their
    /// commit stays within `buffer_bytes`.
    pub overhead: usize,
    /// Room already taken for this append ([`LogStorage::reserve`]): counted toward its room,
    /// so what it held while being received is never counted twice nor dropped uncounted.
    pub reserved: Option<Reserved>,
    /// What the append is to a Kafka transaction: the log's open transactions and aborted
    /// index change with its commit, in the same metadata transaction (ARCHITECTURE §12).
    pub txn: Option<TxnMark>,
    /// The checksum of the payload's tail, computed and checked by the caller (a Kafka batch's
    /// CRC): the entry's checksum is derived from it rather than from every byte again.
    pub known_crc: Option<wal::KnownCrc>,
}

/// What an append is to a Kafka transaction of its log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnMark {
    /// A batch of `producer_id`'s transaction: the first one opens the transaction here, at its
    /// offset (refused `ResourceExhausted` when [`MAX_OPEN_TXNS`](crate::MAX_OPEN_TXNS) are
    /// open already).
    Data { producer_id: i64 },
    /// The marker ending `producer_id`'s transaction: closes it; an abort of one that was
    /// open here joins the log's aborted index.
    End { producer_id: i64, abort: bool },
}

/// Level 1 log storage: appends through this writer; reads, trims and the rest through the
/// metadata store and objects directly. Cheap to clone.
#[derive(Clone)]
pub struct LogStorage {
    core: Arc<Core>,
    guard: Arc<CloseGuard>,
    tasks: Arc<parking_lot::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl std::fmt::Debug for LogStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStorage").field("writer_id", &self.core.cfg.writer_id).finish()
    }
}

impl LogStorage {
    /// Registers this writer (lease, member key, first WAL sequence block) and starts its
    /// flusher, committer and keep-alive tasks.
    pub async fn open(
        meta: Arc<dyn MetadataStore>,
        objects: Arc<dyn ObjectStore>,
        cfg: LogStorageConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, LogError> {
        cfg.validate()?;
        let (core, tasks) = Core::start(meta, objects, cfg, clock).await?;
        Ok(LogStorage {
            guard: Arc::new(CloseGuard(core.clone())),
            core,
            tasks: Arc::new(parking_lot::Mutex::new(tasks)),
        })
    }

    /// Flushes and commits what is buffered, stops the tasks and revokes the lease.
    pub async fn shutdown(self) {
        self.drain().await;
        drop(self.guard);
    }

    /// What [`shutdown`](Self::shutdown) does, leaving this handle usable: from now on appends
    /// are refused (UNAVAILABLE, answered: nothing applied) while what was accepted is flushed
    /// and committed; then the tasks stop and the lease is revoked, so the slots this writer
    /// owned move to live writers. Reads keep being served. A later call (or one after
    /// [`abort`](Self::abort)) returns at once.
    pub async fn drain(&self) {
        self.core.close();
        self.core.wake();
        let tasks: Vec<_> = std::mem::take(&mut *self.tasks.lock());
        if tasks.is_empty() {
            return; // drained (or aborted) already
        }
        // The flusher flushes what is buffered and the committer resolves it (each within the
        // flush deadline); the keep-alive task has nothing left to do once they are done.
        let mut tasks = tasks.into_iter();
        let (flusher, committer) = (tasks.next(), tasks.next());
        for t in [flusher, committer].into_iter().flatten() {
            let _ = tokio::time::timeout(self.core.cfg.flush_deadline, t).await;
        }
        // The keep-alive and member-watch tasks.
        for t in tasks {
            t.abort();
        }
        let lease = self.core.identity.lock().await.lease;
        let _ = self.core.meta.lease_revoke(lease).await;
    }

    /// Stops every task at once, as a crash would: buffered and in-flight appends are never
    /// answered, nothing more is committed, the lease is left to expire. For tests.
    pub fn abort(&self) {
        self.core.close();
        for t in self.tasks.lock().drain(..) {
            t.abort();
        }
    }

    /// Reports every flush to `observer` from now on (its size, PUT and commit times). One
    /// observer per writer: false if one was set already.
    pub fn observe_flushes(&self, observer: Arc<dyn crate::writer::FlushObserver>) -> bool {
        self.core.observer.set(observer).is_ok()
    }

    /// Runs `hook` at each crash point of this writer's flushes from now on (tests: the
    /// simulation). One hook per writer: false if one was set already.
    pub fn set_step_hook(&self, hook: crate::writer::WriterHook) -> bool {
        self.core.hook.set(hook).is_ok()
    }

    /// WAL objects flushed (PUTs started) by this writer so far.
    pub fn flushes(&self) -> u64 {
        self.core.flushes.load(Ordering::Relaxed)
    }

    /// Hedge PUTs (a flush's object PUT a second time, past the hedge delay) so far: every
    /// flush is one PUT, and each hedge one more.
    pub fn hedged_puts(&self) -> u64 {
        self.core.hedges.load(Ordering::Relaxed)
    }

    /// The metadata store this writer uses (roles composed into one process share it).
    pub fn metadata(&self) -> std::sync::Arc<dyn MetadataStore> {
        self.core.meta.clone()
    }

    pub fn reader(&self) -> &LogReader {
        &self.core.reader
    }

    /// The logs this writer serves a slot of, each with its high watermark and last stable
    /// offset as of the newest head its commits (or its takeover) saw: a role's metrics, read
    /// without a metadata request (another zone's owner's later commits show at this
    /// writer's next commit).
    pub fn served_offsets(&self) -> Vec<(LogId, u64, u64)> {
        self.core.served_offsets()
    }

    /// The epoch under which this writer serves `log`'s `slot`, if it does: it changes
    /// whenever the slot changes hands, so state kept per (log, slot) — the Kafka front end's
    /// idempotent producers — knows when it may be stale.
    pub fn served_epoch(&self, log: LogId, slot: &str) -> Option<i64> {
        self.core.served_epoch(log, slot)
    }

    /// Serves `log`'s `slot` now rather than at its first commit: takes the slot (fencing its
    /// previous owner's, ARCHITECTURE §3) unless this writer serves it already. Returns the
    /// epoch, and the log's next offset read after the takeover: every entry a previous owner
    /// committed in the slot is below it. A new owner that rebuilds per-slot state from the log
    /// (the Kafka front end's idempotent producers) replays up to there, and appends with
    /// `tenure` = this epoch.
    pub async fn serve_slot(&self, log: LogId, slot: &str) -> Result<(i64, u64), LogError> {
        if slot.is_empty() || slot.contains('/') {
            return Err(LogError::InvalidArgument(format!(
                "slot `{slot}` must be a zone name or `*`"
            )));
        }
        if self.core.closing.load(Ordering::SeqCst) {
            return Err(LogError::unavailable("writer is shutting down"));
        }
        self.core.serve_slot(log, slot).await
    }

    /// The time on this writer's clock (ms since the epoch): what entries are stamped with.
    pub fn now_ms(&self) -> i64 {
        self.core.clock.now_ms()
    }

    pub fn config(&self) -> &LogStorageConfig {
        &self.core.cfg
    }

    /// Resolves once this writer began to close (drain, shutdown): from then on appends are
    /// refused. Long-lived calls (append streams) end on it.
    pub fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.core.closed()
    }

    /// This writer's current incarnation (its member key's create_revision).
    pub async fn incarnation(&self) -> i64 {
        self.core.identity.lock().await.member_revision
    }

    /// Creates an empty log and returns its id (never reused).
    pub async fn create_log(&self) -> Result<LogId, LogError> {
        crate::admin::create_log(self.core.meta.as_ref(), &self.core.keys, None).await
    }

    /// Appends one entry of `record_count` records. Acknowledged only once committed: the
    /// answer's offset is durable and readable. With `expected_offset`, commits only at that
    /// offset (else `OffsetMismatch`).
    pub async fn append(
        &self,
        log: LogId,
        record_count: u32,
        payload: Bytes,
        expected_offset: Option<u64>,
    ) -> Result<LogEntryHeader, LogError> {
        let slot = self.core.cfg.zone.clone();
        self.append_in_slot(log, &slot, record_count, payload, expected_offset).await
    }

    /// [`append`](Self::append) in a named owner slot: the zone the client was routed by, or
    /// `*` (ARCHITECTURE §3). For a stream's log this writer must be the slot's owner, else
    /// `NotOwner` names the owner; `append` uses the writer's own zone.
    pub async fn append_in_slot(
        &self,
        log: LogId,
        slot: &str,
        record_count: u32,
        payload: Bytes,
        expected_offset: Option<u64>,
    ) -> Result<LogEntryHeader, LogError> {
        let opts = Conditions { expected_offset, ..Default::default() };
        self.submit_in_slot(log, slot, record_count, payload, opts).await?.await
    }

    /// [`append_in_slot`](Self::append_in_slot) in two steps: this returns once the entry is
    /// admitted (checked, buffer room taken, queued behind every entry admitted before it, so
    /// entries admitted one after the other commit in that order), with a future of its commit.
    /// The Kafka front end admits a connection's pipelined batches in request order this way,
    /// and awaits their commits together. `opts` are the entry's conditions and timestamp.
    pub async fn submit_in_slot(
        &self,
        log: LogId,
        slot: &str,
        record_count: u32,
        payload: Bytes,
        opts: Conditions,
    ) -> Result<Committing, LogError> {
        let chain = opts.chain.clone();
        // Admission's state (its checks, its wait for room: about 1 KiB) lives on the heap
        // only while it runs: in place, it sized every caller's future for as long as the
        // append then awaits its commit, 8 bytes of it (`Committing`).
        let admitted = Box::pin(self.admit(log, slot, record_count, payload, opts)).await;
        if let (Err(e), Some(chain)) = (&admitted, chain) {
            // Refused: the chain's appends admitted so far go on, later ones fail.
            chain.fail_after(self.core.admitted(), log, e);
        }
        admitted
    }

    /// Takes `bytes` of buffer room for an append not yet known, at once or not at all: a
    /// remote request's from its headers on, before its body is read, so that what requests
    /// hold while they are received stays within `buffer_bytes`. Give it with the append
    /// (`Conditions::reserved`). Refused with `ResourceExhausted` when the buffer has no room
    /// (nothing waits: the caller has not read the request, and its client backs off).
    pub fn reserve(&self, bytes: usize) -> Result<Reserved, LogError> {
        if self.core.closing.load(Ordering::SeqCst) {
            return Err(LogError::unavailable("writer is shutting down"));
        }
        let n = u32::try_from(bytes.min(self.core.room)).unwrap_or(u32::MAX);
        match self.try_room(n)? {
            Some(p) => Ok(Reserved(p)),
            None => {
                if let Some(o) = self.core.observer.get() {
                    o.refused();
                }
                Err(LogError::ResourceExhausted(format!(
                    "append buffer full ({} bytes): retry later",
                    self.core.cfg.buffer_bytes
                )))
            }
        }
    }

    /// `permits` of buffer room if free now (the tail cache and the WAL object buffers kept
    /// for later flushes, which live in the room appends do not hold, give way first), `None`
    /// if not.
    fn try_room(&self, permits: u32) -> Result<Option<OwnedSemaphorePermit>, LogError> {
        if self.core.space.available_permits() < permits as usize {
            // The cache first: the objects it drops give their buffers back, and a buffer
            // coming back keeps itself with free room; then the kept buffers, those included.
            self.core.reader.shrink_cache(permits as usize);
            self.core.object_buffers.release();
        }
        match self.core.space.clone().try_acquire_many_owned(permits) {
            Ok(p) => Ok(Some(p)),
            Err(TryAcquireError::Closed) => Err(LogError::unavailable("writer is shutting down")),
            Err(TryAcquireError::NoPermits) => Ok(None),
        }
    }

    /// Takes `permits` more of buffer room for an append whose whole room is `room`: at once,
    /// or after waiting if few enough bytes of appends wait already ([`Waiting`]), else
    /// refused with `ResourceExhausted`.
    ///
    /// [`Waiting`]: crate::writer::Waiting
    async fn take_room(&self, permits: u32, room: usize) -> Result<OwnedSemaphorePermit, LogError> {
        let cfg = &self.core.cfg;
        match self.try_room(permits)? {
            Some(p) => Ok(p),
            None => {
                // What waits for room holds its payload outside the buffer: a bounded amount
                // waits, the rest is refused at once (nothing applied; the caller backs off).
                let Some(_waiting) = self.core.waiting.enter(room) else {
                    if let Some(o) = self.core.observer.get() {
                        o.refused();
                    }
                    return Err(LogError::ResourceExhausted(format!(
                        "append buffer full ({} bytes) and {} bytes of appends already waiting \
                         for room: retry later",
                        cfg.buffer_bytes,
                        self.core.waiting.bytes()
                    )));
                };
                // No buffer coming back is kept while it waits (room freed goes to it).
                let _way = self.core.object_buffers.make_way();
                let acquire = self.core.space.clone().acquire_many_owned(permits);
                match tokio::time::timeout(cfg.append_timeout, acquire).await {
                    Ok(Ok(p)) => Ok(p),
                    Ok(Err(_)) => Err(LogError::unavailable("writer is shutting down")),
                    Err(_) => Err(LogError::ResourceExhausted(format!(
                        "append buffer full ({} bytes) for {:?}",
                        cfg.buffer_bytes, cfg.append_timeout
                    ))),
                }
            }
        }
    }

    async fn admit(
        &self,
        log: LogId,
        slot: &str,
        record_count: u32,
        payload: Bytes,
        opts: Conditions,
    ) -> Result<Committing, LogError> {
        let Conditions {
            expected_offset,
            tenure,
            timestamp,
            chain,
            overhead,
            reserved,
            txn,
            known_crc,
        } = opts;
        if let Some(e) = chain.as_ref().and_then(|c| c.broken()) {
            return Err(e);
        }
        let cfg = &self.core.cfg;
        if slot.is_empty() || slot.contains('/') {
            return Err(LogError::InvalidArgument(format!(
                "slot `{slot}` must be a zone name or `*`"
            )));
        }
        if record_count == 0 {
            return Err(LogError::InvalidArgument("record_count must be at least 1".to_owned()));
        }
        if payload.len() > cfg.max_entry_bytes {
            return Err(LogError::InvalidArgument(format!(
                "payload of {} bytes is over the maximum entry size of {} bytes",
                payload.len(),
                cfg.max_entry_bytes
            )));
        }
        if self.core.closing.load(Ordering::SeqCst) {
            return Err(LogError::unavailable("writer is shutting down"));
        }
        // Unknown or deleted logs, and slots this writer does not own, fail here rather than
        // after a flush.
        if self.core.served_epoch(log, slot).is_none() {
            let snap = self.core.reader.snapshot(log).await?;
            if snap.head.log_state() == LogState::Deleted {
                return Err(LogError::NotFound(log));
            }
            if let Some(route) = &snap.head.route {
                self.core.check_owner_cached(log, route, slot)?;
            }
        }
        let kept = crate::writer::ENTRY_BOOKKEEPING.saturating_add(overhead);
        let room = payload.len().saturating_add(kept);
        let permits = u32::try_from(room.min(self.core.room)).unwrap_or(u32::MAX);
        // What was reserved for it counts toward its room; only the rest is taken now.
        let mut permit = reserved.map(|r| r.0);
        if let Some(p) = permit.as_mut()
            && p.num_permits() > permits as usize
        {
            drop(p.split(p.num_permits() - permits as usize));
        }
        let held = permit.as_ref().map_or(0, |p| p.num_permits() as u32);
        let more = self.take_room(permits - held, permits as usize).await?;
        let permit = match permit {
            Some(mut p) => {
                p.merge(more);
                p
            }
            None => more,
        };
        let (tx, rx) = oneshot::channel();
        self.core.enqueue(Pending {
            log,
            slot: slot.to_owned(),
            record_count,
            size: payload.len() as u64,
            payload,
            timestamp: timestamp.unwrap_or_else(|| self.core.clock.now_ms()),
            expected_offset,
            tenure,
            txn,
            known_crc,
            reply: tx,
            room: permit,
            kept,
            admitted: 0,
            chain,
        });
        Ok(Committing(rx))
    }

    pub async fn read_entries(
        &self,
        log: LogId,
        start: u64,
        max_records: u64,
        max_bytes: u64,
    ) -> Result<Vec<LogEntry>, LogError> {
        self.core.reader.read_entries(log, start, max_records, max_bytes).await
    }

    pub async fn get_first_offset(&self, log: LogId) -> Result<Option<LogOffset>, LogError> {
        self.core.reader.get_first_offset(log).await
    }

    pub async fn get_last_offset(&self, log: LogId) -> Result<Option<LogOffset>, LogError> {
        self.core.reader.get_last_offset(log).await
    }

    pub async fn read_index_range(
        &self,
        log: LogId,
        start: u64,
        max_entries: usize,
    ) -> Result<Vec<EntryIndex>, LogError> {
        self.core.reader.read_index_range(log, start, max_entries).await
    }

    pub async fn read_entries_by_index(
        &self,
        indexes: &[EntryIndex],
    ) -> Result<Vec<LogEntry>, LogError> {
        self.core.reader.read_entries_by_index(indexes).await
    }

    pub async fn info(&self, log: LogId) -> Result<LogInfo, LogError> {
        self.core.reader.info(log).await
    }

    /// Makes offsets below `offset` unreadable. Never moves the start back; `offset` may not
    /// pass the high watermark.
    pub async fn soft_trim(&self, log: LogId, offset: u64) -> Result<u64, LogError> {
        crate::retention::soft_trim(&self.core.reader, log, offset).await
    }

    /// Soft-trims to `offset`, then deletes the index pages wholly below it. Their objects are
    /// reclaimed by the cleaner.
    pub async fn hard_trim(&self, log: LogId, offset: u64) -> Result<u64, LogError> {
        crate::retention::hard_trim(&self.core.reader, log, offset).await
    }

    /// Marks the log DELETED and removes its index, start and floor. Its id is never reused;
    /// its objects are reclaimed by the cleaner.
    pub async fn delete_log(&self, log: LogId) -> Result<(), LogError> {
        crate::admin::delete_log(self.core.meta.as_ref(), &self.core.reader, log).await?;
        self.core.forget(log);
        Ok(())
    }

    /// Fences the log: every slot stops, no append commits under an older epoch once this
    /// returns. Returns the new epoch, which `activate` must be given.
    pub async fn fence(&self, log: LogId) -> Result<i64, LogError> {
        let me = self.core.owner(self.incarnation().await);
        self.update_head(log, |snap, head| {
            if head.log_state() == LogState::Deleted {
                return Err(LogError::NotFound(log));
            }
            head.state = LogState::Fenced as i32;
            head.epoch = snap.head_revision;
            head.fenced_by = Some(me.clone());
            Ok(Some(snap.head_revision))
        })
        .await?
        .ok_or_else(|| LogError::Internal("fence wrote nothing".to_owned()))
    }

    /// Un-fences a log fenced at `epoch`. Every previous slot owner has lost the log; writers
    /// take their slots afresh. A log just as an activation at `epoch` left it (active at that
    /// epoch, no slot taken since: this call's earlier attempt whose answer was lost) answers
    /// `Ok`; once a writer has taken a slot, activating again is `Fenced`.
    pub async fn activate(&self, log: LogId, epoch: i64) -> Result<(), LogError> {
        self.update_head(log, |_, head| {
            match head.log_state() {
                LogState::Deleted => return Err(LogError::NotFound(log)),
                // Activated at this epoch and untouched since (a fence moves the epoch).
                LogState::Normal
                    if head.epoch == epoch && head.slots.is_empty() && head.fenced_by.is_none() =>
                {
                    return Ok(None);
                }
                LogState::Fenced if head.epoch == epoch => {}
                _ => {
                    let whole_log = head.log_state() == LogState::Fenced;
                    return Err(LogError::Fenced {
                        log,
                        held: epoch,
                        current: head.epoch,
                        whole_log,
                    });
                }
            }
            head.state = LogState::Normal as i32;
            head.slots.clear();
            head.fenced_by = None;
            Ok(Some(()))
        })
        .await
        .map(|_| ())
    }

    /// Compare-and-set of a log's head through `f`, retried while other writes move it. `f`
    /// answers `Some` with the head to write, or `None` when the head is already as wanted
    /// (then nothing is written and `None` returned). An attempt whose answer is lost is
    /// resolved by reading again: `f` then sees the head that attempt may have left.
    async fn update_head<T>(
        &self,
        log: LogId,
        mut f: impl FnMut(&Snapshot, &mut LogHead) -> Result<Option<T>, LogError>,
    ) -> Result<Option<T>, LogError> {
        let core = &self.core;
        for _ in 0..1000 {
            let snap = core.reader.snapshot(log).await?;
            let mut head = snap.head.clone();
            let Some(out) = f(&snap, &mut head)? else { return Ok(None) };
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    core.keys.head(log),
                    CompareOp::Equal,
                    snap.head_revision,
                )])
                .and_then([TxnOp::put(core.keys.head(log), head.encode_to_vec())]);
            match core.meta.txn(txn).await {
                Ok(r) if r.succeeded => {
                    core.forget(log);
                    return Ok(Some(out));
                }
                Ok(_) => {}
                Err(e) if e.is_retryable() => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(LogError::unavailable(format!("could not update log {log}: too much contention")))
    }

    /// The head as stored, for tests and diagnostics.
    pub async fn head(&self, log: LogId) -> Result<LogHead, LogError> {
        let kv =
            self.core.meta.get(&self.core.keys.head(log)).await?.ok_or(LogError::NotFound(log))?;
        decode("log head", &kv.value)
    }
}

/// An admitted entry's commit ([`LogStorage::submit_in_slot`]): resolves with its header once
/// it is committed, or with why not.
#[derive(Debug)]
pub struct Committing(oneshot::Receiver<Result<LogEntryHeader, LogError>>);

impl std::future::Future for Committing {
    type Output = Result<LogEntryHeader, LogError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx).map(|r| {
            r.unwrap_or_else(|_| Err(LogError::unknown("writer stopped before answering")))
        })
    }
}
