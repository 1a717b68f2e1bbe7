//! The append pipeline (ARCHITECTURE §3): buffer → flush (one create-only WAL object) →
//! commit (metadata transactions that assign offsets) → acknowledge.
//!
//! Three tasks share one [`Core`]:
//! - the flusher takes the buffer when it is `flush_interval` old or `flush_bytes` big (or, under
//!   the eager policy, `min_flush_interval` after the previous flush began), stamps
//!   it with the next WAL sequence, hands it to the committer *in sequence order*, and starts
//!   its PUT (PUTs of several flushes overlap);
//! - the committer resolves flushes strictly in sequence order, so one log's chunks commit in
//!   flush order (invariant 7); it re-bases on a moved head, fails on a fence, and re-sends an
//!   ambiguous transaction identically until it gets a definite answer (§3.8);
//! - the keep-alive task renews the writer's lease; losing it ends the incarnation. While no
//!   flush is unresolved it also gives up the rest of the sequence block and raises the
//!   low-water mark to `wal/next_seq`, so an idle writer holds no compaction or cleaning back
//!   (ARCHITECTURE §5); the next flush allocates a fresh block.
//!
//! Order on failure (invariant 7, §3.4): every append gets an admission number as it enters
//! the buffer. When one of a log's appends fails definitely, every append of that log admitted
//! before the failure fails with it, wherever it is (buffered, stamped, uploading), so a
//! pipelining client's later appends never commit ahead of the one it will retry. Appends
//! admitted after the failure, before the client heard of it, are held back by their
//! [`Chain`]: a pipeline's appends share one, and once one of them fails, none of the chain's
//! later appends commits.

mod buffers;
mod commit;
mod flush;
mod hedge;
mod identity;
mod settings;
mod slots;

pub use settings::{LogStorageConfig, MIN_COMMIT_INTERVAL, MIN_HEDGE_AFTER};

use self::commit::*;
use self::flush::*;
use self::identity::*;
use self::slots::*;

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use metadata::{
    Compare, CompareOp, LeaseId, MetaError, MetadataStore, OpResult, RangeRequest, Txn, TxnOp,
};
use objstore::object_store::ObjectStore;
use prost::Message;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::time::Instant;

use crate::keys::{Keys, parse_u64};
use crate::reader::LogReader;
use crate::records::{
    EntryDescriptor, IndexPage, Locator, LogHead, LogState, Owner, Slot, StreamRoute,
};
use crate::{Clock, LogEntryHeader, LogError, LogId, RECENT_MAX, decode};
use routing::{Member, choose_owner};

/// One append waiting for its commit. Holds its room in the buffer (see `room`).
pub(crate) struct Pending {
    pub log: LogId,
    /// The owner slot the append is made in (ARCHITECTURE §3: a zone, or `*`).
    pub slot: String,
    pub record_count: u32,
    /// Emptied once copied into the WAL object, so a buffered entry is held in memory once.
    pub payload: Bytes,
    /// The payload's length.
    pub size: u64,
    pub timestamp: i64,
    pub expected_offset: Option<u64>,
    /// Commits only under this epoch of the slot (the tenure the caller's state belongs to);
    /// under another, the append fails FENCED with nothing applied.
    pub tenure: Option<i64>,
    /// What it is to a Kafka transaction of the log.
    pub txn: Option<crate::storage::TxnMark>,
    /// The checksum of the payload's tail its caller knows (`Conditions::known_crc`).
    pub known_crc: Option<wal::KnownCrc>,
    pub reply: oneshot::Sender<Result<LogEntryHeader, LogError>>,
    /// Its room in the buffer: its payload's bytes, which the flush takes with the payload
    /// (and gives back once its object is stored), and `kept`, held until the append is
    /// answered.
    pub room: OwnedSemaphorePermit,
    /// [`ENTRY_BOOKKEEPING`] and the caller's overhead (`Conditions::overhead`).
    pub kept: usize,
    /// Its place in the order appends entered the buffer (set by [`Core::enqueue`]).
    pub admitted: u64,
    /// The pipeline it belongs to, if any: it commits only while no earlier append of the
    /// chain failed.
    pub chain: Option<Arc<Chain>>,
}

/// Buffer room one append holds besides its payload, until it is answered: its `Pending`, its
/// reply channel and slot name, its place in a flush. Counted so that appends of tiny payloads
/// waiting for their commit cannot hold unbounded memory.
pub(crate) const ENTRY_BOOKKEEPING: usize = 256;

impl Pending {
    /// The payload's share of its room, for the flush that takes the payload.
    fn take_payload_room(&mut self) -> Option<OwnedSemaphorePermit> {
        let payload = self.room.num_permits().saturating_sub(self.kept);
        if payload == 0 { None } else { self.room.split(payload) }
    }

    fn answer(self, r: Result<LogEntryHeader, LogError>) {
        if let (Err(e), Some(chain)) = (&r, &self.chain) {
            chain.fail_after(self.admitted, self.log, e);
        }
        // The caller may have given up waiting; the outcome stands either way.
        let _ = self.reply.send(r);
    }
}

/// One pipelining client's appends to one log, which must commit in their order or not at
/// all: once one fails, every later one fails too, with nothing applied, so the client can
/// send them again in order after the one that failed. Admission order and per-log commits in
/// flush order (invariant 7) keep the successes in order; the chain covers appends admitted
/// after a failure but before the client heard of it, which poisoning does not.
#[derive(Debug, Default)]
pub struct Chain(Mutex<Option<(u64, LogError)>>);

impl Chain {
    /// Why the chain's later appends fail, once one of its appends failed: retryable, and
    /// never "outcome unknown" (they are refused before their commit).
    pub fn broken(&self) -> Option<LogError> {
        self.0.lock().as_ref().map(|(_, e)| e.clone())
    }

    /// Marks the chain failed from its start by `e` of an append to `log`: every append of it
    /// not committed yet fails, and so does every later one.
    pub fn fail(&self, log: LogId, e: &LogError) {
        self.fail_after(0, log, e);
    }

    /// Marks the chain failed by `e` of an append to `log`: those of its appends admitted
    /// after number `admitted` (the failed one's, or the last admitted when one is refused at
    /// admission) fail, and so does every later one.
    pub(crate) fn fail_after(&self, admitted: u64, log: LogId, e: &LogError) {
        let mut failed = self.0.lock();
        match failed.as_mut() {
            Some((at, _)) => *at = (*at).min(admitted),
            None => {
                let why = format!(
                    "not appended: an earlier append to log {log} in this pipeline failed ({e})"
                );
                *failed = Some((admitted, LogError::unavailable(why)));
            }
        }
    }

    /// Whether the append admitted as number `admitted` must fail, and why.
    fn dooms(&self, admitted: u64) -> Option<LogError> {
        self.0.lock().as_ref().filter(|(at, _)| admitted > *at).map(|(_, e)| e.clone())
    }
}

#[derive(Default)]
struct Buffer {
    entries: Vec<Pending>,
    bytes: usize,
    since: Option<Instant>,
}

/// A writer incarnation: its member key's create_revision, its lease and its sequence block.
#[derive(Clone, Debug)]
pub(crate) struct Identity {
    pub lease: LeaseId,
    pub member_revision: i64,
    next_seq: u64,
    block_end: u64,
    /// The rest of the block was given up and the mark raised while idle: the next block's
    /// allocation puts the mark to its start.
    released: bool,
}

/// One log's share of a flush. A flush holds at most one chunk per log, so all of a chunk's
/// entries are in one slot.
struct Chunk {
    log: LogId,
    slot: String,
    /// The WAL sequence of the flush (and object) it belongs to.
    seq: u64,
    /// Entries in append order, each with its byte range in the WAL object.
    entries: Vec<(Pending, u64, u64)>,
}

struct Flush {
    /// The WAL sequence it was stamped with: the low-water mark its commit puts.
    seq: u64,
    incarnation: i64,
    chunks: Vec<Chunk>,
    put: oneshot::Receiver<Result<Stored, LogError>>,
    /// The PUT's answer, once received.
    stored: Option<Result<(), LogError>>,
    /// The WAL object's sequence, bytes and their room, kept for the tail cache once its
    /// chunks commit.
    kept: Option<(u64, Kept)>,
    deadline: Instant,
    /// When the flusher took its entries from the buffer.
    began: Instant,
}

/// What a stored flush keeps until its chunks commit: its object, for the tail cache, and the
/// buffer room its payloads held. A flush keeps them only while the buffer has room to spare;
/// otherwise its PUT gives the room back as it succeeds (the bytes are durable), so appends
/// wait for PUTs, not for commits, and tail reads of that flush GET.
struct Kept {
    object: Bytes,
    _room: Option<OwnedSemaphorePermit>,
}

/// A flush's stored object: the WAL sequence it was stored under (its own, or a hedge's
/// above it) and what it keeps until its chunks commit.
struct Stored {
    seq: u64,
    kept: Option<Kept>,
}

/// A flush's PUT task ended without answering.
fn put_vanished() -> LogError {
    LogError::Internal("WAL put task vanished".to_owned())
}

impl Flush {
    /// The PUT's answer, waiting for it.
    async fn stored(&mut self) -> Result<(), LogError> {
        if self.stored.is_none() {
            let answer = (&mut self.put).await.unwrap_or_else(|_| Err(put_vanished()));
            self.take_answer(answer);
        }
        self.stored.clone().unwrap_or(Ok(()))
    }

    fn take_answer(&mut self, answer: Result<Stored, LogError>) {
        self.stored = Some(answer.map(|Stored { seq, kept }| {
            // A hedge's object: the chunks reference it.
            for c in &mut self.chunks {
                c.seq = seq;
            }
            self.kept = kept.map(|k| (seq, k));
        }));
    }

    /// Whether the PUT has answered, without waiting.
    fn is_stored(&mut self) -> bool {
        if self.stored.is_none() {
            match self.put.try_recv() {
                Ok(r) => self.take_answer(r),
                Err(oneshot::error::TryRecvError::Empty) => return false,
                Err(oneshot::error::TryRecvError::Closed) => {
                    self.stored = Some(Err(put_vanished()))
                }
            }
        }
        true
    }
}

/// What a writer reports of each flush, for metrics (telemetry lives above log storage; a role
/// records these in its histograms). Called on the flush path: keep it cheap, never block.
pub trait FlushObserver: Send + Sync {
    /// A WAL object of `bytes` is being PUT, holding `entries` entries of `logs` logs.
    fn flushed(&self, bytes: usize, entries: usize, logs: usize);
    /// Its PUT answered after `elapsed` (`ok`: the object is stored).
    fn put(&self, elapsed: Duration, ok: bool);
    /// Its commit (the metadata transactions of its chunks) took `elapsed`; `acked` is how long
    /// after the flush began its appends were answered.
    fn committed(&self, elapsed: Duration, acked: Duration);
    /// A PUT was hedged (a second PUT of its object raced it); `won`: the second was stored
    /// first.
    fn hedged(&self, won: bool) {
        let _ = won;
    }
    /// The commit budget's interval changed to `interval` (ARCHITECTURE §4): commit rounds
    /// start at most once per it.
    fn commit_interval(&self, interval: Duration) {
        let _ = interval;
    }
    /// An append was refused at once: the buffer was full and enough appends already waited
    /// for room ([`Waiting`]).
    fn refused(&self) {}
}

/// Appends waiting for buffer room, in bytes of room asked. Their payloads are in memory but
/// not in the buffer's accounting, so at most an eighth of the buffer waits (and always one
/// append, whatever its size); the rest is refused with RESOURCE_EXHAUSTED. Holding them
/// instead is no bound: a remote writer would keep every request its connections deliver.
/// (Remote appends wait with the room taken at their reception: an append that room covers
/// never waits.)
#[derive(Debug)]
pub(crate) struct Waiting {
    bytes: AtomicUsize,
    limit: usize,
}

impl Waiting {
    fn new(buffer_bytes: usize) -> Self {
        Waiting { bytes: AtomicUsize::new(0), limit: buffer_bytes / 8 }
    }

    /// Counts `room` as waiting, if it fits; the guard stops counting it.
    pub(crate) fn enter(&self, room: usize) -> Option<WaitGuard<'_>> {
        self.bytes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| {
                (w == 0 || w.saturating_add(room) <= self.limit).then(|| w.saturating_add(room))
            })
            .ok()
            .map(|_| WaitGuard { waiting: self, room })
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::SeqCst)
    }
}

pub(crate) struct WaitGuard<'a> {
    waiting: &'a Waiting,
    room: usize,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        self.waiting.bytes.fetch_sub(self.room, Ordering::SeqCst);
    }
}

/// The steps of a flush where a test hook may pause or crash the writer (the simulation's
/// crash points).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriterStep {
    /// The WAL object is stored; its commit is next.
    Written,
    /// A commit transaction applied; its appends are answered next.
    Committed,
}

/// A test hook run at each [`WriterStep`] (pause there, or never return to crash there).
pub type WriterHook =
    Arc<dyn Fn(WriterStep) -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

/// The slot of appends made without a zone hint, or routed past their zone (ARCHITECTURE §3).
pub const ANY_SLOT: &str = "*";

/// What this writer holds of a log slot: the epoch it took, and the head as last seen.
#[derive(Clone, Debug)]
struct Served {
    epoch: i64,
    head: LogHead,
    head_revision: i64,
}

pub(crate) struct Core {
    pub meta: Arc<dyn MetadataStore>,
    pub objects: Arc<dyn ObjectStore>,
    pub keys: Keys,
    pub reader: LogReader,
    pub cfg: LogStorageConfig,
    pub clock: Arc<dyn Clock>,
    buffer: Mutex<Buffer>,
    wake: Notify,
    pub space: Arc<Semaphore>,
    /// `space`'s permits in all: `buffer_bytes` less the room set aside for spare WAL object
    /// buffers ([`buffers::spare_bytes`]). An append asks for this at most.
    pub room: usize,
    /// WAL objects' buffers, used again.
    pub(crate) object_buffers: Arc<buffers::ObjectBuffers>,
    /// Appends waiting for room in `space`.
    pub waiting: Waiting,
    pub identity: tokio::sync::Mutex<Identity>,
    /// The member_revision of an incarnation found lost (0: none). Only that incarnation is
    /// ended: a late failure of an older one's commit does not end its successor (one lease
    /// loss, one reincarnation).
    lost: AtomicI64,
    /// Flushes stamped with a sequence and not resolved yet (answered, or their incarnation
    /// ended). The idle release happens only at zero.
    unresolved: AtomicU64,
    /// Admission numbers handed out (the newest).
    admitted: AtomicU64,
    /// Logs with a definite failure: their appends admitted up to the number fail with it.
    poisoned: Mutex<HashMap<LogId, (u64, LogError)>>,
    /// A new incarnation is being registered (the identity lock is held for as long as the
    /// metadata store takes): flushes fail at once with UNAVAILABLE instead of waiting.
    reincarnating: AtomicBool,
    served: Mutex<HashMap<(LogId, String), Served>>,
    /// Live writers as last watched, for the owner check at admission; slot takeovers read
    /// them linearizably instead.
    members: Mutex<Option<Arc<crate::membership::MemberSet>>>,
    /// WAL objects the flusher has handed to the object store.
    pub flushes: AtomicU64,
    /// Second PUTs of a flush's object, started past the hedge delay.
    pub hedges: AtomicU64,
    /// Flushes whose PUT has not answered yet: the eager policy starts one only below
    /// `eager_puts`.
    puts_out: AtomicU64,
    /// Recent PUT times, for hedging.
    put_times: hedge::PutTimes,
    pub closing: AtomicBool,
    /// `closing`, to wait on: true once the writer began to close.
    closed: tokio::sync::watch::Sender<bool>,
    pub observer: std::sync::OnceLock<Arc<dyn FlushObserver>>,
    /// Crash points for tests; unset in every role.
    pub hook: std::sync::OnceLock<WriterHook>,
}

/// `items` grouped by log: logs in the order their first item came, each group in its items'
/// order.
fn group_by_log<T>(items: impl IntoIterator<Item = T>, log: impl Fn(&T) -> LogId) -> Vec<Vec<T>> {
    let mut groups: Vec<Vec<T>> = Vec::new();
    let mut index: HashMap<LogId, usize> = HashMap::new();
    for item in items {
        let i = *index.entry(log(&item)).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[i].push(item);
    }
    groups
}

impl Core {
    pub(crate) async fn start(
        meta: Arc<dyn MetadataStore>,
        objects: Arc<dyn ObjectStore>,
        cfg: LogStorageConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<(Arc<Core>, Vec<tokio::task::JoinHandle<()>>), LogError> {
        let keys = Keys::new(&cfg.cluster);
        // The tail cache: what this writer commits is cached as the reads of it would be.
        // It shares the append buffer's budget: it caches in room appends do not hold.
        // Appends' room: the buffer less the room set aside for spare WAL object buffers.
        let spare = buffers::spare_bytes(cfg.buffer_bytes);
        let room = cfg.buffer_bytes - spare;
        let space = Arc::new(Semaphore::new(room));
        let reader = LogReader::new(meta.clone(), objects.clone(), &cfg.cluster)
            .with_caches(cfg.tail_cache_bytes, crate::DEFAULT_INDEX_PAGES)
            .with_cache_budget(space.clone())
            .with_followed_heads(crate::DEFAULT_FOLLOWED_HEADS);
        let identity = register(meta.as_ref(), &keys, &cfg).await?;
        let core = Arc::new(Core {
            object_buffers: buffers::ObjectBuffers::new(space.clone(), reader.range_cache(), spare),
            space,
            room,
            waiting: Waiting::new(cfg.buffer_bytes),
            meta,
            objects,
            keys,
            reader,
            clock,
            buffer: Mutex::new(Buffer::default()),
            wake: Notify::new(),
            identity: tokio::sync::Mutex::new(identity),
            lost: AtomicI64::new(0),
            unresolved: AtomicU64::new(0),
            admitted: AtomicU64::new(0),
            poisoned: Mutex::new(HashMap::new()),
            reincarnating: AtomicBool::new(false),
            puts_out: AtomicU64::new(0),
            put_times: hedge::PutTimes::default(),
            served: Mutex::new(HashMap::new()),
            members: Mutex::new(None),
            flushes: AtomicU64::new(0),
            hedges: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            closed: tokio::sync::watch::Sender::new(false),
            observer: std::sync::OnceLock::new(),
            hook: std::sync::OnceLock::new(),
            cfg,
        });
        let (tx, rx) = mpsc::channel(64);
        let tasks = vec![
            tokio::spawn(flusher(core.clone(), tx)),
            tokio::spawn(committer(core.clone(), rx)),
            tokio::spawn(keep_alive(core.clone())),
            tokio::spawn(watch_members(core.clone())),
        ];
        Ok((core, tasks))
    }

    /// Queues an append; the flusher picks it up. A writer that is closing refuses it (nothing
    /// applied): checked under the buffer's lock, which the flusher holds when it decides the
    /// buffer is empty and stops, so no append is left behind with no flusher.
    pub(crate) fn enqueue(&self, mut p: Pending) {
        let mut b = self.buffer.lock();
        if self.closing.load(Ordering::SeqCst) {
            drop(b);
            // Refused after everything admitted so far: only its chain's later appends fail.
            p.admitted = self.admitted.load(Ordering::SeqCst);
            p.answer(Err(LogError::unavailable("writer is shutting down")));
            return;
        }
        p.admitted = self.admitted.fetch_add(1, Ordering::SeqCst) + 1;
        b.bytes += p.payload.len();
        let was_empty = b.since.is_none();
        b.since.get_or_insert_with(Instant::now);
        b.entries.push(p);
        let full = b.bytes >= self.cfg.flush_bytes;
        drop(b);
        // The flusher sleeps until the buffer's deadline, or indefinitely while it is empty.
        if was_empty || full {
            self.wake.notify_one();
        }
    }

    /// Begins to close: appends are refused from now on, and waiters of [`Core::closed`] are
    /// woken.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.closed.send_replace(true);
    }

    /// Resolves once the writer began to close (at once if it has).
    pub(crate) fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut closed = self.closed.subscribe();
        async move {
            let _ = closed.wait_for(|c| *c).await;
        }
    }

    /// How many appends were admitted so far: the admission number of the last.
    pub(crate) fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::SeqCst)
    }

    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    /// The epoch this writer holds for a log's slot, if it serves that slot.
    /// Per log this writer serves a slot of: its high watermark and last stable offset, from
    /// the newest head a served slot saw.
    pub(crate) fn served_offsets(&self) -> Vec<(LogId, u64, u64)> {
        let mut by_log: std::collections::BTreeMap<LogId, (u64, u64)> = Default::default();
        for ((log, _), s) in self.served.lock().iter() {
            let seen = (s.head.next_offset, s.head.last_stable_offset());
            let at = by_log.entry(*log).or_insert(seen);
            if seen.0 > at.0 {
                *at = seen;
            }
        }
        by_log.into_iter().map(|(log, (hw, lso))| (log, hw, lso)).collect()
    }

    pub(crate) fn served_epoch(&self, log: LogId, slot: &str) -> Option<i64> {
        self.served.lock().get(&(log, slot.to_owned())).map(|s| s.epoch)
    }

    /// Takes `slot` of `log` unless it is served; its epoch and the log's next offset after.
    pub(crate) async fn serve_slot(&self, log: LogId, slot: &str) -> Result<(i64, u64), LogError> {
        let served = self.served.lock().get(&(log, slot.to_owned())).map(|s| s.epoch);
        if let Some(epoch) = served {
            // Served already: every earlier owner's commit is in the head as it is now.
            let snap = self.reader.snapshot(log).await?;
            return Ok((epoch, snap.head.next_offset));
        }
        let member_revision = self.identity.lock().await.member_revision;
        let me = self.owner(member_revision);
        let s = slots::take_slot(self, log, slot, &me).await?;
        let next = s.head.next_offset;
        let epoch = s.epoch;
        let mut served = self.served.lock();
        // A commit may have taken it meanwhile (the same epoch: the takeover was ours).
        served.entry((log, slot.to_owned())).or_insert(s);
        Ok((served.get(&(log, slot.to_owned())).map_or(epoch, |s| s.epoch), next))
    }

    /// Stops serving every slot of a log.
    pub(crate) fn forget(&self, log: LogId) {
        self.served.lock().retain(|(l, _), _| *l != log);
    }

    fn forget_slot(&self, log: LogId, slot: &str) {
        self.served.lock().remove(&(log, slot.to_owned()));
    }

    /// Whether this writer owns `slot` of a stream partition under the member view as last
    /// watched; `Ok` when there is no view yet (the slot takeover checks linearizably).
    pub(crate) fn check_owner_cached(
        &self,
        log: LogId,
        route: &StreamRoute,
        slot: &str,
    ) -> Result<(), LogError> {
        let view = self.members.lock().clone();
        match view {
            Some(set) => self.check_owner(log, route, slot, &set.members),
            None => Ok(()),
        }
    }

    /// The owner function (ARCHITECTURE §3): `Ok` if it picks this writer for the slot.
    fn check_owner(
        &self,
        log: LogId,
        route: &StreamRoute,
        slot: &str,
        members: &[Member],
    ) -> Result<(), LogError> {
        let zone = (slot != ANY_SLOT).then_some(slot);
        match choose_owner(members, &route.stream_identity, route.partition, zone) {
            Some(m) if m.id == self.cfg.writer_id => Ok(()),
            Some(m) => Err(LogError::NotOwner {
                log,
                slot: slot.to_owned(),
                owner_id: m.id.clone(),
                owner: m.address.clone(),
            }),
            None => Err(LogError::unavailable("no live writer")),
        }
    }

    pub(crate) fn owner(&self, member_revision: i64) -> Owner {
        Owner { writer_id: self.cfg.writer_id.clone(), member_revision }
    }

    /// The next WAL sequence, allocating a new block when the current one is used up. The
    /// flush it stamps counts as unresolved until [`Core::resolved`].
    async fn next_seq(&self) -> Result<(u64, i64), LogError> {
        if self.reincarnating.load(Ordering::SeqCst) {
            return Err(LogError::unavailable(
                "writer lost its lease and is registering again; nothing of this append applied",
            ));
        }
        let mut id = self.identity.lock().await;
        if id.next_seq >= id.block_end {
            // After an idle release no flush is unresolved: the mark may rise to the block.
            let mark = id.released.then_some(id.lease);
            let allocated =
                allocate_block(self.meta.as_ref(), &self.keys, &self.cfg, id.member_revision, mark)
                    .await;
            let Some((start, end)) = allocated? else {
                self.lose(id.member_revision);
                return Err(LogError::unavailable(INCARNATION_ENDED));
            };
            id.next_seq = start;
            id.block_end = end;
            id.released = false;
        }
        let seq = id.next_seq;
        id.next_seq += 1;
        self.unresolved.fetch_add(1, Ordering::SeqCst);
        Ok((seq, id.member_revision))
    }

    /// A stamped flush is resolved: every append in it answered.
    fn resolved(&self) {
        self.unresolved.fetch_sub(1, Ordering::SeqCst);
    }

    /// Ends the incarnation `member_revision` (if it is still the current one, the keep-alive
    /// task or the committer re-registers).
    fn lose(&self, member_revision: i64) {
        self.lost.store(member_revision, Ordering::SeqCst);
    }

    fn is_lost(&self, member_revision: i64) -> bool {
        self.lost.load(Ordering::SeqCst) == member_revision
    }

    /// Fails every append of `log` admitted so far with `e`, wherever it is now (ARCHITECTURE
    /// §3.4): the ones already answered are unaffected, the rest fail as the committer meets
    /// them.
    fn poison(&self, log: LogId, e: &LogError) {
        let upto = self.admitted.load(Ordering::SeqCst);
        self.poisoned.lock().insert(log, (upto, e.clone()));
    }

    /// Fails what `poison` doomed of a chunk; the rest of the chunk (appends admitted after
    /// the failure) stays. `None` when nothing is left.
    /// Appends whose chain broke fail too: a chain's earlier appends were resolved before
    /// (flushes are resolved in admission order), so its failure is known by now.
    fn cull(&self, mut c: Chunk) -> Option<Chunk> {
        let doom = self.poisoned.lock().get(&c.log).cloned();
        if doom.is_some() || c.entries.iter().any(|(p, _, _)| p.chain.is_some()) {
            // In order: a poisoned append's failure breaks its chain for the ones after it.
            let mut live = Vec::with_capacity(c.entries.len());
            for (p, start, len) in std::mem::take(&mut c.entries) {
                let why = match &doom {
                    Some((upto, e)) if p.admitted <= *upto => Some(e.clone()),
                    _ => p.chain.as_ref().and_then(|chain| chain.dooms(p.admitted)),
                };
                match why {
                    Some(e) => p.answer(Err(e)),
                    None => live.push((p, start, len)),
                }
            }
            c.entries = live;
        }
        (!c.entries.is_empty()).then_some(c)
    }

    /// Forgets failures no append still waiting can be affected by: flushes are resolved in
    /// admission order, so once one whose oldest append came after a failure is met, nothing
    /// older is left.
    fn unpoison_before(&self, oldest_admitted: u64) {
        self.poisoned.lock().retain(|_, (upto, _)| *upto >= oldest_admitted);
    }
}
