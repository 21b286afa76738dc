//! Parameter-name patterns (`*`, `?`, `\` escapes) compiled into exact, prefix and glob sets.

use crate::{MAX_PATTERN_BYTES, QueryError};

/// One element of a general glob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tok {
    /// A literal byte.
    Byte(u8),
    /// `?`: exactly one byte.
    One,
    /// `*`: any run of bytes, also empty.
    Star,
}

/// A compiled pattern, classified by the cheapest way to match it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pattern {
    /// No wildcard: the name must equal these bytes.
    Exact(Box<[u8]>),
    /// One trailing `*` and no other wildcard: the name must start with these bytes
    /// (empty for the pattern `*`, which matches every name).
    Prefix(Box<[u8]>),
    /// Anything else; consecutive stars are collapsed.
    Glob(Box<[Tok]>),
}

impl Pattern {
    /// Compiles `pattern`.
    ///
    /// # Errors
    /// [`QueryError::InvalidPattern`] when the pattern is empty, longer than
    /// [`MAX_PATTERN_BYTES`], ends in a lone `\`, or contains `&` or `=` (a parameter
    /// name never does, so the pattern could never match).
    pub(crate) fn compile(pattern: &str) -> Result<Self, QueryError> {
        let bad = |reason: &str| QueryError::InvalidPattern {
            pattern: pattern.to_owned(),
            reason: reason.to_owned(),
        };
        if pattern.is_empty() {
            return Err(bad(
                "is empty (an empty parameter is always dropped; use `*` for every name)",
            ));
        }
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(bad(&format!("is longer than {MAX_PATTERN_BYTES} bytes")));
        }
        let mut toks = Vec::with_capacity(pattern.len());
        let mut bytes = pattern.bytes();
        while let Some(b) = bytes.next() {
            let tok = match b {
                b'\\' => match bytes.next() {
                    Some(next) => Tok::Byte(next),
                    None => return Err(bad("ends with a lone `\\` escape")),
                },
                b'*' => Tok::Star,
                b'?' => Tok::One,
                other => Tok::Byte(other),
            };
            match tok {
                Tok::Byte(b'&') => {
                    return Err(bad("contains `&`, which separates parameters"));
                }
                Tok::Byte(b'=') => {
                    return Err(bad("contains `=`, which ends a parameter name"));
                }
                Tok::Star if toks.last() == Some(&Tok::Star) => {}
                t => toks.push(t),
            }
        }
        let literal = |ts: &[Tok]| -> Option<Box<[u8]>> {
            ts.iter()
                .map(|t| match t {
                    Tok::Byte(b) => Some(*b),
                    Tok::One | Tok::Star => None,
                })
                .collect()
        };
        if let Some(exact) = literal(&toks) {
            return Ok(Self::Exact(exact));
        }
        if let Some((Tok::Star, head)) = toks.split_last()
            && let Some(prefix) = literal(head)
        {
            return Ok(Self::Prefix(prefix));
        }
        Ok(Self::Glob(toks.into_boxed_slice()))
    }
}

/// Matches `name` against a general glob: iterative, remembering only the last `*`
/// (a later star always subsumes the choices of an earlier one), so the work is at most
/// `tokens × name` steps and nothing is allocated.
fn glob_match(toks: &[Tok], name: &[u8]) -> bool {
    let (mut t, mut i) = (0, 0);
    // (token index just after the last star, name index that star currently ends at)
    let mut star: Option<(usize, usize)> = None;
    while i < name.len() {
        match toks.get(t) {
            Some(Tok::Star) => {
                star = Some((t + 1, i));
                t += 1;
                continue;
            }
            Some(Tok::One) => {
                t += 1;
                i += 1;
                continue;
            }
            Some(Tok::Byte(b)) if *b == name[i] => {
                t += 1;
                i += 1;
                continue;
            }
            _ => {}
        }
        match star {
            Some((after, end)) => {
                // Let the star swallow one more byte and retry.
                star = Some((after, end + 1));
                t = after;
                i = end + 1;
            }
            None => return false,
        }
    }
    toks[t..].iter().all(|x| *x == Tok::Star)
}

/// The first 8 bytes of `b`, big-endian, zero-padded. `key_of(x) < key_of(y)` implies
/// `x < y` (bytewise), and the first `n ≤ 8` bytes of `x` are the top `n` bytes of the
/// key, so sorting and matching compare one integer before touching the bytes.
pub(crate) fn key_of(b: &[u8]) -> u64 {
    if let Some(head) = b.first_chunk::<8>() {
        return u64::from_be_bytes(*head);
    }
    // Built in registers: a byte copy into a buffer followed by one 8-byte load stalls
    // on store forwarding and cost more than the rest of the scan.
    b.iter()
        .zip((0..8).rev())
        .fold(0, |k, (&c, i)| k | u64::from(c) << (8 * i))
}

/// An exact name with its length and key, ordered by `(len, key, bytes)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ExactName {
    len: usize,
    key: u64,
    bytes: Box<[u8]>,
}

/// A `prefix*` pattern; when the prefix is at most 8 bytes it is checked on the key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct NamePrefix {
    bytes: Box<[u8]>,
    key: u64,
    /// The top `bytes.len()` bytes set (when `bytes.len() <= 8`).
    mask: u64,
}

/// A compiled list of patterns, answering "does any pattern match this name?".
#[derive(Debug, Clone, Default)]
pub(crate) struct PatternSet {
    /// Exact names, sorted and deduplicated, for binary search on `(len, key)`.
    exact: Vec<ExactName>,
    /// Bit `min(len, 63)` is set when some exact name has that length.
    exact_lens: u64,
    /// Prefixes of `prefix*` patterns.
    prefixes: Vec<NamePrefix>,
    /// General globs.
    globs: Vec<Box<[Tok]>>,
    /// Bit `b` set when some pattern can match a name starting with byte `b`.
    first: [u64; 4],
    /// Whether some pattern matches the empty name (a pattern made only of stars).
    empty: bool,
}

impl PatternSet {
    /// Compiles every pattern.
    ///
    /// # Errors
    /// The first [`QueryError::InvalidPattern`] of [`Pattern::compile`].
    pub(crate) fn new(patterns: &[String]) -> Result<Self, QueryError> {
        let mut set = Self::default();
        for p in patterns {
            match Pattern::compile(p)? {
                Pattern::Exact(e) => {
                    set.exact_lens |= 1 << e.len().min(63);
                    set.add_first(e.first().copied());
                    set.exact.push(ExactName {
                        len: e.len(),
                        key: key_of(&e),
                        bytes: e,
                    });
                }
                Pattern::Prefix(p) => {
                    if p.is_empty() {
                        set.empty = true;
                    }
                    set.add_first(p.first().copied());
                    let mask = match p.len() {
                        0 => 0,
                        n @ 1..=8 => u64::MAX << (8 * (8 - n)),
                        _ => u64::MAX,
                    };
                    set.prefixes.push(NamePrefix {
                        key: key_of(&p) & mask,
                        mask,
                        bytes: p,
                    });
                }
                Pattern::Glob(g) => {
                    set.add_first(match g.first() {
                        Some(Tok::Byte(b)) => Some(*b),
                        _ => None,
                    });
                    set.globs.push(g);
                }
            }
        }
        set.exact.sort_unstable();
        set.exact.dedup();
        set.prefixes.sort_unstable();
        set.prefixes.dedup();
        Ok(set)
    }

    /// Records that names starting with `b` may match (`None`: any first byte).
    fn add_first(&mut self, b: Option<u8>) {
        match b {
            Some(b) => self.first[usize::from(b >> 6)] |= 1 << (b & 63),
            None => self.first = [u64::MAX; 4],
        }
    }

    /// Whether no pattern was compiled.
    pub(crate) fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.prefixes.is_empty() && self.globs.is_empty()
    }

    /// Whether any pattern matches `name` (raw bytes, case-sensitive); `key` must be
    /// [`key_of`]`(name)`.
    #[inline]
    pub(crate) fn matches(&self, name: &[u8], key: u64) -> bool {
        let Some(&b) = name.first() else {
            return self.empty;
        };
        // Most names start with a byte no pattern can start with: decided inline.
        self.first[usize::from(b >> 6)] & (1 << (b & 63)) != 0 && self.matches_slow(name, key)
    }

    /// [`PatternSet::matches`] past the first-byte filter.
    fn matches_slow(&self, name: &[u8], key: u64) -> bool {
        let len = name.len();
        if self.exact_lens & (1 << len.min(63)) != 0 {
            let from = self.exact.partition_point(|e| (e.len, e.key) < (len, key));
            if self.exact[from..]
                .iter()
                .take_while(|e| e.len == len && e.key == key)
                .any(|e| len <= 8 || *e.bytes == *name)
            {
                return true;
            }
        }
        self.prefixes.iter().any(|p| {
            if p.bytes.len() <= 8 {
                p.bytes.len() <= len && key & p.mask == p.key
            } else {
                name.starts_with(&p.bytes)
            }
        }) || self.globs.iter().any(|g| glob_match(g, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(patterns: &[&str]) -> PatternSet {
        let owned: Vec<String> = patterns.iter().map(|s| (*s).to_owned()).collect();
        PatternSet::new(&owned).unwrap()
    }

    #[test]
    fn classifies_patterns() {
        assert_eq!(
            Pattern::compile("gclid").unwrap(),
            Pattern::Exact((*b"gclid").into())
        );
        assert_eq!(
            Pattern::compile("utm_**").unwrap(),
            Pattern::Prefix((*b"utm_").into())
        );
        assert_eq!(
            Pattern::compile("*").unwrap(),
            Pattern::Prefix((*b"").into())
        );
        assert_eq!(
            Pattern::compile(r"a\*").unwrap(),
            Pattern::Exact((*b"a*").into())
        );
        assert_eq!(
            Pattern::compile(r"a\*b*").unwrap(),
            Pattern::Prefix((*b"a*b").into())
        );
        assert!(matches!(Pattern::compile("*_id"), Ok(Pattern::Glob(_))));
        assert!(matches!(Pattern::compile("a?"), Ok(Pattern::Glob(_))));
    }

    #[test]
    fn rejects_patterns_that_cannot_match() {
        for p in [
            "",
            "a=b",
            "a&b",
            r"a\=",
            r"x\",
            &"a".repeat(MAX_PATTERN_BYTES + 1),
        ] {
            assert!(
                matches!(Pattern::compile(p), Err(QueryError::InvalidPattern { .. })),
                "{p:?}"
            );
        }
        assert!(Pattern::compile(&"a".repeat(MAX_PATTERN_BYTES)).is_ok());
    }

    #[test]
    fn glob_semantics() {
        let m = |p: &str, n: &str| set(&[p]).matches(n.as_bytes(), key_of(n.as_bytes()));
        assert!(m("utm_*", "utm_source"));
        assert!(m("utm_*", "utm_"));
        assert!(!m("utm_*", "utm"));
        assert!(!m("utm_*", "xutm_source"));
        assert!(m("*_id", "session_id"));
        assert!(m("*_id", "_id"));
        assert!(!m("*_id", "session_idx"));
        assert!(m("a*b*c", "abc"));
        assert!(m("a*b*c", "aXXbYYbZZc"));
        assert!(!m("a*b*c", "aXXbYYcZZ"));
        assert!(m("?", "x"));
        assert!(!m("?", ""));
        assert!(!m("?", "xy"));
        assert!(m("p?ge", "page"));
        assert!(!m("p?ge", "pge"));
        assert!(m("*", ""));
        assert!(m("*", "anything"));
        assert!(m("**?*", "a"));
        assert!(!m("**?*", ""));
        assert!(m(r"a\?", "a?"));
        assert!(!m(r"a\?", "ab"));
        assert!(m(r"\\x", "\\x"));
        assert!(!m("A", "a"), "case-sensitive");
        assert!(!m("a", "%61"), "no percent-decoding");
        assert!(m("*a*a*a*a*b", &format!("{}b", "a".repeat(200))));
        assert!(!m("*a*a*a*a*b", &"a".repeat(200)));
    }

    /// `set.matches` with the key computed.
    fn hit(s: &PatternSet, name: &[u8]) -> bool {
        s.matches(name, key_of(name))
    }

    #[test]
    fn key_order_implies_byte_order() {
        let words: [&[u8]; 9] = [
            b"",
            b"\0",
            b"a",
            b"a\0",
            b"a\0\0b",
            b"ab",
            b"abcdefgh",
            b"abcdefghi",
            b"abcdefgi",
        ];
        for x in words {
            for y in words {
                if key_of(x) < key_of(y) {
                    assert!(x < y, "{x:?} {y:?}");
                }
            }
        }
        assert_eq!(key_of(b"ab"), 0x6162_0000_0000_0000);
    }

    #[test]
    fn long_prefixes_and_long_exact_names() {
        let s = set(&["abcdefghij*", "abcdefghijklmnop", "abcdefghijklmnoq"]);
        assert!(hit(&s, b"abcdefghij"));
        assert!(hit(&s, b"abcdefghijXYZ"));
        assert!(!hit(&s, b"abcdefghi"));
        let e = set(&["abcdefghijklmnop", "abcdefghijklmnoq", "abcdefgh"]);
        assert!(hit(&e, b"abcdefghijklmnoq"));
        assert!(hit(&e, b"abcdefghijklmnop"));
        assert!(!hit(&e, b"abcdefghijklmnor"));
        assert!(hit(&e, b"abcdefgh"));
        assert!(!hit(&e, b"abcdefg"));
        let short = set(&["a*", "ab\0*"]);
        assert!(hit(&short, b"a"));
        assert!(!hit(&short, b"b"));
        assert!(hit(&set(&["ab\0*"]), b"ab\0"));
        assert!(!hit(&set(&["ab\0*"]), b"ab"));
    }

    #[test]
    fn set_combines_kinds_and_filters_by_first_byte() {
        let s = set(&["gclid", "utm_*", "*_hs?", "_ga", "_ga"]);
        for yes in ["gclid", "utm_x", "x_hsa", "_ga"] {
            assert!(hit(&s, yes.as_bytes()), "{yes}");
        }
        for no in ["", "gclid2", "gcli", "utm", "x_hs", "_gb", "page"] {
            assert!(!hit(&s, no.as_bytes()), "{no}");
        }
        let exact_only = set(&["ab", "cd"]);
        assert!(!hit(&exact_only, b"b"));
        assert!(!hit(&exact_only, b"ac"));
        assert!(hit(&exact_only, b"cd"));
        let long = "x".repeat(100);
        assert!(hit(&set(&[&long]), long.as_bytes()));
        assert!(!hit(&set(&[&long]), &long.as_bytes()[1..]));
        assert!(set(&[]).is_empty());
        assert!(!hit(&set(&[]), b"a"));
    }
}
