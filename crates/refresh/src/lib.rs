//! Sans-IO refresh decisions: fresh, refresh-ahead (threshold, XFetch), stale, request collapsing.
//!
//! Every function here is pure: the caller passes the current time ([`Timestamp`]) and any
//! random draw ([`Draw`]); nothing reads a clock, a random source, a thread or the network.
//! The adapters (Fastly Compute, Envoy proxy-wasm) do all I/O and act on the values returned.
//!
//! * [`EntryTimes`] + [`EarlyRefresh`] + [`decide`] → [`Freshness`]: `Fresh`, `RefreshAhead`,
//!   `Stale`, `Expired` or `Miss` for one request. Early-refresh policies: `none`, `threshold`
//!   (LINE req-shield's `decisionForUpdate`) and `xfetch` (Vattani, Chierichetti, Lowenstein,
//!   "Optimal Probabilistic Cache Stampede Prevention", VLDB 2015).
//! * [`WaitQueue`]: request collapsing's queue, the requests of one worker parked behind
//!   origin fetches, bounded per key and in keys (`[collapse]`, [`CollapseConfig`]); who
//!   fetches is the platform's obligation or lease.
//! * [`on_origin_error`], [`should_store_over`]: stale-if-error (RFC 5861 §4) or a clean 503
//!   with `Retry-After`; never replace a good object with a 5xx.
//! * [`conditional_headers`], [`on_revalidation`]: conditional revalidation (RFC 9111 §4.3).
//!
//! ```
//! use std::time::Duration;
//! use cachet_refresh::{decide, Draw, EarlyRefresh, EntryTimes, Freshness, Timestamp};
//!
//! let stored = Timestamp::from_millis(1_700_000_000_000);
//! let entry = EntryTimes::new(stored, Duration::from_secs(20))
//!     .with_grace(Duration::from_secs(5))
//!     .with_delta(Duration::from_secs(3));
//! let policy = EarlyRefresh::Threshold { fraction: 0.7 };
//! let at = |s| stored.saturating_add(Duration::from_secs(s));
//! assert_eq!(decide(Some(&entry), at(10), &policy, Draw::ONE), Freshness::Fresh);
//! assert_eq!(decide(Some(&entry), at(15), &policy, Draw::ONE), Freshness::RefreshAhead);
//! assert_eq!(decide(Some(&entry), at(22), &policy, Draw::ONE), Freshness::Stale);
//! assert_eq!(decide(Some(&entry), at(26), &policy, Draw::ONE), Freshness::Miss);
//! assert_eq!(decide(None, at(0), &policy, Draw::ONE), Freshness::Miss);
//! ```
#![forbid(unsafe_code)]

mod collapse;
mod decide;
mod error;
mod origin;
mod revalidate;
mod time;

pub use collapse::{
    CollapseConfig, DEFAULT_LEASE_MS, DEFAULT_MAX_KEYS, DEFAULT_MAX_WAIT_MS, DEFAULT_MAX_WAITERS,
    MAX_KEYS_LIMIT, MAX_LEASE_MS, MAX_WAIT_MS_LIMIT, MAX_WAITERS_LIMIT, Parked, Refused, WaitQueue,
};
pub use decide::{DEFAULT_XFETCH_BETA, Draw, EarlyRefresh, EntryTimes, Freshness, decide};
pub use error::RefreshError;
pub use origin::{
    ErrorAction, is_origin_error, on_origin_error, retry_after_secs, should_store_over,
};
pub use revalidate::{
    ConditionalHeaders, MAX_VALIDATOR_BYTES, NotModified, Revalidation, Validators,
    conditional_headers, on_revalidation,
};
pub use time::Timestamp;
