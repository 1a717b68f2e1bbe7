//! What a reader or the SDK decodes from bytes it did not make: a stored run of framed
//! entries (a `ReadEntries` answer, or a run cut from an object) and a whole WAL object or
//! segment with its footer. Decoding must never panic or allocate beyond what the bytes hold.
//! Each input is tried as it is, and with every entry's checksum made right (a run) and the
//! footer's (an object), so the fuzzer reaches past the checksums.
#![no_main]

use bytes::Bytes;

/// `data` with each entry's CRC-32C recomputed, walking the framing as far as it tiles.
fn fix_entries(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    let mut at = 0usize;
    while at + wal::ENTRY_HEADER_LEN <= out.len() {
        let len = u32::from_le_bytes([out[at], out[at + 1], out[at + 2], out[at + 3]]) as usize;
        let end = at + wal::ENTRY_HEADER_LEN + len;
        if end > out.len() {
            break;
        }
        let crc = crc32c::crc32c_append(
            crc32c::crc32c(&out[at..at + 16]),
            &out[at + wal::ENTRY_HEADER_LEN..end],
        );
        out[at + 16..at + 20].copy_from_slice(&crc.to_le_bytes());
        at = end;
    }
    out
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    for run in [Bytes::copy_from_slice(data), Bytes::from(fix_entries(data))] {
        let _ = wal::decode_entries(&run);
        let _ = wal::entry_layout(&run);
    }
    for kind in [wal::ObjectKind::Wal, wal::ObjectKind::Segment] {
        let _ = wal::decode_object(&Bytes::copy_from_slice(data), kind);
        // The trailer made right: footer length within the input, its checksum, the magic.
        if data.len() > wal::TRAILER_LEN {
            let mut fixed = data.to_vec();
            let at = fixed.len() - wal::TRAILER_LEN;
            let footer_len = u32::from_le_bytes([fixed[0], fixed[1], fixed[2], fixed[3]]) as usize
                % (at + 1);
            let crc = crc32c::crc32c(&fixed[at - footer_len..at]);
            fixed[at..at + 4].copy_from_slice(&(footer_len as u32).to_le_bytes());
            fixed[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
            fixed[at + 8..].copy_from_slice(&kind.magic());
            let _ = wal::decode_object(&Bytes::from(fixed), kind);
        }
    }
});
