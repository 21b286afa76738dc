//! Behaviour of the public API on concrete queries: removal, sorting, dedupe, allowlist, bounds.

use std::borrow::Cow;

use cachet_query::{
    DEFAULT_REMOVE, MAX_PARAMS, MAX_PARAMS_CAP, MAX_QUERY_BYTES, MAX_QUERY_BYTES_CAP, Normalizer,
    QueryConfig, QueryError, SortMode,
};

fn default() -> Normalizer {
    Normalizer::new(&QueryConfig::default()).unwrap()
}

fn with(config: &QueryConfig) -> Normalizer {
    Normalizer::new(config).unwrap()
}

fn norm(n: &Normalizer, q: &str) -> String {
    n.normalize(q).unwrap().into_owned()
}

#[test]
fn tracking_params_in_any_order_give_one_cache_form() {
    let n = default();
    let forms = [
        "page=2&id=7",
        "id=7&page=2",
        "utm_source=twitter&page=2&utm_medium=social&id=7",
        "fbclid=IwAR0abc&id=7&page=2",
        "id=7&__twitter_impression=true&page=2",
        "_ga=2.1234.5678&page=2&gclid=Cj0K&id=7&utm_campaign=spring",
        "msclkid=x&yclid=y&_gl=1*abc&page=2&id=7&mc_cid=1&mc_eid=2&_hsenc=p2&_hsmi=9",
        "igshid=a&dclid=b&wbraid=c&gbraid=d&ttclid=e&twclid=f&id=7&page=2",
        "&page=2&&id=7&",
    ];
    for q in forms {
        assert_eq!(norm(&n, q), "id=7&page=2", "{q}");
    }
}

#[test]
fn every_default_remove_pattern_is_removed() {
    let n = default();
    for p in DEFAULT_REMOVE {
        let name = p.replace('*', "campaign");
        assert!(!n.keeps(&name), "{name}");
        assert_eq!(norm(&n, &format!("{name}=1&q=x")), "q=x", "{name}");
    }
    // Near misses survive.
    for name in [
        "utm",
        "UTM_source",
        "xutm_source",
        "_gaid",
        "gclid2",
        "fbclid_",
    ] {
        assert!(n.keeps(name), "{name}");
    }
}

#[test]
fn arrays_keep_their_order_under_name_sort() {
    let n = default();
    assert_eq!(
        norm(&n, "steps[]=b&z=1&steps[]=a&steps[]=c"),
        "steps[]=b&steps[]=a&steps[]=c&z=1"
    );
    assert_eq!(norm(&n, "tag=z&tag=a&id=1"), "id=1&tag=z&tag=a");
    // Under param sort the values are ordered too (vmod-querystring's behaviour).
    let p = with(&QueryConfig {
        sort: SortMode::Param,
        ..QueryConfig::default()
    });
    assert_eq!(
        norm(&p, "steps[]=b&z=1&steps[]=a&steps[]=c"),
        "steps[]=a&steps[]=b&steps[]=c&z=1"
    );
}

#[test]
fn name_sort_compares_names_not_whole_params() {
    let n = default();
    // "a=2" vs "a-b=1": by name "a" < "a-b"; by whole param "a-b=1" < "a=2" ('-' < '=').
    assert_eq!(norm(&n, "a-b=1&a=2"), "a=2&a-b=1");
    let p = with(&QueryConfig {
        sort: SortMode::Param,
        ..QueryConfig::default()
    });
    assert_eq!(norm(&p, "a=2&a-b=1"), "a-b=1&a=2");
}

#[test]
fn none_sort_keeps_received_order() {
    let n = with(&QueryConfig {
        sort: SortMode::None,
        ..QueryConfig::default()
    });
    assert_eq!(norm(&n, "z=1&utm_source=x&a=2&&m"), "z=1&a=2&m");
    assert!(matches!(n.normalize("z=1&a=2").unwrap(), Cow::Borrowed(_)));
}

#[test]
fn dedupe_keeps_first_of_each_name() {
    let n = with(&QueryConfig {
        dedupe: true,
        ..QueryConfig::default()
    });
    assert_eq!(norm(&n, "page=3&id=1&page=1&page=2"), "id=1&page=3");
    // `a` and `a=` are different params with the same name.
    assert_eq!(norm(&n, "a=&a&a=1"), "a=");
    let p = with(&QueryConfig {
        dedupe: true,
        sort: SortMode::Param,
        ..QueryConfig::default()
    });
    // Smallest `name=value` wins, whatever the received order.
    assert_eq!(norm(&p, "page=3&id=1&page=1&page=2"), "id=1&page=1");
    assert_eq!(norm(&p, "page=2&page=1&page=3&id=1"), "id=1&page=1");
    // Equal names need not be adjacent under param sort: "a" < "a!" < "a=1".
    assert_eq!(norm(&p, "a=1&a!&a"), "a&a!");
    assert!(matches!(p.normalize("a&a!").unwrap(), Cow::Borrowed(_)));
    let o = with(&QueryConfig {
        dedupe: true,
        sort: SortMode::None,
        ..QueryConfig::default()
    });
    assert_eq!(norm(&o, "b=1&a=1&b=2&c&a=2"), "b=1&a=1&c");
}

#[test]
fn without_dedupe_repeated_names_and_params_survive() {
    let n = default();
    assert_eq!(norm(&n, "a=1&a=1&a"), "a=1&a=1&a");
    assert!(matches!(
        n.normalize("a=1&a=1&a").unwrap(),
        Cow::Borrowed(_)
    ));
}

#[test]
fn allowlist_keeps_only_matching_names_and_remove_still_applies() {
    let n = with(&QueryConfig {
        keep: vec![
            "q".into(),
            "page".into(),
            "filter_*".into(),
            "utm_id".into(),
        ],
        ..QueryConfig::default()
    });
    assert_eq!(
        norm(
            &n,
            "session=abc&q=rust&filter_lang=ja&utm_id=5&page=2&filter_=x&ref=top"
        ),
        "filter_=x&filter_lang=ja&page=2&q=rust"
    );
    assert!(n.keeps("filter_x"));
    assert!(!n.keeps("utm_id"), "remove applies on top of keep");
    assert!(!n.keeps("session"));
    let keep_all_names = with(&QueryConfig {
        keep: vec!["*".into()],
        remove: vec![],
        ..QueryConfig::default()
    });
    // `*` matches every name, but an empty name is dropped all the same.
    assert_eq!(norm(&keep_all_names, "b&=v&a"), "a&b");
    assert!(!keep_all_names.keeps(""));
}

#[test]
fn empty_params_and_empty_names() {
    let n = default();
    for (q, want) in [
        ("", ""),
        ("&", ""),
        ("&&&", ""),
        ("a&&b", "a&b"),
        ("&b&a&", "a&b"),
        // Empty name (with or without a value): dropped, as vmod-querystring does.
        ("=v&a", "a"),
        ("a&=", "a"),
        ("=x", ""),
        ("=&=x&&=", ""),
        ("b=1&=x&a=2", "a=2&b=1"),
        ("a=1&=x", "a=1"),
        // Only the name must be empty: a value starting with `=` is a value.
        ("a==x&=", "a==x"),
        ("utm_source=x", ""),
    ] {
        assert_eq!(norm(&n, q), want, "{q:?}");
    }
}

#[test]
fn no_decoding_ever() {
    let n = default();
    // %61 is "a" percent-encoded, but names are raw bytes: different names, '%' < 'a'.
    assert_eq!(norm(&n, "a=1&%61=2"), "%61=2&a=1");
    // A percent-encoded tracking name is not recognised (we never decode).
    assert_eq!(norm(&n, "%75tm_source=x"), "%75tm_source=x");
    // '+' and "%20" are different bytes: both values survive and order by bytes.
    assert_eq!(norm(&n, "q=a%20b&q=a+b"), "q=a%20b&q=a+b");
    let p = with(&QueryConfig {
        sort: SortMode::Param,
        dedupe: true,
        ..QueryConfig::default()
    });
    assert_eq!(norm(&p, "q=a+b&q=a%20b"), "q=a%20b");
    // Case matters.
    assert_eq!(norm(&n, "UTM_SOURCE=x&Gclid=y"), "Gclid=y&UTM_SOURCE=x");
    // Values are opaque: '=' inside a value and non-ASCII bytes are kept as received.
    assert_eq!(norm(&n, "x=a=b&é=ü"), "x=a=b&é=ü");
}

#[test]
fn already_normal_input_is_borrowed() {
    let n = default();
    for q in ["", "a", "a=1", "a=1&b=2", "a&a=", "id=7&page=2&q=caf%C3%A9"] {
        let out = n.normalize(q).unwrap();
        assert!(
            matches!(out, Cow::Borrowed(s) if std::ptr::eq(s, q)),
            "{q:?}"
        );
    }
    for q in ["b&a", "a&&b", "utm_source=1&a"] {
        let once = n.normalize(q).unwrap();
        let twice = n.normalize(&once).unwrap();
        assert!(matches!(twice, Cow::Borrowed(_)), "{q:?}");
        assert_eq!(once, twice);
    }
}

#[test]
fn target_form() {
    let n = default();
    for (t, want, borrowed) in [
        ("/", "/", true),
        ("/entry/1", "/entry/1", true),
        ("/entry/1?", "/entry/1", true),
        ("/entry/1?&&", "/entry/1", true),
        ("/entry/1?utm_source=x", "/entry/1", true),
        ("/entry/1?a=1&b=2", "/entry/1?a=1&b=2", true),
        ("/entry/1?a=1&b=2&fbclid=z", "/entry/1?a=1&b=2", false),
        ("/entry/1?b=2&a=1", "/entry/1?a=1&b=2", false),
        // Only the first '?' starts the query; later ones are query bytes.
        ("/s?q=what?&a=1", "/s?a=1&q=what?", false),
        // The path is never touched, even if it looks like a query.
        ("/utm_source=x&b&a?z&y", "/utm_source=x&b&a?y&z", false),
        ("?b&a", "?a&b", false),
        ("?", "", true),
    ] {
        let got = n.normalize_target(t).unwrap();
        assert_eq!(got, want, "{t:?}");
        assert_eq!(matches!(got, Cow::Borrowed(_)), borrowed, "{t:?}");
    }
}

#[test]
fn limits_fail_closed_with_errors() {
    let n = default();
    let long = format!("q={}", "x".repeat(MAX_QUERY_BYTES - 2));
    assert_eq!(long.len(), MAX_QUERY_BYTES);
    assert!(n.normalize(&long).is_ok());
    let too_long = format!("{long}y");
    assert_eq!(
        n.normalize(&too_long),
        Err(QueryError::TooLong {
            len: MAX_QUERY_BYTES + 1,
            limit: MAX_QUERY_BYTES
        })
    );
    // The path does not count towards the query limit.
    assert!(
        n.normalize_target(&format!("/{}?{long}", "p".repeat(10_000)))
            .is_ok()
    );
    assert!(matches!(
        n.normalize_target(&format!("/p?{too_long}")),
        Err(QueryError::TooLong { .. })
    ));

    let params = |k: usize| (0..k).map(|i| format!("p{i:03}")).collect::<Vec<_>>();
    let at_limit = params(MAX_PARAMS).join("&");
    assert!(matches!(n.normalize(&at_limit), Ok(Cow::Borrowed(_))));
    let mut over = params(MAX_PARAMS + 1);
    assert!(n.normalize(&over.join("&")).is_err());
    // Counted before removal and whether or not the query is already normal.
    over.reverse();
    over.push("utm_source=1".into());
    over.push(String::new());
    assert_eq!(
        n.normalize(&over.join("&")),
        Err(QueryError::TooManyParams {
            count: MAX_PARAMS + 2,
            limit: MAX_PARAMS
        })
    );
    // Empty params do not count.
    let with_empties = format!("{at_limit}&&&&");
    assert!(n.normalize(&with_empties).is_ok());
}

#[test]
fn limits_are_configurable_within_caps() {
    let n = with(&QueryConfig {
        max_params: 2,
        max_bytes: 10,
        ..QueryConfig::default()
    });
    assert_eq!(norm(&n, "b&a"), "a&b");
    assert_eq!(
        n.normalize("c&b&a"),
        Err(QueryError::TooManyParams { count: 3, limit: 2 })
    );
    assert_eq!(norm(&n, "a=12345678"), "a=12345678");
    assert_eq!(
        n.normalize("a=123456789"),
        Err(QueryError::TooLong { len: 11, limit: 10 })
    );
    let big = with(&QueryConfig {
        max_params: MAX_PARAMS_CAP,
        max_bytes: MAX_QUERY_BYTES_CAP,
        dedupe: true,
        sort: SortMode::Param,
        ..QueryConfig::default()
    });
    let q: Vec<String> = (0..MAX_PARAMS_CAP).map(|i| format!("k{i:04}=v")).collect();
    let q = q.join("&");
    assert!(matches!(big.normalize(&q), Ok(Cow::Borrowed(_))));
    let dup = format!("{}&k0000=w", &q[..q.len() - 8]);
    let out = big.normalize(&dup).unwrap();
    assert_eq!(out.matches("k0000").count(), 1);
    for (field, config) in [
        (
            "max_params",
            QueryConfig {
                max_params: MAX_PARAMS_CAP + 1,
                ..QueryConfig::default()
            },
        ),
        (
            "max_bytes",
            QueryConfig {
                max_bytes: 0,
                ..QueryConfig::default()
            },
        ),
    ] {
        assert!(
            matches!(Normalizer::new(&config), Err(QueryError::InvalidLimit { field: f, .. }) if f == field)
        );
    }
}

#[test]
fn new_rejects_bad_patterns_with_the_pattern_named() {
    let bad = QueryConfig {
        remove: vec!["utm_*".into(), "a=b".into()],
        ..QueryConfig::default()
    };
    match Normalizer::new(&bad) {
        Err(QueryError::InvalidPattern { pattern, reason }) => {
            assert_eq!(pattern, "a=b");
            assert!(reason.contains('='), "{reason}");
        }
        other => panic!("expected InvalidPattern, got {other:?}"),
    }
    assert_eq!(bad.validate()[0].0, "remove[1]");
    let e = Normalizer::new(&QueryConfig {
        keep: vec![String::new()],
        ..QueryConfig::default()
    })
    .unwrap_err();
    assert!(
        e.to_string().starts_with("invalid name pattern \"\""),
        "{e}"
    );
}

#[test]
fn custom_globs() {
    let n = with(&QueryConfig {
        remove: vec!["*_ref".into(), "x?".into(), "sess\\*".into()],
        ..QueryConfig::default()
    });
    assert_eq!(
        norm(
            &n,
            "home_ref=1&xy=2&x=3&xyz=4&sess*=5&sessid=6&utm_source=7"
        ),
        "sessid=6&utm_source=7&x=3&xyz=4"
    );
}

#[test]
fn normalizer_is_send_sync_and_shareable() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Normalizer>();
    let n = default();
    let shared: &Normalizer = &n;
    assert_eq!(norm(shared, "b&a"), "a&b");
}
