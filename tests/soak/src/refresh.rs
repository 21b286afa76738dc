//! The refresh-ahead / collapsing load scenario (`--scenario refresh`): LINE req-shield's
//! load-test set-up, steady load on a few keys, a slow origin, short TTLs.
//!
//! Per platform: one demo origin and the platform in front of it, with four routes before
//! the platform's own (one per [`Variant`]: early refresh `threshold` 0.7 or `xfetch` 1.0,
//! each with grace 0 and 10 s; TTL `0s`, so the origin's `max-age=3` counts). Per variant,
//! in turn: every key is fetched once (warm-up, not measured), then `--clients` threads
//! (default 8) loop over [`KEYS`] keys, picked at random with a seeded generator, for
//! `--seconds` (default 25). Every origin answer takes 500 ms and says `max-age=3` with an
//! `ETag` (`/t/…?cc=max-age%3D3&etag=…&delay_ms=500`). The origin's request log
//! ([`cachet_demo_origin::RunningOrigin::request_log`]) gives each origin request's span.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use cachet_demo_origin::{OriginConfig, RequestSpan, RunningOrigin};
use cachet_e2e::{ADMIN_TOKEN, Edge, Reply, agent, send};

use crate::{Platform, Server};

/// Keys per variant.
pub const KEYS: usize = 10;
/// The origin's `max-age`, seconds: the refresh period the figures are counted in.
const MAX_AGE_S: u64 = 3;
/// The origin's delay before every answer, ms.
const ORIGIN_DELAY_MS: u64 = 500;
/// A client answer slower than this that spans the end of an origin fetch of its key
/// waited for the origin ([`waited_for`]); one no fetch explains is a stall, reported
/// apart (a loaded host descheduling the client or the server).
const WAITED: Duration = Duration::from_millis(250);
/// Host header of every client request.
const HOST: &str = "t.example";

/// The early-refresh policy of a variant.
#[derive(Clone, Copy, Debug)]
enum Policy {
    /// `{ policy = "threshold", fraction }`.
    Threshold(f64),
    /// `{ policy = "xfetch", beta }`.
    Xfetch(f64),
    /// No early refresh: every copy expires, so the platform collapses at each expiry
    /// (issue 28 item 1: the edge lost collapsing for a fetch time after each expiry).
    None,
}

/// One route configuration under test.
#[derive(Clone, Copy, Debug)]
pub struct Variant {
    /// Name, also the route's name (prefixed `load-`) and path prefix.
    pub name: &'static str,
    policy: Policy,
    grace_s: u64,
}

/// The variants, in the order they run.
pub const VARIANTS: [Variant; 6] = [
    Variant {
        name: "none-g0",
        policy: Policy::None,
        grace_s: 0,
    },
    Variant {
        name: "none-g10",
        policy: Policy::None,
        grace_s: 10,
    },
    Variant {
        name: "threshold-g0",
        policy: Policy::Threshold(0.7),
        grace_s: 0,
    },
    Variant {
        name: "threshold-g10",
        policy: Policy::Threshold(0.7),
        grace_s: 10,
    },
    Variant {
        name: "xfetch-g0",
        policy: Policy::Xfetch(1.0),
        grace_s: 0,
    },
    Variant {
        name: "xfetch-g10",
        policy: Policy::Xfetch(1.0),
        grace_s: 10,
    },
];

impl Variant {
    /// The route's path prefix, `/t/load-NAME/`.
    fn prefix(&self) -> String {
        format!("/t/load-{}/", self.name)
    }

    /// The client path of key `k`.
    fn path(&self, k: usize) -> String {
        format!(
            "{}k{k}?cc=max-age%3D{MAX_AGE_S}&etag=load-{}-k{k}&delay_ms={ORIGIN_DELAY_MS}",
            self.prefix(),
            self.name
        )
    }

    /// The key a logged origin request belongs to, if it is one of this variant's: the
    /// path without the query (the platform may reorder the query).
    fn key_of(&self, span: &RequestSpan) -> Option<usize> {
        let path = span.key.split('?').next()?;
        path.strip_prefix(&self.prefix())?
            .strip_prefix('k')?
            .parse()
            .ok()
    }

    fn policy_text(&self) -> String {
        match self.policy {
            Policy::Threshold(f) => format!("threshold {f}"),
            Policy::Xfetch(b) => format!("xfetch {b}"),
            Policy::None => "none".to_owned(),
        }
    }

    /// The route, as TOML.
    fn route(&self) -> toml::Value {
        let mut early = toml::Table::new();
        match self.policy {
            Policy::Threshold(f) => {
                early.insert("policy".into(), "threshold".into());
                early.insert("fraction".into(), f.into());
            }
            Policy::Xfetch(b) => {
                early.insert("policy".into(), "xfetch".into());
                early.insert("beta".into(), b.into());
            }
            Policy::None => {
                early.insert("policy".into(), "none".into());
            }
        }
        let mut r = toml::Table::new();
        r.insert("name".into(), format!("load-{}", self.name).into());
        r.insert("path_prefix".into(), self.prefix().into());
        r.insert("ttl".into(), "0s".into());
        r.insert("grace".into(), format!("{}s", self.grace_s).into());
        r.insert("keep".into(), "1h".into());
        r.insert("vary_device".into(), false.into());
        r.insert("early_refresh".into(), toml::Value::Table(early));
        toml::Value::Table(r)
    }
}

/// The shipped configuration with the variants' routes first.
fn config(variants: &[Variant]) -> Result<toml::Value> {
    let text = std::fs::read_to_string(cachet_e2e::workspace_root().join("edge-app/cachet.toml"))
        .context("edge-app/cachet.toml")?;
    let mut v: toml::Value = toml::from_str(&text).context("cachet.toml")?;
    let table = v.as_table_mut().context("cachet.toml: not a table")?;
    let mut routes: Vec<toml::Value> = variants.iter().map(Variant::route).collect();
    if let Some(own) = table.get("routes").and_then(toml::Value::as_array) {
        routes.extend(own.iter().cloned());
    }
    table.insert("routes".into(), toml::Value::Array(routes));
    Ok(v)
}

/// The platform in front of `origin`: the edge with [`config`] as its TOML; Envoy with its
/// example plugin configuration and the variants' routes (as JSON) before its own.
fn start(platform: Platform, origin: SocketAddr, variants: &[Variant]) -> Result<Server> {
    if platform == Platform::Edge {
        let text = toml::to_string(&config(variants)?)?;
        return Ok(Server::Edge(Edge::start(origin, Some(&text))));
    }
    let ours = serde_json::to_value(variants.iter().map(Variant::route).collect::<Vec<_>>())?;
    crate::start_envoy(platform, origin, &move |cfg| {
        cfg["admin"] = serde_json::json!({ "token": ADMIN_TOKEN });
        let mut routes = ours.as_array().cloned().unwrap_or_default();
        routes.extend(cfg["routes"].as_array().cloned().unwrap_or_default());
        cfg["routes"] = serde_json::Value::Array(routes);
    })
}

/// A small seeded generator (SplitMix64): each client's key sequence is reproducible.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        usize::try_from(z % u64::try_from(n).unwrap_or(1)).unwrap_or(0)
    }
}

/// One client answer.
#[derive(Debug)]
struct Sample {
    /// The key asked for.
    key: usize,
    /// When it was sent, on the origin's clock (`RunningOrigin::started`).
    sent: Duration,
    latency: Duration,
    status: u16,
    x_cache: String,
}

/// Times `request` (a client `GET` of `key`), sent at `epoch + sent`.
fn timed(epoch: Instant, key: usize, request: impl FnOnce() -> Result<Reply, String>) -> Sample {
    let at = Instant::now();
    let r = request();
    let latency = at.elapsed();
    let sent = at.saturating_duration_since(epoch);
    match r {
        Ok(r) => Sample {
            key,
            sent,
            latency,
            status: r.status,
            x_cache: r.x_cache().to_owned(),
        },
        // A transport error counts as a 502.
        Err(_) => Sample {
            key,
            sent,
            latency,
            status: 502,
            x_cache: "-".to_owned(),
        },
    }
}

/// Client `n`: random keys of `v` until `until`; times on `epoch`.
fn client(addr: SocketAddr, v: Variant, n: usize, until: Instant, epoch: Instant) -> Vec<Sample> {
    let a = agent();
    let mut rng = Rng(0x00ca_c4e7 + u64::try_from(n).unwrap_or(0));
    let mut out = Vec::new();
    while Instant::now() < until {
        let key = rng.below(KEYS);
        let path = v.path(key);
        out.push(timed(epoch, key, || {
            send(&a, addr, "GET", HOST, &path, &[], vec![])
        }));
    }
    out
}

/// Whether `s` waited for the origin: slower than [`WAITED`], and an origin fetch of its
/// key ended while it was out (a collapsed waiter is answered when the fill it waits for
/// ends). `spans` are the origin's requests with their key.
fn waited_for(s: &Sample, spans: &[(usize, &RequestSpan)]) -> bool {
    let done = s.sent + s.latency;
    s.latency > WAITED
        && spans
            .iter()
            .any(|(k, f)| *k == s.key && s.sent <= f.end && f.end <= done)
}

/// What one variant's run on one platform found.
#[derive(Debug)]
pub struct Row {
    platform: Platform,
    variant: Variant,
    seconds: u64,
    client_requests: usize,
    /// Origin requests per key that started in the measured window.
    per_key: Vec<usize>,
    /// Mean interval between successive origin requests of one key (in the window).
    gap: Option<Duration>,
    /// Most origin requests of one key in flight at once (warm-up included).
    max_in_flight: usize,
    waited: usize,
    /// Answers slower than [`WAITED`] that no origin fetch explains.
    stalled: usize,
    /// The first few answers that waited, as text (key, sent at, latency, `X-Cache`).
    waited_examples: Vec<String>,
    warm_up_failures: Vec<String>,
    /// `X-Cache` of the warm-up answers.
    warm_up_x_cache: BTreeMap<String, usize>,
    /// Origin requests that started before the measured window (the warm-up's fills).
    warm_up_origin: usize,
    status: BTreeMap<u16, usize>,
    x_cache: BTreeMap<String, usize>,
    crash: Option<String>,
}

impl Row {
    /// Origin requests per key per refresh cycle ([`MAX_AGE_S`]).
    fn per_cycle(&self) -> f64 {
        let total: usize = self.per_key.iter().sum();
        let cycles = as_f64(self.seconds) / as_f64(MAX_AGE_S);
        as_f64(total) / as_f64(KEYS) / cycles
    }

    fn waited_share(&self) -> f64 {
        as_f64(self.waited) / as_f64(self.client_requests.max(1))
    }
}

fn as_f64(n: impl TryInto<u32>) -> f64 {
    n.try_into().map_or(f64::MAX, f64::from)
}

/// Most spans in flight at once, per key (an end at the same instant as a start counts
/// first).
fn max_in_flight(spans: &[(usize, &RequestSpan)]) -> usize {
    let mut events: BTreeMap<usize, Vec<(Duration, i8)>> = BTreeMap::new();
    for (k, s) in spans {
        let e = events.entry(*k).or_default();
        e.push((s.start, 1));
        e.push((s.end, -1));
    }
    let mut most = 0;
    for mut e in events.into_values() {
        e.sort_unstable();
        let mut now = 0i64;
        for (_, d) in e {
            now += i64::from(d);
            most = most.max(usize::try_from(now).unwrap_or(0));
        }
    }
    most
}

/// Runs `v` against `server`: a warm-up (`clients` requests per key at once: collapsed
/// misses, not measured), then the measured window; then reads the origin's log.
fn measure(
    platform: Platform,
    server: &Server,
    origin: &RunningOrigin,
    v: Variant,
    seconds: u64,
    clients: usize,
) -> Row {
    let addr = server.addr();
    let warm: Vec<Sample> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..KEYS * clients.max(1))
            .map(|i| {
                let k = i % KEYS;
                let epoch = origin.started();
                s.spawn(move || {
                    timed(epoch, k, || {
                        send(&agent(), addr, "GET", HOST, &v.path(k), &[], vec![])
                    })
                })
            })
            .collect();
        hs.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let warm_up_failures = warm
        .iter()
        .filter(|s| s.status != 200)
        .map(|s| format!("{} {}", s.status, s.x_cache))
        .collect();
    let from = origin.started().elapsed();
    let until = Instant::now() + Duration::from_secs(seconds);
    let samples: Vec<Sample> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..clients)
            .map(|n| {
                let epoch = origin.started();
                s.spawn(move || client(addr, v, n, until, epoch))
            })
            .collect();
        hs.into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let to = origin.started().elapsed();
    // Refreshes started at the end of the window finish (and are logged) meanwhile.
    std::thread::sleep(Duration::from_millis(3 * ORIGIN_DELAY_MS));
    let log = origin.request_log();
    let spans: Vec<(usize, &RequestSpan)> = log
        .iter()
        .filter_map(|s| v.key_of(s).map(|k| (k, s)))
        .collect();
    let mut starts: Vec<Vec<Duration>> = vec![Vec::new(); KEYS];
    for (k, s) in &spans {
        if (from..to).contains(&s.start)
            && let Some(v) = starts.get_mut(*k)
        {
            v.push(s.start);
        }
    }
    let mut gaps = Vec::new();
    for st in &mut starts {
        st.sort_unstable();
        gaps.extend(st.windows(2).map(|w| w[1].saturating_sub(w[0])));
    }
    let mut row = Row {
        platform,
        variant: v,
        seconds,
        client_requests: samples.len(),
        per_key: starts.iter().map(Vec::len).collect(),
        gap: gaps
            .iter()
            .sum::<Duration>()
            .checked_div(u32::try_from(gaps.len()).unwrap_or(0)),
        max_in_flight: max_in_flight(&spans),
        waited: samples.iter().filter(|s| waited_for(s, &spans)).count(),
        stalled: samples
            .iter()
            .filter(|s| s.latency > WAITED && !waited_for(s, &spans))
            .count(),
        waited_examples: samples
            .iter()
            .filter(|s| waited_for(s, &spans))
            .take(5)
            .map(|s| {
                format!(
                    "key {} sent at {:?} answered in {:?} X-Cache {}",
                    s.key, s.sent, s.latency, s.x_cache
                )
            })
            .collect(),
        warm_up_failures,
        warm_up_x_cache: BTreeMap::new(),
        warm_up_origin: spans.iter().filter(|(_, s)| s.start < from).count(),
        status: BTreeMap::new(),
        x_cache: BTreeMap::new(),
        crash: server.crash(),
    };
    for s in &warm {
        *row.warm_up_x_cache.entry(s.x_cache.clone()).or_default() += 1;
    }
    for s in &samples {
        *row.status.entry(s.status).or_default() += 1;
        *row.x_cache.entry(s.x_cache.clone()).or_default() += 1;
    }
    row
}

/// Runs `variants` on `platform`, one after another on one origin and one server.
///
/// # Errors
/// The origin or the server cannot start.
pub fn run(
    platform: Platform,
    variants: &[Variant],
    seconds: u64,
    clients: usize,
) -> Result<Vec<Row>> {
    let origin = cachet_demo_origin::spawn(OriginConfig::ephemeral()).context("demo origin")?;
    let server = start(platform, origin.addr(), variants)?;
    let mut rows = Vec::new();
    for v in variants {
        eprintln!("cachet-soak refresh {platform:?} {}: {seconds} s", v.name);
        rows.push(measure(platform, &server, &origin, *v, seconds, clients));
    }
    Ok(rows)
}

/// The assertions; the failures as text.
pub fn check(r: &Row) -> Vec<String> {
    let mut fail = Vec::new();
    if r.client_requests == 0 {
        fail.push("no client request was answered".to_owned());
    }
    if !r.warm_up_failures.is_empty() {
        fail.push(format!("warm-up answers not 200: {:?}", r.warm_up_failures));
    }
    let not_ok: usize = r
        .status
        .iter()
        .filter(|(s, _)| **s != 200)
        .map(|(_, n)| n)
        .sum();
    if not_ok > 0 {
        fail.push(format!("{not_ok} client answers not 200: {:?}", r.status));
    }
    if r.max_in_flight != 1 {
        fail.push(format!(
            "{} origin requests of one key in flight at once (exact collapsing: 1)",
            r.max_in_flight
        ));
    }
    if r.variant.grace_s > 0 && r.waited > 0 {
        fail.push(format!(
            "{} of {} client requests waited for the origin (> {WAITED:?}, spanning the end \
             of a fetch of their key) with grace on: {:?}",
            r.waited, r.client_requests, r.waited_examples
        ));
    }
    if let Some(c) = &r.crash {
        fail.push(format!("crash: {c}"));
    }
    fail
}

/// The rows as a table.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<8} {:<14} {:<14} {:>5} {:>8} {:>15} {:>8} {:>7} {:>6} {:>14}  {:<10} x-cache",
        "platform",
        "variant",
        "policy",
        "grace",
        "clients",
        "origin/key",
        "/cycle",
        "gap ms",
        "inflt",
        "waited",
        "status",
    );
    for r in rows {
        let min = r.per_key.iter().min().copied().unwrap_or(0);
        let max = r.per_key.iter().max().copied().unwrap_or(0);
        let mean = as_f64(r.per_key.iter().sum::<usize>()) / as_f64(KEYS);
        let _ = writeln!(
            out,
            "{:<8} {:<14} {:<14} {:>4}s {:>8} {:>15} {:>8.2} {:>7} {:>6} {:>14}  {:<10} {}",
            format!("{:?}", r.platform).to_lowercase(),
            r.variant.name,
            r.variant.policy_text(),
            r.variant.grace_s,
            r.client_requests,
            format!("{mean:.1} ({min}-{max})"),
            r.per_cycle(),
            r.gap
                .map_or_else(|| "-".to_owned(), |g| g.as_millis().to_string()),
            r.max_in_flight,
            format!("{} ({:.2}%)", r.waited, 100.0 * r.waited_share()),
            counts(&r.status),
            counts(&r.x_cache),
        );
    }
    out
}

fn counts<K: std::fmt::Display>(m: &BTreeMap<K, usize>) -> String {
    m.iter()
        .map(|(k, n)| format!("{k}:{n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One row as a JSON line.
pub fn json(r: &Row) -> String {
    let (policy, param) = match r.variant.policy {
        Policy::Threshold(f) => ("threshold", serde_json::json!({ "fraction": f })),
        Policy::Xfetch(b) => ("xfetch", serde_json::json!({ "beta": b })),
        Policy::None => ("none", serde_json::json!({})),
    };
    serde_json::json!({
        "scenario": "refresh",
        "platform": format!("{:?}", r.platform).to_lowercase(),
        "variant": r.variant.name,
        "policy": policy,
        "policy_params": param,
        "grace_s": r.variant.grace_s,
        "seconds": r.seconds,
        "keys": KEYS,
        "max_age_s": MAX_AGE_S,
        "origin_delay_ms": ORIGIN_DELAY_MS,
        "client_requests": r.client_requests,
        "origin_requests_per_key": r.per_key,
        "origin_requests_per_key_per_cycle": (r.per_cycle() * 1000.0).round() / 1000.0,
        "refresh_gap_ms": r.gap.map(|g| g.as_millis()),
        "max_in_flight_per_key": r.max_in_flight,
        "waited": r.waited,
        "waited_share": r.waited_share(),
        "stalled": r.stalled,
        "status": r.status.iter().map(|(k, n)| (k.to_string(), *n)).collect::<BTreeMap<_, _>>(),
        "x_cache": r.x_cache,
        "warm_up_requests": r.warm_up_x_cache.values().sum::<usize>(),
        "warm_up_x_cache": r.warm_up_x_cache,
        "warm_up_origin_requests": r.warm_up_origin,
    })
    .to_string()
}

/// `platform variant`, for messages.
pub fn label(r: &Row) -> String {
    format!("{:?} {}", r.platform, r.variant.name)
}
