//! Apache Kafka's own ecosystem, unmodified, against a standalone whose compactor runs every
//! second: a Kafka Connect distributed worker (its config, offset and status topics made and
//! checked compacted by Connect itself) and a Kafka Streams application (its repartition and
//! changelog topics made by Streams, with its own configs), each across a restart; and Kafka's
//! `kafka-configs` tool on a group's configs.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};

use crate::Standalone;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// A standalone that compacts (and key-compacts) every second.
fn standalone(dir: &std::path::Path) -> Result<Standalone> {
    let file = dir.join("standalone.yaml");
    std::fs::write(&file, "maintenance:\n  interval: 1s\n  min_chunks: 1\n  grace: 1s\n")?;
    Standalone::start_with(
        &dir.join("data"),
        testkit::free_port()?,
        &["--config".as_ref(), file.as_os_str()],
    )
}

/// Records a topic's partitions hold now.
fn records(s: &Standalone, topic: &str) -> Result<usize> {
    Ok(s.ok(&["consume", topic, "--from-beginning"], "")?.lines().count())
}

#[test]
fn a_kafka_connect_distributed_worker_moves_a_file_through_a_source_and_a_sink_across_a_restart()
-> Result<()> {
    let dir = tempfile::tempdir()?;
    let s = standalone(dir.path())?;
    let work = dir.path().join("connect");
    std::fs::create_dir_all(&work)?;
    let out = Command::new(format!("{ROOT}/.tools/venv/bin/python"))
        .arg(format!("{ROOT}/e2e/kafka/connect_distributed.py"))
        .args([&s.kafka, ROOT])
        .arg(&work)
        .output()
        .context("python, java and Kafka Connect (`make deps` puts it in .tools/connect)")?;
    ensure!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Connect made its topics compacted (it refuses to run otherwise), and they are.
    for topic in ["lakelog-connect-configs", "lakelog-connect-offsets", "lakelog-connect-status"] {
        let described = s.ok(&["stream", "describe", topic], "")?;
        ensure!(described.contains("config:     cleanup.policy=compact"), "{topic}: {described}");
    }
    Ok(())
}

#[test]
fn a_kafka_streams_ktable_counts_exactly_and_is_rebuilt_from_its_compacted_changelog() -> Result<()>
{
    ktable_rebuilt_from_its_compacted_changelog("wc", "at_least_once")
}

/// The same under `exactly_once_v2`: every changelog record is transactional, with a COMMIT
/// marker each commit, and key compaction still takes the changelog to one record a word.
#[test]
fn an_exactly_once_ktables_transactional_changelog_is_compacted_and_rebuilds_it() -> Result<()> {
    ktable_rebuilt_from_its_compacted_changelog("wceos", "exactly_once_v2")
}

fn ktable_rebuilt_from_its_compacted_changelog(app: &str, guarantee: &str) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let s = standalone(dir.path())?;
    let state = dir.path().join("streams-state");
    let run = |phase: &str| -> Result<()> {
        let out = Command::new("java")
            .arg("-cp")
            .arg(format!("{ROOT}/.tools/streams/*"))
            .arg(format!("{ROOT}/e2e/kafka/java/StreamsCount.java"))
            .args([&s.kafka, app])
            .arg(&state)
            .args([phase, "2000", guarantee])
            .output()
            .context("java and Kafka Streams (`make deps` puts it in .tools/streams)")?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(out.status.success(), "{}{stderr}", String::from_utf8_lossy(&out.stdout));
        Ok(())
    };
    run("1")?;
    // Streams made its internal topics, the changelog compacted, as it asked.
    let changelog = format!("{app}-counts-changelog");
    let described = s.ok(&["stream", "describe", &changelog], "")?;
    ensure!(described.contains("config:     cleanup.policy=compact"), "{described}");
    let repartition = format!("{app}-counts-repartition");
    ensure!(s.ok(&["stream", "describe", &repartition], "")?.contains("config:"));
    // The compactor key-compacts the changelog to one record a word (7).
    let (start, before) = (Instant::now(), records(&s, &changelog)?);
    loop {
        let now = records(&s, &changelog)?;
        if now <= 7 {
            eprintln!("the {guarantee} changelog compacted from {before} records to {now}");
            break;
        }
        ensure!(
            start.elapsed() < Duration::from_secs(120),
            "the {guarantee} changelog still holds {now} records of {before}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    // No local state: the counts are rebuilt from the compacted changelog, and go on exactly.
    std::fs::remove_dir_all(&state)?;
    run("2")
}

/// Apache Kafka 4.4's `kafka-configs` (its ConfigCommand, run from the tools' jars) on a
/// group's configs: set (validated as Kafka's broker validates them: a session timeout out of
/// its bounds is InvalidConfigurationException), described (the dynamic ones, then all 27),
/// listed among every group's (ListConfigResources), and deleted.
#[test]
fn kafka_configs_sets_describes_lists_and_deletes_a_groups_configs() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    let configs = |args: &[&str]| -> Result<(bool, String)> {
        let out = Command::new("java")
            .arg("-cp")
            .arg(format!("{ROOT}/.tools/kafka-tools/*"))
            .arg("org.apache.kafka.tools.ConfigCommand")
            .args(["--bootstrap-server", &s.kafka, "--entity-type", "groups"])
            .args(args)
            .output()
            .context("java and Kafka's tools (`make deps` puts them in .tools/kafka-tools)")?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok((out.status.success(), text))
    };
    let set = "consumer.session.timeout.ms=50000,consumer.heartbeat.interval.ms=6000";
    let (ok, out) = configs(&["--entity-name", "app", "--alter", "--add-config", set])?;
    ensure!(ok && out.contains("Completed updating config for group app"), "{out}");
    let (ok, out) = configs(&["--entity-name", "app", "--describe"])?;
    ensure!(ok, "{out}");
    for want in ["consumer.heartbeat.interval.ms=6000", "consumer.session.timeout.ms=50000"] {
        ensure!(out.contains(want), "{want} not described: {out}");
    }
    let (ok, out) = configs(&["--entity-name", "app", "--describe", "--all"])?;
    let described = out.lines().filter(|l| l.contains(" sensitive=false")).count();
    ensure!(ok && described == 27, "{described} configs: {out}");
    ensure!(out.contains("share.auto.offset.reset=latest"), "{out}");
    let bad = "consumer.session.timeout.ms=1000";
    let (ok, out) = configs(&["--entity-name", "app", "--alter", "--add-config", bad])?;
    ensure!(!ok && out.contains("InvalidConfigurationException"), "{out}");
    let (ok, out) = configs(&["--describe"])?;
    ensure!(ok && out.contains("Dynamic configs for group app are:"), "listed: {out}");
    let gone = "consumer.heartbeat.interval.ms";
    let (ok, out) = configs(&["--entity-name", "app", "--alter", "--delete-config", gone])?;
    ensure!(ok, "{out}");
    let (_, out) = configs(&["--entity-name", "app", "--describe"])?;
    ensure!(out.contains("consumer.session.timeout.ms=50000") && !out.contains(gone), "{out}");
    Ok(())
}
