//! `cachet log` and `cachet stat` on access-log files and stdin, through the built binary.

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

const LINES: &str = concat!(
    r#"cachet_log :: {"method":"GET","host":"blog.example","url":"/blog/alice/entry/1","route":"blog","cache":"MISS","status":200,"device":"pc","key":"blog.example/blog/alice/entry/1|pc","origin_ms":31,"body_bytes":5120,"tier":"single"}"#,
    "\n",
    r#"cachet_log :: {"method":"GET","host":"blog.example","url":"/blog/alice/entry/1","route":"blog","cache":"HIT","status":200,"device":"smartphone","key":"blog.example/blog/alice/entry/1|smartphone","body_bytes":5120,"tier":"single"}"#,
    "\n",
    "2026-01-01T00:00:00Z INFO viceroy: something else\n",
    r#"{"method":"GET","host":"cdn.example","url":"/css/alice.css","route":"css","cache":"ERROR","status":503,"device":"pc","key":"cdn.example/css/alice.css|*","error":"origin down","tier":"single"}"#,
    "\n",
    r#"{"method":"POST","host":"blog.example","url":"/.cachet/purge","route":"admin","cache":"SYNTH","status":200,"device":"pc","key":"","ban_added":12,"tier":"single"}"#,
    "\n",
    "{broken\n",
);

fn cachet(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cachet");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write");
    child.wait_with_output().expect("wait")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn log_filters_with_a_query_and_prints_json_as_is() {
    let out = cachet(
        &[
            "log",
            "-q",
            "cache == ERROR or (route == blog and device == smartphone)",
        ],
        LINES,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let got: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(
        got[0].starts_with(r#"{"method":"GET","host":"blog.example""#)
            && got[0].contains("smartphone")
    );
    assert!(got[1].contains(r#""cache":"ERROR""#));
    // Skipped lines are reported with their line numbers and counted.
    let err = text(&out.stderr);
    assert!(
        err.contains("-:3: not an access-log line; skipped"),
        "{err}"
    );
    assert!(
        err.contains("-:6: invalid JSON: key must be a string at line 1 column 2; skipped"),
        "{err}"
    );
    assert!(err.contains("6 lines, 2 matched, 2 skipped"), "{err}");
}

#[test]
fn log_formats_ncsa_and_custom_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("access.log");
    std::fs::write(&file, LINES).expect("write");
    let f = file.to_str().expect("utf-8 path");
    let out = cachet(&["log", "--ncsa", "-q", "status == 5xx", f], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let re = regex::Regex::new(
        r#"^cdn\.example - - \[\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d \+0000\] "GET /css/alice\.css" 503 - "-" "-"\n$"#,
    )
    .unwrap();
    assert!(re.is_match(&text(&out.stdout)), "{}", text(&out.stdout));
    let out = cachet(
        &[
            "log",
            "-F",
            r"%s\t%{X-Cache}o\t%{Varnish:handling}x\t%{origin_ms}j\t%U",
            f,
        ],
        "",
    );
    assert_eq!(
        text(&out.stdout),
        "200\tMISS\tmiss\t31\t/blog/alice/entry/1\n200\tHIT\thit\t-\t/blog/alice/entry/1\n\
         503\tERROR\terror\t-\t/css/alice.css\n200\tSYNTH\tsynth\t-\t/.cachet/purge\n"
    );
}

#[test]
fn log_usage_errors_exit_2_with_the_column() {
    let out = cachet(&["log", "-q", "status >= 5xx"], "");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "cachet: log: --query: column 11: expected a number after the comparison, found \"5xx\"\n  status >= 5xx\n            ^\n"
    );
    let out = cachet(&["log", "-F", "%s %Q"], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with("cachet: log: --format: column 4: unknown escape \"%Q\"")
    );
    let out = cachet(&["log", "/nonexistent/access.log"], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with("cachet: log: /nonexistent/access.log: No such file"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn stat_once_json_sums_a_log_file_and_stdin_ends_with_a_final_reading() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("access.log");
    std::fs::write(&file, LINES).expect("write");
    let out = cachet(
        &["stat", "--once", "--json", "--file", file.to_str().unwrap()],
        "",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j: serde_json::Value = serde_json::from_str(&text(&out.stdout)).expect("one JSON object");
    for (name, want) in [
        ("requests", 4),
        ("hits", 1),
        ("hits_single", 1),
        ("misses", 1),
        ("synth", 1),
        ("errors", 1),
        ("origin_fetches", 1),
        ("origin_errors", 1),
        ("purges", 1),
        ("bans_added", 0),
        ("bad_lines", 2),
    ] {
        assert_eq!(j["totals"][name], want, "{name}: {j}");
    }
    assert_eq!(j["hit_ratio"], 0.5);
    assert_eq!(j["source"], "log");
    assert_eq!(j["final"], true);
    assert_eq!(j["bytes_bound"], serde_json::Value::Null);
    // Stdin, not a terminal: plain text per interval until EOF, the last marked final.
    let out = cachet(&["stat", "--interval", "50ms"], LINES);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    let last = s.rsplit("cachet stat · ").next().expect("a reading");
    assert!(
        last.starts_with("log - ·") && last.contains("· final · hit ratio 50.0%"),
        "{s}"
    );
    assert!(
        regex::Regex::new(r"\nrequests\s+4\s")
            .unwrap()
            .is_match(last),
        "{s}"
    );
    // Usage errors.
    let out = cachet(&["stat", "--file", "/nonexistent/x.log"], "");
    assert_eq!(out.status.code(), Some(2));
    let out = cachet(&["stat", "--once", "--envoy", "127.0.0.1:1"], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with("cachet: stat: http://127.0.0.1:1/stats?filter=cachet: "),
        "{}",
        text(&out.stderr)
    );
}

/// Lines the edge app wrote in Viceroy (`cachet_log :: {…}`) for: a miss, a hit, a hit
/// through a tracking parameter, a pass (`Authorization`), robots.txt, a ban and a purge
/// through the admin API. Recorded with the edge wasm of this tree's scripts; the ban's
/// line carries its id as `ban_added`, as the edge writes it since it logs that field.
const VICEROY: &str = include_str!("fixtures/stat/viceroy.log");

#[test]
fn stat_and_log_read_the_edges_own_lines() {
    let out = cachet(&["stat", "--once", "--json"], VICEROY);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j: serde_json::Value = serde_json::from_str(&text(&out.stdout)).expect("json");
    for (name, want) in [
        ("requests", 7),
        ("hits", 2),
        ("hits_single", 2),
        ("misses", 1),
        ("passes", 1),
        ("synth", 3),
        ("origin_fetches", 2),
        ("bans_added", 1),
        ("purges", 1),
        ("banned", 0),
        ("bad_lines", 0),
    ] {
        assert_eq!(j["totals"][name], want, "{name}: {j}");
    }
    assert_eq!(j["gauges"]["workspace_watermark"], 21254);
    let out = cachet(
        &[
            "log",
            "-q",
            "route == article and not cache == PASS",
            "-F",
            "%{Varnish:handling}x %U %b",
        ],
        VICEROY,
    );
    assert_eq!(
        text(&out.stdout),
        "miss /blog/alice/entry/1 4870\nhit /blog/alice/entry/1 4870\nhit /blog/alice/entry/1 4870\n"
    );
    let out = cachet(&["log", "-q", "ban_added", "--ncsa"], VICEROY);
    assert!(
        text(&out.stdout).starts_with("- - - ["),
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stdout).ends_with("] \"POST -\" 201 - \"-\" \"-\"\n"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn log_follow_prints_lines_appended_to_the_file() {
    use std::io::{BufRead as _, BufReader};
    use std::time::Duration;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("access.log");
    std::fs::write(&file, VICEROY.lines().next().unwrap().to_owned() + "\n").expect("write");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .args(["log", "-f", "-F", "%{X-Cache}o %U", "-q", "cache != SYNTH"])
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cachet");
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let next = || {
        rx.recv_timeout(Duration::from_secs(10))
            .expect("a line within 10 s")
    };
    assert_eq!(next(), "MISS /blog/alice/entry/1");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .expect("append");
    // Every other recorded line, written in two pieces: a line is printed once complete.
    for l in VICEROY.lines().skip(1) {
        let (a, b) = l.split_at(l.len() / 2);
        f.write_all(a.as_bytes()).expect("write");
        f.flush().expect("flush");
        f.write_all(format!("{b}\n").as_bytes()).expect("write");
    }
    assert_eq!(next(), "HIT /blog/alice/entry/1");
    assert_eq!(next(), "HIT /blog/alice/entry/1");
    assert_eq!(next(), "PASS /blog/alice/entry/2");
    child.kill().expect("kill");
    let _ = child.wait();
}

/// Three lines Envoy wrote with `envoy-filter/envoy.yaml`'s `access_log` (a real-Envoy run
/// of `envoy_writes_the_access_record_with_time_user_agent_and_total_time`).
const ENVOY: &str = include_str!("fixtures/envoy/access.log");

#[test]
fn log_ncsa_and_simulate_read_envoys_access_log() {
    let out = cachet(&["log", "--ncsa"], ENVOY);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "blog.example - - [28/Nov/2026:03:03:37 +0000] \"GET /blog/alice/entry/1\" 200 4316 \"-\" \"Mozilla/5.0 (iPhone) issue31\"\n\
         blog.example - - [28/Nov/2026:03:03:37 +0000] \"GET /blog/alice/entry/1\" 200 4316 \"-\" \"Mozilla/5.0 (iPhone) issue31\"\n\
         blog.example - - [28/Nov/2026:03:03:37 +0000] \"GET /robots.txt\" 200 91 \"-\" \"bot issue31\"\n"
    );
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../../edge-app/cachet.toml");
    let out = cachet(
        &["simulate", "--config", config, "--json", "-q", "-"],
        ENVOY,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        (r["records"].as_u64(), r["bad_lines"].as_u64()),
        (Some(3), Some(0)),
        "{r}"
    );
    assert_eq!(r["config"]["hits"], 1);
    assert_eq!(r["config"]["synth"], 1);
    let out = cachet(&["stat", "--once", "--json"], ENVOY);
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(st["hit_ratio"], 0.5, "{st}");
}
