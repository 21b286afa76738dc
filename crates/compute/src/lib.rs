//! Cachet on Fastly Compute, free of the SDK: each request mapped onto the pure policy and the core cache over the [`host::Host`] port.
//!
//! Everything the edge app does between `Request::from_client` and writing the response
//! lives here: the access record, admin calls (`/.cachet/*`), the plan, passes with
//! RFC 9111 §4.4 invalidation, the core-cache flow (driving `cachet_http::exchange`), the shared ban
//! log in the KV store and its POP copy, delivery, the shield tier and the per-request
//! workspace. Every cache decision is `cachet-http`'s and every ban-store rule
//! `cachet_policy::banstore`'s; this crate sequences them over Fastly's primitives. The
//! edge app (`edge-app`) binds [`host::Host`] to the `fastly` crate and calls [`serve`]
//! then [`Pending::finish`]. Design: `docs/edge.md`.
//!
//! Caching is built on the core cache's transactions (request collapsing,
//! stale-while-revalidate obligations), not on read-through `Request::send` caching, which
//! Viceroy does not implement. The calls that crash or hang Viceroy (`Found::hits`,
//! `Found::stale_while_revalidate`, a second lookup while a handle is open,
//! `cache::core::replace`) are not in the port.

// The edge never panics on input (DESIGN.md conventions, 3): on top of the workspace lint table.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod host;
pub mod sandbox;

mod admin;
mod bans;
mod cache;
mod deliver;
mod origin;
mod scratch;
mod slices;

#[cfg(test)]
mod tests;

use cachet_http::access::{Access, millis};
use cachet_http::{CacheStatus, Failure, Inputs, Reply};
use cachet_policy::admin::AdminError;
use cachet_policy::inforce::{self, ConfigStatus, InForce};
use cachet_policy::{Decision, PassReason, Policy, PolicyError};
use cachet_refresh::retry_after_secs;

use crate::cache::Refresh;
use crate::host::{Fields, Host};
use crate::origin::Upstream;
use crate::sandbox::Sandbox;

/// Name of the config store holding the `config` key (TOML text).
pub const CONFIG_STORE: &str = "cachet";

/// Where the operator's configuration is read from, in words (`GET /.cachet/config`).
pub const CONFIGURED_FROM: &str = "config store \"cachet\", key \"config\"";

/// Log endpoint of the access record when the configuration does not load.
const DEFAULT_LOG_ENDPOINT: &str = "cachet_log";

/// Everything that can go wrong while serving a request; [`serve`] turns each into a
/// response (`cachet_http::reply`'s mapping).
#[derive(Debug, thiserror::Error)]
pub enum EdgeError {
    /// The configuration does not load (500).
    #[error("configuration: {0}")]
    Config(#[from] PolicyError),
    /// The origin could not be reached and no stale copy may be served (503).
    #[error("origin unreachable: {reason}")]
    Origin {
        /// What failed.
        reason: String,
        /// `Retry-After` seconds.
        retry_after_secs: u64,
    },
    /// The core cache refused an operation (503).
    #[error("cache: {0}")]
    Cache(String),
    /// A body could not be read, written, compressed or inflated (503).
    #[error("body: {0}")]
    Body(#[from] std::io::Error),
    /// An admin API call was refused (its status, `cachet_policy::admin`).
    #[error("admin: {0}")]
    Admin(#[from] AdminError),
}

impl EdgeError {
    /// The access record's `failure` for this error (`cachet_http::access::Access::failure`):
    /// `config`, `origin`, `cache`, `body` or `admin`.
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::Config(_) => "config",
            Self::Origin { .. } => "origin",
            Self::Cache(_) => "cache",
            Self::Body(_) => "body",
            Self::Admin(_) => "admin",
        }
    }
}

/// The client's request as the platform received it (`Request::from_client`).
#[derive(Debug)]
pub struct ClientRequest<B> {
    /// Method.
    pub method: String,
    /// The absolute URL.
    pub url: String,
    /// The URL's scheme.
    pub scheme: String,
    /// The URL's path.
    pub path: String,
    /// The URL's query, without `?`.
    pub query: Option<String>,
    /// Header lines (names lower-case, values bytes).
    pub headers: Fields,
    /// The body (`None` once taken).
    pub body: Option<B>,
}

impl<B> ClientRequest<B> {
    /// The first value of `name` as text (`None` when absent or not UTF-8).
    fn header_str(&self, name: &str) -> Option<&str> {
        first(&self.headers, name).and_then(cachet_http::headers::text)
    }

    /// The same request without its body (the refresh after the response).
    fn without_body(&self) -> Self {
        Self {
            method: self.method.clone(),
            url: self.url.clone(),
            scheme: self.scheme.clone(),
            path: self.path.clone(),
            query: self.query.clone(),
            headers: self.headers.clone(),
            body: None,
        }
    }
}

/// The first value of `name` (ASCII case-insensitive) in `fields`.
fn first<'a>(fields: &'a [(String, Vec<u8>)], name: &str) -> Option<&'a [u8]> {
    fields
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

/// The body of a [`Response`].
#[derive(Debug)]
pub enum Payload<B> {
    /// These bytes.
    Bytes(Vec<u8>),
    /// An origin body, streamed as it is.
    Stream(B),
    /// An origin body that is gzip the client did not ask for: inflate it as it is sent
    /// (bounded memory; a body that fails to inflate part-way ends the stream abandoned).
    Gunzip(B),
    /// No body.
    Empty,
}

/// The response for the client.
#[derive(Debug)]
pub struct Response<B> {
    /// Status code.
    pub status: u16,
    /// Header lines, in order (appended; names the platform refuses are left out).
    pub headers: Fields,
    /// The body.
    pub body: Payload<B>,
}

impl<B> From<Reply> for Response<B> {
    fn from(r: Reply) -> Self {
        Self {
            status: r.status,
            headers: r
                .headers
                .into_iter()
                .map(|(n, v)| (n.to_owned(), v.into_bytes()))
                .collect(),
            body: Payload::Bytes(r.body),
        }
    }
}

/// What a handler produced: the client response and, optionally, a refresh to run after
/// it has been sent (holding the core cache's obligation).
pub(crate) struct Outcome<H: Host> {
    /// The response for the client.
    pub resp: Response<H::Body>,
    /// Work after the response is sent.
    pub after: Vec<Box<Refresh<H>>>,
}

impl<H: Host> From<Response<H::Body>> for Outcome<H> {
    fn from(resp: Response<H::Body>) -> Self {
        Self {
            resp,
            after: Vec::new(),
        }
    }
}

/// One request's state after its response: the access record and the work left.
pub struct Pending<H: Host> {
    access: Access,
    after: Vec<Box<Refresh<H>>>,
    /// When the request arrived ([`Host::monotonic`]), for `total_ms`.
    arrived: std::time::Duration,
}

/// The request's context: the host, the policy, how it came to be in force and this
/// POP's origin tier.
pub(crate) struct Ctx<'a, H: Host> {
    pub host: &'a H,
    pub policy: &'a Policy,
    pub status: &'a ConfigStatus,
    pub origin: &'a Upstream<H::Backend>,
}

impl<H: Host> Clone for Ctx<'_, H> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<H: Host> Copy for Ctx<'_, H> {}

/// Compiles the policy from the config store's `config` key ([`CONFIG_STORE`]), or from
/// `builtin` (the configuration built into the wasm) when there is none or when it is
/// rejected (`cachet_policy::inforce`, issue 27 item 13: a typo never stops the service).
/// A rejection is logged loudly, once per call (the edge calls this when an instance
/// starts and when a reused instance finds the config store's entry changed,
/// `sandbox::Sandbox`): one JSON line `{"event":"config-rejected",…}` to the log endpoint
/// of the configuration in force and one line on stderr; `GET /.cachet/config` shows it
/// too. The fallback is the built-in configuration (an instance does not outlive its
/// bounds, so no earlier good configuration is kept).
///
/// # Errors
/// The built-in configuration's issues (`PolicyError`), when it is needed and does not
/// load either (a broken build; tests load it).
pub fn load_policy<H: Host>(host: &H, builtin: &str) -> Result<InForce<Policy>, PolicyError> {
    let text = host.config(CONFIG_STORE, "config");
    load_policy_text(host, text.as_deref(), builtin)
}

/// [`load_policy`] from the config store's `config` text already read (`None`: absent).
pub(crate) fn load_policy_text<H: Host>(
    host: &H,
    text: Option<&str>,
    builtin: &str,
) -> Result<InForce<Policy>, PolicyError> {
    let configured = text.map(Policy::from_toml);
    let chosen = inforce::choose(CONFIGURED_FROM, configured, None, || {
        Policy::from_toml(builtin)
    })?;
    if let Some(warning) = chosen.status.warning() {
        eprintln!("{warning}");
        let mut record: serde_json::Value =
            serde_json::from_str(&chosen.status.body()).unwrap_or_default();
        if let Some(o) = record.as_object_mut() {
            o.insert("event".into(), "config-rejected".into());
        }
        host.log(
            &chosen.policy.config().edge.log_endpoint,
            &record.to_string(),
        );
    }
    Ok(chosen)
}

/// Answers a request whose authority (`Host`) is missing or malformed **before** its URL
/// is read: the platform's SDK builds the URL from `Host` and panics on one it cannot
/// parse (`Host: blog.example:99999`; issue 27 item 14). The core's rule decides first
/// (`cachet_http::authority::authority`, the plan's own `400`); what it accepts is then
/// given to `parses` (the SDK's own URL parser, as `http://<authority>/`), and an
/// authority it refuses gets the same `400`. `Some`: send that response, then call
/// [`Pending::finish`]; `None`: the authority is usable: read the URL and [`serve`].
pub fn refuse_authority<H: Host>(
    host: &H,
    method: &str,
    headers: &Fields,
    parses: impl FnOnce(&str) -> bool,
) -> Option<(Response<H::Body>, Pending<H>)> {
    let arrived = host.monotonic();
    let refused = match cachet_http::authority::authority(headers.as_slice()) {
        Ok(a) if parses(&a) => return None,
        Ok(_) => cachet_http::authority::refused(),
        Err(reply) => reply,
    };
    let mut access = Access::arrived(method, host.now(), headers);
    access.cache = CacheStatus::Synth;
    access.status = refused.status;
    access.error = Some(cachet_http::authority::MALFORMED.to_owned());
    let resp: Response<H::Body> = refused.into();
    access.body_bytes = sent_bytes(method, &resp);
    let pending = Pending {
        access,
        after: Vec::new(),
        arrived,
    };
    Some((resp, pending))
}

/// The body bytes `resp` sends for a `method` request, as far as they are known before it
/// is sent: the length of in-memory bytes, `0` for none (and for any answer to `HEAD`, any
/// `204` or `304`), a streamed body's single valid `Content-Length` (`None` without one or
/// with several). A [`Payload::Gunzip`] body is counted as it is sent
/// ([`Pending::finish`]).
fn sent_bytes<B>(method: &str, resp: &Response<B>) -> Option<u64> {
    // RFC 9110 §6.4.1: no content in an answer to HEAD, nor in a 204 or 304.
    if method.eq_ignore_ascii_case("HEAD") || matches!(resp.status, 204 | 304) {
        return Some(0);
    }
    match &resp.body {
        Payload::Bytes(b) => Some(b.len() as u64),
        Payload::Empty => Some(0),
        Payload::Gunzip(_) => None,
        Payload::Stream(_) => {
            let mut lengths = resp
                .headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"));
            let one = lengths.next()?;
            if lengths.next().is_some() {
                return None;
            }
            std::str::from_utf8(&one.1).ok()?.trim().parse().ok()
        }
    }
}

/// Serves one client request of the instance `sandbox` (its policy and origin tier):
/// reserved `X-Cachet-*` fields are dropped, admin calls are answered, the rest planned and
/// served (pass, synth or the core cache). Errors become responses here
/// (`cachet_http::reply`). Send the response, then call [`Pending::finish`].
pub fn serve<H: Host>(
    host: &H,
    sandbox: &Sandbox<H::Backend>,
    mut req: ClientRequest<H::Body>,
) -> (Response<H::Body>, Pending<H>) {
    let arrived = host.monotonic();
    req.headers
        .retain(|(n, _)| !cachet_http::fields::reserved(n));
    let mut access = Access::arrived(&req.method, host.now(), &req.headers);
    let policy = sandbox.policy();
    scratch::begin(policy.ok().map(|f| &f.policy));
    let outcome = match policy {
        Ok(f) => {
            let cx = Ctx {
                host,
                policy: &f.policy,
                status: &f.status,
                origin: sandbox.origin(host, &f.policy),
            };
            dispatch(cx, req, &mut access)
        }
        Err(e) => Err(EdgeError::Config(PolicyError::Invalid(e.issues()))),
    };
    let Outcome { resp, after } = outcome.unwrap_or_else(|e| {
        access.error = Some(e.to_string());
        access.failure = Some(e.kind());
        access.cache = CacheStatus::Error;
        error_response(&e).into()
    });
    // `X-Cache` and `Age` are the engine's (every `cachet_http` answer carries both).
    access.status = resp.status;
    if access.body_bytes.is_none() {
        access.body_bytes = sent_bytes(&access.method, &resp);
    }
    (
        resp,
        Pending {
            access,
            after,
            arrived,
        },
    )
}

impl<H: Host> Pending<H> {
    /// Records which request of its instance this was (`sandbox::Sandbox::begin`).
    #[must_use]
    pub fn in_instance(mut self, n: u64) -> Self {
        self.access.instance_request = Some(n);
        self
    }

    /// After the response was sent: records how a [`Payload::Gunzip`] body went
    /// (`sent`: bytes written, or why the stream was abandoned), runs the refresh, resets
    /// the workspace and writes the access record (JSON, one line) to the configured log
    /// endpoint.
    pub fn finish(
        self,
        host: &H,
        sandbox: &Sandbox<H::Backend>,
        sent: Option<Result<u64, String>>,
    ) {
        let Self {
            mut access,
            after,
            arrived,
        } = self;
        match sent {
            Some(Ok(n)) => access.body_bytes = Some(n),
            Some(Err(e)) => {
                access.error = Some(format!(
                    "inflating the origin's gzip body: {e} (response abandoned)"
                ));
            }
            None => {}
        }
        access.total_ms = Some(millis(host.monotonic().saturating_sub(arrived)));
        let policy = sandbox.policy();
        if let Ok(f) = policy {
            let cx = Ctx {
                host,
                policy: &f.policy,
                status: &f.status,
                origin: sandbox.origin(host, &f.policy),
            };
            for job in after {
                job.run(cx, &mut access);
            }
        }
        scratch::end(host, &mut access);
        let endpoint = policy.map_or(DEFAULT_LOG_ENDPOINT, |f| {
            f.policy.config().edge.log_endpoint.as_str()
        });
        if let Ok(json) = serde_json::to_string(&access) {
            host.log(endpoint, &json);
        }
    }
}

/// The one place core and platform errors become responses (the mapping itself is
/// `cachet_http::reply`'s).
fn error_response<B>(e: &EdgeError) -> Response<B> {
    let retry = retry_after_secs(cachet_http::exchange::RETRY_AFTER);
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
    reply.into()
}

fn dispatch<H: Host>(
    cx: Ctx<'_, H>,
    req: ClientRequest<H::Body>,
    f: &mut Access,
) -> Result<Outcome<H>, EdgeError> {
    f.tier = cx.origin.tier.label();
    // Admin look-alikes (`/.CACHET/ban`, `/%2ecachet/ban`) are admin calls too: a token
    // meant for the admin API never reaches the origin.
    if let Some(path) = cachet_policy::admin::admin_path(&req.path) {
        "admin".clone_into(&mut f.route);
        f.cache = CacheStatus::Synth;
        return admin::handle(cx, &path, req, f).map(Outcome::from);
    }
    handle(cx, req, f)
}

fn handle<H: Host>(
    cx: Ctx<'_, H>,
    mut req: ClientRequest<H::Body>,
    f: &mut Access,
) -> Result<Outcome<H>, EdgeError> {
    let inputs = inputs(&req);
    let plan = cx.policy.plan(&inputs.view(), cx.host.now());
    f.planned(&plan);
    // The client's device header was removed in `serve`; ours always replaces it.
    deliver::set(&mut req.headers, plan.device_header, plan.device.as_str());
    match &plan.decision {
        Decision::Synth(s) => {
            f.cache = CacheStatus::Synth;
            Ok(Response::from(cachet_http::reply::synth(s)).into())
        }
        Decision::Pass(reason) => {
            f.pass_reason = Some(reason.label());
            if let PassReason::Query(e) = reason {
                f.error = Some(format!("query not normalized, passed uncached: {e}"));
            }
            cache::pass(cx, &plan, req, f)
        }
        Decision::Cache => match plan.stitch {
            Some(want) => slices::serve(cx, want, req, f, |cx, req, f| {
                cache::cached(cx, &plan, req, f)
            }),
            None => cache::cached(cx, &plan, req, f),
        },
    }
}

/// The request fields the policy plans from (`cachet_http::Inputs`, read from the
/// header bytes), owned so the request can be moved on.
fn inputs<B>(req: &ClientRequest<B>) -> Inputs {
    let target = match &req.query {
        Some(q) => format!("{}?{q}", req.path),
        None => req.path.clone(),
    };
    Inputs::read(&req.method, &req.scheme, &target, req.headers.as_slice())
}
