//! The origin: which backend to use (the shield's, static, or dynamic with pooling from `[origin]`) and timed fetches.
//!
//! With `[origin].url` set, the edge registers a dynamic backend on first use with the
//! configured keep-alive, pooling, connection cap and timeouts (the service must allow
//! dynamic backends; Viceroy does). Keep-alive rule (LIFULL): with an autoscaled origin,
//! keep pooled connections about as long as the autoscaling interval (15 s) so new origin
//! instances receive traffic. Without `url`, the static backend `[edge].backend` is used
//! with the options set on the Fastly service.

use std::cell::OnceCell;
use std::time::Duration;

use cachet_policy::{OriginEndpoint, Policy};

use crate::host::{BackendSpec, Fields, Host, OriginRequest, OriginResponse, ShieldPos};

/// The name of the dynamic backend Cachet registers for `[origin]` (`cachet-origin-` and a
/// hash of its settings): a reused instance whose configuration changed registers the new
/// backend under a new name instead of reusing the old one's target and timeouts.
fn dynamic_backend(cfg: &cachet_policy::OriginConfig) -> String {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{cfg:?}").hash(&mut h);
    format!("cachet-origin-{:016x}", h.finish())
}

/// Header by which a Fastly node marks a request forwarded from another Fastly node (the
/// edge POP fetching from its shield). Cachet sets it on its shield fetches too.
pub(crate) const FORWARDED_FROM_FASTLY: &str = "fastly-ff";

/// Where this instance sits when `[edge].shield` names a shield POP.
pub(crate) enum Tier<K> {
    /// No shielding configured.
    Single,
    /// On the shield POP: fetches go to the origin; requests come from edge POPs.
    Shield,
    /// On an edge POP: fetches go to the shield (its backend, or why it is unusable).
    Edge(Result<K, String>),
}

impl<K> Tier<K> {
    /// Name for the access log.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::Shield => "shield",
            Self::Edge(_) => "edge",
        }
    }
}

/// This instance's tier and origin backend, decided once per policy of an instance
/// (`sandbox::Sandbox::origin`): a reused instance asks for its shield and registers its
/// dynamic backend once.
pub(crate) struct Upstream<K> {
    pub tier: Tier<K>,
    dynamic: OnceCell<Result<K, String>>,
}

impl<K: Clone> Upstream<K> {
    /// The tier from `[edge].shield` (`fastly::shielding::Shield`).
    pub fn new<H: Host<Backend = K>>(host: &H, policy: &Policy) -> Self {
        let edge = &policy.config().edge;
        let origin = &policy.config().origin;
        let tier = if edge.shield.is_empty() {
            Tier::Single
        } else {
            match host.shield(
                &edge.shield,
                origin.first_byte_timeout.0,
                origin.between_bytes_timeout.0,
                edge.shield_encrypted,
            ) {
                Ok(ShieldPos::RunningOn) => Tier::Shield,
                Ok(ShieldPos::Backend(be)) => {
                    Tier::Edge(be.map_err(|e| format!("shield {:?} backend: {e}", edge.shield)))
                }
                Err(e) => Tier::Edge(Err(format!("unknown shield {:?}: {e}", edge.shield))),
            }
        };
        Self {
            tier,
            dynamic: OnceCell::new(),
        }
    }

    /// The backend to send origin requests to: the shield's on an edge POP, the dynamic
    /// backend for `[origin].url` (registered on first use), else the static
    /// `[edge].backend`.
    ///
    /// # Errors
    /// When the backend cannot be had (bad URL, dynamic backends disabled): why.
    fn backend<H: Host<Backend = K>>(&self, host: &H, policy: &Policy) -> Result<K, String> {
        if let Tier::Edge(shield) = &self.tier {
            return shield.clone();
        }
        let cfg = &policy.config().origin;
        if cfg.url.is_empty() {
            let name = &policy.config().edge.backend;
            return host
                .backend(name)
                .map_err(|e| format!("backend {name:?}: {e}"));
        }
        self.dynamic
            .get_or_init(|| {
                let Some(OriginEndpoint {
                    tls,
                    host: h,
                    target,
                }) = cfg.endpoint()
                else {
                    return Err("no [origin].url".into());
                };
                let name = dynamic_backend(cfg);
                let spec = BackendSpec {
                    name: &name,
                    target: &target,
                    tls_host: tls.then_some(h.as_str()),
                    config: cfg,
                };
                // Registered by an earlier request of a reused instance: use it.
                host.register_backend(&spec).or_else(|e| {
                    host.backend(&name)
                        .map_err(|_| format!("dynamic backend: {e}"))
                })
            })
            .clone()
    }
}

/// An origin response and how long it took.
pub(crate) struct Fetched<B> {
    /// The response.
    pub resp: OriginResponse<B>,
    /// Time to the response headers.
    pub elapsed: Duration,
}

/// Sends a request for `target` (path + normalized query) to the origin: `url` is the
/// client's URL, the rest as [`OriginRequest`].
///
/// # Errors
/// Why no backend is usable, or the transport error's root cause.
pub(crate) fn send<H: Host>(
    cx: crate::Ctx<'_, H>,
    target: &str,
    method: String,
    url: String,
    mut headers: Fields,
    body: Option<H::Body>,
) -> Result<Fetched<H::Body>, String> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let be = cx.origin.backend(cx.host, cx.policy)?;
    if matches!(cx.origin.tier, Tier::Edge(_)) {
        // Tell the shield this comes from a Cachet edge tier: it keeps surrogate headers
        // in its answer so this tier can store the object under the same keys.
        crate::deliver::set(&mut headers, FORWARDED_FROM_FASTLY, "cachet-edge");
    }
    let req = OriginRequest {
        method,
        url,
        path: path.to_owned(),
        query: query.to_owned(),
        headers,
        body,
    };
    let started = cx.host.monotonic();
    let resp = cx.host.send(&be, req)?;
    Ok(Fetched {
        resp,
        elapsed: cx.host.monotonic().saturating_sub(started),
    })
}
