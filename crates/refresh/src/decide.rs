//! Per-request freshness decision: fresh, refresh-ahead (threshold / XFetch), stale, expired, miss.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::RefreshError;
use crate::time::{Timestamp, duration_ms};

/// Default XFetch `beta` (Vattani et al., VLDB 2015, §4: `beta = 1` is the optimal setting
/// of their analysis; `beta > 1` favours earlier refreshes, `beta < 1` later ones).
pub const DEFAULT_XFETCH_BETA: f64 = 1.0;

/// The timing metadata stored with one cached object; all this crate needs to classify a
/// request for it. Serializable so adapters can keep it in Fastly user metadata / Envoy
/// shared data. Units: [`Timestamp`] is ms since the epoch, the rest are [`Duration`]s
/// (serialized by serde as `{secs, nanos}`).
///
/// Timeline (Varnish vocabulary; RFC 9111 §4.2 for TTL, RFC 5861 §3 for grace):
///
/// ```text
/// stored_at ──── ttl ────► expiry ── grace ──► ── keep ──► gone
///   Fresh / RefreshAhead     Stale              Expired      Miss
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryTimes {
    /// When the response was stored (or last freshened by a 304), ms since the epoch.
    pub stored_at: Timestamp,
    /// Freshness lifetime (RFC 9111 §4.2.1: `s-maxage`/`max-age`/`Expires`, or the route's).
    pub ttl: Duration,
    /// Grace / stale-while-revalidate window after expiry (RFC 5861 §3): served stale while
    /// one background revalidation runs.
    pub grace: Duration,
    /// Keep window after grace: the object is not served but is still held as the base for
    /// a conditional revalidation (RFC 9111 §4.3.1) and for stale-if-error (RFC 5861 §4).
    pub keep: Duration,
    /// Measured recompute time: how long the origin fetch that produced this object took.
    /// XFetch's `delta` (Vattani et al. 2015). Zero disables XFetch's early refresh.
    pub delta: Duration,
}

impl EntryTimes {
    /// An entry stored at `stored_at` with freshness lifetime `ttl`; grace, keep and delta
    /// are zero.
    pub const fn new(stored_at: Timestamp, ttl: Duration) -> Self {
        EntryTimes {
            stored_at,
            ttl,
            grace: Duration::ZERO,
            keep: Duration::ZERO,
            delta: Duration::ZERO,
        }
    }

    /// Sets the grace (stale-while-revalidate) window.
    #[must_use]
    pub const fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Sets the keep window (after grace).
    #[must_use]
    pub const fn with_keep(mut self, keep: Duration) -> Self {
        self.keep = keep;
        self
    }

    /// Sets the measured recompute time (XFetch's `delta`).
    #[must_use]
    pub const fn with_delta(mut self, delta: Duration) -> Self {
        self.delta = delta;
        self
    }

    /// `stored_at + ttl` (saturating): the instant the object stops being fresh.
    pub fn expiry(&self) -> Timestamp {
        self.stored_at.saturating_add(self.ttl)
    }

    /// `expiry + grace` (saturating): until then the object may be served stale.
    pub fn grace_end(&self) -> Timestamp {
        self.expiry().saturating_add(self.grace)
    }

    /// `expiry + grace + keep` (saturating): until then the object is held at all.
    pub fn keep_end(&self) -> Timestamp {
        self.grace_end().saturating_add(self.keep)
    }

    /// Age at `now` (RFC 9111 §4.2.3 without the `Age` header correction, which the adapter
    /// folds into `stored_at`); zero if `now` is before `stored_at`.
    pub fn age(&self, now: Timestamp) -> Duration {
        now.saturating_duration_since(self.stored_at)
    }
}

/// Early-refresh policy of a route (serde form below; validate with
/// [`EarlyRefresh::validate`] when loading the config).
///
/// ```toml
/// early_refresh = { policy = "none" }
/// early_refresh = { policy = "threshold", fraction = 0.8 }
/// early_refresh = { policy = "xfetch", beta = 1.0 }   # beta defaults to 1.0
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "snake_case", deny_unknown_fields)]
pub enum EarlyRefresh {
    /// Never refresh before expiry (the default).
    #[default]
    None,
    /// Refresh once `fraction` of the TTL has elapsed: LINE req-shield's
    /// `decisionForUpdate` (a percentage there, 70–90 in its docs; here a fraction in
    /// (0, 1]; 1.0 never refreshes early).
    Threshold {
        /// Fraction of the TTL after which requests trigger a background refresh, in (0, 1].
        fraction: f64,
    },
    /// XFetch (Vattani, Chierichetti, Lowenstein, VLDB 2015): refresh when
    /// `now - delta * beta * ln(draw) >= expiry`, `delta` being [`EntryTimes::delta`].
    Xfetch {
        /// Finite and > 0; default [`DEFAULT_XFETCH_BETA`].
        #[serde(default = "default_beta")]
        beta: f64,
    },
}

fn default_beta() -> f64 {
    DEFAULT_XFETCH_BETA
}

impl EarlyRefresh {
    /// Checks the parameters: `fraction` finite and in (0, 1]; `beta` finite and > 0.
    ///
    /// # Errors
    /// [`RefreshError::InvalidParameter`] with path `fraction` or `beta` (prefix it with
    /// [`RefreshError::within`]).
    pub fn validate(&self) -> Result<(), RefreshError> {
        match *self {
            EarlyRefresh::None => Ok(()),
            EarlyRefresh::Threshold { fraction } => {
                if fraction.is_finite() && fraction > 0.0 && fraction <= 1.0 {
                    Ok(())
                } else {
                    Err(RefreshError::param(
                        "fraction",
                        format!("must be a finite number in (0, 1], got {fraction}"),
                    ))
                }
            }
            EarlyRefresh::Xfetch { beta } => {
                if beta.is_finite() && beta > 0.0 {
                    Ok(())
                } else {
                    Err(RefreshError::param(
                        "beta",
                        format!("must be a finite number > 0, got {beta}"),
                    ))
                }
            }
        }
    }
}

/// A uniform random draw in (0, 1], passed in by the caller (this crate has no randomness).
/// Only [`EarlyRefresh::Xfetch`] uses it; `ln(draw)` is then finite and ≤ 0.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Draw(f64);

impl Draw {
    /// The draw 1.0: XFetch's `ln(1) = 0`, so never an early refresh. Use it where no
    /// randomness is wanted (tests, policies other than XFetch).
    pub const ONE: Draw = Draw(1.0);

    /// Wraps `x`.
    ///
    /// # Errors
    /// [`RefreshError::InvalidDraw`] unless `x` is finite and `0 < x <= 1`.
    pub fn new(x: f64) -> Result<Self, RefreshError> {
        if x.is_finite() && x > 0.0 && x <= 1.0 {
            Ok(Draw(x))
        } else {
            Err(RefreshError::InvalidDraw(x))
        }
    }

    /// Maps 64 random bits (e.g. from the platform's RNG) to a draw in (0, 1]: the top 53
    /// bits `m` give `(m + 1) / 2^53`, uniform on a grid of 2^53 points. Total; never fails.
    pub fn from_bits(bits: u64) -> Self {
        #[allow(
            clippy::cast_precision_loss,
            reason = "(bits >> 11) + 1 <= 2^53, exactly representable in f64"
        )]
        let m = ((bits >> 11) + 1) as f64;
        Draw(m * (1.0 / 9_007_199_254_740_992.0))
    }

    /// The value, in (0, 1].
    pub const fn get(self) -> f64 {
        self.0
    }
}

/// What to do with a request for a cached object, from [`decide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Freshness {
    /// Serve the cached object; nothing else to do.
    Fresh,
    /// Serve the cached object and refresh it in the background (early refresh; only the
    /// request that gets the platform's obligation or lease refreshes).
    RefreshAhead,
    /// Past expiry but within grace: serve stale and revalidate in the background
    /// (RFC 5861 §3 stale-while-revalidate; Varnish grace).
    Stale,
    /// Past grace but within keep: do not serve; fetch from the origin, using the object's
    /// validators for a conditional request (RFC 9111 §4.3.1) and the object itself only
    /// for stale-if-error ([`crate::on_origin_error`]).
    Expired,
    /// Nothing usable: fetch from the origin (collapsed).
    Miss,
}

/// Classifies a request at `now` for `entry` (`None` = not in cache) under `policy`.
///
/// Rules: `now < expiry` → `Fresh`, or `RefreshAhead` when the policy fires:
/// * `threshold`: `age >= fraction * ttl` (req-shield `decisionForUpdate`);
/// * `xfetch`: `now - delta * beta * ln(draw) >= expiry` (Vattani et al. 2015), i.e.
///   `delta * beta * -ln(draw) >= expiry - now`.
///
/// then `now < expiry + grace` → `Stale`, `now < expiry + grace + keep` → `Expired`, else
/// `Miss`. A TTL of zero is never fresh. `draw` is only read by `xfetch`.
///
/// Cost: a few comparisons, plus one `ln` for XFetch inside the fresh window; no allocation.
/// Never panics: a policy that failed [`EarlyRefresh::validate`] (NaN, out of range) simply
/// never fires early.
pub fn decide(
    entry: Option<&EntryTimes>,
    now: Timestamp,
    policy: &EarlyRefresh,
    draw: Draw,
) -> Freshness {
    let Some(e) = entry else {
        return Freshness::Miss;
    };
    let expiry = e.expiry();
    if now < expiry {
        if refresh_early(e, now, expiry, policy, draw) {
            Freshness::RefreshAhead
        } else {
            Freshness::Fresh
        }
    } else if now < e.grace_end() {
        Freshness::Stale
    } else if now < e.keep_end() {
        Freshness::Expired
    } else {
        Freshness::Miss
    }
}

#[allow(
    clippy::cast_precision_loss,
    reason = "millisecond counts below 2^53 (year 287,396) are exact in f64"
)]
fn refresh_early(
    e: &EntryTimes,
    now: Timestamp,
    expiry: Timestamp,
    policy: &EarlyRefresh,
    draw: Draw,
) -> bool {
    match *policy {
        EarlyRefresh::None => false,
        EarlyRefresh::Threshold { fraction } => {
            let age = now.as_millis().saturating_sub(e.stored_at.as_millis());
            age as f64 >= duration_ms(e.ttl) as f64 * fraction
        }
        EarlyRefresh::Xfetch { beta } => {
            let remaining = expiry.as_millis() - now.as_millis();
            let gap = duration_ms(e.delta) as f64 * beta * -draw.get().ln();
            gap >= remaining as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_700_000_000_000;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(T0 + ms)
    }

    fn entry() -> EntryTimes {
        EntryTimes::new(at(0), Duration::from_secs(20))
            .with_grace(Duration::from_secs(10))
            .with_keep(Duration::from_secs(60))
            .with_delta(Duration::from_secs(3))
    }

    #[test]
    fn windows_without_early_refresh() {
        let e = entry();
        let p = EarlyRefresh::None;
        let d = |ms| decide(Some(&e), at(ms), &p, Draw::from_bits(0));
        assert_eq!(d(0), Freshness::Fresh);
        assert_eq!(d(19_999), Freshness::Fresh);
        assert_eq!(d(20_000), Freshness::Stale);
        assert_eq!(d(29_999), Freshness::Stale);
        assert_eq!(d(30_000), Freshness::Expired);
        assert_eq!(d(89_999), Freshness::Expired);
        assert_eq!(d(90_000), Freshness::Miss);
        assert_eq!(decide(None, at(0), &p, Draw::ONE), Freshness::Miss);
        // Clock skew: now before stored_at is simply fresh.
        assert_eq!(
            decide(Some(&e), Timestamp::from_millis(T0 - 5_000), &p, Draw::ONE),
            Freshness::Fresh
        );
    }

    #[test]
    fn zero_ttl_is_never_fresh() {
        let e = EntryTimes::new(at(0), Duration::ZERO);
        assert_eq!(
            decide(Some(&e), at(0), &EarlyRefresh::None, Draw::ONE),
            Freshness::Miss
        );
        let e = e.with_grace(Duration::from_secs(1));
        assert_eq!(
            decide(Some(&e), at(0), &EarlyRefresh::None, Draw::ONE),
            Freshness::Stale
        );
    }

    #[test]
    fn threshold_fires_at_fraction_of_ttl() {
        let e = entry();
        let p = EarlyRefresh::Threshold { fraction: 0.7 };
        assert_eq!(
            decide(Some(&e), at(13_999), &p, Draw::ONE),
            Freshness::Fresh
        );
        assert_eq!(
            decide(Some(&e), at(14_000), &p, Draw::ONE),
            Freshness::RefreshAhead
        );
        assert_eq!(
            decide(Some(&e), at(19_999), &p, Draw::ONE),
            Freshness::RefreshAhead
        );
        assert_eq!(
            decide(Some(&e), at(20_000), &p, Draw::ONE),
            Freshness::Stale
        );
        let full = EarlyRefresh::Threshold { fraction: 1.0 };
        assert_eq!(
            decide(Some(&e), at(19_999), &full, Draw::ONE),
            Freshness::Fresh
        );
    }

    #[test]
    fn xfetch_follows_the_formula() {
        let e = entry(); // delta 3 s
        let p = EarlyRefresh::Xfetch { beta: 1.0 };
        // draw 1 → ln = 0 → never early.
        assert_eq!(
            decide(Some(&e), at(19_999), &p, Draw::ONE),
            Freshness::Fresh
        );
        // draw e^-1 → gap = 3 s: fires from 17 s on.
        let d = Draw::new((-1.0f64).exp()).unwrap();
        assert_eq!(decide(Some(&e), at(16_990), &p, d), Freshness::Fresh);
        assert_eq!(decide(Some(&e), at(17_010), &p, d), Freshness::RefreshAhead);
        // beta 2 doubles the gap: fires from 14 s on.
        let p2 = EarlyRefresh::Xfetch { beta: 2.0 };
        assert_eq!(decide(Some(&e), at(13_990), &p2, d), Freshness::Fresh);
        assert_eq!(
            decide(Some(&e), at(14_010), &p2, d),
            Freshness::RefreshAhead
        );
        // delta 0 → never early.
        let e0 = e.with_delta(Duration::ZERO);
        assert_eq!(
            decide(Some(&e0), at(19_999), &p, Draw::from_bits(0)),
            Freshness::Fresh
        );
    }

    #[test]
    fn invalid_policies_never_fire_and_never_panic() {
        let e = entry();
        for p in [
            EarlyRefresh::Threshold { fraction: f64::NAN },
            EarlyRefresh::Xfetch { beta: f64::NAN },
            EarlyRefresh::Xfetch { beta: -1.0 },
        ] {
            assert!(p.validate().is_err());
            assert_eq!(
                decide(Some(&e), at(19_000), &p, Draw::from_bits(0)),
                Freshness::Fresh
            );
        }
    }

    #[test]
    fn validation_paths() {
        let bad = [
            (EarlyRefresh::Threshold { fraction: 0.0 }, "fraction"),
            (EarlyRefresh::Threshold { fraction: 1.5 }, "fraction"),
            (
                EarlyRefresh::Threshold {
                    fraction: f64::INFINITY,
                },
                "fraction",
            ),
            (EarlyRefresh::Xfetch { beta: 0.0 }, "beta"),
            (
                EarlyRefresh::Xfetch {
                    beta: f64::INFINITY,
                },
                "beta",
            ),
        ];
        for (p, path) in bad {
            let err = p.validate().unwrap_err().within("routes[0].early_refresh");
            assert_eq!(
                err.path(),
                Some(format!("routes[0].early_refresh.{path}").as_str())
            );
        }
        for p in [
            EarlyRefresh::None,
            EarlyRefresh::Threshold { fraction: 1.0 },
            EarlyRefresh::Threshold { fraction: 0.7 },
            EarlyRefresh::Xfetch { beta: 0.5 },
        ] {
            assert_eq!(p.validate(), Ok(()));
        }
    }

    #[test]
    fn draws() {
        assert!(Draw::new(0.0).is_err());
        assert!(Draw::new(1.000_001).is_err());
        assert!(Draw::new(f64::NAN).is_err());
        assert_eq!(Draw::new(1.0), Ok(Draw::ONE));
        assert_eq!(Draw::from_bits(u64::MAX), Draw::ONE);
        let low = Draw::from_bits(0).get();
        assert!(low > 0.0 && low < 1e-15);
    }

    #[test]
    fn serde_forms() {
        #[derive(Deserialize)]
        struct Route {
            early_refresh: EarlyRefresh,
        }
        let t: Route = toml::from_str(r#"early_refresh = { policy = "xfetch" }"#).unwrap();
        assert_eq!(t.early_refresh, EarlyRefresh::Xfetch { beta: 1.0 });
        let t: Route =
            toml::from_str(r#"early_refresh = { policy = "threshold", fraction = 0.8 }"#).unwrap();
        assert_eq!(t.early_refresh, EarlyRefresh::Threshold { fraction: 0.8 });
        let j: EarlyRefresh = serde_json::from_str(r#"{"policy":"none"}"#).unwrap();
        assert_eq!(j, EarlyRefresh::None);
        assert!(serde_json::from_str::<EarlyRefresh>(r#"{"policy":"lru"}"#).is_err());
        assert!(
            serde_json::from_str::<EarlyRefresh>(r#"{"policy":"xfetch","beta":1,"x":2}"#).is_err()
        );
        let s = serde_json::to_string(&EarlyRefresh::Threshold { fraction: 0.9 }).unwrap();
        assert_eq!(s, r#"{"policy":"threshold","fraction":0.9}"#);
        let e = EntryTimes::new(Timestamp::from_millis(5), Duration::from_secs(1));
        let back: EntryTimes = serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
        assert_eq!(back, e);
    }
}
