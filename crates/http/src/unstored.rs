//! Answers that are not built from a stored object: an origin response passed to its
//! client (`PASS`, a fill's answer that may not be stored, the origin's error after a
//! revalidation). One rule for both adapters: which fields go out, which are added, and
//! whether the body is inflated.

use std::borrow::Cow;

use cachet_policy::accepts_encoding;

use crate::deliver::Client;
use crate::fields;
use crate::headers::{Headers, text};
use crate::status::CacheStatus;

/// What to do to an origin response's header lines before it goes to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unstored {
    /// Field names to remove (hop-by-hop, `Connection`-listed, edge-only surrogate
    /// fields, RFC 9110 §7.6.1; `Content-Encoding` when inflating). The platform's framing
    /// fields (`Content-Length`, `Transfer-Encoding`) and pseudo-headers are never listed:
    /// the platform writes those.
    pub remove: Vec<String>,
    /// Fields to set (replacing any): `X-Cache` always, `Age: 0` when the origin sent none
    /// (RFC 9111 §5.1: a response from a cache carries `Age`).
    pub set: Vec<(&'static str, &'static str)>,
    /// The body is gzip the client did not ask for: inflate it (and send its new length).
    pub inflate: bool,
    /// Send the body (not for `HEAD`).
    pub body: bool,
}

/// The answer for `client` from an origin response with header lines `fields`, labelled
/// `status` (`Pass`, or `Miss` for a fill's answer). `ours_encoding`: the request that
/// fetched it carried Cachet's `Accept-Encoding: gzip` (a fill), not the client's own, so
/// gzip is inflated for a client that does not accept it; a pass forwards the client's
/// own `Accept-Encoding`, and its answer goes as it is.
pub fn unstored(
    fields: &[(String, Vec<u8>)],
    client: &Client,
    status: CacheStatus,
    ours_encoding: bool,
) -> Unstored {
    let listed = fields::connection_listed(fields);
    let gzip = fields
        .value("content-encoding")
        .is_some_and(|v| text(&v).is_some_and(|e| e.trim().eq_ignore_ascii_case("gzip")));
    let accepts = client
        .accept_encoding
        .as_deref()
        .and_then(text)
        .is_some_and(|a| accepts_encoding(Some(a), "gzip"));
    let inflate = ours_encoding && gzip && !accepts;
    let mut remove: Vec<String> = Vec::new();
    for (n, _) in fields {
        let framing = n.starts_with(':')
            || n.eq_ignore_ascii_case("content-length")
            || n.eq_ignore_ascii_case("transfer-encoding");
        let drop = !fields::returned(n, &listed, client.keep_surrogate)
            || (inflate && n.eq_ignore_ascii_case("content-encoding"));
        if drop && !framing && !remove.iter().any(|r| r.eq_ignore_ascii_case(n)) {
            remove.push(n.to_ascii_lowercase());
        }
    }
    let mut set = vec![("x-cache", status.as_str())];
    if !fields.has("age") {
        set.push(("age", "0"));
    }
    Unstored {
        remove,
        set,
        inflate,
        body: !client.head,
    }
}

/// A local reply carrying an origin answer that was not stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginReply<'a> {
    /// Status code.
    pub status: u16,
    /// Header lines: the origin's kept lines (as their bytes), `Content-Length`, then the
    /// lines [`Unstored::set`] adds.
    pub lines: Vec<(&'a str, Cow<'a, [u8]>)>,
    /// The body to send (`None` for `HEAD`), inflated when [`Unstored::inflate`].
    pub body: Option<Cow<'a, [u8]>>,
}

/// The local reply for a fill's origin answer that was not stored (`PASS`), as
/// [`unstored`] says (the fill carried our `Accept-Encoding`): every host that answers it
/// whole sends exactly these lines. A gzip body that does not inflate goes as it is.
pub fn origin_reply<'a>(
    status: u16,
    headers: &'a [(String, Vec<u8>)],
    body: &'a [u8],
    client: &Client,
) -> OriginReply<'a> {
    let u = unstored(headers, client, CacheStatus::Pass, true);
    let inflated = if u.inflate {
        cachet_policy::object::gunzip(body).ok()
    } else {
        None
    };
    let out: Cow<'a, [u8]> = inflated.map_or(Cow::Borrowed(body), Cow::Owned);
    let kept = |n: &str| {
        !n.starts_with(':')
            && !n.eq_ignore_ascii_case("content-length")
            && !n.eq_ignore_ascii_case("transfer-encoding")
            && !(u.remove.iter().any(|r| r.eq_ignore_ascii_case(n))
                && (matches!(out, Cow::Owned(_)) || !n.eq_ignore_ascii_case("content-encoding")))
    };
    let mut lines: Vec<(&str, Cow<'a, [u8]>)> = headers
        .iter()
        .filter(|(n, _)| kept(n))
        .map(|(n, v)| (n.as_str(), Cow::Borrowed(v.as_slice())))
        .collect();
    lines.push((
        "content-length",
        Cow::Owned(out.len().to_string().into_bytes()),
    ));
    lines.extend(u.set.iter().map(|(n, v)| (*n, Cow::Borrowed(v.as_bytes()))));
    OriginReply {
        status,
        lines,
        body: u.body.then_some(out),
    }
}

/// The edits to an answer the proxy forwards itself (a pass, an oversized router fill):
/// each field to set (`Some`) or remove (`None`): [`unstored`]'s removals and settings,
/// and the `respaced` fields of `fields` (`crate::fields::respace_joined_lists`) written
/// back. A pass forwarded the client's own `Accept-Encoding`: nothing to inflate.
pub fn forwarded_edits<'a>(
    fields: &'a [(String, Vec<u8>)],
    respaced: &'a [String],
    client: &Client,
) -> Vec<(Cow<'a, str>, Option<&'a [u8]>)> {
    let u = unstored(fields, client, CacheStatus::Pass, false);
    let mut out: Vec<(Cow<'a, str>, Option<&'a [u8]>)> = Vec::new();
    for (n, v) in &u.set {
        out.push((Cow::Borrowed(*n), Some(v.as_bytes())));
    }
    for n in respaced {
        if u.remove.iter().any(|r| r.eq_ignore_ascii_case(n))
            || u.set.iter().any(|(r, _)| r.eq_ignore_ascii_case(n))
        {
            continue;
        }
        if let Some((_, v)) = fields.iter().find(|(h, _)| h == n) {
            out.push((Cow::Borrowed(n.as_str()), Some(v.as_slice())));
        }
    }
    let removed = u.remove.into_iter().map(|n| (Cow::Owned(n), None));
    removed.chain(out).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(pairs: &[(&str, &[u8])]) -> Vec<(String, Vec<u8>)> {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), v.to_vec()))
            .collect()
    }

    fn client(method: &str, pairs: &[(&str, &[u8])]) -> Client {
        Client::read(method, f(pairs).as_slice())
    }

    #[test]
    fn a_pass_drops_hop_by_hop_and_surrogate_fields_and_is_labelled() {
        let h = f(&[
            (":status", b"200"),
            ("Connection", b"X-Hop"),
            ("X-Hop", b"1"),
            ("Keep-Alive", b"timeout=5"),
            ("Surrogate-Key", b"a b"),
            ("Content-Length", b"3"),
            ("ETag", b"\"e\""),
        ]);
        let u = unstored(&h, &client("GET", &[]), CacheStatus::Pass, false);
        assert_eq!(
            u.remove,
            ["connection", "x-hop", "keep-alive", "surrogate-key"]
        );
        assert_eq!(u.set, [("x-cache", "PASS"), ("age", "0")]);
        assert!(!u.inflate && u.body);
        let shield = Client {
            keep_surrogate: true,
            ..client("HEAD", &[])
        };
        let u = unstored(&h, &shield, CacheStatus::Pass, false);
        assert!(!u.remove.contains(&"surrogate-key".to_owned()));
        assert!(!u.body, "HEAD: no body");
    }

    #[test]
    fn a_fill_answer_in_gzip_is_inflated_for_an_identity_client_only() {
        let h = f(&[("content-encoding", b"gzip"), ("age", b"7")]);
        let identity = unstored(&h, &client("GET", &[]), CacheStatus::Pass, true);
        assert!(identity.inflate);
        assert_eq!(identity.remove, ["content-encoding"]);
        assert_eq!(
            identity.set,
            [("x-cache", "PASS")],
            "the origin's Age stays"
        );
        let gz = client("GET", &[("accept-encoding", b"gzip, br")]);
        assert!(!unstored(&h, &gz, CacheStatus::Pass, true).inflate);
        // A pass forwarded the client's own Accept-Encoding: its answer goes as it is.
        assert!(!unstored(&h, &client("GET", &[]), CacheStatus::Pass, false).inflate);
        // Bytes that are not text never panic.
        let odd = f(&[("content-encoding", b"gz\xffip"), ("x-odd", b"\xfe")]);
        assert!(!unstored(&odd, &client("GET", &[]), CacheStatus::Pass, true).inflate);
    }
}
