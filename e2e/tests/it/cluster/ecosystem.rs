//! Apache Kafka's own ecosystem, unmodified, on a cluster of processes (etcd, SeaweedFS, a
//! catalog, two Kafka-serving writers, a compactor every second): a Kafka Connect distributed
//! worker across a restart, a Kafka Streams KTable rebuilt from its compacted changelog, and
//! a Streams `exactly_once_v2` app across a writer's kill -9 (the same programs as the
//! standalone's tests, services/lakelog/tests/it/ecosystem.rs and transactions.rs).

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};

use super::Cluster;
use super::kafka::kafka_writer;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
const COMPACTOR: &str =
    "maintenance:\n  interval: 1s\n  min_chunks: 1\n  grace: 1s\n  metadata_history: 1h\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kafka_connect_and_kafka_streams_run_unmodified_on_a_cluster() -> Result<()> {
    let cluster = Cluster::start()?;
    let (_w1, k1) = kafka_writer(&cluster, "w1")?;
    let (_w2, k2) = kafka_writer(&cluster, "w2")?;
    let meta = cluster.meta().await?;
    super::wait_role(&meta, &cluster.name, "writer", 2).await?;
    let _compactor = cluster.background(&["compactor", "run"], "compactor", COMPACTOR)?;
    let bootstrap = format!("{k1},{k2}");
    let dir = tempfile::tempdir()?;

    let work = dir.path().join("connect");
    std::fs::create_dir_all(&work)?;
    let out = Command::new(format!("{ROOT}/.tools/venv/bin/python"))
        .arg(format!("{ROOT}/e2e/kafka/connect_distributed.py"))
        .args([&bootstrap, ROOT])
        .arg(&work)
        .output()
        .context("python, java and Kafka Connect (`make deps` puts it in .tools/connect)")?;
    ensure!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let state = dir.path().join("streams-state");
    let run = |phase: &str| -> Result<()> {
        let out = Command::new("java")
            .arg("-cp")
            .arg(format!("{ROOT}/.tools/streams/*"))
            .arg(format!("{ROOT}/e2e/kafka/java/StreamsCount.java"))
            .args([&bootstrap, "cwc"])
            .arg(&state)
            .args([phase, "2000"])
            .output()
            .context("java and Kafka Streams (`make deps` puts it in .tools/streams)")?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(out.status.success(), "{}{stderr}", String::from_utf8_lossy(&out.stdout));
        Ok(())
    };
    run("1")?;
    // The compactor process key-compacts the changelog to one record a word (7).
    let count = || -> Result<usize> {
        let out = testkit::kcat(
            &["-b", &k1, "-C", "-t", "cwc-counts-changelog", "-e", "-q", "-f", "x\\n"],
            "",
        )?;
        Ok(out.lines().count())
    };
    let (start, before) = (Instant::now(), count()?);
    loop {
        let now = count()?;
        if now <= 7 {
            eprintln!("the changelog compacted from {before} records to {now}");
            break;
        }
        ensure!(
            start.elapsed() < Duration::from_secs(120),
            "the changelog still holds {now} records"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    std::fs::remove_dir_all(&state)?;
    run("2")
}

/// Kafka Streams 4.4 `exactly_once_v2` on two writers, one killed -9 mid-run and started again:
/// its partitions, the app's group and transaction coordinators and the markers it owed move
/// to the other, and every word is still counted exactly (the checker reads the output
/// read_committed and fails at a count past the one wanted, or one never reached).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kafka_streams_exactly_once_app_counts_exactly_across_a_writers_kill_9() -> Result<()> {
    let cluster = Cluster::start()?;
    let (mut w1, k1) = kafka_writer(&cluster, "w1")?;
    let (_w2, k2) = kafka_writer(&cluster, "w2")?;
    let meta = cluster.meta().await?;
    super::wait_role(&meta, &cluster.name, "writer", 2).await?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("streams.log");
    let mut cmd = Command::new("java");
    cmd.arg("-cp")
        .arg(format!("{ROOT}/.tools/streams/*"))
        .arg(format!("{ROOT}/e2e/kafka/java/StreamsCount.java"))
        .args([&format!("{k1},{k2}"), "ceos"])
        .arg(dir.path().join("state"))
        .args(["1", "60000", "exactly_once_v2"]);
    let running = || {
        std::fs::read_to_string(&log)
            .is_ok_and(|l| l.contains("State transition from REBALANCING to RUNNING"))
    };
    let mut app = testkit::Service::start_within(
        "streams",
        cmd,
        log.clone(),
        Duration::from_secs(180),
        running,
    )
    .context("java and Kafka Streams (`make deps` puts it in .tools/streams)")?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(app.running()?, "the app finished before the writer was killed: {}", app.output());
    w1.kill9()?;
    let _w1 = kafka_writer(&cluster, "w1")?;
    let status = tokio::task::block_in_place(|| app.wait_exit(Duration::from_secs(300)))?;
    ensure!(status.success(), "{}", app.output());
    Ok(())
}
