//! `lakelog bench lake`: what a lake segment costs one compactor core against a plain one.
//! The same Kafka batches (generated: keyed records whose values are half random letters, so
//! they compress about 2:1) are built into a plain segment (the WAL format: each entry copied
//! and checksummed) and into a lake segment (Parquet), then read back: the plain segment's
//! entries checked, the lake segment's row groups decoded and framed as batches again. Each
//! step runs on one core, in process, with no store: this is the codec's cost, not the
//! compactor's I/O.

use std::time::Instant;

use anyhow::{Context, ensure};
use bytes::Bytes;
use lake::segment::{Entry, Footer, Options, read_row_group, write};
use recordbatch::{ProducerFields, Record};

/// Options of `lakelog bench lake`.
#[derive(clap::Args, Debug)]
pub struct LakeArgs {
    /// Bytes of batches per segment.
    #[arg(long, default_value = "64MiB")]
    bytes: config::ByteSize,
    /// Bytes per record value.
    #[arg(long, default_value = "1000")]
    value_size: config::ByteSize,
    /// Records per batch (one entry each).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    records_per_batch: u32,
    /// Times each step runs (the fastest counts).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
    /// Print one JSON object on the last stdout line.
    #[arg(long)]
    json: bool,
}

/// Batches of about `bytes` in all, at offsets from 0.
fn batches(args: &LakeArgs) -> anyhow::Result<Vec<Entry>> {
    let value_len = usize::try_from(args.value_size.0)?;
    batches_of(args.bytes.0, value_len, args.records_per_batch)
}

/// Batches of about `bytes` in all, at offsets from 0, of `records_per_batch` keyed records
/// with values of `value_len` bytes (half random letters: they compress about 2:1).
pub(crate) fn batches_of(
    bytes: u64,
    value_len: usize,
    records_per_batch: u32,
) -> anyhow::Result<Vec<Entry>> {
    ensure!(value_len <= 1 << 20, "INVALID_ARGUMENT: --value-size is at most 1 MiB");
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let (mut entries, mut offset, mut total) = (Vec::new(), 0u64, 0u64);
    while total < bytes {
        let records: Vec<Record> = (0..records_per_batch)
            .map(|i| {
                let value: Vec<u8> = (0..value_len)
                    .map(|j| {
                        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                        if j % 2 == 0 { b'a' + ((seed >> 33) % 16) as u8 } else { b'x' }
                    })
                    .collect();
                let n = offset + u64::from(i);
                Record {
                    offset_delta: i,
                    timestamp_ms: 1_700_000_000_000 + n as i64,
                    key: Some(Bytes::from(format!("key-{}", n % 10_000))),
                    value: Some(Bytes::from(value)),
                    headers: vec![],
                }
            })
            .collect();
        let batch = recordbatch::encode(&records, ProducerFields::NONE)?;
        total += batch.len() as u64;
        entries.push(Entry { offset, ingest_ms: 1_700_000_000_000, batch });
        offset += u64::from(records_per_batch);
    }
    Ok(entries)
}

/// The fastest of `runs` runs of `step`, in seconds, and its last result.
fn fastest<T>(runs: u32, mut step: impl FnMut() -> anyhow::Result<T>) -> anyhow::Result<(f64, T)> {
    let mut best = f64::MAX;
    let mut out = None;
    for _ in 0..runs {
        let t = Instant::now();
        let r = step()?;
        best = best.min(t.elapsed().as_secs_f64());
        out = Some(r);
    }
    Ok((best, out.context("no run")?))
}

/// Runs `lakelog bench lake`.
pub fn run(args: LakeArgs) -> anyhow::Result<()> {
    let entries = batches(&args)?;
    let bytes: u64 = entries.iter().map(|e| e.batch.len() as u64).sum();
    let mb = bytes as f64 / 1e6;
    // Plain: the compactor's segment, every entry copied after a 20-byte header with its CRC.
    let (plain_write, plain) = fastest(args.runs, || {
        let mut b = wal::ObjectBuilder::with_capacity(wal::ObjectKind::Segment, bytes as usize);
        b.begin_chunk(1);
        for e in &entries {
            let count = recordbatch::BatchHeader::parse(&e.batch)?.record_count as u32;
            b.push_entry(count, e.ingest_ms, &e.batch)?;
        }
        Ok(b.finish()?)
    })?;
    let (object, chunks) = plain;
    let chunk = chunks.first().context("a segment with no chunk")?;
    let range = chunk.byte_start as usize..(chunk.byte_start + chunk.byte_len) as usize;
    let chunk_bytes = object.slice(range);
    let (plain_read, read) = fastest(args.runs, || Ok(wal::decode_entries(&chunk_bytes)?.len()))?;
    ensure!(read == entries.len(), "the plain segment read back {read} entries");
    // Lake: the Parquet segment, and every row group read back as batches.
    let (lake_write, seg) = fastest(args.runs, || Ok(write(&entries, &Options::default())?))?;
    let tail = seg.file.slice(seg.file.len() - seg.footer_len as usize..);
    let (lake_read, read) = fastest(args.runs, || {
        let footer = Footer::parse(&tail, seg.footer_crc32c)?;
        let mut n = 0;
        for (i, g) in seg.row_groups.iter().enumerate() {
            let rg = seg.file.slice(g.start as usize..(g.start + g.len) as usize);
            n += read_row_group(&footer, i, rg)?.len();
        }
        Ok(n)
    })?;
    ensure!(read == entries.len(), "the lake segment read back {read} batches");
    let rate = |s: f64| mb / s;
    let report = crate::bench::Report {
        rows: vec![
            ("batches".into(), format!("{} ({mb:.1} MB)", entries.len())),
            (
                "segment MB (plain / lake)".into(),
                format!("{:.1} / {:.1}", object.len() as f64 / 1e6, seg.file.len() as f64 / 1e6),
            ),
            ("lake row groups".into(), seg.row_groups.len().to_string()),
            (
                "write MB/s per core (plain / lake)".into(),
                format!("{:.0} / {:.0}", rate(plain_write), rate(lake_write)),
            ),
            (
                "read MB/s per core (plain / lake)".into(),
                format!("{:.0} / {:.0}", rate(plain_read), rate(lake_read)),
            ),
            ("lake write CPU / plain".into(), format!("{:.1}x", lake_write / plain_write)),
        ],
        json: vec![
            ("batch_mb".into(), format!("{mb:.3}")),
            ("plain_segment_mb".into(), format!("{:.3}", object.len() as f64 / 1e6)),
            ("lake_segment_mb".into(), format!("{:.3}", seg.file.len() as f64 / 1e6)),
            ("row_groups".into(), seg.row_groups.len().to_string()),
            ("plain_write_mb_per_s".into(), format!("{:.1}", rate(plain_write))),
            ("lake_write_mb_per_s".into(), format!("{:.1}", rate(lake_write))),
            ("plain_read_mb_per_s".into(), format!("{:.1}", rate(plain_read))),
            ("lake_read_mb_per_s".into(), format!("{:.1}", rate(lake_read))),
        ],
    };
    report.print(args.json);
    Ok(())
}
