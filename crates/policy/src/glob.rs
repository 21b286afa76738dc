//! Host and path globs for route matching: `*` matches any run of bytes, `?` one byte.

/// Longest glob pattern accepted, in bytes.
pub const MAX_GLOB_BYTES: usize = 256;

/// A compiled route glob. Matching is linear in pattern × text in the worst case and never
/// allocates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    pattern: Box<[u8]>,
    literal: bool,
}

impl Glob {
    /// Compiles a pattern.
    ///
    /// # Errors
    /// A message when the pattern is empty, longer than [`MAX_GLOB_BYTES`] or contains
    /// control characters or spaces.
    pub fn new(pattern: &str) -> Result<Self, String> {
        if pattern.is_empty() {
            return Err("empty pattern".into());
        }
        if pattern.len() > MAX_GLOB_BYTES {
            return Err(format!("pattern longer than {MAX_GLOB_BYTES} bytes"));
        }
        if pattern.bytes().any(|b| b.is_ascii_control() || b == b' ') {
            return Err("pattern contains a space or control character".into());
        }
        Ok(Self {
            literal: !pattern.bytes().any(|b| b == b'*' || b == b'?'),
            pattern: pattern.as_bytes().into(),
        })
    }

    /// Whether `text` matches, comparing bytes exactly.
    pub fn matches(&self, text: &[u8]) -> bool {
        if self.literal {
            return *self.pattern == *text;
        }
        wildcard(&self.pattern, text, |a, b| a == b)
    }

    /// Whether `text` matches, ignoring ASCII case (host names, RFC 9110 §4.2.3).
    pub fn matches_ignore_case(&self, text: &[u8]) -> bool {
        if self.literal {
            return self.pattern.eq_ignore_ascii_case(text);
        }
        wildcard(&self.pattern, text, |a, b| a.eq_ignore_ascii_case(&b))
    }
}

/// Classic two-pointer wildcard match with a single backtrack point: O(p·t) worst case.
fn wildcard(p: &[u8], t: &[u8], eq: impl Fn(u8, u8) -> bool) -> bool {
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == b'?' || (p[pi] != b'*' && eq(p[pi], t[ti]))) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use super::Glob;

    fn m(p: &str, t: &str) -> bool {
        Glob::new(p).unwrap().matches(t.as_bytes())
    }

    #[test]
    fn stars_and_questions() {
        assert!(m("cdn.*", "cdn.example"));
        assert!(!m("cdn.*", "www.cdn.example"));
        assert!(m("/blog/*/feed", "/blog/alice/feed"));
        assert!(!m("/blog/*/feed", "/blog/alice/feed/x"));
        assert!(m("/a?c", "/abc"));
        assert!(!m("/a?c", "/ac"));
        assert!(m("*", ""));
        assert!(m("a*b*c", "aXXbYYc"));
        assert!(!m("a*b*c", "aXXbYY"));
        assert!(m("literal", "literal"));
        assert!(!m("literal", "literaL"));
    }

    #[test]
    fn host_case() {
        let g = Glob::new("CDN.*").unwrap();
        assert!(g.matches_ignore_case(b"cdn.Example"));
        assert!(!g.matches(b"cdn.example"));
    }

    #[test]
    fn rejects_bad_patterns() {
        assert!(Glob::new("").is_err());
        assert!(Glob::new("a b").is_err());
        assert!(Glob::new(&"x".repeat(300)).is_err());
    }
}
