//! `lakelog bench compact-keys`: key compaction (compacted topics) through the real compactor,
//! in process, on a local directory or a config's stores. One log takes `--updates` keyed
//! records over `--keys` keys; its chunks are compacted to segments (not measured), then key
//! compaction passes run until one finds nothing dirty. It prints keyed records (each a key
//! hashed and looked up) and payload bytes compacted per CPU second of this process (per
//! compactor core), the records and bytes before and after, the key map's memory, and the
//! process's peak RSS.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use bytes::Bytes;
use logstore::{LogId, LogReader, LogStorage};
use maintenance::compactor::{Cleanup, Compactor, CompactorConfig, IdleLogs};

/// Options of `lakelog bench compact-keys`.
#[derive(clap::Args, Debug)]
pub struct CompactKeysArgs {
    /// Run an in-process standalone writer on this local directory (created if missing).
    #[arg(long, conflicts_with = "config")]
    data_dir: Option<PathBuf>,
    /// Run an in-process writer on the metadata and object stores of this config file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Distinct keys.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Records appended, each an update of key `i % keys`.
    #[arg(long, default_value_t = 2_000_000)]
    updates: u64,
    /// Bytes per record value.
    #[arg(long, default_value = "100")]
    value_size: config::ByteSize,
    /// Records per batch (one entry each).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    records_per_batch: u32,
    /// The key map's memory (`maintenance.key_map_size`).
    #[arg(long, default_value = "32MiB")]
    key_map_size: config::ByteSize,
    /// Print one JSON object on the last stdout line.
    #[arg(long)]
    json: bool,
}

/// Appends `updates` keyed records to `log`, `per_batch` a batch, many batches in flight.
async fn fill(storage: &LogStorage, log: LogId, args: &CompactKeysArgs) -> anyhow::Result<u64> {
    let value = Bytes::from(vec![b'v'; usize::try_from(args.value_size.0)?]);
    let (mut pending, mut bytes, mut i) = (Vec::with_capacity(256), 0u64, 0u64);
    while i < args.updates {
        let n = u64::from(args.records_per_batch).min(args.updates - i);
        let records: Vec<recordbatch::Record> = (0..n)
            .map(|d| recordbatch::Record {
                offset_delta: d as u32,
                timestamp_ms: 1_700_000_000_000,
                key: Some(Bytes::from(format!("key-{:012}", (i + d) % args.keys))),
                value: Some(value.clone()),
                headers: Vec::new(),
            })
            .collect();
        let batch = recordbatch::encode(&records, recordbatch::ProducerFields::NONE)?;
        bytes += batch.len() as u64;
        let count = u32::try_from(n)?;
        pending.push(storage.submit_in_slot(log, "*", count, batch, Default::default()).await?);
        if pending.len() == 256 {
            for p in pending.drain(..) {
                p.await?;
            }
        }
        i += n;
    }
    for p in pending {
        p.await?;
    }
    Ok(bytes)
}

/// Payload bytes of the log's segments and WAL chunks now, and its records.
async fn size(storage: &LogStorage, log: LogId) -> anyhow::Result<(u64, u64)> {
    let info = storage.info(log).await?;
    let (mut at, mut bytes, mut records) = (info.first_offset, 0u64, 0u64);
    while at < info.next_offset {
        let got = storage.read_entries(log, at, 100_000, u64::MAX).await?;
        let last = got.last().context("empty read below the high watermark")?;
        at = last.header.end_offset();
        for e in got {
            bytes += e.payload.len() as u64;
            records += recordbatch::BatchHeader::parse(&e.payload)?.record_count as u64;
        }
    }
    Ok((bytes, records))
}

/// The process's peak resident set (VmHWM), bytes.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

pub async fn run(args: CompactKeysArgs) -> anyhow::Result<()> {
    let (storage, objects, meta, _) = crate::bench::open_local(
        args.data_dir.clone(),
        args.config.clone(),
        config::Duration(Duration::from_millis(250)),
        None,
    )
    .await?;
    let cluster = storage.reader().keys().cluster().to_owned();
    let reader = LogReader::new(meta.clone(), objects.clone(), &cluster);
    let log = storage.create_log().await?;
    let started = Instant::now();
    let appended = fill(&storage, log, &args).await?;
    // A flush after theirs moves the writer's low-water mark past their chunks.
    let other = storage.create_log().await?;
    storage.append(other, 1, Bytes::from_static(b"x"), None).await?;
    eprintln!(
        "appended {} records ({:.1} MB) over {} keys in {:.1} s",
        args.updates,
        appended as f64 / 1e6,
        args.keys,
        started.elapsed().as_secs_f64()
    );
    let cfg = CompactorConfig {
        min_chunks: 1,
        key_map_bytes: usize::try_from(args.key_map_size.0)?,
        ..Default::default()
    };
    let lease = meta.lease_grant(Duration::from_secs(120)).await?;
    let c = Compactor::new(reader, "bench", lease, cfg).with_idle(IdleLogs::default());
    // The chunks to segments first (plain compaction, not measured).
    let mut quiet = 0;
    while quiet < 2 {
        match c.compact_log_fully(log).await? {
            Ok(_) => quiet = 0,
            Err(_) => quiet += 1,
        }
    }
    let (bytes_before, records_before) = size(&storage, log).await?;
    let cleanup = Cleanup { min_dirty_ratio: 0.0, ..Default::default() };
    let cpu0 =
        crate::bench::process_cpu_seconds("/proc/self/stat").context("no /proc/self/stat")?;
    let t0 = Instant::now();
    let (mut keys, mut read, mut map_bytes, mut passes) = (0u64, 0u64, 0usize, 0);
    loop {
        let done = match c.clean_log(log, &cleanup).await? {
            Ok(done) => done,
            Err(skipped) => bail!("key compaction skipped the log: {skipped:?}"),
        };
        // A pass that maps no key found nothing dirty: the log is clean. (A pass may map keys
        // and drop nothing: with a small map, a key's later records come in later passes.)
        if done.keys == 0 {
            break;
        }
        passes += 1;
        keys += done.keys as u64;
        read += done.bytes_in;
        map_bytes = map_bytes.max(done.map_bytes);
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu =
        crate::bench::process_cpu_seconds("/proc/self/stat").context("no /proc/self/stat")? - cpu0;
    let _ = meta.lease_revoke(lease).await;
    let (bytes_after, records_after) = size(&storage, log).await?;
    ensure!(passes > 0, "key compaction changed nothing");
    ensure!(records_after <= args.keys, "{records_after} records left for {} keys", args.keys);
    let per_core = |x: f64| x / cpu.max(1e-9);
    let rss = peak_rss().unwrap_or(0);
    println!(
        "key compaction: {passes} passes, {:.2} s CPU ({wall:.2} s wall): {:.0} keyed records/s and {:.1} MB/s per core; {keys} keys mapped; records {records_before} -> {records_after}, payload {:.1} MB -> {:.1} MB; key map {:.1} MiB; peak RSS {:.0} MiB",
        cpu,
        per_core(records_before as f64),
        per_core(read as f64) / 1e6,
        bytes_before as f64 / 1e6,
        bytes_after as f64 / 1e6,
        map_bytes as f64 / (1 << 20) as f64,
        rss as f64 / (1 << 20) as f64,
    );
    if args.json {
        println!(
            "{{\"keys\":{},\"updates\":{},\"passes\":{passes},\"keys_mapped\":{keys},\"cpu_s\":{cpu:.3},\"wall_s\":{wall:.3},\"records_per_core_s\":{:.0},\"mb_per_core_s\":{:.2},\"records_before\":{records_before},\"records_after\":{records_after},\"bytes_before\":{bytes_before},\"bytes_after\":{bytes_after},\"key_map_bytes\":{map_bytes},\"peak_rss_bytes\":{rss}}}",
            args.keys,
            args.updates,
            per_core(records_before as f64),
            per_core(read as f64) / 1e6,
        );
    }
    storage.shutdown().await;
    Ok(())
}
