//! Owner slots (ARCHITECTURE §3, "Owner selection and zones"): the member watch that drops
//! slots the owner function moved elsewhere, and taking a slot of a log.

use super::*;

/// Keeps the member view fresh and, when the member set changes, stops serving the stream
/// slots the owner function now gives to another writer: their next appends are answered
/// NOT_OWNER, and the new owner's takeover fences this writer's slot (ARCHITECTURE §3).
pub(super) async fn watch_members(core: Arc<Core>) {
    let mut watch =
        crate::membership::MemberWatch::start(core.meta.clone(), &core.cfg.cluster, "writer");
    while !core.closing.load(Ordering::SeqCst) {
        if let Some(set) = watch.current()
            && !core.members.lock().as_ref().is_some_and(|s| Arc::ptr_eq(s, &set))
        {
            release_lost_slots(&core, &set.members);
            *core.members.lock() = Some(set);
        }
        // The timeout only lets a closed writer's task end.
        if let Ok(false) = tokio::time::timeout(Duration::from_secs(1), watch.changed()).await {
            return;
        }
    }
}

/// Drops the served stream slots that the owner function no longer gives to this writer.
pub(super) fn release_lost_slots(core: &Core, members: &[Member]) {
    let mut served = core.served.lock();
    served.retain(|(log, slot), s| match &s.head.route {
        Some(route) => {
            let keep = core.check_owner(*log, route, slot, members).is_ok();
            if !keep {
                tracing::info!(log = %log, slot, "member set changed: no longer the owner");
            }
            keep
        }
        None => true,
    });
}

/// Takes a slot of a log: fences only that slot (ARCHITECTURE §3, "Owner selection and
/// zones"). A stream's log is taken only if the owner function over the live writers, read
/// linearizably, picks this writer. The epoch is the head's mod_revision the takeover compared
/// against: unique per log and increasing, as every takeover or fence moves the head.
pub(super) async fn take_slot(
    core: &Core,
    log: LogId,
    slot: &str,
    me: &Owner,
) -> Result<Served, LogError> {
    for _ in 0..100 {
        let snap = core.reader.snapshot(log).await?;
        if let Some(route) = &snap.head.route {
            let (members, _) =
                crate::membership::live_members(core.meta.as_ref(), &core.cfg.cluster, "writer")
                    .await?;
            core.check_owner(log, route, slot, &members)?;
        }
        // A log fenced by a member that is gone (matched by incarnation) is taken over, so a
        // dead fencer never wedges it (ARCHITECTURE §3, "Fencing").
        let mut fencer_gone: Option<Compare> = None;
        match snap.head.log_state() {
            LogState::Deleted => return Err(LogError::NotFound(log)),
            LogState::Fenced => {
                let fenced =
                    || LogError::Fenced { log, held: 0, current: snap.head.epoch, whole_log: true };
                let Some(by) = &snap.head.fenced_by else { return Err(fenced()) };
                let key = core.keys.member("writer", &by.writer_id);
                let now = core.meta.get(&key).await?.map_or(0, |kv| kv.create_revision);
                if now == by.member_revision {
                    return Err(fenced());
                }
                fencer_gone = Some(Compare::create_revision(key, CompareOp::Equal, now));
            }
            LogState::Normal => {}
        }
        if fencer_gone.is_none()
            && let Some(s) = snap.head.slot(slot)
            && s.owner.as_ref() == Some(me)
        {
            // Our own takeover, whose answer was lost: the epoch is ours. (Not on a fenced
            // log: the fence ended every slot, ours included.)
            return Ok(Served {
                epoch: s.epoch,
                head: snap.head.clone(),
                head_revision: snap.head_revision,
            });
        }
        let epoch = snap.head_revision;
        let mut head = snap.head.clone();
        if fencer_gone.is_some() {
            head.state = LogState::Normal as i32;
            head.fenced_by = None;
            head.slots.clear();
        }
        head.slots.retain(|s| s.zone != slot);
        head.slots.push(Slot { zone: slot.to_owned(), epoch, owner: Some(me.clone()) });
        let member = core.keys.member("writer", &core.cfg.writer_id);
        let compares = [
            Compare::mod_revision(core.keys.head(log), CompareOp::Equal, snap.head_revision),
            Compare::create_revision(member, CompareOp::Equal, me.member_revision),
        ];
        let txn = Txn::new()
            .when(compares.into_iter().chain(fencer_gone))
            .and_then([TxnOp::put(core.keys.head(log), head.encode_to_vec())]);
        match core.meta.txn(txn).await {
            Ok(resp) if resp.succeeded => {
                return Ok(Served { epoch, head, head_revision: resp.revision });
            }
            Ok(_) => {}
            // Re-read: the head tells whether the takeover applied.
            Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(e) => return Err(e.into()),
        }
    }
    Err(LogError::unavailable(format!("could not take a slot of log {log}: too much contention")))
}
