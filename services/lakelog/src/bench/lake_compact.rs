//! `lakelog bench lake-compact`: lake segments through the real compactor, in process, on a
//! local directory or a config's stores.
//!
//! 1. Compaction throughput: the same Kafka batches (`bench lake`'s) appended to two logs,
//!    one a lake log; each log compacted to its end by the compactor (its reads, the segment,
//!    the PUT, for the lake log the table commit, the swap); the payload MB per CPU second of
//!    this process, and per wall second.
//! 2. Table freshness: a producer appends a batch every `--produce-every` to a lake log while
//!    a compaction cycle runs every `--interval` (the role's default, 60 s) with the role's
//!    default settings; each record's time from its append's acknowledgement to the cycle
//!    after which the table holds it (a table scan sees it from then on).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use logstore::{LogId, LogReader, LogStorage};
use maintenance::compactor::{Compactor, CompactorConfig, IdleLogs, compact_all};
use maintenance::lakes::{LakeLog, LakeLogs};

/// Options of `lakelog bench lake-compact`.
#[derive(clap::Args, Debug)]
pub struct LakeCompactArgs {
    /// Run an in-process standalone writer on this local directory (created if missing).
    #[arg(long, conflicts_with = "config")]
    data_dir: Option<PathBuf>,
    /// Run an in-process writer on the metadata and object stores of this config file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Bytes of batches each log of the throughput part gets.
    #[arg(long, default_value = "64MiB")]
    bytes: config::ByteSize,
    /// Bytes per record value.
    #[arg(long, default_value = "1000")]
    value_size: config::ByteSize,
    /// Records per batch (one entry each).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    records_per_batch: u32,
    /// The freshness part's compaction interval (the compactor role's default).
    #[arg(long, default_value = "60s")]
    interval: config::Duration,
    /// How long the freshness part produces (0s: skip it).
    #[arg(long, default_value = "3m")]
    freshness_for: config::Duration,
    /// Time between the freshness part's appends (one batch each).
    #[arg(long, default_value = "20ms")]
    produce_every: config::Duration,
    /// Print one JSON object on the last stdout line.
    #[arg(long)]
    json: bool,
}

/// The table files' root: the bench reads no table through an engine, so any root serves.
const BASE_URI: &str = "file:///lakelog-bench";

fn lakes(logs: &[(LogId, &str)]) -> Arc<LakeLogs> {
    let logs = logs
        .iter()
        .map(|(l, identity)| {
            (*l, LakeLog { stream_identity: (*identity).to_owned(), partition: 0 })
        })
        .collect();
    Arc::new(LakeLogs { base_uri: BASE_URI.to_owned(), logs, row_group_bytes: None })
}

/// Appends `entries` to `log`, many in flight (the writer makes large flushes of them).
async fn fill(
    storage: &LogStorage,
    log: LogId,
    entries: &[lake::segment::Entry],
) -> anyhow::Result<()> {
    let mut pending = Vec::with_capacity(256);
    for e in entries {
        let h = recordbatch::BatchHeader::parse(&e.batch)?;
        let opts = logstore::Conditions { timestamp: Some(h.max_timestamp), ..Default::default() };
        let count = u32::try_from(h.record_count)?;
        pending.push(storage.submit_in_slot(log, "*", count, e.batch.clone(), opts).await?);
        if pending.len() == 256 {
            for p in pending.drain(..) {
                p.await?;
            }
        }
    }
    for p in pending {
        p.await?;
    }
    Ok(())
}

/// Compacts `log` to its end: rewrites until two passes in a row find nothing (the second
/// sees the log idle and takes its last chunks). Returns (CPU seconds, wall seconds, bytes
/// written, segments).
async fn compact_to_end(
    reader: &LogReader,
    log: LogId,
    cfg: &CompactorConfig,
) -> anyhow::Result<(f64, f64, u64, usize)> {
    let idle = IdleLogs::default();
    let lease = reader.meta().lease_grant(Duration::from_secs(60)).await?;
    let c = Compactor::new(reader.clone(), "bench", lease, cfg.clone()).with_idle(idle);
    let cpu0 =
        crate::bench::process_cpu_seconds("/proc/self/stat").context("no /proc/self/stat")?;
    let started = Instant::now();
    let (mut bytes, mut segments, mut quiet) = (0u64, 0usize, 0);
    while quiet < 2 {
        match c.compact_log_fully(log).await? {
            Ok(done) => {
                quiet = 0;
                bytes += done.iter().map(|d| d.bytes).sum::<u64>();
                segments += done.len();
            }
            Err(_) => quiet += 1,
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = crate::bench::process_cpu_seconds("/proc/self/stat").context("no /proc/self/stat")?;
    let _ = reader.meta().lease_revoke(lease).await;
    Ok((cpu - cpu0, wall, bytes, segments))
}

/// The end offset the table of `identity` holds of `log`.
async fn table_end(reader: &LogReader, identity: &str, log: LogId) -> anyhow::Result<u64> {
    let key = reader.keys().lake_table(identity);
    Ok(match reader.meta().get(&key).await? {
        Some(kv) => maintenance::lakes::decode_table(&kv.value)?
            .ends
            .get(&log.0.to_string())
            .copied()
            .unwrap_or(0),
        None => 0,
    })
}

/// A number for the JSON line (`null` when there is none).
fn num(x: f64) -> String {
    if x.is_finite() { format!("{x:.2}") } else { "null".to_owned() }
}

/// Percentile `p` (0–1) of sorted `xs`.
fn pct(xs: &[f64], p: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs[((xs.len() - 1) as f64 * p).round() as usize]
}

/// Runs `lakelog bench lake-compact`.
pub async fn run(args: LakeCompactArgs) -> anyhow::Result<()> {
    let (storage, objects, meta, _) = crate::bench::open_local(
        args.data_dir.clone(),
        args.config.clone(),
        config::Duration(Duration::from_millis(250)),
        None,
    )
    .await?;
    let cluster = storage.reader().keys().cluster().to_owned();
    let reader = LogReader::new(meta.clone(), objects.clone(), &cluster);
    let value_len = usize::try_from(args.value_size.0)?;
    let entries = crate::bench::lake::batches_of(args.bytes.0, value_len, args.records_per_batch)?;
    let payload: u64 = entries.iter().map(|e| e.batch.len() as u64).sum();
    let mb = payload as f64 / 1e6;

    // 1. Compaction throughput, plain then lake, the same batches.
    let (plain, lake) = (storage.create_log().await?, storage.create_log().await?);
    let identity = format!("bench-{}", lake.0);
    let started = Instant::now();
    fill(&storage, plain, &entries).await?;
    fill(&storage, lake, &entries).await?;
    // A flush after theirs moves the writer's low-water mark past their chunks.
    let other = storage.create_log().await?;
    storage.append(other, 1, bytes::Bytes::from_static(b"x"), None).await?;
    eprintln!(
        "appended {mb:.1} MB to each of two logs in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // One pass over the bytes each: a target above them, so no segment is merged again.
    let cfg = CompactorConfig {
        min_chunks: 1,
        target_segment_bytes: payload.saturating_mul(2),
        lakes: lakes(&[(lake, &identity)]),
        ..Default::default()
    };
    let (plain_cpu, plain_wall, plain_bytes, plain_segs) =
        compact_to_end(&reader, plain, &cfg).await?;
    let (lake_cpu, lake_wall, lake_bytes, lake_segs) = compact_to_end(&reader, lake, &cfg).await?;
    ensure!(
        plain_segs > 0 && lake_segs > 0,
        "nothing compacted ({plain_segs} / {lake_segs} segments)"
    );
    let end = storage.info(lake).await?.next_offset;
    ensure!(
        table_end(&reader, &identity, lake).await? == end,
        "the table does not hold the whole log"
    );
    let per_core = |cpu: f64| mb / cpu.max(1e-9);
    let per_wall = |wall: f64| mb / wall.max(1e-9);

    // 2. Freshness at the compaction interval.
    let (freshness, unseen) = match args.freshness_for.0.is_zero() {
        true => (Vec::new(), 0),
        false => freshness(&storage, &reader, &args).await?,
    };
    storage.shutdown().await;

    let report = crate::bench::Report {
        rows: vec![
            ("batches per log".into(), format!("{} ({mb:.1} MB)", entries.len())),
            ("segments (plain / lake)".into(), format!("{plain_segs} / {lake_segs}")),
            (
                "segment MB written (plain / lake)".into(),
                format!("{:.1} / {:.1}", plain_bytes as f64 / 1e6, lake_bytes as f64 / 1e6),
            ),
            (
                "compaction MB/s per core (plain / lake)".into(),
                format!("{:.0} / {:.0}", per_core(plain_cpu), per_core(lake_cpu)),
            ),
            (
                "compaction MB/s wall (plain / lake)".into(),
                format!("{:.0} / {:.0}", per_wall(plain_wall), per_wall(lake_wall)),
            ),
            (
                "lake compaction CPU / plain".into(),
                format!("{:.1}x", lake_cpu / plain_cpu.max(1e-9)),
            ),
            (
                format!("table freshness at {:?} compactions (p50 / p99 / max)", args.interval.0),
                format!(
                    "{:.1} / {:.1} / {:.1} s ({} appends seen, {unseen} not yet)",
                    pct(&freshness, 0.5),
                    pct(&freshness, 0.99),
                    pct(&freshness, 1.0),
                    freshness.len()
                ),
            ),
        ],
        json: vec![
            ("batch_mb".into(), format!("{mb:.3}")),
            ("plain_segments".into(), plain_segs.to_string()),
            ("lake_segments".into(), lake_segs.to_string()),
            ("plain_mb_per_cpu_s".into(), format!("{:.1}", per_core(plain_cpu))),
            ("lake_mb_per_cpu_s".into(), format!("{:.1}", per_core(lake_cpu))),
            ("plain_mb_per_s".into(), format!("{:.1}", per_wall(plain_wall))),
            ("lake_mb_per_s".into(), format!("{:.1}", per_wall(lake_wall))),
            ("interval_s".into(), format!("{:.1}", args.interval.0.as_secs_f64())),
            ("freshness_p50_s".into(), num(pct(&freshness, 0.5))),
            ("freshness_p99_s".into(), num(pct(&freshness, 0.99))),
            ("freshness_max_s".into(), num(pct(&freshness, 1.0))),
            ("appends_seen".into(), freshness.len().to_string()),
            ("appends_unseen".into(), unseen.to_string()),
        ],
    };
    report.print(args.json);
    Ok(())
}

/// Table freshness: appends every `args.produce_every` for `args.freshness_for` while a
/// compaction cycle runs every `args.interval`; each append's time from its ack to its table
/// holding it (sorted), and how many appends no cycle made visible.
async fn freshness(
    storage: &logstore::LogStorage,
    reader: &LogReader,
    args: &LakeCompactArgs,
) -> anyhow::Result<(Vec<f64>, usize)> {
    let mut freshness: Vec<f64> = Vec::new();
    let log = storage.create_log().await?;
    let identity = format!("bench-{}", log.0);
    let cfg = CompactorConfig { lakes: lakes(&[(log, &identity)]), ..Default::default() };
    let small = crate::bench::lake::batches_of(64 << 10, 100, 10)?;
    ensure!(!small.is_empty(), "no batch to produce");
    let acks = Arc::new(parking_lot::Mutex::new(Vec::<(u64, Instant)>::new()));
    let producer = {
        let (storage, acks, every, until) =
            (storage.clone(), acks.clone(), args.produce_every.0, args.freshness_for.0);
        tokio::spawn(async move {
            let started = Instant::now();
            let mut tick = tokio::time::interval(every);
            let mut i = 0usize;
            while started.elapsed() < until {
                tick.tick().await;
                let e = &small[i % small.len()];
                i += 1;
                let h = recordbatch::BatchHeader::parse(&e.batch)?;
                let opts =
                    logstore::Conditions { timestamp: Some(h.max_timestamp), ..Default::default() };
                let c = storage
                    .submit_in_slot(log, "*", u32::try_from(h.record_count)?, e.batch.clone(), opts)
                    .await?;
                let acks = acks.clone();
                tokio::spawn(async move {
                    if let Ok(h) = c.await {
                        acks.lock().push((h.end_offset(), Instant::now()));
                    }
                });
            }
            anyhow::Ok(())
        })
    };
    let idle = IdleLogs::default();
    let started = Instant::now();
    let mut seen = 0usize;
    while started.elapsed() < args.freshness_for.0 {
        tokio::time::sleep(
            args.interval.0.min(args.freshness_for.0.saturating_sub(started.elapsed())),
        )
        .await;
        let r = compact_all(reader.clone(), "bench", cfg.clone(), Some(log), &idle).await?;
        if let Some((_, e)) = r.failed.first() {
            bail!("compaction failed: {e}");
        }
        let visible = table_end(reader, &identity, log).await?;
        let now = Instant::now();
        let mut acked = acks.lock().clone();
        acked.sort_by_key(|a| a.0);
        for (end, at) in acked.iter().skip(seen).take_while(|(end, _)| *end <= visible) {
            let _ = end;
            freshness.push(now.duration_since(*at).as_secs_f64());
            seen += 1;
        }
        eprintln!(
            "cycle at {:.0} s: table holds [0, {visible}), {} appends acked",
            started.elapsed().as_secs_f64(),
            acked.len()
        );
    }
    producer.await??;
    let unseen = acks.lock().len() - seen;
    freshness.sort_by(f64::total_cmp);
    Ok((freshness, unseen))
}
