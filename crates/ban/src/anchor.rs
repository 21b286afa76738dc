//! The anchor of a ban: the one condition an index files it under (exact value, anchored prefix or whitespace token).

use crate::expr::{BanExpr, Field};
use crate::matcher::Hint;

/// How an [`Anchor`] key is compared with the field's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AnchorKind {
    /// The value equals the key (`==`, or `~ "^…$"`).
    Exact,
    /// The value starts with the key (`~ "^…"`, or a regex whose matches all start with
    /// the literal key).
    Prefix,
    /// The key is one of the value's whitespace-separated tokens (Unicode whitespace, as
    /// `str::split_whitespace` and the regex `\s`): `~ "(^|\s)KEY(\s|$)"`, the surrogate-key
    /// form of [`BanList::add_surrogate_key_ban`](crate::BanList::add_surrogate_key_ban).
    Token,
}

/// The condition of a ban an index can answer: the ban matches an object only if the
/// anchor's field value relates to `key` as `kind` says. A missing field never satisfies
/// an anchor (only `!=` matches a missing value, and `!=` is never an anchor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor<'a> {
    /// The field whose value is compared.
    pub field: &'a Field,
    /// How it is compared.
    pub kind: AnchorKind,
    /// The key (exact value, prefix or token).
    pub key: &'a str,
    /// `true` when satisfying the anchor is the whole expression (one condition, and its
    /// test is exactly the anchor's comparison): the ban then matches without evaluating
    /// the expression.
    pub complete: bool,
}

/// The anchor of `expr`, chosen as the ban list's own index does: an exact value or a
/// token first (a bucket usually holds one ban), then an anchored prefix, then
/// `obj.status` equality (few distinct values). `None` when no condition can be indexed
/// (the ban must be evaluated on every object older than it, as Varnish does).
pub fn anchor(expr: &BanExpr) -> Option<Anchor<'_>> {
    let mut best: Option<(u8, Anchor<'_>)> = None;
    let single = expr.conditions().len() == 1;
    for c in expr.conditions() {
        let (kind, key) = match c.hint() {
            Hint::None => continue,
            Hint::Exact(k) => (AnchorKind::Exact, k),
            Hint::Prefix(k) => (AnchorKind::Prefix, k),
            Hint::Token(k) => (AnchorKind::Token, k),
        };
        let rank = match (kind, c.field()) {
            (_, Field::ObjStatus) => 1,
            (AnchorKind::Prefix, _) => 2,
            _ => 3,
        };
        if best.as_ref().is_none_or(|b| rank > b.0) {
            best = Some((
                rank,
                Anchor {
                    field: c.field(),
                    kind,
                    key,
                    complete: single && c.hint_is_complete(),
                },
            ));
        }
    }
    best.map(|(_, a)| a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(text: &str) -> Option<(String, AnchorKind, String, bool)> {
        let e = BanExpr::parse(text).ok()?;
        anchor(&e).map(|a| (a.field.to_string(), a.kind, a.key.to_owned(), a.complete))
    }

    #[test]
    fn anchors_follow_the_index_ranking() {
        assert_eq!(
            of("req.url == /a"),
            Some(("req.url".into(), AnchorKind::Exact, "/a".into(), true))
        );
        assert_eq!(
            of("obj.http.x-url ~ ^/blog/"),
            Some((
                "obj.http.x-url".into(),
                AnchorKind::Prefix,
                "/blog/".into(),
                true
            ))
        );
        assert_eq!(
            of(r"obj.http.x-url ~ ^/blog/(a|b)"),
            Some((
                "obj.http.x-url".into(),
                AnchorKind::Prefix,
                "/blog/".into(),
                false
            ))
        );
        assert_eq!(
            of(r#"obj.http.surrogate-key ~ "(^|\s)k1(\s|$)""#),
            Some((
                "obj.http.surrogate-key".into(),
                AnchorKind::Token,
                "k1".into(),
                true
            ))
        );
        assert_eq!(
            of("obj.status == 200 && req.url ~ ^/x"),
            Some(("req.url".into(), AnchorKind::Prefix, "/x".into(), false))
        );
        assert_eq!(of("obj.http.x-url ~ jpg$"), None);
        assert_eq!(of("req.url != /a"), None);
        assert_eq!(of("obj.ttl > 1h"), None);
    }
}
