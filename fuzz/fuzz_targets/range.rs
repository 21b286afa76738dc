//! `range::interpret` on arbitrary `Range` values and representation lengths. Checks: a
//! partial answer lies within the representation (`first <= last < length`), its
//! `Content-Range` reads back; a satisfiable single `first-last` spec is honoured; a
//! length of zero is never partial; the answer does not depend on ASCII whitespace
//! around the value.
#![no_main]

use cachet_fuzz::take_u64;
use cachet_http::range::{RangeRequest, interpret};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (raw_len, value) = take_u64(data);
    // Small lengths half the time, so the clamping and suffix edges are reached.
    let length = if raw_len & 1 == 0 {
        raw_len >> 1
    } else {
        (raw_len >> 1) % 4096
    };
    let got = interpret(value, length);
    if let RangeRequest::Partial(r) = got {
        assert!(length > 0);
        assert!(r.first <= r.last && r.last < length, "{r:?} of {length}");
        assert_eq!(r.len(), r.last - r.first + 1);
        assert_eq!(
            r.content_range(length),
            format!("bytes {}-{}/{length}", r.first, r.last)
        );
    }
    let mut padded = b" \t".to_vec();
    padded.extend_from_slice(value);
    padded.extend_from_slice(b"\t ");
    assert_eq!(interpret(&padded, length), got);
    // A well-formed single range: honoured exactly when it starts inside.
    if length > 0 {
        let first = raw_len % length;
        let spec = format!("bytes={first}-{}", first.saturating_add(value.len() as u64));
        match interpret(spec.as_bytes(), length) {
            RangeRequest::Partial(r) => {
                assert_eq!(r.first, first);
                assert_eq!(
                    r.last,
                    first.saturating_add(value.len() as u64).min(length - 1)
                );
            }
            other => panic!("{spec} of {length}: {other:?}"),
        }
    }
});
