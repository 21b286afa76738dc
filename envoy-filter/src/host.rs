//! The proxy-wasm ABI bound to the worker's port (`cachet_worker::host::Host`): each call forwards to one hostcall, each port type maps to the SDK's.
//!
//! The SDK's own wrappers `panic!` on a status they do not expect; the calls made here are
//! the ones every host answers with the documented statuses (Envoy 1.40, our wasmtime
//! harness), so a panic would mean a broken host, not bad input.

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
    fn set_header(&self, m: MapType, name: &str, value: Option<&str>) {
        let _ = hc::set_map_value(map(m), name, value);
    }
    fn set_headers(&self, m: MapType, pairs: &[(&str, &[u8])]) {
        let _ = hc::set_map_bytes(map(m), pairs.to_vec());
    }
    fn send(&self, status: u16, headers: &[(&str, &str)], body: Option<&[u8]>) {
        let _ = hc::send_http_response(u32::from(status), headers.to_vec(), body);
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
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<u32, Status> {
        hc::dispatch_http_call(cluster, headers.to_vec(), body, Vec::new(), timeout).map_err(|s| {
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
        hc::get_property(vec!["response", "code_details"])
            .ok()
            .flatten()
            .is_none_or(|v| v == b"via_upstream")
    }
}
