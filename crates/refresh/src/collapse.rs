//! Request collapsing: one permit per cache key, bounded wait queues, leases, drop-to-abandon.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::{Rc, Weak};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::RefreshError;
use crate::time::Timestamp;

/// Default [`CollapseConfig::max_waiters`]: requests queued per key behind one origin fetch.
pub const DEFAULT_MAX_WAITERS: usize = 256;
/// Largest accepted [`CollapseConfig::max_waiters`].
pub const MAX_WAITERS_LIMIT: usize = 65_536;
/// Default [`CollapseConfig::max_wait_ms`]: 10 s, longer than a healthy origin fetch and
/// shorter than typical client timeouts.
pub const DEFAULT_MAX_WAIT_MS: u64 = 10_000;
/// Largest accepted [`CollapseConfig::max_wait_ms`] (10 minutes).
pub const MAX_WAIT_MS_LIMIT: u64 = 600_000;
/// Default [`CollapseConfig::lease_ms`]: 30 s, the longest a holder that vanished without
/// dropping its permit (instance crash, lost callback) can block a key.
pub const DEFAULT_LEASE_MS: u64 = 30_000;
/// Largest accepted [`CollapseConfig::lease_ms`] (1 hour).
pub const MAX_LEASE_MS: u64 = 3_600_000;
/// Default [`CollapseConfig::max_keys`]: keys with a fetch in flight at once.
pub const DEFAULT_MAX_KEYS: usize = 10_000;
/// Largest accepted [`CollapseConfig::max_keys`].
pub const MAX_KEYS_LIMIT: usize = 1_000_000;

/// Request-collapsing settings of a route (serde, every field optional):
///
/// ```toml
/// [collapse]
/// max_waiters = 256     # queued requests per key; more get Acquire::Busy
/// max_wait_ms = 10000   # a waiter is timed out after this long (Wake TimedOut)
/// lease_ms = 30000      # a permit older than this is taken over by the next request
/// max_keys = 10000      # keys in flight at once; more get Acquire::Bypass
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CollapseConfig {
    /// Most requests queued behind one key's fetch, 0..=[`MAX_WAITERS_LIMIT`]; 0 means
    /// never queue (every follower without a stale copy gets [`Acquire::Busy`]).
    pub max_waiters: usize,
    /// Longest a queued request waits, ms, 1..=[`MAX_WAIT_MS_LIMIT`].
    pub max_wait_ms: u64,
    /// Lease of a permit, ms, 1..=[`MAX_LEASE_MS`]: after it a new request takes the key
    /// over ([`Acquire::Leader`] with [`Permit::is_takeover`]) even if the holder never
    /// completed or dropped its permit. [`Permit::renew`] extends it.
    pub lease_ms: u64,
    /// Most keys with a fetch in flight, 1..=[`MAX_KEYS_LIMIT`]; bounds the table's memory.
    pub max_keys: usize,
}

impl Default for CollapseConfig {
    fn default() -> Self {
        CollapseConfig {
            max_waiters: DEFAULT_MAX_WAITERS,
            max_wait_ms: DEFAULT_MAX_WAIT_MS,
            lease_ms: DEFAULT_LEASE_MS,
            max_keys: DEFAULT_MAX_KEYS,
        }
    }
}

impl CollapseConfig {
    /// Checks every field against its documented range.
    ///
    /// # Errors
    /// [`RefreshError::InvalidParameter`] with path `max_waiters`, `max_wait_ms`,
    /// `lease_ms` or `max_keys` (prefix it with [`RefreshError::within`]).
    pub fn validate(&self) -> Result<(), RefreshError> {
        if self.max_waiters > MAX_WAITERS_LIMIT {
            return Err(RefreshError::param(
                "max_waiters",
                format!(
                    "must be at most {MAX_WAITERS_LIMIT}, got {}",
                    self.max_waiters
                ),
            ));
        }
        if !(1..=MAX_WAIT_MS_LIMIT).contains(&self.max_wait_ms) {
            return Err(RefreshError::param(
                "max_wait_ms",
                format!(
                    "must be in 1..={MAX_WAIT_MS_LIMIT}, got {}",
                    self.max_wait_ms
                ),
            ));
        }
        if !(1..=MAX_LEASE_MS).contains(&self.lease_ms) {
            return Err(RefreshError::param(
                "lease_ms",
                format!("must be in 1..={MAX_LEASE_MS}, got {}", self.lease_ms),
            ));
        }
        if !(1..=MAX_KEYS_LIMIT).contains(&self.max_keys) {
            return Err(RefreshError::param(
                "max_keys",
                format!("must be in 1..={MAX_KEYS_LIMIT}, got {}", self.max_keys),
            ));
        }
        Ok(())
    }

    fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }
}

/// Identifies one queued request ([`Acquire::Wait`]); unique within its table. The adapter
/// maps it to its paused request (Envoy stream id, …) and resumes that request when a
/// [`Wake`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(u64);

impl Ticket {
    /// The raw id (unique per table, increasing).
    pub const fn get(self) -> u64 {
        self.0
    }
}

/// Why waiters are woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WakeReason {
    /// The leader completed: the object is in the cache; look it up again and serve it.
    Ready,
    /// The leader abandoned (explicitly or by dropping its [`Permit`]): compete again with
    /// [`CollapseTable::try_acquire`]; one of the woken becomes the new leader.
    Abandoned,
    /// The leader's lease ran out (found by [`CollapseTable::tick`]): compete again.
    LeaseExpired,
    /// These waiters reached their `max_wait_ms`: serve stale if the cache has anything
    /// ([`crate::on_origin_error`]), else fetch uncollapsed or answer 503 with `Retry-After`.
    TimedOut,
}

impl WakeReason {
    /// True when the woken requests should call [`CollapseTable::try_acquire`] again
    /// ([`WakeReason::Abandoned`], [`WakeReason::LeaseExpired`]).
    pub const fn should_retry(self) -> bool {
        matches!(self, WakeReason::Abandoned | WakeReason::LeaseExpired)
    }
}

/// Requests to resume, all for one key and one reason. `tickets` is in queue (FIFO) order
/// and may be empty (nothing to do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wake<K> {
    /// The cache key.
    pub key: K,
    /// The queued requests to resume, oldest first.
    pub tickets: Vec<Ticket>,
    /// What they should do next.
    pub reason: WakeReason,
}

/// Result of [`CollapseTable::try_acquire`].
#[derive(Debug)]
#[must_use = "a Leader permit dropped unused abandons the key at once"]
pub enum Acquire<K: Ord + Clone> {
    /// This request fetches from the origin. Call [`Permit::complete`] once the object is
    /// stored (or [`Permit::abandon`] / drop the permit on failure).
    Leader(Permit<K>),
    /// Another request is fetching; park this one until a [`Wake`] lists `ticket` or
    /// `deadline` passes ([`CollapseTable::tick`] reports it then).
    Wait {
        /// This request's place in the queue.
        ticket: Ticket,
        /// `now + max_wait_ms`.
        deadline: Timestamp,
    },
    /// Another request is fetching and the caller said it has a usable copy (refresh-ahead
    /// or stale within grace): serve that copy now, do not wait (RFC 5861 §3).
    ServeStale,
    /// Another request is fetching and this key's queue is full (`max_waiters`): fetch
    /// uncollapsed or answer 503 with `Retry-After` ([`crate::retry_after_secs`]).
    Busy,
    /// The table already tracks `max_keys` keys: fetch without collapsing (no permit).
    Bypass,
}

#[derive(Debug)]
struct Waiter {
    ticket: Ticket,
    deadline: Timestamp,
}

#[derive(Debug)]
struct Slot {
    holder: u64,
    lease_until: Timestamp,
    waiters: VecDeque<Waiter>,
}

#[derive(Debug)]
struct Inner<K> {
    config: CollapseConfig,
    slots: BTreeMap<K, Slot>,
    next_id: u64,
    released: Vec<Wake<K>>,
}

impl<K: Ord + Clone> Inner<K> {
    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Removes the slot if `id` still holds it; returns its waiters.
    fn release(&mut self, key: &K, id: u64, reason: WakeReason) -> Option<Wake<K>> {
        if self.slots.get(key)?.holder != id {
            return None;
        }
        let slot = self.slots.remove(key)?;
        Some(Wake {
            key: key.clone(),
            tickets: slot.waiters.into_iter().map(|w| w.ticket).collect(),
            reason,
        })
    }
}

/// The lock map for request collapsing (one origin fetch per cache key; the rest wait or
/// serve stale), as a sans-IO state machine: every method takes `now` and returns what the
/// adapter must do. Model: pingora-cache `lock.rs` (one writer permit per key, readers
/// wait, a permit dropped without completion lets readers compete again, a lock older than
/// its timeout is taken over), Varnish's waiting list and Fastly's request collapsing.
///
/// **Threading model.** The table is an `Rc<RefCell<…>>` handle (cloning shares it) and is
/// therefore `!Send`: one table per single-threaded Wasm VM (one per Envoy worker; a Fastly
/// Compute instance lives for one request, so there the platform's own collapsing in
/// `cache::core::Transaction` plays this role). The `Rc` lets a [`Permit`] reach its table
/// from `Drop`, which is what makes drop-to-abandon work without threads or locks. No method
/// holds the borrow while running caller code, so borrows cannot conflict.
///
/// **Determinism.** Keys live in a `BTreeMap` (`K: Ord`), so [`CollapseTable::tick`] reports
/// in key order and identical call sequences give identical results on every platform.
///
/// ```
/// use cachet_refresh::{Acquire, CollapseConfig, CollapseTable, Timestamp, WakeReason};
///
/// let table = CollapseTable::new(CollapseConfig::default()).unwrap();
/// let now = Timestamp::from_millis(1_000);
/// let Acquire::Leader(permit) = table.try_acquire(&"k", now, false) else { panic!() };
/// let Acquire::Wait { ticket, .. } = table.try_acquire(&"k", now, false) else { panic!() };
/// assert!(matches!(table.try_acquire(&"k", now, true), Acquire::ServeStale));
/// let wake = permit.complete();
/// assert_eq!((wake.tickets, wake.reason), (vec![ticket], WakeReason::Ready));
/// ```
#[derive(Debug, Clone)]
pub struct CollapseTable<K: Ord + Clone> {
    inner: Rc<RefCell<Inner<K>>>,
}

impl<K: Ord + Clone> CollapseTable<K> {
    /// An empty table.
    ///
    /// # Errors
    /// [`RefreshError::InvalidParameter`] when `config` fails [`CollapseConfig::validate`].
    pub fn new(config: CollapseConfig) -> Result<Self, RefreshError> {
        config.validate()?;
        Ok(CollapseTable {
            inner: Rc::new(RefCell::new(Inner {
                config,
                slots: BTreeMap::new(),
                next_id: 0,
                released: Vec::new(),
            })),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> CollapseConfig {
        self.inner.borrow().config
    }

    /// Asks to fetch `key` from the origin at `now`. `has_usable_copy`: the caller holds a
    /// copy it may serve right away ([`crate::Freshness::RefreshAhead`] or
    /// [`crate::Freshness::Stale`]).
    ///
    /// * key free → [`Acquire::Leader`] (or [`Acquire::Bypass`] if `max_keys` are in flight);
    /// * key held, lease expired → [`Acquire::Leader`] taking over (queued waiters stay and
    ///   are woken by the new leader; the old permit becomes inert);
    /// * key held → [`Acquire::ServeStale`] if `has_usable_copy`, else [`Acquire::Wait`], or
    ///   [`Acquire::Busy`] when `max_waiters` are queued.
    ///
    /// O(log n) in keys in flight; allocates only for a new key or a longer queue.
    pub fn try_acquire(&self, key: &K, now: Timestamp, has_usable_copy: bool) -> Acquire<K> {
        let mut inner = self.inner.borrow_mut();
        let lease = inner.config.lease();
        let max_waiters = inner.config.max_waiters;
        let max_wait = Duration::from_millis(inner.config.max_wait_ms);
        let at_capacity = inner.slots.len() >= inner.config.max_keys;
        let id = inner.id();
        let lease_until = now.saturating_add(lease);
        if let Some(slot) = inner.slots.get_mut(key) {
            if slot.lease_until <= now {
                slot.holder = id;
                slot.lease_until = lease_until;
                drop(inner);
                return Acquire::Leader(self.permit(key.clone(), id, lease_until, true));
            }
            if has_usable_copy {
                return Acquire::ServeStale;
            }
            if slot.waiters.len() >= max_waiters {
                return Acquire::Busy;
            }
            let ticket = Ticket(id);
            let deadline = now.saturating_add(max_wait);
            slot.waiters.push_back(Waiter { ticket, deadline });
            return Acquire::Wait { ticket, deadline };
        }
        if at_capacity {
            return Acquire::Bypass;
        }
        inner.slots.insert(
            key.clone(),
            Slot {
                holder: id,
                lease_until,
                waiters: VecDeque::new(),
            },
        );
        drop(inner);
        Acquire::Leader(self.permit(key.clone(), id, lease_until, false))
    }

    fn permit(&self, key: K, id: u64, lease_until: Timestamp, takeover: bool) -> Permit<K> {
        Permit {
            table: Rc::downgrade(&self.inner),
            key,
            id,
            lease_until,
            takeover,
            settled: false,
        }
    }

    /// Removes a queued request (client went away). Returns whether it was queued.
    pub fn cancel(&self, key: &K, ticket: Ticket) -> bool {
        let mut inner = self.inner.borrow_mut();
        let Some(slot) = inner.slots.get_mut(key) else {
            return false;
        };
        let before = slot.waiters.len();
        slot.waiters.retain(|w| w.ticket != ticket);
        before != slot.waiters.len()
    }

    /// Housekeeping at `now`; call it from the platform's timer (Envoy `on_tick`) and after
    /// handling requests. Returns, in this order:
    /// 1. waiters released by permits dropped since the last call ([`WakeReason::Abandoned`]);
    /// 2. per key (key order): waiters of a holder whose lease ran out
    ///    ([`WakeReason::LeaseExpired`]; the key is freed) and waiters whose deadline passed
    ///    ([`WakeReason::TimedOut`]).
    ///
    /// O(keys in flight + waiters timed out).
    pub fn tick(&self, now: Timestamp) -> Vec<Wake<K>> {
        let mut inner = self.inner.borrow_mut();
        let mut out = std::mem::take(&mut inner.released);
        let mut freed = Vec::new();
        for (key, slot) in &mut inner.slots {
            if slot.lease_until <= now {
                freed.push(key.clone());
                continue;
            }
            if slot.waiters.iter().any(|w| w.deadline <= now) {
                let mut timed_out = Vec::new();
                slot.waiters.retain(|w| {
                    let keep = w.deadline > now;
                    if !keep {
                        timed_out.push(w.ticket);
                    }
                    keep
                });
                out.push(Wake {
                    key: key.clone(),
                    tickets: timed_out,
                    reason: WakeReason::TimedOut,
                });
            }
        }
        for key in freed {
            if let Some(slot) = inner.slots.remove(&key) {
                out.push(Wake {
                    key,
                    tickets: slot.waiters.into_iter().map(|w| w.ticket).collect(),
                    reason: WakeReason::LeaseExpired,
                });
            }
        }
        out
    }

    /// Whether `key` has a fetch in flight whose lease is still valid at `now`.
    pub fn is_locked(&self, key: &K, now: Timestamp) -> bool {
        self.inner
            .borrow()
            .slots
            .get(key)
            .is_some_and(|s| s.lease_until > now)
    }

    /// Keys with a fetch in flight (including expired leases not yet ticked).
    pub fn in_flight(&self) -> usize {
        self.inner.borrow().slots.len()
    }

    /// Requests queued over all keys.
    pub fn waiting(&self) -> usize {
        self.inner
            .borrow()
            .slots
            .values()
            .map(|s| s.waiters.len())
            .sum()
    }
}

/// The right to fetch one key from the origin, from [`Acquire::Leader`]
/// (pingora-cache `lock.rs` write permit; Viceroy's `Obligation`).
///
/// Settle it with [`Permit::complete`] (object stored: waiters get [`WakeReason::Ready`]) or
/// [`Permit::abandon`] (waiters compete again). Dropping it unsettled — an error path, an
/// early return, a cancelled stream — abandons it too: the table frees the key and queues
/// the waiters for the next [`CollapseTable::tick`] with [`WakeReason::Abandoned`].
/// A permit whose lease was taken over by another request, or whose table is gone, is
/// inert: settling it returns a [`Wake`] with no tickets.
#[derive(Debug)]
#[must_use = "dropping a permit abandons the fetch"]
pub struct Permit<K: Ord + Clone> {
    table: Weak<RefCell<Inner<K>>>,
    key: K,
    id: u64,
    lease_until: Timestamp,
    takeover: bool,
    settled: bool,
}

impl<K: Ord + Clone> Permit<K> {
    /// The cache key this permit is for.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// When the lease runs out unless renewed (ms since the epoch).
    pub fn lease_until(&self) -> Timestamp {
        self.lease_until
    }

    /// Whether this permit took the key over from a holder whose lease ran out.
    pub fn is_takeover(&self) -> bool {
        self.takeover
    }

    /// Extends the lease to `now + lease_ms` (a slow but live fetch, e.g. a long body).
    /// Returns false if the permit was taken over (or the table is gone): stop fetching
    /// for the cache, the other leader owns the key.
    pub fn renew(&mut self, now: Timestamp) -> bool {
        let Some(rc) = self.table.upgrade() else {
            return false;
        };
        let Ok(mut inner) = rc.try_borrow_mut() else {
            return false;
        };
        let lease_until = now.saturating_add(inner.config.lease());
        match inner.slots.get_mut(&self.key) {
            Some(slot) if slot.holder == self.id => {
                slot.lease_until = lease_until;
                self.lease_until = lease_until;
                true
            }
            _ => false,
        }
    }

    /// The object is stored: frees the key and returns every waiter with
    /// [`WakeReason::Ready`] (they look the key up again and serve it).
    pub fn complete(mut self) -> Wake<K> {
        self.settle(WakeReason::Ready)
    }

    /// The fetch failed or will not be stored: frees the key and returns every waiter with
    /// [`WakeReason::Abandoned`] (they compete again).
    pub fn abandon(mut self) -> Wake<K> {
        self.settle(WakeReason::Abandoned)
    }

    fn settle(&mut self, reason: WakeReason) -> Wake<K> {
        self.settled = true;
        let released = self.table.upgrade().and_then(|rc| {
            let mut inner = rc.try_borrow_mut().ok()?;
            inner.release(&self.key, self.id, reason)
        });
        released.unwrap_or_else(|| Wake {
            key: self.key.clone(),
            tickets: Vec::new(),
            reason,
        })
    }
}

impl<K: Ord + Clone> Drop for Permit<K> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        self.settled = true;
        if let Some(rc) = self.table.upgrade()
            && let Ok(mut inner) = rc.try_borrow_mut()
            && let Some(wake) = inner.release(&self.key, self.id, WakeReason::Abandoned)
            && !wake.tickets.is_empty()
        {
            inner.released.push(wake);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn table(config: CollapseConfig) -> CollapseTable<String> {
        CollapseTable::new(config).unwrap()
    }

    fn leader(a: Acquire<String>) -> Permit<String> {
        match a {
            Acquire::Leader(p) => p,
            other => panic!("expected leader, got {other:?}"),
        }
    }

    fn wait(a: Acquire<String>) -> Ticket {
        match a {
            Acquire::Wait { ticket, .. } => ticket,
            other => panic!("expected wait, got {other:?}"),
        }
    }

    #[test]
    fn one_leader_waiters_woken_on_completion() {
        let tb = table(CollapseConfig::default());
        let k = "a".to_owned();
        let p = leader(tb.try_acquire(&k, t(0), false));
        let w1 = wait(tb.try_acquire(&k, t(1), false));
        let w2 = wait(tb.try_acquire(&k, t(2), false));
        assert!(matches!(
            tb.try_acquire(&k, t(3), true),
            Acquire::ServeStale
        ));
        // Another key is independent.
        let q = leader(tb.try_acquire(&"b".to_owned(), t(3), false));
        assert_eq!((tb.in_flight(), tb.waiting()), (2, 2));
        let wake = p.complete();
        assert_eq!(wake.tickets, vec![w1, w2]);
        assert_eq!(wake.reason, WakeReason::Ready);
        assert_eq!(q.complete().tickets, vec![]);
        assert_eq!(tb.in_flight(), 0);
        assert!(tb.tick(t(100)).is_empty());
        // Free again.
        let _p = leader(tb.try_acquire(&k, t(5), false));
    }

    #[test]
    fn dropped_permit_releases_waiters_to_compete() {
        let tb = table(CollapseConfig::default());
        let k = "a".to_owned();
        let p = leader(tb.try_acquire(&k, t(0), false));
        let w = wait(tb.try_acquire(&k, t(1), false));
        drop(p);
        assert!(!tb.is_locked(&k, t(2)));
        let wakes = tb.tick(t(2));
        assert_eq!(wakes.len(), 1);
        assert_eq!(wakes[0].tickets, vec![w]);
        assert_eq!(wakes[0].reason, WakeReason::Abandoned);
        assert!(wakes[0].reason.should_retry());
        assert!(tb.tick(t(3)).is_empty());
        let _p2 = leader(tb.try_acquire(&k, t(3), false));
    }

    #[test]
    fn explicit_abandon_returns_waiters() {
        let tb = table(CollapseConfig::default());
        let k = "a".to_owned();
        let p = leader(tb.try_acquire(&k, t(0), false));
        let w = wait(tb.try_acquire(&k, t(1), false));
        let wake = p.abandon();
        assert_eq!(
            (wake.tickets, wake.reason),
            (vec![w], WakeReason::Abandoned)
        );
        assert!(tb.tick(t(2)).is_empty());
    }

    #[test]
    fn expired_lease_is_taken_over_and_old_permit_is_inert() {
        let cfg = CollapseConfig {
            lease_ms: 1_000,
            ..CollapseConfig::default()
        };
        let tb = table(cfg);
        let k = "a".to_owned();
        let mut old = leader(tb.try_acquire(&k, t(0), false));
        let w = wait(tb.try_acquire(&k, t(500), false));
        assert!(tb.is_locked(&k, t(999)));
        assert!(!tb.is_locked(&k, t(1_000)));
        let new = leader(tb.try_acquire(&k, t(1_000), false));
        assert!(new.is_takeover());
        assert!(!old.renew(t(1_001)));
        assert!(old.complete().tickets.is_empty()); // inert
        assert!(tb.is_locked(&k, t(1_001)));
        assert_eq!(new.complete().tickets, vec![w]);
    }

    #[test]
    fn tick_frees_expired_leases_and_times_out_waiters() {
        let cfg = CollapseConfig {
            lease_ms: 10_000,
            max_wait_ms: 2_000,
            ..CollapseConfig::default()
        };
        let tb = table(cfg);
        let (a, b) = ("a".to_owned(), "b".to_owned());
        let _pa = leader(tb.try_acquire(&a, t(0), false));
        let wa = wait(tb.try_acquire(&a, t(0), false));
        let wa2 = wait(tb.try_acquire(&a, t(1_500), false));
        let mut pb = leader(tb.try_acquire(&b, t(0), false));
        let wb = wait(tb.try_acquire(&b, t(9_000), false));
        let wakes = tb.tick(t(2_000));
        assert_eq!(wakes.len(), 1);
        assert_eq!((&wakes[0].key, &wakes[0].tickets), (&a, &vec![wa]));
        assert_eq!(wakes[0].reason, WakeReason::TimedOut);
        assert!(pb.renew(t(5_000))); // b's lease now ends at 15 s
        let wakes = tb.tick(t(10_000));
        // a's lease ended: its remaining waiter is released to compete again.
        assert_eq!(wakes.len(), 1);
        assert_eq!(
            (&wakes[0].key, wakes[0].reason),
            (&a, WakeReason::LeaseExpired)
        );
        assert_eq!(wakes[0].tickets, vec![wa2]);
        assert_eq!(tb.in_flight(), 1);
        assert!(tb.cancel(&b, wb));
        assert!(!tb.cancel(&b, wb));
        assert!(pb.complete().tickets.is_empty());
    }

    #[test]
    fn bounded_queue_and_key_capacity() {
        let cfg = CollapseConfig {
            max_waiters: 1,
            max_keys: 1,
            ..CollapseConfig::default()
        };
        let tb = table(cfg);
        let k = "a".to_owned();
        let _p = leader(tb.try_acquire(&k, t(0), false));
        let _w = wait(tb.try_acquire(&k, t(0), false));
        assert!(matches!(tb.try_acquire(&k, t(0), false), Acquire::Busy));
        assert!(matches!(
            tb.try_acquire(&k, t(0), true),
            Acquire::ServeStale
        ));
        assert!(matches!(
            tb.try_acquire(&"b".to_owned(), t(0), false),
            Acquire::Bypass
        ));
    }

    #[test]
    fn permit_outliving_table_is_harmless() {
        let tb = table(CollapseConfig::default());
        let mut p = leader(tb.try_acquire(&"a".to_owned(), t(0), false));
        drop(tb);
        assert!(!p.renew(t(1)));
        assert!(p.complete().tickets.is_empty());
    }

    #[test]
    fn config_validation_and_serde() {
        let ok = CollapseConfig::default();
        assert_eq!(ok.validate(), Ok(()));
        let cases = [
            (
                CollapseConfig {
                    max_waiters: MAX_WAITERS_LIMIT + 1,
                    ..ok
                },
                "max_waiters",
            ),
            (
                CollapseConfig {
                    max_wait_ms: 0,
                    ..ok
                },
                "max_wait_ms",
            ),
            (CollapseConfig { lease_ms: 0, ..ok }, "lease_ms"),
            (
                CollapseConfig {
                    lease_ms: MAX_LEASE_MS + 1,
                    ..ok
                },
                "lease_ms",
            ),
            (CollapseConfig { max_keys: 0, ..ok }, "max_keys"),
        ];
        for (cfg, path) in cases {
            let err = CollapseTable::<String>::new(cfg)
                .unwrap_err()
                .within("collapse");
            assert_eq!(err.path(), Some(format!("collapse.{path}").as_str()));
        }
        let c: CollapseConfig = toml::from_str("lease_ms = 5000").unwrap();
        assert_eq!(
            c,
            CollapseConfig {
                lease_ms: 5_000,
                ..ok
            }
        );
        assert!(toml::from_str::<CollapseConfig>("lease = 5").is_err());
    }
}
