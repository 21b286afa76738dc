//! `cachet ban add --etcd` and `cachet purge --etcd` against a real etcd: what they write is what every fleet node polls (read back with `cachet_policy::etcd::poll_answer`), under the fleet's key prefix, in transactions etcd accepts; refusals never reach etcd, an unreachable etcd is exit 1, and a lost or refused transaction neither writes an entry twice nor loses one silently.
//!
//! etcd is `$CACHET_ETCD` (scripts/test sets it); without it, outside CI, the tests say so
//! and return (under CI they fail).

use std::collections::BTreeMap;
use std::net::TcpListener as StdListener;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use cachet_envoy_host_tests::etcd;
use cachet_policy::banlog::{Kind, LogEntry, NewEntry};
use cachet_policy::etcd::{
    DEFAULT_PREFIX, MAX_TXN_OPS, RANGE_PATH, TXN_PATH, poll, poll_answer, put_entries, txn_answer,
};

fn cachet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cachet"))
        .args(args)
        .output()
        .expect("run cachet")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Every entry under `prefix`, as a node's first poll reads them.
fn entries(url: &str, prefix: &str) -> Vec<LogEntry> {
    let (status, body) = etcd::post(url, RANGE_PATH, &poll(prefix, 0)).expect("poll");
    poll_answer(prefix, status, &body).expect("answer").entries
}

/// `cachet purge --etcd URL ARGS… --keys-from FILE` for `keys`.
fn purge(url: &str, args: &[&str], keys: &[String]) -> Output {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("keys.txt");
    std::fs::write(&file, keys.join("\n")).expect("write keys");
    let mut all = vec![
        "purge",
        "--etcd",
        url,
        "--keys-from",
        file.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    cachet(&all)
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("post-{i}")).collect()
}

/// The stdout lines of a purge: one JSON object per key.
fn lines(out: &Output) -> Vec<serde_json::Value> {
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// Checks that etcd holds exactly one soft-purge entry per key of `want` under `prefix`,
/// each with the id its stdout line printed; returns the distinct ids (revisions).
fn assert_each_key_once(url: &str, prefix: &str, want: &[String], out: &Output) -> Vec<u64> {
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    for e in entries(url, prefix) {
        assert_eq!(e.kind, Kind::SoftPurge);
        let key = e.key.expect("a purge entry has its key");
        assert!(
            seen.insert(key.clone(), e.id).is_none(),
            "{key} written twice"
        );
    }
    let mut want_sorted = want.to_vec();
    want_sorted.sort();
    assert_eq!(seen.keys().cloned().collect::<Vec<_>>(), want_sorted);
    for l in lines(out) {
        if l["ok"] == true {
            let key = l["key"].as_str().unwrap();
            assert_eq!(Some(&l["id"].as_u64().unwrap()), seen.get(key), "{l}");
        }
    }
    let mut ids: Vec<u64> = seen.into_values().collect();
    ids.sort_unstable();
    ids.dedup();
    ids
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

#[test]
fn a_fleet_with_another_prefix_sees_what_is_written_under_it() {
    let Some(e) = etcd::start_or_skip().expect("etcd") else {
        return;
    };
    let url = e.url();
    // --etcd-prefix: the ban is under that prefix, where the fleet's nodes poll, and
    // nothing is under the default one.
    let out = cachet(&[
        "ban",
        "add",
        "--etcd",
        &url,
        "--etcd-prefix",
        "/fleet-b/bans/",
        "obj.http.x-url ~ ^/blog/bob/",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let polled = entries(&url, "/fleet-b/bans/");
    assert_eq!(polled.len(), 1);
    assert_eq!(polled[0].kind, Kind::Ban);
    assert_eq!(polled[0].expr, "obj.http.x-url ~ \"^/blog/bob/\"");
    assert_eq!(Some(polled[0].id), line["id"].as_u64());
    assert!(entries(&url, DEFAULT_PREFIX).is_empty());

    // --config: the nodes' own config file gives the prefix (TOML and JSON).
    let dir = tempfile::tempdir().expect("tempdir");
    let toml = dir.path().join("fleet.toml");
    std::fs::write(
        &toml,
        "[envoy]\netcd_cluster = \"etcd\"\netcd_prefix = \"/from-config/\"\n",
    )
    .unwrap();
    let out = cachet(&[
        "purge",
        "--etcd",
        &url,
        "--config",
        toml.to_str().unwrap(),
        "--key",
        "css-alice",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("etcd prefix /from-config/"),
        "{}",
        text(&out.stderr)
    );
    let json = dir.path().join("fleet.json");
    std::fs::write(
        &json,
        r#"{"envoy": {"etcd_cluster": "etcd", "etcd_prefix": "/from-config/"}}"#,
    )
    .unwrap();
    let out = cachet(&[
        "ban",
        "add",
        "--etcd",
        &url,
        "--config",
        json.to_str().unwrap(),
        "obj.status == 404",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let polled = entries(&url, "/from-config/");
    let got: Vec<(Kind, Option<&str>)> =
        polled.iter().map(|e| (e.kind, e.key.as_deref())).collect();
    assert_eq!(got, [(Kind::Purge, Some("css-alice")), (Kind::Ban, None)]);
}

#[test]
fn a_bad_prefix_or_config_is_refused_before_anything_is_sent() {
    let Some(e) = etcd::start_or_skip().expect("etcd") else {
        return;
    };
    let url = e.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let toml = dir.path().join("fleet.toml");
    std::fs::write(
        &toml,
        "[envoy]\netcd_cluster = \"etcd\"\netcd_prefix = \"/from-config/\"\n",
    )
    .unwrap();
    // Exit 2, with the reason.
    let refused = |args: &[&str], want: &str| {
        let out = cachet(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(want),
            "{args:?}: {}",
            text(&out.stderr)
        );
    };
    let ban = |extra: &[&str]| {
        let mut a = vec!["ban", "add", "--etcd", url.as_str()];
        a.extend_from_slice(extra);
        a.push("obj.status == 500");
        a.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let run = |extra: &[&str], want: &str| {
        let a = ban(extra);
        refused(&a.iter().map(String::as_str).collect::<Vec<_>>(), want);
    };
    run(
        &["--etcd-prefix", "cachet/bans/"],
        "cachet: ban add: --etcd-prefix \"cachet/bans/\" must start with '/': give the fleet's envoy.etcd_prefix, e.g. /cachet/bans/",
    );
    run(
        &["--etcd-prefix", "/cachet/bans"],
        "--etcd-prefix \"/cachet/bans\" must end with '/'",
    );
    run(&["--etcd-prefix", ""], "--etcd-prefix \"\" is empty");
    let long = format!("/{}/", "x".repeat(300));
    run(&["--etcd-prefix", &long], "is 302 bytes; at most 256");
    let single = dir.path().join("single.toml");
    std::fs::write(&single, "[envoy]\netcd_prefix = \"/from-config/\"\n").unwrap();
    run(
        &["--config", single.to_str().unwrap()],
        "single.toml: envoy.etcd_cluster is not set: nodes running this config keep their ban log per Envoy process and never read etcd",
    );
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[envoy]\netcd_cluster = \"etcd\"\netcd_prefix = \"nope\"\n",
    )
    .unwrap();
    run(
        &["--config", bad.to_str().unwrap()],
        "bad.toml:3: envoy.etcd_prefix: must start with '/'",
    );
    run(
        &["--config", "/nonexistent/fleet.toml"],
        "/nonexistent/fleet.toml: No such file",
    );
    run(
        &["--etcd-prefix", "/a/", "--config", toml.to_str().unwrap()],
        "cannot be used with",
    );
    refused(
        &[
            "purge",
            "--node",
            "http://127.0.0.1:9",
            "--etcd-prefix",
            "/a/",
            "--key",
            "k",
        ],
        "the argument '--node <URL>' cannot be used with '--etcd-prefix <PREFIX>'",
    );
    let out = purge(&url, &["--etcd-prefix", "no-slash"], &keys(3));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr)
            .starts_with("cachet: purge: --etcd-prefix \"no-slash\" must start with '/'")
    );
    for prefix in [DEFAULT_PREFIX, "/from-config/", "/a/", "/"] {
        assert!(
            entries(&url, prefix).is_empty(),
            "nothing written under {prefix}"
        );
    }
}

#[test]
fn etcd_refuses_a_transaction_of_more_than_128_entries() {
    let Some(e) = etcd::start_or_skip().expect("etcd") else {
        return;
    };
    let url = e.url();
    let entry = |i: usize| NewEntry {
        kind: Kind::SoftPurge,
        expr: String::new(),
        key: Some(format!("k{i}")),
        lurker_friendly: false,
        at_ms: None,
    };
    let over: Vec<NewEntry> = (0..=MAX_TXN_OPS).map(entry).collect();
    let (status, body) =
        etcd::post(&url, TXN_PATH, &put_entries(DEFAULT_PREFIX, &over, 1, 0)).expect("answer");
    let refused = txn_answer(status, &body).expect_err("129 entries are refused");
    assert!(
        refused.to_string().contains("too many operations"),
        "{refused}"
    );
    assert!(entries(&url, DEFAULT_PREFIX).is_empty());
    let (status, body) = etcd::post(
        &url,
        TXN_PATH,
        &put_entries(DEFAULT_PREFIX, &over[..MAX_TXN_OPS], 1, 0),
    )
    .expect("answer");
    txn_answer(status, &body).expect("128 entries are one transaction");
    assert_eq!(entries(&url, DEFAULT_PREFIX).len(), MAX_TXN_OPS);
}

#[test]
fn a_purge_of_300_keys_writes_each_key_once_in_transactions_etcd_accepts() {
    let Some(e) = etcd::start_or_skip().expect("etcd") else {
        return;
    };
    let url = e.url();
    let want = keys(300);
    let out = purge(&url, &["--soft"], &want);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = lines(&out);
    assert_eq!(printed.len(), 300);
    for (l, k) in printed.iter().zip(&want) {
        assert_eq!(
            (l["key"].as_str(), &l["ok"]),
            (Some(k.as_str()), &true.into()),
            "{l}"
        );
    }
    assert!(
        text(&out.stderr).contains("300 surrogate keys: 300 purged, 0 failed, in 3 batches"),
        "{}",
        text(&out.stderr)
    );
    let ids = assert_each_key_once(&url, DEFAULT_PREFIX, &want, &out);
    assert_eq!(ids.len(), 3, "128 + 128 + 44: one revision per transaction");
}

/// What the proxy does to the gateway's transactions (1-based, in arrival order).
#[derive(Clone, Copy)]
enum Fault {
    /// Passes transaction N to etcd, then answers 502 as if the answer were lost.
    LoseAnswerOf(usize),
    /// Answers transaction N and every later one 503 without passing it on.
    RefuseFrom(usize),
}

struct ProxyState {
    upstream: String,
    fault: Fault,
    txns: AtomicUsize,
}

/// A proxy in front of etcd's gateway (axum on 127.0.0.1:0) that loses or refuses chosen
/// transactions; range requests pass through.
struct Proxy {
    base: String,
    state: Arc<ProxyState>,
    _rt: tokio::runtime::Runtime,
}

impl Proxy {
    fn start(upstream: String, fault: Fault) -> Self {
        let state = Arc::new(ProxyState {
            upstream,
            fault,
            txns: AtomicUsize::new(0),
        });
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = StdListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .fallback(proxy)
            .with_state(Arc::clone(&state));
        rt.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            base,
            state,
            _rt: rt,
        }
    }

    fn txns(&self) -> usize {
        self.state.txns.load(Ordering::SeqCst)
    }
}

async fn proxy(State(s): State<Arc<ProxyState>>, uri: Uri, body: Bytes) -> Response {
    let path = uri.path().to_owned();
    let mut lose = false;
    if path == TXN_PATH {
        let n = s.txns.fetch_add(1, Ordering::SeqCst) + 1;
        match s.fault {
            Fault::RefuseFrom(from) if n >= from => {
                let msg = r#"{"error":"etcdserver: request timed out","code":14,"message":"etcdserver: request timed out"}"#;
                return (StatusCode::SERVICE_UNAVAILABLE, msg).into_response();
            }
            Fault::LoseAnswerOf(which) => lose = n == which,
            Fault::RefuseFrom(_) => {}
        }
    }
    let upstream = s.upstream.clone();
    let answer = tokio::task::spawn_blocking(move || etcd::post(&upstream, &path, &body))
        .await
        .unwrap();
    match answer {
        _ if lose => (StatusCode::BAD_GATEWAY, "answer lost").into_response(),
        Some((status, body)) => (StatusCode::from_u16(status).unwrap(), body).into_response(),
        None => (StatusCode::BAD_GATEWAY, "etcd did not answer").into_response(),
    }
}

#[test]
fn a_transaction_whose_answer_was_lost_is_sent_again_and_written_once() {
    let Some(e) = etcd::start_or_skip().expect("etcd") else {
        return;
    };
    // The second transaction commits, but its answer never reaches the CLI.
    let p = Proxy::start(e.url(), Fault::LoseAnswerOf(2));
    let want = keys(300);
    let out = purge(&p.base, &["--soft"], &want);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(p.txns(), 4, "the lost one was sent twice, the others once");
    assert!(lines(&out).iter().all(|l| l["ok"] == true));
    let ids = assert_each_key_once(&e.url(), DEFAULT_PREFIX, &want, &out);
    assert_eq!(
        ids.len(),
        3,
        "the resend created nothing: etcd refused its compares"
    );
}

#[test]
fn a_transaction_etcd_refuses_stops_the_purge_and_names_the_keys_not_written() {
    let Some(e) = etcd::start_or_skip().expect("etcd") else {
        return;
    };
    let p = Proxy::start(e.url(), Fault::RefuseFrom(2));
    let want = keys(300);
    let out = purge(&p.base, &[], &want);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(
        p.txns(),
        1 + 3,
        "the first, then three sends of the second; no third"
    );
    let printed = lines(&out);
    assert_eq!(printed.len(), 300);
    for (i, l) in printed.iter().enumerate() {
        assert_eq!(l["key"], want[i]);
        let error = l["error"].as_str().unwrap_or("");
        match i {
            0..128 => assert_eq!(l["ok"], true, "{l}"),
            128..256 => assert!(
                l["ok"] == false
                    && error.starts_with(
                        "not written: etcd unavailable: status 503: etcdserver: request timed out (3 sends)"
                    ),
                "{l}"
            ),
            _ => assert_eq!(
                (&l["ok"], error),
                (&false.into(), "not sent: an earlier transaction was not written"),
                "{l}"
            ),
        }
    }
    let stderr = text(&out.stderr);
    for want in [
        "cachet: purge: 300 surrogate keys: 128 purged, 172 failed, in 3 batches (hard purge, etcd prefix /cachet/bans/)",
        "cachet: purge: transaction 2 (keys 129-256) not written: etcd unavailable: status 503",
        "cachet: purge: transaction 3 (keys 257-300) not sent",
    ] {
        assert!(stderr.contains(want), "{want}\n{stderr}");
    }
    let written = entries(&e.url(), DEFAULT_PREFIX);
    assert_eq!(written.len(), 128);
    assert!(written.iter().all(|e| e.kind == Kind::Purge));
}

/// A node's admin API (axum on 127.0.0.1:0): answers purge calls as a fleet node does,
/// one entry per key, and `503` from call `refuse_from` on (1-based); records the keys of
/// each call.
struct MockNode {
    base: String,
    calls: Arc<std::sync::Mutex<Vec<Vec<String>>>>,
    _rt: tokio::runtime::Runtime,
}

impl MockNode {
    fn start(refuse_from: usize) -> Self {
        let calls: Arc<std::sync::Mutex<Vec<Vec<String>>>> = Arc::default();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = StdListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let recorded = Arc::clone(&calls);
        let app = axum::Router::new().route(
            "/.cachet/purge",
            axum::routing::post(move |headers: axum::http::HeaderMap| {
                let recorded = Arc::clone(&recorded);
                async move {
                    assert_eq!(headers["authorization"], "Bearer t0ken");
                    let keys: Vec<String> = headers["surrogate-key"]
                        .to_str()
                        .unwrap()
                        .split(' ')
                        .map(str::to_owned)
                        .collect();
                    let n = {
                        let mut c = recorded.lock().unwrap();
                        c.push(keys.clone());
                        c.len()
                    };
                    if n >= refuse_from {
                        let body = r#"{"error":"etcd unavailable: no answer"}"#;
                        return (StatusCode::SERVICE_UNAVAILABLE, body.to_owned()).into_response();
                    }
                    let map: serde_json::Map<String, serde_json::Value> = keys
                        .into_iter()
                        .map(|k| {
                            (
                                k,
                                serde_json::json!({"ok": true, "soft": false, "id": 40 + n}),
                            )
                        })
                        .collect();
                    (StatusCode::OK, serde_json::Value::Object(map).to_string()).into_response()
                }
            }),
        );
        rt.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            base,
            calls,
            _rt: rt,
        }
    }
}

fn purge_node(base: &str, keys: &[String]) -> Output {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("keys.txt");
    std::fs::write(&file, keys.join("\n")).expect("write keys");
    Command::new(env!("CARGO_BIN_EXE_cachet"))
        .args([
            "purge",
            "--node",
            base,
            "--keys-from",
            file.to_str().unwrap(),
        ])
        .env("CACHET_ADMIN_TOKEN", "t0ken")
        .output()
        .expect("run cachet")
}

#[test]
fn a_purge_through_a_node_goes_in_calls_of_at_most_128_keys() {
    let node = MockNode::start(usize::MAX);
    let want = keys(300);
    let out = purge_node(&node.base, &want);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let calls = node.calls.lock().unwrap().clone();
    assert_eq!(
        calls.iter().map(Vec::len).collect::<Vec<_>>(),
        [128, 128, 44]
    );
    assert_eq!(calls.concat(), want, "every key once, in order");
    let printed = lines(&out);
    assert_eq!(printed.len(), 300);
    assert_eq!(
        printed[200],
        serde_json::json!({"key": "post-200", "ok": true, "soft": false, "id": 42})
    );

    // The second call refused: its keys are not written, the third call is not sent.
    let node = MockNode::start(2);
    let out = purge_node(&node.base, &want);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(node.calls.lock().unwrap().len(), 2);
    let printed = lines(&out);
    assert_eq!(printed[127]["ok"], true);
    assert_eq!(
        printed[128]["error"],
        r#"not written: 503: {"error":"etcd unavailable: no answer"}"#
    );
    assert_eq!(
        printed[256]["error"],
        "not sent: an earlier transaction was not written"
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "300 surrogate keys: 128 purged, 172 failed, in 3 batches (hard purge through http://"
        ) && stderr.contains("call 2 (keys 129-256): 128 failed: not written: 503")
            && stderr.contains("call 3 (keys 257-300) not sent"),
        "{stderr}"
    );
}
