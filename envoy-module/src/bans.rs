//! Bans, purges and soft purges in the dynamic module, and its lurker (issue 33).
//!
//! The module keeps one ban log per filter configuration, in process: the same log, the
//! same admin API and the same replica rules as the proxy-wasm filter
//! (`cachet_store::bans`, `cachet_store::admin`), over a thread-safe
//! [`MemoryStore`] instead of proxy-wasm shared data. Every write (an admin call, the
//! invalidation after an unsafe method, the lurker's retirement) updates the one replica
//! before it returns, so a ban or purge applies to every worker thread's next lookup: an
//! admin call is answered after its ban is in force.
//!
//! **Lookups** check an object against the replica under a read lock
//! ([`Bans::check`]); until the first entry is ever added a lookup skips even that.
//!
//! **The lurker** (Varnish's ban lurker, `cachet_store::cache::Cache::lurk`'s rules) runs
//! on the main thread, one step per `[envoy].tick` ([`Bans::lurk`]): it examines whole
//! shards of the [`Store`] until `[bans].lurker_budget` objects were examined, removing
//! those a lurker-friendly ban or hard purge matches, those stored before the log's
//! floor, and those past their keep window. After a full pass it retires what the pass
//! completed (`bans::retire_lurked`, minus the longest a fetch can be out), entries older
//! than `[bans].retention` (`bans::retire_expired`, raising the floor) and entries older
//! than every stored object (`bans::trim_not_after`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError, RwLock};

use cachet_http::Reply;
use cachet_policy::Policy;
use cachet_store::MemoryStore;
use cachet_store::admin::{self, AdminRequest, Effects};
use cachet_store::bans::{self, BanState, Check, Req};
use cachet_store::poller::{Answered, Call, EtcdCall, Poller};
use cachet_store::tier::{LocalTier, StoredObject};

use crate::store::{SHARDS, Store};

/// The ban log of one filter configuration and its replica.
#[derive(Debug)]
pub struct Bans {
    log: MemoryStore,
    replica: RwLock<BanState>,
    /// Set once the log first held an entry (or a floor): until then a lookup takes no lock.
    active: AtomicBool,
    lurker: Mutex<Lurker>,
}

/// Where the lurker is: the next shard, and when its pass started (ms).
#[derive(Debug, Default)]
struct Lurker {
    shard: usize,
    started_ms: u64,
    /// The oldest ban time of the objects kept so far in this pass.
    oldest_ms: Option<u64>,
}

/// What one lurker step did (the module's `cachet.lurker_*` counters).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Lurked {
    /// Objects examined.
    pub examined: u64,
    /// Objects removed.
    pub evicted: u64,
    /// Full passes completed (0 or 1).
    pub passes: u64,
}

impl Default for Bans {
    fn default() -> Self {
        Self::new()
    }
}

impl Bans {
    /// An empty log.
    pub fn new() -> Self {
        let log = MemoryStore::default();
        cachet_store::init(&log, bans::LOG_KEY);
        cachet_store::init(&log, bans::EPOCH_KEY);
        Self {
            log,
            replica: RwLock::default(),
            active: AtomicBool::new(false),
            lurker: Mutex::default(),
        }
    }

    /// Catches the replica up with the log (after every write).
    fn sync(&self) {
        let mut r = self.replica.write().unwrap_or_else(PoisonError::into_inner);
        // The module has no per-worker tier: what a retirement would drop from one is
        // the lurker's to remove from the store, which it did before retiring.
        r.sync(&self.log, &mut LocalTier::new(0));
        if r.live() > 0 || r.floor_ms() > 0 {
            self.active.store(true, Ordering::Release);
        }
    }

    /// The verdict on `obj` looked up by a request for `target` with `fields`
    /// (`BanState::check`: banned, soft-purged or clean).
    pub fn check(&self, obj: &StoredObject, target: &str, fields: &[(String, Vec<u8>)]) -> Check {
        if !self.active.load(Ordering::Acquire) {
            return Check::Clean;
        }
        let req = Req {
            url: target,
            headers: fields,
        };
        (self.replica.read().unwrap_or_else(PoisonError::into_inner)).check(obj, &req)
    }

    /// One admin call at `now_ms` (`cachet_store::admin::handle`), in force for every
    /// thread when this returns.
    pub fn admin(
        &self,
        policy: &Policy,
        req: &AdminRequest,
        body: &[u8],
        now_ms: u64,
    ) -> (Reply, Effects) {
        let answer = admin::handle(&self.log, policy, req, body, now_ms);
        self.sync();
        answer
    }

    /// Hard-purges `keys` (the invalidation after an unsafe method, RFC 9111 §4.4:
    /// `cachet_http::invalidation_keys`); returns how many were added.
    pub fn purge_keys(&self, keys: &[String], max: usize, now_ms: u64) -> u64 {
        let added = bans::purge_keys(&self.log, keys, max, now_ms).map_or(0, |_| keys.len());
        self.sync();
        added as u64
    }

    /// Fleet mode: one admin call at `now_ms` becomes an etcd transaction
    /// (`cachet_store::admin::handle_fleet`, keys made unique by `suffix`), or is answered
    /// at once (refusals, the list); nothing is written here.
    pub fn admin_fleet(
        &self,
        policy: &Policy,
        req: &AdminRequest,
        body: &[u8],
        now_ms: u64,
        suffix: u64,
    ) -> admin::Fleet {
        let prefix = &policy.config().envoy.etcd_prefix;
        admin::handle_fleet(&self.log, policy, req, body, now_ms, prefix, suffix)
    }

    /// Fleet mode: etcd accepted an admin write at `now_ms`; the next tick polls.
    pub fn accepted(&self, now_ms: u64) {
        bans::request_poll(&self.log, now_ms);
    }

    /// Fleet mode: the etcd call due at `now_ms` (`Poller::due` over this log).
    pub fn poll_due(&self, poller: &mut Poller, policy: &Policy, now_ms: u64) -> Option<Call> {
        poller.due(&self.log, policy.config(), now_ms)
    }

    /// Fleet mode: an etcd answer applied to this log (`Poller::answered`), in force for
    /// every thread when this returns.
    pub fn poll_answered(
        &self,
        poller: &mut Poller,
        policy: &Policy,
        what: EtcdCall,
        answer: Option<(u16, &[u8])>,
        now_ms: u64,
    ) -> Answered {
        let done = poller.answered(&self.log, policy.config(), what, answer, now_ms);
        if what == EtcdCall::Poll {
            // Entries added, or only the fleet's floor raised: either changes verdicts.
            self.sync();
        }
        done
    }

    /// The ban feed: a peer's ban list applied (`bans::apply_feed`, at most
    /// `[bans].max_bans` entries), in force for every thread when this returns; how many
    /// entries were added.
    ///
    /// # Errors
    /// The body is not a ban list, or the log refused the entries (`bans::FeedError`).
    pub fn apply_feed(
        &self,
        policy: &Policy,
        body: &[u8],
        now_ms: u64,
    ) -> Result<usize, bans::FeedError> {
        let added = bans::apply_feed(&self.log, body, policy.config().bans.max_bans, now_ms)?;
        if added > 0 {
            self.sync();
        }
        Ok(added)
    }

    /// Live entries in the log.
    pub fn live(&self) -> usize {
        (self.replica.read().unwrap_or_else(PoisonError::into_inner)).live()
    }

    /// One lurker step over `store` at `now_ms` (the module's description).
    pub fn lurk(&self, store: &Store, policy: &Policy, now_ms: u64) -> Lurked {
        let cfg = policy.config();
        let mut at = self.lurker.lock().unwrap_or_else(PoisonError::into_inner);
        if at.shard == 0 {
            at.started_ms = now_ms;
            at.oldest_ms = None;
        }
        let mut done = Lurked::default();
        let replica = self.replica.read().unwrap_or_else(PoisonError::into_inner);
        while at.shard < SHARDS && done.examined < cfg.bans.lurker_budget as u64 {
            let swept = store.sweep(at.shard, now_ms, |o| replica.check_objects_only(o));
            done.examined += swept.examined;
            done.evicted += swept.removed;
            at.oldest_ms = match (at.oldest_ms, swept.oldest_ms) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            at.shard += 1;
        }
        drop(replica);
        if at.shard < SHARDS {
            return done;
        }
        at.shard = 0;
        done.passes = 1;
        // Objects stored in a shard after it was swept are newer than the pass.
        let oldest = at.oldest_ms.unwrap_or(now_ms).min(now_ms);
        let bound = u64::try_from(cfg.origin.first_byte_timeout.0.as_millis()).unwrap_or(u64::MAX);
        let retired = bans::retire_lurked(&self.log, at.started_ms.saturating_sub(bound))
            + bans::retire_expired(&self.log, now_ms, cfg.bans.retention.0)
            + bans::trim_not_after(&self.log, oldest.saturating_sub(bound));
        if retired > 0 {
            self.sync();
        }
        done
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use cachet_policy::Config;
    use cachet_policy::object::Meta;
    use cachet_refresh::Timestamp;
    use std::time::Duration;

    fn policy() -> Policy {
        let mut cfg =
            Config::from_json(r#"{"admin": {"enabled": true, "token": "0123456789abcdef0123"}}"#)
                .unwrap();
        cfg.bans.lurker_budget = 1_000_000;
        Policy::new(cfg).unwrap()
    }

    fn object(key: &str, url: &str, keys: &[&str], stored_ms: u64) -> StoredObject {
        let now = Timestamp::from_millis(stored_ms);
        let mut meta = Meta::vary_marker("static", now, Duration::from_secs(60), Vec::new());
        meta.status = 200;
        meta.url = url.to_owned();
        meta.host = "example.com".to_owned();
        meta.surrogate_keys = keys.iter().map(|k| (*k).to_owned()).collect();
        StoredObject::new(key.to_owned(), meta, b"body".to_vec())
    }

    fn call(b: &Bans, p: &Policy, method: &str, path: &str, body: &str, now: u64) -> Reply {
        let req = AdminRequest {
            method: method.into(),
            path: path.into(),
            authorization: Some("Bearer 0123456789abcdef0123".into()),
            surrogate_key: Some("k1".into()),
            soft: false,
        };
        b.admin(p, &req, body.as_bytes(), now).0
    }

    #[test]
    fn a_ban_applies_to_the_next_lookup_and_the_lurker_removes_what_it_matches_then_retires_it() {
        let (b, p, store) = (Bans::new(), policy(), Store::new(1 << 20));
        let css = object("a", "/a.css", &[], 1_000);
        let keyed = object("c", "/c.css", &["k1"], 1_000);
        let keep = object("k", "/keep.js", &[], 1_000);
        for o in [css.clone(), keyed, keep.clone()] {
            store.insert(o, 1_000, None);
        }
        assert_eq!(b.check(&css, "/a.css", &[]), Check::Clean);
        let r = call(
            &b,
            &p,
            "POST",
            "/.cachet/ban",
            "obj.http.x-url ~ \\.css$",
            2_000,
        );
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        // In force for the next lookup, before any lurker step.
        assert_eq!(b.check(&css, "/a.css", &[]), Check::Banned);
        assert_eq!(b.check(&keep, "/keep.js", &[]), Check::Clean);
        // An object stored after the ban is not covered by it.
        let later = object("a", "/a.css", &[], 2_500);
        assert_eq!(b.check(&later, "/a.css", &[]), Check::Clean);
        assert_eq!(b.live(), 1);
        let step = b.lurk(&store, &p, 3_000);
        assert_eq!((step.examined, step.evicted, step.passes), (3, 2, 1));
        assert!(store.get("a").is_none() && store.get("c").is_none());
        assert!(store.get("k").is_some());
        // The pass completed the ban, but a fetch sent before it may still arrive
        // (`first_byte_timeout`): it stays until a pass started that much later.
        assert_eq!(b.live(), 1);
        let bound = u64::try_from(p.config().origin.first_byte_timeout.0.as_millis()).unwrap();
        b.lurk(&store, &p, 2_001 + bound);
        b.lurk(&store, &p, 2_002 + bound);
        assert_eq!(b.live(), 0, "retired once completed");
    }

    #[test]
    fn purges_and_soft_purges_go_through_the_admin_api_and_a_req_ban_is_not_lurked() {
        let (b, p, store) = (Bans::new(), policy(), Store::new(1 << 20));
        let c = object("c", "/c.css", &["k1"], 1_000);
        store.insert(c.clone(), 1_000, None);
        let req = AdminRequest {
            method: "POST".into(),
            path: "/.cachet/purge".into(),
            authorization: Some("Bearer 0123456789abcdef0123".into()),
            surrogate_key: Some("k1".into()),
            soft: true,
        };
        let (r, fx) = b.admin(&p, &req, b"", 2_000);
        assert_eq!((r.status, fx.purges), (200, 1));
        assert!(matches!(b.check(&c, "/c.css", &[]), Check::SoftPurged(_)));
        // A soft purge never removes: the copy stays servable stale.
        assert_eq!(b.lurk(&store, &p, 3_000).evicted, 0);
        let r = call(&b, &p, "POST", "/.cachet/ban", "req.url ~ ^/c", 4_000);
        assert_eq!(r.status, 201);
        assert_eq!(b.check(&c, "/c.css", &[]), Check::Banned);
        assert!(matches!(b.check(&c, "/d.css", &[]), Check::SoftPurged(_)));
        assert_eq!(
            b.lurk(&store, &p, 5_000).evicted,
            0,
            "req.* bans need the request"
        );
        // Refusals keep the log as it was.
        let bad = call(&b, &p, "POST", "/.cachet/ban", "obj.http.x-url ~ (", 6_000);
        assert_eq!(bad.status, 400);
        let mut denied = AdminRequest {
            method: "GET".into(),
            path: "/.cachet/bans".into(),
            ..AdminRequest::default()
        };
        assert_eq!(b.admin(&p, &denied, b"", 6_000).0.status, 401);
        denied.authorization = Some("Bearer 0123456789abcdef0123".into());
        let list = b.admin(&p, &denied, b"", 6_000).0;
        assert_eq!(list.status, 200);
        assert_eq!(b.live(), 2);
    }

    #[test]
    fn the_lurker_removes_objects_past_their_keep_window_and_spreads_a_pass_over_its_budget() {
        let (b, mut p, store) = (Bans::new(), policy(), Store::new(1 << 20));
        for i in 0..64 {
            store.insert(object(&format!("o{i}"), "/o", &[], 1_000), 1_000, None);
        }
        let mut cfg = p.config().clone();
        cfg.bans.lurker_budget = 1;
        p = Policy::new(cfg).unwrap();
        let mut steps = 0;
        let mut evicted = 0;
        loop {
            let s = b.lurk(&store, &p, 1_000 + 61_000);
            steps += 1;
            evicted += s.evicted;
            if s.passes == 1 {
                break;
            }
        }
        assert_eq!(evicted, 64, "every object is past its keep window");
        assert!(
            steps > 1,
            "a budget of 1 spreads the pass over several steps"
        );
        assert_eq!(store.totals(), (0, 0));
    }
}
