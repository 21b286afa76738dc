//! The proxy-wasm ABI bound to the worker's port (`cachet_worker::host::Host`): each call forwards to one hostcall, each port type maps to the SDK's.
//!
//! The SDK's own wrappers `panic!` on a status they do not expect; the calls made here are
//! the ones every host answers with the documented statuses (Envoy 1.40, our wasmtime
//! harness), so a panic would mean a broken host, not bad input.
//!
//! Header values are bytes (issue 27 item 11): header maps are read and written with the
//! SDK's `_bytes` calls, and local replies go through [`local_reply`], since the SDK's
//! `send_http_response` takes `&str` values. Callouts are the one exception the SDK
//! (0.2.5) leaves: `dispatch_http_call` takes `&str` values and a raw `proxy_http_call`
//! would bypass the SDK's routing of the answer, so a callout with a value that is not
//! UTF-8 is refused with `SerializationFailure` (nothing sent; the worker then passes the
//! request, which carries its own bytes).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cachet_worker::host::{BufferType, Host, LogLevel, MapType, MetricType, Status};
use proxy_wasm::hostcalls as hc;
use proxy_wasm::types as abi;

/// The real host: proxy-wasm hostcalls (only inside a proxy-wasm VM).
pub struct ProxyWasm;

fn map(m: MapType) -> abi::MapType {
    match m {
        MapType::HttpRequestHeaders => abi::MapType::HttpRequestHeaders,
        MapType::HttpResponseHeaders => abi::MapType::HttpResponseHeaders,
        MapType::HttpCallResponseHeaders => abi::MapType::HttpCallResponseHeaders,
    }
}

fn buffer(b: BufferType) -> abi::BufferType {
    match b {
        BufferType::HttpRequestBody => abi::BufferType::HttpRequestBody,
        BufferType::HttpResponseBody => abi::BufferType::HttpResponseBody,
        BufferType::HttpCallResponseBody => abi::BufferType::HttpCallResponseBody,
        BufferType::PluginConfiguration => abi::BufferType::PluginConfiguration,
    }
}

impl Host for ProxyWasm {
    fn now(&self) -> SystemTime {
        hc::get_current_time().unwrap_or(UNIX_EPOCH)
    }
    /// Eight bytes of WASI `random_get` per draw (`getrandom`, as the edge app draws). A
    /// failed draw is 0 (a predictable slot-hash key, still one for every worker).
    fn random(&self) -> u64 {
        let mut b = [0u8; 8];
        match getrandom::getrandom(&mut b) {
            Ok(()) => u64::from_le_bytes(b),
            Err(_) => 0,
        }
    }
    fn log(&self, level: LogLevel, msg: &str) {
        let level = match level {
            LogLevel::Info => abi::LogLevel::Info,
            LogLevel::Warn => abi::LogLevel::Warn,
            LogLevel::Error => abi::LogLevel::Error,
        };
        let _ = hc::log(level, msg);
    }
    fn shared_get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        hc::get_shared_data(key).unwrap_or((None, None))
    }
    fn shared_set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        hc::set_shared_data(key, Some(value), cas).is_ok()
    }
    fn buffer(&self, kind: BufferType, size: usize) -> Option<Vec<u8>> {
        hc::get_buffer(buffer(kind), 0, size).ok().flatten()
    }
    fn headers(&self, m: MapType) -> Vec<(String, Vec<u8>)> {
        hc::get_map_bytes(map(m)).unwrap_or_default()
    }
    fn set_header(&self, m: MapType, name: &str, value: Option<&[u8]>) {
        let _ = hc::set_map_value_bytes(map(m), name, value);
    }
    fn set_headers(&self, m: MapType, pairs: &[(&str, &[u8])]) {
        let _ = hc::set_map_bytes(map(m), pairs.to_vec());
    }
    fn send(&self, status: u16, headers: &[(&str, &[u8])], body: Option<&[u8]>) {
        let _ = local_reply::send_local_response(u32::from(status), headers, body);
    }
    fn set_effective_context(&self, context_id: u32) -> bool {
        hc::set_effective_context(context_id).is_ok()
    }
    fn resume_request(&self) {
        let _ = hc::resume_http_request();
    }
    fn dispatch(
        &self,
        cluster: &str,
        headers: &[(&str, &[u8])],
        body: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<u32, Status> {
        // The SDK's callout takes text values: one that is not UTF-8 is refused, never
        // dropped or altered (the worker passes the request instead).
        let Some(text) = headers
            .iter()
            .map(|(n, v)| Some((*n, std::str::from_utf8(v).ok()?)))
            .collect::<Option<Vec<(&str, &str)>>>()
        else {
            return Err(Status::SerializationFailure);
        };
        hc::dispatch_http_call(cluster, text, body, Vec::new(), timeout).map_err(|s| {
            if s == abi::Status::BadArgument {
                Status::BadArgument
            } else {
                Status::InternalFailure
            }
        })
    }
    fn define_metric(&self, kind: MetricType, name: &str) -> u32 {
        let kind = match kind {
            MetricType::Counter => abi::MetricType::Counter,
            MetricType::Gauge => abi::MetricType::Gauge,
        };
        hc::define_metric(kind, name).unwrap_or(0)
    }
    fn metric_add(&self, id: u32, by: i64) {
        let _ = hc::increment_metric(id, by);
    }
    fn metric_set(&self, id: u32, value: u64) {
        let _ = hc::record_metric(id, value);
    }
    fn set_tick(&self, period: Duration) {
        let _ = hc::set_tick_period(period);
    }
    fn downstream_tls(&self) -> bool {
        hc::get_property(vec!["connection", "tls_version"])
            .ok()
            .flatten()
            .is_some_and(|v| !v.is_empty())
    }
    fn via_upstream(&self) -> bool {
        self.response_code_details()
            .is_none_or(|v| v == b"via_upstream")
    }

    fn response_code_details(&self) -> Option<Vec<u8>> {
        hc::get_property(vec!["response", "code_details"])
            .ok()
            .flatten()
    }
}

/// `proxy_send_local_response` with byte values. The SDK's `send_http_response`
/// serializes `&str` values only; this is the same hostcall and the same map layout
/// (the SDK's `serialize_map_bytes`), with the values as bytes. A local reply involves no
/// SDK state (unlike a callout, whose answer the SDK routes by its token), so the import
/// is called directly.
#[allow(
    unsafe_code,
    reason = "the one hostcall the SDK exposes only with text values: an FFI import"
)]
mod local_reply {
    use std::ptr::null;

    #[link(wasm_import_module = "env")]
    unsafe extern "C" {
        fn proxy_send_local_response(
            status_code: u32,
            status_code_details_data: *const u8,
            status_code_details_size: usize,
            body_data: *const u8,
            body_size: usize,
            headers_data: *const u8,
            headers_size: usize,
            grpc_status: i32,
        ) -> u32;
    }

    /// A proxy-wasm header map: the pair count, each name's and value's length (u32 LE),
    /// then each name and value followed by a NUL byte.
    pub(super) fn serialize(map: &[(&str, &[u8])]) -> Vec<u8> {
        let len = |n: usize| u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes();
        let size = 4 + map
            .iter()
            .map(|(n, v)| n.len() + v.len() + 10)
            .sum::<usize>();
        let mut out = Vec::with_capacity(size);
        out.extend_from_slice(&len(map.len()));
        for (n, v) in map {
            out.extend_from_slice(&len(n.len()));
            out.extend_from_slice(&len(v.len()));
        }
        for (n, v) in map {
            out.extend_from_slice(n.as_bytes());
            out.push(0);
            out.extend_from_slice(v);
            out.push(0);
        }
        out
    }

    /// Sends the local reply; `false` when the host refused it (no stream).
    pub(super) fn send_local_response(
        status: u32,
        headers: &[(&str, &[u8])],
        body: Option<&[u8]>,
    ) -> bool {
        let map = serialize(headers);
        let (body_data, body_size) = body.map_or((null(), 0), |b| (b.as_ptr(), b.len()));
        // SAFETY: every pointer is valid for its size for the duration of the call (the
        // host copies what it reads before returning), and the signature is the ABI's
        // (proxy-wasm ABI 0.2.1, as the SDK declares it); `-1`: no gRPC status.
        let status = unsafe {
            proxy_send_local_response(
                status,
                null(),
                0,
                body_data,
                body_size,
                map.as_ptr(),
                map.len(),
                -1,
            )
        };
        status == 0
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn the_map_layout_is_the_abis_with_bytes_kept() {
            let map = super::serialize(&[("x-field", b"caf\xe9"), ("e", b"")]);
            let mut want = vec![2, 0, 0, 0, 7, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0];
            want.extend_from_slice(b"x-field\0caf\xe9\0e\0\0");
            assert_eq!(map, want);
        }
    }
}
