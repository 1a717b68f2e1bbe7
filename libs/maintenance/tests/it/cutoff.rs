//! What holds the cleaner's cutoff back, and that nothing idle holds it forever (ARCHITECTURE
//! §5, invariant 4): an idle writer gives up its sequence block, an idle log's head is spilled
//! and compacted, a trimmed log's chunks hold no floor, and a commit whose outcome stayed
//! unknown past its deadline ends the writer's incarnation before anything later commits, so
//! the cutoff never passes a sequence that may still land in the index.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, ensure};
use bytes::Bytes;
use logstore::keys::Keys;
use logstore::{LogId, LogReader, LogStorage, SystemClock};
use maintenance::cleaner::{CleanReport, Cleaner, Holder, read_cutoff};
use maintenance::compactor::{CompactorConfig, CycleReport, IdleLogs, compact_all};
use objstore::object_store::ObjectStoreExt;

use crate::env::Env;
use crate::faulty_meta::FaultyMeta;

both_envs!(
    an_idle_writer_that_never_appended_holds_back_neither_compaction_nor_cleaning,
    with_three_writers_one_idle_and_one_log_idle_the_cutoff_passes_the_busy_writers_sequences,
    an_idle_log_and_a_fully_trimmed_log_stop_holding_the_cutoff_within_two_cycles,
    a_commit_applied_after_its_deadline_leaves_no_dangling_index_reference,
);

fn payload(tag: &str, i: u64) -> Bytes {
    Bytes::from(format!("{tag}{i}-{}", "p".repeat((i % 17) as usize)))
}

async fn fill(w: &LogStorage, log: LogId, tag: &str, n: u64) -> Result<()> {
    for i in 0..n {
        w.append(log, 1, payload(tag, i), None).await?;
    }
    Ok(())
}

fn cleaner(env: &Env) -> Cleaner {
    let mut c =
        Cleaner::new(env.meta.clone(), env.objects.clone(), &env.cluster, Arc::new(SystemClock));
    c.grace = Duration::ZERO;
    c.history = None;
    c
}

/// One maintenance cycle: compaction over every log, then cleaning.
struct Maintenance {
    reader: LogReader,
    cleaner: Cleaner,
    idle: IdleLogs,
    cfg: CompactorConfig,
}

impl Maintenance {
    fn new(env: &Env) -> Self {
        Maintenance {
            reader: LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster),
            cleaner: cleaner(env),
            idle: IdleLogs::default(),
            cfg: CompactorConfig { min_chunks: 8, ..Default::default() },
        }
    }

    async fn cycle(&mut self) -> Result<(CycleReport, CleanReport)> {
        let c = compact_all(self.reader.clone(), "c", self.cfg.clone(), None, &self.idle).await?;
        ensure!(c.failed.is_empty(), "compaction failed: {:?}", c.failed);
        Ok((c, self.cleaner.cycle().await?))
    }
}

/// The WAL sequences holding a log's readable entries.
async fn wal_seqs(w: &LogStorage, log: LogId) -> Result<Vec<u64>> {
    let info = w.info(log).await?;
    let idx = w.read_index_range(log, info.first_offset, 100_000).await?;
    Ok(idx.iter().filter_map(|i| objstore::keys::parse_wal_object(&i.object)).collect())
}

async fn exists(env: &Env, seq: u64) -> Result<bool> {
    match env.objects.head(&objstore::keys::wal_object(seq)).await {
        Ok(_) => Ok(true),
        Err(objstore::object_store::Error::NotFound { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

async fn all(w: &LogStorage, log: LogId) -> Result<Vec<Bytes>> {
    let info = w.info(log).await?;
    let got = w.read_entries(log, info.first_offset, 100_000, u64::MAX).await?;
    ensure!(
        got.iter().map(|e| u64::from(e.header.record_count)).sum::<u64>()
            == info.next_offset - info.first_offset,
        "a short read of log {log}"
    );
    Ok(got.into_iter().map(|e| e.payload).collect())
}

async fn an_idle_writer_that_never_appended_holds_back_neither_compaction_nor_cleaning(
    env: Env,
) -> Result<()> {
    // The idle writer registers first: its block (and mark) lies below every busy sequence.
    let idle = env.writer("idle").await?;
    let busy = env.writer("busy").await?;
    let log = busy.create_log().await?;
    fill(&busy, log, "b", 40).await?;
    let first = *wal_seqs(&busy, log).await?.first().context("no chunk")?;
    let before = all(&busy, log).await?;
    let mut m = Maintenance::new(&env);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut compacted = 0;
    loop {
        let (c, r) = m.cycle().await?;
        compacted += c.compacted.len();
        eprintln!("cutoff {} held by {:?}", r.cutoff.cutoff, r.cutoff.held_by().0);
        if compacted > 0 && r.cutoff.cutoff > first + 16 && !exists(&env, first).await? {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "after 20 s: {compacted} compactions, cutoff {} (held by {:?}), busy sequences from \
             {first}",
            r.cutoff.cutoff,
            r.cutoff.held_by().0
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ensure!(all(&busy, log).await? == before, "entries changed");
    // The idle writer still takes appends, from a fresh block above everything it gave up.
    let other = idle.create_log().await?;
    idle.append(other, 1, Bytes::from_static(b"late"), None).await?;
    let seq = *wal_seqs(&idle, other).await?.first().context("no chunk")?;
    let cut = read_cutoff(env.meta.as_ref(), &Keys::new(&env.cluster)).await?;
    ensure!(seq >= cut.cutoff, "the idle writer committed {seq} below the cutoff {cut:?}");
    idle.shutdown().await;
    busy.shutdown().await;
    Ok(())
}

async fn with_three_writers_one_idle_and_one_log_idle_the_cutoff_passes_the_busy_writers_sequences(
    env: Env,
) -> Result<()> {
    // a appends to its log, then goes idle; b never appends; c keeps appending.
    let a = env.writer("a").await?;
    let b = env.writer("b").await?;
    let c = env.writer("c").await?;
    let quiet = a.create_log().await?;
    fill(&a, quiet, "q", 3).await?;
    let quiet_seqs = wal_seqs(&a, quiet).await?;
    let quiet_data = all(&a, quiet).await?;
    let busy = c.create_log().await?;
    fill(&c, busy, "b", 24).await?;
    let first_busy = *wal_seqs(&c, busy).await?.first().context("no chunk")?;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let appender = {
        let (c, stop) = (c.clone(), stop.clone());
        tokio::spawn(async move {
            let mut i = 100;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                c.append(busy, 1, payload("b", i), None).await?;
                i += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            anyhow::Ok(())
        })
    };
    let mut m = Maintenance::new(&env);
    let deadline = Instant::now() + Duration::from_secs(30);
    let outcome = loop {
        let (_, r) = m.cycle().await?;
        let mut gone = true;
        for s in &quiet_seqs {
            gone &= !exists(&env, *s).await?;
        }
        if r.cutoff.cutoff > first_busy + 16 && gone {
            break Ok(());
        }
        if Instant::now() >= deadline {
            break Err(anyhow!(
                "after 30 s the cutoff is {} (held by {:?}); busy sequences from {first_busy}, \
                 the quiet log's {quiet_seqs:?} deleted: {gone}",
                r.cutoff.cutoff,
                r.cutoff.held_by().0
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    appender.await??;
    outcome?;
    ensure!(all(&a, quiet).await? == quiet_data, "the quiet log changed");
    for w in [a, b, c] {
        w.shutdown().await;
    }
    Ok(())
}

async fn an_idle_log_and_a_fully_trimmed_log_stop_holding_the_cutoff_within_two_cycles(
    env: Env,
) -> Result<()> {
    let w = env.writer("w").await?;
    let idle = w.create_log().await?;
    let trimmed = w.create_log().await?;
    let busy = w.create_log().await?;
    fill(&w, idle, "i", 3).await?; // three chunks, all in the head's recent
    fill(&w, trimmed, "t", 3).await?;
    w.soft_trim(trimmed, 3).await?; // every entry trimmed, the chunks still indexed
    let idle_seqs = wal_seqs(&w, idle).await?;
    let trimmed_seqs: Vec<u64> = w
        .read_index_range(trimmed, 0, 100)
        .await
        .map(|i| i.iter().filter_map(|i| objstore::keys::parse_wal_object(&i.object)).collect())
        .unwrap_or_default();
    let idle_data = all(&w, idle).await?;
    fill(&w, busy, "b", 40).await?;
    let mut m = Maintenance::new(&env);
    m.cycle().await?;
    let (_, r) = m.cycle().await?;
    let holders = r.cutoff.held_by().0.into_iter().cloned().collect::<Vec<_>>();
    let highest = idle_seqs.iter().chain(&trimmed_seqs).max().copied().unwrap_or(0);
    ensure!(
        r.cutoff.cutoff > highest,
        "after two cycles the cutoff is {} (held by {holders:?}), the idle and trimmed logs' \
         chunks are {idle_seqs:?} and {trimmed_seqs:?}",
        r.cutoff.cutoff
    );
    // Unless nothing holds the cutoff below the next sequence (the writer's mark moved to its
    // next block): then every input is at it, the idle and trimmed logs' floors too.
    ensure!(
        holders.contains(&Holder::NextSeq)
            || !holders.contains(&Holder::Log(idle)) && !holders.contains(&Holder::Log(trimmed)),
        "{holders:?}"
    );
    for s in idle_seqs.iter().chain(&trimmed_seqs) {
        ensure!(!exists(&env, *s).await?, "WAL object {s} not reclaimed: {r:?}");
    }
    ensure!(all(&w, idle).await? == idle_data, "the idle log's entries changed");
    ensure!(w.info(trimmed).await?.first_offset == 3);
    // The idle log takes appends again, after its compacted prefix.
    let h = w.append(idle, 1, Bytes::from_static(b"again"), None).await?;
    ensure!(h.offset == 3, "{h:?}");
    let mut expect = idle_data;
    expect.push(Bytes::from_static(b"again"));
    ensure!(all(&w, idle).await? == expect);
    w.shutdown().await;
    Ok(())
}

async fn a_commit_applied_after_its_deadline_leaves_no_dangling_index_reference(
    env: Env,
) -> Result<()> {
    let faulty = FaultyMeta::new(env.meta.clone());
    let mut cfg = env.config("w");
    cfg.flush_deadline = Duration::from_secs(1);
    let w = env.writer_with(cfg, env.objects.clone(), faulty.clone()).await?;
    let late = w.create_log().await?;
    let other = w.create_log().await?;
    // The next commit (a commit puts the writer's low-water mark; taking the slot does not),
    // of `late`'s flush, lands 2.5 s after it was sent: past the writer's 1 s deadline, while
    // other commits, compaction and cleaning go on.
    let mark = Keys::new(&env.cluster).low_water("w");
    *faulty.apply_late.lock().map_err(|_| anyhow!("poisoned"))? =
        Some((mark, Duration::from_millis(2500)));
    let w1 = w.clone();
    let lost = tokio::spawn(async move { w1.append(late, 1, payload("late", 0), None).await });
    let mut m = Maintenance::new(&env);
    let until = Instant::now() + Duration::from_secs(4);
    let mut others = Vec::new();
    let mut i = 0;
    while Instant::now() < until {
        if lost.is_finished() {
            // Appends to another log go on (a new incarnation may answer them).
            match w.append(other, 1, payload("o", i), None).await {
                Ok(h) => others.push((h.offset, payload("o", i))),
                Err(e) if e.code() == logstore::Code::Unavailable => {}
                Err(e) => return Err(e.into()),
            }
            i += 1;
        }
        m.cycle().await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let outcome = lost.await?;
    m.cycle().await?;
    for log in [late, other] {
        for idx in w.read_index_range(log, 0, 10_000).await? {
            ensure!(
                env.objects.head(&idx.object).await.is_ok(),
                "log {log} offset {} references {}, which the cleaner deleted",
                idx.header.offset,
                idx.object
            );
        }
    }
    // Sent and never answered in time: the writer cannot know whether it applied.
    ensure!(
        matches!(&outcome, Err(logstore::LogError::Unavailable { outcome_unknown: true, .. })),
        "the late commit was answered {outcome:?}"
    );
    let data = w.read_entries(other, 0, 10_000, u64::MAX).await?;
    for (o, p) in &others {
        ensure!(data.iter().any(|e| e.header.offset == *o && e.payload == *p), "acked {o} lost");
    }
    w.shutdown().await;
    Ok(())
}
