//! An origin `Vary` rewritten for the edge (`response::rewrite_vary`) and a request's
//! variant key (`cachet_http::vary`). Input: `vary \n` then request header lines
//! `name: value`. Checks: the rewritten fields are lower-case tokens, sorted, unique, at
//! most `MAX_VARY_FIELDS`, never a per-user or built-in field; the client `Vary` names
//! `Accept-Encoding` whenever the stored body depends on it; rewriting the client `Vary`
//! again gives the same rewrite; normalizing a normalized value changes nothing;
//! `Accept-Language`'s canonical form is a fixed point, lower-case ASCII;
//! the variant key is the primary key plus a 16-hex-digit suffix, deterministic.
#![no_main]

use cachet_fuzz::{fields, text};
use cachet_http::vary::{
    MAX_VARY_VALUE_BYTES, VARIANT_SEPARATOR, accept_language, is_variant_key, normalized,
    variant_key,
};
use cachet_policy::response::{MAX_VARY_FIELDS, rewrite_vary};
use libfuzzer_sys::fuzz_target;

const DEVICE: &str = "X-Device";

fuzz_target!(|data: &[u8]| {
    let ([vary], rest) = fields::<1>(data);
    let vary = text(vary);
    let device = vary.len().is_multiple_of(2);
    let encoding_varies = vary.len().is_multiple_of(3);
    let Some(rw) = rewrite_vary(Some(&vary), DEVICE, device, encoding_varies) else {
        return;
    };
    assert!(rw.fields.len() <= MAX_VARY_FIELDS);
    assert!(rw.fields.windows(2).all(|w| w[0] < w[1]), "{:?}", rw.fields);
    for f in &rw.fields {
        assert!(!f.is_empty() && *f == f.to_ascii_lowercase());
        assert!(
            ![
                "cookie",
                "authorization",
                "proxy-authorization",
                "user-agent",
                "accept-encoding",
                "x-device",
                "*"
            ]
            .contains(&f.as_str())
        );
    }
    if encoding_varies {
        assert!(
            rw.client
                .split(',')
                .any(|m| m.trim().eq_ignore_ascii_case("accept-encoding")),
            "{:?}",
            rw.client
        );
    }
    let again = rewrite_vary(Some(&rw.client), DEVICE, device, encoding_varies)
        .expect("client Vary is storable");
    assert_eq!(again, rw, "{vary:?}");

    let headers: Vec<(String, Vec<u8>)> = rest
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let colon = line.iter().position(|&b| b == b':')?;
            Some((
                text(&line[..colon]).trim().to_owned(),
                line[colon + 1..].to_vec(),
            ))
        })
        .collect();
    for f in &rw.fields {
        if let Some(v) = normalized(&headers[..], f) {
            let once = [(f.clone(), v.clone())];
            assert_eq!(
                normalized(&once[..], f),
                Some(v.clone()),
                "normalizing twice"
            );
        }
    }
    // Accept-Language's canonical form is a fixed point, lower-case ASCII.
    for (_, v) in &headers {
        if let Some(c) = accept_language(v) {
            assert_eq!(accept_language(&c), Some(c.clone()), "canonical twice");
            assert!(c.iter().all(|b| b.is_ascii() && !b.is_ascii_uppercase()));
        }
    }
    let primary = "blog.example/a?b=1|pc";
    let key = variant_key(primary, &rw.fields, &headers[..]);
    assert_eq!(
        key,
        variant_key(primary, &rw.fields, &headers[..]),
        "deterministic"
    );
    match key {
        Some(k) => {
            assert!(is_variant_key(&k));
            let suffix = k
                .strip_prefix(primary)
                .and_then(|s| s.strip_prefix(VARIANT_SEPARATOR))
                .expect("prefix");
            assert!(
                suffix.len() == 16 && suffix.bytes().all(|b| b.is_ascii_hexdigit()),
                "{k:?}"
            );
        }
        None => {
            assert!(rw.fields.iter().any(|f| {
                normalized(&headers[..], f).is_some_and(|v| v.len() > MAX_VARY_VALUE_BYTES)
            }));
        }
    }
});
