//! The committer (ARCHITECTURE §3.3-3.8): resolves flushes in sequence order, plans each log's
//! head, commits in transactions within etcd's limits, re-bases on a moved head, fails on a
//! fence, and re-sends an ambiguous transaction until it gets a definite answer.

use super::*;

/// Flushes one commit round takes at most.
const MAX_ROUND_FLUSHES: usize = 64;

pub(super) async fn committer(core: Arc<Core>, mut flushes: mpsc::Receiver<Flush>) {
    // A flush received but left for the next round.
    let mut held: Option<Flush> = None;
    let mut budget = CommitBudget::new(&core.cfg);
    // Whether the observer has heard the interval (it may be set after the writer started).
    let mut reported = false;
    loop {
        let next = match held.take() {
            Some(f) => Some(f),
            None => flushes.recv().await,
        };
        let Some(mut first) = next else { break };
        // A deliberate bug for the simulation's mutation test: the next flush first.
        if crate::mutations::on(crate::mutations::Mutation::CommitOutOfOrder)
            && let Ok(later) = flushes.try_recv()
        {
            held = Some(std::mem::replace(&mut first, later));
        }
        // Its answer is read again below, with the rest of the round.
        let _ = first.stored().await;
        // The commit budget: rounds start at most once per interval; flushes stored meanwhile
        // join the round.
        budget.pace().await;
        let mut round = vec![first];
        while round.len() < MAX_ROUND_FLUSHES {
            let mut f = match held.take() {
                Some(f) => f,
                None => match flushes.try_recv() {
                    Ok(f) => f,
                    Err(_) => break,
                },
            };
            if !f.is_stored() || !joins(&round, &f) {
                held = Some(f);
                break;
            }
            round.push(f);
        }
        let current = core.identity.lock().await.member_revision;
        // Resolved in sequence order: a failed flush poisons its logs before a later flush's
        // chunks of them are culled (ARCHITECTURE §3.4).
        let mut live = Vec::new();
        let mut objects = HashMap::new();
        for flush in &mut round {
            let verdict = match flush.stored().await {
                Err(e) => Some(e),
                Ok(()) if core.is_lost(flush.incarnation) || flush.incarnation != current => {
                    Some(LogError::unavailable(INCARNATION_ENDED))
                }
                Ok(()) => None,
            };
            let chunks = std::mem::take(&mut flush.chunks);
            let oldest = chunks
                .iter()
                .flat_map(|c| c.entries.iter().map(|(p, _, _)| p.admitted))
                .min()
                .unwrap_or(u64::MAX);
            core.unpoison_before(oldest);
            for c in chunks {
                match &verdict {
                    Some(e) => {
                        // Every later append of the log admitted so far fails with it.
                        core.poison(c.log, e);
                        fail_chunk(c, e);
                    }
                    None => live.extend(core.cull(c)),
                }
            }
            if let Some((seq, kept)) = flush.kept.take() {
                objects.insert(seq, kept);
            }
        }
        if !live.is_empty() {
            if let Some(h) = core.hook.get() {
                h(WriterStep::Written).await;
            }
            let started = Instant::now();
            // The round's lowest sequence is the low-water mark its transactions put; its
            // earliest deadline bounds them all.
            let seq = round.iter().map(|f| f.seq).min().unwrap_or(0);
            let deadline = round.iter().map(|f| f.deadline).min().unwrap_or_else(Instant::now);
            cache_objects(&core, &objects);
            let (failures, latencies) = commit_chunks(&core, seq, deadline, live).await;
            for (log, e) in failures {
                if e.code() != crate::Code::Fenced {
                    core.poison(log, &e);
                }
            }
            let took = started.elapsed();
            let changed = budget.record(&latencies);
            if let Some(o) = core.observer.get() {
                if changed || !reported {
                    o.commit_interval(budget.interval);
                    reported = true;
                }
                for f in &round {
                    o.committed(took, f.began.elapsed());
                }
            }
        }
        // An incarnation that ended (lease lost, or a commit left without a definite answer)
        // is revoked and replaced before the next flush is resolved: nothing later commits
        // under it, and its mark goes with its lease (ARCHITECTURE §3.8-3.9).
        if core.is_lost(current) {
            reincarnate(&core).await;
        }
        for _ in &round {
            core.resolved();
        }
    }
}

/// Whether flush `f` may join a round: none of its logs is in the round under another slot
/// (one transaction puts a log's head once).
fn joins(round: &[Flush], f: &Flush) -> bool {
    let mut slots: HashMap<LogId, &str> = HashMap::new();
    for c in round.iter().flat_map(|r| r.chunks.iter()) {
        slots.insert(c.log, &c.slot);
    }
    f.chunks.iter().all(|c| slots.get(&c.log).is_none_or(|s| *s == c.slot))
}

/// The commit budget (ARCHITECTURE §4): commit rounds start at most once per `interval`. It
/// starts at the configured interval; the store's commit times (each transaction's, so not
/// the size of a round) are judged every few rounds (ten, or two once ten configured
/// intervals went by): when their p99 exceeds `flush_interval` the round rate
/// halves (the interval doubles, up to an eighth of the flush deadline, so flushes wait for
/// the budget well before they fail), otherwise it grows by an eighth of the configured rate
/// until it is back at it (AIMD). An interval shorter than [`MIN_COMMIT_INTERVAL`] (down to 0,
/// rounds back to back) is judged in steps of that one: it lengthens to it first, and comes
/// back from it.
pub(super) struct CommitBudget {
    base: Duration,
    max: Duration,
    limit: Duration,
    pub interval: Duration,
    judged: Vec<Duration>,
    rounds: usize,
    since: Option<Instant>,
    last_start: Option<Instant>,
}

/// Rounds judged at a time...
const BUDGET_ROUNDS: usize = 10;
/// ...or at least two, once this many configured intervals went by.
const BUDGET_SPAN: u32 = 10;

impl CommitBudget {
    pub(super) fn new(cfg: &LogStorageConfig) -> Self {
        let base = cfg.commit_interval();
        CommitBudget {
            base,
            max: (cfg.flush_deadline / 8).max(base),
            limit: cfg.flush_interval,
            interval: base,
            judged: Vec::new(),
            rounds: 0,
            since: None,
            last_start: None,
        }
    }

    /// Waits until the next round may start, and marks it started. A round due already starts
    /// without a timer (whose resolution, a millisecond, would hold it back).
    async fn pace(&mut self) {
        if let Some(last) = self.last_start
            && Instant::now() < last + self.interval
        {
            tokio::time::sleep_until(last + self.interval).await;
        }
        self.last_start = Some(Instant::now());
    }

    /// Records the commit times of a round's transactions; true when the interval changed.
    pub(super) fn record(&mut self, txns: &[Duration]) -> bool {
        if txns.is_empty() {
            return false;
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        self.judged.extend_from_slice(txns);
        self.rounds += 1;
        let (rounds, n) = (self.rounds, self.judged.len());
        let step = self.base.max(MIN_COMMIT_INTERVAL);
        if rounds < BUDGET_ROUNDS && (rounds < 2 || since.elapsed() < step * BUDGET_SPAN) {
            return false;
        }
        self.judged.sort_unstable();
        let p99 = self.judged[(n * 99).div_ceil(100) - 1];
        self.judged.clear();
        self.rounds = 0;
        self.since = None;
        let before = self.interval;
        // Steps of the configured rate, or for a shorter interval (down to back to back) of
        // MIN_COMMIT_INTERVAL's: lengthening starts there, and shortening steps by it.
        self.interval = if p99 > self.limit {
            (self.interval * 2).max(step)
        } else if self.interval > step {
            let rate = 1.0 / self.interval.as_secs_f64() + 1.0 / step.as_secs_f64() / 8.0;
            Duration::from_secs_f64(1.0 / rate).max(step)
        } else {
            self.base
        }
        .clamp(self.base, self.max);
        self.interval != before
    }
}

pub(super) fn fail_chunk(c: Chunk, e: &LogError) {
    for (p, _, _) in c.entries {
        p.answer(Err(e.clone()));
    }
}

/// One log's part of a commit attempt, computed from the head as last read.
pub(super) struct Plan {
    log: LogId,
    head_revision: i64,
    new_head: LogHead,
    pages: Vec<(u64, IndexPage)>,
    /// Aborted transactions paged out of the head, each to its own key.
    aborted_pages: Vec<crate::records::AbortedTxn>,
    /// Per entry of the chunk: its header if it commits, or why it does not.
    outcome: Vec<Result<LogEntryHeader, Unmet>>,
    first_locator: Option<Locator>,
}

/// An entry's condition that the head did not meet.
pub(super) enum Unmet {
    /// Its expected offset: the log's next offset was this one.
    Offset(u64),
    /// Its tenure: the slot is served at this epoch.
    Tenure(i64),
    /// It would open a transaction in a log with [`crate::MAX_OPEN_TXNS`] open.
    OpenTxns,
}

/// `h` with `mark` applied at `offset` (the marked entry's): a transaction opened, or ended
/// (an abort of one open here joins the aborted index). Refused when it would open one too
/// many.
fn mark_txn(h: &mut LogHead, mark: crate::storage::TxnMark, offset: u64) -> Result<(), Unmet> {
    use crate::records::{AbortedTxn, OpenTxn};
    use crate::storage::TxnMark;
    let open_at = |h: &LogHead, pid: i64| h.open_txns.iter().position(|t| t.producer_id == pid);
    match mark {
        TxnMark::Data { producer_id } => {
            if open_at(h, producer_id).is_none() {
                if h.open_txns.len() >= crate::MAX_OPEN_TXNS {
                    return Err(Unmet::OpenTxns);
                }
                h.open_txns.push(OpenTxn { producer_id, first_offset: offset });
            }
        }
        TxnMark::End { producer_id, abort } => {
            if let Some(i) = open_at(h, producer_id) {
                let open = h.open_txns.remove(i);
                if abort && !crate::mutations::on(crate::mutations::Mutation::ForgetAbortedTxn) {
                    h.aborted.push(AbortedTxn {
                        producer_id,
                        first_offset: open.first_offset,
                        last_offset: offset,
                    });
                }
            }
        }
    }
    Ok(())
}

/// Builds the commit of a log's `parts` (its chunks of one or more flushes, in flush order) on
/// top of `head` (ARCHITECTURE §3.3, §3.4, §3.7), served at `epoch`, at `now_ms` by the
/// writer's clock (the runs' ingest time, never below the log's last).
pub(super) fn plan(
    log: LogId,
    head: &LogHead,
    head_revision: i64,
    epoch: i64,
    parts: &[Chunk],
    now_ms: i64,
) -> Plan {
    let mut h = head.clone();
    let ingest_ms = now_ms.max(head.ingest_ms);
    let mut runs: Vec<Locator> = Vec::new();
    let mut outcome = Vec::with_capacity(parts.iter().map(|c| c.entries.len()).sum());
    let mut open_run = false;
    let entries = parts.iter().flat_map(|c| {
        let mut first = true;
        c.entries.iter().map(move |e| (c.seq, std::mem::take(&mut first), e))
    });
    for (seq, first_of_part, (p, byte_start, byte_len)) in entries {
        // A run lies in one object.
        if first_of_part {
            open_run = false;
        }
        let unmet = match (p.tenure, p.expected_offset) {
            (Some(t), _) if t != epoch => Some(Unmet::Tenure(epoch)),
            (_, Some(expected)) if expected != h.next_offset => Some(Unmet::Offset(h.next_offset)),
            _ => None,
        };
        let at = h.next_offset;
        let unmet = unmet.or_else(|| p.txn.and_then(|m| mark_txn(&mut h, m, at).err()));
        if let Some(unmet) = unmet {
            outcome.push(Err(unmet));
            open_run = false;
            continue;
        }
        // A run is contiguous in the object: an entry culled before the commit ends it too.
        if open_run && runs.last().is_some_and(|r| r.byte_start + r.byte_len != *byte_start) {
            open_run = false;
        }
        let size = p.size;
        let header = LogEntryHeader {
            offset: h.next_offset,
            record_count: p.record_count,
            timestamp: p.timestamp,
            entry_size: size,
            cumulative_size: h.cumulative_bytes + size,
        };
        h.max_timestamp = h.max_timestamp.max(p.timestamp);
        if !open_run {
            runs.push(Locator {
                first_offset: h.next_offset,
                wal_seq: seq,
                byte_start: *byte_start,
                cumulative_before: h.cumulative_bytes,
                ingest_ms,
                ..Default::default()
            });
            h.ingest_ms = ingest_ms;
            open_run = true;
        }
        if let Some(run) = runs.last_mut() {
            run.byte_len += byte_len;
            run.entry_count += 1;
            run.record_count += u64::from(p.record_count);
            run.payload_bytes += size;
            run.max_timestamp = h.max_timestamp;
        }
        h.next_offset += u64::from(p.record_count);
        h.cumulative_bytes += size;
        h.entry_count += 1;
        h.last_entry = Some(EntryDescriptor {
            offset: header.offset,
            record_count: header.record_count,
            timestamp: header.timestamp,
            entry_size: header.entry_size,
            cumulative_size: header.cumulative_size,
        });
        outcome.push(Ok(header));
    }
    let first_locator = runs.first().cloned();
    h.recent.extend(runs);
    let mut pages = Vec::new();
    while h.recent.len() > RECENT_MAX {
        let page: Vec<Locator> = h.recent.drain(..RECENT_MAX).collect();
        pages.push((page[0].first_offset, IndexPage { locators: page }));
    }
    let spill = h.aborted.len().saturating_sub(crate::ABORTED_RECENT);
    let aborted_pages: Vec<_> = h.aborted.drain(..spill).collect();
    h.aborted_paged += aborted_pages.len() as u64;
    Plan { log, head_revision, new_head: h, pages, aborted_pages, outcome, first_locator }
}

/// Why a log's chunk cannot commit under this writer now, if it cannot.
pub(super) fn blocked(
    log: LogId,
    head: &LogHead,
    zone: &str,
    epoch: i64,
    me: &Owner,
) -> Option<LogError> {
    match head.log_state() {
        LogState::Deleted => return Some(LogError::NotFound(log)),
        LogState::Fenced => {
            return Some(LogError::Fenced {
                log,
                held: epoch,
                current: head.epoch,
                whole_log: true,
            });
        }
        LogState::Normal => {}
    }
    match head.slot(zone) {
        Some(s) if s.epoch == epoch && s.owner.as_ref() == Some(me) => None,
        Some(s) => Some(LogError::Fenced { log, held: epoch, current: s.epoch, whole_log: false }),
        None => Some(LogError::Fenced { log, held: epoch, current: 0, whole_log: false }),
    }
}

/// A log's chunks in a commit round, in flush order (one slot: [`joins`]).
type Parts = Vec<Chunk>;

/// Commits a round's chunks (of one or more flushes, in flush order), each log's in one
/// transaction; `seq` is the round's lowest WAL sequence. Returns the logs whose chunks failed
/// definitely for a reason other than a fence, and how long each transaction took.
pub(super) async fn commit_chunks(
    core: &Arc<Core>,
    seq: u64,
    deadline: Instant,
    chunks: Vec<Chunk>,
) -> (Vec<(LogId, LogError)>, Vec<Duration>) {
    let member_revision = core.identity.lock().await.member_revision;
    let me = core.owner(member_revision);
    let mut failures = Vec::new();
    let mut latencies = Vec::new();
    let fail = |parts: Parts, e: LogError, failures: &mut Vec<(LogId, LogError)>| {
        let Some(c) = parts.first() else { return };
        match e.code() {
            crate::Code::NotFound => core.forget(c.log),
            crate::Code::Fenced | crate::Code::NotOwner => core.forget_slot(c.log, &c.slot),
            _ => {}
        }
        failures.push((c.log, e.clone()));
        for c in parts {
            fail_chunk(c, &e);
        }
    };
    // Serve each log (its chunks together): take its slot on first use.
    let mut ready = Vec::new();
    for parts in group_by_log(chunks, |c| c.log) {
        let (log, slot) = (parts[0].log, parts[0].slot.clone());
        let served = core.served.lock().get(&(log, slot.clone())).cloned();
        match served {
            Some(s) => ready.push((parts, s)),
            None => match take_slot(core, log, &slot, &me).await {
                Ok(s) => {
                    core.served.lock().insert((log, slot), s.clone());
                    ready.push((parts, s));
                }
                Err(e) => fail(parts, e, &mut failures),
            },
        }
    }
    let mut pending = ready;
    while !pending.is_empty() {
        if Instant::now() >= deadline {
            for (parts, _) in pending {
                fail(
                    parts,
                    LogError::unavailable("flush deadline passed before its commit"),
                    &mut failures,
                );
            }
            core.lose(member_revision);
            break;
        }
        // Check fences, then plan on the heads as last seen.
        let mut plans = Vec::new();
        for (parts, s) in pending.drain(..) {
            let (log, slot) = (parts[0].log, parts[0].slot.clone());
            match blocked(log, &s.head, &slot, s.epoch, &me) {
                Some(e) => fail(parts, e, &mut failures),
                None => {
                    let now = core.clock.now_ms();
                    let p = plan(log, &s.head, s.head_revision, s.epoch, &parts, now);
                    plans.push((parts, s, p));
                }
            }
        }
        // One transaction at a time, each timed for the commit budget: sent together, they
        // queued behind each other in a store that applies one at a time (the embedded one),
        // which the budget then read as a slow store.
        for group in txn_groups(plans) {
            let sent = Instant::now();
            let outcome = commit_group(core, seq, deadline, member_revision, &group).await;
            latencies.push(sent.elapsed());
            match outcome {
                Ok(GroupOutcome::Committed { revision }) => {
                    if let Some(h) = core.hook.get() {
                        h(WriterStep::Committed).await;
                    }
                    for (parts, s, p) in group {
                        let served = Served {
                            epoch: s.epoch,
                            head: p.new_head.clone(),
                            head_revision: revision,
                        };
                        core.served.lock().insert((p.log, parts[0].slot.clone()), served);
                        core.reader.committed_head(p.log, &p.new_head, revision);
                        acknowledge(parts, p);
                    }
                }
                Ok(GroupOutcome::CommittedEarlier { heads }) => {
                    for (parts, s, p) in group {
                        match heads.get(&p.log) {
                            Some((head, rev)) => {
                                let served = Served {
                                    epoch: s.epoch,
                                    head: head.clone(),
                                    head_revision: *rev,
                                };
                                core.served.lock().insert((p.log, parts[0].slot.clone()), served);
                            }
                            None => core.forget(p.log),
                        }
                        acknowledge(parts, p);
                    }
                }
                Ok(GroupOutcome::Moved { heads }) => {
                    // Nothing committed: re-base on the heads as they are now, and try again.
                    for (parts, s, p) in group {
                        let Some((head, rev)) = heads.get(&p.log) else {
                            fail(parts, LogError::NotFound(p.log), &mut failures);
                            continue;
                        };
                        let s = Served { epoch: s.epoch, head: head.clone(), head_revision: *rev };
                        core.served.lock().insert((p.log, parts[0].slot.clone()), s.clone());
                        pending.push((parts, s));
                    }
                }
                Ok(GroupOutcome::IncarnationEnded) => {
                    core.lose(member_revision);
                    for (parts, _, _) in group {
                        fail(parts, LogError::unavailable(INCARNATION_ENDED), &mut failures);
                    }
                }
                Err(e) => {
                    // No definite answer: the transaction may still land. The incarnation ends
                    // before anything later commits, and no mark above this sequence is put
                    // (ARCHITECTURE §3.8).
                    if e.outcome_unknown() {
                        core.lose(member_revision);
                    }
                    for (parts, _, _) in group {
                        fail(parts, e.clone(), &mut failures);
                    }
                }
            }
        }
    }
    (failures, latencies)
}

/// The planned logs grouped into transactions within etcd's limits: one compare per log plus
/// the member compare; the head, its spilled pages and the low-water mark as puts.
fn txn_groups(plans: Vec<(Parts, Served, Plan)>) -> Vec<Vec<(Parts, Served, Plan)>> {
    let mut groups: Vec<Vec<(Parts, Served, Plan)>> = Vec::new();
    let (mut compares, mut puts) = (0, 0);
    for item in plans {
        let need = 1 + item.2.pages.len() + item.2.aborted_pages.len();
        if groups.is_empty()
            || compares + 1 > metadata::MAX_TXN_OPS
            || puts + need > metadata::MAX_TXN_OPS
        {
            groups.push(Vec::new());
            compares = 1;
            puts = 1;
        }
        compares += 1;
        puts += need;
        if let Some(g) = groups.last_mut() {
            g.push(item);
        }
    }
    debug_assert!(
        groups.iter().all(|g| g.len() < metadata::MAX_TXN_OPS),
        "a commit transaction within etcd's limit of operations"
    );
    groups
}

pub(super) const INCARNATION_ENDED: &str =
    "writer incarnation ended (lease lost); nothing of this flush committed";

/// The tail cache: a round's WAL objects go in the reader's byte-range cache (whole, once each)
/// before its commit is sent, so a consumer woken by the commit — through this writer's answer
/// or the metadata store's watch, whichever comes first — reads them without a GET. An object
/// whose commit then fails is referenced by nothing and ages out of the cache.
fn cache_objects(core: &Core, objects: &HashMap<u64, Kept>) {
    for (seq, Kept { object, .. }) in objects {
        core.reader.cache_object(&objstore::keys::wal_object(*seq), object.clone());
    }
}

pub(super) fn acknowledge(parts: Parts, p: Plan) {
    let entries = parts.into_iter().flat_map(|c| c.entries);
    for ((pending, _, _), outcome) in entries.zip(p.outcome) {
        match outcome {
            Ok(h) => pending.answer(Ok(h)),
            Err(Unmet::Offset(actual)) => {
                let expected = pending.expected_offset.unwrap_or(actual);
                let log = pending.log;
                pending.answer(Err(LogError::OffsetMismatch { log, expected, actual }));
            }
            Err(Unmet::Tenure(current)) => {
                let (log, held) = (pending.log, pending.tenure.unwrap_or(0));
                pending.answer(Err(LogError::Fenced { log, held, current, whole_log: false }));
            }
            Err(Unmet::OpenTxns) => {
                let log = pending.log;
                pending.answer(Err(LogError::ResourceExhausted(format!(
                    "log {log}: {} transactions open already",
                    crate::MAX_OPEN_TXNS
                ))))
            }
        }
    }
}

pub(super) type MovedHeads = HashMap<LogId, (LogHead, i64)>;

pub(super) enum GroupOutcome {
    /// Committed at this revision.
    Committed { revision: i64 },
    /// An attempt whose answer was lost had committed; these are the heads now.
    CommittedEarlier { heads: MovedHeads },
    /// A compare failed and nothing committed; these are the heads now.
    Moved { heads: MovedHeads },
    /// The member compare failed: this incarnation ended, nothing committed.
    IncarnationEnded,
}

/// Sends one commit transaction; re-sends it identically while its outcome is unknown (once
/// the head moved past the compared revision, an earlier attempt can no longer apply, so at
/// most one attempt commits). `Err`: a definite failure, or an outcome still unknown at the
/// deadline.
pub(super) async fn commit_group(
    core: &Core,
    seq: u64,
    deadline: Instant,
    member_revision: i64,
    group: &[(Parts, Served, Plan)],
) -> Result<GroupOutcome, LogError> {
    let member = core.keys.member("writer", &core.cfg.writer_id);
    let lease = core.identity.lock().await.lease;
    let mut compares =
        vec![Compare::create_revision(member.clone(), CompareOp::Equal, member_revision)];
    let mut puts = vec![TxnOp::put_with_lease(
        core.keys.low_water(&core.cfg.writer_id),
        seq.to_string(),
        lease,
    )];
    let mut gets = vec![TxnOp::get(RangeRequest::key(member.clone()))];
    for (_, _, p) in group {
        if !crate::mutations::on(crate::mutations::Mutation::SkipHeadCompare) {
            compares.push(Compare::mod_revision(
                core.keys.head(p.log),
                CompareOp::Equal,
                p.head_revision,
            ));
        }
        puts.push(TxnOp::put(core.keys.head(p.log), p.new_head.encode_to_vec()));
        for (first, page) in &p.pages {
            puts.push(TxnOp::put(core.keys.index_page(p.log, *first), page.encode_to_vec()));
        }
        for a in &p.aborted_pages {
            puts.push(TxnOp::put(core.keys.aborted(p.log, a.last_offset), a.encode_to_vec()));
        }
        gets.push(TxnOp::get(RangeRequest::key(core.keys.head(p.log))));
    }
    let txn = Txn::new().when(compares).and_then(puts).or_else(gets);
    let mut ambiguous = false;
    let resp = loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(remaining, core.meta.txn(txn.clone())).await {
            Ok(Ok(resp)) => break resp,
            // The lease is gone: this incarnation is over, and this attempt applied nothing
            // (an earlier one whose answer was lost may have).
            Ok(Err(MetaError::LeaseNotFound(_))) => {
                if ambiguous {
                    return Err(LogError::unknown(format!(
                        "commit of WAL object {seq}: lease lost after an unanswered attempt"
                    )));
                }
                return Ok(GroupOutcome::IncarnationEnded);
            }
            Ok(Err(e)) if !e.outcome_known() || e.is_retryable() => {
                ambiguous |= !e.outcome_known()
                    && !crate::mutations::on(crate::mutations::Mutation::ForgetAmbiguity);
                tracing::warn!(seq, error = %e, "commit not answered; re-sending the identical transaction");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            // A definite refusal of this attempt says nothing of an earlier unanswered one,
            // which may have applied (§3.8): then the outcome stays unknown.
            Ok(Err(e)) if ambiguous => {
                return Err(LogError::unknown(format!(
                    "commit of WAL object {seq}: {e} after an unanswered attempt"
                )));
            }
            Ok(Err(e)) => return Err(e.into()),
            // The attempt cut off by the deadline was sent: it may still apply.
            Err(_) => {
                return Err(LogError::unknown(format!(
                    "commit of WAL object {seq}: no definite answer before the deadline"
                )));
            }
        }
    };
    if resp.succeeded {
        return Ok(GroupOutcome::Committed { revision: resp.revision });
    }
    let mut results = resp.results.into_iter();
    let member_ok = matches!(results.next(), Some(OpResult::Get(g)) if g.kvs.first().map(|kv| kv.create_revision) == Some(member_revision));
    let mut heads = HashMap::new();
    for ((_, _, p), r) in group.iter().zip(results) {
        if let OpResult::Get(g) = r
            && let Some(kv) = g.kvs.first()
        {
            heads.insert(p.log, (decode::<LogHead>("log head", &kv.value)?, kv.mod_revision));
        }
    }
    if ambiguous {
        // An earlier attempt may have applied (§3.8): it did iff our first locator sits at the
        // offset it proposed. The group is one transaction, so one log answers for all.
        if let Some((_, _, p)) = group.iter().find(|(_, _, p)| p.first_locator.is_some())
            && let Some(loc) = &p.first_locator
            && resolve(core, seq, deadline, p.log, loc).await?
        {
            return Ok(GroupOutcome::CommittedEarlier { heads });
        }
    }
    // Checked after the locator: an earlier attempt may have applied while the incarnation
    // lived (its answer lost), and must then be acknowledged, not failed.
    if !member_ok {
        return Ok(GroupOutcome::IncarnationEnded);
    }
    Ok(GroupOutcome::Moved { heads })
}

/// Whether an unanswered attempt committed `loc`, read until the deadline while the reads
/// fail retryably. Any failure to find out is an unknown outcome, never a definite one: the
/// attempt may have applied (found by the simulation, seed 3 of the writers group: a read
/// failing with UNAVAILABLE here failed appends definitely that had committed).
async fn resolve(
    core: &Core,
    seq: u64,
    deadline: Instant,
    log: LogId,
    loc: &Locator,
) -> Result<bool, LogError> {
    loop {
        match committed_at(core, log, loc).await {
            Ok(found) => return Ok(found),
            Err(e) if e.code() == crate::Code::Unavailable && Instant::now() < deadline => {
                tracing::warn!(seq, error = %e, "resolving an unanswered commit; reading again");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => {
                return Err(LogError::unknown(format!(
                    "commit of WAL object {seq}: an unanswered attempt could not be resolved: {e}"
                )));
            }
        }
    }
}

/// Whether the locator `loc` (of WAL sequence `loc.wal_seq`) is committed at its offset,
/// read linearizably.
pub(super) async fn committed_at(core: &Core, log: LogId, loc: &Locator) -> Result<bool, LogError> {
    let snap = core.reader.snapshot(log).await?;
    if snap.head.next_offset <= loc.first_offset {
        return Ok(false);
    }
    let found = core.reader.find_locator(&snap, loc.first_offset, false).await?;
    Ok(found.is_some_and(|l| {
        l.first_offset == loc.first_offset
            && l.wal_seq == loc.wal_seq
            && l.byte_start == loc.byte_start
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::TxnMark::{Data, End};

    #[test]
    fn a_transaction_opens_once_ends_once_and_no_more_than_the_bound_open() {
        let mut h = LogHead::default();
        assert!(mark_txn(&mut h, Data { producer_id: 1 }, 10).is_ok());
        assert!(mark_txn(&mut h, Data { producer_id: 1 }, 12).is_ok());
        assert_eq!(h.open_txns.len(), 1, "its later batches leave it open at 10");
        assert_eq!(h.open_txns[0].first_offset, 10);
        assert!(mark_txn(&mut h, End { producer_id: 2, abort: true }, 13).is_ok());
        assert!(h.aborted.is_empty(), "nothing of 2's here: no abort to index");
        assert!(mark_txn(&mut h, End { producer_id: 1, abort: true }, 14).is_ok());
        assert!(h.open_txns.is_empty());
        assert_eq!((h.aborted[0].first_offset, h.aborted[0].last_offset), (10, 14));
        for pid in 0..crate::MAX_OPEN_TXNS as i64 {
            assert!(mark_txn(&mut h, Data { producer_id: 100 + pid }, 20).is_ok());
        }
        let before = h.clone();
        assert!(matches!(mark_txn(&mut h, Data { producer_id: 1 }, 30), Err(Unmet::OpenTxns)));
        assert_eq!(h, before, "refused: nothing applied");
        assert!(mark_txn(&mut h, Data { producer_id: 100 }, 30).is_ok(), "one open already");
    }
}
