//! `cachet ban check` and `cachet ban parse`, run as a user would: the binary on fixture files.

mod common;

use std::path::PathBuf;

use serde_json::{Value, json};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ban")
        .join(name)
}

/// Runs `cachet ARGS` with `stdin`; returns (exit code, stdout, stderr).
fn cachet(args: &[&str], stdin: &str) -> (i32, String, String) {
    let (code, out, err) = common::cachet(args, stdin.as_bytes());
    (code, String::from_utf8(out).unwrap(), err)
}

fn check_file(name: &str) -> (i32, String, String) {
    let path = fixture(name);
    cachet(&["ban", "check", "--scenario", path.to_str().unwrap()], "")
}

#[test]
fn check_reports_bans_and_verdicts() {
    let (code, out, err) = check_file("blog.scenario.json");
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        report,
        json!({
            "bans": [
                {"ok": true, "lurker_friendly": true},
                {"ok": true, "lurker_friendly": false},
                {"ok": false, "error": "column 12: operator \">\" does not apply to obj.status; expected one of ==, !=, ~, !~"}
            ],
            "lookups": [
                {"object": "alice-css", "verdict": "banned"},
                {"object": "bob-entry", "verdict": "kept"},
                {"object": "alice-entry", "verdict": "banned"},
                {"object": "late-alice", "verdict": "kept"},
                {"object": "alice-entry", "verdict": "banned"}
            ]
        })
    );
    assert!(out.ends_with("}\n"), "pretty JSON with a final newline");
}

#[test]
fn check_reads_stdin() {
    let text = std::fs::read_to_string(fixture("blog.scenario.json")).unwrap();
    let (code, out, _) = cachet(&["ban", "check", "--scenario", "-"], &text);
    assert_eq!(code, 0);
    let (_, from_file, _) = check_file("blog.scenario.json");
    assert_eq!(out, from_file);

    let (code, out, _) = cachet(&["ban", "check", "--scenario", "-"], "{}");
    assert_eq!(code, 0);
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        json!({"bans": [], "lookups": []})
    );
}

#[test]
fn check_refuses_bad_input_with_exit_2() {
    let (code, out, err) = check_file("bad-type.scenario.json");
    assert_eq!(code, 2);
    assert!(out.is_empty());
    assert!(
        err.contains(
            "bad-type.scenario.json: invalid scenario: objects[1].ttl: invalid type: string \"1h\", expected f64 at line 4 column"
        ),
        "{err}"
    );

    let (code, _, err) = check_file("duplicate-id.scenario.json");
    assert_eq!(code, 2);
    assert!(
        err.contains("duplicate-id.scenario.json: invalid scenario: duplicate object id \"a\""),
        "{err}"
    );

    let (code, _, err) = check_file("missing.scenario.json");
    assert_eq!(code, 2);
    assert!(err.contains("missing.scenario.json: "), "{err}");

    let (code, _, err) = cachet(&["ban", "check", "--scenario", "-"], "{\"bans\": [\n");
    assert_eq!(code, 2);
    assert!(
        err.contains("cachet: stdin: invalid scenario: bans: EOF while parsing a list at line 2"),
        "{err}"
    );

    let (code, _, err) = cachet(
        &["ban", "check", "--scenario", "-"],
        r#"{"lookups":[{"object":"ghost","at":1}]}"#,
    );
    assert_eq!(code, 2);
    assert!(err.contains("lookup of unknown object \"ghost\""), "{err}");

    let (code, _, err) = cachet(&["ban", "check", "--scenario", "-"], r#"{"objets":[]}"#);
    assert_eq!(code, 2);
    assert!(err.contains("unknown field `objets`"), "{err}");

    let (code, _, err) = cachet(&["ban", "check", "--scenario", "-"], "\u{feff}{}\u{0}");
    assert_eq!(code, 2, "{err}");
}

#[test]
fn parse_prints_the_canonical_form() {
    let (code, out, _) = cachet(
        &[
            "ban",
            "parse",
            "obj.http.X-Url ~ ^/blog/alice/ && obj.status == 200",
        ],
        "",
    );
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "obj.http.x-url ~ \"^/blog/alice/\" && obj.status == \"200\"\n\
         lurker-friendly: yes (only obj.* fields: the lurker applies it in the background)\n"
    );

    let (code, out, _) = cachet(&["ban", "parse", "req.url ~ ^/a && obj.ttl < 10m"], "");
    assert_eq!(code, 0);
    assert!(out.contains("lurker-friendly: no (reads req.*"), "{out}");
    assert!(out.contains("time-relative: obj.ttl/obj.age"), "{out}");

    let (code, out, _) = cachet(&["ban", "parse", "--json", "req.url == /a"], "");
    assert_eq!(code, 0);
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        json!({"ok": true, "canonical": "req.url == \"/a\"", "lurker_friendly": false,
               "time_relative": false, "conditions": 1})
    );

    let (code, out, _) = cachet(&["ban", "parse", "-"], "obj.http.x == \"a b\"\n");
    assert_eq!(code, 0);
    assert!(out.starts_with("obj.http.x == \"a b\"\n"), "{out}");
}

#[test]
fn parse_errors_give_the_column() {
    let (code, out, err) = cachet(&["ban", "parse", "obj.status > 200"], "");
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert_eq!(
        err,
        "cachet: invalid ban expression: column 12: operator \">\" does not apply to \
         obj.status; expected one of ==, !=, ~, !~\n  obj.status > 200\n             ^\n"
    );

    let (code, out, _) = cachet(&["ban", "parse", "--json", "req.url == /a and x"], "");
    assert_eq!(code, 1);
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        json!({"ok": false, "error": "column 15: expected && or the end, found \"and\"",
               "column": 15})
    );

    let (code, _, err) = cachet(&["ban", "parse", ""], "");
    assert_eq!(code, 1);
    assert!(err.contains("empty ban expression"), "{err}");

    // An expression starting with '-' is an expression, not a flag.
    let (code, _, err) = cachet(&["ban", "parse", "-x == 1"], "");
    assert_eq!(code, 1);
    assert!(
        err.contains("column 1: unknown or unsupported field \"-x\""),
        "{err}"
    );
}

#[test]
fn check_derives_x_url_and_x_host_from_the_object_as_the_edge_does() {
    // No `x-url` header spelled out: the object's `url` (and `host`) are what the edge
    // bans on (`cachet_ban::derived_header`); a header given explicitly wins.
    let scenario = json!({
        "objects": [
            {"id": "a", "inserted_at": 1, "url": "/blog/alice/1", "host": "blog.example"},
            {"id": "b", "inserted_at": 1, "url": "/blog/bob/1", "host": "cdn.example"},
            {"id": "c", "inserted_at": 1, "url": "/blog/alice/2",
             "headers": {"X-Url": "/elsewhere"}}
        ],
        "bans": [
            {"at": 2, "expr": "obj.http.x-url ~ ^/blog/alice/"},
            {"at": 2, "expr": "obj.http.x-host == cdn.example"}
        ],
        "lookups": [
            {"object": "a", "at": 3}, {"object": "b", "at": 3}, {"object": "c", "at": 3}
        ]
    });
    let (code, out, err) = cachet(&["ban", "check", "--scenario", "-"], &scenario.to_string());
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        report["lookups"],
        json!([
            {"object": "a", "verdict": "banned"},
            {"object": "b", "verdict": "banned"},
            {"object": "c", "verdict": "kept"}
        ])
    );
}
