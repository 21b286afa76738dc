//! Answers built from a stored object: status, the exact header set, and the bytes to send.
//!
//! One function for both adapters. Order of evaluation (RFC 9110 §13.2.2): the client's
//! `If-None-Match` / `If-Modified-Since` first (→ `304`), then `Range` / `If-Range`
//! (→ `206` / `416`), else the whole representation (`200` or the stored status).
//!
//! Ranges apply to the representation actually sent: the stored gzip bytes for a client
//! that accepts gzip, the inflated bytes for one that does not (Cachet's documented choice,
//! docs/http.md). When the edge compressed the body, the gzip representation's strong
//! `ETag` is sent weak (`W/"…"`), as Varnish does: a strong `If-Range` then never matches
//! it and the client gets the whole representation, never bytes spliced across encodings.

use std::borrow::Cow;

use cachet_policy::accepts_encoding;
use cachet_policy::object::{Encoding, Meta};
use cachet_refresh::Timestamp;

use crate::conditional::{self, Precondition};
use crate::headers::{Headers, text};
use crate::range::{self, RangeRequest};
use crate::status::CacheStatus;

/// The client request fields that shape an answer from a stored object, owned so an
/// adapter can keep them after its request was forwarded or parked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent request facts (method kind, directives), not a state machine"
)]
pub struct Client {
    /// The method is `GET` (ranges apply to `GET` only, RFC 9110 §14.2).
    pub get: bool,
    /// The method is `HEAD`: headers only.
    pub head: bool,
    /// `Accept-Encoding`, all lines joined.
    pub accept_encoding: Option<Vec<u8>>,
    /// `If-None-Match`, all lines joined.
    pub if_none_match: Option<Vec<u8>>,
    /// `If-Modified-Since`.
    pub if_modified_since: Option<Vec<u8>>,
    /// `Range`.
    pub range: Option<Vec<u8>>,
    /// `If-Range`.
    pub if_range: Option<Vec<u8>>,
    /// The request comes from a Cachet edge tier and this instance is its shield: answers
    /// keep `Surrogate-Key` so the edge tier stores the object under the same keys.
    pub keep_surrogate: bool,
    /// Request `Cache-Control: only-if-cached` (RFC 9111 §5.2.1.7): answer from a stored
    /// object or `504`, never contact the origin.
    pub only_if_cached: bool,
}

impl Client {
    /// Reads the fields from a request's `method` and headers (bytes, any encoding).
    pub fn read(method: &str, h: &(impl Headers + ?Sized)) -> Self {
        Self {
            get: method == "GET",
            head: method == "HEAD",
            accept_encoding: h.joined("accept-encoding"),
            if_none_match: h.joined("if-none-match"),
            if_modified_since: h.value("if-modified-since"),
            range: h.value("range"),
            if_range: h.value("if-range"),
            keep_surrogate: false,
            only_if_cached: h.joined("cache-control").is_some_and(|v| {
                v.split(|&b| b == b',')
                    .any(|d| d.trim_ascii().eq_ignore_ascii_case(b"only-if-cached"))
            }),
        }
    }

    fn accept(&self) -> Option<&str> {
        self.accept_encoding.as_deref().and_then(text)
    }
}

/// What [`deliver`] decided before the body length is known.
#[derive(Debug)]
pub struct Delivery<'m, 'c> {
    meta: &'m Meta,
    status: CacheStatus,
    now: Timestamp,
    not_modified: bool,
    inflate: bool,
    encoding: Option<&'m str>,
    weak_etag: bool,
    client: &'c Client,
}

/// Which bytes of the representation go out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// No body (`304`, `416`, `HEAD`).
    Empty,
    /// The whole representation.
    Whole,
    /// `[start, end)` of the representation, byte offsets.
    Slice(u64, u64),
}

impl Answer {
    /// The bytes of `body` (the representation sent) that go out: `None` for no body; a
    /// slice outside `body` (never produced by [`deliver()`] for the length it was given)
    /// is empty rather than a panic.
    pub fn select<'b>(&self, body: &'b [u8]) -> Option<&'b [u8]> {
        match *self {
            Self::Empty => None,
            Self::Whole => Some(body),
            Self::Slice(a, b) => Some(
                usize::try_from(a)
                    .ok()
                    .zip(usize::try_from(b).ok())
                    .and_then(|(a, b)| body.get(a..b))
                    .unwrap_or_default(),
            ),
        }
    }
}

/// The response head and which bytes to send: what an adapter writes to the wire. Stored
/// fields are borrowed from the object's [`Meta`] (no copy on the hit path); computed ones
/// are owned. Values are bytes: a stored value is what the origin sent, UTF-8 or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head<'m> {
    /// Status code.
    pub status: u16,
    /// Every header field to send, in order (names as stored or lower-case).
    pub headers: Vec<(Cow<'m, str>, Cow<'m, [u8]>)>,
    /// The bytes of the representation to send.
    pub body: Answer,
}

impl Head<'_> {
    /// The value of `name` in [`Head::headers`] (first line) as text: `None` when absent or
    /// not UTF-8 ([`Head::header_bytes`] has every value).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.header_bytes(name)
            .and_then(|v| std::str::from_utf8(v).ok())
    }

    /// The value of `name` in [`Head::headers`] (first line), as sent.
    pub fn header_bytes(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_ref())
    }
}

/// Plans the answer to `client` from the stored object `meta` at `now`, labelled `status`
/// (`X-Cache`).
///
/// Representation: stored gzip goes as-is to clients that accept gzip and is inflated for
/// the rest ([`Delivery::inflate`]); identity as-is; another coding as-is with its
/// `Content-Encoding` (RFC 9110 §15.5.7 allows it rather than failing).
/// Conditionals: evaluated for stored 2xx only (RFC 9110 §13.2.1), `GET`/`HEAD` only.
pub fn deliver<'m, 'c>(
    meta: &'m Meta,
    client: &'c Client,
    now: Timestamp,
    status: CacheStatus,
) -> Delivery<'m, 'c> {
    let accept = client.accept();
    let (inflate, encoding) = match &meta.encoding {
        Encoding::Gzip if accepts_encoding(accept, "gzip") => (false, Some("gzip")),
        Encoding::Gzip => (true, None),
        Encoding::Identity => (false, None),
        Encoding::Other(e) => (false, Some(e.as_str())),
    };
    let weak_etag = meta.compressed && !inflate;
    let mut d = Delivery {
        meta,
        status,
        now,
        not_modified: false,
        inflate,
        encoding,
        weak_etag,
        client,
    };
    // Without a precondition nothing is evaluated (the hit path's common case: no
    // validator is looked up, no weak `ETag` built).
    let conditional = client.if_none_match.is_some() || client.if_modified_since.is_some();
    if conditional && (200..300).contains(&meta.status) && (client.get || client.head) {
        let etag = d.etag();
        let pre = conditional::evaluate(
            client.if_none_match.as_deref(),
            client.if_modified_since.as_deref(),
            etag.as_deref(),
            // Without `Last-Modified`, the stored response's `Date` (RFC 9110 §13.1.3: a
            // cache may compare against the time it received the response; every
            // object stored since issue 30 keeps one).
            meta.header_bytes("last-modified")
                .or_else(|| meta.header_bytes("date")),
            now,
        );
        if pre == Precondition::NotModified {
            d.not_modified = true;
            d.inflate = false;
        }
    }
    d
}

/// Fields a `304` carries from the stored response (RFC 9110 §15.4.5); `Last-Modified`
/// only when there is no `ETag`.
const NOT_MODIFIED_FIELDS: &[&str] = &[
    "cache-control",
    "content-location",
    "date",
    "etag",
    "expires",
];

impl<'m> Delivery<'m, '_> {
    /// Whether the stored bytes must be inflated before [`Delivery::head`] is asked for
    /// the head (stored gzip, client without gzip). `false` for a `304`.
    pub fn inflate(&self) -> bool {
        self.inflate
    }

    /// Whether the answer is a `304 Not Modified`.
    pub fn is_not_modified(&self) -> bool {
        self.not_modified
    }

    /// The `ETag` of the representation sent: the stored one, made weak when the edge
    /// compressed the body and the gzip bytes are sent.
    fn etag(&self) -> Option<Cow<'m, [u8]>> {
        let e = self.meta.header_bytes("etag")?;
        Some(
            if self.weak_etag && !e.trim_ascii_start().starts_with(b"W/") {
                Cow::Owned([&b"W/"[..], e.trim_ascii()].concat())
            } else {
                Cow::Borrowed(e)
            },
        )
    }

    /// A shield answering its edge tier (`keep_surrogate`), with a body or a `304`: when
    /// this content left the origin ([`cachet_policy::object::CONTENT_AT_FIELD`]), so the
    /// edge's copy counts a ban from before that time (issue 27 item 7).
    fn content_at(&self, headers: &mut Vec<(Cow<'m, str>, Cow<'m, [u8]>)>) {
        if self.client.keep_surrogate {
            headers.push((
                cachet_policy::object::CONTENT_AT_FIELD.into(),
                Cow::Owned(self.meta.ban_at().as_millis().to_string().into_bytes()),
            ));
        }
    }

    /// The head for a representation of `body_len` bytes (the stored length, or the
    /// inflated length when [`Delivery::inflate`]).
    pub fn head(self, body_len: u64) -> Head<'m> {
        let meta: &'m Meta = self.meta;
        let etag = self.etag();
        let mut headers: Vec<(Cow<'m, str>, Cow<'m, [u8]>)> =
            Vec::with_capacity(meta.headers.len() + 8);
        if self.not_modified {
            let has_etag = etag.is_some();
            for (n, v) in &meta.headers {
                let keep = NOT_MODIFIED_FIELDS
                    .iter()
                    .any(|f| f.eq_ignore_ascii_case(n))
                    || (!has_etag && n.eq_ignore_ascii_case("last-modified"));
                if keep && !n.eq_ignore_ascii_case("etag") {
                    headers.push((Cow::Borrowed(n), Cow::Borrowed(v)));
                }
            }
            if let Some(e) = etag {
                headers.push(("etag".into(), e));
            }
            self.content_at(&mut headers);
            self.common(&mut headers);
            return Head {
                status: 304,
                headers,
                body: Answer::Empty,
            };
        }
        for (n, v) in &meta.headers {
            // An `X-Cache` stored before it was left out (`object::stored_header`) would
            // sit beside ours.
            if !n.eq_ignore_ascii_case("etag") && !n.eq_ignore_ascii_case("x-cache") {
                headers.push((Cow::Borrowed(n), Cow::Borrowed(v)));
            }
        }
        if let Some(e) = etag.as_ref() {
            headers.push(("etag".into(), e.clone()));
        }
        if let Some(e) = self.encoding {
            headers.push(("content-encoding".into(), Cow::Borrowed(e.as_bytes())));
        }
        let ranged = (meta.status == 200 || meta.slice.is_some()) && self.client.get;
        if ranged {
            headers.push(("accept-ranges".into(), Cow::Borrowed(b"bytes")));
        }
        // A stored slice holds bytes `first ..` of a representation of `total` bytes
        // (`Meta::slice`): ranges are read against the whole length and answered from the
        // slice's bytes; the whole object is its own body from offset 0.
        let (total, offset) = meta.slice.map_or((body_len, 0), |p| (p.total, p.first));
        let range = if ranged {
            self.range(etag.as_deref(), total)
        } else {
            RangeRequest::Full
        };
        if self.client.keep_surrogate && !meta.surrogate_keys.is_empty() {
            headers.push((
                "surrogate-key".into(),
                computed(meta.surrogate_keys.join(" ")),
            ));
        }
        self.content_at(&mut headers);
        self.common(&mut headers);
        // What a slice holds: `[offset, offset + body_len)`. The plan only sends a slice
        // the ranges inside it; anything else it cannot answer is a 416, never other bytes.
        let held = |first: u64, last: u64| {
            meta.slice.is_none() || (first >= offset && last < offset.saturating_add(body_len))
        };
        let (status, len, body) = match range {
            RangeRequest::Full if meta.slice.is_none() => (meta.status, body_len, Answer::Whole),
            RangeRequest::Partial(r) if held(r.first, r.last) => {
                headers.push(("content-range".into(), computed(r.content_range(total))));
                (
                    206,
                    r.len(),
                    Answer::Slice(r.first - offset, r.last - offset + 1),
                )
            }
            _ => {
                headers.retain(|(n, _)| {
                    !n.eq_ignore_ascii_case("content-encoding")
                        && !n.eq_ignore_ascii_case("content-type")
                });
                headers.push(("content-range".into(), computed(format!("bytes */{total}"))));
                (416, 0, Answer::Empty)
            }
        };
        headers.push(("content-length".into(), computed(len.to_string())));
        Head {
            status,
            headers,
            body: if self.client.head {
                Answer::Empty
            } else {
                body
            },
        }
    }

    /// The client's `Range` read against a representation of `total` bytes, when its
    /// `If-Range` (if any) matches the stored `etag` (as sent) or `Last-Modified` (RFC
    /// 9110 §13.1.5); else the whole representation.
    fn range(&self, etag: Option<&[u8]>, total: u64) -> RangeRequest {
        let Some(r) = &self.client.range else {
            return RangeRequest::Full;
        };
        let applies = self.client.if_range.as_deref().is_none_or(|ir| {
            conditional::if_range_matches(ir, etag, self.meta.header_bytes("last-modified"))
        });
        if applies {
            range::interpret(r, total)
        } else {
            RangeRequest::Full
        }
    }

    /// `Vary`, `Age` (resident time plus the upstream age at storage, RFC 9111 §4.2.3),
    /// `Date` (now) only when the stored response has none (it keeps the origin's, RFC
    /// 9110 §6.6.1, RFC 9111 §4; objects stored since issue 30 always have one), `X-Cache`.
    fn common(&self, headers: &mut Vec<(Cow<'m, str>, Cow<'m, [u8]>)>) {
        let meta: &'m Meta = self.meta;
        if !meta.vary.is_empty() {
            headers.push(("vary".into(), Cow::Borrowed(meta.vary.as_bytes())));
        }
        let age = meta
            .times
            .age(self.now)
            .as_secs()
            .saturating_add(meta.initial_age_s);
        headers.push(("age".into(), computed(age.to_string())));
        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("date")) {
            headers.push(("date".into(), computed(crate::date::format(self.now))));
        }
        headers.push((
            "x-cache".into(),
            Cow::Borrowed(self.status.as_str().as_bytes()),
        ));
    }
}

/// A value Cachet computed (a length, a date, a range) as an owned field value.
fn computed(s: String) -> Cow<'static, [u8]> {
    Cow::Owned(s.into_bytes())
}
