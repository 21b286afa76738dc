//! Request collapsing: the `[collapse]` settings and the bounded queue of requests parked
//! behind an origin fetch ([`WaitQueue`]).
//!
//! Who fetches is decided by the platform: Fastly's core cache hands the obligation to one
//! request; in Envoy a lease in shared data (`cachet_store::locks`) makes one request of
//! all workers the leader. What is left for Cachet is the queue of the others on one
//! worker, bounded so a stampede cannot grow it without limit.

use std::collections::{BTreeMap, VecDeque};

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
/// max_waiters = 256     # queued requests per key; more are refused (Refused::KeyFull)
/// max_wait_ms = 10000   # a waiter's deadline (WaitQueue::timed_out)
/// lease_ms = 30000      # a fetch lease older than this is taken over by the next request
/// max_keys = 10000      # keys with waiters at once; more are refused (Refused::TooManyKeys)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CollapseConfig {
    /// Most requests queued behind one key's fetch on one worker, 0..=[`MAX_WAITERS_LIMIT`];
    /// 0 means never queue (every follower goes to the origin uncollapsed).
    pub max_waiters: usize,
    /// Longest a queued request waits, ms, 1..=[`MAX_WAIT_MS_LIMIT`].
    pub max_wait_ms: u64,
    /// Lease of a fetch, ms, 1..=[`MAX_LEASE_MS`]: after it a new request takes the key
    /// over even if the holder never completed (a crashed worker, a lost callback).
    pub lease_ms: u64,
    /// Most keys with requests queued at once on one worker, 1..=[`MAX_KEYS_LIMIT`]; with
    /// `max_waiters` it bounds the queue's memory.
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
}

/// Why [`WaitQueue::park`] refused a request (it goes to the origin uncollapsed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refused {
    /// The key already has `max_waiters` requests queued.
    KeyFull,
    /// `max_keys` keys already have requests queued.
    TooManyKeys,
}

/// A request in a [`WaitQueue`]: the adapter's handle and when it stops waiting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parked<W> {
    /// The adapter's handle of the paused request (Envoy: its stream context and job).
    pub waiter: W,
    /// After this the request stops waiting ([`WaitQueue::timed_out`]): `max_wait_ms`
    /// after it parked.
    pub deadline: Timestamp,
}

/// The requests of one worker parked behind origin fetches, per cache key (or any key
/// type the adapter uses, such as Envoy's slot), in arrival order, bounded by
/// `max_waiters` per key and `max_keys` keys (`[collapse]`). Memory: one [`Parked`] per
/// queued request plus one map entry per key; an emptied key's entry is removed.
///
/// The queue does not decide who fetches (the platform's obligation or lease does) nor
/// what a woken request does: the adapter takes a key's requests when its fetch ends
/// ([`Self::take`]) or on its tick ([`Self::take_all`]), answers those it can and puts the
/// rest back ([`Self::requeue`]) with their deadlines. Source: request collapsing as in
/// Varnish's waiting list, bounded as pingora-cache's lock (`max_waiters`), LINE
/// req-shield (one origin request per key while others wait).
#[derive(Debug)]
pub struct WaitQueue<K, W> {
    config: CollapseConfig,
    keys: BTreeMap<K, VecDeque<Parked<W>>>,
    len: usize,
}

impl<K: Ord + Clone, W> WaitQueue<K, W> {
    /// An empty queue bounded by `config` (validated by the caller's config loading;
    /// out-of-range values are used as given).
    pub fn new(config: CollapseConfig) -> Self {
        Self {
            config,
            keys: BTreeMap::new(),
            len: 0,
        }
    }

    /// Parks `waiter` behind `key`'s fetch, with deadline `now + max_wait_ms`.
    ///
    /// # Errors
    /// The waiter back, with [`Refused::KeyFull`] when `key` has `max_waiters` requests
    /// queued, or [`Refused::TooManyKeys`] when `key` has none and `max_keys` keys do.
    pub fn park(&mut self, key: K, waiter: W, now: Timestamp) -> Result<Timestamp, (Refused, W)> {
        let deadline =
            now.saturating_add(std::time::Duration::from_millis(self.config.max_wait_ms));
        let keys = self.keys.len();
        let parked = Parked { waiter, deadline };
        match self.keys.get_mut(&key) {
            Some(q) if q.len() >= self.config.max_waiters => {
                return Err((Refused::KeyFull, parked.waiter));
            }
            Some(q) => q.push_back(parked),
            None if self.config.max_waiters == 0 => return Err((Refused::KeyFull, parked.waiter)),
            None if keys >= self.config.max_keys => {
                return Err((Refused::TooManyKeys, parked.waiter));
            }
            None => {
                self.keys.insert(key, VecDeque::from([parked]));
            }
        }
        self.len += 1;
        Ok(deadline)
    }

    /// Puts back a request taken by [`Self::take`] or [`Self::take_all`] that must keep
    /// waiting, with its deadline, behind those still queued. Never refused: it was
    /// counted when it parked (the bounds may be exceeded only by requests parked since
    /// it was taken).
    pub fn requeue(&mut self, key: K, parked: Parked<W>) {
        self.keys.entry(key).or_default().push_back(parked);
        self.len += 1;
    }

    /// New bounds for requests parked from now on (a configuration reload); those queued
    /// stay.
    pub fn reconfigure(&mut self, config: CollapseConfig) {
        self.config = config;
    }

    /// Removes `key`'s requests for which `gone` is true (their clients went away);
    /// returns how many.
    pub fn cancel(&mut self, key: &K, mut gone: impl FnMut(&W) -> bool) -> usize {
        let Some(q) = self.keys.get_mut(key) else {
            return 0;
        };
        let before = q.len();
        q.retain(|p| !gone(&p.waiter));
        let n = before - q.len();
        if q.is_empty() {
            self.keys.remove(key);
        }
        self.len -= n;
        n
    }

    /// Removes and returns `key`'s requests in arrival order (its fetch ended).
    pub fn take(&mut self, key: &K) -> VecDeque<Parked<W>> {
        let q = self.keys.remove(key).unwrap_or_default();
        self.len -= q.len();
        q
    }

    /// Removes and returns every request, key by key in key order, each key's in arrival
    /// order (the adapter's tick).
    pub fn take_all(&mut self) -> Vec<(K, Parked<W>)> {
        self.len = 0;
        std::mem::take(&mut self.keys)
            .into_iter()
            .flat_map(|(k, q)| q.into_iter().map(move |p| (k.clone(), p)))
            .collect()
    }

    /// Removes and returns the requests whose deadline is at or before `now`.
    pub fn timed_out(&mut self, now: Timestamp) -> Vec<(K, W)> {
        let mut out = Vec::new();
        self.keys.retain(|k, q| {
            let mut kept = VecDeque::with_capacity(q.len());
            for p in q.drain(..) {
                if p.deadline <= now {
                    out.push((k.clone(), p.waiter));
                } else {
                    kept.push_back(p);
                }
            }
            *q = kept;
            !q.is_empty()
        });
        self.len -= out.len();
        out
    }

    /// Requests queued behind `key`.
    pub fn waiting(&self, key: &K) -> usize {
        self.keys.get(key).map_or(0, VecDeque::len)
    }

    /// Requests queued in all.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keys with requests queued.
    pub fn keys(&self) -> usize {
        self.keys.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(max_waiters: usize, max_keys: usize) -> WaitQueue<u32, &'static str> {
        WaitQueue::new(CollapseConfig {
            max_waiters,
            max_keys,
            max_wait_ms: 1_000,
            ..CollapseConfig::default()
        })
    }

    #[test]
    fn bounds_per_key_and_keys() {
        let mut q = queue(2, 2);
        let t = Timestamp::from_millis(10);
        assert_eq!(q.park(1, "a", t), Ok(Timestamp::from_millis(1_010)));
        assert!(q.park(1, "b", t).is_ok());
        assert_eq!(q.park(1, "c", t), Err((Refused::KeyFull, "c")));
        assert!(q.park(2, "d", t).is_ok());
        assert_eq!(q.park(3, "e", t), Err((Refused::TooManyKeys, "e")));
        assert_eq!((q.len(), q.keys(), q.waiting(&1)), (3, 2, 2));
        let taken: Vec<_> = q.take(&1).into_iter().map(|p| p.waiter).collect();
        assert_eq!(taken, ["a", "b"]);
        assert!(q.park(3, "e", t).is_ok(), "a key freed by take makes room");
        assert_eq!((q.len(), q.keys()), (2, 2));
        assert_eq!(q.cancel(&3, |w| *w == "e"), 1);
        assert_eq!(q.cancel(&2, |w| *w == "e"), 0);
        assert_eq!((q.len(), q.keys()), (1, 1), "an emptied key is removed");
    }

    #[test]
    fn zero_waiters_never_queues() {
        let mut q = queue(0, 10);
        assert_eq!(
            q.park(1, "a", Timestamp::from_millis(0)),
            Err((Refused::KeyFull, "a"))
        );
        assert!(q.is_empty());
    }

    #[test]
    fn deadlines_time_out_and_requeue_keeps_them() {
        let mut q = queue(8, 8);
        q.park(1, "early", Timestamp::from_millis(0)).unwrap();
        q.park(1, "late", Timestamp::from_millis(500)).unwrap();
        q.park(2, "other", Timestamp::from_millis(100)).unwrap();
        let all = q.take_all();
        assert!(q.is_empty() && q.keys() == 0);
        assert_eq!(
            all.iter().map(|(k, p)| (*k, p.waiter)).collect::<Vec<_>>(),
            [(1, "early"), (1, "late"), (2, "other")]
        );
        for (k, p) in all {
            q.requeue(k, p);
        }
        assert_eq!(
            q.timed_out(Timestamp::from_millis(1_100)),
            [(1, "early"), (2, "other")]
        );
        assert_eq!((q.len(), q.keys(), q.waiting(&1)), (1, 1, 1));
        assert_eq!(q.timed_out(Timestamp::from_millis(1_500)), [(1, "late")]);
        assert!(q.is_empty() && q.keys() == 0);
    }
}
