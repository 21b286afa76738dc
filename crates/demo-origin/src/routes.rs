//! HTTP routes of the demo origin: blog pages, feeds, CSS, app.js, account, echo and control.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Extension, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

use crate::content::{self, Device};
use crate::{CONTROL_PREFIX, DELAY_HEADER, DEVICE_HEADER, OriginState, REQUEST_NUMBER_HEADER};

const SURROGATE_KEY: HeaderName = HeaderName::from_static("surrogate-key");
const HTML: &str = "text/html; charset=utf-8";
const NO_STORE: &str = "no-store";
const PRIVATE_NO_STORE: &str = "private, no-store";

/// The counted request's number (the origin's total after counting it), set by the middleware.
#[derive(Clone, Copy, Debug)]
struct RequestNumber(u64);

/// Builds the origin's router (all routes, counting/delay middleware, state attached).
pub fn router(state: OriginState) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/blog/{name}", get(blog_redirect))
        .route("/blog/{name}/", get(blog_top))
        .route("/blog/{name}/entry/{id}", get(entry))
        .route("/blog/{name}/feed", get(feed))
        .route("/css/{file}", get(css))
        .route("/static/app.js", get(app_js))
        .route("/account", get(account))
        .route("/api/echo", get(echo))
        .route("/t/{*name}", axum::routing::any(test_resource))
        .route("/__origin/stats", get(stats))
        .route("/__origin/stats/reset", post(reset_stats))
        .route("/__origin/blogs", get(list_blogs))
        .route("/__origin/blogs/{name}/private", post(make_private))
        .route("/__origin/blogs/{name}/public", post(make_public))
        .route("/__origin/delay", post(set_delay))
        .route("/__origin/fault", post(set_fault))
        .route("/__origin/not-modified", post(set_not_modified))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            count_and_delay,
        ))
        .with_state(state)
}

fn is_control(path: &str) -> bool {
    path == CONTROL_PREFIX
        || path
            .strip_prefix(CONTROL_PREFIX)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Logs a counted request's span ([`OriginState::request_log`]) when dropped: when its
/// answer is ready, or when the request is dropped unanswered.
struct SpanGuard {
    state: OriginState,
    key: Option<String>,
    start: std::time::Instant,
}

impl Drop for SpanGuard {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.state.log_request(key, self.start);
        }
    }
}

/// Counts every request outside `/__origin/`, applies the configured delay and stamps the
/// response with `X-Origin-Request` and `X-Origin-Delay-Ms`; logs its span.
async fn count_and_delay(
    State(state): State<OriginState>,
    mut req: Request,
    next: Next,
) -> Response {
    if is_control(req.uri().path()) {
        return next.run(req).await;
    }
    let key = match req.uri().query() {
        Some(query) => format!("{}?{query}", req.uri().path()),
        None => req.uri().path().to_owned(),
    };
    let _span = SpanGuard {
        state: state.clone(),
        key: Some(key.clone()),
        start: std::time::Instant::now(),
    };
    let n = state.count(key);
    req.extensions_mut().insert(RequestNumber(n));
    let delay = state.delay();
    let waited = if delay.is_zero() {
        Duration::ZERO
    } else {
        let started = tokio::time::Instant::now();
        tokio::time::sleep(delay).await;
        started.elapsed()
    };
    match state.fault() {
        crate::Fault::None => {}
        crate::Fault::Error => {
            return control_error(StatusCode::SERVICE_UNAVAILABLE, "origin fault: 5xx burst");
        }
        crate::Fault::Reset => return reset_mid_body(next.run(req).await).await,
    }
    let mut response = next.run(req).await;
    let not_modified = response.status() == StatusCode::NOT_MODIFIED;
    let headers = response.headers_mut();
    if not_modified && state.private_not_modified() {
        headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static(PRIVATE_NO_STORE),
        );
        if let Ok(cookie) = HeaderValue::from_str(&format!("session=nm-{n}; Path=/; HttpOnly")) {
            headers.insert(header::SET_COOKIE, cookie);
        }
    }
    headers.insert(REQUEST_NUMBER_HEADER, HeaderValue::from(n));
    headers.insert(
        DELAY_HEADER,
        HeaderValue::from(u64::try_from(waited.as_millis()).unwrap_or(u64::MAX)),
    );
    response
}

/// A response under construction, with optional validators and conditional-request handling.
struct Page {
    status: StatusCode,
    content_type: &'static str,
    cache_control: &'static str,
    surrogate_key: Option<String>,
    vary: Option<&'static str>,
    last_modified: Option<u64>,
    set_cookie: Option<String>,
    content_encoding: Option<&'static str>,
    body: Vec<u8>,
}

impl Page {
    fn new(
        content_type: &'static str,
        cache_control: &'static str,
        body: impl Into<Vec<u8>>,
    ) -> Self {
        Self {
            status: StatusCode::OK,
            content_type,
            cache_control,
            surrogate_key: None,
            vary: None,
            last_modified: None,
            set_cookie: None,
            content_encoding: None,
            body: body.into(),
        }
    }

    fn status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    fn surrogate_key(mut self, key: String) -> Self {
        self.surrogate_key = Some(key);
        self
    }

    fn vary(mut self, vary: &'static str) -> Self {
        self.vary = Some(vary);
        self
    }

    /// Adds `ETag` (hash of the body) and `Last-Modified` (`secs`), and answers matching
    /// conditional requests with 304.
    fn validators(mut self, secs: u64) -> Self {
        self.last_modified = Some(secs);
        self
    }

    fn set_cookie(mut self, cookie: String) -> Self {
        self.set_cookie = Some(cookie);
        self
    }

    fn content_encoding(mut self, encoding: &'static str) -> Self {
        self.content_encoding = Some(encoding);
        self
    }

    fn respond(self, request: &HeaderMap) -> Response {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static(self.cache_control),
        );
        if let Some(key) = self
            .surrogate_key
            .and_then(|k| HeaderValue::from_str(&k).ok())
        {
            headers.insert(SURROGATE_KEY, key);
        }
        if let Some(vary) = self.vary {
            headers.insert(header::VARY, HeaderValue::from_static(vary));
        }
        if let Some(cookie) = self.set_cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
            headers.insert(header::SET_COOKIE, cookie);
        }
        let mut not_modified = false;
        if let Some(secs) = self.last_modified {
            let etag = content::etag_for(&self.body);
            let date = content::http_date(secs);
            not_modified = is_not_modified(request, &etag, &date);
            if let Ok(v) = HeaderValue::from_str(&etag) {
                headers.insert(header::ETAG, v);
            }
            if let Ok(v) = HeaderValue::from_str(&date) {
                headers.insert(header::LAST_MODIFIED, v);
            }
        }
        if not_modified && self.status == StatusCode::OK {
            return (StatusCode::NOT_MODIFIED, headers).into_response();
        }
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(self.content_type),
        );
        if let Some(encoding) = self.content_encoding {
            headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static(encoding));
        }
        (self.status, headers, self.body).into_response()
    }
}

/// RFC 9110 §13.1: `If-None-Match` wins over `If-Modified-Since` when both are present.
fn is_not_modified(request: &HeaderMap, etag: &str, last_modified: &str) -> bool {
    if let Some(inm) = request.get(header::IF_NONE_MATCH) {
        let Ok(inm) = inm.to_str() else { return false };
        return inm
            .split(',')
            .map(str::trim)
            .any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag);
    }
    request
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ims| ims.trim() == last_modified)
}

fn device(headers: &HeaderMap) -> Device {
    Device::from_header(headers.get(DEVICE_HEADER).and_then(|v| v.to_str().ok()))
}

/// 404 for unknown blogs, entries and paths: briefly cacheable, like a real app's error page.
fn not_found_page(request: &HeaderMap) -> Response {
    Page::new(
        "text/plain; charset=utf-8",
        "public, max-age=10",
        "not found\n",
    )
    .status(StatusCode::NOT_FOUND)
    .respond(request)
}

async fn not_found(req: Request) -> Response {
    if is_control(req.uri().path()) {
        return control_error(StatusCode::NOT_FOUND, "no such control endpoint");
    }
    not_found_page(req.headers())
}

async fn index(State(state): State<OriginState>, headers: HeaderMap) -> Response {
    let public: Vec<String> = state
        .blogs()
        .into_iter()
        .filter(|b| !b.private)
        .map(|b| b.name)
        .collect();
    Page::new(HTML, "public, max-age=60", content::index_html(&public))
        .surrogate_key("index".to_owned())
        .respond(&headers)
}

async fn blog_redirect(Path(name): Path<String>, headers: HeaderMap) -> Response {
    let mut response = Page::new(
        "text/plain; charset=utf-8",
        "public, max-age=300",
        "moved\n",
    )
    .status(StatusCode::MOVED_PERMANENTLY)
    .respond(&headers);
    if let Ok(location) = HeaderValue::from_str(&format!("/blog/{name}/")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

/// Shared headers of blog tops and entries: public → cacheable with surrogate keys and
/// validators; private → `private, no-store` with a session cookie.
fn blog_page(
    request: &HeaderMap,
    private: bool,
    n: RequestNumber,
    body: String,
    surrogate_key: String,
    modified: u64,
) -> Response {
    if private {
        Page::new(HTML, PRIVATE_NO_STORE, body)
            .set_cookie(format!("session=blog-{}; Path=/; HttpOnly", n.0))
            .respond(request)
    } else {
        Page::new(HTML, "public, max-age=300", body)
            .vary("User-Agent")
            .surrogate_key(surrogate_key)
            .validators(modified)
            .respond(request)
    }
}

async fn blog_top(
    State(state): State<OriginState>,
    Path(name): Path<String>,
    Extension(n): Extension<RequestNumber>,
    headers: HeaderMap,
) -> Response {
    let Some(private) = state.is_private(&name) else {
        return not_found_page(&headers);
    };
    let body = content::blog_top_html(&name, device(&headers), private);
    let key = format!("blog-{name}");
    blog_page(&headers, private, n, body, key, content::blog_time(&name))
}

/// Parses an entry id: 1 to 19 ASCII digits.
fn parse_id(id: &str) -> Option<u64> {
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    id.parse().ok()
}

async fn entry(
    State(state): State<OriginState>,
    Path((name, id)): Path<(String, String)>,
    Extension(n): Extension<RequestNumber>,
    headers: HeaderMap,
) -> Response {
    let (Some(private), Some(id_num)) = (state.is_private(&name), parse_id(&id)) else {
        return not_found_page(&headers);
    };
    let body = content::entry_html(&name, id_num, device(&headers), private);
    let key = format!("blog-{name} entry-{name}-{id}");
    blog_page(
        &headers,
        private,
        n,
        body,
        key,
        content::entry_time(&name, id_num),
    )
}

async fn feed(
    State(state): State<OriginState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    match state.is_private(&name) {
        None => not_found_page(&headers),
        Some(true) => Page::new(
            "text/plain; charset=utf-8",
            PRIVATE_NO_STORE,
            "this blog is private\n",
        )
        .status(StatusCode::FORBIDDEN)
        .respond(&headers),
        Some(false) => Page::new(
            "application/rss+xml",
            "public, max-age=300",
            content::feed_xml(&name),
        )
        .surrogate_key(format!("blog-{name} feed-{name}"))
        .validators(content::blog_time(&name))
        .respond(&headers),
    }
}

async fn css(
    State(state): State<OriginState>,
    Path(file): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some(name) = file.strip_suffix(".css") else {
        return not_found_page(&headers);
    };
    let Some(private) = state.is_private(name) else {
        return not_found_page(&headers);
    };
    let body = content::blog_css(name);
    if private {
        Page::new("text/css; charset=utf-8", PRIVATE_NO_STORE, body).respond(&headers)
    } else {
        Page::new("text/css; charset=utf-8", "public, max-age=86400", body)
            .surrogate_key(format!("blog-{name} css-{name}"))
            .validators(content::blog_time(name))
            .respond(&headers)
    }
}

async fn app_js(State(state): State<OriginState>, headers: HeaderMap) -> Response {
    Page::new(
        "application/javascript; charset=utf-8",
        "public, max-age=3600",
        state.app_js_gzip().to_vec(),
    )
    .content_encoding("gzip")
    .respond(&headers)
}

async fn account(Extension(n): Extension<RequestNumber>, headers: HeaderMap) -> Response {
    Page::new(HTML, "private", content::account_html(n.0))
        .set_cookie(format!("session=acct-{}; Path=/; HttpOnly", n.0))
        .respond(&headers)
}

async fn echo(req: Request) -> Response {
    let mut echoed: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in req.headers() {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        echoed
            .entry(name.as_str().to_owned())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    let body = json!({
        "method": req.method().as_str(),
        "path": req.uri().path(),
        "query": req.uri().query(),
        "headers": echoed,
    });
    no_store_json(StatusCode::OK, &body)
}

/// The body of every `/t/…` resource unless `body=` says otherwise: 64 bytes whose
/// offsets are easy to check in a range (`0123456789abcdef` four times).
pub const TEST_BODY: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Query of a `/t/…` resource: each parameter sets one response field, so conformance
/// cases can state exactly what the origin answers (RFC 9110/9111 behaviour tests).
#[derive(Debug, Default, Deserialize)]
struct TestQuery {
    /// Status code (default 200).
    status: Option<u16>,
    /// `Cache-Control`.
    cc: Option<String>,
    /// `CDN-Cache-Control`.
    cdn: Option<String>,
    /// `Surrogate-Control`.
    sc: Option<String>,
    /// `Expires` as seconds from now (negative: past), or `bad` for an invalid date.
    expires: Option<String>,
    /// `Age`.
    age: Option<u64>,
    /// `Date`, verbatim (else the server's own, the time of the answer).
    date: Option<String>,
    /// `Age`, verbatim (`7200, 0`: a list, RFC 9111 §5.1).
    age_raw: Option<String>,
    /// `ETag: "<etag>"`; conditional requests matching it get `304`.
    etag: Option<String>,
    /// `Last-Modified` this many seconds ago.
    lm: Option<u64>,
    /// `Location`.
    loc: Option<String>,
    /// `Content-Location`.
    cloc: Option<String>,
    /// `Vary`.
    vary: Option<String>,
    /// `Surrogate-Key`.
    sk: Option<String>,
    /// `Connection: x-hop` with `X-Hop: from-origin`.
    hop: Option<u8>,
    /// A field the origin marks `no-cache="x-private"`: `X-Private: secret`.
    private_field: Option<u8>,
    /// Body text (default [`TEST_BODY`]).
    body: Option<String>,
    /// `1`: every response field above is sent Latin-1, one byte per character up to
    /// U+00FF (`cc=ext%3D%22caf%C3%A9%22` arrives as `ext="caf\xe9"`): obs-text (RFC 9110
    /// §5.5) for the fail-closed byte cases of issue 27.
    latin1: Option<u8>,
    /// The body is this request field's value (`none` when absent): shows which variant a
    /// `Vary` response is.
    body_from: Option<String>,
    /// The body is this many bytes of `x`, streamed in 64 KiB chunks without a
    /// `Content-Length` (chunked): a body whose size is known only once it is read.
    chunked: Option<u64>,
    /// With `chunked`: the body is that many bytes of [`crate::noise`] (incompressible),
    /// gzip-encoded as it is sent, with `Content-Encoding: gzip` (`1`); `2`: the same, but
    /// corrupt from its middle on (64 KiB of `0xff` instead of the rest and the trailer).
    gzip: Option<u8>,
    /// `X-Field` (any text; with `latin1=1` sent Latin-1): a field Cachet does not
    /// interpret, for the byte-exactness cases of issue 27 item 11.
    xf: Option<String>,
    /// `Set-Cookie` on every answer (Latin-1 with `latin1=1`).
    cookie: Option<String>,
    /// `Set-Cookie` on a `304` only: a revalidation whose answer turns per-user.
    cookie_304: Option<String>,
    /// Milliseconds to wait before answering (a slow origin, for collapsing cases).
    delay_ms: Option<u64>,
    /// `1`: a `GET` with one closed range `Range: bytes=a-b` gets a `206` with
    /// `Content-Range` and those bytes of the body (`416` past its end), for the partial
    /// content storage cases (issue 30).
    ranges: Option<u8>,
    /// A body of this many bytes ([`TEST_BODY`] repeated; at most [`MAX_SIZE`]), for
    /// benchmarks of large representations.
    size: Option<usize>,
}

/// Largest `size=` body, bytes.
pub const MAX_SIZE: usize = 64 * 1024 * 1024;

/// The request field that makes one `/t/…` answer fail (chaos cases, issue 28), so a
/// case can break a revalidation or a fill without changing the URL: `reset` (the
/// connection drops before any byte), `half` (headers with the full `Content-Length`,
/// half the body, then the connection drops), `stall` (headers and half the body, then
/// nothing for [`STALL`]).
pub const FAULT_FIELD: &str = "x-test-fault";

/// How long a `stall` fault holds the rest of the body.
pub const STALL: Duration = Duration::from_secs(30);

/// `len` bytes of [`crate::noise`] (generated up front), gzip-encoded chunk by chunk as
/// they are sent: the compressed body never exists whole.
fn gzip_noise_body(len: u64, corrupt: bool) -> axum::body::Body {
    use std::io::Write as _;
    const CHUNK: usize = 64 * 1024;
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    let noise = std::sync::Arc::new(crate::noise(len));
    let encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let stream = futures_util::stream::unfold(Some((encoder, 0usize)), move |state| {
        let noise = std::sync::Arc::clone(&noise);
        async move {
            let (mut enc, at) = state?;
            if corrupt && at >= noise.len() / 2 {
                let garbage = axum::body::Bytes::from(vec![0xffu8; CHUNK]);
                return Some((Ok(garbage), None));
            }
            if at >= noise.len() {
                let tail = enc.finish().unwrap_or_default();
                return Some((
                    Ok::<_, std::convert::Infallible>(axum::body::Bytes::from(tail)),
                    None,
                ));
            }
            let end = (at + CHUNK).min(noise.len());
            let _ = enc.write_all(&noise[at..end]);
            let out = std::mem::take(enc.get_mut());
            Some((Ok(axum::body::Bytes::from(out)), Some((enc, end))))
        }
    });
    axum::body::Body::from_stream(stream)
}

/// A body of `len` bytes of `x` in 64 KiB chunks, generated as it is sent (the origin
/// never holds it whole).
fn chunked_body(len: u64) -> axum::body::Body {
    const CHUNK: u64 = 64 * 1024;
    let chunk = axum::body::Bytes::from(vec![b'x'; 64 * 1024]);
    let chunks = len.div_ceil(CHUNK);
    let stream = futures_util::stream::iter((0..chunks).map(move |i| {
        let n = usize::try_from((len - i * CHUNK).min(CHUNK)).unwrap_or(0);
        Ok::<_, std::convert::Infallible>(chunk.slice(..n))
    }));
    axum::body::Body::from_stream(stream)
}

/// Appends `name: value` to `h`, the value Latin-1 (one byte per character up to U+00FF)
/// when `latin1`, else its UTF-8 bytes; a name or value `http` refuses is left out.
fn put_field(h: &mut HeaderMap, latin1: bool, name: &str, value: &str) {
    let bytes: Vec<u8> = if latin1 {
        value
            .chars()
            .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
            .collect()
    } else {
        value.as_bytes().to_vec()
    };
    if let (Ok(n), Ok(v)) = (HeaderName::try_from(name), HeaderValue::from_bytes(&bytes)) {
        h.append(n, v);
    }
}

/// `/t/{name}`: a resource whose answer is spelled out by its query ([`TestQuery`]) and
/// the request header `X-Test-Status`; any method; `X-Origin-Method` echoes the method and `X-Origin-Range` the `Range` received.
async fn test_resource(Query(q): Query<TestQuery>, req: Request) -> Response {
    if let Some(ms) = q.delay_ms {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let fault = req
        .headers()
        .get(FAULT_FIELD)
        .map(|v| v.as_bytes().to_vec());
    let response = test_answer(q, &req);
    match fault.as_deref() {
        Some(b"reset") => {
            // Unwinds the connection's task: the socket closes before any byte is sent.
            // `resume_unwind` skips the panic hook, so nothing is printed.
            std::panic::resume_unwind(Box::new("origin fault: reset before headers"))
        }
        Some(b"half") => reset_mid_body(response).await,
        Some(b"stall") => break_mid_body(response, STALL).await,
        _ => response,
    }
}

/// The answer [`test_resource`] sends when no fault is asked for.
fn test_answer(q: TestQuery, req: &Request) -> Response {
    let now = std::time::SystemTime::now();
    let ranged = q.ranges == Some(1);
    let mut h = HeaderMap::new();
    let latin1 = q.latin1 == Some(1);
    let mut put = |name: &str, value: &str| put_field(&mut h, latin1, name, value);
    put("content-type", "text/plain; charset=utf-8");
    put("x-origin-method", req.method().as_str());
    if let Some(r) = req
        .headers()
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
    {
        put("x-origin-range", r);
    }
    for (name, v) in [
        ("cache-control", &q.cc),
        ("cdn-cache-control", &q.cdn),
        ("surrogate-control", &q.sc),
        ("location", &q.loc),
        ("content-location", &q.cloc),
        ("vary", &q.vary),
        ("surrogate-key", &q.sk),
        ("x-field", &q.xf),
        ("set-cookie", &q.cookie),
        ("date", &q.date),
        ("age", &q.age_raw),
    ] {
        if let Some(v) = v {
            put(name, v);
        }
    }
    if let Some(e) = &q.expires {
        let at = e.parse::<i64>().ok().map(|d| {
            if d >= 0 {
                now + Duration::from_secs(d.unsigned_abs())
            } else {
                now - Duration::from_secs(d.unsigned_abs())
            }
        });
        match at {
            Some(at) => put("expires", &httpdate::fmt_http_date(at)),
            None => put("expires", "0"),
        }
    }
    if let Some(a) = q.age {
        put("age", &a.to_string());
    }
    let etag = q.etag.as_ref().map(|e| format!("\"{e}\""));
    if let Some(e) = &etag {
        put("etag", e);
    }
    let lm =
        q.lm.map(|s| httpdate::fmt_http_date(now - Duration::from_secs(s)));
    if let Some(lm) = &lm {
        put("last-modified", lm);
    }
    if q.hop == Some(1) {
        put("connection", "x-hop");
        put("x-hop", "from-origin");
    }
    if q.private_field == Some(1) {
        put("x-private", "secret");
    }
    // `X-Test-Status` (request header) wins over `status=`: a case can make one URL's
    // unsafe request fail without changing the URL.
    let status = req
        .headers()
        .get("x-test-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u16>().ok())
        .or(q.status)
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let conditional = etag.as_ref().is_some_and(|e| {
        req.headers()
            .get(header::IF_NONE_MATCH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|inm| {
                inm.split(',')
                    .any(|t| t.trim().trim_start_matches("W/") == e)
            })
    });
    if conditional && status == StatusCode::OK {
        if let Some(v) = &q.cookie_304 {
            put("set-cookie", v);
        }
        return (StatusCode::NOT_MODIFIED, h).into_response();
    }
    if let Some(len) = q.chunked {
        if let Some(g @ (1 | 2)) = q.gzip {
            h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            return (status, h, gzip_noise_body(len, g == 2)).into_response();
        }
        return (status, h, chunked_body(len)).into_response();
    }
    let body = body_of(q.size, q.body_from.as_deref(), q.body, req);
    if let Some(r) = req.headers().get(header::RANGE).filter(|_| ranged) {
        return ranged_answer(h, body.into_bytes(), r.as_bytes());
    }
    (status, h, body).into_response()
}

/// A `/t/…` body: `size` bytes of [`TEST_BODY`] repeated (at most [`MAX_SIZE`]), else the
/// request field `body_from` names (`none` when absent), else `body`, else [`TEST_BODY`].
fn body_of(
    size: Option<usize>,
    body_from: Option<&str>,
    body: Option<String>,
    req: &Request,
) -> String {
    if let Some(n) = size.map(|n| n.min(MAX_SIZE)) {
        return TEST_BODY.repeat(n.div_ceil(TEST_BODY.len()))[..n].to_owned();
    }
    match body_from {
        Some(name) => req.headers().get(name).map_or_else(
            || "none".to_owned(),
            |v| String::from_utf8_lossy(v.as_bytes()).into_owned(),
        ),
        None => body.unwrap_or_else(|| TEST_BODY.to_owned()),
    }
}

/// The `206` (or `416`) for one closed range `bytes=a-b` of `body` (RFC 9110 §14); any
/// other range value gets the whole `200`.
fn ranged_answer(mut h: HeaderMap, body: Vec<u8>, range: &[u8]) -> Response {
    let total = body.len();
    let spec = std::str::from_utf8(range)
        .ok()
        .and_then(|r| r.trim().strip_prefix("bytes="))
        .and_then(|r| r.split_once('-'))
        .and_then(|(a, b)| {
            Some((
                a.trim().parse::<usize>().ok()?,
                b.trim().parse::<usize>().ok()?,
            ))
        });
    let Some((first, last)) = spec.filter(|(a, b)| a <= b) else {
        return (StatusCode::OK, h, body).into_response();
    };
    if first >= total {
        put_field(&mut h, false, "content-range", &format!("bytes */{total}"));
        return (StatusCode::RANGE_NOT_SATISFIABLE, h).into_response();
    }
    let last = last.min(total - 1);
    put_field(
        &mut h,
        false,
        "content-range",
        &format!("bytes {first}-{last}/{total}"),
    );
    let part = body[first..=last].to_vec();
    (StatusCode::PARTIAL_CONTENT, h, part).into_response()
}

/// `response` with its headers (and full `Content-Length`) but only half its body, then a
/// body error, which makes the server drop the connection mid-body ([`crate::Fault::Reset`]).
async fn reset_mid_body(response: Response) -> Response {
    // The half goes out first (with the headers); the error follows a moment later, so the
    // client really sees the connection drop mid-body.
    break_mid_body(response, Duration::from_millis(20)).await
}

/// `response` with its headers (and full `Content-Length`) and half its body, then
/// nothing for `pause`, then a body error that drops the connection: a reset mid-body
/// (a short pause) or a stalled origin ([`STALL`], past any between-bytes timeout).
async fn break_mid_body(response: Response, pause: Duration) -> Response {
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let half = bytes.slice(..bytes.len() / 2);
    let stream = futures_util::stream::unfold((Some(half), true), move |(half, fail)| async move {
        if let Some(h) = half {
            return Some((Ok(h), (None, fail)));
        }
        if !fail {
            return None;
        }
        tokio::time::sleep(pause).await;
        let e = std::io::Error::other("origin fault: the body breaks mid-way");
        Some((Err(e), (None, false)))
    });
    let mut out = Response::from_parts(parts, axum::body::Body::from_stream(stream));
    if !bytes.is_empty() {
        out.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    }
    out
}

/// Query of `POST /__origin/fault?mode=none|error|reset`.
#[derive(Debug, Deserialize)]
struct FaultQuery {
    mode: String,
}

async fn set_fault(State(state): State<OriginState>, Query(q): Query<FaultQuery>) -> Response {
    let fault = match q.mode.as_str() {
        "none" => crate::Fault::None,
        "error" => crate::Fault::Error,
        "reset" => crate::Fault::Reset,
        other => {
            return control_error(
                StatusCode::BAD_REQUEST,
                &format!("unknown fault mode {other:?}: none, error or reset"),
            );
        }
    };
    state.set_fault(fault);
    no_store_json(StatusCode::OK, &json!({ "fault": q.mode }))
}

fn no_store_json(status: StatusCode, body: &serde_json::Value) -> Response {
    let mut response = (status, Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static(NO_STORE));
    response
}

fn control_error(status: StatusCode, message: &str) -> Response {
    no_store_json(status, &json!({ "error": message }))
}

async fn stats(State(state): State<OriginState>) -> Response {
    let body = serde_json::to_value(state.stats()).unwrap_or_default();
    no_store_json(StatusCode::OK, &body)
}

async fn reset_stats(State(state): State<OriginState>) -> Response {
    state.reset_stats();
    let body = serde_json::to_value(state.stats()).unwrap_or_default();
    no_store_json(StatusCode::OK, &body)
}

async fn list_blogs(State(state): State<OriginState>) -> Response {
    let blogs: Vec<_> = state
        .blogs()
        .into_iter()
        .map(|b| json!({ "blog": b.name, "private": b.private }))
        .collect();
    no_store_json(StatusCode::OK, &serde_json::Value::Array(blogs))
}

fn toggle(state: &OriginState, name: &str, private: bool) -> Response {
    if state.set_private(name, private) {
        no_store_json(StatusCode::OK, &json!({ "blog": name, "private": private }))
    } else {
        control_error(StatusCode::NOT_FOUND, "no such blog")
    }
}

async fn make_private(State(state): State<OriginState>, Path(name): Path<String>) -> Response {
    toggle(&state, &name, true)
}

async fn make_public(State(state): State<OriginState>, Path(name): Path<String>) -> Response {
    toggle(&state, &name, false)
}

/// Query of `POST /__origin/not-modified?private=true|false`.
#[derive(Deserialize)]
struct NotModifiedQuery {
    private: bool,
}

async fn set_not_modified(
    State(state): State<OriginState>,
    Query(q): Query<NotModifiedQuery>,
) -> Response {
    state.set_private_not_modified(q.private);
    no_store_json(
        StatusCode::OK,
        &json!({ "private_not_modified": q.private }),
    )
}

/// Query of `POST /__origin/delay?ms=N`.
#[derive(Deserialize)]
struct DelayQuery {
    ms: u64,
}

async fn set_delay(State(state): State<OriginState>, Query(q): Query<DelayQuery>) -> Response {
    state.set_delay(Duration::from_millis(q.ms));
    no_store_json(StatusCode::OK, &json!({ "delay_ms": q.ms }))
}
