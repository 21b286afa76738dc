//! The port between a cache worker and its proxy: the [`Host`] trait and the types it speaks.
//!
//! Every host call the worker makes goes through its [`Port`], over the [`Host`] the
//! worker was given when its [`crate::Vm`] was made (as `cachet-compute`'s host is passed
//! in; nothing is installed per thread): the proxy-wasm binding in `envoy-filter`
//! (`ProxyWasm`, given by its entry point), a test double in this crate's unit tests. This
//! is the pattern of Kuadrant's wasm-shim: the worker's logic runs natively under `cargo
//! test`, and every call can be counted ([`Port::calls`]).
//!
//! The port is shaped like the proxy-wasm ABI 0.2.1 (Envoy, Istio, NGINX and ATS wasm
//! hosts implement it): header maps and buffers named by kind, local replies, paused
//! streams resumed by context id, HTTP callouts answered later, shared data with CAS. The
//! types below are the worker's own, so this crate does not depend on the SDK; the binding
//! maps them one to one.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Which header map a call reads or writes (proxy-wasm `MapType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MapType {
    /// The current stream's request headers.
    HttpRequestHeaders,
    /// The current stream's response headers.
    HttpResponseHeaders,
    /// The headers of the callout answer being delivered.
    HttpCallResponseHeaders,
}

/// Which body buffer a call reads (proxy-wasm `BufferType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BufferType {
    /// The current stream's request body (as buffered so far).
    HttpRequestBody,
    /// The current stream's response body (as buffered so far).
    HttpResponseBody,
    /// The body of the callout answer being delivered.
    HttpCallResponseBody,
    /// The plugin configuration.
    PluginConfiguration,
}

/// Severity of a log line (proxy-wasm `LogLevel`; the worker writes these three).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// Configuration and start-up facts.
    Info,
    /// Something failed and is retried (a ban feed, an etcd call).
    Warn,
    /// The configuration is refused.
    Error,
}

/// Kind of a metric (proxy-wasm `MetricType`; the worker defines these two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    /// Only ever added to.
    Counter,
    /// Set to the last computed value.
    Gauge,
}

/// Why the host refused a callout (proxy-wasm `Status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Unknown cluster or missing pseudo-headers.
    BadArgument,
    /// A header value the binding cannot carry exactly: the proxy-wasm Rust SDK (0.2.5)
    /// takes a callout's header values as UTF-8 text (proxy-wasm-rust-sdk issue 26), so a
    /// value that is not UTF-8 is refused rather than dropped or altered. Nothing was sent.
    SerializationFailure,
    /// Any other refusal.
    InternalFailure,
}

/// What the proxy does with a stream after a callback (proxy-wasm `Action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Go on: the request to the upstream, the response to the client.
    Continue,
    /// Hold the stream: it was answered locally, or waits for a callout or a wake-up.
    Pause,
}

/// The host calls the worker makes (proxy-wasm ABI 0.2.1 names in brackets). Header
/// values are bytes in both directions, never assumed UTF-8: what a client or an origin
/// sent (obs-text, RFC 9110 §5.5) goes on byte for byte.
pub trait Host {
    /// Wall clock (`proxy_get_current_time_nanoseconds`).
    fn now(&self) -> SystemTime;
    /// 64 random bits from the platform (WASI `random_get`): the slot-hash key, etcd
    /// entry suffixes. Every draw the worker makes goes through this port.
    fn random(&self) -> u64;
    /// One log line (`proxy_log`).
    fn log(&self, level: LogLevel, msg: &str);
    /// A shared-data value and its CAS token (`proxy_get_shared_data`).
    fn shared_get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>);
    /// Sets a shared-data value; `false` on a CAS mismatch (`proxy_set_shared_data`).
    fn shared_set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool;
    /// Bytes `0..size` of a buffer (`proxy_get_buffer_bytes`).
    fn buffer(&self, kind: BufferType, size: usize) -> Option<Vec<u8>>;
    /// Every pair of a header map (`proxy_get_header_map_pairs`).
    fn headers(&self, map: MapType) -> Vec<(String, Vec<u8>)>;
    /// Sets or removes one header (`proxy_replace_header_map_value` /
    /// `proxy_remove_header_map_value`).
    fn set_header(&self, map: MapType, name: &str, value: Option<&[u8]>);
    /// Replaces a whole header map (`proxy_set_header_map_pairs`).
    fn set_headers(&self, map: MapType, pairs: &[(&str, &[u8])]);
    /// A local reply on the current stream (`proxy_send_local_response`).
    fn send(&self, status: u16, headers: &[(&str, &[u8])], body: Option<&[u8]>);
    /// Makes later stream calls act on `context_id` (`proxy_set_effective_context`).
    fn set_effective_context(&self, context_id: u32) -> bool;
    /// Resumes the current (paused) request (`proxy_continue_stream`).
    fn resume_request(&self);
    /// An HTTP callout; its token (`proxy_http_call`).
    ///
    /// # Errors
    /// The host's status (`BadArgument`: unknown cluster or missing pseudo-headers;
    /// `SerializationFailure`: a value the binding cannot carry exactly).
    fn dispatch(
        &self,
        cluster: &str,
        headers: &[(&str, &[u8])],
        body: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<u32, Status>;
    /// Defines a metric; its id, 0 when refused (`proxy_define_metric`).
    fn define_metric(&self, kind: MetricType, name: &str) -> u32;
    /// Adds to a counter or gauge (`proxy_increment_metric`).
    fn metric_add(&self, id: u32, by: i64);
    /// Sets a gauge (`proxy_record_metric`).
    fn metric_set(&self, id: u32, value: u64);
    /// The root context's tick period (`proxy_set_tick_period_milliseconds`).
    fn set_tick(&self, period: Duration);
    /// Whether the downstream connection uses TLS (property `connection.tls_version`).
    fn downstream_tls(&self) -> bool;
    /// Whether the current stream's response came from its upstream: Envoy's property
    /// `response.code_details` is `via_upstream` (a local reply, e.g. `route_not_found`,
    /// has another); `true` when the host does not say.
    fn via_upstream(&self) -> bool {
        true
    }
    /// Envoy's property `response.code_details` of the current stream (at its end:
    /// `upstream_reset_after_response_started{…}`, `upstream_response_timeout`,
    /// `downstream_remote_disconnect`, …); `None` when the host does not say.
    fn response_code_details(&self) -> Option<Vec<u8>> {
        None
    }
}

/// A worker's way to its host: the [`Host`] it was given (the proxy binding, or a test
/// double), with the conversions and defaults every call site wants, and a count of the
/// calls made. A [`crate::Vm`] owns one and every stream reaches the host through it;
/// nothing is installed per thread.
pub struct Port {
    host: Rc<dyn Host>,
    calls: Cell<u64>,
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port")
            .field("calls", &self.calls)
            .finish_non_exhaustive()
    }
}

impl Port {
    /// The port over `host`.
    pub fn new(host: Rc<dyn Host>) -> Self {
        Self {
            host,
            calls: Cell::new(0),
        }
    }

    /// Host calls made through this port so far (regression figure for the hit path).
    pub fn calls(&self) -> u64 {
        self.calls.get()
    }

    /// The host, counting one call.
    fn with(&self) -> &dyn Host {
        self.calls.set(self.calls.get() + 1);
        &*self.host
    }

    /// The host's wall clock (`proxy_get_current_time_nanoseconds`); the Unix epoch if the
    /// host refuses (never seen).
    pub fn now(&self) -> SystemTime {
        self.with().now()
    }

    /// 64 random bits from the platform ([`Host::random`]).
    pub fn random_u64(&self) -> u64 {
        self.with().random()
    }

    /// Milliseconds since the Unix epoch of [`Port::now`].
    pub fn now_ms(&self) -> u64 {
        u64::try_from(
            self.now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or(Duration::ZERO)
                .as_millis(),
        )
        .unwrap_or(u64::MAX)
    }

    /// Writes one log line at `level`.
    pub fn log(&self, level: LogLevel, msg: &str) {
        self.with().log(level, msg);
    }

    /// A shared-data value and its CAS token (`None`, `None` when absent).
    pub fn shared_get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        self.with().shared_get(key)
    }

    /// Sets a shared-data value; with `cas` the write fails (returns `false`) when another
    /// writer got there first (`Status::CasMismatch`).
    pub fn shared_set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        self.with().shared_set(key, value, cas)
    }

    /// The plugin configuration, read with the exact size the host announced to
    /// `on_configure` (DESIGN.md: some hosts reject the SDK's `usize::MAX`).
    pub fn plugin_configuration(&self, size: usize) -> Option<Vec<u8>> {
        if size == 0 {
            return None;
        }
        self.with().buffer(BufferType::PluginConfiguration, size)
    }

    /// A body buffer (`HttpRequestBody`, `HttpCallResponseBody`, …) of `size` bytes.
    pub fn buffer(&self, kind: BufferType, size: usize) -> Vec<u8> {
        if size == 0 {
            return Vec::new();
        }
        self.with().buffer(kind, size).unwrap_or_default()
    }

    /// All pairs of a header map; values as bytes (the SDK's string form panics on non-UTF-8
    /// values, which clients may send, e.g. in `User-Agent`). Names are lower-case ASCII in
    /// Envoy (HTTP/2 and HTTP/1 codecs both normalize them).
    pub fn headers(&self, map: MapType) -> Vec<(String, Vec<u8>)> {
        self.with().headers(map)
    }

    /// Sets (`Some`) or removes (`None`) one header; the value as bytes.
    pub fn set_header(&self, map: MapType, name: &str, value: Option<&[u8]>) {
        self.with().set_header(map, name, value);
    }

    /// Whether the current stream's response came from its upstream ([`Host::via_upstream`]).
    pub fn via_upstream(&self) -> bool {
        self.with().via_upstream()
    }

    /// The current stream's `response.code_details` ([`Host::response_code_details`]).
    pub fn response_code_details(&self) -> Option<Vec<u8>> {
        self.with().response_code_details()
    }

    /// Replaces a whole header map of the current stream.
    pub fn set_headers(&self, map: MapType, pairs: &[(&str, &[u8])]) {
        self.with().set_headers(map, pairs);
    }

    /// Answers the current stream with a local reply; header values are sent as these bytes.
    pub fn send(&self, status: u16, headers: &[(&str, &[u8])], body: Option<&[u8]>) {
        self.with().send(status, headers, body);
    }

    /// Makes later stream calls act on `context_id` (a paused request resumed from the root).
    pub fn set_effective_context(&self, context_id: u32) -> bool {
        self.with().set_effective_context(context_id)
    }

    /// Lets a paused request continue to the upstream.
    pub fn resume_request(&self) {
        self.with().resume_request();
    }

    /// Dispatches an HTTP call; the token, or the host's refusal.
    ///
    /// # Errors
    /// The host's status: `BadArgument` (unknown cluster, missing pseudo-headers),
    /// `SerializationFailure` (a value the binding cannot carry exactly, [`Status`]) or
    /// `InternalFailure`.
    pub fn dispatch(
        &self,
        cluster: &str,
        headers: &[(&str, &[u8])],
        body: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<u32, Status> {
        self.with().dispatch(cluster, headers, body, timeout)
    }

    /// Defines a metric; 0 (ignored by [`Port::metric_add`]) when the host refuses.
    pub fn define_metric(&self, kind: MetricType, name: &str) -> u32 {
        self.with().define_metric(kind, name)
    }

    /// Adds `by` to a counter or gauge.
    pub fn metric_add(&self, id: u32, by: i64) {
        if id != 0 && by != 0 {
            self.with().metric_add(id, by);
        }
    }

    /// Sets a gauge.
    pub fn metric_set(&self, id: u32, value: u64) {
        if id != 0 {
            self.with().metric_set(id, value);
        }
    }

    /// Sets the root context's tick period.
    pub fn set_tick(&self, period: Duration) {
        self.with().set_tick(period);
    }

    /// Whether the downstream connection uses TLS (property `connection.tls_version`; absent
    /// on plaintext connections and in hosts without properties).
    pub fn downstream_tls(&self) -> bool {
        self.with().downstream_tls()
    }
}

/// Proxy-wasm shared data as `cachet_store::SharedData`: the one seam between the
/// storage protocols (`cachet_store`) and the host.
impl cachet_store::SharedData for Port {
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        self.shared_get(key)
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        self.shared_set(key, value, cas)
    }
}
