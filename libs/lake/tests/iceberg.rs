//! A lake table as outside engines read it: segment files and the commits `TableState`
//! plans for them (manifests, manifest lists, table metadata), scanned with no catalog by
//! DuckDB's Iceberg extension and by pyiceberg.

use std::path::Path;
use std::process::Command;

use bytes::Bytes;
use lake::iceberg::read_manifest;
use lake::segment::{Entry, Options, write};
use lake::table::{Append, TableState};
use recordbatch::{ProducerFields, Record};

fn python() -> String {
    format!("{}/../../.tools/venv/bin/python", env!("CARGO_MANIFEST_DIR"))
}

const SCRIPT: &str = r#"
import duckdb, glob, json, os, sys
import duckdb_extension_avro, duckdb_extension_iceberg
def ext(m, name):
    return glob.glob(os.path.join(os.path.dirname(m.__file__), 'extensions', '*', name + '.duckdb_extension'))[0]
con = duckdb.connect(config={'autoinstall_known_extensions': False, 'autoload_known_extensions': False})
con.execute("LOAD '%s'" % ext(duckdb_extension_avro, 'avro'))
con.execute("LOAD '%s'" % ext(duckdb_extension_iceberg, 'iceberg'))
meta = sys.argv[1]
rows = con.execute('select "offset", key, partition from iceberg_scan(?) order by "offset"', [meta]).fetchall()
snaps = con.execute('select count(*) from iceberg_snapshots(?)', [meta]).fetchone()[0]
print(json.dumps({"rows": [[o, None if k is None else bytes(k).decode(), p] for (o, k, p) in rows], "snapshots": snaps}))
"#;

/// Entries and the (offset, key) of each record.
type Written = (Vec<Entry>, Vec<(u64, Option<String>)>);

/// The same through pyiceberg (and pyarrow), which checks the metadata strictly, and reads
/// the first snapshot alone.
const PYICEBERG: &str = r#"
import json, sys
from pyiceberg.table import StaticTable
t = StaticTable.from_metadata(sys.argv[1])
a = t.scan().to_arrow().sort_by('offset')
rows = [[o, None if k is None else k.decode(), p] for (o, k, p) in zip(a['offset'].to_pylist(), a['key'].to_pylist(), a['partition'].to_pylist())]
first = t.scan(snapshot_id=int(sys.argv[2])).to_arrow().num_rows
print(json.dumps({"rows": rows, "snapshots": len(t.metadata.snapshots), "first": first}))
"#;

fn segment(first: u64, batches: u32) -> Result<Written, recordbatch::BatchError> {
    let mut entries = Vec::new();
    let mut expected = Vec::new();
    let mut offset = first;
    for b in 0..batches {
        let records: Vec<Record> = (0..3u32)
            .map(|i| Record {
                offset_delta: i,
                timestamp_ms: 1_700_000_000_000,
                key: (i != 1).then(|| Bytes::from(format!("k{}", offset + u64::from(i)))),
                value: Some(Bytes::from(vec![b as u8; 64])),
                headers: vec![],
            })
            .collect();
        for (i, r) in records.iter().enumerate() {
            let key = r.key.as_ref().map(|k| String::from_utf8_lossy(k).into_owned());
            expected.push((offset + i as u64, key));
        }
        let batch = recordbatch::encode(&records, ProducerFields::NONE)?;
        entries.push(Entry { offset, ingest_ms: 1_700_000_000_000, batch });
        offset += 3;
    }
    Ok((entries, expected))
}

/// A table of `n` segments appended one commit each, as the compactor commits them (the
/// manifests a commit must read read from disk: past 16 manifests each day's merge into
/// one), scanned by DuckDB and by pyiceberg (the latter also at its first snapshot). With
/// `hide`, each segment's second and fifth batches are hidden by a position-delete file (as
/// an aborted transaction's or a marker's rows are), and neither engine shows them.
fn scan_a_table_of(n: i64, hide: bool) -> Result<TableState, Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("lake-table-{}-{n}-{hide}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("data"))?;
    std::fs::create_dir_all(dir.join("metadata"))?;
    let at = |p: &str| dir.join(p).to_string_lossy().into_owned();
    let mut all = Vec::new();
    let mut table = TableState::new("5f0e6a4e-2f7c-4b8e-9a51-7d1c3a0b9e21", at(""));
    let mut first = 0u64;
    for s in 0..n {
        let (entries, expected) = segment(first, 10 + s as u32)?;
        let seg = write(&entries, &Options { partition: 2, row_group_bytes: 512 })?;
        let name = format!("{first:020}");
        let path = at(&format!("data/{name}.parquet"));
        std::fs::write(&path, &seg.file)?;
        let file = lake::iceberg::data_file(&seg, path, 2)?;
        let summary = vec![("lakelog.end-offset".to_owned(), seg.end_offset.to_string())];
        let hidden: Vec<u64> = if hide { vec![3, 4, 5, 12, 13, 14] } else { vec![] };
        let deletes = table.deletes(&file, &hidden)?;
        let append =
            Append { segment: name, file, now_ms: 1_700_000_000_000 + s, summary, deletes };
        let mut read = Vec::new();
        for m in table.manifests_to_read(&[]) {
            let entries = read_manifest(&std::fs::read(&m.path)?)?;
            read.push((m.path.clone(), entries));
        }
        let commit = table.commit(&append, &[], &read).ok_or("a commit refused")?;
        for (location, bytes) in &commit.files {
            std::fs::write(location, bytes)?;
        }
        table = commit.state;
        let shown =
            expected.into_iter().enumerate().filter(|(i, _)| !hidden.contains(&(*i as u64)));
        all.extend(shown.map(|(_, r)| r));
        first = seg.end_offset;
    }
    let meta = table.metadata_location().ok_or("no metadata")?;
    let first_snapshot = table.snapshots[0].id.to_string();
    let out = Command::new(python()).args(["-c", SCRIPT, &meta]).output()?;
    let py = Command::new(python()).args(["-c", PYICEBERG, &meta, &first_snapshot]).output()?;
    let _ = std::fs::remove_dir_all(Path::new(&dir));
    let expected: Vec<(u64, Option<String>, i32)> =
        all.into_iter().map(|(o, k)| (o, k, 2)).collect();
    for (engine, out) in [("DuckDB", &out), ("pyiceberg", &py)] {
        assert!(out.status.success(), "{engine}: {}", String::from_utf8_lossy(&out.stderr));
        let got: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        let rows: Vec<(u64, Option<String>, i32)> = serde_json::from_value(got["rows"].clone())?;
        assert_eq!(rows, expected, "{engine}");
        assert_eq!(got["snapshots"], n, "{engine}");
    }
    // The first snapshot holds the first segment alone (10 batches of 3, 2 hidden with `hide`).
    let got: serde_json::Value = serde_json::from_slice(&py.stdout)?;
    assert_eq!(got["first"], if hide { 24 } else { 30 });
    Ok(table)
}

#[test]
fn duckdb_and_pyiceberg_scan_a_table_of_three_appended_segments() {
    let table = scan_a_table_of(3, false).unwrap();
    assert!(table.metadata_location().unwrap().contains("/metadata/00003-"));
}

#[test]
fn duckdb_and_pyiceberg_scan_a_table_whose_manifests_were_merged() {
    let table = scan_a_table_of(20, false).unwrap();
    assert!(table.manifests.iter().any(|m| m.existing_only && m.files >= 16), "not merged");
    assert!(table.manifests.len() <= 5, "{} manifests", table.manifests.len());
}

/// Position deletes hide rows from both engines, through appends and through the merge of
/// each day's manifests (delete manifests merge apart from data manifests).
#[test]
fn duckdb_and_pyiceberg_do_not_show_rows_a_position_delete_file_hides() {
    scan_a_table_of(3, true).unwrap();
    let table = scan_a_table_of(20, true).unwrap();
    let merged = |c| table.manifests.iter().any(|m| m.existing_only && m.content == c);
    assert!(merged(lake::iceberg::Content::Data) && merged(lake::iceberg::Content::Deletes));
    let most = lake::table::MERGE_MANIFESTS_AT;
    assert!(table.manifests.len() < most, "{} manifests", table.manifests.len());
}
