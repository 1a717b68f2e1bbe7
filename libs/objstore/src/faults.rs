//! A fault-injecting [`ObjectStore`] wrapper for tests: fail the Nth call or a seeded fraction
//! of calls with a chosen error, add latency, or "apply but lose the response" (the write
//! lands, the caller gets an error — the ambiguous case a writer must survive).
//!
//! Rules are changed at run time through a [`FaultHandle`], so a test can let a writer start
//! cleanly and then break its store mid-flight.

use parking_lot::Mutex;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

/// The kind of call a rule applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Put,
    Get,
    Delete,
    List,
    Copy,
}

/// The error an injected failure returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultError {
    /// A transient failure (5xx, reset connection): `Error::Generic`.
    Unavailable,
    NotFound,
    AlreadyExists,
    Precondition,
}

/// Which matching calls a rule fires on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Trigger {
    /// The nth matching call from when the rule was added (1-based), once.
    Nth(u64),
    /// Each matching call with this probability, from a seeded generator (replayable).
    Fraction { p: f64, seed: u64 },
    /// Every matching call.
    Always,
}

/// What a firing rule does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Action {
    /// Fail without touching the inner store.
    Fail(FaultError),
    /// Run the call on the inner store, then return this error instead of its answer.
    LoseResponse(FaultError),
    /// Wait, then run the call normally.
    Delay(Duration),
}

#[derive(Debug)]
struct Rule {
    op: Op,
    trigger: Trigger,
    action: Action,
    seen: u64,
    rng: config::latency::Draws,
    spent: bool,
}

#[derive(Debug, Default)]
struct State {
    rules: Vec<Rule>,
    calls: std::collections::HashMap<Op, u64>,
    injected: u64,
    delete_streams: u64,
}

/// Controls the faults of one [`FaultyStore`].
#[derive(Clone, Debug, Default)]
pub struct FaultHandle {
    state: Arc<Mutex<State>>,
}

impl FaultHandle {
    /// Adds a rule; rules are checked in the order they were added: the delays that fire add
    /// up, the first failure or lost answer that fires wins.
    pub fn add(&self, op: Op, trigger: Trigger, action: Action) {
        let rng = config::latency::Draws::new(match trigger {
            Trigger::Fraction { seed, .. } => seed,
            _ => 0,
        });
        self.state.lock().rules.push(Rule { op, trigger, action, seen: 0, rng, spent: false });
    }

    pub fn fail_nth(&self, op: Op, n: u64, error: FaultError) {
        self.add(op, Trigger::Nth(n), Action::Fail(error));
    }

    pub fn fail_fraction(&self, op: Op, p: f64, seed: u64, error: FaultError) {
        self.add(op, Trigger::Fraction { p, seed }, Action::Fail(error));
    }

    pub fn lose_response(&self, op: Op, trigger: Trigger) {
        self.add(op, trigger, Action::LoseResponse(FaultError::Unavailable));
    }

    pub fn delay(&self, op: Op, latency: Duration) {
        self.add(op, Trigger::Always, Action::Delay(latency));
    }

    /// Removes every rule; counts stay.
    pub fn clear(&self) {
        self.state.lock().rules.clear();
    }

    /// How many calls of this kind reached the wrapper.
    pub fn calls(&self, op: Op) -> u64 {
        self.state.lock().calls.get(&op).copied().unwrap_or(0)
    }

    /// How many `delete_stream` calls were made (one per batch of deletions; a single
    /// `delete` is one too).
    pub fn delete_streams(&self) -> u64 {
        self.state.lock().delete_streams
    }

    /// How many faults (failures and lost responses, not delays) were injected.
    pub fn injected(&self) -> u64 {
        self.state.lock().injected
    }

    /// Counts the call and decides what happens to it: every delay that fires adds up, and
    /// the first failure or lost answer that fires ends the search (a store's latency and its
    /// faults compose, whatever order their rules were added in).
    fn decide(&self, op: Op) -> (Duration, Option<Action>) {
        let mut st = self.state.lock();
        *st.calls.entry(op).or_default() += 1;
        let (mut delay, mut fired) = (Duration::ZERO, None);
        for r in st.rules.iter_mut().filter(|r| r.op == op && !r.spent) {
            r.seen += 1;
            let fires = match r.trigger {
                Trigger::Nth(n) => {
                    r.spent = r.seen >= n;
                    r.seen == n
                }
                Trigger::Fraction { p, .. } => r.rng.uniform() < p,
                Trigger::Always => true,
            };
            match r.action {
                Action::Delay(d) if fires => delay += d,
                _ if fires => {
                    fired = Some(r.action);
                    break;
                }
                _ => {}
            }
        }
        if fired.is_some() {
            st.injected += 1;
        }
        (delay, fired)
    }
}

fn injected(error: FaultError, path: &Path, op: Op) -> object_store::Error {
    let source = format!("injected fault on {op:?} {path}").into();
    match error {
        FaultError::Unavailable => object_store::Error::Generic { store: "faulty", source },
        FaultError::NotFound => object_store::Error::NotFound { path: path.to_string(), source },
        FaultError::AlreadyExists => {
            object_store::Error::AlreadyExists { path: path.to_string(), source }
        }
        FaultError::Precondition => {
            object_store::Error::Precondition { path: path.to_string(), source }
        }
    }
}

/// An [`ObjectStore`] that injects the faults its [`FaultHandle`] describes.
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    faults: FaultHandle,
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn ObjectStore>) -> (Arc<FaultyStore>, FaultHandle) {
        let faults = FaultHandle::default();
        (Arc::new(FaultyStore { inner, faults: faults.clone() }), faults)
    }

    /// Applies the faults for one call around `call`.
    async fn run<T, F>(&self, op: Op, path: &Path, call: F) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        let (delay, fired) = self.faults.decide(op);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        match fired {
            None | Some(Action::Delay(_)) => call.await,
            Some(Action::Fail(e)) => Err(injected(e, path, op)),
            Some(Action::LoseResponse(e)) => {
                let _applied = call.await;
                Err(injected(e, path, op))
            }
        }
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.run(Op::Put, location, self.inner.put_opts(location, payload, opts)).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.run(Op::Put, location, self.inner.put_multipart_opts(location, opts)).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.run(Op::Get, location, self.inner.get_opts(location, options)).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.run(Op::Get, location, self.inner.get_ranges(location, ranges)).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let inner = self.inner.clone();
        let faults = self.faults.clone();
        faults.state.lock().delete_streams += 1;
        locations
            .and_then(move |path| {
                let inner = inner.clone();
                let faults = faults.clone();
                async move {
                    let store = FaultyStore { inner: inner.clone(), faults };
                    store.run(Op::Delete, &path, inner.delete(&path)).await.map(|()| path)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let (delay, fired) = self.faults.decide(Op::List);
        let listed = match fired {
            Some(Action::Fail(e) | Action::LoseResponse(e)) => {
                let p = prefix.cloned().unwrap_or_default();
                futures::stream::once(async move { Err(injected(e, &p, Op::List)) }).boxed()
            }
            Some(Action::Delay(_)) | None => self.inner.list(prefix),
        };
        if delay.is_zero() {
            return listed;
        }
        futures::stream::once(tokio::time::sleep(delay))
            .flat_map(move |()| futures::stream::empty())
            .chain(listed)
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let p = prefix.cloned().unwrap_or_default();
        self.run(Op::List, &p, self.inner.list_with_delimiter(prefix)).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.run(Op::Copy, to, self.inner.copy_opts(from, to, options)).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.run(Op::Copy, to, self.inner.rename_opts(from, to, options)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn store() -> (Arc<FaultyStore>, FaultHandle, Arc<dyn ObjectStore>) {
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let (s, h) = FaultyStore::new(inner.clone());
        (s, h, inner)
    }

    #[tokio::test]
    async fn nth_call_fails_once_with_the_chosen_error() -> anyhow::Result<()> {
        let (s, h, _) = store();
        h.fail_nth(Op::Put, 2, FaultError::Unavailable);
        s.put(&Path::from("a"), "1".into()).await?;
        let second = s.put(&Path::from("b"), "2".into()).await;
        assert!(
            matches!(second, Err(object_store::Error::Generic { store: "faulty", .. })),
            "{second:?}"
        );
        s.put(&Path::from("c"), "3".into()).await?;
        assert_eq!((h.calls(Op::Put), h.injected()), (3, 1));
        assert!(s.get(&Path::from("b")).await.is_err(), "a failed put must not land");
        Ok(())
    }

    #[tokio::test]
    async fn lost_response_applies_the_write() -> anyhow::Result<()> {
        let (s, h, inner) = store();
        h.lose_response(Op::Put, Trigger::Nth(1));
        let p = Path::from("x");
        assert!(s.put(&p, "landed".into()).await.is_err());
        assert_eq!(inner.get(&p).await?.bytes().await?, Bytes::from_static(b"landed"));
        Ok(())
    }

    #[tokio::test]
    async fn seeded_fraction_fails_about_that_share_and_replays_exactly() -> anyhow::Result<()> {
        let run = |seed| async move {
            let (s, h, _) = store();
            h.fail_fraction(Op::Get, 0.3, seed, FaultError::NotFound);
            s.put(&Path::from("k"), "v".into()).await?;
            let mut outcome = Vec::new();
            for _ in 0..1000 {
                outcome.push(s.get(&Path::from("k")).await.is_err());
            }
            anyhow::Ok(outcome)
        };
        let a = run(7).await?;
        let failed = a.iter().filter(|f| **f).count();
        assert!((220..=380).contains(&failed), "{failed} of 1000 failed at p=0.3");
        assert_eq!(a, run(7).await?, "same seed, same faults");
        assert_ne!(a, run(8).await?, "another seed, other faults");
        Ok(())
    }

    /// A store's latency and its faults compose: a failure rule added after an always-firing
    /// delay still fires (the first that fires used to be the only one, so a simulation's PUT
    /// latency left its PUT faults unfired), and delays that fire add up.
    #[tokio::test]
    async fn a_delay_does_not_stop_the_faults_after_it() -> anyhow::Result<()> {
        let (s, h, _) = store();
        h.delay(Op::Put, Duration::from_millis(20));
        h.add(Op::Put, Trigger::Nth(2), Action::Delay(Duration::from_millis(200)));
        h.fail_nth(Op::Put, 3, FaultError::Unavailable);
        s.put(&Path::from("a"), "1".into()).await?;
        let start = tokio::time::Instant::now();
        s.put(&Path::from("b"), "2".into()).await?;
        assert!(start.elapsed() >= Duration::from_millis(220), "{:?}", start.elapsed());
        assert!(s.put(&Path::from("c"), "3".into()).await.is_err(), "the failure did not fire");
        assert_eq!((h.calls(Op::Put), h.injected()), (3, 1));
        Ok(())
    }

    // Real time (tokio's paused clock would need its test-util feature, which would give the
    // test build another tokio than the binaries'): a lower bound, and a cleared rule's call
    // answered long before the delay it no longer has.
    #[tokio::test]
    async fn delay_holds_the_call_back() -> anyhow::Result<()> {
        let (s, h, _) = store();
        let delay = Duration::from_millis(300);
        h.delay(Op::Put, delay);
        let start = tokio::time::Instant::now();
        s.put(&Path::from("slow"), "v".into()).await?;
        assert!(start.elapsed() >= delay);
        h.clear();
        let fast = Path::from("fast");
        let put = tokio::time::timeout(Duration::from_secs(30), s.put(&fast, "v".into()));
        assert!(put.await.is_ok(), "a cleared delay still held the call");
        Ok(())
    }

    #[tokio::test]
    async fn delete_and_list_faults_fire_per_call() -> anyhow::Result<()> {
        let (s, h, inner) = store();
        let p = Path::from("d");
        inner.put(&p, "v".into()).await?;
        h.lose_response(Op::Delete, Trigger::Nth(1));
        assert!(s.delete(&p).await.is_err());
        assert!(inner.get(&p).await.is_err(), "the delete was applied despite the error");
        h.fail_nth(Op::List, 1, FaultError::Unavailable);
        let listed: Vec<_> = s.list(None).collect().await;
        assert!(matches!(listed.as_slice(), [Err(_)]), "{listed:?}");
        Ok(())
    }
}
