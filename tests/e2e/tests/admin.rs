//! Bans and purges end to end: the admin API of the edge app in Viceroy, its auth, bans
//! from the KV-backed log, surrogate-key purge and soft purge, and the design-CSS story.

use std::time::Duration;

use cachet_e2e::{ADMIN_TOKEN, Stack, ua};
use serde_json::Value;

const BLOG: &str = "blog.example";
const CDN: &str = "cdn.example";
const LOG_WAIT: Duration = Duration::from_secs(30);

fn json(r: &cachet_e2e::Reply) -> Value {
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", r.text()))
}

fn desktop(s: &Stack, path: &str) -> cachet_e2e::Reply {
    s.get(BLOG, path, &[("user-agent", ua::DESKTOP)])
}

#[test]
fn admin_calls_need_the_bearer_token_and_it_is_never_logged() {
    let s = Stack::start();
    let none = s.request("GET", BLOG, "/.cachet/bans", &[]);
    assert_eq!(none.status, 401);
    assert_eq!(none.header("www-authenticate"), Some("Bearer"));
    let wrong = s.request(
        "GET",
        BLOG,
        "/.cachet/bans",
        &[("authorization", "Bearer not-the-token")],
    );
    assert_eq!(wrong.status, 403);
    assert!(json(&wrong)["error"].as_str().unwrap().contains("wrong"));
    let basic = s.request(
        "GET",
        BLOG,
        "/.cachet/bans",
        &[("authorization", "Basic eDp5")],
    );
    assert_eq!(basic.status, 401);
    let ok = s.admin("GET", "/.cachet/bans", &[], "");
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(json(&ok)["bans"], serde_json::json!([]));
    assert_eq!(s.admin("GET", "/.cachet/nothing", &[], "").status, 404);
    let m = s.admin("GET", "/.cachet/ban", &[], "");
    assert_eq!((m.status, m.header("allow")), (405, Some("POST")));
    // Admin calls never reach the origin, and the token is in no log line.
    assert_eq!(s.origin.stats().total, 0);
    assert!(!s.edge.output().contains(ADMIN_TOKEN));
    assert!(!s.edge.output().contains("not-the-token"));
}

#[test]
fn a_ban_invalidates_matching_objects_stored_before_it_and_nothing_else() {
    let s = Stack::start();
    for p in ["/blog/alice/entry/1", "/blog/bob/entry/1"] {
        assert_eq!(desktop(&s, p).x_cache(), "MISS");
        assert_eq!(desktop(&s, p).x_cache(), "HIT");
    }
    let added = s.admin(
        "POST",
        "/.cachet/ban",
        &[],
        "obj.http.x-url ~ ^/blog/alice/",
    );
    assert_eq!(added.status, 201, "{}", added.text());
    let body = json(&added);
    assert_eq!(body["lurker_friendly"], true);
    let id = body["id"].as_u64().unwrap();
    assert!(id >= 1);
    // Alice's object was stored before the ban: refetched. Bob's is untouched.
    assert_eq!(desktop(&s, "/blog/alice/entry/1").x_cache(), "MISS");
    assert_eq!(desktop(&s, "/blog/bob/entry/1").x_cache(), "HIT");
    // The refetched object is newer than the ban: a hit again.
    assert_eq!(desktop(&s, "/blog/alice/entry/1").x_cache(), "HIT");
    assert_eq!(s.origin_count("/blog/alice/entry/1"), 2);
    assert_eq!(s.origin_count("/blog/bob/entry/1"), 1);
    let met_ban = |l: &serde_json::Value| l["banned_by"] == id && l["route"] == "article";
    s.edge
        .wait_for_log(LOG_WAIT, met_ban)
        .expect("the lookup that met the ban is logged");
    let banned = s.edge.access_log().into_iter().filter(met_ban).count();
    assert_eq!(banned, 1, "one lookup met the ban");
    // The admin call's own line names the ban it added, in its own field.
    let admin_lines: Vec<_> = (s.edge.access_log().into_iter())
        .filter(|l| l["route"] == "admin" && l["ban_added"] == id)
        .collect();
    assert_eq!(
        admin_lines.len(),
        1,
        "the ban-creation line carries ban_added"
    );
    assert!(admin_lines[0]["banned_by"].is_null());
    // The log lists it, canonical.
    let list = json(&s.admin("GET", "/.cachet/bans", &[], ""));
    assert_eq!(list["bans"][0]["id"], id);
    assert_eq!(
        list["bans"][0]["expr"],
        r#"obj.http.x-url ~ "^/blog/alice/""#
    );
}

#[test]
fn request_bans_work_at_lookup_and_are_not_lurker_friendly() {
    let s = Stack::start();
    assert_eq!(desktop(&s, "/blog/bob/entry/2").x_cache(), "MISS");
    let added = json(&s.admin(
        "POST",
        "/.cachet/ban",
        &[],
        "req.url ~ ^/blog/bob/ && obj.status == 200",
    ));
    assert_eq!(added["lurker_friendly"], false);
    assert_eq!(desktop(&s, "/blog/bob/entry/2").x_cache(), "MISS");
    assert_eq!(desktop(&s, "/blog/bob/entry/2").x_cache(), "HIT");
}

#[test]
fn bad_ban_expressions_and_purge_requests_get_a_reason() {
    let s = Stack::start();
    let r = s.admin("POST", "/.cachet/ban", &[], "obj.http.x-url ~");
    assert_eq!(r.status, 400);
    let msg = json(&r)["error"].as_str().unwrap().to_owned();
    assert!(msg.contains("column"), "{msg}");
    for bad in [
        "",
        "req.urlfoo == /",
        "obj.nope == 1",
        "req.url ~ (unclosed",
    ] {
        let r = s.admin("POST", "/.cachet/ban", &[], bad);
        assert_eq!(r.status, 400, "{bad:?}: {}", r.text());
    }
    let big = "a".repeat(9 * 1024);
    assert_eq!(s.admin("POST", "/.cachet/ban", &[], &big).status, 413);
    assert_eq!(s.admin("POST", "/.cachet/purge", &[], "").status, 400);
    let many = (0..257)
        .map(|i| format!("k{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    assert_eq!(
        s.admin("POST", "/.cachet/purge", &[("surrogate-key", &many)], "")
            .status,
        400
    );
    // Nothing was stored by the refused calls, and the edge keeps serving.
    assert_eq!(
        json(&s.admin("GET", "/.cachet/bans", &[], ""))["bans"],
        serde_json::json!([])
    );
    assert_eq!(desktop(&s, "/blog/alice/").status, 200);
}

#[test]
fn purge_by_surrogate_key_hard_and_soft() {
    let s = Stack::start();
    let page = "/blog/alice/entry/3";
    assert_eq!(desktop(&s, page).x_cache(), "MISS");
    assert_eq!(desktop(&s, page).x_cache(), "HIT");
    let r = s.admin(
        "POST",
        "/.cachet/purge",
        &[("surrogate-key", "blog-alice nothing-here")],
        "",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let body = json(&r);
    assert_eq!(body["blog-alice"]["ok"], true);
    assert_eq!(body["blog-alice"]["soft"], false);
    assert_eq!(body["nothing-here"]["ok"], true);
    // Hard purge: gone.
    assert_eq!(desktop(&s, page).x_cache(), "MISS");
    assert_eq!(s.origin_count(page), 2);

    // Soft purge: still served at once (stale, within grace) while one background
    // revalidation asks the origin with the stored validator and gets a 304.
    let r = s.admin(
        "POST",
        "/.cachet/purge",
        &[("surrogate-key", "blog-alice"), ("fastly-soft-purge", "1")],
        "",
    );
    assert_eq!(json(&r)["blog-alice"]["soft"], true);
    let stale = desktop(&s, page);
    assert_eq!((stale.status, stale.x_cache()), (200, "STALE"));
    assert!(stale.text().contains("alice"));
    let done = s
        .edge
        .wait_for_log(LOG_WAIT, |l| {
            l["refresh"]
                .as_str()
                .is_some_and(|r| r.starts_with("stale:"))
        })
        .expect("the background revalidation finished");
    assert_eq!(done["refresh"], "stale:revalidated-304", "{done}");
    assert_eq!(desktop(&s, page).x_cache(), "HIT");
    assert_eq!(s.origin_count(page), 3, "one revalidation request");
}

#[test]
fn design_css_story_public_hit_then_private_after_purge_never_stored() {
    let s = Stack::start();
    let css = "/css/alice.css";
    assert_eq!(s.get(CDN, css, &[]).x_cache(), "MISS");
    assert_eq!(s.get(CDN, css, &[]).x_cache(), "HIT");
    // The blog turns private at the origin; the platform purges its CSS key at the CDN.
    assert!(s.origin.set_private("alice", true));
    let r = s.admin(
        "POST",
        "/.cachet/purge",
        &[("surrogate-key", "css-alice")],
        "",
    );
    assert_eq!(r.status, 200);
    let first = s.get(CDN, css, &[]);
    assert_ne!(first.x_cache(), "HIT");
    assert_eq!(first.x_cache(), "PASS");
    let second = s.get(CDN, css, &[]);
    assert_eq!(
        second.x_cache(),
        "PASS",
        "the private response was not stored"
    );
    assert_eq!(s.origin_count(css), 3);
    assert!(
        first
            .header("cache-control")
            .is_some_and(|c| c.contains("private"))
    );
}

#[test]
fn a_ban_on_a_surrogate_key_invalidates_the_objects_carrying_it() {
    let s = Stack::start();
    for p in ["/blog/alice/entry/8", "/blog/bob/entry/8"] {
        assert_eq!(desktop(&s, p).x_cache(), "MISS");
    }
    let added = s.admin(
        "POST",
        "/.cachet/ban",
        &[],
        r#"obj.http.surrogate-key ~ "(^|\s)blog-alice(\s|$)""#,
    );
    assert_eq!(added.status, 201, "{}", added.text());
    assert_eq!(json(&added)["lurker_friendly"], true);
    assert_eq!(desktop(&s, "/blog/alice/entry/8").x_cache(), "MISS");
    assert_eq!(desktop(&s, "/blog/bob/entry/8").x_cache(), "HIT");
}

/// Issue 13: concurrent ban writes (several instances at once, as several POPs would) never
/// lose one. Each `201` names an id; every such id is in the log afterwards, once. A call
/// that loses the compare-and-swap too often gets a `503` asking to retry (not accepted,
/// so nothing is lost); everything else is a `201`.
#[test]
fn concurrent_bans_are_never_lost() {
    let s = Stack::start();
    let addr = s.edge.addr();
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let accepted: Vec<u64> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..6)
            .map(|w| {
                let auth = auth.clone();
                scope.spawn(move || {
                    let a = cachet_e2e::agent();
                    let mut ids = Vec::new();
                    for i in 0..4 {
                        let expr = format!("obj.http.x-url ~ ^/blog/w{w}/entry/{i}$");
                        let r = cachet_e2e::send(
                            &a,
                            addr,
                            "POST",
                            BLOG,
                            "/.cachet/ban",
                            &[("authorization", &auth)],
                            expr.into_bytes(),
                        )
                        .expect("edge answers");
                        match r.status {
                            201 => ids.push(json(&r)["id"].as_u64().expect("id")),
                            503 => assert!(r.text().contains("retry"), "{}", r.text()),
                            other => panic!("{other}: {}", r.text()),
                        }
                    }
                    ids
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|h| h.join().expect("worker"))
            .collect()
    });
    assert!(
        accepted.len() >= 6,
        "most calls were accepted: {accepted:?}"
    );
    let log = json(&s.admin("GET", "/.cachet/bans", &[], ""));
    let mut in_log: Vec<u64> = log["bans"]
        .as_array()
        .expect("bans")
        .iter()
        .map(|b| b["id"].as_u64().expect("id"))
        .collect();
    in_log.sort_unstable();
    let mut unique = in_log.clone();
    unique.dedup();
    assert_eq!(unique, in_log, "ids are unique");
    for id in &accepted {
        assert!(
            in_log.contains(id),
            "accepted ban {id} is in the log: {in_log:?}"
        );
    }
    assert_eq!(
        in_log.len(),
        accepted.len(),
        "only accepted bans are in the log"
    );
}
