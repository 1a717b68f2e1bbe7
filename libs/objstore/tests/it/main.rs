//! Object-store conformance, written once and run against the local directory store and a
//! real S3 server (SeaweedFS, started by the test kit, SigV4 enforced).

use std::sync::Arc;

use anyhow::{Result, anyhow, ensure};
use bytes::Bytes;
use futures::TryStreamExt;
use objstore::object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use objstore::{Path, put_create_only};

struct Fixture {
    store: Arc<dyn ObjectStore>,
    _guard: Box<dyn std::any::Any + Send>,
}

fn s3_config(prefix: &str) -> Result<config::S3Config> {
    Ok(testkit::shared_s3()?.s3().config(prefix))
}

fn s3_fixture() -> Result<Fixture> {
    let cfg = config::ObjectStoreConfig::S3(s3_config(&testkit::unique_prefix("obj"))?);
    Ok(Fixture { store: objstore::build(&cfg)?, _guard: Box::new(()) })
}

fn local_fixture() -> Result<Fixture> {
    let dir = tempfile::tempdir()?;
    let cfg = config::ObjectStoreConfig::Local(config::LocalStoreConfig {
        path: dir.path().join("objects"),
    });
    Ok(Fixture { store: objstore::build(&cfg)?, _guard: Box::new(dir) })
}

macro_rules! conformance {
    ($backend:ident, $fixture:path; $($case:ident),* $(,)?) => {
        mod $backend {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() -> Result<()> {
                    let f = $fixture()?;
                    super::$case(f.store.clone()).await
                }
            )*
        }
    };
}

macro_rules! all_cases {
    ($backend:ident, $fixture:path) => {
        conformance!($backend, $fixture;
            put_then_get_returns_identical_bytes,
            ranged_get_returns_exactly_the_range,
            list_returns_exactly_the_prefixed_objects,
            delete_removes_the_object,
            missing_object_is_not_found,
            create_only_race_has_exactly_one_winner,
            lost_put_response_then_create_only_retry_sees_the_object,
        );
    };
}

all_cases!(local, local_fixture);
all_cases!(s3, s3_fixture);

fn pattern(len: usize, seed: u8) -> Bytes {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect::<Vec<u8>>().into()
}

async fn put_then_get_returns_identical_bytes(store: Arc<dyn ObjectStore>) -> Result<()> {
    for (name, len) in [("empty", 0), ("small", 100), ("mib", 1 << 20)] {
        let p = Path::from(format!("rt/{name}"));
        let data = pattern(len, 3);
        store.put(&p, data.clone().into()).await?;
        let got = store.get(&p).await?;
        ensure!(got.meta.size == len as u64, "{name}: size {}", got.meta.size);
        ensure!(got.bytes().await? == data, "{name}: bytes differ");
    }
    Ok(())
}

async fn ranged_get_returns_exactly_the_range(store: Arc<dyn ObjectStore>) -> Result<()> {
    let p = Path::from("range/obj");
    let data = pattern(10_000, 9);
    store.put(&p, data.clone().into()).await?;
    ensure!(store.get_range(&p, 0..1).await? == data.slice(0..1));
    ensure!(store.get_range(&p, 4096..8193).await? == data.slice(4096..8193));
    ensure!(store.get_range(&p, 9_990..10_000).await? == data.slice(9_990..10_000));
    let many = store.get_ranges(&p, &[10..20, 5000..5100, 9000..10_000]).await?;
    ensure!(many == vec![data.slice(10..20), data.slice(5000..5100), data.slice(9000..10_000)]);
    // The last bytes, from an offset, and a range past the end (cut at it): each with the
    // object's size and the range answered.
    for (range, want) in [
        (GetRange::Suffix(100), 9_900..10_000),
        (GetRange::Offset(7_000), 7_000..10_000),
        (GetRange::Bounded(9_000..20_000), 9_000..10_000),
    ] {
        let opts = GetOptions { range: Some(range.clone()), ..Default::default() };
        let got = store.get_opts(&p, opts).await?;
        ensure!(got.meta.size == 10_000 && got.range == want, "{range}: {:?}", got.range);
        let bytes = got.bytes().await?;
        ensure!(bytes == data.slice(want.start as usize..want.end as usize), "{range}: bytes");
    }
    ensure!(store.get_range(&p, 10_000..10_001).await.is_err(), "a range after the end");
    Ok(())
}

async fn list_returns_exactly_the_prefixed_objects(store: Arc<dyn ObjectStore>) -> Result<()> {
    for k in ["l/a/1", "l/a/2", "l/a/sub/3", "l/b/1", "l/ab"] {
        store.put(&Path::from(k), "x".into()).await?;
    }
    let mut keys: Vec<String> = store
        .list(Some(&Path::from("l/a")))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await?;
    keys.sort();
    ensure!(keys == ["l/a/1", "l/a/2", "l/a/sub/3"], "{keys:?}");
    let mut after: Vec<String> = store
        .list_with_offset(Some(&Path::from("l/a")), &Path::from("l/a/1"))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await?;
    after.sort();
    ensure!(after == ["l/a/2", "l/a/sub/3"], "{after:?}");
    let dirs = store.list_with_delimiter(Some(&Path::from("l"))).await?;
    let mut prefixes: Vec<String> = dirs.common_prefixes.iter().map(|p| p.to_string()).collect();
    prefixes.sort();
    ensure!(prefixes == ["l/a", "l/b"], "{prefixes:?}");
    ensure!(dirs.objects.iter().map(|m| m.location.to_string()).collect::<Vec<_>>() == ["l/ab"]);
    Ok(())
}

async fn delete_removes_the_object(store: Arc<dyn ObjectStore>) -> Result<()> {
    let p = Path::from("del/x");
    store.put(&p, "x".into()).await?;
    store.delete(&p).await?;
    match store.get(&p).await {
        Err(objstore::object_store::Error::NotFound { .. }) => Ok(()),
        other => Err(anyhow!("get after delete answered {:?}", other.map(|r| r.meta))),
    }
}

async fn missing_object_is_not_found(store: Arc<dyn ObjectStore>) -> Result<()> {
    match store.get(&Path::from("never/written")).await {
        Err(objstore::object_store::Error::NotFound { .. }) => Ok(()),
        other => Err(anyhow!("get of a missing object answered {:?}", other.map(|r| r.meta))),
    }
}

async fn create_only_race_has_exactly_one_winner(store: Arc<dyn ObjectStore>) -> Result<()> {
    const CREATORS: u8 = 16;
    for round in 0..3 {
        let p = Path::from(format!("race/{round}"));
        let mut handles = Vec::new();
        for i in 0..CREATORS {
            let (store, p) = (store.clone(), p.clone());
            handles.push(tokio::spawn(async move {
                let r = put_create_only(store.as_ref(), &p, pattern(4096, i)).await;
                (i, r)
            }));
        }
        let mut winners = Vec::new();
        for h in handles {
            match h.await? {
                (i, Ok(_)) => winners.push(i),
                (_, Err(objstore::object_store::Error::AlreadyExists { .. })) => {}
                (i, Err(e)) => return Err(anyhow!("creator {i} failed otherwise: {e}")),
            }
        }
        ensure!(winners.len() == 1, "round {round}: {} winners", winners.len());
        let got = store.get(&p).await?.bytes().await?;
        ensure!(got == pattern(4096, winners[0]), "round {round}: object is not the winner's");
    }
    Ok(())
}

/// The writer's ambiguous PUT: the object landed but the answer was lost; a create-only retry
/// must see it (and never overwrite it with other bytes).
async fn lost_put_response_then_create_only_retry_sees_the_object(
    store: Arc<dyn ObjectStore>,
) -> Result<()> {
    use objstore::faults::{FaultyStore, Op, Trigger};
    let (faulty, faults) = FaultyStore::new(store.clone());
    faults.lose_response(Op::Put, Trigger::Nth(1));
    let p = Path::from("ambiguous/wal");
    let first = put_create_only(faulty.as_ref(), &p, pattern(100, 1)).await;
    ensure!(first.is_err(), "the fault did not fire");
    match put_create_only(faulty.as_ref(), &p, pattern(100, 2)).await {
        Err(objstore::object_store::Error::AlreadyExists { .. }) => {}
        other => return Err(anyhow!("retry answered {other:?}")),
    }
    ensure!(store.get(&p).await?.bytes().await? == pattern(100, 1));
    Ok(())
}

#[tokio::test]
async fn s3_rejects_a_wrong_secret() -> Result<()> {
    let mut cfg = s3_config(&testkit::unique_prefix("auth"))?;
    cfg.secret_access_key = Some("not-the-secret".to_owned());
    let store = objstore::build(&config::ObjectStoreConfig::S3(cfg))?;
    let put = store.put(&Path::from("x"), "x".into()).await;
    let err = put.err().map(|e| e.to_string()).unwrap_or_default();
    ensure!(
        err.contains("403") || err.contains("SignatureDoesNotMatch"),
        "SigV4 not enforced? {err}"
    );
    Ok(())
}

#[tokio::test]
async fn local_store_files_land_under_the_configured_root() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("objects");
    let cfg = config::ObjectStoreConfig::Local(config::LocalStoreConfig { path: root.clone() });
    let store = objstore::build(&cfg)?;
    put_create_only(store.as_ref(), &objstore::keys::wal_object(7), Bytes::from_static(b"wal"))
        .await?;
    let file = root.join("wal/00000000000000000007.wal");
    ensure!(std::fs::read(&file)? == b"wal", "{} missing", file.display());
    Ok(())
}
