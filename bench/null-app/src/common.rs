//! What every do-nothing app answers: the same number of bytes as the edge app's gzip `HIT`
//! on the demo origin's design CSS (`/css/alice.css` stored gzip), as `text/css`.

use fastly::{Request, Response};

/// Length of the answer body, bytes: the gzip `HIT` of `/css/alice.css` (the benchmark
/// prints both lengths).
pub const BODY_BYTES: usize = 1_362;

/// The answer to any request: a 200 with a fixed body, nothing read, nothing stored.
#[allow(dead_code, reason = "null-cache uses only BODY_BYTES")]
pub fn answer(_req: &Request) -> Response {
    static BODY: [u8; BODY_BYTES] = [b'x'; BODY_BYTES];
    Response::from_body(&BODY[..])
        .with_header("content-type", "text/css")
        .with_header("content-encoding", "gzip")
}
