//! The compactor role over real stores (the embedded metadata store, a local object
//! directory behind a fault-injecting wrapper), served by the role runner on a real port:
//! CompactNow and Status over gRPC, and a drain that waits for the cycle under way and leaves
//! no claim behind.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use logstore::{LogId, LogStorage, SystemClock};
use metadata::MetadataStore;
use objstore::faults::{FaultHandle, FaultyStore, Op};
use objstore::object_store::ObjectStore;

const CLUSTER: &str = "compactor-it";

struct Stores {
    _dir: tempfile::TempDir,
    meta: Arc<dyn MetadataStore>,
    objects: Arc<dyn ObjectStore>,
    faults: FaultHandle,
}

async fn stores() -> Result<Stores> {
    let dir = tempfile::tempdir()?;
    let meta = metadata::open(&config::MetadataConfig::Embedded(config::EmbeddedConfig {
        path: dir.path().join("meta.redb"),
    }))
    .await?;
    let local = objstore::build(&config::ObjectStoreConfig::Local(config::LocalStoreConfig {
        path: dir.path().join("objects"),
    }))?;
    let (faulty, faults) = FaultyStore::new(local);
    Ok(Stores { _dir: dir, meta, objects: faulty, faults })
}

/// A writer and a log of `n` entries, one WAL chunk each.
async fn filled(s: &Stores, n: u64) -> Result<(LogStorage, LogId)> {
    let mut cfg = logstore::LogStorageConfig::new(CLUSTER, "w1");
    cfg.flush_interval = Duration::from_millis(5);
    let w = LogStorage::open(s.meta.clone(), s.objects.clone(), cfg, Arc::new(SystemClock)).await?;
    let log = w.create_log().await?;
    for i in 0..n {
        w.append(log, 1, bytes::Bytes::from(format!("e{i}")), None).await?;
    }
    Ok((w, log))
}

/// A compactor role serving on a free port; `stop` drains it; `served` ends with the role.
struct Running {
    endpoint: String,
    stop: tokio::sync::oneshot::Sender<()>,
    served: tokio::task::JoinHandle<Result<(), role::RoleError>>,
}

async fn compactor(s: &Stores, interval: Duration) -> Result<Running> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let endpoint = format!("http://{}", listener.local_addr()?);
    let mut role = role::Role::from_parts(
        "compactor",
        CLUSTER,
        Some(listener),
        s.meta.clone(),
        s.objects.clone(),
    );
    let catalog = catalog::Catalog::new(s.meta.clone(), role.reader(), CLUSTER);
    let m = config::MaintenanceSection {
        interval: config::Duration(interval),
        min_chunks: 8,
        ..Default::default()
    };
    let base_uri = "memory://".to_owned();
    compactor::install(&mut role, catalog, "compactor-under-test".to_owned(), &m, base_uri);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(role.serve(
        async move {
            let _ = stopped.await;
        },
        async {},
    ));
    Ok(Running { endpoint, stop, served })
}

async fn claims(s: &Stores) -> Result<Vec<(LogId, String)>> {
    let keys = logstore::keys::Keys::new(CLUSTER);
    Ok(maintenance::compactor::claims(s.meta.as_ref(), &keys).await?.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_now_over_grpc_compacts_one_log_and_status_reports_the_cycle() -> Result<()> {
    let s = stores().await?;
    let (w, log) = filled(&s, 20).await?;
    let other = w.create_log().await?;
    // The scheduled cycle never comes in this test: every compaction seen is CompactNow's.
    let c = compactor(&s, Duration::from_secs(3600)).await?;
    let api = client::CompactorClient::connect(&c.endpoint).await?;

    let before = api.status().await?;
    ensure!(before.cycles == 0 && before.last_cycle.is_none(), "{before:?}");
    ensure!(before.min_chunks == 8 && before.compactor_id == "compactor-under-test", "{before:?}");

    let cycle = api.compact_now(Some(log.0), None).await?;
    ensure!(cycle.on_demand && cycle.error.is_empty(), "{cycle:?}");
    let [done] = cycle.compacted.as_slice() else { anyhow::bail!("one log compacted: {cycle:?}") };
    ensure!(done.log_id == log.0 && done.first_offset == 0 && done.chunks >= 8, "{done:?}");
    // Only the log asked for: the other one was not looked at, and retention did not run.
    ensure!(cycle.skipped.iter().all(|k| k.log_id != other.0), "{cycle:?}");
    let index = w.read_index_range(log, 0, 1).await?;
    let first = index.first().context("an index entry")?;
    ensure!(first.object.as_ref().starts_with("compacted/"), "still WAL: {}", first.object);

    let after = api.status().await?;
    ensure!(after.cycles == 1, "{after:?}");
    let last = after.last_cycle.context("a last cycle")?;
    ensure!(last.on_demand && last.compacted.len() == 1, "{last:?}");
    ensure!(after.claims.is_empty(), "a claim outlived its cycle: {:?}", after.claims);

    // Nothing left to compact: the next cycle says why it skipped the log.
    let again = api.compact_now(Some(log.0), Some(1)).await?;
    ensure!(again.compacted.is_empty(), "{again:?}");
    ensure!(again.skipped.iter().any(|k| k.log_id == log.0 && k.reason == "too_few"), "{again:?}");
    let zero = api.compact_now(None, Some(0)).await.err().context("min_chunks 0 accepted")?;
    ensure!(zero.code == client::Code::InvalidArgument, "{zero:?}");

    let _ = c.stop.send(());
    c.served.await??;
    w.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_mid_cycle_waits_for_the_cycle_and_leaves_no_claim() -> Result<()> {
    let s = stores().await?;
    let (w, log) = filled(&s, 20).await?;
    // Every object GET takes a second: the cycle reading the log's chunks is slow.
    s.faults.delay(Op::Get, Duration::from_secs(1));
    let c = compactor(&s, Duration::from_millis(100)).await?;
    // The scheduled cycle is under way once it holds the log's claim.
    let start = Instant::now();
    while claims(&s).await?.is_empty() {
        ensure!(start.elapsed() < Duration::from_secs(20), "no cycle claimed the log");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let claimed_at = Instant::now();
    let _ = c.stop.send(());
    c.served.await??;
    let drained_after = claimed_at.elapsed();
    // The drain waited for the cycle: it ran to its swap (the log now starts in a segment)
    // and released its claim; it did not return while the claim was held.
    ensure!(claims(&s).await?.is_empty(), "the drain left a claim: {:?}", claims(&s).await?);
    s.faults.clear();
    let index = w.read_index_range(log, 0, 1).await?;
    let first = index.first().context("an index entry")?;
    ensure!(
        first.object.as_ref().starts_with("compacted/"),
        "the cycle under way was cut off ({drained_after:?} after its claim): {}",
        first.object
    );
    w.shutdown().await;
    Ok(())
}
