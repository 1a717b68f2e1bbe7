//! The whole topology as separate processes — catalog, 2 writers, 2 readers, compactor,
//! cleaner on etcd and SeaweedFS — kept producing into while every role is restarted in turn
//! by SIGTERM; and a writer's SIGTERM drain on its own.

use super::*;

/// One role's process, restartable where it was (same port, same config).
struct Role {
    /// What the config file and log are named after (with the generation appended).
    name: &'static str,
    args: &'static [&'static str],
    section: String,
    /// The gRPC port, for roles that serve one.
    port: Option<u16>,
    metrics: u16,
    generation: u32,
    proc: Option<testkit::Service>,
}

impl Role {
    fn new(name: &'static str, args: &'static [&'static str], section: String) -> Result<Role> {
        let metrics = testkit::free_port()?;
        Ok(Role { name, args, section, port: None, metrics, generation: 0, proc: None })
    }

    /// A role serving gRPC on `port`; `section` names `{port}` where the port goes.
    fn serving(name: &'static str, args: &'static [&'static str], section: &str) -> Result<Role> {
        let port = testkit::free_port()?;
        let mut r = Role::new(name, args, section.replace("{port}", &port.to_string()))?;
        r.port = Some(port);
        Ok(r)
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port.unwrap_or_default())
    }

    fn start(&mut self, cluster: &Cluster) -> Result<()> {
        self.generation += 1;
        let id = format!("{}-{}", self.name, self.generation);
        let section = format!("  metrics_listen: 127.0.0.1:{}\n{}", self.metrics, self.section);
        self.proc = Some(match self.port {
            Some(port) => cluster.spawn(self.args[0], &id, &section, port)?,
            None => cluster.background(self.args, &id, &section)?,
        });
        Ok(())
    }

    /// SIGTERM; the process must exit 0 within 20 s.
    fn stop(&mut self) -> Result<Duration> {
        let mut p = self.proc.take().context("not running")?;
        let start = Instant::now();
        let status = p.terminate(Duration::from_secs(20))?;
        ensure!(status.success(), "{} exited with {status}:\n{}", self.name, p.output());
        Ok(start.elapsed())
    }

    fn logs(&self, cluster: &Cluster) -> String {
        (1..=self.generation)
            .map(|g| {
                let f = cluster.dir.path().join(format!("{}-{g}.log", self.name));
                std::fs::read_to_string(f).unwrap_or_default()
            })
            .collect()
    }
}

/// Every entry of `log` read through the reader pool: (offset, value) of each record.
async fn read_through_readers(
    pool: &client::ReaderPool,
    log: u64,
    end: u64,
) -> Result<Vec<(u64, String)>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < end {
        let resp = pool.read_entries(log, at, 10_000).await?;
        ensure!(!resp.entries.is_empty(), "log {log}: readers stopped at {at} below {end}");
        for e in &resp.entries {
            let offset = e.header.as_ref().context("header")?.offset;
            for (i, r) in client::batch::decode(&e.payload)?.into_iter().enumerate() {
                out.push((offset + i as u64, String::from_utf8_lossy(&r.value).into_owned()));
            }
        }
        at = resp.next_offset;
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_restart_of_every_role_loses_no_acknowledged_record() -> Result<()> {
    const STREAMS: [(&str, u32); 2] = [("orders", 6), ("clicks", 4)];
    let mut cluster = Cluster::start()?;
    // The catalog Cluster::start made is replaced by one of ours (with metrics, restartable).
    let catalog_port: u16 = cluster.catalog_url.rsplit(':').next().unwrap_or_default().parse()?;
    cluster.catalog.take();
    let mut catalog = Role::new(
        "catalog",
        &["catalog"],
        format!("catalog:\n  listen: 127.0.0.1:{catalog_port}\n"),
    )?;
    catalog.port = Some(catalog_port);
    let writer = |id: &str| {
        format!(
            "writer:\n  listen: 127.0.0.1:{{port}}\n  id: {id}\n  flush_interval: 10ms\n  lease_ttl: {}s\n",
            LEASE.as_secs()
        )
    };
    let reader = |id: &str| {
        format!(
            "reader:\n  listen: 127.0.0.1:{{port}}\n  id: {id}\n  lease_ttl: {}s\n  cache_size: 8MiB\n",
            LEASE.as_secs()
        )
    };
    let maintenance =
        "maintenance:\n  interval: 1s\n  min_chunks: 8\n  grace: 1s\n  metadata_history: 1h\n";
    let mut roles = vec![
        catalog,
        Role::serving("w1", &["writer"], &writer("w1"))?,
        Role::serving("w2", &["writer"], &writer("w2"))?,
        Role::serving("r1", &["reader"], &reader("r1"))?,
        Role::serving("r2", &["reader"], &reader("r2"))?,
        Role::new("compactor", &["compactor", "run"], maintenance.to_owned())?,
        Role::new("cleaner", &["cleaner", "run"], maintenance.to_owned())?,
    ];
    for r in &mut roles {
        r.start(&cluster)?;
    }
    let meta = cluster.meta().await?;
    wait_role(&meta, &cluster.name, "writer", 2).await?;
    wait_role(&meta, &cluster.name, "reader", 2).await?;
    let admin = client::CatalogClient::connect(&cluster.catalog_url).await?;
    let mut cfg = cluster.client();
    cfg.request_timeout = Duration::from_secs(20);
    let mut producing = Vec::new();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for (stream, partitions) in STREAMS {
        admin.create(stream, partitions, None, None).await?;
        let producer = Producer::new(cfg.clone(), stream, ProducerConfig::default()).await?;
        let stop = stop.clone();
        producing.push(tokio::spawn(async move {
            let mut sent = Vec::new();
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                sent.push(send(&producer, format!("{stream}-{i}"), format!("k{}", i % 97)).await?);
                i += 1;
                if i.is_multiple_of(10) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            producer.close().await;
            anyhow::Ok(sent)
        }));
    }

    // Every role in turn: SIGTERM, wait for it to exit 0, start it again where it was, wait
    // until it is back (registered, for writers and readers), produce on a while.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut stops = Vec::new();
    for r in &mut roles {
        let took = r.stop()?;
        tokio::time::sleep(Duration::from_millis(500)).await; // the others carry on without it
        r.start(&cluster)?;
        match r.args[0] {
            "writer" | "reader" => wait_role(&meta, &cluster.name, r.args[0], 2).await?,
            _ => {}
        }
        stops.push(format!("{} {} ms", r.name, took.as_millis()));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut all = Outcomes::default();
    let mut sent = 0;
    for p in producing {
        let s = p.await??;
        sent += s.len();
        let o = outcomes(s).await?;
        all.acked.extend(o.acked);
        all.unknown.extend(o.unknown);
        all.failed.extend(o.failed);
    }

    // Through the writers (consumers): every acknowledged record exactly once, where acked.
    let mut doubtful_in_log = 0;
    for (stream, partitions) in STREAMS {
        let log = read_stream(&cfg, stream, partitions).await?;
        doubtful_in_log += all.unknown.keys().filter(|v| log.contains_key(*v)).count();
        let o = Outcomes {
            acked: of_stream(&all.acked, stream),
            unknown: of_stream(&all.unknown, stream),
            failed: Vec::new(),
        };
        ensure!(!o.acked.is_empty(), "{stream}: nothing acknowledged");
        check_exactly_once(&o, &log, partitions)?;
        // Through the readers: the same records at the same offsets.
        let pool = client::ReaderPool::discover(&cluster.catalog_url).await?;
        let described = admin.get(stream).await?;
        for (p, log_id) in described.partitions.iter().enumerate() {
            let mut want: Vec<(u64, String)> = log
                .iter()
                .filter(|(_, at)| at[0].0 as usize == p)
                .map(|(v, at)| (at[0].1, v.clone()))
                .collect();
            want.sort();
            let end = want.last().map_or(0, |(o, _)| o + 1);
            let got = read_through_readers(&pool, *log_id, end).await?;
            ensure!(got == want, "{stream}/{p}: readers serve other records than the writers");
        }
    }
    ensure!(all.failed.is_empty(), "records failed: {:?}", all.failed.first());

    // Compaction and cleaning happened along the way: some log's first page is a segment, and
    // a cleaner cycle deleted WAL objects.
    let w1 = client::LogClient::connect(&roles[1].url()).await?;
    let mut compacted = 0;
    for (stream, _) in STREAMS {
        for log_id in admin.get(stream).await?.partitions {
            let first = w1.read_index_range(log_id, 0, 1).await?;
            compacted +=
                usize::from(first.first().is_some_and(|e| e.object.starts_with("compacted/")));
        }
    }
    let cleaner_logs = roles[6].logs(&cluster);
    let deleted: u64 = cleaner_logs
        .split("deleted=")
        .skip(1)
        .filter_map(|r| r.split(|c: char| !c.is_ascii_digit()).next()?.parse::<u64>().ok())
        .sum();
    ensure!(compacted > 0, "no log was compacted");
    ensure!(deleted > 0, "the cleaner deleted nothing:\n{cleaner_logs}");

    // Every role's metrics endpoint, after its restart, passes promtool, and docs/metrics.md
    // documents every metric it serves.
    let documented =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md"))?;
    for r in &roles {
        let (status, body) = scrape(r.metrics, "/metrics")?;
        ensure!(status.contains("200"), "{}: {status}", r.name);
        promtool(&body).with_context(|| format!("{}'s /metrics", r.name))?;
        for name in body.lines().filter_map(|l| l.strip_prefix("# HELP ")?.split(' ').next()) {
            ensure!(
                documented.contains(&format!("`{name}`"))
                    || documented.contains(&format!("`{name}{{")),
                "{}'s metric {name} is not in docs/metrics.md",
                r.name
            );
        }
    }
    eprintln!(
        "rolling restart: {sent} sent, {} acknowledged, {} in doubt ({doubtful_in_log} of them in the log); {compacted} logs compacted, {deleted} WAL objects deleted; SIGTERM to exit: {}",
        all.acked.len(),
        all.unknown.len(),
        stops.join(", ")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writer_stopped_by_sigterm_commits_what_it_accepted_and_releases_its_lease() -> Result<()>
{
    let cluster = Cluster::start()?;
    let port = testkit::free_port()?;
    // Flushes wait 1 s, so the appends below are accepted and buffered when SIGTERM comes;
    // the lease (30 s) outlives the test: it ends only if the writer revokes it.
    let section = format!(
        "writer:\n  listen: 127.0.0.1:{port}\n  id: wt\n  flush_interval: 1s\n  lease_ttl: 30s\n"
    );
    let mut w = cluster.spawn("writer", "wt", &section, port)?;
    let meta = cluster.meta().await?;
    wait_role(&meta, &cluster.name, "writer", 1).await?;
    let writer = client::LogClient::connect(&format!("http://127.0.0.1:{port}")).await?;
    let log = writer.create_log().await?;
    let appends: Vec<_> = (0..40u64)
        .map(|i| {
            let writer = writer.clone();
            tokio::spawn(async move {
                let payload = client::batch::encode(&[Record::value(format!("drain{i}"))])?;
                anyhow::Ok((writer.append(log, 1, payload.clone(), None).await?.offset, payload))
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopping = Instant::now();
    w.sigterm()?;
    // While it drains it still answers: NOT_SERVING, and an append is refused UNAVAILABLE with
    // an answer (nothing applied, so a client re-routes it; never left in doubt).
    use tonic_health::pb::health_check_response::ServingStatus;
    while health_of(port, "").await? != ServingStatus::NotServing as i32 {
        ensure!(stopping.elapsed() < Duration::from_secs(5), "still SERVING after SIGTERM");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let late = client::batch::encode(&[Record::value("too late")])?;
    match writer.append(log, 1, late, None).await {
        Err(e) if e.code == "UNAVAILABLE" && !e.outcome_unknown => {}
        other => anyhow::bail!("an append to a draining writer answered {other:?}"),
    }
    let status = w.wait_exit(Duration::from_secs(20))?;
    let took = stopping.elapsed();
    ensure!(status.success(), "the writer exited with {status}:\n{}", w.output());
    // Every append it had accepted was answered: committed, not dropped.
    let mut acked = Vec::new();
    for a in appends {
        acked.push(a.await?.context("an accepted append failed during the drain")?);
    }
    acked.sort();
    // It revoked its lease: its member key is gone at once, not after 30 s.
    let member = format!("/{}/members/writer/wt", cluster.name).into_bytes();
    ensure!(meta.get(&member).await?.is_none(), "the stopped writer is still a member");
    // A writer started again serves all of it.
    let _w = cluster.spawn("writer", "wt-2", &section, port)?;
    let writer = client::LogClient::connect(&format!("http://127.0.0.1:{port}")).await?;
    let got = writer.read_entries(log, 0, 100, 0).await?;
    ensure!(payloads(&got.entries) == acked, "the drained appends are not all in the log");
    eprintln!("SIGTERM drain: 40 buffered appends committed, exit after {} ms", took.as_millis());
    Ok(())
}

/// The entries of `sent` (keyed by record value, `<stream>-…`) that went to `stream`.
fn of_stream<V: Clone>(sent: &BTreeMap<String, V>, stream: &str) -> BTreeMap<String, V> {
    let prefix = format!("{stream}-");
    sent.iter()
        .filter(|(v, _)| v.starts_with(&prefix))
        .map(|(v, x)| (v.clone(), x.clone()))
        .collect()
}
