//! A compact, versioned binary index of the ban log that one request queries without decoding all of it (the edge's per-request ban check).
//!
//! On Fastly every request runs in a fresh instance, so whatever a request needs to know
//! about bans must be read and queried within that request. The JSON [`BanLog`] stays the
//! authoritative record; this index is derived from it ([`encode`]) and answers exactly
//! what [`BanLog::check`] answers (property-tested), at a cost that does not grow with the
//! number of indexed bans:
//!
//! * **Head** (read by every request, [`BanIndex::from_head`]): an 80-byte header (magic
//!   `CBIX`, [`VERSION`], the log's generation and `next_id`, floor, newest ban time,
//!   section counts, checksums), the table of anchored fields with their prefix lengths,
//!   the bans no index can answer (time-sorted, with their expression text) and a Bloom
//!   filter over every indexed key (10 bits per key, [`BLOOM_HASHES`] probes, about 1%
//!   false positives).
//! * **Cold part** (read in small ranges only when the Bloom filter says "maybe",
//!   [`ColdBytes`]): a hash directory, the key table sorted by hash, the records (ban
//!   time, id) of each key newest first, and the key and expression bytes.
//!
//! Each ban (a [`Kind::Ban`] or [`Kind::Purge`] entry; soft purges never ban) is filed under
//! its anchor ([`cachet_ban::anchor`]): exact value, anchored prefix or whitespace token of
//! one field (`req.url`, `obj.http.x-url`, `obj.http.surrogate-key`, …). A check looks up
//! the object's own values (the URL, each prefix length some ban uses, each surrogate key)
//! and visits only bans filed under them that are newer than the object (Varnish: a ban
//! applies to objects inserted before it). A ban whose whole expression is its anchor
//! needs no evaluation; any other candidate is parsed (regexes compiled) only when it is
//! newer than the object checked. Bans with no anchor (`req.url ~ "\.jpg$"`, `obj.ttl >
//! 1h`, …) are evaluated one by one against objects older than them, as Varnish does, so
//! they are the one part of the cost that grows with their count (docs/ban.md, "Cost per
//! request").
//!
//! All integers are little-endian. Decoding never panics: every offset is bounds-checked
//! and bad bytes give an [`IndexError`].

use std::borrow::Cow;
use std::collections::BTreeMap;

use cachet_ban::{AnchorKind, BanExpr, BanRequest, BanTarget};

use crate::banlog::{BanLog, Kind};
use crate::object::Meta;

/// The first four bytes of every index.
pub const MAGIC: [u8; 4] = *b"CBIX";

/// Layout version this build writes and reads. A reader refuses other versions
/// ([`IndexError::Version`]); the edge then falls back to the JSON log.
pub const VERSION: u16 = 1;

/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 80;

/// Bloom filter probes per key (with 10 bits per key: about 1% false positives).
pub const BLOOM_HASHES: u64 = 6;

/// Bloom filter bits per indexed key.
const BLOOM_BITS_PER_KEY: usize = 10;

const KEY_ENTRY_LEN: usize = 28;
const RECORD_LEN: usize = 32;
const SCAN_ENTRY_LEN: usize = 24;

const KIND_EXACT: u8 = 1;
const KIND_PREFIX: u8 = 2;
const KIND_TOKEN: u8 = 4;

/// Why an index could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IndexError {
    /// Fewer bytes than the header or than the header announces.
    #[error("ban index truncated: {have} bytes, {need} needed")]
    Truncated {
        /// Bytes given.
        have: usize,
        /// Bytes the layout needs.
        need: usize,
    },
    /// Not an index (the first bytes are not [`MAGIC`]).
    #[error("not a ban index (bad magic)")]
    Magic,
    /// Written by a layout version this build does not read.
    #[error("ban index layout version {0}; this build reads {VERSION}")]
    Version(u16),
    /// A section or offset points outside the bytes, or a count is implausible.
    #[error("ban index corrupt: {0}")]
    Corrupt(&'static str),
    /// A checksum does not match ([`BanIndex::from_bytes`] only).
    #[error("ban index checksum mismatch in the {0}")]
    Checksum(&'static str),
    /// The cold part could not be read (the adapter's reason).
    #[error("ban index unreadable: {0}")]
    Read(String),
}

/// Read access to the whole index's bytes by range, for the cold part: a slice in memory,
/// or the adapter's ranged read of its stored copy (Fastly: one core-cache handle).
pub trait ColdBytes {
    /// `len` bytes at offset `at` from the index's first byte.
    ///
    /// # Errors
    /// [`IndexError::Truncated`] past the end; [`IndexError::Read`] for the adapter's
    /// failures.
    fn read(&self, at: usize, len: usize) -> Result<Cow<'_, [u8]>, IndexError>;
}

impl ColdBytes for [u8] {
    fn read(&self, at: usize, len: usize) -> Result<Cow<'_, [u8]>, IndexError> {
        at.checked_add(len)
            .and_then(|end| self.get(at..end))
            .map(Cow::Borrowed)
            .ok_or(IndexError::Truncated {
                have: self.len(),
                need: at.saturating_add(len),
            })
    }
}

impl ColdBytes for Vec<u8> {
    fn read(&self, at: usize, len: usize) -> Result<Cow<'_, [u8]>, IndexError> {
        self.as_slice().read(at, len)
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.saturating_add(2))?.try_into().ok()?,
    ))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.saturating_add(4))?.try_into().ok()?,
    ))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.saturating_add(8))?.try_into().ok()?,
    ))
}

fn usize_at(b: &[u8], at: usize) -> Option<usize> {
    u32_at(b, at).and_then(|v| usize::try_from(v).ok())
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Incremental FNV-1a (64-bit) over a key's kind, field and bytes; [`fmix`] finishes it.
#[derive(Clone, Copy)]
struct KeyHasher(u64);

impl KeyHasher {
    fn new(kind: u8, field: u16) -> Self {
        let mut h = Self(FNV_OFFSET);
        h.push(&[kind]);
        h.push(&field.to_le_bytes());
        h
    }
    fn push(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(FNV_PRIME);
        }
    }
    fn finish(self) -> u64 {
        fmix(self.0)
    }
}

/// MurmurHash3's 64-bit finalizer: spreads FNV's low-entropy high bits.
fn fmix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

fn key_hash(kind: u8, field: u16, key: &[u8]) -> u64 {
    let mut h = KeyHasher::new(kind, field);
    h.push(key);
    h.finish()
}

/// Word-wise checksum of `bytes` (not cryptographic: it catches truncation and bit rot).
fn checksum(bytes: &[u8]) -> u32 {
    let mut h = FNV_OFFSET ^ bytes.len() as u64;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
        h = (h ^ w).wrapping_mul(FNV_PRIME).rotate_left(23);
    }
    for &b in chunks.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(FNV_PRIME);
    }
    let h = fmix(h);
    #[allow(clippy::cast_possible_truncation, reason = "folding 64 bits into 32")]
    let folded = (h ^ (h >> 32)) as u32;
    folded
}

fn bloom_bits(h: u64, m: u64) -> impl Iterator<Item = u64> {
    let h1 = h & 0xffff_ffff;
    let h2 = (h >> 32) | 1;
    (0..BLOOM_HASHES).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % m)
}

/// The header fields of an index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The log's [`BanLog::generation`] when the index was built.
    pub generation: u64,
    /// The log's [`BanLog::next_id`] when the index was built: with `generation`, the
    /// stamp that orders two indexes of one log (every accepted ban raises it).
    pub next_id: u64,
    /// The log's floor ([`BanLog::trimmed_at_ms`]), ms since the epoch.
    pub trimmed_at_ms: u64,
    /// Time of the newest indexed ban, ms since the epoch (0 when there is none).
    pub newest_at_ms: u64,
    /// Bytes every request reads (header included).
    pub head_len: usize,
    /// Bytes of the whole index.
    pub total_len: usize,
    n_fields: usize,
    /// Bans no index answers (evaluated one by one).
    pub scanned: usize,
    /// Distinct indexed keys.
    pub keys: usize,
    /// Indexed bans.
    pub indexed: usize,
    bloom_words: usize,
    dir_bits: u32,
    head_sum: u32,
    cold_sum: u32,
}

impl Header {
    /// Reads the header from the first [`HEADER_LEN`] bytes of an index (what an adapter
    /// reads first, to learn [`Header::head_len`]).
    ///
    /// # Errors
    /// [`IndexError::Truncated`], [`IndexError::Magic`], [`IndexError::Version`],
    /// [`IndexError::Corrupt`] when the lengths contradict each other.
    pub fn parse(b: &[u8]) -> Result<Self, IndexError> {
        if b.len() < HEADER_LEN {
            return Err(IndexError::Truncated {
                have: b.len(),
                need: HEADER_LEN,
            });
        }
        if b.get(..4) != Some(&MAGIC[..]) {
            return Err(IndexError::Magic);
        }
        let bad = IndexError::Corrupt("header");
        let version = u16_at(b, 4).ok_or(bad.clone())?;
        if version != VERSION {
            return Err(IndexError::Version(version));
        }
        let h = Header {
            generation: u64_at(b, 8).ok_or(bad.clone())?,
            next_id: u64_at(b, 16).ok_or(bad.clone())?,
            trimmed_at_ms: u64_at(b, 24).ok_or(bad.clone())?,
            newest_at_ms: u64_at(b, 32).ok_or(bad.clone())?,
            head_len: usize_at(b, 40).ok_or(bad.clone())?,
            total_len: usize_at(b, 44).ok_or(bad.clone())?,
            n_fields: usize_at(b, 48).ok_or(bad.clone())?,
            scanned: usize_at(b, 52).ok_or(bad.clone())?,
            keys: usize_at(b, 56).ok_or(bad.clone())?,
            indexed: usize_at(b, 60).ok_or(bad.clone())?,
            bloom_words: usize_at(b, 64).ok_or(bad.clone())?,
            dir_bits: u32_at(b, 68).ok_or(bad.clone())?,
            head_sum: u32_at(b, 72).ok_or(bad.clone())?,
            cold_sum: u32_at(b, 76).ok_or(bad.clone())?,
        };
        if h.head_len < HEADER_LEN || h.total_len < h.head_len || h.dir_bits > 24 {
            return Err(bad);
        }
        Ok(h)
    }
}

/// One anchored field of the head's field table.
#[derive(Debug, Clone, Copy)]
struct FieldEntry<'a> {
    name: &'a str,
    kinds: u8,
    /// Distinct prefix lengths in use, ascending (u16 each).
    prefix_lens: &'a [u8],
}

/// An index opened for queries: its head parsed in place (nothing copied), the cold part
/// read through a [`ColdBytes`] on demand.
#[derive(Debug, Clone)]
pub struct BanIndex<'a> {
    header: Header,
    fields: Vec<FieldEntry<'a>>,
    scan: &'a [u8],
    head: &'a [u8],
    bloom: &'a [u8],
}

/// Where the cold sections start (computed from the header alone).
#[derive(Debug, Clone, Copy)]
struct ColdLayout {
    dir: usize,
    dir_len: usize,
    keys: usize,
    records: usize,
}

impl<'a> BanIndex<'a> {
    /// Opens the head of an index: `head` holds at least [`Header::head_len`] bytes (more
    /// are ignored). Checks the structure (every section within bounds), not the
    /// checksums, so that a request pays only for what it reads; [`BanIndex::from_bytes`]
    /// and [`BanIndex::verify`] check those.
    ///
    /// # Errors
    /// Those of [`Header::parse`]; [`IndexError::Truncated`] when `head` is shorter than
    /// the head; [`IndexError::Corrupt`] for a section out of bounds. Never panics.
    pub fn from_head(head: &'a [u8]) -> Result<Self, IndexError> {
        let header = Header::parse(head)?;
        let head = head.get(..header.head_len).ok_or(IndexError::Truncated {
            have: head.len(),
            need: header.head_len,
        })?;
        let mut at = HEADER_LEN;
        let mut fields = Vec::with_capacity(header.n_fields.min(1024));
        let bad = |what| IndexError::Corrupt(what);
        for _ in 0..header.n_fields {
            let kinds = *head.get(at).ok_or(bad("field table"))?;
            let name_len = usize::from(u16_at(head, at + 2).ok_or(bad("field table"))?);
            let n_prefix = usize::from(u16_at(head, at + 4).ok_or(bad("field table"))?);
            at += 6;
            let name = head
                .get(at..at + name_len)
                .and_then(|n| std::str::from_utf8(n).ok())
                .ok_or(bad("field name"))?;
            at += name_len;
            let prefix_lens = head
                .get(at..at + 2 * n_prefix)
                .ok_or(bad("prefix lengths"))?;
            at += 2 * n_prefix;
            fields.push(FieldEntry {
                name,
                kinds,
                prefix_lens,
            });
        }
        let scan_len = header
            .scanned
            .checked_mul(SCAN_ENTRY_LEN)
            .ok_or(bad("scan table"))?;
        let scan_end = at.checked_add(scan_len).ok_or(bad("scan table"))?;
        let scan = head.get(at..scan_end).ok_or(bad("scan table"))?;
        let bloom_len = header
            .bloom_words
            .checked_mul(8)
            .ok_or(bad("bloom filter"))?;
        let bloom_at = header
            .head_len
            .checked_sub(bloom_len)
            .filter(|&b| b >= scan_end)
            .ok_or(bad("bloom filter"))?;
        let bloom = head.get(bloom_at..).ok_or(bad("bloom filter"))?;
        if header.keys > 0 && bloom.is_empty() {
            return Err(bad("bloom filter"));
        }
        Ok(Self {
            header,
            fields,
            scan,
            head,
            bloom,
        })
    }

    /// Opens a whole index held in memory and checks it: structure and both checksums.
    ///
    /// # Errors
    /// Those of [`BanIndex::from_head`]; [`IndexError::Truncated`] or
    /// [`IndexError::Corrupt`] when `bytes` is not exactly [`Header::total_len`] long;
    /// [`IndexError::Checksum`]. Never panics, whatever the bytes.
    pub fn from_bytes(bytes: &'a [u8]) -> Result<Self, IndexError> {
        let index = Self::from_head(bytes)?;
        if bytes.len() != index.header.total_len {
            return Err(IndexError::Truncated {
                have: bytes.len(),
                need: index.header.total_len,
            });
        }
        index.verify(bytes)?;
        Ok(index)
    }

    /// Checks both checksums against `bytes`, the whole index this head came from.
    ///
    /// # Errors
    /// [`IndexError::Checksum`] naming the part that differs; [`IndexError::Truncated`].
    pub fn verify(&self, bytes: &[u8]) -> Result<(), IndexError> {
        let h = &self.header;
        let mut head = bytes
            .get(..h.head_len)
            .ok_or(IndexError::Truncated {
                have: bytes.len(),
                need: h.head_len,
            })?
            .to_vec();
        head[72..80].fill(0);
        if checksum(&head) != h.head_sum {
            return Err(IndexError::Checksum("head"));
        }
        let cold = bytes
            .get(h.head_len..h.total_len)
            .ok_or(IndexError::Truncated {
                have: bytes.len(),
                need: h.total_len,
            })?;
        if checksum(cold) != h.cold_sum {
            return Err(IndexError::Checksum("cold part"));
        }
        let l = self.layout()?;
        if l.records > h.total_len {
            return Err(IndexError::Corrupt("record table"));
        }
        Ok(())
    }

    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    fn layout(&self) -> Result<ColdLayout, IndexError> {
        let h = &self.header;
        let bad = IndexError::Corrupt("cold layout");
        let dir_len = (1usize << h.dir_bits) + 1;
        let dir = h.head_len;
        let keys = dir.checked_add(dir_len * 4).ok_or(bad.clone())?;
        let records = h
            .keys
            .checked_mul(KEY_ENTRY_LEN)
            .and_then(|k| k.checked_add(keys))
            .ok_or(bad)?;
        Ok(ColdLayout {
            dir,
            dir_len,
            keys,
            records,
        })
    }

    fn bloom_maybe(&self, h: u64) -> bool {
        let m = (self.bloom.len() as u64) * 8;
        if m == 0 {
            return false;
        }
        bloom_bits(h, m).all(|bit| {
            usize::try_from(bit / 8)
                .ok()
                .and_then(|i| self.bloom.get(i))
                .is_some_and(|byte| byte & (1 << (bit % 8)) != 0)
        })
    }

    /// Whether `obj` is banned for a lookup by `req`: exactly [`BanLog::check`] on the log
    /// this index was built from. `Some(0)` when the object was stored before the floor,
    /// `Some(id)` for a matching ban or hard purge newer than the object (one of them),
    /// `None` when none applies.
    ///
    /// Reads the cold part through `cold` only for keys the Bloom filter admits; parses a
    /// ban's expression only when the ban is newer than the object and its anchor matched
    /// (or it has no anchor).
    ///
    /// # Errors
    /// [`IndexError`] when the cold part is unreadable or corrupt (the caller falls back
    /// to the JSON log). Never panics.
    pub fn check<C, R>(&self, cold: &C, obj: &Meta, req: &R) -> Result<Option<u64>, IndexError>
    where
        C: ColdBytes + ?Sized,
        R: BanRequest + ?Sized,
    {
        let stored = obj.ban_at().as_millis();
        if stored < self.header.trimmed_at_ms {
            return Ok(Some(0));
        }
        if self.header.newest_at_ms <= stored {
            return Ok(None);
        }
        let view = obj.ban_view();
        let q = Query {
            index: self,
            cold,
            stored,
            view: &view,
            req,
        };
        if let Some(id) = q.indexed()? {
            return Ok(Some(id));
        }
        q.scanned()
    }

    /// Whether the expression of a candidate, newer than the object, matches it.
    fn matches_expr<T, R>(expr: &[u8], obj: &T, req: &R, at_ms: u64) -> bool
    where
        T: BanTarget + ?Sized,
        R: BanRequest + ?Sized,
    {
        #[allow(clippy::cast_precision_loss, reason = "ms since the epoch fit f64")]
        let added_s = at_ms as f64 / 1000.0;
        std::str::from_utf8(expr)
            .ok()
            .and_then(|t| BanExpr::parse(t).ok())
            .is_some_and(|e| e.matches(obj, Some(req), added_s))
    }
}

/// One check in progress.
struct Query<'q, 'a, C: ?Sized, T: ?Sized, R: ?Sized> {
    index: &'q BanIndex<'a>,
    cold: &'q C,
    stored: u64,
    view: &'q T,
    req: &'q R,
}

impl<C, T, R> Query<'_, '_, C, T, R>
where
    C: ColdBytes + ?Sized,
    T: BanTarget + ?Sized,
    R: BanRequest + ?Sized,
{
    /// The anchored bans: every key the object's values lead to.
    fn indexed(&self) -> Result<Option<u64>, IndexError> {
        if self.index.header.keys == 0 {
            return Ok(None);
        }
        let mut buf = [0u8; 5];
        for (i, f) in self.index.fields.iter().enumerate() {
            let Ok(fi) = u16::try_from(i) else { break };
            let Some(v) = field_value(f.name, self.view, self.req, &mut buf) else {
                continue;
            };
            if f.kinds & KIND_EXACT != 0
                && let Some(id) = self.probe(KIND_EXACT, fi, v.as_bytes(), None)?
            {
                return Ok(Some(id));
            }
            if f.kinds & KIND_TOKEN != 0 {
                for t in v.split_whitespace() {
                    if let Some(id) = self.probe(KIND_TOKEN, fi, t.as_bytes(), None)? {
                        return Ok(Some(id));
                    }
                }
            }
            if f.kinds & KIND_PREFIX != 0 {
                let mut h = KeyHasher::new(KIND_PREFIX, fi);
                let mut done = 0usize;
                for l in f.prefix_lens.chunks_exact(2) {
                    let l = usize::from(u16::from_le_bytes([l[0], l[1]]));
                    let Some(part) = v.as_bytes().get(done..l) else {
                        break;
                    };
                    h.push(part);
                    done = l;
                    let key = v.as_bytes().get(..l).unwrap_or_default();
                    if let Some(id) = self.probe(KIND_PREFIX, fi, key, Some(h.finish()))? {
                        return Ok(Some(id));
                    }
                }
            }
        }
        Ok(None)
    }

    /// Looks `key` up: the Bloom filter first, then the cold part.
    fn probe(
        &self,
        kind: u8,
        field: u16,
        key: &[u8],
        hash: Option<u64>,
    ) -> Result<Option<u64>, IndexError> {
        let h = hash.unwrap_or_else(|| key_hash(kind, field, key));
        if !self.index.bloom_maybe(h) {
            return Ok(None);
        }
        let l = self.index.layout()?;
        let bucket = if self.index.header.dir_bits == 0 {
            0
        } else {
            usize::try_from(h >> (64 - self.index.header.dir_bits)).unwrap_or(0)
        };
        if bucket + 1 >= l.dir_len {
            return Err(IndexError::Corrupt("hash directory"));
        }
        let dir = self.cold.read(l.dir.saturating_add(bucket * 4), 8)?;
        let (from, to) = (usize_at(&dir, 0), usize_at(&dir, 4));
        let (Some(from), Some(to)) = (from, to) else {
            return Err(IndexError::Corrupt("hash directory"));
        };
        if from > to || to > self.index.header.keys {
            return Err(IndexError::Corrupt("hash directory"));
        }
        let entries = self.cold.read(
            l.keys.saturating_add(from.saturating_mul(KEY_ENTRY_LEN)),
            (to - from).saturating_mul(KEY_ENTRY_LEN),
        )?;
        for e in entries.chunks_exact(KEY_ENTRY_LEN) {
            let bad = || IndexError::Corrupt("key table");
            if u64_at(e, 0).ok_or_else(bad)? != h
                || u16_at(e, 24).ok_or_else(bad)? != field
                || e.get(26) != Some(&kind)
            {
                continue;
            }
            let rec_start = usize_at(e, 8).ok_or_else(bad)?;
            let rec_count = usize_at(e, 12).ok_or_else(bad)?;
            let key_off = usize_at(e, 16).ok_or_else(bad)?;
            let key_len = usize_at(e, 20).ok_or_else(bad)?;
            if key_len != key.len() || *self.cold.read(key_off, key_len)? != *key {
                continue;
            }
            if rec_start.saturating_add(rec_count) > self.index.header.indexed {
                return Err(bad());
            }
            let at = l
                .records
                .saturating_add(rec_start.saturating_mul(RECORD_LEN));
            if let Some(id) = self.records(at, rec_count)? {
                return Ok(Some(id));
            }
        }
        Ok(None)
    }

    /// The records of one key, newest first: the first newer than the object that matches.
    fn records(&self, at: usize, count: usize) -> Result<Option<u64>, IndexError> {
        let recs = self.cold.read(at, count.saturating_mul(RECORD_LEN))?;
        for r in recs.chunks_exact(RECORD_LEN) {
            let bad = || IndexError::Corrupt("record");
            let at_ms = u64_at(r, 0).ok_or_else(bad)?;
            if at_ms <= self.stored {
                break;
            }
            let id = u64_at(r, 8).ok_or_else(bad)?;
            if r.get(24) == Some(&1) {
                return Ok(Some(id));
            }
            let off = usize_at(r, 16).ok_or_else(bad)?;
            let len = usize_at(r, 20).ok_or_else(bad)?;
            let expr = self.cold.read(off, len)?;
            if BanIndex::matches_expr(&expr, self.view, self.req, at_ms) {
                return Ok(Some(id));
            }
        }
        Ok(None)
    }

    /// The bans no index answers that are newer than the object, evaluated one by one.
    fn scanned(&self) -> Result<Option<u64>, IndexError> {
        let scan = self.index.scan;
        let n = scan.len() / SCAN_ENTRY_LEN;
        let at = |i: usize| u64_at(scan, i * SCAN_ENTRY_LEN).unwrap_or(0);
        // Entries are in time order: binary search for the first newer than the object.
        let (mut lo, mut hi) = (0usize, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if at(mid) <= self.stored {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        for e in scan.chunks_exact(SCAN_ENTRY_LEN).skip(lo) {
            let bad = || IndexError::Corrupt("scan table");
            let at_ms = u64_at(e, 0).ok_or_else(bad)?;
            let id = u64_at(e, 8).ok_or_else(bad)?;
            let off = usize_at(e, 16).ok_or_else(bad)?;
            let len = usize_at(e, 20).ok_or_else(bad)?;
            let expr = off
                .checked_add(len)
                .and_then(|end| self.index.head.get(off..end))
                .ok_or_else(bad)?;
            if at_ms > self.stored && BanIndex::matches_expr(expr, self.view, self.req, at_ms) {
                return Ok(Some(id));
            }
        }
        Ok(None)
    }
}

/// The value a ban field reads (`req.url`, `req.http.<n>`, `obj.status`, `obj.http.<n>`,
/// the surrogate-key header from [`BanTarget::surrogate_keys`]); `None` when absent or not
/// a string field.
fn field_value<'v, T, R>(
    name: &str,
    obj: &'v T,
    req: &'v R,
    buf: &'v mut [u8; 5],
) -> Option<&'v str>
where
    T: BanTarget + ?Sized,
    R: BanRequest + ?Sized,
{
    if name == "req.url" {
        Some(req.url())
    } else if let Some(n) = name.strip_prefix("req.http.") {
        req.header(n)
    } else if name == "obj.status" {
        let mut n = obj.status();
        let mut i = buf.len();
        loop {
            i -= 1;
            buf[i] = b'0' + u8::try_from(n % 10).unwrap_or(0);
            n /= 10;
            if n == 0 || i == 0 {
                break;
            }
        }
        std::str::from_utf8(&buf[i..]).ok()
    } else if let Some(n) = name.strip_prefix("obj.http.") {
        if n == cachet_ban::SURROGATE_KEY_HEADER {
            obj.surrogate_keys()
        } else {
            obj.header(n)
        }
    } else {
        None
    }
}

/// One indexed ban while encoding.
struct Rec {
    at_ms: u64,
    id: u64,
    complete: bool,
    /// The expression kept for evaluation (empty when complete).
    expr: String,
    /// [`checksum`] of the log entry's expression text (recognizes the entry later).
    text_sum: u32,
}

/// Builds the index of `log` (its live bans and hard purges; soft purges never ban, and an
/// entry whose expression no longer parses is left out, as [`BanLog::check`] does).
/// Deterministic: the same log gives the same bytes.
///
/// Cost: one parse per entry (regexes of unanchored bans are validated, not kept), so
/// O(entries) parses on the admin call, never on a lookup; [`encode_with`] skips the
/// parses of entries an earlier index already filed.
pub fn encode(log: &BanLog) -> Vec<u8> {
    encode_with(log, None)
}

/// Where an entry is filed.
#[derive(Debug, Clone)]
enum Filed {
    /// Under an anchor: field name, kind, key, complete, expression (empty when complete).
    Anchored(String, u8, String, bool, String),
    /// In the scan list.
    Scan,
}

fn classify(text: &str) -> Option<Filed> {
    let expr = BanExpr::parse(text).ok()?;
    let Some(a) = cachet_ban::anchor(&expr) else {
        return Some(Filed::Scan);
    };
    let kind = match a.kind {
        AnchorKind::Exact => KIND_EXACT,
        AnchorKind::Prefix => KIND_PREFIX,
        AnchorKind::Token => KIND_TOKEN,
    };
    let kept = if a.complete {
        String::new()
    } else {
        text.to_owned()
    };
    Some(Filed::Anchored(
        a.field.to_string(),
        kind,
        a.key.to_owned(),
        a.complete,
        kept,
    ))
}

/// How an earlier index filed each of its entries, by id, time and a checksum of the
/// expression text (an entry never changes; the time and text guard against an index of
/// another log, such as one from before the KV store was emptied). Empty when `bytes` is not an intact index.
fn filed_by_id(bytes: &[u8]) -> std::collections::HashMap<(u64, u64, u32), Filed> {
    let mut out = std::collections::HashMap::new();
    let Ok(ix) = BanIndex::from_bytes(bytes) else {
        return out;
    };
    for e in ix.scan.chunks_exact(SCAN_ENTRY_LEN) {
        let text = usize_at(e, 16)
            .zip(usize_at(e, 20))
            .and_then(|(off, len)| ix.head.get(off..off.checked_add(len)?));
        if let (Some(at_ms), Some(id), Some(text)) = (u64_at(e, 0), u64_at(e, 8), text) {
            out.insert((id, at_ms, checksum(text)), Filed::Scan);
        }
    }
    let Ok(l) = ix.layout() else { return out };
    let str_at = |off: Option<usize>, len: Option<usize>| -> Option<String> {
        let (off, len) = (off?, len?);
        let b = bytes.get(off..off.checked_add(len)?)?;
        String::from_utf8(b.to_vec()).ok()
    };
    for k in 0..ix.header.keys {
        let e = l.keys.saturating_add(k.saturating_mul(KEY_ENTRY_LEN));
        let Some(e) = bytes.get(e..e.saturating_add(KEY_ENTRY_LEN)) else {
            break;
        };
        let field = u16_at(e, 24).and_then(|f| ix.fields.get(usize::from(f)));
        let (Some(field), Some(&kind)) = (field, e.get(26)) else {
            continue;
        };
        let Some(key) = str_at(usize_at(e, 16), usize_at(e, 20)) else {
            continue;
        };
        let (start, count) = (usize_at(e, 8).unwrap_or(0), usize_at(e, 12).unwrap_or(0));
        for r in 0..count {
            let at = l
                .records
                .saturating_add(start.saturating_add(r).saturating_mul(RECORD_LEN));
            let Some(r) = bytes.get(at..at.saturating_add(RECORD_LEN)) else {
                break;
            };
            let (Some(at_ms), Some(id), Some(expr), Some(sum)) = (
                u64_at(r, 0),
                u64_at(r, 8),
                str_at(usize_at(r, 16), usize_at(r, 20)),
                u32_at(r, 28),
            ) else {
                continue;
            };
            let complete = r.get(24) == Some(&1);
            out.insert(
                (id, at_ms, sum),
                Filed::Anchored(field.name.to_owned(), kind, key.clone(), complete, expr),
            );
        }
    }
    out
}

/// As [`encode`], reusing how `previous` (an earlier index of the same log, if intact)
/// filed the entries it holds, so that only new entries are parsed: the admin call's cost
/// becomes O(entries) copies plus one parse per new ban. The result is byte for byte what
/// [`encode`] gives.
pub fn encode_with(log: &BanLog, previous: Option<&[u8]>) -> Vec<u8> {
    let known = previous.map(filed_by_id).unwrap_or_default();
    let mut entries: Vec<_> = log
        .entries
        .iter()
        .filter(|e| e.kind != Kind::SoftPurge)
        .collect();
    entries.sort_by_key(|e| (e.at_ms, e.id));
    let mut field_names: Vec<String> = Vec::new();
    let mut groups: BTreeMap<(u8, u16, String), Vec<Rec>> = BTreeMap::new();
    let mut scan: Vec<(u64, u64, String)> = Vec::new();
    let mut newest = 0u64;
    for e in entries {
        let Some(filed) = known
            .get(&(e.id, e.at_ms, checksum(e.expr.as_bytes())))
            .cloned()
            .or_else(|| classify(&e.expr))
        else {
            continue;
        };
        newest = newest.max(e.at_ms);
        let Filed::Anchored(name, kind, key, complete, expr) = filed else {
            scan.push((e.at_ms, e.id, e.expr.clone()));
            continue;
        };
        let fi = field_names
            .iter()
            .position(|n| *n == name)
            .unwrap_or_else(|| {
                field_names.push(name);
                field_names.len() - 1
            });
        groups
            .entry((kind, u16::try_from(fi).unwrap_or(u16::MAX), key))
            .or_default()
            .push(Rec {
                at_ms: e.at_ms,
                id: e.id,
                complete,
                expr,
                text_sum: checksum(e.expr.as_bytes()),
            });
    }
    Encoder::default().finish(log, newest, &field_names, groups, &scan)
}

/// One indexed key while encoding: its hash, `(kind, field, key)` and its records.
type Keyed = (u64, (u8, u16, String), Vec<Rec>);

#[derive(Default)]
struct Encoder {
    out: Vec<u8>,
}

fn put_u32(out: &mut Vec<u8>, v: usize) {
    out.extend_from_slice(&u32::try_from(v).unwrap_or(u32::MAX).to_le_bytes());
}

impl Encoder {
    fn finish(
        mut self,
        log: &BanLog,
        newest: u64,
        field_names: &[String],
        groups: BTreeMap<(u8, u16, String), Vec<Rec>>,
        scan: &[(u64, u64, String)],
    ) -> Vec<u8> {
        let mut keyed: Vec<Keyed> = groups
            .into_iter()
            .map(|(k, mut recs)| {
                recs.sort_by_key(|r| std::cmp::Reverse((r.at_ms, r.id)));
                (key_hash(k.0, k.1, k.2.as_bytes()), k, recs)
            })
            .collect();
        keyed.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let n_keys = keyed.len();
        let n_recs: usize = keyed.iter().map(|k| k.2.len()).sum();
        let out = &mut self.out;
        out.resize(HEADER_LEN, 0);
        field_table(out, field_names, &keyed);
        // Scan table, then its expressions (head strings).
        let scan_at = out.len();
        let mut str_at = scan_at + scan.len() * SCAN_ENTRY_LEN;
        for (at_ms, id, expr) in scan {
            out.extend_from_slice(&at_ms.to_le_bytes());
            out.extend_from_slice(&id.to_le_bytes());
            put_u32(out, str_at);
            put_u32(out, expr.len());
            str_at += expr.len();
        }
        for (_, _, expr) in scan {
            out.extend_from_slice(expr.as_bytes());
        }
        // Bloom filter.
        let bloom_words = if n_keys == 0 {
            0
        } else {
            (n_keys * BLOOM_BITS_PER_KEY).div_ceil(64)
        };
        let mut bloom = vec![0u64; bloom_words];
        let m = (bloom_words as u64) * 64;
        for (h, ..) in &keyed {
            for bit in bloom_bits(*h, m) {
                // Byte-addressed bits: word w holds bytes 8w..8w+8 little-endian.
                let (byte, b) = (bit / 8, bit % 8);
                let w = usize::try_from(byte / 8).unwrap_or(0);
                bloom[w] |= 1u64 << ((byte % 8) * 8 + b);
            }
        }
        for w in &bloom {
            out.extend_from_slice(&w.to_le_bytes());
        }
        let head_len = out.len();
        // Cold: directory, keys, records, strings.
        let dir_bits = dir_bits_for(n_keys);
        let dir_len = (1usize << dir_bits) + 1;
        let keys_at = head_len + dir_len * 4;
        let recs_at = keys_at + n_keys * KEY_ENTRY_LEN;
        let mut strings_at = recs_at + n_recs * RECORD_LEN;
        let mut next = 0usize;
        for b in 0..dir_len {
            while next < n_keys && bucket_of(keyed[next].0, dir_bits) < b {
                next += 1;
            }
            put_u32(out, next);
        }
        let mut strings: Vec<u8> = Vec::new();
        let mut rec_start = 0usize;
        for (h, (kind, f, key), recs) in &keyed {
            out.extend_from_slice(&h.to_le_bytes());
            put_u32(out, rec_start);
            put_u32(out, recs.len());
            put_u32(out, strings_at + strings.len());
            put_u32(out, key.len());
            out.extend_from_slice(&f.to_le_bytes());
            out.push(*kind);
            out.push(0);
            strings.extend_from_slice(key.as_bytes());
            rec_start += recs.len();
        }
        strings_at += strings.len();
        let mut expr_strings: Vec<u8> = Vec::new();
        for (.., recs) in &keyed {
            for r in recs {
                out.extend_from_slice(&r.at_ms.to_le_bytes());
                out.extend_from_slice(&r.id.to_le_bytes());
                put_u32(out, strings_at + expr_strings.len());
                put_u32(out, r.expr.len());
                out.extend_from_slice(&[u8::from(r.complete), 0, 0, 0]);
                out.extend_from_slice(&r.text_sum.to_le_bytes());
                expr_strings.extend_from_slice(r.expr.as_bytes());
            }
        }
        out.extend_from_slice(&strings);
        out.extend_from_slice(&expr_strings);
        let total_len = out.len();
        let counts = [
            head_len,
            total_len,
            field_names.len(),
            scan.len(),
            n_keys,
            n_recs,
            bloom_words,
        ];
        out[..HEADER_LEN].copy_from_slice(&header_bytes(log, newest, counts, dir_bits));
        let head_sum = checksum(&out[..head_len]);
        let cold_sum = checksum(&out[head_len..]);
        out[72..76].copy_from_slice(&head_sum.to_le_bytes());
        out[76..80].copy_from_slice(&cold_sum.to_le_bytes());
        self.out
    }
}

/// The field table: per field, the kinds of keys filed under it and its prefix lengths.
fn field_table(out: &mut Vec<u8>, field_names: &[String], keyed: &[Keyed]) {
    for (i, name) in field_names.iter().enumerate() {
        let fi = u16::try_from(i).unwrap_or(u16::MAX);
        let mut kinds = 0u8;
        let mut lens: Vec<u16> = Vec::new();
        for (_, (kind, f, key), _) in keyed {
            if *f == fi {
                kinds |= kind;
                if *kind == KIND_PREFIX {
                    lens.push(u16::try_from(key.len()).unwrap_or(u16::MAX));
                }
            }
        }
        lens.sort_unstable();
        lens.dedup();
        out.push(kinds);
        out.push(0);
        out.extend_from_slice(&u16::try_from(name.len()).unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&u16::try_from(lens.len()).unwrap_or(0).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        for l in lens {
            out.extend_from_slice(&l.to_le_bytes());
        }
    }
}

/// The fixed header; the checksums are zero (filled in last).
fn header_bytes(log: &BanLog, newest: u64, counts: [usize; 7], dir_bits: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_LEN);
    h.extend_from_slice(&MAGIC);
    h.extend_from_slice(&VERSION.to_le_bytes());
    h.extend_from_slice(&0u16.to_le_bytes());
    h.extend_from_slice(&log.generation.to_le_bytes());
    h.extend_from_slice(&log.next_id.to_le_bytes());
    h.extend_from_slice(&log.trimmed_at_ms.to_le_bytes());
    h.extend_from_slice(&newest.to_le_bytes());
    for v in counts {
        put_u32(&mut h, v);
    }
    h.extend_from_slice(&dir_bits.to_le_bytes());
    h.extend_from_slice(&[0; 8]);
    h
}

/// Directory size: about four keys per bucket.
fn dir_bits_for(n_keys: usize) -> u32 {
    let mut bits = 0u32;
    while bits < 24 && (1usize << bits) * 4 < n_keys {
        bits += 1;
    }
    bits
}

fn bucket_of(h: u64, bits: u32) -> usize {
    if bits == 0 {
        0
    } else {
        usize::try_from(h >> (64 - bits)).unwrap_or(0)
    }
}
