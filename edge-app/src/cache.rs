//! Lookup, miss, refresh-ahead, stale serving and revalidation on Fastly's core cache.
//!
//! Mapping of `cachet-refresh` decisions onto `fastly::cache::core::Transaction`:
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
use std::time::{Duration, Instant, SystemTime};

use cachet_http::fill::{self, Filled, Revalidated};
use cachet_http::store::Origin;
use cachet_policy::object::Meta;
use cachet_policy::{Plan, Policy};
use cachet_refresh::{
    Draw, EarlyRefresh, EntryTimes, ErrorAction, Timestamp, decide, on_origin_error,
    retry_after_secs,
};
use fastly::cache::core::{CacheKey, Transaction};
use fastly::http::{HeaderName, HeaderValue, header};
use fastly::{Request, Response};

use crate::access::{Access, millis};
use cachet_http::lookup::{self, Found, Next, Rights};
use cachet_http::{CacheStatus, Client};

use crate::deliver::{self, RespHeaders, client_of, fields_of};
use crate::origin::{self, Fetched};
use crate::{EdgeError, Outcome, bans};

/// `Retry-After` sent with a `503` when the origin is unreachable and nothing may be
/// served stale.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Lookups per request: the first, one after a ban purge or a refresh-ahead soft purge.
const MAX_LOOKUPS: usize = 2;

/// The clock, as the refresh crate counts it.
fn now() -> Timestamp {
    Timestamp::from_system_time(SystemTime::now())
}

/// 64 random bits from the platform (std's `RandomState` is seeded from WASI `random_get`),
/// for XFetch's draw.
fn random_bits() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(now().as_millis());
    h.finish()
}

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
    origin::note(f, fetched.elapsed);
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
        retry_after_secs: retry_after_secs(RETRY_AFTER),
    }
}

/// Serves a cacheable request from the core cache, fetching, refreshing or revalidating as
/// the object's state requires.
///
/// # Errors
/// [`EdgeError::Cache`] when the core cache fails; [`EdgeError::Origin`] when the origin is
/// unreachable and no copy may be served; [`EdgeError::Body`] for corrupt stored bodies.
pub(crate) fn cached(
    policy: &Policy,
    plan: &Plan<'_>,
    mut req: Request,
    f: &mut Access,
) -> Result<Outcome, EdgeError> {
    let ctx = Lookup {
        policy,
        plan,
        client: client_of(&req),
        early: policy.early_refresh(plan),
        key: CacheKey::copy_from_slice(plan.cache_key.as_bytes()),
        vary: vary_headers(&req),
    };
    for attempt in 0..MAX_LOOKUPS {
        match ctx.step(req, attempt + 1 == MAX_LOOKUPS, f)? {
            Step::Done(outcome) => return Ok(*outcome),
            Step::Again(r) => req = *r,
        }
    }
    pass(policy, plan, req, f)
}

/// What one lookup needs besides the request.
struct Lookup<'p, 'a> {
    policy: &'p Policy,
    plan: &'p Plan<'a>,
    client: Client,
    early: EarlyRefresh,
    key: CacheKey,
    /// The request's fields, normalized for variant selection (RFC 9111 §4.1,
    /// `cachet_http::vary::normalized`): the core cache picks the variant stored with
    /// `vary_by` whose fields match (Fastly's own `Vary` support, which Viceroy implements).
    vary: Vec<(HeaderName, HeaderValue)>,
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

/// Result of one lookup.
enum Step {
    /// Answered.
    Done(Box<Outcome>),
    /// The object was purged (ban) or soft-purged (refresh-ahead): look it up again.
    Again(Box<Request>),
}

impl Lookup<'_, '_> {
    fn done(r: Result<Outcome, EdgeError>) -> Result<Step, EdgeError> {
        r.map(|out| Step::Done(Box::new(out)))
    }

    /// One lookup: what it found, classified for `cachet_http::lookup::next`, whose step
    /// [`Self::act`] carries out.
    fn step(&self, req: Request, last: bool, f: &mut Access) -> Result<Step, EdgeError> {
        let mut lookup = Transaction::lookup(self.key.clone());
        for (n, v) in &self.vary {
            lookup = lookup.header(n, v);
        }
        let tx = lookup.execute()?;
        let obligated = tx.must_insert_or_update();
        let mut rights = Rights {
            fill: obligated,
            relookup: false,
            only_if_cached: self.client.only_if_cached,
        };
        let found = tx.found();
        // Not ours (another layout version) counts as nothing.
        let meta = found
            .as_ref()
            .and_then(|f| Meta::from_bytes(&f.user_metadata()));
        let (Some(found), Some(meta)) = (found, meta) else {
            return self.act(lookup::next(Found::Nothing, rights), tx, None, req, f);
        };
        rights.relookup = !last && !meta.tag.is_empty();
        let what = if meta.pass {
            // A hit-for-pass marker; with the obligation it expired: ask the origin again.
            f.pass_reason = Some("hit-for-pass");
            if obligated {
                Found::Nothing
            } else {
                Found::Marker
            }
        } else if let Some(covered) = self.banned(&meta, &req, f) {
            match covered {
                bans::Covered::Ban(id) => f.banned_by = Some(id),
                bans::Covered::Unknown => f.bans_unknown = true,
            }
            Found::Banned
        } else {
            let draw = match self.early {
                EarlyRefresh::Xfetch { .. } => Draw::from_bits(random_bits()),
                _ => Draw::ONE,
            };
            Found::Object {
                freshness: decide(Some(&meta.times), now(), &self.early, draw),
                soft_purged: found.is_stale(),
                has_grace: !meta.times.grace.is_zero(),
            }
        };
        let next = lookup::next(what, rights);
        // The body is read only when it may be sent.
        let body = match next {
            Next::Serve { .. } | Next::Revalidate => found.to_stream()?.into_bytes(),
            _ => Vec::new(),
        };
        drop(found);
        self.act(next, tx, Some(Hit { meta, body }), req, f)
    }

    /// What keeps `meta` from being served as it is, if anything (`bans::check` on this
    /// POP's copy of the index).
    fn banned(&self, meta: &Meta, req: &Request, f: &mut Access) -> Option<bans::Covered> {
        let (log, log_error) = bans::current(self.policy);
        if log_error.is_some() {
            f.error = log_error;
        }
        bans::check(&log, meta, &self.plan.target, |n| req.get_header_str(n))
    }

    /// Carries out `next` for `hit` (the found object; its body only when it may be
    /// served) under `tx`.
    fn act(
        &self,
        next: Next,
        tx: Transaction,
        hit: Option<Hit>,
        req: Request,
        f: &mut Access,
    ) -> Result<Step, EdgeError> {
        let job = |tx: Transaction, why: &'static str, meta: &Meta| Job {
            tx,
            meta: meta.clone(),
            req: req.clone_without_body(),
            why,
        };
        match (next, hit) {
            (Next::Serve { status, refresh }, Some(hit)) => {
                f.cache = status;
                let why = if status == CacheStatus::Stale {
                    "stale"
                } else {
                    "ahead"
                };
                let after = if refresh {
                    Some(job(tx, why, &hit.meta))
                } else {
                    drop(tx);
                    None
                };
                self.serve(hit, after, f)
            }
            (Next::Relookup { soft }, Some(hit)) => {
                drop(tx);
                purge(&hit.meta.tag, soft, f);
                Ok(Step::Again(Box::new(req)))
            }
            (Next::Revalidate, Some(hit)) => Self::done(revalidate_now(self, tx, &hit, &req, f)),
            (Next::NotCached, _) => {
                if tx.must_insert_or_update() {
                    let _ = tx.cancel_insert_or_update();
                }
                Ok(Step::Done(Box::new(not_cached(f).into())))
            }
            (Next::Fill, _) => Self::done(miss(self, tx, &req, f)),
            (Next::Pass { status }, _) | (Next::Serve { status, .. }, None) => {
                drop(tx);
                if status == CacheStatus::Miss {
                    f.pass_reason = Some("revalidating-elsewhere");
                }
                let mut out = pass(self.policy, self.plan, req, f)?;
                if status != CacheStatus::Pass {
                    f.cache = status;
                    out.resp.set_header("x-cache", status.as_str());
                }
                Ok(Step::Done(Box::new(out)))
            }
            (Next::Relookup { .. } | Next::Revalidate, None) => {
                drop(tx);
                Self::done(pass(self.policy, self.plan, req, f))
            }
        }
    }

    /// Serves a found object; `after` refreshes it once the response is sent.
    fn serve(&self, hit: Hit, after: Option<Job>, f: &mut Access) -> Result<Step, EdgeError> {
        let resp = deliver::respond(&hit.meta, hit.body, f.cache, &self.client, f)?;
        Ok(Step::Done(Box::new(Outcome {
            resp,
            after: after.map(Box::new),
            inflate: false,
        })))
    }
}

/// The `504` of an `only-if-cached` request with nothing servable (RFC 9111 §5.2.1.7).
fn not_cached(f: &mut Access) -> Response {
    f.cache = CacheStatus::Miss;
    crate::to_response(cachet_http::reply::failure(cachet_http::Failure::NotCached))
}

/// A found object: metadata and stored body (its age comes from the metadata's times).
struct Hit {
    meta: Meta,
    body: Vec<u8>,
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

/// A refresh that runs after the client's response has been sent, holding the core
/// cache's obligation for the key (other requests are served the cached copy meanwhile).
pub(crate) struct Job {
    tx: Transaction,
    meta: Meta,
    req: Request,
    why: &'static str,
}

impl Job {
    /// Refreshes the object: conditional request when it has validators; 304 freshens,
    /// a storable response replaces, a response that may no longer be stored leaves a
    /// hit-for-pass marker, an error or 5xx keeps the stored copy (obligation cancelled,
    /// the next request retries).
    pub fn run(self, policy: &Policy, f: &mut Access) {
        let started = Instant::now();
        let Self { tx, meta, req, why } = self;
        let inputs = crate::inputs(&req);
        let plan = policy.plan(&inputs.view(), SystemTime::now());
        let outcome = refresh(policy, &plan, tx, &meta, &req);
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

/// Sends a fill; on failure the obligation is cancelled (the next request retries).
fn send_fill(
    policy: &Policy,
    plan: &Plan<'_>,
    tx: &Transaction,
    req: Request,
) -> Result<Fetched, String> {
    origin::fetch(policy, plan, req).inspect_err(|_| {
        let _ = tx.cancel_insert_or_update();
    })
}

/// What a background refresh did (access-log text).
fn refresh(
    policy: &Policy,
    plan: &Plan<'_>,
    tx: Transaction,
    meta: &Meta,
    req: &Request,
) -> Result<&'static str, EdgeError> {
    let fill_req = fill_request(policy, plan, req, Some(meta));
    let fetched = send_fill(policy, plan, &tx, fill_req).map_err(unreachable)?;
    let status = fetched.resp.get_status().as_u16();
    let fields = fields_of(&fetched.resp);
    match revalidated(policy, plan, meta, &fetched, &fields) {
        Revalidated::Uncacheable { marker, .. } => {
            insert(policy, tx, &marker, &[])?;
            Ok("now-uncacheable")
        }
        Revalidated::Freshen(fresh) => {
            update(policy, tx, &fresh)?;
            Ok("revalidated-304")
        }
        Revalidated::Keep => {
            let _ = tx.cancel_insert_or_update();
            Ok(if status == 304 {
                "kept-stored"
            } else {
                "origin-error-kept-stored"
            })
        }
        Revalidated::Replace => Ok(match store(policy, plan, tx, fetched, true)?.0 {
            Filled::Stored { .. } => "replaced",
            _ => "now-uncacheable",
        }),
    }
}

/// The engine's verdict on a revalidation answer (`cachet_http::fill::revalidated`).
fn revalidated(
    policy: &Policy,
    plan: &Plan<'_>,
    meta: &Meta,
    fetched: &Fetched,
    fields: &[(String, Vec<u8>)],
) -> Revalidated {
    let answer = Origin {
        status: fetched.resp.get_status().as_u16(),
        fields,
        body: &[],
        elapsed: fetched.elapsed,
    };
    fill::revalidated(policy, plan, &plan.cache_key, meta, answer, now())
}

/// Writes a freshened object's metadata (same body) under the obligation.
fn update(policy: &Policy, tx: Transaction, fresh: &Meta) -> Result<(), EdgeError> {
    let keys = object_keys(fresh);
    let mut update = tx.update(fresh.times.ttl);
    let vary = vary_names(&fresh.vary_fields);
    if !vary.is_empty() {
        update = update.vary_by(&vary);
    }
    update
        .stale_while_revalidate(core_swr(policy, &fresh.route, &fresh.times))
        .surrogate_keys(keys.iter().map(String::as_str))
        .user_metadata(fresh.to_bytes().into())
        .execute()?;
    Ok(())
}

/// Whether an origin failure now may be answered with `meta` (within grace or its
/// stale-if-error window, `cachet_refresh::on_origin_error`).
fn stale_if_error(meta: &Meta) -> bool {
    on_origin_error(
        Some(&meta.times),
        now(),
        Duration::from_secs(meta.stale_if_error_s),
        RETRY_AFTER,
    ) == ErrorAction::ServeStale
}

/// Past grace, holding the obligation: revalidate before answering.
fn revalidate_now(
    ctx: &Lookup<'_, '_>,
    tx: Transaction,
    hit: &Hit,
    req: &Request,
    f: &mut Access,
) -> Result<Outcome, EdgeError> {
    let (policy, plan, client) = (ctx.policy, ctx.plan, &ctx.client);
    let meta = &hit.meta;
    let fill_req = fill_request(policy, plan, req, Some(meta));
    let fetched = match send_fill(policy, plan, &tx, fill_req) {
        Ok(r) => r,
        Err(e) if stale_if_error(meta) => {
            f.error = Some(e);
            f.cache = CacheStatus::Stale;
            return deliver::respond(meta, hit.body.clone(), f.cache, client, f).map(Outcome::from);
        }
        Err(e) => return Err(unreachable(e)),
    };
    origin::note(f, fetched.elapsed);
    f.cache = CacheStatus::Miss;
    let fields = fields_of(&fetched.resp);
    match revalidated(policy, plan, meta, &fetched, &fields) {
        Revalidated::Uncacheable { marker, theirs } => {
            // This client gets the stored body with the 304's fields, nobody else does.
            insert(policy, tx, &marker, &[])?;
            f.refresh = Some("now-uncacheable".into());
            f.cache = CacheStatus::Pass;
            let mut resp = deliver::respond(&theirs, hit.body.clone(), f.cache, client, f)?;
            // Their cookie is theirs: passed on, never stored.
            for cookie in fetched.resp.get_header_all(header::SET_COOKIE) {
                resp.append_header(header::SET_COOKIE, cookie);
            }
            Ok(resp.into())
        }
        Revalidated::Freshen(fresh) => {
            update(policy, tx, &fresh)?;
            f.refresh = Some("revalidated-304".into());
            deliver::respond(&fresh, hit.body.clone(), f.cache, client, f).map(Outcome::from)
        }
        Revalidated::Keep => {
            // Past grace the stored copy is served only within the origin's
            // stale-if-error (RFC 5861 §4); otherwise the origin's error goes out as it is.
            let _ = tx.cancel_insert_or_update();
            f.refresh = Some("origin-error".into());
            if stale_if_error(meta) {
                f.cache = CacheStatus::Stale;
                return deliver::respond(meta, hit.body.clone(), f.cache, client, f)
                    .map(Outcome::from);
            }
            f.cache = CacheStatus::Pass;
            Ok(deliver::unstored(fetched.resp, client, true))
        }
        Revalidated::Replace => fill(policy, plan, tx, fetched, client, f, true),
    }
}

/// We hold the collapsing obligation for this key and nothing usable is stored: one origin
/// fetch serves every waiter.
fn miss(
    ctx: &Lookup<'_, '_>,
    tx: Transaction,
    req: &Request,
    f: &mut Access,
) -> Result<Outcome, EdgeError> {
    let (policy, plan) = (ctx.policy, ctx.plan);
    let fill_req = fill_request(policy, plan, req, None);
    let fetched = send_fill(policy, plan, &tx, fill_req).map_err(unreachable)?;
    origin::note(f, fetched.elapsed);
    fill(policy, plan, tx, fetched, &ctx.client, f, false)
}

/// Applies the engine's verdict on a fill's answer (`cachet_http::fill`) to the core
/// cache: inserts the object or a hit-for-pass marker, or cancels the obligation. Returns
/// the verdict and the origin response (with its body when it was not stored). The body is
/// read into memory only when it may be stored.
fn store(
    policy: &Policy,
    plan: &Plan<'_>,
    tx: Transaction,
    fetched: Fetched,
    replacing: bool,
) -> Result<(Filled, Response), EdgeError> {
    let Fetched { mut resp, elapsed } = fetched;
    let now = now();
    let status = resp.get_status().as_u16();
    let fields = fields_of(&resp);
    let key = &plan.cache_key;
    let limit = policy.config().edge.max_object_bytes;
    let verdict =
        if let Some(v) = fill::unstorable(policy, plan, key, status, &fields, now, replacing) {
            v
        } else if let Some(body) = read_bounded(&mut resp, limit)? {
            let origin = Origin {
                status,
                fields: &fields,
                body: &body,
                elapsed,
            };
            let v = fill::filled(policy, plan, key, origin, now, replacing)?;
            resp.set_body(body);
            v
        } else {
            fill::oversized(policy, plan, key, status, &fields, now, replacing)
        };
    match &verdict {
        Filled::Stored { meta, body } => insert(policy, tx, meta, body)?,
        Filled::Marker { meta, .. } => insert(policy, tx, meta, &[])?,
        Filled::Unstored(_) => {
            let _ = tx.cancel_insert_or_update();
        }
    }
    Ok((verdict, resp))
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

/// Stores a fill's answer as the engine says ([`store`]) and answers this client: from
/// the stored object, or with the origin's answer unstored.
fn fill(
    policy: &Policy,
    plan: &Plan<'_>,
    tx: Transaction,
    fetched: Fetched,
    client: &Client,
    f: &mut Access,
    replacing: bool,
) -> Result<Outcome, EdgeError> {
    match store(policy, plan, tx, fetched, replacing)? {
        (Filled::Stored { meta, body }, _) => {
            f.cache = CacheStatus::Miss;
            deliver::respond(&meta, body, f.cache, client, f).map(Outcome::from)
        }
        (Filled::Marker { why, .. } | Filled::Unstored(why), resp) => {
            f.pass_reason = Some(why.label());
            f.cache = CacheStatus::Pass;
            Ok(deliver::unstored(resp, client, true))
        }
    }
}

/// The core cache's stale-while-revalidate for an object: grace + keep, plus the TTL when
/// its route refreshes early (so a soft purge leaves it usable until its real expiry and
/// beyond, on platforms where a soft-purged object is only usable within SWR).
fn core_swr(policy: &Policy, route: &str, times: &EntryTimes) -> Duration {
    let early = policy
        .config()
        .routes
        .iter()
        .find(|r| r.name == route)
        .is_some_and(|r| r.early_refresh != EarlyRefresh::None);
    let mut swr = times.grace.saturating_add(times.keep);
    if early {
        swr = swr.saturating_add(times.ttl);
    }
    swr
}

/// Surrogate keys an object is inserted with: its own, then its per-object tag.
fn object_keys(meta: &Meta) -> Vec<String> {
    let mut keys = meta.surrogate_keys.clone();
    if !meta.tag.is_empty() {
        keys.push(meta.tag.clone());
    }
    keys
}

/// Inserts an object (or, `meta.pass`, a content-free hit-for-pass marker) under the
/// obligation: the core cache's TTL is the object's, its stale-while-revalidate
/// [`core_swr`] (none for a marker), `vary_by` the origin's varying fields.
fn insert(policy: &Policy, tx: Transaction, meta: &Meta, body: &[u8]) -> Result<(), EdgeError> {
    let keys = object_keys(meta);
    let mut insert = tx.insert(meta.times.ttl);
    let vary = vary_names(&meta.vary_fields);
    if !vary.is_empty() {
        insert = insert.vary_by(&vary);
    }
    if !meta.pass {
        insert = insert.stale_while_revalidate(core_swr(policy, &meta.route, &meta.times));
    }
    let mut writer = insert
        .surrogate_keys(keys.iter().map(String::as_str))
        .user_metadata(meta.to_bytes().into())
        .known_length(body.len() as u64)
        .execute()?;
    writer.write_all(body)?;
    writer.finish()?;
    Ok(())
}
