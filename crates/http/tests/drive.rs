//! The edge's cache flow (`cachet_http::drive`) natively, on a fake transactional core
//! cache with Fastly's obligation model and a scripted origin: miss, hit, stale with a
//! background refresh, keep-window revalidation, stale-if-error, bans, markers,
//! `only-if-cached`, private and oversized answers.

use std::collections::VecDeque;
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

/// The fake platform: one key's core cache, a scripted origin, the access-log notes.
#[derive(Debug)]
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
        }
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
        u64::MAX
    }
    fn lookup(&mut self) -> Result<Looked<()>, Error> {
        let found = self.stored.as_ref().map(|s| (s.meta.clone(), s.stale));
        Ok(Looked {
            tx: (),
            obligated: if found.is_some() {
                self.grant
            } else {
                self.grant_when_empty
            },
            found,
        })
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
    fn read_bounded(&mut self, a: &mut Self::Answer, limit: u64) -> Result<Option<Vec<u8>>, Error> {
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
    let p = policy();
    let plan = p.plan(&view(), SystemTime::UNIX_EPOCH + Duration::from_millis(T0));
    let served = drive::cached(c, &p, &plan, cl)?;
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
fn without_the_obligation_a_request_is_fetched_unstored() {
    let mut c = Fake::new();
    c.grant_when_empty = false;
    let (out, _) = run(&mut c, &client(&[])).unwrap();
    assert_eq!(out, Out::Passed);
    assert_eq!(c.status(), Some(CacheStatus::Pass));
    assert!(c.stored.is_none());
    // Past grace while another request revalidates: fetched, labelled MISS.
    let mut c = Fake::new();
    c.answer(200, PUBLIC, b"v1");
    run(&mut c, &client(&[])).unwrap();
    c.at(200);
    c.grant = false;
    let (out, _) = run(&mut c, &client(&[])).unwrap();
    assert_eq!(out, Out::Passed);
    assert!(
        c.notes
            .contains(&Note::PassReason("revalidating-elsewhere"))
    );
    assert_eq!(c.status(), Some(CacheStatus::Miss));
    assert_eq!(c.fetches.len(), 1);
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
    assert_eq!(c.cancelled, 1);
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
    meta.surrogate_keys = vec!["user-1".into()];
    meta.tag = "cachet-obj-0123456789abcdef".into();
    meta.times = EntryTimes::new(stored, Duration::from_secs(60));
    meta.times.grace = Duration::from_secs(30);
    meta.times.keep = Duration::from_secs(3600);
    let e = drive::CoreEntry::of(&early, &meta);
    assert_eq!(e.ttl, Duration::from_secs(60));
    assert_eq!(e.swr, Duration::from_secs(3630));
    assert_eq!(e.keys, ["user-1", "cachet-obj-0123456789abcdef"]);
    meta.route = "css".into();
    assert_eq!(
        drive::CoreEntry::of(&early, &meta).swr,
        Duration::from_secs(3690)
    );
    meta.pass = true;
    assert_eq!(drive::CoreEntry::of(&early, &meta).swr, Duration::ZERO);
}
