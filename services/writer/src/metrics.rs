//! The writer's flush metrics: flushes, their sizes, PUT and commit latencies, in the
//! process's registry.

use std::time::Duration;

use std::sync::atomic::AtomicU64;

use telemetry::prometheus_client::metrics::counter::Counter;
use telemetry::prometheus_client::metrics::family::Family;
use telemetry::prometheus_client::metrics::gauge::Gauge;
use telemetry::prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

/// Histograms fed by log storage's [`logstore::FlushObserver`].
#[derive(Debug)]
pub struct FlushMetrics {
    flushes: Counter,
    bytes: Histogram,
    entries: Histogram,
    logs: Histogram,
    put: Histogram,
    put_failures: Counter,
    hedges: Counter,
    hedges_won: Counter,
    commit: Histogram,
    acked: Histogram,
    commit_interval: Gauge<f64, AtomicU64>,
    refused: Counter,
}

fn seconds() -> Histogram {
    // 1 ms .. ~33 s
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

impl FlushMetrics {
    /// The process's flush metrics, registered in [`telemetry::Metrics::global`] once
    /// however many writers a process runs (their flushes add up).
    pub fn global() -> std::sync::Arc<FlushMetrics> {
        static GLOBAL: std::sync::OnceLock<std::sync::Arc<FlushMetrics>> =
            std::sync::OnceLock::new();
        GLOBAL
            .get_or_init(|| {
                std::sync::Arc::new(FlushMetrics::register(telemetry::Metrics::global()))
            })
            .clone()
    }

    /// Registers the writer's flush metrics in `m`.
    pub fn register(m: &telemetry::Metrics) -> FlushMetrics {
        let f = FlushMetrics {
            flushes: Counter::default(),
            // 1 KiB .. 64 MiB
            bytes: Histogram::new(exponential_buckets(1024.0, 4.0, 9)),
            entries: Histogram::new(exponential_buckets(1.0, 4.0, 9)),
            logs: Histogram::new(exponential_buckets(1.0, 4.0, 7)),
            put: seconds(),
            put_failures: Default::default(),
            hedges: Counter::default(),
            hedges_won: Counter::default(),
            commit: seconds(),
            acked: seconds(),
            commit_interval: Gauge::default(),
            refused: Counter::default(),
        };
        m.register(
            "writer_flushes",
            "WAL objects flushed (PUTs started), one per flush",
            f.flushes.clone(),
        );
        m.register("writer_flush_bytes", "Size of each WAL object flushed", f.bytes.clone());
        m.register("writer_flush_entries", "Entries in each WAL object", f.entries.clone());
        m.register("writer_flush_logs", "Logs (chunks) in each WAL object", f.logs.clone());
        m.register("writer_put_seconds", "Time a flush's PUT took", f.put.clone());
        m.register("writer_put_failures", "Flush PUTs that failed", f.put_failures.clone());
        m.register(
            "writer_put_hedges",
            "Flush PUTs raced by a second PUT of their object (writer.hedge_quantile)",
            f.hedges.clone(),
        );
        m.register(
            "writer_put_hedges_won",
            "Hedged PUTs whose second PUT was stored first",
            f.hedges_won.clone(),
        );
        m.register(
            "writer_commit_seconds",
            "Time a flush's commit (metadata transactions) took",
            f.commit.clone(),
        );
        m.register(
            "writer_flush_seconds",
            "From a flush taking its entries to their appends being answered",
            f.acked.clone(),
        );
        m.register(
            "writer_commit_interval_seconds",
            "The commit budget: commit rounds start at most once per this (lengthened while \
             the metadata store's commit p99 exceeds the flush interval)",
            f.commit_interval.clone(),
        );
        m.register(
            "writer_appends_refused",
            "Appends refused at once with RESOURCE_EXHAUSTED: the buffer was full and an eighth \
             of it already waited for room",
            f.refused.clone(),
        );
        f
    }
}

impl logstore::FlushObserver for FlushMetrics {
    fn flushed(&self, bytes: usize, entries: usize, logs: usize) {
        self.flushes.inc();
        self.bytes.observe(bytes as f64);
        self.entries.observe(entries as f64);
        self.logs.observe(logs as f64);
    }

    fn put(&self, elapsed: Duration, ok: bool) {
        self.put.observe(elapsed.as_secs_f64());
        if !ok {
            self.put_failures.inc();
        }
    }

    fn hedged(&self, won: bool) {
        self.hedges.inc();
        if won {
            self.hedges_won.inc();
        }
    }

    fn committed(&self, elapsed: Duration, acked: Duration) {
        self.commit.observe(elapsed.as_secs_f64());
        self.acked.observe(acked.as_secs_f64());
    }

    fn commit_interval(&self, interval: Duration) {
        self.commit_interval.set(interval.as_secs_f64());
    }

    fn refused(&self) {
        self.refused.inc();
    }
}

type Labels = Vec<(String, String)>;

/// Per Kafka partition this writer serves: its high watermark, last stable offset and the lag
/// between them (Kafka's `LogEndOffset`, `LastStableOffsetLag`): a transaction left open
/// shows as a lag that only grows.
#[derive(Debug, Default)]
pub struct PartitionMetrics {
    high_watermark: Family<Labels, Gauge>,
    last_stable_offset: Family<Labels, Gauge>,
    lag: Family<Labels, Gauge>,
}

/// How often the partition gauges are set again.
const PARTITIONS_EVERY: Duration = Duration::from_secs(5);

impl PartitionMetrics {
    /// Registers the partition gauges in `m`.
    pub fn register(m: &telemetry::Metrics) -> PartitionMetrics {
        let p = PartitionMetrics::default();
        m.register(
            "writer_partition_high_watermark",
            "A served Kafka partition's high watermark (next offset)",
            p.high_watermark.clone(),
        );
        m.register(
            "writer_partition_last_stable_offset",
            "A served Kafka partition's last stable offset (first offset of its oldest open transaction, else the high watermark)",
            p.last_stable_offset.clone(),
        );
        m.register(
            "writer_partition_last_stable_offset_lag",
            "High watermark minus last stable offset: offsets read_committed consumers wait for",
            p.lag.clone(),
        );
        p
    }

    /// Sets the gauges to `partitions` (topic, partition, high watermark, last stable offset),
    /// forgetting partitions no longer served.
    pub fn observe(&self, partitions: &[(String, u32, u64, u64)]) {
        for f in [&self.high_watermark, &self.last_stable_offset, &self.lag] {
            f.clear();
        }
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        for (topic, partition, hw, lso) in partitions {
            let labels = vec![
                ("topic".to_owned(), topic.clone()),
                ("partition".to_owned(), partition.to_string()),
            ];
            self.high_watermark.get_or_create(&labels).set(gauge(*hw));
            self.last_stable_offset.get_or_create(&labels).set(gauge(*lso));
            self.lag.get_or_create(&labels).set(gauge(hw.saturating_sub(*lso)));
        }
    }

    /// Sets the process's partition gauges from `broker` every few seconds, until aborted.
    pub fn follow(broker: brokers::LogBroker) -> tokio::task::JoinHandle<()> {
        static GLOBAL: std::sync::OnceLock<PartitionMetrics> = std::sync::OnceLock::new();
        let metrics =
            GLOBAL.get_or_init(|| PartitionMetrics::register(telemetry::Metrics::global()));
        tokio::spawn(async move {
            loop {
                metrics.observe(&broker.partition_offsets());
                tokio::time::sleep(PARTITIONS_EVERY).await;
            }
        })
    }
}

#[cfg(test)]
mod partition_tests {
    use super::*;

    #[test]
    fn partition_gauges_follow_what_is_served() {
        let m = telemetry::Metrics::new("t");
        let p = PartitionMetrics::register(&m);
        p.observe(&[("orders".to_owned(), 2, 120, 100), ("pay".to_owned(), 0, 7, 7)]);
        let text = m.encode();
        let line = |name: &str, topic: &str, partition: u32, v: u64| {
            format!(
                "lakelog_t_writer_partition_{name}{{topic=\"{topic}\",partition=\"{partition}\"}} {v}"
            )
        };
        for want in [
            line("high_watermark", "orders", 2, 120),
            line("last_stable_offset", "orders", 2, 100),
            line("last_stable_offset_lag", "orders", 2, 20),
            line("last_stable_offset_lag", "pay", 0, 0),
        ] {
            assert!(text.contains(&want), "{want} not in {text}");
        }
        // A partition no longer served leaves.
        p.observe(&[("pay".to_owned(), 0, 9, 8)]);
        let text = m.encode();
        assert!(!text.contains("orders") && text.contains(&line("high_watermark", "pay", 0, 9)));
    }
}
