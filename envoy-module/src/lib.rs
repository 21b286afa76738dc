//! Cachet native in Envoy: a dynamic module (`libcachet_envoy_module.so`) loaded by Envoy
//! 1.40's `envoy.filters.http.dynamic_modules` filter (issue 33), configured by the same
//! JSON as the proxy-wasm filter (`envoy-module/envoy.yaml`).
//!
//! **What it does** (docs/envoy.md, "Dynamic module"): the C ABI ([`abi`], every
//! declaration checked against the 1.40 binary's exports) and the version handshake; the
//! configuration (a rejected one is refused with the parser's message, and Envoy refuses
//! the listener); the request side every Cachet host shares (the plan, the device class
//! overwriting any client value, `robots.txt`, a malformed authority's `400`); and the
//! cache: one process-wide [`store::Store`] every worker thread reads in place, driven by
//! `cachet_http::exchange` as the edge and the proxy-wasm filter drive it ([`flow`]), with
//! request collapsing across threads ([`store::Locks`]), background refreshes on the main
//! thread, bans, purges, soft purges, the admin API and the lurker ([`bans`]), and `/stats`
//! counters and gauges, combining slices through `[envoy].slice_cluster`, and fleet mode
//! (admin writes through etcd, the fleet log polled from the main thread, shields) and the
//! ban feed ([`fleet`]).
//!
//! Every `unsafe` block carries a `// SAFETY:` line; the stream-side calls are wrapped in
//! [`host`]. A hook never panics across the C boundary: the crate denies
//! `unwrap`/`expect`/`panic`, and the configuration and request paths return errors as
//! values.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(
    unsafe_code,
    reason = "the module's whole job is the C ABI Envoy calls"
)]

pub mod abi;
pub mod bans;
pub mod fleet;
pub mod flow;
pub mod host;
pub mod store;

use std::sync::Arc;

use cachet_policy::{Config, Policy};

use crate::flow::{Filter, Go, Shared};
use crate::host::{Stream, envoy_bytes, log};

/// One filter configuration (one `filter_config` in Envoy's YAML): what its streams
/// share.
struct FilterConfig {
    shared: Arc<Shared>,
    /// `filter_name` is [`flow::FLOOR_FILTER_NAME`]: streams are the module floor.
    floor: bool,
    /// The main thread's scheduler (background refreshes), freed with the configuration.
    main: Arc<host::Scheduler>,
    /// The lurker's: [`Ticker`] wakes it every `[envoy].tick`.
    lurk: Arc<host::Scheduler>,
    ticker: Option<Ticker>,
}

/// A thread that wakes a scheduler every period until dropped (the configuration's
/// timer: the ABI has none). Dropping it stops the thread and waits for it.
struct Ticker {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    /// Starts waking `w` every `period`; `None` when the thread cannot start.
    fn start(w: Arc<dyn store::Wake>, period: std::time::Duration) -> Option<Self> {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("cachet-lurker".into())
            .spawn(move || {
                // Ends when the sender goes (the configuration is destroyed).
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(period)
                {
                    w.wake();
                }
            })
            .ok()?;
        Some(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            // The thread only sleeps and wakes: it ends at once.
            let _ = t.join();
        }
    }
}

/// The stream behind a module pointer.
///
/// # Safety
/// `filter` must be a pointer `on_http_filter_new` returned and `on_http_filter_destroy`
/// has not freed. Envoy calls a stream's hooks on its one worker thread, possibly one
/// inside another (a reply sent can complete the stream at once): hence a shared
/// reference, the [`Filter`] keeping its state behind a `RefCell`.
unsafe fn filter<'a>(filter: abi::HttpFilterModulePtr) -> &'a Filter {
    // SAFETY: the caller's contract.
    unsafe { &*(filter.cast::<Filter>()) }
}

// ---- event hooks ---------------------------------------------------------------------------

/// `envoy_dynamic_module_on_program_init`: the ABI version this module was built against.
/// Envoy 1.40 compares it with its own and logs "Dynamic module ABI version … matched" (or
/// a deprecation warning); the module says which it expects when its configuration loads.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> abi::AbiVersionModulePtr {
    abi::ABI_VERSION.as_ptr().cast()
}
const _: abi::OnProgramInit = envoy_dynamic_module_on_program_init;

/// Defines the module's counters and gauges on `config`; `None` (logged) when Envoy
/// refuses one.
fn define_metrics(config: host::Config) -> Option<(flow::Counters, flow::Gauges)> {
    let define = |name: &str, gauge: bool| {
        let r = if gauge {
            config.define_gauge(name)
        } else {
            config.define_counter(name)
        };
        r.map_err(|e| {
            log(
                abi::LOG_LEVEL_ERROR,
                &format!("cachet: metric {name} refused ({e})"),
            );
        })
        .ok()
    };
    let counters = (flow::Counters::NAMES.iter())
        .map(|name| define(name, false))
        .collect::<Option<Vec<_>>>()?;
    let mut gauges = [0usize; 3];
    for (id, name) in gauges.iter_mut().zip(flow::Gauges::NAMES) {
        *id = define(name, true)?;
    }
    Some((
        flow::Counters::from_ids(&counters),
        flow::Gauges::from_ids(gauges),
    ))
}

/// `envoy_dynamic_module_on_http_filter_config_new`: compiles the JSON configuration; a
/// configuration that does not load is refused (null), its reason logged at error level.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_new(
    envoy: abi::HttpFilterConfigEnvoyPtr,
    name: abi::EnvoyBuffer,
    config: abi::EnvoyBuffer,
) -> abi::HttpFilterConfigModulePtr {
    // SAFETY: `name` is valid for this call (Envoy's ownership rule).
    let floor = unsafe { envoy_bytes(name) } == flow::FLOOR_FILTER_NAME;
    // SAFETY: `config` is valid for this call (Envoy's ownership rule).
    let text = String::from_utf8_lossy(unsafe { envoy_bytes(config) }).into_owned();
    let version =
        String::from_utf8_lossy(&abi::ABI_VERSION[..abi::ABI_VERSION.len() - 1]).into_owned();
    let loaded = Config::from_json_traced(&text).and_then(Policy::new);
    match loaded {
        Ok(policy) => {
            log(
                abi::LOG_LEVEL_INFO,
                &format!(
                    "cachet: dynamic module built against ABI {version} (Envoy's load line \
                     above says whether its own matches); configuration loaded"
                ),
            );
            let tick = policy.config().envoy.tick.0;
            let shared = Arc::new(Shared::new(policy));
            // The metrics first: a refusal returns before anything needs freeing.
            let Some((counters, gauges)) = define_metrics(host::Config(envoy)) else {
                return std::ptr::null();
            };
            shared.set_counters(counters);
            shared.set_gauges(gauges);
            let main = Arc::new(host::Config(envoy).scheduler(host::EVENT_REFRESH));
            shared.set_main(main.clone());
            let lurk = Arc::new(host::Config(envoy).scheduler(host::EVENT_LURK));
            let ticker = Ticker::start(lurk.clone(), tick);
            if ticker.is_none() {
                log(
                    abi::LOG_LEVEL_ERROR,
                    "cachet: the lurker's timer thread did not start: banned objects \
                     are refused at lookup but stay in memory until evicted",
                );
            }
            if floor {
                log(
                    abi::LOG_LEVEL_WARN,
                    "cachet: filter_name cachet-floor: this filter is the module floor \
                     (a benchmark baseline), it caches nothing",
                );
            }
            let c = FilterConfig {
                shared,
                floor,
                main,
                lurk,
                ticker,
            };
            Box::into_raw(Box::new(c)) as abi::HttpFilterConfigModulePtr
        }
        Err(e) => {
            log(
                abi::LOG_LEVEL_ERROR,
                &format!("cachet: configuration refused: {e}"),
            );
            std::ptr::null()
        }
    }
}
const _: abi::OnHttpFilterConfigNew = envoy_dynamic_module_on_http_filter_config_new;

/// `envoy_dynamic_module_on_http_filter_config_destroy`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(
    config: abi::HttpFilterConfigModulePtr,
) {
    if !config.is_null() {
        // SAFETY: `config` came from `Box::into_raw` in `config_new`; Envoy destroys it once,
        // on the main thread (where its scheduler is freed).
        let mut c = unsafe { Box::from_raw(config as *mut FilterConfig) };
        c.lurk.close();
        drop(c.ticker.take());
        c.main.close();
    }
}
const _: abi::OnHttpFilterConfigDestroy = envoy_dynamic_module_on_http_filter_config_destroy;

/// `envoy_dynamic_module_on_http_filter_new`: one stream.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_new(
    config: abi::HttpFilterConfigModulePtr,
    _envoy: abi::HttpFilterEnvoyPtr,
) -> abi::HttpFilterModulePtr {
    // SAFETY: `config` is a pointer `config_new` returned (Envoy never makes a stream of
    // a refused configuration), alive while any stream made from it is.
    let config = unsafe { &*config.cast::<FilterConfig>() };
    let shared = Arc::clone(&config.shared);
    let filter = if config.floor {
        Filter::floor(shared)
    } else {
        Filter::new(shared)
    };
    Box::into_raw(Box::new(filter)) as abi::HttpFilterModulePtr
}
const _: abi::OnHttpFilterNew = envoy_dynamic_module_on_http_filter_new;

/// `envoy_dynamic_module_on_http_filter_destroy`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_destroy(filter: abi::HttpFilterModulePtr) {
    if !filter.is_null() {
        // SAFETY: `filter` came from `Box::into_raw` in `filter_new`; destroyed once, on
        // the stream's thread (where its scheduler is freed).
        let f = unsafe { Box::from_raw(filter as *mut Filter) };
        f.close();
    }
}
const _: abi::OnHttpFilterDestroy = envoy_dynamic_module_on_http_filter_destroy;

/// `envoy_dynamic_module_on_http_filter_request_headers`.
///
/// # Safety
/// Called by Envoy only, with the pointers its ABI hands this hook.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    envoy: abi::HttpFilterEnvoyPtr,
    filter_ptr: abi::HttpFilterModulePtr,
    end_of_stream: bool,
) -> abi::OnHttpFilterRequestHeadersStatus {
    // SAFETY: this stream's filter, on its thread (`filter`'s contract).
    let f = unsafe { filter(filter_ptr) };
    match f.on_request_headers(Stream(envoy), end_of_stream) {
        Go::Paused => abi::REQUEST_HEADERS_STATUS_STOP_ITERATION,
        Go::Upstream | Go::Downstream => abi::REQUEST_HEADERS_STATUS_CONTINUE,
    }
}
const _: abi::OnHttpFilterRequestHeaders = envoy_dynamic_module_on_http_filter_request_headers;

// The hooks Envoy 1.40 looks up that this step does not use: each lets the stream go on.

/// `…_per_route_config_new`: no per-route configuration (null: none).
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_per_route_config_new(
    _name: abi::EnvoyBuffer,
    _config: abi::EnvoyBuffer,
) -> abi::HttpFilterPerRouteConfigModulePtr {
    std::ptr::null()
}
const _: abi::OnHttpFilterPerRouteConfigNew =
    envoy_dynamic_module_on_http_filter_per_route_config_new;

/// `…_per_route_config_destroy`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_per_route_config_destroy(
    _config: abi::HttpFilterPerRouteConfigModulePtr,
) {
}
const _: abi::OnHttpFilterPerRouteConfigDestroy =
    envoy_dynamic_module_on_http_filter_per_route_config_destroy;

/// `…_request_body`: an admin call's ban expression.
///
/// # Safety
/// Called by Envoy only, with the pointers its ABI hands this hook.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_request_body(
    envoy: abi::HttpFilterEnvoyPtr,
    filter_ptr: abi::HttpFilterModulePtr,
    end_of_stream: bool,
) -> abi::OnHttpFilterRequestBodyStatus {
    // SAFETY: this stream's filter, on its thread (`filter`'s contract).
    let f = unsafe { filter(filter_ptr) };
    match f.on_request_body(Stream(envoy), end_of_stream) {
        (Go::Paused, true) => abi::REQUEST_BODY_STATUS_STOP_ITERATION_AND_BUFFER,
        (Go::Paused, false) => abi::REQUEST_BODY_STATUS_STOP_ITERATION_NO_BUFFER,
        (Go::Upstream | Go::Downstream, _) => abi::REQUEST_BODY_STATUS_CONTINUE,
    }
}
const _: abi::OnHttpFilterRequestBody = envoy_dynamic_module_on_http_filter_request_body;

/// `…_request_trailers`: held while an admin call is (never forwarded).
///
/// # Safety
/// Called by Envoy only, with the pointers its ABI hands this hook.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_request_trailers(
    _envoy: abi::HttpFilterEnvoyPtr,
    filter_ptr: abi::HttpFilterModulePtr,
) -> abi::OnHttpFilterRequestTrailersStatus {
    // SAFETY: this stream's filter, on its thread (`filter`'s contract).
    let f = unsafe { filter(filter_ptr) };
    match f.on_request_trailers() {
        Go::Paused => abi::REQUEST_TRAILERS_STATUS_STOP_ITERATION,
        Go::Upstream | Go::Downstream => abi::REQUEST_TRAILERS_STATUS_CONTINUE,
    }
}
const _: abi::OnHttpFilterRequestTrailers = envoy_dynamic_module_on_http_filter_request_trailers;

/// `…_response_headers`.
///
/// # Safety
/// Called by Envoy only, with the pointers its ABI hands this hook.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(
    envoy: abi::HttpFilterEnvoyPtr,
    filter_ptr: abi::HttpFilterModulePtr,
    end_of_stream: bool,
) -> abi::OnHttpFilterResponseHeadersStatus {
    // SAFETY: this stream's filter, on its thread (`filter`'s contract).
    let f = unsafe { filter(filter_ptr) };
    match f.on_response_headers(Stream(envoy), end_of_stream) {
        Go::Paused => abi::RESPONSE_HEADERS_STATUS_STOP_ITERATION,
        Go::Upstream | Go::Downstream => abi::RESPONSE_HEADERS_STATUS_CONTINUE,
    }
}
const _: abi::OnHttpFilterResponseHeaders = envoy_dynamic_module_on_http_filter_response_headers;

/// `…_response_body`.
///
/// # Safety
/// Called by Envoy only, with the pointers its ABI hands this hook.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_response_body(
    envoy: abi::HttpFilterEnvoyPtr,
    filter_ptr: abi::HttpFilterModulePtr,
    end_of_stream: bool,
) -> abi::OnHttpFilterResponseBodyStatus {
    // SAFETY: this stream's filter, on its thread (`filter`'s contract).
    let f = unsafe { filter(filter_ptr) };
    match f.on_response_body(Stream(envoy), end_of_stream) {
        (Go::Paused, true) => abi::RESPONSE_BODY_STATUS_STOP_ITERATION_AND_BUFFER,
        (Go::Paused, false) => abi::RESPONSE_BODY_STATUS_STOP_ITERATION_NO_BUFFER,
        (Go::Upstream | Go::Downstream, _) => abi::RESPONSE_BODY_STATUS_CONTINUE,
    }
}
const _: abi::OnHttpFilterResponseBody = envoy_dynamic_module_on_http_filter_response_body;

/// `…_response_trailers`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_trailers(
    _envoy: abi::HttpFilterEnvoyPtr,
    _filter: abi::HttpFilterModulePtr,
) -> abi::OnHttpFilterResponseTrailersStatus {
    abi::RESPONSE_TRAILERS_STATUS_CONTINUE
}
const _: abi::OnHttpFilterResponseTrailers = envoy_dynamic_module_on_http_filter_response_trailers;

/// `…_stream_complete`.
///
/// # Safety
/// Called by Envoy only, with the pointers its ABI hands this hook.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_stream_complete(
    envoy: abi::HttpFilterEnvoyPtr,
    filter_ptr: abi::HttpFilterModulePtr,
) {
    // SAFETY: this stream's filter, on its thread (`filter`'s contract).
    let f = unsafe { filter(filter_ptr) };
    f.on_stream_complete(Stream(envoy));
}
const _: abi::OnHttpFilterStreamComplete = envoy_dynamic_module_on_http_filter_stream_complete;

/// `…_http_callout_done`: no callouts yet.
///
/// # Safety
/// Called by Envoy only, with the pointers its ABI hands this hook.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_http_callout_done(
    envoy: abi::HttpFilterEnvoyPtr,
    filter_ptr: abi::HttpFilterModulePtr,
    callout_id: u64,
    result: abi::HttpCalloutResult,
    headers: *mut abi::EnvoyHttpHeader,
    headers_size: usize,
    body_chunks: *mut abi::EnvoyBuffer,
    body_chunks_size: usize,
) {
    // SAFETY: this stream's filter, on its thread (`filter`'s contract).
    let f = unsafe { filter(filter_ptr) };
    // SAFETY: Envoy hands the answer's records and chunks to this hook.
    let answer = unsafe {
        host::callout_answer(result, headers, headers_size, body_chunks, body_chunks_size)
    };
    f.on_callout_done(Stream(envoy), callout_id, answer);
}
const _: abi::OnHttpFilterHttpCalloutDone = envoy_dynamic_module_on_http_filter_http_callout_done;

/// `…_http_stream_headers`: no streams yet.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_headers(
    _envoy: abi::HttpFilterEnvoyPtr,
    _filter: abi::HttpFilterModulePtr,
    _stream_id: u64,
    _headers: *mut abi::EnvoyHttpHeader,
    _headers_size: usize,
    _end_stream: bool,
) {
}
const _: abi::OnHttpFilterHttpStreamHeaders =
    envoy_dynamic_module_on_http_filter_http_stream_headers;

/// `…_http_stream_data`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_data(
    _envoy: abi::HttpFilterEnvoyPtr,
    _filter: abi::HttpFilterModulePtr,
    _stream_id: u64,
    _data: *const abi::EnvoyBuffer,
    _data_count: usize,
    _end_stream: bool,
) {
}
const _: abi::OnHttpFilterHttpStreamData = envoy_dynamic_module_on_http_filter_http_stream_data;

/// `…_http_stream_trailers`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_trailers(
    _envoy: abi::HttpFilterEnvoyPtr,
    _filter: abi::HttpFilterModulePtr,
    _stream_id: u64,
    _trailers: *mut abi::EnvoyHttpHeader,
    _trailers_size: usize,
) {
}
const _: abi::OnHttpFilterHttpStreamTrailers =
    envoy_dynamic_module_on_http_filter_http_stream_trailers;

/// `…_http_stream_complete`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_complete(
    _envoy: abi::HttpFilterEnvoyPtr,
    _filter: abi::HttpFilterModulePtr,
    _stream_id: u64,
) {
}
const _: abi::OnHttpFilterHttpStreamComplete =
    envoy_dynamic_module_on_http_filter_http_stream_complete;

/// `…_http_stream_reset`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_reset(
    _envoy: abi::HttpFilterEnvoyPtr,
    _filter: abi::HttpFilterModulePtr,
    _stream_id: u64,
    _reason: abi::HttpStreamResetReason,
) {
}
const _: abi::OnHttpFilterHttpStreamReset = envoy_dynamic_module_on_http_filter_http_stream_reset;

/// `…_scheduled`: no stream schedulers yet.
///
/// # Safety
/// Called by Envoy only, with the pointers its ABI hands this hook.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_scheduled(
    envoy: abi::HttpFilterEnvoyPtr,
    filter_ptr: abi::HttpFilterModulePtr,
    event_id: u64,
) {
    // SAFETY: this stream's filter, on its thread (`filter`'s contract).
    let f = unsafe { filter(filter_ptr) };
    if event_id == host::EVENT_WOKEN {
        f.on_scheduled(Stream(envoy));
    }
}
const _: abi::OnHttpFilterScheduled = envoy_dynamic_module_on_http_filter_scheduled;

/// `…_config_scheduled`: the main thread's turn for queued background refreshes.
///
/// # Safety
/// Called by Envoy only, with the pointers its ABI hands this hook.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_scheduled(
    envoy: abi::HttpFilterConfigEnvoyPtr,
    config: abi::HttpFilterConfigModulePtr,
    event_id: u64,
) {
    // SAFETY: a pointer `config_new` returned, alive until `config_destroy` (main thread).
    let c = unsafe { &*config.cast::<FilterConfig>() };
    match event_id {
        host::EVENT_REFRESH => c.shared.run_refreshes(host::Config(envoy)),
        host::EVENT_LURK => c.shared.lurk(host::Config(envoy)),
        _ => {}
    }
}
const _: abi::OnHttpFilterConfigScheduled = envoy_dynamic_module_on_http_filter_config_scheduled;

/// `…_config_http_callout_done`: a background refresh's answer, or fleet mode's
/// (etcd, the ban feed).
///
/// # Safety
/// Called by Envoy only, with the pointers its ABI hands this hook.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_http_callout_done(
    envoy: abi::HttpFilterConfigEnvoyPtr,
    config: abi::HttpFilterConfigModulePtr,
    callout_id: u64,
    result: abi::HttpCalloutResult,
    headers: *mut abi::EnvoyHttpHeader,
    headers_size: usize,
    body_chunks: *mut abi::EnvoyBuffer,
    body_chunks_size: usize,
) {
    // SAFETY: a pointer `config_new` returned, alive until `config_destroy` (main thread).
    let c = unsafe { &*config.cast::<FilterConfig>() };
    // SAFETY: Envoy hands the answer's records and chunks to this hook.
    let answer = unsafe {
        host::callout_answer(result, headers, headers_size, body_chunks, body_chunks_size)
    };
    c.shared
        .root_answered(host::Config(envoy), callout_id, answer);
}
const _: abi::OnHttpFilterConfigHttpCalloutDone =
    envoy_dynamic_module_on_http_filter_config_http_callout_done;

/// `…_config_http_stream_headers`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_stream_headers(
    _envoy: abi::HttpFilterConfigEnvoyPtr,
    _config: abi::HttpFilterConfigModulePtr,
    _stream_id: u64,
    _headers: *mut abi::EnvoyHttpHeader,
    _headers_size: usize,
    _end_stream: bool,
) {
}
const _: abi::OnHttpFilterConfigHttpStreamHeaders =
    envoy_dynamic_module_on_http_filter_config_http_stream_headers;

/// `…_config_http_stream_data`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_stream_data(
    _envoy: abi::HttpFilterConfigEnvoyPtr,
    _config: abi::HttpFilterConfigModulePtr,
    _stream_id: u64,
    _data: *const abi::EnvoyBuffer,
    _data_count: usize,
    _end_stream: bool,
) {
}
const _: abi::OnHttpFilterConfigHttpStreamData =
    envoy_dynamic_module_on_http_filter_config_http_stream_data;

/// `…_config_http_stream_trailers`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_stream_trailers(
    _envoy: abi::HttpFilterConfigEnvoyPtr,
    _config: abi::HttpFilterConfigModulePtr,
    _stream_id: u64,
    _trailers: *mut abi::EnvoyHttpHeader,
    _trailers_size: usize,
) {
}
const _: abi::OnHttpFilterConfigHttpStreamTrailers =
    envoy_dynamic_module_on_http_filter_config_http_stream_trailers;

/// `…_config_http_stream_complete`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_stream_complete(
    _envoy: abi::HttpFilterConfigEnvoyPtr,
    _config: abi::HttpFilterConfigModulePtr,
    _stream_id: u64,
) {
}
const _: abi::OnHttpFilterConfigHttpStreamComplete =
    envoy_dynamic_module_on_http_filter_config_http_stream_complete;

/// `…_config_http_stream_reset`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_stream_reset(
    _envoy: abi::HttpFilterConfigEnvoyPtr,
    _config: abi::HttpFilterConfigModulePtr,
    _stream_id: u64,
    _reason: abi::HttpStreamResetReason,
) {
}
const _: abi::OnHttpFilterConfigHttpStreamReset =
    envoy_dynamic_module_on_http_filter_config_http_stream_reset;

/// `…_downstream_above_write_buffer_high_watermark`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark(
    _envoy: abi::HttpFilterEnvoyPtr,
    _filter: abi::HttpFilterModulePtr,
) {
}
const _: abi::OnHttpFilterDownstreamAboveWriteBufferHighWatermark =
    envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark;

/// `…_downstream_below_write_buffer_low_watermark`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark(
    _envoy: abi::HttpFilterEnvoyPtr,
    _filter: abi::HttpFilterModulePtr,
) {
}
const _: abi::OnHttpFilterDownstreamBelowWriteBufferLowWatermark =
    envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark;

/// `…_local_reply`: Envoy's own replies go out as Envoy made them.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_local_reply(
    _envoy: abi::HttpFilterEnvoyPtr,
    _filter: abi::HttpFilterModulePtr,
    _response_code: u32,
    _details: abi::EnvoyBuffer,
    _reset_imminent: bool,
) -> abi::OnHttpFilterLocalReplyStatus {
    abi::LOCAL_REPLY_STATUS_CONTINUE
}
const _: abi::OnHttpFilterLocalReply = envoy_dynamic_module_on_http_filter_local_reply;
