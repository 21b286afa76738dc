//! The replay engine: each record through the pure policy and two simulated caches.
//!
//! Two sides see every request. The **baseline** is what the seed sites started from:
//! key = host + raw target + full `User-Agent` (`Vary: User-Agent`), no compression, no
//! routes. The **config** side is Cachet: `Policy::plan` decides synth / pass / cache,
//! the key is `plan.cache_key`, `Policy::storability` decides storage, TTL, grace and
//! compression. Both caches are byte-bounded LRUs ([`crate::lru::ByteLru`]) and use the
//! log's own timestamps as `now`.

use std::cell::OnceCell;
use std::collections::HashMap;
use std::hash::Hasher;
use std::time::{Duration, SystemTime};

use cachet_http::CacheStatus;
use cachet_http::lookup::{self, Found, Next, Rights};
use cachet_policy::{
    CacheControl, Decision, Policy, RequestView, ResponseView, Storability, Synth,
};
use cachet_refresh::Freshness;

use crate::distinct::Distinct;
use crate::fleet::Fleet;
use crate::logfmt::Record;
use crate::lru::{ByteLru, Lifetime, Lookup};

/// TTL of the baseline (and of the config side without a route) when neither the config
/// nor the origin names one: Varnish's `default_ttl` (120 s).
pub const DEFAULT_TTL: Duration = Duration::from_secs(120);

/// Path templates tracked; later new templates are counted under `(other)`.
pub const MAX_TEMPLATES: usize = 4096;

/// Timeline buckets kept; when a log spans more, adjacent buckets merge (width doubles).
pub const MAX_BUCKETS: usize = 240;

/// Initial timeline bucket width, in seconds.
pub const BUCKET_SECONDS: i64 = 60;

/// Simulated seconds between expiry sweeps of the caches.
const SWEEP_SECONDS: i64 = 60;

/// Resident objects a sweep may visit per request replayed since the last one, so
/// sweeping costs O(1) per request however large the caches are.
const SWEEP_VISITS_PER_REQUEST: u64 = 4;

/// Replay settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Bytes each side's cache may hold.
    pub memory: u64,
    /// Stored size of a compressible body gzip-compressed, as a fraction of its size.
    pub gzip_ratio: f64,
    /// Bytes charged per stored object on top of its body (headers, metadata).
    pub object_overhead: u64,
    /// Fixed baseline TTL; `None`: the TTL the config side would use for that request.
    pub baseline_ttl: Option<Duration>,
    /// Fixed baseline grace; `None`: the grace the config side would use.
    pub baseline_grace: Option<Duration>,
    /// `Host` for records whose log names none.
    pub default_host: String,
}

/// What happened to requests on one side, for the whole log or one endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Requests seen.
    pub requests: u64,
    /// Served from the cache within the TTL.
    pub hits: u64,
    /// Served stale within grace while one background fetch refreshed the object.
    pub stale_hits: u64,
    /// Looked up, not found (or expired): fetched from the origin.
    pub misses: u64,
    /// Sent to the origin without a lookup (pass route, no route, method, query bounds).
    pub passes: u64,
    /// Answered at the edge (robots.txt, bad requests): never reach the origin.
    pub synth: u64,
    /// Fetched responses that were not stored (private, no-store, status, too large,
    /// unknown body on a 304 or HEAD).
    pub not_stored: u64,
    /// Requests the origin saw: misses + passes + background refreshes.
    pub origin_requests: u64,
    /// Bytes the origin sent (the log's sizes).
    pub origin_bytes: u64,
    /// Bytes written into the cache (stored sizes, including replacements).
    pub bytes_written: u64,
}

impl Counters {
    /// A lookup that went to the origin: a stale hit (served in grace while one
    /// background fetch refreshes) or a miss, with the origin's `bytes`.
    pub(crate) fn fetched(&mut self, stale: bool, bytes: u64) {
        self.requests += 1;
        if stale {
            self.stale_hits += 1;
        } else {
            self.misses += 1;
        }
        self.origin_requests += 1;
        self.origin_bytes += bytes;
    }
}

/// One side's counters, overall and per endpoint, with distinct-key counters.
pub struct Side {
    /// The cache.
    pub cache: ByteLru,
    /// Overall.
    pub total: Counters,
    /// Per endpoint.
    pub per: Vec<Counters>,
    /// Distinct keys looked up, overall.
    pub distinct: Distinct,
    /// Distinct keys looked up, per endpoint.
    pub per_distinct: Vec<Distinct>,
}

impl Side {
    fn new(memory: u64, endpoints: usize) -> Self {
        Self {
            cache: ByteLru::new(memory, endpoints),
            total: Counters::default(),
            per: vec![Counters::default(); endpoints],
            distinct: Distinct::default(),
            per_distinct: (0..endpoints).map(|_| Distinct::default()).collect(),
        }
    }

    fn count(&mut self, ep: usize, f: impl Fn(&mut Counters)) {
        f(&mut self.total);
        f(&mut self.per[ep]);
    }
}

/// Figures per path template (host + first two path segments).
#[derive(Debug, Clone, Copy, Default)]
pub struct TemplateCounters {
    /// Requests.
    pub requests: u64,
    /// Baseline hits (fresh + stale).
    pub baseline_hits: u64,
    /// Baseline origin requests.
    pub baseline_origin: u64,
    /// Config hits (fresh + stale).
    pub config_hits: u64,
    /// Config origin requests.
    pub config_origin: u64,
    /// Config synthesized answers.
    pub config_synth: u64,
}

/// One timeline bucket.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bucket {
    /// Requests.
    pub requests: u64,
    /// Baseline hits (fresh + stale).
    pub baseline_hits: u64,
    /// Config hits (fresh + stale).
    pub config_hits: u64,
    /// Config answers synthesized at the edge.
    pub config_synth: u64,
    /// Baseline origin requests.
    pub baseline_origin: u64,
    /// Config origin requests.
    pub config_origin: u64,
}

/// Hit ratio over time in at most [`MAX_BUCKETS`] buckets.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// Start of bucket 0 (seconds since the epoch); `None` before the first record.
    pub start: Option<i64>,
    /// Bucket width in seconds.
    pub width: i64,
    /// The buckets, in time order.
    pub buckets: Vec<Bucket>,
}

impl Timeline {
    fn bucket(&mut self, t: i64) -> &mut Bucket {
        let start = *self.start.get_or_insert(t - t.rem_euclid(BUCKET_SECONDS));
        if self.width == 0 {
            self.width = BUCKET_SECONDS;
        }
        let mut i = usize::try_from((t - start).max(0) / self.width).unwrap_or(usize::MAX);
        while i >= MAX_BUCKETS {
            // Merge pairs: the width doubles, memory stays fixed.
            let merged: Vec<Bucket> = self
                .buckets
                .chunks(2)
                .map(|c| {
                    c.iter().fold(Bucket::default(), |a, b| Bucket {
                        requests: a.requests + b.requests,
                        baseline_hits: a.baseline_hits + b.baseline_hits,
                        config_hits: a.config_hits + b.config_hits,
                        config_synth: a.config_synth + b.config_synth,
                        baseline_origin: a.baseline_origin + b.baseline_origin,
                        config_origin: a.config_origin + b.config_origin,
                    })
                })
                .collect();
            self.buckets = merged;
            self.width *= 2;
            i = usize::try_from((t - start).max(0) / self.width).unwrap_or(usize::MAX);
        }
        if self.buckets.len() <= i {
            self.buckets.resize(i + 1, Bucket::default());
        }
        &mut self.buckets[i]
    }
}

/// Kinds of endpoints besides the config's routes (appended after them, in this order).
pub const EXTRA_ENDPOINTS: [&str; 3] =
    ["(robots.txt, synth)", "(bad request, synth)", "(no route)"];

/// The replay state.
pub struct Engine<'p> {
    policy: &'p Policy,
    settings: Settings,
    /// Endpoint names: the config's routes, then [`EXTRA_ENDPOINTS`].
    pub endpoints: Vec<String>,
    /// The baseline side.
    pub baseline: Side,
    /// The config side.
    pub config: Side,
    /// Per path template, in first-seen order.
    pub templates: Vec<(String, TemplateCounters)>,
    template_index: HashMap<String, usize>,
    /// Hit ratio over time.
    pub timeline: Timeline,
    /// `--fleet`: the config side replayed again over fleets of edge nodes, with and
    /// without a shield tier (empty without `--fleet`).
    pub fleets: Vec<Fleet>,
    /// Earliest record time.
    pub first_time: Option<i64>,
    /// Latest record time.
    pub last_time: Option<i64>,
    last_sweep: i64,
    since_sweep: u64,
    template_buf: String,
}

/// Whether a shared cache may store `status` without explicit freshness (RFC 9110 §15.1;
/// the same list `cachet_policy::Policy::storability` uses).
fn status_cacheable(status: u16) -> bool {
    matches!(
        status,
        200 | 203 | 204 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// A guessed `Content-Type` from the path's extension (the log has no response headers):
/// no extension or a trailing `/` → HTML; text, CSS, JS, JSON, XML/feeds, SVG → their
/// types; anything else → `application/octet-stream` (not compressible).
pub fn guess_content_type(path: &str) -> &'static str {
    let last = path.rsplit('/').next().unwrap_or("");
    let Some((_, ext)) = last.rsplit_once('.') else {
        return "text/html";
    };
    match ext.to_ascii_lowercase().as_str() {
        "html" | "htm" | "shtml" => "text/html",
        "css" => "text/css",
        "js" | "mjs" => "application/javascript",
        "json" | "map" | "webmanifest" => "application/json",
        "xml" | "rss" | "atom" | "rdf" => "application/xml",
        "txt" | "csv" | "md" => "text/plain",
        "svg" => "image/svg+xml",
        _ => "application/octet-stream",
    }
}

/// A deterministic 64-bit hash (SipHash-1-3 with fixed keys) of byte parts separated by
/// 0xFF (never valid UTF-8, so parts cannot run into each other).
pub(crate) fn hash_parts(parts: &[&[u8]]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            h.write_u8(0xff);
        }
        h.write(p);
    }
    h.finish()
}

/// Stored size of a body of `bytes` (times `gzip_ratio` when compressed) plus `overhead`.
fn stored_size(bytes: u64, compress: bool, gzip_ratio: f64, overhead: u64) -> u64 {
    let body = if compress {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "ratio in (0, 1]; sizes far below 2^52"
        )]
        let b = (bytes as f64 * gzip_ratio).ceil() as u64;
        b
    } else {
        bytes
    };
    body + overhead
}

fn secs_u32(d: Duration) -> u32 {
    u32::try_from(d.as_secs()).unwrap_or(u32::MAX)
}

/// Writes the template of `path` on `host` into `out`: host + the first two path segments
/// (`/blog/alice/…` when deeper); segments that look like ids (digits, long hex) → `{id}`.
pub fn template_of(host: &str, path: &str, out: &mut String) {
    out.clear();
    out.push_str(host);
    let mut segs = path.split('/').filter(|s| !s.is_empty());
    for _ in 0..2 {
        let Some(s) = segs.next() else {
            if out.len() == host.len() || path.ends_with('/') {
                out.push('/');
            }
            return;
        };
        out.push('/');
        let id_like = (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            || (s.len() >= 16 && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'));
        out.push_str(if id_like { "{id}" } else { s });
    }
    if segs.next().is_some() {
        out.push_str("/…");
    } else if path.ends_with('/') {
        out.push('/');
    }
}

impl<'p> Engine<'p> {
    /// A fresh replay for `policy`: both sides' caches empty, `settings.memory` bytes
    /// each, no fleet (push [`Fleet`]s onto [`Engine::fleets`] before the first record).
    pub fn new(policy: &'p Policy, settings: Settings) -> Self {
        let mut endpoints: Vec<String> = policy
            .config()
            .routes
            .iter()
            .map(|r| r.name.clone())
            .collect();
        endpoints.extend(EXTRA_ENDPOINTS.iter().map(|s| (*s).to_owned()));
        let n = endpoints.len();
        Self {
            policy,
            baseline: Side::new(settings.memory, n),
            config: Side::new(settings.memory, n),
            settings,
            endpoints,
            templates: Vec::new(),
            template_index: HashMap::new(),
            timeline: Timeline::default(),
            fleets: Vec::new(),
            first_time: None,
            last_time: None,
            last_sweep: i64::MIN,
            since_sweep: 0,
            template_buf: String::new(),
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Replays one record at its time (`r.time`, seconds since the epoch: the log's
    /// timestamps are the clock, records may come slightly out of order) on the baseline
    /// and config sides and on every fleet, counting per endpoint, path template and
    /// timeline bucket. The model (hits, sizes, TTLs) is `docs/simulate.md`'s.
    #[allow(
        clippy::too_many_lines,
        reason = "one request's path through both sides, kept in one place"
    )]
    pub fn record(&mut self, r: &Record<'_>) {
        let t = r.time;
        self.first_time = Some(self.first_time.map_or(t, |f| f.min(t)));
        self.last_time = Some(self.last_time.map_or(t, |l| l.max(t)));
        let host: &str = r.host.as_deref().unwrap_or(&self.settings.default_host);
        let now = u64::try_from(t).map_or(SystemTime::UNIX_EPOCH, |s| {
            SystemTime::UNIX_EPOCH + Duration::from_secs(s)
        });
        let view = RequestView {
            method: &r.method,
            scheme: "https",
            host: Some(host),
            path_and_query: &r.target,
            user_agent: r.user_agent.as_deref(),
            authorization: None,
            forwarded_proto: None,
            forwarded_host: None,
            // Access logs carry neither the client hint nor cookies: the UA decides.
            ch_ua_mobile: None,
            cookie: None,
            // Nor request bodies: a logged GET is replayed as one without content.
            has_body: false,
            // Nor ranges: every request is replayed against the whole object.
            range: None,
            has_if_range: false,
        };
        let policy = self.policy;
        let plan = policy.plan(&view, now);
        let routes = self.endpoints.len() - EXTRA_ENDPOINTS.len();
        let ep = match &plan.decision {
            Decision::Synth(Synth::Robots { .. }) => routes,
            Decision::Synth(_) => routes + 1,
            _ => plan.route_index.unwrap_or(routes + 2),
        };
        #[allow(
            clippy::cast_possible_truncation,
            reason = "at most MAX_ROUTES + 3 endpoints"
        )]
        let tag = ep as u16;
        let path = r.target.split_once('?').map_or(&*r.target, |(p, _)| p);
        let is_get = r.method == "GET";
        let lookup_ok = is_get || r.method == "HEAD";
        // Only a GET's logged 2xx/3xx/4xx carries the body and its size; a 304 or a HEAD
        // tells the object exists but not its size.
        let body_known = is_get && r.status != 304;
        let cc_text = r.cache_control.as_deref();
        let response = |status: u16| ResponseView {
            status,
            cache_control: cc_text,
            content_type: Some(guess_content_type(path)),
            content_length: Some(r.bytes),
            ..ResponseView::default()
        };
        let logged = OnceCell::new();
        let as_ok = OnceCell::new();
        let store_logged = || logged.get_or_init(|| policy.storability(&plan, &response(r.status)));
        // What the origin would say for the object itself (a 304/HEAD stands for a 200).
        let store_ok = || as_ok.get_or_init(|| policy.storability(&plan, &response(200)));

        // ---- config side
        let mut config_hit = false;
        let mut config_origin = false;
        let mut config_synth = false;
        match &plan.decision {
            Decision::Synth(_) => {
                config_synth = true;
                self.config.count(ep, |c| {
                    c.requests += 1;
                    c.synth += 1;
                });
            }
            Decision::Pass(_) => {
                config_origin = true;
                self.config.count(ep, |c| {
                    c.requests += 1;
                    c.passes += 1;
                    c.origin_requests += 1;
                    c.origin_bytes += r.bytes;
                });
            }
            Decision::Cache => {
                let key = hash_parts(&[plan.cache_key.as_bytes()]);
                self.config.distinct.insert(key);
                self.config.per_distinct[ep].insert(key);
                // A stale hit's background fetch is a GET even for HEAD clients.
                let verdict = || {
                    if body_known {
                        store_logged()
                    } else {
                        store_ok()
                    }
                };
                let fetch = Fetch {
                    key,
                    tag,
                    now: t,
                    status: if body_known { r.status } else { 200 },
                    body: body_known.then_some(r.bytes),
                    verdict: &verdict,
                    gzip_ratio: self.settings.gzip_ratio,
                    object_overhead: self.settings.object_overhead,
                };
                let (found, stored) = serve(&mut self.config.cache, &fetch);
                if found == Lookup::Fresh {
                    config_hit = true;
                    self.config.count(ep, |c| {
                        c.requests += 1;
                        c.hits += 1;
                    });
                } else {
                    config_hit = found == Lookup::Stale;
                    config_origin = true;
                    self.config.count(ep, |c| {
                        c.fetched(found == Lookup::Stale, r.bytes);
                        match stored {
                            Some(bytes) => c.bytes_written += bytes,
                            None => c.not_stored += 1,
                        }
                    });
                }
                if !self.fleets.is_empty() {
                    // The primary key's shard field value, hashed as Envoy hashes it.
                    let ring_hash = crate::fleet::request_hash(&plan.cache_key);
                    for fleet in &mut self.fleets {
                        fleet.cache(r.client.as_deref(), &fetch, ring_hash, r.bytes);
                    }
                }
            }
        }
        if !matches!(plan.decision, Decision::Cache) {
            for fleet in &mut self.fleets {
                fleet.direct(r.client.as_deref(), config_origin, r.bytes, t);
            }
        }

        // ---- baseline side
        let mut baseline_hit = false;
        let mut baseline_origin = true;
        if lookup_ok {
            let ua = r.user_agent.as_deref().unwrap_or_default();
            let key = hash_parts(&[host.as_bytes(), r.target.as_bytes(), ua]);
            self.baseline.distinct.insert(key);
            self.baseline.per_distinct[ep].insert(key);
            let found = self.baseline.cache.lookup(key, t);
            if found == Lookup::Fresh {
                baseline_hit = true;
                baseline_origin = false;
                self.baseline.count(ep, |c| {
                    c.requests += 1;
                    c.hits += 1;
                });
            } else {
                baseline_hit = found == Lookup::Stale;
                self.baseline.count(ep, |c| {
                    c.fetched(found == Lookup::Stale, r.bytes);
                });
                // Varnish's built-in VCL: no-store, no-cache and private are uncacheable.
                let cc = cc_text.map(CacheControl::parse).unwrap_or_default();
                let allowed = !(cc.private || cc.no_store || cc.no_cache);
                let status_ok = if body_known {
                    status_cacheable(r.status)
                } else {
                    found == Lookup::Stale
                };
                let stored = if allowed && status_ok {
                    let (ttl, grace) = match store_ok() {
                        Storability::Store(s) => (s.ttl, s.grace),
                        Storability::DontStore(_) => (
                            if plan.ttl.is_zero() {
                                DEFAULT_TTL
                            } else {
                                plan.ttl
                            },
                            plan.grace,
                        ),
                    };
                    let life = Lifetime {
                        ttl: secs_u32(self.settings.baseline_ttl.unwrap_or(ttl)),
                        grace: secs_u32(self.settings.baseline_grace.unwrap_or(grace)),
                        keep: 0,
                    };
                    let size = body_known.then(|| r.bytes + self.settings.object_overhead);
                    Self::store(&mut self.baseline, key, size, life, tag, t)
                } else {
                    if !allowed {
                        self.baseline.cache.remove(key);
                    }
                    false
                };
                if !stored {
                    self.baseline.count(ep, |c| c.not_stored += 1);
                }
            }
        } else {
            self.baseline.count(ep, |c| {
                c.requests += 1;
                c.passes += 1;
                c.origin_requests += 1;
                c.origin_bytes += r.bytes;
            });
        }

        // ---- templates and timeline
        let template_host: &str = if plan.host.is_empty() {
            host
        } else {
            &plan.host
        };
        template_of(template_host, path, &mut self.template_buf);
        let ti = if let Some(&i) = self.template_index.get(self.template_buf.as_str()) {
            i
        } else if self.templates.len() < MAX_TEMPLATES {
            self.templates
                .push((self.template_buf.clone(), TemplateCounters::default()));
            self.template_index
                .insert(self.template_buf.clone(), self.templates.len() - 1);
            self.templates.len() - 1
        } else {
            let other = "(other)";
            if let Some(&i) = self.template_index.get(other) {
                i
            } else {
                self.templates
                    .push((other.to_owned(), TemplateCounters::default()));
                self.template_index
                    .insert(other.to_owned(), self.templates.len() - 1);
                self.templates.len() - 1
            }
        };
        let tc = &mut self.templates[ti].1;
        tc.requests += 1;
        tc.baseline_hits += u64::from(baseline_hit);
        tc.baseline_origin += u64::from(baseline_origin);
        tc.config_hits += u64::from(config_hit);
        tc.config_origin += u64::from(config_origin);
        tc.config_synth += u64::from(config_synth);
        let b = self.timeline.bucket(t);
        b.requests += 1;
        b.baseline_hits += u64::from(baseline_hit);
        b.config_hits += u64::from(config_hit);
        b.config_synth += u64::from(config_synth);
        b.baseline_origin += u64::from(baseline_origin);
        b.config_origin += u64::from(config_origin);

        // ---- expiry sweep, amortized
        self.since_sweep += 1;
        if t.saturating_sub(self.last_sweep) >= SWEEP_SECONDS
            && self.since_sweep * SWEEP_VISITS_PER_REQUEST
                >= (self.baseline.cache.len() + self.config.cache.len()) as u64
        {
            self.baseline.cache.sweep(t);
            self.config.cache.sweep(t);
            self.last_sweep = t;
            self.since_sweep = 0;
        }
    }

    /// Ends the replay: removes what expired by the last record's time, so the resident
    /// figures describe the caches at the end of the log.
    pub fn finish(&mut self) {
        if let Some(t) = self.last_time {
            self.baseline.cache.sweep(t);
            self.config.cache.sweep(t);
        }
    }

    /// Stores or renews `key` on the baseline side. `body: None` renews the lifetime of
    /// the copy already stored (a 304 or HEAD refresh); returns whether an object is now
    /// stored.
    fn store(
        side: &mut Side,
        key: u64,
        body: Option<u64>,
        life: Lifetime,
        tag: u16,
        t: i64,
    ) -> bool {
        let Some(bytes) = body.or_else(|| side.cache.size_of(key)) else {
            return false;
        };
        if side.cache.insert(key, bytes, life, tag, t) {
            side.total.bytes_written += bytes;
            side.per[usize::from(tag)].bytes_written += bytes;
            true
        } else {
            false
        }
    }
}

/// One cacheable request as any config-side cache node sees it (the single node, a fleet
/// edge, a shield): its key, the origin's answer and the policy's verdict on it.
pub(crate) struct Fetch<'a> {
    /// 64-bit hash of `plan.cache_key`.
    pub key: u64,
    /// Endpoint index, the LRU's tag.
    pub tag: u16,
    /// The log's time, seconds since the epoch.
    pub now: i64,
    /// The origin answer's status (`200` for a `304` or `HEAD` refresh).
    pub status: u16,
    /// The body size the log gives (a `GET` answered with anything but `304`); `None` for
    /// a `304` or a `HEAD`, which tell the object exists but not its size.
    pub body: Option<u64>,
    /// `Policy::storability` of the origin's answer, computed on first use.
    pub verdict: &'a dyn Fn() -> &'a Storability,
    /// `--gzip-ratio`.
    pub gzip_ratio: f64,
    /// `--object-overhead`, bytes.
    pub object_overhead: u64,
}

/// One cache node with the origin right behind it: looks `fetch.key` up and, on a stale
/// hit or a miss, fills the cache from the origin's answer ([`fill`]). Returns what the
/// lookup found and the bytes stored (`None`: nothing stored). The single-node replay and
/// every fleet edge without a shield tier go through here, so they decide alike.
///
/// The step after the lookup is the engine's (`cachet_http::lookup::next`, as the exchange
/// takes it) for a node holding the fill right: the log is replayed one request at a
/// time, so there is no collapsing to model. A revalidation (a copy in its keep window)
/// is counted as a fetch that fills: logs carry no origin `304`s.
pub(crate) fn serve(cache: &mut ByteLru, fetch: &Fetch<'_>) -> (Lookup, Option<u64>) {
    let found = match cache.freshness(fetch.key, fetch.now) {
        Freshness::Miss => Found::Nothing,
        freshness => Found::Object {
            freshness,
            soft_purged: false,
            has_grace: false,
            ahead: false,
        },
    };
    let rights = Rights {
        fill: true,
        relookup: false,
        only_if_cached: false,
    };
    match lookup::next(found, rights) {
        Next::Serve {
            status: CacheStatus::Hit,
            ..
        } => (Lookup::Fresh, None),
        Next::Serve { .. } => (Lookup::Stale, fill(cache, Lookup::Stale, fetch)),
        _ => (Lookup::Miss, fill(cache, Lookup::Miss, fetch)),
    }
}

/// Fills `cache` after a stale hit or a miss (`found`) with the origin's answer at
/// `fetch.now`: stored when `Policy::storability` says `Store` and the size is known (from
/// the log's body, or the stale copy a `304`/`HEAD` refresh renews); a per-user answer
/// (`private`, `no-store`) removes any stored copy (a blog turned private); an error
/// (even one with explicit freshness) or another unstorable answer leaves a stale copy
/// serving within grace. Returns the bytes
/// stored, `None` when nothing was.
pub(crate) fn fill(cache: &mut ByteLru, found: Lookup, fetch: &Fetch<'_>) -> Option<u64> {
    // A 5xx never replaces a good stored copy, whatever its freshness (the engine's rule,
    // `cachet_refresh::should_store_over`).
    if found == Lookup::Stale && !cachet_refresh::should_store_over(true, fetch.status) {
        return None;
    }
    match (fetch.verdict)() {
        Storability::Store(s) => {
            let size = match fetch.body {
                Some(bytes) => {
                    stored_size(bytes, s.compress, fetch.gzip_ratio, fetch.object_overhead)
                }
                None if found == Lookup::Stale => cache.size_of(fetch.key)?,
                None => return None,
            };
            let life = Lifetime {
                ttl: secs_u32(s.ttl),
                grace: secs_u32(s.grace),
                keep: secs_u32(s.keep),
            };
            cache
                .insert(fetch.key, size, life, fetch.tag, fetch.now)
                .then_some(size)
        }
        Storability::DontStore(why) => {
            if why.is_private() {
                cache.remove(fetch.key);
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates() {
        let mut s = String::new();
        for (path, want) in [
            ("/", "h/"),
            ("", "h/"),
            ("/blog/alice/entry/3", "h/blog/alice/…"),
            ("/blog/alice/", "h/blog/alice/"),
            ("/blog/alice", "h/blog/alice"),
            ("/css/alice.css", "h/css/alice.css"),
            ("/api", "h/api"),
            ("/item/12345/x", "h/item/{id}/…"),
            ("/u/0123456789abcdef0123", "h/u/{id}"),
        ] {
            template_of("h", path, &mut s);
            assert_eq!(s, want, "{path}");
        }
    }

    #[test]
    fn content_types() {
        assert_eq!(guess_content_type("/blog/a/feed"), "text/html");
        assert_eq!(guess_content_type("/"), "text/html");
        assert_eq!(guess_content_type("/css/a.CSS"), "text/css");
        assert_eq!(guess_content_type("/img/a.png"), "application/octet-stream");
        assert_eq!(guess_content_type("/v1.2/data"), "text/html");
    }

    #[test]
    fn timeline_merges_to_a_fixed_count() {
        let mut tl = Timeline::default();
        for m in 0..1000 {
            tl.bucket(m * 60).requests += 1;
        }
        assert!(tl.buckets.len() <= MAX_BUCKETS);
        assert_eq!(tl.width, 60 * 8);
        assert_eq!(tl.buckets.iter().map(|b| b.requests).sum::<u64>(), 1000);
        // Earlier than the start: bucket 0.
        tl.bucket(-5000).requests += 1;
        assert_eq!(tl.buckets[0].requests, 9);
    }
}
