//! [`Timestamp`]: wall-clock instants as milliseconds since the Unix epoch, passed in by callers.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// An instant as whole **milliseconds since the Unix epoch** (UTC), the `now` every function
/// of this crate takes as a parameter.
///
/// Why a `u64` newtype and not [`SystemTime`]: it is `Copy`, totally ordered, serializes as a
/// plain number (adapters keep `stored_at` in Fastly's user metadata or Envoy shared data),
/// and has one meaning on every target — `SystemTime::now()` panics on
/// `wasm32-unknown-unknown`, so this crate never calls it; adapters read their platform's
/// clock and convert with [`Timestamp::from_system_time`] or [`Timestamp::from_millis`].
/// Resolution is one millisecond; arithmetic saturates instead of overflowing, so no input
/// panics. Values up to 2^53 ms (year 287,396) convert to `f64` exactly, which the XFetch
/// and threshold comparisons rely on.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The Unix epoch itself (0 ms). Handy as the origin of a simulation's virtual clock.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// From milliseconds since the Unix epoch.
    pub const fn from_millis(ms: u64) -> Self {
        Timestamp(ms)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// From a [`SystemTime`] the adapter read from its platform clock. Sub-millisecond parts
    /// are truncated; times before the epoch map to [`Timestamp::EPOCH`] and times past
    /// `u64::MAX` ms saturate. Never panics (no call to `SystemTime::now`).
    pub fn from_system_time(t: SystemTime) -> Self {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Timestamp(duration_ms(d)),
            Err(_) => Timestamp::EPOCH,
        }
    }

    /// `self + d`, saturating at `u64::MAX` ms (sub-millisecond parts of `d` are truncated).
    #[must_use]
    pub fn saturating_add(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(duration_ms(d)))
    }

    /// `self - earlier` as a [`Duration`], or zero when `earlier` is later than `self`
    /// (clock skew between the instance that stored an object and the one reading it).
    pub fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

/// Whole milliseconds of `d`, saturating at `u64::MAX`.
pub(crate) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Timestamp::from_millis(u64::MAX - 1);
        assert_eq!(
            t.saturating_add(Duration::from_secs(5)).as_millis(),
            u64::MAX
        );
        assert_eq!(t.saturating_add(Duration::MAX).as_millis(), u64::MAX);
        let a = Timestamp::from_millis(1_000);
        let b = Timestamp::from_millis(3_500);
        assert_eq!(b.saturating_duration_since(a), Duration::from_millis(2_500));
        assert_eq!(a.saturating_duration_since(b), Duration::ZERO);
    }

    #[test]
    fn system_time_conversion() {
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(
            Timestamp::from_system_time(t).as_millis(),
            1_700_000_000_123
        );
        let before = UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(Timestamp::from_system_time(before), Timestamp::EPOCH);
    }
}
