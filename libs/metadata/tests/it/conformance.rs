//! The MetadataStore conformance suite: written once, run against the embedded store and
//! against a real etcd started by the test kit. Each case states one behaviour of etcd's
//! model that Lakelog's protocol relies on (ARCHITECTURE §3–§5).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use futures::StreamExt;
use metadata::*;

/// A store to test and a key prefix no other test uses; keeps its server or files alive.
pub struct Fixture {
    pub store: Arc<dyn MetadataStore>,
    pub prefix: String,
    _guard: Box<dyn std::any::Any + Send>,
}

impl Fixture {
    fn key(&self, k: &str) -> Vec<u8> {
        format!("/{}/{k}", self.prefix).into_bytes()
    }
}

/// `own`: a server of its own, for cases that compact history (global in etcd).
pub async fn etcd_fixture(own: bool) -> Result<Fixture> {
    let (endpoint, guard): (String, Box<dyn std::any::Any + Send>) = if own {
        let etcd = testkit::Etcd::start()?;
        (etcd.endpoint().to_owned(), Box::new(etcd))
    } else {
        (testkit::shared_etcd()?.endpoint().to_owned(), Box::new(()))
    };
    let store = EtcdStore::connect(&testkit::etcd_config(&endpoint)).await?;
    Ok(Fixture { store: Arc::new(store), prefix: testkit::unique_prefix("meta"), _guard: guard })
}

pub async fn embedded_fixture(_own: bool) -> Result<Fixture> {
    let dir = tempfile::tempdir()?;
    let store = EmbeddedStore::open(&dir.path().join("meta.redb")).await?;
    Ok(Fixture {
        store: Arc::new(store),
        prefix: testkit::unique_prefix("meta"),
        _guard: Box::new(dir),
    })
}

macro_rules! conformance {
    ($backend:ident, $fixture:path) => {
        mod $backend {
            use super::*;
            conformance!(@cases $fixture;
                cas_counter_ends_with_exactly_n_increments(false),
                revisions_strictly_increase_and_track_versions(false),
                range_limit_reverse_and_keys_only(false),
                read_at_past_revision_sees_old_state(false),
                compaction_forgets_old_revisions(true),
                lease_expiry_deletes_attached_keys(false),
                lease_keep_alive_keeps_keys_and_revoke_deletes_them(false),
                put_under_unknown_lease_fails_and_writes_nothing(false),
                watch_delivers_every_change_in_order_without_gaps(false),
                watch_from_past_revision_replays_history(false),
                watch_from_compacted_revision_fails(true),
                txn_is_atomic_across_keys(false),
                failed_compare_runs_the_else_branch_only(false),
                oversize_txn_is_refused_whole(false),
                range_compare_covers_every_key_in_range(false),
                create_if_absent_succeeds_once(false),
            );
        }
    };
    (@cases $fixture:path; $($case:ident($own:expr)),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() -> Result<()> {
                let f = $fixture($own).await?;
                super::$case(&f).await
            }
        )*
    };
}

pub async fn memory_fixture(_own: bool) -> Result<Fixture> {
    Ok(Fixture {
        store: Arc::new(MemoryStore::new()),
        prefix: testkit::unique_prefix("meta"),
        _guard: Box::new(()),
    })
}

conformance!(embedded, embedded_fixture);
conformance!(memory, memory_fixture);
conformance!(etcd, etcd_fixture);

fn value_of(kv: &Option<KeyValue>) -> Option<String> {
    kv.as_ref().map(|kv| String::from_utf8_lossy(&kv.value).into_owned())
}

async fn cas_counter_ends_with_exactly_n_increments(f: &Fixture) -> Result<()> {
    const TASKS: usize = 16;
    const EACH: usize = 4;
    let key = f.key("counter");
    // Every task reads the counter before any writes it, so all but one lose their first race
    // whatever the scheduler does (a store that answers at once let tasks run one after another).
    let start = Arc::new(tokio::sync::Barrier::new(TASKS));
    let mut handles = Vec::new();
    for _ in 0..TASKS {
        let store = f.store.clone();
        let key = key.clone();
        let start = start.clone();
        handles.push(tokio::spawn(async move {
            let mut retries = 0u32;
            let mut first = true;
            for _ in 0..EACH {
                loop {
                    let cur = store.get(&key).await?;
                    if std::mem::take(&mut first) {
                        start.wait().await;
                    }
                    let (n, cmp) = match &cur {
                        None => (0u64, Compare::create_revision(key.clone(), CompareOp::Equal, 0)),
                        Some(kv) => (
                            String::from_utf8_lossy(&kv.value).parse()?,
                            Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision),
                        ),
                    };
                    let txn = Txn::new()
                        .when([cmp])
                        .and_then([TxnOp::put(key.clone(), (n + 1).to_string())]);
                    if store.txn(txn).await?.succeeded {
                        break;
                    }
                    retries += 1;
                }
            }
            anyhow::Ok(retries)
        }));
    }
    let mut retries = 0;
    for h in handles {
        retries += h.await??;
    }
    let end = f.store.get(&key).await?;
    ensure!(value_of(&end) == Some((TASKS * EACH).to_string()), "counter is {:?}", value_of(&end));
    ensure!(end.map(|kv| kv.version) == Some((TASKS * EACH) as i64));
    // Contention happened, so the compares were really exercised.
    ensure!(retries > 0, "no task ever lost a compare-and-set race");
    Ok(())
}

async fn revisions_strictly_increase_and_track_versions(f: &Fixture) -> Result<()> {
    let key = f.key("k");
    let mut last = f.store.current_revision().await?;
    let mut created = 0;
    for i in 1..=5 {
        let rev = f.store.put(&key, format!("v{i}").as_bytes(), 0).await?;
        ensure!(rev > last, "revision {rev} after {last}");
        let kv = f.store.get(&key).await?.context("key just put")?;
        ensure!(kv.mod_revision == rev && kv.version == i);
        if i == 1 {
            created = rev;
        }
        ensure!(kv.create_revision == created);
        last = rev;
    }
    ensure!(f.store.delete(KeyRange::key(key.clone())).await? == 1);
    ensure!(f.store.get(&key).await?.is_none());
    let rev = f.store.put(&key, b"again", 0).await?;
    let kv = f.store.get(&key).await?.context("re-created key")?;
    ensure!(kv.create_revision == rev && kv.version == 1, "re-created key: {kv:?}");
    // A txn that writes nothing leaves the revision alone.
    let before = f.store.current_revision().await?;
    f.store.delete(KeyRange::key(f.key("absent"))).await?;
    ensure!(f.store.current_revision().await? == before);
    Ok(())
}

async fn range_limit_reverse_and_keys_only(f: &Fixture) -> Result<()> {
    for c in ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"] {
        f.store.put(&f.key(&format!("r/{c}")), c.as_bytes(), 0).await?;
    }
    f.store.put(&f.key("rx"), b"outside", 0).await?;
    let names = |r: &RangeResponse| -> Vec<String> {
        r.kvs.iter().map(|kv| String::from_utf8_lossy(&kv.value).into_owned()).collect()
    };
    let all = f.store.range(RangeRequest::prefix(f.key("r/"))).await?;
    ensure!(names(&all) == ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"], "{:?}", names(&all));
    ensure!(all.count == 10 && !all.more);

    let first3 = f.store.range(RangeRequest::prefix(f.key("r/")).limit(3)).await?;
    ensure!(names(&first3) == ["a", "b", "c"] && first3.more && first3.count == 10);

    let last2 = f.store.range(RangeRequest::prefix(f.key("r/")).reverse().limit(2)).await?;
    ensure!(names(&last2) == ["j", "i"] && last2.more, "{:?}", names(&last2));

    let mid = f.store.range(RangeRequest::between(f.key("r/c"), f.key("r/f"))).await?;
    ensure!(names(&mid) == ["c", "d", "e"]);

    // Floor lookup, as readers find an index page: the last key ≤ x.
    let floor =
        f.store.range(RangeRequest::between(f.key("r/"), f.key("r/dz")).reverse().limit(1)).await?;
    ensure!(names(&floor) == ["d"]);

    let keys = f.store.range(RangeRequest::prefix(f.key("r/")).keys_only()).await?;
    ensure!(
        keys.kvs.len() == 10
            && keys.kvs.iter().all(|kv| kv.value.is_empty() && kv.mod_revision > 0)
    );

    let none = f.store.range(RangeRequest::prefix(f.key("nothing/"))).await?;
    ensure!(none.kvs.is_empty() && none.count == 0 && none.revision > 0);
    Ok(())
}

async fn read_at_past_revision_sees_old_state(f: &Fixture) -> Result<()> {
    let key = f.key("p");
    let r1 = f.store.put(&key, b"one", 0).await?;
    let r2 = f.store.put(&key, b"two", 0).await?;
    f.store.delete(KeyRange::key(key.clone())).await?;
    let at = |rev| f.store.range(RangeRequest::key(key.clone()).at_revision(rev));
    ensure!(value_of(&at(r1).await?.kvs.into_iter().next()) == Some("one".into()));
    ensure!(value_of(&at(r2).await?.kvs.into_iter().next()) == Some("two".into()));
    ensure!(at(0).await?.kvs.is_empty());
    ensure!(at(r1 - 1).await?.kvs.is_empty(), "key existed before it was written");
    let current = f.store.current_revision().await?;
    match at(current + 1000).await {
        Err(MetaError::FutureRevision { .. }) => {}
        other => return Err(anyhow!("future revision read answered {other:?}")),
    }
    // A prefix read at a past revision.
    let p = f.store.range(RangeRequest::prefix(f.key("")).at_revision(r1)).await?;
    ensure!(p.kvs.len() == 1 && p.kvs[0].mod_revision == r1);
    Ok(())
}

async fn compaction_forgets_old_revisions(f: &Fixture) -> Result<()> {
    let key = f.key("c");
    let r1 = f.store.put(&key, b"one", 0).await?;
    let r2 = f.store.put(&key, b"two", 0).await?;
    let gone = f.key("gone");
    f.store.put(&gone, b"x", 0).await?;
    f.store.delete(KeyRange::key(gone.clone())).await?;
    let r3 = f.store.put(&key, b"three", 0).await?;
    f.store.compact(r2).await?;
    match f.store.range(RangeRequest::key(key.clone()).at_revision(r1)).await {
        Err(MetaError::Compacted { .. }) => {}
        other => return Err(anyhow!("read below the compaction answered {other:?}")),
    }
    let at_r2 = f.store.range(RangeRequest::key(key.clone()).at_revision(r2)).await?;
    ensure!(value_of(&at_r2.kvs.into_iter().next()) == Some("two".into()));
    let at_r3 = f.store.range(RangeRequest::key(key.clone()).at_revision(r3)).await?;
    ensure!(value_of(&at_r3.kvs.into_iter().next()) == Some("three".into()));
    ensure!(f.store.range(RangeRequest::key(gone.clone()).at_revision(r3)).await?.kvs.is_empty());
    match f.store.compact(r1).await {
        Err(MetaError::Compacted { .. }) => {}
        other => return Err(anyhow!("compacting below the last compaction answered {other:?}")),
    }
    Ok(())
}

async fn wait_until_gone(
    store: &Arc<dyn MetadataStore>,
    key: &[u8],
    within: Duration,
) -> Result<Duration> {
    let start = tokio::time::Instant::now();
    while store.get(key).await?.is_some() {
        ensure!(start.elapsed() < within, "key still there after {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(start.elapsed())
}

async fn lease_expiry_deletes_attached_keys(f: &Fixture) -> Result<()> {
    let lease = f.store.lease_grant(Duration::from_secs(2)).await?;
    let key = f.key("ephemeral");
    let other = f.key("durable");
    f.store.put(&key, b"x", lease).await?;
    f.store.put(&other, b"y", 0).await?;
    ensure!(f.store.get(&key).await?.map(|kv| kv.lease) == Some(lease));
    let took = wait_until_gone(&f.store, &key, Duration::from_secs(15)).await?;
    ensure!(took >= Duration::from_millis(1500), "lease expired early, after {took:?}");
    ensure!(f.store.get(&other).await?.is_some(), "a key without the lease was deleted");
    match f.store.lease_keep_alive(lease).await {
        Err(MetaError::LeaseNotFound(_)) => Ok(()),
        other => Err(anyhow!("keep-alive of an expired lease answered {other:?}")),
    }
}

async fn lease_keep_alive_keeps_keys_and_revoke_deletes_them(f: &Fixture) -> Result<()> {
    let lease = f.store.lease_grant(Duration::from_secs(2)).await?;
    let key = f.key("kept");
    f.store.put(&key, b"x", lease).await?;
    let start = tokio::time::Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        let ttl = f.store.lease_keep_alive(lease).await?;
        ensure!(ttl >= Duration::from_secs(2), "ttl {ttl:?}");
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    ensure!(f.store.get(&key).await?.is_some(), "key expired although kept alive for 5 s");
    f.store.lease_revoke(lease).await?;
    ensure!(f.store.get(&key).await?.is_none(), "revoke left the key");
    Ok(())
}

async fn put_under_unknown_lease_fails_and_writes_nothing(f: &Fixture) -> Result<()> {
    let key = f.key("orphan");
    match f.store.put(&key, b"x", 0x7eadbeef).await {
        Err(MetaError::LeaseNotFound(_)) => {}
        other => return Err(anyhow!("put under an unknown lease answered {other:?}")),
    }
    ensure!(f.store.get(&key).await?.is_none());
    Ok(())
}

async fn watch_delivers_every_change_in_order_without_gaps(f: &Fixture) -> Result<()> {
    const WRITERS: usize = 4;
    const EACH: usize = 50;
    let start = f.store.current_revision().await? + 1;
    let mut watch = f
        .store
        .watch(WatchRequest { range: KeyRange::prefix(f.key("w/")), start_revision: start })
        .await?;
    // Writes outside the range must not show up.
    f.store.put(&f.key("x"), b"outside", 0).await?;
    let mut handles = Vec::new();
    for w in 0..WRITERS {
        let store = f.store.clone();
        let keys: Vec<Vec<u8>> = (0..EACH).map(|i| f.key(&format!("w/{w}/{}", i % 7))).collect();
        handles.push(tokio::spawn(async move {
            let mut revs = Vec::new();
            for (i, key) in keys.into_iter().enumerate() {
                if i % 5 == 4 {
                    store.delete(KeyRange::key(key)).await?;
                } else {
                    revs.push(store.put(&key, format!("{i}").as_bytes(), 0).await?);
                }
            }
            anyhow::Ok(revs)
        }));
    }
    let mut put_revs = Vec::new();
    for h in handles {
        put_revs.extend(h.await??);
    }
    // Expected final state from a read; the watch must reproduce it exactly.
    let expected: BTreeMap<Vec<u8>, Vec<u8>> = f
        .store
        .range(RangeRequest::prefix(f.key("w/")))
        .await?
        .kvs
        .into_iter()
        .map(|kv| (kv.key, kv.value))
        .collect();
    let end = f.store.current_revision().await?;
    let mut seen: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut last_rev = 0;
    let mut seen_revs = Vec::new();
    while last_rev < end {
        let batch = tokio::time::timeout(Duration::from_secs(10), watch.next())
            .await
            .context("watch stalled")?
            .context("watch ended")??;
        for ev in batch {
            ensure!(ev.kv.key.starts_with(&f.key("w/")), "event outside the range");
            ensure!(
                ev.kv.mod_revision >= last_rev,
                "revision went back: {} after {last_rev}",
                ev.kv.mod_revision
            );
            last_rev = ev.kv.mod_revision;
            match ev.kind {
                EventKind::Put => {
                    seen_revs.push(ev.kv.mod_revision);
                    seen.insert(ev.kv.key, ev.kv.value);
                }
                EventKind::Delete => {
                    seen.remove(&ev.kv.key);
                }
            }
        }
        if seen == expected && put_revs.iter().all(|r| seen_revs.contains(r)) {
            break;
        }
    }
    put_revs.sort_unstable();
    seen_revs.sort_unstable();
    ensure!(seen_revs == put_revs, "watch missed or invented puts");
    ensure!(seen == expected, "state rebuilt from the watch differs from a read");
    Ok(())
}

async fn watch_from_past_revision_replays_history(f: &Fixture) -> Result<()> {
    let k = f.key("h/a");
    let r1 = f.store.put(&k, b"1", 0).await?;
    f.store.put(&k, b"2", 0).await?;
    f.store.delete(KeyRange::key(k.clone())).await?;
    let mut watch = f
        .store
        .watch(WatchRequest { range: KeyRange::prefix(f.key("h/")), start_revision: r1 })
        .await?;
    let mut events = Vec::new();
    while events.len() < 3 {
        let batch = tokio::time::timeout(Duration::from_secs(10), watch.next())
            .await
            .context("watch stalled")?
            .context("watch ended")??;
        events.extend(batch);
    }
    let kinds: Vec<(EventKind, Vec<u8>)> =
        events.into_iter().map(|e| (e.kind, e.kv.value)).collect();
    ensure!(
        kinds
            == vec![
                (EventKind::Put, b"1".to_vec()),
                (EventKind::Put, b"2".to_vec()),
                (EventKind::Delete, vec![])
            ],
        "{kinds:?}"
    );
    Ok(())
}

async fn watch_from_compacted_revision_fails(f: &Fixture) -> Result<()> {
    let k = f.key("wc");
    let r1 = f.store.put(&k, b"1", 0).await?;
    let r2 = f.store.put(&k, b"2", 0).await?;
    f.store.put(&k, b"3", 0).await?;
    f.store.compact(r2).await?;
    let req = WatchRequest { range: KeyRange::key(k.clone()), start_revision: r1 };
    match f.store.watch(req).await {
        Err(MetaError::Compacted { .. }) => Ok(()),
        Err(e) => Err(anyhow!("watch from a compacted revision failed otherwise: {e}")),
        Ok(mut s) => match tokio::time::timeout(Duration::from_secs(5), s.next()).await {
            Ok(Some(Err(MetaError::Compacted { .. }))) => Ok(()),
            other => Err(anyhow!("watch from a compacted revision answered {other:?}")),
        },
    }
}

async fn txn_is_atomic_across_keys(f: &Fixture) -> Result<()> {
    // Concurrent transfers between two accounts: every txn moves one unit with compares on
    // both keys; the total never changes and no transfer is lost.
    const TASKS: usize = 8;
    const EACH: usize = 5;
    let (a, b) = (f.key("acct/a"), f.key("acct/b"));
    f.store
        .txn(Txn::new().and_then([TxnOp::put(a.clone(), "100"), TxnOp::put(b.clone(), "0")]))
        .await?;
    let mut handles = Vec::new();
    for _ in 0..TASKS {
        let (store, a, b) = (f.store.clone(), a.clone(), b.clone());
        handles.push(tokio::spawn(async move {
            for _ in 0..EACH {
                loop {
                    let r = store.range(RangeRequest::prefix(a[..a.len() - 1].to_vec())).await?;
                    let get =
                        |k: &[u8]| r.kvs.iter().find(|kv| kv.key == k).cloned().context("account");
                    let (ka, kb) = (get(&a)?, get(&b)?);
                    let va: i64 = String::from_utf8_lossy(&ka.value).parse()?;
                    let vb: i64 = String::from_utf8_lossy(&kb.value).parse()?;
                    let txn = Txn::new()
                        .when([
                            Compare::mod_revision(a.clone(), CompareOp::Equal, ka.mod_revision),
                            Compare::mod_revision(b.clone(), CompareOp::Equal, kb.mod_revision),
                        ])
                        .and_then([
                            TxnOp::put(a.clone(), (va - 1).to_string()),
                            TxnOp::put(b.clone(), (vb + 1).to_string()),
                        ]);
                    let resp = store.txn(txn).await?;
                    if resp.succeeded {
                        break;
                    }
                }
            }
            anyhow::Ok(())
        }));
    }
    for h in handles {
        h.await??;
    }
    let (va, vb) = (f.store.get(&a).await?, f.store.get(&b).await?);
    ensure!(value_of(&va) == Some((100 - TASKS * EACH).to_string()));
    ensure!(value_of(&vb) == Some((TASKS * EACH).to_string()));
    // Both keys of one txn carry the same revision.
    let resp = f
        .store
        .txn(Txn::new().and_then([TxnOp::put(a.clone(), "x"), TxnOp::put(b.clone(), "y")]))
        .await?;
    let (ka, kb) = (f.store.get(&a).await?.context("a")?, f.store.get(&b).await?.context("b")?);
    ensure!(ka.mod_revision == resp.revision && kb.mod_revision == resp.revision);
    Ok(())
}

async fn failed_compare_runs_the_else_branch_only(f: &Fixture) -> Result<()> {
    let (a, b, c) = (f.key("e/a"), f.key("e/b"), f.key("e/c"));
    f.store.put(&a, b"old", 0).await?;
    let txn = Txn::new()
        .when([Compare::value(a.clone(), CompareOp::Equal, "new")])
        .and_then([TxnOp::put(b.clone(), "then"), TxnOp::put(c.clone(), "then")])
        .or_else([TxnOp::get(RangeRequest::key(a.clone())), TxnOp::put(c.clone(), "else")]);
    let resp = f.store.txn(txn).await?;
    ensure!(!resp.succeeded);
    ensure!(f.store.get(&b).await?.is_none(), "then-branch ran");
    ensure!(value_of(&f.store.get(&c).await?) == Some("else".into()));
    match resp.results.first() {
        Some(OpResult::Get(g)) => ensure!(value_of(&g.kvs.first().cloned()) == Some("old".into())),
        other => return Err(anyhow!("first result {other:?}")),
    }
    // Reads inside a txn see its earlier writes.
    let txn = Txn::new()
        .and_then([TxnOp::put(b.clone(), "fresh"), TxnOp::get(RangeRequest::key(b.clone()))]);
    let resp = f.store.txn(txn).await?;
    match resp.results.get(1) {
        Some(OpResult::Get(g)) => {
            ensure!(value_of(&g.kvs.first().cloned()) == Some("fresh".into()))
        }
        other => return Err(anyhow!("second result {other:?}")),
    }
    Ok(())
}

async fn oversize_txn_is_refused_whole(f: &Fixture) -> Result<()> {
    let too_many =
        Txn::new().and_then((0..=MAX_TXN_OPS).map(|i| TxnOp::put(f.key(&format!("big/{i}")), "v")));
    match f.store.txn(too_many).await {
        Err(MetaError::InvalidArgument(m)) => ensure!(m.contains("129"), "{m}"),
        other => return Err(anyhow!("oversize txn answered {other:?}")),
    }
    ensure!(
        f.store.range(RangeRequest::prefix(f.key("big/"))).await?.count == 0,
        "part of a refused txn applied"
    );
    let max =
        Txn::new().and_then((0..MAX_TXN_OPS).map(|i| TxnOp::put(f.key(&format!("big/{i}")), "v")));
    f.store.txn(max).await?;
    ensure!(f.store.range(RangeRequest::prefix(f.key("big/"))).await?.count == MAX_TXN_OPS as i64);
    let dup = Txn::new().and_then([TxnOp::put(f.key("d"), "1"), TxnOp::put(f.key("d"), "2")]);
    ensure!(matches!(f.store.txn(dup).await, Err(MetaError::InvalidArgument(_))));
    Ok(())
}

async fn range_compare_covers_every_key_in_range(f: &Fixture) -> Result<()> {
    // The compactor's swap compares mod_revision over index/[a, b) (ARCHITECTURE §5).
    for i in 0..3 {
        f.store.put(&f.key(&format!("idx/{i}")), b"v", 0).await?;
    }
    let read_at = f.store.current_revision().await?;
    let guarded = |rev| {
        Txn::new()
            .when([Compare::mod_revision(f.key("idx/"), CompareOp::Less, rev + 1)
                .with_range_end(prefix_end(&f.key("idx/")))])
            .and_then([TxnOp::put(f.key("swapped"), "yes")])
    };
    ensure!(
        f.store.txn(guarded(read_at)).await?.succeeded,
        "nothing changed, yet the range compare failed"
    );
    f.store.put(&f.key("idx/1"), b"changed", 0).await?;
    ensure!(
        !f.store.txn(guarded(read_at)).await?.succeeded,
        "a put inside the range passed the compare"
    );
    // An empty range compares as a missing key.
    let empty = Txn::new().when([Compare::version(f.key("none/"), CompareOp::Equal, 0)
        .with_range_end(prefix_end(&f.key("none/")))]);
    ensure!(f.store.txn(empty).await?.succeeded);
    Ok(())
}

async fn create_if_absent_succeeds_once(f: &Fixture) -> Result<()> {
    let key = f.key("member");
    let mut winners = 0;
    let mut handles = Vec::new();
    for i in 0..8 {
        let (store, key) = (f.store.clone(), key.clone());
        handles.push(tokio::spawn(async move {
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key, format!("{i}"))]);
            anyhow::Ok(store.txn(txn).await?.succeeded)
        }));
    }
    for h in handles {
        winners += usize::from(h.await??);
    }
    ensure!(winners == 1, "{winners} creators won");
    Ok(())
}
