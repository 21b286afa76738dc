//! One cacheable request's flow as a sans-IO state machine: the host feeds [`Event`]s,
//! the [`Exchange`] answers with the one [`Action`] to carry out next, until
//! [`Action::Done`].
//!
//! Every decision of the flow is here or in the modules it calls; a host only moves bytes
//! (issue 32; the shape of pingora-cache's `HttpCache` phases with I/O inverted, as h11 or
//! quinn-proto do). The machine reads no clock (each [`Exchange::handle`] is given `now`),
//! draws no randomness (XFetch's draws come from the seed given to [`Exchange::new`]) and
//! makes no host call. Rules it applies:
//!
//! * what a lookup found and what to do with it: [`crate::lookup::next`] with the
//!   object's own times (`cachet_refresh::decide`), the host's ban verdict
//!   ([`Action::CheckBan`]), hit-for-pass and failure markers, the refresh-ahead flag;
//! * a ban or refresh-ahead: the object is purged (soft for refresh-ahead) by its own
//!   surrogate key and looked up again, at most [`MAX_LOOKUPS`] lookups, so the refetch is
//!   collapsed too;
//! * a request that finds another holding the key's fill or revalidation waits for it
//!   ([`Action::Park`], [`FIRST_PAUSE`] doubling to [`MAX_PAUSE`]) up to
//!   `[collapse].max_wait_ms`, then is passed (`collapse-timeout`);
//! * what an origin answer becomes: [`crate::fill::unstorable`] / [`crate::fill::filled`]
//!   / [`crate::fill::oversized`] for a fill, [`crate::fill::revalidated`] for a
//!   revalidation (RFC 9111 §4.3.4);
//! * an origin failure: recorded for the requests that waited (a failure marker, or the
//!   stored copy's `origin_failed_at_ms`), then the stored copy within grace or its
//!   `stale-if-error` window ([`stale_if_error`], RFC 5861 §4), else a `503`;
//! * a background refresh ([`Exchange::refresh`]) after a stale or refresh-ahead answer:
//!   a 304 freshens, a storable answer replaces, a now-private one leaves a marker, an
//!   error keeps the stored copy.
//!
//! The fill right is the host's lookup handle `T` (Fastly: the core cache transaction,
//! whose obligation is released when it is dropped). The machine holds it from the lookup
//! until a [`Write`] hands it back; dropping an [`Exchange`] drops it, which releases the
//! right. States, events and actions: `docs/design.md` ("The exchange").

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
use crate::{CacheStatus, Client};

#[cfg(test)]
mod tests;

/// Lookups per request: the first, and one after a ban purge or a refresh-ahead soft purge.
pub const MAX_LOOKUPS: usize = 2;

/// `Retry-After` of a `503` sent when the origin is unreachable and nothing may be served
/// stale (both adapters).
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

/// The first pause of a request waiting for another's revalidation; each next one
/// doubles, up to [`MAX_PAUSE`].
pub const FIRST_PAUSE: Duration = Duration::from_millis(5);

/// The longest pause between two lookups of a waiting request (its answer comes at most
/// this long after the revalidation it waits for).
pub const MAX_PAUSE: Duration = Duration::from_millis(50);

/// Header lines: names and byte values, in order.
pub type Fields = Vec<(String, Vec<u8>)>;

/// An origin answer's status line and fields, as the engine reads them.
#[derive(Debug, Clone)]
pub struct AnswerHead {
    /// Its status.
    pub status: u16,
    /// Every header line, in order (bytes).
    pub fields: Fields,
    /// Time to its headers.
    pub elapsed: Duration,
}

impl AnswerHead {
    /// The head as seen at `now` when it arrived at `at`: `elapsed` grows by the time in
    /// between (the body's read), so `now - elapsed` is still when the fetch was sent.
    /// A stored object is stamped with that time (RFC 9111 §4.2.3 `request_time`), so a
    /// ban or purge added while the body was still arriving covers what it brings back.
    fn since(mut self, at: Timestamp, now: Timestamp) -> Self {
        let ms = now.as_millis().saturating_sub(at.as_millis());
        self.elapsed += Duration::from_millis(ms);
        self
    }
}

/// What the flow tells the access log so far ([`Exchange::notes`]); the host records, it
/// decides nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Notes {
    /// The request's cache status (the last one decided).
    pub status: Option<CacheStatus>,
    /// Why the request was passed or its answer not stored.
    pub pass_reason: Option<&'static str>,
    /// What a foreground revalidation did (the log's `refresh`).
    pub refresh: Option<Revalidation>,
    /// Something failed and the flow went on (a stale copy was served instead).
    pub error: Option<String>,
    /// Foreground origin waits, summed.
    pub origin_wait: Option<Duration>,
}

/// The found object as the machine reads it: its metadata (the host keeps the rest).
/// Fastly's is the decoded `Box<Meta>`; Envoy's the stored object itself (no copy on a
/// hit).
pub trait StoredMeta {
    /// Its metadata.
    fn meta(&self) -> &Meta;
}

impl StoredMeta for Box<Meta> {
    fn meta(&self) -> &Meta {
        self
    }
}

impl<S: StoredMeta> StoredMeta for std::rc::Rc<S> {
    fn meta(&self) -> &Meta {
        (**self).meta()
    }
}

/// The dynamic module's objects are shared across Envoy's worker threads.
impl<S: StoredMeta> StoredMeta for std::sync::Arc<S> {
    fn meta(&self) -> &Meta {
        (**self).meta()
    }
}

/// The request's right to fill or revalidate the key, as its lookup left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Right {
    /// It holds the right (Fastly: the core cache's obligation came with the lookup).
    Held,
    /// Another request holds it (Fastly: no obligation).
    Elsewhere,
    /// Not known yet: the machine asks with [`Action::Claim`] when it needs the right
    /// (Envoy: a lock in shared data, elected after the lookup).
    Ask,
}

/// What a claim of the fill right ([`Action::Claim`]) got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The right: fill, revalidate or refresh.
    Leader,
    /// No right could be settled (the lock table kept changing): fetch without it,
    /// uncollapsed; no background refresh.
    Uncollapsed,
    /// Another request holds it: wait for its answer (or serve without refreshing).
    Follower,
}

/// What the host tells the machine.
#[derive(Debug)]
pub enum Event<T, S, B> {
    /// Begin: a client exchange looks up, a background refresh fetches.
    Start,
    /// What a lookup ([`Action::Lookup`]) found.
    Looked {
        /// The lookup's handle (the host reads the found body through it; holds the fill
        /// right when `right` is [`Right::Held`]).
        handle: T,
        /// The request's fill right.
        right: Right,
        /// The stored object (`None`: nothing usable stored, or metadata of another
        /// layout) and whether the platform holds it as stale (soft-purged).
        found: Option<(S, bool)>,
        /// When the origin last failed a fetch of this key, if the host keeps that apart
        /// from the object (Envoy's failure list; Fastly's is the object's own
        /// `origin_failed_at_ms`).
        failed_at: Option<Timestamp>,
    },
    /// The platform's wait for another request's fill ran out before the lookup answered.
    TimedOut,
    /// The request's variant cannot be keyed (a varying field's value over the bound).
    Unkeyable,
    /// The ban verdict on [`Exchange::found`] ([`Action::CheckBan`]): covered or not.
    Ban(bool),
    /// The refresh-ahead flag's value ([`Action::ReadFlag`]; `None`: absent).
    Flag(Option<Vec<u8>>),
    /// What the claim got ([`Action::Claim`]), with the handle back (holding the right
    /// for [`Claim::Leader`]).
    Claimed(T, Claim),
    /// The found object's stored body ([`Action::ReadStored`]).
    Stored(B),
    /// The pause asked for ([`Action::Park`]) is over, or the request it waits for
    /// ended.
    Woken,
    /// The host could not park the request (its wait queue is full).
    Refused,
    /// The origin answered the fetch ([`Action::Fetch`]): its head; the host holds the
    /// body.
    Head(AnswerHead),
    /// The fetch failed: unreachable, refused, timed out.
    OriginFailed(String),
    /// The fetch's fields hold a value the host cannot carry exactly: nothing was sent.
    CannotCarry,
    /// The origin's whole body, at most the limit asked for ([`Action::ReadBody`]).
    Body(Vec<u8>),
    /// The origin's body is longer than the limit (the host keeps it whole, streaming).
    Oversize,
    /// The origin's body broke while it was read (reset, shorter than declared, stalled).
    BodyBroke(String),
}

impl<T, S, B> Event<T, S, B> {
    /// The event's name (a host bug's message).
    pub const fn name(&self) -> &'static str {
        match self {
            Self::Start => "Start",
            Self::Looked { .. } => "Looked",
            Self::TimedOut => "TimedOut",
            Self::Unkeyable => "Unkeyable",
            Self::Ban(_) => "Ban",
            Self::Flag(_) => "Flag",
            Self::Claimed(..) => "Claimed",
            Self::Stored(_) => "Stored",
            Self::Woken => "Woken",
            Self::Refused => "Refused",
            Self::Head(_) => "Head",
            Self::OriginFailed(_) => "OriginFailed",
            Self::CannotCarry => "CannotCarry",
            Self::Body(_) => "Body",
            Self::Oversize => "Oversize",
            Self::BodyBroke(_) => "BodyBroke",
        }
    }
}

/// What the host does next.
#[derive(Debug)]
pub enum Action<T, S, B> {
    /// Look up the request's key (its variant chosen by the request's fields), waiting at
    /// most `wait` for another request's fill; first purge `purge`'s tag when given
    /// (after dropping the previous handle). Answer with [`Event::Looked`],
    /// [`Event::TimedOut`] or [`Event::Unkeyable`].
    Lookup {
        /// The longest wait in the lookup.
        wait: Duration,
        /// A purge to carry out before the lookup.
        purge: Option<Purge>,
    },
    /// Check [`Exchange::found`] against the ban store: [`Event::Ban`].
    CheckBan,
    /// Read the flag entry `key`: [`Event::Flag`].
    ReadFlag {
        /// Its key (outside the request's key).
        key: String,
    },
    /// Claim the fill right for the key: [`Event::Claimed`] with this handle.
    Claim(T),
    /// Read the found object's stored body through [`Exchange::handle_ref`]:
    /// [`Event::Stored`].
    ReadStored,
    /// Wait at most this long, then [`Event::Woken`] (or [`Event::Refused`]).
    Park(Duration),
    /// Send the fill's origin request with exactly these fields (`GET`, the client's URL):
    /// [`Event::Head`], [`Event::OriginFailed`] or [`Event::CannotCarry`].
    Fetch {
        /// Its header lines (`cachet_http::fill::request_fields`).
        fields: Fields,
    },
    /// Read the origin's body when it is at most `limit` bytes: [`Event::Body`],
    /// [`Event::Oversize`] or [`Event::BodyBroke`].
    ReadBody {
        /// `[edge].max_object_bytes`.
        limit: u64,
    },
    /// The end: carry out `write` (if any), then `respond`; run `refresh` after the answer
    /// is sent.
    #[allow(
        clippy::large_enum_variant,
        reason = "the last action of every exchange, hits included: moved, not allocated"
    )]
    Done(Done<T, S, B>),
}

/// The last action of an exchange.
#[derive(Debug)]
pub struct Done<T, S, B> {
    /// A write under the fill right, before the answer.
    pub write: Option<Write<T>>,
    /// The answer.
    pub respond: Respond<S, B>,
    /// A background refresh to run after the answer ([`Exchange::refresh`]).
    pub refresh: Option<Background<T, S>>,
}

/// A purge before a lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Purge {
    /// The surrogate key (the object's own tag).
    pub tag: String,
    /// Soft purge (refresh-ahead) rather than hard (ban).
    pub soft: bool,
    /// Before a soft purge, write this flag: key, value, time to live (best effort).
    pub flag: Option<(String, Vec<u8>, Duration)>,
}

/// A write under the fill right; the handle goes back to the host with it.
#[derive(Debug)]
pub struct Write<T> {
    /// The lookup's handle.
    pub handle: T,
    /// What to write.
    pub op: WriteOp,
}

/// What a [`Write`] does.
#[derive(Debug)]
pub enum WriteOp {
    /// Insert `meta` and `body` (empty for a marker) as `entry` says.
    Insert {
        /// The metadata.
        meta: Box<Meta>,
        /// The stored body.
        body: Vec<u8>,
        /// How the core cache holds it.
        entry: CoreEntry,
    },
    /// Replace the found object's metadata (same body: the handle's found object).
    Update {
        /// The new metadata.
        meta: Box<Meta>,
        /// How the core cache holds it.
        entry: CoreEntry,
    },
    /// The origin failed this fetch: recorded for the requests waiting for it (as the
    /// metadata says: the found object with `origin_failed_at_ms`, or a failure marker;
    /// Envoy keeps a failure list instead).
    Failure {
        /// The found object with the failure's time, or a failure marker.
        meta: Box<Meta>,
        /// Whether `meta` is the found object (update) rather than a marker (insert).
        update: bool,
        /// How the core cache holds it.
        entry: CoreEntry,
    },
    /// Give up the fill right, if held (the next request retries).
    Cancel,
}

/// Where an answer's metadata comes from.
#[derive(Debug)]
pub enum MetaFrom {
    /// The found object's.
    Found,
    /// What the write carried.
    Written,
    /// This (a per-user 304's fields over the stored body).
    Own(Box<Meta>),
}

/// The object an answer is built from ([`MetaFrom::pick`]).
#[derive(Debug)]
pub enum Source<S> {
    /// A stored object as it is.
    Stored(S),
    /// A stored object's body under this metadata (a per-user 304's fields).
    Own(Box<Meta>, S),
}

impl MetaFrom {
    /// The object an answer is built from: the found object (`Found`), the written one
    /// (`Written`, and whenever nothing was found), or the found body under the answer's
    /// own metadata (`Own`); `None` when there is no object at all (a host bug: answer
    /// `503`).
    pub fn pick<S>(self, found: Option<S>, written: Option<S>) -> Option<Source<S>> {
        match (self, found) {
            (Self::Found, Some(o)) => Some(Source::Stored(o)),
            (Self::Own(meta), Some(o)) => Some(Source::Own(meta, o)),
            (_, o) => written.or(o).map(Source::Stored),
        }
    }
}

/// The client's answer.
#[derive(Debug)]
pub enum Respond<S, B> {
    /// From a stored object (`cachet_http::deliver`), labelled `status`.
    Object {
        /// `X-Cache`.
        status: CacheStatus,
        /// The found object and its stored body; `None`: the object the write inserted.
        found: Option<(S, B)>,
        /// Where its metadata comes from.
        meta: MetaFrom,
        /// `Set-Cookie` lines of this client's own 304, added to the answer.
        cookies: Fields,
    },
    /// The origin's answer the host holds, unstored (`cachet_http::unstored`), labelled
    /// `status`, with `body` given back when the machine read it.
    Unstored {
        /// `X-Cache`.
        status: CacheStatus,
        /// The body read ([`Event::Body`]), to send as it was.
        body: Option<Vec<u8>>,
    },
    /// Pass the client's request to the origin, nothing stored (`PASS`).
    Pass,
    /// `504`: nothing servable and the client asked for `only-if-cached`.
    NotCached,
    /// `503` with `Retry-After` [`RETRY_AFTER`]: the origin failed and nothing may be
    /// served.
    Unavailable(String),
    /// A body could not be transformed for storage (gzip).
    Broken(std::io::Error),
    /// A background refresh's outcome (no client answer).
    Refreshed(Refreshed),
}

/// A refresh to run after the client's answer is sent, holding the fill right.
#[derive(Debug)]
pub struct Background<T, S> {
    /// The handle holding the fill right.
    pub handle: T,
    /// The stored object.
    pub found: S,
    /// Why it runs: stale within grace, or refresh-ahead.
    pub cause: RefreshCause,
}

/// A lookup's result under examination.
struct Held<T, S> {
    handle: T,
    right: Right,
    found: Option<(S, bool)>,
}

impl<T, S: StoredMeta> Held<T, S> {
    fn meta(&self) -> Option<&Meta> {
        self.found.as_ref().map(|(s, _)| s.meta())
    }

    fn tagged(&self) -> bool {
        self.meta().is_some_and(|m| !m.tag.is_empty())
    }
}

/// Why an origin fetch runs.
enum Why<S, B> {
    /// A miss.
    Fill,
    /// Past grace, in the foreground: the stored copy and its body.
    Revalidate(S, B),
    /// In the background, after the answer.
    Refresh(S),
}

impl<S: StoredMeta, B> Why<S, B> {
    fn base(&self) -> Option<&Meta> {
        match self {
            Self::Fill => None,
            Self::Revalidate(s, _) | Self::Refresh(s) => Some(s.meta()),
        }
    }
}

/// An origin fetch in flight.
struct Fetch<T, S, B> {
    handle: T,
    why: Why<S, B>,
}

enum State<T, S, B> {
    Start,
    LookingUp,
    Checking(Held<T, S>),
    Flagging(Held<T, S>, Freshness),
    Claiming(Option<(S, bool)>, Next),
    Reading(Held<T, S>, Next),
    Parked,
    Fetching(Fetch<T, S, B>),
    Receiving(Fetch<T, S, B>, AnswerHead, Timestamp),
    Done,
}

/// What an exchange works from, given with each [`Exchange::handle`]: the policy, the
/// request's plan (a [`cachet_policy::Decision::Cache`]), its client fields and header
/// lines (what a fill may carry). A host that keeps an exchange across callbacks gives the
/// same request's every time.
#[derive(Clone, Copy)]
pub struct Cx<'c> {
    /// The policy in force.
    pub policy: &'c Policy,
    /// The request's plan.
    pub plan: &'c Plan<'c>,
    /// The client fields answers depend on.
    pub client: &'c Client,
    /// The client request's header lines.
    pub request: &'c [(String, Vec<u8>)],
}

impl<'c> Cx<'c> {
    /// The context of a request planned as `plan` under `policy`, from `client` and its
    /// header lines `request`.
    pub fn new(
        policy: &'c Policy,
        plan: &'c Plan<'c>,
        client: &'c Client,
        request: &'c [(String, Vec<u8>)],
    ) -> Self {
        Self {
            policy,
            plan,
            client,
            request,
        }
    }
}

/// One request's flow (module docs). `T` is the host's lookup handle, `S` a found object
/// ([`StoredMeta`]), `B` a stored body. It owns only the flow's state: a host may keep it
/// across callbacks.
pub struct Exchange<T, S, B> {
    early: EarlyRefresh,
    started: Timestamp,
    deadline: Timestamp,
    lookups: usize,
    pause: Duration,
    /// It has parked behind another request's fetch.
    waited: bool,
    /// When the copy it found as it parked was stored (`None`: nothing): a newer one is
    /// the answer the fetch it waited for stored.
    seen: Option<Timestamp>,
    /// The host's lookup applies bans and soft purges itself ([`Exchange::lookup_applies_bans`]).
    lookup_checks: bool,
    /// The host's found object carries its body ([`Exchange::found_carries_body`]).
    found_body: bool,
    seed: u64,
    notes: Notes,
    refresh: Option<Background<T, S>>,
    state: State<T, S, B>,
}

/// An exchange at work on one event, with its context.
struct Run<'r, 'c, T, S, B> {
    ex: &'r mut Exchange<T, S, B>,
    policy: &'c Policy,
    plan: &'c Plan<'c>,
    client: &'c Client,
    request: &'c [(String, Vec<u8>)],
}

type Act<T, S, B> = Action<T, S, B>;

impl<T, S: StoredMeta + Clone, B: Default> Exchange<T, S, B> {
    /// The flow of the request `cx` describes, begun at `now`; `seed` feeds XFetch's
    /// draws. Start it with [`Event::Start`].
    pub fn new(cx: Cx<'_>, now: Timestamp, seed: u64) -> Self {
        let max_wait = Duration::from_millis(cx.policy.config().collapse.max_wait_ms);
        Self {
            early: cx.policy.early_refresh(cx.plan),
            started: now,
            deadline: now.saturating_add(max_wait),
            lookups: 0,
            pause: FIRST_PAUSE,
            waited: false,
            seen: None,
            lookup_checks: false,
            found_body: false,
            seed,
            notes: Notes::default(),
            refresh: None,
            state: State::Start,
        }
    }

    /// A background refresh of `job` (handed out by a client exchange's [`Done`]), run
    /// after that answer: a conditional fetch when the object has validators. Start it
    /// with [`Event::Start`]; it ends with [`Respond::Refreshed`].
    pub fn refresh(cx: Cx<'_>, job: Background<T, S>, now: Timestamp) -> Self {
        let mut ex = Self::new(cx, now, 0);
        ex.refresh = Some(job);
        ex
    }

    /// The host's lookup applies bans and soft purges itself (Envoy's `Cache::find` drops
    /// banned copies and reports soft-purged ones as platform-stale): the machine never
    /// asks [`Action::CheckBan`], which saves a step on every hit.
    #[must_use]
    pub fn lookup_applies_bans(mut self) -> Self {
        self.lookup_checks = true;
        self
    }

    /// The host's found object carries its stored body (Envoy's stored object): the
    /// machine never asks [`Action::ReadStored`]; `B::default()` stands for the body.
    #[must_use]
    pub fn found_carries_body(mut self) -> Self {
        self.found_body = true;
        self
    }

    /// What the flow tells the access log so far.
    pub fn notes(&self) -> &Notes {
        &self.notes
    }

    /// The found object [`Action::CheckBan`] asks about.
    pub fn found(&self) -> Option<&Meta> {
        match &self.state {
            State::Checking(c) | State::Flagging(c, _) | State::Reading(c, _) => c.meta(),
            _ => None,
        }
    }

    /// The lookup handle [`Action::ReadStored`] reads through.
    pub fn handle_ref(&self) -> Option<&T> {
        match &self.state {
            State::Checking(c) | State::Flagging(c, _) | State::Reading(c, _) => Some(&c.handle),
            State::Fetching(f) | State::Receiving(f, ..) => Some(&f.handle),
            _ => None,
        }
    }

    /// Whether the exchange has parked behind another request's fetch: a host that keeps
    /// failures apart from objects reads them for [`Event::Looked`] only then.
    pub fn waited(&self) -> bool {
        self.waited
    }

    /// Whether the exchange is parked ([`Action::Park`]) and waits for [`Event::Woken`].
    pub fn parked(&self) -> bool {
        matches!(self.state, State::Parked)
    }

    /// Takes `event` at `now`; returns what to do next. An event the machine did not ask
    /// for (a host bug) ends the exchange with a `503`.
    pub fn handle(&mut self, cx: Cx<'_>, now: Timestamp, event: Event<T, S, B>) -> Act<T, S, B> {
        Run {
            ex: self,
            policy: cx.policy,
            plan: cx.plan,
            client: cx.client,
            request: cx.request,
        }
        .handle(now, event)
    }
}

impl<T, S: StoredMeta + Clone, B: Default> Run<'_, '_, T, S, B> {
    fn handle(&mut self, now: Timestamp, event: Event<T, S, B>) -> Act<T, S, B> {
        match (std::mem::replace(&mut self.ex.state, State::Done), event) {
            (State::Start, Event::Start) => match self.ex.refresh.take() {
                Some(job) => self.fetch(job.handle, Why::Refresh(job.found)),
                None => self.lookup(now, None),
            },
            (State::Parked, Event::Woken) => self.lookup(now, None),
            (State::Parked, Event::Refused) | (State::LookingUp, Event::Unkeyable) => {
                done(None, Respond::Pass)
            }
            (State::LookingUp, Event::TimedOut) => self.timed_out(None),
            (
                State::LookingUp,
                Event::Looked {
                    handle,
                    right,
                    found,
                    failed_at,
                },
            ) => self.looked(
                now,
                Held {
                    handle,
                    right,
                    found,
                },
                failed_at,
            ),
            (State::Checking(c), Event::Ban(banned)) => self.checked(now, c, banned),
            (State::Flagging(c, freshness), Event::Flag(value)) => {
                let stored_at = c.meta().map(|m| m.times.stored_at.as_millis().to_string());
                let ahead =
                    value.is_some() && value.as_deref() == stored_at.as_deref().map(str::as_bytes);
                self.object(now, c, freshness, ahead)
            }
            (State::Claiming(found, next), Event::Claimed(handle, claim)) => {
                let c = Held {
                    handle,
                    right: Right::Ask,
                    found,
                };
                self.claimed(now, c, next, claim)
            }
            (State::Reading(c, next), Event::Stored(body)) => self.act(now, next, c, Some(body)),
            (State::Fetching(f), Event::Head(head)) => self.answered(now, f, head),
            (State::Fetching(f), Event::OriginFailed(reason)) => {
                self.failed(now, f, reason, Refreshed::KeptStored)
            }
            (State::Fetching(f), Event::CannotCarry) => {
                if let Why::Refresh(_) = f.why {
                    return done(
                        Some(cancel(f.handle)),
                        Respond::Refreshed(Refreshed::KeptStored),
                    );
                }
                done(Some(cancel(f.handle)), Respond::Pass)
            }
            (State::Receiving(f, head, at), Event::Body(body)) => {
                self.received(now, f, &head.since(at, now), Some(body))
            }
            (State::Receiving(f, head, at), Event::Oversize) => {
                self.received(now, f, &head.since(at, now), None)
            }
            (State::Receiving(f, ..), Event::BodyBroke(reason)) => {
                self.failed(now, f, reason, Refreshed::OriginError)
            }
            (_, event) => done(
                None,
                Respond::Unavailable(format!("the exchange did not ask for {}", event.name())),
            ),
        }
    }

    /// The next lookup (after `purge`), or a pass once [`MAX_LOOKUPS`] were spent.
    fn lookup(&mut self, now: Timestamp, purge: Option<Purge>) -> Act<T, S, B> {
        if self.ex.lookups >= MAX_LOOKUPS {
            return done(None, Respond::Pass);
        }
        self.ex.lookups += 1;
        self.ex.state = State::LookingUp;
        Action::Lookup {
            wait: self.left(now),
            purge,
        }
    }

    fn left(&self, now: Timestamp) -> Duration {
        Duration::from_millis(self.ex.deadline.as_millis().saturating_sub(now.as_millis()))
    }

    /// Past the wait for another request's fill: pass (`collapse-timeout`).
    fn timed_out(&mut self, handle: Option<T>) -> Act<T, S, B> {
        self.ex.notes.pass_reason = Some("collapse-timeout");
        done(handle.map(cancel), Respond::Pass)
    }

    /// What the platform lets this request do; with [`Right::Ask`] as if it held the right
    /// (the claim comes after, only when the step needs it).
    fn rights(&self, c: &Held<T, S>) -> Rights {
        Rights {
            fill: c.right != Right::Elsewhere,
            relookup: self.ex.lookups < MAX_LOOKUPS && c.tagged() && c.right != Right::Ask,
            only_if_cached: self.client.only_if_cached,
        }
    }

    /// Classifies a lookup's result as far as no host data is needed.
    fn looked(
        &mut self,
        now: Timestamp,
        c: Held<T, S>,
        failed_at: Option<Timestamp>,
    ) -> Act<T, S, B> {
        let started = self.ex.started.as_millis();
        // Strictly after for a failure recorded on the object: a request that began in
        // the same millisecond as the failure was recorded cannot be told from one that
        // began once it was answered (the next request of the same client, on a fast
        // path), and that one must not be given the failure's answer: it asks the origin
        // again (at worst one more fetch). A failure the host keeps apart (`failed_at`)
        // counts from the request's start included once the request has waited: it was
        // parked behind that very fetch.
        let failed = c
            .meta()
            .and_then(|m| m.origin_failed_at_ms)
            .is_some_and(|at| at > started)
            || (self.ex.waited && failed_at.is_some_and(|t| t.as_millis() >= started));
        let what = match c.meta() {
            _ if failed => {
                // The fetch this request waited for failed: answer as it was answered.
                self.ex.notes.error =
                    Some("the origin failed for the request this one waited for".into());
                Found::Failed {
                    servable: c.meta().is_some_and(|m| {
                        !m.is_failure_marker() && !m.pass && stale_if_error(m, &m.times, now)
                    }),
                }
            }
            None => Found::Nothing,
            Some(m) if m.is_failure_marker() => Found::Nothing,
            Some(m) if m.pass => {
                // A hit-for-pass marker; with the fill right it expired: ask the origin
                // again.
                self.ex.notes.pass_reason = Some("hit-for-pass");
                if c.right == Right::Held {
                    Found::Nothing
                } else {
                    Found::Marker
                }
            }
            Some(_) if self.ex.lookup_checks => return self.checked(now, c, false),
            Some(_) => {
                self.ex.state = State::Checking(c);
                return Action::CheckBan;
            }
        };
        let next = lookup::next(what, self.rights(&c));
        self.decided(now, next, c)
    }

    /// After the ban check: the object's freshness by its own times, and the flag when
    /// the platform holds a copy our clock says fresh as stale.
    fn checked(&mut self, now: Timestamp, c: Held<T, S>, banned: bool) -> Act<T, S, B> {
        if banned {
            let next = lookup::next(Found::Banned, self.rights(&c));
            return self.decided(now, next, c);
        }
        let draw = match self.ex.early {
            EarlyRefresh::Xfetch { .. } => Draw::from_bits(self.draw_bits()),
            _ => Draw::ONE,
        };
        let Some((s, platform_stale)) = &c.found else {
            return self.decided(now, Next::Fill, c);
        };
        let m = s.meta();
        let freshness = decide(Some(&m.times), now, &self.ex.early, draw);
        let fresh = matches!(freshness, Freshness::Fresh | Freshness::RefreshAhead);
        if self.ex.waited && !fresh && !*platform_stale && self.ex.seen != Some(m.times.stored_at) {
            // Stored by the fetch this request waited for: its answer, even when its TTL
            // ran out during the fetch (an object is dated from its fill's request, RFC
            // 9111 §4.2.3, so a TTL shorter than the fetch is over on arrival).
            let next = Next::Serve {
                status: CacheStatus::Miss,
                refresh: false,
            };
            return self.decided(now, next, c);
        }
        if freshness == Freshness::Miss {
            // Past its keep: nothing usable (the copy still marks what this request saw).
            let next = lookup::next(Found::Nothing, self.rights(&c));
            return self.decided(now, next, c);
        }
        if *platform_stale && fresh {
            let key = ahead_flag_key(&m.tag);
            self.ex.state = State::Flagging(c, freshness);
            return Action::ReadFlag { key };
        }
        self.object(now, c, freshness, false)
    }

    /// 64 bits from the seed (SplitMix64), one draw per lookup.
    fn draw_bits(&mut self) -> u64 {
        self.ex.seed = self.ex.seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.ex.seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn object(
        &mut self,
        now: Timestamp,
        c: Held<T, S>,
        freshness: Freshness,
        ahead: bool,
    ) -> Act<T, S, B> {
        let what = Found::Object {
            freshness,
            soft_purged: c.found.as_ref().is_some_and(|(_, stale)| *stale),
            has_grace: c.meta().is_some_and(|m| !m.times.grace.is_zero()),
            ahead,
        };
        let next = lookup::next(what, self.rights(&c));
        self.decided(now, next, c)
    }

    /// `next` is decided: claim the right first when it needs one and the lookup did not
    /// settle it ([`Right::Ask`]); read the stored body when it is served or revalidated.
    fn decided(&mut self, now: Timestamp, next: Next, c: Held<T, S>) -> Act<T, S, B> {
        let needs_right = matches!(
            next,
            Next::Fill | Next::Revalidate | Next::Serve { refresh: true, .. }
        );
        if needs_right && c.right == Right::Ask {
            let Held { handle, found, .. } = c;
            self.ex.state = State::Claiming(found, next);
            return Action::Claim(handle);
        }
        if matches!(next, Next::Serve { .. } | Next::Revalidate) {
            if self.ex.found_body {
                return self.act(now, next, c, Some(B::default()));
            }
            self.ex.state = State::Reading(c, next);
            return Action::ReadStored;
        }
        self.act(now, next, c, None)
    }

    /// The claim's outcome: the step as decided with the right, or the step of a request
    /// without it.
    fn claimed(
        &mut self,
        now: Timestamp,
        mut c: Held<T, S>,
        next: Next,
        claim: Claim,
    ) -> Act<T, S, B> {
        let next = match (claim, next) {
            (Claim::Leader, next) => {
                c.right = Right::Held;
                next
            }
            (Claim::Uncollapsed, Next::Serve { status, .. })
            | (Claim::Follower, Next::Serve { status, .. }) => {
                c.right = Right::Elsewhere;
                Next::Serve {
                    status,
                    refresh: false,
                }
            }
            (Claim::Uncollapsed, next) => {
                // Fetch without the right: the writes go ahead, nothing is collapsed.
                c.right = Right::Held;
                next
            }
            (Claim::Follower, _) => {
                c.right = Right::Elsewhere;
                Next::Wait
            }
        };
        self.decided(now, next, c)
    }

    fn not_cached(&mut self, c: Held<T, S>) -> Act<T, S, B> {
        self.ex.notes.status = Some(CacheStatus::Miss);
        done(Self::give_back(c.handle, c.right), Respond::NotCached)
    }

    /// The handle's fill right given back (a cancel) when it is held.
    fn give_back(handle: T, right: Right) -> Option<Write<T>> {
        (right == Right::Held).then(|| cancel(handle))
    }

    /// Another request holds the key: pause and look up again, or pass past the deadline.
    fn wait(&mut self, now: Timestamp, handle: T) -> Act<T, S, B> {
        drop(handle);
        let left = self.left(now);
        if left.is_zero() {
            return self.timed_out(None);
        }
        let pause = self.ex.pause.min(left);
        self.ex.pause = (self.ex.pause * 2).min(MAX_PAUSE);
        // A pause is not a purge: the lookup after it does not count against MAX_LOOKUPS.
        self.ex.lookups = self.ex.lookups.saturating_sub(1);
        self.ex.waited = true;
        self.ex.state = State::Parked;
        Action::Park(pause)
    }

    /// Carries out `next` for the lookup's result `c` (with its stored body when read).
    fn act(&mut self, now: Timestamp, next: Next, c: Held<T, S>, body: Option<B>) -> Act<T, S, B> {
        let Held {
            handle,
            right,
            found,
        } = c;
        match (next, found, body) {
            (Next::Serve { status, refresh }, Some((s, _)), Some(body)) => {
                self.ex.notes.status = Some(status);
                let (write, refresh) = if refresh && right == Right::Held {
                    let cause = if status == CacheStatus::Stale {
                        RefreshCause::Stale
                    } else {
                        RefreshCause::Ahead
                    };
                    let found = s.clone();
                    (
                        None,
                        Some(Background {
                            handle,
                            found,
                            cause,
                        }),
                    )
                } else {
                    (Self::give_back(handle, right), None)
                };
                let respond = Respond::Object {
                    status,
                    found: Some((s, body)),
                    meta: MetaFrom::Found,
                    cookies: Vec::new(),
                };
                Action::Done(Done {
                    write,
                    respond,
                    refresh,
                })
            }
            (Next::Relookup { soft }, Some((s, _)), _) => {
                drop(handle);
                let m = s.meta();
                let flag = soft.then(|| flag_ahead(m, now));
                let tag = m.tag.clone();
                self.lookup(now, Some(Purge { tag, soft, flag }))
            }
            (Next::Revalidate, Some((s, _)), Some(body)) => {
                self.fetch(handle, Why::Revalidate(s, body))
            }
            (Next::Fill, ..) => self.fetch(handle, Why::Fill),
            (Next::Wait, found, _) => {
                self.ex.seen = found.as_ref().map(|(s, _)| s.meta().times.stored_at);
                self.wait(now, handle)
            }
            (Next::NotCached, ..) => self.not_cached(Held {
                handle,
                right,
                found: None,
            }),
            (Next::Unavailable, ..) => done(
                Self::give_back(handle, right),
                Respond::Unavailable(
                    "the origin failed for the request this one waited for".into(),
                ),
            ),
            (Next::Pass { status }, ..) => {
                if status != CacheStatus::Pass {
                    self.ex.notes.status = Some(status);
                }
                done(Some(cancel(handle)), Respond::Pass)
            }
            _ => done(Some(cancel(handle)), Respond::Pass),
        }
    }

    /// Sends the origin request for `why`, holding the fill right in `handle`.
    fn fetch(&mut self, handle: T, why: Why<S, B>) -> Act<T, S, B> {
        let fields = fill::request_fields(self.policy, self.plan, self.request, why.base());
        self.ex.state = State::Fetching(Fetch { handle, why });
        Action::Fetch { fields }
    }

    /// The origin's head for a fetch.
    fn answered(&mut self, now: Timestamp, f: Fetch<T, S, B>, head: AnswerHead) -> Act<T, S, B> {
        let Some(base) = f.why.base() else {
            return self.verdict(now, f, head);
        };
        let answer = Origin {
            status: head.status,
            fields: &head.fields,
            body: &[],
            elapsed: head.elapsed,
        };
        let plan = self.plan;
        let verdict = fill::revalidated(self.policy, plan, &plan.cache_key, base, answer, now);
        let Fetch { handle, why } = f;
        let (s, body) = match why {
            Why::Revalidate(s, body) => (s, body),
            why => return self.refreshed(now, Fetch { handle, why }, head, verdict),
        };
        self.origin_wait(head.elapsed);
        self.ex.notes.status = Some(CacheStatus::Miss);
        match verdict {
            Revalidated::Uncacheable { marker, theirs } => {
                // This client gets the stored body with the 304's fields, nobody else does;
                // their cookie is theirs: passed on, never stored.
                self.ex.notes.refresh = Some(Revalidation::NowUncacheable);
                self.ex.notes.status = Some(CacheStatus::Pass);
                let cookies = head
                    .fields
                    .iter()
                    .filter(|(n, _)| n.eq_ignore_ascii_case("set-cookie"))
                    .cloned()
                    .collect();
                let write = self.insert(handle, marker, Vec::new(), now);
                let respond = Respond::Object {
                    status: CacheStatus::Pass,
                    found: Some((s, body)),
                    meta: MetaFrom::Own(theirs),
                    cookies,
                };
                done(Some(write), respond)
            }
            Revalidated::Freshen(fresh) => {
                self.ex.notes.refresh = Some(Revalidation::Revalidated);
                let write = self.update(handle, fresh, now);
                done(
                    Some(write),
                    object(CacheStatus::Miss, s, body, MetaFrom::Written),
                )
            }
            Revalidated::Keep => {
                // Past grace the stored copy is served only within the origin's
                // stale-if-error (RFC 5861 §4); otherwise the origin's error goes out.
                self.ex.notes.refresh = Some(Revalidation::OriginError);
                let m = s.meta();
                let servable = stale_if_error(m, &m.times, now);
                let write = self.record_failure(handle, Some(m), now);
                if servable {
                    self.ex.notes.status = Some(CacheStatus::Stale);
                    return done(
                        Some(write),
                        object(CacheStatus::Stale, s, body, MetaFrom::Found),
                    );
                }
                self.ex.notes.status = Some(CacheStatus::Pass);
                let respond = Respond::Unstored {
                    status: CacheStatus::Pass,
                    body: None,
                };
                done(Some(write), respond)
            }
            Revalidated::Replace => {
                let f = Fetch {
                    handle,
                    why: Why::Revalidate(s, body),
                };
                self.verdict(now, f, head)
            }
        }
    }

    /// A background refresh's answer.
    fn refreshed(
        &mut self,
        now: Timestamp,
        f: Fetch<T, S, B>,
        head: AnswerHead,
        verdict: Revalidated,
    ) -> Act<T, S, B> {
        match verdict {
            Revalidated::Uncacheable { marker, .. } => {
                let write = self.insert(f.handle, marker, Vec::new(), now);
                done(Some(write), Respond::Refreshed(Refreshed::NowUncacheable))
            }
            Revalidated::Freshen(fresh) => {
                let write = self.update(f.handle, fresh, now);
                done(Some(write), Respond::Refreshed(Refreshed::Revalidated))
            }
            // Never a 304 (`fill::revalidated` keeps the object only for other statuses).
            Revalidated::Keep => done(
                Some(cancel(f.handle)),
                Respond::Refreshed(Refreshed::OriginError),
            ),
            Revalidated::Replace => self.verdict(now, f, head),
        }
    }

    /// A fill's (or a replacing revalidation's) answer by its head alone, or read its body.
    fn verdict(&mut self, now: Timestamp, f: Fetch<T, S, B>, head: AnswerHead) -> Act<T, S, B> {
        if let Why::Fill = f.why {
            self.origin_wait(head.elapsed);
        }
        let replacing = !matches!(f.why, Why::Fill);
        let plan = self.plan;
        let key = &plan.cache_key;
        let (status, fields) = (head.status, &head.fields);
        if let Some(v) = fill::unstorable(self.policy, plan, key, status, fields, now, replacing) {
            return self.apply(now, f, v, None);
        }
        let limit = self.policy.config().edge.max_object_bytes;
        self.ex.state = State::Receiving(f, head, now);
        Action::ReadBody { limit }
    }

    /// The body (`None`: over the limit) of the answer whose head is `head`.
    fn received(
        &mut self,
        now: Timestamp,
        f: Fetch<T, S, B>,
        head: &AnswerHead,
        body: Option<Vec<u8>>,
    ) -> Act<T, S, B> {
        let replacing = !matches!(f.why, Why::Fill);
        let plan = self.plan;
        let key = &plan.cache_key;
        let Some(body) = body else {
            let (status, fields) = (head.status, &head.fields);
            let v = fill::oversized(self.policy, plan, key, status, fields, now, replacing);
            return self.apply(now, f, v, None);
        };
        let origin = Origin {
            status: head.status,
            fields: &head.fields,
            body: &body,
            elapsed: head.elapsed,
        };
        match fill::filled(self.policy, plan, key, origin, now, replacing) {
            Ok(v) => self.apply(now, f, v, Some(body)),
            Err(e) => {
                if let Why::Refresh(_) = f.why {
                    self.ex.notes.error = Some(e.to_string());
                    let respond = Respond::Refreshed(Refreshed::KeptStored);
                    return done(Some(cancel(f.handle)), respond);
                }
                done(Some(cancel(f.handle)), Respond::Broken(e))
            }
        }
    }

    /// Applies the engine's verdict on a fill's answer: insert the object or a marker, or
    /// give up the fill right; answer from the stored object or with the origin's answer.
    fn apply(
        &mut self,
        now: Timestamp,
        f: Fetch<T, S, B>,
        v: Filled,
        read: Option<Vec<u8>>,
    ) -> Act<T, S, B> {
        let refresh = matches!(f.why, Why::Refresh(_));
        match v {
            Filled::Stored { meta, body } => {
                let write = self.insert(f.handle, meta, body, now);
                if refresh {
                    return done(Some(write), Respond::Refreshed(Refreshed::Replaced));
                }
                self.ex.notes.status = Some(CacheStatus::Miss);
                let respond = Respond::Object {
                    status: CacheStatus::Miss,
                    found: None,
                    meta: MetaFrom::Written,
                    cookies: Vec::new(),
                };
                done(Some(write), respond)
            }
            Filled::Marker { meta, why } => {
                let write = self.insert(f.handle, meta, Vec::new(), now);
                self.unstored(refresh, write, why.label(), read)
            }
            Filled::Unstored(why) => self.unstored(refresh, cancel(f.handle), why.label(), read),
        }
    }

    fn unstored(
        &mut self,
        refresh: bool,
        write: Write<T>,
        why: &'static str,
        read: Option<Vec<u8>>,
    ) -> Act<T, S, B> {
        if refresh {
            return done(Some(write), Respond::Refreshed(Refreshed::NowUncacheable));
        }
        self.ex.notes.pass_reason = Some(why);
        self.ex.notes.status = Some(CacheStatus::Pass);
        let respond = Respond::Unstored {
            status: CacheStatus::Pass,
            body: read,
        };
        done(Some(write), respond)
    }

    /// The fetch failed or its body broke: recorded for the requests that waited for it,
    /// then the stored copy within `stale-if-error` (RFC 5861 §4) or a `503`. A background
    /// refresh keeps the stored copy and reports `kept` (`kept-stored` when the origin was
    /// not reached, `origin-error-kept-stored` when its body broke).
    fn failed(
        &mut self,
        now: Timestamp,
        f: Fetch<T, S, B>,
        reason: String,
        kept: Refreshed,
    ) -> Act<T, S, B> {
        match f.why {
            Why::Refresh(_) => {
                self.ex.notes.error = Some(reason);
                done(Some(cancel(f.handle)), Respond::Refreshed(kept))
            }
            Why::Fill => {
                let write = self.record_failure(f.handle, None, now);
                done(Some(write), Respond::Unavailable(reason))
            }
            Why::Revalidate(s, body) => {
                let m = s.meta();
                let servable = stale_if_error(m, &m.times, now);
                let write = self.record_failure(f.handle, Some(m), now);
                if !servable {
                    return done(Some(write), Respond::Unavailable(reason));
                }
                self.ex.notes.error = Some(reason);
                self.ex.notes.status = Some(CacheStatus::Stale);
                done(
                    Some(write),
                    object(CacheStatus::Stale, s, body, MetaFrom::Found),
                )
            }
        }
    }

    /// Records an origin failure of this request's fetch, so the requests waiting for it
    /// are answered as this one is: the stored copy keeps its content and gains the
    /// failure time (the platform holds it stale), or, with nothing stored, a failure
    /// marker.
    fn record_failure(&self, handle: T, stored: Option<&Meta>, now: Timestamp) -> Write<T> {
        let (meta, update) = if let Some(m) = stored {
            let mut m = Box::new(m.clone());
            m.origin_failed_at_ms = Some(now.as_millis());
            (m, true)
        } else {
            let mut m = Meta::failure_marker(self.plan.route, now);
            m.tag = cachet_policy::object::object_tag(&self.plan.cache_key);
            (Box::new(m), false)
        };
        let entry = CoreEntry::of(self.policy, &meta, now);
        Write {
            handle,
            op: WriteOp::Failure {
                meta,
                update,
                entry,
            },
        }
    }

    fn insert(&self, handle: T, meta: Box<Meta>, body: Vec<u8>, now: Timestamp) -> Write<T> {
        let entry = CoreEntry::of(self.policy, &meta, now);
        Write {
            handle,
            op: WriteOp::Insert { meta, body, entry },
        }
    }

    fn update(&self, handle: T, meta: Box<Meta>, now: Timestamp) -> Write<T> {
        let entry = CoreEntry::of(self.policy, &meta, now);
        Write {
            handle,
            op: WriteOp::Update { meta, entry },
        }
    }

    fn origin_wait(&mut self, elapsed: Duration) {
        self.ex.notes.origin_wait = Some(self.ex.notes.origin_wait.unwrap_or_default() + elapsed);
    }
}

fn cancel<T>(handle: T) -> Write<T> {
    Write {
        handle,
        op: WriteOp::Cancel,
    }
}

fn done<T, S, B>(write: Option<Write<T>>, respond: Respond<S, B>) -> Action<T, S, B> {
    Action::Done(Done {
        write,
        respond,
        refresh: None,
    })
}

fn object<S, B>(status: CacheStatus, found: S, body: B, meta: MetaFrom) -> Respond<S, B> {
    Respond::Object {
        status,
        found: Some((found, body)),
        meta,
        cookies: Vec::new(),
    }
}

/// The refresh-ahead flag of the object tagged `tag`: written before refresh-ahead's own
/// soft purge, holding the purged copy's `stored_at` (ms), so the requests that find the
/// copy soft-purged tell refresh-ahead's purge from an operator's (issue 28 items 2, 3).
pub fn ahead_flag_key(tag: &str) -> String {
    format!("cachet-ahead:{tag}")
}

/// The flag for `meta`'s copy before refresh-ahead's soft purge, until its expiry.
fn flag_ahead(meta: &Meta, now: Timestamp) -> (String, Vec<u8>, Duration) {
    let t = &meta.times;
    let expiry = t.stored_at.saturating_add(t.ttl);
    let left = expiry.as_millis().saturating_sub(now.as_millis()).max(1);
    (
        ahead_flag_key(&meta.tag),
        t.stored_at.as_millis().to_string().into_bytes(),
        Duration::from_millis(left),
    )
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
