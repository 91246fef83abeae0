#![no_main]
// Shared with tests/fuzz_replay.rs; each target uses one of its functions.
#[allow(dead_code)]
#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = harness::control_request(data);
});
