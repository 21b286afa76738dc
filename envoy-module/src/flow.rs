//! One stream's request in the dynamic module: the request-side rules, then, for a
//! cacheable request, its `cachet_http::exchange` fed from the stream's hooks, its actions
//! carried out on the process-wide [`Store`] and [`Locks`]. Every decision is the
//! exchange's or the policy's; this module moves bytes between Envoy and them (the third
//! host of the machine, after the edge and the proxy-wasm filter).
//!
//! | action | here |
//! |---|---|
//! | `Lookup` | [`Store::get`], the variant a vary marker selects, one pointer clone under a read lock; bans and soft purges applied there ([`Bans::check`]: `CheckBan` is then always clean) |
//! | `Claim` | [`Locks::claim`] on the cache key: leader (a [`Permit`] in the handle) or follower |
//! | `Park` | the key's queue ([`Locks::park`]); the leader's permit, dropped, commits an event to this stream's scheduler |
//! | `Fetch` | the client's own request rewritten into the fill (`cachet_http::fill::request_lines`) and sent through Envoy's router while the request is still held in its headers and the fill is a plain `GET`; else a callout to `[envoy].cluster` |
//! | `Done` | the write to the store, then the answer: a local reply from the stored object or the origin's answer, a pass, or Cachet's `503`/`504` |

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, SystemTime};

use cachet_http::exchange::{
    Action as Step, AnswerHead, Claim, Cx, Done, Event, Exchange, Respond, Right, Source, Write,
    WriteOp,
};
use cachet_http::{CacheStatus, Client, Failure, Inputs};
use cachet_policy::{Decision, Plan, Policy};
use cachet_refresh::{Draw, Timestamp};
use cachet_store::admin::{AdminRequest, Fleet as AdminFleet, FleetWrite};
use cachet_store::bans::Check;
use cachet_store::cache::{Wanted, classify, place, variant_of};
use cachet_store::tier::StoredObject;

use crate::abi;
use crate::bans::{Bans, Lurked};
use crate::fleet::{Fleet, status_body};
use crate::host::{Config, Fields, Scheduler, Stream};
use crate::store::{Claimed, Locks, Parked, Permit, Store, Wake};

const REQUEST: abi::HttpHeaderType = abi::HTTP_HEADER_TYPE_REQUEST_HEADER;
const RESPONSE: abi::HttpHeaderType = abi::HTTP_HEADER_TYPE_RESPONSE_HEADER;

/// What every stream of one filter configuration shares, across Envoy's worker threads.
pub struct Shared {
    /// The loaded configuration.
    pub policy: Policy,
    /// The process-wide object store (`[envoy].shared_bytes`).
    pub store: Store,
    /// The collapsing locks.
    pub locks: Arc<Locks>,
    /// The ban log (bans, purges, soft purges) and the lurker.
    pub bans: Bans,
    /// Fleet mode's etcd poll and the ban feed (main thread).
    pub fleet: Fleet,
    /// When the origin last failed a fill of a key, ms (read by requests that waited for
    /// that fill: they are answered as it was).
    failures: Mutex<HashMap<String, u64>>,
    /// Lock owners and exchange seeds.
    counter: AtomicU64,
    seed: u64,
    /// Background refreshes handed out by client exchanges, waiting for the main thread.
    queued: Mutex<Vec<Job>>,
    /// Background refreshes whose callout is out, by callout id (main thread).
    running: Mutex<HashMap<u64, Job>>,
    /// Wakes the main thread for [`Shared::queued`] (the configuration's scheduler).
    main: OnceLock<Arc<dyn Wake>>,
    /// The `/stats` counters (none until defined).
    counters: OnceLock<Counters>,
    /// The `/stats` gauges (none until defined): bytes stored, objects, live bans.
    gauges: OnceLock<Gauges>,
}

/// The module's gauges in `/stats`, set from the main thread on every lurker step.
#[derive(Debug, Default, Clone, Copy)]
pub struct Gauges {
    /// Bytes the store holds (`StoredObject::cost`).
    pub bytes_stored: usize,
    /// Objects the store holds (vary markers and hit-for-pass markers included).
    pub objects: usize,
    /// Live entries of the ban log (bans, hard purges, soft purges).
    pub bans: usize,
}

impl Gauges {
    /// The gauges' names in `/stats`.
    pub const NAMES: [&'static str; 3] = ["cachet.bytes_stored", "cachet.objects", "cachet.bans"];

    /// The gauges from their ids, in [`Self::NAMES`]' order.
    pub fn from_ids([bytes_stored, objects, bans]: [usize; 3]) -> Self {
        Self {
            bytes_stored,
            objects,
            bans,
        }
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (f.debug_struct("Shared").field("store", &self.store))
            .field("locks", &self.locks)
            .finish_non_exhaustive()
    }
}

/// Declares [`Counters`] with each counter named once: field, `/stats` name, meaning.
macro_rules! counters {
    ($($(#[doc = $doc:literal])* $field:ident => $name:literal,)*) => {
        /// The module's counters in Envoy's `/stats` (ids from `config_define_counter`),
        /// as the proxy-wasm filter's `cachet.*` counters; names in [`Counters::NAMES`].
        #[derive(Debug, Default, Clone, Copy)]
        pub struct Counters {
            $($(#[doc = $doc])* pub $field: usize,)*
        }

        impl Counters {
            /// The counters' names in `/stats` (under Envoy's namespace for dynamic
            /// modules), in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($name),*];

            /// The counters from their ids, in [`Self::NAMES`]' order; a missing id
            /// reads as 0.
            pub fn from_ids(ids: &[usize]) -> Self {
                let mut ids = ids.iter().copied();
                Self {
                    $($field: ids.next().unwrap_or_default(),)*
                }
            }
        }
    };
}

counters! {
    /// Answers from a stored object (`HIT`).
    hits => "cachet.hits",
    /// Fills sent (`MISS`).
    misses => "cachet.misses",
    /// Answers not from the cache (`PASS`).
    passes => "cachet.passes",
    /// Stale answers (`STALE`).
    stale => "cachet.stale",
    /// Requests that waited for another request's fill (once each).
    collapsed_waiters => "cachet.collapsed_waiters",
    /// Background refreshes started.
    refreshes => "cachet.refreshes",
    /// Objects evicted to make room.
    evictions => "cachet.evictions",
    /// Fills and refreshes the origin failed (unreachable, reset, Envoy's own reply).
    origin_errors => "cachet.origin_errors",
    /// Bans added through the admin API.
    bans_added => "cachet.bans_added",
    /// Surrogate keys purged (admin API, hard or soft; invalidation after unsafe methods).
    purges => "cachet.purges",
    /// Admin calls refused for their credentials (401/403).
    admin_denied => "cachet.admin_denied",
    /// Objects the lurker examined.
    lurker_examined => "cachet.lurker_examined",
    /// Objects the lurker removed (banned, or past their keep window).
    lurker_evicted => "cachet.lurker_evicted",
    /// Full lurker passes.
    lurker_passes => "cachet.lurker_passes",
    /// Fleet polls or ban-feed fetches that added entries to the log.
    feed_updates => "cachet.feed_updates",
}

/// Failures remembered at most (older ones go first once over).
const MAX_FAILURES: usize = 4096;

impl Shared {
    /// The shared state of a configuration.
    pub fn new(policy: Policy) -> Self {
        let bytes = policy.config().envoy.shared_bytes;
        Self {
            policy,
            store: Store::new(bytes),
            locks: Arc::new(Locks::default()),
            bans: Bans::new(),
            fleet: Fleet::default(),
            failures: Mutex::default(),
            counter: AtomicU64::new(1),
            seed: RandomState::new().hash_one(0x6361_6368_6574_u64),
            queued: Mutex::default(),
            running: Mutex::default(),
            main: OnceLock::new(),
            counters: OnceLock::new(),
            gauges: OnceLock::new(),
        }
    }

    /// Sets the `/stats` counters (once, in `config_new`).
    pub fn set_counters(&self, c: Counters) {
        // A second call keeps the first: the ids belong to this configuration.
        let _ = self.counters.set(c);
    }

    /// Sets the `/stats` gauges (once, in `config_new`).
    pub fn set_gauges(&self, g: Gauges) {
        // A second call keeps the first: the ids belong to this configuration.
        let _ = self.gauges.set(g);
    }

    /// Sets what wakes the main thread for background refreshes (once, in `config_new`).
    pub fn set_main(&self, waker: Arc<dyn Wake>) {
        // A second call keeps the first waker: there is one configuration scheduler.
        let _ = self.main.set(waker);
    }

    /// Queues a background refresh for the main thread.
    fn queue(&self, job: Job) {
        (self.queued.lock().unwrap_or_else(PoisonError::into_inner)).push(job);
        if let Some(w) = self.main.get() {
            w.wake();
        }
    }

    /// The main thread's turn: starts every queued background refresh (its callout through
    /// `config`).
    pub fn run_refreshes(&self, config: Config) {
        let jobs = std::mem::take(&mut *self.queued.lock().unwrap_or_else(PoisonError::into_inner));
        for mut job in jobs {
            if let Some(c) = self.counters.get() {
                config.count(c.refreshes, 1);
            }
            if let Some(id) = self.drive_job(config, &mut job, Event::Start) {
                (self.running.lock().unwrap_or_else(PoisonError::into_inner)).insert(id, job);
            }
        }
    }

    /// The main thread's lurker step (every `[envoy].tick`: `Bans::lurk`), counted, then
    /// the gauges set.
    pub fn lurk(&self, config: Config) {
        let now_ms = now().1.as_millis();
        let Lurked {
            examined,
            evicted,
            passes,
        } = self.bans.lurk(&self.store, &self.policy, now_ms);
        if let Some(c) = self.counters.get() {
            for (id, n) in [
                (c.lurker_examined, examined),
                (c.lurker_evicted, evicted),
                (c.lurker_passes, passes),
            ] {
                if n > 0 {
                    config.count(id, n);
                }
            }
        }
        if let Some(g) = self.gauges.get() {
            let (bytes, objects) = self.store.totals();
            config.set_gauge(g.bytes_stored, bytes);
            config.set_gauge(g.objects, objects);
            config.set_gauge(g.bans, self.bans.live() as u64);
        }
        self.fleet.tick(config, &self.bans, &self.policy, now_ms);
    }

    /// A callout of the configuration answered (`None`: it failed), on the main thread:
    /// fleet mode's (etcd, the ban feed; counted), else a background refresh's.
    pub fn root_answered(&self, config: Config, id: u64, answer: Option<(Fields, Vec<u8>)>) {
        let now_ms = now().1.as_millis();
        let fleet = (self.fleet).answered(
            config,
            &self.bans,
            &self.policy,
            id,
            answer.as_ref(),
            now_ms,
        );
        match fleet {
            Some(applied) => {
                if let (true, Some(c)) = (applied.added > 0, self.counters.get()) {
                    config.count(c.feed_updates, 1);
                    config.count(c.bans_added, applied.added);
                }
            }
            None => self.refresh_answered(config, id, answer),
        }
    }

    /// Counts an admin call's effects (stream side).
    fn count_admin(&self, s: Stream, fx: cachet_store::admin::Effects) {
        let Some(c) = self.counters.get() else { return };
        for (id, n) in [
            (c.admin_denied, u64::from(fx.denied)),
            (c.bans_added, fx.bans_added),
            (c.purges, fx.purges),
        ] {
            if n > 0 {
                s.count(id, n);
            }
        }
    }

    /// A background refresh's callout answered (`None`: it failed), on the main thread.
    fn refresh_answered(&self, config: Config, id: u64, answer: Option<(Fields, Vec<u8>)>) {
        let job = (self.running.lock().unwrap_or_else(PoisonError::into_inner)).remove(&id);
        let Some(mut job) = job else { return };
        if let (None, Some(c)) = (&answer, self.counters.get()) {
            config.count(c.origin_errors, 1);
        }
        let event = answered(&mut job.flow, answer);
        if let Some(next) = self.drive_job(config, &mut job, event) {
            (self.running.lock().unwrap_or_else(PoisonError::into_inner)).insert(next, job);
        }
    }

    /// Drives a background refresh; returns its callout id while one is out.
    fn drive_job(&self, config: Config, job: &mut Job, event: Ev) -> Option<u64> {
        let Job {
            flow,
            inputs,
            client,
        } = job;
        let plan = get_plan(&self.policy, inputs, flow.at);
        let mut d = Driver {
            sh: self,
            host: Host::Main(config),
            client,
            inputs,
            scheduler: None,
        };
        d.drive(&plan, flow, event, now().1);
        match flow.stage {
            Stage::Callout(id) => Some(id),
            _ => None,
        }
    }

    /// A fresh value: lock owners, exchange seeds, XFetch draws, fleet keys' suffixes (splitmix64 over a
    /// process-random base).
    fn next(&self) -> u64 {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut z = self
            .seed
            .wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn record_failure(&self, key: &str, now_ms: u64) {
        let memory = self.policy.config().collapse.max_wait_ms;
        let mut f = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        if f.len() >= MAX_FAILURES {
            f.retain(|_, at| now_ms.saturating_sub(*at) < memory);
        }
        if f.len() < MAX_FAILURES {
            f.insert(key.to_owned(), now_ms);
        }
    }

    fn failed_at(&self, key: &str) -> Option<Timestamp> {
        let f = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        f.get(key).copied().map(Timestamp::from_millis)
    }
}

/// The exchange's lookup handle here: the object found (the base of a freshen) and the
/// fill right once claimed.
#[derive(Debug, Default)]
pub struct Hold {
    found: Option<Arc<StoredObject>>,
    permit: Option<Permit>,
}

type Ex = Exchange<Hold, Arc<StoredObject>, ()>;
type Ev = Event<Hold, Arc<StoredObject>, ()>;
type Act = Step<Hold, Arc<StoredObject>, ()>;

/// Where a stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Deciding (inside a hook).
    Deciding,
    /// Parked behind another request's fill.
    Parked,
    /// Its fill's callout is out.
    Callout(u64),
    /// Its fill goes through the router: the answer comes in the response hooks.
    Router,
    /// Answered by a local reply.
    Answered,
    /// Passed to the origin: the answer Envoy forwards gets the edge's edits.
    Passed,
    /// Its fill's answer streams on to the client (too large, or not stored).
    Streaming,
}

/// What a hook returns after driving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Go {
    /// Stay stopped (answered, or waiting for an event).
    Paused,
    /// The request goes upstream.
    Upstream,
    /// The response goes on to the client.
    Downstream,
}

/// The origin's answer while the exchange decides on it.
#[derive(Debug)]
enum Answer {
    /// A callout's, whole.
    Callout {
        status: u16,
        headers: Fields,
        body: Vec<u8>,
    },
    /// The router's: its fields, the fields respaced, the declared length, whether the
    /// headers ended the stream.
    Router {
        headers: Fields,
        respaced: Vec<String>,
        declared: Option<u64>,
        eos: bool,
    },
}

/// The request's own edits for the upstream: the device header (the client's was
/// removed) and the normalized `:path` when it differs.
#[derive(Debug, Default)]
struct Forward {
    device: Option<cachet_policy::DeviceClass>,
    path: Option<String>,
}

impl Forward {
    fn apply(&self, s: Stream, p: &Policy) {
        if let Some(d) = self.device {
            s.set_header(REQUEST, p.device_header(), Some(d.as_str().as_bytes()));
        }
        if let Some(path) = &self.path {
            s.set_header(REQUEST, ":path", Some(path.as_bytes()));
        }
    }
}

/// One cacheable request's flow.
struct Flow {
    ex: Ex,
    at: SystemTime,
    want: Wanted,
    forward: Forward,
    stage: Stage,
    answer: Option<Answer>,
    /// When its fetch was sent.
    started: Timestamp,
    /// Its write was refused (a variant over `[edge].max_variants`): `PASS`.
    refused: bool,
    /// It was counted as collapsed (once, however often it parks).
    collapsed: bool,
    /// How an answer reaches the client from where the flow is: encoded by the filter
    /// while the request is still held in its headers (it may also be rewritten and
    /// continued); once its fill went through the router, the response path has begun and
    /// an answer is a local reply, or, driven from the answer's last body chunk with the
    /// whole body buffered, the response rewritten in place.
    out: Out,
    /// The stream has ended: only writes are carried out.
    gone: bool,
}

/// A background refresh: its flow, with the request and client fields it was planned from.
struct Job {
    flow: Flow,
    inputs: Inputs,
    client: Client,
}

/// Where the driver carries out its actions.
#[derive(Clone, Copy)]
enum Host {
    /// A stream's hook, on its worker thread.
    Stream(Stream),
    /// The configuration, on the main thread (background refreshes).
    Main(Config),
}

/// One stream, as Envoy's hooks reach it.
///
/// Envoy may call a stream's hooks from inside another of its hooks: a reply the module
/// sends can end the stream at once, and `on_http_filter_stream_complete` then runs before
/// the hook that sent it returns. So every hook takes `&self`, the stream's state is behind
/// a `RefCell`, and a completion that arrives while a hook runs is recorded and carried out
/// when that hook returns: the state is never freed under a hook that still uses it.
pub struct Filter {
    inner: std::cell::RefCell<Inner>,
    completed: std::cell::Cell<Option<Stream>>,
    /// The module floor ([`Filter::floor`]): no cache, only the I/O a storing filter
    /// cannot avoid.
    floor: bool,
}

/// The `filter_name` that loads the module floor ([`Filter::floor`]) instead of Cachet.
pub const FLOOR_FILTER_NAME: &[u8] = b"cachet-floor";

impl Filter {
    /// A stream of the configuration `shared`.
    pub fn new(shared: Arc<Shared>) -> Self {
        Self {
            inner: std::cell::RefCell::new(Inner::new(shared)),
            completed: std::cell::Cell::new(None),
            floor: false,
        }
    }

    /// A stream of the module floor (`filter_name: cachet-floor`, [`FLOOR_FILTER_NAME`]):
    /// the platform's cost of a dynamic module that stores, without Cachet. It reads the
    /// request's headers once, holds the response whole (headers stopped, body buffered
    /// to its end) and reads the body out of Envoy once, as any filter that stores a
    /// response must; it writes nothing and stores nothing. `scripts/bench-load`'s
    /// `module-floor-miss` row measures the module's miss against it, as `wasm-null` is
    /// the proxy-wasm filter's floor.
    pub fn floor(shared: Arc<Shared>) -> Self {
        Self {
            floor: true,
            ..Self::new(shared)
        }
    }

    /// Runs `f` on the state (`default` when a hook already holds it), then a completion
    /// that arrived meanwhile.
    fn with<R>(&self, default: R, f: impl FnOnce(&mut Inner) -> R) -> R {
        let r = match self.inner.try_borrow_mut() {
            Ok(mut inner) => f(&mut inner),
            Err(_) => return default,
        };
        if let Some(s) = self.completed.take() {
            self.on_stream_complete(s);
        }
        r
    }

    /// The request's headers.
    pub fn on_request_headers(&self, s: Stream, end_of_stream: bool) -> Go {
        if self.floor {
            std::hint::black_box(s.headers(REQUEST));
            return Go::Upstream;
        }
        self.with(Go::Paused, |i| i.on_request_headers(s, end_of_stream))
    }

    /// The scheduler's event: a parked request looks again.
    pub fn on_scheduled(&self, s: Stream) {
        self.with((), |i| i.on_scheduled(s));
    }

    /// A callout's answer (`None`: it failed).
    pub fn on_callout_done(&self, s: Stream, id: u64, answer: Option<(Fields, Vec<u8>)>) {
        self.with((), |i| i.on_callout_done(s, id, answer));
    }

    /// The request's trailers: held while an admin call waits for its body or for etcd
    /// (an admin call is never forwarded), else they go on.
    pub fn on_request_trailers(&self) -> Go {
        self.with(Go::Upstream, |i| {
            if i.admin.is_some() || i.fleet.is_some() {
                Go::Paused
            } else {
                Go::Upstream
            }
        })
    }

    /// A chunk of the request body; `(Paused, true)`: buffer it.
    pub fn on_request_body(&self, s: Stream, end_of_stream: bool) -> (Go, bool) {
        self.with((Go::Upstream, false), |i| {
            i.on_request_body(s, end_of_stream)
        })
    }

    /// The response's headers.
    pub fn on_response_headers(&self, s: Stream, end_of_stream: bool) -> Go {
        if self.floor {
            return if end_of_stream {
                Go::Downstream
            } else {
                Go::Paused
            };
        }
        self.with(Go::Downstream, |i| i.on_response_headers(s, end_of_stream))
    }

    /// A chunk of the response body; `(Paused, true)`: buffer it.
    pub fn on_response_body(&self, s: Stream, end_of_stream: bool) -> (Go, bool) {
        if self.floor {
            if !end_of_stream {
                return (Go::Paused, true);
            }
            std::hint::black_box(s.response_body());
            return (Go::Downstream, false);
        }
        self.with((Go::Downstream, false), |i| {
            i.on_response_body(s, end_of_stream)
        })
    }

    /// The stream ended (now, or when the hook running returns).
    pub fn on_stream_complete(&self, s: Stream) {
        match self.inner.try_borrow_mut() {
            Ok(mut inner) => inner.on_stream_complete(s),
            Err(_) => self.completed.set(Some(s)),
        }
    }

    /// Leaves the key's queue and frees the scheduler (the stream is going).
    pub fn close(&self) {
        if let Ok(mut inner) = self.inner.try_borrow_mut() {
            inner.close();
        }
    }
}

/// A stream's state.
struct Inner {
    shared: Arc<Shared>,
    inputs: Option<Inputs>,
    client: Client,
    flow: Option<Flow>,
    /// Edits for a passed request's answer (`Stage::Passed` without a flow).
    passed: bool,
    scheduler: Option<Arc<Scheduler>>,
    /// An admin call waiting for its body (`POST /.cachet/ban`).
    admin: Option<AdminRequest>,
    /// A passed unsafe request's method, host and target: invalidated after a non-error
    /// answer (RFC 9111 §4.4).
    unsafe_target: Option<(String, String, String)>,
    /// A request answered by combining slices, while its parts come back.
    stitch: Option<Stitching>,
    /// The slices did not combine: the request takes its ordinary flow.
    unstitched: bool,
    /// Fleet mode: an admin write out to etcd (its callout id), answered when etcd
    /// answers.
    fleet: Option<(u64, FleetWrite)>,
    /// The request came from a fleet edge to this shield (`[envoy].shield`): its answers
    /// keep `Surrogate-Key`. Read before the reserved fields go, kept when the request is
    /// planned again.
    edge_tier: bool,
}

/// A request no one slice answers (`Plan::stitch`), combined from parts asked through
/// `[envoy].slice_cluster` one after the other (`cachet_http::stitch`, the proxy-wasm
/// filter's way): each part goes back through the listener, an ordinary one-slice request
/// on whichever worker takes it.
struct Stitching {
    s: cachet_http::stitch::Stitcher,
    headers: Fields,
    path: String,
    end_of_stream: bool,
    /// The parts' bodies so far (at most `[edge].max_object_bytes` in all).
    body: Vec<u8>,
    /// The part's callout out.
    callout: Option<u64>,
}

fn now() -> (SystemTime, Timestamp) {
    let t = SystemTime::now();
    (t, Timestamp::from_system_time(t))
}

/// The plan of the `GET` a request fetches, at `at` (the same plan for the same `at`).
fn get_plan<'a>(p: &'a Policy, inputs: &'a Inputs, at: SystemTime) -> Plan<'a> {
    let mut view = inputs.view();
    view.method = "GET";
    p.plan(&view, at)
}

fn text<'a>(fields: &'a Fields, name: &str) -> &'a str {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, v)| std::str::from_utf8(v).ok())
        .unwrap_or_default()
}

impl Inner {
    fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            inputs: None,
            client: Client::default(),
            flow: None,
            passed: false,
            scheduler: None,
            admin: None,
            unsafe_target: None,
            stitch: None,
            unstitched: false,
            fleet: None,
            edge_tier: false,
        }
    }

    /// The request's headers: answered here (`false`: stop), or on to the origin.
    /// The request's fields without Cachet's reserved `x-cachet-*` (removed from the
    /// request too: a client's copies never reach the origin, house rule), after reading
    /// whether a fleet edge sent it to this shield.
    fn request_fields(&mut self, s: Stream, p: &Policy) -> Fields {
        let mut headers = s.headers(REQUEST);
        self.edge_tier |=
            cachet_http::fields::from_edge_tier(headers.as_slice(), p.config().envoy.shield);
        headers.retain(|(n, _)| {
            let reserved = cachet_http::fields::reserved(n);
            if reserved {
                s.set_header(REQUEST, n, None);
            }
            !reserved
        });
        headers
    }

    fn on_request_headers(&mut self, s: Stream, end_of_stream: bool) -> Go {
        let sh = Arc::clone(&self.shared);
        let p = &sh.policy;
        let headers = self.request_fields(s, p);
        if let Err(refused) = cachet_http::authority::authority(headers.as_slice()) {
            s.send_reply(&refused);
            return Go::Paused;
        }
        let path = text(&headers, ":path").to_owned();
        let method = text(&headers, ":method").to_owned();
        // Admin look-alikes (`/.CACHET/ban`, `/%2ecachet/ban`) are admin calls too: a
        // token meant for the admin API never reaches the origin.
        if let Some(admin_path) = cachet_policy::admin::admin_path(&path) {
            return self.admin_headers(s, &headers, method, &admin_path, end_of_stream);
        }
        let (at, ts) = now();
        let mut inputs = Inputs::read(&method, "http", &path, headers.as_slice());
        inputs.has_body |= !end_of_stream;
        self.client = Client::read(&method, headers.as_slice());
        self.client.keep_surrogate = self.edge_tier;
        let inputs = self.inputs.insert(inputs);
        let plan = p.plan(&inputs.view(), at);
        let forward = Forward {
            device: Some(plan.device),
            path: (plan.target != path).then(|| plan.target.to_string()),
        };
        match &plan.decision {
            Decision::Synth(synth) => {
                s.send_reply(&cachet_http::reply::synth(synth));
                return Go::Paused;
            }
            Decision::Pass(_) => {
                forward.apply(s, p);
                self.passed = true;
                if cachet_http::invalidate::invalidates(&method) {
                    let target = (method, plan.host.to_string(), plan.target.to_string());
                    self.unsafe_target = Some(target);
                }
                if let Some(c) = sh.counters.get() {
                    s.count(c.passes, 1);
                }
                return Go::Upstream;
            }
            Decision::Cache => {}
        }
        let slicing = !self.unstitched && !p.config().envoy.slice_cluster.is_empty();
        if let Some(want) = plan.stitch.filter(|_| slicing) {
            let max = p.config().edge.max_object_bytes;
            self.stitch = Some(Stitching {
                s: cachet_http::stitch::Stitcher::new(want, Some(max)),
                headers,
                path,
                end_of_stream,
                body: Vec::new(),
                callout: None,
            });
            return self.next_part(s);
        }
        let want = Wanted {
            key: plan.cache_key.clone(),
            slot: 0,
            target: plan.target.to_string(),
            fields: headers,
            early: p.early_refresh(&plan),
        };
        let plan = if method == "GET" {
            plan
        } else {
            get_plan(p, inputs, at)
        };
        let ex = {
            let cx = Cx::new(p, &plan, &self.client, &want.fields);
            // The lookup applies bans and soft purges (`Bans::check`). A stored object
            // holds its body.
            Exchange::new(cx, ts, sh.next())
                .lookup_applies_bans()
                .found_carries_body()
        };
        let flow = self.flow.insert(Flow {
            ex,
            at,
            want,
            forward,
            stage: Stage::Deciding,
            answer: None,
            started: ts,
            refused: false,
            collapsed: false,
            out: Out::Encode,
            gone: false,
        });
        let mut d = Driver {
            sh: &sh,
            host: Host::Stream(s),
            client: &self.client,
            inputs,
            scheduler: Some(&mut self.scheduler),
        };
        d.drive(&plan, flow, Event::Start, ts)
    }

    /// An admin call (`/.cachet/*`): answered now, or after its body for
    /// `POST /.cachet/ban`. Always stopped here: never forwarded.
    fn admin_headers(
        &mut self,
        s: Stream,
        headers: &Fields,
        method: String,
        admin_path: &str,
        end_of_stream: bool,
    ) -> Go {
        let req = AdminRequest::read(method, admin_path, headers);
        // Only `POST /.cachet/ban` reads its body; its headers wait for it here (a native
        // filter stopped in its headers still gets the body), and never go on.
        let reads = !end_of_stream && req.reads_body();
        self.admin = Some(req);
        if reads {
            s.set_header(REQUEST, "authorization", None);
        } else {
            self.answer_admin(s, &[]);
        }
        Go::Paused
    }

    /// Answers the admin call waiting in `self.admin` with `body` (`cachet_store::admin`,
    /// `GET /.cachet/config` included), counted; a ban or purge is in force for every
    /// thread before the answer goes.
    fn answer_admin(&mut self, s: Stream, body: &[u8]) {
        let Some(req) = self.admin.take() else { return };
        let sh = &self.shared;
        let config = || {
            cachet_policy::inforce::ConfigStatus {
                configured_from: "dynamic module filter_config",
                in_force: cachet_policy::inforce::Source::Configured,
                rejected: None,
            }
            .body()
        };
        let now_ms = now().1.as_millis();
        if let Some((reply, fx)) = cachet_store::admin::config_call(&sh.policy, &req, config) {
            sh.count_admin(s, fx);
            s.send_reply(&reply);
            return;
        }
        let envoy = &sh.policy.config().envoy;
        if envoy.etcd_cluster.is_empty() {
            let (reply, fx) = sh.bans.admin(&sh.policy, &req, body, now_ms);
            sh.count_admin(s, fx);
            s.send_reply(&reply);
            return;
        }
        // Fleet mode: a write is one etcd transaction, answered when etcd answers.
        match (sh.bans).admin_fleet(&sh.policy, &req, body, now_ms, sh.next()) {
            AdminFleet::Reply(reply, fx) => {
                sh.count_admin(s, fx);
                s.send_reply(&reply);
            }
            AdminFleet::Write(w) => {
                let lines =
                    cachet_store::poller::lines(cachet_store::etcd::TXN_PATH, &envoy.etcd_cluster);
                let timeout_ms = cachet_store::poller::ETCD_TIMEOUT_MS;
                if let Ok(id) = s.callout(&envoy.etcd_cluster, &lines, &w.txn, timeout_ms) {
                    self.fleet = Some((id, w));
                } else {
                    let (reply, fx) = cachet_store::admin::fleet_answer(&w, None);
                    sh.count_admin(s, fx);
                    s.send_reply(&reply);
                }
            }
        }
    }

    /// Fleet mode: etcd answered this stream's admin write (`None`: it failed); the
    /// client's answer goes out, and after an accepted write the next tick polls.
    fn fleet_answered(&mut self, s: Stream, answer: Option<&(Fields, Vec<u8>)>) {
        let Some((_, w)) = self.fleet.take() else {
            return;
        };
        let max = cachet_store::poller::MAX_ETCD_ANSWER_BYTES;
        let (reply, fx) = cachet_store::admin::fleet_answer(&w, status_body(answer, max));
        self.shared.count_admin(s, fx);
        if reply.status < 300 {
            self.shared.bans.accepted(now().1.as_millis());
        }
        s.send_reply(&reply);
    }

    /// A chunk of the request body: only an admin call waiting for its ban expression
    /// reads it (buffered to its end, at most `cachet_store::admin::MAX_BODY_BYTES`).
    fn on_request_body(&mut self, s: Stream, end_of_stream: bool) -> (Go, bool) {
        if self.fleet.is_some() {
            // An admin call waiting for etcd: what follows its headers (an empty body,
            // say) never resumes it towards the origin.
            return (Go::Paused, false);
        }
        if self.admin.is_none() {
            return (Go::Upstream, false);
        }
        let size = s.request_body_size();
        if size > cachet_store::admin::MAX_BODY_BYTES {
            self.admin = None;
            let e = cachet_policy::admin::AdminError::PayloadTooLarge {
                len: size,
                limit: cachet_store::admin::MAX_BODY_BYTES,
            };
            s.send_reply(&cachet_http::reply::admin_error(&e));
            return (Go::Paused, false);
        }
        if !end_of_stream {
            return (Go::Paused, true);
        }
        let body = s.request_body();
        self.answer_admin(s, &body);
        (Go::Paused, false)
    }

    /// Asks for the next part of a combined request through `[envoy].slice_cluster`
    /// (`cachet_http::stitch::part_request`); a refused callout sends the request down
    /// its ordinary flow.
    fn next_part(&mut self, s: Stream) -> Go {
        let Some(st) = self.stitch.as_mut() else {
            return Go::Paused;
        };
        let cfg = self.shared.policy.config();
        let timeout = cfg.origin.first_byte_timeout.0;
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let range = st.s.range();
        let lines = cachet_http::stitch::part_request(&st.path, st.headers.as_slice(), &range);
        match s.callout(&cfg.envoy.slice_cluster, &lines, &[], timeout_ms) {
            Ok(id) => {
                st.callout = Some(id);
                Go::Paused
            }
            Err(_) => self.unstitch(s),
        }
    }

    /// A part answered (`None`: its callout failed): `Stitcher::take` decides whether to
    /// ask for the next, send the combined answer or the part as it is, or run the
    /// request's ordinary flow. Nothing goes to the client before the last part.
    fn part_answered(&mut self, s: Stream, answer: Option<(Fields, Vec<u8>)>) {
        use cachet_http::stitch::{Took, answer_lines};
        let max = self.shared.policy.config().edge.max_object_bytes;
        let answer = answer.filter(|(_, b)| b.len() as u64 <= max);
        let (Some(st), Some((headers, body))) = (self.stitch.as_mut(), answer) else {
            if self.unstitch(s) == Go::Upstream {
                s.continue_decoding();
            }
            return;
        };
        st.callout = None;
        let status = text(&headers, ":status").parse().unwrap_or(502);
        let go = match st.s.take(status, &headers) {
            Took::More => {
                st.body.extend_from_slice(&body);
                self.next_part(s)
            }
            Took::Done => {
                st.body.extend_from_slice(&body);
                let (status, fields) = st.s.head();
                encode_whole(s, status, &answer_lines(&fields), &st.body);
                self.stitch = None;
                Go::Paused
            }
            Took::AsIs => {
                encode_whole(s, status, &answer_lines(&headers), &body);
                self.stitch = None;
                Go::Paused
            }
            Took::Whole => self.unstitch(s),
        };
        if go == Go::Upstream {
            s.continue_decoding();
        }
    }

    /// The slices do not combine: the (held) request runs its ordinary flow from its
    /// headers; what that returns is the caller's to carry out.
    fn unstitch(&mut self, s: Stream) -> Go {
        let Some(st) = self.stitch.take() else {
            return Go::Paused;
        };
        self.unstitched = true;
        self.on_request_headers(s, st.end_of_stream)
    }

    /// Feeds `event` to the flow from a later hook (the plan made again at its time).
    fn drive_later(&mut self, s: Stream, event: Ev) -> Go {
        let sh = Arc::clone(&self.shared);
        let (Some(inputs), Some(flow)) = (&self.inputs, &mut self.flow) else {
            return Go::Paused;
        };
        let plan = get_plan(&sh.policy, inputs, flow.at);
        let mut d = Driver {
            sh: &sh,
            host: Host::Stream(s),
            client: &self.client,
            inputs,
            scheduler: Some(&mut self.scheduler),
        };
        d.drive(&plan, flow, event, now().1)
    }

    fn stage(&self) -> Option<Stage> {
        self.flow.as_ref().map(|f| f.stage)
    }

    /// The scheduler's event: a parked request looks again.
    fn on_scheduled(&mut self, s: Stream) {
        if self.stage() != Some(Stage::Parked) {
            return;
        }
        if self.drive_later(s, Event::Woken) == Go::Upstream {
            s.continue_decoding();
        }
    }

    /// A callout's answer (`None`: it failed).
    fn on_callout_done(&mut self, s: Stream, id: u64, answer: Option<(Fields, Vec<u8>)>) {
        if self.fleet.as_ref().is_some_and(|(out, _)| *out == id) {
            self.fleet_answered(s, answer.as_ref());
            return;
        }
        if self
            .stitch
            .as_ref()
            .is_some_and(|st| st.callout == Some(id))
        {
            self.part_answered(s, answer);
            return;
        }
        let Some(flow) = self.flow.as_mut() else {
            return;
        };
        if flow.stage != Stage::Callout(id) {
            return;
        }
        if let (None, Some(c)) = (&answer, self.shared.counters.get()) {
            s.count(c.origin_errors, 1);
        }
        let event = answered(flow, answer);
        if self.drive_later(s, event) == Go::Upstream {
            s.continue_decoding();
        }
    }

    /// The response's headers.
    fn on_response_headers(&mut self, s: Stream, end_of_stream: bool) -> Go {
        match self.stage() {
            Some(Stage::Router) => {}
            Some(Stage::Passed) | None if self.passed || self.flow.is_some() => {
                let mut hs = s.headers(RESPONSE);
                let respaced = cachet_http::fields::respace_joined_lists(&mut hs);
                edit_forwarded(s, &hs, &respaced, &self.client);
                if let Some((method, host, target)) = self.unsafe_target.take() {
                    self.invalidate(s, &method, &host, &target, &hs);
                }
                return Go::Downstream;
            }
            _ => return Go::Downstream,
        }
        if !s.via_upstream() {
            let status = text(&s.headers(RESPONSE), ":status").parse().unwrap_or(0);
            return match cachet_http::fill::proxy_reply(status) {
                cachet_http::fill::ProxyReply::Forward => {
                    s.set_header(
                        RESPONSE,
                        "x-cache",
                        Some(CacheStatus::Error.as_str().as_bytes()),
                    );
                    if let Some(f) = self.flow.as_mut() {
                        f.stage = Stage::Streaming;
                    }
                    Go::Downstream
                }
                cachet_http::fill::ProxyReply::Failed(reason) => {
                    if let Some(c) = self.shared.counters.get() {
                        s.count(c.origin_errors, 1);
                    }
                    self.drive_later(s, Event::OriginFailed(reason))
                }
            };
        }
        let mut hs = s.headers(RESPONSE);
        // Envoy joined the origin's `Cache-Control` lines with a bare comma: stored and
        // sent as a combining cache sends them.
        let respaced = cachet_http::fields::respace_joined_lists(&mut hs);
        let declared = text(&hs, "content-length").trim().parse::<u64>().ok();
        let Some(flow) = self.flow.as_mut() else {
            return Go::Downstream;
        };
        let head = AnswerHead {
            status: text(&hs, ":status").parse().unwrap_or(502),
            fields: hs.clone(),
            elapsed: elapsed(flow.started),
        };
        flow.answer = Some(Answer::Router {
            headers: hs,
            respaced,
            declared,
            eos: end_of_stream,
        });
        self.drive_later(s, Event::Head(head))
    }

    /// The invalidation after an unsafe method's answer `hs` (RFC 9111 §4.4: the keys are
    /// `cachet_http::invalidation_keys`', none for an error), hard-purged through the ban
    /// log and counted.
    fn invalidate(&self, s: Stream, method: &str, host: &str, target: &str, hs: &Fields) {
        let p = &self.shared.policy;
        let status = text(hs, ":status").parse().unwrap_or(0);
        let keys = cachet_http::invalidation_keys(p, method, status, host, target, hs.as_slice());
        if keys.is_empty() {
            return;
        }
        let max = p.config().bans.max_bans;
        let added = self.shared.bans.purge_keys(&keys, max, now().1.as_millis());
        if let (Some(c), true) = (self.shared.counters.get(), added > 0) {
            s.count(c.purges, added);
        }
    }

    /// A chunk of the response body; `Paused` with the stage still `Router`: buffer it.
    fn on_response_body(&mut self, s: Stream, end_of_stream: bool) -> (Go, bool) {
        if self.stage() != Some(Stage::Router) {
            return (Go::Downstream, false);
        }
        let limit = self.shared.policy.config().edge.max_object_bytes;
        if s.response_body_size() as u64 > limit {
            return (self.drive_later(s, Event::Oversize), false);
        }
        if !end_of_stream {
            return (Go::Paused, true);
        }
        let body = s.response_body();
        if let Some(f) = self.flow.as_mut() {
            f.out = Out::Rewrite;
        }
        let go = self.drive_later(s, Event::Body(body));
        if let Some(f) = self.flow.as_mut() {
            f.out = Out::LocalReply;
        }
        (go, false)
    }

    /// The stream ended: a router fill cut short is recorded for the requests waiting for
    /// it; the permit and the parked place go with the stream.
    fn on_stream_complete(&mut self, s: Stream) {
        if let Some(f) = self.flow.as_mut() {
            f.gone = true;
        }
        if self.stage() == Some(Stage::Router) {
            self.drive_later(s, Event::BodyBroke("the origin failed mid-answer".into()));
        }
        self.close();
    }

    /// Leaves the key's queue and frees the scheduler (the stream is going).
    fn close(&mut self) {
        if let (Some(f), Some(w)) = (&self.flow, &self.scheduler)
            && f.stage == Stage::Parked
        {
            let w: Arc<dyn Wake> = w.clone();
            self.shared.locks.cancel(&f.want.key, &w);
        }
        if let Some(w) = self.scheduler.take() {
            w.close();
        }
        self.flow = None;
    }
}

/// The exchange's event for a callout's answer (`None`: it failed), the answer kept in
/// `flow` for the body and an unstored reply.
fn answered(flow: &mut Flow, answer: Option<(Fields, Vec<u8>)>) -> Ev {
    match answer {
        Some((headers, body)) => {
            let status = text(&headers, ":status").parse().unwrap_or(502);
            let head = AnswerHead {
                status,
                fields: headers.clone(),
                elapsed: elapsed(flow.started),
            };
            flow.answer = Some(Answer::Callout {
                status,
                headers,
                body,
            });
            Event::Head(head)
        }
        None => Event::OriginFailed("the callout failed".into()),
    }
}

fn elapsed(since: Timestamp) -> Duration {
    Duration::from_millis(now().1.as_millis().saturating_sub(since.as_millis()))
}

/// Encodes `status`, `lines` and all of `body` from the filter, framed by its length
/// (`encodeHeaders` sends what it is given: unlike a local reply, no `Content-Length` is
/// added).
fn encode_whole(s: Stream, status: u16, lines: &[(&str, &[u8])], body: &[u8]) {
    let len = body.len().to_string();
    let mut h = lines.to_vec();
    h.push(("content-length", len.as_bytes()));
    s.encode(status, &h, Some(body));
}

/// The edge's edits to an answer Envoy forwards itself.
fn edit_forwarded(s: Stream, hs: &Fields, respaced: &[String], client: &Client) {
    for (n, v) in cachet_http::unstored::forwarded_edits(hs, respaced, client) {
        s.set_header(RESPONSE, &n, v);
    }
}

/// What carrying out an action led to.
enum Next {
    Event(Ev),
    Wait(Go),
}

/// One hook's driving: where actions are carried out, the request, its client and the
/// stream's scheduler (none on the main thread).
struct Driver<'a> {
    sh: &'a Shared,
    host: Host,
    client: &'a Client,
    inputs: &'a Inputs,
    scheduler: Option<&'a mut Option<Arc<Scheduler>>>,
}

impl Driver<'_> {
    /// Feeds `event` and carries out the actions until the exchange waits.
    fn drive(&mut self, plan: &Plan<'_>, flow: &mut Flow, event: Ev, now: Timestamp) -> Go {
        let p = &self.sh.policy;
        let mut event = event;
        loop {
            flow.stage = Stage::Deciding;
            let action = {
                let cx = Cx::new(p, plan, self.client, &flow.want.fields);
                flow.ex.handle(cx, now, event)
            };
            event = match self.perform(plan, flow, action, now) {
                Next::Event(e) => e,
                Next::Wait(go) => return go,
            };
        }
    }

    /// Adds one to the counter `pick` names.
    fn count(&self, pick: impl Fn(&Counters) -> usize) {
        self.count_by(pick, 1);
    }

    fn count_by(&self, pick: impl Fn(&Counters) -> usize, by: u64) {
        let Some(c) = self.sh.counters.get() else {
            return;
        };
        match self.host {
            Host::Stream(s) => s.count(pick(c), by),
            Host::Main(config) => config.count(pick(c), by),
        }
    }

    fn stream(&self) -> Option<Stream> {
        match self.host {
            Host::Stream(s) => Some(s),
            Host::Main(_) => None,
        }
    }

    fn perform(&mut self, plan: &Plan<'_>, flow: &mut Flow, action: Act, now: Timestamp) -> Next {
        match action {
            Step::Lookup { .. } => Next::Event(self.look(flow, now)),
            Step::CheckBan => Next::Event(Event::Ban(false)),
            Step::ReadFlag { .. } => Next::Event(Event::Flag(None)),
            Step::ReadStored => Next::Event(Event::Stored(())),
            Step::Claim(mut hold) => {
                let owner = self.sh.next();
                let claim = match self.sh.locks.claim(&flow.want.key, owner) {
                    Claimed::Leader(permit) => {
                        hold.permit = Some(permit);
                        Claim::Leader
                    }
                    Claimed::Follower => Claim::Follower,
                };
                Next::Event(Event::Claimed(hold, claim))
            }
            Step::Park(_) => self.park(flow),
            Step::Fetch { fields } => self.fetch(flow, &fields),
            Step::ReadBody { limit } => read_body(flow, limit),
            Step::Done(done) => Next::Wait(self.done(plan, flow, done, now)),
        }
    }

    /// The key's object, or the variant its vary marker selects.
    fn look(&self, flow: &mut Flow, now: Timestamp) -> Ev {
        let store = &self.sh.store;
        let mut found = store.get(&flow.want.key);
        if let Some(marker) = found.as_ref().filter(|o| o.h.meta.is_vary_marker()) {
            match variant_of(&flow.want.key, Some(marker), &flow.want.fields) {
                Err(_) => return Event::Unkeyable,
                Ok(Some(k)) => {
                    found = store.get(&k);
                    flow.want.key = k;
                }
                Ok(None) => found = None,
            }
        }
        // A banned object is nothing, a soft-purged one stale (`Bans::check`); an
        // expired hit-for-pass marker is nothing (`cachet_store::cache::classify`); any
        // other object goes to the exchange, which decides on its times. The draw only
        // matters to a marker, so a hit takes none.
        let found = found.and_then(|o| {
            let check = (self.sh.bans).check(&o, &flow.want.target, &flow.want.fields);
            let soft = match check {
                Check::Banned => return None,
                Check::SoftPurged(_) => true,
                Check::Clean => false,
            };
            let usable = !o.h.meta.pass || {
                let draw = Draw::from_bits(self.sh.next());
                classify(&o, check, &flow.want.early, now, draw).is_some()
            };
            usable.then_some((o, soft))
        });
        let failed_at = if flow.ex.waited() {
            self.sh.failed_at(&flow.want.key)
        } else {
            None
        };
        Event::Looked {
            handle: Hold {
                found: found.as_ref().map(|(o, _)| Arc::clone(o)),
                permit: None,
            },
            right: Right::Ask,
            found,
            failed_at,
        }
    }

    /// Parks the stream behind the key's fill (`[collapse].max_waiters`).
    fn park(&mut self, flow: &mut Flow) -> Next {
        // A background refresh holds the fill right: it never waits (a host bug otherwise).
        let (Host::Stream(s), Some(slot)) = (self.host, self.scheduler.as_deref_mut()) else {
            return Next::Event(Event::Refused);
        };
        let w = Arc::clone(slot.get_or_insert_with(|| Arc::new(s.scheduler())));
        let max = self.sh.policy.config().collapse.max_waiters;
        match self.sh.locks.park(&flow.want.key, w, max) {
            Parked::Waiting => {
                if !flow.collapsed {
                    flow.collapsed = true;
                    self.count(|c| c.collapsed_waiters);
                }
                flow.stage = Stage::Parked;
                Next::Wait(Go::Paused)
            }
            Parked::Released => Next::Event(Event::Woken),
            Parked::Full => Next::Event(Event::Refused),
        }
    }

    /// Sends the fill: through the router (a plain fill of a `GET` still held in its
    /// headers), else as a callout to `[envoy].cluster`.
    fn fetch(&mut self, flow: &mut Flow, fields: &[(String, Vec<u8>)]) -> Next {
        let p = &self.sh.policy;
        let conditional = fields
            .iter()
            .any(|(n, _)| n == "if-none-match" || n == "if-modified-since");
        flow.started = now().1;
        let routable = flow.out == Out::Encode && self.client.get && !conditional;
        if let (Host::Stream(s), true) = (self.host, routable) {
            let router = Some(("http", self.client));
            let lines = cachet_http::fill::request_lines(&flow.want.target, fields, router);
            s.replace_request_headers(&lines);
            self.count(|c| c.misses);
            flow.stage = Stage::Router;
            flow.out = Out::LocalReply;
            return Next::Wait(Go::Upstream);
        }
        let lines = cachet_http::fill::request_lines(&flow.want.target, fields, None);
        let timeout = p.config().origin.first_byte_timeout.0;
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let cluster = &p.config().envoy.cluster;
        let sent = match self.host {
            Host::Stream(s) => s.callout(cluster, &lines, &[], timeout_ms),
            Host::Main(c) => c.callout(cluster, &lines, &[], timeout_ms),
        };
        match sent {
            Ok(id) => {
                if self.stream().is_some() {
                    self.count(|c| c.misses);
                }
                flow.stage = Stage::Callout(id);
                Next::Wait(Go::Paused)
            }
            Err(e) => {
                self.count(|c| c.origin_errors);
                Next::Event(Event::OriginFailed(format!("callout refused: {e}")))
            }
        }
    }

    /// The exchange's last action: its write, then its answer.
    fn done(
        &mut self,
        plan: &Plan<'_>,
        flow: &mut Flow,
        done: Done<Hold, Arc<StoredObject>, ()>,
        now: Timestamp,
    ) -> Go {
        let Done {
            write,
            respond,
            refresh,
        } = done;
        let written = write.and_then(|w| self.write(flow, w, now));
        let go = match self.stream() {
            Some(s) if !flow.gone => self.answer(s, flow, respond, written, now),
            _ => {
                flow.stage = Stage::Answered;
                Go::Paused
            }
        };
        if let Some(bg) = refresh {
            // Run on the main thread after this answer: the stream may end first.
            let cx = Cx::new(&self.sh.policy, plan, self.client, &flow.want.fields);
            let ex = Exchange::refresh(cx, bg, now)
                .lookup_applies_bans()
                .found_carries_body();
            self.sh.queue(Job {
                flow: Flow {
                    ex,
                    at: flow.at,
                    want: flow.want.clone(),
                    forward: Forward::default(),
                    stage: Stage::Deciding,
                    answer: None,
                    started: now,
                    refused: false,
                    collapsed: false,
                    out: Out::LocalReply,
                    gone: false,
                },
                inputs: self.inputs.clone(),
                client: self.client.clone(),
            });
        }
        go
    }

    /// Carries out a write; returns the object written (or built and refused: the answer
    /// is still this client's). The handle, with its permit, goes after.
    fn write(&self, flow: &mut Flow, w: Write<Hold>, now: Timestamp) -> Option<Arc<StoredObject>> {
        let Write { handle, op } = w;
        let store = &self.sh.store;
        let now_ms = now.as_millis();
        let written = match op {
            WriteOp::Insert { meta, body, .. } => {
                let obj = StoredObject::new(flow.want.key.clone(), *meta, body);
                let get = |k: &str| store.get(k);
                let (obj, ok, marker) = if obj.h.meta.pass {
                    (obj, true, None)
                } else {
                    place(&self.sh.policy, &flow.want, obj, get, now)
                };
                if let Some(m) = marker {
                    self.count_by(|c| c.evictions, store.insert(m, now_ms, None).evicted);
                }
                flow.refused = !ok;
                Some(if ok {
                    let ins = store.insert(obj, now_ms, None);
                    self.count_by(|c| c.evictions, ins.evicted);
                    ins.obj
                } else {
                    Arc::new(obj)
                })
            }
            WriteOp::Update { meta, .. } => handle.found.as_ref().map(|base| {
                let fresh = StoredObject::new(base.h.key.clone(), *meta, base.body.clone());
                // A ban or purge added while the revalidation was out covers `base`: a
                // 304 must not give it a new insertion time (the filter's `freshen`).
                let (target, fields) = (&flow.want.target, &flow.want.fields);
                if self.sh.bans.check(base, target, fields) == Check::Banned {
                    return Arc::new(fresh);
                }
                let ins = store.insert(fresh, now_ms, Some(base.h.version));
                self.count_by(|c| c.evictions, ins.evicted);
                ins.obj
            }),
            WriteOp::Failure { .. } => {
                self.sh.record_failure(&flow.want.key, now_ms);
                None
            }
            WriteOp::Cancel => None,
        };
        drop(handle);
        written
    }

    /// The client's answer.
    fn answer(
        &self,
        s: Stream,
        flow: &mut Flow,
        respond: Respond<Arc<StoredObject>, ()>,
        written: Option<Arc<StoredObject>>,
        now: Timestamp,
    ) -> Go {
        let reply = match respond {
            Respond::Object {
                status,
                found,
                meta,
                cookies,
            } => {
                let found = found.map(|(o, ())| o);
                let obj = meta.pick(found, written).map(|src| match src {
                    Source::Stored(o) => o,
                    Source::Own(own, o) => {
                        Arc::new(StoredObject::new(o.h.key.clone(), *own, o.body.clone()))
                    }
                });
                flow.stage = Stage::Answered;
                match obj {
                    Some(o) => {
                        let status = if flow.refused {
                            CacheStatus::Pass
                        } else {
                            status
                        };
                        // A MISS was counted when its fill was sent.
                        match status {
                            CacheStatus::Hit => self.count(|c| c.hits),
                            CacheStatus::Stale => self.count(|c| c.stale),
                            CacheStatus::Pass => self.count(|c| c.passes),
                            _ => {}
                        }
                        return self.respond(s, &o, status, now, &cookies, flow.out);
                    }
                    None => Some(unavailable()),
                }
            }
            Respond::Unstored { body, .. } => {
                self.count(|c| c.passes);
                return self.unstored(s, flow, body);
            }
            Respond::Pass => {
                self.count(|c| c.passes);
                flow.forward.apply(s, &self.sh.policy);
                flow.stage = Stage::Passed;
                return Go::Upstream;
            }
            Respond::Refreshed(_) => None,
            Respond::NotCached => Some(cachet_http::reply::failure(Failure::NotCached)),
            Respond::Unavailable(_) => Some(unavailable()),
            Respond::Broken(_) => Some(cachet_http::reply::failure(Failure::Cache {
                retry_after_secs: retry_after(),
            })),
        };
        flow.stage = Stage::Answered;
        if let Some(r) = reply {
            s.send_reply(&r);
        }
        Go::Paused
    }

    /// A stored object as the local reply (`cachet_http::deliver` decides status, headers
    /// and bytes), with a per-user 304's own `Set-Cookie` lines (`extra`).
    fn respond(
        &self,
        s: Stream,
        obj: &StoredObject,
        status: CacheStatus,
        now: Timestamp,
        extra: &Fields,
        out: Out,
    ) -> Go {
        let d = cachet_http::deliver(&obj.h.meta, self.client, now, status);
        // Inflated per identity client (the filter's in-VM tier keeps such a copy; the
        // process-wide store keeps one representation).
        let inflated = if d.inflate() {
            let Ok(b) = cachet_policy::object::gunzip(&obj.body) else {
                let r = cachet_http::reply::failure(Failure::Cache {
                    retry_after_secs: retry_after(),
                });
                s.send_reply(&r);
                return Go::Paused;
            };
            Some(b)
        } else {
            None
        };
        let bytes: &[u8] = inflated.as_deref().unwrap_or(&obj.body);
        let head = d.head(bytes.len() as u64);
        let body = head.body.select(bytes);
        let mut h: Vec<(&str, &[u8])> = (head.headers.iter())
            .map(|(n, v)| (n.as_ref(), v.as_ref()))
            .collect();
        h.extend(extra.iter().map(|(n, v)| (n.as_str(), v.as_slice())));
        send_as(s, out, head.status, &h, body)
    }

    /// The origin's answer, not stored: a callout's as a local reply; a router answer
    /// held whole likewise; one not read streams on with the edge's edits.
    fn unstored(&self, s: Stream, flow: &mut Flow, body: Option<Vec<u8>>) -> Go {
        let limit = self.sh.policy.config().edge.max_object_bytes;
        match flow.answer.take() {
            Some(Answer::Callout { body: held, .. })
                if held.len() as u64 > limit && body.is_none() =>
            {
                // Too large to hold: this request goes through the router, streamed.
                flow.forward.apply(s, &self.sh.policy);
                flow.stage = Stage::Passed;
                Go::Upstream
            }
            Some(Answer::Callout {
                status,
                headers,
                body: held,
            }) => {
                flow.stage = Stage::Answered;
                let b = body.unwrap_or(held);
                let out = flow.out;
                self.send_origin(s, out, status, &headers, &b)
            }
            Some(Answer::Router {
                headers, respaced, ..
            }) => match body {
                None => {
                    flow.stage = Stage::Streaming;
                    edit_forwarded(s, &headers, &respaced, self.client);
                    Go::Downstream
                }
                Some(b) => {
                    flow.stage = Stage::Answered;
                    let status = text(&headers, ":status").parse().unwrap_or(502);
                    self.send_origin(s, flow.out, status, &headers, &b)
                }
            },
            None => {
                flow.stage = Stage::Answered;
                s.send_reply(&unavailable());
                Go::Paused
            }
        }
    }

    fn send_origin(&self, s: Stream, out: Out, status: u16, headers: &Fields, body: &[u8]) -> Go {
        let r = cachet_http::unstored::origin_reply(status, headers, body, self.client);
        let h: Vec<(&str, &[u8])> = r.lines.iter().map(|(n, v)| (*n, &**v)).collect();
        send_as(s, out, r.status, &h, r.body.as_deref())
    }
}

/// The body of the answer: a callout's is here already; the router's comes in the
/// response hooks (a declared length over the limit, or headers that ended the stream,
/// decide at once).
fn read_body(flow: &mut Flow, limit: u64) -> Next {
    match flow.answer.as_mut() {
        Some(Answer::Callout { body, .. }) if body.len() as u64 > limit => {
            Next::Event(Event::Oversize)
        }
        Some(Answer::Callout { body, .. }) => Next::Event(Event::Body(std::mem::take(body))),
        Some(Answer::Router { declared, .. }) if declared.is_some_and(|n| n > limit) => {
            Next::Event(Event::Oversize)
        }
        Some(Answer::Router { eos: true, .. }) => Next::Event(Event::Body(Vec::new())),
        Some(Answer::Router { .. }) => {
            flow.stage = Stage::Router;
            Next::Wait(Go::Paused)
        }
        None => Next::Event(Event::BodyBroke("no origin answer".into())),
    }
}

/// How an answer reaches the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Out {
    /// Encoded by the filter itself (the request is held, no response has begun).
    Encode,
    /// The response in flight is rewritten in place: its headers are held and its whole
    /// body is buffered (a router fill's answer, at its last body chunk).
    Rewrite,
    /// A local reply (any other point of the response path).
    LocalReply,
}

/// Sends an answer as `out` says; what the hook returns then.
fn send_as(s: Stream, out: Out, status: u16, h: &[(&str, &[u8])], body: Option<&[u8]>) -> Go {
    match out {
        Out::Encode => {
            s.encode(status, h, body);
            Go::Paused
        }
        Out::LocalReply => {
            s.send(status, h, body);
            Go::Paused
        }
        Out::Rewrite => {
            s.rewrite_response(status, h, body.unwrap_or_default());
            Go::Downstream
        }
    }
}

fn retry_after() -> u64 {
    cachet_refresh::retry_after_secs(cachet_http::exchange::RETRY_AFTER)
}

fn unavailable() -> cachet_http::Reply {
    cachet_http::reply::failure(Failure::Origin {
        retry_after_secs: retry_after(),
    })
}
