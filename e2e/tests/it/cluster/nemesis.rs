//! The simulation's checker over real processes (issue 17, deliverable 4): three `lakelog
//! writer`s, a reader, a compactor and a cleaner on an etcd and a SeaweedFS of the test's own,
//! while clients append to shared logs through any writer (so the writers fence each other's
//! slots), two consumers read them back through the reader, and a nemesis, on a seeded
//! schedule, SIGKILLs and restarts writers, SIGSTOPs one past its lease and resumes it,
//! SIGKILLs and restarts the reader, the compactor and the cleaner, SIGSTOPs etcd or SeaweedFS
//! for a few seconds, and SIGKILLs and restarts etcd or SeaweedFS (same ports, same data).
//! Every append's outcome (acknowledged at an offset, definitely failed, or unknown) and every
//! read go into a `sim::history::History` with each log read whole at the end, and
//! `sim::history::check` must find nothing: no acknowledged record lost or moved, none twice,
//! no definitely failed one visible, no gap, no read of what the log does not hold.
//!
//! `make test` runs it for 20 s; `make soak` for 10 minutes (`NEMESIS_SECONDS`, `NEMESIS_SEED`).

use std::sync::Mutex;

use sim::history::{Append, History, Outcome, Seen, check, id_of, payload};
use sim::rng::Rng;

use super::*;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Entries (offset, payload) as the history records them: one record each, the id in the
/// payload (`u64::MAX`, which no client appended, when there is none).
fn seen_of(entries: &[(u64, Bytes)]) -> Vec<Seen> {
    entries
        .iter()
        .map(|(offset, p)| Seen { offset: *offset, records: 1, id: id_of(p).unwrap_or(u64::MAX) })
        .collect()
}

/// A writer slot: its port (kept across restarts), the process, how often it was started.
struct Slot {
    port: u16,
    proc: Option<testkit::Service>,
    generation: u32,
}

impl Slot {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_seeded_nemesis_over_real_processes_loses_duplicates_and_reorders_nothing() -> Result<()>
{
    let (seconds, seed) = (env_u64("NEMESIS_SECONDS", 20), env_u64("NEMESIS_SEED", 1));
    let mut etcd = testkit::Etcd::start()?;
    let mut s3 = testkit::SeaweedS3::start()?;
    let cluster = Cluster::start_on_stores(etcd.endpoint(), s3.s3().clone())?;
    let reader_port = testkit::free_port()?;
    let mut reader_proc = Some(cluster.reader_on("r-1", reader_port)?);
    let reader_url = format!("http://127.0.0.1:{reader_port}");
    let mut slots = Vec::new();
    for i in 0..3 {
        let port = testkit::free_port()?;
        let proc = cluster.writer_on(&format!("w{i}-1"), port)?;
        slots.push(Slot { port, proc: Some(proc), generation: 1 });
    }
    let maintenance =
        "maintenance:\n  interval: 1s\n  min_chunks: 4\n  grace: 1s\n  metadata_history: 1h\n";
    let mut compactor =
        Some(cluster.background(&["compactor", "run"], "compactor-1", maintenance)?);
    let mut cleaner = Some(cluster.background(&["cleaner", "run"], "cleaner-1", maintenance)?);
    let meta = cluster.meta().await?;
    wait_writers(&meta, &cluster.name, 3).await?;
    let urls: Vec<String> = slots.iter().map(Slot::url).collect();
    let first = client::LogClient::connect(&urls[0]).await?;
    let mut logs = Vec::new();
    for _ in 0..4 {
        logs.push(first.create_log().await?);
    }

    let history = Arc::new(Mutex::new(History::default()));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let root = Rng::new(seed);
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..4u64 {
        let (urls, logs, history) = (urls.clone(), logs.clone(), history.clone());
        let mut rng = root.fork(100 + c);
        clients.spawn(async move {
            let mut conns = Vec::new();
            for u in &urls {
                conns.push(client::LogClient::connect(u).await?);
            }
            let mut i = 0u64;
            while Instant::now() < deadline {
                let id = (c << 32) | i;
                i += 1;
                let log = logs[usize::try_from(rng.below(logs.len() as u64)).unwrap_or(0)];
                let w = &conns[usize::try_from(rng.below(conns.len() as u64)).unwrap_or(0)];
                let answer = tokio::time::timeout(
                    Duration::from_secs(5),
                    w.append(log, 1, payload(id, 32), None),
                )
                .await;
                let outcome = match answer {
                    Ok(Ok(h)) => Outcome::Ok(h.offset),
                    Ok(Err(e)) if e.outcome_unknown => Outcome::Unknown,
                    Ok(Err(_)) => Outcome::Failed,
                    Err(_) => Outcome::Unknown,
                };
                history.lock().unwrap_or_else(|e| e.into_inner()).appends.push(Append {
                    id,
                    log,
                    records: 1,
                    outcome,
                });
                tokio::time::sleep(Duration::from_millis(rng.below(10))).await;
            }
            Ok::<_, anyhow::Error>(())
        });
    }

    // Consumers, through the reader: each read's entries are checked against the final log.
    for c in 0..2u64 {
        let (url, logs, history) = (reader_url.clone(), logs.clone(), history.clone());
        let mut rng = root.fork(200 + c);
        clients.spawn(async move {
            let mut ends = vec![0u64; logs.len()];
            while Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20 + rng.below(80))).await;
                // Reconnected each time: the reader restarts under it.
                let Ok(Ok(r)) =
                    tokio::time::timeout(Duration::from_secs(2), client::LogClient::connect(&url))
                        .await
                else {
                    continue;
                };
                let i = usize::try_from(rng.below(logs.len() as u64)).unwrap_or(0);
                let from = if rng.chance(0.5) {
                    ends[i].saturating_sub(8)
                } else {
                    rng.below(ends[i] + 1)
                };
                let read = tokio::time::timeout(
                    Duration::from_secs(5),
                    r.read_entries(logs[i], from, 16, 0),
                )
                .await;
                let Ok(Ok(resp)) = read else { continue };
                // The end after the read: everything the read returned is below it.
                let high = r.info(logs[i]).await.ok().map(|info| info.next_offset);
                ends[i] = ends[i].max(resp.next_offset);
                let seen = seen_of(&payloads(&resp.entries));
                history.lock().unwrap_or_else(|e| e.into_inner()).reads.push(sim::history::Read {
                    log: logs[i],
                    floor: 0,
                    seen,
                    high,
                });
            }
            Ok::<_, anyhow::Error>(())
        });
    }

    // The nemesis, on the seed's schedule.
    let mut rng = root.fork(1);
    let mut actions: BTreeMap<&str, u32> = BTreeMap::new();
    while Instant::now() + Duration::from_secs(4) < deadline {
        tokio::time::sleep(Duration::from_millis(1000 + rng.below(2000))).await;
        let slot = usize::try_from(rng.below(slots.len() as u64)).unwrap_or(0);
        match rng.below(9) {
            0 => {
                let s = &mut slots[slot];
                if let Some(mut p) = s.proc.take() {
                    p.kill9()?;
                }
                s.generation += 1;
                s.proc = Some(cluster.writer_on(&format!("w{slot}-{}", s.generation), s.port)?);
                *actions.entry("writer SIGKILLed and restarted").or_default() += 1;
            }
            1 => {
                if let Some(p) = &slots[slot].proc {
                    p.pause()?;
                    tokio::time::sleep(LEASE + Duration::from_millis(500 + rng.below(1500))).await;
                    p.resume()?;
                }
                *actions.entry("writer SIGSTOPped past its lease").or_default() += 1;
            }
            2 => {
                if let Some(mut p) = compactor.take() {
                    p.kill9()?;
                }
                compactor =
                    Some(cluster.background(&["compactor", "run"], "compactor-n", maintenance)?);
                *actions.entry("compactor SIGKILLed and restarted").or_default() += 1;
            }
            3 => {
                if let Some(mut p) = cleaner.take() {
                    p.kill9()?;
                }
                cleaner =
                    Some(cluster.background(&["cleaner", "run"], "cleaner-n", maintenance)?);
                *actions.entry("cleaner SIGKILLed and restarted").or_default() += 1;
            }
            4 => {
                etcd.pause()?;
                tokio::time::sleep(Duration::from_millis(500 + rng.below(2500))).await;
                etcd.resume()?;
                *actions.entry("etcd SIGSTOPped").or_default() += 1;
            }
            5 => {
                etcd.kill_and_restart()?;
                *actions.entry("etcd SIGKILLed and restarted").or_default() += 1;
            }
            6 => {
                s3.pause()?;
                tokio::time::sleep(Duration::from_millis(500 + rng.below(2500))).await;
                s3.resume()?;
                *actions.entry("SeaweedFS SIGSTOPped").or_default() += 1;
            }
            7 => {
                s3.kill_and_restart()?;
                *actions.entry("SeaweedFS SIGKILLed and restarted").or_default() += 1;
            }
            _ => {
                if let Some(mut p) = reader_proc.take() {
                    p.kill9()?;
                }
                reader_proc = Some(cluster.reader_on("r-n", reader_port)?);
                *actions.entry("reader SIGKILLed and restarted").or_default() += 1;
            }
        }
    }
    while let Some(done) = clients.join_next().await {
        done??;
    }
    // Quiet: every outcome settles (a dead writer's lease expires), then each log read whole.
    tokio::time::sleep(LEASE * 3).await;
    wait_writers(&meta, &cluster.name, 3).await?;
    let reader = client::LogClient::connect(&urls[0]).await?;
    let mut h = history.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for log in &logs {
        let info = reader.info(*log).await?;
        let entries = read_to(&reader, *log, info.next_offset).await?;
        let seen = seen_of(&entries);
        h.starts.insert(*log, info.first_offset);
        h.finals.insert(*log, seen);
    }
    let violations = check(&h);
    let count = |o: fn(&Outcome) -> bool| h.appends.iter().filter(|a| o(&a.outcome)).count();
    let (reads, read_entries) =
        (h.reads.len(), h.reads.iter().map(|r| r.seen.len()).sum::<usize>());
    let (acked, failed, unknown) = (
        count(|o| matches!(o, Outcome::Ok(_))),
        count(|o| *o == Outcome::Failed),
        count(|o| *o == Outcome::Unknown),
    );
    ensure!(
        violations.is_empty(),
        "seed {seed}: {} violations, the first: {:?} ({acked} acked, {failed} failed, {unknown} unknown; {actions:?})",
        violations.len(),
        violations.first()
    );
    ensure!(acked > 0, "nothing acknowledged in {seconds} s");
    eprintln!(
        "e2e nemesis: seed {seed}, {seconds} s: {acked} appends acknowledged, {failed} failed, {unknown} unknown, {reads} reads of {read_entries} entries, 0 violations; {actions:?}"
    );
    drop((compactor, cleaner, reader_proc));
    Ok(())
}
