//! Variants: the secondary cache key a `Vary` response is stored under (RFC 9111 §4.1).
//!
//! `cachet_policy::rewrite_vary` decides which request fields an origin's `Vary` makes
//! the object depend on (besides the device class, already in the primary key, and the
//! encoding, handled by gzip storage). This module turns a request's values of those
//! fields into a **secondary key**, normalized as §4.1 allows: the field's lines are
//! combined with `", "`, whitespace around list commas is dropped, and the value is
//! trimmed; an absent field differs from an empty one.

use std::hash::{Hash, Hasher};

use crate::headers::Headers;

/// Longest normalized value of one varying request field, bytes; a request with a longer
/// value is answered uncached (a variant per arbitrary long value would flood the cache).
pub const MAX_VARY_VALUE_BYTES: usize = 512;

/// Separator between a primary cache key and its variant suffix.
pub const VARIANT_SEPARATOR: char = '\u{1f}';

/// A request's normalized value of `name` (RFC 9111 §4.1), `None` when absent.
pub fn normalized(h: &(impl Headers + ?Sized), name: &str) -> Option<Vec<u8>> {
    let joined = h.joined(name)?;
    let mut out = Vec::with_capacity(joined.len());
    for (i, part) in joined.split(|&b| b == b',').enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let mut last_space = false;
        for &b in part.trim_ascii() {
            let space = b == b' ' || b == b'\t';
            if !(space && last_space) {
                out.push(if space { b' ' } else { b });
            }
            last_space = space;
        }
    }
    Some(out)
}

/// The variant key of `primary` for a request with headers `h` under `fields`
/// (lower-cased, sorted, from `cachet_policy::VaryRewrite::fields`): `primary`, the
/// [`VARIANT_SEPARATOR`], then 16 hex digits of a 64-bit SipHash (fixed keys, so every
/// worker and instance computes the same) over the fields' names and normalized values.
/// `None` when a value is over [`MAX_VARY_VALUE_BYTES`] (answer uncached).
pub fn variant_key(
    primary: &str,
    fields: &[String],
    h: &(impl Headers + ?Sized),
) -> Option<String> {
    #[allow(
        deprecated,
        reason = "SipHasher with fixed zero keys is what we want: stable across instances"
    )]
    let mut hasher = std::hash::SipHasher::new();
    for f in fields {
        f.hash(&mut hasher);
        match normalized(h, f) {
            Some(v) if v.len() > MAX_VARY_VALUE_BYTES => return None,
            Some(v) => {
                1u8.hash(&mut hasher);
                v.hash(&mut hasher);
            }
            None => 0u8.hash(&mut hasher),
        }
    }
    Some(format!(
        "{primary}{VARIANT_SEPARATOR}{:016x}",
        hasher.finish()
    ))
}

/// Whether `key` is a variant key (it has a [`VARIANT_SEPARATOR`] suffix).
pub fn is_variant_key(key: &str) -> bool {
    key.contains(VARIANT_SEPARATOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn normalization_merges_lines_and_whitespace_only() {
        let a = h(&[("Accept-Language", "en-US,  fr ;q=0.5")]);
        let b = h(&[
            ("accept-language", " en-US "),
            ("Accept-Language", "fr  ;q=0.5"),
        ]);
        assert_eq!(
            normalized(a.as_slice(), "accept-language"),
            normalized(b.as_slice(), "accept-language")
        );
        assert_eq!(
            normalized(a.as_slice(), "accept-language").as_deref(),
            Some(&b"en-US,fr ;q=0.5"[..])
        );
        assert_eq!(normalized(a.as_slice(), "x-theme"), None);
    }

    #[test]
    fn variant_keys() {
        let fields = vec!["accept-language".to_owned(), "x-theme".to_owned()];
        let en = h(&[("Accept-Language", "en"), ("X-Theme", "dark")]);
        let en2 = h(&[("x-theme", " dark "), ("accept-language", "en")]);
        let fr = h(&[("Accept-Language", "fr"), ("X-Theme", "dark")]);
        let none = h(&[("X-Theme", "dark")]);
        let empty = h(&[("Accept-Language", ""), ("X-Theme", "dark")]);
        let k = |x: &Vec<(String, String)>| variant_key("a/x|pc", &fields, x.as_slice());
        assert_eq!(k(&en), k(&en2));
        assert_ne!(k(&en), k(&fr));
        assert_ne!(k(&none), k(&empty), "absent is not empty");
        let key = k(&en).unwrap_or_default();
        assert!(key.starts_with("a/x|pc\u{1f}") && is_variant_key(&key));
        assert!(!is_variant_key("a/x|pc"));
        let long = h(&[("Accept-Language", &"x".repeat(MAX_VARY_VALUE_BYTES + 1))]);
        assert_eq!(k(&long), None);
    }
}
