//! One reading of Cachet's numbers: counters (monotonic totals) and gauges (levels), from
//! Envoy's admin `/stats` or summed from access-log lines.
//!
//! Names are the stable field names of `cachet stat --json` (docs/cli.md): the Envoy
//! filter's metric names (`crates/worker/src/metrics.rs`, shown at `/stats` as
//! `wasmcustom.cachet.<name>`) where Envoy has them, plus the derived totals below.

use std::collections::BTreeMap;

use crate::access::Access;

/// Gauges of the Envoy filter (levels, last writer wins); every other metric is a counter.
pub const ENVOY_GAUGES: &[&str] = &[
    "bytes_stored",
    "objects",
    "local_bytes",
    "bans",
    "workspace_watermark",
];

/// The prefix of the filter's metrics in Envoy's `/stats` text.
pub const ENVOY_PREFIX: &str = "wasmcustom.cachet.";

/// A reading: counter and gauge values by name. A name that is absent is one the source
/// cannot know (e.g. `collapsed_waiters` from access logs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Monotonic totals since the source started (Envoy) or since reading began (logs).
    pub counters: BTreeMap<String, u64>,
    /// Levels: bytes, objects, live bans, the workspace watermark.
    pub gauges: BTreeMap<String, u64>,
}

impl Snapshot {
    /// A counter, 0 when absent.
    pub fn counter(&self, name: &str) -> u64 {
        self.counters.get(name).copied().unwrap_or(0)
    }

    /// Requests answered from cache over lookups that could have been:
    /// `(hits + stale) / (hits + stale + misses + passes)` (Varnish's `cache_hit` over
    /// `cache_hit + cache_miss`, with stale hits and passes counted as Fastly's
    /// stats do); `None` before any such request.
    pub fn hit_ratio(&self) -> Option<f64> {
        hit_ratio(
            self.counter("hits") + self.counter("stale"),
            self.counter("misses") + self.counter("passes"),
        )
    }
}

/// `served / (served + fetched)`, `None` when both are 0.
#[allow(clippy::cast_precision_loss, reason = "ratios of request counts")]
pub fn hit_ratio(served: u64, fetched: u64) -> Option<f64> {
    let total = served + fetched;
    (total > 0).then(|| served as f64 / total as f64)
}

/// Parses Envoy's admin `/stats` text (`name: value` per line) and keeps the filter's
/// metrics (`wasmcustom.cachet.<name>`, values of the same name summed), then adds the
/// derived counters (see [`derive_envoy`]). Lines of other stats, histograms and
/// unparsable values are ignored.
pub fn from_envoy_stats(text: &str) -> Snapshot {
    let mut s = Snapshot::default();
    for line in text.lines() {
        let Some((name, value)) = line.split_once(": ") else {
            continue;
        };
        let Some(metric) = name.trim().strip_prefix(ENVOY_PREFIX) else {
            continue;
        };
        let Ok(v) = value.trim().parse::<u64>() else {
            continue;
        };
        let map = if ENVOY_GAUGES.contains(&metric) {
            &mut s.gauges
        } else {
            &mut s.counters
        };
        *map.entry(metric.to_owned()).or_default() += v;
    }
    derive_envoy(&mut s);
    s
}

/// Adds the totals Envoy does not count itself: `hits = hits_local + hits_shared`,
/// `requests = hits + misses + passes + stale + synth`, `origin_fetches = misses + passes +
/// refreshes` (foreground misses and passes, background refreshes).
pub fn derive_envoy(s: &mut Snapshot) {
    let c = |n: &str| s.counter(n);
    let hits = c("hits_local") + c("hits_shared");
    let requests = hits + c("misses") + c("passes") + c("stale") + c("synth");
    let origin = c("misses") + c("passes") + c("refreshes");
    s.counters.insert("hits".into(), hits);
    s.counters.insert("requests".into(), requests);
    s.counters.insert("origin_fetches".into(), origin);
}

/// Totals summed from access-log lines, the same names as Envoy's where they mean the same.
#[derive(Debug, Clone, Default)]
pub struct LogTotals {
    snapshot: Snapshot,
}

/// Counters every log snapshot has, even at 0 (so the view and `--json` are stable).
pub const LOG_COUNTERS: &[&str] = &[
    "requests",
    "hits",
    "misses",
    "passes",
    "stale",
    "synth",
    "errors",
    "origin_fetches",
    "origin_errors",
    "refreshes",
    "revalidated",
    "banned",
    "bans_added",
    "purges",
    "workspace_overflows",
    "workspace_violations",
    "bad_lines",
];

impl LogTotals {
    /// Empty totals, every [`LOG_COUNTERS`] name at 0.
    pub fn new() -> Self {
        let mut snapshot = Snapshot::default();
        for n in LOG_COUNTERS {
            snapshot.counters.insert((*n).to_owned(), 0);
        }
        Self { snapshot }
    }

    fn add(&mut self, name: &str) {
        if let Some(v) = self.snapshot.counters.get_mut(name) {
            *v += 1;
        } else {
            self.snapshot.counters.insert(name.to_owned(), 1);
        }
    }

    /// Counts a line that is not an access-log line or does not parse.
    pub fn bad_line(&mut self) {
        self.add("bad_lines");
    }

    /// Counts one access-log line. Rules (docs/cli.md, `cachet stat`): the `cache` label
    /// picks `hits` (and `hits_<tier>`), `misses`, `passes`, `stale`, `synth` or `errors`;
    /// `origin_fetches` = lines with `origin_ms` plus lines with `refresh`;
    /// `origin_errors` = `ERROR` lines plus refreshes that kept the stored object
    /// (`kept-stored`); `banned` = objects found banned (`banned_by` on a non-admin line);
    /// admin lines: see [`Self::record_admin`]; `workspace_watermark` is the highest
    /// `ws_watermark` seen.
    pub fn record(&mut self, a: &Access) {
        self.add("requests");
        match a.cache.as_deref() {
            Some("HIT") => {
                self.add("hits");
                match a.tier.as_deref() {
                    Some("single") => self.add("hits_single"),
                    Some("edge") => self.add("hits_edge"),
                    Some("shield") => self.add("hits_shield"),
                    Some(other) => self.add(&format!("hits_{other}")),
                    None => self.add("hits_unknown"),
                }
            }
            Some("MISS") => self.add("misses"),
            Some("PASS") => self.add("passes"),
            Some("STALE") => self.add("stale"),
            Some("SYNTH") => self.add("synth"),
            Some("ERROR") => {
                self.add("errors");
                self.add("origin_errors");
            }
            _ => {}
        }
        if a.origin_ms.is_some() {
            self.add("origin_fetches");
        }
        if let Some(r) = a.refresh.as_deref() {
            self.add("origin_fetches");
            self.add("refreshes");
            match r {
                "revalidated-304" => self.add("revalidated"),
                "kept-stored" => self.add("origin_errors"),
                _ => {}
            }
        }
        let admin = a.route.as_deref() == Some("admin");
        if a.banned_by.is_some() && !admin {
            self.add("banned");
        }
        if admin {
            self.record_admin(a);
        }
        if a.ws_overflow == Some(true) {
            self.add("workspace_overflows");
        }
        if a.ws_verified.as_deref() == Some("violation") {
            self.add("workspace_violations");
        }
        if let Some(w) = a.ws_watermark {
            let g = self
                .snapshot
                .gauges
                .entry("workspace_watermark".into())
                .or_default();
            *g = (*g).max(w);
        }
    }

    /// An admin call: a ban added (`ban_added`), or a purge call. The edge logs admin
    /// calls without their URL, so a purge is an admin `POST` answered 2xx without
    /// `ban_added` (the only other admin `POST`, a ban, always has it when it succeeds); a
    /// URL under `/.cachet/purge`, when a line has one, also says purge.
    fn record_admin(&mut self, a: &Access) {
        let url = a.url.as_deref().unwrap_or("");
        let purge_url = url.starts_with("/.cachet/purge");
        let ok = a.status.is_some_and(|s| (200..300).contains(&s));
        if a.ban_added.is_some() && !purge_url {
            self.add("bans_added");
        } else if ok && (purge_url || (a.method.as_deref() == Some("POST") && url.is_empty())) {
            self.add("purges");
        }
    }

    /// The totals so far.
    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access;

    #[test]
    fn envoy_stats_keep_cachet_metrics_and_derive_totals() {
        let text = "cluster.origin.upstream_rq_total: 9\n\
                    wasmcustom.cachet.hits_local: 3\n\
                    wasmcustom.cachet.hits_shared: 2\n\
                    wasmcustom.cachet.misses: 4\n\
                    wasmcustom.cachet.passes: 1\n\
                    wasmcustom.cachet.refreshes: 5\n\
                    wasmcustom.cachet.bytes_stored: 1024\n\
                    wasmcustom.cachet.collapsed_waiters: 7\n\
                    wasmcustom.cachet.weird: x\n\
                    garbage line\n";
        let s = from_envoy_stats(text);
        assert_eq!(s.counter("hits_local"), 3);
        assert_eq!(s.counter("hits"), 5);
        assert_eq!(s.counter("requests"), 10);
        assert_eq!(s.counter("origin_fetches"), 10);
        assert_eq!(s.counter("collapsed_waiters"), 7);
        assert_eq!(s.gauges.get("bytes_stored"), Some(&1024));
        assert!(!s.counters.contains_key("bytes_stored"));
        assert!(!s.counters.contains_key("weird"));
        assert!(!s.counters.contains_key("upstream_rq_total"));
        assert_eq!(s.hit_ratio(), Some(0.5));
    }

    #[test]
    fn log_lines_are_counted_by_the_documented_rules() {
        let lines = [
            r#"{"cache":"HIT","tier":"edge","ws_watermark":100}"#,
            r#"{"cache":"HIT","tier":"edge","ws_watermark":900}"#,
            r#"{"cache":"MISS","origin_ms":12,"banned_by":3}"#,
            r#"{"cache":"PASS","origin_ms":5}"#,
            r#"{"cache":"STALE","refresh":"kept-stored"}"#,
            r#"{"cache":"HIT","refresh":"revalidated-304"}"#,
            r#"{"cache":"ERROR","error":"origin down"}"#,
            r#"{"cache":"SYNTH","route":"admin","method":"POST","url":"","status":201,"ban_added":7}"#,
            r#"{"cache":"SYNTH","route":"admin","method":"POST","url":"","status":200}"#,
            r#"{"cache":"SYNTH","route":"admin","method":"POST","url":"","status":401}"#,
            r#"{"cache":"SYNTH","route":"admin","method":"GET","url":"","status":200}"#,
            r#"{"cache":"PASS","ws_overflow":true,"ws_verified":"violation"}"#,
        ];
        let mut t = LogTotals::new();
        for l in lines {
            t.record(&access::parse(l).unwrap());
        }
        t.bad_line();
        let s = t.snapshot();
        let want = [
            ("requests", 12),
            ("hits", 3),
            ("hits_edge", 2),
            ("hits_unknown", 1),
            ("misses", 1),
            ("passes", 2),
            ("stale", 1),
            ("synth", 4),
            ("errors", 1),
            ("origin_fetches", 4),
            ("origin_errors", 2),
            ("refreshes", 2),
            ("revalidated", 1),
            ("banned", 1),
            ("bans_added", 1),
            ("purges", 1),
            ("workspace_overflows", 1),
            ("workspace_violations", 1),
            ("bad_lines", 1),
        ];
        for (name, v) in want {
            assert_eq!(s.counter(name), v, "{name}");
        }
        assert_eq!(s.gauges.get("workspace_watermark"), Some(&900));
        // (3 hits + 1 stale) / (4 + 1 miss + 2 passes)
        assert_eq!(s.hit_ratio(), Some(4.0 / 7.0));
        assert_eq!(LogTotals::new().snapshot().hit_ratio(), None);
    }
}
