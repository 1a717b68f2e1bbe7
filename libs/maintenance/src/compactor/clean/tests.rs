use super::*;
use crate::compactor::plan::Page;
use logstore::records::{IndexPage, Locator, LogHead};

fn record(key: Option<&str>, value: Option<&str>, offset_delta: u32) -> recordbatch::Record {
    recordbatch::Record {
        offset_delta,
        timestamp_ms: 1_000,
        key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
        value: value.map(|v| Bytes::copy_from_slice(v.as_bytes())),
        headers: Vec::new(),
    }
}

/// An entry at `offset` of one batch of `records` (keys and values), idempotent producer `pid`.
fn entry(offset: u64, records: &[(Option<&str>, Option<&str>)], pid: i64) -> LogEntry {
    let rs: Vec<recordbatch::Record> =
        records.iter().enumerate().map(|(i, (k, v))| record(*k, *v, i as u32)).collect();
    let producer =
        recordbatch::ProducerFields { producer_id: pid, producer_epoch: 0, base_sequence: 0 };
    let payload = recordbatch::encode(&rs, producer).expect("encodes");
    let header = LogEntryHeader {
        offset,
        record_count: records.len() as u32,
        timestamp: 1_000,
        entry_size: payload.len() as u64,
        cumulative_size: 0,
    };
    LogEntry { header, payload }
}

/// A record as read: offset, key, value.
type Read = (u64, Option<String>, Option<String>);

/// (offset, key, value) of every record `entries` hold, and their offset spans.
fn read(entries: &[LogEntry]) -> (Vec<Read>, Vec<(u64, u32)>) {
    let s = |b: &Option<Bytes>| b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned());
    let mut out = Vec::new();
    for e in entries {
        let (_, rs) = recordbatch::decode(&e.payload).expect("a batch");
        for r in rs {
            out.push((e.header.offset + u64::from(r.offset_delta), s(&r.key), s(&r.value)));
        }
    }
    (out, entries.iter().map(|e| (e.header.offset, e.header.record_count)).collect())
}

#[test]
fn the_cleaned_history_parses_advances_and_merges_its_oldest_passes_conservatively() {
    let c = Cleaned::parse(b"10:100,20:200").expect("valid");
    assert_eq!(
        (c.end(), c.first_cleaned(5), c.first_cleaned(15), c.first_cleaned(20)),
        (20, Some(100), Some(200), None)
    );
    assert_eq!(Cleaned::parse(c.encode().as_bytes()), Some(c.clone()));
    assert_eq!(Cleaned::parse(b"20:1,10:2"), None, "ends rise");
    assert_eq!(Cleaned::parse(b"x"), None);
    assert_eq!(c.advanced(15, 300, None), c, "never backwards");
    let t = c.advanced(30, 300, Some(250));
    assert_eq!(
        (t.tombstones(), Cleaned::parse(t.encode().as_bytes())),
        (Some(250), Some(t.clone()))
    );
    let mut long = Cleaned::default();
    for i in 1..=40u64 {
        long = long.advanced(i * 10, i as i64, None);
    }
    assert_eq!(long.passes.len(), MAX_PASSES);
    assert_eq!(long.end(), 400);
    // The merged oldest pass keeps the later time: offset 0 now counts as cleaned at 9.
    assert_eq!(long.first_cleaned(0), Some(9));
    assert_eq!(long.first_cleaned(395), Some(40));
}

#[test]
fn the_key_map_keeps_each_keys_latest_offset_and_refuses_new_keys_when_full() {
    let mut m = KeyMap::new(24 * 20, 1_000);
    assert_eq!(m.bytes(), 24 * 20);
    let h = |i: u32| KeyMap::hash(format!("key-{i}").as_bytes());
    assert!(m.put(h(1), 5) && m.put(h(1), 3), "an older offset does not replace a newer");
    assert_eq!(m.get(h(1)), Some(5));
    let mut i = 2;
    while m.put(h(i), u64::from(i)) {
        i += 1;
    }
    assert_eq!(m.len(), 18, "90% of 20 slots");
    assert!(m.put(h(1), 9), "a key already there still moves");
    assert_eq!((m.get(h(1)), m.get(h(i))), (Some(9), None));
    assert_eq!(KeyMap::new(1 << 30, 10).bytes(), 27 * 24, "sized to the keys there can be");
}

fn rules<'a>(map: &'a KeyMap, cleaned: &'a Cleaned, end: u64, now_ms: i64) -> Rules<'a> {
    static NONE: std::sync::LazyLock<Aborted> = std::sync::LazyLock::new(Aborted::default);
    Rules {
        map,
        cleaned,
        aborted: &NONE,
        end,
        delete_retention_ms: 1_000,
        now_ms,
        tombstones: Default::default(),
    }
}

#[test]
fn superseded_keyless_and_expired_tombstones_go_offsets_stay() {
    let entries = vec![
        entry(0, &[(Some("a"), Some("1")), (Some("b"), Some("1")), (None, Some("x"))], 7),
        entry(3, &[(Some("a"), Some("2"))], 7),
        entry(4, &[(Some("c"), None)], 7),
        entry(5, &[(Some("b"), Some("2")), (Some("d"), None)], 7),
        entry(7, &[(Some("a"), Some("3"))], 8),
    ];
    let mut map = KeyMap::new(1 << 20, 100);
    for (k, o) in [("a", 7), ("b", 5), ("c", 4), ("d", 6)] {
        map.put(KeyMap::hash(k.as_bytes()), o);
    }
    // c's tombstone (offset 4) was cleaned at 100: gone at 1,100; d's (6) is not cleaned yet.
    let cleaned = Cleaned::parse(b"5:100").expect("valid");
    let (out, dropped) = rules(&map, &cleaned, 8, 1_100).filter(entries.clone()).expect("filters");
    let (records, spans) = read(&out);
    let kept: Vec<(u64, &str)> =
        records.iter().map(|(o, k, _)| (*o, k.as_deref().unwrap_or("-"))).collect();
    assert_eq!(kept, [(5, "b"), (6, "d"), (7, "a")]);
    assert_eq!(dropped, 5);
    // Every offset is still covered, in order: [0, 5) as one gap, then the batches left.
    assert_eq!(spans, [(0, 5), (5, 2), (7, 1)]);
    // Before the tombstone's retention, it stays, and the pass says since when it is clean.
    let early = rules(&map, &cleaned, 8, 1_099);
    let (out, _) = early.filter(entries.clone()).expect("filters");
    assert!(
        read(&out).0.iter().any(|(o, k, v)| *o == 4 && k.as_deref() == Some("c") && v.is_none())
    );
    assert_eq!(*early.tombstones.lock(), Some(100), "c's, cleaned at 100 (d's is cleaned now)");
    // Past the end the map reached, entries are left as they are.
    let (out, dropped) = rules(&map, &cleaned, 3, 1_100).filter(entries.clone()).expect("filters");
    assert_eq!(dropped, 3, "the first batch only: a@0, b@1 and the keyless record");
    assert_eq!(out[1..], entries[1..]);
}

fn segment(first: u64, records: u64, bytes: u64, ingest_ms: i64) -> Page {
    let l = Locator {
        first_offset: first,
        record_count: records,
        entry_count: 1,
        payload_bytes: bytes,
        compacted_claim: 1,
        ingest_ms,
        ..Default::default()
    };
    Page { first, revision: 1, page: IndexPage { locators: vec![l] } }
}

fn view(pages: Vec<Page>, start: u64) -> LogView {
    LogView {
        log: LogId(1),
        revision: 10,
        claim: 9,
        head: LogHead { next_offset: 30, ..Default::default() },
        head_revision: 1,
        start,
        start_revision: 1,
        min_mark: 0,
        pages,
        floor: None,
        lake: None,
    }
}

#[test]
fn a_pass_takes_old_enough_segments_below_the_checkpoints_once_dirty_enough() {
    let cleanup = Cleanup {
        min_lag_ms: 100,
        max_lag_ms: 10_000,
        delete_retention_ms: 0,
        min_dirty_ratio: 0.5,
    };
    let pages = vec![segment(0, 10, 100, 0), segment(10, 10, 100, 0), segment(20, 10, 100, 950)];
    let v = view(pages.clone(), 0);
    let none = Cleaned::default();
    let all = plan_clean(&v, &none, &cleanup, None, 1_000).expect("all dirty");
    assert_eq!((all.pages, all.dirty_from, all.end), (vec![0, 1], 0, 20), "the young one waits");
    let upto = plan_clean(&v, &none, &cleanup, Some(15), 1_000).expect("below the checkpoints");
    assert_eq!(upto.pages, vec![0], "a segment past the checkpoints waits");
    // Half clean, half dirty: 0.5 is enough, not with 0.6.
    let half = Cleaned::parse(b"10:500").expect("valid");
    assert!(plan_clean(&v, &half, &cleanup, None, 1_000).is_some());
    let stricter = Cleanup { min_dirty_ratio: 0.6, ..cleanup };
    assert!(plan_clean(&v, &half, &stricter, None, 1_000).is_none());
    // ...unless the oldest dirty segment waited max.compaction.lag.ms.
    assert!(plan_clean(&v, &half, &stricter, None, 10_000).is_some());
    // Nothing dirty: nothing to do, unless a tombstone kept may go now.
    let clean = Cleaned::parse(b"20:500").expect("valid");
    assert!(plan_clean(&v, &clean, &cleanup, None, 1_000).is_none());
    let tombstoned = Cleaned::parse(b"20:500;500").expect("valid");
    let retain = Cleanup { delete_retention_ms: 400, ..cleanup };
    assert!(plan_clean(&v, &tombstoned, &retain, None, 899).is_none());
    assert_eq!(plan_clean(&v, &tombstoned, &retain, None, 900).map(|c| c.pages), Some(vec![0, 1]));
    // A WAL page ends the run; so does a segment this claim wrote.
    let mut wal = pages.clone();
    wal[1].page.locators[0].compacted_claim = 0;
    assert_eq!(
        plan_clean(&view(wal, 0), &none, &cleanup, None, 1_000).map(|c| c.pages),
        Some(vec![0])
    );
    let mut mine = pages.clone();
    mine[0].page.locators[0].compacted_claim = 9;
    assert!(plan_clean(&view(mine, 0), &none, &cleanup, None, 1_000).is_none());
    // A transaction open from offset 15 on: the segment holding it waits.
    let mut open = view(pages, 0);
    open.head.open_txns.push(logstore::records::OpenTxn { producer_id: 4, first_offset: 15 });
    let below = plan_clean(&open, &none, &cleanup, None, 1_000).map(|c| c.pages);
    assert_eq!(below, Some(vec![0]), "only below the last stable offset");
}

/// A transactional batch of producer `pid` at `offset`.
fn txn_entry(offset: u64, records: &[(Option<&str>, Option<&str>)], pid: i64) -> LogEntry {
    let rs: Vec<recordbatch::Record> =
        records.iter().enumerate().map(|(i, (k, v))| record(*k, *v, i as u32)).collect();
    let producer =
        recordbatch::ProducerFields { producer_id: pid, producer_epoch: 0, base_sequence: 0 };
    let framing = recordbatch::Framing {
        attributes: 0x10,
        base_timestamp: 1_000,
        max_timestamp: 1_000,
        producer,
    };
    let payload = recordbatch::encode_framed(&rs, framing).expect("encodes");
    let mut e = entry(offset, records, pid);
    e.header.entry_size = payload.len() as u64;
    e.payload = payload;
    e
}

/// A marker of `pid`'s transaction at `offset`.
fn marker(offset: u64, pid: i64, commit: bool) -> LogEntry {
    let payload = recordbatch::encode_marker(pid, 0, commit, 0, 1_000).expect("encodes");
    let mut e = entry(offset, &[(None, None)], pid);
    e.header.entry_size = payload.len() as u64;
    e.payload = payload;
    e
}

/// Kafka's cleaner's treatment of transactions: an aborted transaction's batches go whole, a
/// committed one's records are compacted as any, a COMMIT marker goes once its retention is
/// over, an ABORT marker stays; offsets stay.
#[test]
fn aborted_batches_go_committed_ones_compact_and_commit_markers_expire() {
    let entries = vec![
        txn_entry(0, &[(Some("a"), Some("1")), (Some("b"), Some("1"))], 5), // aborted
        txn_entry(2, &[(Some("a"), Some("2")), (Some("c"), Some("2"))], 6), // committed
        marker(4, 5, false),
        marker(5, 6, true),
        entry(6, &[(Some("a"), Some("3"))], -1),
    ];
    // The map a pass builds: no key of the aborted batch (b is nobody's latest).
    let mut map = KeyMap::new(1 << 20, 100);
    for (k, o) in [("a", 6), ("c", 3)] {
        map.put(KeyMap::hash(k.as_bytes()), o);
    }
    let aborted = Aborted::new([(5, 0, 4)]);
    let cleaned = Cleaned::parse(b"6:100").expect("valid");
    let mut r = rules(&map, &cleaned, 7, 1_100);
    r.aborted = &aborted;
    let (out, dropped) = r.filter(entries.clone()).expect("filters");
    let (records, spans) = read(&out);
    let offsets: Vec<u64> = records.iter().map(|(o, _, _)| *o).collect();
    assert_eq!(offsets, [3, 4, 6], "c@3, the ABORT marker, a@6");
    assert_eq!(spans, [(0, 2), (2, 2), (4, 1), (5, 1), (6, 1)]);
    assert_eq!(dropped, 4, "a@0, b@1 (aborted), a@2 (superseded), the COMMIT marker");
    let kept = recordbatch::BatchHeader::parse(&out[1].payload).expect("a batch");
    assert!(kept.is_transactional() && kept.producer.producer_id == 6, "{kept:?}");
    // Before its retention is over the COMMIT marker stays, noted as a tombstone is.
    let mut early = rules(&map, &cleaned, 7, 1_099);
    early.aborted = &aborted;
    let (out, _) = early.filter(entries).expect("filters");
    assert!(out.iter().any(|e| e.header.offset == 5 && e.payload.len() > 61));
    assert_eq!(*early.tombstones.lock(), Some(100));
}
