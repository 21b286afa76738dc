//! Property tests: decisions never panic and respect the timeline; the collapsing queue returns every request once.

use std::collections::BTreeMap;
use std::time::Duration;

use cachet_refresh::{
    CollapseConfig, Draw, EarlyRefresh, EntryTimes, Freshness, Refused, Timestamp, Validators,
    WaitQueue, conditional_headers, decide,
};
use proptest::prelude::*;

fn policy() -> impl Strategy<Value = EarlyRefresh> {
    prop_oneof![
        Just(EarlyRefresh::None),
        any::<f64>().prop_map(|fraction| EarlyRefresh::Threshold { fraction }),
        (0.0f64..=1.0).prop_map(|fraction| EarlyRefresh::Threshold { fraction }),
        any::<f64>().prop_map(|beta| EarlyRefresh::Xfetch { beta }),
        (0.01f64..4.0).prop_map(|beta| EarlyRefresh::Xfetch { beta }),
    ]
}

fn entry() -> impl Strategy<Value = EntryTimes> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(|(stored, ttl, grace, keep, delta)| EntryTimes {
            stored_at: Timestamp::from_millis(stored),
            ttl: Duration::from_millis(ttl),
            grace: Duration::from_millis(grace),
            keep: Duration::from_millis(keep),
            delta: Duration::from_millis(delta),
        })
}

fn rank(f: Freshness) -> u8 {
    match f {
        Freshness::Fresh | Freshness::RefreshAhead => 0,
        Freshness::Stale => 1,
        Freshness::Expired => 2,
        Freshness::Miss => 3,
    }
}

proptest! {
    #[test]
    fn decide_is_total_and_timeline_ordered(
        e in entry(),
        p in policy(),
        a in any::<u64>(),
        b in any::<u64>(),
        bits in any::<u64>(),
    ) {
        let (lo, hi) = (a.min(b), a.max(b));
        let d = Draw::from_bits(bits);
        let first = decide(Some(&e), Timestamp::from_millis(lo), &p, d);
        let later = decide(Some(&e), Timestamp::from_millis(hi), &p, d);
        prop_assert!(rank(first) <= rank(later));
        // Without an early policy, RefreshAhead never appears.
        let plain = decide(Some(&e), Timestamp::from_millis(lo), &EarlyRefresh::None, d);
        prop_assert_ne!(plain, Freshness::RefreshAhead);
        prop_assert_eq!(rank(plain), rank(first));
    }

    #[test]
    fn threshold_fires_exactly_after_fraction(
        ttl_ms in 1u64..10_000_000,
        fraction in 0.01f64..=1.0,
        age in 0u64..10_000_000,
    ) {
        let e = EntryTimes::new(Timestamp::from_millis(1_000), Duration::from_millis(ttl_ms));
        let now = Timestamp::from_millis(1_000 + age);
        let got = decide(Some(&e), now, &EarlyRefresh::Threshold { fraction }, Draw::ONE);
        #[allow(clippy::cast_precision_loss, reason = "values below 2^24")]
        let expected = if age >= ttl_ms {
            Freshness::Miss
        } else if age as f64 >= ttl_ms as f64 * fraction {
            Freshness::RefreshAhead
        } else {
            Freshness::Fresh
        };
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn conditional_headers_never_inject(etag in any::<String>(), lm in any::<String>()) {
        let v = Validators { etag: Some(etag), last_modified: Some(lm) };
        if let Ok(h) = conditional_headers(&v) {
            for value in [h.if_none_match, h.if_modified_since].into_iter().flatten() {
                prop_assert!(!value.contains('\r') && !value.contains('\n'));
                prop_assert!(value.is_ascii());
            }
        }
    }

    /// Random interleavings of park / take / take-all-and-requeue / time-out on three
    /// keys: the bounds always hold, every parked request comes out exactly once, and
    /// nothing is left once every deadline has passed.
    #[test]
    fn wait_queue_returns_each_request_once(ops in prop::collection::vec((0u8..4, 0usize..3, 0u64..3_000), 1..200)) {
        let cfg = CollapseConfig { max_waiters: 4, max_wait_ms: 2_000, max_keys: 2, ..CollapseConfig::default() };
        let mut q = WaitQueue::<usize, u64>::new(cfg);
        let mut now = 0u64;
        let mut next = 0u64;
        let mut queued: BTreeMap<u64, usize> = BTreeMap::new();
        let out = |id: u64, key: usize, queued: &mut BTreeMap<u64, usize>| -> Result<(), TestCaseError> {
            prop_assert_eq!(queued.remove(&id), Some(key), "request {} out twice, or under another key", id);
            Ok(())
        };
        for (op, key, dt) in ops {
            now += dt;
            let ts = Timestamp::from_millis(now);
            match op {
                0 => {
                    next += 1;
                    match q.park(key, next, ts) {
                        Ok(deadline) => {
                            prop_assert!(deadline > ts);
                            queued.insert(next, key);
                        }
                        Err((why, id)) => {
                            prop_assert_eq!(id, next);
                            let bound_reached = match why {
                                Refused::KeyFull => q.waiting(&key) == 4,
                                Refused::TooManyKeys => q.waiting(&key) == 0 && q.keys() == 2,
                            };
                            prop_assert!(bound_reached, "{:?} with {} queued", why, q.waiting(&key));
                        }
                    }
                }
                1 => for p in q.take(&key) {
                    out(p.waiter, key, &mut queued)?;
                },
                2 => for (k, p) in q.take_all() {
                    q.requeue(k, p);
                },
                _ => for (k, id) in q.timed_out(ts) {
                    out(id, k, &mut queued)?;
                },
            }
            prop_assert_eq!(q.len(), queued.len());
            prop_assert!(q.keys() <= 2 && (0..3).all(|k| q.waiting(&k) <= 4));
        }
        for (k, id) in q.timed_out(Timestamp::from_millis(now + 2_000)) {
            out(id, k, &mut queued)?;
        }
        prop_assert!(queued.is_empty(), "never out: {queued:?}");
        prop_assert!(q.is_empty());
    }
}
