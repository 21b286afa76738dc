//! `cachet purge` against an in-process mock of Fastly's purge API that follows its documented responses.

use std::collections::{HashMap, VecDeque};
use std::net::TcpListener as StdListener;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The token the mock accepts for purges.
const TOKEN: &str = "tok-ABCdef0123456789-secret";
/// A token the mock knows but that lacks the purge scope (403).
const READONLY_TOKEN: &str = "tok-readonly-0000";
/// Service ids the mock knows.
const SERVICES: [&str; 4] = ["Svc1", "SvcFlag1", "SvcEnv1", "SvcToml1"];

/// One request as the mock saw it.
#[derive(Clone, Debug)]
struct Recorded {
    method: String,
    /// Path and query, as sent.
    target: String,
    /// Lowercase header names.
    headers: HashMap<String, String>,
    body: String,
}

/// A response to give instead of the documented behaviour (failure injection).
struct Canned {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
}

#[derive(Default)]
struct MockState {
    script: Mutex<VecDeque<Canned>>,
    requests: Mutex<Vec<Recorded>>,
    next_id: AtomicU64,
}

/// The mock API: an axum server on 127.0.0.1:0 in its own runtime.
struct MockApi {
    base: String,
    state: Arc<MockState>,
    _rt: tokio::runtime::Runtime,
}

impl MockApi {
    fn start() -> Self {
        let state = Arc::new(MockState::default());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = StdListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&state));
        rt.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
        MockApi {
            base,
            state,
            _rt: rt,
        }
    }

    /// Queues a canned response, used before the documented behaviour.
    fn push(&self, status: u16, headers: &[(&'static str, &str)], body: &str) {
        self.state.script.lock().unwrap().push_back(Canned {
            status,
            headers: headers.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
            body: body.to_owned(),
        });
    }

    fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }
}

fn json_response(status: u16, body: &Value) -> Response {
    (
        StatusCode::from_u16(status).unwrap(),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn purge_id(state: &MockState) -> String {
    format!(
        "108-1391560174-{}",
        974_124 + state.next_id.fetch_add(1, Ordering::Relaxed)
    )
}

/// The documented API: auth, then the three purge endpoints.
async fn handle(
    State(state): State<Arc<MockState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let target = uri
        .path_and_query()
        .map_or_else(|| uri.path().to_owned(), ToString::to_string);
    state.requests.lock().unwrap().push(Recorded {
        method: method.to_string(),
        target: target.clone(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect(),
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    let canned = state.script.lock().unwrap().pop_front();
    if let Some(c) = canned {
        let mut resp = (StatusCode::from_u16(c.status).unwrap(), c.body).into_response();
        for (k, v) in c.headers {
            resp.headers_mut().insert(k, v.parse().unwrap());
        }
        return resp;
    }
    if method != Method::POST && method.as_str() != "PURGE" {
        return json_response(405, &json!({"msg": "Method not allowed"}));
    }
    match headers.get("fastly-key").and_then(|v| v.to_str().ok()) {
        Some(TOKEN) => {}
        Some(READONLY_TOKEN) => {
            return json_response(
                403,
                &json!({"msg": "Forbidden", "detail": "token lacks the required scope"}),
            );
        }
        _ => {
            return json_response(
                401,
                &json!({"msg": "Provided credentials are missing or invalid"}),
            );
        }
    }
    let path = uri.path();
    if let Some(rest) = path.strip_prefix("/purge/") {
        if rest.is_empty() {
            return json_response(404, &json!({"msg": "Record not found"}));
        }
        return json_response(200, &json!({"status": "ok", "id": purge_id(&state)}));
    }
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        ["service", id, rest @ ..] => {
            if !SERVICES.contains(id) {
                return json_response(404, &json!({"msg": "Record not found"}));
            }
            match rest {
                ["purge_all"] => json_response(200, &json!({"status": "ok"})),
                ["purge", key] if !key.is_empty() => {
                    json_response(200, &json!({"status": "ok", "id": purge_id(&state)}))
                }
                ["purge"] => {
                    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
                        return json_response(400, &json!({"msg": "Bad request"}));
                    };
                    let Some(keys) = req["surrogate_keys"].as_array() else {
                        return json_response(400, &json!({"msg": "Bad request"}));
                    };
                    if keys.len() > 256 {
                        return json_response(
                            400,
                            &json!({"msg": "Bad request", "detail": "too many surrogate keys"}),
                        );
                    }
                    let map: serde_json::Map<String, Value> = keys
                        .iter()
                        .filter_map(Value::as_str)
                        .map(|k| (k.to_owned(), Value::String(purge_id(&state))))
                        .collect();
                    json_response(200, &Value::Object(map))
                }
                _ => json_response(404, &json!({"msg": "Record not found"})),
            }
        }
        _ => json_response(404, &json!({"msg": "Record not found"})),
    }
}

/// A finished `cachet` run.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
            .collect()
    }
}

/// Runs `cachet purge ARGS` in `dir` with a hermetic environment plus `env`; fast retries.
fn purge_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cachet"));
    cmd.current_dir(dir)
        .arg("purge")
        .args(["--retry-base-ms", "1", "--retry-max-delay-ms", "20"])
        .args(args);
    for var in [
        "FASTLY_API_TOKEN",
        "FASTLY_SERVICE_ID",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().unwrap();
    let run = Run {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8(stdout).unwrap(),
        stderr: String::from_utf8(stderr).unwrap(),
    };
    assert!(
        !run.stdout.contains(TOKEN) && !run.stderr.contains(TOKEN),
        "token leaked:\n{}\n{}",
        run.stdout,
        run.stderr
    );
    run
}

/// `purge_in` a fresh empty directory with the good token, against `api`.
fn purge(api: &MockApi, args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let mut all = vec!["--api-base", api.base.as_str()];
    all.extend_from_slice(args);
    purge_in(dir.path(), &all, &[("FASTLY_API_TOKEN", TOKEN)])
}

#[test]
fn batches_300_keys_into_256_and_44() {
    let api = MockApi::start();
    let dir = tempfile::tempdir().unwrap();
    let keys: Vec<String> = (0..300).map(|i| format!("post-{i}")).collect();
    let file = dir.path().join("keys.txt");
    std::fs::write(&file, format!("\n{}\n\n", keys.join("\n  "))).unwrap();
    let run = purge(
        &api,
        &[
            "--service-id",
            "Svc1",
            "--keys-from",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let reqs = api.requests();
    assert_eq!(reqs.len(), 2);
    let mut sent = Vec::new();
    for (r, n) in reqs.iter().zip([256, 44]) {
        assert_eq!(r.method, "POST");
        assert_eq!(r.target, "/service/Svc1/purge");
        assert_eq!(r.headers["fastly-key"], TOKEN);
        assert_eq!(r.headers["content-type"], "application/json");
        assert!(!r.headers.contains_key("fastly-soft-purge"));
        let body: Value = serde_json::from_str(&r.body).unwrap();
        let batch = body["surrogate_keys"].as_array().unwrap();
        assert_eq!(batch.len(), n);
        sent.extend(batch.iter().map(|k| k.as_str().unwrap().to_owned()));
    }
    assert_eq!(sent, keys);
    let lines = run.lines();
    assert_eq!(lines.len(), 300);
    for (line, key) in lines.iter().zip(&keys) {
        assert_eq!(line["key"], key.as_str());
        assert_eq!(line["ok"], true);
        assert!(line["id"].as_str().unwrap().starts_with("108-"));
    }
    assert!(
        run.stderr.contains(
            "300 surrogate keys: 300 purged, 0 failed (hard purge, service Svc1 from --service-id)"
        ),
        "{}",
        run.stderr
    );
}

#[test]
fn soft_purge_sends_the_header_and_dedupes_keys() {
    let api = MockApi::start();
    let run = purge(
        &api,
        &[
            "--service-id",
            "Svc1",
            "--soft",
            "--key",
            "a",
            "--key",
            "b",
            "--key",
            "a",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let reqs = api.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].headers["fastly-soft-purge"], "1");
    assert_eq!(reqs[0].body, r#"{"surrogate_keys":["a","b"]}"#);
    assert_eq!(run.lines().len(), 2);
    assert!(run.stderr.contains("1 duplicate key(s) ignored"));
    assert!(run.stderr.contains("(soft purge,"));
}

#[test]
fn keys_from_stdin() {
    let api = MockApi::start();
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .current_dir(dir.path())
        .args(["purge", "--api-base", &api.base, "--service-id", "Svc1"])
        .args(["--keys-from", "-"])
        .env("FASTLY_API_TOKEN", TOKEN)
        .env_remove("FASTLY_SERVICE_ID")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"k1\r\nk2\n").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(api.requests()[0].body, r#"{"surrogate_keys":["k1","k2"]}"#);
}

#[test]
fn retries_429_then_succeeds() {
    let api = MockApi::start();
    api.push(
        429,
        &[("retry-after", "1")],
        r#"{"msg":"Too many requests"}"#,
    );
    api.push(503, &[], "upstream busy");
    let started = std::time::Instant::now();
    let run = purge(&api, &["--service-id", "Svc1", "--key", "k"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(api.requests().len(), 3);
    assert!(
        run.stderr
            .contains("429 Too Many Requests: Too many requests; retry 1 of 4 in 0.020 s"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("503 Service Unavailable: upstream busy; retry 2 of 4"),
        "{}",
        run.stderr
    );
    // Retry-After: 1 was capped by the test's 20 ms maximum delay.
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(run.lines()[0]["ok"], true);
}

#[test]
fn gives_up_after_repeated_5xx() {
    let api = MockApi::start();
    for _ in 0..5 {
        api.push(500, &[], r#"{"msg":"Internal error"}"#);
    }
    let run = purge(
        &api,
        &["--service-id", "Svc1", "--key", "k1", "--key", "k2"],
    );
    assert_eq!(run.code, 1);
    assert_eq!(api.requests().len(), 5);
    let lines = run.lines();
    assert_eq!(lines.len(), 2);
    for l in &lines {
        assert_eq!(l["ok"], false);
        assert_eq!(
            l["error"],
            "500 Internal Server Error: Internal error (gave up after 5 attempts)"
        );
    }
    assert!(
        run.stderr.contains("2 surrogate keys: 0 purged, 2 failed"),
        "{}",
        run.stderr
    );

    // --max-attempts bounds the calls.
    let api = MockApi::start();
    for _ in 0..5 {
        api.push(502, &[], "");
    }
    let run = purge(
        &api,
        &["--service-id", "Svc1", "--key", "k", "--max-attempts", "3"],
    );
    assert_eq!(run.code, 1);
    assert_eq!(api.requests().len(), 3);
    assert_eq!(
        run.lines()[0]["error"],
        "502 Bad Gateway (gave up after 3 attempts)"
    );
}

#[test]
fn a_failed_batch_fails_only_its_keys() {
    let api = MockApi::start();
    let keys: Vec<String> = (0..300).map(|i| format!("k{i}")).collect();
    let mut args = vec!["--service-id", "Svc1", "--max-attempts", "1"];
    for k in &keys {
        args.extend(["--key", k.as_str()]);
    }
    api.push(503, &[], r#"{"msg":"busy"}"#);
    let run = purge(&api, &args);
    assert_eq!(run.code, 1);
    let lines = run.lines();
    assert_eq!(lines.iter().filter(|l| l["ok"] == false).count(), 256);
    assert!(lines[256..].iter().all(|l| l["ok"] == true));
    assert!(
        run.stderr
            .contains("300 surrogate keys: 44 purged, 256 failed")
    );
}

#[test]
fn a_key_missing_from_the_answer_fails() {
    let api = MockApi::start();
    api.push(200, &[], r#"{"a":"108-1-1"}"#);
    let run = purge(&api, &["--service-id", "Svc1", "--key", "a", "--key", "b"]);
    assert_eq!(run.code, 1);
    let lines = run.lines();
    assert_eq!(lines[0], json!({"key":"a","ok":true,"id":"108-1-1"}));
    assert_eq!(
        lines[1],
        json!({"key":"b","ok":false,"error":"not acknowledged: missing from the API's response"})
    );
}

#[test]
fn unauthorized_is_clear_and_stops_further_calls() {
    let api = MockApi::start();
    let dir = tempfile::tempdir().unwrap();
    let keys: Vec<String> = (0..300).map(|i| format!("k{i}")).collect();
    let file = dir.path().join("keys");
    std::fs::write(&file, keys.join("\n")).unwrap();
    let run = purge_in(
        dir.path(),
        &[
            "--api-base",
            &api.base,
            "--service-id",
            "Svc1",
            "--keys-from",
            "keys",
        ],
        &[("FASTLY_API_TOKEN", "wrong-token")],
    );
    assert_eq!(run.code, 1);
    assert_eq!(api.requests().len(), 1, "no call after a 401");
    let lines = run.lines();
    let msg =
        "401 Unauthorized: Provided credentials are missing or invalid — check FASTLY_API_TOKEN";
    assert_eq!(lines[0]["error"], msg);
    assert_eq!(
        lines[299]["error"],
        format!("not sent: an earlier call failed with {msg}")
    );
    assert!(!run.stderr.contains("wrong-token") && !run.stdout.contains("wrong-token"));
}

#[test]
fn forbidden_names_the_scope() {
    let api = MockApi::start();
    let dir = tempfile::tempdir().unwrap();
    let run = purge_in(
        dir.path(),
        &[
            "--api-base",
            &api.base,
            "--service-id",
            "Svc1",
            "--key",
            "k",
        ],
        &[("FASTLY_API_TOKEN", READONLY_TOKEN)],
    );
    assert_eq!(run.code, 1);
    assert_eq!(
        run.lines()[0]["error"],
        "403 Forbidden: Forbidden (token lacks the required scope) — the token needs the \
         purge_select scope and access to service Svc1"
    );
    let run = purge_in(
        dir.path(),
        &["--api-base", &api.base, "--service-id", "Svc1", "--all"],
        &[("FASTLY_API_TOKEN", READONLY_TOKEN)],
    );
    assert_eq!(run.code, 1);
    assert!(
        run.lines()[0]["error"]
            .as_str()
            .unwrap()
            .contains("the purge_all scope")
    );
}

#[test]
fn unknown_service_is_not_found() {
    let api = MockApi::start();
    let run = purge(&api, &["--service-id", "NoSuchSvc", "--key", "k"]);
    assert_eq!(run.code, 1);
    assert_eq!(api.requests().len(), 1, "404 is not retried");
    assert_eq!(
        run.lines()[0]["error"],
        "404 Not Found: Record not found — check the service id \"NoSuchSvc\""
    );
}

#[test]
fn purges_urls() {
    let api = MockApi::start();
    let run = purge(
        &api,
        &[
            "--soft",
            "--url",
            "https://WWW.Example.com/blog/alice/entry/1?x=1",
            "--url",
            "cdn.example/css/alice.css",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let reqs = api.requests();
    assert_eq!(
        reqs[0].target,
        "/purge/www.example.com/blog/alice/entry/1?x=1"
    );
    assert_eq!(reqs[1].target, "/purge/cdn.example/css/alice.css");
    assert!(reqs.iter().all(|r| r.method == "POST"
        && r.headers["fastly-soft-purge"] == "1"
        && r.headers["fastly-key"] == TOKEN));
    let lines = run.lines();
    assert_eq!(
        lines[0]["url"],
        "https://WWW.Example.com/blog/alice/entry/1?x=1"
    );
    assert_eq!(lines[0]["ok"], true);
    assert!(lines[1]["id"].as_str().unwrap().starts_with("108-"));
    assert!(
        run.stderr
            .contains("2 URLs: 2 purged, 0 failed (soft purge)")
    );
}

#[test]
fn purges_all_and_refuses_soft_all() {
    let api = MockApi::start();
    let run = purge(&api, &["--service-id", "Svc1", "--all"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let reqs = api.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].target, "/service/Svc1/purge_all");
    assert!(!reqs[0].headers.contains_key("fastly-soft-purge"));
    assert_eq!(run.lines(), vec![json!({"all":true,"ok":true})]);

    let run = purge(&api, &["--service-id", "Svc1", "--all", "--soft"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains(
            "--soft cannot be used with --all: Fastly's purge_all is always a hard purge"
        ),
        "{}",
        run.stderr
    );
    assert_eq!(api.requests().len(), 1, "nothing sent");
}

#[test]
fn service_id_precedence_flag_env_manifest() {
    let api = MockApi::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("fastly.toml"),
        "manifest_version = 3\nname = \"x\"\nservice_id = \"SvcToml1\"\n",
    )
    .unwrap();
    let base = ["--api-base", api.base.as_str(), "--key", "k"];
    let token = ("FASTLY_API_TOKEN", TOKEN);
    let env = ("FASTLY_SERVICE_ID", "SvcEnv1");

    let run = purge_in(dir.path(), &base, &[token]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("service SvcToml1 from fastly.toml)"));
    let run = purge_in(dir.path(), &base, &[token, env]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("service SvcEnv1 from $FASTLY_SERVICE_ID)")
    );
    let mut with_flag = base.to_vec();
    with_flag.extend(["--service-id", "SvcFlag1"]);
    let run = purge_in(dir.path(), &with_flag, &[token, env]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let targets: Vec<String> = api.requests().into_iter().map(|r| r.target).collect();
    assert_eq!(
        targets,
        [
            "/service/SvcToml1/purge",
            "/service/SvcEnv1/purge",
            "/service/SvcFlag1/purge"
        ]
    );

    // --manifest points elsewhere.
    let other = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("fastly.toml");
    let mut args = base.to_vec();
    args.extend(["--manifest", manifest.to_str().unwrap()]);
    let run = purge_in(other.path(), &args, &[token]);
    assert_eq!(run.code, 0, "{}", run.stderr);

    // No source at all.
    let run = purge_in(other.path(), &base, &[token]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains(
        "no service id: pass --service-id, set $FASTLY_SERVICE_ID, or add service_id = \"…\" to fastly.toml"
    ));
    // A broken manifest is reported with its path.
    std::fs::write(other.path().join("fastly.toml"), "service_id = \n").unwrap();
    let run = purge_in(other.path(), &base, &[token]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("fastly.toml: invalid TOML"),
        "{}",
        run.stderr
    );
    assert_eq!(api.requests().len(), 4);
}

#[test]
fn missing_token_is_a_usage_error() {
    let api = MockApi::start();
    let dir = tempfile::tempdir().unwrap();
    let run = purge_in(
        dir.path(),
        &[
            "--api-base",
            &api.base,
            "--service-id",
            "Svc1",
            "--key",
            "k",
        ],
        &[],
    );
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .contains("$FASTLY_API_TOKEN is not set: export an API token"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.is_empty());
    assert!(api.requests().is_empty());
}

#[test]
fn invalid_keys_are_refused_before_sending() {
    let api = MockApi::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("keys"), "ok-1\n\nbad key\n").unwrap();
    let run = purge_in(
        dir.path(),
        &[
            "--api-base",
            &api.base,
            "--service-id",
            "Svc1",
            "--keys-from",
            "keys",
        ],
        &[("FASTLY_API_TOKEN", TOKEN)],
    );
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .contains("keys:3: key \"bad key\" contains whitespace (U+0020) at byte 3"),
        "{}",
        run.stderr
    );
    let long = "k".repeat(1025);
    let run = purge(
        &api,
        &["--service-id", "Svc1", "--key", "a", "--key", &long],
    );
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("--key #2: key \"kkkk"));
    assert!(
        run.stderr
            .contains("is 1025 bytes, more than Fastly's limit of 1024")
    );
    let run = purge(&api, &["--service-id", "Svc1", "--key", ""]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("--key #1: key is empty"));
    assert!(api.requests().is_empty());
}

#[test]
fn usage_errors_exit_2() {
    let api = MockApi::start();
    // No target.
    let run = purge(&api, &["--service-id", "Svc1"]);
    assert_eq!(run.code, 2);
    // Two kinds of target.
    let run = purge(&api, &["--service-id", "Svc1", "--all", "--key", "k"]);
    assert_eq!(run.code, 2);
    // Plain http to a non-loopback host.
    let dir = tempfile::tempdir().unwrap();
    let run = purge_in(
        dir.path(),
        &[
            "--api-base",
            "http://api.example.com",
            "--service-id",
            "Svc1",
            "--key",
            "k",
        ],
        &[("FASTLY_API_TOKEN", TOKEN)],
    );
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .contains("plain http is allowed only for a loopback host")
    );
    // Bad service id characters.
    let run = purge(&api, &["--service-id", "../x", "--key", "k"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("is not a Fastly service id"));
    assert!(api.requests().is_empty());
}

#[test]
fn transport_errors_are_retried_then_reported() {
    // A port nobody listens on.
    let port = StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let run = purge_in(
        dir.path(),
        &[
            "--api-base",
            &base,
            "--service-id",
            "Svc1",
            "--key",
            "k",
            "--max-attempts",
            "2",
        ],
        &[("FASTLY_API_TOKEN", TOKEN)],
    );
    assert_eq!(run.code, 1);
    let err = run.lines()[0]["error"].as_str().unwrap().to_owned();
    assert!(err.starts_with(&format!("cannot reach {base}: ")), "{err}");
    assert!(err.ends_with("(gave up after 2 attempts)"), "{err}");
    assert!(run.stderr.contains("retry 1 of 1"), "{}", run.stderr);
}
