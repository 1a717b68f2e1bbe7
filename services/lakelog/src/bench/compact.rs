//! `lakelog bench compact`: one log written one entry per flush while compaction cycles run
//! every `--compact-every` flushes (so compaction makes small segments, and merges them), then
//! left idle, compacted to the end and read back from offset 0 by a fresh reader with the
//! reader role's default cache. Reports the segments left, the rewrites, the bytes the
//! compactor wrote per byte appended, and the GETs of the read-back against bytes / target + 2.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use bytes::Bytes;
use logstore::LogReader;
use maintenance::compactor::{CompactorConfig, IdleLogs, compact_all};
use objstore::counting::CountingStore;

/// Options of `lakelog bench compact`.
#[derive(clap::Args, Debug)]
pub struct CompactArgs {
    /// Run an in-process standalone writer on this local directory (created if missing).
    #[arg(long, conflicts_with = "config")]
    data_dir: Option<PathBuf>,
    /// Run an in-process writer on the metadata and object stores of this config file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Flushes to write, one entry each.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    flushes: u64,
    /// Bytes per entry.
    #[arg(long, default_value = "16KiB")]
    entry_size: config::ByteSize,
    /// Flushes between compaction cycles while writing (0: none while writing).
    #[arg(long, default_value_t = 500)]
    compact_every: u64,
    /// The compactor's target_segment_size.
    #[arg(long, default_value = "64MiB")]
    target_segment_size: config::ByteSize,
    /// How long a log goes without appends before its small segments merge whatever their
    /// sizes (the role's default is 1h; the range written here is old once written).
    #[arg(long, default_value = "0s")]
    settle_after: config::Duration,
    /// The reading reader's byte cache (the reader role's default).
    #[arg(long, default_value = "256MiB")]
    reader_cache: config::ByteSize,
    /// Print each rewrite (offsets, pieces taken, bytes) to stderr.
    #[arg(long)]
    verbose: bool,
    /// Print one JSON object on the last stdout line.
    #[arg(long)]
    json: bool,
}

/// What the compaction cycles did, summed.
#[derive(Debug, Default)]
struct Rewrites {
    verbose: bool,
    cycles: u64,
    segments_written: u64,
    segments_merged: u64,
    bytes_written: u64,
}

impl Rewrites {
    async fn cycle(
        &mut self,
        reader: &LogReader,
        cfg: &CompactorConfig,
        idle: &IdleLogs,
    ) -> anyhow::Result<bool> {
        let r = compact_all(reader.clone(), "bench", cfg.clone(), None, idle).await?;
        if let Some((log, e)) = r.failed.first() {
            bail!("compaction of log {log} failed: {e}");
        }
        self.cycles += 1;
        for c in r.compacted.iter().filter(|_| self.verbose) {
            eprintln!(
                "  [{}, {}) from {} WAL chunks and {} segments: {} bytes",
                c.first_offset, c.end_offset, c.chunks, c.segments, c.bytes
            );
        }
        self.segments_written += r.compacted.len() as u64;
        self.segments_merged += r.compacted.iter().map(|c| c.segments as u64).sum::<u64>();
        self.bytes_written += r.compacted.iter().map(|c| c.bytes).sum::<u64>();
        Ok(!r.compacted.is_empty())
    }
}

/// Runs `lakelog bench compact`.
pub async fn run(args: CompactArgs) -> anyhow::Result<()> {
    // Eager flushes: each append, awaited before the next, is a flush of its own.
    let (storage, objects, meta, puts) = crate::bench::open_local(
        args.data_dir.clone(),
        args.config.clone(),
        config::Duration(Duration::from_millis(5)),
        Some(config::Duration(Duration::from_millis(1))),
    )
    .await?;
    let cluster = storage.reader().keys().cluster().to_owned();
    let log = storage.create_log().await?;
    let target = args.target_segment_size.0.max(1);
    let cfg = CompactorConfig {
        min_chunks: 16,
        target_segment_bytes: target,
        settle_after: args.settle_after.0,
        ..Default::default()
    };
    let idle = IdleLogs::default();
    // The compactor reads and writes uncounted: the counts are the writer's flushes.
    let compactor_reader = LogReader::new(meta.clone(), objects.clone(), &cluster);
    let size = (args.entry_size.0 as usize).max(16);
    let payload = |i: u64| {
        let mut p = vec![0x5a; size];
        p[..8].copy_from_slice(&i.to_le_bytes());
        Bytes::from(p)
    };
    let mut rewrites = Rewrites { verbose: args.verbose, ..Default::default() };
    let started = Instant::now();
    let puts0 = puts.get(&puts.puts);
    for i in 0..args.flushes {
        storage.append(log, 1, payload(i), None).await?;
        if args.compact_every > 0 && (i + 1) % args.compact_every == 0 {
            rewrites.cycle(&compactor_reader, &cfg, &idle).await?;
            eprintln!(
                "{} flushes, {} segments written ({} merged) in {:.1} s",
                i + 1,
                rewrites.segments_written,
                rewrites.segments_merged,
                started.elapsed().as_secs_f64()
            );
        }
    }
    let flushes = puts.get(&puts.puts) - puts0;
    let write_secs = started.elapsed().as_secs_f64();
    // The range is old now: its writer gone, the log idle. Read back as it is (the baseline),
    // then compacted by cycles until two find nothing, and read back again.
    storage.shutdown().await;
    let read_back = |cached: bool| {
        let (counted, counts) = CountingStore::new(objects.clone());
        let cache = if cached { args.reader_cache.0 as usize } else { 0 };
        let reader = LogReader::new(meta.clone(), counted, &cluster)
            .with_caches(cache, logstore::DEFAULT_INDEX_PAGES);
        let entries = args.flushes;
        async move {
            let (mut at, mut bytes) = (0u64, 0u64);
            let started = Instant::now();
            while at < entries {
                let got = reader.read_entries(log, at, u64::MAX, 4 << 20).await?;
                ensure!(!got.is_empty(), "nothing read at offset {at}");
                for e in got {
                    ensure!(
                        e.header.offset == at,
                        "offset {} where {at} was next",
                        e.header.offset
                    );
                    ensure!(
                        e.payload == payload(at),
                        "the entry at {at} differs from the one appended"
                    );
                    bytes += e.payload.len() as u64;
                    at = e.header.end_offset();
                }
            }
            let mb_s = bytes as f64 / started.elapsed().as_secs_f64().max(1e-9) / 1e6;
            anyhow::Ok((bytes, counts.get(&counts.gets), mb_s))
        }
    };
    let (_, gets_before, mb_s_before) = read_back(true).await?;
    let mut quiet = 0;
    for _ in 0..16 {
        quiet = if rewrites.cycle(&compactor_reader, &cfg, &idle).await? { 0 } else { quiet + 1 };
        if quiet == 2 {
            break;
        }
    }
    // The layout: one index page per segment once everything is compacted.
    let pages = meta
        .range(
            metadata::RangeRequest::prefix(compactor_reader.keys().index_prefix(log)).keys_only(),
        )
        .await?
        .kvs
        .len();

    // Read back from the start through a fresh reader, counting its GETs.
    let (bytes, gets, mb_s) = read_back(true).await?;
    // And by a reader with no cache room, which reads large segments in blocks.
    let (_, gets_blocks, mb_s_blocks) = read_back(false).await?;
    let bound = bytes / target + 2;
    let appended = (args.flushes * size as u64).max(1);
    let amplification = rewrites.bytes_written as f64 / appended as f64;
    println!(
        "wrote {} entries of {size} B in {flushes} flushes ({write_secs:.1} s), {} compaction cycles",
        args.flushes, rewrites.cycles
    );
    println!(
        "compaction: {} segments written, {} merged into larger ones; {:.2} bytes written per byte appended",
        rewrites.segments_written, rewrites.segments_merged, amplification
    );
    println!("before the last cycles: read back with {gets_before} GETs at {mb_s_before:.1} MB/s");
    println!(
        "left: {pages} index pages (segments); read back {bytes} bytes with {gets} GETs (bound bytes / {} MiB + 2 = {bound}) at {mb_s:.1} MB/s",
        target >> 20,
    );
    println!(
        "without a cache (large segments read in blocks): {gets_blocks} GETs at {mb_s_blocks:.1} MB/s"
    );
    if args.json {
        println!(
            "{{\"flushes\":{flushes},\"entries\":{},\"entry_size\":{size},\"cycles\":{},\"segments_written\":{},\"segments_merged\":{},\"write_amplification\":{amplification:.3},\"segments_left\":{pages},\"bytes\":{bytes},\"gets\":{gets},\"get_bound\":{bound},\"read_mb_s\":{mb_s:.1},\"gets_before\":{gets_before},\"read_mb_s_before\":{mb_s_before:.1},\"gets_blocks\":{gets_blocks},\"read_mb_s_blocks\":{mb_s_blocks:.1}}}",
            args.flushes, rewrites.cycles, rewrites.segments_written, rewrites.segments_merged,
        );
    }
    // The bound holds for a reader whose cache keeps a whole segment (over half of it: a
    // larger segment is read in blocks, a GET each).
    if args.reader_cache.0 / 2 > target + target / 8 {
        ensure!(gets <= bound, "{gets} GETs read the range back, over the bound of {bound}");
    } else {
        println!("(the reader's cache holds no whole segment: it read them in blocks; no bound)");
    }
    Ok(())
}
