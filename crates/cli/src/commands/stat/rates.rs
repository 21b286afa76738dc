//! Per-second rates from two readings: a pure function of the two snapshots and the time
//! between them (no clock here; the caller measures the duration).

use std::collections::BTreeMap;
use std::time::Duration;

use super::snapshot::{Snapshot, hit_ratio};

/// Rates between two readings.
#[derive(Debug, Clone, PartialEq)]
pub struct Rates {
    /// Seconds between the readings.
    pub interval_s: f64,
    /// Per-second increase of every counter present in both readings.
    pub per_second: BTreeMap<String, f64>,
    /// The hit ratio of the requests in between (same rule as [`Snapshot::hit_ratio`]),
    /// `None` when there were none.
    pub hit_ratio: Option<f64>,
}

/// The increase of a counter from `prev` to `cur`. A counter that went down was reset (Envoy
/// restarted, the log was truncated and re-read): its whole current value is the increase,
/// as Prometheus' `rate()` does.
fn increase(prev: u64, cur: u64) -> u64 {
    if cur >= prev { cur - prev } else { cur }
}

/// Rates from `prev` to `cur`, `dt` apart: `(cur - prev) / dt` per counter (see
/// [`increase`] for resets). `None` when `dt` is zero (nothing can be divided).
#[allow(clippy::cast_precision_loss, reason = "counter deltas as rates")]
pub fn rates(prev: &Snapshot, cur: &Snapshot, dt: Duration) -> Option<Rates> {
    let secs = dt.as_secs_f64();
    if secs <= 0.0 {
        return None;
    }
    let delta = |n: &str| match (prev.counters.get(n), cur.counters.get(n)) {
        (Some(&p), Some(&c)) => increase(p, c),
        (None, Some(&c)) => c,
        _ => 0,
    };
    let per_second = cur
        .counters
        .keys()
        .map(|name| (name.clone(), delta(name) as f64 / secs))
        .collect();
    let served = delta("hits") + delta("stale");
    let fetched = delta("misses") + delta("passes");
    Some(Rates {
        interval_s: secs,
        per_second,
        hit_ratio: hit_ratio(served, fetched),
    })
}

#[cfg(test)]
#[allow(
    clippy::float_cmp,
    reason = "the expected rates are exact binary fractions"
)]
mod tests {
    use super::*;

    fn snap(pairs: &[(&str, u64)]) -> Snapshot {
        let mut s = Snapshot::default();
        for (n, v) in pairs {
            s.counters.insert((*n).to_owned(), *v);
        }
        s
    }

    #[test]
    fn rates_divide_counter_increases_by_the_interval() {
        let a = snap(&[("hits", 10), ("misses", 10), ("passes", 0)]);
        let b = snap(&[("hits", 40), ("misses", 20), ("passes", 0), ("purges", 4)]);
        let r = rates(&a, &b, Duration::from_millis(2000)).unwrap();
        assert_eq!(r.interval_s, 2.0);
        assert_eq!(r.per_second["hits"], 15.0);
        assert_eq!(r.per_second["misses"], 5.0);
        assert_eq!(r.per_second["passes"], 0.0);
        // A counter new in the second reading counts from 0.
        assert_eq!(r.per_second["purges"], 2.0);
        // 30 hits of 40 lookups in between.
        assert_eq!(r.hit_ratio, Some(0.75));
    }

    #[test]
    fn a_reset_counter_counts_from_zero_and_no_interval_gives_no_rates() {
        let a = snap(&[("hits", 100)]);
        let b = snap(&[("hits", 6)]);
        let r = rates(&a, &b, Duration::from_secs(3)).unwrap();
        assert_eq!(r.per_second["hits"], 2.0);
        assert_eq!(r.hit_ratio, Some(1.0));
        assert!(rates(&a, &b, Duration::ZERO).is_none());
        let idle = rates(&a, &a, Duration::from_secs(1)).unwrap();
        assert_eq!(idle.hit_ratio, None);
        assert_eq!(idle.per_second["hits"], 0.0);
    }
}
