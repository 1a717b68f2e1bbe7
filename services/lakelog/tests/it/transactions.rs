//! Kafka transactions (ARCHITECTURE §12) with real clients against a standalone:
//! confluent-kafka's and the Java client's transactional producers, read_committed and
//! read_uncommitted consumers, a zombie producer fenced by a new instance, and a
//! consume-transform-produce loop committing its offsets in its transactions.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};

use crate::Standalone;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

#[test]
fn confluent_kafkas_transactions_commit_abort_fence_a_zombie_and_carry_offsets() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    s.ok(&["stream", "create", "ptx", "--partitions", "2"], "")?;
    s.ok(&["stream", "create", "ptx-out", "--partitions", "3"], "")?;
    let out = Command::new(format!("{ROOT}/.tools/venv/bin/python"))
        .arg(format!("{ROOT}/e2e/kafka/transactions.py"))
        .args([&s.kafka, "ptx", "ptx-out"])
        .output()
        .context("the Python clients (`make deps` installs them in .tools/venv)")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "{}{stderr}", String::from_utf8_lossy(&out.stdout));
    Ok(())
}

#[test]
fn the_java_clients_transactions_are_read_exactly_by_read_committed() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    s.ok(&["stream", "create", "jtx", "--partitions", "3"], "")?;
    let out = Command::new("java")
        .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
        .arg("-cp")
        .arg(format!("{ROOT}/.tools/java/*"))
        .arg(format!("{ROOT}/e2e/kafka/java/JavaTransactions.java"))
        .args([&s.kafka, "jtx", "20"])
        .output()
        .context("java and the Java Kafka client (`make deps` puts it in .tools/java)")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "{}{stderr}", String::from_utf8_lossy(&out.stdout));
    // The read_committed and read_uncommitted counts are checked by the program itself.
    let all = s.ok(&["consume", "jtx", "--from-beginning"], "")?;
    ensure!(all.lines().count() > 390, "{} records in the log", all.lines().count());
    Ok(())
}

/// Kafka Streams 4.4 `exactly_once_v2` (the word count with a KTable and a repartition topic of
/// the ecosystem tests): killed -9 mid-run, then its standalone killed -9 and restarted under
/// the next run, it still counts every word exactly (its checker reads the output
/// read_committed and fails at a count past the one wanted, or one never reached).
#[test]
fn a_kafka_streams_exactly_once_app_counts_exactly_across_kill_9_of_it_and_of_its_broker()
-> Result<()> {
    let dir = tempfile::tempdir()?;
    let (data, port) = (dir.path().join("data"), testkit::free_port()?);
    let s = Standalone::start(&data, port)?;
    let kafka = s.kafka.clone();
    let state = dir.path().join("streams-state");
    // The app, once it has run for two seconds: mid-run (60,000 lines take it longer).
    let mid_run = |input: &str, log: std::path::PathBuf| -> Result<testkit::Service> {
        let mut cmd = Command::new("java");
        cmd.arg("-cp")
            .arg(format!("{ROOT}/.tools/streams/*"))
            .arg(format!("{ROOT}/e2e/kafka/java/StreamsCount.java"))
            .args([&kafka, "eos"])
            .arg(&state)
            .args(["1", "60000", "exactly_once_v2", input]);
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
        std::thread::sleep(Duration::from_secs(2));
        ensure!(app.running()?, "the app finished before it was killed: {}", app.output());
        Ok(app)
    };
    mid_run("produce", dir.path().join("first.log"))?.kill9()?;

    let mut app = mid_run("resume", dir.path().join("second.log"))?;
    s.kill9()?;
    let _s = Standalone::start_on(&data, port, &kafka, &[])?;
    let status = app.wait_exit(Duration::from_secs(300))?;
    ensure!(status.success(), "{}", app.output());
    Ok(())
}
