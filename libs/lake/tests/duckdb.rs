//! A segment file is plain Parquet to an engine that never heard of Lakelog: DuckDB reads
//! every record with its key, value and headers, and sees the Iceberg field ids.

use std::process::Command;

use bytes::Bytes;
use lake::segment::{Entry, Options, write};
use recordbatch::{ProducerFields, Record};

fn python() -> String {
    format!("{}/../../.tools/venv/bin/python", env!("CARGO_MANIFEST_DIR"))
}

const SCRIPT: &str = r#"
import duckdb, json, sys
path = sys.argv[1]
con = duckdb.connect()
rows = con.execute(
    'select "offset", epoch_ms("timestamp"), partition, key, value, headers from read_parquet(?) order by "offset"',
    [path]).fetchall()
def hx(b):
    return None if b is None else bytes(b).hex()
out = [[o, ts, p, hx(k), hx(v), [[hx(h["key"]), hx(h["value"])] for h in hs]] for (o, ts, p, k, v, hs) in rows]
ids = con.execute('select name, field_id from parquet_schema(?) where field_id is not null', [path]).fetchall()
groups = con.execute('select count(distinct row_group_id) from parquet_metadata(?)', [path]).fetchone()[0]
print(json.dumps({"rows": out, "ids": ids, "row_groups": groups}))
"#;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn duckdb_reads_every_record_and_the_field_ids() {
    let mut entries = Vec::new();
    let mut expected = Vec::new();
    let mut offset = 40u64;
    for b in 0..30u32 {
        let records: Vec<Record> = (0..4u32)
            .map(|i| Record {
                offset_delta: i,
                timestamp_ms: 1_700_000_000_000 + i64::from(b * 4 + i),
                key: (i != 1).then(|| Bytes::from(format!("key-{b}-{i}"))),
                value: (i != 2).then(|| Bytes::from(vec![b as u8; 100 + i as usize])),
                headers: (0..i)
                    .map(|h| (Bytes::from(format!("h{h}")), (h != 1).then(|| Bytes::from("v"))))
                    .collect(),
            })
            .collect();
        for (i, r) in records.iter().enumerate() {
            let headers: Vec<serde_json::Value> = r
                .headers
                .iter()
                .map(|(k, v)| serde_json::json!([hex(k), v.as_deref().map(hex)]))
                .collect();
            expected.push(serde_json::json!([
                offset + i as u64,
                r.timestamp_ms,
                5,
                r.key.as_deref().map(hex),
                r.value.as_deref().map(hex),
                headers
            ]));
        }
        let batch = recordbatch::encode(&records, ProducerFields::NONE).unwrap();
        entries.push(Entry { offset, ingest_ms: 1_700_000_000_000, batch });
        offset += 4;
    }
    let seg = write(&entries, &Options { partition: 5, row_group_bytes: 2 << 10 }).unwrap();
    let path = std::env::temp_dir().join(format!("lake-segment-{}.parquet", std::process::id()));
    std::fs::write(&path, &seg.file).unwrap();
    let out = Command::new(python())
        .args(["-c", SCRIPT])
        .arg(&path)
        .output()
        .expect("DuckDB in .tools/venv (`make deps` installs it)");
    let _ = std::fs::remove_file(&path);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["rows"], serde_json::Value::Array(expected));
    assert_eq!(got["row_groups"], seg.row_groups.len());
    assert!(seg.row_groups.len() > 3, "{} row groups", seg.row_groups.len());
    let ids: Vec<(String, i64)> = serde_json::from_value(got["ids"].clone()).unwrap();
    for (name, id) in [("offset", 1), ("timestamp", 2), ("key", 5), ("value", 6), ("headers", 7)] {
        assert!(ids.contains(&(name.to_owned(), id)), "{name} = {id} not in {ids:?}");
    }
}
