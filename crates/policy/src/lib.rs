//! Cachet's pure edge cache policy: one config, one per-request plan, one storage verdict.
//!
//! Adapters (the Fastly edge app, the Envoy filter) build a borrowed [`RequestView`], call
//! [`Policy::plan`], perform the I/O the [`Plan`] asks for, and ask
//! [`Policy::storability`] about the origin's response. Nothing here reads the clock,
//! randomness or the network: `now` is a parameter.
//!
//! Sources of the rules: Hatena Blog on Varnish (2020) for the device-class `Vary`, query
//! normalization, gzip storage and the design-CSS story; RFC 9111 for what a shared cache
//! may store; Fastly's documentation for `Surrogate-Key` limits and TTL precedence.
#![forbid(unsafe_code)]

pub mod admin;
pub mod banindex;
pub mod banlog;
pub mod banstore;
pub mod check;
pub mod config;
pub mod etcd;
pub mod glob;
pub mod inforce;
pub mod object;
pub mod plan;
pub mod response;
pub mod settings;
pub mod sfv;

use std::borrow::Cow;
use std::time::SystemTime;

use cachet_device::Classifier;
use cachet_query::Normalizer;

pub use cachet_device::{
    DEFAULT_PC_FILL_USER_AGENT, DEFAULT_SMARTPHONE_FILL_USER_AGENT, DeviceClass, Profile,
};
pub use config::{Config, ConfigIssue, EdgeConfig, HumanDuration, RouteAction, RouteConfig};
pub use plan::{Decision, PassReason, Plan, RequestView, Stitch, Synth};
pub use response::{
    CacheControl, NoStore, ResponseView, Storability, Store, VaryRewrite, accepts_encoding,
};
pub use settings::{
    AdminConfig, BansConfig, EnvoyConfig, FillPath, OriginConfig, OriginEndpoint,
    RESERVED_FIELD_PREFIX, WorkspaceMode, WorkspaceSettings,
};

use glob::Glob;

/// The crate's error type.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The configuration text could not be read as the schema; `path` locates the value
    /// (`routes[3].ttl`), empty for syntax errors whose message carries line and column.
    #[error("{}{message}", if path.is_empty() { String::new() } else { format!("{path}: ") })]
    Parse {
        /// Location of the offending value.
        path: String,
        /// What the parser said.
        message: String,
    },
    /// The configuration parsed but is not valid; every issue is listed.
    #[error("invalid configuration:\n{}", .0.iter().map(|i| format!("  {i}")).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<ConfigIssue>),
    /// The configuration text is larger than [`config::MAX_CONFIG_BYTES`].
    #[error("configuration is {len} bytes; at most {limit}")]
    TooLarge {
        /// Size given.
        len: usize,
        /// The limit.
        limit: usize,
    },
}

impl PolicyError {
    /// Every issue as `(path, message)`, for `cachet config check`.
    pub fn issues(&self) -> Vec<ConfigIssue> {
        match self {
            Self::Invalid(v) => v.clone(),
            Self::Parse { path, message } => vec![ConfigIssue {
                path: if path.is_empty() {
                    "(syntax)".into()
                } else {
                    path.clone()
                },
                message: message.clone(),
            }],
            Self::TooLarge { .. } => vec![ConfigIssue {
                path: "(file)".into(),
                message: self.to_string(),
            }],
        }
    }
}

struct CompiledRoute {
    host: Option<Glob>,
    path: Option<Glob>,
}

/// A validated configuration, compiled for per-request use. Immutable; share it.
pub struct Policy {
    config: Config,
    classifier: Classifier,
    normalizer: Normalizer,
    routes: Vec<CompiledRoute>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Policy {
    /// Compiles a configuration.
    ///
    /// # Errors
    /// [`PolicyError::Invalid`] with every issue [`Config::validate`] finds.
    pub fn new(config: Config) -> Result<Self, PolicyError> {
        let issues = config.validate();
        if !issues.is_empty() {
            return Err(PolicyError::Invalid(issues));
        }
        let invalid = |path: &str, e: &dyn std::fmt::Display| {
            PolicyError::Invalid(vec![ConfigIssue {
                path: path.into(),
                message: e.to_string(),
            }])
        };
        let classifier = Classifier::new(&config.device).map_err(|e| invalid("device", &e))?;
        let normalizer = Normalizer::new(&config.query).map_err(|e| invalid("query", &e))?;
        let mut routes = Vec::with_capacity(config.routes.len());
        for (i, r) in config.routes.iter().enumerate() {
            let compile = |field: &str, p: &Option<String>| {
                p.as_deref()
                    .map(Glob::new)
                    .transpose()
                    .map_err(|e| invalid(&format!("routes[{i}].{field}"), &e))
            };
            routes.push(CompiledRoute {
                host: compile("host", &r.host)?,
                path: compile("path", &r.path)?,
            });
        }
        Ok(Self {
            config,
            classifier,
            normalizer,
            routes,
        })
    }

    /// Parses, validates and compiles TOML configuration text.
    ///
    /// # Errors
    /// As [`Config::from_toml`].
    pub fn from_toml(text: &str) -> Result<Self, PolicyError> {
        Self::new(Config::from_toml(text)?)
    }

    /// The configuration this policy was built from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The device classifier.
    pub fn classifier(&self) -> &Classifier {
        &self.classifier
    }

    /// The query normalizer.
    pub fn normalizer(&self) -> &Normalizer {
        &self.normalizer
    }

    /// The early-refresh policy of the plan's route (`none` without a route).
    pub fn early_refresh(&self, plan: &Plan<'_>) -> cachet_refresh::EarlyRefresh {
        plan.route_index
            .and_then(|i| self.config.routes.get(i))
            .map_or(cachet_refresh::EarlyRefresh::None, |r| r.early_refresh)
    }

    /// Name of the header that carries the device class to the origin.
    pub fn device_header(&self) -> &str {
        self.classifier.header()
    }

    /// Index of the first route matching `host` (already lower-cased) and `path`.
    fn route_for(&self, host: &str, path: &str) -> Option<usize> {
        self.config
            .routes
            .iter()
            .zip(&self.routes)
            .position(|(r, c)| {
                c.host
                    .as_ref()
                    .is_none_or(|g| g.matches_ignore_case(host.as_bytes()))
                    && r.path_prefix.as_deref().is_none_or(|p| path.starts_with(p))
                    && c.path.as_ref().is_none_or(|g| g.matches(path.as_bytes()))
            })
    }

    /// Decides what to do with one request. Pure and total: any input yields a plan.
    ///
    /// Order: a missing or malformed `Host` is a 400; `/robots.txt` (when enabled) is
    /// synthesized; the device class is computed for every request (override cookie, then
    /// `Sec-CH-UA-Mobile`, then the User-Agent: `Classifier::classify_request`); non-`GET`/`HEAD`,
    /// a `GET`/`HEAD` with content, pass routes and unmatched requests pass, and
    /// `Authorization` when `[edge].cache_authorized` is off (RFC 9111 §3.5); a query
    /// beyond the normalizer's bounds passes as received (fail closed, logged by the
    /// adapter); otherwise the request is cached under `host + normalized target + device`,
    /// plus its credentials' slot when it carries `Authorization` ([`Plan::authorized`]).
    pub fn plan<'a>(&'a self, req: &RequestView<'a>, now: SystemTime) -> Plan<'a> {
        let device = self.classifier.classify_request(
            req.user_agent.unwrap_or_default(),
            req.ch_ua_mobile,
            req.cookie,
        );
        let (raw_path, _) = req
            .path_and_query
            .split_once('?')
            .unwrap_or((req.path_and_query, ""));
        // Routes, robots.txt and the key see the normalized path (RFC 3986 §6.2.2), so an
        // alias (`/%61dmin`, `/x/../admin`) never escapes a pass route or a ban.
        let path = cachet_query::normalize_path(raw_path);
        let path: &str = &path;
        let mut plan = Plan {
            route: "-",
            route_index: None,
            decision: Decision::Pass(PassReason::NoRoute),
            device,
            device_header: self.classifier.header(),
            vary_device: false,
            target: Cow::Borrowed(req.path_and_query),
            host: Cow::Borrowed(""),
            cache_key: String::new(),
            authorized: false,
            slice: None,
            stitch: None,
            ttl: std::time::Duration::ZERO,
            ttl_override: false,
            grace: std::time::Duration::ZERO,
            keep: std::time::Duration::ZERO,
            surrogate_keys: Vec::new(),
            compress: false,
            gzip_level: config::DEFAULT_GZIP_LEVEL,
            decided_at: now,
        };
        let Some(host) = req
            .host
            .and_then(|h| plan::normalize_authority(h, req.scheme))
        else {
            plan.decision = Decision::Synth(Synth::BadRequest {
                reason: "missing or malformed Host header",
            });
            return plan;
        };
        if !req.path_and_query.starts_with('/') {
            plan.host = host;
            plan.decision = Decision::Synth(Synth::BadRequest {
                reason: "request target must start with '/'",
            });
            return plan;
        }
        if self.config.robots.enabled && path == "/robots.txt" {
            plan.decision = Decision::Synth(Synth::Robots {
                body: self.robots(req, &host),
            });
            plan.host = host;
            return plan;
        }
        plan.host = host;
        if let Some(i) = self.route_for(&plan.host, path) {
            let r = &self.config.routes[i];
            plan.route = &r.name;
            plan.route_index = Some(i);
            plan.vary_device = r.vary_device;
            plan.ttl = r.ttl.0;
            plan.ttl_override = r.ttl_override;
            plan.grace = r.grace.0;
            plan.keep = r.keep.0;
            plan.compress = r.compress;
            plan.gzip_level = r.gzip_level;
            plan.decision = if r.action.is_cache() {
                Decision::Cache
            } else {
                Decision::Pass(PassReason::Route)
            };
        }
        match self.normalizer.normalize_target(req.path_and_query) {
            Ok(t) => plan.target = t,
            Err(e) => {
                // Fail closed: forward as received, never cache (documented in cachet-query).
                if plan.decision == Decision::Cache {
                    plan.decision = Decision::Pass(PassReason::Query(e));
                }
                return plan;
            }
        }
        if plan.decision != Decision::Cache {
            return plan;
        }
        if let Some(why) = plan::request_pass(req, self.config.edge.cache_authorized) {
            plan.decision = Decision::Pass(why);
            return plan;
        }
        let r = &self.config.routes[plan.route_index.unwrap_or_default()];
        plan.surrogate_keys = r
            .surrogate_keys
            .iter()
            .map(|t| plan::fill_key_template(t, &plan.host, path, &r.name))
            .filter(|k| !k.is_empty())
            .collect();
        plan.set_cache_key(req, r.slice_bytes);
        plan
    }

    /// The robots.txt body for this request: `{scheme}` and `{host}` from the request, or
    /// from `X-Forwarded-Proto` / `X-Forwarded-Host` when `[edge].trust_forwarded` and they
    /// are well-formed (seed: Hatena's ngx_mruby robots.txt).
    fn robots(&self, req: &RequestView<'_>, host: &str) -> String {
        let trust = self.config.edge.trust_forwarded;
        let scheme = req
            .forwarded_proto
            .filter(|_| trust)
            .map(|p| p.split(',').next().unwrap_or("").trim())
            .filter(|p| p.eq_ignore_ascii_case("http") || p.eq_ignore_ascii_case("https"))
            .unwrap_or(if req.scheme.eq_ignore_ascii_case("https") {
                "https"
            } else {
                "http"
            })
            .to_ascii_lowercase();
        let fwd_host = req
            .forwarded_host
            .filter(|_| trust)
            .map(|h| h.split(',').next().unwrap_or("").trim())
            .and_then(|h| plan::normalize_authority(h, &scheme));
        let host = fwd_host.as_deref().unwrap_or(host);
        self.config
            .robots
            .template
            .replace("{scheme}", &scheme)
            .replace("{host}", host)
    }
}
