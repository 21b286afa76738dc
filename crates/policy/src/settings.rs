//! Adapter-wide tables of the configuration: origin connections, admin API, bans, workspace, Envoy.
//!
//! These tables are read by both adapters (`edge-app` on Fastly Compute, `envoy-filter` in
//! Envoy); a field that only one platform uses says so. Every table is optional and every
//! field has a default, so a configuration written before a table existed stays valid.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{ConfigIssue, HumanDuration, MAX_DURATION};

/// Longest timeout accepted for an origin connection phase: ten minutes.
pub const MAX_ORIGIN_TIMEOUT: Duration = Duration::from_mins(10);

/// Most pooled connections per origin accepted in configuration.
pub const MAX_ORIGIN_CONNECTIONS: u32 = 10_000;

/// Shortest interval at which an instance re-reads the shared ban list (KV store on
/// Fastly, the ban feed in Envoy): one second. Shorter would make every request pay a
/// store read.
pub const MIN_BAN_SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// Largest per-request workspace accepted: 64 MiB (the `cachet-workspace` limit).
pub const MAX_WORKSPACE_BYTES: usize = 64 * 1024 * 1024;

/// Smallest per-request workspace accepted: 4 KiB.
pub const MIN_WORKSPACE_BYTES: usize = 4 * 1024;

/// The `[origin]` table: how the adapter connects to the origin.
///
/// On Fastly, when `url` is set the edge registers a dynamic backend with these pooling
/// and timeout options (the service must allow dynamic backends); otherwise the static
/// backend named by `edge.backend` is used with the options set on the service. In Envoy
/// these values are documented for the `cluster` definition in `envoy.yaml` and
/// `first_byte_timeout` bounds `dispatch_http_call`.
///
/// Keep-alive rule (LIFULL): with an autoscaled origin behind a load balancer, set
/// `keepalive` close to the autoscaling interval (15 s) so pooled connections are
/// re-established often enough to spread over new origin instances.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OriginConfig {
    /// Origin URL for a dynamic backend, e.g. `"http://127.0.0.1:8080"`. Empty: use the
    /// static backend `edge.backend`.
    pub url: String,
    /// Override of the `Host` header sent to the origin. Empty: the client's host.
    pub override_host: String,
    /// Pool connections and reuse them across requests (HTTP keep-alive).
    pub pooling: bool,
    /// How long an idle pooled connection is kept (default 15 s, see the keep-alive rule).
    pub keepalive: HumanDuration,
    /// Most connections opened to the origin per instance; 0 = platform default.
    pub max_connections: u32,
    /// Connect timeout (default 1 s).
    pub connect_timeout: HumanDuration,
    /// Time to the first response byte (default 15 s).
    pub first_byte_timeout: HumanDuration,
    /// Longest gap between two body bytes (default 10 s).
    pub between_bytes_timeout: HumanDuration,
    /// The client request fields a fill (an origin fetch whose answer will be stored) may
    /// carry, case-insensitive: an allowlist, so nothing the cache key does not account for
    /// (a client's `Cookie`, `X-Forwarded-Host`, …) can shape a shared object. Fields a
    /// stored object's `Vary` names are added on its revalidations and refreshes. Default:
    /// `accept`, `accept-language`, `origin`, `user-agent` (content negotiation, CORS, and
    /// what origins log). Passes forward the client's request as it is. Source: issue 13
    /// ("Poisoning"), RFC 9111 §4.1.
    pub fill_fields: Vec<String>,
    /// Name of the request field every fill carries with the cache key's shard value
    /// ([`crate::object::shard_value`]: the object tag of the plan's primary cache key,
    /// `cachet-obj-<16 hex>`), so an Envoy `ring_hash` / `maglev` cluster of Cachet shields
    /// hashing on it sends each object to one shield from every edge (docs/fleet.md).
    /// Empty (the default): no such field. It must lie in Cachet's reserved namespace
    /// ([`RESERVED_FIELD_PREFIX`], e.g. `x-cachet-shard`), whose client copies every
    /// adapter removes, so a client can never choose the shield; and it must differ from
    /// the device header. Source: issue 15 (shield tier by consistent hashing).
    pub shard_header: String,
}

/// Request field-name prefix reserved for Cachet (`x-cachet-*`, ASCII case-insensitive):
/// client copies are removed before a request is planned or forwarded
/// (`cachet_http::fields::reserved`), so a client can choose neither its device class, nor
/// its cache key, nor its shield ([`OriginConfig::shard_header`]).
pub const RESERVED_FIELD_PREFIX: &str = "x-cachet-";

/// Whether a field name is a valid HTTP token (RFC 9110 §5.1: `tchar`s, at least one).
pub(crate) fn is_field_name(f: &str) -> bool {
    !f.is_empty()
        && f.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// [`OriginConfig::fill_fields`]' default.
pub const DEFAULT_FILL_FIELDS: &[&str] = &["accept", "accept-language", "origin", "user-agent"];

impl Default for OriginConfig {
    fn default() -> Self {
        Self {
            url: String::new(),
            override_host: String::new(),
            pooling: true,
            keepalive: HumanDuration::from_secs(15),
            max_connections: 0,
            connect_timeout: HumanDuration::from_secs(1),
            first_byte_timeout: HumanDuration::from_secs(15),
            between_bytes_timeout: HumanDuration::from_secs(10),
            fill_fields: DEFAULT_FILL_FIELDS
                .iter()
                .map(|f| (*f).to_owned())
                .collect(),
            shard_header: String::new(),
        }
    }
}

/// Where a dynamic origin backend connects, read from `[origin].url`
/// ([`OriginConfig::endpoint`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginEndpoint {
    /// `https://`: TLS, with SNI and the certificate checked against [`Self::host`].
    pub tls: bool,
    /// Host name or address, without the port.
    pub host: String,
    /// `host:port` to connect to (port 443 or 80 when the URL names none).
    pub target: String,
}

impl OriginConfig {
    /// The endpoint of `url` (scheme, authority; any path is ignored); `None` when `url`
    /// is empty (the static backend is used). A URL without a scheme counts as `http://`
    /// (`validate` refuses it in checked configurations).
    pub fn endpoint(&self) -> Option<OriginEndpoint> {
        if self.url.is_empty() {
            return None;
        }
        let (tls, rest) = match self.url.strip_prefix("https://") {
            Some(r) => (true, r),
            None => (false, self.url.strip_prefix("http://").unwrap_or(&self.url)),
        };
        let authority = rest.split('/').next().unwrap_or(rest);
        let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
        let target = match (authority.contains(':'), tls) {
            (true, _) => authority.to_owned(),
            (false, true) => format!("{authority}:443"),
            (false, false) => format!("{authority}:80"),
        };
        Some(OriginEndpoint {
            tls,
            host: host.to_owned(),
            target,
        })
    }

    fn validate(&self, push: &mut dyn FnMut(String, String)) {
        for (i, f) in self.fill_fields.iter().enumerate() {
            if !is_field_name(f) {
                push(
                    format!("origin.fill_fields[{i}]"),
                    format!("{f:?} is not a header field name"),
                );
            }
        }
        let h = &self.shard_header;
        if !h.is_empty() && !is_field_name(h) {
            push(
                "origin.shard_header".into(),
                format!("{h:?} is not a header field name"),
            );
        } else if !h.is_empty()
            && !h
                .get(..RESERVED_FIELD_PREFIX.len())
                .is_some_and(|p| p.eq_ignore_ascii_case(RESERVED_FIELD_PREFIX))
        {
            push(
                "origin.shard_header".into(),
                format!(
                    "{h:?} must start with {RESERVED_FIELD_PREFIX:?} (Cachet's reserved \
                     prefix, whose client copies are removed), e.g. \"x-cachet-shard\""
                ),
            );
        }
        let scheme_ok = self.url.starts_with("http://") || self.url.starts_with("https://");
        if !self.url.is_empty() && !scheme_ok {
            push(
                "origin.url".into(),
                format!("must start with http:// or https://, got {:?}", self.url),
            );
        }
        if self.max_connections > MAX_ORIGIN_CONNECTIONS {
            push(
                "origin.max_connections".into(),
                format!("at most {MAX_ORIGIN_CONNECTIONS}"),
            );
        }
        for (field, d) in [
            ("keepalive", self.keepalive),
            ("connect_timeout", self.connect_timeout),
            ("first_byte_timeout", self.first_byte_timeout),
            ("between_bytes_timeout", self.between_bytes_timeout),
        ] {
            if d.0 > MAX_ORIGIN_TIMEOUT {
                push(format!("origin.{field}"), "longer than 10 minutes".into());
            }
            if field != "keepalive" && d.0.is_zero() {
                push(format!("origin.{field}"), "must be positive".into());
            }
        }
    }
}

/// The `[admin]` table: the edge admin API (`POST /.cachet/ban`, `GET /.cachet/bans`,
/// `POST /.cachet/purge`). Every call needs `Authorization: Bearer <token>`; the token is
/// never logged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Serve the admin API. When false, `/.cachet/*` is answered `404`.
    pub enabled: bool,
    /// Fastly: secret store holding the token.
    pub secret_store: String,
    /// Fastly: key of the token in `secret_store`.
    pub token_secret: String,
    /// Envoy: the token itself (Envoy has no secret store; keep the plugin configuration
    /// private). Ignored on Fastly. Empty: the admin API refuses every call with `403`.
    pub token: String,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            secret_store: "cachet_secrets".to_owned(),
            token_secret: "admin_token".to_owned(),
            token: String::new(),
        }
    }
}

/// The `[bans]` table: how bans are shared and retired.
///
/// Bans added through the admin API are persisted in a shared store (Fastly KV store;
/// Envoy shared data, plus an optional fleet feed) and every instance re-reads the store at
/// most `sync_interval` after its last read, so a ban takes effect everywhere within
/// `sync_interval` plus the store's own propagation delay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BansConfig {
    /// Fastly: KV store holding the ban list.
    pub kv_store: String,
    /// Longest time an instance serves without re-reading the shared ban list.
    pub sync_interval: HumanDuration,
    /// Bans kept at most; adding one more is refused with `429` until the lurker retires some.
    pub max_bans: usize,
    /// Objects the lurker examines per step (Envoy tick).
    pub lurker_budget: usize,
    /// How long a ban stays in the log. Older bans are retired and objects stored before
    /// the newest retired ban count as banned (refetched), so retiring never resurrects
    /// banned content; it bounds the work of a lookup that must check newer bans.
    pub retention: HumanDuration,
}

impl Default for BansConfig {
    fn default() -> Self {
        Self {
            kv_store: "cachet_bans".to_owned(),
            sync_interval: HumanDuration::from_secs(2),
            max_bans: 10_000,
            lurker_budget: 100,
            retention: HumanDuration::from_secs(24 * 3600),
        }
    }
}

impl BansConfig {
    fn validate(&self, push: &mut dyn FnMut(String, String)) {
        if self.sync_interval.0 < MIN_BAN_SYNC_INTERVAL {
            push("bans.sync_interval".into(), "at least 1s".into());
        }
        if self.sync_interval.0 > MAX_DURATION {
            push("bans.sync_interval".into(), "longer than one year".into());
        }
        if self.max_bans == 0 || self.max_bans > 1_000_000 {
            push("bans.max_bans".into(), "must be in 1..=1000000".into());
        }
        if self.lurker_budget == 0 {
            push("bans.lurker_budget".into(), "must be at least 1".into());
        }
        if self.retention.0 < Duration::from_secs(60) || self.retention.0 > MAX_DURATION {
            push("bans.retention".into(), "must be in 1m..=1 year".into());
        }
    }
}

/// How the per-request workspace is cleared between requests (`cachet_workspace::ClearMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkspaceMode {
    /// Zero only up to the high watermark, verifying samples (the default: the shadow
    /// roll-out is `workspace_watermark_is_proven_in_shadow_mode` in the Envoy harness,
    /// every reset verified over misses, hits, ranges, revalidations and passes, 0
    /// violations; Fastly's 2025 roll-out took the same path).
    #[default]
    Watermark,
    /// Zero everything, track the watermark and verify samples (the roll-out mode: 256
    /// KiB zeroed per request, ~20% of an in-VM hit in the wasmtime bench).
    Shadow,
    /// Zero everything, no verification (Varnish's old behaviour).
    Full,
}

/// The `[workspace]` table: each request's scratch arena (Fastly on Varnish, 2025: clear
/// only to the high watermark, proven by sampled verification in shadow mode first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkspaceSettings {
    /// Arena bytes per half (client and backend, like Fastly's 2 × 256 KiB).
    pub capacity_bytes: usize,
    /// Clearing mode.
    pub mode: WorkspaceMode,
    /// Verify one reset in this many (default 20,000); 0 never, 1 always.
    pub verify_one_in: u32,
}

impl Default for WorkspaceSettings {
    fn default() -> Self {
        Self {
            capacity_bytes: 256 * 1024,
            mode: WorkspaceMode::Watermark,
            verify_one_in: 20_000,
        }
    }
}

impl WorkspaceSettings {
    /// The `cachet-workspace` configuration for one half.
    pub fn workspace_config(&self) -> cachet_workspace::Config {
        cachet_workspace::Config {
            capacity_bytes: self.capacity_bytes,
            mode: match self.mode {
                WorkspaceMode::Watermark => cachet_workspace::ClearMode::Watermark,
                WorkspaceMode::Shadow => cachet_workspace::ClearMode::Shadow,
                WorkspaceMode::Full => cachet_workspace::ClearMode::Full,
            },
            verify_one_in: self.verify_one_in,
        }
    }

    fn validate(&self, push: &mut dyn FnMut(String, String)) {
        if !(MIN_WORKSPACE_BYTES..=MAX_WORKSPACE_BYTES).contains(&self.capacity_bytes) {
            push(
                "workspace.capacity_bytes".into(),
                format!("must be in {MIN_WORKSPACE_BYTES}..={MAX_WORKSPACE_BYTES}"),
            );
        }
    }
}

/// Longest `[envoy].etcd_prefix`, bytes (etcd keys are at most 1.5 MiB; the prefix is
/// repeated in every key of the fleet's ban log).
pub const MAX_ETCD_PREFIX_BYTES: usize = 256;

/// How the Envoy filter sends a client's cache fill to the origin (`[envoy].fill`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FillPath {
    /// `dispatch_http_call` to `envoy.cluster`: the body is buffered whole in Envoy and
    /// copied into the VM (docs/envoy.md, "Fills").
    Callout,
    /// The client's own request, rewritten to the fill's fields, through Envoy's router
    /// and the route's cluster: the answer is buffered up to `[edge].max_object_bytes`
    /// and stored, or streamed on unstored once it is larger (docs/envoy.md, "Fills").
    /// Revalidations, background refreshes and `HEAD` fills still use the callout. The
    /// default: no answer is ever held whole past the limit.
    #[default]
    Router,
}

/// The `[envoy]` table: settings only the Envoy proxy-wasm filter reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EnvoyConfig {
    /// Upstream cluster of the origin (for `dispatch_http_call` refreshes).
    pub cluster: String,
    /// Bound on bytes stored in the shared-data tier (all workers); never exceeded.
    pub shared_bytes: u64,
    /// Bound on bytes stored in each worker's in-VM tier.
    pub local_bytes: u64,
    /// Root-context tick period (lurker, waiter wake-ups, ban feed polling).
    pub tick: HumanDuration,
    /// Cluster serving the fleet ban feed; empty disables polling.
    pub ban_feed_cluster: String,
    /// Path of the ban feed on `ban_feed_cluster`.
    pub ban_feed_path: String,
    /// Poll period of the ban feed.
    pub ban_feed_interval: HumanDuration,
    /// How a client's miss is fetched: `router` (default) or `callout` ([`FillPath`]).
    pub fill: FillPath,
    /// Cluster of etcd's v3 JSON gateway holding the fleet's ban log (fleet mode,
    /// docs/fleet.md): bans and purges on any node are written there and every node polls
    /// them. Empty (the default) keeps the log per Envoy process.
    pub etcd_cluster: String,
    /// Key prefix of the fleet's ban log in etcd; starts and ends with `/`.
    pub etcd_prefix: String,
    /// Poll period of the fleet's ban log: a ban accepted by one node applies on every
    /// other node within this plus one `tick` (docs/fleet.md, "Ban convergence").
    pub etcd_interval: HumanDuration,
    /// This Envoy is a shield of a Cachet fleet: its answers to the edge tier's fills
    /// (`x-cachet-tier: edge`, `cachet_http::fields::EDGE_TIER_FIELD`) keep
    /// `Surrogate-Key`, so edge copies carry the origin's keys and a purge by key reaches
    /// them (docs/fleet.md). Off by default: every answer loses the field.
    pub shield: bool,
    /// How long a worker's lookups may use its ban replica without reading the shared
    /// ban epoch (one shared-data read, a host call on every hit otherwise). `0s` (the
    /// default) reads it on every lookup. A ban or purge accepted on this worker applies
    /// to it at once and every tick re-reads the epoch, so a ban accepted on another
    /// worker applies here within the smaller of this and `tick` (docs/envoy.md, "Bans").
    /// At most 1 s.
    pub ban_staleness: HumanDuration,
    /// Cluster that routes back to this Envoy's own listener: on a route with
    /// `slice_bytes`, a request no one slice answers (the whole representation, a range
    /// across slices) is answered by combining its slices, each asked for through this
    /// cluster as a range inside that slice (`cachet_http::stitch`; docs/http.md,
    /// "Partial content storage"). Empty (the default): such requests use the whole
    /// object.
    pub slice_cluster: String,
}

impl Default for EnvoyConfig {
    fn default() -> Self {
        Self {
            cluster: "origin".to_owned(),
            shared_bytes: 64 * 1024 * 1024,
            local_bytes: 4 * 1024 * 1024,
            tick: HumanDuration(Duration::from_millis(100)),
            ban_feed_cluster: String::new(),
            ban_feed_path: "/.cachet/bans".to_owned(),
            ban_feed_interval: HumanDuration::from_secs(5),
            fill: FillPath::Router,
            etcd_cluster: String::new(),
            etcd_prefix: "/cachet/bans/".to_owned(),
            etcd_interval: HumanDuration::from_secs(1),
            shield: false,
            ban_staleness: HumanDuration(Duration::ZERO),
            slice_cluster: String::new(),
        }
    }
}

impl EnvoyConfig {
    fn validate(&self, push: &mut dyn FnMut(String, String)) {
        if self.cluster.is_empty() {
            push(
                "envoy.cluster".into(),
                "must name the origin cluster".into(),
            );
        }
        if self.shared_bytes == 0 {
            push("envoy.shared_bytes".into(), "must be at least 1".into());
        }
        if self.local_bytes > self.shared_bytes {
            push(
                "envoy.local_bytes".into(),
                "must not exceed envoy.shared_bytes".into(),
            );
        }
        if self.tick.0 < Duration::from_millis(10) || self.tick.0 > Duration::from_secs(60) {
            push("envoy.tick".into(), "must be in 10ms..=60s".into());
        }
        if self.ban_staleness.0 > Duration::from_secs(1) {
            push("envoy.ban_staleness".into(), "at most 1s".into());
        }
        if !self.ban_feed_cluster.is_empty() && !self.ban_feed_path.starts_with('/') {
            push("envoy.ban_feed_path".into(), "must start with '/'".into());
        }
        if self.ban_feed_interval.0 < MIN_BAN_SYNC_INTERVAL {
            push("envoy.ban_feed_interval".into(), "at least 1s".into());
        }
        if !self.etcd_cluster.is_empty() && !self.ban_feed_cluster.is_empty() {
            push(
                "envoy.etcd_cluster".into(),
                "set either etcd_cluster (fleet mode) or ban_feed_cluster, not both".into(),
            );
        }
        if let Err(why) = crate::etcd::check_prefix(&self.etcd_prefix) {
            push("envoy.etcd_prefix".into(), why);
        }
        if self.etcd_interval.0 < Duration::from_millis(100)
            || self.etcd_interval.0 > Duration::from_secs(60)
        {
            push(
                "envoy.etcd_interval".into(),
                "must be in 100ms..=60s".into(),
            );
        }
    }
}

/// Validates the adapter-wide tables, pushing `(path, message)` issues.
pub(crate) fn validate(
    origin: &OriginConfig,
    bans: &BansConfig,
    workspace: &WorkspaceSettings,
    envoy: &EnvoyConfig,
    issues: &mut Vec<ConfigIssue>,
) {
    let mut push = |path: String, message: String| issues.push(ConfigIssue { path, message });
    origin.validate(&mut push);
    bans.validate(&mut push);
    workspace.validate(&mut push);
    envoy.validate(&mut push);
}
