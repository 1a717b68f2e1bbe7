//! Scenario "writers": fenced leaderless writers (the real `LogStorage`) appending to shared
//! logs while the metadata store delays, fails and loses answers, the object store fails and
//! loses PUT answers, and writers crash (every task stopped at once, lease left to expire) and
//! are replaced. Clients append through any live writer (so writers fence each other's slots
//! all the time), read back, and an observer records each log's end; at the end every log is
//! read whole and the history goes through [`crate::history::check`].
//!
//! Everything runs on one current-thread tokio runtime with a paused clock: time moves only
//! when every task waits, straight to the next timer, so a run of minutes of virtual time takes
//! milliseconds and its interleaving depends only on the seed.

use parking_lot::Mutex;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use logstore::{Clock, Conditions, LogId, LogStorage, LogStorageConfig, WriterStep};
use metadata::MetadataStore;
use objstore::faults::{Action, FaultError, FaultyStore, Op, Trigger};
use objstore::object_store::ObjectStore;

use crate::history::{Append, History, Outcome, Seen, Violation, check, id_of, payload};
use crate::meta_faults::{FaultyMeta, Gated, MetaPlan};
use crate::rng::Rng;

/// A scenario's size and fault rates.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Writers live at once.
    pub writers: usize,
    pub logs: u64,
    pub clients: usize,
    /// Appends per client.
    pub appends: usize,
    /// Writer crashes over the run (each followed by a new writer).
    pub crashes: usize,
    pub meta: MetaPlan,
    /// Per PUT: fails (nothing stored).
    pub put_fail: f64,
    /// Per PUT: stored, answer lost.
    pub put_lose: f64,
    /// Per PUT: answered 300 ms late (the writers hedge PUTs not answered by their p90: a
    /// second PUT of the object under a new sequence races it).
    pub put_slow: f64,
    /// Per GET: fails.
    pub get_fail: f64,
    /// Per GET: sent 400 ms late (so the object may be compacted away and deleted by then: a
    /// slow read across a delete).
    pub get_slow: f64,
    /// A compactor, a cleaner (no grace period) and hard trims run alongside.
    pub maintenance: bool,
    /// Writer `i` is in zone `zones[i % len]` (none: every writer in `*`).
    pub zones: Vec<String>,
    /// Writers serve Kafka (each a broker over the catalog); the clients are idempotent Kafka
    /// producers to a topic of `logs` partitions, retrying each batch until answered
    /// ([`crate::kafka`]).
    pub kafka: bool,
    /// Kafka producers in zones too (a third each: none, the first zone, the second), so they
    /// use the zones' owner slots, and fall back to `*` while their zone has no writer.
    pub producer_zones: bool,
    /// Kafka consumer groups (`members` each) consuming the topic and committing offsets
    /// through the writers' coordinators ([`crate::groups`]); none: no groups.
    pub groups: u64,
    pub members: u64,
    /// Compacted logs instead ([`crate::compacted`]): keyed batches, key compaction all along.
    pub compacted: bool,
    /// Kafka transactional producers (each `appends` transactions), read committed all along
    /// ([`crate::txns`]); none: no transactions.
    pub transactions: u64,
    /// Members of one Kafka share group consuming the topic ([`crate::shares`]); none: no
    /// share group.
    pub shares: u64,
}

impl Plan {
    /// The default mix: 3 writers, 4 logs, 6 clients of 40 appends, 3 crashes, every fault on.
    pub fn writers() -> Plan {
        Plan {
            writers: 3,
            logs: 4,
            clients: 6,
            appends: 40,
            crashes: 3,
            meta: MetaPlan {
                delay: 0.05,
                max_delay: Duration::from_millis(200),
                fail: 0.02,
                lose_unapplied: 0.01,
                lose_applied: 0.01,
            },
            put_fail: 0.03,
            put_lose: 0.02,
            put_slow: 0.03,
            get_fail: 0.02,
            get_slow: 0.05,
            maintenance: false,
            zones: Vec::new(),
            kafka: false,
            producer_zones: false,
            groups: 0,
            members: 0,
            compacted: false,
            transactions: 0,
            shares: 0,
        }
    }

    /// Compacted logs: 2 writers, 3 clients of 60 keyed batches over 2 logs of 6 keys, two
    /// compactors key-compacting all along (one crashing at random steps), readers all along,
    /// metadata and object faults on ([`crate::compacted`]).
    pub fn compacted() -> Plan {
        Plan { compacted: true, writers: 2, clients: 3, appends: 60, crashes: 0, ..Plan::writers() }
    }

    /// The writers mix with a compactor, a cleaner and hard trims running alongside, over
    /// longer runs (so logs spill index pages and compact many times).
    pub fn maintenance() -> Plan {
        Plan { maintenance: true, appends: 150, ..Plan::writers() }
    }

    /// Kafka: 3 writers in zones a, b, a serving a topic of 3 partitions to 6 idempotent
    /// producers of 30 batches, every fault on, the compactor, the cleaner and hard trims
    /// alongside: partitions change owner as writers crash, pause and start, and each new
    /// owner rebuilds the producers' state from a checkpoint and the log.
    pub fn kafka() -> Plan {
        Plan {
            kafka: true,
            maintenance: true,
            zones: vec!["a".into(), "b".into()],
            appends: 30,
            logs: 3,
            ..Plan::writers()
        }
    }

    /// The Kafka plan with producers in zones too (a third each: none, zone a, zone b): they
    /// use their zone's owner slot, fall back to `*` while it has no writer, and move back.
    pub fn kafka_zones() -> Plan {
        Plan { producer_zones: true, ..Plan::kafka() }
    }

    /// Consumer groups through coordinator changes: 3 groups of 3 members on a topic of 120
    /// partitions served by 3 writers that crash, pause and start 10 times over the run (each
    /// change moves about a third of the partitions and of the groups' coordinators), with 2
    /// idempotent producers, every metadata and object fault on.
    pub fn groups() -> Plan {
        Plan {
            kafka: true,
            logs: 120,
            clients: 2,
            appends: 40,
            crashes: 10,
            groups: 3,
            members: 3,
            ..Plan::writers()
        }
    }

    /// Kafka transactions through coordinator and owner changes: 3 transactional producers of
    /// 12 transactions each (a few partitions each, committed or aborted, now and then a new
    /// instance fencing the old, whose commit must then fail) and an idempotent producer, on a
    /// topic of 3 partitions served by 3 writers that crash, pause and start 4 times, read
    /// committed all along, every fault on, the compactor, cleaner and trims alongside.
    pub fn transactions() -> Plan {
        Plan { transactions: 3, clients: 1, appends: 12, crashes: 4, ..Plan::kafka() }
    }

    /// The transactions plan with transactional producers in zones (a third each: none, zone
    /// a, zone b): their batches go to their zone's owner slots, the markers to the
    /// partition's.
    pub fn transactions_zones() -> Plan {
        Plan { producer_zones: true, ..Plan::transactions() }
    }

    /// A Kafka share group through owner changes: 4 members on a topic of 3 partitions fed by
    /// 3 idempotent producers, accepting, releasing, rejecting and losing acknowledgements,
    /// crashing now and then, while 3 writers crash, pause and start 4 times, every fault on,
    /// the compactor, cleaner and trims alongside.
    pub fn shares() -> Plan {
        Plan { shares: 4, clients: 3, appends: 30, crashes: 4, ..Plan::kafka() }
    }

    /// The zone of writer slot `i`.
    pub fn zone(&self, i: usize) -> String {
        match self.zones.len() {
            0 => "*".to_owned(),
            n => self.zones[i % n].clone(),
        }
    }
}

/// What a run did and found.
#[derive(Clone, Debug)]
pub struct Report {
    pub seed: u64,
    pub violations: Vec<Violation>,
    /// A hash of everything the run observed, in order: equal for two runs of one seed.
    pub trace: u64,
    pub acked: usize,
    pub failed: usize,
    pub unknown: usize,
    pub crashes: usize,
    /// Incarnation head writes held through a pause past the lease (each had to be refused).
    pub zombie_attempts: u64,
    /// Reads during the run (read-backs, Kafka fetches) and the entries they returned.
    pub reads: usize,
    pub read_entries: usize,
    /// Share groups: records delivered and acknowledgements answered.
    pub share_deliveries: usize,
    pub share_acks: usize,
    pub meta_faults: u64,
    /// Virtual milliseconds the run took.
    pub virtual_ms: u64,
    /// Set when the run could not finish (a setup step kept failing).
    pub error: Option<String>,
    /// With violations: the trace cut down to what bears on them ([`Trace::minimal`]).
    pub minimal_trace: Vec<String>,
}

/// Milliseconds of a fixed epoch plus tokio's (virtual) time since the run started. The epoch
/// (2096) lies after any real time the in-memory object store stamps objects with, so an object
/// is never younger than zero to the cleaner.
#[derive(Debug)]
pub(crate) struct SimClock(pub(crate) tokio::time::Instant);

impl Clock for SimClock {
    fn now_ms(&self) -> i64 {
        4_000_000_000_000 + i64::try_from(self.0.elapsed().as_millis()).unwrap_or(i64::MAX)
    }
}

/// The trace: a running hash of observations, and the observations themselves (virtual ms
/// since the start, and how they print), for the minimal trace of a failing run.
#[derive(Debug)]
pub(crate) struct Trace {
    hash: std::collections::hash_map::DefaultHasher,
    start: tokio::time::Instant,
    events: Vec<(u64, String)>,
}

/// Whether trace event `t` is about append `id`: an append, batch, answer or refusal event of
/// it, or a read that returned it.
pub fn names(t: &str, id: u64) -> bool {
    ["append", "batch", "answered", "refused"]
        .iter()
        .any(|k| t.starts_with(&format!("(\"{k}\", {id},")))
        || t.contains(&format!("id: {id} "))
}

/// Trace events of faults and maintenance: kept in a minimal trace near the events it keeps.
const CONTEXT: &[&str] =
    &["(\"pause\"", "(\"crash", "(\"compactor crash\"", "(\"trimmed\"", "(\"cleaned\""];

impl Trace {
    pub(crate) fn new() -> Trace {
        // DefaultHasher::new() has fixed keys: the same input hashes the same in every run.
        Trace {
            hash: std::collections::hash_map::DefaultHasher::new(),
            start: tokio::time::Instant::now(),
            events: Vec::new(),
        }
    }

    /// The hash of everything recorded.
    pub(crate) fn finish(&self) -> u64 {
        self.hash.finish()
    }

    /// Virtual milliseconds since the run started.
    pub(crate) fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub(crate) fn record(&mut self, what: impl Hash + std::fmt::Debug) {
        let at = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let text = format!("{what:?}");
        if std::env::var_os("SIM_TRACE").is_some() {
            eprintln!("trace {at} ms {text}");
        }
        what.hash(&mut self.hash);
        self.events.push((at, text));
    }

    /// The events that name an append the first violation names (an append's, a batch's, an
    /// answer's or refusal's id, or a read that returned it), and the faults and maintenance
    /// (crashes, pauses, trims, cleaner cycles) from 5 s before the first of them to the last:
    /// what a reader needs to follow the failure.
    pub(crate) fn minimal(&self, violations: &[Violation]) -> Vec<String> {
        let named: std::collections::BTreeSet<u64> =
            violations.iter().take(1).flat_map(Violation::names).collect();
        let hits = |t: &str| named.iter().any(|id| names(t, *id));
        let kept: Vec<usize> =
            self.events.iter().enumerate().filter(|(_, (_, t))| hits(t)).map(|(i, _)| i).collect();
        let (Some(first), Some(last)) = (kept.first(), kept.last()) else {
            return self
                .events
                .iter()
                .filter(|(_, t)| CONTEXT.iter().any(|c| t.starts_with(c)))
                .map(|(at, t)| format!("{at} ms {t}"))
                .collect();
        };
        let from = self.events[*first].0.saturating_sub(5000);
        let to = self.events[*last].0;
        self.events
            .iter()
            .enumerate()
            .filter(|(i, (at, t))| {
                kept.binary_search(i).is_ok()
                    || (*at >= from && *at <= to && CONTEXT.iter().any(|c| t.starts_with(c)))
            })
            .map(|(_, (at, t))| format!("{at} ms {t}"))
            .collect()
    }
}

/// A writer's Kafka broker, its node id, its group coordinator's state, and its tasks
/// (checkpoints, the coordinator's ticks; aborted when it crashes).
pub(crate) struct Broker {
    pub(crate) broker: Arc<brokers::LogBroker>,
    pub(crate) node: i32,
    pub(crate) groups: Arc<kafka::groups::Groups>,
    task: tokio::task::JoinHandle<()>,
}

pub(crate) struct Shared {
    pub(crate) rng: Rng,
    writers: Vec<Option<LogStorage>>,
    /// Each writer slot's Kafka broker (Kafka plans).
    pub(crate) brokers: Vec<Option<Broker>>,
    /// The reader role's read-only Kafka broker (Kafka plans): caches of its own, rebuilt
    /// cold when the nemesis restarts it.
    pub(crate) reader: Option<Arc<brokers::LogBroker>>,
    pub(crate) history: History,
    pub(crate) trace: Trace,
    /// The highest hard trim of each log completed so far.
    pub(crate) floors: std::collections::BTreeMap<u64, u64>,
    /// Each hard trim completed: when, of which log, to where (what Kafka reads are checked
    /// against once it has had time to reach every broker).
    pub(crate) trims: Vec<(tokio::time::Instant, u64, u64)>,
    /// Each writer slot's gate to the metadata store (the nemesis pauses it).
    gates: Vec<Option<Arc<Gated>>>,
    /// A crash point armed by the nemesis: the writer of this slot stops for good at this step
    /// and says so.
    armed: Option<(usize, WriterStep, tokio::sync::oneshot::Sender<()>)>,
}

pub(crate) type SharedRef = Arc<Mutex<Shared>>;

pub(crate) fn config(id: &str, zone: &str, kafka: bool) -> LogStorageConfig {
    let mut c = LogStorageConfig::new("sim", id);
    c.zone = zone.to_owned();
    if kafka {
        // A Kafka address makes the writer take a node id when it registers.
        c.kafka_advertise = format!("{id}.sim:9092");
    }
    c.flush_interval = Duration::from_millis(5);
    c.lease_ttl = Duration::from_secs(4);
    c.flush_deadline = Duration::from_secs(2);
    c.append_timeout = Duration::from_secs(2);
    c.tail_cache_bytes = 1 << 20;
    c.hedge_quantile = Some(0.9);
    c
}

/// A reader role's Kafka broker: read-only, over a reader with caches of its own (1 MiB of
/// object ranges, 64 index pages) and the catalog.
fn reader_broker(
    meta: &Arc<dyn MetadataStore>,
    objects: &Arc<dyn ObjectStore>,
) -> Arc<brokers::LogBroker> {
    let reader =
        logstore::LogReader::new(meta.clone(), objects.clone(), "sim").with_caches(1 << 20, 64);
    let catalog = catalog::Catalog::new(meta.clone(), reader.clone(), "sim");
    Arc::new(brokers::LogBroker::reader(catalog, "sim", reader))
}

/// A started writer: its storage, its gate to the metadata store, its broker (Kafka plans).
type Opened = (LogStorage, Arc<Gated>, Option<Broker>);

/// The stores a writer starts on, and the run's count of zombie commits its gate adds to.
#[derive(Clone)]
struct Stores {
    meta: Arc<dyn MetadataStore>,
    objects: Arc<dyn ObjectStore>,
    clock: Arc<dyn Clock>,
    zombies: Arc<crate::meta_faults::Zombies>,
    /// Writers' brokers write transaction markers and look for transactions past their
    /// timeout (the transactions plan).
    txns: bool,
}

/// Starts writer `id` in `zone` behind a gate of its own, with a Kafka broker if `kafka`.
async fn open(id: &str, zone: &str, kafka: bool, stores: &Stores) -> Result<Opened, String> {
    let Stores { meta, objects, clock, zombies, txns } = stores;
    let mut last = String::new();
    for _ in 0..50 {
        let gate = Gated::new(meta.clone(), zombies.clone());
        let through: Arc<dyn MetadataStore> = gate.clone();
        let cfg = config(id, zone, kafka);
        match LogStorage::open(through.clone(), objects.clone(), cfg, clock.clone()).await {
            Ok(w) if !kafka => return Ok((w, gate, None)),
            Ok(w) => match logstore::membership::node_id(through.as_ref(), "sim", id).await {
                Ok(node) => {
                    let catalog = catalog::Catalog::new(through, w.reader().clone(), "sim")
                        .with_followed_streams();
                    let broker = Arc::new(
                        brokers::LogBroker::writer(catalog, "sim", w.clone()).with_node_id(node),
                    );
                    let (stop, shutdown) = role::Shutdown::channel();
                    let b = broker.as_ref().clone();
                    let groups = Arc::new(
                        kafka::groups::Groups::new(Duration::ZERO)
                            .with_member_id_prefix(format!("{id}-{node}")),
                    );
                    let (ticking, storing) = (groups.clone(), broker.clone());
                    let txns = txns.then(|| crate::txns::broker_tasks(broker.clone()));
                    let task = tokio::spawn(async move {
                        let _stop = stop;
                        // The coordinator's ticks, as the Kafka listener runs them.
                        let ticks = async move {
                            loop {
                                tokio::time::sleep(Duration::from_millis(200)).await;
                                ticking.tick(tokio::time::Instant::now().into_std());
                                ticking.store_changed(storing.as_ref()).await;
                            }
                        };
                        let txns = async move {
                            if let Some(t) = txns {
                                t.await
                            }
                        };
                        tokio::join!(b.checkpoints(shutdown), ticks, txns);
                    });
                    return Ok((w, gate, Some(Broker { broker, node, groups, task })));
                }
                Err(e) => {
                    w.abort();
                    last = e.to_string();
                }
            },
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("writer {id} did not start: {last}"))
}

/// Runs the scenario for `seed` on a runtime of its own.
pub fn run(seed: u64, plan: &Plan) -> Report {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return failed(seed, format!("runtime: {e}")),
    };
    // Made on the runtime (it starts a task there).
    let store = Arc::new(rt.block_on(async { metadata::MemoryStore::new() }));
    let kept = Arc::downgrade(&store);
    let mut report = if plan.compacted {
        rt.block_on(crate::compacted::simulate(seed, plan.clone(), store))
    } else {
        rt.block_on(simulate(seed, plan.clone(), store))
    };
    // Every task is gone with the runtime: whatever still holds the run's metadata store is
    // a reference cycle, leaking the run's state (a `make dst` process runs thousands).
    drop(rt);
    if kept.strong_count() > 0 && report.error.is_none() {
        report.error = Some(format!(
            "the run's state outlived it: {} references to its metadata store remain",
            kept.strong_count()
        ));
    }
    report
}

pub(crate) fn failed(seed: u64, error: String) -> Report {
    Report {
        seed,
        violations: Vec::new(),
        trace: 0,
        acked: 0,
        failed: 0,
        unknown: 0,
        crashes: 0,
        zombie_attempts: 0,
        reads: 0,
        read_entries: 0,
        share_deliveries: 0,
        share_acks: 0,
        meta_faults: 0,
        virtual_ms: 0,
        error: Some(error),
        minimal_trace: Vec::new(),
    }
}

async fn simulate(seed: u64, plan: Plan, store: Arc<metadata::MemoryStore>) -> Report {
    let start = tokio::time::Instant::now();
    let root = Rng::new(seed);
    let faulty_meta = FaultyMeta::new(store, plan.meta, root.fork(1));
    let meta: Arc<dyn MetadataStore> = faulty_meta.clone();
    let (faulty_objects, faults) =
        FaultyStore::new(Arc::new(objstore::object_store::memory::InMemory::new()));
    let objects: Arc<dyn ObjectStore> = faulty_objects;
    // An object store's latency, so PUTs overlap appends.
    faults.delay(Op::Put, Duration::from_millis(8));
    let clock: Arc<dyn Clock> = Arc::new(SimClock(start));
    let stores = Stores {
        meta: meta.clone(),
        objects: objects.clone(),
        clock: clock.clone(),
        zombies: Arc::default(),
        txns: plan.transactions > 0,
    };

    let (mut writers, mut gates, mut brokers) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..plan.writers {
        match open(&format!("w{i}"), &plan.zone(i), plan.kafka, &stores).await {
            Ok((w, g, b)) => {
                writers.push(Some(w));
                gates.push(Some(g));
                brokers.push(b);
            }
            Err(e) => return failed(seed, e),
        }
    }
    let Some(Some(first)) = writers.first() else { return failed(seed, "no writer".into()) };
    let (logs, lakes) = match create_logs(&plan, first, &meta, &root).await {
        Ok(created) => created,
        Err(e) => return failed(seed, e),
    };
    let reader_node = plan.kafka.then(|| reader_broker(&meta, &objects));
    let shared: SharedRef = Arc::new(Mutex::new(Shared {
        rng: root.fork(2),
        writers,
        brokers,
        reader: reader_node,
        history: History::default(),
        trace: Trace::new(),
        floors: Default::default(),
        trims: Vec::new(),
        gates,
        armed: None,
    }));
    for slot in 0..plan.writers {
        let w = shared.lock().writers[slot].clone();
        if let Some(w) = w {
            arm_hook(&shared, slot, &w);
        }
    }

    // Faults on.
    faulty_meta.set_on(true);
    let fraction = |tag: u64, p: f64| Trigger::Fraction { p, seed: root.fork(tag).next_u64() };
    faults.add(Op::Put, fraction(3, plan.put_fail), Action::Fail(FaultError::Unavailable));
    faults.add(Op::Put, fraction(4, plan.put_lose), Action::LoseResponse(FaultError::Unavailable));
    faults.add(Op::Get, fraction(5, plan.get_fail), Action::Fail(FaultError::Unavailable));
    faults.add(Op::Get, fraction(7, plan.get_slow), Action::Delay(Duration::from_millis(400)));
    faults.add(Op::Put, fraction(8, plan.put_slow), Action::Delay(Duration::from_millis(300)));

    let mut clients = spawn_clients(&plan, &logs, &shared);
    let nemesis = {
        let (shared, stores) = (shared.clone(), stores.clone());
        let plan = plan.clone();
        tokio::spawn(async move { nemesis(&plan, shared, stores).await })
    };
    let observer = {
        let (shared, logs) = (shared.clone(), logs.clone());
        tokio::spawn(async move { observe(logs, shared).await })
    };
    let mut upkeep = Vec::new();
    if plan.maintenance {
        let (s1, s2, s3) = (shared.clone(), shared.clone(), shared.clone());
        let (m, o, c) = (meta.clone(), objects.clone(), clock.clone());
        let (l, l2) = (logs.clone(), logs.clone());
        let (lk, ck) = (Arc::new(lakes.clone()), clock.clone());
        upkeep.push(tokio::spawn(async move { compact(s1, l2, lk, ck).await }));
        upkeep.push(tokio::spawn(async move { clean(s2, m, o, c).await }));
        upkeep.push(tokio::spawn(async move { trim(l, s3).await }));
    }
    let mut consumers = crate::groups::spawn(&plan, &shared);
    for m in 0..plan.shares {
        let (shared, partitions) = (shared.clone(), u32::try_from(plan.logs).unwrap_or(1));
        consumers
            .push(tokio::spawn(async move { crate::shares::member(m, partitions, shared).await }));
    }
    consumers.extend(crate::txns::readers(&plan, &logs, &shared));
    if plan.kafka {
        for c in 0..2u64 {
            let (shared, logs) = (shared.clone(), logs.clone());
            consumers
                .push(tokio::spawn(async move { crate::kafka::consumer(c, logs, shared).await }));
        }
    }
    while clients.join_next().await.is_some() {}
    let crashes = nemesis.await.unwrap_or(0);
    observer.abort();
    for t in consumers {
        t.abort();
    }
    for t in upkeep {
        t.abort();
    }

    // Quiet: faults off, every outcome settles (a crashed writer's lease expires).
    faulty_meta.set_on(false);
    faults.clear();
    tokio::time::sleep(Duration::from_secs(10)).await;
    if plan.shares > 0 {
        crate::shares::settle(&logs, &shared).await;
    }
    let reader = match open("final", "*", false, &stores).await {
        Ok((w, _, _)) => w,
        Err(e) => return failed(seed, e),
    };
    read_finals(&reader, &logs, plan.kafka, &shared).await;
    if plan.transactions > 0 {
        crate::txns::read_finals(&logs, &shared).await;
    }
    {
        let s = shared.lock();
        for w in s.writers.iter().flatten() {
            w.abort();
        }
        for b in s.brokers.iter().flatten() {
            b.task.abort();
        }
    }
    let orphans = orphans(&reader, &meta, &objects, &clock, Arc::new(lakes)).await;
    reader.abort();
    let mut s = shared.lock();
    s.history.zombies = stores.zombies.landed.load(std::sync::atomic::Ordering::Relaxed);
    match orphans {
        Ok(0) => {}
        Ok(n) => s.history.orphans = n,
        Err(e) => return failed(seed, format!("orphan check: {e}")),
    }
    report(seed, &mut s, start, crashes, &stores, &faulty_meta)
}

/// The plan's clients: plain ones, or Kafka idempotent producers (in zones, if the plan has
/// them), and its transactional producers.
fn spawn_clients(plan: &Plan, logs: &[u64], shared: &SharedRef) -> tokio::task::JoinSet<()> {
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..plan.clients {
        let (shared, logs) = (shared.clone(), logs.to_vec());
        let appends = plan.appends;
        if plan.kafka {
            let zone = match c % 3 {
                z if z > 0 && plan.producer_zones => plan.zones.get(z - 1).cloned(),
                _ => None,
            };
            clients.spawn(async move {
                crate::kafka::producer(c as u64, appends, logs, zone, shared).await
            });
        } else {
            clients.spawn(async move { client(c as u64, appends, logs, shared).await });
        }
    }
    for t in 0..plan.transactions {
        let (shared, logs) = (shared.clone(), logs.to_vec());
        let txns = plan.appends;
        // With producer zones, a third each: none, the first zone, the second.
        let zone = match t % 3 {
            z if z > 0 && plan.producer_zones => plan.zones.get(z as usize - 1).cloned(),
            _ => None,
        };
        clients.spawn(async move { crate::txns::producer(t, txns, logs, zone, shared).await });
    }
    clients
}

/// The plan's logs: a Kafka topic's partitions (a lake stream, its identity from the seed so
/// owners are alike in every run of it), or plain logs; and the lake logs among them.
async fn create_logs(
    plan: &Plan,
    first: &LogStorage,
    meta: &Arc<dyn MetadataStore>,
    root: &Rng,
) -> Result<(Vec<u64>, maintenance::lakes::LakeLogs), String> {
    let mut logs = Vec::new();
    // The Kafka topic is a lake stream: its compacted segments are its table's Parquet files,
    // and consumers read compacted ranges from their row groups.
    let mut lakes =
        maintenance::lakes::LakeLogs { base_uri: "memory://sim".to_owned(), ..Default::default() };
    if plan.kafka {
        let catalog = catalog::Catalog::new(meta.clone(), first.reader().clone(), "sim");
        let partitions = u32::try_from(plan.logs).unwrap_or(1);
        let identity = format!("sim-topic-{}", root.fork(6).next_u64());
        let info = catalog
            .create_with_identity(crate::kafka::TOPIC, partitions, Default::default(), identity)
            .await
            .map_err(|e| format!("create topic: {e}"))?;
        logs.extend(info.partitions.iter().map(|l| l.0));
        for (partition, log) in info.partitions.iter().enumerate() {
            let lake = maintenance::lakes::LakeLog {
                stream_identity: info.identity.clone(),
                partition: u32::try_from(partition).unwrap_or(0),
            };
            lakes.logs.insert(*log, lake);
        }
    } else {
        for _ in 0..plan.logs {
            logs.push(first.create_log().await.map_err(|e| format!("create_log: {e}"))?.0);
        }
    }
    Ok((logs, lakes))
}

/// Reads every log to its end through `reader` into the history (what it holds, where it
/// starts, what could not be read).
async fn read_finals(reader: &LogStorage, logs: &[u64], kafka: bool, shared: &SharedRef) {
    for log in logs {
        let (start, entries, error) = read_all(reader, *log, kafka).await;
        let mut s = shared.lock();
        s.history.finals.insert(*log, entries);
        s.history.starts.insert(*log, start);
        if let Some((at, e)) = error {
            s.history.unreadable.push((*log, at, e));
        }
    }
}

/// The run's report from its history, checked; then the run's state is let go.
fn report(
    seed: u64,
    s: &mut Shared,
    start: tokio::time::Instant,
    crashes: usize,
    stores: &Stores,
    faulty_meta: &FaultyMeta,
) -> Report {
    let finals: Vec<(u64, Vec<Seen>)> =
        s.history.finals.iter().map(|(l, e)| (*l, e.clone())).collect();
    finals.hash(&mut s.trace.hash);
    let violations = check(&s.history);
    let count =
        |o: fn(&Outcome) -> bool| s.history.appends.iter().filter(|a| o(&a.outcome)).count();
    let report = Report {
        seed,
        trace: s.trace.hash.finish(),
        minimal_trace: if violations.is_empty() {
            Vec::new()
        } else {
            s.trace.minimal(&violations)
        },
        violations,
        acked: count(|o| matches!(o, Outcome::Ok(_))),
        failed: count(|o| *o == Outcome::Failed),
        unknown: count(|o| *o == Outcome::Unknown),
        crashes,
        zombie_attempts: stores.zombies.held.load(std::sync::atomic::Ordering::Relaxed),
        reads: s.history.reads.len(),
        read_entries: s.history.reads.iter().map(|r| r.seen.len()).sum(),
        share_deliveries: s.history.shares.deliveries.len(),
        share_acks: s.history.shares.acks.len(),
        meta_faults: faulty_meta.counts.total(),
        virtual_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
        error: None,
    };
    // The writers' crash-point hooks hold `shared`, and `shared` holds the writers: a cycle.
    // Broken here, or every run's state (history, trace) would outlive it — gigabytes over a
    // `make dst` process's thousands of runs.
    s.writers.clear();
    s.brokers.clear();
    s.gates.clear();
    s.reader = None;
    s.history = History::default();
    s.trace.events = Vec::new();
    report
}

/// WAL objects never reclaimed: with every writer stopped but `last` (their leases, and an
/// interrupted compactor cycle's 30 s claim lease, left to expire), every chunk compacted (two compactor cycles: an idle log's recent chunks spill on
/// the second) and one cleaner cycle with no grace, every WAL object is below the cutoff and
/// referenced by no index, so none may be left.
async fn orphans(
    last: &LogStorage,
    meta: &Arc<dyn MetadataStore>,
    objects: &Arc<dyn ObjectStore>,
    clock: &Arc<dyn Clock>,
    lakes: Arc<maintenance::lakes::LakeLogs>,
) -> Result<u64, String> {
    use maintenance::compactor::{CompactorConfig, IdleLogs, compact_all};
    tokio::time::sleep(Duration::from_secs(31)).await;
    let idle = IdleLogs::default();
    let cfg = CompactorConfig {
        min_chunks: 1,
        target_segment_bytes: 64 << 10,
        settle_after: Duration::ZERO,
        lakes,
        clock: clock.clone(),
        ..Default::default()
    };
    // Until two cycles in a row find nothing to do (a log is idle, and its recent chunks
    // spilled, once its head stayed put a whole cycle).
    let mut quiet = 0;
    for _ in 0..8 {
        let r = compact_all(last.reader().clone(), "final", cfg.clone(), None, &idle)
            .await
            .map_err(|e| e.to_string())?;
        if std::env::var_os("SIM_DEBUG").is_some() {
            let (done, skipped, failed) = (r.compacted.len(), &r.skipped, &r.failed);
            let lake = r.compacted.iter().filter(|c| c.table_snapshot.is_some()).count();
            eprintln!(
                "sim: final compaction: {done} compacted ({lake} into lake tables), skipped {skipped:?}, failed {failed:?}"
            );
        }
        quiet = if r.compacted.is_empty() && r.failed.is_empty() { quiet + 1 } else { 0 };
        if quiet == 2 {
            break;
        }
    }
    let mut cleaner =
        maintenance::cleaner::Cleaner::new(meta.clone(), objects.clone(), "sim", clock.clone());
    cleaner.grace = Duration::ZERO;
    let cycle = cleaner.cycle().await.map_err(|e| e.to_string())?;
    let left = maintenance::cleaner::survey(
        objects.as_ref(),
        cycle.cutoff.cutoff,
        Duration::ZERO,
        clock.now_ms(),
    )
    .await
    .map_err(|e| e.to_string())?;
    if std::env::var_os("SIM_DEBUG").is_some()
        && left.kept.objects + left.young.objects + left.reclaimable.objects > 0
    {
        eprintln!("sim: left after cleaning: {left:?}, cutoff {:?}", cycle.cutoff);
    }
    Ok(left.kept.objects + left.young.objects + left.reclaimable.objects)
}

/// The index of a filled place in `slots`, chosen by `rng`.
pub(crate) fn pick_live<T>(rng: &mut Rng, slots: &[Option<T>]) -> Option<usize> {
    let live: Vec<usize> =
        slots.iter().enumerate().filter(|(_, w)| w.is_some()).map(|(i, _)| i).collect();
    live.get(usize::try_from(rng.below(live.len() as u64)).ok()?).copied()
}

/// A live writer, chosen by the run's generator.
fn pick(shared: &SharedRef) -> Option<LogStorage> {
    let mut s = shared.lock();
    let s = &mut *s;
    let i = pick_live(&mut s.rng, &s.writers)?;
    s.writers[i].clone()
}

/// How an append's answer reads as an outcome.
fn outcome_of(
    answer: Result<
        Result<logstore::LogEntryHeader, logstore::LogError>,
        tokio::time::error::Elapsed,
    >,
    id: u64,
    log: u64,
) -> Outcome {
    match answer {
        Ok(Ok(h)) => Outcome::Ok(h.offset),
        Ok(Err(e)) if e.outcome_unknown() => Outcome::Unknown,
        Ok(Err(e)) => {
            if std::env::var_os("SIM_DEBUG").is_some() {
                eprintln!("sim: append {id} to log {log} failed: {e:?}");
            }
            Outcome::Failed
        }
        Err(_) => Outcome::Unknown,
    }
}

async fn client(c: u64, appends: usize, logs: Vec<u64>, shared: SharedRef) {
    let mut i = 0u64;
    while i < appends as u64 {
        // Now and then several appends in flight at once to one writer and log.
        let (log, think, read_back, burst) = {
            let mut s = shared.lock();
            let log = logs[usize::try_from(s.rng.below(logs.len() as u64)).unwrap_or(0)];
            let burst = if s.rng.chance(0.3) { 2 + s.rng.below(3) } else { 1 };
            (log, s.rng.below(20), s.rng.chance(0.2), burst)
        };
        let Some(w) = pick(&shared) else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let ids: Vec<u64> = (i..i + burst).map(|k| (c << 32) | k).collect();
        i += burst;
        // Admitted one after the other (so they commit in that order), then awaited together,
        // as the Kafka front end pipelines a connection's batches.
        let mut calls = Vec::with_capacity(ids.len());
        for id in &ids {
            let id = *id;
            let admitted = tokio::time::timeout(
                Duration::from_secs(3),
                w.submit_in_slot(LogId(log), "*", 1, payload(id, 64), Conditions::default()),
            )
            .await;
            calls.push(async move {
                let answer = match admitted {
                    Ok(Ok(commit)) => tokio::time::timeout(Duration::from_secs(3), commit).await,
                    Ok(Err(e)) => Ok(Err(e)),
                    Err(elapsed) => Err(elapsed),
                };
                (id, outcome_of(answer, id, log))
            });
        }
        let answers = futures::future::join_all(calls).await;
        {
            let mut s = shared.lock();
            for (id, outcome) in &answers {
                s.history.appends.push(Append { id: *id, log, records: 1, outcome: *outcome });
                s.trace.record(("append", *id, log, *outcome));
            }
            if ids.len() > 1 {
                s.history.pipelined.push(ids.clone());
            }
        }
        let acked = answers.iter().find_map(|(_, o)| match o {
            Outcome::Ok(offset) => Some(*offset),
            _ => None,
        });
        if read_back && let Some(offset) = acked {
            // Near what it appended, or anywhere below (trimmed ranges included).
            let from = {
                let mut s = shared.lock();
                if s.rng.chance(0.5) { offset.saturating_sub(3) } else { s.rng.below(offset + 1) }
            };
            let floor = shared.lock().floors.get(&log).copied().unwrap_or(0);
            if let Ok(entries) = w.read_entries(LogId(log), from, 8, 1 << 20).await {
                let seen: Vec<Seen> = entries.iter().map(|e| seen(e, false)).collect();
                // The end after the read: everything the read returned is below it.
                let high = w.info(LogId(log)).await.ok().map(|i| i.next_offset);
                let mut s = shared.lock();
                s.trace.record(("read", log, &seen));
                s.history.reads.push(crate::history::Read { log, floor, seen, high });
            }
        }
        tokio::time::sleep(Duration::from_millis(think)).await;
    }
}

/// Installs the crash-point hook on the writer of `slot`: when the nemesis armed that slot and
/// step, the writer stops there for good and the nemesis is told.
fn arm_hook(shared: &SharedRef, slot: usize, w: &LogStorage) {
    let shared = shared.clone();
    w.set_step_hook(Arc::new(move |step| {
        let fire = {
            let mut s = shared.lock();
            match &s.armed {
                Some((at, armed_step, _)) if *at == slot && *armed_step == step => s.armed.take(),
                _ => None,
            }
        };
        Box::pin(async move {
            if let Some((_, _, told)) = fire {
                let _ = told.send(());
                futures::future::pending::<()>().await;
            }
        })
    }));
}

/// Now and then, one of: a writer crashed at once, crashed at a crash point (its WAL object
/// stored but not committed, or committed but not answered), or paused past its lease and
/// resumed; a crashed writer is replaced by a new one. How many rounds it ran.
async fn nemesis(plan: &Plan, shared: SharedRef, stores: Stores) -> usize {
    let (meta, objects) = (&stores.meta, &stores.objects);
    let (rounds, writers) = (plan.crashes, plan.writers);
    let mut done = 0;
    for k in 0..rounds {
        let (wait, victim, gap, action, pause) = {
            let mut s = shared.lock();
            let r = &mut s.rng;
            let kinds = if plan.kafka { 5 } else { 4 };
            (
                r.below(800) + 100,
                r.below(writers as u64),
                r.below(600),
                r.below(kinds),
                r.below(3000),
            )
        };
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let slot = usize::try_from(victim).unwrap_or(0);
        if action == 4 {
            // The reader role restarted: a new one, caches cold.
            let fresh = reader_broker(meta, objects);
            let mut s = shared.lock();
            s.reader = Some(fresh);
            s.trace.record(("reader restarted", k));
            done += 1;
            continue;
        }
        if action == 3 {
            // Paused past its 4 s lease, then running on (its calls resume; a commit it had
            // sent applies late, unless refused).
            let gate = shared.lock().gates.get(slot).cloned().flatten();
            if let Some(g) = gate {
                g.pause_until(tokio::time::Instant::now() + Duration::from_millis(5000 + pause));
                shared.lock().trace.record(("pause", k, slot));
                done += 1;
            }
            continue;
        }
        if action > 0 {
            let step = if action == 1 { WriterStep::Written } else { WriterStep::Committed };
            let (told, fired) = tokio::sync::oneshot::channel();
            shared.lock().armed = Some((slot, step, told));
            let hit = tokio::time::timeout(Duration::from_secs(2), fired).await.is_ok();
            shared.lock().armed = None;
            shared.lock().trace.record(("crash point", k, slot, action, hit));
        }
        let (crashed, broker) = {
            let mut s = shared.lock();
            let b = s.brokers.get_mut(slot).and_then(Option::take);
            (s.writers.get_mut(slot).and_then(Option::take), b)
        };
        if let Some(b) = broker {
            b.task.abort();
        }
        if let Some(w) = crashed {
            w.abort();
            done += 1;
            shared.lock().trace.record(("crash", k, slot));
        }
        tokio::time::sleep(Duration::from_millis(gap)).await;
        let id = format!("w{}-{k}", slot);
        if let Ok((w, g, b)) = open(&id, &plan.zone(slot), plan.kafka, &stores).await {
            arm_hook(&shared, slot, &w);
            let mut s = shared.lock();
            if let Some(place) = s.writers.get_mut(slot) {
                *place = Some(w);
            }
            if let Some(place) = s.gates.get_mut(slot) {
                *place = Some(g);
            }
            if let Some(place) = s.brokers.get_mut(slot) {
                *place = b;
            }
        }
    }
    done
}

/// Records each log's end every 25 ms, as one observer sees it.
async fn observe(logs: Vec<u64>, shared: SharedRef) {
    loop {
        tokio::time::sleep(Duration::from_millis(25)).await;
        let Some(w) = pick(&shared) else { continue };
        for log in &logs {
            if let Ok(info) = w.info(LogId(*log)).await {
                let mut s = shared.lock();
                s.trace.record(("end", *log, info.next_offset, info.last_stable_offset));
                s.history.watermarks.push((*log, info.next_offset));
                s.history.stable_offsets.push((*log, info.last_stable_offset));
            }
        }
    }
}

/// A log's first offset and every entry from it, and where and why reading stopped short (a
/// read that fails with every fault off: an index naming what is gone).
async fn read_all(
    w: &LogStorage,
    log: u64,
    kafka: bool,
) -> (u64, Vec<Seen>, Option<(u64, String)>) {
    let info = match w.info(LogId(log)).await {
        Ok(i) => i,
        Err(e) => return (0, Vec::new(), Some((0, e.to_string()))),
    };
    let mut out = Vec::new();
    let mut at = info.first_offset;
    while at < info.next_offset {
        let entries = match w.read_entries(LogId(log), at, 1000, 16 << 20).await {
            Ok(es) => es,
            Err(e) => return (info.first_offset, out, Some((at, e.to_string()))),
        };
        let Some(last) = entries.last() else { break };
        at = last.header.offset + u64::from(last.header.record_count);
        out.extend(entries.iter().map(|e| seen(e, kafka)));
    }
    (info.first_offset, out, None)
}

/// An entry as the history records it: the id in its payload, or for Kafka in its batch's
/// first record's value; one without our id reads as id `u64::MAX`, which no client appended
/// (so the checker reports it).
pub(crate) fn seen(e: &logstore::LogEntry, kafka: bool) -> Seen {
    let control = || recordbatch::BatchHeader::parse(&e.payload).is_ok_and(|h| h.is_control());
    let id = match kafka {
        true if control() => Some(crate::history::MARKER),
        true => crate::kafka::id_in(&e.payload),
        false => id_of(&e.payload),
    };
    Seen { offset: e.header.offset, records: e.header.record_count, id: id.unwrap_or(u64::MAX) }
}

/// Compaction cycles over every log now and then (2 chunks make a log eligible); one round in
/// five, instead, a compactor that crashes at one of its steps (claimed, segment written, index
/// swapped) on one log, its claim left to expire with its lease.
async fn compact(
    shared: SharedRef,
    logs: Vec<u64>,
    lakes: Arc<maintenance::lakes::LakeLogs>,
    clock: Arc<dyn Clock>,
) {
    use maintenance::compactor::{Compactor, CompactorConfig, IdleLogs, Step};
    let idle = IdleLogs::default();
    let cfg = CompactorConfig {
        min_chunks: 2,
        target_segment_bytes: 64 << 10,
        settle_after: Duration::ZERO,
        lakes,
        clock,
        ..Default::default()
    };
    let mut crashed = 0u64;
    loop {
        let (wait, crash, log, at) = {
            let mut s = shared.lock();
            let log = logs[usize::try_from(s.rng.below(logs.len() as u64)).unwrap_or(0)];
            (s.rng.below(150) + 30, s.rng.chance(0.2), log, s.rng.below(4))
        };
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let Some(w) = pick(&shared) else { continue };
        if crash {
            let reader = w.reader().clone();
            let Ok(lease) = reader.meta().lease_grant(Duration::from_secs(4)).await else {
                continue;
            };
            crashed += 1;
            let c = Compactor::new(reader, &format!("crashing-{crashed}"), lease, cfg.clone());
            let step =
                [Step::Claimed, Step::Written, Step::TableWritten, Step::Swapped][at as usize];
            let hook: maintenance::compactor::StepHook = Arc::new(move |s| {
                Box::pin(async move {
                    if s == step {
                        futures::future::pending::<()>().await;
                    }
                })
            });
            // The crash: the compaction stops at its step and is dropped there.
            let ended = tokio::time::timeout(
                Duration::from_secs(1),
                c.compact_log_with(LogId(log), Some(hook)),
            )
            .await;
            shared.lock().trace.record(("compactor crash", log, at, ended.is_err()));
            continue;
        }
        let report =
            maintenance::compactor::compact_all(w.reader().clone(), "c1", cfg.clone(), None, &idle)
                .await;
        let (compacted, lake) = report.map_or((0, 0), |r| {
            (r.compacted.len(), r.compacted.iter().filter(|c| c.table_snapshot.is_some()).count())
        });
        shared.lock().trace.record(("compacted", compacted, lake));
    }
}

/// Cleaner cycles now and then, with no grace at all: the low-water marks and the logs'
/// floors alone must keep every object still in use; some cycles stall between their cutoff
/// read and their deletes.
async fn clean(
    shared: SharedRef,
    meta: Arc<dyn MetadataStore>,
    objects: Arc<dyn ObjectStore>,
    clock: Arc<dyn Clock>,
) {
    let mut cleaner = maintenance::cleaner::Cleaner::new(meta, objects, "sim", clock);
    cleaner.grace = Duration::ZERO;
    // One cycle in five pauses 0.5–3 s between its cutoff read and its deletes (a stopped
    // cleaner resuming with an old cutoff).
    let stall = {
        let shared = shared.clone();
        maintenance::cleaner::Hook(Arc::new(move || {
            let pause = {
                let mut s = shared.lock();
                s.rng.chance(0.2).then(|| 500 + s.rng.below(2500))
            };
            Box::pin(async move {
                if let Some(ms) = pause {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
            })
        }))
    };
    cleaner.after_cutoff = Some(stall);
    cleaner.history = Some(Duration::from_secs(2));
    loop {
        let wait = shared.lock().rng.below(150) + 30;
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let (deleted, cutoff) = cleaner
            .cycle()
            .await
            .map_or((-1, 0), |r| ((r.deleted + r.segments_deleted) as i64, r.cutoff.cutoff));
        shared.lock().trace.record(("cleaned", deleted, cutoff));
    }
}

/// Hard trims now and then: a log, to somewhere below its end as last observed.
async fn trim(logs: Vec<u64>, shared: SharedRef) {
    loop {
        let (wait, log, cut) = {
            let mut s = shared.lock();
            let log = logs[usize::try_from(s.rng.below(logs.len() as u64)).unwrap_or(0)];
            (s.rng.below(600) + 300, log, s.rng.next_u64())
        };
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let end = {
            let s = shared.lock();
            s.history.watermarks.iter().rev().find(|(l, _)| *l == log).map_or(0, |(_, e)| *e)
        };
        let to = if end == 0 { continue } else { cut % (end / 2 + 1) };
        let Some(w) = pick(&shared) else { continue };
        if w.hard_trim(LogId(log), to).await.is_ok() {
            let mut s = shared.lock();
            let floor = s.floors.entry(log).or_insert(0);
            *floor = (*floor).max(to);
            s.trims.push((tokio::time::Instant::now(), log, to));
            s.trace.record(("trimmed", log, to));
        }
    }
}
