//! Kafka transactions (ARCHITECTURE §12) with real clients against a standalone:
//! confluent-kafka's and the Java client's transactional producers, read_committed and
//! read_uncommitted consumers, a zombie producer fenced by a new instance, and a
//! consume-transform-produce loop committing its offsets in its transactions.

use std::process::Command;

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
