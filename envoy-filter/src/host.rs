//! Thin, non-panicking wrappers over the proxy-wasm hostcalls the filter uses.
//!
//! The SDK's own wrappers `panic!` on a status they do not expect; the calls made here are
//! the ones every host answers with the documented statuses (Envoy 1.40, our wasmtime
//! harness), so a panic would mean a broken host, not bad input.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, LogLevel, MapType, MetricType, Status};

/// The host's wall clock (`proxy_get_current_time_nanoseconds`); the Unix epoch if the
/// host refuses (never seen).
pub fn now() -> SystemTime {
    hostcalls::get_current_time().unwrap_or(UNIX_EPOCH)
}

/// Milliseconds since the Unix epoch of [`now`].
pub fn now_ms() -> u64 {
    u64::try_from(
        now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_millis(),
    )
    .unwrap_or(u64::MAX)
}

/// Writes one log line at `level`.
pub fn log(level: LogLevel, msg: &str) {
    let _ = hostcalls::log(level, msg);
}

/// A shared-data value and its CAS token (`None`, `None` when absent).
pub fn shared_get(key: &str) -> (Option<Vec<u8>>, Option<u32>) {
    hostcalls::get_shared_data(key).unwrap_or((None, None))
}

/// Sets a shared-data value; with `cas` the write fails (returns `false`) when another
/// writer got there first (`Status::CasMismatch`).
pub fn shared_set(key: &str, value: &[u8], cas: Option<u32>) -> bool {
    hostcalls::set_shared_data(key, Some(value), cas).is_ok()
}

/// The plugin configuration, read with the exact size the host announced to
/// `on_configure` (DESIGN.md: some hosts reject the SDK's `usize::MAX`).
pub fn plugin_configuration(size: usize) -> Option<Vec<u8>> {
    if size == 0 {
        return None;
    }
    hostcalls::get_buffer(BufferType::PluginConfiguration, 0, size)
        .ok()
        .flatten()
}

/// A body buffer (`HttpRequestBody`, `HttpCallResponseBody`, …) of `size` bytes.
pub fn buffer(kind: BufferType, size: usize) -> Vec<u8> {
    if size == 0 {
        return Vec::new();
    }
    hostcalls::get_buffer(kind, 0, size)
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// All pairs of a header map; values as bytes (the SDK's string form panics on non-UTF-8
/// values, which clients may send, e.g. in `User-Agent`). Names are lower-case ASCII in
/// Envoy (HTTP/2 and HTTP/1 codecs both normalize them).
pub fn headers(map: MapType) -> Vec<(String, Vec<u8>)> {
    hostcalls::get_map_bytes(map).unwrap_or_default()
}

/// Sets (`Some`) or removes (`None`) one header.
pub fn set_header(map: MapType, name: &str, value: Option<&str>) {
    let _ = hostcalls::set_map_value(map, name, value);
}

/// Answers the current stream with a local reply.
pub fn send(status: u16, headers: &[(&str, &str)], body: Option<&[u8]>) {
    let _ = hostcalls::send_http_response(u32::from(status), headers.to_vec(), body);
}

/// Makes later stream calls act on `context_id` (a paused request resumed from the root).
pub fn set_effective_context(context_id: u32) -> bool {
    hostcalls::set_effective_context(context_id).is_ok()
}

/// Lets a paused request continue to the upstream.
pub fn resume_request() {
    let _ = hostcalls::resume_http_request();
}

/// Dispatches an HTTP call; the token, or the host's refusal.
///
/// # Errors
/// The host's status: `BadArgument` (unknown cluster, missing pseudo-headers) or
/// `InternalFailure`.
pub fn dispatch(
    cluster: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
    timeout: Duration,
) -> Result<u32, Status> {
    hostcalls::dispatch_http_call(cluster, headers.to_vec(), body, Vec::new(), timeout)
}

/// Defines a metric; 0 (ignored by [`metric_add`]) when the host refuses.
pub fn define_metric(kind: MetricType, name: &str) -> u32 {
    hostcalls::define_metric(kind, name).unwrap_or(0)
}

/// Adds `by` to a counter or gauge.
pub fn metric_add(id: u32, by: i64) {
    if id != 0 && by != 0 {
        let _ = hostcalls::increment_metric(id, by);
    }
}

/// Sets a gauge.
pub fn metric_set(id: u32, value: u64) {
    if id != 0 {
        let _ = hostcalls::record_metric(id, value);
    }
}

/// Sets the root context's tick period.
pub fn set_tick(period: Duration) {
    let _ = hostcalls::set_tick_period(period);
}

/// Creates `key` with an empty value when it does not exist yet (no CAS token), so every
/// later write can be a real compare-and-swap: proxy-wasm treats a CAS of 0 as "no check",
/// which would let two workers both "create" a missing key. Called from `on_vm_start`,
/// before any request runs.
pub fn shared_init(key: &str) {
    if hostcalls::get_shared_data(key).map_or(true, |(_, cas)| cas.is_none()) {
        let _ = hostcalls::set_shared_data(key, Some(&[]), None);
    }
}

/// Whether the downstream connection uses TLS (property `connection.tls_version`; absent
/// on plaintext connections and in hosts without properties).
pub fn downstream_tls() -> bool {
    hostcalls::get_property(vec!["connection", "tls_version"])
        .ok()
        .flatten()
        .is_some_and(|v| !v.is_empty())
}
