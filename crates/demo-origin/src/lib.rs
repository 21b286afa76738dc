//! Demo blog origin (axum + tokio) that the Cachet edge app and Envoy filter sit in front of.
//!
//! The origin plays a small blog platform modelled on Hatena Blog: public blogs are cacheable
//! (`Cache-Control: public`, `Surrogate-Key`), private blogs and the account page are not,
//! article pages differ by the device class the edge sends in `X-Cachet-Device`, and
//! `/static/app.js` is served already gzip-encoded. Control endpoints under `/__origin/`
//! expose request counters, toggle blogs between public and private, set an artificial
//! response delay, and make the origin misbehave on revalidation (`304`s that say
//! `private` and set a cookie); they are never counted themselves.
//!
//! Tests and the demo usually run it in-process with [`spawn`]; the `cachet-demo-origin`
//! binary runs the same [`router`] through [`serve`].

mod content;
mod routes;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use content::{APP_JS, Device, ENTRY_COUNT, account_token, blog_css, noise};
pub use routes::{FAULT_FIELD, STALL, TEST_BODY, router};

/// Request header the edge sets to the device class (`pc` or `smartphone`).
pub const DEVICE_HEADER: &str = "x-cachet-device";
/// Response header carrying the origin's total request count after this request.
pub const REQUEST_NUMBER_HEADER: &str = "x-origin-request";
/// Response header carrying the delay the origin actually waited before answering, in ms.
pub const DELAY_HEADER: &str = "x-origin-delay-ms";
/// Path prefix of the control endpoints, which are not counted and not delayed.
pub const CONTROL_PREFIX: &str = "/__origin";

/// Most spans [`OriginState::request_log`] holds; later requests are not logged (until
/// [`OriginState::reset_stats`] clears it), so its memory stays bounded.
pub const REQUEST_LOG_CAP: usize = 1_000_000;

/// How long a stopping server waits for in-flight requests before it is torn down anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Configuration of a demo origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginConfig {
    /// Address to listen on; port 0 picks a free port (see [`RunningOrigin::addr`]).
    pub listen: SocketAddr,
    /// Delay applied before every counted (non-`/__origin`) response.
    pub delay: Duration,
    /// The blogs hosted on the platform, in listing order.
    pub blogs: Vec<BlogSeed>,
}

impl Default for OriginConfig {
    /// `127.0.0.1:8080`, no delay, blogs `alice` (public), `bob` (public), `carol` (private).
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            delay: Duration::ZERO,
            blogs: vec![
                BlogSeed::public("alice"),
                BlogSeed::public("bob"),
                BlogSeed::private("carol"),
            ],
        }
    }
}

impl OriginConfig {
    /// The default blogs and no delay, listening on `127.0.0.1:0` (a free port): what tests want.
    pub fn ephemeral() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            ..Self::default()
        }
    }
}

/// A blog the origin starts with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlogSeed {
    /// Blog name as it appears in URLs (`/blog/{name}/`, `/css/{name}.css`).
    pub name: String,
    /// Whether the blog starts out private.
    pub private: bool,
}

impl BlogSeed {
    /// A public blog named `name`.
    pub fn public(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            private: false,
        }
    }

    /// A private blog named `name`.
    pub fn private(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            private: true,
        }
    }
}

/// Request counters of the origin (the body of `GET /__origin/stats`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct Stats {
    /// Number of counted requests (everything outside `/__origin/`).
    pub total: u64,
    /// Counted requests per path; the key is the path plus `?` and the query when the request
    /// had one, exactly as received.
    pub by_path: BTreeMap<String, u64>,
}

impl Stats {
    /// Count for one key of [`Stats::by_path`] (0 when never requested).
    pub fn count(&self, path_and_query: &str) -> u64 {
        self.by_path.get(path_and_query).copied().unwrap_or(0)
    }
}

/// One counted request as the origin handled it (an entry of [`OriginState::request_log`]).
///
/// Times are since [`OriginState::started`] (when the state was built): `start` when the
/// request reached the origin's handler stack, `end` when its answer's status and headers
/// were ready (a body streamed after that is not included) or when the request was
/// dropped unanswered (the client went away).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct RequestSpan {
    /// The key [`Stats::by_path`] counts it under: the path, plus `?` and the query when
    /// the request had one.
    pub key: String,
    /// When the request arrived.
    pub start: Duration,
    /// When its answer was ready (or it was dropped); never before `start`.
    pub end: Duration,
}

/// Shared, cloneable state of one origin: blogs, counters and delay.
///
/// Handed to [`router`]/[`serve`]; [`RunningOrigin`] keeps a clone to read and steer it.
#[derive(Clone, Debug)]
pub struct OriginState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Blog name → private flag, plus the listing order.
    blogs: RwLock<Blogs>,
    stats: Mutex<Stats>,
    /// When the state was built: the zero of [`RequestSpan`] times.
    started: Instant,
    /// Spans of counted requests, oldest first, at most [`REQUEST_LOG_CAP`].
    request_log: Mutex<Vec<RequestSpan>>,
    delay_nanos: AtomicU64,
    /// The misbehaviour applied to counted requests ([`Fault`] as a number).
    fault: std::sync::atomic::AtomicU8,
    /// Every `304` says `Cache-Control: private` and sets a cookie.
    private_not_modified: AtomicBool,
    app_js_gzip: Vec<u8>,
}

#[derive(Debug)]
struct Blogs {
    order: Vec<String>,
    private: BTreeMap<String, bool>,
}

impl OriginState {
    /// Builds the state from a configuration (its listen address is not used here).
    pub fn new(config: OriginConfig) -> Self {
        let mut order = Vec::with_capacity(config.blogs.len());
        let mut private = BTreeMap::new();
        for seed in config.blogs {
            if private.insert(seed.name.clone(), seed.private).is_none() {
                order.push(seed.name);
            }
        }
        Self {
            inner: Arc::new(Inner {
                blogs: RwLock::new(Blogs { order, private }),
                stats: Mutex::new(Stats::default()),
                started: Instant::now(),
                request_log: Mutex::new(Vec::new()),
                delay_nanos: AtomicU64::new(duration_nanos(config.delay)),
                fault: std::sync::atomic::AtomicU8::new(Fault::None as u8),
                private_not_modified: AtomicBool::new(false),
                app_js_gzip: content::gzip(APP_JS.as_bytes()),
            }),
        }
    }

    /// Snapshot of the request counters.
    pub fn stats(&self) -> Stats {
        self.inner
            .stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Zeroes the request counters and clears the [request log](Self::request_log).
    pub fn reset_stats(&self) {
        *self
            .inner
            .stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Stats::default();
        self.inner
            .request_log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// When this state was built: the zero of every [`RequestSpan`]'s times.
    pub fn started(&self) -> Instant {
        self.inner.started
    }

    /// The spans of the counted requests that have ended, in the order they ended, at
    /// most [`REQUEST_LOG_CAP`] since the last [`Self::reset_stats`].
    pub fn request_log(&self) -> Vec<RequestSpan> {
        self.inner
            .request_log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Logs one ended request that arrived at `start` (dropped once the log is full).
    fn log_request(&self, key: String, start: Instant) {
        let end = Instant::now();
        let since = |t: Instant| t.saturating_duration_since(self.inner.started);
        let mut log = self
            .inner
            .request_log
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if log.len() < REQUEST_LOG_CAP {
            log.push(RequestSpan {
                key,
                start: since(start),
                end: since(end),
            });
        }
    }

    /// Counts one request under `key` and returns the new total.
    fn count(&self, key: String) -> u64 {
        let mut stats = self
            .inner
            .stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        stats.total += 1;
        *stats.by_path.entry(key).or_insert(0) += 1;
        stats.total
    }

    /// Whether blog `name` is private; `None` if there is no such blog.
    pub fn is_private(&self, name: &str) -> Option<bool> {
        self.inner
            .blogs
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .private
            .get(name)
            .copied()
    }

    /// Makes blog `name` private or public; `false` if there is no such blog.
    pub fn set_private(&self, name: &str, private: bool) -> bool {
        let mut blogs = self
            .inner
            .blogs
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        match blogs.private.get_mut(name) {
            Some(flag) => {
                *flag = private;
                true
            }
            None => false,
        }
    }

    /// All blogs in listing order with their private flag.
    pub fn blogs(&self) -> Vec<BlogSeed> {
        let blogs = self
            .inner
            .blogs
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        blogs
            .order
            .iter()
            .map(|name| BlogSeed {
                name: name.clone(),
                private: blogs.private.get(name).copied().unwrap_or(false),
            })
            .collect()
    }

    /// The delay applied before every counted response.
    pub fn delay(&self) -> Duration {
        Duration::from_nanos(self.inner.delay_nanos.load(Ordering::Relaxed))
    }

    /// Sets the delay applied before every counted response.
    pub fn set_delay(&self, delay: Duration) {
        self.inner
            .delay_nanos
            .store(duration_nanos(delay), Ordering::Relaxed);
    }

    /// The misbehaviour applied to counted requests now.
    pub fn fault(&self) -> Fault {
        match self.inner.fault.load(Ordering::Relaxed) {
            1 => Fault::Error,
            2 => Fault::Reset,
            _ => Fault::None,
        }
    }

    /// Sets [`OriginState::fault`] (`POST /__origin/fault?mode=none|error|reset`).
    pub fn set_fault(&self, fault: Fault) {
        self.inner.fault.store(fault as u8, Ordering::Relaxed);
    }

    /// Whether `304 Not Modified` answers say `Cache-Control: private` and set a cookie
    /// (an origin that turned a page per-user without changing its validators).
    pub fn private_not_modified(&self) -> bool {
        self.inner.private_not_modified.load(Ordering::Relaxed)
    }

    /// Sets [`OriginState::private_not_modified`] (`POST /__origin/not-modified?private=…`).
    pub fn set_private_not_modified(&self, on: bool) {
        self.inner.private_not_modified.store(on, Ordering::Relaxed);
    }

    fn app_js_gzip(&self) -> &[u8] {
        &self.inner.app_js_gzip
    }
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Serves the origin on `listener` until `shutdown` completes, then stops gracefully.
///
/// # Errors
///
/// Returns the I/O error that made the server stop, if any.
pub async fn serve<F>(
    listener: tokio::net::TcpListener,
    state: OriginState,
    shutdown: F,
) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Starts the server on its own tokio runtime in a background thread; returns once it is
/// listening.
///
/// # Errors
///
/// Fails when the address cannot be bound or the runtime or thread cannot be created.
pub fn spawn(config: OriginConfig) -> std::io::Result<RunningOrigin> {
    let listen = config.listen;
    let state = OriginState::new(config);
    let std_listener = std::net::TcpListener::bind(listen)?;
    std_listener.set_nonblocking(true)?;
    let addr = std_listener.local_addr()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("cachet-demo-origin")
        .enable_all()
        .build()?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let server_state = state.clone();
    let thread = std::thread::Builder::new()
        .name(format!("cachet-demo-origin-{}", addr.port()))
        .spawn(move || {
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener)?;
                let mut signal_rx = stop_rx.clone();
                let signal = async move {
                    // An error means the handle is gone: stop as well.
                    let _ = signal_rx.wait_for(|stop| *stop).await;
                };
                let mut grace_rx = stop_rx;
                let grace = async move {
                    let _ = grace_rx.wait_for(|stop| *stop).await;
                    tokio::time::sleep(SHUTDOWN_GRACE).await;
                };
                tokio::select! {
                    result = serve(listener, server_state, signal) => result,
                    () = grace => Ok(()),
                }
            })
        })?;
    Ok(RunningOrigin {
        addr,
        state,
        stop: stop_tx,
        thread: Some(thread),
    })
}

/// How the origin misbehaves on counted requests (for fault and soak tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answers as usual.
    None = 0,
    /// Answers `503 Service Unavailable` (`Cache-Control: no-store`), a 5xx burst.
    Error = 1,
    /// Sends the status and headers (with the full `Content-Length`), half the body, then
    /// drops the connection: a reset mid-body.
    Reset = 2,
}

/// A demo origin running in a background thread (see [`spawn`]); dropping it stops it.
#[derive(Debug)]
pub struct RunningOrigin {
    addr: SocketAddr,
    state: OriginState,
    stop: tokio::sync::watch::Sender<bool>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
}

impl RunningOrigin {
    /// The address the server listens on (with the real port when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR` followed by `path` (which should start with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Snapshot of the request counters (same data as `GET /__origin/stats`).
    pub fn stats(&self) -> Stats {
        self.state.stats()
    }

    /// Zeroes the request counters and clears the request log (same as
    /// `POST /__origin/stats/reset`).
    pub fn reset_stats(&self) {
        self.state.reset_stats();
    }

    /// The spans of the counted requests that have ended ([`OriginState::request_log`]).
    pub fn request_log(&self) -> Vec<RequestSpan> {
        self.state.request_log()
    }

    /// When the origin's state was built: the zero of every [`RequestSpan`]'s times.
    pub fn started(&self) -> Instant {
        self.state.started()
    }

    /// Makes `blog` private or public; `false` if there is no such blog.
    pub fn set_private(&self, blog: &str, private: bool) -> bool {
        self.state.set_private(blog, private)
    }

    /// Sets the delay applied before every counted response.
    pub fn set_delay(&self, delay: Duration) {
        self.state.set_delay(delay);
    }

    /// Sets the misbehaviour applied to counted requests ([`Fault`]).
    pub fn set_fault(&self, fault: Fault) {
        self.state.set_fault(fault);
    }

    /// The shared state, for anything the shortcuts above do not cover.
    pub fn state(&self) -> &OriginState {
        &self.state
    }

    /// Stops the server gracefully and joins its thread.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for RunningOrigin {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}
