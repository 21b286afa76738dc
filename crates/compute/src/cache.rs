//! Lookup, miss, refresh-ahead, stale serving and revalidation on Fastly's core cache.
//!
//! The flow and every decision in it are `cachet_http::exchange`'s; this module drives the
//! exchange with the port's core-cache transactions, origin and client answer. How the flow maps onto the
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
use cachet_http::exchange::{
    self, Action, AnswerHead, Background, Claim, CoreEntry, Done, Event, Exchange, MetaFrom, Purge,
    Respond, Right, Write, WriteOp,
};
use cachet_http::{CacheStatus, Client, Failure};
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
        retry_after_secs: retry_after_secs(exchange::RETRY_AFTER),
    }
}

/// Serves a cacheable request from the core cache: drives `cachet_http::exchange` (the
/// flow and every decision in it) with this instance's core cache, origin and client.
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
    let now = Timestamp::from_system_time(cx.host.now());
    let seed = cx.host.random_u64();
    let ecx = exchange::Cx {
        policy: cx.policy,
        plan,
        client: &client,
        request: &req.headers,
    };
    let mut ex = Exchange::new(ecx, now, seed);
    let mut d = Driver::new(cx, plan, &req, f);
    let done = d.run(ecx, &mut ex, Event::Start);
    let notes = ex.notes().clone();
    drop(ex);
    let out = done.and_then(|done| d.finish(done, &client));
    f.record(&notes);
    match out? {
        Finished::Out(out, refresh) => Ok(Outcome {
            after: refresh
                .map(|refresh| {
                    Box::new(Refresh {
                        refresh,
                        req: req.without_body(),
                    })
                })
                .into_iter()
                .collect(),
            ..out
        }),
        Finished::Pass => pass(cx, plan, req, f),
        Finished::Refreshed(_) => Err(EdgeError::Cache(
            "a client exchange ended as a refresh".into(),
        )),
    }
}

/// How an exchange ended, once its write is done.
enum Finished<H: Host> {
    /// This answer, and maybe a refresh to run after it.
    Out(Outcome<H>, Option<Background<H::Tx, Box<Meta>>>),
    /// Pass the client's request to the origin.
    Pass,
    /// A background refresh's outcome.
    Refreshed(Refreshed),
}

/// The edge's side of `cachet_http::exchange`: carries out its actions on the core cache,
/// the origin and the client answer; decides nothing.
struct Driver<'p, 'a, 'f, H: Host> {
    cx: Ctx<'p, H>,
    plan: &'p Plan<'a>,
    req: &'p ClientRequest<H::Body>,
    /// The request's fields, normalized for variant selection (RFC 9111 §4.1,
    /// `cachet_http::vary::normalized`): the core cache picks the variant stored with
    /// `vary_by` whose fields match (Fastly's own `Vary` support, which Viceroy implements).
    vary: Fields,
    /// The origin's answer to the fetch, while the exchange decides on it.
    answer: Option<Fetched<H::Body>>,
    f: &'f mut Access,
}

type Ex<H> = Exchange<<H as Host>::Tx, Box<Meta>, Vec<u8>>;

/// An exchange's last action.
type Last<H> = Done<<H as Host>::Tx, Box<Meta>, Vec<u8>>;

/// An event of the edge's exchange.
type Ev<H> = Event<<H as Host>::Tx, Box<Meta>, Vec<u8>>;

/// What a write wrote: metadata, and the body of an insert.
type Written = Option<(Box<Meta>, Option<Vec<u8>>)>;

impl<'p, 'a, 'f, H: Host> Driver<'p, 'a, 'f, H> {
    fn new(
        cx: Ctx<'p, H>,
        plan: &'p Plan<'a>,
        req: &'p ClientRequest<H::Body>,
        f: &'f mut Access,
    ) -> Self {
        Self {
            cx,
            plan,
            vary: vary_headers(
                &req.headers,
                &cx.policy.config().origin.fill_fields,
                plan.device_header,
            ),
            req,
            answer: None,
            f,
        }
    }

    fn now(&self) -> Timestamp {
        Timestamp::from_system_time(self.cx.host.now())
    }

    /// Feeds `ex` from `event` until it is done.
    fn run(
        &mut self,
        ecx: exchange::Cx<'_>,
        ex: &mut Ex<H>,
        event: Ev<H>,
    ) -> Result<Last<H>, EdgeError> {
        let mut event = event;
        loop {
            event = match ex.handle(ecx, self.now(), event) {
                Action::Done(done) => return Ok(done),
                action => self.perform(ex, action)?,
            };
        }
    }

    /// Carries out one action; its outcome is the next event.
    fn perform(
        &mut self,
        ex: &Ex<H>,
        action: Action<H::Tx, Box<Meta>, Vec<u8>>,
    ) -> Result<Ev<H>, EdgeError> {
        let host = self.cx.host;
        Ok(match action {
            Action::Lookup { wait, purge } => {
                if let Some(p) = purge {
                    self.purge_first(p);
                }
                self.lookup(wait)?
            }
            Action::CheckBan => Event::Ban(ex.found().is_some_and(|m| self.banned(m))),
            Action::ReadFlag { key } => {
                Event::Flag(host.lookup(key.as_bytes()).map(|f| host.found_metadata(&f)))
            }
            Action::ReadStored => {
                Event::Stored(match ex.handle_ref().and_then(|t| host.tx_found(t)) {
                    Some(found) => host.found_body(&found, None).map_err(EdgeError::Cache)?,
                    None => Vec::new(),
                })
            }
            // The core cache settles the right with the lookup: never asked; a request
            // without it waits.
            Action::Claim(handle) => Event::Claimed(handle, Claim::Follower),
            Action::Park(d) => {
                host.sleep(d);
                Event::Woken
            }
            Action::Fetch { fields } => {
                let url = self.req.url.clone();
                match origin::send(self.cx, &self.plan.target, "GET".into(), url, fields, None) {
                    Ok(a) => {
                        let head = AnswerHead {
                            status: a.resp.status,
                            fields: a.resp.headers.clone(),
                            elapsed: a.elapsed,
                        };
                        self.answer = Some(a);
                        Event::Head(head)
                    }
                    Err(e) => Event::OriginFailed(e),
                }
            }
            Action::ReadBody { limit } => self.read_bounded(limit),
            Action::Done(_) => unreachable!("run returns Done"),
        })
    }

    /// A purge (and refresh-ahead's flag) before a lookup.
    fn purge_first(&mut self, p: Purge) {
        if let Some((key, value, ttl)) = p.flag {
            let e = Entry {
                ttl,
                swr: Duration::ZERO,
                age: Duration::ZERO,
                vary_by: &[],
                surrogate_keys: &[],
                user_metadata: &value,
            };
            if let Err(err) = self.cx.host.insert(key.as_bytes(), &e, &[]) {
                self.f.error = Some(format!("flag {key}: {err}"));
            }
        }
        purge(self.cx.host, &p.tag, p.soft, self.f);
    }

    fn lookup(&mut self, wait: Duration) -> Result<Ev<H>, EdgeError> {
        let host = self.cx.host;
        let key = self.plan.cache_key.as_bytes();
        let Some(tx) = host
            .tx_lookup(key, &self.vary, false, Some(wait))
            .map_err(EdgeError::Cache)?
        else {
            return Ok(Event::TimedOut);
        };
        // Metadata of another layout version counts as nothing.
        let found = host.tx_found(&tx).and_then(|f| {
            Some((
                Box::new(Meta::from_bytes(&host.found_metadata(&f))?),
                host.found_stale(&f),
            ))
        });
        let right = if host.tx_obligated(&tx) {
            Right::Held
        } else {
            Right::Elsewhere
        };
        Ok(Event::Looked {
            handle: tx,
            right,
            found,
            failed_at: None,
        })
    }

    /// `bans::check` on this POP's copy of the index.
    fn banned(&mut self, meta: &Meta) -> bool {
        let (log, log_error) = bans::current(self.cx);
        if log_error.is_some() {
            self.f.error = log_error;
        }
        let req = self.req;
        let covered = bans::check(&log, meta, &self.plan.target, |n| req.header_str(n));
        match covered {
            Some(bans::Covered::Ban(id)) => self.f.banned_by = Some(id),
            Some(bans::Covered::Unknown) => self.f.bans_unknown = true,
            None => return false,
        }
        true
    }

    /// Reads the answer's body when it is at most `limit` bytes (`[edge].max_object_bytes`).
    /// A longer one (a chunked body declares no length) is not held: the answer gets back
    /// a body that replays the `limit + 1` bytes read and streams the rest from the
    /// origin, so memory stays bounded by `limit` whatever the body's size.
    fn read_bounded(&mut self, limit: u64) -> Ev<H> {
        let host = self.cx.host;
        let Some(a) = self.answer.as_mut() else {
            return Event::BodyBroke("no origin answer".into());
        };
        let head = match host.body_read(&mut a.resp.body, limit.saturating_add(1)) {
            Ok(head) => head,
            Err(e) => return Event::BodyBroke(format!("origin body: {e}")),
        };
        if head.len() as u64 <= limit {
            return Event::Body(head);
        }
        let mut replay = host.body_from(head);
        let rest = std::mem::replace(&mut a.resp.body, host.body_from(Vec::new()));
        host.body_append(&mut replay, rest);
        a.resp.body = replay;
        Event::Oversize
    }

    /// Carries out the exchange's last write, then builds its answer.
    fn finish(
        &mut self,
        done: Done<H::Tx, Box<Meta>, Vec<u8>>,
        client: &Client,
    ) -> Result<Finished<H>, EdgeError> {
        let Done {
            write,
            respond,
            refresh,
        } = done;
        let written = match write {
            Some(w) => self.write(w)?,
            None => None,
        };
        let out: Outcome<H> = match respond {
            Respond::Object {
                status,
                found,
                meta,
                cookies,
            } => {
                let (wm, wb) = written.unzip();
                let (found_meta, found_body) = found.unzip();
                let meta = match meta {
                    MetaFrom::Found => found_meta,
                    MetaFrom::Written => wm,
                    MetaFrom::Own(m) => Some(m),
                };
                let (Some(meta), Some(body)) = (meta, found_body.or(wb.flatten())) else {
                    return Err(EdgeError::Cache(
                        "an answer from a write that was not made".into(),
                    ));
                };
                let mut out = deliver::respond(self.now(), &meta, body, status, client, self.f)?;
                out.headers.extend(cookies);
                out.into()
            }
            Respond::Unstored { body, .. } => {
                let Some(mut answer) = self.answer.take() else {
                    return Err(EdgeError::Cache("no origin answer to send".into()));
                };
                if let Some(body) = body {
                    answer.resp.body = self.cx.host.body_from(body);
                }
                deliver::unstored(answer, client, true).into()
            }
            Respond::Pass => return Ok(Finished::Pass),
            Respond::NotCached => {
                Response::from(cachet_http::reply::failure(Failure::NotCached)).into()
            }
            Respond::Unavailable(reason) => return Err(unreachable(reason)),
            Respond::Broken(e) => return Err(EdgeError::Body(e)),
            Respond::Refreshed(r) => return Ok(Finished::Refreshed(r)),
        };
        Ok(Finished::Out(out, refresh))
    }

    /// Carries out a write; returns what was written (metadata, and the body of an insert).
    fn write(&mut self, w: Write<H::Tx>) -> Result<Written, EdgeError> {
        let host = self.cx.host;
        match w.op {
            WriteOp::Insert {
                meta,
                body,
                entry: e,
            } => {
                let md = meta.to_bytes();
                host.tx_insert(w.handle, &entry(&e, &meta, &md), &body)
                    .map_err(EdgeError::Cache)?;
                Ok(Some((meta, Some(body))))
            }
            WriteOp::Failure {
                meta,
                update: false,
                entry: e,
            } => {
                let md = meta.to_bytes();
                host.tx_insert(w.handle, &entry(&e, &meta, &md), &[])
                    .map_err(EdgeError::Cache)?;
                Ok(Some((meta, None)))
            }
            WriteOp::Update { meta, entry: e } | WriteOp::Failure { meta, entry: e, .. } => {
                let md = meta.to_bytes();
                host.tx_update(w.handle, &entry(&e, &meta, &md))
                    .map_err(EdgeError::Cache)?;
                Ok(Some((meta, None)))
            }
            WriteOp::Cancel => {
                if host.tx_obligated(&w.handle) {
                    host.tx_cancel(&w.handle);
                }
                Ok(None)
            }
        }
    }
}

/// The port's view of a core-cache write (`exchange::CoreEntry` plus the metadata bytes).
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
pub(crate) struct Refresh<H: Host> {
    refresh: Background<H::Tx, Box<Meta>>,
    /// The client's request (without body), planned again for the refresh.
    req: ClientRequest<H::Body>,
}

impl<H: Host> Refresh<H> {
    /// Runs the refresh (`cachet_http::exchange::Exchange::refresh`) and records what it
    /// did.
    pub fn run(self, cx: Ctx<'_, H>, f: &mut Access) {
        let started = cx.host.monotonic();
        let Self { refresh, req } = self;
        let why = refresh.cause;
        let inputs = crate::inputs(&req);
        let now = cx.host.now();
        let plan = cx.policy.plan(&inputs.view(), now);
        let client = client_of(cx, &req);
        let now = Timestamp::from_system_time(now);
        let ecx = exchange::Cx {
            policy: cx.policy,
            plan: &plan,
            client: &client,
            request: &req.headers,
        };
        let mut ex = Exchange::refresh(ecx, refresh, now);
        let mut d = Driver::new(cx, &plan, &req, f);
        let done = d
            .run(ecx, &mut ex, Event::Start)
            .and_then(|done| d.finish(done, &client));
        let error = ex.notes().error.clone();
        drop(ex);
        let done = match done {
            Ok(Finished::Refreshed(r)) => r,
            Ok(_) => Refreshed::KeptStored,
            Err(e) => {
                f.error = Some(e.to_string());
                Refreshed::KeptStored
            }
        };
        if let Some(e) = error {
            f.error = Some(e);
        }
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
