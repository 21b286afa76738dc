//! Deterministic discrete-event simulation of req-shield's load test (virtual clock, seeded RNG).
//!
//! Shared by `examples/simulate.rs` (full 5-minute run, table + SVG) and
//! `tests/simulation.rs` (shorter run with asserted targets). Model:
//!
//! * `clients` closed-loop clients; each picks a key uniformly at random, and issues its next
//!   request `think_ms` after the previous response (first request at a random offset in
//!   `0..think_ms`).
//! * A cache hit (fresh, refresh-ahead, stale) answers in 0 virtual ms; an origin fetch takes
//!   exactly `origin_ms`; the response is stored when the fetch completes with
//!   `stored_at` = the time its request was **sent**, as both platforms stamp objects
//!   (`cachet_http::store::sent_at`, RFC 9111 §4.2.3 `request_time`: an object is never
//!   younger than the origin's answer), TTL `ttl_ms`, the scenario's grace, and
//!   `delta = origin_ms` (the measured recompute time).
//! * Decisions come from `cachet_refresh::decide`. Collapsing: one fetch per key at a time
//!   (the platform's obligation or lease, modelled by a set of keys being fetched) and the
//!   others parked in `cachet_refresh::WaitQueue`, woken when it ends or timed out to the
//!   origin. Without collapsing every miss (and every stale hit) starts its own origin fetch.
//! * Requests issued in the first `warmup_ms` are excluded from latency / waiting / stale
//!   counts; fetches started then are excluded from fetch counts.
#![allow(
    dead_code,
    reason = "shared by the example and the test, which each use a different subset"
)]
#![allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "statistics and chart coordinates over small counts (< 2^32) and ms (< 2^53)"
)]
#![allow(
    clippy::too_many_lines,
    clippy::many_single_char_names,
    reason = "the SVG writer is one linear sequence of elements with short coordinate names"
)]

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::fmt::Write as _;
use std::time::Duration;

use cachet_refresh::{
    CollapseConfig, Draw, EarlyRefresh, EntryTimes, Freshness, Timestamp, WaitQueue, decide,
};

/// Load-test parameters (req-shield's published setup by default).
#[derive(Debug, Clone, Copy)]
pub struct Params {
    pub clients: usize,
    pub keys: usize,
    pub ttl_ms: u64,
    pub origin_ms: u64,
    pub think_ms: u64,
    pub duration_ms: u64,
    pub warmup_ms: u64,
    pub bucket_ms: u64,
    pub seed: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            clients: 100,
            keys: 10,
            ttl_ms: 20_000,
            origin_ms: 3_000,
            think_ms: 100,
            duration_ms: 300_000,
            warmup_ms: 20_000,
            bucket_ms: 1_000,
            seed: 0x5eed_cac4e7,
        }
    }
}

/// One strategy under test.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    pub name: &'static str,
    pub early: EarlyRefresh,
    pub collapse: bool,
    pub grace_ms: u64,
}

/// The strategies reported in docs/refresh.md.
pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "none",
            early: EarlyRefresh::None,
            collapse: false,
            grace_ms: 0,
        },
        Scenario {
            name: "collapse-only",
            early: EarlyRefresh::None,
            collapse: true,
            grace_ms: 0,
        },
        Scenario {
            name: "collapse + swr 5 s",
            early: EarlyRefresh::None,
            collapse: true,
            grace_ms: 5_000,
        },
        Scenario {
            name: "threshold 0.7",
            early: EarlyRefresh::Threshold { fraction: 0.7 },
            collapse: true,
            grace_ms: 0,
        },
        Scenario {
            name: "xfetch β=1",
            early: EarlyRefresh::Xfetch { beta: 1.0 },
            collapse: true,
            grace_ms: 0,
        },
        Scenario {
            name: "xfetch β=0.5",
            early: EarlyRefresh::Xfetch { beta: 0.5 },
            collapse: true,
            grace_ms: 0,
        },
    ]
}

/// Results of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub name: &'static str,
    /// Requests issued after warm-up.
    pub requests: u64,
    /// Origin fetches started after warm-up.
    pub fetches: u64,
    /// `fetches / keys / ((duration - warmup) / ttl)`.
    pub fetches_per_key_per_ttl: f64,
    /// Most fetches started for one key during one object version's lifetime (from one
    /// store to the next), after warm-up: the "per refresh cycle" figure.
    pub max_fetches_per_cycle: u64,
    /// Requests issued after warm-up whose response waited on an origin fetch.
    pub waited: u64,
    /// Requests issued after warm-up answered with a stale (past-TTL, in-grace) object.
    pub served_stale: u64,
    pub p50_ms: u64,
    pub p99_ms: u64,
    pub p999_ms: u64,
    pub mean_ms: f64,
    pub max_ms: u64,
    /// Origin fetches started per `bucket_ms` bucket over the whole run (all keys).
    pub timeline: Vec<u32>,
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, seedable, good enough for a load model.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Request { client: usize },
    OriginDone { fetch: usize },
}

struct Fetch {
    key: usize,
    started: u64,
    /// Whether this is the key's collapsed fetch (its end wakes the key's waiters).
    leader: bool,
    /// The client whose request waits on this fetch, with its request start time.
    client: Option<(usize, u64)>,
}

struct Sim<'a> {
    p: &'a Params,
    s: &'a Scenario,
    rng: SplitMix64,
    queue: BinaryHeap<Reverse<(u64, u64, Event)>>,
    seq: u64,
    cache: Vec<Option<EntryTimes>>,
    /// Keys with a collapsed fetch in flight.
    fetching: BTreeSet<usize>,
    /// Requests parked behind them: (client, request start).
    parked: WaitQueue<usize, (usize, u64)>,
    fetches: Vec<Fetch>,
    cycle_fetches: Vec<u64>,
    max_cycle: u64,
    latencies: Vec<u64>,
    requests: u64,
    fetches_after: u64,
    waited: u64,
    served_stale: u64,
    timeline: Vec<u32>,
}

impl Sim<'_> {
    fn at(&mut self, time: u64, ev: Event) {
        self.seq += 1;
        self.queue.push(Reverse((time, self.seq, ev)));
    }

    fn respond(&mut self, client: usize, start: u64, end: u64, waited: bool) {
        if start >= self.p.warmup_ms {
            self.latencies.push(end - start);
            if waited {
                self.waited += 1;
            }
        }
        self.at(end + self.p.think_ms, Event::Request { client });
    }

    fn start_fetch(&mut self, now: u64, key: usize, leader: bool, client: Option<(usize, u64)>) {
        let id = self.fetches.len();
        self.fetches.push(Fetch {
            key,
            started: now,
            leader,
            client,
        });
        if now >= self.p.warmup_ms {
            self.fetches_after += 1;
            self.cycle_fetches[key] += 1;
        }
        let bucket = usize::try_from(now / self.p.bucket_ms).unwrap_or(usize::MAX);
        if let Some(b) = self.timeline.get_mut(bucket) {
            *b += 1;
        }
        self.at(now + self.p.origin_ms, Event::OriginDone { fetch: id });
    }

    /// Handles client `client`'s request for `key`, issued at `start`, at time `now`.
    fn request(&mut self, now: u64, client: usize, key: usize, start: u64) {
        let ts = Timestamp::from_millis(now);
        let draw = Draw::from_bits(self.rng.next());
        let decision = decide(self.cache[key].as_ref(), ts, &self.s.early, draw);
        match decision {
            Freshness::Fresh => self.respond(client, start, now, false),
            Freshness::RefreshAhead | Freshness::Stale => {
                if decision == Freshness::Stale && start >= self.p.warmup_ms {
                    self.served_stale += 1;
                }
                if !self.s.collapse {
                    self.start_fetch(now, key, false, None);
                } else if self.fetching.insert(key) {
                    self.start_fetch(now, key, true, None);
                }
                self.respond(client, start, now, false);
            }
            Freshness::Expired | Freshness::Miss => {
                if !self.s.collapse {
                    self.start_fetch(now, key, false, Some((client, start)));
                } else if self.fetching.insert(key) {
                    self.start_fetch(now, key, true, Some((client, start)));
                } else if self.parked.park(key, (client, start), ts).is_err() {
                    // The queue is full: to the origin uncollapsed.
                    self.start_fetch(now, key, false, Some((client, start)));
                }
            }
        }
    }

    fn origin_done(&mut self, now: u64, fetch: usize) {
        let f = &mut self.fetches[fetch];
        let (key, started, leader, client) = (f.key, f.started, f.leader, f.client.take());
        self.cache[key] = Some(
            EntryTimes::new(
                Timestamp::from_millis(started),
                Duration::from_millis(self.p.ttl_ms),
            )
            .with_grace(Duration::from_millis(self.s.grace_ms))
            .with_delta(Duration::from_millis(now - started)),
        );
        self.max_cycle = self.max_cycle.max(self.cycle_fetches[key]);
        self.cycle_fetches[key] = 0;
        if let Some((c, start)) = client {
            self.respond(c, start, now, true);
        }
        if leader {
            self.fetching.remove(&key);
            for p in self.parked.take(&key) {
                let (c, start) = p.waiter;
                self.respond(c, start, now, true);
            }
        }
    }

    fn housekeeping(&mut self, now: u64) {
        // Timed out: go to the origin uncollapsed (a real adapter may 503).
        for (key, (c, start)) in self.parked.timed_out(Timestamp::from_millis(now)) {
            self.start_fetch(now, key, false, Some((c, start)));
        }
    }
}

/// Runs one scenario.
pub fn run(p: &Params, s: &Scenario) -> Report {
    let buckets = usize::try_from(p.duration_ms.div_ceil(p.bucket_ms)).unwrap_or(0);
    let config = CollapseConfig {
        max_waiters: 1_024,
        max_wait_ms: 10_000,
        lease_ms: 30_000,
        ..CollapseConfig::default()
    };
    let mut sim = Sim {
        p,
        s,
        rng: SplitMix64(p.seed),
        queue: BinaryHeap::new(),
        seq: 0,
        cache: vec![None; p.keys],
        fetching: BTreeSet::new(),
        parked: WaitQueue::new(config),
        fetches: Vec::new(),
        cycle_fetches: vec![0; p.keys],
        max_cycle: 0,
        latencies: Vec::new(),
        requests: 0,
        fetches_after: 0,
        waited: 0,
        served_stale: 0,
        timeline: vec![0; buckets],
    };
    for client in 0..p.clients {
        let offset = sim.rng.below(p.think_ms.max(1));
        sim.at(offset, Event::Request { client });
    }
    while let Some(Reverse((now, _, ev))) = sim.queue.pop() {
        if now >= p.duration_ms {
            break;
        }
        match ev {
            Event::Request { client } => {
                let key = usize::try_from(sim.rng.below(p.keys as u64)).unwrap_or(0);
                if now >= p.warmup_ms {
                    sim.requests += 1;
                }
                sim.request(now, client, key, now);
            }
            Event::OriginDone { fetch } => sim.origin_done(now, fetch),
        }
        sim.housekeeping(now);
    }
    for &c in &sim.cycle_fetches {
        sim.max_cycle = sim.max_cycle.max(c);
    }
    let mut lat = std::mem::take(&mut sim.latencies);
    lat.sort_unstable();
    let pct = |q: f64| -> u64 {
        if lat.is_empty() {
            return 0;
        }
        let rank = (q * lat.len() as f64).ceil() as usize;
        lat[rank.clamp(1, lat.len()) - 1]
    };
    let windows = (p.duration_ms - p.warmup_ms) as f64 / p.ttl_ms as f64;
    Report {
        name: s.name,
        requests: sim.requests,
        fetches: sim.fetches_after,
        fetches_per_key_per_ttl: sim.fetches_after as f64 / p.keys as f64 / windows,
        max_fetches_per_cycle: sim.max_cycle,
        waited: sim.waited,
        served_stale: sim.served_stale,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        p999_ms: pct(0.999),
        mean_ms: lat.iter().sum::<u64>() as f64 / lat.len().max(1) as f64,
        max_ms: lat.last().copied().unwrap_or(0),
        timeline: sim.timeline,
    }
}

/// The results as a Markdown table.
pub fn markdown(reports: &[Report]) -> String {
    let mut out = String::from(
        "| strategy | requests | origin fetches | fetches / key / TTL window | max fetches / key / refresh cycle | waited on origin | served stale | mean ms | p50 ms | p99 ms | p99.9 ms | max ms |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in reports {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.2} | {} | {} | {} | {:.1} | {} | {} | {} | {} |",
            r.name,
            r.requests,
            r.fetches,
            r.fetches_per_key_per_ttl,
            r.max_fetches_per_cycle,
            r.waited,
            r.served_stale,
            r.mean_ms,
            r.p50_ms,
            r.p99_ms,
            r.p999_ms,
            r.max_ms
        );
    }
    out
}

/// Small multiples: origin fetches started per bucket over time, one panel per strategy,
/// each with its own y scale (labelled), a shaded warm-up band and TTL gridlines.
pub fn svg(p: &Params, reports: &[Report]) -> String {
    const W: f64 = 960.0;
    const LEFT: f64 = 170.0;
    const RIGHT: f64 = 20.0;
    const TOP: f64 = 40.0;
    const PANEL: f64 = 70.0;
    const GAP: f64 = 16.0;
    let plot_w = W - LEFT - RIGHT;
    let h = TOP + reports.len() as f64 * (PANEL + GAP) + 30.0;
    let secs = p.duration_ms as f64 / 1_000.0;
    let x_of = |ms: f64| LEFT + plot_w * ms / p.duration_ms as f64;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="20" font-size="14" font-weight="bold">Origin fetches started per {} s (all {} keys) — {} clients, TTL {} s, origin {} s, think {} ms</text>"#,
        p.bucket_ms as f64 / 1_000.0,
        p.keys,
        p.clients,
        p.ttl_ms / 1_000,
        p.origin_ms as f64 / 1_000.0,
        p.think_ms
    );
    for (i, r) in reports.iter().enumerate() {
        let y0 = TOP + i as f64 * (PANEL + GAP);
        let base = y0 + PANEL;
        let max = r.timeline.iter().copied().max().unwrap_or(0).max(1);
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{y0}" width="{:.1}" height="{PANEL}" fill="#eeeeee"/>"##,
            x_of(p.warmup_ms as f64) - LEFT
        );
        let mut t = p.ttl_ms;
        while t < p.duration_ms {
            let x = x_of(t as f64);
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{y0}" x2="{x:.1}" y2="{base}" stroke="#dddddd"/>"##
            );
            t += p.ttl_ms;
        }
        let bw = plot_w / r.timeline.len().max(1) as f64;
        for (b, &n) in r.timeline.iter().enumerate() {
            if n == 0 {
                continue;
            }
            let bh = PANEL * f64::from(n) / f64::from(max);
            let _ = writeln!(
                s,
                r##"<rect x="{:.1}" y="{:.1}" width="{:.2}" height="{bh:.1}" fill="#3366cc"/>"##,
                LEFT + b as f64 * bw,
                base - bh,
                bw.max(1.0)
            );
        }
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{base}" x2="{:.1}" y2="{base}" stroke="#333333"/>"##,
            W - RIGHT
        );
        let _ = writeln!(
            s,
            r#"<text x="10" y="{:.1}" font-weight="bold">{}</text>"#,
            y0 + 16.0,
            r.name
        );
        let _ = writeln!(
            s,
            r#"<text x="10" y="{:.1}">{:.2} fetches/key/TTL</text>"#,
            y0 + 32.0,
            r.fetches_per_key_per_ttl
        );
        let _ = writeln!(
            s,
            r#"<text x="10" y="{:.1}">{} waited</text>"#,
            y0 + 48.0,
            r.waited
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#666666">max {max}</text>"##,
            LEFT - 4.0,
            y0 + 10.0
        );
    }
    let axis_y = TOP + reports.len() as f64 * (PANEL + GAP) + 4.0;
    let mut t = 0.0;
    while t <= secs {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{axis_y:.1}" text-anchor="middle">{t} s</text>"#,
            x_of(t * 1_000.0)
        );
        t += 60.0;
    }
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="{:.1}" fill="#666666">grey band: warm-up (excluded); vertical lines every TTL</text>"##,
        axis_y + 18.0
    );
    s.push_str("</svg>\n");
    s
}
