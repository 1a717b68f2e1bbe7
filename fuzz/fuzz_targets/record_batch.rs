//! A produced record batch: validating and decoding it must never panic or allocate beyond
//! what the bytes can hold.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let b = bytes::Bytes::copy_from_slice(data);
    let _ = recordbatch::validate(&b);
    let _ = recordbatch::decode(&b);
});
