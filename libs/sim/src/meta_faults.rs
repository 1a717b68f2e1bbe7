//! A [`MetadataStore`] wrapper that injects etcd's failures from the run's seed: delays (on
//! virtual time), definite failures (UNAVAILABLE, nothing applied), timeouts that lose a write
//! unapplied, and writes applied whose answer is lost (both OUTCOME_UNKNOWN: the caller cannot
//! tell them apart, as with etcd). Reads and lease renewals can be delayed or fail; a watch can
//! fail to start, and its events arrive late (each batch held up to `max_delay`, in order, as
//! a slow etcd member's watch delivers them). Each decision is drawn from the run's generator
//! and counted.

use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use metadata::*;

use crate::rng::Rng;

/// How often each fault is injected (probabilities per call).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MetaPlan {
    /// A call waits up to `max_delay` first.
    pub delay: f64,
    pub max_delay: Duration,
    /// A call fails with UNAVAILABLE, nothing applied.
    pub fail: f64,
    /// A write is not applied and its answer is OUTCOME_UNKNOWN.
    pub lose_unapplied: f64,
    /// A write is applied and its answer is OUTCOME_UNKNOWN.
    pub lose_applied: f64,
}

/// Faults injected so far, by kind.
#[derive(Debug, Default)]
pub struct MetaCounts {
    pub delayed: AtomicU64,
    /// Watch event batches delivered late.
    pub watch_delayed: AtomicU64,
    pub failed: AtomicU64,
    pub lost_unapplied: AtomicU64,
    pub lost_applied: AtomicU64,
}

impl MetaCounts {
    pub fn total(&self) -> u64 {
        [&self.delayed, &self.watch_delayed, &self.failed, &self.lost_unapplied, &self.lost_applied]
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }
}

pub struct FaultyMeta {
    inner: Arc<dyn MetadataStore>,
    rng: Arc<Mutex<Rng>>,
    plan: MetaPlan,
    on: Arc<AtomicBool>,
    pub counts: Arc<MetaCounts>,
}

impl std::fmt::Debug for FaultyMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyMeta").field("plan", &self.plan).finish_non_exhaustive()
    }
}

enum Fate {
    Pass,
    Fail,
    LoseUnapplied,
    LoseApplied,
}

impl FaultyMeta {
    /// Faults off until [`set_on`](Self::set_on).
    pub fn new(inner: Arc<dyn MetadataStore>, plan: MetaPlan, rng: Rng) -> Arc<FaultyMeta> {
        Arc::new(FaultyMeta {
            inner,
            rng: Arc::new(Mutex::new(rng)),
            plan,
            on: Arc::new(AtomicBool::new(false)),
            counts: Arc::default(),
        })
    }

    pub fn set_on(&self, on: bool) {
        self.on.store(on, Ordering::SeqCst);
    }

    fn draw<T>(&self, f: impl FnOnce(&mut Rng) -> T) -> T {
        f(&mut self.rng.lock())
    }

    /// The delay (maybe) and fate of one call; `write` allows the lost-answer fates.
    async fn decide(&self, write: bool) -> Fate {
        if std::env::var_os("SIM_TRACE").is_some() {
            eprintln!("trace meta write={write}");
        }
        if !self.on.load(Ordering::SeqCst) {
            return Fate::Pass;
        }
        let p = self.plan;
        let (delay, fate) = self.draw(|r| {
            let delay = r.chance(p.delay).then(|| {
                let max = u64::try_from(p.max_delay.as_micros()).unwrap_or(u64::MAX).max(1);
                Duration::from_micros(r.below(max))
            });
            let fate = if r.chance(p.fail) {
                Fate::Fail
            } else if write && r.chance(p.lose_unapplied) {
                Fate::LoseUnapplied
            } else if write && r.chance(p.lose_applied) {
                Fate::LoseApplied
            } else {
                Fate::Pass
            };
            (delay, fate)
        });
        if let Some(d) = delay {
            self.counts.delayed.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(d).await;
        }
        match &fate {
            Fate::Fail => self.counts.failed.fetch_add(1, Ordering::Relaxed),
            Fate::LoseUnapplied => self.counts.lost_unapplied.fetch_add(1, Ordering::Relaxed),
            Fate::LoseApplied => self.counts.lost_applied.fetch_add(1, Ordering::Relaxed),
            Fate::Pass => 0,
        };
        fate
    }
}

fn unavailable() -> MetaError {
    MetaError::Unavailable("injected".to_owned())
}

fn lost(op: &'static str) -> MetaError {
    MetaError::OutcomeUnknown { op, reason: "injected: the answer was lost".to_owned() }
}

fn writes(txn: &Txn) -> bool {
    txn.success.iter().chain(&txn.failure).any(|op| !matches!(op, TxnOp::Get(_)))
}

#[async_trait]
impl MetadataStore for FaultyMeta {
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse, MetaError> {
        match self.decide(false).await {
            Fate::Pass => self.inner.range(req).await,
            _ => Err(unavailable()),
        }
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, MetaError> {
        let write = writes(&txn);
        match self.decide(write).await {
            Fate::Pass => self.inner.txn(txn).await,
            Fate::Fail => Err(unavailable()),
            Fate::LoseUnapplied => Err(lost("txn")),
            Fate::LoseApplied => {
                let _ = self.inner.txn(txn).await;
                Err(lost("txn"))
            }
        }
    }

    async fn lease_grant(&self, ttl: Duration) -> Result<LeaseId, MetaError> {
        match self.decide(false).await {
            Fate::Pass => self.inner.lease_grant(ttl).await,
            _ => Err(unavailable()),
        }
    }

    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<Duration, MetaError> {
        match self.decide(false).await {
            Fate::Pass => self.inner.lease_keep_alive(lease).await,
            _ => Err(unavailable()),
        }
    }

    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), MetaError> {
        match self.decide(false).await {
            Fate::Pass => self.inner.lease_revoke(lease).await,
            _ => Err(unavailable()),
        }
    }

    async fn watch(&self, req: WatchRequest) -> Result<WatchStream, MetaError> {
        let stream = match self.decide(false).await {
            Fate::Pass => self.inner.watch(req).await?,
            _ => return Err(unavailable()),
        };
        // Each batch of events may be held a while, in order (one at a time).
        let (rng, on, counts, p) =
            (self.rng.clone(), self.on.clone(), self.counts.clone(), self.plan);
        let late = futures::StreamExt::then(stream, move |item| {
            let hold = on.load(Ordering::SeqCst).then(|| {
                let mut r = rng.lock();
                r.chance(p.delay).then(|| {
                    let max = u64::try_from(p.max_delay.as_micros()).unwrap_or(u64::MAX).max(1);
                    Duration::from_micros(r.below(max))
                })
            });
            let counts = counts.clone();
            async move {
                if let Some(Some(d)) = hold {
                    counts.watch_delayed.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(d).await;
                }
                item
            }
        });
        Ok(Box::pin(late))
    }

    async fn compact(&self, revision: Revision) -> Result<(), MetaError> {
        self.inner.compact(revision).await
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// One writer's own way to the metadata store, which the nemesis can pause: every call waits at
/// the gate until the pause ends, as a stopped process's would (its lease runs out meanwhile).
/// A transaction is sent by a task of its own, so one whose caller gave up waiting (a deadline)
/// still applies when the pause ends — a zombie commit, which the compares must refuse.
pub struct Gated {
    inner: Arc<dyn MetadataStore>,
    until: Mutex<Option<tokio::time::Instant>>,
    /// Incarnation head writes held by a pause, and those that succeeded once it ended:
    /// zombie commits (counted across the run's gates).
    zombies: Arc<Zombies>,
}

/// Incarnation head writes (commits, slot takeovers) the gates held through a pause past the
/// writer's lease, and how many of them succeeded after it (none may).
#[derive(Debug, Default)]
pub struct Zombies {
    pub held: AtomicU64,
    pub landed: AtomicU64,
}

impl std::fmt::Debug for Gated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gated").finish_non_exhaustive()
    }
}

impl Gated {
    pub fn new(inner: Arc<dyn MetadataStore>, zombies: Arc<Zombies>) -> Arc<Gated> {
        Arc::new(Gated { inner, until: Mutex::new(None), zombies })
    }

    /// Every call from now until `until` waits for it.
    pub fn pause_until(&self, until: tokio::time::Instant) {
        *self.until.lock() = Some(until);
    }

    async fn wait(&self) {
        loop {
            let until = *self.until.lock();
            match until {
                Some(t) if tokio::time::Instant::now() < t => tokio::time::sleep_until(t).await,
                _ => return,
            }
        }
    }
}

#[async_trait]
impl MetadataStore for Gated {
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse, MetaError> {
        self.wait().await;
        self.inner.range(req).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, MetaError> {
        let until = *self.until.lock();
        let held = until.is_some_and(|t| t > tokio::time::Instant::now());
        // An incarnation's head write (a commit, a slot takeover): it compares the writer's
        // member key. (A compactor's spill through this writer's reader writes the head too,
        // under its own claim: not the incarnation's.)
        let writes_head = txn
            .success
            .iter()
            .any(|op| matches!(op, TxnOp::Put { key, .. } if key.ends_with(b"/head")))
            && txn.compares.iter().any(|c| contains(&c.range.key, b"/members/writer/"));
        let (inner, zombies) = (self.inner.clone(), self.zombies.clone());
        let sent = tokio::spawn(async move {
            if let Some(t) = until {
                tokio::time::sleep_until(t).await;
            }
            let r = inner.txn(txn).await;
            // Every pause outlives the writer's lease: a head write it held must be refused.
            if held && writes_head {
                zombies.held.fetch_add(1, Ordering::Relaxed);
                if r.as_ref().is_ok_and(|r| r.succeeded) {
                    zombies.landed.fetch_add(1, Ordering::Relaxed);
                }
            }
            r
        });
        sent.await.unwrap_or_else(|e| Err(MetaError::Internal(format!("txn task: {e}"))))
    }

    async fn lease_grant(&self, ttl: Duration) -> Result<LeaseId, MetaError> {
        self.wait().await;
        self.inner.lease_grant(ttl).await
    }

    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<Duration, MetaError> {
        self.wait().await;
        self.inner.lease_keep_alive(lease).await
    }

    async fn lease_revoke(&self, lease: LeaseId) -> Result<(), MetaError> {
        self.wait().await;
        self.inner.lease_revoke(lease).await
    }

    async fn watch(&self, req: WatchRequest) -> Result<WatchStream, MetaError> {
        self.wait().await;
        self.inner.watch(req).await
    }

    async fn compact(&self, revision: Revision) -> Result<(), MetaError> {
        self.inner.compact(revision).await
    }
}
