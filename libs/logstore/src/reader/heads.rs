//! The heads of the logs a role serves, kept without a metadata read per request
//! (ARCHITECTURE §11: a caught-up client costs the metadata store nothing). A log's head and
//! start are read once, linearizably, then followed by one watch of its keys from the next
//! revision, and fed by this process's own commits, so what it committed is seen before it is
//! acknowledged. Long polls wait on the followed head, not on a watch of their own.
//!
//! A followed head may trail the store by a watch round trip: reads that decide (fencing,
//! commits, trims) read the store, never this. Bounded in logs; the least recently used one
//! is dropped (its watch ended) to make room. A watch that fails drops its log too: the next
//! request reads the store and follows again.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use futures::StreamExt;
use metadata::{EventKind, KeyRange, MetadataStore, WatchRequest};
use parking_lot::Mutex;
use tokio::sync::watch;

use super::Snapshot;
use crate::keys::{Keys, parse_u64};
use crate::records::LogHead;
use crate::{LogError, LogId, decode};

/// Logs whose heads a role follows at most, by default.
pub const DEFAULT_FOLLOWED_HEADS: usize = 4096;

type Logs = Mutex<HashMap<LogId, Followed>>;

/// One followed log: its latest snapshot, when it was last asked for, its watch's task.
struct Followed {
    tx: watch::Sender<Arc<Snapshot>>,
    used: u64,
    /// Tells the followed watch apart from a later one of the same log.
    generation: u64,
    task: tokio::task::AbortHandle,
}

impl Drop for Followed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The followed heads of one reader (and its clones).
pub(crate) struct Heads {
    meta: Arc<dyn MetadataStore>,
    keys: Keys,
    capacity: usize,
    logs: Arc<Logs>,
    /// Uses so far: the recency clock.
    clock: std::sync::atomic::AtomicU64,
}

impl Heads {
    pub(crate) fn new(meta: Arc<dyn MetadataStore>, keys: Keys, capacity: usize) -> Self {
        Heads {
            meta,
            keys,
            capacity: capacity.max(1),
            logs: Default::default(),
            clock: Default::default(),
        }
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// The log's followed snapshot and a receiver of its changes, if it is followed.
    pub(crate) fn current(&self, log: LogId) -> Option<watch::Receiver<Arc<Snapshot>>> {
        let now = self.tick();
        let mut logs = self.logs.lock();
        let f = logs.get_mut(&log)?;
        f.used = now;
        Some(f.tx.subscribe())
    }

    /// Starts following `log` from `snap` (read linearizably just before): watches its head
    /// and start from the revision after it. A receiver of its snapshots.
    pub(crate) async fn follow(
        &self,
        snap: Snapshot,
    ) -> Result<watch::Receiver<Arc<Snapshot>>, LogError> {
        let log = snap.log;
        // The head, index pages, producer checkpoints and start are one key range; only the
        // head and start are taken from it.
        let (head, start) = (self.keys.head(log), self.keys.start(log));
        let mut end = start.clone();
        end.push(0);
        let req = WatchRequest {
            range: KeyRange::between(head.clone(), end),
            start_revision: snap.revision + 1,
        };
        let events = self.meta.watch(req).await?;
        let generation = self.tick();
        let (tx, rx) = watch::channel(Arc::new(snap));
        let keep = tx.clone();
        let logs = Arc::downgrade(&self.logs);
        let task = tokio::spawn(async move {
            follow_events(events, &keep, &head, &start).await;
            forget(&logs, log, generation);
        })
        .abort_handle();
        let mut map = self.logs.lock();
        if map.len() >= self.capacity
            && !map.contains_key(&log)
            && let Some(lru) = map.iter().min_by_key(|(_, f)| f.used).map(|(l, _)| *l)
        {
            map.remove(&lru);
        }
        match map.get(&log) {
            // Another request started following it meanwhile: keep the newer of the two.
            Some(f) if f.tx.borrow().revision >= rx.borrow().revision => {
                task.abort();
                return Ok(f.tx.subscribe());
            }
            _ => {}
        }
        map.insert(log, Followed { tx, used: generation, generation, task });
        Ok(rx)
    }

    /// A head this process committed at `revision`: seen at once by the followed log (its
    /// watch brings the same change later, and is then ignored).
    pub(crate) fn committed(&self, log: LogId, head: &LogHead, revision: i64) {
        if let Some(f) = self.logs.lock().get(&log) {
            f.tx.send_if_modified(|s| {
                if revision <= s.head_revision {
                    return false;
                }
                let mut next = (**s).clone();
                next.head = head.clone();
                next.head_revision = revision;
                next.revision = next.revision.max(revision);
                *s = Arc::new(next);
                true
            });
        }
    }

    /// Stops following `log` (this process changed it in a way only a read shows exactly: a
    /// trim); the next request reads it again.
    pub(crate) fn forget(&self, log: LogId) {
        self.logs.lock().remove(&log);
    }

    /// Logs followed now.
    pub(crate) fn len(&self) -> usize {
        self.logs.lock().len()
    }
}

/// Applies a followed log's watch events until the watch ends, fails, or the log is deleted.
async fn follow_events(
    mut events: metadata::WatchStream,
    tx: &watch::Sender<Arc<Snapshot>>,
    head: &[u8],
    start: &[u8],
) {
    while let Some(Ok(batch)) = events.next().await {
        for ev in batch {
            let rev = ev.kv.mod_revision;
            if ev.kv.key == head {
                if ev.kind == EventKind::Delete {
                    return;
                }
                let Ok(h) = decode::<LogHead>("log head", &ev.kv.value) else { return };
                tx.send_if_modified(|s| {
                    if rev <= s.head_revision {
                        return false;
                    }
                    let mut next = (**s).clone();
                    (next.head, next.head_revision, next.revision) = (h, rev, s.revision.max(rev));
                    *s = Arc::new(next);
                    true
                });
            } else if ev.kv.key == start {
                let value = match ev.kind {
                    EventKind::Delete => Some(0),
                    _ => parse_u64(&ev.kv.value),
                };
                let Some(value) = value else { return };
                tx.send_if_modified(|s| {
                    if rev <= s.start_revision {
                        return false;
                    }
                    let mut next = (**s).clone();
                    (next.start, next.start_revision, next.revision) =
                        (value, rev, s.revision.max(rev));
                    *s = Arc::new(next);
                    true
                });
            }
        }
    }
}

/// Drops a followed log whose watch ended, unless a newer watch follows it already.
fn forget(logs: &Weak<Logs>, log: LogId, generation: u64) {
    let Some(logs) = logs.upgrade() else { return };
    let mut map = logs.lock();
    if map.get(&log).is_some_and(|f| f.generation == generation) {
        map.remove(&log);
    }
}
