//! `response::surrogate_keys` on arbitrary `Surrogate-Key` values, and
//! `admin::purge_keys` on the same text as a purge request's header. Checks: every key
//! is a non-empty run of non-whitespace within Fastly's limits (a key at most
//! `MAX_SURROGATE_KEY_BYTES`, ending within `MAX_SURROGATE_HEADER_BYTES`), the keys are
//! a prefix of the whitespace split, and joining them with spaces and splitting again
//! gives the same keys.
#![no_main]

use cachet_fuzz::text;
use cachet_policy::admin::{MAX_PURGE_KEYS, purge_keys};
use cachet_policy::response::{
    MAX_SURROGATE_HEADER_BYTES, MAX_SURROGATE_KEY_BYTES, surrogate_keys,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let v = text(data);
    let keys: Vec<&str> = surrogate_keys(&v).collect();
    let all: Vec<&str> = v.split_ascii_whitespace().collect();
    assert!(all.starts_with(&keys), "{v:?}");
    let base = v.as_ptr() as usize;
    for k in &keys {
        assert!(!k.is_empty() && k.len() <= MAX_SURROGATE_KEY_BYTES);
        assert!(!k.bytes().any(|b| b.is_ascii_whitespace()));
        assert!(k.as_ptr() as usize - base + k.len() <= MAX_SURROGATE_HEADER_BYTES);
    }
    let line = keys.join(" ");
    let again: Vec<&str> = surrogate_keys(&line).collect();
    assert_eq!(again, keys);

    if let Ok(purge) = purge_keys(Some(&v)) {
        assert!(!purge.is_empty() && purge.len() <= MAX_PURGE_KEYS, "{v:?}");
        assert!(
            purge
                .iter()
                .all(|k| !k.is_empty() && !k.bytes().any(|b| b.is_ascii_whitespace()))
        );
    }
});
