//! The writer's incarnation (ARCHITECTURE §3.9-3.10, §5): registration with its first sequence
//! block and low-water mark in one transaction, further blocks, the keep-alive that renews the
//! lease and gives up an idle writer's block, and re-registration after the lease is lost.

use super::*;

/// Registers a new incarnation: a lease, the member key under it, and the first sequence block
/// with the low-water mark, all in one transaction (ARCHITECTURE §5: the mark exists before any
/// sequence of the block can be used).
pub(super) async fn register(
    meta: &dyn MetadataStore,
    keys: &Keys,
    cfg: &LogStorageConfig,
) -> Result<Identity, LogError> {
    let member = keys.member("writer", &cfg.writer_id);
    // A writer restarted under the same id finds its previous incarnation's key until that
    // lease expires: wait for it (a live duplicate keeps it, and is refused below).
    let give_up = Instant::now() + cfg.lease_ttl * 2 + Duration::from_secs(1);
    let mut warned = false;
    while meta.get(&member).await?.is_some() && Instant::now() < give_up {
        if !warned {
            tracing::warn!(writer = %cfg.writer_id, "writer id still registered (a previous incarnation?); waiting for its lease to expire");
            warned = true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // A Kafka node id only for a writer that serves Kafka (taken once per writer id, kept).
    let node_id = match cfg.kafka_advertise.is_empty() {
        true => -1,
        false => crate::membership::node_id(meta, &cfg.cluster, &cfg.writer_id).await?,
    };
    let lease = meta.lease_grant(cfg.lease_ttl).await?;
    let member_record = crate::records::MemberRecord {
        id: cfg.writer_id.clone(),
        role: "writer".to_owned(),
        address: cfg.advertise.clone(),
        zone: cfg.zone.clone(),
        kafka: cfg.kafka_advertise.clone(),
        node_id,
    }
    .encode_to_vec();
    for _ in 0..100 {
        let (next, seq_rev) = read_next_seq(meta, keys).await?;
        let end = next + cfg.seq_block;
        let txn = Txn::new()
            .when([
                Compare::create_revision(member.clone(), CompareOp::Equal, 0),
                Compare::mod_revision(keys.next_seq(), CompareOp::Equal, seq_rev),
            ])
            .and_then([
                TxnOp::put_with_lease(member.clone(), member_record.clone(), lease),
                TxnOp::put(keys.next_seq(), end.to_string()),
                TxnOp::put_with_lease(keys.low_water(&cfg.writer_id), next.to_string(), lease),
            ])
            .or_else([TxnOp::get(RangeRequest::key(member.clone()))]);
        let resp = meta.txn(txn).await?;
        if resp.succeeded {
            return Ok(Identity {
                lease,
                member_revision: resp.revision,
                next_seq: next,
                block_end: end,
                released: false,
            });
        }
        if matches!(resp.results.first(), Some(OpResult::Get(g)) if !g.kvs.is_empty()) {
            let _ = meta.lease_revoke(lease).await;
            return Err(LogError::AlreadyExists(format!(
                "writer id {} (a live process holds it)",
                cfg.writer_id
            )));
        }
    }
    Err(LogError::unavailable("could not allocate a WAL sequence block: too much contention"))
}

pub(super) async fn read_next_seq(
    meta: &dyn MetadataStore,
    keys: &Keys,
) -> Result<(u64, i64), LogError> {
    Ok(match meta.get(&keys.next_seq()).await? {
        Some(kv) => (
            parse_u64(&kv.value).ok_or_else(|| LogError::Corrupt("wal/next_seq".to_owned()))?,
            kv.mod_revision,
        ),
        None => (0, 0),
    })
}

/// Allocates the next sequence block `[start, end)`; with `mark` (the lease), the low-water
/// mark rises to `start` in the same transaction (only when no flush is unresolved). `None`:
/// the incarnation ended (its member key is gone or another's).
pub(super) async fn allocate_block(
    meta: &dyn MetadataStore,
    keys: &Keys,
    cfg: &LogStorageConfig,
    member_revision: i64,
    mark: Option<LeaseId>,
) -> Result<Option<(u64, u64)>, LogError> {
    let member = keys.member("writer", &cfg.writer_id);
    for _ in 0..100 {
        let (next, seq_rev) = read_next_seq(meta, keys).await?;
        let end = next + cfg.seq_block;
        let raise = mark.map(|lease| {
            TxnOp::put_with_lease(keys.low_water(&cfg.writer_id), next.to_string(), lease)
        });
        let txn = Txn::new()
            .when([
                Compare::create_revision(member.clone(), CompareOp::Equal, member_revision),
                Compare::mod_revision(keys.next_seq(), CompareOp::Equal, seq_rev),
            ])
            .and_then(std::iter::once(TxnOp::put(keys.next_seq(), end.to_string())).chain(raise))
            .or_else([TxnOp::get(RangeRequest::key(member.clone()))]);
        let resp = meta.txn(txn).await?;
        if resp.succeeded {
            return Ok(Some((next, end)));
        }
        match resp.results.first() {
            Some(OpResult::Get(g))
                if g.kvs.first().map(|kv| kv.create_revision) == Some(member_revision) =>
            {
                continue;
            }
            _ => return Ok(None),
        }
    }
    Err(LogError::unavailable("could not allocate a WAL sequence block: too much contention"))
}

/// While no flush is unresolved, gives up the rest of the sequence block and raises the
/// low-water mark to `wal/next_seq` (ARCHITECTURE §5): the sequences left in the block lie
/// below every busier writer's objects, and a mark there would hold back compaction and the
/// cleaner's cutoff for as long as this writer stays idle. Every sequence it uses later comes
/// from a block allocated after this, at or above that `next_seq`. Holds the identity lock,
/// so no flush is stamped meanwhile.
pub(super) async fn release_idle_block(core: &Core) -> Result<(), LogError> {
    let mut id = core.identity.lock().await;
    // Unresolved first: a committer that ends the incarnation does so before it resolves.
    if core.unresolved.load(Ordering::SeqCst) != 0
        || core.is_lost(id.member_revision)
        || core.closing.load(Ordering::SeqCst)
    {
        return Ok(());
    }
    let mark_key = core.keys.low_water(&core.cfg.writer_id);
    let read = Txn::new().and_then([
        TxnOp::get(RangeRequest::key(core.keys.next_seq())),
        TxnOp::get(RangeRequest::key(mark_key.clone())),
    ]);
    let resp = core.meta.txn(read).await?;
    let seq_of = |r: Option<&OpResult>| match r {
        Some(OpResult::Get(g)) => g.kvs.first().and_then(|kv| parse_u64(&kv.value)),
        _ => None,
    };
    let (Some(next), mark) = (seq_of(resp.results.first()), seq_of(resp.results.get(1))) else {
        return Ok(());
    };
    if mark.is_some_and(|m| m >= next) {
        return Ok(()); // nothing handed out since: the mark is as high as it can be
    }
    let member = core.keys.member("writer", &core.cfg.writer_id);
    let raise = Txn::new()
        .when([Compare::create_revision(member, CompareOp::Equal, id.member_revision)])
        .and_then([TxnOp::put_with_lease(mark_key, next.to_string(), id.lease)]);
    match core.meta.txn(raise).await {
        Ok(r) if r.succeeded => {
            id.next_seq = id.block_end;
            id.released = true;
        }
        Ok(_) => core.lose(id.member_revision),
        Err(e) => {
            // The raise may have applied, its answer lost: give up the block either way, so no
            // flush is stamped below a mark that may have risen past it (found by the
            // simulation, maintenance seed 3813: the writer kept stamping its old block under
            // a mark at wal/next_seq, floors rose above its next commit, and the cleaner
            // deleted that commit's WAL object). Giving it up needlessly only skips sequences.
            id.next_seq = id.block_end;
            id.released = true;
            return Err(e.into());
        }
    }
    Ok(())
}

pub(super) async fn keep_alive(core: Arc<Core>) {
    let period = core.cfg.lease_ttl / 3;
    let mut last_ok = Instant::now();
    while !core.closing.load(Ordering::SeqCst) {
        tokio::time::sleep(period).await;
        let (lease, member_revision) = {
            let id = core.identity.lock().await;
            (id.lease, id.member_revision)
        };
        match core.meta.lease_keep_alive(lease).await {
            Ok(_) => {
                last_ok = Instant::now();
                if let Err(e) = release_idle_block(&core).await {
                    tracing::warn!(error = %e, "could not raise the idle writer's low-water mark");
                }
            }
            Err(MetaError::LeaseNotFound(_)) => core.lose(member_revision),
            Err(e) => {
                tracing::warn!(error = %e, "lease keep-alive failed");
                if last_ok.elapsed() >= core.cfg.lease_ttl {
                    core.lose(member_revision);
                }
            }
        }
        if core.is_lost(member_revision) && !core.closing.load(Ordering::SeqCst) {
            tracing::warn!("writer lease lost; registering a new incarnation");
            reincarnate(&core).await;
            last_ok = Instant::now();
        }
    }
}

/// Clears `reincarnating` however [`reincarnate`] ends.
pub(super) struct Reincarnated<'a>(&'a Core);

impl Drop for Reincarnated<'_> {
    fn drop(&mut self) {
        self.0.reincarnating.store(false, Ordering::SeqCst);
    }
}

/// Drops the incarnation and registers a new one (ARCHITECTURE §3.10).
/// Both the committer (after failing a lost incarnation's flush) and the keep-alive task (so an
/// idle writer comes back too) call this; the first one re-registers.
pub(super) async fn reincarnate(core: &Arc<Core>) {
    let mut id = core.identity.lock().await;
    if !core.is_lost(id.member_revision) {
        return;
    }
    core.reincarnating.store(true, Ordering::SeqCst);
    let _done = Reincarnated(core);
    let _ = core.meta.lease_revoke(id.lease).await;
    core.served.lock().clear();
    loop {
        match register(core.meta.as_ref(), &core.keys, &core.cfg).await {
            Ok(new) => {
                *id = new;
                tracing::info!(
                    member_revision = id.member_revision,
                    "writer registered a new incarnation"
                );
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "re-registration failed; retrying");
                if core.closing.load(Ordering::SeqCst) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}
