//! The request-level inputs beside the User-Agent: the `Sec-CH-UA-Mobile` client hint and
//! the visitor's explicit choice in a cookie, both read from raw header bytes.
//!
//! Sources: `Sec-CH-UA-Mobile` is a low-entropy User-Agent Client Hint (WICG UA-CH,
//! "Sec-CH-UA-Mobile"), a Structured Field Boolean (RFC 8941 §3.3.6: `?1` / `?0`) that
//! Chromium browsers send on every request without `Accept-CH`. The override cookie
//! follows varnish-devicedetect's `X-UA-Device-force` convention (a "view PC site" link
//! sets it); cookie syntax follows RFC 6265 §4.2.1 (`name=value` pairs separated by `;`).

use crate::DeviceClass;

/// Longest `Cookie` header prefix searched for the override cookie, in bytes (8 KiB, the
/// common per-header limit of HTTP servers and CDNs). A cookie starting past it is not
/// seen; the bound keeps the search linear in a fixed size whatever the client sends.
pub const MAX_COOKIE_SCAN_BYTES: usize = 8 * 1024;

/// Longest override-cookie value that is normalized, in bytes (the longest accepted
/// value, `mobile-smartphone`, has 17; longer values are ignored).
const MAX_FORCE_VALUE_BYTES: usize = 32;

/// What decided a request's class, as returned by [`crate::Classifier::explain_request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Decision {
    /// The override cookie ([`crate::DeviceConfig::force_cookie`]) named a class.
    ForceCookie,
    /// The `Sec-CH-UA-Mobile` client hint (`?1` / `?0`) decided
    /// ([`crate::DeviceConfig::client_hints`]).
    ClientHint,
    /// The User-Agent rule with this index in the effective rule list
    /// ([`crate::Classifier::rule`] gives the rule).
    Rule(usize),
    /// No rule matched: the configured default class.
    Default,
}

/// The class a `Sec-CH-UA-Mobile` value states: `?1` → smartphone, `?0` → pc.
///
/// `value` is the raw field value. Leading and trailing spaces and tabs are ignored, and
/// so are Structured Field parameters after the boolean (`?1;x=y`, RFC 8941 §3.1.2).
/// Anything else — empty, `1`, `?2`, `"?1"`, a list such as `?1, ?0` (two header lines
/// joined) — is not a valid boolean and gives `None` (the UA rules decide). Never panics.
pub fn hint_class(value: &[u8]) -> Option<DeviceClass> {
    let v = trim_ows(value);
    let (class, rest) = match v {
        [b'?', b'1', rest @ ..] => (DeviceClass::Smartphone, rest),
        [b'?', b'0', rest @ ..] => (DeviceClass::Pc, rest),
        _ => return None,
    };
    match rest.first() {
        None | Some(b';') => Some(class),
        Some(_) => None,
    }
}

/// The class the override cookie `name` states in a raw `Cookie` header value, if the
/// cookie is present and its value names a class ([`force_value_class`]).
///
/// `cookie` is the header value, `name=value` pairs separated by `;` with optional spaces
/// (RFC 6265 §4.2.1; several `Cookie` fields must be joined with `"; "` by the caller).
/// Names compare exactly (case-sensitive, as browsers send them). The first pair with
/// that name wins (browsers put the most specific path first). Only the first
/// [`MAX_COOKIE_SCAN_BYTES`] bytes are searched. Any bytes are accepted; never panics,
/// never allocates.
pub fn force_class(cookie: &[u8], name: &[u8]) -> Option<DeviceClass> {
    if name.is_empty() {
        return None;
    }
    let cookie = cookie.get(..MAX_COOKIE_SCAN_BYTES).unwrap_or(cookie);
    for pair in cookie.split(|&b| b == b';') {
        let pair = trim_ows(pair);
        let Some(eq) = pair.iter().position(|&b| b == b'=') else {
            continue;
        };
        let (n, v) = pair.split_at(eq);
        if trim_ows(n) == name {
            return force_value_class(v.get(1..).unwrap_or_default());
        }
    }
    None
}

/// Normalizes an override-cookie value to a class, so the cookie adds no new variants.
///
/// ASCII case-insensitive, surrounding spaces and one pair of double quotes ignored:
/// * `pc`, `desktop`, and `tablet` or any `tablet-…` (varnish-devicedetect's `tablet-ipad`,
///   `tablet-android`) → [`DeviceClass::Pc`];
/// * `smartphone`, `phone`, `sp`, and `mobile` or any `mobile-…` (varnish-devicedetect's
///   `mobile-iphone`, `mobile-android`, `mobile-smartphone`, `mobile-generic`) →
///   [`DeviceClass::Smartphone`];
/// * anything else (empty, `bot`, `auto`, longer than 32 bytes, non-ASCII) → `None`: the
///   cookie is ignored. Never panics.
pub fn force_value_class(value: &[u8]) -> Option<DeviceClass> {
    let v = trim_ows(value);
    let v = match v {
        [b'"', inner @ .., b'"'] => trim_ows(inner),
        v => v,
    };
    if v.len() > MAX_FORCE_VALUE_BYTES {
        return None;
    }
    let mut buf = [0u8; MAX_FORCE_VALUE_BYTES];
    let lower = buf.get_mut(..v.len())?;
    lower.copy_from_slice(v);
    lower.make_ascii_lowercase();
    let lower: &[u8] = lower;
    match lower {
        b"pc" | b"desktop" | b"tablet" => Some(DeviceClass::Pc),
        b"smartphone" | b"phone" | b"sp" | b"mobile" => Some(DeviceClass::Smartphone),
        _ if lower.starts_with(b"tablet-") && lower.len() > 7 => Some(DeviceClass::Pc),
        _ if lower.starts_with(b"mobile-") && lower.len() > 7 => Some(DeviceClass::Smartphone),
        _ => None,
    }
}

/// `bytes` without leading and trailing spaces and horizontal tabs (HTTP `OWS`).
fn trim_ows(bytes: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = bytes.iter().position(|b| !is_ows(b)).unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |e| e + 1);
    bytes.get(start..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use DeviceClass::{Pc, Smartphone};
    use proptest::prelude::*;

    #[test]
    fn hint_values() {
        assert_eq!(hint_class(b"?1"), Some(Smartphone));
        assert_eq!(hint_class(b"?0"), Some(Pc));
        assert_eq!(hint_class(b" \t?1 "), Some(Smartphone));
        assert_eq!(hint_class(b"?0;a=b"), Some(Pc));
        for bad in [
            &b""[..],
            b"?",
            b"1",
            b"0",
            b"?2",
            b"?10",
            b"\"?1\"",
            b"?1, ?0",
            b"?1 ?0",
            b"true",
            b"\xff?1",
        ] {
            assert_eq!(hint_class(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn cookie_lookup() {
        let n = b"X-UA-Device-force";
        assert_eq!(force_class(b"X-UA-Device-force=pc", n), Some(Pc));
        assert_eq!(
            force_class(b"a=1; X-UA-Device-force=mobile-iphone; b=2", n),
            Some(Smartphone)
        );
        // First occurrence wins; names are case-sensitive; substrings of names don't match.
        assert_eq!(
            force_class(b"X-UA-Device-force=pc;X-UA-Device-force=sp", n),
            Some(Pc)
        );
        assert_eq!(force_class(b"x-ua-device-force=pc", n), None);
        assert_eq!(force_class(b"MyX-UA-Device-force=pc", n), None);
        assert_eq!(force_class(b"X-UA-Device-forced=pc", n), None);
        // Unknown values are ignored (no new variant), as are pairs without `=`.
        assert_eq!(force_class(b"X-UA-Device-force=bot", n), None);
        assert_eq!(force_class(b"X-UA-Device-force", n), None);
        assert_eq!(force_class(b"X-UA-Device-force=", n), None);
        assert_eq!(force_class(b"", n), None);
        assert_eq!(force_class(b"X-UA-Device-force=pc", b""), None);
        // Non-UTF-8 elsewhere in the header does not matter.
        assert_eq!(
            force_class(b"\xff\xfe=\x80; X-UA-Device-force=\"SP\"", n),
            Some(Smartphone)
        );
        // Past the scanned prefix: not seen.
        let mut long = vec![b'a'; MAX_COOKIE_SCAN_BYTES];
        long.extend_from_slice(b"; X-UA-Device-force=pc");
        assert_eq!(force_class(&long, n), None);
    }

    #[test]
    fn value_normalization() {
        for v in [
            "pc",
            "PC",
            "desktop",
            "tablet",
            "tablet-ipad",
            "Tablet-Android",
            " \"pc\" ",
        ] {
            assert_eq!(force_value_class(v.as_bytes()), Some(Pc), "{v}");
        }
        for v in [
            "smartphone",
            "sp",
            "phone",
            "mobile",
            "mobile-iphone",
            "mobile-android",
            "mobile-smartphone",
            "mobile-generic",
            "MOBILE",
        ] {
            assert_eq!(force_value_class(v.as_bytes()), Some(Smartphone), "{v}");
        }
        for v in [
            "",
            "bot",
            "mobile-",
            "tablet-",
            "auto",
            "pcx",
            "mobile-bot-and-a-very-long-tail-x",
            "\u{fc}",
        ] {
            assert_eq!(force_value_class(v.as_bytes()), None, "{v}");
        }
    }

    proptest! {
        #[test]
        fn never_panics(bytes in prop::collection::vec(any::<u8>(), 0..300), name in prop::collection::vec(any::<u8>(), 0..20)) {
            let _ = hint_class(&bytes);
            let _ = force_value_class(&bytes);
            let _ = force_class(&bytes, &name);
        }

        /// A cookie planted among arbitrary other pairs is found with its normalized value.
        #[test]
        fn planted_cookie_is_found(
            before in prop::collection::vec("[a-z]{1,8}=[a-z0-9]{0,8}", 0..5),
            after in prop::collection::vec("[a-z]{1,8}=[a-z0-9]{0,8}", 0..5),
            phone in any::<bool>(),
        ) {
            let v = if phone { "mobile-android" } else { "pc" };
            let mut pairs = before;
            pairs.push(format!("X-UA-Device-force={v}"));
            pairs.extend(after);
            let header = pairs.join("; ");
            let want = if phone { Smartphone } else { Pc };
            prop_assert_eq!(force_class(header.as_bytes(), b"X-UA-Device-force"), Some(want));
        }
    }
}
