//! [`ResponseFields`]: the origin response fields the policy reads, read once from bytes.

use cachet_policy::ResponseView;

use crate::headers::{Headers, text};

/// The origin response fields storability and freshness read, owned, read from header
/// bytes by [`ResponseFields::read`]. List fields are joined with `", "`.
///
/// Fields whose meaning Cachet interprets (`Cache-Control`, `CDN-Cache-Control`,
/// `Surrogate-Control`, `Vary`, `Age`, `Expires`, `Content-Encoding`) are read as bytes
/// ([`ascii_text`]): their grammar is ASCII, so every other byte becomes U+FFFD, which no
/// directive, field name, number or date contains. A value that still cannot be read
/// never makes the object more shareable or longer-lived than without it (issue 27):
/// unreadable directives are not stored (`cachet_policy::NoStore::Unreadable`), a `Vary`
/// member that is not a token is not stored (`NoStore::Vary`), an unreadable `Expires`
/// means already expired (RFC 9111 §5.3), an unreadable `Age` is ignored (§5.1).
/// `Pragma` is not interpreted in responses (RFC 9111 §5.4). Display-only fields
/// (`Content-Type`, `Surrogate-Key`) that are not UTF-8 are treated as absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseFields {
    status: u16,
    cache_control: Option<String>,
    surrogate_control: Option<String>,
    cdn_cache_control: Option<String>,
    vary: Option<String>,
    content_encoding: Option<String>,
    content_type: Option<String>,
    content_range: Option<String>,
    surrogate_key: Option<String>,
    expires: Option<String>,
    date: Option<String>,
    age: Option<String>,
    last_modified: Option<String>,
    content_length: Option<u64>,
    has_set_cookie: bool,
    has_validator: bool,
}

fn owned(v: Option<Vec<u8>>) -> Option<String> {
    v.and_then(|v| String::from_utf8(v).ok())
}

/// A field value Cachet interprets, as text: ASCII bytes as they are, every other byte
/// (obs-text, RFC 9110 §5.5; also each byte of valid UTF-8 beyond ASCII) as U+FFFD. Never
/// fails and never drops the field, so a directive beside a Latin-1 byte is still seen.
pub fn ascii_text(v: &[u8]) -> String {
    v.iter()
        .map(|&b| {
            if b.is_ascii() {
                char::from(b)
            } else {
                '\u{fffd}'
            }
        })
        .collect()
}

#[allow(
    clippy::needless_pass_by_value,
    reason = "takes what `Headers::value`/`joined` return, as `owned` does"
)]
fn interpreted(v: Option<Vec<u8>>) -> Option<String> {
    v.as_deref().map(ascii_text)
}

impl ResponseFields {
    /// Reads them from an origin response's `status` and headers.
    pub fn read(status: u16, h: &(impl Headers + ?Sized)) -> Self {
        Self {
            status,
            cache_control: interpreted(h.joined("cache-control")),
            surrogate_control: interpreted(h.joined("surrogate-control")),
            cdn_cache_control: interpreted(h.joined("cdn-cache-control")),
            vary: interpreted(h.joined("vary")),
            content_encoding: interpreted(h.value("content-encoding")),
            content_type: owned(h.value("content-type")),
            content_range: interpreted(h.value("content-range")),
            surrogate_key: owned(h.joined("surrogate-key")),
            expires: interpreted(h.value("expires")),
            date: owned(h.value("date")),
            age: interpreted(h.joined("age")),
            last_modified: owned(h.value("last-modified")),
            content_length: h
                .value("content-length")
                .as_deref()
                .and_then(text)
                .and_then(|v| v.trim().parse().ok()),
            has_set_cookie: h.has("set-cookie"),
            has_validator: h.has("etag") || h.has("last-modified"),
        }
    }

    /// The borrowed view `cachet_policy` decides on.
    pub fn view(&self) -> ResponseView<'_> {
        ResponseView {
            status: self.status,
            cache_control: self.cache_control.as_deref(),
            surrogate_control: self.surrogate_control.as_deref(),
            has_set_cookie: self.has_set_cookie,
            vary: self.vary.as_deref(),
            content_encoding: self.content_encoding.as_deref(),
            content_type: self.content_type.as_deref(),
            content_range: self.content_range.as_deref(),
            surrogate_key: self.surrogate_key.as_deref(),
            content_length: self.content_length,
            cdn_cache_control: self.cdn_cache_control.as_deref(),
            expires: self.expires.as_deref(),
            date: self.date.as_deref(),
            age: self.age.as_deref(),
            last_modified: self.last_modified.as_deref(),
            has_validator: self.has_validator,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_field_and_survives_non_utf8() {
        let h: Vec<(String, Vec<u8>)> = vec![
            ("Cache-Control".into(), b"public".to_vec()),
            ("cache-control".into(), b"max-age=60".to_vec()),
            ("Content-Type".into(), b"text/html; charset=\xe9".to_vec()),
            ("ETag".into(), b"\"a\"".to_vec()),
            ("Content-Length".into(), b" 12 ".to_vec()),
            ("Set-Cookie".into(), b"a=\xff".to_vec()),
        ];
        let f = ResponseFields::read(200, h.as_slice());
        let v = f.view();
        assert_eq!(v.cache_control, Some("public, max-age=60"));
        assert_eq!(v.content_type, None);
        assert_eq!(v.content_length, Some(12));
        assert!(v.has_set_cookie && v.has_validator);
        assert_eq!(v.cdn_cache_control, None);
    }

    /// Issue 27 items 1 and 2: a Latin-1 byte no longer hides `private` or a `Vary`
    /// member; the policy sees the value with the byte as U+FFFD.
    #[test]
    fn interpreted_fields_keep_their_ascii_structure_around_latin1_bytes() {
        let h: Vec<(String, Vec<u8>)> = vec![
            (
                "Cache-Control".into(),
                b"private, max-age=300, ext=\"caf\xe9\"".to_vec(),
            ),
            ("Vary".into(), b"Origin, X-Caf\xe9".to_vec()),
            ("Age".into(), b"7200".to_vec()),
            ("Age".into(), b"0".to_vec()),
            (
                "Expires".into(),
                b"Tue, 14 Nov 2023 22:18:20 GM\xd4".to_vec(),
            ),
            ("Content-Encoding".into(), b"gzip\xff".to_vec()),
        ];
        let f = ResponseFields::read(200, h.as_slice());
        let v = f.view();
        assert_eq!(
            v.cache_control,
            Some("private, max-age=300, ext=\"caf\u{fffd}\"")
        );
        assert_eq!(
            v.per_user(),
            Some(cachet_policy::NoStore::Private),
            "private is seen"
        );
        assert_eq!(v.vary, Some("Origin, X-Caf\u{fffd}"));
        assert_eq!(v.age, Some("7200, 0"));
        assert_eq!(v.expires, Some("Tue, 14 Nov 2023 22:18:20 GM\u{fffd}"));
        assert_eq!(v.content_encoding, Some("gzip\u{fffd}"));
        assert_eq!(ascii_text(b"a\xc3\xa9"), "a\u{fffd}\u{fffd}");
    }
}
