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
//! Storage: KV item [`BAN_LOG_ITEM`] holds the JSON log (written with compare-and-swap on
//! the item's generation, its metadata the log's stamp `generation:next_id`);
//! [`BAN_INDEX_ITEM`] holds the index built from it (split into parts of at most
//! [`KV_PART_LIMIT`] bytes), written after the log with its own compare-and-swap, never
//! replacing a newer stamp. A log without an index, with an older one or with an
//! unreadable one (an earlier layout, a crash between the two writes) is indexed from the
//! JSON log when a POP refreshes its copy, so an accepted ban is never lost.
//!
//! Propagation bound: the admin call writes the KV store and refreshes this POP's copy at
//! once; other POPs (other Viceroy instances share one cache, so there: none) re-read the
//! KV store when their copy expires, after `[bans].sync_interval`. A ban thus takes effect
//! everywhere within `sync_interval` plus the KV store's own global propagation delay.

use std::io::Read;
use std::time::Duration;

use cachet_policy::Policy;
use cachet_policy::admin::{AddedBan, AdminError, BanLog, LookupRequest};
use cachet_policy::banindex::{self, BanIndex, ColdBytes, Header, IndexError};
use cachet_policy::object::Meta;
use fastly::cache::core::{self, CacheKey, Found, Transaction};
use fastly::kv_store::{InsertMode, KVStore, KVStoreError};

/// KV item holding the ban log (JSON, `cachet_policy::banlog::BanLog`).
pub(crate) const BAN_LOG_ITEM: &str = "ban-log";

/// KV item holding the binary ban index (its first part).
pub(crate) const BAN_INDEX_ITEM: &str = "ban-index";

/// Largest KV value this app writes, bytes: 20 MiB, under Fastly's 25 MB per KV value
/// (docs/ban.md, "Storage"). A larger index is split into parts
/// `ban-index.<next_id>.<n>`.
pub(crate) const KV_PART_LIMIT: usize = 20 * 1024 * 1024;

/// Core-cache key of this POP's copy of the index. Cache keys of objects always contain
/// a `/` (host + target), this one cannot collide.
const LOCAL_COPY_KEY: &[u8] = b"cachet:ban-index";

/// How long this POP's copy may be served stale while one request refreshes it (bounds
/// the staleness only when every refresh fails: otherwise the refresh takes one KV read).
const LOCAL_COPY_SWR: Duration = Duration::from_secs(60);

/// Attempts at a compare-and-swap write before giving up with `503`.
const MAX_CAS_ATTEMPTS: usize = 8;

fn open(policy: &Policy) -> Result<KVStore, AdminError> {
    let name = &policy.config().bans.kv_store;
    match KVStore::open(name) {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Err(AdminError::Store(format!(
            "KV store {name:?} is not linked to the service"
        ))),
        Err(e) => Err(AdminError::Store(format!("KV store {name:?}: {e}"))),
    }
}

/// The stamp that orders two states of one log: every accepted ban raises `next_id`.
fn stamp(generation: u64, next_id: u64) -> String {
    format!("{generation}:{next_id}")
}

/// Reads the log from the KV store with its generation (`None` when the item is absent).
fn read_kv(store: &KVStore) -> Result<(BanLog, Option<u64>), AdminError> {
    match store.lookup(BAN_LOG_ITEM) {
        Ok(mut item) => {
            let generation = item.current_generation();
            let log = BanLog::try_from_json(&item.take_body_bytes())?;
            Ok((log, Some(generation)))
        }
        Err(KVStoreError::ItemNotFound) => Ok((BanLog::default(), None)),
        Err(e) => Err(AdminError::Store(e.to_string())),
    }
}

/// The authoritative log, straight from the KV store (admin `GET /.cachet/bans`).
///
/// # Errors
/// [`AdminError::Store`] when the store is missing or unreadable.
pub(crate) fn authoritative(policy: &Policy) -> Result<BanLog, AdminError> {
    read_kv(&open(policy)?).map(|(log, _)| log)
}

/// Core-cache key of this POP's failure marker: while the KV store cannot be read and no
/// copy of the index is left, it holds (user metadata, u64 LE ms) when the failure was
/// first seen. Cannot collide with object keys (no `/`).
const FAILURE_KEY: &[u8] = b"cachet:ban-failure";

/// Surrogate key of the failure marker, purged by the first successful sync after it.
const FAILURE_SURROGATE: &str = "cachet-ban-failure";

/// How long the failure marker lives when nothing clears it.
const FAILURE_TTL: Duration = Duration::from_secs(24 * 3600);

/// The bans as one request sees them: this POP's copy of the index.
pub(crate) enum Bans {
    /// No ban can apply (an empty log).
    None,
    /// The bans cannot be known: the KV store failed and this POP's copy is gone (older
    /// than `sync_interval` + [`LOCAL_COPY_SWR`]). An object stored before `since_ms`
    /// (when the failure was first seen here) may be covered by a ban this POP cannot
    /// see: it is refetched, never served as it is (fail closed). Objects stored since
    /// were fetched during the failure and are served.
    Unknown {
        /// When this POP first failed to read the bans, ms since the epoch.
        since_ms: u64,
    },
    /// The open core-cache entry; the head is read on the first check that needs it.
    Local(Local),
    /// A whole index in memory (just built or read from the KV store).
    Whole(Vec<u8>),
}

/// This POP's copy, opened: what its user metadata says, the head once read.
pub(crate) struct Local {
    found: Found,
    head_len: usize,
    /// The floor and the newest ban's time, ms (objects stored at or after the newest ban,
    /// and not before the floor, need no read at all).
    trimmed_at_ms: u64,
    newest_at_ms: u64,
    head: std::cell::OnceCell<Option<Vec<u8>>>,
}

/// The user metadata of the core-cache copy: head length (u32), floor and newest ban
/// time (u64 each), little-endian.
fn local_meta(h: &Header) -> bytes::Bytes {
    let mut m = [0u8; 20];
    m[..4].copy_from_slice(&u32::try_from(h.head_len).unwrap_or(u32::MAX).to_le_bytes());
    m[4..12].copy_from_slice(&h.trimmed_at_ms.to_le_bytes());
    m[12..].copy_from_slice(&h.newest_at_ms.to_le_bytes());
    bytes::Bytes::copy_from_slice(&m)
}

/// Ranged reads of the core-cache copy.
struct FoundCold<'a>(&'a Found);

impl ColdBytes for FoundCold<'_> {
    fn read(&self, at: usize, len: usize) -> Result<std::borrow::Cow<'_, [u8]>, IndexError> {
        read_range(self.0, at, len).map(std::borrow::Cow::Owned)
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

/// This POP's copy from a lookup: its head is read later, in one ranged read, only by a
/// check that needs it. `None` when its metadata is unreadable.
fn local(found: Found) -> Option<Bans> {
    let meta = found.user_metadata();
    let word = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(meta.get(at..at + 8)?.try_into().ok()?))
    };
    let head_len = usize::try_from(u32::from_le_bytes(meta.get(..4)?.try_into().ok()?)).ok()?;
    Some(Bans::Local(Local {
        head_len,
        trimmed_at_ms: word(4)?,
        newest_at_ms: word(12)?,
        found,
        head: std::cell::OnceCell::new(),
    }))
}

impl Local {
    fn check<'a, F: Fn(&str) -> Option<&'a str>>(
        &self,
        meta: &Meta,
        req: &LookupRequest<'a, F>,
    ) -> Option<u64> {
        let stored = meta.times.stored_at.as_millis();
        if stored < self.trimmed_at_ms {
            return Some(0);
        }
        if self.newest_at_ms <= stored {
            return None;
        }
        let head = self
            .head
            .get_or_init(|| read_range(&self.found, 0, self.head_len).ok())
            .as_deref()?;
        BanIndex::from_head(head)
            .and_then(|ix| ix.check(&FoundCold(&self.found), meta, req))
            .ok()
            .flatten()
    }
}

/// The bans as this POP sees them: the core-cache copy of the index. Once it is older
/// than `[bans].sync_interval`, one request (the core cache's obligation) re-reads the KV
/// store and replaces it while the others keep using the previous copy (stale for at most
/// [`LOCAL_COPY_SWR`]). When the store cannot be read and no copy is left, the bans are
/// [`Bans::Unknown`] (fail closed; the caller logs the returned error text).
pub(crate) fn current(policy: &Policy) -> (Bans, Option<String>) {
    let tx = match Transaction::lookup(CacheKey::from_static(LOCAL_COPY_KEY))
        .always_use_requested_range()
        .execute()
    {
        Ok(tx) => tx,
        Err(e) => return (Bans::None, Some(e.to_string())),
    };
    if !tx.must_insert_or_update()
        && let Some(b) = tx.found().and_then(local)
    {
        return (b, None);
    }
    match open(policy).and_then(|s| sync(&s)) {
        Ok(bytes) => {
            publish_local(policy, tx, &bytes);
            clear_failure();
            (Bans::Whole(bytes), None)
        }
        Err(e) => {
            // Keep using the previous copy, if any, until a refresh succeeds; without
            // one, the bans are unknown.
            let stale = tx.found().and_then(local);
            let _ = tx.cancel_insert_or_update();
            let bans = stale.unwrap_or_else(|| Bans::Unknown {
                since_ms: failure_since(),
            });
            (bans, Some(e.to_string()))
        }
    }
}

/// When this POP first failed to read the bans: the failure marker's time, or now (and
/// the marker written) when there is none.
fn failure_since() -> u64 {
    let now_ms =
        cachet_refresh::Timestamp::from_system_time(std::time::SystemTime::now()).as_millis();
    if let Ok(Some(found)) = core::lookup(CacheKey::from_static(FAILURE_KEY)).execute()
        && let Some(since) = found
            .user_metadata()
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    {
        return since;
    }
    if let Ok(w) = core::insert(CacheKey::from_static(FAILURE_KEY), FAILURE_TTL)
        .surrogate_keys([FAILURE_SURROGATE])
        .known_length(0)
        .user_metadata(bytes::Bytes::copy_from_slice(&now_ms.to_le_bytes()))
        .execute()
    {
        let _ = w.finish();
    }
    now_ms
}

/// Removes the failure marker after a successful sync, when there is one.
fn clear_failure() {
    if let Ok(Some(_)) = core::lookup(CacheKey::from_static(FAILURE_KEY)).execute() {
        let _ = fastly::http::purge::purge_surrogate_key(FAILURE_SURROGATE);
    }
}

/// The stamp of a stored log read without its entries (serde skips them): for logs written
/// without the stamp in their KV metadata (before the index existed).
#[derive(serde::Deserialize)]
struct LogStamp {
    #[serde(default)]
    generation: u64,
    #[serde(default)]
    next_id: u64,
}

/// The index for this POP: the KV copy when it is intact and as new as the log; else
/// rebuilt from the JSON log (earlier layout, crash between the two writes) and written
/// back to the KV store.
fn sync(store: &KVStore) -> Result<Vec<u8>, AdminError> {
    let mut item = match store.lookup(BAN_LOG_ITEM) {
        Ok(item) => item,
        Err(KVStoreError::ItemNotFound) => return Ok(banindex::encode(&BanLog::default())),
        Err(e) => return Err(AdminError::Store(e.to_string())),
    };
    let log_stamp = item
        .metadata()
        .and_then(|m| String::from_utf8(m.to_vec()).ok());
    let body = if log_stamp.is_none() {
        Some(item.take_body_bytes())
    } else {
        None
    };
    if let Some((bytes, _)) = read_index(store)
        && let Ok(ix) = BanIndex::from_bytes(&bytes)
    {
        let h = ix.header();
        let current = match (&log_stamp, &body) {
            (Some(s), _) => *s == stamp(h.generation, h.next_id),
            (None, Some(b)) => serde_json::from_slice::<LogStamp>(b)
                .is_ok_and(|l| (l.generation, l.next_id) == (h.generation, h.next_id)),
            (None, None) => false,
        };
        if current {
            return Ok(bytes);
        }
    }
    let log = match body {
        Some(b) => BanLog::try_from_json(&b)?,
        None => read_kv(store)?.0,
    };
    let bytes = banindex::encode(&log);
    let _ = write_index(store, &bytes);
    Ok(bytes)
}

/// The KV index with the generation of its first part; `None` when absent or a part is
/// missing.
fn read_index(store: &KVStore) -> Option<(Vec<u8>, u64)> {
    let mut first = store.lookup(BAN_INDEX_ITEM).ok()?;
    let generation = first.current_generation();
    let mut bytes = first.take_body_bytes();
    let header = Header::parse(&bytes).ok()?;
    let mut part = 1usize;
    while bytes.len() < header.total_len {
        let name = format!("{BAN_INDEX_ITEM}.{}.{part}", header.next_id);
        bytes.extend(store.lookup(&name).ok()?.take_body_bytes());
        part += 1;
    }
    Some((bytes, generation))
}

/// Writes `bytes` as the KV index unless the stored one is newer (compare-and-swap on
/// the first part's generation). Parts after the first go first, under names carrying
/// the stamp, so a reader never joins parts of two indexes.
fn write_index(store: &KVStore, bytes: &[u8]) -> Result<(), AdminError> {
    let ours = Header::parse(bytes).map_err(|e| AdminError::Store(e.to_string()))?;
    let mut parts = bytes.chunks(KV_PART_LIMIT);
    let first = parts.next().unwrap_or_default();
    for (i, p) in parts.enumerate() {
        let name = format!("{BAN_INDEX_ITEM}.{}.{}", ours.next_id, i + 1);
        store
            .insert(&name, p.to_vec())
            .map_err(|e| AdminError::Store(e.to_string()))?;
    }
    for _ in 0..MAX_CAS_ATTEMPTS {
        let insert = store.build_insert();
        let insert = match store.lookup(BAN_INDEX_ITEM) {
            Ok(mut item) => {
                let g = item.current_generation();
                let mut head = [0u8; banindex::HEADER_LEN];
                let read = item.take_body().read_exact(&mut head);
                if read.is_ok()
                    && let Ok(h) = Header::parse(&head)
                    && (h.next_id, h.generation) >= (ours.next_id, ours.generation)
                {
                    return Ok(());
                }
                insert.if_generation_match(g)
            }
            Err(KVStoreError::ItemNotFound) => insert.mode(InsertMode::Add),
            Err(e) => return Err(AdminError::Store(e.to_string())),
        };
        match insert.execute(BAN_INDEX_ITEM, first.to_vec()) {
            Ok(()) => return Ok(()),
            Err(KVStoreError::ItemPreconditionFailed) => {}
            Err(e) => return Err(AdminError::Store(e.to_string())),
        }
    }
    Err(AdminError::Store(
        "the ban index kept changing; retry".to_owned(),
    ))
}

/// Replaces this POP's copy (fresh for `sync_interval`, then served stale for at most
/// [`LOCAL_COPY_SWR`] while one request refreshes it); the head length, floor and newest
/// ban time ride in the entry's user metadata ([`local_meta`]).
fn publish_local(policy: &Policy, tx: Transaction, bytes: &[u8]) {
    let Ok(h) = Header::parse(bytes) else {
        let _ = tx.cancel_insert_or_update();
        return;
    };
    let ttl: Duration = policy.config().bans.sync_interval.0;
    let insert = if tx.must_insert_or_update() {
        tx.insert(ttl)
    } else {
        return;
    };
    write_copy(
        insert
            .stale_while_revalidate(LOCAL_COPY_SWR)
            .known_length(bytes.len() as u64)
            .user_metadata(local_meta(&h))
            .execute(),
        bytes,
    );
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
            .user_metadata(local_meta(&h))
            .execute(),
        bytes,
    );
}

/// Adds a ban at `now_ms`: read-modify-write of the KV log guarded by its generation,
/// retrying when another instance wrote in between; retires bans past
/// `[bans].retention` in the same write. Then writes the index of the log it wrote.
///
/// # Errors
/// [`AdminError::BadRequest`] for an expression that does not parse (with the column);
/// [`AdminError::TooManyBans`]; [`AdminError::Store`] when the store fails or keeps
/// changing. A failed index write after the log was written is not an error: the ban is
/// in the authoritative log, and the next sync re-indexes it.
pub(crate) fn add(policy: &Policy, expr: &str, now_ms: u64) -> Result<AddedBan, AdminError> {
    let cfg = &policy.config().bans;
    let store = open(policy)?;
    // The current index files every entry it holds: only the new ban is parsed.
    let previous = read_index(&store).map(|(bytes, _)| bytes);
    for _ in 0..MAX_CAS_ATTEMPTS {
        let (mut log, generation) = read_kv(&store)?;
        log.retire(now_ms, cfg.retention.0);
        let added = log.add_ban(expr, now_ms, cfg.max_bans)?;
        let insert = store
            .build_insert()
            .metadata(&stamp(log.generation, log.next_id));
        let insert = match generation {
            Some(g) => insert.if_generation_match(g),
            None => insert.mode(InsertMode::Add),
        };
        match insert.execute(BAN_LOG_ITEM, log.to_json()) {
            Ok(()) => {
                let bytes = banindex::encode_with(&log, previous.as_deref());
                let _ = write_index(&store, &bytes);
                replace_local(policy, &bytes);
                return Ok(added);
            }
            Err(KVStoreError::ItemPreconditionFailed) => {}
            Err(e) => return Err(AdminError::Store(e.to_string())),
        }
    }
    Err(AdminError::Store(
        "the ban log kept changing; retry".to_owned(),
    ))
}

/// Why a found object may not be served as it is ([`check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Covered {
    /// This ban (its id; 0: stored before the log's floor) covers it.
    Ban(u64),
    /// The bans are unknown ([`Bans::Unknown`]) and it was stored before that began.
    Unknown,
}

/// Checks a found object against the bans newer than it. `header` reads the lookup
/// request's headers (`req.http.*`); `url` is the normalized target (`req.url`). An index
/// that cannot be read counts as no ban for this lookup (the copy is replaced at the
/// next sync; the JSON log keeps the ban).
pub(crate) fn check<'a>(
    bans: &Bans,
    meta: &Meta,
    url: &'a str,
    header: impl Fn(&str) -> Option<&'a str>,
) -> Option<Covered> {
    let req = LookupRequest { url, header };
    match bans {
        Bans::None => None,
        Bans::Unknown { since_ms } => {
            (meta.times.stored_at.as_millis() < *since_ms).then_some(Covered::Unknown)
        }
        Bans::Local(local) => local.check(meta, &req).map(Covered::Ban),
        Bans::Whole(bytes) => BanIndex::from_head(bytes)
            .and_then(|ix| ix.check(bytes.as_slice(), meta, &req))
            .ok()
            .flatten()
            .map(Covered::Ban),
    }
}
