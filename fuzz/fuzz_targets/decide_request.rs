#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| clef_web_fuzz::decide_request(data));
