//! Access-log parsing for `cachet simulate`: combined/common (NCSA) and JSON lines, and times.
//!
//! Parsers work on raw bytes, never panic and never allocate for ordinary lines (strings
//! are borrowed from the line; only JSON strings with escapes are copied). A line that
//! cannot be read is an `Err` with a short reason; the caller counts it and moves on.

use std::borrow::Cow;
use std::fmt;

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::fmt::strtime;
use jiff::tz::TimeZone;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

/// Epoch values above this are taken as milliseconds (10^11 s is the year 5138).
const EPOCH_MILLIS_ABOVE: f64 = 1e11;

/// Directives a `Cache-Control` value may hold (RFC 9111 §5.2, RFC 5861, RFC 8246); an
/// extra quoted field of a combined line is read as the response's `Cache-Control` only
/// when every comma-separated item is one of these (so an `X-Forwarded-For` field is not).
const CACHE_CONTROL_DIRECTIVES: &[&str] = &[
    "public",
    "private",
    "no-store",
    "no-cache",
    "max-age",
    "s-maxage",
    "must-revalidate",
    "proxy-revalidate",
    "no-transform",
    "must-understand",
    "immutable",
    "stale-while-revalidate",
    "stale-if-error",
];

/// The two log formats, detected per file from the first non-empty line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// NCSA common / combined (Apache, nginx), optionally `vhost_combined`
    /// (`host:port` first) and with extra quoted fields after the User-Agent.
    Combined,
    /// One JSON object per line.
    Json,
}

impl Format {
    /// The format of a file whose first non-empty line is `line`: JSON lines when it starts
    /// (after whitespace and an optional UTF-8 BOM) with `{`, or is one of Cachet's own
    /// access-log lines as Viceroy prints them (`cachet_log :: {…}`,
    /// `crate::access_line::split_bytes`), combined otherwise.
    pub fn detect(line: &[u8]) -> Self {
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        if crate::access_line::split_bytes(line).is_some() {
            Self::Json
        } else {
            Self::Combined
        }
    }

    /// [`Self::detect`] for a line that may come before the log proper: `None` when `line`
    /// is neither JSON nor a combined line (a Viceroy message heading its output), so the
    /// next line decides.
    pub fn detect_line(line: &[u8]) -> Option<Self> {
        match Self::detect(line) {
            Self::Json => Some(Self::Json),
            Self::Combined => parse_combined(line).is_ok().then_some(Self::Combined),
        }
    }
}

/// One request read from a log line, borrowed from the line where possible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// When the request was logged, in seconds since the Unix epoch (UTC).
    pub time: i64,
    /// The method, `GET` when the log does not say.
    pub method: Cow<'a, str>,
    /// The `Host` the log names (vhost field, absolute request URL or JSON `host`).
    pub host: Option<Cow<'a, str>>,
    /// Path and raw query, as logged.
    pub target: Cow<'a, str>,
    /// The User-Agent bytes as logged (`None` when absent or `-`).
    pub user_agent: Option<Cow<'a, [u8]>>,
    /// The response status.
    pub status: u16,
    /// The response size in bytes (`-` counts as 0).
    pub bytes: u64,
    /// The response's `Cache-Control`, when the log carries it.
    pub cache_control: Option<Cow<'a, str>>,
    /// The client address as logged (combined: the token before `ident`; JSON: `client`
    /// and its aliases), `None` when absent or `-`. Only `--fleet --balance client` reads it.
    pub client: Option<Cow<'a, [u8]>>,
}

/// Parses one line in `format`.
///
/// # Errors
/// A short reason when the line is not a request record of that format.
pub fn parse_line(format: Format, line: &[u8]) -> Result<Record<'_>, &'static str> {
    match format {
        Format::Combined => parse_combined(line),
        Format::Json => parse_json(line),
    }
}

// ---------------------------------------------------------------------------------------
// Combined / common

/// Parses an NCSA common or combined line:
/// `client ident user [time] "request" status bytes ["referer" "user-agent" [extra…]]`,
/// or with a `vhost[:port]` token first (Apache `vhost_combined`).
///
/// # Errors
/// A short reason naming the field that could not be read.
pub fn parse_combined(line: &[u8]) -> Result<Record<'_>, &'static str> {
    let open = line
        .iter()
        .position(|&b| b == b'[')
        .ok_or("no [time] field")?;
    let mut tokens = line[..open]
        .split(|&b| b == b' ' || b == b'\t')
        .filter(|t| !t.is_empty());
    let first = tokens.next();
    let count = 1 + tokens.clone().count();
    if first.is_none() || count < 3 {
        return Err("expected `client ident user` before [time]");
    }
    let (vhost, client) = if count == 4 {
        (first.and_then(vhost_name), tokens.next())
    } else {
        (None, first)
    };
    let client = client.filter(|c| *c != b"-").map(Cow::Borrowed);
    let close = line[open..]
        .iter()
        .position(|&b| b == b']')
        .map(|c| open + c)
        .ok_or("unterminated [time]")?;
    let time = parse_clf_time(&line[open + 1..close])
        .ok_or("invalid [time]: expected e.g. [10/Oct/2000:13:55:36 -0700]")?;
    let rest = line[close + 1..].trim_ascii_start();
    let (request, rest) = quoted(rest).ok_or("expected the quoted request line after [time]")?;
    let (method, target, url_host) = parse_request_line(request)?;
    let (status, rest) = token(rest);
    let status = parse_status(status).ok_or("invalid status")?;
    let (bytes, mut rest) = token(rest);
    let bytes = match bytes {
        b"-" => 0,
        b => parse_u64(b).ok_or("invalid byte count")?,
    };
    let mut user_agent = None;
    let mut cache_control = None;
    let mut field = 0;
    loop {
        rest = rest.trim_ascii_start();
        if rest.is_empty() {
            break;
        }
        let value = if let Some((v, r)) = quoted(rest) {
            rest = r;
            v
        } else if rest.starts_with(b"\"") {
            return Err("unterminated quoted field");
        } else {
            let (v, r) = token(rest);
            rest = r;
            v
        };
        match field {
            0 => {} // Referer: not used.
            1 => {
                if value != b"-" && !value.is_empty() {
                    user_agent = Some(Cow::Borrowed(value));
                }
            }
            _ => {
                if cache_control.is_none()
                    && let Ok(v) = std::str::from_utf8(value)
                    && is_cache_control(v)
                {
                    cache_control = Some(Cow::Borrowed(v));
                }
            }
        }
        field += 1;
    }
    Ok(Record {
        time,
        method: Cow::Borrowed(method),
        client,
        host: url_host.or(vhost).map(Cow::Borrowed),
        target: Cow::Borrowed(target),
        user_agent,
        status,
        bytes,
        cache_control,
    })
}

/// The host of a `vhost[:port]` token (`-` and empty mean none).
fn vhost_name(token: &[u8]) -> Option<&str> {
    let t = std::str::from_utf8(token).ok()?;
    let host = match t.rsplit_once(':') {
        Some((h, port))
            if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) && !h.is_empty() =>
        {
            h
        }
        _ => t,
    };
    (host != "-" && !host.is_empty()).then_some(host)
}

/// Splits `"…"` off the front of `s`: the content (escapes kept as logged) and the rest.
fn quoted(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let body = s.strip_prefix(b"\"")?;
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'\\' => i += 2,
            b'"' => return Some((&body[..i], &body[i + 1..])),
            _ => i += 1,
        }
    }
    None
}

/// Splits one space-delimited token off the front of `s` (after leading spaces).
fn token(s: &[u8]) -> (&[u8], &[u8]) {
    let s = s.trim_ascii_start();
    let end = s
        .iter()
        .position(|&b| b == b' ' || b == b'\t')
        .unwrap_or(s.len());
    (&s[..end], &s[end..])
}

/// `METHOD target [HTTP/x]` → (method, path-and-query, host from an absolute URL).
fn parse_request_line(request: &[u8]) -> Result<(&str, &str, Option<&str>), &'static str> {
    if request == b"-" || request.is_empty() {
        return Err("no request line (\"-\")");
    }
    let request = std::str::from_utf8(request).map_err(|_| "request line is not UTF-8")?;
    let mut parts = request.split(' ').filter(|p| !p.is_empty());
    let method = parts.next().ok_or("empty request line")?;
    if !method
        .bytes()
        .all(|b| b.is_ascii_uppercase() || b == b'-' || b == b'_')
    {
        return Err("request line does not start with a method");
    }
    let target = parts.next().ok_or("request line has no target")?;
    match parts.next() {
        None => {}
        Some(p) if p.starts_with("HTTP/") && parts.next().is_none() => {}
        Some(_) => return Err("request target contains a space"),
    }
    let (target, host) = split_absolute(target);
    if target.bytes().any(|b| b.is_ascii_control()) {
        return Err("request target contains control characters");
    }
    Ok((method, target, host))
}

/// An absolute `http(s)://host[:port]/path?q` target → (`/path?q`, host); others as given.
fn split_absolute(target: &str) -> (&str, Option<&str>) {
    let rest = if target.len() > 8 && target[..8].eq_ignore_ascii_case("https://") {
        &target[8..]
    } else if target.len() > 7 && target[..7].eq_ignore_ascii_case("http://") {
        &target[7..]
    } else {
        return (target, None);
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = vhost_name(authority.as_bytes());
    let path = &rest[end..];
    // An empty path is "/" (RFC 9112 §3.2.1). `http://h?q` keeps "?q", which the policy
    // refuses as a target not starting with '/', as the edge would.
    (if path.is_empty() { "/" } else { path }, host)
}

/// A three-digit status, 100–599.
fn parse_status(b: &[u8]) -> Option<u16> {
    if b.len() != 3 {
        return None;
    }
    let n = u16::try_from(parse_u64(b)?).ok()?;
    (100..=599).contains(&n).then_some(n)
}

/// Unsigned decimal, at most 19 digits (no sign, no spaces).
fn parse_u64(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 19 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

/// Whether `v` reads as a `Cache-Control` value (every item a known directive).
pub fn is_cache_control(v: &str) -> bool {
    let v = v.trim();
    !v.is_empty()
        && v.split(',').all(|item| {
            let name = item.split('=').next().unwrap_or("").trim();
            CACHE_CONTROL_DIRECTIVES
                .iter()
                .any(|d| d.eq_ignore_ascii_case(name))
        })
}

// ---------------------------------------------------------------------------------------
// JSON lines

/// A JSON string borrowed from the line when it has no escapes.
struct Str<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A JSON number or string (logs write status, sizes and times either way).
enum Scalar<'a> {
    Int(i64),
    Float(f64),
    Str(Cow<'a, str>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Scalar<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number or a string")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar<'de>, E> {
                #[allow(
                    clippy::cast_precision_loss,
                    reason = "only values past i64::MAX, which no log field holds exactly"
                )]
                Ok(i64::try_from(v).map_or(Scalar::Float(v as f64), Scalar::Int))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Float(v))
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Str(Cow::Owned(v)))
            }
        }
        d.deserialize_any(V)
    }
}

impl Scalar<'_> {
    /// A whole number ≥ 0 (numbers, or strings of digits; `-` is 0).
    fn as_u64(&self) -> Option<u64> {
        match self {
            Self::Int(n) => u64::try_from(*n).ok(),
            Self::Float(f) if f.is_finite() && *f >= 0.0 && f.fract() == 0.0 =>
            {
                #[allow(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    reason = "checked finite, whole and non-negative; saturating cast"
                )]
                Some(*f as u64)
            }
            Self::Float(_) => None,
            Self::Str(s) if s.trim() == "-" => Some(0),
            Self::Str(s) => parse_u64(s.trim().as_bytes()),
        }
    }

    /// Seconds since the epoch: a number (milliseconds above 10^11), digits, RFC 3339 or
    /// the CLF form `10/Oct/2000:13:55:36 -0700`.
    fn as_time(&self) -> Option<i64> {
        match self {
            #[allow(
                clippy::cast_precision_loss,
                reason = "epoch seconds and milliseconds are far below 2^52"
            )]
            Self::Int(n) => epoch_number(*n as f64),
            Self::Float(f) if f.is_finite() => epoch_number(*f),
            Self::Float(_) => None,
            Self::Str(s) => parse_time_str(s),
        }
    }
}

/// Whole seconds from an epoch number (seconds, or milliseconds above 10^11); `None`
/// outside the years -9999 to 9999 (jiff's [`Timestamp`] range: no log is dated there).
#[allow(
    clippy::cast_possible_truncation,
    reason = "f64 → i64 saturates; out of range is rejected below"
)]
fn epoch_number(n: f64) -> Option<i64> {
    let secs = if n.abs() > EPOCH_MILLIS_ABOVE {
        (n / 1000.0).floor() as i64
    } else {
        n.floor() as i64
    };
    Timestamp::from_second(secs).ok().map(|_| secs)
}

/// The fields read from a JSON line; unknown fields are ignored.
#[derive(Deserialize)]
struct JsonRecord<'a> {
    #[serde(borrow, default, alias = "uri", alias = "request_uri", alias = "path")]
    url: Option<Str<'a>>,
    #[serde(borrow, default)]
    request: Option<Str<'a>>,
    #[serde(
        borrow,
        default,
        alias = "vhost",
        alias = "server_name",
        alias = "authority",
        alias = "http_host"
    )]
    host: Option<Str<'a>>,
    #[serde(
        borrow,
        default,
        rename = "user-agent",
        alias = "user_agent",
        alias = "ua",
        alias = "http_user_agent",
        alias = "userAgent"
    )]
    user_agent: Option<Str<'a>>,
    #[serde(borrow, default, alias = "status_code")]
    status: Option<Scalar<'a>>,
    #[serde(
        borrow,
        default,
        alias = "size",
        alias = "body_bytes",
        alias = "body_bytes_sent",
        alias = "bytes_sent"
    )]
    bytes: Option<Scalar<'a>>,
    #[serde(
        borrow,
        default,
        alias = "timestamp",
        alias = "ts",
        alias = "@timestamp",
        alias = "time_local",
        alias = "time_iso8601"
    )]
    time: Option<Scalar<'a>>,
    #[serde(borrow, default, alias = "request_method")]
    method: Option<Str<'a>>,
    #[serde(
        borrow,
        default,
        alias = "cache-control",
        alias = "sent_http_cache_control"
    )]
    cache_control: Option<Str<'a>>,
    #[serde(
        borrow,
        default,
        alias = "remote_addr",
        alias = "client_ip",
        alias = "ip"
    )]
    client: Option<Str<'a>>,
    /// Cachet's own lines: `admin` marks an admin-API call.
    #[serde(borrow, default)]
    route: Option<Str<'a>>,
    /// Cachet's own non-request lines (`{"event":"config-rejected",…}`).
    #[serde(borrow, default)]
    event: Option<Str<'a>>,
}

/// The reason [`parse_json`] gives for one of Cachet's own lines that is not traffic: an
/// admin-API call (`"route":"admin"`) or an event (`"event":…`). `cachet simulate` counts
/// these apart from bad lines.
pub const NOT_TRAFFIC: &str = "a Cachet admin call or event, not traffic";

/// Parses one JSON-lines record (fields and aliases: see `docs/simulate.md`).
///
/// # Errors
/// A short reason: not a JSON object, or a required field (`url` or `request`, `time`,
/// `status`) missing or of the wrong shape.
pub fn parse_json(line: &[u8]) -> Result<Record<'_>, &'static str> {
    // Cachet's own lines may carry Viceroy's `cachet_log :: ` prefix.
    let line = crate::access_line::split_bytes(line).unwrap_or(line);
    let r: JsonRecord<'_> =
        serde_json::from_slice(line).map_err(|_| "not a JSON object of the expected fields")?;
    if r.event.is_some() || r.route.as_ref().is_some_and(|x| x.0 == "admin") {
        return Err(NOT_TRAFFIC);
    }
    let time = r
        .time
        .ok_or("missing \"time\"")?
        .as_time()
        .ok_or("invalid \"time\": expected RFC 3339, epoch seconds or [dd/Mon/yyyy:…]")?;
    let status = r.status.ok_or("missing \"status\"")?;
    let status = status
        .as_u64()
        .and_then(|s| u16::try_from(s).ok())
        .filter(|s| (100..=599).contains(s))
        .ok_or("invalid \"status\"")?;
    let bytes = match r.bytes {
        None => 0,
        Some(b) => b.as_u64().ok_or("invalid \"bytes\"")?,
    };
    let mut method = r.method.map(|m| m.0);
    let (target, url_host) = match (r.url, r.request) {
        (Some(u), _) => split_absolute_cow(u.0),
        (None, Some(req)) => {
            let (m, t, h) = parse_request_line(req.0.as_bytes())?;
            method.get_or_insert_with(|| Cow::Owned(m.to_owned()));
            (
                Cow::Owned(t.to_owned()),
                h.map(|h| Cow::Owned(h.to_owned())),
            )
        }
        (None, None) => return Err("missing \"url\""),
    };
    if target.is_empty() || target.bytes().any(|b| b.is_ascii_control()) {
        return Err("invalid \"url\"");
    }
    Ok(Record {
        time,
        method: method.unwrap_or(Cow::Borrowed("GET")),
        host: r
            .host
            .map(|h| h.0)
            .filter(|h| !h.is_empty() && h != "-")
            .or(url_host),
        target,
        user_agent: r
            .user_agent
            .map(|u| u.0)
            .filter(|u| !u.is_empty() && u != "-")
            .map(|u| match u {
                Cow::Borrowed(s) => Cow::Borrowed(s.as_bytes()),
                Cow::Owned(s) => Cow::Owned(s.into_bytes()),
            }),
        status,
        bytes,
        cache_control: r
            .cache_control
            .map(|c| c.0)
            .filter(|c| !c.trim().is_empty()),
        client: r
            .client
            .map(|c| c.0)
            .filter(|c| !c.is_empty() && c != "-")
            .map(|c| match c {
                Cow::Borrowed(s) => Cow::Borrowed(s.as_bytes()),
                Cow::Owned(s) => Cow::Owned(s.into_bytes()),
            }),
    })
}

/// [`split_absolute`] on a possibly owned string.
fn split_absolute_cow(url: Cow<'_, str>) -> (Cow<'_, str>, Option<Cow<'_, str>>) {
    match url {
        Cow::Borrowed(s) => {
            let (t, h) = split_absolute(s);
            (Cow::Borrowed(t), h.map(Cow::Borrowed))
        }
        Cow::Owned(s) => {
            let (t, h) = split_absolute(&s);
            (
                Cow::Owned(t.to_owned()),
                h.map(|h| Cow::Owned(h.to_owned())),
            )
        }
    }
}

// ---------------------------------------------------------------------------------------
// Times

/// The NCSA (common/combined log) time layout, `10/Oct/2000:13:55:36 -0700`, as
/// `strftime`/`strptime` directives (Apache's `LogFormat` `%t`, without its brackets).
const CLF_LAYOUT: &str = "%d/%b/%Y:%H:%M:%S %z";

/// `secs` since the epoch as a [`Timestamp`], clamped to the range jiff represents
/// (years -9999 to 9999): a log's absurd epoch number never panics a formatter.
fn timestamp(secs: i64) -> Timestamp {
    let secs = secs.clamp(Timestamp::MIN.as_second(), Timestamp::MAX.as_second());
    Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// Whole seconds since the epoch of `ts`, rounded down (a fraction before 1970 counts
/// as the second it falls in, as for times after).
fn floor_second(ts: Timestamp) -> i64 {
    ts.as_second() - i64::from(ts.subsec_nanosecond() < 0)
}

/// `secs` since the epoch as `2000-10-10T20:55:36Z` (RFC 3339, UTC, whole seconds).
pub fn format_rfc3339(secs: i64) -> String {
    // A whole-second timestamp displays without a fraction.
    timestamp(secs).to_string()
}

/// `secs` since the epoch as the NCSA time `10/Oct/2000:20:55:36 +0000` (UTC, without
/// the brackets of a log line).
pub fn format_clf(secs: i64) -> String {
    let utc = timestamp(secs).to_zoned(TimeZone::UTC);
    strtime::format(CLF_LAYOUT, &utc).unwrap_or_else(|_| {
        // Unreachable for a zoned time (every directive has its field); still no panic.
        format_rfc3339(secs)
    })
}

/// `10/Oct/2000:13:55:36 -0700` → seconds since the epoch (UTC); `None` when it is not
/// that layout or names no real date (`31/Feb/…`) or time. A leap second (`:60`) reads
/// as `:59` (jiff's rule for parsed leap seconds).
///
/// ```
/// use cachet_sim::logfmt::{format_clf, parse_clf_time};
///
/// assert_eq!(parse_clf_time(b"10/Oct/2000:13:55:36 -0700"), Some(971_211_336));
/// assert_eq!(format_clf(971_211_336), "10/Oct/2000:20:55:36 +0000");
/// assert_eq!(parse_clf_time(b"31/Apr/2025:00:00:00 +0000"), None);
/// ```
pub fn parse_clf_time(b: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(b).ok()?;
    let parsed = strtime::parse(CLF_LAYOUT, s).ok()?;
    // The layout requires every field and the offset: a full instant.
    parsed.to_timestamp().ok().map(floor_second)
}

/// `2000-10-10T13:55:36[.123][Z|±hh:mm|±hhmm|±hh]` (`T`, `t` or a space between date
/// and time) → seconds since the epoch; no offset is UTC. `None` when it is not RFC 3339
/// (or its ISO 8601 cousins jiff reads) or names no real date or time. A leap second
/// (`:60`) reads as `:59`.
///
/// ```
/// use cachet_sim::logfmt::parse_rfc3339;
///
/// assert_eq!(parse_rfc3339("2000-10-10T13:55:36-07:00"), Some(971_211_336));
/// assert_eq!(parse_rfc3339("2000-10-10 20:55:36"), Some(971_211_336)); // no offset: UTC
/// assert_eq!(parse_rfc3339("2001-02-29T00:00:00Z"), None); // no such day
/// ```
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    // Date and time with seconds (jiff would also read `2000-10-10` or `…T13:55`).
    let b = s.as_bytes();
    if b.len() < 19 || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let has_offset = s[19..].contains(['Z', 'z', '+', '-']);
    if has_offset {
        s.parse::<Timestamp>().ok().map(floor_second)
    } else {
        let civil: DateTime = s.parse().ok()?;
        let ts = civil.to_zoned(TimeZone::UTC).ok()?.timestamp();
        Some(floor_second(ts))
    }
}

/// A time string from a JSON log: epoch digits (optionally with a fraction), RFC 3339, or
/// the CLF form (with or without brackets).
pub fn parse_time_str(s: &str) -> Option<i64> {
    let s = s.trim();
    if !s.is_empty()
        && s.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && s.bytes().filter(|&b| b == b'.').count() <= 1
    {
        return s.parse::<f64>().ok().and_then(epoch_number);
    }
    if let Some(t) = parse_rfc3339(s) {
        return Some(t);
    }
    let inner = s
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(s);
    parse_clf_time(inner.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMBINED: &str = r#"127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326 "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)""#;

    #[test]
    fn client_address() {
        let r = parse_combined(COMBINED.as_bytes()).unwrap();
        assert_eq!(r.client.as_deref(), Some(&b"127.0.0.1"[..]));
        let vhost = format!("blog.example:443 {COMBINED}");
        let r = parse_combined(vhost.as_bytes()).unwrap();
        assert_eq!(r.client.as_deref(), Some(&b"127.0.0.1"[..]));
        assert_eq!(r.host.as_deref(), Some("blog.example"));
        let dash = COMBINED.replacen("127.0.0.1", "-", 1);
        assert_eq!(parse_combined(dash.as_bytes()).unwrap().client, None);
        for field in ["client", "remote_addr", "client_ip", "ip"] {
            let line = format!(
                r#"{{"time": 1740787200, "url": "/", "status": 200, "{field}": "203.0.113.9"}}"#
            );
            let r = parse_json(line.as_bytes()).unwrap();
            assert_eq!(r.client.as_deref(), Some(&b"203.0.113.9"[..]), "{field}");
        }
        let line = r#"{"time": 1740787200, "url": "/", "status": 200}"#;
        assert_eq!(parse_json(line.as_bytes()).unwrap().client, None);
    }

    #[test]
    fn combined_line() {
        let r = parse_combined(COMBINED.as_bytes()).unwrap();
        assert_eq!(r.time, 971_211_336);
        assert_eq!(r.method, "GET");
        assert_eq!(r.host, None);
        assert_eq!(r.target, "/apache_pb.gif");
        assert_eq!(
            r.user_agent.as_deref(),
            Some(&b"Mozilla/4.08 [en] (Win98; I ;Nav)"[..])
        );
        assert_eq!((r.status, r.bytes), (200, 2326));
        assert_eq!(r.cache_control, None);
    }

    #[test]
    fn common_line_without_referer_and_ua() {
        let line = br#"127.0.0.1 - - [10/Oct/2000:13:55:36 +0000] "GET /a?b=1 HTTP/1.1" 304 -"#;
        let r = parse_combined(line).unwrap();
        assert_eq!(r.time, 971_186_136);
        assert_eq!(r.target, "/a?b=1");
        assert_eq!((r.status, r.bytes), (304, 0));
        assert_eq!(r.user_agent, None);
    }

    #[test]
    fn vhost_combined_with_extra_fields() {
        let line = br#"blog.example:443 203.0.113.9 - - [01/Mar/2025:00:00:01 +0000] "HEAD /blog/alice/ HTTP/2.0" 200 512 "-" "UA \"quoted\" x" "198.51.100.1" "private, no-store""#;
        let r = parse_combined(line).unwrap();
        assert_eq!(r.host.as_deref(), Some("blog.example"));
        assert_eq!(r.method, "HEAD");
        assert_eq!(r.user_agent.as_deref(), Some(&br#"UA \"quoted\" x"#[..]));
        // X-Forwarded-For is not a Cache-Control; the next field is.
        assert_eq!(r.cache_control.as_deref(), Some("private, no-store"));
    }

    #[test]
    fn absolute_target_names_the_host() {
        let line = br#"1.2.3.4 - - [01/Mar/2025:00:00:01 +0000] "GET https://Cdn.Example:8443/css/a.css?v=1 HTTP/1.1" 200 10"#;
        let r = parse_combined(line).unwrap();
        assert_eq!(r.host.as_deref(), Some("Cdn.Example"));
        assert_eq!(r.target, "/css/a.css?v=1");
        let line = br#"1.2.3.4 - - [01/Mar/2025:00:00:01 +0000] "GET http://h HTTP/1.1" 200 10"#;
        assert_eq!(parse_combined(line).unwrap().target, "/");
    }

    #[test]
    fn combined_rejects_with_reasons() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "no [time] field"),
            (b"garbage", "no [time] field"),
            (
                b"1.2.3.4 [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1",
                "expected `client ident user` before [time]",
            ),
            (b"a - - [10/Oct/2000:13:55:36 -0700", "unterminated [time]"),
            (
                b"a - - [10/Foo/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1",
                "invalid [time]: expected e.g. [10/Oct/2000:13:55:36 -0700]",
            ),
            (
                b"a - - [10/Oct/2000:13:55:36 -0700] \"-\" 400 0",
                "no request line (\"-\")",
            ),
            (
                b"a - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 2000 1",
                "invalid status",
            ),
            (
                b"a - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 x",
                "invalid byte count",
            ),
            (
                b"a - - [10/Oct/2000:13:55:36 -0700] \"GET /a b HTTP/1.1\" 200 1",
                "request target contains a space",
            ),
            (
                b"a - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1 \"ref",
                "unterminated quoted field",
            ),
            (
                b"a - - [10/Oct/2000:13:55:36 -0700] \"\x16\x03\x01\" 400 0",
                "request line does not start with a method",
            ),
        ];
        for (line, why) in cases {
            assert_eq!(
                parse_combined(line).err(),
                Some(*why),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn json_lines() {
        let line = br#"{"time":"2025-03-01T09:00:00+09:00","host":"blog.example","url":"/blog/a/entry/1?utm_source=x","user-agent":"Mozilla\/5.0 (iPhone)","status":200,"bytes":"5120","cache_control":"public, max-age=300","extra":[1,2]}"#;
        let r = parse_json(line).unwrap();
        assert_eq!(r.time, parse_rfc3339("2025-03-01T00:00:00Z").unwrap());
        assert_eq!(r.host.as_deref(), Some("blog.example"));
        assert_eq!(r.target, "/blog/a/entry/1?utm_source=x");
        assert_eq!(r.user_agent.as_deref(), Some(&b"Mozilla/5.0 (iPhone)"[..]));
        assert_eq!((r.status, r.bytes), (200, 5120));
        assert_eq!(r.method, "GET");
        assert_eq!(r.cache_control.as_deref(), Some("public, max-age=300"));
        // Aliases, epoch numbers (seconds and milliseconds), request lines, absolute URLs.
        let r = parse_json(
            br#"{"timestamp":1740787200.5,"request":"POST /api/echo HTTP/1.1","status":"201"}"#,
        )
        .unwrap();
        assert_eq!(
            (r.time, r.method.as_ref(), r.target.as_ref(), r.status),
            (1_740_787_200, "POST", "/api/echo", 201)
        );
        let r = parse_json(br#"{"ts":1740787200123,"url":"https://cdn.example/css/a.css","status":200,"user_agent":"-"}"#).unwrap();
        assert_eq!(
            (r.time, r.host.as_deref(), r.target.as_ref(), r.user_agent),
            (1_740_787_200, Some("cdn.example"), "/css/a.css", None)
        );
        let r = parse_json(br#"{"time":"[10/Oct/2000:13:55:36 -0700]","url":"/","status":200}"#)
            .unwrap();
        assert_eq!(r.time, 971_211_336);
    }

    #[test]
    fn json_rejects_with_reasons() {
        let cases: &[(&[u8], &str)] = &[
            (b"{", "not a JSON object of the expected fields"),
            (b"[1]", "not a JSON object of the expected fields"),
            (br#"{"url":"/","status":200}"#, "missing \"time\""),
            (
                br#"{"url":"/","time":"yesterday","status":200}"#,
                "invalid \"time\": expected RFC 3339, epoch seconds or [dd/Mon/yyyy:…]",
            ),
            (br#"{"url":"/","time":1}"#, "missing \"status\""),
            (br#"{"url":"/","time":1,"status":42}"#, "invalid \"status\""),
            (
                br#"{"url":"/","time":1,"status":200,"bytes":-1}"#,
                "invalid \"bytes\"",
            ),
            (br#"{"time":1,"status":200}"#, "missing \"url\""),
            (br#"{"url":"","time":1,"status":200}"#, "invalid \"url\""),
            (
                br#"{"url":5,"time":1,"status":200}"#,
                "not a JSON object of the expected fields",
            ),
        ];
        for (line, why) in cases {
            assert_eq!(
                parse_json(line).err(),
                Some(*why),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn cachets_own_lines_read_as_written_by_the_edge() {
        use cachet_http::access::Access;
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_740_819_600_500);
        let ua = [("user-agent".to_owned(), b"Mozilla/5.0 (iPhone)".to_vec())];
        let mut w = Access::arrived("GET", at, &ua);
        (w.host, w.url, w.route, w.status) =
            ("blog.example".into(), "/a?b=1".into(), "blog".into(), 200);
        w.body_bytes = Some(512);
        let line = format!("cachet_log :: {}", serde_json::to_string(&w).unwrap());
        assert_eq!(Format::detect(line.as_bytes()), Format::Json);
        let r = parse_json(line.as_bytes()).unwrap();
        assert_eq!(
            (
                r.time,
                r.method.as_ref(),
                r.host.as_deref(),
                r.target.as_ref()
            ),
            (1_740_819_600, "GET", Some("blog.example"), "/a?b=1")
        );
        assert_eq!((r.status, r.bytes), (200, 512));
        assert_eq!(r.user_agent.as_deref(), Some(&b"Mozilla/5.0 (iPhone)"[..]));
        // Admin calls and events are not traffic; a Viceroy message is not a log line.
        w.route = "admin".into();
        let admin = serde_json::to_string(&w).unwrap();
        assert_eq!(parse_json(admin.as_bytes()).err(), Some(NOT_TRAFFIC));
        let event = br#"cachet_log :: {"event":"config-rejected","ok":false}"#;
        assert_eq!(parse_json(event).err(), Some(NOT_TRAFFIC));
        let viceroy = b"2026-01-01T00:00:00.000Z  INFO Listening on http://127.0.0.1:7676";
        assert_eq!(Format::detect_line(viceroy), None);
        assert_eq!(Format::detect_line(line.as_bytes()), Some(Format::Json));
        assert_eq!(
            Format::detect_line(COMBINED.as_bytes()),
            Some(Format::Combined)
        );
    }

    #[test]
    fn detection() {
        assert_eq!(Format::detect(b"  {\"url\":1}"), Format::Json);
        assert_eq!(Format::detect(b"\xEF\xBB\xBF{"), Format::Json);
        assert_eq!(Format::detect(COMBINED.as_bytes()), Format::Combined);
    }

    #[test]
    fn times() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        // 2000-02-29T12:00:00Z is 951,825,600; local time 1h30 behind UTC is later in UTC.
        assert_eq!(
            parse_rfc3339("2000-02-29 12:00:00.25-01:30"),
            Some(951_831_000)
        );
        assert_eq!(parse_rfc3339("2001-02-29T00:00:00Z"), None);
        assert_eq!(
            parse_rfc3339("2000-01-01T00:00:00+0900"),
            Some(946_684_800 - 9 * 3600)
        );
        assert_eq!(parse_time_str("946684800"), Some(946_684_800));
        assert_eq!(format_rfc3339(971_211_336), "2000-10-10T20:55:36Z");
        assert_eq!(format_rfc3339(-1), "1969-12-31T23:59:59Z");
        for secs in [0, 951_782_400, 4_102_444_800, -86_400 * 800] {
            assert_eq!(parse_rfc3339(&format_rfc3339(secs)), Some(secs));
        }
    }

    #[test]
    fn calendar_edge_cases() {
        // Leap days: every 4 years, not every 100, every 400.
        assert_eq!(parse_rfc3339("2000-02-29T00:00:00Z"), Some(951_782_400));
        assert_eq!(parse_rfc3339("2024-02-29T23:59:59Z"), Some(1_709_251_199));
        assert_eq!(parse_rfc3339("1900-02-29T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("2100-02-29T00:00:00Z"), None);
        assert_eq!(
            parse_clf_time(b"29/Feb/2024:12:00:00 +0000"),
            Some(1_709_208_000)
        );
        assert_eq!(parse_clf_time(b"29/Feb/2023:12:00:00 +0000"), None);
        // Invalid dates and times are rejected, never wrapped into the next month.
        for bad in [
            "2025-04-31T00:00:00Z",
            "2025-13-01T00:00:00Z",
            "2025-00-10T00:00:00Z",
            "2025-01-00T00:00:00Z",
            "2025-01-01T24:00:00Z",
            "2025-01-01T23:60:00Z",
            "2025-01-01T00:00:00+99:00",
            "2025-01-01T00:00:00Q",
            "2025-01-01",
            "2025-01-01T10:00",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        assert_eq!(parse_clf_time(b"31/Apr/2025:00:00:00 +0000"), None);
        assert_eq!(parse_clf_time(b"10/Foo/2000:13:55:36 -0700"), None);
        assert_eq!(parse_clf_time(b"10/Oct/2000:13:55:36"), None);
        // Offsets: the same instant written east and west of UTC, across a date line.
        let utc = parse_rfc3339("2025-03-01T00:30:00Z");
        assert_eq!(parse_rfc3339("2025-03-01T09:30:00+09:00"), utc);
        assert_eq!(parse_rfc3339("2025-02-28T19:30:00-05"), utc);
        assert_eq!(parse_clf_time(b"28/Feb/2025:19:30:00 -0500"), utc);
        assert_eq!(parse_clf_time(b"01/Mar/2025:05:15:00 +0445"), utc);
        // A leap second reads as :59 (jiff's rule); a fraction before 1970 rounds down.
        assert_eq!(
            parse_rfc3339("2016-12-31T23:59:60Z"),
            parse_rfc3339("2016-12-31T23:59:59Z")
        );
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59.5Z"), Some(-1));
        // Formatting: UTC, whole seconds, the NCSA month names.
        assert_eq!(format_clf(951_782_400), "29/Feb/2000:00:00:00 +0000");
        assert_eq!(format_clf(-1), "31/Dec/1969:23:59:59 +0000");
        assert_eq!(format_rfc3339(1_709_251_199), "2024-02-29T23:59:59Z");
        // Epoch numbers beyond the years -9999..=9999 are not times; formatting clamps.
        assert_eq!(parse_time_str("99999999999999999"), None);
        assert_eq!(parse_time_str("1740787200000"), Some(1_740_787_200));
        assert!(format_rfc3339(i64::MAX).starts_with("9999-12-"));
        assert!(!format_clf(i64::MIN).is_empty());
    }

    #[test]
    fn cache_control_detection() {
        assert!(is_cache_control("public, max-age=300"));
        assert!(is_cache_control("Private"));
        assert!(!is_cache_control("198.51.100.1, 10.0.0.1"));
        assert!(!is_cache_control("-"));
        assert!(!is_cache_control(""));
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn parsers_never_panic(line in proptest::collection::vec(any::<u8>(), 0..300)) {
                let _ = parse_combined(&line);
                let _ = parse_json(&line);
                let _ = Format::detect(&line);
            }

            #[test]
            fn near_valid_combined_never_panics(
                prefix in "[ -~]{0,40}",
                time in "[0-9A-Za-z/: +-]{0,30}",
                request in "[ -~]{0,60}",
                tail in "[ -~]{0,80}",
            ) {
                let line = format!("{prefix} - - [{time}] \"{request}\" {tail}");
                let _ = parse_combined(line.as_bytes());
            }

            #[test]
            fn near_valid_json_never_panics(
                time in "[0-9TZ:.+ -]{0,30}",
                url in "[ -~]{0,40}",
                status in any::<i64>(),
                bytes in any::<f64>(),
            ) {
                let line = serde_json::json!({"time": time, "url": url, "status": status, "bytes": bytes}).to_string();
                let _ = parse_json(line.as_bytes());
            }

            #[test]
            fn rfc3339_round_trips(secs in -62_135_596_800i64..253_402_300_799) {
                prop_assert_eq!(parse_rfc3339(&format_rfc3339(secs)), Some(secs));
            }

            #[test]
            fn clf_round_trips(secs in -62_135_596_800i64..253_402_300_799) {
                prop_assert_eq!(parse_clf_time(format_clf(secs).as_bytes()), Some(secs));
            }

            #[test]
            fn time_strings_never_panic(s in "[0-9A-Za-z/:.+ \\[\\]-]{0,40}") {
                let _ = parse_time_str(&s);
            }
        }
    }
}
