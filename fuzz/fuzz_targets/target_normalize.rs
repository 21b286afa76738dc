//! Request-target and host normalization: `Normalizer::normalize_target` (the path as
//! `normalize_path` gives it, RFC 3986 §6.2.2; the query after the first `?` as
//! `normalize`), `plan::normalize_host`, and `Policy::plan` on the edge app's shipped
//! configuration. Checks: the path part equals `normalize_path` of it, the query part
//! equals `normalize` of it, both are idempotent, a normal host is lower-case with host
//! bytes only, planning the planned target again gives the same decision and cache
//! key, and `cachet_http::authority::authority` (the check the edge makes before its SDK
//! parses the URL) refuses exactly the hosts the plan answers `400` for, without a panic
//! (`Host: blog.example:99999`, a missing `Host`: issue 27 item 14).
//!
//! Input: `host \n user-agent \n target`.
#![no_main]

use std::borrow::Cow;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use cachet_fuzz::{fields, text};
use cachet_policy::plan::{MAX_HOST_BYTES, normalize_host};
use cachet_policy::{Decision, Policy, RequestView, Synth};
use cachet_query::{Normalizer, QueryConfig};
use libfuzzer_sys::fuzz_target;

static NORMALIZER: LazyLock<Normalizer> =
    LazyLock::new(|| Normalizer::new(&QueryConfig::default()).expect("default compiles"));
static POLICY: LazyLock<Policy> = LazyLock::new(|| {
    Policy::from_toml(include_str!("../../edge-app/cachet.toml")).expect("shipped config")
});

fuzz_target!(|data: &[u8]| {
    let ([host, ua], target) = fields::<2>(data);
    let (host, target) = (text(host), text(target));

    let n = &*NORMALIZER;
    if let Ok(out) = n.normalize_target(&target) {
        match target.split_once('?') {
            None => {
                let path = cachet_query::normalize_path(&target);
                assert_eq!(out, path);
                if matches!(path, Cow::Borrowed(_)) {
                    assert!(matches!(out, Cow::Borrowed(s) if s == target));
                }
            }
            Some((path, query)) => {
                let path = cachet_query::normalize_path(path);
                let q = n
                    .normalize(query)
                    .expect("query accepted by normalize_target");
                if q.is_empty() {
                    assert_eq!(out, path);
                } else {
                    assert_eq!(out, format!("{path}?{q}"));
                }
            }
        }
        let again = n
            .normalize_target(&out)
            .expect("normal target within bounds");
        assert!(
            matches!(again, Cow::Borrowed(s) if s == out),
            "{target:?} -> {out:?} -> {again:?}"
        );
    }

    if let Some(h) = normalize_host(&host) {
        assert!(!h.is_empty() && h.len() <= MAX_HOST_BYTES);
        assert!(
            h.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._:[]".contains(&b)),
            "{host:?} -> {h:?}"
        );
    }

    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let req = RequestView {
        method: "GET",
        scheme: "https",
        host: Some(&host),
        path_and_query: &target,
        user_agent: Some(ua),
        ..RequestView::default()
    };
    let plan = POLICY.plan(&req, now);
    // The pre-URL check and the plan agree on the authority (an empty line: no `Host`).
    let headers: Vec<(String, Vec<u8>)> = if host.is_empty() {
        Vec::new()
    } else {
        vec![("host".to_owned(), host.as_bytes().to_vec())]
    };
    let checked = cachet_http::authority::authority(headers.as_slice());
    let planned_refusal = matches!(
        &plan.decision,
        Decision::Synth(Synth::BadRequest { reason }) if *reason == cachet_http::authority::MALFORMED
    );
    assert_eq!(checked.is_err(), planned_refusal, "{host:?}");
    let planned_target = plan.target.to_string();
    let again = POLICY.plan(
        &RequestView {
            path_and_query: &planned_target,
            ..req
        },
        now,
    );
    assert_eq!(
        plan.decision, again.decision,
        "{target:?} -> {planned_target:?}"
    );
    assert_eq!(
        plan.cache_key, again.cache_key,
        "{target:?} -> {planned_target:?}"
    );
    assert_eq!(plan.target, again.target);
});
