//! Variants: the secondary cache key a `Vary` response is stored under (RFC 9111 §4.1).
//!
//! `cachet_policy::rewrite_vary` decides which request fields an origin's `Vary` makes
//! the object depend on (besides the device class, already in the primary key, and the
//! encoding, handled by gzip storage). This module turns a request's values of those
//! fields into a **secondary key**, normalized as §4.1 allows: the field's lines are
//! combined with `", "`, whitespace around list commas is dropped, and the value is
//! trimmed; an absent field differs from an empty one. `Accept-Language` goes further:
//! case, spaces and weights are canonical and members ordered by weight
//! ([`accept_language`], issue 30).

use std::hash::{Hash, Hasher};

use crate::headers::Headers;

/// Longest normalized value of one varying request field, bytes; a request with a longer
/// value is answered uncached (a variant per arbitrary long value would flood the cache).
pub const MAX_VARY_VALUE_BYTES: usize = 512;

/// Separator between a primary cache key and its variant suffix.
pub const VARIANT_SEPARATOR: char = '\u{1f}';

/// A request's normalized value of `name` (RFC 9111 §4.1), `None` when absent:
/// [`accept_language`]'s canonical form for `Accept-Language` when it parses, else the
/// field's lines combined, whitespace around list commas dropped and runs of whitespace
/// folded.
pub fn normalized(h: &(impl Headers + ?Sized), name: &str) -> Option<Vec<u8>> {
    let joined = h.joined(name)?;
    if name.eq_ignore_ascii_case("accept-language")
        && let Some(canonical) = accept_language(&joined)
    {
        return Some(canonical);
    }
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

/// The canonical form of an `Accept-Language` value (RFC 9110 §12.5.4, §12.4.2; RFC 4647
/// §2.1 language ranges), so requests that say the same thing select the same variant:
/// language ranges lower-cased (they are case-insensitive), whitespace and empty list
/// members dropped, weights written canonically (`q=1` omitted, `q=0.50` → `q=0.5`), and
/// the members ordered by weight, highest first, keeping their order among equal weights
/// (which some origins read as a preference, so it is never changed). `fr;q=0.8, EN` and
/// `en,fr;q=0.80` are both `en,fr;q=0.8`.
///
/// `None` (the caller falls back to the generic normalization: nothing is merged) when any
/// member is not `range [ ";" "q=" qvalue ]` with a valid range (`*`, or 1–8 letters then
/// `-` and 1–8 letters or digits, repeated) and weight (`0`–`1`, up to three decimals), or
/// a member has other parameters: what Cachet cannot read it never treats as equal to
/// something else (fail closed). Bytes in, never panics.
pub fn accept_language(value: &[u8]) -> Option<Vec<u8>> {
    let mut members: Vec<(u16, Vec<u8>)> = Vec::new();
    for member in value.split(|&b| b == b',') {
        let member = member.trim_ascii();
        if member.is_empty() {
            continue;
        }
        let mut parts = member.split(|&b| b == b';');
        let range = parts.next()?.trim_ascii();
        if !language_range(range) {
            return None;
        }
        let q = match parts.next() {
            None => 1000,
            Some(p) => qvalue(
                p.trim_ascii()
                    .strip_prefix(b"q=")
                    .or_else(|| p.trim_ascii().strip_prefix(b"Q="))?,
            )?,
        };
        if parts.next().is_some() {
            return None;
        }
        members.push((q, range.to_ascii_lowercase()));
    }
    // Stable: equal weights keep their order.
    members.sort_by_key(|m| std::cmp::Reverse(m.0));
    let mut out = Vec::with_capacity(value.len());
    for (i, (q, range)) in members.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(range);
        if *q == 0 {
            out.extend_from_slice(b";q=0");
        } else if *q < 1000 {
            let digits = format!("{q:03}");
            out.extend_from_slice(b";q=0.");
            out.extend_from_slice(digits.trim_end_matches('0').as_bytes());
        }
    }
    Some(out)
}

/// RFC 4647 §2.1 `language-range`: `*`, or `1*8ALPHA *("-" 1*8alphanum)`.
fn language_range(r: &[u8]) -> bool {
    if r == b"*" {
        return true;
    }
    let mut subtags = r.split(|&b| b == b'-');
    let first = subtags.next().unwrap_or_default();
    (1..=8).contains(&first.len())
        && first.iter().all(u8::is_ascii_alphabetic)
        && subtags.all(|t| (1..=8).contains(&t.len()) && t.iter().all(u8::is_ascii_alphanumeric))
}

/// RFC 9110 §12.4.2 `qvalue` (`0[.ddd]` or `1[.000]`) in thousandths.
fn qvalue(q: &[u8]) -> Option<u16> {
    let (int, frac) = match q.iter().position(|&b| b == b'.') {
        Some(dot) => (&q[..dot], &q[dot + 1..]),
        None => (q, &b""[..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths = 0u16;
    for i in 0..3 {
        thousandths = thousandths * 10 + frac.get(i).map_or(0, |d| u16::from(d - b'0'));
    }
    match int {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
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
            Some(&b"en-us,fr;q=0.5"[..]),
            "Accept-Language has a canonical form (next test)"
        );
        assert_eq!(normalized(a.as_slice(), "x-theme"), None);
        // Any other field: lines and whitespace only, case and order kept.
        let a = h(&[("X-Theme", "Dark,  wide ;x=1")]);
        let b = h(&[("x-theme", " Dark "), ("X-Theme", "wide  ;x=1")]);
        assert_eq!(
            normalized(a.as_slice(), "x-theme"),
            normalized(b.as_slice(), "x-theme")
        );
        assert_eq!(
            normalized(a.as_slice(), "x-theme").as_deref(),
            Some(&b"Dark,wide ;x=1"[..])
        );
    }

    #[test]
    fn accept_language_is_canonical_in_case_spaces_and_weights() {
        let c = |v: &str| accept_language(v.as_bytes()).map(|o| String::from_utf8(o).unwrap());
        assert_eq!(c("fr;q=0.8, EN").as_deref(), Some("en,fr;q=0.8"));
        assert_eq!(c("en ,  fr;q=0.80").as_deref(), Some("en,fr;q=0.8"));
        assert_eq!(c("en-US;Q=1.000,de;q=0").as_deref(), Some("en-us,de;q=0"));
        assert_eq!(
            c("da, en-gb;q=0.8, en;q=0.7").as_deref(),
            Some("da,en-gb;q=0.8,en;q=0.7")
        );
        assert_eq!(c("*;q=0.5, de-CH").as_deref(), Some("de-ch,*;q=0.5"));
        assert_eq!(c(",en,,").as_deref(), Some("en"), "empty list members");
        assert_eq!(c("de;q=0.005").as_deref(), Some("de;q=0.005"));
        // Equal weights keep their order: an origin may read it as a preference.
        assert_eq!(c("fr, en").as_deref(), Some("fr,en"));
        assert_ne!(c("fr, en"), c("en, fr"));
        // Unreadable: no canonical form, nothing merged.
        for bad in [
            "en;q=2",
            "en;q=0.1234",
            "en;q=",
            "en;level=1",
            "toolongtag",
            "en_US",
            "caf\u{e9}",
            "en;q=0.5;q=0.4",
        ] {
            assert_eq!(c(bad), None, "{bad}");
        }
        assert_eq!(accept_language(b"en\xff"), None);
        // Through `normalized`: Accept-Language only; a bad one falls back to the
        // generic form.
        let hs = h(&[("Accept-Language", "FR;q=0.8"), ("accept-language", "en")]);
        assert_eq!(
            normalized(hs.as_slice(), "accept-language").unwrap(),
            b"en,fr;q=0.8"
        );
        let hs = h(&[("Accept-Language", "en;level=1 ,  FR")]);
        assert_eq!(
            normalized(hs.as_slice(), "accept-language").unwrap(),
            b"en;level=1,FR"
        );
        let hs = h(&[("Accept", "TEXT/HTML;q=0.8, a")]);
        assert_eq!(
            normalized(hs.as_slice(), "accept").unwrap(),
            b"TEXT/HTML;q=0.8,a"
        );
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
