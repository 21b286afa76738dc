//! Client responses: the engine's answer (`cachet_http::deliver`) written to a Fastly
//! `Response`, and Fastly header maps read as bytes through `cachet_http::Headers`.
//!
//! Every decision (304, 206/416, the representation, Age, Date, ETag, Vary) is
//! `cachet-http`'s; this module only moves bytes.

use cachet_http::{Answer, CacheStatus, Headers};
use cachet_policy::object::Meta;
use cachet_refresh::Timestamp;
use fastly::http::HeaderName;
use fastly::{Request, Response};

use crate::EdgeError;
use cachet_http::access::Access;

/// `cachet_http::Headers` over a Fastly message's header map (a request's or a
/// response's: the same calls on both types), and every line of it as (name, bytes).
macro_rules! header_view {
    ($view:ident, $fields:ident, $msg:ty) => {
        /// Header bytes of a Fastly message.
        pub(crate) struct $view<'a>(pub &'a $msg);

        impl Headers for $view<'_> {
            fn visit(&self, name: &str, f: &mut dyn FnMut(&[u8]) -> bool) {
                // A name Fastly can't represent (`:authority`) is absent, never a panic.
                let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
                    return;
                };
                for v in self.0.get_header_all(&name) {
                    if !f(v.as_bytes()) {
                        return;
                    }
                }
            }
        }

        /// Every header line as (name, value bytes), in order.
        pub(crate) fn $fields(m: &$msg) -> Vec<(String, Vec<u8>)> {
            m.get_header_names()
                .flat_map(|n| {
                    m.get_header_all(n)
                        .map(move |v| (n.as_str().to_owned(), v.as_bytes().to_vec()))
                })
                .collect()
        }
    };
}

header_view!(ReqHeaders, req_fields_of, Request);
header_view!(RespHeaders, fields_of, Response);

/// The client request fields answers depend on (`cachet_http::Client`), plus whether the
/// request comes from a Cachet edge tier to this shield.
pub(crate) fn client_of(req: &Request) -> cachet_http::Client {
    let mut c = cachet_http::Client::read(req.get_method_str(), &ReqHeaders(req));
    c.keep_surrogate = req
        .get_header(crate::origin::FORWARDED_FROM_FASTLY)
        .is_some()
        && crate::policy()
            .is_ok_and(|p| matches!(crate::origin::tier(p), crate::origin::Tier::Shield));
    c
}

/// Builds the client response from a stored object: the engine decides status, headers
/// and bytes; this writes them, inflating stored gzip when the engine says so.
///
/// # Errors
/// [`EdgeError::Body`] when a stored gzip body does not inflate (corrupt or over
/// `cachet_policy::object::MAX_INFLATED_BYTES`).
pub(crate) fn respond(
    meta: &Meta,
    stored: Vec<u8>,
    status: CacheStatus,
    client: &cachet_http::Client,
    f: &mut Access,
) -> Result<Response, EdgeError> {
    let now = Timestamp::from_system_time(std::time::SystemTime::now());
    let d = cachet_http::deliver(meta, client, now, status);
    let body = if d.inflate() {
        crate::scratch::gunzip(&stored)?
    } else {
        stored
    };
    let head = d.head(body.len() as u64);
    let mut resp = Response::from_status(head.status);
    for (n, v) in &head.headers {
        resp.append_header(n.as_ref(), v.as_ref());
    }
    f.stored_bytes = Some(meta.stored_len);
    f.origin_bytes = Some(meta.origin_len);
    let sent = head.body.select(&body);
    f.body_bytes = Some(sent.map_or(0, <[u8]>::len) as u64);
    match (sent, head.body) {
        (Some(_), Answer::Whole) => resp.set_body(body),
        (Some(part), _) => resp.set_body(part.to_vec()),
        (None, _) => {}
    }
    Ok(resp)
}

/// Serves an origin response that is not stored, as the engine says
/// (`cachet_http::unstored`): fields removed and set, no body for `HEAD`. Gzip the client
/// did not ask for (a fill's answer: `ours_encoding`, the request carried our
/// `Accept-Encoding`) is inflated as it is sent ([`crate::Outcome::inflate`], `send` in
/// main): streamed through the decoder, never held whole, so memory stays bounded whatever
/// the body's size; a body that turns out corrupt mid-stream ends the response abandoned
/// (the client sees an incomplete body, never a wrong one) and the access log says why.
pub(crate) fn unstored(
    mut resp: Response,
    client: &cachet_http::Client,
    ours_encoding: bool,
) -> crate::Outcome {
    let u = cachet_http::unstored(
        &fields_of(&resp),
        client,
        cachet_http::CacheStatus::Pass,
        ours_encoding,
    );
    for n in &u.remove {
        resp.remove_header(n.as_str());
    }
    if u.inflate {
        // The inflated length is not known before it is sent (chunked).
        resp.remove_header(fastly::http::header::CONTENT_LENGTH);
    }
    for (n, v) in u.set {
        resp.set_header(n, v);
    }
    if !u.body {
        let _ = resp.take_body();
    }
    crate::Outcome {
        resp,
        after: None,
        inflate: u.inflate && u.body,
    }
}
