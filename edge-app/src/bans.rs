//! The shared ban log on Fastly: the JSON log in a KV store (authoritative), its binary index (KV and the POP's core cache) read once per request.
//!
//! Fastly Compute gives no memory shared across requests and no way to enumerate cached
//! objects, so Varnish's lurker cannot run here. Instead every ban is evaluated lazily,
//! at lookup, against objects stored before it (Varnish's lookup-time check). A banned
//! object is hard-purged through its per-object surrogate key, so the next lookup
//! collapses onto one origin fetch.
//!
//! Every request starts in a fresh instance, so the check reads the binary index
//! (`cachet_policy::banindex`), never the JSON log: one core-cache lookup, one ranged read
//! of the index's head (header, field table, unanchored bans, Bloom filter), and small
//! ranged reads of the cold part only for keys the Bloom filter admits. The cost model is
//! in docs/ban.md ("Cost per request").
//!
//! Every rule of storing the log and its index, and of checking an object against them,
//! is `cachet_policy::banstore` (unit-tested there with an in-memory store); this module
//! is Fastly's side of its two traits: the KV store ([`Kv`]) and this POP's core-cache
//! copy ([`Local`]), plus the fail-closed marker kept in the core cache.
//!
//! Propagation bound: the admin call writes the KV store and refreshes this POP's copy at
//! once; other POPs (other Viceroy instances share one cache, so there: none) re-read the
//! KV store when their copy expires, after `[bans].sync_interval`. A ban thus takes effect
//! everywhere within `sync_interval` plus the KV store's own global propagation delay.

use std::cell::OnceCell;
use std::io::Read;
use std::time::Duration;

use cachet_policy::Policy;
use cachet_policy::admin::{AddedBan, AdminError, LookupRequest};
use cachet_policy::banindex::{ColdBytes, Header, IndexError};
use cachet_policy::banlog::BanLog;
use cachet_policy::banstore::{
    self, CopyLookup, CopyMeta, KvItem, KvWriteError, PopCache, PopCopy, Precondition, VersionedKv,
};
use cachet_policy::object::Meta;
use fastly::cache::core::{self, CacheKey, Found, Transaction};
use fastly::kv_store::{InsertMode, KVStore, KVStoreError};

pub(crate) use cachet_policy::banstore::Covered;

/// Core-cache key of this POP's copy of the index. Cache keys of objects always contain
/// a `/` (host + target), this one cannot collide.
const LOCAL_COPY_KEY: &[u8] = b"cachet:ban-index";

/// How long this POP's copy may be served stale while one request refreshes it (bounds
/// the staleness only when every refresh fails: otherwise the refresh takes one KV read).
const LOCAL_COPY_SWR: Duration = Duration::from_secs(60);

/// Core-cache key of this POP's failure marker: while the KV store cannot be read and no
/// copy of the index is left, it holds (user metadata, u64 LE ms) when the failure was
/// first seen. Cannot collide with object keys (no `/`).
const FAILURE_KEY: &[u8] = b"cachet:ban-failure";

/// Surrogate key of the failure marker, purged by the first successful sync after it.
const FAILURE_SURROGATE: &str = "cachet-ban-failure";

/// How long the failure marker lives when nothing clears it.
const FAILURE_TTL: Duration = Duration::from_secs(24 * 3600);

/// The bans as one request sees them (`cachet_policy::banstore::Bans`) over this POP's
/// core-cache copy.
pub(crate) type Bans = banstore::Bans<Local>;

/// The `[bans].kv_store` KV store as `banstore` reads and writes it.
struct Kv(KVStore);

fn open(policy: &Policy) -> Result<Kv, AdminError> {
    let name = &policy.config().bans.kv_store;
    match KVStore::open(name) {
        Ok(Some(s)) => Ok(Kv(s)),
        Ok(None) => Err(AdminError::Store(format!(
            "KV store {name:?} is not linked to the service"
        ))),
        Err(e) => Err(AdminError::Store(format!("KV store {name:?}: {e}"))),
    }
}

impl VersionedKv for Kv {
    fn lookup(&self, name: &str, max_body: Option<usize>) -> Result<Option<KvItem>, String> {
        let mut item = match self.0.lookup(name) {
            Ok(item) => item,
            Err(KVStoreError::ItemNotFound) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        let generation = item.current_generation();
        let metadata = item.metadata().map(|m| m.to_vec());
        let body = match max_body {
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

    fn insert(
        &self,
        name: &str,
        body: &[u8],
        metadata: Option<&str>,
        when: Precondition,
    ) -> Result<(), KvWriteError> {
        let mut insert = self.0.build_insert();
        if let Some(m) = metadata {
            insert = insert.metadata(m);
        }
        insert = match when {
            Precondition::None => insert,
            Precondition::Absent => insert.mode(InsertMode::Add),
            Precondition::Generation(g) => insert.if_generation_match(g),
        };
        match insert.execute(name, body.to_vec()) {
            Ok(()) => Ok(()),
            Err(KVStoreError::ItemPreconditionFailed) => Err(KvWriteError::Conflict),
            Err(e) => Err(KvWriteError::Failed(e.to_string())),
        }
    }
}

/// The authoritative log, straight from the KV store (admin `GET /.cachet/bans`).
///
/// # Errors
/// [`AdminError::Store`] when the store is missing or unreadable.
pub(crate) fn authoritative(policy: &Policy) -> Result<BanLog, AdminError> {
    banstore::authoritative(&open(policy)?)
}

/// This POP's copy, opened: its [`CopyMeta`] (the entry's user metadata), the head once
/// read.
pub(crate) struct Local {
    found: Found,
    meta: CopyMeta,
    head: OnceCell<Option<Vec<u8>>>,
}

impl ColdBytes for Local {
    fn read(&self, at: usize, len: usize) -> Result<std::borrow::Cow<'_, [u8]>, IndexError> {
        read_range(&self.found, at, len).map(std::borrow::Cow::Owned)
    }
}

impl PopCopy for Local {
    fn meta(&self) -> &CopyMeta {
        &self.meta
    }
    fn head(&self) -> Option<&[u8]> {
        self.head
            .get_or_init(|| read_range(&self.found, 0, self.meta.head_len).ok())
            .as_deref()
    }
}

/// `len` bytes at `at` of a core-cache entry.
fn read_range(found: &Found, at: usize, len: usize) -> Result<Vec<u8>, IndexError> {
    let mut buf = vec![0u8; len];
    if len == 0 {
        return Ok(buf);
    }
    let from = at as u64;
    let to = from + len as u64 - 1;
    let mut body = found
        .to_stream_from_range(Some(from), Some(to))
        .map_err(|e| IndexError::Read(e.to_string()))?;
    body.read_exact(&mut buf)
        .map_err(|e| IndexError::Read(e.to_string()))?;
    Ok(buf)
}

/// This POP's copy from a lookup; `None` when its metadata is unreadable.
fn local(found: Found) -> Option<Local> {
    let meta = CopyMeta::from_bytes(&found.user_metadata())?;
    Some(Local {
        found,
        meta,
        head: OnceCell::new(),
    })
}

/// The bans as this POP sees them (`banstore::current`: the core-cache copy of the index;
/// once it is older than `[bans].sync_interval`, one request, the core cache's obligation
/// holder, re-reads the KV store and replaces it while the others keep using the previous
/// copy, stale for at most [`LOCAL_COPY_SWR`]; fail closed when the store cannot be read
/// and no copy is left). The returned text is a failure for the access log.
pub(crate) fn current(policy: &Policy) -> (Bans, Option<String>) {
    let now_ms =
        cachet_refresh::Timestamp::from_system_time(std::time::SystemTime::now()).as_millis();
    banstore::current(&mut Pop(policy), || open(policy), now_ms)
}

/// This POP's core cache as `banstore` keeps its copy and failure marker there.
struct Pop<'p>(&'p Policy);

impl PopCache for Pop<'_> {
    type Lookup = Transaction;
    type Copy = Local;

    fn lookup(&mut self) -> Result<CopyLookup<Transaction, Local>, String> {
        let tx = Transaction::lookup(CacheKey::from_static(LOCAL_COPY_KEY))
            .always_use_requested_range()
            .execute()
            .map_err(|e| e.to_string())?;
        Ok(CopyLookup {
            refresh: tx.must_insert_or_update(),
            copy: tx.found().and_then(local),
            lookup: tx,
        })
    }

    /// Fresh for `sync_interval`, then served stale for at most [`LOCAL_COPY_SWR`] while
    /// one request refreshes it.
    fn publish(&mut self, tx: Transaction, bytes: &[u8]) {
        if !tx.must_insert_or_update() {
            return;
        }
        let Ok(h) = Header::parse(bytes) else {
            let _ = tx.cancel_insert_or_update();
            return;
        };
        let insert = tx.insert(self.0.config().bans.sync_interval.0);
        write_copy(
            insert
                .stale_while_revalidate(LOCAL_COPY_SWR)
                .known_length(bytes.len() as u64)
                .user_metadata(copy_meta(&h))
                .execute(),
            bytes,
        );
    }

    fn cancel(&mut self, tx: Transaction) {
        if tx.must_insert_or_update() {
            let _ = tx.cancel_insert_or_update();
        }
    }

    fn failed_since(&mut self) -> Option<u64> {
        let found = core::lookup(CacheKey::from_static(FAILURE_KEY))
            .execute()
            .ok()??;
        let since = found.user_metadata().get(..8)?.try_into().ok()?;
        Some(u64::from_le_bytes(since))
    }

    fn mark_failed(&mut self, since_ms: u64) {
        if let Ok(w) = core::insert(CacheKey::from_static(FAILURE_KEY), FAILURE_TTL)
            .surrogate_keys([FAILURE_SURROGATE])
            .known_length(0)
            .user_metadata(bytes::Bytes::copy_from_slice(&since_ms.to_le_bytes()))
            .execute()
        {
            let _ = w.finish();
        }
    }

    fn clear_failed(&mut self) {
        let _ = fastly::http::purge::purge_surrogate_key(FAILURE_SURROGATE);
    }
}

fn copy_meta(h: &Header) -> bytes::Bytes {
    bytes::Bytes::copy_from_slice(&CopyMeta::of(h).to_bytes())
}

/// Writes the copy's bytes into an insert just begun (a failed insert is left alone: the
/// next sync tries again).
fn write_copy(w: Result<fastly::http::body::StreamingBody, core::CacheError>, bytes: &[u8]) {
    use std::io::Write;
    if let Ok(mut w) = w
        && w.write_all(bytes).is_ok()
    {
        let _ = w.finish();
    }
}

/// Replaces this POP's copy outside a lookup (the admin call, after a write).
fn replace_local(policy: &Policy, bytes: &[u8]) {
    let Ok(h) = Header::parse(bytes) else { return };
    let ttl: Duration = policy.config().bans.sync_interval.0;
    write_copy(
        core::insert(CacheKey::from_static(LOCAL_COPY_KEY), ttl)
            .stale_while_revalidate(LOCAL_COPY_SWR)
            .known_length(bytes.len() as u64)
            .user_metadata(copy_meta(&h))
            .execute(),
        bytes,
    );
}

/// Adds a ban at `now_ms` (`banstore::add`: compare-and-swap on the KV log, retention
/// applied, index written) and replaces this POP's copy at once.
///
/// # Errors
/// As `banstore::add`: `BadRequest`, `TooManyBans`, `Store`.
pub(crate) fn add(policy: &Policy, expr: &str, now_ms: u64) -> Result<AddedBan, AdminError> {
    let cfg = &policy.config().bans;
    let (added, bytes) =
        banstore::add(&open(policy)?, expr, now_ms, cfg.retention.0, cfg.max_bans)?;
    replace_local(policy, &bytes);
    Ok(added)
}

/// Checks a found object against the bans newer than it (`banstore::check`). `header`
/// reads the lookup request's headers (`req.http.*`); `url` is the normalized target.
pub(crate) fn check<'a>(
    bans: &Bans,
    meta: &Meta,
    url: &'a str,
    header: impl Fn(&str) -> Option<&'a str>,
) -> Option<Covered> {
    banstore::check(bans, meta, &LookupRequest { url, header })
}
