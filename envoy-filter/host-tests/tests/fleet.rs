//! A fleet on loopback (docs/fleet.md): the demo origin, 2 shield Envoys and 3 edge Envoys
//! from `envoy-filter/fleet/{shield,edge}.yaml`, each Envoy on its own free ports and base
//! id, started and stopped by the test (bounded in time).
//!
//! * each object requested through all 3 edges costs 1 origin fetch with the shield tier,
//!   3 without it (the same 3 edges on `envoy.yaml`, straight to the origin);
//! * one shield killed under steady load: no request that was not in flight at the kill
//!   fails, and traffic goes on through the other shield;
//! * with the ban log in etcd, a ban or purge an edge applies before its shield never
//!   lets the edge serve the shield's pre-ban copy as a `HIT` (issue 27 item 7).
//!
//! Short form by default (`FLEET_OBJECTS` = 200 objects); the full form of docs/fleet.md:
//! `CACHET_FLEET_OBJECTS=1000`. Skipped, loudly, only when `CACHET_ENVOY` is unset
//! (under `CI` that is a failure, as for the other real-Envoy tests).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use cachet_conformance::Target;
use cachet_demo_origin::RunningOrigin;
use cachet_envoy_host_tests::envoy::{self, Envoy};
use cachet_envoy_host_tests::filter_wasm;

/// Objects requested through every edge in the short form (CI).
const FLEET_OBJECTS: usize = 200;

/// Workers per Envoy: 5 Envoys share the machine's 2 cores.
const CONCURRENCY: u8 = 1;

/// Objects per probe batch of [`settle`].
const SETTLE_PROBES: usize = 20;

/// Longest wait for every edge's ring to agree ([`settle`]).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The admin token of a fleet with etcd ([`start_fleet_with`]).
const TOKEN: &str = "demo-admin-token";

/// How often edges poll etcd in [`start_fleet_with`].
const EDGE_POLL: &str = "300ms";

/// How often shields poll etcd in [`start_fleet_with`]: much slower than the edges, so a
/// ban usually reaches an edge first (the order issue 27 item 7 is about).
const SHIELD_POLL: &str = "15s";

/// Port numbers in the example files, replaced by free ones.
const EDGE_LISTEN: u16 = 10000;
const EDGE_ADMIN: u16 = 9901;
const SHIELD_LISTEN: [u16; 2] = [10100, 10101];
const SHIELD_ADMIN: u16 = 9910;
const ORIGIN: u16 = 8080;

/// Objects in this run: `$CACHET_FLEET_OBJECTS`, else [`FLEET_OBJECTS`].
fn objects() -> usize {
    std::env::var("CACHET_FLEET_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(FLEET_OBJECTS)
}

/// The envoy binary, or `None` after a loud skip message (a failure under `CI`).
fn envoy_binary() -> Option<std::path::PathBuf> {
    let bin = envoy::binary();
    if bin.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CACHET_ENVOY is unset under CI: scripts/test sets it to the pinned envoy"
        );
        eprintln!(
            "\n\n*** SKIPPED: CACHET_ENVOY is unset; set it to the envoy binary \
             (scripts/test does: CACHET_ENVOY=$(ensure_envoy)) to run the fleet tests ***\n"
        );
    }
    bin
}

fn origin() -> RunningOrigin {
    cachet_demo_origin::spawn(cachet_demo_origin::OriginConfig::ephemeral()).expect("origin")
}

/// One fleet: shields first (the edges' health checks find them up), then edges.
struct Fleet {
    shields: Vec<Envoy>,
    edges: Vec<Envoy>,
}

/// The example edge configuration with a health check that tolerates a slow shield: a
/// 5 s timeout and 3 failures (the example's 1 s and 2). On a loaded 2-core CI machine the
/// example's check timed out on a live shield, the edges ejected it, and its keys moved to
/// the other shield and were fetched twice (220 origin fetches for 200 objects). A killed
/// shield still fails at once (connection refused) and is ejected within seconds, which
/// the kill below checks.
fn tolerant_health_checks(yaml: &str) -> String {
    let (from, to) = (
        "    - timeout: 1s\n      interval: 1s\n",
        "    - timeout: 5s\n      interval: 1s\n",
    );
    let (from_t, to_t) = ("unhealthy_threshold: 2\n", "unhealthy_threshold: 3\n");
    assert!(
        yaml.contains(from) && yaml.contains(from_t),
        "edge.yaml's health check changed: update tolerant_health_checks"
    );
    yaml.replacen(from, to, 1).replacen(from_t, to_t, 1)
}

/// Which Envoy host every node of a fleet runs (issue 33).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Host {
    /// The proxy-wasm filter, as the example files load it.
    Filter,
    /// The dynamic module, the examples' filter block swapped for the module's
    /// (`envoy::on_module`, docs/fleet.md).
    Module,
}

fn start_fleet(bin: &std::path::Path, origin: SocketAddr, edges: usize) -> Fleet {
    start_fleet_with(bin, origin, edges, None, Host::Filter)
}

/// The plugin configuration edit of [`start_fleet_with`]: with etcd, the fleet's ban log
/// there, polled every `poll`, and the admin token [`TOKEN`].
fn fleet_config(etcd_port: Option<u16>, poll: &'static str) -> impl Fn(&mut serde_json::Value) {
    move |cfg: &mut serde_json::Value| {
        if etcd_port.is_some() {
            cfg["admin"]["token"] = serde_json::json!(TOKEN);
            cfg["envoy"]["etcd_cluster"] = serde_json::json!("etcd");
            cfg["envoy"]["etcd_interval"] = serde_json::json!(poll);
        }
    }
}

/// The example shield and edge YAMLs for `host`, with the `etcd` cluster on `etcd_port`
/// when given and the edges' tolerant health checks.
fn fleet_yamls(host: Host, etcd_port: Option<u16>) -> (String, String) {
    let prepare = |yaml: String| {
        let yaml = match host {
            Host::Filter => yaml,
            Host::Module => envoy::on_module(&yaml).expect("the examples' filter block"),
        };
        match etcd_port {
            Some(port) => cachet_envoy_host_tests::etcd::with_cluster(&yaml, port),
            None => yaml,
        }
    };
    let read = |name: &str| std::fs::read_to_string(envoy::fleet_yaml(name)).expect(name);
    (
        prepare(read("shield")),
        prepare(tolerant_health_checks(&read("edge"))),
    )
}

/// [`start_fleet`], with the fleet's ban log in the etcd on `etcd_port` when given (as
/// docs/fleet.md sets it up: `envoy.etcd_cluster` on every node), the admin token
/// [`TOKEN`], edges polling every [`EDGE_POLL`] and shields every [`SHIELD_POLL`], so a ban
/// reaches the edges first.
fn start_fleet_with(
    bin: &std::path::Path,
    origin: SocketAddr,
    edges: usize,
    etcd_port: Option<u16>,
    host: Host,
) -> Fleet {
    let wasm = match host {
        Host::Filter => filter_wasm().expect("filter wasm"),
        Host::Module => {
            cachet_envoy_host_tests::build_module().expect("the dynamic module");
            std::path::PathBuf::new()
        }
    };
    let (shield_yaml, edge_yaml) = fleet_yamls(host, etcd_port);
    let (shield_config, edge_config) = (
        fleet_config(etcd_port, SHIELD_POLL),
        fleet_config(etcd_port, EDGE_POLL),
    );
    let ports = |n: usize| -> Vec<(u16, u16)> {
        (0..n)
            .map(|_| {
                (
                    envoy::free_port().expect("port"),
                    envoy::free_port().expect("port"),
                )
            })
            .collect()
    };
    // Spawned from this thread, which outlives them (Envoy stops when the thread that
    // started it ends), all at once; then each is waited for.
    let ready = |mut envoys: Vec<Envoy>| -> Vec<Envoy> {
        for e in &mut envoys {
            e.wait_ready().expect("envoy ready");
        }
        envoys
    };
    let shield_ports = ports(SHIELD_LISTEN.len());
    let shields = ready(
        (shield_ports.iter())
            .map(|&(listen, admin)| {
                let yaml = Envoy::configure_ports(
                    &shield_yaml,
                    &[
                        (SHIELD_LISTEN[0], listen),
                        (SHIELD_ADMIN, admin),
                        (ORIGIN, origin.port()),
                    ],
                    &wasm,
                    &shield_config,
                )
                .expect("shield yaml");
                Envoy::spawn_yaml(bin, &yaml, listen, admin, CONCURRENCY).expect("shield")
            })
            .collect(),
    );
    let edges = ready(
        (ports(edges).iter())
            .map(|&(listen, admin)| {
                let mut map = vec![(EDGE_LISTEN, listen), (EDGE_ADMIN, admin)];
                map.extend(
                    SHIELD_LISTEN
                        .iter()
                        .zip(&shield_ports)
                        .map(|(&from, &(to, _))| (from, to)),
                );
                let yaml = Envoy::configure_ports(&edge_yaml, &map, &wasm, &edge_config)
                    .expect("edge yaml");
                Envoy::spawn_yaml(bin, &yaml, listen, admin, CONCURRENCY).expect("edge")
            })
            .collect(),
    );
    // Steady state: every edge has seen every shield pass its active health check (a
    // shield joining the ring moves its keys to it, which would cost refetches).
    let deadline = Instant::now() + Duration::from_secs(60);
    let healthy = |e: &Envoy| {
        e.metric("cluster.shield.membership_healthy")
            .is_ok_and(|h| h == shields.len() as u64)
    };
    while Instant::now() < deadline && !edges.iter().all(healthy) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(edges.iter().all(healthy), "shields healthy on every edge");
    Fleet { shields, edges }
}

/// Waits until every edge routes like the others: the admin's health gauge moves on
/// Envoy's main thread and the worker's ring follows a little later (measured: fills
/// sent in the first seconds after both shields turned healthy still went to one shield
/// on some edges, so some keys were fetched by both). Probes batches of
/// [`SETTLE_PROBES`] new objects through every edge until a batch costs exactly one
/// origin fetch per object and every shield filled some of them (bounded by
/// [`SETTLE_TIMEOUT`]). One fetch per object alone is not enough: a CI run saw every
/// edge's worker still route all keys to shield 0 (a consistent ring without shield 1)
/// after the admin gauge said both were healthy; the probes agreed, and shield 1 joined
/// the rings during the measured batch (204 fetches for 200 objects). With both shields
/// in every ring, 20 probes all landing on one shield has odds of about 2 in a million.
fn settle(fleet: &Fleet, origin: &RunningOrigin) {
    let edges: Vec<SocketAddr> = fleet.edges.iter().map(|e| e.addr).collect();
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    for round in 0.. {
        let prefix = format!("/t/settle-{round}-");
        let before = misses(&fleet.shields);
        request_everywhere(&edges, origin, "GET", &prefix, SETTLE_PROBES).expect("probes");
        let per_shield = minus(&misses(&fleet.shields), &before);
        if origin_count(origin, &prefix) == SETTLE_PROBES as u64
            && per_shield.iter().all(|&m| m > 0)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "edges still disagree on the ring, or leave a shield out of it, after {SETTLE_TIMEOUT:?}"
        );
    }
}

/// Origin requests for paths starting with `prefix`.
fn origin_count(origin: &RunningOrigin, prefix: &str) -> u64 {
    (origin.stats().by_path.iter())
        .filter(|(p, _)| p.starts_with(prefix))
        .map(|(_, n)| n)
        .sum()
}

/// A cacheable test object (10 minutes) on the catch-all route.
fn object_path(prefix: &str, i: usize) -> String {
    format!("{prefix}{i}?cc=public,max-age%3D600")
}

/// Requests `n` objects through every edge, one thread per edge (so the edges miss the
/// same keys at about the same time); every answer must be a `200`, else the first
/// problem of each edge is returned.
fn request_everywhere(
    edges: &[SocketAddr],
    origin: &RunningOrigin,
    method: &str,
    prefix: &str,
    n: usize,
) -> Result<(), String> {
    let problems: Vec<String> = std::thread::scope(|s| {
        let threads: Vec<_> = (edges.iter())
            .map(|&edge| {
                let t = Target::new(&format!("http://{edge}"), &origin.url(""));
                s.spawn(move || {
                    for i in 0..n {
                        let path = object_path(prefix, i);
                        match t.send(method, "cdn.example", &path, &[], None) {
                            Ok(r) if r.status == 200 => {}
                            Ok(r) => {
                                return Err(format!(
                                    "{path} via {edge}: {} {}",
                                    r.status,
                                    r.text()
                                ));
                            }
                            Err(e) => return Err(format!("{path} via {edge}: {e}")),
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        threads
            .into_iter()
            .filter_map(|h| h.join().expect("thread").err())
            .collect()
    });
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// The tail of every Envoy's output, for a failure message.
fn outputs(envoys: &[&Envoy]) -> String {
    (envoys.iter().enumerate())
        .map(|(i, e)| {
            let out = e.output();
            let tail: Vec<&str> = out.lines().rev().take(30).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            format!("--- envoy {i} ({}):\n{}", e.addr, tail.join("\n"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn without_a_shield_tier_three_edges_fetch_each_object_three_times() {
    let Some(bin) = envoy_binary() else { return };
    let origin = origin();
    let wasm = filter_wasm().expect("filter wasm");
    // Spawned from this thread (Envoy stops when the thread that started it ends),
    // all at once.
    let mut edges: Vec<Envoy> = (0..3)
        .map(|_| {
            let (listen, admin) = (
                envoy::free_port().expect("port"),
                envoy::free_port().expect("port"),
            );
            let yaml = std::fs::read_to_string(envoy::example_yaml()).expect("envoy.yaml");
            let yaml = Envoy::configure(&yaml, listen, admin, origin.addr(), &wasm, &|_| {})
                .expect("yaml");
            Envoy::spawn_yaml(&bin, &yaml, listen, admin, CONCURRENCY).expect("envoy")
        })
        .collect();
    for e in &mut edges {
        e.wait_ready().expect("envoy ready");
    }
    let n = objects();
    let addrs: Vec<SocketAddr> = edges.iter().map(|e| e.addr).collect();
    let began = Instant::now();
    if let Err(e) = request_everywhere(&addrs, &origin, "GET", "/t/solo-", n) {
        panic!("{e}\n{}", outputs(&edges.iter().collect::<Vec<_>>()));
    }
    let fetched = origin_count(&origin, "/t/solo-");
    println!(
        "without a shield tier: {n} objects x 3 edges -> {fetched} origin fetches ({:.1} s)",
        began.elapsed().as_secs_f64()
    );
    assert_eq!(
        fetched,
        3 * n as u64,
        "each edge fetches each object itself"
    );
}

/// One request of the load: when it started, when it ended, its status or what failed.
type Sent = (Instant, Instant, Result<u16, String>);

fn misses(envoys: &[Envoy]) -> Vec<u64> {
    (envoys.iter())
        .map(|e| e.metric("cachet.misses").expect("stats"))
        .collect()
}

fn minus(after: &[u64], before: &[u64]) -> Vec<u64> {
    after.iter().zip(before).map(|(a, b)| a - b).collect()
}

/// Requests `n` objects (`method`, paths under `prefix`) through every edge and checks
/// that they cost `n` origin fetches, spread over both shields; prints the figures.
fn each_object_once(fleet: &Fleet, origin: &RunningOrigin, method: &str, prefix: &str, n: usize) {
    let edges: Vec<SocketAddr> = fleet.edges.iter().map(|e| e.addr).collect();
    let (shields_before, edges_before) = (misses(&fleet.shields), misses(&fleet.edges));
    let began = Instant::now();
    if let Err(e) = request_everywhere(&edges, origin, method, prefix, n) {
        let all: Vec<&Envoy> = fleet.edges.iter().chain(&fleet.shields).collect();
        panic!("{e}\n{}", outputs(&all));
    }
    let fetched = origin_count(origin, prefix);
    let per_shield = minus(&misses(&fleet.shields), &shields_before);
    let edge_misses: u64 = minus(&misses(&fleet.edges), &edges_before).iter().sum();
    println!(
        "with a shield tier, {method}: {n} objects x 3 edges -> {fetched} origin fetches \
         ({:.1} s); shield misses {per_shield:?}; edge misses {edge_misses}",
        began.elapsed().as_secs_f64()
    );
    let diagnostics = || {
        let edges = (fleet.edges.iter()).map(|e| e.stats("cluster.shield.").unwrap_or_default());
        let shields = (fleet.shields.iter()).map(|e| e.stats("cachet").unwrap_or_default());
        edges.chain(shields).collect::<Vec<_>>().join("\n---\n")
    };
    assert_eq!(
        fetched,
        n as u64,
        "one origin fetch per object for the whole fleet\n{}",
        diagnostics()
    );
    assert_eq!(
        edge_misses,
        3 * n as u64,
        "every edge missed every object once"
    );
    assert_eq!(per_shield.iter().sum::<u64>(), n as u64, "{per_shield:?}");
    assert!(
        per_shield.iter().all(|&m| m > n as u64 / 5),
        "the ring spreads the keys over both shields (hashed on the shard field, not on \
         :authority): {per_shield:?}"
    );
}

/// Steady load of new objects (each one edge → shield → origin) from 4 threads; shield 0
/// is killed a second in; the load goes on until every edge has ejected it (bounded),
/// then 2 s more. Returns every request, the kill's instant and how long the ejection took.
fn load_through_a_kill(
    fleet: &mut Fleet,
    origin: &RunningOrigin,
) -> (Vec<Sent>, Instant, Duration) {
    let edges: Vec<SocketAddr> = fleet.edges.iter().map(|e| e.addr).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let seq = Arc::new(AtomicUsize::new(0));
    let log: Arc<Mutex<Vec<Sent>>> = Arc::default();
    let (kill_at, ejected_after) = std::thread::scope(|s| {
        for w in 0..4 {
            let (stop, seq, log) = (Arc::clone(&stop), Arc::clone(&seq), Arc::clone(&log));
            let edge = edges[w % edges.len()];
            let t = Target::new(&format!("http://{edge}"), &origin.url(""));
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let i = seq.fetch_add(1, Ordering::Relaxed);
                    let start = Instant::now();
                    let r = t
                        .send("GET", "cdn.example", &object_path("/t/load-", i), &[], None)
                        .map_err(|e| e.to_string())
                        .and_then(|r| {
                            if (200..300).contains(&r.status) {
                                Ok(r.status)
                            } else {
                                let label = r.headers.get("x-cache").cloned();
                                Err(format!("{} {label:?} {}", r.status, r.text()))
                            }
                        });
                    let end = Instant::now();
                    log.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((start, end, r));
                }
            });
        }
        std::thread::sleep(Duration::from_secs(1));
        let kill_at = Instant::now();
        fleet.shields[0].kill();
        let deadline = kill_at + Duration::from_secs(30);
        let ejected = |e: &Envoy| {
            e.metric("cluster.shield.membership_healthy")
                .is_ok_and(|h| h == 1)
        };
        while Instant::now() < deadline && !fleet.edges.iter().all(ejected) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let ejected_after = kill_at.elapsed();
        std::thread::sleep(Duration::from_secs(2));
        stop.store(true, Ordering::Relaxed);
        (kill_at, ejected_after)
    });
    let log = std::mem::take(&mut *log.lock().unwrap_or_else(PoisonError::into_inner));
    (log, kill_at, ejected_after)
}

#[test]
fn with_a_shield_tier_each_object_is_fetched_once_and_a_shield_can_die_under_load() {
    let Some(bin) = envoy_binary() else { return };
    let origin = origin();
    let mut fleet = start_fleet(&bin, origin.addr(), 3);
    settle(&fleet, &origin);

    // (a) N objects through all 3 edges: N origin fetches, spread over both shields.
    let n = objects();
    each_object_once(&fleet, &origin, "GET", "/t/fleet-", n);
    // (a') The same through callouts: a `HEAD` miss is filled by `dispatch_http_call`
    // (no route). Every key of `cdn.example` would go to one shield on the `:authority`
    // hash Envoy's Wasm host sets; the cluster's `hash_policy` on the shard field spreads
    // them and keeps one fetch per object.
    each_object_once(&fleet, &origin, "HEAD", "/t/head-", n / 2);

    // (b) One shield killed under steady load.
    let survivor_before = misses(&fleet.shields)[1];
    let (log, kill_at, ejected_after) = load_through_a_kill(&mut fleet, &origin);
    let in_flight = (log.iter())
        .filter(|(start, end, _)| *start <= kill_at && *end >= kill_at)
        .count();
    let failures: Vec<&Sent> = log.iter().filter(|(_, _, r)| r.is_err()).collect();
    let after: Vec<&Sent> = log
        .iter()
        .filter(|(start, _, _)| *start > kill_at)
        .collect();
    println!(
        "shield killed under load: {} requests ({} started after the kill), {} in flight \
         at the kill, {} non-2xx; every edge ejected the dead shield {:.2} s after the kill",
        log.len(),
        after.len(),
        in_flight,
        failures.len(),
        ejected_after.as_secs_f64()
    );
    assert!(
        (fleet.edges.iter()).all(|e| e.metric("cluster.shield.membership_healthy").ok() == Some(1)),
        "the dead shield is ejected by every edge within 30 s"
    );
    for (start, end, r) in &failures {
        assert!(
            *start <= kill_at && *end >= kill_at,
            "a request that was not in flight at the kill failed: {r:?} ({:?} after the kill)",
            start.saturating_duration_since(kill_at)
        );
    }
    assert!(failures.len() <= in_flight);
    assert!(
        after.len() >= 20 && after.iter().all(|(_, _, r)| r.is_ok()),
        "traffic goes on after the kill: {} requests",
        after.len()
    );
    // The survivor took over the dead shield's keys.
    assert!(misses(&fleet.shields[1..])[0] > survivor_before);
}

/// Issue 27 item 7, on the fleet of docs/fleet.md with its ban log in etcd: a ban, and a
/// surrogate-key purge, sent to an edge and applied there before the owning shield
/// applies it. The edge refills from the shield, which still holds its pre-ban copy, and
/// says when that copy left the origin (`x-cachet-content-at`): the edge's new copy is
/// banned too, so from the moment the edge lists the entry until the shield has fetched
/// the new content, that edge never answers `HIT`; once the shield has, every edge
/// converges on the new copy and hits again.
#[test]
fn a_ban_or_purge_the_edge_applies_before_its_shield_never_serves_the_pre_ban_copy() {
    ban_before_shield(Host::Filter);
}

/// The same on a fleet whose every node runs the dynamic module.
#[test]
fn on_the_module_a_ban_or_purge_the_edge_applies_before_its_shield_never_serves_the_pre_ban_copy() {
    ban_before_shield(Host::Module);
}

/// A fleet whose every node runs the dynamic module: each object costs one origin fetch
/// through all 3 edges, routed (`GET`) and by callout (`HEAD`), spread over both shields.
#[test]
fn on_the_module_with_a_shield_tier_each_object_is_fetched_once() {
    let Some(bin) = envoy_binary() else { return };
    let origin = origin();
    let fleet = start_fleet_with(&bin, origin.addr(), 3, None, Host::Module);
    settle(&fleet, &origin);
    let n = objects() / 2;
    each_object_once(&fleet, &origin, "GET", "/t/fleet-", n);
    each_object_once(&fleet, &origin, "HEAD", "/t/head-", n / 2);
}

fn ban_before_shield(host: Host) {
    let Some(bin) = envoy_binary() else { return };
    let Some(etcd_bin) = cachet_envoy_host_tests::etcd::binary() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CACHET_ETCD is unset under CI: scripts/test sets it"
        );
        eprintln!("\n*** SKIPPED: set CACHET_ETCD (scripts/test does) ***\n");
        return;
    };
    let etcd = cachet_envoy_host_tests::etcd::Etcd::start(&etcd_bin).expect("etcd");
    let origin = origin();
    let fleet = start_fleet_with(&bin, origin.addr(), 3, Some(etcd.port), host);
    settle(&fleet, &origin);
    let edges: Vec<Target> = (fleet.edges.iter())
        .map(|e| Target::new(&format!("http://{}", e.addr), &origin.url("")))
        .collect();
    let auth = format!("Bearer {TOKEN}");
    let ban = [("authorization", auth.as_str())];
    edge_first(
        &fleet,
        &edges,
        &origin,
        ("ban", "/t/fleet-ban-0?cc=public,max-age%3D600"),
        &Admin {
            path: "/.cachet/ban",
            headers: &ban,
            body: Some(b"obj.http.x-url ~ ^/t/fleet-ban-0"),
        },
    );
    let purge = [
        ("authorization", auth.as_str()),
        ("surrogate-key", "fleet-purge-key"),
    ];
    edge_first(
        &fleet,
        &edges,
        &origin,
        (
            "purge",
            "/t/fleet-purge-0?cc=public,max-age%3D600&sk=fleet-purge-key",
        ),
        &Admin {
            path: "/.cachet/purge",
            headers: &purge,
            body: None,
        },
    );
}

/// One case of [`a_ban_or_purge_the_edge_applies_before_its_shield_never_serves_the_pre_ban_copy`]:
/// `path` primed on every edge, then the admin `call` (with `headers` and `body`) sent to
/// edge 0, then edge 0 asked until the shield has refetched, then every edge until it hits.
fn edge_first(
    fleet: &Fleet,
    edges: &[Target],
    origin: &RunningOrigin,
    (what, path): (&str, &str),
    admin: &Admin<'_>,
) {
    let Admin {
        path: call,
        headers,
        body,
    } = *admin;
    let prefix = path.split('?').next().unwrap_or(path);
    for t in edges {
        for _ in 0..2 {
            let r = t.send("GET", "cdn.example", path, &[], None).expect("get");
            assert_eq!(r.status, 200, "{what}: {}", r.text());
        }
    }
    assert_eq!(
        origin_count(origin, prefix),
        1,
        "{what}: one fill for the fleet"
    );
    let listed = || {
        let r = edges[0]
            .send("GET", "cdn.example", "/.cachet/bans", &headers[..1], None)
            .expect("bans");
        let v: serde_json::Value = serde_json::from_str(&r.text()).unwrap_or_default();
        (v["bans"].as_array())
            .map(|b| b.iter().map(|e| e["id"].to_string()).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    // By id, not by count: the lurker may retire the previous case's ban meanwhile.
    let before = listed();
    let r = edges[0]
        .send("POST", "cdn.example", call, headers, body)
        .expect("admin");
    assert!(
        matches!(r.status, 200 | 201),
        "{what}: {} {}",
        r.status,
        r.text()
    );
    // Edge 0 applies it from its next poll (at once after a write it accepted).
    let deadline = Instant::now() + Duration::from_secs(10);
    while listed().iter().all(|id| before.contains(id)) {
        assert!(Instant::now() < deadline, "{what}: edge 0 never listed it");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Until the shield has applied it (the origin sees the path again), edge 0, which
    // accepted it and applied it first, answers only MISS.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut before_shield, mut hits) = (0, Vec::new());
    while origin_count(origin, prefix) < 2 {
        assert!(
            Instant::now() < deadline,
            "{what}: no refetch reached the origin in 60 s: edge 0 kept serving a copy \
             ({} of {before_shield} answers HIT), or the shield never applied it\n{}",
            hits.len(),
            outputs(&fleet.shields.iter().collect::<Vec<_>>())
        );
        let r = edges[0]
            .send("GET", "cdn.example", path, &[], None)
            .expect("get");
        let cache = r.headers.get("x-cache").cloned().unwrap_or_default();
        if origin_count(origin, prefix) < 2 {
            before_shield += 1;
            if cache == "HIT" {
                hits.push(before_shield);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("{what}: {before_shield} answers on the edge before the shield applied it");
    assert!(
        hits.is_empty(),
        "{what}: the shield's pre-ban copy was served as a HIT (answers {hits:?} of {before_shield})"
    );
    assert!(
        before_shield > 0,
        "{what}: the shield applied it before the edge was asked"
    );
    until_every_edge_hits(edges, what, path);
    assert_eq!(
        origin_count(origin, prefix),
        2,
        "{what}: one refetch for the fleet"
    );
}

/// Asks every edge for `path` until it answers `HIT` (bounded): the fleet converged on
/// the new copy.
fn until_every_edge_hits(edges: &[Target], what: &str, path: &str) {
    for (i, t) in edges.iter().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = t.send("GET", "cdn.example", path, &[], None).expect("get");
            if r.headers.get("x-cache").map(String::as_str) == Some("HIT") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: edge {i} never hits again"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// An admin call: its path, headers and body.
#[derive(Clone, Copy)]
struct Admin<'a> {
    path: &'a str,
    headers: &'a [(&'a str, &'a str)],
    body: Option<&'a [u8]>,
}
