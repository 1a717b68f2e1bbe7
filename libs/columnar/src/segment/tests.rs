use super::*;

use recordbatch::BatchHeader;

fn record(i: u32, ts: i64, key: Option<&str>, value: Option<Vec<u8>>, headers: usize) -> Record {
    Record {
        offset_delta: i,
        timestamp_ms: ts,
        key: key.map(|k| Bytes::from(k.to_owned())),
        value: value.map(Bytes::from),
        headers: (0..headers)
            .map(|h| {
                let v = (h % 3 != 2).then(|| Bytes::from(format!("hv{h}")));
                (Bytes::from(format!("h{h}")), v)
            })
            .collect(),
    }
}

/// Batches of every shape: null and empty keys and values, 0–3 headers (some values null),
/// idempotent producers, timestamps out of order, a log-append-time batch.
fn entries(n: usize, records_per_batch: u32, value_len: usize) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut offset = 100u64;
    for b in 0..n {
        let records: Vec<Record> = (0..records_per_batch)
            .map(|i| {
                let key = match i % 3 {
                    0 => None,
                    1 => Some(""),
                    _ => Some("k"),
                };
                let value = (i % 4 != 3).then(|| vec![(b + i as usize) as u8; value_len]);
                let ts = 1_700_000_000_000 + (b as i64) * 10 - i64::from(i % 2);
                record(i, ts, key, value, i as usize % 4)
            })
            .collect();
        let producer = if b % 2 == 0 {
            ProducerFields::NONE
        } else {
            ProducerFields { producer_id: 7, producer_epoch: 2, base_sequence: b as i32 * 10 }
        };
        let mut batch = recordbatch::encode(&records, producer).unwrap().to_vec();
        if b % 5 == 4 {
            // Log-append time (attribute bit 3): the CRC covers the attributes.
            batch[21..23].copy_from_slice(&8i16.to_be_bytes());
            let crc = crc32c::crc32c(&batch[21..]);
            batch[17..21].copy_from_slice(&crc.to_be_bytes());
        }
        out.push(Entry {
            offset,
            ingest_ms: 1_700_000_000_000 + b as i64 * 3 - (b as i64 % 3),
            batch: Bytes::from(batch),
        });
        offset += u64::from(records_per_batch);
    }
    out
}

/// What a batch says, besides its framing: its header fields a reader sees, and its records.
fn meaning(batch: &Bytes) -> (BatchHeader, Vec<Record>) {
    let (mut h, records) = recordbatch::decode(batch).unwrap();
    h.crc = 0;
    h.batch_length = 0;
    (h, records)
}

/// `input` as a segment reads it back: each batch at its offset, ingest times the running
/// maximum.
fn input_at(input: &[Entry]) -> Vec<Entry> {
    let mut ingest = i64::MIN;
    input
        .iter()
        .map(|e| {
            let mut b = e.batch.to_vec();
            recordbatch::set_base_offset(&mut b, e.offset as i64).unwrap();
            ingest = ingest.max(e.ingest_ms);
            Entry { offset: e.offset, ingest_ms: ingest, batch: Bytes::from(b) }
        })
        .collect()
}

fn footer_of(seg: &Segment) -> Footer {
    let footer_len = Footer::len_from_tail(&seg.file[seg.file.len() - 8..]).unwrap();
    assert_eq!(footer_len as u64, seg.footer_len);
    Footer::parse(&seg.file[seg.file.len() - footer_len..], seg.footer_crc32c).unwrap()
}

fn read_all(seg: &Segment) -> Vec<Entry> {
    read_served(seg).into_iter().map(|s| s.entry).collect()
}

fn read_served(seg: &Segment) -> Vec<Served> {
    let footer = footer_of(seg);
    assert_eq!(footer.row_groups(), seg.row_groups.as_slice());
    let mut out = Vec::new();
    for (i, rg) in seg.row_groups.iter().enumerate() {
        let bytes = seg.file.slice(rg.start as usize..(rg.start + rg.len) as usize);
        out.extend(read_row_group(&footer, i, bytes).unwrap());
    }
    out
}

#[test]
fn row_groups_frame_the_stored_batches_again() {
    let input = entries(40, 7, 300);
    let opts = Options { partition: 3, row_group_bytes: 16 << 10 };
    let seg = write(&input, &opts).unwrap();
    assert!(seg.row_groups.len() >= 4, "{} row groups", seg.row_groups.len());
    assert_eq!((seg.first_offset, seg.end_offset), (100, 100 + 40 * 7));
    let rows: u64 = seg.row_groups.iter().map(|r| r.records).sum();
    assert_eq!(rows, 40 * 7);
    // Row groups cover the offsets in order, each starting a batch.
    let mut next = 100;
    for rg in &seg.row_groups {
        assert_eq!(rg.first_offset, next);
        assert!(input.iter().any(|e| e.offset == rg.first_offset));
        next += rg.records;
    }
    let output = read_all(&seg);
    assert_eq!(output.len(), input.len());
    let mut ingest = i64::MIN;
    for (a, b) in input.iter().zip(&output) {
        assert_eq!(a.offset, b.offset);
        let (mut ha, ra) = meaning(&a.batch);
        ha.base_offset = a.offset as i64;
        assert_eq!((ha, ra), meaning(&b.batch), "the batch at {}", a.offset);
        // Uncompressed originals come back byte for byte.
        let mut original = a.batch.to_vec();
        recordbatch::set_base_offset(&mut original, a.offset as i64).unwrap();
        assert_eq!(original, b.batch.to_vec());
        // Ingest time is the running maximum.
        ingest = ingest.max(a.ingest_ms);
        assert_eq!(b.ingest_ms, ingest);
    }
}

/// `batch` with its records gzip-compressed, as a producer would send it.
fn gzip(batch: &[u8]) -> Bytes {
    use std::io::Write;
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(&batch[recordbatch::HEADER_LEN..]).unwrap();
    let body = z.finish().unwrap();
    let mut out = batch[..recordbatch::HEADER_LEN].to_vec();
    out.extend_from_slice(&body);
    let length = (out.len() - 12) as i32;
    out[8..12].copy_from_slice(&length.to_be_bytes());
    out[21..23].copy_from_slice(&1i16.to_be_bytes());
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(out)
}

#[test]
fn compressed_batches_come_back_uncompressed_with_the_same_records() {
    let records: Vec<Record> = (0..50)
        .map(|i| record(i, 1_000 + i64::from(i), Some("key"), Some(vec![b'x'; 100]), 1))
        .collect();
    let plain = recordbatch::encode(&records, ProducerFields::NONE).unwrap();
    let compressed = gzip(&plain);
    let input = vec![Entry { offset: 0, ingest_ms: 5, batch: compressed.clone() }];
    let seg = write(&input, &Options::default()).unwrap();
    let out = read_served(&seg);
    assert_eq!(out.len(), 1);
    // The stored length is kept: the log's byte positions do not move.
    assert_eq!(out[0].stored_len as usize, compressed.len());
    assert!(out[0].entry.batch.len() > compressed.len());
    let (h, r) = meaning(&out[0].entry.batch);
    assert_eq!(h.compression().unwrap(), recordbatch::Compression::None);
    assert_eq!(r, meaning(&compressed).1);
}

#[test]
fn a_damaged_row_group_is_an_error_never_records() {
    let input = entries(6, 5, 200);
    let seg = write(&input, &Options::default()).unwrap();
    assert_eq!(seg.row_groups.len(), 1);
    let footer = footer_of(&seg);
    let rg = seg.row_groups[0];
    let good = seg.file.slice(rg.start as usize..(rg.start + rg.len) as usize);
    let read: Vec<Entry> =
        read_row_group(&footer, 0, good.clone()).unwrap().into_iter().map(|s| s.entry).collect();
    assert_eq!(read, input_at(&input));
    for at in 0..good.len() {
        let mut bad = good.to_vec();
        bad[at] ^= 0x20;
        // The row group's checksum refuses it before Parquet decodes a byte (Parquet's
        // decoder panics on some damaged pages).
        match read_row_group(&footer, 0, Bytes::from(bad)) {
            Err(LakeError::Corrupt(_)) => {}
            other => panic!("byte {at} flipped read as {other:?}"),
        }
    }
    // Cut short, or the wrong length: an error.
    assert!(read_row_group(&footer, 0, good.slice(..good.len() - 1)).is_err());
    assert!(read_row_group(&footer, 1, good).is_err());
}

#[test]
fn a_footer_is_bounded_and_must_be_a_segments() {
    let seg = write(&entries(3, 2, 10), &Options::default()).unwrap();
    let mut tail = seg.file[seg.file.len() - 8..].to_vec();
    tail[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(Footer::len_from_tail(&tail), Err(LakeError::Corrupt(_))));
    assert!(Footer::parse(&seg.file[..4], seg.footer_crc32c).is_err());
    assert!(Footer::parse(b"not a parquet file at all", 0).is_err());
    // The right bytes under the wrong checksum: refused before decoding.
    let tail = &seg.file[seg.file.len() - seg.footer_len as usize..];
    assert!(matches!(Footer::parse(tail, !seg.footer_crc32c), Err(LakeError::Corrupt(_))));
}

#[test]
fn entries_must_be_gap_free_batches() {
    let mut input = entries(3, 2, 10);
    input[2].offset += 1;
    assert!(matches!(write(&input, &Options::default()), Err(LakeError::Invalid(_))));
    let mut input = entries(2, 2, 10);
    input[1].batch = Bytes::from_static(b"not a batch");
    assert!(matches!(
        write(&input, &Options::default()),
        Err(LakeError::Batch { offset: 102, .. })
    ));
    assert!(write(&[], &Options::default()).is_err());
}

#[test]
fn a_damaged_footer_is_an_error_never_records() {
    let input = entries(4, 3, 50);
    let seg = write(&input, &Options { partition: 0, row_group_bytes: 300 }).unwrap();
    assert_eq!(read_all(&seg), input_at(&input));
    let len = Footer::len_from_tail(&seg.file[seg.file.len() - 8..]).unwrap();
    let at = seg.file.len() - len;
    for i in at..seg.file.len() {
        let mut bad = seg.file.to_vec();
        bad[i] ^= 0x04;
        let read = std::panic::catch_unwind(|| -> Result<Vec<Entry>, LakeError> {
            let footer = Footer::parse(&bad[at..], seg.footer_crc32c)?;
            let mut out = Vec::new();
            for (n, rg) in footer.row_groups().iter().enumerate() {
                let end = usize::try_from(rg.start + rg.len).unwrap_or(usize::MAX);
                let Some(bytes) = bad.get(rg.start as usize..end) else {
                    return Err(LakeError::Invalid("outside the file".into()));
                };
                let served = read_row_group(&footer, n, Bytes::copy_from_slice(bytes))?;
                out.extend(served.into_iter().map(|s| s.entry));
            }
            Ok(out)
        });
        match read {
            Ok(Err(_)) => {}
            Ok(Ok(_)) => panic!("footer byte {i} flipped read as records"),
            Err(_) => panic!("footer byte {i} flipped panicked the reader"),
        }
    }
}

/// Times a millisecond count holds and microseconds do not (a producer's, or an ingest time
/// taken from one): the query columns saturate, the records come back exact.
#[test]
fn extreme_times_round_trip() {
    let records = vec![
        record(0, i64::MAX - 5, Some("a"), Some(vec![1]), 1),
        record(1, i64::MIN + 5, None, None, 0),
    ];
    let batch = recordbatch::encode(&records, ProducerFields::NONE).unwrap();
    let input = vec![Entry { offset: 7, ingest_ms: i64::MIN / 2, batch }];
    let seg = write(&input, &Options::default()).unwrap();
    let out = read_all(&seg);
    assert_eq!(out.len(), 1);
    assert_eq!(meaning(&out[0].batch).1, records);
    assert_eq!(out[0].ingest_ms, i64::MIN / 1000);
}

#[test]
fn segments_are_cut_at_utc_days_of_their_running_ingest_time() {
    let day = 86_400_000i64;
    let mut input = entries(5, 2, 10);
    // Day 19,000 ends at 19,001 * day; an entry before that which arrives late does not
    // move the running maximum back.
    let times = [19_000 * day + 5, 19_001 * day - 1, 19_001 * day, 19_000 * day, 19_002 * day];
    for (e, t) in input.iter_mut().zip(times) {
        e.ingest_ms = t;
    }
    assert_eq!(day_cuts(&input), [2, 4]);
    assert_eq!(day_cuts(&input[..2]), Vec::<usize>::new());
    assert_eq!((day_of(-1), day_of(0), day_of(day)), (-1, 0, 1));
}

#[test]
fn a_rewrite_of_what_segments_read_back_keeps_every_row() {
    // Two segments (one with a compressed batch), read back and written again as one.
    let mut first = entries(10, 3, 100);
    let records: Vec<Record> = (0..4)
        .map(|i| record(i, 2_000 + i64::from(i), Some("z"), Some(vec![b'q'; 300]), 2))
        .collect();
    let next = first.last().map(|e| e.offset + 3).unwrap();
    let zipped = gzip(&recordbatch::encode(&records, ProducerFields::NONE).unwrap());
    first.push(Entry { offset: next, ingest_ms: 9_000, batch: zipped });
    let (a, b) = first.split_at(6);
    let opts = Options { partition: 1, row_group_bytes: 1 << 10 };
    let served: Vec<Served> =
        [a, b].iter().flat_map(|part| read_served(&write(part, &opts).unwrap())).collect();
    let merged = rewrite(&served, &opts).unwrap();
    assert_eq!((merged.first_offset, merged.end_offset), (first[0].offset, next + 4));
    assert_eq!(read_served(&merged), served);
    // The compressed batch's stored length and codec survive the rewrite.
    let last = read_served(&merged).pop().unwrap();
    assert_eq!(last.stored_len as usize, first.last().unwrap().batch.len());
    assert_eq!(last.attributes & 0x7, 1);
}
