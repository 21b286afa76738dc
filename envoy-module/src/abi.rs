//! Rust declarations of Envoy's dynamic-module C ABI, the part an HTTP filter module uses.
//!
//! Source: `source/extensions/dynamic_modules/abi/abi.h` of Envoy, as stored at commit
//! `05f72c01c038709243e7b58d9faccc6e7d1b7754` of the GitHub fork `agrawroh/envoy`: a copy of
//! the header that defines `ENVOY_DYNAMIC_MODULES_ABI_VERSION "v0.2.0"`, the ABI version
//! string the Envoy 1.40.0 binary carries (the stored `envoyproxy/envoy` copies say "v0.1.0"
//! or predate the define). Every signature below was also
//! compared with `envoyproxy/envoy` at commit `0199da4a13cb999df12ad32db7d03942cfbf9abb`
//! (which defines `"v0.1.0"`, and which the header says v0.2.x stays compatible with): they
//! are identical, except that the v0.1.0 header has no `envoy_dynamic_module_callback_log_v2`.
//!
//! Rule: every callback declared here was checked against the exports of the Envoy 1.40.0
//! binary (`nm -D --defined-only envoy | grep envoy_dynamic_module_callback`), and every
//! event hook type below against the hook names in that binary
//! (`strings -n 10 envoy | grep '^envoy_dynamic_module_on_http'`). A name that is in the
//! header but not in the binary must not be declared here.
//!
//! The header was read through a paged text API that gives character offsets, not line
//! numbers, so each declaration's trailing comment gives the 16,000-character window of the
//! header it came from (`// abi.h chars A..B`, offsets into the file at the commit above).
//!
//! C enums are plain `u32` aliases with one `pub const` per enumerator, numbered in
//! declaration order as C numbers them; a C `enum` is passed as a 32-bit integer on every
//! platform Envoy supports, so this is ABI-safe and never gives Rust an invalid enum value.
//! C `bool` is Rust `bool`, `size_t` is `usize`.
//!
//! # Event hooks the module exports
//!
//! Envoy looks these symbols up in the module (`dlsym`). Each `On*` type alias below is the
//! exact function type of one hook; write the export and pin it to the alias so the
//! compiler checks the signature:
//!
//! ```ignore
//! #[unsafe(no_mangle)]
//! pub extern "C" fn envoy_dynamic_module_on_program_init() -> abi::AbiVersionModulePtr {
//!     abi::ABI_VERSION.as_ptr().cast()
//! }
//! const _: abi::OnProgramInit = envoy_dynamic_module_on_program_init;
//! ```

use core::ffi::{c_char, c_void};

/// The ABI version this file was written against, NUL-terminated, for
/// `envoy_dynamic_module_on_program_init` to return (Envoy 1.40 logs a mismatch, and only a
/// null return fails the load).
pub const ABI_VERSION: &[u8] = b"v0.2.0\0";

// ============================================================================================
// Common types
// ============================================================================================

/// `envoy_dynamic_module_type_abi_version_module_ptr`: a NUL-terminated string naming the ABI
/// version the module was built against. Owned by the module; must stay valid until
/// `envoy_dynamic_module_on_program_init` returns.
pub type AbiVersionModulePtr = *const c_char; // abi.h chars 1200..17200

/// `envoy_dynamic_module_type_buffer_module_ptr`: a pointer to bytes owned by the module.
pub type BufferModulePtr = *const c_char; // abi.h chars 1200..17200

/// `envoy_dynamic_module_type_buffer_envoy_ptr`: a pointer to bytes owned by Envoy.
pub type BufferEnvoyPtr = *const c_char; // abi.h chars 1200..17200

/// `envoy_dynamic_module_type_envoy_buffer`: a buffer owned by Envoy (direct access to
/// Envoy's memory; its lifetime depends on the hook or callback that handed it out).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EnvoyBuffer {
    /// Start of the bytes (may be null when `length` is 0).
    pub ptr: BufferEnvoyPtr,
    /// Number of bytes.
    pub length: usize,
} // abi.h chars 1200..17200

/// `envoy_dynamic_module_type_module_buffer`: a buffer owned by the module.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ModuleBuffer {
    /// Start of the bytes (may be null when `length` is 0).
    pub ptr: BufferModulePtr,
    /// Number of bytes.
    pub length: usize,
} // abi.h chars 1200..17200

/// `envoy_dynamic_module_type_module_http_header`: a header key-value pair owned by the module.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ModuleHttpHeader {
    /// Start of the header name.
    pub key_ptr: BufferModulePtr,
    /// Length of the header name in bytes.
    pub key_length: usize,
    /// Start of the header value.
    pub value_ptr: BufferModulePtr,
    /// Length of the header value in bytes.
    pub value_length: usize,
} // abi.h chars 1200..17200

/// `envoy_dynamic_module_type_envoy_http_header`: a header key-value pair owned by Envoy's
/// `HeaderMap`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EnvoyHttpHeader {
    /// Start of the header name.
    pub key_ptr: BufferEnvoyPtr,
    /// Length of the header name in bytes.
    pub key_length: usize,
    /// Start of the header value.
    pub value_ptr: BufferEnvoyPtr,
    /// Length of the header value in bytes.
    pub value_length: usize,
} // abi.h chars 1200..17200

/// `envoy_dynamic_module_type_http_header_type`: which header map a header callback works on.
pub type HttpHeaderType = u32; // abi.h chars 1200..17200
/// `envoy_dynamic_module_type_http_header_type_RequestHeader`.
pub const HTTP_HEADER_TYPE_REQUEST_HEADER: HttpHeaderType = 0;
/// `envoy_dynamic_module_type_http_header_type_RequestTrailer`.
pub const HTTP_HEADER_TYPE_REQUEST_TRAILER: HttpHeaderType = 1;
/// `envoy_dynamic_module_type_http_header_type_ResponseHeader`.
pub const HTTP_HEADER_TYPE_RESPONSE_HEADER: HttpHeaderType = 2;
/// `envoy_dynamic_module_type_http_header_type_ResponseTrailer`.
pub const HTTP_HEADER_TYPE_RESPONSE_TRAILER: HttpHeaderType = 3;

/// `envoy_dynamic_module_type_attribute_id`: a stream attribute (Envoy's attribute
/// names, in the header's order; only the one the module reads is named here).
pub type AttributeId = u32; // abi.h chars 9000..25000

/// `response.code_details`: `via_upstream` for an answer that came from the upstream.
pub const ATTRIBUTE_ID_RESPONSE_CODE_DETAILS: AttributeId = 16;

/// `envoy_dynamic_module_type_log_level`: the level passed to the log callbacks (Envoy's
/// `source/common/common/base_logger.h` levels).
pub type LogLevel = u32; // abi.h chars 1200..17200
/// `envoy_dynamic_module_type_log_level_Trace`.
pub const LOG_LEVEL_TRACE: LogLevel = 0;
/// `envoy_dynamic_module_type_log_level_Debug`.
pub const LOG_LEVEL_DEBUG: LogLevel = 1;
/// `envoy_dynamic_module_type_log_level_Info`.
pub const LOG_LEVEL_INFO: LogLevel = 2;
/// `envoy_dynamic_module_type_log_level_Warn`.
pub const LOG_LEVEL_WARN: LogLevel = 3;
/// `envoy_dynamic_module_type_log_level_Error`.
pub const LOG_LEVEL_ERROR: LogLevel = 4;
/// `envoy_dynamic_module_type_log_level_Critical`.
pub const LOG_LEVEL_CRITICAL: LogLevel = 5;
/// `envoy_dynamic_module_type_log_level_Off`.
pub const LOG_LEVEL_OFF: LogLevel = 6;

/// `envoy_dynamic_module_type_http_callout_init_result`: the result of starting an HTTP
/// callout with `envoy_dynamic_module_callback_http_filter_http_callout`.
pub type HttpCalloutInitResult = u32; // abi.h chars 1200..17200
/// The callout was started.
pub const HTTP_CALLOUT_INIT_RESULT_SUCCESS: HttpCalloutInitResult = 0;
/// One of the required headers `:path`, `:method` or `host` is missing.
pub const HTTP_CALLOUT_INIT_RESULT_MISSING_REQUIRED_HEADERS: HttpCalloutInitResult = 1;
/// The cluster is not in the configuration.
pub const HTTP_CALLOUT_INIT_RESULT_CLUSTER_NOT_FOUND: HttpCalloutInitResult = 2;
/// The callout id is already used by another callout.
pub const HTTP_CALLOUT_INIT_RESULT_DUPLICATE_CALLOUT_ID: HttpCalloutInitResult = 3;
/// The request could not be created (e.g. no healthy upstream host in the cluster).
pub const HTTP_CALLOUT_INIT_RESULT_CANNOT_CREATE_REQUEST: HttpCalloutInitResult = 4;

/// `envoy_dynamic_module_type_http_callout_result`: the outcome of an HTTP callout
/// (`AsyncClient::FailureReason` plus Success).
pub type HttpCalloutResult = u32; // abi.h chars 1200..17200
/// The callout got a response.
pub const HTTP_CALLOUT_RESULT_SUCCESS: HttpCalloutResult = 0;
/// The callout stream was reset.
pub const HTTP_CALLOUT_RESULT_RESET: HttpCalloutResult = 1;
/// The response exceeded the response buffer limit.
pub const HTTP_CALLOUT_RESULT_EXCEED_RESPONSE_BUFFER_LIMIT: HttpCalloutResult = 2;

/// `envoy_dynamic_module_type_http_stream_reset_reason`: why a streamable HTTP callout was
/// reset (`AsyncClient::StreamResetReason`).
pub type HttpStreamResetReason = u32; // abi.h chars 1200..17200
/// `..._ConnectionFailure`.
pub const HTTP_STREAM_RESET_REASON_CONNECTION_FAILURE: HttpStreamResetReason = 0;
/// `..._ConnectionTermination`.
pub const HTTP_STREAM_RESET_REASON_CONNECTION_TERMINATION: HttpStreamResetReason = 1;
/// `..._LocalReset`.
pub const HTTP_STREAM_RESET_REASON_LOCAL_RESET: HttpStreamResetReason = 2;
/// `..._LocalRefusedStreamReset`.
pub const HTTP_STREAM_RESET_REASON_LOCAL_REFUSED_STREAM_RESET: HttpStreamResetReason = 3;
/// `..._Overflow`.
pub const HTTP_STREAM_RESET_REASON_OVERFLOW: HttpStreamResetReason = 4;
/// `..._RemoteReset`.
pub const HTTP_STREAM_RESET_REASON_REMOTE_RESET: HttpStreamResetReason = 5;
/// `..._RemoteRefusedStreamReset`.
pub const HTTP_STREAM_RESET_REASON_REMOTE_REFUSED_STREAM_RESET: HttpStreamResetReason = 6;
/// `..._ProtocolError`.
pub const HTTP_STREAM_RESET_REASON_PROTOCOL_ERROR: HttpStreamResetReason = 7;

/// `envoy_dynamic_module_type_metrics_result`: the result of a metrics callback.
pub type MetricsResult = u32; // abi.h chars 1200..17200
/// The operation succeeded.
pub const METRICS_RESULT_SUCCESS: MetricsResult = 0;
/// No such metric (usually a handle that was improperly initialized or stored).
pub const METRICS_RESULT_METRIC_NOT_FOUND: MetricsResult = 1;
/// The labels are invalid.
pub const METRICS_RESULT_INVALID_LABELS: MetricsResult = 2;
/// A metric was to be created while stats creation is frozen.
pub const METRICS_RESULT_FROZEN: MetricsResult = 3;

// ============================================================================================
// HTTP filter types
// ============================================================================================

/// `envoy_dynamic_module_type_http_filter_config_envoy_ptr`: Envoy's
/// `DynamicModuleHttpFilterConfig`. Owned by Envoy.
pub type HttpFilterConfigEnvoyPtr = *mut c_void; // abi.h chars 33200..49200

/// `envoy_dynamic_module_type_http_filter_config_module_ptr`: the module's filter
/// configuration; the module may release it in `envoy_dynamic_module_on_http_filter_config_destroy`.
pub type HttpFilterConfigModulePtr = *const c_void; // abi.h chars 33200..49200

/// `envoy_dynamic_module_type_http_filter_per_route_config_module_ptr`: the module's per-route
/// configuration; released in `envoy_dynamic_module_on_http_filter_per_route_config_destroy`.
pub type HttpFilterPerRouteConfigModulePtr = *const c_void; // abi.h chars 33200..49200

/// `envoy_dynamic_module_type_http_filter_envoy_ptr`: Envoy's `DynamicModuleHttpFilter` for one
/// stream. Owned by Envoy, usable until `envoy_dynamic_module_on_http_filter_destroy`.
pub type HttpFilterEnvoyPtr = *mut c_void; // abi.h chars 33200..49200

/// `envoy_dynamic_module_type_http_filter_module_ptr`: the module's filter for one stream;
/// released in `envoy_dynamic_module_on_http_filter_destroy`.
pub type HttpFilterModulePtr = *const c_void; // abi.h chars 33200..49200

/// `envoy_dynamic_module_type_http_filter_scheduler_module_ptr`: Envoy's
/// `DynamicModuleHttpFilterScheduler`, allocated by Envoy but owned by the module, which must
/// free it with `envoy_dynamic_module_callback_http_filter_scheduler_delete`.
pub type HttpFilterSchedulerModulePtr = *mut c_void; // abi.h chars 33200..49200

/// `envoy_dynamic_module_type_http_filter_config_scheduler_module_ptr`: Envoy's
/// `DynamicModuleHttpFilterConfigScheduler`, allocated by Envoy but owned by the module, which
/// must free it with `envoy_dynamic_module_callback_http_filter_config_scheduler_delete`.
pub type HttpFilterConfigSchedulerModulePtr = *mut c_void; // abi.h chars 33200..49200

/// `envoy_dynamic_module_type_http_body_type`: which body a body callback works on.
pub type HttpBodyType = u32; // abi.h chars 33200..49200
/// The request body chunk received in the current `request_body` hook.
pub const HTTP_BODY_TYPE_RECEIVED_REQUEST_BODY: HttpBodyType = 0;
/// The request body buffered so far.
pub const HTTP_BODY_TYPE_BUFFERED_REQUEST_BODY: HttpBodyType = 1;
/// The response body chunk received in the current `response_body` hook.
pub const HTTP_BODY_TYPE_RECEIVED_RESPONSE_BODY: HttpBodyType = 2;
/// The response body buffered so far.
pub const HTTP_BODY_TYPE_BUFFERED_RESPONSE_BODY: HttpBodyType = 3;

/// `envoy_dynamic_module_type_on_http_filter_request_headers_status` (`FilterHeadersStatus`).
pub type OnHttpFilterRequestHeadersStatus = u32; // abi.h chars 33200..49200
/// `Continue`.
pub const REQUEST_HEADERS_STATUS_CONTINUE: OnHttpFilterRequestHeadersStatus = 0;
/// `StopIteration`.
pub const REQUEST_HEADERS_STATUS_STOP_ITERATION: OnHttpFilterRequestHeadersStatus = 1;
/// `ContinueAndDontEndStream`.
pub const REQUEST_HEADERS_STATUS_CONTINUE_AND_DONT_END_STREAM: OnHttpFilterRequestHeadersStatus = 2;
/// `StopAllIterationAndBuffer`.
pub const REQUEST_HEADERS_STATUS_STOP_ALL_ITERATION_AND_BUFFER: OnHttpFilterRequestHeadersStatus =
    3;
/// `StopAllIterationAndWatermark`.
pub const REQUEST_HEADERS_STATUS_STOP_ALL_ITERATION_AND_WATERMARK:
    OnHttpFilterRequestHeadersStatus = 4;

/// `envoy_dynamic_module_type_on_http_filter_request_body_status` (`FilterDataStatus`).
pub type OnHttpFilterRequestBodyStatus = u32; // abi.h chars 33200..49200
/// `Continue`.
pub const REQUEST_BODY_STATUS_CONTINUE: OnHttpFilterRequestBodyStatus = 0;
/// `StopIterationAndBuffer`.
pub const REQUEST_BODY_STATUS_STOP_ITERATION_AND_BUFFER: OnHttpFilterRequestBodyStatus = 1;
/// `StopIterationAndWatermark`.
pub const REQUEST_BODY_STATUS_STOP_ITERATION_AND_WATERMARK: OnHttpFilterRequestBodyStatus = 2;
/// `StopIterationNoBuffer`.
pub const REQUEST_BODY_STATUS_STOP_ITERATION_NO_BUFFER: OnHttpFilterRequestBodyStatus = 3;

/// `envoy_dynamic_module_type_on_http_filter_request_trailers_status` (`FilterTrailersStatus`).
pub type OnHttpFilterRequestTrailersStatus = u32; // abi.h chars 33200..49200
/// `Continue`.
pub const REQUEST_TRAILERS_STATUS_CONTINUE: OnHttpFilterRequestTrailersStatus = 0;
/// `StopIteration`.
pub const REQUEST_TRAILERS_STATUS_STOP_ITERATION: OnHttpFilterRequestTrailersStatus = 1;

/// `envoy_dynamic_module_type_on_http_filter_response_headers_status` (`FilterHeadersStatus`).
pub type OnHttpFilterResponseHeadersStatus = u32; // abi.h chars 33200..49200
/// `Continue`.
pub const RESPONSE_HEADERS_STATUS_CONTINUE: OnHttpFilterResponseHeadersStatus = 0;
/// `StopIteration`.
pub const RESPONSE_HEADERS_STATUS_STOP_ITERATION: OnHttpFilterResponseHeadersStatus = 1;
/// `ContinueAndDontEndStream`.
pub const RESPONSE_HEADERS_STATUS_CONTINUE_AND_DONT_END_STREAM: OnHttpFilterResponseHeadersStatus =
    2;
/// `StopAllIterationAndBuffer`.
pub const RESPONSE_HEADERS_STATUS_STOP_ALL_ITERATION_AND_BUFFER: OnHttpFilterResponseHeadersStatus =
    3;
/// `StopAllIterationAndWatermark`.
pub const RESPONSE_HEADERS_STATUS_STOP_ALL_ITERATION_AND_WATERMARK:
    OnHttpFilterResponseHeadersStatus = 4;

/// `envoy_dynamic_module_type_on_http_filter_response_body_status` (`FilterDataStatus`).
pub type OnHttpFilterResponseBodyStatus = u32; // abi.h chars 33200..49200
/// `Continue`.
pub const RESPONSE_BODY_STATUS_CONTINUE: OnHttpFilterResponseBodyStatus = 0;
/// `StopIterationAndBuffer`.
pub const RESPONSE_BODY_STATUS_STOP_ITERATION_AND_BUFFER: OnHttpFilterResponseBodyStatus = 1;
/// `StopIterationAndWatermark`.
pub const RESPONSE_BODY_STATUS_STOP_ITERATION_AND_WATERMARK: OnHttpFilterResponseBodyStatus = 2;
/// `StopIterationNoBuffer`.
pub const RESPONSE_BODY_STATUS_STOP_ITERATION_NO_BUFFER: OnHttpFilterResponseBodyStatus = 3;

/// `envoy_dynamic_module_type_on_http_filter_response_trailers_status` (`FilterTrailersStatus`).
pub type OnHttpFilterResponseTrailersStatus = u32; // abi.h chars 33200..49200
/// `Continue`.
pub const RESPONSE_TRAILERS_STATUS_CONTINUE: OnHttpFilterResponseTrailersStatus = 0;
/// `StopIteration`.
pub const RESPONSE_TRAILERS_STATUS_STOP_ITERATION: OnHttpFilterResponseTrailersStatus = 1;

/// `envoy_dynamic_module_type_on_http_filter_local_reply_status` (`LocalErrorStatus`): what
/// happens once every filter has seen the local reply.
pub type OnHttpFilterLocalReplyStatus = u32; // abi.h chars 33200..49200
/// Send the local reply.
pub const LOCAL_REPLY_STATUS_CONTINUE: OnHttpFilterLocalReplyStatus = 0;
/// Reset the stream instead of sending the local reply.
pub const LOCAL_REPLY_STATUS_CONTINUE_AND_RESET_STREAM: OnHttpFilterLocalReplyStatus = 1;

// Layout checks: the structs are the C structs of pointers and `size_t`s.
const _: () = assert!(size_of::<EnvoyBuffer>() == 2 * size_of::<usize>());
const _: () = assert!(size_of::<ModuleBuffer>() == 2 * size_of::<usize>());
const _: () = assert!(size_of::<ModuleHttpHeader>() == 4 * size_of::<usize>());
const _: () = assert!(size_of::<EnvoyHttpHeader>() == 4 * size_of::<usize>());

// ============================================================================================
// Callbacks: implemented by Envoy, called by the module
// ============================================================================================

#[allow(
    unsafe_code,
    reason = "declaring Envoy's exported callbacks needs an `unsafe extern` block; calling them stays `unsafe` for callers"
)]
unsafe extern "C" {
    // ---------------------------------- Logging ----------------------------------------------

    /// Logs `message` at `level` in Envoy's log under the `[dynamic_modules]` id; the buffer is
    /// only read during the call. Deprecated in v0.2.0 in favour of the `_v2` form.
    pub fn envoy_dynamic_module_callback_log(level: LogLevel, message: ModuleBuffer); // abi.h chars 17200..33200

    /// Like `envoy_dynamic_module_callback_log`, reporting the module's `source_file` and
    /// `source_line` as the location of the log statement (v0.2.0 only; not in v0.1.0).
    pub fn envoy_dynamic_module_callback_log_v2(
        level: LogLevel,
        message: ModuleBuffer,
        source_file: ModuleBuffer,
        source_line: u32,
    ); // abi.h chars 17200..33200

    /// True if `level` is enabled for the dynamic modules log id (cheap; use it to skip
    /// formatting).
    pub fn envoy_dynamic_module_callback_log_enabled(level: LogLevel) -> bool; // abi.h chars 17200..33200

    // ---------------------------------- Metrics ----------------------------------------------

    /// Defines a counter template named `name` with `label_names` (may be null when
    /// `label_names_length` is 0) on the filter config, storing its opaque id in
    /// `*counter_id_ptr`; call during initialization.
    pub fn envoy_dynamic_module_callback_http_filter_config_define_counter(
        filter_config_envoy_ptr: HttpFilterConfigEnvoyPtr,
        name: ModuleBuffer,
        label_names: *mut ModuleBuffer,
        label_names_length: usize,
        counter_id_ptr: *mut usize,
    ) -> MetricsResult; // abi.h chars 65200..81200

    /// Increments by `value` the counter `id` defined on the config that created this filter;
    /// `label_values_length` must match the label names given at definition.
    pub fn envoy_dynamic_module_callback_http_filter_increment_counter(
        filter_envoy_ptr: HttpFilterEnvoyPtr,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> MetricsResult; // abi.h chars 65200..81200

    /// Increments by `value` the counter `id` from the filter-config context, with no stream
    /// needed (e.g. from a scheduled background task).
    pub fn envoy_dynamic_module_callback_http_filter_config_increment_counter(
        filter_config_envoy_ptr: HttpFilterConfigEnvoyPtr,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> MetricsResult; // abi.h chars 81200..97200

    /// Defines a gauge named `name` with `label_names` (may be null when
    /// `label_names_length` is 0) on the filter config, storing its opaque id in
    /// `*gauge_id_ptr`; call during initialization.
    pub fn envoy_dynamic_module_callback_http_filter_config_define_gauge(
        filter_config_envoy_ptr: HttpFilterConfigEnvoyPtr,
        name: ModuleBuffer,
        label_names: *mut ModuleBuffer,
        label_names_length: usize,
        gauge_id_ptr: *mut usize,
    ) -> MetricsResult; // abi.h chars 81200..97200

    /// Sets the gauge `id` to `value` from the filter-config context (no stream needed).
    pub fn envoy_dynamic_module_callback_http_filter_config_set_gauge(
        filter_config_envoy_ptr: HttpFilterConfigEnvoyPtr,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> MetricsResult; // abi.h chars 81200..97200

    // ------------------------------ Headers and trailers -------------------------------------

    /// Gets value number `index` of header `key` in the `header_type` map into
    /// `*result_buffer` (a null buffer if absent), storing the number of values for the key in
    /// `*optional_size` unless it is null; the value is Envoy's, valid until the current hook
    /// ends or a setter is called, and not necessarily UTF-8.
    pub fn envoy_dynamic_module_callback_http_get_header(
        filter_envoy_ptr: HttpFilterEnvoyPtr,
        header_type: HttpHeaderType,
        key: ModuleBuffer,
        result_buffer: *mut EnvoyBuffer,
        index: usize,
        optional_size: *mut usize,
    ) -> bool; // abi.h chars 97200..113200

    /// Number of headers in the `header_type` map (0 if none or unavailable).
    pub fn envoy_dynamic_module_callback_http_get_headers_size(
        filter_envoy_ptr: HttpFilterEnvoyPtr,
        header_type: HttpHeaderType,
    ) -> usize; // abi.h chars 97200..113200

    /// Copies every header of the `header_type` map into `result_headers`, which must have
    /// room for `envoy_dynamic_module_callback_http_get_headers_size` entries.
    pub fn envoy_dynamic_module_callback_http_get_headers(
        filter_envoy_ptr: HttpFilterEnvoyPtr,
        header_type: HttpHeaderType,
        result_headers: *mut EnvoyHttpHeader,
    ) -> bool; // abi.h chars 97200..113200

    /// Sets header `key` in the `header_type` map to `value`, replacing all existing values;
    /// a null `value` removes the header.
    pub fn envoy_dynamic_module_callback_http_set_header(
        filter_envoy_ptr: HttpFilterEnvoyPtr,
        header_type: HttpHeaderType,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool; // abi.h chars 97200..113200

    /// Adds `value` as one more value of header `key` in the `header_type` map, creating the
    /// header if it is absent.
    pub fn envoy_dynamic_module_callback_http_add_header(
        filter_envoy_ptr: HttpFilterEnvoyPtr,
        header_type: HttpHeaderType,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool; // abi.h chars 97200..113200

    // --------------------------------- Local response ----------------------------------------

    /// Sends a local response downstream: `status_code`, `headers_vector_size` headers, `body`,
    /// and optional response code `details` (e.g. "rate_limited", may be null).
    pub fn envoy_dynamic_module_callback_http_send_response(
        filter_envoy_ptr: HttpFilterEnvoyPtr,
        status_code: u32,
        headers_vector: *mut ModuleHttpHeader,
        headers_vector_size: usize,
        body: ModuleBuffer,
        details: ModuleBuffer,
    ); // abi.h chars 97200..113200

    /// Sends response headers downstream from the filter itself (`encodeHeaders` on the
    /// decoder callbacks, no local-reply machinery), ending the stream when `end_stream`;
    /// for a filter that stopped the request path and answers it (as Envoy's cache filter
    /// answers a hit).
    pub fn envoy_dynamic_module_callback_http_send_response_headers(
        filter_envoy_ptr: HttpFilterEnvoyPtr,
        headers_vector: *mut ModuleHttpHeader,
        headers_vector_size: usize,
        end_stream: bool,
    ); // abi.h chars 97200..113200

    /// Sends response body bytes downstream after `..._send_response_headers`, ending the
    /// stream when `end_stream` (`encodeData`; Envoy copies `data`).
    pub fn envoy_dynamic_module_callback_http_send_response_data(
        filter_envoy_ptr: HttpFilterEnvoyPtr,
        data: ModuleBuffer,
        end_stream: bool,
    ); // abi.h chars 97200..113200

    /// Reads string attribute `attribute_id` of the stream into `*result` (Envoy's bytes,
    /// valid for the current hook); false when absent or not a string attribute.
    pub fn envoy_dynamic_module_callback_http_filter_get_attribute_string(
        filter_envoy_ptr: HttpFilterEnvoyPtr,
        attribute_id: AttributeId,
        result: *mut EnvoyBuffer,
    ) -> bool; // abi.h chars 161200..177200

    // -------------------------------------- Body ---------------------------------------------

    /// Number of buffers (chunks) in the `body_type` body (0 if unavailable or empty).
    pub fn envoy_dynamic_module_callback_http_get_body_chunks_size(
        filter_envoy_ptr: HttpFilterEnvoyPtr,
        body_type: HttpBodyType,
    ) -> usize; // abi.h chars 113200..129200

    /// Copies the chunks of the `body_type` body into `result_buffer_vector`, which must have
    /// room for `envoy_dynamic_module_callback_http_get_body_chunks_size` entries; false if the
    /// body is unavailable.
    pub fn envoy_dynamic_module_callback_http_get_body_chunks(
        filter_envoy_ptr: HttpFilterEnvoyPtr,
        body_type: HttpBodyType,
        result_buffer_vector: *mut EnvoyBuffer,
    ) -> bool; // abi.h chars 113200..129200

    /// Total bytes of the `body_type` body (0 if unavailable or empty).
    pub fn envoy_dynamic_module_callback_http_get_body_size(
        filter_envoy_ptr: HttpFilterEnvoyPtr,
        body_type: HttpBodyType,
    ) -> usize; // abi.h chars 113200..129200

    /// Appends `data` to the end of the `body_type` body; false if the body is unavailable.
    pub fn envoy_dynamic_module_callback_http_append_body(
        filter_envoy_ptr: HttpFilterEnvoyPtr,
        body_type: HttpBodyType,
        data: ModuleBuffer,
    ) -> bool; // abi.h chars 113200..129200

    /// Drains `number_of_bytes` from the front of the `body_type` body (all of it if larger);
    /// false if the body is unavailable.
    pub fn envoy_dynamic_module_callback_http_drain_body(
        filter_envoy_ptr: HttpFilterEnvoyPtr,
        body_type: HttpBodyType,
        number_of_bytes: usize,
    ) -> bool; // abi.h chars 113200..129200

    // ------------------------------- Filter chain control ------------------------------------

    /// Resumes decoding (the request path) of a filter that stopped iteration.
    pub fn envoy_dynamic_module_callback_http_filter_continue_decoding(
        filter_envoy_ptr: HttpFilterEnvoyPtr,
    ); // abi.h chars 161200..177200

    /// Resumes encoding (the response path) of a filter that stopped iteration.
    pub fn envoy_dynamic_module_callback_http_filter_continue_encoding(
        filter_envoy_ptr: HttpFilterEnvoyPtr,
    ); // abi.h chars 161200..177200

    /// The worker index assigned to this filter's stream (for worker-specific resources).
    pub fn envoy_dynamic_module_callback_http_filter_get_worker_index(
        filter_envoy_ptr: HttpFilterEnvoyPtr,
    ) -> u32; // abi.h chars 161200..177200

    // ----------------------------------- HTTP callout ----------------------------------------

    /// Starts an HTTP callout to `cluster_name` with `headers` (must hold `:method`, `:path`
    /// and `host`), `body` and a timeout; stores its id in `*callout_id_out`; the answer comes
    /// to `envoy_dynamic_module_on_http_filter_http_callout_done`.
    pub fn envoy_dynamic_module_callback_http_filter_http_callout(
        filter_envoy_ptr: HttpFilterEnvoyPtr,
        callout_id_out: *mut u64,
        cluster_name: ModuleBuffer,
        headers: *mut ModuleHttpHeader,
        headers_size: usize,
        body: ModuleBuffer,
        timeout_milliseconds: u64,
    ) -> HttpCalloutInitResult; // abi.h chars 145200..161200

    /// Starts an HTTP callout from the filter configuration (on the main thread), as
    /// `..._http_filter_http_callout`; the answer comes to
    /// `envoy_dynamic_module_on_http_filter_config_http_callout_done`.
    pub fn envoy_dynamic_module_callback_http_filter_config_http_callout(
        filter_config_envoy_ptr: HttpFilterConfigEnvoyPtr,
        callout_id_out: *mut u64,
        cluster_name: ModuleBuffer,
        headers: *mut ModuleHttpHeader,
        headers_size: usize,
        body: ModuleBuffer,
        timeout_milliseconds: u64,
    ) -> HttpCalloutInitResult; // abi.h chars 145200..161200

    // ------------------------------------ Schedulers -----------------------------------------

    /// Creates a scheduler that lets any thread dispatch events to this filter's worker
    /// thread; the module must free it with `..._http_filter_scheduler_delete`.
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_new(
        filter_envoy_ptr: HttpFilterEnvoyPtr,
    ) -> HttpFilterSchedulerModulePtr; // abi.h chars 145200..161200

    /// Schedules event `event_id` to the filter, delivered as
    /// `envoy_dynamic_module_on_http_filter_scheduled` on its worker thread; callable from any
    /// thread, a no-op once the filter is destroyed.
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_commit(
        scheduler_module_ptr: HttpFilterSchedulerModulePtr,
        event_id: u64,
    ); // abi.h chars 145200..161200

    /// Deletes a scheduler created by `envoy_dynamic_module_callback_http_filter_scheduler_new`.
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_delete(
        scheduler_module_ptr: HttpFilterSchedulerModulePtr,
    ); // abi.h chars 145200..161200

    /// Creates a scheduler that lets any thread dispatch events to the filter config on the
    /// main thread; the module must free it with `..._http_filter_config_scheduler_delete`.
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_new(
        filter_config_envoy_ptr: HttpFilterConfigEnvoyPtr,
    ) -> HttpFilterConfigSchedulerModulePtr; // abi.h chars 145200..161200

    /// Schedules event `event_id` to the filter config, delivered as
    /// `envoy_dynamic_module_on_http_filter_config_scheduled` on the main thread.
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_commit(
        scheduler_module_ptr: HttpFilterConfigSchedulerModulePtr,
        event_id: u64,
    ); // abi.h chars 145200..161200

    /// Deletes a scheduler created by
    /// `envoy_dynamic_module_callback_http_filter_config_scheduler_new`.
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_delete(
        scheduler_module_ptr: HttpFilterConfigSchedulerModulePtr,
    ); // abi.h chars 145200..161200
}

// ============================================================================================
// Event hooks: implemented and exported by the module, called by Envoy
// ============================================================================================
//
// One alias per hook name the Envoy 1.40.0 binary looks up for HTTP filters (every
// `envoy_dynamic_module_on_http_filter_*` string in it), plus `envoy_dynamic_module_on_program_init`.
// Export each as `#[unsafe(no_mangle)] pub extern "C" fn <C name>(...)` with these parameter
// and return types, and pin it with `const _: OnXxx = <C name>;`.

/// `envoy_dynamic_module_on_program_init`, called once on the main thread when the module is
/// loaded; returns the ABI version string the module was built against ([`ABI_VERSION`]), or
/// null to fail the load.
///
/// C: `envoy_dynamic_module_type_abi_version_module_ptr envoy_dynamic_module_on_program_init(void);`
pub type OnProgramInit = unsafe extern "C" fn() -> AbiVersionModulePtr; // abi.h chars 17200..33200

/// `envoy_dynamic_module_on_http_filter_config_new`, on the main thread when a filter config is
/// loaded; returns the module's config, or null to reject the configuration.
///
/// C: `envoy_dynamic_module_type_http_filter_config_module_ptr
/// envoy_dynamic_module_on_http_filter_config_new(envoy_dynamic_module_type_http_filter_config_envoy_ptr
/// filter_config_envoy_ptr, envoy_dynamic_module_type_envoy_buffer name,
/// envoy_dynamic_module_type_envoy_buffer config);`
pub type OnHttpFilterConfigNew = unsafe extern "C" fn(
    filter_config_envoy_ptr: HttpFilterConfigEnvoyPtr,
    name: EnvoyBuffer,
    config: EnvoyBuffer,
) -> HttpFilterConfigModulePtr; // abi.h chars 49200..65200

/// `envoy_dynamic_module_on_http_filter_config_destroy`, when Envoy destroys the filter config;
/// the module releases its config.
///
/// C: `void envoy_dynamic_module_on_http_filter_config_destroy(
/// envoy_dynamic_module_type_http_filter_config_module_ptr filter_config_ptr);`
pub type OnHttpFilterConfigDestroy =
    unsafe extern "C" fn(filter_config_ptr: HttpFilterConfigModulePtr); // abi.h chars 49200..65200

/// `envoy_dynamic_module_on_http_filter_per_route_config_new`, on the main thread when a
/// per-route config is loaded; returns the module's per-route config, or null to reject it.
///
/// C: `envoy_dynamic_module_type_http_filter_per_route_config_module_ptr
/// envoy_dynamic_module_on_http_filter_per_route_config_new(envoy_dynamic_module_type_envoy_buffer
/// name, envoy_dynamic_module_type_envoy_buffer config);`
pub type OnHttpFilterPerRouteConfigNew = unsafe extern "C" fn(
    name: EnvoyBuffer,
    config: EnvoyBuffer,
) -> HttpFilterPerRouteConfigModulePtr; // abi.h chars 49200..65200

/// `envoy_dynamic_module_on_http_filter_per_route_config_destroy`, when Envoy destroys a
/// per-route config; the module releases it.
///
/// C: `void envoy_dynamic_module_on_http_filter_per_route_config_destroy(
/// envoy_dynamic_module_type_http_filter_per_route_config_module_ptr filter_config_ptr);`
pub type OnHttpFilterPerRouteConfigDestroy =
    unsafe extern "C" fn(filter_config_ptr: HttpFilterPerRouteConfigModulePtr); // abi.h chars 49200..65200

/// `envoy_dynamic_module_on_http_filter_new`, for each HTTP stream; returns the module's filter,
/// or null to close the stream.
///
/// C: `envoy_dynamic_module_type_http_filter_module_ptr envoy_dynamic_module_on_http_filter_new(
/// envoy_dynamic_module_type_http_filter_config_module_ptr filter_config_ptr,
/// envoy_dynamic_module_type_http_filter_envoy_ptr filter_envoy_ptr);`
pub type OnHttpFilterNew = unsafe extern "C" fn(
    filter_config_ptr: HttpFilterConfigModulePtr,
    filter_envoy_ptr: HttpFilterEnvoyPtr,
) -> HttpFilterModulePtr; // abi.h chars 49200..65200

/// `envoy_dynamic_module_on_http_filter_request_headers`, when the request headers arrive
/// (`end_of_stream`: they are the last data).
///
/// C: `envoy_dynamic_module_type_on_http_filter_request_headers_status
/// envoy_dynamic_module_on_http_filter_request_headers(envoy_dynamic_module_type_http_filter_envoy_ptr
/// filter_envoy_ptr, envoy_dynamic_module_type_http_filter_module_ptr filter_module_ptr, bool
/// end_of_stream);`
pub type OnHttpFilterRequestHeaders = unsafe extern "C" fn(
    filter_envoy_ptr: HttpFilterEnvoyPtr,
    filter_module_ptr: HttpFilterModulePtr,
    end_of_stream: bool,
) -> OnHttpFilterRequestHeadersStatus; // abi.h chars 49200..65200

/// `envoy_dynamic_module_on_http_filter_request_body`, for each request body data frame.
///
/// C: `envoy_dynamic_module_type_on_http_filter_request_body_status
/// envoy_dynamic_module_on_http_filter_request_body(envoy_dynamic_module_type_http_filter_envoy_ptr
/// filter_envoy_ptr, envoy_dynamic_module_type_http_filter_module_ptr filter_module_ptr, bool
/// end_of_stream);`
pub type OnHttpFilterRequestBody = unsafe extern "C" fn(
    filter_envoy_ptr: HttpFilterEnvoyPtr,
    filter_module_ptr: HttpFilterModulePtr,
    end_of_stream: bool,
) -> OnHttpFilterRequestBodyStatus; // abi.h chars 49200..65200

/// `envoy_dynamic_module_on_http_filter_request_trailers`, when the request trailers arrive.
///
/// C: `envoy_dynamic_module_type_on_http_filter_request_trailers_status
/// envoy_dynamic_module_on_http_filter_request_trailers(envoy_dynamic_module_type_http_filter_envoy_ptr
/// filter_envoy_ptr, envoy_dynamic_module_type_http_filter_module_ptr filter_module_ptr);`
pub type OnHttpFilterRequestTrailers = unsafe extern "C" fn(
    filter_envoy_ptr: HttpFilterEnvoyPtr,
    filter_module_ptr: HttpFilterModulePtr,
) -> OnHttpFilterRequestTrailersStatus; // abi.h chars 49200..65200

/// `envoy_dynamic_module_on_http_filter_response_headers`, when the response headers arrive.
///
/// C: `envoy_dynamic_module_type_on_http_filter_response_headers_status
/// envoy_dynamic_module_on_http_filter_response_headers(envoy_dynamic_module_type_http_filter_envoy_ptr
/// filter_envoy_ptr, envoy_dynamic_module_type_http_filter_module_ptr filter_module_ptr, bool
/// end_of_stream);`
pub type OnHttpFilterResponseHeaders = unsafe extern "C" fn(
    filter_envoy_ptr: HttpFilterEnvoyPtr,
    filter_module_ptr: HttpFilterModulePtr,
    end_of_stream: bool,
) -> OnHttpFilterResponseHeadersStatus; // abi.h chars 49200..65200

/// `envoy_dynamic_module_on_http_filter_response_body`, for each response body data frame.
///
/// C: `envoy_dynamic_module_type_on_http_filter_response_body_status
/// envoy_dynamic_module_on_http_filter_response_body(envoy_dynamic_module_type_http_filter_envoy_ptr
/// filter_envoy_ptr, envoy_dynamic_module_type_http_filter_module_ptr filter_module_ptr, bool
/// end_of_stream);`
pub type OnHttpFilterResponseBody = unsafe extern "C" fn(
    filter_envoy_ptr: HttpFilterEnvoyPtr,
    filter_module_ptr: HttpFilterModulePtr,
    end_of_stream: bool,
) -> OnHttpFilterResponseBodyStatus; // abi.h chars 49200..65200

/// `envoy_dynamic_module_on_http_filter_response_trailers`, when the response trailers arrive.
///
/// C: `envoy_dynamic_module_type_on_http_filter_response_trailers_status
/// envoy_dynamic_module_on_http_filter_response_trailers(envoy_dynamic_module_type_http_filter_envoy_ptr
/// filter_envoy_ptr, envoy_dynamic_module_type_http_filter_module_ptr filter_module_ptr);`
pub type OnHttpFilterResponseTrailers = unsafe extern "C" fn(
    filter_envoy_ptr: HttpFilterEnvoyPtr,
    filter_module_ptr: HttpFilterModulePtr,
) -> OnHttpFilterResponseTrailersStatus; // abi.h chars 49200..65200

/// `envoy_dynamic_module_on_http_filter_stream_complete`, when the stream completes, before
/// `..._destroy` and before access logs are flushed (may run while another hook of the same
/// filter is on the stack).
///
/// C: `void envoy_dynamic_module_on_http_filter_stream_complete(
/// envoy_dynamic_module_type_http_filter_envoy_ptr filter_envoy_ptr,
/// envoy_dynamic_module_type_http_filter_module_ptr filter_module_ptr);`
pub type OnHttpFilterStreamComplete = unsafe extern "C" fn(
    filter_envoy_ptr: HttpFilterEnvoyPtr,
    filter_module_ptr: HttpFilterModulePtr,
); // abi.h chars 49200..65200

/// `envoy_dynamic_module_on_http_filter_destroy`, when the stream's filter is destroyed
/// (deferred; never while another hook of the filter runs); the module releases its filter.
///
/// C: `void envoy_dynamic_module_on_http_filter_destroy(
/// envoy_dynamic_module_type_http_filter_module_ptr filter_module_ptr);`
pub type OnHttpFilterDestroy = unsafe extern "C" fn(filter_module_ptr: HttpFilterModulePtr); // abi.h chars 49200..65200

/// `envoy_dynamic_module_on_http_filter_http_callout_done`, when a callout started by the
/// filter finishes; `headers` and `body_chunks` are Envoy's, valid during the hook, and may be
/// null if the callout failed or the response is empty.
///
/// C: `void envoy_dynamic_module_on_http_filter_http_callout_done(
/// envoy_dynamic_module_type_http_filter_envoy_ptr filter_envoy_ptr,
/// envoy_dynamic_module_type_http_filter_module_ptr filter_module_ptr, uint64_t callout_id,
/// envoy_dynamic_module_type_http_callout_result result,
/// envoy_dynamic_module_type_envoy_http_header* headers, size_t headers_size,
/// envoy_dynamic_module_type_envoy_buffer* body_chunks, size_t body_chunks_size);`
pub type OnHttpFilterHttpCalloutDone = unsafe extern "C" fn(
    filter_envoy_ptr: HttpFilterEnvoyPtr,
    filter_module_ptr: HttpFilterModulePtr,
    callout_id: u64,
    result: HttpCalloutResult,
    headers: *mut EnvoyHttpHeader,
    headers_size: usize,
    body_chunks: *mut EnvoyBuffer,
    body_chunks_size: usize,
); // abi.h chars 49200..65200

/// `envoy_dynamic_module_on_http_filter_http_stream_headers`, when response headers arrive on
/// a streamable callout (`end_stream`: no body or trailers follow).
///
/// C: `void envoy_dynamic_module_on_http_filter_http_stream_headers(
/// envoy_dynamic_module_type_http_filter_envoy_ptr filter_envoy_ptr,
/// envoy_dynamic_module_type_http_filter_module_ptr filter_module_ptr, uint64_t stream_id,
/// envoy_dynamic_module_type_envoy_http_header* headers, size_t headers_size, bool end_stream);`
pub type OnHttpFilterHttpStreamHeaders = unsafe extern "C" fn(
    filter_envoy_ptr: HttpFilterEnvoyPtr,
    filter_module_ptr: HttpFilterModulePtr,
    stream_id: u64,
    headers: *mut EnvoyHttpHeader,
    headers_size: usize,
    end_stream: bool,
); // abi.h chars 49200..65200

/// `envoy_dynamic_module_on_http_filter_http_stream_data`, for each response body chunk of a
/// streamable callout (`end_stream`: no trailers follow).
///
/// C: `void envoy_dynamic_module_on_http_filter_http_stream_data(
/// envoy_dynamic_module_type_http_filter_envoy_ptr filter_envoy_ptr,
/// envoy_dynamic_module_type_http_filter_module_ptr filter_module_ptr, uint64_t stream_id,
/// const envoy_dynamic_module_type_envoy_buffer* data, size_t data_count, bool end_stream);`
pub type OnHttpFilterHttpStreamData = unsafe extern "C" fn(
    filter_envoy_ptr: HttpFilterEnvoyPtr,
    filter_module_ptr: HttpFilterModulePtr,
    stream_id: u64,
    data: *const EnvoyBuffer,
    data_count: usize,
    end_stream: bool,
); // abi.h chars 49200..65200

/// `envoy_dynamic_module_on_http_filter_http_stream_trailers`, when response trailers arrive
/// on a streamable callout.
///
/// C: `void envoy_dynamic_module_on_http_filter_http_stream_trailers(
/// envoy_dynamic_module_type_http_filter_envoy_ptr filter_envoy_ptr,
/// envoy_dynamic_module_type_http_filter_module_ptr filter_module_ptr, uint64_t stream_id,
/// envoy_dynamic_module_type_envoy_http_header* trailers, size_t trailers_size);`
pub type OnHttpFilterHttpStreamTrailers = unsafe extern "C" fn(
    filter_envoy_ptr: HttpFilterEnvoyPtr,
    filter_module_ptr: HttpFilterModulePtr,
    stream_id: u64,
    trailers: *mut EnvoyHttpHeader,
    trailers_size: usize,
); // abi.h chars 49200..65200

/// `envoy_dynamic_module_on_http_filter_http_stream_complete`, when a streamable callout
/// completes; the stream id is invalid afterwards.
///
/// C: `void envoy_dynamic_module_on_http_filter_http_stream_complete(
/// envoy_dynamic_module_type_http_filter_envoy_ptr filter_envoy_ptr,
/// envoy_dynamic_module_type_http_filter_module_ptr filter_module_ptr, uint64_t stream_id);`
pub type OnHttpFilterHttpStreamComplete = unsafe extern "C" fn(
    filter_envoy_ptr: HttpFilterEnvoyPtr,
    filter_module_ptr: HttpFilterModulePtr,
    stream_id: u64,
); // abi.h chars 65200..81200

/// `envoy_dynamic_module_on_http_filter_http_stream_reset`, when a streamable callout is reset
/// or fails (instead of `..._complete`); the stream id is invalid afterwards.
///
/// C: `void envoy_dynamic_module_on_http_filter_http_stream_reset(
/// envoy_dynamic_module_type_http_filter_envoy_ptr filter_envoy_ptr,
/// envoy_dynamic_module_type_http_filter_module_ptr filter_module_ptr, uint64_t stream_id,
/// envoy_dynamic_module_type_http_stream_reset_reason reason);`
pub type OnHttpFilterHttpStreamReset = unsafe extern "C" fn(
    filter_envoy_ptr: HttpFilterEnvoyPtr,
    filter_module_ptr: HttpFilterModulePtr,
    stream_id: u64,
    reason: HttpStreamResetReason,
); // abi.h chars 65200..81200

/// `envoy_dynamic_module_on_http_filter_scheduled`, on the filter's worker thread for each
/// event committed with `envoy_dynamic_module_callback_http_filter_scheduler_commit`.
///
/// C: `void envoy_dynamic_module_on_http_filter_scheduled(
/// envoy_dynamic_module_type_http_filter_envoy_ptr filter_envoy_ptr,
/// envoy_dynamic_module_type_http_filter_module_ptr filter_module_ptr, uint64_t event_id);`
pub type OnHttpFilterScheduled = unsafe extern "C" fn(
    filter_envoy_ptr: HttpFilterEnvoyPtr,
    filter_module_ptr: HttpFilterModulePtr,
    event_id: u64,
); // abi.h chars 65200..81200

/// `envoy_dynamic_module_on_http_filter_config_scheduled`, on the main thread for each event
/// committed with `envoy_dynamic_module_callback_http_filter_config_scheduler_commit`.
///
/// C: `void envoy_dynamic_module_on_http_filter_config_scheduled(
/// envoy_dynamic_module_type_http_filter_config_envoy_ptr filter_config_envoy_ptr,
/// envoy_dynamic_module_type_http_filter_config_module_ptr filter_config_ptr, uint64_t
/// event_id);`
pub type OnHttpFilterConfigScheduled = unsafe extern "C" fn(
    filter_config_envoy_ptr: HttpFilterConfigEnvoyPtr,
    filter_config_ptr: HttpFilterConfigModulePtr,
    event_id: u64,
); // abi.h chars 65200..81200

/// `envoy_dynamic_module_on_http_filter_config_http_callout_done`, when a callout started from
/// the filter config finishes; `headers`/`body_chunks` as in the per-filter hook.
///
/// C: `void envoy_dynamic_module_on_http_filter_config_http_callout_done(
/// envoy_dynamic_module_type_http_filter_config_envoy_ptr filter_config_envoy_ptr,
/// envoy_dynamic_module_type_http_filter_config_module_ptr filter_config_ptr, uint64_t
/// callout_id, envoy_dynamic_module_type_http_callout_result result,
/// envoy_dynamic_module_type_envoy_http_header* headers, size_t headers_size,
/// envoy_dynamic_module_type_envoy_buffer* body_chunks, size_t body_chunks_size);`
pub type OnHttpFilterConfigHttpCalloutDone = unsafe extern "C" fn(
    filter_config_envoy_ptr: HttpFilterConfigEnvoyPtr,
    filter_config_ptr: HttpFilterConfigModulePtr,
    callout_id: u64,
    result: HttpCalloutResult,
    headers: *mut EnvoyHttpHeader,
    headers_size: usize,
    body_chunks: *mut EnvoyBuffer,
    body_chunks_size: usize,
); // abi.h chars 65200..81200

/// `envoy_dynamic_module_on_http_filter_config_http_stream_headers`, response headers of a
/// streamable callout started from the filter config.
///
/// C: `void envoy_dynamic_module_on_http_filter_config_http_stream_headers(
/// envoy_dynamic_module_type_http_filter_config_envoy_ptr filter_config_envoy_ptr,
/// envoy_dynamic_module_type_http_filter_config_module_ptr filter_config_ptr, uint64_t
/// stream_id, envoy_dynamic_module_type_envoy_http_header* headers, size_t headers_size, bool
/// end_stream);`
pub type OnHttpFilterConfigHttpStreamHeaders = unsafe extern "C" fn(
    filter_config_envoy_ptr: HttpFilterConfigEnvoyPtr,
    filter_config_ptr: HttpFilterConfigModulePtr,
    stream_id: u64,
    headers: *mut EnvoyHttpHeader,
    headers_size: usize,
    end_stream: bool,
); // abi.h chars 65200..81200

/// `envoy_dynamic_module_on_http_filter_config_http_stream_data`, a response body chunk of a
/// streamable callout started from the filter config.
///
/// C: `void envoy_dynamic_module_on_http_filter_config_http_stream_data(
/// envoy_dynamic_module_type_http_filter_config_envoy_ptr filter_config_envoy_ptr,
/// envoy_dynamic_module_type_http_filter_config_module_ptr filter_config_ptr, uint64_t
/// stream_id, const envoy_dynamic_module_type_envoy_buffer* data, size_t data_count, bool
/// end_stream);`
pub type OnHttpFilterConfigHttpStreamData = unsafe extern "C" fn(
    filter_config_envoy_ptr: HttpFilterConfigEnvoyPtr,
    filter_config_ptr: HttpFilterConfigModulePtr,
    stream_id: u64,
    data: *const EnvoyBuffer,
    data_count: usize,
    end_stream: bool,
); // abi.h chars 65200..81200

/// `envoy_dynamic_module_on_http_filter_config_http_stream_trailers`, response trailers of a
/// streamable callout started from the filter config.
///
/// C: `void envoy_dynamic_module_on_http_filter_config_http_stream_trailers(
/// envoy_dynamic_module_type_http_filter_config_envoy_ptr filter_config_envoy_ptr,
/// envoy_dynamic_module_type_http_filter_config_module_ptr filter_config_ptr, uint64_t
/// stream_id, envoy_dynamic_module_type_envoy_http_header* trailers, size_t trailers_size);`
pub type OnHttpFilterConfigHttpStreamTrailers = unsafe extern "C" fn(
    filter_config_envoy_ptr: HttpFilterConfigEnvoyPtr,
    filter_config_ptr: HttpFilterConfigModulePtr,
    stream_id: u64,
    trailers: *mut EnvoyHttpHeader,
    trailers_size: usize,
); // abi.h chars 65200..81200

/// `envoy_dynamic_module_on_http_filter_config_http_stream_complete`, a streamable callout
/// started from the filter config completed.
///
/// C: `void envoy_dynamic_module_on_http_filter_config_http_stream_complete(
/// envoy_dynamic_module_type_http_filter_config_envoy_ptr filter_config_envoy_ptr,
/// envoy_dynamic_module_type_http_filter_config_module_ptr filter_config_ptr, uint64_t
/// stream_id);`
pub type OnHttpFilterConfigHttpStreamComplete = unsafe extern "C" fn(
    filter_config_envoy_ptr: HttpFilterConfigEnvoyPtr,
    filter_config_ptr: HttpFilterConfigModulePtr,
    stream_id: u64,
); // abi.h chars 65200..81200

/// `envoy_dynamic_module_on_http_filter_config_http_stream_reset`, a streamable callout
/// started from the filter config was reset or failed.
///
/// C: `void envoy_dynamic_module_on_http_filter_config_http_stream_reset(
/// envoy_dynamic_module_type_http_filter_config_envoy_ptr filter_config_envoy_ptr,
/// envoy_dynamic_module_type_http_filter_config_module_ptr filter_config_ptr, uint64_t
/// stream_id, envoy_dynamic_module_type_http_stream_reset_reason reason);`
pub type OnHttpFilterConfigHttpStreamReset = unsafe extern "C" fn(
    filter_config_envoy_ptr: HttpFilterConfigEnvoyPtr,
    filter_config_ptr: HttpFilterConfigModulePtr,
    stream_id: u64,
    reason: HttpStreamResetReason,
); // abi.h chars 65200..81200

/// `envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark`, when
/// the downstream write buffer of a terminal filter goes over its high watermark (may repeat;
/// matched by as many `..._below_write_buffer_low_watermark` calls).
///
/// C: `void envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark(
/// envoy_dynamic_module_type_http_filter_envoy_ptr filter_envoy_ptr,
/// envoy_dynamic_module_type_http_filter_module_ptr filter_module_ptr);`
pub type OnHttpFilterDownstreamAboveWriteBufferHighWatermark = unsafe extern "C" fn(
    filter_envoy_ptr: HttpFilterEnvoyPtr,
    filter_module_ptr: HttpFilterModulePtr,
); // abi.h chars 65200..81200

/// `envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark`, when the
/// response stream's buffer of a terminal filter drops from over its high watermark to under
/// its low watermark.
///
/// C: `void envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark(
/// envoy_dynamic_module_type_http_filter_envoy_ptr filter_envoy_ptr,
/// envoy_dynamic_module_type_http_filter_module_ptr filter_module_ptr);`
pub type OnHttpFilterDownstreamBelowWriteBufferLowWatermark = unsafe extern "C" fn(
    filter_envoy_ptr: HttpFilterEnvoyPtr,
    filter_module_ptr: HttpFilterModulePtr,
); // abi.h chars 65200..81200

/// `envoy_dynamic_module_on_http_filter_local_reply`, when `sendLocalReply` is invoked on the
/// stream (`details`: the response code details; `reset_imminent`: a reset will happen instead
/// of the reply); the status decides whether the reply is sent or the stream reset.
///
/// C: `envoy_dynamic_module_type_on_http_filter_local_reply_status
/// envoy_dynamic_module_on_http_filter_local_reply(envoy_dynamic_module_type_http_filter_envoy_ptr
/// filter_envoy_ptr, envoy_dynamic_module_type_http_filter_module_ptr filter_module_ptr, uint32_t
/// response_code, envoy_dynamic_module_type_envoy_buffer details, bool reset_imminent);`
pub type OnHttpFilterLocalReply = unsafe extern "C" fn(
    filter_envoy_ptr: HttpFilterEnvoyPtr,
    filter_module_ptr: HttpFilterModulePtr,
    response_code: u32,
    details: EnvoyBuffer,
    reset_imminent: bool,
) -> OnHttpFilterLocalReplyStatus; // abi.h chars 65200..81200
