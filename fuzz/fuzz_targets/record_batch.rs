//! A produced record batch: validating and decoding it must never panic or allocate beyond
//! what the bytes can hold. Each input is tried as it is, and with its length, magic and CRC
//! made right, so the fuzzer reaches the records and the decompressors behind the checksum.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let b = bytes::Bytes::copy_from_slice(data);
    let _ = recordbatch::validate(&b);
    let _ = recordbatch::decode(&b);
    if data.len() >= recordbatch::HEADER_LEN {
        let mut fixed = data.to_vec();
        let len = (fixed.len() - 12) as i32;
        fixed[8..12].copy_from_slice(&len.to_be_bytes());
        fixed[16] = 2;
        let crc = crc32c::crc32c(&fixed[21..]);
        fixed[17..21].copy_from_slice(&crc.to_be_bytes());
        let b = bytes::Bytes::from(fixed);
        let _ = recordbatch::validate(&b);
        let _ = recordbatch::decode(&b);
    }
});
