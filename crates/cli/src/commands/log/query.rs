//! The `cachet log` query language, in the spirit of `varnishlog -q`:
//!
//! ```text
//! query  = or
//! or     = and { ("or" | "||") and }
//! and    = unary { ("and" | "&&") unary }
//! unary  = ("not" | "!") unary | "(" or ")" | test
//! test   = FIELD [ OP VALUE ]          OP = == != < <= > >= ~ !~
//! VALUE  = number | "string" | 'string' | word (up to whitespace or a parenthesis)
//! ```
//!
//! FIELD is an access-log field (`cachet_http::access::Access`). A test on a field that is
//! absent or `null` is false, whatever the operator (as `varnishlog -q` treats a record
//! without the tag); `not` inverts a whole test. `FIELD` alone is true when the field is
//! present and not `null`, `false`, `""` or `[]`. `==`/`!=` compare numbers as numbers,
//! `5xx` against a number means 500..=599, anything else compares the field's text
//! (case-sensitive); on an array (`invalidated`) they test whether any element matches.
//! `<`…`>=` need a number. `~`/`!~` are regular expressions (Rust `regex` syntax) searched
//! in the field's text. Errors name the 1-based column.

use regex::Regex;
use serde_json::{Map, Value};

/// Every field of an edge access-log line, `ban_added` included (admin lines).
pub const FIELDS: &[&str] = &[
    "time",
    "method",
    "user_agent",
    "invalidated",
    "host",
    "url",
    "route",
    "cache",
    "status",
    "device",
    "key",
    "pass_reason",
    "origin_ms",
    "body_bytes",
    "total_ms",
    "stored_bytes",
    "origin_bytes",
    "banned_by",
    "bans_unknown",
    "refresh",
    "refresh_ms",
    "ws_watermark",
    "ws_cleared",
    "ws_overflow",
    "ws_verified",
    "tier",
    "instance_request",
    "error",
    "failure",
    "ban_added",
];

/// A parse error: what was wrong and at which 1-based column (in characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryError {
    /// 1-based column of the offending token (one past the end for "unexpected end").
    pub column: usize,
    /// What was expected or refused.
    pub message: String,
}

impl std::fmt::Display for QueryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "column {}: {}", self.column, self.message)
    }
}

impl std::error::Error for QueryError {}

/// Comparison operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Match,
    NoMatch,
}

/// The right-hand side of a test.
#[derive(Debug, Clone)]
enum Operand {
    Text(String),
    Number(f64),
    /// `5xx`: the hundred `5`.
    Class(u16),
    Regex(Regex),
}

/// A parsed query.
#[derive(Debug, Clone)]
pub enum Query {
    /// Both hold.
    And(Box<Query>, Box<Query>),
    /// Either holds.
    Or(Box<Query>, Box<Query>),
    /// The inner query does not hold.
    Not(Box<Query>),
    /// The field is present and not empty.
    Present(String),
    /// A comparison.
    Test(String, TestOp),
}

/// An operator and its operand (opaque; built by [`parse`]).
#[derive(Debug, Clone)]
pub struct TestOp {
    op: Op,
    value: Operand,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    Str(String),
    Op(Op),
    And,
    Or,
    Not,
    Open,
    Close,
}

/// Splits `text` into `(token, column)`.
fn lex(text: &str) -> Result<Vec<(Tok, usize)>, QueryError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut pos = 0;
    let err = |column: usize, message: String| QueryError { column, message };
    while pos < chars.len() {
        let ch = chars[pos];
        let col = pos + 1;
        let two: String = chars[pos..chars.len().min(pos + 2)].iter().collect();
        let (tok, len) = match (ch, two.as_str()) {
            (w, _) if w.is_whitespace() => {
                pos += 1;
                continue;
            }
            (_, "==") => (Tok::Op(Op::Eq), 2),
            (_, "!=") => (Tok::Op(Op::Ne), 2),
            (_, "<=") => (Tok::Op(Op::Le), 2),
            (_, ">=") => (Tok::Op(Op::Ge), 2),
            (_, "!~") => (Tok::Op(Op::NoMatch), 2),
            (_, "&&") => (Tok::And, 2),
            (_, "||") => (Tok::Or, 2),
            ('<', _) => (Tok::Op(Op::Lt), 1),
            ('>', _) => (Tok::Op(Op::Gt), 1),
            ('~', _) => (Tok::Op(Op::Match), 1),
            ('!', _) => (Tok::Not, 1),
            ('(', _) => (Tok::Open, 1),
            (')', _) => (Tok::Close, 1),
            ('=', _) => return Err(err(col, "\"=\" is not an operator; use \"==\"".into())),
            ('"' | '\'', _) => {
                let mut lit = String::new();
                let mut end = pos + 1;
                loop {
                    match chars.get(end) {
                        None => return Err(err(col, "unterminated string".into())),
                        Some('\\')
                            if chars.get(end + 1) == Some(&ch)
                                || chars.get(end + 1) == Some(&'\\') =>
                        {
                            lit.push(chars[end + 1]);
                            end += 2;
                        }
                        Some(&q) if q == ch => break,
                        Some(&o) => {
                            lit.push(o);
                            end += 1;
                        }
                    }
                }
                (Tok::Str(lit), end + 1 - pos)
            }
            _ => {
                let mut end = pos;
                while end < chars.len()
                    && !chars[end].is_whitespace()
                    && !"()=!<>~&|\"'".contains(chars[end])
                {
                    end += 1;
                }
                let w: String = chars[pos..end].iter().collect();
                let tok = match w.as_str() {
                    "and" => Tok::And,
                    "or" => Tok::Or,
                    "not" => Tok::Not,
                    _ => Tok::Word(w),
                };
                (tok, end - pos)
            }
        };
        out.push((tok, col));
        pos += len;
    }
    Ok(out)
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    at: usize,
    end: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at).map(|(t, _)| t)
    }

    fn column(&self) -> usize {
        self.toks.get(self.at).map_or(self.end, |(_, c)| *c)
    }

    fn err<T>(&self, message: impl Into<String>) -> Result<T, QueryError> {
        Err(QueryError {
            column: self.column(),
            message: message.into(),
        })
    }

    fn or(&mut self) -> Result<Query, QueryError> {
        let mut q = self.and()?;
        while self.peek() == Some(&Tok::Or) {
            self.at += 1;
            q = Query::Or(Box::new(q), Box::new(self.and()?));
        }
        Ok(q)
    }

    fn and(&mut self) -> Result<Query, QueryError> {
        let mut q = self.unary()?;
        while self.peek() == Some(&Tok::And) {
            self.at += 1;
            q = Query::And(Box::new(q), Box::new(self.unary()?));
        }
        Ok(q)
    }

    fn unary(&mut self) -> Result<Query, QueryError> {
        match self.peek() {
            Some(Tok::Not) => {
                self.at += 1;
                Ok(Query::Not(Box::new(self.unary()?)))
            }
            Some(Tok::Open) => {
                self.at += 1;
                let q = self.or()?;
                if self.peek() != Some(&Tok::Close) {
                    return self.err("expected \")\"");
                }
                self.at += 1;
                Ok(q)
            }
            Some(Tok::Word(w)) => {
                let field = w.clone();
                if !FIELDS.contains(&field.as_str()) {
                    return self.err(format!(
                        "unknown field {field:?}; fields: {}",
                        FIELDS.join(", ")
                    ));
                }
                self.at += 1;
                let Some(Tok::Op(op)) = self.peek().cloned() else {
                    return Ok(Query::Present(field));
                };
                self.at += 1;
                let value = self.operand(op)?;
                Ok(Query::Test(field, TestOp { op, value }))
            }
            Some(_) => self.err("expected a field, \"not\" or \"(\""),
            None => self.err("unexpected end: expected a field, \"not\" or \"(\""),
        }
    }

    fn operand(&mut self, op: Op) -> Result<Operand, QueryError> {
        let text = match self.peek() {
            Some(Tok::Word(w) | Tok::Str(w)) => w.clone(),
            _ => return self.err("expected a value"),
        };
        let quoted = matches!(self.peek(), Some(Tok::Str(_)));
        let value = match op {
            Op::Match | Op::NoMatch => match Regex::new(&text) {
                Ok(r) => Operand::Regex(r),
                Err(e) => {
                    let first = e
                        .to_string()
                        .lines()
                        .last()
                        .unwrap_or_default()
                        .trim()
                        .to_owned();
                    return self.err(format!("invalid regular expression {text:?}: {first}"));
                }
            },
            Op::Lt | Op::Le | Op::Gt | Op::Ge => match text.parse::<f64>() {
                Ok(n) if n.is_finite() => Operand::Number(n),
                _ => {
                    return self.err(format!(
                        "expected a number after the comparison, found {text:?}"
                    ));
                }
            },
            Op::Eq | Op::Ne => match (quoted, text.parse::<f64>(), status_class(&text)) {
                (false, Ok(n), _) if n.is_finite() => Operand::Number(n),
                (false, _, Some(c)) => Operand::Class(c),
                _ => Operand::Text(text),
            },
        };
        self.at += 1;
        Ok(value)
    }
}

/// `5xx` → `Some(5)`.
fn status_class(s: &str) -> Option<u16> {
    let b = s.as_bytes();
    (b.len() == 3 && (b'1'..=b'9').contains(&b[0]) && b[1..].eq_ignore_ascii_case(b"xx"))
        .then(|| u16::from(b[0] - b'0'))
}

/// Parses a query.
///
/// # Errors
/// [`QueryError`] with the column: unknown fields, misplaced operators, bad numbers or
/// regular expressions, unbalanced parentheses, trailing tokens.
pub fn parse(text: &str) -> Result<Query, QueryError> {
    let toks = lex(text)?;
    let mut p = Parser {
        toks,
        at: 0,
        end: text.chars().count() + 1,
    };
    let q = p.or()?;
    if p.peek().is_some() {
        return p.err("expected \"and\", \"or\" or the end");
    }
    Ok(q)
}

/// The text a field's value compares as: strings as they are, other values as JSON.
pub fn text_of(v: &Value) -> std::borrow::Cow<'_, str> {
    match v {
        Value::String(s) => s.as_str().into(),
        other => other.to_string().into(),
    }
}

impl Query {
    /// Whether the access-log object `line` matches.
    pub fn matches(&self, line: &Map<String, Value>) -> bool {
        match self {
            Self::And(a, b) => a.matches(line) && b.matches(line),
            Self::Or(a, b) => a.matches(line) || b.matches(line),
            Self::Not(q) => !q.matches(line),
            Self::Present(f) => match line.get(f) {
                None | Some(Value::Null | Value::Bool(false)) => false,
                Some(Value::String(s)) => !s.is_empty(),
                Some(Value::Array(a)) => !a.is_empty(),
                Some(_) => true,
            },
            Self::Test(f, t) => match line.get(f) {
                None | Some(Value::Null) => false,
                Some(Value::Array(items)) => items.iter().any(|v| t.test(v)),
                Some(v) => t.test(v),
            },
        }
    }
}

impl TestOp {
    #[allow(
        clippy::float_cmp,
        reason = "a log field equals a number written in the query exactly, as in JSON"
    )]
    fn test(&self, v: &Value) -> bool {
        let num = v.as_f64();
        match (&self.value, self.op) {
            (Operand::Regex(r), Op::Match) => r.is_match(&text_of(v)),
            (Operand::Regex(r), _) => !r.is_match(&text_of(v)),
            (Operand::Class(c), op) => {
                let hit = v.as_u64().is_some_and(|n| n / 100 == u64::from(*c));
                hit == (op == Op::Eq)
            }
            (Operand::Number(n), op) => match (num, op) {
                (Some(x), Op::Eq) => x == *n,
                (Some(x), Op::Ne) => x != *n,
                (Some(x), Op::Lt) => x < *n,
                (Some(x), Op::Le) => x <= *n,
                (Some(x), Op::Gt) => x > *n,
                (Some(x), Op::Ge) => x >= *n,
                // A number written bare still compares with a text field's text.
                (None, Op::Eq) => text_of(v) == fmt_number(*n),
                (None, Op::Ne) => text_of(v) != fmt_number(*n),
                (_, _) => false,
            },
            (Operand::Text(s), Op::Eq) => text_of(v) == s.as_str(),
            (Operand::Text(s), _) => text_of(v) != s.as_str(),
        }
    }
}

/// `200.0` → `200`, `1.5` → `1.5`.
fn fmt_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{n:.0}")
    } else {
        n.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_every_field_the_edge_writes() {
        let written = cachet_http::access::Access {
            invalidated: vec!["k".into()],
            user_agent: Some("UA".into()),
            ban_added: Some(1),
            bans_unknown: true,
            instance_request: Some(1),
            failure: Some("origin"),
            ..cachet_http::access::Access::default()
        };
        let Value::Object(o) = serde_json::to_value(&written).unwrap() else {
            panic!("an object")
        };
        let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
        let mut fields = FIELDS.to_vec();
        keys.sort_unstable();
        fields.sort_unstable();
        assert_eq!(keys, fields);
    }

    fn line(json: &str) -> Map<String, Value> {
        serde_json::from_str(json).unwrap()
    }

    fn m(q: &str, json: &str) -> bool {
        parse(q)
            .unwrap_or_else(|e| panic!("{q}: {e}"))
            .matches(&line(json))
    }

    const MISS_503: &str = r#"{"method":"GET","url":"/blog/a?x=1","route":"blog","cache":"MISS","status":503,"device":"smartphone","key":"blog.example/blog/a|smartphone","origin_ms":12,"banned_by":null,"invalidated":["u1","u2"],"ws_overflow":false}"#;

    #[test]
    fn comparisons_follow_the_documented_rules() {
        assert!(m("cache == MISS and status >= 500", MISS_503));
        assert!(m("cache == \"MISS\" && status == 5xx", MISS_503));
        assert!(!m("status == 2xx", MISS_503));
        assert!(m("status != 2xx", MISS_503));
        assert!(m(r#"url ~ "^/blog/""#, MISS_503));
        assert!(m("url !~ '^/css/'", MISS_503));
        assert!(m("device == smartphone and route == blog", MISS_503));
        assert!(m("not (cache == HIT or cache == STALE)", MISS_503));
        assert!(m("origin_ms < 12.5 and origin_ms > 11", MISS_503));
        assert!(m("invalidated == u2", MISS_503));
        assert!(m("origin_ms", MISS_503));
        assert!(!m("banned_by", MISS_503));
        assert!(!m("ws_overflow", MISS_503));
        // Absent or null: false for every operator, true under `not`.
        assert!(!m("banned_by != 3", MISS_503));
        assert!(!m("ban_added != 1", MISS_503));
        assert!(m("not banned_by == 3", MISS_503));
        // Precedence: and binds tighter than or.
        assert!(m(
            "cache == HIT and status == 200 or route == blog",
            MISS_503
        ));
        assert!(!m(
            "cache == HIT and (status == 200 or route == blog)",
            MISS_503
        ));
        // Case-sensitive text.
        assert!(!m("cache == miss", MISS_503));
        assert!(m("cache ~ '(?i)^miss$'", MISS_503));
    }

    #[test]
    fn errors_name_the_column() {
        let e = |q: &str| parse(q).unwrap_err().to_string();
        assert_eq!(
            e("cache = MISS"),
            "column 7: \"=\" is not an operator; use \"==\""
        );
        assert!(e("cahce == MISS").starts_with("column 1: unknown field \"cahce\""));
        assert_eq!(
            e("status >= high"),
            "column 11: expected a number after the comparison, found \"high\""
        );
        assert_eq!(e("(cache == HIT"), "column 14: expected \")\"");
        assert_eq!(
            e("cache == HIT status"),
            "column 14: expected \"and\", \"or\" or the end"
        );
        assert_eq!(
            e("url ~ \"(\""),
            "column 7: invalid regular expression \"(\": error: unclosed group"
        );
        assert_eq!(e("url == 'abc"), "column 8: unterminated string");
        assert_eq!(e("cache =="), "column 9: expected a value");
        assert_eq!(
            e(""),
            "column 1: unexpected end: expected a field, \"not\" or \"(\""
        );
        assert_eq!(e("and"), "column 1: expected a field, \"not\" or \"(\"");
    }
}
