//! One VM's state and the request path: plan, two-tier lookup, collapsing, origin fetches, responses.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use cachet_http::{Answer, CacheStatus, Failure, Reply, ResponseFields, fields, vary};
use cachet_policy::object::{self, Meta};
use cachet_policy::{
    Decision, NoStore, Plan, Policy, PolicyError, RequestView, Storability, Synth, WorkspaceMode,
    accepts_encoding,
};
use cachet_refresh::{
    ConditionalHeaders, Draw, EntryTimes, ErrorAction, Freshness, NotModified, Revalidation,
    Timestamp, Validators, conditional_headers, decide, on_origin_error, on_revalidation,
    retry_after_secs,
};
use cachet_workspace::{ClearMode, Config as WsConfig, Workspace};
use proxy_wasm::types::{BufferType, LogLevel, MapType};

use crate::admin::{self, AdminRequest};
use crate::bans::{self, BanState, Check, Req};
use crate::locks::{self, Lock};
use crate::metrics::Metrics;
use crate::store::{LocalTier, SharedTier, StoredObject};
use crate::{Flag, host};

/// Shared-data key of the lurker lease (owner VM, lease end, cursor).
const LURKER_KEY: &str = "cachet.lurker";

/// Shared-data key of the VM id counter.
const VM_ID_KEY: &str = "cachet.vmid";

/// `Retry-After` of a `503` when the origin failed and nothing may be served (the edge
/// app's value).
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Everything that can go wrong in the filter.
#[derive(Debug, thiserror::Error)]
pub enum EnvoyError {
    /// The plugin configuration is missing or invalid.
    #[error("configuration: {0}")]
    Config(#[from] PolicyError),
    /// The origin failed (no cluster, timeout, reset, or a 5xx while revalidating) and
    /// nothing may be served in its place.
    #[error("origin unavailable: {reason}")]
    Origin {
        /// What failed.
        reason: String,
        /// `Retry-After`, whole seconds (`cachet_refresh::on_origin_error`).
        retry_after_secs: u64,
    },
    /// A stored body could not be decoded.
    #[error("body: {0}")]
    Body(#[from] std::io::Error),
}

impl EnvoyError {
    /// The origin failed with nothing servable: `503` after [`RETRY_AFTER`].
    fn unavailable(reason: impl Into<String>) -> Self {
        Self::Origin {
            reason: reason.into(),
            retry_after_secs: retry_after_secs(RETRY_AFTER),
        }
    }
}

/// The one place filter errors become HTTP responses (the mapping itself is
/// `cachet_http::reply`'s).
fn error_response(e: &EnvoyError) -> Reply {
    cachet_http::reply::failure(match e {
        EnvoyError::Config(_) => Failure::Config,
        EnvoyError::Origin {
            retry_after_secs, ..
        } => Failure::Origin {
            retry_after_secs: *retry_after_secs,
        },
        EnvoyError::Body(_) => Failure::Cache {
            retry_after_secs: retry_after_secs(RETRY_AFTER),
        },
    })
}

/// What the client asked for that shapes the answer (`cachet_http::Client`).
pub use cachet_http::Client;

/// What an origin fetch needs after the request callback returned: the request inputs
/// (to re-plan, so the filter never builds a `Plan` by hand) and the results it uses.
#[derive(Debug, Clone)]
pub struct Job {
    scheme: String,
    host_header: Option<String>,
    path: String,
    ua: Option<Vec<u8>>,
    fwd_proto: Option<String>,
    fwd_host: Option<String>,
    route_index: usize,
    device: &'static str,
    target: String,
    host: String,
    key: String,
    slot: u32,
    fwd: Vec<(String, String)>,
}

impl Job {
    /// The plan of the `GET` this job fetches (pure, a few microseconds).
    fn plan<'a>(&'a self, p: &'a Policy, now: SystemTime) -> Plan<'a> {
        let view = RequestView {
            method: "GET",
            scheme: &self.scheme,
            host: self.host_header.as_deref(),
            path_and_query: &self.path,
            user_agent: self.ua.as_deref(),
            has_authorization: false,
            forwarded_proto: self.fwd_proto.as_deref(),
            forwarded_host: self.fwd_host.as_deref(),
        };
        p.plan(&view, now)
    }
}

/// A request parked until another request's fetch of the same slot completes.
struct Waiter {
    ctx: u32,
    job: Job,
    client: Client,
    headers: Vec<(String, Vec<u8>)>,
    deadline_ms: u64,
    passed: Flag,
}

/// A background refresh (refresh-ahead, stale within grace): the job, the stored object
/// it refreshes (whose validators make the request conditional) and the request headers of
/// the lookup that scheduled it (a 304 is checked against bans added meanwhile).
struct Refresh {
    job: Job,
    base: Rc<StoredObject>,
    headers: Vec<(String, Vec<u8>)>,
}

/// A callout the root context made.
enum RootCall {
    Refresh {
        refresh: Box<Refresh>,
        started_ms: u64,
    },
    Feed,
}

/// An origin answer to a callout (`None` from [`OriginResponse::read`] when the callout
/// failed: reset, timeout, no cluster; Envoy then gives no headers).
struct OriginResponse {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    /// Round trip since the fetch was dispatched (XFetch's `delta`).
    elapsed: Duration,
}

impl OriginResponse {
    /// Reads the callout answer being delivered (`nh` headers, `body_size` bytes).
    fn read(nh: usize, body_size: usize, started_ms: u64) -> Option<Self> {
        let headers = if nh == 0 {
            Vec::new()
        } else {
            host::headers(MapType::HttpCallResponseHeaders)
        };
        let status = status_of(&headers)?;
        Some(Self {
            status,
            body: host::buffer(BufferType::HttpCallResponseBody, body_size),
            headers,
            elapsed: Duration::from_millis(host::now_ms().saturating_sub(started_ms)),
        })
    }

    /// All values of header `name`, comma-joined (RFC 9110 §5.3).
    /// Whether its fields make the response per-user (`ResponseView::per_user`).
    fn per_user(&self) -> Option<NoStore> {
        ResponseFields::read(self.status, self.headers.as_slice())
            .view()
            .per_user()
    }

    fn joined(&self, name: &str) -> Option<String> {
        let v: Vec<String> = self
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .collect();
        (!v.is_empty()).then(|| v.join(", "))
    }

    /// The validators it carries (`ETag`, `Last-Modified`, RFC 9110 §8.8).
    fn validators(&self) -> Validators {
        Validators {
            etag: header(&self.headers, "etag").map(str::to_owned),
            last_modified: header(&self.headers, "last-modified").map(str::to_owned),
        }
    }

    /// What a 304 says about the stored object: its freshness lifetime under the route
    /// (`Policy::revalidated_ttl`, the precedence `storability` uses; `None` keeps the
    /// stored TTL), new validators, the round trip, and whether its fields make the
    /// response per-user (then it cannot freshen: `Revalidation::Uncacheable`).
    fn not_modified(&self, p: &Policy, plan: &Plan<'_>) -> NotModified {
        let ttl = p.revalidated_ttl(
            plan,
            self.joined("cache-control").as_deref(),
            self.joined("surrogate-control").as_deref(),
        );
        let Validators {
            etag,
            last_modified,
        } = self.validators();
        NotModified {
            ttl,
            etag,
            last_modified,
            delta: self.elapsed,
            per_user: self.per_user().is_some(),
        }
    }
}

/// What an origin response became.
enum Fetched {
    /// Stored: serve it from the cache format.
    Stored(Rc<StoredObject>),
    /// Not stored: serve the origin response as is (`PASS`).
    Pass,
}

/// What a revalidation of a stored object did (RFC 9111 §4.3.3, §4.3.4).
enum Revalidated {
    /// `304`: the stored body and headers with new times and validators, inserted in both
    /// tiers under a new version.
    Freshened(Rc<StoredObject>),
    /// A full response: handled as a fresh one (stored, or a hit-for-pass marker left in
    /// place of the stored object).
    Replaced(Fetched),
    /// A `304` that cannot be applied: a ban or purge added while the request was out
    /// matches the stored object (a 304 must not give it a new insertion time), or another
    /// fetch stored a newer object meanwhile (a lock lease ran out; the 304 answered our
    /// validators, not its). Nothing changes; a client still waiting is fetched for
    /// unconditionally.
    Unusable,
    /// A `304` whose fields make the response per-user (`private`, `no-store`,
    /// `Set-Cookie`): a hit-for-pass marker replaced the stored object; a client still
    /// waiting is fetched for unconditionally (and passed).
    Uncacheable,
    /// `5xx` or a failed callout: the stored object is kept as it is.
    Kept,
}

/// An object found by a lookup.
struct Found {
    obj: Rc<StoredObject>,
    /// Its state for this request (`Fresh`, `RefreshAhead`, `Stale`, `Expired`).
    fresh: Freshness,
    /// Its times after soft purges (what `fresh` was decided on).
    times: EntryTimes,
    tier: Tier,
}

/// State of one VM (one Envoy worker).
pub struct Vm {
    root_id: u32,
    id: Cell<u32>,
    policy: RefCell<Option<Rc<Policy>>>,
    shared: Cell<SharedTier>,
    local: RefCell<LocalTier>,
    bans: RefCell<BanState>,
    metrics: Cell<Metrics>,
    waiters: RefCell<Vec<Waiter>>,
    refresh_queue: RefCell<Vec<Refresh>>,
    /// Admin calls paused at their headers waiting for a body: `(context, since ms)`.
    admin_waiting: RefCell<Vec<(u32, u64)>>,
    calls: RefCell<HashMap<u32, RootCall>>,
    ws: RefCell<Option<Workspace>>,
    rng: Cell<u64>,
    next_feed_ms: Cell<u64>,
}

impl Vm {
    /// A VM whose root context is `root_id`.
    pub fn new(root_id: u32) -> Self {
        Self {
            root_id,
            id: Cell::new(0),
            policy: RefCell::new(None),
            shared: Cell::new(SharedTier {
                slots: 1024,
                bound: 0,
            }),
            local: RefCell::new(LocalTier::new(0)),
            bans: RefCell::new(BanState::default()),
            metrics: Cell::new(Metrics::default()),
            waiters: RefCell::new(Vec::new()),
            refresh_queue: RefCell::new(Vec::new()),
            admin_waiting: RefCell::new(Vec::new()),
            calls: RefCell::new(HashMap::new()),
            ws: RefCell::new(None),
            rng: Cell::new(0x9e37_79b9_7f4a_7c15),
            next_feed_ms: Cell::new(0),
        }
    }

    /// Creates the singleton shared-data entries (see [`host::shared_init`]) and takes a
    /// VM id (lock owner identity).
    pub fn init_shared(&self) {
        for k in [
            "cachet.dir",
            bans::LOG_KEY,
            bans::EPOCH_KEY,
            LURKER_KEY,
            VM_ID_KEY,
        ] {
            host::shared_init(k);
        }
        locks::init();
        for _ in 0..64 {
            let (v, cas) = host::shared_get(VM_ID_KEY);
            let n = v
                .as_deref()
                .and_then(|b| b.get(..4))
                .and_then(|b| b.try_into().ok())
                .map_or(0, u32::from_le_bytes)
                .wrapping_add(1);
            if host::shared_set(VM_ID_KEY, &n.to_le_bytes(), cas) {
                self.id.set(n);
                break;
            }
        }
        self.rng
            .set(self.rng.get() ^ host::now_ms() ^ (u64::from(self.id.get()) << 40));
    }

    /// Reads and applies the plugin configuration (`size` bytes, as the host announced).
    /// Returns `false` with a log line on any problem (Envoy then refuses the plugin).
    pub fn configure(&self, size: usize) -> bool {
        let Some(bytes) = host::plugin_configuration(size) else {
            host::log(
                LogLevel::Error,
                "cachet: plugin configuration is empty; give the cachet_policy::Config schema as JSON",
            );
            return false;
        };
        let text = match std::str::from_utf8(&bytes) {
            Ok(t) => t,
            Err(e) => {
                host::log(
                    LogLevel::Error,
                    &format!("cachet: plugin configuration is not UTF-8: {e}"),
                );
                return false;
            }
        };
        let policy = match cachet_policy::Config::from_json(text)
            .and_then(Policy::new)
            .map_err(EnvoyError::from)
        {
            Ok(p) => p,
            Err(e) => {
                host::log(
                    LogLevel::Error,
                    &format!("cachet: rejecting plugin configuration: {e}"),
                );
                return false;
            }
        };
        let cfg = policy.config();
        let ws = cfg.workspace;
        let mode = match ws.mode {
            WorkspaceMode::Watermark => ClearMode::Watermark,
            WorkspaceMode::Shadow => ClearMode::Shadow,
            WorkspaceMode::Full => ClearMode::Full,
        };
        let workspace = match Workspace::new(WsConfig {
            capacity_bytes: ws.capacity_bytes,
            mode,
            verify_one_in: ws.verify_one_in,
        }) {
            Ok(w) => w,
            Err(e) => {
                host::log(
                    LogLevel::Error,
                    &format!("cachet: rejecting plugin configuration: workspace: {e}"),
                );
                return false;
            }
        };
        self.shared.set(SharedTier {
            slots: crate::store::slot_count(cfg.envoy.shared_bytes),
            bound: cfg.envoy.shared_bytes,
        });
        *self.local.borrow_mut() = LocalTier::new(cfg.envoy.local_bytes);
        *self.ws.borrow_mut() = Some(workspace);
        host::set_tick(cfg.envoy.tick.0);
        self.metrics.set(Metrics::define());
        host::log(
            LogLevel::Info,
            &format!(
                "cachet: configured {} routes; shared tier {} bytes in {} slots, local tier {} bytes, tick {:?}",
                cfg.routes.len(),
                cfg.envoy.shared_bytes,
                crate::store::slot_count(cfg.envoy.shared_bytes),
                cfg.envoy.local_bytes,
                cfg.envoy.tick.0
            ),
        );
        *self.policy.borrow_mut() = Some(Rc::new(policy));
        true
    }

    fn policy(&self) -> Option<Rc<Policy>> {
        self.policy.borrow().clone()
    }

    fn m(&self) -> Metrics {
        self.metrics.get()
    }

    /// xorshift64*: draws for XFetch and workspace verification sampling.
    fn draw(&self) -> u64 {
        let mut x = self.rng.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn owner(&self, ctx: u32) -> u64 {
        (u64::from(self.id.get()) << 32) | u64::from(ctx)
    }

    fn sync_bans(&self) {
        let mut local = self.local.borrow_mut();
        let mut b = self.bans.borrow_mut();
        if b.sync(&mut local) {
            Metrics::set(self.m().bans, b.live() as u64);
        }
    }

    /// Freshness of `obj` for this request after bans and soft purges, and the times it
    /// was decided on; `None` when the object is of no use (banned, past its keep window,
    /// an expired hit-for-pass marker).
    fn classify(
        &self,
        p: &Policy,
        obj: &StoredObject,
        req: &Req<'_>,
        route_index: usize,
        now: Timestamp,
    ) -> Option<(Freshness, EntryTimes)> {
        let held = obj.h.meta.times;
        let mut times = held;
        match self.bans.borrow().check(obj, req) {
            Check::Banned => return None,
            Check::SoftPurged(at) => {
                times.ttl = times.ttl.min(at.saturating_duration_since(times.stored_at));
            }
            Check::Clean => {}
        }
        let policy = p
            .config()
            .routes
            .get(route_index)
            .map(|r| r.early_refresh)
            .unwrap_or_default();
        let f = match decide(Some(&times), now, &policy, Draw::from_bits(self.draw())) {
            // Soft-purged beyond its grace and keep but still held: revalidate it (the
            // edge app's "soft-purged without grace").
            Freshness::Miss if times != held && now < held.keep_end() => Freshness::Expired,
            f => f,
        };
        match f {
            Freshness::Fresh | Freshness::RefreshAhead => Some((f, times)),
            Freshness::Stale | Freshness::Expired if !obj.h.meta.pass => Some((f, times)),
            _ => None,
        }
    }

    /// Looks `job.key` up in both tiers.
    fn lookup(
        &self,
        p: &Policy,
        job: &Job,
        headers: &[(String, Vec<u8>)],
        now: Timestamp,
    ) -> Option<Found> {
        let req = Req {
            url: &job.target,
            headers,
        };
        let local = self
            .local
            .borrow_mut()
            .get(&job.key)
            .filter(|o| !o.h.meta.is_vary_marker());
        let mut best = None;
        if let Some(obj) = local {
            match self.classify(p, &obj, &req, job.route_index, now) {
                Some((fresh, times)) => {
                    let found = Found {
                        obj,
                        fresh,
                        times,
                        tier: Tier::Local,
                    };
                    if fresh == Freshness::Fresh {
                        return Some(found);
                    }
                    best = Some(found);
                }
                None => self.local.borrow_mut().remove(&job.key),
            }
        }
        // Not fresh locally: the shared tier may hold a newer version (another worker
        // refreshed it).
        let shared = self
            .shared
            .get()
            .get(&job.key)
            .filter(|o| !o.h.meta.is_vary_marker())?;
        if best
            .as_ref()
            .is_some_and(|f| f.obj.h.version >= shared.h.version)
        {
            return best;
        }
        let c = self.classify(p, &shared, &req, job.route_index, now);
        let obj = Rc::new(shared);
        if let Some((fresh, times)) = c {
            let ev = self.local.borrow_mut().put(Rc::clone(&obj));
            Metrics::add(self.m().local_evictions, ev);
            return Some(Found {
                obj,
                fresh,
                times,
                tier: Tier::Shared,
            });
        }
        best
    }

    /// Queues a background refresh of `base` (found for `job` by a request with `headers`)
    /// if nobody is fetching it already.
    fn schedule_refresh(
        &self,
        job: &Job,
        base: &Rc<StoredObject>,
        headers: &[(String, Vec<u8>)],
        now_ms: u64,
    ) {
        let Some(p) = self.policy() else { return };
        // The lock is re-entrant for its owner (this VM's root context): a refresh of the
        // slot queued or in flight here already covers it.
        let slot = job.slot;
        let pending = self
            .refresh_queue
            .borrow()
            .iter()
            .any(|r| r.job.slot == slot)
            || self.calls.borrow().values().any(
                |c| matches!(c, RootCall::Refresh { refresh, .. } if refresh.job.slot == slot),
            );
        let lease = now_ms + p.config().collapse.lease_ms;
        if !pending
            && locks::acquire(slot, self.owner(self.root_id), now_ms, lease) == Lock::Acquired
        {
            self.refresh_queue.borrow_mut().push(Refresh {
                job: job.clone(),
                base: Rc::clone(base),
                headers: headers.to_vec(),
            });
        }
    }

    /// Origin fetch headers for `job`; conditional (`If-None-Match` /
    /// `If-Modified-Since`, RFC 9111 §4.3.1) with `cond`.
    fn fetch_headers<'a>(
        p: &'a Policy,
        job: &'a Job,
        cond: &'a ConditionalHeaders,
    ) -> Vec<(&'a str, &'a str)> {
        let authority = if p.config().origin.override_host.is_empty() {
            job.host.as_str()
        } else {
            p.config().origin.override_host.as_str()
        };
        let mut h = vec![
            (":method", "GET"),
            (":path", job.target.as_str()),
            (":authority", authority),
            (":scheme", "http"),
            ("accept-encoding", "gzip"),
            (p.device_header(), job.device),
        ];
        for (n, v) in &job.fwd {
            h.push((n.as_str(), v.as_str()));
        }
        if let Some(v) = &cond.if_none_match {
            h.push(("if-none-match", v.as_str()));
        }
        if let Some(v) = &cond.if_modified_since {
            h.push(("if-modified-since", v.as_str()));
        }
        h
    }

    /// Dispatches the origin fetch of `job` to `envoy.cluster`, conditional on `base`'s
    /// validators when it has usable ones.
    ///
    /// # Errors
    /// The host's refusal (unknown cluster, bad headers).
    fn dispatch(
        p: &Policy,
        job: &Job,
        base: Option<&StoredObject>,
    ) -> Result<u32, proxy_wasm::types::Status> {
        // Unusable validators (not an entity-tag, control bytes, too long): unconditional.
        let cond = base
            .and_then(|b| conditional_headers(&b.h.meta.validators).ok())
            .unwrap_or_default();
        let h = Self::fetch_headers(p, job, &cond);
        host::dispatch(
            &p.config().envoy.cluster,
            &h,
            None,
            p.config().origin.first_byte_timeout.0,
        )
    }

    /// A content-free hit-for-pass marker for `job` (never a private byte stored).
    fn marker(p: &Policy, job: &Job, plan: &Plan<'_>, now: Timestamp) -> StoredObject {
        let mut meta = Meta::marker(plan.route, now, p.config().edge.hit_for_pass.0);
        meta.host = plan.host.to_string();
        meta.url = plan.target.to_string();
        meta.surrogate_keys.clone_from(&plan.surrogate_keys);
        meta.tag = object::object_tag(&job.key);
        StoredObject::new(job.key.clone(), meta, Vec::new())
    }

    /// Turns an origin response into a stored object, or into a hit-for-pass marker when
    /// the content is per-user (private, `no-store`, `Set-Cookie`) or, with `replacing`
    /// (it answers a revalidation of a stored object), whenever it may not be stored: the
    /// old copy must never be served again.
    fn store_response(
        &self,
        p: &Policy,
        job: &Job,
        r: &OriginResponse,
        replacing: bool,
    ) -> Fetched {
        let now = host::now();
        let now_ts = Timestamp::from_system_time(now);
        let plan = job.plan(p, now);
        let built = match Self::storable(p, &plan, job, r, now_ts) {
            Ok(obj) => obj,
            Err(private) => {
                if private || replacing {
                    self.insert(Self::marker(p, job, &plan, now_ts), now_ts);
                }
                return Fetched::Pass;
            }
        };
        match self.place_variant(p, job, built, now_ts) {
            Some(obj) => Fetched::Stored(self.insert(obj, now_ts)),
            None => Fetched::Pass,
        }
    }

    /// The vary marker stored under `key`, if the object there is one (local tier first).
    fn vary_marker(&self, key: &str) -> Option<Rc<StoredObject>> {
        let local = self.local.borrow_mut().get(key);
        let obj = match local {
            Some(o) => o,
            None => Rc::new(self.shared.get().get(key)?),
        };
        obj.h.meta.is_vary_marker().then_some(obj)
    }

    /// Points `job` at the variant its request selects when the URL's primary key holds a
    /// vary marker (`cachet_http::vary::variant_key`). `false` when the request's variant
    /// cannot be keyed (a varying field's value over the bound): answer it uncached.
    fn resolve_variant(&self, job: &mut Job, headers: &[(String, Vec<u8>)]) -> bool {
        if vary::is_variant_key(&job.key) {
            return true;
        }
        let Some(marker) = self.vary_marker(&job.key) else {
            return true;
        };
        match vary::variant_key(&job.key, &marker.h.meta.vary_fields, headers) {
            Some(k) => {
                job.slot = self.shared.get().slot_of(&k);
                job.key = k;
                true
            }
            None => false,
        }
    }

    /// An object whose origin `Vary` names request fields is one variant of its URL
    /// (RFC 9111 §4.1): it is stored under its variant key, and the primary key holds a
    /// vary marker listing the fields and the variants stored so far. `None` when the URL
    /// already has `[edge].max_variants` variants or the request's variant can't be keyed:
    /// answer it uncached.
    fn place_variant(
        &self,
        p: &Policy,
        job: &Job,
        mut obj: StoredObject,
        now: Timestamp,
    ) -> Option<StoredObject> {
        let fields = obj.h.meta.vary_fields.clone();
        if fields.is_empty() {
            return Some(obj);
        }
        let primary = job
            .key
            .split(vary::VARIANT_SEPARATOR)
            .next()
            .unwrap_or(&job.key)
            .to_owned();
        let key = if vary::is_variant_key(&job.key) {
            job.key.clone()
        } else {
            vary::variant_key(&primary, &fields, job.fwd.as_slice())?
        };
        let mut variants = self
            .vary_marker(&primary)
            .filter(|m| m.h.meta.vary_fields == fields)
            .map(|m| m.h.meta.variants.clone())
            .unwrap_or_default();
        if !variants.contains(&key) {
            if variants.len() >= p.config().edge.max_variants {
                return None;
            }
            variants.push(key.clone());
            let t = obj.h.meta.times;
            let hold = t.ttl.saturating_add(t.grace).saturating_add(t.keep);
            let mut marker = Meta::vary_marker(&obj.h.meta.route, now, hold, fields);
            marker.host.clone_from(&obj.h.meta.host);
            marker.url.clone_from(&obj.h.meta.url);
            marker.surrogate_keys.clone_from(&obj.h.meta.surrogate_keys);
            marker.tag = object::object_tag(&primary);
            marker.variants = variants;
            self.insert(StoredObject::new(primary, marker, Vec::new()), now);
        }
        obj.h.key = key;
        Some(obj)
    }

    /// The object to store for `r` (`Policy::storability`, `[edge].max_object_bytes`,
    /// gzip per `object::for_storage`), or `Err(private)` when it may not be stored.
    fn storable(
        p: &Policy,
        plan: &Plan<'_>,
        job: &Job,
        r: &OriginResponse,
        now: Timestamp,
    ) -> Result<StoredObject, bool> {
        let fields = ResponseFields::read(r.status, r.headers.as_slice());
        let mut view = fields.view();
        view.content_length = Some(r.body.len() as u64);
        let store = match p.storability(plan, &view) {
            Storability::Store(s) => s,
            Storability::DontStore(why) => return Err(why.is_private()),
        };
        if r.body.len() as u64 > p.config().edge.max_object_bytes {
            return Err(false);
        }
        let (encoding, stored) =
            object::for_storage(&r.body, view.content_encoding, store.compress)
                .map_err(|_| false)?;
        let compressed = store.compress && encoding == object::Encoding::Gzip;
        let meta = Meta {
            v: object::META_VERSION,
            pass: false,
            status: r.status,
            headers: cachet_http::fields::stored_fields(&r.headers, &store.no_cache_fields),
            vary: store.vary,
            encoding,
            stored_len: stored.len() as u64,
            origin_len: r.body.len() as u64,
            route: plan.route.to_owned(),
            host: plan.host.to_string(),
            url: plan.target.to_string(),
            surrogate_keys: store.surrogate_keys,
            times: EntryTimes::new(now, store.ttl)
                .with_grace(store.grace)
                .with_keep(store.keep)
                .with_delta(r.elapsed),
            validators: r.validators(),
            tag: object::object_tag(&job.key),
            initial_age_s: store.initial_age.as_secs(),
            compressed,
            stale_if_error_s: store.stale_if_error.as_secs(),
            vary_fields: store.vary_fields.clone(),
            variants: Vec::new(),
        };
        Ok(StoredObject::new(job.key.clone(), meta, stored))
    }

    /// Applies the origin's answer `r` (`None`: the callout failed) to a revalidation of
    /// `base`, found for `job` by a request with `headers` (`cachet_refresh::on_revalidation`):
    /// a 304 freshens it in both tiers (new version, so other workers' in-VM copies are
    /// replaced on their next non-fresh lookup), a full response replaces it, a 5xx or a
    /// failed callout keeps it (never replace a good object with a 5xx).
    fn revalidate(
        &self,
        p: &Policy,
        job: &Job,
        base: &StoredObject,
        headers: &[(String, Vec<u8>)],
        r: Option<&OriginResponse>,
    ) -> Revalidated {
        let Some(r) = r else {
            Metrics::inc(self.m().origin_errors);
            return Revalidated::Kept;
        };
        let at = host::now();
        let now = Timestamp::from_system_time(at);
        let meta = &base.h.meta;
        let plan = job.plan(p, at);
        let answer = r.not_modified(p, &plan);
        match on_revalidation(&meta.times, &meta.validators, r.status, now, answer) {
            Revalidation::Freshen { times, validators } => {
                // A ban or purge added while the request was out still applies to the
                // stored copy: a 304 must not give it a new insertion time.
                self.sync_bans();
                let req = Req {
                    url: &job.target,
                    headers,
                };
                let banned = self.bans.borrow().check(base, &req) == Check::Banned;
                let current = self.shared.get().get(&job.key);
                if banned || current.is_some_and(|c| c.h.version > base.h.version) {
                    return Revalidated::Unusable;
                }
                let fresh = meta.freshened(
                    times,
                    validators,
                    r.headers
                        .iter()
                        .map(|(n, v)| (n.as_str(), String::from_utf8_lossy(v))),
                );
                Metrics::inc(self.m().revalidated);
                let obj = StoredObject::new(base.h.key.clone(), fresh, base.body.clone());
                Revalidated::Freshened(self.insert(obj, now))
            }
            Revalidation::Uncacheable => {
                self.insert(Self::marker(p, job, &plan, now), now);
                Revalidated::Uncacheable
            }
            Revalidation::Replace => Revalidated::Replaced(self.store_response(p, job, r, true)),
            Revalidation::KeepStored => {
                Metrics::inc(self.m().origin_errors);
                Revalidated::Kept
            }
        }
    }

    /// Inserts into both tiers; returns the shared handle.
    fn insert(&self, mut obj: StoredObject, now: Timestamp) -> Rc<StoredObject> {
        let m = self.m();
        let r = self.shared.get().insert(&mut obj, now.as_millis());
        if r.stored {
            Metrics::add(m.evictions, r.evicted);
            Metrics::set(m.bytes_stored, r.bytes);
            Metrics::set(m.objects, r.objects);
        } else if r.conflict {
            Metrics::inc(m.store_conflicts);
        }
        let obj = Rc::new(obj);
        let ev = self.local.borrow_mut().put(Rc::clone(&obj));
        Metrics::add(m.local_evictions, ev);
        obj
    }

    /// Resolves parked requests of `slot` (all slots when `None`): serves them from the
    /// cache once the object is there, or lets them through to the origin (uncollapsed)
    /// when the fetch ended without a storable object or their wait ran out.
    fn wake(&self, slot: Option<u32>) {
        let Some(p) = self.policy() else { return };
        let now_ms = host::now_ms();
        let now = Timestamp::from_millis(now_ms);
        let mut list = std::mem::take(&mut *self.waiters.borrow_mut());
        let mut keep = Vec::with_capacity(list.len());
        for w in list.drain(..) {
            if slot.is_some_and(|s| s != w.job.slot) {
                keep.push(w);
                continue;
            }
            let mut job = w.job.clone();
            let found = if self.resolve_variant(&mut job, &w.headers) {
                self.lookup(&p, &job, &w.headers, now)
            } else {
                None
            };
            let held = locks::is_held(w.job.slot, now_ms);
            match found {
                Some(f) if !f.obj.h.meta.pass && f.fresh != Freshness::Expired => {
                    if !host::set_effective_context(w.ctx) {
                        continue;
                    }
                    let label = if f.fresh == Freshness::Stale {
                        Metrics::inc(self.m().stale);
                        CacheStatus::Stale
                    } else {
                        CacheStatus::Hit
                    };
                    self.respond(&f.obj, label, &w.client);
                }
                _ if held && now_ms < w.deadline_ms => keep.push(w),
                _ => {
                    if !host::set_effective_context(w.ctx) {
                        continue;
                    }
                    w.passed.set(true);
                    Metrics::inc(self.m().passes);
                    host::resume_request();
                }
            }
        }
        self.waiters.borrow_mut().extend(keep);
    }

    /// Sends a stored object to the current stream: the engine (`cachet_http::deliver`)
    /// decides status, headers and bytes; the header values go through the per-request
    /// workspace (cachet-workspace), cleared to its high watermark right after.
    fn respond(&self, obj: &StoredObject, status: CacheStatus, client: &Client) {
        let now = Timestamp::from_system_time(host::now());
        let meta = &obj.h.meta;
        let d = cachet_http::deliver(meta, client, now, status);
        let inflated = if d.inflate() {
            match object::gunzip(&obj.body) {
                Ok(b) => Some(b),
                Err(e) => {
                    send_error(&EnvoyError::Body(e));
                    return;
                }
            }
        } else {
            None
        };
        let bytes: &[u8] = inflated.as_deref().unwrap_or(&obj.body);
        let head = d.head(bytes.len() as u64);
        let body = match head.body {
            Answer::Empty => None,
            Answer::Whole => Some(bytes),
            Answer::Slice(a, b) => {
                bytes.get(usize::try_from(a).unwrap_or(usize::MAX)..usize::try_from(b).unwrap_or(0))
            }
        };
        let mut ws = self.ws.borrow_mut();
        let scratch = ws.as_mut().map(Workspace::scratch);
        let h: Vec<(&str, &str)> = head
            .headers
            .iter()
            .map(|(n, v)| {
                let v: &str = scratch
                    .as_ref()
                    .and_then(|s| s.alloc_str(v).ok())
                    .map_or(v.as_str(), |x| &*x);
                (n.as_str(), v)
            })
            .collect();
        host::send(head.status, &h, body);
        drop(h);
        drop(scratch);
        if let Some(w) = ws.as_mut() {
            let m = self.m();
            let draw = u32::try_from(self.draw() >> 32).unwrap_or(0);
            match w.reset(draw) {
                Ok(r) => Metrics::set(m.workspace_watermark, r.watermark as u64),
                Err(_) => Metrics::inc(m.workspace_violations),
            }
        }
    }

    /// Root tick: bans, parked requests, refreshes, lurker, ban feed.
    pub fn tick(&self) {
        if self.policy().is_none() {
            return;
        }
        self.sync_bans();
        self.wake(None);
        self.resume_admin_bodies();
        self.dispatch_refreshes();
        // One worker (the lurker-lease holder) lurks and polls the fleet ban feed.
        if self.lurk() {
            self.poll_feed();
        }
        Metrics::set(self.m().local_bytes, self.local.borrow().bytes());
    }

    /// An admin call's body arrived (or its stream ended): it no longer waits.
    fn admin_body_arrived(&self, ctx: u32) {
        self.admin_waiting.borrow_mut().retain(|(c, _)| *c != ctx);
    }

    /// Resumes admin calls whose body has not reached the filter within a tick: the host
    /// withholds bodies of paused streams (no `allow_on_headers_stop_iteration`).
    fn resume_admin_bodies(&self) {
        let Some(p) = self.policy() else { return };
        let now_ms = host::now_ms();
        let tick_ms = u64::try_from(p.config().envoy.tick.0.as_millis()).unwrap_or(u64::MAX);
        let due: Vec<u32> = {
            let mut waiting = self.admin_waiting.borrow_mut();
            let due = waiting
                .iter()
                .filter(|(_, since)| now_ms.saturating_sub(*since) >= tick_ms)
                .map(|(c, _)| *c)
                .collect();
            waiting.retain(|(_, since)| now_ms.saturating_sub(*since) < tick_ms);
            due
        };
        for ctx in due {
            if host::set_effective_context(ctx) {
                host::resume_request();
            }
        }
    }

    fn dispatch_refreshes(&self) {
        let Some(p) = self.policy() else { return };
        let jobs = std::mem::take(&mut *self.refresh_queue.borrow_mut());
        for refresh in jobs {
            let started_ms = host::now_ms();
            if let Ok(token) = Self::dispatch(&p, &refresh.job, Some(&refresh.base)) {
                Metrics::inc(self.m().refreshes);
                self.calls.borrow_mut().insert(
                    token,
                    RootCall::Refresh {
                        refresh: Box::new(refresh),
                        started_ms,
                    },
                );
            } else {
                Metrics::inc(self.m().origin_errors);
                locks::release(refresh.job.slot, self.owner(self.root_id));
            }
        }
    }

    /// A root callout answered (refresh or ban feed).
    pub fn on_root_callout(&self, token: u32, nh: usize, body_size: usize) {
        let Some(call) = self.calls.borrow_mut().remove(&token) else {
            return;
        };
        let Some(p) = self.policy() else { return };
        match call {
            RootCall::Refresh {
                refresh,
                started_ms,
            } => {
                let r = OriginResponse::read(nh, body_size, started_ms);
                let Refresh { job, base, headers } = *refresh;
                // Whatever the answer, the lock goes: after a kept copy (5xx, failed
                // callout, banned meanwhile) the next request schedules a new refresh.
                let _ = self.revalidate(&p, &job, &base, &headers, r.as_ref());
                locks::release(job.slot, self.owner(self.root_id));
                self.wake(Some(job.slot));
            }
            RootCall::Feed => self.apply_feed(&p, OriginResponse::read(nh, body_size, 0)),
        }
    }

    /// One lurker step if this VM holds (or takes) the lurker lease; returns whether it
    /// does.
    fn lurk(&self) -> bool {
        let Some(p) = self.policy() else { return false };
        let cfg = p.config();
        let now_ms = host::now_ms();
        let lease_ms = u64::try_from(cfg.envoy.tick.0.as_millis())
            .unwrap_or(1000)
            .saturating_mul(10);
        let (v, cas) = host::shared_get(LURKER_KEY);
        let v = v.unwrap_or_default();
        let field = |o: usize| -> u64 {
            v.get(o..o + 8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_le_bytes)
        };
        let (owner, lease_end, cursor) = (field(0), field(8), field(16));
        let me = u64::from(self.id.get());
        if owner != me && lease_end > now_ms {
            return false;
        }
        let dir = SharedTier::dir();
        let m = self.m();
        let budget = cfg.bans.lurker_budget;
        let mut next = cursor;
        let mut examined = 0usize;
        let mut evicted = 0u64;
        let mut finished = true;
        for e in dir.entries.iter().filter(|e| e.version > cursor) {
            if examined >= budget {
                finished = false;
                break;
            }
            examined += 1;
            next = e.version;
            let obj = SharedTier::get_slot(e.slot);
            let gone = match &obj {
                None => true,
                Some(o) if o.h.version != e.version => true,
                Some(o) => e.end_ms <= now_ms || self.bans.borrow().check_objects_only(o),
            };
            if gone {
                let clear = obj.as_ref().is_some_and(|o| o.h.version == e.version);
                if let Some((bytes, objects)) = SharedTier::remove(e.slot, e.version, clear) {
                    evicted += 1;
                    Metrics::set(m.bytes_stored, bytes);
                    Metrics::set(m.objects, objects);
                }
            }
        }
        Metrics::add(m.lurker_examined, examined as u64);
        Metrics::add(m.lurker_evicted, evicted);
        if finished {
            next = 0;
            Metrics::inc(m.lurker_passes);
            let dir = SharedTier::dir();
            Metrics::set(m.bytes_stored, dir.bytes);
            Metrics::set(m.objects, dir.entries.len() as u64);
            let oldest = dir
                .entries
                .iter()
                .map(|e| e.stored_at_ms)
                .min()
                .unwrap_or(now_ms);
            if bans::trim_not_after(oldest.min(now_ms)) > 0 {
                self.sync_bans();
            }
        }
        let mut out = Vec::with_capacity(24);
        out.extend_from_slice(&me.to_le_bytes());
        out.extend_from_slice(&(now_ms + lease_ms).to_le_bytes());
        out.extend_from_slice(&next.to_le_bytes());
        // Losing this CAS means another worker took the lease meanwhile: it lurks next.
        host::shared_set(LURKER_KEY, &out, cas)
    }

    fn poll_feed(&self) {
        let Some(p) = self.policy() else { return };
        let cfg = &p.config().envoy;
        if cfg.ban_feed_cluster.is_empty() {
            return;
        }
        let now_ms = host::now_ms();
        if now_ms < self.next_feed_ms.get() {
            return;
        }
        let interval = u64::try_from(cfg.ban_feed_interval.0.as_millis()).unwrap_or(5000);
        self.next_feed_ms.set(now_ms + interval);
        let auth = format!("Bearer {}", p.config().admin.token);
        let h = vec![
            (":method", "GET"),
            (":path", cfg.ban_feed_path.as_str()),
            (":authority", cfg.ban_feed_cluster.as_str()),
            (":scheme", "http"),
            ("authorization", auth.as_str()),
        ];
        if let Ok(token) = host::dispatch(&cfg.ban_feed_cluster, &h, None, Duration::from_secs(5)) {
            self.calls.borrow_mut().insert(token, RootCall::Feed);
        }
    }

    fn apply_feed(&self, p: &Policy, r: Option<OriginResponse>) {
        let Some(r) = r.filter(|r| r.status == 200) else {
            return;
        };
        let Ok(entries) = serde_json::from_slice::<Vec<bans::LogEntry>>(&r.body) else {
            host::log(
                LogLevel::Warn,
                "cachet: ban feed answered a body that is not a ban list",
            );
            return;
        };
        let (log, _) = bans::BanLog::read();
        let mut new = Vec::new();
        let mut through = log.feed_through;
        for e in entries.iter().filter(|e| e.id > log.feed_through) {
            through = through.max(e.id);
            let valid = match e.kind {
                bans::Kind::SoftPurge => e.key.is_some(),
                _ => bans::parse_ban(&e.expr).is_ok(),
            };
            if valid {
                new.push(bans::NewEntry {
                    kind: e.kind,
                    expr: e.expr.clone(),
                    key: e.key.clone(),
                    lurker_friendly: e.lurker_friendly,
                    at_ms: Some(e.at_ms),
                });
            }
        }
        if through == log.feed_through {
            return;
        }
        let max = p.config().bans.max_bans;
        if bans::append(&new, max, host::now_ms(), Some(through)).is_ok() {
            Metrics::inc(self.m().feed_updates);
            Metrics::add(self.m().bans_added, new.len() as u64);
            self.sync_bans();
        }
    }
}

/// Which tier served a hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    Local,
    Shared,
}

fn status_of(headers: &[(String, Vec<u8>)]) -> Option<u16> {
    headers
        .iter()
        .find(|(n, _)| n == ":status")
        .and_then(|(_, v)| std::str::from_utf8(v).ok())
        .and_then(|s| s.trim().parse().ok())
}

fn header<'a>(headers: &'a [(String, Vec<u8>)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| std::str::from_utf8(v).ok())
}

fn send_error(e: &EnvoyError) {
    send_reply(&error_response(e));
}

fn send_synth(s: &Synth) {
    send_reply(&cachet_http::reply::synth(s));
}

/// Sends a `cachet_http::Reply` as the stream's local response.
fn send_reply(r: &Reply) {
    let h: Vec<(&str, &str)> = r.headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
    host::send(r.status, &h, Some(&r.body));
}

/// Where one HTTP stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Not decided yet / answered locally.
    Local,
    /// Forwarded to the origin uncached.
    Pass,
    /// Waiting for the admin request body.
    AdminBody,
    /// Our origin fetch is in flight (collapsing leader).
    Fetching,
    /// Parked behind another request's fetch.
    Waiting,
}

/// One HTTP stream.
pub struct Http {
    vm: Rc<Vm>,
    ctx: u32,
    phase: Phase,
    passed: Flag,
    client: Client,
    job: Option<Job>,
    headers: Vec<(String, Vec<u8>)>,
    admin: Option<AdminRequest>,
    body: Vec<u8>,
    started_ms: u64,
    lock_held: bool,
    /// The stored object this stream's fetch revalidates (past grace, within keep) and
    /// the times it was found with.
    base: Option<(Rc<StoredObject>, EntryTimes)>,
    /// A passed unsafe request (`POST`, `PUT`, `DELETE`, `PATCH`): method, normalized host
    /// and target, to invalidate after a non-error answer (RFC 9111 §4.4).
    unsafe_target: Option<(String, String, String)>,
}

impl Http {
    /// A new stream of `vm`.
    pub fn new(vm: Rc<Vm>, ctx: u32) -> Self {
        Self {
            vm,
            ctx,
            phase: Phase::Local,
            passed: Rc::new(Cell::new(false)),
            client: Client::default(),
            job: None,
            headers: Vec::new(),
            admin: None,
            body: Vec::new(),
            started_ms: 0,
            lock_held: false,
            base: None,
            unsafe_target: None,
        }
    }

    /// `on_http_request_headers`.
    #[allow(
        clippy::too_many_lines,
        reason = "the request path reads top to bottom like edge-app's handle()"
    )]
    pub fn on_request_headers(&mut self, end_of_stream: bool) -> proxy_wasm::types::Action {
        use proxy_wasm::types::Action;
        let mut headers = host::headers(MapType::HttpRequestHeaders);
        // Client-supplied x-cachet-* never reach the origin (house rule).
        headers.retain(|(n, _)| {
            if fields::reserved(n) {
                host::set_header(MapType::HttpRequestHeaders, n, None);
                false
            } else {
                true
            }
        });
        let Some(p) = self.vm.policy() else {
            send_error(&EnvoyError::Config(PolicyError::Invalid(Vec::new())));
            return Action::Pause;
        };
        let get = |n: &str| header(&headers, n).map(str::to_owned);
        let path = get(":path").unwrap_or_default();
        let method = get(":method").unwrap_or_default();
        if path.starts_with(admin::PREFIX) {
            self.admin = Some(AdminRequest {
                method,
                path: path.split('?').next().unwrap_or("").to_owned(),
                authorization: get("authorization"),
                surrogate_key: get("surrogate-key"),
                soft: get("fastly-soft-purge").is_some_and(|v| v.trim() == "1"),
            });
            // Only `POST /.cachet/ban` reads its body: every other call is answered now,
            // even when a (possibly empty) body follows, so its headers never reach the
            // origin (whose answer could otherwise beat the local reply).
            if end_of_stream || !self.admin.as_ref().is_some_and(AdminRequest::reads_body) {
                self.answer_admin(&p);
                return Action::Pause;
            }
            // The ban expression follows; the headers wait for it. With the plugin option
            // `allow_on_headers_stop_iteration` (envoy.yaml) the body reaches
            // on_request_body and the headers never go upstream. Without it Envoy turns
            // the pause into StopAllIterationAndWatermark and withholds the body: the
            // root tick then resumes the stream (`Vm::resume_admin_bodies`), the headers
            // go upstream stripped of the token, and the buffered body reaches this filter
            // in the same dispatch, so the local reply comes before any upstream answer
            // (docs/envoy.md).
            host::set_header(MapType::HttpRequestHeaders, "authorization", None);
            self.phase = Phase::AdminBody;
            self.vm
                .admin_waiting
                .borrow_mut()
                .push((self.ctx, host::now_ms()));
            return Action::Pause;
        }
        // The request's own scheme: TLS on the downstream connection. Envoy may derive
        // `:scheme` from a client's X-Forwarded-Proto, which only counts when
        // `[edge].trust_forwarded` (the policy reads it separately).
        let scheme = if host::downstream_tls() {
            "https"
        } else {
            "http"
        }
        .to_owned();
        let host_h = get(":authority").or_else(|| get("host"));
        let ua = headers
            .iter()
            .find(|(n, _)| n == "user-agent")
            .map(|(_, v)| v.clone());
        let fwd_proto = get("x-forwarded-proto");
        let fwd_host = get("x-forwarded-host");
        let view = RequestView {
            method: &method,
            scheme: &scheme,
            host: host_h.as_deref(),
            path_and_query: &path,
            user_agent: ua.as_deref(),
            has_authorization: headers.iter().any(|(n, _)| n == "authorization"),
            forwarded_proto: fwd_proto.as_deref(),
            forwarded_host: fwd_host.as_deref(),
        };
        let now = host::now();
        let plan = p.plan(&view, now);
        // The client's device header was removed above; ours always replaces it.
        host::set_header(
            MapType::HttpRequestHeaders,
            plan.device_header,
            Some(plan.device.as_str()),
        );
        self.client = Client::read(&method, headers.as_slice());
        match &plan.decision {
            Decision::Synth(s) => {
                Metrics::inc(self.vm.m().synth);
                send_synth(s);
                return Action::Pause;
            }
            Decision::Pass(_) => {
                if cachet_http::invalidate::invalidates(&method) {
                    self.unsafe_target = Some((
                        method.clone(),
                        plan.host.to_string(),
                        plan.target.to_string(),
                    ));
                }
                if plan.target != path {
                    host::set_header(MapType::HttpRequestHeaders, ":path", Some(&plan.target));
                }
                self.phase = Phase::Pass;
                Metrics::inc(self.vm.m().passes);
                return Action::Continue;
            }
            Decision::Cache => {}
        }
        if plan.target != path {
            host::set_header(MapType::HttpRequestHeaders, ":path", Some(&plan.target));
        }
        let listed = fields::connection_listed(headers.as_slice());
        let fwd: Vec<(String, String)> = headers
            .iter()
            .filter(|(n, _)| {
                fields::on_fill(n, &listed) && !n.eq_ignore_ascii_case(p.device_header())
            })
            .filter_map(|(n, v)| Some((n.clone(), String::from_utf8(v.clone()).ok()?)))
            .collect();
        let job = Job {
            scheme: scheme.clone(),
            host_header: host_h.clone(),
            path: path.clone(),
            ua: ua.clone(),
            fwd_proto: fwd_proto.clone(),
            fwd_host: fwd_host.clone(),
            route_index: plan.route_index.unwrap_or_default(),
            device: plan.device.as_str(),
            target: plan.target.to_string(),
            host: plan.host.to_string(),
            key: plan.cache_key.clone(),
            slot: self.vm.shared.get().slot_of(&plan.cache_key),
            fwd,
        };
        drop(plan);
        self.headers = headers;
        self.cache(&p, job)
    }

    fn cache(&mut self, p: &Policy, mut job: Job) -> proxy_wasm::types::Action {
        use proxy_wasm::types::Action;
        let vm = Rc::clone(&self.vm);
        let m = vm.m();
        vm.sync_bans();
        if !vm.resolve_variant(&mut job, &self.headers) {
            // The request's variant can't be keyed (a varying field over the bound).
            self.phase = Phase::Pass;
            Metrics::inc(m.passes);
            return Action::Continue;
        }
        let now_ms = host::now_ms();
        let now = Timestamp::from_millis(now_ms);
        let mut base = None;
        if let Some(found) = vm.lookup(p, &job, &self.headers, now) {
            if found.obj.h.meta.pass {
                // Hit-for-pass: the key is private; go straight to the origin.
                self.phase = Phase::Pass;
                Metrics::inc(m.passes);
                return Action::Continue;
            }
            let label = match found.fresh {
                Freshness::Stale => {
                    Metrics::inc(m.stale);
                    vm.schedule_refresh(&job, &found.obj, &self.headers, now_ms);
                    Some(CacheStatus::Stale)
                }
                Freshness::RefreshAhead => {
                    vm.schedule_refresh(&job, &found.obj, &self.headers, now_ms);
                    Some(CacheStatus::Hit)
                }
                Freshness::Fresh => Some(CacheStatus::Hit),
                // Past grace, within keep: not served; the collapsing leader revalidates
                // it before answering.
                _ => None,
            };
            if let Some(label) = label {
                if label == CacheStatus::Hit {
                    Metrics::inc(if found.tier == Tier::Local {
                        m.hits_local
                    } else {
                        m.hits_shared
                    });
                }
                vm.respond(&found.obj, label, &self.client);
                return Action::Pause;
            }
            base = Some((found.obj, found.times));
        }
        if self.client.only_if_cached {
            // RFC 9111 §5.2.1.7: nothing servable is stored, and the origin is off limits.
            send_reply(&cachet_http::reply::failure(Failure::NotCached));
            return Action::Pause;
        }
        if self.client.only_if_cached {
            // RFC 9111 §5.2.1.7: nothing servable is stored, and the origin is off limits.
            send_reply(&cachet_http::reply::failure(Failure::NotCached));
            return Action::Pause;
        }
        let lease = now_ms + p.config().collapse.lease_ms;
        match locks::acquire(job.slot, vm.owner(self.ctx), now_ms, lease) {
            Lock::Held
                if vm
                    .waiters
                    .borrow()
                    .iter()
                    .filter(|w| w.job.slot == job.slot)
                    .count()
                    >= p.config().collapse.max_waiters =>
            {
                // The key's queue on this worker is full (`collapse.max_waiters`): go to the
                // origin uncollapsed rather than grow the queue without bound.
                self.phase = Phase::Pass;
                Metrics::inc(m.passes);
                Action::Continue
            }
            Lock::Held => {
                Metrics::inc(m.collapsed);
                self.phase = Phase::Waiting;
                vm.waiters.borrow_mut().push(Waiter {
                    ctx: self.ctx,
                    job: job.clone(),
                    client: self.client.clone(),
                    headers: self.headers.clone(),
                    deadline_ms: now_ms + p.config().collapse.max_wait_ms,
                    passed: Rc::clone(&self.passed),
                });
                self.job = Some(job);
                Action::Pause
            }
            l => {
                self.lock_held = l == Lock::Acquired;
                self.base = base;
                self.fetch(p, job)
            }
        }
    }

    /// Dispatches this stream's origin fetch (conditional when it revalidates a stored
    /// object).
    fn fetch(&mut self, p: &Policy, job: Job) -> proxy_wasm::types::Action {
        use proxy_wasm::types::Action;
        self.started_ms = host::now_ms();
        let r = Vm::dispatch(p, &job, self.base.as_ref().map(|(b, _)| &**b));
        self.job = Some(job);
        match r {
            Ok(_) => {
                Metrics::inc(self.vm.m().misses);
                self.phase = Phase::Fetching;
            }
            Err(e) => {
                Metrics::inc(self.vm.m().origin_errors);
                self.release();
                self.origin_failed(&format!("dispatch refused: {e:?}"));
                if let Some(job) = &self.job {
                    self.vm.wake(Some(job.slot));
                }
            }
        }
        Action::Pause
    }

    fn release(&mut self) {
        if self.lock_held {
            self.lock_held = false;
            if let Some(job) = &self.job {
                locks::release(job.slot, self.vm.owner(self.ctx));
            }
        }
    }

    /// The origin failed and this stream has nothing fresh: stale within grace or the
    /// object's stale-if-error window (`cachet_refresh::on_origin_error`), else a clean
    /// `503` with `Retry-After` and `Cache-Control: no-store`.
    fn origin_failed(&mut self, reason: &str) {
        let base = self.base.take();
        let now = Timestamp::from_system_time(host::now());
        let stale_if_error =
            Duration::from_secs(base.as_ref().map_or(0, |(o, _)| o.h.meta.stale_if_error_s));
        let action = on_origin_error(
            base.as_ref().map(|(_, t)| t),
            now,
            stale_if_error,
            RETRY_AFTER,
        );
        match (action, base) {
            (ErrorAction::ServeStale, Some((obj, _))) => {
                Metrics::inc(self.vm.m().stale);
                self.vm.respond(&obj, CacheStatus::Stale, &self.client);
            }
            (ErrorAction::Unavailable { retry_after_secs }, _) => send_error(&EnvoyError::Origin {
                reason: reason.to_owned(),
                retry_after_secs,
            }),
            (ErrorAction::ServeStale, None) => send_error(&EnvoyError::unavailable(reason)),
        }
    }

    /// The leader's origin fetch answered.
    pub fn on_fetch_response(&mut self, _token: u32, nh: usize, body_size: usize) {
        let vm = Rc::clone(&self.vm);
        let (Some(p), Some(job)) = (vm.policy(), self.job.clone()) else {
            return;
        };
        let r = OriginResponse::read(nh, body_size, self.started_ms);
        let base = self.base.clone();
        let fetched = match (&r, base) {
            (None, None) => {
                Metrics::inc(vm.m().origin_errors);
                None
            }
            (Some(r), None) => Some(vm.store_response(&p, &job, r, false)),
            (_, Some((obj, _))) => match vm.revalidate(&p, &job, &obj, &self.headers, r.as_ref()) {
                Revalidated::Freshened(fresh) => Some(Fetched::Stored(fresh)),
                Revalidated::Replaced(f) => Some(f),
                Revalidated::Unusable | Revalidated::Uncacheable => {
                    // The 304 does not apply to what is stored now, or made it per-user:
                    // fetch unconditionally.
                    self.base = None;
                    self.fetch(&p, job);
                    return;
                }
                Revalidated::Kept => None,
            },
        };
        match (fetched, &r) {
            // A freshened or replaced object waited on the origin: MISS.
            (Some(Fetched::Stored(obj)), _) => vm.respond(&obj, CacheStatus::Miss, &self.client),
            (Some(Fetched::Pass), Some(r)) => self.send_origin(r.status, &r.headers, &r.body),
            (_, r) => self.origin_failed(&r.as_ref().map_or_else(
                || "no response".to_owned(),
                |r| format!("status {}", r.status),
            )),
        }
        self.base = None;
        self.release();
        self.phase = Phase::Local;
        vm.wake(Some(job.slot));
    }

    /// Sends an origin response that was not stored (`PASS`).
    fn send_origin(&self, status: u16, headers: &[(String, Vec<u8>)], body: &[u8]) {
        let listed = fields::connection_listed(headers);
        let gz = header(headers, "content-encoding")
            .is_some_and(|e| e.trim().eq_ignore_ascii_case("gzip"));
        let accept = self
            .client
            .accept_encoding
            .as_deref()
            .and_then(|a| std::str::from_utf8(a).ok());
        let inflate = gz && !accepts_encoding(accept, "gzip");
        let inflated = if inflate {
            object::gunzip(body).ok()
        } else {
            None
        };
        let out: &[u8] = inflated.as_deref().unwrap_or(body);
        let mut h: Vec<(&str, &str)> = headers
            .iter()
            .filter(|(n, _)| fields::returned(n, &listed, false))
            .filter(|(n, _)| !(inflated.is_some() && n == "content-encoding"))
            .filter_map(|(n, v)| Some((n.as_str(), std::str::from_utf8(v).ok()?)))
            .collect();
        let len = out.len().to_string();
        h.push(("content-length", &len));
        h.push(("x-cache", "PASS"));
        if !headers.iter().any(|(n, _)| n == "age") {
            h.push(("age", "0"));
        }
        Metrics::inc(self.vm.m().passes);
        host::send(status, &h, (!self.client.head).then_some(out));
    }

    /// `on_http_request_body`: only admin calls read bodies.
    pub fn on_request_body(
        &mut self,
        size: usize,
        end_of_stream: bool,
    ) -> proxy_wasm::types::Action {
        use proxy_wasm::types::Action;
        if self.phase != Phase::AdminBody {
            return Action::Continue;
        }
        self.vm.admin_body_arrived(self.ctx);
        if size > admin::MAX_BODY_BYTES {
            host::send(
                413,
                &[("content-type", "application/json"), ("x-cache", "SYNTH")],
                Some(br#"{"error":"admin request body too large"}"#),
            );
            self.phase = Phase::Local;
            return Action::Pause;
        }
        if !end_of_stream {
            return Action::Pause;
        }
        self.body = host::buffer(BufferType::HttpRequestBody, size);
        if let Some(p) = self.vm.policy() {
            self.answer_admin(&p);
        }
        Action::Pause
    }

    fn answer_admin(&mut self, p: &Policy) {
        let Some(req) = self.admin.take() else { return };
        self.phase = Phase::Local;
        Metrics::inc(self.vm.m().synth);
        let a = admin::handle(p, &self.vm.m(), &req, &self.body, host::now_ms());
        send_reply(&a);
        // A ban or purge applies to this VM's next request at once.
        self.vm.sync_bans();
    }

    /// `on_http_response_headers`: responses from the origin through Envoy's router
    /// (passes) get the edge's headers.
    pub fn on_response_headers(&mut self) -> proxy_wasm::types::Action {
        if self.phase == Phase::Pass || self.passed.get() {
            let hs = host::headers(MapType::HttpResponseHeaders);
            let listed = fields::connection_listed(hs.as_slice());
            for (n, _) in &hs {
                // Envoy frames the body itself: its own length and transfer fields stay.
                let framing =
                    n.starts_with(':') || n == "content-length" || n == "transfer-encoding";
                if !fields::returned(n, &listed, false) && !framing {
                    host::set_header(MapType::HttpResponseHeaders, n, None);
                }
            }
            host::set_header(MapType::HttpResponseHeaders, "x-cache", Some("PASS"));
            if !hs.iter().any(|(n, _)| n == "age") {
                host::set_header(MapType::HttpResponseHeaders, "age", Some("0"));
            }
            if let (Some((method, h, target)), Some(p)) =
                (self.unsafe_target.take(), self.vm.policy())
            {
                let status = status_of(&hs).unwrap_or(0);
                let keys =
                    cachet_http::invalidation_keys(&p, &method, status, &h, &target, hs.as_slice());
                if bans::purge_keys(&keys, p.config().bans.max_bans, host::now_ms()).is_ok() {
                    Metrics::add(self.vm.m().purges, keys.len() as u64);
                    self.vm.sync_bans();
                }
            }
        }
        proxy_wasm::types::Action::Continue
    }

    /// The stream ended: give up a lock still held (client went away) and leave the
    /// waiting list.
    pub fn finish(&mut self) {
        self.release();
        self.vm.admin_body_arrived(self.ctx);
        if self.phase == Phase::Waiting {
            let ctx = self.ctx;
            self.vm.waiters.borrow_mut().retain(|w| w.ctx != ctx);
        }
        if let Some(job) = &self.job {
            self.vm.wake(Some(job.slot));
        }
    }
}
