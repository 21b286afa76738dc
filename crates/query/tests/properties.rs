//! Property tests of the normalizer against a simple reference model and its invariants.

use std::borrow::Cow;
use std::collections::HashSet;

use cachet_query::{
    DEFAULT_REMOVE, MAX_PARAMS_CAP, MAX_QUERY_BYTES_CAP, Normalizer, QueryConfig, QueryError,
    SortMode,
};
use proptest::prelude::*;

/// Reference glob matcher (`*`, `?`; patterns here have no `\`), written as plainly as
/// possible: recursive and exponential, fine for short names.
fn glob(p: &[u8], s: &[u8]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => (0..=s.len()).any(|i| glob(rest, &s[i..])),
        Some((b'?', rest)) => !s.is_empty() && glob(rest, &s[1..]),
        Some((c, rest)) => s.first() == Some(c) && glob(rest, &s[1..]),
    }
}

fn name(param: &str) -> &str {
    param.split_once('=').map_or(param, |(n, _)| n)
}

fn any_match(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| glob(p.as_bytes(), name.as_bytes()))
}

/// The documented semantics, implemented the obvious (allocating) way.
fn model(c: &QueryConfig, query: &str) -> String {
    let mut params: Vec<&str> = query
        .split('&')
        .filter(|p| !p.is_empty() && !name(p).is_empty())
        .filter(|p| c.keep.is_empty() || any_match(&c.keep, name(p)))
        .filter(|p| !any_match(&c.remove, name(p)))
        .collect();
    match c.sort {
        SortMode::Name => params.sort_by(|a, b| name(a).as_bytes().cmp(name(b).as_bytes())),
        SortMode::Param => params.sort_unstable(),
        SortMode::None => {}
    }
    if c.dedupe {
        let mut seen = HashSet::new();
        params.retain(|p| seen.insert(name(p)));
    }
    params.join("&")
}

fn name_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "a",
            "b",
            "a!",
            "a-b",
            "a0",
            "page",
            "id",
            "q",
            "steps[]",
            "%61",
            "utm_source",
            "utm_",
            "_ga",
            "_gaid",
            "fbclid",
            "gclid",
            "",
            "Z",
            "é",
            "x_id",
            "xy",
        ])
        .prop_map(str::to_owned),
        "[a-z_%!?*-]{0,4}",
    ]
}

fn param_strategy() -> impl Strategy<Value = String> {
    (
        name_strategy(),
        prop::option::of("[a-z0-9=+%!]{0,3}"),
        prop::bool::weighted(0.1),
    )
        .prop_map(|(n, v, empty)| match (empty, v) {
            (true, _) => String::new(),
            (false, Some(v)) => format!("{n}={v}"),
            (false, None) => n,
        })
}

fn params_strategy() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(param_strategy(), 0..14)
}

fn config_strategy() -> impl Strategy<Value = QueryConfig> {
    (
        prop::sample::select(vec![SortMode::Name, SortMode::Param, SortMode::None]),
        any::<bool>(),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.3),
    )
        .prop_map(|(sort, dedupe, allowlist, extra_remove)| {
            let mut c = QueryConfig {
                sort,
                dedupe,
                ..QueryConfig::default()
            };
            if allowlist {
                c.keep = ["a*", "page", "q", "%61", "?", "x_id"]
                    .map(String::from)
                    .to_vec();
            }
            if extra_remove {
                c.remove.extend(["*_id", "x?", "a?b"].map(String::from));
            }
            c
        })
}

fn normalizer(c: &QueryConfig) -> Normalizer {
    Normalizer::new(c).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn matches_reference_model(c in config_strategy(), params in params_strategy()) {
        let q = params.join("&");
        let n = normalizer(&c);
        prop_assert_eq!(n.normalize(&q).unwrap(), model(&c, &q));
    }

    #[test]
    fn matches_reference_model_on_long_queries(
        c in config_strategy(),
        params in prop::collection::vec(param_strategy(), 20..80),
    ) {
        // Beyond the inline buffer and the insertion-sort threshold.
        let q = params.join("&");
        let n = normalizer(&c);
        let out = n.normalize(&q).unwrap();
        prop_assert_eq!(&out, &model(&c, &q));
        prop_assert!(matches!(n.normalize(&out).unwrap(), Cow::Borrowed(_)));
    }

    #[test]
    fn idempotent_and_borrowed_once_normal(c in config_strategy(), params in params_strategy()) {
        let q = params.join("&");
        let n = normalizer(&c);
        let once = n.normalize(&q).unwrap();
        let twice = n.normalize(&once).unwrap();
        prop_assert!(matches!(twice, Cow::Borrowed(_)), "second pass allocated for {:?}", once);
        prop_assert_eq!(&twice, &once);
        if once == q {
            prop_assert!(matches!(once, Cow::Borrowed(_)), "normal input {:?} not borrowed", q);
        }
        let target = format!("/p?{q}");
        let t = n.normalize_target(&target).unwrap();
        prop_assert!(matches!(n.normalize_target(&t).unwrap(), Cow::Borrowed(_)));
        let expected = if once.is_empty() { "/p".to_owned() } else { format!("/p?{once}") };
        prop_assert_eq!(t, expected);
    }

    #[test]
    fn any_received_order_sorts_like_the_model(
        (params, shuffled) in params_strategy().prop_flat_map(|p| (Just(p.clone()), Just(p).prop_shuffle())),
        c in config_strategy(),
    ) {
        // Sorted, reversed and shuffled received orders: the paths that skip the sort,
        // reverse, rank-sort (distinct key heads) and insertion-sort (ties).
        let n = normalizer(&c);
        let mut sorted = params.clone();
        sorted.sort();
        let mut reversed = sorted.clone();
        reversed.reverse();
        for p in [&params, &shuffled, &sorted, &reversed] {
            let q = p.join("&");
            prop_assert_eq!(n.normalize(&q).unwrap(), model(&c, &q), "{:?}", q);
        }
    }

    #[test]
    fn long_normal_queries_broken_late_match_the_model(
        c in config_strategy(),
        params in prop::collection::vec(param_strategy(), 30..90),
        tail in param_strategy(),
    ) {
        // A normal query past the inline buffer (decided without allocating), then the
        // same with one parameter appended (rescanned, spilling to the heap).
        let n = normalizer(&c);
        let normal = model(&c, &params.join("&"));
        prop_assert!(matches!(n.normalize(&normal).unwrap(), Cow::Borrowed(q) if q == normal));
        let q = format!("{normal}&{tail}");
        prop_assert_eq!(n.normalize(&q).unwrap(), model(&c, &q));
    }

    #[test]
    fn param_sort_ignores_received_order(
        (params, shuffled) in params_strategy().prop_flat_map(|p| (Just(p.clone()), Just(p).prop_shuffle())),
        dedupe in any::<bool>(),
    ) {
        let c = QueryConfig { sort: SortMode::Param, dedupe, ..QueryConfig::default() };
        let n = normalizer(&c);
        let (a, b) = (params.join("&"), shuffled.join("&"));
        prop_assert_eq!(n.normalize(&a).unwrap(), n.normalize(&b).unwrap());
    }

    #[test]
    fn output_is_sub_multiset_without_removed_names(c in config_strategy(), params in params_strategy()) {
        let q = params.join("&");
        let out = normalizer(&c).normalize(&q).unwrap();
        let mut pool: Vec<&str> = q.split('&').filter(|p| !p.is_empty()).collect();
        if !out.is_empty() {
            for p in out.split('&') {
                prop_assert!(!p.is_empty(), "empty param in {:?}", out);
                prop_assert!(!name(p).is_empty(), "empty name in {:?}", out);
                let i = pool.iter().position(|x| *x == p);
                prop_assert!(i.is_some(), "{:?} not in input {:?}", p, q);
                pool.swap_remove(i.unwrap());
                prop_assert!(!any_match(&c.remove, name(p)), "removed name {:?} survived", p);
                prop_assert!(c.keep.is_empty() || any_match(&c.keep, name(p)));
            }
        }
    }

    #[test]
    fn name_sort_orders_names_and_keeps_same_name_order(params in params_strategy()) {
        let c = QueryConfig { remove: vec![], ..QueryConfig::default() };
        let q = params.join("&");
        let out = normalizer(&c).normalize(&q).unwrap().into_owned();
        let outs: Vec<&str> = out.split('&').filter(|p| !p.is_empty()).collect();
        prop_assert!(outs.windows(2).all(|w| name(w[0]).as_bytes() <= name(w[1]).as_bytes()));
        for p in &outs {
            let n = name(p);
            let before: Vec<&str> = q.split('&').filter(|x| !x.is_empty() && name(x) == n).collect();
            let after: Vec<&str> = outs.iter().copied().filter(|x| name(x) == n).collect();
            prop_assert_eq!(before, after);
        }
    }

    #[test]
    fn default_remove_list_never_survives(
        keep in params_strategy(),
        tracking in prop::collection::vec(
            (prop::sample::select(DEFAULT_REMOVE.to_vec()), "[a-z]{0,3}", "[a-z0-9]{0,4}"),
            0..6,
        ),
    ) {
        let mut all = keep;
        for (pattern, fill, value) in tracking {
            all.push(format!("{}={value}", pattern.replace('*', &fill)));
        }
        let q = all.join("&");
        let out = normalizer(&QueryConfig::default()).normalize(&q).unwrap();
        for p in out.split('&').filter(|p| !p.is_empty()) {
            prop_assert!(!DEFAULT_REMOVE.iter().any(|r| glob(r.as_bytes(), name(p).as_bytes())), "{}", p);
        }
    }

    #[test]
    fn never_panics_on_arbitrary_strings(c in config_strategy(), s in any::<String>()) {
        let n = normalizer(&c);
        if let Ok(out) = n.normalize(&s) {
            prop_assert_eq!(n.normalize(&out).unwrap(), out.clone());
        }
        let _ = n.normalize_target(&s);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn never_panics_on_huge_strings(
        // A random piece repeated: cheap to generate, up to ~120,000 chars.
        piece in prop::collection::vec(
            prop_oneof![Just('&'), Just('='), Just('a'), Just('b'), any::<char>()],
            1..200,
        ),
        repeat in 1usize..600,
        c in config_strategy(),
        big_limits in any::<bool>(),
    ) {
        let s: String = piece.iter().collect::<String>().repeat(repeat);
        let c = if big_limits {
            QueryConfig { max_params: MAX_PARAMS_CAP, max_bytes: MAX_QUERY_BYTES_CAP, ..c }
        } else {
            c
        };
        let n = normalizer(&c);
        match n.normalize(&s) {
            Ok(out) => {
                prop_assert!(s.len() <= c.max_bytes);
                prop_assert_eq!(n.normalize(&out).unwrap(), out.clone());
            }
            Err(QueryError::TooLong { len, limit }) => {
                prop_assert_eq!((len, limit), (s.len(), c.max_bytes));
            }
            Err(QueryError::TooManyParams { count, limit }) => {
                prop_assert_eq!(limit, c.max_params);
                prop_assert!(count > limit);
            }
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }
}

/// Paths built from pieces that exercise every rule: escapes of unreserved and reserved
/// bytes in both cases, broken escapes, dot segments (plain and encoded), empty segments.
fn path_strategy() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("a".to_owned()),
        Just("%61".to_owned()),
        Just("%2f".to_owned()),
        Just("%2F".to_owned()),
        Just("%2e".to_owned()),
        Just("%7E".to_owned()),
        Just("%c3%a9".to_owned()),
        Just("%".to_owned()),
        Just("%g1".to_owned()),
        Just(".".to_owned()),
        Just("..".to_owned()),
        Just("~x".to_owned()),
        Just("é".to_owned()),
        Just(String::new()),
    ];
    prop::collection::vec(piece, 0..8).prop_map(|segs| format!("/{}", segs.join("/")))
}

/// Decodes every valid triplet: the bytes a path stands for, whatever its spelling.
fn decode_all(p: &str) -> Vec<u8> {
    let b = p.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = p
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn path_normalization_is_idempotent(p in path_strategy()) {
        let once = cachet_query::normalize_path(&p).into_owned();
        prop_assert_eq!(cachet_query::normalize_path(&once), once.as_str());
    }

    #[test]
    fn path_normalization_never_changes_meaning(p in path_strategy()) {
        // No dot segments left: the normalized path decodes to the same bytes as the
        // original with its (decoded) dot segments resolved, and every remaining escape
        // is of a reserved byte, upper-case.
        let n = cachet_query::normalize_path(&p).into_owned();
        prop_assert!(n.starts_with('/'));
        prop_assert!(!n.split('/').any(|s| s == "." || s == ".."), "{}", n);
        // Dot segments of the original, by their decoded spelling, resolved in order;
        // encoded slashes stay inside their segment.
        let raw: Vec<&str> = p.split('/').skip(1).collect();
        let mut want: Vec<Vec<u8>> = Vec::new();
        let mut dir = false;
        for (i, s) in raw.iter().enumerate() {
            let d = decode_all(s);
            let last = i + 1 == raw.len();
            if d == b"." { dir = last; continue; }
            if d == b".." { want.pop(); dir = last; continue; }
            want.push(d);
            dir = false;
        }
        let mut expect = Vec::new();
        for s in &want { expect.push(b'/'); expect.extend_from_slice(s); }
        if dir || expect.is_empty() { expect.push(b'/'); }
        prop_assert_eq!(decode_all(&n), expect, "{} → {}", p, n);
        for (i, _) in n.match_indices('%') {
            if let Some(h) = n.get(i + 1..i + 3).filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit())) {
                let v = u8::from_str_radix(h, 16).unwrap_or(0);
                prop_assert!(!(v.is_ascii_alphanumeric() || b"-._~".contains(&v)), "{}", n);
                prop_assert_eq!(h.to_ascii_uppercase(), h.to_owned());
            }
        }
    }
}
