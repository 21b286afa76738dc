//! `Meta::from_bytes` on arbitrary bytes (what the Envoy filter reads from shared data and
//! the edge app from the core cache's user metadata: anything, also another version's or
//! a corrupted entry). A decoded `Meta` encodes and decodes back equal, its accessors
//! never panic, and `deliver` builds a head from it whose byte range lies within the body.
#![no_main]

use cachet_http::{Answer, CacheStatus, Client, deliver};
use cachet_policy::object::Meta;
use cachet_refresh::Timestamp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(meta) = Meta::from_bytes(data) else {
        return;
    };
    let bytes = meta.to_bytes();
    assert_eq!(Meta::from_bytes(&bytes).as_ref(), Some(&meta), "round trip");

    let _ = meta.header("content-type");
    let _ = meta.header("ETag");
    let _ = meta.surrogate_key_line();
    let _ = meta.is_vary_marker();
    let _ = meta.ban_view();

    let client = Client {
        get: true,
        accept_encoding: Some(b"br".to_vec()),
        if_none_match: Some(b"\"x\", W/\"y\"".to_vec()),
        range: Some(b"bytes=1-100".to_vec()),
        ..Client::default()
    };
    let now = Timestamp::from_millis(1_800_000_000_000);
    let d = deliver(&meta, &client, now, CacheStatus::Hit);
    let body_len = if d.inflate() {
        meta.origin_len
    } else {
        meta.stored_len
    };
    let head = d.head(body_len);
    if let Answer::Slice(start, end) = head.body {
        assert!(
            start < end && end <= body_len,
            "{start}..{end} of {body_len}"
        );
    }
});
