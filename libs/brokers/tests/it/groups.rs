//! Consumer groups' durable part in the metadata store: a coordinator's tenure fences every
//! write of the group, a coordinator with a trailing member view does not take a group back,
//! a deleted (or expired) group leaves no key behind, and listing groups or a group's offsets
//! costs reads independent of the partitions in the cluster.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use anyhow::{Result, anyhow, ensure};
use brokers::LogBroker;
use catalog::Catalog;
use kafka::{GroupOffsets, OffsetCommit, Tenure};
use logstore::LogStorage;
use metadata::counting::CountingMeta;
use metadata::{MetadataStore, RangeRequest};
use objstore::object_store::ObjectStore;

const CLUSTER: &str = "g";
const NOT_COORDINATOR: i16 = kafka::groups::errors::NOT_COORDINATOR;

async fn writer(
    meta: &Arc<dyn MetadataStore>,
    objects: &Arc<dyn ObjectStore>,
    id: &str,
) -> Result<(LogStorage, LogBroker)> {
    crate::writer(meta, objects, CLUSTER, id).await
}

fn offsets(topic: &str, partitions: i32, offset: i64) -> Vec<OffsetCommit> {
    (0..partitions)
        .map(|p| OffsetCommit {
            topic: topic.to_owned(),
            partition: p,
            offset,
            leader_epoch: 3,
            metadata: Some(format!("m{p}")),
        })
        .collect()
}

/// Two writers `wa` and `wb` on fresh in-memory stores, with topic `t` of 2 partitions.
async fn two_writers() -> Result<(Arc<dyn MetadataStore>, [(LogStorage, LogBroker); 2])> {
    let meta: Arc<dyn MetadataStore> = Arc::new(metadata::MemoryStore::new());
    let objects: Arc<dyn ObjectStore> = Arc::new(objstore::object_store::memory::InMemory::new());
    let a = writer(&meta, &objects, "wa").await?;
    let b = writer(&meta, &objects, "wb").await?;
    Catalog::new(meta.clone(), a.0.reader().clone(), CLUSTER)
        .create("t", 2, Default::default())
        .await?;
    Ok((meta, [a, b]))
}

/// Keys under `/g/<prefix>` whose key contains `part`.
async fn keys(meta: &Arc<dyn MetadataStore>, prefix: &str, part: &str) -> Result<usize> {
    let r = meta.range(RangeRequest::prefix(format!("/{CLUSTER}/{prefix}")).keys_only()).await?;
    Ok(r.kvs.iter().filter(|kv| String::from_utf8_lossy(&kv.key).contains(part)).count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_groups_old_coordinator_writes_nothing_and_does_not_take_it_back() -> Result<()> {
    let (_, [(wa, a), (wb, b)]) = two_writers().await?;
    let ta = a.take_group("app", 10, None).await.map_err(|r| anyhow!("{r:?}"))?;
    ensure!(!ta.kept && ta.state.is_none());
    ensure!(a.commit_offsets("app", ta.tenure, offsets("t", 2, 7)).await.iter().all(Result::is_ok));
    a.store_group("app", ta.tenure, bytes::Bytes::from_static(b"state-a"))
        .await
        .map_err(|r| anyhow!("{r:?}"))?;
    // Held, same view: kept, nothing written.
    let again = a.take_group("app", 10, Some(ta.tenure)).await.map_err(|r| anyhow!("{r:?}"))?;
    ensure!(again.kept && again.tenure == ta.tenure);
    // B, from a newer member view, takes it: it gets A's stored state, and A is fenced.
    let tb = b.take_group("app", 11, None).await.map_err(|r| anyhow!("{r:?}"))?;
    ensure!(tb.state.as_deref() == Some(b"state-a".as_slice()), "{tb:?}");
    let stale = a.commit_offsets("app", ta.tenure, offsets("t", 2, 3)).await;
    ensure!(
        stale.iter().all(|r| r.as_ref().is_err_and(|e| e.code == NOT_COORDINATOR)),
        "{stale:?}"
    );
    let refused = a.store_group("app", ta.tenure, bytes::Bytes::from_static(b"old")).await;
    ensure!(refused.is_err_and(|e| e.code == NOT_COORDINATOR));
    ensure!(a.delete_group("app", ta.tenure).await.is_err_and(|e| e.code == NOT_COORDINATOR));
    // A's view trails B's: it does not take the group back.
    let back = a.take_group("app", 10, Some(ta.tenure)).await;
    ensure!(back.is_err_and(|e| e.code == NOT_COORDINATOR));
    // The offsets are B's tenure's and A's commit never landed.
    let got = b.committed_offsets("app", None).await.map_err(|r| anyhow!("{r:?}"))?;
    let seen: Vec<(i32, i64, i32, Option<String>)> =
        got.iter().map(|o| (o.partition, o.offset, o.leader_epoch, o.metadata.clone())).collect();
    ensure!(seen == [(0, 7, 3, Some("m0".into())), (1, 7, 3, Some("m1".into()))], "{seen:?}");
    // Any offset is taken, past the log's end included (Kafka holds none against it).
    ensure!(b.commit_offsets("app", tb.tenure, offsets("t", 1, 1 << 40)).await[0].is_ok());
    // A tenure that never was: refused.
    ensure!(b.commit_offsets("app", Tenure(1), offsets("t", 1, 1)).await[0].is_err());
    wa.shutdown().await;
    wb.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_are_listed_read_and_deleted_without_a_scan_and_leave_no_key() -> Result<()> {
    let (counting, c) = CountingMeta::new(Arc::new(metadata::MemoryStore::new()));
    let meta: Arc<dyn MetadataStore> = counting;
    let objects: Arc<dyn ObjectStore> = Arc::new(objstore::object_store::memory::InMemory::new());
    let (w, b) = writer(&meta, &objects, "w").await?;
    let catalog = Catalog::new(meta.clone(), w.reader().clone(), CLUSTER).with_followed_streams();
    catalog.create("big", 50, Default::default()).await?;
    catalog.create("other", 200, Default::default()).await?;
    let mut tenures = Vec::new();
    for g in 0..10 {
        let name = format!("g{g}");
        let t = b.take_group(&name, 1, None).await.map_err(|r| anyhow!("{r:?}"))?.tenure;
        b.store_group(&name, t, bytes::Bytes::from_static(b"x"))
            .await
            .map_err(|r| anyhow!("{r:?}"))?;
        let out = b.commit_offsets(&name, t, offsets("big", 50, 9)).await;
        ensure!(out.iter().all(Result::is_ok), "{out:?}");
        tenures.push((name, t));
    }
    ensure!(keys(&meta, "logs/", "/cursors/kafka.g").await? == 500);
    ensure!(keys(&meta, "kafka/groups/offsets/", "").await? == 500);
    // Listing the groups: one read, whatever the 250 partitions.
    let before = c.reads.load(Relaxed);
    let listed = b.stored_groups().await.map_err(|r| anyhow!("{r:?}"))?;
    ensure!(listed.len() == 10 && c.reads.load(Relaxed) - before == 1);
    // A group's offsets: its index, then its cursors in one batched read.
    let before = c.reads.load(Relaxed);
    let all = b.committed_offsets("g3", None).await.map_err(|r| anyhow!("{r:?}"))?;
    ensure!(all.len() == 50 && all.iter().all(|o| o.offset == 9));
    let reads = c.reads.load(Relaxed) - before;
    ensure!(reads <= 2, "OffsetFetch of all cost {reads} reads");
    for (name, t) in &tenures {
        ensure!(b.delete_group(name, *t).await.map_err(|r| anyhow!("{r:?}"))?);
    }
    ensure!(keys(&meta, "logs/", "/cursors/kafka.").await? == 0);
    ensure!(keys(&meta, "kafka/groups/", "").await? == 0);
    // Deleting what is gone: nothing was there.
    let t = b.take_group("g0", 1, None).await.map_err(|r| anyhow!("{r:?}"))?.tenure;
    ensure!(!b.delete_group("g0", t).await.map_err(|r| anyhow!("{r:?}"))?);
    w.shutdown().await;
    Ok(())
}

/// A group a client only asked about (DescribeGroups or OffsetFetch of a group that never
/// existed) is taken to answer it; once let go, its coordinator record goes too. A group
/// with a stored state, and a record another coordinator has taken since, stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_only_asked_about_leaves_no_coordinator_record_once_let_go() -> Result<()> {
    let (meta, [(wa, a), (wb, b)]) = two_writers().await?;
    let t0 = std::time::Instant::now();
    let groups = kafka::groups::Groups::new(Duration::ZERO);
    let held = |g: &'static str| {
        let (groups, a) = (&groups, &a);
        async move { groups.hold(g, 1, a, t0).await.map_err(|c| anyhow!("{g}: {c}")) }
    };
    held("ghost").await?;
    held("moved").await?;
    let formed = held("formed").await?;
    ensure!(a.commit_offsets("formed", formed, offsets("t", 2, 4)).await.iter().all(Result::is_ok));
    groups.ensure_stored("formed", &a).await;
    // Another coordinator, from a newer view, takes "moved" meanwhile.
    b.take_group("moved", 2, None).await.map_err(|r| anyhow!("{r:?}"))?;
    ensure!(keys(&meta, "kafka/groups/coordinators/", "").await? == 3);
    groups.tick(t0 + Duration::from_secs(61));
    groups.store_changed(&a).await;
    ensure!(groups.tenure("ghost").is_none(), "ghost is still held");
    let left = keys(&meta, "kafka/groups/coordinators/", "").await?;
    ensure!(keys(&meta, "kafka/groups/coordinators/", "ghost").await? == 0, "ghost's record left");
    ensure!(left == 2, "{left} records: formed's and moved's stay");
    wa.shutdown().await;
    wb.shutdown().await;
    Ok(())
}

/// A group's configs set through one writer are what another answers once its watch brings
/// them (and what the setter answers at once); asking for them after the first time reads
/// nothing from the store, however often (a consumer group asks at every heartbeat). Set back
/// to the defaults, the group's key goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_configs_are_followed_by_every_writer_and_asked_for_without_a_read() -> Result<()> {
    let (counting, c) = CountingMeta::new(Arc::new(metadata::MemoryStore::new()));
    let meta: Arc<dyn MetadataStore> = counting;
    let objects: Arc<dyn ObjectStore> = Arc::new(objstore::object_store::memory::InMemory::new());
    let (wa, a) = writer(&meta, &objects, "wa").await?;
    let (wb, b) = writer(&meta, &objects, "wb").await?;
    let session = |c: &kafka::GroupConfig| c.consumer_session_timeout();
    let asked = b.group_config("app").await.map_err(|r| anyhow!("{r:?}"))?;
    ensure!(asked.is_empty(), "none set: {asked:?}");
    let fifty = kafka::GroupConfig::from_pairs([("consumer.session.timeout.ms", "50000")])?;
    a.set_group_config("app", fifty.clone(), true).await.map_err(|r| anyhow!("{r:?}"))?;
    ensure!(keys(&meta, "kafka/groups/configs/", "").await? == 0, "validate_only wrote");
    a.set_group_config("app", fifty, false).await.map_err(|r| anyhow!("{r:?}"))?;
    let at_a = a.group_config("app").await.map_err(|r| anyhow!("{r:?}"))?;
    ensure!(session(&at_a) == Some(Duration::from_secs(50)), "the setter: {at_a:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while session(&b.group_config("app").await.map_err(|r| anyhow!("{r:?}"))?).is_none() {
        ensure!(tokio::time::Instant::now() < deadline, "wb never followed the change");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Each follower watches again once it has read the change.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (reads, watches) = (c.reads.load(Relaxed), c.watches.load(Relaxed));
    for _ in 0..1000 {
        let other = b.group_config("other").await.map_err(|r| anyhow!("{r:?}"))?;
        ensure!(other.is_empty());
        b.group_config("app").await.map_err(|r| anyhow!("{r:?}"))?;
    }
    let cost = (c.reads.load(Relaxed) - reads, c.watches.load(Relaxed) - watches);
    ensure!(cost == (0, 0), "2,000 asks cost {cost:?} reads and watches");
    let long = "g".repeat(200);
    let bad = a.set_group_config(&long, kafka::GroupConfig::default(), false).await;
    ensure!(bad.is_err_and(|r| r.code == 24), "INVALID_GROUP_ID: too long to name a key");
    a.set_group_config("app", kafka::GroupConfig::default(), false)
        .await
        .map_err(|r| anyhow!("{r:?}"))?;
    ensure!(keys(&meta, "kafka/groups/configs/", "").await? == 0, "the defaults: no key");
    ensure!(a.group_config("app").await.map_err(|r| anyhow!("{r:?}"))?.is_empty());
    wa.shutdown().await;
    wb.shutdown().await;
    Ok(())
}
