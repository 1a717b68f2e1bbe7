use super::*;
use proptest::prelude::*;

/// Batches built by a real client's encoder (kafka-python 3.0.12's
/// `DefaultRecordBatchBuilder`): three records with keys, a null key, a null value, headers
/// (one with a null value) and out-of-order timestamps; and one idempotent record
/// (producer 4242, epoch 3, sequence 7).
const KAFKA_PYTHON_THREE: &str = "0000000000000000000000590000000002f01b031d0000000000020000018bcfe568000000018bcfe56805ffffffffffffffffffffffffffff000000031c000000046b31047631020268027818000a02010c7365636f6e640016000604046b330102026101";
const KAFKA_PYTHON_IDEMPOTENT: &str = "00000000000000000000003c0000000002c6b699bf0000000000000000018bcfe568000000018bcfe568000000000000001092000300000007000000011400000001086964656d00";

fn hex(s: &str) -> Bytes {
    let b: Vec<u8> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap_or(0))
        .collect();
    Bytes::from(b)
}

fn b(s: &str) -> Option<Bytes> {
    Some(Bytes::copy_from_slice(s.as_bytes()))
}

fn three() -> Vec<Record> {
    vec![
        Record {
            offset_delta: 0,
            timestamp_ms: 1_700_000_000_000,
            key: b("k1"),
            value: b("v1"),
            headers: vec![(Bytes::from_static(b"h"), b("x"))],
        },
        Record {
            offset_delta: 1,
            timestamp_ms: 1_700_000_000_005,
            key: None,
            value: b("second"),
            headers: vec![],
        },
        Record {
            offset_delta: 2,
            timestamp_ms: 1_700_000_000_003,
            key: b("k3"),
            value: None,
            headers: vec![(Bytes::from_static(b"a"), None)],
        },
    ]
}

#[test]
fn a_real_clients_batches_decode_to_their_records() -> Result<(), BatchError> {
    let (h, records) = decode(&hex(KAFKA_PYTHON_THREE))?;
    assert_eq!(records, three());
    assert_eq!((h.record_count, h.last_offset_delta), (3, 2));
    assert_eq!((h.base_timestamp, h.max_timestamp), (1_700_000_000_000, 1_700_000_000_005));
    assert_eq!(h.producer, ProducerFields::NONE);
    assert_eq!(h.compression()?, Compression::None);
    let (h, records) = decode(&hex(KAFKA_PYTHON_IDEMPOTENT))?;
    assert_eq!(
        h.producer,
        ProducerFields { producer_id: 4242, producer_epoch: 3, base_sequence: 7 }
    );
    assert_eq!(h.last_sequence(), 7);
    assert_eq!(records[0].value, b("idem"));
    Ok(())
}

#[test]
fn encoding_matches_a_real_clients_bytes() -> Result<(), BatchError> {
    let ours = encode(&three(), ProducerFields::NONE)?;
    let mut ours = ours.to_vec();
    // The client writes partition leader epoch 0, we -1 (Java's "none"); it lies outside the CRC.
    assert_eq!(&ours[12..16], &(-1i32).to_be_bytes());
    ours[12..16].copy_from_slice(&0i32.to_be_bytes());
    assert_eq!(Bytes::from(ours), hex(KAFKA_PYTHON_THREE));
    let idem =
        vec![Record { timestamp_ms: 1_700_000_000_000, value: b("idem"), ..Default::default() }];
    let mut ours =
        encode(&idem, ProducerFields { producer_id: 4242, producer_epoch: 3, base_sequence: 7 })?
            .to_vec();
    ours[12..16].copy_from_slice(&0i32.to_be_bytes());
    assert_eq!(Bytes::from(ours), hex(KAFKA_PYTHON_IDEMPOTENT));
    Ok(())
}

#[test]
fn the_base_offset_is_written_in_without_touching_the_crc() -> Result<(), BatchError> {
    let mut b = encode(&three(), ProducerFields::NONE)?.to_vec();
    set_base_offset(&mut b, 1_234_567)?;
    let h = validate(&b)?;
    assert_eq!(h.base_offset, 1_234_567);
    Ok(())
}

#[test]
fn sequences_wrap_at_i32_max_as_kafkas_do() -> Result<(), BatchError> {
    let mut h = validate(&encode(&three(), ProducerFields::NONE)?)?;
    h.producer.base_sequence = i32::MAX - 1;
    assert_eq!(h.last_sequence(), 0); // MAX-1, MAX, 0
    h.producer.base_sequence = 5;
    assert_eq!(h.last_sequence(), 7);
    Ok(())
}

/// A batch with `count` in its header and a valid CRC over whatever follows.
fn with_count(body: &[u8], count: i32, last_delta: i32) -> Vec<u8> {
    let mut b = encode(&three(), ProducerFields::NONE).map(|b| b.to_vec()).unwrap_or_default();
    b.truncate(HEADER_LEN);
    b.extend_from_slice(body);
    let len = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    b[23..27].copy_from_slice(&last_delta.to_be_bytes());
    b[57..61].copy_from_slice(&count.to_be_bytes());
    let crc = crc32c::crc32c(&b[CRC_FROM..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

#[test]
fn hostile_counts_and_lengths_are_errors_before_any_allocation() {
    // A record count of 2^31-1 over 10 bytes: refused from the count alone.
    let b = with_count(&[0; 10], i32::MAX, i32::MAX - 1);
    assert!(matches!(validate(&b), Err(BatchError::Corrupt(m)) if m.contains("cannot fit")));
    // A count that disagrees with last_offset_delta.
    let good = encode(&three(), ProducerFields::NONE).map(|b| b.to_vec()).unwrap_or_default();
    let b = with_count(&good[HEADER_LEN..], 3, 5);
    assert!(matches!(validate(&b), Err(BatchError::Corrupt(m)) if m.contains("does not match")));
    // One record claiming 2^30 headers.
    let mut rec = vec![0u8, 0, 0, 1, 1]; // attributes, ts delta, offset delta, key -1, value -1
    rec.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x08]); // header count 2^30 (zigzag)
    let mut body = vec![(rec.len() as u8) << 1];
    body.extend_from_slice(&rec);
    let b = with_count(&body, 1, 0);
    assert!(validate(&b).is_err());
    // A batch_length past the bytes present, and a magic other than 2.
    let mut b = good.clone();
    b[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
    assert!(matches!(validate(&b), Err(BatchError::Length(_))));
    let mut b = good;
    b[16] = 1;
    assert!(matches!(validate(&b), Err(BatchError::Unsupported(_))));
    assert!(validate(&[0u8; 12]).is_err());
}

#[test]
fn compressed_and_transactional_batches_are_recognised() -> Result<(), BatchError> {
    let mut b = encode(&three(), ProducerFields::NONE)?.to_vec();
    b[21..23].copy_from_slice(&(0x10 | 0x4i16).to_be_bytes()); // transactional, zstd
    let crc = crc32c::crc32c(&b[CRC_FROM..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    let h = validate(&b)?; // the records are not walked: they are compressed
    assert!(h.is_transactional() && !h.is_control());
    assert_eq!(h.compression()?, Compression::Zstd);
    assert!(matches!(decode(&Bytes::from(b)), Err(BatchError::Unsupported(_))));
    Ok(())
}

/// Key, value, timestamp offset, headers.
type RawRecord = (Option<Vec<u8>>, Option<Vec<u8>>, i64, Vec<(Vec<u8>, Option<Vec<u8>>)>);

fn record() -> impl Strategy<Value = RawRecord> {
    (
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
        -1_000_000i64..1_000_000,
        proptest::collection::vec(
            (
                proptest::collection::vec(any::<u8>(), 0..5),
                proptest::option::of(proptest::collection::vec(any::<u8>(), 0..5)),
            ),
            0..3,
        ),
    )
}

fn records(raw: Vec<RawRecord>) -> Vec<Record> {
    raw.into_iter()
        .enumerate()
        .map(|(i, (k, v, ts, h))| Record {
            offset_delta: i as u32,
            timestamp_ms: 1_700_000_000_000 + ts,
            key: k.map(Bytes::from),
            value: v.map(Bytes::from),
            headers: h.into_iter().map(|(k, v)| (Bytes::from(k), v.map(Bytes::from))).collect(),
        })
        .collect()
}

proptest! {
    #[test]
    fn batches_round_trip(raw in proptest::collection::vec(record(), 1..6), id in any::<i64>(), epoch in any::<i16>(), seq in any::<i32>()) {
        let rs = records(raw);
        let p = ProducerFields { producer_id: id, producer_epoch: epoch, base_sequence: seq };
        let b = encode(&rs, p)?;
        let (h, back) = decode(&b)?;
        prop_assert_eq!(back, rs.clone());
        prop_assert_eq!(h.producer, p);
        prop_assert_eq!(h.record_count as usize, rs.len());
    }

    #[test]
    fn a_flipped_bit_the_crc_covers_and_any_truncation_are_errors(raw in proptest::collection::vec(record(), 1..4), at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let b = encode(&records(raw), ProducerFields::NONE)?;
        let mut bad = b.to_vec();
        // Everything from batch_length on is checked; base offset and leader epoch are not.
        let i = 8 + at.index(bad.len() - 8);
        if !(12..16).contains(&i) {
            bad[i] ^= 1 << bit;
            prop_assert!(decode(&Bytes::from(bad)).is_err());
        }
        prop_assert!(decode(&b.slice(..at.index(b.len()))).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode(&Bytes::from(bytes));
    }
}
