//! [`EmbeddedStore`]: a durable, single-process [`MetadataStore`] for `lakelog standalone`.
//!
//! Storage library: redb. It is pure Rust (no C toolchain, quick to build on our 2 cores),
//! ACID with copy-on-write B-trees, commits with fsync by default (`Durability::Immediate`:
//! a returned commit survives kill -9 and power loss), takes a file lock so two processes
//! cannot open one database, and is maintained with a stable file format. sled is unmaintained
//! and rocksdb means a long C++ build; SQLite would need a C library for what is a B-tree.
//!
//! Model: etcd's. A revision counter advances once per write transaction. Tables:
//! - `kv`: key → current record (value, create/mod revision, version, lease);
//! - `history`: (key, mod_revision) → the record written then, or a tombstone; serves reads
//!   at past revisions until [`compact`](MetadataStore::compact) discards what no read at or
//!   after the compaction revision can see;
//! - `events`: revision → that revision's changes, replayed to watches that start in the past;
//! - `leases`, `lease_keys`: lease TTLs and the keys attached to each.
//!
//! Leases expire on this process's monotonic clock (tokio's): after a restart every lease gets
//! its full TTL again, as etcd does after a leader change. All writes, and watch registration,
//! run under one mutex, so watchers receive events in revision order with no gap.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use prost::Message;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use tokio::time::Instant;

use crate::store::{MetadataStore, WatchStream};
use crate::types::*;
use crate::watchers::{self, Watcher};

const META: TableDefinition<'_, &str, i64> = TableDefinition::new("meta");
const KV: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("kv");
const HISTORY: TableDefinition<'_, (&[u8], i64), &[u8]> = TableDefinition::new("history");
const EVENTS: TableDefinition<'_, i64, &[u8]> = TableDefinition::new("events");
const LEASES: TableDefinition<'_, i64, i64> = TableDefinition::new("leases");
const LEASE_KEYS: TableDefinition<'_, (i64, &[u8]), ()> = TableDefinition::new("lease_keys");

const REVISION: &str = "revision";
const COMPACT_REVISION: &str = "compact_revision";
const NEXT_LEASE: &str = "next_lease";

/// How often expired leases are looked for.
const LEASE_TICK: Duration = Duration::from_millis(100);
/// Watch batches a slow watcher may have queued before it is cut off (bounded memory).

#[derive(Clone, PartialEq, prost::Message)]
struct Record {
    #[prost(bytes = "vec", tag = "1")]
    value: Vec<u8>,
    #[prost(int64, tag = "2")]
    create_revision: i64,
    #[prost(int64, tag = "3")]
    mod_revision: i64,
    #[prost(int64, tag = "4")]
    version: i64,
    #[prost(int64, tag = "5")]
    lease: i64,
    #[prost(bool, tag = "6")]
    tombstone: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
struct EventRecord {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(message, optional, tag = "2")]
    record: Option<Record>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct EventBatch {
    #[prost(message, repeated, tag = "1")]
    events: Vec<EventRecord>,
}

impl Record {
    fn into_kv(self, key: Vec<u8>, keys_only: bool) -> KeyValue {
        KeyValue {
            key,
            value: if keys_only { Vec::new() } else { self.value },
            create_revision: self.create_revision,
            mod_revision: self.mod_revision,
            version: self.version,
            lease: self.lease,
        }
    }
}

fn decode<M: Message + Default>(bytes: &[u8]) -> Result<M, MetaError> {
    M::decode(bytes).map_err(|e| MetaError::Internal(format!("corrupt record: {e}")))
}

fn internal(e: impl std::fmt::Display) -> MetaError {
    MetaError::Internal(e.to_string())
}

struct Lease {
    ttl: Duration,
    deadline: Instant,
}

struct Inner {
    db: Database,
    path: PathBuf,
    /// Held across every write transaction and while registering a watch.
    watchers: Mutex<Vec<Watcher>>,
    leases: Mutex<HashMap<LeaseId, Lease>>,
}

/// The embedded, durable metadata store. Cheap to clone; the database closes when the last
/// clone is dropped.
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore").field("path", &self.inner.path).finish()
    }
}

impl EmbeddedStore {
    /// Opens (or creates) the database at `path`. Must run inside a tokio runtime: lease
    /// expiry runs as a task. Fails if another process has the database open.
    pub async fn open(path: &Path) -> Result<Self, MetaError> {
        let path = path.to_owned();
        let inner =
            tokio::task::spawn_blocking(move || Inner::open(path)).await.map_err(internal)??;
        let inner = Arc::new(inner);
        tokio::spawn(expire_leases(Arc::downgrade(&inner)));
        Ok(EmbeddedStore { inner })
    }

    async fn blocking<T, F>(&self, f: F) -> Result<T, MetaError>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T, MetaError> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner)).await.map_err(internal)?
    }
}

async fn expire_leases(inner: Weak<Inner>) {
    loop {
        tokio::time::sleep(LEASE_TICK).await;
        let Some(inner) = inner.upgrade() else { return };
        let now = Instant::now();
        let expired: Vec<LeaseId> = inner
            .leases
            .lock()
            .iter()
            .filter(|(_, l)| l.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            let i = inner.clone();
            match tokio::task::spawn_blocking(move || i.revoke(id, Some(now))).await {
                Ok(Ok(())) | Ok(Err(MetaError::LeaseNotFound(_))) => {}
                Ok(Err(e)) => tracing::warn!(lease = id, error = %e, "lease expiry failed"),
                Err(e) => tracing::warn!(lease = id, error = %e, "lease expiry task failed"),
            }
        }
    }
}

/// The embedded store's page cache.
pub const EMBEDDED_CACHE_BYTES: usize = 16 << 20;

impl Inner {
    fn open(path: PathBuf) -> Result<Inner, MetaError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| MetaError::Internal(format!("create {}: {e}", dir.display())))?;
        }
        // redb caches up to 1 GiB by default; the embedded store's data (heads, index pages,
        // cursors of one standalone) is small, and the cache was most of standalone's memory.
        let db = redb::Builder::new()
            .set_cache_size(EMBEDDED_CACHE_BYTES)
            .create(&path)
            .map_err(|e| MetaError::Internal(format!("open {}: {e}", path.display())))?;
        let wtx = db.begin_write().map_err(internal)?;
        let mut leases = HashMap::new();
        {
            let mut meta = wtx.open_table(META).map_err(internal)?;
            if meta.get(REVISION).map_err(internal)?.is_none() {
                meta.insert(REVISION, 1).map_err(internal)?;
                meta.insert(COMPACT_REVISION, 0).map_err(internal)?;
                meta.insert(NEXT_LEASE, 1).map_err(internal)?;
            }
            wtx.open_table(KV).map_err(internal)?;
            wtx.open_table(HISTORY).map_err(internal)?;
            wtx.open_table(EVENTS).map_err(internal)?;
            wtx.open_table(LEASE_KEYS).map_err(internal)?;
            let table = wtx.open_table(LEASES).map_err(internal)?;
            let now = Instant::now();
            for entry in table.iter().map_err(internal)? {
                let (id, ttl) = entry.map_err(internal)?;
                let ttl = Duration::from_secs(ttl.value().unsigned_abs());
                leases.insert(id.value(), Lease { ttl, deadline: now + ttl });
            }
        }
        wtx.commit().map_err(internal)?;
        Ok(Inner { db, path, watchers: Mutex::new(Vec::new()), leases: Mutex::new(leases) })
    }

    fn range(&self, req: &RangeRequest) -> Result<RangeResponse, MetaError> {
        let rtx = self.db.begin_read().map_err(internal)?;
        let meta = rtx.open_table(META).map_err(internal)?;
        let current = meta_get(&meta, REVISION)?;
        let compacted = meta_get(&meta, COMPACT_REVISION)?;
        let kv = rtx.open_table(KV).map_err(internal)?;
        let history = rtx.open_table(HISTORY).map_err(internal)?;
        read_range(&kv, &history, req, current, compacted)
    }

    fn txn(&self, txn: &Txn) -> Result<TxnResponse, MetaError> {
        let mut watchers = self.watchers.lock();
        let wtx = self.db.begin_write().map_err(internal)?;
        let (current, compacted) = {
            let meta = wtx.open_table(META).map_err(internal)?;
            (meta_get(&meta, REVISION)?, meta_get(&meta, COMPACT_REVISION)?)
        };
        let rev = current + 1;
        let mut results = Vec::new();
        let mut events = Vec::new();
        let succeeded;
        {
            let mut kv = wtx.open_table(KV).map_err(internal)?;
            let mut history = wtx.open_table(HISTORY).map_err(internal)?;
            let mut lease_keys = wtx.open_table(LEASE_KEYS).map_err(internal)?;
            let leases = wtx.open_table(LEASES).map_err(internal)?;

            succeeded = txn
                .compares
                .iter()
                .try_fold(true, |all, c| Ok::<_, MetaError>(all && compare_holds(&kv, c)?))?;
            let ops = if succeeded { &txn.success } else { &txn.failure };
            for op in ops {
                if let TxnOp::Put { lease, .. } = op
                    && *lease != 0
                    && leases.get(*lease).map_err(internal)?.is_none()
                {
                    return Err(MetaError::LeaseNotFound(*lease));
                }
            }
            for op in ops {
                match op {
                    TxnOp::Get(req) => {
                        // Sees this txn's earlier writes, as in etcd.
                        let visible = if events.is_empty() { current } else { rev };
                        results.push(OpResult::Get(read_range(
                            &kv, &history, req, visible, compacted,
                        )?));
                    }
                    TxnOp::Put { key, value, lease } => {
                        let old = match kv.get(key.as_slice()).map_err(internal)? {
                            Some(v) => Some(decode::<Record>(v.value())?),
                            None => None,
                        };
                        let record = Record {
                            value: value.clone(),
                            create_revision: old.as_ref().map_or(rev, |o| o.create_revision),
                            mod_revision: rev,
                            version: old.as_ref().map_or(1, |o| o.version + 1),
                            lease: *lease,
                            tombstone: false,
                        };
                        if let Some(old) = &old
                            && old.lease != 0
                        {
                            lease_keys.remove((old.lease, key.as_slice())).map_err(internal)?;
                        }
                        if *lease != 0 {
                            lease_keys.insert((*lease, key.as_slice()), ()).map_err(internal)?;
                        }
                        let bytes = record.encode_to_vec();
                        kv.insert(key.as_slice(), bytes.as_slice()).map_err(internal)?;
                        history
                            .insert((key.as_slice(), rev), bytes.as_slice())
                            .map_err(internal)?;
                        events.push(EventRecord { key: key.clone(), record: Some(record) });
                        results.push(OpResult::Put);
                    }
                    TxnOp::Delete(range) => {
                        let deleted = delete_range(
                            &mut kv,
                            &mut history,
                            &mut lease_keys,
                            range,
                            rev,
                            &mut events,
                        )?;
                        results.push(OpResult::Delete { deleted });
                    }
                }
            }
        }
        let revision = if events.is_empty() {
            wtx.abort().map_err(internal)?;
            current
        } else {
            {
                let mut meta = wtx.open_table(META).map_err(internal)?;
                meta.insert(REVISION, rev).map_err(internal)?;
                let mut ev = wtx.open_table(EVENTS).map_err(internal)?;
                let batch = EventBatch { events: events.clone() }.encode_to_vec();
                ev.insert(rev, batch.as_slice()).map_err(internal)?;
            }
            wtx.commit().map_err(internal)?;
            publish(&mut watchers, &events);
            rev
        };
        for r in &mut results {
            if let OpResult::Get(g) = r {
                g.revision = revision;
            }
        }
        Ok(TxnResponse { succeeded, revision, results })
    }

    fn grant(&self, ttl: Duration) -> Result<LeaseId, MetaError> {
        let _writer = self.watchers.lock();
        let secs = ttl_secs(ttl);
        let wtx = self.db.begin_write().map_err(internal)?;
        let id = {
            let mut meta = wtx.open_table(META).map_err(internal)?;
            let id = meta_get(&meta, NEXT_LEASE)?;
            meta.insert(NEXT_LEASE, id + 1).map_err(internal)?;
            wtx.open_table(LEASES).map_err(internal)?.insert(id, secs).map_err(internal)?;
            id
        };
        wtx.commit().map_err(internal)?;
        let ttl = Duration::from_secs(secs.unsigned_abs());
        self.leases.lock().insert(id, Lease { ttl, deadline: Instant::now() + ttl });
        Ok(id)
    }

    fn keep_alive(&self, id: LeaseId) -> Result<Duration, MetaError> {
        let mut leases = self.leases.lock();
        let lease = leases.get_mut(&id).ok_or(MetaError::LeaseNotFound(id))?;
        let now = Instant::now();
        if lease.deadline <= now {
            return Err(MetaError::LeaseNotFound(id));
        }
        lease.deadline = now + lease.ttl;
        Ok(lease.ttl)
    }

    /// Revokes a lease; with `expired_at`, only if it is still expired then (a keep-alive may
    /// have renewed it since the expiry scan).
    fn revoke(&self, id: LeaseId, expired_at: Option<Instant>) -> Result<(), MetaError> {
        let mut watchers = self.watchers.lock();
        {
            let leases = self.leases.lock();
            match (leases.get(&id), expired_at) {
                (None, _) => return Err(MetaError::LeaseNotFound(id)),
                (Some(l), Some(at)) if l.deadline > at => return Ok(()),
                _ => {}
            }
        }
        let wtx = self.db.begin_write().map_err(internal)?;
        let mut events = Vec::new();
        let rev;
        {
            let mut meta = wtx.open_table(META).map_err(internal)?;
            rev = meta_get(&meta, REVISION)? + 1;
            let mut kv = wtx.open_table(KV).map_err(internal)?;
            let mut history = wtx.open_table(HISTORY).map_err(internal)?;
            let mut lease_keys = wtx.open_table(LEASE_KEYS).map_err(internal)?;
            let mut keys = Vec::new();
            for entry in lease_keys.range((id, &[][..])..(id + 1, &[][..])).map_err(internal)? {
                let (k, _) = entry.map_err(internal)?;
                keys.push(k.value().1.to_vec());
            }
            for key in keys {
                delete_range(
                    &mut kv,
                    &mut history,
                    &mut lease_keys,
                    &KeyRange::key(key),
                    rev,
                    &mut events,
                )?;
            }
            wtx.open_table(LEASES).map_err(internal)?.remove(id).map_err(internal)?;
            if !events.is_empty() {
                meta.insert(REVISION, rev).map_err(internal)?;
                let batch = EventBatch { events: events.clone() }.encode_to_vec();
                wtx.open_table(EVENTS)
                    .map_err(internal)?
                    .insert(rev, batch.as_slice())
                    .map_err(internal)?;
            }
        }
        wtx.commit().map_err(internal)?;
        self.leases.lock().remove(&id);
        publish(&mut watchers, &events);
        Ok(())
    }

    /// Registers a watcher; its stream replays the past events first.
    fn watch(&self, req: &WatchRequest) -> Result<WatchStream, MetaError> {
        let mut watchers = self.watchers.lock();
        let rtx = self.db.begin_read().map_err(internal)?;
        let meta = rtx.open_table(META).map_err(internal)?;
        let current = meta_get(&meta, REVISION)?;
        let compacted = meta_get(&meta, COMPACT_REVISION)?;
        if req.start_revision != 0 && req.start_revision < compacted {
            return Err(MetaError::Compacted {
                requested: req.start_revision,
                compact_revision: compacted,
            });
        }
        let mut past = Vec::new();
        if req.start_revision != 0 && req.start_revision <= current {
            let events = rtx.open_table(EVENTS).map_err(internal)?;
            for entry in events.range(req.start_revision..=current).map_err(internal)? {
                let (_, batch) = entry.map_err(internal)?;
                let batch: EventBatch = decode(batch.value())?;
                let matching = to_watch_events(&batch.events, &req.range);
                if !matching.is_empty() {
                    past.push(matching);
                }
            }
        }
        let (watcher, stream) = watchers::watch(req.range.clone(), past);
        watchers.push(watcher);
        Ok(stream)
    }

    fn compact(&self, revision: Revision) -> Result<(), MetaError> {
        let _writer = self.watchers.lock();
        let wtx = self.db.begin_write().map_err(internal)?;
        {
            let mut meta = wtx.open_table(META).map_err(internal)?;
            let current = meta_get(&meta, REVISION)?;
            let compacted = meta_get(&meta, COMPACT_REVISION)?;
            if revision > current {
                return Err(MetaError::FutureRevision { requested: revision, current });
            }
            if revision <= compacted {
                return Err(MetaError::Compacted {
                    requested: revision,
                    compact_revision: compacted,
                });
            }
            // Per key, of the versions at or below `revision` only the newest can still be
            // read (at revisions ≥ `revision`), and not even that one if it is a tombstone.
            let mut history = wtx.open_table(HISTORY).map_err(internal)?;
            let mut doomed: Vec<(Vec<u8>, i64)> = Vec::new();
            let mut newest: Option<(Vec<u8>, i64, bool)> = None;
            for entry in history.iter().map_err(internal)? {
                let (k, v) = entry.map_err(internal)?;
                let (key, rev) = k.value();
                if rev > revision {
                    continue;
                }
                let tombstone = decode::<Record>(v.value())?.tombstone;
                if let Some((nk, nr, _)) = &newest
                    && nk.as_slice() == key
                {
                    doomed.push((nk.clone(), *nr));
                } else if let Some((nk, nr, true)) = newest.take() {
                    doomed.push((nk, nr));
                }
                newest = Some((key.to_vec(), rev, tombstone));
            }
            if let Some((nk, nr, true)) = newest {
                doomed.push((nk, nr));
            }
            for (key, rev) in doomed {
                history.remove((key.as_slice(), rev)).map_err(internal)?;
            }
            let mut events = wtx.open_table(EVENTS).map_err(internal)?;
            events.retain_in(..revision, |_, _| false).map_err(internal)?;
            meta.insert(COMPACT_REVISION, revision).map_err(internal)?;
        }
        wtx.commit().map_err(internal)?;
        Ok(())
    }
}

fn meta_get(meta: &impl ReadableTable<&'static str, i64>, name: &str) -> Result<i64, MetaError> {
    meta.get(name)
        .map_err(internal)?
        .map(|v| v.value())
        .ok_or_else(|| MetaError::Internal(format!("meta table lacks {name}")))
}

type KvEntry<'a> = Result<
    (redb::AccessGuard<'a, &'static [u8]>, redb::AccessGuard<'a, &'static [u8]>),
    redb::StorageError,
>;

type KvBounds<'a> = (std::ops::Bound<&'a [u8]>, std::ops::Bound<&'a [u8]>);

fn kv_bounds(range: &KeyRange) -> KvBounds<'_> {
    use std::ops::Bound::*;
    match &range.range_end {
        None => (Included(range.key.as_slice()), Included(range.key.as_slice())),
        Some(end) if end.as_slice() == [0] => (Included(range.key.as_slice()), Unbounded),
        Some(end) => (Included(range.key.as_slice()), Excluded(end.as_slice())),
    }
}

fn compare_holds(
    kv: &impl ReadableTable<&'static [u8], &'static [u8]>,
    c: &Compare,
) -> Result<bool, MetaError> {
    if c.range.range_end.is_some()
        && c.range.range_end.as_deref() <= Some(c.range.key.as_slice())
        && c.range.range_end.as_deref() != Some(&[0][..])
    {
        return Ok(c.holds_for(None));
    }
    let mut any = false;
    for entry in kv.range::<&[u8]>(kv_bounds(&c.range)).map_err(internal)? {
        let (k, v) = entry.map_err(internal)?;
        any = true;
        let kv = decode::<Record>(v.value())?.into_kv(k.value().to_vec(), false);
        if !c.holds_for(Some(&kv)) {
            return Ok(false);
        }
    }
    Ok(any || c.holds_for(None))
}

fn read_range(
    kv: &impl ReadableTable<&'static [u8], &'static [u8]>,
    history: &impl ReadableTable<(&'static [u8], i64), &'static [u8]>,
    req: &RangeRequest,
    current: Revision,
    compacted: Revision,
) -> Result<RangeResponse, MetaError> {
    let limit = usize::try_from(req.limit).unwrap_or(usize::MAX);
    let limit = if limit == 0 { usize::MAX } else { limit };
    let empty_range = matches!(&req.range.range_end, Some(end) if end.as_slice() != [0] && end.as_slice() <= req.range.key.as_slice());
    let mut matched: Vec<KeyValue> = Vec::new();
    let mut count = 0usize;
    if empty_range {
        // nothing matches
    } else if req.revision == 0 || req.revision == current {
        let iter = kv.range::<&[u8]>(kv_bounds(&req.range)).map_err(internal)?;
        let mut take = |entry: KvEntry<'_>| -> Result<(), MetaError> {
            let (k, v) = entry.map_err(internal)?;
            count += 1;
            if matched.len() < limit {
                matched
                    .push(decode::<Record>(v.value())?.into_kv(k.value().to_vec(), req.keys_only));
            }
            Ok(())
        };
        if req.reverse {
            for e in iter.rev() {
                take(e)?;
            }
        } else {
            for e in iter {
                take(e)?;
            }
        }
    } else {
        if req.revision > current {
            return Err(MetaError::FutureRevision { requested: req.revision, current });
        }
        if req.revision < compacted {
            return Err(MetaError::Compacted {
                requested: req.revision,
                compact_revision: compacted,
            });
        }
        let mut all = past_range(history, &req.range, req.revision, req.keys_only)?;
        if req.reverse {
            all.reverse();
        }
        count = all.len();
        all.truncate(limit);
        matched = all;
    }
    Ok(RangeResponse {
        more: count > matched.len(),
        count: i64::try_from(count).unwrap_or(i64::MAX),
        kvs: matched,
        revision: current,
    })
}

/// The live keys of `range` as they stood at `revision`, ascending.
fn past_range(
    history: &impl ReadableTable<(&'static [u8], i64), &'static [u8]>,
    range: &KeyRange,
    revision: Revision,
    keys_only: bool,
) -> Result<Vec<KeyValue>, MetaError> {
    use std::ops::Bound::*;
    let start = (range.key.as_slice(), i64::MIN);
    let iter = match &range.range_end {
        None => history.range((range.key.as_slice(), i64::MIN)..=(range.key.as_slice(), i64::MAX)),
        Some(end) if end.as_slice() == [0] => {
            history.range::<(&[u8], i64)>((Included(start), Unbounded))
        }
        Some(end) => history.range((range.key.as_slice(), i64::MIN)..(end.as_slice(), i64::MIN)),
    }
    .map_err(internal)?;
    let mut out = Vec::new();
    let mut best: Option<(Vec<u8>, Record)> = None;
    for entry in iter {
        let (k, v) = entry.map_err(internal)?;
        let (key, rev) = k.value();
        if best.as_ref().is_some_and(|(bk, _)| bk.as_slice() != key)
            && let Some((bk, rec)) = best.take()
            && !rec.tombstone
        {
            out.push(rec.into_kv(bk, keys_only));
        }
        if rev <= revision {
            best = Some((key.to_vec(), decode(v.value())?));
        }
    }
    if let Some((bk, rec)) = best
        && !rec.tombstone
    {
        out.push(rec.into_kv(bk, keys_only));
    }
    Ok(out)
}

fn delete_range(
    kv: &mut redb::Table<'_, &'static [u8], &'static [u8]>,
    history: &mut redb::Table<'_, (&'static [u8], i64), &'static [u8]>,
    lease_keys: &mut redb::Table<'_, (i64, &'static [u8]), ()>,
    range: &KeyRange,
    rev: Revision,
    events: &mut Vec<EventRecord>,
) -> Result<i64, MetaError> {
    let empty_range = matches!(&range.range_end, Some(end) if end.as_slice() != [0] && end.as_slice() <= range.key.as_slice());
    if empty_range {
        return Ok(0);
    }
    let mut doomed = Vec::new();
    for entry in kv.range::<&[u8]>(kv_bounds(range)).map_err(internal)? {
        let (k, v) = entry.map_err(internal)?;
        doomed.push((k.value().to_vec(), decode::<Record>(v.value())?));
    }
    for (key, old) in &doomed {
        kv.remove(key.as_slice()).map_err(internal)?;
        if old.lease != 0 {
            lease_keys.remove((old.lease, key.as_slice())).map_err(internal)?;
        }
        let tomb = Record { mod_revision: rev, tombstone: true, ..Default::default() };
        history.insert((key.as_slice(), rev), tomb.encode_to_vec().as_slice()).map_err(internal)?;
        events.push(EventRecord { key: key.clone(), record: Some(tomb) });
    }
    Ok(i64::try_from(doomed.len()).unwrap_or(i64::MAX))
}

fn to_watch_events(events: &[EventRecord], range: &KeyRange) -> Vec<WatchEvent> {
    events
        .iter()
        .filter(|e| range.contains(&e.key))
        .map(|e| {
            let rec = e.record.clone().unwrap_or_default();
            let kind = if rec.tombstone { EventKind::Delete } else { EventKind::Put };
            WatchEvent { kind, kv: rec.into_kv(e.key.clone(), false) }
        })
        .collect()
}

/// Sends one revision's events to the watchers ([`watchers::publish`]).
fn publish(watchers: &mut Vec<Watcher>, events: &[EventRecord]) {
    let all = KeyRange { key: vec![0], range_end: Some(vec![0]) };
    watchers::publish(watchers, &to_watch_events(events, &all));
}

#[async_trait]
impl MetadataStore for EmbeddedStore {
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse, MetaError> {
        req.validate()?;
        self.blocking(move |i| i.range(&req)).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, MetaError> {
        txn.validate()?;
        self.blocking(move |i| i.txn(&txn)).await
    }

    async fn lease_grant(&self, ttl: Duration) -> Result<LeaseId, MetaError> {
        self.blocking(move |i| i.grant(ttl)).await
    }

    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<Duration, MetaError> {
        self.inner.keep_alive(lease)
    }

    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), MetaError> {
        self.blocking(move |i| i.revoke(lease, None)).await
    }

    async fn watch(&self, req: WatchRequest) -> Result<WatchStream, MetaError> {
        req.range.validate()?;
        self.blocking(move |i| i.watch(&req)).await
    }

    async fn compact(&self, revision: Revision) -> Result<(), MetaError> {
        self.blocking(move |i| i.compact(revision)).await
    }
}
