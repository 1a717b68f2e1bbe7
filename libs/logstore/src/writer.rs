//! The append pipeline (ARCHITECTURE §3): buffer → flush (one create-only WAL object) →
//! commit (metadata transactions that assign offsets) → acknowledge.
//!
//! Three tasks share one [`Core`]:
//! - the flusher takes the buffer when it is `flush_interval` old or `flush_bytes` big, stamps
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
//! pipelining client's later appends never commit ahead of the one it will retry.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
use crate::storage::LogStorageConfig;
use crate::{Clock, LogEntryHeader, LogError, LogId, RECENT_MAX, decode};
use routing::{Member, choose_owner};

/// One append waiting for its commit. Holds its share of the buffer budget until answered.
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
    pub reply: oneshot::Sender<Result<LogEntryHeader, LogError>>,
    pub _permit: OwnedSemaphorePermit,
    /// Its place in the order appends entered the buffer (set by [`Core::enqueue`]).
    pub admitted: u64,
}

impl Pending {
    fn answer(self, r: Result<LogEntryHeader, LogError>) {
        // The caller may have given up waiting; the outcome stands either way.
        let _ = self.reply.send(r);
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
    /// Entries in append order, each with its byte range in the WAL object.
    entries: Vec<(Pending, u64, u64)>,
}

struct Flush {
    seq: u64,
    incarnation: i64,
    chunks: Vec<Chunk>,
    put: oneshot::Receiver<Result<(), LogError>>,
    deadline: Instant,
    /// When the flusher took its entries from the buffer.
    began: Instant,
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
}

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
    pub closing: AtomicBool,
    pub observer: std::sync::OnceLock<Arc<dyn FlushObserver>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Core {
    pub(crate) async fn start(
        meta: Arc<dyn MetadataStore>,
        objects: Arc<dyn ObjectStore>,
        cfg: LogStorageConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<(Arc<Core>, Vec<tokio::task::JoinHandle<()>>), LogError> {
        let keys = Keys::new(&cfg.cluster);
        let reader = LogReader::new(meta.clone(), objects.clone(), &cfg.cluster);
        let identity = register(meta.as_ref(), &keys, &cfg).await?;
        let core = Arc::new(Core {
            space: Arc::new(Semaphore::new(cfg.buffer_bytes)),
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
            served: Mutex::new(HashMap::new()),
            members: Mutex::new(None),
            flushes: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            observer: std::sync::OnceLock::new(),
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
        let mut b = lock(&self.buffer);
        if self.closing.load(Ordering::SeqCst) {
            drop(b);
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

    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    /// The epoch this writer holds for a log's slot, if it serves that slot.
    pub(crate) fn served_epoch(&self, log: LogId, slot: &str) -> Option<i64> {
        lock(&self.served).get(&(log, slot.to_owned())).map(|s| s.epoch)
    }

    /// Stops serving every slot of a log.
    pub(crate) fn forget(&self, log: LogId) {
        lock(&self.served).retain(|(l, _), _| *l != log);
    }

    fn forget_slot(&self, log: LogId, slot: &str) {
        lock(&self.served).remove(&(log, slot.to_owned()));
    }

    /// Whether this writer owns `slot` of a stream partition under the member view as last
    /// watched; `Ok` when there is no view yet (the slot takeover checks linearizably).
    pub(crate) fn check_owner_cached(
        &self,
        log: LogId,
        route: &StreamRoute,
        slot: &str,
    ) -> Result<(), LogError> {
        let view = lock(&self.members).clone();
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
        lock(&self.poisoned).insert(log, (upto, e.clone()));
    }

    /// Fails what `poison` doomed of a chunk; the rest of the chunk (appends admitted after
    /// the failure) stays. `None` when nothing is left.
    fn cull(&self, mut c: Chunk) -> Option<Chunk> {
        let doom = lock(&self.poisoned).get(&c.log).cloned();
        if let Some((upto, e)) = doom {
            let (dead, live): (Vec<_>, Vec<_>) =
                c.entries.into_iter().partition(|(p, _, _)| p.admitted <= upto);
            for (p, _, _) in dead {
                p.answer(Err(e.clone()));
            }
            c.entries = live;
        }
        (!c.entries.is_empty()).then_some(c)
    }

    /// Forgets failures no append still waiting can be affected by: flushes are resolved in
    /// admission order, so once one whose oldest append came after a failure is met, nothing
    /// older is left.
    fn unpoison_before(&self, oldest_admitted: u64) {
        lock(&self.poisoned).retain(|_, (upto, _)| *upto >= oldest_admitted);
    }
}

/// Registers a new incarnation: a lease, the member key under it, and the first sequence block
/// with the low-water mark, all in one transaction (ARCHITECTURE §5: the mark exists before any
/// sequence of the block can be used).
async fn register(
    meta: &dyn MetadataStore,
    keys: &Keys,
    cfg: &LogStorageConfig,
) -> Result<Identity, LogError> {
    let member = keys.member("writer", &cfg.writer_id);
    // A writer restarted under the same id finds its previous incarnation's key until that
    // lease expires: wait for it (a live duplicate keeps it, and is refused below).
    let give_up = Instant::now() + cfg.lease_ttl * 2 + Duration::from_secs(1);
    let mut warned = false;
    while meta.get(&member).await?.is_some() && Instant::now() < give_up {
        if !warned {
            tracing::warn!(writer = %cfg.writer_id, "writer id still registered (a previous incarnation?); waiting for its lease to expire");
            warned = true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let lease = meta.lease_grant(cfg.lease_ttl).await?;
    let member_record = crate::records::MemberRecord {
        id: cfg.writer_id.clone(),
        role: "writer".to_owned(),
        address: cfg.advertise.clone(),
        zone: cfg.zone.clone(),
    }
    .encode_to_vec();
    for _ in 0..100 {
        let (next, seq_rev) = read_next_seq(meta, keys).await?;
        let end = next + cfg.seq_block;
        let txn = Txn::new()
            .when([
                Compare::create_revision(member.clone(), CompareOp::Equal, 0),
                Compare::mod_revision(keys.next_seq(), CompareOp::Equal, seq_rev),
            ])
            .and_then([
                TxnOp::put_with_lease(member.clone(), member_record.clone(), lease),
                TxnOp::put(keys.next_seq(), end.to_string()),
                TxnOp::put_with_lease(keys.low_water(&cfg.writer_id), next.to_string(), lease),
            ])
            .or_else([TxnOp::get(RangeRequest::key(member.clone()))]);
        let resp = meta.txn(txn).await?;
        if resp.succeeded {
            return Ok(Identity {
                lease,
                member_revision: resp.revision,
                next_seq: next,
                block_end: end,
                released: false,
            });
        }
        if matches!(resp.results.first(), Some(OpResult::Get(g)) if !g.kvs.is_empty()) {
            let _ = meta.lease_revoke(lease).await;
            return Err(LogError::AlreadyExists(format!(
                "writer id {} (a live process holds it)",
                cfg.writer_id
            )));
        }
    }
    Err(LogError::unavailable("could not allocate a WAL sequence block: too much contention"))
}

async fn read_next_seq(meta: &dyn MetadataStore, keys: &Keys) -> Result<(u64, i64), LogError> {
    Ok(match meta.get(&keys.next_seq()).await? {
        Some(kv) => (
            parse_u64(&kv.value).ok_or_else(|| LogError::Corrupt("wal/next_seq".to_owned()))?,
            kv.mod_revision,
        ),
        None => (0, 0),
    })
}

/// Allocates the next sequence block `[start, end)`; with `mark` (the lease), the low-water
/// mark rises to `start` in the same transaction (only when no flush is unresolved). `None`:
/// the incarnation ended (its member key is gone or another's).
async fn allocate_block(
    meta: &dyn MetadataStore,
    keys: &Keys,
    cfg: &LogStorageConfig,
    member_revision: i64,
    mark: Option<LeaseId>,
) -> Result<Option<(u64, u64)>, LogError> {
    let member = keys.member("writer", &cfg.writer_id);
    for _ in 0..100 {
        let (next, seq_rev) = read_next_seq(meta, keys).await?;
        let end = next + cfg.seq_block;
        let raise = mark.map(|lease| {
            TxnOp::put_with_lease(keys.low_water(&cfg.writer_id), next.to_string(), lease)
        });
        let txn = Txn::new()
            .when([
                Compare::create_revision(member.clone(), CompareOp::Equal, member_revision),
                Compare::mod_revision(keys.next_seq(), CompareOp::Equal, seq_rev),
            ])
            .and_then(std::iter::once(TxnOp::put(keys.next_seq(), end.to_string())).chain(raise))
            .or_else([TxnOp::get(RangeRequest::key(member.clone()))]);
        let resp = meta.txn(txn).await?;
        if resp.succeeded {
            return Ok(Some((next, end)));
        }
        match resp.results.first() {
            Some(OpResult::Get(g))
                if g.kvs.first().map(|kv| kv.create_revision) == Some(member_revision) =>
            {
                continue;
            }
            _ => return Ok(None),
        }
    }
    Err(LogError::unavailable("could not allocate a WAL sequence block: too much contention"))
}

/// While no flush is unresolved, gives up the rest of the sequence block and raises the
/// low-water mark to `wal/next_seq` (ARCHITECTURE §5): the sequences left in the block lie
/// below every busier writer's objects, and a mark there would hold back compaction and the
/// cleaner's cutoff for as long as this writer stays idle. Every sequence it uses later comes
/// from a block allocated after this, at or above that `next_seq`. Holds the identity lock,
/// so no flush is stamped meanwhile.
async fn release_idle_block(core: &Core) -> Result<(), LogError> {
    let mut id = core.identity.lock().await;
    // Unresolved first: a committer that ends the incarnation does so before it resolves.
    if core.unresolved.load(Ordering::SeqCst) != 0
        || core.is_lost(id.member_revision)
        || core.closing.load(Ordering::SeqCst)
    {
        return Ok(());
    }
    let mark_key = core.keys.low_water(&core.cfg.writer_id);
    let read = Txn::new().and_then([
        TxnOp::get(RangeRequest::key(core.keys.next_seq())),
        TxnOp::get(RangeRequest::key(mark_key.clone())),
    ]);
    let resp = core.meta.txn(read).await?;
    let seq_of = |r: Option<&OpResult>| match r {
        Some(OpResult::Get(g)) => g.kvs.first().and_then(|kv| parse_u64(&kv.value)),
        _ => None,
    };
    let (Some(next), mark) = (seq_of(resp.results.first()), seq_of(resp.results.get(1))) else {
        return Ok(());
    };
    if mark.is_some_and(|m| m >= next) {
        return Ok(()); // nothing handed out since: the mark is as high as it can be
    }
    let member = core.keys.member("writer", &core.cfg.writer_id);
    let raise = Txn::new()
        .when([Compare::create_revision(member, CompareOp::Equal, id.member_revision)])
        .and_then([TxnOp::put_with_lease(mark_key, next.to_string(), id.lease)]);
    if core.meta.txn(raise).await?.succeeded {
        id.next_seq = id.block_end;
        id.released = true;
    } else {
        core.lose(id.member_revision);
    }
    Ok(())
}

async fn keep_alive(core: Arc<Core>) {
    let period = core.cfg.lease_ttl / 3;
    let mut last_ok = Instant::now();
    while !core.closing.load(Ordering::SeqCst) {
        tokio::time::sleep(period).await;
        let (lease, member_revision) = {
            let id = core.identity.lock().await;
            (id.lease, id.member_revision)
        };
        match core.meta.lease_keep_alive(lease).await {
            Ok(_) => {
                last_ok = Instant::now();
                if let Err(e) = release_idle_block(&core).await {
                    tracing::warn!(error = %e, "could not raise the idle writer's low-water mark");
                }
            }
            Err(MetaError::LeaseNotFound(_)) => core.lose(member_revision),
            Err(e) => {
                tracing::warn!(error = %e, "lease keep-alive failed");
                if last_ok.elapsed() >= core.cfg.lease_ttl {
                    core.lose(member_revision);
                }
            }
        }
        if core.is_lost(member_revision) && !core.closing.load(Ordering::SeqCst) {
            tracing::warn!("writer lease lost; registering a new incarnation");
            reincarnate(&core).await;
            last_ok = Instant::now();
        }
    }
}

/// Keeps the member view fresh and, when the member set changes, stops serving the stream
/// slots the owner function now gives to another writer: their next appends are answered
/// NOT_OWNER, and the new owner's takeover fences this writer's slot (ARCHITECTURE §3).
async fn watch_members(core: Arc<Core>) {
    let mut watch =
        crate::membership::MemberWatch::start(core.meta.clone(), &core.cfg.cluster, "writer");
    while !core.closing.load(Ordering::SeqCst) {
        if let Some(set) = watch.current()
            && !lock(&core.members).as_ref().is_some_and(|s| Arc::ptr_eq(s, &set))
        {
            release_lost_slots(&core, &set.members);
            *lock(&core.members) = Some(set);
        }
        // The timeout only lets a closed writer's task end.
        if let Ok(false) = tokio::time::timeout(Duration::from_secs(1), watch.changed()).await {
            return;
        }
    }
}

/// Drops the served stream slots that the owner function no longer gives to this writer.
fn release_lost_slots(core: &Core, members: &[Member]) {
    let mut served = lock(&core.served);
    served.retain(|(log, slot), s| match &s.head.route {
        Some(route) => {
            let keep = core.check_owner(*log, route, slot, members).is_ok();
            if !keep {
                tracing::info!(log = %log, slot, "member set changed: no longer the owner");
            }
            keep
        }
        None => true,
    });
}

async fn flusher(core: Arc<Core>, to_committer: mpsc::Sender<Flush>) {
    loop {
        // Read under the buffer's lock with `closing`: an append enqueued after this saw
        // `closing` too and was refused, so stopping on an empty buffer strands nothing.
        let (due, closing, bytes) = {
            let b = lock(&core.buffer);
            (
                b.since.map(|s| s + core.cfg.flush_interval),
                core.closing.load(Ordering::SeqCst),
                b.bytes,
            )
        };
        match due {
            Some(at) if !closing && Instant::now() < at && bytes < core.cfg.flush_bytes => {
                let _ = tokio::time::timeout_at(at, core.wake.notified()).await;
                continue;
            }
            None if closing => return,
            None => {
                core.wake.notified().await;
                continue;
            }
            _ => {}
        }
        let taken = take_buffer(&core);
        if taken.entries.is_empty() {
            continue;
        }
        let began = Instant::now();
        let (seq, incarnation) = match core.next_seq().await {
            Ok(s) => s,
            Err(e) => {
                fail_unstamped(&core, taken.entries, &e);
                continue;
            }
        };
        let (flush, object) =
            match build_flush(seq, incarnation, taken.entries, began, core.cfg.flush_deadline) {
                Ok(f) => f,
                Err((e, entries)) => {
                    fail_unstamped(&core, entries, &e);
                    core.resolved();
                    continue;
                }
            };
        let (put_tx, put_rx) = oneshot::channel();
        let flush = Flush { put: put_rx, ..flush };
        let (entries, logs) =
            (flush.chunks.iter().map(|c| c.entries.len()).sum::<usize>(), flush.chunks.len());
        // Hand over before the PUT starts, so the committer sees flushes in sequence order.
        if to_committer.send(flush).await.is_err() {
            return;
        }
        core.flushes.fetch_add(1, Ordering::Relaxed);
        let observer = core.observer.get().cloned();
        if let Some(o) = &observer {
            o.flushed(object.len(), entries, logs);
        }
        let objects = core.objects.clone();
        let deadline = core.cfg.flush_deadline;
        tokio::spawn(async move {
            let path = objstore::keys::wal_object(seq);
            let put = objstore::put_create_only(objects.as_ref(), &path, object);
            let started = Instant::now();
            let r = match tokio::time::timeout(deadline, put).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(LogError::unavailable(format!("WAL object {path}: {e}"))),
                Err(_) => Err(LogError::unavailable(format!(
                    "WAL object {path}: no answer within {deadline:?}"
                ))),
            };
            if let Some(o) = observer {
                o.put(started.elapsed(), r.is_ok());
            }
            let _ = put_tx.send(r);
        });
    }
}

/// Fails appends that never made it into a stamped flush, poisoning their logs first: their
/// later appends, buffered or stamped since, must not commit ahead of them (ARCHITECTURE §3.4).
fn fail_unstamped(core: &Core, entries: Vec<Pending>, e: &LogError) {
    for p in &entries {
        core.poison(p.log, e);
    }
    for p in entries {
        p.answer(Err(e.clone()));
    }
}

/// Takes the buffer for one flush. A flush holds one chunk per log, so when one log has
/// appends in two slots (this writer owns both), the later slot's appends wait for the next
/// flush, in their order.
fn take_buffer(core: &Core) -> Buffer {
    let mut b = lock(&core.buffer);
    let mut taken = std::mem::take(&mut *b);
    let mut slot_of: HashMap<LogId, String> = HashMap::new();
    let (now, later): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut taken.entries)
        .into_iter()
        .partition(|p| *slot_of.entry(p.log).or_insert_with(|| p.slot.clone()) == p.slot);
    if !later.is_empty() {
        // Back into the (just emptied) buffer, already due: the next flush takes them.
        let later_bytes: usize = later.iter().map(|p| p.payload.len()).sum();
        taken.bytes -= later_bytes;
        *b = Buffer { entries: later, bytes: later_bytes, since: taken.since };
    }
    taken.entries = now;
    taken
}

type BuildFailure = (LogError, Vec<Pending>);

/// Lays the buffered entries (taken from the buffer at `began`) out as one WAL object: one
/// chunk per log, entries in append order.
fn build_flush(
    seq: u64,
    incarnation: i64,
    entries: Vec<Pending>,
    began: Instant,
    deadline: Duration,
) -> Result<(Flush, Bytes), BuildFailure> {
    let mut by_log: Vec<(LogId, Vec<Pending>)> = Vec::new();
    // One slot per log per flush (take_buffer).
    let mut index: HashMap<LogId, usize> = HashMap::new();
    for p in entries {
        let i = *index.entry(p.log).or_insert_with(|| {
            by_log.push((p.log, Vec::new()));
            by_log.len() - 1
        });
        by_log[i].1.push(p);
    }
    let n_entries: usize = by_log.iter().map(|(_, ps)| ps.len()).sum();
    let payloads: usize =
        by_log.iter().flat_map(|(_, ps)| ps.iter().map(|p| p.payload.len())).sum();
    // Entries, their headers, and the footer (about 52 bytes a chunk and 24 an entry).
    let size = payloads + n_entries * (wal::ENTRY_HEADER_LEN + 24) + by_log.len() * 52 + 64;
    let mut b = wal::ObjectBuilder::with_capacity(wal::ObjectKind::Wal, size);
    let mut chunks = Vec::with_capacity(by_log.len());
    let mut failed: Option<LogError> = None;
    for (log, ps) in by_log {
        let slot = ps.first().map(|p| p.slot.clone()).unwrap_or_default();
        b.begin_chunk(log.0);
        let mut staged = Vec::with_capacity(ps.len());
        for p in ps {
            match b.push_entry(p.record_count, p.timestamp, &p.payload) {
                Ok(r) => {
                    let mut p = p;
                    p.payload = Bytes::new();
                    staged.push((p, r.start, r.end - r.start));
                }
                Err(e) => {
                    failed.get_or_insert(LogError::InvalidArgument(e.to_string()));
                    staged.push((p, 0, 0));
                }
            }
        }
        chunks.push(Chunk { log, slot, entries: staged });
    }
    let all = |chunks: Vec<Chunk>| {
        chunks.into_iter().flat_map(|c| c.entries.into_iter().map(|(p, _, _)| p)).collect()
    };
    if let Some(e) = failed {
        return Err((e, all(chunks)));
    }
    let object = match b.finish() {
        Ok((object, _)) => object,
        Err(e) => return Err((LogError::InvalidArgument(e.to_string()), all(chunks))),
    };
    let (_, never) = oneshot::channel();
    let flush =
        Flush { seq, incarnation, chunks, put: never, deadline: Instant::now() + deadline, began };
    Ok((flush, object))
}

async fn committer(core: Arc<Core>, mut flushes: mpsc::Receiver<Flush>) {
    while let Some(mut flush) = flushes.recv().await {
        let put = (&mut flush.put)
            .await
            .unwrap_or_else(|_| Err(LogError::Internal("WAL put task vanished".to_owned())));
        let current = core.identity.lock().await.member_revision;
        let verdict = match put {
            Err(e) => Some(e),
            Ok(()) if core.is_lost(flush.incarnation) || flush.incarnation != current => {
                Some(LogError::unavailable(INCARNATION_ENDED))
            }
            Ok(()) => None,
        };
        let chunks = std::mem::take(&mut flush.chunks);
        let oldest = chunks
            .iter()
            .flat_map(|c| c.entries.iter().map(|(p, _, _)| p.admitted))
            .min()
            .unwrap_or(u64::MAX);
        core.unpoison_before(oldest);
        let mut live = Vec::new();
        for c in chunks {
            match &verdict {
                Some(e) => {
                    // Every later append of the log admitted so far fails with it.
                    core.poison(c.log, e);
                    fail_chunk(c, e);
                }
                None => live.extend(core.cull(c)),
            }
        }
        if !live.is_empty() {
            let started = Instant::now();
            for (log, e) in commit_chunks(&core, flush.seq, flush.deadline, live).await {
                if e.code() != crate::Code::Fenced {
                    core.poison(log, &e);
                }
            }
            if let Some(o) = core.observer.get() {
                o.committed(started.elapsed(), flush.began.elapsed());
            }
        }
        // An incarnation that ended (lease lost, or a commit left without a definite answer)
        // is revoked and replaced before the next flush is resolved: nothing later commits
        // under it, and its mark goes with its lease (ARCHITECTURE §3.8-3.9).
        if core.is_lost(current) {
            reincarnate(&core).await;
        }
        core.resolved();
    }
}

fn fail_chunk(c: Chunk, e: &LogError) {
    for (p, _, _) in c.entries {
        p.answer(Err(e.clone()));
    }
}

/// Clears `reincarnating` however [`reincarnate`] ends.
struct Reincarnated<'a>(&'a Core);

impl Drop for Reincarnated<'_> {
    fn drop(&mut self) {
        self.0.reincarnating.store(false, Ordering::SeqCst);
    }
}

/// Drops the incarnation and registers a new one (ARCHITECTURE §3.10).
/// Both the committer (after failing a lost incarnation's flush) and the keep-alive task (so an
/// idle writer comes back too) call this; the first one re-registers.
async fn reincarnate(core: &Arc<Core>) {
    let mut id = core.identity.lock().await;
    if !core.is_lost(id.member_revision) {
        return;
    }
    core.reincarnating.store(true, Ordering::SeqCst);
    let _done = Reincarnated(core);
    let _ = core.meta.lease_revoke(id.lease).await;
    lock(&core.served).clear();
    loop {
        match register(core.meta.as_ref(), &core.keys, &core.cfg).await {
            Ok(new) => {
                *id = new;
                tracing::info!(
                    member_revision = id.member_revision,
                    "writer registered a new incarnation"
                );
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "re-registration failed; retrying");
                if core.closing.load(Ordering::SeqCst) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// One log's part of a commit attempt, computed from the head as last read.
struct Plan {
    log: LogId,
    head_revision: i64,
    new_head: LogHead,
    pages: Vec<(u64, IndexPage)>,
    /// Per entry of the chunk: its header if it commits, or the offset it failed to match.
    outcome: Vec<Result<LogEntryHeader, u64>>,
    first_locator: Option<Locator>,
}

/// Builds the commit of `entries` on top of `head` (ARCHITECTURE §3.3, §3.7).
fn plan(
    log: LogId,
    head: &LogHead,
    head_revision: i64,
    seq: u64,
    entries: &[(Pending, u64, u64)],
) -> Plan {
    let mut h = head.clone();
    let mut runs: Vec<Locator> = Vec::new();
    let mut outcome = Vec::with_capacity(entries.len());
    let mut open_run = false;
    for (p, byte_start, byte_len) in entries {
        if let Some(expected) = p.expected_offset
            && expected != h.next_offset
        {
            outcome.push(Err(h.next_offset));
            open_run = false;
            continue;
        }
        let size = p.size;
        let header = LogEntryHeader {
            offset: h.next_offset,
            record_count: p.record_count,
            timestamp: p.timestamp,
            entry_size: size,
            cumulative_size: h.cumulative_bytes + size,
        };
        h.max_timestamp = h.max_timestamp.max(p.timestamp);
        if !open_run {
            runs.push(Locator {
                first_offset: h.next_offset,
                wal_seq: seq,
                byte_start: *byte_start,
                cumulative_before: h.cumulative_bytes,
                ..Default::default()
            });
            open_run = true;
        }
        if let Some(run) = runs.last_mut() {
            run.byte_len += byte_len;
            run.entry_count += 1;
            run.record_count += u64::from(p.record_count);
            run.payload_bytes += size;
            run.max_timestamp = h.max_timestamp;
        }
        h.next_offset += u64::from(p.record_count);
        h.cumulative_bytes += size;
        h.entry_count += 1;
        h.last_entry = Some(EntryDescriptor {
            offset: header.offset,
            record_count: header.record_count,
            timestamp: header.timestamp,
            entry_size: header.entry_size,
            cumulative_size: header.cumulative_size,
        });
        outcome.push(Ok(header));
    }
    let first_locator = runs.first().cloned();
    h.recent.extend(runs);
    let mut pages = Vec::new();
    while h.recent.len() > RECENT_MAX {
        let page: Vec<Locator> = h.recent.drain(..RECENT_MAX).collect();
        pages.push((page[0].first_offset, IndexPage { locators: page }));
    }
    Plan { log, head_revision, new_head: h, pages, outcome, first_locator }
}

/// Why a log's chunk cannot commit under this writer now, if it cannot.
fn blocked(log: LogId, head: &LogHead, zone: &str, epoch: i64, me: &Owner) -> Option<LogError> {
    match head.log_state() {
        LogState::Deleted => return Some(LogError::NotFound(log)),
        LogState::Fenced => {
            return Some(LogError::Fenced {
                log,
                held: epoch,
                current: head.epoch,
                whole_log: true,
            });
        }
        LogState::Normal => {}
    }
    match head.slot(zone) {
        Some(s) if s.epoch == epoch && s.owner.as_ref() == Some(me) => None,
        Some(s) => Some(LogError::Fenced { log, held: epoch, current: s.epoch, whole_log: false }),
        None => Some(LogError::Fenced { log, held: epoch, current: 0, whole_log: false }),
    }
}

/// Takes a slot of a log: fences only that slot (ARCHITECTURE §3, "Owner selection and
/// zones"). A stream's log is taken only if the owner function over the live writers, read
/// linearizably, picks this writer. The epoch is the head's mod_revision the takeover compared
/// against: unique per log and increasing, as every takeover or fence moves the head.
async fn take_slot(core: &Core, log: LogId, slot: &str, me: &Owner) -> Result<Served, LogError> {
    for _ in 0..100 {
        let snap = core.reader.snapshot(log).await?;
        if let Some(route) = &snap.head.route {
            let (members, _) =
                crate::membership::live_members(core.meta.as_ref(), &core.cfg.cluster, "writer")
                    .await?;
            core.check_owner(log, route, slot, &members)?;
        }
        // A log fenced by a member that is gone (matched by incarnation) is taken over, so a
        // dead fencer never wedges it (ARCHITECTURE §3, "Fencing").
        let mut fencer_gone: Option<Compare> = None;
        match snap.head.log_state() {
            LogState::Deleted => return Err(LogError::NotFound(log)),
            LogState::Fenced => {
                let fenced =
                    || LogError::Fenced { log, held: 0, current: snap.head.epoch, whole_log: true };
                let Some(by) = &snap.head.fenced_by else { return Err(fenced()) };
                let key = core.keys.member("writer", &by.writer_id);
                let now = core.meta.get(&key).await?.map_or(0, |kv| kv.create_revision);
                if now == by.member_revision {
                    return Err(fenced());
                }
                fencer_gone = Some(Compare::create_revision(key, CompareOp::Equal, now));
            }
            LogState::Normal => {}
        }
        if fencer_gone.is_none()
            && let Some(s) = snap.head.slot(slot)
            && s.owner.as_ref() == Some(me)
        {
            // Our own takeover, whose answer was lost: the epoch is ours. (Not on a fenced
            // log: the fence ended every slot, ours included.)
            return Ok(Served {
                epoch: s.epoch,
                head: snap.head.clone(),
                head_revision: snap.head_revision,
            });
        }
        let epoch = snap.head_revision;
        let mut head = snap.head.clone();
        if fencer_gone.is_some() {
            head.state = LogState::Normal as i32;
            head.fenced_by = None;
            head.slots.clear();
        }
        head.slots.retain(|s| s.zone != slot);
        head.slots.push(Slot { zone: slot.to_owned(), epoch, owner: Some(me.clone()) });
        let member = core.keys.member("writer", &core.cfg.writer_id);
        let compares = [
            Compare::mod_revision(core.keys.head(log), CompareOp::Equal, snap.head_revision),
            Compare::create_revision(member, CompareOp::Equal, me.member_revision),
        ];
        let txn = Txn::new()
            .when(compares.into_iter().chain(fencer_gone))
            .and_then([TxnOp::put(core.keys.head(log), head.encode_to_vec())]);
        match core.meta.txn(txn).await {
            Ok(resp) if resp.succeeded => {
                return Ok(Served { epoch, head, head_revision: resp.revision });
            }
            Ok(_) => {}
            // Re-read: the head tells whether the takeover applied.
            Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(e) => return Err(e.into()),
        }
    }
    Err(LogError::unavailable(format!("could not take a slot of log {log}: too much contention")))
}

/// Commits one flush's chunks, each log in its own order; returns the logs whose chunk failed
/// definitely for a reason other than a fence.
async fn commit_chunks(
    core: &Arc<Core>,
    seq: u64,
    deadline: Instant,
    mut chunks: Vec<Chunk>,
) -> Vec<(LogId, LogError)> {
    let member_revision = core.identity.lock().await.member_revision;
    let me = core.owner(member_revision);
    let mut failures = Vec::new();
    let fail = |c: Chunk, e: LogError, failures: &mut Vec<(LogId, LogError)>| {
        match e.code() {
            crate::Code::NotFound => core.forget(c.log),
            crate::Code::Fenced | crate::Code::NotOwner => core.forget_slot(c.log, &c.slot),
            _ => {}
        }
        failures.push((c.log, e.clone()));
        fail_chunk(c, &e);
    };
    // Serve each log: take its slot on first use.
    let mut ready = Vec::new();
    for c in chunks.drain(..) {
        let served = lock(&core.served).get(&(c.log, c.slot.clone())).cloned();
        match served {
            Some(s) => ready.push((c, s)),
            None => match take_slot(core, c.log, &c.slot, &me).await {
                Ok(s) => {
                    lock(&core.served).insert((c.log, c.slot.clone()), s.clone());
                    ready.push((c, s));
                }
                Err(e) => fail(c, e, &mut failures),
            },
        }
    }
    let mut pending = ready;
    while !pending.is_empty() {
        if Instant::now() >= deadline {
            for (c, _) in pending {
                fail(
                    c,
                    LogError::unavailable("flush deadline passed before its commit"),
                    &mut failures,
                );
            }
            core.lose(member_revision);
            break;
        }
        // Check fences, then plan on the heads as last seen.
        let mut plans = Vec::new();
        for (c, s) in pending.drain(..) {
            match blocked(c.log, &s.head, &c.slot, s.epoch, &me) {
                Some(e) => fail(c, e, &mut failures),
                None => {
                    let p = plan(c.log, &s.head, s.head_revision, seq, &c.entries);
                    plans.push((c, s, p));
                }
            }
        }
        // Group logs into transactions within etcd's limits: one compare per log plus the
        // member compare; the head, its spilled pages and the low-water mark as puts.
        let mut groups: Vec<Vec<(Chunk, Served, Plan)>> = Vec::new();
        let (mut compares, mut puts) = (0, 0);
        for item in plans {
            let need = 1 + item.2.pages.len();
            if groups.is_empty()
                || compares + 1 > metadata::MAX_TXN_OPS
                || puts + need > metadata::MAX_TXN_OPS
            {
                groups.push(Vec::new());
                compares = 1;
                puts = 1;
            }
            compares += 1;
            puts += need;
            if let Some(g) = groups.last_mut() {
                g.push(item);
            }
        }
        for group in groups {
            match commit_group(core, seq, deadline, member_revision, &group).await {
                Ok(GroupOutcome::Committed { revision }) => {
                    for (c, s, p) in group {
                        let served = Served {
                            epoch: s.epoch,
                            head: p.new_head.clone(),
                            head_revision: revision,
                        };
                        lock(&core.served).insert((c.log, c.slot.clone()), served);
                        acknowledge(c, p);
                    }
                }
                Ok(GroupOutcome::CommittedEarlier { heads }) => {
                    for (c, s, p) in group {
                        match heads.get(&c.log) {
                            Some((head, rev)) => {
                                let served = Served {
                                    epoch: s.epoch,
                                    head: head.clone(),
                                    head_revision: *rev,
                                };
                                lock(&core.served).insert((c.log, c.slot.clone()), served);
                            }
                            None => core.forget(c.log),
                        }
                        acknowledge(c, p);
                    }
                }
                Ok(GroupOutcome::Moved { heads }) => {
                    // Nothing committed: re-base on the heads as they are now, and try again.
                    for (c, s, _) in group {
                        let Some((head, rev)) = heads.get(&c.log) else {
                            let log = c.log;
                            fail(c, LogError::NotFound(log), &mut failures);
                            continue;
                        };
                        let s = Served { epoch: s.epoch, head: head.clone(), head_revision: *rev };
                        lock(&core.served).insert((c.log, c.slot.clone()), s.clone());
                        pending.push((c, s));
                    }
                }
                Ok(GroupOutcome::IncarnationEnded) => {
                    core.lose(member_revision);
                    for (c, _, _) in group {
                        fail(c, LogError::unavailable(INCARNATION_ENDED), &mut failures);
                    }
                }
                Err(e) => {
                    // No definite answer: the transaction may still land. The incarnation ends
                    // before anything later commits, and no mark above this sequence is put
                    // (ARCHITECTURE §3.8).
                    if e.outcome_unknown() {
                        core.lose(member_revision);
                    }
                    for (c, _, _) in group {
                        fail(c, e.clone(), &mut failures);
                    }
                }
            }
        }
    }
    failures
}

const INCARNATION_ENDED: &str =
    "writer incarnation ended (lease lost); nothing of this flush committed";

fn acknowledge(c: Chunk, p: Plan) {
    for ((pending, _, _), outcome) in c.entries.into_iter().zip(p.outcome) {
        match outcome {
            Ok(h) => pending.answer(Ok(h)),
            Err(actual) => {
                let expected = pending.expected_offset.unwrap_or(actual);
                let log = pending.log;
                pending.answer(Err(LogError::OffsetMismatch { log, expected, actual }));
            }
        }
    }
}

type MovedHeads = HashMap<LogId, (LogHead, i64)>;

enum GroupOutcome {
    /// Committed at this revision.
    Committed { revision: i64 },
    /// An attempt whose answer was lost had committed; these are the heads now.
    CommittedEarlier { heads: MovedHeads },
    /// A compare failed and nothing committed; these are the heads now.
    Moved { heads: MovedHeads },
    /// The member compare failed: this incarnation ended, nothing committed.
    IncarnationEnded,
}

/// Sends one commit transaction; re-sends it identically while its outcome is unknown (once
/// the head moved past the compared revision, an earlier attempt can no longer apply, so at
/// most one attempt commits). `Err`: a definite failure, or an outcome still unknown at the
/// deadline.
async fn commit_group(
    core: &Core,
    seq: u64,
    deadline: Instant,
    member_revision: i64,
    group: &[(Chunk, Served, Plan)],
) -> Result<GroupOutcome, LogError> {
    let member = core.keys.member("writer", &core.cfg.writer_id);
    let lease = core.identity.lock().await.lease;
    let mut compares =
        vec![Compare::create_revision(member.clone(), CompareOp::Equal, member_revision)];
    let mut puts = vec![TxnOp::put_with_lease(
        core.keys.low_water(&core.cfg.writer_id),
        seq.to_string(),
        lease,
    )];
    let mut gets = vec![TxnOp::get(RangeRequest::key(member.clone()))];
    for (_, _, p) in group {
        compares.push(Compare::mod_revision(
            core.keys.head(p.log),
            CompareOp::Equal,
            p.head_revision,
        ));
        puts.push(TxnOp::put(core.keys.head(p.log), p.new_head.encode_to_vec()));
        for (first, page) in &p.pages {
            puts.push(TxnOp::put(core.keys.index_page(p.log, *first), page.encode_to_vec()));
        }
        gets.push(TxnOp::get(RangeRequest::key(core.keys.head(p.log))));
    }
    let txn = Txn::new().when(compares).and_then(puts).or_else(gets);
    let mut ambiguous = false;
    let resp = loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(remaining, core.meta.txn(txn.clone())).await {
            Ok(Ok(resp)) => break resp,
            // The lease is gone: this incarnation is over, and this attempt applied nothing
            // (an earlier one whose answer was lost may have).
            Ok(Err(MetaError::LeaseNotFound(_))) => {
                if ambiguous {
                    return Err(LogError::unknown(format!(
                        "commit of WAL object {seq}: lease lost after an unanswered attempt"
                    )));
                }
                return Ok(GroupOutcome::IncarnationEnded);
            }
            Ok(Err(e)) if !e.outcome_known() || e.is_retryable() => {
                ambiguous |= !e.outcome_known();
                tracing::warn!(seq, error = %e, "commit not answered; re-sending the identical transaction");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(Err(e)) => return Err(e.into()),
            // The attempt cut off by the deadline was sent: it may still apply.
            Err(_) => {
                return Err(LogError::unknown(format!(
                    "commit of WAL object {seq}: no definite answer before the deadline"
                )));
            }
        }
    };
    if resp.succeeded {
        return Ok(GroupOutcome::Committed { revision: resp.revision });
    }
    let mut results = resp.results.into_iter();
    let member_ok = matches!(results.next(), Some(OpResult::Get(g)) if g.kvs.first().map(|kv| kv.create_revision) == Some(member_revision));
    let mut heads = HashMap::new();
    for ((_, _, p), r) in group.iter().zip(results) {
        if let OpResult::Get(g) = r
            && let Some(kv) = g.kvs.first()
        {
            heads.insert(p.log, (decode::<LogHead>("log head", &kv.value)?, kv.mod_revision));
        }
    }
    if ambiguous {
        // An earlier attempt may have applied (§3.8): it did iff our first locator sits at the
        // offset it proposed. The group is one transaction, so one log answers for all.
        if let Some((_, _, p)) = group.iter().find(|(_, _, p)| p.first_locator.is_some())
            && let Some(loc) = &p.first_locator
            && committed_at(core, p.log, loc).await?
        {
            return Ok(GroupOutcome::CommittedEarlier { heads });
        }
    }
    // Checked after the locator: an earlier attempt may have applied while the incarnation
    // lived (its answer lost), and must then be acknowledged, not failed.
    if !member_ok {
        return Ok(GroupOutcome::IncarnationEnded);
    }
    Ok(GroupOutcome::Moved { heads })
}

/// Whether the locator `loc` (of WAL sequence `loc.wal_seq`) is committed at its offset,
/// read linearizably.
async fn committed_at(core: &Core, log: LogId, loc: &Locator) -> Result<bool, LogError> {
    let snap = core.reader.snapshot(log).await?;
    if snap.head.next_offset <= loc.first_offset {
        return Ok(false);
    }
    let found = core.reader.find_locator(&snap, loc.first_offset, false).await?;
    Ok(found.is_some_and(|l| {
        l.first_offset == loc.first_offset
            && l.wal_seq == loc.wal_seq
            && l.byte_start == loc.byte_start
    }))
}
