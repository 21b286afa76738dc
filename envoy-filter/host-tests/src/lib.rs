//! A minimal, deterministic proxy-wasm host on wasmtime that loads the built Envoy filter.
//!
//! It implements the proxy-wasm ABI 0.2.1 hostcalls `cachet_envoy.wasm` uses (headers,
//! buffers, local replies, `proxy_http_call`, ticks, shared data with CAS, metrics,
//! `proxy_set_effective_context`, `proxy_continue_stream`) plus the few WASI calls Rust's
//! std makes. Several [`Vm`]s (one per simulated Envoy worker) share one [`Host`]: shared
//! data, metrics and the clock are host-wide, exactly as in Envoy where each worker
//! thread runs its own VM. Nothing runs by itself: tests create streams, answer callouts,
//! advance the clock and fire ticks, so every run is the same.
//!
//! Why our own host: the `proxy-wasm-host` crate declares rust-version 1.96 and would
//! need `--ignore-rust-version` on our pinned 1.95.0 (breaking `--locked` workspace
//! builds). This harness pins `wasmtime =46.0.3` (the version Viceroy 0.22 uses, so it is
//! already built on this machine) with `default-features = false`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use anyhow::{Context as _, Result, anyhow, bail};
use wasmtime::{Caller, Engine, Extern, Instance, Linker, Memory, Module, Store, TypedFunc};

pub mod envoy;
pub mod etcd;

/// Header pairs, names lower-case, values raw bytes.
pub type Headers = Vec<(String, Vec<u8>)>;

/// proxy-wasm `Status` values.
mod status {
    pub const OK: i32 = 0;
    pub const NOT_FOUND: i32 = 1;
    pub const BAD_ARGUMENT: i32 = 2;
    pub const CAS_MISMATCH: i32 = 8;
}

/// Buffer types (proxy-wasm ABI 0.2.1).
mod buffer {
    pub const REQUEST_BODY: i32 = 0;
    pub const RESPONSE_BODY: i32 = 1;
    pub const CALL_RESPONSE_BODY: i32 = 4;
    pub const VM_CONFIGURATION: i32 = 6;
    pub const PLUGIN_CONFIGURATION: i32 = 7;
}

/// Map types (proxy-wasm ABI 0.2.1).
mod map {
    pub const REQUEST_HEADERS: i32 = 0;
    pub const RESPONSE_HEADERS: i32 = 2;
    pub const CALL_RESPONSE_HEADERS: i32 = 6;
}

/// Context id of every VM's root context.
const ROOT_ID: u32 = 1;

/// State every VM of one host shares: shared data, metrics, the clock.
#[derive(Debug, Default)]
pub struct Shared {
    data: HashMap<String, (Vec<u8>, u32)>,
    next_cas: u32,
    metrics: BTreeMap<String, i64>,
    metric_ids: Vec<String>,
}

/// A compiled filter plus host-wide state.
#[derive(Clone)]
pub struct Host {
    engine: Engine,
    module: Module,
    shared: Arc<Mutex<Shared>>,
    clock_ns: Arc<AtomicU64>,
}

fn lock(s: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The filter's release wasm: `$CACHET_ENVOY_WASM`, else built with
/// `cargo build -p cachet-envoy --release --target wasm32-wasip1` (same target dir).
///
/// # Errors
/// When the build fails.
pub fn filter_wasm() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("CACHET_ENVOY_WASM") {
        return Ok(PathBuf::from(p));
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        .current_dir(&root)
        .args([
            "build",
            "-q",
            "-p",
            "cachet-envoy",
            "--release",
            "--target",
            "wasm32-wasip1",
        ])
        .status()
        .context("running cargo to build the filter")?;
    if !status.success() {
        bail!("building cachet-envoy for wasm32-wasip1 failed");
    }
    Ok(target_dir().join("wasm32-wasip1/release/cachet_envoy.wasm"))
}

/// The directory holding the dynamic module `libcachet_envoy_module.so` (issue 33):
/// `$CACHET_ENVOY_MODULE_DIR`, else `target/module` (built by [`build_module`]).
pub fn module_dir() -> PathBuf {
    std::env::var_os("CACHET_ENVOY_MODULE_DIR")
        .map_or_else(|| target_dir().join("module"), PathBuf::from)
}

/// Builds the dynamic module (`cargo build -p cachet-envoy-module --profile module`) unless
/// `$CACHET_ENVOY_MODULE_DIR` names a built one; returns [`module_dir`].
///
/// # Errors
/// When the build fails.
pub fn build_module() -> Result<PathBuf> {
    if std::env::var_os("CACHET_ENVOY_MODULE_DIR").is_none() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = std::process::Command::new(cargo)
            .current_dir(&root)
            .args([
                "build",
                "-q",
                "-p",
                "cachet-envoy-module",
                "--profile",
                "module",
            ])
            .status()
            .context("running cargo to build the dynamic module")?;
        if !status.success() {
            bail!("building cachet-envoy-module failed");
        }
    }
    Ok(module_dir())
}

/// `$CARGO_TARGET_DIR`, else the workspace's `target/`.
fn target_dir() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

/// Start of the simulated clock: 2026-01-01T00:00:00Z, in ns since the epoch.
pub const EPOCH_NS: u64 = 1_767_225_600_000_000_000;

impl Host {
    /// Compiles the filter at `wasm`.
    ///
    /// # Errors
    /// When the file cannot be read or compiled.
    pub fn new(wasm: &Path) -> Result<Self> {
        // Compiling the 1.7 MB filter with a debug-built cranelift takes a minute; the
        // on-disk cache (keyed by module bytes, settings and wasmtime version) lets every
        // later test process load it instead (nextest runs each test in its own process).
        let mut cache = wasmtime::CacheConfig::new();
        cache.with_directory(target_dir().join("wasmtime-cache"));
        let mut config = wasmtime::Config::new();
        config.cache(Some(
            wasmtime::Cache::new(cache).map_err(|e| anyhow!("{e:?}"))?,
        ));
        if std::env::var_os("CACHET_WASM_PERFMAP").is_some() {
            // `perf record` can then name the module's functions (/tmp/perf-<pid>.map);
            // build the wasm with `CARGO_PROFILE_RELEASE_STRIP=none` to keep their names.
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = Engine::new(&config).map_err(|e| anyhow!("{e:?}"))?;
        let module = Module::from_file(&engine, wasm).map_err(|e| anyhow!("{e:?}"))?;
        Ok(Self {
            engine,
            module,
            shared: Arc::new(Mutex::new(Shared::default())),
            clock_ns: Arc::new(AtomicU64::new(EPOCH_NS)),
        })
    }

    /// The same compiled module with fresh shared data, metrics and clock.
    #[must_use]
    pub fn fresh(&self) -> Self {
        Self {
            engine: self.engine.clone(),
            module: self.module.clone(),
            shared: Arc::new(Mutex::new(Shared::default())),
            clock_ns: Arc::new(AtomicU64::new(EPOCH_NS)),
        }
    }

    /// Moves the clock forward.
    pub fn advance_ms(&self, ms: u64) {
        self.clock_ns.fetch_add(ms * 1_000_000, Ordering::SeqCst);
    }

    /// Current clock, ms since the epoch.
    pub fn now_ms(&self) -> u64 {
        self.clock_ns.load(Ordering::SeqCst) / 1_000_000
    }

    /// A metric's value (counters summed over VMs; gauges as last set), by full name
    /// (`cachet.hits_local`).
    pub fn metric(&self, name: &str) -> i64 {
        lock(&self.shared).metrics.get(name).copied().unwrap_or(0)
    }

    /// Every metric.
    pub fn metrics(&self) -> BTreeMap<String, i64> {
        lock(&self.shared).metrics.clone()
    }

    /// A raw shared-data value.
    pub fn shared_value(&self, key: &str) -> Option<Vec<u8>> {
        lock(&self.shared).data.get(key).map(|(v, _)| v.clone())
    }

    /// Sum of the sizes of shared-data values whose key starts with `prefix`.
    pub fn shared_bytes(&self, prefix: &str) -> usize {
        lock(&self.shared)
            .data
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, (v, _))| v.len())
            .sum()
    }

    /// Starts a VM (one worker) with plugin configuration `config`.
    ///
    /// # Errors
    /// When instantiation fails or `on_configure` returns false (with the VM's log).
    pub fn vm(&self, config: &str) -> Result<Vm> {
        Vm::start(self, config.as_bytes())
    }
}

/// A local reply or a final upstream response as the client sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: Headers,
    /// Body.
    pub body: Vec<u8>,
}

impl Response {
    /// First value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    /// `X-Cache`, or `""`.
    pub fn x_cache(&self) -> &str {
        self.header("x-cache").unwrap_or("")
    }

    /// The body decoded per `Content-Encoding` (gzip inflated), lossy UTF-8.
    pub fn text(&self) -> String {
        let bytes = if self.header("content-encoding") == Some("gzip") {
            let mut out = Vec::new();
            let _ = std::io::Read::read_to_end(
                &mut flate2::read::GzDecoder::new(&self.body[..]),
                &mut out,
            );
            out
        } else {
            self.body.clone()
        };
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// An HTTP call the filter dispatched and the test has not answered yet.
#[derive(Debug, Clone)]
pub struct Callout {
    /// Token.
    pub token: u32,
    /// Context that made it (root or a stream).
    pub context: u32,
    /// Cluster name.
    pub cluster: String,
    /// Request headers (pseudo-headers included).
    pub headers: Headers,
    /// Timeout, ms.
    pub timeout_ms: u32,
}

impl Callout {
    /// A header of the call.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }
}

/// Where a stream is after a callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Answered by the filter (local reply).
    Reply(Response),
    /// Forwarded upstream with these (filter-modified) request headers.
    Upstream(Headers),
    /// Paused, waiting (for a callout or another request).
    Paused,
}

#[derive(Debug, Default)]
struct Stream {
    req_headers: Headers,
    req_body: Vec<u8>,
    resp_headers: Headers,
    resp_body: Vec<u8>,
    reply: Option<Response>,
    continued: bool,
    delivered: bool,
}

struct State {
    shared: Arc<Mutex<Shared>>,
    clock_ns: Arc<AtomicU64>,
    memory: Option<Memory>,
    alloc: Option<TypedFunc<i32, i32>>,
    config: Vec<u8>,
    logs: Vec<String>,
    effective: u32,
    streams: HashMap<u32, Stream>,
    callouts: Vec<Callout>,
    next_token: u32,
    tick_ms: u32,
    call_response: Option<(Headers, Vec<u8>)>,
    random: u64,
    metric_names: HashMap<u32, String>,
    /// Host calls the module made (`proxy_*` imports; WASI excluded).
    calls: u64,
    /// The same, by import name.
    calls_by_name: std::collections::BTreeMap<&'static str, u64>,
}

impl State {
    /// Counts one host call to `name`.
    fn count(&mut self, name: &'static str) {
        self.calls += 1;
        *self.calls_by_name.entry(name).or_default() += 1;
    }
}

/// One VM (one simulated Envoy worker).
pub struct Vm {
    store: Store<State>,
    instance: Instance,
    root: u32,
    next_ctx: u32,
    host: Host,
}

fn mem(caller: &mut Caller<'_, State>) -> Option<Memory> {
    caller.data().memory
}

fn read(caller: &mut Caller<'_, State>, ptr: i32, len: i32) -> Vec<u8> {
    let Some(m) = mem(caller) else {
        return Vec::new();
    };
    let (p, l) = (ptr.cast_unsigned() as usize, len.cast_unsigned() as usize);
    m.data(&*caller)
        .get(p..p + l)
        .map(<[u8]>::to_vec)
        .unwrap_or_default()
}

fn write_u32(caller: &mut Caller<'_, State>, ptr: i32, v: u32) {
    if let Some(m) = mem(caller) {
        let p = ptr.cast_unsigned() as usize;
        if let Some(s) = m.data_mut(&mut *caller).get_mut(p..p + 4) {
            s.copy_from_slice(&v.to_le_bytes());
        }
    }
}

fn write_u64(caller: &mut Caller<'_, State>, ptr: i32, v: u64) {
    if let Some(m) = mem(caller) {
        let p = ptr.cast_unsigned() as usize;
        if let Some(s) = m.data_mut(&mut *caller).get_mut(p..p + 8) {
            s.copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// Copies `bytes` into guest memory (through the guest's allocator) and stores the
/// pointer and size at `ret_ptr` / `ret_size`.
fn give(caller: &mut Caller<'_, State>, bytes: &[u8], ret_ptr: i32, ret_size: i32) -> i32 {
    let Some(alloc) = caller.data().alloc.clone() else {
        return status::BAD_ARGUMENT;
    };
    let len = i32::try_from(bytes.len()).unwrap_or(i32::MAX);
    let Ok(p) = alloc.call(&mut *caller, len.max(1)) else {
        return status::BAD_ARGUMENT;
    };
    if let Some(m) = mem(caller) {
        let at = p.cast_unsigned() as usize;
        if let Some(s) = m.data_mut(&mut *caller).get_mut(at..at + bytes.len()) {
            s.copy_from_slice(bytes);
        }
    }
    write_u32(caller, ret_ptr, p.cast_unsigned());
    write_u32(caller, ret_size, len.cast_unsigned());
    status::OK
}

/// proxy-wasm map serialization (ABI 0.2.1).
pub fn serialize_map(h: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&u32::try_from(h.len()).unwrap_or(0).to_le_bytes());
    for (k, v) in h {
        out.extend_from_slice(&u32::try_from(k.len()).unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&u32::try_from(v.len()).unwrap_or(0).to_le_bytes());
    }
    for (k, v) in h {
        out.extend_from_slice(k.as_bytes());
        out.push(0);
        out.extend_from_slice(v);
        out.push(0);
    }
    out
}

#[allow(
    clippy::many_single_char_names,
    reason = "the ABI's layout reads best in its own terms"
)]
fn deserialize_map(b: &[u8]) -> Headers {
    let u32_at = |o: usize| -> usize {
        b.get(o..o + 4)
            .and_then(|s| s.try_into().ok())
            .map_or(0, |a: [u8; 4]| u32::from_le_bytes(a) as usize)
    };
    let n = u32_at(0);
    let mut out = Vec::with_capacity(n);
    let mut p = 4 + n * 8;
    for i in 0..n {
        let (kl, vl) = (u32_at(4 + i * 8), u32_at(8 + i * 8));
        let k = b.get(p..p + kl).unwrap_or_default();
        p += kl + 1;
        let v = b.get(p..p + vl).unwrap_or_default();
        p += vl + 1;
        out.push((String::from_utf8_lossy(k).to_ascii_lowercase(), v.to_vec()));
    }
    out
}

fn map_of(st: &mut State, kind: i32) -> Option<&mut Headers> {
    if kind == map::CALL_RESPONSE_HEADERS {
        return st.call_response.as_mut().map(|(h, _)| h);
    }
    let s = st.streams.get_mut(&st.effective)?;
    match kind {
        map::REQUEST_HEADERS => Some(&mut s.req_headers),
        map::RESPONSE_HEADERS => Some(&mut s.resp_headers),
        _ => None,
    }
}

#[allow(clippy::too_many_lines, reason = "one registration per hostcall")]
#[allow(
    clippy::many_single_char_names,
    reason = "k/v/c mirror the ABI's key/value/caller"
)]
fn link(linker: &mut Linker<State>) -> Result<()> {
    let e = |r: wasmtime::Result<&mut Linker<State>>| r.map(|_| ()).map_err(|e| anyhow!("{e:?}"));
    e(linker.func_wrap(
        "env",
        "proxy_log",
        |mut c: Caller<'_, State>, level: i32, p: i32, l: i32| {
            c.data_mut().count("proxy_log");
            let msg = String::from_utf8_lossy(&read(&mut c, p, l)).into_owned();
            c.data_mut().logs.push(format!("[{level}] {msg}"));
            status::OK
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_get_log_level",
        |mut c: Caller<'_, State>, ret: i32| {
            c.data_mut().count("proxy_get_log_level");
            write_u32(&mut c, ret, 1);
            status::OK
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_get_current_time_nanoseconds",
        |mut c: Caller<'_, State>, ret: i32| {
            c.data_mut().count("proxy_get_current_time_nanoseconds");
            let now = c.data().clock_ns.load(Ordering::SeqCst);
            write_u64(&mut c, ret, now);
            status::OK
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_set_tick_period_milliseconds",
        |mut c: Caller<'_, State>, ms: i32| {
            c.data_mut().count("proxy_set_tick_period_milliseconds");
            c.data_mut().tick_ms = ms.cast_unsigned();
            status::OK
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_get_buffer_bytes",
        |mut c: Caller<'_, State>, kind: i32, start: i32, max: i32, rp: i32, rs: i32| {
            c.data_mut().count("proxy_get_buffer_bytes");
            let st = c.data();
            let buf = match kind {
                buffer::PLUGIN_CONFIGURATION => Some(st.config.clone()),
                buffer::VM_CONFIGURATION => Some(Vec::new()),
                buffer::CALL_RESPONSE_BODY => st.call_response.as_ref().map(|(_, b)| b.clone()),
                buffer::REQUEST_BODY => st.streams.get(&st.effective).map(|s| s.req_body.clone()),
                buffer::RESPONSE_BODY => st.streams.get(&st.effective).map(|s| s.resp_body.clone()),
                _ => None,
            };
            let Some(buf) = buf else {
                return status::NOT_FOUND;
            };
            let start = start.cast_unsigned() as usize;
            let max = max.cast_unsigned() as usize;
            // The SDK asks for usize::MAX; Envoy clamps, and so do we — but a read
            // larger than the buffer from a non-zero start is refused, as in Envoy.
            if start > buf.len() {
                return status::BAD_ARGUMENT;
            }
            let end = buf.len().min(start.saturating_add(max));
            let slice = buf.get(start..end).unwrap_or_default().to_vec();
            give(&mut c, &slice, rp, rs)
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_set_buffer_bytes",
        |mut c: Caller<'_, State>, kind: i32, _start: i32, _size: i32, p: i32, l: i32| {
            c.data_mut().count("proxy_set_buffer_bytes");
            let bytes = read(&mut c, p, l);
            let st = c.data_mut();
            let id = st.effective;
            if let Some(s) = st.streams.get_mut(&id) {
                match kind {
                    buffer::REQUEST_BODY => s.req_body = bytes,
                    buffer::RESPONSE_BODY => s.resp_body = bytes,
                    _ => return status::BAD_ARGUMENT,
                }
            }
            status::OK
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_get_header_map_pairs",
        |mut c: Caller<'_, State>, kind: i32, rp: i32, rs: i32| {
            c.data_mut().count("proxy_get_header_map_pairs");
            let Some(h) = map_of(c.data_mut(), kind).map(|h| serialize_map(h)) else {
                return status::NOT_FOUND;
            };
            give(&mut c, &h, rp, rs)
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_set_header_map_pairs",
        |mut c: Caller<'_, State>, kind: i32, p: i32, l: i32| {
            c.data_mut().count("proxy_set_header_map_pairs");
            let h = deserialize_map(&read(&mut c, p, l));
            if let Some(m) = map_of(c.data_mut(), kind) {
                *m = h;
            }
            status::OK
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_get_header_map_value",
        |mut c: Caller<'_, State>, kind: i32, kp: i32, kl: i32, rp: i32, rs: i32| {
            c.data_mut().count("proxy_get_header_map_value");
            let k = String::from_utf8_lossy(&read(&mut c, kp, kl)).to_ascii_lowercase();
            let v = map_of(c.data_mut(), kind)
                .and_then(|m| m.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()));
            match v {
                Some(v) => give(&mut c, &v, rp, rs),
                None => status::NOT_FOUND,
            }
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_replace_header_map_value",
        |mut c: Caller<'_, State>, kind: i32, kp: i32, kl: i32, vp: i32, vl: i32| {
            c.data_mut().count("proxy_replace_header_map_value");
            let k = String::from_utf8_lossy(&read(&mut c, kp, kl)).to_ascii_lowercase();
            let v = read(&mut c, vp, vl);
            if let Some(m) = map_of(c.data_mut(), kind) {
                m.retain(|(n, _)| *n != k);
                m.push((k, v));
            }
            status::OK
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_add_header_map_value",
        |mut c: Caller<'_, State>, kind: i32, kp: i32, kl: i32, vp: i32, vl: i32| {
            c.data_mut().count("proxy_add_header_map_value");
            let k = String::from_utf8_lossy(&read(&mut c, kp, kl)).to_ascii_lowercase();
            let v = read(&mut c, vp, vl);
            if let Some(m) = map_of(c.data_mut(), kind) {
                m.push((k, v));
            }
            status::OK
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_remove_header_map_value",
        |mut c: Caller<'_, State>, kind: i32, kp: i32, kl: i32| {
            c.data_mut().count("proxy_remove_header_map_value");
            let k = String::from_utf8_lossy(&read(&mut c, kp, kl)).to_ascii_lowercase();
            if let Some(m) = map_of(c.data_mut(), kind) {
                m.retain(|(n, _)| *n != k);
            }
            status::OK
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_get_shared_data",
        |mut c: Caller<'_, State>, kp: i32, kl: i32, rp: i32, rs: i32, rc: i32| {
            c.data_mut().count("proxy_get_shared_data");
            let k = String::from_utf8_lossy(&read(&mut c, kp, kl)).into_owned();
            let v = lock(&c.data().shared).data.get(&k).cloned();
            let Some((v, cas)) = v else {
                return status::NOT_FOUND;
            };
            write_u32(&mut c, rc, cas);
            give(&mut c, &v, rp, rs)
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_set_shared_data",
        |mut c: Caller<'_, State>, kp: i32, kl: i32, vp: i32, vl: i32, cas: i32| {
            c.data_mut().count("proxy_set_shared_data");
            let k = String::from_utf8_lossy(&read(&mut c, kp, kl)).into_owned();
            let v = read(&mut c, vp, vl);
            let shared = Arc::clone(&c.data().shared);
            let mut s = lock(&shared);
            let cas = cas.cast_unsigned();
            // Envoy (proxy-wasm-cpp-host `SharedData::set`): CAS 0 = unconditional;
            // otherwise the stored token must match, and a missing key is created
            // whatever the token.
            if cas != 0 && s.data.get(&k).is_some_and(|(_, c)| *c != cas) {
                return status::CAS_MISMATCH;
            }
            s.next_cas = s.next_cas.wrapping_add(1).max(1);
            let n = s.next_cas;
            s.data.insert(k, (v, n));
            status::OK
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_send_local_response",
        |mut c: Caller<'_, State>,
         code: i32,
         _dp: i32,
         _dl: i32,
         bp: i32,
         bl: i32,
         hp: i32,
         hl: i32,
         _grpc: i32| {
            c.data_mut().count("proxy_send_local_response");
            let body = read(&mut c, bp, bl);
            let headers = deserialize_map(&read(&mut c, hp, hl));
            let st = c.data_mut();
            let id = st.effective;
            match st.streams.get_mut(&id) {
                Some(s) => {
                    s.reply = Some(Response {
                        status: u16::try_from(code).unwrap_or(0),
                        headers,
                        body,
                    });
                    status::OK
                }
                None => status::NOT_FOUND,
            }
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_http_call",
        |mut c: Caller<'_, State>,
         up: i32,
         ul: i32,
         hp: i32,
         hl: i32,
         _bp: i32,
         _bl: i32,
         _tp: i32,
         _tl: i32,
         timeout: i32,
         rt: i32| {
            c.data_mut().count("proxy_http_call");
            let cluster = String::from_utf8_lossy(&read(&mut c, up, ul)).into_owned();
            let headers = deserialize_map(&read(&mut c, hp, hl));
            if cluster.is_empty() {
                return status::BAD_ARGUMENT;
            }
            let st = c.data_mut();
            st.next_token += 1;
            let token = st.next_token;
            let context = st.effective;
            st.callouts.push(Callout {
                token,
                context,
                cluster,
                headers,
                timeout_ms: timeout.cast_unsigned(),
            });
            write_u32(&mut c, rt, token);
            status::OK
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_set_effective_context",
        |mut c: Caller<'_, State>, id: i32| {
            c.data_mut().count("proxy_set_effective_context");
            let id = id.cast_unsigned();
            let st = c.data_mut();
            if id == ROOT_ID || st.streams.contains_key(&id) {
                st.effective = id;
                status::OK
            } else {
                status::BAD_ARGUMENT
            }
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_continue_stream",
        |mut c: Caller<'_, State>, _kind: i32| {
            c.data_mut().count("proxy_continue_stream");
            let st = c.data_mut();
            let id = st.effective;
            if let Some(s) = st.streams.get_mut(&id) {
                s.continued = true;
            }
            status::OK
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_define_metric",
        |mut c: Caller<'_, State>, _kind: i32, np: i32, nl: i32, ret: i32| {
            c.data_mut().count("proxy_define_metric");
            let name = String::from_utf8_lossy(&read(&mut c, np, nl)).into_owned();
            let shared = Arc::clone(&c.data().shared);
            let id = {
                let mut s = lock(&shared);
                s.metrics.entry(name.clone()).or_insert(0);
                let id = if let Some(i) = s.metric_ids.iter().position(|n| *n == name) {
                    i
                } else {
                    s.metric_ids.push(name.clone());
                    s.metric_ids.len() - 1
                };
                u32::try_from(id + 1).unwrap_or(0)
            };
            c.data_mut().metric_names.insert(id, name);
            write_u32(&mut c, ret, id);
            status::OK
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_increment_metric",
        |mut c: Caller<'_, State>, id: i32, by: i64| {
            c.data_mut().count("proxy_increment_metric");
            if let Some(n) = c.data().metric_names.get(&id.cast_unsigned()) {
                *lock(&c.data().shared).metrics.entry(n.clone()).or_insert(0) += by;
            }
            status::OK
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_record_metric",
        |mut c: Caller<'_, State>, id: i32, v: i64| {
            c.data_mut().count("proxy_record_metric");
            if let Some(n) = c.data().metric_names.get(&id.cast_unsigned()) {
                lock(&c.data().shared).metrics.insert(n.clone(), v);
            }
            status::OK
        },
    ))?;
    e(linker.func_wrap(
        "env",
        "proxy_get_property",
        |mut c: Caller<'_, State>, _p: i32, _l: i32, _rp: i32, _rs: i32| {
            c.data_mut().count("proxy_get_property");
            status::NOT_FOUND
        },
    ))?;
    // WASI: what Rust's std calls (HashMap seeds, panic messages, aborts).
    e(linker.func_wrap(
        "wasi_snapshot_preview1",
        "random_get",
        |mut c: Caller<'_, State>, p: i32, l: i32| {
            c.data_mut().count("proxy_get_property");
            let mut x = c.data().random;
            let mut bytes = Vec::with_capacity(l.cast_unsigned() as usize);
            for _ in 0..l {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                bytes.push(x.to_le_bytes()[0]);
            }
            c.data_mut().random = x;
            if let Some(m) = mem(&mut c) {
                let at = p.cast_unsigned() as usize;
                if let Some(s) = m.data_mut(&mut c).get_mut(at..at + bytes.len()) {
                    s.copy_from_slice(&bytes);
                }
            }
            0
        },
    ))?;
    e(linker.func_wrap(
        "wasi_snapshot_preview1",
        "fd_write",
        |mut c: Caller<'_, State>, _fd: i32, iovs: i32, n: i32, ret: i32| {
            let mut total = 0u32;
            let mut text = Vec::new();
            for i in 0..n {
                let io = read(&mut c, iovs + i * 8, 8);
                let p = i32::from_le_bytes(io[0..4].try_into().unwrap_or_default());
                let l = i32::from_le_bytes(io[4..8].try_into().unwrap_or_default());
                text.extend(read(&mut c, p, l));
                total += l.cast_unsigned();
            }
            c.data_mut()
                .logs
                .push(format!("[stdio] {}", String::from_utf8_lossy(&text)));
            write_u32(&mut c, ret, total);
            0
        },
    ))?;
    e(linker.func_wrap(
        "wasi_snapshot_preview1",
        "clock_time_get",
        |mut c: Caller<'_, State>, _id: i32, _prec: i64, ret: i32| {
            let now = c.data().clock_ns.load(Ordering::SeqCst);
            write_u64(&mut c, ret, now);
            0
        },
    ))?;
    for name in ["environ_sizes_get", "args_sizes_get"] {
        e(linker.func_wrap(
            "wasi_snapshot_preview1",
            name,
            |mut c: Caller<'_, State>, a: i32, b: i32| {
                write_u32(&mut c, a, 0);
                write_u32(&mut c, b, 0);
                0
            },
        ))?;
    }
    for name in ["environ_get", "args_get"] {
        e(linker.func_wrap(
            "wasi_snapshot_preview1",
            name,
            |_c: Caller<'_, State>, _a: i32, _b: i32| 0,
        ))?;
    }
    e(linker.func_wrap(
        "wasi_snapshot_preview1",
        "proc_exit",
        |_c: Caller<'_, State>, code: i32| -> wasmtime::Result<()> {
            Err(wasmtime::Error::msg(format!("proc_exit({code})")))
        },
    ))?;
    Ok(())
}

impl Vm {
    fn start(host: &Host, config: &[u8]) -> Result<Self> {
        let mut linker = Linker::new(&host.engine);
        link(&mut linker)?;
        linker
            .define_unknown_imports_as_traps(&host.module)
            .map_err(|e| anyhow!("{e:?}"))?;
        let state = State {
            shared: Arc::clone(&host.shared),
            clock_ns: Arc::clone(&host.clock_ns),
            memory: None,
            alloc: None,
            config: config.to_vec(),
            logs: Vec::new(),
            effective: 0,
            streams: HashMap::new(),
            callouts: Vec::new(),
            next_token: 0,
            tick_ms: 0,
            call_response: None,
            random: 0x2545_f491_4f6c_dd1d,
            metric_names: HashMap::new(),
            calls: 0,
            calls_by_name: std::collections::BTreeMap::new(),
        };
        let mut store = Store::new(&host.engine, state);
        let instance = linker
            .instantiate(&mut store, &host.module)
            .map_err(|e| anyhow!("{e:?}"))?;
        let Some(Extern::Memory(memory)) = instance.get_export(&mut store, "memory") else {
            bail!("the module exports no memory")
        };
        let alloc = instance
            .get_typed_func::<i32, i32>(&mut store, "proxy_on_memory_allocate")
            .or_else(|_| instance.get_typed_func::<i32, i32>(&mut store, "malloc"))
            .map_err(|e| anyhow!("{e:?}"))?;
        store.data_mut().memory = Some(memory);
        store.data_mut().alloc = Some(alloc);
        let mut vm = Self {
            store,
            instance,
            root: ROOT_ID,
            next_ctx: ROOT_ID + 1,
            host: host.clone(),
        };
        vm.call0("_initialize")?;
        let root = vm.root;
        vm.call("proxy_on_context_create", (root, 0))?;
        let ok = vm.call_ret("proxy_on_vm_start", (root, 0))?;
        if ok == 0 {
            bail!("on_vm_start returned false:\n{}", vm.logs().join("\n"));
        }
        let size = i32::try_from(config.len()).unwrap_or(i32::MAX);
        let ok = vm.call_ret("proxy_on_configure", (root, size))?;
        if ok == 0 {
            bail!("on_configure returned false:\n{}", vm.logs().join("\n"));
        }
        Ok(vm)
    }

    /// A plugin configuration update, as Envoy applies one to a running VM (same `vm_id`
    /// and code): a new root context in this VM, started and configured with `config`;
    /// later streams belong to it. Returns what `on_configure` answered.
    ///
    /// # Errors
    /// A trap in the filter, or `on_vm_start` returning false.
    pub fn reconfigure(&mut self, config: &str) -> Result<bool> {
        let root = self.next_ctx;
        self.next_ctx += 1;
        self.store.data_mut().config = config.as_bytes().to_vec();
        self.call("proxy_on_context_create", (root, 0))?;
        if self.call_ret("proxy_on_vm_start", (root, 0))? == 0 {
            bail!("on_vm_start returned false:\n{}", self.logs().join("\n"));
        }
        self.root = root;
        let size = i32::try_from(config.len()).unwrap_or(i32::MAX);
        Ok(self.call_ret("proxy_on_configure", (root, size))? != 0)
    }

    fn call0(&mut self, name: &str) -> Result<()> {
        let f = self
            .instance
            .get_typed_func::<(), ()>(&mut self.store, name)
            .map_err(|e| anyhow!("{name}: {e:?}"))?;
        f.call(&mut self.store, ())
            .map_err(|e| anyhow!("{name} trapped: {e:?}\n{}", self.logs().join("\n")))
    }

    fn call<P: wasmtime::WasmParams>(&mut self, name: &str, p: P) -> Result<()> {
        let f = self
            .instance
            .get_typed_func::<P, ()>(&mut self.store, name)
            .map_err(|e| anyhow!("{name}: {e:?}"))?;
        f.call(&mut self.store, p)
            .map_err(|e| anyhow!("{name} trapped: {e:?}\n{}", self.logs().join("\n")))
    }

    fn call_ret<P: wasmtime::WasmParams>(&mut self, name: &str, p: P) -> Result<i32> {
        let f = self
            .instance
            .get_typed_func::<P, i32>(&mut self.store, name)
            .map_err(|e| anyhow!("{name}: {e:?}"))?;
        f.call(&mut self.store, p)
            .map_err(|e| anyhow!("{name} trapped: {e:?}\n{}", self.logs().join("\n")))
    }

    /// Host calls (`proxy_*` imports) this VM's module has made so far: the figure a
    /// hit-path regression shows in without Envoy.
    pub fn host_calls(&self) -> u64 {
        self.store.data().calls
    }

    /// [`Vm::host_calls`] by import name (`proxy_get_shared_data` → count).
    pub fn host_calls_by_name(&self) -> std::collections::BTreeMap<&'static str, u64> {
        self.store.data().calls_by_name.clone()
    }

    /// Everything the VM logged (proxy_log and stdio).
    pub fn logs(&self) -> Vec<String> {
        self.store.data().logs.clone()
    }

    /// The tick period the filter asked for, ms.
    pub fn tick_period_ms(&self) -> u32 {
        self.store.data().tick_ms
    }

    /// Fires the root context's tick.
    ///
    /// # Errors
    /// A trap in the filter.
    pub fn tick(&mut self) -> Result<()> {
        self.store.data_mut().effective = self.root;
        let root = self.root;
        self.call("proxy_on_tick", (root,))
    }

    /// Starts a request stream; returns its id and where it stands.
    ///
    /// `headers` must include `:method`, `:path`, `:authority` (`:scheme` defaults to http).
    ///
    /// # Errors
    /// A trap in the filter.
    pub fn request(&mut self, headers: Headers, body: Option<&[u8]>) -> Result<(u32, Outcome)> {
        let id = self.next_ctx;
        self.next_ctx += 1;
        let mut h = headers;
        if !h.iter().any(|(n, _)| n == ":scheme") {
            h.push((":scheme".into(), b"http".to_vec()));
        }
        let n = i32::try_from(h.len()).unwrap_or(0);
        self.store.data_mut().streams.insert(
            id,
            Stream {
                req_headers: h,
                req_body: body.map(<[u8]>::to_vec).unwrap_or_default(),
                ..Stream::default()
            },
        );
        let root = self.root;
        self.store.data_mut().effective = id;
        self.call("proxy_on_context_create", (id, root))?;
        self.store.data_mut().effective = id;
        let eos = i32::from(body.is_none());
        let action = self.call_ret("proxy_on_request_headers", (id, n, eos))?;
        if let Some(b) = body {
            // The whole body arrives at once, with end of stream.
            let len = i32::try_from(b.len()).unwrap_or(0);
            self.store.data_mut().effective = id;
            self.call_ret("proxy_on_request_body", (id, len, 1))?;
        }
        let o = self.outcome(id, action == 0);
        Ok((id, o))
    }

    fn outcome(&mut self, id: u32, continued_now: bool) -> Outcome {
        let Some(s) = self.store.data_mut().streams.get_mut(&id) else {
            return Outcome::Paused;
        };
        if let Some(r) = s.reply.take() {
            s.delivered = true;
            return Outcome::Reply(r);
        }
        if (continued_now || s.continued) && !s.delivered {
            s.continued = false;
            s.delivered = true;
            return Outcome::Upstream(s.req_headers.clone());
        }
        Outcome::Paused
    }

    /// A paused stream's state after other events (tick, callouts) may have resolved it.
    pub fn poll(&mut self, id: u32) -> Outcome {
        self.outcome(id, false)
    }

    /// Runs the upstream (router) response of a forwarded stream through the filter;
    /// returns what the client gets.
    ///
    /// # Errors
    /// A trap in the filter.
    pub fn upstream_response(&mut self, id: u32, resp: &Response) -> Result<Response> {
        let mut h = resp.headers.clone();
        h.insert(0, (":status".into(), resp.status.to_string().into_bytes()));
        let n = i32::try_from(h.len()).unwrap_or(0);
        if let Some(s) = self.store.data_mut().streams.get_mut(&id) {
            s.resp_headers = h;
            s.resp_body.clone_from(&resp.body);
        }
        self.store.data_mut().effective = id;
        self.call_ret("proxy_on_response_headers", (id, n, 0))?;
        let len = i32::try_from(resp.body.len()).unwrap_or(0);
        self.store.data_mut().effective = id;
        self.call_ret("proxy_on_response_body", (id, len, 1))?;
        let s = self
            .store
            .data_mut()
            .streams
            .get_mut(&id)
            .ok_or_else(|| anyhow!("stream gone"))?;
        if let Some(r) = s.reply.take() {
            return Ok(r);
        }
        let mut headers = s.resp_headers.clone();
        let status = headers
            .iter()
            .find(|(n, _)| n == ":status")
            .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse().ok())
            .unwrap_or(resp.status);
        headers.retain(|(n, _)| !n.starts_with(':'));
        Ok(Response {
            status,
            headers,
            body: s.resp_body.clone(),
        })
    }

    /// Ends a stream (`on_done`, `on_log`, `on_delete`).
    ///
    /// # Errors
    /// A trap in the filter.
    pub fn finish(&mut self, id: u32) -> Result<()> {
        self.store.data_mut().effective = id;
        self.call_ret("proxy_on_done", (id,))?;
        self.store.data_mut().effective = id;
        self.call("proxy_on_log", (id,))?;
        self.store.data_mut().effective = id;
        self.call("proxy_on_delete", (id,))?;
        self.store.data_mut().streams.remove(&id);
        Ok(())
    }

    /// Callouts not answered yet (oldest first).
    pub fn callouts(&self) -> Vec<Callout> {
        self.store.data().callouts.clone()
    }

    /// Answers callout `token` with `resp` (status 0 = failure: no headers, as Envoy
    /// reports a reset or timeout). Like Envoy's router, adds
    /// `x-envoy-upstream-service-time` to an answer from the origin (a status); use
    /// [`Self::answer_local`] for a reply Envoy makes itself.
    ///
    /// # Errors
    /// Unknown token, or a trap in the filter.
    pub fn answer(&mut self, token: u32, resp: &Response) -> Result<()> {
        let mut resp = resp.clone();
        if resp.status != 0 {
            resp.headers
                .push(("x-envoy-upstream-service-time".into(), b"1".to_vec()));
        }
        self.answer_local(token, &resp)
    }

    /// Answers callout `token` with `resp` as given: Envoy's own reply to a callout it
    /// could not complete (its async client's `503` "upstream connect error…", which
    /// carries no `x-envoy-upstream-service-time`).
    ///
    /// # Errors
    /// Unknown token, or a trap in the filter.
    pub fn answer_local(&mut self, token: u32, resp: &Response) -> Result<()> {
        let st = self.store.data_mut();
        let i = st
            .callouts
            .iter()
            .position(|c| c.token == token)
            .ok_or_else(|| anyhow!("no callout {token}"))?;
        let call = st.callouts.remove(i);
        let mut h = resp.headers.clone();
        if resp.status != 0 {
            h.insert(0, (":status".into(), resp.status.to_string().into_bytes()));
        }
        let (nh, nb) = (
            i32::try_from(h.len()).unwrap_or(0),
            i32::try_from(resp.body.len()).unwrap_or(0),
        );
        st.call_response = Some((h, resp.body.clone()));
        st.effective = call.context;
        let tok = i32::try_from(token).unwrap_or(0);
        let r = self.call(
            "proxy_on_http_call_response",
            (call.context, tok, nh, nb, 0),
        );
        self.store.data_mut().call_response = None;
        r
    }

    /// The host this VM belongs to.
    pub fn host(&self) -> &Host {
        &self.host
    }
}

/// Answers every pending callout of `vm` with `origin` and drives forwarded streams
/// through it until stream `id` has a final response.
///
/// # Errors
/// A trap, or a stream that never resolves within 10,000 steps.
pub fn drive(
    vm: &mut Vm,
    id: u32,
    first: Outcome,
    origin: &mut dyn FnMut(&Headers) -> Response,
) -> Result<Response> {
    let mut o = first;
    for _ in 0..10_000 {
        match o {
            Outcome::Reply(r) => return Ok(r),
            Outcome::Upstream(h) => {
                let resp = origin(&h);
                return vm.upstream_response(id, &resp);
            }
            Outcome::Paused => {
                let calls = vm.callouts();
                if calls.is_empty() {
                    vm.host().advance_ms(u64::from(vm.tick_period_ms().max(1)));
                    vm.tick()?;
                } else {
                    for c in calls {
                        let r = origin(&c.headers);
                        vm.answer(c.token, &r)?;
                    }
                }
                o = vm.poll(id);
            }
        }
    }
    bail!("stream {id} did not resolve")
}

/// Builds request headers: method, authority, path, then extra pairs.
pub fn req(method: &str, host: &str, path: &str, extra: &[(&str, &str)]) -> Headers {
    let mut h: Headers = vec![
        (":method".into(), method.as_bytes().to_vec()),
        (":authority".into(), host.as_bytes().to_vec()),
        (":path".into(), path.as_bytes().to_vec()),
    ];
    for (k, v) in extra {
        h.push((k.to_ascii_lowercase(), v.as_bytes().to_vec()));
    }
    h
}
