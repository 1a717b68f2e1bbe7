//! A Kafka connection's bytes as a client might send them: the listener's frame reader takes
//! each frame's bytes and decoding allowance from a request budget before reading its body,
//! and decoding it stays within that allowance, whatever the bytes are; every byte taken is
//! given back once the frames are dropped.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a runtime")
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    runtime().block_on(async {
        let budget = kafka::budget::RequestBudget::new(8 << 20);
        let mut r = data;
        while let Ok(Some(frame)) =
            kafka::frame::read_frame_within(&mut r, 1 << 20, &budget, Duration::from_secs(1)).await
        {
            let len = frame.bytes.len();
            assert!(frame.held.bytes() >= len, "a frame read without its bytes taken");
            if let Ok((_, allocated)) = kafka::api::decode_counted(&frame.bytes) {
                assert!(allocated <= kafka::budget::decode_allowance(len));
            }
        }
        assert_eq!(budget.held(), 0, "bytes taken and never given back");
    });
});
