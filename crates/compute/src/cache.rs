//! Lookup, miss, refresh-ahead, stale serving and revalidation on Fastly's core cache.
//!
//! The flow and every decision in it are `cachet_http::drive`'s; this module implements
//! its `CoreCache` trait on the port's core-cache transactions. How the flow maps onto the
//! core cache:
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
//!   freshens it with an update.
//! * Origin errors: a stale copy within grace has already been served; otherwise a clean
//!   `503` with `Retry-After`. A 5xx never replaces a good object.
//! * Bans: a found object stored before a matching ban is hard-purged through its own
//!   surrogate key and looked up again (so its refetch is collapsed too).
//!
//! Only one transaction handle is open at a time (Viceroy issue 698: a second lookup on a
//! key with an open handle can hang).

use cachet_http::access::{Access, RefreshOutcome, Refreshed, millis};
use cachet_http::drive::{self, AnswerHead, CoreEntry, Looked, Note};
use cachet_http::{CacheStatus, Client, Failure, fill};
use cachet_policy::Plan;
use cachet_policy::object::Meta;
use std::time::Duration;

use cachet_refresh::{Timestamp, retry_after_secs};

use crate::deliver::{self, client_of};
use crate::host::{Entry, Fields, Host};
use crate::origin::{self, Fetched};
use crate::{ClientRequest, Ctx, EdgeError, Outcome, Response, bans};

/// Passes `req` to the origin; the response is never stored.
///
/// # Errors
/// [`EdgeError::Origin`] when the origin cannot be reached.
pub(crate) fn pass<H: Host>(
    cx: Ctx<'_, H>,
    plan: &Plan<'_>,
    mut req: ClientRequest<H::Body>,
    f: &mut Access,
) -> Result<Outcome<H>, EdgeError> {
    let client = client_of(cx, &req);
    let method = req.method.clone();
    let body = req.body.take();
    let fetched = origin::send(cx, &plan.target, req.method, req.url, req.headers, body)
        .map_err(unreachable)?;
    f.origin_wait(fetched.elapsed);
    f.cache = CacheStatus::Pass;
    // RFC 9111 §4.4: a non-error answer to an unsafe method invalidates the target and
    // same-host Location / Content-Location, every variant (their URL keys).
    for key in cachet_http::invalidation_keys(
        cx.policy,
        &method,
        fetched.resp.status,
        &plan.host,
        &plan.target,
        fetched.resp.headers.as_slice(),
    ) {
        purge(cx.host, &key, false, f);
        f.invalidated.push(key);
    }
    Ok(deliver::unstored(fetched, &client, false).into())
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
pub(crate) fn cached<H: Host>(
    cx: Ctx<'_, H>,
    plan: &Plan<'_>,
    req: ClientRequest<H::Body>,
    f: &mut Access,
) -> Result<Outcome<H>, EdgeError> {
    let client = client_of(cx, &req);
    let mut edge = Edge::new(cx, plan, req, f);
    let served = drive::cached(&mut edge, cx.policy, plan, &client)?;
    let mut out = served.out;
    out.after = match (served.after, edge.req) {
        (Some(refresh), Some(req)) => Some(Box::new(Job {
            refresh,
            req: req.without_body(),
        })),
        _ => None,
    };
    Ok(out)
}

/// The edge's side of `cachet_http::drive`: one request's core cache transactions, origin
/// fetches, answers and access-log record.
struct Edge<'p, 'a, 'f, H: Host> {
    cx: Ctx<'p, H>,
    plan: &'p Plan<'a>,
    /// The client's request (`None` once passed to the origin).
    req: Option<ClientRequest<H::Body>>,
    client: Client,
    /// The request's fields, normalized for variant selection (RFC 9111 §4.1,
    /// `cachet_http::vary::normalized`): the core cache picks the variant stored with
    /// `vary_by` whose fields match (Fastly's own `Vary` support, which Viceroy implements).
    vary: Fields,
    f: &'f mut Access,
}

impl<'p, 'a, 'f, H: Host> Edge<'p, 'a, 'f, H> {
    fn new(
        cx: Ctx<'p, H>,
        plan: &'p Plan<'a>,
        req: ClientRequest<H::Body>,
        f: &'f mut Access,
    ) -> Self {
        Self {
            cx,
            plan,
            client: client_of(cx, &req),
            vary: vary_headers(
                &req.headers,
                &cx.policy.config().origin.fill_fields,
                plan.device_header,
            ),
            req: Some(req),
            f,
        }
    }
}

impl<H: Host> drive::CoreCache for Edge<'_, '_, '_, H> {
    type Tx = H::Tx;
    type Answer = Fetched<H::Body>;
    type Out = Outcome<H>;
    type Error = EdgeError;

    fn now(&self) -> Timestamp {
        Timestamp::from_system_time(self.cx.host.now())
    }

    fn random_bits(&mut self) -> u64 {
        self.cx.host.random_u64()
    }

    fn lookup(&mut self, wait: Duration) -> Result<Option<Looked<H::Tx>>, EdgeError> {
        let host = self.cx.host;
        let Some(tx) = host
            .tx_lookup(
                self.plan.cache_key.as_bytes(),
                &self.vary,
                false,
                Some(wait),
            )
            .map_err(EdgeError::Cache)?
        else {
            return Ok(None);
        };
        // Metadata of another layout version counts as nothing.
        let found = host.tx_found(&tx).and_then(|f| {
            Some((
                Meta::from_bytes(&host.found_metadata(&f))?,
                host.found_stale(&f),
            ))
        });
        Ok(Some(Looked {
            obligated: host.tx_obligated(&tx),
            tx,
            found,
        }))
    }

    fn pause(&mut self, d: Duration) {
        self.cx.host.sleep(d);
    }

    fn read_flag(&mut self, key: &str) -> Option<Vec<u8>> {
        let host = self.cx.host;
        let found = host.lookup(key.as_bytes())?;
        Some(host.found_metadata(&found))
    }

    fn write_flag(&mut self, key: &str, value: &[u8], ttl: Duration) {
        let e = Entry {
            ttl,
            swr: Duration::ZERO,
            age: Duration::ZERO,
            vary_by: &[],
            surrogate_keys: &[],
            user_metadata: value,
        };
        if let Err(err) = self.cx.host.insert(key.as_bytes(), &e, &[]) {
            self.f.error = Some(format!("flag {key}: {err}"));
        }
    }

    fn body(&mut self, tx: &H::Tx) -> Result<Vec<u8>, EdgeError> {
        match self.cx.host.tx_found(tx) {
            Some(found) => self
                .cx
                .host
                .found_body(&found, None)
                .map_err(EdgeError::Cache),
            None => Ok(Vec::new()),
        }
    }

    /// `bans::check` on this POP's copy of the index.
    fn banned(&mut self, meta: &Meta) -> bool {
        let (log, log_error) = bans::current(self.cx);
        if log_error.is_some() {
            self.f.error = log_error;
        }
        let req = self.req.as_ref();
        let covered = bans::check(&log, meta, &self.plan.target, |n| {
            req.and_then(|r| r.header_str(n))
        });
        match covered {
            Some(bans::Covered::Ban(id)) => self.f.banned_by = Some(id),
            Some(bans::Covered::Unknown) => self.f.bans_unknown = true,
            None => return false,
        }
        true
    }

    /// Inserts an object (or, `meta.pass`, a content-free hit-for-pass marker) under the
    /// obligation, as `drive::CoreEntry` says, `vary_by` the origin's varying fields.
    fn insert(&mut self, tx: H::Tx, meta: &Meta, body: &[u8]) -> Result<(), EdgeError> {
        let e = CoreEntry::of(self.cx.policy, meta, self.now());
        let md = meta.to_bytes();
        self.cx
            .host
            .tx_insert(tx, &entry(&e, meta, &md), body)
            .map_err(EdgeError::Cache)
    }

    /// Writes a freshened object's metadata (same body) under the obligation.
    fn update(&mut self, tx: H::Tx, meta: &Meta) -> Result<(), EdgeError> {
        let e = CoreEntry::of(self.cx.policy, meta, self.now());
        let md = meta.to_bytes();
        self.cx
            .host
            .tx_update(tx, &entry(&e, meta, &md))
            .map_err(EdgeError::Cache)
    }

    fn cancel(&mut self, tx: &H::Tx) {
        if self.cx.host.tx_obligated(tx) {
            self.cx.host.tx_cancel(tx);
        }
    }

    fn purge(&mut self, key: &str, soft: bool) {
        purge(self.cx.host, key, soft, self.f);
    }

    fn fetch(&mut self, stored: Option<&Meta>) -> Result<Fetched<H::Body>, String> {
        let req = self.req.as_ref().ok_or("request already passed")?;
        let headers = fill::request_fields(self.cx.policy, self.plan, &req.headers, stored);
        let url = req.url.clone();
        origin::send(self.cx, &self.plan.target, "GET".into(), url, headers, None)
    }

    fn head(&self, answer: &Fetched<H::Body>) -> AnswerHead {
        AnswerHead {
            status: answer.resp.status,
            fields: answer.resp.headers.clone(),
            elapsed: answer.elapsed,
        }
    }

    /// Reads the body when it is at most `limit` bytes (`[edge].max_object_bytes`). A
    /// longer one (a chunked body declares no length) is not held: `None`, and the answer
    /// gets back a body that replays the `limit + 1` bytes read and streams the rest from
    /// the origin, so memory stays bounded by `limit` whatever the body's size.
    fn read_bounded(
        &mut self,
        a: &mut Fetched<H::Body>,
        limit: u64,
    ) -> Result<Option<Vec<u8>>, String> {
        let host = self.cx.host;
        let head = host
            .body_read(&mut a.resp.body, limit.saturating_add(1))
            .map_err(|e| format!("origin body: {e}"))?;
        if head.len() as u64 <= limit {
            return Ok(Some(head));
        }
        let mut replay = host.body_from(head);
        let rest = std::mem::replace(&mut a.resp.body, host.body_from(Vec::new()));
        host.body_append(&mut replay, rest);
        a.resp.body = replay;
        Ok(None)
    }

    fn restore_body(&mut self, a: &mut Fetched<H::Body>, body: Vec<u8>) {
        a.resp.body = self.cx.host.body_from(body);
    }

    fn pass(&mut self) -> Result<Outcome<H>, EdgeError> {
        let req = self
            .req
            .take()
            .ok_or_else(|| unreachable("request already passed".into()))?;
        pass(self.cx, self.plan, req, self.f)
    }

    fn respond(
        &mut self,
        meta: &Meta,
        body: Vec<u8>,
        status: CacheStatus,
    ) -> Result<Outcome<H>, EdgeError> {
        deliver::respond(self.now(), meta, body, status, &self.client, self.f).map(Outcome::from)
    }

    fn unstored(&mut self, answer: Fetched<H::Body>) -> Outcome<H> {
        deliver::unstored(answer, &self.client, true).into()
    }

    fn add_cookies(&mut self, out: &mut Outcome<H>, answer: &Fetched<H::Body>) {
        for (n, v) in &answer.resp.headers {
            if n.eq_ignore_ascii_case("set-cookie") {
                out.resp.headers.push((n.clone(), v.clone()));
            }
        }
    }

    fn failure(&mut self, failure: Failure) -> Outcome<H> {
        Response::from(cachet_http::reply::failure(failure)).into()
    }

    fn unreachable(&self, reason: String) -> EdgeError {
        unreachable(reason)
    }

    fn note(&mut self, note: Note) {
        self.f.note(note);
    }
}

/// The port's view of a core-cache write (`drive::CoreEntry` plus the metadata bytes).
fn entry<'e>(e: &'e CoreEntry, meta: &'e Meta, md: &'e [u8]) -> Entry<'e> {
    Entry {
        ttl: e.ttl,
        swr: e.swr,
        age: e.age,
        vary_by: &meta.vary_fields,
        surrogate_keys: &e.keys,
        user_metadata: md,
    }
}

/// A refresh that runs after the client's response has been sent, holding the core
/// cache's obligation for the key (other requests are served the cached copy meanwhile).
pub(crate) struct Job<H: Host> {
    refresh: drive::Refresh<H::Tx>,
    /// The client's request (without body), planned again for the refresh.
    req: ClientRequest<H::Body>,
}

impl<H: Host> Job<H> {
    /// Runs the refresh (`cachet_http::drive::refresh`) and records what it did.
    pub fn run(self, cx: Ctx<'_, H>, f: &mut Access) {
        let started = cx.host.monotonic();
        let Self { refresh, req } = self;
        let why = refresh.why;
        let inputs = crate::inputs(&req);
        let plan = cx.policy.plan(&inputs.view(), cx.host.now());
        let mut edge = Edge::new(cx, &plan, req, f);
        let outcome = drive::refresh(&mut edge, cx.policy, &plan, refresh);
        let done = outcome.unwrap_or_else(|e| {
            f.error = Some(e.to_string());
            Refreshed::KeptStored
        });
        f.refresh = Some(RefreshOutcome::Background(why, done));
        f.refresh_ms = Some(millis(cx.host.monotonic().saturating_sub(started)));
    }
}

/// The client's request fields the core cache's lookup needs to pick a variant,
/// normalized (`cachet_http::vary::normalized`), one line per name: only those named in
/// `[origin].fill_fields` and not folded into the key
/// (`cachet_policy::response::folded_vary_field`), since an object varies only on such
/// fields (`Policy::storability`: any other `Vary` is not stored). Every other field would
/// cost the lookup a host call and change nothing; a request without any of them makes
/// the lookup without a request handle at all (issue 29: 6 fewer host calls per HIT).
fn vary_headers(headers: &Fields, fill_fields: &[String], device_header: &str) -> Fields {
    let mut out: Fields = Vec::new();
    for (name, _) in headers {
        if out.iter().any(|(n, _)| n == name)
            || cachet_http::fields::reserved(name)
            || !fill_fields.iter().any(|f| f.eq_ignore_ascii_case(name))
            || cachet_policy::response::folded_vary_field(name, device_header)
        {
            continue;
        }
        if let Some(v) = cachet_http::vary::normalized(headers.as_slice(), name) {
            out.push((name.clone(), v));
        }
    }
    out
}

/// Purges (or soft-purges) one surrogate key, recording failures in the access log.
fn purge<H: Host>(host: &H, key: &str, soft: bool, f: &mut Access) {
    if let Err(e) = host.purge(key, soft) {
        f.error = Some(format!("purge {key}: {e}"));
    }
}
