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

    /// `(hits + stale) / (hits + stale + misses + passes)`: the one definition
    /// `cachet simulate` shares ([`cachet_sim::hit_ratio`]); `None` before any such request.
    pub fn hit_ratio(&self) -> Option<f64> {
        hit_ratio(
            self.counter("hits") + self.counter("stale"),
            self.counter("misses") + self.counter("passes"),
        )
    }
}

pub use cachet_sim::hit_ratio::hit_ratio;

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
    /// `origin_fetches` = lines with `origin_ms` (foreground fetches, a foreground
    /// revalidation included) plus background refreshes (`refresh` `stale:…`/`ahead:…`);
    /// `refreshes` = background refreshes; `revalidated` = 304s that freshened, in the
    /// foreground or the background; `origin_errors` = `ERROR` lines whose `failure` is
    /// `origin` (lines without `failure`, of older edges: every non-admin `ERROR` line) plus
    /// revalidations
    /// and refreshes that kept the stored object after an error answer or a failure;
    /// a `refresh` value this build does not know counts in `refresh_unknown` only;
    /// `banned` = objects found banned (`banned_by` on a non-admin line); admin lines: see
    /// [`Self::record_admin`]; `workspace_watermark` is the highest `ws_watermark` seen.
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
                // Only the origin's failures: not a refused admin call, nor a
                // configuration, cache or body failure (`failure`; older lines have none:
                // then every non-admin ERROR line, as before).
                let admin = a.route.as_deref() == Some("admin");
                match a.failure.as_deref() {
                    Some("origin") => self.add("origin_errors"),
                    None if !admin => self.add("origin_errors"),
                    _ => {}
                }
            }
            _ => {}
        }
        if a.origin_ms.is_some() {
            self.add("origin_fetches");
        }
        match &a.refresh {
            Some(Ok(r)) => {
                if r.is_background() {
                    self.add("origin_fetches");
                    self.add("refreshes");
                }
                if r.revalidated() {
                    self.add("revalidated");
                }
                if r.origin_error() {
                    self.add("origin_errors");
                }
            }
            Some(Err(_)) => self.add("refresh_unknown"),
            None => {}
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
    use cachet_http::CacheStatus;
    use cachet_http::access::{
        Access as Written, RefreshCause, RefreshOutcome, Refreshed, Revalidation,
    };

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

    /// An access-log line as the edge writes it: a real record, serialized.
    fn line(cache: CacheStatus, edit: impl FnOnce(&mut Written)) -> String {
        let mut w = Written {
            method: "GET".into(),
            host: "blog.example".into(),
            url: "/a".into(),
            route: "article".into(),
            cache,
            status: 200,
            device: "pc",
            tier: "single",
            ..Written::default()
        };
        edit(&mut w);
        serde_json::to_string(&w).unwrap()
    }

    fn admin(method: &str, status: u16, ban_added: Option<u64>) -> String {
        line(CacheStatus::Synth, |w| {
            w.method = method.into();
            w.status = status;
            w.ban_added = ban_added;
            (w.host, w.url, w.route, w.device) = (String::new(), String::new(), "admin".into(), "");
        })
    }

    fn totals(lines: &[String]) -> Snapshot {
        let mut t = LogTotals::new();
        for l in lines {
            t.record(&access::parse(access::split(l).unwrap()).unwrap());
        }
        t.snapshot().clone()
    }

    #[test]
    fn log_lines_are_counted_by_the_documented_rules() {
        use CacheStatus::{Error, Hit, Miss, Pass, Stale};
        let bg = |c, r| Some(RefreshOutcome::Background(c, r));
        let mut older = serde_json::from_str::<serde_json::Value>(&line(Hit, |_| {})).unwrap();
        older.as_object_mut().unwrap().remove("tier");
        let mut newer = serde_json::from_str::<serde_json::Value>(&line(Hit, |_| {})).unwrap();
        newer["refresh"] = "stale:some-new-outcome".into();
        let lines = [
            line(Hit, |w| (w.tier, w.ws_watermark) = ("edge", Some(100))),
            line(Hit, |w| (w.tier, w.ws_watermark) = ("edge", Some(900))),
            line(Miss, |w| (w.origin_ms, w.banned_by) = (Some(12), Some(3))),
            line(Pass, |w| w.origin_ms = Some(5)),
            // Served stale, then the background refresh could not reach the origin.
            line(Stale, |w| {
                w.refresh = bg(RefreshCause::Stale, Refreshed::KeptStored);
                w.error = Some("connection refused".into());
            }),
            line(Hit, |w| {
                w.refresh = bg(RefreshCause::Ahead, Refreshed::Revalidated);
            }),
            // Past grace: revalidated before answering (one fetch, in origin_ms).
            line(Miss, |w| {
                w.origin_ms = Some(30);
                w.refresh = Some(RefreshOutcome::Foreground(Revalidation::Revalidated));
            }),
            line(Error, |w| w.error = Some("origin down".into())),
            line(Error, |w| w.failure = Some("origin")),
            // Not the origin's: a configuration that does not load, refused admin calls
            // (as the edge writes them since issue 31, and before, without `failure`).
            line(Error, |w| w.failure = Some("config")),
            line(Error, |w| {
                (w.route, w.status, w.failure) = ("admin".into(), 401, Some("admin"));
            }),
            line(Error, |w| (w.route, w.status) = ("admin".into(), 403)),
            admin("POST", 201, Some(7)),
            admin("POST", 200, None),
            admin("POST", 401, None),
            admin("GET", 200, None),
            line(Pass, |w| {
                (w.ws_overflow, w.ws_verified) = (Some(true), Some("violation"));
            }),
            format!("cachet_log :: {older}"),
            newer.to_string(),
        ];
        let mut t = LogTotals::new();
        for l in &lines {
            t.record(&access::parse(access::split(l).unwrap()).unwrap());
        }
        t.bad_line();
        let s = t.snapshot();
        let want = [
            ("requests", 19),
            ("hits", 5),
            ("hits_edge", 2),
            ("hits_single", 2),
            ("hits_unknown", 1),
            ("misses", 2),
            ("passes", 2),
            ("stale", 1),
            ("synth", 4),
            ("errors", 5),
            ("origin_fetches", 5),
            ("origin_errors", 3),
            ("refreshes", 2),
            ("revalidated", 2),
            ("refresh_unknown", 1),
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
        // (5 hits + 1 stale) / (6 + 2 misses + 2 passes)
        assert_eq!(s.hit_ratio(), Some(6.0 / 10.0));
        assert_eq!(LogTotals::new().snapshot().hit_ratio(), None);
    }

    #[test]
    fn every_refresh_outcome_the_edge_writes_is_counted_once() {
        // (the log's spelling, origin_fetches, refreshes, revalidated, origin_errors):
        // a foreground revalidation is one fetch, its line's origin_ms; a background
        // refresh is one fetch of its own.
        let want: [(&str, u64, u64, u64, u64); 13] = [
            ("revalidated-304", 1, 0, 1, 0),
            ("now-uncacheable", 1, 0, 0, 0),
            ("origin-error", 1, 0, 0, 1),
            ("stale:revalidated-304", 1, 1, 1, 0),
            ("stale:replaced", 1, 1, 0, 0),
            ("stale:now-uncacheable", 1, 1, 0, 0),
            ("stale:origin-error-kept-stored", 1, 1, 0, 1),
            ("stale:kept-stored", 1, 1, 0, 1),
            ("ahead:revalidated-304", 1, 1, 1, 0),
            ("ahead:replaced", 1, 1, 0, 0),
            ("ahead:now-uncacheable", 1, 1, 0, 0),
            ("ahead:origin-error-kept-stored", 1, 1, 0, 1),
            ("ahead:kept-stored", 1, 1, 0, 1),
        ];
        assert_eq!(RefreshOutcome::ALL.len(), want.len());
        for outcome in RefreshOutcome::ALL {
            let l = match outcome {
                RefreshOutcome::Foreground(_) => line(CacheStatus::Miss, |w| {
                    w.origin_ms = Some(4);
                    w.refresh = Some(outcome);
                }),
                RefreshOutcome::Background(RefreshCause::Stale, _) => {
                    line(CacheStatus::Stale, |w| w.refresh = Some(outcome))
                }
                RefreshOutcome::Background(RefreshCause::Ahead, _) => {
                    line(CacheStatus::Hit, |w| w.refresh = Some(outcome))
                }
            };
            let spelled = serde_json::from_str::<serde_json::Value>(&l).unwrap()["refresh"].clone();
            let &(_, fetches, refreshes, revalidated, errors) = want
                .iter()
                .find(|w| spelled == w.0)
                .unwrap_or_else(|| panic!("{outcome:?} is written as {spelled}, not in the table"));
            let s = totals(&[l]);
            let got = (
                s.counter("origin_fetches"),
                s.counter("refreshes"),
                s.counter("revalidated"),
                s.counter("origin_errors"),
                s.counter("refresh_unknown"),
            );
            assert_eq!(
                got,
                (fetches, refreshes, revalidated, errors, 0),
                "{spelled}"
            );
        }
    }
}
