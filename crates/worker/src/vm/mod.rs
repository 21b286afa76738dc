//! One VM's state (one Envoy worker), split along its seams: [`fill`] (origin fetches and
//! their answers applied to the cache, `cachet_store::cache`), [`waiters`] (collapsing and
//! background refreshes), [`deliver`] (answers), [`background`] (tick, lurker, ban feed),
//! [`stream`] (one HTTP stream).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use crate::host::{BufferType, LogLevel, MapType};
use cachet_http::{CacheStatus, Failure, Reply, fields};
use cachet_policy::inforce::{self, ConfigStatus, InForce, Source};
use cachet_policy::object;
use cachet_policy::{Config, Decision, Plan, Policy, PolicyError, Synth};
use cachet_refresh::{CollapseConfig, Parked, Refused, Timestamp, WaitQueue, retry_after_secs};
use cachet_store::cache::{Cache, Counts, Level, Wanted};
use cachet_workspace::Workspace;

use crate::admin::{self, AdminRequest};
use crate::bans;
use crate::host::{Host, Port};
use crate::locks::{self, Lock};
use crate::metrics::Metrics;
use crate::store::StoredObject;

/// Shared-data key of the VM id counter.
const VM_ID_KEY: &str = "cachet.vmid";

/// Where the filter's configuration is read from, in words (`GET /.cachet/config`).
pub const CONFIGURED_FROM: &str = "plugin configuration";

thread_local! {
    /// The last plugin configuration this VM (one worker thread) loaded. A rejected
    /// update (a new plugin configuration: a new root context in the same VM) keeps
    /// serving with it (`cachet_policy::inforce`, issue 27 item 13). One VM serves one
    /// Cachet plugin (`vm_id: cachet` in `envoy.yaml`); two plugins sharing a VM would
    /// share this.
    static LAST_GOOD: RefCell<Option<Rc<Policy>>> = const { RefCell::new(None) };
}

/// `Retry-After` of a `503` when the origin failed and nothing may be served (one value
/// for both adapters).
use cachet_http::exchange::RETRY_AFTER;

/// Everything that can go wrong in the filter.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
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

impl WorkerError {
    /// The origin failed with nothing servable: `503` after [`RETRY_AFTER`].
    fn unavailable(reason: impl Into<String>) -> Self {
        Self::Origin {
            reason: reason.into(),
            retry_after_secs: retry_after_secs(RETRY_AFTER),
        }
    }
}

/// What the client asked for that shapes the answer (`cachet_http::Client`).
pub use cachet_http::Client;

/// What a flow plans from after the request callback returned: the request inputs (the
/// same plan again at the request's own time, so the filter never builds a `Plan` by
/// hand).
#[derive(Debug)]
pub struct Job {
    /// The request fields the policy plans from.
    inputs: cachet_http::Inputs,
}

impl Job {
    /// The plan of the `GET` this job fetches, made at `now` (pure, a few microseconds):
    /// the same plan for the same `now`.
    fn plan<'a>(&'a self, p: &'a Policy, now: SystemTime) -> Plan<'a> {
        let mut view = self.inputs.view();
        view.method = "GET";
        p.plan(&view, now)
    }
}

/// A flow parked until another request's fetch of the same slot ends.
struct Waiter {
    flow: flow::FlowRef,
}

/// A callout the root context made.
enum RootCall {
    /// A flow's fetch sent from the root context (a woken follower that became the
    /// leader, a background refresh): the host answers it to the root.
    Flow(flow::FlowRef),
    Feed,
    Etcd(cachet_store::poller::EtcdCall),
}

/// An origin answer to a callout (`None` from [`OriginResponse::read`] when the callout
/// failed: reset, timeout, no cluster; Envoy then gives no headers).
#[derive(Debug)]
struct OriginResponse {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    /// The body; empty when [`Self::oversized`].
    body: Vec<u8>,
    /// The body is over `[edge].max_object_bytes`: it was left in Envoy, never copied
    /// into the VM, and can be neither stored nor sent from here.
    oversized: bool,
    /// Round trip since the fetch was dispatched (XFetch's `delta`).
    elapsed: Duration,
}

/// The header Envoy's router adds to every answer that came from an upstream (never to
/// its own local replies).
const UPSTREAM_TIME: &str = "x-envoy-upstream-service-time";

impl OriginResponse {
    /// Reads the callout answer being delivered (`nh` headers, `body_size` bytes); a body
    /// over `limit` bytes is not copied into the VM ([`Self::oversized`]). `None`: no
    /// answer, or a `5xx` Envoy made itself (no `x-envoy-upstream-service-time`).
    fn read(port: &Port, nh: usize, body_size: usize, started_ms: u64, limit: u64) -> Option<Self> {
        let headers = if nh == 0 {
            Vec::new()
        } else {
            let mut hs = port.headers(MapType::HttpCallResponseHeaders);
            // Joined by Envoy's header map like a router answer's (issue 30).
            cachet_http::fields::respace_joined_lists(&mut hs);
            hs
        };
        let status = status_of(&headers)?;
        // Envoy's async client answers a reset or a connection failure itself (`503`
        // "upstream connect error…"): an answer the origin never sent, told apart by the
        // header its router adds to every upstream answer. The callout failed.
        if status >= 500 && header(&headers, UPSTREAM_TIME).is_none() {
            return None;
        }
        let oversized = body_size as u64 > limit;
        Some(Self {
            status,
            body: if oversized {
                Vec::new()
            } else {
                port.buffer(BufferType::HttpCallResponseBody, body_size)
            },
            oversized,
            headers,
            elapsed: Duration::from_millis(port.now_ms().saturating_sub(started_ms)),
        })
    }
}

/// Header lines: names and byte values.
type Fields = Vec<(String, Vec<u8>)>;

/// State of one VM (one Envoy worker).
pub struct Vm {
    /// The way to the host this VM was given ([`Vm::new`]); a lock's permit holds it too.
    port: Rc<Port>,
    root_id: u32,
    id: Cell<u32>,
    policy: RefCell<Option<Rc<Policy>>>,
    /// How the policy came to be in force (`GET /.cachet/config`).
    config_status: RefCell<Option<ConfigStatus>>,
    cache: RefCell<Cache>,
    metrics: Cell<Metrics>,
    /// Requests parked behind fetches, by slot (`[collapse]` bounds).
    waiters: RefCell<WaitQueue<u32, Waiter>>,
    refresh_queue: RefCell<Vec<flow::FlowRef>>,
    /// Slots whose fetch ended in the current callback: their waiters are woken at its
    /// end ([`Vm::run_wakes`]).
    pending_wakes: RefCell<Vec<u32>>,
    /// Fetches of flows woken in a stream's callback, sent from the root context on a
    /// hurried tick ([`Vm::dispatch_root_fetches`], [`Vm::hurry`]).
    root_fetches: RefCell<Vec<(flow::FlowRef, Fields)>>,
    /// The root context's callback is running (a callout sent now is answered to it).
    root_active: Cell<bool>,
    /// The tick was hurried ([`Vm::hurry`]) and its next run is a short one.
    hurried: Cell<bool>,
    /// When the last full tick ran, ms.
    last_tick_ms: Cell<u64>,
    /// Admin calls paused at their headers waiting for a body: `(context, since ms)`.
    admin_waiting: RefCell<Vec<(u32, u64)>>,
    calls: RefCell<HashMap<u32, RootCall>>,
    ws: RefCell<Option<Workspace>>,
    /// The ban feed's schedule (`cachet_store::poller::FeedPoller`).
    feed: RefCell<cachet_store::poller::FeedPoller>,
    /// Fleet mode: the etcd poll schedule (`cachet_store::poller`).
    poller: RefCell<cachet_store::poller::Poller>,
    /// The workspace watermark last written to its gauge.
    watermark: Cell<u64>,
    /// This VM's in-VM tier bytes as last added to the `local_bytes` gauge, which sums
    /// every worker's tier (each adds its own change on its tick).
    local_reported: Cell<u64>,
}

impl Vm {
    /// A VM whose root context is `root_id`, on `host`.
    pub fn new(root_id: u32, host: Rc<dyn Host>) -> Self {
        Self {
            port: Rc::new(Port::new(host)),
            root_id,
            id: Cell::new(0),
            policy: RefCell::new(None),
            config_status: RefCell::new(None),
            cache: RefCell::new(Cache::new(0, 0, 0x9e37_79b9_7f4a_7c15, [0, 0])),
            metrics: Cell::new(Metrics::default()),
            waiters: RefCell::new(WaitQueue::new(CollapseConfig::default())),
            refresh_queue: RefCell::new(Vec::new()),
            pending_wakes: RefCell::new(Vec::new()),
            root_fetches: RefCell::new(Vec::new()),
            root_active: Cell::new(false),
            hurried: Cell::new(false),
            last_tick_ms: Cell::new(0),
            admin_waiting: RefCell::new(Vec::new()),
            calls: RefCell::new(HashMap::new()),
            ws: RefCell::new(None),
            feed: RefCell::default(),
            poller: RefCell::default(),
            watermark: Cell::new(u64::MAX),
            local_reported: Cell::new(0),
        }
    }

    /// Host calls this VM has made so far ([`Port::calls`]): the hit path's regression
    /// figure (`tests.rs` counts a hit's).
    pub fn host_calls(&self) -> u64 {
        self.port.calls()
    }

    /// Creates the singleton shared-data entries and takes a
    /// VM id (lock owner identity).
    pub fn init_shared(&self) {
        for k in [
            bans::LOG_KEY,
            bans::EPOCH_KEY,
            cachet_store::cache::LURKER_KEY,
            cachet_store::tier::HASH_KEY,
            VM_ID_KEY,
        ] {
            cachet_store::init(&*self.port, k);
        }
        locks::init(&*self.port);
        for _ in 0..64 {
            let (v, cas) = self.port.shared_get(VM_ID_KEY);
            let n = v
                .as_deref()
                .and_then(|b| b.get(..4))
                .and_then(|b| b.try_into().ok())
                .map_or(0, u32::from_le_bytes)
                .wrapping_add(1);
            if self.port.shared_set(VM_ID_KEY, &n.to_le_bytes(), cas) {
                self.id.set(n);
                break;
            }
        }
    }

    /// The seed of this VM's draws (XFetch, workspace sampling).
    fn seed(&self) -> u64 {
        0x9e37_79b9_7f4a_7c15 ^ self.port.now_ms() ^ (u64::from(self.id.get()) << 40)
    }

    /// Reads and applies the plugin configuration (`size` bytes, as the host announced).
    /// A configuration that is rejected never stops the filter (`cachet_policy::inforce`,
    /// issue 27 item 13): the VM keeps serving with the last configuration it loaded, or
    /// with the built-in default (`Config::default()`: every request passes uncached, the
    /// admin API is closed) when it never loaded one, logs the rejection at error level,
    /// sets the `config_rejected` gauge and answers it on `GET /.cachet/config`. Returns
    /// `false` (Envoy then refuses the plugin) only when even the fallback cannot be set
    /// up, which tests rule out.
    pub fn configure(&self, size: usize) -> bool {
        let bytes = self.port.plugin_configuration(size);
        let mut workspace = None;
        let configured = crate::plugin::setup(bytes.as_deref()).map(|s| {
            workspace = Some(s.workspace);
            Rc::new(s.policy)
        });
        let last_good = LAST_GOOD.with(|g| g.borrow().clone());
        let chosen = inforce::choose(CONFIGURED_FROM, Some(configured), last_good, || {
            Policy::new(Config::default())
                .map(Rc::new)
                .map_err(|e| e.to_string())
        });
        let InForce { policy, status } = match chosen {
            Ok(c) => c,
            Err(e) => {
                self.port.log(
                    LogLevel::Error,
                    &format!("cachet: the built-in configuration does not load: {e}"),
                );
                return false;
            }
        };
        if let Some(warning) = status.warning() {
            self.port.log(LogLevel::Error, &warning);
        }
        let workspace = match workspace.filter(|_| status.in_force == Source::Configured) {
            Some(w) => w,
            None => match Workspace::new(policy.config().workspace.workspace_config()) {
                Ok(w) => w,
                Err(e) => {
                    self.port
                        .log(LogLevel::Error, &format!("cachet: workspace: {e}"));
                    return false;
                }
            },
        };
        if status.in_force == Source::Configured {
            LAST_GOOD.with(|g| *g.borrow_mut() = Some(Rc::clone(&policy)));
        }
        self.apply(&policy, workspace, status.rejected.is_some());
        *self.policy.borrow_mut() = Some(policy);
        *self.config_status.borrow_mut() = Some(status);
        true
    }

    /// Sets this VM up for `policy`: a new cache (tiers sized by `[envoy]`), the collapsing
    /// bounds, the workspace, the tick, the metrics; logs what it set up.
    fn apply(&self, policy: &Policy, workspace: Workspace, rejected: bool) {
        let cfg = policy.config();
        let key = cachet_store::tier::hash_key(
            &*self.port,
            [self.port.random_u64(), self.port.random_u64()],
        );
        *self.cache.borrow_mut() = Cache::new(
            cfg.envoy.shared_bytes,
            cfg.envoy.local_bytes,
            self.seed(),
            key,
        );
        self.waiters.borrow_mut().reconfigure(cfg.collapse);
        *self.ws.borrow_mut() = Some(workspace);
        self.port.set_tick(cfg.envoy.tick.0);
        self.metrics.set(Metrics::define(&self.port));
        Metrics::set(&self.port, self.m().config_rejected, u64::from(rejected));
        self.port.log(
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
    }

    fn policy(&self) -> Option<Rc<Policy>> {
        self.policy.borrow().clone()
    }

    /// `GET /.cachet/config`'s body: the configuration in force and why the plugin
    /// configuration was rejected (`cachet_policy::inforce::ConfigStatus::body`).
    fn config_body(&self) -> String {
        self.config_status
            .borrow()
            .as_ref()
            .map_or_else(String::new, ConfigStatus::body)
    }

    fn m(&self) -> Metrics {
        self.metrics.get()
    }

    fn owner(&self, ctx: u32) -> u64 {
        (u64::from(self.id.get()) << 32) | u64::from(ctx)
    }

    fn sync_bans(&self) {
        self.cache.borrow_mut().sync_bans(&*self.port);
        self.flush();
    }

    /// Writes what the cache counted since the last flush to the metrics (no host call
    /// when nothing changed, as on a hit).
    fn flush(&self) {
        let c = self.cache.borrow_mut().take_counts();
        if c == Counts::default() {
            return;
        }
        let m = self.m();
        for (id, n) in [
            (m.evictions, c.evictions),
            (m.local_evictions, c.local_evictions),
            (m.store_conflicts, c.store_conflicts),
            (m.revalidated, c.revalidated),
            (m.origin_errors, c.origin_errors),
            (m.lurker_examined, c.lurker_examined),
            (m.lurker_evicted, c.lurker_evicted),
            (m.lurker_passes, c.lurker_passes),
        ] {
            Metrics::add(&self.port, id, n);
        }
        for (id, v) in [
            (m.bytes_stored, c.bytes_stored),
            (m.objects, c.objects),
            (m.bans, c.bans),
        ] {
            if let Some(v) = v {
                Metrics::set(&self.port, id, v);
            }
        }
    }
}

/// Forgets the last good configuration (tests: each starts as a fresh VM).
#[cfg(test)]
pub(crate) fn forget_last_good() {
    LAST_GOOD.with(|g| *g.borrow_mut() = None);
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

mod background;
mod deliver;
mod fill;
mod fleet;
mod flow;
mod stream;

use deliver::{error_response, send_error, send_reply, send_synth};
pub use stream::Http;
