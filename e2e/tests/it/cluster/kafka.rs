//! Writers as Kafka brokers against etcd and SeaweedFS processes, with Debian's kcat
//! (librdkafka 2.0.2): two writers are two brokers with stable node ids, a stream's partitions
//! are led by the writers the routing picks, and records produced through either broker land
//! in their partitions' logs and read back through Kafka and through gRPC.

use anyhow::{Context, Result, ensure};
use client::{Consumer, StartAt};

use super::Cluster;

/// Starts `lakelog writer` `id` with a Kafka listener; its Kafka address.
pub(super) fn kafka_writer(cluster: &Cluster, id: &str) -> Result<(testkit::Service, String)> {
    let (port, kafka) = (testkit::free_port()?, testkit::free_port()?);
    let section = format!(
        "writer:\n  listen: 127.0.0.1:{port}\n  id: {id}\n  flush_interval: 10ms\n  lease_ttl: {}s\n  kafka:\n    listen: 127.0.0.1:{kafka}\n    consumer_session_timeout: 6s\n    consumer_heartbeat_interval: 500ms\n",
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
    writer_of_node(cluster, meta, node).await
}

/// The member id holding Kafka node id `node` (`kafka/node_ids/` in etcd).
async fn writer_of_node(
    cluster: &Cluster,
    meta: &std::sync::Arc<dyn metadata::MetadataStore>,
    node: i64,
) -> Result<Option<String>> {
    let prefix = format!("/{}/kafka/node_ids/", cluster.name);
    let ids = meta.range(metadata::RangeRequest::prefix(prefix.as_bytes().to_vec())).await?;
    Ok(ids.kvs.iter().find_map(|kv| {
        let id = std::str::from_utf8(&kv.value).ok()?.parse::<i64>().ok()?;
        (id == node).then(|| String::from_utf8_lossy(&kv.key[prefix.len()..]).into_owned())
    }))
}

/// Starts Kafka writers `ids`: each process by id, and their Kafka addresses in order.
fn kafka_writers(
    cluster: &Cluster,
    ids: &[&str],
) -> Result<(std::collections::BTreeMap<String, testkit::Service>, Vec<String>)> {
    let mut writers = std::collections::BTreeMap::new();
    let mut bootstrap = Vec::new();
    for id in ids {
        let (w, k) = kafka_writer(cluster, id)?;
        writers.insert((*id).to_owned(), w);
        bootstrap.push(k);
    }
    Ok((writers, bootstrap))
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
    let (mut writers, bootstrap) = kafka_writers(&cluster, &["w1", "w2", "w3"])?;
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

/// Produces `k<i>:v<i>` for every i of `range` to `topic` with kcat.
fn produce_keyed(bootstrap: &str, topic: &str, range: std::ops::Range<usize>) -> Result<String> {
    let lines: String = range.map(|i| format!("k{i}:v{i}\n")).collect();
    Ok(testkit::kcat(&["-b", bootstrap, "-P", "-t", topic, "-K:"], &lines)?)
}

/// Starts a confluent-kafka member of `group` on `topic` (e2e/kafka/group_consumer.py) with
/// the classic protocol, which writes what it consumes to `out` and stops when `out`.stop
/// appears.
fn group_member(
    bootstrap: &str,
    topic: &str,
    group: &str,
    out: &std::path::Path,
) -> Result<std::process::Child> {
    protocol_member(bootstrap, topic, group, out, "classic")
}

/// [`group_member`] with `group.protocol` = `protocol` (`consumer`: KIP-848).
fn protocol_member(
    bootstrap: &str,
    topic: &str,
    group: &str,
    out: &std::path::Path,
    protocol: &str,
) -> Result<std::process::Child> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    std::process::Command::new(format!("{root}/.tools/venv/bin/python"))
        .arg(format!("{root}/e2e/kafka/group_consumer.py"))
        .args([bootstrap, topic, group])
        .arg(out)
        .arg(protocol)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("confluent-kafka (`make deps` installs it in .tools/venv)")
}

/// A record a group member consumed: partition, offset, value.
type Consumed = (u32, u64, String);

/// What a group member wrote: its records and its last assignment.
fn member_output(path: &std::path::Path) -> (Vec<Consumed>, Option<Vec<u32>>) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut records = Vec::new();
    let mut assigned = None;
    for line in text.lines() {
        if let Some(a) = line.strip_prefix("# assigned ") {
            assigned = Some(a.split(',').filter_map(|p| p.parse().ok()).collect());
        } else if !line.starts_with('#') {
            let mut f = line.splitn(3, ' ');
            if let (Some(p), Some(o), Some(v)) = (f.next(), f.next(), f.next())
                && let (Ok(p), Ok(o)) = (p.parse(), o.parse())
            {
                records.push((p, o, v.to_owned()));
            }
        }
    }
    (records, assigned)
}

/// Who consumed each record, by value: the members of `names` (outputs `<name>.txt` in `dir`)
/// whose output holds it, once for each time it does.
fn consumers_of<'a>(
    dir: &std::path::Path,
    names: &[&'a str],
) -> std::collections::BTreeMap<String, Vec<&'a str>> {
    let mut by: std::collections::BTreeMap<String, Vec<&'a str>> = Default::default();
    for m in names {
        for (_, _, v) in member_output(&dir.join(format!("{m}.txt"))).0 {
            by.entry(v).or_default().push(m);
        }
    }
    by
}

/// Waits up to `limit` for `done`, checking every 200 ms.
async fn until(
    limit: std::time::Duration,
    what: &str,
    mut done: impl FnMut() -> bool,
) -> Result<()> {
    let start = std::time::Instant::now();
    while !done() {
        ensure!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Issue 16's group promise with real clients and processes: two confluent-kafka members of
/// one group split a 12-partition topic; a third joins and the group rebalances three ways;
/// one is SIGKILLed and its partitions move to the others within the session timeout; kcat
/// `-G` joins the same group. Every record produced is consumed, and a record consumed twice
/// was first consumed by the killed member (work it had not committed). The committed offsets
/// are the topic's end, and stay so after every writer restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumer_group_splits_rebalances_and_keeps_its_offsets_across_kills_and_restarts()
-> Result<()> {
    use std::collections::BTreeSet;
    let cluster = Cluster::start()?;
    let (mut w1, k1) = kafka_writer(&cluster, "w1")?;
    let (mut w2, k2) = kafka_writer(&cluster, "w2")?;
    let meta = cluster.meta().await?;
    super::wait_role(&meta, &cluster.name, "writer", 2).await?;
    let catalog = client::CatalogClient::connect(&cluster.catalog_url).await?;
    catalog.create("events", 12, None, None).await?;
    let bootstrap = format!("{k1},{k2}");
    produce_keyed(&bootstrap, "events", 0..3000)?;
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = |name: &str| cluster.dir.path().join(format!("{name}.txt"));
    let member = |name: &str| group_member(&bootstrap, "events", "readers", &out(name));
    let assignment = |name: &str| member_output(&out(name)).1.unwrap_or_default();
    let mut c1 = member("c1")?;
    let mut c2 = member("c2")?;
    until(std::time::Duration::from_secs(30), "two members splitting the partitions", || {
        let (a, b) = (assignment("c1"), assignment("c2"));
        !a.is_empty() && !b.is_empty() && a.len() + b.len() == 12
    })
    .await?;
    let mut c3 = member("c3")?;
    until(std::time::Duration::from_secs(30), "a three-way split after a third joined", || {
        let all: Vec<u32> = ["c1", "c2", "c3"].iter().flat_map(|m| assignment(m)).collect();
        let distinct: BTreeSet<u32> = all.iter().copied().collect();
        ["c1", "c2", "c3"].iter().all(|m| !assignment(m).is_empty())
            && all.len() == 12
            && distinct.len() == 12
    })
    .await?;
    // The killed member's partitions move to the others within its session timeout (6 s).
    c2.kill()?;
    c2.wait()?;
    let killed = std::time::Instant::now();
    produce_keyed(&bootstrap, "events", 3000..6000)?;
    until(
        std::time::Duration::from_secs(20),
        "the others taking the killed one's partitions",
        || {
            let (a, b) = (assignment("c1"), assignment("c3"));
            a.len() + b.len() == 12
        },
    )
    .await?;
    let moved_after = killed.elapsed();
    // kcat joins the same group, takes its share until its partitions are at their end, and
    // leaves (committing what it read).
    let kcat = testkit::kcat(
        &["-b", &bootstrap, "-G", "readers", "-e", "-q", "-f", "%p %o %s\n", "events"],
        "",
    )?;
    std::fs::write(out("kcat"), &kcat)?;
    // The two that are left leave once they have consumed all, committing.
    until(std::time::Duration::from_secs(60), "every record consumed", || {
        let seen: BTreeSet<String> = ["c1", "c2", "c3", "kcat"]
            .iter()
            .flat_map(|m| member_output(&out(m)).0.into_iter().map(|(_, _, v)| v))
            .collect();
        seen.len() >= 6000
    })
    .await?;
    for m in ["c1", "c3"] {
        std::fs::write(cluster.dir.path().join(format!("{m}.txt.stop")), "")?;
    }
    c1.wait()?;
    c3.wait()?;
    let times = consumers_of(cluster.dir.path(), &["c1", "c2", "c3", "kcat"]);
    let missing: Vec<usize> = (0..6000).filter(|i| !times.contains_key(&format!("v{i}"))).collect();
    ensure!(missing.is_empty(), "{} records never consumed, e.g. v{}", missing.len(), missing[0]);
    let twice: Vec<(&String, &Vec<&str>)> = times.iter().filter(|(_, m)| m.len() > 1).collect();
    for (v, by) in &twice {
        ensure!(by.contains(&"c2"), "{v} consumed twice without the killed member: {by:?}");
    }
    let kcat_read = member_output(&out("kcat")).0.len();
    // Every writer restarts; the group's committed offsets are still the topic's end.
    w1.terminate(std::time::Duration::from_secs(30))?;
    w2.terminate(std::time::Duration::from_secs(30))?;
    let (_w1, k1) = kafka_writer(&cluster, "w1")?;
    let (_w2, k2) = kafka_writer(&cluster, "w2")?;
    super::wait_role(&meta, &cluster.name, "writer", 2).await?;
    let check = std::process::Command::new(format!("{root}/.tools/venv/bin/python"))
        .arg("-c")
        .arg(
            "import sys, confluent_kafka as k\n\
             c = k.Consumer({'bootstrap.servers': sys.argv[1], 'group.id': 'readers'})\n\
             tps = [k.TopicPartition('events', p) for p in range(12)]\n\
             got = c.committed(tps, timeout=30)\n\
             ends = [c.get_watermark_offsets(t, timeout=30)[1] for t in tps]\n\
             print(' '.join(f'{t.offset}/{e}' for t, e in zip(got, ends)))\n",
        )
        .arg(format!("{k1},{k2}"))
        .output()?;
    let committed = String::from_utf8_lossy(&check.stdout).trim().to_owned();
    ensure!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    let pairs: Vec<(&str, &str)> = committed.split(' ').filter_map(|p| p.split_once('/')).collect();
    ensure!(pairs.len() == 12 && pairs.iter().all(|(c, e)| c == e), "committed/end: {committed}");
    eprintln!(
        "e2e: 6000 records, {} consumed twice (all first by the killed member), kcat read {kcat_read}; \
         partitions moved {moved_after:?} after the kill; committed after restarts: {committed}",
        twice.len()
    );
    Ok(())
}

/// The group's coordinator writer is SIGKILLed while its members consume: they find the new
/// coordinator (the owner over the writers left), rejoin there and resume from their committed
/// offsets — a record is consumed again only if it was consumed in the moments before the kill
/// and not committed yet, never the group's whole history.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_of_a_group_whose_coordinator_is_killed_rejoin_and_resume_from_their_offsets()
-> Result<()> {
    use std::collections::BTreeSet;
    let cluster = Cluster::start()?;
    let (mut writers, bootstrap) = kafka_writers(&cluster, &["w1", "w2", "w3"])?;
    let meta = cluster.meta().await?;
    super::wait_role(&meta, &cluster.name, "writer", 3).await?;
    let catalog = client::CatalogClient::connect(&cluster.catalog_url).await?;
    catalog.create("events", 6, None, None).await?;
    let all = bootstrap.join(",");
    produce_keyed(&all, "events", 0..2000)?;
    let out = |name: &str| cluster.dir.path().join(format!("{name}.txt"));
    let member = |name: &str| group_member(&all, "events", "movers", &out(name));
    let consumed = || consumers_of(cluster.dir.path(), &["a", "b"]);
    let mut a = member("a")?;
    let mut b = member("b")?;
    until(std::time::Duration::from_secs(30), "the first 2000 consumed", || {
        consumed().len() >= 2000
    })
    .await?;
    // Let the auto-commits (every 500 ms) land, then kill the coordinator.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let (coordinator, left) =
        kill_coordinator(&cluster, &meta, &mut writers, &bootstrap, "movers").await?;
    // Produced once the killed writer's lease is gone (its partitions have new leaders).
    super::wait_role(&meta, &cluster.name, "writer", 2).await?;
    produce_keyed(&left.join(","), "events", 2000..4000)?;
    until(std::time::Duration::from_secs(60), "all 4000 consumed after the kill", || {
        consumed().len() >= 4000
    })
    .await?;
    let seen = consumed();
    let twice: BTreeSet<&String> =
        seen.iter().filter(|(_, by)| by.len() > 1).map(|(v, _)| v).collect();
    // Records of the first 2000 were committed 2 s before the kill: none is read again.
    let early: Vec<&&String> =
        twice.iter().filter(|v| v[1..].parse::<usize>().is_ok_and(|i| i < 2000)).collect();
    ensure!(
        early.is_empty(),
        "{} committed records consumed again, e.g. {}",
        early.len(),
        early[0]
    );
    for m in ["a", "b"] {
        std::fs::write(cluster.dir.path().join(format!("{m}.txt.stop")), "")?;
    }
    a.wait()?;
    b.wait()?;
    eprintln!(
        "e2e: coordinator {coordinator} killed; 4000 records consumed, {} twice (none committed before the kill)",
        twice.len()
    );
    Ok(())
}

/// KIP-848 (`group.protocol=consumer`) with confluent-kafka members against three writers:
/// the coordinator assigns; two members split 12 partitions, a third joins and gets its share
/// (each partition revoked before it moves), one is SIGKILLed and its partitions move within
/// the coordinator's session timeout (6 s here), then the coordinator writer is SIGKILLed and
/// the members rejoin at the new one. Every record is consumed; records committed before the
/// coordinator's kill are read twice only if the killed member read them first.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kip848_group_assigns_on_the_coordinator_through_member_and_coordinator_kills()
-> Result<()> {
    use std::collections::BTreeSet;
    let cluster = Cluster::start()?;
    let (mut writers, bootstrap) = kafka_writers(&cluster, &["w1", "w2", "w3"])?;
    let meta = cluster.meta().await?;
    super::wait_role(&meta, &cluster.name, "writer", 3).await?;
    let catalog = client::CatalogClient::connect(&cluster.catalog_url).await?;
    catalog.create("events", 12, None, None).await?;
    let all = bootstrap.join(",");
    produce_keyed(&all, "events", 0..3000)?;
    let out = |name: &str| cluster.dir.path().join(format!("{name}.txt"));
    let member = |name: &str| protocol_member(&all, "events", "kip848", &out(name), "consumer");
    let assignment = |name: &str| member_output(&out(name)).1.unwrap_or_default();
    let members = ["c1", "c2", "c3"];
    let consumed = || consumers_of(cluster.dir.path(), &members);
    let split = |names: &[&str]| {
        let owned: Vec<u32> = names.iter().flat_map(|m| assignment(m)).collect();
        let distinct: BTreeSet<u32> = owned.iter().copied().collect();
        names.iter().all(|m| !assignment(m).is_empty()) && owned.len() == 12 && distinct.len() == 12
    };
    let mut c1 = member("c1")?;
    let mut c2 = member("c2")?;
    until(std::time::Duration::from_secs(30), "two members splitting the partitions", || {
        split(&["c1", "c2"])
    })
    .await?;
    let mut c3 = member("c3")?;
    until(std::time::Duration::from_secs(30), "a three-way split after a third joined", || {
        split(&members)
    })
    .await?;
    c2.kill()?;
    c2.wait()?;
    let killed = std::time::Instant::now();
    produce_keyed(&all, "events", 3000..6000)?;
    until(std::time::Duration::from_secs(20), "the others taking the killed one's share", || {
        split(&["c1", "c3"])
    })
    .await?;
    let moved_after = killed.elapsed();
    until(std::time::Duration::from_secs(60), "the first 6000 consumed", || {
        consumed().len() >= 6000
    })
    .await?;
    // Let the auto-commits (every 500 ms) land, then kill the coordinator.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let (coordinator, left) =
        kill_coordinator(&cluster, &meta, &mut writers, &bootstrap, "kip848").await?;
    super::wait_role(&meta, &cluster.name, "writer", 2).await?;
    produce_keyed(&left.join(","), "events", 6000..9000)?;
    until(
        std::time::Duration::from_secs(90),
        "all 9000 consumed after the coordinator's kill",
        || consumed().len() >= 9000,
    )
    .await?;
    until(
        std::time::Duration::from_secs(30),
        "the two members owning every partition again",
        || split(&["c1", "c3"]),
    )
    .await?;
    let seen = consumed();
    let missing: Vec<usize> = (0..9000).filter(|i| !seen.contains_key(&format!("v{i}"))).collect();
    ensure!(missing.is_empty(), "{} records never consumed, e.g. v{}", missing.len(), missing[0]);
    let twice: Vec<(&String, &Vec<&str>)> = seen.iter().filter(|(_, m)| m.len() > 1).collect();
    for (v, by) in &twice {
        let early = v[1..].parse::<usize>().is_ok_and(|i| i < 6000);
        ensure!(
            !early || by.contains(&"c2"),
            "{v}, committed before the coordinator's kill, consumed twice without the killed member: {by:?}"
        );
    }
    for m in ["c1", "c3"] {
        std::fs::write(cluster.dir.path().join(format!("{m}.txt.stop")), "")?;
    }
    c1.wait()?;
    c3.wait()?;
    eprintln!(
        "e2e: KIP-848 group: 9000 records, {} consumed twice; partitions moved {moved_after:?} after a member's kill; coordinator {coordinator} killed",
        twice.len()
    );
    Ok(())
}

/// Issue 40's group promise: a stable group, classic and KIP-848, keeps its members,
/// generation and assignment when its coordinator stops (a rolling restart's step): the next
/// coordinator resumes it from its stored state. Two confluent-kafka members split 6
/// partitions; the coordinator writer gets SIGTERM; records produced after are consumed with
/// no rebalance (no member's assignment changes: librdkafka reports every one) and no record
/// consumed twice (every commit before and after the move held).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stable_group_keeps_its_members_and_commits_when_its_coordinator_stops() -> Result<()> {
    for protocol in ["classic", "consumer"] {
        group_through_a_coordinator_stop(protocol).await.with_context(|| protocol.to_owned())?;
    }
    Ok(())
}

async fn group_through_a_coordinator_stop(protocol: &str) -> Result<()> {
    use std::collections::BTreeSet;
    let cluster = Cluster::start()?;
    let (mut writers, bootstrap) = kafka_writers(&cluster, &["w1", "w2", "w3"])?;
    let meta = cluster.meta().await?;
    super::wait_role(&meta, &cluster.name, "writer", 3).await?;
    let catalog = client::CatalogClient::connect(&cluster.catalog_url).await?;
    catalog.create("events", 6, None, None).await?;
    let all = bootstrap.join(",");
    produce_keyed(&all, "events", 0..2000)?;
    let out = |name: &str| cluster.dir.path().join(format!("{name}.txt"));
    let member = |name: &str| protocol_member(&all, "events", "steady", &out(name), protocol);
    let consumed = || consumers_of(cluster.dir.path(), &["a", "b"]);
    // Every assignment a member was told of, in order.
    let changes = |name: &str| {
        let text = std::fs::read_to_string(out(name)).unwrap_or_default();
        text.lines().filter(|l| l.starts_with("# assigned")).count()
    };
    let split = || {
        let owned: Vec<u32> =
            ["a", "b"].iter().flat_map(|m| member_output(&out(m)).1.unwrap_or_default()).collect();
        let distinct: BTreeSet<u32> = owned.iter().copied().collect();
        owned.len() == 6 && distinct.len() == 6
    };
    let mut a = member("a")?;
    let mut b = member("b")?;
    until(std::time::Duration::from_secs(60), "two members splitting 6 partitions", split).await?;
    until(std::time::Duration::from_secs(30), "the first 2000 consumed", || {
        consumed().len() >= 2000
    })
    .await?;
    // Settled: commits landed (every 500 ms), no assignment pending.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let before = (changes("a"), changes("b"));
    let (coordinator, left) =
        stop_coordinator(&cluster, &meta, &mut writers, &bootstrap, "steady", true).await?;
    super::wait_role(&meta, &cluster.name, "writer", 2).await?;
    produce_keyed(&left.join(","), "events", 2000..4000)?;
    until(std::time::Duration::from_secs(60), "all 4000 consumed after the stop", || {
        consumed().len() >= 4000
    })
    .await?;
    // Heartbeats went on at the new coordinator for a few more sessions.
    tokio::time::sleep(std::time::Duration::from_secs(8)).await;
    let after = (changes("a"), changes("b"));
    ensure!(
        after == before,
        "the group rebalanced when its coordinator {coordinator} stopped: assignments told {before:?} before, {after:?} after"
    );
    let seen = consumed();
    let twice: Vec<&String> = seen.iter().filter(|(_, by)| by.len() > 1).map(|(v, _)| v).collect();
    ensure!(twice.is_empty(), "{} records consumed twice, e.g. {}", twice.len(), twice[0]);
    for m in ["a", "b"] {
        std::fs::write(cluster.dir.path().join(format!("{m}.txt.stop")), "")?;
    }
    a.wait()?;
    b.wait()?;
    eprintln!(
        "e2e: {protocol} group: coordinator {coordinator} stopped; 4000 records consumed once each, no rebalance"
    );
    Ok(())
}

/// SIGKILLs the writer coordinating `group` (as confluent-kafka's AdminClient finds it) among
/// `writers` (w1, w2, w3 with Kafka addresses `bootstrap`): its id, and the others' addresses.
async fn kill_coordinator(
    cluster: &Cluster,
    meta: &std::sync::Arc<dyn metadata::MetadataStore>,
    writers: &mut std::collections::BTreeMap<String, testkit::Service>,
    bootstrap: &[String],
    group: &str,
) -> Result<(String, Vec<String>)> {
    stop_coordinator(cluster, meta, writers, bootstrap, group, false).await
}

/// [`kill_coordinator`], stopping it gracefully (SIGTERM: it leaves the member set at once,
/// as in a rolling restart) when `graceful`.
async fn stop_coordinator(
    cluster: &Cluster,
    meta: &std::sync::Arc<dyn metadata::MetadataStore>,
    writers: &mut std::collections::BTreeMap<String, testkit::Service>,
    bootstrap: &[String],
    group: &str,
    graceful: bool,
) -> Result<(String, Vec<String>)> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let find = std::process::Command::new(format!("{root}/.tools/venv/bin/python"))
        .arg("-c")
        .arg(
            "import sys, confluent_kafka.admin as a\n\
             admin = a.AdminClient({'bootstrap.servers': sys.argv[1]})\n\
             g = admin.describe_consumer_groups([sys.argv[2]])\n\
             print(g[sys.argv[2]].result(timeout=30).coordinator.id)\n",
        )
        .args([&bootstrap.join(","), group])
        .output()?;
    let node: i64 = String::from_utf8_lossy(&find.stdout)
        .trim()
        .parse()
        .with_context(|| format!("coordinator: {}", String::from_utf8_lossy(&find.stderr)))?;
    let coordinator =
        writer_of_node(cluster, meta, node).await?.context("the coordinator's writer id")?;
    let w = writers.get_mut(&coordinator).context("the coordinator")?;
    if graceful {
        w.terminate(std::time::Duration::from_secs(30))?;
    } else {
        w.kill9()?;
    }
    let left = ["w1", "w2", "w3"]
        .iter()
        .zip(bootstrap)
        .filter(|(w, _)| **w != coordinator)
        .map(|(_, k)| k.clone())
        .collect();
    Ok((coordinator, left))
}

/// The `*_kafka_fetch_bytes` counter a role's `/metrics` shows.
fn fetch_bytes(metrics_port: u16) -> Result<u64> {
    let (status, body) = super::scrape(metrics_port, "/metrics")?;
    ensure!(status.contains("200"), "{status}");
    body.lines()
        .find(|l| l.contains("kafka_fetch_bytes") && !l.starts_with('#'))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .context("no kafka_fetch_bytes counter")
}

/// Readers as follower replicas (KIP-392, seed 001: catch-up reads do not load ingest): a
/// consumer whose `client.rack` is a reader's zone, starting at offset 0 of a backlog, is sent
/// by the partition's writer to that reader and reads every record from it; the writer answers
/// it no record bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_catch_up_consumer_of_a_readers_rack_is_served_by_the_reader() -> Result<()> {
    const RECORDS: usize = 30_000;
    let cluster = Cluster::start()?;
    let (wport, wkafka, wmetrics) =
        (testkit::free_port()?, testkit::free_port()?, testkit::free_port()?);
    let _w = cluster.spawn(
        "writer",
        "w1",
        &format!(
            "  metrics_listen: 127.0.0.1:{wmetrics}\nwriter:\n  listen: 127.0.0.1:{wport}\n  id: w1\n  flush_interval: 10ms\n  lease_ttl: {}s\n  kafka:\n    listen: 127.0.0.1:{wkafka}\n",
            super::LEASE.as_secs()
        ),
        wport,
    )?;
    let (rport, rkafka, rmetrics) =
        (testkit::free_port()?, testkit::free_port()?, testkit::free_port()?);
    let _r = cluster.spawn(
        "reader",
        "r1",
        &format!(
            "  metrics_listen: 127.0.0.1:{rmetrics}\nreader:\n  listen: 127.0.0.1:{rport}\n  id: r1\n  zone: a\n  lease_ttl: {}s\n  kafka:\n    listen: 127.0.0.1:{rkafka}\n",
            super::LEASE.as_secs()
        ),
        rport,
    )?;
    let meta = cluster.meta().await?;
    super::wait_role(&meta, &cluster.name, "writer", 1).await?;
    super::wait_role(&meta, &cluster.name, "reader", 1).await?;
    let catalog = client::CatalogClient::connect(&cluster.catalog_url).await?;
    catalog.create("backlog", 1, None, None).await?;
    let bootstrap = format!("127.0.0.1:{wkafka}");
    let lines: String = (0..RECORDS).map(|i| format!("v{i}\n")).collect();
    testkit::kcat(&["-b", &bootstrap, "-P", "-t", "backlog"], &lines)?;
    // Metadata lists the reader as a broker and as a replica of the partition; the writer is
    // the controller.
    let listed = testkit::kcat(&["-b", &bootstrap, "-L", "-t", "backlog"], "")?;
    ensure!(
        listed.contains(" 2 brokers:")
            && listed.contains(&format!("127.0.0.1:{rkafka}"))
            && listed.contains(&format!("127.0.0.1:{wkafka} (controller)")),
        "{listed}"
    );
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = std::process::Command::new(format!("{root}/.tools/venv/bin/python"))
        .arg("-c")
        .arg(
            "import sys, confluent_kafka as k\n\
             c = k.Consumer({'bootstrap.servers': sys.argv[1], 'group.id': 'unused', 'client.rack': 'a', 'enable.auto.commit': False})\n\
             c.assign([k.TopicPartition('backlog', 0, 0)])\n\
             want, got, expect = int(sys.argv[2]), 0, 0\n\
             while got < want:\n\
             \x20   for m in c.consume(10000, timeout=10):\n\
             \x20       if m.error(): sys.exit(f'consume: {m.error()}')\n\
             \x20       if m.value().decode() != f'v{expect}': sys.exit(f'offset {m.offset()}: {m.value()} after v{expect - 1}')\n\
             \x20       got += 1; expect += 1\n\
             c.close()\n\
             print(got)\n",
        )
        .args([bootstrap.as_str(), &RECORDS.to_string()])
        .output()?;
    ensure!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The counters follow every second.
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let (from_writer, from_reader) = (fetch_bytes(wmetrics)?, fetch_bytes(rmetrics)?);
    ensure!(from_reader > (RECORDS as u64) * 5, "the reader served {from_reader} bytes");
    ensure!(
        from_writer * 100 < from_reader,
        "the writer served {from_writer} bytes, the reader {from_reader}"
    );
    eprintln!(
        "e2e: {RECORDS} records caught up through the reader: {from_reader} bytes from it, {from_writer} from the writer"
    );
    // `lakelog bench catchup` on the same processes: its KIP-848 group reads its whole backlog
    // once, through the reader. (Its ingest ratio is a benchmark's figure, not checked here.)
    let bench = std::process::Command::new(crate::bin())
        .args(["--endpoint", &cluster.catalog_url, "bench", "catchup", "--kafka", &bootstrap])
        .args(["--rack", "a", "--duration", "2s", "--backlog", "40000", "--record-size", "100"])
        .args(["--partitions", "2", "--members", "2", "--json"])
        .args(["--writer-metrics", &format!("127.0.0.1:{wmetrics}")])
        .args(["--reader-metrics", &format!("127.0.0.1:{rmetrics}")])
        .output()?;
    let stdout = String::from_utf8_lossy(&bench.stdout);
    ensure!(bench.status.success(), "{stdout}{}", String::from_utf8_lossy(&bench.stderr));
    let report = stdout.lines().last().unwrap_or_default();
    let field = |name: &str| -> Option<f64> {
        let at = report.find(&format!("\"{name}\":"))? + name.len() + 3;
        report[at..].split([',', '}']).next()?.parse().ok()
    };
    ensure!(field("catch_up_records_read") == Some(40_000.0), "{report}");
    let (writers, readers) =
        (field("kafka_fetch_bytes_writers"), field("kafka_fetch_bytes_readers"));
    ensure!(readers.is_some_and(|r| r > 40_000.0 * 100.0) && writers == Some(0.0), "{report}");
    eprintln!("e2e: bench catchup: {report}");
    Ok(())
}
