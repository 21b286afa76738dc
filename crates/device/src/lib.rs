//! User-Agent → device class (PC / smartphone) for the edge's `Vary` dimension.
//!
//! Varying a cached page on the raw `User-Agent` header splits one page into thousands of
//! objects. Hatena Blog (Varnish, 2020) instead varied on a two-value device class computed
//! at the edge — `iPad` → PC, `Mobile` → smartphone, else PC — and the article hit ratio
//! rose from 8% to 58%. This crate computes that class.
//!
//! * [`DeviceClass`]: the two values, serialized as `"pc"` / `"smartphone"`.
//! * [`DeviceConfig`]: the `[device]` table of the Cachet configuration.
//! * [`Classifier`]: compiled, immutable rules; [`Classifier::classify`] takes raw UA
//!   bytes, [`Classifier::classify_request`] also the `Sec-CH-UA-Mobile` hint and the
//!   override cookie ([`Decision`] says which decided); never panics, does not allocate.
//! * [`Profile`]: the built-in rule sets, `seed` (Hatena's rule) and `accurate` (ours).
//!
//! ```
//! use cachet_device::{Classifier, DeviceClass, Profile};
//!
//! let c = Classifier::from_profile(Profile::Accurate);
//! let iphone = b"Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 \
//!                (KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1";
//! assert_eq!(c.classify(iphone), DeviceClass::Smartphone);
//! assert_eq!(c.classify(b""), DeviceClass::Pc); // missing User-Agent → the default
//! ```
#![forbid(unsafe_code)]

mod config;
mod engine;
mod filter;
mod profiles;
mod request;

pub use config::{
    DEFAULT_PC_FILL_USER_AGENT, DEFAULT_SMARTPHONE_FILL_USER_AGENT, DeviceConfig, FillUserAgents,
    MAX_FILL_USER_AGENT_BYTES, Rule,
};
pub use engine::Classifier;
pub use request::{Decision, MAX_COOKIE_SCAN_BYTES, force_class, force_value_class, hint_class};

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Default number of leading User-Agent bytes that are scanned
/// ([`DeviceConfig::max_scan_bytes`]). Real browser UAs are 100–300 bytes; in-app browsers
/// with long suffixes reach ~450. Every marker the built-in profiles look for sits in
/// the first ~200 bytes, so a longer tail is never worth scanning.
pub const MAX_SCAN_BYTES: usize = 512;

/// Hard cap on [`DeviceConfig::max_scan_bytes`] (8 KiB, the common per-header limit of
/// HTTP servers and CDNs); larger values are rejected by [`Classifier::new`].
pub const MAX_SCAN_BYTES_LIMIT: usize = 8 * 1024;

/// Most rules a configuration may list (the engine keeps a 128-bit set of candidate rules).
pub const MAX_RULES: usize = 128;

/// Most distinct patterns (over all `contains` and `unless` lists together) a rule set may
/// use (the engine keeps a 128-bit set of the patterns found in a User-Agent).
pub const MAX_PATTERNS: usize = 128;

/// Longest pattern accepted, in bytes (UA markers are short; this bounds the size of the
/// fallback DFA and keeps the filter's offsets in a byte).
pub const MAX_PATTERN_BYTES: usize = 64;

/// Longest header name accepted for [`DeviceConfig::header`], in bytes.
pub const MAX_HEADER_NAME_BYTES: usize = 64;

/// Default for [`DeviceConfig::header`]: the request header in which the edge tells the
/// origin the class (the origin then renders the PC or smartphone page and answers with
/// `Vary: X-Cachet-Device`).
pub const DEFAULT_HEADER: &str = "X-Cachet-Device";

/// Default for [`DeviceConfig::force_cookie`]: varnish-devicedetect's name for the cookie
/// a "view PC site" / "view mobile site" link sets, so origins written for it work as is.
pub const DEFAULT_FORCE_COOKIE: &str = "X-UA-Device-force";

/// The device class: the only thing the cache varies on.
///
/// Serialized (serde, [`fmt::Display`], [`FromStr`]) as `"pc"` or `"smartphone"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceClass {
    /// Desktops, laptops, tablets (iPad and Android tablets), TVs, consoles, crawlers that
    /// do not declare a phone, unknown clients.
    Pc,
    /// Phones: smartphones and feature phones.
    Smartphone,
}

impl DeviceClass {
    /// The wire name: `"pc"` or `"smartphone"` (the header value sent to the origin).
    pub const fn as_str(self) -> &'static str {
        match self {
            DeviceClass::Pc => "pc",
            DeviceClass::Smartphone => "smartphone",
        }
    }
}

impl fmt::Display for DeviceClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DeviceClass {
    type Err = DeviceError;

    /// Parses exactly `"pc"` or `"smartphone"` (lowercase, as serialized).
    ///
    /// # Errors
    /// [`DeviceError::UnknownClass`] for anything else.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pc" => Ok(DeviceClass::Pc),
            "smartphone" => Ok(DeviceClass::Smartphone),
            other => Err(DeviceError::UnknownClass(other.chars().take(64).collect())),
        }
    }
}

/// A built-in rule profile, used when [`DeviceConfig::rules`] is empty.
///
/// Serialized as `"seed"` / `"accurate"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Hatena Blog's rule (Varnish, 2020), exactly: contains `iPad` → PC; contains
    /// `Mobile` → smartphone; else PC.
    Seed,
    /// Our own compact rule set (the default, 72 rules, no device database): the seed rule
    /// plus tablets that send `Mobile` (tablet words `Tab`/`Pad`, Galaxy Tab and other
    /// tablet lines, Fire/Kindle, e-readers, the Yandex app's tablet build), TVs and
    /// consoles with phone tokens (→ PC), and phones that do not send it — Android and iOS
    /// app UAs, Samsung phones and foldables, feature phones (docomo, au/KDDI, SoftBank,
    /// WILLCOM, J2ME, WAP, MAUI), Opera Mini/Mobile, BlackBerry, Windows Phone, Palm,
    /// Symbian (→ smartphone). With it `Sec-CH-UA-Mobile` decides first by default
    /// ([`Profile::client_hints`]). Every rule is documented in `src/profiles.rs` and
    /// `docs/device.md`.
    #[default]
    Accurate,
}

impl Profile {
    /// Whether the profile lets `Sec-CH-UA-Mobile` decide before its rules when
    /// [`DeviceConfig::client_hints`] is unset: `false` for `seed` (Hatena's rule exactly,
    /// UA only), `true` for `accurate`.
    pub const fn client_hints(self) -> bool {
        matches!(self, Profile::Accurate)
    }

    /// The profile's ordered rules, in the same shape operators write in `rules`.
    pub fn rules(self) -> Vec<Rule> {
        match self {
            Profile::Seed => profiles::to_rules(profiles::SEED),
            Profile::Accurate => profiles::to_rules(profiles::ACCURATE),
        }
    }
}

/// Everything that can go wrong in this crate: an unknown class name, or an invalid
/// [`DeviceConfig`]. Variants about a config value carry the `path` of the offending value
/// (`"rules[2].contains[0]"`, `"header"`, ...).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// A device class name other than `"pc"` / `"smartphone"` (truncated to 64 chars).
    #[error("unknown device class {0:?} (expected \"pc\" or \"smartphone\")")]
    UnknownClass(String),
    /// A `contains` or `unless` pattern is the empty string (it would match everything).
    #[error("{path}: empty pattern")]
    EmptyPattern {
        /// Path of the pattern, e.g. `rules[0].contains[1]`.
        path: String,
    },
    /// A pattern is longer than [`MAX_PATTERN_BYTES`] or than `max_scan_bytes` (so it can
    /// never be found in the scanned prefix).
    #[error("{path}: pattern is {len} bytes, longer than the limit of {max} bytes")]
    PatternTooLong {
        /// Path of the pattern.
        path: String,
        /// Its length in bytes.
        len: usize,
        /// The limit it exceeds.
        max: usize,
    },
    /// A rule whose `contains` list is empty.
    #[error("{path}: a rule needs at least one `contains` pattern")]
    EmptyContains {
        /// Path of the list, e.g. `rules[3].contains`.
        path: String,
    },
    /// A rule that can never match because a pattern is both required and forbidden.
    #[error(
        "{path}: pattern {pattern:?} is in both `contains` and `unless`; the rule can never match"
    )]
    Unsatisfiable {
        /// Path of the rule, e.g. `rules[3]`.
        path: String,
        /// The pattern listed in both.
        pattern: String,
    },
    /// More than [`MAX_RULES`] rules.
    #[error("{path}: {count} rules, more than the limit of {max}")]
    TooManyRules {
        /// Always `rules`.
        path: String,
        /// Number of rules given.
        count: usize,
        /// [`MAX_RULES`].
        max: usize,
    },
    /// More than [`MAX_PATTERNS`] distinct patterns over all rules.
    #[error("{path}: {count} distinct patterns, more than the limit of {max}")]
    TooManyPatterns {
        /// Always `rules`.
        path: String,
        /// Number of distinct patterns.
        count: usize,
        /// [`MAX_PATTERNS`].
        max: usize,
    },
    /// `max_scan_bytes` is 0 or above [`MAX_SCAN_BYTES_LIMIT`].
    #[error("{path}: {value} is out of range 1..={max}")]
    ScanBytes {
        /// Always `max_scan_bytes`.
        path: String,
        /// The configured value.
        value: usize,
        /// [`MAX_SCAN_BYTES_LIMIT`].
        max: usize,
    },
    /// `header` is not a valid HTTP field name (RFC 9110 §5.1 `token`), or is empty or
    /// longer than [`MAX_HEADER_NAME_BYTES`]; or a non-empty `force_cookie` is not a valid
    /// cookie name (the same `token`, RFC 6265 §4.1.1) or too long.
    #[error("{path}: {reason}")]
    InvalidHeader {
        /// `header`, `force_cookie` or `fill_user_agent.<class>`.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl DeviceError {
    /// The config path the error is about (`None` for [`DeviceError::UnknownClass`]).
    pub fn path(&self) -> Option<&str> {
        match self {
            DeviceError::UnknownClass(_) => None,
            DeviceError::EmptyPattern { path }
            | DeviceError::PatternTooLong { path, .. }
            | DeviceError::EmptyContains { path }
            | DeviceError::Unsatisfiable { path, .. }
            | DeviceError::TooManyRules { path, .. }
            | DeviceError::TooManyPatterns { path, .. }
            | DeviceError::ScanBytes { path, .. }
            | DeviceError::InvalidHeader { path, .. } => Some(path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_names_round_trip() {
        for c in [DeviceClass::Pc, DeviceClass::Smartphone] {
            assert_eq!(c.as_str().parse::<DeviceClass>().unwrap(), c);
            assert_eq!(c.to_string(), c.as_str());
            assert_eq!(
                serde_json::to_string(&c).unwrap(),
                format!("\"{}\"", c.as_str())
            );
        }
        assert_eq!(
            "PC".parse::<DeviceClass>(),
            Err(DeviceError::UnknownClass("PC".into()))
        );
        assert!("".parse::<DeviceClass>().is_err());
    }

    #[test]
    fn unknown_class_message_is_bounded() {
        let long = "x".repeat(10_000);
        let err = long.parse::<DeviceClass>().unwrap_err();
        assert!(err.to_string().len() < 200);
    }

    #[test]
    fn profile_serde_names() {
        assert_eq!(serde_json::to_string(&Profile::Seed).unwrap(), "\"seed\"");
        assert_eq!(Profile::default(), Profile::Accurate);
        let p: Profile = serde_json::from_str("\"accurate\"").unwrap();
        assert_eq!(p, Profile::Accurate);
    }

    #[test]
    fn limits_are_consistent() {
        const { assert!(MAX_SCAN_BYTES <= MAX_SCAN_BYTES_LIMIT) };
        const { assert!(MAX_PATTERN_BYTES <= MAX_SCAN_BYTES) };
        const { assert!(MAX_RULES <= 128 && MAX_PATTERNS <= 128) };
    }
}
