//! A real etcd (Debian's `etcd-server`, `$CACHET_ETCD`) on loopback for the fleet tests: started with a temporary data directory, stopped and started again on the same ports and data (an outage), killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

/// How long etcd may take to answer after a start.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The etcd binary from `$CACHET_ETCD`, or `None` (the tests then skip, loudly, outside
/// CI; under CI `scripts/test` always sets it).
pub fn binary() -> Option<PathBuf> {
    std::env::var_os("CACHET_ETCD")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// A started etcd for a test, or `None` (with a loud line) when `$CACHET_ETCD` is unset
/// outside CI.
///
/// # Errors
/// When etcd does not start ([`Etcd::start`]).
///
/// # Panics
/// Under CI (`CI` set) without `$CACHET_ETCD`: CI never skips.
pub fn start_or_skip() -> Result<Option<Etcd>> {
    let Some(bin) = binary() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CACHET_ETCD is unset under CI: scripts/test sets it"
        );
        eprintln!("\n*** SKIPPED: CACHET_ETCD is unset (scripts/test sets it) ***\n");
        return Ok(None);
    };
    Etcd::start(&bin).map(Some)
}

/// A single-member etcd cluster.
pub struct Etcd {
    bin: PathBuf,
    child: Option<Child>,
    /// The client port (the v3 JSON gateway: `http://127.0.0.1:{port}/v3/...`).
    pub port: u16,
    peer: u16,
    dir: tempfile::TempDir,
}

impl Etcd {
    /// Starts etcd on free ports and waits until its gateway answers.
    ///
    /// # Errors
    /// When it cannot start or does not answer within [`START_TIMEOUT`].
    pub fn start(bin: &Path) -> Result<Self> {
        let mut e = Self {
            bin: bin.to_owned(),
            child: None,
            port: crate::envoy::free_port()?,
            peer: crate::envoy::free_port()?,
            dir: tempfile::tempdir()?,
        };
        e.resume()?;
        Ok(e)
    }

    /// The gateway's base URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Stops etcd (SIGKILL: an outage, not a shutdown); its data stays.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts etcd again on the same ports and data, and waits until it answers.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn resume(&mut self) -> Result<()> {
        let url = self.url();
        let peer = format!("http://127.0.0.1:{}", self.peer);
        let child = Command::new(&self.bin)
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("default={peer}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            // Any answer of the gateway's own: a range over nothing.
            if let Some((200, _)) = post(&url, "/v3/kv/range", br#"{"key":"AA=="}"#) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("etcd did not answer within {START_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// POSTs `body` to `{base}{path}`: `(status, body)`, `None` when nothing answered.
pub fn post(base: &str, path: &str, body: &[u8]) -> Option<(u16, Vec<u8>)> {
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(5)))
            .build(),
    );
    let mut r = agent.post(format!("{base}{path}")).send(body).ok()?;
    let status = r.status().as_u16();
    Some((status, r.body_mut().read_to_vec().ok()?))
}

/// Envoy YAML `edit` that adds a cluster named `etcd` for the gateway on `port` (STATIC,
/// HTTP/1.1), for `Envoy::start_edited`.
pub fn with_cluster(yaml: &str, port: u16) -> String {
    let cluster = format!(
        "  - name: etcd\n    connect_timeout: 1s\n    type: STATIC\n    load_assignment:\n      cluster_name: etcd\n      endpoints:\n      - lb_endpoints:\n        - endpoint:\n            address:\n              socket_address: {{ address: 127.0.0.1, port_value: {port} }}\n"
    );
    yaml.replacen("  clusters:\n", &format!("  clusters:\n{cluster}"), 1)
}
