//! The object key layout: the one place that names objects. Every key is relative to the
//! store (a configured S3 prefix or the local root sits above it).
//!
//! | key | object | written by | read by | deleted by |
//! |---|---|---|---|---|
//! | `wal/<seq:020>.wal` | one writer flush: chunks of many logs (ARCHITECTURE §3.2) | writer, create-only | writer, reader, compactor | cleaner, once `seq` is below the cutoff and the grace period has passed |
//! | `compacted/<log:020>/<first_offset:020>-<claim_rev:020>.seg` | a contiguous offset range of one log, from the compactor claim with create_revision `claim_rev` (§5) | compactor, create-only | reader | cleaner, when no live index record references it and the claim is gone |
//! | `state/<log:020>/<slot hex>/<epoch:020>-<upto:020>.ckpt` | a checkpoint of per-slot state (the Kafka front end's idempotent producers) covering the log below `upto`, taken under the slot's `epoch` (ARCHITECTURE §11) | the slot's owner | the slot's next owner | the owner, once its pointer names a newer one; the cleaner, when no pointer names it |
//!
//! Numbers are zero-padded to 20 digits (u64's width), so the lexicographic order of keys is
//! the numeric order: a listing of `wal/` from an offset visits sequences in order.

use crate::Path;

pub const WAL_DIR: &str = "wal";
pub const COMPACTED_DIR: &str = "compacted";

/// The WAL object of flush `seq`.
pub fn wal_object(seq: u64) -> Path {
    Path::from(format!("{WAL_DIR}/{seq:020}.wal"))
}

/// The sequence of a WAL object key, or `None` for any other key.
pub fn parse_wal_object(path: &Path) -> Option<u64> {
    let name = path.as_ref().strip_prefix(WAL_DIR)?.strip_prefix('/')?;
    parse_padded(name.strip_suffix(".wal")?)
}

pub const STATE_DIR: &str = "state";

/// A checkpoint of `slot`'s state in `log`, taken under `epoch`, covering offsets below
/// `upto`. The slot's name is hex-encoded: zone names need not be valid key characters.
pub fn state_object(log: u64, slot: &str, epoch: u64, upto: u64) -> Path {
    let hex: String = slot.bytes().map(|b| format!("{b:02x}")).collect();
    Path::from(format!("{STATE_DIR}/{log:020}/{hex}/{epoch:020}-{upto:020}.ckpt"))
}

/// The log of a checkpoint object's key, or `None` for any other key.
pub fn parse_state_object(path: &Path) -> Option<u64> {
    let rest = path.as_ref().strip_prefix(STATE_DIR)?.strip_prefix('/')?;
    let (log, rest) = rest.split_once('/')?;
    rest.ends_with(".ckpt").then_some(())?;
    parse_padded(log)
}

/// Identifies a compacted object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CompactedKey {
    pub log: u64,
    pub first_offset: u64,
    pub claim_revision: u64,
    /// A lake table's Parquet data file (`.parquet`), not a WAL-format segment (`.seg`).
    pub lake: bool,
}

pub fn compacted_object(k: CompactedKey) -> Path {
    let ext = if k.lake { "parquet" } else { "seg" };
    Path::from(format!(
        "{COMPACTED_DIR}/{:020}/{:020}-{:020}.{ext}",
        k.log, k.first_offset, k.claim_revision
    ))
}

/// Where lake tables keep their Iceberg metadata (manifests, manifest lists, metadata JSON);
/// their data files are the logs' compacted `.parquet` segments.
pub const LAKE_DIR: &str = "lake";

/// The folder of the lake table of the stream with this identity (a UUID).
pub fn lake_table_dir(stream_identity: &str) -> Path {
    Path::from(format!("{LAKE_DIR}/{stream_identity}"))
}

/// The folder holding every compacted object of one log.
pub fn compacted_dir(log: u64) -> Path {
    Path::from(format!("{COMPACTED_DIR}/{log:020}"))
}

pub fn parse_compacted_object(path: &Path) -> Option<CompactedKey> {
    let rest = path.as_ref().strip_prefix(COMPACTED_DIR)?.strip_prefix('/')?;
    let (log, name) = rest.split_once('/')?;
    let (stem, lake) = match name.strip_suffix(".parquet") {
        Some(stem) => (stem, true),
        None => (name.strip_suffix(".seg")?, false),
    };
    let (first, claim) = stem.split_once('-')?;
    Some(CompactedKey {
        log: parse_padded(log)?,
        first_offset: parse_padded(first)?,
        claim_revision: parse_padded(claim)?,
        lake,
    })
}

fn parse_padded(s: &str) -> Option<u64> {
    if s.len() != 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn wal_key_round_trips(seq in any::<u64>()) {
            prop_assert_eq!(parse_wal_object(&wal_object(seq)), Some(seq));
            prop_assert_eq!(parse_compacted_object(&wal_object(seq)), None);
        }

        #[test]
        fn wal_keys_sort_like_their_sequences(a in any::<u64>(), b in any::<u64>()) {
            prop_assert_eq!(wal_object(a).as_ref().cmp(wal_object(b).as_ref()), a.cmp(&b));
        }

        #[test]
        fn compacted_key_round_trips(log in any::<u64>(), first_offset in any::<u64>(), claim_revision in any::<u64>(), lake in any::<bool>()) {
            let k = CompactedKey { log, first_offset, claim_revision, lake };
            let p = compacted_object(k);
            prop_assert_eq!(parse_compacted_object(&p), Some(k));
            prop_assert_eq!(parse_wal_object(&p), None);
            prop_assert!(p.as_ref().starts_with(compacted_dir(log).as_ref()));
        }

        #[test]
        fn state_key_names_its_log(log in any::<u64>(), slot in "[a-z0-9*-]{1,20}", epoch in any::<u64>(), upto in any::<u64>()) {
            let p = state_object(log, &slot, epoch, upto);
            prop_assert_eq!(parse_state_object(&p), Some(log));
            prop_assert_eq!(parse_wal_object(&p), None);
            prop_assert_eq!(parse_compacted_object(&p), None);
        }

        #[test]
        fn arbitrary_keys_never_parse_by_accident(s in "[a-z0-9/.-]{0,60}") {
            let p = Path::from(s.as_str());
            if let Some(seq) = parse_wal_object(&p) {
                prop_assert_eq!(wal_object(seq), p.clone());
            }
            if let Some(k) = parse_compacted_object(&p) {
                prop_assert_eq!(compacted_object(k), p);
            }
        }
    }

    #[test]
    fn malformed_keys_are_rejected() {
        for bad in [
            "wal/12.wal",
            "wal/0000000000000000000x.wal",
            "wal/00000000000000000001.seg",
            "other/00000000000000000001.wal",
        ] {
            assert_eq!(parse_wal_object(&Path::from(bad)), None, "{bad}");
        }
        assert_eq!(
            parse_wal_object(&Path::from("wal/99999999999999999999.wal")),
            None,
            "overflows u64"
        );
    }
}
