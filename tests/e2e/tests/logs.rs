//! Logs the tools can read (issue 31): a demo run's Viceroy output, as it is, through the
//! `cachet` binary's `simulate` and `log --ncsa`, with figures checked against what the
//! client saw.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use cachet_e2e::{Stack, ua, workspace_root};

const BLOG: &str = "blog.example";
const LOG_WAIT: Duration = Duration::from_secs(30);

/// The `cachet` binary of this tree (built debug, as the CLI's own tests use it).
/// The `cachet` binary, as the workspace's test build made it: `cargo test --workspace
/// --no-run` is what `cargo nextest run --workspace` ran before this test, so it only
/// checks freshness. (`cargo build -p cachet-cli` resolved features for that one package
/// and rebuilt some 40 dependencies inside the test: 130 s of a CI run.)
fn cachet_bin() -> PathBuf {
    let root = workspace_root();
    let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(&root)
        .args(["test", "-q", "--workspace", "--no-run"])
        .status()
        .expect("running cargo to build the cachet CLI");
    assert!(status.success(), "building cachet-cli failed");
    root.join("target/debug/cachet")
}

fn run(bin: &Path, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cachet runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("stdin written");
    child.wait_with_output().expect("cachet ends")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `2026-03-01T09:00:00.123Z` → `[01/Mar/2026:09:00:00 +0000]`.
fn clf(rfc3339: &str) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month: usize = rfc3339[5..7].parse().expect("month");
    format!(
        "[{}/{}/{}:{} +0000]",
        &rfc3339[8..10],
        MONTHS[month - 1],
        &rfc3339[0..4],
        &rfc3339[11..19]
    )
}

#[test]
fn simulate_and_log_ncsa_read_a_demo_runs_own_output() {
    let bin = cachet_bin();
    let s = Stack::start();
    let entry = "/blog/alice/entry/1";
    let miss = s.get(BLOG, entry, &[("user-agent", ua::IPHONE)]);
    let hit = s.get(BLOG, entry, &[("user-agent", ua::IPHONE)]);
    let synth = s.get(BLOG, "/robots.txt", &[("user-agent", ua::DESKTOP)]);
    let pass = s.get(BLOG, "/account", &[("user-agent", "bot \"x\"")]);
    assert_eq!(
        [
            miss.x_cache(),
            hit.x_cache(),
            synth.x_cache(),
            pass.x_cache()
        ],
        ["MISS", "HIT", "SYNTH", "PASS"]
    );
    let ban = s.admin("POST", "/.cachet/ban", &[], "obj.http.x-url ~ ^/nothing$");
    assert_eq!(ban.status, 201, "{}", ban.text());
    let records = s
        .edge
        .wait_for_logs(LOG_WAIT, 5, |_| true)
        .expect("five access records");
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("edge.log");
    // What Viceroy printed, its own messages included: what an operator saves.
    std::fs::write(&log, s.edge.output() + "\n").expect("log written");
    let log = log.to_str().expect("utf-8 path");
    let config = workspace_root().join("edge-app/cachet.toml");
    let config = config.to_str().expect("utf-8 path");

    // simulate: four requests replayed, the ban counted apart, the other lines bad.
    let out = run(
        &bin,
        &["simulate", "--config", config, "--json", "-q", log],
        b"",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(r["records"], 4, "{r}");
    assert_eq!(r["inputs"][0]["format"], "json");
    assert_eq!(r["inputs"][0]["not_traffic"], 1);
    let c = &r["config"];
    assert_eq!(
        (c["requests"].as_u64(), c["synth"].as_u64()),
        (Some(4), Some(1)),
        "{c}"
    );
    // The replay sees what the edge did: one miss then one hit on the entry, the pass.
    assert_eq!(c["hits"], 1, "{c}");
    // One hit-ratio definition: (HIT + STALE) / (HIT + STALE + MISS + PASS), the synthetic
    // robots.txt and the admin call left out, in `simulate` and in `stat` alike.
    assert_eq!(c["hit_ratio"], 0.333_333, "{c}");
    let out = run(
        &bin,
        &["stat", "--once", "--json", "--file", log, "--no-follow"],
        b"",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stat JSON");
    let ratio = st["hit_ratio"].as_f64().expect("a hit ratio");
    assert!((ratio - 1.0 / 3.0).abs() < 1e-9, "{st}");
    assert_eq!(st["totals"]["origin_errors"], 0, "{st}");

    // log --ncsa: combined lines with the request's time, bytes and User-Agent.
    let out = run(&bin, &["log", "--ncsa", log], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ncsa = text(&out.stdout);
    let lines: Vec<&str> = ncsa.lines().collect();
    assert_eq!(lines.len(), 5, "{ncsa}");
    let t = |i: usize| clf(records[i]["time"].as_str().expect("time"));
    assert_eq!(
        lines[0],
        format!(
            "{BLOG} - - {} \"GET {entry}\" 200 {} \"-\" \"{}\"",
            t(0),
            miss.body.len(),
            ua::IPHONE
        )
    );
    assert_eq!(
        lines[2],
        format!(
            "{BLOG} - - {} \"GET /robots.txt\" 200 {} \"-\" \"{}\"",
            t(2),
            synth.body.len(),
            ua::DESKTOP
        )
    );
    assert_eq!(
        lines[3],
        format!(
            "{BLOG} - - {} \"GET /account\" 200 {} \"-\" \"bot \\\"x\\\"\"",
            t(3),
            pass.body.len()
        )
    );
    ncsa_reads_back(&bin, config, log);
}

/// `cachet log --ncsa` of the demo run, admin calls left out, replayed by `cachet
/// simulate` (the host is the first field: `--host` says it): the same four requests.
fn ncsa_reads_back(bin: &Path, config: &str, log: &str) {
    let out = run(
        bin,
        &["log", "--ncsa", "-q", "not route == admin", log],
        b"",
    );
    let out = run(
        bin,
        &[
            "simulate", "--config", config, "--json", "-q", "--host", BLOG, "-",
        ],
        &out.stdout,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(
        (r["records"].as_u64(), r["bad_lines"].as_u64()),
        (Some(4), Some(0)),
        "{r}"
    );
    assert_eq!(r["config"]["hits"], 1);
}

#[test]
fn stat_counts_only_the_origins_failures_as_origin_errors() {
    let bin = cachet_bin();
    let mut s = Stack::start();
    s.stop_origin();
    let down = s.get(BLOG, "/blog/alice/entry/3", &[]);
    assert_eq!((down.status, down.x_cache()), (503, "ERROR"));
    let refused = s.send(
        "GET",
        BLOG,
        "/.cachet/config",
        &[("authorization", "Bearer wrong")],
        Vec::new(),
    );
    assert_eq!(refused.status, 403);
    let records = s
        .edge
        .wait_for_logs(LOG_WAIT, 2, |l| l["cache"] == "ERROR")
        .expect("two ERROR records");
    let failures: Vec<&str> = records
        .iter()
        .filter_map(|r| r["failure"].as_str())
        .collect();
    assert_eq!(failures, ["origin", "admin"]);
    let lines: String = s.edge.output() + "\n";
    let out = run(&bin, &["stat", "--once", "--json"], lines.as_bytes());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stat JSON");
    assert_eq!(
        (
            st["totals"]["errors"].as_u64(),
            st["totals"]["origin_errors"].as_u64()
        ),
        (Some(2), Some(1)),
        "{st}"
    );
}
