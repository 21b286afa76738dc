//! The built filter in the wasmtime proxy-wasm host: two workers, driven ticks and callouts.

use std::sync::OnceLock;

use cachet_envoy_host_tests::{Callout, Host, Outcome, Response, Vm, drive, filter_wasm, req};

const BLOG: &str = "blog.example";
const TOKEN: &str = "s3cret-token-for-the-harness";
const DESKTOP: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36";
const IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1";

fn host() -> Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| {
        let wasm = filter_wasm().expect("filter wasm");
        Host::new(&wasm).expect("compile filter")
    })
    .fresh()
}

/// The edge app's configuration as JSON, with an admin token and `extra` merged in.
fn config(extra: serde_json::Value) -> String {
    let text = include_str!("../../../edge-app/cachet.toml");
    let v: toml::Value = toml::from_str(text).expect("cachet.toml");
    let mut json = serde_json::to_value(v).expect("to json");
    json["admin"] = serde_json::json!({"token": TOKEN});
    // The callout path: these tests drive misses through callouts; the router path has
    // its own tests (`router_config`).
    json["envoy"] = serde_json::json!({"cluster": "origin", "tick": "100ms", "fill": "callout"});
    merge(&mut json, extra);
    json.to_string()
}

fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
    match (a, b) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

/// `Last-Modified` of the conditional origin's pages.
const MODIFIED: &str = "Thu, 01 Jan 2026 00:00:00 GMT";

/// A tiny origin: cacheable HTML with surrogate keys, counting calls per path; with
/// validators, public pages carry `ETag` / `Last-Modified` and a matching
/// `If-None-Match` gets `304 Not Modified`.
struct Origin {
    calls: Vec<String>,
    validators: bool,
    not_modified: usize,
}

impl Origin {
    fn new() -> Self {
        Self {
            calls: Vec::new(),
            validators: false,
            not_modified: 0,
        }
    }

    fn conditional() -> Self {
        Self {
            validators: true,
            ..Self::new()
        }
    }

    /// The entity tag of a page body.
    fn etag(body: &[u8]) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        body.hash(&mut h);
        format!("\"{:016x}\"", h.finish())
    }

    fn serve(&mut self, h: &cachet_envoy_host_tests::Headers) -> Response {
        let get = |n: &str| {
            h.iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        };
        let path = get(":path");
        self.calls.push(path.clone());
        let device = get("x-cachet-device");
        if path.starts_with("/account") || path.contains("private") {
            return Response {
                status: 200,
                headers: vec![
                    ("cache-control".into(), b"private".to_vec()),
                    ("set-cookie".into(), b"session=1".to_vec()),
                ],
                body: format!("secret {}", self.calls.len()).into_bytes(),
            };
        }
        let body = format!(
            "<html>{path} for {device} {}</html>",
            "lorem ipsum ".repeat(50)
        )
        .into_bytes();
        let mut headers = vec![
            ("content-type".into(), b"text/html; charset=utf-8".to_vec()),
            ("cache-control".into(), b"public, max-age=300".to_vec()),
            ("vary".into(), b"User-Agent".to_vec()),
            ("surrogate-key".into(), b"blog-alice entry-1".to_vec()),
        ];
        if self.validators {
            let etag = Self::etag(&body);
            let matches = get("if-none-match") == etag;
            headers.push(("etag".into(), etag.into_bytes()));
            headers.push(("last-modified".into(), MODIFIED.as_bytes().to_vec()));
            if matches {
                self.not_modified += 1;
                return Response {
                    status: 304,
                    headers,
                    body: Vec::new(),
                };
            }
        }
        Response {
            status: 200,
            headers,
            body,
        }
    }

    fn count(&self, path: &str) -> usize {
        self.calls.iter().filter(|p| *p == path).count()
    }
}

fn get(vm: &mut Vm, origin: &mut Origin, path: &str, extra: &[(&str, &str)]) -> Response {
    let (id, o) = vm
        .request(req("GET", BLOG, path, extra), None)
        .expect("request");
    let r = drive(vm, id, o, &mut |h| origin.serve(h)).expect("drive");
    vm.finish(id).expect("finish");
    r
}

#[test]
fn miss_then_local_hit_then_shared_hit_on_the_other_worker() {
    let (host, mut w1, mut w2) = workers(&config(serde_json::json!({})));
    let mut origin = Origin::new();
    let path = "/blog/alice/entry/1";
    let a = get(&mut w1, &mut origin, path, &[("user-agent", DESKTOP)]);
    assert_eq!((a.status, a.x_cache()), (200, "MISS"), "{:?}", w1.logs());
    assert_eq!(a.header("age"), Some("0"));
    assert!(a.header("surrogate-key").is_none());
    let b = get(&mut w1, &mut origin, path, &[("user-agent", DESKTOP)]);
    assert_eq!(b.x_cache(), "HIT");
    let c = get(&mut w2, &mut origin, path, &[("user-agent", DESKTOP)]);
    assert_eq!(c.x_cache(), "HIT");
    assert_eq!(a.text(), c.text());
    assert_eq!(origin.count(path), 1);
    assert_eq!(host.metric("cachet.hits_local"), 1);
    assert_eq!(host.metric("cachet.hits_shared"), 1);
    assert_eq!(host.metric("cachet.misses"), 1);
    let vary = c.header("vary").unwrap_or_default().to_ascii_lowercase();
    assert!(
        vary.contains("x-cachet-device") && !vary.contains("user-agent"),
        "{vary}"
    );
    // Age grows with the host clock.
    host.advance_ms(7_000);
    let d = get(&mut w2, &mut origin, path, &[("user-agent", DESKTOP)]);
    assert_eq!(d.header("age"), Some("7"));
}

#[test]
fn the_local_bytes_gauge_is_the_sum_of_every_workers_in_vm_tier() {
    let (host, mut w1, mut w2) = workers(&config(serde_json::json!({})));
    let mut origin = Origin::new();
    get(
        &mut w1,
        &mut origin,
        "/blog/alice/entry/1",
        &[("user-agent", DESKTOP)],
    );
    w1.tick().expect("tick");
    let one = host.metric("cachet.local_bytes");
    assert!(one > 0, "worker 1's tier holds the object");
    // Worker 2 copies the object into its own tier on a shared hit.
    let c = get(
        &mut w2,
        &mut origin,
        "/blog/alice/entry/1",
        &[("user-agent", DESKTOP)],
    );
    assert_eq!(c.x_cache(), "HIT");
    w2.tick().expect("tick");
    w1.tick().expect("tick");
    assert_eq!(
        host.metric("cachet.local_bytes"),
        2 * one,
        "both tiers, not the last writer's"
    );
    w2.tick().expect("tick");
    assert_eq!(
        host.metric("cachet.local_bytes"),
        2 * one,
        "a tick without change adds nothing"
    );
}

#[test]
fn device_classes_and_query_normalization_share_objects() {
    let host = host();
    let mut w = host.vm(&config(serde_json::json!({}))).expect("vm");
    let mut origin = Origin::new();
    let p = get(
        &mut w,
        &mut origin,
        "/blog/bob/entry/7?utm_source=x&b=1&a=2",
        &[("user-agent", IPHONE)],
    );
    assert_eq!(p.x_cache(), "MISS");
    assert_eq!(
        origin.calls.last().map(String::as_str),
        Some("/blog/bob/entry/7?a=2&b=1")
    );
    assert!(p.text().contains("smartphone"));
    let q = get(
        &mut w,
        &mut origin,
        "/blog/bob/entry/7?a=2&fbclid=z&b=1",
        &[("user-agent", IPHONE)],
    );
    assert_eq!(q.x_cache(), "HIT");
    let d = get(
        &mut w,
        &mut origin,
        "/blog/bob/entry/7?a=2&b=1",
        &[("user-agent", DESKTOP), ("x-cachet-device", "smartphone")],
    );
    assert_eq!(
        d.x_cache(),
        "MISS",
        "a client cannot choose its device class"
    );
    assert!(d.text().contains(" pc "), "{}", d.text());
}

#[test]
fn gzip_is_stored_once_and_inflated_for_identity_clients() {
    let host = host();
    let mut w = host.vm(&config(serde_json::json!({}))).expect("vm");
    let mut origin = Origin::new();
    let path = "/blog/alice/entry/3";
    let gz = get(&mut w, &mut origin, path, &[("accept-encoding", "gzip")]);
    assert_eq!(
        (gz.x_cache(), gz.header("content-encoding")),
        ("MISS", Some("gzip"))
    );
    assert_eq!(
        gz.header("content-length"),
        Some(gz.body.len().to_string().as_str())
    );
    let plain = get(&mut w, &mut origin, path, &[]);
    assert_eq!(
        (plain.x_cache(), plain.header("content-encoding")),
        ("HIT", None)
    );
    assert_eq!(gz.text(), plain.text());
    assert!(gz.body.len() * 2 < plain.body.len());
    // The inflated copy is kept in the in-VM tier: the next identity client gets the same
    // bytes, and a hit of either kind costs the same host calls.
    let again = get(&mut w, &mut origin, path, &[]);
    assert_eq!(again.body, plain.body);
    assert_eq!(origin.count(path), 1);
}

/// The hit path's host calls in the compiled module (each costs ~0.3 µs in V8): the
/// header map, the clock, the ban epoch, the local reply, the hit counter. A regression
/// shows here without Envoy; docs/performance.md gives the figures.
#[test]
fn an_in_vm_hit_makes_five_host_calls_for_either_client() {
    let host = host();
    let mut w = host.vm(&config(serde_json::json!({}))).expect("vm");
    let mut origin = Origin::new();
    let path = "/blog/alice/entry/4";
    for client in [&[("accept-encoding", "gzip")][..], &[]] {
        // Twice first: the miss, then the first hit of this representation (an identity
        // client's first hit inflates once and sets the workspace gauge).
        get(&mut w, &mut origin, path, client);
        get(&mut w, &mut origin, path, client);
        let before = w.host_calls();
        let hit = get(&mut w, &mut origin, path, client);
        assert_eq!(hit.x_cache(), "HIT");
        assert_eq!(w.host_calls() - before, 5, "client {client:?}");
    }
}

#[test]
fn private_content_passes_and_is_never_stored() {
    let host = host();
    let mut w = host.vm(&config(serde_json::json!({}))).expect("vm");
    let mut origin = Origin::new();
    let path = "/blog/carol/private/1";
    for _ in 0..3 {
        let r = get(&mut w, &mut origin, path, &[]);
        assert_eq!(r.x_cache(), "PASS");
        assert!(r.header("set-cookie").is_some());
    }
    assert_eq!(origin.count(path), 3);
    assert!(host.metric("cachet.passes") >= 3);
    // Only a content-free marker is in shared data; no private byte.
    let holds_secret = (0..65_536u32).any(|s| {
        host.shared_value(&format!("cachet.o.{s}"))
            .is_some_and(|v| v.windows(6).any(|w| w == b"secret"))
    });
    assert!(!holds_secret);
}

#[test]
fn robots_txt_is_synthesized_and_bad_hosts_get_400() {
    let host = host();
    let mut w = host.vm(&config(serde_json::json!({}))).expect("vm");
    let (_, o) = w
        .request(req("GET", "Blog.Example", "/robots.txt", &[]), None)
        .expect("req");
    let Outcome::Reply(r) = o else {
        panic!("expected a local reply: {o:?}")
    };
    assert_eq!((r.status, r.x_cache()), (200, "SYNTH"));
    assert!(
        r.text()
            .contains("Sitemap: http://blog.example/sitemap.xml")
    );
    let (_, o) = w
        .request(req("GET", "bad host", "/", &[]), None)
        .expect("req");
    let Outcome::Reply(r) = o else {
        panic!("expected a local reply: {o:?}")
    };
    assert_eq!(r.status, 400);
}

#[test]
fn ten_concurrent_misses_across_two_workers_make_one_origin_request() {
    let (host, mut w1, mut w2) = workers(&config(serde_json::json!({})));
    let mut origin = Origin::new();
    let path = "/blog/alice/entry/42";
    let mut ids = Vec::new();
    for i in 0..10 {
        let vm = if i % 2 == 0 { &mut w1 } else { &mut w2 };
        let (id, o) = vm.request(req("GET", BLOG, path, &[]), None).expect("req");
        assert_eq!(o, Outcome::Paused);
        ids.push((i % 2, id));
    }
    let calls: Vec<_> = w1.callouts().into_iter().chain(w2.callouts()).collect();
    assert_eq!(calls.len(), 1, "one leader across both workers");
    assert_eq!(host.metric("cachet.collapsed_waiters"), 9);
    let leader = &calls[0];
    let resp = origin.serve(&leader.headers);
    let leader_vm = if w1.callouts().is_empty() {
        &mut w2
    } else {
        &mut w1
    };
    leader_vm.answer(leader.token, &resp).expect("answer");
    // The leader's worker wakes its own waiters at once; the other worker on its tick.
    host.advance_ms(100);
    w1.tick().expect("tick");
    w2.tick().expect("tick");
    let mut labels = Vec::new();
    for (vm, id) in ids {
        let vm = if vm == 0 { &mut w1 } else { &mut w2 };
        match vm.poll(id) {
            Outcome::Reply(r) => labels.push(r.x_cache().to_owned()),
            o => panic!("stream {id} not answered: {o:?}"),
        }
    }
    assert_eq!(labels.iter().filter(|l| *l == "MISS").count(), 1);
    assert_eq!(labels.iter().filter(|l| *l == "HIT").count(), 9);
    assert_eq!(origin.count(path), 1);
}

#[test]
fn stale_within_grace_is_served_while_the_root_refreshes() {
    let host = host();
    let mut w = host.vm(&config(serde_json::json!({}))).expect("vm");
    let mut origin = Origin::new();
    let path = "/blog/alice/entry/5";
    assert_eq!(get(&mut w, &mut origin, path, &[]).x_cache(), "MISS");
    host.advance_ms(301_000); // past max-age=300, inside the route's 1 h grace
    let (id, o) = w.request(req("GET", BLOG, path, &[]), None).expect("req");
    let Outcome::Reply(r) = o else {
        panic!("stale not served at once: {o:?}")
    };
    assert_eq!(r.x_cache(), "STALE");
    w.finish(id).expect("finish");
    assert!(w.callouts().is_empty(), "the refresh goes out on the tick");
    w.tick().expect("tick");
    let calls = w.callouts();
    assert_eq!(calls.len(), 1);
    let resp = origin.serve(&calls[0].headers);
    w.answer(calls[0].token, &resp).expect("answer");
    let fresh = get(&mut w, &mut origin, path, &[]);
    assert_eq!((fresh.x_cache(), fresh.header("age")), ("HIT", Some("0")));
    assert_eq!(host.metric("cachet.stale"), 1);
    assert_eq!(host.metric("cachet.refreshes"), 1);
}

fn admin(
    vm: &mut Vm,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Response {
    let (id, o) = vm
        .request(req(method, BLOG, path, headers), body)
        .expect("admin");
    let Outcome::Reply(r) = o else {
        panic!("admin not answered: {o:?}")
    };
    vm.finish(id).expect("finish");
    r
}

#[test]
fn admin_api_needs_the_bearer_token() {
    let host = host();
    let mut w = host.vm(&config(serde_json::json!({}))).expect("vm");
    let r = admin(&mut w, "GET", "/.cachet/bans", &[], None);
    assert_eq!(r.status, 401);
    let r = admin(
        &mut w,
        "GET",
        "/.cachet/bans",
        &[("authorization", "Bearer nope")],
        None,
    );
    assert_eq!(r.status, 403);
    let auth = format!("Bearer {TOKEN}");
    let r = admin(
        &mut w,
        "POST",
        "/.cachet/ban",
        &[("authorization", &auth)],
        Some(b"obj.status >< 200"),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("column"), "{}", r.text());
    assert!(
        !w.logs().join("\n").contains(TOKEN),
        "the token is never logged"
    );
}

#[test]
fn purge_and_ban_invalidate_both_tiers_on_every_worker() {
    let (host, mut w1, mut w2) = workers(&config(serde_json::json!({})));
    let mut origin = Origin::new();
    let path = "/blog/alice/entry/1";
    assert_eq!(get(&mut w1, &mut origin, path, &[]).x_cache(), "MISS");
    assert_eq!(get(&mut w2, &mut origin, path, &[]).x_cache(), "HIT"); // now in w2's local tier too
    host.advance_ms(1_000);
    let auth = format!("Bearer {TOKEN}");
    let r = admin(
        &mut w1,
        "POST",
        "/.cachet/purge",
        &[("authorization", &auth), ("surrogate-key", "entry-1")],
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v: serde_json::Value = serde_json::from_str(&r.text()).expect("json");
    assert_eq!(v["entry-1"]["soft"], false);
    // An entry covers what was stored up to the millisecond it was accepted in
    // (`banlog::stamp_ms`): the refill comes a millisecond later.
    host.advance_ms(1);
    assert_eq!(
        get(&mut w2, &mut origin, path, &[]).x_cache(),
        "MISS",
        "w2's local copy is gone"
    );
    assert_eq!(get(&mut w1, &mut origin, path, &[]).x_cache(), "HIT");
    assert_eq!(origin.count(path), 2);
    // A ban by URL prefix (not lurker-friendly: req.url).
    host.advance_ms(1_000);
    let r = admin(
        &mut w2,
        "POST",
        "/.cachet/ban",
        &[("authorization", &auth)],
        Some(br#"req.url ~ "^/blog/alice/""#),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let v: serde_json::Value = serde_json::from_str(&r.text()).expect("json");
    assert_eq!(v["lurker_friendly"], false);
    assert_eq!(get(&mut w1, &mut origin, path, &[]).x_cache(), "MISS");
    let r = admin(
        &mut w1,
        "GET",
        "/.cachet/bans",
        &[("authorization", &auth)],
        None,
    );
    let list: serde_json::Value = serde_json::from_str(&r.text()).expect("json");
    assert_eq!(list["bans"].as_array().map(Vec::len), Some(2));
    assert!(host.metric("cachet.bans") >= 2);
}

/// A VM whose `/blog/alice/entry/1` was filled, then soft-purged (key `blog-alice`) a
/// second later: the host, the VM, the origin and the path.
fn soft_purged_alice() -> (Host, Vm, Origin, &'static str) {
    let host = host();
    let mut w = host.vm(&config(serde_json::json!({}))).expect("vm");
    let mut origin = Origin::new();
    let path = "/blog/alice/entry/1";
    assert_eq!(get(&mut w, &mut origin, path, &[]).x_cache(), "MISS");
    host.advance_ms(1_000);
    let auth = format!("Bearer {TOKEN}");
    let r = admin(
        &mut w,
        "POST",
        "/.cachet/purge",
        &[
            ("authorization", &auth),
            ("surrogate-key", "blog-alice"),
            ("fastly-soft-purge", "1"),
        ],
        None,
    );
    assert_eq!(r.status, 200);
    (host, w, origin, path)
}

#[test]
fn soft_purge_serves_stale_while_revalidating() {
    let (host, mut w, mut origin, path) = soft_purged_alice();
    let s = get(&mut w, &mut origin, path, &[]);
    assert_eq!(s.x_cache(), "STALE");
    // The revalidation is answered a millisecond after the soft purge's (an entry covers
    // what was stored in its own millisecond, `banlog::stamp_ms`).
    host.advance_ms(1);
    w.tick().expect("tick");
    let calls = w.callouts();
    assert_eq!(calls.len(), 1, "one revalidation");
    let resp = origin.serve(&calls[0].headers);
    w.answer(calls[0].token, &resp).expect("answer");
    assert_eq!(get(&mut w, &mut origin, path, &[]).x_cache(), "HIT");
}

/// Issue 27 item 10, the soft-purge rule both platforms share: a soft purge ends
/// freshness and changes nothing else, so while every refresh fails the copy is served
/// stale until its own TTL + grace end (here 5 min + 1 h from its fill, not 1 h from the
/// purge), then fetched again. The shared case with real time is conformance: "a
/// soft-purged copy is served stale until its own TTL + grace end…".
#[test]
fn a_soft_purged_copy_stays_stale_until_its_own_grace_ends_while_refreshes_fail() {
    let (host, mut w, mut origin, path) = soft_purged_alice();
    let failing = Response {
        status: 503,
        headers: vec![("content-type".into(), b"text/plain".to_vec())],
        body: b"down".to_vec(),
    };
    let refresh_fails = |w: &mut Vm| {
        w.tick().expect("tick");
        for c in w.callouts() {
            w.answer(c.token, &failing).expect("answer");
        }
    };
    assert_eq!(get(&mut w, &mut origin, path, &[]).x_cache(), "STALE");
    refresh_fails(&mut w);
    // 62 minutes after the fill: past an hour from the purge, within TTL + grace.
    host.advance_ms(61 * 60_000);
    let late = get(&mut w, &mut origin, path, &[]);
    assert_eq!((late.status, late.x_cache()), (200, "STALE"));
    refresh_fails(&mut w);
    // 66 minutes: past its own grace, fetched again.
    host.advance_ms(4 * 60_000);
    assert_eq!(get(&mut w, &mut origin, path, &[]).x_cache(), "MISS");
    assert_eq!(origin.count(path), 2, "the fill and the last fetch");
}

#[test]
fn lurker_evicts_purged_objects_on_the_tick_and_retires_bans() {
    let host = host();
    let mut w = host.vm(&config(serde_json::json!({}))).expect("vm");
    let mut origin = Origin::new();
    for i in 0..5 {
        get(&mut w, &mut origin, &format!("/blog/alice/entry/{i}"), &[]);
    }
    assert_eq!(
        host.metric("cachet.objects"),
        0,
        "the gauges move on the tick"
    );
    w.tick().expect("tick");
    assert_eq!(host.metric("cachet.objects"), 5);
    host.advance_ms(1_000);
    let auth = format!("Bearer {TOKEN}");
    admin(
        &mut w,
        "POST",
        "/.cachet/purge",
        &[("authorization", &auth), ("surrogate-key", "blog-alice")],
        None,
    );
    for _ in 0..3 {
        host.advance_ms(100);
        w.tick().expect("tick");
    }
    assert_eq!(host.metric("cachet.lurker_evicted"), 5);
    assert_eq!(host.metric("cachet.objects"), 0);
    assert_eq!(host.metric("cachet.bytes_stored"), 0);
    assert!(host.metric("cachet.lurker_passes") >= 1);
    assert_eq!(
        host.metric("cachet.bans"),
        1,
        "kept while a fetch sent before it may still arrive ([origin].first_byte_timeout)"
    );
    host.advance_ms(16_000);
    for _ in 0..2 {
        host.advance_ms(100);
        w.tick().expect("tick");
    }
    assert_eq!(
        host.metric("cachet.bans"),
        0,
        "retired by a completed lurker pass once no fetch can predate it"
    );
}

#[test]
fn the_shared_tier_never_exceeds_its_bound() {
    let host = host();
    let bound = 64 * 1024;
    let cfg = config(serde_json::json!({"envoy": {"shared_bytes": bound, "local_bytes": 8192}}));
    let mut w = host.vm(&cfg).expect("vm");
    let mut origin = Origin::new();
    for i in 0..200 {
        let r = get(&mut w, &mut origin, &format!("/blog/alice/entry/{i}"), &[]);
        assert_eq!(r.status, 200);
        let held = host.shared_bytes("cachet.o.");
        assert!(held <= bound, "{held} bytes held after {i} inserts");
        w.tick().expect("tick");
        assert!(host.metric("cachet.bytes_stored") <= i64::try_from(bound).unwrap_or(0));
    }
    assert!(host.metric("cachet.evictions") > 0);
    assert!(host.metric("cachet.local_evictions") > 0);
}

#[test]
fn a_bad_configuration_serves_with_the_built_in_default_not_a_refusal() {
    let host = host();
    let auth = format!("Bearer {TOKEN}");
    for bad in [
        "",
        "not json",
        r#"{"routes":[{"name":"a","ttl":"5 parsecs"}]}"#,
        r#"{"envoy":{"tick":"1ms"}}"#,
    ] {
        // Issue 27 item 13: no refusal (Envoy would answer every request with an error).
        let mut w = host
            .vm(bad)
            .expect("a rejected configuration still starts the VM");
        let logs = w.logs().join("\n");
        assert!(logs.contains("cachet: CONFIGURATION REJECTED"), "{logs}");
        assert!(logs.contains("the built-in configuration"), "{logs}");
        assert!(!logs.contains("panicked"), "{logs}");
        assert_eq!(host.metric("cachet.config_rejected"), 1, "{bad:?}");
        let mut origin = Origin::new();
        let r = get(&mut w, &mut origin, "/robots.txt", &[]);
        assert_eq!(r.status, 200, "{bad:?}");
        // The default has no routes (everything passes uncached) and no admin token.
        let (_, o) = w
            .request(req("GET", BLOG, "/blog/alice/entry/1", &[]), None)
            .expect("request");
        assert!(matches!(o, Outcome::Upstream(_)), "{o:?}");
        let r = admin(
            &mut w,
            "GET",
            "/.cachet/config",
            &[("authorization", &auth)],
            None,
        );
        assert_eq!(r.status, 403);
    }
}

#[test]
fn a_rejected_configuration_update_keeps_the_last_good_one_in_the_same_vm() {
    let host = host();
    let auth = format!("Bearer {TOKEN}");
    let mut w = host.vm(&config(serde_json::json!({}))).expect("vm");
    let mut origin = Origin::new();
    let path = "/blog/alice/entry/1";
    assert_eq!(
        get(&mut w, &mut origin, path, &[("user-agent", DESKTOP)]).x_cache(),
        "MISS"
    );
    // The update with a typo: a new root context in the same VM, not refused.
    let typo = config(serde_json::json!({"routes": [{"name": "x", "tll": "5m"}]}));
    assert!(w.reconfigure(&typo).expect("reconfigure"));
    let logs = w.logs().join("\n");
    assert!(logs.contains("CONFIGURATION REJECTED"), "{logs}");
    assert!(logs.contains("tll"), "{logs}");
    assert_eq!(host.metric("cachet.config_rejected"), 1);
    // The last good configuration serves: robots.txt, a HIT, the admin API.
    assert_eq!(get(&mut w, &mut origin, "/robots.txt", &[]).status, 200);
    let hit = get(&mut w, &mut origin, path, &[("user-agent", DESKTOP)]);
    assert_eq!(hit.x_cache(), "HIT");
    assert_eq!(origin.count(path), 1);
    host.advance_ms(1);
    let r = admin(
        &mut w,
        "POST",
        "/.cachet/ban",
        &[("authorization", &auth)],
        Some(b"obj.http.x-url ~ ^/blog/alice/"),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let r = admin(
        &mut w,
        "GET",
        "/.cachet/config",
        &[("authorization", &auth)],
        None,
    );
    assert_eq!(r.status, 200);
    let v: serde_json::Value = serde_json::from_str(&r.text()).expect("json");
    assert_eq!(v["in_force"], "last-good", "{v}");
    assert!(
        v["rejected"].as_str().is_some_and(|e| e.contains("tll")),
        "{v}"
    );
    // A good update is in force again.
    assert!(
        w.reconfigure(&config(serde_json::json!({})))
            .expect("reconfigure")
    );
    assert_eq!(host.metric("cachet.config_rejected"), 0);
    let r = admin(
        &mut w,
        "GET",
        "/.cachet/config",
        &[("authorization", &auth)],
        None,
    );
    let v: serde_json::Value = serde_json::from_str(&r.text()).expect("json");
    assert_eq!(v["in_force"], "configured", "{v}");
}

#[test]
fn workspace_watermark_is_proven_in_shadow_mode() {
    // The roll-out step before watermark clearing (the default): zero everything, and
    // verify every reset that nothing was written above the watermark.
    let host = host();
    let cfg = config(serde_json::json!({"workspace": {"mode": "shadow", "verify_one_in": 1}}));
    let mut w = host.vm(&cfg).expect("vm");
    let mut origin = Origin::conditional();
    let path = "/blog/alice/entry/1";
    let gzip = [("accept-encoding", "gzip")];
    let mix: [&[(&str, &str)]; 6] = [
        &[],
        &gzip,
        &[("range", "bytes=0-9")],
        &[("if-none-match", "\"nope\""), ("user-agent", IPHONE)],
        &[("cookie", "session=1"), ("authorization", "Bearer x")],
        &[("range", "bytes=5-"), ("accept-encoding", "gzip")],
    ];
    for extra in mix {
        get(&mut w, &mut origin, path, extra);
        get(&mut w, &mut origin, "/blog/bob/entry/2?b=1&a=2", extra);
    }
    host.advance_ms(3_600_000);
    get(&mut w, &mut origin, path, &[]);
    assert!(host.metric("cachet.workspace_watermark") > 0);
    assert_eq!(host.metric("cachet.workspace_violations"), 0);
}

#[test]
fn refresh_ahead_refreshes_before_expiry_without_serving_stale() {
    let host = host();
    let cfg = config(serde_json::json!({}));
    let mut v: serde_json::Value = serde_json::from_str(&cfg).expect("json");
    for r in v["routes"].as_array_mut().expect("routes") {
        r["early_refresh"] = serde_json::json!({"policy": "threshold", "fraction": 0.5});
    }
    let mut w = host.vm(&v.to_string()).expect("vm");
    let mut origin = Origin::new();
    let path = "/blog/alice/entry/8";
    assert_eq!(get(&mut w, &mut origin, path, &[]).x_cache(), "MISS");
    host.advance_ms(200_000); // 2/3 of max-age=300
    let r = get(&mut w, &mut origin, path, &[]);
    assert_eq!(r.x_cache(), "HIT", "served from cache while refreshing");
    w.tick().expect("tick");
    let calls = w.callouts();
    assert_eq!(calls.len(), 1, "one background refresh");
    let resp = origin.serve(&calls[0].headers);
    w.answer(calls[0].token, &resp).expect("answer");
    let r = get(&mut w, &mut origin, path, &[]);
    assert_eq!((r.x_cache(), r.header("age")), ("HIT", Some("0")));
    assert_eq!(host.metric("cachet.stale"), 0);
    assert_eq!(origin.count(path), 2);
}

#[test]
fn fleet_ban_feed_is_polled_on_the_tick_and_applied_on_every_worker() {
    let host = host();
    let cfg = config(serde_json::json!({"envoy": {
        "ban_feed_cluster": "bans", "ban_feed_path": "/.cachet/bans", "ban_feed_interval": "5s"
    }}));
    let mut w1 = host.vm(&cfg).expect("vm 1");
    let mut w2 = host.vm(&cfg).expect("vm 2");
    let mut origin = Origin::new();
    let path = "/blog/alice/entry/1";
    assert_eq!(get(&mut w1, &mut origin, path, &[]).x_cache(), "MISS");
    assert_eq!(get(&mut w2, &mut origin, path, &[]).x_cache(), "HIT");
    host.advance_ms(1_000);
    // One worker (the lurker-lease holder) polls the feed.
    w1.tick().expect("tick");
    w2.tick().expect("tick");
    let calls: Vec<_> = w1.callouts().into_iter().chain(w2.callouts()).collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let call = &calls[0];
    assert_eq!(call.cluster, "bans");
    assert_eq!(call.header(":path"), Some("/.cachet/bans"));
    assert_eq!(
        call.header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    let feed = serde_json::json!([{
        "id": 7, "at_ms": host.now_ms(), "kind": "ban",
        "expr": "obj.http.content-type ~ \"^text/html\"", "lurker_friendly": true
    }]);
    let vm = if w1.callouts().is_empty() {
        &mut w2
    } else {
        &mut w1
    };
    vm.answer(
        call.token,
        &Response {
            status: 200,
            headers: vec![],
            body: feed.to_string().into_bytes(),
        },
    )
    .expect("answer");
    host.advance_ms(1_000);
    assert_eq!(get(&mut w1, &mut origin, path, &[]).x_cache(), "MISS");
    assert_eq!(
        get(&mut w2, &mut origin, path, &[]).x_cache(),
        "HIT",
        "the refetched copy is newer than the ban"
    );
    assert_eq!(host.metric("cachet.feed_updates"), 1);
    // The same feed again changes nothing (ids already merged).
    host.advance_ms(5_000);
    w1.tick().expect("tick");
    w2.tick().expect("tick");
    let calls: Vec<_> = w1.callouts().into_iter().chain(w2.callouts()).collect();
    assert_eq!(calls.len(), 1);
    let vm = if w1.callouts().is_empty() {
        &mut w2
    } else {
        &mut w1
    };
    vm.answer(
        calls[0].token,
        &Response {
            status: 200,
            headers: vec![],
            body: feed.to_string().into_bytes(),
        },
    )
    .expect("answer");
    assert_eq!(host.metric("cachet.feed_updates"), 1);
}

#[test]
fn head_requests_are_answered_from_the_cache_without_a_body() {
    let host = host();
    let mut w = host.vm(&config(serde_json::json!({}))).expect("vm");
    let mut origin = Origin::new();
    let path = "/blog/alice/entry/11";
    let (id, o) = w.request(req("HEAD", BLOG, path, &[]), None).expect("req");
    let calls = w.callouts();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].header(":method"),
        Some("GET"),
        "a HEAD miss fetches the object"
    );
    let resp = origin.serve(&calls[0].headers);
    w.answer(calls[0].token, &resp).expect("answer");
    let Outcome::Paused = o else { panic!("{o:?}") };
    let Outcome::Reply(head) = w.poll(id) else {
        panic!("not answered")
    };
    assert_eq!((head.x_cache(), head.body.len()), ("MISS", 0));
    assert!(head.header("content-length").is_some_and(|l| l != "0"));
    w.finish(id).expect("finish");
    let hit = get(&mut w, &mut origin, path, &[]);
    assert_eq!(hit.x_cache(), "HIT");
    assert_eq!(hit.header("content-length"), head.header("content-length"));
    assert_eq!(origin.count(path), 1);
}

/// The configuration with every cached route's `extra` fields set (e.g. early refresh, keep).
fn config_routes(extra: &serde_json::Value) -> String {
    let mut v: serde_json::Value =
        serde_json::from_str(&config(serde_json::json!({}))).expect("json");
    for r in v["routes"].as_array_mut().expect("routes") {
        merge(r, extra.clone());
    }
    v.to_string()
}

/// The only pending callout of `vm`.
fn one_callout(vm: &Vm) -> Callout {
    let calls = vm.callouts();
    assert_eq!(calls.len(), 1, "{calls:?}");
    calls.into_iter().next().expect("one callout")
}

/// Starts a request for `path` that waits on its own origin fetch: the stream and the
/// fetch.
fn leader(vm: &mut Vm, path: &str) -> (u32, Callout) {
    let (id, o) = vm.request(req("GET", BLOG, path, &[]), None).expect("req");
    assert_eq!(o, Outcome::Paused);
    (id, one_callout(vm))
}

/// Answers `call` with `resp`; the reply stream `id` then gets.
fn answered(vm: &mut Vm, id: u32, call: &Callout, resp: &Response) -> Response {
    vm.answer(call.token, resp).expect("answer");
    let Outcome::Reply(r) = vm.poll(id) else {
        panic!("stream {id} not answered")
    };
    vm.finish(id).expect("finish");
    r
}

/// A plain origin answer.
fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> Response {
    Response {
        status,
        headers: headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
            .collect(),
        body: body.as_bytes().to_vec(),
    }
}

/// A fresh host with two workers on `cfg`.
fn workers(cfg: &str) -> (Host, Vm, Vm) {
    let host = host();
    let w1 = host.vm(cfg).expect("vm 1");
    let w2 = host.vm(cfg).expect("vm 2");
    (host, w1, w2)
}

/// Gets `path` through `w` (a miss, or a hit on what another worker stored), lets it go stale (past max-age=300, within the route's 1 h
/// grace), serves it `STALE` once, and returns the first response and the background
/// refresh the tick dispatched.
fn stale_with_refresh(w: &mut Vm, origin: &mut Origin, path: &str) -> (Response, Callout) {
    let first = get(w, origin, path, &[]);
    w.host().advance_ms(301_000);
    assert_eq!(get(w, origin, path, &[]).x_cache(), "STALE");
    w.tick().expect("tick");
    (first, one_callout(w))
}

#[test]
fn refresh_ahead_revalidates_with_the_stored_etag_and_a_304_freshens_both_workers() {
    let (host, mut w1, mut w2) = workers(&config_routes(&serde_json::json!({
        "early_refresh": {"policy": "threshold", "fraction": 0.5}
    })));
    let mut origin = Origin::conditional();
    let path = "/blog/alice/entry/21";
    let first = get(&mut w1, &mut origin, path, &[]);
    assert_eq!(first.x_cache(), "MISS");
    let etag = first.header("etag").expect("etag stored").to_owned();
    assert_eq!(get(&mut w2, &mut origin, path, &[]).x_cache(), "HIT");
    host.advance_ms(200_000); // 2/3 of max-age=300: refresh ahead
    let r = get(&mut w1, &mut origin, path, &[]);
    assert_eq!((r.x_cache(), r.header("age")), ("HIT", Some("200")));
    w1.tick().expect("tick");
    let call = one_callout(&w1);
    assert_eq!(call.header("if-none-match"), Some(etag.as_str()));
    assert_eq!(call.header("if-modified-since"), Some(MODIFIED));
    let resp = origin.serve(&call.headers);
    assert_eq!(resp.status, 304);
    w1.answer(call.token, &resp).expect("answer");
    assert_eq!(host.metric("cachet.revalidated"), 1);
    // Freshened: same body, new Age base, no new refresh. The other worker's in-VM copy
    // is in its refresh-ahead window: it finds the newer version in the shared tier and
    // serves that, without a refresh of its own.
    let shared_hits = host.metric("cachet.hits_shared");
    for w in [&mut w1, &mut w2] {
        let r = get(w, &mut origin, path, &[]);
        assert_eq!((r.x_cache(), r.header("age")), ("HIT", Some("0")));
        assert_eq!(r.text(), first.text());
        w.tick().expect("tick");
        assert!(w.callouts().is_empty());
    }
    assert_eq!(host.metric("cachet.hits_shared"), shared_hits + 1);
    assert_eq!((origin.count(path), origin.not_modified), (2, 1));
}

#[test]
fn a_stale_refresh_revalidates_and_a_304_freshens_the_stored_copy() {
    let (host, mut w1, mut w2) = workers(&config(serde_json::json!({})));
    let mut origin = Origin::conditional();
    let path = "/blog/alice/entry/22";
    assert_eq!(get(&mut w2, &mut origin, path, &[]).x_cache(), "MISS");
    host.advance_ms(1_000);
    let (first, call) = stale_with_refresh(&mut w1, &mut origin, path);
    assert_eq!(first.x_cache(), "HIT", "stored by the other worker");
    let etag = first.header("etag").expect("etag").to_owned();
    assert_eq!(call.header("if-none-match"), Some(etag.as_str()));
    let resp = origin.serve(&call.headers);
    assert_eq!(resp.status, 304);
    w1.answer(call.token, &resp).expect("answer");
    for w in [&mut w1, &mut w2] {
        let r = get(w, &mut origin, path, &[]);
        assert_eq!((r.x_cache(), r.header("age")), ("HIT", Some("0")));
        assert_eq!(r.text(), first.text());
    }
    assert_eq!(host.metric("cachet.stale"), 1);
    assert_eq!(host.metric("cachet.revalidated"), 1);
    // The freshened object keeps its validators: the next refresh is conditional too.
    host.advance_ms(301_000);
    assert_eq!(get(&mut w2, &mut origin, path, &[]).x_cache(), "STALE");
    w2.tick().expect("tick");
    assert_eq!(
        one_callout(&w2).header("if-none-match"),
        Some(etag.as_str())
    );
}

#[test]
fn a_refresh_answered_private_leaves_a_marker_and_the_old_copy_is_never_served() {
    let (_host, mut w1, mut w2) = workers(&config(serde_json::json!({})));
    let mut origin = Origin::conditional();
    let path = "/blog/alice/entry/23";
    assert_eq!(get(&mut w2, &mut origin, path, &[]).x_cache(), "MISS");
    let (first, call) = stale_with_refresh(&mut w1, &mut origin, path);
    // The blog turned private: a full answer that may not be stored.
    let private = answer(200, &[("cache-control", "private")], "now private");
    w1.answer(call.token, &private).expect("answer");
    for w in [&mut w1, &mut w2] {
        let (id, o) = w.request(req("GET", BLOG, path, &[]), None).expect("req");
        assert!(matches!(o, Outcome::Upstream(_)), "hit-for-pass: {o:?}");
        let r = w.upstream_response(id, &private).expect("upstream");
        w.finish(id).expect("finish");
        assert_eq!((r.x_cache(), r.text().as_str()), ("PASS", "now private"));
        assert_ne!(r.text(), first.text());
        assert!(w.callouts().is_empty());
    }
}

#[test]
fn a_304_updates_the_stored_fields_it_carries_but_not_the_body_framing() {
    let (_host, mut w1, mut w2) = workers(&config(serde_json::json!({})));
    let mut origin = Origin::conditional();
    let path = "/blog/alice/entry/25";
    assert_eq!(get(&mut w2, &mut origin, path, &[]).x_cache(), "MISS");
    let (first, call) = stale_with_refresh(&mut w1, &mut origin, path);
    assert_eq!(first.header("cache-control"), Some("public, max-age=300"));
    // RFC 9111 §3.2: the 304's fields replace the stored ones, except those the stored
    // body depends on.
    let not_modified = answer(
        304,
        &[
            ("cache-control", "public, max-age=600"),
            ("x-release", "2026-11-22"),
            ("content-length", "0"),
            ("content-encoding", "br"),
            ("vary", "Cookie"),
        ],
        "",
    );
    w1.answer(call.token, &not_modified).expect("answer");
    for w in [&mut w1, &mut w2] {
        let r = get(w, &mut origin, path, &[]);
        assert_eq!((r.x_cache(), r.header("age")), ("HIT", Some("0")));
        assert_eq!(r.text(), first.text(), "same body");
        assert_eq!(r.header("cache-control"), Some("public, max-age=600"));
        assert_eq!(r.header("x-release"), Some("2026-11-22"));
        assert_eq!(r.header("content-type"), first.header("content-type"));
        assert_eq!(r.header("vary"), first.header("vary"));
        assert_ne!(r.header("content-encoding"), Some("br"));
    }
}

#[test]
fn a_304_that_says_private_leaves_a_marker_instead_of_freshening() {
    let (host, mut w1, mut w2) = workers(&config(serde_json::json!({})));
    let mut origin = Origin::conditional();
    let path = "/blog/alice/entry/26";
    assert_eq!(get(&mut w2, &mut origin, path, &[]).x_cache(), "MISS");
    let (first, call) = stale_with_refresh(&mut w1, &mut origin, path);
    let not_modified = answer(
        304,
        &[("cache-control", "private"), ("set-cookie", "session=9")],
        "",
    );
    w1.answer(call.token, &not_modified).expect("answer");
    assert_eq!(host.metric("cachet.revalidated"), 0);
    let private = answer(200, &[("cache-control", "private")], "now private");
    for w in [&mut w1, &mut w2] {
        let (id, o) = w.request(req("GET", BLOG, path, &[]), None).expect("req");
        assert!(matches!(o, Outcome::Upstream(_)), "hit-for-pass: {o:?}");
        let r = w.upstream_response(id, &private).expect("upstream");
        w.finish(id).expect("finish");
        assert_eq!((r.x_cache(), r.text().as_str()), ("PASS", "now private"));
        assert_ne!(r.text(), first.text());
    }
}

#[test]
fn a_refresh_answered_503_keeps_the_stored_copy_and_the_next_request_retries_once() {
    let host = host();
    let mut w = host.vm(&config(serde_json::json!({}))).expect("vm");
    let mut origin = Origin::conditional();
    let path = "/blog/alice/entry/24";
    let (first, call) = stale_with_refresh(&mut w, &mut origin, path);
    assert_eq!(first.x_cache(), "MISS");
    let down = answer(503, &[("cache-control", "no-store")], "origin down");
    w.answer(call.token, &down).expect("answer");
    assert_eq!(host.metric("cachet.origin_errors"), 1);
    // The good copy is kept (served stale within grace), and the refresh lock is gone:
    // the next requests schedule exactly one new refresh.
    for _ in 0..3 {
        let r = get(&mut w, &mut origin, path, &[]);
        assert_eq!((r.x_cache(), r.text()), ("STALE", first.text()));
    }
    w.tick().expect("tick");
    let call = one_callout(&w);
    assert!(call.header("if-none-match").is_some());
    let resp = origin.serve(&call.headers);
    w.answer(call.token, &resp).expect("answer");
    assert_eq!(get(&mut w, &mut origin, path, &[]).x_cache(), "HIT");
    assert_eq!(host.metric("cachet.refreshes"), 2);
}

#[test]
fn waiters_on_another_worker_are_answered_as_the_failed_leader_was() {
    // Issue 28 items 5 and 8: the leader's fetch fails; a request parked behind it on the
    // other worker gets the stored copy within stale-if-error (a revalidation answered
    // 500) or the same 503 (a miss whose callout failed), never a fetch of its own.
    let (host, mut w1, mut w2) = workers(&config_routes(&serde_json::json!({"keep": "1d"})));
    let path = "/blog/alice/entry/26";
    let (id, call) = leader(&mut w1, path);
    let good = answer(
        200,
        &[
            ("cache-control", "max-age=300, stale-if-error=86400"),
            ("etag", "\"g1\""),
        ],
        "the good copy",
    );
    assert_eq!(answered(&mut w1, id, &call, &good).x_cache(), "MISS");
    host.advance_ms(300_000 + 3_600_000 + 1_000); // past the route's 1 h grace
    let (id, call) = leader(&mut w1, path);
    let (waiter, o) = w2.request(req("GET", BLOG, path, &[]), None).expect("req");
    assert_eq!(o, Outcome::Paused);
    let r = answered(&mut w1, id, &call, &answer(500, &[], "oops"));
    assert_eq!((r.status, r.x_cache()), (200, "STALE"));
    host.advance_ms(100);
    w2.tick().expect("tick");
    let Outcome::Reply(r) = w2.poll(waiter) else {
        panic!("waiter not answered")
    };
    assert_eq!(
        (r.status, r.x_cache(), r.text()),
        (200, "STALE", "the good copy".to_owned())
    );
    assert!(w2.callouts().is_empty(), "never a fetch of its own");
    w2.finish(waiter).expect("finish");
    // A miss whose callout fails (reset): the waiter gets the leader's 503.
    let path = "/blog/alice/entry/27";
    let (id, call) = leader(&mut w1, path);
    let (waiter, o) = w2.request(req("GET", BLOG, path, &[]), None).expect("req");
    assert_eq!(o, Outcome::Paused);
    let r = answered(&mut w1, id, &call, &Response::default());
    assert_eq!(r.status, 503);
    host.advance_ms(100);
    w2.tick().expect("tick");
    let Outcome::Reply(r) = w2.poll(waiter) else {
        panic!("waiter not answered")
    };
    assert_eq!(
        (r.status, r.header("retry-after"), r.header("cache-control")),
        (503, Some("5"), Some("no-store"))
    );
    assert!(w2.callouts().is_empty(), "never a fetch of its own");
    w2.finish(waiter).expect("finish");
    // A request that starts after the failure asks the origin again.
    let (id, call) = leader(&mut w2, path);
    let r = answered(&mut w2, id, &call, &good);
    assert_eq!(r.x_cache(), "MISS");
}

#[test]
fn past_grace_within_keep_the_leader_revalidates_before_answering() {
    let (host, mut w1, mut w2) = workers(&config_routes(&serde_json::json!({"keep": "1d"})));
    let mut origin = Origin::conditional();
    let path = "/blog/alice/entry/25";
    let first = get(&mut w1, &mut origin, path, &[]);
    let etag = first.header("etag").expect("etag").to_owned();
    let past_grace = 300_000 + 3_600_000 + 1_000; // max-age 300 s + the route's 1 h grace
    host.advance_ms(past_grace);
    // The leader revalidates in the foreground; a request on the other worker waits.
    let (id, call) = leader(&mut w1, path);
    let (waiter, o) = w2.request(req("GET", BLOG, path, &[]), None).expect("req");
    assert_eq!(o, Outcome::Paused);
    assert!(w2.callouts().is_empty(), "collapsed behind the leader");
    assert_eq!(call.header("if-none-match"), Some(etag.as_str()));
    let resp = origin.serve(&call.headers);
    assert_eq!(resp.status, 304);
    let r = answered(&mut w1, id, &call, &resp);
    assert_eq!(
        (r.status, r.x_cache(), r.header("age")),
        (200, "MISS", Some("0"))
    );
    assert_eq!(r.text(), first.text());
    host.advance_ms(100);
    w2.tick().expect("tick");
    let Outcome::Reply(r) = w2.poll(waiter) else {
        panic!("waiter not answered")
    };
    assert_eq!((r.x_cache(), r.text()), ("HIT", first.text()));
    w2.finish(waiter).expect("finish");
    assert_eq!(host.metric("cachet.revalidated"), 1);
    // Past grace again, and the origin answers an error: it goes out as the origin sent
    // it (RFC 9111 §4.3.3, as on the edge), the object is kept.
    host.advance_ms(past_grace);
    let (id, call) = leader(&mut w1, path);
    let r = answered(&mut w1, id, &call, &answer(502, &[], "bad gateway"));
    assert_eq!(
        (r.status, r.x_cache(), r.text()),
        (502, "PASS", "bad gateway".to_owned())
    );
    // No answer at all (reset): a clean 503, the object kept.
    let (id, call) = leader(&mut w1, path);
    let r = answered(&mut w1, id, &call, &Response::default());
    assert_eq!(
        (r.status, r.header("retry-after"), r.header("cache-control")),
        (503, Some("5"), Some("no-store"))
    );
    // Envoy's own reply to the callout (its async client's 503 on a reset before the
    // headers): never taken for the origin's answer, the same clean 503 (issue 28 item 6).
    let (id, call) = leader(&mut w1, path);
    let local = answer(
        503,
        &[("content-type", "text/plain")],
        "upstream connect error or disconnect/reset before headers. reset reason: connection termination",
    );
    w1.answer_local(call.token, &local).expect("answer");
    let Outcome::Reply(r) = w1.poll(id) else {
        panic!("stream {id} not answered")
    };
    w1.finish(id).expect("finish");
    assert_eq!(
        (r.status, r.header("retry-after"), r.text()),
        (503, Some("5"), "origin unavailable\n".to_owned())
    );
    // Kept: the next leader revalidates the same copy again (and a 304 serves it).
    let (id, call) = leader(&mut w1, path);
    assert_eq!(call.header("if-none-match"), Some(etag.as_str()));
    let resp = origin.serve(&call.headers);
    let r = answered(&mut w1, id, &call, &resp);
    assert_eq!((r.x_cache(), r.text()), ("MISS", first.text()));
    // A changed page replaces the object.
    host.advance_ms(past_grace);
    let (id, call) = leader(&mut w1, path);
    let changed = answer(
        200,
        &[
            ("content-type", "text/html"),
            ("cache-control", "public, max-age=300"),
            ("etag", "\"v2\""),
        ],
        "<html>edited</html>",
    );
    let r = answered(&mut w1, id, &call, &changed);
    assert_eq!(
        (r.x_cache(), r.text().as_str()),
        ("MISS", "<html>edited</html>")
    );
    let r = get(&mut w2, &mut origin, path, &[]);
    assert_eq!((r.x_cache(), r.header("etag")), ("HIT", Some("\"v2\"")));
}

#[test]
fn a_304_that_turns_the_page_private_reaches_only_its_client() {
    let (host, mut w1, mut w2) = workers(&config_routes(&serde_json::json!({"keep": "1d"})));
    let mut origin = Origin::conditional();
    let path = "/blog/alice/entry/28";
    let first = get(&mut w1, &mut origin, path, &[]);
    host.advance_ms(300_000 + 3_600_000 + 1_000); // past max-age and the route's grace
    let (id, call) = leader(&mut w1, path);
    assert!(call.header("if-none-match").is_some());
    let private = answer(
        304,
        &[
            ("cache-control", "private, no-store"),
            ("set-cookie", "session=s1"),
        ],
        "",
    );
    // The requester gets the stored body with the 304's fields and its cookie, in one
    // round trip, as on the edge (`cachet_http::drive`).
    let r = answered(&mut w1, id, &call, &private);
    assert_eq!((r.status, r.x_cache()), (200, "PASS"));
    assert_eq!(r.text(), first.text());
    assert_eq!(r.header("cache-control"), Some("private, no-store"));
    assert_eq!(r.header("set-cookie"), Some("session=s1"));
    assert!(w1.callouts().is_empty(), "no second fetch");
    // Nobody else gets the stored copy: the marker sends them to the origin.
    let (id2, o) = w2.request(req("GET", BLOG, path, &[]), None).expect("req");
    assert!(matches!(o, Outcome::Upstream(_)), "passed: {o:?}");
    w2.finish(id2).expect("finish");
}

#[test]
fn a_miss_whose_callout_fails_is_a_clean_503() {
    let host = host();
    let mut w = host.vm(&config(serde_json::json!({}))).expect("vm");
    let (id, call) = leader(&mut w, "/blog/alice/entry/26");
    let r = answered(&mut w, id, &call, &Response::default()); // status 0: reset
    assert_eq!(
        (r.status, r.header("retry-after"), r.header("cache-control")),
        (503, Some("5"), Some("no-store"))
    );
    assert_eq!(host.metric("cachet.origin_errors"), 1);
}

#[test]
fn bans_see_the_shared_object_metadata() {
    let host = host();
    let mut w = host.vm(&config(serde_json::json!({}))).expect("vm");
    let mut origin = Origin::new();
    let auth = format!("Bearer {TOKEN}");
    let (a, b) = ("/blog/alice/entry/27", "/blog/bob/entry/27");
    for p in [a, b] {
        assert_eq!(get(&mut w, &mut origin, p, &[]).x_cache(), "MISS");
    }
    // Lurker-friendly ban on the stored URL (`obj.http.x-url`, Meta's ban target).
    host.advance_ms(1_000);
    let r = admin(
        &mut w,
        "POST",
        "/.cachet/ban",
        &[("authorization", &auth)],
        Some(b"obj.http.x-url ~ ^/blog/alice/"),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    host.advance_ms(1); // the refill after the ban's millisecond (`banlog::stamp_ms`)
    assert_eq!(get(&mut w, &mut origin, a, &[]).x_cache(), "MISS");
    assert_eq!(get(&mut w, &mut origin, b, &[]).x_cache(), "HIT");
    // One object alone, by its per-object surrogate key (`object::object_tag`).
    let tag = (0..65_536u32)
        .filter_map(|s| host.shared_value(&format!("cachet.o.{s}")))
        .filter(|v| v.windows(b.len()).any(|w| w == b.as_bytes()))
        .find_map(|v| {
            let text = String::from_utf8_lossy(&v).into_owned();
            let at = text.find("cachet-obj-")?;
            Some(text[at..at + "cachet-obj-".len() + 16].to_owned())
        })
        .expect("tag in shared data");
    host.advance_ms(1_000);
    let r = admin(
        &mut w,
        "POST",
        "/.cachet/purge",
        &[("authorization", &auth), ("surrogate-key", &tag)],
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    host.advance_ms(1); // the refill after the purge's millisecond (`banlog::stamp_ms`)
    assert_eq!(get(&mut w, &mut origin, b, &[]).x_cache(), "MISS");
    assert_eq!(get(&mut w, &mut origin, a, &[]).x_cache(), "HIT");
}

/// One request for `path` with `extra` request headers, answered by the origin with
/// `resp` when it misses: the reply.
fn varied(vm: &mut Vm, path: &str, extra: &[(&str, &str)], resp: &Response) -> Response {
    let (id, o) = vm
        .request(req("GET", BLOG, path, extra), None)
        .expect("req");
    match o {
        Outcome::Reply(r) => {
            vm.finish(id).expect("finish");
            r
        }
        Outcome::Paused => {
            let call = one_callout(vm);
            answered(vm, id, &call, resp)
        }
        other @ Outcome::Upstream(_) => panic!("{other:?}"),
    }
}

#[test]
fn vary_on_a_request_field_keeps_bounded_variants_on_every_worker() {
    let (_host, mut w1, mut w2) = workers(&config(serde_json::json!({
        "edge": {"max_variants": 2}
    })));
    let path = "/blog/alice/entry/31";
    let page = |lang: &str| {
        answer(
            200,
            &[
                ("cache-control", "max-age=300"),
                ("content-type", "text/html"),
                ("vary", "Accept-Language, User-Agent"),
            ],
            lang,
        )
    };
    let en = [("accept-language", "en")];
    let fr = [("accept-language", "fr")];
    let de = [("accept-language", "de")];
    let r = varied(&mut w1, path, &en, &page("en"));
    assert_eq!((r.x_cache(), r.body.as_slice()), ("MISS", &b"en"[..]));
    assert!(
        r.header("vary")
            .is_some_and(|v| v.to_ascii_lowercase().contains("accept-language"))
    );
    let r = varied(&mut w1, path, &fr, &page("fr"));
    assert_eq!((r.x_cache(), r.body.as_slice()), ("MISS", &b"fr"[..]));
    // Both variants are served from the cache, on the other worker too.
    for (on_w2, h, body) in [(true, &en, "en"), (false, &fr, "fr"), (true, &fr, "fr")] {
        let w = if on_w2 { &mut w2 } else { &mut w1 };
        let r = varied(w, path, h, &page("unexpected"));
        assert_eq!((r.x_cache(), r.body.as_slice()), ("HIT", body.as_bytes()));
    }
    // A third variant is over max_variants = 2: answered, not stored.
    let r = varied(&mut w1, path, &de, &page("de"));
    assert_eq!((r.x_cache(), r.body.as_slice()), ("PASS", &b"de"[..]));
    let r = varied(&mut w1, path, &de, &page("de"));
    assert_eq!(r.x_cache(), "PASS");
    // Vary: * is never stored.
    let star = answer(200, &[("cache-control", "max-age=300"), ("vary", "*")], "x");
    let r = varied(&mut w1, "/blog/alice/entry/32", &en, &star);
    assert_eq!(r.x_cache(), "PASS");
    assert_eq!(
        varied(&mut w1, "/blog/alice/entry/32", &en, &star).x_cache(),
        "PASS"
    );
}

#[test]
fn the_waiter_queue_of_a_key_is_bounded_by_collapse_max_waiters() {
    let host = host();
    let mut w = host
        .vm(&config(serde_json::json!({"collapse": {"max_waiters": 2}})))
        .expect("vm");
    let path = "/blog/alice/entry/43";
    let mut outcomes = Vec::new();
    for _ in 0..5 {
        let (_, o) = w.request(req("GET", BLOG, path, &[]), None).expect("req");
        outcomes.push(o);
    }
    assert_eq!(w.callouts().len(), 1, "one leader");
    assert_eq!(host.metric("cachet.collapsed_waiters"), 2, "two queued");
    let upstream = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Upstream(_)))
        .count();
    assert_eq!(
        upstream, 2,
        "the rest go to the origin uncollapsed: {outcomes:?}"
    );
    assert_eq!(host.metric("cachet.collapse_key_full"), 2);
}

#[test]
fn the_waiter_queue_is_bounded_in_keys_by_collapse_max_keys() {
    let host = host();
    let mut w = host
        .vm(&config(serde_json::json!({"collapse": {"max_keys": 1}})))
        .expect("vm");
    let mut outcomes = Vec::new();
    for path in ["/blog/alice/entry/44", "/blog/alice/entry/45"] {
        for _ in 0..2 {
            let (_, o) = w.request(req("GET", BLOG, path, &[]), None).expect("req");
            outcomes.push(o);
        }
    }
    assert_eq!(w.callouts().len(), 2, "one leader per key: {outcomes:?}");
    assert_eq!(host.metric("cachet.collapsed_waiters"), 1, "one key queued");
    assert_eq!(host.metric("cachet.collapse_keys_full"), 1);
    assert!(
        matches!(outcomes[3], Outcome::Upstream(_)),
        "the second key's follower goes to the origin uncollapsed: {outcomes:?}"
    );
}

/// Issue 13: a fill whose answer is over `[edge].max_object_bytes` is never copied into
/// the VM: the leader and its waiters go to the origin through the router (streamed by
/// Envoy) and nothing is stored.
#[test]
fn an_answer_over_max_object_bytes_passes_through_the_router_unstored() {
    let host = host();
    let mut w = host
        .vm(&config(
            serde_json::json!({"edge": {"max_object_bytes": 1024}}),
        ))
        .expect("vm");
    let path = "/blog/alice/entry/46";
    let (leader, o) = w.request(req("GET", BLOG, path, &[]), None).expect("req");
    assert_eq!(o, Outcome::Paused);
    let (waiter, o) = w.request(req("GET", BLOG, path, &[]), None).expect("req");
    assert_eq!(o, Outcome::Paused, "collapsed behind the leader");
    let call = one_callout(&w);
    let big = Response {
        status: 200,
        headers: vec![("cache-control".into(), b"public, max-age=60".to_vec())],
        body: vec![b'x'; 4096],
    };
    w.answer(call.token, &big).expect("answer");
    assert!(
        matches!(w.poll(leader), Outcome::Upstream(_)),
        "the leader goes to the origin through the router"
    );
    // Nothing was stored, so the request behind it is not answered by it: it fills in
    // turn, one origin fetch at a time per key (the edge's rule, docs/exchange.md D4),
    // sent from the root context on the tick (a stream's context may be gone before the
    // answer).
    assert_eq!(w.poll(waiter), Outcome::Paused);
    assert!(w.callouts().is_empty(), "not from the leader's callback");
    w.tick().expect("tick");
    let call = one_callout(&w);
    w.answer(call.token, &big).expect("answer");
    assert!(
        matches!(w.poll(waiter), Outcome::Upstream(_)),
        "the waiter goes to the origin through the router"
    );
    assert_eq!(host.metric("cachet.objects"), 0, "nothing stored");
    // The next request is a plain miss again (no object, no marker: not per-user).
    let (_, o) = w.request(req("GET", BLOG, path, &[]), None).expect("req");
    assert_eq!(o, Outcome::Paused);
    assert_eq!(w.callouts().len(), 1);
}

/// The configuration with `[envoy].fill = "router"` and `extra` merged in.
fn router_config(extra: serde_json::Value) -> String {
    let mut v =
        serde_json::json!({"envoy": {"cluster": "origin", "tick": "100ms", "fill": "router"}});
    merge(&mut v, extra);
    config(v)
}

fn upstream_headers(o: &Outcome) -> cachet_envoy_host_tests::Headers {
    match o {
        Outcome::Upstream(h) => h.clone(),
        other => panic!("expected the request to go upstream, got {other:?}"),
    }
}

fn field<'a>(h: &'a cachet_envoy_host_tests::Headers, name: &str) -> Option<&'a str> {
    h.iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, v)| std::str::from_utf8(v).ok())
}

#[test]
fn a_router_fill_goes_upstream_as_the_fill_and_is_stored_and_answered_miss() {
    let (host, mut w1, mut w2) = workers(&router_config(serde_json::json!({})));
    let mut origin = Origin::new();
    let path = "/blog/alice/entry/61";
    let client = [
        ("user-agent", DESKTOP),
        ("cookie", "session=mine"),
        ("range", "bytes=0-9"),
        ("if-none-match", "\"theirs\""),
        ("accept-encoding", "gzip"),
    ];
    let (id, o) = w1
        .request(req("GET", "BLOG.example.", path, &client), None)
        .expect("req");
    let h = upstream_headers(&o);
    assert_eq!(w1.callouts().len(), 0, "no callout: the router fetches");
    assert_eq!(
        field(&h, ":authority"),
        Some(BLOG),
        "normalized host: {h:?}"
    );
    assert_eq!(field(&h, ":method"), Some("GET"));
    assert_eq!(field(&h, "x-cachet-device"), Some("pc"));
    for absent in ["range", "if-none-match"] {
        assert_eq!(
            field(&h, absent),
            None,
            "{absent} never reaches a fill: {h:?}"
        );
    }
    // Only [origin].fill_fields of the client's: never its cookie (cachet_http::fill).
    assert_eq!(field(&h, "cookie"), None);
    assert_eq!(
        field(&h, "x-forwarded-proto"),
        Some("http"),
        "Envoy routes on it"
    );
    let resp = origin.serve(&h);
    let r = w1.upstream_response(id, &resp).expect("response");
    w1.finish(id).expect("finish");
    // The client's own range is answered from what was stored.
    assert_eq!((r.status, r.x_cache()), (206, "MISS"), "{:?}", w1.logs());
    assert_eq!(r.body.len(), 10);
    let again = get(&mut w2, &mut origin, path, &[("user-agent", DESKTOP)]);
    assert_eq!(again.x_cache(), "HIT");
    assert_eq!(origin.count(path), 1);
    assert_eq!(host.metric("cachet.misses"), 1);
}

#[test]
fn a_router_fill_collapses_waiters_and_an_identity_client_asks_for_identity() {
    let (_host, mut w1, mut w2) = workers(&router_config(serde_json::json!({})));
    let mut origin = Origin::new();
    let path = "/blog/alice/entry/62";
    let (leader, o) = w1.request(req("GET", BLOG, path, &[]), None).expect("req");
    let h = upstream_headers(&o);
    // `identity` said, not left out: without the field the origin may pick any coding
    // (RFC 9110 §12.5.3).
    assert_eq!(
        field(&h, "accept-encoding"),
        Some("identity"),
        "an identity client's fill"
    );
    let (waiter, o) = w2.request(req("GET", BLOG, path, &[]), None).expect("req");
    assert_eq!(o, Outcome::Paused, "collapsed behind the router fill");
    let r = w1
        .upstream_response(leader, &origin.serve(&h))
        .expect("response");
    w1.finish(leader).expect("finish");
    assert_eq!(r.x_cache(), "MISS");
    assert_eq!(r.header("content-encoding"), None);
    w2.host().advance_ms(100);
    w2.tick().expect("tick");
    let Outcome::Reply(w) = w2.poll(waiter) else {
        panic!("the waiter is answered from the stored object")
    };
    assert_eq!((w.x_cache(), w.text()), ("HIT", r.text()));
    assert_eq!(origin.count(path), 1);
}

#[test]
fn a_router_fill_answered_private_passes_and_leaves_a_marker() {
    let (_host, mut w1, _w2) = workers(&router_config(serde_json::json!({})));
    let mut origin = Origin::new();
    let path = "/blog/alice/private/63";
    let first = get(&mut w1, &mut origin, path, &[]);
    assert_eq!(
        (first.x_cache(), first.header("set-cookie")),
        ("PASS", Some("session=1"))
    );
    let second = get(&mut w1, &mut origin, path, &[]);
    assert_eq!(second.x_cache(), "PASS");
    assert_ne!(first.text(), second.text(), "never served from cache");
    assert_eq!(origin.count(path), 2);
}

#[test]
fn a_router_fill_over_max_object_bytes_streams_on_unstored() {
    let host = host();
    let mut w = host
        .vm(&router_config(
            serde_json::json!({"edge": {"max_object_bytes": 1024}}),
        ))
        .expect("vm");
    let path = "/blog/alice/entry/64";
    let (id, o) = w.request(req("GET", BLOG, path, &[]), None).expect("req");
    upstream_headers(&o);
    let big = Response {
        status: 200,
        headers: vec![
            ("cache-control".into(), b"public, max-age=60".to_vec()),
            ("surrogate-key".into(), b"big".to_vec()),
        ],
        body: vec![b'x'; 4096],
    };
    let r = w.upstream_response(id, &big).expect("response");
    w.finish(id).expect("finish");
    assert_eq!((r.status, r.x_cache(), r.body.len()), (200, "PASS", 4096));
    assert_eq!(r.header("surrogate-key"), None, "edge-only fields removed");
    assert_eq!(host.metric("cachet.objects"), 0, "nothing stored");
    let (_, o) = w.request(req("GET", BLOG, path, &[]), None).expect("req");
    upstream_headers(&o);
}

#[test]
fn behind_a_shield_every_fill_carries_the_shard_field_and_the_shields_age_counts() {
    // An edge of a fleet (docs/fleet.md): fills go to a shield chosen by the shard field.
    let (host, mut w1, _w2) = workers(&router_config(serde_json::json!({
        "origin": {"shard_header": "X-Cachet-Shard"}
    })));
    let path = "/blog/alice/entry/65";
    let client = [
        ("user-agent", DESKTOP),
        ("x-cachet-shard", "cachet-obj-chosen-by-client"),
    ];
    let (id, o) = w1
        .request(req("GET", BLOG, path, &client), None)
        .expect("req");
    let h = upstream_headers(&o);
    let shards: Vec<&str> = (h.iter())
        .filter(|(n, _)| n.eq_ignore_ascii_case("x-cachet-shard"))
        .filter_map(|(_, v)| std::str::from_utf8(v).ok())
        .collect();
    assert_eq!(shards.len(), 1, "one shard field, ours: {h:?}");
    let shard = shards[0].to_owned();
    assert!(
        shard.starts_with("cachet-obj-") && shard.len() == 27,
        "{shard}"
    );
    // The shield answers from its own cache: 290 s of the origin's 300 s already spent
    // (its `Age`). The edge may keep it 10 s more, not 300 (RFC 9111 §4.2.3).
    let shield = answer(
        200,
        &[
            ("content-type", "text/html"),
            ("cache-control", "public, max-age=300"),
            ("age", "290"),
        ],
        "<p>from the shield</p>",
    );
    let r = w1.upstream_response(id, &shield).expect("response");
    w1.finish(id).expect("finish");
    assert_eq!(r.x_cache(), "MISS");
    assert_eq!(r.header("age"), Some("290"), "{:?}", r.headers);
    let mut unused = Origin::new();
    host.advance_ms(9_000);
    let hit = get(&mut w1, &mut unused, path, &[("user-agent", DESKTOP)]);
    assert_eq!(hit.x_cache(), "HIT");
    assert_eq!(hit.header("age"), Some("299"), "the shield's age plus ours");
    host.advance_ms(2_000);
    let late = get(&mut w1, &mut unused, path, &[("user-agent", DESKTOP)]);
    assert_eq!(
        late.x_cache(),
        "STALE",
        "past the origin's 300 s: no longer fresh here (served only within the route's grace)"
    );
    assert!(unused.calls.is_empty(), "{:?}", unused.calls);
    // The background refresh is a callout: it carries the same shard field, so the same
    // shield revalidates it.
    w1.tick().expect("tick");
    let refresh = one_callout(&w1);
    assert_eq!(refresh.header("x-cachet-shard"), Some(shard.as_str()));
}

#[test]
fn a_shield_keeps_surrogate_key_for_its_edge_tier_and_for_nobody_else() {
    // docs/fleet.md: edge copies carry the origin's keys, so a purge by key reaches them.
    let (_host, mut w1, _w2) = workers(&config(serde_json::json!({"envoy": {"shield": true}})));
    let mut origin = Origin::new();
    let path = "/blog/alice/entry/1";
    let edge = [("user-agent", DESKTOP), ("x-cachet-tier", "edge")];
    let miss = get(&mut w1, &mut origin, path, &edge);
    assert_eq!(miss.x_cache(), "MISS");
    let keys = miss.header("surrogate-key").unwrap_or_default();
    assert!(
        keys.starts_with("blog-alice entry-1"),
        "the origin's keys: {keys}"
    );
    let hit = get(&mut w1, &mut origin, path, &edge);
    assert_eq!(hit.x_cache(), "HIT");
    let keys = hit.header("surrogate-key").unwrap_or_default();
    assert!(
        keys.contains("blog-alice") && keys.contains("entry-1"),
        "{keys}"
    );
    // A client of the shield, or an edge marker sent to a node that is not a shield: no.
    let client = get(&mut w1, &mut origin, path, &[("user-agent", DESKTOP)]);
    assert_eq!(client.x_cache(), "HIT");
    assert_eq!(client.header("surrogate-key"), None);
    let (_host, mut plain, _w2) = workers(&config(serde_json::json!({})));
    let not_shield = get(&mut plain, &mut origin, path, &edge);
    assert_eq!(not_shield.header("surrogate-key"), None);
    assert_eq!(origin.count(path), 2);
}

/// Issue 27 item 7: a ban or purge that reaches an edge before its shield. The edge
/// applies it, refetches from the shield, which still holds its pre-ban copy and says so
/// (`x-cachet-content-at`): the edge's new copy counts as banned too, so it is never
/// served as a HIT, until the shield applies the ban and fetches the new content. Two
/// nodes on two hosts (separate shared data), the edge's fills answered by the shield.
#[test]
fn a_ban_or_purge_that_reaches_the_edge_first_never_serves_the_shields_pre_ban_copy() {
    let (shield_host, edge_host) = (host(), host());
    let mut shield = shield_host
        .vm(&config(serde_json::json!({"envoy": {"shield": true}})))
        .expect("shield");
    let mut edge = edge_host
        .vm(&config(
            serde_json::json!({"origin": {"shard_header": "X-Cachet-Shard"}}),
        ))
        .expect("edge");
    let mut origin = Origin::new();
    let auth = format!("Bearer {TOKEN}");
    for (path, call, key) in [
        ("/blog/alice/entry/71", "/.cachet/ban", None),
        ("/blog/alice/entry/72", "/.cachet/purge", Some("entry-1")),
    ] {
        assert_eq!(
            via_shield(path, &mut edge, &mut shield, &mut origin).x_cache(),
            "MISS"
        );
        assert_eq!(
            via_shield(path, &mut edge, &mut shield, &mut origin).x_cache(),
            "HIT"
        );
        assert_eq!(origin.count(path), 1, "the shield filled once");
        shield_host.advance_ms(1_000);
        edge_host.advance_ms(1_000);
        // The edge applies it first.
        let (body, hdrs): (Option<String>, Vec<(&str, &str)>) = match key {
            None => (
                Some(format!("obj.http.x-url == {path}")),
                vec![("authorization", &auth)],
            ),
            Some(k) => (None, vec![("authorization", &auth), ("surrogate-key", k)]),
        };
        let r = admin(
            &mut edge,
            "POST",
            call,
            &hdrs,
            body.as_deref().map(str::as_bytes),
        );
        assert!(matches!(r.status, 200 | 201), "{} {}", r.status, r.text());
        shield_host.advance_ms(1_000);
        edge_host.advance_ms(1_000);
        for round in 0..2 {
            let r = via_shield(path, &mut edge, &mut shield, &mut origin);
            assert_ne!(
                r.x_cache(),
                "HIT",
                "{call} round {round}: the shield's pre-ban copy is banned on the edge too"
            );
        }
        assert_eq!(origin.count(path), 1, "the shield has not applied it yet");
        // The shield applies it: new content from the origin, then hits again.
        let r = admin(
            &mut shield,
            "POST",
            call,
            &hdrs,
            body.as_deref().map(str::as_bytes),
        );
        assert!(matches!(r.status, 200 | 201), "{} {}", r.status, r.text());
        shield_host.advance_ms(1_000);
        edge_host.advance_ms(1_000);
        assert_eq!(
            via_shield(path, &mut edge, &mut shield, &mut origin).x_cache(),
            "MISS"
        );
        assert_eq!(origin.count(path), 2);
        assert_eq!(
            via_shield(path, &mut edge, &mut shield, &mut origin).x_cache(),
            "HIT"
        );
    }
}

/// One edge request for `path` whose fills (callouts) the `shield` VM answers, the
/// shield's own fills answered by `origin`.
fn via_shield(path: &str, edge: &mut Vm, shield: &mut Vm, origin: &mut Origin) -> Response {
    let (id, o) = edge
        .request(req("GET", BLOG, path, &[("user-agent", DESKTOP)]), None)
        .expect("request");
    let r = drive(edge, id, o, &mut |h| {
        assert!(
            h.iter().any(|(n, v)| n == "x-cachet-tier" && v == b"edge"),
            "an edge fill: {h:?}"
        );
        let (sid, so) = shield.request(h.clone(), None).expect("shield request");
        let sr = drive(shield, sid, so, &mut |oh| origin.serve(oh)).expect("drive");
        shield.finish(sid).expect("finish");
        sr
    })
    .expect("drive");
    edge.finish(id).expect("finish");
    r
}
