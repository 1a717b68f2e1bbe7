//! Lake logs (docs/lake.md): the partitions of streams with `lake.table` set, whose
//! compacted segments are Parquet files that are at once the log's segments and the data files
//! of the stream's Iceberg table. What the compactor and the reader need of them: which logs
//! they are, where a segment must be cut (one ingest day each), the locator's place map, the
//! table's state in the metadata store and the commit that adds a segment to it.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use objstore::object_store::ObjectStoreExt;

use logstore::records::{LakeFile, Locator, RowGroupRef};
use logstore::{LogError, LogId};

/// A log that is one partition of a lake stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LakeLog {
    /// The stream's identity (its table is named after it).
    pub stream_identity: String,
    pub partition: u32,
}

/// The lake logs a compaction cycle knows of, and where their tables' files are seen from
/// outside (the object store's root URI, `s3://bucket/prefix` or `file:///dir`).
#[derive(Clone, Debug, Default)]
pub struct LakeLogs {
    pub base_uri: String,
    pub logs: HashMap<LogId, LakeLog>,
    /// Row groups' size in lake segments (`None`: the segment format's default, ~1 MiB).
    pub row_group_bytes: Option<usize>,
}

impl LakeLogs {
    pub fn get(&self, log: LogId) -> Option<&LakeLog> {
        self.logs.get(&log)
    }

    /// The URI outside engines read `path` (an object key) at.
    pub fn uri(&self, path: &objstore::Path) -> String {
        format!("{}/{}", self.base_uri.trim_end_matches('/'), path.as_ref())
    }

    /// The object key of a URI under the store's root, if it is one.
    pub fn path_of(&self, uri: &str) -> Option<objstore::Path> {
        let rest = uri.strip_prefix(self.base_uri.trim_end_matches('/'))?.strip_prefix('/')?;
        Some(objstore::Path::from(rest))
    }

    /// A new table's state: its files under `lake/<identity>`.
    pub fn new_table(&self, l: &LakeLog) -> lake::table::TableState {
        let dir = objstore::keys::lake_table_dir(&l.stream_identity);
        lake::table::TableState::new(table_uuid(&l.stream_identity), self.uri(&dir))
    }
}

/// A table's UUID (Iceberg requires one): the stream's identity, which is one; else (an
/// identity given, as the simulation's) one derived from it.
pub(crate) fn table_uuid(identity: &str) -> String {
    let b = identity.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_hexdigit);
    let is_uuid = b.len() == 36
        && [8, 13, 18, 23].iter().all(|&i| b[i] == b'-')
        && hex(0..8)
        && hex(9..13)
        && hex(14..18)
        && hex(19..23)
        && hex(24..36);
    if is_uuid {
        return identity.to_ascii_lowercase();
    }
    let h = |seed: u32| crc32c::crc32c_append(seed, b);
    let (a, c, d, e) = (h(1), h(2), h(3), h(4));
    format!(
        "{a:08x}-{:04x}-4{:03x}-{:04x}-{:04x}{e:08x}",
        c >> 16,
        c & 0xfff,
        (d >> 16) & 0x3fff | 0x8000,
        d & 0xffff
    )
}

/// The largest table state the compactor commits to (the metadata store refuses values of
/// 1.5 MiB, and the swap's other operations share its request): a table with a larger state
/// takes no more segments.
pub const MAX_TABLE_STATE: usize = 1 << 20;

/// The first of `runs` (one log's, in offset order) that starts a new UTC day by the running
/// maximum of their ingest times: a lake segment holds one day, so it ends before it.
pub(crate) fn day_cut(runs: &[&Locator]) -> Option<usize> {
    let mut ingest = i64::MIN;
    let mut day = None;
    for (i, l) in runs.iter().enumerate() {
        ingest = ingest.max(l.ingest_time());
        let d = lake::segment::day_of(ingest);
        if day.is_some_and(|first| first != d) {
            return Some(i);
        }
        day.get_or_insert(d);
    }
    None
}

/// A written segment's place map, as its locator keeps it. `entries` are the (offset, stored
/// length, batch max timestamp) of what it was written from: they place each row group in the
/// log's bytes and bound its timestamps.
pub(crate) fn lake_file(
    seg: &lake::segment::Segment,
    entries: impl Iterator<Item = (u64, u64, i64)>,
) -> LakeFile {
    let entries: Vec<(u64, u64, i64)> = entries.collect();
    let mut before = 0u64;
    let mut at = 0usize;
    let row_groups = seg
        .row_groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            while entries.get(at).is_some_and(|e| e.0 < g.first_offset) {
                before += entries[at].1;
                at += 1;
            }
            // Its entries: from here to the next group's first offset.
            let end = seg.row_groups.get(i + 1).map_or(u64::MAX, |n| n.first_offset);
            let max_timestamp =
                entries[at..].iter().take_while(|e| e.0 < end).map(|e| e.2).max().unwrap_or(0);
            RowGroupRef {
                first_offset: g.first_offset,
                records: g.records,
                start: g.start,
                len: g.len,
                crc32c: g.crc32c,
                bytes_before: before,
                max_timestamp,
            }
        })
        .collect();
    LakeFile { footer_len: seg.footer_len, footer_crc32c: seg.footer_crc32c, row_groups }
}

/// Reads a table's state as the metadata store keeps it (JSON).
pub fn decode_table(value: &[u8]) -> Result<lake::table::TableState, LogError> {
    serde_json::from_slice(value).map_err(|e| LogError::Corrupt(format!("lake table state: {e}")))
}

pub(crate) fn encode_table(state: &lake::table::TableState) -> Result<Vec<u8>, LogError> {
    serde_json::to_vec(state).map_err(|e| LogError::Internal(format!("lake table state: {e}")))
}

/// Writes a commit's metadata files (manifest, manifest list, metadata JSON). A plain put: a
/// retried commit writes the same names again, and no committed state names them before the
/// transaction that follows.
pub(crate) async fn write_commit_files(
    objects: &Arc<dyn objstore::object_store::ObjectStore>,
    lakes: &LakeLogs,
    commit: &lake::table::Commit,
) -> Result<(), LogError> {
    for (uri, bytes) in &commit.files {
        let path = lakes.path_of(uri).ok_or_else(|| {
            LogError::Internal(format!("table file {uri} outside {}", lakes.base_uri))
        })?;
        objects.put(&path, Bytes::from(bytes.clone()).into()).await?;
    }
    Ok(())
}

/// The entries of `manifests` (files of the table at `lakes`' root), read from the store.
pub(crate) async fn read_manifests(
    objects: &Arc<dyn objstore::object_store::ObjectStore>,
    lakes: &LakeLogs,
    manifests: &[lake::iceberg::ManifestFile],
) -> Result<Vec<(String, Vec<lake::avro::Value>)>, LogError> {
    let mut out = Vec::with_capacity(manifests.len());
    for m in manifests {
        let path = lakes.path_of(&m.path).ok_or_else(|| {
            LogError::Internal(format!("manifest {} outside {}", m.path, lakes.base_uri))
        })?;
        let bytes = objects.get(&path).await?.bytes().await?;
        out.push((m.path.clone(), lake::iceberg::read_manifest(&bytes).map_err(lake_error)?));
    }
    Ok(out)
}

/// Times a table commit is planned again because another commit moved the table first.
pub(crate) const TABLE_RETRIES: usize = 32;

/// Applies table retention to the table of the stream `identity` (files under `base_uri`): a
/// delete snapshot taking out the days wholly older than `now_ms - retention_ms`, and expiry
/// of snapshots older than that; one compare-and-set on the table's state, planned again if
/// another commit moved it. The state committed, or `None` when there was nothing to do (or
/// no table yet).
pub async fn retain_table(
    meta: &dyn metadata::MetadataStore,
    objects: &Arc<dyn objstore::object_store::ObjectStore>,
    keys: &logstore::keys::Keys,
    base_uri: &str,
    identity: &str,
    retention_ms: i64,
    now_ms: i64,
) -> Result<Option<lake::table::TableState>, LogError> {
    use metadata::{Compare, CompareOp, Txn, TxnOp};
    let key = keys.lake_table(identity);
    let lakes = LakeLogs { base_uri: base_uri.to_owned(), ..Default::default() };
    let cutoff = now_ms.saturating_sub(retention_ms.max(0));
    for _ in 0..TABLE_RETRIES {
        let Some(kv) = meta.get(&key).await? else { return Ok(None) };
        let state = decode_table(&kv.value)?;
        // Named apart from any other commit, a concurrent retention pass's included (a file
        // of a plan that lost must never overwrite the winner's).
        let salt = {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_i64(now_ms);
            h.finish()
        };
        let r = lake::table::Retain {
            before_day: lake::segment::day_of(cutoff),
            snapshots_before_ms: cutoff,
            name: format!("retention-{now_ms}-{salt:016x}"),
            now_ms,
        };
        let Some(commit) = state.retain(&r) else { return Ok(None) };
        write_commit_files(objects, &lakes, &commit).await?;
        let txn = Txn::new()
            .when([Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision)])
            .and_then([TxnOp::put(key.clone(), encode_table(&commit.state)?)]);
        if meta.txn(txn).await?.succeeded {
            return Ok(Some(commit.state));
        }
    }
    Err(LogError::unavailable(format!(
        "lake table {identity}: its state kept moving under retention"
    )))
}

/// A lake table or segment error as a log error: invalid input is this code's fault, anything
/// else is something stored that does not read back.
pub(crate) fn lake_error(e: lake::LakeError) -> LogError {
    match e {
        lake::LakeError::Invalid(m) => LogError::Internal(m),
        e => LogError::Corrupt(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(first_offset: u64, ingest_ms: i64) -> Locator {
        Locator { first_offset, record_count: 1, ingest_ms, ..Default::default() }
    }

    #[test]
    fn a_segment_ends_before_the_first_run_of_a_new_day() {
        const DAY: i64 = 86_400_000;
        let runs = [run(0, DAY - 2), run(1, DAY - 1), run(2, DAY), run(3, DAY + 1)];
        let refs: Vec<&Locator> = runs.iter().collect();
        assert_eq!(day_cut(&refs), Some(2));
        assert_eq!(day_cut(&refs[2..]), None);
        // A run whose clock went back stays in the day the running maximum reached.
        let back = [run(0, DAY + 5), run(1, DAY - 5), run(2, 2 * DAY)];
        let refs: Vec<&Locator> = back.iter().collect();
        assert_eq!(day_cut(&refs), Some(2));
        // Runs without an ingest time use their running maximum timestamp.
        let old = Locator { max_timestamp: 2 * DAY, ..run(0, 0) };
        assert_eq!(old.ingest_time(), 2 * DAY);
    }

    #[test]
    fn a_table_uuid_is_the_identity_or_a_uuid_derived_from_it() {
        let id = "0C8F2F5E-7d0b-4c3e-9f7a-5b1d2e3f4a5b";
        assert_eq!(table_uuid(id), id.to_ascii_lowercase());
        let derived = table_uuid("sim-stream-7");
        assert_eq!(derived, table_uuid("sim-stream-7"));
        assert_ne!(derived, table_uuid("sim-stream-8"));
        assert_eq!(table_uuid(&derived), derived, "{derived} is not a UUID");
    }

    #[test]
    fn table_files_map_between_uris_and_object_keys() {
        let lakes = LakeLogs { base_uri: "s3://b/p/".to_owned(), ..Default::default() };
        let path = objstore::Path::from("lake/u/metadata/x.avro");
        assert_eq!(lakes.uri(&path), "s3://b/p/lake/u/metadata/x.avro");
        assert_eq!(lakes.path_of(&lakes.uri(&path)), Some(path));
        assert_eq!(lakes.path_of("s3://other/lake/x"), None);
    }
}
