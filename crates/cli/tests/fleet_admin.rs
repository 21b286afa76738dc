//! `cachet ban add --etcd` and `cachet purge --etcd` against a real etcd: what they write is what every fleet node polls (read back with `cachet_policy::etcd::poll_answer`), refusals never reach etcd, and an unreachable etcd is exit 1.
//!
//! etcd is `$CACHET_ETCD` (scripts/test sets it); without it, outside CI, the tests say so
//! and return.

use std::process::{Command, Output};

use cachet_envoy_host_tests::etcd;
use cachet_policy::banlog::Kind;
use cachet_policy::etcd::{DEFAULT_PREFIX, RANGE_PATH, poll, poll_answer};

fn cachet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cachet"))
        .args(args)
        .output()
        .expect("run cachet")
}

#[test]
fn bans_and_purges_written_to_etcd_are_what_the_nodes_poll() {
    let Some(mut e) = etcd::start_or_skip().expect("etcd") else {
        return;
    };
    let url = e.url();
    let out = cachet(&["ban", "add", "--etcd", &url, "obj.http.x-url ~ ^/blog/bob/"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(line["expr"], "obj.http.x-url ~ \"^/blog/bob/\"");
    assert_eq!(line["lurker_friendly"], true);
    let id = line["id"].as_u64().expect("id");

    let out = cachet(&[
        "purge",
        "--etcd",
        &url,
        "--key",
        "css-alice",
        "--key",
        "blog-bob",
        "--soft",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let (status, body) = etcd::post(&url, RANGE_PATH, &poll(DEFAULT_PREFIX, 0)).expect("poll");
    let polled = poll_answer(DEFAULT_PREFIX, status, &body).expect("answer");
    let kinds: Vec<(Kind, Option<&str>)> = polled
        .entries
        .iter()
        .map(|e| (e.kind, e.key.as_deref()))
        .collect();
    assert_eq!(
        kinds,
        [
            (Kind::Ban, None),
            (Kind::SoftPurge, Some("css-alice")),
            (Kind::SoftPurge, Some("blog-bob"))
        ]
    );
    assert_eq!(
        polled.entries[0].id, id,
        "the printed id is the entry's revision"
    );

    // Refused before anything is sent: a bad expression (exit 1, with its column), a
    // usage error (exit 2).
    let out = cachet(&["ban", "add", "--etcd", &url, "obj.http.x ~ ("]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("column"),
        "{out:?}"
    );
    let out = cachet(&[
        "ban",
        "add",
        "--etcd",
        &url,
        "--node",
        "http://x",
        "obj.status == 404",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let (status, body) = etcd::post(&url, RANGE_PATH, &poll(DEFAULT_PREFIX, 0)).expect("poll");
    assert_eq!(
        poll_answer(DEFAULT_PREFIX, status, &body)
            .expect("answer")
            .entries
            .len(),
        3
    );

    // etcd down: exit 1 with the reason.
    e.stop();
    let out = cachet(&["ban", "add", "--etcd", &url, "obj.status == 404"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
}
