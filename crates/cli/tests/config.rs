//! `cachet config check`, run as a user would: every problem of a file, in line order.

mod common;

use common::cachet;

#[test]
fn check_reports_every_error_in_line_order_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    // Two schema errors (serde stops at the first, and visits keys alphabetically:
    // `device` before `edge`) and two validation issues, interleaved in the text.
    std::fs::write(
        &file,
        "[edge]\nbackend = \"\"\nhit_for_pass = \"5 parsecs\"\nsandbox_max_requests = 0\n\n\
         [device]\nprofile = \"bogus\"\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let (code, out, err) = cachet(&["config", "check", f], b"");
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty());
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 4, "{err}");
    assert_eq!(
        lines[0],
        format!("{f}:2: edge.backend: must name the origin backend")
    );
    assert!(
        lines[1].starts_with(&format!(
            "{f}:3: edge.hit_for_pass: invalid duration \"5 parsecs\""
        )),
        "{err}"
    );
    assert!(
        lines[2].starts_with(&format!("{f}:4: edge.sandbox_max_requests: ")),
        "{err}"
    );
    assert_eq!(
        lines[3],
        format!("{f}:7: device.profile: unknown variant `bogus`, expected `seed` or `accurate`")
    );
}

#[test]
fn check_accepts_the_built_in_configuration() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../../edge-app/cachet.toml");
    let (code, out, err) = cachet(&["config", "check", file], b"");
    assert_eq!(code, 0, "{err}");
    assert!(String::from_utf8_lossy(&out).contains(": ok ("));
}

#[test]
fn check_reports_every_error_of_a_json_config_in_line_order() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("envoy-plugin.json");
    std::fs::write(
        &file,
        "{\n  \"edge\": {\n    \"backend\": \"\",\n    \"hit_for_pass\": \"5 parsecs\"\n  },\n  \
         \"device\": {\"profile\": \"bogus\"}\n}\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let (code, _, err) = cachet(&["config", "check", f], b"");
    assert_eq!(code, 1, "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    assert_eq!(
        lines[0],
        format!("{f}:3: edge.backend: must name the origin backend")
    );
    assert!(
        lines[1].starts_with(&format!("{f}:4: edge.hit_for_pass: ")),
        "{err}"
    );
    assert!(
        lines[2].starts_with(&format!("{f}:6: device.profile: unknown variant")),
        "{err}"
    );
}
