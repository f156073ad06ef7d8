#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| clef_web_fuzz::quant_kernels(data));
