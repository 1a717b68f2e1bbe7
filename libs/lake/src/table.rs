//! A lake table's state and its next commit. The state is what the metadata store keeps for
//! the table (the pointer a commit compares and moves); [`TableState::append`] plans the
//! commit that adds one segment file: the manifest, manifest list and metadata JSON to write
//! first, under names derived from the segment (a retried commit writes the same files), and
//! the state to put in the same transaction as the log's index swap.

use serde::{Deserialize, Serialize};

use std::collections::{BTreeMap, BTreeSet};

use crate::avro::Value;
use crate::iceberg::{self, Content, DataFile, DeleteFile, ManifestFile, Snapshot, Table};

/// What the metadata store keeps of a table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableState {
    pub uuid: String,
    /// Where its files live (`s3://bucket/prefix/lake/<stream>`, `file:///…`).
    pub location: String,
    /// The metadata JSON's version: commits so far.
    pub version: u64,
    /// The current metadata JSON (`metadata/<version>-<segment>.metadata.json`: named after
    /// the commit's segment too, so two commits racing for one version never write one file).
    #[serde(default)]
    pub metadata: Option<String>,
    /// The newest snapshots, oldest first: at most [`MAX_SNAPSHOTS`] (older ones expire).
    pub snapshots: Vec<Snapshot>,
    /// The live manifests, oldest first (one per appended segment until manifests merge).
    pub manifests: Vec<ManifestFile>,
    /// How far each of the table's sources is in it (the compactor's: a log id's end offset).
    #[serde(default)]
    pub ends: std::collections::BTreeMap<String, u64>,
    /// Manifests table retention took out that retained snapshots still list.
    #[serde(default)]
    pub retired: Vec<Retired>,
    /// The newest snapshot's sequence number, also once it expired.
    #[serde(default)]
    pub last_sequence: i64,
}

/// Snapshots a table keeps (each is one commit; older ones expire, so the state the metadata
/// store keeps stays small).
pub const MAX_SNAPSHOTS: usize = 100;

/// Manifests a table has before a commit merges each day's into one.
pub const MERGE_MANIFESTS_AT: usize = 16;

/// What a segment adds to its table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Append {
    /// The segment's name, unique in the table (the compactor's object key's last part): the
    /// commit's files are named after it.
    pub segment: String,
    pub file: DataFile,
    /// When the commit is made (the snapshot's timestamp).
    pub now_ms: i64,
    /// Summary entries besides `operation` (`lakelog.log-id`, `lakelog.end-offset`, …).
    pub summary: Vec<(String, String)>,
    /// The position-delete file hiding rows of `file` from the table (ARCHITECTURE §12:
    /// aborted transactions' records and markers), and its bytes: [`TableState::deletes`].
    pub deletes: Option<(DeleteFile, Vec<u8>)>,
}

/// A planned commit: files to write (location, bytes), then the state to put.
#[derive(Clone, Debug)]
pub struct Commit {
    pub files: Vec<(String, Vec<u8>)>,
    pub state: TableState,
    /// The new metadata JSON's location (what a catalog's load-table answers).
    pub metadata_location: String,
}

impl TableState {
    /// A table with no snapshot yet.
    pub fn new(uuid: impl Into<String>, location: impl Into<String>) -> Self {
        TableState {
            uuid: uuid.into(),
            location: location.into(),
            version: 0,
            metadata: None,
            snapshots: Vec::new(),
            manifests: Vec::new(),
            ends: Default::default(),
            retired: Vec::new(),
            last_sequence: 0,
        }
    }

    fn at(&self, rel: &str) -> String {
        format!("{}/{rel}", self.location.trim_end_matches('/'))
    }

    /// The current metadata JSON's location, once the table has one.
    pub fn metadata_location(&self) -> Option<String> {
        self.metadata.clone()
    }

    /// Every data file the live manifests name (what the cleaner must keep): the current
    /// snapshot's, and those of retained older snapshots that retention took out since.
    pub fn data_files(&self) -> impl Iterator<Item = &str> {
        let retired = self.retired.iter().map(|r| &r.manifest);
        self.manifests.iter().chain(retired).flat_map(|m| m.data_files.iter().map(String::as_str))
    }

    /// The data files of the current snapshot, and its position-delete files.
    pub fn current_files(&self) -> impl Iterator<Item = &str> {
        self.manifests.iter().flat_map(|m| m.data_files.iter().map(String::as_str))
    }

    /// Where the position-delete file of the data file `data_path` lives: named after the
    /// data file's last two path parts (a segment's log and name), so a commit replacing the
    /// data file finds its delete file without the state keeping a map.
    pub fn deletes_path(&self, data_path: &str) -> String {
        let mut parts = data_path.rsplit('/');
        let name = parts.next().unwrap_or_default();
        let name = name.strip_suffix(".parquet").unwrap_or(name);
        let dir = parts.next().unwrap_or_default();
        self.at(&format!("data/{dir}-{name}-deletes.parquet"))
    }

    /// The position-delete file hiding the rows `hidden` (positions, increasing) of `file`,
    /// and its bytes; `None` when no row is hidden.
    pub fn deletes(
        &self,
        file: &DataFile,
        hidden: &[u64],
    ) -> Result<Option<(DeleteFile, Vec<u8>)>, crate::LakeError> {
        let (Some(first), Some(last)) = (hidden.first(), hidden.last()) else {
            return Ok(None);
        };
        let bytes = crate::deletes::position_deletes(&file.path, hidden)?;
        let d = DeleteFile {
            path: self.deletes_path(&file.path),
            file_size: bytes.len() as u64,
            record_count: hidden.len() as u64,
            ingest_day: file.ingest_day,
            data_path: file.path.clone(),
            positions: (*first, *last),
        };
        Ok(Some((d, bytes)))
    }

    /// The files a commit replacing the data files `replaced` takes out: them and their
    /// position-delete files.
    fn gone_with_deletes(&self, replaced: &[String]) -> BTreeSet<String> {
        let current: BTreeSet<&str> = self.current_files().collect();
        let deletes = replaced.iter().map(|f| self.deletes_path(f));
        let deletes: Vec<String> = deletes.filter(|d| current.contains(d.as_str())).collect();
        replaced.iter().cloned().chain(deletes).collect()
    }

    /// The table metadata as of this state.
    pub fn table(&self) -> Table {
        Table {
            uuid: self.uuid.clone(),
            location: self.location.clone(),
            snapshots: self.snapshots.clone(),
            last_updated_ms: self.snapshots.last().map_or(0, |s| s.timestamp_ms),
            properties: vec![],
        }
    }

    /// Plans the commit that appends `a`'s file: a new snapshot whose manifest list is every
    /// live manifest and a new one holding the file.
    pub fn append(&self, a: &Append) -> Commit {
        let (id, sequence_number) = self.next_snapshot(&a.segment);
        let plan = Plan { kept: self.manifests.clone(), ..Plan::default() };
        self.build(a, id, sequence_number, plan)
    }

    /// Plans the commit that replaces the files `replaced` (whole segments merged into `a`'s
    /// file) by `a`'s file: a `replace` snapshot when the records are the same ones, else
    /// `overwrite` (the merge took in new records too). `None` when a file replaced is not in
    /// the current snapshot (table retention took it out since), or shares a manifest with
    /// files that stay and that manifest was not read ([`Self::manifests_to_read`]).
    pub fn replace(&self, a: &Append, replaced: &[String]) -> Option<Commit> {
        self.commit(a, replaced, &[])
    }

    /// The manifests a commit replacing `replaced` must read first: those holding a file
    /// replaced beside files that stay, and, once the table has [`MERGE_MANIFESTS_AT`]
    /// manifests, every day's manifests where a day has several (they merge into one).
    pub fn manifests_to_read(&self, replaced: &[String]) -> Vec<ManifestFile> {
        let gone = self.gone_with_deletes(replaced);
        let gone: BTreeSet<&str> = gone.iter().map(String::as_str).collect();
        let partial = |m: &ManifestFile| {
            let hit = m.data_files.iter().filter(|f| gone.contains(f.as_str())).count();
            hit > 0 && hit < m.data_files.len()
        };
        let whole = |m: &ManifestFile| {
            !m.data_files.is_empty() && m.data_files.iter().all(|f| gone.contains(f.as_str()))
        };
        // Data and delete manifests merge apart: a manifest holds files of one content.
        let mut per_day: BTreeMap<(Content, i32), usize> = BTreeMap::new();
        if self.manifests.len() >= MERGE_MANIFESTS_AT {
            for m in self.manifests.iter().filter(|m| m.days.0 == m.days.1 && !whole(m)) {
                *per_day.entry((m.content, m.days.0)).or_default() += 1;
            }
        }
        let merging = |m: &ManifestFile| {
            m.days.0 == m.days.1
                && !whole(m)
                && per_day.get(&(m.content, m.days.0)).is_some_and(|n| *n > 1)
        };
        self.manifests.iter().filter(|m| partial(m) || merging(m)).cloned().collect()
    }

    /// Plans the commit that adds `a`'s file, takes out the files `replaced`, and rewrites the
    /// manifests `read` (each with its entries, as [`Self::manifests_to_read`] named them):
    /// their entries that stay are carried, as EXISTING, into one manifest per day. `None`
    /// when a file replaced is not in the current snapshot, a manifest holding one beside
    /// files that stay was not read, or a manifest read does not hold what the state says.
    pub fn commit(
        &self,
        a: &Append,
        replaced: &[String],
        read: &[(String, Vec<Value>)],
    ) -> Option<Commit> {
        let current: BTreeSet<&str> = self.current_files().collect();
        if !replaced.iter().all(|f| current.contains(f.as_str())) {
            return None;
        }
        let gone = self.gone_with_deletes(replaced);
        let gone: BTreeSet<&str> = gone.iter().map(String::as_str).collect();
        let read: BTreeMap<&str, &Vec<Value>> =
            read.iter().map(|(path, entries)| (path.as_str(), entries)).collect();
        let (id, sequence_number) = self.next_snapshot(&a.segment);
        let mut plan = Plan::default();
        let Plan { kept, retired, carried, removed_files, removed_records } = &mut plan;
        for m in &self.manifests {
            let hit = m.data_files.iter().filter(|f| gone.contains(f.as_str())).count();
            // Delete files taken out are counted apart from data files.
            let data = m.content == Content::Data;
            if let Some(entries) = read.get(m.path.as_str()) {
                if entries.len() != m.files as usize {
                    return None;
                }
                for e in entries.iter() {
                    let (path, records, day) = iceberg::entry_fields(e)?;
                    if gone.contains(path) {
                        if data {
                            *removed_files += 1;
                            *removed_records += records;
                        }
                        continue;
                    }
                    let (entry, seq) =
                        iceberg::existing_entry(e, m.snapshot_id, m.sequence_number)?;
                    let into = carried.entry((m.content, day)).or_default();
                    into.push((entry, seq, path.to_owned(), records));
                }
                retired.push(Retired { removed_at: sequence_number, manifest: m.clone() });
            } else if hit == 0 {
                kept.push(m.clone());
            } else if hit == m.data_files.len() {
                if data {
                    *removed_files += u64::from(m.files);
                    *removed_records += m.records;
                }
                retired.push(Retired { removed_at: sequence_number, manifest: m.clone() });
            } else {
                return None;
            }
        }
        Some(self.build(a, id, sequence_number, plan))
    }

    /// The commit of `plan`: its carried entries as one manifest per day, `a`'s file in a
    /// manifest of its own, the snapshot.
    fn build(&self, a: &Append, id: i64, sequence_number: i64, plan: Plan) -> Commit {
        let Plan { mut kept, retired, carried, removed_files, removed_records } = plan;
        let mut files = Vec::new();
        let merged = carried.len();
        for ((content, day), entries) in carried {
            let kind = if content == Content::Data { 'm' } else { 'd' };
            let name = format!("{}-{kind}{day}.avro", a.segment);
            let path = self.at(&format!("metadata/{name}"));
            let values: Vec<Value> = entries.iter().map(|e| e.0.clone()).collect();
            let bytes = iceberg::manifest_of(&name, &values, content);
            kept.push(ManifestFile {
                path: path.clone(),
                length: bytes.len() as u64,
                snapshot_id: id,
                sequence_number,
                files: u32::try_from(entries.len()).unwrap_or(u32::MAX),
                records: entries.iter().map(|e| e.3).sum(),
                days: (day, day),
                data_files: entries.iter().map(|e| e.2.clone()).collect(),
                existing_only: true,
                min_sequence_number: entries.iter().map(|e| e.1).min(),
                content,
            });
            files.push((path, bytes));
        }
        // The file added, in a manifest of its own.
        let manifest_name = format!("{}-m0.avro", a.segment);
        let manifest_path = self.at(&format!("metadata/{manifest_name}"));
        let manifest = iceberg::manifest(&manifest_name, id, std::slice::from_ref(&a.file));
        kept.push(ManifestFile {
            path: manifest_path.clone(),
            length: manifest.len() as u64,
            snapshot_id: id,
            sequence_number,
            files: 1,
            records: a.file.record_count,
            days: (a.file.ingest_day, a.file.ingest_day),
            data_files: vec![a.file.path.clone()],
            existing_only: false,
            min_sequence_number: None,
            content: Content::Data,
        });
        files.insert(0, (manifest_path, manifest));
        // Its position-delete file, in a delete manifest of its own (the same sequence number
        // as the data file: position deletes apply to data files of their sequence or older).
        if let Some((d, bytes)) = &a.deletes {
            let name = format!("{}-d0.avro", a.segment);
            let path = self.at(&format!("metadata/{name}"));
            let manifest = iceberg::delete_manifest(&name, id, d);
            kept.push(ManifestFile {
                path: path.clone(),
                length: manifest.len() as u64,
                snapshot_id: id,
                sequence_number,
                files: 1,
                records: d.record_count,
                days: (d.ingest_day, d.ingest_day),
                data_files: vec![d.path.clone()],
                existing_only: false,
                min_sequence_number: None,
                content: Content::Deletes,
            });
            files.insert(1, (path, manifest));
            files.insert(2, (d.path.clone(), bytes.clone()));
        }
        let operation = match (removed_files, removed_records == a.file.record_count) {
            (0, _) if a.deletes.is_some() => "overwrite",
            (0, _) => "append",
            (_, true) => "replace",
            (_, false) => "overwrite",
        };
        let mut summary = vec![
            ("operation".to_owned(), operation.to_owned()),
            ("added-data-files".to_owned(), "1".to_owned()),
            ("added-records".to_owned(), a.file.record_count.to_string()),
        ];
        if let Some((d, _)) = &a.deletes {
            summary.push(("added-delete-files".to_owned(), "1".to_owned()));
            summary.push(("added-position-delete-files".to_owned(), "1".to_owned()));
            summary.push(("added-position-deletes".to_owned(), d.record_count.to_string()));
        }
        if removed_files > 0 {
            summary.push(("deleted-data-files".to_owned(), removed_files.to_string()));
            summary.push(("deleted-records".to_owned(), removed_records.to_string()));
        }
        if merged > 0 {
            summary.push(("lakelog.manifests-merged".to_owned(), merged.to_string()));
        }
        summary.extend(a.summary.iter().cloned());
        let mut state = self.clone();
        state.manifests = kept;
        // A manifest taken out keeps, for the cleaner, only the files no longer current (a
        // merged day's manifest rewritten again and again would otherwise keep its whole list
        // once per commit).
        let current: BTreeSet<String> = state.current_files().map(str::to_owned).collect();
        state.retired.extend(retired.into_iter().filter_map(|mut r| {
            r.manifest.data_files.retain(|f| !current.contains(f));
            (!r.manifest.data_files.is_empty()).then_some(r)
        }));
        let mut commit = state.snapshot_commit(&a.segment, id, sequence_number, a.now_ms, summary);
        for (i, f) in files.into_iter().enumerate() {
            commit.files.insert(i, f);
        }
        commit
    }

    /// Applies table retention (`lake.retention.ms`): a delete snapshot taking out every
    /// manifest whose files are all of days before `r.before_day`, and expiry of snapshots
    /// older than `r.snapshots_before_ms` (the newest always stays). `None` when neither
    /// changes anything. Files taken out stay reachable (kept by the cleaner) until the last
    /// snapshot that still lists them expires.
    pub fn retain(&self, r: &Retain) -> Option<Commit> {
        let (old, kept): (Vec<&ManifestFile>, Vec<&ManifestFile>) =
            self.manifests.iter().partition(|m| m.days.1 < r.before_day);
        let mut state = self.clone();
        let mut commit = None;
        if !old.is_empty() {
            let (id, sequence_number) = self.next_snapshot(&r.name);
            let data = old.iter().filter(|m| m.content == Content::Data);
            let files: u64 = data.clone().map(|m| u64::from(m.files)).sum();
            let records: u64 = data.map(|m| m.records).sum();
            state.manifests = kept.into_iter().cloned().collect();
            state.retired.extend(
                old.into_iter()
                    .map(|m| Retired { removed_at: sequence_number, manifest: m.clone() }),
            );
            let summary = vec![
                ("operation".to_owned(), "delete".to_owned()),
                ("deleted-data-files".to_owned(), files.to_string()),
                ("deleted-records".to_owned(), records.to_string()),
                ("lakelog.retention-before-day".to_owned(), r.before_day.to_string()),
            ];
            commit = Some(state.snapshot_commit(&r.name, id, sequence_number, r.now_ms, summary));
            state = commit.as_ref().map_or(state, |c: &Commit| c.state.clone());
        }
        let newest = state.snapshots.len().saturating_sub(1);
        let expired = state.snapshots[..newest]
            .iter()
            .take_while(|s| s.timestamp_ms < r.snapshots_before_ms)
            .count();
        if expired == 0 {
            return commit;
        }
        state.snapshots.drain(..expired);
        state.prune_retired();
        // The snapshots' expiry is a new metadata version (no new snapshot).
        state.version += 1;
        let metadata = format!("metadata/{:05}-{}-expiry.metadata.json", state.version, r.name);
        state.metadata = Some(self.at(&metadata));
        let metadata_location = state.metadata_location().unwrap_or_default();
        let json = (metadata_location.clone(), state.table().metadata_json().into_bytes());
        let mut files = commit.map(|c| c.files).unwrap_or_default();
        files.push(json);
        Some(Commit { files, state, metadata_location })
    }

    /// The next snapshot's id and sequence number: the id derived from `name` (so a retried
    /// plan names the same snapshot), kept positive and distinct from the parent's.
    fn next_snapshot(&self, name: &str) -> (i64, i64) {
        let parent = self.snapshots.last();
        let sequence_number = parent.map_or(self.last_sequence, |p| p.sequence_number) + 1;
        let mut id = i64::from(crc32c::crc32c(name.as_bytes())) << 20 | sequence_number;
        if parent.is_some_and(|p| p.id == id) {
            id += 1;
        }
        (id, sequence_number)
    }

    /// The commit of a new snapshot over this state's manifests: its manifest list, the next
    /// metadata JSON (both named after `name`), older snapshots past [`MAX_SNAPSHOTS`] expired.
    fn snapshot_commit(
        &self,
        name: &str,
        id: i64,
        sequence_number: i64,
        now_ms: i64,
        summary: Vec<(String, String)>,
    ) -> Commit {
        let parent = self.snapshots.last().map(|p| p.id);
        let list_name = format!("snap-{id}-{name}.avro");
        let list_path = self.at(&format!("metadata/{list_name}"));
        let list = iceberg::manifest_list(&list_name, id, parent, sequence_number, &self.manifests);
        let mut state = self.clone();
        state.version += 1;
        state.last_sequence = sequence_number;
        state.metadata =
            Some(self.at(&format!("metadata/{:05}-{name}.metadata.json", state.version)));
        state.snapshots.push(Snapshot {
            id,
            parent,
            sequence_number,
            timestamp_ms: now_ms,
            manifest_list: list_path.clone(),
            summary,
        });
        let expired = state.snapshots.len().saturating_sub(MAX_SNAPSHOTS);
        state.snapshots.drain(..expired);
        state.prune_retired();
        let metadata_location = state.metadata_location().unwrap_or_default();
        let files = vec![
            (list_path, list),
            (metadata_location.clone(), state.table().metadata_json().into_bytes()),
        ];
        Commit { files, state, metadata_location }
    }

    /// Forgets retired manifests no retained snapshot lists any more (every snapshot left is
    /// the one that took them out, or newer).
    fn prune_retired(&mut self) {
        let oldest = self.snapshots.first().map_or(i64::MAX, |s| s.sequence_number);
        self.retired.retain(|r| r.removed_at > oldest);
    }
}

/// What a commit keeps, takes out and carries over ([`TableState::commit`]).
#[derive(Default)]
struct Plan {
    /// Manifests kept as they are.
    kept: Vec<ManifestFile>,
    /// Manifests taken out (replaced, or rewritten).
    retired: Vec<Retired>,
    /// Entries carried into new manifests, by content and day.
    carried: BTreeMap<(Content, i32), Vec<Carried>>,
    removed_files: u64,
    removed_records: u64,
}

/// A manifest entry carried over: the entry, its sequence number, its file's path and records.
type Carried = (Value, i64, String, u64);

/// What table retention keeps ([`TableState::retain`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retain {
    /// Manifests whose files are all of days before this one go.
    pub before_day: i32,
    /// Snapshots older than this (ms) expire; the newest always stays.
    pub snapshots_before_ms: i64,
    /// Names the commit's files (unique per commit).
    pub name: String,
    pub now_ms: i64,
}

/// A manifest a delete took out of the table, still listed by snapshots older than the delete.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retired {
    /// The sequence number of the snapshot that took it out.
    pub removed_at: i64,
    pub manifest: ManifestFile,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(n: u64) -> DataFile {
        DataFile {
            path: format!("file:///t/data/{n:020}.parquet"),
            file_size: 1000,
            record_count: 10,
            ingest_day: 19_000,
            offsets: (n as i64 * 10, n as i64 * 10 + 9),
            timestamps_ms: (0, 1),
            ingest_ms: (0, 1),
            partition: 0,
            split_offsets: vec![4],
        }
    }

    fn append(n: u64) -> Append {
        Append {
            segment: format!("seg-{n}"),
            file: file(n),
            now_ms: 1000 + n as i64,
            summary: vec![],
            deletes: None,
        }
    }

    #[test]
    fn appends_chain_snapshots_and_a_retried_plan_writes_the_same_files() {
        let t0 = TableState::new("u", "file:///t/");
        assert_eq!(t0.metadata_location(), None);
        let c1 = t0.append(&append(1));
        let c2 = c1.state.append(&append(2));
        assert_eq!(c2.state.version, 2);
        assert_eq!(c2.metadata_location, "file:///t/metadata/00002-seg-2.metadata.json");
        assert_eq!(c2.state.metadata_location().as_deref(), Some(c2.metadata_location.as_str()));
        let files: Vec<&str> = c2.state.data_files().collect();
        assert_eq!(files, [file(1).path, file(2).path]);
        let s = &c2.state.snapshots;
        assert_eq!((s[0].sequence_number, s[1].sequence_number), (1, 2));
        assert_eq!(s[1].parent, Some(s[0].id));
        assert_ne!(s[0].id, s[1].id);
        assert_eq!(c2.state.manifests.len(), 2);
        // The same plan again (a compactor retrying after a crash): same names, same bytes.
        let again = c1.state.append(&append(2));
        assert_eq!(again.files, c2.files);
        assert_eq!(again.state, c2.state);
        // The state survives its serialized form (what the metadata store keeps).
        let json = serde_json::to_string(&c2.state).unwrap();
        assert_eq!(serde_json::from_str::<TableState>(&json).unwrap(), c2.state);
    }

    #[test]
    fn retention_takes_out_old_days_and_keeps_their_files_until_their_snapshots_expire() {
        let mut t = TableState::new("u", "file:///t");
        for n in 0..4u64 {
            let mut a = append(n);
            a.file.ingest_day = 19_000 + n as i32; // one day each
            t = t.append(&a).state;
        }
        let r = |before_day, snapshots_before_ms| Retain {
            before_day,
            snapshots_before_ms,
            name: format!("r{before_day}"),
            now_ms: 2000,
        };
        // Nothing before day 19,000, no snapshot older than 0: nothing to commit.
        assert!(t.retain(&r(19_000, 0)).is_none());
        // Days 19,000 and 19,001 go: a delete snapshot; their files stay reachable.
        let c = t.retain(&r(19_002, 0)).expect("a delete");
        let current: Vec<&str> = c.state.current_files().collect();
        assert_eq!(current, [file(2).path, file(3).path]);
        assert_eq!(c.state.data_files().count(), 4);
        let last = c.state.snapshots.last().unwrap();
        assert_eq!(last.summary[0], ("operation".to_owned(), "delete".to_owned()));
        assert_eq!(last.summary[1], ("deleted-data-files".to_owned(), "2".to_owned()));
        assert_eq!(last.sequence_number, 5);
        assert_eq!(c.files.len(), 2, "a manifest list and a metadata JSON");
        // Snapshots older than the delete expire: the retired files are unreachable now.
        let t2 = c.state.retain(&r(19_002, 1_999)).expect("an expiry");
        assert_eq!(t2.state.snapshots.len(), 1);
        assert_eq!(t2.state.data_files().count(), 2);
        assert_eq!(t2.files.len(), 1, "only a metadata JSON");
        assert_ne!(t2.metadata_location, c.metadata_location);
        // The next append continues the sequence.
        let t3 = t2.state.append(&append(9)).state;
        assert_eq!(t3.snapshots.last().unwrap().sequence_number, 6);
        let json = serde_json::to_string(&t3).unwrap();
        assert_eq!(serde_json::from_str::<TableState>(&json).unwrap(), t3);
    }

    #[test]
    fn a_replace_swaps_whole_segments_for_their_merge_and_keeps_them_reachable() {
        let mut t = TableState::new("u", "file:///t");
        for n in 0..3u64 {
            t = t.append(&append(n)).state;
        }
        let mut merged = append(7);
        merged.file.record_count = 20;
        let gone = [file(0).path, file(1).path];
        let c = t.replace(&merged, &gone).expect("a replace");
        let current: Vec<&str> = c.state.current_files().collect();
        assert_eq!(current, [file(2).path, file(7).path]);
        assert_eq!(c.state.data_files().count(), 4);
        let summary = &c.state.snapshots.last().unwrap().summary;
        assert_eq!(summary[0], ("operation".to_owned(), "replace".to_owned()));
        assert!(summary.contains(&("deleted-data-files".to_owned(), "2".to_owned())));
        // More records than the files replaced: new ones came in with them.
        merged.file.record_count = 25;
        let over = t.replace(&merged, &gone).expect("an overwrite");
        let op = &over.state.snapshots.last().unwrap().summary[0];
        assert_eq!(op, &("operation".to_owned(), "overwrite".to_owned()));
        // A file no longer in the table (retention took it out) is never put back.
        assert!(c.state.replace(&append(8), &[file(0).path]).is_none());
        assert!(t.replace(&append(8), &["file:///t/data/none.parquet".to_owned()]).is_none());
    }

    /// `append(n)` with a position-delete file hiding its rows `hidden`.
    fn hiding(t: &TableState, n: u64, hidden: &[u64]) -> Append {
        let mut a = append(n);
        a.deletes = t.deletes(&a.file, hidden).unwrap();
        a
    }

    #[test]
    fn a_segments_delete_file_comes_and_goes_with_it() {
        let t = TableState::new("u", "file:///t");
        assert!(t.deletes(&file(0), &[]).unwrap().is_none(), "nothing hidden: no file");
        let c0 = t.append(&hiding(&t, 0, &[2, 3]));
        let summary = &c0.state.snapshots[0].summary;
        assert_eq!(summary[0], ("operation".to_owned(), "overwrite".to_owned()));
        assert!(summary.contains(&("added-position-deletes".to_owned(), "2".to_owned())));
        let deletes0 = t.deletes_path(&file(0).path);
        assert_eq!(deletes0, "file:///t/data/data-00000000000000000000-deletes.parquet");
        assert!(c0.files.iter().any(|(p, _)| *p == deletes0), "the delete file is written");
        let kinds: Vec<Content> = c0.state.manifests.iter().map(|m| m.content).collect();
        assert_eq!(kinds, [Content::Data, Content::Deletes]);
        let t1 = c0.state.append(&append(1)).state;
        let t2 = t1.append(&hiding(&t1, 2, &[0])).state;
        // Merging 0 and 1 takes out 0's delete file with it; 2's stays.
        let mut merged = hiding(&t2, 7, &[2, 3]);
        merged.file.record_count = 20;
        let c = t2.replace(&merged, &[file(0).path, file(1).path]).expect("a replace");
        let mut current: Vec<&str> = c.state.current_files().collect();
        current.sort_unstable();
        let mut want = [
            file(2).path,
            t2.deletes_path(&file(2).path),
            file(7).path,
            t2.deletes_path(&file(7).path),
        ];
        want.sort_unstable();
        assert_eq!(current, want);
        let summary = &c.state.snapshots.last().unwrap().summary;
        assert_eq!(summary[0], ("operation".to_owned(), "replace".to_owned()));
        assert!(summary.contains(&("deleted-records".to_owned(), "20".to_owned())));
        // The state (with delete manifests) survives its serialized form; a data manifest's
        // stays as it was before delete files (no `content` key).
        let json = serde_json::to_string(&c.state).unwrap();
        assert_eq!(serde_json::from_str::<TableState>(&json).unwrap(), c.state);
        assert!(!serde_json::to_string(&t1.manifests[0]).unwrap().contains("content"));
    }

    /// Commits `a` as the compactor does: the manifests it must read read from `store`,
    /// every file written to it.
    fn commit_through(
        t: &TableState,
        a: &Append,
        replaced: &[String],
        store: &mut std::collections::HashMap<String, Vec<u8>>,
    ) -> Option<Commit> {
        let read: Vec<(String, Vec<Value>)> = t
            .manifests_to_read(replaced)
            .into_iter()
            .map(|m| (m.path.clone(), iceberg::read_manifest(&store[&m.path]).unwrap()))
            .collect();
        let c = t.commit(a, replaced, &read)?;
        store.extend(c.files.iter().cloned());
        Some(c)
    }

    /// The (path, records) of every live entry the current snapshot's manifests hold.
    fn live(t: &TableState, store: &std::collections::HashMap<String, Vec<u8>>) -> Vec<String> {
        let mut out: Vec<String> = t
            .manifests
            .iter()
            .flat_map(|m| iceberg::read_manifest(&store[&m.path]).unwrap())
            .map(|e| iceberg::entry_fields(&e).unwrap().0.to_owned())
            .collect();
        out.sort();
        out
    }

    #[test]
    fn manifests_merge_per_day_and_a_replace_rewrites_the_one_it_cuts_through() {
        let mut store = std::collections::HashMap::new();
        let mut t = TableState::new("u", "file:///t");
        let mut all = Vec::new();
        for n in 0..(MERGE_MANIFESTS_AT as u64 + 3) {
            let mut a = append(n);
            a.file.ingest_day = 19_000 + (n % 2) as i32; // two days
            all.push(a.file.path.clone());
            t = commit_through(&t, &a, &[], &mut store).unwrap().state;
        }
        all.sort();
        // Merged when the table reached the threshold: one manifest a day, and the newest.
        assert!(t.manifests.len() < MERGE_MANIFESTS_AT, "{} manifests", t.manifests.len());
        assert_eq!(live(&t, &store), all, "a file lost or doubled by merging");
        // The manifests merged away hold no file that is not current: nothing to keep apart.
        assert!(t.retired.is_empty(), "{:?}", t.retired);
        let merged: Vec<&ManifestFile> = t.manifests.iter().filter(|m| m.existing_only).collect();
        assert_eq!(merged.len(), 2);
        assert!(merged.iter().all(|m| m.days.0 == m.days.1 && m.files > 1));
        let mut files: Vec<&str> = t.current_files().collect();
        files.sort_unstable();
        assert_eq!(files, all.iter().map(String::as_str).collect::<Vec<_>>());
        // Replacing two files of a merged manifest rewrites it without them.
        let day = merged[0].days.0;
        let cut: Vec<String> = merged[0].data_files[..2].to_vec();
        let mut into = append(99);
        into.file.ingest_day = day;
        assert!(t.replace(&into, &cut).is_none(), "a cut manifest taken whole");
        let c = commit_through(&t, &into, &cut, &mut store).expect("a replace");
        let mut want: Vec<String> = all
            .iter()
            .filter(|f| !cut.contains(f))
            .cloned()
            .chain([into.file.path.clone()])
            .collect();
        want.sort();
        assert_eq!(live(&c.state, &store), want);
        // The files replaced stay reachable from older snapshots.
        let reachable: BTreeSet<&str> = c.state.data_files().collect();
        assert!(cut.iter().all(|f| reachable.contains(f.as_str())));
        // Table retention still takes whole days out.
        let r = Retain { before_day: 19_001, snapshots_before_ms: 0, name: "r".into(), now_ms: 5 };
        let kept = c.state.retain(&r).expect("a delete").state;
        assert!(kept.manifests.iter().all(|m| m.days.0 >= 19_001));
    }

    #[test]
    fn old_snapshots_expire_and_the_chain_goes_on() {
        let mut t = TableState::new("u", "file:///t");
        for n in 0..(MAX_SNAPSHOTS as u64 + 5) {
            t = t.append(&append(n)).state;
        }
        assert_eq!(t.snapshots.len(), MAX_SNAPSHOTS);
        assert_eq!(t.snapshots[0].sequence_number, 6);
        assert_eq!(t.version, MAX_SNAPSHOTS as u64 + 5);
        // Every file is still in the table: expiry drops snapshots, not data.
        assert_eq!(t.data_files().count(), MAX_SNAPSHOTS + 5);
        for w in t.snapshots.windows(2) {
            assert_eq!(w[1].parent, Some(w[0].id));
        }
    }
}
