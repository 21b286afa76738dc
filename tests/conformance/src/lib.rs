//! Platform-agnostic conformance: the shared case list (`cases.toml`) and a runner over HTTP.
//!
//! A [`Target`] is any running Cachet (Fastly edge app in Viceroy, Envoy with the filter)
//! at a base URL, in front of a demo origin whose `/__origin/stats` endpoint counts what
//! reached it. [`run`] executes every case (requests with a `Host` header, expected status,
//! `X-Cache`, headers present/absent/equal, bodies, and origin request deltas per path) and
//! returns one [`Failure`] per broken expectation, never panicking.
//!
//! ```no_run
//! let suite = cachet_conformance::Suite::builtin().expect("cases.toml parses");
//! let target = cachet_conformance::Target::new("http://127.0.0.1:10000", "http://127.0.0.1:8080");
//! let report = cachet_conformance::run(&suite, &target);
//! assert!(report.failures.is_empty(), "{report}");
//! ```

/// `[origin].fill_fields` for a platform running the suite: the default allowlist plus
/// `X-Test-Status`, the demo origin's test-control field that a few cases send to make
/// one URL's fill fail (it must reach the origin on a fill to do so).
pub const SUITE_FILL_FIELDS: &[&str] = &[
    "accept",
    "accept-language",
    "origin",
    "user-agent",
    "x-test-fault",
    "x-test-status",
];

/// Routes the suite puts before a platform's own (TOML, the `[[routes]]` schema): the
/// refresh-ahead and grace cases need routes the shipped configuration does not have.
/// Both harnesses insert them first ([`suite_config_toml`], [`suite_routes_json`]).
pub const SUITE_ROUTES: &str = r#"
[[routes]]
name = "suite-threshold"
path_prefix = "/t/ahead-threshold/"
ttl = "0s"
keep = "1h"
vary_device = false
early_refresh = { policy = "threshold", fraction = 0.5 }

[[routes]]
name = "suite-xfetch"
path_prefix = "/t/ahead-xfetch/"
ttl = "0s"
keep = "1h"
vary_device = false
early_refresh = { policy = "xfetch", beta = 8.0 }

[[routes]]
name = "suite-xfetch-grace"
path_prefix = "/t/ahead-xfetch-g/"
ttl = "0s"
grace = "30s"
keep = "1h"
vary_device = false
early_refresh = { policy = "xfetch", beta = 8.0 }

[[routes]]
name = "suite-sliced"
path_prefix = "/t/sliced/"
ttl = "0s"
keep = "1h"
vary_device = false
slice_bytes = 16

[[routes]]
name = "suite-grace"
path_prefix = "/t/grace/"
ttl = "0s"
grace = "30s"
keep = "1h"
vary_device = false
"#;

/// [`SUITE_ROUTES`] as JSON route objects (the Envoy filter's configuration).
///
/// # Panics
/// Never: the constant parses (a unit test checks it).
pub fn suite_routes_json() -> Vec<serde_json::Value> {
    let v: toml::Value = toml::from_str(SUITE_ROUTES).unwrap_or(toml::Value::Boolean(false));
    let json = serde_json::to_value(v).unwrap_or_default();
    json["routes"].as_array().cloned().unwrap_or_default()
}

/// `base` (a TOML configuration) with [`SUITE_ROUTES`] before its routes and the suite's
/// `[origin].fill_fields`.
///
/// # Errors
/// `base` is not TOML.
pub fn suite_config_toml(base: &str) -> Result<String, ConformanceError> {
    let mut v: toml::Table =
        toml::from_str(base).map_err(|e| ConformanceError::Cases(format!("base config: {e}")))?;
    let suite: toml::Table = toml::from_str(SUITE_ROUTES)
        .map_err(|e| ConformanceError::Cases(format!("SUITE_ROUTES: {e}")))?;
    let mut routes = suite
        .get("routes")
        .and_then(toml::Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(own) = v.get("routes").and_then(toml::Value::as_array) {
        routes.extend(own.iter().cloned());
    }
    v.insert("routes".into(), toml::Value::Array(routes));
    let origin = v
        .entry("origin")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if let Some(o) = origin.as_table_mut() {
        let fields = SUITE_FILL_FIELDS
            .iter()
            .map(|f| toml::Value::String((*f).into()));
        o.insert("fill_fields".into(), toml::Value::Array(fields.collect()));
    }
    toml::to_string(&v).map_err(|e| ConformanceError::Cases(e.to_string()))
}

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::time::Duration;

use serde::Deserialize;

pub mod raw;

/// The shared case list, compiled in.
pub const CASES_TOML: &str = include_str!("../cases.toml");

/// The crate's error type.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConformanceError {
    /// `cases.toml` does not parse as the schema.
    #[error("cases.toml: {0}")]
    Cases(String),
    /// An HTTP exchange failed at the transport level.
    #[error("{0}")]
    Http(String),
}

/// One request of a case and what its response must show.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Method (`GET` by default).
    #[serde(default = "get")]
    pub method: String,
    /// `Host` header.
    pub host: String,
    /// Path and query.
    pub path: String,
    /// A user agent alias from the `[ua]` table.
    #[serde(default)]
    pub ua: Option<String>,
    /// Extra request headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Request body (admin calls: a ban expression).
    #[serde(default)]
    pub send_body: Option<String>,
    /// Send `send_body` over a plain socket with this framing (`content-length` or
    /// `chunked`), whatever the method: a `GET` with a body ([`raw`]).
    #[serde(default)]
    pub framing: Option<raw::Framing>,
    /// Milliseconds to wait before sending, on the real clock: the only way to let time
    /// pass on a running platform (Viceroy's and Envoy's clocks cannot be passed), used
    /// only by cases that pin a time window; keep them short.
    #[serde(default)]
    pub sleep_ms: u64,
    /// Send at this many milliseconds after the case's first request was sent (real clock),
    /// instead of `sleep_ms` after the previous step: a time window anchored on the first
    /// fill's request, which is when a stored object's age starts (RFC 9111 §4.2.3), so a
    /// slow first answer on a loaded machine does not shift the window. At once when that
    /// time has passed.
    #[serde(default)]
    pub at_ms: Option<u64>,
    /// Send this many copies of the step at once (each on its own connection), every one
    /// checked against the expectations: what one client gets, every client gets.
    #[serde(default = "one")]
    pub concurrent: usize,
    /// With `concurrent`: milliseconds between the starts of successive copies (requests
    /// that straddle an instant, such as an object's expiry).
    #[serde(default)]
    pub spread_ms: u64,
    /// Expected status.
    #[serde(default)]
    pub status: Option<u16>,
    /// Expected `X-Cache`.
    #[serde(default)]
    pub cache: Option<String>,
    /// Headers that must equal a value (case-insensitive comparison of values).
    #[serde(default)]
    pub header_equals: BTreeMap<String, String>,
    /// Headers that must contain a substring (case-insensitive).
    #[serde(default)]
    pub header_contains: BTreeMap<String, String>,
    /// Headers whose value must be exactly these bytes (lines of one name joined with
    /// `", "`): the text's UTF-8 with `\xHH` for any byte (`'caf\xe9'` in a TOML literal
    /// string is `caf` and the Latin-1 byte `0xE9`), `\\` for a backslash
    /// ([`escaped_bytes`]).
    #[serde(default)]
    pub header_bytes_equal: BTreeMap<String, String>,
    /// Headers that must be absent.
    #[serde(default)]
    pub header_absent: Vec<String>,
    /// Substrings of the decoded body.
    #[serde(default)]
    pub body_contains: Vec<String>,
    /// The decoded body equals this text exactly.
    #[serde(default)]
    pub body_equals: Option<String>,
    /// The decoded body equals that of an earlier step of the same case.
    #[serde(default)]
    pub same_body_as: Option<usize>,
}

fn get() -> String {
    "GET".to_owned()
}

fn one() -> usize {
    1
}

/// A named sequence of steps plus the origin traffic it may cause.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// What the case shows.
    pub name: String,
    /// Requests, in order.
    pub steps: Vec<Step>,
    /// Origin requests per path during the case.
    #[serde(default)]
    pub origin: BTreeMap<String, u64>,
    /// Total origin requests during the case.
    #[serde(default)]
    pub origin_total: Option<u64>,
}

/// The whole list.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    /// User-agent aliases.
    #[serde(default)]
    pub ua: BTreeMap<String, String>,
    /// Cases.
    pub cases: Vec<Case>,
}

impl Suite {
    /// The compiled-in `cases.toml`.
    ///
    /// # Errors
    /// [`ConformanceError::Cases`] when it does not parse (a broken checkout).
    pub fn builtin() -> Result<Self, ConformanceError> {
        Self::parse(CASES_TOML)
    }

    /// Parses a case list.
    ///
    /// # Errors
    /// [`ConformanceError::Cases`] with the parser's message.
    pub fn parse(text: &str) -> Result<Self, ConformanceError> {
        toml::from_str(text).map_err(|e| ConformanceError::Cases(e.to_string()))
    }
}

/// A response as the client saw it.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    /// Status.
    pub status: u16,
    /// Headers, lower-case names, repeated fields joined with `", "` (values decoded
    /// lossily as UTF-8).
    pub headers: BTreeMap<String, String>,
    /// Every header line as received, lower-case names, values as their exact bytes
    /// (filled by [`Target::send`]).
    pub raw_headers: Vec<(String, Vec<u8>)>,
    /// Raw body.
    pub body: Vec<u8>,
    /// Interim (1xx) answers received before this one, in order (filled by [`raw::send`]
    /// only: the client library skips them).
    pub interim: Vec<Reply>,
}

impl Reply {
    /// Body decoded per `Content-Encoding` (gzip inflated), lossy UTF-8.
    pub fn text(&self) -> String {
        let gz = self
            .headers
            .get("content-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("gzip"));
        if gz {
            let mut out = Vec::new();
            if flate2::read::GzDecoder::new(&self.body[..])
                .read_to_end(&mut out)
                .is_ok()
            {
                return String::from_utf8_lossy(&out).into_owned();
            }
        }
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A running Cachet and its origin's stats endpoint.
pub struct Target {
    base: String,
    origin: String,
    agent: ureq::Agent,
}

impl Target {
    /// `base` (e.g. `http://127.0.0.1:10000`) and the origin's base URL (its
    /// `/__origin/stats` is read).
    pub fn new(base: &str, origin: &str) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .into();
        Self {
            base: base.trim_end_matches('/').to_owned(),
            origin: origin.trim_end_matches('/').to_owned(),
            agent,
        }
    }

    /// Sends one request (no automatic decompression, redirects not followed).
    ///
    /// # Errors
    /// [`ConformanceError::Http`] on a transport error.
    pub fn send(
        &self,
        method: &str,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Result<Reply, ConformanceError> {
        let url = format!("{}{path}", self.base);
        let mut b = ureq::http::Request::builder()
            .method(method)
            .uri(&url)
            .header("host", host);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let err = |e: &dyn fmt::Display| ConformanceError::Http(format!("{method} {path}: {e}"));
        let mut resp = if let Some(body) = body {
            let req = b.body(body.to_vec()).map_err(|e| err(&e))?;
            self.agent.run(req).map_err(|e| err(&e))?
        } else {
            let req = b.body(()).map_err(|e| err(&e))?;
            self.agent.run(req).map_err(|e| err(&e))?
        };
        let mut out = Reply {
            status: resp.status().as_u16(),
            ..Reply::default()
        };
        for (k, v) in resp.headers() {
            out.raw_headers
                .push((k.as_str().to_ascii_lowercase(), v.as_bytes().to_vec()));
            let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
            out.headers
                .entry(k.as_str().to_ascii_lowercase())
                .and_modify(|e| {
                    e.push_str(", ");
                    e.push_str(&v);
                })
                .or_insert(v);
        }
        out.body = resp
            .body_mut()
            .with_config()
            .limit(64 * 1024 * 1024)
            .read_to_vec()
            .map_err(|e| err(&e))?;
        Ok(out)
    }

    /// The origin's counters (`GET /__origin/stats`): `(total, by path)`.
    ///
    /// # Errors
    /// Transport errors or a body that is not the stats JSON.
    pub fn origin_stats(&self) -> Result<(u64, BTreeMap<String, u64>), ConformanceError> {
        let url = format!("{}/__origin/stats", self.origin);
        let mut resp = self
            .agent
            .get(&url)
            .call()
            .map_err(|e| ConformanceError::Http(format!("origin stats: {e}")))?;
        let text = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| ConformanceError::Http(format!("origin stats: {e}")))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| ConformanceError::Http(format!("origin stats: {e}")))?;
        let total = v["total"].as_u64().unwrap_or(0);
        let by = v["by_path"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, n)| (k.clone(), n.as_u64().unwrap_or(0)))
                    .collect()
            })
            .unwrap_or_default();
        Ok((total, by))
    }
}

/// One broken expectation.
#[derive(Debug, Clone)]
pub struct Failure {
    /// Case name.
    pub case: String,
    /// Step index (`None` for origin counts).
    pub step: Option<usize>,
    /// What differed.
    pub message: String,
}

/// The result of a run.
#[derive(Debug, Default)]
pub struct Report {
    /// Cases run.
    pub cases: usize,
    /// Cases with no failure.
    pub passed: usize,
    /// Every failure.
    pub failures: Vec<Failure>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "conformance: {} passed, {} failed",
            self.passed,
            self.cases - self.passed
        )?;
        for x in &self.failures {
            match x.step {
                Some(s) => writeln!(f, "  [{}] step {s}: {}", x.case, x.message)?,
                None => writeln!(f, "  [{}] {}", x.case, x.message)?,
            }
        }
        Ok(())
    }
}

/// Runs every case of `suite` against `target`.
pub fn run(suite: &Suite, target: &Target) -> Report {
    let mut report = Report::default();
    for case in &suite.cases {
        report.cases += 1;
        let before = report.failures.len();
        run_case(suite, case, target, &mut report.failures);
        if report.failures.len() == before {
            report.passed += 1;
        }
    }
    report
}

/// Sends one step (after its `sleep_ms`): over a plain socket when it has a `framing`.
fn send_step(t: &Target, s: &Step, headers: &[(&str, &str)]) -> Result<Reply, ConformanceError> {
    if s.sleep_ms > 0 {
        std::thread::sleep(Duration::from_millis(s.sleep_ms));
    }
    let body = s.send_body.as_deref().map(str::as_bytes);
    match s.framing {
        Some(framing) => raw::send(
            &t.base,
            &s.method,
            &s.host,
            &s.path,
            headers,
            body.unwrap_or_default(),
            framing,
        ),
        None => t.send(&s.method, &s.host, &s.path, headers, body),
    }
}

fn run_case(suite: &Suite, case: &Case, t: &Target, out: &mut Vec<Failure>) {
    let mut fail = |step: Option<usize>, message: String| {
        out.push(Failure {
            case: case.name.clone(),
            step,
            message,
        });
    };
    let before = match t.origin_stats() {
        Ok(s) => s,
        Err(e) => return fail(None, e.to_string()),
    };
    let mut bodies: Vec<String> = Vec::new();
    let mut first_sent: Option<std::time::Instant> = None;
    for (i, s) in case.steps.iter().enumerate() {
        if let (Some(at), Some(t0)) = (s.at_ms, first_sent) {
            let due = t0 + Duration::from_millis(at);
            std::thread::sleep(due.saturating_duration_since(std::time::Instant::now()));
        }
        let mut headers: Vec<(&str, &str)> = s.headers.iter().map(|(k, v)| (&**k, &**v)).collect();
        if let Some(alias) = &s.ua {
            match suite.ua.get(alias) {
                Some(ua) => headers.push(("user-agent", ua.as_str())),
                None => fail(Some(i), format!("unknown ua alias {alias:?}")),
            }
        }
        let anchored;
        let s = if s.at_ms.is_some() {
            anchored = Step {
                sleep_ms: 0,
                ..s.clone()
            };
            &anchored
        } else {
            s
        };
        // The first request goes out after its own `sleep_ms`.
        first_sent
            .get_or_insert_with(|| std::time::Instant::now() + Duration::from_millis(s.sleep_ms));
        let replies = send_copies(t, s, &headers);
        let n = replies.len();
        let mut first = None;
        for (k, r) in replies.into_iter().enumerate() {
            let which = |m: String| {
                if n > 1 {
                    format!("copy {} of {n}: {m}", k + 1)
                } else {
                    m
                }
            };
            match r {
                Ok(r) => {
                    let text = r.text();
                    for m in check_reply(s, &r, &text, &bodies) {
                        fail(Some(i), which(m));
                    }
                    first.get_or_insert(text);
                }
                Err(e) => fail(Some(i), which(e.to_string())),
            }
        }
        bodies.push(first.unwrap_or_default());
    }
    let after = match t.origin_stats() {
        Ok(s) => s,
        Err(e) => return fail(None, e.to_string()),
    };
    for (path, want) in &case.origin {
        let got =
            after.1.get(path).copied().unwrap_or(0) - before.1.get(path).copied().unwrap_or(0);
        if got != *want {
            fail(None, format!("origin saw {path} {got} times (want {want})"));
        }
    }
    if let Some(want) = case.origin_total {
        let got = after.0 - before.0;
        if got != want {
            fail(
                None,
                format!("origin saw {got} requests in total (want {want})"),
            );
        }
    }
}

/// Sends a step once, or `concurrent` copies at once (`spread_ms` apart), in order.
fn send_copies(
    t: &Target,
    s: &Step,
    headers: &[(&str, &str)],
) -> Vec<Result<Reply, ConformanceError>> {
    if s.concurrent <= 1 {
        return vec![send_step(t, s, headers)];
    }
    if s.sleep_ms > 0 {
        std::thread::sleep(Duration::from_millis(s.sleep_ms));
    }
    let once = Step {
        sleep_ms: 0,
        ..s.clone()
    };
    std::thread::scope(|scope| {
        let copies: Vec<_> = (0..s.concurrent)
            .map(|k| {
                let once = &once;
                let delay = s.spread_ms.saturating_mul(k as u64);
                scope.spawn(move || {
                    std::thread::sleep(Duration::from_millis(delay));
                    send_step(t, once, headers)
                })
            })
            .collect();
        copies
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(ConformanceError::Http("a copy panicked".into())))
            })
            .collect()
    })
}

/// What is wrong with reply `r` (body `text`) to step `s`; `bodies`: the earlier steps'.
fn check_reply(s: &Step, r: &Reply, text: &str, bodies: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(want) = s.status
        && r.status != want
    {
        out.push(format!("status {} (want {want})", r.status));
    }
    let got = r.headers.get("x-cache").map_or("", String::as_str);
    if let Some(want) = s.cache.as_ref().filter(|w| got != *w) {
        out.push(format!("X-Cache {got:?} (want {want:?})"));
    }
    for (k, v) in &s.header_equals {
        let got = r.headers.get(&k.to_ascii_lowercase());
        if !got.is_some_and(|g| g.eq_ignore_ascii_case(v)) {
            out.push(format!("{k}: {got:?} (want {v:?})"));
        }
    }
    for (k, v) in &s.header_contains {
        let got = r.headers.get(&k.to_ascii_lowercase());
        if !got.is_some_and(|g| g.to_ascii_lowercase().contains(&v.to_ascii_lowercase())) {
            out.push(format!("{k}: {got:?} (want it to contain {v:?})"));
        }
    }
    for (k, v) in &s.header_bytes_equal {
        if let Err(m) = check_bytes(r, k, v) {
            out.push(m);
        }
    }
    for k in &s.header_absent {
        if let Some(v) = r.headers.get(&k.to_ascii_lowercase()) {
            out.push(format!("{k} present ({v:?}), want absent"));
        }
    }
    let head: String = text.chars().take(200).collect();
    for want in &s.body_contains {
        if !text.contains(want.as_str()) {
            out.push(format!("body lacks {want:?}: {head:?}"));
        }
    }
    if let Some(want) = &s.body_equals
        && text != want
    {
        out.push(format!("body {head:?} (want {want:?})"));
    }
    if let Some(j) = s.same_body_as
        && bodies.get(j).map(String::as_str) != Some(text)
    {
        out.push(format!("body differs from step {j}'s"));
    }
    out
}

/// The bytes an escaped expectation stands for: the text's UTF-8, with `\xHH` (two hex
/// digits) for one byte and `\\` for a backslash; `None` for another escape.
pub fn escaped_bytes(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        rest = tail;
        if b != b'\\' {
            out.push(b);
            continue;
        }
        match rest {
            [b'\\', tail @ ..] => {
                out.push(b'\\');
                rest = tail;
            }
            [b'x', h, l, tail @ ..] => {
                let digit = |c: u8| char::from(c).to_digit(16);
                out.push(u8::try_from(digit(*h)? * 16 + digit(*l)?).ok()?);
                rest = tail;
            }
            _ => return None,
        }
    }
    Some(out)
}

/// Checks that the lines of `name` in `r`, joined with `", "`, are exactly the bytes
/// `want` escapes ([`escaped_bytes`]); the failure message otherwise.
fn check_bytes(r: &Reply, name: &str, want: &str) -> Result<(), String> {
    let want_bytes =
        escaped_bytes(want).ok_or_else(|| format!("{name}: bad escape in {want:?}"))?;
    let lines: Vec<&[u8]> = (r.raw_headers.iter())
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
        .collect();
    let got = (!lines.is_empty()).then(|| lines.join(&b", "[..]));
    if got.as_deref() == Some(want_bytes.as_slice()) {
        return Ok(());
    }
    let shown = got.map(|g| g.escape_ascii().to_string());
    Err(format!(
        "{name}: bytes {shown:?} (want {:?})",
        want_bytes.escape_ascii().to_string()
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn builtin_cases_parse_and_name_known_aliases() {
        let s = super::Suite::builtin().expect("parses");
        assert!(s.cases.len() >= 10);
        for c in &s.cases {
            for st in &c.steps {
                if let Some(a) = &st.ua {
                    assert!(s.ua.contains_key(a), "{}: {a}", c.name);
                }
                if let Some(j) = st.same_body_as {
                    assert!(j < c.steps.len());
                }
                for v in st.header_bytes_equal.values() {
                    assert!(super::escaped_bytes(v).is_some(), "{}: {v:?}", c.name);
                }
            }
        }
    }

    #[test]
    fn escaped_bytes_spell_any_byte() {
        let e = super::escaped_bytes;
        assert_eq!(e(r"caf\xe9").as_deref(), Some(&b"caf\xe9"[..]));
        assert_eq!(e(r"a\\b\x00").as_deref(), Some(&b"a\\b\0"[..]));
        assert_eq!(e("caf\u{e9}").as_deref(), Some("caf\u{e9}".as_bytes()));
        for bad in [r"\n", r"\x4", r"\xg0", r"\x+f", "\\"] {
            assert_eq!(e(bad), None, "{bad:?}");
        }
    }
}
