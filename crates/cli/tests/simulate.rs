//! `cachet simulate`, run as a user would: generated and hand-written logs through the binary.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::cachet;
use common::sim::{LINES, PC, demo_config, generated, tmp};
use serde_json::Value;

/// Replays `logs` against the demo config with `extra` flags; returns the JSON report.
fn replay(logs: &[&str], extra: &[&str]) -> (Value, String) {
    let config = demo_config();
    let mut args = vec!["simulate", "--config", config.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    args.extend_from_slice(logs);
    let (code, out, err) = cachet(&args, b"");
    assert_eq!(code, 0, "{err}");
    (serde_json::from_slice(&out).unwrap(), err)
}

fn replay_generated() -> &'static Value {
    static REPORT: OnceLock<Value> = OnceLock::new();
    REPORT.get_or_init(|| replay(&[generated().to_str().unwrap()], &[]).0)
}

fn endpoint<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["endpoint"] == name)
        .unwrap_or_else(|| panic!("no endpoint {name}"))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn config_beats_baseline_on_the_generated_log() {
    let r = replay_generated();
    assert_eq!(u(&r["records"]), LINES);
    assert_eq!(u(&r["bad_lines"]), 0);
    let (b, c) = (&r["baseline"], &r["config"]);
    assert!(
        f(&c["hit_ratio"]) > f(&b["hit_ratio"]) + 0.3,
        "config {} vs baseline {}",
        c["hit_ratio"],
        b["hit_ratio"]
    );
    assert!(u(&c["origin_requests"]) * 2 < u(&b["origin_requests"]));
    assert!(u(&c["distinct_objects"]) * 3 < u(&b["distinct_objects"]));
    // Compression and keying: far fewer bytes stored for the same traffic.
    assert!(u(&c["bytes_stored"]) * 5 < u(&b["bytes_stored"]));
    // The article endpoint: the seed story (device class instead of User-Agent).
    let article = endpoint(r, "article");
    assert!(f(&article["baseline"]["hit_ratio"]) < 0.2);
    assert!(f(&article["config"]["hit_ratio"]) > 0.5);
    // Counts add up on each side.
    for side in [b, c] {
        assert_eq!(
            u(&side["hits"])
                + u(&side["stale_hits"])
                + u(&side["misses"])
                + u(&side["passes"])
                + u(&side["synth"]),
            u(&side["requests"])
        );
        assert_eq!(
            u(&side["misses"]) + u(&side["passes"]) + u(&side["stale_hits"]),
            u(&side["origin_requests"])
        );
    }
}

#[test]
fn json_report_has_the_documented_fields() {
    let r = replay_generated();
    for key in [
        "schema",
        "config_file",
        "inputs",
        "lines",
        "records",
        "bad_lines",
        "bad_line_examples",
        "first_time",
        "last_time",
        "duration_seconds",
        "settings",
        "baseline",
        "config",
        "endpoints",
        "templates",
        "templates_seen",
        "timeline",
        "simulator_memory_bytes",
    ] {
        assert!(r.get(key).is_some(), "missing {key}");
    }
    for key in [
        "requests",
        "hit_ratio",
        "hits",
        "stale_hits",
        "misses",
        "passes",
        "synth",
        "not_stored",
        "origin_requests",
        "origin_offload",
        "origin_bytes",
        "bytes_stored",
        "objects_stored",
        "peak_bytes_stored",
        "bytes_written",
        "distinct_objects",
        "distinct_exact",
        "evictions",
        "expired",
    ] {
        assert!(r["baseline"].get(key).is_some(), "baseline.{key}");
        assert!(r["config"].get(key).is_some(), "config.{key}");
    }
    assert_eq!(r["schema"], 1);
    assert_eq!(r["inputs"][0]["format"], "combined");
    assert_eq!(r["inputs"][0]["gzip"], false);
    assert_eq!(r["first_time"], "2025-03-01T00:00:00Z");
    let t = &r["templates"][0];
    assert!(
        t["template"].is_string()
            && t["baseline"]["hit_ratio"].is_number()
            && t["config"]["origin_requests"].is_number()
    );
    assert_eq!(r["templates"].as_array().unwrap().len(), 20);
    let tl = &r["timeline"];
    assert_eq!(tl["bucket_seconds"], 60);
    let buckets = tl["buckets"].as_array().unwrap();
    assert!(!buckets.is_empty() && buckets.len() <= 240);
    assert_eq!(
        buckets.iter().map(|b| u(&b["requests"])).sum::<u64>(),
        LINES
    );
}

#[test]
fn private_pages_are_never_hits_and_robots_is_synth() {
    let r = replay_generated();
    let account = endpoint(r, "account");
    assert!(u(&account["config"]["requests"]) > 100);
    for side in ["baseline", "config"] {
        assert_eq!(
            u(&account[side]["hits"]) + u(&account[side]["stale_hits"]),
            0,
            "{side}"
        );
        assert_eq!(u(&account[side]["bytes_stored"]), 0, "{side}");
    }
    assert_eq!(
        u(&account["config"]["passes"]),
        u(&account["config"]["requests"])
    );
    // Private blogs (`private, no-store` from the origin): requested, never hits.
    for t in r["templates"].as_array().unwrap() {
        let name = t["template"].as_str().unwrap();
        if name.contains("/carol") || name.contains("/mallory") || name.contains("/xena") {
            assert_eq!(t["config"]["hit_ratio"], 0.0, "{name}");
            assert_eq!(t["baseline"]["hit_ratio"], 0.0, "{name}");
            assert_eq!(
                u(&t["config"]["origin_requests"]),
                u(&t["requests"]),
                "{name}"
            );
        }
    }
    let robots = endpoint(r, "(robots.txt, synth)");
    let n = u(&robots["config"]["requests"]);
    assert!(n > 100);
    assert_eq!(u(&robots["config"]["synth"]), n);
    assert_eq!(u(&robots["config"]["origin_requests"]), 0);
    assert_eq!(u(&r["config"]["synth"]), n);
    assert!(u(&robots["baseline"]["origin_requests"]) > 0);
}

/// A JSON-lines log from `(seconds offset, url, user-agent, cache-control)`.
fn json_log(rows: &[(i64, &str, &str, &str)]) -> String {
    rows.iter()
        .map(|(t, url, ua, cc)| {
            serde_json::json!({
                "time": 1_740_787_200 + t, "host": "blog.example", "url": url,
                "user-agent": ua, "status": 200, "bytes": 5000, "cache_control": cc,
            })
            .to_string()
                + "\n"
        })
        .collect()
}

fn replay_text(name: &str, text: &str, extra: &[&str]) -> (Value, String) {
    let path = tmp().join(name);
    std::fs::write(&path, text).unwrap();
    replay(&[path.to_str().unwrap()], extra)
}

const IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1";
const IPHONE_2: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1";

#[test]
fn tracking_parameter_variants_share_one_object() {
    let cc = "public, max-age=300";
    let log = json_log(&[
        (0, "/blog/alice/entry/1", IPHONE, cc),
        (
            1,
            "/blog/alice/entry/1?utm_source=x&utm_medium=social",
            IPHONE,
            cc,
        ),
        (2, "/blog/alice/entry/1?fbclid=IwAR123", IPHONE_2, cc),
        (3, "/blog/alice/entry/1?gclid=abc&_ga=2.1.2-3", IPHONE, cc),
        (4, "/blog/alice/entry/1?utm_campaign=z", IPHONE_2, cc),
        (5, "/blog/alice/entry/1", PC, cc),
    ]);
    let (r, _) = replay_text("tracking.jsonl", &log, &[]);
    let a = endpoint(&r, "article");
    // Config: one smartphone object and one PC object; 4 hits.
    assert_eq!(u(&a["config"]["distinct_objects"]), 2);
    assert_eq!(u(&a["config"]["hits"]), 4);
    assert_eq!(u(&a["config"]["misses"]), 2);
    // Baseline: every (URL, UA) pair is its own object.
    assert_eq!(u(&a["baseline"]["distinct_objects"]), 6);
    assert_eq!(u(&a["baseline"]["hits"]), 0);
    assert_eq!(r["inputs"][0]["format"], "json");
}

#[test]
fn grace_gives_stale_hits_and_private_is_never_stored() {
    let cc = "public, max-age=300";
    let log = json_log(&[
        (0, "/blog/alice/entry/2", PC, cc),
        (100, "/blog/alice/entry/2", PC, cc),    // fresh
        (400, "/blog/alice/entry/2", PC, cc),    // past 5m TTL, within 1h grace: stale, refreshed
        (500, "/blog/alice/entry/2", PC, cc),    // fresh again after the background refresh
        (10_000, "/blog/alice/entry/2", PC, cc), // past grace: miss
        (0, "/blog/carol/entry/1", PC, "private, no-store"),
        (1, "/blog/carol/entry/1", PC, "private, no-store"),
        (2, "/blog/carol/entry/1", PC, "private, no-store"),
    ]);
    let (r, _) = replay_text("grace.jsonl", &log, &[]);
    let a = endpoint(&r, "article");
    let c = &a["config"];
    assert_eq!(
        (u(&c["hits"]), u(&c["stale_hits"]), u(&c["misses"])),
        (2, 1, 5)
    );
    assert_eq!(u(&c["origin_requests"]), 6);
    assert_eq!(u(&c["not_stored"]), 3);
    // The baseline uses the config's TTL and grace by default: same figures for one UA.
    let b = &a["baseline"];
    assert_eq!(
        (u(&b["hits"]), u(&b["stale_hits"]), u(&b["misses"])),
        (2, 1, 5)
    );
    // A fixed baseline TTL and no grace: the 400 s request is a miss (and stores anew).
    let (r, _) = replay_text(
        "grace.jsonl",
        &log,
        &["--baseline-ttl", "5m", "--baseline-grace", "0"],
    );
    let b = &endpoint(&r, "article")["baseline"];
    assert_eq!(
        (u(&b["hits"]), u(&b["stale_hits"]), u(&b["misses"])),
        (2, 0, 6)
    );
    let (r, _) = replay_text(
        "grace.jsonl",
        &log,
        &["--baseline-ttl", "60", "--baseline-grace", "0"],
    );
    let b = &endpoint(&r, "article")["baseline"];
    assert_eq!(
        (u(&b["hits"]), u(&b["stale_hits"]), u(&b["misses"])),
        (0, 0, 8)
    );
    assert_eq!(r["settings"]["baseline_ttl_seconds"], 60);
}

#[test]
fn a_failed_refresh_keeps_the_stale_copy() {
    let line = |t: i64, status: u16| {
        serde_json::json!({
            "time": 1_740_787_200 + t, "host": "blog.example", "url": "/blog/bob/entry/4",
            "user-agent": PC, "status": status, "bytes": 5000, "cache_control": "public, max-age=300",
        })
        .to_string()
            + "\n"
    };
    // Stored at 0; at 400 (stale) the refresh gets a 503: the copy stays; at 500 still
    // stale, the refresh succeeds; at 600 fresh.
    let log: String = [(0, 200), (400, 503), (500, 200), (600, 200)]
        .iter()
        .map(|&(t, s)| line(t, s))
        .collect();
    let (r, _) = replay_text("refresh.jsonl", &log, &[]);
    let c = &endpoint(&r, "article")["config"];
    assert_eq!(
        (u(&c["hits"]), u(&c["stale_hits"]), u(&c["misses"])),
        (1, 2, 1)
    );
    assert_eq!(u(&c["origin_requests"]), 3);
}

#[test]
fn memory_bound_is_respected() {
    let bound = 64 * 1024;
    let (r, _) = replay(&[generated().to_str().unwrap()], &["--memory", "64KiB"]);
    assert_eq!(r["settings"]["memory_bytes"], bound);
    for side in ["baseline", "config"] {
        let s = &r[side];
        assert!(u(&s["evictions"]) > 0, "{side}");
        assert!(u(&s["peak_bytes_stored"]) <= bound, "{side}");
        assert!(u(&s["bytes_stored"]) <= bound, "{side}");
    }
    // The same traffic with room for everything evicts nothing and hits more.
    let big = replay_generated();
    assert_eq!(u(&big["config"]["evictions"]), 0);
    assert!(f(&big["config"]["hit_ratio"]) > f(&r["config"]["hit_ratio"]));
    // Per-endpoint resident bytes add up to the total.
    let sum: u64 = r["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| u(&e["config"]["bytes_stored"]))
        .sum();
    assert_eq!(sum, u(&r["config"]["bytes_stored"]));
}

#[test]
fn html_report_is_self_contained() {
    let html = tmp().join("report.html");
    let (r, err) = replay(
        &[generated().to_str().unwrap()],
        &["--html", html.to_str().unwrap()],
    );
    assert!(err.contains("wrote"), "{err}");
    let text = std::fs::read_to_string(&html).unwrap();
    assert!(text.starts_with("<!DOCTYPE html>"));
    assert!(
        text.matches("<svg").count() >= 3,
        "timeline, origin and endpoint charts"
    );
    assert!(text.contains("<polyline"));
    assert!(text.contains("article"));
    assert!(!text.contains("<script"), "readable without JavaScript");
    for attr in ["src=", "href=", "@import", "url("] {
        assert!(!text.contains(attr), "no external resource ({attr})");
    }
    assert!(text.contains(&format!("{:.1}%", f(&r["config"]["hit_ratio"]) * 100.0)));
}

#[test]
fn gzip_input_and_stdin_give_the_same_report() {
    let gz = tmp().join("gen.log.gz");
    let (code, _, err) = cachet(
        &[
            "simulate",
            "--generate",
            &LINES.to_string(),
            "--seed",
            "42",
            "--out",
            gz.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(code, 0, "{err}");
    let raw = std::fs::read(gz.as_path()).unwrap();
    assert_eq!(&raw[..2], &[0x1f, 0x8b]);
    let (r, _) = replay(&[gz.to_str().unwrap()], &[]);
    assert_eq!(r["inputs"][0]["gzip"], true);
    let plain = replay_generated();
    assert_eq!(r["baseline"], plain["baseline"]);
    assert_eq!(r["config"], plain["config"]);
    assert_eq!(r["endpoints"], plain["endpoints"]);
    // Gzip on stdin.
    let config = demo_config();
    let (code, out, err) = cachet(
        &[
            "simulate",
            "--config",
            config.to_str().unwrap(),
            "--json",
            "-",
        ],
        &raw,
    );
    assert_eq!(code, 0, "{err}");
    let s: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(s["inputs"][0]["name"], "(stdin)");
    assert_eq!(s["inputs"][0]["gzip"], true);
    assert_eq!(s["config"], plain["config"]);
}

#[test]
fn both_formats_are_detected_and_agree() {
    let json = tmp().join("gen.jsonl");
    let (code, _, err) = cachet(
        &[
            "simulate",
            "--generate",
            "5000",
            "--seed",
            "9",
            "--format",
            "json",
            "--out",
            json.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(code, 0, "{err}");
    let combined = tmp().join("gen9.log");
    let (code, _, err) = cachet(
        &[
            "simulate",
            "--generate",
            "5000",
            "--seed",
            "9",
            "--out",
            combined.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(code, 0, "{err}");
    let (j, _) = replay(&[json.to_str().unwrap()], &[]);
    let (c, _) = replay(&[combined.to_str().unwrap()], &[]);
    assert_eq!(j["inputs"][0]["format"], "json");
    assert_eq!(c["inputs"][0]["format"], "combined");
    assert_eq!(j["baseline"], c["baseline"]);
    assert_eq!(j["config"], c["config"]);
    // Several files replay in order, each detected on its own.
    let (both, _) = replay(&[combined.to_str().unwrap(), json.to_str().unwrap()], &[]);
    assert_eq!(both["inputs"][0]["format"], "combined");
    assert_eq!(both["inputs"][1]["format"], "json");
    assert_eq!(u(&both["records"]), 10_000);
}

#[test]
fn bad_lines_are_counted_and_reported_with_line_numbers() {
    let good = r#"blog.example:443 203.0.113.1 - - [01/Mar/2025:00:00:00 +0000] "GET /blog/alice/entry/1 HTTP/1.1" 200 4800 "-" "curl/8.5.0""#;
    let mut lines = vec![good.to_owned(); 12];
    lines[2] = "this is not a log line".to_owned();
    lines[4] = good.replace("[01/Mar/2025", "[01/Foo/2025");
    lines[5] = String::new(); // blank: skipped, not bad
    lines[6] = good.replace(" 200 ", " 2xx ");
    lines[8] = good.replace("\"GET /blog/alice/entry/1 HTTP/1.1\"", "\"-\"");
    lines[9] = r#"{"url": "/"}"#.to_owned();
    lines[10] = "x".repeat(70_000);
    let path = tmp().join("bad.log");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let config = demo_config();
    let (code, out, err) = cachet(
        &[
            "simulate",
            "--config",
            config.to_str().unwrap(),
            "--json",
            path.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(code, 0, "bad lines are never fatal: {err}");
    let r: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(u(&r["bad_lines"]), 6);
    assert_eq!(u(&r["records"]), 5);
    assert_eq!(u(&r["lines"]), 12);
    let name = path.display().to_string();
    let ex = r["bad_line_examples"].as_array().unwrap();
    assert_eq!(ex.len(), 5);
    let got: Vec<(u64, &str)> = ex
        .iter()
        .map(|e| (u(&e["line"]), e["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            (3, "no [time] field"),
            (
                5,
                "invalid [time]: expected e.g. [10/Oct/2000:13:55:36 -0700]"
            ),
            (7, "invalid status"),
            (9, "no request line (\"-\")"),
            (10, "no [time] field"),
        ]
    );
    assert!(err.contains(&format!("{name}:3: no [time] field")), "{err}");
    assert!(err.contains(&format!("{name}:9: no request line")), "{err}");
    assert!(
        err.contains("6 bad lines in all (first 5 shown above)"),
        "{err}"
    );
    // The table mentions them too.
    let (_, out, _) = cachet(
        &[
            "simulate",
            "--config",
            config.to_str().unwrap(),
            "-q",
            path.to_str().unwrap(),
        ],
        b"",
    );
    let table = String::from_utf8(out).unwrap();
    assert!(table.contains("bad lines: 6"), "{table}");
    assert!(
        table.contains(&format!("{name}:11: line longer than 65536 bytes"))
            || table.contains(&format!("{name}:10: no [time] field"))
    );
}

#[test]
fn output_is_deterministic_for_a_seed() {
    let (c1, a, _) = cachet(&["simulate", "--generate", "3000", "--seed", "5"], b"");
    let (c2, b, _) = cachet(&["simulate", "--generate", "3000", "--seed", "5"], b"");
    let (_, other, _) = cachet(&["simulate", "--generate", "3000", "--seed", "6"], b"");
    assert_eq!((c1, c2), (0, 0));
    assert_eq!(a, b);
    assert_ne!(a, other);
    assert_eq!(String::from_utf8(a.clone()).unwrap().lines().count(), 3000);
    let config = demo_config();
    let args = [
        "simulate",
        "--config",
        config.to_str().unwrap(),
        "--json",
        "-",
    ];
    let (_, r1, _) = cachet(&args, &a);
    let (_, r2, _) = cachet(&args, &a);
    assert_eq!(r1, r2);
    let args = ["simulate", "--config", config.to_str().unwrap(), "-q", "-"];
    let (_, t1, _) = cachet(&args, &a);
    let (_, t2, _) = cachet(&args, &a);
    assert_eq!(t1, t2);
}

#[test]
fn usage_and_input_errors_exit_2() {
    let bad = tmp().join("bad.toml");
    std::fs::write(&bad, "[[routes]]\nname = \"a\"\nttl = \"5 parsecs\"\n").unwrap();
    let log = generated().to_str().unwrap().to_owned();
    let (code, _, err) = cachet(&["simulate", "--config", bad.to_str().unwrap(), &log], b"");
    assert_eq!(code, 2);
    assert!(
        err.contains(&format!("{}:3: routes[0].ttl", bad.display())),
        "{err}"
    );
    let config = demo_config();
    let (code, _, err) = cachet(
        &[
            "simulate",
            "--config",
            config.to_str().unwrap(),
            "/nonexistent/x.log",
        ],
        b"",
    );
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/x.log"), "{err}");
    let (code, _, err) = cachet(
        &[
            "simulate",
            "--config",
            config.to_str().unwrap(),
            "--memory",
            "lots",
            &log,
        ],
        b"",
    );
    assert_eq!(code, 2, "{err}");
    let (code, _, _) = cachet(&["simulate", &log], b"");
    assert_eq!(code, 2, "--config is required");
    let (code, _, _) = cachet(
        &[
            "simulate",
            "--generate",
            "10",
            "--config",
            config.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(code, 2, "--generate conflicts with --config");
    let (code, _, _) = cachet(
        &[
            "simulate",
            "--config",
            config.to_str().unwrap(),
            "--seed",
            "3",
            &log,
        ],
        b"",
    );
    assert_eq!(code, 2, "--seed needs --generate");
}

#[test]
fn truncated_gzip_is_reported_and_the_rest_replayed() {
    let gz = tmp().join("trunc.log.gz");
    let (code, _, _) = cachet(
        &[
            "simulate",
            "--generate",
            "4000",
            "--out",
            gz.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(code, 0);
    let raw = std::fs::read(&gz).unwrap();
    let cut = tmp().join("cut.log.gz");
    std::fs::write(&cut, &raw[..raw.len() / 2]).unwrap();
    let config = demo_config();
    let (code, out, err) = cachet(
        &[
            "simulate",
            "--config",
            config.to_str().unwrap(),
            "--json",
            cut.to_str().unwrap(),
            generated().to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("read error after line"), "{err}");
    let r: Value = serde_json::from_slice(&out).unwrap();
    assert!(r["inputs"][0]["error"].is_string());
    assert!(u(&r["inputs"][0]["records"]) > 100);
    assert_eq!(u(&r["inputs"][1]["records"]), LINES);
}

#[test]
fn common_log_without_host_uses_the_host_flag() {
    let line = |t: u32, path: &str| {
        format!(
            "203.0.113.5 - - [01/Mar/2025:00:00:{t:02} +0000] \"GET {path} HTTP/1.1\" 200 4000\n"
        )
    };
    let log: String = (0..10).map(|t| line(t, "/css/alice.css")).collect();
    let (r, err) = replay_text("common.log", &log, &[]);
    assert!(
        err.contains("named no host; replayed with Host: localhost"),
        "{err}"
    );
    assert!(
        r["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["endpoint"] != "design-css")
    );
    let (r, err) = replay_text("common.log", &log, &["--host", "cdn.example"]);
    assert!(!err.contains("named no host"), "{err}");
    let css = endpoint(&r, "design-css");
    assert_eq!(u(&css["config"]["hits"]), 9);
    // Common format has no User-Agent: the baseline key is the same for all, so it hits too.
    assert_eq!(u(&css["baseline"]["hits"]), 9);
}

/// Fetches a demo-origin page as the edge would (device header, no compression).
fn origin_page(origin: &cachet_demo_origin::RunningOrigin, path: &str, device: &str) -> Vec<u8> {
    let mut resp = ureq::get(&origin.url(path))
        .header("x-cachet-device", device)
        .header("accept-encoding", "identity")
        .call()
        .unwrap();
    resp.body_mut().read_to_vec().unwrap()
}

fn gzip_len(body: &[u8]) -> usize {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(body).unwrap();
    e.finish().unwrap().len()
}

/// The documented `--gzip-ratio` default and the generator's page sizes come from the demo
/// origin's real pages: re-measure them.
#[test]
fn gzip_ratio_and_sizes_match_the_demo_origin() {
    let origin = cachet_demo_origin::spawn(cachet_demo_origin::OriginConfig::ephemeral()).unwrap();
    let pages = [
        ("/blog/alice/entry/3", "pc", 4850u64),
        ("/blog/alice/entry/3", "smartphone", 4300),
        ("/blog/alice/", "pc", 6160),
        ("/blog/alice/", "smartphone", 4460),
        ("/blog/alice/feed", "pc", 3990),
        ("/css/alice.css", "pc", 4160),
        ("/", "pc", 370),
    ];
    let (mut raw, mut gz) = (0usize, 0usize);
    for (path, device, documented) in pages {
        let body = origin_page(&origin, path, device);
        raw += body.len();
        gz += gzip_len(&body);
        let size = body.len() as u64;
        assert!(
            size.abs_diff(documented) * 10 <= documented,
            "{path} ({device}): origin {size} B, generator {documented} B"
        );
    }
    #[allow(
        clippy::cast_precision_loss,
        reason = "body sizes far below 2^52 bytes"
    )]
    let ratio = gz as f64 / raw as f64;
    eprintln!("demo origin gzip ratio: {gz} / {raw} = {ratio:.3}");
    assert!(
        (ratio - 0.36).abs() < 0.01,
        "measured {ratio:.3}; update DEFAULT_GZIP_RATIO and docs/simulate.md"
    );
    origin.shutdown();
}

/// `n` with thousands separators, as the reports print counts.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn pct(v: &Value) -> String {
    format!("{:.1}%", f(v) * 100.0)
}

#[test]
fn tables_fit_100_columns_unless_wide() {
    let config = demo_config();
    let log = generated().to_str().unwrap();
    let args = ["simulate", "--config", config.to_str().unwrap(), "-q", log];
    let (code, out, err) = cachet(&args, b"");
    assert_eq!(code, 0, "{err}");
    let table = String::from_utf8(out).unwrap();
    // The context lines name the (long) config path; every table line fits.
    for line in table.lines().filter(|l| !l.starts_with("config ")) {
        assert!(
            line.chars().count() <= 100,
            "{} columns: {line}",
            line.chars().count()
        );
    }
    // Numbers are right-aligned under their headers: every row of the endpoint table
    // ends in the same column as its header.
    let ep: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.starts_with("per endpoint"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter(|l| !l.starts_with('─'))
        .collect();
    assert!(ep.len() >= 8, "{table}");
    let width = ep[0].chars().count();
    assert!(ep.iter().all(|l| l.chars().count() == width), "{table}");
    assert!(ep[0].contains("hit ratio") && ep[1].contains("baseline"));
    let article = ep
        .iter()
        .find(|l| l.trim_start().starts_with("article"))
        .unwrap();
    let (r, _) = replay(&[log], &[]);
    let a = endpoint(&r, "article");
    assert!(
        article.contains(&pct(&a["config"]["hit_ratio"])),
        "{article}"
    );
    assert!(
        article
            .trim_end()
            .ends_with(&thousands(u(&a["config"]["origin_requests"])))
    );
    assert!(!table.contains("bytes stored\n") && table.contains("--wide adds"));
    // Past 4,096 distinct keys the baseline count is an estimate: ≈ is explained.
    assert!(table.contains("≈") && table.contains("≈ = estimated: past 4,096 distinct keys"));

    let args = [
        "simulate",
        "--config",
        config.to_str().unwrap(),
        "-q",
        "--wide",
        log,
    ];
    let (code, out, _) = cachet(&args, b"");
    assert_eq!(code, 0);
    let wide = String::from_utf8(out).unwrap();
    let header = wide.lines().find(|l| l.starts_with(" endpoint ")).unwrap();
    assert!(header.contains("bytes stored") && header.contains("distinct obj."));
    assert!(
        header.chars().count() > 100,
        "--wide shows every column: {header}"
    );
}

#[test]
fn generate_says_what_it_wrote() {
    let path = tmp().join("said.log.gz");
    let args = [
        "simulate",
        "--generate",
        "3000",
        "--seed",
        "3",
        "--out",
        path.to_str().unwrap(),
    ];
    let (code, out, err) = cachet(&args, b"");
    assert_eq!(code, 0, "{err}");
    assert!(out.is_empty());
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(
        err.starts_with("cachet: simulate: wrote 3,000 lines (2 hosts, "),
        "{err}"
    );
    assert!(
        err.contains(" distinct URLs, 2025-03-01T00:00:00Z .. 2025-03-01T00:"),
        "{err}"
    );
    assert!(err.contains(&format!("to {} (", path.display())) && err.contains(", gzip)\n"));
    // The size is the file's (KiB with one decimal).
    #[allow(
        clippy::cast_precision_loss,
        reason = "a file size far below 2^52 bytes"
    )]
    let kib = format!("{:.1} KiB", size as f64 / 1024.0);
    assert!(err.contains(&kib), "{err} vs {kib}");
    // Distinct URLs: exact below 4,096, as counted from the file itself.
    let (_, text, _) = cachet(
        &["simulate", "--generate", "3000", "--seed", "3", "-q"],
        b"",
    );
    let urls: std::collections::HashSet<(String, String)> = String::from_utf8(text)
        .unwrap()
        .lines()
        .map(|l| {
            let host = l.split(':').next().unwrap().to_owned();
            let target = l
                .split('"')
                .nth(1)
                .unwrap()
                .split(' ')
                .nth(1)
                .unwrap()
                .to_owned();
            (host, target)
        })
        .collect();
    assert!(
        err.contains(&format!(
            "2 hosts, {} distinct URLs",
            thousands(urls.len() as u64)
        )),
        "{err}"
    );
    // --quiet says nothing.
    let (_, _, err) = cachet(
        &[
            "simulate",
            "--generate",
            "10",
            "-q",
            "--out",
            path.to_str().unwrap(),
        ],
        b"",
    );
    assert!(err.is_empty(), "{err}");
}

/// Headless Chromium: `CACHET_CHROMIUM`, else `chromium` on PATH. Missing → the test
/// fails and says how to install it (no silent skip).
fn chromium() -> PathBuf {
    let bin = std::env::var_os("CACHET_CHROMIUM")
        .map_or_else(|| PathBuf::from("chromium"), PathBuf::from);
    let ok = std::process::Command::new(&bin)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "headless Chromium not found ({}): scripts/test installs the Debian package \
         (ensure_chromium in scripts/lib.sh), or run `apt-get install chromium`, or set \
         CACHET_CHROMIUM to a Chromium binary",
        bin.display()
    );
    bin
}

/// The DOM Chromium builds from `html` (`--dump-dom`).
fn rendered_dom(html: &Path) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(chromium())
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", html.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The texts of elements whose start tag contains `marker` (in document order).
fn texts_after<'a>(dom: &'a str, marker: &str) -> Vec<&'a str> {
    dom.match_indices(marker)
        .filter_map(|(i, _)| {
            let rest = &dom[i..];
            let start = rest.find('>')? + 1;
            let end = rest[start..].find('<')? + start;
            Some(&rest[start..end])
        })
        .collect()
}

#[test]
fn html_report_renders_in_chromium_with_the_json_numbers() {
    let html = tmp().join("chromium.html");
    let (r, _) = replay(
        &[generated().to_str().unwrap()],
        &["--html", html.to_str().unwrap()],
    );
    let dom = rendered_dom(&html);
    assert!(dom.contains("Cachet replay: baseline vs config"), "{dom}");

    // Summary table: the JSON's hit ratios and origin requests.
    let cells = |name: &str| {
        let i = dom.find(&format!("<tr data-row=\"{name}\">")).unwrap();
        let tr = &dom[i..i + dom[i..].find("</tr>").unwrap()];
        texts_after(tr, "<td class=\"n ")
    };
    assert!(dom.contains("<tr data-row=\"hit ratio\"><td>hit ratio</td>"));
    assert_eq!(
        cells("hit ratio"),
        vec![
            pct(&r["baseline"]["hit_ratio"]),
            pct(&r["config"]["hit_ratio"])
        ]
    );
    assert_eq!(
        cells("origin requests"),
        vec![
            thousands(u(&r["baseline"]["origin_requests"])),
            thousands(u(&r["config"]["origin_requests"]))
        ]
    );

    // The origin chart's axis says its unit; the time ticks are round.
    assert!(texts_after(&dom, "class=\"ytitle\"").contains(&"origin requests per minute"));
    let captions = texts_after(&dom, "class=\"xcaption\"");
    assert_eq!(captions.len(), 2, "{captions:?}");
    // 12 minutes of log: ticks every 2 minutes from 00:00.
    assert!(captions[0].contains("ticks every 2 min"), "{captions:?}");
    let ticks = texts_after(&dom, "class=\"xtick\"");
    assert_eq!(
        &ticks[..7],
        [
            "00:00", "00:02", "00:04", "00:06", "00:08", "00:10", "00:12"
        ]
    );

    // The last bucket (00:12:00 .. the last record) is partial: drawn as a per-minute
    // rate and marked.
    let last = r["timeline"]["buckets"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let last_time = r["last_time"].as_str().unwrap();
    assert_eq!(last["start"], "2025-03-01T00:12:00Z");
    let covered: u64 = last_time[17..19].parse::<u64>().unwrap() + 1; // seconds into 00:12
    let n = u(&last["config_origin_requests"]);
    #[allow(
        clippy::cast_precision_loss,
        reason = "request counts and seconds far below 2^52"
    )]
    let rate = n as f64 * 60.0 / covered as f64;
    let note = format!(
        "config: {} origin requests = {rate:.1} per minute",
        thousands(n)
    );
    assert!(dom.contains(&note), "{note}");
    assert!(dom.contains(&format!("partial bucket: {covered}s of 1m")));

    // Per-endpoint percentages are labelled hit ratios and match the JSON.
    let hits = texts_after(&dom, "class=\"ep-hit\"");
    let article = r["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .position(|e| e["endpoint"] == "article")
        .unwrap();
    assert_eq!(
        hits[2 * article + 1],
        pct(&endpoint(&r, "article")["config"]["hit_ratio"])
    );
    assert!(dom.contains(">hit ratio</text>"));
    // ≈ is explained.
    assert!(dom.contains("≈ = estimated: past 4,096 distinct keys"));
}

#[test]
fn a_replay_that_reads_no_request_fails_with_the_reason() {
    let config = demo_config();
    let config = config.to_str().unwrap();
    // Lines of an edge from before the access record had a time: every line is bad.
    let old = include_str!("fixtures/stat/viceroy.log");
    let (code, out, err) = cachet(&["simulate", "--config", config, "-"], old.as_bytes());
    assert_eq!(code, 1, "{err}");
    assert!(
        out.is_empty(),
        "no 0.0% report: {}",
        String::from_utf8_lossy(&out)
    );
    assert!(
        err.contains("no request read: ") && err.contains("missing \"time\""),
        "{err}"
    );
    assert!(err.contains("nothing replayed, no report"), "{err}");
    let html = tmp().join("nothing.html");
    let html = html.to_str().unwrap();
    let (code, out, err) = cachet(&["simulate", "--config", config, "--html", html, "-"], b"");
    assert_eq!((code, out.is_empty()), (1, true), "{err}");
    assert!(
        !std::path::Path::new(html).exists(),
        "no empty report left behind"
    );
    assert!(err.contains("no request read: the input is empty"), "{err}");
    // Only admin calls (and a Viceroy message): not traffic, and nothing to replay.
    let admin = "INFO Listening on http://127.0.0.1:7676\n\
        cachet_log :: {\"time\":\"2025-03-01T00:00:00.000Z\",\"method\":\"POST\",\"route\":\"admin\",\"url\":\"\",\"status\":201}\n";
    let (code, _, err) = cachet(&["simulate", "--config", config, "-"], admin.as_bytes());
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no request read: 1 of 2 lines bad, the first ((stdin):1)"),
        "{err}"
    );
}
