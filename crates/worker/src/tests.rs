//! The filter's logic driven natively through a test double of the proxy-wasm host
//! ([`crate::host::Host`]): what it sends upstream, what it answers, what it stores, and
//! how many host calls a hit costs.
#![allow(
    clippy::expect_used,
    clippy::panic,
    clippy::unwrap_used,
    reason = "tests fail loudly"
)]

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::host::{Action, BufferType, LogLevel, MapType, MetricType, Status};

use cachet_store::SharedData;

use crate::host::Host;
use crate::vm::{Http, Vm};

/// Header values as bytes end to end (issue 27 item 11).
mod bytes;

/// Header pairs as the host holds them.
type Pairs = Vec<(String, Vec<u8>)>;

/// One local reply: status, headers, body.
type Sent = (u16, Vec<(String, String)>, Vec<u8>);

/// A proxy-wasm host in memory: shared data with CAS, header maps and buffers the test
/// sets, and a record of replies and callouts.
#[derive(Default)]
struct Fake {
    now_ms: Cell<u64>,
    /// The last random draw ([`Host::random`]).
    draws: Cell<u64>,
    shared: cachet_store::MemoryStore,
    maps: RefCell<HashMap<u32, Pairs>>,
    buffers: RefCell<HashMap<u32, Vec<u8>>>,
    /// Local replies, header values as text (lossy: for assertions on ASCII fields).
    sent: RefCell<Vec<Sent>>,
    /// Each local reply's header lines as the exact bytes sent, in the order of `sent`.
    sent_bytes: RefCell<Vec<Pairs>>,
    /// Callouts' header lines, values as text (lossy, as `sent`).
    dispatched: RefCell<Vec<Vec<(String, String)>>>,
    /// Each callout's header lines as the exact bytes, in the order of `dispatched`.
    dispatched_bytes: RefCell<Vec<Pairs>>,
    /// Refuse a callout with a value that is not UTF-8, as the proxy-wasm binding does
    /// (`Status::SerializationFailure`); off: a host that carries bytes.
    text_callouts: Cell<bool>,
    /// Each callout's cluster and body, in the order of `dispatched`.
    dispatched_to: RefCell<Vec<(String, Vec<u8>)>>,
    metrics: Cell<u32>,
    /// Log lines at error level.
    errors: RefCell<Vec<String>>,
    /// Every tick period set, in order.
    ticks: RefCell<Vec<Duration>>,
}

impl Fake {
    fn map(&self, map: MapType, pairs: &[(&str, &[u8])]) {
        self.maps.borrow_mut().insert(
            map as u32,
            pairs
                .iter()
                .map(|(n, v)| ((*n).to_owned(), v.to_vec()))
                .collect(),
        );
    }

    fn buffer_set(&self, kind: BufferType, bytes: &[u8]) {
        self.buffers
            .borrow_mut()
            .insert(kind as u32, bytes.to_vec());
    }

    fn last_sent(&self) -> Sent {
        self.sent.borrow().last().cloned().expect("a local reply")
    }
}

impl Host for Fake {
    fn random(&self) -> u64 {
        // Deterministic draws: the tests replay.
        let n = self.draws.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        self.draws.set(n);
        n
    }
    fn now(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.now_ms.get())
    }
    fn log(&self, level: LogLevel, msg: &str) {
        if level == LogLevel::Error {
            self.errors.borrow_mut().push(msg.to_owned());
        }
    }
    fn shared_get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        self.shared.get(key)
    }
    fn shared_set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        self.shared.set(key, value, cas)
    }
    fn buffer(&self, kind: BufferType, size: usize) -> Option<Vec<u8>> {
        let b = self.buffers.borrow();
        let v = b.get(&(kind as u32))?;
        Some(v[..size.min(v.len())].to_vec())
    }
    fn headers(&self, map: MapType) -> Vec<(String, Vec<u8>)> {
        self.maps
            .borrow()
            .get(&(map as u32))
            .cloned()
            .unwrap_or_default()
    }
    fn set_header(&self, map: MapType, name: &str, value: Option<&[u8]>) {
        let mut maps = self.maps.borrow_mut();
        let m = maps.entry(map as u32).or_default();
        m.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        if let Some(v) = value {
            m.push((name.to_owned(), v.to_vec()));
        }
    }
    fn set_headers(&self, map: MapType, pairs: &[(&str, &[u8])]) {
        let m = pairs.iter().map(|(n, v)| ((*n).to_owned(), v.to_vec()));
        self.maps.borrow_mut().insert(map as u32, m.collect());
    }
    fn send(&self, status: u16, headers: &[(&str, &[u8])], body: Option<&[u8]>) {
        self.sent_bytes.borrow_mut().push(
            headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), v.to_vec()))
                .collect(),
        );
        self.sent.borrow_mut().push((
            status,
            headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), String::from_utf8_lossy(v).into_owned()))
                .collect(),
            body.unwrap_or_default().to_vec(),
        ));
    }
    fn set_effective_context(&self, _: u32) -> bool {
        true
    }
    fn resume_request(&self) {}
    fn dispatch(
        &self,
        cluster: &str,
        headers: &[(&str, &[u8])],
        body: Option<&[u8]>,
        _: Duration,
    ) -> Result<u32, Status> {
        if self.text_callouts.get() && headers.iter().any(|(_, v)| std::str::from_utf8(v).is_err())
        {
            return Err(Status::SerializationFailure);
        }
        self.dispatched_to
            .borrow_mut()
            .push((cluster.to_owned(), body.unwrap_or_default().to_vec()));
        self.dispatched_bytes.borrow_mut().push(
            headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), v.to_vec()))
                .collect(),
        );
        let mut d = self.dispatched.borrow_mut();
        d.push(
            headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), String::from_utf8_lossy(v).into_owned()))
                .collect(),
        );
        Ok(u32::try_from(d.len()).unwrap_or(u32::MAX))
    }
    fn define_metric(&self, _: MetricType, _: &str) -> u32 {
        self.metrics.set(self.metrics.get() + 1);
        self.metrics.get()
    }
    fn metric_add(&self, _: u32, _: i64) {}
    fn metric_set(&self, _: u32, _: u64) {}
    fn set_tick(&self, period: Duration) {
        self.ticks.borrow_mut().push(period);
    }
    fn downstream_tls(&self) -> bool {
        false
    }
}

/// The edge app's shipped configuration as the filter's JSON plugin configuration.
fn config() -> String {
    let v: toml::Value =
        toml::from_str(include_str!("../../../edge-app/cachet.toml")).expect("cachet.toml");
    let mut json = serde_json::to_value(v).expect("json");
    json["admin"] = serde_json::json!({"token": "a-test-token-of-32-bytes-length!"});
    // The callout path: these tests drive misses through callouts; the router path has
    // its own tests (`router_config`).
    json["envoy"] = serde_json::json!({"cluster": "origin", "tick": "100ms", "fill": "callout"});
    json.to_string()
}

/// A configured VM on a fresh fake host.
fn vm() -> (Rc<Fake>, Rc<Vm>) {
    vm_with(&config())
}

/// A VM configured with the plugin configuration `cfg` on a fresh fake host.
fn vm_with(cfg: &str) -> (Rc<Fake>, Rc<Vm>) {
    let fake = Rc::new(Fake::default());
    fake.now_ms.set(1_700_000_000_000);
    let cfg = cfg.to_owned();
    fake.buffer_set(BufferType::PluginConfiguration, cfg.as_bytes());
    let vm = Rc::new(Vm::new(1, Rc::clone(&fake) as Rc<dyn Host>));
    vm.init_shared();
    assert!(
        vm.configure(cfg.len()),
        "the shipped configuration is accepted"
    );
    (fake, vm)
}

const IPHONE: &[u8] = b"Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) Mobile/15E148";

fn header<'a>(sent: &'a Sent, name: &str) -> Option<&'a str> {
    sent.1
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one story (miss, range, hit), read top to bottom"
)]
fn a_miss_fetches_what_the_key_accounts_for_and_a_hit_is_served_from_memory() {
    let (fake, vm) = vm();
    fake.map(
        MapType::HttpRequestHeaders,
        &[
            (":method", b"GET"),
            (":path", b"/blog/alice/entry/1?utm_source=x"),
            (":authority", b"Blog.Example."),
            ("user-agent", IPHONE),
            ("range", b"bytes=0-1"),
            ("if-match", b"\"x\""),
            ("x-cachet-device", b"pc"),
            ("x-forwarded-host", b"caf\xe9"),
        ],
    );
    let mut first = Http::new(Rc::clone(&vm), 2);
    assert_eq!(first.on_request_headers(true), Action::Pause);
    let fetch = fake
        .dispatched
        .borrow()
        .last()
        .cloned()
        .expect("one origin fetch");
    let get = |n: &str| {
        fetch
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(get(":authority"), Some("blog.example"));
    assert_eq!(get(":path"), Some("/blog/alice/entry/1"));
    assert_eq!(get("x-cachet-device"), Some("smartphone"));
    assert_eq!(get("accept-encoding"), Some("gzip"));
    assert_eq!(
        get("range"),
        None,
        "a fill never carries the client's range"
    );
    assert_eq!(get("if-match"), None, "nor its preconditions");

    fake.map(
        MapType::HttpCallResponseHeaders,
        &[
            (":status", b"200"),
            ("cache-control", b"max-age=60"),
            ("content-type", b"text/html"),
            ("etag", b"\"v1\""),
        ],
    );
    fake.buffer_set(BufferType::HttpCallResponseBody, b"hello");
    first.on_fetch_response(1, 4, 5);
    let answer = fake.last_sent();
    assert_eq!(
        answer.0, 206,
        "the client's range is answered from the stored object"
    );
    assert_eq!(answer.2, b"he");
    assert_eq!(header(&answer, "x-cache"), Some("MISS"));

    fake.map(
        MapType::HttpRequestHeaders,
        &[
            (":method", b"GET"),
            (":path", b"/blog/alice/entry/1"),
            (":authority", b"blog.example"),
            ("user-agent", IPHONE),
            ("accept-encoding", b"gzip"),
        ],
    );
    let mut second = Http::new(Rc::clone(&vm), 3);
    assert_eq!(second.on_request_headers(true), Action::Pause);
    // The same hit again, in the steady state (the workspace gauge already current).
    let before = vm.host_calls();
    let mut third = Http::new(Rc::clone(&vm), 4);
    assert_eq!(third.on_request_headers(true), Action::Pause);
    let calls = vm.host_calls() - before;
    let hit = fake.last_sent();
    assert_eq!(hit.0, 200);
    assert_eq!(header(&hit, "x-cache"), Some("HIT"));
    assert_eq!(
        header(&hit, "etag"),
        Some("W/\"v1\""),
        "gzipped by the edge: weak"
    );
    assert_eq!(
        fake.dispatched.borrow().len(),
        1,
        "the hit made no origin fetch"
    );
    // The figure docs/performance.md tracks for the in-VM hit path: the header map, the
    // clock, the ban epoch, the reply and the hit counter (V8 host calls cost ~0.3 µs each).
    eprintln!("host calls for an in-VM hit: {calls}");
    assert_eq!(calls, 5, "an in-VM hit's host calls");
    let upstream = fake.headers(MapType::HttpRequestHeaders);
    assert!(
        !upstream
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("x-cachet-device")),
        "a hit never goes upstream: no device header is written"
    );
}

#[test]
fn a_follower_of_an_unstored_fill_fetches_from_the_root_within_a_hurried_tick() {
    // Without hit-for-pass markers, a follower of an answer that was not stored fills in
    // turn (rather than passing on a marker).
    let mut cfg: serde_json::Value = serde_json::from_str(&config()).expect("json");
    cfg["edge"]["hit_for_pass"] = "0s".into();
    let (fake, vm) = vm_with(&cfg.to_string());
    let req: &[(&str, &[u8])] = &[
        (":method", b"GET"),
        (":path", b"/blog/carol/entry/3"),
        (":authority", b"blog.example"),
        ("user-agent", IPHONE),
    ];
    fake.map(MapType::HttpRequestHeaders, req);
    let mut leader = Http::new(Rc::clone(&vm), 2);
    assert_eq!(leader.on_request_headers(true), Action::Pause);
    fake.map(MapType::HttpRequestHeaders, req);
    let mut follower = Http::new(Rc::clone(&vm), 3);
    assert_eq!(follower.on_request_headers(true), Action::Pause);
    assert_eq!(fake.dispatched.borrow().len(), 1, "the follower waits");
    fake.ticks.borrow_mut().clear();
    fake.map(
        MapType::HttpCallResponseHeaders,
        &[(":status", b"200"), ("cache-control", b"no-store")],
    );
    fake.buffer_set(BufferType::HttpCallResponseBody, b"carol's page");
    leader.on_fetch_response(1, 2, 12);
    // Woken in the leader's callback, the follower fills in turn; its callout goes out
    // from the root context (a stream's context may be gone before the answer), within
    // a millisecond rather than the 100 ms tick.
    assert_eq!(
        fake.dispatched.borrow().len(),
        1,
        "not from the leader's context"
    );
    assert_eq!(*fake.ticks.borrow(), [Duration::from_millis(1)]);
    fake.now_ms.set(fake.now_ms.get() + 1);
    vm.tick();
    assert_eq!(
        fake.dispatched.borrow().len(),
        2,
        "the hurried tick sent it"
    );
    assert_eq!(
        *fake.ticks.borrow(),
        [Duration::from_millis(1), Duration::from_millis(100)],
        "and put the period back"
    );
    fake.buffer_set(BufferType::HttpCallResponseBody, b"carol's page");
    vm.on_root_callout(2, 2, 12);
    let answer = fake.last_sent();
    assert_eq!(
        (answer.0, answer.2.as_slice()),
        (200, b"carol's page".as_slice())
    );
}

#[test]
fn a_private_answer_is_passed_to_its_client_and_never_served_to_another() {
    let (fake, vm) = vm();
    let req: &[(&str, &[u8])] = &[
        (":method", b"GET"),
        (":path", b"/blog/bob/entry/2"),
        (":authority", b"blog.example"),
        ("user-agent", IPHONE),
        ("x-cachet-device", b"pc"),
    ];
    fake.map(MapType::HttpRequestHeaders, req);
    let mut first = Http::new(Rc::clone(&vm), 2);
    assert_eq!(first.on_request_headers(true), Action::Pause);
    fake.map(
        MapType::HttpCallResponseHeaders,
        &[(":status", b"200"), ("cache-control", b"private")],
    );
    fake.buffer_set(BufferType::HttpCallResponseBody, b"bob's page");
    first.on_fetch_response(1, 2, 10);
    assert_eq!(fake.dispatched.borrow().len(), 1);
    fake.map(MapType::HttpRequestHeaders, req);
    let mut second = Http::new(Rc::clone(&vm), 3);
    assert_eq!(
        second.on_request_headers(true),
        Action::Continue,
        "hit-for-pass: the next request goes to the origin itself"
    );
    let upstream = fake.headers(MapType::HttpRequestHeaders);
    let device: Vec<&[u8]> = upstream
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("x-cachet-device"))
        .map(|(_, v)| v.as_slice())
        .collect();
    assert_eq!(
        device,
        [b"smartphone".as_slice()],
        "the client's device header is replaced by ours on a pass"
    );
    assert_eq!(
        fake.sent
            .borrow()
            .iter()
            .filter(|s| s.2 == b"bob's page")
            .count(),
        1,
        "the private body went to its own client only"
    );
}

/// The token `config()` sets.
const TOKEN: &str = "a-test-token-of-32-bytes-length!";

/// Sends `POST /.cachet/ban` with `expr` through the stream callbacks.
fn post_ban(fake: &Fake, vm: &Rc<Vm>, ctx: u32, expr: &[u8]) -> Http {
    let auth = format!("Bearer {TOKEN}");
    fake.map(
        MapType::HttpRequestHeaders,
        &[
            (":method", b"POST"),
            (":path", b"/.cachet/ban"),
            (":authority", b"blog.example"),
            ("authorization", auth.as_bytes()),
        ],
    );
    let mut s = Http::new(Rc::clone(vm), ctx);
    assert_eq!(s.on_request_headers(false), Action::Pause);
    fake.buffer_set(BufferType::HttpRequestBody, expr);
    assert_eq!(s.on_request_body(expr.len(), true), Action::Pause);
    s
}

/// Delivers an etcd answer `body` (status 200) to `f`, or a failed callout.
fn etcd_answers(fake: &Fake, body: Option<&str>, f: impl FnOnce(usize, usize)) {
    match body {
        Some(b) => {
            fake.map(MapType::HttpCallResponseHeaders, &[(":status", b"200")]);
            fake.buffer_set(BufferType::HttpCallResponseBody, b.as_bytes());
            f(1, b.len());
        }
        None => f(0, 0),
    }
}

#[test]
fn in_fleet_mode_a_ban_is_answered_after_etcd_accepted_it_and_applied_from_the_poll() {
    let mut cfg: serde_json::Value = serde_json::from_str(&config()).unwrap();
    cfg["envoy"]["etcd_cluster"] = serde_json::json!("etcd");
    let (fake, vm) = vm_with(&cfg.to_string());

    let mut s = post_ban(&fake, &vm, 2, b"obj.http.x-url ~ ^/blog/");
    assert!(fake.sent.borrow().is_empty(), "no answer before etcd's");
    let (cluster, txn) = fake.dispatched_to.borrow().last().cloned().unwrap();
    assert_eq!(cluster, "etcd");
    let path = fake.dispatched.borrow().last().cloned().unwrap();
    assert!(path.contains(&(":path".to_owned(), "/v3/kv/txn".to_owned())));
    let txn: serde_json::Value = serde_json::from_slice(&txn).unwrap();
    assert_eq!(txn["compare"][0]["target"], "CREATE");
    // Nothing is applied locally before etcd accepted it and a poll brought it.
    assert_eq!(
        cachet_store::bans::read_log(&fake.shared).0.entries.len(),
        0
    );
    etcd_answers(
        &fake,
        Some(r#"{"header":{"revision":"7"},"succeeded":true}"#),
        |nh, n| {
            s.on_fetch_response(1, nh, n);
        },
    );
    let answer = fake.last_sent();
    assert_eq!(answer.0, 201, "{}", String::from_utf8_lossy(&answer.2));
    let body: serde_json::Value = serde_json::from_slice(&answer.2).unwrap();
    assert_eq!(body["id"], 7, "the fleet-wide id is etcd's revision");

    // etcd gone: refused with 503 and a reason, never accepted.
    let mut s = post_ban(&fake, &vm, 3, b"obj.status == 404");
    etcd_answers(&fake, None, |nh, n| s.on_fetch_response(2, nh, n));
    let refused = fake.last_sent();
    assert_eq!(refused.0, 503);
    assert!(String::from_utf8_lossy(&refused.2).contains("etcd unavailable"));
    assert_eq!(header(&refused, "retry-after"), Some("5"));

    // The accepting node polls on its next tick (asked by the 201) and applies the entry.
    let before = fake.dispatched.borrow().len();
    fake.now_ms.set(fake.now_ms.get() + 100);
    vm.tick();
    assert_eq!(fake.dispatched.borrow().len(), before + 1, "one poll");
    let poll = fake.dispatched.borrow().last().cloned().unwrap();
    assert!(poll.contains(&(":path".to_owned(), "/v3/kv/range".to_owned())));
    let token = u32::try_from(fake.dispatched.borrow().len()).unwrap();
    let entry = serde_json::json!({
        "id": 0, "kind": "ban", "expr": "obj.http.x-url ~ \"^/blog/\"", "lurker_friendly": true,
        "at_ms": 1_700_000_000_000_u64
    });
    let b64 = |b: &[u8]| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(b)
    };
    let key = cachet_store::etcd::entry_key("/cachet/bans/", 1_700_000_000_000, 1);
    let answer = serde_json::json!({"header": {"revision": "7"}, "kvs": [{
        "key": b64(key.as_bytes()), "value": b64(entry.to_string().as_bytes()),
        "create_revision": "7", "mod_revision": "7"}]});
    etcd_answers(&fake, Some(&answer.to_string()), |nh, n| {
        vm.on_root_callout(token, nh, n);
    });
    let log = cachet_store::bans::read_log(&fake.shared).0;
    assert_eq!(log.entries.len(), 1);
    // The entry keeps its fleet-wide id, the etcd revision (issue 27 item 8).
    assert_eq!((log.entries[0].id, log.feed_through), (7, 7));
    // Then, once a minute at most, the search for retirable entries.
    let last = fake.dispatched_to.borrow().last().cloned().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&last.1).unwrap();
    assert_eq!(v["sort_order"], "DESCEND", "the retirement search");
    // No second poll within the interval.
    let before = fake.dispatched.borrow().len();
    etcd_answers(&fake, Some(r#"{"header":{"revision":"7"}}"#), |nh, n| {
        vm.on_root_callout(token + 1, nh, n);
    });
    fake.now_ms.set(fake.now_ms.get() + 100);
    vm.tick();
    assert_eq!(fake.dispatched.borrow().len(), before, "nothing due");
    fake.now_ms.set(fake.now_ms.get() + 1_000);
    vm.tick();
    assert_eq!(
        fake.dispatched.borrow().len(),
        before + 1,
        "the next poll, after etcd_interval"
    );
}

/// A `GET /blog/alice/entry/9` as the request headers (gzip client).
fn get_entry(fake: &Fake) {
    fake.map(
        MapType::HttpRequestHeaders,
        &[
            (":method", b"GET"),
            (":path", b"/blog/alice/entry/9"),
            (":authority", b"blog.example"),
            ("accept-encoding", b"gzip"),
        ],
    );
}

/// Fetches `GET /blog/alice/entry/9` on `vm` (stream `ctx`) and stores the origin's
/// `max-age=600` answer: `MISS`.
fn store_entry(fake: &Fake, vm: &Rc<Vm>, ctx: u32) {
    get_entry(fake);
    let mut s = Http::new(Rc::clone(vm), ctx);
    assert_eq!(s.on_request_headers(true), Action::Pause);
    fake.map(
        MapType::HttpCallResponseHeaders,
        &[(":status", b"200"), ("cache-control", b"max-age=600")],
    );
    fake.buffer_set(BufferType::HttpCallResponseBody, b"v1");
    s.on_fetch_response(1, 2, 2);
    assert_eq!(header(&fake.last_sent(), "x-cache"), Some("MISS"));
}

#[test]
fn with_ban_staleness_a_hit_skips_the_epoch_read_and_a_ban_from_another_worker_applies_within_the_bound()
 {
    let mut cfg: serde_json::Value = serde_json::from_str(&config()).unwrap();
    cfg["envoy"]["ban_staleness"] = serde_json::json!("500ms");
    let cfg = cfg.to_string();
    let (fake, a) = vm_with(&cfg);
    // A second worker of the same Envoy (same shared data), where the ban is accepted.
    let b = Rc::new(Vm::new(10, Rc::clone(&fake) as Rc<dyn Host>));
    b.init_shared();
    assert!(b.configure(cfg.len()));
    let t0 = fake.now_ms.get();
    store_entry(&fake, &a, 2);
    let hit = |ctx: u32, at: u64| {
        fake.now_ms.set(at);
        get_entry(&fake);
        let before = a.host_calls();
        let mut s = Http::new(Rc::clone(&a), ctx);
        assert_eq!(s.on_request_headers(true), Action::Pause);
        (a.host_calls() - before, fake.dispatched.borrow().len())
    };
    // The lookup of the miss read the epoch at t0: within 500 ms a hit does not.
    let (calls, fetches) = hit(3, t0 + 100);
    assert_eq!(header(&fake.last_sent(), "x-cache"), Some("HIT"));
    assert_eq!((calls, fetches), (4, 1), "no epoch read within the bound");
    post_ban(&fake, &b, 20, b"obj.http.x-url ~ ^/blog/alice/");
    assert_eq!(fake.last_sent().0, 201, "accepted on the other worker");
    // Within the bound this worker has not seen it yet (the documented staleness)...
    let (_, fetches) = hit(4, t0 + 200);
    assert_eq!(
        (header(&fake.last_sent(), "x-cache"), fetches),
        (Some("HIT"), 1)
    );
    // ...past it, the lookup reads the epoch and the banned copy is refetched.
    let (calls, fetches) = hit(5, t0 + 600);
    assert_eq!(fetches, 2, "the banned object is fetched again");
    assert!(calls > 4, "the epoch was read");
}

#[test]
fn by_default_every_lookup_reads_the_ban_epoch_and_a_ban_applies_at_once() {
    let (fake, a) = vm();
    let b = Rc::new(Vm::new(10, Rc::clone(&fake) as Rc<dyn Host>));
    b.init_shared();
    assert!(b.configure(config().len()));
    store_entry(&fake, &a, 2);
    // A ban covers objects stored before it.
    fake.now_ms.set(fake.now_ms.get() + 1);
    post_ban(&fake, &b, 20, b"obj.http.x-url ~ ^/blog/alice/");
    fake.now_ms.set(fake.now_ms.get() + 1);
    get_entry(&fake);
    let mut s = Http::new(Rc::clone(&a), 3);
    assert_eq!(s.on_request_headers(true), Action::Pause);
    assert_eq!(fake.dispatched.borrow().len(), 2, "refetched at once");
}

/// A new root context in the VM `fake` hosts (what Envoy creates for a plugin
/// configuration update), configured with `cfg`: its `configure` result.
fn new_root(fake: &Rc<Fake>, id: u32, cfg: &str) -> (Rc<Vm>, bool) {
    fake.buffer_set(BufferType::PluginConfiguration, cfg.as_bytes());
    let vm = Rc::new(Vm::new(id, Rc::clone(fake) as Rc<dyn Host>));
    vm.init_shared();
    let ok = vm.configure(cfg.len());
    (vm, ok)
}

/// Sends `GET path` with the admin token (when `auth`) on `vm` and returns the answer.
fn admin_get(fake: &Fake, vm: &Rc<Vm>, ctx: u32, path: &str, auth: bool) -> Sent {
    let bearer = format!("Bearer {TOKEN}");
    let mut req: Vec<(&str, &[u8])> = vec![
        (":method", b"GET"),
        (":path", path.as_bytes()),
        (":authority", b"blog.example"),
    ];
    if auth {
        req.push(("authorization", bearer.as_bytes()));
    }
    fake.map(MapType::HttpRequestHeaders, &req);
    let mut s = Http::new(Rc::clone(vm), ctx);
    assert_eq!(s.on_request_headers(true), Action::Pause);
    fake.last_sent()
}

/// A plugin configuration with the typo of issue 27 item 13 (`tll` for `ttl`).
fn typo_config() -> String {
    let mut cfg: serde_json::Value = serde_json::from_str(&config()).unwrap();
    cfg["routes"][0]["tll"] = serde_json::json!("5m");
    cfg.to_string()
}

#[test]
fn a_rejected_configuration_update_keeps_serving_with_the_last_good_one() {
    crate::vm::forget_last_good();
    let (fake, good) = vm();
    store_entry(&fake, &good, 2);
    // The update with a typo: a new root context in the same VM. It is not refused...
    let (vm, ok) = new_root(&fake, 30, &typo_config());
    assert!(ok, "a rejected configuration never stops the filter");
    // ...logged loudly...
    let errors = fake.errors.borrow().join("\n");
    assert!(errors.contains("CONFIGURATION REJECTED"), "{errors}");
    assert!(errors.contains("tll"), "{errors}");
    assert!(
        errors.contains("last configuration that loaded"),
        "{errors}"
    );
    // ...and the last good configuration serves: robots.txt, a HIT, the admin API.
    fake.map(
        MapType::HttpRequestHeaders,
        &[
            (":method", b"GET"),
            (":path", b"/robots.txt"),
            (":authority", b"blog.example"),
        ],
    );
    let mut s = Http::new(Rc::clone(&vm), 31);
    assert_eq!(s.on_request_headers(true), Action::Pause);
    let robots = fake.last_sent();
    assert_eq!(robots.0, 200);
    assert!(String::from_utf8_lossy(&robots.2).contains("User-agent: *"));
    get_entry(&fake);
    let mut s = Http::new(Rc::clone(&vm), 32);
    assert_eq!(s.on_request_headers(true), Action::Pause);
    assert_eq!(header(&fake.last_sent(), "x-cache"), Some("HIT"));
    assert_eq!(fake.dispatched.borrow().len(), 1, "served from the cache");
    fake.now_ms.set(fake.now_ms.get() + 1);
    post_ban(&fake, &vm, 33, b"obj.http.x-url ~ ^/blog/alice/");
    assert_eq!(fake.last_sent().0, 201, "a ban is accepted");
    // GET /.cachet/config says what is in force and why, behind the token.
    let answer = admin_get(&fake, &vm, 34, "/.cachet/config", true);
    assert_eq!(answer.0, 200);
    let v: serde_json::Value = serde_json::from_slice(&answer.2).unwrap();
    assert_eq!(v["in_force"], "last-good");
    assert_eq!(v["ok"], false);
    assert_eq!(v["configured_from"], crate::vm::CONFIGURED_FROM);
    assert!(
        v["rejected"].as_str().is_some_and(|e| e.contains("tll")),
        "{v}"
    );
    assert_eq!(admin_get(&fake, &vm, 35, "/.cachet/config", false).0, 401);
    // The good root context still answers that its own configuration is in force.
    let answer = admin_get(&fake, &good, 36, "/.cachet/config", true);
    let v: serde_json::Value = serde_json::from_slice(&answer.2).unwrap();
    assert_eq!(
        (v["in_force"].as_str(), v["ok"].as_bool()),
        (Some("configured"), Some(true))
    );
    // A later good update is in force again.
    let (fixed, ok) = new_root(&fake, 40, &config());
    assert!(ok);
    let v: serde_json::Value =
        serde_json::from_slice(&admin_get(&fake, &fixed, 41, "/.cachet/config", true).2).unwrap();
    assert_eq!(v["in_force"], "configured");
}

#[test]
fn a_rejected_first_configuration_serves_with_the_built_in_default() {
    crate::vm::forget_last_good();
    let fake = Rc::new(Fake::default());
    fake.now_ms.set(1_700_000_000_000);
    for (i, bad) in ["", "not json", &typo_config()].into_iter().enumerate() {
        let id = 10 * u32::try_from(i + 1).unwrap();
        let (vm, ok) = new_root(&fake, id, bad);
        assert!(ok, "{bad:?} does not stop the filter");
        let errors = fake.errors.borrow().join("\n");
        assert!(errors.contains("built-in configuration"), "{errors}");
        assert!(!errors.contains("panicked"), "{errors}");
        // robots.txt is still made here; everything else passes uncached (no routes).
        fake.map(
            MapType::HttpRequestHeaders,
            &[
                (":method", b"GET"),
                (":path", b"/robots.txt"),
                (":authority", b"blog.example"),
            ],
        );
        let mut s = Http::new(Rc::clone(&vm), id + 1);
        assert_eq!(s.on_request_headers(true), Action::Pause);
        assert_eq!(fake.last_sent().0, 200);
        get_entry(&fake);
        let mut s = Http::new(Rc::clone(&vm), id + 2);
        assert_eq!(
            s.on_request_headers(true),
            Action::Continue,
            "passed to the origin"
        );
        // The built-in default has no admin token: the admin API is closed.
        assert_eq!(
            admin_get(&fake, &vm, id + 3, "/.cachet/config", true).0,
            403
        );
    }
}

#[test]
fn a_malformed_authority_is_a_400_before_anything_reads_the_request() {
    let (fake, vm) = vm();
    for (i, (authority, path)) in [
        ("blog.example:99999", "/blog/alice/entry/1"),
        ("blog.example:99999", "/.cachet/bans"),
        ("bad host", "/robots.txt"),
    ]
    .into_iter()
    .enumerate()
    {
        fake.map(
            MapType::HttpRequestHeaders,
            &[
                (":method", b"GET"),
                (":path", path.as_bytes()),
                (":authority", authority.as_bytes()),
            ],
        );
        let mut s = Http::new(Rc::clone(&vm), 2 + u32::try_from(i).unwrap());
        assert_eq!(s.on_request_headers(true), Action::Pause);
        let sent = fake.last_sent();
        assert_eq!(sent.0, 400, "{authority} {path}");
        assert_eq!(sent.2, b"missing or malformed Host header\n");
        assert_eq!(header(&sent, "x-cache"), Some("SYNTH"));
    }
    assert!(
        fake.dispatched.borrow().is_empty(),
        "nothing reached the origin"
    );
}

/// Answers the stream's callout `token` with a `206` part of a 40-byte representation.
fn part_answers(fake: &Fake, s: &mut Http, token: u32, (a, b): (usize, usize), etag: &[u8]) {
    const BODY: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCD";
    let cr = format!("bytes {a}-{b}/40");
    fake.map(
        MapType::HttpCallResponseHeaders,
        &[
            (":status", b"206"),
            ("content-range", cr.as_bytes()),
            ("etag", etag),
            ("x-cache", b"HIT"),
            ("age", b"3"),
            ("content-length", (b - a + 1).to_string().as_bytes()),
            ("x-envoy-upstream-service-time", b"1"),
        ],
    );
    fake.buffer_set(BufferType::HttpCallResponseBody, &BODY[a..=b]);
    s.on_fetch_response(token, 7, b - a + 1);
}

#[test]
fn a_whole_request_on_a_slicing_route_is_combined_from_parts_asked_through_the_slice_cluster() {
    // Issue 30, RFC 9111 §3.4; the rules are `cachet_http::stitch`'s.
    let mut cfg: serde_json::Value = serde_json::from_str(&config()).unwrap();
    cfg["envoy"]["slice_cluster"] = serde_json::json!("self");
    let video = serde_json::json!({"name": "video", "path_prefix": "/v/", "slice_bytes": 16});
    cfg["routes"].as_array_mut().unwrap().insert(0, video);
    let (fake, vm) = vm_with(&cfg.to_string());
    let get = |ctx: u32| {
        fake.map(
            MapType::HttpRequestHeaders,
            &[
                (":method", b"GET"),
                (":path", b"/v/movie"),
                (":authority", b"cdn.example"),
                ("connection", b"x-hop"),
                ("x-hop", b"1"),
                ("user-agent", IPHONE),
            ],
        );
        let mut s = Http::new(Rc::clone(&vm), ctx);
        assert_eq!(s.on_request_headers(true), Action::Pause);
        s
    };
    let asked = |i: usize| {
        let (cluster, _) = fake.dispatched_to.borrow()[i].clone();
        let h = fake.dispatched.borrow()[i].clone();
        let get = |n: &str| h.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        assert!(
            get("x-hop").is_none() && get("connection").is_none(),
            "hop-by-hop"
        );
        assert_eq!(get(":authority").as_deref(), Some("cdn.example"));
        assert_eq!(
            get("user-agent").as_deref(),
            Some(std::str::from_utf8(IPHONE).unwrap())
        );
        (
            cluster,
            get(":path").unwrap_or_default(),
            get("range").unwrap_or_default(),
        )
    };
    let mut s = get(2);
    assert_eq!(
        asked(0),
        ("self".into(), "/v/movie".into(), "bytes=0-15".into())
    );
    part_answers(&fake, &mut s, 1, (0, 15), b"\"v1\"");
    assert_eq!(asked(1).2, "bytes=16-31");
    part_answers(&fake, &mut s, 2, (16, 31), b"\"v1\"");
    assert_eq!(
        asked(2).2,
        "bytes=32-39",
        "the last part ends at the length"
    );
    assert!(
        fake.sent.borrow().is_empty(),
        "nothing before the last part"
    );
    part_answers(&fake, &mut s, 3, (32, 39), b"\"v1\"");
    let sent = fake.last_sent();
    assert_eq!(sent.0, 200);
    assert_eq!(sent.2, b"0123456789abcdefghijklmnopqrstuvwxyzABCD");
    assert_eq!(header(&sent, "x-cache"), Some("HIT"));
    assert_eq!(header(&sent, "age"), Some("3"));
    assert_eq!(header(&sent, "content-range"), None);
    assert_eq!(
        header(&sent, "content-length"),
        None,
        "Envoy frames local replies"
    );

    // A later part of another representation: the request's ordinary flow (a whole
    // fill from the origin cluster), nothing sent before it.
    let before = fake.sent.borrow().len();
    let mut s = get(3);
    part_answers(&fake, &mut s, 4, (0, 15), b"\"v1\"");
    part_answers(&fake, &mut s, 5, (16, 31), b"\"v2\"");
    assert_eq!(fake.sent.borrow().len(), before);
    let (cluster, _) = fake.dispatched_to.borrow().last().cloned().unwrap();
    assert_eq!(cluster, "origin");
    let whole = fake.dispatched.borrow().last().cloned().unwrap();
    assert!(whole.iter().all(|(n, _)| n != "range"), "{whole:?}");
}

#[test]
fn a_part_the_host_cannot_send_leaves_the_request_to_its_ordinary_flow() {
    // A client field that is not UTF-8 (obs-text): the proxy-wasm binding refuses the
    // part's callout rather than alter it, so the request takes its ordinary flow (a whole
    // fill, the bytes carried as they are), never a half-combined answer.
    let mut cfg: serde_json::Value = serde_json::from_str(&config()).unwrap();
    cfg["envoy"]["slice_cluster"] = serde_json::json!("self");
    let video = serde_json::json!({"name": "video", "path_prefix": "/v/", "slice_bytes": 16});
    cfg["routes"].as_array_mut().unwrap().insert(0, video);
    let (fake, vm) = vm_with(&cfg.to_string());
    fake.text_callouts.set(true);
    fake.map(
        MapType::HttpRequestHeaders,
        &[
            (":method", b"GET"),
            (":path", b"/v/movie"),
            (":authority", b"cdn.example"),
            ("x-note", b"caf\xe9"),
        ],
    );
    let mut s = Http::new(Rc::clone(&vm), 2);
    assert_eq!(s.on_request_headers(true), Action::Pause);
    assert!(fake.sent.borrow().is_empty(), "nothing answered");
    let to: Vec<String> = fake
        .dispatched_to
        .borrow()
        .iter()
        .map(|(c, _)| c.clone())
        .collect();
    assert_eq!(to, ["origin"], "no part went out; the whole fill did");
    let whole = fake.dispatched.borrow().last().cloned().unwrap();
    assert!(whole.iter().all(|(n, _)| n != "range"), "{whole:?}");
}
