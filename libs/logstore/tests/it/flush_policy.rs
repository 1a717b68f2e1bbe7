//! The flush policies, on tokio's paused clock over in-memory stores: time is virtual, so what
//! is asserted is when the writer chose to flush, not how fast this machine is.

use std::sync::Arc;
use std::time::Duration;

use std::sync::Mutex;
use std::sync::atomic::Ordering;

use anyhow::{Result, ensure};
use bytes::Bytes;
use logstore::{FlushObserver, LogStorage, LogStorageConfig, SystemClock};
use metadata::MetadataStore;
use metadata::counting::CountingMeta;
use objstore::object_store::memory::InMemory;
use tokio::time::Instant;

use crate::faulty_meta::FaultyMeta;

/// A writer on `meta` and an in-memory object store.
async fn open(cfg: LogStorageConfig, meta: Arc<dyn MetadataStore>) -> Result<LogStorage> {
    Ok(LogStorage::open(meta, Arc::new(InMemory::new()), cfg, Arc::new(SystemClock)).await?)
}

fn memory() -> Arc<dyn MetadataStore> {
    Arc::new(metadata::MemoryStore::new())
}

async fn writer(min_flush_interval: Option<Duration>) -> Result<LogStorage> {
    let mut cfg = LogStorageConfig::new(testkit::unique_prefix("flush"), "w");
    cfg.flush_interval = Duration::from_secs(1);
    cfg.min_flush_interval = min_flush_interval;
    open(cfg, memory()).await
}

/// Eager: an append to an idle writer is flushed at once, not after `flush_interval`; under a
/// steady stream of appends a flush begins at most once per `min_flush_interval`, and each
/// append waits at most about that long.
#[tokio::test(start_paused = true)]
async fn an_eager_writer_flushes_an_idle_append_at_once_and_at_most_once_per_interval() -> Result<()>
{
    let min = Duration::from_millis(50);
    let w = writer(Some(min)).await?;
    let log = w.create_log().await?;
    let t0 = Instant::now();
    w.append(log, 1, Bytes::from_static(b"first"), None).await?;
    ensure!(t0.elapsed() < min, "an idle append waited {:?}", t0.elapsed());
    // 400 appends 5 ms apart: 2 s of virtual time.
    let (flushes0, t0) = (w.flushes(), Instant::now());
    let mut acks = Vec::new();
    for i in 0..400u64 {
        let w = w.clone();
        let due = t0 + Duration::from_millis(5 * i);
        acks.push(tokio::spawn(async move {
            tokio::time::sleep_until(due).await;
            w.append(log, 1, Bytes::from(format!("e{i}")), None).await?;
            anyhow::Ok(due.elapsed())
        }));
    }
    let mut slowest = Duration::ZERO;
    for a in acks {
        slowest = slowest.max(a.await??);
    }
    let (flushes, took) = (w.flushes() - flushes0, t0.elapsed());
    let bound = (took.as_millis() / min.as_millis()) as u64 + 1;
    ensure!(flushes <= bound, "{flushes} flushes in {took:?}: more than one per {min:?}");
    ensure!(flushes * 2 >= bound, "{flushes} flushes in {took:?}: appends were held back");
    ensure!(slowest <= min + Duration::from_millis(5), "an append waited {slowest:?}");
    ensure!(w.info(log).await?.next_offset == 401);
    w.shutdown().await;
    Ok(())
}

/// An eager writer (1 ms spacing, 1 s flush interval) with `eager_puts`, over an object store
/// whose every PUT takes `put`.
async fn eager_over_slow_puts(put: Duration, eager_puts: usize) -> Result<LogStorage> {
    let mut cfg = LogStorageConfig::new(testkit::unique_prefix("gather"), "w");
    cfg.flush_interval = Duration::from_secs(1);
    cfg.min_flush_interval = Some(Duration::from_millis(1));
    cfg.eager_puts = eager_puts;
    let (objects, faults) = objstore::faults::FaultyStore::new(Arc::new(InMemory::new()));
    faults.delay(objstore::faults::Op::Put, put);
    Ok(LogStorage::open(memory(), objects, cfg, Arc::new(SystemClock)).await?)
}

/// Eager flushes go out one PUT at a time: while one is being written, appends gather for the
/// next, which starts as soon as the PUT answers (group commit). A slow store gets fewer,
/// larger objects and no append waits for more than about two PUTs; an idle append still
/// goes at once.
#[tokio::test(start_paused = true)]
async fn an_eager_writer_gathers_appends_while_a_put_is_out() -> Result<()> {
    let put = Duration::from_millis(20);
    let w = eager_over_slow_puts(put, 1).await?;
    let log = w.create_log().await?;
    let t0 = Instant::now();
    w.append(log, 1, Bytes::from_static(b"first"), None).await?;
    ensure!(
        t0.elapsed() < put + Duration::from_millis(5),
        "an idle append took {:?}",
        t0.elapsed()
    );
    // An append every millisecond for 400 ms: about one flush per PUT, not one per append.
    let (flushes0, t0) = (w.flushes(), Instant::now());
    let slowest = steady(&w, log, 400, Duration::from_millis(1)).await?;
    let (flushes, took) = (w.flushes() - flushes0, t0.elapsed());
    let bound = (took.as_millis() / put.as_millis()) as u64 + 1;
    ensure!(flushes <= bound, "{flushes} flushes in {took:?}: more than one PUT out at a time");
    ensure!(slowest <= 2 * put + Duration::from_millis(5), "an append waited {slowest:?}");
    ensure!(w.info(log).await?.next_offset == 401);
    w.shutdown().await;
    Ok(())
}

/// With `eager_puts` 4, up to four eager PUTs are out at once: about four flushes per PUT's
/// time under the same stream, and no append waits a whole PUT behind another.
#[tokio::test(start_paused = true)]
async fn an_eager_writer_lets_eager_puts_out_at_once() -> Result<()> {
    let put = Duration::from_millis(20);
    let w = eager_over_slow_puts(put, 4).await?;
    let log = w.create_log().await?;
    let (flushes0, t0) = (w.flushes(), Instant::now());
    let slowest = steady(&w, log, 400, Duration::from_millis(1)).await?;
    let (flushes, took) = (w.flushes() - flushes0, t0.elapsed());
    let one_at_a_time = (took.as_millis() / put.as_millis()) as u64 + 1;
    ensure!(flushes > 2 * one_at_a_time, "{flushes} flushes in {took:?}: PUTs one at a time");
    ensure!(flushes <= 4 * one_at_a_time, "{flushes} flushes in {took:?}: over four PUTs out");
    ensure!(slowest < 2 * put, "an append waited {slowest:?}");
    ensure!(w.info(log).await?.next_offset == 400);
    w.shutdown().await;
    Ok(())
}

/// Without the eager policy an append waits for `flush_interval`, so appends close together
/// share one flush.
#[tokio::test(start_paused = true)]
async fn an_interval_writer_waits_for_the_flush_interval() -> Result<()> {
    let w = writer(None).await?;
    let log = w.create_log().await?;
    let (flushes0, t0) = (w.flushes(), Instant::now());
    let (a, b) = tokio::join!(
        w.append(log, 1, Bytes::from_static(b"a"), None),
        w.append(log, 1, Bytes::from_static(b"b"), None)
    );
    a?;
    b?;
    ensure!(t0.elapsed() >= Duration::from_secs(1), "acknowledged after {:?}", t0.elapsed());
    ensure!(w.flushes() - flushes0 == 1, "{} flushes", w.flushes() - flushes0);
    w.shutdown().await;
    Ok(())
}

/// An eager writer (no spacing, 1 s flush interval) hedging at `cfg.hedge_quantile`, over an
/// object store whose every PUT takes 20 ms but the `stalls` (the nth PUTs, each held `stall`),
/// with a log and 30 PUTs behind it (twenty times, the fewest hedging goes by, and ten more):
/// the writer, the store's faults, the log.
async fn warmed_over_stalls(
    mut cfg: LogStorageConfig,
    meta: Arc<dyn MetadataStore>,
    stalls: &[u64],
    stall: Duration,
) -> Result<(LogStorage, objstore::faults::FaultHandle, logstore::LogId)> {
    use objstore::faults::{Action, FaultyStore, Op, Trigger};
    cfg.flush_interval = Duration::from_secs(1);
    cfg.min_flush_interval = Some(Duration::ZERO);
    let (objects, faults) = FaultyStore::new(Arc::new(InMemory::new()));
    for n in stalls {
        faults.add(Op::Put, Trigger::Nth(*n), Action::Delay(stall));
    }
    faults.delay(Op::Put, HEDGED_PUT);
    let w = LogStorage::open(meta, objects, cfg, Arc::new(SystemClock)).await?;
    let log = w.create_log().await?;
    for i in 0..30 - faults.calls(Op::Put) {
        w.append(log, 1, Bytes::from(format!("e{i}")), None).await?;
    }
    ensure!(faults.calls(Op::Put) == 30, "{} PUTs before the stall", faults.calls(Op::Put));
    Ok((w, faults, log))
}

/// The PUT time of [`warmed_over_stalls`].
const HEDGED_PUT: Duration = Duration::from_millis(20);

/// Hedged PUTs (ARCHITECTURE §3.2): once the writer has enough PUT times, a PUT still out at
/// their quantile is raced by a second PUT of its object under a new WAL sequence; the append
/// is acknowledged once that one is stored, and its entry is read from it (the tail cache off:
/// a GET of the object the index names). Without hedging the same append waits out the stall.
#[tokio::test(start_paused = true)]
async fn a_stalled_put_is_hedged_under_a_new_sequence() -> Result<()> {
    use objstore::faults::Op;
    let put = HEDGED_PUT;
    for hedge in [Some(0.95), None] {
        let mut cfg = LogStorageConfig::new(testkit::unique_prefix("hedge"), "w");
        cfg.hedge_quantile = hedge;
        cfg.tail_cache_bytes = 0;
        // The 31st PUT stalls for 10 s.
        let (w, faults, log) =
            warmed_over_stalls(cfg, memory(), &[31], Duration::from_secs(10)).await?;
        let t0 = Instant::now();
        let h = w.append(log, 1, Bytes::from_static(b"stalled"), None).await?;
        let took = t0.elapsed();
        let entry = w.read_index_range(log, h.offset, 1).await?;
        let read = w.read_entries(log, h.offset, 1, u64::MAX).await?;
        ensure!(read.len() == 1 && read[0].payload == Bytes::from_static(b"stalled"));
        let object = objstore::keys::parse_wal_object(&entry[0].object);
        match hedge {
            Some(_) => {
                // The quantile (20 ms), then the second PUT (20 ms), then the commit.
                ensure!(took < 3 * put, "a hedged append took {took:?}");
                ensure!(faults.calls(Op::Put) == 32, "{} PUTs hedged", faults.calls(Op::Put));
                // The hedge's sequence: the next one after the stalled flush's.
                let before = w.read_index_range(log, h.offset - 1, 1).await?;
                let stalled = objstore::keys::parse_wal_object(&before[0].object).map(|s| s + 1);
                ensure!(object == stalled.map(|s| s + 1), "{object:?} after {stalled:?}");
            }
            None => {
                ensure!(took >= Duration::from_secs(10), "an unhedged append took {took:?}");
                ensure!(faults.calls(Op::Put) == 31, "{} PUTs unhedged", faults.calls(Op::Put));
            }
        }
        w.shutdown().await;
    }
    Ok(())
}

/// A hedged PUT cut off by the flush's deadline leaves nothing unresolved: once idle, the
/// writer raises its low-water mark to `wal/next_seq` (ARCHITECTURE §5), past both sequences.
/// (The hedge's sequence was counted unresolved until its task ended; cut off, it stayed
/// counted, and the mark never rose again, holding compaction and the cleaner back.)
#[tokio::test(start_paused = true)]
async fn a_hedge_cut_off_by_the_deadline_leaves_the_idle_mark_free_to_rise() -> Result<()> {
    use objstore::faults::Op;
    let mut cfg = LogStorageConfig::new(testkit::unique_prefix("hedgecut"), "w");
    let keys = logstore::keys::Keys::new(&cfg.cluster);
    cfg.hedge_quantile = Some(0.95);
    cfg.flush_deadline = Duration::from_secs(2);
    cfg.lease_ttl = Duration::from_secs(3);
    let meta = memory();
    // The 31st PUT and its hedge stall past the deadline.
    let stall = Duration::from_secs(60);
    let (w, faults, log) = warmed_over_stalls(cfg, meta.clone(), &[31, 32], stall).await?;
    let cut = w.append(log, 1, Bytes::from_static(b"cut"), None).await;
    ensure!(cut.is_err(), "a PUT past its deadline was answered {cut:?}");
    ensure!(faults.calls(Op::Put) == 32, "{} PUTs: not hedged", faults.calls(Op::Put));
    // Idle for a few lease renewals (each may raise the mark).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let value = |k: Vec<u8>| {
        let meta = meta.clone();
        async move {
            let kv = meta.get(&k).await?.ok_or_else(|| anyhow::anyhow!("no key"))?;
            anyhow::Ok(std::str::from_utf8(&kv.value)?.parse::<u64>()?)
        }
    };
    let (mark, next) = (value(keys.low_water("w")).await?, value(keys.next_seq()).await?);
    ensure!(mark == next, "the idle writer's mark stayed at {mark}, wal/next_seq is {next}");
    w.shutdown().await;
    Ok(())
}

/// Appends `n` entries to `log`, one every `every`, each from its own task (so they are
/// admitted in their order); the slowest acknowledgement.
async fn steady(w: &LogStorage, log: logstore::LogId, n: u64, every: Duration) -> Result<Duration> {
    let t0 = Instant::now();
    let mut acks = Vec::new();
    for i in 0..n {
        let w = w.clone();
        let due = t0 + every * u32::try_from(i)?;
        acks.push(tokio::spawn(async move {
            tokio::time::sleep_until(due).await;
            w.append(log, 1, Bytes::from(format!("e{i}")), None).await?;
            anyhow::Ok(due.elapsed())
        }));
    }
    let mut slowest = Duration::ZERO;
    for a in acks {
        slowest = slowest.max(a.await??);
    }
    Ok(slowest)
}

/// The commit budget (ARCHITECTURE §4): with flushes every 5 ms and a 50 ms commit interval,
/// a log commits at most once per 50 ms; the flushes stored meanwhile commit together, in
/// order, and no append waits much more than one interval.
#[tokio::test(start_paused = true)]
async fn stored_flushes_commit_together_at_most_once_per_commit_interval() -> Result<()> {
    let interval = Duration::from_millis(50);
    let mut cfg = LogStorageConfig::new(testkit::unique_prefix("budget"), "w");
    cfg.flush_interval = Duration::from_secs(1);
    cfg.min_flush_interval = Some(Duration::from_millis(5));
    cfg.commit_interval = Some(interval);
    let (meta, counts) = CountingMeta::new(memory());
    let w = open(cfg, meta).await?;
    let log = w.create_log().await?;
    w.append(log, 1, Bytes::from_static(b"first"), None).await?;
    let (flushes0, commits0, t0) =
        (w.flushes(), counts.log_commits.load(Ordering::SeqCst), Instant::now());
    let slowest = steady(&w, log, 400, Duration::from_millis(5)).await?;
    let took = t0.elapsed();
    let flushes = w.flushes() - flushes0;
    let commits = counts.log_commits.load(Ordering::SeqCst) - commits0;
    let bound = (took.as_millis() / interval.as_millis()) as u64 + 1;
    ensure!(
        commits <= bound,
        "{commits} commits of one log in {took:?}: over one per {interval:?}"
    );
    ensure!(flushes >= 4 * commits, "{flushes} flushes for {commits} commits: none merged");
    ensure!(slowest <= interval + Duration::from_millis(15), "an append waited {slowest:?}");
    // Merged flushes keep the log's order: entry k is the k-th append.
    let entries = w.read_entries(log, 1, 1000, u64::MAX).await?;
    ensure!(entries.len() == 400, "{} entries read back", entries.len());
    for (k, e) in entries.iter().enumerate() {
        ensure!(e.header.offset == k as u64 + 1 && e.payload == format!("e{k}").as_bytes());
    }
    w.shutdown().await;
    Ok(())
}

#[derive(Default)]
struct Intervals(Mutex<Vec<Duration>>);

impl FlushObserver for Intervals {
    fn flushed(&self, _: usize, _: usize, _: usize) {}
    fn put(&self, _: Duration, _: bool) {}
    fn committed(&self, _: Duration, _: Duration) {}
    fn commit_interval(&self, interval: Duration) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(interval);
    }
}

/// While the metadata store's commits take longer than the flush interval, the writer
/// lengthens its commit interval rather than failing appends; once they are quick again it
/// comes back to the configured one.
#[tokio::test(start_paused = true)]
async fn a_slow_metadata_store_lengthens_the_commit_interval_and_a_quick_one_shortens_it()
-> Result<()> {
    let flush = Duration::from_millis(100);
    slow_then_quick(flush, None, flush, 4 * flush).await
}

/// The same from rounds back to back (`commit_interval` 0, standalone's): the interval
/// lengthens from nothing, and comes back to nothing.
#[tokio::test(start_paused = true)]
async fn back_to_back_commit_rounds_lengthen_under_a_slow_store_and_come_back() -> Result<()> {
    let flush = Duration::from_millis(100);
    slow_then_quick(flush, Some(Duration::ZERO), Duration::ZERO, 4 * flush).await
}

/// A writer flushing every `flush` with `commit_interval`, whose interval starts at `base`:
/// 20 s of appends 20 ms apart while each commit takes 300 ms must lengthen it to at least
/// `slow_at_least`, and 60 s more while commits are quick must bring it back to `base`.
async fn slow_then_quick(
    flush: Duration,
    commit_interval: Option<Duration>,
    base: Duration,
    slow_at_least: Duration,
) -> Result<()> {
    let mut cfg = LogStorageConfig::new(testkit::unique_prefix("aimd"), "w");
    cfg.flush_interval = flush;
    cfg.commit_interval = commit_interval;
    let meta = FaultyMeta::new(memory());
    let w = open(cfg, meta.clone()).await?;
    let seen = Arc::new(Intervals::default());
    ensure!(w.observe_flushes(seen.clone()));
    let log = w.create_log().await?;
    w.append(log, 1, Bytes::from_static(b"first"), None).await?;
    let longest = || seen.0.lock().unwrap_or_else(|e| e.into_inner()).iter().max().copied();
    let last = || seen.0.lock().unwrap_or_else(|e| e.into_inner()).last().copied();
    ensure!(last() == Some(base), "starts at {base:?}: {:?}", last());
    // Commits take 300 ms, three flush intervals.
    meta.slow_writes_ms.store(300, Ordering::SeqCst);
    steady(&w, log, 1000, Duration::from_millis(20)).await?;
    let longest_slow = longest().unwrap_or_default();
    ensure!(longest_slow >= slow_at_least, "the interval grew to {longest_slow:?} only");
    // Quick again: back to the configured interval.
    meta.slow_writes_ms.store(0, Ordering::SeqCst);
    steady(&w, log, 3000, Duration::from_millis(20)).await?;
    ensure!(last() == Some(base), "after quick commits the interval is {:?}", last());
    ensure!(w.info(log).await?.next_offset == 4001, "every append committed");
    w.shutdown().await;
    Ok(())
}

/// A flush takes at most `flush_bytes` of the buffer (at least one entry): appends that
/// piled up while the flusher was busy go out as several objects, in their order.
#[tokio::test(start_paused = true)]
async fn a_flush_takes_at_most_flush_bytes() -> Result<()> {
    let mut cfg = LogStorageConfig::new(testkit::unique_prefix("cap"), "w");
    cfg.flush_interval = Duration::from_millis(100);
    cfg.flush_bytes = 1000;
    let w = open(cfg, memory()).await?;
    let log = w.create_log().await?;
    let flushes0 = w.flushes();
    // Ten appends of 300 bytes at once: 3,000 bytes, at most three to an object.
    let appends: Vec<_> = (0..10u8)
        .map(|i| {
            let w = w.clone();
            tokio::spawn(async move { w.append(log, 1, Bytes::from(vec![i; 300]), None).await })
        })
        .collect();
    for a in appends {
        a.await??;
    }
    let flushes = w.flushes() - flushes0;
    ensure!(flushes >= 4, "3,000 bytes in {flushes} flushes of at most 1,000");
    let entries = w.read_entries(log, 0, 100, u64::MAX).await?;
    ensure!(entries.len() == 10, "{} entries read back", entries.len());
    let mut seen: Vec<u8> = entries.iter().map(|e| e.payload[0]).collect();
    let in_order = seen.windows(2).all(|w| w[0] < w[1]);
    seen.sort_unstable();
    ensure!(seen == (0..10).collect::<Vec<u8>>() && in_order, "read back {seen:?}");
    w.shutdown().await;
    Ok(())
}

/// A writer flushing every 10 ms whose tail cache is as large as its buffer of `bytes`, with
/// entries of up to `max_entry` bytes.
fn tail_cached(prefix: &str, bytes: usize, max_entry: usize) -> LogStorageConfig {
    let mut cfg = LogStorageConfig::new(testkit::unique_prefix(prefix), "w");
    cfg.flush_interval = Duration::from_millis(10);
    cfg.buffer_bytes = bytes;
    cfg.max_entry_bytes = max_entry;
    cfg.tail_cache_bytes = bytes;
    cfg
}

/// The tail cache lives inside the append buffer's budget: it caches in room appends do not
/// hold, and an append that needs the room gets it at once rather than waiting for
/// `append_timeout` (ARCHITECTURE §11's tail cache, issue 18's memory bound).
#[tokio::test(start_paused = true)]
async fn the_tail_cache_gives_its_room_back_to_appends() -> Result<()> {
    let mut cfg = tail_cached("tail", 64 << 10, 32 << 10);
    cfg.append_timeout = Duration::from_secs(1);
    let w = open(cfg, memory()).await?;
    let log = w.create_log().await?;
    for i in 0..6u8 {
        w.append(log, 1, Bytes::from(vec![i; 10 << 10]), None).await?;
    }
    let cached = w.reader().cache_bytes();
    ensure!(cached >= 50 << 10, "the tail cache holds {cached} bytes after 60 KiB committed");
    let t0 = Instant::now();
    w.append(log, 1, Bytes::from(vec![9; 32 << 10]), None).await?;
    ensure!(t0.elapsed() < Duration::from_millis(500), "the append waited {:?}", t0.elapsed());
    let cached = w.reader().cache_bytes();
    ensure!(cached <= 64 << 10, "cache {cached} bytes beside a 64 KiB buffer");
    ensure!(w.info(log).await?.next_offset == 7);
    w.shutdown().await;
    Ok(())
}

/// An append short of room gets the room the tail cache gives up, not a WAL object's buffer
/// coming back as the cache drops the object: kept for a later flush, that buffer held the room
/// the append then waited `append_timeout` for, to be refused (a Kafka producer's request
/// stalled 5 s and was retried). A store that copies what it is given (a local directory), so
/// the tail cache holds each object's last reference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffers_coming_back_leave_a_short_append_its_room() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let local = objstore::object_store::local::LocalFileSystem::new_with_prefix(dir.path())?;
    let objects = Arc::new(objstore::local::LocalStore::new(local));
    let mut cfg = tail_cached("wayback", 4 << 20, 4 << 20);
    cfg.append_timeout = Duration::from_secs(2);
    let w = LogStorage::open(memory(), objects, cfg, Arc::new(SystemClock)).await?;
    let log = w.create_log().await?;
    for i in 0..5u8 {
        w.append(log, 1, Bytes::from(vec![i; 600 << 10]), None).await?;
    }
    let cached = w.reader().cache_bytes();
    ensure!(cached >= 2 << 20, "the tail cache holds {cached} bytes after 3 MB committed");
    let t0 = std::time::Instant::now();
    let big = w.append(log, 1, Bytes::from(vec![9; (3 << 20) + (512 << 10)]), None).await;
    ensure!(big.is_ok(), "the append short of room: {big:?} after {:?}", t0.elapsed());
    ensure!(t0.elapsed() < Duration::from_secs(1), "the append waited {:?}", t0.elapsed());
    ensure!(w.info(log).await?.next_offset == 6);
    w.shutdown().await;
    Ok(())
}

/// A caught-up reader of a writer that has written more than its tail cache holds still reads
/// each new entry from the cache, without a GET: the cache's room yields to what the writer
/// commits next (it is the buffer's room appends do not hold), so a flush keeps its object for
/// the cache even when the cache is full.
#[tokio::test(start_paused = true)]
async fn the_tail_cache_takes_new_objects_once_full() -> Result<()> {
    let cfg = tail_cached("tailfull", 64 << 10, 32 << 10);
    let (objects, counts) = objstore::counting::CountingStore::new(Arc::new(InMemory::new()));
    let w = LogStorage::open(memory(), objects, cfg, Arc::new(SystemClock)).await?;
    let log = w.create_log().await?;
    // 30 entries of 10 KiB, each read back once committed: 300 KiB through a 64 KiB cache.
    for i in 0..30u8 {
        let h = w.append(log, 1, Bytes::from(vec![i; 10 << 10]), None).await?;
        let gets = counts.get(&counts.gets);
        let read = w.read_entries(log, h.offset, 1, u64::MAX).await?;
        ensure!(read.len() == 1 && read[0].payload[0] == i, "entry {i} read back wrong");
        let got = counts.get(&counts.gets) - gets;
        ensure!(got == 0, "entry {i}, just committed, read with {got} GETs");
    }
    w.shutdown().await;
    Ok(())
}

/// Admits one append in the writer's own slot, without waiting for its commit.
async fn submit(
    w: &LogStorage,
    log: logstore::LogId,
    payload: Vec<u8>,
) -> Result<logstore::Committing, logstore::LogError> {
    let slot = w.config().zone.clone();
    w.submit_in_slot(log, &slot, 1, Bytes::from(payload), Default::default()).await
}

/// A flush gives its payloads' room back once its PUT succeeds, not when it commits: while
/// commits are slow, appends wait for PUTs only (the bytes are durable; ack still waits for
/// the commit).
#[tokio::test(start_paused = true)]
async fn a_stored_flush_gives_its_room_back_before_it_commits() -> Result<()> {
    let mut cfg = LogStorageConfig::new(testkit::unique_prefix("room"), "w");
    cfg.flush_interval = Duration::from_millis(10);
    cfg.buffer_bytes = 64 << 10;
    cfg.max_entry_bytes = 48 << 10;
    cfg.tail_cache_bytes = 0;
    cfg.append_timeout = Duration::from_secs(10);
    let meta = FaultyMeta::new(memory());
    let w = open(cfg, meta.clone()).await?;
    let log = w.create_log().await?;
    // Commits take 2 s from now on; PUTs to the in-memory store are at once.
    meta.slow_writes_ms.store(2000, Ordering::SeqCst);
    let t0 = Instant::now();
    let first = submit(&w, log, vec![1; 48 << 10]).await?;
    // The second needs the first's room: it gets it once the first is stored.
    submit(&w, log, vec![2; 48 << 10]).await?;
    let admitted = t0.elapsed();
    ensure!(admitted < Duration::from_millis(1000), "the second append waited {admitted:?}");
    let h = first.await?;
    ensure!(t0.elapsed() >= Duration::from_millis(2000), "acked before its commit: {h:?}");
    w.shutdown().await;
    Ok(())
}

/// A writer with a 64 KiB buffer, appends of at most `max_entry_bytes`, a 500 ms append
/// timeout and one log, whose metadata store takes no write from now on: nothing it admits
/// commits, so what it admits holds its room.
async fn committing_nothing(
    prefix: &str,
    max_entry_bytes: usize,
) -> Result<(LogStorage, logstore::LogId)> {
    let mut cfg = LogStorageConfig::new(testkit::unique_prefix(prefix), "w");
    cfg.flush_interval = Duration::from_millis(10);
    cfg.buffer_bytes = 64 << 10;
    cfg.max_entry_bytes = max_entry_bytes;
    cfg.append_timeout = Duration::from_millis(500);
    cfg.flush_deadline = Duration::from_secs(3600);
    let meta = FaultyMeta::new(memory());
    let w = open(cfg, meta.clone()).await?;
    let log = w.create_log().await?;
    meta.hang_writes.store(true, Ordering::SeqCst);
    Ok((w, log))
}

/// Appends of empty payloads hold buffer room too (their bookkeeping) until answered: a writer
/// whose object store does not answer takes a bounded number, then refuses with
/// RESOURCE_EXHAUSTED.
#[tokio::test(start_paused = true)]
async fn appends_waiting_for_a_commit_are_bounded_even_when_empty() -> Result<()> {
    let (w, log) = committing_nothing("empty", 1 << 10).await?;
    let mut admitted = Vec::new();
    let refused = loop {
        match submit(&w, log, Vec::new()).await {
            Ok(c) => admitted.push(c),
            Err(e) => break e,
        }
        ensure!(admitted.len() <= 64 << 10, "{} empty appends admitted", admitted.len());
    };
    ensure!(refused.code() == logstore::Code::ResourceExhausted, "refused with {refused}");
    ensure!(admitted.len() == 256, "{} empty appends in a 64 KiB buffer", admitted.len());
    w.abort();
    Ok(())
}

/// Appends that wait for buffer room hold their payloads outside the buffer, so only an eighth
/// of the buffer may wait (always one append, whatever its size); past that an append is
/// refused at once with RESOURCE_EXHAUSTED instead of joining them.
#[tokio::test(start_paused = true)]
async fn appends_beyond_an_eighth_of_the_buffer_waiting_are_refused_at_once() -> Result<()> {
    let (w, log) = committing_nothing("waiting", 32 << 10).await?;
    // 256 empty appends hold the whole buffer (their bookkeeping).
    let mut held = Vec::new();
    for _ in 0..256 {
        held.push(submit(&w, log, Vec::new()).await?);
    }
    // One append asking 8 KiB of room: an eighth of the buffer waits.
    // (An append asks its payload plus 256 bytes of bookkeeping.)
    let eight = || vec![3u8; (8 << 10) - 256];
    let waiters: Vec<_> = (0..1)
        .map(|_| {
            let (w, payload) = (w.clone(), eight());
            tokio::spawn(async move {
                let t0 = Instant::now();
                (submit(&w, log, payload).await.err(), t0.elapsed())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1)).await;
    let t0 = Instant::now();
    let refused = submit(&w, log, eight()).await.err();
    let at = t0.elapsed();
    let Some(refused) = refused else { anyhow::bail!("a second waiter was admitted") };
    ensure!(refused.code() == logstore::Code::ResourceExhausted, "refused with {refused}");
    ensure!(at < Duration::from_millis(100), "refused after waiting {at:?}: {refused}");
    ensure!(refused.to_string().contains("waiting"), "{refused}");
    // The one that waited times out as before, and takes its count with it.
    for t in waiters {
        let (e, waited) = t.await?;
        ensure!(e.is_some_and(|e| e.code() == logstore::Code::ResourceExhausted));
        ensure!(waited >= Duration::from_millis(500), "a waiter answered after {waited:?}");
    }
    // Nobody waits now: one append larger than the eighth may (and times out).
    let t0 = Instant::now();
    let e = submit(&w, log, vec![4u8; 24 << 10]).await.err();
    ensure!(e.is_some_and(|e| e.code() == logstore::Code::ResourceExhausted));
    ensure!(t0.elapsed() >= Duration::from_millis(500), "refused without waiting");
    drop(held);
    w.abort();
    Ok(())
}

/// Room reserved before an append is known (a remote request's, from its headers on) comes out
/// of the buffer at once or not at all, goes back when dropped, and counts toward the append it
/// is given to: never twice, and what the append does not need goes back at admission.
#[tokio::test(start_paused = true)]
async fn reserved_room_is_taken_from_the_buffer_and_becomes_the_appends_room() -> Result<()> {
    let (w, log) = committing_nothing("reserved", 32 << 10).await?;
    let slot = w.config().zone.clone();
    // Four 16 KiB reservations fill the 64 KiB buffer; a fifth is refused without waiting.
    let mut reserved: Vec<_> = (0..4).map(|_| w.reserve(16 << 10)).collect::<Result<_, _>>()?;
    let t0 = Instant::now();
    let refused = w.reserve(16 << 10).err();
    ensure!(t0.elapsed().is_zero(), "a reservation waited");
    ensure!(refused.is_some_and(|e| e.code() == logstore::Code::ResourceExhausted));
    // One dropped, its room is free again.
    reserved.pop();
    reserved.push(w.reserve(16 << 10)?);
    // An append asking 8 KiB (payload and bookkeeping) given a 16 KiB reservation is admitted
    // at once in the full buffer, and the 8 KiB it does not need go back.
    let given = reserved.pop();
    let opts = logstore::Conditions { reserved: given, ..Default::default() };
    let payload = Bytes::from(vec![5u8; (8 << 10) - 256]);
    let t0 = Instant::now();
    let admitted = w.submit_in_slot(log, &slot, 1, payload, opts).await?;
    ensure!(t0.elapsed() < Duration::from_millis(100), "waited {:?}", t0.elapsed());
    let rest = w.reserve(8 << 10)?;
    ensure!(w.reserve(1).is_err(), "the reservation was counted twice or not at all");
    // An append asking more than it was given waits for the rest (here: times out).
    drop(rest);
    let given = reserved.pop();
    let opts = logstore::Conditions { reserved: given, ..Default::default() };
    let payload = Bytes::from(vec![6u8; 32 << 10]);
    let t0 = Instant::now();
    let e = w.submit_in_slot(log, &slot, 1, payload, opts).await.err();
    ensure!(e.is_some_and(|e| e.code() == logstore::Code::ResourceExhausted));
    ensure!(t0.elapsed() >= Duration::from_millis(500), "refused without waiting");
    // Its reservation went back with the refusal: 16 KiB free beside the 8 KiB freed above.
    let back = w.reserve(24 << 10)?;
    drop((back, admitted, reserved));
    w.abort();
    Ok(())
}
