//! Parameter-name patterns (`*`, `?`, `\` escapes) compiled into exact, prefix and glob sets.

use crate::scan::key_of;
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

/// An exact name in the hash table: its [`key_of`], its length (0 marks a free slot; an
/// exact pattern is never empty) and its index in [`PatternSet::exact`].
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    key: u64,
    len: usize,
    index: usize,
}

/// Spreads `(key, len)` over the exact-name table: Fibonacci hashing, top bits taken by
/// `shift` (at least 54, so at most 10 bits survive).
#[inline]
fn slot_hash(key: u64, len: usize, shift: u32) -> usize {
    low_bits((key ^ len as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> shift)
}

/// `x`, known to be below 1024, as an index.
#[inline]
fn low_bits(x: u64) -> usize {
    debug_assert!(x < 1024);
    #[allow(
        clippy::cast_possible_truncation,
        reason = "callers pass values below 1024"
    )]
    let i = x as usize;
    i
}

/// Bit of the 1024-bit head filter for a name whose first two bytes (zero-padded, the
/// top 16 bits of its [`key_of`]) are `head`.
#[inline]
fn head_bit(head: u64) -> usize {
    low_bits(head.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54)
}

/// Whether bit `i` of a bit set is set.
#[inline]
fn test_bit(set: &[u64], i: usize) -> bool {
    set[i >> 6] & (1 << (i & 63)) != 0
}

/// Sets bit `i` of a bit set.
fn set_bit(set: &mut [u64], i: usize) {
    set[i >> 6] |= 1 << (i & 63);
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
///
/// A name first goes through a filter on its first two bytes, which rejects most names
/// a list does not mention with a multiply and a bit test. Past it, one short `prefix*`
/// pattern (`utm_*` in [`crate::DEFAULT_REMOVE`]) is checked inline on the key; then
/// exact names (the rest of the default list) are looked up in an open-addressing hash
/// table keyed on the name's first 8 bytes and length (one multiply, usually one probe);
/// other `prefix*` patterns compare the key under a mask; general globs run last.
#[derive(Debug, Clone)]
pub(crate) struct PatternSet {
    /// Bit [`head_bit`]`(h)` set when some pattern can match a name whose first two
    /// bytes are `h`.
    heads: [u64; 16],
    /// Bit `b` set when some pattern can match a name starting with byte `b` whatever
    /// the second byte is (a one-byte prefix, a glob with a wildcard second; all bits
    /// when a pattern starts with a wildcard).
    first_any: [u64; 4],
    /// The exact names, deduplicated; `table` points into it.
    exact: Vec<Box<[u8]>>,
    /// Linear-probing hash table over `exact`; a power of two long, at most half full
    /// (so every probe sequence reaches a free slot).
    table: Box<[Slot]>,
    /// `64 - log2(table.len())`.
    shift: u32,
    /// Bit `min(len, 63)` is set when some exact name has that length.
    exact_lens: u64,
    /// The first short (at most 8 bytes) `prefix*` pattern, as `(key, mask, len)`,
    /// checked inline right after the head filter (`utm_*` in the default list);
    /// `len == usize::MAX` when there is none.
    first_prefix: (u64, u64, usize),
    /// Prefixes of the other `prefix*` patterns.
    prefixes: Vec<NamePrefix>,
    /// General globs.
    globs: Vec<Box<[Tok]>>,
    /// Whether some pattern matches the empty name (a pattern made only of stars).
    empty: bool,
}

impl PatternSet {
    /// Compiles every pattern.
    ///
    /// # Errors
    /// The first [`QueryError::InvalidPattern`] of [`Pattern::compile`].
    pub(crate) fn new(patterns: &[String]) -> Result<Self, QueryError> {
        let mut exact: Vec<Box<[u8]>> = Vec::new();
        let mut prefixes = Vec::new();
        let mut globs = Vec::new();
        let mut heads = [0u64; 16];
        let mut first_any = [0u64; 4];
        // What a pattern requires of a name's first two bytes.
        let mut admit = |head: &[Option<u8>]| match head {
            [Some(a), Some(b)] => set_bit(&mut heads, head_bit(key_of(&[*a, *b]) >> 48)),
            [Some(a)] => set_bit(&mut heads, head_bit(key_of(&[*a]) >> 48)),
            [Some(a), None] => set_bit(&mut first_any, usize::from(*a)),
            _ => first_any = [u64::MAX; 4],
        };
        let mut empty = false;
        for p in patterns {
            match Pattern::compile(p)? {
                Pattern::Exact(e) => {
                    // Non-empty; a one-byte name has 0 as its second key byte.
                    let head: Vec<Option<u8>> = e.iter().take(2).map(|&b| Some(b)).collect();
                    admit(&head);
                    exact.push(e);
                }
                Pattern::Prefix(p) => {
                    empty |= p.is_empty();
                    match *p {
                        [] => admit(&[]),
                        [a] => admit(&[Some(a), None]),
                        [a, b, ..] => admit(&[Some(a), Some(b)]),
                    }
                    let mask = match p.len() {
                        0 => 0,
                        n @ 1..=8 => u64::MAX << (8 * (8 - n)),
                        _ => u64::MAX,
                    };
                    prefixes.push(NamePrefix {
                        key: key_of(&p) & mask,
                        mask,
                        bytes: p,
                    });
                }
                Pattern::Glob(g) => {
                    match *g {
                        [Tok::Byte(a), Tok::Byte(b), ..] => admit(&[Some(a), Some(b)]),
                        [Tok::Byte(a), ..] => admit(&[Some(a), None]),
                        _ => admit(&[]),
                    }
                    globs.push(g);
                }
            }
        }
        exact.sort_unstable();
        exact.dedup();
        prefixes.sort_unstable();
        prefixes.dedup();
        let first_prefix = match prefixes.iter().position(|p| p.bytes.len() <= 8) {
            Some(i) => {
                let p = prefixes.remove(i);
                (p.key, p.mask, p.bytes.len())
            }
            None => (0, 0, usize::MAX),
        };
        let size = (exact.len() * 2).next_power_of_two().max(8);
        let mut table = vec![Slot::default(); size].into_boxed_slice();
        let shift = 64 - size.trailing_zeros();
        let mut exact_lens = 0u64;
        for (index, name) in exact.iter().enumerate() {
            let (key, len) = (key_of(name), name.len());
            exact_lens |= 1 << len.min(63);
            let mut i = slot_hash(key, len, shift);
            while table[i].len != 0 {
                i = (i + 1) & (size - 1);
            }
            table[i] = Slot { key, len, index };
        }
        Ok(Self {
            heads,
            first_any,
            exact,
            table,
            shift,
            exact_lens,
            first_prefix,
            prefixes,
            globs,
            empty,
        })
    }

    /// This set, made to match the empty name too (as a pattern of stars would). Does not
    /// change [`PatternSet::is_empty`].
    pub(crate) fn matching_empty_name(mut self) -> Self {
        self.empty = true;
        self
    }

    /// Whether no pattern was compiled.
    pub(crate) fn is_empty(&self) -> bool {
        self.exact.is_empty()
            && self.first_prefix.2 == usize::MAX
            && self.prefixes.is_empty()
            && self.globs.is_empty()
    }

    /// Whether any pattern matches `name` (raw bytes, case-sensitive); `key` must be
    /// [`key_of`]`(name)`.
    #[inline]
    pub(crate) fn matches(&self, name: &[u8], key: u64) -> bool {
        let Some(&b) = name.first() else {
            return self.empty;
        };
        if !(test_bit(&self.first_any, usize::from(b))
            || test_bit(&self.heads, head_bit(key >> 48)))
        {
            return false;
        }
        let (prefix_key, prefix_mask, prefix_len) = self.first_prefix;
        (name.len() >= prefix_len && key & prefix_mask == prefix_key)
            || self.matches_slow(name, key)
    }

    /// [`PatternSet::matches`] past the head filter.
    fn matches_slow(&self, name: &[u8], key: u64) -> bool {
        let len = name.len();
        if self.exact_lens & (1 << len.min(63)) != 0 && self.exact_hit(name, key) {
            return true;
        }
        self.prefixes.iter().any(|p| {
            if p.bytes.len() <= 8 {
                p.bytes.len() <= len && key & p.mask == p.key
            } else {
                name.starts_with(&p.bytes)
            }
        }) || self.globs.iter().any(|g| glob_match(g, name))
    }

    /// Whether `name` is one of the exact names.
    fn exact_hit(&self, name: &[u8], key: u64) -> bool {
        let len = name.len();
        let mask = self.table.len() - 1;
        let mut i = slot_hash(key, len, self.shift);
        loop {
            let s = self.table[i & mask];
            if s.len == 0 {
                return false;
            }
            if s.key == key && s.len == len && (len <= 8 || *self.exact[s.index] == *name) {
                return true;
            }
            i = (i + 1) & mask;
        }
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

    /// Reference matcher: the pattern's escapes resolved, then plain recursion.
    fn reference(pattern: &str, name: &[u8]) -> bool {
        fn go(p: &[Tok], s: &[u8]) -> bool {
            match p.split_first() {
                None => s.is_empty(),
                Some((Tok::Star, rest)) => (0..=s.len()).any(|i| go(rest, &s[i..])),
                Some((Tok::One, rest)) => !s.is_empty() && go(rest, &s[1..]),
                Some((Tok::Byte(b), rest)) => s.first() == Some(b) && go(rest, &s[1..]),
            }
        }
        let mut toks = Vec::new();
        let mut bytes = pattern.bytes();
        while let Some(b) = bytes.next() {
            toks.push(match b {
                b'\\' => Tok::Byte(bytes.next().unwrap()),
                b'*' => Tok::Star,
                b'?' => Tok::One,
                other => Tok::Byte(other),
            });
        }
        go(&toks, name)
    }

    #[test]
    fn many_exact_names_share_the_table() {
        // More names than one probe sequence can hold without collisions, some sharing
        // their first 8 bytes (equal keys) or their first two bytes (equal heads).
        let names: Vec<String> = (0..200)
            .map(|i| match i % 4 {
                0 => format!("n{i}"),
                1 => format!("abcdefgh{i}"),
                2 => format!("ab{i}"),
                _ => format!("{}", char::from(b'a' + u8::try_from(i % 26).unwrap())),
            })
            .collect();
        let owned: Vec<String> = names.iter().step_by(2).cloned().collect();
        let s = PatternSet::new(&owned).unwrap();
        for (i, n) in names.iter().enumerate() {
            let want = owned.contains(n);
            assert_eq!(hit(&s, n.as_bytes()), want, "{i} {n}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1024))]

        #[test]
        fn pattern_sets_match_like_the_reference(
            patterns in proptest::collection::vec("([ab_\\x00é]|\\\\[*?\\\\a]|[*?]){1,6}", 0..6),
            names in proptest::collection::vec("[ab_\\x00é*?\\\\]{0,10}", 1..8),
        ) {
            let s = PatternSet::new(&patterns).unwrap();
            for n in &names {
                let want = patterns.iter().any(|p| reference(p, n.as_bytes()));
                proptest::prop_assert_eq!(hit(&s, n.as_bytes()), want, "{:?} {:?}", patterns, n);
            }
        }
    }
}
