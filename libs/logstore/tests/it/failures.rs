//! The writer's and the maintenance roles' failure paths (ARCHITECTURE §3.4, §3.10, §5,
//! invariants 1 and 7): a definite failure fails the log's appends admitted before it, so none
//! commits ahead of the one to be retried; one lease loss is one new incarnation; an append
//! that gets buffer room during a drain is answered; concurrent trims never move the start
//! back; a log that cannot be compacted does not stop the cycle for the others.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, ensure};
use bytes::Bytes;
use logstore::keys::Keys;
use logstore::{LogError, LogReader};

use crate::env::Env;
use crate::faulty_meta::FaultyMeta;

both_envs!(
    an_append_admitted_before_a_failed_block_allocation_fails_with_it,
    one_lease_loss_is_one_reincarnation_even_when_an_old_commit_fails_late,
    an_append_that_gets_buffer_room_during_a_drain_is_answered,
    a_trim_racing_another_never_moves_the_start_back,
    appends_while_the_writer_cannot_re_register_are_answered_unavailable,
    an_activate_retried_after_its_answer_was_lost_succeeds,
    a_commit_refused_after_an_unanswered_attempt_is_outcome_unknown,
);

/// ARCHITECTURE §3.8: once an attempt of a commit may have applied, its outcome is unknown,
/// whatever a re-send is answered. Here the first attempt applies and its answer is lost, and
/// the re-send meets a full store (NOSPACE, a definite error): the append must be answered
/// outcome unknown (never a definite, retryable failure a client retries into a duplicate),
/// and the incarnation ends before anything later commits.
async fn a_commit_refused_after_an_unanswered_attempt_is_outcome_unknown(env: Env) -> Result<()> {
    let (faulty, w, log) = faulty_writer(&env).await?;
    let first = w.incarnation().await;
    *lock(&faulty.lose_then_fail) = Some((
        Keys::new(&env.cluster).head(log),
        metadata::MetaError::NoSpace("injected: etcdserver: mvcc: database space exceeded".into()),
    ));
    let r = w.append(log, 1, Bytes::from_static(b"b"), None).await;
    ensure!(
        faulty.injected.load(Ordering::SeqCst) == 2,
        "the loss and the refusal were not injected"
    );
    match r {
        Err(e) if e.outcome_unknown() => {}
        other => return Err(anyhow!("an append that may have committed was answered {other:?}")),
    }
    // It did commit, once; the writer goes on under a new incarnation.
    let got = w.read_entries(log, 0, 10, u64::MAX).await?;
    let payloads: Vec<_> = got.iter().map(|e| e.payload.clone()).collect();
    ensure!(payloads == [Bytes::from_static(b"a"), Bytes::from_static(b"b")], "{payloads:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let h = loop {
        match w.append(log, 1, Bytes::from_static(b"c"), None).await {
            Ok(h) => break h,
            Err(e) if e.code() == codes::Code::Unavailable && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    ensure!(h.offset == 2, "{h:?}");
    ensure!(w.incarnation().await != first, "the incarnation went on after an unknown outcome");
    w.shutdown().await;
    Ok(())
}

/// A writer "w" over a fault-injecting metadata store, with one log holding one entry.
async fn faulty_writer(
    env: &Env,
) -> Result<(Arc<FaultyMeta>, logstore::LogStorage, logstore::LogId)> {
    let faulty = FaultyMeta::new(env.meta.clone());
    let w = env.writer_with(env.config("w"), env.objects.clone(), faulty.clone()).await?;
    let log = w.create_log().await?;
    w.append(log, 1, Bytes::from_static(b"a"), None).await?;
    Ok((faulty, w, log))
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn an_append_admitted_before_a_failed_block_allocation_fails_with_it(env: Env) -> Result<()> {
    let faulty = FaultyMeta::new(env.meta.clone());
    let mut cfg = env.config("w");
    cfg.seq_block = 1; // every flush but the first allocates a block
    let w = env.writer_with(cfg, env.objects.clone(), faulty.clone()).await?;
    let log = w.create_log().await?;
    w.append(log, 1, Bytes::from_static(b"warm"), None).await?;
    // The next block allocation answers a definite failure after 300 ms, while a second
    // append (admitted after the first, before its failure) waits in the buffer.
    *lock(&faulty.fail_put) =
        Some((Keys::new(&env.cluster).next_seq(), Duration::from_millis(300)));
    let (w1, w2) = (w.clone(), w.clone());
    let first =
        tokio::spawn(async move { w1.append(log, 1, Bytes::from_static(b"1"), None).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second =
        tokio::spawn(async move { w2.append(log, 1, Bytes::from_static(b"2"), None).await });
    let (first, second) = (first.await?, second.await?);
    ensure!(faulty.injected.load(Ordering::SeqCst) == 1, "the allocation failure was not injected");
    ensure!(first.is_err(), "the first append survived its flush's failure: {first:?}");
    ensure!(
        second.is_err(),
        "an append admitted before the failure committed ahead of the failed one: {second:?}"
    );
    // Appends admitted after the failure commit as usual.
    let h = w.append(log, 1, Bytes::from_static(b"3"), None).await?;
    let got = w.read_entries(log, 0, 10, u64::MAX).await?;
    ensure!(h.offset == 1 && got.len() == 2 && got[1].payload == Bytes::from_static(b"3"));
    w.shutdown().await;
    Ok(())
}

async fn one_lease_loss_is_one_reincarnation_even_when_an_old_commit_fails_late(
    env: Env,
) -> Result<()> {
    let (faulty, w, log) = faulty_writer(&env).await?;
    let first = w.incarnation().await;
    // The next commit is held 4 s; meanwhile the lease is lost and the writer re-registers.
    let keys = Keys::new(&env.cluster);
    *lock(&faulty.apply_late) = Some((keys.low_water("w"), Duration::from_secs(4)));
    let w1 = w.clone();
    let held = tokio::spawn(async move { w1.append(log, 1, Bytes::from_static(b"b"), None).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let member = env.meta.get(&keys.member("writer", "w")).await?.context("not registered")?;
    env.meta.lease_revoke(member.lease).await?;
    let deadline = Instant::now() + Duration::from_secs(15);
    while w.incarnation().await == first {
        ensure!(Instant::now() < deadline, "the writer never re-registered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let second = w.incarnation().await;
    // The old incarnation's commit fails its member compare when it lands: that ends nothing.
    let held = held.await?;
    ensure!(
        matches!(&held, Err(LogError::Unavailable { .. })),
        "a commit under a revoked lease was answered {held:?}"
    );
    for p in [b"c", b"d", b"e"] {
        w.append(log, 1, Bytes::from_static(p), None)
            .await
            .map_err(|e| anyhow!("an append after the re-registration failed: {e}"))?;
    }
    ensure!(w.incarnation().await == second, "a second reincarnation for one lease loss");
    w.shutdown().await;
    Ok(())
}

async fn an_append_that_gets_buffer_room_during_a_drain_is_answered(env: Env) -> Result<()> {
    use objstore::faults::{Action, FaultyStore, Op, Trigger};
    let (slow, faults) = FaultyStore::new(env.objects.clone());
    let mut cfg = env.config("w");
    cfg.buffer_bytes = 100;
    cfg.max_entry_bytes = 100;
    let w = env.writer_with(cfg, slow, env.meta.clone()).await?;
    let log = w.create_log().await?;
    // The first append takes the whole buffer, its PUT stalls; the second waits for room.
    faults.add(Op::Put, Trigger::Nth(1), Action::Delay(Duration::from_secs(1)));
    let (w1, w2) = (w.clone(), w.clone());
    let first =
        tokio::spawn(async move { w1.append(log, 1, Bytes::from(vec![1; 100]), None).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second =
        tokio::spawn(async move { w2.append(log, 1, Bytes::from(vec![2; 100]), None).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The drain begins while the buffer is empty: the flusher may stop before room frees.
    let w3 = w.clone();
    let drain = tokio::spawn(async move { w3.drain().await });
    let first = first.await?;
    ensure!(first.is_ok(), "the accepted append was not committed by the drain: {first:?}");
    let second = tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .map_err(|_| anyhow!("an append admitted during the drain was never answered"))??;
    match &second {
        Ok(_) => {}
        Err(LogError::Unavailable { outcome_unknown: false, .. }) => {}
        other => return Err(anyhow!("answered {other:?}: neither committed nor refused")),
    }
    drain.await?;
    Ok(())
}

async fn a_trim_racing_another_never_moves_the_start_back(env: Env) -> Result<()> {
    let faulty = FaultyMeta::new(env.meta.clone());
    let w = env.writer_with(env.config("w"), env.objects.clone(), faulty.clone()).await?;
    let log = w.create_log().await?;
    for i in 0..30u8 {
        w.append(log, 1, Bytes::from(vec![i]), None).await?;
    }
    // Right after the trim to 10 read the start, another client's trim to 20 lands.
    let other = LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster);
    let fired = Arc::new(AtomicBool::new(false));
    let hook: crate::faulty_meta::GetHook = {
        let fired = fired.clone();
        Arc::new(move || {
            let (other, fired) = (other.clone(), fired.clone());
            Box::pin(async move {
                let r = logstore::retention::soft_trim(&other, log, 20).await;
                fired.store(r == Ok(20), Ordering::SeqCst);
            })
        })
    };
    *lock(&faulty.after_read) = Some((Keys::new(&env.cluster).start(log), hook));
    let got = w.soft_trim(log, 10).await?;
    ensure!(fired.load(Ordering::SeqCst), "the racing trim did not run");
    let start = w.info(log).await?.first_offset;
    ensure!(start == 20 && got == 20, "the start went back to {start} (trim answered {got})");
    let read = w.read_entries(log, 20, 1, u64::MAX).await?;
    ensure!(read[0].payload == Bytes::from(vec![20u8]));
    w.shutdown().await;
    Ok(())
}

async fn appends_while_the_writer_cannot_re_register_are_answered_unavailable(
    env: Env,
) -> Result<()> {
    let (faulty, w, log) = faulty_writer(&env).await?;
    // The lease goes, and the metadata store then takes no writes: re-registering hangs.
    let keys = Keys::new(&env.cluster);
    let member = env.meta.get(&keys.member("writer", "w")).await?.context("not registered")?;
    faulty.hang_writes.store(true, Ordering::SeqCst);
    env.meta.lease_revoke(member.lease).await?;
    let deadline = Instant::now() + Duration::from_secs(15);
    while faulty.hung.load(Ordering::SeqCst) == 0 {
        ensure!(Instant::now() < deadline, "the writer never tried to re-register");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let t = Instant::now();
    let got = tokio::time::timeout(
        Duration::from_secs(10),
        w.append(log, 1, Bytes::from_static(b"b"), None),
    )
    .await
    .map_err(|_| anyhow!("an append waited 10 s on a writer that is re-registering"))?;
    ensure!(
        matches!(&got, Err(LogError::Unavailable { outcome_unknown: false, .. })),
        "answered {got:?} after {:?}",
        t.elapsed()
    );
    w.abort();
    Ok(())
}

async fn an_activate_retried_after_its_answer_was_lost_succeeds(env: Env) -> Result<()> {
    let (faulty, w, log) = faulty_writer(&env).await?;
    let epoch = w.fence(log).await?;
    // The activation applies; its answer is lost, and the caller tries again.
    faulty.lose_applied_every.store(1, Ordering::SeqCst);
    let first = w.activate(log, epoch).await;
    faulty.lose_applied_every.store(0, Ordering::SeqCst);
    let again = w.activate(log, epoch).await;
    ensure!(
        faulty.injected.load(Ordering::SeqCst) >= 1 && first.is_ok() && again.is_ok(),
        "activate answered {first:?}, then {again:?}"
    );
    ensure!(w.info(log).await?.state == logstore::records::LogState::Normal);
    w.append(log, 1, Bytes::from_static(b"b"), None).await?;
    w.shutdown().await;
    Ok(())
}
