//! The port between the edge's flow and Fastly Compute: the [`Host`] trait and the types it speaks.
//!
//! Every platform call the edge makes goes through a [`Host`] passed by reference: the
//! binding on the `fastly` crate in `edge-app` (one impl, plus `main`), an in-memory double
//! in this crate's unit tests. The methods are shaped like Fastly's host calls as the
//! `fastly` crate exposes them (`cache::core::Transaction` lookup, insert, update and
//! cancel, `Found` body ranges and user metadata, surrogate-key purges, `KVStore` lookup
//! and insert with generation preconditions, `Request::send` to a backend, shielding,
//! secret and config stores, log endpoints), with handles as associated types. Header
//! values are bytes everywhere (clients and origins may send values that are not UTF-8);
//! names are lower-case, as Fastly reports them.

use std::time::{Duration, SystemTime};

use cachet_policy::OriginConfig;
use cachet_policy::banstore::{KvItem, KvWriteError, Precondition};

/// Header lines as (lower-case name, value bytes), in order.
pub type Fields = Vec<(String, Vec<u8>)>;

/// What a core-cache insert or update writes besides the body (the `fastly` crate's
/// `InsertBuilder` / `UpdateBuilder` options).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Time to live (fresh for this long).
    pub ttl: Duration,
    /// Stale-while-revalidate after the TTL; zero: none.
    pub swr: Duration,
    /// The entry's age when written (`InsertBuilder::initial_age`,
    /// `TransactionUpdateBuilder::age`): the platform's TTL counts from `now - age`.
    pub age: Duration,
    /// Request header names the entry varies by (`vary_by`); empty: none.
    pub vary_by: &'a [String],
    /// Surrogate keys (purged by [`Host::purge`]).
    pub surrogate_keys: &'a [String],
    /// User metadata bytes.
    pub user_metadata: &'a [u8],
}

/// A request to a backend (`fastly::Request`): the client's URL with its path and query
/// replaced by the normalized target's.
#[derive(Debug)]
pub struct OriginRequest<B> {
    /// Method (`GET` for fills, the client's for passes).
    pub method: String,
    /// The client's URL (absolute, as the platform gave it).
    pub url: String,
    /// The path to send (`Request::set_path`).
    pub path: String,
    /// The query to send without `?` (`Request::set_query_str`); empty: no query
    /// (`Request::remove_query`).
    pub query: String,
    /// Header lines to send.
    pub headers: Fields,
    /// The body to send (a pass's client body), if any.
    pub body: Option<B>,
}

/// A backend's response (`fastly::Response` from `Request::send`).
#[derive(Debug)]
pub struct OriginResponse<B> {
    /// Status code.
    pub status: u16,
    /// Header lines.
    pub headers: Fields,
    /// The body, streamed from the backend.
    pub body: B,
}

/// Where this POP sits relative to a named shield (`fastly::shielding::Shield`).
#[derive(Debug)]
pub enum ShieldPos<K> {
    /// This code runs on the shield POP (`Shield::running_on`).
    RunningOn,
    /// An edge POP: the shield's backend (or why it cannot be built).
    Backend(Result<K, String>),
}

/// The options of a dynamic backend (`fastly::backend::BackendBuilder`), from `[origin]`.
#[derive(Debug, Clone, Copy)]
pub struct BackendSpec<'a> {
    /// The backend's name.
    pub name: &'a str,
    /// `host:port` to connect to.
    pub target: &'a str,
    /// Connect with TLS, SNI and certificate check against this host.
    pub tls_host: Option<&'a str>,
    /// Timeouts, pooling, keep-alive, connection cap and override host.
    pub config: &'a OriginConfig,
}

/// The Fastly Compute calls the edge makes. Errors are the platform's messages (for the
/// access log); the flow decides what each one means.
pub trait Host {
    /// A core-cache transaction (`cache::core::Transaction`): at most one is open.
    type Tx;
    /// A found core-cache entry (`cache::core::Found`).
    type Found;
    /// A request or response body (`fastly::Body`), streamed.
    type Body;
    /// A backend (`fastly::Backend`).
    type Backend: Clone;
    /// An open KV store (`fastly::kv_store::KVStore`).
    type Kv;

    /// Wall clock.
    fn now(&self) -> SystemTime;
    /// A monotonic clock (time since an arbitrary start), for durations.
    fn monotonic(&self) -> Duration;
    /// Lets `d` pass (`std::thread::sleep`: WASI `poll_oneoff` on a clock), while the
    /// request waits for another one's revalidation of its key.
    fn sleep(&self, d: Duration);
    /// 64 random bits (WASI `random_get`).
    fn random_u64(&self) -> u64;

    /// Starts a transactional lookup of `key` with the request's header lines (for the
    /// entries' `vary_by`); `ranged`: `always_use_requested_range`. When another request
    /// is filling the key the lookup waits for it (request collapsing), at most `wait`
    /// when given (`TransactionLookupBuilder::timeout`): `Ok(None)` when that ran out.
    ///
    /// # Errors
    /// The platform's refusal.
    fn tx_lookup(
        &self,
        key: &[u8],
        headers: &Fields,
        ranged: bool,
        wait: Option<Duration>,
    ) -> Result<Option<Self::Tx>, String>;
    /// The entry a transaction found, if any (`Transaction::found`).
    fn tx_found(&self, tx: &Self::Tx) -> Option<Self::Found>;
    /// Whether this transaction holds the key's obligation (`must_insert_or_update`).
    fn tx_obligated(&self, tx: &Self::Tx) -> bool;
    /// Inserts `body` under the obligation (`Transaction::insert`, `known_length`).
    ///
    /// # Errors
    /// The platform's refusal or a write error.
    fn tx_insert(&self, tx: Self::Tx, entry: &Entry<'_>, body: &[u8]) -> Result<(), String>;
    /// Freshens the found entry's metadata under the obligation (`Transaction::update`;
    /// the body is kept).
    ///
    /// # Errors
    /// The platform's refusal.
    fn tx_update(&self, tx: Self::Tx, entry: &Entry<'_>) -> Result<(), String>;
    /// Gives the obligation up (`cancel_insert_or_update`).
    fn tx_cancel(&self, tx: &Self::Tx);
    /// A non-transactional lookup (`cache::core::lookup`); `None` when absent or refused.
    fn lookup(&self, key: &[u8]) -> Option<Self::Found>;
    /// A non-transactional insert (`cache::core::insert`).
    ///
    /// # Errors
    /// The platform's refusal or a write error.
    fn insert(&self, key: &[u8], entry: &Entry<'_>, body: &[u8]) -> Result<(), String>;
    /// A found entry's user metadata.
    fn found_metadata(&self, found: &Self::Found) -> Vec<u8>;
    /// Whether the entry is stale (past its TTL or soft-purged).
    fn found_stale(&self, found: &Self::Found) -> bool;
    /// The entry's body, or the inclusive byte range `from..=to` of it
    /// (`to_stream_from_range`).
    ///
    /// # Errors
    /// The platform's refusal or a read error.
    fn found_body(&self, found: &Self::Found, range: Option<(u64, u64)>)
    -> Result<Vec<u8>, String>;
    /// Purges every entry tagged with surrogate key `key`; `soft`: marks them stale instead
    /// (`purge_surrogate_key` / `soft_purge_surrogate_key`).
    ///
    /// # Errors
    /// The platform's refusal.
    fn purge(&self, key: &str, soft: bool) -> Result<(), String>;

    /// Opens a KV store (`KVStore::open`); `None` when it is not linked to the service.
    ///
    /// # Errors
    /// The platform's refusal.
    fn kv_open(&self, name: &str) -> Result<Option<Self::Kv>, String>;
    /// An item: its body (at most `max_body` bytes), generation and metadata; `None` when
    /// absent (`KVStore::lookup`).
    ///
    /// # Errors
    /// The platform's refusal or a read error.
    fn kv_lookup(
        &self,
        kv: &Self::Kv,
        key: &str,
        max_body: Option<usize>,
    ) -> Result<Option<KvItem>, String>;
    /// Writes an item under a precondition (`KVStore::build_insert`: `InsertMode::Add`,
    /// `if_generation_match`).
    ///
    /// # Errors
    /// `KvWriteError::Conflict` when the precondition fails, else `Failed`.
    fn kv_insert(
        &self,
        kv: &Self::Kv,
        key: &str,
        body: &[u8],
        metadata: Option<&str>,
        when: Precondition,
    ) -> Result<(), KvWriteError>;

    /// A static backend by name (`Backend::from_name`).
    ///
    /// # Errors
    /// The platform's refusal (unknown backend).
    fn backend(&self, name: &str) -> Result<Self::Backend, String>;
    /// Registers a dynamic backend (`Backend::builder(..).finish()`).
    ///
    /// # Errors
    /// The platform's refusal (dynamic backends disabled, name taken, bad target).
    fn register_backend(&self, spec: &BackendSpec<'_>) -> Result<Self::Backend, String>;
    /// This POP's position relative to shield `name`, its backend built with the timeouts.
    ///
    /// # Errors
    /// An unknown shield.
    fn shield(
        &self,
        name: &str,
        first_byte: Duration,
        between_bytes: Duration,
        encrypted: bool,
    ) -> Result<ShieldPos<Self::Backend>, String>;
    /// Sends a request to a backend and waits for the response headers (`Request::send`).
    ///
    /// # Errors
    /// The transport error's root cause (connection refused, timeout, ...).
    fn send(
        &self,
        backend: &Self::Backend,
        req: OriginRequest<Self::Body>,
    ) -> Result<OriginResponse<Self::Body>, String>;
    /// Reads up to `limit` bytes from the front of a body.
    ///
    /// # Errors
    /// The body's read error.
    fn body_read(&self, body: &mut Self::Body, limit: u64) -> std::io::Result<Vec<u8>>;
    /// A body holding `bytes` (`Body::from`).
    fn body_from(&self, bytes: Vec<u8>) -> Self::Body;
    /// Appends what `rest` still streams to `body` (`Body::append`).
    fn body_append(&self, body: &mut Self::Body, rest: Self::Body);

    /// A secret's plaintext (`SecretStore::open(store)?.try_get(name)`), `None` when
    /// either is missing.
    fn secret(&self, store: &str, name: &str) -> Option<Vec<u8>>;
    /// A config store value (`ConfigStore::try_open(store)?.try_get(key)`).
    fn config(&self, store: &str, key: &str) -> Option<String>;
    /// Writes one line to a log endpoint (stdout in Viceroy).
    fn log(&self, endpoint: &str, line: &str);
}
