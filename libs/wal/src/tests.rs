use proptest::prelude::*;

use super::*;

type Spec = Vec<(u64, Vec<(u32, i64, Vec<u8>)>)>;

fn spec() -> impl Strategy<Value = Spec> {
    let entry = (1u32..1000, any::<i64>(), proptest::collection::vec(any::<u8>(), 0..64));
    proptest::collection::vec((any::<u64>(), proptest::collection::vec(entry, 1..6)), 1..5)
}

fn build(spec: &Spec, kind: ObjectKind) -> Result<Bytes, FormatError> {
    let mut b = ObjectBuilder::new(kind);
    for (log, entries) in spec {
        b.begin_chunk(*log);
        for (n, ts, payload) in entries {
            b.push_entry(*n, *ts, payload)?;
        }
    }
    Ok(b.finish()?.0)
}

/// Builds `spec` into `buf`, its object aligned to `align`.
fn build_aligned(spec: &Spec, buf: Vec<u8>, align: usize) -> Result<LaidOut, FormatError> {
    let mut b = ObjectBuilder::with_aligned_buffer(ObjectKind::Wal, buf, align);
    for (log, entries) in spec {
        b.begin_chunk(*log);
        for (n, ts, payload) in entries {
            b.push_entry(*n, *ts, payload)?;
        }
    }
    Ok(b.finish_vec()?.0)
}

proptest! {
    /// An object laid out at an aligned address in a buffer is the same bytes as one built
    /// alone (offsets are the object's, not the buffer's), and begins aligned when the buffer
    /// has room for it.
    #[test]
    fn an_aligned_object_is_the_same_object(spec in spec(), align_log in 0u32..13, spare in 0usize..9000) {
        let align = 1usize << align_log;
        let plain = build(&spec, ObjectKind::Wal)?;
        let laid = build_aligned(&spec, Vec::with_capacity(plain.len() + spare), align)?;
        prop_assert_eq!(laid.object(), &plain[..]);
        if spare >= align {
            prop_assert_eq!(laid.object().as_ptr().align_offset(align), 0);
        }
        // Used again, the buffer lays out the same object.
        let again = build_aligned(&spec, laid.buf, align)?;
        prop_assert_eq!(again.object(), &plain[..]);
    }

    #[test]
    fn object_round_trips(spec in spec()) {
        let obj = build(&spec, ObjectKind::Wal)?;
        let decoded = decode_object(&obj, ObjectKind::Wal)?;
        prop_assert_eq!(decoded.len(), spec.len());
        for ((meta, entries), (log, want)) in decoded.iter().zip(&spec) {
            prop_assert_eq!(meta.log, *log);
            prop_assert_eq!(entries.len(), want.len());
            let mut rel = 0u64;
            for (i, (e, (n, ts, payload))) in entries.iter().zip(want).enumerate() {
                prop_assert_eq!(e.record_count, *n);
                prop_assert_eq!(e.timestamp, *ts);
                prop_assert_eq!(&e.payload[..], &payload[..]);
                prop_assert_eq!(meta.entries[i].rel_record_offset, rel);
                prop_assert_eq!(meta.entry_size(i), e.size as u64);
                rel += u64::from(*n);
            }
            prop_assert_eq!(meta.record_count, rel);
            // A reader that fetched only this chunk's byte range decodes the same entries.
            let range = meta.byte_start as usize..(meta.byte_start + meta.byte_len) as usize;
            prop_assert_eq!(&decode_entries(&obj.slice(range))?, entries);
        }
    }

    /// Entries pushed with the checksum of their payload's tail known make the same object as
    /// entries checksummed whole.
    #[test]
    fn an_object_from_known_checksums_is_the_same_object(spec in spec(), cut in any::<prop::sample::Index>()) {
        let mut b = ObjectBuilder::new(ObjectKind::Wal);
        for (log, entries) in &spec {
            b.begin_chunk(*log);
            for (n, ts, payload) in entries {
                let from = cut.index(payload.len() + 1);
                let known = KnownCrc { from, crc: crc32c::crc32c(&payload[from..]) };
                b.push_entry_known(*n, *ts, payload, Some(known))?;
            }
        }
        prop_assert_eq!(b.finish()?.0, build(&spec, ObjectKind::Wal)?);
    }

    #[test]
    fn any_flipped_bit_is_detected(spec in spec(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let obj = build(&spec, ObjectKind::Wal)?;
        let mut bad = obj.to_vec();
        let i = at.index(bad.len());
        bad[i] ^= 1 << bit;
        prop_assert!(decode_object(&Bytes::from(bad), ObjectKind::Wal).is_err(), "flip at {} of {} undetected", i, obj.len());
    }

    #[test]
    fn any_truncation_is_detected(spec in spec(), keep in any::<prop::sample::Index>()) {
        let obj = build(&spec, ObjectKind::Wal)?;
        let cut = keep.index(obj.len());
        prop_assert!(decode_object(&obj.slice(..cut), ObjectKind::Wal).is_err());
        // A chunk cut short is an error too, never fewer entries.
        let decoded = decode_object(&obj, ObjectKind::Wal)?;
        let meta = &decoded[0].0;
        let end = (meta.byte_start + meta.byte_len) as usize;
        let short = keep.index(end - meta.byte_start as usize) + meta.byte_start as usize;
        if short > meta.byte_start as usize {
            let cut_entries = decode_entries(&obj.slice(meta.byte_start as usize..short));
            let at_boundary = meta.entries.iter().any(|e| meta.byte_start as usize + e.byte_offset as usize == short);
            prop_assert!(cut_entries.is_err() || at_boundary);
        }
    }

    #[test]
    fn flipped_bit_in_a_chunk_range_read_is_detected(spec in spec(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let obj = build(&spec, ObjectKind::Wal)?;
        let meta = decode_object(&obj, ObjectKind::Wal)?.remove(0).0;
        let mut chunk = obj[meta.byte_start as usize..(meta.byte_start + meta.byte_len) as usize].to_vec();
        let i = at.index(chunk.len());
        chunk[i] ^= 1 << bit;
        prop_assert!(decode_entries(&Bytes::from(chunk)).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_decode_or_overallocate(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        // Must return, not panic or allocate past the input; almost always an error.
        let _ = decode_object(&Bytes::from(bytes.clone()), ObjectKind::Wal);
        let _ = decode_entries(&Bytes::from(bytes));
    }
}

/// A known checksum that is false is caught where tests run (stored, its entry would never
/// decode).
#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "a known checksum is false")]
fn a_false_known_checksum_is_caught() {
    let mut b = ObjectBuilder::new(ObjectKind::Wal);
    b.begin_chunk(1);
    let known = KnownCrc { from: 2, crc: crc32c::crc32c(b"llo") ^ 1 };
    let _ = b.push_entry_known(1, 0, b"hello", Some(known));
}

#[test]
fn hostile_footer_counts_are_rejected_before_allocating() -> Result<(), FormatError> {
    // A footer claiming 2^32-1 chunks, with a valid checksum and trailer.
    let mut footer = Vec::new();
    footer.extend_from_slice(&FOOTER_VERSION.to_le_bytes());
    footer.extend_from_slice(&u32::MAX.to_le_bytes());
    let mut obj = footer.clone();
    obj.extend_from_slice(&(footer.len() as u32).to_le_bytes());
    obj.extend_from_slice(&crc32c::crc32c(&footer).to_le_bytes());
    obj.extend_from_slice(&WAL_MAGIC);
    let err = decode_object(&Bytes::from(obj), ObjectKind::Wal);
    assert!(matches!(&err, Err(FormatError::Corrupt(m)) if m.contains("cannot fit")), "{err:?}");

    // An entry claiming a 4 GiB payload in a 30-byte chunk.
    let mut entry = Vec::new();
    entry.extend_from_slice(&u32::MAX.to_le_bytes());
    entry.extend_from_slice(&1u32.to_le_bytes());
    entry.extend_from_slice(&0i64.to_le_bytes());
    entry.extend_from_slice(&[0u8; 14]);
    assert!(decode_entries(&Bytes::from(entry)).is_err());
    Ok(())
}

#[test]
fn wal_and_segment_magic_are_not_interchangeable() -> Result<(), FormatError> {
    let spec: Spec = vec![(7, vec![(3, 100, b"abc".to_vec())])];
    let seg = build(&spec, ObjectKind::Segment)?;
    assert!(decode_object(&seg, ObjectKind::Segment).is_ok());
    assert!(decode_object(&seg, ObjectKind::Wal).is_err());
    Ok(())
}

#[test]
fn zero_record_entry_is_corrupt() -> Result<(), FormatError> {
    let mut b = ObjectBuilder::new(ObjectKind::Wal);
    b.begin_chunk(1);
    b.push_entry(0, 0, b"x")?;
    let (obj, _) = b.finish()?;
    assert!(decode_object(&obj, ObjectKind::Wal).is_err());
    Ok(())
}

#[test]
fn a_segments_footer_length_follows_from_its_entry_count() {
    for n in [1u32, 2, 1000] {
        let mut b = ObjectBuilder::new(ObjectKind::Segment);
        b.begin_chunk(9);
        for i in 0..n {
            b.push_entry(1, i64::from(i), &[7u8; 3]).expect("entry");
        }
        let (object, metas) = b.finish().expect("segment");
        let data = metas[0].byte_len;
        assert_eq!(object.len() as u64, data + single_chunk_footer_len(n) + TRAILER_LEN as u64);
    }
}

#[test]
fn an_entry_layout_agrees_with_the_decoded_entries_and_refuses_a_truncation() {
    let mut b = ObjectBuilder::new(ObjectKind::Wal);
    b.begin_chunk(1);
    for i in 0..5u32 {
        b.push_entry(i + 1, i64::from(i), &vec![9u8; i as usize * 7]).expect("entry");
    }
    let (object, metas) = b.finish().expect("object");
    let chunk = object.slice(0..metas[0].byte_len as usize);
    let layout = entry_layout(&chunk).expect("layout");
    let decoded = decode_entries(&chunk).expect("entries");
    assert_eq!(layout.len(), decoded.len());
    for ((at, h), e) in layout.iter().zip(&decoded) {
        assert_eq!(
            (*at, h.record_count, h.timestamp),
            (e.byte_offset, e.record_count, e.timestamp)
        );
        assert_eq!(h.payload_len as usize, e.payload.len());
    }
    assert!(entry_layout(&chunk[..chunk.len() - 1]).is_err());
}
