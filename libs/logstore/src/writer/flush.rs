//! The flusher (ARCHITECTURE §3.1-3.2): takes the buffer when it is due, stamps it with the next
//! WAL sequence, lays it out as one WAL object, hands it to the committer in sequence order and
//! starts its PUT.

use super::*;

pub(super) async fn flusher(core: Arc<Core>, to_committer: mpsc::Sender<Flush>) {
    // When the previous flush began (and its PUT with it).
    let mut last: Option<Instant> = None;
    loop {
        // Read under the buffer's lock with `closing`: an append enqueued after this saw
        // `closing` too and was refused, so stopping on an empty buffer strands nothing.
        let writing = core.puts_out.load(Ordering::SeqCst) >= core.cfg.eager_puts as u64;
        let (due, closing, bytes) = {
            let b = core.buffer.lock();
            (
                b.since.map(|s| due_at(&core.cfg, s, last, writing)),
                core.closing.load(Ordering::SeqCst),
                b.bytes,
            )
        };
        match due {
            Some(at) if !closing && Instant::now() < at && bytes < core.cfg.flush_bytes => {
                let _ = tokio::time::timeout_at(at, core.wake.notified()).await;
                continue;
            }
            None if closing => return,
            None => {
                core.wake.notified().await;
                continue;
            }
            _ => {}
        }
        let taken = take_buffer(&core);
        if taken.entries.is_empty() {
            continue;
        }
        let began = Instant::now();
        last = Some(began);
        let (seq, incarnation) = match core.next_seq().await {
            Ok(s) => s,
            Err(e) => {
                fail_unstamped(&core, taken.entries, &e);
                continue;
            }
        };
        let (flush, object, room) = match build_flush(
            &core.object_buffers,
            seq,
            incarnation,
            taken.entries,
            began,
            core.cfg.flush_deadline,
        ) {
            Ok(f) => f,
            Err((e, entries)) => {
                fail_unstamped(&core, entries, &e);
                core.resolved();
                continue;
            }
        };
        let (put_tx, put_rx) = oneshot::channel();
        let flush = Flush { put: put_rx, ..flush };
        let (entries, logs) =
            (flush.chunks.iter().map(|c| c.entries.len()).sum::<usize>(), flush.chunks.len());
        // Hand over before the PUT starts, so the committer sees flushes in sequence order.
        if to_committer.send(flush).await.is_err() {
            return;
        }
        core.flushes.fetch_add(1, Ordering::Relaxed);
        let observer = core.observer.get().cloned();
        if let Some(o) = &observer {
            o.flushed(object.len(), entries, logs);
        }
        core.puts_out.fetch_add(1, Ordering::SeqCst);
        let writer = core.clone();
        tokio::spawn(async move {
            let deadline = writer.cfg.flush_deadline;
            let started = Instant::now();
            let put = hedge::put_object(&writer, seq, incarnation, &object);
            let r = match tokio::time::timeout(deadline, put).await {
                Ok(Ok(at)) => Ok(Stored {
                    seq: at,
                    kept: keep(&writer.space, writer.reader.cache_bytes(), object, room),
                }),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(LogError::unavailable(format!(
                    "WAL object {}: no answer within {deadline:?}",
                    objstore::keys::wal_object(seq)
                ))),
            };
            if let Some(o) = observer {
                o.put(started.elapsed(), r.is_ok());
            }
            let _ = put_tx.send(r);
            // The next eager flush may go now.
            writer.puts_out.fetch_sub(1, Ordering::SeqCst);
            writer.wake();
        });
    }
}

/// What a stored flush keeps until it commits: its object and room while the buffer has at
/// least as much room free again, counting what the tail cache holds (`cached`: it yields it)
/// — light load: the tail cache gets the object, however full it is; under pressure (appends
/// took the cache's room and wait for more) the room goes back to appends now, since the
/// bytes are durable.
fn keep(
    space: &Semaphore,
    cached: usize,
    object: Bytes,
    room: Option<OwnedSemaphorePermit>,
) -> Option<Kept> {
    let held = room.as_ref().map_or(0, OwnedSemaphorePermit::num_permits);
    (space.available_permits() + cached >= held).then_some(Kept { object, _room: room })
}

/// When a buffer whose oldest append arrived at `since` is due: `flush_interval` after it, or
/// under the eager policy as soon as `eager_puts` PUTs are not all out (`writing`) and
/// `min_flush_interval` has passed since the `last` flush began (at once if none did),
/// whichever is first. Appends that come while the PUTs are out gather for the next (group
/// commit), so a quick store gets an object per append and a slow one fewer, larger objects.
fn due_at(cfg: &LogStorageConfig, since: Instant, last: Option<Instant>, writing: bool) -> Instant {
    let latest = since + cfg.flush_interval;
    match cfg.min_flush_interval {
        None => latest,
        Some(_) if writing => latest,
        Some(min) => latest.min(last.map_or(since, |l| (l + min).max(since))),
    }
}

/// Fails appends that never made it into a stamped flush, poisoning their logs first: their
/// later appends, buffered or stamped since, must not commit ahead of them (ARCHITECTURE §3.4).
pub(super) fn fail_unstamped(core: &Core, entries: Vec<Pending>, e: &LogError) {
    for p in &entries {
        core.poison(p.log, e);
    }
    for p in entries {
        p.answer(Err(e.clone()));
    }
}

/// Takes the buffer for one flush: at most `flush_bytes` of it (at least one entry), so a
/// flusher that ran late does not make one oversized object while the buffer's other flushes
/// wait. A flush holds one chunk per log, so when one log has appends in two slots (this
/// writer owns both), the later slot's appends wait for the next flush, in their order.
pub(super) fn take_buffer(core: &Core) -> Buffer {
    let mut b = core.buffer.lock();
    let mut taken = std::mem::take(&mut *b);
    let mut slot_of: HashMap<LogId, String> = HashMap::new();
    // Once one entry does not fit, no later one is taken (a log's appends keep their order).
    let (mut bytes, mut full) = (0usize, false);
    let (now, later): (Vec<Pending>, Vec<Pending>) =
        std::mem::take(&mut taken.entries).into_iter().partition(|p| {
            full = full || (bytes > 0 && bytes + p.payload.len() > core.cfg.flush_bytes);
            let fits = !full;
            let same_slot = *slot_of.entry(p.log).or_insert_with(|| p.slot.clone()) == p.slot;
            if fits && same_slot {
                bytes += p.payload.len();
            }
            fits && same_slot
        });
    if !later.is_empty() {
        // Back into the (just emptied) buffer, in admission order (the partition keeps it) and
        // already due: the next flush takes them.
        let later_bytes: usize = later.iter().map(|p| p.payload.len()).sum();
        taken.bytes -= later_bytes;
        *b = Buffer { entries: later, bytes: later_bytes, since: taken.since };
    }
    taken.entries = now;
    taken
}

pub(super) type BuildFailure = (LogError, Vec<Pending>);

/// Lays the buffered entries (taken from the buffer at `began`) out as one WAL object: one
/// chunk per log, entries in append order.
pub(super) fn build_flush(
    buffers: &Arc<buffers::ObjectBuffers>,
    seq: u64,
    incarnation: i64,
    entries: Vec<Pending>,
    began: Instant,
    deadline: Duration,
) -> Result<(Flush, Bytes, Option<OwnedSemaphorePermit>), BuildFailure> {
    // One slot per log per flush (take_buffer).
    let by_log = group_by_log(entries, |p| p.log);
    let n_entries: usize = by_log.iter().map(Vec::len).sum();
    let payloads: usize = by_log.iter().flatten().map(|p| p.payload.len()).sum();
    // Entries, their headers, and the footer (about 52 bytes a chunk and 24 an entry).
    let size = payloads + n_entries * (wal::ENTRY_HEADER_LEN + 24) + by_log.len() * 52 + 64;
    let mut b = wal::ObjectBuilder::with_aligned_buffer(
        wal::ObjectKind::Wal,
        buffers.take(size),
        buffers::OBJECT_ALIGN,
    );
    let mut chunks = Vec::with_capacity(by_log.len());
    let mut failed: Option<LogError> = None;
    // The payloads' room goes with their bytes, into the object.
    let mut room: Option<OwnedSemaphorePermit> = None;
    for ps in by_log {
        let (log, slot) = (ps[0].log, ps[0].slot.clone());
        b.begin_chunk(log.0);
        let mut staged = Vec::with_capacity(ps.len());
        for p in ps {
            match b.push_entry_known(p.record_count, p.timestamp, &p.payload, p.known_crc) {
                Ok(r) => {
                    let mut p = p;
                    p.payload = Bytes::new();
                    if let Some(r) = p.take_payload_room() {
                        match &mut room {
                            Some(room) => room.merge(r),
                            None => room = Some(r),
                        }
                    }
                    staged.push((p, r.start, r.end - r.start));
                }
                Err(e) => {
                    failed.get_or_insert(LogError::InvalidArgument(e.to_string()));
                    staged.push((p, 0, 0));
                }
            }
        }
        chunks.push(Chunk { log, slot, seq, entries: staged });
    }
    let all = |chunks: Vec<Chunk>| {
        chunks.into_iter().flat_map(|c| c.entries.into_iter().map(|(p, _, _)| p)).collect()
    };
    if let Some(e) = failed {
        return Err((e, all(chunks)));
    }
    let object = match b.finish_vec() {
        Ok((object, _)) => buffers.object(object),
        Err(e) => return Err((LogError::InvalidArgument(e.to_string()), all(chunks))),
    };
    let (_, never) = oneshot::channel();
    let flush = Flush {
        seq,
        incarnation,
        chunks,
        put: never,
        stored: None,
        kept: None,
        deadline: Instant::now() + deadline,
        began,
    };
    Ok((flush, object, room))
}
