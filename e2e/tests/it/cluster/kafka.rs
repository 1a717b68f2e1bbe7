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
