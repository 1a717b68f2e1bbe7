//! Writers as Kafka brokers against etcd and SeaweedFS processes, with Debian's kcat
//! (librdkafka 2.0.2): two writers are two brokers with stable node ids, a stream's partitions
//! are led by the writers the routing picks, and records produced through either broker land
//! in their partitions' logs and read back through Kafka and through gRPC.

use anyhow::{Context, Result, ensure};
use client::{Consumer, StartAt};

use super::Cluster;

/// Starts `lakelog writer` `id` with a Kafka listener; its Kafka address.
fn kafka_writer(cluster: &Cluster, id: &str) -> Result<(testkit::Service, String)> {
    let (port, kafka) = (testkit::free_port()?, testkit::free_port()?);
    let section = format!(
        "writer:\n  listen: 127.0.0.1:{port}\n  id: {id}\n  flush_interval: 10ms\n  lease_ttl: {}s\n  kafka:\n    listen: 127.0.0.1:{kafka}\n",
        super::LEASE.as_secs()
    );
    Ok((cluster.spawn("writer", id, &section, port)?, format!("127.0.0.1:{kafka}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_writers_are_two_kafka_brokers_leading_their_partitions() -> Result<()> {
    let cluster = Cluster::start()?;
    let (_w1, k1) = kafka_writer(&cluster, "w1")?;
    let (_w2, k2) = kafka_writer(&cluster, "w2")?;
    let meta = cluster.meta().await?;
    super::wait_role(&meta, &cluster.name, "writer", 2).await?;
    let catalog = client::CatalogClient::connect(&cluster.catalog_url).await?;
    // Each stream's identity (random) decides which writer leads which partition: 8
    // partitions land on one writer once in 128 streams. Streams are made until one has
    // partitions led by both (the first, almost always); the rest of the test uses it.
    let mut found = None;
    for attempt in 0..10 {
        let name = format!("events{attempt}");
        catalog.create(&name, 8, None, None).await?;
        // Either broker tells the whole cluster: two brokers, each partition led by one.
        let listed = testkit::kcat(&["-b", &k2, "-L", "-t", &name, "-m", "10"], "")?;
        ensure!(listed.contains(" 2 brokers:"), "{listed}");
        for k in [&k1, &k2] {
            ensure!(listed.contains(&format!("at {k}")), "{k} missing: {listed}");
        }
        let leaders: std::collections::BTreeSet<&str> = listed
            .lines()
            .filter_map(|l| l.trim().strip_prefix("partition "))
            .filter_map(|l| l.split("leader ").nth(1)?.split(',').next())
            .collect();
        ensure!(!leaders.is_empty() && leaders.len() <= 2, "{listed}");
        if leaders.len() == 2 {
            found = Some(name);
            break;
        }
    }
    let events = found.context("10 streams, every one led by a single writer")?;

    // 10 records to each partition, through the first broker: librdkafka sends each to its
    // leader, whichever writer that is.
    for p in 0..8 {
        let lines: String = (0..10).map(|i| format!("p{p}-{i}\n")).collect();
        testkit::kcat(&["-b", &k1, "-P", "-t", &events, "-p", &p.to_string()], &lines)?;
    }
    // Read back through Kafka (from the other broker) and through gRPC, in offset order.
    for p in 0..8u32 {
        let read = testkit::kcat(
            &[
                "-b",
                &k2,
                "-C",
                "-t",
                &events,
                "-p",
                &p.to_string(),
                "-o",
                "beginning",
                "-e",
                "-q",
                "-f",
                "%o %s\n",
            ],
            "",
        )?;
        let want: String = (0..10).map(|i| format!("{i} p{p}-{i}\n")).collect();
        ensure!(read == want, "partition {p} through Kafka:\n{read}");
        let mut c = Consumer::new(cluster.client(), &events, p, StartAt::Beginning).await?;
        let records = c.poll(100, std::time::Duration::from_secs(5)).await?;
        let values: Vec<String> =
            records.iter().map(|r| String::from_utf8_lossy(&r.value).into_owned()).collect();
        let want: Vec<String> = (0..10).map(|i| format!("p{p}-{i}")).collect();
        ensure!(values == want, "partition {p} through gRPC: {values:?}");
    }
    Ok(())
}

/// The writer id whose Kafka node id leads `partition` of `topic`, as broker `bootstrap`
/// says; `None` while no live writer leads it.
async fn leader_of(
    cluster: &Cluster,
    meta: &std::sync::Arc<dyn metadata::MetadataStore>,
    bootstrap: &str,
    topic: &str,
    partition: u32,
) -> Result<Option<String>> {
    let listed = testkit::kcat(&["-b", bootstrap, "-L", "-t", topic, "-m", "10"], "")?;
    let Some(node) = listed
        .lines()
        .filter_map(|l| l.trim().strip_prefix(&format!("partition {partition}, leader ")))
        .find_map(|l| l.split(',').next()?.parse::<i64>().ok())
    else {
        return Ok(None);
    };
    let prefix = format!("/{}/kafka/node_ids/", cluster.name);
    let ids = meta.range(metadata::RangeRequest::prefix(prefix.as_bytes().to_vec())).await?;
    Ok(ids.kvs.iter().find_map(|kv| {
        let id = std::str::from_utf8(&kv.value).ok()?.parse::<i64>().ok()?;
        (id == node).then(|| String::from_utf8_lossy(&kv.key[prefix.len()..]).into_owned())
    }))
}

/// Seed 002's handoff promise for Kafka clients: an idempotent confluent-kafka producer
/// streams while its partitions' owners change under it — one SIGKILLed, another SIGSTOPped
/// past its lease and resumed, a writer added — and never raises a fatal error; afterwards
/// every acknowledged record is in the log exactly once, at its acked offset, and no record
/// is in it twice (batches retried after an unknown outcome are deduplicated by sequence by
/// the new owner, which replays the log before it accepts).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idempotent_kafka_producer_survives_kills_pauses_and_a_new_writer() -> Result<()> {
    let cluster = Cluster::start()?;
    let mut writers = std::collections::BTreeMap::new();
    let mut bootstrap = Vec::new();
    for id in ["w1", "w2", "w3"] {
        let (w, k) = kafka_writer(&cluster, id)?;
        writers.insert(id.to_owned(), w);
        bootstrap.push(k);
    }
    let meta = cluster.meta().await?;
    super::wait_role(&meta, &cluster.name, "writer", 3).await?;
    let catalog = client::CatalogClient::connect(&cluster.catalog_url).await?;
    catalog.create("moving", 4, None, None).await?;
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let mut script = std::process::Command::new(format!("{root}/.tools/venv/bin/python"))
        .arg(format!("{root}/e2e/kafka/handoff.py"))
        .args([&bootstrap.join(","), "moving", "16"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("confluent-kafka (`make deps` installs it in .tools/venv)")?;
    let mut stdout = std::io::BufReader::new(script.stdout.take().context("stdout")?);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line)?;
    ensure!(line.trim() == "started", "the producer did not start: {line}");
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;

    // SIGKILL partition 0's owner; then SIGSTOP partition 1's owner (as the rest see it now)
    // past its lease, and resume it; then add a writer. Leaders are asked of a broker alive.
    let first = leader_of(&cluster, &meta, &bootstrap[0], "moving", 0)
        .await?
        .context("partition 0 has no leader")?;
    writers.get_mut(&first).context("a writer")?.kill9()?;
    let alive = |writers: &std::collections::BTreeMap<String, testkit::Service>, not: &str| {
        ["w1", "w2", "w3"]
            .iter()
            .position(|w| *w != not && writers.contains_key(*w))
            .map(|i| bootstrap[i].clone())
    };
    let other = alive(&writers, &first).context("a live broker")?;
    tokio::time::sleep(super::LEASE + std::time::Duration::from_secs(1)).await;
    let second = leader_of(&cluster, &meta, &other, "moving", 1)
        .await?
        .context("partition 1 has no leader")?;
    ensure!(second != first, "the killed writer still leads partition 1");
    let paused = writers.get(&second).context("a writer")?;
    paused.pause()?;
    tokio::time::sleep(super::LEASE * 2 + std::time::Duration::from_secs(1)).await;
    paused.resume()?;
    let (w4, _) = kafka_writer(&cluster, "w4")?;

    let out = script.wait_with_output()?;
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest)?;
    ensure!(
        out.status.success(),
        "killed {first}, paused {second}:\n{rest}{}\n{second} output:\n{}",
        String::from_utf8_lossy(&out.stderr),
        writers.get(&second).map(|w| w.output()).unwrap_or_default()
    );
    eprintln!("e2e: killed {first}, paused {second}, added w4: {}", rest.trim());
    drop(w4);
    Ok(())
}
