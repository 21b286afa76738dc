//! The port `cachet_compute::host::Host` on the `fastly` crate: each method one Fastly host call (or a short builder chain), bytes in and out.

use std::cell::{Cell, OnceCell};
use std::io::{Read, Write};
use std::rc::Rc;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use cachet_compute::host::{
    BackendSpec, Entry, Fields, Host, OriginRequest, OriginResponse, ShieldPos,
};
use cachet_policy::banstore::{KvItem, KvWriteError, Precondition};
use fastly::backend::Backend;
use fastly::cache::core::{self, CacheError, CacheKey, Found, Transaction};
use fastly::http::{HeaderName, HeaderValue, Method, Url};
use fastly::kv_store::{InsertMode, KVStore, KVStoreError};
use fastly::{Body, Request};

/// Most bytes a body read reserves up front from a declared length (larger bodies grow
/// the buffer as they are read).
const READ_AHEAD_MAX: usize = 16 << 20;

/// A core-cache transaction with what its lookup state says, asked of the platform once:
/// each `Transaction::found` / `must_insert_or_update` is a `get_state` host call, and the
/// flow asks several times per request (issue 29). The state does not change while the
/// transaction is held, except that cancelling ends the obligation.
pub(crate) struct Tx {
    inner: Transaction,
    found: OnceCell<Option<Rc<Found>>>,
    obligated: Cell<Option<bool>>,
}

/// Fastly Compute, as the running wasm instance sees it.
pub(crate) struct Fastly;

/// Every header line of a message as (name, value bytes), in order.
pub(crate) fn fields<'m>(
    names: impl Iterator<Item = &'m HeaderName>,
    values: impl Fn(&HeaderName) -> Vec<&'m HeaderValue>,
) -> Fields {
    let mut out = Fields::new();
    for n in names {
        for v in values(n) {
            out.push((n.as_str().to_owned(), v.as_bytes().to_vec()));
        }
    }
    out
}

/// Header names for `vary_by` (names that are not valid are left out).
fn names(fields: &[String]) -> Vec<HeaderName> {
    fields
        .iter()
        .filter_map(|f| HeaderName::from_bytes(f.as_bytes()).ok())
        .collect()
}

/// Runs an insert builder (`core::InsertBuilder` or `TransactionInsertBuilder`, same
/// options) with `entry` and writes `body`.
macro_rules! insert {
    ($builder:expr, $entry:expr, $body:expr) => {{
        let (e, body): (&Entry<'_>, &[u8]) = ($entry, $body);
        let mut b = $builder;
        let vary = names(e.vary_by);
        if !vary.is_empty() {
            b = b.vary_by(&vary);
        }
        if !e.swr.is_zero() {
            b = b.stale_while_revalidate(e.swr);
        }
        if !e.age.is_zero() {
            b = b.initial_age(e.age);
        }
        if !e.surrogate_keys.is_empty() {
            b = b.surrogate_keys(e.surrogate_keys.iter().map(String::as_str));
        }
        let mut w = b
            .user_metadata(bytes::Bytes::copy_from_slice(e.user_metadata))
            .known_length(body.len() as u64)
            .execute()
            .map_err(|e| e.to_string())?;
        w.write_all(body).map_err(|e| e.to_string())?;
        w.finish().map_err(|e| e.to_string())
    }};
}

impl Host for Fastly {
    type Tx = Tx;
    type Found = Rc<Found>;
    type Body = Body;
    type Backend = Backend;
    type Kv = KVStore;

    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn monotonic(&self) -> Duration {
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed()
    }

    /// Eight bytes of WASI `random_get` per draw (`getrandom`), never a seed kept in the
    /// memory image: a pre-initialized wasm (Wizer) would otherwise start every instance
    /// from the same seed, and correlated draws defeat XFetch's spread. A failed draw
    /// gives 0 (the draw that always refreshes early and always verifies the workspace).
    fn random_u64(&self) -> u64 {
        let mut b = [0u8; 8];
        match getrandom::getrandom(&mut b) {
            Ok(()) => u64::from_le_bytes(b),
            Err(_) => 0,
        }
    }

    fn sleep(&self, d: Duration) {
        std::thread::sleep(d);
    }

    fn tx_lookup(
        &self,
        key: &[u8],
        headers: &Fields,
        ranged: bool,
        wait: Option<Duration>,
    ) -> Result<Option<Tx>, String> {
        let mut lookup = Transaction::lookup(CacheKey::copy_from_slice(key));
        for (n, v) in headers {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(n.as_bytes()),
                HeaderValue::from_bytes(v),
            ) {
                lookup = lookup.header(n, v);
            }
        }
        if ranged {
            lookup = lookup.always_use_requested_range();
        }
        if let Some(wait) = wait {
            lookup = lookup.timeout(wait);
        }
        match lookup.execute() {
            Ok(inner) => Ok(Some(Tx {
                inner,
                found: OnceCell::new(),
                obligated: Cell::new(None),
            })),
            Err(CacheError::Timeout) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    fn tx_found(&self, tx: &Tx) -> Option<Rc<Found>> {
        tx.found
            .get_or_init(|| tx.inner.found().map(Rc::new))
            .clone()
    }

    fn tx_obligated(&self, tx: &Tx) -> bool {
        if let Some(o) = tx.obligated.get() {
            return o;
        }
        let o = tx.inner.must_insert_or_update();
        tx.obligated.set(Some(o));
        o
    }

    fn tx_insert(&self, tx: Tx, entry: &Entry<'_>, body: &[u8]) -> Result<(), String> {
        insert!(tx.inner.insert(entry.ttl), entry, body)
    }

    fn tx_update(&self, tx: Tx, e: &Entry<'_>) -> Result<(), String> {
        let mut update = tx.inner.update(e.ttl).age(e.age);
        let vary = names(e.vary_by);
        if !vary.is_empty() {
            update = update.vary_by(&vary);
        }
        update
            .stale_while_revalidate(e.swr)
            .surrogate_keys(e.surrogate_keys.iter().map(String::as_str))
            .user_metadata(bytes::Bytes::copy_from_slice(e.user_metadata))
            .execute()
            .map_err(|e| e.to_string())
    }

    fn tx_cancel(&self, tx: &Tx) {
        let _ = tx.inner.cancel_insert_or_update();
        tx.obligated.set(Some(false));
    }

    fn lookup(&self, key: &[u8]) -> Option<Rc<Found>> {
        core::lookup(CacheKey::copy_from_slice(key))
            .execute()
            .ok()?
            .map(Rc::new)
    }

    fn insert(&self, key: &[u8], entry: &Entry<'_>, body: &[u8]) -> Result<(), String> {
        insert!(
            core::insert(CacheKey::copy_from_slice(key), entry.ttl),
            entry,
            body
        )
    }

    fn found_metadata(&self, found: &Rc<Found>) -> Vec<u8> {
        found.user_metadata().to_vec()
    }

    fn found_stale(&self, found: &Rc<Found>) -> bool {
        found.is_stale()
    }

    /// Reads into a buffer sized for the whole body up front (the range's length, else the
    /// entry's known length): two reads of the body handle (the bytes, then end of
    /// stream) where `Body::into_bytes` made nine for a 1.3 KB object, and a failed read
    /// is an error, where `into_bytes` panics.
    fn found_body(&self, found: &Rc<Found>, range: Option<(u64, u64)>) -> Result<Vec<u8>, String> {
        let (body, len) = match range {
            None => (found.to_stream(), found.known_length()),
            Some((from, to)) => (
                found.to_stream_from_range(Some(from), Some(to)),
                Some(to.saturating_sub(from).saturating_add(1)),
            ),
        };
        let cap = len
            .and_then(|n| usize::try_from(n).ok())
            .map_or(0, |n| n.min(READ_AHEAD_MAX).saturating_add(1));
        let mut out = Vec::with_capacity(cap);
        body.map_err(|e| e.to_string())?
            .into_handle()
            .read_to_end(&mut out)
            .map_err(|e| e.to_string())?;
        Ok(out)
    }

    fn purge(&self, key: &str, soft: bool) -> Result<(), String> {
        let r = if soft {
            fastly::http::purge::soft_purge_surrogate_key(key)
        } else {
            fastly::http::purge::purge_surrogate_key(key)
        };
        r.map_err(|e| e.to_string())
    }

    fn kv_open(&self, name: &str) -> Result<Option<KVStore>, String> {
        KVStore::open(name).map_err(|e| e.to_string())
    }

    fn kv_lookup(
        &self,
        kv: &KVStore,
        key: &str,
        max: Option<usize>,
    ) -> Result<Option<KvItem>, String> {
        let mut item = match kv.lookup(key) {
            Ok(item) => item,
            Err(KVStoreError::ItemNotFound) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        let generation = item.current_generation();
        let metadata = item.metadata().map(|m| m.to_vec());
        let body = match max {
            None => item.take_body_bytes(),
            Some(max) => {
                let mut head = Vec::new();
                let limit = u64::try_from(max).unwrap_or(u64::MAX);
                item.take_body()
                    .take(limit)
                    .read_to_end(&mut head)
                    .map_err(|e| e.to_string())?;
                head
            }
        };
        Ok(Some(KvItem {
            body,
            generation,
            metadata,
        }))
    }

    fn kv_insert(
        &self,
        kv: &KVStore,
        key: &str,
        body: &[u8],
        metadata: Option<&str>,
        when: Precondition,
    ) -> Result<(), KvWriteError> {
        let mut insert = kv.build_insert();
        if let Some(m) = metadata {
            insert = insert.metadata(m);
        }
        insert = match when {
            Precondition::None => insert,
            Precondition::Absent => insert.mode(InsertMode::Add),
            Precondition::Generation(g) => insert.if_generation_match(g),
        };
        match insert.execute(key, body.to_vec()) {
            Ok(()) => Ok(()),
            Err(KVStoreError::ItemPreconditionFailed) => Err(KvWriteError::Conflict),
            Err(e) => Err(KvWriteError::Failed(e.to_string())),
        }
    }

    fn backend(&self, name: &str) -> Result<Backend, String> {
        Backend::from_name(name).map_err(|e| e.to_string())
    }

    fn register_backend(&self, spec: &BackendSpec<'_>) -> Result<Backend, String> {
        let cfg = spec.config;
        let mut b = Backend::builder(spec.name, spec.target)
            .connect_timeout(cfg.connect_timeout.0)
            .first_byte_timeout(cfg.first_byte_timeout.0)
            .between_bytes_timeout(cfg.between_bytes_timeout.0)
            .enable_pooling(cfg.pooling)
            .http_keepalive_time(cfg.keepalive.0);
        if cfg.max_connections > 0 {
            b = b.max_connections(cfg.max_connections);
        }
        if !cfg.override_host.is_empty() {
            b = b.override_host(&cfg.override_host);
        }
        if let Some(host) = spec.tls_host {
            b = b.enable_ssl().sni_hostname(host).check_certificate(host);
        }
        b.finish().map_err(|e| e.to_string())
    }

    fn shield(
        &self,
        name: &str,
        first_byte: Duration,
        between_bytes: Duration,
        encrypted: bool,
    ) -> Result<ShieldPos<Backend>, String> {
        let s = fastly::shielding::Shield::new(name).map_err(|e| format!("{e:?}"))?;
        if s.running_on() {
            return Ok(ShieldPos::RunningOn);
        }
        let s = s
            .with_first_byte_timeout(first_byte)
            .with_between_bytes_timeout(between_bytes);
        let be = if encrypted {
            s.encrypted_backend()
        } else {
            s.unencrypted_backend()
        };
        Ok(ShieldPos::Backend(be.map_err(|e| format!("{e:?}"))))
    }

    fn send(&self, be: &Backend, r: OriginRequest<Body>) -> Result<OriginResponse<Body>, String> {
        let method = Method::from_bytes(r.method.as_bytes()).map_err(|e| e.to_string())?;
        let url = Url::parse(&r.url).map_err(|e| e.to_string())?;
        let mut req = Request::new(method, url);
        for (n, v) in &r.headers {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(n.as_bytes()),
                HeaderValue::from_bytes(v),
            ) {
                req.append_header(n, v);
            }
        }
        req.set_path(&r.path);
        if r.query.is_empty() {
            req.remove_query();
        } else {
            req.set_query_str(&r.query);
        }
        if let Some(b) = r.body {
            req.set_body(b);
        }
        let mut resp = req
            .send(be.clone())
            .map_err(|e| e.root_cause().to_string())?;
        Ok(OriginResponse {
            status: resp.get_status().as_u16(),
            headers: fields(resp.get_header_names(), |n| {
                resp.get_header_all(n).collect()
            }),
            body: resp.take_body(),
        })
    }

    fn body_read(&self, body: &mut Body, limit: u64) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        body.take(limit).read_to_end(&mut out)?;
        Ok(out)
    }

    fn body_from(&self, bytes: Vec<u8>) -> Body {
        Body::from(bytes)
    }

    fn body_append(&self, body: &mut Body, rest: Body) {
        body.append(rest);
    }

    fn secret(&self, store: &str, name: &str) -> Option<Vec<u8>> {
        let store = fastly::secret_store::SecretStore::open(store).ok()?;
        let secret = store.try_get(name).ok()??;
        secret.try_plaintext().ok().map(|b| b.to_vec())
    }

    fn config(&self, store: &str, key: &str) -> Option<String> {
        fastly::ConfigStore::try_open(store)
            .ok()?
            .try_get(key)
            .ok()
            .flatten()
    }

    /// One host call per line: the endpoint's handle is kept for the instance's later
    /// requests, and the line goes in one write (each write is one log message; Fastly
    /// ends it, so no newline is sent).
    fn log(&self, endpoint: &str, line: &str) {
        thread_local! {
            static ENDPOINTS: std::cell::RefCell<Vec<(String, fastly::log::Endpoint)>> =
                const { std::cell::RefCell::new(Vec::new()) };
        }
        ENDPOINTS.with(|eps| {
            let mut eps = eps.borrow_mut();
            let at = match eps.iter().position(|(n, _)| n == endpoint) {
                Some(at) => at,
                None => match fastly::log::Endpoint::try_from_name(endpoint) {
                    Ok(ep) => {
                        eps.push((endpoint.to_owned(), ep));
                        eps.len() - 1
                    }
                    Err(_) => return,
                },
            };
            if let Some((_, ep)) = eps.get_mut(at) {
                let _ = ep.write_all(line.as_bytes());
            }
        });
    }
}
