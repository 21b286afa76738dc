//! Client responses: the engine's answer (`cachet_http::deliver`) written as a [`crate::Response`], and header lines edited as bytes.
//!
//! Every decision (304, 206/416, the representation, Age, Date, ETag, Vary) is
//! `cachet-http`'s; this module only moves bytes.

use cachet_http::access::Access;
use cachet_http::{Answer, CacheStatus, Client};
use cachet_policy::object::Meta;
use cachet_refresh::Timestamp;

use crate::host::{Fields, Host};
use crate::origin::{FORWARDED_FROM_FASTLY, Fetched, Tier};
use crate::{ClientRequest, Ctx, EdgeError, Payload, Response};

/// Removes every line of `name` (ASCII case-insensitive).
pub(crate) fn remove(fields: &mut Fields, name: &str) {
    fields.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
}

/// Replaces every line of `name` with one line `value`.
pub(crate) fn set(fields: &mut Fields, name: &str, value: &str) {
    remove(fields, name);
    fields.push((name.to_ascii_lowercase(), value.as_bytes().to_vec()));
}

/// The client request fields answers depend on (`cachet_http::Client`), plus whether the
/// request comes from a Cachet edge tier to this shield.
pub(crate) fn client_of<H: Host>(cx: Ctx<'_, H>, req: &ClientRequest<H::Body>) -> Client {
    let mut c = Client::read(&req.method, req.headers.as_slice());
    c.keep_surrogate = crate::first(&req.headers, FORWARDED_FROM_FASTLY).is_some()
        && matches!(cx.origin.tier, Tier::Shield);
    c
}

/// Builds the client response from a stored object: the engine decides status, headers
/// and bytes; this writes them, inflating stored gzip when the engine says so.
///
/// # Errors
/// [`EdgeError::Body`] when a stored gzip body does not inflate (corrupt or over
/// `cachet_policy::object::MAX_INFLATED_BYTES`).
pub(crate) fn respond<B>(
    now: Timestamp,
    meta: &Meta,
    stored: Vec<u8>,
    status: CacheStatus,
    client: &Client,
    f: &mut Access,
) -> Result<Response<B>, EdgeError> {
    let d = cachet_http::deliver(meta, client, now, status);
    let body = if d.inflate() {
        crate::scratch::gunzip(&stored)?
    } else {
        stored
    };
    let head = d.head(body.len() as u64);
    let headers = head
        .headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_vec()))
        .collect();
    f.stored_bytes = Some(meta.stored_len);
    f.origin_bytes = Some(meta.origin_len);
    let sent = head.body.select(&body);
    f.body_bytes = Some(sent.map_or(0, <[u8]>::len) as u64);
    let payload = match (sent, head.body) {
        (Some(_), Answer::Whole) => Payload::Bytes(body),
        (Some(part), _) => Payload::Bytes(part.to_vec()),
        (None, _) => Payload::Empty,
    };
    Ok(Response {
        status: head.status,
        headers,
        body: payload,
    })
}

/// Serves an origin response that is not stored, as the engine says
/// (`cachet_http::unstored`): fields removed and set, no body for `HEAD`. Gzip the client
/// did not ask for (a fill's answer: `ours_encoding`, the request carried our
/// `Accept-Encoding`) is inflated as it is sent ([`Payload::Gunzip`]): streamed through
/// the decoder, never held whole, so memory stays bounded whatever the body's size.
pub(crate) fn unstored<B>(answer: Fetched<B>, client: &Client, ours_encoding: bool) -> Response<B> {
    let resp = answer.resp;
    let mut headers = resp.headers;
    let u = cachet_http::unstored(&headers, client, CacheStatus::Pass, ours_encoding);
    for n in &u.remove {
        remove(&mut headers, n);
    }
    if u.inflate {
        // The inflated length is not known before it is sent (chunked).
        remove(&mut headers, "content-length");
    }
    for (n, v) in u.set {
        set(&mut headers, n, v);
    }
    let body = match (u.body, u.inflate) {
        (false, _) => Payload::Empty,
        (true, true) => Payload::Gunzip(resp.body),
        (true, false) => Payload::Stream(resp.body),
    };
    Response {
        status: resp.status,
        headers,
        body,
    }
}
