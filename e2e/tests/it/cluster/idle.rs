//! Three writer processes, a compactor and a cleaner: one writer idle from the start, two logs
//! idle after a few appends, appends to another log going on all the while. Nothing idle holds
//! reclamation back (ARCHITECTURE §5): every WAL object older than the grace period plus two
//! maintenance intervals (and one writer keep-alive period, the idle writer's mark lags by at
//! most that) is reclaimed, so the number of WAL objects stays bounded.

use super::*;

use futures::TryStreamExt;

/// The maintenance interval and the cleaner's grace period of this test.
const INTERVAL: Duration = Duration::from_secs(1);
const GRACE: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_writer_and_idle_logs_hold_no_wal_object_back_while_appends_go_on() -> Result<()> {
    let cluster = Cluster::start()?;
    let ports = [testkit::free_port()?, testkit::free_port()?, testkit::free_port()?];
    let _writers = [
        cluster.writer_on("w1", ports[0])?,
        cluster.writer_on("w2", ports[1])?,
        cluster.writer_on("w3", ports[2])?,
    ];
    let url = |port: u16| format!("http://127.0.0.1:{port}");
    let w1 = client::LogClient::connect(&url(ports[0])).await?;
    let w3 = client::LogClient::connect(&url(ports[2])).await?;
    // w2 never takes an append. Two logs take a few, then nothing more.
    let mut idle = Vec::new();
    for w in [&w1, &w3] {
        let log = w.create_log().await?;
        let mut written = Vec::new();
        for i in 0..5 {
            let payload = Bytes::from(format!("idle-{log}-{i}"));
            written.push((w.append(log, 1, payload.clone(), None).await?.offset, payload));
        }
        idle.push((log, written));
    }
    let busy = w3.create_log().await?;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let appender = {
        let (w3, stop) = (w3.clone(), stop.clone());
        tokio::spawn(async move {
            let mut written = Vec::new();
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let payload = Bytes::from(format!("busy-{i}"));
                written.push((w3.append(busy, 1, payload.clone(), None).await?.offset, payload));
                i += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            anyhow::Ok(written)
        })
    };
    let section = format!(
        "maintenance:\n  interval: {}ms\n  min_chunks: 8\n  grace: {}ms\n  metadata_history: 1h\n",
        INTERVAL.as_millis(),
        GRACE.as_millis()
    );
    let _compactor = cluster.background(&["compactor", "run"], "compactor", &section)?;
    let (_cleaner, cleaner) = cluster.cleaner(&section)?;

    // Once a second: the WAL objects left, and the oldest one's age.
    let objects =
        objstore::build(&config::ObjectStoreConfig::S3(cluster.s3.config(&cluster.name)))?;
    let keep_alive = LEASE / 3;
    let too_old = GRACE + INTERVAL * 2 + keep_alive;
    let started = Instant::now();
    let (mut counts, mut overdue) = (Vec::new(), Vec::new());
    while started.elapsed() < Duration::from_secs(25) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let wal: Vec<_> = objects
            .list(Some(&objstore::Path::from(objstore::keys::WAL_DIR)))
            .try_collect()
            .await?;
        let now = chrono_now_ms();
        let oldest = wal.iter().map(|m| now - m.last_modified.timestamp_millis()).max();
        let old: Vec<String> = wal
            .iter()
            .filter(|m| now - m.last_modified.timestamp_millis() > too_old.as_millis() as i64)
            .map(|m| m.location.to_string())
            .collect();
        eprintln!(
            "t={:>2}s WAL objects {:>4}, oldest {:>5} ms, older than {too_old:?}: {}",
            started.elapsed().as_secs(),
            wal.len(),
            oldest.unwrap_or(0),
            old.len()
        );
        counts.push(wal.len());
        // The first cycles start after the roles do; judge from the tenth second on.
        if started.elapsed() > Duration::from_secs(10) {
            overdue.push((started.elapsed().as_secs(), old));
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let busy_written = appender.await??;
    let status =
        Command::new(crate::bin()).args(["--endpoint", &cleaner, "cleaner", "status"]).output()?;
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    eprintln!("{status}");
    for (at, old) in &overdue {
        ensure!(
            old.is_empty(),
            "at {at}s, {} WAL objects older than {too_old:?} were kept ({:?}…); cleaner status: \
             {status}",
            old.len(),
            old.iter().take(3).collect::<Vec<_>>()
        );
    }
    // Bounded: the count in the last ten seconds stays below what two seconds of the busy
    // log's flushes (one a 20 ms append) and the objects young enough to keep add up to.
    let bound = (too_old.as_millis() as usize / 20) * 2;
    let late = &counts[counts.len().saturating_sub(10)..];
    ensure!(late.iter().all(|c| *c <= bound), "WAL objects per second {counts:?}, bound {bound}");
    // Every record reads back, through compaction and cleaning.
    for (log, written) in &idle {
        let w = if *log == idle[0].0 { &w1 } else { &w3 };
        ensure!(read_to(w, *log, 5).await? == *written, "idle log {log} changed");
        let idx = w.read_index_range(*log, 0, 1).await?;
        ensure!(idx[0].object.starts_with("compacted/"), "idle log {log} never compacted");
    }
    let end = busy_written.last().map_or(0, |(o, _)| o + 1);
    ensure!(read_to(&w3, busy, end).await? == busy_written, "the busy log changed");
    Ok(())
}

fn chrono_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
