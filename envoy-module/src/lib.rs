//! Cachet native in Envoy: a dynamic module (`libcachet_envoy_module.so`) loaded by Envoy
//! 1.40's `envoy.filters.http.dynamic_modules` filter (issue 33), configured by the same
//! JSON as the proxy-wasm filter (`envoy-module/envoy.yaml`).
//!
//! **Step 1 of issue 33** (docs/envoy.md, "Dynamic module"): the C ABI
//! ([`abi`], every declaration checked against the 1.40 binary's exports), the
//! version handshake, the configuration (a rejected one is refused with the parser's
//! message, and Envoy refuses the listener), and the request side every Cachet host
//! shares: the plan (`cachet_policy`), the device class sent to the origin in
//! `[device].header` overwriting any client value, Cachet's synthesized answers (`robots.txt`,
//! a malformed authority's `400`). The cache itself (one process-wide store driven by
//! `cachet_http::exchange`, as the edge and the proxy-wasm filter drive it) is the next
//! step; until then every other request goes to the origin through Envoy's router.
//!
//! Every `unsafe` block carries a `// SAFETY:` line. A hook never panics across the C
//! boundary: the crate denies `unwrap`/`expect`/`panic`, and the configuration and request
//! paths return errors as values.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(
    unsafe_code,
    reason = "the module's whole job is the C ABI Envoy calls"
)]

pub mod abi;
pub mod store;

use cachet_http::Inputs;
use cachet_policy::{Config, Decision, Policy};

/// Header lines: names (lower case, as Envoy keeps them) and byte values.
type Fields = Vec<(String, Vec<u8>)>;

/// One filter configuration (one `filter_config` in Envoy's YAML): the compiled policy.
struct FilterConfig {
    policy: Policy,
}

/// One HTTP stream.
struct Filter {
    config: *const FilterConfig,
}

/// A module-owned buffer over `bytes` (valid while `bytes` is).
fn module_buffer(bytes: &[u8]) -> abi::ModuleBuffer {
    abi::ModuleBuffer {
        ptr: bytes.as_ptr().cast(),
        length: bytes.len(),
    }
}

/// The bytes of an Envoy-owned buffer.
///
/// # Safety
/// `b` must be valid for the duration of the call that handed it over (Envoy's
/// ownership rule for every `envoy_buffer` argument).
unsafe fn envoy_bytes<'a>(b: abi::EnvoyBuffer) -> &'a [u8] {
    if b.ptr.is_null() || b.length == 0 {
        return &[];
    }
    // SAFETY: Envoy guarantees `ptr` points at `length` readable bytes for the call.
    unsafe { std::slice::from_raw_parts(b.ptr.cast::<u8>(), b.length) }
}

/// Writes one log line at `level` to Envoy's `dynamic_modules` logger.
fn log(level: abi::LogLevel, msg: &str) {
    // SAFETY: the buffer points at `msg`, alive for the call; Envoy copies it.
    unsafe { abi::envoy_dynamic_module_callback_log(level, module_buffer(msg.as_bytes())) }
}

/// Every line of one of the stream's header maps.
fn headers(filter: abi::HttpFilterEnvoyPtr, kind: abi::HttpHeaderType) -> Fields {
    // SAFETY: `filter` is the stream Envoy is calling us for.
    let n = unsafe { abi::envoy_dynamic_module_callback_http_get_headers_size(filter, kind) };
    let empty = abi::EnvoyHttpHeader {
        key_ptr: std::ptr::null(),
        key_length: 0,
        value_ptr: std::ptr::null(),
        value_length: 0,
    };
    let mut raw = vec![empty; n];
    // SAFETY: `raw` has room for the `n` entries the previous call reported.
    let ok = unsafe {
        abi::envoy_dynamic_module_callback_http_get_headers(filter, kind, raw.as_mut_ptr())
    };
    if !ok {
        return Vec::new();
    }
    raw.iter()
        .map(|h| {
            let (k, v) = (
                abi::EnvoyBuffer {
                    ptr: h.key_ptr,
                    length: h.key_length,
                },
                abi::EnvoyBuffer {
                    ptr: h.value_ptr,
                    length: h.value_length,
                },
            );
            // SAFETY: the entries point into the header map, alive during this hook.
            let (k, v) = unsafe { (envoy_bytes(k), envoy_bytes(v)) };
            (String::from_utf8_lossy(k).to_ascii_lowercase(), v.to_vec())
        })
        .collect()
}

/// Sets (or with `None` removes) one request header.
fn set_request_header(filter: abi::HttpFilterEnvoyPtr, name: &str, value: Option<&[u8]>) {
    let value = value.map_or(
        abi::ModuleBuffer {
            ptr: std::ptr::null(),
            length: 0,
        },
        module_buffer,
    );
    // SAFETY: `filter` is the current stream; both buffers outlive the call.
    unsafe {
        abi::envoy_dynamic_module_callback_http_set_header(
            filter,
            abi::HTTP_HEADER_TYPE_REQUEST_HEADER,
            module_buffer(name.as_bytes()),
            value,
        );
    }
}

/// Answers the stream locally with `reply` (`cachet_http`'s answers: one place decides them).
fn send(filter: abi::HttpFilterEnvoyPtr, reply: &cachet_http::Reply) {
    let mut lines: Vec<abi::ModuleHttpHeader> = reply
        .headers
        .iter()
        .map(|(n, v)| abi::ModuleHttpHeader {
            key_ptr: n.as_ptr().cast(),
            key_length: n.len(),
            value_ptr: v.as_ptr().cast(),
            value_length: v.len(),
        })
        .collect();
    // SAFETY: `lines` and the reply's strings and body outlive the call; Envoy copies them.
    unsafe {
        abi::envoy_dynamic_module_callback_http_send_response(
            filter,
            u32::from(reply.status),
            lines.as_mut_ptr(),
            lines.len(),
            module_buffer(&reply.body),
            module_buffer(b"cachet"),
        );
    }
}

/// The value of the first `name` line.
fn value<'a>(fields: &'a Fields, name: &str) -> Option<&'a [u8]> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_slice())
}

impl FilterConfig {
    /// The request's headers: refused authorities and synthesized answers go back at once
    /// (returns `false`: stop); otherwise the device header is ours and the request goes on.
    fn request_headers(&self, envoy: abi::HttpFilterEnvoyPtr) -> bool {
        let config = self;
        let fields = headers(envoy, abi::HTTP_HEADER_TYPE_REQUEST_HEADER);
        if let Err(refused) = cachet_http::authority::authority(fields.as_slice()) {
            send(envoy, &refused);
            return false;
        }
        let text = |n: &str| {
            value(&fields, n)
                .and_then(|v| std::str::from_utf8(v).ok())
                .unwrap_or_default()
        };
        let inputs = Inputs::read(text(":method"), "http", text(":path"), fields.as_slice());
        let plan = config
            .policy
            .plan(&inputs.view(), std::time::SystemTime::now());
        if let Decision::Synth(s) = &plan.decision {
            send(envoy, &cachet_http::reply::synth(s));
            return false;
        }
        // A client-supplied device header never reaches the origin: the class is ours.
        set_request_header(
            envoy,
            plan.device_header,
            Some(plan.device.as_str().as_bytes()),
        );
        true
    }
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

/// `envoy_dynamic_module_on_http_filter_config_new`: compiles the JSON configuration; a
/// configuration that does not load is refused (null), its reason logged at error level.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_new(
    _envoy: abi::HttpFilterConfigEnvoyPtr,
    _name: abi::EnvoyBuffer,
    config: abi::EnvoyBuffer,
) -> abi::HttpFilterConfigModulePtr {
    // SAFETY: `config` is valid for this call (Envoy's ownership rule).
    let text = String::from_utf8_lossy(unsafe { envoy_bytes(config) }).into_owned();
    let version =
        String::from_utf8_lossy(&abi::ABI_VERSION[..abi::ABI_VERSION.len() - 1]).into_owned();
    match Config::from_json_traced(&text).and_then(Policy::new) {
        Ok(policy) => {
            log(
                abi::LOG_LEVEL_INFO,
                &format!(
                    "cachet: dynamic module built against ABI {version} (Envoy's load line \
                     above says whether its own matches); configuration loaded"
                ),
            );
            Box::into_raw(Box::new(FilterConfig { policy })) as abi::HttpFilterConfigModulePtr
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
        // SAFETY: `config` came from `Box::into_raw` in `config_new`; Envoy destroys it once.
        drop(unsafe { Box::from_raw(config as *mut FilterConfig) });
    }
}
const _: abi::OnHttpFilterConfigDestroy = envoy_dynamic_module_on_http_filter_config_destroy;

/// `envoy_dynamic_module_on_http_filter_new`: one stream.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_new(
    config: abi::HttpFilterConfigModulePtr,
    _envoy: abi::HttpFilterEnvoyPtr,
) -> abi::HttpFilterModulePtr {
    let filter = Filter {
        config: config.cast::<FilterConfig>(),
    };
    Box::into_raw(Box::new(filter)) as abi::HttpFilterModulePtr
}
const _: abi::OnHttpFilterNew = envoy_dynamic_module_on_http_filter_new;

/// `envoy_dynamic_module_on_http_filter_destroy`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_destroy(filter: abi::HttpFilterModulePtr) {
    if !filter.is_null() {
        // SAFETY: `filter` came from `Box::into_raw` in `filter_new`; destroyed once.
        drop(unsafe { Box::from_raw(filter as *mut Filter) });
    }
}
const _: abi::OnHttpFilterDestroy = envoy_dynamic_module_on_http_filter_destroy;

/// `envoy_dynamic_module_on_http_filter_request_headers`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    envoy: abi::HttpFilterEnvoyPtr,
    filter: abi::HttpFilterModulePtr,
    _end_of_stream: bool,
) -> abi::OnHttpFilterRequestHeadersStatus {
    // SAFETY: `filter` is this stream's `Filter` (from `filter_new`, alive until
    // `filter_destroy`), and its configuration outlives every stream made from it.
    let config = unsafe { &*(*filter.cast::<Filter>()).config };
    if config.request_headers(envoy) {
        abi::REQUEST_HEADERS_STATUS_CONTINUE
    } else {
        abi::REQUEST_HEADERS_STATUS_STOP_ITERATION
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

/// `…_request_body`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_body(
    _envoy: abi::HttpFilterEnvoyPtr,
    _filter: abi::HttpFilterModulePtr,
    _end_of_stream: bool,
) -> abi::OnHttpFilterRequestBodyStatus {
    abi::REQUEST_BODY_STATUS_CONTINUE
}
const _: abi::OnHttpFilterRequestBody = envoy_dynamic_module_on_http_filter_request_body;

/// `…_request_trailers`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_trailers(
    _envoy: abi::HttpFilterEnvoyPtr,
    _filter: abi::HttpFilterModulePtr,
) -> abi::OnHttpFilterRequestTrailersStatus {
    abi::REQUEST_TRAILERS_STATUS_CONTINUE
}
const _: abi::OnHttpFilterRequestTrailers = envoy_dynamic_module_on_http_filter_request_trailers;

/// `…_response_headers`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(
    _envoy: abi::HttpFilterEnvoyPtr,
    _filter: abi::HttpFilterModulePtr,
    _end_of_stream: bool,
) -> abi::OnHttpFilterResponseHeadersStatus {
    abi::RESPONSE_HEADERS_STATUS_CONTINUE
}
const _: abi::OnHttpFilterResponseHeaders = envoy_dynamic_module_on_http_filter_response_headers;

/// `…_response_body`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_body(
    _envoy: abi::HttpFilterEnvoyPtr,
    _filter: abi::HttpFilterModulePtr,
    _end_of_stream: bool,
) -> abi::OnHttpFilterResponseBodyStatus {
    abi::RESPONSE_BODY_STATUS_CONTINUE
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
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_stream_complete(
    _envoy: abi::HttpFilterEnvoyPtr,
    _filter: abi::HttpFilterModulePtr,
) {
}
const _: abi::OnHttpFilterStreamComplete = envoy_dynamic_module_on_http_filter_stream_complete;

/// `…_http_callout_done`: no callouts yet.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_callout_done(
    _envoy: abi::HttpFilterEnvoyPtr,
    _filter: abi::HttpFilterModulePtr,
    _callout_id: u64,
    _result: abi::HttpCalloutResult,
    _headers: *mut abi::EnvoyHttpHeader,
    _headers_size: usize,
    _body_chunks: *mut abi::EnvoyBuffer,
    _body_chunks_size: usize,
) {
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
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_scheduled(
    _envoy: abi::HttpFilterEnvoyPtr,
    _filter: abi::HttpFilterModulePtr,
    _event_id: u64,
) {
}
const _: abi::OnHttpFilterScheduled = envoy_dynamic_module_on_http_filter_scheduled;

/// `…_config_scheduled`: no configuration schedulers yet.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_scheduled(
    _envoy: abi::HttpFilterConfigEnvoyPtr,
    _config: abi::HttpFilterConfigModulePtr,
    _event_id: u64,
) {
}
const _: abi::OnHttpFilterConfigScheduled = envoy_dynamic_module_on_http_filter_config_scheduled;

/// `…_config_http_callout_done`.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_callout_done(
    _envoy: abi::HttpFilterConfigEnvoyPtr,
    _config: abi::HttpFilterConfigModulePtr,
    _callout_id: u64,
    _result: abi::HttpCalloutResult,
    _headers: *mut abi::EnvoyHttpHeader,
    _headers_size: usize,
    _body_chunks: *mut abi::EnvoyBuffer,
    _body_chunks_size: usize,
) {
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
