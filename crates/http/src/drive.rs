//! The cache flow of one cacheable request on a transactional core cache, written once:
//! lookup, ban check, serve, refresh after, revalidate, fill, store, stale-if-error.
//!
//! The flow fits a platform whose cache hands out an *obligation* per key, as Fastly's
//! core cache does (`fastly::cache::core::Transaction`, Varnish's busy object): the first
//! request for a missing or stale key gets it and fills, the others wait or are served
//! (request collapsing by the platform). The edge app implements [`CoreCache`] with
//! only platform I/O (transactions, the origin backend, Fastly responses, the access log);
//! every decision is here or in the modules this calls:
//!
//! * what a lookup found and what to do with it: [`crate::lookup::next`] with the
//!   object's own times (`cachet_refresh::decide`, XFetch's draw from
//!   [`CoreCache::random_bits`]), a ban verdict, hit-for-pass markers;
//! * a ban or refresh-ahead: the object is purged (soft for refresh-ahead) by its own
//!   surrogate key and looked up again, at most [`MAX_LOOKUPS`] times, so the refetch is
//!   collapsed too;
//! * what an origin answer becomes: [`crate::fill::unstorable`] /
//!   [`crate::fill::filled`] / [`crate::fill::oversized`] for a fill,
//!   [`crate::fill::revalidated`] for a revalidation (RFC 9111 §4.3.4);
//! * an origin failure: the stored copy within grace or its `stale-if-error` window
//!   ([`stale_if_error`], RFC 5861 §4), else the origin's error or a `503`
//!   ([`CoreCache::unreachable`]);
//! * a background refresh ([`refresh`]) after a stale or refresh-ahead answer: a 304
//!   freshens, a storable answer replaces, a now-private one leaves a marker, an error
//!   keeps the stored copy.
//!
//! The Envoy filter elects its collapsing leader across workers itself and answers
//! asynchronously, so it drives the same rules ([`crate::lookup`], [`crate::fill`],
//! [`stale_if_error`], the per-user 304's own answer, a revalidation's 5xx forwarded)
//! from its callbacks instead of this loop; the shared conformance cases hold both to
//! the same answers.

use std::time::Duration;

use cachet_policy::object::Meta;
use cachet_policy::{Plan, Policy};
use cachet_refresh::{
    Draw, EarlyRefresh, EntryTimes, ErrorAction, Freshness, Timestamp, decide, on_origin_error,
};

use crate::access::{RefreshCause, Refreshed, Revalidation};
use crate::fill::{self, Filled, Revalidated};
use crate::lookup::{self, Found, Next, Rights};
use crate::store::Origin;
use crate::{CacheStatus, Client, Failure};

/// Lookups per request: the first, and one after a ban purge or a refresh-ahead soft purge.
pub const MAX_LOOKUPS: usize = 2;

/// `Retry-After` of a `503` sent when the origin is unreachable and nothing may be served
/// stale (both adapters).
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

/// What one lookup found.
#[derive(Debug)]
pub struct Looked<T> {
    /// The transaction: the handle that holds the obligation, if any.
    pub tx: T,
    /// This request holds the key's obligation (it may insert or update).
    pub obligated: bool,
    /// The stored object's metadata (`None`: nothing stored, or metadata of another
    /// layout) and whether the platform holds it as stale (soft-purged).
    pub found: Option<(Meta, bool)>,
}

/// An origin answer's status line and fields, as the engine reads them.
#[derive(Debug, Clone)]
pub struct AnswerHead {
    /// Its status.
    pub status: u16,
    /// Every header line, in order (bytes).
    pub fields: Vec<(String, Vec<u8>)>,
    /// Time to its headers.
    pub elapsed: Duration,
}

/// What the flow tells the access log (the adapter records; it decides nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// The request's cache status so far (the last one written wins).
    Status(CacheStatus),
    /// Why the request was passed or its answer not stored.
    PassReason(&'static str),
    /// What a foreground revalidation did (the log's `refresh`).
    Refresh(Revalidation),
    /// Something failed and the flow went on (a stale copy was served instead).
    Error(String),
    /// A foreground origin wait.
    OriginWait(Duration),
}

/// The platform side of the flow: a transactional core cache, the origin and the client
/// answer. Implementations only move bytes; each method says what it must do.
pub trait CoreCache {
    /// A lookup transaction (holds the obligation when [`Looked::obligated`]).
    type Tx;
    /// An origin answer whose body is not read yet.
    type Answer;
    /// A response for the client.
    type Out;
    /// The platform's error; body errors convert from `std::io::Error`.
    type Error: From<std::io::Error>;

    /// The clock.
    fn now(&self) -> Timestamp;
    /// 64 random bits (XFetch's draw).
    fn random_bits(&mut self) -> u64;
    /// Looks up the request's key (its variant chosen by the request's fields), waiting
    /// at most `wait` when another request is filling it (the platform's request
    /// collapsing); `None` when that wait ran out.
    ///
    /// # Errors
    /// The core cache's failure.
    fn lookup(&mut self, wait: Duration) -> Result<Option<Looked<Self::Tx>>, Self::Error>;
    /// Lets `d` pass (the edge sleeps) before looking up again while another request
    /// revalidates the key.
    fn pause(&mut self, d: Duration);
    /// A small flag entry's value (`None`: absent); outside the request's key, read
    /// without a transaction.
    fn read_flag(&mut self, key: &str) -> Option<Vec<u8>>;
    /// Writes a small flag entry for `ttl` (best effort: a failure is only logged).
    fn write_flag(&mut self, key: &str, value: &[u8], ttl: Duration);
    /// The found object's stored body.
    ///
    /// # Errors
    /// The core cache's failure reading it.
    fn body(&mut self, tx: &Self::Tx) -> Result<Vec<u8>, Self::Error>;
    /// Whether a ban covers `meta` (the adapter reads its ban index and logs which).
    fn banned(&mut self, meta: &Meta) -> bool;
    /// Inserts `meta` and `body` under the obligation (a marker: `meta.pass`, no body).
    ///
    /// # Errors
    /// The core cache's failure.
    fn insert(&mut self, tx: Self::Tx, meta: &Meta, body: &[u8]) -> Result<(), Self::Error>;
    /// Replaces the stored object's metadata (same body) under the obligation.
    ///
    /// # Errors
    /// The core cache's failure.
    fn update(&mut self, tx: Self::Tx, meta: &Meta) -> Result<(), Self::Error>;
    /// Gives up the obligation, if held (the next request retries).
    fn cancel(&mut self, tx: &Self::Tx);
    /// Purges (`soft`: soft-purges) one surrogate key.
    fn purge(&mut self, key: &str, soft: bool);
    /// Sends the fill's origin request (conditional on `stored`'s validators).
    ///
    /// # Errors
    /// Why the origin could not be reached.
    fn fetch(&mut self, stored: Option<&Meta>) -> Result<Self::Answer, String>;
    /// `answer`'s status and fields.
    fn head(&self, answer: &Self::Answer) -> AnswerHead;
    /// `answer`'s body when it is at most `limit` bytes, else `None` (and `answer` keeps a
    /// body that streams all of it).
    ///
    /// # Errors
    /// Why the origin's body broke (reset, shorter than its `Content-Length`, stalled past
    /// the between-bytes timeout): an origin failure.
    fn read_bounded(
        &mut self,
        answer: &mut Self::Answer,
        limit: u64,
    ) -> Result<Option<Vec<u8>>, String>;
    /// Gives `answer` its body back after [`Self::read_bounded`] took it.
    fn restore_body(&mut self, answer: &mut Self::Answer, body: Vec<u8>);
    /// Passes the client's request to the origin, nothing stored (records `PASS`).
    ///
    /// # Errors
    /// The origin could not be reached.
    fn pass(&mut self) -> Result<Self::Out, Self::Error>;
    /// The client's answer from a stored object (`cachet_http::deliver`).
    ///
    /// # Errors
    /// A stored body that does not inflate.
    fn respond(
        &mut self,
        meta: &Meta,
        body: Vec<u8>,
        status: CacheStatus,
    ) -> Result<Self::Out, Self::Error>;
    /// The client's answer from an origin answer that was not stored
    /// (`cachet_http::unstored`; the fill carried our `Accept-Encoding`).
    fn unstored(&mut self, answer: Self::Answer) -> Self::Out;
    /// Adds `answer`'s `Set-Cookie` lines to `out` (this client's own cookies).
    fn add_cookies(&mut self, out: &mut Self::Out, answer: &Self::Answer);
    /// One of Cachet's own failure answers (`cachet_http::reply::failure`).
    fn failure(&mut self, failure: Failure) -> Self::Out;
    /// The error for an unreachable origin with nothing servable (a `503` with
    /// `Retry-After` [`RETRY_AFTER`]).
    fn unreachable(&self, reason: String) -> Self::Error;
    /// Records `note` in the access log.
    fn note(&mut self, note: Note);
}

/// A refresh to run after the client's answer is sent, holding the obligation (other
/// requests are served the stored copy meanwhile).
#[derive(Debug)]
pub struct Refresh<T> {
    /// The transaction holding the obligation.
    pub tx: T,
    /// The stored object's metadata.
    pub meta: Meta,
    /// Why it runs: stale within grace, or refresh-ahead.
    pub why: RefreshCause,
}

/// What the flow produced: the client's answer and maybe a refresh to run after it.
#[derive(Debug)]
pub struct Served<T, O> {
    /// The client's answer.
    pub out: O,
    /// Work after the answer is sent.
    pub after: Option<Refresh<T>>,
}

impl<T, O> Served<T, O> {
    fn now(out: O) -> Self {
        Self { out, after: None }
    }
}

/// What one lookup led to.
enum Step<T, O> {
    /// The client's answer (and maybe a refresh after it).
    Done(Box<Served<T, O>>),
    /// The found object was purged: look up again.
    Purged,
    /// Another request holds the key's fill or revalidation: wait for it, look up again.
    Wait,
    /// The platform's wait for another request's fill ran past the bound: pass.
    TimedOut,
}

/// One lookup's result.
type StepResult<C> =
    Result<Step<<C as CoreCache>::Tx, <C as CoreCache>::Out>, <C as CoreCache>::Error>;

/// The first pause of a request waiting for another's revalidation; each next one
/// doubles, up to [`MAX_PAUSE`].
pub const FIRST_PAUSE: Duration = Duration::from_millis(5);
/// The longest pause between two lookups of a waiting request (its answer comes at most
/// this long after the revalidation it waits for).
pub const MAX_PAUSE: Duration = Duration::from_millis(50);

/// The flow's context: the request's plan and client fields.
struct Flow<'p, 'a> {
    policy: &'p Policy,
    plan: &'p Plan<'a>,
    client: &'p Client,
    early: EarlyRefresh,
    /// When the request began: a failure recorded at or after it is a failure of the
    /// fetch this request waited for.
    started: Timestamp,
    /// The end of its wait for another request's fetch (`[collapse].max_wait_ms`).
    deadline: Timestamp,
}

/// Serves a cacheable request planned as `plan` from the core cache, fetching,
/// refreshing or revalidating as the object's state requires (the flow in the module
/// docs). A request that finds another holding the key's fill or revalidation waits for
/// it (lookups [`FIRST_PAUSE`] to [`MAX_PAUSE`] apart) up to `[collapse].max_wait_ms`,
/// then is passed (`collapse-timeout`). After [`MAX_LOOKUPS`] lookups that each purged
/// what they found, the request is passed.
///
/// # Errors
/// The platform's: the core cache failed; the origin is unreachable and no copy may be
/// served ([`CoreCache::unreachable`]); a stored body is corrupt.
pub fn cached<C: CoreCache>(
    c: &mut C,
    policy: &Policy,
    plan: &Plan<'_>,
    client: &Client,
) -> Result<Served<C::Tx, C::Out>, C::Error> {
    let started = c.now();
    let max_wait = Duration::from_millis(policy.config().collapse.max_wait_ms);
    let flow = Flow {
        policy,
        plan,
        client,
        early: policy.early_refresh(plan),
        started,
        deadline: started.saturating_add(max_wait),
    };
    let mut purges = 0;
    let mut pause = FIRST_PAUSE;
    loop {
        let left = Duration::from_millis(
            flow.deadline
                .as_millis()
                .saturating_sub(c.now().as_millis()),
        );
        match flow.step(c, purges + 1 >= MAX_LOOKUPS, left)? {
            Step::Done(served) => return Ok(*served),
            Step::Purged => {
                purges += 1;
                if purges >= MAX_LOOKUPS {
                    return c.pass().map(Served::now);
                }
            }
            Step::Wait if !left.is_zero() => {
                c.pause(pause.min(left));
                pause = (pause * 2).min(MAX_PAUSE);
            }
            Step::Wait | Step::TimedOut => {
                c.note(Note::PassReason("collapse-timeout"));
                return c.pass().map(Served::now);
            }
        }
    }
}

/// The refresh-ahead flag of the object tagged `tag`: written before refresh-ahead's own
/// soft purge, holding the purged copy's `stored_at` (ms), so the requests that find the
/// copy soft-purged tell refresh-ahead's purge from an operator's (issue 28 items 2, 3).
pub fn ahead_flag_key(tag: &str) -> String {
    format!("cachet-ahead:{tag}")
}

/// A found object: metadata and its stored body (read only when it may be sent).
struct Hit {
    meta: Meta,
    body: Vec<u8>,
}

impl Flow<'_, '_> {
    /// One lookup, classified for [`lookup::next`], whose step [`Self::act`] carries out.
    fn step<C: CoreCache>(&self, c: &mut C, last: bool, wait: Duration) -> StepResult<C> {
        let Some(Looked {
            tx,
            obligated,
            found,
        }) = c.lookup(wait)?
        else {
            return Ok(Step::TimedOut);
        };
        let mut rights = Rights {
            fill: obligated,
            relookup: false,
            only_if_cached: self.client.only_if_cached,
        };
        let Some((meta, platform_stale)) = found else {
            return self.act(c, lookup::next(Found::Nothing, rights), tx, obligated, None);
        };
        rights.relookup = !last && !meta.tag.is_empty();
        let now = c.now();
        // Strictly after: a request that began in the same millisecond as the failure was
        // recorded cannot be told from one that began once it was answered (the next
        // request of the same client, on a fast path), and that one must not be given
        // the failure's answer: it asks the origin again (at worst one more fetch).
        let what = if meta
            .origin_failed_at_ms
            .is_some_and(|at| at > self.started.as_millis())
        {
            // The fetch this request waited for failed: answer as it was answered.
            c.note(Note::Error(
                "the origin failed for the request this one waited for".into(),
            ));
            Found::Failed {
                servable: !meta.is_failure_marker()
                    && !meta.pass
                    && stale_if_error(&meta, &meta.times, now),
            }
        } else if meta.is_failure_marker() {
            Found::Nothing
        } else if meta.pass {
            // A hit-for-pass marker; with the obligation it expired: ask the origin again.
            c.note(Note::PassReason("hit-for-pass"));
            if obligated {
                Found::Nothing
            } else {
                Found::Marker
            }
        } else if c.banned(&meta) {
            Found::Banned
        } else {
            let draw = match self.early {
                EarlyRefresh::Xfetch { .. } => Draw::from_bits(c.random_bits()),
                _ => Draw::ONE,
            };
            let freshness = decide(Some(&meta.times), now, &self.early, draw);
            let fresh = matches!(freshness, Freshness::Fresh | Freshness::RefreshAhead);
            let ahead = platform_stale
                && fresh
                && c.read_flag(&ahead_flag_key(&meta.tag)).as_deref()
                    == Some(meta.times.stored_at.as_millis().to_string().as_bytes());
            Found::Object {
                freshness,
                soft_purged: platform_stale,
                has_grace: !meta.times.grace.is_zero(),
                ahead,
            }
        };
        let next = lookup::next(what, rights);
        let body = match next {
            Next::Serve { .. } | Next::Revalidate => c.body(&tx)?,
            _ => Vec::new(),
        };
        self.act(c, next, tx, obligated, Some(Hit { meta, body }))
    }

    /// Carries out `next` for `hit` under `tx`.
    fn act<C: CoreCache>(
        &self,
        c: &mut C,
        next: Next,
        tx: C::Tx,
        obligated: bool,
        hit: Option<Hit>,
    ) -> StepResult<C> {
        let served = match (next, hit) {
            (Next::Serve { status, refresh }, Some(hit)) => {
                c.note(Note::Status(status));
                if obligated && !refresh {
                    c.cancel(&tx);
                }
                let after = refresh.then(|| Refresh {
                    tx,
                    meta: hit.meta.clone(),
                    why: if status == CacheStatus::Stale {
                        RefreshCause::Stale
                    } else {
                        RefreshCause::Ahead
                    },
                });
                let out = c.respond(&hit.meta, hit.body, status)?;
                Served { out, after }
            }
            (Next::Relookup { soft }, Some(hit)) => {
                drop(tx);
                if soft {
                    flag_ahead(c, &hit.meta);
                }
                c.purge(&hit.meta.tag, soft);
                return Ok(Step::Purged);
            }
            (Next::Revalidate, Some(hit)) => Served::now(self.revalidate_now(c, tx, &hit)?),
            (Next::NotCached, _) => {
                if obligated {
                    c.cancel(&tx);
                }
                c.note(Note::Status(CacheStatus::Miss));
                Served::now(c.failure(Failure::NotCached))
            }
            (Next::Unavailable, _) => {
                if obligated {
                    c.cancel(&tx);
                }
                return Err(
                    c.unreachable("the origin failed for the request this one waited for".into())
                );
            }
            (Next::Wait, _) => {
                drop(tx);
                return Ok(Step::Wait);
            }
            (Next::Fill, _) => Served::now(self.miss(c, tx)?),
            (Next::Pass { status }, _) | (Next::Serve { status, .. }, None) => {
                drop(tx);
                let out = c.pass()?;
                if status != CacheStatus::Pass {
                    c.note(Note::Status(status));
                }
                Served::now(out)
            }
            (Next::Relookup { .. } | Next::Revalidate, None) => {
                drop(tx);
                Served::now(c.pass()?)
            }
        };
        Ok(Step::Done(Box::new(served)))
    }

    /// Holding the obligation with nothing usable stored: one origin fetch serves every
    /// waiter. When the origin fails (unreachable, or its body breaks) a failure marker
    /// is left so every waiter is answered at once (issue 28 item 8).
    fn miss<C: CoreCache>(&self, c: &mut C, tx: C::Tx) -> Result<C::Out, C::Error> {
        let answer = match c.fetch(None) {
            Ok(a) => a,
            Err(e) => {
                self.record_failure(c, tx, None)?;
                return Err(c.unreachable(e));
            }
        };
        c.note(Note::OriginWait(c.head(&answer).elapsed));
        self.fill(c, tx, answer, None)
    }

    /// Records an origin failure of this request's fetch under the obligation `tx`, so
    /// the requests waiting for it are answered as this one is: the stored copy `stored`
    /// keeps its content and gains the failure time (the platform holds it stale), or,
    /// with nothing stored, a failure marker.
    ///
    /// # Errors
    /// The core cache's failure writing it.
    fn record_failure<C: CoreCache>(
        &self,
        c: &mut C,
        tx: C::Tx,
        stored: Option<&Meta>,
    ) -> Result<(), C::Error> {
        let now = c.now();
        if let Some(meta) = stored {
            let mut m = meta.clone();
            m.origin_failed_at_ms = Some(now.as_millis());
            return c.update(tx, &m);
        }
        let mut m = Meta::failure_marker(self.plan.route, now);
        m.tag = cachet_policy::object::object_tag(&self.plan.cache_key);
        c.insert(tx, &m, &[])
    }

    /// The stored copy for a failed revalidation: within grace or `stale-if-error`
    /// (RFC 5861 §4), after the failure was recorded for the waiters.
    fn stale_or<C: CoreCache>(
        &self,
        c: &mut C,
        tx: C::Tx,
        hit: &Hit,
        reason: String,
    ) -> Result<C::Out, C::Error> {
        let meta = &hit.meta;
        self.record_failure(c, tx, Some(meta))?;
        if stale_if_error(meta, &meta.times, c.now()) {
            c.note(Note::Error(reason));
            c.note(Note::Status(CacheStatus::Stale));
            return c.respond(meta, hit.body.clone(), CacheStatus::Stale);
        }
        Err(c.unreachable(reason))
    }

    /// Past grace, holding the obligation: revalidate before answering (the requests
    /// that find the copy meanwhile wait for this answer).
    fn revalidate_now<C: CoreCache>(
        &self,
        c: &mut C,
        tx: C::Tx,
        hit: &Hit,
    ) -> Result<C::Out, C::Error> {
        let meta = &hit.meta;
        let answer = match c.fetch(Some(meta)) {
            Ok(a) => a,
            Err(e) => return self.stale_or(c, tx, hit, e),
        };
        let head = c.head(&answer);
        c.note(Note::OriginWait(head.elapsed));
        c.note(Note::Status(CacheStatus::Miss));
        match revalidated(c, self.policy, self.plan, meta, &head) {
            Revalidated::Uncacheable { marker, theirs } => {
                // This client gets the stored body with the 304's fields, nobody else does.
                c.insert(tx, &marker, &[])?;
                c.note(Note::Refresh(Revalidation::NowUncacheable));
                c.note(Note::Status(CacheStatus::Pass));
                let mut out = c.respond(&theirs, hit.body.clone(), CacheStatus::Pass)?;
                // Their cookie is theirs: passed on, never stored.
                c.add_cookies(&mut out, &answer);
                Ok(out)
            }
            Revalidated::Freshen(fresh) => {
                c.update(tx, &fresh)?;
                c.note(Note::Refresh(Revalidation::Revalidated));
                c.respond(&fresh, hit.body.clone(), CacheStatus::Miss)
            }
            Revalidated::Keep => {
                // Past grace the stored copy is served only within the origin's
                // stale-if-error (RFC 5861 §4); otherwise the origin's error goes out.
                c.note(Note::Refresh(Revalidation::OriginError));
                self.record_failure(c, tx, Some(meta))?;
                if stale_if_error(meta, &meta.times, c.now()) {
                    c.note(Note::Status(CacheStatus::Stale));
                    return c.respond(meta, hit.body.clone(), CacheStatus::Stale);
                }
                c.note(Note::Status(CacheStatus::Pass));
                Ok(c.unstored(answer))
            }
            Revalidated::Replace => self.fill(c, tx, answer, Some(hit)),
        }
    }

    /// Stores a fill's answer as the engine says ([`store`]) and answers this client:
    /// from the stored object, or with the origin's answer unstored. `replacing`: the
    /// stored copy a revalidation answered with a new object. A body that breaks is an
    /// origin failure (RFC 5861 §4): the stored copy within `stale-if-error`, else `503`.
    fn fill<C: CoreCache>(
        &self,
        c: &mut C,
        tx: C::Tx,
        answer: C::Answer,
        replacing: Option<&Hit>,
    ) -> Result<C::Out, C::Error> {
        match store(c, self.policy, self.plan, tx, answer, replacing.is_some())? {
            Stored::Done(Filled::Stored { meta, body }, _) => {
                c.note(Note::Status(CacheStatus::Miss));
                c.respond(&meta, body, CacheStatus::Miss)
            }
            Stored::Done(Filled::Marker { why, .. } | Filled::Unstored(why), answer) => {
                c.note(Note::PassReason(why.label()));
                c.note(Note::Status(CacheStatus::Pass));
                Ok(c.unstored(answer))
            }
            Stored::BodyBroke(tx, reason) => {
                if let Some(hit) = replacing {
                    return self.stale_or(c, tx, hit, reason);
                }
                self.record_failure(c, tx, None)?;
                Err(c.unreachable(reason))
            }
        }
    }
}

/// Flags `meta`'s copy as refresh-ahead's before its soft purge, until its expiry.
fn flag_ahead<C: CoreCache>(c: &mut C, meta: &Meta) {
    let t = &meta.times;
    let expiry = t.stored_at.saturating_add(t.ttl);
    let left = expiry
        .as_millis()
        .saturating_sub(c.now().as_millis())
        .max(1);
    c.write_flag(
        &ahead_flag_key(&meta.tag),
        t.stored_at.as_millis().to_string().as_bytes(),
        Duration::from_millis(left),
    );
}

/// Whether an origin failure at `now` may be answered with the object `meta`, whose
/// times are `times` (its own, or as a platform found it): within grace or its
/// stale-if-error window (`cachet_refresh::on_origin_error`, RFC 5861 §4). Both adapters
/// decide with this.
pub fn stale_if_error(meta: &Meta, times: &EntryTimes, now: Timestamp) -> bool {
    on_origin_error(
        Some(times),
        now,
        Duration::from_secs(meta.stale_if_error_s),
        RETRY_AFTER,
    ) == ErrorAction::ServeStale
}

/// How a transactional core cache holds an object (Fastly's `insert`/`update` options),
/// decided from its stored [`Meta`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreEntry {
    /// The core cache's TTL: the object's real TTL (zero for a failure marker; at most
    /// its age once a revalidation failed, so the platform keeps it stale).
    pub ttl: Duration,
    /// The core cache's stale-while-revalidate: grace + keep, plus the TTL when the
    /// object's route refreshes early (a soft purge then leaves it usable until its real
    /// expiry and beyond, on platforms where a soft-purged object is only usable within
    /// SWR); none for a hit-for-pass marker; `[collapse].max_wait_ms` for a failure
    /// marker (the requests that waited for the failed fill must still find it).
    pub swr: Duration,
    /// The object's age when written (`now` − `stored_at`, rounded up to the next ms):
    /// the core cache's initial age, so its clock and Cachet's agree on the expiry to the
    /// millisecond (`Found::age` counts from the fill's request, RFC 9111 §4.2.3, not
    /// from the insert; issue 28 item 1).
    pub age: Duration,
    /// Surrogate keys: the object's own (origin's, then the route's), then its per-object
    /// tag (the key a ban's purge and refresh-ahead's soft purge use).
    pub keys: Vec<String>,
}

impl CoreEntry {
    /// The entry for `meta` written at `now` under `policy`'s routes.
    pub fn of(policy: &Policy, meta: &Meta, now: Timestamp) -> Self {
        let early = policy
            .config()
            .routes
            .iter()
            .find(|r| r.name == meta.route)
            .is_some_and(|r| r.early_refresh != cachet_refresh::EarlyRefresh::None);
        let t = &meta.times;
        let swr = match (meta.pass, early) {
            _ if meta.is_failure_marker() => {
                Duration::from_millis(policy.config().collapse.max_wait_ms)
            }
            (true, _) => Duration::ZERO,
            (false, false) => t.grace.saturating_add(t.keep),
            (false, true) => t.grace.saturating_add(t.keep).saturating_add(t.ttl),
        };
        // Rounded up: the platform never holds a copy fresh after Cachet's expiry.
        let age = Duration::from_millis(
            now.as_millis()
                .saturating_sub(t.stored_at.as_millis())
                .saturating_add(1),
        );
        let mut ttl = t.ttl;
        let mut swr = swr;
        if let Some(left) = ttl
            .checked_sub(age)
            .filter(|_| meta.origin_failed_at_ms.is_some() && !meta.is_failure_marker())
        {
            // Its revalidation failed (it was stale, or soft-purged): still stale to the
            // platform, usable until the same end.
            swr = swr.saturating_add(left);
            ttl = age;
        }
        let mut keys = meta.surrogate_keys.clone();
        if !meta.tag.is_empty() {
            keys.push(meta.tag.clone());
        }
        Self {
            ttl,
            swr,
            age,
            keys,
        }
    }
}

/// Sends a fill; on failure the obligation is cancelled (the next request retries) and
/// the origin's unreachability is the error.
fn send_fill<C: CoreCache>(
    c: &mut C,
    tx: &C::Tx,
    stored: Option<&Meta>,
) -> Result<C::Answer, C::Error> {
    c.fetch(stored).map_err(|e| {
        c.cancel(tx);
        c.unreachable(e)
    })
}

/// The engine's verdict on a revalidation answer (`cachet_http::fill::revalidated`).
fn revalidated<C: CoreCache>(
    c: &C,
    policy: &Policy,
    plan: &Plan<'_>,
    meta: &Meta,
    head: &AnswerHead,
) -> Revalidated {
    let answer = Origin {
        status: head.status,
        fields: &head.fields,
        body: &[],
        elapsed: head.elapsed,
    };
    fill::revalidated(policy, plan, &plan.cache_key, meta, answer, c.now())
}

/// What [`store`] did with a fill's answer.
enum Stored<C: CoreCache> {
    /// The engine's verdict, applied, and the answer (with its body when not stored).
    Done(Filled, C::Answer),
    /// The origin's body broke while it was read (reset, short, stalled): an origin
    /// failure; the obligation is handed back untouched.
    BodyBroke(C::Tx, String),
}

/// Applies the engine's verdict on a fill's answer to the core cache: inserts the object
/// or a hit-for-pass marker, or cancels the obligation. Returns the verdict and the answer
/// (with its body when it was not stored). The body is read into memory only when it may
/// be stored and is at most `[edge].max_object_bytes`.
fn store<C: CoreCache>(
    c: &mut C,
    policy: &Policy,
    plan: &Plan<'_>,
    tx: C::Tx,
    mut answer: C::Answer,
    replacing: bool,
) -> Result<Stored<C>, C::Error> {
    let now = c.now();
    let AnswerHead {
        status,
        fields,
        elapsed,
    } = c.head(&answer);
    let key = &plan.cache_key;
    let limit = policy.config().edge.max_object_bytes;
    let verdict =
        if let Some(v) = fill::unstorable(policy, plan, key, status, &fields, now, replacing) {
            v
        } else {
            match c.read_bounded(&mut answer, limit) {
                Err(broke) => return Ok(Stored::BodyBroke(tx, broke)),
                Ok(Some(body)) => {
                    let origin = Origin {
                        status,
                        fields: &fields,
                        body: &body,
                        elapsed,
                    };
                    let v = fill::filled(policy, plan, key, origin, now, replacing)?;
                    c.restore_body(&mut answer, body);
                    v
                }
                Ok(None) => fill::oversized(policy, plan, key, status, &fields, now, replacing),
            }
        };
    match &verdict {
        Filled::Stored { meta, body } => c.insert(tx, meta, body)?,
        Filled::Marker { meta, .. } => c.insert(tx, meta, &[])?,
        Filled::Unstored(_) => c.cancel(&tx),
    }
    Ok(Stored::Done(verdict, answer))
}

/// Runs a [`Refresh`] after the client's answer was sent: a conditional request when the
/// object has validators; a 304 freshens, a storable answer replaces, an answer that may
/// no longer be stored leaves a hit-for-pass marker, an error or 5xx keeps the stored copy
/// (obligation cancelled, the next request retries). Returns what it did, for the access
/// log ([`Refreshed`]; the adapter records [`Refreshed::KeptStored`] when this fails).
///
/// # Errors
/// The platform's (origin unreachable: the stored copy is kept).
pub fn refresh<C: CoreCache>(
    c: &mut C,
    policy: &Policy,
    plan: &Plan<'_>,
    job: Refresh<C::Tx>,
) -> Result<Refreshed, C::Error> {
    let Refresh { tx, meta, .. } = job;
    let answer = send_fill(c, &tx, Some(&meta))?;
    let head = c.head(&answer);
    match revalidated(c, policy, plan, &meta, &head) {
        Revalidated::Uncacheable { marker, .. } => {
            c.insert(tx, &marker, &[])?;
            Ok(Refreshed::NowUncacheable)
        }
        Revalidated::Freshen(fresh) => {
            c.update(tx, &fresh)?;
            Ok(Refreshed::Revalidated)
        }
        // Never a 304 (`fill::revalidated` keeps the object only for other statuses).
        Revalidated::Keep => {
            c.cancel(&tx);
            Ok(Refreshed::OriginError)
        }
        Revalidated::Replace => Ok(match store(c, policy, plan, tx, answer, true)? {
            Stored::Done(Filled::Stored { .. }, _) => Refreshed::Replaced,
            Stored::Done(..) => Refreshed::NowUncacheable,
            Stored::BodyBroke(tx, _) => {
                c.cancel(&tx);
                Refreshed::OriginError
            }
        }),
    }
}
