//! End-to-end checks of the demo origin over real HTTP/1.1 (spawned on a free port).

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use cachet_demo_origin::{APP_JS, BlogSeed, Fault, OriginConfig, RunningOrigin, Stats, spawn};

type Resp = ureq::http::Response<ureq::Body>;

fn origin() -> RunningOrigin {
    spawn(OriginConfig::ephemeral()).expect("spawn origin")
}

/// An agent that returns 4xx/5xx as responses and never goes through an environment proxy.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .max_redirects(0)
        .build()
        .into()
}

fn get(o: &RunningOrigin, path: &str) -> Resp {
    agent().get(o.url(path)).call().expect("GET")
}

fn get_as(o: &RunningOrigin, path: &str, device: &str) -> Resp {
    agent()
        .get(o.url(path))
        .header("X-Cachet-Device", device)
        .call()
        .expect("GET")
}

fn post(o: &RunningOrigin, path: &str) -> Resp {
    agent().post(o.url(path)).send_empty().expect("POST")
}

fn header<'a>(r: &'a Resp, name: &str) -> Option<&'a str> {
    r.headers().get(name).and_then(|v| v.to_str().ok())
}

fn body(r: &mut Resp) -> String {
    r.body_mut().read_to_string().expect("body")
}

#[test]
fn article_bodies_differ_by_device_and_feeds_do_not() {
    let o = origin();
    for path in ["/blog/alice/entry/3", "/blog/alice/"] {
        let mut pc = get_as(&o, path, "pc");
        let mut sp = get_as(&o, path, "smartphone");
        let mut none = get(&o, path);
        let mut other = get_as(&o, path, "tablet");
        let (pc_body, sp_body) = (body(&mut pc), body(&mut sp));
        assert_ne!(pc_body, sp_body, "{path}");
        assert!(pc_body.contains(r#"<meta name="cachet-device" content="pc">"#));
        assert!(sp_body.contains(r#"<meta name="cachet-device" content="smartphone">"#));
        assert_eq!(body(&mut none), pc_body, "missing header renders pc");
        assert_eq!(body(&mut other), pc_body, "unknown class renders pc");
        assert!((4096..=8192).contains(&pc_body.len()), "{}", pc_body.len());
        assert!((4096..=8192).contains(&sp_body.len()), "{}", sp_body.len());
        assert_ne!(header(&pc, "etag"), header(&sp, "etag"));
    }
    let mut pc = get_as(&o, "/blog/alice/feed", "pc");
    let mut sp = get_as(&o, "/blog/alice/feed", "smartphone");
    assert_eq!(header(&pc, "etag"), header(&sp, "etag"));
    let feed = body(&mut pc);
    assert_eq!(feed, body(&mut sp));
    assert!(feed.starts_with("<?xml") && feed.contains("<rss"));
}

#[test]
fn public_blog_headers() {
    let o = origin();
    let top = get(&o, "/blog/alice/");
    assert_eq!(top.status(), 200);
    assert_eq!(header(&top, "cache-control"), Some("public, max-age=300"));
    assert_eq!(header(&top, "vary"), Some("User-Agent"));
    assert_eq!(header(&top, "surrogate-key"), Some("blog-alice"));
    assert!(
        header(&top, "content-type")
            .unwrap()
            .starts_with("text/html")
    );
    assert!(header(&top, "set-cookie").is_none());

    let entry = get(&o, "/blog/alice/entry/42");
    assert_eq!(entry.status(), 200);
    assert_eq!(header(&entry, "cache-control"), Some("public, max-age=300"));
    assert_eq!(header(&entry, "vary"), Some("User-Agent"));
    assert_eq!(
        header(&entry, "surrogate-key"),
        Some("blog-alice entry-alice-42")
    );
    let etag = header(&entry, "etag").unwrap().to_owned();
    let last_modified = header(&entry, "last-modified").unwrap().to_owned();
    assert!(etag.starts_with('"') && etag.ends_with('"'));
    assert!(last_modified.ends_with(" GMT"));
    let again = get(&o, "/blog/alice/entry/42");
    assert_eq!(header(&again, "etag"), Some(etag.as_str()), "stable ETag");
    assert_eq!(
        header(&again, "last-modified"),
        Some(last_modified.as_str())
    );

    let feed = get(&o, "/blog/alice/feed");
    assert_eq!(feed.status(), 200);
    assert_eq!(header(&feed, "content-type"), Some("application/rss+xml"));
    assert_eq!(header(&feed, "cache-control"), Some("public, max-age=300"));
    assert_eq!(
        header(&feed, "surrogate-key"),
        Some("blog-alice feed-alice")
    );
    assert!(header(&feed, "vary").is_none());

    let css = get(&o, "/css/alice.css");
    assert_eq!(css.status(), 200);
    assert_eq!(header(&css, "cache-control"), Some("public, max-age=86400"));
    assert_eq!(header(&css, "surrogate-key"), Some("blog-alice css-alice"));
    assert!(
        header(&css, "content-type")
            .unwrap()
            .starts_with("text/css")
    );

    let index = get(&o, "/");
    assert_eq!(header(&index, "cache-control"), Some("public, max-age=60"));
    assert_eq!(header(&index, "surrogate-key"), Some("index"));
}

#[test]
fn conditional_requests_get_304() {
    let o = origin();
    let first = get(&o, "/blog/bob/entry/1");
    let etag = header(&first, "etag").unwrap().to_owned();
    let last_modified = header(&first, "last-modified").unwrap().to_owned();
    let mut r = agent()
        .get(o.url("/blog/bob/entry/1"))
        .header("If-None-Match", &etag)
        .call()
        .unwrap();
    assert_eq!(r.status(), 304);
    assert_eq!(header(&r, "etag"), Some(etag.as_str()));
    assert_eq!(header(&r, "cache-control"), Some("public, max-age=300"));
    assert_eq!(body(&mut r), "");
    let r = agent()
        .get(o.url("/blog/bob/entry/1"))
        .header("If-Modified-Since", &last_modified)
        .call()
        .unwrap();
    assert_eq!(r.status(), 304);
    let r = agent()
        .get(o.url("/blog/bob/entry/1"))
        .header("If-None-Match", "\"other\"")
        .call()
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[test]
fn not_modified_can_be_made_private() {
    let o = origin();
    let first = get(&o, "/blog/bob/entry/2");
    let etag = header(&first, "etag").unwrap().to_owned();
    let conditional = || {
        agent()
            .get(o.url("/blog/bob/entry/2"))
            .header("If-None-Match", &etag)
            .call()
            .unwrap()
    };
    assert_eq!(header(&conditional(), "set-cookie"), None);
    assert_eq!(
        post(&o, "/__origin/not-modified?private=true").status(),
        200
    );
    assert!(o.state().private_not_modified());
    let r = conditional();
    assert_eq!(r.status(), 304);
    assert_eq!(header(&r, "cache-control"), Some("private, no-store"));
    assert!(header(&r, "set-cookie").is_some_and(|c| c.starts_with("session=nm-")));
    // Full answers are untouched.
    let full = get(&o, "/blog/bob/entry/2");
    assert_eq!(header(&full, "cache-control"), Some("public, max-age=300"));
    assert_eq!(header(&full, "set-cookie"), None);
    assert_eq!(
        post(&o, "/__origin/not-modified?private=false").status(),
        200
    );
    assert_eq!(
        header(&conditional(), "cache-control"),
        Some("public, max-age=300")
    );
    assert_eq!(
        post(&o, "/__origin/not-modified?private=maybe").status(),
        400
    );
}

#[test]
fn private_blog_headers_and_toggling() {
    let o = origin();
    let mut carol = get(&o, "/blog/carol/entry/1");
    assert_eq!(carol.status(), 200);
    assert_eq!(header(&carol, "cache-control"), Some("private, no-store"));
    assert!(
        header(&carol, "set-cookie")
            .unwrap()
            .starts_with("session=")
    );
    assert!(header(&carol, "surrogate-key").is_none());
    assert!(body(&mut carol).contains("noindex"));
    let css = get(&o, "/css/carol.css");
    assert_eq!(css.status(), 200);
    assert_eq!(header(&css, "cache-control"), Some("private, no-store"));
    assert!(header(&css, "surrogate-key").is_none());
    let feed = get(&o, "/blog/carol/feed");
    assert_eq!(feed.status(), 403);
    assert_eq!(header(&feed, "cache-control"), Some("private, no-store"));

    // Same CSS body whether public or private.
    let mut public_css = get(&o, "/css/alice.css");
    let public_css_body = body(&mut public_css);

    // Turn alice private over HTTP, then back public through the handle.
    let mut r = post(&o, "/__origin/blogs/alice/private");
    assert_eq!(r.status(), 200);
    let json: serde_json::Value = serde_json::from_str(&body(&mut r)).unwrap();
    assert_eq!(json, serde_json::json!({"blog": "alice", "private": true}));
    let top = get(&o, "/blog/alice/");
    assert_eq!(header(&top, "cache-control"), Some("private, no-store"));
    assert!(header(&top, "set-cookie").is_some());
    let mut css = get(&o, "/css/alice.css");
    assert_eq!(header(&css, "cache-control"), Some("private, no-store"));
    assert_eq!(body(&mut css), public_css_body);
    let mut index = get(&o, "/");
    let index_body = body(&mut index);
    assert!(!index_body.contains("/blog/alice/"));
    assert!(index_body.contains("/blog/bob/"));
    assert!(!index_body.contains("/blog/carol/"));

    assert!(o.set_private("alice", false));
    let top = get(&o, "/blog/alice/");
    assert_eq!(header(&top, "cache-control"), Some("public, max-age=300"));
    let mut r = post(&o, "/__origin/blogs/carol/public");
    assert_eq!(r.status(), 200);
    let json: serde_json::Value = serde_json::from_str(&body(&mut r)).unwrap();
    assert_eq!(json, serde_json::json!({"blog": "carol", "private": false}));
    let feed = get(&o, "/blog/carol/feed");
    assert_eq!(feed.status(), 200);

    assert!(!o.set_private("nobody", true));
    assert_eq!(post(&o, "/__origin/blogs/nobody/private").status(), 404);
}

#[test]
fn unknown_blogs_and_paths_are_404() {
    let o = origin();
    for path in [
        "/blog/nobody/",
        "/blog/nobody/entry/1",
        "/blog/nobody/feed",
        "/css/nobody.css",
        "/css/alice.txt",
        "/blog/alice/entry/abc",
        "/no/such/page",
    ] {
        let r = get(&o, path);
        assert_eq!(r.status(), 404, "{path}");
        assert_eq!(
            header(&r, "cache-control"),
            Some("public, max-age=10"),
            "{path}"
        );
    }
}

#[test]
fn query_strings_are_ignored_by_the_app() {
    let o = origin();
    let mut plain = get(&o, "/blog/alice/entry/7");
    let mut tracked = get(
        &o,
        "/blog/alice/entry/7?utm_source=twitter&utm_medium=social",
    );
    assert_eq!(body(&mut plain), body(&mut tracked));
    assert_eq!(header(&plain, "etag"), header(&tracked, "etag"));
}

#[test]
fn stats_count_exactly_and_skip_control_paths() {
    let o = origin();
    let r1 = get(&o, "/blog/alice/entry/1");
    assert_eq!(header(&r1, "x-origin-request"), Some("1"));
    let r2 = get(&o, "/blog/alice/entry/1?utm_source=x");
    assert_eq!(header(&r2, "x-origin-request"), Some("2"));
    let r3 = get(&o, "/blog/alice/entry/1");
    assert_eq!(header(&r3, "x-origin-request"), Some("3"));
    let r4 = get(&o, "/nope");
    assert_eq!(header(&r4, "x-origin-request"), Some("4"));
    let head = agent().head(o.url("/css/bob.css")).call().unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(header(&head, "x-origin-request"), Some("5"));

    // Control endpoints: not counted, no request number.
    let mut stats_resp = get(&o, "/__origin/stats");
    assert_eq!(header(&stats_resp, "cache-control"), Some("no-store"));
    assert!(header(&stats_resp, "x-origin-request").is_none());
    let over_http: Stats = serde_json::from_str(&body(&mut stats_resp)).unwrap();
    assert_eq!(post(&o, "/__origin/delay?ms=0").status(), 200);
    assert_eq!(get(&o, "/__origin/blogs").status(), 200);
    assert_eq!(get(&o, "/__origin/unknown").status(), 404);

    let expected = Stats {
        total: 5,
        by_path: [
            ("/blog/alice/entry/1".to_owned(), 2),
            ("/blog/alice/entry/1?utm_source=x".to_owned(), 1),
            ("/nope".to_owned(), 1),
            ("/css/bob.css".to_owned(), 1),
        ]
        .into_iter()
        .collect(),
    };
    assert_eq!(over_http, expected);
    assert_eq!(o.stats(), expected);
    assert_eq!(o.stats().count("/blog/alice/entry/1"), 2);

    let mut reset = post(&o, "/__origin/stats/reset");
    assert_eq!(reset.status(), 200);
    let zeroed: Stats = serde_json::from_str(&body(&mut reset)).unwrap();
    assert_eq!(zeroed, Stats::default());
    assert_eq!(o.stats(), Stats::default());
    let r = get(&o, "/");
    assert_eq!(header(&r, "x-origin-request"), Some("1"));
}

#[test]
fn app_js_is_served_gzip_encoded_regardless_of_accept_encoding() {
    let o = origin();
    // Raw socket, so no client can decompress behind our back.
    let mut stream = TcpStream::connect(o.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET /static/app.js HTTP/1.1\r\nHost: origin\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let payload = &raw[split + 4..];
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("\r\ncontent-encoding: gzip"), "{head}");
    assert!(
        head.contains("\r\ncache-control: public, max-age=3600"),
        "{head}"
    );
    assert!(
        head.contains(&format!("\r\ncontent-length: {}", payload.len())),
        "{head}"
    );
    assert_eq!(&payload[..2], &[0x1f, 0x8b], "gzip magic");
    let mut js = String::new();
    flate2::read::GzDecoder::new(payload)
        .read_to_string(&mut js)
        .unwrap();
    assert_eq!(js, APP_JS);
    assert!(payload.len() < APP_JS.len() / 2, "compresses well");
}

#[test]
fn account_is_private_and_unique_per_request() {
    let o = origin();
    let mut a = get(&o, "/account");
    let mut b = get(&o, "/account");
    assert_eq!(header(&a, "cache-control"), Some("private"));
    let (ca, cb) = (
        header(&a, "set-cookie").unwrap().to_owned(),
        header(&b, "set-cookie").unwrap().to_owned(),
    );
    assert!(ca.starts_with("session="));
    assert_ne!(ca, cb);
    let (ba, bb) = (body(&mut a), body(&mut b));
    assert!(ba.contains("secret"));
    assert!(ba.contains(&cachet_demo_origin::account_token(1)));
    assert!(bb.contains(&cachet_demo_origin::account_token(2)));
    assert_ne!(ba, bb);
}

#[test]
fn echo_returns_request_headers() {
    let o = origin();
    let mut r = agent()
        .get(o.url("/api/echo?a=1&b=2"))
        .header("X-Cachet-Device", "smartphone")
        .header("X-Test", "yes")
        .call()
        .unwrap();
    assert_eq!(header(&r, "cache-control"), Some("no-store"));
    let json: serde_json::Value = serde_json::from_str(&body(&mut r)).unwrap();
    assert_eq!(json["method"], "GET");
    assert_eq!(json["path"], "/api/echo");
    assert_eq!(json["query"], "a=1&b=2");
    assert_eq!(json["headers"]["x-cachet-device"], "smartphone");
    assert_eq!(json["headers"]["x-test"], "yes");
}

#[test]
fn other_methods_are_405_and_head_has_no_body() {
    let o = origin();
    for path in [
        "/blog/alice/",
        "/css/alice.css",
        "/account",
        "/__origin/stats",
    ] {
        let r = agent().delete(o.url(path)).call().unwrap();
        assert_eq!(r.status(), 405, "{path}");
    }
    let r = agent().post(o.url("/blog/alice/")).send_empty().unwrap();
    assert_eq!(r.status(), 405);
    let r = agent().get(o.url("/__origin/stats/reset")).call().unwrap();
    assert_eq!(r.status(), 405);
    let mut head = agent().head(o.url("/blog/alice/entry/1")).call().unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(
        header(&head, "surrogate-key"),
        Some("blog-alice entry-alice-1")
    );
    assert_eq!(body(&mut head), "");
}

#[test]
fn delay_is_applied_and_measured_by_the_server() {
    let o = origin();
    let r = get(&o, "/blog/bob/");
    assert_eq!(header(&r, "x-origin-delay-ms"), Some("0"));
    assert_eq!(post(&o, "/__origin/delay?ms=25").status(), 200);
    assert_eq!(o.state().delay(), Duration::from_millis(25));
    // Control endpoints are never delayed; counted ones report what the server waited.
    let r = get(&o, "/blog/bob/");
    let waited: u64 = header(&r, "x-origin-delay-ms").unwrap().parse().unwrap();
    assert!(waited >= 25, "waited {waited} ms");
    o.set_delay(Duration::ZERO);
    let r = get(&o, "/blog/bob/");
    assert_eq!(header(&r, "x-origin-delay-ms"), Some("0"));
    assert_eq!(post(&o, "/__origin/delay?ms=oops").status(), 400);
}

#[test]
fn redirect_adds_trailing_slash() {
    let o = origin();
    let r = get(&o, "/blog/alice");
    assert_eq!(r.status(), 301);
    assert_eq!(header(&r, "location"), Some("/blog/alice/"));
}

#[test]
fn custom_blogs_and_shutdown() {
    let o = spawn(OriginConfig {
        blogs: vec![BlogSeed::public("dave"), BlogSeed::private("erin")],
        ..OriginConfig::ephemeral()
    })
    .unwrap();
    assert_ne!(o.addr().port(), 0);
    assert_eq!(get(&o, "/blog/dave/").status(), 200);
    assert_eq!(get(&o, "/blog/alice/").status(), 404);
    let addr = o.addr();
    // A keep-alive connection from the agent stays open; shutdown must still return.
    let keep = agent();
    assert_eq!(keep.get(o.url("/")).call().unwrap().status(), 200);
    o.shutdown();
    assert!(TcpStream::connect(addr).is_err(), "listener closed");
}

#[test]
fn faults_answer_503_or_drop_the_connection_mid_body_and_are_counted() {
    let o = origin();
    assert_eq!(
        post(&o, "/__origin/fault?mode=bogus").status(),
        400,
        "an unknown mode is refused"
    );
    assert_eq!(post(&o, "/__origin/fault?mode=error").status(), 200);
    let r = get(&o, "/blog/alice/entry/1");
    assert_eq!(r.status(), 503);
    assert_eq!(header(&r, "cache-control"), Some("no-store"));
    o.set_fault(Fault::Reset);
    let mut r = get(&o, "/blog/alice/entry/1");
    assert_eq!(r.status(), 200, "headers arrive");
    assert!(
        r.body_mut().read_to_string().is_err(),
        "the body stops half way"
    );
    assert_eq!(post(&o, "/__origin/fault?mode=none").status(), 200);
    let mut r = get(&o, "/blog/alice/entry/1");
    assert_eq!(r.status(), 200);
    assert!(!body(&mut r).is_empty());
    assert_eq!(
        o.stats().count("/blog/alice/entry/1"),
        3,
        "every fault counted"
    );
}

#[test]
fn a_test_resource_fails_as_its_fault_field_asks_and_waits_its_delay() {
    let o = origin();
    let path = "/t/chaos?cc=max-age%3D60&delay_ms=150";
    let fetch = |fault: &str| {
        agent()
            .get(&o.url(path))
            .header(cachet_demo_origin::FAULT_FIELD, fault)
            .call()
    };
    // `reset`: the connection closes before any byte.
    assert!(fetch("reset").is_err(), "no answer at all");
    // `half`: the headers and half the body, then the connection drops.
    let mut r = fetch("half").expect("headers arrive");
    assert_eq!(r.status(), 200);
    assert!(
        r.body_mut().read_to_string().is_err(),
        "the body stops half way"
    );
    // No fault: the whole answer, after the delay.
    let started = std::time::Instant::now();
    let mut r = fetch("none").expect("answer");
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert_eq!(body(&mut r), cachet_demo_origin::TEST_BODY);
    assert_eq!(o.stats().count(path), 3, "every request counted");
}

#[test]
fn the_request_log_records_each_counted_request_with_its_span_and_is_cleared_by_reset() {
    let o = origin();
    let slow = "/t/span?cc=max-age%3D3&etag=span&delay_ms=200";
    let t0 = o.started().elapsed();
    assert_eq!(get(&o, slow).status(), 200);
    assert_eq!(get(&o, "/blog/alice/").status(), 200);
    assert_eq!(get(&o, "/__origin/stats").status(), 200);
    let t1 = o.started().elapsed();
    let log = o.request_log();
    let keys: Vec<&str> = log.iter().map(|s| s.key.as_str()).collect();
    // Control paths are not logged, as they are not counted; keys are `Stats::by_path`'s.
    assert_eq!(keys, [slow, "/blog/alice/"]);
    for (key, n) in o.stats().by_path {
        assert_eq!(log.iter().filter(|s| s.key == key).count() as u64, n);
    }
    for s in &log {
        assert!(s.start <= s.end, "{s:?}");
        assert!(t0 <= s.start && s.end <= t1, "{s:?} within {t0:?}..{t1:?}");
    }
    let len = |s: &cachet_demo_origin::RequestSpan| s.end.saturating_sub(s.start);
    let slow_len = len(&log[0]);
    assert!(slow_len >= Duration::from_millis(200), "{slow_len:?}");
    assert!(len(&log[1]) < Duration::from_millis(200));
    assert!(log[1].start >= log[0].end, "one after the other");
    o.reset_stats();
    assert!(o.request_log().is_empty());
    assert_eq!(get(&o, "/blog/bob/").status(), 200);
    assert_eq!(o.request_log().len(), 1);
    // The control endpoint clears it too.
    assert_eq!(post(&o, "/__origin/stats/reset").status(), 200);
    assert!(o.request_log().is_empty());
}
