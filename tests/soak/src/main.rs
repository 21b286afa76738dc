//! Fault and soak harness: Cachet in Envoy and in Viceroy under mixed load while the origin misbehaves.
//!
//! For each platform (`--platform edge|envoy|module|both`; `module` is Envoy with the
//! dynamic module, `both` the edge and the proxy-wasm filter) it starts the demo origin and the
//! platform in front of it (loopback only), then for `--seconds` runs client threads
//! (hits over 20 article URLs and both device classes, the design CSS, a new key every
//! second for misses, `/account` passed to the origin) while a
//! controller cycles the origin through phases of `--phase-seconds` each: `normal`,
//! `slow` (300 ms per response), `error` (every answer a 503), `reset` (half the body,
//! then the connection drops), `stopped` (connections refused), and bans a probe URL every
//! two seconds. Then it asserts:
//!
//! * no 5xx the origin did not cause: a 5xx whose request did not overlap a fault phase
//!   (`error`, `reset`, `stopped`, plus 2 s after each for connections re-established)
//!   fails the run;
//! * no panic: no `panicked` in Viceroy's output, no wasm failure in Envoy's;
//! * memory flat after warm-up: the last third's peak (Viceroy RSS; Envoy
//!   `server.memory_allocated`) at most 10% + 8 MiB over the middle third's;
//! * every ban applied: after each accepted ban, its probe URL is never a `HIT` or `STALE`;
//! * stale served within grace during the outage: `STALE` answers while the origin is
//!   stopped (the article TTL is 3 s, grace 60 s).
//!
//! `--scenario refresh` runs the refresh-ahead / collapsing load instead (LINE
//! req-shield's load-test set-up; `refresh.rs`):
//!
//! ```text
//! scripts/soak --scenario refresh --seconds 25 [--platform edge|envoy|both]
//!              [--clients 8] [--variant threshold-g0 ...]
//! ```
//!
//! 10 keys, 8 client threads, a 500 ms origin answering `max-age=3` with an ETag, for each
//! variant (no early refresh, `threshold` 0.7 and `xfetch` 1.0, each with grace 0 and
//! 10 s) on each platform; it prints a table and one JSON line per row (origin requests per key and
//! per 3 s refresh cycle, the refresh gap, most origin requests of one key in flight, the
//! share of client requests that waited on the origin — over 250 ms, spanning the end of a
//! fetch of their key — and the stalls no fetch explains, statuses, `X-Cache`), and asserts every
//! answer 200, at most one origin request per key in flight, and no waiting with grace on.
//!
//! Needs `CACHET_EDGE_WASM`, `CACHET_ENVOY` and `CACHET_ENVOY_WASM` (`scripts/soak` sets
//! them). Exit status 0 when every assertion holds, 1 otherwise, 2 on a setup error.

mod refresh;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use cachet_demo_origin::{Fault, OriginConfig, RunningOrigin};
use cachet_e2e::{ADMIN_TOKEN, Edge, agent, send, ua};
use cachet_envoy_host_tests::envoy::Envoy;
use clap::{Parser, ValueEnum};

/// Command line.
#[derive(Parser, Debug)]
#[command(about = "Fault and soak harness for Cachet (Envoy and Viceroy)")]
struct Args {
    /// What to run: the fault soak, or the refresh-ahead / collapsing load.
    #[arg(long, value_enum, default_value_t = Scenario::Soak)]
    scenario: Scenario,
    /// Seconds of load per platform (per variant with `--scenario refresh`); default 60,
    /// 25 with `--scenario refresh`.
    #[arg(long)]
    seconds: Option<u64>,
    /// Seconds per origin phase (normal, slow, error, reset, stopped, in turn).
    #[arg(long, default_value_t = 5)]
    phase_seconds: u64,
    /// Which platform(s) to soak.
    #[arg(long, value_enum, default_value_t = Platform::Both)]
    platform: Platform,
    /// Client threads; default 4, 8 with `--scenario refresh`.
    #[arg(long)]
    clients: Option<usize>,
    /// With `--scenario refresh`: only these variants (none-g0, none-g10, threshold-g0,
    /// threshold-g10, xfetch-g0, xfetch-g10); all when none is given.
    #[arg(long)]
    variant: Vec<String>,
}

impl Args {
    fn seconds(&self) -> u64 {
        self.seconds.unwrap_or(match self.scenario {
            Scenario::Soak => 60,
            Scenario::Refresh => 25,
        })
    }

    fn clients(&self) -> usize {
        self.clients.unwrap_or(match self.scenario {
            Scenario::Soak => 4,
            Scenario::Refresh => 8,
        })
    }
}

/// The scenarios.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// Mixed load while the origin misbehaves (the default).
    Soak,
    /// Refresh-ahead and collapsing: a few keys, a slow origin, short TTLs.
    Refresh,
}

/// The platforms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Platform {
    Edge,
    Envoy,
    /// Envoy with the dynamic module (`envoy-module/`) instead of the proxy-wasm filter.
    Module,
    /// The edge and the proxy-wasm filter.
    Both,
}

/// What the origin does during a phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Normal,
    Slow,
    Error,
    Reset,
    Stopped,
}

const PHASES: [Phase; 5] = [
    Phase::Normal,
    Phase::Slow,
    Phase::Error,
    Phase::Reset,
    Phase::Stopped,
];

impl Phase {
    fn faulty(self) -> bool {
        matches!(self, Phase::Error | Phase::Reset | Phase::Stopped)
    }
}

/// One client response.
#[derive(Debug)]
struct Record {
    sent: Duration,
    done: Duration,
    status: u16,
    x_cache: String,
}

/// The origin, stoppable and restartable on its address.
struct Origin {
    running: Option<RunningOrigin>,
    addr: SocketAddr,
}

impl Origin {
    fn start() -> Result<Self> {
        let o = cachet_demo_origin::spawn(OriginConfig::ephemeral()).context("demo origin")?;
        Ok(Self {
            addr: o.addr(),
            running: Some(o),
        })
    }

    fn set(&mut self, phase: Phase) -> Result<()> {
        if phase == Phase::Stopped {
            if let Some(o) = self.running.take() {
                o.shutdown();
            }
            return Ok(());
        }
        if self.running.is_none() {
            let cfg = OriginConfig {
                listen: self.addr,
                ..OriginConfig::ephemeral()
            };
            self.running = Some(cachet_demo_origin::spawn(cfg).context("origin restart")?);
        }
        let o = self.running.as_ref().context("origin")?;
        o.set_delay(if phase == Phase::Slow {
            Duration::from_millis(300)
        } else {
            Duration::ZERO
        });
        o.set_fault(match phase {
            Phase::Error => Fault::Error,
            Phase::Reset => Fault::Reset,
            _ => Fault::None,
        });
        Ok(())
    }
}

/// The platform under test.
enum Server {
    Edge(Edge),
    Envoy(Envoy),
}

impl Server {
    fn addr(&self) -> SocketAddr {
        match self {
            Server::Edge(e) => e.addr(),
            Server::Envoy(e) => e.addr,
        }
    }

    /// Memory now, bytes: Viceroy's resident set, Envoy's `server.memory_allocated`.
    fn memory(&self) -> Option<u64> {
        match self {
            Server::Edge(e) => e.proc_status_bytes("VmRSS"),
            Server::Envoy(e) => e.metric("server.memory_allocated").ok(),
        }
    }

    /// A panic or wasm failure in the output, if any.
    fn crash(&self) -> Option<String> {
        let (out, marks): (String, &[&str]) = match self {
            Server::Edge(e) => (e.output(), &["panicked"]),
            Server::Envoy(e) => (e.output(), &["panicked", "Wasm VM failed", "wasm trap"]),
        };
        out.lines()
            .find(|l| marks.iter().any(|m| l.contains(m)))
            .map(str::to_owned)
    }
}

/// The configuration both platforms run: the shipped one with a 3 s article TTL (so it
/// expires during the run) and 60 s of grace (so the outage is served stale).
fn config() -> Result<toml::Value> {
    let text = std::fs::read_to_string(cachet_e2e::workspace_root().join("edge-app/cachet.toml"))
        .context("edge-app/cachet.toml")?;
    let mut v: toml::Value = toml::from_str(&text).context("cachet.toml")?;
    let routes = v
        .get_mut("routes")
        .and_then(toml::Value::as_array_mut)
        .context("routes")?;
    for r in routes {
        if r.get("name").and_then(toml::Value::as_str) == Some("article") {
            let t = r.as_table_mut().context("route")?;
            t.insert("ttl".into(), "3s".into());
            t.insert("ttl_override".into(), true.into());
            t.insert("grace".into(), "60s".into());
        }
    }
    Ok(v)
}

fn start(platform: Platform, origin: SocketAddr) -> Result<Server> {
    let cfg = config()?;
    if platform == Platform::Edge {
        let text = toml::to_string(&cfg)?;
        return Ok(Server::Edge(Edge::start(origin, Some(&text))));
    }
    let json = serde_json::to_value(&cfg)?;
    start_envoy(platform, origin, &move |v| {
        let envoy = v["envoy"].clone();
        *v = json.clone();
        v["envoy"] = envoy;
        v["admin"] = serde_json::json!({ "token": ADMIN_TOKEN });
    })
}

/// Envoy in front of `origin` with `rewrite` applied to its example configuration: the
/// proxy-wasm filter (`CACHET_ENVOY_WASM`), or with [`Platform::Module`] the dynamic
/// module (built when `CACHET_ENVOY_MODULE_DIR` names none).
fn start_envoy(
    platform: Platform,
    origin: SocketAddr,
    rewrite: &dyn Fn(&mut serde_json::Value),
) -> Result<Server> {
    let envoy = cachet_envoy_host_tests::envoy::binary().context("CACHET_ENVOY")?;
    if platform == Platform::Module {
        cachet_envoy_host_tests::build_module()?;
        return Envoy::start_module(&envoy, origin, rewrite).map(Server::Envoy);
    }
    let wasm = std::env::var_os("CACHET_ENVOY_WASM").context("CACHET_ENVOY_WASM")?;
    Envoy::start(&envoy, &PathBuf::from(wasm), origin, rewrite).map(Server::Envoy)
}

/// The client load: article entries of two blogs for both device classes, and the CSS.
fn client(addr: SocketAddr, n: usize, t0: Instant, stop: &AtomicBool) -> Vec<Record> {
    let a = agent();
    let mut out = Vec::new();
    let mut i = n * 7;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let sent = t0.elapsed();
        let (host, path) = if i.is_multiple_of(10) {
            ("cdn.example", "/css/alice.css".to_owned())
        } else if i % 10 == 5 {
            // A new key every second: misses (and fills) in every phase.
            (
                "blog.example",
                format!("/blog/bob/entry/3?n={}", sent.as_secs()),
            )
        } else if i % 10 == 7 {
            // Passed to the origin, never cached.
            ("blog.example", "/account".to_owned())
        } else {
            let blog = if i.is_multiple_of(2) { "alice" } else { "bob" };
            ("blog.example", format!("/blog/{blog}/entry/{}", 1 + i % 10))
        };
        let device = if i.is_multiple_of(3) {
            ua::IPHONE
        } else {
            ua::DESKTOP
        };
        let r = send(
            &a,
            addr,
            "GET",
            host,
            &path,
            &[("user-agent", device)],
            vec![],
        );
        let (status, x_cache) = match r {
            Ok(r) => (r.status, r.x_cache().to_owned()),
            // A transport error (a reset passed on) counts as a 502 here.
            Err(_) => (502, "-".to_owned()),
        };
        out.push(Record {
            sent,
            done: t0.elapsed(),
            status,
            x_cache,
        });
    }
    out
}

/// What one platform's run found.
#[derive(Debug, Default)]
struct Report {
    requests: usize,
    by_cache: std::collections::BTreeMap<String, usize>,
    errors_explained: usize,
    errors_unexplained: Vec<String>,
    bans_accepted: usize,
    bans_applied: usize,
    bans_violated: Vec<String>,
    stale_in_outage: usize,
    memory: Vec<(Duration, u64)>,
    crash: Option<String>,
}

/// Bans probe `k` and checks it: warm it, ban it, then it must not be served from cache.
fn probe(addr: SocketAddr, k: usize, r: &mut Report) {
    let a = agent();
    let path = format!("/blog/alice/entry/1?probe={k}");
    let get = || {
        send(
            &a,
            addr,
            "GET",
            "blog.example",
            &path,
            &[("user-agent", ua::DESKTOP)],
            vec![],
        )
    };
    for _ in 0..2 {
        let _ = get();
    }
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let expr = format!("obj.http.x-url ~ ^/blog/alice/entry/1\\?probe={k}$");
    let Ok(ban) = send(
        &a,
        addr,
        "POST",
        "blog.example",
        "/.cachet/ban",
        &[("authorization", &auth)],
        expr.into_bytes(),
    ) else {
        return;
    };
    if ban.status != 201 {
        return;
    }
    r.bans_accepted += 1;
    match get() {
        Ok(after) if matches!(after.x_cache(), "HIT" | "STALE") => r
            .bans_violated
            .push(format!("probe {k}: {} after its ban", after.x_cache())),
        _ => r.bans_applied += 1,
    }
}

fn soak(platform: Platform, args: &Args) -> Result<Report> {
    let mut origin = Origin::start()?;
    let server = start(platform, origin.addr)?;
    let addr = server.addr();
    let t0 = Instant::now();
    let run = Duration::from_secs(args.seconds());
    let phase_len = Duration::from_secs(args.phase_seconds.max(1));
    let stop = Arc::new(AtomicBool::new(false));
    let faults: Arc<Mutex<Vec<(Duration, Duration, Phase)>>> = Arc::default();
    let mut report = Report::default();
    let records: Vec<Record> = std::thread::scope(|scope| -> Result<Vec<Record>> {
        let clients: Vec<_> = (0..args.clients())
            .map(|n| {
                let stop = Arc::clone(&stop);
                scope.spawn(move || client(addr, n, t0, &stop))
            })
            .collect();
        let mut k = 0;
        let mut next_probe = Duration::from_secs(2);
        let mut phase_at = Duration::ZERO;
        let mut phase = 0usize;
        while t0.elapsed() < run {
            if t0.elapsed() >= phase_at + phase_len {
                let (ended, started) = (PHASES[phase], t0.elapsed());
                if ended.faulty() {
                    faults
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((phase_at, started, ended));
                }
                phase = (phase + 1) % PHASES.len();
                origin.set(PHASES[phase])?;
                phase_at = started;
            }
            if t0.elapsed() >= next_probe {
                k += 1;
                probe(addr, k, &mut report);
                next_probe += Duration::from_secs(2);
            }
            if let Some(m) = server.memory() {
                report.memory.push((t0.elapsed(), m));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        if PHASES[phase].faulty() {
            faults.lock().unwrap_or_else(PoisonError::into_inner).push((
                phase_at,
                t0.elapsed(),
                PHASES[phase],
            ));
        }
        stop.store(true, Ordering::Relaxed);
        origin.set(Phase::Normal)?;
        Ok(clients
            .into_iter()
            .flat_map(|c| c.join().unwrap_or_default())
            .collect())
    })?;
    let faults = faults
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let settle = Duration::from_secs(2);
    for rec in &records {
        *report.by_cache.entry(rec.x_cache.clone()).or_default() += 1;
        let overlaps = |p: &[Phase]| {
            faults.iter().any(|(from, to, ph)| {
                p.contains(ph) && rec.sent <= *to + settle && rec.done >= *from
            })
        };
        if rec.status >= 500 {
            if overlaps(&[Phase::Error, Phase::Reset, Phase::Stopped]) {
                report.errors_explained += 1;
            } else {
                report.errors_unexplained.push(format!(
                    "{} ({}) sent at {:?}, done at {:?}",
                    rec.status, rec.x_cache, rec.sent, rec.done
                ));
            }
        }
        if rec.x_cache == "STALE" && rec.status == 200 && overlaps(&[Phase::Stopped]) {
            report.stale_in_outage += 1;
        }
    }
    report.requests = records.len();
    report.crash = server.crash();
    Ok(report)
}

/// The assertions; the failures as text.
fn check(r: &Report, seconds: u64, phase_seconds: u64) -> Vec<String> {
    let mut fail = Vec::new();
    if r.requests < 100 {
        fail.push(format!("only {} requests", r.requests));
    }
    if !r.errors_unexplained.is_empty() {
        fail.push(format!(
            "{} 5xx the origin did not cause, first: {}",
            r.errors_unexplained.len(),
            r.errors_unexplained[0]
        ));
    }
    if let Some(c) = &r.crash {
        fail.push(format!("crash: {c}"));
    }
    if r.bans_accepted == 0 {
        fail.push("no ban was accepted".to_owned());
    }
    if !r.bans_violated.is_empty() {
        fail.push(format!("bans not applied: {:?}", r.bans_violated));
    }
    if seconds >= 5 * phase_seconds && r.stale_in_outage == 0 {
        fail.push("nothing served stale while the origin was stopped".to_owned());
    }
    let third = Duration::from_secs(seconds) / 3;
    let peak = |from: Duration, to: Duration| {
        r.memory
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|(_, m)| *m)
            .max()
    };
    if let (Some(mid), Some(last)) = (peak(third, 2 * third), peak(2 * third, 3 * third + third))
        && last > mid + mid / 10 + 8 * 1024 * 1024
    {
        fail.push(format!(
            "memory grew after warm-up: peak {mid} then {last} bytes"
        ));
    }
    fail
}

/// `--scenario refresh`: every variant on every platform, then the table, the JSON lines
/// and the failures.
fn refresh_main(args: &Args, platforms: &[Platform]) -> std::process::ExitCode {
    let mut variants = Vec::new();
    for name in &args.variant {
        let Some(v) = refresh::VARIANTS.iter().find(|v| v.name == name) else {
            let names: Vec<_> = refresh::VARIANTS.iter().map(|v| v.name).collect();
            eprintln!("cachet-soak: unknown variant {name:?}, one of {names:?}");
            return std::process::ExitCode::from(2);
        };
        variants.push(*v);
    }
    if variants.is_empty() {
        variants = refresh::VARIANTS.to_vec();
    }
    let mut rows = Vec::new();
    for &p in platforms {
        match refresh::run(p, &variants, args.seconds(), args.clients()) {
            Ok(r) => rows.extend(r),
            Err(e) => {
                eprintln!("cachet-soak refresh {p:?}: setup failed: {e:#}");
                return std::process::ExitCode::from(2);
            }
        }
    }
    print!("{}", refresh::table(&rows));
    for r in &rows {
        println!("{}", refresh::json(r));
    }
    let mut failed = false;
    for r in &rows {
        for f in refresh::check(r) {
            println!("cachet-soak refresh {}: FAIL: {f}", refresh::label(r));
            failed = true;
        }
    }
    if failed {
        std::process::ExitCode::from(1)
    } else {
        std::process::ExitCode::SUCCESS
    }
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let platforms: &[Platform] = match args.platform {
        Platform::Both => &[Platform::Edge, Platform::Envoy],
        Platform::Edge => &[Platform::Edge],
        Platform::Envoy => &[Platform::Envoy],
        Platform::Module => &[Platform::Module],
    };
    if args.scenario == Scenario::Refresh {
        return refresh_main(&args, platforms);
    }
    let mut failed = false;
    for &p in platforms {
        let report = match soak(p, &args) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("cachet-soak {p:?}: setup failed: {e:#}");
                return std::process::ExitCode::from(2);
            }
        };
        let mem = |i: usize| report.memory.get(i).map_or(0, |(_, m)| *m / 1024 / 1024);
        println!(
            "cachet-soak {p:?}: {} s, {} requests {:?}; 5xx caused by the origin {}, unexplained {}; \
             bans accepted {}, applied {}; stale while the origin was stopped {}; \
             memory {} MiB at start, {} MiB at the end",
            args.seconds(),
            report.requests,
            report.by_cache,
            report.errors_explained,
            report.errors_unexplained.len(),
            report.bans_accepted,
            report.bans_applied,
            report.stale_in_outage,
            mem(0),
            mem(report.memory.len().saturating_sub(1)),
        );
        for f in check(&report, args.seconds(), args.phase_seconds) {
            println!("cachet-soak {p:?}: FAIL: {f}");
            failed = true;
        }
    }
    if failed {
        std::process::ExitCode::from(1)
    } else {
        std::process::ExitCode::SUCCESS
    }
}
