//! Checkpoints of state an owner keeps per (log, slot) — the Kafka front end's idempotent
//! producers (ARCHITECTURE §11) — so that the slot's next owner need not replay the whole log.
//! A checkpoint is an object holding opaque bytes, true of the log below its `upto` offset, and
//! a pointer to it in `logs/<id>/producers/<slot>` (value: `<upto> <epoch> <object key>`). The
//! pointer only moves forward: a checkpoint with a lower `upto` than the one named is dropped.
//! What the bytes mean is the caller's; the log stays the source of truth, and a new owner
//! replays it from `upto`.

use bytes::Bytes;
use metadata::{Compare, CompareOp, Txn, TxnOp};
use objstore::Path;
use objstore::object_store::{ObjectStoreExt, PutPayload};

use crate::records::LogState;
use crate::{LogError, LogId, LogReader};

/// The largest checkpoint read back; a pointer naming a bigger object is treated as corrupt.
pub const MAX_CHECKPOINT_BYTES: u64 = 64 << 20;

/// A slot's latest checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// The state covers the log below this offset.
    pub upto: u64,
    /// The slot's epoch it was taken under.
    pub epoch: i64,
    pub state: Bytes,
}

struct Pointer {
    upto: u64,
    epoch: i64,
    object: String,
    revision: i64,
}

fn parse(value: &[u8], revision: i64) -> Option<Pointer> {
    let s = std::str::from_utf8(value).ok()?;
    let mut parts = s.splitn(3, ' ');
    let upto = parts.next()?.parse().ok()?;
    let epoch = parts.next()?.parse().ok()?;
    let object = parts.next()?.to_owned();
    Some(Pointer { upto, epoch, object, revision })
}

async fn pointer(reader: &LogReader, log: LogId, slot: &str) -> Result<Option<Pointer>, LogError> {
    let key = reader.keys().producers(log, slot);
    match reader.meta().get(&key).await? {
        None => Ok(None),
        Some(kv) => parse(&kv.value, kv.mod_revision)
            .map(Some)
            .ok_or_else(|| LogError::Corrupt(format!("state pointer of log {log} slot {slot}"))),
    }
}

/// The log's next offset if its head, read now, shows `slot` served at `epoch` (the caller's
/// tenure); `None` if the slot changed hands or the log is gone. Read before snapshotting the
/// state to checkpoint: every entry below it that the slot holds is this tenure's or earlier.
pub async fn end_if_served(
    reader: &LogReader,
    log: LogId,
    slot: &str,
    epoch: i64,
) -> Result<Option<u64>, LogError> {
    let snap = match reader.snapshot(log).await {
        Ok(s) => s,
        Err(LogError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let served = snap.head.log_state() == LogState::Normal
        && snap.head.slot(slot).is_some_and(|s| s.epoch == epoch);
    Ok(served.then_some(snap.head.next_offset))
}

/// The slot's latest checkpoint, if it has one. A checkpoint replaced (and deleted) between
/// reading its pointer and its object is looked for again under the new pointer; one still
/// missing, or too big, is `Corrupt`.
pub async fn load(
    reader: &LogReader,
    log: LogId,
    slot: &str,
) -> Result<Option<Checkpoint>, LogError> {
    let mut tries = 0;
    loop {
        let Some(p) = pointer(reader, log, slot).await? else { return Ok(None) };
        let path = Path::from(p.object.as_str());
        let got = match reader.objects().get(&path).await {
            Err(objstore::object_store::Error::NotFound { .. }) if tries < 3 => {
                tries += 1;
                continue;
            }
            Err(objstore::object_store::Error::NotFound { .. }) => {
                return Err(LogError::Corrupt(format!(
                    "state checkpoint {path}, named by log {log} slot {slot}, is missing"
                )));
            }
            got => got?,
        };
        if got.meta.size > MAX_CHECKPOINT_BYTES {
            return Err(LogError::Corrupt(format!(
                "state checkpoint {path} is {} bytes; at most {MAX_CHECKPOINT_BYTES}",
                got.meta.size
            )));
        }
        let state = got.bytes().await?;
        return Ok(Some(Checkpoint { upto: p.upto, epoch: p.epoch, state }));
    }
}

/// The slots of `log` that have a checkpoint, in name order.
pub async fn slots(reader: &LogReader, log: LogId) -> Result<Vec<String>, LogError> {
    let prefix = reader.keys().producers_prefix(log);
    let got = reader.meta().range(metadata::RangeRequest::prefix(prefix.clone())).await?;
    Ok(got
        .kvs
        .iter()
        .filter_map(|kv| kv.key.strip_prefix(prefix.as_slice()))
        .filter_map(|s| std::str::from_utf8(s).ok().map(str::to_owned))
        .collect())
}

/// Writes a checkpoint of `slot` in `log` and points to it, unless the pointer already names
/// one at `upto` or beyond (then nothing changes). `upto` must be at most what
/// [`end_if_served`] answered for `epoch` before the state was snapshotted. Returns whether the pointer moved. The
/// checkpoint it replaced is deleted; one left by a crash between the two steps is the
/// cleaner's.
pub async fn save(
    reader: &LogReader,
    log: LogId,
    slot: &str,
    epoch: i64,
    upto: u64,
    state: Bytes,
) -> Result<bool, LogError> {
    let old = pointer(reader, log, slot).await?;
    if old.as_ref().is_some_and(|p| p.upto >= upto) {
        return Ok(false);
    }
    let key = reader.keys().producers(log, slot);
    let compare = match &old {
        Some(p) => Compare::mod_revision(key, CompareOp::Equal, p.revision),
        None => Compare::create_revision(key, CompareOp::Equal, 0),
    };
    put(reader, log, slot, epoch, upto, state, old, vec![compare]).await
}

/// Moves the checkpoint of another owner's `slot` forward to `upto`, with `state` true of the
/// whole log below it (every slot's checkpoint merged and the log replayed after the lowest),
/// if its pointer is below `upto` and unchanged between this read and the write, and the
/// slot's owner the head names (its writer id and incarnation) is gone: its commits are then
/// refused, and a next owner moves the pointer before it accepts a batch. A slot whose zone
/// has no writer would otherwise hold its pointer back for good (or name a checkpoint lost),
/// and every new tenure of any slot of the log would replay the log from there. Returns
/// whether the pointer moved.
pub async fn refresh(
    reader: &LogReader,
    log: LogId,
    slot: &str,
    upto: u64,
    state: Bytes,
) -> Result<bool, LogError> {
    let Some(old) = pointer(reader, log, slot).await? else { return Ok(false) };
    if old.upto >= upto {
        return Ok(false);
    }
    let revision = old.revision;
    let key = reader.keys().producers(log, slot);
    let mut compares = vec![Compare::mod_revision(key, CompareOp::Equal, revision)];
    let snap = reader.snapshot(log).await?;
    if let Some(o) = snap.head.slot(slot).and_then(|s| s.owner.as_ref()) {
        let member = reader.keys().member("writer", &o.writer_id);
        compares.push(Compare::create_revision(member, CompareOp::NotEqual, o.member_revision));
    }
    let epoch = old.epoch;
    put(reader, log, slot, epoch, upto, state, Some(old), compares).await
}

/// Writes the checkpoint object and moves the pointer to it if `compares` hold.
#[allow(clippy::too_many_arguments)]
async fn put(
    reader: &LogReader,
    log: LogId,
    slot: &str,
    epoch: i64,
    upto: u64,
    state: Bytes,
    old: Option<Pointer>,
    compares: Vec<Compare>,
) -> Result<bool, LogError> {
    let path = objstore::keys::state_object(log.0, slot, u64::try_from(epoch).unwrap_or(0), upto);
    reader.objects().put(&path, PutPayload::from(state)).await?;
    let key = reader.keys().producers(log, slot);
    let value = format!("{upto} {epoch} {path}");
    let txn = Txn::new().when(compares).and_then([TxnOp::put(key, value.into_bytes())]);
    let moved = reader.meta().txn(txn).await?.succeeded;
    // The loser of a race deletes its own object, unless the winner wrote the same one (the
    // same slot, epoch and offset); the winner deletes the one it replaced.
    let unused = match (&old, moved) {
        (_, false) => match pointer(reader, log, slot).await {
            Ok(Some(p)) if p.object == path.as_ref() => None,
            Ok(_) => Some(path),
            // Not known: left for the cleaner, which keeps what a pointer names.
            Err(_) => None,
        },
        (Some(p), true) if p.object != path.as_ref() => Some(Path::from(p.object.as_str())),
        _ => None,
    };
    if let Some(unused) = unused
        && let Err(e) = reader.objects().delete(&unused).await
    {
        tracing::debug!(object = %unused, error = %e, "state checkpoint left for the cleaner");
    }
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_parse_and_refuse_garbage() {
        let p = parse(b"120 7 state/x/y.ckpt", 3).expect("parses");
        assert_eq!((p.upto, p.epoch, p.object.as_str(), p.revision), (120, 7, "state/x/y.ckpt", 3));
        assert!(parse(b"120 7", 3).is_none());
        assert!(parse(b"x 7 o", 3).is_none());
        assert!(parse(&[0xff, 0x20], 3).is_none());
    }
}
