//! The flush policies, on tokio's paused clock over in-memory stores: time is virtual, so what
//! is asserted is when the writer chose to flush, not how fast this machine is.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, ensure};
use bytes::Bytes;
use logstore::{LogStorage, LogStorageConfig, SystemClock};
use objstore::object_store::memory::InMemory;
use tokio::time::Instant;

async fn writer(min_flush_interval: Option<Duration>) -> Result<LogStorage> {
    let mut cfg = LogStorageConfig::new(testkit::unique_prefix("flush"), "w");
    cfg.flush_interval = Duration::from_secs(1);
    cfg.min_flush_interval = min_flush_interval;
    let meta = Arc::new(metadata::MemoryStore::new());
    Ok(LogStorage::open(meta, Arc::new(InMemory::new()), cfg, Arc::new(SystemClock)).await?)
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
