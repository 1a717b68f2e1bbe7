//! `lakelog bench read`: a backlog read back from the start, and a tail read while one entry
//! at a time is appended, against raw GETs of the same objects.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use client::LogClient;
use logstore::{LogId, LogStorage};
use objstore::object_store::{ObjectStore, ObjectStoreExt};

use super::{Percentiles, Report, json_opt, process_cpu_seconds, store_cpu_seconds};

/// Options of `lakelog bench read`.
#[derive(clap::Args, Debug)]
pub struct ReadArgs {
    /// Run an in-process standalone writer on this local directory (created if missing).
    #[arg(long, conflicts_with = "config")]
    data_dir: Option<PathBuf>,
    /// Run an in-process writer on the metadata and object stores of this config file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Bytes per entry.
    #[arg(long, default_value = "1000")]
    entry_size: config::ByteSize,
    /// The in-process writer's flush interval.
    #[arg(long, default_value = "50ms")]
    flush_interval: config::Duration,
    /// How long the tail phase appends (one entry at a time) while a reader long-polls.
    #[arg(long, default_value = "5s")]
    duration: config::Duration,
    /// Backlog to build, then read back from the start.
    #[arg(long, default_value = "64MiB")]
    backlog: config::ByteSize,
    /// Appends in flight while the backlog is built: with the flush interval it sets the WAL
    /// objects' size (1024 entries of 1000 B every 50 ms: objects of about 1 MB).
    #[arg(long, default_value = "1024", value_parser = clap::value_parser!(u64).range(1..=65536))]
    backlog_in_flight: u64,
    /// Offset stripes each catch-up reads at once (a batch reader's parallelism).
    #[arg(long, default_value = "4", value_parser = clap::value_parser!(u64).range(1..=256))]
    stripes: u64,
    /// The object store server's process (e.g. SeaweedFS on this machine): its CPU per GB
    /// served is measured in each read phase too, next to this process's.
    #[arg(long)]
    store_pid: Option<u32>,
    /// Print one JSON object on the last stdout line.
    #[arg(long)]
    json: bool,
}

/// A read phase's throughput, this process's CPU time per GB read, and the object store
/// server's (when its process is given).
#[derive(Clone, Copy, Debug)]
struct Rate {
    mb_s: f64,
    /// `None` where /proc/self/stat is not there to read.
    cpu_s_per_gb: Option<f64>,
    store_cpu_s_per_gb: Option<f64>,
}

impl Rate {
    /// Runs a read returning the bytes it read, and measures it.
    async fn of(
        store_pid: Option<u32>,
        read: impl Future<Output = anyhow::Result<u64>>,
    ) -> anyhow::Result<Rate> {
        let store0 = store_cpu_seconds(store_pid);
        let (cpu0, start) = (process_cpu_seconds("/proc/self/stat"), Instant::now());
        let bytes = read.await? as f64;
        let secs = start.elapsed().as_secs_f64().max(1e-9);
        let cpu = process_cpu_seconds("/proc/self/stat").zip(cpu0).map(|(b, a)| b - a);
        let store = store_cpu_seconds(store_pid).zip(store0).map(|(b, a)| b - a);
        let per_gb = |c: f64| c / (bytes / 1e9).max(1e-9);
        Ok(Rate {
            mb_s: bytes / secs / 1e6,
            cpu_s_per_gb: cpu.map(per_gb),
            store_cpu_s_per_gb: store.map(per_gb),
        })
    }

    fn row(&self) -> String {
        let mut row = format!("{:.2}", self.mb_s);
        if let Some(c) = self.cpu_s_per_gb {
            row += &format!("  ({c:.2} CPU s/GB in this process");
            if let Some(s) = self.store_cpu_s_per_gb {
                row += &format!(", {s:.2} in the object store's");
            }
            row += ")";
        }
        row
    }
}

/// Reads offsets `[0, hw)` as `stripes` stripes at once, each with `read(at, max)` → (payload
/// bytes, next offset); returns the bytes read.
async fn read_striped<F, Fut>(hw: u64, stripes: u64, read: F) -> anyhow::Result<u64>
where
    F: Fn(u64, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<(u64, u64)>> + Send,
{
    let stripe = hw.div_ceil(stripes.max(1)).max(1);
    let mut tasks = Vec::new();
    for i in 0..stripes {
        let (lo, hi) = ((i * stripe).min(hw), ((i + 1) * stripe).min(hw));
        let read = read.clone();
        tasks.push(tokio::spawn(async move {
            let (mut at, mut bytes) = (lo, 0u64);
            while at < hi {
                let (b, next) = read(at, hi - at).await?;
                anyhow::ensure!(next > at, "a read returned nothing at {at}");
                bytes += b;
                at = next;
            }
            anyhow::Ok(bytes)
        }));
    }
    let mut bytes = 0;
    for t in tasks {
        bytes += t.await??;
    }
    Ok(bytes)
}

/// Raw GETs of every WAL object, whole, 16 at a time; returns the bytes read.
async fn raw_get(objects: &Arc<dyn ObjectStore>) -> anyhow::Result<u64> {
    use futures::{StreamExt, TryStreamExt};
    let wal: Vec<_> = objects.list(Some(&objstore::Path::from("wal"))).try_collect().await?;
    let fetched: Vec<u64> = futures::stream::iter(wal.iter().map(|m| {
        let objects = objects.clone();
        let p = m.location.clone();
        async move { anyhow::Ok(objects.get(&p).await?.bytes().await?.len() as u64) }
    }))
    .buffer_unordered(16)
    .try_collect()
    .await?;
    Ok(fetched.iter().sum())
}

/// Runs `lakelog bench read`: tail latency (append start → seen by a long-polling reader) and
/// catch-up throughput over a backlog, against a raw GET baseline of the backlog's objects.
pub async fn read(args: ReadArgs) -> anyhow::Result<()> {
    let (storage, objects, _, _) =
        super::open_local(args.data_dir.clone(), args.config.clone(), args.flush_interval, None)
            .await?;
    let log = storage.create_log().await?;
    let body = vec![0x3c; (args.entry_size.0 as usize).max(8)];

    let tail_ms = tail(&storage, log, &body, args.duration.0).await?;

    // Backlog: append it with many in flight, then read it back from the start.
    let entry = Bytes::from(body.clone());
    let n_entries = (args.backlog.0 / entry.len() as u64).max(1);
    let backlog_log = write_backlog(&storage, entry, n_entries, args.backlog_in_flight).await?;
    eprintln!("backlog of {n_entries} entries written; reading it back");
    let hw = storage.info(backlog_log).await?.next_offset;
    // The raw GET baseline runs before the reads and after them (an object store may cache
    // what was read); the better of the two is the baseline.
    let get_before = Rate::of(args.store_pid, raw_get(&objects)).await?;
    let stripes = args.stripes;
    let catch_up = Rate::of(args.store_pid, {
        let storage = storage.clone();
        read_striped(hw, stripes, move |at, max| {
            let storage = storage.clone();
            async move {
                let entries = storage.read_entries(backlog_log, at, max, 4 << 20).await?;
                let bytes = entries.iter().map(|e| e.payload.len() as u64).sum();
                Ok((bytes, entries.last().map_or(at, |e| e.header.end_offset())))
            }
        })
    })
    .await?;

    // The same backlog through a read-only reader over gRPC (in this process, on a loopback
    // port, no byte cache), read as batch readers do: stripes of the offset range at once.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let ro =
        logstore::LogReader::new(storage.metadata(), objects.clone(), &storage.config().cluster)
            .with_caches(0, logstore::DEFAULT_INDEX_PAGES);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(reader::serve(ro, listener, async {
        let _ = stop_rx.await;
    }));
    let via = LogClient::connect(&format!("http://{addr}")).await?;
    let via_reader = Rate::of(
        args.store_pid,
        read_striped(hw, stripes, move |at, max| {
            let via = via.clone();
            async move {
                let resp = via.read_entries(backlog_log.0, at, max, 0).await?;
                Ok((resp.entries.iter().map(|e| e.payload.len() as u64).sum(), resp.next_offset))
            }
        }),
    )
    .await?;
    let _ = stop_tx.send(());
    server.await??;

    let get_after = Rate::of(args.store_pid, raw_get(&objects)).await?;
    let get_mb_s = get_before.mb_s.max(get_after.mb_s);
    storage.shutdown().await;

    let report = Report {
        rows: vec![
            (
                "tail ms p50/p90/p99/max (append → seen)".into(),
                format!(
                    "{:.1} / {:.1} / {:.1} / {:.1}",
                    tail_ms.p50, tail_ms.p90, tail_ms.p99, tail_ms.max
                ),
            ),
            ("catch-up MB/s (in process)".into(), catch_up.row()),
            (format!("catch-up via a reader MB/s ({stripes} stripes)"), via_reader.row()),
            ("baseline GET MB/s (same objects), before the reads".into(), get_before.row()),
            ("baseline GET MB/s (same objects), after the reads".into(), get_after.row()),
            (
                "ratio catch-up / raw GET".into(),
                format!("{:.2}", catch_up.mb_s / get_mb_s.max(1e-9)),
            ),
            (
                "ratio catch-up via reader / raw GET".into(),
                format!("{:.2}", via_reader.mb_s / get_mb_s.max(1e-9)),
            ),
        ]
        .into_iter()
        .chain(via_reader.cpu_s_per_gb.zip(via_reader.store_cpu_s_per_gb).map(|(r, s)| {
            (
                "ratio CPU/GB via reader: this process / object store".into(),
                format!("{:.2}", r / s.max(1e-9)),
            )
        }))
        .collect(),
        json: vec![
            ("tail_ms".into(), tail_ms.json()),
            ("catch_up_mb_per_s".into(), format!("{:.3}", catch_up.mb_s)),
            ("catch_up_via_reader_mb_per_s".into(), format!("{:.3}", via_reader.mb_s)),
            ("baseline_get_mb_per_s".into(), format!("{get_mb_s:.3}")),
            ("baseline_get_before_mb_per_s".into(), format!("{:.3}", get_before.mb_s)),
            ("baseline_get_after_mb_per_s".into(), format!("{:.3}", get_after.mb_s)),
            ("cpu_s_per_gb_catch_up".into(), json_opt(catch_up.cpu_s_per_gb)),
            ("cpu_s_per_gb_via_reader".into(), json_opt(via_reader.cpu_s_per_gb)),
            ("cpu_s_per_gb_raw_get".into(), json_opt(get_before.cpu_s_per_gb)),
            ("store_cpu_s_per_gb_via_reader".into(), json_opt(via_reader.store_cpu_s_per_gb)),
            ("store_cpu_s_per_gb_raw_get".into(), json_opt(get_before.store_cpu_s_per_gb)),
            ("stripes".into(), stripes.to_string()),
            ("backlog_in_flight".into(), args.backlog_in_flight.to_string()),
            (
                "flush_interval_ms".into(),
                format!("{:.1}", args.flush_interval.0.as_secs_f64() * 1e3),
            ),
        ],
    };
    report.print(args.json);
    Ok(())
}

/// Tail latency: one appender for `run_for`, each payload starting with its sequence, and one
/// long-polling reader timing each entry from its append's start to seen.
async fn tail(
    storage: &LogStorage,
    log: LogId,
    body: &[u8],
    run_for: Duration,
) -> anyhow::Result<Percentiles> {
    // Tail: one appender, one long-polling reader; each payload starts with its sequence.
    let sent: Arc<parking_lot::Mutex<Vec<Instant>>> = Arc::default();
    let reader = {
        let (storage, sent) = (storage.clone(), sent.clone());
        tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut at = 0u64;
            let start = Instant::now();
            while start.elapsed() < run_for + Duration::from_secs(2) {
                storage.reader().wait_beyond(log, at, Duration::from_millis(500)).await?;
                for e in storage.read_entries(log, at, u64::MAX, 4 << 20).await? {
                    let seq = u64::from_le_bytes(e.payload[..8].try_into()?);
                    let t0 = sent.lock().get(seq as usize).copied();
                    if let Some(t0) = t0 {
                        lat.push(t0.elapsed().as_micros() as u64);
                    }
                    at = e.header.end_offset();
                }
                if start.elapsed() >= run_for && at as usize >= sent.lock().len() {
                    break;
                }
            }
            anyhow::Ok(lat)
        })
    };
    let start = Instant::now();
    let mut seq = 0u64;
    while start.elapsed() < run_for {
        let mut p = body.to_vec();
        p[..8].copy_from_slice(&seq.to_le_bytes());
        sent.lock().push(Instant::now());
        storage.append(log, 1, Bytes::from(p), None).await?;
        seq += 1;
        if seq.is_multiple_of(20) {
            eprintln!("[{:>5.1}s] tail: {seq} entries appended", start.elapsed().as_secs_f64());
        }
    }
    let mut tail = reader.await??;
    let tail_ms = Percentiles::of(&mut tail);
    Ok(tail_ms)
}

/// A backlog of `n_entries` entries appended to a new log with `in_flight` appends at once.
async fn write_backlog(
    storage: &LogStorage,
    entry: Bytes,
    n_entries: u64,
    in_flight: u64,
) -> anyhow::Result<LogId> {
    let backlog_log = storage.create_log().await?;
    let next = Arc::new(AtomicU64::new(0));
    let mut writers = Vec::new();
    for _ in 0..in_flight {
        let (storage, entry, next) = (storage.clone(), entry.clone(), next.clone());
        writers.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < n_entries {
                storage.append(backlog_log, 1, entry.clone(), None).await?;
            }
            anyhow::Ok(())
        }));
    }
    let progress = {
        let next = next.clone();
        tokio::spawn(async move {
            let start = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let sent = next.load(Ordering::Relaxed).min(n_entries);
                let at = start.elapsed().as_secs_f64();
                eprintln!("[{at:>5.1}s] backlog: {sent}/{n_entries} entries sent");
            }
        })
    };
    for w in writers {
        w.await??;
    }
    progress.abort();
    Ok(backlog_log)
}
