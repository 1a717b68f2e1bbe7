//! A Kafka request frame (without its size) as a client might send it: decoding it must
//! never panic or allocate beyond what the bytes can hold, whatever they are.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = kafka::api::decode(&bytes::Bytes::copy_from_slice(data));
});
