//! Cachet on Fastly Compute: maps each request onto the pure policy and the core cache.
//!
//! Caching is built on `fastly::cache::core::Transaction` (request collapsing built in),
//! not on read-through `Request::send` caching, which Viceroy does not implement
//! (DESIGN.md). The calls that crash or hang Viceroy (`Found::hits`,
//! `Found::stale_while_revalidate`, a second lookup while a handle is open) are not used.

use std::io::Write;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use cachet_policy::object::{self, Encoding, Meta};
use cachet_policy::{
    Decision, NoStore, Plan, Policy, PolicyError, RequestView, ResponseView, Storability, Synth,
    accepts_encoding,
};
use fastly::cache::core::{CacheError, CacheKey, Found, Transaction};
use fastly::http::{StatusCode, header};
use fastly::{ConfigStore, Request, Response};

/// Configuration built into the wasm; a `config` entry in the `cachet` config store
/// replaces it without a redeploy.
const DEFAULT_CONFIG: &str = include_str!("../cachet.toml");

/// Name of the config store holding the `config` key (TOML text).
const CONFIG_STORE: &str = "cachet";

/// Request header prefix reserved for Cachet: client-supplied copies are always removed
/// before the request is planned or forwarded (a client can't choose its device class or
/// cache key).
const RESERVED_PREFIX: &str = "x-cachet-";

/// Everything that can go wrong in the adapter.
#[derive(Debug, thiserror::Error)]
enum EdgeError {
    #[error("configuration: {0}")]
    Config(#[from] PolicyError),
    #[error("origin unreachable: {0}")]
    Origin(String),
    #[error("cache: {0}")]
    Cache(#[from] CacheError),
    #[error("body: {0}")]
    Body(#[from] std::io::Error),
}

/// The one place core and platform errors become HTTP responses.
fn error_response(e: &EdgeError) -> Response {
    let (status, reason) = match e {
        EdgeError::Config(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "edge configuration invalid",
        ),
        EdgeError::Origin(_) => (StatusCode::BAD_GATEWAY, "origin unreachable"),
        EdgeError::Cache(_) | EdgeError::Body(_) => {
            (StatusCode::SERVICE_UNAVAILABLE, "edge cache error")
        }
    };
    let mut resp = Response::from_status(status)
        .with_header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .with_header(header::CACHE_CONTROL, "no-store")
        .with_body(format!("{reason}\n"));
    if status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::BAD_GATEWAY {
        resp.set_header(header::RETRY_AFTER, "5");
    }
    resp
}

fn policy() -> Result<&'static Policy, &'static PolicyError> {
    static POLICY: OnceLock<Result<Policy, PolicyError>> = OnceLock::new();
    POLICY
        .get_or_init(|| {
            let text = ConfigStore::try_open(CONFIG_STORE)
                .ok()
                .and_then(|s| s.try_get("config").ok().flatten());
            Policy::from_toml(text.as_deref().unwrap_or(DEFAULT_CONFIG))
        })
        .as_ref()
}

/// One access-log record, written as a JSON line per request.
#[derive(serde::Serialize, Default)]
struct Access {
    method: String,
    host: String,
    url: String,
    route: String,
    cache: &'static str,
    status: u16,
    device: &'static str,
    key: String,
    pass_reason: Option<&'static str>,
    origin_ms: Option<u64>,
    body_bytes: Option<u64>,
    stored_bytes: Option<u64>,
    origin_bytes: Option<u64>,
    error: Option<String>,
}

impl Access {
    fn write(&self) {
        let endpoint = policy().map_or("cachet_log", |p| p.config().edge.log_endpoint.as_str());
        if let (Ok(mut ep), Ok(json)) = (
            fastly::log::Endpoint::try_from_name(endpoint),
            serde_json::to_string(self),
        ) {
            let _ = writeln!(ep, "{json}");
        }
    }
}

fn main() {
    let mut req = Request::from_client();
    let names: Vec<String> = req
        .get_header_names_str()
        .into_iter()
        .filter(|n| n.to_ascii_lowercase().starts_with(RESERVED_PREFIX))
        .map(str::to_owned)
        .collect();
    for n in names {
        req.remove_header(n.as_str());
    }
    let mut access = Access {
        method: req.get_method_str().to_owned(),
        cache: "ERROR",
        ..Access::default()
    };
    let resp = match policy() {
        Ok(p) => handle(p, req, &mut access),
        Err(e) => Err(EdgeError::Config(PolicyError::Invalid(e.issues()))),
    };
    let mut resp = resp.unwrap_or_else(|e| {
        access.error = Some(e.to_string());
        access.cache = "ERROR";
        error_response(&e)
    });
    if resp.get_header(header::AGE).is_none() {
        resp.set_header(header::AGE, "0");
    }
    resp.set_header("x-cache", access.cache);
    access.status = resp.get_status().as_u16();
    resp.send_to_client();
    access.write();
}

fn handle(policy: &Policy, mut req: Request, f: &mut Access) -> Result<Response, EdgeError> {
    let url = req.get_url();
    let scheme = url.scheme().to_owned();
    let path_and_query = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    };
    let method = req.get_method_str().to_owned();
    let host = req.get_header_str(header::HOST).map(str::to_owned);
    let ua = req
        .get_header(header::USER_AGENT)
        .map(|v| v.as_bytes().to_vec());
    let fwd_proto = req.get_header_str("x-forwarded-proto").map(str::to_owned);
    let fwd_host = req.get_header_str("x-forwarded-host").map(str::to_owned);
    let view = RequestView {
        method: &method,
        scheme: &scheme,
        host: host.as_deref(),
        path_and_query: &path_and_query,
        user_agent: ua.as_deref(),
        has_authorization: req.get_header(header::AUTHORIZATION).is_some(),
        forwarded_proto: fwd_proto.as_deref(),
        forwarded_host: fwd_host.as_deref(),
    };
    let plan = policy.plan(&view, SystemTime::now());
    f.host = plan.host.to_string();
    f.url = plan.target.to_string();
    plan.route.clone_into(&mut f.route);
    f.device = plan.device.as_str();
    f.key.clone_from(&plan.cache_key);
    // The client's device header was removed in `main`; ours always replaces it.
    req.set_header(plan.device_header, plan.device.as_str());
    match &plan.decision {
        Decision::Synth(s) => {
            f.cache = "SYNTH";
            Ok(synth(s))
        }
        Decision::Pass(reason) => {
            f.pass_reason = Some(reason.label());
            if let cachet_policy::PassReason::Query(e) = reason {
                f.error = Some(format!("query not normalized, passed uncached: {e}"));
            }
            pass(policy, &plan, req, f)
        }
        Decision::Cache => cached(policy, &plan, req, f),
    }
}

fn synth(s: &Synth) -> Response {
    match s {
        Synth::Robots { body } => Response::from_status(StatusCode::OK)
            .with_header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .with_header(header::CACHE_CONTROL, "no-store")
            .with_body(body.as_str()),
        Synth::BadRequest { reason } => Response::from_status(StatusCode::BAD_REQUEST)
            .with_header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .with_header(header::CACHE_CONTROL, "no-store")
            .with_body(format!("{reason}\n")),
        _ => Response::from_status(StatusCode::INTERNAL_SERVER_ERROR),
    }
}

/// Sends `req` to the origin with the normalized target, timing it.
fn fetch(
    policy: &Policy,
    plan: &Plan<'_>,
    mut req: Request,
    f: &mut Access,
) -> Result<Response, EdgeError> {
    let (path, query) = plan.target.split_once('?').unwrap_or((&plan.target, ""));
    req.set_path(path);
    if query.is_empty() {
        req.remove_query();
    } else {
        req.set_query_str(query);
    }
    let started = Instant::now();
    let resp = req
        .send(policy.config().edge.backend.as_str())
        .map_err(|e| EdgeError::Origin(e.root_cause().to_string()));
    f.origin_ms = Some(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
    resp
}

fn pass(
    policy: &Policy,
    plan: &Plan<'_>,
    req: Request,
    f: &mut Access,
) -> Result<Response, EdgeError> {
    let mut resp = fetch(policy, plan, req, f)?;
    resp.remove_header("surrogate-key");
    resp.remove_header("surrogate-control");
    resp.set_header("x-cache", "PASS");
    f.cache = "PASS";
    Ok(resp)
}

fn header_join(resp: &Response, name: &str) -> Option<String> {
    let all = resp.get_header_all_str(name);
    (!all.is_empty()).then(|| all.join(", "))
}

/// What the client asked for that shapes the answer, kept after its request is forwarded.
struct Client {
    /// `Accept-Encoding`.
    accept: Option<String>,
    /// A `HEAD` request: headers only.
    head: bool,
}

fn cached(
    policy: &Policy,
    plan: &Plan<'_>,
    req: Request,
    f: &mut Access,
) -> Result<Response, EdgeError> {
    let client = Client {
        accept: req
            .get_header_str(header::ACCEPT_ENCODING)
            .map(str::to_owned),
        head: req.get_method_str() == "HEAD",
    };
    let tx = Transaction::lookup(CacheKey::copy_from_slice(plan.cache_key.as_bytes())).execute()?;
    if let Some(found) = tx.found()
        && !tx.must_insert_or_update()
    {
        match Meta::from_bytes(&found.user_metadata()) {
            Some(meta) if meta.pass => {
                f.pass_reason = Some("hit-for-pass");
                drop(found);
                drop(tx);
                return pass(policy, plan, req, f);
            }
            Some(meta) => {
                f.cache = "HIT";
                f.stored_bytes = Some(meta.stored_len);
                f.origin_bytes = Some(meta.origin_len);
                return deliver(&meta, &found, &client, f);
            }
            None => {}
        }
    }
    if !tx.must_insert_or_update() {
        // Found but not ours, or an unusable state: go to the origin without storing.
        drop(tx);
        return pass(policy, plan, req, f);
    }
    miss(policy, plan, tx, req, &client, f)
}

/// We hold the collapsing obligation for this key: one origin fetch serves every waiter.
fn miss(
    policy: &Policy,
    plan: &Plan<'_>,
    tx: Transaction,
    req: Request,
    client: &Client,
    f: &mut Access,
) -> Result<Response, EdgeError> {
    let mut origin_req = req;
    if client.head {
        origin_req.set_method(fastly::http::Method::GET);
    }
    origin_req.set_header(header::ACCEPT_ENCODING, "gzip");
    let resp = match fetch(policy, plan, origin_req, f) {
        Ok(r) => r,
        Err(e) => {
            let _ = tx.cancel_insert_or_update();
            return Err(e);
        }
    };
    let cc = header_join(&resp, "cache-control");
    let sc = header_join(&resp, "surrogate-control");
    let vary = header_join(&resp, "vary");
    let ce = resp
        .get_header_str(header::CONTENT_ENCODING)
        .map(str::to_owned);
    let ct = resp.get_header_str(header::CONTENT_TYPE).map(str::to_owned);
    let sk = resp.get_header_str("surrogate-key").map(str::to_owned);
    let view = ResponseView {
        status: resp.get_status().as_u16(),
        cache_control: cc.as_deref(),
        surrogate_control: sc.as_deref(),
        has_set_cookie: resp.get_header(header::SET_COOKIE).is_some(),
        vary: vary.as_deref(),
        content_encoding: ce.as_deref(),
        content_type: ct.as_deref(),
        surrogate_key: sk.as_deref(),
        content_length: resp
            .get_header_str(header::CONTENT_LENGTH)
            .and_then(|v| v.trim().parse().ok()),
    };
    let store = match policy.storability(plan, &view) {
        Storability::Store(s) => s,
        Storability::DontStore(why) => {
            f.pass_reason = Some(why.label());
            if why.is_private() {
                // Hit-for-pass: remember that this key is private so later requests skip
                // collapsing; the marker holds no content (never a private byte stored).
                let meta = Meta::marker(plan.route);
                let keys = plan.surrogate_keys.iter().map(String::as_str);
                if let Ok(w) = tx
                    .insert(policy.config().edge.hit_for_pass.0)
                    .surrogate_keys(keys)
                    .user_metadata(meta.to_bytes().into())
                    .known_length(0)
                    .execute()
                {
                    let _ = w.finish();
                }
            } else {
                let _ = tx.cancel_insert_or_update();
            }
            return Ok(finish_pass(resp, f, client.head));
        }
    };
    store_and_respond(policy, plan, tx, resp, &store, &view, client, f)
}

/// Stores the origin response (gzip when the verdict says so) and answers this client.
#[allow(
    clippy::too_many_arguments,
    reason = "one call site; a struct would only rename them"
)]
fn store_and_respond(
    policy: &Policy,
    plan: &Plan<'_>,
    tx: Transaction,
    mut resp: Response,
    store: &cachet_policy::Store,
    view: &ResponseView<'_>,
    client: &Client,
    f: &mut Access,
) -> Result<Response, EdgeError> {
    let ce = view.content_encoding;
    let origin_body = resp.take_body_bytes();
    let max = policy.config().edge.max_object_bytes;
    if origin_body.len() as u64 > max {
        let _ = tx.cancel_insert_or_update();
        f.pass_reason = Some(NoStore::TooLarge.label());
        resp.set_body(origin_body);
        return Ok(finish_pass(resp, f, client.head));
    }
    let origin_encoding = match ce.map(str::trim) {
        None | Some("") => Encoding::Identity,
        Some(e) if e.eq_ignore_ascii_case("identity") => Encoding::Identity,
        Some(e) if e.eq_ignore_ascii_case("gzip") || e.eq_ignore_ascii_case("x-gzip") => {
            Encoding::Gzip
        }
        Some(e) => Encoding::Other(e.to_ascii_lowercase()),
    };
    let (encoding, stored) = if store.compress && origin_encoding == Encoding::Identity {
        (Encoding::Gzip, object::gzip(&origin_body)?)
    } else {
        (origin_encoding, origin_body.clone())
    };
    let meta = Meta {
        v: 1,
        pass: false,
        status: view.status,
        headers: resp
            .get_header_names_str()
            .into_iter()
            .filter(|n| object::stored_header(n))
            .flat_map(|n| {
                resp.get_header_all_str(n)
                    .into_iter()
                    .map(move |v| (n.to_owned(), v.to_owned()))
            })
            .collect(),
        vary: store.vary.clone(),
        encoding,
        stored_len: stored.len() as u64,
        origin_len: origin_body.len() as u64,
        route: plan.route.to_owned(),
    };
    let keys = store.surrogate_keys.iter().map(String::as_str);
    let mut writer = tx
        .insert(store.ttl)
        .stale_while_revalidate(store.grace)
        .surrogate_keys(keys)
        .user_metadata(meta.to_bytes().into())
        .known_length(meta.stored_len)
        .execute()?;
    writer.write_all(&stored)?;
    writer.finish()?;
    f.cache = "MISS";
    f.stored_bytes = Some(meta.stored_len);
    f.origin_bytes = Some(meta.origin_len);
    respond(&meta, stored, Duration::ZERO, client, f)
}

/// Serves an origin response that is not stored: Surrogate headers stripped, `PASS`.
fn finish_pass(mut resp: Response, f: &mut Access, head: bool) -> Response {
    resp.remove_header("surrogate-key");
    resp.remove_header("surrogate-control");
    resp.set_header("x-cache", "PASS");
    if head {
        let _ = resp.take_body();
    }
    f.cache = "PASS";
    resp
}

fn deliver(
    meta: &Meta,
    found: &Found,
    client: &Client,
    f: &mut Access,
) -> Result<Response, EdgeError> {
    let body = found.to_stream()?.into_bytes();
    respond(meta, body, found.age(), client, f)
}

/// Builds the client response from stored metadata and body bytes, choosing the encoding
/// for this client: stored gzip as-is to gzip clients, inflated for the rest.
fn respond(
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
        Encoding::Gzip => object::gunzip(&stored)?,
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
    f.body_bytes = Some(body.len() as u64);
    resp.set_header(header::CONTENT_LENGTH, body.len().to_string());
    resp.set_header("x-cache", f.cache);
    if !client.head {
        resp.set_body(body);
    }
    Ok(resp)
}
