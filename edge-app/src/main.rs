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
//! (responses from stored objects), [`origin`] (backend and fetch), [`access`] (the JSON
//! access log), [`scratch`] (the per-request workspace).

mod access;
mod admin;
mod bans;
mod cache;
mod deliver;
mod origin;
mod scratch;

use std::sync::OnceLock;
use std::time::SystemTime;

use cachet_http::CacheStatus;
use cachet_policy::admin::{ADMIN_PREFIX, AdminError};
use cachet_policy::{Decision, PassReason, Policy, PolicyError, RequestView, Synth};
use fastly::cache::core::CacheError;
use fastly::http::{StatusCode, header};
use fastly::{ConfigStore, Request, Response};

use crate::access::Access;
use crate::cache::Job;

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

/// The one place core and platform errors become HTTP responses.
fn error_response(e: &EdgeError) -> Response {
    if let EdgeError::Admin(a) = e {
        let mut resp = Response::from_status(a.status())
            .with_header(header::CONTENT_TYPE, "application/json")
            .with_header(header::CACHE_CONTROL, "no-store")
            .with_body(a.body());
        match a {
            AdminError::Unauthorized => resp.set_header(header::WWW_AUTHENTICATE, "Bearer"),
            AdminError::MethodNotAllowed { allow } => resp.set_header(header::ALLOW, *allow),
            AdminError::Store(_) => resp.set_header(header::RETRY_AFTER, "5"),
            _ => {}
        }
        return resp;
    }
    let (status, reason, retry_after) = match e {
        EdgeError::Config(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "edge configuration invalid",
            None,
        ),
        EdgeError::Origin {
            retry_after_secs, ..
        } => (
            StatusCode::SERVICE_UNAVAILABLE,
            "origin unavailable",
            Some(*retry_after_secs),
        ),
        EdgeError::Cache(_) | EdgeError::Body(_) | EdgeError::Admin(_) => {
            (StatusCode::SERVICE_UNAVAILABLE, "edge cache error", Some(5))
        }
    };
    let mut resp = Response::from_status(status)
        .with_header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .with_header(header::CACHE_CONTROL, "no-store")
        .with_body(format!("{reason}\n"));
    if let Some(s) = retry_after {
        resp.set_header(header::RETRY_AFTER, s.to_string());
    }
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
}

impl From<Response> for Outcome {
    fn from(resp: Response) -> Self {
        Self { resp, after: None }
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
        cache: CacheStatus::Error,
        ..Access::default()
    };
    scratch::begin();
    let outcome = match policy() {
        Ok(p) => dispatch(p, req, &mut access),
        Err(e) => Err(EdgeError::Config(PolicyError::Invalid(e.issues()))),
    };
    let Outcome { mut resp, after } = outcome.unwrap_or_else(|e| {
        access.error = Some(e.to_string());
        access.cache = CacheStatus::Error;
        error_response(&e).into()
    });
    if resp.get_header(header::AGE).is_none() {
        resp.set_header(header::AGE, "0");
    }
    resp.set_header("x-cache", access.cache.as_str());
    access.status = resp.get_status().as_u16();
    resp.send_to_client();
    if let (Some(job), Ok(p)) = (after, policy()) {
        job.run(p, &mut access);
    }
    scratch::end(&mut access);
    access.write();
}

fn dispatch(policy: &Policy, req: Request, f: &mut Access) -> Result<Outcome, EdgeError> {
    f.tier = origin::tier(policy).label();
    if req.get_path().starts_with(ADMIN_PREFIX) {
        "admin".clone_into(&mut f.route);
        f.cache = CacheStatus::Synth;
        return admin::handle(policy, req, f).map(Outcome::from);
    }
    handle(policy, req, f)
}

fn handle(policy: &Policy, mut req: Request, f: &mut Access) -> Result<Outcome, EdgeError> {
    let inputs = Inputs::of(&req);
    let view = inputs.view();
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
            f.cache = CacheStatus::Synth;
            Ok(synth(s).into())
        }
        Decision::Pass(reason) => {
            f.pass_reason = Some(reason.label());
            if let PassReason::Query(e) = reason {
                f.error = Some(format!("query not normalized, passed uncached: {e}"));
            }
            cache::pass(policy, &plan, req, f).map(Outcome::from)
        }
        Decision::Cache => cache::cached(policy, &plan, req, f),
    }
}

/// The request fields the policy reads, owned so the request can be moved on.
pub(crate) struct Inputs {
    method: String,
    scheme: String,
    host: Option<String>,
    path_and_query: String,
    user_agent: Option<Vec<u8>>,
    has_authorization: bool,
    forwarded_proto: Option<String>,
    forwarded_host: Option<String>,
}

impl Inputs {
    /// Reads them from a request.
    pub fn of(req: &Request) -> Self {
        let url = req.get_url();
        Self {
            method: req.get_method_str().to_owned(),
            scheme: url.scheme().to_owned(),
            host: req.get_header_str(header::HOST).map(str::to_owned),
            path_and_query: match url.query() {
                Some(q) => format!("{}?{q}", url.path()),
                None => url.path().to_owned(),
            },
            user_agent: req
                .get_header(header::USER_AGENT)
                .map(|v| v.as_bytes().to_vec()),
            has_authorization: req.get_header(header::AUTHORIZATION).is_some(),
            forwarded_proto: req.get_header_str("x-forwarded-proto").map(str::to_owned),
            forwarded_host: req.get_header_str("x-forwarded-host").map(str::to_owned),
        }
    }

    /// The borrowed view the policy plans from.
    pub fn view(&self) -> RequestView<'_> {
        RequestView {
            method: &self.method,
            scheme: &self.scheme,
            host: self.host.as_deref(),
            path_and_query: &self.path_and_query,
            user_agent: self.user_agent.as_deref(),
            has_authorization: self.has_authorization,
            forwarded_proto: self.forwarded_proto.as_deref(),
            forwarded_host: self.forwarded_host.as_deref(),
        }
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
