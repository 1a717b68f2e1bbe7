//! The stream catalog against the embedded store and a real etcd.

use std::sync::Arc;

use anyhow::{Result, anyhow, ensure};
use catalog::{Catalog, CatalogError, StreamConfig};
use logstore::LogReader;
use logstore::records::LogState;
use metadata::MetadataStore;

struct Env {
    catalog: Catalog,
    reader: LogReader,
    meta: Arc<dyn MetadataStore>,
    cluster: String,
    _guard: Box<dyn std::any::Any + Send>,
}

async fn env_with(
    meta: Arc<dyn MetadataStore>,
    guard: Box<dyn std::any::Any + Send>,
) -> Result<Env> {
    let cluster = testkit::unique_prefix("cat");
    let objects = objstore_memory();
    let reader = LogReader::new(meta.clone(), objects, &cluster);
    Ok(Env {
        catalog: Catalog::new(meta.clone(), reader.clone(), &cluster),
        reader,
        meta,
        cluster,
        _guard: guard,
    })
}

fn objstore_memory() -> Arc<dyn objstore::object_store::ObjectStore> {
    Arc::new(objstore::object_store::memory::InMemory::new())
}

async fn embedded() -> Result<Env> {
    let dir = tempfile::tempdir()?;
    let meta = metadata::EmbeddedStore::open(&dir.path().join("meta.redb")).await?;
    env_with(Arc::new(meta), Box::new(dir)).await
}

async fn etcd() -> Result<Env> {
    let etcd = testkit::shared_etcd()?;
    let meta = metadata::EtcdStore::connect(&testkit::etcd_config(etcd.endpoint())).await?;
    env_with(Arc::new(meta), Box::new(())).await
}

macro_rules! cases {
    ($($case:ident),* $(,)?) => {
        mod embedded { $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() -> anyhow::Result<()> { super::$case(super::embedded().await?).await }
        )* }
        mod etcd { $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() -> anyhow::Result<()> { super::$case(super::etcd().await?).await }
        )* }
    };
}

cases!(
    a_deletion_cut_short_is_finished_by_the_maintenance_cycle,
    streams_are_created_listed_and_routed,
    bad_input_gets_clear_errors,
    partitions_only_grow_and_keep_their_logs,
    recreated_stream_gets_a_new_identity_and_new_logs,
    live_writers_are_listed_with_address_and_zone_until_they_leave,
    retention_hard_trims_streams_by_bytes_and_by_time,
);

/// Configs set as named (valid ones: the tests are of the catalog, not of the configs).
fn config(pairs: &[(&str, &str)]) -> Result<StreamConfig> {
    Ok(StreamConfig::from_pairs(pairs.iter().copied())?)
}

async fn streams_are_created_listed_and_routed(e: Env) -> Result<()> {
    let props = config(&[("retention.ms", "60000")])?;
    let a = e.catalog.create("orders", 3, props.clone()).await?;
    let b = e.catalog.create("audit.log_v2", 1, StreamConfig::default()).await?;
    ensure!(a.partitions.len() == 3 && b.partitions.len() == 1 && a.identity != b.identity);
    ensure!(e.catalog.get("orders").await? == a);
    let names: Vec<String> = e.catalog.list().await?.into_iter().map(|s| s.name).collect();
    ensure!(names == ["audit.log_v2", "orders"], "{names:?}");
    for (i, log) in a.partitions.iter().enumerate() {
        ensure!(e.catalog.route("orders", i as u32).await? == *log);
        ensure!(e.reader.info(*log).await?.state == LogState::Normal);
    }
    // A key always lands in the same partition, the one Kafka's partitioner picks.
    let (p, log) = e.catalog.route_key("orders", b"customer-42").await?;
    ensure!(
        p == catalog::routing::partition_for_key(b"customer-42", 3)
            && log == a.partitions[p as usize]
    );
    ensure!(e.catalog.route_key("orders", b"customer-42").await? == (p, log));
    Ok(())
}

async fn bad_input_gets_clear_errors(e: Env) -> Result<()> {
    e.catalog.create("s", 2, StreamConfig::default()).await?;
    let is = |r: Result<_, CatalogError>, want: &str| -> Result<()> {
        match r {
            Err(err) => ensure!(format!("{err:?}").starts_with(want), "{err:?}"),
            Ok(_) => return Err(anyhow!("expected {want}")),
        }
        Ok(())
    };
    is(e.catalog.create("s", 1, StreamConfig::default()).await.map(|_| ()), "AlreadyExists")?;
    for bad in ["", ".", "..", "has space", "slash/name", &"x".repeat(250), "__consumer_offsets"] {
        is(e.catalog.create(bad, 1, StreamConfig::default()).await.map(|_| ()), "InvalidArgument")?;
    }
    is(e.catalog.create("zero", 0, StreamConfig::default()).await.map(|_| ()), "InvalidArgument")?;
    is(e.catalog.get("missing").await.map(|_| ()), "NotFound")?;
    is(e.catalog.route("s", 2).await.map(|_| ()), "InvalidArgument")?;
    is(e.catalog.route("missing", 0).await.map(|_| ()), "NotFound")?;
    is(e.catalog.add_partitions("s", 1).await.map(|_| ()), "InvalidArgument")?;
    is(e.catalog.delete("missing").await, "NotFound")?;
    // A table keeps at least what its log keeps: its retention is at least the log's, and a
    // log that keeps everything has a table that does too. Each config alone is valid, so
    // the catalog is what refuses them together.
    let lake = |log: Option<&str>, table: &str| -> Result<StreamConfig> {
        let mut c = StreamConfig::default();
        c.set("lake.table", "true")?;
        c.set("lake.retention.ms", table)?;
        if let Some(log) = log {
            c.set("retention.ms", log)?;
        }
        Ok(c)
    };
    for (log, table) in [(Some("60000"), "59999"), (None, "60000"), (Some("1"), "0")] {
        let created = e.catalog.create("lk", 1, lake(log, table)?).await.map(|_| ());
        is(created, "InvalidArgument")?;
    }
    e.catalog.create("lk", 1, lake(Some("60000"), "60000")?).await?;
    is(
        e.catalog.set_config("lk", lake(Some("120000"), "60000")?).await.map(|_| ()),
        "InvalidArgument",
    )?;
    Ok(())
}

async fn partitions_only_grow_and_keep_their_logs(e: Env) -> Result<()> {
    let before = e.catalog.create("grow", 2, StreamConfig::default()).await?;
    let after = e.catalog.add_partitions("grow", 5).await?;
    ensure!(after.partitions.len() == 5 && after.partitions[..2] == before.partitions[..]);
    ensure!(after.identity == before.identity);
    ensure!(
        e.catalog.add_partitions("grow", 5).await? == after,
        "growing to the same count changed the stream"
    );
    Ok(())
}

async fn recreated_stream_gets_a_new_identity_and_new_logs(e: Env) -> Result<()> {
    let old = e.catalog.create("phoenix", 2, StreamConfig::default()).await?;
    // A lake table's state goes with its stream.
    let table = logstore::keys::Keys::new(e.reader.keys().cluster()).lake_table(&old.identity);
    e.reader.meta().put(&table, b"{}", 0).await?;
    e.catalog.delete("phoenix").await?;
    ensure!(e.reader.meta().get(&table).await?.is_none(), "the lake table's state lives on");
    for log in &old.partitions {
        ensure!(
            matches!(e.reader.info(*log).await?.state, LogState::Deleted),
            "log {log} of a deleted stream lives on"
        );
    }
    let new = e.catalog.create("phoenix", 2, StreamConfig::default()).await?;
    ensure!(new.identity != old.identity);
    ensure!(
        new.partitions.iter().all(|l| !old.partitions.contains(l)),
        "re-created stream reattached old logs"
    );
    Ok(())
}

async fn live_writers_are_listed_with_address_and_zone_until_they_leave(e: Env) -> Result<()> {
    use std::time::Duration;
    let open = |id: &str, zone: &str| {
        let mut cfg = logstore::LogStorageConfig::new(&e.cluster, id);
        cfg.zone = zone.to_owned();
        cfg.advertise = format!("http://{id}.test:7540");
        cfg.flush_interval = Duration::from_millis(5);
        logstore::LogStorage::open(
            e.meta.clone(),
            objstore_memory(),
            cfg,
            Arc::new(logstore::SystemClock),
        )
    };
    let a = open("wa", "zone-a").await?;
    let b = open("wb", "zone-b").await?;
    let (members, rev) =
        catalog::membership::live_members(e.meta.as_ref(), &e.cluster, "writer").await?;
    let seen: Vec<(String, String, String)> =
        members.iter().map(|m| (m.id.clone(), m.zone.clone(), m.address.clone())).collect();
    ensure!(
        seen == [
            ("wa".to_owned(), "zone-a".to_owned(), "http://wa.test:7540".to_owned()),
            ("wb".to_owned(), "zone-b".to_owned(), "http://wb.test:7540".to_owned())
        ],
        "{seen:?}"
    );
    // A zone-a client is routed to the zone-a writer while it lives, then falls back.
    let owner =
        catalog::routing::choose_owner(&members, "id", 0, Some("zone-a")).map(|m| m.id.clone());
    ensure!(owner.as_deref() == Some("wa"));
    // The catalog routes by its watched member view: the zone's writer, in the zone's slot.
    let stream = e.catalog.create("zoned", 2, Default::default()).await?;
    let route = |e: &Env| {
        let c = e.catalog.clone();
        async move { c.route_to("zoned", catalog::Target::Partition(1), Some("zone-a")).await }
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let r = loop {
        let r = route(&e).await?;
        if r.owner.as_ref().map(|m| m.id.as_str()) == Some("wa")
            || std::time::Instant::now() > deadline
        {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    ensure!(r.slot == "zone-a" && r.log == stream.partitions[1] && r.partitions == 2, "{r:?}");
    ensure!(r.owner.map(|m| m.address) == Some("http://wa.test:7540".to_owned()));
    a.shutdown().await;
    // Once the zone has no writer, zone-a callers fall back to any writer, in the `*` slot.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = route(&e).await?;
        if r.owner.as_ref().map(|m| m.id.as_str()) == Some("wb") {
            ensure!(r.slot == "*", "{r:?}");
            break;
        }
        ensure!(std::time::Instant::now() < deadline, "the catalog still routes zone a to {r:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (members, rev2) =
        catalog::membership::live_members(e.meta.as_ref(), &e.cluster, "writer").await?;
    ensure!(rev2 > rev && members.len() == 1 && members[0].id == "wb", "{members:?}");
    let owner =
        catalog::routing::choose_owner(&members, "id", 0, Some("zone-a")).map(|m| m.id.clone());
    ensure!(owner.as_deref() == Some("wb"));
    b.shutdown().await;
    Ok(())
}

async fn retention_hard_trims_streams_by_bytes_and_by_time(e: Env) -> Result<()> {
    let mut cfg = logstore::LogStorageConfig::new(&e.cluster, "w");
    cfg.flush_interval = std::time::Duration::from_millis(5);
    let w = logstore::LogStorage::open(
        e.meta.clone(),
        e.reader.objects().clone(),
        cfg,
        Arc::new(logstore::SystemClock),
    )
    .await?;
    let by_bytes = config(&[("retention.bytes", "300")])?;
    let sized = e.catalog.create("sized", 1, by_bytes).await?.partitions[0];
    let by_time = config(&[("retention.ms", "60000")])?;
    let timed = e.catalog.create("timed", 1, by_time).await?.partitions[0];
    let kept = e.catalog.create("kept", 1, StreamConfig::default()).await?.partitions[0];
    for i in 0..10u8 {
        for log in [sized, timed, kept] {
            w.append(log, 1, bytes::Bytes::from(vec![i; 100]), None).await?;
        }
    }
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64;
    // Now: the newest 300 bytes of `sized` stay; everything of `timed` is younger than 60 s.
    let trimmed = catalog::retention::apply_all(&e.catalog, now).await?;
    ensure!(trimmed.len() == 1 && trimmed[0].log == sized && trimmed[0].start == 7, "{trimmed:?}");
    ensure!(matches!(
        e.reader.read_entries(sized, 6, 10, u64::MAX).await,
        Err(logstore::LogError::OffsetOutOfRange { .. })
    ));
    let left = e.reader.read_entries(sized, 7, 10, u64::MAX).await?;
    ensure!(left.iter().map(|x| x.payload[0]).collect::<Vec<_>>() == vec![7, 8, 9]);
    ensure!(catalog::retention::apply_all(&e.catalog, now).await?.is_empty(), "trimmed twice");
    // An hour later every entry of `timed` is past its 60 s; `kept` has no retention.
    let later = catalog::retention::apply_all(&e.catalog, now + 3_600_000).await?;
    ensure!(later.iter().any(|t| t.log == timed && t.start == 10), "{later:?}");
    ensure!(later.iter().all(|t| t.log != kept));
    ensure!(e.reader.info(kept).await?.first_offset == 0);
    w.shutdown().await;
    Ok(())
}

/// A metadata store whose writes to log heads fail while `failing` is set (etcd down between
/// the stream's transaction and its logs' deletion).
struct HeadsFail {
    inner: Arc<dyn MetadataStore>,
    failing: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for HeadsFail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeadsFail")
    }
}

#[async_trait::async_trait]
impl MetadataStore for HeadsFail {
    async fn range(
        &self,
        req: metadata::RangeRequest,
    ) -> Result<metadata::RangeResponse, metadata::MetaError> {
        self.inner.range(req).await
    }
    async fn txn(&self, txn: metadata::Txn) -> Result<metadata::TxnResponse, metadata::MetaError> {
        let head = txn
            .success
            .iter()
            .any(|op| matches!(op, metadata::TxnOp::Put { key, .. } if key.ends_with(b"/head")));
        if head && self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(metadata::MetaError::Unavailable("injected: etcd down".to_owned()));
        }
        self.inner.txn(txn).await
    }
    async fn lease_grant(
        &self,
        ttl: std::time::Duration,
    ) -> Result<metadata::LeaseId, metadata::MetaError> {
        self.inner.lease_grant(ttl).await
    }
    async fn lease_keep_alive(
        &self,
        lease: metadata::LeaseId,
    ) -> Result<std::time::Duration, metadata::MetaError> {
        self.inner.lease_keep_alive(lease).await
    }
    async fn lease_revoke(&self, lease: metadata::LeaseId) -> Result<(), metadata::MetaError> {
        self.inner.lease_revoke(lease).await
    }
    async fn watch(
        &self,
        req: metadata::WatchRequest,
    ) -> Result<metadata::WatchStream, metadata::MetaError> {
        self.inner.watch(req).await
    }
    async fn compact(&self, revision: metadata::Revision) -> Result<(), metadata::MetaError> {
        self.inner.compact(revision).await
    }
}

/// M11: a stream's deletion is crash-atomic. The store fails between the stream's transaction
/// and its logs' deletion: the stream is gone, its logs still NORMAL; the maintenance cycle's
/// `finish_deletions` then marks them DELETED (so the cleaner reclaims their objects), once,
/// and a re-created stream of the name keeps its own logs.
async fn a_deletion_cut_short_is_finished_by_the_maintenance_cycle(e: Env) -> Result<()> {
    let faulty = Arc::new(HeadsFail { inner: e.meta.clone(), failing: false.into() });
    let catalog = Catalog::new(faulty.clone(), e.reader.clone(), &e.cluster);
    let old = catalog.create("halfway", 2, StreamConfig::default()).await?;
    faulty.failing.store(true, std::sync::atomic::Ordering::SeqCst);
    catalog.delete("halfway").await?;
    ensure!(catalog.get("halfway").await.is_err(), "the stream outlived its deletion");
    for log in &old.partitions {
        ensure!(
            matches!(e.reader.info(*log).await?.state, LogState::Normal),
            "the fault did not bite"
        );
    }
    ensure!(catalog.finish_deletions().await? == 0, "finished while the store still fails");
    faulty.failing.store(false, std::sync::atomic::Ordering::SeqCst);
    let new = catalog.create("halfway", 1, StreamConfig::default()).await?;
    ensure!(catalog.finish_deletions().await? == 1);
    for log in &old.partitions {
        ensure!(
            matches!(e.reader.info(*log).await?.state, LogState::Deleted),
            "log {log} of a deleted stream lives on"
        );
    }
    ensure!(matches!(e.reader.info(new.partitions[0]).await?.state, LogState::Normal));
    ensure!(catalog.finish_deletions().await? == 0, "a finished deletion came back");
    Ok(())
}
