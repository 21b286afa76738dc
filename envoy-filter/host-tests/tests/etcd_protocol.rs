//! The fleet ban-log protocol (`cachet_store::etcd`, `cachet_store::admin::handle_fleet`, `bans::apply_polled`) against a real etcd: two nodes' logs converge, retirement raises the floor, an unreachable etcd accepts nothing.
//!
//! etcd is `$CACHET_ETCD` (scripts/test installs Debian's `etcd-server` and sets it); without
//! it, outside CI, the tests say so and return, as the real-Envoy tests do. Each test starts
//! its own etcd (`cachet_envoy_host_tests::etcd`) and kills it when done.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

use cachet_envoy_host_tests::etcd;
use cachet_policy::{Config, Policy};
use cachet_store::etcd::{self as protocol, DEFAULT_PREFIX};
use cachet_store::{MemoryStore, bans};
use cachet_worker::admin::api::{self as admin, AdminRequest, Fleet};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

fn post(base: &str, path: &str, body: &[u8]) -> Option<(u16, Vec<u8>)> {
    etcd::post(base, path, body)
}

fn policy() -> Policy {
    let mut c = Config::default();
    c.admin.token = TOKEN.into();
    c.bans.max_bans = 100;
    Policy::new(c).unwrap()
}

fn call(method: &str, path: &str) -> AdminRequest {
    AdminRequest {
        method: method.into(),
        path: path.into(),
        authorization: Some(format!("Bearer {TOKEN}")),
        ..AdminRequest::default()
    }
}

/// One node's admin write: through etcd at `url` (or nothing there), answered.
fn write(
    url: &str,
    node: &MemoryStore,
    req: &AdminRequest,
    body: &[u8],
    now_ms: u64,
) -> (u16, String) {
    write_as(&policy(), url, node, req, body, now_ms)
}

/// [`write`] under `policy`.
fn write_as(
    policy: &Policy,
    url: &str,
    node: &MemoryStore,
    req: &AdminRequest,
    body: &[u8],
    now_ms: u64,
) -> (u16, String) {
    let w = match admin::handle_fleet(node, policy, req, body, now_ms, DEFAULT_PREFIX, now_ms) {
        Fleet::Write(w) => w,
        Fleet::Reply(r, _) => return (r.status, String::from_utf8(r.body).unwrap()),
    };
    let answer = post(url, protocol::TXN_PATH, &w.txn);
    let (r, _) = admin::fleet_answer(&w, answer.as_ref().map(|(s, b)| (*s, b.as_slice())));
    (r.status, String::from_utf8(r.body).unwrap())
}

/// One node's poll, applied; returns how many entries it added.
fn poll(url: &str, node: &MemoryStore, now_ms: u64) -> usize {
    let (log, _) = bans::read_log(node);
    let (status, body) = post(
        url,
        protocol::RANGE_PATH,
        &protocol::poll(DEFAULT_PREFIX, log.feed_through),
    )
    .unwrap();
    let polled = protocol::poll_answer(DEFAULT_PREFIX, status, &body).unwrap();
    bans::apply_polled(node, &polled, 100, now_ms).unwrap()
}

#[test]
fn a_ban_accepted_by_one_node_reaches_every_node_with_the_same_id() {
    let Some(e) = etcd::start_or_skip().expect("etcd") else {
        return;
    };
    let (a, b) = (MemoryStore::default(), MemoryStore::default());
    let (status, body) = write(
        &e.url(),
        &a,
        &call("POST", "/.cachet/ban"),
        b"obj.http.x-url ~ ^/blog/",
        1_000,
    );
    assert_eq!(status, 201, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = v["id"].as_u64().unwrap();
    assert!(id > 0);
    assert_eq!(v["expr"], "obj.http.x-url ~ \"^/blog/\"");

    let mut purge = call("POST", "/.cachet/purge");
    purge.surrogate_key = Some("css-alice blog-bob".into());
    purge.soft = true;
    let (status, body) = write(&e.url(), &b, &purge, b"", 2_000);
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(r#""blog-bob":{"id""#) || body.contains(r#""blog-bob":{"#),
        "{body}"
    );

    // Neither node applied anything before polling: the log is etcd's.
    assert_eq!(bans::read_log(&a).0.entries.len(), 0);
    assert_eq!(
        (poll(&e.url(), &a, 3_000), poll(&e.url(), &b, 3_000)),
        (3, 3)
    );
    let (la, lb) = (bans::read_log(&a).0, bans::read_log(&b).0);
    assert_eq!(
        la.entries, lb.entries,
        "both nodes hold the same entries, same times"
    );
    assert_eq!(la.entries[0].expr, "obj.http.x-url ~ \"^/blog/\"");
    // One id per entry, fleet-wide: the 201's id (the etcd revision) is the one every
    // node lists (issue 27 item 8); a purge's keys share their transaction's revision.
    assert_eq!(la.entries[0].id, id);
    assert!(la.entries[1].id > id && la.entries[1].id == la.entries[2].id);
    let listed: serde_json::Value =
        serde_json::from_str(&cachet_policy::admin::list_body(&lb)).unwrap();
    assert_eq!(listed["bans"][0]["id"].as_u64(), Some(id), "{listed}");
    // Accepted at 1_000, stamped the next millisecond (`banlog::stamp_ms`).
    assert_eq!(la.entries[0].at_ms, 1_001);
    assert_eq!(la.feed_through, lb.feed_through);
    // A second poll brings nothing new.
    assert_eq!(poll(&e.url(), &a, 4_000), 0);
    assert_eq!(bans::read_log(&a).0.entries.len(), 3);
    // Refusals are answered by the node, never written.
    let (status, _) = write(
        &e.url(),
        &a,
        &call("POST", "/.cachet/ban"),
        b"obj.http.x ~ (",
        5_000,
    );
    assert_eq!(status, 400);
    let mut bad = call("POST", "/.cachet/ban");
    bad.authorization = Some("Bearer wrong-token-wrong-token".into());
    assert_eq!(
        write(&e.url(), &a, &bad, b"obj.status == 404", 5_000).0,
        403
    );
    assert_eq!(poll(&e.url(), &b, 6_000), 0);
}

#[test]
fn retirement_through_etcd_raises_every_nodes_floor_even_one_that_missed_the_entries() {
    let Some(e) = etcd::start_or_skip().expect("etcd") else {
        return;
    };
    let a = MemoryStore::default();
    for (i, expr) in [
        "obj.status == 404",
        "obj.status == 410",
        "obj.status == 500",
    ]
    .iter()
    .enumerate()
    {
        let at = 1_000 * (i as u64 + 1);
        assert_eq!(
            write(
                &e.url(),
                &a,
                &call("POST", "/.cachet/ban"),
                expr.as_bytes(),
                at
            )
            .0,
            201
        );
    }
    // Entries are stamped the millisecond after acceptance (1_001, 2_001, 3_001): the
    // newest at or before the cutoff 2_500 is the one of 2_001.
    let (s, b) = post(
        &e.url(),
        protocol::RANGE_PATH,
        &protocol::retirable(DEFAULT_PREFIX, 2_500),
    )
    .unwrap();
    let cutoff = protocol::retirable_answer(DEFAULT_PREFIX, s, &b).unwrap();
    assert_eq!(cutoff, Some(2_001));
    // Twice (two nodes retiring at once): the second changes nothing.
    let mut moved = Vec::new();
    for cutoff in [2_001, 2_001, 1_001] {
        let (s, b) = post(
            &e.url(),
            protocol::TXN_PATH,
            &protocol::retire(DEFAULT_PREFIX, cutoff),
        )
        .unwrap();
        moved.push(protocol::retire_answer(s, &b).unwrap());
    }
    // Created, then the same cutoff again and a lower one change nothing.
    assert_eq!(moved, [true, false, false]);
    // A node that joins now sees one live entry and the floor: objects stored before
    // 2_001 count as banned there too.
    let late = MemoryStore::default();
    assert_eq!(poll(&e.url(), &late, 10_000), 1);
    let log = bans::read_log(&late).0;
    assert_eq!((log.entries.len(), log.trimmed_at_ms), (1, 2_001));
    assert_eq!(log.entries[0].expr, "obj.status == \"500\"");
}

#[test]
fn with_etcd_gone_a_ban_is_refused_with_503_and_nothing_is_lost_when_it_returns() {
    let Some(e) = etcd::start_or_skip().expect("etcd") else {
        return;
    };
    let url = e.url();
    let a = MemoryStore::default();
    assert_eq!(
        write(
            &url,
            &a,
            &call("POST", "/.cachet/ban"),
            b"obj.status == 404",
            1_000
        )
        .0,
        201
    );
    assert_eq!(poll(&url, &a, 1_500), 1);
    drop(e);
    let (status, body) = write(
        &url,
        &a,
        &call("POST", "/.cachet/ban"),
        b"obj.status == 410",
        2_000,
    );
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("etcd unavailable"), "{body}");
    // The node keeps its last log.
    assert_eq!(bans::read_log(&a).0.entries.len(), 1);
}

/// Issue 27 item 9: one admin call is one etcd transaction, and etcd refuses more than
/// `--max-txn-ops` (128) operations: 128 keys are written, 129 are refused with a `400`
/// and the reason before anything is sent (never a 503 after a refused write).
#[test]
fn a_fleet_purge_is_written_up_to_etcds_transaction_limit_and_refused_beyond() {
    let Some(e) = etcd::start_or_skip().expect("etcd") else {
        return;
    };
    let node = MemoryStore::default();
    let mut c = Config::default();
    c.admin.token = TOKEN.into();
    c.bans.max_bans = 1_000;
    let roomy = Policy::new(c).unwrap();
    let keys = |n: usize| {
        (0..n)
            .map(|i| format!("k{i}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut purge = call("POST", "/.cachet/purge");
    purge.surrogate_key = Some(keys(128));
    let (status, body) = write_as(&roomy, &e.url(), &node, &purge, b"", 1_000);
    assert_eq!(status, 200, "{body}");
    let in_etcd = || {
        let (status, body) = post(
            &e.url(),
            protocol::RANGE_PATH,
            &protocol::poll(DEFAULT_PREFIX, 0),
        )
        .unwrap();
        protocol::poll_answer(DEFAULT_PREFIX, status, &body)
            .unwrap()
            .entries
            .len()
    };
    assert_eq!(in_etcd(), 128);
    purge.surrogate_key = Some(keys(129));
    let (status, body) = write_as(&roomy, &e.url(), &node, &purge, b"", 3_000);
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("129 surrogate keys") && body.contains("128"),
        "{body}"
    );
    assert_eq!(in_etcd(), 128, "nothing written");
}
