//! Level 0 cursors against both environments: persisted mark-delete, individual acks folded
//! when contiguous, properties, seek, backlog statistics against a brute-force count, reopen
//! after the handle (and so any process) is gone, and a million scattered acks.

use std::collections::BTreeMap;

use anyhow::{Result, anyhow, ensure};
use bytes::Bytes;
use logstore::{CursorStart, LogCursor, LogError, LogId, LogStorage};

use crate::env::Env;

both_envs!(
    cursor_state_survives_reopening_and_stats_match_a_brute_force_count,
    cursor_errors_are_clear,
    a_million_scattered_acks_persist_in_small_values_and_reload,
    a_second_handle_cannot_overwrite_a_newer_state,
    random_acks_and_mark_deletes_reload_as_a_model_says,
);

/// Appends entries of 1–3 records; returns (offset, records, size) of each.
async fn fill(w: &LogStorage, log: LogId, n: usize) -> Result<Vec<(u64, u32, u64)>> {
    let mut out = Vec::new();
    for i in 0..n {
        let records = (i % 3 + 1) as u32;
        let p = Bytes::from(format!("entry-{i}-{}", "y".repeat(i % 11)));
        let h = w.append(log, records, p, None).await?;
        out.push((h.offset, records, h.entry_size));
    }
    Ok(out)
}

/// Backlog by brute force: records not acked, and the bytes from the entry holding the first
/// unacked offset on.
fn brute_backlog(entries: &[(u64, u32, u64)], acked: impl Fn(u64) -> bool) -> (u64, u64) {
    let mut records = 0;
    let mut first_unacked = None;
    for &(o, n, _) in entries {
        for r in o..o + u64::from(n) {
            if !acked(r) {
                records += 1;
                first_unacked.get_or_insert(r);
            }
        }
    }
    let bytes = match first_unacked {
        None => 0,
        Some(f) => {
            // Bytes from the entry holding the mark-delete position (first offset not covered
            // by mark-delete), to the end.
            entries.iter().filter(|(o, n, _)| o + u64::from(*n) > f).map(|e| e.2).sum()
        }
    };
    (records, bytes)
}

async fn cursor_state_survives_reopening_and_stats_match_a_brute_force_count(
    env: Env,
) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    let entries = fill(&w, log, 40).await?;
    let hw = w.info(log).await?.next_offset;
    let reader = w.reader().clone();
    LogCursor::create(&reader, log, "billing", CursorStart::Beginning).await?;
    LogCursor::create(&reader, log, "audit", CursorStart::End).await?;
    ensure!(LogCursor::list(&reader, log).await? == ["audit", "billing"]);

    let mut c = LogCursor::open(&reader, log, "billing").await?;
    ensure!(c.mark_delete_offset().is_none() && c.read_offset() == 0);
    let first = c.read_entries(5, u64::MAX).await?;
    ensure!(first.first().map(|e| e.header.offset) == Some(0), "read from 0");
    let read_to = c.read_offset();
    ensure!(read_to == first.last().map_or(0, |e| e.header.end_offset()), "read position advanced");

    let props = BTreeMap::from([("ledger".to_owned(), 7), ("epoch".to_owned(), -1)]);
    c.mark_delete(9, props.clone()).await?;
    // Individual acks, out of order; 10 and 11 then fold into the mark-delete position.
    c.ack(&[30, 12, 25, 26, 27, 11]).await?;
    ensure!(c.mark_delete_offset() == Some(9), "11 is not contiguous with 9 yet");
    c.ack(&[10]).await?;
    ensure!(c.mark_delete_offset() == Some(12), "10 joined 9..=12: {:?}", c.mark_delete_offset());
    let acked = |o: u64| o <= 12 || [25, 26, 27, 30].contains(&o);
    let (records, bytes) = brute_backlog(&entries, acked);
    let stats = c.stats().await?;
    ensure!(stats.backlog_records == records, "{stats:?} vs {records}");
    ensure!(stats.backlog_bytes == bytes, "{stats:?} vs {bytes} bytes");
    ensure!(stats.acked_records == 4 && stats.ack_ranges == 2, "{stats:?}");
    ensure!(stats.high_watermark == hw && stats.properties == props);
    drop(c);

    // Everything reloads: mark-delete, individual acks, properties; reading resumes at the
    // mark-delete position and never returns a wholly acked entry.
    let mut again = LogCursor::open(&reader, log, "billing").await?;
    ensure!(again.mark_delete_offset() == Some(12) && again.properties() == &props);
    ensure!(again.read_offset() == 13, "resumes at the mark-delete position");
    for o in 0..hw {
        ensure!(again.is_acked(o) == acked(o), "offset {o} after reopening");
    }
    let mut delivered = Vec::new();
    loop {
        let batch = again.read_entries(4, u64::MAX).await?;
        if batch.is_empty() {
            break;
        }
        delivered.extend(batch);
    }
    for e in &delivered {
        let all_acked = (e.header.offset..e.header.end_offset()).all(acked);
        ensure!(!all_acked, "wholly acked entry at {} delivered", e.header.offset);
    }
    let expected: Vec<u64> = entries
        .iter()
        .filter(|(o, n, _)| !(*o..o + u64::from(*n)).all(acked))
        .map(|e| e.0)
        .collect();
    let got: Vec<u64> = delivered.iter().map(|e| e.header.offset).collect();
    ensure!(got == expected, "delivered {got:?}, want {expected:?}");
    ensure!(again.stats().await?.backlog_records == records, "reading does not acknowledge");

    // Seek back: everything from there is backlog again, individual acks gone.
    again.seek(5).await?;
    let stats = again.stats().await?;
    ensure!(stats.mark_delete_offset == Some(4) && stats.acked_records == 0);
    ensure!(stats.backlog_records == hw - 5, "{stats:?}");
    let reopened = LogCursor::open(&reader, log, "billing").await?;
    ensure!(reopened.mark_delete_offset() == Some(4) && !reopened.is_acked(25));

    // The "audit" cursor started at the end: no backlog until more is appended.
    let audit = LogCursor::open(&reader, log, "audit").await?;
    ensure!(audit.stats().await?.backlog_records == 0);
    w.append(log, 2, Bytes::from_static(b"more"), None).await?;
    ensure!(audit.stats().await?.backlog_records == 2);

    LogCursor::delete(&reader, log, "billing").await?;
    ensure!(LogCursor::list(&reader, log).await? == ["audit"]);
    match LogCursor::open(&reader, log, "billing").await {
        Err(LogError::CursorNotFound { .. }) => {}
        other => return Err(anyhow!("a deleted cursor opened: {other:?}")),
    }
    // Deleting the log removes its cursors too.
    w.delete_log(log).await?;
    ensure!(LogCursor::list(&reader, log).await?.is_empty());
    w.shutdown().await;
    Ok(())
}

async fn cursor_errors_are_clear(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    fill(&w, log, 3).await?;
    let reader = w.reader().clone();
    LogCursor::create(&reader, log, "c", CursorStart::Beginning).await?;
    let checks: Vec<(&str, Result<(), LogError>)> = vec![
        ("duplicate", LogCursor::create(&reader, log, "c", CursorStart::End).await),
        ("bad name", LogCursor::create(&reader, log, "no/slash", CursorStart::End).await),
        ("unknown log", LogCursor::create(&reader, LogId(987_654), "c", CursorStart::End).await),
        ("past the end", LogCursor::create(&reader, log, "d", CursorStart::Offset(1000)).await),
        ("unknown cursor", LogCursor::open(&reader, log, "nope").await.map(|_| ())),
        ("delete unknown", LogCursor::delete(&reader, log, "nope").await),
    ];
    let codes: Vec<(&str, logstore::Code)> = vec![
        ("duplicate", logstore::Code::AlreadyExists),
        ("bad name", logstore::Code::InvalidArgument),
        ("unknown log", logstore::Code::NotFound),
        ("past the end", logstore::Code::OffsetOutOfRange),
        ("unknown cursor", logstore::Code::NotFound),
        ("delete unknown", logstore::Code::NotFound),
    ];
    for ((what, r), (_, code)) in checks.into_iter().zip(codes) {
        match r {
            Err(e) if e.code() == code => {}
            other => return Err(anyhow!("{what}: {other:?}, want {code:?}")),
        }
    }
    let mut c = LogCursor::open(&reader, log, "c").await?;
    let hw = w.info(log).await?.next_offset;
    ensure!(matches!(c.ack(&[hw]).await, Err(LogError::OffsetOutOfRange { .. })));
    ensure!(matches!(
        c.mark_delete(hw, BTreeMap::new()).await,
        Err(LogError::OffsetOutOfRange { .. })
    ));
    ensure!(matches!(c.seek(hw + 1).await, Err(LogError::OffsetOutOfRange { .. })));
    w.shutdown().await;
    Ok(())
}

async fn a_million_scattered_acks_persist_in_small_values_and_reload(env: Env) -> Result<()> {
    const N: u64 = 1_000_000;
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    // One entry of 2N records: offsets 0 .. 2N.
    w.append(log, (2 * N) as u32, Bytes::from_static(b"many"), None).await?;
    let reader = w.reader().clone();
    LogCursor::create(&reader, log, "sparse", CursorStart::Beginning).await?;
    let mut c = LogCursor::open(&reader, log, "sparse").await?;
    let odd: Vec<u64> = (0..N).map(|i| 2 * i + 1).collect();
    c.ack(&odd).await?;
    ensure!(c.mark_delete_offset().is_none(), "0 is not acked, nothing folds");
    drop(c);

    // No value under the cursor comes near etcd's 1.5 MiB request limit.
    let prefix = env_keys(&env).cursors_prefix(log);
    let stored = env.meta.range(metadata::RangeRequest::prefix(prefix)).await?;
    let largest = stored.kvs.iter().map(|kv| kv.value.len()).max().unwrap_or(0);
    ensure!(largest <= logstore::cursor::CHUNK_MAX_BYTES, "a value of {largest} bytes");
    ensure!(stored.kvs.len() > 10, "{} keys for 1M ranges", stored.kvs.len());

    let mut c = LogCursor::open(&reader, log, "sparse").await?;
    let stats = c.stats().await?;
    ensure!(stats.acked_records == N && stats.ack_ranges == N as usize, "{stats:?}");
    ensure!(stats.backlog_records == N, "{stats:?}");
    for o in [0, 1, 2, 3, 999_998, 999_999, 1_999_998, 1_999_999] {
        ensure!(c.is_acked(o) == (o % 2 == 1), "offset {o}");
    }
    // Acking the even offsets from the bottom folds the whole run into the mark-delete position.
    let even: Vec<u64> = (0..N).map(|i| 2 * i).collect();
    c.ack(&even).await?;
    ensure!(c.mark_delete_offset() == Some(2 * N - 1), "{:?}", c.mark_delete_offset());
    let c = LogCursor::open(&reader, log, "sparse").await?;
    let stats = c.stats().await?;
    ensure!(stats.backlog_records == 0 && stats.ack_ranges == 0, "{stats:?}");
    let left = env
        .meta
        .range(metadata::RangeRequest::prefix(env_keys(&env).cursor_acks_prefix(log, "sparse")))
        .await?;
    ensure!(left.kvs.is_empty(), "{} ack chunks left after folding", left.kvs.len());
    w.shutdown().await;
    Ok(())
}

async fn a_second_handle_cannot_overwrite_a_newer_state(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    fill(&w, log, 6).await?;
    let reader = w.reader().clone();
    LogCursor::create(&reader, log, "shared", CursorStart::Beginning).await?;
    let mut a = LogCursor::open(&reader, log, "shared").await?;
    let mut b = LogCursor::open(&reader, log, "shared").await?;
    a.mark_delete(3, BTreeMap::new()).await?;
    match b.mark_delete(1, BTreeMap::new()).await {
        Err(LogError::Unavailable { message, .. }) if message.contains("open it again") => {}
        other => return Err(anyhow!("a stale handle wrote: {other:?}")),
    }
    let c = LogCursor::open(&reader, log, "shared").await?;
    ensure!(c.mark_delete_offset() == Some(3));
    // A refreshed handle picks up the other's change and can write again.
    b.refresh().await?;
    ensure!(b.mark_delete_offset() == Some(3));
    b.ack(&[5]).await?;
    a.refresh().await?;
    ensure!(a.is_acked(5) && a.mark_delete_offset() == Some(3));
    LogCursor::delete(&reader, log, "shared").await?;
    ensure!(matches!(a.refresh().await, Err(LogError::CursorNotFound { .. })));
    w.shutdown().await;
    Ok(())
}

fn env_keys(env: &Env) -> logstore::keys::Keys {
    logstore::keys::Keys::new(&env.cluster)
}

/// Rounds of random individual acks (above and below the stored chunks) and mark-deletes,
/// each followed by reopening the cursor and comparing it with a plain set.
async fn random_acks_and_mark_deletes_reload_as_a_model_says(env: Env) -> Result<()> {
    const HW: u64 = 600_000;
    let w = env.writer("w").await?;
    let log = w.create_log().await?;
    w.append(log, HW as u32, Bytes::from_static(b"x"), None).await?;
    let reader = w.reader().clone();
    LogCursor::create(&reader, log, "model", CursorStart::Beginning).await?;
    let mut model = std::collections::BTreeSet::new();
    let mut mark = 0u64; // everything below is acked
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for round in 0..5u64 {
        let mut c = LogCursor::open(&reader, log, "model").await?;
        // Mostly in a band that moves down each round, so new ranges land below old chunks.
        let band = HW - (round + 1) * 100_000;
        let offsets: Vec<u64> = (0..30_000).map(|_| band + next(100_000)).collect();
        c.ack(&offsets).await?;
        model.extend(offsets.iter().copied().filter(|o| *o >= mark));
        if round % 2 == 1 {
            let to = band + next(50_000);
            c.mark_delete(to, BTreeMap::new()).await?;
            mark = mark.max(to + 1);
        }
        while model.first().is_some_and(|o| *o <= mark) {
            if let Some(o) = model.pop_first() {
                mark = mark.max(o + 1);
            }
        }
        model.retain(|o| *o >= mark);
        drop(c);
        let c = LogCursor::open(&reader, log, "model").await?;
        ensure!(
            c.mark_delete_offset() == mark.checked_sub(1),
            "round {round}: mark {:?} vs {mark}",
            c.mark_delete_offset()
        );
        let stats = c.stats().await?;
        ensure!(
            stats.acked_records == model.len() as u64,
            "round {round}: {} acked vs {}",
            stats.acked_records,
            model.len()
        );
        for _ in 0..20_000 {
            let o = next(HW);
            ensure!(c.is_acked(o) == (o < mark || model.contains(&o)), "round {round}: offset {o}");
        }
    }
    w.shutdown().await;
    Ok(())
}
