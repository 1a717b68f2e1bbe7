//! Lakelog as separate processes on a real etcd and SeaweedFS: `lakelog catalog` and several
//! `lakelog writer`s, each from its own YAML config, driven through the client SDK while
//! writers are SIGKILLed and SIGSTOPped.

use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use client::batch::Record;
use client::{ClientConfig, ClientError, Consumer, Producer, ProducerConfig, RecordAck, StartAt};
use metadata::MetadataStore;

mod ecosystem;
mod idle;
mod kafka;
mod lake;
mod nemesis;
mod rolling;
mod traces;

/// Writers' lease: the shortest allowed, so a dead or paused writer is routed around fast.
const LEASE: Duration = Duration::from_secs(2);

struct Cluster {
    dir: tempfile::TempDir,
    name: String,
    etcd: String,
    s3: testkit::S3Endpoint,
    catalog_url: String,
    catalog: Option<testkit::Service>,
}

impl Cluster {
    fn start() -> Result<Cluster> {
        Cluster::start_on(testkit::shared_etcd()?.endpoint())
    }

    /// A cluster (and its catalog) on the etcd at `etcd`.
    fn start_on(etcd: &str) -> Result<Cluster> {
        Cluster::start_on_stores(etcd, testkit::shared_s3()?.s3().clone())
    }

    /// A cluster on an etcd and a SeaweedFS of the caller's (which it may pause or restart).
    fn start_on_stores(etcd: &str, s3: testkit::S3Endpoint) -> Result<Cluster> {
        let etcd = etcd.to_owned();
        let dir = tempfile::tempdir()?;
        let name = testkit::unique_prefix("e2e");
        let port = testkit::free_port()?;
        let mut c = Cluster {
            dir,
            name,
            etcd,
            s3,
            catalog_url: format!("http://127.0.0.1:{port}"),
            catalog: None,
        };
        let section = format!("catalog:\n  listen: 127.0.0.1:{port}\n");
        c.catalog = Some(c.spawn("catalog", "catalog", &section, port)?);
        Ok(c)
    }

    fn config(&self, role_section: &str) -> String {
        let s3 = &self.s3;
        format!(
            "cluster: {}\nmetadata:\n  etcd:\n    endpoints: [{}]\nobject_store:\n  s3:\n    endpoint: {}\n    bucket: {}\n    region: {}\n    access_key_id: {}\n    secret_access_key: {}\n    allow_http: true\n    path_style: true\n    prefix: {}\ntelemetry:\n  log_level: info\n{role_section}",
            self.name,
            self.etcd,
            s3.endpoint,
            s3.bucket,
            s3.region,
            s3.access_key_id,
            s3.secret_access_key,
            self.name
        )
    }

    /// Writes `<id>.yaml`: the cluster's stores plus `section`.
    fn write_config(&self, id: &str, section: &str) -> Result<std::path::PathBuf> {
        let file = self.dir.path().join(format!("{id}.yaml"));
        std::fs::write(&file, self.config(section))?;
        Ok(file)
    }

    fn spawn(&self, role: &str, id: &str, section: &str, port: u16) -> Result<testkit::Service> {
        let file = self.write_config(id, section)?;
        let mut cmd = Command::new(crate::bin());
        cmd.args([role, "--config"]).arg(&file);
        let log = self.dir.path().join(format!("{id}.log"));
        Ok(testkit::Service::start("lakelog", cmd, log, port)?)
    }

    /// Starts `lakelog writer` with id `id` in `zone`.
    fn writer(&self, id: &str, zone: &str) -> Result<testkit::Service> {
        self.writer_with_lease(id, zone, LEASE)
    }

    /// [`Cluster::writer`] with a lease of `lease`.
    fn writer_with_lease(&self, id: &str, zone: &str, lease: Duration) -> Result<testkit::Service> {
        let port = testkit::free_port()?;
        let section = format!(
            "writer:\n  listen: 127.0.0.1:{port}\n  id: {id}\n  zone: \"{zone}\"\n  flush_interval: 10ms\n  lease_ttl: {}s\n",
            lease.as_secs()
        );
        self.spawn("writer", id, &section, port)
    }

    fn client(&self) -> ClientConfig {
        ClientConfig::new(&self.catalog_url)
    }

    async fn meta(&self) -> Result<Arc<dyn MetadataStore>> {
        Ok(Arc::new(metadata::EtcdStore::connect(&testkit::etcd_config(&self.etcd)).await?))
    }
}

/// Waits until `n` writers are registered.
async fn wait_writers(meta: &Arc<dyn MetadataStore>, cluster: &str, n: usize) -> Result<()> {
    let start = Instant::now();
    loop {
        let (members, _) =
            logstore::membership::live_members(meta.as_ref(), cluster, "writer").await?;
        if members.len() == n {
            return Ok(());
        }
        ensure!(
            start.elapsed() < Duration::from_secs(30),
            "{} writers live, want {n}",
            members.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every record of every partition, by value: (partition, offset, key).
async fn read_stream(
    cfg: &ClientConfig,
    stream: &str,
    partitions: u32,
) -> Result<HashMap<String, Vec<(u32, u64, String)>>> {
    let mut out: HashMap<String, Vec<(u32, u64, String)>> = HashMap::new();
    for p in 0..partitions {
        let mut c = Consumer::new(cfg.clone(), stream, p, StartAt::Beginning).await?;
        let end = c.high_watermark().await?;
        while c.position() < end {
            let records = c.poll(10_000, Duration::ZERO).await?;
            ensure!(
                !records.is_empty(),
                "partition {p}: no records at {} below {end}",
                c.position()
            );
            for r in records {
                let key =
                    String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned();
                let value = String::from_utf8_lossy(&r.value).into_owned();
                out.entry(value).or_default().push((p, r.offset, key));
            }
        }
    }
    Ok(out)
}

/// What became of the records a producer sent, by value.
#[derive(Default)]
struct Outcomes {
    acked: BTreeMap<String, (String, RecordAck)>,
    unknown: BTreeMap<String, String>,
    failed: Vec<(String, ClientError)>,
}

type Waiter = (String, String, tokio::task::JoinHandle<Result<RecordAck, ClientError>>);

async fn outcomes(sent: Vec<Waiter>) -> Result<Outcomes> {
    let mut o = Outcomes::default();
    for (value, key, waiter) in sent {
        match waiter.await? {
            Ok(ack) => {
                o.acked.insert(value, (key, ack));
            }
            Err(e) if e.outcome_unknown => {
                o.unknown.insert(value, key);
            }
            Err(e) => o.failed.push((value, e)),
        }
    }
    Ok(o)
}

async fn send(p: &Producer, value: String, key: String) -> Result<Waiter> {
    let record = Record { key: Some(Bytes::from(key.clone())), ..Record::value(value.clone()) };
    let delivery = p.send(record).await?;
    Ok((value, key, tokio::spawn(delivery.wait())))
}

/// Every acknowledged record is in the log exactly once, at its acknowledged offset, in its
/// key's partition, and a producer's in the order it sent them; a record of unknown outcome at
/// most once; nothing else is there.
fn check_exactly_once(
    o: &Outcomes,
    log: &HashMap<String, Vec<(u32, u64, String)>>,
    partitions: u32,
) -> Result<()> {
    ensure!(
        o.failed.is_empty(),
        "{} records failed definitely, first: {:?}",
        o.failed.len(),
        o.failed.first()
    );
    for (value, (key, ack)) in &o.acked {
        let found = log.get(value).map(Vec::as_slice).unwrap_or_default();
        ensure!(
            found == [(ack.partition, ack.offset, key.clone())],
            "acknowledged record {value} ({ack:?}) is in the log as {found:?}"
        );
        let want = logstore::routing::partition_for_key(key.as_bytes(), partitions);
        ensure!(ack.partition == want, "key {key} went to partition {} not {want}", ack.partition);
    }
    // One producer's acknowledged records in one partition are in the order it sent them
    // (values `<producer><i>`), though it keeps several batches in flight and retries them
    // across handoffs.
    // Per (producer, partition): each acknowledged record's number, offset and writer.
    type Acked<'a> = Vec<(u64, u64, &'a str)>;
    let mut by_partition: BTreeMap<(&str, u32), Acked<'_>> = BTreeMap::new();
    for (value, (_, ack)) in &o.acked {
        let producer = value.trim_end_matches(|c: char| c.is_ascii_digit());
        let sent: u64 = value[producer.len()..].parse()?;
        let at = (sent, ack.offset, ack.writer.as_str());
        by_partition.entry((producer, ack.partition)).or_default().push(at);
    }
    for ((producer, partition), mut acks) in by_partition {
        acks.sort_unstable();
        if let Some(w) = acks.windows(2).find(|w| w[0].1 >= w[1].1) {
            bail!(
                "partition {partition}: {producer}{} was sent before {producer}{} but is at offset {} ≥ {} (acknowledged by {} and {})",
                w[0].0,
                w[1].0,
                w[0].1,
                w[1].1,
                w[0].2,
                w[1].2
            );
        }
    }
    for value in o.unknown.keys() {
        let n = log.get(value).map_or(0, Vec::len);
        ensure!(n <= 1, "record {value} of unknown outcome is in the log {n} times");
    }
    for (value, at) in log {
        ensure!(
            o.acked.contains_key(value) || o.unknown.contains_key(value),
            "record {value} at {at:?} was never acknowledged nor in doubt"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_killed_and_paused_lose_and_duplicate_no_acknowledged_record() -> Result<()> {
    // Enough partitions that each of three writers owns some: (2/3)^24 that one owns none.
    const PARTITIONS: u32 = 24;
    let cluster = Cluster::start()?;
    let mut w1 = cluster.writer("w1", "*")?;
    let w2 = cluster.writer("w2", "*")?;
    let _w3 = cluster.writer("w3", "*")?;
    let meta = cluster.meta().await?;
    wait_writers(&meta, &cluster.name, 3).await?;
    let admin = client::CatalogClient::connect(&cluster.catalog_url).await?;
    admin.create("events", PARTITIONS, None, None).await?;
    let mut cfg = cluster.client();
    // Longer than the pause below: the paused writer's own answers are awaited.
    cfg.request_timeout = Duration::from_secs(20);
    let producer = Producer::new(cfg.clone(), "events", ProducerConfig::default()).await?;

    let p = producer.clone();
    let produce = tokio::spawn(async move {
        let mut sent = Vec::new();
        let start = Instant::now();
        let mut i = 0u64;
        while start.elapsed() < Duration::from_secs(12) {
            sent.push(send(&p, format!("r{i}"), format!("key-{}", i % 200)).await?);
            i += 1;
            if i.is_multiple_of(20) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        anyhow::Ok(sent)
    });

    tokio::time::sleep(Duration::from_secs(2)).await;
    w1.kill9()?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before_pause = meta.current_revision().await?;
    w2.pause()?;
    tokio::time::sleep(LEASE * 2 + Duration::from_secs(1)).await;
    w2.resume()?;

    let sent = produce.await??;
    let n = sent.len();
    let o = outcomes(sent).await?;
    producer.close().await;
    let log = read_stream(&cfg, "events", PARTITIONS).await?;
    check_exactly_once(&o, &log, PARTITIONS)
        .with_context(|| format!("w2 output:\n{}", w2.output()))?;
    ensure!(o.acked.len() * 10 >= n * 9, "only {} of {n} records acknowledged", o.acked.len());
    let writers: std::collections::BTreeSet<&str> =
        o.acked.values().map(|(_, a)| a.writer.as_str()).collect();
    ensure!(writers.len() == 3, "acks came from {writers:?} only");

    // The paused writer's late commits failed: after its lease ended (its member key deleted),
    // no commit of that incarnation (each puts its low-water mark) landed before it registered
    // again.
    let prefix = format!("/{}/", cluster.name).into_bytes();
    // A marker under the cluster's prefix: the watch below has seen everything once it sees it
    // (the etcd is shared, so its newest revision may be another test's).
    let marker = format!("/{}/test-marker", cluster.name).into_bytes();
    let now = meta.put(&marker, b"end", 0).await?;
    let mut watch = meta
        .watch(metadata::WatchRequest {
            range: metadata::KeyRange::prefix(prefix),
            start_revision: before_pause,
        })
        .await?;
    let member = format!("/{}/members/writer/w2", cluster.name).into_bytes();
    let low_water = format!("/{}/wal/low_water/w2", cluster.name).into_bytes();
    let (mut lease_ended, mut registered_again, mut late) = (None, None, Vec::new());
    'events: while let Some(batch) =
        tokio::time::timeout(Duration::from_secs(5), futures::StreamExt::next(&mut watch)).await?
    {
        for ev in batch? {
            let rev = ev.kv.mod_revision;
            if ev.kv.key == member {
                match (ev.kind, lease_ended) {
                    (metadata::EventKind::Delete, None) => lease_ended = Some(rev),
                    (metadata::EventKind::Put, Some(_)) if registered_again.is_none() => {
                        registered_again = Some(rev);
                    }
                    _ => {}
                }
            } else if ev.kv.key == low_water
                && ev.kind == metadata::EventKind::Put
                && lease_ended.is_some()
                && registered_again.is_none()
            {
                late.push(rev);
            }
            if rev >= now {
                break 'events;
            }
        }
    }
    ensure!(
        lease_ended.is_some(),
        "the paused writer's lease never ended: the pause was too short"
    );
    ensure!(late.is_empty(), "the paused writer committed after its lease ended, at {late:?}");
    ensure!(registered_again.is_some(), "the resumed writer never registered again");
    eprintln!(
        "e2e: {n} sent, {} acknowledged, {} in doubt, {} in the log; w2 lease ended at {lease_ended:?}, registered again at {registered_again:?}",
        o.acked.len(),
        o.unknown.len(),
        log.len()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zone_a_clients_use_zone_a_writers_while_one_lives_then_fall_back() -> Result<()> {
    const PARTITIONS: u32 = 4;
    let cluster = Cluster::start()?;
    // Leases of 6 s, not 2: the test asks that zone b's records go to zone b's writer while it
    // lives, and a 2 s lease lapsed once in CI with the machine's two cores busy (zone b then
    // fell back to wa, as routing should).
    let lease = Duration::from_secs(6);
    let mut wa = cluster.writer_with_lease("wa", "a", lease)?;
    let _wb = cluster.writer_with_lease("wb", "b", lease)?;
    let meta = cluster.meta().await?;
    wait_writers(&meta, &cluster.name, 2).await?;
    let admin = client::CatalogClient::connect(&cluster.catalog_url).await?;
    admin.create("zoned", PARTITIONS, None, None).await?;
    let zone_a = cluster.client().with_zone("a");
    let zone_b = cluster.client().with_zone("b");
    let pa = Producer::new(zone_a.clone(), "zoned", ProducerConfig::default()).await?;
    let pb = Producer::new(zone_b.clone(), "zoned", ProducerConfig::default()).await?;

    let mut sent = Vec::new();
    for i in 0..200 {
        sent.push(send(&pa, format!("a{i}"), format!("k{}", i % 16)).await?);
        sent.push(send(&pb, format!("b{i}"), format!("k{}", i % 16)).await?);
    }
    let first = outcomes(sent).await?;
    for (value, (_, ack)) in &first.acked {
        let want = if value.starts_with('a') { "wa" } else { "wb" };
        ensure!(ack.writer == want, "{value} was committed by {} not {want}", ack.writer);
    }
    for p in 0..PARTITIONS {
        let r = admin.route("zoned", p, Some("a")).await?;
        ensure!(r.owner_id == "wa" && r.slot == "a", "zone a routed to {r:?}");
    }

    wa.kill9()?;
    wait_writers(&meta, &cluster.name, 1).await?;
    for p in 0..PARTITIONS {
        let r = admin.route("zoned", p, Some("a")).await?;
        ensure!(r.owner_id == "wb" && r.slot == "*", "zone a fell back to {r:?}");
    }
    // Both clients at once: zone b's writer now serves each log in two slots.
    let mut sent = Vec::new();
    for i in 200..400 {
        sent.push(send(&pa, format!("a{i}"), format!("k{}", i % 16)).await?);
        sent.push(send(&pb, format!("b{i}"), format!("k{}", i % 16)).await?);
    }
    let second = outcomes(sent).await?;
    for (value, (_, ack)) in &second.acked {
        ensure!(ack.writer == "wb", "{value} was committed by {} after zone a died", ack.writer);
    }
    pa.close().await;
    pb.close().await;
    let mut all = first;
    all.acked.extend(second.acked);
    all.unknown.extend(second.unknown);
    all.failed.extend(second.failed);
    ensure!(all.acked.len() == 800, "{} of 800 acknowledged", all.acked.len());
    let log = read_stream(&zone_b, "zoned", PARTITIONS).await?;
    check_exactly_once(&all, &log, PARTITIONS)
}

impl Cluster {
    /// Starts `lakelog reader` with id `id`; returns it with its address.
    fn reader(&self, id: &str) -> Result<(testkit::Service, String)> {
        let port = testkit::free_port()?;
        Ok((self.reader_on(id, port)?, format!("http://127.0.0.1:{port}")))
    }

    /// Starts `lakelog reader` on a given port (to restart one where it was).
    fn reader_on(&self, id: &str, port: u16) -> Result<testkit::Service> {
        let section = format!(
            "reader:\n  listen: 127.0.0.1:{port}\n  id: {id}\n  lease_ttl: {}s\n  cache_size: 8MiB\n",
            LEASE.as_secs()
        );
        self.spawn("reader", id, &section, port)
    }

    /// Starts `lakelog writer` on a given port (to restart one where it was).
    fn writer_on(&self, id: &str, port: u16) -> Result<testkit::Service> {
        let section = format!(
            "writer:\n  listen: 127.0.0.1:{port}\n  id: {id}\n  flush_interval: 10ms\n  lease_ttl: {}s\n",
            LEASE.as_secs()
        );
        self.spawn("writer", id, &section, port)
    }
}

impl Cluster {
    /// Starts a maintenance role (`compactor run`, `cleaner run`; its API on
    /// `maintenance.listen` when the section sets one); ready once its log says `running`.
    /// (A cleaner compacts the history of the whole etcd, which the tests of
    /// this binary share: theirs keep an hour, so no test's watch or pinned read loses its
    /// revision to another's cleaner.)
    /// Starts `cleaner run` with `section` (a `maintenance:` section, last in it) and its API on
    /// a free port: the process, and the endpoint to ask it at.
    fn cleaner(&self, section: &str) -> Result<(testkit::Service, String)> {
        let port = testkit::free_port()?;
        let section = format!("{section}  listen: 127.0.0.1:{port}\n");
        let cleaner = self.background(&["cleaner", "run"], "cleaner", &section)?;
        Ok((cleaner, format!("http://127.0.0.1:{port}")))
    }

    fn background(&self, args: &[&str], id: &str, section: &str) -> Result<testkit::Service> {
        let file = self.write_config(id, section)?;
        let mut cmd = Command::new(crate::bin());
        cmd.args(args).arg("--config").arg(&file);
        let log = self.dir.path().join(format!("{id}.log"));
        let watched = log.clone();
        let ready = move || std::fs::read_to_string(&watched).is_ok_and(|t| t.contains("running"));
        Ok(testkit::Service::start_when("lakelog", cmd, log, ready)?)
    }
}

async fn wait_role(
    meta: &Arc<dyn MetadataStore>,
    cluster: &str,
    role: &str,
    n: usize,
) -> Result<()> {
    let start = Instant::now();
    loop {
        let (members, _) = logstore::membership::live_members(meta.as_ref(), cluster, role).await?;
        if members.len() == n {
            return Ok(());
        }
        ensure!(
            start.elapsed() < Duration::from_secs(30),
            "{} {role}s live, want {n}",
            members.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn payloads(entries: &[client::Entry]) -> Vec<(u64, Bytes)> {
    entries.iter().map(|e| (e.header.as_ref().map_or(0, |h| h.offset), e.payload.clone())).collect()
}

/// Every entry of `log` below offset `end`, read from `c` 100 records at a time: (offset,
/// payload).
async fn read_to(c: &client::LogClient, log: u64, end: u64) -> Result<Vec<(u64, Bytes)>> {
    let mut got = Vec::new();
    let mut at = 0;
    while at < end {
        let resp = c.read_entries(log, at, 100, 0).await?;
        ensure!(!resp.entries.is_empty(), "read stopped at {at} below {end}");
        at = resp.next_offset;
        got.extend(payloads(&resp.entries));
    }
    Ok(got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_serve_committed_data_refuse_writes_and_survive_a_killed_reader() -> Result<()> {
    let cluster = Cluster::start()?;
    let wport = testkit::free_port()?;
    let mut w = cluster.writer_on("w1", wport)?;
    let meta = cluster.meta().await?;
    let writer = client::LogClient::connect(&format!("http://127.0.0.1:{wport}")).await?;
    let log = writer.create_log().await?;
    let mut written = Vec::new();
    for i in 0..300u64 {
        let records: Vec<Record> = (0..3)
            .map(|j| Record::value(format!("e{i}-r{j}-{}", "z".repeat((i % 50) as usize))))
            .collect();
        let payload = client::batch::encode(&records)?;
        let h = writer.append(log, 3, payload.clone(), None).await?;
        written.push((h.offset, payload));
    }
    // Readers started after the data was written serve it, byte-identical.
    let (mut ra, a_url) = cluster.reader("ra")?;
    let (_rb, b_url) = cluster.reader("rb")?;
    wait_role(&meta, &cluster.name, "reader", 2).await?;
    let a = client::LogClient::connect(&a_url).await?;
    let got = read_to(&a, log, 900).await?;
    ensure!(got == written, "reader A's bytes differ from what was written");

    // Writes sent to a reader: READ_ONLY, distinct from every other error.
    for (what, r) in [
        ("append", a.append(log, 1, Bytes::from_static(b"no"), None).await.map(|_| ())),
        ("create_log", a.create_log().await.map(|_| ())),
        ("trim", a.soft_trim(log, 1).await.map(|_| ())),
        ("fence", a.fence(log).await.map(|_| ())),
        ("create cursor", a.create_cursor(log, "c", None, false).await),
    ] {
        match r {
            Err(e) if e.code == "READ_ONLY" => {}
            other => anyhow::bail!("{what} on a reader answered {other:?}"),
        }
    }
    // A reader never waits at the high watermark.
    let start = Instant::now();
    let resp = a.read_entries(log, 900, 10, 5_000).await?;
    ensure!(resp.entries.is_empty() && start.elapsed() < Duration::from_secs(2), "a reader waited");

    // A scan over the pool, with appends going on, while one reader is killed midway.
    let pool = client::ReaderPool::discover(&cluster.catalog_url).await?;
    ensure!(pool.addresses().len() == 2, "{:?}", pool.addresses());
    let appending = {
        let writer = writer.clone();
        tokio::spawn(async move {
            for i in 0..200u64 {
                let p = client::batch::encode(&[Record::value(format!("late{i}"))])?;
                writer.append(log, 1, p, None).await?;
            }
            anyhow::Ok(())
        })
    };
    let mut scanned = Vec::new();
    let mut at = 0;
    let mut calls = 0;
    loop {
        let resp = pool.read_entries(log, at, 40).await?;
        let hw_after = writer.info(log).await?.next_offset;
        for e in &resp.entries {
            let h = e.header.as_ref().context("header")?;
            ensure!(
                h.offset + u64::from(h.record_count) <= hw_after,
                "entry at {} past the high watermark {hw_after}",
                h.offset
            );
        }
        if resp.entries.is_empty() {
            if appending.is_finished() && at >= writer.info(log).await?.next_offset {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        at = resp.next_offset;
        scanned.extend(payloads(&resp.entries));
        calls += 1;
        if calls == 5 {
            ra.kill9()?;
        }
    }
    appending.await??;
    ensure!(calls > 5, "the scan ended before the kill");
    ensure!(scanned[..written.len()] == written[..], "the scan differs from what was written");
    ensure!(scanned.len() == written.len() + 200, "{} entries scanned", scanned.len());

    // Cursors: state survives killing every process; read through a reader.
    writer.create_cursor(log, "billing", None, false).await?;
    let props = HashMap::from([("epoch".to_owned(), 9i64)]);
    writer.ack_cursor(log, "billing", Some(29), vec![40, 41, 42, 50], props.clone()).await?;
    w.kill9()?;
    drop(_rb);
    let _w = cluster.writer_on("w1", wport)?;
    let (_rc, c_url) = cluster.reader("rc")?;
    let c = client::LogClient::connect(&c_url).await?;
    let stats = c.cursor_stats(log, "billing").await?;
    ensure!(stats.mark_delete_offset == Some(29) && stats.properties == props, "{stats:?}");
    ensure!(
        stats.acked_records == 4 && stats.backlog_records == stats.high_watermark - 30 - 4,
        "{stats:?}"
    );
    let resp = c.read_cursor(log, "billing", 3, None).await?;
    ensure!(
        resp.entries.first().and_then(|e| e.header.as_ref()).map(|h| h.offset) == Some(30),
        "resumes at the mark-delete position"
    );
    let _ = &b_url;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compactor_and_cleaner_processes_compact_reclaim_and_keep_every_record() -> Result<()> {
    let cluster = Cluster::start()?;
    let wport = testkit::free_port()?;
    let _w = cluster.writer_on("w1", wport)?;
    let writer = client::LogClient::connect(&format!("http://127.0.0.1:{wport}")).await?;
    let log = writer.create_log().await?;
    let written = append_each(&writer, log, 40, "c").await?;
    let section =
        "maintenance:\n  interval: 1s\n  min_chunks: 8\n  grace: 1s\n  metadata_history: 1h\n";
    let _compactor = cluster.background(&["compactor", "run"], "compactor", section)?;
    let (_cleaner, cleaner) = cluster.cleaner(section)?;
    // The compactor swaps the spilled pages for a segment; the cleaner then reclaims the WAL
    // objects below the floor it raised (its status shows the cutoff moving off 0).
    let start = Instant::now();
    loop {
        let idx = writer.read_index_range(log, 0, 1).await?;
        let compacted = idx.first().is_some_and(|e| e.object.starts_with("compacted/"));
        let out = Command::new(crate::bin())
            .args(["--endpoint", &cleaner, "cleaner", "status"])
            .output()?;
        let status = String::from_utf8_lossy(&out.stdout).into_owned();
        if compacted && !status.starts_with("cutoff 0 ") {
            break;
        }
        ensure!(start.elapsed() < Duration::from_secs(30), "not compacted and cleaned: {status}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The cleaner process deleted WAL objects (its cycle log line counts them).
    let cleaner_log = cluster.dir.path().join("cleaner.log");
    let deleted_some = |t: &str| {
        t.split("deleted=").skip(1).any(|r| r.starts_with(|c: char| ('1'..='9').contains(&c)))
    };
    while !std::fs::read_to_string(&cleaner_log).is_ok_and(|t| deleted_some(&t)) {
        ensure!(
            start.elapsed() < Duration::from_secs(40),
            "the cleaner deleted nothing: {}",
            std::fs::read_to_string(&cleaner_log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let got = read_to(&writer, log, 40).await?;
    ensure!(got == written, "records changed through compaction and cleaning");
    Ok(())
}

/// The number right after the first `marker` in `text` (up to the next space).
fn number_after(text: &str, marker: &str) -> Result<u64> {
    text.split_once(marker)
        .and_then(|(_, r)| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("no number after {marker:?} in: {text}"))
}

/// Appends `n` records `<prefix><i>` to `log`, one append (one flush, one WAL chunk) each:
/// what was written, by offset.
async fn append_each(
    writer: &client::LogClient,
    log: u64,
    n: u64,
    prefix: &str,
) -> Result<Vec<(u64, bytes::Bytes)>> {
    let mut written = Vec::new();
    for i in 0..n {
        let payload = client::batch::encode(&[Record::value(format!("{prefix}{i}"))])?;
        let h = writer.append(log, 1, payload.clone(), None).await?;
        written.push((h.offset, payload));
    }
    Ok(written)
}

/// `lakelog ARGS` to completion: (exit code, stdout, stderr).
fn lakelog(args: &[&str]) -> Result<(i32, String, String)> {
    let out = Command::new(crate::bin()).args(args).output()?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout)?,
        String::from_utf8(out.stderr)?,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_running_compactor_and_cleaner_answer_status_and_cycles_over_grpc() -> Result<()> {
    let cluster = Cluster::start()?;
    let wport = testkit::free_port()?;
    let _w = cluster.writer_on("w1", wport)?;
    let writer = client::LogClient::connect(&format!("http://127.0.0.1:{wport}")).await?;
    let log = writer.create_log().await?;
    let written = append_each(&writer, log, 20, "g").await?;
    // No scheduled cycle within the test: everything below is asked of the running roles.
    let (cport, kport) = (testkit::free_port()?, testkit::free_port()?);
    let section = |port: u16| {
        format!(
            "maintenance:\n  interval: 1h\n  min_chunks: 16\n  metadata_history: 1h\n  listen: 127.0.0.1:{port}\n"
        )
    };
    let _c = cluster.background(&["compactor", "run"], "compactor", &section(cport))?;
    let _k = cluster.background(&["cleaner", "run"], "cleaner", &section(kport))?;
    let (compactor, cleaner) =
        (format!("http://127.0.0.1:{cport}"), format!("http://127.0.0.1:{kport}"));

    let (code, out, err) = lakelog(&["--endpoint", &cleaner, "cleaner", "status"])?;
    ensure!(code == 0, "{err}");
    let cutoff = number_after(&out, "cutoff ")?;
    ensure!(out.contains("held back by ") && out.contains("last cycle: none yet"), "{out}");
    let inputs = out.lines().skip_while(|l| !l.starts_with("lowest inputs")).skip(1);
    ensure!(inputs.take_while(|l| l.starts_with("  ")).count() >= 2, "no inputs listed: {out}");

    let log_arg = log.to_string();
    let (code, out, err) =
        lakelog(&["--endpoint", &compactor, "admin", "compact", &log_arg, "--min-chunks", "8"])?;
    ensure!(code == 0, "{err}");
    ensure!(
        out.contains("compacted 1 logs") && out.contains(&format!("log {log}: offsets [0, ")),
        "{out}"
    );
    let idx = writer.read_index_range(log, 0, 1).await?;
    ensure!(idx.first().is_some_and(|e| e.object.starts_with("compacted/")), "{idx:?}");
    let (code, out, err) = lakelog(&["--endpoint", &compactor, "compactor", "status"])?;
    ensure!(code == 0, "{err}");
    ensure!(
        out.contains("1 cycle(s) since it started") && out.contains("logs need 16 eligible"),
        "{out}"
    );

    // The compaction raised the floor: the cleaner's live cutoff moved, and a cycle now
    // deletes the replaced WAL objects.
    let (_, out, _) = lakelog(&["--endpoint", &cleaner, "cleaner", "status"])?;
    let moved = number_after(&out, "cutoff ")?;
    ensure!(moved > cutoff, "cutoff {cutoff} -> {moved}: {out}");
    let (code, out, err) = lakelog(&["--endpoint", &cleaner, "admin", "clean", "--grace", "0s"])?;
    ensure!(code == 0, "{err}");
    let deleted = number_after(&out, "deleted ")?;
    ensure!(deleted >= 8, "{out}");
    ensure!(read_to(&writer, log, 20).await? == written, "records changed");

    // Asked of the wrong role: one line naming what to point at.
    let (code, _, err) =
        lakelog(&["--endpoint", &format!("http://127.0.0.1:{wport}"), "cleaner", "status"])?;
    ensure!(code == 1 && err.contains("serves no CleanerService"), "{err}");
    let serving = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
    for (port, service) in [
        (cport, "lakelog.maintenance.v1.CompactorService"),
        (kport, "lakelog.maintenance.v1.CleanerService"),
    ] {
        ensure!(health_of(port, service).await? == serving, "{service} is not SERVING");
    }
    Ok(())
}

/// `GET /metrics` from 127.0.0.1:`port`: (status line, body).
fn scrape(port: u16, path: &str) -> Result<(String, String)> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port))?;
    c.set_read_timeout(Some(Duration::from_secs(5)))?;
    c.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())?;
    let mut out = String::new();
    c.read_to_string(&mut out)?;
    let (head, body) = out.split_once("\r\n\r\n").context("no head")?;
    Ok((head.lines().next().unwrap_or_default().to_owned(), body.to_owned()))
}

/// `promtool check metrics` on an exposition.
fn promtool(exposition: &str) -> Result<()> {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("promtool (Debian prometheus; `make deps` installs it)")?;
    child.stdin.take().context("stdin")?.write_all(exposition.as_bytes())?;
    let out = child.wait_with_output()?;
    ensure!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_role_serves_metrics_that_promtool_accepts() -> Result<()> {
    let cluster = Cluster::start()?;
    let (wport, rport) = (testkit::free_port()?, testkit::free_port()?);
    let m: Vec<u16> = (0..4).map(|_| testkit::free_port()).collect::<Result<_, _>>()?;
    let _w = cluster.spawn(
        "writer",
        "w1",
        &format!("  metrics_listen: 127.0.0.1:{}\nwriter:\n  listen: 127.0.0.1:{wport}\n  id: w1\n  flush_interval: 10ms\n", m[0]),
        wport,
    )?;
    let _r = cluster.spawn(
        "reader",
        "r1",
        &format!(
            "  metrics_listen: 127.0.0.1:{}\nreader:\n  listen: 127.0.0.1:{rport}\n  id: r1\n",
            m[1]
        ),
        rport,
    )?;
    // The compactor and cleaner serve their API and gRPC health on a port of their own.
    let health: Vec<u16> = (0..2).map(|_| testkit::free_port()).collect::<Result<_, _>>()?;
    let section = |p: u16, h: u16| {
        format!(
            "  metrics_listen: 127.0.0.1:{p}\nmaintenance:\n  interval: 1s\n  grace: 1s\n  listen: 127.0.0.1:{h}\n"
        )
    };
    let _c = cluster.background(&["compactor", "run"], "compactor", &section(m[2], health[0]))?;
    let _k = cluster.background(&["cleaner", "run"], "cleaner", &section(m[3], health[1]))?;
    let writer = client::LogClient::connect(&format!("http://127.0.0.1:{wport}")).await?;
    let log = writer.create_log().await?;
    for i in 0..20u64 {
        writer
            .append(log, 1, client::batch::encode(&[Record::value(format!("m{i}"))])?, None)
            .await?;
    }
    let reader = client::LogClient::connect(&format!("http://127.0.0.1:{rport}")).await?;
    reader.read_entries(log, 0, 100, 0).await?;
    let _ = reader.append(log, 1, Bytes::from_static(b"refused"), None).await;
    tokio::time::sleep(Duration::from_millis(2500)).await; // counters follow within 1 s; a cleaner cycle
    for (port, role, expect) in [
        (
            m[0],
            "writer",
            vec![
                "lakelog_grpc_requests_total{",
                "Append",
                "lakelog_writer_flushes_total ",
                "lakelog_grpc_request_seconds_bucket",
                "lakelog_object_store_puts_total ",
                "lakelog_object_store_put_bytes_total ",
                "lakelog_writer_flush_bytes_bucket{le=",
                "lakelog_writer_put_seconds_count ",
                "lakelog_writer_commit_seconds_count ",
                "lakelog_writer_flush_seconds_sum ",
            ],
        ),
        (
            m[1],
            "reader",
            vec![
                "ReadEntries",
                "code=\"12\"",
                "lakelog_reader_cache_misses_total ",
                "lakelog_reader_cache_hits_total ",
                "lakelog_object_store_gets_total ",
            ],
        ),
        (
            m[3],
            "cleaner",
            vec![
                "lakelog_cleaner_cutoff ",
                "lakelog_cleaner_lag_sequences ",
                "lakelog_cleaner_deleted_objects_total ",
            ],
        ),
    ] {
        let (status, body) = scrape(port, "/metrics")?;
        ensure!(status.contains("200"), "{role}: {status}");
        // The plain-HTTP health probes ask (its stores answer: SERVING).
        let (health, says) = scrape(port, "/healthz")?;
        ensure!(health.contains("200") && says.trim() == "SERVING", "{role}: {health} {says}");
        for e in expect {
            ensure!(body.contains(e), "{role}: `{e}` not in\n{body}");
        }
        promtool(&body).with_context(|| format!("{role}'s /metrics"))?;
    }
    // The object-store counters count: the writer PUT its flushes, the reader GET them.
    let value = |body: &str, name: &str| -> f64 {
        body.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
            .unwrap_or(0.0)
    };
    let (_, writer_body) = scrape(m[0], "/metrics")?;
    let (_, reader_body) = scrape(m[1], "/metrics")?;
    ensure!(value(&writer_body, "lakelog_object_store_puts_total ") >= 20.0, "{writer_body}");
    // Twenty appends, each flushed alone: twenty flushes sized, PUT and committed.
    for h in ["flush_entries", "put_seconds", "commit_seconds", "flush_seconds"] {
        let n = value(&writer_body, &format!("lakelog_writer_{h}_count "));
        ensure!(n >= 20.0, "lakelog_writer_{h}_count is {n}");
    }
    ensure!(value(&writer_body, "lakelog_writer_flush_bytes_sum ") > 20.0 * 30.0, "{writer_body}");
    ensure!(value(&reader_body, "lakelog_object_store_gets_total ") >= 1.0, "{reader_body}");
    // A compactor cycle ran (every 1 s) and accounted for the test's one log: compacted, or
    // skipped with a reason (say, fewer eligible chunks than the threshold yet).
    let (status, compactor_body) = scrape(m[2], "/metrics")?;
    ensure!(status.contains("200"), "compactor: {status}");
    promtool(&compactor_body).context("the compactor's /metrics")?;
    ensure!(value(&compactor_body, "lakelog_compactor_cycles_total ") >= 1.0, "{compactor_body}");
    let compacted = value(&compactor_body, "lakelog_compactor_logs_compacted_total ");
    let skipped: f64 = compactor_body
        .lines()
        .filter(|l| l.starts_with("lakelog_compactor_skipped_logs_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    ensure!(
        compacted + skipped >= 1.0,
        "the log was neither compacted nor skipped:\n{compactor_body}"
    );
    let (status, _) = scrape(m[0], "/nothing")?;
    ensure!(status.contains("404"), "{status}");
    for (role, port) in [("compactor", health[0]), ("cleaner", health[1])] {
        let serving = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
        ensure!(health_of(port, "").await? == serving, "the {role} does not answer SERVING");
    }
    Ok(())
}

/// The gRPC health status of `service` ("" for the server) at 127.0.0.1:`port`.
async fn health_of(port: u16, service: &str) -> Result<i32> {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let channel = tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{port}"))?
        .connect()
        .await?;
    let resp = HealthClient::new(channel)
        .check(HealthCheckRequest { service: service.to_owned() })
        .await?;
    Ok(resp.into_inner().status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn health_is_not_serving_while_object_storage_does_not_answer() -> Result<()> {
    use tonic_health::pb::health_check_response::ServingStatus;
    let cluster = Cluster::start()?;
    let (good, bad, dead) = (testkit::free_port()?, testkit::free_port()?, testkit::free_port()?);
    let _ok =
        cluster.spawn("reader", "r-ok", &format!("reader:\n  listen: 127.0.0.1:{good}\n"), good)?;
    // The second reader's object store is a port nothing listens on.
    let file = cluster.dir.path().join("r-bad.yaml");
    let text = cluster.config(&format!("reader:\n  listen: 127.0.0.1:{bad}\n"));
    let endpoint = format!("endpoint: {}", cluster.s3.endpoint);
    std::fs::write(&file, text.replace(&endpoint, &format!("endpoint: http://127.0.0.1:{dead}")))?;
    let mut cmd = Command::new(crate::bin());
    cmd.args(["reader", "--config"]).arg(&file);
    let _bad = testkit::Service::start("lakelog", cmd, cluster.dir.path().join("r-bad.log"), bad)?;
    let service = "lakelog.log.v1.LogService";
    let start = Instant::now();
    while health_of(good, "").await? != ServingStatus::Serving as i32 {
        ensure!(start.elapsed() < Duration::from_secs(10), "the healthy reader never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ensure!(health_of(good, service).await? == ServingStatus::Serving as i32);
    tokio::time::sleep(Duration::from_secs(3)).await; // past a probe or two
    for s in ["", service] {
        ensure!(
            health_of(bad, s).await? == ServingStatus::NotServing as i32,
            "a reader without object storage answers SERVING for `{s}`"
        );
    }
    Ok(())
}

/// Object-store credentials are explicit: a writer whose S3 config has none (neither in the
/// file nor in the environment) exits 1 with one line naming what is missing, before it
/// reaches any server (never falling back to a cloud metadata endpoint); one whose secret is
/// wrong starts, and its health stays NOT_SERVING while S3 refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writer_without_s3_credentials_refuses_to_start_and_wrong_ones_are_not_serving()
-> Result<()> {
    use tonic_health::pb::health_check_response::ServingStatus;
    let cluster = Cluster::start()?;
    let s3 = &cluster.s3;
    let keys = format!(
        "    access_key_id: {}\n    secret_access_key: {}\n",
        s3.access_key_id, s3.secret_access_key
    );
    let (none, wrong) = (testkit::free_port()?, testkit::free_port()?);
    let section =
        |port: u16, id: &str| format!("writer:\n  listen: 127.0.0.1:{port}\n  id: {id}\n");
    let text = cluster.config(&section(none, "no-keys"));
    ensure!(text.contains(&keys), "the cluster config names its keys");
    let file = cluster.dir.path().join("no-keys.yaml");
    std::fs::write(&file, text.replace(&keys, ""))?;
    let started = Instant::now();
    let out = Command::new(crate::bin())
        .args(["writer", "--config"])
        .arg(&file)
        .env_remove("LAKELOG_S3_ACCESS_KEY_ID")
        .env_remove("LAKELOG_S3_SECRET_ACCESS_KEY")
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr.lines().find(|l| l.starts_with("lakelog: ")).unwrap_or_default();
    ensure!(out.status.code() == Some(1), "exit {:?}: {stderr}", out.status.code());
    ensure!(
        line.contains("no credentials")
            && line.contains("access_key_id (or LAKELOG_S3_ACCESS_KEY_ID)")
            && line.contains("secret_access_key (or LAKELOG_S3_SECRET_ACCESS_KEY)"),
        "{stderr}"
    );
    ensure!(started.elapsed() < Duration::from_secs(10), "took {:?} to refuse", started.elapsed());
    // It never registered: it reached no server.
    let meta = cluster.meta().await?;
    let (members, _) =
        logstore::membership::live_members(meta.as_ref(), &cluster.name, "writer").await?;
    ensure!(members.is_empty(), "{members:?}");

    let text = cluster.config(&section(wrong, "wrong-keys"));
    let file = cluster.dir.path().join("wrong-keys.yaml");
    let bad = format!("    secret_access_key: {}-not\n", s3.secret_access_key);
    let good = format!("    secret_access_key: {}\n", s3.secret_access_key);
    std::fs::write(&file, text.replace(&good, &bad))?;
    let mut cmd = Command::new(crate::bin());
    cmd.args(["writer", "--config"]).arg(&file);
    let _w =
        testkit::Service::start("lakelog", cmd, cluster.dir.path().join("wrong-keys.log"), wrong)?;
    tokio::time::sleep(Duration::from_secs(3)).await; // past a probe or two
    for s in ["", "lakelog.log.v1.LogService"] {
        ensure!(
            health_of(wrong, s).await? == ServingStatus::NotServing as i32,
            "a writer whose S3 secret is wrong answers SERVING for `{s}`"
        );
    }
    Ok(())
}
