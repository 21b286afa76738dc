//! Unit tests of the edge flow over an in-memory host: a core cache with transactions, TTL, SWR and surrogate-key purges, a KV store with generations, an origin that counts its requests; the clock is set by the test.
#![allow(
    clippy::expect_used,
    clippy::panic,
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "tests fail loudly"
)]

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cachet_policy::banstore::{KvItem, KvWriteError, Precondition};

use crate::host::{BackendSpec, Entry, Fields, Host, OriginRequest, OriginResponse, ShieldPos};
use crate::{ClientRequest, Payload, Response, scratch};

const TOKEN: &str = "a-test-token-of-32-bytes-length!";

/// One core-cache entry.
#[derive(Clone, Debug)]
struct Stored {
    body: Vec<u8>,
    meta: Vec<u8>,
    at: SystemTime,
    ttl: Duration,
    swr: Duration,
    keys: Vec<String>,
    soft_purged: bool,
}

impl Stored {
    fn stale(&self, now: SystemTime) -> bool {
        self.soft_purged || now >= self.at + self.ttl
    }
    fn usable(&self, now: SystemTime) -> bool {
        now < self.at + self.ttl + self.swr
    }
}

/// A KV item: body, generation, metadata.
type KvEntry = (Vec<u8>, u64, Option<String>);

/// A transaction: the key, what it found, whether it holds the obligation.
struct Tx {
    key: Vec<u8>,
    found: Option<Stored>,
    obligated: bool,
}

/// The in-memory Fastly.
#[derive(Default)]
struct Fake {
    now: Cell<u64>,
    cache: RefCell<HashMap<Vec<u8>, Stored>>,
    kv: RefCell<HashMap<String, KvEntry>>,
    kv_broken: Cell<bool>,
    /// Requests the origin received: (method, path).
    origin: RefCell<Vec<(String, String)>>,
    purges: RefCell<Vec<(String, bool)>>,
    logs: RefCell<Vec<String>>,
    /// The `cachet` config store's `config` item.
    config_store: RefCell<Option<String>>,
    /// Keys whose obligation another (simulated) request holds: lookups get no
    /// obligation; with nothing usable they wait (and time out: one thread here).
    others_hold: RefCell<Vec<Vec<u8>>>,
    /// What that other request does once the clock reaches the time (ms).
    at_time: RefCell<Vec<Scheduled>>,
    /// Keys whose obligation was given back (`tx_cancel`), in order.
    cancelled: RefCell<Vec<Vec<u8>>>,
}

/// Something another (simulated) request does at a time (ms).
type Scheduled = (u64, Box<dyn FnOnce(&Fake)>);

impl Fake {
    fn at(ms: u64) -> Self {
        let f = Self::default();
        f.now.set(ms);
        f
    }
    /// Lets time pass to `ms`, running what is scheduled up to it.
    fn advance(&self, ms: u64) {
        self.now.set(self.now.get().max(ms));
        loop {
            let due = {
                let mut at = self.at_time.borrow_mut();
                at.iter().position(|(t, _)| *t <= ms).map(|i| at.remove(i))
            };
            let Some((_, run)) = due else { break };
            run(self);
        }
    }
    fn entry(&self, key: &[u8], e: &Entry<'_>, body: &[u8]) {
        let stored = Stored {
            body: body.to_vec(),
            meta: e.user_metadata.to_vec(),
            at: self.now() - e.age,
            ttl: e.ttl,
            swr: e.swr,
            keys: e.surrogate_keys.to_vec(),
            soft_purged: false,
        };
        self.cache.borrow_mut().insert(key.to_vec(), stored);
    }
    fn origin_hits(&self) -> usize {
        self.origin.borrow().len()
    }
    /// The last access record.
    fn access(&self) -> serde_json::Value {
        let logs = self.logs.borrow();
        serde_json::from_str(logs.last().map_or("null", String::as_str)).unwrap_or_default()
    }
}

impl Host for Fake {
    type Tx = Tx;
    type Found = Stored;
    type Body = Vec<u8>;
    type Backend = ();
    type Kv = ();

    fn now(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.now.get())
    }
    fn monotonic(&self) -> Duration {
        Duration::from_millis(self.now.get())
    }
    fn random_u64(&self) -> u64 {
        u64::MAX / 3
    }
    fn sleep(&self, d: Duration) {
        self.advance(self.now.get() + u64::try_from(d.as_millis()).unwrap());
    }
    fn tx_lookup(
        &self,
        key: &[u8],
        _: &Fields,
        _: bool,
        wait: Option<Duration>,
    ) -> Result<Option<Tx>, String> {
        let now = self.now();
        let found = self
            .cache
            .borrow()
            .get(key)
            .filter(|s| s.usable(now))
            .cloned();
        let others = self.others_hold.borrow().iter().any(|k| k == key);
        if others && found.is_none() {
            // Collapsed behind the other request's fill: one thread, so the wait runs out.
            if let Some(w) = wait {
                self.sleep(w);
            }
            return Ok(None);
        }
        let obligated = !others && found.as_ref().is_none_or(|s| s.stale(now));
        Ok(Some(Tx {
            key: key.to_vec(),
            found,
            obligated,
        }))
    }
    fn tx_found(&self, tx: &Tx) -> Option<Stored> {
        tx.found.clone()
    }
    fn tx_obligated(&self, tx: &Tx) -> bool {
        tx.obligated
    }
    fn tx_insert(&self, tx: Tx, e: &Entry<'_>, body: &[u8]) -> Result<(), String> {
        assert!(tx.obligated, "insert without the obligation");
        self.entry(&tx.key, e, body);
        Ok(())
    }
    fn tx_update(&self, tx: Tx, e: &Entry<'_>) -> Result<(), String> {
        let body = tx.found.map(|s| s.body).unwrap_or_default();
        self.entry(&tx.key, e, &body);
        Ok(())
    }
    fn tx_cancel(&self, tx: &Tx) {
        self.cancelled.borrow_mut().push(tx.key.clone());
    }
    fn lookup(&self, key: &[u8]) -> Option<Stored> {
        let now = self.now();
        self.cache
            .borrow()
            .get(key)
            .filter(|s| s.usable(now))
            .cloned()
    }
    fn insert(&self, key: &[u8], e: &Entry<'_>, body: &[u8]) -> Result<(), String> {
        self.entry(key, e, body);
        Ok(())
    }
    fn found_metadata(&self, found: &Stored) -> Vec<u8> {
        found.meta.clone()
    }
    fn found_stale(&self, found: &Stored) -> bool {
        found.stale(self.now())
    }
    fn found_body(&self, found: &Stored, range: Option<(u64, u64)>) -> Result<Vec<u8>, String> {
        let Some((from, to)) = range else {
            return Ok(found.body.clone());
        };
        let (from, to) = (usize::try_from(from).unwrap(), usize::try_from(to).unwrap());
        found
            .body
            .get(from..=to)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| "range".into())
    }
    fn purge(&self, key: &str, soft: bool) -> Result<(), String> {
        self.purges.borrow_mut().push((key.to_owned(), soft));
        let mut cache = self.cache.borrow_mut();
        if soft {
            for s in cache
                .values_mut()
                .filter(|s| s.keys.iter().any(|k| k == key))
            {
                s.soft_purged = true;
            }
        } else {
            cache.retain(|_, s| !s.keys.iter().any(|k| k == key));
        }
        Ok(())
    }
    fn kv_open(&self, _: &str) -> Result<Option<()>, String> {
        Ok(Some(()))
    }
    fn kv_lookup(&self, (): &(), key: &str, max: Option<usize>) -> Result<Option<KvItem>, String> {
        if self.kv_broken.get() {
            return Err("KV store unavailable".into());
        }
        Ok(self
            .kv
            .borrow()
            .get(key)
            .map(|(body, generation, metadata)| KvItem {
                body: body[..max.unwrap_or(body.len()).min(body.len())].to_vec(),
                generation: *generation,
                metadata: metadata.as_ref().map(|m| m.as_bytes().to_vec()),
            }))
    }
    fn kv_insert(
        &self,
        (): &(),
        key: &str,
        body: &[u8],
        metadata: Option<&str>,
        when: Precondition,
    ) -> Result<(), KvWriteError> {
        let mut kv = self.kv.borrow_mut();
        let current = kv.get(key).map(|(_, g, _)| *g);
        if !when.holds(current) {
            return Err(KvWriteError::Conflict);
        }
        let generation = current.unwrap_or(0) + 1;
        kv.insert(
            key.to_owned(),
            (body.to_vec(), generation, metadata.map(str::to_owned)),
        );
        Ok(())
    }
    fn backend(&self, _: &str) -> Result<(), String> {
        Ok(())
    }
    fn register_backend(&self, _: &BackendSpec<'_>) -> Result<(), String> {
        Ok(())
    }
    fn shield(&self, _: &str, _: Duration, _: Duration, _: bool) -> Result<ShieldPos<()>, String> {
        Err("no shields here".into())
    }
    /// The origin: every path answers 200 with a body naming the path and its visit.
    fn send(
        &self,
        (): &(),
        req: OriginRequest<Vec<u8>>,
    ) -> Result<OriginResponse<Vec<u8>>, String> {
        let mut origin = self.origin.borrow_mut();
        origin.push((req.method.clone(), req.path.clone()));
        if let Some(answer) = video(&req) {
            return Ok(answer);
        }
        let body = format!("{} #{}", req.path, origin.len()).into_bytes();
        let mut headers: Fields = vec![
            ("content-type".into(), b"text/plain".to_vec()),
            ("content-length".into(), body.len().to_string().into_bytes()),
        ];
        if req.path.starts_with("/account") {
            // A per-user answer: this client's session.
            let cookie = format!("session=user-{}", origin.len());
            headers.push(("set-cookie".into(), cookie.into_bytes()));
        }
        Ok(OriginResponse {
            status: 200,
            headers,
            body,
        })
    }
    fn body_read(&self, body: &mut Vec<u8>, limit: u64) -> std::io::Result<Vec<u8>> {
        let n = usize::try_from(limit).unwrap_or(usize::MAX).min(body.len());
        Ok(body.drain(..n).collect())
    }
    fn body_from(&self, bytes: Vec<u8>) -> Vec<u8> {
        bytes
    }
    fn body_append(&self, body: &mut Vec<u8>, rest: Vec<u8>) {
        body.extend(rest);
    }
    fn secret(&self, _: &str, _: &str) -> Option<Vec<u8>> {
        Some(TOKEN.as_bytes().to_vec())
    }
    fn config(&self, store: &str, key: &str) -> Option<String> {
        (store == crate::CONFIG_STORE && key == "config")
            .then(|| self.config_store.borrow().clone())
            .flatten()
    }
    fn log(&self, _: &str, line: &str) {
        self.logs.borrow_mut().push(line.to_owned());
    }
}

/// The origin's `/v/` resources: 40 bytes with a strong `ETag`, ranges answered with a
/// `206` (one closed range, RFC 9110 §14.2).
fn video(req: &OriginRequest<Vec<u8>>) -> Option<OriginResponse<Vec<u8>>> {
    const BODY: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCD";
    if !req.path.starts_with("/v/") {
        return None;
    }
    let mut headers: Fields = vec![
        ("cache-control".into(), b"max-age=600".to_vec()),
        ("etag".into(), b"\"v1\"".to_vec()),
    ];
    let range = crate::first(&req.headers, "range")
        .and_then(|r| std::str::from_utf8(r).ok()?.strip_prefix("bytes="))
        .and_then(|r| r.split_once('-'))
        .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)));
    let Some((a, b)) = range else {
        return Some(OriginResponse {
            status: 200,
            headers,
            body: BODY.to_vec(),
        });
    };
    let b = b.min(BODY.len() - 1);
    let cr = format!("bytes {a}-{b}/{}", BODY.len());
    headers.push(("content-range".into(), cr.into_bytes()));
    Some(OriginResponse {
        status: 206,
        headers,
        body: BODY[a..=b].to_vec(),
    })
}

fn request(
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> ClientRequest<Vec<u8>> {
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q.to_owned())),
        None => (target, None),
    };
    let mut fields: Fields = vec![("host".into(), b"www.example.com".to_vec())];
    fields.extend(
        headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec())),
    );
    ClientRequest {
        method: method.into(),
        url: format!("http://www.example.com{target}"),
        scheme: "http".into(),
        path: path.into(),
        query,
        headers: fields,
        body: Some(body.as_bytes().to_vec()),
    }
}

/// Serves one request at the host's current time in a fresh instance: serve, send, finish.
fn serve(host: &Fake, req: ClientRequest<Vec<u8>>) -> (Response<Vec<u8>>, String) {
    let sandbox = crate::sandbox::Sandbox::start(host, BUILTIN);
    let (resp, pending) = crate::serve(host, &sandbox, req);
    pending.finish(host, &sandbox, None);
    let body = match &resp.body {
        Payload::Bytes(b) | Payload::Stream(b) | Payload::Gunzip(b) => {
            String::from_utf8_lossy(b).into_owned()
        }
        Payload::Empty => String::new(),
    };
    (resp, body)
}

fn get(host: &Fake, target: &str) -> (Response<Vec<u8>>, String) {
    serve(host, request("GET", target, &[], ""))
}

fn header<'r>(resp: &'r Response<Vec<u8>>, name: &str) -> Option<&'r str> {
    crate::first(&resp.headers, name).and_then(|v| std::str::from_utf8(v).ok())
}

const T0: u64 = 1_700_000_000_000;

#[test]
fn a_miss_is_fetched_and_stored_then_a_hit_is_served_from_the_core_cache() {
    let host = Fake::at(T0);
    let (resp, body) = get(&host, "/static/app.js");
    assert_eq!(resp.status, 200);
    assert_eq!(header(&resp, "x-cache"), Some("MISS"));
    assert_eq!(body, "/static/app.js #1");
    assert_eq!(host.origin_hits(), 1);

    host.now.set(T0 + 1_000);
    let (resp, body) = get(&host, "/static/app.js");
    assert_eq!(resp.status, 200);
    assert_eq!(header(&resp, "x-cache"), Some("HIT"));
    assert_eq!(
        body, "/static/app.js #1",
        "the stored body, not a second fetch"
    );
    assert_eq!(host.origin_hits(), 1);
    assert_eq!(host.access()["cache"], "HIT");
}

#[test]
fn an_admin_ban_writes_the_kv_log_replaces_the_pop_copy_and_answers_201() {
    let host = Fake::at(T0);
    let auth = format!("Bearer {TOKEN}");
    let ban = request(
        "POST",
        "/.cachet/ban",
        &[("authorization", &auth)],
        "req.url ~ ^/static/",
    );
    let (resp, body) = serve(&host, ban);
    assert_eq!(resp.status, 201, "{body}");
    assert_eq!(
        host.cancelled.borrow().as_slice(),
        [b"cachet-ban-log-writer".to_vec()],
        "the POP's ban-log writer lock was taken and given back"
    );
    assert!(
        host.kv
            .borrow()
            .contains_key(cachet_policy::banstore::BAN_LOG_ITEM)
    );
    assert!(
        host.kv
            .borrow()
            .contains_key(cachet_policy::banstore::BAN_INDEX_ITEM)
    );
    let copy = host
        .cache
        .borrow()
        .get(crate::bans::LOCAL_COPY_KEY)
        .cloned();
    let copy = copy.expect("the POP copy of the index is written");
    assert_eq!(
        copy.body,
        host.kv.borrow()[cachet_policy::banstore::BAN_INDEX_ITEM].0
    );
    assert!(cachet_policy::banstore::CopyMeta::from_bytes(&copy.meta).is_some());
    assert!(host.access()["ban_added"].is_u64());
    assert_eq!(
        host.origin_hits(),
        0,
        "an admin call never reaches the origin"
    );

    let bad = request(
        "POST",
        "/.cachet/ban",
        &[("authorization", "Bearer wrong")],
        "req.url ~ ^/",
    );
    assert_eq!(serve(&host, bad).0.status, 403);
}

#[test]
fn a_ban_newer_than_a_stored_object_makes_it_be_refetched() {
    let host = Fake::at(T0);
    get(&host, "/static/app.js");
    get(&host, "/static/other.js");
    assert_eq!(host.origin_hits(), 2);

    host.now.set(T0 + 1_000);
    let auth = format!("Bearer {TOKEN}");
    let ban = request(
        "POST",
        "/.cachet/ban",
        &[("authorization", &auth)],
        "req.url ~ ^/static/app",
    );
    assert_eq!(serve(&host, ban).0.status, 201);

    host.now.set(T0 + 2_000);
    let (resp, body) = get(&host, "/static/app.js");
    assert_eq!(resp.status, 200);
    assert_eq!(body, "/static/app.js #3", "the banned copy is refetched");
    assert_ne!(header(&resp, "x-cache"), Some("HIT"));
    assert!(host.access()["banned_by"].is_u64());
    assert!(
        host.purges.borrow().iter().any(|(_, soft)| !soft),
        "hard purge of the object's key"
    );

    let (resp, body) = get(&host, "/static/other.js");
    assert_eq!(
        header(&resp, "x-cache"),
        Some("HIT"),
        "an object the ban does not match"
    );
    assert_eq!(body, "/static/other.js #2");
    let (resp, body) = get(&host, "/static/app.js");
    assert_eq!(
        header(&resp, "x-cache"),
        Some("HIT"),
        "the refetched copy is newer than the ban"
    );
    assert_eq!(body, "/static/app.js #3");
    assert_eq!(host.origin_hits(), 3);
}

#[test]
fn when_the_kv_store_cannot_be_read_objects_stored_before_are_refetched_fail_closed() {
    let host = Fake::at(T0);
    host.kv_broken.set(true);
    get(&host, "/static/app.js");
    assert_eq!(host.origin_hits(), 1);

    host.now.set(T0 + 1_000);
    let (resp, body) = get(&host, "/static/app.js");
    assert_eq!(resp.status, 200);
    assert_eq!(
        body, "/static/app.js #2",
        "stored before the failure: not served as it is"
    );
    let access = host.access();
    assert_eq!(access["bans_unknown"], true);
    assert!(
        access["error"]
            .as_str()
            .is_some_and(|e| e.contains("KV store unavailable"))
    );
    assert!(
        host.cache.borrow().contains_key(crate::bans::FAILURE_KEY),
        "failure marked"
    );

    host.now.set(T0 + 2_000);
    let (resp, body) = get(&host, "/static/app.js");
    assert_eq!(
        header(&resp, "x-cache"),
        Some("HIT"),
        "fetched during the failure: served"
    );
    assert_eq!(body, "/static/app.js #2");
    assert_eq!(host.origin_hits(), 2);
}

#[test]
fn a_post_is_passed_and_purges_its_target_url_key() {
    let host = Fake::at(T0);
    get(&host, "/blog/post");
    host.now.set(T0 + 1_000);
    assert_eq!(header(&get(&host, "/blog/post").0, "x-cache"), Some("HIT"));
    assert_eq!(host.origin_hits(), 1);

    let (resp, _) = serve(&host, request("POST", "/blog/post", &[], "comment=hi"));
    assert_eq!(resp.status, 200);
    assert_eq!(header(&resp, "x-cache"), Some("PASS"));
    assert_eq!(
        host.origin.borrow().last().cloned(),
        Some(("POST".into(), "/blog/post".into()))
    );
    let key = cachet_http::url_key("www.example.com", "/blog/post");
    assert!(
        host.purges.borrow().contains(&(key.clone(), false)),
        "RFC 9111 §4.4"
    );
    assert_eq!(host.access()["invalidated"][0], key.as_str());

    let (resp, body) = get(&host, "/blog/post");
    assert_ne!(
        header(&resp, "x-cache"),
        Some("HIT"),
        "the invalidated copy is gone"
    );
    assert_eq!(body, "/blog/post #3");
}

#[test]
fn header_values_that_are_not_utf8_are_carried_as_bytes() {
    let host = Fake::at(T0);
    let mut req = request("GET", "/static/app.js", &[], "");
    req.headers
        .push(("user-agent".into(), b"Mozilla/5.0 \xff\xfe".to_vec()));
    req.headers
        .push(("x-cachet-device".into(), b"smartphone".to_vec()));
    let (resp, body) = serve(&host, req);
    assert_eq!(resp.status, 200);
    assert_eq!(body, "/static/app.js #1");
    assert_eq!(host.access()["cache"], "MISS");
}

#[test]
fn the_access_record_has_the_arrival_time_user_agent_total_time_and_bytes_of_every_answer() {
    let host = Fake::at(T0);
    let sandbox = crate::sandbox::Sandbox::start(&host, BUILTIN);
    // A pass (a POST): the body is streamed; its bytes are its Content-Length.
    let mut req = request("POST", "/blog/post", &[], "comment=hi");
    req.headers.push(("user-agent".into(), b"UA \xff".to_vec()));
    let (resp, pending) = crate::serve(&host, &sandbox, req);
    assert!(matches!(resp.body, Payload::Stream(_)));
    host.advance(T0 + 250);
    pending.finish(&host, &sandbox, None);
    let a = host.access();
    assert_eq!(a["cache"], "PASS");
    assert_eq!(
        a["time"], "2023-11-14T22:13:20.000Z",
        "T0, when the request arrived"
    );
    assert_eq!(a["user_agent"], "UA \u{fffd}");
    assert_eq!(a["total_ms"], 250);
    assert_eq!(a["body_bytes"], "/blog/post #1".len());
    // A synthetic answer: its bytes; no User-Agent, no field.
    let (resp, pending) =
        crate::refuse_authority(&host, "GET", &Vec::new(), |_| true).expect("no Host: a 400");
    pending.finish(&host, &sandbox, None);
    let a = host.access();
    let Payload::Bytes(body) = &resp.body else {
        panic!("a synthetic body")
    };
    assert_eq!(
        (a["cache"].as_str(), a["status"].as_u64()),
        (Some("SYNTH"), Some(400))
    );
    assert_eq!(a["body_bytes"], body.len());
    assert_eq!(a["total_ms"], 0);
    assert!(a.get("user_agent").is_none(), "{a}");
    // A HEAD: no body bytes.
    serve(&host, request("HEAD", "/static/app.js", &[], ""));
    assert_eq!(host.access()["body_bytes"], 0);
    assert!(host.access().get("failure").is_none());
    // A refused admin call is an ERROR line whose failure is the admin call's, not the
    // origin's (`cachet stat` counts only `origin` as an origin error).
    serve(&host, request("GET", "/.cachet/config", &[], ""));
    let a = host.access();
    assert_eq!(
        (
            a["cache"].as_str(),
            a["route"].as_str(),
            a["failure"].as_str()
        ),
        (Some("ERROR"), Some("admin"), Some("admin"))
    );
}

#[test]
fn an_admin_purge_purges_each_key_soft_when_asked() {
    let host = Fake::at(T0);
    let auth = format!("Bearer {TOKEN}");
    let purge = request(
        "POST",
        "/.cachet/purge",
        &[
            ("authorization", &auth),
            ("surrogate-key", "css blog"),
            ("fastly-soft-purge", "1"),
        ],
        "",
    );
    let (resp, body) = serve(&host, purge);
    assert_eq!(resp.status, 200, "{body}");
    assert_eq!(
        *host.purges.borrow(),
        vec![("css".to_owned(), true), ("blog".to_owned(), true)]
    );
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["blog"]["soft"], true);
}

/// The configuration of issue 27 item 13: a typo (`tll`) in the config store.
const TYPO: &str = "[[routes]]\nname = \"static\"\npath_prefix = \"/static/\"\ntll = \"5m\"\n";

#[test]
fn a_typo_in_the_config_store_keeps_the_built_in_configuration_serving() {
    let host = Fake::at(T0);
    *host.config_store.borrow_mut() = Some(TYPO.to_owned());
    let auth = format!("Bearer {TOKEN}");

    // robots.txt, a MISS then a HIT: the built-in configuration serves.
    let (resp, body) = get(&host, "/robots.txt");
    assert_eq!(resp.status, 200, "{body}");
    assert!(body.contains("User-agent: *"), "{body}");
    assert_eq!(get(&host, "/static/app.js").0.status, 200);
    let (resp, body) = get(&host, "/static/app.js");
    assert_eq!(header(&resp, "x-cache"), Some("HIT"), "{body}");
    assert_eq!(host.origin_hits(), 1);

    // The admin API works: a ban is accepted and applies.
    host.now.set(T0 + 1_000);
    let ban = request(
        "POST",
        "/.cachet/ban",
        &[("authorization", &auth)],
        "req.url ~ ^/static/",
    );
    let (resp, body) = serve(&host, ban);
    assert_eq!(resp.status, 201, "{body}");
    host.now.set(T0 + 2_000);
    let (_, body) = get(&host, "/static/app.js");
    assert_eq!(body, "/static/app.js #2", "the ban applies");

    // The rejection is logged loudly, once per load (per instance on Fastly).
    let rejected: Vec<serde_json::Value> = host
        .logs
        .borrow()
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "config-rejected")
        .collect();
    assert!(!rejected.is_empty(), "the rejection is in the log");
    assert_eq!(rejected[0]["in_force"], "built-in");
    assert!(
        rejected[0]["rejected"]
            .as_str()
            .is_some_and(|e| e.contains("tll")),
        "{:?}",
        rejected[0]
    );

    // GET /.cachet/config shows the error and what is in force, behind the token.
    let call = request("GET", "/.cachet/config", &[("authorization", &auth)], "");
    let (resp, body) = serve(&host, call);
    assert_eq!(resp.status, 200, "{body}");
    assert_eq!(header(&resp, "cache-control"), Some("no-store"));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["in_force"], "built-in");
    assert_eq!(v["ok"], false);
    assert!(
        v["rejected"]
            .as_str()
            .is_some_and(|e| e.contains("routes[0].tll") || e.contains("tll")),
        "{v}"
    );
    assert_eq!(v["configured_from"], crate::CONFIGURED_FROM);
    let anonymous = request("GET", "/.cachet/config", &[], "");
    assert_eq!(serve(&host, anonymous).0.status, 401);
    let wrong = request(
        "GET",
        "/.cachet/config",
        &[("authorization", "Bearer wrong")],
        "",
    );
    assert_eq!(serve(&host, wrong).0.status, 403);
    assert_eq!(host.origin_hits(), 2, "no admin call reached the origin");
}

#[test]
fn a_valid_config_store_entry_is_in_force_and_reported_so() {
    let host = Fake::at(T0);
    let text =
        include_str!("../../../edge-app/cachet.toml").replace("ttl = \"1h\"", "ttl = \"2h\"");
    *host.config_store.borrow_mut() = Some(text);
    let auth = format!("Bearer {TOKEN}");
    let (resp, body) = serve(
        &host,
        request("GET", "/.cachet/config", &[("authorization", &auth)], ""),
    );
    assert_eq!(resp.status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (v["in_force"].as_str(), v["ok"].as_bool()),
        (Some("configured"), Some(true))
    );
    assert!(v["rejected"].is_null());
    assert!(
        host.logs
            .borrow()
            .iter()
            .all(|l| !l.contains("config-rejected"))
    );
    // Without an entry: the built-in one, nothing rejected.
    *host.config_store.borrow_mut() = None;
    let (_, body) = serve(
        &host,
        request("GET", "/.cachet/config", &[("authorization", &auth)], ""),
    );
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (v["in_force"].as_str(), v["ok"].as_bool()),
        (Some("built-in"), Some(true))
    );
}

#[test]
fn a_malformed_or_missing_host_is_a_400_before_the_url_is_read() {
    let host = Fake::at(T0);
    let sandbox = crate::sandbox::Sandbox::start(&host, BUILTIN);
    let fields = |h: Option<&str>| -> Fields {
        h.map(|h| vec![("host".to_owned(), h.as_bytes().to_vec())])
            .unwrap_or_default()
    };
    let never = |a: &str| -> bool { panic!("the platform's URL parser is never asked about {a}") };
    for bad in [
        Some("blog.example:99999"),
        None,
        Some(""),
        Some("bad host"),
        Some("[::1"),
    ] {
        let (resp, pending) = crate::refuse_authority(&host, "GET", &fields(bad), never)
            .unwrap_or_else(|| panic!("{bad:?} is refused"));
        assert_eq!(resp.status, 400, "{bad:?}");
        assert_eq!(header(&resp, "x-cache"), Some("SYNTH"));
        let Payload::Bytes(body) = &resp.body else {
            panic!("a body")
        };
        assert_eq!(body, b"missing or malformed Host header\n");
        pending.finish(&host, &sandbox, None);
        assert_eq!(host.access()["status"], 400);
        assert_eq!(host.access()["cache"], "SYNTH");
    }
    // A host the core accepts but the platform's URL parser would not: the same 400.
    let (resp, _) = crate::refuse_authority(&host, "GET", &fields(Some("blog.123")), |_| false)
        .expect("refused");
    assert_eq!(resp.status, 400);
    // A usable one goes on to `serve`, and its plan is unchanged.
    assert!(
        crate::refuse_authority(&host, "GET", &fields(Some("blog.example:8080")), |a| a
            == "blog.example:8080")
        .is_none()
    );
    assert_eq!(host.origin_hits(), 0);
}

const BUILTIN: &str = include_str!("../../../edge-app/cachet.toml");

/// Serves one request through `sandbox` as the edge app's loop does: begin, serve, send,
/// finish. Returns the response, its body text and the access record.
fn through(
    host: &Fake,
    sandbox: &mut crate::sandbox::Sandbox<()>,
    req: ClientRequest<Vec<u8>>,
) -> (Response<Vec<u8>>, String, serde_json::Value) {
    let n = sandbox.begin(host);
    let (resp, pending) = crate::serve(host, sandbox, req);
    pending.in_instance(n).finish(host, sandbox, None);
    let body = match &resp.body {
        Payload::Bytes(b) | Payload::Stream(b) | Payload::Gunzip(b) => {
            String::from_utf8_lossy(b).into_owned()
        }
        Payload::Empty => String::new(),
    };
    (resp, body, host.access())
}

#[test]
fn one_instance_builds_its_policy_once_and_again_only_when_the_config_store_changes() {
    // Issue 29: reusable sandboxes pay the policy once per instance; a change reaches a
    // running instance within `[edge].config_check_interval` (1 s by default).
    let host = Fake::at(T0);
    let mut sandbox = crate::sandbox::Sandbox::start(&host, BUILTIN);
    for i in 0..5 {
        host.now.set(T0 + i * 100);
        let (resp, _, access) =
            through(&host, &mut sandbox, request("GET", "/robots.txt", &[], ""));
        assert_eq!(resp.status, 200);
        assert_eq!(access["instance_request"], i + 1);
    }
    assert_eq!(
        sandbox.builds(),
        0,
        "no config-store entry: the prebuilt built-in policy, nothing built"
    );
    let changed = BUILTIN.replace("Disallow: /account", "Disallow: /changed");
    *host.config_store.borrow_mut() = Some(changed);
    host.now.set(T0 + 900);
    let (_, body, _) = through(&host, &mut sandbox, request("GET", "/robots.txt", &[], ""));
    assert!(
        body.contains("/account"),
        "not read again before the interval"
    );
    host.now.set(T0 + 1_400);
    let (_, body, _) = through(&host, &mut sandbox, request("GET", "/robots.txt", &[], ""));
    assert!(body.contains("Disallow: /changed"), "{body}");
    assert_eq!(sandbox.builds(), 1);
    // The same text read again builds nothing.
    host.now.set(T0 + 3_000);
    through(&host, &mut sandbox, request("GET", "/robots.txt", &[], ""));
    assert_eq!(sandbox.builds(), 1);
    // The entry removed: back to the prebuilt policy, still nothing built.
    *host.config_store.borrow_mut() = None;
    host.now.set(T0 + 4_500);
    let (_, body, _) = through(&host, &mut sandbox, request("GET", "/robots.txt", &[], ""));
    assert!(body.contains("/account"), "{body}");
    assert_eq!(sandbox.builds(), 1);
    assert_eq!(
        sandbox.bounds(),
        crate::sandbox::Bounds {
            max_requests: 1000,
            max_lifetime: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(5),
            max_memory_mib: 128,
        }
    );
}

#[test]
fn nothing_of_one_request_is_visible_to_the_next_in_one_instance() {
    // Issue 29: one instance, many requests: the workspace is back to zero after each,
    // the access record, the response and its cookies are the request's own.
    let host = Fake::at(T0);
    let mut sandbox = crate::sandbox::Sandbox::start(&host, BUILTIN);
    // 1: a refused admin call (its error in its record).
    let bad = request(
        "POST",
        "/.cachet/ban",
        &[("authorization", "Bearer wrong")],
        "x",
    );
    let (resp, _, first) = through(&host, &mut sandbox, bad);
    assert_eq!(resp.status, 403, "a wrong token");
    assert!(first["error"].is_string(), "{first}");
    scratch::scribble(0xAB, 4096);
    // 2: a passed per-user page with its own cookie.
    let (resp, _, second) = through(&host, &mut sandbox, request("GET", "/account", &[], ""));
    assert_eq!(header(&resp, "set-cookie"), Some("session=user-1"));
    assert_eq!(second["instance_request"], 2);
    assert!(
        second["error"].is_null(),
        "the first request's error stays its own"
    );
    assert_eq!(second["route"], "account");
    assert_eq!(
        scratch::all_zero(),
        Some(true),
        "the bytes a request wrote are zeroed before the next"
    );
    // 3 and 4: a miss and a hit of a public object: no cookie, no pass reason, no error.
    let (miss, _, third) = through(&host, &mut sandbox, get_req("/static/app.js"));
    let (hit, body, fourth) = through(&host, &mut sandbox, get_req("/static/app.js"));
    for (r, a) in [(&miss, &third), (&hit, &fourth)] {
        assert_eq!(header(r, "set-cookie"), None);
        assert!(a["pass_reason"].is_null() && a["error"].is_null(), "{a}");
        assert_eq!(a["route"], "static");
    }
    assert_eq!(
        (fourth["cache"].as_str(), body.as_str()),
        (Some("HIT"), "/static/app.js #2")
    );
    assert_eq!(fourth["instance_request"], 4);
    assert_eq!(scratch::all_zero(), Some(true));
    assert_eq!(sandbox.builds(), 0);
}

#[test]
fn instances_without_a_config_store_entry_share_the_prebuilt_policy() {
    // Issue 29: the built-in configuration's policy is built once per wasm (at
    // pre-initialization on Fastly), never per instance; a config-store entry is built by
    // the instance that reads it.
    assert!(crate::sandbox::prebuild(BUILTIN));
    let host = Fake::at(T0);
    let first = crate::sandbox::Sandbox::<()>::start(&host, BUILTIN);
    let second = crate::sandbox::Sandbox::<()>::start(&host, BUILTIN);
    let (a, b) = (first.policy().unwrap(), second.policy().unwrap());
    assert!(std::ptr::eq(a, b), "one policy for both instances");
    assert_eq!(a.status.in_force, cachet_policy::inforce::Source::BuiltIn);
    assert_eq!((first.builds(), second.builds()), (0, 0));
    *host.config_store.borrow_mut() = Some(BUILTIN.replace("/account", "/other"));
    let third = crate::sandbox::Sandbox::<()>::start(&host, BUILTIN);
    assert!(!std::ptr::eq(third.policy().unwrap(), a));
    assert_eq!(third.builds(), 1);
    assert_eq!(
        third.policy().unwrap().status.in_force,
        cachet_policy::inforce::Source::Configured
    );
}

fn get_req(target: &str) -> ClientRequest<Vec<u8>> {
    request("GET", target, &[], "")
}

#[test]
fn a_whole_request_on_a_slicing_route_is_filled_by_slices_and_answered_from_them() {
    // Issue 30, RFC 9111 §3.4: 40 bytes in slices of 16 are three parts.
    let host = Fake::at(T0);
    let text = BUILTIN.replacen(
        "[[routes]]",
        "[[routes]]\nname = \"video\"\npath_prefix = \"/v/\"\nslice_bytes = 16\n\n[[routes]]",
        1,
    );
    *host.config_store.borrow_mut() = Some(text);
    let (resp, body) = get(&host, "/v/movie");
    assert_eq!(resp.status, 200);
    assert_eq!(body, "0123456789abcdefghijklmnopqrstuvwxyzABCD");
    assert_eq!(header(&resp, "x-cache"), Some("MISS"));
    assert_eq!(header(&resp, "content-length"), Some("40"));
    assert_eq!(header(&resp, "content-range"), None);
    assert_eq!(host.origin_hits(), 3, "one fill per slice, never the whole");
    assert_eq!(host.access()["cache"], "MISS");

    host.now.set(T0 + 1_000);
    let (resp, body) = get(&host, "/v/movie");
    assert_eq!((resp.status, header(&resp, "x-cache")), (200, Some("HIT")));
    assert_eq!(body.len(), 40);
    let ranged = request("GET", "/v/movie", &[("range", "bytes=10-35")], "");
    let (resp, body) = serve(&host, ranged);
    assert_eq!(resp.status, 206);
    assert_eq!(header(&resp, "content-range"), Some("bytes 10-35/40"));
    assert_eq!(body, "abcdefghijklmnopqrstuvwxyz");
    assert_eq!(header(&resp, "x-cache"), Some("HIT"));
    let open = request("GET", "/v/movie", &[("range", "bytes=30-")], "");
    let (resp, body) = serve(&host, open);
    assert_eq!((resp.status, body.as_str()), (206, "uvwxyzABCD"));
    assert_eq!(
        host.origin_hits(),
        3,
        "every later answer came from the slices"
    );
    assert_eq!(host.access()["cache"], "HIT");
}
