//! The `[query]` configuration table, its defaults and its validation.

use serde::{Deserialize, Serialize};

use crate::glob::Pattern;
use crate::{
    MAX_PARAMS, MAX_PARAMS_CAP, MAX_PATTERNS, MAX_QUERY_BYTES, MAX_QUERY_BYTES_CAP, QueryError,
};

/// Parameter names removed by default ([`QueryConfig::remove`]): tracking and click
/// identifiers that analytics and ad platforms append to links and that no page reads
/// to render. Each one multiplies the objects cached for a page by the number of
/// distinct values seen, so they are dropped before the cache key is built.
///
/// | Pattern | Set by |
/// |---|---|
/// | `utm_*` | Google Analytics / Urchin campaign tags (`utm_source`, `utm_medium`, `utm_campaign`, `utm_term`, `utm_content`, `utm_id`, …) |
/// | `_ga` | Google Analytics cross-domain linker |
/// | `_gl` | Google tag (gtag.js) cross-domain linker |
/// | `gclid` | Google Ads click identifier |
/// | `dclid` | Google Campaign Manager / Display & Video 360 click identifier |
/// | `gbraid` | Google Ads web-to-app measurement (iOS) |
/// | `wbraid` | Google Ads app-to-web measurement (iOS) |
/// | `fbclid` | Meta (Facebook, Instagram) outbound-link click identifier |
/// | `igshid` | Instagram share identifier |
/// | `yclid` | Yahoo! JAPAN Ads and Yandex Direct click identifier |
/// | `msclkid` | Microsoft Advertising click identifier |
/// | `ttclid` | TikTok Ads click identifier |
/// | `twclid` | X (Twitter) Ads click identifier |
/// | `__twitter_impression` | X (Twitter) embedded-tweet and card impression marker (named by Hatena Blog) |
/// | `mc_cid` | Mailchimp campaign identifier |
/// | `mc_eid` | Mailchimp recipient identifier |
/// | `_hsenc` | HubSpot e-mail tracking token |
/// | `_hsmi` | HubSpot e-mail message identifier |
///
/// Source: the parameter names the platforms document for their link decoration; the
/// list seeded from Hatena Blog's Varnish configuration (`utm_*`, `_ga`,
/// `__twitter_impression`).
pub const DEFAULT_REMOVE: &[&str] = &[
    "utm_*",
    "_ga",
    "_gl",
    "gclid",
    "dclid",
    "gbraid",
    "wbraid",
    "fbclid",
    "igshid",
    "yclid",
    "msclkid",
    "ttclid",
    "twclid",
    "__twitter_impression",
    "mc_cid",
    "mc_eid",
    "_hsenc",
    "_hsmi",
];

/// How the kept parameters are ordered.
///
/// Serialized as `"name"`, `"param"` or `"none"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SortMode {
    /// Stable sort by name bytes: parameters with the same name keep their relative
    /// order, so order-sensitive arrays (`steps[]=a&steps[]=b`) keep their meaning.
    #[default]
    Name,
    /// Sort by the whole `name=value` bytes (vmod-querystring's `sort`). Any permutation
    /// of the same parameters gives the same output, but same-name values are reordered.
    Param,
    /// Keep the received order; only removal (and `dedupe`) applies.
    None,
}

/// The `[query]` table of the Cachet configuration.
///
/// Every field has a default, so an empty table (or none) means: remove
/// [`DEFAULT_REMOVE`], keep everything else, sort by name, no dedupe,
/// [`MAX_PARAMS`] parameters and [`MAX_QUERY_BYTES`] bytes at most.
///
/// Patterns (`remove`, `keep`) match a parameter's *name*: the raw bytes before its first
/// `=`, or the whole parameter if it has none. `*` matches any run of bytes (also none),
/// `?` exactly one byte, `\` makes the next byte literal (`\*`, `\?`, `\\`); every other
/// byte matches itself. Matching is case-sensitive and never percent-decodes.
///
/// ```toml
/// [query]
/// remove = ["utm_*", "fbclid", "ref"]   # replaces DEFAULT_REMOVE entirely
/// keep = []                             # empty: keep every name not removed
/// sort = "name"                         # "name" | "param" | "none"
/// dedupe = false
/// max_params = 256
/// max_bytes = 8192
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueryConfig {
    /// Names or globs of parameters to drop. Default: [`DEFAULT_REMOVE`]. Setting it
    /// replaces the default list; copy the defaults in to extend them. At most
    /// [`MAX_PATTERNS`] entries.
    pub remove: Vec<String>,
    /// Allowlist of names or globs. Empty (the default) keeps every parameter not
    /// removed; non-empty keeps only parameters whose name matches one of these, and
    /// `remove` still applies on top. At most [`MAX_PATTERNS`] entries.
    pub keep: Vec<String>,
    /// Order of the output parameters. Default: [`SortMode::Name`].
    pub sort: SortMode,
    /// Keep only the first parameter of each name, first in the *output* order: the
    /// first received under `name` and `none` sort, the smallest `name=value` under
    /// `param` sort (so the result stays independent of the received order).
    /// Default: `false`.
    pub dedupe: bool,
    /// Most non-empty parameters (counted before removal) a query may have; beyond it
    /// normalization fails with [`QueryError::TooManyParams`]. Default [`MAX_PARAMS`],
    /// range `1..=`[`MAX_PARAMS_CAP`].
    pub max_params: usize,
    /// Longest query in bytes (without `?`); beyond it normalization fails with
    /// [`QueryError::TooLong`]. Default [`MAX_QUERY_BYTES`], range
    /// `1..=`[`MAX_QUERY_BYTES_CAP`].
    pub max_bytes: usize,
}

impl Default for QueryConfig {
    fn default() -> Self {
        Self {
            remove: DEFAULT_REMOVE.iter().map(|s| (*s).to_owned()).collect(),
            keep: Vec::new(),
            sort: SortMode::Name,
            dedupe: false,
            max_params: MAX_PARAMS,
            max_bytes: MAX_QUERY_BYTES,
        }
    }
}

impl QueryConfig {
    /// Every problem in this configuration, as `(path, message)` pairs where `path` is
    /// relative to the table (`"remove[3]"`, `"keep"`, `"max_bytes"`). Empty when
    /// [`crate::Normalizer::new`] will accept it.
    pub fn validate(&self) -> Vec<(String, String)> {
        self.errors()
            .into_iter()
            .map(|(path, err)| {
                let message = match err {
                    QueryError::InvalidPattern { pattern, reason } => {
                        format!("pattern {pattern:?} {reason}")
                    }
                    other => other.to_string(),
                };
                (path, message)
            })
            .collect()
    }

    /// Every problem, as the path and the error [`crate::Normalizer::new`] would return.
    pub(crate) fn errors(&self) -> Vec<(String, QueryError)> {
        let mut out = Vec::new();
        for (list, patterns) in [("remove", &self.remove), ("keep", &self.keep)] {
            if patterns.len() > MAX_PATTERNS {
                out.push((
                    list.to_owned(),
                    QueryError::TooManyPatterns {
                        list,
                        count: patterns.len(),
                        limit: MAX_PATTERNS,
                    },
                ));
            }
            for (i, p) in patterns.iter().enumerate() {
                if let Err(e) = Pattern::compile(p) {
                    out.push((format!("{list}[{i}]"), e));
                }
            }
        }
        for (field, value, max) in [
            ("max_params", self.max_params, MAX_PARAMS_CAP),
            ("max_bytes", self.max_bytes, MAX_QUERY_BYTES_CAP),
        ] {
            if value == 0 || value > max {
                out.push((
                    field.to_owned(),
                    QueryError::InvalidLimit { field, value, max },
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_uses_default_remove() {
        let c = QueryConfig::default();
        assert!(c.validate().is_empty());
        assert_eq!(c.remove, DEFAULT_REMOVE);
        assert_eq!(c.sort, SortMode::Name);
        assert_eq!((c.max_params, c.max_bytes), (MAX_PARAMS, MAX_QUERY_BYTES));
    }

    #[test]
    fn validate_reports_every_problem_with_paths() {
        let c = QueryConfig {
            remove: vec!["ok".into(), String::new(), "a=b".into()],
            keep: vec!["x\\".into()],
            max_params: 0,
            max_bytes: MAX_QUERY_BYTES_CAP + 1,
            ..QueryConfig::default()
        };
        let paths: Vec<String> = c.validate().into_iter().map(|(p, _)| p).collect();
        assert_eq!(
            paths,
            [
                "remove[1]",
                "remove[2]",
                "keep[0]",
                "max_params",
                "max_bytes"
            ]
        );
    }

    #[test]
    fn validate_reports_too_many_patterns() {
        let c = QueryConfig {
            keep: vec!["a".into(); MAX_PATTERNS + 1],
            ..QueryConfig::default()
        };
        let v = c.validate();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].0, "keep");
        assert!(v[0].1.contains("257 patterns"), "{}", v[0].1);
    }

    #[test]
    fn toml_table_round_trips_and_rejects_unknown_fields() {
        let c: QueryConfig = toml::from_str("sort = \"param\"\ndedupe = true\n").unwrap();
        assert_eq!(c.sort, SortMode::Param);
        assert!(c.dedupe);
        assert_eq!(c.remove, DEFAULT_REMOVE, "missing fields take defaults");
        let c: QueryConfig = toml::from_str("remove = []\nsort = \"none\"").unwrap();
        assert!(c.remove.is_empty());
        assert_eq!(c.sort, SortMode::None);
        assert!(toml::from_str::<QueryConfig>("sorting = \"name\"").is_err());
        assert!(toml::from_str::<QueryConfig>("sort = \"Name\"").is_err());
        let back: QueryConfig = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }
}
