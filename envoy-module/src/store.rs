//! The module's process-wide cache: one store every Envoy worker thread reads and writes
//! in place, and the collapsing locks over it (issue 33). Safe Rust only; every rule about
//! what is stored and served is `cachet_http`'s and `cachet_store::cache`'s, this is
//! storage.
//!
//! **Objects** are `Arc<StoredObject>`: a hit clones a pointer under a shard's read lock,
//! never copies or decodes bytes, and a hit on an object another worker filled costs the
//! same as one on its own (there is no per-worker tier to miss in).
//!
//! **Bound.** The store holds at most `[envoy].shared_bytes` bytes of
//! [`StoredObject::cost`], split evenly over [`SHARDS`] shards (a key's shard is a keyed
//! hash of it, so a client cannot aim at one). An object larger than a shard's share is
//! not stored.
//!
//! **Scan resistance** is the shared tier's (`cachet_store::tier`, CLOCK with second
//! chance): a hit sets the object's reference bit; to make room, objects past their keep
//! window go first, then the hand sweeps from the oldest insert, clearing set bits and
//! evicting the first object whose bit is clear. A flood of one-time URLs evicts other
//! one-time URLs, not the hot set.
//!
//! **Locks.** [`Locks::claim`] elects one leader per key across all threads; its
//! [`Permit`] releases the key when dropped (a write, a cancel, the stream's end: no path
//! forgets it, as pingora's `WritePermit`), and waking the followers parked on the key
//! ([`Wake`]) is part of that release.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use cachet_store::tier::StoredObject;

/// Shards of the store (each with its own lock and its share of the bound).
pub const SHARDS: usize = 16;

/// One stored object and its CLOCK reference bit.
#[derive(Debug)]
struct Entry {
    obj: Arc<StoredObject>,
    visited: AtomicBool,
    cost: u64,
    end_ms: u64,
}

#[derive(Debug, Default)]
struct Shard {
    map: HashMap<String, Entry>,
    /// CLOCK order, oldest insert first: `(key, version)`; an entry whose key now holds
    /// another version is stale and skipped.
    queue: VecDeque<(String, u64)>,
    bytes: u64,
    /// Inserts since the last full scan for past-keep objects.
    inserts_since_scan: usize,
}

impl Shard {
    fn remove(&mut self, key: &str) -> Option<Entry> {
        let e = self.map.remove(key)?;
        self.bytes = self.bytes.saturating_sub(e.cost);
        Some(e)
    }

    /// Evicts until `need` more bytes fit under `bound`: past-keep objects first, then
    /// CLOCK. Returns how many objects went. The full scan for past-keep objects runs at
    /// most once per as many inserts as the shard holds objects (amortized O(1) per
    /// insert); in between, the hand evicts a past-keep object it passes whatever its bit.
    fn make_room(&mut self, need: u64, bound: u64, now_ms: u64) -> u64 {
        let mut evicted = 0;
        self.inserts_since_scan += 1;
        if self.bytes + need > bound && self.inserts_since_scan >= self.map.len() {
            self.inserts_since_scan = 0;
            let gone: Vec<String> = (self.map.iter())
                .filter(|(_, e)| e.end_ms <= now_ms)
                .map(|(k, _)| k.clone())
                .collect();
            for k in gone {
                self.remove(&k);
                evicted += 1;
            }
        }
        // Every live entry is passed at most twice: once to clear its bit, once to evict.
        let mut budget = self.queue.len() * 2 + 1;
        while self.bytes + need > bound && budget > 0 {
            budget -= 1;
            let Some((key, version)) = self.queue.pop_front() else {
                break;
            };
            let Some(e) = self.map.get(&key).filter(|e| e.obj.h.version == version) else {
                continue;
            };
            if e.end_ms > now_ms && e.visited.swap(false, Ordering::Relaxed) {
                self.queue.push_back((key, version));
                continue;
            }
            self.remove(&key);
            evicted += 1;
        }
        evicted
    }
}

/// What [`Store::insert`] did.
#[derive(Debug)]
pub struct Inserted {
    /// The object as stored (its version set), or as given when it was not stored.
    pub obj: Arc<StoredObject>,
    /// Whether it is in the store now.
    pub stored: bool,
    /// Objects evicted to make room.
    pub evicted: u64,
}

/// What one [`Store::sweep`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Objects examined.
    pub examined: u64,
    /// Objects removed.
    pub removed: u64,
    /// The oldest ban time (`Meta::ban_at`, ms) of the objects kept.
    pub oldest_ms: Option<u64>,
}

/// The process-wide object store.
#[derive(Debug)]
pub struct Store {
    shards: Box<[RwLock<Shard>]>,
    /// Each shard's share of the bound, bytes.
    bound: u64,
    versions: AtomicU64,
    hasher: RandomState,
}

impl Store {
    /// A store holding at most `bytes` (`[envoy].shared_bytes`).
    pub fn new(bytes: u64) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            bound: bytes / SHARDS as u64,
            versions: AtomicU64::new(1),
            hasher: RandomState::new(),
        }
    }

    fn shard(&self, key: &str) -> &RwLock<Shard> {
        let i = usize::try_from(self.hasher.hash_one(key) % SHARDS as u64).unwrap_or(0);
        &self.shards[i]
    }

    /// The object under `key`, its reference bit set (a read lock: hits on every thread
    /// proceed together).
    pub fn get(&self, key: &str) -> Option<Arc<StoredObject>> {
        let shard = self
            .shard(key)
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let e = shard.map.get(key)?;
        if !e.visited.load(Ordering::Relaxed) {
            e.visited.store(true, Ordering::Relaxed);
        }
        Some(Arc::clone(&e.obj))
    }

    /// Stores `obj` under its key at `now_ms` with a new version, replacing the key's
    /// object; with `unless_newer_than`, only while the key holds no version newer than
    /// that (a 304's freshened copy must not replace another fetch's newer object).
    pub fn insert(
        &self,
        mut obj: StoredObject,
        now_ms: u64,
        unless_newer_than: Option<u64>,
    ) -> Inserted {
        let cost = obj.cost();
        let end_ms = obj.h.meta.times.keep_end().as_millis();
        let mut shard = (self.shard(&obj.h.key).write()).unwrap_or_else(PoisonError::into_inner);
        let newer = |s: &Shard| {
            unless_newer_than.is_some_and(|base| {
                s.map
                    .get(&obj.h.key)
                    .is_some_and(|e| e.obj.h.version > base)
            })
        };
        if cost > self.bound || newer(&shard) {
            return Inserted {
                obj: Arc::new(obj),
                stored: false,
                evicted: 0,
            };
        }
        obj.h.version = self.versions.fetch_add(1, Ordering::Relaxed);
        shard.remove(&obj.h.key);
        let evicted = shard.make_room(cost, self.bound, now_ms);
        if shard.queue.len() > shard.map.len() * 2 + 64 {
            let Shard { map, queue, .. } = &mut *shard;
            queue.retain(|(k, v)| map.get(k).is_some_and(|e| e.obj.h.version == *v));
        }
        let obj = Arc::new(obj);
        let key = obj.h.key.clone();
        shard.queue.push_back((key.clone(), obj.h.version));
        shard.bytes += cost;
        let entry = Entry {
            obj: Arc::clone(&obj),
            visited: AtomicBool::new(false),
            cost,
            end_ms,
        };
        shard.map.insert(key, entry);
        Inserted {
            obj,
            stored: true,
            evicted,
        }
    }

    /// Removes `key`; returns whether it was stored.
    pub fn remove(&self, key: &str) -> bool {
        let mut shard = self
            .shard(key)
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        shard.remove(key).is_some()
    }

    /// The lurker's step over shard `shard` (`0..SHARDS`) at `now_ms`: examines every
    /// object under a read lock (hits go on meanwhile), then removes, under the write lock,
    /// those past their keep window and those `gone` picks (a lurker-friendly ban matches),
    /// unless another version replaced them in between. A shard out of range is empty.
    pub fn sweep(&self, shard: usize, now_ms: u64, gone: impl Fn(&StoredObject) -> bool) -> Swept {
        let Some(lock) = self.shards.get(shard) else {
            return Swept::default();
        };
        let mut out = Swept::default();
        let doomed: Vec<(String, u64)> = {
            let s = lock.read().unwrap_or_else(PoisonError::into_inner);
            out.examined = s.map.len() as u64;
            (s.map.iter())
                .filter(|(_, e)| {
                    let kill = e.end_ms <= now_ms || gone(&e.obj);
                    if !kill {
                        let at = e.obj.h.meta.ban_at().as_millis();
                        out.oldest_ms = Some(out.oldest_ms.map_or(at, |o| o.min(at)));
                    }
                    kill
                })
                .map(|(k, e)| (k.clone(), e.obj.h.version))
                .collect()
        };
        if doomed.is_empty() {
            return out;
        }
        let mut s = lock.write().unwrap_or_else(PoisonError::into_inner);
        for (key, version) in doomed {
            if s.map.get(&key).is_some_and(|e| e.obj.h.version == version) {
                s.remove(&key);
                out.removed += 1;
            }
        }
        out
    }

    /// Bytes and objects held.
    pub fn totals(&self) -> (u64, u64) {
        self.shards.iter().fold((0, 0), |(b, n), s| {
            let s = s.read().unwrap_or_else(PoisonError::into_inner);
            (b + s.bytes, n + s.map.len() as u64)
        })
    }
}

/// Wakes one parked request (the module commits an event to its stream's scheduler).
pub trait Wake: Send + Sync {
    /// Called once, from whichever thread released the key.
    fn wake(&self);
}

/// What [`Locks::claim`] got.
#[derive(Debug)]
pub enum Claimed {
    /// The fill right, until the permit is dropped.
    Leader(Permit),
    /// Another request holds it.
    Follower,
}

/// What [`Locks::park`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parked {
    /// Parked: woken when the key is released.
    Waiting,
    /// The key was released meanwhile: look up again now.
    Released,
    /// `[collapse].max_waiters` wait for the key already.
    Full,
}

#[derive(Default)]
struct Waiting {
    owner: u64,
    waiters: Vec<Arc<dyn Wake>>,
}

/// The collapsing locks: one leader per cache key across the process.
#[derive(Default)]
pub struct Locks {
    held: Mutex<HashMap<String, Waiting>>,
}

impl std::fmt::Debug for Locks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Locks").field("held", &held.len()).finish()
    }
}

impl Locks {
    /// Claims `key` for `owner`.
    pub fn claim(self: &Arc<Self>, key: &str, owner: u64) -> Claimed {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.contains_key(key) {
            return Claimed::Follower;
        }
        held.insert(
            key.to_owned(),
            Waiting {
                owner,
                waiters: Vec::new(),
            },
        );
        Claimed::Leader(Permit {
            locks: Arc::clone(self),
            key: key.to_owned(),
            owner,
        })
    }

    /// Parks `waker` on `key` (at most `max` waiters per key).
    pub fn park(&self, key: &str, waker: Arc<dyn Wake>, max: usize) -> Parked {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(w) = held.get_mut(key) else {
            return Parked::Released;
        };
        if w.waiters.len() >= max {
            return Parked::Full;
        }
        w.waiters.push(waker);
        Parked::Waiting
    }

    /// Takes `waker` off `key`'s queue (its stream ended while parked).
    pub fn cancel(&self, key: &str, waker: &Arc<dyn Wake>) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(w) = held.get_mut(key) {
            w.waiters.retain(|x| !Arc::ptr_eq(x, waker));
        }
    }

    /// Keys held now.
    pub fn held(&self) -> usize {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    fn release(&self, key: &str, owner: u64) {
        let waiters = {
            let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            match held.get(key) {
                Some(w) if w.owner == owner => held.remove(key).map(|w| w.waiters),
                _ => None,
            }
        };
        for w in waiters.into_iter().flatten() {
            w.wake();
        }
    }
}

/// The fill right for one key; dropping it releases the key and wakes its followers.
pub struct Permit {
    locks: Arc<Locks>,
    key: String,
    owner: u64,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (f.debug_struct("Permit").field("key", &self.key))
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.locks.release(&self.key, self.owner);
    }
}

#[cfg(test)]
#[allow(
    clippy::expect_used,
    clippy::panic,
    reason = "tests: a failed expectation is the test's failure"
)]
mod tests {
    use super::*;
    use cachet_policy::object::Meta;
    use cachet_refresh::Timestamp;
    use std::time::Duration;

    fn object(key: &str, body: usize, now_ms: u64) -> StoredObject {
        let meta = Meta::vary_marker(
            "r",
            Timestamp::from_millis(now_ms),
            Duration::from_secs(3600),
            Vec::new(),
        );
        StoredObject::new(key.to_owned(), meta, vec![b'x'; body])
    }

    #[test]
    fn a_stored_object_is_shared_not_copied_and_a_newer_one_replaces_it() {
        let s = Store::new(1 << 20);
        let a = s.insert(object("k", 100, 0), 0, None);
        assert!(a.stored);
        let got = s.get("k").expect("stored");
        assert!(Arc::ptr_eq(&got, &a.obj), "a hit is the stored pointer");
        let b = s.insert(object("k", 50, 0), 0, None);
        assert!(b.obj.h.version > a.obj.h.version);
        assert!(Arc::ptr_eq(&s.get("k").expect("stored"), &b.obj));
        // A freshen based on the first version loses to the newer object.
        let c = s.insert(object("k", 10, 0), 0, Some(a.obj.h.version));
        assert!(!c.stored);
        assert!(Arc::ptr_eq(&s.get("k").expect("kept"), &b.obj));
        assert_eq!(s.totals().1, 1);
        assert!(s.remove("k") && s.get("k").is_none());
        assert_eq!(s.totals(), (0, 0));
    }

    #[test]
    fn the_bytes_stay_within_the_bound_and_an_object_over_a_shard_share_is_refused() {
        let bound = 64 * 1024;
        let s = Store::new(bound);
        for i in 0..2_000 {
            s.insert(object(&format!("k{i}"), 700, 0), 0, None);
            assert!(s.totals().0 <= bound, "{:?} after {i}", s.totals());
        }
        assert!(s.totals().1 > 0);
        let big = s.insert(object("big", 4 * 1024, 0), 0, None);
        assert!(!big.stored && s.get("big").is_none());
    }

    #[test]
    fn a_flood_of_one_time_urls_does_not_evict_the_hot_set() {
        // 16 KiB per shard, ~1 KiB objects: each shard holds about 15.
        let s = Store::new(16 * 1024 * SHARDS as u64);
        let hot: Vec<String> = (0..40).map(|i| format!("hot{i}")).collect();
        for k in &hot {
            s.insert(object(k, 700, 0), 0, None);
        }
        for round in 0..50 {
            for k in &hot {
                assert!(s.get(k).is_some(), "{k} evicted in round {round}");
            }
            for j in 0..20 {
                s.insert(object(&format!("scan{round}.{j}"), 700, 0), 0, None);
            }
        }
    }

    #[test]
    fn objects_past_their_keep_go_before_live_ones() {
        let s = Store::new(8 * 1024 * SHARDS as u64);
        let mut old = object("old", 700, 0);
        old.h.meta.times.keep = Duration::ZERO;
        old.h.meta.times.ttl = Duration::from_secs(1);
        old.h.meta.times.grace = Duration::ZERO;
        s.insert(old, 0, None);
        // Fill the old object's shard with live objects, an hour later.
        let now = 3_600_000;
        let mut live = Vec::new();
        for i in 0..400 {
            let k = format!("live{i}");
            s.insert(object(&k, 700, now), now, None);
            live.push(k);
            if s.get("old").is_none() {
                break;
            }
        }
        assert!(s.get("old").is_none(), "the expired object went first");
        let last = live.last().expect("inserted");
        assert!(s.get(last).is_some());
    }

    struct Count(AtomicU64);
    impl Wake for Count {
        fn wake(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn one_leader_per_key_across_threads_and_dropping_its_permit_wakes_the_followers() {
        let locks = Arc::new(Locks::default());
        let woken = Arc::new(Count(AtomicU64::new(0)));
        let leaders: Vec<Option<Permit>> = std::thread::scope(|sc| {
            let handles: Vec<_> = (0..8)
                .map(|t| {
                    let locks = Arc::clone(&locks);
                    let woken: Arc<dyn Wake> = woken.clone();
                    sc.spawn(move || match locks.claim("k", t) {
                        Claimed::Leader(p) => Some(p),
                        Claimed::Follower => {
                            assert_eq!(locks.park("k", woken, 16), Parked::Waiting);
                            None
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("thread"))
                .collect()
        });
        let mut permits: Vec<Permit> = leaders.into_iter().flatten().collect();
        assert_eq!(permits.len(), 1, "exactly one leader");
        assert_eq!(woken.0.load(Ordering::Relaxed), 0);
        drop(permits.pop());
        assert_eq!(
            woken.0.load(Ordering::Relaxed),
            7,
            "every follower woken once"
        );
        assert_eq!(locks.held(), 0);
        // Released: a late follower is told to look again, a new claim leads.
        assert_eq!(locks.park("k", woken.clone(), 16), Parked::Released);
        assert!(matches!(locks.claim("k", 9), Claimed::Leader(_)));
    }

    #[test]
    fn a_full_queue_refuses_and_a_cancelled_waiter_is_not_woken() {
        let locks = Arc::new(Locks::default());
        let Claimed::Leader(permit) = locks.claim("k", 1) else {
            panic!("first claim leads")
        };
        let a = Arc::new(Count(AtomicU64::new(0)));
        let b = Arc::new(Count(AtomicU64::new(0)));
        let (wa, wb): (Arc<dyn Wake>, Arc<dyn Wake>) = (a.clone(), b.clone());
        assert_eq!(locks.park("k", Arc::clone(&wa), 2), Parked::Waiting);
        assert_eq!(locks.park("k", Arc::clone(&wb), 2), Parked::Waiting);
        assert_eq!(locks.park("k", Arc::clone(&wb), 2), Parked::Full);
        locks.cancel("k", &wa);
        drop(permit);
        assert_eq!(a.0.load(Ordering::Relaxed), 0);
        assert_eq!(b.0.load(Ordering::Relaxed), 1);
    }
}
