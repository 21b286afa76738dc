//! [`Headers`]: the one small trait through which the engine reads header bytes.

/// Read access to a header map, by field name, as raw bytes (RFC 9110 §5.5: field values
/// are octets; Cachet never assumes UTF-8).
///
/// Implemented by each adapter over its platform's map, and here for the plain slices both
/// adapters and tests use. Names compare ASCII case-insensitively (RFC 9110 §5.1).
pub trait Headers {
    /// Calls `f` with every value of `name`, one field line each, in order, until `f`
    /// returns `false`.
    fn visit(&self, name: &str, f: &mut dyn FnMut(&[u8]) -> bool);

    /// The first value of `name`, if any.
    fn value(&self, name: &str) -> Option<Vec<u8>> {
        let mut out = None;
        self.visit(name, &mut |v| {
            out = Some(v.to_vec());
            false
        });
        out
    }

    /// Every value of `name` joined with `", "` (RFC 9110 §5.3: a list field's lines
    /// combine that way), or `None` when the field is absent.
    fn joined(&self, name: &str) -> Option<Vec<u8>> {
        self.joined_with(name, b", ")
    }

    /// Every value of `name` joined with `separator` (`Cookie` lines rejoin with `"; "`,
    /// RFC 9113 §8.2.3), or `None` when the field is absent.
    fn joined_with(&self, name: &str, separator: &[u8]) -> Option<Vec<u8>> {
        let mut out: Option<Vec<u8>> = None;
        self.visit(name, &mut |v| {
            match &mut out {
                Some(o) => {
                    o.extend_from_slice(separator);
                    o.extend_from_slice(v);
                }
                None => out = Some(v.to_vec()),
            }
            true
        });
        out
    }

    /// Whether `name` is present.
    fn has(&self, name: &str) -> bool {
        let mut found = false;
        self.visit(name, &mut |_| {
            found = true;
            false
        });
        found
    }
}

fn visit_pairs<N: AsRef<str>, V: AsRef<[u8]>>(
    pairs: &[(N, V)],
    name: &str,
    f: &mut dyn FnMut(&[u8]) -> bool,
) {
    for (n, v) in pairs {
        if n.as_ref().eq_ignore_ascii_case(name) && !f(v.as_ref()) {
            return;
        }
    }
}

impl Headers for [(String, Vec<u8>)] {
    fn visit(&self, name: &str, f: &mut dyn FnMut(&[u8]) -> bool) {
        visit_pairs(self, name, f);
    }
}

impl Headers for [(String, String)] {
    fn visit(&self, name: &str, f: &mut dyn FnMut(&[u8]) -> bool) {
        visit_pairs(self, name, f);
    }
}

impl Headers for [(&str, &str)] {
    fn visit(&self, name: &str, f: &mut dyn FnMut(&[u8]) -> bool) {
        visit_pairs(self, name, f);
    }
}

impl<T: Headers + ?Sized> Headers for &T {
    fn visit(&self, name: &str, f: &mut dyn FnMut(&[u8]) -> bool) {
        (**self).visit(name, f);
    }
}

/// The bytes as text when they are UTF-8 (header values Cachet interprets are ASCII; a
/// value that is not UTF-8 is treated as absent, never a panic).
pub fn text(v: &[u8]) -> Option<&str> {
    std::str::from_utf8(v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bytes_case_insensitively_and_joins_lines() {
        let h: Vec<(String, Vec<u8>)> = vec![
            ("If-None-Match".into(), b"\"a\"".to_vec()),
            ("x-latin1".into(), b"caf\xe9".to_vec()),
            ("if-none-match".into(), b"\"b\"".to_vec()),
        ];
        let h = h.as_slice();
        assert_eq!(h.value("IF-NONE-MATCH").as_deref(), Some(&b"\"a\""[..]));
        assert_eq!(
            h.joined("if-none-match").as_deref(),
            Some(&b"\"a\", \"b\""[..])
        );
        assert_eq!(h.value("x-latin1").as_deref(), Some(&b"caf\xe9"[..]));
        assert_eq!(text(b"caf\xe9"), None);
        assert!(h.has("x-LATIN1") && !h.has("range"));
        assert_eq!(h.joined("range"), None);
    }
}
