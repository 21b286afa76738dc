//! The origin: which backend to use (static, or dynamic with pooling from `[origin]`) and timed fetches.
//!
//! With `[origin].url` set, the edge registers a dynamic backend once per instance with the
//! configured keep-alive, pooling, connection cap and timeouts (the service must allow
//! dynamic backends; Viceroy does). Keep-alive rule (LIFULL): with an autoscaled origin,
//! keep pooled connections about as long as the autoscaling interval (15 s) so new origin
//! instances receive traffic. Without `url`, the static backend `[edge].backend` is used
//! with the options set on the Fastly service.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use cachet_policy::{OriginConfig, OriginEndpoint, Plan, Policy};
use fastly::backend::Backend;
use fastly::{Request, Response};

/// Name of the dynamic backend Cachet registers for `[origin].url`.
const DYNAMIC_BACKEND: &str = "cachet-origin";

/// The backend to send origin requests to: the dynamic backend for `[origin].url`
/// (registered on first use), else the static `[edge].backend`.
///
/// # Errors
/// When the dynamic backend cannot be registered (bad URL, dynamic backends disabled):
/// the message says why.
pub(crate) fn backend(policy: &Policy) -> Result<Backend, String> {
    static DYNAMIC: OnceLock<Result<Backend, String>> = OnceLock::new();
    if let Tier::Edge(shield) = tier(policy) {
        return shield;
    }
    let cfg = &policy.config().origin;
    if cfg.url.is_empty() {
        return Backend::from_name(&policy.config().edge.backend)
            .map_err(|e| format!("backend {:?}: {e}", policy.config().edge.backend));
    }
    DYNAMIC.get_or_init(|| register(cfg)).clone()
}

/// Where this instance sits when `[edge].shield` names a shield POP.
#[derive(Clone)]
pub(crate) enum Tier {
    /// No shielding configured.
    Single,
    /// On the shield POP: fetches go to the origin; requests come from edge POPs.
    Shield,
    /// On an edge POP: fetches go to the shield (its backend, or why it is unusable).
    Edge(Result<Backend, String>),
}

impl Tier {
    /// Name for the access log.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::Shield => "shield",
            Self::Edge(_) => "edge",
        }
    }
}

/// This instance's tier (Fastly shielding, `fastly::shielding::Shield`), decided once.
pub(crate) fn tier(policy: &Policy) -> Tier {
    static TIER: OnceLock<Tier> = OnceLock::new();
    TIER.get_or_init(|| {
        let edge = &policy.config().edge;
        if edge.shield.is_empty() {
            return Tier::Single;
        }
        match fastly::shielding::Shield::new(&edge.shield) {
            Ok(s) if s.running_on() => Tier::Shield,
            Ok(s) => {
                let s = s
                    .with_first_byte_timeout(policy.config().origin.first_byte_timeout.0)
                    .with_between_bytes_timeout(policy.config().origin.between_bytes_timeout.0);
                let be = if edge.shield_encrypted {
                    s.encrypted_backend()
                } else {
                    s.unencrypted_backend()
                };
                Tier::Edge(be.map_err(|e| format!("shield {:?} backend: {e:?}", edge.shield)))
            }
            Err(e) => Tier::Edge(Err(format!("unknown shield {:?}: {e:?}", edge.shield))),
        }
    })
    .clone()
}

/// Header by which a Fastly node marks a request forwarded from another Fastly node (the
/// edge POP fetching from its shield). Cachet sets it on its shield fetches too.
pub(crate) const FORWARDED_FROM_FASTLY: &str = "fastly-ff";

/// Registers the dynamic backend for `[origin].url` (`OriginConfig::endpoint`).
fn register(cfg: &OriginConfig) -> Result<Backend, String> {
    let Some(OriginEndpoint { tls, host, target }) = cfg.endpoint() else {
        return Err("no [origin].url".into());
    };
    let mut b = Backend::builder(DYNAMIC_BACKEND, target)
        .connect_timeout(cfg.connect_timeout.0)
        .first_byte_timeout(cfg.first_byte_timeout.0)
        .between_bytes_timeout(cfg.between_bytes_timeout.0)
        .enable_pooling(cfg.pooling)
        .http_keepalive_time(cfg.keepalive.0);
    if cfg.max_connections > 0 {
        b = b.max_connections(cfg.max_connections);
    }
    if !cfg.override_host.is_empty() {
        b = b.override_host(&cfg.override_host);
    }
    if tls {
        b = b.enable_ssl().sni_hostname(&host).check_certificate(&host);
    }
    match b.finish() {
        Ok(be) => Ok(be),
        // Registered by an earlier request of a reused instance.
        Err(e) => Backend::from_name(DYNAMIC_BACKEND).map_err(|_| format!("dynamic backend: {e}")),
    }
}

/// An origin response and how long it took.
pub(crate) struct Fetched {
    /// The response.
    pub resp: Response,
    /// Time to the response headers.
    pub elapsed: Duration,
}

/// Sends `req` to the origin with the plan's normalized target.
///
/// # Errors
/// The transport error's root cause (connection refused, timeout, …).
pub(crate) fn fetch(policy: &Policy, plan: &Plan<'_>, req: Request) -> Result<Fetched, String> {
    send(policy, &plan.target, req)
}

/// Sends `req` to the origin for `target` (path + normalized query).
///
/// # Errors
/// As [`fetch`].
pub(crate) fn send(policy: &Policy, target: &str, mut req: Request) -> Result<Fetched, String> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    req.set_path(path);
    if query.is_empty() {
        req.remove_query();
    } else {
        req.set_query_str(query);
    }
    let be = backend(policy)?;
    if matches!(tier(policy), Tier::Edge(_)) {
        // Tell the shield this comes from a Cachet edge tier: it keeps surrogate headers
        // in its answer so this tier can store the object under the same keys.
        req.set_header(FORWARDED_FROM_FASTLY, "cachet-edge");
    }
    let started = Instant::now();
    let resp = req.send(be).map_err(|e| e.root_cause().to_string())?;
    Ok(Fetched {
        resp,
        elapsed: started.elapsed(),
    })
}
