//! The per-request decision: route, cache key, device class, normalized target, TTLs, keys.

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use cachet_device::DeviceClass;
use cachet_query::QueryError;

use crate::config::RouteAction;

/// Longest `Host` accepted, in bytes (a DNS name is at most 253; room for a port).
pub const MAX_HOST_BYTES: usize = 261;

/// A borrowed view of the client request, built by an adapter from its platform request.
/// Nothing is copied; the plan borrows from it where it can.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestView<'a> {
    /// Method, e.g. `"GET"`.
    pub method: &'a str,
    /// The request's own scheme, `"http"` or `"https"`.
    pub scheme: &'a str,
    /// The `Host` header (or `:authority`), as received. `None` when absent.
    pub host: Option<&'a str>,
    /// The request target, path and raw query: `"/blog/a/?utm_source=x&page=2"`.
    pub path_and_query: &'a str,
    /// The `User-Agent` bytes; `None` when absent (classified as an empty UA).
    pub user_agent: Option<&'a [u8]>,
    /// The `Authorization` value (several fields joined), `None` when absent. RFC 9111
    /// §3.5: a shared cache stores a response to such a request only when the response
    /// says `public`, `s-maxage` or `must-revalidate`; Cachet then keys it by these
    /// credentials ([`Plan::authorized`]), or passes the request when
    /// `[edge].cache_authorized` is off.
    pub authorization: Option<&'a [u8]>,
    /// `X-Forwarded-Proto`, honoured only when `[edge].trust_forwarded`.
    pub forwarded_proto: Option<&'a str>,
    /// `X-Forwarded-Host`, honoured only when `[edge].trust_forwarded`.
    pub forwarded_host: Option<&'a str>,
    /// The `Sec-CH-UA-Mobile` client hint's raw value (`?1` / `?0`); `None` when absent.
    /// With `[device] client_hints` in force (the `accurate` default) a valid value
    /// decides the device class before the User-Agent rules; the value itself never
    /// enters the cache key, only the class does.
    pub ch_ua_mobile: Option<&'a [u8]>,
    /// The raw `Cookie` header value (several `Cookie` fields joined with `"; "`); `None`
    /// when absent. Read only for the `[device] force_cookie` override, which maps its
    /// value to a device class; the header never enters the cache key.
    pub cookie: Option<&'a [u8]>,
    /// The `Range` value, `None` when absent: with the route's `slice_bytes`, one closed
    /// range inside one slice is cached under that slice ([`Plan::slice`]).
    pub range: Option<&'a [u8]>,
    /// Whether the request carries `If-Range` (a slice could not answer its "else the
    /// whole representation", RFC 9110 §13.1.5: such a request uses the whole object).
    pub has_if_range: bool,
    /// Whether the request has content: a `Transfer-Encoding`, or a `Content-Length`
    /// other than `0` (RFC 9112 §6.3; an unreadable `Content-Length` counts as content).
    /// A `GET`/`HEAD` with content is passed uncached ([`PassReason::Body`]).
    pub has_body: bool,
}

/// Why a request goes to the origin without the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PassReason {
    /// The matching route says `action = "pass"`.
    Route,
    /// No route matched (fail closed).
    NoRoute,
    /// Not `GET`/`HEAD`.
    Method,
    /// The request carries `Authorization` and `[edge].cache_authorized` is off.
    Authorization,
    /// A `GET`/`HEAD` with content ("fat GET"): content has no defined meaning in these
    /// methods (RFC 9110 §9.3.1, §9.3.2), the cache key does not hold it, and an origin
    /// that reads it would shape a shared object; such a request is forwarded with its
    /// body and its answer never stored nor served from the cache (issue 27 item 3).
    Body,
    /// The query exceeded the normalizer's bounds; forwarded as received, uncached.
    Query(QueryError),
}

impl PassReason {
    /// Short label for logs and the `X-Cachet-Pass` header, e.g. `"authorization"`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Route => "route",
            Self::NoRoute => "no-route",
            Self::Method => "method",
            Self::Authorization => "authorization",
            Self::Body => "request-body",
            Self::Query(_) => "query-limit",
        }
    }
}

/// A response the edge produces itself.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Synth {
    /// `/robots.txt` from the template, `text/plain`, never cached across hosts.
    Robots {
        /// The filled-in body.
        body: String,
    },
    /// A request the edge refuses, e.g. a missing or malformed `Host`: HTTP 400.
    BadRequest {
        /// The reason, sent as the body.
        reason: &'static str,
    },
}

/// What to do with the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Look up the cache under [`Plan::cache_key`]; fetch and maybe store on a miss.
    Cache,
    /// Go to the origin; never store.
    Pass(PassReason),
    /// Answer at the edge.
    Synth(Synth),
}

/// The policy's verdict for one request. Pure data; the adapter performs all I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent facts of one plan (device in the key, TTL override, compression, credentials in the key)"
)]
pub struct Plan<'a> {
    /// Name of the matched route (`"-"` when none matched).
    pub route: &'a str,
    /// Index of the matched route in `Config::routes`.
    pub route_index: Option<usize>,
    /// What to do.
    pub decision: Decision,
    /// The device class, always computed: it is sent to the origin in
    /// [`Plan::device_header`], overwriting any client-supplied value.
    pub device: DeviceClass,
    /// Name of the request header carrying the device class to the origin.
    pub device_header: &'a str,
    /// Whether the device class is part of the key and of the response's `Vary`.
    pub vary_device: bool,
    /// The target sent to the origin: path plus normalized query (borrowed when the
    /// request was already normal).
    pub target: Cow<'a, str>,
    /// Lower-cased host without a trailing dot.
    pub host: Cow<'a, str>,
    /// The cache key: `host + target + "|" + device` (`"|*"` when the route does not vary
    /// by device), unambiguous because the device slot is always last; for a request
    /// with `Authorization` ([`Plan::authorized`]) followed by `"|auth:"` and 32 hex
    /// digits of the SHA-256 of its credentials ([`credentials_slot`]), a slot no
    /// anonymous key ends with; for a slice ([`Plan::slice`]) then `"|slice:"` and its
    /// index. Empty unless `decision` is [`Decision::Cache`].
    pub cache_key: String,
    /// The slice of the representation this request is cached under (partial content
    /// storage, the route's `slice_bytes`, issue 30), `None` for the whole object.
    pub slice: Option<Slice>,
    /// A `GET` on a slicing route that no one slice answers (no `Range`, several ranges,
    /// or one closed or open-ended range across slices), without `If-Range`: answered by
    /// combining the slices it covers (`cachet_http::stitch`, RFC 9111 §3.4, issue 30).
    /// `None` otherwise (and for suffix ranges, which need the length first).
    pub stitch: Option<Stitch>,
    /// The request carries `Authorization` and is cached under its credentials' own key
    /// (RFC 9111 §3.5, issue 30): its answer is stored only when it says `public`,
    /// `s-maxage` or `must-revalidate` (`Policy::storability`), and its fill carries
    /// the `Authorization` field (`cachet_http::fill::request_fields`).
    pub authorized: bool,
    /// TTL to use when the origin gives none (or always, with `ttl_override`).
    pub ttl: Duration,
    /// Whether the route TTL overrides the origin's freshness headers.
    pub ttl_override: bool,
    /// Grace (stale-while-revalidate) after the TTL.
    pub grace: Duration,
    /// Keep after grace: held only as the base of a conditional revalidation.
    pub keep: Duration,
    /// Surrogate keys from the route, templates filled in.
    pub surrogate_keys: Vec<String>,
    /// Whether to store the body gzip-compressed.
    pub compress: bool,
    /// The gzip level when it is (the route's [`gzip_level`](crate::config::RouteConfig::gzip_level), 1–9).
    pub gzip_level: u32,
    /// The `now` the plan was made at (seconds since the Unix epoch precision kept).
    pub decided_at: SystemTime,
}

/// Validates a surrogate key template from configuration.
pub(crate) fn check_key_template(t: &str) -> Result<(), String> {
    if t.is_empty() {
        return Err("empty key".into());
    }
    if t.bytes()
        .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
    {
        return Err("keys are space-separated on the wire: no spaces or control bytes".into());
    }
    let mut rest = t;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            return Err(format!("unclosed '{{' in {t:?}"));
        };
        let name = &rest[open + 1..open + close];
        let ok = matches!(name, "host" | "path" | "route")
            || (name.len() == 4
                && name.starts_with("seg")
                && (b'1'..=b'9').contains(&name.as_bytes()[3]));
        if !ok {
            return Err(format!(
                "unknown placeholder {{{name}}}; use {{host}}, {{path}}, {{route}} or {{seg1}}..{{seg9}}"
            ));
        }
        rest = &rest[open + close + 1..];
    }
    Ok(())
}

/// Fills a validated surrogate key template.
pub(crate) fn fill_key_template(t: &str, host: &str, path: &str, route: &str) -> String {
    let mut out = String::with_capacity(t.len() + 16);
    let mut rest = t;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find('}').map_or(rest.len(), |c| open + c);
        let name = &rest[open + 1..close];
        match name {
            "host" => out.push_str(host),
            "path" => out.push_str(path),
            "route" => out.push_str(route),
            _ => {
                let n = usize::from(name.as_bytes().get(3).map_or(0, |d| d.saturating_sub(b'0')));
                if let Some(seg) = path
                    .split('/')
                    .filter(|s| !s.is_empty())
                    .nth(n.saturating_sub(1))
                {
                    out.push_str(seg);
                }
            }
        }
        rest = rest.get(close + 1..).unwrap_or("");
    }
    out.push_str(rest);
    out
}

/// Why the request itself keeps a cache route's answer out of the cache, if it does:
/// not `GET`/`HEAD` (RFC 9111 §3, §4.4), `Authorization` (§3.5) when
/// `[edge].cache_authorized` is off, or content in a
/// `GET`/`HEAD` ([`PassReason::Body`]), checked in that order.
pub(crate) fn request_pass(req: &RequestView<'_>, cache_authorized: bool) -> Option<PassReason> {
    if !matches!(req.method, "GET" | "HEAD") {
        Some(PassReason::Method)
    } else if req.authorization.is_some() && !cache_authorized {
        Some(PassReason::Authorization)
    } else if req.has_body {
        Some(PassReason::Body)
    } else {
        None
    }
}

/// [`normalize_authority`] without a scheme: a port is kept unless it is empty.
pub fn normalize_host(host: &str) -> Option<Cow<'_, str>> {
    normalize_authority(host, "")
}

/// The default port of `scheme` (RFC 9110 §4.2.1, §4.2.2), `None` for any other scheme.
fn default_port(scheme: &str) -> Option<u16> {
    if scheme.eq_ignore_ascii_case("http") {
        Some(80)
    } else if scheme.eq_ignore_ascii_case("https") {
        Some(443)
    } else {
        None
    }
}

/// Normalizes a `Host` / `:authority` value (`host [ ":" port ]`, RFC 9110 §7.2, RFC 3986
/// §3.2.2–3.2.3) for the cache key, `x-host` and robots.txt: lower-cased, one trailing dot
/// of the name stripped, and the port dropped when it is empty or the default of the
/// request's `scheme` (`h.example:80` and `h.example:` are `h.example` over `http`,
/// RFC 9110 §4.2.3: the same origin, so the same objects and the same bans, issue 27
/// item 6); another port is kept in its canonical decimal form (`08080` → `8080`).
///
/// `None` (planned as a `400`) when the value is empty or longer than [`MAX_HOST_BYTES`],
/// when the name holds bytes no host name or IP literal has (so it is safe to echo into
/// robots.txt), when an IPv6 literal is not bracketed, or when the port is not 1–5
/// digits up to 65535 (`h.example:99999`). Never panics.
pub fn normalize_authority<'a>(host: &'a str, scheme: &str) -> Option<Cow<'a, str>> {
    if host.is_empty() || host.len() > MAX_HOST_BYTES {
        return None;
    }
    let (name, port) = if host.starts_with('[') {
        let close = host.find(']')?;
        let (name, rest) = host.split_at(close + 1);
        let inner = &name[1..name.len() - 1];
        if inner.is_empty()
            || !inner
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b":.".contains(&b))
        {
            return None;
        }
        match rest {
            "" => (name, None),
            _ => (name, Some(rest.strip_prefix(':')?)),
        }
    } else {
        match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    let port = match port {
        None | Some("") => None,
        Some(p) if p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            let n: u16 = p.parse().ok()?;
            (Some(n) != default_port(scheme)).then_some(n)
        }
        Some(_) => return None,
    };
    let name = if name.starts_with('[') {
        name
    } else {
        let name = name.strip_suffix('.').unwrap_or(name);
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
        {
            return None;
        }
        name
    };
    let lower = name.bytes().any(|b| b.is_ascii_uppercase());
    match port {
        None if !lower && name.len() == host.len() => Some(Cow::Borrowed(host)),
        None if !lower => Some(Cow::Borrowed(name)),
        None => Some(Cow::Owned(name.to_ascii_lowercase())),
        Some(p) => Some(Cow::Owned(format!("{}:{p}", name.to_ascii_lowercase()))),
    }
}

/// The slot a request with `Authorization` adds to its cache key ([`Plan::cache_key`]):
/// `"|auth:"` and the first 16 bytes of the SHA-256 of the value, in hex. A cryptographic
/// hash, so no one can craft credentials whose key is another's, and the key (which may
/// reach logs) never holds the credentials.
pub fn credentials_slot(authorization: &[u8]) -> String {
    use sha2::Digest as _;
    use std::fmt::Write as _;
    let digest = sha2::Sha256::digest(authorization);
    let mut out = String::with_capacity(6 + 32);
    out.push_str("|auth:");
    for b in &digest[..16] {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// One slice of a representation, `[first, last]` in bytes (inclusive; `last` may lie
/// past the representation's end, which the origin's `Content-Range` tells).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice {
    /// Its index: `first / slice_bytes`.
    pub index: u64,
    /// Its first byte's offset.
    pub first: u64,
    /// Its last byte's offset (inclusive): `first + slice_bytes - 1`.
    pub last: u64,
}

impl Slice {
    /// The `Range` value a fill of this slice sends (RFC 9110 §14.1.2).
    pub fn range_value(&self) -> String {
        format!("bytes={}-{}", self.first, self.last)
    }
}

/// A byte position of a `Range` value (RFC 9110 §14.1.2): ASCII digits, at most 19.
fn range_number(v: &[u8]) -> Option<u64> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// What a request answered by combining slices wants ([`Plan::stitch`]): bytes `first`
/// to `last` (inclusive; `None`: to the end) of the representation, in slices of
/// `slice_bytes`, and whether it asked for the whole representation (a `200`, not a
/// `206`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stitch {
    /// The route's `slice_bytes` (> 0).
    pub slice_bytes: u64,
    /// First byte wanted.
    pub first: u64,
    /// Last byte wanted (inclusive), `None` for the representation's end.
    pub last: Option<u64>,
    /// The whole representation was asked for (no `Range`, or several ranges, which
    /// Cachet answers whole).
    pub whole: bool,
}

/// The [`Stitch`] of a `GET` on a route with `slice_bytes` whose `Range` (`None`: none)
/// no one slice answers: the whole representation without `Range` or with several
/// ranges (Cachet answers those whole); bytes `a` to `b` or to the end for one closed
/// `bytes=a-b` across slices or an open-ended `bytes=a-` (RFC 9110 §14.1.2). `None` for
/// a range inside one slice ([`slice_of`]), a suffix range, another unit or bytes Cachet
/// cannot read (those use the whole object, as before).
pub fn stitch_of(range: Option<&[u8]>, slice_bytes: u64) -> Option<Stitch> {
    let whole = Stitch {
        slice_bytes,
        first: 0,
        last: None,
        whole: true,
    };
    if slice_bytes == 0 {
        return None;
    }
    let Some(range) = range else {
        return Some(whole);
    };
    if slice_of(range, slice_bytes).is_some() {
        return None;
    }
    let spec = range.trim_ascii();
    if !spec.get(..6)?.eq_ignore_ascii_case(b"bytes=") {
        return None;
    }
    let spec = spec[6..].trim_ascii();
    if spec.contains(&b',') {
        return Some(whole);
    }
    let dash = spec.iter().position(|&b| b == b'-')?;
    let first = range_number(&spec[..dash])?;
    let rest = spec[dash + 1..].trim_ascii();
    let last = if rest.is_empty() {
        None
    } else {
        Some(range_number(rest)?).filter(|&b| b >= first)
    };
    if !rest.is_empty() && last.is_none() {
        return None;
    }
    Some(Stitch {
        slice_bytes,
        first,
        last,
        whole: false,
    })
}

/// The slice of `slice_bytes` a `Range` value falls in: one closed range `bytes=a-b`
/// (`a <= b`, decimal, RFC 9110 §14.1.2) with both ends in the same slice. `None` for
/// anything else (several ranges, open-ended or suffix ranges, a range across slices,
/// another unit, bytes Cachet cannot read): such a request uses the whole object.
pub fn slice_of(range: &[u8], slice_bytes: u64) -> Option<Slice> {
    if slice_bytes == 0 {
        return None;
    }
    let spec = range.trim_ascii();
    let unit = spec.get(..6)?;
    if !unit.eq_ignore_ascii_case(b"bytes=") {
        return None;
    }
    let spec = spec[6..].trim_ascii();
    let dash = spec.iter().position(|&b| b == b'-')?;
    let (a, b) = (
        range_number(&spec[..dash])?,
        range_number(&spec[dash + 1..])?,
    );
    let index = a / slice_bytes;
    if b < a || b / slice_bytes != index {
        return None;
    }
    let first = index.checked_mul(slice_bytes)?;
    Some(Slice {
        index,
        first,
        last: first.checked_add(slice_bytes - 1)?,
    })
}

impl Plan<'_> {
    /// Sets [`Plan::cache_key`] for a cacheable plan of `req`: with the credentials' slot
    /// and [`Plan::authorized`] when it carries `Authorization`, and with [`Plan::slice`]
    /// and its slot when the route slices (`slice_bytes` > 0) and `req` is a `GET` whose
    /// `Range` lies in one slice, without `If-Range`.
    pub(crate) fn set_cache_key(&mut self, req: &RequestView<'_>, slice_bytes: u64) {
        use std::fmt::Write as _;
        let authorization = req.authorization;
        if req.method == "GET" && !req.has_if_range {
            self.slice = req.range.and_then(|v| slice_of(v, slice_bytes));
            self.stitch = stitch_of(req.range, slice_bytes);
            if self.slice.is_some() {
                // Byte offsets are the origin's: a slice is stored as the identity coding.
                self.compress = false;
            }
        }
        self.cache_key = cache_key(
            &self.host,
            &self.target,
            self.vary_device.then_some(self.device),
        );
        if let Some(credentials) = authorization {
            self.authorized = true;
            self.cache_key.push_str(&credentials_slot(credentials));
        }
        if let Some(s) = self.slice {
            // After every other slot: `|slice:` never ends an unsliced key.
            let _ = write!(self.cache_key, "|slice:{}", s.index);
        }
    }
}

/// Builds the cache key (see [`Plan::cache_key`]).
pub(crate) fn cache_key(host: &str, target: &str, device: Option<DeviceClass>) -> String {
    let dev = device.map_or("*", DeviceClass::as_str);
    let mut key = String::with_capacity(host.len() + target.len() + 1 + dev.len());
    key.push_str(host);
    key.push_str(target);
    key.push('|');
    key.push_str(dev);
    key
}

impl RouteAction {
    pub(crate) fn is_cache(self) -> bool {
        self == RouteAction::Cache
    }
}
