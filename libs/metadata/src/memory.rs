//! [`MemoryStore`]: etcd's model in memory, for unit tests and the deterministic simulation
//! (ARCHITECTURE §7; issue 17). Nothing is durable and nothing runs off the calling task: every
//! call completes synchronously under one mutex, leases expire on tokio's clock (virtual time
//! under a paused runtime), and a watcher's events are queued in revision order as they are
//! written. Ordered maps only, so its behaviour never depends on hash order. The conformance
//! suite runs against it as against etcd and the embedded store.

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::store::{MetadataStore, WatchStream};
use crate::types::*;
use crate::watchers::{self, Watcher};

/// How often expired leases are looked for.
const LEASE_TICK: Duration = Duration::from_millis(100);

struct Lease {
    ttl: Duration,
    deadline: Instant,
    keys: BTreeSet<Vec<u8>>,
}

struct State {
    revision: Revision,
    compacted: Revision,
    kv: BTreeMap<Vec<u8>, KeyValue>,
    /// Every write of each key since the compaction: (revision, the key then; `None` deleted).
    history: BTreeMap<Vec<u8>, Vec<(Revision, Option<KeyValue>)>>,
    /// Each write revision's events, for watches that start in the past.
    events: BTreeMap<Revision, Vec<WatchEvent>>,
    leases: BTreeMap<LeaseId, Lease>,
    next_lease: LeaseId,
    watchers: Vec<Watcher>,
}

/// An in-memory [`MetadataStore`] with etcd's semantics.
#[derive(Clone)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").field("revision", &self.state.lock().revision).finish()
    }
}

impl MemoryStore {
    /// An empty store at revision 1. Must be called within a tokio runtime: a task expires
    /// leases every 100 ms (of tokio's clock) until the store is dropped. (No `Default`: it
    /// needs a runtime.)
    #[allow(clippy::new_without_default)]
    pub fn new() -> MemoryStore {
        let state = Arc::new(Mutex::new(State {
            revision: 1,
            compacted: 0,
            kv: BTreeMap::new(),
            history: BTreeMap::new(),
            events: BTreeMap::new(),
            leases: BTreeMap::new(),
            next_lease: 1,
            watchers: Vec::new(),
        }));
        tokio::spawn(expire_leases(Arc::downgrade(&state)));
        MemoryStore { state }
    }

    /// The current revision.
    pub fn revision(&self) -> Revision {
        self.state.lock().revision
    }
}

async fn expire_leases(state: Weak<Mutex<State>>) {
    loop {
        tokio::time::sleep(LEASE_TICK).await;
        let Some(state) = state.upgrade() else { return };
        let mut s = state.lock();
        let now = Instant::now();
        let expired: Vec<LeaseId> =
            s.leases.iter().filter(|(_, l)| l.deadline <= now).map(|(id, _)| *id).collect();
        for id in expired {
            s.revoke(id);
        }
    }
}

fn bounds(range: &KeyRange) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    match &range.range_end {
        None => (Bound::Included(range.key.clone()), Bound::Included(range.key.clone())),
        Some(end) if end.as_slice() == [0] => {
            (Bound::Included(range.key.clone()), Bound::Unbounded)
        }
        Some(end) => (Bound::Included(range.key.clone()), Bound::Excluded(end.clone())),
    }
}

/// A range whose end is at or below its start matches nothing (and BTreeMap::range panics on
/// it, so it is never asked).
fn is_empty(range: &KeyRange) -> bool {
    matches!(&range.range_end, Some(end) if end.as_slice() != [0] && end.as_slice() <= range.key.as_slice())
}

impl State {
    fn keys_in<'a>(&'a self, range: &KeyRange) -> Vec<&'a KeyValue> {
        if is_empty(range) {
            return Vec::new();
        }
        self.kv.range(bounds(range)).map(|(_, v)| v).collect()
    }

    fn read(&self, req: &RangeRequest, at: Revision) -> Result<RangeResponse, MetaError> {
        let mut all: Vec<KeyValue> = if req.revision == 0 || req.revision == self.revision {
            self.keys_in(&req.range).into_iter().cloned().collect()
        } else {
            if req.revision > self.revision {
                return Err(MetaError::FutureRevision {
                    requested: req.revision,
                    current: self.revision,
                });
            }
            if req.revision < self.compacted {
                return Err(MetaError::Compacted {
                    requested: req.revision,
                    compact_revision: self.compacted,
                });
            }
            if is_empty(&req.range) {
                Vec::new()
            } else {
                self.history
                    .range(bounds(&req.range))
                    .filter_map(|(_, writes)| {
                        writes.iter().rev().find(|(r, _)| *r <= req.revision)?.1.clone()
                    })
                    .collect()
            }
        };
        if req.reverse {
            all.reverse();
        }
        let count = all.len();
        let limit = usize::try_from(req.limit).ok().filter(|l| *l > 0).unwrap_or(usize::MAX);
        all.truncate(limit);
        if req.keys_only {
            for kv in &mut all {
                kv.value.clear();
            }
        }
        Ok(RangeResponse {
            more: count > all.len(),
            count: i64::try_from(count).unwrap_or(i64::MAX),
            kvs: all,
            revision: at,
        })
    }

    fn holds(&self, c: &Compare) -> bool {
        let keys = self.keys_in(&c.range);
        if keys.is_empty() {
            return c.holds_for(None);
        }
        keys.into_iter().all(|kv| c.holds_for(Some(kv)))
    }

    fn put(&mut self, key: &[u8], value: &[u8], lease: LeaseId, rev: Revision) -> WatchEvent {
        let old = self.kv.get(key).cloned();
        if let Some(o) = &old
            && o.lease != 0
            && let Some(l) = self.leases.get_mut(&o.lease)
        {
            l.keys.remove(key);
        }
        if lease != 0
            && let Some(l) = self.leases.get_mut(&lease)
        {
            l.keys.insert(key.to_vec());
        }
        let kv = KeyValue {
            key: key.to_vec(),
            value: value.to_vec(),
            create_revision: old.as_ref().map_or(rev, |o| o.create_revision),
            mod_revision: rev,
            version: old.as_ref().map_or(1, |o| o.version + 1),
            lease,
        };
        self.kv.insert(key.to_vec(), kv.clone());
        self.history.entry(key.to_vec()).or_default().push((rev, Some(kv.clone())));
        WatchEvent { kind: EventKind::Put, kv }
    }

    fn delete(&mut self, range: &KeyRange, rev: Revision) -> Vec<WatchEvent> {
        let doomed: Vec<KeyValue> = self.keys_in(range).into_iter().cloned().collect();
        let mut events = Vec::with_capacity(doomed.len());
        for old in doomed {
            self.kv.remove(&old.key);
            if old.lease != 0
                && let Some(l) = self.leases.get_mut(&old.lease)
            {
                l.keys.remove(&old.key);
            }
            self.history.entry(old.key.clone()).or_default().push((rev, None));
            events.push(WatchEvent {
                kind: EventKind::Delete,
                kv: KeyValue { key: old.key, mod_revision: rev, ..Default::default() },
            });
        }
        events
    }

    /// Records a write revision's events and hands them to the watchers.
    fn commit(&mut self, rev: Revision, events: Vec<WatchEvent>) {
        self.revision = rev;
        watchers::publish(&mut self.watchers, &events);
        self.events.insert(rev, events);
    }

    fn txn(&mut self, txn: &Txn) -> Result<TxnResponse, MetaError> {
        let succeeded = txn.compares.iter().all(|c| self.holds(c));
        let ops = if succeeded { &txn.success } else { &txn.failure };
        for op in ops {
            if let TxnOp::Put { lease, .. } = op
                && *lease != 0
                && !self.leases.contains_key(lease)
            {
                return Err(MetaError::LeaseNotFound(*lease));
            }
        }
        let (current, rev) = (self.revision, self.revision + 1);
        let mut events = Vec::new();
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            match op {
                TxnOp::Get(req) => {
                    // Sees this txn's earlier writes, as in etcd.
                    let at = if events.is_empty() { current } else { rev };
                    let mut r = req.clone();
                    if r.revision == at {
                        r.revision = 0;
                    }
                    results.push(OpResult::Get(self.read(&r, at)?));
                }
                TxnOp::Put { key, value, lease } => {
                    events.push(self.put(key, value, *lease, rev));
                    results.push(OpResult::Put);
                }
                TxnOp::Delete(range) => {
                    let gone = self.delete(range, rev);
                    results.push(OpResult::Delete {
                        deleted: i64::try_from(gone.len()).unwrap_or(i64::MAX),
                    });
                    events.extend(gone);
                }
            }
        }
        let revision = if events.is_empty() {
            current
        } else {
            self.commit(rev, events);
            rev
        };
        for r in &mut results {
            if let OpResult::Get(g) = r {
                g.revision = revision;
            }
        }
        Ok(TxnResponse { succeeded, revision, results })
    }

    fn revoke(&mut self, id: LeaseId) -> bool {
        let Some(lease) = self.leases.remove(&id) else { return false };
        let rev = self.revision + 1;
        let mut events = Vec::new();
        for key in lease.keys {
            events.extend(self.delete(&KeyRange::key(key), rev));
        }
        if !events.is_empty() {
            self.commit(rev, events);
        }
        true
    }

    fn compact(&mut self, revision: Revision) -> Result<(), MetaError> {
        if revision > self.revision {
            return Err(MetaError::FutureRevision { requested: revision, current: self.revision });
        }
        if revision <= self.compacted {
            return Err(MetaError::Compacted {
                requested: revision,
                compact_revision: self.compacted,
            });
        }
        // Keep, per key, the newest write at or below `revision` (reads at it need it) and
        // everything after; drop keys whose newest such write is a delete and nothing follows.
        for writes in self.history.values_mut() {
            let keep_from = writes.iter().rposition(|(r, _)| *r <= revision).unwrap_or(0);
            writes.drain(..keep_from);
            if writes.len() == 1 && writes[0].0 <= revision && writes[0].1.is_none() {
                writes.clear();
            }
        }
        self.history.retain(|_, w| !w.is_empty());
        self.events = self.events.split_off(&revision);
        self.compacted = revision;
        Ok(())
    }
}

#[async_trait]
impl MetadataStore for MemoryStore {
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse, MetaError> {
        req.validate()?;
        let s = self.state.lock();
        s.read(&req, s.revision)
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, MetaError> {
        txn.validate()?;
        self.state.lock().txn(&txn)
    }

    async fn lease_grant(&self, ttl: Duration) -> Result<LeaseId, MetaError> {
        let mut s = self.state.lock();
        let id = s.next_lease;
        s.next_lease += 1;
        let ttl = Duration::from_secs(ttl_secs(ttl).unsigned_abs());
        s.leases.insert(id, Lease { ttl, deadline: Instant::now() + ttl, keys: BTreeSet::new() });
        Ok(id)
    }

    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<Duration, MetaError> {
        let mut s = self.state.lock();
        let now = Instant::now();
        let l = s.leases.get_mut(&lease).ok_or(MetaError::LeaseNotFound(lease))?;
        if l.deadline <= now {
            return Err(MetaError::LeaseNotFound(lease));
        }
        l.deadline = now + l.ttl;
        Ok(l.ttl)
    }

    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), MetaError> {
        if self.state.lock().revoke(lease) { Ok(()) } else { Err(MetaError::LeaseNotFound(lease)) }
    }

    async fn watch(&self, req: WatchRequest) -> Result<WatchStream, MetaError> {
        req.range.validate()?;
        let mut s = self.state.lock();
        if req.start_revision != 0 && req.start_revision < s.compacted {
            return Err(MetaError::Compacted {
                requested: req.start_revision,
                compact_revision: s.compacted,
            });
        }
        let past: Vec<Vec<WatchEvent>> = if req.start_revision != 0 {
            s.events
                .range(req.start_revision..)
                .map(|(_, evs)| {
                    evs.iter().filter(|e| req.range.contains(&e.kv.key)).cloned().collect()
                })
                .filter(|b: &Vec<WatchEvent>| !b.is_empty())
                .collect()
        } else {
            Vec::new()
        };
        let (watcher, stream) = watchers::watch(req.range.clone(), past);
        s.watchers.push(watcher);
        Ok(stream)
    }

    async fn compact(&self, revision: Revision) -> Result<(), MetaError> {
        self.state.lock().compact(revision)
    }
}
