//! The floor of any core-cache HIT on Fastly Compute, in a reusable sandbox: the host calls
//! a cache app cannot avoid, and nothing of Cachet's policy. Per request it reads the
//! client request (method, URL, every header), looks the URL up in the core cache with a
//! transaction (a miss inserts the fixed answer once), reads the stored body, answers with
//! the 13 header lines of Cachet's gzip `HIT` on the demo origin's `/css/alice.css` and
//! writes one access-log line of the same length as Cachet's. `scripts/bench-edge` row
//! `null-cache`: what Cachet's own work on a HIT is measured against.

mod common;

use std::io::{Read, Write};

use fastly::cache::core::{CacheKey, Transaction};
use fastly::{Request, Response};

/// The header lines of Cachet's gzip HIT on `/css/alice.css` (names and value lengths).
const HEADERS: [(&str, &str); 13] = [
    ("content-type", "text/css; charset=utf-8"),
    ("cache-control", "public, max-age=86400"),
    ("last-modified", "Tue, 09 Jan 2024 00:36:23 GMT"),
    ("x-origin-request", "1"),
    ("x-origin-delay-ms", "0"),
    ("etag", "W/\"29987c52455d06a5\""),
    ("content-encoding", "gzip"),
    ("accept-ranges", "bytes"),
    ("vary", "Accept-Encoding"),
    ("age", "0"),
    ("date", "Fri, 27 Nov 2026 23:16:19 GMT"),
    ("x-cache", "HIT"),
    ("content-length", "1362"),
];

/// Length of Cachet's access-log line for that HIT, bytes.
const LOG_LINE_BYTES: usize = 423;

fn handle(req: &Request) -> Response {
    let mut seen = 0usize;
    for name in req.get_header_names() {
        seen += req.get_header_all(name).count();
    }
    let key = format!("{}{}", req.get_method_str(), req.get_url_str());
    let mut body = Vec::new();
    if let Ok(tx) = Transaction::lookup(CacheKey::copy_from_slice(key.as_bytes())).execute() {
        if tx.must_insert_or_update() {
            if let Ok(mut w) = tx
                .insert(std::time::Duration::from_secs(3600))
                .known_length(common::BODY_BYTES as u64)
                .execute()
            {
                let _ = w.write_all(&[b'x'; common::BODY_BYTES]);
                let _ = w.finish();
            }
            body = vec![b'x'; common::BODY_BYTES];
        } else if let Some(found) = tx.found()
            && let Ok(stream) = found.to_stream()
        {
            body.reserve(common::BODY_BYTES + 1);
            let _ = stream.into_handle().read_to_end(&mut body);
        }
    }
    let mut resp = Response::from_body(body);
    for (n, v) in HEADERS {
        resp.append_header(n, v);
    }
    if let Ok(mut log) = fastly::log::Endpoint::try_from_name("cachet_log") {
        let mut line = format!("{{\"headers\":{seen},\"key\":{key:?}}}");
        line.extend(std::iter::repeat_n(
            ' ',
            LOG_LINE_BYTES.saturating_sub(line.len()),
        ));
        let _ = log.write_all(line.as_bytes());
    }
    resp
}

fn main() {
    let _ = fastly::http::serve::Serve::new()
        .with_max_requests(1000)
        .run(|req: Request| handle(&req));
}
