//! The edge's binary ban index end to end: a KV store holding only a JSON ban log in the earlier layout (no index) is indexed at the first lookup, and its bans apply; an admin ban on top keeps them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cachet_demo_origin::OriginConfig;
use cachet_e2e::{ADMIN_TOKEN, Edge, agent, send, ua, workspace_root};

const BLOG: &str = "blog.example";

/// The demo origin and the edge app whose ban log lives in the KV store `store`, holding
/// one `ban-log` item with `log` (any bytes, as text).
fn edge_with_log(store: &str, log: &str) -> (cachet_demo_origin::RunningOrigin, Edge) {
    let origin = cachet_demo_origin::spawn(OriginConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        ..OriginConfig::default()
    })
    .expect("demo origin");
    let extra = format!(
        "\n[[local_server.kv_stores.{store}]]\nkey = \"ban-log\"\ndata = {}\n",
        serde_json::to_string(log).expect("quote")
    );
    let config = std::fs::read_to_string(workspace_root().join("edge-app/cachet.toml"))
        .expect("cachet.toml")
        + &format!("\n[bans]\nkv_store = \"{store}\"\n");
    let edge = Edge::start_with_manifest(origin.addr(), Some(&config), &extra);
    (origin, edge)
}

/// A desktop `GET` of `path` on the blog host.
fn get(a: &ureq::Agent, edge: &Edge, path: &str) -> cachet_e2e::Reply {
    send(
        a,
        edge.addr(),
        "GET",
        BLOG,
        path,
        &[("user-agent", ua::DESKTOP)],
        vec![],
    )
    .expect("edge answers")
}

#[test]
fn an_earlier_layout_log_without_an_index_still_bans() {
    // One ban an hour ahead (so newer than any object stored now) in the earlier edge
    // layout (`floor_ms`, `bans`), and no `ban-index` item.
    let ahead_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis()
        + 3_600_000;
    let log = format!(
        r#"{{"floor_ms":0,"next_id":8,"bans":[{{"id":7,"at_ms":{ahead_ms},"expr":"req.url ~ \"^/blog/alice/\"","lurker_friendly":false}}]}}"#
    );
    let (_origin, edge) = edge_with_log("legacy_bans", &log);
    let a = agent();
    let get = |path: &str| get(&a, &edge, path);
    for _ in 0..2 {
        assert_eq!(get("/blog/bob/entry/1").status, 200);
    }
    assert_eq!(
        get("/blog/bob/entry/1").x_cache(),
        "HIT",
        "no ban matches Bob"
    );
    // Alice's object is always older than the ban: every lookup meets it.
    for _ in 0..3 {
        assert_ne!(get("/blog/alice/entry/1").x_cache(), "HIT");
    }
    let met = |l: &serde_json::Value| l["banned_by"] == 7;
    edge.wait_for_log(Duration::from_secs(30), met)
        .expect("a lookup met ban 7");
    // An admin ban is added on top of the earlier log: both apply, none is lost.
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let added = send(
        &a,
        edge.addr(),
        "POST",
        BLOG,
        "/.cachet/ban",
        &[("authorization", &auth)],
        b"obj.http.x-url ~ ^/blog/bob/".to_vec(),
    )
    .expect("admin answers");
    assert_eq!(added.status, 201, "{}", added.text());
    let id = serde_json::from_slice::<serde_json::Value>(&added.body).expect("JSON")["id"]
        .as_u64()
        .expect("id");
    assert_eq!(id, 8, "ids continue the earlier log's");
    // The new ban is dated no earlier than the log's newest entry (the log stays ordered),
    // so Bob's objects, stored now, are older than it: each lookup meets it.
    for _ in 0..2 {
        assert_ne!(get("/blog/bob/entry/1").x_cache(), "HIT");
    }
    edge.wait_for_log(Duration::from_secs(30), |l| l["banned_by"] == 8)
        .expect("a lookup met ban 8");
    assert_ne!(
        get("/blog/alice/entry/1").x_cache(),
        "HIT",
        "ban 7 still applies"
    );
}

/// Issue 13: a ban log that cannot be read is not "no bans". With the KV store's log
/// corrupt and no copy of the index at this POP, an object stored before the failure was
/// first seen is refetched, never served as it is (fail closed), and the access log says
/// so; objects fetched since are served.
#[test]
fn an_unreadable_ban_log_fails_closed_for_objects_stored_before_it() {
    let (origin, edge) = edge_with_log("broken_bans", "{not json");
    let a = agent();
    let get = |path: &str| get(&a, &edge, path);
    let path = "/blog/bob/entry/3";
    let first = get(path);
    assert_eq!((first.status, first.x_cache()), (200, "MISS"));
    let fetched = origin.stats().count(path);
    // The next lookup finds the object but cannot read the bans: stored before the
    // failure was seen, it is refetched (not a HIT).
    let second = get(path);
    assert_eq!(second.status, 200);
    assert_ne!(second.x_cache(), "HIT", "an object older than the failure");
    assert_eq!(
        origin.stats().count(path),
        fetched + 1,
        "refetched from the origin"
    );
    let line = edge
        .wait_for_log(Duration::from_secs(30), |l| l["bans_unknown"] == true)
        .expect("the access log records the unknown bans");
    assert!(
        line["error"].as_str().is_some_and(|e| !e.is_empty()),
        "with the store's error: {line}"
    );
    // The object fetched during the failure is newer than it: served from cache.
    assert_eq!(get(path).x_cache(), "HIT");
    assert_eq!(origin.stats().count(path), fetched + 1);
}
