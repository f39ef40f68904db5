//! libFuzzer entry for the API request check in `harness/api_request.rs`.

#![no_main]

#[path = "../harness/api_request.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
