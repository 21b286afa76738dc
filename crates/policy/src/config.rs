//! The one configuration schema both adapters read: TOML for people, the same as JSON in Envoy.

use std::time::Duration;

use cachet_device::DeviceConfig;
use cachet_query::QueryConfig;
use cachet_refresh::{CollapseConfig, EarlyRefresh};
use serde::{Deserialize, Serialize};

use crate::PolicyError;
use crate::glob::Glob;
use crate::settings::{AdminConfig, BansConfig, EnvoyConfig, OriginConfig, WorkspaceSettings};

/// Largest configuration text accepted, in bytes (a Fastly config-store value holds 8,000
/// characters; an Envoy plugin configuration has no such limit, so we bound it ourselves).
pub const MAX_CONFIG_BYTES: usize = 256 * 1024;

/// Most routes one configuration may declare; routes are matched in order per request.
pub const MAX_ROUTES: usize = 256;

/// Longest TTL, grace or keep accepted: one year. Longer values are almost always unit
/// mistakes (`ttl = 86400` meant as seconds is fine; `"86400d"` is not).
pub const MAX_DURATION: Duration = Duration::from_hours(365 * 24);

/// Surrogate keys one route may attach from configuration.
pub const MAX_ROUTE_SURROGATE_KEYS: usize = 32;

/// A duration written for people: `"30s"`, `"5m"`, `"1h"`, `"2d"`, `"1h 30m"` (humantime
/// syntax) or a bare integer number of seconds. Serializes as the humantime string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    /// A duration of `secs` seconds.
    pub const fn from_secs(secs: u64) -> Self {
        Self(Duration::from_secs(secs))
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(self.0).to_string())
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = HumanDuration;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a duration such as \"30s\", \"5m\", \"1h\", \"2d\" or whole seconds")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<HumanDuration, E> {
                Ok(HumanDuration(Duration::from_secs(v)))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<HumanDuration, E> {
                u64::try_from(v)
                    .map(|v| HumanDuration(Duration::from_secs(v)))
                    .map_err(|_| E::custom("a duration cannot be negative"))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<HumanDuration, E> {
                humantime::parse_duration(v.trim())
                    .map(HumanDuration)
                    .map_err(|e| E::custom(format!("invalid duration {v:?}: {e}")))
            }
        }
        d.deserialize_any(V)
    }
}

/// What a route does with matching requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RouteAction {
    /// Look up the cache; on a miss fetch from the origin and store when the response allows.
    #[default]
    Cache,
    /// Always go to the origin; never store (Varnish `return (pass)`).
    Pass,
}

/// One route: which requests it matches and how they are cached. Routes are tried in order;
/// the first whose `host`, `path_prefix` and `path` all match wins. A request matching no
/// route is passed to the origin (fail closed: nothing is cached by accident).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouteConfig {
    /// Name used in logs, stats and errors, e.g. `"article"`. Required, unique.
    pub name: String,
    /// Host glob (`*` any run, `?` one byte; ASCII case-insensitive), e.g. `"cdn.*"`.
    /// Absent: any host.
    pub host: Option<String>,
    /// Path prefix, byte-exact, e.g. `"/css/"`. Absent: any path.
    pub path_prefix: Option<String>,
    /// Path glob over the whole path (without query), e.g. `"/blog/*/feed"`.
    pub path: Option<String>,
    /// Cache or pass.
    pub action: RouteAction,
    /// TTL used when the origin gives none (`Surrogate-Control`/`Cache-Control` max-age).
    pub ttl: HumanDuration,
    /// When true, `ttl` wins over the origin's freshness headers.
    pub ttl_override: bool,
    /// How long past its TTL an object may still be served while it is revalidated
    /// (Varnish `beresp.grace`, Fastly stale-while-revalidate, RFC 5861).
    pub grace: HumanDuration,
    /// How long past grace an object is kept only to revalidate it with a conditional
    /// request (`If-None-Match`/`If-Modified-Since`, RFC 9111 §4.3; Varnish `beresp.keep`).
    pub keep: HumanDuration,
    /// Refresh before expiry while serving the cached copy: `{ policy = "none" }`,
    /// `{ policy = "threshold", fraction = 0.8 }` (LINE req-shield `decisionForUpdate`) or
    /// `{ policy = "xfetch", beta = 1.0 }` (Vattani et al., VLDB 2015).
    pub early_refresh: EarlyRefresh,
    /// Whether the device class is part of the cache key (and of the rewritten `Vary`).
    /// False for endpoints whose PC and smartphone bodies are identical (feeds, AMP, CSS).
    pub vary_device: bool,
    /// Surrogate keys attached to every object stored by this route, besides the origin's
    /// `Surrogate-Key`. Templates: `{host}`, `{path}`, `{seg1}`..`{seg9}` (path segments),
    /// `{route}`.
    pub surrogate_keys: Vec<String>,
    /// Store bodies gzip-compressed when the origin sent them unencoded and compressible.
    pub compress: bool,
    /// The gzip level of bodies the edge compresses for storage: 1 (fastest) to 9
    /// (smallest); default 6, zlib's default and Varnish's `gzip_level`. Every miss of a
    /// compressible body pays for it: measured on 23–40 KB CSS, HTML and JavaScript, level
    /// 1 compresses 3–5× faster than 6 and stores 34–48% more bytes, level 2 2–3× faster
    /// for 10–17% more (docs/performance.md, "Misses, 2026-11-26").
    pub gzip_level: u32,
    /// Heuristic freshness (RFC 9111 §4.2.2) for responses without explicit freshness:
    /// this fraction of the time since `Last-Modified`, e.g. `0.1` (the RFC's example);
    /// `0` (the default) turns it off and the route's `ttl` applies. Range `0..=1`.
    pub heuristic_fraction: f64,
    /// Cap on a heuristic lifetime (default one day).
    pub heuristic_max: HumanDuration,
    /// Partial content storage (RFC 9111 §3.3–3.4, issue 30), in bytes; `0` (the default)
    /// turns it off. When set, a `GET` whose `Range` is one closed range `bytes=a-b`
    /// inside one slice `[i·n, (i+1)·n)` (and no `If-Range`) is cached under the slice's own
    /// key: its fill asks the origin for exactly that slice (`Range`, identity coding) and
    /// stores the `206`, so later ranges in the slice are hits and memory per object is
    /// bounded by `n`, whatever the representation's size. Any other request for the URL
    /// uses the whole object as before. Range `1..=1073741824` (1 GiB).
    pub slice_bytes: u64,
}

/// Largest [`RouteConfig::slice_bytes`]: 1 GiB.
pub const MAX_SLICE_BYTES: u64 = 1 << 30;

/// [`RouteConfig::gzip_level`]'s default: 6, zlib's default level and Varnish's
/// `gzip_level` default.
pub const DEFAULT_GZIP_LEVEL: u32 = 6;

impl Default for RouteConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            host: None,
            path_prefix: None,
            path: None,
            action: RouteAction::Cache,
            ttl: HumanDuration::from_secs(120),
            ttl_override: false,
            grace: HumanDuration::from_secs(0),
            keep: HumanDuration::from_secs(0),
            early_refresh: EarlyRefresh::None,
            vary_device: true,
            surrogate_keys: Vec::new(),
            compress: true,
            gzip_level: DEFAULT_GZIP_LEVEL,
            heuristic_fraction: 0.0,
            heuristic_max: HumanDuration::from_secs(86_400),
            slice_bytes: 0,
        }
    }
}

/// The `[robots]` table: `/robots.txt` answered at the edge from a template (seed: Hatena's
/// ngx_mruby robots.txt). Placeholders `{scheme}` and `{host}` are filled per request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RobotsConfig {
    /// Answer `/robots.txt` at the edge. When false, it goes to the routes like any path.
    pub enabled: bool,
    /// The body template.
    pub template: String,
}

impl Default for RobotsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            template: "User-agent: *\nDisallow: /account\nDisallow: /api/\n\nSitemap: {scheme}://{host}/sitemap.xml\n".to_owned(),
        }
    }
}

/// The `[edge]` table: adapter-wide settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EdgeConfig {
    /// Name of the origin backend (Fastly backend / Envoy cluster).
    pub backend: String,
    /// Trust `X-Forwarded-Proto` / `X-Forwarded-Host` from the client side (only behind a
    /// proxy that sets them). False: the request's own scheme and `Host` are used.
    pub trust_forwarded: bool,
    /// How long a "this key is private" marker lets requests skip request collapsing and
    /// go straight to the origin (Varnish hit-for-pass). The marker holds no content.
    pub hit_for_pass: HumanDuration,
    /// Responses to requests carrying `Authorization` may be stored (RFC 9111 §3.5) when
    /// they say `public`, `s-maxage` or `must-revalidate`, each under a cache key of its
    /// own credentials (a SHA-256 of the `Authorization` value): an answer is only ever
    /// reused for the same credentials. `false`: every such request is passed, as before
    /// issue 30. Default `true`.
    pub cache_authorized: bool,
    /// Largest body stored, in bytes; larger responses are passed through uncached.
    pub max_object_bytes: u64,
    /// Name of the log endpoint for the JSON access log (Fastly); stdout when absent.
    pub log_endpoint: String,
    /// Fastly shielding: the shield POP (e.g. `"pdx-or-us"`, Fastly's shield codes) in front
    /// of the origin. Empty: no shielding. On an edge POP, origin fetches go to the shield
    /// (itself running Cachet); on the shield POP they go to the origin. Two cache tiers:
    /// the edge POP's, then the shield's (seed: local cache first, then the shared one).
    pub shield: String,
    /// Use the shield's encrypted (TLS) backend. Viceroy's local shielding sites may offer
    /// only the unencrypted one.
    pub shield_encrypted: bool,
    /// Most variants stored per URL (and device class) when the origin's `Vary` names
    /// request fields (RFC 9111 §4.1); further variants are served uncached. Default 16.
    /// Enforced by the Envoy filter; Fastly's core cache keeps variants itself.
    pub max_variants: usize,
    /// Fastly reusable sandboxes (`fastly::http::serve::Serve`; Fastly only, like the
    /// four settings after it): most requests one instance serves before it exits (`1`: a
    /// fresh instance per request). Default 1000.
    pub sandbox_max_requests: u64,
    /// Longest life of one instance, however many requests it served. Default 60 s.
    pub sandbox_max_lifetime: HumanDuration,
    /// How long an instance waits for its next request before it exits (billed as memory ×
    /// wall-clock time, never as CPU). Default 5 s.
    pub sandbox_idle_timeout: HumanDuration,
    /// Heap above which an instance exits after its request, MiB
    /// (`heap_memory_snapshot_mib`). Default 128.
    pub sandbox_max_memory_mib: u32,
    /// How often a running instance re-reads the config store's `config` entry and builds
    /// the policy again when it changed: the longest a configuration change takes to reach
    /// a reused instance. Default 1 s.
    pub config_check_interval: HumanDuration,
}

impl Default for EdgeConfig {
    fn default() -> Self {
        Self {
            backend: "origin".to_owned(),
            trust_forwarded: false,
            hit_for_pass: HumanDuration::from_secs(120),
            cache_authorized: true,
            max_object_bytes: 16 * 1024 * 1024,
            log_endpoint: "cachet_log".to_owned(),
            shield: String::new(),
            shield_encrypted: true,
            max_variants: 16,
            sandbox_max_requests: 1000,
            sandbox_max_lifetime: HumanDuration::from_secs(60),
            sandbox_idle_timeout: HumanDuration::from_secs(5),
            sandbox_max_memory_mib: 128,
            config_check_interval: HumanDuration::from_secs(1),
        }
    }
}

/// The whole configuration. Every table is optional; a file with only `[query]` is valid.
///
/// ```toml
/// [device]
/// profile = "accurate"
///
/// [query]
/// remove = ["utm_*", "_ga", "fbclid"]
/// sort = "name"
///
/// [[routes]]
/// name = "design-css"
/// host = "cdn.*"
/// path_prefix = "/css/"
/// ttl = "1d"
/// vary_device = false
/// surrogate_keys = ["css"]
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Device classification (`cachet_device::DeviceConfig`).
    pub device: DeviceConfig,
    /// Query normalization (`cachet_query::QueryConfig`).
    pub query: QueryConfig,
    /// Edge-synthesized robots.txt.
    pub robots: RobotsConfig,
    /// Adapter-wide settings.
    pub edge: EdgeConfig,
    /// Request collapsing (`cachet_refresh::CollapseConfig`): waiters per key, wait
    /// bound, lock lease.
    pub collapse: CollapseConfig,
    /// Origin connections: dynamic backend, pooling, keep-alive, timeouts.
    pub origin: OriginConfig,
    /// The admin API (bans, purges) and its token.
    pub admin: AdminConfig,
    /// Ban sharing and retirement.
    pub bans: BansConfig,
    /// Per-request workspace.
    pub workspace: WorkspaceSettings,
    /// Envoy-only settings.
    pub envoy: EnvoyConfig,
    /// Ordered routes; first match wins; no match passes.
    pub routes: Vec<RouteConfig>,
}

/// One problem found in a configuration, with the path of the offending value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfigIssue {
    /// Where, e.g. `routes[3].ttl` or `query.remove[1]`.
    pub path: String,
    /// What is wrong, in words.
    pub message: String,
}

impl std::fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl Config {
    /// Parses TOML text and validates it.
    ///
    /// # Errors
    /// [`PolicyError::TooLarge`] over [`MAX_CONFIG_BYTES`]; [`PolicyError::Parse`] with the
    /// path of the offending value (`routes[3].ttl`) for syntax and type errors;
    /// [`PolicyError::Invalid`] listing every validation issue.
    pub fn from_toml(text: &str) -> Result<Self, PolicyError> {
        check_size(text)?;
        let de = toml::Deserializer::parse(text).map_err(|e| PolicyError::Parse {
            path: String::new(),
            message: e.to_string(),
        })?;
        let config: Config =
            serde_path_to_error::deserialize(de).map_err(|e| PolicyError::Parse {
                path: e.path().to_string(),
                message: e.inner().to_string(),
            })?;
        config.validated()
    }

    /// Parses JSON text (the Envoy filter's plugin configuration) and validates it.
    ///
    /// A value that does not fit the schema is located by line, column and the text around
    /// it (`line 1 column 87, near `"ttl":"5 parsecs"``), not by its field path: the path
    /// needs `serde_path_to_error` wrapped around every configuration type, 35 KB of the
    /// filter's wasm, whose size budget then forced the policy crate to opt-level "z" and
    /// cost ~5% of every hit (docs/performance.md, "Size"). [`Config::from_json_traced`]
    /// names the path; `cachet config check FILE.json` reports every problem with its line
    /// ([`crate::check::check_json`]).
    ///
    /// # Errors
    /// [`PolicyError::TooLarge`] over [`MAX_CONFIG_BYTES`]; [`PolicyError::Parse`] with the
    /// location as above; [`PolicyError::Invalid`] listing every validation issue, each
    /// with its path (validation knows the paths).
    pub fn from_json(text: &str) -> Result<Self, PolicyError> {
        check_size(text)?;
        let config: Config = serde_json::from_str(text).map_err(|e| PolicyError::Parse {
            path: json_location(text, &e),
            message: e.to_string(),
        })?;
        config.validated()
    }

    /// As [`Config::from_json`], but a value that does not fit the schema is located by
    /// its field path (`routes[3].ttl`), as [`Config::from_toml`] does. For tools (the
    /// CLI); the Envoy filter uses the smaller [`Config::from_json`].
    ///
    /// # Errors
    /// As [`Config::from_toml`].
    pub fn from_json_traced(text: &str) -> Result<Self, PolicyError> {
        check_size(text)?;
        let mut de = serde_json::Deserializer::from_str(text);
        let config: Config =
            serde_path_to_error::deserialize(&mut de).map_err(|e| PolicyError::Parse {
                path: e.path().to_string(),
                message: e.inner().to_string(),
            })?;
        config.validated()
    }

    fn validated(self) -> Result<Self, PolicyError> {
        let issues = self.validate();
        if issues.is_empty() {
            Ok(self)
        } else {
            Err(PolicyError::Invalid(issues))
        }
    }

    /// Every problem in the configuration, each with its path. Empty means valid.
    pub fn validate(&self) -> Vec<ConfigIssue> {
        let mut issues = Vec::new();
        let mut push = |path: String, message: String| issues.push(ConfigIssue { path, message });
        for (path, message) in self.device.validate() {
            push(join("device", &path), message);
        }
        for (path, message) in self.query.validate() {
            push(join("query", &path), message);
        }
        if self.edge.backend.is_empty() {
            push("edge.backend".into(), "must name the origin backend".into());
        }
        if self.edge.hit_for_pass.0 > MAX_DURATION {
            push("edge.hit_for_pass".into(), "longer than one year".into());
        }
        if !(1..=256).contains(&self.edge.max_variants) {
            push(
                "edge.max_variants".into(),
                "must be between 1 and 256".into(),
            );
        }

        if self.edge.sandbox_max_requests == 0 {
            push(
                "edge.sandbox_max_requests".into(),
                "must be at least 1 (1: a fresh instance per request)".into(),
            );
        }
        for (name, d) in [
            (
                "edge.sandbox_max_lifetime",
                self.edge.sandbox_max_lifetime.0,
            ),
            (
                "edge.sandbox_idle_timeout",
                self.edge.sandbox_idle_timeout.0,
            ),
            (
                "edge.config_check_interval",
                self.edge.config_check_interval.0,
            ),
        ] {
            if d.is_zero() || d > MAX_DURATION {
                push(name.into(), "must be between 1 ms and one year".into());
            }
        }
        if self.edge.sandbox_max_memory_mib == 0 {
            push(
                "edge.sandbox_max_memory_mib".into(),
                "must be at least 1".into(),
            );
        }
        if self.edge.max_object_bytes == 0 {
            push("edge.max_object_bytes".into(), "must be at least 1".into());
        }
        if let Err(e) = self.collapse.validate() {
            push(join("collapse", e.path().unwrap_or("")), reason_of(&e));
        }
        if let Some(reason) = admin_token_problem(&self.admin.token) {
            push("admin.token".into(), reason);
        }
        crate::settings::validate(
            &self.origin,
            &self.bans,
            &self.workspace,
            &self.envoy,
            &mut issues,
        );
        let mut push = |path: String, message: String| issues.push(ConfigIssue { path, message });
        if !self.origin.shard_header.is_empty()
            && self
                .origin
                .shard_header
                .eq_ignore_ascii_case(&self.device.header)
        {
            push(
                "origin.shard_header".into(),
                format!(
                    "{:?} is the device header (device.header); name another field",
                    self.origin.shard_header
                ),
            );
        }
        if self.robots.template.len() > 16 * 1024 {
            push("robots.template".into(), "longer than 16384 bytes".into());
        }
        if self.routes.len() > MAX_ROUTES {
            push(
                "routes".into(),
                format!("{} routes; at most {MAX_ROUTES}", self.routes.len()),
            );
        }
        // A BTreeSet, as every set built with the policy: no hash seed is drawn, so a policy
        // built at pre-initialization (Wizer) draws no randomness (edge-app, `sandbox::prebuild`).
        let mut names = std::collections::BTreeSet::new();
        for (i, r) in self.routes.iter().enumerate() {
            validate_route(i, r, self.edge.max_object_bytes, &mut names, &mut push);
        }
        issues
    }
}

/// Shortest admin token accepted in configuration, bytes.
pub const MIN_ADMIN_TOKEN_BYTES: usize = 16;

/// Placeholder tokens refused whatever their length (ASCII case-insensitive).
const PLACEHOLDER_TOKENS: &[&str] = &[
    "change-me",
    "changeme",
    "change_me",
    "replace-me",
    "secret",
    "password",
    "token",
    "admin",
    "example",
    "your-token-here",
];

/// Why a configured admin token (`[admin].token`, Envoy) is refused, if it is: shorter
/// than [`MIN_ADMIN_TOKEN_BYTES`] or a known placeholder (hostile-input rule: the example
/// configuration once shipped `change-me`). Empty is allowed: the admin API then refuses
/// every call.
fn admin_token_problem(token: &str) -> Option<String> {
    const HOW: &str = "generate one with `openssl rand -hex 32`";
    if token.is_empty() {
        return None;
    }
    if PLACEHOLDER_TOKENS
        .iter()
        .any(|p| p.eq_ignore_ascii_case(token.trim()))
    {
        return Some(format!("is a placeholder; {HOW}"));
    }
    (token.len() < MIN_ADMIN_TOKEN_BYTES).then(|| {
        format!(
            "{} bytes; at least {MIN_ADMIN_TOKEN_BYTES}: {HOW}",
            token.len()
        )
    })
}

/// Validates one route, pushing `(path, message)` issues; `names` collects route names to
/// find duplicates.
fn validate_route<'a>(
    i: usize,
    r: &'a RouteConfig,
    max_object_bytes: u64,
    names: &mut std::collections::BTreeSet<&'a str>,
    push: &mut impl FnMut(String, String),
) {
    let at = |field: &str| format!("routes[{i}].{field}");
    if r.name.is_empty() {
        push(at("name"), "required".into());
    } else if !names.insert(r.name.as_str()) {
        push(at("name"), format!("duplicate route name {:?}", r.name));
    } else if !r
        .name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        push(
            at("name"),
            "use only ASCII letters, digits, '-', '_' and '.'".into(),
        );
    }
    if let Some(h) = &r.host
        && let Err(e) = Glob::new(h)
    {
        push(at("host"), e);
    }
    if let Some(p) = &r.path {
        if let Err(e) = Glob::new(p) {
            push(at("path"), e);
        } else if !p.starts_with('/') && !p.starts_with('*') {
            push(at("path"), "must start with '/' or '*'".into());
        }
    }
    if let Some(p) = &r.path_prefix
        && !p.starts_with('/')
    {
        push(at("path_prefix"), "must start with '/'".into());
    }
    if let Err(e) = r.early_refresh.validate() {
        push(
            at(&join("early_refresh", e.path().unwrap_or(""))),
            reason_of(&e),
        );
    }
    if !(1..=9).contains(&r.gzip_level) {
        push(
            at("gzip_level"),
            format!("must be between 1 and 9, got {}", r.gzip_level),
        );
    }
    if !(0.0..=1.0).contains(&r.heuristic_fraction) {
        push(at("heuristic_fraction"), "must be between 0 and 1".into());
    }
    if r.slice_bytes > MAX_SLICE_BYTES {
        push(
            at("slice_bytes"),
            format!("at most {MAX_SLICE_BYTES} (1 GiB), got {}", r.slice_bytes),
        );
    } else if r.slice_bytes > max_object_bytes {
        push(
            at("slice_bytes"),
            format!(
                "{} is over edge.max_object_bytes ({max_object_bytes}): no slice could be stored",
                r.slice_bytes
            ),
        );
    }
    for (field, d) in [
        ("ttl", r.ttl),
        ("grace", r.grace),
        ("keep", r.keep),
        ("heuristic_max", r.heuristic_max),
    ] {
        if d.0 > MAX_DURATION {
            push(at(field), "longer than one year".into());
        }
    }
    if r.action == RouteAction::Cache && r.ttl.0.is_zero() && r.grace.0.is_zero() && r.ttl_override
    {
        push(
            at("ttl"),
            "ttl_override with a zero ttl and no grace never stores; use action = \"pass\"".into(),
        );
    }
    if r.surrogate_keys.len() > MAX_ROUTE_SURROGATE_KEYS {
        push(
            at("surrogate_keys"),
            format!("at most {MAX_ROUTE_SURROGATE_KEYS}"),
        );
    }
    for (k, key) in r.surrogate_keys.iter().enumerate() {
        if let Err(e) = crate::plan::check_key_template(key) {
            push(format!("routes[{i}].surrogate_keys[{k}]"), e);
        }
    }
}

/// Where a JSON error is: `line L column C, near `…``, the text around the column on its
/// line (at most 24 characters before and after; columns are 1-based bytes, as serde_json
/// counts them). Empty when serde_json gives no position (line 0).
fn json_location(text: &str, e: &serde_json::Error) -> String {
    const AROUND: usize = 24;
    let (line, column) = (e.line(), e.column());
    if line == 0 {
        return String::new();
    }
    let Some(l) = text.lines().nth(line - 1) else {
        return format!("line {line} column {column}");
    };
    let at = column.saturating_sub(1).min(l.len());
    let mut from = at.saturating_sub(AROUND);
    while !l.is_char_boundary(from) {
        from -= 1;
    }
    let mut to = (at + AROUND).min(l.len());
    while !l.is_char_boundary(to) {
        to += 1;
    }
    let near = l.get(from..to).unwrap_or_default().trim();
    format!("line {line} column {column}, near `{near}`")
}

pub(crate) fn check_size(text: &str) -> Result<(), PolicyError> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(PolicyError::TooLarge {
            len: text.len(),
            limit: MAX_CONFIG_BYTES,
        });
    }
    Ok(())
}

/// The message of a refresh-parameter error without its path (the caller prefixes it).
fn reason_of(e: &cachet_refresh::RefreshError) -> String {
    match e {
        cachet_refresh::RefreshError::InvalidParameter { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}

fn join(table: &str, path: &str) -> String {
    if path.is_empty() {
        table.to_owned()
    } else if path.starts_with('[') {
        format!("{table}{path}")
    } else {
        format!("{table}.{path}")
    }
}
