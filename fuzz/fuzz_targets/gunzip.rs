//! `object::gunzip` on arbitrary bytes (a stored gzip body inflated for a client that
//! does not accept gzip; also a corrupted entry). Checks: the output never exceeds
//! `MAX_INFLATED_BYTES`; and the input, compressed with `object::gzip`, inflates back
//! to itself.
#![no_main]

use cachet_policy::object::{MAX_INFLATED_BYTES, gunzip, gzip};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(out) = gunzip(data) {
        assert!(out.len() as u64 <= MAX_INFLATED_BYTES);
    }
    let packed = gzip(data).expect("in-memory gzip");
    assert_eq!(gunzip(&packed).expect("own gzip inflates"), data);
});
