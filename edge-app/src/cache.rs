//! Lookup, miss, refresh-ahead, stale serving and revalidation on Fastly's core cache.
//!
//! The flow and every decision in it are `cachet_http::drive`'s; this module implements
//! its `CoreCache` trait on `fastly::cache::core::Transaction` (platform I/O only). How the
//! flow maps onto the core cache:
//!
//! * Objects are inserted with the core cache's TTL = the real TTL and its
//!   stale-while-revalidate = grace + keep (+ the TTL when the route refreshes early), and
//!   carry their `EntryTimes` and validators in user metadata. `cachet_refresh::decide`
//!   classifies each hit; the core cache supplies the collapsing.
//! * Miss: the first request gets the obligation and fetches; the others wait in the core
//!   cache (request collapsing) and are served the inserted object.
//! * Stale (within grace): the core cache hands the obligation to exactly one request,
//!   which serves the stale copy at once (`X-Cache: STALE`) and refreshes after the
//!   response is sent; the others are served the stale copy without waiting.
//! * Refresh-ahead (`threshold` / `xfetch` fired while fresh): the object is soft-purged
//!   through its own surrogate key, which turns it into a stale-while-revalidate object, and
//!   looked up again: one request gets the obligation and refreshes in the background, every
//!   request keeps being served from cache (`X-Cache: HIT`). On Fastly a purge is
//!   service-wide, so other POPs revalidate the object on their next request too.
//! * Keep window (past grace): the object is not served; the obligation holder revalidates
//!   it in the foreground with `If-None-Match`/`If-Modified-Since` (RFC 9111 §4.3), a 304
//!   freshens it with `Transaction::update`.
//! * Origin errors: a stale copy within grace has already been served; otherwise a clean
//!   `503` with `Retry-After`. A 5xx never replaces a good object.
//! * Bans: a found object stored before a matching ban is hard-purged through its own
//!   surrogate key and looked up again (so its refetch is collapsed too).
//!
//! Only one transaction handle is open at a time (Viceroy issue 698: a second lookup on a
//! key with an open handle can hang).

use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::time::{Instant, SystemTime};

use cachet_http::drive::{self, AnswerHead, CoreEntry, Looked, Note};
use cachet_http::fill;
use cachet_http::{CacheStatus, Client, Failure};
use cachet_policy::object::Meta;
use cachet_policy::{Plan, Policy};
use cachet_refresh::{Timestamp, retry_after_secs};
use fastly::cache::core::{CacheKey, Transaction};
use fastly::http::{HeaderName, HeaderValue, header};
use fastly::{Request, Response};

use crate::deliver::{self, RespHeaders, client_of, fields_of};
use crate::origin::{self, Fetched};
use crate::{EdgeError, Outcome, bans};
use cachet_http::access::{Access, millis};

/// Passes `req` to the origin; the response is never stored.
///
/// # Errors
/// [`EdgeError::Origin`] when the origin cannot be reached.
pub(crate) fn pass(
    policy: &Policy,
    plan: &Plan<'_>,
    req: Request,
    f: &mut Access,
) -> Result<Outcome, EdgeError> {
    let client = client_of(&req);
    let method = req.get_method_str().to_owned();
    let fetched = origin::fetch(policy, plan, req).map_err(unreachable)?;
    f.origin_wait(fetched.elapsed);
    f.cache = CacheStatus::Pass;
    // RFC 9111 §4.4: a non-error answer to an unsafe method invalidates the target and
    // same-host Location / Content-Location, every variant (their URL keys).
    for key in cachet_http::invalidation_keys(
        policy,
        &method,
        fetched.resp.get_status().as_u16(),
        &plan.host,
        &plan.target,
        &RespHeaders(&fetched.resp),
    ) {
        purge(&key, false, f);
        f.invalidated.push(key);
    }
    Ok(deliver::unstored(fetched.resp, &client, false))
}

fn unreachable(reason: String) -> EdgeError {
    EdgeError::Origin {
        reason,
        retry_after_secs: retry_after_secs(drive::RETRY_AFTER),
    }
}

/// Serves a cacheable request from the core cache (`cachet_http::drive::cached`).
///
/// # Errors
/// [`EdgeError::Cache`] when the core cache fails; [`EdgeError::Origin`] when the origin is
/// unreachable and no copy may be served; [`EdgeError::Body`] for corrupt stored bodies.
pub(crate) fn cached(
    policy: &Policy,
    plan: &Plan<'_>,
    req: Request,
    f: &mut Access,
) -> Result<Outcome, EdgeError> {
    let client = client_of(&req);
    let mut edge = Edge::new(policy, plan, req, f);
    let served = drive::cached(&mut edge, policy, plan, &client)?;
    let mut out = served.out;
    out.after = match (served.after, edge.req) {
        (Some(refresh), Some(req)) => Some(Box::new(Job {
            refresh,
            req: req.clone_without_body(),
        })),
        _ => None,
    };
    Ok(out)
}

/// The edge's side of `cachet_http::drive`: one request's core cache transactions, origin
/// fetches, answers and access-log record.
struct Edge<'p, 'a, 'f> {
    policy: &'p Policy,
    plan: &'p Plan<'a>,
    /// The client's request (`None` once passed to the origin).
    req: Option<Request>,
    client: Client,
    key: CacheKey,
    /// The request's fields, normalized for variant selection (RFC 9111 §4.1,
    /// `cachet_http::vary::normalized`): the core cache picks the variant stored with
    /// `vary_by` whose fields match (Fastly's own `Vary` support, which Viceroy implements).
    vary: Vec<(HeaderName, HeaderValue)>,
    f: &'f mut Access,
}

impl<'p, 'a, 'f> Edge<'p, 'a, 'f> {
    fn new(policy: &'p Policy, plan: &'p Plan<'a>, req: Request, f: &'f mut Access) -> Self {
        Self {
            policy,
            plan,
            client: client_of(&req),
            key: CacheKey::copy_from_slice(plan.cache_key.as_bytes()),
            vary: vary_headers(&req),
            req: Some(req),
            f,
        }
    }
}

impl drive::CoreCache for Edge<'_, '_, '_> {
    type Tx = Transaction;
    type Answer = Fetched;
    type Out = Outcome;
    type Error = EdgeError;

    fn now(&self) -> Timestamp {
        Timestamp::from_system_time(SystemTime::now())
    }

    /// std's `RandomState` is seeded from WASI `random_get`.
    fn random_bits(&mut self) -> u64 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(self.now().as_millis());
        h.finish()
    }

    fn lookup(&mut self) -> Result<Looked<Transaction>, EdgeError> {
        let mut lookup = Transaction::lookup(self.key.clone());
        for (n, v) in &self.vary {
            lookup = lookup.header(n, v);
        }
        let tx = lookup.execute()?;
        // Metadata of another layout version counts as nothing.
        let found = tx
            .found()
            .and_then(|f| Some((Meta::from_bytes(&f.user_metadata())?, f.is_stale())));
        Ok(Looked {
            obligated: tx.must_insert_or_update(),
            tx,
            found,
        })
    }

    fn body(&mut self, tx: &Transaction) -> Result<Vec<u8>, EdgeError> {
        match tx.found() {
            Some(found) => Ok(found.to_stream()?.into_bytes()),
            None => Ok(Vec::new()),
        }
    }

    /// `bans::check` on this POP's copy of the index.
    fn banned(&mut self, meta: &Meta) -> bool {
        let (log, log_error) = bans::current(self.policy);
        if log_error.is_some() {
            self.f.error = log_error;
        }
        let req = self.req.as_ref();
        let covered = bans::check(&log, meta, &self.plan.target, |n| {
            req.and_then(|r| r.get_header_str(n))
        });
        match covered {
            Some(bans::Covered::Ban(id)) => self.f.banned_by = Some(id),
            Some(bans::Covered::Unknown) => self.f.bans_unknown = true,
            None => return false,
        }
        true
    }

    fn insert(&mut self, tx: Transaction, meta: &Meta, body: &[u8]) -> Result<(), EdgeError> {
        insert(self.policy, tx, meta, body)
    }

    fn update(&mut self, tx: Transaction, meta: &Meta) -> Result<(), EdgeError> {
        update(self.policy, tx, meta)
    }

    fn cancel(&mut self, tx: &Transaction) {
        if tx.must_insert_or_update() {
            let _ = tx.cancel_insert_or_update();
        }
    }

    fn purge(&mut self, key: &str, soft: bool) {
        purge(key, soft, self.f);
    }

    fn fetch(&mut self, stored: Option<&Meta>) -> Result<Fetched, String> {
        let req = self.req.as_ref().ok_or("request already passed")?;
        let fill_req = fill_request(self.policy, self.plan, req, stored);
        origin::fetch(self.policy, self.plan, fill_req)
    }

    fn head(&self, answer: &Fetched) -> AnswerHead {
        AnswerHead {
            status: answer.resp.get_status().as_u16(),
            fields: fields_of(&answer.resp),
            elapsed: answer.elapsed,
        }
    }

    fn read_bounded(&mut self, a: &mut Fetched, limit: u64) -> Result<Option<Vec<u8>>, EdgeError> {
        Ok(read_bounded(&mut a.resp, limit)?)
    }

    fn restore_body(&mut self, a: &mut Fetched, body: Vec<u8>) {
        a.resp.set_body(body);
    }

    fn pass(&mut self) -> Result<Outcome, EdgeError> {
        let req = self
            .req
            .take()
            .ok_or_else(|| unreachable("request already passed".into()))?;
        pass(self.policy, self.plan, req, self.f)
    }

    fn respond(
        &mut self,
        meta: &Meta,
        body: Vec<u8>,
        status: CacheStatus,
    ) -> Result<Outcome, EdgeError> {
        deliver::respond(meta, body, status, &self.client, self.f).map(Outcome::from)
    }

    fn unstored(&mut self, answer: Fetched) -> Outcome {
        deliver::unstored(answer.resp, &self.client, true)
    }

    fn add_cookies(&mut self, out: &mut Outcome, answer: &Fetched) {
        for cookie in answer.resp.get_header_all(header::SET_COOKIE) {
            out.resp.append_header(header::SET_COOKIE, cookie);
        }
    }

    fn failure(&mut self, failure: Failure) -> Outcome {
        crate::to_response(cachet_http::reply::failure(failure)).into()
    }

    fn unreachable(&self, reason: String) -> EdgeError {
        unreachable(reason)
    }

    fn note(&mut self, note: Note) {
        self.f.note(note);
    }
}

/// A refresh that runs after the client's response has been sent, holding the core
/// cache's obligation for the key (other requests are served the cached copy meanwhile).
pub(crate) struct Job {
    refresh: drive::Refresh<Transaction>,
    /// The client's request (without body), planned again for the refresh.
    req: Request,
}

impl Job {
    /// Runs the refresh (`cachet_http::drive::refresh`) and records what it did.
    pub fn run(self, policy: &Policy, f: &mut Access) {
        let started = Instant::now();
        let Self { refresh, req } = self;
        let why = refresh.why;
        let inputs = crate::inputs(&req);
        let plan = policy.plan(&inputs.view(), SystemTime::now());
        let mut edge = Edge::new(policy, &plan, req, f);
        let outcome = drive::refresh(&mut edge, policy, &plan, refresh);
        f.refresh = Some(match outcome {
            Ok(r) => format!("{why}:{r}"),
            Err(e) => {
                f.error = Some(e.to_string());
                format!("{why}:kept-stored")
            }
        });
        f.refresh_ms = Some(millis(started.elapsed()));
    }
}

/// The client's request fields as the core cache's lookup headers, normalized
/// (`cachet_http::vary::normalized`); fields that are not valid header values are left out.
fn vary_headers(req: &Request) -> Vec<(HeaderName, HeaderValue)> {
    let h = deliver::ReqHeaders(req);
    let mut out: Vec<(HeaderName, HeaderValue)> = Vec::new();
    for name in req.get_header_names() {
        if out.iter().any(|(n, _)| n == name) || cachet_http::fields::reserved(name.as_str()) {
            continue;
        }
        if let Some(v) = cachet_http::vary::normalized(&h, name.as_str())
            .and_then(|v| HeaderValue::from_bytes(&v).ok())
        {
            out.push((name.clone(), v));
        }
    }
    out
}

/// Header names for the core cache's `vary_by` (names that are not valid are left out).
fn vary_names(fields: &[String]) -> Vec<HeaderName> {
    fields
        .iter()
        .filter_map(|f| HeaderName::from_bytes(f.as_bytes()).ok())
        .collect()
}

/// Purges (or soft-purges) one surrogate key, recording failures in the access log.
fn purge(key: &str, soft: bool, f: &mut Access) {
    let r = if soft {
        fastly::http::purge::soft_purge_surrogate_key(key)
    } else {
        fastly::http::purge::purge_surrogate_key(key)
    };
    if let Err(e) = r {
        f.error = Some(format!("purge {key}: {e}"));
    }
}

/// The origin request of a fill for `req` planned as `plan`: the engine's field set
/// (`cachet_http::fill::request_fields`: normalized `Host`, our device header, no client
/// preconditions or range, conditional on `stored`'s validators). Fields Fastly refuses
/// are left out.
fn fill_request(policy: &Policy, plan: &Plan<'_>, req: &Request, stored: Option<&Meta>) -> Request {
    let mut out = Request::get(req.get_url().clone());
    let client = deliver::req_fields_of(req);
    for (n, v) in fill::request_fields(policy, plan, &client, stored) {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(n.as_bytes()),
            HeaderValue::from_bytes(&v),
        ) {
            out.append_header(n, v);
        }
    }
    out
}

/// Writes a freshened object's metadata (same body) under the obligation
/// (`drive::CoreEntry`: TTL, stale-while-revalidate, surrogate keys).
fn update(policy: &Policy, tx: Transaction, fresh: &Meta) -> Result<(), EdgeError> {
    let e = CoreEntry::of(policy, fresh);
    let mut update = tx.update(e.ttl);
    let vary = vary_names(&fresh.vary_fields);
    if !vary.is_empty() {
        update = update.vary_by(&vary);
    }
    update
        .stale_while_revalidate(e.swr)
        .surrogate_keys(e.keys.iter().map(String::as_str))
        .user_metadata(fresh.to_bytes().into())
        .execute()?;
    Ok(())
}

/// Reads `resp`'s body when it is at most `limit` bytes (`[edge].max_object_bytes`). A
/// longer one (a chunked body declares no length) is not held: `None`, and `resp` gets
/// back a body that replays the `limit + 1` bytes read and streams the rest from the
/// origin, so memory stays bounded by `limit` whatever the body's size.
///
/// # Errors
/// The origin body's read error.
pub(crate) fn read_bounded(resp: &mut Response, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut body = resp.take_body();
    let mut head = Vec::new();
    (&mut body)
        .take(limit.saturating_add(1))
        .read_to_end(&mut head)?;
    if head.len() as u64 <= limit {
        return Ok(Some(head));
    }
    let mut replay = fastly::Body::from(head);
    replay.append(body);
    resp.set_body(replay);
    Ok(None)
}

/// Inserts an object (or, `meta.pass`, a content-free hit-for-pass marker) under the
/// obligation, as `drive::CoreEntry` says, `vary_by` the origin's varying fields.
fn insert(policy: &Policy, tx: Transaction, meta: &Meta, body: &[u8]) -> Result<(), EdgeError> {
    let e = CoreEntry::of(policy, meta);
    let mut insert = tx.insert(e.ttl);
    let vary = vary_names(&meta.vary_fields);
    if !vary.is_empty() {
        insert = insert.vary_by(&vary);
    }
    if !e.swr.is_zero() {
        insert = insert.stale_while_revalidate(e.swr);
    }
    let mut writer = insert
        .surrogate_keys(e.keys.iter().map(String::as_str))
        .user_metadata(meta.to_bytes().into())
        .known_length(body.len() as u64)
        .execute()?;
    writer.write_all(body)?;
    writer.finish()?;
    Ok(())
}
