//! Property tests: decisions never panic and respect the timeline; collapsing wakes every waiter once.

use std::collections::BTreeMap;
use std::time::Duration;

use cachet_refresh::{
    Acquire, CollapseConfig, CollapseTable, Draw, EarlyRefresh, EntryTimes, Freshness, Permit,
    Ticket, Timestamp, Validators, conditional_headers, decide,
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

    /// Random interleavings of acquire / complete / abandon / drop / cancel / tick on three
    /// keys: every queued ticket is woken (or cancelled) exactly once, and nothing stays
    /// queued or locked once permits are gone and every lease has run out.
    #[test]
    fn collapse_wakes_each_waiter_once(ops in prop::collection::vec((0u8..6, 0usize..3, 0u64..3_000), 1..200)) {
        let cfg = CollapseConfig { max_waiters: 4, max_wait_ms: 2_000, lease_ms: 5_000, max_keys: 3 };
        let table = CollapseTable::<usize>::new(cfg).unwrap();
        let mut now = 0u64;
        let mut permits: BTreeMap<usize, Vec<Permit<usize>>> = BTreeMap::new();
        let mut queued: BTreeMap<Ticket, usize> = BTreeMap::new();
        let settle = |tickets: Vec<Ticket>, queued: &mut BTreeMap<Ticket, usize>| -> Result<(), TestCaseError> {
            for t in &tickets {
                prop_assert!(queued.remove(t).is_some(), "ticket {t:?} woken twice or never queued");
            }
            Ok(())
        };
        for (op, key, dt) in ops {
            now += dt;
            let ts = Timestamp::from_millis(now);
            match op {
                0 | 1 => match table.try_acquire(&key, ts, op == 1) {
                    Acquire::Leader(p) => permits.entry(key).or_default().push(p),
                    Acquire::Wait { ticket, deadline } => {
                        prop_assert!(deadline > ts);
                        prop_assert!(queued.insert(ticket, key).is_none());
                    }
                    Acquire::ServeStale => prop_assert!(op == 1),
                    Acquire::Busy | Acquire::Bypass => {}
                },
                2 => if let Some(p) = permits.get_mut(&key).and_then(Vec::pop) {
                    settle(p.complete().tickets, &mut queued)?;
                },
                3 => if let Some(p) = permits.get_mut(&key).and_then(Vec::pop) {
                    settle(p.abandon().tickets, &mut queued)?;
                },
                4 => { permits.get_mut(&key).and_then(Vec::pop); }
                _ => {
                    if let Some((&t, &k)) = queued.iter().next()
                        && table.cancel(&k, t)
                    {
                        queued.remove(&t);
                    }
                }
            }
            for w in table.tick(ts) {
                settle(w.tickets, &mut queued)?;
            }
        }
        // Settle everything: drop permits, then tick past every lease and deadline.
        permits.clear();
        let end = Timestamp::from_millis(now + 1_000_000);
        for w in table.tick(end) {
            settle(w.tickets, &mut queued)?;
        }
        prop_assert!(queued.is_empty(), "never woken: {queued:?}");
        prop_assert_eq!(table.in_flight(), 0);
        prop_assert_eq!(table.waiting(), 0);
    }
}
