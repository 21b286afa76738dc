//! `Normalizer::normalize` on arbitrary query text under twelve configurations (sort
//! mode × dedupe × allowlist, with small bounds on some), checked against a plain
//! reference model (split on `&`, drop empty parameters and empty names, filter with
//! `Normalizer::keeps`, stable sort, dedupe, join), plus: idempotence with a borrowed
//! second result, and the bound errors exactly when the bounds are exceeded.
#![no_main]

use std::borrow::Cow;
use std::sync::LazyLock;

use cachet_query::{Normalizer, QueryConfig, QueryError, SortMode};
use libfuzzer_sys::fuzz_target;

static CONFIGS: LazyLock<Vec<(QueryConfig, Normalizer)>> = LazyLock::new(|| {
    let mut out = Vec::new();
    for sort in [SortMode::Name, SortMode::Param, SortMode::None] {
        for dedupe in [false, true] {
            for narrow in [false, true] {
                let config = QueryConfig {
                    sort,
                    dedupe,
                    keep: if narrow {
                        vec![
                            "a*".into(),
                            "?".into(),
                            "q".into(),
                            "p\\*".into(),
                            "*x*y".into(),
                        ]
                    } else {
                        Vec::new()
                    },
                    // Small bounds on half the configurations, so both errors are reached.
                    max_params: if narrow { 30 } else { 256 },
                    max_bytes: if narrow { 200 } else { 8192 },
                    ..QueryConfig::default()
                };
                let n = Normalizer::new(&config).expect("fuzz config compiles");
                out.push((config, n));
            }
        }
    }
    out
});

fn name(p: &str) -> &str {
    p.split_once('=').map_or(p, |(n, _)| n)
}

/// The reference model of the documented rules (docs/query.md).
fn reference(c: &QueryConfig, n: &Normalizer, q: &str) -> String {
    let mut params: Vec<&str> = q
        .split('&')
        .filter(|p| !p.is_empty() && !name(p).is_empty())
        .filter(|p| n.keeps(name(p)))
        .collect();
    match c.sort {
        SortMode::Name => params.sort_by(|a, b| name(a).as_bytes().cmp(name(b).as_bytes())),
        SortMode::Param => params.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes())),
        SortMode::None => {}
    }
    if c.dedupe {
        let mut seen = std::collections::HashSet::new();
        params.retain(|p| seen.insert(name(p)));
    }
    params.join("&")
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let (c, n) = &CONFIGS[usize::from(which) % CONFIGS.len()];
    let q = String::from_utf8_lossy(rest);
    match n.normalize(&q) {
        Ok(out) => {
            assert!(q.len() <= c.max_bytes);
            let want = reference(c, n, &q);
            assert_eq!(out, want, "query {q:?} config {c:?}");
            // Borrowed exactly when the output is a slice of the input is not promised,
            // but an input already normal must come back borrowed and unchanged.
            let again = n.normalize(&out).expect("output within bounds");
            assert!(
                matches!(again, Cow::Borrowed(s) if s == out),
                "not idempotent: {q:?} -> {out:?} -> {again:?}"
            );
            if out == q {
                assert!(
                    matches!(out, Cow::Borrowed(_)),
                    "normal input reallocated: {q:?}"
                );
            }
        }
        Err(QueryError::TooLong { len, limit }) => {
            assert_eq!((len, limit), (q.len(), c.max_bytes));
            assert!(len > limit);
        }
        Err(QueryError::TooManyParams { count, limit }) => {
            assert!(q.len() <= c.max_bytes);
            assert_eq!(limit, c.max_params);
            assert_eq!(count, q.split('&').filter(|p| !p.is_empty()).count());
            assert!(count > limit);
        }
        Err(e) => panic!("unexpected error {e:?} for {q:?}"),
    }
});
