//! Which header fields cross the cache: hop-by-hop and `Connection`-listed fields
//! (RFC 9110 §7.6.1, RFC 9111 §3.1), and the client fields a fill may carry.

use cachet_policy::object::{is_hop_by_hop, stored_header};

use crate::headers::Headers;

/// Client request fields never sent on a fetch whose answer will be stored or shared: the
/// client's own preconditions and range (a fill fetches the whole, unconditional
/// representation and answers them from it, RFC 9111 §4.3.1, RFC 9110 §14.2), plus the
/// fields each fetch sets itself (`Host`, `Accept-Encoding`).
pub const NOT_ON_FILL: &[&str] = &[
    "host",
    "accept-encoding",
    "if-none-match",
    "if-modified-since",
    "if-match",
    "if-unmodified-since",
    "if-range",
    "range",
];

/// The field names a `Connection` header lists (RFC 9110 §7.6.1), lower-cased. Values
/// that are not UTF-8 list nothing.
pub fn connection_listed(h: &(impl Headers + ?Sized)) -> Vec<String> {
    let mut out = Vec::new();
    h.visit("connection", &mut |v| {
        if let Some(s) = crate::headers::text(v) {
            out.extend(
                s.split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_ascii_lowercase),
            );
        }
        true
    });
    out
}

/// Whether a field is hop-by-hop for this message: in the static list
/// ([`cachet_policy::object::HOP_BY_HOP`]) or named by its `Connection` header
/// (`listed`, from [`connection_listed`]).
pub fn hop_by_hop(name: &str, listed: &[String]) -> bool {
    is_hop_by_hop(name) || listed.iter().any(|l| l.eq_ignore_ascii_case(name))
}

/// The origin response fields an object stores, in order: [`stored_header`]'s rule minus
/// the fields its `Connection` header lists and those a `no-cache="…"` directive names
/// (`no_cache_fields`, RFC 9111 §5.2.2.4: may not be reused without revalidation, so not
/// stored). Values are stored as their bytes, UTF-8 or not (obs-text, RFC 9110 §5.5): an
/// answer from the cache carries what the origin sent.
pub fn stored_fields(
    fields: &[(String, Vec<u8>)],
    no_cache_fields: &[String],
) -> Vec<(String, Vec<u8>)> {
    let listed = connection_listed(fields);
    fields
        .iter()
        .filter(|(n, _)| {
            stored_header(n)
                && !hop_by_hop(n, &listed)
                && !no_cache_fields.iter().any(|f| f.eq_ignore_ascii_case(n))
        })
        .cloned()
        .collect()
}

/// Request field prefix reserved for Cachet (`x-cachet-*`): client copies are removed
/// before a request is planned or forwarded, so a client can't choose its device class,
/// cache key or shield (house rule; the adapter then sets the device header itself, and
/// every fill carries `[origin].shard_header`, which validation keeps in this namespace).
/// The one definition is [`cachet_policy::RESERVED_FIELD_PREFIX`].
pub const RESERVED_PREFIX: &str = cachet_policy::RESERVED_FIELD_PREFIX;

/// Whether `name` is in Cachet's reserved namespace ([`RESERVED_PREFIX`], ASCII
/// case-insensitive).
pub fn reserved(name: &str) -> bool {
    name.get(..RESERVED_PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(RESERVED_PREFIX))
}

/// The field a Cachet edge of an Envoy fleet puts on every fill (with the value
/// [`EDGE_TIER_VALUE`]; whenever `[origin].shard_header` is set, [`crate::fill`]) so a
/// shield (`[envoy].shield = true`) answers it as its edge tier: `Surrogate-Key` kept, so
/// the edge's copy carries the origin's keys and a purge by key reaches it
/// (docs/fleet.md). Reserved (`x-cachet-*`): read by the shield before it removes every
/// reserved field, never forwarded. Fastly's equivalent is `Fastly-FF`.
pub const EDGE_TIER_FIELD: &str = "x-cachet-tier";

/// The value of [`EDGE_TIER_FIELD`] on an edge's fill.
pub const EDGE_TIER_VALUE: &[u8] = b"edge";

/// Whether a request comes from a Cachet edge tier ([`EDGE_TIER_FIELD`] is
/// [`EDGE_TIER_VALUE`]) to a node configured as a shield (`is_shield`): its answers keep
/// `Surrogate-Key` (`Client::keep_surrogate`). A client could send the field to a
/// shield it reaches directly: it learns the surrogate keys, nothing more (shields sit
/// behind the edges; docs/fleet.md).
pub fn from_edge_tier(headers: &(impl Headers + ?Sized), is_shield: bool) -> bool {
    is_shield && headers.value(EDGE_TIER_FIELD).as_deref() == Some(EDGE_TIER_VALUE)
}

/// Whether a client request field goes onto a fill (an origin fetch whose answer will be
/// stored): named in `allow` (`[origin].fill_fields`, plus a stored object's `Vary`
/// fields), and not hop-by-hop, not `Connection`-listed, not in [`NOT_ON_FILL`], not a
/// pseudo-header, not Cachet's reserved `x-cachet-*` (the adapter sets the device header).
pub fn on_fill(name: &str, listed: &[String], allow: &[&str]) -> bool {
    allow.iter().any(|a| a.eq_ignore_ascii_case(name))
        && !name.starts_with(':')
        && !hop_by_hop(name, listed)
        && !NOT_ON_FILL.iter().any(|n| n.eq_ignore_ascii_case(name))
        && !reserved(name)
}

/// Whether an origin response field goes to the client on a pass: not hop-by-hop, not
/// `Connection`-listed, not Cachet's reserved `x-cachet-*` (a shield's
/// `cachet_policy::object::CONTENT_AT_FIELD`; kept only when `keep_surrogate`), not the
/// edge-only `Surrogate-Key` / `Surrogate-Control` (kept only
/// when `keep_surrogate`: a Cachet shield answering its edge tier).
pub fn returned(name: &str, listed: &[String], keep_surrogate: bool) -> bool {
    !name.starts_with(':')
        && !hop_by_hop(name, listed)
        && (keep_surrogate || !reserved(name))
        && (keep_surrogate
            || !(name.eq_ignore_ascii_case("surrogate-key")
                || name.eq_ignore_ascii_case("surrogate-control")))
}

/// The list-valued response fields a host may hand over joined with a bare `,`: Envoy's
/// header map joins the lines of its inline fields `Cache-Control`, `Vary` and `Via`
/// with `","` (`DelimiterForInlineHeaders`), so two origin lines `max-age=60` and
/// `public` arrive as `max-age=60,public` (measured with Envoy 1.40; other fields keep
/// their lines). RFC 9110 §5.3 combines lines with a comma and optional whitespace;
/// Cachet sends them as a combining cache does, `max-age=60, public` (issue 30).
pub const HOST_JOINED_LISTS: &[&str] = &["cache-control", "vary", "via"];

/// `value` with one space after each comma that separates list members and is followed
/// by neither a space nor a tab (RFC 9110 §5.6.1 list syntax); commas inside a
/// quoted-string (`no-cache="a,b"`, backslash escapes honoured) are not separators.
/// `None` when there is nothing to change, so the common case allocates nothing. Bytes,
/// never assumed UTF-8; never panics.
pub fn spaced_list(value: &[u8]) -> Option<Vec<u8>> {
    let mut quoted = false;
    let mut escaped = false;
    let mut at = Vec::new();
    for (i, &b) in value.iter().enumerate() {
        if quoted {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => quoted = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => quoted = true,
            b',' if !matches!(value.get(i + 1), Some(b' ' | b'\t') | None) => at.push(i),
            _ => {}
        }
    }
    if at.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(value.len() + at.len());
    let mut from = 0;
    for i in at {
        out.extend_from_slice(&value[from..=i]);
        out.push(b' ');
        from = i + 1;
    }
    out.extend_from_slice(&value[from..]);
    Some(out)
}

/// Applies [`spaced_list`] to the [`HOST_JOINED_LISTS`] fields of `fields` in place and
/// returns the names it changed (an adapter whose host forwards the map itself writes
/// those back).
pub fn respace_joined_lists(fields: &mut [(String, Vec<u8>)]) -> Vec<String> {
    let mut changed = Vec::new();
    for (n, v) in fields.iter_mut() {
        if !HOST_JOINED_LISTS.iter().any(|l| l.eq_ignore_ascii_case(n)) {
            continue;
        }
        if let Some(spaced) = spaced_list(v) {
            *v = spaced;
            changed.push(n.clone());
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joined_list_lines_get_the_space_a_combining_cache_sends() {
        assert_eq!(
            spaced_list(b"max-age=60,public").as_deref(),
            Some(&b"max-age=60, public"[..])
        );
        assert_eq!(spaced_list(b"max-age=60, public"), None, "already spaced");
        assert_eq!(spaced_list(b"a,\tb"), None, "a tab is whitespace too");
        assert_eq!(spaced_list(b"max-age=60"), None);
        assert_eq!(spaced_list(b"a,"), None, "a trailing comma stays");
        assert_eq!(
            spaced_list(br#"no-cache="a,b",private"#).as_deref(),
            Some(&br#"no-cache="a,b", private"#[..]),
            "a comma inside a quoted string is no separator"
        );
        assert_eq!(
            spaced_list(br#"x="a\",b",y,z"#).as_deref(),
            Some(&br#"x="a\",b", y, z"#[..]),
            "an escaped quote does not end the string"
        );
        assert_eq!(
            spaced_list(b"caf\xe9,b").as_deref(),
            Some(&b"caf\xe9, b"[..]),
            "bytes, not text"
        );
        let mut fs = f(&[
            ("Cache-Control", b"max-age=60,public"),
            ("vary", b"Foo,Bar"),
            ("link", b"<a>,<b>"),
            ("via", b"1.1 a, 1.1 b"),
        ]);
        assert_eq!(respace_joined_lists(&mut fs), ["Cache-Control", "vary"]);
        assert_eq!(fs[0].1, b"max-age=60, public");
        assert_eq!(fs[1].1, b"Foo, Bar");
        assert_eq!(fs[2].1, b"<a>,<b>", "not a field any host joins");
        assert_eq!(fs[3].1, b"1.1 a, 1.1 b");
    }

    #[test]
    fn only_a_shield_answers_the_edge_tier_as_such() {
        let edge = f(&[("X-Cachet-Tier", b"edge")]);
        assert!(from_edge_tier(edge.as_slice(), true));
        assert!(
            !from_edge_tier(edge.as_slice(), false),
            "not a shield: never"
        );
        let other = f(&[("x-cachet-tier", b"shield")]);
        assert!(!from_edge_tier(other.as_slice(), true));
        assert!(!from_edge_tier(f(&[]).as_slice(), true));
    }

    fn f(pairs: &[(&str, &[u8])]) -> Vec<(String, Vec<u8>)> {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), v.to_vec()))
            .collect()
    }

    #[test]
    fn connection_listed_fields_are_neither_stored_nor_returned() {
        let h = f(&[
            ("Connection", b"X-Hop, close"),
            ("connection", b"x-other"),
            ("X-Hop", b"1"),
            ("x-other", b"2"),
            ("Keep-Alive", b"timeout=5"),
            ("ETag", b"\"a\""),
            ("X-Latin1", b"caf\xe9"),
            ("Cache-Control", b"max-age=60"),
            ("X-Secret", b"s"),
        ]);
        let listed = connection_listed(h.as_slice());
        assert_eq!(listed, ["x-hop", "close", "x-other"]);
        let stored = stored_fields(&h, &["x-secret".to_owned()]);
        let names: Vec<&str> = stored.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["ETag", "X-Latin1", "Cache-Control"]);
        // Issue 27 item 11: a value that is not UTF-8 is stored as its bytes.
        assert_eq!(stored[1].1, b"caf\xe9");
        assert!(!returned("X-HOP", &listed, false));
        assert!(!returned("surrogate-key", &listed, false));
        assert!(returned("surrogate-key", &listed, true));
        assert!(returned("etag", &listed, false));
        assert!(!returned("X-Cachet-Content-At", &listed, false), "reserved");
        assert!(
            returned("x-cachet-content-at", &listed, true),
            "to an edge tier"
        );
    }

    #[test]
    fn fills_never_carry_client_preconditions_or_ranges() {
        for n in [
            "Range",
            "If-Range",
            "If-Match",
            "if-none-match",
            "If-Modified-Since",
            "If-Unmodified-Since",
            "Host",
            "Accept-Encoding",
            "Connection",
            "TE",
            ":path",
            "X-Cachet-Device",
        ] {
            assert!(!on_fill(n, &[], &[n]), "{n}");
        }
        let allow = ["accept-language", "x-hop"];
        assert!(!on_fill("Cookie", &[], &allow), "not allowlisted");
        assert!(!on_fill("X-Hop", &["x-hop".to_owned()], &allow));
        assert!(on_fill("Accept-Language", &[], &allow));
    }
}
