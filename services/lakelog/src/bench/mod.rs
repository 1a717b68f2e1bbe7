//! `lakelog bench`: load generators that report ratios against same-run baselines of the store
//! they run on (this machine is shared: a bare time means little, a ratio measured in one run
//! does).

pub(crate) mod append;
pub(crate) mod catchup;
pub(crate) mod compact;
pub(crate) mod compact_keys;
pub(crate) mod lake;
pub(crate) mod lake_compact;
pub(crate) mod produce;
pub(crate) mod read;
pub(crate) mod share;

use append::{AppendArgs, Target, open_target};

/// Runs `lakelog bench …`; `endpoint` is the role the remote benchmarks load.
pub(crate) async fn run(
    command: crate::cli::BenchCommand,
    endpoint: &str,
    sec: &client::Security,
) -> anyhow::Result<()> {
    use crate::cli::BenchCommand;
    match command {
        BenchCommand::Append(args) => append::append(args, endpoint).await,
        BenchCommand::Read(args) => read::read(args).await,
        BenchCommand::Compact(args) => compact::run(args).await,
        BenchCommand::CompactKeys(args) => compact_keys::run(args).await,
        BenchCommand::Lake(args) => lake::run(args),
        BenchCommand::LakeCompact(args) => lake_compact::run(args).await,
        BenchCommand::Produce(args) => produce::run(args, endpoint, sec).await,
        BenchCommand::Catchup(args) => catchup::run(args, endpoint).await,
        BenchCommand::Share(args) => share::run(args).await,
    }
}

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::bail;
use logstore::LogStorage;
use metadata::MetadataStore;
use objstore::counting::Counts;
use objstore::object_store::ObjectStore;

/// Percentiles of a latency sample, in milliseconds.
#[derive(Debug, Default, Clone, Copy)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Percentiles {
    /// From microsecond samples (sorted in place).
    pub fn of(samples: &mut [u64]) -> Self {
        if samples.is_empty() {
            return Percentiles::default();
        }
        samples.sort_unstable();
        let at = |q: f64| {
            let i = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
            samples[i] as f64 / 1000.0
        };
        Percentiles { p50: at(0.5), p90: at(0.9), p99: at(0.99), p999: at(0.999), max: at(1.0) }
    }

    pub(crate) fn json(&self) -> String {
        format!(
            "{{\"p50\":{:.3},\"p90\":{:.3},\"p99\":{:.3},\"p999\":{:.3},\"max\":{:.3}}}",
            self.p50, self.p90, self.p99, self.p999, self.max
        )
    }
}

/// Latencies in microseconds, counted in fixed buckets that many tasks fill at once: exact
/// below 64 µs, within 1/32 above (32 buckets per power of two). Its memory is fixed (15 KiB),
/// where a sample of every append grew with the run (8 MiB per 750,000 appends, beside the
/// writer whose memory the bench reports).
pub struct LatencyHistogram {
    buckets: Box<[AtomicU64]>,
    max: AtomicU64,
}

impl LatencyHistogram {
    const EXACT: u64 = 64;
    const PER_POWER: usize = 32;
    const BUCKETS: usize = 64 + (63 - 6 + 1) * Self::PER_POWER;

    pub fn new() -> Self {
        let buckets = (0..Self::BUCKETS).map(|_| AtomicU64::new(0)).collect();
        LatencyHistogram { buckets, max: AtomicU64::new(0) }
    }

    fn bucket(us: u64) -> usize {
        if us < Self::EXACT {
            return us as usize;
        }
        // The power of two at or below `us` (6 … 63) and its next five bits.
        let power = 63 - us.leading_zeros() as usize;
        let sub = ((us >> (power - 5)) & 31) as usize;
        Self::EXACT as usize + (power - 6) * Self::PER_POWER + sub
    }

    /// The largest value in bucket `i`.
    fn upper(i: usize) -> u64 {
        if i < Self::EXACT as usize {
            return i as u64;
        }
        let j = i - Self::EXACT as usize;
        let (power, sub) = (j / Self::PER_POWER + 6, (j % Self::PER_POWER) as u64);
        let width = 1u64 << (power - 5);
        ((32 + sub) << (power - 5)) + (width - 1)
    }

    pub fn record(&self, us: u64) {
        self.buckets[Self::bucket(us)].fetch_add(1, Ordering::Relaxed);
        self.max.fetch_max(us, Ordering::Relaxed);
    }

    /// Nearest-rank percentiles, each the top of its bucket (never below the true value, at
    /// most 1/32 above it), the maximum exact.
    pub fn percentiles(&self) -> Percentiles {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        let n: u64 = counts.iter().sum();
        if n == 0 {
            return Percentiles::default();
        }
        let max = self.max.load(Ordering::Relaxed);
        let at = |q: f64| {
            let rank = ((n as f64 * q).ceil() as u64).clamp(1, n);
            let mut seen = 0;
            for (i, c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return Self::upper(i).min(max) as f64 / 1000.0;
                }
            }
            max as f64 / 1000.0
        };
        Percentiles {
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            p999: at(0.999),
            max: max as f64 / 1000.0,
        }
    }
}

/// Peak resident memory of this process, in MiB (Linux `VmHWM`).
pub(crate) fn rss_peak_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// An in-process writer on a local directory or a config's stores (what `bench read` and
/// `bench compact` run on): the writer, the raw object store (no counting), the metadata store,
/// and the writer's object-store counts.
pub(crate) async fn open_local(
    data_dir: Option<PathBuf>,
    config: Option<PathBuf>,
    flush_interval: config::Duration,
    min_flush_interval: Option<config::Duration>,
) -> anyhow::Result<(LogStorage, Arc<dyn ObjectStore>, Arc<dyn MetadataStore>, Arc<Counts>)> {
    let append_args = AppendArgs {
        data_dir,
        config,
        logs: 1,
        record_size: config::ByteSize(1000),
        records_per_entry: 1,
        concurrency: 1,
        flush_interval,
        min_flush_interval,
        commit_interval: None,
        rate: None,
        duration: None,
        bytes: None,
        baseline: false,
        store_pid: None,
        json: false,
    };
    match open_target(&append_args, "").await? {
        Target::Local { storage, objects, meta, puts, .. } => Ok((storage, objects, meta, puts)),
        Target::Remote { .. } => {
            bail!("INVALID_ARGUMENT: this bench runs in process: give --data-dir or --config")
        }
    }
}

/// Rows for people, and the same figures as one JSON object.
pub(crate) struct Report {
    pub(crate) rows: Vec<(String, String)>,
    pub(crate) json: Vec<(String, String)>,
}

impl Report {
    pub(crate) fn print(&self, json: bool) {
        let width = self.rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (k, v) in &self.rows {
            println!("{k:<width$}  {v}");
        }
        if json {
            let body: Vec<String> = self.json.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            println!("{{{}}}", body.join(","));
        }
    }
}

/// The CPU seconds so far of the object store server's process, when given.
pub(crate) fn store_cpu_seconds(pid: Option<u32>) -> Option<f64> {
    pid.and_then(|p| process_cpu_seconds(&format!("/proc/{p}/stat")))
}

/// A number for the JSON line, or `null`.
pub(crate) fn json_opt(v: Option<f64>) -> String {
    v.map_or_else(|| "null".to_owned(), |v| format!("{v:.3}"))
}

/// User + system CPU seconds so far of the process whose `/proc/…/stat` this is (Linux), at the
/// usual 100 ticks a second.
pub(crate) fn process_cpu_seconds(stat: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(stat).ok()?;
    // The fields after the parenthesised command name; utime and stime are its 12th and 13th.
    let rest = stat.rsplit_once(')')?.1;
    let mut f = rest.split_whitespace().skip(11);
    let (user, system): (f64, f64) = (f.next()?.parse().ok()?, f.next()?.parse().ok()?);
    Some((user + system) / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_nearest_rank() {
        let mut s: Vec<u64> = (1..=1000).map(|i| i * 1000).collect();
        let p = Percentiles::of(&mut s);
        assert_eq!((p.p50, p.p90, p.p99, p.p999, p.max), (500.0, 900.0, 990.0, 999.0, 1000.0));
        assert_eq!(Percentiles::of(&mut []).max, 0.0);
    }

    #[test]
    fn histogram_percentiles_are_within_a_bucket_of_the_exact_ones() {
        let h = LatencyHistogram::new();
        assert_eq!(h.percentiles().max, 0.0);
        // A spread from a few µs to minutes, from a fixed linear congruential sequence.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut exact: Vec<u64> = (0..20_000)
            .map(|_| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                (x >> 33) >> ((x >> 7) % 31)
            })
            .collect();
        for &us in &exact {
            h.record(us);
        }
        let (got, want) = (h.percentiles(), Percentiles::of(&mut exact));
        assert_eq!(got.max, want.max);
        for (g, w) in [(got.p50, want.p50), (got.p90, want.p90), (got.p99, want.p99)]
            .into_iter()
            .chain([(got.p999, want.p999)])
        {
            assert!(g >= w && g <= w * (1.0 + 1.0 / 32.0) + 0.001, "{g} vs exact {w}");
        }
        // Below 64 µs each value has its own bucket; the largest values fit too.
        let small = LatencyHistogram::new();
        for us in [3, 5, 5, 63] {
            small.record(us);
        }
        let p = small.percentiles();
        assert_eq!((p.p50, p.p90, p.max), (0.005, 0.063, 0.063));
        let top = LatencyHistogram::new();
        top.record(u64::MAX);
        assert_eq!(top.percentiles().p50, u64::MAX as f64 / 1000.0);
        for i in 0..LatencyHistogram::BUCKETS {
            assert_eq!(LatencyHistogram::bucket(LatencyHistogram::upper(i)), i);
        }
    }
}
