//! The filter's proxy-wasm metrics, visible at Envoy's admin `/stats` (as `wasmcustom.cachet.*`).

use crate::host::{MetricType, Port};

/// Metric ids of one VM. Envoy shares a metric by name across the VMs of a plugin, so the
/// counters add up over every worker; gauges are set by whoever last computed them.
#[derive(Debug, Default, Clone, Copy)]
pub struct Metrics {
    /// Hits served from the worker's in-VM tier.
    pub hits_local: u32,
    /// Hits served from the shared-data tier.
    pub hits_shared: u32,
    /// Origin fetches for a missing object (collapsing leaders and uncollapsed misses).
    pub misses: u32,
    /// Requests passed to the origin uncached (route, method, private, hit-for-pass, …).
    pub passes: u32,
    /// Responses synthesized at the edge (robots.txt, 400s, admin API).
    pub synth: u32,
    /// Stale objects served within grace while one request revalidates.
    pub stale: u32,
    /// Requests that waited for another request's origin fetch (request collapsing).
    pub collapsed: u32,
    /// Requests sent to the origin uncollapsed because their key's queue on the worker was
    /// full (`collapse.max_waiters`).
    pub collapse_key_full: u32,
    /// Requests sent to the origin uncollapsed because `collapse.max_keys` keys already had
    /// requests queued on the worker.
    pub collapse_keys_full: u32,
    /// Objects evicted from the shared tier to stay within `envoy.shared_bytes`.
    pub evictions: u32,
    /// Objects evicted from in-VM tiers (LRU).
    pub local_evictions: u32,
    /// Gauge: bytes held in the in-VM tiers of all workers (each adds its change on its
    /// tick).
    pub local_bytes: u32,
    /// Gauge: bytes accounted in the shared tier.
    pub bytes_stored: u32,
    /// Gauge: objects in the shared tier.
    pub objects: u32,
    /// Gauge: live entries in the shared ban log (bans and purges).
    pub bans: u32,
    /// Bans added through the admin API or the fleet feed.
    pub bans_added: u32,
    /// Surrogate keys purged (hard or soft).
    pub purges: u32,
    /// Objects the lurker examined.
    pub lurker_examined: u32,
    /// Objects the lurker removed (banned or past their keep window).
    pub lurker_evicted: u32,
    /// Full lurker passes over the shared tier.
    pub lurker_passes: u32,
    /// Gauge: the workspace's high watermark at the last reset, bytes.
    pub workspace_watermark: u32,
    /// Workspace verification violations (must stay 0).
    pub workspace_violations: u32,
    /// Background refreshes dispatched (refresh-ahead and stale-while-revalidate).
    pub refreshes: u32,
    /// Origin fetches that failed (timeout, reset, no cluster) and revalidations answered
    /// with a 5xx (the stored object kept).
    pub origin_errors: u32,
    /// Revalidations answered `304 Not Modified` that freshened a stored object.
    pub revalidated: u32,
    /// Admin API calls refused (401/403).
    pub admin_denied: u32,
    /// Inserts abandoned after repeated directory CAS conflicts.
    pub store_conflicts: u32,
    /// Ban-feed polls that brought new bans.
    pub feed_updates: u32,
    /// 1 while the plugin configuration is rejected and a fallback serves (the last good
    /// one, or the built-in default: `cachet_policy::inforce`), else 0.
    pub config_rejected: u32,
}

impl Metrics {
    /// Defines every metric with the host.
    pub fn define(port: &Port) -> Self {
        let c = |n: &str| port.define_metric(MetricType::Counter, &format!("cachet.{n}"));
        let g = |n: &str| port.define_metric(MetricType::Gauge, &format!("cachet.{n}"));
        Self {
            hits_local: c("hits_local"),
            hits_shared: c("hits_shared"),
            misses: c("misses"),
            passes: c("passes"),
            synth: c("synth"),
            stale: c("stale"),
            collapsed: c("collapsed_waiters"),
            collapse_key_full: c("collapse_key_full"),
            collapse_keys_full: c("collapse_keys_full"),
            evictions: c("evictions"),
            local_evictions: c("local_evictions"),
            local_bytes: g("local_bytes"),
            bytes_stored: g("bytes_stored"),
            objects: g("objects"),
            bans: g("bans"),
            bans_added: c("bans_added"),
            purges: c("purges"),
            lurker_examined: c("lurker_examined"),
            lurker_evicted: c("lurker_evicted"),
            lurker_passes: c("lurker_passes"),
            workspace_watermark: g("workspace_watermark"),
            workspace_violations: c("workspace_violations"),
            refreshes: c("refreshes"),
            origin_errors: c("origin_errors"),
            revalidated: c("revalidated"),
            admin_denied: c("admin_denied"),
            store_conflicts: c("store_conflicts"),
            feed_updates: c("feed_updates"),
            config_rejected: g("config_rejected"),
        }
    }

    /// Adds one to a counter.
    pub fn inc(port: &Port, id: u32) {
        port.metric_add(id, 1);
    }

    /// Adds `n` to a counter.
    pub fn add(port: &Port, id: u32, n: u64) {
        port.metric_add(id, i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Moves a gauge that several workers add to from `before` to `now` (this worker's
    /// share of it).
    pub fn change(port: &Port, id: u32, now: u64, before: u64) {
        let delta = i128::from(now) - i128::from(before);
        port.metric_add(id, i64::try_from(delta).unwrap_or(i64::MAX));
    }

    /// Sets a gauge.
    pub fn set(port: &Port, id: u32, v: u64) {
        port.metric_set(id, v);
    }
}
