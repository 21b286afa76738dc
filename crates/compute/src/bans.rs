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
//! is the port's side of its traits: the KV store ([`Kv`]) and this POP's core-cache copy
//! ([`Local`]), plus the fail-closed marker kept in the core cache.
//!
//! Propagation bound: the admin call writes the KV store and refreshes this POP's copy at
//! once; other POPs (other Viceroy instances share one cache, so there: none) re-read the
//! KV store when their copy expires, after `[bans].sync_interval`. A ban thus takes effect
//! everywhere within `sync_interval` plus the KV store's own global propagation delay.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::time::Duration;

use cachet_policy::admin::{AddedBan, AdminError, LookupRequest};
use cachet_policy::banindex::{ColdBytes, Header, IndexError};
use cachet_policy::banlog::BanLog;
use cachet_policy::banstore::{
    self, CopyLookup, CopyMeta, KvItem, KvWriteError, PopCache, PopCopy, Precondition, VersionedKv,
};
use cachet_policy::object::Meta;
use cachet_refresh::Timestamp;

use crate::Ctx;
use crate::host::{Entry, Host};

pub(crate) use cachet_policy::banstore::Covered;

/// Core-cache key of this POP's copy of the index. Cache keys of objects always contain
/// a `/` (host + target), this one cannot collide.
pub(crate) const LOCAL_COPY_KEY: &[u8] = b"cachet:ban-index";

/// How long this POP's copy may be served stale while one request refreshes it (bounds
/// the staleness only when every refresh fails: otherwise the refresh takes one KV read).
const LOCAL_COPY_SWR: Duration = Duration::from_secs(60);

/// Core-cache key of this POP's failure marker: while the KV store cannot be read and no
/// copy of the index is left, it holds (user metadata, u64 LE ms) when the failure was
/// first seen. Cannot collide with object keys (no `/`).
pub(crate) const FAILURE_KEY: &[u8] = b"cachet:ban-failure";

/// Surrogate key of the failure marker, purged by the first successful sync after it.
const FAILURE_SURROGATE: &str = "cachet-ban-failure";

/// How long the failure marker lives when nothing clears it.
const FAILURE_TTL: Duration = Duration::from_secs(24 * 3600);

/// The bans as one request sees them (`cachet_policy::banstore::Bans`) over this POP's
/// core-cache copy.
pub(crate) type Bans<'h, H> = banstore::Bans<Local<'h, H>>;

/// The `[bans].kv_store` KV store as `banstore` reads and writes it.
struct Kv<'h, H: Host> {
    host: &'h H,
    kv: H::Kv,
}

fn open<H: Host>(cx: Ctx<'_, H>) -> Result<Kv<'_, H>, AdminError> {
    let name = &cx.policy.config().bans.kv_store;
    match cx.host.kv_open(name) {
        Ok(Some(kv)) => Ok(Kv { host: cx.host, kv }),
        Ok(None) => Err(AdminError::Store(format!(
            "KV store {name:?} is not linked to the service"
        ))),
        Err(e) => Err(AdminError::Store(format!("KV store {name:?}: {e}"))),
    }
}

impl<H: Host> VersionedKv for Kv<'_, H> {
    fn lookup(&self, name: &str, max_body: Option<usize>) -> Result<Option<KvItem>, String> {
        self.host.kv_lookup(&self.kv, name, max_body)
    }

    fn insert(
        &self,
        name: &str,
        body: &[u8],
        metadata: Option<&str>,
        when: Precondition,
    ) -> Result<(), KvWriteError> {
        self.host.kv_insert(&self.kv, name, body, metadata, when)
    }
}

/// The authoritative log, straight from the KV store (admin `GET /.cachet/bans`).
///
/// # Errors
/// [`AdminError::Store`] when the store is missing or unreadable.
pub(crate) fn authoritative<H: Host>(cx: Ctx<'_, H>) -> Result<BanLog, AdminError> {
    banstore::authoritative(&open(cx)?)
}

/// This POP's copy, opened: its [`CopyMeta`] (the entry's user metadata), the head once
/// read.
pub(crate) struct Local<'h, H: Host> {
    host: &'h H,
    found: H::Found,
    meta: CopyMeta,
    head: OnceCell<Option<Vec<u8>>>,
}

impl<H: Host> ColdBytes for Local<'_, H> {
    fn read(&self, at: usize, len: usize) -> Result<Cow<'_, [u8]>, IndexError> {
        read_range(self.host, &self.found, at, len).map(Cow::Owned)
    }
}

impl<H: Host> PopCopy for Local<'_, H> {
    fn meta(&self) -> &CopyMeta {
        &self.meta
    }
    fn head(&self) -> Option<&[u8]> {
        self.head
            .get_or_init(|| read_range(self.host, &self.found, 0, self.meta.head_len).ok())
            .as_deref()
    }
}

/// `len` bytes at `at` of a core-cache entry.
fn read_range<H: Host>(
    host: &H,
    found: &H::Found,
    at: usize,
    len: usize,
) -> Result<Vec<u8>, IndexError> {
    if len == 0 {
        return Ok(Vec::new());
    }
    let from = at as u64;
    let to = from.saturating_add(len as u64 - 1);
    let buf = host
        .found_body(found, Some((from, to)))
        .map_err(IndexError::Read)?;
    if buf.len() == len {
        Ok(buf)
    } else {
        Err(IndexError::Read(format!(
            "short read: {} of {len} bytes",
            buf.len()
        )))
    }
}

/// The bans as this POP sees them (`banstore::current`: the core-cache copy of the index;
/// once it is older than `[bans].sync_interval`, one request, the core cache's obligation
/// holder, re-reads the KV store and replaces it while the others keep using the previous
/// copy, stale for at most [`LOCAL_COPY_SWR`]; fail closed when the store cannot be read
/// and no copy is left). The returned text is a failure for the access log.
pub(crate) fn current<H: Host>(cx: Ctx<'_, H>) -> (Bans<'_, H>, Option<String>) {
    let now_ms = Timestamp::from_system_time(cx.host.now()).as_millis();
    banstore::current(&mut Pop(cx), || open(cx), now_ms)
}

/// This POP's core cache as `banstore` keeps its copy and failure marker there.
struct Pop<'h, H: Host>(Ctx<'h, H>);

/// How a copy of the index is stored: fresh for `ttl` (`[bans].sync_interval`), then
/// stale for at most [`LOCAL_COPY_SWR`], with its [`CopyMeta`] bytes `md`.
fn copy_entry(ttl: Duration, md: &[u8]) -> Entry<'_> {
    Entry {
        ttl,
        swr: LOCAL_COPY_SWR,
        age: Duration::ZERO,
        vary_by: &[],
        surrogate_keys: &[],
        user_metadata: md,
    }
}

impl<'h, H: Host> PopCache for Pop<'h, H> {
    type Lookup = H::Tx;
    type Copy = Local<'h, H>;

    fn lookup(&mut self) -> Result<CopyLookup<H::Tx, Local<'h, H>>, String> {
        let host = self.0.host;
        let tx = host
            .tx_lookup(LOCAL_COPY_KEY, &Vec::new(), true, None)?
            .ok_or("the ban index copy's lookup timed out")?;
        let copy = host.tx_found(&tx).and_then(|found| {
            let meta = CopyMeta::from_bytes(&host.found_metadata(&found))?;
            Some(Local {
                host,
                found,
                meta,
                head: OnceCell::new(),
            })
        });
        Ok(CopyLookup {
            refresh: host.tx_obligated(&tx),
            copy,
            lookup: tx,
        })
    }

    /// Fresh for `sync_interval`, then served stale for at most [`LOCAL_COPY_SWR`] while
    /// one request refreshes it (a failed insert is left alone: the next sync tries again).
    fn publish(&mut self, tx: H::Tx, bytes: &[u8]) {
        let host = self.0.host;
        if !host.tx_obligated(&tx) {
            return;
        }
        let Ok(h) = Header::parse(bytes) else {
            host.tx_cancel(&tx);
            return;
        };
        let md = CopyMeta::of(&h).to_bytes();
        let ttl = self.0.policy.config().bans.sync_interval.0;
        let _ = host.tx_insert(tx, &copy_entry(ttl, &md), bytes);
    }

    fn cancel(&mut self, tx: H::Tx) {
        if self.0.host.tx_obligated(&tx) {
            self.0.host.tx_cancel(&tx);
        }
    }

    fn failed_since(&mut self) -> Option<u64> {
        let host = self.0.host;
        let found = host.lookup(FAILURE_KEY)?;
        let since = host.found_metadata(&found).get(..8)?.try_into().ok()?;
        Some(u64::from_le_bytes(since))
    }

    fn mark_failed(&mut self, since_ms: u64) {
        let md = since_ms.to_le_bytes();
        let keys = [FAILURE_SURROGATE.to_owned()];
        let e = Entry {
            ttl: FAILURE_TTL,
            swr: Duration::ZERO,
            age: Duration::ZERO,
            vary_by: &[],
            surrogate_keys: &keys,
            user_metadata: &md,
        };
        let _ = self.0.host.insert(FAILURE_KEY, &e, &[]);
    }

    fn clear_failed(&mut self) {
        let _ = self.0.host.purge(FAILURE_SURROGATE, false);
    }
}

/// The core-cache key whose obligation serializes this POP's writes of the ban log: a
/// second writer waits in its lookup (the core cache's request collapsing) until the
/// first gives the obligation back. Across POPs the KV store's generation precondition
/// orders writes; within one, this also covers a KV store whose precondition check is not
/// atomic (Viceroy 0.22 checks and writes under separate locks: two concurrent writers
/// could both pass and one accepted ban would be lost).
const WRITER_LOCK_KEY: &[u8] = b"cachet-ban-log-writer";

/// The longest a ban write waits for this POP's other writer; then it goes on with the KV
/// store's precondition alone.
const WRITER_WAIT: Duration = Duration::from_secs(5);

/// This POP's ban-log writer lock, held while the value lives (dropping gives the
/// obligation back).
struct WriterLock<'h, H: Host> {
    host: &'h H,
    tx: Option<H::Tx>,
}

impl<'h, H: Host> WriterLock<'h, H> {
    /// Waits for the lock (at most [`WRITER_WAIT`]); holds nothing when the platform
    /// refuses the lookup or the wait runs out.
    fn take(host: &'h H) -> Self {
        let tx = host
            .tx_lookup(WRITER_LOCK_KEY, &Vec::new(), false, Some(WRITER_WAIT))
            .ok()
            .flatten()
            .filter(|tx| host.tx_obligated(tx));
        Self { host, tx }
    }
}

impl<H: Host> Drop for WriterLock<'_, H> {
    fn drop(&mut self) {
        if let Some(tx) = &self.tx {
            self.host.tx_cancel(tx);
        }
    }
}

/// Adds a ban at `now_ms` (`banstore::add`: compare-and-swap on the KV log, retention
/// applied, index written; one writer at a time on this POP, [`WRITER_LOCK_KEY`]) and
/// replaces this POP's copy at once (outside a lookup).
///
/// # Errors
/// As `banstore::add`: `BadRequest`, `TooManyBans`, `Store`.
pub(crate) fn add<H: Host>(
    cx: Ctx<'_, H>,
    expr: &str,
    now_ms: u64,
) -> Result<AddedBan, AdminError> {
    let cfg = &cx.policy.config().bans;
    let lock = WriterLock::take(cx.host);
    let (added, bytes) = banstore::add(&open(cx)?, expr, now_ms, cfg.retention.0, cfg.max_bans)?;
    drop(lock);
    if let Ok(h) = Header::parse(&bytes) {
        let md = CopyMeta::of(&h).to_bytes();
        let _ = cx.host.insert(
            LOCAL_COPY_KEY,
            &copy_entry(cfg.sync_interval.0, &md),
            &bytes,
        );
    }
    Ok(added)
}

/// Checks a found object against the bans newer than it (`banstore::check`). `header`
/// reads the lookup request's headers (`req.http.*`); `url` is the normalized target.
pub(crate) fn check<'a, H: Host>(
    bans: &Bans<'_, H>,
    meta: &Meta,
    url: &'a str,
    header: impl Fn(&str) -> Option<&'a str>,
) -> Option<Covered> {
    banstore::check(bans, meta, &LookupRequest { url, header })
}
