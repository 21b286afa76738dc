//! The load benchmark's floor for a proxy-wasm filter in Envoy: one local reply per request, nothing else.
//!
//! `scripts/bench-load`'s `wasm-null` row loads this module the way it loads Cachet (same
//! V8 runtime, same listener) and answers every request with a body as long as the one
//! Cachet's gzip hit sends (the plugin configuration gives its length in bytes, kept in the
//! VM): a stream context is created, its request headers arrive, one
//! `send_local_response` goes out, the context is deleted.
//! Whatever a request costs here is the price of the proxy-wasm ABI in V8, which no
//! filter can go under; Cachet's hit minus this row is what Cachet itself costs.
//!
//! With the word `callout` (the `wasm-callout` row) each request is instead fetched from
//! the `origin` cluster with `dispatch_http_call` and its answer sent back with
//! `send_local_response`: the floor of any proxy-wasm filter whose misses go through a
//! callout, to set against Envoy's plain router (`router-miss`) and Cachet's miss.
//!
//! With the words `headers shared time metric fields` (the `wasm-null-io` row) each
//! request makes the host calls a Cachet in-VM hit makes (the request's header map, the
//! ban epoch from shared data, the clock, the hit counter) and its reply carries a gzip
//! hit's 13 fields: the floor of any proxy-wasm cache that reads its request and answers
//! with correct fields, so Cachet's hit minus this row is Cachet's own code in V8.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, MetricType};

/// The root context: the body every request gets (empty until configured).
struct Root {
    body: std::rc::Rc<Vec<u8>>,
    calls: Calls,
}

/// Host calls each request makes besides its reply, to price them one by one (the
/// configuration's words after the length): `headers` reads the whole request header map
/// (as Cachet does), `shared` reads one shared-data entry (Cachet's ban epoch), `time` the
/// clock, `metric` adds to a counter.
#[derive(Debug, Default, Clone, Copy)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent switches, one per configuration word"
)]
struct Calls {
    headers: bool,
    shared: bool,
    time: bool,
    metric: Option<u32>,
    callout: bool,
    /// `fields`: the reply carries the fields a Cachet gzip hit sends (names and value
    /// lengths as `scripts/bench-load`'s `wasm-null-io` row checks), not two.
    fields: bool,
}

/// The fields of a Cachet in-VM gzip hit on the bench object, in its order, with values
/// of the same lengths (`scripts/bench-load` compares the names with a real hit's).
const HIT_FIELDS: [(&str, &str); 13] = [
    ("content-type", "text/css; charset=utf-8"),
    ("cache-control", "public, max-age=86400"),
    ("last-modified", "Tue, 09 Jan 2024 00:36:23 GMT"),
    ("x-origin-request", "1"),
    ("x-origin-delay-ms", "0"),
    ("date", "Sun, 29 Nov 2026 05:21:54 GMT"),
    ("x-envoy-upstream-service-time", "0"),
    ("etag", "W/\"29987c52455d06a5\""),
    ("content-encoding", "gzip"),
    ("accept-ranges", "bytes"),
    ("vary", "Accept-Encoding"),
    ("age", "0"),
    ("x-cache", "HIT"),
];

/// One stream.
struct Stream {
    body: std::rc::Rc<Vec<u8>>,
    calls: Calls,
}

/// The module entry point (`_initialize`) the host calls once per VM.
mod entry {
    use super::{Root, RootContext};

    proxy_wasm::main! {{
        proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
            Box::new(Root { body: std::rc::Rc::new(Vec::new()), calls: super::Calls::default() })
        });
    }}
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        // The configuration is the body's length in bytes (a StringValue), then the names
        // of the host calls to make per request ([`Calls`]).
        let Some(config) = self
            .get_plugin_configuration()
            .and_then(|c| String::from_utf8(c).ok())
        else {
            return false;
        };
        let mut words = config.split_whitespace();
        let Some(len) = words.next().and_then(|w| w.parse::<usize>().ok()) else {
            return false;
        };
        for w in words {
            match w {
                "headers" => self.calls.headers = true,
                "shared" => {
                    let _ = self.set_shared_data("null.epoch", Some(b"00000001"), None);
                    self.calls.shared = true;
                }
                "time" => self.calls.time = true,
                "callout" => self.calls.callout = true,
                "fields" => self.calls.fields = true,
                "metric" => {
                    self.calls.metric =
                        proxy_wasm::hostcalls::define_metric(MetricType::Counter, "null.hits").ok();
                }
                _ => return false,
            }
        }
        self.body = std::rc::Rc::new(vec![b'a'; len]);
        true
    }

    fn create_http_context(&self, _id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Stream {
            body: std::rc::Rc::clone(&self.body),
            calls: self.calls,
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

impl Context for Stream {
    /// The callout's answer (`callout`): its status, content fields and body, sent back.
    fn on_http_call_response(&mut self, _token: u32, _headers: usize, body_size: usize, _t: usize) {
        let status = self
            .get_http_call_response_header(":status")
            .and_then(|s| s.parse::<u32>().ok())
            .unwrap_or(502);
        let kept: Vec<(String, String)> = ["content-type", "content-encoding"]
            .iter()
            .filter_map(|n| Some(((*n).to_owned(), self.get_http_call_response_header(n)?)))
            .collect();
        let body = self.get_http_call_response_body(0, body_size);
        let headers: Vec<(&str, &str)> =
            kept.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        self.send_http_response(status, headers, body.as_deref());
    }
}

impl HttpContext for Stream {
    fn on_http_request_headers(&mut self, _n: usize, _end_of_stream: bool) -> Action {
        let c = self.calls;
        if c.headers {
            std::hint::black_box(self.get_http_request_headers_bytes());
        }
        if c.shared {
            std::hint::black_box(self.get_shared_data("null.epoch"));
        }
        if c.time {
            std::hint::black_box(self.get_current_time());
        }
        if let Some(id) = c.metric {
            let _ = proxy_wasm::hostcalls::increment_metric(id, 1);
        }
        if c.callout {
            let path = self.get_http_request_header(":path").unwrap_or_default();
            let authority = self
                .get_http_request_header(":authority")
                .unwrap_or_default();
            let sent = self.dispatch_http_call(
                "origin",
                vec![
                    (":method", "GET"),
                    (":path", &path),
                    (":authority", &authority),
                    (":scheme", "http"),
                    ("accept-encoding", "gzip"),
                ],
                None,
                vec![],
                std::time::Duration::from_secs(15),
            );
            if sent.is_ok() {
                return Action::Pause;
            }
            self.send_http_response(503, vec![], None);
            return Action::Pause;
        }
        let fields = if c.fields {
            HIT_FIELDS.to_vec()
        } else {
            vec![
                ("content-type", "text/css; charset=utf-8"),
                ("x-cache", "HIT"),
            ]
        };
        self.send_http_response(200, fields, Some(&self.body));
        Action::Pause
    }
}
