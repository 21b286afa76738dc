//! The ban log and its binary index in a versioned key-value store (Fastly's KV store on
//! the edge), and a POP's copy of the index: every rule of reading, writing and checking
//! them, over two small traits the platform implements ([`VersionedKv`], [`PopCopy`]).
//!
//! Storage (docs/ban.md, "Storage"): item [`BAN_LOG_ITEM`] holds the JSON log
//! ([`BanLog`], authoritative), written with compare-and-swap on the item's generation,
//! its metadata the log's stamp `generation:next_id` ([`stamp`]); [`BAN_INDEX_ITEM`] holds
//! the index built from it ([`crate::banindex`]), split into parts of at most
//! [`KV_PART_LIMIT`] bytes, written after the log with its own compare-and-swap and never
//! replacing a newer stamp. A log without an index, with an older one or with an
//! unreadable one (an earlier layout, a crash between the two writes) is indexed from the
//! JSON log at the next [`sync`], so an accepted ban is never lost.
//!
//! Fastly Compute has no memory shared across requests: each POP keeps a copy of the
//! index in its cache and checks objects against it at lookup (Varnish's lookup-time ban
//! check). [`CopyMeta`] rides with the copy so most checks read nothing at all;
//! [`check`] is the whole decision, failing closed while the bans are unknown
//! ([`Bans::Unknown`]).

use std::borrow::Cow;
use std::time::Duration;

use crate::admin::{AddedBan, AdminError};
use crate::banindex::{self, BanIndex, ColdBytes, Header, IndexError};
use crate::banlog::BanLog;
use crate::object::Meta;
use cachet_ban::BanRequest;

/// KV item holding the ban log (JSON, [`BanLog`]).
pub const BAN_LOG_ITEM: &str = "ban-log";

/// KV item holding the binary ban index (its first part).
pub const BAN_INDEX_ITEM: &str = "ban-index";

/// Largest KV value written, bytes: 20 MiB, under Fastly's 25 MB per KV value
/// (docs/ban.md, "Storage"). A larger index is split into parts named
/// `ban-index.<next_id>.<n>` ([`part_name`]).
pub const KV_PART_LIMIT: usize = 20 * 1024 * 1024;

/// Attempts at a compare-and-swap write before giving up ([`AdminError::Store`], `503`).
pub const MAX_CAS_ATTEMPTS: usize = 8;

/// One item read from the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvItem {
    /// The body, or its first bytes when the read was bounded.
    pub body: Vec<u8>,
    /// The item's generation (changes on every write).
    pub generation: u64,
    /// The item's metadata, when it has some.
    pub metadata: Option<Vec<u8>>,
}

/// When a write may happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// Always.
    None,
    /// Only when the item does not exist.
    Absent,
    /// Only when the item's generation is still this one.
    Generation(u64),
}

impl Precondition {
    /// Whether a write under this precondition may happen on an item whose current
    /// generation is `current` (`None`: the item does not exist), as Fastly's KV store
    /// decides for an insert with `if_generation_match` / add mode. Used by in-memory
    /// stores (tests, simulations); the real store checks it itself.
    pub fn holds(self, current: Option<u64>) -> bool {
        match self {
            Self::None => true,
            Self::Absent => current.is_none(),
            Self::Generation(g) => current == Some(g),
        }
    }
}

/// A failed write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvWriteError {
    /// The precondition did not hold: another writer came first (retry).
    Conflict,
    /// The store failed (its message).
    Failed(String),
}

/// A key-value store with per-item generations and compare-and-swap writes (Fastly's KV
/// store: `lookup`'s `current_generation`, `build_insert().if_generation_match`).
pub trait VersionedKv {
    /// Reads `name`: its whole body, or at most `max_body` bytes of it (`Some(0)`: only
    /// the generation and metadata). `Ok(None)` when the item does not exist.
    ///
    /// # Errors
    /// The store's failure, as text.
    fn lookup(&self, name: &str, max_body: Option<usize>) -> Result<Option<KvItem>, String>;

    /// Writes `name` (with `metadata` when given) if `when` holds.
    ///
    /// # Errors
    /// [`KvWriteError::Conflict`] when `when` does not hold; [`KvWriteError::Failed`].
    fn insert(
        &self,
        name: &str,
        body: &[u8],
        metadata: Option<&str>,
        when: Precondition,
    ) -> Result<(), KvWriteError>;
}

impl<T: VersionedKv + ?Sized> VersionedKv for &T {
    fn lookup(&self, name: &str, max_body: Option<usize>) -> Result<Option<KvItem>, String> {
        (**self).lookup(name, max_body)
    }

    fn insert(
        &self,
        name: &str,
        body: &[u8],
        metadata: Option<&str>,
        when: Precondition,
    ) -> Result<(), KvWriteError> {
        (**self).insert(name, body, metadata, when)
    }
}

/// The stamp that orders two states of one log: every accepted ban raises `next_id`.
#[must_use]
pub fn stamp(generation: u64, next_id: u64) -> String {
    format!("{generation}:{next_id}")
}

/// Name of part `n` (from 1) of the index stamped `next_id`: parts carry the stamp, so a
/// reader never joins parts of two indexes.
#[must_use]
pub fn part_name(next_id: u64, n: usize) -> String {
    format!("{BAN_INDEX_ITEM}.{next_id}.{n}")
}

fn store_error(e: impl std::fmt::Display) -> AdminError {
    AdminError::Store(e.to_string())
}

/// Reads the log with its generation (`None` when the item is absent: an empty log).
fn read_log<K: VersionedKv + ?Sized>(kv: &K) -> Result<(BanLog, Option<u64>), AdminError> {
    match kv.lookup(BAN_LOG_ITEM, None).map_err(AdminError::Store)? {
        Some(item) => Ok((BanLog::try_from_json(&item.body)?, Some(item.generation))),
        None => Ok((BanLog::default(), None)),
    }
}

/// The authoritative log (admin `GET /.cachet/bans`).
///
/// # Errors
/// [`AdminError::Store`] when the store fails or the log is corrupt.
pub fn authoritative<K: VersionedKv + ?Sized>(kv: &K) -> Result<BanLog, AdminError> {
    read_log(kv).map(|(log, _)| log)
}

/// The stamp of a stored log read without its entries (serde skips them): for logs written
/// without the stamp in their metadata (before the index existed).
#[derive(serde::Deserialize)]
struct LogStamp {
    #[serde(default)]
    generation: u64,
    #[serde(default)]
    next_id: u64,
}

/// The index as a POP should hold it: the stored index when it is intact and as new as
/// the log; else rebuilt from the JSON log (earlier layout, crash between the two writes)
/// and written back (a failed write-back is not an error: the next sync retries).
///
/// # Errors
/// [`AdminError::Store`] when the store fails or the log is corrupt.
pub fn sync<K: VersionedKv + ?Sized>(kv: &K) -> Result<Vec<u8>, AdminError> {
    let Some(item) = kv
        .lookup(BAN_LOG_ITEM, Some(0))
        .map_err(AdminError::Store)?
    else {
        return Ok(banindex::encode(&BanLog::default()));
    };
    let log_stamp = item
        .metadata
        .and_then(|m| String::from_utf8(m).ok())
        .filter(|s| !s.is_empty());
    // Without a stamp in the metadata (a log written before the index existed), the body
    // holds it.
    let body = match log_stamp {
        Some(_) => None,
        None => Some(read_log_body(kv)?),
    };
    if let Some(bytes) = read_index(kv)
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
        None => read_log(kv)?.0,
    };
    let bytes = banindex::encode(&log);
    let _ = write_index(kv, &bytes);
    Ok(bytes)
}

fn read_log_body<K: VersionedKv + ?Sized>(kv: &K) -> Result<Vec<u8>, AdminError> {
    Ok(kv
        .lookup(BAN_LOG_ITEM, None)
        .map_err(AdminError::Store)?
        .map(|i| i.body)
        .unwrap_or_default())
}

/// The stored index, all parts joined; `None` when absent, unreadable or a part is
/// missing.
fn read_index<K: VersionedKv + ?Sized>(kv: &K) -> Option<Vec<u8>> {
    let mut bytes = kv.lookup(BAN_INDEX_ITEM, None).ok()??.body;
    let header = Header::parse(&bytes).ok()?;
    let mut part = 1usize;
    while bytes.len() < header.total_len {
        let next = kv.lookup(&part_name(header.next_id, part), None).ok()??;
        if next.body.is_empty() {
            return None;
        }
        bytes.extend(next.body);
        part += 1;
    }
    Some(bytes)
}

/// Writes `bytes` as the stored index unless the stored one is as new or newer
/// (compare-and-swap on the first part's generation). Parts after the first go first,
/// under names carrying the stamp.
///
/// # Errors
/// [`AdminError::Store`] when the store fails or keeps changing, or `bytes` is no index.
pub fn write_index<K: VersionedKv + ?Sized>(kv: &K, bytes: &[u8]) -> Result<(), AdminError> {
    let ours = Header::parse(bytes).map_err(store_error)?;
    let mut parts = bytes.chunks(KV_PART_LIMIT);
    let first = parts.next().unwrap_or_default();
    for (i, p) in parts.enumerate() {
        kv.insert(&part_name(ours.next_id, i + 1), p, None, Precondition::None)
            .map_err(|e| store_error(format!("{e:?}")))?;
    }
    for _ in 0..MAX_CAS_ATTEMPTS {
        let when = match kv.lookup(BAN_INDEX_ITEM, Some(banindex::HEADER_LEN)) {
            Ok(Some(item)) => {
                if let Ok(h) = Header::parse(&item.body)
                    && (h.next_id, h.generation) >= (ours.next_id, ours.generation)
                {
                    return Ok(());
                }
                Precondition::Generation(item.generation)
            }
            Ok(None) => Precondition::Absent,
            Err(e) => return Err(AdminError::Store(e)),
        };
        match kv.insert(BAN_INDEX_ITEM, first, None, when) {
            Ok(()) => return Ok(()),
            Err(KvWriteError::Conflict) => {}
            Err(KvWriteError::Failed(e)) => return Err(AdminError::Store(e)),
        }
    }
    Err(store_error("the ban index kept changing; retry"))
}

/// Adds a ban at `now_ms`: read-modify-write of the log guarded by its generation,
/// retrying when another writer came in between; retires entries older than `retention`
/// in the same write. Then writes the index of the log it wrote and returns it (for the
/// POP's copy).
///
/// # Errors
/// [`AdminError::BadRequest`] for an expression that does not parse (with the column);
/// [`AdminError::TooManyBans`] past `max_bans`; [`AdminError::Store`] when the store fails
/// or keeps changing. A failed index write after the log was written is not an error:
/// the ban is in the authoritative log, and the next [`sync`] indexes it.
pub fn add<K: VersionedKv + ?Sized>(
    kv: &K,
    expr: &str,
    now_ms: u64,
    retention: Duration,
    max_bans: usize,
) -> Result<(AddedBan, Vec<u8>), AdminError> {
    // The current index files every entry it holds: only the new ban is parsed.
    let previous = read_index(kv);
    for _ in 0..MAX_CAS_ATTEMPTS {
        let (mut log, generation) = read_log(kv)?;
        log.retire(now_ms, retention);
        let added = log.add_ban(expr, now_ms, max_bans)?;
        let when = generation.map_or(Precondition::Absent, Precondition::Generation);
        let meta = stamp(log.generation, log.next_id);
        match kv.insert(BAN_LOG_ITEM, &log.to_json(), Some(&meta), when) {
            Ok(()) => {
                let bytes = banindex::encode_with(&log, previous.as_deref());
                let _ = write_index(kv, &bytes);
                return Ok((added, bytes));
            }
            Err(KvWriteError::Conflict) => {}
            Err(KvWriteError::Failed(e)) => return Err(AdminError::Store(e)),
        }
    }
    Err(store_error("the ban log kept changing; retry"))
}

/// What a POP's copy of the index carries beside its bytes (Fastly: the cache entry's user
/// metadata, [`Self::to_bytes`]), so most checks read nothing: the head's length, the
/// floor and the newest entry's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyMeta {
    /// Bytes of the index's head (header, field table, unanchored bans, Bloom filter).
    pub head_len: usize,
    /// Objects stored before this (ms since the epoch) count as banned (id 0).
    pub trimmed_at_ms: u64,
    /// Objects stored at or after this (ms) are covered by no entry.
    pub newest_at_ms: u64,
}

impl CopyMeta {
    /// Encoded length: head length (u32), floor and newest time (u64 each), little-endian.
    pub const LEN: usize = 20;

    /// The metadata of an index with header `h`.
    #[must_use]
    pub fn of(h: &Header) -> Self {
        Self {
            head_len: h.head_len,
            trimmed_at_ms: h.trimmed_at_ms,
            newest_at_ms: h.newest_at_ms,
        }
    }

    /// The [`Self::LEN`] bytes (a head longer than `u32::MAX` is recorded as `u32::MAX`).
    #[must_use]
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut m = [0u8; Self::LEN];
        let head = u32::try_from(self.head_len).unwrap_or(u32::MAX);
        m[..4].copy_from_slice(&head.to_le_bytes());
        m[4..12].copy_from_slice(&self.trimmed_at_ms.to_le_bytes());
        m[12..].copy_from_slice(&self.newest_at_ms.to_le_bytes());
        m
    }

    /// Parses [`Self::to_bytes`]; `None` when too short.
    #[must_use]
    pub fn from_bytes(m: &[u8]) -> Option<Self> {
        let word = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(m.get(at..at + 8)?.try_into().ok()?))
        };
        Some(Self {
            head_len: usize::try_from(u32::from_le_bytes(m.get(..4)?.try_into().ok()?)).ok()?,
            trimmed_at_ms: word(4)?,
            newest_at_ms: word(12)?,
        })
    }
}

/// A POP's copy of the index as the platform holds it: ranged reads of its bytes
/// ([`ColdBytes`]) and its [`CopyMeta`].
pub trait PopCopy: ColdBytes {
    /// What rides with the copy.
    fn meta(&self) -> &CopyMeta;
    /// The head ([`CopyMeta::head_len`] bytes), read once and kept; `None` when
    /// unreadable.
    fn head(&self) -> Option<&[u8]>;
}

/// The bans as one request sees them.
#[derive(Debug)]
pub enum Bans<C> {
    /// No ban can apply (an empty log).
    None,
    /// The bans cannot be known (the store failed and the POP's copy is gone). An object
    /// stored before `since_ms` may be covered by a ban this POP cannot see: it is
    /// refetched, never served as it is (fail closed). Objects stored since were fetched
    /// during the failure and are served.
    Unknown {
        /// When this POP first failed to read the bans, ms since the epoch.
        since_ms: u64,
    },
    /// The POP's copy, read on demand.
    Copy(C),
    /// A whole index in memory (just built or read from the store).
    Whole(Vec<u8>),
}

/// Why a found object may not be served as it is ([`check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Covered {
    /// This entry (its id; 0: stored before the log's floor) covers it.
    Ban(u64),
    /// The bans are unknown ([`Bans::Unknown`]) and it was stored before that began.
    Unknown,
}

/// Checks a found object against the bans newer than it (`req`: the lookup's `req.url`
/// and `req.http.*`). An index that cannot be read counts as no ban for this lookup (the
/// copy is replaced at the next sync; the JSON log keeps the ban). Source: Varnish's
/// lookup-time ban check (docs/ban.md).
pub fn check<C: PopCopy, R: BanRequest + ?Sized>(
    bans: &Bans<C>,
    meta: &Meta,
    req: &R,
) -> Option<Covered> {
    let stored = meta.ban_at().as_millis();
    let found = match bans {
        Bans::None => None,
        Bans::Unknown { since_ms } => return (stored < *since_ms).then_some(Covered::Unknown),
        Bans::Copy(copy) => {
            let m = copy.meta();
            if stored < m.trimmed_at_ms {
                Some(0)
            } else if m.newest_at_ms <= stored {
                None
            } else {
                copy.head()
                    .and_then(|head| BanIndex::from_head(head).ok())
                    .and_then(|ix| ix.check(copy, meta, req).ok())
                    .flatten()
            }
        }
        Bans::Whole(bytes) => BanIndex::from_head(bytes)
            .and_then(|ix| ix.check(bytes.as_slice(), meta, req))
            .ok()
            .flatten(),
    };
    found.map(Covered::Ban)
}

/// A lookup of a POP's copy ([`PopCache::lookup`]).
#[derive(Debug)]
pub struct CopyLookup<L, C> {
    /// The open lookup (holding the obligation to refresh the copy, when granted).
    pub lookup: L,
    /// This request must refresh the copy (missing, or older than the sync interval).
    pub refresh: bool,
    /// The copy found, if readable (fresh, or stale while another request refreshes it).
    pub copy: Option<C>,
}

/// Where a POP keeps its copy of the index and its failure marker (Fastly: two core-cache
/// entries, the copy's refresh under the core cache's obligation). [`current`] drives it.
pub trait PopCache {
    /// An open lookup of the copy (holding the obligation to refresh it, when granted).
    type Lookup;
    /// The copy as found.
    type Copy: PopCopy;
    /// Looks up the copy.
    ///
    /// # Errors
    /// The platform's message when the lookup itself failed.
    fn lookup(&mut self) -> Result<CopyLookup<Self::Lookup, Self::Copy>, String>;
    /// Replaces the copy with `index` under the lookup's obligation (nothing without one).
    fn publish(&mut self, lookup: Self::Lookup, index: &[u8]);
    /// Gives up the lookup's obligation: the next request refreshes.
    fn cancel(&mut self, lookup: Self::Lookup);
    /// When this POP first failed to read the bans (the failure marker), ms, if marked.
    fn failed_since(&mut self) -> Option<u64>;
    /// Marks this POP as failing to read the bans since `since_ms`.
    fn mark_failed(&mut self, since_ms: u64);
    /// Removes the failure marker.
    fn clear_failed(&mut self);
}

/// The bans as one request at `now_ms` sees them, and the text of a failure to log: the
/// POP's copy while it is fresh (or while another request refreshes it); else the index
/// synced from the store ([`sync`], the store opened by `open` only then) and published
/// as the new copy; when the store fails, the previous copy if there is one, else
/// [`Bans::Unknown`] since the POP first failed (fail closed: an accepted ban is never
/// skipped because it cannot be read). A failed copy lookup goes to the store directly.
pub fn current<P, K>(
    pop: &mut P,
    open: impl FnOnce() -> Result<K, AdminError>,
    now_ms: u64,
) -> (Bans<P::Copy>, Option<String>)
where
    P: PopCache,
    K: VersionedKv,
{
    let (lookup, found, lookup_error) = match pop.lookup() {
        Ok(CopyLookup {
            refresh: false,
            copy: Some(copy),
            ..
        }) => return (Bans::Copy(copy), None),
        Ok(l) => (Some(l.lookup), l.copy, None),
        Err(e) => (None, None, Some(e)),
    };
    match open().and_then(|kv| sync(&kv)) {
        Ok(bytes) => {
            if let Some(l) = lookup {
                pop.publish(l, &bytes);
            }
            if pop.failed_since().is_some() {
                pop.clear_failed();
            }
            (Bans::Whole(bytes), lookup_error)
        }
        Err(e) => {
            if let Some(l) = lookup {
                pop.cancel(l);
            }
            let bans = found.map_or_else(
                || {
                    let since_ms = pop.failed_since().unwrap_or_else(|| {
                        pop.mark_failed(now_ms);
                        now_ms
                    });
                    Bans::Unknown { since_ms }
                },
                Bans::Copy,
            );
            let why = lookup_error.map_or_else(|| e.to_string(), |l| format!("{l}; {e}"));
            (bans, Some(why))
        }
    }
}

/// A copy held in memory (tests, and platforms that keep the index in memory).
#[derive(Debug)]
pub struct InMemoryCopy {
    bytes: Vec<u8>,
    meta: CopyMeta,
}

impl InMemoryCopy {
    /// A copy of `bytes`; `None` when they are no index.
    #[must_use]
    pub fn new(bytes: Vec<u8>) -> Option<Self> {
        let meta = CopyMeta::of(&Header::parse(&bytes).ok()?);
        Some(Self { bytes, meta })
    }
}

impl ColdBytes for InMemoryCopy {
    fn read(&self, at: usize, len: usize) -> Result<Cow<'_, [u8]>, IndexError> {
        self.bytes.as_slice().read(at, len)
    }
}

impl PopCopy for InMemoryCopy {
    fn meta(&self) -> &CopyMeta {
        &self.meta
    }
    fn head(&self) -> Option<&[u8]> {
        self.bytes.get(..self.meta.head_len)
    }
}

#[cfg(test)]
mod tests;
