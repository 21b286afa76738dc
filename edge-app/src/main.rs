//! Cachet on Fastly Compute: the entry point, binding the client request and response to `cachet_compute`.
//!
//! The edge's flow (admin calls, plan, passes, the core-cache flow, bans, delivery, the
//! shield tier, the workspace, the access record) is `cachet_compute`'s, free of the SDK;
//! [`host`] implements its port `cachet_compute::host::Host` on the `fastly` crate. This
//! file only reads the client request into bytes, writes the response and hands the rest
//! back (docs/edge.md).

// Adapters never panic on input (DESIGN.md conventions, 3): on top of the workspace lint table.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod host;

use cachet_compute::host::Fields;
use cachet_compute::sandbox::Sandbox;
use cachet_compute::{ClientRequest, Payload, Pending};
use fastly::http::serve::Serve;
use fastly::http::{HeaderName, HeaderValue, Url};
use fastly::{Backend, Body, Request, Response};

use crate::host::Fastly;

/// Configuration built into the wasm (`cachet.toml`, or the file `CACHET_EDGE_CONFIG`
/// names at build time: `build.rs`); a `config` entry in the `cachet` config store
/// replaces it without a redeploy, and serves again when that entry is rejected
/// (`cachet_compute::load_policy`).
const DEFAULT_CONFIG: &str = include_str!(concat!(env!("OUT_DIR"), "/builtin.toml"));

/// Build-time pre-initialization (Wizer, `scripts/lib.sh` `build_edge`): builds the
/// built-in configuration's policy into the memory image, so that instances without a
/// config-store entry start with it built (`cachet_compute::sandbox::prebuild`). Draws no
/// randomness and calls no host function: Wizer runs it with no imports at all.
#[allow(
    unsafe_code,
    reason = "`#[unsafe(export_name)]` is the only way to give Wizer its entry point"
)]
// SAFETY: `export_name` only names this function for Wizer, which calls it once before
// the memory snapshot; the name is not a symbol the Rust or WASI runtimes define.
#[unsafe(export_name = "wizer.initialize")]
pub extern "C" fn wizer_initialize() {
    cachet_compute::sandbox::prebuild(DEFAULT_CONFIG);
}

/// One instance serves requests in a reusable sandbox (`fastly::http::serve::Serve`): the
/// policy is built once per instance and again only when the config store's entry
/// changes (`cachet_compute::sandbox`), within the `[edge].sandbox_*` bounds.
fn main() {
    let mut sandbox = Sandbox::start(&Fastly, DEFAULT_CONFIG);
    let b = sandbox.bounds();
    let _ = Serve::new()
        .with_max_requests(usize::try_from(b.max_requests).unwrap_or(usize::MAX))
        .with_max_lifetime(b.max_lifetime)
        .with_timeout(b.idle_timeout)
        .with_max_memory(b.max_memory_mib)
        .run_with_context(handle, &mut sandbox);
}

/// Serves one client request with the sandbox's policy (checked for a configuration
/// change first), then runs its after-response work.
fn handle(mut req: Request, sandbox: &mut Sandbox<Backend>) {
    let n = sandbox.begin(&Fastly);
    let headers = host::fields(req.get_header_names(), |n| req.get_header_all(n).collect());
    // The SDK parses the URL the first time it is asked for it and panics on one it cannot
    // parse (`Host: blog.example:99999`): the authority is checked first, by the core's
    // rule and then by the SDK's own parser, and `get_url` is reached only when both
    // accept it.
    let refused = cachet_compute::refuse_authority(&Fastly, req.get_method_str(), &headers, |a| {
        Url::parse(&format!("http://{a}/")).is_ok()
    });
    let (resp, pending): (_, Pending<Fastly>) = match refused {
        Some(refused) => refused,
        None => cachet_compute::serve(&Fastly, sandbox, client_request(&mut req, headers)),
    };
    let sent = send(resp);
    pending.in_instance(n).finish(&Fastly, sandbox, sent);
}

/// The client's request as bytes (header values need not be UTF-8), its body kept as a
/// handle. Call only once `cachet_compute::refuse_authority` accepted its authority.
fn client_request(req: &mut Request, headers: Fields) -> ClientRequest<Body> {
    let url = req.get_url();
    ClientRequest {
        method: req.get_method_str().to_owned(),
        url: url.as_str().to_owned(),
        scheme: url.scheme().to_owned(),
        path: url.path().to_owned(),
        query: url.query().map(str::to_owned),
        headers,
        body: Some(req.take_body()),
    }
}

/// Writes the response to the client. A [`Payload::Gunzip`] body is streamed through a
/// gzip decoder (bounded memory: the decoder's window and a copy buffer): the bytes sent,
/// or why the stream was abandoned part-way.
fn send(r: cachet_compute::Response<Body>) -> Option<Result<u64, String>> {
    let mut resp = Response::from_status(r.status);
    for (n, v) in &r.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(n.as_bytes()),
            HeaderValue::from_bytes(v),
        ) {
            resp.append_header(n, v);
        }
    }
    let body = match r.body {
        Payload::Bytes(b) => Body::from(b),
        Payload::Stream(b) => b,
        Payload::Empty => {
            resp.send_to_client();
            return None;
        }
        Payload::Gunzip(b) => {
            let mut out = resp.stream_to_client();
            return Some(
                match std::io::copy(&mut flate2::read::GzDecoder::new(b), &mut out) {
                    Ok(n) => {
                        let _ = out.finish();
                        Ok(n)
                    }
                    Err(e) => {
                        let _ = out.abandon();
                        Err(e.to_string())
                    }
                },
            );
        }
    };
    resp.set_body(body);
    resp.send_to_client();
    None
}
