//! Client responses from stored objects: headers restored, encoding chosen per client.
//!
//! Seed (Hatena on Varnish): bodies are stored gzip; gzip clients get the stored bytes
//! as-is, the rest get them inflated, with `Content-Encoding`, `Content-Length` and
//! `Vary: Accept-Encoding` set accordingly.

use std::time::Duration;

use cachet_policy::accepts_encoding;
use cachet_policy::object::{Encoding, Meta};
use fastly::http::header;
use fastly::{Request, Response};

use crate::EdgeError;
use crate::access::Access;

/// What the client asked for that shapes the answer, kept after its request is forwarded.
pub(crate) struct Client {
    /// `Accept-Encoding`.
    pub accept: Option<String>,
    /// A `HEAD` request: headers only.
    pub head: bool,
    /// The request comes from a Cachet edge tier and this instance is its shield: answers
    /// keep `Surrogate-Key` / `Surrogate-Control` so the edge tier stores the object under
    /// the same keys (a purge then reaches both tiers).
    pub keep_surrogate: bool,
}

impl Client {
    /// Reads the client's preferences from its request.
    pub fn of(req: &Request) -> Self {
        Self {
            accept: req
                .get_header_str(header::ACCEPT_ENCODING)
                .map(str::to_owned),
            head: req.get_method_str() == "HEAD",
            keep_surrogate: req
                .get_header(crate::origin::FORWARDED_FROM_FASTLY)
                .is_some()
                && crate::policy()
                    .is_ok_and(|p| matches!(crate::origin::tier(p), crate::origin::Tier::Shield)),
        }
    }
}

/// Builds the client response from stored metadata and body bytes, choosing the encoding
/// for this client: stored gzip as-is to gzip clients, inflated for the rest.
///
/// # Errors
/// [`EdgeError::Body`] when a stored gzip body does not inflate (corrupt or over
/// `cachet_policy::object::MAX_INFLATED_BYTES`).
pub(crate) fn respond(
    meta: &Meta,
    stored: Vec<u8>,
    age: Duration,
    client: &Client,
    f: &mut Access,
) -> Result<Response, EdgeError> {
    let accept = client.accept.as_deref();
    let mut resp = Response::from_status(meta.status);
    for (n, v) in &meta.headers {
        resp.append_header(n.as_str(), v.as_str());
    }
    resp.set_header(header::VARY, meta.vary.as_str());
    resp.set_header(header::AGE, age.as_secs().to_string());
    let body = match &meta.encoding {
        Encoding::Gzip if accepts_encoding(accept, "gzip") => {
            resp.set_header(header::CONTENT_ENCODING, "gzip");
            stored
        }
        Encoding::Gzip => crate::scratch::gunzip(&stored)?,
        Encoding::Identity => stored,
        Encoding::Other(e) => {
            if !accepts_encoding(accept, e) {
                // We cannot decode it; RFC 9110 §15.5.7 lets us send it anyway rather than
                // fail, so say what it is.
                f.error = Some(format!("client does not accept stored encoding {e}"));
            }
            resp.set_header(header::CONTENT_ENCODING, e.as_str());
            stored
        }
    };
    if client.keep_surrogate && !meta.surrogate_keys.is_empty() {
        resp.set_header("surrogate-key", meta.surrogate_keys.join(" "));
    }
    f.body_bytes = Some(body.len() as u64);
    f.stored_bytes = Some(meta.stored_len);
    f.origin_bytes = Some(meta.origin_len);
    resp.set_header(header::CONTENT_LENGTH, body.len().to_string());
    if !client.head {
        resp.set_body(body);
    }
    Ok(resp)
}

/// Serves an origin response that is not stored: Surrogate headers stripped (kept for a
/// Cachet edge tier when this is its shield).
pub(crate) fn unstored(mut resp: Response, client: &Client) -> Response {
    if !client.keep_surrogate {
        resp.remove_header("surrogate-key");
        resp.remove_header("surrogate-control");
    }
    if client.head {
        let _ = resp.take_body();
    }
    resp
}
