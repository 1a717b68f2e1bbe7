//! The compactor against both environments (ARCHITECTURE §5–7): every offset reads back
//! identically through the swap, the WAL floor rises so the cleaner reclaims the replaced
//! objects, one claim per log, a compactor paused between its PUT and its swap loses to a trim
//! and leaves only an orphan the cleaner reclaims, and a compactor killed after its PUT leaves
//! the data readable and its orphan reclaimed once its claim is gone.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use bytes::Bytes;
use logstore::{LogId, LogReader, LogStorage, SystemClock};
use maintenance::cleaner::Cleaner;
use maintenance::compactor::{
    Compactor, CompactorConfig, IdleLogs, Skipped, Step, StepHook, compact_all,
};
use objstore::object_store::ObjectStoreExt;

use crate::env::Env;

both_envs!(
    compaction_keeps_every_offset_readable_and_lets_the_cleaner_reclaim_the_wal,
    one_claim_per_log_and_a_paused_compactor_loses_to_a_trim,
    a_compactor_killed_after_its_put_leaves_an_orphan_reclaimed_after_its_lease,
    a_logs_floor_rises_to_its_oldest_chunk_before_it_counts_as_idle,
    soak_appends_reads_compaction_and_cleaning_keep_every_acked_record,
    a_stalled_flush_is_never_passed_by_the_cutoff_while_a_later_one_commits,
    a_compactor_whose_claim_expired_cannot_swap_in_a_segment_the_cleaner_deleted,
    a_slow_reader_racing_compaction_and_the_cleaner_still_reads_every_offset,
    a_writer_that_lost_its_lease_mid_upload_leaves_no_dangling_reference,
    a_compactor_killed_at_each_step_leaves_the_data_readable_and_no_orphan_after_two_cycles,
    a_read_whose_index_pages_are_compacted_under_it_returns_every_entry_once,
    state_checkpoints_move_forward_and_the_unnamed_ones_are_reclaimed,
    a_slots_checkpoint_is_refreshed_by_another_only_once_its_owner_is_gone,
    a_page_a_trim_cut_through_is_compacted_and_its_wal_reclaimed,
    an_old_range_of_many_small_flushes_is_merged_and_reads_back_in_one_get_per_segment,
    a_segment_made_under_a_claim_is_not_merged_again_under_it,
    a_read_by_index_serves_only_entries_of_the_log_it_names,
    a_log_that_cannot_be_compacted_does_not_stop_the_cycle,
);

/// A read by index is authorized by the log it names (the gRPC guard checks that log), so it
/// must serve nothing else: a WAL object holds every log of its flush, and a range of another
/// log's chunk in it, or another log's segment key, is refused (INVALID_ARGUMENT), never
/// answered with that log's bytes. A fresh reader checks against the object's own footer.
async fn a_read_by_index_serves_only_entries_of_the_log_it_names(env: Env) -> Result<()> {
    use logstore::{EntryIndex, LogError};
    // Flushes 200 ms apart: two appends sent together share one WAL object.
    let mut cfg = env.config("w");
    cfg.flush_interval = Duration::from_millis(200);
    let w = env.writer_with(cfg, env.objects.clone(), env.meta.clone()).await?;
    let (a, b) = (w.create_log().await?, w.create_log().await?);
    let secret = Bytes::from_static(b"B-SECRET");
    // Appends that arrive together share a flush: until a's and b's land in one object.
    let (ia, ib) = 'shared: {
        for _ in 0..20 {
            let (ha, hb) = tokio::join!(
                w.append(a, 1, payload(0), None),
                w.append(b, 1, secret.clone(), None)
            );
            let ia = w.read_index_range(a, ha?.offset, 1).await?.remove(0);
            let ib = w.read_index_range(b, hb?.offset, 1).await?.remove(0);
            if ia.object == ib.object {
                break 'shared (ia, ib);
            }
        }
        return Err(anyhow!("20 pairs of appends never shared a flush"));
    };
    let reader = logstore::LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster);
    let refused = |what: &str, got: Result<Vec<logstore::LogEntry>, LogError>| match got {
        Err(LogError::InvalidArgument(_)) => Ok(()),
        other => Err(anyhow!("{what}: answered {other:?}")),
    };
    // b's entry named as a's; then ranges around it (a prober's guesses).
    let as_a = |i: &EntryIndex| EntryIndex { log: a, ..i.clone() };
    refused("b's WAL range named as a's", reader.read_entries_by_index(&[as_a(&ib)]).await)?;
    refused("b's WAL range named as a's (writer)", w.read_entries_by_index(&[as_a(&ib)]).await)?;
    for (start, len) in [(0, 1), (1, 0), (0, 8)] {
        let probe = EntryIndex {
            byte_start: ib.byte_start.saturating_sub(start),
            byte_len: ib.byte_len + len,
            ..as_a(&ib)
        };
        refused("a probe of b's chunk", reader.read_entries_by_index(&[probe]).await)?;
    }
    // a's own entry, beside them, is served.
    let own = reader.read_entries_by_index(&[ia.clone(), ib.clone()]).await?;
    ensure!(own[0].payload == payload(0) && own[1].payload == secret, "{own:?}");

    // b compacted: its segment's key, named as a's.
    fill(&w, b, 8).await?;
    let (c, _) = compactor(&env, "c1").await?;
    c.compact_log_fully(b).await?.map_err(|s| anyhow!("skipped: {s:?}"))?;
    let seg = w.read_index_range(b, ib.header.offset, 1).await?.remove(0);
    ensure!(objstore::keys::parse_compacted_object(&seg.object).is_some(), "{seg:?}");
    refused("b's segment named as a's", reader.read_entries_by_index(&[as_a(&seg)]).await)?;
    let got = reader.read_entries_by_index(&[seg]).await?;
    ensure!(got[0].payload == secret, "{got:?}");
    w.shutdown().await;
    Ok(())
}

/// A claim makes several rewrites; pages that spill while it runs may make a window starting at
/// a segment the claim itself wrote. Merging that one would give the new segment the same
/// object key (first offset and claim) as the one it replaces, and the create-only PUT failed
/// the log's compaction. It is left for the next claim.
async fn a_segment_made_under_a_claim_is_not_merged_again_under_it(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    fill(&w, log, 24).await?; // 2 pages spilled, the rest in the head
    let (c, _) = compactor(&env, "c1").await?;
    let (hook, paused, resume) = pause_when_written();
    let task = tokio::spawn(async move { c.compact_log_fully_with(log, Some(hook)).await });
    paused.await?;
    // While the first segment (16 chunks) waits for its swap: 96 more, 12 pages, enough for a
    // window [segment, pages] worth merging (about 6 times the segment's bytes).
    for i in 24..120 {
        w.append(log, 1, payload(i), None).await?;
    }
    let _ = resume.send(());
    let done = task.await??.map_err(|s| anyhow!("skipped: {s:?}"))?;
    ensure!(done.len() >= 2 && done.iter().all(|c| c.segments == 0), "{done:?}");
    let got = all(&w, log).await?;
    ensure!(got.len() == 120 && got.iter().all(|(o, p)| *p == payload(*o)), "entries changed");
    w.shutdown().await;
    Ok(())
}

/// Issue 18's merge check, scaled down (1 MiB target instead of 64 MiB, 1,000 flushes instead
/// of 10,000; `docs/performance.md` has the full-size run): a log written one entry per flush
/// while compaction cycles run every 25 flushes (so compaction makes many small segments),
/// then left idle, ends in segments of about the target; a fresh reader whose cache holds two
/// of them reads the range back with at most bytes / target + 2 GETs, and a reader with no
/// cache (which reads large segments in blocks, through their footers) reads the same entries
/// from any offset.
async fn an_old_range_of_many_small_flushes_is_merged_and_reads_back_in_one_get_per_segment(
    env: Env,
) -> Result<()> {
    use maintenance::compactor::{IdleLogs, compact_all};
    const TARGET: u64 = 1 << 20;
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    // Settled at the second look: this range is old as soon as it is written.
    let cfg = CompactorConfig {
        min_chunks: 8,
        target_segment_bytes: TARGET,
        settle_after: Duration::ZERO,
        ..Default::default()
    };
    let idle = IdleLogs::default();
    let reader = || logstore::LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster);
    let (mut merged, mut cycles) = (0usize, 0);
    let big = |i: u64| Bytes::from(format!("{i:08}").repeat(512)); // 4 KiB
    for i in 0..1000u64 {
        w.append(log, 1, big(i), None).await?;
        if i % 25 == 24 {
            let r = compact_all(reader(), "c", cfg.clone(), Some(log), &idle).await?;
            ensure!(r.failed.is_empty(), "{r:?}");
            merged += r.compacted.iter().map(|c| c.segments).sum::<usize>();
            cycles += 1;
        }
    }
    // Old now: its writer gone (so its low-water mark holds no chunk back) and the log idle,
    // the next cycles spill the head and merge the tail.
    w.shutdown().await;
    for _ in 0..3 {
        let r = compact_all(reader(), "c", cfg.clone(), None, &idle).await?;
        ensure!(r.failed.is_empty(), "{r:?}");
        merged += r.compacted.iter().map(|c| c.segments).sum::<usize>();
    }
    ensure!(merged > 0, "{cycles} cycles merged no segment");
    let r = reader().with_caches(64 << 20, 64);
    let (mut before, mut headers) = (BTreeMap::new(), Vec::new());
    while (before.len() as u64) < 1000 {
        let got = r.read_entries(log, before.len() as u64, 1000, u64::MAX).await?;
        ensure!(!got.is_empty(), "nothing at {}", before.len());
        headers.extend(got.iter().map(|e| e.header));
        before.extend(got.into_iter().map(|e| (e.header.offset, e.payload)));
    }
    // Timestamp searches read the segments' footers: the same answers as a scan of the entries.
    for h in headers.iter().step_by(97) {
        let (t, mut running) = (h.timestamp, i64::MIN);
        let want = headers.iter().find(|e| {
            running = running.max(e.timestamp);
            running >= t
        });
        let got = logstore::retention::find_by_timestamp(&r, log, t).await?;
        ensure!(got.as_ref() == want, "timestamp {t}: {got:?}, scanning: {want:?}");
    }
    ensure!(before.len() == 1000 && before.iter().all(|(o, p)| *p == big(*o)), "entries changed");
    let locs = r.read_index_range(log, 0, 10_000).await?;
    let mut objects: Vec<&str> = locs.iter().map(|e| e.object.as_ref()).collect();
    objects.dedup();
    ensure!(objects.iter().all(|o| o.starts_with("compacted/")), "left in the WAL: {objects:?}");

    // Read back through a fresh reader whose cache holds two segments, counting GETs.
    let (counted, faults) = objstore::faults::FaultyStore::new(env.objects.clone());
    let fresh = logstore::LogReader::new(env.meta.clone(), counted.clone(), &env.cluster)
        .with_caches(4 * TARGET as usize, 64);
    let (mut at, mut got) = (0u64, 0usize);
    while at < 1000 {
        let read = fresh.read_entries(log, at, 1000, 256 << 10).await?;
        for e in &read {
            ensure!(before.get(&e.header.offset) == Some(&e.payload), "offset {}", e.header.offset);
        }
        got += read.len();
        at = read.last().context("empty read")?.header.end_offset();
    }
    let bytes: u64 = before.values().map(|p| p.len() as u64).sum();
    let gets = faults.calls(objstore::faults::Op::Get);
    let bound = bytes / TARGET + 2;
    eprintln!(
        "{gets} GETs, {} segments, {bytes} bytes, {merged} merged in {cycles} cycles",
        objects.len()
    );
    ensure!(
        got == 1000 && gets <= bound,
        "{gets} GETs for {bytes} bytes in {} segments (bound {bound})",
        objects.len()
    );

    // No cache: large segments are read in blocks found through their footers.
    let blocks = logstore::LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster);
    for from in (0..1000).step_by(37) {
        let read = blocks.read_entries(log, from, 50, 64 << 10).await?;
        let want = r.read_entries(log, from, 50, 64 << 10).await?;
        ensure!(!read.is_empty(), "nothing from {from}");
        ensure!(
            read.iter()
                .map(|e| (e.header, &e.payload))
                .eq(want.iter().map(|e| (e.header, &e.payload))),
            "reads from {from} differ: {:?} vs {:?}",
            read.first().map(|e| e.header),
            want.first().map(|e| e.header)
        );
    }
    Ok(())
}

/// A hard trim inside an index page: the page's chunks above the start are compacted (once
/// skipped as "below the start", they held the log's floor, and the cluster's cutoff, for
/// good), without its chunks below the start, whose objects the cleaner may have taken.
async fn a_page_a_trim_cut_through_is_compacted_and_its_wal_reclaimed(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    fill(&w, log, 40).await?;
    w.hard_trim(log, 5).await?;
    // The chunks wholly below the start are the cleaner's at once.
    cleaner(&env).cycle().await?;
    let before = all(&w, log).await?;
    ensure!(before.keys().next() == Some(&5), "start: {:?}", before.keys().next());
    let (c, _) = compactor(&env, "c1").await?;
    let done = c.compact_log(log).await?.map_err(|s| anyhow!("skipped: {s:?}"))?;
    ensure!(done.first_offset == 5, "{done:?}");
    ensure!(all(&w, log).await? == before, "entries changed through the compaction");
    let idx = w.read_index_range(log, 5, 1).await?;
    ensure!(idx[0].object.as_ref().starts_with("compacted/"), "{:?}", idx[0].object);
    let wal = count(&env, "wal").await?;
    let r = cleaner(&env).cycle().await?;
    ensure!(r.deleted as usize >= done.chunks && count(&env, "wal").await? < wal, "{r:?}");
    let fresh = logstore::LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster);
    let got = fresh.read_entries(log, 5, 1000, u64::MAX).await?;
    ensure!(
        got.len() == 35 && got.iter().all(|e| before.get(&e.header.offset) == Some(&e.payload))
    );
    w.shutdown().await;
    Ok(())
}

/// Per-slot state checkpoints (the Kafka front end's producer state): a pointer only moves
/// forward and the checkpoint it leaves is deleted; one no pointer names (a crash before the
/// pointer moved, a deleted log) is the cleaner's once past the grace period.
async fn state_checkpoints_move_forward_and_the_unnamed_ones_are_reclaimed(env: Env) -> Result<()> {
    use logstore::slot_state;
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    let reader = w.reader().clone();
    ensure!(slot_state::load(&reader, log, "*").await?.is_none());
    ensure!(slot_state::save(&reader, log, "*", 7, 10, Bytes::from_static(b"ten")).await?);
    ensure!(slot_state::save(&reader, log, "*", 7, 20, Bytes::from_static(b"twenty")).await?);
    // Not backwards, not sideways.
    ensure!(!slot_state::save(&reader, log, "*", 7, 15, Bytes::from_static(b"fifteen")).await?);
    ensure!(!slot_state::save(&reader, log, "*", 7, 20, Bytes::from_static(b"again")).await?);
    let c = slot_state::load(&reader, log, "*").await?.context("a checkpoint")?;
    ensure!((c.upto, c.epoch, c.state.as_ref()) == (20, 7, b"twenty".as_slice()), "{c:?}");
    ensure!(count(&env, "state").await? == 1, "the replaced checkpoint was not deleted");
    // An orphan: PUT, and its pointer never moved.
    let orphan = objstore::keys::state_object(log.0, "*", 8, 30);
    env.objects.put(&orphan, Bytes::from_static(b"orphan").into()).await?;
    let mut cl = cleaner(&env);
    let r = cl.cycle().await?;
    ensure!(r.checkpoints_deleted == 1 && count(&env, "state").await? == 1, "{r:?}");
    ensure!(slot_state::load(&reader, log, "*").await?.is_some(), "the named one went");
    // The log deleted: its pointers go with it, then its checkpoint.
    w.delete_log(log).await?;
    let r = cl.cycle().await?;
    ensure!(r.checkpoints_deleted == 1 && count(&env, "state").await? == 0, "{r:?}");
    w.shutdown().await;
    Ok(())
}

/// Another slot's checkpoint moves forward under a refresh only forward and once the slot's
/// owner (the head names it) is gone; every slot with one is listed.
async fn a_slots_checkpoint_is_refreshed_by_another_only_once_its_owner_is_gone(
    env: Env,
) -> Result<()> {
    use logstore::slot_state;
    let owner = env.writer("owner").await?;
    let other = env.writer("other").await?;
    let log = owner.create_log().await?;
    let reader = other.reader().clone();
    let (epoch, _) = owner.serve_slot(log, "b").await?;
    ensure!(slot_state::save(&reader, log, "b", epoch, 10, Bytes::from_static(b"ten")).await?);
    ensure!(slot_state::save(&reader, log, "*", 3, 12, Bytes::from_static(b"any")).await?);
    ensure!(slot_state::slots(&reader, log).await? == ["*", "b"]);
    let refresh = |upto: u64| {
        let reader = reader.clone();
        async move { slot_state::refresh(&reader, log, "b", upto, Bytes::from_static(b"all")).await }
    };
    ensure!(!refresh(20).await?, "refreshed while its owner lives");
    owner.shutdown().await;
    ensure!(!refresh(10).await?, "refreshed backwards");
    ensure!(refresh(20).await?);
    let c = slot_state::load(&reader, log, "b").await?.context("a checkpoint")?;
    ensure!((c.upto, c.epoch, c.state.as_ref()) == (20, epoch, b"all".as_slice()), "{c:?}");
    ensure!(count(&env, "state").await? == 2, "the replaced checkpoint was not deleted");
    other.shutdown().await;
    Ok(())
}

fn payload(i: u64) -> Bytes {
    Bytes::from(format!("e{i}-{}", "z".repeat((i % 23) as usize)))
}

/// Appends `n` entries one flush each (one WAL chunk each).
async fn fill(w: &LogStorage, log: LogId, n: u64) -> Result<()> {
    for i in 0..n {
        w.append(log, 1, payload(i), None).await?;
    }
    Ok(())
}

async fn all(w: &LogStorage, log: LogId) -> Result<BTreeMap<u64, Bytes>> {
    let info = w.info(log).await?;
    let mut out = BTreeMap::new();
    let mut at = info.first_offset;
    while at < info.next_offset {
        let got = w.read_entries(log, at, 1000, u64::MAX).await?;
        let last = got.last().context("empty read below the high watermark")?;
        at = last.header.end_offset();
        out.extend(got.into_iter().map(|e| (e.header.offset, e.payload)));
    }
    Ok(out)
}

async fn compactor(env: &Env, id: &str) -> Result<(Compactor, i64)> {
    let lease = env.meta.lease_grant(Duration::from_secs(30)).await?;
    let reader = logstore::LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster);
    let cfg = CompactorConfig { min_chunks: 8, ..Default::default() };
    Ok((Compactor::new(reader, id, lease, cfg), lease))
}

/// A hook pausing the compaction once, after its segment's PUT: the receiver hears when it is
/// paused there, the sender resumes it.
fn pause_when_written()
-> (StepHook, tokio::sync::oneshot::Receiver<()>, tokio::sync::oneshot::Sender<()>) {
    let (paused_tx, paused_rx) = tokio::sync::oneshot::channel::<()>();
    let (resume_tx, resume_rx) = tokio::sync::oneshot::channel::<()>();
    let slot = Arc::new(std::sync::Mutex::new(Some((paused_tx, resume_rx))));
    let hook: StepHook = Arc::new(move |step| {
        let pair =
            (step == Step::Written).then(|| slot.lock().ok().and_then(|mut s| s.take())).flatten();
        Box::pin(async move {
            if let Some((paused, resume)) = pair {
                let _ = paused.send(());
                let _ = resume.await;
            }
        })
    });
    (hook, paused_rx, resume_tx)
}

pub(crate) fn cleaner(env: &Env) -> Cleaner {
    let mut c =
        Cleaner::new(env.meta.clone(), env.objects.clone(), &env.cluster, Arc::new(SystemClock));
    c.grace = Duration::ZERO;
    c.history = None;
    c
}

async fn count(env: &Env, dir: &str) -> Result<usize> {
    use futures::TryStreamExt;
    let found: Vec<_> = env.objects.list(Some(&objstore::Path::from(dir))).try_collect().await?;
    Ok(found.len())
}

async fn compaction_keeps_every_offset_readable_and_lets_the_cleaner_reclaim_the_wal(
    env: Env,
) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    fill(&w, log, 40).await?; // 40 chunks: 4 pages spilled, the rest in the head
    let before = all(&w, log).await?;
    let wal_before = count(&env, "wal").await?;
    let (c, _) = compactor(&env, "c1").await?;
    let done = c.compact_log(log).await?.map_err(|s| anyhow!("skipped: {s:?}"))?;
    ensure!(done.first_offset == 0 && done.chunks >= 8, "{done:?}");
    ensure!(all(&w, log).await? == before, "entries changed through the compaction");
    let idx = w.read_index_range(log, 0, 1).await?;
    ensure!(idx[0].object.as_ref().starts_with("compacted/"), "{:?}", idx[0].object);
    // A writer keeps appending; compaction goes on after the compacted range (the page the
    // 41st commit spilled), then finds too few chunks.
    w.append(log, 1, payload(40), None).await?;
    let mut after = done.end_offset;
    loop {
        match c.compact_log(log).await? {
            Ok(more) => {
                ensure!(more.first_offset == after, "{more:?} does not follow {after}");
                after = more.end_offset;
            }
            Err(Skipped::TooFew { .. }) => break,
            Err(other) => return Err(anyhow!("skipped: {other:?}")),
        }
        ensure!(after <= 41, "compacted past the high watermark");
    }

    // The floor rose past the replaced chunks: the cleaner deletes their objects, not data.
    let r = cleaner(&env).cycle().await?;
    ensure!(r.deleted as usize >= done.chunks, "{r:?} after {done:?}");
    ensure!(count(&env, "wal").await? < wal_before, "no WAL object reclaimed");
    ensure!(r.segments_deleted == 0, "the live segment was deleted: {r:?}");
    let mut expect = before.clone();
    expect.insert(40, payload(40));
    ensure!(all(&w, log).await? == expect, "entries lost after cleaning");
    // A fresh reader (cold caches) agrees.
    let fresh = logstore::LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster);
    let got = fresh.read_entries(log, 0, 1000, u64::MAX).await?;
    ensure!(
        got.len() == 41 && got.iter().all(|e| expect.get(&e.header.offset) == Some(&e.payload))
    );
    w.shutdown().await;
    Ok(())
}

async fn one_claim_per_log_and_a_paused_compactor_loses_to_a_trim(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    fill(&w, log, 40).await?;
    let (c1, _) = compactor(&env, "c1").await?;
    let (c2, _) = compactor(&env, "c2").await?;
    let (hook, paused_rx, resume_tx) = pause_when_written();
    let first = tokio::spawn(async move { c1.compact_log_with(log, Some(hook)).await });
    paused_rx.await.context("the compactor never reached its swap")?;
    // Its segment is written and its claim held: a second compactor is refused the log.
    ensure!(matches!(c2.compact_log(log).await?, Err(Skipped::Claimed)));
    // A hard trim moves the start past the range while it is paused.
    w.hard_trim(log, 12).await?;
    let _ = resume_tx.send(());
    let raced = first.await??;
    let Err(Skipped::Raced { orphan }) = raced else {
        return Err(anyhow!("the paused compactor swapped after a trim: {raced:?}"));
    };
    let data = all(&w, log).await?;
    ensure!(data.keys().next() == Some(&12) && data.len() == 28, "{:?}", data.keys());
    for (o, p) in &data {
        ensure!(*p == payload(*o), "offset {o} changed");
    }
    // The orphan (claim released, no index record) goes in the next cleaner cycle.
    let r = cleaner(&env).cycle().await?;
    ensure!(r.segments_deleted == 1, "{r:?}");
    ensure!(env.objects.head(&objstore::Path::from(orphan.as_str())).await.is_err());
    // The log compacts normally afterwards, from its start.
    let done = c2.compact_log(log).await?.map_err(|s| anyhow!("skipped: {s:?}"))?;
    ensure!(done.first_offset >= 12 && all(&w, log).await? == data, "{done:?}");
    w.shutdown().await;
    Ok(())
}

async fn a_compactor_killed_after_its_put_leaves_an_orphan_reclaimed_after_its_lease(
    env: Env,
) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    fill(&w, log, 24).await?;
    let before = all(&w, log).await?;
    let (c, lease) = compactor(&env, "c1").await?;
    // Killed between its PUT and its swap: the hook never returns and the task is dropped.
    let hook: StepHook = Arc::new(|step| {
        Box::pin(async move {
            if step == Step::Written {
                futures::future::pending::<()>().await;
            }
        })
    });
    let task = tokio::spawn(async move { c.compact_log_with(log, Some(hook)).await });
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while count(&env, "compacted").await? == 0 {
        ensure!(std::time::Instant::now() < deadline, "no segment was written");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    task.abort();
    ensure!(all(&w, log).await? == before, "a killed compactor changed the data");
    // Its claim lives on under its lease: the segment is kept, then reclaimed once it is gone.
    let mut cl = cleaner(&env);
    ensure!(cl.cycle().await?.segments_deleted == 0, "a claimed segment was deleted");
    env.meta.lease_revoke(lease).await?;
    let r = cl.cycle().await?;
    ensure!(r.segments_deleted == 1 && count(&env, "compacted").await? == 0, "{r:?}");
    ensure!(all(&w, log).await? == before);
    // Another compactor takes the log over.
    let (c2, _) = compactor(&env, "c2").await?;
    c2.compact_log(log).await?.map_err(|s| anyhow!("skipped: {s:?}"))?;
    ensure!(all(&w, log).await? == before);
    w.shutdown().await;
    Ok(())
}

/// One look at a log with too few chunks raises its floor from its creation to its oldest
/// chunk, which it still holds; that it stops holding the cutoff once idle is `cutoff.rs`'s.
async fn a_logs_floor_rises_to_its_oldest_chunk_before_it_counts_as_idle(env: Env) -> Result<()> {
    let keys = logstore::keys::Keys::new(&env.cluster);
    let floor = |log: LogId| {
        let (meta, key) = (env.meta.clone(), keys.wal_floor(log));
        async move {
            let kv = meta.get(&key).await?.context("no wal_floor")?;
            logstore::keys::parse_u64(&kv.value).context("wal_floor")
        }
    };
    let w = env.writer("w").await?;
    let idle = w.create_log().await?;
    let busy = w.create_log().await?;
    fill(&w, busy, 10).await?; // sequences the idle log's floor predates
    w.append(idle, 1, payload(0), None).await?;
    fill(&w, busy, 3).await?;
    let before = floor(idle).await?;
    let chunk = objstore::keys::parse_wal_object(&w.read_index_range(idle, 0, 1).await?[0].object)
        .context("not a WAL chunk")?;
    ensure!(before < chunk, "floor {before} already at its chunk {chunk}");
    let (c, _) = compactor(&env, "c1").await?;
    ensure!(matches!(c.compact_log(idle).await?, Err(Skipped::TooFew { eligible: 0 })));
    let after = floor(idle).await?;
    ensure!(after == chunk, "the idle log's floor went {before} → {after}, its chunk is {chunk}");
    ensure!(w.read_entries(idle, 0, 10, u64::MAX).await?[0].payload == payload(0));
    w.shutdown().await;
    Ok(())
}

/// Bounded soak (about 10 s an environment): 4 logs appended continuously (4 appenders each),
/// a reader re-reading them, compaction and cleaning (grace 300 ms) every 200 ms. Afterwards
/// every acknowledged record reads back identical and the store holds only objects the index
/// references plus those younger than the grace period.
async fn soak_appends_reads_compaction_and_cleaning_keep_every_acked_record(
    env: Env,
) -> Result<()> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let run_for = Duration::from_secs(10);
    let grace = Duration::from_millis(300);
    let w = env.writer("w").await?;
    let mut logs = Vec::new();
    for _ in 0..4 {
        logs.push(w.create_log().await?);
    }
    let acked: Arc<Mutex<BTreeMap<(u64, u64), Bytes>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (li, log) in logs.iter().copied().enumerate() {
        for t in 0..4u64 {
            let (w, acked, stop) = (w.clone(), acked.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let p =
                        Bytes::from(format!("l{li}-t{t}-{i}-{}", "s".repeat((i % 50) as usize)));
                    let h = w.append(log, 1, p.clone(), None).await?;
                    acked.lock().map_err(|_| anyhow!("poisoned"))?.insert((log.0, h.offset), p);
                    i += 1;
                }
                anyhow::Ok(())
            }));
        }
    }
    let reads = Arc::new(AtomicU64::new(0));
    let reader = {
        let (env_meta, env_objects, cluster) =
            (env.meta.clone(), env.objects.clone(), env.cluster.clone());
        let (acked, stop, logs, reads) = (acked.clone(), stop.clone(), logs.clone(), reads.clone());
        tokio::spawn(async move {
            let r = logstore::LogReader::new(env_meta, env_objects, &cluster);
            while !stop.load(Ordering::Relaxed) {
                for log in &logs {
                    let info = r.info(*log).await?;
                    let mut at = info.first_offset;
                    while at < info.next_offset {
                        let got = r.read_entries(*log, at, 500, u64::MAX).await?;
                        let last = got.last().context("empty read below the high watermark")?;
                        at = last.header.end_offset();
                        let acked = acked.lock().map_err(|_| anyhow!("poisoned"))?;
                        for e in &got {
                            if let Some(p) = acked.get(&(log.0, e.header.offset)) {
                                ensure!(
                                    *p == e.payload,
                                    "log {log} offset {} changed",
                                    e.header.offset
                                );
                            }
                        }
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            }
            anyhow::Ok(())
        })
    };
    let mut cl = cleaner(&env);
    cl.grace = grace;
    let reader_for_compaction =
        logstore::LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster);
    let cfg = CompactorConfig { min_chunks: 8, ..Default::default() };
    let idle = maintenance::compactor::IdleLogs::default();
    let compact = || {
        maintenance::compactor::compact_all(
            reader_for_compaction.clone(),
            "soak",
            cfg.clone(),
            None,
            &idle,
        )
    };
    let (mut compactions, mut deleted, mut segments_deleted) = (0usize, 0u64, 0u64);
    let started = std::time::Instant::now();
    while started.elapsed() < run_for {
        let r = compact().await?;
        compactions += r.compacted.len();
        let c = cl.cycle().await?;
        deleted += c.deleted;
        segments_deleted += c.segments_deleted;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    reader.await??;
    ensure!(
        compactions > 0 && deleted > 0,
        "compactions {compactions}, WAL objects deleted {deleted}"
    );
    ensure!(reads.load(Ordering::Relaxed) > 0, "the reader never finished a pass");

    // Quiesce: a last compaction, then cleaning once the grace period has passed.
    compact().await?;
    tokio::time::sleep(grace * 2).await;
    let cycle_began = chrono_now_ms();
    let last = cl.cycle().await?;
    let acked = acked.lock().map_err(|_| anyhow!("poisoned"))?.clone();
    let mut referenced = std::collections::HashSet::new();
    for log in &logs {
        let data = all(&w, *log).await?;
        for ((l, o), p) in acked.range((log.0, 0)..(log.0 + 1, 0)) {
            ensure!(data.get(o) == Some(p), "acked record {l}/{o} lost or changed");
        }
        for i in w.read_index_range(*log, 0, usize::MAX).await? {
            referenced.insert(i.object.to_string());
        }
    }
    use futures::TryStreamExt;
    let stored: Vec<_> = env.objects.list(None).try_collect().await?;
    // Unreferenced and past the grace period when the last cycle began: gone, unless at or above
    // that cycle's cutoff (a WAL object whose chunks were all compacted stays until every other
    // log's floor has passed it too).
    let stray: Vec<String> = stored
        .iter()
        .filter(|m| !referenced.contains(m.location.as_ref()))
        .filter(|m| cycle_began - m.last_modified.timestamp_millis() >= grace.as_millis() as i64)
        .filter(|m| {
            objstore::keys::parse_wal_object(&m.location).is_none_or(|s| s < last.cutoff.cutoff)
        })
        .map(|m| m.location.to_string())
        .collect();
    ensure!(
        stray.is_empty(),
        "{} objects neither referenced, young nor above the cutoff {}: {stray:?}",
        stray.len(),
        last.cutoff.cutoff
    );
    eprintln!(
        "soak: {} records acked, {compactions} compactions, {deleted} WAL objects and \
         {segments_deleted} segments deleted, {} objects left",
        acked.len(),
        stored.len()
    );
    w.shutdown().await;
    Ok(())
}

fn chrono_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

async fn a_stalled_flush_is_never_passed_by_the_cutoff_while_a_later_one_commits(
    env: Env,
) -> Result<()> {
    use objstore::faults::{Action, FaultyStore, Op, Trigger};
    let (faulty, faults) = FaultyStore::new(env.objects.clone());
    let w = env.writer_with(env.config("w"), faulty, env.meta.clone()).await?;
    let log = w.create_log().await?;
    fill(&w, log, 3).await?;
    // The next PUT (flush N) stalls 2 s; flush N+1 of the same log uploads at once.
    faults.add(Op::Put, Trigger::Nth(1), Action::Delay(Duration::from_secs(2)));
    let (w1, w2) = (w.clone(), w.clone());
    let first = tokio::spawn(async move { w1.append(log, 1, payload(100), None).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = tokio::spawn(async move { w2.append(log, 1, payload(101), None).await });
    // Compaction (which recomputes floors) and cleaning run all through the stall.
    let reader = logstore::LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster);
    let cfg = CompactorConfig { min_chunks: 1, ..Default::default() };
    let idle = maintenance::compactor::IdleLogs::default();
    let mut cl = cleaner(&env);
    while !(first.is_finished() && second.is_finished()) {
        maintenance::compactor::compact_all(reader.clone(), "c", cfg.clone(), None, &idle).await?;
        cl.cycle().await?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (a, b) = (first.await??, second.await??);
    ensure!(b.offset > a.offset, "flush order broken: {} then {}", a.offset, b.offset);
    let data = all(&w, log).await?;
    ensure!(
        data.get(&a.offset) == Some(&payload(100)) && data.get(&b.offset) == Some(&payload(101))
    );
    cl.cycle().await?;
    ensure!(all(&w, log).await? == data, "cleaning after the stall lost data");
    w.shutdown().await;
    Ok(())
}

async fn a_compactor_whose_claim_expired_cannot_swap_in_a_segment_the_cleaner_deleted(
    env: Env,
) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    fill(&w, log, 24).await?;
    let before = all(&w, log).await?;
    let (c, lease) = compactor(&env, "c1").await?;
    let (hook, paused_rx, resume_tx) = pause_when_written();
    let task = tokio::spawn(async move { c.compact_log_with(log, Some(hook)).await });
    paused_rx.await.context("the compactor never reached its swap")?;
    // Paused past its lease: the claim is gone, so its segment is an orphan the cleaner takes.
    env.meta.lease_revoke(lease).await?;
    let r = cleaner(&env).cycle().await?;
    ensure!(r.segments_deleted == 1, "{r:?}");
    let _ = resume_tx.send(());
    let out = task.await?;
    ensure!(matches!(out, Ok(Err(Skipped::Raced { .. }))), "swapped without its claim: {out:?}");
    ensure!(all(&w, log).await? == before, "data changed");
    let idx = w.read_index_range(log, 0, 1).await?;
    ensure!(idx[0].object.as_ref().starts_with("wal/"), "the index points at {:?}", idx[0].object);
    w.shutdown().await;
    Ok(())
}

async fn a_slow_reader_racing_compaction_and_the_cleaner_still_reads_every_offset(
    env: Env,
) -> Result<()> {
    use objstore::faults::{Action, FaultyStore, Op, Trigger};
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    fill(&w, log, 24).await?;
    let before = all(&w, log).await?;
    // The reader plans its read from the WAL locators, then its GETs stall while the log is
    // compacted and the cleaner (no grace period) deletes those WAL objects.
    let (slow, faults) = FaultyStore::new(env.objects.clone());
    faults.add(Op::Get, Trigger::Always, Action::Delay(Duration::from_millis(1500)));
    let reader = logstore::LogReader::new(env.meta.clone(), slow, &env.cluster);
    let read = tokio::spawn(async move { reader.read_entries(log, 0, 1000, u64::MAX).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (c, _) = compactor(&env, "c1").await?;
    c.compact_log(log).await?.map_err(|s| anyhow!("skipped: {s:?}"))?;
    let r = cleaner(&env).cycle().await?;
    ensure!(r.deleted > 0, "nothing deleted under the reader: {r:?}");
    faults.clear();
    let got = read.await??;
    let got: BTreeMap<u64, Bytes> = got.into_iter().map(|e| (e.header.offset, e.payload)).collect();
    ensure!(got == before, "the racing read returned {} of {} entries", got.len(), before.len());
    w.shutdown().await;
    Ok(())
}

async fn a_writer_that_lost_its_lease_mid_upload_leaves_no_dangling_reference(
    env: Env,
) -> Result<()> {
    use objstore::faults::{Action, FaultyStore, Op, Trigger};
    let (faulty, faults) = FaultyStore::new(env.objects.clone());
    let w = env.writer_with(env.config("w"), faulty, env.meta.clone()).await?;
    let log = w.create_log().await?;
    fill(&w, log, 3).await?;
    // The next upload stalls; meanwhile the writer's lease ends (a pause past it), so its mark
    // goes and the cleaner's cutoff passes the stalled sequence.
    faults.add(Op::Put, Trigger::Nth(1), Action::Delay(Duration::from_millis(1500)));
    let w1 = w.clone();
    let stalled = tokio::spawn(async move { w1.append(log, 1, payload(99), None).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let keys = logstore::keys::Keys::new(&env.cluster);
    // Every sequence handed out so far, the stalled one included, is below this.
    let handed_out = env.meta.get(&keys.next_seq()).await?.context("no next_seq")?;
    let handed_out = logstore::keys::parse_u64(&handed_out.value).context("next_seq")?;
    let member = env.meta.get(&keys.member("writer", "w")).await?.context("not registered")?;
    env.meta.lease_revoke(member.lease).await?;
    // Compaction (the idle log is spilled and compacted, raising its floor) and cleaning run
    // until the cutoff has passed the stalled sequence, the stall's end or not.
    let mut cl = cleaner(&env);
    let reader = logstore::LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster);
    let (cfg, idle) = (CompactorConfig { min_chunks: 8, ..Default::default() }, Default::default());
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let mut passed = false;
    while !(stalled.is_finished() && passed) {
        ensure!(
            std::time::Instant::now() < deadline,
            "the cutoff never passed the stalled sequence (below {handed_out})"
        );
        maintenance::compactor::compact_all(reader.clone(), "c", cfg.clone(), None, &idle).await?;
        passed |= cl.cycle().await?.cutoff.cutoff >= handed_out;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The old incarnation cannot commit what it uploaded: the append fails or, if it
    // committed, only before the lease ended; either way every index record's object exists.
    let outcome = stalled.await?;
    cl.cycle().await?;
    for i in w.read_index_range(log, 0, usize::MAX).await? {
        ensure!(
            env.objects.head(&i.object).await.is_ok(),
            "offset {} references {}, which is gone (append: {outcome:?})",
            i.header.offset,
            i.object
        );
    }
    let data = all(&w, log).await?;
    ensure!((0..3).all(|o| data.get(&o) == Some(&payload(o))), "acked records lost");
    if let Ok(h) = &outcome {
        ensure!(data.get(&h.offset) == Some(&payload(99)), "an acked append is unreadable");
    }
    w.shutdown().await;
    Ok(())
}

async fn a_compactor_killed_at_each_step_leaves_the_data_readable_and_no_orphan_after_two_cycles(
    env: Env,
) -> Result<()> {
    use futures::TryStreamExt;
    let w = env.writer("w").await?;
    for step in [Step::Claimed, Step::Written, Step::Swapped] {
        let log = w.create_log().await?;
        fill(&w, log, 24).await?;
        let before = all(&w, log).await?;
        let (c, lease) = compactor(&env, &format!("{step:?}")).await?;
        let (reached_tx, reached_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let hook: StepHook = Arc::new(move |at| {
            let reached = reached_tx.clone();
            Box::pin(async move {
                if at == step {
                    let _ = reached.send(());
                    futures::future::pending::<()>().await; // killed here
                }
            })
        });
        let task = tokio::spawn(async move { c.compact_log_with(log, Some(hook)).await });
        let mut reached_rx = reached_rx;
        reached_rx.recv().await.context("the compactor never reached the step")?;
        task.abort();
        ensure!(all(&w, log).await? == before, "killed at {step:?}: data changed");
        // Its claim ends with its lease; within two cleaner cycles no orphan segment is left.
        env.meta.lease_revoke(lease).await?;
        let mut cl = cleaner(&env);
        cl.cycle().await?;
        cl.cycle().await?;
        let referenced: std::collections::HashSet<String> = w
            .read_index_range(log, 0, usize::MAX)
            .await?
            .into_iter()
            .map(|i| i.object.to_string())
            .collect();
        let dir = objstore::keys::compacted_dir(log.0);
        let segments: Vec<_> = env.objects.list(Some(&dir)).try_collect().await?;
        for m in &segments {
            ensure!(
                referenced.contains(m.location.as_ref()),
                "killed at {step:?}: orphan {} left after two cycles",
                m.location
            );
        }
        ensure!(
            (step == Step::Swapped) != segments.is_empty(),
            "killed at {step:?}: {} segments",
            segments.len()
        );
        ensure!(all(&w, log).await? == before, "killed at {step:?}: data changed by cleaning");
        // The log is free for the next compactor.
        let (c2, _) = compactor(&env, "next").await?;
        let again = c2.compact_log(log).await?;
        ensure!(
            again.is_ok() || step == Step::Swapped,
            "killed at {step:?}: the next compactor got {again:?}"
        );
        ensure!(all(&w, log).await? == before);
    }
    w.shutdown().await;
    Ok(())
}

/// A long read lists the index a page window at a time, keys first, then the pages' values.
/// A compaction landing between the two (it replaces the listed pages by one page below them)
/// must not make the read report corruption, nor return entries twice.
async fn a_read_whose_index_pages_are_compacted_under_it_returns_every_entry_once(
    env: Env,
) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    fill(&w, log, 200).await?; // 25 pages of 8; one window lists 17 of them
    let before = all(&w, log).await?;
    let faulty = crate::faulty_meta::FaultyMeta::new(env.meta.clone());
    let reader = logstore::LogReader::new(faulty.clone(), env.objects.clone(), &env.cluster);
    let (c, _) = compactor(&env, "c1").await?;
    let compacted = Arc::new(std::sync::Mutex::new(None));
    let hook: crate::faulty_meta::GetHook = {
        let (c, compacted) = (c.clone(), compacted.clone());
        Arc::new(move || {
            let (c, compacted) = (c.clone(), compacted.clone());
            Box::pin(async move {
                let done = c.compact_log(log).await;
                *compacted.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!("{done:?}"));
            })
        })
    };
    // The second window's listing (from offset 136, where the first window of 17 pages
    // ends): its keys are read, then the compaction runs, then its pages' values are read.
    let mut second = logstore::keys::Keys::new(&env.cluster).index_page(log, 136);
    second.push(0);
    *faulty.after_read.lock().unwrap_or_else(|e| e.into_inner()) = Some((second, hook));
    let got = reader.read_entries(log, 0, 1000, u64::MAX).await?;
    let done = compacted.lock().unwrap_or_else(|e| e.into_inner()).clone();
    ensure!(
        done.as_deref().is_some_and(|d| d.starts_with("Ok(Ok(")),
        "no compaction ran: {done:?}"
    );
    let offsets: Vec<u64> = got.iter().map(|e| e.header.offset).collect();
    ensure!(offsets == (0..200).collect::<Vec<_>>(), "offsets read: {offsets:?}");
    ensure!(got.iter().all(|e| before.get(&e.header.offset) == Some(&e.payload)));
    w.shutdown().await;
    Ok(())
}

async fn a_log_that_cannot_be_compacted_does_not_stop_the_cycle(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let broken = w.create_log().await?;
    let fine = w.create_log().await?;
    for i in 0..24u8 {
        w.append(broken, 1, Bytes::from(vec![i]), None).await?;
    }
    for i in 0..24u8 {
        w.append(fine, 1, Bytes::from(vec![i]), None).await?;
    }
    // One of the broken log's WAL objects is gone (lost by the store, deleted by hand).
    let idx = w.read_index_range(broken, 0, 1).await?;
    env.objects.delete(&idx[0].object).await?;
    let reader = LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster);
    let cfg = CompactorConfig { min_chunks: 8, ..Default::default() };
    let r = compact_all(reader, "c", cfg, None, &IdleLogs::default()).await?;
    ensure!(
        r.failed.iter().any(|(l, _)| *l == broken),
        "the broken log's failure was not reported: {r:?}"
    );
    ensure!(r.compacted.iter().any(|c| c.log == fine), "the next log was not compacted: {r:?}");
    let got = w.read_entries(fine, 0, 100, u64::MAX).await?;
    ensure!(got.len() == 24 && got.iter().enumerate().all(|(i, e)| e.payload[0] == i as u8));
    w.shutdown().await;
    Ok(())
}
