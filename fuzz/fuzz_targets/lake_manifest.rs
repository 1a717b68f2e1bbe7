//! What the compactor reads back from the object store to merge a lake table's manifests: an
//! Avro object container file of manifest entries. Reading must never panic or allocate
//! beyond what the bytes hold, whatever they are; and a manifest that reads must yield entries
//! whose fields are only what the schema allows.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(entries) = lake::iceberg::read_manifest(data) {
        for e in &entries {
            let _ = lake::iceberg::entry_fields(e);
            let _ = lake::iceberg::existing_entry(e, 1, 1);
        }
    }
    // The same bytes after a valid header, so the fuzzer reaches the records.
    let mut framed = lake::iceberg::manifest_of("fuzz", &[]);
    let sync: Vec<u8> = framed[framed.len() - 16..].to_vec();
    framed.extend_from_slice(data);
    framed.extend_from_slice(&sync);
    let _ = lake::iceberg::read_manifest(&framed);
});
