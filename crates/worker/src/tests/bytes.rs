//! Issue 27 item 11: header values are bytes end to end. What an origin sends (a Latin-1
//! `X-Field`, an obs-text argument in `Cache-Control`, a per-user 304's `Set-Cookie`)
//! reaches the client byte for byte from every path that writes a local reply (a stored
//! answer, an unstored fill answer, a per-user 304), and a fill carries the client's
//! bytes or is not made.

use super::*;

/// `caf` + U+00E9 in Latin-1: one byte that is not UTF-8.
const CAFE: &[u8] = b"caf\xe9";

/// The values of `name` in `lines`, as bytes (ASCII case-insensitive).
fn values<'a>(lines: &'a Pairs, name: &str) -> Vec<&'a [u8]> {
    lines
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
        .collect()
}

/// The last local reply's header lines, exact bytes.
fn last_lines(fake: &Fake) -> Pairs {
    fake.sent_bytes
        .borrow()
        .last()
        .cloned()
        .expect("a local reply")
}

/// `GET path` on `t.example` from an identity client, plus `extra` request fields.
fn get(fake: &Fake, path: &str, extra: &[(&str, &[u8])]) {
    let mut req: Vec<(&str, &[u8])> = vec![
        (":method", b"GET"),
        (":path", path.as_bytes()),
        (":authority", b"t.example"),
    ];
    req.extend_from_slice(extra);
    fake.map(MapType::HttpRequestHeaders, &req);
}

/// Delivers the origin answer `(fields, body)` to the callout of stream `s`.
fn answer(fake: &Fake, s: &mut Http, token: u32, fields: &[(&str, &[u8])], body: &[u8]) {
    fake.map(MapType::HttpCallResponseHeaders, fields);
    fake.buffer_set(BufferType::HttpCallResponseBody, body);
    s.on_fetch_response(token, fields.len(), body.len());
}

#[test]
fn a_stored_answer_sends_the_origins_latin1_bytes_on_the_miss_and_on_every_hit() {
    let (fake, vm) = vm();
    let path = "/t/bytes-stored";
    get(&fake, path, &[]);
    let mut s = Http::new(Rc::clone(&vm), 2);
    assert_eq!(s.on_request_headers(true), Action::Pause);
    let cc: &[u8] = b"max-age=300, ext=\"caf\xe9\"";
    answer(
        &fake,
        &mut s,
        1,
        &[
            (":status", b"200"),
            ("cache-control", cc),
            ("content-type", b"text/plain"),
            ("x-field", CAFE),
        ],
        b"stored",
    );
    for (ctx, label) in [(2, "MISS"), (3, "HIT"), (4, "HIT")] {
        if ctx > 2 {
            get(&fake, path, &[]);
            let mut hit = Http::new(Rc::clone(&vm), ctx);
            assert_eq!(hit.on_request_headers(true), Action::Pause);
        }
        let (status, _, body) = fake.last_sent();
        let lines = last_lines(&fake);
        assert_eq!((status, body.as_slice()), (200, &b"stored"[..]), "{label}");
        assert_eq!(values(&lines, "x-cache"), [label.as_bytes()]);
        assert_eq!(values(&lines, "x-field"), [CAFE], "{label}: exact bytes");
        assert_eq!(
            values(&lines, "cache-control"),
            [cc],
            "{label}: obs-text kept"
        );
    }
    assert_eq!(fake.dispatched.borrow().len(), 1, "the hits made no fetch");
}

#[test]
fn an_unstored_callout_answer_keeps_its_latin1_fields_and_cookies() {
    let (fake, vm) = vm();
    get(&fake, "/t/bytes-private", &[]);
    let mut s = Http::new(Rc::clone(&vm), 2);
    assert_eq!(s.on_request_headers(true), Action::Pause);
    answer(
        &fake,
        &mut s,
        1,
        &[
            (":status", b"200"),
            ("cache-control", b"private, max-age=300"),
            ("set-cookie", b"sid=caf\xe9; Path=/"),
            ("set-cookie", b"lang=fr"),
            ("x-field", CAFE),
        ],
        b"theirs",
    );
    let (status, _, body) = fake.last_sent();
    let lines = last_lines(&fake);
    assert_eq!((status, body.as_slice()), (200, &b"theirs"[..]));
    assert_eq!(values(&lines, "x-cache"), [b"PASS"]);
    assert_eq!(values(&lines, "x-field"), [CAFE]);
    assert_eq!(
        values(&lines, "set-cookie"),
        [&b"sid=caf\xe9; Path=/"[..], b"lang=fr"],
        "every cookie, byte for byte"
    );
}

#[test]
fn an_unstored_router_fill_answer_streams_on_with_its_latin1_fields() {
    let mut cfg: serde_json::Value = serde_json::from_str(&config()).unwrap();
    cfg["envoy"]["fill"] = serde_json::json!("router");
    let (fake, vm) = vm_with(&cfg.to_string());
    get(&fake, "/t/bytes-router", &[]);
    let mut s = Http::new(Rc::clone(&vm), 2);
    assert_eq!(
        s.on_request_headers(true),
        Action::Continue,
        "the fill goes through the router"
    );
    fake.map(
        MapType::HttpResponseHeaders,
        &[
            (":status", b"200"),
            ("cache-control", b"no-store"),
            ("set-cookie", b"sid=caf\xe9"),
            ("x-field", CAFE),
        ],
    );
    // Not storable by its fields alone: never held, it streams on with the edge's edits.
    assert_eq!(s.on_response_headers(false), Action::Continue, "streamed");
    let lines = fake.headers(MapType::HttpResponseHeaders);
    assert_eq!(values(&lines, "x-cache"), [b"PASS"]);
    assert_eq!(values(&lines, "x-field"), [CAFE]);
    assert_eq!(values(&lines, "set-cookie"), [b"sid=caf\xe9"]);
    assert_eq!(s.on_response_body(6, true), Action::Continue);
    assert!(fake.sent_bytes.borrow().is_empty(), "no local reply");
}

#[test]
fn a_per_user_304_sends_its_own_latin1_cookie_and_fields_with_the_stored_body() {
    let (fake, vm) = vm();
    let path = "/t/bytes-304";
    get(&fake, path, &[]);
    let mut s = Http::new(Rc::clone(&vm), 2);
    assert_eq!(s.on_request_headers(true), Action::Pause);
    // `no-cache` with a validator: stored, revalidated before every reuse.
    answer(
        &fake,
        &mut s,
        1,
        &[
            (":status", b"200"),
            ("cache-control", b"no-cache"),
            ("etag", b"\"b1\""),
            ("x-field", b"old"),
        ],
        b"kept body",
    );
    assert_eq!(values(&last_lines(&fake), "x-cache"), [b"MISS"]);
    fake.now_ms.set(fake.now_ms.get() + 1_000);
    get(&fake, path, &[]);
    let mut r = Http::new(Rc::clone(&vm), 3);
    assert_eq!(r.on_request_headers(true), Action::Pause);
    let reval = fake.dispatched_bytes.borrow().last().cloned().unwrap();
    assert_eq!(values(&reval, "if-none-match"), [b"\"b1\""], "conditional");
    answer(
        &fake,
        &mut r,
        2,
        &[
            (":status", b"304"),
            ("cache-control", b"no-cache"),
            ("etag", b"\"b1\""),
            ("set-cookie", b"sid=caf\xe9"),
            ("x-field", CAFE),
        ],
        b"",
    );
    let (status, _, body) = fake.last_sent();
    let lines = last_lines(&fake);
    assert_eq!((status, body.as_slice()), (200, &b"kept body"[..]));
    assert_eq!(values(&lines, "x-cache"), [b"PASS"]);
    assert_eq!(
        values(&lines, "set-cookie"),
        [b"sid=caf\xe9"],
        "their cookie"
    );
    assert_eq!(
        values(&lines, "x-field"),
        [CAFE],
        "the 304's field, as sent"
    );
}

#[test]
fn a_fill_carries_the_clients_bytes_or_the_request_is_passed_uncached() {
    // A host whose callouts carry bytes: the fill has the client's exact value.
    let (fake, vm) = vm();
    get(&fake, "/t/bytes-fill", &[("accept-language", CAFE)]);
    let mut s = Http::new(Rc::clone(&vm), 2);
    assert_eq!(s.on_request_headers(true), Action::Pause);
    let fill = fake.dispatched_bytes.borrow().last().cloned().unwrap();
    assert_eq!(values(&fill, "accept-language"), [CAFE]);

    // The proxy-wasm binding cannot put that value on a callout: the request goes
    // upstream itself (its own bytes), unstored, and nothing is stored for the key.
    drop((fake, vm));
    let (fake, vm) = super::vm();
    fake.text_callouts.set(true);
    get(&fake, "/t/bytes-fill", &[("accept-language", CAFE)]);
    let mut s = Http::new(Rc::clone(&vm), 2);
    assert_eq!(s.on_request_headers(true), Action::Continue, "passed");
    assert!(fake.dispatched.borrow().is_empty(), "no callout was made");
    let upstream = fake.headers(MapType::HttpRequestHeaders);
    assert_eq!(values(&upstream, "accept-language"), [CAFE]);
    fake.map(
        MapType::HttpResponseHeaders,
        &[
            (":status", b"200"),
            ("cache-control", b"max-age=300"),
            ("x-field", CAFE),
        ],
    );
    assert_eq!(s.on_response_headers(true), Action::Continue);
    let out = fake.headers(MapType::HttpResponseHeaders);
    assert_eq!(values(&out, "x-cache"), [b"PASS"]);
    assert_eq!(values(&out, "x-field"), [CAFE], "passed through untouched");
    s.finish();
    // A client whose fields are text is filled by callout as usual: nothing was stored.
    get(&fake, "/t/bytes-fill", &[("accept-language", b"fr")]);
    let mut t = Http::new(Rc::clone(&vm), 3);
    assert_eq!(t.on_request_headers(true), Action::Pause);
    assert_eq!(fake.dispatched.borrow().len(), 1, "a fill, not a hit");
}

#[test]
fn cache_control_lines_envoy_joined_with_a_bare_comma_go_out_spaced() {
    // Issue 30: Envoy's header map joins two `Cache-Control` lines as
    // `max-age=300,public`; stored and sent as `max-age=300, public`, as are passes.
    let mut cfg: serde_json::Value = serde_json::from_str(&config()).unwrap();
    cfg["envoy"]["fill"] = serde_json::json!("router");
    let (fake, vm) = vm_with(&cfg.to_string());
    get(&fake, "/t/joined", &[]);
    let mut s = Http::new(Rc::clone(&vm), 2);
    assert_eq!(s.on_request_headers(true), Action::Continue);
    fake.map(
        MapType::HttpResponseHeaders,
        &[
            (":status", b"200"),
            ("cache-control", b"max-age=300,public"),
            ("vary", b"Accept-Language,Accept"),
        ],
    );
    assert_eq!(s.on_response_headers(false), Action::Pause, "held");
    fake.buffer_set(BufferType::HttpResponseBody, b"routed");
    assert_eq!(s.on_response_body(6, true), Action::Pause);
    let lines = last_lines(&fake);
    assert_eq!(values(&lines, "x-cache"), [b"MISS"]);
    assert_eq!(values(&lines, "cache-control"), [b"max-age=300, public"]);
    s.finish();
    get(&fake, "/t/joined", &[]);
    let mut t = Http::new(Rc::clone(&vm), 3);
    t.on_request_headers(true);
    let lines = last_lines(&fake);
    assert_eq!(values(&lines, "x-cache"), [b"HIT"]);
    assert_eq!(values(&lines, "cache-control"), [b"max-age=300, public"]);
    let vary = values(&lines, "vary");
    assert!(
        vary.iter()
            .all(|v| !v.windows(2).any(|w| w[0] == b',' && w[1] != b' ')),
        "{vary:?}"
    );

    // A pass Envoy forwards itself: the joined value is written back spaced.
    fake.map(
        MapType::HttpRequestHeaders,
        &[
            (":method", b"POST"),
            (":path", b"/t/joined-pass"),
            (":authority", b"t.example"),
        ],
    );
    let mut u = Http::new(Rc::clone(&vm), 4);
    assert_eq!(u.on_request_headers(true), Action::Continue, "passed");
    fake.map(
        MapType::HttpResponseHeaders,
        &[(":status", b"200"), ("cache-control", b"no-store,private")],
    );
    assert_eq!(u.on_response_headers(true), Action::Continue);
    let out = fake.headers(MapType::HttpResponseHeaders);
    assert_eq!(values(&out, "x-cache"), [b"PASS"]);
    assert_eq!(values(&out, "cache-control"), [b"no-store, private"]);
}

#[test]
fn a_router_fill_for_an_identity_client_asks_for_identity() {
    // Without any Accept-Encoding the origin may pick any coding (RFC 9110 §12.5.3): an
    // identity client's router fill says `identity`; a gzip client's says `gzip`.
    let mut cfg: serde_json::Value = serde_json::from_str(&config()).unwrap();
    cfg["envoy"]["fill"] = serde_json::json!("router");
    for (client, want) in [(None, &b"identity"[..]), (Some(&b"gzip, br"[..]), b"gzip")] {
        let (fake, vm) = vm_with(&cfg.to_string());
        let extra: Vec<(&str, &[u8])> =
            client.map(|v| ("accept-encoding", v)).into_iter().collect();
        get(&fake, "/t/coding", &extra);
        let mut s = Http::new(Rc::clone(&vm), 2);
        assert_eq!(
            s.on_request_headers(true),
            Action::Continue,
            "a router fill"
        );
        let upstream = fake.headers(MapType::HttpRequestHeaders);
        assert_eq!(values(&upstream, "accept-encoding"), [want], "{client:?}");
    }
}
