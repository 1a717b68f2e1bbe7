//! Lake logs against both environments (docs/lake.md): the compactor writes a lake log's
//! segments as Parquet files cut at ingest days and commits each to the stream's table in the
//! index swap's transaction; every entry reads back through the row groups (uncompressed
//! batches byte for byte but for the two fields a fetch rewrites, compressed ones as the same
//! records); a compactor killed at any step leaves the table and the log agreeing, and only
//! orphans the cleaner reclaims; the cleaner keeps files the table names after the log trims
//! them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use bytes::Bytes;
use logstore::{LogId, LogStorage};
use maintenance::compactor::{Compaction, Compactor, CompactorConfig, Step, StepHook};
use maintenance::lakes::{LakeLog, LakeLogs};
use objstore::object_store::ObjectStoreExt;
use recordbatch::{ProducerFields, Record};

use crate::compaction::cleaner;
use crate::env::{Env, ManualClock};

both_envs!(
    a_lake_logs_segments_are_its_tables_files_and_read_back_as_stored,
    a_lake_compactor_killed_at_each_step_leaves_log_and_table_agreeing,
    a_lake_table_whose_state_outgrew_its_record_takes_plain_segments_and_compaction_goes_on,
    table_and_log_retention_each_keep_what_their_own_keeps,
    small_lake_segments_merge_through_replace_snapshots,
    a_tables_many_manifests_of_a_day_merge_into_one,
    segments_the_table_dropped_are_not_merged,
    searches_by_time_and_by_bytes_read_one_row_group_and_agree_with_every_entry,
    a_lake_table_shows_committed_records_only_and_waits_for_open_transactions,
);

/// ARCHITECTURE §12: a lake table never shows an aborted transaction's record or a marker,
/// and takes records only below the last stable offset (their transactions ended). The log
/// itself still serves every entry (read_uncommitted consumers read them). DuckDB and
/// pyiceberg read the table through the position-delete files committed with its segments.
async fn a_lake_table_shows_committed_records_only_and_waits_for_open_transactions(
    env: Env,
) -> Result<()> {
    use logstore::TxnMark::{Data, End};
    let clock = Arc::new(ManualClock::default());
    clock.0.store(EVENING - 3_600_000, Ordering::SeqCst);
    let w = env.writer_with_clock("w", clock.clone()).await?;
    let identity = format!("{IDENTITY}-txn");
    let log = stream_log(&env, &identity).await?;
    let (c, _) = compactor(&env, "c", log, &identity).await?;
    let txn = |pid: i64, i: u64| -> Result<Bytes> {
        let records = recordbatch::decode(&batch(i)?)?.1;
        let ts = EVENING + i as i64 * 10;
        let producer = ProducerFields { producer_id: pid, producer_epoch: 0, base_sequence: 0 };
        let framing = recordbatch::Framing {
            attributes: 0x10,
            base_timestamp: ts,
            max_timestamp: ts,
            producer,
        };
        Ok(recordbatch::encode_framed(&records, framing)?)
    };
    let marker = |pid: i64, commit: bool| recordbatch::encode_marker(pid, 0, commit, 0, EVENING);
    let mut sent = BTreeMap::new();
    let mut next = 0u64;
    let mut put = async |b: Bytes, count: u32, txn: Option<logstore::TxnMark>| -> Result<()> {
        let opts = logstore::Conditions { txn, ..Default::default() };
        let at = w.submit_in_slot(log, "*", count, b.clone(), opts).await?.await?.offset;
        ensure!(at == next, "appended at {at}, not {next}");
        sent.insert(at, b);
        next += u64::from(count);
        Ok(())
    };
    // The writer spills its head's chunks to an index page eight at a time: the first page
    // (entries 0-7, offsets 0-20) ends below producer 9's transaction, the second (entries
    // 8-15) begins with it.
    put(batch(0)?, 3, None).await?; // 0..3
    put(txn(7, 1)?, 3, Some(Data { producer_id: 7 })).await?; // 3..6, aborted below
    put(txn(8, 2)?, 3, Some(Data { producer_id: 8 })).await?; // 6..9, committed below
    put(batch(3)?, 3, None).await?; // 9..12
    put(marker(7, false)?, 1, Some(End { producer_id: 7, abort: true })).await?; // 12
    put(marker(8, true)?, 1, Some(End { producer_id: 8, abort: false })).await?; // 13
    put(batch(6)?, 3, None).await?; // 14..17
    put(batch(7)?, 3, None).await?; // 17..20
    put(txn(9, 8)?, 3, Some(Data { producer_id: 9 })).await?; // 20..23, open
    for i in 9..=16 {
        put(batch(i)?, 3, None).await?; // 23..47
    }
    ensure!(w.info(log).await?.last_stable_offset == 20);
    let compact = async || -> Result<u64> {
        for _ in 0..4 {
            // Skipped (too few chunks) once nothing is left to compact.
            let _ = c.compact_log_fully(log).await?;
        }
        let t = table(&env, &identity).await?;
        Ok(t.map_or(0, |t| table_ranges(&t).iter().map(|r| r.1).max().unwrap_or(0)))
    };
    ensure!(compact().await? == 20, "the table holds the log only to its last stable offset");
    put(marker(9, false)?, 1, Some(End { producer_id: 9, abort: true })).await?; // 47
    for i in 18..=24 {
        put(batch(i)?, 3, None).await?; // 48..69
    }
    ensure!(compact().await? == 66, "the table takes the rest once the transaction ended");
    // The log serves every entry as sent; the table shows the committed and plain records.
    same_log(&sent, &all(&w, log).await?)?;
    let hidden = [3, 4, 5, 12, 13, 20, 21, 22, 47];
    let shown: Vec<u64> = (0..66).filter(|o| !hidden.contains(o)).collect();
    let t = table(&env, &identity).await?.context("no table")?;
    ensure!(t.manifests.iter().any(|m| m.content == lake::iceberg::Content::Deletes));
    let meta = t.metadata_location().context("no metadata location")?;
    for engine in ["duckdb", "static"] {
        let rows = read_table(&env, &[engine, &meta])?;
        let mut offsets: Vec<u64> = rows
            .iter()
            .map(|r| r.split('\t').nth(1).and_then(|o| o.parse().ok()).context("a row's offset"))
            .collect::<Result<_>>()?;
        offsets.sort_unstable();
        ensure!(offsets == shown, "{engine} shows {offsets:?}");
    }
    w.shutdown().await;
    Ok(())
}

/// Retention's searches over a lake segment of many row groups (by running-max timestamp and
/// by byte position) read the one row group they need, and answer what a walk over every
/// entry answers.
async fn searches_by_time_and_by_bytes_read_one_row_group_and_agree_with_every_entry(
    env: Env,
) -> Result<()> {
    let w = env.writer("w").await?;
    let identity = format!("{IDENTITY}-search");
    let log = stream_log(&env, &identity).await?;
    append(&w, log, 0, 8 * 4 + 1).await?;
    let (c, _) = compactor(&env, "c", log, &identity).await?;
    let done = c.compact_log_fully(log).await?.map_err(|s| anyhow!("{s:?}"))?;
    ensure!(done.len() == 1 && done[0].end_offset == 96, "{done:?}");
    let entries = w.read_entries(log, 0, u64::MAX, u64::MAX).await?;
    let (counting, counts) = objstore::counting::CountingStore::new(env.objects.clone());
    let reader = logstore::LogReader::new(env.meta.clone(), counting, &env.cluster);
    let gets = || counts.get(&counts.gets);
    for e in entries.iter().filter(|e| e.header.offset < 96) {
        // By time: the first entry whose running maximum reaches its timestamp.
        let t = e.header.timestamp;
        let want = entries.iter().find(|x| x.header.timestamp >= t).map(|x| x.header);
        let before = gets();
        let got = logstore::retention::find_by_timestamp(&reader, log, t).await?;
        ensure!(got == want, "at {t}: {got:?}, not {want:?}");
        // A footer the first time, then one row group.
        ensure!(gets() - before <= 2, "{} GETs for one search", gets() - before);
        // By bytes: keeping all but the bytes before this entry trims to it.
        let info = reader.info(log).await?;
        let keep = info.bytes - (e.header.cumulative_size - e.header.entry_size);
        let before = gets();
        let to = logstore::retention::trim_offset(&reader, log, None, Some(keep), 0).await?;
        ensure!(
            to == e.header.offset,
            "keeping {keep} bytes trims to {to}, not {}",
            e.header.offset
        );
        ensure!(gets() - before <= 2, "{} GETs for one search", gets() - before);
    }
    w.shutdown().await;
    Ok(())
}

/// Segments whose files table retention took out of the table (the log still holding them)
/// are not merged: the merge's commit would be refused, leaving an orphan, every cycle.
async fn segments_the_table_dropped_are_not_merged(env: Env) -> Result<()> {
    use futures::TryStreamExt;
    let clock = Arc::new(ManualClock::default());
    clock.0.store(EVENING - 3_600_000, Ordering::SeqCst);
    let w = env.writer_with_clock("w", clock.clone()).await?;
    let identity = format!("{IDENTITY}-dropped");
    let log = stream_log(&env, &identity).await?;
    append(&w, log, 0, 8 * 2 + 1).await?; // two pages
    let lease = env.meta.lease_grant(Duration::from_secs(30)).await?;
    let reader = || logstore::LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster);
    let small = CompactorConfig {
        min_chunks: 1,
        target_segment_bytes: 1,
        lakes: lakes(&env, log, &identity),
        ..Default::default()
    };
    let done = Compactor::new(reader(), "small", lease, small).compact_log_fully(log).await?;
    ensure!(done.as_ref().map_or(0, Vec::len) == 2, "{done:?}");
    let (keys, base) = (logstore::keys::Keys::new(&env.cluster), objstore::base_uri(&env.store));
    let objects = env.objects.clone();
    let later = EVENING + 10 * DAY;
    let dropped = maintenance::lakes::retain_table(
        env.meta.as_ref(),
        &objects,
        &keys,
        &base,
        &identity,
        DAY,
        later,
    );
    let t = dropped.await?.context("nothing dropped")?;
    ensure!(t.current_files().count() == 0, "the day is still in the table");
    let dir = objstore::keys::compacted_dir(log.0);
    let before: Vec<_> = env.objects.list(Some(&dir)).try_collect().await?;
    let settled = CompactorConfig {
        min_chunks: 1,
        settle_after: Duration::ZERO,
        lakes: lakes(&env, log, &identity),
        ..Default::default()
    };
    let c = Compactor::new(reader(), "settled", lease, settled);
    for _ in 0..3 {
        if let Ok(done) = c.compact_log_fully(log).await? {
            ensure!(done.iter().all(|d| d.segments == 0), "dropped segments merged: {done:?}");
        }
    }
    let after: Vec<_> = env.objects.list(Some(&dir)).try_collect().await?;
    ensure!(
        after.len() == before.len(),
        "{} segment objects, {} before",
        after.len(),
        before.len()
    );
    w.shutdown().await;
    Ok(())
}

/// A table that reached 16 manifests has each day's merged into one by the next commit:
/// engines then read every record once, and the table's state shrinks.
async fn a_tables_many_manifests_of_a_day_merge_into_one(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let identity = format!("{IDENTITY}-manifests");
    let log = stream_log(&env, &identity).await?;
    append(&w, log, 0, 8 * 18 + 2).await?; // 18 pages spilled
    let lease = env.meta.lease_grant(Duration::from_secs(30)).await?;
    let reader = logstore::LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster);
    // A target of one byte: a segment per page, none merged again.
    let cfg = CompactorConfig {
        min_chunks: 1,
        target_segment_bytes: 1,
        lakes: lakes(&env, log, &identity),
        ..Default::default()
    };
    let c = Compactor::new(reader, "c", lease, cfg);
    let done = c.compact_log_fully(log).await?.map_err(|s| anyhow!("{s:?}"))?;
    ensure!(done.len() == 18, "{} segments", done.len());
    let t = table(&env, &identity).await?.context("no table")?;
    ensure!(t.manifests.len() <= 3, "{} manifests left", t.manifests.len());
    let merged = t.manifests.iter().find(|m| m.existing_only).context("no merged manifest")?;
    ensure!(merged.files >= 16, "{} files merged", merged.files);
    ensure!(t.current_files().count() == 18);
    let merge =
        t.snapshots.iter().find(|s| s.summary.iter().any(|(k, _)| k == "lakelog.manifests-merged"));
    ensure!(merge.is_some(), "no snapshot says it merged manifests");
    let rows = read_table(&env, &["duckdb", &t.metadata_location().context("no metadata")?])?;
    let offsets: Vec<u64> =
        rows.iter().filter_map(|l| l.split('\t').nth(1)?.parse().ok()).collect();
    ensure!(offsets == (0..18 * 8 * 3).collect::<Vec<u64>>(), "{} rows", offsets.len());
    w.shutdown().await;
    Ok(())
}

/// Small lake segments merge: those of a log idle between bursts, and a settled log's, until
/// one is left. Each merge is a replace (or overwrite, when new chunks came in with them)
/// snapshot swapping the files in the table: every record once; every entry reads back as
/// before at the same log position; the files merged stay until the snapshots listing them
/// expire, then the cleaner reclaims them.
async fn small_lake_segments_merge_through_replace_snapshots(env: Env) -> Result<()> {
    let w = env.writer("w").await?;
    let identity = format!("{IDENTITY}-merge");
    let log = stream_log(&env, &identity).await?;
    let (c, _) = compactor(&env, "c", log, &identity).await?;
    let mut done = Vec::new();
    for round in 0..4u64 {
        append(&w, log, round * 8, round * 8 + 8).await?;
        // The second pass finds the log idle and compacts its head.
        for _ in 0..2 {
            if let Ok(d) = c.compact_log_fully(log).await? {
                done.extend(d);
            }
        }
    }
    // A flush elsewhere moves the writer's low-water mark past the last round's; then a
    // settled log's small segments merge whatever their sizes.
    let other = w.create_log().await?;
    w.append(other, 1, Bytes::from_static(b"x"), None).await?;
    let lease = env.meta.lease_grant(Duration::from_secs(30)).await?;
    let reader = logstore::LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster);
    let cfg = CompactorConfig {
        min_chunks: 4,
        settle_after: Duration::ZERO,
        lakes: lakes(&env, log, &identity),
        ..Default::default()
    };
    let settled = Compactor::new(reader, "settled", lease, cfg);
    for _ in 0..4 {
        if let Ok(d) = settled.compact_log_fully(log).await? {
            done.extend(d);
        }
    }
    ensure!(done.iter().any(|d| d.segments >= 2), "nothing merged: {done:?}");
    let objects: std::collections::BTreeSet<String> = w
        .read_index_range(log, 0, usize::MAX)
        .await?
        .into_iter()
        .map(|i| i.object.to_string())
        .collect();
    let last = done.last().context("nothing compacted")?;
    ensure!(objects.len() == 1 && objects.contains(&last.object), "{objects:?}");
    ensure!((last.first_offset, last.end_offset) == (0, 96), "{last:?}");
    let t = table(&env, &identity).await?.context("no table")?;
    let ops: Vec<&str> = t
        .snapshots
        .iter()
        .filter_map(|s| s.summary.iter().find(|(k, _)| k == "operation").map(|(_, v)| v.as_str()))
        .collect();
    ensure!(ops.iter().any(|o| *o == "replace" || *o == "overwrite"), "{ops:?}");
    let current: Vec<&str> = t.current_files().collect();
    ensure!(current.len() == 1 && current[0].ends_with(&last.object), "{current:?}");
    ensure!(t.data_files().count() == done.len(), "files merged away are not kept reachable");
    // Every record once in the table; every entry as sent, at its position in the log.
    let rows = read_table(&env, &["static", &t.metadata_location().context("no metadata")?])?;
    ensure!(rows.len() == 96, "{} rows", rows.len());
    let sent: BTreeMap<u64, Bytes> =
        (0..32).map(|i| Ok((i * 3, batch(i)?))).collect::<Result<_>>()?;
    same_log(&sent, &all(&w, log).await?)?;
    let mut position = 0;
    for e in w.read_entries(log, 0, u64::MAX, u64::MAX).await? {
        let h = e.header;
        ensure!(h.cumulative_size - h.entry_size == position, "entry {}: {h:?}", h.offset);
        position += sent[&h.offset].len() as u64;
    }
    // The files merged away stay while snapshots list them, then go.
    let mut cl = cleaner(&env);
    cl.cycle().await?;
    cl.cycle().await?;
    let gone = || done.iter().filter(|d| d.object != last.object);
    for d in gone() {
        let path = objstore::Path::from(d.object.as_str());
        env.objects.head(&path).await.context("a merged file went early")?;
    }
    let later = logstore::Clock::now_ms(&logstore::SystemClock) + DAY;
    let keys = logstore::keys::Keys::new(&env.cluster);
    let base = objstore::base_uri(&env.store);
    let objects = env.objects.clone();
    let retained = maintenance::lakes::retain_table(
        env.meta.as_ref(),
        &objects,
        &keys,
        &base,
        &identity,
        DAY / 2,
        later,
    );
    retained.await?.context("nothing expired")?;
    cl.cycle().await?;
    cl.cycle().await?;
    for d in gone() {
        let path = objstore::Path::from(d.object.as_str());
        ensure!(env.objects.head(&path).await.is_err(), "{} kept", d.object);
    }
    same_log(&sent, &all(&w, log).await?)?;
    w.shutdown().await;
    Ok(())
}

/// Table retention takes a day out of the table while the log still reads it; the log's trim
/// leaves the file to the table's older snapshots; once those expire too the cleaner
/// reclaims it, and keeps the file the log still indexes.
async fn table_and_log_retention_each_keep_what_their_own_keeps(env: Env) -> Result<()> {
    let clock = Arc::new(ManualClock::default());
    clock.0.store(EVENING, Ordering::SeqCst);
    let w = env.writer_with_clock("w", clock.clone()).await?;
    let identity = format!("{IDENTITY}-retention");
    let log = stream_log(&env, &identity).await?;
    append(&w, log, 0, 21).await?;
    clock.0.store(EVENING + 120_000, Ordering::SeqCst);
    append(&w, log, 21, 40).await?;
    let (c, _) = compactor(&env, "c", log, &identity).await?;
    let done = c.compact_log_fully(log).await?.map_err(|s| anyhow!("{s:?}"))?;
    ensure!(done.len() == 2 && done[0].end_offset == 63, "{done:?}");
    let (day_one, day_two) = (
        objstore::Path::from(done[0].object.as_str()),
        objstore::Path::from(done[1].object.as_str()),
    );
    let (keys, base) = (logstore::keys::Keys::new(&env.cluster), objstore::base_uri(&env.store));
    let retain = |retention_ms: i64, now_ms: i64| {
        let (env, keys, base, identity) = (&env, &keys, &base, &identity);
        async move {
            let objects = env.objects.clone();
            maintenance::lakes::retain_table(
                env.meta.as_ref(),
                &objects,
                keys,
                base,
                identity,
                retention_ms,
                now_ms,
            )
            .await
        }
    };
    // A day's retention a day after midnight: the first day leaves the table.
    let now = EVENING + 120_000 + DAY;
    ensure!(retain(2 * DAY, now).await?.is_none(), "two days' retention took something out");
    let t = retain(DAY, now).await?.context("nothing taken out")?;
    let current: Vec<&str> = t.current_files().collect();
    ensure!(current.len() == 1 && current[0].ends_with(day_two.as_ref()), "{current:?}");
    ensure!(t.data_files().count() == 2, "the older snapshots' file is not kept reachable");
    let meta = t.metadata_location().context("no metadata")?;
    let rows = read_table(&env, &["duckdb", &meta])?;
    let offsets: Vec<u64> =
        rows.iter().filter_map(|l| l.split('\t').nth(1)?.parse().ok()).collect();
    ensure!(offsets.first() == Some(&63) && offsets.len() == 96 - 63, "{offsets:?}");
    // The log keeps what its own retention keeps: every entry still reads.
    let mut cl = cleaner(&env);
    cl.cycle().await?;
    cl.cycle().await?;
    ensure!(all(&w, log).await?.len() == 40, "the log lost entries to the table's retention");
    // The log trims the first day; the table's older snapshots still list its file.
    w.hard_trim(log, 63).await?;
    cl.cycle().await?;
    cl.cycle().await?;
    env.objects.head(&day_one).await.context("a file older snapshots list was deleted")?;
    // Those snapshots expire (far later): the file goes; the one the log indexes stays.
    let later = logstore::Clock::now_ms(&logstore::SystemClock) + 10 * DAY;
    let t = retain(DAY, later).await?.context("nothing expired")?;
    ensure!(t.snapshots.len() == 1 && t.data_files().count() == 0, "{:?}", t.snapshots);
    cl.cycle().await?;
    cl.cycle().await?;
    ensure!(env.objects.head(&day_one).await.is_err(), "an unreachable, trimmed file was kept");
    env.objects.head(&day_two).await.context("a file the log indexes was deleted")?;
    ensure!(all(&w, log).await?.len() == 40 - 21, "the log reads differently");
    w.shutdown().await;
    Ok(())
}

/// A table whose state is over `lakes::MAX_TABLE_STATE` (manifests are not merged yet) takes
/// no more segments: the log's compaction writes a plain one, the table is left as it was,
/// and the WAL floor rises as for any log (a failing swap would hold the cleaner back).
async fn a_lake_table_whose_state_outgrew_its_record_takes_plain_segments_and_compaction_goes_on(
    env: Env,
) -> Result<()> {
    let w = env.writer("w").await?;
    let identity = format!("{IDENTITY}-full");
    let log = stream_log(&env, &identity).await?;
    append(&w, log, 0, 24).await?;
    let mut state = lake::table::TableState::new(identity.clone(), "file:///t");
    state.ends.insert("x".repeat(maintenance::lakes::MAX_TABLE_STATE), 0);
    let key = logstore::keys::Keys::new(&env.cluster).lake_table(&identity);
    env.meta.put(&key, &serde_json::to_vec(&state)?, 0).await?;
    let (c, _) = compactor(&env, "c", log, &identity).await?;
    let done = c.compact_log(log).await?.map_err(|s| anyhow!("{s:?}"))?;
    ensure!(done.object.ends_with(".seg") && done.table_snapshot.is_none(), "{done:?}");
    let after = table(&env, &identity).await?.context("no table")?;
    ensure!(after == state, "the full table changed");
    let sent: BTreeMap<u64, Bytes> =
        (0..24).map(|i| Ok((i * 3, batch(i)?))).collect::<Result<_>>()?;
    ensure!(all(&w, log).await? == sent, "the log reads differently");
    w.shutdown().await;
    Ok(())
}

const DAY: i64 = 86_400_000;
/// 23:59:00 UTC on some day.
const EVENING: i64 = 20_000 * DAY - 60_000;
const IDENTITY: &str = "0c8f2f5e-7d0b-4c3e-9f7a-5b1d2e3f4a5b";

/// The batch appended as entry `i`: three records with keys, values and headers; every fourth
/// gzip-compressed, as a producer may send it.
fn batch(i: u64) -> Result<Bytes> {
    let records: Vec<Record> = (0..3)
        .map(|r| Record {
            offset_delta: r,
            timestamp_ms: EVENING + i as i64 * 10 + i64::from(r),
            key: (r != 1).then(|| Bytes::from(format!("k{i}-{r}"))),
            value: Some(Bytes::from(format!("v{i}-{r}-{}", "x".repeat((i % 50) as usize)))),
            headers: vec![(Bytes::from("h"), (r == 2).then(|| Bytes::from("hv")))],
        })
        .collect();
    let plain = recordbatch::encode(&records, ProducerFields::NONE)?;
    Ok(if i % 4 == 3 { gzip(&plain) } else { plain })
}

/// `batch` with its records gzip-compressed.
fn gzip(batch: &[u8]) -> Bytes {
    use std::io::Write;
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let body = z
        .write_all(&batch[recordbatch::HEADER_LEN..])
        .and_then(|()| z.finish())
        .unwrap_or_default();
    let mut out = batch[..recordbatch::HEADER_LEN].to_vec();
    out.extend_from_slice(&body);
    let length = (out.len() - 12) as i32;
    out[8..12].copy_from_slice(&length.to_be_bytes());
    out[21..23].copy_from_slice(&1i16.to_be_bytes());
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(out)
}

/// A batch with the two fields a fetch writes (base offset, partition leader epoch) cleared.
fn fetch_fields_cleared(b: &[u8]) -> Vec<u8> {
    let mut v = b.to_vec();
    if v.len() >= 16 {
        v[0..8].copy_from_slice(&0i64.to_be_bytes());
        v[12..16].copy_from_slice(&(-1i32).to_be_bytes());
    }
    v
}

/// Checks `got` is `sent` as a lake segment serves it: an uncompressed batch byte for byte
/// but for the fetch fields, a compressed one as the same records uncompressed.
fn same_batch(sent: &Bytes, got: &Bytes) -> Result<()> {
    if sent == got {
        return Ok(()); // still in the WAL
    }
    let (sh, sr) = recordbatch::decode(sent)?;
    let (gh, gr) = recordbatch::decode(got)?;
    ensure!(sr == gr, "records differ");
    if sh.compression()? == recordbatch::Compression::None {
        ensure!(fetch_fields_cleared(sent) == fetch_fields_cleared(got), "bytes differ");
    } else {
        ensure!(gh.compression()? == recordbatch::Compression::None);
        ensure!((sh.base_timestamp, sh.max_timestamp) == (gh.base_timestamp, gh.max_timestamp));
    }
    Ok(())
}

/// Appends entries `from..to`, one flush each, at `clock`'s time.
async fn append(w: &LogStorage, log: LogId, from: u64, to: u64) -> Result<()> {
    for i in from..to {
        let ts = EVENING + i as i64 * 10 + 2;
        let opts = logstore::Conditions { timestamp: Some(ts), ..Default::default() };
        w.submit_in_slot(log, "*", 3, batch(i)?, opts).await?.await?;
    }
    Ok(())
}

/// Checks the log reads `got` as `sent` ([`same_batch`] entry by entry).
fn same_log(sent: &BTreeMap<u64, Bytes>, got: &BTreeMap<u64, Bytes>) -> Result<()> {
    ensure!(sent.keys().eq(got.keys()), "other offsets");
    for (o, b) in sent {
        same_batch(b, &got[o]).with_context(|| format!("the entry at {o}"))?;
    }
    Ok(())
}

async fn all(w: &LogStorage, log: LogId) -> Result<BTreeMap<u64, Bytes>> {
    let info = w.info(log).await?;
    let mut out = BTreeMap::new();
    let mut at = info.first_offset;
    while at < info.next_offset {
        let got = w.read_entries(log, at, 7, u64::MAX).await?;
        let last = got.last().context("empty read below the high watermark")?;
        at = last.header.end_offset();
        out.extend(got.into_iter().map(|e| (e.header.offset, e.payload)));
    }
    Ok(out)
}

/// A new log serving partition 3 of the stream `identity`.
async fn stream_log(env: &Env, identity: &str) -> Result<LogId> {
    let keys = logstore::keys::Keys::new(&env.cluster);
    let route =
        logstore::records::StreamRoute { stream_identity: identity.to_owned(), partition: 3 };
    Ok(logstore::admin::create_log(env.meta.as_ref(), &keys, Some(route)).await?)
}

/// `e2e/lake/read_table.py` (DuckDB, pyiceberg) on `args`, reaching the env's S3 if it has one.
fn read_table(env: &Env, args: &[&str]) -> Result<Vec<String>> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut cmd = std::process::Command::new(format!("{root}/.tools/venv/bin/python"));
    cmd.arg(format!("{root}/e2e/lake/read_table.py")).args(args);
    if let config::ObjectStoreConfig::S3(s3) = &env.store {
        cmd.env("LAKE_S3_ENDPOINT", s3.endpoint.clone().unwrap_or_default())
            .env("LAKE_S3_KEY", s3.access_key_id.clone().unwrap_or_default())
            .env("LAKE_S3_SECRET", s3.secret_access_key.clone().unwrap_or_default())
            .env("LAKE_S3_REGION", &s3.region);
    }
    let out = cmd.output().context("DuckDB and pyiceberg in .tools/venv (`make deps`)")?;
    ensure!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8(out.stdout)?.lines().map(str::to_owned).collect())
}

fn lakes(env: &Env, log: LogId, identity: &str) -> Arc<LakeLogs> {
    let lake = LakeLog { stream_identity: identity.to_owned(), partition: 3 };
    // Small row groups: a segment here has many, as a 64 MiB one does.
    Arc::new(LakeLogs {
        base_uri: objstore::base_uri(&env.store),
        logs: HashMap::from([(log, lake)]),
        row_group_bytes: Some(512),
    })
}

async fn compactor(env: &Env, id: &str, log: LogId, identity: &str) -> Result<(Compactor, i64)> {
    let lease = env.meta.lease_grant(Duration::from_secs(30)).await?;
    let reader = logstore::LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster);
    let lakes = lakes(env, log, identity);
    let cfg = CompactorConfig { min_chunks: 4, lakes, ..Default::default() };
    Ok((Compactor::new(reader, id, lease, cfg), lease))
}

async fn table(env: &Env, identity: &str) -> Result<Option<lake::table::TableState>> {
    let keys = logstore::keys::Keys::new(&env.cluster);
    match env.meta.get(&keys.lake_table(identity)).await? {
        Some(kv) => Ok(Some(maintenance::lakes::decode_table(&kv.value)?)),
        None => Ok(None),
    }
}

/// The offsets `[first, end)` each data file of the table holds, by its snapshots' summaries.
fn table_ranges(t: &lake::table::TableState) -> Vec<(u64, u64)> {
    let field = |s: &lake::iceberg::Snapshot, k: &str| {
        s.summary.iter().find(|(n, _)| n == k).and_then(|(_, v)| v.parse::<u64>().ok())
    };
    t.snapshots
        .iter()
        .filter_map(|s| Some((field(s, "lakelog.first-offset")?, field(s, "lakelog.end-offset")?)))
        .collect()
}

/// A lake log's entries written over midnight: its compaction cuts the segments there, each a
/// `.parquet` data file added to the table in the swap's transaction; every entry reads back
/// through the row groups; a read by index finds them again.
async fn a_lake_logs_segments_are_its_tables_files_and_read_back_as_stored(env: Env) -> Result<()> {
    let clock = Arc::new(ManualClock::default());
    clock.0.store(EVENING, Ordering::SeqCst);
    let w = env.writer_with_clock("w", clock.clone()).await?;
    let log = stream_log(&env, IDENTITY).await?;
    append(&w, log, 0, 21).await?; // 2 pages spilled, 5 chunks in the head
    clock.0.store(EVENING + 120_000, Ordering::SeqCst); // past midnight
    append(&w, log, 21, 40).await?;
    let sent: BTreeMap<u64, Bytes> =
        (0..40).map(|i| Ok((i * 3, batch(i)?))).collect::<Result<_>>()?;
    let (c, _) = compactor(&env, "c", log, IDENTITY).await?;
    // One rewrite: up to midnight; the rest of its last page stays in the WAL, and the
    // cleaner keeps it.
    let first = c.compact_log(log).await?.map_err(|s| anyhow!("{s:?}"))?;
    let mut cl = cleaner(&env);
    cl.cycle().await?;
    cl.cycle().await?;
    same_log(&sent, &all(&w, log).await?).context("after the first rewrite and cleaning")?;
    let rest = c.compact_log_fully(log).await?.map_err(|s| anyhow!("{s:?}"))?;
    let done: Vec<Compaction> = std::iter::once(first).chain(rest).collect();
    ensure!(!done.is_empty() && done.iter().all(|d| d.object.ends_with(".parquet")), "{done:?}");
    ensure!(done.iter().all(|d| d.table_snapshot.is_some()), "{done:?}");
    // The first segment ends at midnight: entry 21 (offset 63) starts the next day's.
    ensure!(done[0].first_offset == 0 && done[0].end_offset == 63, "{:?}", done[0]);
    let t = table(&env, IDENTITY).await?.context("no table state")?;
    let ranges = table_ranges(&t);
    let swapped: Vec<(u64, u64)> = done.iter().map(|d| (d.first_offset, d.end_offset)).collect();
    ensure!(ranges == swapped, "table {ranges:?}, swaps {swapped:?}");
    let files: Vec<&str> = t.data_files().collect();
    ensure!(files.len() == done.len());
    let root = objstore::base_uri(&env.store);
    for (f, d) in files.iter().zip(&done) {
        ensure!(
            f.ends_with(&d.object) && f.starts_with(&root),
            "{f} for {} under {root}",
            d.object
        );
    }
    // DuckDB and pyiceberg read the table from its metadata location: every record of the
    // segments, as sent (a null header value reads empty here).
    let end = ranges.iter().map(|r| r.1).max().unwrap_or(0);
    let mut expected = Vec::new();
    for i in 0..end / 3 {
        for r in recordbatch::decode(&sent[&(i * 3)])?.1 {
            let text = |b: &Option<Bytes>| {
                b.as_ref().map_or(String::new(), |b| String::from_utf8_lossy(b).into_owned())
            };
            let headers: Vec<String> = r
                .headers
                .iter()
                .map(|(k, v)| format!("{}={}", String::from_utf8_lossy(k), text(v)))
                .collect();
            expected.push(format!(
                "3\t{}\t{}\t{}\t{}",
                i * 3 + u64::from(r.offset_delta),
                text(&r.key),
                text(&r.value),
                headers.join(",")
            ));
        }
    }
    let meta = t.metadata_location().context("no metadata location")?;
    for engine in ["duckdb", "static"] {
        let rows = read_table(&env, &[engine, &meta])?;
        ensure!(
            rows == expected,
            "{engine} read {} rows: {:?}",
            rows.len(),
            rows.iter().take(2).collect::<Vec<_>>()
        );
    }
    // The cleaner reclaims what the swaps replaced, and nothing the log still reads (the rest
    // of the page cut at midnight stays in the WAL).
    cl.cycle().await?;
    cl.cycle().await?;
    // Every entry, read a few at a time from every offset's entry, is what was sent.
    let got = all(&w, log).await?;
    ensure!(got.len() == sent.len(), "{} entries read", got.len());
    for (o, b) in &sent {
        same_batch(b, got.get(o).context("an entry missing")?)
            .with_context(|| format!("the entry at {o}"))?;
    }
    // Read from inside an entry, and through a cold reader (footer from the store).
    let cold = logstore::LogReader::new(env.meta.clone(), env.objects.clone(), &env.cluster);
    let mid = cold.read_entries(log, 64, 1, u64::MAX).await?;
    ensure!(mid.len() == 1 && mid[0].header.offset == 63, "{:?}", mid.first().map(|e| e.header));
    // Stored runs (what the SDK and the Kafka front end serve) split into the same entries.
    let runs = w.reader().read_stored(log, 0, u64::MAX, u64::MAX).await?;
    let mut framed = 0;
    for r in &runs {
        for e in wal::decode_entries(&r.data)? {
            framed += 1;
            ensure!(e.record_count == 3);
        }
    }
    ensure!(framed == sent.len(), "{framed} entries in the stored runs");
    // Reads by index find lake entries again through the index.
    let idx = w.read_index_range(log, 0, 10).await?;
    let by_index = w.read_entries_by_index(&idx).await?;
    ensure!(by_index.len() == 10);
    for e in &by_index {
        same_batch(&sent[&e.header.offset], &e.payload)?;
    }
    // Log positions count stored lengths (a compressed batch is served longer than stored).
    for i in [19u64, 20] {
        let e = cold.read_entries(log, i * 3, 1, u64::MAX).await?;
        let before: u64 = (0..i).map(|j| sent[&(j * 3)].len() as u64).sum();
        let h = e[0].header;
        ensure!(h.cumulative_size - h.entry_size == before, "entry {i}: {h:?}");
        ensure!(h.entry_size == e[0].payload.len() as u64);
    }
    // The log trims its first segment away; the table still names the file, so the cleaner
    // keeps it (a table's retention is its own).
    w.hard_trim(log, 63).await?;
    cl.cycle().await?;
    cl.cycle().await?;
    let first_file = objstore::Path::from(done[0].object.as_str());
    env.objects.head(&first_file).await.context("the table's first file was deleted")?;
    ensure!(w.read_entries(log, 0, 1, u64::MAX).await.is_err(), "trimmed entries read");
    w.shutdown().await;
    Ok(())
}

/// A lake compactor killed at every step (claimed, file written, table files written, swapped):
/// the log reads the same, the table holds each offset at most once and only what the index
/// swapped in, and after the cleaner's cycles no orphan segment is left; the next compactor
/// goes on.
async fn a_lake_compactor_killed_at_each_step_leaves_log_and_table_agreeing(
    env: Env,
) -> Result<()> {
    use futures::TryStreamExt;
    let w = env.writer("w").await?;
    for step in [Step::Claimed, Step::Written, Step::TableWritten, Step::Swapped] {
        let identity = format!("{IDENTITY}-{step:?}");
        let log = stream_log(&env, &identity).await?;
        append(&w, log, 0, 24).await?;
        let before = all(&w, log).await?;
        let (c, lease) = compactor(&env, &format!("{step:?}"), log, &identity).await?;
        let (reached_tx, mut reached_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
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
        reached_rx.recv().await.context("the compactor never reached the step")?;
        task.abort();
        same_log(&before, &all(&w, log).await?).context(format!("killed at {step:?}"))?;
        let committed = table(&env, &identity).await?.map(|t| table_ranges(&t)).unwrap_or_default();
        ensure!(
            committed.len() == usize::from(step == Step::Swapped),
            "killed at {step:?}: {committed:?}"
        );
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
        // The next compactor goes on; the table then holds exactly the lake segments the
        // index has, each once.
        let (c2, _) = compactor(&env, "next", log, &identity).await?;
        c2.compact_log_fully(log).await?.map_err(|s| anyhow!("killed at {step:?}: {s:?}")).ok();
        same_log(&before, &all(&w, log).await?).context(format!("after {step:?}"))?;
        let t = table(&env, &identity).await?.context("no table")?;
        let mut in_table = table_ranges(&t);
        in_table.sort_unstable();
        let mut in_index: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for i in w.read_index_range(log, 0, usize::MAX).await? {
            if i.object.as_ref().ends_with(".parquet") {
                let r = in_index.entry(i.object.to_string()).or_insert((u64::MAX, 0));
                *r = (r.0.min(i.header.offset), r.1.max(i.header.end_offset()));
            }
        }
        let mut in_index: Vec<(u64, u64)> = in_index.into_values().collect();
        in_index.sort_unstable();
        ensure!(!in_table.is_empty(), "killed at {step:?}: nothing compacted after");
        ensure!(in_table == in_index, "killed at {step:?}: table {in_table:?}, index {in_index:?}");
    }
    w.shutdown().await;
    Ok(())
}
