#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    baton_wire::fuzzing::decode_stream(data);
});
