//! `cachet config check`: every problem of a TOML configuration, each on its line, in line
//! order (issue 31: the check stopped at the first schema error, and serde visits a table's
//! keys alphabetically, so that was the alphabetically first one).
//!
//! How: the text is parsed once into a spanned tree (`toml::de::DeTable`); deserializing
//! [`Config`] from it stops at its first schema error, which names a span; the value (or
//! key, or table) at that span is taken out of the tree and the deserialization runs again,
//! until it succeeds (at most [`MAX_ISSUES`] rounds). The configuration that then loads
//! (defaults where values were taken out) is validated ([`Config::validate`]); its issues
//! under a value that was taken out are dropped (they would be about the default, not the
//! text). Each issue gets the 1-based line of its span, or of the value its path names.
//! A TOML syntax error stops everything: it is the one issue. [`check_json`] does the same
//! for JSON (the Envoy plugin's configuration), on a `serde_json::Value` with the lines of
//! its values found by a small scanner.

use std::ops::Range;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::config::{Config, ConfigIssue};

/// Most schema errors collected from one text before the rest is left unreported.
pub const MAX_ISSUES: usize = 100;

/// One problem of a configuration text and the line it is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocatedIssue {
    /// 1-based line of the text; `None` when no line can be named (the text is too large,
    /// or the issue is about something absent from it).
    pub line: Option<usize>,
    /// What and where (the value's path, as [`ConfigIssue`] writes it).
    pub issue: ConfigIssue,
}

impl LocatedIssue {
    /// An issue with the text as a whole (its size, its syntax): no path, at `line` when
    /// one can be named.
    fn whole(line: Option<usize>, message: String) -> Self {
        Self {
            line,
            issue: ConfigIssue {
                path: String::new(),
                message,
            },
        }
    }
}

impl std::fmt::Display for LocatedIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(l) = self.line {
            write!(f, "line {l}: ")?;
        }
        if self.issue.path.is_empty() {
            f.write_str(&self.issue.message)
        } else {
            write!(f, "{}", self.issue)
        }
    }
}

/// One step of a path into the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// Parses and validates a TOML configuration like [`Config::from_toml`], but reports every
/// problem rather than the first: schema errors (wrong types, unknown variants and fields,
/// missing fields) and validation issues, each with its line, sorted by line (issues
/// without a line last, in the order found).
///
/// # Errors
/// The issues, never empty: one for a text over [`crate::config::MAX_CONFIG_BYTES`] or a
/// TOML syntax error, else every schema and validation issue.
pub fn check_toml(text: &str) -> Result<Config, Vec<LocatedIssue>> {
    if let Err(e) = crate::config::check_size(text) {
        return Err(vec![LocatedIssue::whole(None, e.to_string())]);
    }
    let original = match DeTable::parse(text) {
        Ok(t) => t,
        Err(e) => {
            return Err(vec![LocatedIssue::whole(
                e.span().map(|s| line_of(text, s.start)),
                format!("TOML syntax: {}", e.message()),
            )]);
        }
    };
    let mut working = original.clone();
    let mut issues = Vec::new();
    let mut removed: Vec<String> = Vec::new();
    let mut loaded = None;
    for _ in 0..MAX_ISSUES {
        let de = toml::Deserializer::from(working.clone());
        match serde_path_to_error::deserialize::<_, Config>(de) {
            Ok(c) => {
                loaded = Some(c);
                break;
            }
            Err(e) => {
                let serde_path = e.path().to_string();
                let inner = e.into_inner();
                let span = inner.span();
                let in_original = span.as_ref().map(|s| find(original.get_ref(), s));
                let path = match &in_original {
                    Some(steps) if !steps.is_empty() => display(steps),
                    _ => serde_path,
                };
                issues.push(LocatedIssue {
                    line: span.as_ref().map(|s| line_of(text, s.start)),
                    issue: ConfigIssue {
                        path: path.clone(),
                        message: inner.message().to_owned(),
                    },
                });
                let steps = span
                    .as_ref()
                    .map(|s| find(working.get_ref(), s))
                    .unwrap_or_default();
                if steps.is_empty() || !remove(working.get_mut(), &steps) {
                    break;
                }
                removed.push(path);
            }
        }
    }
    if let Some(config) = &loaded {
        for issue in config.validate() {
            if removed.iter().any(|r| under(&issue.path, r)) {
                continue;
            }
            let line = line_of_path(text, original.get_ref(), &issue.path);
            issues.push(LocatedIssue { line, issue });
        }
    }
    if issues.is_empty() {
        return loaded.ok_or_else(Vec::new);
    }
    issues.sort_by_key(|i| i.line.unwrap_or(usize::MAX));
    Err(issues)
}

/// [`check_toml`] for a JSON configuration (the Envoy plugin's form): every schema error
/// (each value set aside in turn, as for TOML) and validation issue, with the line of the
/// value its path names, in line order.
///
/// # Errors
/// As [`check_toml`]: one issue for a text over the size limit or a JSON syntax error,
/// else every schema and validation issue.
pub fn check_json(text: &str) -> Result<Config, Vec<LocatedIssue>> {
    if let Err(e) = crate::config::check_size(text) {
        return Err(vec![LocatedIssue::whole(None, e.to_string())]);
    }
    let mut working: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return Err(vec![LocatedIssue::whole(
                Some(e.line()),
                format!("JSON syntax: {e}"),
            )]);
        }
    };
    let lines = json_lines(text);
    let line_of = |path: &str| {
        // The value's own line, else its nearest ancestor's (a missing field).
        let mut p = path;
        loop {
            if let Some((_, l)) = lines.iter().find(|(q, _)| q == p) {
                return Some(*l);
            }
            let cut = p.rfind(['.', '['])?;
            p = &p[..cut];
        }
    };
    // Array items taken out, by the array's path in the text and the item's index there.
    let mut gone: Vec<(String, usize)> = Vec::new();
    let mut issues = Vec::new();
    let mut removed: Vec<String> = Vec::new();
    let mut loaded = None;
    for _ in 0..MAX_ISSUES {
        match serde_path_to_error::deserialize::<_, Config>(&working) {
            Ok(c) => {
                loaded = Some(c);
                break;
            }
            Err(e) => {
                let now: Vec<Step> = e
                    .path()
                    .iter()
                    .filter_map(|s| match s {
                        serde_path_to_error::Segment::Seq { index } => Some(Step::Index(*index)),
                        serde_path_to_error::Segment::Map { key } => Some(Step::Key(key.clone())),
                        _ => None,
                    })
                    .collect();
                let original = to_original(&now, &gone);
                let path = display(&original);
                issues.push(LocatedIssue {
                    line: line_of(&path),
                    issue: ConfigIssue {
                        path: path.clone(),
                        message: e.into_inner().to_string(),
                    },
                });
                if now.is_empty() || !remove_json(&mut working, &now) {
                    break;
                }
                if let Some((Step::Index(i), parent)) = original.split_last() {
                    gone.push((display(parent), *i));
                }
                removed.push(path);
            }
        }
    }
    if let Some(config) = &loaded {
        for mut issue in config.validate() {
            issue.path = display(&to_original(&parse_path(&issue.path), &gone));
            if removed.iter().any(|r| under(&issue.path, r)) {
                continue;
            }
            issues.push(LocatedIssue {
                line: line_of(&issue.path),
                issue,
            });
        }
    }
    if issues.is_empty() {
        return loaded.ok_or_else(Vec::new);
    }
    issues.sort_by_key(|i| i.line.unwrap_or(usize::MAX));
    Err(issues)
}

/// A path in the working value (items taken out) as a path in the text: each array index
/// moved past the items of that array taken out before it.
fn to_original(now: &[Step], gone: &[(String, usize)]) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::with_capacity(now.len());
    for step in now {
        match step {
            Step::Index(i) => {
                let array = display(&out);
                let mut taken: Vec<usize> = gone
                    .iter()
                    .filter(|(a, _)| *a == array)
                    .map(|(_, j)| *j)
                    .collect();
                taken.sort_unstable();
                let mut orig = *i;
                for j in taken {
                    if j <= orig {
                        orig += 1;
                    }
                }
                out.push(Step::Index(orig));
            }
            Step::Key(k) => out.push(Step::Key(k.clone())),
        }
    }
    out
}

/// `routes[3].ttl` → its steps.
fn parse_path(path: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (key, rest) = part.split_at(part.find('[').unwrap_or(part.len()));
        if !key.is_empty() {
            steps.push(Step::Key(key.to_owned()));
        }
        steps.extend(
            rest.split(['[', ']'])
                .filter_map(|i| i.parse().ok())
                .map(Step::Index),
        );
    }
    steps
}

/// Removes the member or item at `steps` from `v`; `false` when there is none.
fn remove_json(v: &mut serde_json::Value, steps: &[Step]) -> bool {
    match (v, steps) {
        (serde_json::Value::Object(o), [Step::Key(k)]) => o.remove(k).is_some(),
        (serde_json::Value::Array(a), [Step::Index(i)]) if *i < a.len() => {
            a.remove(*i);
            true
        }
        (serde_json::Value::Object(o), [Step::Key(k), rest @ ..]) => {
            o.get_mut(k).is_some_and(|v| remove_json(v, rest))
        }
        (serde_json::Value::Array(a), [Step::Index(i), rest @ ..]) => {
            a.get_mut(*i).is_some_and(|v| remove_json(v, rest))
        }
        _ => false,
    }
}

/// The scanner of [`json_lines`].
struct Scan<'t> {
    b: &'t [u8],
    at: usize,
    line: usize,
    out: Vec<(String, usize)>,
}
impl Scan<'_> {
    fn skip_ws(&mut self) {
        while let Some(&c) = self.b.get(self.at) {
            match c {
                b'\n' => self.line += 1,
                b' ' | b'\t' | b'\r' => {}
                _ => return,
            }
            self.at += 1;
        }
    }
    fn string(&mut self) -> String {
        let start = self.at + 1;
        self.at += 1;
        while let Some(&c) = self.b.get(self.at) {
            self.at += 1;
            match c {
                b'\\' => self.at += 1,
                b'"' => break,
                _ => {}
            }
        }
        let raw = self
            .b
            .get(start..self.at.saturating_sub(1))
            .unwrap_or_default();
        serde_json::from_slice::<String>(&[b"\"", raw, b"\""].concat())
            .unwrap_or_else(|_| String::from_utf8_lossy(raw).into_owned())
    }
    fn value(&mut self, path: &str, depth: usize) {
        self.skip_ws();
        self.out.push((path.to_owned(), self.line));
        match self.b.get(self.at) {
            Some(b'{') if depth < 64 => {
                self.at += 1;
                loop {
                    self.skip_ws();
                    match self.b.get(self.at) {
                        Some(b'"') => {
                            let key = self.string();
                            self.skip_ws();
                            self.at += 1; // ':'
                            let p = if path.is_empty() {
                                key
                            } else {
                                format!("{path}.{key}")
                            };
                            self.value(&p, depth + 1);
                        }
                        Some(b',') => self.at += 1,
                        Some(b'}') => {
                            self.at += 1;
                            return;
                        }
                        _ => return,
                    }
                }
            }
            Some(b'[') if depth < 64 => {
                self.at += 1;
                let mut i = 0;
                loop {
                    self.skip_ws();
                    match self.b.get(self.at) {
                        Some(b']') => {
                            self.at += 1;
                            return;
                        }
                        Some(b',') => self.at += 1,
                        Some(_) => {
                            let before = self.at;
                            self.value(&format!("{path}[{i}]"), depth + 1);
                            if self.at == before {
                                // Not a value (the text does not parse): stop, never spin.
                                return;
                            }
                            i += 1;
                        }
                        None => return,
                    }
                }
            }
            Some(b'"') => {
                self.string();
            }
            Some(_) => {
                while let Some(&c) = self.b.get(self.at) {
                    if matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n') {
                        break;
                    }
                    self.at += 1;
                }
            }
            None => {}
        }
    }
}

/// Every value of a JSON text (known to parse) with its path and the 1-based line it
/// starts on: a small scanner over strings, objects and arrays (serde_json keeps no
/// positions).
fn json_lines(text: &str) -> Vec<(String, usize)> {
    let mut s = Scan {
        b: text.as_bytes(),
        at: 0,
        line: 1,
        out: Vec::new(),
    };
    s.value("", 0);
    s.out
}

/// 1-based line of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    1 + text
        .as_bytes()
        .iter()
        .take(at)
        .filter(|&&b| b == b'\n')
        .count()
}

/// Whether `path` is `prefix` or inside it (`routes[2].ttl` is under `routes[2]`).
fn under(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

/// `edge.ttl`, `routes[2].ttl`.
fn display(steps: &[Step]) -> String {
    let mut s = String::new();
    for step in steps {
        match step {
            Step::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Step::Index(i) => {
                use std::fmt::Write as _;
                let _ = write!(s, "[{i}]");
            }
        }
    }
    s
}

/// Whether `outer` contains `inner`.
fn contains(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end
}

/// The path of the innermost key or value of `table` at `span`: a key whose span is
/// `span` (an unknown field), else the deepest value containing it; empty when none does.
fn find(table: &DeTable<'_>, span: &Range<usize>) -> Vec<Step> {
    let mut steps = Vec::new();
    find_in_table(table, span, &mut steps);
    steps
}

/// A table written with a `[header]` spans its header only, not the lines below it: its
/// contents are searched whatever its span.
fn find_in_table(table: &DeTable<'_>, span: &Range<usize>, steps: &mut Vec<Step>) -> bool {
    for (k, v) in table {
        steps.push(Step::Key(k.get_ref().to_string()));
        if k.span() == *span || find_in_value(v, span, steps) {
            return true;
        }
        steps.pop();
    }
    false
}

/// Whether `span` is in `v` (then `steps` leads to the deepest node holding it).
fn find_in_value(v: &Spanned<DeValue<'_>>, span: &Range<usize>, steps: &mut Vec<Step>) -> bool {
    match v.get_ref() {
        DeValue::Table(t) => find_in_table(t, span, steps) || contains(&v.span(), span),
        DeValue::Array(a) => {
            for (i, item) in a.iter().enumerate() {
                steps.push(Step::Index(i));
                if find_in_value(item, span, steps) {
                    return true;
                }
                steps.pop();
            }
            contains(&v.span(), span)
        }
        _ => contains(&v.span(), span),
    }
}

/// Removes the key or array item at `steps` from `table`; `false` when there is none.
fn remove(table: &mut DeTable<'_>, steps: &[Step]) -> bool {
    let Some((Step::Key(first), rest)) = steps.split_first() else {
        return false;
    };
    if rest.is_empty() {
        return table.remove(first.as_str()).is_some();
    }
    match table.get_mut(first.as_str()) {
        Some(v) => remove_in(v.get_mut(), rest),
        None => false,
    }
}

fn remove_in(value: &mut DeValue<'_>, steps: &[Step]) -> bool {
    match (value, steps) {
        (DeValue::Table(t), _) => remove(t, steps),
        (DeValue::Array(a), [Step::Index(i), rest @ ..]) => {
            if rest.is_empty() {
                if *i >= a.len() {
                    return false;
                }
                let kept: toml::de::DeArray<'_> = a
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| j != i)
                    .map(|(_, item)| item.clone())
                    .collect();
                *a = kept;
                return true;
            }
            match a.get_mut(*i) {
                Some(item) => remove_in(item.get_mut(), rest),
                None => false,
            }
        }
        _ => false,
    }
}

/// The line of the value a validation issue's path names (`routes[3].ttl`,
/// `query.remove[1]`), or of its nearest ancestor present in the text.
fn line_of_path(text: &str, table: &DeTable<'_>, path: &str) -> Option<usize> {
    let mut span = None;
    let mut value: Option<&Spanned<DeValue<'_>>> = None;
    for part in path.split('.') {
        let (key, indexes) = match part.find('[') {
            Some(b) => (&part[..b], &part[b..]),
            None => (part, ""),
        };
        let next = match value.map(Spanned::get_ref) {
            None => table.get(key),
            Some(DeValue::Table(t)) => t.get(key),
            Some(_) => None,
        };
        let Some(mut v) = next else { break };
        span = Some(v.span());
        for index in indexes
            .split(['[', ']'])
            .filter(|s| !s.is_empty())
            .filter_map(|s| s.parse::<usize>().ok())
        {
            match v.get_ref() {
                DeValue::Array(a) if index < a.len() => {
                    v = &a[index];
                    span = Some(v.span());
                }
                _ => break,
            }
        }
        value = Some(v);
    }
    span.map(|s| line_of(text, s.start))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUILTIN: &str = include_str!("../../../edge-app/cachet.toml");

    fn issues(text: &str) -> Vec<String> {
        check_toml(text).map_or_else(
            |v| v.iter().map(ToString::to_string).collect(),
            |_| Vec::new(),
        )
    }

    #[test]
    fn the_built_in_configuration_has_no_issue() {
        assert!(check_toml(BUILTIN).is_ok());
    }

    #[test]
    fn every_schema_and_validation_issue_is_reported_in_line_order() {
        // Two schema errors (serde alone would report only `device.profile`, the first
        // alphabetically) and two validation issues, in another order in the text.
        let text = "\
[edge]
backend = \"\"
hit_for_pass = \"5 parsecs\"
sandbox_max_requests = 0

[device]
profile = \"bogus\"
";
        let got = issues(text);
        assert_eq!(got.len(), 4, "{got:#?}");
        assert!(got[0].starts_with("line 2: edge.backend: "), "{got:#?}");
        assert!(
            got[1].starts_with("line 3: edge.hit_for_pass: "),
            "{got:#?}"
        );
        assert!(
            got[2].starts_with("line 4: edge.sandbox_max_requests: "),
            "{got:#?}"
        );
        assert!(
            got[3].starts_with("line 7: device.profile: unknown variant `bogus`"),
            "{got:#?}"
        );
    }

    #[test]
    fn unknown_fields_and_bad_array_items_keep_their_own_lines_and_indexes() {
        let text = "\
[edge]
no_such_key = 1

[[routes]]
name = \"a\"
path_prefix = \"/a/\"
ttl = \"forever\"

[[routes]]
name = \"b\"
path_prefix = \"/b/\"
ttl = \"also never\"

[[routes]]
path_prefix = \"/c/\"
ttl = \"1 fortnight\"
";
        let got = issues(text);
        assert_eq!(got.len(), 5, "{got:#?}");
        assert!(
            got[0].starts_with("line 2: edge.no_such_key: unknown field"),
            "{got:#?}"
        );
        assert!(got[1].starts_with("line 7: routes[0].ttl: "), "{got:#?}");
        assert!(got[2].starts_with("line 12: routes[1].ttl: "), "{got:#?}");
        // A validation issue on the table (its header's line), then its bad value.
        assert_eq!(got[3], "line 14: routes[2].name: required");
        assert!(got[4].starts_with("line 16: routes[2].ttl: "), "{got:#?}");
    }

    #[test]
    fn a_syntax_error_is_the_one_issue() {
        let got = issues("[edge\nbackend = 1\n");
        assert_eq!(got.len(), 1, "{got:#?}");
        assert!(got[0].starts_with("line 1: TOML syntax: "), "{got:#?}");
    }

    #[test]
    fn json_reports_every_issue_in_line_order_with_indexes_as_written() {
        let text = r#"{
  "edge": {
    "backend": "",
    "hit_for_pass": "5 parsecs"
  },
  "routes": [
    {"name": "a", "path_prefix": "/a/", "ttl": "forever"},
    {"path_prefix": "/b/"},
    {"name": "c", "path_prefix": "/c/", "ttl": "1 fortnight"}
  ],
  "device": {"profile": "bogus"}
}"#;
        let got = check_json(text).map_or_else(
            |v| v.iter().map(ToString::to_string).collect(),
            |_| Vec::new(),
        );
        assert_eq!(got.len(), 6, "{got:#?}");
        assert_eq!(got[0], "line 3: edge.backend: must name the origin backend");
        assert!(
            got[1].starts_with("line 4: edge.hit_for_pass: "),
            "{got:#?}"
        );
        assert!(got[2].starts_with("line 7: routes[0].ttl: "), "{got:#?}");
        assert_eq!(got[3], "line 8: routes[1].name: required");
        assert!(got[4].starts_with("line 9: routes[2].ttl: "), "{got:#?}");
        assert!(
            got[5].starts_with("line 11: device.profile: unknown variant"),
            "{got:#?}"
        );
        let got = check_json("{\n  \"edge\": [\n");
        assert!(got.is_err_and(|v| v.len() == 1 && v[0].line == Some(3)));
    }

    #[test]
    fn the_json_scanner_never_panics_and_finds_nested_paths() {
        let lines = json_lines("{\"a\": {\"b\": [1,\n {\"c\\\"\": \"x\\\"]\"}]}}");
        assert!(lines.contains(&("a.b[1].c\"".to_owned(), 2)), "{lines:?}");
        for text in ["", "{", "[[[", "[}", "[:]", "{\"a\"", "\"\\", "{\"a\":}"] {
            let _ = json_lines(text);
        }
    }

    proptest::proptest! {
        #[test]
        fn checks_never_panic(text in "[ -~\n\\[\\]{}\"=,:]{0,200}") {
            let _ = check_toml(&text);
            let _ = check_json(&text);
            let _ = json_lines(&text);
        }
    }

    #[test]
    fn one_bad_value_is_reported_on_its_own_line_wherever_it_is() {
        let rows = [
            "[edge]",
            "hit_for_pass = \"2m\"",
            "sandbox_idle_timeout = \"5s\"",
            "config_check_interval = \"1s\"",
        ];
        for bad in 1..rows.len() {
            let mut text: Vec<String> = rows.iter().map(|r| (*r).to_owned()).collect();
            // `hit_for_pass = "x2m"`: not a duration.
            text[bad] = text[bad].replace(" = \"", " = \"x");
            let got = check_toml(&text.join("\n")).unwrap_err();
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(got[0].line, Some(bad + 1), "{got:?}");
        }
    }

    #[test]
    fn the_same_configuration_loads_as_from_toml() {
        let checked = check_toml(BUILTIN).unwrap();
        let loaded = Config::from_toml(BUILTIN).unwrap();
        assert_eq!(format!("{checked:?}"), format!("{loaded:?}"));
    }
}
