//! The edge's cache flow (`cachet_http::drive`) natively, on a fake transactional core
//! cache with Fastly's obligation model and a scripted origin: miss, hit, stale with a
//! background refresh, keep-window revalidation, stale-if-error, bans, markers,
//! `only-if-cached`, private and oversized answers.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, SystemTime};

use cachet_http::access::{RefreshCause, Refreshed, Revalidation};
use cachet_http::drive::{self, AnswerHead, CoreCache, Looked, Note, Refresh};
use cachet_http::{CacheStatus, Client, Failure};
use cachet_policy::object::Meta;
use cachet_policy::{Policy, RequestView};
use cachet_refresh::Timestamp;

const CONFIG: &str = r#"
[origin]
url = "http://origin.example"

[edge]
max_object_bytes = 64

[[routes]]
name = "blog"
path_prefix = "/"
ttl = "60s"
grace = "30s"
keep = "1h"
"#;

const T0: u64 = 1_700_000_000_000;

/// What the fake stores under the request's key.
#[derive(Debug, Clone)]
struct Stored {
    meta: Meta,
    body: Vec<u8>,
    /// Soft-purged (the platform holds it as stale).
    stale: bool,
}

/// A client answer, as the fake builds it.
#[derive(Debug, Clone, PartialEq)]
enum Out {
    /// From a stored object.
    Object {
        status: CacheStatus,
        body: Vec<u8>,
        cookies: Vec<Vec<u8>>,
    },
    /// The origin's answer, unstored.
    Origin { status: u16, body: Vec<u8> },
    /// Passed to the origin.
    Passed,
    /// One of Cachet's own failures.
    Failure(Failure),
}

/// The fake's error: a message.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Error(String);

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Self(e.to_string())
    }
}

impl From<&str> for Error {
    fn from(e: &str) -> Self {
        Self(e.to_owned())
    }
}

/// A scripted origin answer: status, fields, body; `Err`: unreachable.
type Script = Result<(u16, Vec<(String, Vec<u8>)>, Vec<u8>), String>;

/// Something another (simulated) request does once the clock reaches a time (ms).
type Event = (u64, Box<dyn FnOnce(&mut Fake)>);

/// The fake platform: one key's core cache, a scripted origin, the access-log notes.
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent switches of a test double"
)]
struct Fake {
    now: Timestamp,
    stored: Option<Stored>,
    /// Whether a lookup of a stored object gets the obligation (another request may
    /// hold it).
    grant: bool,
    /// Whether a lookup that finds nothing gets it (false: another request is filling).
    grant_when_empty: bool,
    banned: bool,
    origin: VecDeque<Script>,
    /// The `If-None-Match` each fetch carried (`None`: unconditional).
    fetches: Vec<Option<String>>,
    purged: Vec<(String, bool)>,
    /// Whether a purge takes effect before the next lookup (Fastly's purges may lag).
    purge_lands: bool,
    cancelled: usize,
    notes: Vec<Note>,
    /// Only a stale (or soft-purged) object's lookup gets the obligation, as on Fastly.
    grant_only_when_stale: bool,
    /// XFetch's random bits.
    bits: u64,
    /// Flag entries.
    flags: HashMap<String, Vec<u8>>,
    /// The next answer's body breaks while it is read.
    body_breaks: bool,
    /// What other requests do at a time (run as the clock passes it).
    events: Vec<Event>,
    /// The pauses a waiting request took.
    pauses: Vec<Duration>,
}

impl Fake {
    fn new() -> Self {
        Self {
            now: Timestamp::from_millis(T0),
            stored: None,
            grant: true,
            grant_when_empty: true,
            banned: false,
            origin: VecDeque::new(),
            fetches: Vec::new(),
            purged: Vec::new(),
            purge_lands: true,
            cancelled: 0,
            notes: Vec::new(),
            grant_only_when_stale: false,
            bits: u64::MAX,
            flags: HashMap::new(),
            body_breaks: false,
            events: Vec::new(),
            pauses: Vec::new(),
        }
    }

    /// Lets time pass to `ms` (since the epoch), running the events due.
    fn advance(&mut self, ms: u64) {
        self.now = Timestamp::from_millis(self.now.as_millis().max(ms));
        while let Some(i) = self.events.iter().position(|(t, _)| *t <= ms) {
            let (_, run) = self.events.remove(i);
            run(self);
        }
    }

    /// Another request does `run` `ms` from now.
    fn later(&mut self, ms: u64, run: impl FnOnce(&mut Self) + 'static) {
        self.events.push((self.now.as_millis() + ms, Box::new(run)));
    }

    fn answer(&mut self, status: u16, fields: &[(&str, &str)], body: &[u8]) {
        let fields = fields
            .iter()
            .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
            .collect();
        self.origin.push_back(Ok((status, fields, body.to_vec())));
    }

    fn at(&mut self, secs: u64) {
        self.now = Timestamp::from_millis(T0 + secs * 1000);
    }

    fn status(&self) -> Option<CacheStatus> {
        self.notes.iter().rev().find_map(|n| match n {
            Note::Status(s) => Some(*s),
            _ => None,
        })
    }
}

impl CoreCache for Fake {
    type Tx = ();
    type Answer = (AnswerHead, Vec<u8>);
    type Out = Out;
    type Error = Error;

    fn now(&self) -> Timestamp {
        self.now
    }
    fn random_bits(&mut self) -> u64 {
        self.bits
    }
    fn lookup(&mut self, wait: Duration) -> Result<Option<Looked<()>>, Error> {
        if self.stored.is_none() && !self.grant_when_empty {
            // Collapsed behind another request's fill: the platform waits for it, at most
            // `wait`.
            let end = self.now.as_millis() + u64::try_from(wait.as_millis()).unwrap_or(0);
            let next = self
                .events
                .iter()
                .map(|(t, _)| *t)
                .filter(|t| *t <= end)
                .min();
            self.advance(next.unwrap_or(end));
            if self.stored.is_none() {
                return Ok(None);
            }
        }
        let found = self.stored.as_ref().map(|s| {
            let expired = self.now >= s.meta.times.stored_at.saturating_add(s.meta.times.ttl);
            (s.meta.clone(), s.stale || expired)
        });
        let obligated = match &found {
            Some((_, stale)) if self.grant_only_when_stale => *stale && self.grant,
            Some(_) => self.grant,
            None => self.grant_when_empty,
        };
        Ok(Some(Looked {
            tx: (),
            obligated,
            found,
        }))
    }
    fn pause(&mut self, d: Duration) {
        self.pauses.push(d);
        let to = self.now.as_millis() + u64::try_from(d.as_millis()).unwrap_or(0);
        self.advance(to);
    }
    fn read_flag(&mut self, key: &str) -> Option<Vec<u8>> {
        self.flags.get(key).cloned()
    }
    fn write_flag(&mut self, key: &str, value: &[u8], _: Duration) {
        self.flags.insert(key.to_owned(), value.to_vec());
    }
    fn body(&mut self, (): &()) -> Result<Vec<u8>, Error> {
        Ok(self
            .stored
            .as_ref()
            .map(|s| s.body.clone())
            .unwrap_or_default())
    }
    fn banned(&mut self, _: &Meta) -> bool {
        self.banned
    }
    fn insert(&mut self, (): (), meta: &Meta, body: &[u8]) -> Result<(), Error> {
        self.stored = Some(Stored {
            meta: meta.clone(),
            body: body.to_vec(),
            stale: false,
        });
        Ok(())
    }
    fn update(&mut self, (): (), meta: &Meta) -> Result<(), Error> {
        let s = self.stored.as_mut().ok_or("update without an object")?;
        s.meta = meta.clone();
        s.stale = false;
        Ok(())
    }
    fn cancel(&mut self, (): &()) {
        self.cancelled += 1;
    }
    fn purge(&mut self, key: &str, soft: bool) {
        self.purged.push((key.to_owned(), soft));
        if self.purge_lands && self.stored.as_ref().is_some_and(|s| s.meta.tag == key) {
            if soft {
                if let Some(s) = self.stored.as_mut() {
                    s.stale = true;
                }
            } else {
                self.stored = None;
                self.banned = false;
            }
        }
    }
    fn fetch(&mut self, stored: Option<&Meta>) -> Result<Self::Answer, String> {
        self.fetches
            .push(stored.and_then(|m| m.validators.etag.clone()));
        let (status, fields, body) = self.origin.pop_front().ok_or("no scripted answer")??;
        let head = AnswerHead {
            status,
            fields,
            elapsed: Duration::from_millis(5),
        };
        Ok((head, body))
    }
    fn head(&self, a: &Self::Answer) -> AnswerHead {
        a.0.clone()
    }
    fn read_bounded(
        &mut self,
        a: &mut Self::Answer,
        limit: u64,
    ) -> Result<Option<Vec<u8>>, String> {
        if std::mem::take(&mut self.body_breaks) {
            return Err("origin body: connection reset".into());
        }
        Ok((a.1.len() as u64 <= limit).then(|| std::mem::take(&mut a.1)))
    }
    fn restore_body(&mut self, a: &mut Self::Answer, body: Vec<u8>) {
        a.1 = body;
    }
    fn pass(&mut self) -> Result<Out, Error> {
        self.notes.push(Note::Status(CacheStatus::Pass));
        Ok(Out::Passed)
    }
    fn respond(&mut self, _: &Meta, body: Vec<u8>, status: CacheStatus) -> Result<Out, Error> {
        Ok(Out::Object {
            status,
            body,
            cookies: Vec::new(),
        })
    }
    fn unstored(&mut self, a: Self::Answer) -> Out {
        Out::Origin {
            status: a.0.status,
            body: a.1,
        }
    }
    fn add_cookies(&mut self, out: &mut Out, a: &Self::Answer) {
        if let Out::Object { cookies, .. } = out {
            cookies.extend(
                a.0.fields
                    .iter()
                    .filter(|(n, _)| n.eq_ignore_ascii_case("set-cookie"))
                    .map(|(_, v)| v.clone()),
            );
        }
    }
    fn failure(&mut self, failure: Failure) -> Out {
        Out::Failure(failure)
    }
    fn unreachable(&self, reason: String) -> Error {
        Error(format!("unreachable: {reason}"))
    }
    fn note(&mut self, note: Note) {
        self.notes.push(note);
    }
}

fn policy() -> Policy {
    Policy::from_toml(CONFIG).expect("test config is valid")
}

fn view() -> RequestView<'static> {
    RequestView {
        method: "GET",
        scheme: "https",
        host: Some("blog.example"),
        path_and_query: "/a",
        ..RequestView::default()
    }
}

fn client(h: &[(&str, &str)]) -> Client {
    Client::read("GET", h)
}

/// One request through the flow at the fake's clock.
fn run(c: &mut Fake, cl: &Client) -> Result<(Out, Option<Refresh<()>>), Error> {
    run_with(c, cl, &policy())
}

/// One request through the flow under `p`.
fn run_with(c: &mut Fake, cl: &Client, p: &Policy) -> Result<(Out, Option<Refresh<()>>), Error> {
    let plan = p.plan(&view(), SystemTime::UNIX_EPOCH + Duration::from_millis(T0));
    let served = drive::cached(c, p, &plan, cl)?;
    Ok((served.out, served.after))
}

fn refresh(c: &mut Fake, job: Refresh<()>) -> Result<Refreshed, Error> {
    let p = policy();
    let plan = p.plan(&view(), SystemTime::UNIX_EPOCH + Duration::from_millis(T0));
    drive::refresh(c, &p, &plan, job)
}

const PUBLIC: &[(&str, &str)] = &[("cache-control", "max-age=60"), ("etag", "\"v1\"")];

fn object(status: CacheStatus, body: &[u8]) -> Out {
    Out::Object {
        status,
        body: body.to_vec(),
        cookies: Vec::new(),
    }
}

#[test]
fn a_miss_fills_and_stores_then_the_next_request_is_a_hit_without_the_origin() {
    let mut c = Fake::new();
    c.answer(200, PUBLIC, b"hello");
    let (out, after) = run(&mut c, &client(&[])).unwrap();
    assert_eq!(out, object(CacheStatus::Miss, b"hello"));
    assert!(after.is_none());
    assert_eq!(c.fetches, vec![None]);
    assert!(
        c.notes
            .contains(&Note::OriginWait(Duration::from_millis(5)))
    );
    c.at(10);
    c.grant = false;
    let (out, _) = run(&mut c, &client(&[])).unwrap();
    assert_eq!(out, object(CacheStatus::Hit, b"hello"));
    assert_eq!(c.fetches.len(), 1, "a hit never asks the origin");
}

#[test]
fn a_request_behind_another_fill_waits_for_it_then_passes_after_max_wait() {
    // Nothing stored, another request is filling (the platform blocks the lookup): when
    // that fill lands, this request is its hit.
    let mut c = Fake::new();
    c.grant_when_empty = false;
    c.later(300, |c| {
        c.grant_when_empty = true;
        c.answer(200, PUBLIC, b"theirs");
        let mut other = Fake::new();
        other.answer(200, PUBLIC, b"theirs");
        run(&mut other, &client(&[])).unwrap();
        c.stored = other.stored;
    });
    c.grant = false;
    assert_eq!(
        run(&mut c, &client(&[])).unwrap().0,
        object(CacheStatus::Hit, b"theirs")
    );
    assert!(c.fetches.is_empty(), "collapsed: no fetch of its own");
    // A fill that never lands: passed once `[collapse].max_wait_ms` (10 s) ran out.
    let mut c = Fake::new();
    c.grant_when_empty = false;
    let (out, _) = run(&mut c, &client(&[])).unwrap();
    assert_eq!(out, Out::Passed);
    assert!(c.notes.contains(&Note::PassReason("collapse-timeout")));
    assert_eq!(c.now, Timestamp::from_millis(T0 + 10_000));
    assert!(c.stored.is_none());
}

#[test]
fn past_grace_the_others_wait_for_the_revalidation_and_share_its_answer() {
    // Issue 28 item 9: one request revalidates; the others neither fetch nor pass.
    let mut c = Fake::new();
    c.answer(200, PUBLIC, b"v1");
    run(&mut c, &client(&[])).unwrap();
    c.at(200);
    c.grant = false;
    c.later(400, |c| {
        // The revalidating request's 304 freshened the copy.
        let s = c.stored.as_mut().unwrap();
        s.meta.times.stored_at = c.now;
    });
    assert_eq!(
        run(&mut c, &client(&[])).unwrap().0,
        object(CacheStatus::Hit, b"v1")
    );
    assert_eq!(c.fetches.len(), 1, "no fetch of its own");
    assert_eq!(c.status(), Some(CacheStatus::Hit));
    assert_eq!(c.pauses.first(), Some(&drive::FIRST_PAUSE));
    assert!(c.pauses.iter().all(|p| *p <= drive::MAX_PAUSE));
    assert!(
        c.now.as_millis() - (T0 + 200_400) <= 50,
        "answered within one pause of the revalidation"
    );
}

#[test]
fn when_the_revalidation_waited_for_fails_every_waiter_gets_stale_if_error_or_a_503() {
    // Issue 28 item 5: RFC 5861 §4 holds for every request, not only the one that asked.
    for (cc, want) in [
        ("max-age=60, stale-if-error=3600", Some(b"v1")),
        ("max-age=60", None),
    ] {
        let mut c = Fake::new();
        c.answer(200, &[("cache-control", cc), ("etag", "\"v1\"")], b"v1");
        run(&mut c, &client(&[])).unwrap();
        c.at(200);
        c.grant = false;
        c.later(300, |c| {
            let now = c.now.as_millis();
            c.stored.as_mut().unwrap().meta.origin_failed_at_ms = Some(now);
            c.grant = true;
        });
        let got = run(&mut c, &client(&[]));
        match want {
            Some(body) => assert_eq!(got.unwrap().0, object(CacheStatus::Stale, body), "{cc}"),
            None => assert!(got.unwrap_err().0.starts_with("unreachable"), "{cc}"),
        }
        assert_eq!(c.fetches.len(), 1, "{cc}: never asks the origin itself");
        // One that starts in the very millisecond the failure was recorded (the same
        // client's next request, on a fast path) is a new request: it asks the origin.
        let failed_at = c.stored.as_ref().unwrap().meta.origin_failed_at_ms.unwrap();
        c.now = Timestamp::from_millis(failed_at);
        c.answer(304, &[("cache-control", "max-age=60")], b"");
        assert_eq!(
            run(&mut c, &client(&[])).unwrap().0,
            object(CacheStatus::Miss, b"v1"),
            "{cc}: same millisecond"
        );
        assert_eq!(c.fetches.len(), 2, "{cc}");
        assert_eq!(c.stored.as_ref().unwrap().meta.origin_failed_at_ms, None);
        // Revalidated by it: a request a second later is a plain hit.
        c.at(201);
        assert_eq!(
            run(&mut c, &client(&[])).unwrap().0,
            object(CacheStatus::Hit, b"v1"),
            "{cc}"
        );
    }
}

#[test]
fn a_failed_fill_leaves_a_failure_marker_that_releases_its_waiters_at_once() {
    // Issue 28 items 7 and 8: a body that breaks is an origin failure; the requests
    // collapsed behind the fill get a 503 at once instead of fetching in turn.
    let mut c = Fake::new();
    c.answer(200, PUBLIC, b"half");
    c.body_breaks = true;
    let err = run(&mut c, &client(&[])).unwrap_err();
    assert!(err.0.contains("connection reset"), "{err:?}");
    let marker = c.stored.clone().expect("a failure marker").meta;
    assert!(marker.is_failure_marker() && !marker.pass);
    let e = drive::CoreEntry::of(&policy(), &marker, c.now);
    assert_eq!((e.ttl, e.swr), (Duration::ZERO, Duration::from_secs(10)));
    // A request collapsed behind that fill (it started 100 ms before the failure).
    let mut w = Fake::new();
    w.now = Timestamp::from_millis(T0 - 100);
    w.grant_when_empty = false;
    let stored = c.stored.clone();
    w.later(100, move |w| {
        w.stored = stored;
        w.grant_when_empty = true;
    });
    assert!(
        run(&mut w, &client(&[]))
            .unwrap_err()
            .0
            .starts_with("unreachable")
    );
    assert!(w.fetches.is_empty(), "never asks the origin in turn");
    assert_eq!(w.cancelled, 1, "the obligation it got goes back");
    // A request after the failure fills again.
    c.at(1);
    c.answer(200, PUBLIC, b"whole");
    assert_eq!(
        run(&mut c, &client(&[])).unwrap().0,
        object(CacheStatus::Miss, b"whole")
    );
}

#[test]
fn a_revalidation_whose_body_breaks_serves_stale_if_error() {
    let mut c = Fake::new();
    c.answer(
        200,
        &[
            ("cache-control", "max-age=60, stale-if-error=3600"),
            ("etag", "\"v1\""),
        ],
        b"v1",
    );
    run(&mut c, &client(&[])).unwrap();
    c.at(200);
    c.answer(
        200,
        &[("cache-control", "max-age=60"), ("etag", "\"v2\"")],
        b"v2-half",
    );
    c.body_breaks = true;
    assert_eq!(
        run(&mut c, &client(&[])).unwrap().0,
        object(CacheStatus::Stale, b"v1")
    );
    let s = c.stored.as_ref().unwrap();
    assert_eq!(s.body, b"v1");
    assert!(
        s.meta.origin_failed_at_ms.is_some(),
        "recorded for the waiters"
    );
}

#[test]
fn xfetch_without_grace_keeps_collapsing_and_labels_hit_during_its_refresh() {
    // Issue 28 items 2 and 3.
    let p = Policy::from_toml(
        "[[routes]]\nname = \"blog\"\npath_prefix = \"/\"\nttl = \"60s\"\n\
         early_refresh = { policy = \"xfetch\", beta = 1.0 }\n",
    )
    .unwrap();
    let mut c = Fake::new();
    c.grant_only_when_stale = true;
    c.answer(200, PUBLIC, b"v1");
    run_with(&mut c, &client(&[]), &p).unwrap();
    // 100 ms before expiry, a draw that fires (delta 5 ms × -ln(2^-64) ≈ 222 ms).
    c.now = Timestamp::from_millis(T0 + 59_900);
    c.bits = 1;
    let (out, after) = run_with(&mut c, &client(&[]), &p).unwrap();
    assert_eq!(out, object(CacheStatus::Hit, b"v1"));
    let job = after.expect("the request that drew the refresh runs it");
    assert_eq!(job.why, RefreshCause::Ahead, "logged `ahead`, not `stale`");
    assert_eq!(c.purged.len(), 1, "its own soft purge");
    assert!(c.stored.as_ref().unwrap().stale);
    // Meanwhile: another request whose draw does not fire, without the obligation.
    c.grant = false;
    c.bits = u64::MAX;
    let (out, after) = run_with(&mut c, &client(&[]), &p).unwrap();
    assert_eq!(
        out,
        object(CacheStatus::Hit, b"v1"),
        "fresh: HIT, not STALE"
    );
    assert!(after.is_none());
    assert!(c.pauses.is_empty(), "never waits, never passes");
    assert_eq!(c.fetches.len(), 1);
    // An operator's soft purge (no refresh-ahead flag for this copy) does end freshness.
    c.flags.clear();
    c.later(200, |c| {
        let s = c.stored.as_mut().unwrap();
        s.stale = false;
        s.meta.times.stored_at = c.now;
    });
    let (out, _) = run_with(&mut c, &client(&[]), &p).unwrap();
    assert_eq!(out, object(CacheStatus::Hit, b"v1"));
    assert!(!c.pauses.is_empty(), "waited for the revalidation");
}

#[test]
fn stale_within_grace_is_served_at_once_and_refreshed_after_with_validators() {
    let mut c = Fake::new();
    c.answer(200, PUBLIC, b"v1");
    run(&mut c, &client(&[])).unwrap();
    c.at(75); // past the 60 s TTL, within the 30 s grace
    let (out, after) = run(&mut c, &client(&[])).unwrap();
    assert_eq!(out, object(CacheStatus::Stale, b"v1"));
    let job = after.expect("the obligation holder refreshes after the answer");
    assert_eq!(job.why, RefreshCause::Stale);
    c.answer(304, &[("cache-control", "max-age=60")], b"");
    assert_eq!(refresh(&mut c, job), Ok(Refreshed::Revalidated));
    assert_eq!(c.fetches, vec![None, Some("\"v1\"".into())]);
    let fresh = &c.stored.as_ref().unwrap().meta;
    assert!(fresh.times.stored_at >= Timestamp::from_millis(T0 + 74_000));
    c.at(80);
    assert_eq!(
        run(&mut c, &client(&[])).unwrap().0,
        object(CacheStatus::Hit, b"v1")
    );
}

#[test]
fn a_background_refresh_that_fails_keeps_the_stored_copy() {
    let mut c = Fake::new();
    c.answer(200, PUBLIC, b"v1");
    run(&mut c, &client(&[])).unwrap();
    c.at(75);
    let job = run(&mut c, &client(&[])).unwrap().1.unwrap();
    c.answer(503, &[], b"down");
    assert_eq!(refresh(&mut c, job), Ok(Refreshed::OriginError));
    assert_eq!(c.stored.as_ref().unwrap().body, b"v1");
    assert_eq!(c.cancelled, 1, "the obligation goes back");
    let job = run(&mut c, &client(&[])).unwrap().1.unwrap();
    c.origin.push_back(Err("connection refused".into()));
    assert!(
        refresh(&mut c, job)
            .unwrap_err()
            .0
            .contains("connection refused")
    );
    assert_eq!(c.stored.as_ref().unwrap().body, b"v1");
}

#[test]
fn past_grace_the_obligation_holder_revalidates_in_the_foreground() {
    let mut c = Fake::new();
    c.answer(200, PUBLIC, b"v1");
    run(&mut c, &client(&[])).unwrap();
    c.at(200); // past TTL + grace, within keep
    c.answer(304, &[("cache-control", "max-age=60")], b"");
    let (out, after) = run(&mut c, &client(&[])).unwrap();
    assert_eq!(out, object(CacheStatus::Miss, b"v1"));
    assert!(after.is_none());
    assert_eq!(c.fetches.last(), Some(&Some("\"v1\"".into())));
    assert!(c.notes.contains(&Note::Refresh(Revalidation::Revalidated)));
    // A new full answer replaces the object.
    c.at(400);
    c.answer(
        200,
        &[("cache-control", "max-age=60"), ("etag", "\"v2\"")],
        b"v2",
    );
    assert_eq!(
        run(&mut c, &client(&[])).unwrap().0,
        object(CacheStatus::Miss, b"v2")
    );
    assert_eq!(c.stored.as_ref().unwrap().body, b"v2");
}

#[test]
fn past_grace_an_unreachable_origin_is_a_503_unless_stale_if_error_allows_the_copy() {
    let mut c = Fake::new();
    c.answer(200, PUBLIC, b"v1");
    run(&mut c, &client(&[])).unwrap();
    c.at(200);
    c.origin.push_back(Err("timeout".into()));
    assert_eq!(
        run(&mut c, &client(&[])).unwrap_err(),
        Error("unreachable: timeout".into())
    );
    assert!(
        c.stored
            .as_ref()
            .unwrap()
            .meta
            .origin_failed_at_ms
            .is_some(),
        "the failure is recorded for the requests waiting for it"
    );
    // An origin that allows stale-if-error for an hour: the copy is served.
    let mut c = Fake::new();
    c.answer(
        200,
        &[("cache-control", "max-age=60, stale-if-error=3600")],
        b"v1",
    );
    run(&mut c, &client(&[])).unwrap();
    c.at(200);
    c.origin.push_back(Err("timeout".into()));
    assert_eq!(
        run(&mut c, &client(&[])).unwrap().0,
        object(CacheStatus::Stale, b"v1")
    );
    assert!(c.notes.contains(&Note::Error("timeout".into())));
    // A 5xx answer: the stored copy within stale-if-error, else the origin's answer.
    c.answer(500, &[], b"oops");
    assert_eq!(
        run(&mut c, &client(&[])).unwrap().0,
        object(CacheStatus::Stale, b"v1")
    );
    c.at(5000);
    c.answer(500, &[], b"oops");
    let out = run(&mut c, &client(&[])).unwrap().0;
    assert_eq!(
        out,
        Out::Origin {
            status: 500,
            body: b"oops".to_vec()
        }
    );
    assert_eq!(
        c.stored.as_ref().unwrap().body,
        b"v1",
        "a 5xx never replaces"
    );
}

#[test]
fn a_banned_object_is_purged_by_its_tag_and_refetched_once() {
    let mut c = Fake::new();
    c.answer(200, PUBLIC, b"v1");
    run(&mut c, &client(&[])).unwrap();
    let tag = c.stored.as_ref().unwrap().meta.tag.clone();
    assert!(!tag.is_empty());
    // Without the obligation (the object is fresh), a banned copy is purged by its tag
    // and looked up again: the refetch then holds the obligation.
    c.grant = false;
    c.banned = true;
    c.at(5);
    c.answer(200, PUBLIC, b"v2");
    let (out, _) = run(&mut c, &client(&[])).unwrap();
    assert_eq!(out, object(CacheStatus::Miss, b"v2"));
    assert_eq!(c.purged, vec![(tag, false)]);
    // With the obligation it is refetched at once.
    c.grant = true;
    c.banned = true;
    c.answer(200, PUBLIC, b"v3");
    assert_eq!(
        run(&mut c, &client(&[])).unwrap().0,
        object(CacheStatus::Miss, b"v3")
    );
    assert_eq!(c.purged.len(), 1);
    // A purge that has not landed yet: after two lookups the request is passed.
    c.grant = false;
    c.banned = true;
    c.purge_lands = false;
    let (out, _) = run(&mut c, &client(&[])).unwrap();
    assert_eq!(out, Out::Passed);
    assert_eq!(c.purged.len(), 2, "one purge, then the last lookup passes");
}

#[test]
fn a_private_answer_leaves_a_marker_and_later_requests_pass() {
    let mut c = Fake::new();
    c.answer(200, &[("cache-control", "private")], b"mine");
    let (out, _) = run(&mut c, &client(&[])).unwrap();
    assert_eq!(
        out,
        Out::Origin {
            status: 200,
            body: b"mine".to_vec()
        }
    );
    let stored = c.stored.as_ref().expect("a hit-for-pass marker");
    assert!(stored.meta.pass && stored.body.is_empty());
    c.grant = false;
    c.at(1);
    assert_eq!(run(&mut c, &client(&[])).unwrap().0, Out::Passed);
    assert!(c.notes.contains(&Note::PassReason("hit-for-pass")));
}

#[test]
fn an_oversized_answer_is_passed_through_whole_and_not_stored() {
    let mut c = Fake::new();
    let big = vec![b'x'; 65];
    c.answer(200, PUBLIC, &big);
    let out = run(&mut c, &client(&[])).unwrap().0;
    assert_eq!(
        out,
        Out::Origin {
            status: 200,
            body: big
        }
    );
    assert!(c.stored.as_ref().is_none_or(|s| s.meta.pass));
}

#[test]
fn only_if_cached_with_nothing_stored_is_a_504_and_gives_the_obligation_back() {
    let mut c = Fake::new();
    let out = run(&mut c, &client(&[("cache-control", "only-if-cached")]))
        .unwrap()
        .0;
    assert_eq!(out, Out::Failure(Failure::NotCached));
    assert_eq!((c.cancelled, c.fetches.len()), (1, 0));
}

#[test]
fn a_304_that_makes_the_page_private_reaches_only_its_client() {
    let mut c = Fake::new();
    c.answer(200, PUBLIC, b"v1");
    run(&mut c, &client(&[])).unwrap();
    c.at(200);
    c.answer(
        304,
        &[("cache-control", "private"), ("set-cookie", "s=1")],
        b"",
    );
    let out = run(&mut c, &client(&[])).unwrap().0;
    assert_eq!(
        out,
        Out::Object {
            status: CacheStatus::Pass,
            body: b"v1".to_vec(),
            cookies: vec![b"s=1".to_vec()]
        }
    );
    assert!(c.stored.as_ref().unwrap().meta.pass, "a marker replaced it");
    assert!(
        c.notes
            .contains(&Note::Refresh(Revalidation::NowUncacheable))
    );
}

#[test]
fn the_core_entry_holds_grace_and_keep_and_the_ttl_too_when_the_route_refreshes_early() {
    use cachet_refresh::EntryTimes;
    let early = Policy::from_toml(
        "[[routes]]\nname = \"css\"\npath_prefix = \"/css/\"\nearly_refresh = { policy = \"xfetch\" }\n\
         [[routes]]\nname = \"blog\"\npath_prefix = \"/\"\n",
    )
    .expect("valid");
    let stored = Timestamp::from_millis(T0);
    let mut meta = Meta::marker("blog", stored, Duration::from_secs(60));
    meta.pass = false;
    meta.status = 200;
    meta.surrogate_keys = vec!["user-1".into()];
    meta.tag = "cachet-obj-0123456789abcdef".into();
    meta.times = EntryTimes::new(stored, Duration::from_secs(60));
    meta.times.grace = Duration::from_secs(30);
    meta.times.keep = Duration::from_secs(3600);
    let now = Timestamp::from_millis(T0 + 500);
    let e = drive::CoreEntry::of(&early, &meta, now);
    assert_eq!(e.ttl, Duration::from_secs(60));
    assert_eq!(e.swr, Duration::from_secs(3630));
    assert_eq!(
        e.age,
        Duration::from_millis(501),
        "issue 28 item 1: the platform's age counts from the fill's request, rounded up"
    );
    assert_eq!(e.keys, ["user-1", "cachet-obj-0123456789abcdef"]);
    meta.route = "css".into();
    assert_eq!(
        drive::CoreEntry::of(&early, &meta, now).swr,
        Duration::from_secs(3690)
    );
    // A copy whose revalidation failed stays stale to the platform, usable as long.
    meta.origin_failed_at_ms = Some(T0 + 500);
    let failed = drive::CoreEntry::of(&early, &meta, now);
    assert_eq!(failed.ttl, Duration::from_millis(501));
    assert_eq!(failed.ttl + failed.swr, Duration::from_secs(60 + 3690));
    meta.origin_failed_at_ms = None;
    meta.pass = true;
    assert_eq!(drive::CoreEntry::of(&early, &meta, now).swr, Duration::ZERO);
}
