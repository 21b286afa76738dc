//! Behaviour of `Policy::plan` and `Policy::storability` on the edge app's shipped config.

use std::time::{Duration, SystemTime};

use cachet_policy::{
    Config, Decision, DeviceClass, NoStore, PassReason, Policy, RequestView, ResponseView,
    Storability, Synth,
};
use proptest::prelude::*;

const SHIPPED: &str = include_str!("../../../edge-app/cachet.toml");
const IPHONE: &[u8] = b"Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1";
const IPAD: &[u8] = b"Mozilla/5.0 (iPad; CPU OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1";

fn policy() -> Policy {
    Policy::from_toml(SHIPPED).expect("shipped config is valid")
}

fn get<'a>(host: &'a str, target: &'a str, ua: Option<&'a [u8]>) -> RequestView<'a> {
    RequestView {
        method: "GET",
        scheme: "http",
        host: Some(host),
        path_and_query: target,
        user_agent: ua,
        ..RequestView::default()
    }
}

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

#[test]
fn article_key_varies_by_device_and_drops_tracking() {
    let p = policy();
    let a = p.plan(
        &get(
            "Blog.Example.",
            "/blog/a/entry/1?utm_source=x&b=2&a=1",
            Some(IPHONE),
        ),
        now(),
    );
    assert_eq!(a.decision, Decision::Cache);
    assert_eq!(a.route, "article");
    assert_eq!(a.device, DeviceClass::Smartphone);
    assert_eq!(a.target, "/blog/a/entry/1?a=1&b=2");
    assert_eq!(
        a.cache_key,
        "blog.example/blog/a/entry/1?a=1&b=2|smartphone"
    );
    let b = p.plan(
        &get("blog.example", "/blog/a/entry/1?a=1&b=2", Some(IPAD)),
        now(),
    );
    assert_eq!(b.cache_key, "blog.example/blog/a/entry/1?a=1&b=2|pc");
    assert!(
        matches!(b.target, std::borrow::Cow::Borrowed(_)),
        "already normal: no copy"
    );
}

#[test]
fn feeds_and_css_do_not_vary() {
    let p = policy();
    let f = p.plan(&get("blog.example", "/blog/a/feed", Some(IPHONE)), now());
    assert_eq!(
        (f.route, f.cache_key.as_str()),
        ("feed", "blog.example/blog/a/feed|*")
    );
    let c = p.plan(&get("cdn.example", "/css/a.css", Some(IPHONE)), now());
    assert_eq!(c.route, "design-css");
    assert_eq!(c.cache_key, "cdn.example/css/a.css|*");
    assert_eq!(c.surrogate_keys, ["css"]);
    assert_eq!(c.ttl, Duration::from_secs(86_400));
    // The same path on the blog host is not the CDN route: the catch-all, which stores
    // only what the origin declares cacheable (private blogs' CSS is `private, no-store`).
    let c = p.plan(&get("blog.example", "/css/a.css", None), now());
    assert_eq!((c.route, c.ttl), ("other", Duration::ZERO));
}

#[test]
fn passes_for_methods_authorization_routes_and_query_limits() {
    let p = policy();
    let mut v = get("blog.example", "/blog/a/", None);
    v.method = "POST";
    assert_eq!(
        p.plan(&v, now()).decision,
        Decision::Pass(PassReason::Method)
    );
    v.method = "GET";
    v.authorization = Some(b"Bearer alice");
    // `[edge].cache_authorized` off: passed, as before issue 30.
    let mut cfg = Config::from_toml(SHIPPED).expect("valid");
    cfg.edge.cache_authorized = false;
    let off = Policy::new(cfg).expect("valid");
    assert_eq!(
        off.plan(&v, now()).decision,
        Decision::Pass(PassReason::Authorization)
    );
    let acct = p.plan(&get("blog.example", "/account", None), now());
    assert_eq!(acct.decision, Decision::Pass(PassReason::Route));
    // Aliases of a pass route's path (RFC 3986 §6.2.2) pass too, and reach the origin
    // normalized: a private page is never stored under an alias.
    for alias in ["/%61ccount", "/blog/../account", "/./%61%63count"] {
        let a = p.plan(&get("blog.example", alias, None), now());
        assert_eq!(a.decision, Decision::Pass(PassReason::Route), "{alias}");
        assert_eq!(a.target, "/account", "{alias}");
    }
    let robots = p.plan(&get("blog.example", "/%72obots.txt", None), now());
    assert!(matches!(robots.decision, Decision::Synth(_)));
    let many = (0..1000)
        .map(|i| format!("p{i}=1"))
        .collect::<Vec<_>>()
        .join("&");
    let target = format!("/blog/a/?{many}");
    let q = p.plan(&get("blog.example", &target, None), now());
    assert!(matches!(q.decision, Decision::Pass(PassReason::Query(_))));
    assert_eq!(q.target, target, "forwarded as received");
    assert!(q.cache_key.is_empty());
}

#[test]
fn bad_hosts_are_rejected_and_robots_is_synthesized() {
    let p = policy();
    for host in [None, Some(""), Some("a b"), Some("x\"<y>")] {
        let v = RequestView {
            host,
            ..get("", "/", None)
        };
        assert!(
            matches!(
                p.plan(&v, now()).decision,
                Decision::Synth(Synth::BadRequest { .. })
            ),
            "{host:?}"
        );
    }
    let r = p.plan(&get("Blog.Example", "/robots.txt?x=1", None), now());
    let Decision::Synth(Synth::Robots { body }) = r.decision else {
        panic!("robots")
    };
    assert!(body.contains("Sitemap: http://blog.example/sitemap.xml"));
}

#[test]
fn robots_trusts_forwarded_headers_only_when_configured() {
    let mut v = get("blog.example", "/robots.txt", None);
    v.forwarded_host = Some("www.example.org");
    v.forwarded_proto = Some("https");
    let robots = |p: &Policy| match p.plan(&v, now()).decision {
        Decision::Synth(Synth::Robots { body }) => body,
        d => panic!("{d:?}"),
    };
    assert!(robots(&policy()).contains("http://blog.example/"));
    let trusted =
        Policy::from_toml(&SHIPPED.replace("trust_forwarded = false", "trust_forwarded = true"))
            .expect("valid");
    assert!(robots(&trusted).contains("https://www.example.org/"));
}

fn resp(cc: &'static str) -> ResponseView<'static> {
    ResponseView {
        status: 200,
        cache_control: Some(cc),
        content_type: Some("text/html"),
        ..ResponseView::default()
    }
}

#[test]
fn storability_follows_rfc9111_and_the_seed() {
    let p = policy();
    let plan = p.plan(&get("blog.example", "/blog/a/entry/1", None), now());
    let store = |r: &ResponseView<'_>| p.storability(&plan, r);
    assert_eq!(
        store(&resp("private")),
        Storability::DontStore(NoStore::Private)
    );
    assert_eq!(
        store(&resp("public, no-store")),
        Storability::DontStore(NoStore::NoStore)
    );
    let mut cookie = resp("public, max-age=60");
    cookie.has_set_cookie = true;
    assert_eq!(store(&cookie), Storability::DontStore(NoStore::SetCookie));
    // A 5xx only with the origin's explicit freshness (issue 30; tests/freshness.rs).
    let mut err = resp("public");
    err.status = 500;
    assert_eq!(store(&err), Storability::DontStore(NoStore::Status));
    let mut vary = resp("max-age=60");
    vary.vary = Some("Cookie");
    assert_eq!(store(&vary), Storability::DontStore(NoStore::Vary));
    let Storability::Store(s) = store(&resp("public, max-age=300, stale-while-revalidate=7200"))
    else {
        panic!()
    };
    assert_eq!(s.ttl, Duration::from_secs(300));
    assert_eq!(
        s.grace,
        Duration::from_secs(7200),
        "longer of route grace (1h) and swr"
    );
    assert!(s.compress);
    assert_eq!(s.vary, "X-Cachet-Device, Accept-Encoding");
    let mut sc = resp("max-age=300, s-maxage=30");
    sc.surrogate_control = Some("max-age=9000");
    let Storability::Store(s) = store(&sc) else {
        panic!()
    };
    assert_eq!(s.ttl, Duration::from_secs(9000), "Surrogate-Control wins");
    let Storability::Store(s) = store(&resp("public")) else {
        panic!()
    };
    assert_eq!(
        s.ttl,
        Duration::from_secs(300),
        "route ttl when the origin gives none"
    );
    let mut enc = resp("max-age=60");
    enc.content_encoding = Some("gzip");
    let Storability::Store(s) = store(&enc) else {
        panic!()
    };
    assert!(!s.compress, "already encoded bodies are stored as-is");
}

#[test]
fn surrogate_keys_merge_origin_then_route_deduplicated() {
    let p = policy();
    let plan = p.plan(&get("cdn.example", "/css/alice.css", None), now());
    let mut r = resp("max-age=60");
    r.surrogate_key = Some("blog-alice css  css-alice");
    let Storability::Store(s) = p.storability(&plan, &r) else {
        panic!()
    };
    let url = cachet_policy::object::url_tag("cdn.example", "/css/alice.css");
    assert_eq!(
        s.surrogate_keys,
        ["blog-alice", "css", "css-alice", url.as_str()]
    );
}

#[test]
fn config_errors_name_their_path() {
    let err =
        Config::from_toml("[[routes]]\nname = \"a\"\nttl = \"5 parsecs\"\n").expect_err("bad ttl");
    assert!(err.to_string().contains("routes[0].ttl"), "{err}");
    let err = Config::from_toml("[[routes]]\nname = \"a\"\n[[routes]]\nname = \"a\"\nhost = \"\"\nsurrogate_keys = [\"{nope}\"]\n")
        .expect_err("invalid");
    let paths: Vec<_> = err.issues().into_iter().map(|i| i.path).collect();
    assert_eq!(
        paths,
        [
            "routes[1].name",
            "routes[1].host",
            "routes[1].surrogate_keys[0]"
        ]
    );
    let err = Config::from_toml("[query]\nsort = \"sideways\"\n").expect_err("bad sort");
    assert!(err.to_string().contains("query.sort"), "{err}");
    let err =
        Config::from_toml("[edge]\nbackend = \"o\"\nunknown = 1\n").expect_err("unknown field");
    assert!(err.to_string().contains("unknown"), "{err}");
    assert!(
        Config::from_toml("[query]\nremove = [\"utm_*\"]\n").is_ok(),
        "a file with only [query] is valid"
    );
}

#[test]
fn toml_and_json_are_one_schema() {
    let c = Config::from_toml(SHIPPED).expect("valid");
    let json = serde_json::to_string(&c).expect("json");
    assert_eq!(Config::from_json(&json).expect("json parses"), c);
}

proptest! {
    #[test]
    fn plan_is_total(host in "\\PC{0,40}", target in "\\PC{0,200}", ua in proptest::collection::vec(any::<u8>(), 0..600), method in "[A-Z]{0,8}") {
        let p = policy();
        let v = RequestView { method: &method, host: Some(&host), ..get("", &target, Some(&ua)) };
        let plan = p.plan(&v, now());
        if plan.decision == Decision::Cache {
            prop_assert!(plan.cache_key.ends_with("|pc") || plan.cache_key.ends_with("|smartphone") || plan.cache_key.ends_with("|*"));
            prop_assert!(plan.cache_key.starts_with(plan.host.as_ref()));
        }
    }

    #[test]
    fn key_ignores_tracking_params_and_order(a in "[a-z]{1,5}", b in "[a-z]{1,5}", utm in "[a-z0-9]{0,8}") {
        prop_assume!(a != b);
        let p = policy();
        let t1 = format!("/blog/x/?{a}=1&utm_source={utm}&{b}=2");
        let t2 = format!("/blog/x/?{b}=2&{a}=1&fbclid={utm}");
        let k1 = p.plan(&get("blog.example", &t1, None), now()).cache_key;
        let k2 = p.plan(&get("blog.example", &t2, None), now()).cache_key;
        prop_assert_eq!(k1, k2);
    }
}

#[test]
fn the_catch_all_route_stores_only_what_the_origin_declares_cacheable() {
    use cachet_policy::{ResponseView, Storability};
    let p = policy();
    let plan = p.plan(&get("blog.example", "/wp-login.php", None), now());
    assert_eq!(plan.route, "other");
    let undeclared = ResponseView {
        status: 404,
        ..ResponseView::default()
    };
    assert!(matches!(
        p.storability(&plan, &undeclared),
        Storability::DontStore(_)
    ));
    let declared = ResponseView {
        status: 404,
        cache_control: Some("public, max-age=10"),
        ..ResponseView::default()
    };
    assert!(
        matches!(p.storability(&plan, &declared), Storability::Store(s) if s.ttl == Duration::from_secs(10))
    );
    let private = ResponseView {
        status: 200,
        cache_control: Some("private, max-age=600"),
        ..ResponseView::default()
    };
    assert!(matches!(
        p.storability(&plan, &private),
        Storability::DontStore(_)
    ));
}

#[test]
fn a_304_refreshes_with_the_routes_ttl_precedence() {
    let toml = r#"
        [[routes]]
        name = "pinned"
        path_prefix = "/pinned/"
        ttl = "2s"
        ttl_override = true

        [[routes]]
        name = "origin"
        path_prefix = "/"
        ttl = "1m"
    "#;
    let p = cachet_policy::Policy::from_toml(toml).unwrap();
    let pinned = p.plan(&get("a.example", "/pinned/x", None), now());
    // The route's TTL wins over the 304's max-age, as for a stored response.
    assert_eq!(
        p.revalidated_ttl(&pinned, Some("public, max-age=300"), None),
        Some(Duration::from_secs(2))
    );
    let origin = p.plan(&get("a.example", "/x", None), now());
    assert_eq!(
        p.revalidated_ttl(&origin, Some("max-age=300, s-maxage=60"), None),
        Some(Duration::from_secs(60))
    );
    assert_eq!(
        p.revalidated_ttl(&origin, Some("max-age=300"), Some("max-age=5")),
        Some(Duration::from_secs(5))
    );
    assert_eq!(
        p.revalidated_ttl(&origin, None, None),
        None,
        "keep the stored TTL"
    );
    assert_eq!(
        p.revalidated_ttl(&origin, Some("no-cache"), None),
        Some(Duration::ZERO)
    );
}

/// Chrome on an Android phone with the frozen model token: the UA says phone.
const FROZEN_PHONE: &[u8] = b"Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Mobile Safari/537.36";
/// Chrome on an Android tablet in desktop mode: the UA (no `Mobile`) says pc.
const FROZEN_TABLET: &[u8] = b"Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Safari/537.36";

fn with_hints<'a>(
    ua: &'a [u8],
    hint: Option<&'a [u8]>,
    cookie: Option<&'a [u8]>,
) -> RequestView<'a> {
    RequestView {
        ch_ua_mobile: hint,
        cookie,
        ..get("blog.example", "/blog/a/entry/1", Some(ua))
    }
}

/// (User-Agent, `Sec-CH-UA-Mobile`, expected class).
type HintCase = (&'static [u8], Option<&'static [u8]>, DeviceClass);

#[test]
fn client_hint_decides_the_class_and_so_the_key() {
    let p = policy();
    let cases: [HintCase; 7] = [
        // A tablet's browser that sends `Mobile` in its UA but `?0` in the hint: pc.
        (FROZEN_PHONE, Some(b"?0"), DeviceClass::Pc),
        (FROZEN_TABLET, Some(b"?1"), DeviceClass::Smartphone),
        (FROZEN_PHONE, Some(b"?1"), DeviceClass::Smartphone),
        // No hint, or one that is not a Structured Field boolean: the UA decides.
        (FROZEN_PHONE, None, DeviceClass::Smartphone),
        (FROZEN_TABLET, None, DeviceClass::Pc),
        (FROZEN_TABLET, Some(b"yes"), DeviceClass::Pc),
        // iPad Safari sends no client hints: pc by the UA rules.
        (IPAD, None, DeviceClass::Pc),
    ];
    for (ua, hint, want) in cases {
        let plan = p.plan(&with_hints(ua, hint, None), now());
        assert_eq!(plan.device, want, "{hint:?}");
        assert_eq!(
            plan.cache_key,
            format!("blog.example/blog/a/entry/1|{want}"),
            "{hint:?}"
        );
    }
}

#[test]
fn force_cookie_overrides_hint_and_user_agent_without_new_variants() {
    let p = policy();
    let plan =
        |cookie: &'static [u8]| p.plan(&with_hints(IPHONE, Some(b"?1"), Some(cookie)), now());
    let pc = plan(b"session=abc; X-UA-Device-force=pc");
    assert_eq!(pc.device, DeviceClass::Pc);
    assert_eq!(pc.cache_key, "blog.example/blog/a/entry/1|pc");
    // varnish-devicedetect's finer values collapse onto the two classes.
    let tablet = plan(b"X-UA-Device-force=tablet-android");
    assert_eq!(tablet.cache_key, pc.cache_key);
    let phone = plan(b"X-UA-Device-force=mobile-iphone");
    assert_eq!(phone.cache_key, "blog.example/blog/a/entry/1|smartphone");
    // Unknown values and other cookies change nothing.
    for c in [
        &b"X-UA-Device-force=bot"[..],
        b"x-ua-device-force=pc",
        b"a=b",
    ] {
        let plan = p.plan(&with_hints(IPHONE, Some(b"?1"), Some(c)), now());
        assert_eq!(plan.device, DeviceClass::Smartphone, "{c:?}");
    }
}

#[test]
fn seed_profile_and_disabled_options_ignore_hint_and_cookie() {
    let seed = Policy::from_toml(&SHIPPED.replace(
        "profile = \"accurate\"",
        "profile = \"seed\"\nforce_cookie = \"\"",
    ))
    .expect("valid");
    let plan = seed.plan(
        &with_hints(FROZEN_TABLET, Some(b"?1"), Some(b"X-UA-Device-force=sp")),
        now(),
    );
    assert_eq!(plan.device, DeviceClass::Pc);
    // `client_hints = true` turns the hint on for the seed profile.
    let seed_hints = Policy::from_toml(&SHIPPED.replace(
        "profile = \"accurate\"",
        "profile = \"seed\"\nclient_hints = true",
    ))
    .expect("valid");
    let plan = seed_hints.plan(&with_hints(FROZEN_TABLET, Some(b"?1"), None), now());
    assert_eq!(plan.device, DeviceClass::Smartphone);
    // A bad cookie name is a config error with its path.
    let err = Policy::from_toml(&SHIPPED.replace(
        "profile = \"accurate\"",
        "profile = \"accurate\"\nforce_cookie = \"a;b\"",
    ))
    .unwrap_err();
    assert!(err.to_string().contains("force_cookie"), "{err}");
}

proptest! {
    /// Whatever bytes the hint and the cookie carry, the key ends in one of the two
    /// classes and contains neither header's bytes.
    #[test]
    fn key_never_carries_hint_or_cookie(
        ua in proptest::collection::vec(any::<u8>(), 0..300),
        hint in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..12)),
        cookie in proptest::option::of("[ -~]{0,60}"),
        force in proptest::option::of(prop_oneof!["pc", "sp", "mobile-iphone", "zz[a-z]{1,8}"]),
    ) {
        let p = policy();
        let cookie = match (cookie, force) {
            (Some(c), Some(f)) => Some(format!("{c}; X-UA-Device-force={f}")),
            (c, _) => c,
        };
        let plan = p.plan(&with_hints(&ua, hint.as_deref(), cookie.as_deref().map(str::as_bytes)), now());
        prop_assert_eq!(plan.decision, Decision::Cache);
        let want = format!("blog.example/blog/a/entry/1|{}", plan.device);
        prop_assert_eq!(&plan.cache_key, &want);
    }
}

/// Issue 27 item 6: `h.example:80`, `h.example:` and `H.Example.` are the origin
/// `h.example` over `http` (RFC 9110 §4.2.3), so one key and one `x-host`; another port
/// stays; a port out of range or not a number is a 400.
#[test]
fn default_and_empty_ports_are_the_same_origin_and_bad_ports_are_400() {
    use cachet_policy::plan::normalize_authority;
    let p = policy();
    let key = |host: &str, scheme: &str| {
        let v = RequestView {
            scheme,
            ..get(host, "/blog/a/entry/1", None)
        };
        let plan = p.plan(&v, now());
        (plan.host.into_owned(), plan.cache_key)
    };
    let plain = key("h.example", "http");
    for spelling in [
        "h.example:80",
        "h.example:",
        "H.Example.:80",
        "h.example:0080",
    ] {
        assert_eq!(key(spelling, "http"), plain, "{spelling}");
    }
    assert_eq!(key("h.example:443", "https"), key("h.example", "https"));
    assert_eq!(key("h.example:443", "http").0, "h.example:443");
    assert_eq!(key("h.example:8080", "http").0, "h.example:8080");
    assert_eq!(key("[::1]:80", "http").0, "[::1]");
    for bad in [
        "h.example:99999",
        "h.example:65536",
        "h.example:8o",
        "h.example:-1",
        "h.example:123456",
        "::1",
        "[::1",
        "[::1]x",
        "[]",
        ":80",
        "h.example:80:80",
    ] {
        let v = get(bad, "/", None);
        assert!(
            matches!(
                p.plan(&v, now()).decision,
                Decision::Synth(Synth::BadRequest { .. })
            ),
            "{bad}"
        );
        assert_eq!(normalize_authority(bad, "http"), None, "{bad}");
    }
    assert_eq!(
        normalize_authority("h.example:65535", "http").as_deref(),
        Some("h.example:65535")
    );
}

/// Issue 27 item 3: a `GET`/`HEAD` with content is passed, never cached.
#[test]
fn a_get_with_a_body_is_passed() {
    let p = policy();
    for method in ["GET", "HEAD"] {
        let v = RequestView {
            method,
            has_body: true,
            ..get("blog.example", "/blog/a/entry/1", None)
        };
        let plan = p.plan(&v, now());
        assert_eq!(plan.decision, Decision::Pass(PassReason::Body), "{method}");
        assert_eq!(PassReason::Body.label(), "request-body");
    }
}

#[test]
fn a_request_with_authorization_is_keyed_by_its_credentials() {
    // RFC 9111 §3.5 (issue 30): one key per credentials, never the anonymous one, and
    // the key holds a digest, never the credentials.
    let p = policy();
    let anon = p.plan(&get("blog.example", "/blog/a/entry/1", None), now());
    let mut v = get("blog.example", "/blog/a/entry/1", None);
    v.authorization = Some(b"Bearer alice");
    let alice = p.plan(&v, now());
    v.authorization = Some(b"Bearer bob");
    let bob = p.plan(&v, now());
    v.authorization = Some(b"Bearer alice");
    let alice_again = p.plan(&v, now());
    assert_eq!(alice.decision, Decision::Cache);
    assert!(alice.authorized && !anon.authorized);
    assert_eq!(alice.cache_key, alice_again.cache_key);
    assert_ne!(alice.cache_key, bob.cache_key);
    assert_ne!(alice.cache_key, anon.cache_key);
    assert!(
        alice.cache_key.starts_with(&anon.cache_key),
        "{}",
        alice.cache_key
    );
    let slot = &alice.cache_key[anon.cache_key.len()..];
    assert!(slot.starts_with("|auth:") && slot.len() == 6 + 32, "{slot}");
    assert!(!alice.cache_key.contains("alice"));
    // Case matters in credentials: another key.
    v.authorization = Some(b"Bearer ALICE");
    assert_ne!(p.plan(&v, now()).cache_key, alice.cache_key);
}

#[test]
fn an_answer_to_authorization_is_stored_only_when_the_origin_says_a_shared_cache_may() {
    // RFC 9111 §3.5: `public`, `s-maxage` or `must-revalidate` (in the Cache-Control that
    // governs: CDN-Cache-Control when present); anything else is per-user.
    let p = policy();
    let mut v = get("blog.example", "/blog/a/entry/1", None);
    v.authorization = Some(b"Bearer alice");
    let plan = p.plan(&v, now());
    let with = |cc: &'static str| ResponseView {
        status: 200,
        cache_control: Some(cc),
        ..ResponseView::default()
    };
    for ok in [
        "public, max-age=60",
        "s-maxage=60",
        "max-age=60, must-revalidate",
    ] {
        assert!(
            matches!(p.storability(&plan, &with(ok)), Storability::Store(_)),
            "{ok}"
        );
    }
    for no in [
        "max-age=60",
        "max-age=60, proxy-revalidate",
        "private, public, max-age=60",
    ] {
        let Storability::DontStore(why) = p.storability(&plan, &with(no)) else {
            panic!("{no} stored")
        };
        assert!(
            why.is_private(),
            "{no}: {why:?} must leave a hit-for-pass marker"
        );
    }
    let mut cdn = with("max-age=60");
    cdn.cdn_cache_control = Some("public, max-age=60");
    assert!(matches!(p.storability(&plan, &cdn), Storability::Store(_)));
    // The same answer to an anonymous request needs none of them.
    let anon = p.plan(&get("blog.example", "/blog/a/entry/1", None), now());
    assert!(matches!(
        p.storability(&anon, &with("max-age=60")),
        Storability::Store(_)
    ));
}

#[test]
fn a_range_inside_one_slice_is_planned_as_that_slice() {
    // Partial content storage (issue 30): `slice_bytes` on the route.
    use cachet_policy::plan::{Slice, slice_of};
    assert_eq!(
        slice_of(b"bytes=2-5", 16),
        Some(Slice {
            index: 0,
            first: 0,
            last: 15
        })
    );
    assert_eq!(
        slice_of(b" Bytes = 20-31 ".trim_ascii(), 16).map(|s| s.index),
        None,
        "the unit is `bytes=` exactly (case-insensitive), no spaces inside"
    );
    assert_eq!(
        slice_of(b"BYTES=20-31", 16).map(|s| (s.index, s.first)),
        Some((1, 16))
    );
    assert_eq!(slice_of(b"bytes=16-16", 16).map(|s| s.index), Some(1));
    for whole in [
        &b"bytes=14-17"[..], // across two slices
        b"bytes=5-",         // open-ended
        b"bytes=-5",         // suffix
        b"bytes=0-1,4-5",    // several
        b"bytes=5-2",        // inverted
        b"items=0-1",
        b"bytes=a-b",
        b"bytes=99999999999999999999-1",
        b"",
    ] {
        assert_eq!(
            slice_of(whole, 16),
            None,
            "{:?}",
            String::from_utf8_lossy(whole)
        );
    }
    assert_eq!(slice_of(b"bytes=0-1", 0), None, "off");

    let cfg = SHIPPED.replacen(
        "[[routes]]",
        "[[routes]]\nname = \"video\"\npath_prefix = \"/v/\"\nslice_bytes = 1048576\n\n[[routes]]",
        1,
    );
    let p = Policy::from_toml(&cfg).expect("valid");
    let mut v = get("cdn.example", "/v/a.mp4", None);
    let whole = p.plan(&v, now());
    assert_eq!(whole.slice, None);
    v.range = Some(b"bytes=1048576-1048600");
    let s = p.plan(&v, now());
    assert_eq!(
        s.slice.map(|s| (s.index, s.first, s.last)),
        Some((1, 1_048_576, 2_097_151))
    );
    assert_eq!(s.cache_key, format!("{}|slice:1", whole.cache_key));
    assert!(
        !s.compress,
        "a slice is stored as the origin's identity bytes"
    );
    // If-Range, HEAD: the whole object.
    v.has_if_range = true;
    assert_eq!(p.plan(&v, now()).slice, None);
    v.has_if_range = false;
    v.method = "HEAD";
    assert_eq!(p.plan(&v, now()).slice, None);
    // A route without slice_bytes ignores Range in its plan.
    let mut article = get("blog.example", "/blog/a/entry/1", None);
    article.range = Some(b"bytes=0-1");
    assert_eq!(p.plan(&article, now()).slice, None);
    // Validation.
    let bad = SHIPPED.replacen(
        "[[routes]]",
        "[[routes]]\nname = \"huge\"\npath_prefix = \"/h/\"\nslice_bytes = 2147483648\n\n[[routes]]",
        1,
    );
    let err = Policy::from_toml(&bad).expect_err("over 1 GiB");
    assert!(err.to_string().contains("slice_bytes"), "{err}");
    // Over edge.max_object_bytes (16 MiB by default): no slice could ever be stored.
    let unstorable = SHIPPED.replacen(
        "[[routes]]",
        "[[routes]]\nname = \"big\"\npath_prefix = \"/b/\"\nslice_bytes = 33554432\n\n[[routes]]",
        1,
    );
    let err = Policy::from_toml(&unstorable).expect_err("over max_object_bytes");
    assert!(err.to_string().contains("max_object_bytes"), "{err}");
}

#[test]
fn a_request_no_one_slice_answers_is_planned_to_combine_the_slices() {
    // Issue 30, RFC 9111 §3.4: on a slicing route, the whole representation and ranges
    // across slices are answered by combining slices.
    use cachet_policy::plan::{Stitch, stitch_of};
    let s = |first, last, whole| {
        Some(Stitch {
            slice_bytes: 16,
            first,
            last,
            whole,
        })
    };
    assert_eq!(stitch_of(None, 16), s(0, None, true));
    assert_eq!(stitch_of(Some(b"bytes=14-17"), 16), s(14, Some(17), false));
    assert_eq!(stitch_of(Some(b"BYTES=5-"), 16), s(5, None, false));
    assert_eq!(
        stitch_of(Some(b"bytes=0-1,4-5"), 16),
        s(0, None, true),
        "several ranges are answered whole"
    );
    for own in [
        &b"bytes=2-5"[..], // inside one slice: that slice answers it
        b"bytes=-5",       // suffix: the length comes first
        b"bytes=5-2",
        b"items=0-1",
        b"bytes=a-b",
        b"",
    ] {
        assert_eq!(
            stitch_of(Some(own), 16),
            None,
            "{:?}",
            String::from_utf8_lossy(own)
        );
    }
    assert_eq!(stitch_of(None, 0), None, "off");

    let cfg = SHIPPED.replacen(
        "[[routes]]",
        "[[routes]]\nname = \"video\"\npath_prefix = \"/v/\"\nslice_bytes = 16\n\n[[routes]]",
        1,
    );
    let p = Policy::from_toml(&cfg).expect("valid");
    let mut v = get("cdn.example", "/v/a", None);
    let whole = p.plan(&v, now());
    assert_eq!((whole.slice, whole.stitch), (None, s(0, None, true)));
    v.range = Some(b"bytes=2-5");
    assert_eq!(p.plan(&v, now()).stitch, None, "one slice answers it");
    v.range = Some(b"bytes=14-40");
    assert_eq!(p.plan(&v, now()).stitch, s(14, Some(40), false));
    v.has_if_range = true;
    assert_eq!(p.plan(&v, now()).stitch, None, "If-Range: the whole object");
    v.has_if_range = false;
    v.method = "HEAD";
    assert_eq!(p.plan(&v, now()).stitch, None);
    let article = get("blog.example", "/blog/a/entry/1", None);
    assert_eq!(p.plan(&article, now()).stitch, None, "no slice_bytes");
}

#[test]
fn a_slice_stores_only_the_origins_206_for_exactly_that_slice() {
    let cfg = SHIPPED.replacen(
        "[[routes]]",
        "[[routes]]\nname = \"video\"\npath_prefix = \"/v/\"\nslice_bytes = 16\n\n[[routes]]",
        1,
    );
    let p = Policy::from_toml(&cfg).expect("valid");
    let mut v = get("cdn.example", "/v/a", None);
    v.range = Some(b"bytes=18-20");
    let plan = p.plan(&v, now());
    let answer = |status: u16, cr: Option<&'static str>, len: Option<u64>| ResponseView {
        status,
        cache_control: Some("max-age=60"),
        content_range: cr,
        content_length: len,
        ..ResponseView::default()
    };
    let Storability::Store(s) =
        p.storability(&plan, &answer(206, Some("bytes 16-31/100"), Some(16)))
    else {
        panic!("the slice")
    };
    assert_eq!(
        s.slice,
        Some(cachet_policy::object::SlicePart {
            first: 16,
            total: 100
        })
    );
    // The last slice ends with the representation.
    let Storability::Store(s) = p.storability(&plan, &answer(206, Some("bytes 16-19/20"), Some(4)))
    else {
        panic!("the last slice")
    };
    assert_eq!(s.slice.map(|p| p.total), Some(20));
    for (status, cr, len) in [
        (200, None, Some(100)),                   // the origin ignored Range
        (206, Some("bytes 16-30/100"), Some(15)), // short of the slice
        (206, Some("bytes 0-15/100"), Some(16)),  // another slice
        (206, Some("bytes 16-31/*"), Some(16)),   // unknown length
        (206, Some("bytes 16-31/100"), Some(10)), // body and range disagree
        (206, None, Some(16)),
        (206, Some("items 16-31/100"), Some(16)),
    ] {
        assert_eq!(
            p.storability(&plan, &answer(status, cr, len)),
            Storability::DontStore(NoStore::Status),
            "{status} {cr:?}"
        );
    }
    let mut gz = answer(206, Some("bytes 16-31/100"), Some(16));
    gz.content_encoding = Some("gzip");
    assert_eq!(
        p.storability(&plan, &gz),
        Storability::DontStore(NoStore::Status)
    );
    // A whole-object plan never stores a 206.
    let whole = p.plan(&get("cdn.example", "/v/a", None), now());
    assert_eq!(
        p.storability(&whole, &answer(206, Some("bytes 16-31/100"), Some(16))),
        Storability::DontStore(NoStore::Status)
    );
}
