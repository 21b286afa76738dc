//! A byte-bounded LRU of object metadata (no bodies), slab-backed, as the replay's cache.
//!
//! Objects are identified by a 64-bit hash of their cache key (see `docs/simulate.md` for
//! the collision odds). Each object costs one 48-byte slab node plus one hash-index entry
//! (16 bytes and a control byte, at most 7/8 full): about 70–100 bytes per resident
//! object, however long its key. Eviction is least-recently-used by bytes, as Varnish's
//! default storage does (`malloc`/`file` stevedores keep one LRU list per storage).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Duration;

use cachet_refresh::{Draw, EarlyRefresh, EntryTimes, Freshness, Timestamp, decide};

/// Slab index meaning "none".
const NIL: u32 = u32::MAX;

/// A pass-through hasher: keys are already uniform 64-bit hashes.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A map keyed by already-hashed `u64`s.
pub type HashIndex<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Stored and within its TTL.
    Fresh,
    /// Past its TTL but within grace: served stale while one background fetch refreshes it.
    Stale,
    /// Not stored, or past grace (an object in its keep window is only a base for a
    /// conditional revalidation: a miss).
    Miss,
}

#[derive(Clone, Copy)]
struct Node {
    hash: u64,
    size: u64,
    stored_at: i64,
    ttl: u32,
    grace: u32,
    keep: u32,
    prev: u32,
    next: u32,
    tag: u16,
}

impl Node {
    /// Its times as the engine reads them (`cachet_refresh::EntryTimes`, whole seconds).
    fn times(&self) -> EntryTimes {
        EntryTimes {
            stored_at: ms(self.stored_at),
            ttl: Duration::from_secs(u64::from(self.ttl)),
            grace: Duration::from_secs(u64::from(self.grace)),
            keep: Duration::from_secs(u64::from(self.keep)),
            delta: Duration::ZERO,
        }
    }
}

/// A log time (seconds since the epoch, earlier ones as the epoch) as a [`Timestamp`].
fn ms(secs: i64) -> Timestamp {
    Timestamp::from_millis(u64::try_from(secs).unwrap_or(0).saturating_mul(1000))
}

/// How long an object lives, in whole seconds (saturating at `u32::MAX`, ~136 years).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lifetime {
    /// Freshness lifetime.
    pub ttl: u32,
    /// Stale-while-revalidate window after the TTL.
    pub grace: u32,
    /// Kept after grace only to revalidate.
    pub keep: u32,
}

/// Per-tag (endpoint) resident figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct TagStats {
    /// Bytes resident now.
    pub bytes: u64,
    /// Objects resident now.
    pub objects: u64,
    /// Objects evicted (LRU) so far.
    pub evictions: u64,
    /// Objects removed after TTL + grace + keep so far.
    pub expired: u64,
}

/// The byte-bounded LRU. Not thread-safe; one per simulated side.
pub struct ByteLru {
    capacity: u64,
    used: u64,
    peak: u64,
    nodes: Vec<Node>,
    free: Vec<u32>,
    index: HashIndex<u32>,
    head: u32,
    tail: u32,
    tags: Vec<TagStats>,
}

impl ByteLru {
    /// An empty cache holding at most `capacity` bytes, with `tags` per-tag counters.
    pub fn new(capacity: u64, tags: usize) -> Self {
        Self {
            capacity,
            used: 0,
            peak: 0,
            nodes: Vec::new(),
            free: Vec::new(),
            index: HashIndex::default(),
            head: NIL,
            tail: NIL,
            tags: vec![TagStats::default(); tags],
        }
    }

    /// Bytes resident now (never above the capacity).
    pub fn used(&self) -> u64 {
        self.used
    }

    /// The most bytes ever resident.
    pub fn peak(&self) -> u64 {
        self.peak
    }

    /// Objects resident now.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no object is resident.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Per-tag figures, indexed by tag.
    pub fn tags(&self) -> &[TagStats] {
        &self.tags
    }

    /// Heap bytes this structure uses for its metadata (slab, free list, index).
    pub fn heap_bytes(&self) -> usize {
        self.nodes.capacity() * size_of::<Node>()
            + self.free.capacity() * size_of::<u32>()
            + self.index.capacity() * (size_of::<(u64, u32)>() + 1)
    }

    /// Looks `hash` up at `now`; a hit (fresh or stale) becomes most recently used. An
    /// object past TTL + grace + keep is removed (counted as expired).
    pub fn lookup(&mut self, hash: u64, now: i64) -> Lookup {
        match self.freshness(hash, now) {
            Freshness::Fresh | Freshness::RefreshAhead => Lookup::Fresh,
            Freshness::Stale => Lookup::Stale,
            Freshness::Expired | Freshness::Miss => Lookup::Miss,
        }
    }

    /// The freshness of `hash` at `now` by the engine's rule (`cachet_refresh::decide`,
    /// no early refresh: the log's requests are replayed one at a time); `Miss` when it is
    /// not stored. A hit (fresh or stale) becomes most recently used; an object past
    /// TTL + grace + keep is removed (counted as expired); one in its keep window stays,
    /// untouched.
    pub fn freshness(&mut self, hash: u64, now: i64) -> Freshness {
        let Some(&i) = self.index.get(&hash) else {
            return Freshness::Miss;
        };
        let n = self.nodes[i as usize];
        let f = decide(Some(&n.times()), ms(now), &EarlyRefresh::None, Draw::ONE);
        match f {
            Freshness::Fresh | Freshness::RefreshAhead | Freshness::Stale => self.touch(i),
            Freshness::Expired => {}
            Freshness::Miss => {
                self.remove_at(i);
                self.tags[usize::from(n.tag)].expired += 1;
            }
        }
        f
    }

    /// Stores (or replaces) `hash` with `size` bytes at `now`, evicting least recently
    /// used objects until it fits. Returns `false`, and removes any older copy, when
    /// `size` exceeds the whole capacity.
    pub fn insert(&mut self, hash: u64, size: u64, life: Lifetime, tag: u16, now: i64) -> bool {
        if let Some(&i) = self.index.get(&hash) {
            self.remove_at(i);
        }
        if size > self.capacity {
            return false;
        }
        while self.used + size > self.capacity && self.tail != NIL {
            let t = self.tail;
            let evicted = self.nodes[t as usize].tag;
            self.remove_at(t);
            self.tags[usize::from(evicted)].evictions += 1;
        }
        let node = Node {
            hash,
            size,
            stored_at: now,
            ttl: life.ttl,
            grace: life.grace,
            keep: life.keep,
            prev: NIL,
            next: self.head,
            tag,
        };
        let i = if let Some(i) = self.free.pop() {
            self.nodes[i as usize] = node;
            i
        } else {
            // More than 4 billion resident objects cannot fit any realistic --memory.
            let i = u32::try_from(self.nodes.len()).unwrap_or(NIL - 1);
            self.nodes.push(node);
            i
        };
        if self.head != NIL {
            self.nodes[self.head as usize].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
        self.index.insert(hash, i);
        self.used += size;
        self.peak = self.peak.max(self.used);
        let t = &mut self.tags[usize::from(tag)];
        t.bytes += size;
        t.objects += 1;
        true
    }

    /// The stored copy of `hash`, if stored: its size in bytes, lifetime and the second
    /// it was stored (its age at `now` is `now - stored_at`, the `Age` a shield sends).
    pub fn entry(&self, hash: u64) -> Option<(u64, Lifetime, i64)> {
        self.index.get(&hash).map(|&i| {
            let n = &self.nodes[i as usize];
            let life = Lifetime {
                ttl: n.ttl,
                grace: n.grace,
                keep: n.keep,
            };
            (n.size, life, n.stored_at)
        })
    }

    /// The stored size of `hash`, if stored.
    pub fn size_of(&self, hash: u64) -> Option<u64> {
        self.index.get(&hash).map(|&i| self.nodes[i as usize].size)
    }

    /// Removes `hash` if stored (a response that may no longer be cached replaced it).
    pub fn remove(&mut self, hash: u64) {
        if let Some(&i) = self.index.get(&hash) {
            self.remove_at(i);
        }
    }

    /// Removes every object past TTL + grace + keep at `now` (the expiry thread's job in
    /// Varnish); cost proportional to the resident objects.
    pub fn sweep(&mut self, now: i64) {
        let mut i = self.head;
        while i != NIL {
            let n = self.nodes[i as usize];
            if ms(now) >= n.times().keep_end() {
                self.remove_at(i);
                self.tags[usize::from(n.tag)].expired += 1;
            }
            i = n.next;
        }
    }

    /// Moves node `i` to the front (most recently used).
    fn touch(&mut self, i: u32) {
        if self.head == i {
            return;
        }
        self.unlink(i);
        let n = &mut self.nodes[i as usize];
        n.prev = NIL;
        n.next = self.head;
        if self.head != NIL {
            self.nodes[self.head as usize].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    fn unlink(&mut self, i: u32) {
        let Node { prev, next, .. } = self.nodes[i as usize];
        if prev == NIL {
            self.head = next;
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.nodes[next as usize].prev = prev;
        }
    }

    fn remove_at(&mut self, i: u32) {
        self.unlink(i);
        let n = self.nodes[i as usize];
        self.index.remove(&n.hash);
        self.used -= n.size;
        let t = &mut self.tags[usize::from(n.tag)];
        t.bytes -= n.size;
        t.objects -= 1;
        self.free.push(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIFE: Lifetime = Lifetime {
        ttl: 10,
        grace: 5,
        keep: 5,
    };

    #[test]
    fn fresh_stale_keep_gone() {
        let mut c = ByteLru::new(100, 1);
        assert!(c.insert(1, 10, LIFE, 0, 1000));
        assert_eq!(c.lookup(1, 1000), Lookup::Fresh);
        assert_eq!(c.lookup(1, 1009), Lookup::Fresh);
        assert_eq!(c.lookup(1, 1010), Lookup::Stale);
        assert_eq!(c.lookup(1, 1014), Lookup::Stale);
        // Keep window: a miss, but still resident.
        assert_eq!(c.lookup(1, 1015), Lookup::Miss);
        assert_eq!(c.len(), 1);
        assert_eq!(c.lookup(1, 1020), Lookup::Miss);
        assert_eq!(c.len(), 0);
        assert_eq!(c.tags()[0].expired, 1);
        // A log line slightly out of order (earlier than the store) is fresh.
        c.insert(2, 10, LIFE, 0, 2000);
        assert_eq!(c.lookup(2, 1990), Lookup::Fresh);
    }

    #[test]
    fn evicts_least_recently_used_by_bytes() {
        let mut c = ByteLru::new(100, 2);
        c.insert(1, 40, LIFE, 0, 0);
        c.insert(2, 40, LIFE, 1, 0);
        assert_eq!(c.lookup(1, 1), Lookup::Fresh); // 2 is now least recently used
        c.insert(3, 40, LIFE, 0, 2);
        assert_eq!(c.lookup(2, 3), Lookup::Miss);
        assert_eq!(c.lookup(1, 3), Lookup::Fresh);
        assert_eq!(c.used(), 80);
        assert_eq!(c.tags()[1].evictions, 1);
        assert_eq!((c.tags()[0].objects, c.tags()[0].bytes), (2, 80));
        // Replacing keeps one copy; too large removes the old copy and stores nothing.
        c.insert(1, 50, LIFE, 0, 4);
        assert_eq!(c.used(), 90);
        assert!(!c.insert(1, 101, LIFE, 0, 5));
        assert_eq!((c.len(), c.used()), (1, 40));
        assert_eq!(c.peak(), 90);
    }

    #[test]
    fn sweep_and_slot_reuse() {
        let mut c = ByteLru::new(1000, 1);
        for k in 0..10 {
            c.insert(k, 10, LIFE, 0, i64::try_from(k).unwrap());
        }
        c.sweep(25);
        assert_eq!(c.len(), 4); // stored at 6..=9 are within 20 s
        let before = c.heap_bytes();
        for k in 10..16 {
            c.insert(k, 10, LIFE, 0, 25);
        }
        assert_eq!(c.len(), 10);
        assert_eq!(c.heap_bytes(), before, "freed slots are reused");
        c.remove(15);
        assert_eq!((c.len(), c.used()), (9, 90));
    }

    #[test]
    fn bound_holds_under_churn() {
        let mut c = ByteLru::new(10_000, 1);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for t in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = x % 2000;
            if c.lookup(key, t) == Lookup::Miss {
                c.insert(key, 1 + x % 700, LIFE, 0, t);
            }
            assert!(c.used() <= 10_000);
        }
        assert!(c.tags()[0].evictions > 0);
        // Walking the list agrees with the index.
        let mut n = 0;
        let mut i = c.head;
        while i != NIL {
            n += 1;
            i = c.nodes[i as usize].next;
        }
        assert_eq!(n, c.len());
    }
}
