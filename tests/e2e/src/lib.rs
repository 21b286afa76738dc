//! End-to-end harness: the demo origin and the edge app in Viceroy on free loopback ports.
//!
//! [`Stack::start`] spawns the demo origin in-process (port 0), writes a `fastly.toml`
//! whose `origin` backend points at it, and starts `viceroy serve --addr 127.0.0.1:0` with
//! the built `cachet-edge.wasm`, waiting for Viceroy's own "Listening on" line (no sleeps).
//! Viceroy's stdout (including the edge's access-log lines) is captured for assertions.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::Duration;

pub use cachet_demo_origin::{OriginConfig, RunningOrigin, Stats};

/// The admin API token the harness provisions in Viceroy's secret store (the demo token of
/// fastly.toml: the shared conformance cases call the admin API with it).
pub const ADMIN_TOKEN: &str = "demo-admin-token";

/// How long to wait for Viceroy to say it is listening (it compiles the wasm first).
pub const VICEROY_START_TIMEOUT: Duration = Duration::from_secs(120);

/// Path of the edge app's wasm: `$CACHET_EDGE_WASM`, else built (or found fresh) with
/// `cargo build -p cachet-edge --release --target wasm32-wasip1`.
///
/// # Panics
/// When the build fails: the end-to-end tests cannot run without it.
pub fn edge_wasm() -> PathBuf {
    if let Some(p) = std::env::var_os("CACHET_EDGE_WASM") {
        return PathBuf::from(p);
    }
    let root = workspace_root();
    let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(&root)
        .args([
            "build",
            "-q",
            "-p",
            "cachet-edge",
            "--release",
            "--target",
            "wasm32-wasip1",
        ])
        .status()
        .expect("running cargo to build the edge app");
    assert!(
        status.success(),
        "building cachet-edge for wasm32-wasip1 failed"
    );
    root.join("target/wasm32-wasip1/release/cachet-edge.wasm")
}

/// The workspace root (two levels above this crate).
///
/// # Panics
/// When the path cannot be resolved (the checkout is broken).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

fn viceroy_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("VICEROY") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let cargo_bin = home.join(".cargo/bin/viceroy");
    if cargo_bin.exists() {
        cargo_bin
    } else {
        PathBuf::from("viceroy")
    }
}

/// A running Viceroy serving the edge app.
pub struct Edge {
    child: Child,
    addr: SocketAddr,
    logs: Arc<(Mutex<Vec<String>>, Condvar)>,
    _dir: tempfile::TempDir,
}

impl Edge {
    /// Starts Viceroy with the edge app in front of `origin`. `config_toml`, when given,
    /// is placed in the `cachet` config store (replacing the built-in configuration).
    ///
    /// # Panics
    /// When Viceroy cannot be started or does not listen within
    /// [`VICEROY_START_TIMEOUT`] (run `scripts/test`, which installs it).
    pub fn start(origin: SocketAddr, config_toml: Option<&str>) -> Self {
        Self::start_with_manifest(origin, config_toml, "")
    }

    /// As [`Edge::start`], with `extra` TOML appended to the generated `fastly.toml`
    /// (e.g. `[local_server.shielding_sites]`).
    ///
    /// # Panics
    /// As [`Edge::start`].
    pub fn start_with_manifest(origin: SocketAddr, config_toml: Option<&str>, extra: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut manifest = format!(
            "manifest_version = 3\nname = \"cachet-e2e\"\nlanguage = \"rust\"\n\n\
             [local_server]\n[local_server.backends.origin]\nurl = \"http://{origin}\"\n\
             [local_server.kv_stores]\ncachet_bans = []\n\
             [[local_server.secret_stores.cachet_secrets]]\nkey = \"admin_token\"\n\
             data = \"{ADMIN_TOKEN}\"\n"
        );
        if let Some(cfg) = config_toml {
            let quoted = serde_json::to_string(cfg).expect("quote config");
            let _ = write!(
                manifest,
                "\n[local_server.config_stores.cachet]\nformat = \"inline-toml\"\n\
                 [local_server.config_stores.cachet.contents]\nconfig = {quoted}\n"
            );
        }
        manifest.push_str(extra);
        let manifest_path = dir.path().join("fastly.toml");
        std::fs::write(&manifest_path, manifest).expect("write fastly.toml");
        let mut child = Command::new(viceroy_bin())
            .arg("serve")
            .arg("-v")
            .arg("-C")
            .arg(&manifest_path)
            .args(["--addr", "127.0.0.1:0"])
            .arg(edge_wasm())
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "viceroy=info,viceroy_lib=info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting viceroy (install it with scripts/test or `cargo install viceroy --version 0.22.0 --locked`)");
        let logs = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let (tx, rx) = mpsc::channel();
        for stream in [
            Box::new(child.stdout.take().expect("stdout")) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().expect("stderr")),
        ] {
            let logs = Arc::clone(&logs);
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if let Some(at) = line.find("Listening on http://") {
                        let rest = &line[at + "Listening on http://".len()..];
                        let addr: String = rest
                            .chars()
                            .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
                            .collect();
                        let _ = tx.send(addr);
                    }
                    let (lines, changed) = &*logs;
                    lines.lock().expect("logs").push(line);
                    changed.notify_all();
                }
                // The stream closed: Viceroy exited. An empty address says so at once
                // instead of waiting out the start timeout.
                let _ = tx.send(String::new());
            });
        }
        let Some(addr) = rx
            .recv_timeout(VICEROY_START_TIMEOUT)
            .ok()
            .filter(|a| !a.is_empty())
        else {
            let _ = child.kill();
            panic!(
                "viceroy did not start listening; output:\n{}",
                logs.0.lock().expect("logs").join("\n")
            );
        };
        let addr = addr.parse().expect("viceroy address");
        Self {
            child,
            addr,
            logs,
            _dir: dir,
        }
    }

    /// Viceroy's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Viceroy's peak resident memory so far (`VmHWM`), bytes; `None` where `/proc` is
    /// unavailable.
    pub fn peak_rss(&self) -> Option<u64> {
        self.proc_status_bytes("VmHWM")
    }

    /// A memory line of Viceroy's `/proc/<pid>/status` (`VmRSS`, `VmHWM`, …), bytes;
    /// `None` where `/proc` or the line is unavailable.
    pub fn proc_status_bytes(&self, field: &str) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse::<u64>()
            .ok()?;
        Some(kib * 1024)
    }

    /// The address Viceroy listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The edge's JSON access-log records so far (lines `cachet_log :: {...}`).
    ///
    /// # Panics
    /// When a log-reader thread panicked (poisoned lock).
    pub fn access_log(&self) -> Vec<serde_json::Value> {
        parse_access_log(&self.logs.0.lock().expect("logs"))
    }

    /// Waits until an access-log record satisfies `pred` (the edge writes a request's
    /// record after its background work, so this observes refreshes finishing), woken by
    /// each new line, for at most `timeout`. Returns the record.
    ///
    /// # Panics
    /// When a log-reader thread panicked (poisoned lock).
    pub fn wait_for_log(
        &self,
        timeout: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> Option<serde_json::Value> {
        self.wait_for_logs(timeout, 1, pred)
            .and_then(|mut v| v.pop())
    }

    /// Waits until at least `n` access-log records satisfy `pred` (woken by each new
    /// line, for at most `timeout`); returns them, oldest first.
    ///
    /// # Panics
    /// When a log-reader thread panicked (poisoned lock).
    pub fn wait_for_logs(
        &self,
        timeout: Duration,
        n: usize,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> Option<Vec<serde_json::Value>> {
        let deadline = std::time::Instant::now() + timeout;
        let (lines, changed) = &*self.logs;
        let mut guard = lines.lock().expect("logs");
        loop {
            let found: Vec<_> = parse_access_log(&guard)
                .into_iter()
                .filter(|v| pred(v))
                .collect();
            if found.len() >= n {
                return Some(found);
            }
            let left = deadline.checked_duration_since(std::time::Instant::now())?;
            guard = changed.wait_timeout(guard, left).expect("logs").0;
        }
    }

    /// Everything Viceroy printed so far.
    ///
    /// # Panics
    /// When a log-reader thread panicked (poisoned lock).
    pub fn output(&self) -> String {
        self.logs.0.lock().expect("logs").join("\n")
    }
}

fn parse_access_log(lines: &[String]) -> Vec<serde_json::Value> {
    lines
        .iter()
        .filter_map(|l| l.split_once("cachet_log :: ").map(|(_, j)| j))
        .filter_map(|j| serde_json::from_str(j).ok())
        .collect()
}

impl Drop for Edge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A response as the client saw it.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Headers, names lower-cased; repeated fields joined with `", "`.
    pub headers: BTreeMap<String, String>,
    /// Raw body bytes as received (still gzip when `Content-Encoding: gzip`).
    pub body: Vec<u8>,
}

impl Reply {
    /// A header value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// `X-Cache`, or `""`.
    pub fn x_cache(&self) -> &str {
        self.header("x-cache").unwrap_or("")
    }

    /// The body decoded per `Content-Encoding` (gzip inflated), as text.
    ///
    /// # Panics
    /// On a corrupt gzip body or non-UTF-8 text: both are test failures.
    pub fn text(&self) -> String {
        let bytes = if self.header("content-encoding") == Some("gzip") {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&self.body[..])
                .read_to_end(&mut out)
                .expect("valid gzip body");
            out
        } else {
            self.body.clone()
        };
        String::from_utf8(bytes).expect("UTF-8 body")
    }
}

/// The demo origin plus the edge in front of it, and a plain HTTP client (no automatic
/// decompression, no redirects, 4xx/5xx are values).
pub struct Stack {
    /// The demo origin.
    pub origin: RunningOrigin,
    /// Viceroy running the edge app.
    pub edge: Edge,
    agent: ureq::Agent,
    origin_config: OriginConfig,
    stopped_at: Option<SocketAddr>,
}

impl Stack {
    /// Starts both with the edge app's built-in configuration.
    pub fn start() -> Self {
        Self::start_with(OriginConfig::default(), None)
    }

    /// Starts both with an origin configuration and an optional edge configuration
    /// (`{origin}` in it is replaced by the origin's `host:port`).
    ///
    /// # Panics
    /// When either cannot start.
    pub fn start_with(mut origin: OriginConfig, edge_config: Option<&str>) -> Self {
        origin.listen = "127.0.0.1:0".parse().expect("addr");
        let origin_config = origin.clone();
        let origin = cachet_demo_origin::spawn(origin).expect("demo origin");
        // `{origin}` in the edge configuration stands for the origin's address (for
        // `[origin].url`, the dynamic backend).
        let edge_config = edge_config.map(|c| c.replace("{origin}", &origin.addr().to_string()));
        let edge = Edge::start(origin.addr(), edge_config.as_deref());
        // Viceroy probes each backend with `GET /` when it starts ("checking if backend
        // 'origin' is up"); count only what the edge sends.
        origin.reset_stats();
        Self {
            origin_config,
            origin,
            edge,
            agent: agent(),
            stopped_at: None,
        }
    }

    /// `GET http://edge{path}` with `Host: host` and extra headers.
    ///
    /// # Panics
    /// On a transport error (the edge must always answer).
    pub fn get(&self, host: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
        self.request("GET", host, path, headers)
    }

    /// A request with any method (no body).
    ///
    /// # Panics
    /// On a transport error.
    pub fn request(&self, method: &str, host: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
        self.send(method, host, path, headers, Vec::new())
    }

    /// A request with any method and a body.
    ///
    /// # Panics
    /// On a transport error (the edge must always answer).
    pub fn send(
        &self,
        method: &str,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Reply {
        send(
            &self.agent,
            self.edge.addr(),
            method,
            host,
            path,
            headers,
            body,
        )
        .unwrap_or_else(|e| {
            panic!(
                "{method} {path}: {e}\nviceroy output:\n{}",
                self.edge.output()
            )
        })
    }

    /// An admin API call with `Authorization: Bearer` [`ADMIN_TOKEN`].
    ///
    /// # Panics
    /// On a transport error.
    pub fn admin(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        let auth = format!("Bearer {ADMIN_TOKEN}");
        let mut all: Vec<(&str, &str)> = vec![("authorization", auth.as_str())];
        all.extend_from_slice(headers);
        self.send(method, "blog.example", path, &all, body.as_bytes().to_vec())
    }

    /// Stops the origin (connections are refused) until [`Stack::start_origin`]; its
    /// address stays reserved for the restart.
    ///
    /// # Panics
    /// When the placeholder origin cannot be spawned.
    pub fn stop_origin(&mut self) {
        let placeholder = cachet_demo_origin::spawn(OriginConfig {
            listen: "127.0.0.1:0".parse().expect("addr"),
            ..self.origin_config.clone()
        })
        .expect("placeholder origin");
        let old = std::mem::replace(&mut self.origin, placeholder);
        self.stopped_at = Some(old.addr());
        old.shutdown();
    }

    /// Starts the origin again on its old address (after [`Stack::stop_origin`]).
    ///
    /// # Panics
    /// When the address cannot be bound again.
    pub fn start_origin(&mut self) {
        let Some(addr) = self.stopped_at.take() else {
            return;
        };
        let origin = cachet_demo_origin::spawn(OriginConfig {
            listen: addr,
            ..self.origin_config.clone()
        })
        .expect("origin restarts on its address");
        self.origin = origin;
    }

    /// Origin request count for `path` (exactly as the origin received it).
    pub fn origin_count(&self, path: &str) -> u64 {
        self.origin.stats().by_path.get(path).copied().unwrap_or(0)
    }
}

/// Sends one request to `addr` and reads the whole reply.
///
/// # Errors
/// The transport error, as text.
pub fn send(
    agent: &ureq::Agent,
    addr: SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Result<Reply, String> {
    let url = format!("http://{addr}{path}");
    let mut req = ureq::http::Request::builder()
        .method(method)
        .uri(&url)
        .header("host", host);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(body).map_err(|e| e.to_string())?;
    let mut resp = agent.run(req).map_err(|e| e.to_string())?;
    let mut headers = BTreeMap::new();
    for (k, v) in resp.headers() {
        let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
        headers
            .entry(k.as_str().to_ascii_lowercase())
            .and_modify(|e: &mut String| {
                e.push_str(", ");
                e.push_str(&v);
            })
            .or_insert(v);
    }
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(64 * 1024 * 1024)
        .read_to_vec()
        .map_err(|e| e.to_string())?;
    Ok(Reply {
        status,
        headers,
        body,
    })
}

/// A plain HTTP client: no automatic decompression, no redirects, 4xx/5xx are values.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

/// Common user agents for the tests.
pub mod ua {
    /// Desktop Chrome on Windows.
    pub const DESKTOP: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36";
    /// iPhone Safari.
    pub const IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1";
    /// Android phone Chrome.
    pub const ANDROID: &str = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36";
    /// iPad Safari (sends `Mobile`, must be PC).
    pub const IPAD: &str = "Mozilla/5.0 (iPad; CPU OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1";
}
