//! Query-string normalization on raw bytes: drop tracking parameters, sort, dedupe.
//!
//! The same page reached as `?utm_source=x&page=2` and `?page=2&fbclid=y` is one object
//! for the origin but two for a cache keyed on the raw target. Hatena Blog (Varnish,
//! 2020) sorted the query string and dropped the parameters the application never reads
//! (`utm_*`, `_ga`, `__twitter_impression`, …) with vmod-querystring, and so stored fewer
//! duplicate objects. This crate does that for Cachet's cache key.
//!
//! * [`QueryConfig`]: the `[query]` table of the Cachet configuration (serde).
//! * [`Normalizer`]: the compiled configuration; [`Normalizer::normalize`] and
//!   [`Normalizer::normalize_target`] return [`Cow::Borrowed`](std::borrow::Cow) without
//!   allocating when the input is already normal.
//! * [`normalize_path`]: the path part (RFC 3986 §6.2.2), so `%61`-style and dot-segment
//!   aliases share one object and no ban misses them.
//! * [`DEFAULT_REMOVE`]: the tracking parameters removed unless configured otherwise.
//! * [`QueryError`]: bounds exceeded or a bad configuration.
//!
//! The query is treated as raw bytes and never decoded, as Varnish and vmod-querystring
//! do: `%61` and `a` are different names and `+` is not `%20` (RFC 3986 §3.4 gives a
//! query no structure beyond its bytes; `&`/`=` splitting is the HTML form convention).
//!
//! ```
//! use cachet_query::{Normalizer, QueryConfig};
//!
//! let n = Normalizer::new(&QueryConfig::default())?;
//! assert_eq!(n.normalize("utm_source=x&page=2&fbclid=y&id=7")?, "id=7&page=2");
//! assert_eq!(n.normalize_target("/entry/1?utm_medium=social")?, "/entry/1");
//! # Ok::<(), cachet_query::QueryError>(())
//! ```
//!
//! Fail-closed rule: when a query exceeds [`QueryConfig::max_bytes`] or
//! [`QueryConfig::max_params`] the functions return an error and the *caller* forwards
//! the request to the origin as received, uncached, and logs one line. A query the
//! normalizer refused is never used as (or folded into) a cache key.
#![forbid(unsafe_code)]

mod config;
mod glob;
mod normalize;
mod path;
mod scan;

pub use config::{DEFAULT_REMOVE, QueryConfig, SortMode};
pub use normalize::Normalizer;
pub use path::normalize_path;

/// Default for [`QueryConfig::max_bytes`]: longest query (the bytes after `?`) that is
/// normalized, 8 KiB — the common request-line limit of HTTP servers and CDNs, so a
/// longer query rarely reaches the edge at all.
pub const MAX_QUERY_BYTES: usize = 8 * 1024;

/// Hard cap on [`QueryConfig::max_bytes`] (64 KiB − 1; parameter offsets are kept in
/// 16 bits). Larger values are rejected by [`QueryConfig::validate`] and
/// [`Normalizer::new`].
pub const MAX_QUERY_BYTES_CAP: usize = u16::MAX as usize;

/// Default for [`QueryConfig::max_params`]: most non-empty parameters a normalized query
/// may have (before removal). Real pages use a few dozen at most.
pub const MAX_PARAMS: usize = 256;

/// Hard cap on [`QueryConfig::max_params`]; bounds the work and stack space spent on one
/// query.
pub const MAX_PARAMS_CAP: usize = 1024;

/// Most patterns accepted in each of [`QueryConfig::remove`] and [`QueryConfig::keep`].
pub const MAX_PATTERNS: usize = 256;

/// Longest pattern accepted, in bytes (escapes included).
pub const MAX_PATTERN_BYTES: usize = 256;

/// Errors of this crate: a query beyond the configured bounds, or a bad configuration.
#[non_exhaustive]
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone)]
pub enum QueryError {
    /// The query is longer than [`QueryConfig::max_bytes`]; `len` and `limit` in bytes.
    /// The caller forwards the request uncached (fail closed).
    #[error("query is {len} bytes, over the limit of {limit}")]
    TooLong {
        /// Length of the query, in bytes (without the leading `?`).
        len: usize,
        /// The configured limit, in bytes.
        limit: usize,
    },
    /// The query has more non-empty parameters than [`QueryConfig::max_params`].
    /// The caller forwards the request uncached (fail closed).
    #[error("query has {count} parameters, over the limit of {limit}")]
    TooManyParams {
        /// Number of non-empty parameters in the query (before any removal).
        count: usize,
        /// The configured limit.
        limit: usize,
    },
    /// A name pattern in [`QueryConfig::remove`] or [`QueryConfig::keep`] cannot be
    /// compiled or can never match a parameter name.
    #[error("invalid name pattern {pattern:?}: {reason}")]
    InvalidPattern {
        /// The pattern as configured.
        pattern: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A pattern list is longer than [`MAX_PATTERNS`].
    #[error("{list} has {count} patterns, over the limit of {limit}")]
    TooManyPatterns {
        /// `"remove"` or `"keep"`.
        list: &'static str,
        /// Number of patterns configured.
        count: usize,
        /// [`MAX_PATTERNS`].
        limit: usize,
    },
    /// `max_bytes` or `max_params` is zero or above its hard cap.
    #[error("{field} = {value} is out of range 1..={max}")]
    InvalidLimit {
        /// `"max_bytes"` or `"max_params"`.
        field: &'static str,
        /// The configured value.
        value: usize,
        /// The hard cap ([`MAX_QUERY_BYTES_CAP`] or [`MAX_PARAMS_CAP`]).
        max: usize,
    },
}
