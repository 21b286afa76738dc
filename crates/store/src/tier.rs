//! The two cache tiers: a per-worker in-VM LRU in front of a bounded shared-data tier.
//!
//! Shared-data layout (one Envoy process, every worker VM of the plugin sees it):
//!
//! | key | value |
//! |---|---|
//! | `cachet.o.<slot>` | one object: [`StoredObject`] encoded by [`StoredObject::encode`] |
//! | `cachet.dir` | the directory: bytes accounted, CLOCK queue of `(slot, size, visited, version, stored_at, end, fingerprint)` |
//! | `cachet.hashkey` | the process's 128-bit SipHash key ([`hash_key`]) |
//!
//! A cache key lives in exactly one slot, `siphash13(hashkey, key) % slots`
//! (direct-mapped), so a lookup is one `get_shared_data`, and the number of shared-data
//! keys the filter ever creates is bounded by the slot count (proxy-wasm ABI 0.2.1 cannot
//! delete a key; a cleared slot holds an empty value). The hash is keyed with a random key
//! made once per Envoy process, so a client cannot pick URLs that land on a chosen hot
//! object's slot.
//!
//! Scan resistance (CLOCK, second chance): workers report the objects they served on their
//! tick ([`SharedTier::mark_visited`]); a visited object survives one eviction sweep and
//! one slot collision (the newcomer is not admitted), an unvisited one goes first. A flood
//! of one-time URLs therefore evicts other one-time URLs, not the hot set.
//!
//! Memory bound: the directory accounts every object's encoded size, and an insert
//! commits (CAS on `cachet.dir`) only when the total stays within `envoy.shared_bytes`
//! after evicting: first entries past their keep window, then the oldest inserted (FIFO).
//! Victims are cleared before the new object is written, so the bytes held in object
//! slots never exceed the bound at any moment.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;

use cachet_policy::object::{self, BanView, Meta};
use cachet_refresh::Timestamp;
use serde::{Deserialize, Serialize};

use crate::SharedData;

/// Prefix of every shared-data key the filter uses.
pub const PREFIX: &str = "cachet.";

/// Prefix of the directory shards' keys (`cachet.dir.<shard>`).
const DIR_PREFIX: &str = "cachet.dir.";

/// Key of the running totals over every shard: bytes, objects (`u64` LE each).
const TOTALS_KEY: &str = "cachet.dir.totals";

/// Shared-tier bytes per directory shard when sizing the shard count.
pub const SHARD_BYTES: u64 = 4 << 20;

/// Most directory shards.
pub const MAX_SHARDS: u64 = 64;

/// The key of directory shard `shard`.
fn dir_key(shard: u32) -> String {
    format!("{DIR_PREFIX}{shard}")
}

/// Directory shards for a byte bound: one per [`SHARD_BYTES`], 1..=[`MAX_SHARDS`]. Each
/// shard accounts its slots (`slot % shards`) against `bound / shards`, so an insert
/// rewrites one shard, not the whole directory.
pub fn shard_count(shared_bytes: u64) -> u32 {
    u32::try_from((shared_bytes / SHARD_BYTES).clamp(1, MAX_SHARDS)).unwrap_or(1)
}

/// Fewest object slots, whatever the byte bound.
pub const MIN_SLOTS: u64 = 1024;

/// Most object slots (bounds the shared-data keys the filter can create).
pub const MAX_SLOTS: u64 = 1 << 20;

/// Bytes of shared tier per slot when sizing the slot table (`shared_bytes / 1 KiB`).
pub const BYTES_PER_SLOT: u64 = 1024;

/// CAS retries on the directory before an insert gives up (the object is then served but
/// not stored; counted as `store_conflicts`).
pub const DIR_CAS_RETRIES: usize = 16;

/// Magic prefix of an encoded object (format version 3: the insert version, then
/// [`Header`] around `cachet_policy::object::Meta`; objects of an earlier filter are
/// misses).
const OBJ_MAGIC: &[u8; 4] = b"CO3\0";

/// Magic prefix of the encoded directory (format version 2: visited bits, fingerprints).
const DIR_MAGIC: &[u8; 4] = b"CD2\0";

/// Bytes of one directory record.
const DIR_RECORD: usize = 40;

/// The `size` bit that marks a record visited.
const VISITED: u32 = 1 << 31;

/// Shared-data key of the slot hash's key.
pub const HASH_KEY: &str = "cachet.hashkey";

/// The process's slot-hash key: the 16 bytes under [`HASH_KEY`], made from `fresh` by the
/// first VM that finds none (compare-and-swap, so every worker of the process agrees).
/// Call after [`crate::init`] created the entry.
pub fn hash_key(sd: &dyn SharedData, fresh: [u64; 2]) -> [u64; 2] {
    let parse = |v: &[u8]| -> Option<[u64; 2]> {
        Some([
            u64::from_le_bytes(v.get(..8)?.try_into().ok()?),
            u64::from_le_bytes(v.get(8..16)?.try_into().ok()?),
        ])
    };
    for _ in 0..4 {
        let (v, cas) = sd.get(HASH_KEY);
        if let Some(k) = v.as_deref().and_then(parse) {
            return k;
        }
        let mut b = fresh[0].to_le_bytes().to_vec();
        b.extend_from_slice(&fresh[1].to_le_bytes());
        sd.set(HASH_KEY, &b, cas.or(Some(0)));
    }
    fresh
}

/// Slot count for a byte bound: `shared_bytes / BYTES_PER_SLOT`, clamped to
/// `[MIN_SLOTS, MAX_SLOTS]`.
pub fn slot_count(shared_bytes: u64) -> u64 {
    (shared_bytes / BYTES_PER_SLOT).clamp(MIN_SLOTS, MAX_SLOTS)
}

/// The metadata stored in front of a body: the cache key and insert version the shared tier
/// needs, around the object metadata both adapters share
/// ([`cachet_policy::object::Meta`], layout [`object::META_VERSION`]: status, stored
/// headers, client `Vary`, encoding, lengths, route, host, URL, surrogate keys,
/// `EntryTimes`, validators, per-object tag).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Header {
    /// The cache key (checked on lookup: slots are shared by colliding keys).
    pub key: String,
    /// The directory version of this insert (unique per shared-tier insert).
    pub version: u64,
    /// The object metadata shared with the edge app.
    pub meta: Meta,
}

/// A cached object: header plus stored body (gzip when the route compresses).
#[derive(Debug, Clone)]
pub struct StoredObject {
    /// Metadata.
    pub h: Header,
    /// Stored body bytes.
    pub body: Vec<u8>,
    /// The surrogate keys a ban or purge sees, space-separated: the object's keys, then its
    /// per-object tag. Derived from `h.meta` (never encoded).
    skeys: String,
    /// The stored gzip body inflated, kept by the in-VM tier once an identity client asked
    /// for it ([`Self::with_identity`]), so later identity hits skip the inflate. Never
    /// encoded (the shared tier holds one representation); counted in [`Self::cost`].
    identity: Option<Vec<u8>>,
}

/// The exchange reads a found object's metadata in place (no copy on a hit).
impl cachet_http::exchange::StoredMeta for StoredObject {
    fn meta(&self) -> &cachet_policy::object::Meta {
        &self.h.meta
    }
}

impl StoredObject {
    /// An object under `key` (version 0 until the shared tier assigns one).
    pub fn new(key: String, meta: Meta, body: Vec<u8>) -> Self {
        let skeys = meta.surrogate_key_line();
        Self {
            h: Header {
                key,
                version: 0,
                meta,
            },
            body,
            skeys,
            identity: None,
        }
    }

    /// The inflated body kept by [`Self::with_identity`], if any.
    pub fn identity(&self) -> Option<&[u8]> {
        self.identity.as_deref()
    }

    /// A copy of this object that also keeps `inflated` (its body decoded for an identity
    /// client; the caller inflated it from [`Self::body`]).
    #[must_use]
    pub fn with_identity(&self, inflated: Vec<u8>) -> Self {
        Self {
            identity: Some(inflated),
            ..self.clone()
        }
    }

    /// Encoded form: magic, `u64` LE insert version, `u32` LE header length, header JSON,
    /// body.
    pub fn encode(&self) -> Vec<u8> {
        let head = serde_json::to_vec(&self.h).unwrap_or_default();
        let mut out = Vec::with_capacity(16 + head.len() + self.body.len());
        out.extend_from_slice(OBJ_MAGIC);
        out.extend_from_slice(&self.h.version.to_le_bytes());
        out.extend_from_slice(&u32::try_from(head.len()).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(&head);
        out.extend_from_slice(&self.body);
        out
    }

    /// The insert version of an encoded object, read without decoding it.
    pub fn peek_version(bytes: &[u8]) -> Option<u64> {
        let rest = bytes.strip_prefix(OBJ_MAGIC.as_slice())?;
        Some(u64::from_le_bytes(rest.get(..8)?.try_into().ok()?))
    }

    /// Parses [`encode`](Self::encode)'s output; `None` for anything else (an empty,
    /// cleared slot, a foreign value, or metadata of another layout version: a miss).
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let rest = bytes.strip_prefix(OBJ_MAGIC.as_slice())?.get(8..)?;
        let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        let head = rest.get(4..4 + len)?;
        let h: Header = serde_json::from_slice(head).ok()?;
        if h.meta.v != object::META_VERSION {
            return None;
        }
        let mut obj = Self::new(h.key, h.meta, rest.get(4 + len..)?.to_vec());
        obj.h.version = h.version;
        Some(obj)
    }

    /// Bytes this object costs in a tier (its encoded size is what the bound counts;
    /// approximated for the local tier by body + headers).
    pub fn cost(&self) -> u64 {
        let headers: usize = self
            .h
            .meta
            .headers
            .iter()
            .map(|(n, v)| n.len() + v.len())
            .sum();
        let identity = self.identity.as_ref().map_or(0, Vec::len);
        (self.body.len() + identity + headers + self.h.key.len() + self.skeys.len() + 256) as u64
    }
}

/// The object as a ban target is its [`Meta`] (`obj.http.<name>` from the stored headers,
/// `obj.http.x-url` / `x-host` from the stored URL and host, times from its
/// `EntryTimes`), with one addition: `Meta` keeps its surrogate keys as a list and answers
/// `None` for them, while hard purges here are bans on `obj.http.surrogate-key`, so the
/// object answers its joined keys (and its per-object tag, so one object can be purged
/// alone, as on Fastly).
impl StoredObject {
    /// The object as a ban target (`cachet_policy::object::BanView`, with the key line
    /// computed once per object).
    pub fn ban_view(&self) -> BanView<'_> {
        BanView::with_keys(&self.h.meta, &self.skeys)
    }
}

/// One directory record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirEntry {
    /// Object slot.
    pub slot: u32,
    /// Encoded size, bytes (below 2^31).
    pub size: u32,
    /// Served since the CLOCK hand last passed it (a worker reported a hit).
    pub visited: bool,
    /// The cache key's full 64-bit hash (tells a refresh of the same key from a collision).
    pub fingerprint: u64,
    /// Insert version.
    pub version: u64,
    /// When the object was stored, ms since the epoch.
    pub stored_at_ms: u64,
    /// End of its keep window (after which it is useless), ms since the epoch.
    pub end_ms: u64,
}

/// The shared directory: accounting and CLOCK order of the shared tier.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dir {
    /// Next insert version.
    pub next_version: u64,
    /// Sum of the entries' sizes, bytes.
    pub bytes: u64,
    /// Entries, oldest insert first.
    pub entries: VecDeque<DirEntry>,
}

impl Dir {
    /// Binary form: magic, next version, bytes, count, 40-byte records.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + self.entries.len() * DIR_RECORD);
        out.extend_from_slice(DIR_MAGIC);
        out.extend_from_slice(&self.next_version.to_le_bytes());
        out.extend_from_slice(&self.bytes.to_le_bytes());
        out.extend_from_slice(
            &u32::try_from(self.entries.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        for e in &self.entries {
            let size = (e.size & !VISITED) | if e.visited { VISITED } else { 0 };
            out.extend_from_slice(&e.slot.to_le_bytes());
            out.extend_from_slice(&size.to_le_bytes());
            out.extend_from_slice(&e.version.to_le_bytes());
            out.extend_from_slice(&e.stored_at_ms.to_le_bytes());
            out.extend_from_slice(&e.end_ms.to_le_bytes());
            out.extend_from_slice(&e.fingerprint.to_le_bytes());
        }
        out
    }

    /// Parses [`encode`](Self::encode)'s output; an empty or foreign value is an empty
    /// directory.
    pub fn decode(b: &[u8]) -> Self {
        Self::try_decode(b).unwrap_or_default()
    }

    fn try_decode(b: &[u8]) -> Option<Self> {
        let b = b.strip_prefix(DIR_MAGIC.as_slice())?;
        let u64_at = |o: usize| -> Option<u64> {
            Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
        };
        let u32_at = |o: usize| -> Option<u32> {
            Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
        };
        let next_version = u64_at(0)?;
        let bytes = u64_at(8)?;
        let n = u32_at(16)? as usize;
        let mut entries = VecDeque::with_capacity(n);
        for i in 0..n {
            let o = 20 + i * DIR_RECORD;
            let size = u32_at(o + 4)?;
            entries.push_back(DirEntry {
                slot: u32_at(o)?,
                size: size & !VISITED,
                visited: size & VISITED != 0,
                version: u64_at(o + 8)?,
                stored_at_ms: u64_at(o + 16)?,
                end_ms: u64_at(o + 24)?,
                fingerprint: u64_at(o + 32)?,
            });
        }
        Some(Self {
            next_version,
            bytes,
            entries,
        })
    }

    /// Removes the entry of `slot`, if any; returns it.
    pub fn remove_slot(&mut self, slot: u32) -> Option<DirEntry> {
        let i = self.entries.iter().position(|e| e.slot == slot)?;
        let e = self.entries.remove(i)?;
        self.bytes = self.bytes.saturating_sub(u64::from(e.size));
        Some(e)
    }

    /// Plans an insert of `size` bytes for the key hashed to `fingerprint` into `slot`
    /// under `bound`. A different key in the slot is replaced only when it was not visited
    /// since the hand last passed (else it loses its bit and the newcomer is not admitted:
    /// [`Admit::Collision`]); the same key's entry is replaced. Then entries past their
    /// keep window go, then the CLOCK hand sweeps from the oldest insert: a visited entry
    /// loses its bit and moves to the back, an unvisited one is evicted, until the new
    /// total fits.
    ///
    /// # Errors
    /// [`Admit::TooLarge`] when `size` alone exceeds the bound (or 2^31 bytes);
    /// [`Admit::Collision`] as above (the directory changed: write it back).
    #[allow(
        clippy::too_many_arguments,
        reason = "one insert's whole description: where, what, how big, how long, under what bound, when"
    )]
    pub fn plan_insert(
        &mut self,
        slot: u32,
        fingerprint: u64,
        size: u64,
        stored_at_ms: u64,
        end_ms: u64,
        bound: u64,
        now_ms: u64,
    ) -> Result<(DirEntry, Vec<DirEntry>), Admit> {
        if size > bound || size >= u64::from(VISITED) {
            return Err(Admit::TooLarge);
        }
        if let Some(e) = self.entries.iter_mut().find(|e| {
            e.slot == slot && e.fingerprint != fingerprint && e.visited && e.end_ms > now_ms
        }) {
            e.visited = false;
            return Err(Admit::Collision);
        }
        let mut victims = Vec::new();
        if let Some(old) = self.remove_slot(slot) {
            victims.push(old);
        }
        if self.bytes + size > bound {
            let mut kept = VecDeque::with_capacity(self.entries.len());
            for e in self.entries.drain(..) {
                if e.end_ms <= now_ms {
                    self.bytes = self.bytes.saturating_sub(u64::from(e.size));
                    victims.push(e);
                } else {
                    kept.push_back(e);
                }
            }
            self.entries = kept;
        }
        // Every entry is passed at most twice: once to clear its bit, once to evict it.
        let mut budget = self.entries.len() * 2 + 1;
        while self.bytes + size > bound && budget > 0 {
            budget -= 1;
            let Some(mut e) = self.entries.pop_front() else {
                break;
            };
            if e.visited {
                e.visited = false;
                self.entries.push_back(e);
                continue;
            }
            self.bytes = self.bytes.saturating_sub(u64::from(e.size));
            victims.push(e);
        }
        // Versions start at 1: 0 is the lurker's "before everything" cursor.
        self.next_version = self.next_version.max(1);
        let entry = DirEntry {
            slot,
            size: u32::try_from(size).unwrap_or(u32::MAX),
            visited: false,
            fingerprint,
            version: self.next_version,
            stored_at_ms,
            end_ms,
        };
        self.next_version += 1;
        self.bytes += size;
        self.entries.push_back(entry);
        Ok((entry, victims))
    }

    /// Marks the entries of `(slot, version)` pairs visited; returns how many were found.
    pub fn mark(&mut self, served: &[(u32, u64)]) -> usize {
        let mut n = 0;
        for e in &mut self.entries {
            if !e.visited && served.contains(&(e.slot, e.version)) {
                e.visited = true;
                n += 1;
            }
        }
        n
    }
}

/// Why [`Dir::plan_insert`] stored nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Larger than the bound.
    TooLarge,
    /// The slot holds another key that was served since the hand last passed.
    Collision,
}

/// Writes `bytes` (an object of insert `version`, or empty to clear the slot of the
/// victim `version`) into `slot` unless a newer insert already wrote there: compare-and-
/// swap against the slot's current value, so of two inserts racing for one slot after
/// their directory commits, the one the directory accounts for (the newer version) always
/// ends in the slot, and the bytes held never exceed what the directory counts. Returns
/// whether it wrote.
///
/// A slot never written is written at once, unconditionally: Envoy's shared data has no
/// create-if-absent (`proxy_set_shared_data` with a CAS token on a missing key creates it
/// too, proxy-wasm-cpp-host `SharedData::set`), so creating it empty first and then
/// competing by CAS, as this did before, was no safer against a racing first writer and
/// cost two more host calls on every insert into a new slot. Fills of one slot are
/// serialized by the collapsing lock, which is keyed by slot (`locks`); a slot never
/// written that is to be cleared is left alone.
pub fn write_slot(sd: &dyn SharedData, slot: u32, version: u64, bytes: &[u8]) -> bool {
    let key = slot_key(slot);
    for _ in 0..DIR_CAS_RETRIES {
        let (cur, cas) = sd.get(&key);
        let Some(cas) = cas else {
            return !bytes.is_empty() && sd.set(&key, bytes, None);
        };
        let held = cur.as_deref().and_then(StoredObject::peek_version);
        let ours_is_newer = held.is_none_or(|h| {
            if bytes.is_empty() {
                h <= version
            } else {
                h < version
            }
        });
        if !ours_is_newer {
            return false;
        }
        if sd.set(&key, bytes, Some(cas)) {
            return true;
        }
    }
    false
}

/// Shared-data key of an object slot.
pub fn slot_key(slot: u32) -> String {
    format!("{PREFIX}o.{slot}")
}

/// Outcome of a shared-tier insert.
#[derive(Debug, Default)]
pub struct Inserted {
    /// Whether the object was stored.
    pub stored: bool,
    /// Objects evicted to make room (including a colliding object replaced in the slot).
    pub evicted: u64,
    /// Change in the shards' accounted bytes (the object, less what it evicted); added
    /// to the running totals with [`SharedTier::add_totals`] (batched by
    /// `Cache::report_served` on the tick, not per insert).
    pub bytes_delta: i64,
    /// Change in the objects held.
    pub objects_delta: i64,
    /// The insert gave up after [`DIR_CAS_RETRIES`] directory conflicts.
    pub conflict: bool,
    /// Not admitted: its slot holds another key served since the hand last passed.
    pub refused: bool,
}

/// The shared-data tier of one VM (the data is shared; this is the VM's handle).
#[derive(Debug, Clone, Copy)]
pub struct SharedTier {
    /// Object slots.
    pub slots: u64,
    /// Byte bound (`envoy.shared_bytes`).
    pub bound: u64,
    /// The process's slot-hash key ([`hash_key`]).
    pub key: [u64; 2],
    /// Directory shards ([`shard_count`]).
    pub shards: u32,
}

impl SharedTier {
    /// The keyed 64-bit hash of a cache key (SipHash-1-3).
    pub fn fingerprint(&self, key: &str) -> u64 {
        use std::hash::Hasher;
        let mut h = siphasher::sip::SipHasher13::new_with_keys(self.key[0], self.key[1]);
        h.write(key.as_bytes());
        h.finish()
    }

    /// The slot of a cache key.
    pub fn slot_of(&self, key: &str) -> u32 {
        u32::try_from(self.fingerprint(key) % self.slots.max(1)).unwrap_or(0)
    }

    /// The directory shard of `slot`.
    pub fn shard_of(&self, slot: u32) -> u32 {
        slot % self.shards.max(1)
    }

    /// Reads shard `shard` and its CAS token, creating the entry when it does not exist
    /// yet (so every write can be a real compare-and-swap).
    fn read_dir(sd: &dyn SharedData, shard: u32) -> (Dir, Option<u32>) {
        let key = dir_key(shard);
        let (raw, cas) = sd.get(&key);
        if cas.is_none() {
            sd.set(&key, &[], None);
            let (raw, cas) = sd.get(&key);
            return (raw.as_deref().map(Dir::decode).unwrap_or_default(), cas);
        }
        (raw.as_deref().map(Dir::decode).unwrap_or_default(), cas)
    }

    /// Adds to the running totals `cachet.dir.totals` (best effort: a gauge, not the
    /// bound, which each shard keeps itself) and returns them: (bytes, objects).
    pub fn add_totals(sd: &dyn SharedData, bytes: i64, objects: i64) -> (u64, u64) {
        for _ in 0..DIR_CAS_RETRIES {
            let (raw, cas) = sd.get(TOTALS_KEY);
            let raw = raw.unwrap_or_default();
            let at = |o: usize| {
                raw.get(o..o + 8)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u64::from_le_bytes)
            };
            let b = at(0).saturating_add_signed(bytes);
            let n = at(8).saturating_add_signed(objects);
            let mut out = b.to_le_bytes().to_vec();
            out.extend_from_slice(&n.to_le_bytes());
            if cas.is_none() {
                sd.set(TOTALS_KEY, &[], None);
                continue;
            }
            if sd.set(TOTALS_KEY, &out, cas) {
                return (b, n);
            }
        }
        (0, 0)
    }

    /// Marks served objects visited (CLOCK's reference bits): one write per shard they
    /// live in; entries replaced meanwhile (another version) are skipped. Returns how many
    /// were marked.
    pub fn mark_visited(&self, sd: &dyn SharedData, served: &[(u32, u64)]) -> usize {
        let mut shards: Vec<u32> = served.iter().map(|(s, _)| self.shard_of(*s)).collect();
        shards.sort_unstable();
        shards.dedup();
        let mut marked = 0;
        for shard in shards {
            for _ in 0..DIR_CAS_RETRIES {
                let (mut dir, cas) = Self::read_dir(sd, shard);
                let n = dir.mark(served);
                if n == 0 || sd.set(&dir_key(shard), &dir.encode(), cas) {
                    marked += n;
                    break;
                }
            }
        }
        marked
    }

    /// Looks `key` up: the object if its slot holds this key.
    pub fn get(&self, sd: &dyn SharedData, key: &str) -> Option<StoredObject> {
        let (v, _) = sd.get(&slot_key(self.slot_of(key)));
        StoredObject::decode(&v?).filter(|o| o.h.key == key)
    }

    /// Stores `obj` (its `version` is assigned here), evicting as needed.
    pub fn insert(&self, sd: &dyn SharedData, obj: &mut StoredObject, now_ms: u64) -> Inserted {
        let fingerprint = self.fingerprint(&obj.h.key);
        let slot = u32::try_from(fingerprint % self.slots.max(1)).unwrap_or(0);
        let shard = self.shard_of(slot);
        let bound = self.bound / u64::from(self.shards.max(1));
        let mut out = Inserted::default();
        for _ in 0..DIR_CAS_RETRIES {
            let (mut dir, cas) = Self::read_dir(sd, shard);
            let (bytes_before, objects_before) = (dir.bytes, dir.entries.len());
            obj.h.version = dir.next_version.max(1);
            let bytes = obj.encode();
            let end_ms = obj.h.meta.times.keep_end().as_millis();
            let stored_at = obj.h.meta.times.stored_at.as_millis();
            let victims = match dir.plan_insert(
                slot,
                fingerprint,
                bytes.len() as u64,
                stored_at,
                end_ms,
                bound,
                now_ms,
            ) {
                Ok((_, victims)) => victims,
                Err(Admit::TooLarge) => return out,
                Err(Admit::Collision) => {
                    // Not admitted; the occupant's bit cleared (best effort).
                    out.refused = true;
                    sd.set(&dir_key(shard), &dir.encode(), cas);
                    return out;
                }
            };
            if !sd.set(&dir_key(shard), &dir.encode(), cas) {
                continue;
            }
            for v in &victims {
                if v.slot != slot {
                    write_slot(sd, v.slot, v.version, &[]);
                }
            }
            write_slot(sd, slot, obj.h.version, &bytes);
            out.stored = true;
            out.evicted = victims.len() as u64;
            #[allow(clippy::cast_possible_wrap, reason = "shard totals are far below 2^63")]
            {
                out.bytes_delta = dir.bytes as i64 - bytes_before as i64;
                out.objects_delta = dir.entries.len() as i64 - objects_before as i64;
            }
            return out;
        }
        out.conflict = true;
        out
    }

    /// Removes the directory entry of `slot` with `version` (lurker) and, when `clear`,
    /// empties the slot (not when the slot already holds another object). Returns the
    /// bytes the directory accounted for the entry, or `None` when nothing was removed;
    /// the caller subtracts them from the running totals (with [`SharedTier::add_totals`],
    /// batched by `Cache::report_served` as for inserts).
    pub fn remove(&self, sd: &dyn SharedData, slot: u32, version: u64, clear: bool) -> Option<u32> {
        let shard = self.shard_of(slot);
        for _ in 0..DIR_CAS_RETRIES {
            let (mut dir, cas) = Self::read_dir(sd, shard);
            let i = dir
                .entries
                .iter()
                .position(|e| e.slot == slot && e.version == version)?;
            let e = dir.entries.remove(i)?;
            dir.bytes = dir.bytes.saturating_sub(u64::from(e.size));
            if sd.set(&dir_key(shard), &dir.encode(), cas) {
                if clear {
                    write_slot(sd, slot, version, &[]);
                }
                return Some(e.size);
            }
        }
        None
    }

    /// A copy of directory shard `shard`.
    pub fn dir(&self, sd: &dyn SharedData, shard: u32) -> Dir {
        sd.get(&dir_key(shard))
            .0
            .as_deref()
            .map(Dir::decode)
            .unwrap_or_default()
    }

    /// Reads the object in `slot` (whatever its key).
    pub fn get_slot(sd: &dyn SharedData, slot: u32) -> Option<StoredObject> {
        StoredObject::decode(&sd.get(&slot_key(slot)).0?)
    }
}

/// The per-worker in-VM tier: an LRU bounded by bytes.
#[derive(Debug, Default)]
pub struct LocalTier {
    bound: u64,
    bytes: u64,
    clock: u64,
    map: HashMap<String, (Rc<StoredObject>, u64)>,
    order: BTreeMap<u64, String>,
}

impl LocalTier {
    /// An empty tier holding at most `bound` bytes (0 disables it).
    pub fn new(bound: u64) -> Self {
        Self {
            bound,
            ..Self::default()
        }
    }

    /// The object under `key`, marked most recently used.
    pub fn get(&mut self, key: &str) -> Option<Rc<StoredObject>> {
        self.clock += 1;
        let clock = self.clock;
        let (obj, at) = self.map.get_mut(key)?;
        self.order.remove(at);
        *at = clock;
        self.order.insert(clock, key.to_owned());
        Some(Rc::clone(obj))
    }

    /// Inserts (or replaces) `obj`, evicting least recently used entries to stay within
    /// the bound. Returns how many entries were evicted. Objects larger than the bound
    /// are not kept.
    pub fn put(&mut self, obj: Rc<StoredObject>) -> u64 {
        let cost = obj.cost();
        let key = obj.h.key.clone();
        self.remove(&key);
        if cost > self.bound {
            return 0;
        }
        let mut evicted = 0;
        while self.bytes + cost > self.bound {
            let Some((_, k)) = self.order.pop_first() else {
                break;
            };
            if let Some((o, _)) = self.map.remove(&k) {
                self.bytes = self.bytes.saturating_sub(o.cost());
                evicted += 1;
            }
        }
        self.clock += 1;
        self.order.insert(self.clock, key.clone());
        self.map.insert(key, (obj, self.clock));
        self.bytes += cost;
        evicted
    }

    /// Replaces the entry under `obj`'s key with `obj` when it holds the same insert
    /// (same shared-tier version): a richer copy of it ([`StoredObject::with_identity`]).
    /// Returns how many entries were evicted to make room.
    pub fn enrich(&mut self, obj: Rc<StoredObject>) -> u64 {
        let same = self
            .map
            .get(&obj.h.key)
            .is_some_and(|(o, _)| o.h.version == obj.h.version);
        if same { self.put(obj) } else { 0 }
    }

    /// Drops `key`.
    pub fn remove(&mut self, key: &str) {
        if let Some((o, at)) = self.map.remove(key) {
            self.order.remove(&at);
            self.bytes = self.bytes.saturating_sub(o.cost());
        }
    }

    /// Keeps only the entries for which `keep` holds.
    pub fn retain(&mut self, mut keep: impl FnMut(&StoredObject) -> bool) {
        let gone: Vec<String> = self
            .map
            .iter()
            .filter(|(_, (o, _))| !keep(o))
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            self.remove(&k);
        }
    }

    /// Drops every entry stored at or before `at` (a ban-log trim, see `bans.rs`).
    pub fn drop_stored_not_after(&mut self, at: Timestamp) {
        let old: Vec<String> = self
            .map
            .iter()
            .filter(|(_, (o, _))| o.h.meta.ban_at() <= at)
            .map(|(k, _)| k.clone())
            .collect();
        for k in old {
            self.remove(&k);
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}
