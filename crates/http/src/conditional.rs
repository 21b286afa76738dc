//! Client conditional requests answered from a stored object (RFC 9110 §13).

use cachet_refresh::Timestamp;

/// An entity tag (RFC 9110 §8.8.3): `"opaque"` or `W/"opaque"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntityTag<'a> {
    /// `W/` prefix present.
    pub weak: bool,
    /// The opaque tag between the quotes.
    pub opaque: &'a [u8],
}

impl<'a> EntityTag<'a> {
    /// Parses one entity tag, surrounding whitespace allowed; `None` when malformed.
    pub fn parse(v: &'a [u8]) -> Option<Self> {
        let v = v.trim_ascii();
        let (weak, rest) = match v.strip_prefix(b"W/") {
            Some(r) => (true, r),
            None => (false, v),
        };
        let opaque = rest.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
        // etagc = %x21 / %x23-7E / obs-text: no quote, no control, no space.
        if opaque.iter().any(|&b| b == b'"' || b <= 0x20 || b == 0x7f) {
            return None;
        }
        Some(Self { weak, opaque })
    }

    /// Weak comparison (RFC 9110 §8.8.3.2): the opaque tags match, weakness ignored.
    pub fn weak_eq(&self, other: &EntityTag<'_>) -> bool {
        self.opaque == other.opaque
    }

    /// Strong comparison: both strong and the opaque tags match.
    pub fn strong_eq(&self, other: &EntityTag<'_>) -> bool {
        !self.weak && !other.weak && self.opaque == other.opaque
    }
}

/// Splits an `If-None-Match` / `If-Match` list into entity tags (RFC 9110 §13.1.2); a
/// member that is not an entity tag is skipped. Commas inside quotes do not split.
pub fn tag_list(v: &[u8]) -> impl Iterator<Item = EntityTag<'_>> {
    let mut rest = v;
    std::iter::from_fn(move || {
        loop {
            rest = rest.trim_ascii_start();
            while let Some(r) = rest.strip_prefix(b",") {
                rest = r.trim_ascii_start();
            }
            if rest.is_empty() {
                return None;
            }
            let start = rest;
            let tag_start = usize::from(rest.starts_with(b"W/")) * 2;
            let end = if rest.get(tag_start) == Some(&b'"') {
                rest[tag_start + 1..]
                    .iter()
                    .position(|&b| b == b'"')
                    .map_or(rest.len(), |p| tag_start + p + 2)
            } else {
                rest.iter().position(|&b| b == b',').unwrap_or(rest.len())
            };
            rest = &rest[end..];
            if let Some(t) = EntityTag::parse(&start[..end]) {
                return Some(t);
            }
        }
    })
}

/// The outcome of evaluating a client's preconditions against a stored representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// No precondition, or one that passed: send the representation.
    Send,
    /// `If-None-Match` matched or `If-Modified-Since` is not older than `Last-Modified`:
    /// answer `304 Not Modified` (RFC 9110 §15.4.5).
    NotModified,
}

/// Evaluates `If-None-Match` and `If-Modified-Since` for a `GET` or `HEAD` against the
/// stored representation's `etag` and `last_modified` (RFC 9110 §13.2.2 steps 3–4).
///
/// * `If-None-Match`: `*` matches any stored representation; otherwise weak comparison
///   against the stored `ETag` (§13.1.2). When present, `If-Modified-Since` is ignored.
/// * `If-Modified-Since`: a valid date not older than the stored `Last-Modified` →
///   not modified (§13.1.3). Invalid dates, dates after `now` and a missing
///   `Last-Modified` are ignored.
///
/// Callers apply it only to stored 2xx responses (§13.2.1) and only for `GET`/`HEAD`.
pub fn evaluate(
    if_none_match: Option<&[u8]>,
    if_modified_since: Option<&[u8]>,
    etag: Option<&[u8]>,
    last_modified: Option<&[u8]>,
    now: Timestamp,
) -> Precondition {
    if let Some(inm) = if_none_match {
        if inm.trim_ascii() == b"*" {
            return Precondition::NotModified;
        }
        let Some(stored) = etag.and_then(EntityTag::parse) else {
            return Precondition::Send;
        };
        return if tag_list(inm).any(|t| t.weak_eq(&stored)) {
            Precondition::NotModified
        } else {
            Precondition::Send
        };
    }
    // Dates are parsed only when the client sent one (the hit path's common case is none).
    let Some(ims) = if_modified_since.and_then(crate::date::parse) else {
        return Precondition::Send;
    };
    let Some(lm) = last_modified.and_then(crate::date::parse) else {
        return Precondition::Send;
    };
    if ims > now {
        return Precondition::Send;
    }
    if lm <= ims {
        Precondition::NotModified
    } else {
        Precondition::Send
    }
}

/// Whether an `If-Range` value lets a `Range` apply (RFC 9110 §13.1.5): an entity tag must
/// match the stored `ETag` by **strong** comparison; a date must equal the stored
/// `Last-Modified` exactly. Anything else (weak tags, other dates, garbage) → `false`: the
/// whole representation is sent.
pub fn if_range_matches(
    if_range: &[u8],
    etag: Option<&[u8]>,
    last_modified: Option<&[u8]>,
) -> bool {
    let v = if_range.trim_ascii();
    if v.starts_with(b"\"") || v.starts_with(b"W/") {
        return match (EntityTag::parse(v), etag.and_then(EntityTag::parse)) {
            (Some(a), Some(b)) => a.strong_eq(&b),
            _ => false,
        };
    }
    match (
        crate::date::parse(v),
        last_modified.and_then(crate::date::parse),
    ) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Timestamp = Timestamp::from_millis(1_700_100_000_000); // 2023-11-16T02:00Z
    const LM: &[u8] = b"Tue, 14 Nov 2023 22:00:00 GMT";

    #[test]
    fn entity_tags() {
        assert_eq!(
            EntityTag::parse(b" W/\"x\" "),
            Some(EntityTag {
                weak: true,
                opaque: b"x"
            })
        );
        assert_eq!(
            EntityTag::parse(b"\"\""),
            Some(EntityTag {
                weak: false,
                opaque: b""
            })
        );
        for bad in [&b"x"[..], b"\"x", b"w/\"x\"", b"\"a b\"", b"\"a\"b\""] {
            assert_eq!(EntityTag::parse(bad), None, "{bad:?}");
        }
        let list: Vec<_> = tag_list(b"\"a\", W/\"b,c\" ,bogus, \"d\"").collect();
        let opaque: Vec<&[u8]> = list.iter().map(|t| t.opaque).collect();
        assert_eq!(opaque, [&b"a"[..], b"b,c", b"d"]);
        assert!(list[1].weak);
    }

    #[test]
    fn if_none_match_uses_weak_comparison_and_wins_over_ims() {
        let etag = Some(&b"\"v1\""[..]);
        let nm = Precondition::NotModified;
        assert_eq!(evaluate(Some(b"W/\"v1\""), None, etag, None, NOW), nm);
        assert_eq!(evaluate(Some(b"\"v0\", \"v1\""), None, etag, None, NOW), nm);
        assert_eq!(evaluate(Some(b"*"), None, None, None, NOW), nm);
        assert_eq!(
            evaluate(Some(b"\"v2\""), None, etag, None, NOW),
            Precondition::Send
        );
        // INM present and not matching: IMS is not consulted.
        assert_eq!(
            evaluate(Some(b"\"v2\""), Some(LM), etag, Some(LM), NOW),
            Precondition::Send
        );
        assert_eq!(
            evaluate(Some(b"\"v1\""), None, None, None, NOW),
            Precondition::Send
        );
    }

    #[test]
    fn if_modified_since() {
        let later = b"Wed, 15 Nov 2023 00:00:00 GMT";
        let earlier = b"Mon, 13 Nov 2023 00:00:00 GMT";
        let nm = Precondition::NotModified;
        assert_eq!(evaluate(None, Some(LM), None, Some(LM), NOW), nm);
        assert_eq!(evaluate(None, Some(later), None, Some(LM), NOW), nm);
        assert_eq!(
            evaluate(None, Some(earlier), None, Some(LM), NOW),
            Precondition::Send
        );
        assert_eq!(
            evaluate(None, Some(b"yesterday"), None, Some(LM), NOW),
            Precondition::Send
        );
        assert_eq!(
            evaluate(None, Some(LM), None, None, NOW),
            Precondition::Send
        );
        // A date in the future is invalid (§13.1.3).
        let future = b"Fri, 01 Jan 2100 00:00:00 GMT";
        assert_eq!(
            evaluate(None, Some(future), None, Some(LM), NOW),
            Precondition::Send
        );
    }

    #[test]
    fn if_range_is_strong() {
        let etag = Some(&b"\"v1\""[..]);
        assert!(if_range_matches(b"\"v1\"", etag, None));
        assert!(!if_range_matches(b"W/\"v1\"", etag, None));
        assert!(!if_range_matches(b"\"v1\"", Some(b"W/\"v1\""), None));
        assert!(!if_range_matches(b"\"v2\"", etag, None));
        assert!(if_range_matches(LM, None, Some(LM)));
        assert!(!if_range_matches(
            b"Wed, 15 Nov 2023 00:00:00 GMT",
            None,
            Some(LM)
        ));
        assert!(!if_range_matches(b"junk", etag, Some(LM)));
    }
}
