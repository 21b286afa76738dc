//! `cachet stat` against real Envoy with the Cachet filter in front of the demo origin:
//! after a miss, hits, a pass and a synthesized answer, `cachet stat --once --json` reports
//! exactly the numbers Envoy's admin `/stats` shows.
//!
//! Envoy: `$CACHET_ENVOY`, else the pinned one `scripts/test` installs in `.venv/`; the
//! filter: `$CACHET_ENVOY_WASM`, else built. A missing Envoy fails the test with the fix.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use cachet_envoy_host_tests::envoy::{self, Envoy};
use cachet_envoy_host_tests::filter_wasm;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn envoy_binary() -> PathBuf {
    let pinned = root().join(".venv/bin/envoy");
    envoy::binary()
        .or_else(|| pinned.exists().then_some(pinned))
        .expect(
            "envoy not found: set CACHET_ENVOY to the envoy binary, or run scripts/test \
             (it installs the pinned envoy 1.40.0 into .venv/)",
        )
}

/// `wasmcustom.cachet.<name>` values from `/stats` text.
fn cachet_stats(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| l.split_once(": "))
        .filter_map(|(k, v)| {
            let name = k.strip_prefix("wasmcustom.cachet.")?;
            Some((name.to_owned(), v.trim().parse().ok()?))
        })
        .collect()
}

fn get(agent: &ureq::Agent, base: &str, host: &str, path: &str) -> String {
    let req = agent.get(format!("{base}{path}")).header("Host", host);
    let r = req.call().expect("request through envoy");
    r.headers()
        .get("x-cache")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

#[test]
fn stat_once_json_equals_envoy_admin_stats() {
    let origin = cachet_demo_origin::spawn(cachet_demo_origin::OriginConfig::ephemeral())
        .expect("demo origin");
    let wasm = filter_wasm().expect("filter wasm");
    let e = Envoy::start(&envoy_binary(), &wasm, origin.addr(), &|_| {}).expect("envoy");
    let base = format!("http://{}", e.addr);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut labels = Vec::new();
    for _ in 0..3 {
        labels.push(get(&agent, &base, "blog.example", "/blog/alice/entry/1"));
    }
    // The account pages' route passes.
    labels.push(get(&agent, &base, "blog.example", "/account"));
    labels.push(get(&agent, &base, "blog.example", "/robots.txt"));
    assert_eq!(
        labels,
        ["MISS", "HIT", "HIT", "PASS", "SYNTH"],
        "{}",
        e.output()
    );

    let before = cachet_stats(&e.stats("cachet").expect("stats"));
    let out = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .args(["stat", "--once", "--json", "--interval", "200ms", "--envoy"])
        .arg(e.admin.to_string())
        .arg("--config")
        .arg(root().join("edge-app/cachet.toml"))
        .output()
        .expect("run cachet");
    let after = cachet_stats(&e.stats("cachet").expect("stats"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    assert_eq!(stdout.lines().count(), 1, "one JSON object: {stdout}");
    let j: serde_json::Value = serde_json::from_str(&stdout).expect("json");

    assert!(
        after.len() >= 25,
        "every filter metric is at /stats: {after:?}"
    );
    for (name, &value) in &after {
        let got = j["totals"][name]
            .as_u64()
            .or_else(|| j["gauges"][name].as_u64());
        if before[name] == value {
            assert_eq!(got, Some(value), "{name}: /stats {value}, cachet stat {j}");
        } else {
            // A metric that moved between the two readings (the lurker counts on every
            // tick, possibly more than once while `cachet stat` reads): what `cachet stat`
            // read lies between them.
            let (lo, hi) = (before[name].min(value), before[name].max(value));
            assert!(
                got.is_some_and(|g| (lo..=hi).contains(&g)),
                "{name}: /stats {} then {value}, cachet stat {got:?}",
                before[name]
            );
        }
    }
    assert_eq!(after["misses"], 1);
    assert_eq!(after["passes"], 1);
    assert_eq!(after["synth"], 1);
    assert_eq!(after["hits_local"] + after["hits_shared"], 2);
    assert_eq!(j["totals"]["hits"], 2);
    assert_eq!(j["totals"]["requests"], 5);
    assert_eq!(
        j["totals"]["origin_fetches"],
        after["misses"] + after["passes"] + after["refreshes"]
    );
    assert_eq!(j["hit_ratio"], 0.5, "2 hits of 4 lookups: {j}");
    let bound = cachet_policy::Config::from_toml(
        &std::fs::read_to_string(root().join("edge-app/cachet.toml")).expect("config"),
    )
    .expect("valid config")
    .envoy
    .shared_bytes;
    assert_eq!(j["bytes_bound"], bound);
    // Two readings 200 ms apart, nothing in between.
    let interval = j["rates"]["interval_s"].as_f64().expect("rates");
    assert!((0.2..2.0).contains(&interval), "{j}");
    assert_eq!(j["rates"]["per_second"]["misses"], 0.0);
    assert_eq!(j["source"], "envoy");
    assert!(
        Duration::from_secs_f64(j["elapsed_s"].as_f64().expect("elapsed"))
            >= Duration::from_millis(200)
    );
}
