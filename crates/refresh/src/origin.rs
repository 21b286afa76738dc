//! Origin errors: stale-if-error or a clean 503 with `Retry-After`; never store a 5xx over a good object.

use std::time::Duration;

use crate::decide::EntryTimes;
use crate::time::Timestamp;

/// What to answer when the origin failed (5xx, connection error, timeout), from
/// [`on_origin_error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorAction {
    /// Serve the cached object although it is stale (RFC 5861 §4 stale-if-error; Varnish
    /// grace on a sick backend).
    ServeStale,
    /// Answer `503 Service Unavailable` with `Retry-After: retry_after_secs`
    /// (RFC 9110 §15.6.4, §10.2.3).
    Unavailable {
        /// Whole seconds, ≥ 1.
        retry_after_secs: u64,
    },
}

/// Decides the answer to a failed origin fetch at `now`.
///
/// Serves stale when the cache still holds `entry` (`now < expiry + grace + keep`) and
/// `now < expiry + max(grace, stale_if_error)`: the grace window always allows it (RFC 5861
/// §3 lets a cache serve stale while revalidating, so an error in that window must not turn
/// into a 503), and a route may extend it into the keep window with `stale_if_error`
/// (RFC 5861 §4). Otherwise `503` with `Retry-After` = [`retry_after_secs`]`(retry_after)`.
/// A fresh entry (refresh-ahead failed) is of course served.
pub fn on_origin_error(
    entry: Option<&EntryTimes>,
    now: Timestamp,
    stale_if_error: Duration,
    retry_after: Duration,
) -> ErrorAction {
    if let Some(e) = entry {
        let window_end = e.expiry().saturating_add(e.grace.max(stale_if_error));
        if now < window_end && now < e.keep_end() {
            return ErrorAction::ServeStale;
        }
    }
    ErrorAction::Unavailable {
        retry_after_secs: retry_after_secs(retry_after),
    }
}

/// `d` in whole seconds for a `Retry-After` header (RFC 9110 §10.2.3 `delay-seconds`),
/// rounded up, at least 1 (a `Retry-After: 0` invites an immediate retry storm).
pub fn retry_after_secs(d: Duration) -> u64 {
    let secs = d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0));
    secs.max(1)
}

/// Whether `status` is an origin failure that stale-if-error covers: 500–599
/// (RFC 5861 §4 names 500, 502, 503, 504; every 5xx is treated alike here).
pub const fn is_origin_error(status: u16) -> bool {
    matches!(status, 500..=599)
}

/// Whether a new origin response with `new_status` may replace the stored object.
/// `existing_ok`: the cache holds a good (non-5xx) object for this key, fresh or stale.
///
/// Never replaces a good object with a 5xx (the error is answered per [`on_origin_error`]
/// and the good copy kept for stale-if-error, RFC 5861 §4). Statuses outside 100–599 are
/// invalid (RFC 9110 §15) and never stored; 1xx are interim and never stored. Whether a
/// status is cacheable at all (RFC 9111 §3) is the policy crate's job; this only guards
/// against overwriting.
pub const fn should_store_over(existing_ok: bool, new_status: u16) -> bool {
    match new_status {
        200..=499 => true,
        500..=599 => !existing_ok,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u64) -> Timestamp {
        Timestamp::from_millis(s * 1_000)
    }

    #[test]
    fn stale_within_grace_else_503() {
        let e = EntryTimes::new(at(100), Duration::from_secs(20))
            .with_grace(Duration::from_secs(10))
            .with_keep(Duration::from_secs(100));
        let ra = Duration::from_millis(2_500);
        let f = |now, sie| on_origin_error(Some(&e), at(now), Duration::from_secs(sie), ra);
        assert_eq!(f(110, 0), ErrorAction::ServeStale); // fresh
        assert_eq!(f(129, 0), ErrorAction::ServeStale); // grace
        let unavailable = ErrorAction::Unavailable {
            retry_after_secs: 3,
        };
        assert_eq!(f(130, 0), unavailable);
        assert_eq!(f(150, 60), ErrorAction::ServeStale); // stale-if-error into keep
        assert_eq!(f(230, 600), unavailable); // object no longer held
        assert_eq!(on_origin_error(None, at(0), Duration::MAX, ra), unavailable);
    }

    #[test]
    fn retry_after_rounding() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(5)), 5);
        assert_eq!(retry_after_secs(Duration::from_millis(5_001)), 6);
        assert_eq!(retry_after_secs(Duration::MAX), u64::MAX);
    }

    #[test]
    fn never_store_5xx_over_good() {
        assert!(should_store_over(true, 200));
        assert!(should_store_over(true, 404));
        assert!(!should_store_over(true, 503));
        assert!(should_store_over(false, 503));
        assert!(!should_store_over(false, 101));
        assert!(!should_store_over(false, 0));
        assert!(!should_store_over(false, 600));
        assert!(is_origin_error(500) && is_origin_error(599));
        assert!(!is_origin_error(499) && !is_origin_error(600));
    }
}
