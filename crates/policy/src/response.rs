//! Whether and how an origin response may be stored: Cache-Control, Set-Cookie, Vary, keys.

use std::time::{Duration, SystemTime};

use crate::plan::Plan;

/// Longest surrogate key kept, in bytes (Fastly's documented limit).
pub const MAX_SURROGATE_KEY_BYTES: usize = 1024;

/// Longest `Surrogate-Key` header read, in bytes (Fastly's documented limit). The key that
/// crosses it, and every key after it, is ignored, as Fastly does.
pub const MAX_SURROGATE_HEADER_BYTES: usize = 16 * 1024;

/// A borrowed view of the origin response headers that matter to storage.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResponseView<'a> {
    /// HTTP status code.
    pub status: u16,
    /// `Cache-Control`, all field lines joined with `", "` by the adapter.
    pub cache_control: Option<&'a str>,
    /// `Surrogate-Control` (Fastly/Akamai edge-only freshness; wins over Cache-Control).
    pub surrogate_control: Option<&'a str>,
    /// Whether any `Set-Cookie` is present.
    pub has_set_cookie: bool,
    /// `Vary`, all field lines joined.
    pub vary: Option<&'a str>,
    /// `Content-Encoding`.
    pub content_encoding: Option<&'a str>,
    /// `Content-Type`.
    pub content_type: Option<&'a str>,
    /// `Content-Range` (RFC 9110 §14.4): where a `206` sits in its representation.
    pub content_range: Option<&'a str>,
    /// `Surrogate-Key`.
    pub surrogate_key: Option<&'a str>,
    /// `Content-Length` when known, in bytes.
    pub content_length: Option<u64>,
    /// `CDN-Cache-Control` (RFC 9213), all field lines joined: when present and a valid
    /// Structured Field Dictionary ([`crate::sfv::is_dictionary`]; an invalid one is
    /// ignored whole, §2.1) it replaces `Cache-Control` for storing, freshness and
    /// revalidation: its `no-store` and `private` keep the response out, and a fresh
    /// `max-age` of its own stores a response whose `Cache-Control` says `no-store`.
    /// `Cache-Control: private` is still honoured (privacy first, docs/http.md).
    pub cdn_cache_control: Option<&'a str>,
    /// `Expires` (RFC 9111 §5.3).
    pub expires: Option<&'a str>,
    /// `Date` (RFC 9110 §6.6.1).
    pub date: Option<&'a str>,
    /// `Age` (RFC 9111 §5.1), the age the response already has upstream.
    pub age: Option<&'a str>,
    /// `Last-Modified` (RFC 9110 §8.8.2), for heuristic freshness.
    pub last_modified: Option<&'a str>,
    /// Whether the response carries a validator (`ETag` or `Last-Modified`): an object
    /// with zero freshness is worth keeping only when it can be revalidated.
    pub has_validator: bool,
}

impl ResponseView<'_> {
    /// Why these headers make the response per-user, if they do: `Cache-Control: private`
    /// (RFC 9111 §5.2.2.7), `no-store` in `Cache-Control` (§5.2.2.5) or
    /// `Surrogate-Control`, or a `Set-Cookie`. The first rules of
    /// [`Policy::storability`](crate::Policy::storability); adapters also ask it of a
    /// `304 Not Modified`, whose fields update the stored response (RFC 9111 §3.2): a 304
    /// that says so turns the stored object into a hit-for-pass marker instead of
    /// freshening it.
    pub fn per_user(&self) -> Option<NoStore> {
        let d = Directives::of(self);
        per_user(&d, self.status, self.has_set_cookie)
    }
}

/// [`ResponseView::per_user`] on parsed directives of a response with `status`.
/// `no-store` yields to `must-understand` when Cachet understands the status (RFC 9111
/// §5.2.2.3, [`understood_status`]); `private`, `Set-Cookie` and `Surrogate-Control:
/// no-store` never do.
fn per_user(d: &Directives, status: u16, has_set_cookie: bool) -> Option<NoStore> {
    let (cc, sc) = (&d.cc, &d.sc);
    // `d.target` is `CDN-Cache-Control` when it governs (RFC 9213), else `Cache-Control`;
    // `d.cdn` is any `CDN-Cache-Control` as read leniently, valid or not: what an invalid
    // one says is ignored for freshness but never makes the response more shareable.
    let cdn = d.cdn.as_ref();
    if cc.unreadable || sc.unreadable || d.target.unreadable || cdn.is_some_and(|c| c.unreadable) {
        Some(NoStore::Unreadable)
    } else if cc.private || d.target.private || cdn.is_some_and(|c| c.private) {
        Some(NoStore::Private)
    } else if d.target.refuses(status) || sc.no_store || cdn.is_some_and(|c| c.refuses(status)) {
        Some(NoStore::NoStore)
    } else if has_set_cookie {
        Some(NoStore::SetCookie)
    } else {
        None
    }
}

/// Why a response is not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoStore {
    /// `Cache-Control: private` (RFC 9111 §5.2.2.7).
    Private,
    /// `Cache-Control: no-store` (RFC 9111 §5.2.2.5) or `Surrogate-Control: no-store`.
    NoStore,
    /// The response sets a cookie: per-user by nature.
    SetCookie,
    /// Status not cacheable by default (RFC 9110 §15.1 heuristically cacheable list).
    Status,
    /// Zero freshness and zero grace.
    ZeroTtl,
    /// `Vary` names a header the cache key does not carry (e.g. `Cookie`, `*`), or one a
    /// fill does not send (not in `[origin].fill_fields`).
    Vary,
    /// Body larger than `[edge].max_object_bytes`.
    TooLarge,
    /// `Cache-Control`, `CDN-Cache-Control` or `Surrogate-Control` cannot be read
    /// ([`CacheControl::unreadable`]): what it says about sharing is unknown, so the
    /// response is treated as per-user (fail closed, issue 27).
    Unreadable,
    /// The request carried `Authorization` and the response says none of `public`,
    /// `s-maxage`, `must-revalidate` (RFC 9111 §3.5): its content may depend on who asked.
    Authorization,
}

impl NoStore {
    /// Short label for logs and `X-Cachet-Pass`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Private => "private",
            Self::NoStore => "no-store",
            Self::SetCookie => "set-cookie",
            Self::Status => "status",
            Self::ZeroTtl => "zero-ttl",
            Self::Vary => "vary",
            Self::TooLarge => "too-large",
            Self::Unreadable => "unreadable",
            Self::Authorization => "authorization",
        }
    }

    /// Whether the reason is about the content being per-user (private), as opposed to
    /// merely uncacheable; private keys get a hit-for-pass marker.
    pub fn is_private(self) -> bool {
        matches!(
            self,
            Self::Private
                | Self::NoStore
                | Self::SetCookie
                | Self::Unreadable
                | Self::Authorization
        )
    }
}

/// How to store a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Store {
    /// Freshness lifetime.
    pub ttl: Duration,
    /// Stale-while-revalidate window after `ttl`.
    pub grace: Duration,
    /// Keep window after grace (the route's): held only for conditional revalidation.
    pub keep: Duration,
    /// The origin's keys (Fastly limits applied) followed by the route's, deduplicated,
    /// then the URL key ([`object::url_tag`](crate::object::url_tag)).
    pub surrogate_keys: Vec<String>,
    /// Whether to gzip the body before storing (unencoded, compressible type, route allows).
    pub compress: bool,
    /// The gzip level when compressing (the route's, 1–9).
    pub gzip_level: u32,
    /// The `Vary` to send to clients: `User-Agent` replaced by the device header when the
    /// route varies by device (dropped otherwise), `Accept-Encoding` always present.
    pub vary: String,
    /// The age the response had when received (RFC 9111 §4.2.3 `corrected_initial_age`:
    /// the larger of the upstream `Age` and `now - Date`). [`Store::ttl`] is already net
    /// of it; adapters add it to the `Age` they send.
    pub initial_age: Duration,
    /// `stale-if-error` (RFC 5861 §4): how long past expiry a stored copy may answer
    /// when the origin fails, even beyond grace.
    pub stale_if_error: Duration,
    /// Fields a `no-cache="…"` directive names (RFC 9111 §5.2.2.4), lower-cased: not
    /// stored with the object.
    pub no_cache_fields: Vec<String>,
    /// The request fields the object varies on besides the device class and the encoding
    /// ([`VaryRewrite::fields`]): it is stored as one variant, keyed by their values.
    pub vary_fields: Vec<String>,
    /// A slice's place in its representation (partial content, [`Plan::slice`]).
    pub slice: Option<crate::object::SlicePart>,
}

/// The verdict on an origin response.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(
    clippy::large_enum_variant,
    reason = "made once per origin answer and matched at once; a Box would add an allocation to every fill"
)]
pub enum Storability {
    /// Store it.
    Store(Store),
    /// Do not store it; serve it to this client only.
    DontStore(NoStore),
}

/// Parsed `Cache-Control` directives that matter to a shared cache (RFC 9111 §5.2.2,
/// RFC 5861, RFC 9213 for `CDN-Cache-Control`, which uses the same syntax).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "one flag per directive of RFC 9111 §5.2.2, as the RFC lists them"
)]
pub struct CacheControl {
    /// `private` (with or without a field list: Cachet treats both as private).
    pub private: bool,
    /// `public` (§5.2.2.9): with `s-maxage` and `must-revalidate`, what lets a response to
    /// a request with `Authorization` be stored (§3.5).
    pub public: bool,
    /// `no-store`.
    pub no_store: bool,
    /// Unqualified `no-cache`: store, but revalidate before every reuse (zero TTL, no
    /// grace).
    pub no_cache: bool,
    /// `no-cache="field, …"`: those fields (lower-cased) are not stored (§5.2.2.4).
    pub no_cache_fields: Vec<String>,
    /// `must-revalidate` (§5.2.2.2): never served stale without the origin's say-so.
    pub must_revalidate: bool,
    /// `proxy-revalidate` (§5.2.2.8): `must-revalidate` for shared caches.
    pub proxy_revalidate: bool,
    /// `max-age`, seconds.
    pub max_age: Option<u64>,
    /// `s-maxage`, seconds (shared caches only; wins over `max-age`, and forbids serving
    /// stale like `proxy-revalidate`, §5.2.2.10).
    pub s_maxage: Option<u64>,
    /// `stale-while-revalidate`, seconds (RFC 5861 §3).
    pub stale_while_revalidate: Option<u64>,
    /// `stale-if-error`, seconds (RFC 5861 §4).
    pub stale_if_error: Option<u64>,
    /// `must-understand` (RFC 9111 §5.2.2.3): store only if the cache understands the
    /// status code, and then ignore `no-store`.
    pub must_understand: bool,
    /// The value does not follow the directive grammar's byte classes, so what it says
    /// cannot be known: outside a quoted-string a byte that is not visible ASCII, SP or
    /// HTAB (directive names and token arguments are ASCII, RFC 9111 §5.2, RFC 9110
    /// §5.6.2; adapters hand such bytes over as U+FFFD), or a quoted-string left open
    /// (§5.6.4). Fail closed: a response whose directives are unreadable is never stored
    /// ([`NoStore::Unreadable`]). obs-text inside a quoted-string is valid and readable.
    pub unreadable: bool,
}

impl CacheControl {
    /// Parses a `Cache-Control` (or `Surrogate-Control`, `CDN-Cache-Control`) value.
    /// Unknown directives are ignored; commas inside quoted arguments do not split; a
    /// malformed or repeated `max-age`/`s-maxage` counts as 0 (RFC 9111 §4.2.1: invalid or
    /// conflicting freshness information is treated as stale).
    pub fn parse(value: &str) -> Self {
        let mut cc = Self {
            unreadable: !readable_directives(value),
            ..Self::default()
        };
        for part in split_directives(value) {
            let part = part.trim();
            let (name, arg) = match part.split_once('=') {
                Some((n, a)) => (n.trim(), Some(a.trim().trim_matches('"'))),
                None => (part, None),
            };
            // Invalid or repeated freshness directives make the response stale (0).
            let secs = || arg.and_then(|a| a.parse::<u64>().ok()).unwrap_or(0);
            let is = |d: &str| name.eq_ignore_ascii_case(d);
            if is("private") {
                cc.private = true;
            } else if is("public") {
                cc.public = true;
            } else if is("no-store") {
                cc.no_store = true;
            } else if is("no-cache") {
                match arg.map(str::trim).filter(|a| !a.is_empty()) {
                    Some(fields) => cc.no_cache_fields.extend(
                        fields
                            .split(',')
                            .map(str::trim)
                            .filter(|f| !f.is_empty())
                            .map(str::to_ascii_lowercase),
                    ),
                    None => cc.no_cache = true,
                }
            } else if is("must-revalidate") {
                cc.must_revalidate = true;
            } else if is("proxy-revalidate") {
                cc.proxy_revalidate = true;
            } else if is("max-age") {
                cc.max_age = Some(if cc.max_age.is_some() { 0 } else { secs() });
            } else if is("s-maxage") {
                cc.s_maxage = Some(if cc.s_maxage.is_some() { 0 } else { secs() });
            } else if is("stale-while-revalidate") {
                cc.stale_while_revalidate = Some(secs());
            } else if is("stale-if-error") {
                cc.stale_if_error = Some(secs());
            } else if is("must-understand") {
                cc.must_understand = true;
            }
        }
        cc
    }

    /// Whether these directives keep a response with `status` out of the cache on their
    /// own: `no-store`, unless `must-understand` is present and Cachet understands the
    /// status (RFC 9111 §5.2.2.3: a cache that understands it ignores `no-store`).
    pub fn refuses(&self, status: u16) -> bool {
        self.no_store && !(self.must_understand && understood_status(status))
    }

    /// Whether these directives forbid serving the response stale beyond what the origin
    /// explicitly allows (`must-revalidate`, `proxy-revalidate`, `s-maxage`, `no-cache`):
    /// the route's grace does not apply, the origin's `stale-while-revalidate` does.
    pub fn forbids_stale(&self) -> bool {
        self.must_revalidate || self.proxy_revalidate || self.s_maxage.is_some() || self.no_cache
    }
}

/// Whether a directive list keeps to its grammar's byte classes ([`CacheControl::unreadable`]).
fn readable_directives(value: &str) -> bool {
    let mut quoted = false;
    let mut escaped = false;
    for c in value.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            _ if quoted => {}
            ' ' | '\t' => {}
            c if c.is_ascii_graphic() => {}
            _ => return false,
        }
    }
    !quoted
}

/// Splits a directive list on commas outside double quotes.
fn split_directives(value: &str) -> impl Iterator<Item = &str> {
    let mut rest = value;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut quoted = false;
        let mut escaped = false;
        for (i, b) in rest.bytes().enumerate() {
            match b {
                _ if escaped => escaped = false,
                b'\\' if quoted => escaped = true,
                b'"' => quoted = !quoted,
                b',' if !quoted => {
                    let (part, tail) = (&rest[..i], &rest[i + 1..]);
                    rest = tail;
                    return Some(part);
                }
                _ => {}
            }
        }
        let part = rest;
        rest = "";
        Some(part)
    })
}

/// Statuses a shared cache may store with explicit freshness although they are not
/// heuristically cacheable: final, complete answers (a `206` is partial, a `304` is not a
/// representation). Source: RFC 9111 §3 (any final status the cache understands, with
/// explicit freshness). A `5xx` needs the origin's own freshness ([`origin_error`]) and
/// never replaces a good stored object (`cachet_refresh::should_store_over`).
fn status_storable_with_explicit_freshness(status: u16) -> bool {
    (200..600).contains(&status) && !matches!(status, 206 | 304)
}

/// Whether Cachet understands `status` in the sense of `must-understand` (RFC 9111
/// §5.2.2.3): a final status defined by RFC 9110 §15 whose caching rules Cachet implements
/// (RFC 9110 §15.1's heuristically cacheable ones and the other final statuses it stores
/// with explicit freshness); not `206` (Cachet does not store partial content), not `304`,
/// not an unregistered code.
pub fn understood_status(status: u16) -> bool {
    matches!(
        status,
        200..=205 | 300..=303 | 307 | 308 | 400..=417 | 421 | 422 | 426 | 500..=505
    )
}

/// The surrogate keys an object stored for `plan` from `resp` carries: the origin's
/// (`Surrogate-Key`), then the route's, each once, then the URL's own key (every variant
/// and slice of the URL carries it: unsafe methods invalidate by it, RFC 9111 §4.4).
fn object_keys(plan: &Plan<'_>, resp: &ResponseView<'_>) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for k in resp
        .surrogate_key
        .map(surrogate_keys)
        .into_iter()
        .flatten()
        .chain(plan.surrogate_keys.iter().map(String::as_str))
    {
        if !keys.iter().any(|x| x == k) {
            keys.push(k.to_owned());
        }
    }
    keys.push(crate::object::url_tag(&plan.host, &plan.target));
    keys
}

/// The origin's `206` to a slice fill, when it is exactly the slice `s` asked for:
/// `Content-Range: bytes first-last/total` (RFC 9110 §14.4) with `first` the slice's,
/// `last` its end or the representation's last byte, a known `total`, a body of that
/// length when its length is known, and the identity coding (offsets are the origin's
/// bytes). Anything else is `None` (not stored; a `200` to a slice fill is the whole
/// representation the client is answered from, unstored).
/// A `Content-Range` value `bytes first-last/total` (RFC 9110 §14.4) as
/// `(first, last, total)`; `None` for an unsatisfied range (`bytes */total`), an unknown
/// total (`/*`), another unit, `last < first`, or numbers Cachet cannot read.
pub fn content_range(value: &str) -> Option<(u64, u64, u64)> {
    let cr = value.trim();
    cr.get(..6).filter(|u| u.eq_ignore_ascii_case("bytes "))?;
    let (span, total) = cr[6..].trim().split_once('/')?;
    let (first, last) = span.split_once('-')?;
    let num = |v: &str| -> Option<u64> {
        let v = v.trim();
        (!v.is_empty() && v.len() <= 19 && v.bytes().all(|b| b.is_ascii_digit()))
            .then(|| v.parse().ok())
            .flatten()
    };
    let (first, last, total) = (num(first)?, num(last)?, num(total)?);
    (first <= last).then_some((first, last, total))
}

fn slice_answer(
    s: crate::plan::Slice,
    resp: &ResponseView<'_>,
) -> Option<crate::object::SlicePart> {
    if resp.status != 206
        || resp
            .content_encoding
            .is_some_and(|e| !e.trim().is_empty() && !e.trim().eq_ignore_ascii_case("identity"))
    {
        return None;
    }
    let (first, last, total) = content_range(resp.content_range?)?;
    let expected_last = s.last.min(total.checked_sub(1)?);
    let length_ok = resp
        .content_length
        .is_none_or(|n| Some(n) == last.checked_sub(first).map(|d| d + 1));
    (first == s.first && last == expected_last && length_ok)
        .then_some(crate::object::SlicePart { first, total })
}

/// Whether `status` is a server error (RFC 9110 §15.6). Stored only with the origin's
/// explicit freshness (a route's `ttl_override` never applies to it) and with no grace of
/// the route's (only the origin's `stale-while-revalidate`): an operator's TTL is meant
/// for content, never for an outage (issue 30).
fn origin_error(status: u16) -> bool {
    (500..600).contains(&status)
}

/// Statuses a shared cache may store without explicit freshness (RFC 9110 §15.1).
fn status_cacheable(status: u16) -> bool {
    matches!(
        status,
        200 | 203 | 204 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// Types worth compressing: text, JSON, XML (RSS/Atom), JavaScript, SVG, WASM.
pub fn compressible(content_type: Option<&str>) -> bool {
    let Some(ct) = content_type else { return false };
    let ct = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    ct.starts_with("text/")
        || ct.ends_with("+json")
        || ct.ends_with("+xml")
        || matches!(
            ct.as_str(),
            "application/json"
                | "application/javascript"
                | "application/xml"
                | "application/xhtml+xml"
                | "application/manifest+json"
                | "image/svg+xml"
                | "application/wasm"
        )
}

/// Splits a `Surrogate-Key` header into keys with Fastly's limits: a key over
/// [`MAX_SURROGATE_KEY_BYTES`], or one ending past [`MAX_SURROGATE_HEADER_BYTES`] of the
/// header, is ignored together with every key after it.
pub fn surrogate_keys(header: &str) -> impl Iterator<Item = &str> {
    let base = header.as_ptr() as usize;
    header.split_ascii_whitespace().take_while(move |k| {
        let end = k.as_ptr() as usize - base + k.len();
        k.len() <= MAX_SURROGATE_KEY_BYTES && end <= MAX_SURROGATE_HEADER_BYTES
    })
}

/// Most request fields an origin `Vary` may name besides `User-Agent` and
/// `Accept-Encoding` for the response to be stored as variants; more is not stored.
pub const MAX_VARY_FIELDS: usize = 4;

/// Request fields a `Vary` may name that make a response per-user rather than a variant:
/// a shared cache keyed on them would hold one copy per visitor (and a user's session
/// would be part of a shared key). Such responses are not stored (Cachet's rule).
const PER_USER_FIELDS: &[&str] = &["cookie", "authorization", "proxy-authorization"];

/// An origin `Vary` rewritten for the edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VaryRewrite {
    /// The `Vary` sent to clients: the device header when the route varies by device
    /// (`User-Agent` maps to it; dropped otherwise, seed: Hatena Blog), the other fields
    /// the origin named, `Accept-Encoding` last (gzip storage).
    pub client: String,
    /// The other request fields the origin named, lower-cased, sorted, deduplicated: the
    /// stored object is one variant of the URL, selected by these fields' values
    /// (RFC 9111 §4.1); empty when the device class and the encoding are all it varies on.
    pub fields: Vec<String>,
}

/// Whether a `Vary` member is folded into the cache key rather than stored as a variant
/// field: `User-Agent` and `Sec-CH-UA-Mobile` (the device class's inputs),
/// `Accept-Encoding` (gzip storage) and the device header itself. No stored object ever
/// varies on these through its variant fields, so a lookup need not carry them.
pub fn folded_vary_field(name: &str, device_header: &str) -> bool {
    name.eq_ignore_ascii_case("user-agent")
        || name.eq_ignore_ascii_case("sec-ch-ua-mobile")
        || name.eq_ignore_ascii_case("accept-encoding")
        || name.eq_ignore_ascii_case(device_header)
}

/// Rewrites an origin `Vary` (RFC 9111 §4.1). `User-Agent` and `Sec-CH-UA-Mobile` (the
/// device class's inputs) become the device header when the route varies by device and
/// are dropped otherwise. `None` when it cannot be stored: `*`, a
/// per-user field (`Cookie`, `Authorization`), a malformed name, or more than
/// [`MAX_VARY_FIELDS`] other fields.
///
/// The client's `Vary` keeps the origin's members it did not rewrite, in its order and
/// spelling (duplicates dropped, compared case-insensitively); `Accept-Encoding` is in it
/// when the origin named it or when `encoding_varies` (the stored body is gzip, compressed
/// by Cachet or by the origin, or another coding: what a client gets depends on what it
/// accepts), and only then (issue 30).
pub fn rewrite_vary(
    vary: Option<&str>,
    device_header: &str,
    vary_device: bool,
    encoding_varies: bool,
) -> Option<VaryRewrite> {
    let mut fields: Vec<String> = Vec::new();
    let mut client = String::new();
    let push = |client: &mut String, name: &str| {
        if !client.is_empty() {
            client.push_str(", ");
        }
        client.push_str(name);
    };
    if vary_device {
        push(&mut client, device_header);
    }
    let mut named_encoding = false;
    for name in vary
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        if name.eq_ignore_ascii_case("accept-encoding") {
            if !named_encoding {
                named_encoding = true;
                push(&mut client, name);
            }
            continue;
        }
        if folded_vary_field(name, device_header) {
            continue;
        }
        let token = name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        let lower = name.to_ascii_lowercase();
        if name == "*" || !token || PER_USER_FIELDS.contains(&lower.as_str()) {
            return None;
        }
        if !fields.contains(&lower) {
            fields.push(lower);
            push(&mut client, name);
        }
    }
    if fields.len() > MAX_VARY_FIELDS {
        return None;
    }
    fields.sort();
    if encoding_varies && !named_encoding {
        push(&mut client, "Accept-Encoding");
    }
    Some(VaryRewrite { client, fields })
}

/// Parsed freshness inputs of a response: `Cache-Control` (or `CDN-Cache-Control` when
/// present and valid, RFC 9213 §2.1) and `Surrogate-Control`.
struct Directives {
    /// `Cache-Control` as sent (its `private` is always honoured).
    cc: CacheControl,
    /// The directives that govern storing and freshness: `CDN-Cache-Control` if present
    /// and a valid Structured Field Dictionary, else `Cache-Control`.
    target: CacheControl,
    /// `CDN-Cache-Control` read leniently when present, valid or not (for `private`,
    /// `no-store` and unreadable bytes: fail closed).
    cdn: Option<CacheControl>,
    /// `Surrogate-Control`.
    sc: CacheControl,
}

impl Directives {
    fn of(resp: &ResponseView<'_>) -> Self {
        let cc = resp
            .cache_control
            .map(CacheControl::parse)
            .unwrap_or_default();
        let sc = resp
            .surrogate_control
            .map(CacheControl::parse)
            .unwrap_or_default();
        let cdn = resp.cdn_cache_control.map(CacheControl::parse);
        let target = match (&cdn, resp.cdn_cache_control) {
            (Some(c), Some(v)) if crate::sfv::is_dictionary(v) => c.clone(),
            _ => cc.clone(),
        };
        Self {
            cc,
            target,
            cdn,
            sc,
        }
    }
}

/// Seconds between two HTTP dates, `later - earlier`, saturating at 0.
fn http_date_secs(later: SystemTime, earlier: SystemTime) -> u64 {
    later.duration_since(earlier).map_or(0, |d| d.as_secs())
}

/// Parses an HTTP date (RFC 9110 §5.6.7).
fn http_date(v: &str) -> Option<SystemTime> {
    parse_http_date(v)
}

/// Parses an HTTP date in any of its three formats (IMF-fixdate, and the obsolete RFC 850
/// and asctime forms a recipient must accept, RFC 9110 §5.6.7), matching day and month
/// names and `GMT` case-insensitively as a cache recipient should (RFC 9111 §4.2).
/// Surrounding whitespace is ignored. `None` for anything else (then the rules that read
/// it treat the time as already past or absent, as each says).
pub fn parse_http_date(v: &str) -> Option<SystemTime> {
    let v = v.trim();
    if let Ok(t) = httpdate::parse_http_date(v) {
        return Some(t);
    }
    if !v.is_ascii() {
        return None;
    }
    // Respell each word as the grammar does (`Sun`, `Sunday`, `Nov`, `GMT`), then parse.
    let mut out = String::with_capacity(v.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.eq_ignore_ascii_case("gmt") {
            out.push_str("GMT");
        } else {
            for (i, c) in word.chars().enumerate() {
                out.push(if i == 0 {
                    c.to_ascii_uppercase()
                } else {
                    c.to_ascii_lowercase()
                });
            }
        }
        word.clear();
    };
    for c in v.chars() {
        if c.is_ascii_alphabetic() {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    httpdate::parse_http_date(&out).ok()
}

/// The freshness lifetime a response declares and whether it is explicit.
///
/// Precedence (documented in docs/http.md): the route's `ttl` when `ttl_override`; else
/// `Surrogate-Control: max-age` → `CDN-Cache-Control` (RFC 9213) `no-cache` / `s-maxage`
/// / `max-age` → `Cache-Control` `no-cache` / `s-maxage` / `max-age` (the last two only
/// without `CDN-Cache-Control`) → `Expires` − `Date` (RFC 9111 §4.2.1; an invalid
/// `Expires` means already expired) → heuristic (§4.2.2: the route's
/// `heuristic_fraction` of `Date − Last-Modified`, capped at `heuristic_max`; only for
/// heuristically cacheable statuses) → the route's `ttl`. Capped at one year.
///
/// A server error ([`origin_error`]) skips the route's `ttl_override`.
fn lifetime(
    plan: &Plan<'_>,
    route: Option<&crate::RouteConfig>,
    resp: &ResponseView<'_>,
    d: &Directives,
) -> (Duration, bool) {
    let cap = |t: Duration| t.min(crate::config::MAX_DURATION);
    if plan.ttl_override && !origin_error(resp.status) {
        return (cap(plan.ttl), true);
    }
    if let Some(s) = d.sc.max_age {
        return (cap(Duration::from_secs(s)), true);
    }
    if d.target.no_cache {
        return (Duration::ZERO, true);
    }
    if let Some(s) = d.target.s_maxage.or(d.target.max_age) {
        return (cap(Duration::from_secs(s)), true);
    }
    let date = resp.date.and_then(http_date).unwrap_or(plan.decided_at);
    if let Some(e) = resp.expires {
        let secs = http_date(e).map_or(0, |e| http_date_secs(e, date));
        return (cap(Duration::from_secs(secs)), true);
    }
    let heuristic = route.filter(|r| r.heuristic_fraction > 0.0).and_then(|r| {
        let lm = http_date(resp.last_modified?)?;
        let since = http_date_secs(date, lm);
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "seconds below 2^53; the fraction is validated to [0, 1]"
        )]
        let secs = (since as f64 * r.heuristic_fraction) as u64;
        Some(Duration::from_secs(secs).min(r.heuristic_max.0))
    });
    if let Some(h) = heuristic.filter(|_| status_cacheable(resp.status)) {
        return (cap(h), false);
    }
    (cap(plan.ttl), false)
}

/// RFC 9111 §4.2.3's `corrected_initial_age` without the response delay: the larger of
/// the upstream `Age` and the apparent age `now − Date` (the plan's decision time stands
/// for the response time).
fn initial_age(plan: &Plan<'_>, resp: &ResponseView<'_>) -> Duration {
    // A list (`Age: 7200, 0`, or two lines) counts by its first member (RFC 9111 §5.1).
    let age = resp
        .age
        .and_then(|a| a.split(',').next())
        .and_then(|a| a.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let apparent = resp
        .date
        .and_then(http_date)
        .map_or(0, |d| http_date_secs(plan.decided_at, d));
    Duration::from_secs(age.max(apparent)).min(crate::config::MAX_DURATION)
}

impl crate::Policy {
    /// The TTL a revalidation answer (a `304 Not Modified`, RFC 9111 §4.3.4) gives the
    /// stored object under `plan`'s route, with the same precedence as
    /// [`Policy::storability`](crate::Policy::storability) among the fields a 304 carries
    /// (`Surrogate-Control`, `Cache-Control`): the route's TTL when it overrides, else the
    /// answer's directives; `None` keeps the stored TTL.
    pub fn revalidated_ttl(
        &self,
        plan: &Plan<'_>,
        cache_control: Option<&str>,
        surrogate_control: Option<&str>,
    ) -> Option<Duration> {
        let resp = ResponseView {
            status: 200,
            cache_control,
            surrogate_control,
            ..ResponseView::default()
        };
        let d = Directives::of(&resp);
        let declared = plan.ttl_override
            || d.sc.max_age.is_some()
            || d.target.no_cache
            || d.target.s_maxage.is_some()
            || d.target.max_age.is_some();
        declared.then(|| lifetime(plan, None, &resp, &d).0)
    }

    /// Decides whether the origin response for `plan` is stored, with which TTL, grace,
    /// keep, surrogate keys, compression and client-facing `Vary`.
    ///
    /// Rules, in order: `private` / `no-store` (Surrogate-Control's `no-store` too) and
    /// `Set-Cookie` are never stored (RFC 9111 §3, §5.2.2.5, §5.2.2.7); an answer to a
    /// request with `Authorization` only with `public`, `s-maxage` or `must-revalidate`
    /// (§3.5; its key holds the credentials); statuses
    /// heuristically cacheable (RFC 9110 §15.1) are stored, other final statuses (but
    /// `206`, `304`) only with explicit freshness, a `5xx`'s from the origin itself (never
    /// the route's `ttl_override`, and without the route's grace); `Vary` must be
    /// expressible by the key;
    /// the lifetime follows the precedence of docs/http.md (`lifetime`); the TTL is net of
    /// the response's initial age (§4.2.3); grace is the longer of the route's and
    /// `stale-while-revalidate`, but only the latter when the response forbids stale
    /// serving (`must-revalidate`, `proxy-revalidate`, `s-maxage`, `no-cache`); a response
    /// with zero TTL and zero grace is stored only when it has a validator and the route
    /// keeps objects (it is then revalidated before every reuse).
    pub fn storability(&self, plan: &Plan<'_>, resp: &ResponseView<'_>) -> Storability {
        let d = Directives::of(resp);
        if let Some(why) = per_user(&d, resp.status, resp.has_set_cookie) {
            return Storability::DontStore(why);
        }
        // A request with `Authorization` (keyed by its credentials, `Plan::authorized`):
        // stored only when the origin says a shared cache may (RFC 9111 §3.5).
        if plan.authorized
            && !(d.target.public || d.target.s_maxage.is_some() || d.target.must_revalidate)
        {
            return Storability::DontStore(NoStore::Authorization);
        }
        // `must-understand` with a status Cachet does not understand: never stored
        // (RFC 9111 §5.2.2.3).
        if d.target.must_understand && !understood_status(resp.status) {
            return Storability::DontStore(NoStore::Status);
        }
        let route = plan.route_index.and_then(|i| self.config().routes.get(i));
        let (lifetime, explicit) = lifetime(plan, route, resp, &d);
        // A slice plan stores only the origin's `206` for exactly that slice (RFC 9111
        // §3.3; `206` is heuristically cacheable, RFC 9110 §15.1); nothing else under its
        // key. Any other plan never stores a `206`.
        let slice = match plan.slice {
            Some(s) => match slice_answer(s, resp) {
                Some(part) => Some(part),
                None => return Storability::DontStore(NoStore::Status),
            },
            None => None,
        };
        let heuristic_status = status_cacheable(resp.status) || slice.is_some();
        if !(heuristic_status || explicit && status_storable_with_explicit_freshness(resp.status)) {
            return Storability::DontStore(NoStore::Status);
        }
        if resp
            .content_length
            .is_some_and(|n| n > self.config().edge.max_object_bytes)
        {
            return Storability::DontStore(NoStore::TooLarge);
        }
        let encoded = resp
            .content_encoding
            .is_some_and(|e| !e.trim().is_empty() && !e.trim().eq_ignore_ascii_case("identity"));
        let compress = plan.compress && !encoded && compressible(resp.content_type);
        let Some(VaryRewrite {
            client: vary,
            fields: vary_fields,
        }) = rewrite_vary(
            resp.vary,
            plan.device_header,
            plan.vary_device,
            compress || encoded,
        )
        else {
            return Storability::DontStore(NoStore::Vary);
        };
        // A variant is stored only if its fill carried the fields it varies on
        // (`[origin].fill_fields`): else its content came from a request without them.
        let fill_fields = &self.config().origin.fill_fields;
        if !(vary_fields.iter()).all(|v| fill_fields.iter().any(|f| f.eq_ignore_ascii_case(v))) {
            return Storability::DontStore(NoStore::Vary);
        }
        let initial_age = initial_age(plan, resp);
        let swr = Duration::from_secs(
            d.sc.stale_while_revalidate
                .or(d.target.stale_while_revalidate)
                .unwrap_or(0),
        );
        let route_grace = if d.target.forbids_stale() || origin_error(resp.status) {
            Duration::ZERO
        } else {
            plan.grace
        };
        let mut grace = route_grace.max(swr).min(crate::config::MAX_DURATION);
        let ttl = lifetime.saturating_sub(initial_age);
        // Already older than its lifetime: the grace window has partly passed too.
        grace = grace.saturating_sub(initial_age.saturating_sub(lifetime));
        let stale_if_error =
            Duration::from_secs(d.sc.stale_if_error.or(d.target.stale_if_error).unwrap_or(0))
                .min(crate::config::MAX_DURATION)
                .saturating_sub(initial_age.saturating_sub(lifetime));
        let revalidatable = resp.has_validator && !plan.keep.is_zero();
        if ttl.is_zero() && grace.is_zero() && !revalidatable {
            return Storability::DontStore(NoStore::ZeroTtl);
        }
        let keys = object_keys(plan, resp);
        let mut no_cache_fields = d.target.no_cache_fields.clone();
        for f in &d.cc.no_cache_fields {
            if !no_cache_fields.contains(f) {
                no_cache_fields.push(f.clone());
            }
        }
        Storability::Store(Store {
            ttl,
            grace,
            keep: plan.keep,
            surrogate_keys: keys,
            compress,
            gzip_level: plan.gzip_level,
            vary,
            initial_age,
            stale_if_error,
            no_cache_fields,
            vary_fields,
            slice,
        })
    }
}

/// Whether an `Accept-Encoding` value accepts `coding` (RFC 9110 §12.5.3): listed by name
/// or `*`, with a q-value other than 0. `identity` is acceptable unless refused.
pub fn accepts_encoding(accept_encoding: Option<&str>, coding: &str) -> bool {
    let mut star = None;
    for item in accept_encoding.unwrap_or("").split(',') {
        let mut parts = item.split(';');
        let name = parts.next().unwrap_or("").trim();
        let q_zero = parts.any(|p| {
            p.trim()
                .strip_prefix("q=")
                .or_else(|| p.trim().strip_prefix("Q="))
                .and_then(|q| q.trim().parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        if name.eq_ignore_ascii_case(coding) {
            return !q_zero;
        }
        if name == "*" {
            star = Some(!q_zero);
        }
    }
    star.unwrap_or(coding.eq_ignore_ascii_case("identity"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_user_is_what_storability_refuses_first() {
        let view =
            |cc: Option<&'static str>, sc: Option<&'static str>, cookie: bool| ResponseView {
                status: 304,
                cache_control: cc,
                surrogate_control: sc,
                has_set_cookie: cookie,
                ..ResponseView::default()
            };
        assert_eq!(view(Some("max-age=60"), None, false).per_user(), None);
        assert_eq!(view(None, None, false).per_user(), None);
        assert_eq!(
            view(Some("PRIVATE, max-age=60"), None, false).per_user(),
            Some(NoStore::Private)
        );
        assert_eq!(
            view(Some("no-store"), None, false).per_user(),
            Some(NoStore::NoStore)
        );
        assert_eq!(
            view(None, Some("no-store"), false).per_user(),
            Some(NoStore::NoStore)
        );
        assert_eq!(
            view(Some("public"), None, true).per_user(),
            Some(NoStore::SetCookie)
        );
        assert!(
            view(Some("no-cache"), None, false).per_user().is_none(),
            "no-cache stores"
        );
    }

    #[test]
    fn cache_control_parse() {
        let cc =
            CacheControl::parse("public, max-age=300, s-maxage=\"600\", stale-while-revalidate=30");
        assert_eq!(cc.max_age, Some(300));
        assert_eq!(cc.s_maxage, Some(600));
        assert_eq!(cc.stale_while_revalidate, Some(30));
        assert!(!cc.private && !cc.no_store);
        let cc = CacheControl::parse("Private=\"set-cookie\", NO-STORE");
        assert!(cc.private && cc.no_store);
        // Malformed or repeated max-age is stale (0), never the route's TTL.
        assert_eq!(
            CacheControl::parse("max-age=300, max-age=600").max_age,
            Some(0)
        );
        assert_eq!(CacheControl::parse("max-age=-1").max_age, Some(0));
        assert_eq!(CacheControl::parse("public").max_age, None);
    }

    #[test]
    fn surrogate_key_limits() {
        let keys: Vec<_> = surrogate_keys("  a  b\tc ").collect();
        assert_eq!(keys, ["a", "b", "c"]);
        let long = "k".repeat(MAX_SURROGATE_KEY_BYTES + 1);
        let header = format!("a {long} b");
        assert_eq!(surrogate_keys(&header).collect::<Vec<_>>(), ["a"]);
        let exact = "k".repeat(MAX_SURROGATE_KEY_BYTES);
        let header = format!("{exact} b");
        assert_eq!(surrogate_keys(&header).count(), 2);
        // 17 keys of 1,000 bytes: the one ending past 16,384 bytes and all after it go.
        let header = (0..17)
            .map(|i| format!("{i:0>1000}"))
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(surrogate_keys(&header).count(), 16);
    }

    #[test]
    fn vary_rewrite() {
        let client = |v: Option<&str>, d: bool| {
            rewrite_vary(v, "X-Cachet-Device", d, true).map(|r| r.client)
        };
        assert_eq!(
            client(Some("User-Agent"), true).as_deref(),
            Some("X-Cachet-Device, Accept-Encoding")
        );
        assert_eq!(
            client(Some("user-agent, accept-encoding"), false).as_deref(),
            Some("accept-encoding"),
            "the origin's spelling"
        );
        assert_eq!(client(None, false).as_deref(), Some("Accept-Encoding"));
        // The client hint is a device-class input: folded like User-Agent, never a variant.
        let r = rewrite_vary(Some("Sec-CH-UA-Mobile, User-Agent"), "X-D", true, true);
        assert_eq!(
            r,
            Some(VaryRewrite {
                client: "X-D, Accept-Encoding".into(),
                fields: Vec::new(),
            })
        );
        assert_eq!(
            client(Some("sec-ch-ua-mobile"), false).as_deref(),
            Some("Accept-Encoding")
        );
        let r = rewrite_vary(
            Some("X-Theme, Accept-Language, accept-language"),
            "X-D",
            true,
            true,
        );
        assert_eq!(
            r,
            Some(VaryRewrite {
                client: "X-D, X-Theme, Accept-Language, Accept-Encoding".into(),
                fields: vec!["accept-language".into(), "x-theme".into()],
            })
        );
        for never in ["Cookie", "*", "authorization", "a, b, c, d, e", "bad name"] {
            assert_eq!(
                rewrite_vary(Some(never), "X-D", true, true),
                None,
                "{never}"
            );
        }
    }

    #[test]
    fn accept_encoding_is_in_vary_only_where_the_body_depends_on_it() {
        // Issue 30: a body stored untransformed does not vary on Accept-Encoding, unless
        // the origin said it does.
        let client =
            |v: Option<&str>, enc: bool| rewrite_vary(v, "X-D", false, enc).map(|r| r.client);
        assert_eq!(client(None, false).as_deref(), Some(""));
        assert_eq!(client(Some("Foo"), false).as_deref(), Some("Foo"));
        assert_eq!(
            client(Some("Foo"), true).as_deref(),
            Some("Foo, Accept-Encoding")
        );
        assert_eq!(
            client(Some("Accept-Encoding, Foo"), false).as_deref(),
            Some("Accept-Encoding, Foo")
        );
        assert_eq!(
            client(Some("ACCEPT-ENCODING"), true).as_deref(),
            Some("ACCEPT-ENCODING")
        );
    }

    #[test]
    fn http_dates_in_all_three_formats_any_case() {
        // RFC 9110 §5.6.7 (three formats), RFC 9111 §4.2 (case-insensitive for caches).
        let want = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").ok();
        assert!(want.is_some());
        for v in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "sun, 06 nov 1994 08:49:37 gmt",
            "SUN, 06 NOV 1994 08:49:37 GMT",
            " Sun, 06 Nov 1994 08:49:37 GMT ",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "SUNDAY, 06-nov-94 08:49:37 Gmt",
            "Sun Nov  6 08:49:37 1994",
            "sun nov  6 08:49:37 1994",
        ] {
            assert_eq!(parse_http_date(v), want, "{v:?}");
        }
        for bad in [
            "0",
            "",
            "Sun, 06 Nov 1994",
            "Sun, 06 Nov 1994 08:49:37 GMT\u{e9}",
            "yesterday",
        ] {
            assert_eq!(parse_http_date(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn accept_encoding() {
        assert!(accepts_encoding(Some("gzip, deflate, br"), "gzip"));
        assert!(accepts_encoding(Some("br;q=1.0, GZIP;q=0.5"), "gzip"));
        assert!(!accepts_encoding(Some("gzip;q=0"), "gzip"));
        assert!(!accepts_encoding(Some("br"), "gzip"));
        assert!(accepts_encoding(Some("*"), "gzip"));
        assert!(!accepts_encoding(Some("*;q=0"), "gzip"));
        assert!(!accepts_encoding(None, "gzip"));
        assert!(accepts_encoding(None, "identity"));
        assert!(!accepts_encoding(Some("identity;q=0"), "identity"));
    }

    #[test]
    fn compressible_types() {
        assert!(compressible(Some("text/html; charset=utf-8")));
        assert!(compressible(Some("application/rss+xml")));
        assert!(compressible(Some("Application/JSON")));
        assert!(!compressible(Some("image/png")));
        assert!(!compressible(None));
    }
}
