//! The `[device]` configuration table, its rule shape, and its validation.

use std::collections::BTreeSet;
use std::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{
    DEFAULT_FORCE_COOKIE, DEFAULT_HEADER, DeviceClass, DeviceError, MAX_HEADER_NAME_BYTES,
    MAX_PATTERN_BYTES, MAX_PATTERNS, MAX_RULES, MAX_SCAN_BYTES, MAX_SCAN_BYTES_LIMIT, Profile,
};

/// The `[device]` table of the Cachet config (TOML for people, the same schema as JSON in
/// Envoy's plugin configuration). Every field is optional.
///
/// ```toml
/// [device]
/// profile = "accurate"          # or "seed"; ignored when `rules` is non-empty
/// default = "pc"                # class when no rule matches
/// max_scan_bytes = 512          # only this many leading UA bytes are scanned
/// header = "X-Cachet-Device"    # request header carrying the class to the origin
/// client_hints = true           # Sec-CH-UA-Mobile decides first (default: true for
///                               # "accurate", false for "seed")
/// force_cookie = "X-UA-Device-force" # visitor's override cookie; "" turns it off
/// rules = [
///   { contains = "iPad", class = "pc" },
///   { contains = ["Android", "Mobile"], class = "smartphone" },
///   { contains = "Android", unless = ["Mobile"], class = "pc" },
/// ]
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeviceConfig {
    /// Built-in rule profile used when `rules` is empty (default `accurate`).
    pub profile: Profile,
    /// Ordered custom rules; when non-empty they replace the profile's rules entirely.
    /// The first matching rule wins. At most [`MAX_RULES`] rules and [`MAX_PATTERNS`]
    /// distinct patterns.
    pub rules: Vec<Rule>,
    /// Class when no rule matches, including a missing (empty) User-Agent (default `pc`).
    pub default: DeviceClass,
    /// Only the first `max_scan_bytes` bytes of the User-Agent are scanned, in bytes
    /// (default [`MAX_SCAN_BYTES`], allowed `1..=`[`MAX_SCAN_BYTES_LIMIT`]).
    pub max_scan_bytes: usize,
    /// Name of the request header in which the edge sends the class to the origin
    /// (default [`DEFAULT_HEADER`]); an HTTP token of at most [`MAX_HEADER_NAME_BYTES`].
    pub header: String,
    /// Whether a valid `Sec-CH-UA-Mobile` request header (`?1` → smartphone, `?0` → pc)
    /// decides the class before the User-Agent rules. Unset (the default) means the
    /// profile's choice ([`Profile::client_hints`]: `true` for `accurate`, `false` for
    /// `seed`, which stays Hatena's rule exactly). The hint's value never reaches the cache
    /// key; only the class does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_hints: Option<bool>,
    /// Name of the cookie carrying the visitor's explicit choice (a "view PC site" link),
    /// as varnish-devicedetect's `X-UA-Device-force`: its value, normalized to a class
    /// (`pc`/`desktop`/`tablet…` → pc, `smartphone`/`sp`/`phone`/`mobile…` → smartphone,
    /// anything else ignored), overrides the hint and the rules. Default
    /// [`DEFAULT_FORCE_COOKIE`]; `""` turns the override off. An RFC 6265 cookie-name
    /// (an RFC 9110 token) of at most [`MAX_HEADER_NAME_BYTES`] bytes.
    pub force_cookie: String,
    /// The `User-Agent` each class's fills carry instead of the client's (issue 27 item 4):
    /// where Cachet keys an object on the class, what the origin sees must be a function
    /// of the class only, or an origin that reflects part of one visitor's UA would shape
    /// the object every visitor of that class gets (varnish-devicedetect's backend recipe
    /// rewrites `bereq.http.User-Agent` the same way). Defaults:
    /// [`DEFAULT_PC_FILL_USER_AGENT`], [`DEFAULT_SMARTPHONE_FILL_USER_AGENT`].
    pub fill_user_agent: FillUserAgents,
}

/// The default `[device.fill_user_agent] pc`: a current desktop Chrome, classified `pc`
/// by both built-in profiles (tested), so an origin that sniffs the UA agrees with the class.
pub const DEFAULT_PC_FILL_USER_AGENT: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36";

/// The default `[device.fill_user_agent] smartphone`: a current Android phone's Chrome,
/// classified `smartphone` by both built-in profiles (tested).
pub const DEFAULT_SMARTPHONE_FILL_USER_AGENT: &str = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36";

/// Longest `[device.fill_user_agent]` value, in bytes.
pub const MAX_FILL_USER_AGENT_BYTES: usize = 512;

/// `[device.fill_user_agent]`: one canonical `User-Agent` per class, sent on fills.
///
/// ```toml
/// [device.fill_user_agent]
/// pc = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36"
/// smartphone = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36"
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FillUserAgents {
    /// Sent on fills of the `pc` class: visible ASCII and spaces, 1 to
    /// [`MAX_FILL_USER_AGENT_BYTES`] bytes.
    pub pc: String,
    /// Sent on fills of the `smartphone` class; same limits.
    pub smartphone: String,
}

impl Default for FillUserAgents {
    fn default() -> Self {
        Self {
            pc: DEFAULT_PC_FILL_USER_AGENT.to_owned(),
            smartphone: DEFAULT_SMARTPHONE_FILL_USER_AGENT.to_owned(),
        }
    }
}

impl FillUserAgents {
    /// The `User-Agent` a fill of `class` carries.
    pub fn of(&self, class: DeviceClass) -> &str {
        match class {
            DeviceClass::Pc => &self.pc,
            DeviceClass::Smartphone => &self.smartphone,
        }
    }
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            profile: Profile::default(),
            rules: Vec::new(),
            default: DeviceClass::Pc,
            max_scan_bytes: MAX_SCAN_BYTES,
            header: DEFAULT_HEADER.to_owned(),
            client_hints: None,
            force_cookie: DEFAULT_FORCE_COOKIE.to_owned(),
            fill_user_agent: FillUserAgents::default(),
        }
    }
}

/// One ordered rule: it matches when every `contains` pattern occurs in the scanned
/// User-Agent and no `unless` pattern does. Patterns are case-sensitive byte substrings.
///
/// Serde shape (TOML inline table or JSON object): `contains` is one string or a list of
/// strings; `unless` is optional (one string or a list); `class` is `"pc"` or
/// `"smartphone"`. Serialization writes a one-element `contains` as a plain string and
/// omits an empty `unless`.
///
/// ```
/// # use cachet_device::{DeviceClass, Rule};
/// let r: Rule = toml::from_str(r#"contains = "Android"
/// unless = ["Mobile"]
/// class = "pc""#).unwrap();
/// assert_eq!(r.contains, ["Android"]);
/// assert_eq!(r.unless, ["Mobile"]);
/// assert_eq!(r.class, DeviceClass::Pc);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Patterns that must all occur (at least one pattern, none empty).
    #[serde(with = "one_or_many")]
    pub contains: Vec<String>,
    /// Patterns none of which may occur (may be empty).
    #[serde(default, with = "one_or_many", skip_serializing_if = "Vec::is_empty")]
    pub unless: Vec<String>,
    /// The class this rule assigns.
    pub class: DeviceClass,
}

/// Serde helper: a list of strings written as one string or a sequence.
mod one_or_many {
    use super::{Deserializer, SeqAccess, Serializer, Visitor, de, fmt};

    pub(super) fn serialize<S: Serializer>(v: &[String], s: S) -> Result<S::Ok, S::Error> {
        match v {
            [one] => s.serialize_str(one),
            many => s.collect_seq(many),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Vec<String>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a list of strings")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(vec![v.to_owned()])
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
                while let Some(s) = seq.next_element::<String>()? {
                    out.push(s);
                }
                Ok(out)
            }
        }
        d.deserialize_any(V)
    }
}

impl DeviceConfig {
    /// Whether `Sec-CH-UA-Mobile` decides before the rules: [`DeviceConfig::client_hints`]
    /// when set, else the profile's default ([`Profile::client_hints`]).
    pub fn effective_client_hints(&self) -> bool {
        self.client_hints
            .unwrap_or_else(|| self.profile.client_hints())
    }

    /// The rules in force: `rules` when non-empty, else the profile's rules.
    pub fn effective_rules(&self) -> Vec<Rule> {
        if self.rules.is_empty() {
            self.profile.rules()
        } else {
            self.rules.clone()
        }
    }

    /// Every problem in this configuration, as (`path`, `message`) pairs such as
    /// (`"rules[2].contains[0]"`, `"empty pattern"`), in document order; empty when the
    /// configuration is valid (then [`crate::Classifier::new`] succeeds). Used by
    /// `cachet config check`.
    pub fn validate(&self) -> Vec<(String, String)> {
        self.problems()
            .into_iter()
            .map(|e| {
                let path = e.path().unwrap_or_default().to_owned();
                let full = e.to_string();
                let msg = full
                    .strip_prefix(path.as_str())
                    .and_then(|m| m.strip_prefix(": "))
                    .unwrap_or(&full)
                    .to_owned();
                (path, msg)
            })
            .collect()
    }

    /// Every problem as a [`DeviceError`], in document order.
    pub(crate) fn problems(&self) -> Vec<DeviceError> {
        let mut out = Vec::new();
        let max_scan_ok = (1..=MAX_SCAN_BYTES_LIMIT).contains(&self.max_scan_bytes);
        if !max_scan_ok {
            out.push(DeviceError::ScanBytes {
                path: "max_scan_bytes".into(),
                value: self.max_scan_bytes,
                max: MAX_SCAN_BYTES_LIMIT,
            });
        }
        if let Some(reason) = header_problem(&self.header) {
            out.push(DeviceError::InvalidHeader {
                path: "header".into(),
                reason,
            });
        }
        if !self.force_cookie.is_empty()
            && let Some(reason) = token_problem("cookie name", &self.force_cookie)
        {
            out.push(DeviceError::InvalidHeader {
                path: "force_cookie".into(),
                reason,
            });
        }
        for (class, ua) in [
            ("pc", &self.fill_user_agent.pc),
            ("smartphone", &self.fill_user_agent.smartphone),
        ] {
            let reason = if ua.is_empty() {
                Some("empty User-Agent".to_owned())
            } else if ua.len() > MAX_FILL_USER_AGENT_BYTES {
                Some(format!(
                    "{} bytes, over the {MAX_FILL_USER_AGENT_BYTES}-byte limit",
                    ua.len()
                ))
            } else if !ua.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
                Some("only visible ASCII and spaces are allowed".to_owned())
            } else {
                None
            };
            if let Some(reason) = reason {
                out.push(DeviceError::InvalidHeader {
                    path: format!("fill_user_agent.{class}"),
                    reason,
                });
            }
        }
        if self.rules.len() > MAX_RULES {
            out.push(DeviceError::TooManyRules {
                path: "rules".into(),
                count: self.rules.len(),
                max: MAX_RULES,
            });
        }
        // A pattern longer than the scanned prefix can never be found.
        let max_len = if max_scan_ok {
            MAX_PATTERN_BYTES.min(self.max_scan_bytes)
        } else {
            MAX_PATTERN_BYTES
        };
        let mut distinct: BTreeSet<&str> = BTreeSet::new();
        for (i, rule) in self.rules.iter().enumerate() {
            if rule.contains.is_empty() {
                out.push(DeviceError::EmptyContains {
                    path: format!("rules[{i}].contains"),
                });
            }
            for (field, list) in [("contains", &rule.contains), ("unless", &rule.unless)] {
                for (j, p) in list.iter().enumerate() {
                    if p.is_empty() {
                        out.push(DeviceError::EmptyPattern {
                            path: format!("rules[{i}].{field}[{j}]"),
                        });
                    } else if p.len() > max_len {
                        out.push(DeviceError::PatternTooLong {
                            path: format!("rules[{i}].{field}[{j}]"),
                            len: p.len(),
                            max: max_len,
                        });
                    }
                    distinct.insert(p);
                }
            }
            if let Some(p) = rule.contains.iter().find(|p| rule.unless.contains(p)) {
                out.push(DeviceError::Unsatisfiable {
                    path: format!("rules[{i}]"),
                    pattern: p.chars().take(64).collect(),
                });
            }
        }
        if distinct.len() > MAX_PATTERNS {
            out.push(DeviceError::TooManyPatterns {
                path: "rules".into(),
                count: distinct.len(),
                max: MAX_PATTERNS,
            });
        }
        out
    }
}

/// Why `name` is not an acceptable header name, if it is not (RFC 9110 §5.1: a field name
/// is a `token` of `tchar`s).
fn header_problem(name: &str) -> Option<String> {
    token_problem("header name", name)
}

/// Why `name` (a header or cookie name, called `what` in the message) is not an RFC 9110
/// `token` of at most [`MAX_HEADER_NAME_BYTES`] bytes, if it is not. RFC 6265 §4.1.1
/// defines a cookie-name as the same `token`.
fn token_problem(what: &str, name: &str) -> Option<String> {
    if name.is_empty() {
        return Some(format!("{what} is empty"));
    }
    if name.len() > MAX_HEADER_NAME_BYTES {
        return Some(format!(
            "{what} is {} bytes, longer than the limit of {MAX_HEADER_NAME_BYTES}",
            name.len()
        ));
    }
    let is_tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if let Some(c) = name.chars().find(|c| !u8::try_from(*c).is_ok_and(is_tchar)) {
        return Some(format!(
            "{what} contains {c:?}, which is not allowed in an HTTP field name (RFC 9110 token)"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(contains: &[&str], unless: &[&str], class: DeviceClass) -> Rule {
        Rule {
            contains: contains.iter().map(|s| (*s).to_owned()).collect(),
            unless: unless.iter().map(|s| (*s).to_owned()).collect(),
            class,
        }
    }

    #[test]
    fn default_config_is_valid() {
        assert!(DeviceConfig::default().validate().is_empty());
    }

    #[test]
    fn toml_rule_shapes_from_the_brief_parse() {
        let cfg: DeviceConfig = toml::from_str(
            r#"rules = [ { contains = "iPad", class = "pc" }, { contains = ["Android", "Mobile"], class = "smartphone" }, { contains = "Android", unless = ["Mobile"], class = "pc" } ]"#,
        )
        .unwrap();
        assert_eq!(
            cfg.rules,
            vec![
                rule(&["iPad"], &[], DeviceClass::Pc),
                rule(&["Android", "Mobile"], &[], DeviceClass::Smartphone),
                rule(&["Android"], &["Mobile"], DeviceClass::Pc),
            ]
        );
        assert_eq!(cfg.header, DEFAULT_HEADER);
        assert_eq!(cfg.max_scan_bytes, MAX_SCAN_BYTES);
        assert!(cfg.validate().is_empty());
    }

    #[test]
    fn unknown_fields_and_bad_shapes_are_rejected() {
        assert!(toml::from_str::<DeviceConfig>("profil = \"seed\"").is_err());
        assert!(
            toml::from_str::<DeviceConfig>("rules = [{ contains = 1, class = \"pc\" }]").is_err()
        );
        assert!(
            toml::from_str::<DeviceConfig>(
                "rules = [{ contains = \"a\", class = \"pc\", when = \"x\" }]"
            )
            .is_err()
        );
        assert!(
            toml::from_str::<DeviceConfig>("rules = [{ contains = \"a\", class = \"tablet\" }]")
                .is_err()
        );
        assert!(toml::from_str::<DeviceConfig>("profile = \"strict\"").is_err());
    }

    #[test]
    fn validate_reports_every_problem_with_paths() {
        let cfg = DeviceConfig {
            rules: vec![
                rule(&["ok"], &[], DeviceClass::Pc),
                rule(&[], &[""], DeviceClass::Pc),
                rule(&["x", ""], &["x"], DeviceClass::Smartphone),
            ],
            max_scan_bytes: 0,
            header: "X Device".into(),
            ..DeviceConfig::default()
        };
        let paths: Vec<String> = cfg.validate().into_iter().map(|(p, _)| p).collect();
        assert_eq!(
            paths,
            [
                "max_scan_bytes",
                "header",
                "rules[1].contains",
                "rules[1].unless[0]",
                "rules[2].contains[1]",
                "rules[2]",
            ]
        );
        let msgs = cfg.validate();
        assert_eq!(msgs[3].1, "empty pattern");
        assert!(msgs[1].1.contains("' '"), "{}", msgs[1].1);
    }

    #[test]
    fn pattern_longer_than_scan_window_is_reported() {
        let cfg = DeviceConfig {
            rules: vec![rule(&["abcdef"], &[], DeviceClass::Pc)],
            max_scan_bytes: 5,
            ..DeviceConfig::default()
        };
        let v = cfg.validate();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].0, "rules[0].contains[0]");
        assert!(v[0].1.contains("6 bytes"), "{}", v[0].1);
    }

    #[test]
    fn limits_on_counts_and_sizes() {
        let many: Vec<Rule> = (0..=MAX_RULES)
            .map(|i| rule(&[&format!("p{i}")], &[], DeviceClass::Pc))
            .collect();
        let cfg = DeviceConfig {
            rules: many,
            ..DeviceConfig::default()
        };
        let paths: Vec<String> = cfg.validate().into_iter().map(|(p, _)| p).collect();
        assert_eq!(paths, ["rules", "rules"]); // too many rules, too many patterns

        let cfg = DeviceConfig {
            max_scan_bytes: MAX_SCAN_BYTES_LIMIT + 1,
            header: "x".repeat(MAX_HEADER_NAME_BYTES + 1),
            ..DeviceConfig::default()
        };
        assert_eq!(cfg.validate().len(), 2);
        let ok = DeviceConfig {
            max_scan_bytes: MAX_SCAN_BYTES_LIMIT,
            header: "x".repeat(MAX_HEADER_NAME_BYTES),
            ..DeviceConfig::default()
        };
        assert!(ok.validate().is_empty());
    }

    #[test]
    fn header_names_follow_rfc9110_token() {
        assert!(header_problem("X-Cachet-Device").is_none());
        assert!(header_problem("x_dev.class~1").is_none());
        for bad in ["", "X:Dev", "X Dev", "Dévice", "X\r\nY", "X/Y"] {
            assert!(header_problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn hints_and_force_cookie_options() {
        let cfg = DeviceConfig::default();
        assert!(cfg.effective_client_hints());
        assert_eq!(cfg.force_cookie, DEFAULT_FORCE_COOKIE);
        let seed: DeviceConfig = toml::from_str("profile = \"seed\"").unwrap();
        assert!(!seed.effective_client_hints());
        let on: DeviceConfig =
            toml::from_str("profile = \"seed\"\nclient_hints = true\nforce_cookie = \"\"").unwrap();
        assert!(on.effective_client_hints());
        assert!(on.validate().is_empty());
        let bad = DeviceConfig {
            force_cookie: "view pc".into(),
            ..DeviceConfig::default()
        };
        let v = bad.validate();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].0, "force_cookie");
        assert!(v[0].1.starts_with("cookie name contains ' '"), "{}", v[0].1);
        // Round trip through TOML keeps an unset `client_hints` unset.
        let text = toml::to_string(&DeviceConfig::default()).unwrap();
        assert!(!text.contains("client_hints"), "{text}");
        assert_eq!(
            toml::from_str::<DeviceConfig>(&text).unwrap(),
            DeviceConfig::default()
        );
    }

    #[test]
    fn effective_rules_prefer_custom_rules() {
        let custom = vec![rule(&["Foo"], &[], DeviceClass::Smartphone)];
        let cfg = DeviceConfig {
            profile: Profile::Seed,
            rules: custom.clone(),
            ..DeviceConfig::default()
        };
        assert_eq!(cfg.effective_rules(), custom);
        let cfg = DeviceConfig {
            profile: Profile::Seed,
            ..DeviceConfig::default()
        };
        assert_eq!(cfg.effective_rules(), Profile::Seed.rules());
    }
}
