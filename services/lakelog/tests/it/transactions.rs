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

/// Apache Kafka 4.4's `kafka-transactions` (its TransactionsCommand, from the tools' jars) on
/// a transaction its producer left open: `list` and `describe` show it Ongoing on partition 1
/// (DescribeTransactions, ListTransactions), `describe-producers` shows the producer with the
/// transaction's first offset (DescribeProducers), and `abort` ends it (KIP-664: an abort
/// marker through WriteTxnMarkers), after which a read_committed consumer reads past it. The
/// writer's `/metrics` shows the partition's last stable offset lag while it is open, and none
/// once it is aborted.
#[test]
fn kafka_transactions_lists_describes_and_aborts_a_hanging_transaction() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let metrics = testkit::free_port()?;
    let config = dir.path().join("lakelog.yaml");
    std::fs::write(&config, format!("telemetry:\n  metrics_listen: 127.0.0.1:{metrics}\n"))?;
    let data = dir.path().join("data");
    let s = Standalone::start_with(
        &data,
        testkit::free_port()?,
        &["--config".as_ref(), config.as_os_str()],
    )?;
    s.ok(&["stream", "create", "hang", "--partitions", "2"], "")?;
    let out = Command::new(format!("{ROOT}/.tools/venv/bin/python"))
        .arg(format!("{ROOT}/e2e/kafka/hanging_transaction.py"))
        .args([&s.kafka, "hang"])
        .output()
        .context("the Python clients (`make deps` installs them in .tools/venv)")?;
    ensure!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let tool = |args: &[&str]| -> Result<String> {
        let out = Command::new("java")
            .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
            .arg("-cp")
            .arg(format!("{ROOT}/.tools/kafka-tools/*"))
            .arg("org.apache.kafka.tools.TransactionsCommand")
            .args(["--bootstrap-server", &s.kafka])
            .args(args)
            .output()
            .context("java and Kafka's tools (`make deps` puts them in .tools/kafka-tools)")?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        ensure!(out.status.success(), "{args:?}: {text}{}", String::from_utf8_lossy(&out.stderr));
        Ok(text)
    };
    // A row's cells, by the header's column names.
    let rows = |text: &str| -> Vec<std::collections::BTreeMap<String, String>> {
        let mut lines = text.lines().filter(|l| l.contains('\t'));
        let header: Vec<String> =
            lines.next().unwrap_or_default().split('\t').map(|c| c.trim().to_owned()).collect();
        lines
            .map(|l| {
                header.iter().cloned().zip(l.split('\t').map(|c| c.trim().to_owned())).collect()
            })
            .collect()
    };
    let cell = |row: &std::collections::BTreeMap<String, String>, name: &str| {
        row.get(name).cloned().unwrap_or_default()
    };
    let listed = rows(&tool(&["list"])?);
    ensure!(
        listed.len() == 1
            && cell(&listed[0], "TransactionalId") == "hanging-app"
            && cell(&listed[0], "TransactionState") == "Ongoing",
        "{listed:?}"
    );
    let described = rows(&tool(&["describe", "--transactional-id", "hanging-app"])?);
    ensure!(
        described.len() == 1
            && cell(&described[0], "TransactionState") == "Ongoing"
            && cell(&described[0], "TopicPartitions") == "hang-1"
            && cell(&described[0], "TransactionTimeoutMs") == "600000",
        "{described:?}"
    );
    let producers = |p: &str| -> Result<Vec<std::collections::BTreeMap<String, String>>> {
        Ok(rows(&tool(&["describe-producers", "--topic", "hang", "--partition", p])?))
    };
    let before = producers("1")?;
    ensure!(
        before.len() == 1
            && cell(&before[0], "CurrentTransactionStartOffset") == "0"
            && cell(&before[0], "LastSequence") == "2",
        "{before:?}"
    );
    ensure!(producers("0")?.is_empty(), "no producer wrote partition 0");
    // Read committed, the open transaction holds partition 1 back; aborted, it is passed.
    let committed_end = || -> Result<String> {
        let listed = testkit::kcat(
            &["-b", &s.kafka, "-Q", "-t", "hang:1:-1", "-X", "isolation.level=read_committed"],
            "",
        )?;
        Ok(listed.trim().to_owned())
    };
    ensure!(committed_end()?.ends_with("offset 0"), "{}", committed_end()?);
    let lag = |want: &str| -> Result<()> {
        let line =
            "lakelog_writer_partition_last_stable_offset_lag{topic=\"hang\",partition=\"1\"}";
        let want = format!("{line} {want}");
        let start = std::time::Instant::now();
        loop {
            let body = scrape(metrics)?;
            if body.lines().any(|l| l == want) {
                return Ok(());
            }
            ensure!(start.elapsed() < Duration::from_secs(20), "no `{want}` in:\n{body}");
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    lag("3")?;
    tool(&["abort", "--topic", "hang", "--partition", "1", "--start-offset", "0"])?;
    let after = producers("1")?;
    ensure!(cell(&after[0], "CurrentTransactionStartOffset") == "None", "{after:?}");
    ensure!(committed_end()?.ends_with("offset 4"), "3 aborted records and a marker");
    lag("0")?;
    let read = testkit::kcat(
        &[
            "-b",
            &s.kafka,
            "-C",
            "-t",
            "hang",
            "-p",
            "1",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-X",
            "isolation.level=read_committed",
        ],
        "",
    )?;
    ensure!(read.trim().is_empty(), "aborted records read committed: {read}");
    Ok(())
}

/// The body of `GET /metrics` from 127.0.0.1:`port`.
fn scrape(port: u16) -> Result<String> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port))?;
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    c.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut text = String::new();
    c.read_to_string(&mut text)?;
    Ok(text.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default())
}
