//! Cachet on Fastly Compute: maps each request onto the pure policy and the core cache.
//!
//! Caching is built on `fastly::cache::core::Transaction` (request collapsing,
//! stale-while-revalidate obligations), not on read-through `Request::send` caching, which
//! Viceroy does not implement (DESIGN.md). The calls that crash or hang Viceroy
//! (`Found::hits`, `Found::stale_while_revalidate`, a second lookup while a handle is
//! open, `cache::core::replace`) are not used.
//!
//! Modules: [`admin`] (the `/.cachet/*` API), [`bans`] (the shared ban log in the KV
//! store), [`cache`] (lookup, miss, refresh-ahead, stale, revalidation), [`deliver`]
//! (responses from stored objects), [`origin`] (backend and fetch), [`scratch`] (the
//! per-request workspace). The access-log record is `cachet_http::access::Access`.

mod admin;
mod bans;
mod cache;
mod deliver;
mod origin;
mod scratch;

use std::sync::OnceLock;
use std::time::SystemTime;

use cachet_http::{CacheStatus, Failure, Inputs, Reply};
use cachet_policy::admin::AdminError;
use cachet_policy::{Decision, PassReason, Policy, PolicyError, Synth};
use cachet_refresh::retry_after_secs;
use fastly::cache::core::CacheError;
use fastly::{ConfigStore, Request, Response};

use crate::cache::Job;
use cachet_http::access::Access;

/// Configuration built into the wasm; a `config` entry in the `cachet` config store
/// replaces it without a redeploy.
const DEFAULT_CONFIG: &str = include_str!("../cachet.toml");

/// Name of the config store holding the `config` key (TOML text).
const CONFIG_STORE: &str = "cachet";

/// Everything that can go wrong in the adapter.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EdgeError {
    /// The configuration does not load.
    #[error("configuration: {0}")]
    Config(#[from] PolicyError),
    /// The origin could not be reached and no stale copy may be served.
    #[error("origin unreachable: {reason}")]
    Origin {
        /// What failed.
        reason: String,
        /// `Retry-After` seconds.
        retry_after_secs: u64,
    },
    /// The core cache refused an operation.
    #[error("cache: {0}")]
    Cache(#[from] CacheError),
    /// A body could not be read, written, compressed or inflated.
    #[error("body: {0}")]
    Body(#[from] std::io::Error),
    /// An admin API call was refused.
    #[error("admin: {0}")]
    Admin(#[from] AdminError),
}

/// The one place core and platform errors become HTTP responses (the mapping itself is
/// `cachet_http::reply`'s).
fn error_response(e: &EdgeError) -> Response {
    let retry = retry_after_secs(cachet_http::drive::RETRY_AFTER);
    let reply = match e {
        EdgeError::Admin(a) => cachet_http::reply::admin_error(a),
        EdgeError::Config(_) => cachet_http::reply::failure(Failure::Config),
        EdgeError::Origin {
            retry_after_secs, ..
        } => cachet_http::reply::failure(Failure::Origin {
            retry_after_secs: *retry_after_secs,
        }),
        EdgeError::Cache(_) | EdgeError::Body(_) => cachet_http::reply::failure(Failure::Cache {
            retry_after_secs: retry,
        }),
    };
    to_response(reply)
}

/// Writes a `cachet_http::Reply` as a Fastly response.
pub(crate) fn to_response(r: Reply) -> Response {
    let mut resp = Response::from_status(r.status);
    for (n, v) in r.headers {
        resp.append_header(n, v);
    }
    resp.set_body(r.body);
    resp
}

/// The compiled policy, built once per instance from the config store or the built-in
/// configuration.
pub(crate) fn policy() -> Result<&'static Policy, &'static PolicyError> {
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

/// What a handler produced: the client response and, optionally, work to do after it has
/// been sent (a background refresh holding the core cache's obligation).
pub(crate) struct Outcome {
    /// The response for the client.
    pub resp: Response,
    /// Work after the response is sent.
    pub after: Option<Box<Job>>,
    /// The body is gzip to inflate as it is sent (`deliver::unstored`).
    pub inflate: bool,
}

impl From<Response> for Outcome {
    fn from(resp: Response) -> Self {
        Self {
            resp,
            after: None,
            inflate: false,
        }
    }
}

/// Sends the response; an [`Outcome::inflate`] body is streamed through a gzip decoder
/// (bounded memory: the decoder's window and a copy buffer). A body that fails to inflate
/// part-way ends the stream abandoned, and the access log records the error.
fn send(resp: Response, inflate: bool, f: &mut Access) {
    if !inflate {
        resp.send_to_client();
        return;
    }
    let mut resp = resp;
    let body = resp.take_body();
    let mut out = resp.stream_to_client();
    match std::io::copy(&mut flate2::read::GzDecoder::new(body), &mut out) {
        Ok(n) => {
            f.body_bytes = Some(n);
            let _ = out.finish();
        }
        Err(e) => {
            f.error = Some(format!(
                "inflating the origin's gzip body: {e} (response abandoned)"
            ));
            let _ = out.abandon();
        }
    }
}

fn main() {
    let mut req = Request::from_client();
    let names: Vec<String> = req
        .get_header_names_str()
        .into_iter()
        .filter(|n| cachet_http::fields::reserved(n))
        .map(str::to_owned)
        .collect();
    for n in names {
        req.remove_header(n.as_str());
    }
    let mut access = Access {
        method: req.get_method_str().to_owned(),
        cache: CacheStatus::Error,
        ..Access::default()
    };
    scratch::begin();
    let outcome = match policy() {
        Ok(p) => dispatch(p, req, &mut access),
        Err(e) => Err(EdgeError::Config(PolicyError::Invalid(e.issues()))),
    };
    let Outcome {
        resp,
        after,
        inflate,
    } = outcome.unwrap_or_else(|e| {
        access.error = Some(e.to_string());
        access.cache = CacheStatus::Error;
        error_response(&e).into()
    });
    // `X-Cache` and `Age` are the engine's (every `cachet_http` answer carries both).
    access.status = resp.get_status().as_u16();
    send(resp, inflate, &mut access);
    if let (Some(job), Ok(p)) = (after, policy()) {
        job.run(p, &mut access);
    }
    scratch::end(&mut access);
    write_access(&access);
}

/// Writes the access-log record to the configured log endpoint (stdout in Viceroy).
fn write_access(access: &Access) {
    use std::io::Write;
    let endpoint = policy().map_or("cachet_log", |p| p.config().edge.log_endpoint.as_str());
    if let (Ok(mut ep), Ok(json)) = (
        fastly::log::Endpoint::try_from_name(endpoint),
        serde_json::to_string(access),
    ) {
        let _ = writeln!(ep, "{json}");
    }
}

fn dispatch(policy: &Policy, req: Request, f: &mut Access) -> Result<Outcome, EdgeError> {
    f.tier = origin::tier(policy).label();
    // Admin look-alikes (`/.CACHET/ban`, `/%2ecachet/ban`) are admin calls too: a token
    // meant for the admin API never reaches the origin.
    if let Some(path) = cachet_policy::admin::admin_path(req.get_path()) {
        "admin".clone_into(&mut f.route);
        f.cache = CacheStatus::Synth;
        return admin::handle(policy, &path, req, f).map(Outcome::from);
    }
    handle(policy, req, f)
}

fn handle(policy: &Policy, mut req: Request, f: &mut Access) -> Result<Outcome, EdgeError> {
    let inputs = inputs(&req);
    let view = inputs.view();
    let plan = policy.plan(&view, SystemTime::now());
    f.planned(&plan);
    // The client's device header was removed in `main`; ours always replaces it.
    req.set_header(plan.device_header, plan.device.as_str());
    match &plan.decision {
        Decision::Synth(s) => {
            f.cache = CacheStatus::Synth;
            Ok(synth(s).into())
        }
        Decision::Pass(reason) => {
            f.pass_reason = Some(reason.label());
            if let PassReason::Query(e) = reason {
                f.error = Some(format!("query not normalized, passed uncached: {e}"));
            }
            cache::pass(policy, &plan, req, f)
        }
        Decision::Cache => cache::cached(policy, &plan, req, f),
    }
}

/// The request fields the policy plans from (`cachet_http::Inputs`, read from the
/// header bytes), owned so the request can be moved on.
pub(crate) fn inputs(req: &Request) -> Inputs {
    let url = req.get_url();
    let target = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    };
    Inputs::read(
        req.get_method_str(),
        url.scheme(),
        &target,
        &deliver::ReqHeaders(req),
    )
}

fn synth(s: &Synth) -> Response {
    to_response(cachet_http::reply::synth(s))
}
