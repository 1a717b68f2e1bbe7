//! The WAL cleaner against both environments (ARCHITECTURE §5, invariant 4): the cutoff read at
//! one revision, deletion only below it and past the grace period, a live writer's uncommitted
//! upload never reclaimed, and the metadata history compacted.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use bytes::Bytes;
use logstore::keys::{Keys, parse_u64};
use logstore::{LogId, LogStorage, SystemClock};
use maintenance::cleaner::{Cleaner, Holder, read_cutoff};
use objstore::object_store::ObjectStoreExt;

use crate::env::Env;

both_envs!(
    cleaner_deletes_only_below_the_cutoff_and_past_the_grace_period,
    a_live_writers_uncommitted_upload_is_never_reclaimed,
    cleaner_compacts_the_metadata_history,
    a_cycle_deletes_in_batches_and_streams_its_listing,
);

fn cleaner(env: &Env, grace: Duration) -> Cleaner {
    let mut c =
        Cleaner::new(env.meta.clone(), env.objects.clone(), &env.cluster, Arc::new(SystemClock));
    c.grace = grace;
    c.history = None;
    c
}

/// The WAL sequences of the objects holding a log's entries.
async fn objects_of(w: &LogStorage, log: LogId) -> Result<Vec<u64>> {
    let mut seqs: Vec<u64> = w
        .read_index_range(log, 0, 10_000)
        .await?
        .iter()
        .map(|i| objstore::keys::parse_wal_object(&i.object).context("not a WAL object"))
        .collect::<Result<_>>()?;
    seqs.dedup();
    Ok(seqs)
}

async fn exists(env: &Env, seq: u64) -> Result<bool> {
    match env.objects.head(&objstore::keys::wal_object(seq)).await {
        Ok(_) => Ok(true),
        Err(objstore::object_store::Error::NotFound { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

async fn cleaner_deletes_only_below_the_cutoff_and_past_the_grace_period(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let a = w.create_log().await?;
    for i in 0..3 {
        w.append(a, 1, Bytes::from(format!("a{i}")), None).await?;
    }
    let b = w.create_log().await?;
    w.append(b, 1, Bytes::from_static(b"b0"), None).await?;
    let (a_objects, b_objects) = (objects_of(&w, a).await?, objects_of(&w, b).await?);
    ensure!(!a_objects.is_empty() && a_objects.iter().all(|s| !b_objects.contains(s)));

    // Log a's floor holds the cutoff at or below its first object: nothing is deleted.
    let cut = read_cutoff(env.meta.as_ref(), &Keys::new(&env.cluster)).await?;
    ensure!(
        cut.cutoff <= a_objects[0],
        "cutoff {} above a live chunk {}",
        cut.cutoff,
        a_objects[0]
    );
    let (holders, rise) = cut.held_by();
    ensure!(holders.contains(&&Holder::Log(a)), "held by {holders:?}");
    ensure!(rise.is_some_and(|r| r > 0), "without a the cutoff would rise by {rise:?}");
    // The lag spans at least a's objects and b's: handed out, not reclaimable.
    let next = cut.inputs.iter().find(|(h, _)| *h == Holder::NextSeq).map(|(_, s)| *s);
    ensure!(
        next.is_some_and(|n| cut.lag() == n - cut.cutoff)
            && cut.lag() > b_objects[0] - a_objects[0],
        "lag {} of {cut:?}",
        cut.lag()
    );
    let r = cleaner(&env, Duration::ZERO).cycle().await?;
    ensure!(r.deleted == 0, "deleted {} objects of live logs", r.deleted);
    ensure!(w.read_entries(a, 0, 100, u64::MAX).await?.len() == 3);

    // Deleting a lets the cutoff pass its objects up to b's floor (b was created after them;
    // only compaction moves a floor); a long grace period still keeps them.
    w.delete_log(a).await?;
    let r = cleaner(&env, Duration::from_secs(3600)).cycle().await?;
    let below: Vec<u64> = a_objects.iter().copied().filter(|s| *s < r.cutoff.cutoff).collect();
    ensure!(
        !below.is_empty(),
        "the cutoff {:?} passed none of a's objects {a_objects:?}",
        r.cutoff
    );
    ensure!(r.cutoff.held_by().0.contains(&&Holder::Log(b)), "{:?}", r.cutoff);
    ensure!(r.deleted == 0 && r.young == below.len() as u64, "{r:?}");
    let r = cleaner(&env, Duration::ZERO).cycle().await?;
    ensure!(r.deleted == below.len() as u64, "{r:?}");
    for s in a_objects.iter().chain(&b_objects) {
        let gone = !exists(&env, *s).await?;
        ensure!(gone == below.contains(s), "object {s}: gone {gone}, below the cutoff {below:?}");
    }
    let left = w.read_entries(b, 0, 100, u64::MAX).await?;
    ensure!(left.len() == 1 && left[0].payload == Bytes::from_static(b"b0"));
    w.shutdown().await;
    Ok(())
}

async fn a_live_writers_uncommitted_upload_is_never_reclaimed(env: Env) -> Result<()> {
    let keys = Keys::new(&env.cluster);
    let w = env.writer("w").await?;
    let mark = env.meta.get(&keys.low_water("w")).await?.context("no low-water mark")?;
    let seq = parse_u64(&mark.value).context("mark")?;
    // An upload of the writer's stalled past the grace period, its commit still to come.
    env.objects
        .put(&objstore::keys::wal_object(seq), Bytes::from_static(b"stalled").into())
        .await?;
    let mut c = cleaner(&env, Duration::ZERO);
    for _ in 0..3 {
        let r = c.cycle().await?;
        ensure!(
            r.cutoff.cutoff <= seq,
            "cutoff {} passed a live writer's mark {seq}",
            r.cutoff.cutoff
        );
        ensure!(exists(&env, seq).await?, "the stalled upload was deleted while its writer lives");
    }
    // Its writer gone (lease ended), nothing can commit it: the next cycle reclaims it.
    let member = env.meta.get(&keys.member("writer", "w")).await?.context("not registered")?;
    w.abort();
    env.meta.lease_revoke(member.lease).await?;
    let r = c.cycle().await?;
    ensure!(r.cutoff.cutoff > seq && !exists(&env, seq).await?, "{r:?}");
    Ok(())
}

async fn cleaner_compacts_the_metadata_history(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    let first = w.append(log, 1, Bytes::from_static(b"x"), None).await?;
    let head = Keys::new(&env.cluster).head(log);
    let old = env.meta.get(&head).await?.context("head")?.mod_revision;
    w.append(log, 1, Bytes::from_static(b"y"), None).await?;
    let mut c = cleaner(&env, Duration::from_secs(3600));
    c.history = Some(Duration::ZERO);
    let r = c.cycle().await?;
    let to = r.history_compacted_to.context("history not compacted")?;
    ensure!(to > old, "compacted to {to}, not past {old}");
    match env.meta.range(metadata::RangeRequest::key(head).at_revision(old)).await {
        Err(metadata::MetaError::Compacted { .. }) => {}
        other => return Err(anyhow!("a read at a compacted revision answered {other:?}")),
    }
    ensure!(w.read_entries(log, first.offset, 10, u64::MAX).await?.len() == 2);
    w.shutdown().await;
    Ok(())
}

async fn a_cycle_deletes_in_batches_and_streams_its_listing(env: Env) -> Result<()> {
    use futures::StreamExt;
    use objstore::faults::FaultyStore;
    // A writer hands out one block and goes: nothing holds the cutoff below next_seq.
    let mut cfg = env.config("w");
    cfg.seq_block = 5000;
    env.writer_with(cfg, env.objects.clone(), env.meta.clone()).await?.shutdown().await;
    // 1,200 uploads that were never committed, below the cutoff.
    let n = 1200u64;
    let puts = futures::stream::iter(0..n).map(|seq| {
        let objects = env.objects.clone();
        async move {
            objects
                .put(&objstore::keys::wal_object(seq), Bytes::from_static(b"orphan").into())
                .await
        }
    });
    let put: Vec<_> = puts.buffer_unordered(32).collect().await;
    ensure!(put.iter().all(|r| r.is_ok()), "seeding failed");
    let (counted, faults) = FaultyStore::new(env.objects.clone());
    let mut c = Cleaner::new(env.meta.clone(), counted, &env.cluster, Arc::new(SystemClock));
    c.grace = Duration::ZERO;
    c.history = None;
    let r = c.cycle().await?;
    ensure!(r.cutoff.cutoff >= n && r.deleted == n, "{r:?}");
    ensure!(
        faults.delete_streams() <= 2,
        "{n} objects deleted in {} delete calls (batches of at most 1000 expected)",
        faults.delete_streams()
    );
    for seq in [0, n / 2, n - 1] {
        ensure!(!exists(&env, seq).await?, "object {seq} left");
    }
    Ok(())
}
