//! Fleet-wide bans in etcd, end to end: two real Envoys (2 workers each) with `envoy.etcd_cluster`, one etcd, the demo origin; the nodes run the proxy-wasm filter, the dynamic module, or one of each. A ban or purge sent to either node applies on both within the documented bound (measured: p50/p99); with etcd down the nodes keep serving and refuse bans with 503; when it returns everything converges.
//!
//! Skipped, loudly, only when `CACHET_ENVOY` or `CACHET_ETCD` is unset outside CI;
//! `scripts/test` sets both.

use std::time::{Duration, Instant};

use cachet_conformance::Target;
use cachet_envoy_host_tests::envoy::{self, Envoy};
use cachet_envoy_host_tests::etcd::{self, Etcd};
use cachet_envoy_host_tests::filter_wasm;

const TOKEN: &str = "demo-admin-token";

/// The poll period the nodes run with here (`envoy.etcd_interval`).
const POLL: Duration = Duration::from_millis(500);

/// The bound a ban must meet on every node: the poll period, one tick (100 ms in
/// envoy.yaml), an etcd round trip, with room for a loaded CI host.
const BOUND: Duration = Duration::from_secs(5);

/// Bans sent in the convergence measurement (docs/fleet.md has a longer run's figures).
fn rounds() -> usize {
    std::env::var("CACHET_FLEET_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6)
}

struct Fleet {
    origin: cachet_demo_origin::RunningOrigin,
    etcd: Etcd,
    nodes: Vec<Envoy>,
}

/// Which Envoy host a node runs: the proxy-wasm filter or the dynamic module (issue 33).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Host {
    Filter,
    Module,
}

fn fleet(hosts: &[Host]) -> Option<Fleet> {
    let (Some(envoy_bin), Some(etcd_bin)) = (envoy::binary(), etcd::binary()) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CACHET_ENVOY or CACHET_ETCD is unset under CI: scripts/test sets both"
        );
        eprintln!("\n*** SKIPPED: set CACHET_ENVOY and CACHET_ETCD (scripts/test does) ***\n");
        return None;
    };
    let origin = cachet_demo_origin::spawn(cachet_demo_origin::OriginConfig::ephemeral())
        .expect("demo origin");
    let etcd = Etcd::start(&etcd_bin).expect("etcd");
    let wasm = if hosts.contains(&Host::Filter) {
        filter_wasm().expect("filter wasm")
    } else {
        std::path::PathBuf::new()
    };
    if hosts.contains(&Host::Module) {
        cachet_envoy_host_tests::build_module().expect("the dynamic module");
    }
    let port = etcd.port;
    let rewrite = |cfg: &mut serde_json::Value| {
        cfg["admin"]["token"] = serde_json::json!(TOKEN);
        cfg["envoy"]["etcd_cluster"] = serde_json::json!("etcd");
        cfg["envoy"]["etcd_interval"] = serde_json::json!("500ms");
    };
    let with_etcd = |y: String| etcd::with_cluster(&y, port);
    let nodes = hosts
        .iter()
        .map(|host| {
            match host {
                Host::Filter => {
                    Envoy::start_edited(&envoy_bin, &wasm, origin.addr(), &rewrite, &with_etcd)
                }
                Host::Module => {
                    Envoy::start_module_edited(&envoy_bin, origin.addr(), &rewrite, &with_etcd)
                }
            }
            .expect("envoy")
        })
        .collect();
    Some(Fleet {
        origin,
        etcd,
        nodes,
    })
}

impl Fleet {
    fn target(&self, node: usize) -> Target {
        Target::new(
            &format!("http://{}", self.nodes[node].addr),
            &self.origin.url(""),
        )
    }

    /// `X-Cache` of a GET of `path` on `node`.
    fn get(&self, node: usize, path: &str) -> String {
        let r = self
            .target(node)
            .send("GET", "blog.example", path, &[], None)
            .expect("get");
        r.headers.get("x-cache").cloned().unwrap_or_default()
    }

    /// Caches `path` on `node` (a MISS, then a HIT).
    fn cache(&self, node: usize, path: &str) {
        self.get(node, path);
        assert_eq!(self.get(node, path), "HIT", "{path} cached on node {node}");
    }

    fn admin(
        &self,
        node: usize,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> (u16, String) {
        let auth = format!("Bearer {TOKEN}");
        let mut h = vec![("authorization", auth.as_str())];
        h.extend_from_slice(headers);
        let r = self
            .target(node)
            .send("POST", "blog.example", path, &h, body)
            .expect("admin");
        (r.status, r.text())
    }

    /// How long until `path` is no longer a HIT on `node` (bounded by [`BOUND`]).
    fn until_refetched(&self, node: usize, path: &str, since: Instant) -> Duration {
        loop {
            if self.get(node, path) != "HIT" {
                return since.elapsed();
            }
            assert!(
                since.elapsed() < BOUND,
                "{path} still a HIT on node {node} after {BOUND:?}:\n{}",
                self.nodes[node].output()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The `pct`th percentile of `sorted` (nearest rank below).
fn percentile(sorted: &[Duration], pct: usize) -> Duration {
    sorted[(sorted.len() - 1) * pct / 100]
}

#[test]
fn a_ban_or_purge_sent_to_any_node_applies_on_every_node_within_the_bound() {
    converge(&[Host::Filter, Host::Filter]);
}

/// The same fleet with one node on the dynamic module and one on the filter: one log,
/// one contract, either host accepting the write.
#[test]
fn a_fleet_mixing_the_module_and_the_filter_applies_every_ban_on_both() {
    converge(&[Host::Module, Host::Filter]);
}

fn converge(hosts: &[Host]) {
    let Some(f) = fleet(hosts) else { return };
    let mut times = Vec::new();
    for i in 0..rounds() {
        let path = format!("/blog/fleet/entry/{i}");
        f.cache(0, &path);
        f.cache(1, &path);
        let via = i % 2;
        let expr = format!("obj.http.x-url ~ ^/blog/fleet/entry/{i}$");
        let sent = Instant::now();
        let (status, body) = f.admin(via, "/.cachet/ban", &[], Some(expr.as_bytes()));
        assert_eq!(status, 201, "{body}");
        for node in 0..2 {
            times.push(f.until_refetched(node, &path, sent));
        }
    }
    // A hard purge through node 1 reaches node 0.
    let path = "/blog/bob/entry/5";
    f.cache(0, path);
    let sent = Instant::now();
    let (status, body) = f.admin(
        1,
        "/.cachet/purge",
        &[("surrogate-key", "entry-bob-5")],
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""ok":true"#), "{body}");
    times.push(f.until_refetched(0, path, sent));
    // Both nodes list the same fleet log (ids are etcd revisions).
    let list = |node: usize| {
        let auth = format!("Bearer {TOKEN}");
        let r = f
            .target(node)
            .send(
                "GET",
                "blog.example",
                "/.cachet/bans",
                &[("authorization", &auth)],
                None,
            )
            .expect("list");
        let v: serde_json::Value = serde_json::from_str(&r.text()).expect("json");
        let mut ids: Vec<u64> = v["bans"]
            .as_array()
            .map(|b| {
                b.iter()
                    .filter_map(|e| e["expr"].as_str().map(|x| x.len() as u64))
                    .collect()
            })
            .unwrap_or_default();
        ids.sort_unstable();
        ids
    };
    let deadline = Instant::now() + BOUND;
    while list(0) != list(1) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(list(0), list(1), "both nodes hold the same entries");
    times.sort_unstable();
    eprintln!(
        "ban convergence on {hosts:?} over {} node applications (poll {POLL:?}): p50 {:?}, p99 {:?}, max {:?}",
        times.len(),
        percentile(&times, 50),
        percentile(&times, 99),
        times.last().copied().unwrap_or_default()
    );
}

#[test]
fn with_etcd_down_nodes_keep_serving_refuse_bans_and_converge_when_it_returns() {
    outage(&[Host::Filter, Host::Filter]);
}

#[test]
fn with_etcd_down_module_nodes_keep_serving_refuse_bans_and_converge_when_it_returns() {
    outage(&[Host::Module, Host::Module]);
}

fn outage(hosts: &[Host]) {
    let Some(mut f) = fleet(hosts) else { return };
    let path = "/blog/fleet/outage";
    f.cache(0, path);
    f.cache(1, path);
    f.etcd.stop();
    // Serving goes on from the last log.
    assert_eq!(f.get(0, path), "HIT");
    assert_eq!(f.get(1, path), "HIT");
    let expr = format!("obj.http.x-url ~ ^{path}$");
    let (status, body) = f.admin(0, "/.cachet/ban", &[], Some(expr.as_bytes()));
    assert_eq!(status, 503, "never accepted while etcd is down: {body}");
    assert!(body.contains("etcd"), "{body}");
    assert_eq!(f.get(1, path), "HIT", "a refused ban changes nothing");
    f.etcd.resume().expect("etcd back");
    let sent = Instant::now();
    let (status, body) = f.admin(1, "/.cachet/ban", &[], Some(expr.as_bytes()));
    assert_eq!(status, 201, "{body}");
    let took = [
        f.until_refetched(0, path, sent),
        f.until_refetched(1, path, sent),
    ];
    eprintln!("after the outage, applied on both nodes in {took:?}");
    assert!(f.origin.stats().count(path) >= 2);
}
