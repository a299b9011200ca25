//! Fuzz target: arbitrary bytes through the exact reader the tools use (open + full verify + list).
//! Any input must be rejected or accepted without panicking, hanging or allocating unboundedly.
#![no_main]

use std::io::Cursor;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = takbak::limits::Limits::default();
    let ctx = takbak::ctx::Ctx::new(Duration::from_secs(10));
    if let Ok((opened, _)) = takbak::reader::open_and_verify(&mut Cursor::new(data), &limits, &ctx) {
        let _ = takbak::reader::list(&opened, &mut std::io::sink());
    }
});
