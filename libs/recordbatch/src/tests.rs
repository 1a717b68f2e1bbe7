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
    let h = BatchHeader::parse(&b)?;
    assert!(h.is_transactional() && !h.is_control());
    assert_eq!(h.compression()?, Compression::Zstd);
    // Its records are not zstd: the batch is refused, never read as records.
    assert!(matches!(validate(&b), Err(BatchError::Corrupt(_))));
    assert!(matches!(decode(&Bytes::from(b)), Err(BatchError::Corrupt(_))));
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

/// Compressed batches of three records from real clients, one per codec each writes:
/// librdkafka 2.16 (confluent-kafka; its snappy is raw, and it sends LZ4 uncompressed when
/// that is smaller) and the Java client 4.4.0 (snappy in xerial framing). Captured as stored.
const RDKAFKA_GZIP: &str = "00000000000000000000007b00000000022b28396b0001000000020000018bcfe568000000018bcfe56802ffffffffffffffffffffffffffff000000031f8b08000000000000039bc5c8c0c0c0926dd8c15894929d98969da8905e9559a0909f97aa408600830903131323aa7849793e135306538500030b0b4bb631230300a6d390cc73000000";
const RDKAFKA_SNAPPY: &str = "00000000000000000000007000000000020e47c6100002000000020000018bcfe568000000018bcfe56802ffffffffffffffffffffffffffff000000037d70aa01000000046b31980172646b61666b6120736e61707079206f6e6520e2130018003800020201243a40004074776f020268027810000404046b330100";
const RDKAFKA_ZSTD: &str = "0000000000000000000000760000000002dc2d45c60004000000020000018bcfe568000000018bcfe56802ffffffffffffffffffffffffffff0000000328b52ffd0058e5010024039a01000000046b31880172646b61666b61207a737464206f6e652000340002020174776f020268027810000404046b33010002005dc965d039c7";
const JAVA_GZIP: &str = "000000000000000000000078ffffffff02f120e60d0001000000020000018bcfe568000000018bcfe56802ffffffffffffffffffffffffffff000000031f8b08000000000000ff6b6064606060c9362cc84a2c4b5448afca2c50c8cf4b55209ec7a0c7c0c4c42885102c29cf6762ca60aa1060606161c93666640000d9caa2f063000000";
const JAVA_SNAPPY: &str = "000000000000000000000082ffffffff02c0814ffd0002000000020000018bcfe568000000018bcfe56802ffffffffffffffffffffffffffff0000000382534e415050590000000001000000010000003d6e689201000000046b3180016a61766120736e61707079206f6e65206aba1000180032000202011e2e37004074776f020268027810000404046b330100";
const JAVA_LZ4: &str = "000000000000000000000077ffffffff02a087e0650003000000020000018bcfe568000000018bcfe56802ffffffffffffffffffffffffffff0000000304224d1860408237000000ff0678000000046b31686a617661206c7a34206f6e65200d001475002c00020201182e00f00274776f020268027810000404046b33010000000000";
const JAVA_ZSTD: &str = "000000000000000000000076ffffffff02aa7f21bd0004000000020000018bcfe568000000018bcfe56802ffffffffffffffffffffffffffff0000000328b52ffd0058cc0100f4028001000000046b31706a617661207a737464206f6e6520002e000202011a74776f020268027810000404046b3301000200546de6806613010000";

#[test]
fn real_clients_compressed_batches_decode_to_their_records() -> Result<(), BatchError> {
    let golden = [
        (RDKAFKA_GZIP, "rdkafka gzip", Compression::Gzip),
        (RDKAFKA_SNAPPY, "rdkafka snappy", Compression::Snappy),
        (RDKAFKA_ZSTD, "rdkafka zstd", Compression::Zstd),
        (JAVA_GZIP, "java gzip", Compression::Gzip),
        (JAVA_SNAPPY, "java snappy", Compression::Snappy),
        (JAVA_LZ4, "java lz4", Compression::Lz4),
        (JAVA_ZSTD, "java zstd", Compression::Zstd),
    ];
    for (hex_batch, label, codec) in golden {
        let b = hex(hex_batch);
        let h = validate(&b)?;
        assert_eq!(h.compression()?, codec, "{label}");
        let (_, records) = decode(&b)?;
        let want = [
            (Some(b"k1".to_vec()), Some(format!("{label} one ").repeat(4).into_bytes()), vec![]),
            (
                None,
                Some(format!("{label} two").into_bytes()),
                vec![(b"h".to_vec(), Some(b"x".to_vec()))],
            ),
            (Some(b"k3".to_vec()), None, vec![]),
        ];
        assert_eq!(records.len(), 3, "{label}");
        for (i, (r, (key, value, headers))) in records.iter().zip(want).enumerate() {
            assert_eq!(r.offset_delta, i as u32, "{label}");
            assert_eq!(r.timestamp_ms, 1_700_000_000_000 + i as i64, "{label}");
            assert_eq!(r.key.as_deref(), key.as_deref(), "{label} record {i}");
            assert_eq!(r.value.as_deref(), value.as_deref(), "{label} record {i}");
            let got: Vec<(Vec<u8>, Option<Vec<u8>>)> = r
                .headers
                .iter()
                .map(|(k, v)| (k.to_vec(), v.as_ref().map(|v| v.to_vec())))
                .collect();
            assert_eq!(got, headers, "{label} record {i}");
        }
        // A record count the compressed records do not hold is refused.
        let mut wrong = b.to_vec();
        wrong[57..61].copy_from_slice(&2i32.to_be_bytes());
        wrong[23..27].copy_from_slice(&1i32.to_be_bytes());
        let crc = crc32c::crc32c(&wrong[CRC_FROM..]);
        wrong[17..21].copy_from_slice(&crc.to_be_bytes());
        assert!(validate(&wrong).is_err(), "{label}: a count of 2 for 3 records");
    }
    Ok(())
}

#[test]
fn a_batch_framed_again_keeps_its_fields_and_is_uncompressed() -> Result<(), BatchError> {
    let producer = ProducerFields { producer_id: 9, producer_epoch: 3, base_sequence: 40 };
    // Log-append time and transactional, once gzip (the bits a re-framed batch drops).
    let framing =
        Framing { attributes: 0x8 | 0x10 | 0x1, base_timestamp: 5, max_timestamp: 99, producer };
    let b = encode_framed(&three(), framing)?;
    let (h, records) = decode(&b)?;
    assert_eq!(h.compression()?, Compression::None);
    assert!(h.log_append_time() && h.is_transactional());
    assert_eq!((h.base_timestamp, h.max_timestamp, h.producer), (5, 99, producer));
    assert_eq!(records, three());
    assert!(encode_framed(&[], framing).is_err());
    Ok(())
}

#[test]
fn the_first_record_without_a_key_is_found() -> Result<(), BatchError> {
    let cap = compression::MAX_DECOMPRESSED;
    assert_eq!(first_unkeyed(&hex(KAFKA_PYTHON_THREE), cap)?, Some(1), "the second has none");
    assert_eq!(
        first_unkeyed(&hex(KAFKA_PYTHON_IDEMPOTENT), cap)?,
        Some(0),
        "its one record has none"
    );
    let keyed: Vec<Record> = three().into_iter().filter(|r| r.key.is_some()).collect();
    assert_eq!(first_unkeyed(&encode(&keyed, ProducerFields::NONE)?, cap)?, None);
    Ok(())
}

#[test]
fn a_batch_stamped_with_the_append_time_reads_that_time_and_stays_valid() -> Result<(), BatchError>
{
    let mut b = hex(KAFKA_PYTHON_THREE).to_vec();
    stamp_log_append_time(&mut b, 1_800_000_000_000)?;
    let h = validate(&b)?;
    assert!(h.log_append_time());
    assert_eq!(h.max_timestamp, 1_800_000_000_000);
    let (_, records) = decode(&Bytes::from(b))?;
    assert_eq!(records.len(), 3, "the records are untouched");
    Ok(())
}

#[test]
fn a_batch_keeps_some_of_its_records_at_their_offsets_and_stays_readable() -> Result<(), BatchError>
{
    let sent = hex(KAFKA_PYTHON_THREE);
    let (h, records) = decode(&sent)?;
    let kept: Vec<Record> = records.iter().filter(|r| r.offset_delta != 1).cloned().collect();
    let b = encode_kept(&h, &kept)?;
    let (h2, got) = decode(&b)?;
    assert_eq!(got, kept, "the records left, at offset deltas 0 and 2");
    assert_eq!((h2.last_offset_delta, h2.record_count, h2.max_timestamp), (2, 2, h.max_timestamp));
    assert_eq!(h2.producer, h.producer);
    assert!(validate(&b).is_err(), "a producer may not send such a batch");
    // None left: an empty batch, still spanning its three offsets.
    let (h3, none) = decode(&encode_kept(&h, &[])?)?;
    assert_eq!((h3.last_offset_delta, h3.record_count, none.len()), (2, 0, 0));
    let (g, gone) = decode(&encode_gap(1000, 77)?)?;
    assert_eq!((g.last_offset_delta, g.record_count, g.max_timestamp, gone.len()), (999, 0, 77, 0));
    assert_eq!(g.producer, ProducerFields::NONE);
    assert!(encode_gap(0, 0).is_err());
    // Offset deltas out of order, or past the batch's span, are refused as stored too.
    let mut swapped = kept.clone();
    swapped.reverse();
    assert!(decode(&encode_kept(&h, &swapped)?).is_err());
    Ok(())
}

#[test]
fn transaction_markers_are_control_batches_kafka_reads() -> Result<(), BatchError> {
    for commit in [true, false] {
        let b = encode_marker(42, 3, commit, 7, 1_700_000_000_000)?;
        let h = validate(&b)?;
        assert!(h.is_control() && h.is_transactional());
        assert_eq!((h.producer.producer_id, h.producer.producer_epoch), (42, 3));
        assert_eq!((h.producer.base_sequence, h.record_count), (-1, 1));
        assert_eq!(marker_commits(&b), Some(commit));
        let (_, records) = decode(&b)?;
        let value = records[0].value.clone().unwrap_or_default();
        assert_eq!(value.as_ref(), [0, 0, 0, 0, 0, 7], "version 0, coordinator epoch 7");
    }
    let plain = encode(&[], ProducerFields::NONE);
    assert!(plain.is_err(), "no records");
    let data = encode(
        &[Record { offset_delta: 0, timestamp_ms: 1, key: None, value: None, headers: vec![] }],
        ProducerFields::NONE,
    )?;
    assert_eq!(marker_commits(&data), None, "not a marker");
    Ok(())
}
