//! The cases, each run against both environments.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use bytes::Bytes;
use logstore::{Code, Log, LogEntryHeader, LogError, LogId, LogStorage};
use objstore::faults::{FaultyStore, Op, Trigger};
use objstore::object_store::ObjectStoreExt;

use crate::env::{Env, ManualClock};
use crate::faulty_meta::FaultyMeta;

both_envs!(
    kafka_node_ids_are_distinct_and_kept_across_restarts,
    appended_entries_read_back_identically,
    read_limits_return_whole_entries_and_at_least_one,
    two_writers_on_one_log_get_gap_free_offsets,
    slot_takeover_fences_the_previous_writer,
    appends_under_a_tenure_commit_only_in_it,
    fence_during_a_flush_acks_nothing_and_exposes_nothing,
    crash_between_put_and_commit_leaves_an_orphan_and_no_ack,
    object_store_faults_lose_no_acknowledged_append,
    lost_commit_answers_never_duplicate_or_lose_entries,
    commit_applied_before_the_lease_ended_is_acknowledged,
    stream_logs_are_served_only_by_their_owner,
    cached_reads_and_a_missing_object,
    a_reader_catching_up_reads_the_next_runs_ahead,
    a_writers_reads_of_what_it_just_committed_need_no_get,
    corrupted_object_is_an_error_never_data,
    readers_never_see_the_high_watermark_go_back,
    bad_input_gets_clear_errors,
    conditional_append_commits_only_at_the_expected_offset,
    a_failed_append_fails_its_chains_later_appends_and_nothing_else,
    index_pages_spill_and_hard_trim_removes_them,
    scans_walk_many_index_pages_in_few_metadata_reads,
    acknowledged_appends_survive_a_writer_restart,
    full_buffer_answers_resource_exhausted,
    timestamp_search_and_retention_use_running_maxima,
    index_reads_fetch_entries_without_resolving_offsets,
    lost_lease_ends_the_incarnation_and_the_writer_registers_again,
    log_fenced_by_a_dead_writer_is_taken_over,
    transactions_set_the_last_stable_offset_and_the_aborted_index,
);

/// Revokes a writer's lease behind its back, as an expiry would.
async fn revoke_lease_of(env: &Env, writer: &str) -> Result<()> {
    let key = logstore::keys::Keys::new(&env.cluster).member("writer", writer);
    let kv = env.meta.get(&key).await?.context("writer not registered")?;
    env.meta.lease_revoke(kv.lease).await?;
    Ok(())
}

fn payload(tag: &str, i: usize) -> Bytes {
    Bytes::from(format!("{tag}-{i}-{}", "x".repeat(i % 17)))
}

/// Every entry of the log, by offset.
async fn read_all(s: &LogStorage, log: LogId) -> Result<BTreeMap<u64, (LogEntryHeader, Bytes)>> {
    let info = s.info(log).await?;
    let mut out = BTreeMap::new();
    let mut at = info.first_offset;
    while at < info.next_offset {
        let batch = s.read_entries(log, at, 1000, 1 << 20).await?;
        ensure!(
            !batch.is_empty(),
            "no entries at {at} below the high watermark {}",
            info.next_offset
        );
        for e in batch {
            at = e.header.end_offset();
            out.insert(e.header.offset, (e.header, e.payload));
        }
    }
    Ok(out)
}

/// Invariant 2: every acknowledged append is readable at its offset with identical bytes.
fn check_acks_readable(
    all: &BTreeMap<u64, (LogEntryHeader, Bytes)>,
    acks: &[(LogEntryHeader, Bytes)],
) -> Result<()> {
    for (h, p) in acks {
        ensure!(
            all.get(&h.offset) == Some(&(*h, p.clone())),
            "acknowledged append at {} lost",
            h.offset
        );
    }
    Ok(())
}

/// Invariant 1: entries tile [start, hw) with no gap and no overlap.
fn check_gap_free(
    entries: &BTreeMap<u64, (LogEntryHeader, Bytes)>,
    start: u64,
    hw: u64,
) -> Result<()> {
    let mut expect = start;
    for (offset, (h, _)) in entries {
        ensure!(*offset == expect, "gap or overlap at {offset}, expected {expect}");
        expect = h.end_offset();
    }
    ensure!(expect == hw, "entries end at {expect}, high watermark is {hw}");
    Ok(())
}

async fn appended_entries_read_back_identically(env: Env) -> Result<()> {
    let w = env.writer("w1").await?;
    let (a, b) = (w.create_log().await?, w.create_log().await?);
    ensure!(a != b);
    let mut acks = Vec::new();
    for i in 0..20 {
        let log = if i % 3 == 0 { b } else { a };
        let n = (i % 4 + 1) as u32;
        acks.push((log, w.append(log, n, payload("p", i), None).await?, payload("p", i)));
    }
    // Concurrent appends land in shared flushes.
    let mut handles = Vec::new();
    for i in 20..60 {
        let w = w.clone();
        handles.push(tokio::spawn(async move { (i, w.append(a, 1, payload("c", i), None).await) }));
    }
    for h in handles {
        let (i, r) = h.await?;
        acks.push((a, r?, payload("c", i)));
    }
    for log in [a, b] {
        let all = read_all(&w, log).await?;
        let info = w.info(log).await?;
        check_gap_free(&all, 0, info.next_offset)?;
        for (_, h, p) in acks.iter().filter(|(l, _, _)| *l == log) {
            let (got_h, got_p) = all.get(&h.offset).context("acknowledged entry missing")?;
            ensure!(got_h == h && got_p == p, "entry at {} differs", h.offset);
        }
        let last = w.get_last_offset(log).await?.context("last")?;
        ensure!(last.end_offset() == info.next_offset);
        let first = w.get_first_offset(log).await?.context("first")?;
        ensure!(first.offset == 0);
    }
    let cumulative: u64 =
        acks.iter().filter(|(l, _, _)| *l == a).map(|(_, h, _)| h.entry_size).sum();
    ensure!(w.info(a).await?.bytes == cumulative);
    w.shutdown().await;
    Ok(())
}

async fn read_limits_return_whole_entries_and_at_least_one(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    for i in 0..5 {
        w.append(log, 10, Bytes::from(vec![i as u8; 100]), None).await?;
    }
    // From the middle of an entry: that whole entry first.
    let e = w.read_entries(log, 15, 1, 1).await?;
    ensure!(
        e.len() == 1 && e[0].header.offset == 10,
        "{:?}",
        e.iter().map(|e| e.header).collect::<Vec<_>>()
    );
    ensure!(w.read_entries(log, 0, 25, u64::MAX).await?.len() == 2);
    ensure!(w.read_entries(log, 0, u64::MAX, 250).await?.len() == 2);
    ensure!(w.read_entries(log, 0, u64::MAX, u64::MAX).await?.len() == 5);
    ensure!(w.read_entries(log, 50, 10, 10).await?.is_empty(), "at the high watermark: empty");
    match w.read_entries(log, 51, 10, 10).await {
        Err(LogError::OffsetOutOfRange { .. }) => {}
        other => return Err(anyhow!("past the high watermark: {other:?}")),
    }
    w.shutdown().await;
    Ok(())
}

async fn two_writers_on_one_log_get_gap_free_offsets(env: Env) -> Result<()> {
    let mut ca = env.config("wa");
    ca.zone = "zone-a".to_owned();
    let mut cb = env.config("wb");
    cb.zone = "zone-b".to_owned();
    let a = env.writer_with(ca, env.objects.clone(), env.meta.clone()).await?;
    let b = env.writer_with(cb, env.objects.clone(), env.meta.clone()).await?;
    let log = a.create_log().await?;
    let mut handles = Vec::new();
    for (name, w) in [("a", a.clone()), ("b", b.clone())] {
        for t in 0..3 {
            let w = w.clone();
            handles.push(tokio::spawn(async move {
                let mut acks = Vec::new();
                for i in 0..15 {
                    let p = payload(&format!("{name}{t}"), i);
                    let h = w.append(log, (i % 3 + 1) as u32, p.clone(), None).await?;
                    acks.push((h, p));
                }
                anyhow::Ok(acks)
            }));
        }
    }
    let mut acks = Vec::new();
    for h in handles {
        acks.extend(h.await??);
    }
    let all = read_all(&a, log).await?;
    check_gap_free(&all, 0, a.info(log).await?.next_offset)?;
    ensure!(all.len() == acks.len(), "{} entries for {} acks", all.len(), acks.len());
    for (h, p) in &acks {
        ensure!(
            all.get(&h.offset).map(|(_, got)| got) == Some(p),
            "ack at {} not readable as written",
            h.offset
        );
    }
    // Both slots are held, each under its own epoch.
    let head = a.head(log).await?;
    ensure!(head.slots.len() == 2, "{:?}", head.slots);
    a.shutdown().await;
    b.shutdown().await;
    Ok(())
}

async fn slot_takeover_fences_the_previous_writer(env: Env) -> Result<()> {
    let a = env.writer("a").await?;
    let b = env.writer("b").await?;
    let log = a.create_log().await?;
    a.append(log, 1, payload("a", 0), None).await?;
    b.append(log, 1, payload("b", 0), None).await?; // same zone: takes the slot from a
    match a.append(log, 1, payload("a", 1), None).await {
        Err(LogError::Fenced { .. }) => {}
        other => return Err(anyhow!("append under a taken-over slot answered {other:?}")),
    }
    let all = read_all(&a, log).await?;
    ensure!(
        all.len() == 2 && all.values().all(|(_, p)| *p != payload("a", 1)),
        "a fenced append became readable"
    );
    a.shutdown().await;
    b.shutdown().await;
    Ok(())
}

/// `serve_slot` takes a slot before any commit and names the end of the log after it; an
/// append bound to a tenure commits only while the slot is served at that epoch.
async fn appends_under_a_tenure_commit_only_in_it(env: Env) -> Result<()> {
    let a = env.writer("a").await?;
    let b = env.writer("b").await?;
    let log = a.create_log().await?;
    let zone = a.config().zone.clone();
    let submit = |w: &LogStorage, tag: &'static str, tenure: i64| {
        let (w, zone) = (w.clone(), zone.clone());
        async move {
            let opts = logstore::Conditions { tenure: Some(tenure), ..Default::default() };
            match w.submit_in_slot(log, &zone, 1, payload(tag, 0), opts).await {
                Ok(c) => c.await,
                Err(e) => Err(e),
            }
        }
    };
    let (ea, end) = a.serve_slot(log, &zone).await?;
    ensure!(end == 0);
    ensure!(submit(&a, "a", ea).await?.offset == 0);
    ensure!(a.serve_slot(log, &zone).await? == (ea, 1), "served already: same epoch, new end");
    let (eb, end) = b.serve_slot(log, &zone).await?;
    ensure!(eb != ea && end == 1, "{ea} {eb} {end}");
    for (w, tag, tenure) in [(&a, "a-stale", ea), (&b, "b-stale", ea)] {
        match submit(w, tag, tenure).await {
            Err(LogError::Fenced { .. }) => {}
            other => return Err(anyhow!("{tag}: append under an ended tenure: {other:?}")),
        }
    }
    ensure!(submit(&b, "b", eb).await?.offset == 1);
    let all = read_all(&a, log).await?;
    ensure!(
        all.values().map(|(_, p)| p.clone()).collect::<Vec<_>>()
            == [payload("a", 0), payload("b", 0)],
        "{all:?}"
    );
    a.shutdown().await;
    b.shutdown().await;
    Ok(())
}

async fn fence_during_a_flush_acks_nothing_and_exposes_nothing(env: Env) -> Result<()> {
    let (slow, faults) = FaultyStore::new(env.objects.clone());
    let w = env.writer_with(env.config("w"), slow, env.meta.clone()).await?;
    let admin = env.writer("admin").await?;
    let log = w.create_log().await?;
    w.append(log, 1, payload("before", 0), None).await?;
    let hw = w.info(log).await?.next_offset;
    faults.delay(Op::Put, Duration::from_millis(800));
    let mut pending = Vec::new();
    for i in 0..5 {
        let w = w.clone();
        pending
            .push(tokio::spawn(async move { w.append(log, 1, payload("during", i), None).await }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let epoch = admin.fence(log).await?;
    for p in pending {
        match p.await? {
            Err(e) if e.code() == Code::Fenced => {}
            other => return Err(anyhow!("an append flushed across a fence answered {other:?}")),
        }
    }
    let info = w.info(log).await?;
    ensure!(
        info.next_offset == hw,
        "fenced flush moved the high watermark {hw} → {}",
        info.next_offset
    );
    ensure!(read_all(&w, log).await?.values().all(|(_, p)| !p.starts_with(b"during")));
    // While fenced nothing commits; after activate, writers take their slots afresh.
    faults.clear();
    ensure!(w.append(log, 1, payload("fenced", 0), None).await.is_err());
    admin.activate(log, epoch).await?;
    w.append(log, 1, payload("after", 0), None).await?;
    match admin.activate(log, epoch).await {
        Err(LogError::Fenced { .. }) => {}
        other => return Err(anyhow!("activating an active log answered {other:?}")),
    }
    w.shutdown().await;
    admin.shutdown().await;
    Ok(())
}

async fn crash_between_put_and_commit_leaves_an_orphan_and_no_ack(env: Env) -> Result<()> {
    let meta = FaultyMeta::new(env.meta.clone());
    let w = env.writer_with(env.config("crashy"), env.objects.clone(), meta.clone()).await?;
    let log = w.create_log().await?;
    w.append(log, 1, payload("ok", 0), None).await?;
    let before: Vec<_> =
        env.objects.list(Some(&objstore::Path::from("wal"))).try_collect_vec().await?;
    meta.hang_writes.store(true, Ordering::SeqCst);
    let w2 = w.clone();
    let append = tokio::spawn(async move { w2.append(log, 1, payload("lost", 0), None).await });
    // Wait until the WAL object of the doomed flush is in the store, then crash the writer.
    let mut after = before.clone();
    for _ in 0..100 {
        after = env.objects.list(Some(&objstore::Path::from("wal"))).try_collect_vec().await?;
        if after.len() > before.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ensure!(after.len() == before.len() + 1, "the flush's WAL object was never written");
    w.abort();
    drop(w);
    let answer = tokio::time::timeout(Duration::from_secs(10), append).await??;
    ensure!(answer.is_err(), "a crashed writer acknowledged an uncommitted append: {answer:?}");
    let reader = env.writer("reader").await?;
    let all = read_all(&reader, log).await?;
    ensure!(all.len() == 1, "the uncommitted entry became readable");
    reader.shutdown().await;
    Ok(())
}

trait CollectVec {
    async fn try_collect_vec(self) -> Result<Vec<objstore::object_store::ObjectMeta>>;
}

impl CollectVec
    for futures::stream::BoxStream<
        'static,
        objstore::object_store::Result<objstore::object_store::ObjectMeta>,
    >
{
    async fn try_collect_vec(self) -> Result<Vec<objstore::object_store::ObjectMeta>> {
        use futures::TryStreamExt;
        Ok(self.try_collect().await?)
    }
}

/// Appends with retries like a client would: a definite error is retried, an unknown outcome
/// too (the record may then appear twice; the payload tags tell). Returns the acks.
async fn append_retrying(w: &LogStorage, log: LogId, p: Bytes) -> Result<(LogEntryHeader, Bytes)> {
    for _ in 0..50 {
        match w.append(log, 1, p.clone(), None).await {
            Ok(h) => return Ok((h, p)),
            Err(e) if e.code() == Code::Unavailable => {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(anyhow!("append never succeeded"))
}

async fn object_store_faults_lose_no_acknowledged_append(env: Env) -> Result<()> {
    let (faulty, faults) = FaultyStore::new(env.objects.clone());
    faults.fail_fraction(Op::Put, 0.2, 42, objstore::faults::FaultError::Unavailable);
    faults.lose_response(Op::Put, Trigger::Fraction { p: 0.2, seed: 7 });
    let w = env.writer_with(env.config("w"), faulty, env.meta.clone()).await?;
    let log = w.create_log().await?;
    let mut handles = Vec::new();
    for t in 0..4 {
        let w = w.clone();
        handles.push(tokio::spawn(async move {
            let mut acks = Vec::new();
            for i in 0..15 {
                acks.push(append_retrying(&w, log, payload(&format!("t{t}"), i)).await?);
            }
            anyhow::Ok(acks)
        }));
    }
    let mut acks = Vec::new();
    for h in handles {
        acks.extend(h.await??);
    }
    ensure!(faults.injected() > 0, "no fault was injected");
    let all = read_all(&w, log).await?;
    check_gap_free(&all, 0, w.info(log).await?.next_offset)?;
    check_acks_readable(&all, &acks)?;
    // A failed PUT is a definite failure: nothing of it may be readable.
    ensure!(all.len() == acks.len(), "{} entries readable for {} acks", all.len(), acks.len());
    w.shutdown().await;
    Ok(())
}

async fn lost_commit_answers_never_duplicate_or_lose_entries(env: Env) -> Result<()> {
    let meta = FaultyMeta::new(env.meta.clone());
    let w = env.writer_with(env.config("w"), env.objects.clone(), meta.clone()).await?;
    let log = w.create_log().await?;
    meta.lose_applied_every.store(3, Ordering::SeqCst);
    meta.lose_unapplied_every.store(5, Ordering::SeqCst);
    let mut acks = Vec::new();
    for i in 0..30 {
        acks.push(append_retrying(&w, log, payload("amb", i)).await?);
    }
    ensure!(meta.injected.load(Ordering::SeqCst) > 0, "no ambiguity injected");
    let all = read_all(&w, log).await?;
    check_gap_free(&all, 0, w.info(log).await?.next_offset)?;
    check_acks_readable(&all, &acks)?;
    // The writer re-sends the identical transaction, so no entry is committed twice.
    let mut seen = std::collections::HashSet::new();
    for (_, p) in all.values() {
        ensure!(seen.insert(p.clone()), "entry {:?} committed twice", p);
    }
    w.shutdown().await;
    Ok(())
}

/// An applied commit whose answer is lost while the writer's lease ends: the re-send finds
/// the incarnation gone, yet the first attempt committed, so the append is acknowledged (a
/// definite failure here would make a retrying producer write it twice).
async fn commit_applied_before_the_lease_ended_is_acknowledged(env: Env) -> Result<()> {
    let meta = FaultyMeta::new(env.meta.clone());
    let w = env.writer_with(env.config("w"), env.objects.clone(), meta.clone()).await?;
    let log = w.create_log().await?;
    w.append(log, 1, payload("before", 0), None).await?;
    meta.revoke_lease_on_loss.store(true, Ordering::SeqCst);
    meta.lose_applied_every.store(1, Ordering::SeqCst);
    let r = w.append(log, 1, payload("lost", 1), None).await;
    meta.lose_applied_every.store(0, Ordering::SeqCst);
    ensure!(meta.injected.load(Ordering::SeqCst) >= 1, "no answer was lost");
    let h = r.map_err(|e| anyhow!("a committed append was answered {e}"))?;
    let all = read_all(&w, log).await?;
    ensure!(all.get(&h.offset).map(|(_, p)| p) == Some(&payload("lost", 1)));
    ensure!(all.len() == 2, "{} entries", all.len());
    w.shutdown().await;
    Ok(())
}

/// The owner of a stream partition's slot per the member set, as the catalog computes it.
async fn owner_of(env: &Env, route: &logstore::records::StreamRoute, slot: &str) -> Result<String> {
    let (members, _) =
        logstore::membership::live_members(env.meta.as_ref(), &env.cluster, "writer").await?;
    let zone = (slot != "*").then_some(slot);
    let owner =
        logstore::routing::choose_owner(&members, &route.stream_identity, route.partition, zone)
            .context("no live writer")?;
    Ok(owner.id.clone())
}

/// Appends in `slot` until the writer answers other than NOT_OWNER (its member view may lag
/// a membership change by a watch round trip), for at most 10 s.
async fn append_when_owner(
    w: &LogStorage,
    log: LogId,
    slot: &str,
    p: Bytes,
) -> Result<LogEntryHeader> {
    let start = std::time::Instant::now();
    loop {
        match w.append_in_slot(log, slot, 1, p.clone(), None).await {
            Err(LogError::NotOwner { .. }) if start.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            r => return Ok(r?),
        }
    }
}

/// Owner selection (ARCHITECTURE §3): a stream's log is served in a slot only by the writer
/// the owner function picks; others answer NOT_OWNER naming it; when the member set changes,
/// the new owner takes the slot over (fencing the old owner's) and the old one lets go.
async fn stream_logs_are_served_only_by_their_owner(env: Env) -> Result<()> {
    let keys = logstore::keys::Keys::new(&env.cluster);
    let mut writers = BTreeMap::new();
    for id in ["w1", "w2"] {
        let mut c = env.config(id);
        c.advertise = format!("http://{id}.test:1");
        writers.insert(
            id.to_owned(),
            env.writer_with(c, env.objects.clone(), env.meta.clone()).await?,
        );
    }
    let mut logs = Vec::new();
    for partition in 0..8 {
        let route =
            logstore::records::StreamRoute { stream_identity: "stream-x".to_owned(), partition };
        let log =
            logstore::admin::create_log(env.meta.as_ref(), &keys, Some(route.clone())).await?;
        logs.push((log, route));
    }
    let mut owned_by = BTreeMap::new();
    for (i, (log, route)) in logs.iter().enumerate() {
        let owner = owner_of(&env, route, "*").await?;
        let other = if owner == "w1" { "w2" } else { "w1" };
        match writers[other].append_in_slot(*log, "*", 1, payload("x", i), None).await {
            Err(LogError::NotOwner { owner_id, owner: address, .. }) => {
                ensure!(
                    owner_id == owner && address == format!("http://{owner}.test:1"),
                    "{owner_id} {address}"
                );
            }
            r => return Err(anyhow!("non-owner {other} of log {log} answered {r:?}")),
        }
        writers[&owner].append_in_slot(*log, "*", 1, payload("x", i), None).await?;
        owned_by.entry(owner).or_insert_with(Vec::new).push(*log);
    }
    ensure!(owned_by.len() == 2, "8 partitions all went to one of two writers: {owned_by:?}");

    // A third writer joins: the partitions it now owns move to it.
    let mut c3 = env.config("w3");
    c3.advertise = "http://w3.test:1".to_owned();
    let w3 = env.writer_with(c3, env.objects.clone(), env.meta.clone()).await?;
    let mut moved = 0;
    for (i, (log, route)) in logs.iter().enumerate() {
        if owner_of(&env, route, "*").await? != "w3" {
            continue;
        }
        moved += 1;
        let before = w3.head(*log).await?.slot("*").map(|s| s.epoch);
        append_when_owner(&w3, *log, "*", payload("moved", i)).await?;
        let head = w3.head(*log).await?;
        let slot = head.slot("*").context("no * slot")?;
        ensure!(slot.owner.as_ref().map(|o| o.writer_id.as_str()) == Some("w3"), "{:?}", slot);
        ensure!(Some(slot.epoch) != before, "the takeover did not change the slot's epoch");
        // The old owner no longer serves it: FENCED while it still held the slot, then
        // NOT_OWNER naming w3 once its member view has the change.
        for (id, w) in &writers {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                let r = w.append_in_slot(*log, "*", 1, payload("stale", i), None).await;
                match r {
                    Err(LogError::NotOwner { owner_id, .. }) if owner_id == "w3" => break,
                    Err(LogError::NotOwner { .. } | LogError::Fenced { .. })
                        if std::time::Instant::now() < deadline => {}
                    r => return Err(anyhow!("{id} still served log {log}: {r:?}")),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    ensure!(moved > 0, "w3 took no partition of 8");
    // Plain logs (no stream) need no owner: any writer appends in its own zone's slot.
    let plain = writers["w1"].create_log().await?;
    writers["w2"].append(plain, 1, payload("plain", 0), None).await?;
    for (_, w) in writers {
        w.shutdown().await;
    }
    w3.shutdown().await;
    Ok(())
}

/// A reader with caches serves repeated reads from memory, and an object gone from the store
/// is re-resolved through the index and then reported (never served, never a panic).
async fn cached_reads_and_a_missing_object(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    for i in 0..20 {
        w.append(log, 1, payload("c", i), None).await?;
    }
    let reader = logstore::LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster)
        .with_caches(1 << 20, 64);
    let first = reader.read_entries(log, 0, 1000, u64::MAX).await?;
    let (_, misses) = reader.cache_counts();
    let again = reader.read_entries(log, 0, 1000, u64::MAX).await?;
    let (hits, misses_after) = reader.cache_counts();
    ensure!(first == again && first.len() == 20);
    ensure!(
        misses_after == misses && hits >= misses,
        "hits {hits}, misses {misses} → {misses_after}"
    );
    let idx = w.read_index_range(log, 5, 1).await?.remove(0);
    env.objects.delete(&idx.object).await?;
    let fresh = logstore::LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster);
    match fresh.read_entries(log, 5, 1, u64::MAX).await {
        Err(LogError::Corrupt(m)) if m.contains("missing") => {}
        other => return Err(anyhow!("a missing object read as {other:?}")),
    }
    w.shutdown().await;
    Ok(())
}

/// A caching reader that reads runs from the store (catching up) fetches the runs after them
/// in the background, about as many bytes as it read: its next read is served from memory, and
/// reads on ahead in turn, so no read of a reader catching up waits for the store after its
/// first. At the end of the log nothing is read ahead.
async fn a_reader_catching_up_reads_the_next_runs_ahead(env: Env) -> Result<()> {
    use std::sync::atomic::Ordering::Relaxed;
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    // One run per append: each waits for its flush.
    for i in 0..12 {
        w.append(log, 1, Bytes::from(vec![i as u8; 100]), None).await?;
    }
    let (counted, counts) = objstore::counting::CountingStore::new(env.objects.clone());
    let reader =
        logstore::LogReader::new(env.meta.clone(), counted, &env.cluster).with_caches(1 << 20, 64);
    let gets_reach = |n: u64| {
        let counts = counts.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while counts.gets.load(Relaxed) < n && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            // Nothing more comes after it.
            tokio::time::sleep(Duration::from_millis(50)).await;
            counts.gets.load(Relaxed)
        }
    };
    let first = reader.read_entries(log, 0, 3, u64::MAX).await?;
    ensure!(first.len() == 3, "{first:?}");
    // The three runs read, then the three after them, read ahead.
    ensure!(gets_reach(6).await == 6, "GETs after the first read: {counts:?}");
    for (at, want) in [(3u64, 9u64), (6, 12), (9, 12)] {
        let (hits, _) = reader.cache_counts();
        let next = reader.read_entries(log, at, 3, u64::MAX).await?;
        ensure!(next.len() == 3 && next[0].payload[..] == [at as u8; 100], "{next:?}");
        // Served from what was read ahead (its three runs cache hits; reading ahead misses,
        // never hits), and reading on ahead: the three after it, none past the end.
        let hit = reader.cache_counts().0 - hits;
        ensure!(hit == 3, "the read at {at} found {hit} of its 3 runs cached");
        ensure!(gets_reach(want).await == want, "GETs after the read at {at}: {counts:?}");
    }
    w.shutdown().await;
    Ok(())
}

/// The tail cache (ARCHITECTURE §11): what a writer commits is in its reader's byte-range
/// cache before the append is answered, so reading the tail back costs no GET; with the cache
/// off, the same reads GET.
async fn a_writers_reads_of_what_it_just_committed_need_no_get(env: Env) -> Result<()> {
    use std::sync::atomic::Ordering::Relaxed;
    let (counted, counts) = objstore::counting::CountingStore::new(env.objects.clone());
    let mut gets = Vec::new();
    for (id, cache) in [("cached", 1 << 20), ("uncached", 0)] {
        let mut cfg = env.config(id);
        cfg.tail_cache_bytes = cache;
        let w = env.writer_with(cfg, counted.clone(), env.meta.clone()).await?;
        let log = w.create_log().await?;
        for i in 0..10 {
            w.append(log, 1, payload(id, i), None).await?;
        }
        let before = counts.gets.load(Relaxed);
        let read = w.read_entries(log, 0, 100, u64::MAX).await?;
        ensure!(read.len() == 10 && read[9].payload == payload(id, 9), "{id}: {read:?}");
        gets.push(counts.gets.load(Relaxed) - before);
        w.shutdown().await;
    }
    ensure!(
        gets[0] == 0 && gets[1] > 0,
        "GETs reading the tail: cached {}, uncached {}",
        gets[0],
        gets[1]
    );
    Ok(())
}

async fn corrupted_object_is_an_error_never_data(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    let h = w.append(log, 1, Bytes::from_static(b"precious bytes"), None).await?;
    let idx = w.read_index_range(log, h.offset, 1).await?.remove(0);
    let mut bytes = env.objects.get(&idx.object).await?.bytes().await?.to_vec();
    let at = (idx.byte_start + idx.byte_len - 3) as usize; // inside the payload
    bytes[at] ^= 0x20;
    env.objects.put(&idx.object, Bytes::from(bytes).into()).await?;
    // A reader of the store (the writer's own tail cache still holds what it wrote).
    let r = logstore::LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster);
    match r.read_entries(log, h.offset, 1, 1).await {
        Err(LogError::Corrupt(_)) => {}
        other => return Err(anyhow!("a corrupted entry was served: {other:?}")),
    }
    match r.read_entries_by_index(&[idx]).await {
        Err(LogError::Corrupt(_)) => {}
        other => return Err(anyhow!("a corrupted entry was served by index: {other:?}")),
    }
    // A caching reader checks a run once while it is cached: never one that failed its check.
    let cached = logstore::LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster)
        .with_caches(1 << 20, 16);
    for read in 0..2 {
        match cached.read_entries(log, h.offset, 1, 1).await {
            Err(LogError::Corrupt(_)) => {}
            other => return Err(anyhow!("read {read} from the cache served {other:?}")),
        }
    }
    ensure!(cached.cache_bytes() > 0, "the corrupted run was not cached: the check proves nothing");
    w.shutdown().await;
    Ok(())
}

async fn readers_never_see_the_high_watermark_go_back(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    let writer = {
        let w = w.clone();
        tokio::spawn(async move {
            for i in 0..40 {
                w.append(log, 2, payload("hw", i), None).await?;
            }
            anyhow::Ok(())
        })
    };
    let reader = env.writer("r").await?;
    let mut last_hw = 0;
    let mut rounds = 0;
    while !writer.is_finished() || rounds < 3 {
        let info = reader.info(log).await?;
        ensure!(
            info.next_offset >= last_hw,
            "high watermark went back {last_hw} → {}",
            info.next_offset
        );
        last_hw = info.next_offset;
        let entries = reader.read_entries(log, 0, u64::MAX, u64::MAX).await?;
        let end = entries.last().map_or(0, |e| e.header.end_offset());
        let after = reader.info(log).await?.next_offset;
        ensure!(end <= after, "read returned data up to {end}, past the high watermark {after}");
        ensure!(
            end >= last_hw,
            "read ended at {end}, below a high watermark already seen ({last_hw})"
        );
        last_hw = last_hw.max(after);
        rounds += 1;
    }
    writer.await??;
    w.shutdown().await;
    reader.shutdown().await;
    Ok(())
}

async fn bad_input_gets_clear_errors(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    let unknown = LogId(log.0 + 1_000_000);
    let code = |r: Result<LogEntryHeader, LogError>| r.err().map(|e| e.code());
    ensure!(code(w.append(unknown, 1, payload("x", 0), None).await) == Some(Code::NotFound));
    ensure!(matches!(w.read_entries(unknown, 0, 1, 1).await, Err(LogError::NotFound(_))));
    ensure!(matches!(w.info(unknown).await, Err(LogError::NotFound(_))));
    ensure!(code(w.append(log, 0, payload("x", 0), None).await) == Some(Code::InvalidArgument));
    let huge = Bytes::from(vec![0u8; w.config().max_entry_bytes + 1]);
    ensure!(code(w.append(log, 1, huge, None).await) == Some(Code::InvalidArgument));
    ensure!(matches!(
        w.read_entries(log, u64::MAX, 1, 1).await,
        Err(LogError::OffsetOutOfRange { .. })
    ));
    ensure!(matches!(w.read_entries(log, 0, 0, 1).await, Err(LogError::InvalidArgument(_))));
    // Empty log: a distinct answer for first/last.
    ensure!(w.get_first_offset(log).await?.is_none() && w.get_last_offset(log).await?.is_none());
    for i in 0..3 {
        w.append(log, 1, payload("t", i), None).await?;
    }
    w.soft_trim(log, 2).await?;
    ensure!(matches!(
        w.read_entries(log, 1, 1, 1).await,
        Err(LogError::OffsetOutOfRange { start: 2, .. })
    ));
    ensure!(w.get_first_offset(log).await?.map(|h| h.offset) == Some(2));
    ensure!(matches!(w.soft_trim(log, 100).await, Err(LogError::OffsetOutOfRange { .. })));
    ensure!(w.soft_trim(log, 1).await? == 2, "soft trim moved the start back");
    w.delete_log(log).await?;
    ensure!(matches!(w.read_entries(log, 2, 1, 1).await, Err(LogError::NotFound(_))));
    ensure!(code(w.append(log, 1, payload("x", 0), None).await) == Some(Code::NotFound));
    ensure!(matches!(w.delete_log(log).await, Err(LogError::NotFound(_))));
    ensure!(w.create_log().await? != log, "a log id was reused");
    w.shutdown().await;
    Ok(())
}

async fn conditional_append_commits_only_at_the_expected_offset(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    let h = w.append(log, 3, payload("c", 0), Some(0)).await?;
    ensure!(h.offset == 0);
    match w.append(log, 1, payload("c", 1), Some(0)).await {
        Err(LogError::OffsetMismatch { expected: 0, actual: 3, .. }) => {}
        other => return Err(anyhow!("stale expected offset answered {other:?}")),
    }
    // In one flush: a matching, a stale and an unconditional entry; the stale one fails alone.
    let (w1, w2, w3) = (w.clone(), w.clone(), w.clone());
    let (r1, r2, r3) = tokio::join!(
        w1.append(log, 1, payload("c", 2), Some(3)),
        w2.append(log, 1, payload("c", 3), Some(99)),
        w3.append(log, 1, payload("c", 4), None),
    );
    ensure!(r1?.offset == 3);
    ensure!(matches!(r2, Err(LogError::OffsetMismatch { expected: 99, .. })));
    let r3 = r3?;
    let all = read_all(&w, log).await?;
    check_gap_free(&all, 0, w.info(log).await?.next_offset)?;
    ensure!(all.get(&r3.offset).map(|(_, p)| p) == Some(&payload("c", 4)));
    ensure!(
        all.values().all(|(_, p)| *p != payload("c", 3)),
        "the mismatched entry became readable"
    );
    w.shutdown().await;
    Ok(())
}

/// A pipeline's appends (one chain) commit in their order or not at all past the first that
/// fails: an append whose chain broke after it was admitted fails with nothing applied, the
/// appends around it in its flush commit with their own bytes, and a broken chain refuses
/// further appends at once. A failed commit breaks its chain.
async fn a_failed_append_fails_its_chains_later_appends_and_nothing_else(env: Env) -> Result<()> {
    let (faulty, faults) = FaultyStore::new(env.objects.clone());
    let mut cfg = env.config("w");
    // Long enough that the appends below are admitted into one flush.
    cfg.flush_interval = Duration::from_millis(300);
    let w = env.writer_with(cfg, faulty, env.meta.clone()).await?;
    let log = w.create_log().await?;
    let slot = w.config().zone.clone();
    let first = w.append(log, 1, payload("k", 0), None).await?;
    let chain = Arc::new(logstore::Chain::default());
    let chained = || logstore::Conditions { chain: Some(chain.clone()), ..Default::default() };
    let before = w.submit_in_slot(log, &slot, 1, payload("k", 1), Default::default()).await?;
    let doomed = w.submit_in_slot(log, &slot, 1, payload("k", 2), chained()).await?;
    // An earlier append of the chain fails after this one was admitted.
    chain.fail(log, &LogError::Unavailable { message: "test".into(), outcome_unknown: true });
    let after = w.submit_in_slot(log, &slot, 2, payload("k", 3), Default::default()).await?;
    match w.submit_in_slot(log, &slot, 1, payload("k", 4), chained()).await {
        Err(e) if e.code() == Code::Unavailable && !e.outcome_unknown() => {}
        other => return Err(anyhow!("a broken chain admitted an append: {other:?}")),
    }
    let (before, doomed, after) = (before.await?, doomed.await, after.await?);
    match doomed {
        Err(e) if e.code() == Code::Unavailable && !e.outcome_unknown() => {}
        other => return Err(anyhow!("an append of a broken chain answered {other:?}")),
    }
    ensure!(before.offset == first.offset + 1 && after.offset == before.offset + 1);
    let all = read_all(&w, log).await?;
    check_gap_free(&all, 0, w.info(log).await?.next_offset)?;
    ensure!(all.get(&before.offset).map(|(_, p)| p) == Some(&payload("k", 1)));
    ensure!(
        all.get(&after.offset).map(|(h, p)| (h.record_count, p)) == Some((2, &payload("k", 3))),
        "the append after the culled one reads back other bytes"
    );
    ensure!(all.values().all(|(_, p)| *p != payload("k", 2)), "the culled append is readable");

    // A commit that fails breaks its chain: the chain's next append is refused.
    let chain = Arc::new(logstore::Chain::default());
    let chained = || logstore::Conditions { chain: Some(chain.clone()), ..Default::default() };
    faults.fail_nth(Op::Put, 1, objstore::faults::FaultError::Unavailable);
    let failed = w.submit_in_slot(log, &slot, 1, payload("k", 5), chained()).await?.await;
    ensure!(failed.is_err(), "the PUT failure was not answered: {failed:?}");
    ensure!(chain.broken().is_some(), "a failed append left its chain whole");
    ensure!(w.submit_in_slot(log, &slot, 1, payload("k", 6), chained()).await.is_err());
    w.shutdown().await;
    Ok(())
}

async fn index_pages_spill_and_hard_trim_removes_them(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    for i in 0..30 {
        w.append(log, 1, payload("pg", i), None).await?; // one flush each: one locator each
    }
    let head = w.head(log).await?;
    ensure!(head.recent.len() <= logstore::RECENT_MAX);
    let pages = env
        .meta
        .range(metadata::RangeRequest::prefix(
            logstore::keys::Keys::new(&env.cluster).index_prefix(log),
        ))
        .await?;
    ensure!(pages.count >= 2, "30 locators made {} pages", pages.count);
    let all = read_all(&w, log).await?;
    check_gap_free(&all, 0, 30)?;
    for i in 0..30 {
        ensure!(all.get(&(i as u64)).map(|(_, p)| p) == Some(&payload("pg", i)));
    }
    w.hard_trim(log, 20).await?;
    let left = env
        .meta
        .range(metadata::RangeRequest::prefix(
            logstore::keys::Keys::new(&env.cluster).index_prefix(log),
        ))
        .await?;
    ensure!(left.count < pages.count, "hard trim kept every page");
    ensure!(
        w.read_entries(log, 20, 100, u64::MAX).await?.len() == 10,
        "entries above the trim were lost"
    );
    ensure!(matches!(w.read_entries(log, 5, 1, 1).await, Err(LogError::OffsetOutOfRange { .. })));
    w.shutdown().await;
    Ok(())
}

async fn scans_walk_many_index_pages_in_few_metadata_reads(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    let n = 170u64; // one flush, one locator each: about 20 index pages, past one listing
    for i in 0..n {
        w.append(log, 1, payload("mp", i as usize), None).await?;
    }
    let (meta, counts) = metadata::counting::CountingMeta::new(env.meta.clone());
    let reader = logstore::LogReader::new(meta, env.objects.clone(), &env.cluster);
    let reads = || counts.reads.load(std::sync::atomic::Ordering::Relaxed);
    for start in [0, 1, 7, 8, 63, 127, 128, 129, 150, n - 3] {
        let before = reads();
        let got = reader.read_entries(log, start, 10_000, u64::MAX).await?;
        let used = reads() - before;
        let offsets: Vec<u64> = got.iter().map(|e| e.header.offset).collect();
        ensure!(offsets == (start..n).collect::<Vec<_>>(), "from {start}: {offsets:?}");
        for e in &got {
            ensure!(e.payload == payload("mp", e.header.offset as usize), "{}", e.header.offset);
        }
        // A transaction (head, start, page listing), a listing per 16 pages and a read of
        // the uncached pages of each: not two reads per page.
        ensure!(used <= 6, "a scan from {start} made {used} metadata reads");
    }
    w.shutdown().await;
    Ok(())
}

async fn acknowledged_appends_survive_a_writer_restart(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    let mut acks = Vec::new();
    for i in 0..10 {
        acks.push((w.append(log, 1, payload("r", i), None).await?, payload("r", i)));
    }
    w.shutdown().await;
    let again = env.writer("w").await?; // same id: the old incarnation revoked its lease
    let h = again.append(log, 1, payload("r", 10), None).await?;
    ensure!(h.offset == 10, "restarted writer appended at {}", h.offset);
    let all = read_all(&again, log).await?;
    for (h, p) in &acks {
        ensure!(all.get(&h.offset) == Some(&(*h, p.clone())));
    }
    again.shutdown().await;
    Ok(())
}

async fn full_buffer_answers_resource_exhausted(env: Env) -> Result<()> {
    let (slow, faults) = FaultyStore::new(env.objects.clone());
    faults.delay(Op::Put, Duration::from_secs(2));
    let mut cfg = env.config("w");
    cfg.buffer_bytes = 1000;
    cfg.max_entry_bytes = 600;
    cfg.append_timeout = Duration::from_millis(200);
    let w = env.writer_with(cfg, slow, env.meta.clone()).await?;
    let log = w.create_log().await?;
    let first = {
        let w = w.clone();
        tokio::spawn(async move { w.append(log, 1, Bytes::from(vec![1u8; 600]), None).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    match w.append(log, 1, Bytes::from(vec![2u8; 600]), None).await {
        Err(LogError::ResourceExhausted(_)) => {}
        other => return Err(anyhow!("append into a full buffer answered {other:?}")),
    }
    first.await??;
    w.shutdown().await;
    Ok(())
}

async fn timestamp_search_and_retention_use_running_maxima(env: Env) -> Result<()> {
    let clock = Arc::new(ManualClock::default());
    let w = env.writer_with_clock("w", clock.clone()).await?;
    let log_id = w.create_log().await?;
    let log = Log::new(w.clone(), log_id);
    // Timestamps not monotone: 100, 300, 200, 400, 250 (running max 100, 300, 300, 400, 400).
    for ts in [100, 300, 200, 400, 250] {
        clock.0.store(ts, Ordering::SeqCst);
        log.append(1, Bytes::from(vec![0u8; 10])).await?;
    }
    let at = |t| {
        let log = log.clone();
        async move { anyhow::Ok(log.find_by_timestamp(t).await?.map(|h| h.offset)) }
    };
    ensure!(at(50).await? == Some(0));
    ensure!(at(150).await? == Some(1));
    ensure!(at(250).await? == Some(1), "running max, not the entry's own timestamp");
    ensure!(at(301).await? == Some(3));
    ensure!(at(401).await? == None);
    // Retention by time: entries whose running max is below now − retention go.
    ensure!(log.compute_retention_trim_offset(Some(100), None, 401).await? == 3);
    ensure!(log.compute_retention_trim_offset(Some(1000), None, 401).await? == 0);
    // By bytes: keep the newest 25 bytes → the last two entries (20 bytes), not three (30).
    ensure!(log.compute_retention_trim_offset(None, Some(25), 0).await? == 3);
    ensure!(log.compute_retention_trim_offset(None, Some(1000), 0).await? == 0);
    ensure!(
        log.compute_retention_trim_offset(Some(100), Some(35), 401).await? == 3,
        "the stricter bound wins"
    );
    w.shutdown().await;
    Ok(())
}

async fn index_reads_fetch_entries_without_resolving_offsets(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    let (w1, w2, w3) = (w.clone(), w.clone(), w.clone());
    // One flush: adjacent byte ranges in one object, coalesced into one GET.
    let _ = tokio::join!(
        w1.append(log, 1, payload("i", 0), None),
        w2.append(log, 2, payload("i", 1), None),
        w3.append(log, 3, payload("i", 2), None),
    );
    w.append(log, 1, payload("i", 3), None).await?;
    let idx = w.read_index_range(log, 0, 10).await?;
    ensure!(idx.len() == 4, "{} index entries", idx.len());
    ensure!(w.read_index_range(log, 0, 2).await?.len() == 2);
    let mut reversed = idx.clone();
    reversed.reverse();
    let entries = w.read_entries_by_index(&reversed).await?;
    let direct = w.read_entries(log, 0, u64::MAX, u64::MAX).await?;
    let mut back = entries.clone();
    back.reverse();
    ensure!(back == direct, "index reads differ from offset reads");
    w.shutdown().await;
    Ok(())
}

async fn lost_lease_ends_the_incarnation_and_the_writer_registers_again(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    let mut acks = vec![append_retrying(&w, log, payload("before", 0)).await?];
    let first = w.incarnation().await;
    revoke_lease_of(&env, "w").await?;
    // Appends fail (never succeed under the dead incarnation) until the writer has registered
    // again; then they succeed under the new one.
    let mut failures = 0;
    for i in 0..20 {
        match w.append(log, 1, payload("after", i), None).await {
            Ok(h) => acks.push((h, payload("after", i))),
            Err(e) => {
                ensure!(e.code() == Code::Unavailable, "lease loss answered {e}");
                failures += 1;
            }
        }
    }
    ensure!(
        failures > 0,
        "the first append after the lease loss succeeded under the dead incarnation"
    );
    ensure!(w.incarnation().await > first, "no new incarnation after the lease was lost");
    ensure!(acks.len() > 1, "no append succeeded after registering again");
    let all = read_all(&w, log).await?;
    check_gap_free(&all, 0, w.info(log).await?.next_offset)?;
    check_acks_readable(&all, &acks)?;
    ensure!(all.len() == acks.len(), "a failed append became readable");
    w.shutdown().await;
    Ok(())
}

async fn log_fenced_by_a_dead_writer_is_taken_over(env: Env) -> Result<()> {
    let fencer = env.writer("fencer").await?;
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    w.append(log, 1, payload("x", 0), None).await?;
    fencer.fence(log).await?;
    ensure!(
        w.append(log, 1, payload("x", 1), None).await.is_err(),
        "appended to a log whose fencer lives"
    );
    fencer.abort();
    revoke_lease_of(&env, "fencer").await?;
    let h = w.append(log, 1, payload("x", 2), None).await?;
    ensure!(h.offset == 1);
    ensure!(w.info(log).await?.state == logstore::records::LogState::Normal);
    w.shutdown().await;
    Ok(())
}

async fn kafka_node_ids_are_distinct_and_kept_across_restarts(env: Env) -> Result<()> {
    use logstore::membership::node_id;
    // Eight members asking at once: eight different ids, 0 to 7.
    let asks = (0..8).map(|i| {
        let meta = env.meta.clone();
        let cluster = env.cluster.clone();
        async move { node_id(meta.as_ref(), &cluster, &format!("w{i}")).await }
    });
    let mut ids: Vec<i32> = futures::future::try_join_all(asks).await?;
    let again = node_id(env.meta.as_ref(), &env.cluster, "w3").await?;
    ids.sort();
    ensure!(ids == (0..8).collect::<Vec<_>>(), "ids handed out: {ids:?}");
    ensure!(again == node_id(env.meta.as_ref(), &env.cluster, "w3").await?);
    // A writer that serves Kafka publishes its id and address in its member record.
    let mut cfg = env.config("kafka-writer");
    cfg.kafka_advertise = "127.0.0.1:9092".to_owned();
    let w = env.writer_with(cfg, env.objects.clone(), env.meta.clone()).await?;
    let (members, _) =
        logstore::membership::live_members(env.meta.as_ref(), &env.cluster, "writer").await?;
    let me = members.iter().find(|m| m.id == "kafka-writer").context("not registered")?;
    ensure!(me.kafka == "127.0.0.1:9092" && me.node_id == 8, "{me:?}");
    w.shutdown().await;
    Ok(())
}

/// A log's Kafka transactions are facts of its head (ARCHITECTURE §12): a transaction's first
/// batch opens it at its offset, holding the last stable offset there (never back) while later
/// appends move the high watermark; its marker ends it, and an abort joins the aborted index.
/// Aborts beyond the head's recent ones are paged out and still found, from another process's
/// reader too; a hard trim removes those wholly below the start.
async fn transactions_set_the_last_stable_offset_and_the_aborted_index(env: Env) -> Result<()> {
    use logstore::TxnMark::{Data, End};
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    let zone = w.config().zone.clone();
    let append = |mark: Option<logstore::TxnMark>, tag: &'static str, i: usize| {
        let (w, zone) = (w.clone(), zone.clone());
        async move {
            let opts = logstore::Conditions { txn: mark, ..Default::default() };
            let c = w.submit_in_slot(log, &zone, 1, payload(tag, i), opts).await?;
            anyhow::Ok(c.await?.offset)
        }
    };
    let lso =
        |w: LogStorage| async move { anyhow::Ok(w.reader().info(log).await?.last_stable_offset) };
    ensure!(append(None, "plain", 0).await? == 0);
    ensure!(lso(w.clone()).await? == 1, "no transaction: the high watermark");
    ensure!(append(Some(Data { producer_id: 7 }), "t7", 0).await? == 1);
    ensure!(append(None, "plain", 1).await? == 2);
    ensure!(append(Some(Data { producer_id: 7 }), "t7", 1).await? == 3);
    ensure!(append(Some(Data { producer_id: 8 }), "t8", 0).await? == 4);
    ensure!(lso(w.clone()).await? == 1, "held at 7's first batch");
    // The writer's metrics read them from what its commits saw: (log, high watermark, LSO).
    ensure!(w.served_offsets() == [(log, 5, 1)], "{:?}", w.served_offsets());
    ensure!(append(Some(End { producer_id: 7, abort: true }), "abort7", 0).await? == 5);
    ensure!(lso(w.clone()).await? == 4, "then at 8's");
    ensure!(append(Some(End { producer_id: 8, abort: false }), "commit8", 0).await? == 6);
    ensure!(lso(w.clone()).await? == 7, "none open");
    ensure!(w.served_offsets() == [(log, 7, 7)], "{:?}", w.served_offsets());
    let aborted = w.reader().aborted_txns(log, 0, 7).await?;
    let seen: Vec<(i64, u64, u64)> =
        aborted.iter().map(|a| (a.producer_id, a.first_offset, a.last_offset)).collect();
    ensure!(seen == [(7, 1, 5)], "only 7's abort: {seen:?}");
    ensure!(w.reader().aborted_txns(log, 6, 7).await?.is_empty(), "ended before 6");
    ensure!(w.reader().aborted_txns(log, 0, 1).await?.is_empty(), "began at 1");
    // A marker for a transaction with nothing here changes nothing.
    ensure!(append(Some(End { producer_id: 9, abort: true }), "abort9", 0).await? == 7);
    // Many aborts: the oldest are paged out of the head, one key each, and still found.
    let n = logstore::ABORTED_RECENT + 10;
    for i in 0..n {
        let pid = 100 + i as i64;
        append(Some(Data { producer_id: pid }), "tx", i).await?;
        append(Some(End { producer_id: pid, abort: true }), "abort", i).await?;
    }
    let head = w.head(log).await?;
    let spilled = (n + 1 - logstore::ABORTED_RECENT) as u64;
    ensure!(head.aborted.len() == logstore::ABORTED_RECENT && head.aborted_paged == spilled);
    let other = env.writer("other").await?;
    let all = other.reader().aborted_txns(log, 0, u64::MAX).await?;
    ensure!(all.len() == n + 1, "{} aborted of {}", all.len(), n + 1);
    ensure!(all.windows(2).all(|p| p[0].last_offset < p[1].last_offset), "by marker offset");
    let late = other.reader().aborted_txns(log, 20, u64::MAX).await?;
    ensure!(late.iter().all(|a| a.last_offset >= 20) && late.len() == n - 6, "{}", late.len());
    let keys = logstore::keys::Keys::new(&env.cluster);
    let paged = |from: u64| {
        let (meta, start, end) =
            (env.meta.clone(), keys.aborted(log, from), keys.aborted(log, u64::MAX));
        async move { anyhow::Ok(meta.range(metadata::RangeRequest::between(start, end)).await?.count) }
    };
    ensure!(paged(0).await? == spilled as i64);
    // The paged-out ones all ended below 30 (7's at 5, the next ten's at 9, 11, … 27).
    w.hard_trim(log, 30).await?;
    ensure!(paged(0).await? == 0, "trimmed aborts below the start stay");
    let kept = other.reader().aborted_txns(log, 30, u64::MAX).await?;
    ensure!(kept.len() == n - 11, "{} aborts at or above 30", kept.len());
    // A long transaction aborted after six short ones that began after it, all paged out: a
    // rewrite of its first batch's offset finds it among them, reading two keys at a time
    // (the short ones, which do not overlap, are read past, not taken as the end).
    let long = append(Some(Data { producer_id: 50 }), "long", 0).await?;
    for i in 0..6 {
        append(Some(Data { producer_id: 300 + i }), "short", 0).await?;
        append(Some(End { producer_id: 300 + i, abort: true }), "abort", 0).await?;
    }
    let long_end = append(Some(End { producer_id: 50, abort: true }), "abort", 0).await?;
    for i in 0..logstore::ABORTED_RECENT as i64 {
        append(Some(Data { producer_id: 400 + i }), "push", 0).await?;
        append(Some(End { producer_id: 400 + i, abort: true }), "abort", 0).await?;
    }
    let got = other.reader().aborted_overlapping_in_pages(log, long, long + 1, 2).await?;
    let seen: Vec<(i64, u64, u64)> =
        got.iter().map(|a| (a.producer_id, a.first_offset, a.last_offset)).collect();
    ensure!(seen == [(50, long, long_end)], "{seen:?}");
    let every = other.reader().aborted_overlapping_in_pages(log, 30, u64::MAX, 3).await?;
    ensure!(every.len() == n - 11 + 7 + logstore::ABORTED_RECENT, "{}", every.len());
    other.shutdown().await;
    w.shutdown().await;
    Ok(())
}
