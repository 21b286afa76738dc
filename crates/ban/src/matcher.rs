//! Regex arguments of `~` / `!~`: recognize shapes answerable without a regex engine, compile the rest.

use std::sync::OnceLock;

use regex_syntax::hir::{Hir, HirKind, Look};

use crate::{REGEX_DFA_SIZE_LIMIT, REGEX_SIZE_LIMIT};

/// A compiled `~` argument. The non-`Regex` variants are exact equivalents of the regex
/// they came from (derived from its parsed syntax tree), so they need no compiled program
/// (several KiB each) and the indexes can answer them.
#[derive(Debug, Clone)]
pub(crate) enum Matcher {
    /// Pure literal `abc`: substring test.
    Contains(Box<str>),
    /// `^abc`: starts-with test.
    Prefix(Box<str>),
    /// `^abc$`: equality (`$` is end of text only, see the crate docs on dialects).
    Exact(Box<str>),
    /// `(^|\s)abc(\s|$)` with a literal free of whitespace: `abc` is one of the
    /// whitespace-separated tokens (surrogate-key membership).
    Token(Box<str>),
    /// Anything else; `prefix` is a literal every match must start with (`^/a/(b|c)`).
    Regex {
        re: Box<regex::Regex>,
        prefix: Option<Box<str>>,
    },
}

/// What an index may use to find bans with this matcher.
pub(crate) enum Hint<'a> {
    Exact(&'a str),
    Prefix(&'a str),
    Token(&'a str),
    None,
}

impl Matcher {
    /// Compiles `pattern`; the error is the regex parser's or compiler's message.
    pub(crate) fn new(pattern: &str) -> Result<Matcher, String> {
        let hir = regex_syntax::ParserBuilder::new()
            .build()
            .parse(pattern)
            .map_err(|e| one_line(&e.to_string()))?;
        if let Some(m) = simple_shape(&hir) {
            return Ok(m);
        }
        let re = regex::RegexBuilder::new(pattern)
            .size_limit(REGEX_SIZE_LIMIT)
            .dfa_size_limit(REGEX_DFA_SIZE_LIMIT)
            .build()
            .map_err(|e| one_line(&e.to_string()))?;
        Ok(Matcher::Regex {
            re: Box::new(re),
            prefix: anchored_prefix(&hir).map(Into::into),
        })
    }

    pub(crate) fn is_match(&self, s: &str) -> bool {
        match self {
            Matcher::Contains(k) => s.contains(&**k),
            Matcher::Prefix(k) => s.starts_with(&**k),
            Matcher::Exact(k) => s == &**k,
            Matcher::Token(k) => s.split_whitespace().any(|t| t == &**k),
            Matcher::Regex { re, .. } => re.is_match(s),
        }
    }

    pub(crate) fn hint(&self) -> Hint<'_> {
        match self {
            Matcher::Exact(k) => Hint::Exact(k),
            Matcher::Prefix(k)
            | Matcher::Regex {
                prefix: Some(k), ..
            } if !k.is_empty() => Hint::Prefix(k),
            Matcher::Token(k) => Hint::Token(k),
            _ => Hint::None,
        }
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn literal(h: &Hir) -> Option<&str> {
    match h.kind() {
        HirKind::Literal(l) => std::str::from_utf8(&l.0).ok(),
        _ => None,
    }
}

fn is_look(h: &Hir, look: Look) -> bool {
    matches!(h.kind(), HirKind::Look(l) if *l == look)
}

fn uncapture(h: &Hir) -> &Hir {
    match h.kind() {
        HirKind::Capture(c) => uncapture(&c.sub),
        _ => h,
    }
}

/// The syntax trees of `(^|\s)` and `(\s|$)` with the capture groups removed.
fn token_bounds() -> &'static (Hir, Hir) {
    static BOUNDS: OnceLock<(Hir, Hir)> = OnceLock::new();
    BOUNDS.get_or_init(|| {
        let parse = |p: &str| {
            regex_syntax::ParserBuilder::new()
                .build()
                .parse(p)
                .map_or_else(|_| Hir::fail(), |h| uncapture(&h).clone())
        };
        (parse(r"(^|\s)"), parse(r"(\s|$)"))
    })
}

fn simple_shape(hir: &Hir) -> Option<Matcher> {
    match hir.kind() {
        HirKind::Empty => Some(Matcher::Contains("".into())),
        HirKind::Literal(_) => literal(hir).map(|k| Matcher::Contains(k.into())),
        HirKind::Concat(parts) => match parts.as_slice() {
            [a, b] if is_look(a, Look::Start) => literal(b).map(|k| Matcher::Prefix(k.into())),
            [a, b, c] if is_look(a, Look::Start) && is_look(c, Look::End) => {
                literal(b).map(|k| Matcher::Exact(k.into()))
            }
            [a, b, c] => {
                let (left, right) = token_bounds();
                let k = literal(b)?;
                (uncapture(a) == left
                    && uncapture(c) == right
                    && !k.is_empty()
                    && !k.chars().any(char::is_whitespace))
                .then(|| Matcher::Token(k.into()))
            }
            _ => None,
        },
        _ => None,
    }
}

fn anchored_prefix(hir: &Hir) -> Option<&str> {
    match hir.kind() {
        HirKind::Concat(parts) if parts.len() >= 2 && is_look(&parts[0], Look::Start) => {
            literal(&parts[1])
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(p: &str) -> String {
        match Matcher::new(p).unwrap() {
            Matcher::Contains(k) => format!("contains {k}"),
            Matcher::Prefix(k) => format!("prefix {k}"),
            Matcher::Exact(k) => format!("exact {k}"),
            Matcher::Token(k) => format!("token {k}"),
            Matcher::Regex { prefix, .. } => format!("regex {prefix:?}"),
        }
    }

    #[test]
    fn recognizes_shapes() {
        assert_eq!(shape("^/blog/alice/"), "prefix /blog/alice/");
        assert_eq!(shape(r"^/a\.html$"), "exact /a.html");
        assert_eq!(shape("image"), "contains image");
        assert_eq!(shape(r"(^|\s)key-1(\s|$)"), "token key-1");
        assert_eq!(shape(r"(?:^|\s)k\.x(?:\s|$)"), "token k.x");
        assert_eq!(shape(r"^/a/(b|c)"), r#"regex Some("/a/")"#);
        assert_eq!(shape("^/a/b?"), r#"regex Some("/a/")"#);
        assert_eq!(shape("^/a|^/b"), "regex None");
        assert_eq!(shape("^/a|/b"), "regex None");
        assert_eq!(shape("(?i)^/a"), r#"regex Some("/")"#);
        assert_eq!(shape("(?i)^a"), "regex None");
        assert_eq!(shape(r"(?m)^/a"), "regex None");
        assert_eq!(shape(r"(^|\s)a b(\s|$)"), "regex None");
        assert_eq!(shape(r"(^| )k( |$)"), "regex None");
    }

    #[test]
    fn simple_shapes_agree_with_the_regex() {
        let texts = [
            "",
            "/blog/alice/x",
            "/blog/alic",
            "x /blog/alice/",
            "a key-1 b",
            "key-1",
            "key-10",
            "xkey-1",
            "key-1\u{a0}z",
            "/a.html",
            "/a.html\n",
        ];
        for p in [
            "^/blog/alice/",
            r"^/a\.html$",
            "key-1",
            r"(^|\s)key-1(\s|$)",
            "",
        ] {
            let m = Matcher::new(p).unwrap();
            let re = regex::Regex::new(p).unwrap();
            for t in texts {
                assert_eq!(m.is_match(t), re.is_match(t), "{p:?} on {t:?}");
            }
        }
    }

    #[test]
    fn bad_regex_is_an_error() {
        assert!(Matcher::new("(a").is_err());
        assert!(Matcher::new("a{99999}{99999}").is_err());
        assert!(Matcher::new(r"(?<=a)b").is_err());
    }
}
