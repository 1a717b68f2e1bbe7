//! Share groups (KIP-932) with real clients against a standalone: the Java client's
//! KafkaShareConsumer (several members on one partition, redelivery after RELEASE and after
//! a member's kill -9, archiving past the delivery limit) and franz-go's own share-group tests.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail, ensure};

use crate::Standalone;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn java_share(s: &Standalone, args: &[&str]) -> Command {
    let mut cmd = Command::new("java");
    cmd.arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
        .arg("-cp")
        .arg(format!("{ROOT}/.tools/java/*"))
        .arg(format!("{ROOT}/e2e/kafka/java/JavaShare.java"))
        .arg(args[0])
        .arg(&s.kafka)
        .args(&args[1..]);
    cmd
}

/// Three KafkaShareConsumer members on one partition in explicit acknowledgement mode: every
/// record accepted exactly once, with at least two members taking part; records released once
/// come back with delivery count 2; records released every time go out exactly three times
/// (the group's `share.delivery.count.limit`) and are then archived (e2e/kafka/java/JavaShare.java
/// checks each); `lakelog group describe` then shows the share group and its share-partition.
#[test]
fn java_share_consumers_split_one_partition_and_redeliver_released_records_up_to_the_limit()
-> Result<()> {
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    s.ok(&["stream", "create", "js", "--partitions", "1"], "")?;
    let out = java_share(&s, &["run", "js", "jsg", "3000"])
        .output()
        .context("java and the Java Kafka client (`make deps` puts it in .tools/java)")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "{}{stderr}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    // `lakelog group describe` shows the share group, empty now, its share-partition done to
    // the partition's end: start offset 3000, no lag.
    let described = s.ok(&["group", "describe", "jsg", "--kafka", &s.kafka], "")?;
    ensure!(described.contains("protocol: share/simple"), "{described}");
    ensure!(described.contains("state:    Empty"), "{described}");
    ensure!(described.contains("js\t0\t3000\t0"), "{described}");
    let listed = s.ok(&["group", "list", "--kafka", &s.kafka], "")?;
    ensure!(listed.contains("jsg\tEmpty\tshare"), "{listed}");
    Ok(())
}

/// A share consumer acquires records and is killed -9 holding them: its connection closes, so
/// its share session ends and what it held is lent again (as Kafka does), to another member,
/// with a delivery count of 2, well before the group's 60 s lock would have run out (the
/// drainer gives up after 45 s).
#[test]
fn a_share_consumer_killed_9_holding_records_loses_them_to_another_member() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    s.ok(&["stream", "create", "jk", "--partitions", "1"], "")?;
    let mut holder = java_share(&s, &["hold", "jk", "jkg", "200"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("java and the Java Kafka client (`make deps` puts it in .tools/java)")?;
    let stdout = holder.stdout.take().context("the holder's stdout")?;
    let mut held = None;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        if let Some(n) = line.strip_prefix("HELD ") {
            held = Some(n.trim().parse::<u32>()?);
            break;
        }
    }
    let Some(held) = held else {
        let _ = holder.kill();
        bail!("the holder never held records");
    };
    holder.kill()?; // SIGKILL
    holder.wait()?;
    let out = java_share(&s, &["drain", "jk", "jkg", "200"]).output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "{stdout}{stderr}");
    eprintln!("held {held} when killed; {stdout}");
    Ok(())
}

/// franz-go 1.22's own share-group tests (TestShareGroup, TestShareGroupETL,
/// TestShareGroupAckOnClose, TestShareGroupOffsetsAdmin, TestConsumeRegexShareSkipsInternal),
/// unmodified, against a standalone; the ETL test's records cut to 20,000 (its
/// `KGO_TEST_RECORDS`) from 500,000 to keep `make test` short.
#[test]
fn franz_gos_share_group_tests_pass() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    let out = Command::new(format!("{ROOT}/.tools/go/kgo.test"))
        .args(["-test.run", "Share", "-test.v", "-test.timeout", "10m"])
        .env("KGO_SEEDS", &s.kafka)
        .env("KGO_TEST_RECORDS", "20000")
        .env("KGO_LOG_LEVEL", "none")
        .current_dir(dir.path())
        .output()
        .context("franz-go's tests (`make deps` builds them into .tools/go/kgo.test)")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    ensure!(!stdout.contains("--- SKIP"), "a share test skipped:\n{stdout}");
    for test in [
        "TestShareGroup",
        "TestShareGroupETL",
        "TestShareGroupAckOnClose",
        "TestShareGroupOffsetsAdmin",
        "TestConsumeRegexShareSkipsInternal",
    ] {
        ensure!(stdout.contains(&format!("--- PASS: {test} (")), "{test} did not pass:\n{stdout}");
    }
    let passed: Vec<&str> = stdout.lines().filter(|l| l.starts_with("--- PASS")).collect();
    eprintln!("{}", passed.join("\n"));
    Ok(())
}
