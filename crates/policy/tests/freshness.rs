//! RFC 9111 §4.2 freshness, RFC 9213 CDN-Cache-Control, RFC 5861 and the stale rules.

use std::time::{Duration, SystemTime};

use cachet_policy::{NoStore, Policy, RequestView, ResponseView, Storability, Store};

const TOML: &str = r#"
[[routes]]
name = "heuristic"
path_prefix = "/h/"
ttl = "0s"
grace = "0s"
keep = "1h"
heuristic_fraction = 0.1
heuristic_max = "1h"
gzip_level = 1

[[routes]]
name = "override"
path_prefix = "/o/"
ttl = "1h"
ttl_override = true
grace = "1h"
keep = "1h"

[[routes]]
name = "other"
path_prefix = "/"
ttl = "0s"
grace = "1h"
keep = "1h"
"#;

/// 2023-11-14T22:13:20Z.
fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

const DATE: &str = "Tue, 14 Nov 2023 22:13:20 GMT";

fn store(path: &str, resp: &ResponseView<'_>) -> Storability {
    let p = Policy::from_toml(TOML).expect("valid");
    let req = RequestView {
        method: "GET",
        scheme: "http",
        host: Some("a.example"),
        path_and_query: path,
        ..RequestView::default()
    };
    let plan = p.plan(&req, now());
    p.storability(&plan, resp)
}

fn stored(path: &str, resp: &ResponseView<'_>) -> Store {
    match store(path, resp) {
        Storability::Store(s) => s,
        other @ Storability::DontStore(_) => panic!("{path}: {other:?}"),
    }
}

fn view(cc: Option<&'static str>) -> ResponseView<'static> {
    ResponseView {
        status: 200,
        cache_control: cc,
        date: Some(DATE),
        ..ResponseView::default()
    }
}

#[test]
fn expires_counts_from_date_and_an_invalid_one_is_stale() {
    let mut r = view(None);
    r.expires = Some("Tue, 14 Nov 2023 22:18:20 GMT");
    let s = stored("/x", &r);
    assert_eq!(
        (s.ttl, s.grace),
        (Duration::from_secs(300), Duration::from_secs(3600))
    );
    r.expires = Some("0");
    assert_eq!(
        stored("/x", &r).ttl,
        Duration::ZERO,
        "invalid Expires: already stale"
    );
    // max-age wins over Expires.
    let mut r = view(Some("max-age=60"));
    r.expires = Some("Tue, 14 Nov 2023 22:18:20 GMT");
    assert_eq!(stored("/x", &r).ttl, Duration::from_secs(60));
}

#[test]
fn the_upstream_age_counts_and_the_ttl_is_net_of_it() {
    let mut r = view(Some("max-age=600"));
    r.age = Some("100");
    let s = stored("/x", &r);
    assert_eq!(
        (s.ttl, s.initial_age),
        (Duration::from_secs(500), Duration::from_secs(100))
    );
    // An object older than its lifetime arrives stale, its grace shortened by the excess.
    r.age = Some("700");
    let s = stored("/x", &r);
    assert_eq!(
        (s.ttl, s.grace),
        (Duration::ZERO, Duration::from_secs(3500))
    );
    // Apparent age from Date when larger than Age.
    let mut r = view(Some("max-age=600"));
    r.date = Some("Tue, 14 Nov 2023 22:11:20 GMT");
    assert_eq!(stored("/x", &r).initial_age, Duration::from_secs(120));
    r.age = Some("garbage");
    assert_eq!(stored("/x", &r).initial_age, Duration::from_secs(120));
}

#[test]
fn precedence_surrogate_then_cdn_cache_control_then_cache_control() {
    let mut r = view(Some("max-age=10, s-maxage=20"));
    assert_eq!(stored("/x", &r).ttl, Duration::from_secs(20));
    r.cdn_cache_control = Some("max-age=30");
    assert_eq!(
        stored("/x", &r).ttl,
        Duration::from_secs(30),
        "CDN-Cache-Control wins"
    );
    r.surrogate_control = Some("max-age=40");
    assert_eq!(
        stored("/x", &r).ttl,
        Duration::from_secs(40),
        "Surrogate-Control wins"
    );
    // CDN-Cache-Control replaces Cache-Control, including its stale rules...
    let mut r = view(Some("s-maxage=20, must-revalidate"));
    r.cdn_cache_control = Some("max-age=30");
    assert_eq!(stored("/x", &r).grace, Duration::from_secs(3600));
    // ...but never Cache-Control: private.
    let mut r = view(Some("private"));
    r.cdn_cache_control = Some("max-age=30");
    assert_eq!(store("/x", &r), Storability::DontStore(NoStore::Private));
}

#[test]
fn what_forbids_stale_serving() {
    for cc in [
        "max-age=60, must-revalidate",
        "max-age=60, proxy-revalidate",
        "s-maxage=60",
    ] {
        let s = stored("/x", &view(Some(cc)));
        assert_eq!(
            (s.ttl, s.grace),
            (Duration::from_secs(60), Duration::ZERO),
            "{cc}"
        );
    }
    // The origin's own stale-while-revalidate still applies.
    let s = stored("/x", &view(Some("s-maxage=60, stale-while-revalidate=30")));
    assert_eq!(s.grace, Duration::from_secs(30));
    // CDN-Cache-Control: no-cache → stored, revalidated before every reuse.
    let mut r = view(None);
    r.cdn_cache_control = Some("no-cache");
    r.has_validator = true;
    let s = stored("/x", &r);
    assert_eq!(
        (s.ttl, s.grace, s.keep),
        (Duration::ZERO, Duration::ZERO, Duration::from_secs(3600))
    );
    // Without a validator there is nothing to revalidate with: not stored.
    r.has_validator = false;
    assert_eq!(store("/x", &r), Storability::DontStore(NoStore::ZeroTtl));
    // stale-if-error is carried.
    let s = stored("/x", &view(Some("max-age=1, stale-if-error=86400")));
    assert_eq!(s.stale_if_error, Duration::from_secs(86_400));
}

#[test]
fn no_cache_with_fields_names_fields_not_to_store() {
    let s = stored(
        "/x",
        &view(Some("max-age=60, no-cache=\"Set-Cookie2, X-Private\"")),
    );
    assert_eq!(
        s.ttl,
        Duration::from_secs(60),
        "qualified no-cache is not a zero TTL"
    );
    assert_eq!(s.no_cache_fields, ["set-cookie2", "x-private"]);
}

#[test]
fn statuses_need_explicit_freshness_unless_heuristically_cacheable() {
    for status in [302u16, 307, 303, 403] {
        let mut r = view(Some("max-age=60"));
        r.status = status;
        assert_eq!(stored("/x", &r).ttl, Duration::from_secs(60), "{status}");
        let mut r = view(None);
        r.status = status;
        assert_eq!(
            store("/x", &r),
            Storability::DontStore(NoStore::Status),
            "{status}"
        );
    }
    let mut r = view(Some("max-age=60"));
    r.status = 206;
    assert_eq!(store("/x", &r), Storability::DontStore(NoStore::Status));
    // 404/410 are heuristically cacheable: the route's grace alone stores them.
    let mut r = view(None);
    r.status = 410;
    assert_eq!(stored("/x", &r).grace, Duration::from_secs(3600));
}

#[test]
fn heuristic_freshness_is_a_capped_fraction_of_the_last_modified_age() {
    let mut r = view(None);
    r.last_modified = Some("Tue, 14 Nov 2023 21:13:20 GMT"); // 1 h before Date
    assert_eq!(stored("/h/a", &r).ttl, Duration::from_secs(360));
    r.last_modified = Some("Mon, 01 Jan 2001 00:00:00 GMT");
    assert_eq!(stored("/h/a", &r).ttl, Duration::from_secs(3600), "capped");
    // Not for statuses outside RFC 9110 §15.1's list.
    r.status = 302;
    assert_eq!(store("/h/a", &r), Storability::DontStore(NoStore::Status));
    // Off on routes without it.
    let mut r = view(None);
    r.last_modified = Some("Tue, 14 Nov 2023 21:13:20 GMT");
    assert_eq!(stored("/x", &r).ttl, Duration::ZERO);
}

#[test]
fn a_variant_is_stored_only_when_its_fill_sends_the_fields_it_varies_on() {
    // Accept-Language is in the default [origin].fill_fields: its variants are stored.
    let lang = ResponseView {
        vary: Some("Accept-Language"),
        ..view(Some("max-age=60"))
    };
    assert_eq!(stored("/a", &lang).vary_fields, ["accept-language"]);
    // X-Theme is not sent on a fill, so the answer cannot be the variant a client with it
    // would get: never stored.
    let theme = ResponseView {
        vary: Some("Accept-Language, X-Theme"),
        ..view(Some("max-age=60"))
    };
    assert_eq!(store("/a", &theme), Storability::DontStore(NoStore::Vary));
    // Listed in fill_fields, it is stored.
    let p = Policy::from_toml(&format!(
        "{TOML}\n[origin]\nfill_fields = [\"accept-language\", \"X-Theme\"]\n"
    ))
    .expect("valid");
    let req = RequestView {
        method: "GET",
        scheme: "http",
        host: Some("a.example"),
        path_and_query: "/a",
        ..RequestView::default()
    };
    let plan = p.plan(&req, now());
    assert!(matches!(
        p.storability(&plan, &theme),
        Storability::Store(_)
    ));
    // A name that is not a field name is a configuration error with its path.
    let err = Policy::from_toml(&format!("{TOML}\n[origin]\nfill_fields = [\"bad name\"]\n"))
        .expect_err("refused");
    assert!(err.to_string().contains("origin.fill_fields[0]"), "{err}");
}

#[test]
fn the_routes_gzip_level_reaches_the_store_verdict() {
    let css = |path| {
        stored(
            path,
            &ResponseView {
                content_type: Some("text/css"),
                ..view(Some("max-age=60"))
            },
        )
    };
    let (fast, default) = (css("/h/a.css"), css("/a.css"));
    assert!(fast.compress && default.compress);
    assert_eq!((fast.gzip_level, default.gzip_level), (1, 6));
}

/// Issue 27 item 1: directives are read from bytes (non-ASCII bytes arrive as U+FFFD);
/// obs-text inside a quoted-string keeps the rest readable, anything else that cannot be
/// read is never stored.
#[test]
fn unreadable_directives_are_never_stored_and_obs_text_in_quotes_is_read() {
    let r = view(Some("private, max-age=300, ext=\"caf\u{fffd}\""));
    assert_eq!(
        store("/x", &r),
        Storability::DontStore(NoStore::Private),
        "a Latin-1 byte in a quoted argument hides nothing"
    );
    let r = view(Some("max-age=300, ext=\"caf\u{fffd}\""));
    assert_eq!(stored("/x", &r).ttl, Duration::from_secs(300));
    for unreadable in [
        "privat\u{fffd}e, max-age=300",
        "max-age=300, \u{fffd}",
        "max-age=300, ext=\"open",
        "max-age=300\u{1}",
    ] {
        assert_eq!(
            store("/x", &view(Some(unreadable))),
            Storability::DontStore(NoStore::Unreadable),
            "{unreadable:?}"
        );
    }
    let mut r = view(Some("max-age=300"));
    r.cdn_cache_control = Some("max-age=60, \u{fffd}");
    assert_eq!(store("/x", &r), Storability::DontStore(NoStore::Unreadable));
    let mut r = view(Some("max-age=300"));
    r.surrogate_control = Some("max-age=\u{fffd}");
    assert_eq!(store("/x", &r), Storability::DontStore(NoStore::Unreadable));
    assert!(NoStore::Unreadable.is_private());
}

/// RFC 9111 §5.1: an `Age` list counts by its first member.
#[test]
fn an_age_list_counts_by_its_first_member() {
    let mut r = view(Some("max-age=600"));
    r.age = Some("7200, 0");
    assert_eq!(
        store("/a", &r),
        Storability::DontStore(NoStore::ZeroTtl),
        "older than its lifetime"
    );
    r.age = Some("100, 7200");
    assert_eq!(stored("/a", &r).ttl, Duration::from_secs(500));
}

/// RFC 9213 §2.1 (issue 30): a cache that honours `CDN-Cache-Control` uses it instead of
/// `Cache-Control` for storing and freshness; an invalid Structured Field is ignored
/// whole, but what it says never makes a response more shareable (fail closed).
#[test]
fn cdn_cache_control_governs_storing_and_an_invalid_one_is_ignored() {
    let with = |cc: &'static str, cdn: &'static str| {
        let mut r = view(Some(cc));
        r.cdn_cache_control = Some(cdn);
        r
    };
    // Its own no-store and private keep the response out despite Cache-Control.
    assert_eq!(
        store("/x", &with("max-age=300", "no-store")),
        Storability::DontStore(NoStore::NoStore)
    );
    assert_eq!(
        store("/x", &with("max-age=300", "private")),
        Storability::DontStore(NoStore::Private)
    );
    // A fresh max-age of its own wins over Cache-Control: no-store.
    assert_eq!(
        stored("/x", &with("no-store", "max-age=600")).ttl,
        Duration::from_secs(600)
    );
    // Cache-Control: private is still honoured (privacy first, docs/http.md).
    assert_eq!(
        store("/x", &with("private", "max-age=600")),
        Storability::DontStore(NoStore::Private)
    );
    // Invalid dictionaries are ignored whole: Cache-Control governs.
    for invalid in [
        "Max-Age=600",
        "max-age = 600",
        "max-age=600,",
        "max-age=600;",
    ] {
        assert_eq!(
            stored("/x", &with("max-age=300", invalid)).ttl,
            Duration::from_secs(300),
            "{invalid:?}"
        );
        assert_eq!(
            store("/x", &with("no-store", invalid)),
            Storability::DontStore(NoStore::NoStore),
            "{invalid:?}"
        );
    }
    // ...but an invalid one that says private or no-store still keeps it out.
    assert_eq!(
        store("/x", &with("max-age=300", "Max-Age=600, private")),
        Storability::DontStore(NoStore::Private)
    );
    assert_eq!(
        store("/x", &with("max-age=300", "no-store,")),
        Storability::DontStore(NoStore::NoStore)
    );
}

#[test]
fn a_server_error_is_stored_only_with_the_origins_own_freshness_and_no_route_grace() {
    // Issue 30 (RFC 9111 §3: any final status with explicit freshness).
    for status in [500u16, 502, 503, 504] {
        let mut r = view(Some("max-age=60"));
        r.status = status;
        let s = stored("/x", &r);
        assert_eq!(
            (s.ttl, s.grace),
            (Duration::from_secs(60), Duration::ZERO),
            "{status}"
        );
        // The origin's own stale-while-revalidate still counts.
        let mut r = view(Some("max-age=60, stale-while-revalidate=30"));
        r.status = status;
        assert_eq!(stored("/x", &r).grace, Duration::from_secs(30), "{status}");
        // Without explicit freshness: never, whatever the route's grace.
        let mut r = view(None);
        r.status = status;
        assert_eq!(
            store("/x", &r),
            Storability::DontStore(NoStore::Status),
            "{status}"
        );
        // A route's ttl_override is for content, not for an outage: the origin's own
        // freshness or nothing.
        let mut r = view(Some("max-age=5"));
        r.status = status;
        let s = stored("/o/x", &r);
        assert_eq!(
            (s.ttl, s.grace),
            (Duration::from_secs(5), Duration::ZERO),
            "{status}"
        );
        let mut r = view(None);
        r.status = status;
        assert_eq!(
            store("/o/x", &r),
            Storability::DontStore(NoStore::Status),
            "{status}"
        );
    }
    // Content on that route keeps its override.
    assert_eq!(
        stored("/o/x", &view(Some("max-age=5"))).ttl,
        Duration::from_secs(3600)
    );
}

#[test]
fn must_understand_stores_an_understood_status_despite_no_store() {
    // RFC 9111 §5.2.2.3 (issue 30).
    let s = stored("/x", &view(Some("no-store, must-understand, max-age=60")));
    assert_eq!(s.ttl, Duration::from_secs(60));
    // In CDN-Cache-Control, which then governs (RFC 9213).
    let mut r = view(None);
    r.cdn_cache_control = Some("no-store, must-understand, max-age=30");
    assert_eq!(stored("/x", &r).ttl, Duration::from_secs(30));
    // A status Cachet does not understand (partial content, an unregistered code): never,
    // with or without no-store.
    for status in [206u16, 299, 599] {
        for cc in [
            "no-store, must-understand, max-age=60",
            "must-understand, max-age=60",
        ] {
            let mut r = view(Some(cc));
            r.status = status;
            assert!(
                matches!(store("/x", &r), Storability::DontStore(_)),
                "{status} {cc}"
            );
        }
    }
    // Never more shareable than the origin said: private, Set-Cookie and
    // Surrogate-Control's no-store still win.
    assert_eq!(
        store(
            "/x",
            &view(Some("private, no-store, must-understand, max-age=60"))
        ),
        Storability::DontStore(NoStore::Private)
    );
    let mut r = view(Some("no-store, must-understand, max-age=60"));
    r.has_set_cookie = true;
    assert_eq!(store("/x", &r), Storability::DontStore(NoStore::SetCookie));
    let mut r = view(Some("no-store, must-understand, max-age=60"));
    r.surrogate_control = Some("no-store");
    assert_eq!(store("/x", &r), Storability::DontStore(NoStore::NoStore));
    // Without must-understand no-store is no-store.
    assert_eq!(
        store("/x", &view(Some("no-store, max-age=60"))),
        Storability::DontStore(NoStore::NoStore)
    );
}
