//! `lakelog bench append`: appends at a rate or flat out to many logs, in process or to a writer, against
//! raw PUTs and metadata transactions on the same stores.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use client::LogClient;
use logstore::{LogId, LogStorage, SystemClock};
use metadata::counting::{CountingMeta, MetaCounts};
use metadata::{MetadataStore, Txn, TxnOp};
use objstore::counting::{CountingStore, Counts};
use objstore::object_store::{ObjectStore, ObjectStoreExt};

use super::{
    LatencyHistogram, Percentiles, Report, json_opt, process_cpu_seconds, rss_peak_mb,
    store_cpu_seconds,
};

/// Options of `lakelog bench append`.
#[derive(clap::Args, Debug)]
pub struct AppendArgs {
    /// Run an in-process standalone writer on this local directory (created if missing).
    #[arg(long, conflicts_with = "config")]
    pub(crate) data_dir: Option<PathBuf>,
    /// Run an in-process writer on the metadata and object stores of this config file.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Logs to spread appends over (1 … 10000).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub(crate) logs: u64,
    /// Bytes per record.
    #[arg(long, default_value = "100")]
    pub(crate) record_size: config::ByteSize,
    /// Records per entry (one append).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) records_per_entry: u32,
    /// Appends in flight at once.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub(crate) concurrency: u64,
    /// The in-process writer's flush interval.
    #[arg(long, default_value = "250ms")]
    pub(crate) flush_interval: config::Duration,
    /// The in-process writer's eager flush policy: flush once an append waits and this long
    /// has passed since the previous flush began (`writer.min_flush_interval`).
    #[arg(long)]
    pub(crate) min_flush_interval: Option<config::Duration>,
    /// The in-process writer's commit budget (`writer.commit_interval`; unset: the flush
    /// cadence).
    #[arg(long)]
    pub(crate) commit_interval: Option<config::Duration>,
    /// Append at this many payload bytes a second (open loop: each append's latency counts
    /// from when it was due, so a stall is not hidden), `--concurrency` at most in flight;
    /// unset: as fast as acknowledgements come back.
    #[arg(long)]
    pub(crate) rate: Option<config::ByteSize>,
    /// Run this long (default 10s unless --bytes is given).
    #[arg(long)]
    pub(crate) duration: Option<config::Duration>,
    /// Stop after appending this many payload bytes.
    #[arg(long)]
    pub(crate) bytes: Option<config::ByteSize>,
    /// The object store server's process (e.g. SeaweedFS on this machine): its CPU per GB
    /// written is measured in the appends and in the baseline's PUTs, next to this process's.
    #[arg(long)]
    pub(crate) store_pid: Option<u32>,
    /// Also measure raw PUTs of the flush size (before and after the appends) and raw metadata
    /// transactions on the same stores.
    #[arg(long)]
    pub(crate) baseline: bool,
    /// Print one JSON object on the last stdout line.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Where appends go.
pub(crate) enum Target {
    Local {
        storage: LogStorage,
        objects: Arc<dyn ObjectStore>,
        meta: Arc<dyn MetadataStore>,
        puts: Arc<Counts>,
        txns: Arc<MetaCounts>,
        commits: Arc<Commits>,
    },
    /// Connections to one writer, appends spread over them in turn: a connection carries at
    /// most the writer's streams per connection at once, so one connection would cap the
    /// appends in flight (and the load) below `--concurrency`.
    Remote { clients: Vec<LogClient>, next: AtomicU64 },
}

/// What the in-process writer reported of its commits: each flush's commit round time, and
/// the commit budget's interval (the longest it reached).
#[derive(Default)]
pub(crate) struct Commits {
    round_us: parking_lot::Mutex<Vec<u64>>,
    longest_interval: parking_lot::Mutex<Duration>,
}

impl logstore::FlushObserver for Commits {
    fn flushed(&self, _: usize, _: usize, _: usize) {}
    fn put(&self, _: Duration, _: bool) {}
    fn committed(&self, elapsed: Duration, _: Duration) {
        self.round_us.lock().push(elapsed.as_micros() as u64);
    }
    fn commit_interval(&self, interval: Duration) {
        let mut l = self.longest_interval.lock();
        *l = (*l).max(interval);
    }
}

impl Target {
    async fn create_log(&self) -> anyhow::Result<u64> {
        Ok(match self {
            Target::Local { storage, .. } => storage.create_log().await?.0,
            Target::Remote { clients, .. } => match clients.first() {
                Some(c) => c.create_log().await?,
                None => bail!("no connection to the writer"),
            },
        })
    }

    /// Appends one entry: `Ok(false)` when the writer refused it as too busy
    /// (RESOURCE_EXHAUSTED, nothing applied).
    async fn append(&self, log: u64, records: u32, payload: Bytes) -> anyhow::Result<bool> {
        match self {
            Target::Local { storage, .. } => {
                match storage.append(LogId(log), records, payload, None).await {
                    Err(logstore::LogError::ResourceExhausted(_)) => return Ok(false),
                    other => other?,
                };
            }
            Target::Remote { clients, next } => {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize % clients.len().max(1);
                let Some(c) = clients.get(i) else { bail!("no connection to the writer") };
                // Boxed: in place this branch's future (twice the local one's size) sized
                // every load task, in process too, where it weighed on the memory measured.
                match Box::pin(c.append(log, records, payload, None)).await {
                    Err(e) if e.code == client::Code::ResourceExhausted => return Ok(false),
                    other => other?,
                };
            }
        }
        Ok(true)
    }
}

pub(crate) async fn open_target(args: &AppendArgs, endpoint: &str) -> anyhow::Result<Target> {
    let node = match (&args.data_dir, &args.config) {
        (Some(dir), _) => {
            std::fs::create_dir_all(dir).with_context(|| format!("data dir {}", dir.display()))?;
            Some(crate::standalone::data_dir_node(dir))
        }
        (None, Some(file)) => Some(config::load_file::<config::NodeConfig>(file)?),
        (None, None) => None,
    };
    let Some(node) = node else {
        if args.baseline {
            bail!(
                "INVALID_ARGUMENT: --baseline needs the stores in process: give --data-dir or --config"
            );
        }
        if args.min_flush_interval.is_some() || args.commit_interval.is_some() {
            bail!(
                "INVALID_ARGUMENT: --min-flush-interval and --commit-interval set an in-process writer: give --data-dir or --config (a remote writer's are its writer.min_flush_interval and writer.commit_interval)"
            );
        }
        let per = u64::from(writer::MAX_STREAMS_PER_CONNECTION);
        let n = args.concurrency.div_ceil(per).max(1);
        let mut clients = Vec::with_capacity(n as usize);
        for _ in 0..n {
            clients.push(LogClient::connect(endpoint).await?);
        }
        return Ok(Target::Remote { clients, next: AtomicU64::new(0) });
    };
    let (meta, txns) = CountingMeta::new(metadata::open(&node.metadata).await?);
    let raw_objects = objstore::build(&node.object_store)?;
    let (objects, puts) = CountingStore::new(raw_objects.clone());
    let mut cfg = writer::storage_config(&node);
    cfg.flush_interval = args.flush_interval.0;
    cfg.min_flush_interval = args.min_flush_interval.map(|d| d.0);
    if let Some(c) = args.commit_interval {
        cfg.commit_interval = Some(c.0);
    }
    let meta: Arc<dyn MetadataStore> = meta;
    let storage = LogStorage::open(meta.clone(), objects, cfg, Arc::new(SystemClock)).await?;
    let commits = Arc::new(Commits::default());
    storage.observe_flushes(commits.clone());
    Ok(Target::Local { storage, objects: raw_objects, meta, puts, txns, commits })
}

/// The first pause after an append the writer refused as too busy; it doubles while they
/// are refused, to 64 times this.
const REFUSED_PAUSE: Duration = Duration::from_millis(5);

/// Runs `lakelog bench append`.
pub async fn append(args: AppendArgs, endpoint: &str) -> anyhow::Result<()> {
    let entry_bytes = args.record_size.0 as usize * args.records_per_entry as usize;
    // Open loop: append n is due `n × entry / rate` after the start.
    let pace = match args.rate {
        Some(r) if r.0 == 0 => bail!("INVALID_ARGUMENT: --rate must be above 0"),
        Some(r) => Some(Duration::from_secs_f64(entry_bytes as f64 / r.0 as f64)),
        None => None,
    };
    let target = Arc::new(open_target(&args, endpoint).await?);
    let duration = args.duration.map(|d| d.0).unwrap_or(if args.bytes.is_some() {
        Duration::MAX
    } else {
        Duration::from_secs(10)
    });
    let payload = Bytes::from(vec![0x5a; entry_bytes]);
    // Raw PUTs before the appends as well as after: the mean of the two is the baseline, so a
    // store that drifts during the run (a disk's writeback, a server's compactions, neighbours
    // on a shared machine) weighs on both sides alike.
    let before = match (&*target, args.baseline) {
        (Target::Local { storage, objects, .. }, true) => {
            let cfg = storage.config();
            let (flush, buffer) = (cfg.flush_bytes as u64, cfg.buffer_bytes as u64);
            let in_flight = (buffer / flush.max(1)).clamp(1, 16);
            let run_for = duration.min(Duration::from_secs(60));
            let body = wal_like_object(&payload, args.records_per_entry, args.logs, flush)?;
            Some(put_baseline(objects.as_ref(), body, in_flight, run_for, args.store_pid).await?)
        }
        _ => None,
    };
    let logs = create_and_warm(&target, &args).await?;
    let byte_goal = args.bytes.map_or(u64::MAX, |b| b.0);
    let (puts0, txns0) = counts(&target);

    let Driven { elapsed, cpu0, ack, bytes, entries: n_entries, errors, refused } =
        drive(&target, &logs, &args, &payload, pace, duration, byte_goal).await?;
    let cpu1 = (process_cpu_seconds("/proc/self/stat"), store_cpu_seconds(args.store_pid));
    let (puts1, txns1) = counts(&target);
    let mb_s = bytes as f64 / elapsed / 1e6;
    let gib = bytes as f64 / (1u64 << 30) as f64;
    let puts = puts1.0.saturating_sub(puts0.0);
    let put_bytes = puts1.1.saturating_sub(puts0.1);
    let flushes = puts1.2.saturating_sub(puts0.2);
    let hedges = puts1.3.saturating_sub(puts0.3);
    let meta_txns = txns1.0.saturating_sub(txns0.0);
    let log_commits = txns1.1.saturating_sub(txns0.1);

    let mut report = Report {
        rows: vec![
            ("append MB/s".into(), format!("{mb_s:.2}")),
            ("entries/s".into(), format!("{:.0}", n_entries as f64 / elapsed)),
            (
                "ack ms p50/p90/p99/p999/max".into(),
                format!(
                    "{:.1} / {:.1} / {:.1} / {:.1} / {:.1}",
                    ack.p50, ack.p90, ack.p99, ack.p999, ack.max
                ),
            ),
            ("errors".into(), errors.to_string()),
            ("refused (busy, retried)".into(), refused.to_string()),
        ],
        json: vec![
            ("append_mb_per_s".into(), format!("{mb_s:.3}")),
            ("entries_per_s".into(), format!("{:.1}", n_entries as f64 / elapsed)),
            ("ack_ms".into(), ack.json()),
            ("errors".into(), errors.to_string()),
            ("refused".into(), refused.to_string()),
            ("logs".into(), args.logs.to_string()),
            ("concurrency".into(), args.concurrency.to_string()),
            ("entry_bytes".into(), entry_bytes.to_string()),
            (
                "flush_interval_ms".into(),
                format!("{:.1}", args.flush_interval.0.as_secs_f64() * 1e3),
            ),
            (
                "min_flush_interval_ms".into(),
                args.min_flush_interval
                    .map_or("null".to_owned(), |d| format!("{:.1}", d.0.as_secs_f64() * 1e3)),
            ),
            (
                "commit_interval_ms".into(),
                args.commit_interval
                    .map_or("null".to_owned(), |d| format!("{:.1}", d.0.as_secs_f64() * 1e3)),
            ),
            (
                "rate_mb_per_s".into(),
                args.rate.map_or("null".to_owned(), |r| format!("{:.3}", r.0 as f64 / 1e6)),
            ),
            ("duration_s".into(), format!("{elapsed:.2}")),
        ],
    };
    let local = matches!(*target, Target::Local { .. });
    let stored = Stored { puts, put_bytes, flushes, hedges, meta_txns, log_commits };
    store_rows(&mut report, local, &stored, elapsed, gib);
    commit_rows(&mut report, &target);
    report
        .rows
        .push(("RSS peak MiB".into(), rss_peak_mb().map_or("?".into(), |m| format!("{m:.1}"))));
    let per_gb = |a: Option<f64>, b: Option<f64>| {
        b.zip(a).map(|(b, a)| (b - a) / (bytes as f64 / 1e9).max(1e-9))
    };
    let (cpu_gb, store_gb) = (per_gb(cpu0.0, cpu1.0), per_gb(cpu0.1, cpu1.1));
    if let Some(c) = cpu_gb {
        let mut row = format!("{c:.2} in this process");
        if let Some(s) = store_gb {
            row += &format!(", {s:.2} in the object store's");
        }
        report.rows.push(("appends: CPU s per GB".into(), row));
        report.json.push(("cpu_s_per_gb".into(), json_opt(cpu_gb)));
        report.json.push(("store_cpu_s_per_gb".into(), json_opt(store_gb)));
    }

    let target = Arc::try_unwrap(target)
        .map_err(|_| anyhow::anyhow!("bench tasks still hold the writer"))?;
    if let Target::Local { storage, objects, meta, .. } = target {
        let buffer_bytes = storage.config().buffer_bytes as u64;
        storage.shutdown().await;
        if let Some(before) = before {
            let flush = (put_bytes / puts.max(1)).max(1);
            // As many PUTs in flight as the writer can have: its buffer holds that many flushes.
            let in_flight = (buffer_bytes / flush).clamp(1, 16);
            // PUTs for as long as the appends ran: a local disk's writeback and a server's
            // compactions show only in a sustained run, so a short burst would flatter the store.
            let put_for = Duration::from_secs_f64(elapsed);
            let body = wal_like_object(&payload, args.records_per_entry, args.logs, flush)?;
            let after =
                put_baseline(objects.as_ref(), body, in_flight, put_for, args.store_pid).await?;
            let b = baseline(meta.as_ref(), before, after).await?;
            baseline_rows(&mut report, &b, mb_s, ack.p99, &args, flush, in_flight);
        }
    }
    report.print(args.json);
    Ok(())
}

/// What a load run counted.
struct Driven {
    elapsed: f64,
    /// This process's and the object store's CPU seconds when the run began.
    cpu0: (Option<f64>, Option<f64>),
    ack: Percentiles,
    bytes: u64,
    entries: u64,
    errors: u64,
    refused: u64,
}

/// Creates the logs, then appends one entry to each, so each log's one-time slot takeover is
/// not measured.
async fn create_and_warm(target: &Arc<Target>, args: &AppendArgs) -> anyhow::Result<Arc<Vec<u64>>> {
    let mut logs = Vec::with_capacity(args.logs as usize);
    let started = Instant::now();
    for i in 0..args.logs {
        logs.push(target.create_log().await?);
        if started.elapsed() > Duration::from_secs(1) && i % 500 == 0 {
            eprintln!("creating logs: {i}/{}", args.logs);
        }
    }
    let logs = Arc::new(logs);
    // Warm up: one append per log, so each log's one-time slot takeover is not measured.
    let next = Arc::new(AtomicU64::new(0));
    let warmers: Vec<_> = (0..args.concurrency.min(256))
        .map(|_| {
            let (target, logs, next) = (target.clone(), logs.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    let Some(log) = logs.get(i) else { return anyhow::Ok(()) };
                    while !target.append(*log, 1, Bytes::from_static(b"warm-up")).await? {
                        tokio::time::sleep(REFUSED_PAUSE).await;
                    }
                }
            })
        })
        .collect();
    for w in warmers {
        w.await??;
    }
    Ok(logs)
}

/// Appends `payload` from `args.concurrency` tasks (at `pace` each, if set) until `duration`
/// passes or `byte_goal` bytes are appended, printing progress each second.
async fn drive(
    target: &Arc<Target>,
    logs: &Arc<Vec<u64>>,
    args: &AppendArgs,
    payload: &Bytes,
    pace: Option<Duration>,
    duration: Duration,
    byte_goal: u64,
) -> anyhow::Result<Driven> {
    let stop = Arc::new(AtomicBool::new(false));
    let appended = Arc::new(AtomicU64::new(0));
    let entries = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let cpu0 = (process_cpu_seconds("/proc/self/stat"), store_cpu_seconds(args.store_pid));
    let start = Instant::now();
    // No append is due after the run ends (a task holding a later ticket would keep it going).
    let end = start.checked_add(duration);
    let tickets = Arc::new(AtomicU64::new(0));
    let lat = Arc::new(LatencyHistogram::new());
    let mut tasks = Vec::new();
    for t in 0..args.concurrency {
        let (target, logs, payload, stop) =
            (target.clone(), logs.clone(), payload.clone(), stop.clone());
        let (appended, entries, errors) = (appended.clone(), entries.clone(), errors.clone());
        let (tickets, refused, lat) = (tickets.clone(), refused.clone(), lat.clone());
        let records = args.records_per_entry;
        tasks.push(tokio::spawn(async move {
            let mut i = t;
            let mut pause = REFUSED_PAUSE;
            while !stop.load(Ordering::Relaxed) {
                let log = logs[(i % logs.len() as u64) as usize];
                i += 1;
                let t0 = match pace {
                    Some(p) => {
                        let n = tickets.fetch_add(1, Ordering::Relaxed);
                        let due = start + p.mul_f64(n as f64);
                        if end.is_some_and(|e| due >= e) {
                            break;
                        }
                        tokio::time::sleep_until(due.into()).await;
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        due
                    }
                    None => Instant::now(),
                };
                match target.append(log, records, payload.clone()).await {
                    Ok(true) => {
                        lat.record(t0.elapsed().as_micros() as u64);
                        entries.fetch_add(1, Ordering::Relaxed);
                        appended.fetch_add(payload.len() as u64, Ordering::Relaxed);
                        pause = REFUSED_PAUSE;
                    }
                    // Too busy: back off as a client would (an open loop's append is dropped).
                    Ok(false) => {
                        refused.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(REFUSED_PAUSE * 64);
                    }
                    Err(e) => {
                        if errors.fetch_add(1, Ordering::Relaxed) < 3 {
                            eprintln!("append failed: {e:#}");
                        }
                    }
                }
            }
        }));
    }
    let mut last = (Instant::now(), 0u64);
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (now, done) = (Instant::now(), appended.load(Ordering::Relaxed));
        if start.elapsed() >= duration || done >= byte_goal {
            stop.store(true, Ordering::Relaxed);
        }
        if now - last.0 >= Duration::from_secs(1) {
            let mbps = (done - last.1) as f64 / (now - last.0).as_secs_f64() / 1e6;
            eprintln!(
                "[{:>5.1}s] {mbps:>8.2} MB/s  {:>9} entries  {:>6} errors  {:>7} refused",
                start.elapsed().as_secs_f64(),
                entries.load(Ordering::Relaxed),
                errors.load(Ordering::Relaxed),
                refused.load(Ordering::Relaxed)
            );
            last = (now, done);
        }
    }
    for t in tasks {
        t.await?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    Ok(Driven {
        elapsed,
        cpu0,
        ack: lat.percentiles(),
        bytes: appended.load(Ordering::Relaxed),
        entries: entries.load(Ordering::Relaxed),
        errors: errors.load(Ordering::Relaxed),
        refused: refused.load(Ordering::Relaxed),
    })
}

/// What the stores counted during a load run (the in-process writer's only).
struct Stored {
    puts: u64,
    put_bytes: u64,
    flushes: u64,
    /// Hedge PUTs: each flush is one PUT, and each hedge one more.
    hedges: u64,
    meta_txns: u64,
    log_commits: u64,
}

/// PUTs, flushes and metadata transactions: rows for an in-process writer, and the JSON
/// fields (`null` for a remote one).
fn store_rows(report: &mut Report, local: bool, st: &Stored, elapsed: f64, gib: f64) {
    let opt = |v: f64| if local { format!("{v:.3}") } else { "null".to_owned() };
    let per_gib = |n: u64| if gib > 0.0 { n as f64 / gib } else { 0.0 };
    report.json.extend([
        ("puts".into(), opt(st.puts as f64)),
        ("put_bytes".into(), opt(st.put_bytes as f64)),
        ("flushes".into(), opt(st.flushes as f64)),
        ("hedged_puts".into(), opt(st.hedges as f64)),
        ("metadata_txns".into(), opt(st.meta_txns as f64)),
        ("log_commits".into(), opt(st.log_commits as f64)),
        ("log_commits_per_s".into(), opt(st.log_commits as f64 / elapsed)),
        ("puts_per_gib".into(), opt(per_gib(st.puts))),
        ("puts_per_s".into(), opt(st.puts as f64 / elapsed)),
        ("metadata_txns_per_gib".into(), opt(per_gib(st.meta_txns))),
        ("rss_peak_mb".into(), rss_peak_mb().map_or("null".to_owned(), |m| format!("{m:.1}"))),
    ]);
    if local {
        report.rows.extend([
            (
                "PUTs / flushes / hedges".into(),
                format!("{} / {} / {}", st.puts, st.flushes, st.hedges),
            ),
            (
                "mean flush bytes".into(),
                format!("{:.0}", st.put_bytes as f64 / st.puts.max(1) as f64),
            ),
            ("metadata write txns".into(), st.meta_txns.to_string()),
            (
                "txns per flush".into(),
                format!("{:.2}", st.meta_txns as f64 / st.flushes.max(1) as f64),
            ),
            ("log commits/s".into(), format!("{:.0}", st.log_commits as f64 / elapsed)),
            (
                "log commits per flush".into(),
                format!("{:.1}", st.log_commits as f64 / st.flushes.max(1) as f64),
            ),
            ("PUTs per GiB".into(), format!("{:.0}", per_gib(st.puts))),
            ("PUTs/s".into(), format!("{:.1}", st.puts as f64 / elapsed)),
        ]);
    }
}

/// The in-process writer's commit rounds and longest commit interval.
fn commit_rows(report: &mut Report, target: &Target) {
    if let Target::Local { commits, .. } = target {
        let mut rounds = commits.round_us.lock().clone();
        let round = Percentiles::of(&mut rounds);
        let longest = *commits.longest_interval.lock();
        report.rows.extend([
            (
                "commit round ms p50/p99 (per flush)".into(),
                format!("{:.1} / {:.1}", round.p50, round.p99),
            ),
            ("commit interval ms, longest".into(), format!("{:.1}", longest.as_secs_f64() * 1e3)),
        ]);
        report.json.extend([
            ("commit_round_ms".into(), round.json()),
            ("commit_interval_longest_ms".into(), format!("{:.1}", longest.as_secs_f64() * 1e3)),
        ]);
    }
}

/// The baseline's rows: raw PUTs and metadata transactions on the same stores, and the
/// appends' throughput and p99 acknowledgement against them.
fn baseline_rows(
    report: &mut Report,
    b: &Baseline,
    mb_s: f64,
    ack_p99: f64,
    args: &AppendArgs,
    flush: u64,
    in_flight: u64,
) {
    let put_mb_s = (b.put_mb_s_before + b.put_mb_s_after) / 2.0;
    report.rows.extend([
        ("baseline PUT MB/s (flush-size objects)".into(), format!("{put_mb_s:.2}")),
        (
            "baseline PUT MB/s before / after the appends".into(),
            format!("{:.2} / {:.2}", b.put_mb_s_before, b.put_mb_s_after),
        ),
        (
            "baseline PUTs: object store's CPU s per GB before / after".into(),
            format!(
                "{} / {}",
                b.store_cpu_s_per_gb.0.map_or("?".into(), |c| format!("{c:.2}")),
                b.store_cpu_s_per_gb.1.map_or("?".into(), |c| format!("{c:.2}"))
            ),
        ),
        ("baseline PUT ms p50/p99".into(), format!("{:.1} / {:.1}", b.put_ms.p50, b.put_ms.p99)),
        ("baseline metadata txns/s".into(), format!("{:.0}", b.txn_per_s)),
        ("baseline txn ms p99".into(), format!("{:.1}", b.txn_ms.p99)),
        ("ratio append / raw PUT throughput".into(), format!("{:.2}", mb_s / put_mb_s.max(1e-9))),
        (
            "p99 ack / (flush_interval + 2×(PUT p99 + txn p99))".into(),
            format!(
                "{:.2}",
                ack_p99
                    / (args.flush_interval.0.as_secs_f64() * 1e3
                        + 2.0 * (b.put_ms.p99 + b.txn_ms.p99))
            ),
        ),
    ]);
    report.json.extend([
        ("baseline_put_mb_per_s".into(), format!("{put_mb_s:.3}")),
        ("baseline_put_mb_per_s_before".into(), format!("{:.3}", b.put_mb_s_before)),
        ("baseline_put_mb_per_s_after".into(), format!("{:.3}", b.put_mb_s_after)),
        ("baseline_store_cpu_s_per_gb_before".into(), json_opt(b.store_cpu_s_per_gb.0)),
        ("baseline_store_cpu_s_per_gb_after".into(), json_opt(b.store_cpu_s_per_gb.1)),
        (
            "baseline_put_ms".into(),
            format!("{{\"p50\":{:.3},\"p99\":{:.3}}}", b.put_ms.p50, b.put_ms.p99),
        ),
        ("baseline_txn_per_s".into(), format!("{:.1}", b.txn_per_s)),
        ("baseline_txn_ms_p99".into(), format!("{:.3}", b.txn_ms.p99)),
        ("baseline_flush_bytes".into(), flush.to_string()),
        ("baseline_puts_in_flight".into(), in_flight.to_string()),
    ]);
}

/// ((PUTs, PUT bytes, flushes, hedge PUTs), (metadata write transactions, log commits)) so
/// far.
fn counts(t: &Target) -> ((u64, u64, u64, u64), (u64, u64)) {
    match t {
        Target::Local { storage, puts, txns, .. } => (
            (
                puts.get(&puts.puts),
                puts.get(&puts.put_bytes),
                storage.flushes(),
                storage.hedged_puts(),
            ),
            (txns.write_txns.load(Ordering::Relaxed), txns.log_commits.load(Ordering::Relaxed)),
        ),
        Target::Remote { .. } => ((0, 0, 0, 0), (0, 0)),
    }
}

struct Baseline {
    put_mb_s_before: f64,
    put_mb_s_after: f64,
    /// The object store server's CPU per GB PUT, before and after, when its process is given.
    store_cpu_s_per_gb: (Option<f64>, Option<f64>),
    put_ms: Percentiles,
    txn_per_s: f64,
    txn_ms: Percentiles,
}

/// Raw PUTs: MB/s, each PUT's latency, and the object store server's CPU per GB.
struct PutRun {
    mb_s: f64,
    latencies_us: Vec<u64>,
    store_cpu_s_per_gb: Option<f64>,
}

/// Raw PUTs of `body` with `concurrency` in flight for `run_for`.
async fn put_baseline(
    objects: &dyn ObjectStore,
    body: Bytes,
    concurrency: u64,
    run_for: Duration,
    store_pid: Option<u32>,
) -> anyhow::Result<PutRun> {
    let store0 = store_cpu_seconds(store_pid);
    let object_bytes = body.len() as u64;
    let n = AtomicU64::new(0);
    let start = Instant::now();
    let worker = |t: u64| {
        let body = body.clone();
        let n = &n;
        async move {
            let mut lat = Vec::new();
            let mut i = 0;
            while start.elapsed() < run_for {
                let p = objstore::Path::from(format!("bench/baseline/{t}-{i}"));
                i += 1;
                let t0 = Instant::now();
                // Create-only, as the writer PUTs its WAL objects.
                objstore::put_create_only(objects, &p, body.clone()).await?;
                lat.push(t0.elapsed().as_micros() as u64);
                n.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok((t, i, lat))
        }
    };
    let results = futures::future::try_join_all((0..concurrency).map(worker)).await?;
    let elapsed = start.elapsed().as_secs_f64();
    let mut put_lat: Vec<u64> = Vec::new();
    for (t, count, lat) in results {
        put_lat.extend(lat);
        for i in 0..count {
            let _ = objects.delete(&objstore::Path::from(format!("bench/baseline/{t}-{i}"))).await;
        }
    }
    let store = store_cpu_seconds(store_pid).zip(store0).map(|(b, a)| b - a);
    let bytes = n.load(Ordering::Relaxed) as f64 * object_bytes as f64;
    Ok(PutRun {
        mb_s: bytes / elapsed / 1e6,
        latencies_us: put_lat,
        store_cpu_s_per_gb: store.map(|c| c / (bytes / 1e9).max(1e-9)),
    })
}

/// A WAL object of about `bytes`, laid out as the writer lays out a flush of the bench's
/// appends (`payload` as each entry, spread over `logs` chunks): the baseline PUTs the bytes the
/// writer PUTs. What they hold matters: SeaweedFS spent 6.5 CPU s per GB storing a repeated
/// byte, 8.2 storing the writer's objects and 10.5 storing random bytes (docs/performance.md).
fn wal_like_object(payload: &[u8], records: u32, logs: u64, bytes: u64) -> anyhow::Result<Bytes> {
    let per_entry = (payload.len() + wal::ENTRY_HEADER_LEN) as u64;
    let entries = (bytes / per_entry.max(1)).max(1);
    let per_log = entries.div_ceil(logs.max(1));
    let mut b = wal::ObjectBuilder::with_capacity(wal::ObjectKind::Wal, bytes as usize + 4096);
    let mut pushed = 0;
    for log in 0.. {
        if pushed == entries {
            break;
        }
        b.begin_chunk(log);
        for _ in 0..per_log.min(entries - pushed) {
            b.push_entry(records, 1_700_000_000_000, payload)?;
            pushed += 1;
        }
    }
    Ok(b.finish()?.0)
}

/// The baseline: raw PUTs measured before and after the appends, then raw single-key metadata
/// transactions from 8 tasks for 3 s.
async fn baseline(
    meta: &dyn MetadataStore,
    before: PutRun,
    after: PutRun,
) -> anyhow::Result<Baseline> {
    let mut put_lat = after.latencies_us;
    put_lat.extend(before.latencies_us);
    let run_for = Duration::from_secs(3);
    let start = Instant::now();
    let txn_worker = |t: u64| async move {
        let mut lat = Vec::new();
        let key = format!("/lakelog-bench/baseline/{t}").into_bytes();
        while start.elapsed() < run_for {
            let t0 = Instant::now();
            meta.txn(Txn::new().and_then([TxnOp::put(key.clone(), b"x".to_vec())])).await?;
            lat.push(t0.elapsed().as_micros() as u64);
        }
        anyhow::Ok(lat)
    };
    let lats = futures::future::try_join_all((0..8).map(txn_worker)).await?;
    let elapsed = start.elapsed().as_secs_f64();
    let mut txn_lat: Vec<u64> = lats.into_iter().flatten().collect();
    let txn_per_s = txn_lat.len() as f64 / elapsed;
    meta.delete(metadata::KeyRange::prefix(&b"/lakelog-bench/"[..])).await?;
    Ok(Baseline {
        put_mb_s_before: before.mb_s,
        put_mb_s_after: after.mb_s,
        store_cpu_s_per_gb: (before.store_cpu_s_per_gb, after.store_cpu_s_per_gb),
        put_ms: Percentiles::of(&mut put_lat),
        txn_per_s,
        txn_ms: Percentiles::of(&mut txn_lat),
    })
}
