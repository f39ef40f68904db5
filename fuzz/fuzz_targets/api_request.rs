//! libFuzzer entry for the API request check in `harness/api_request.rs`.

#![no_main]

#[path = "../harness/api_request.rs"]
mod harness;
#[path = "../harness/scratch.rs"]
mod scratch;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
