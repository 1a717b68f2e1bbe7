//! Apache Kafka's own ecosystem, unmodified, on a cluster of processes (etcd, SeaweedFS, a
//! catalog, two Kafka-serving writers, a compactor every second): a Kafka Connect distributed
//! worker across a restart, and a Kafka Streams KTable rebuilt from its compacted changelog
//! (the same programs as the standalone's tests, services/lakelog/tests/it/ecosystem.rs).

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
