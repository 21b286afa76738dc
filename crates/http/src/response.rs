//! [`ResponseFields`]: the origin response fields the policy reads, read once from bytes.

use cachet_policy::ResponseView;

use crate::headers::{Headers, text};

/// The origin response fields storability and freshness read, owned, read from header
/// bytes by [`ResponseFields::read`]. List fields are joined with `", "`; a value that is
/// not UTF-8 is treated as absent (Cachet interprets only ASCII values), never a panic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseFields {
    status: u16,
    cache_control: Option<String>,
    surrogate_control: Option<String>,
    cdn_cache_control: Option<String>,
    vary: Option<String>,
    content_encoding: Option<String>,
    content_type: Option<String>,
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

impl ResponseFields {
    /// Reads them from an origin response's `status` and headers.
    pub fn read(status: u16, h: &(impl Headers + ?Sized)) -> Self {
        Self {
            status,
            cache_control: owned(h.joined("cache-control")),
            surrogate_control: owned(h.joined("surrogate-control")),
            cdn_cache_control: owned(h.joined("cdn-cache-control")),
            vary: owned(h.joined("vary")),
            content_encoding: owned(h.value("content-encoding")),
            content_type: owned(h.value("content-type")),
            surrogate_key: owned(h.joined("surrogate-key")),
            expires: owned(h.value("expires")),
            date: owned(h.value("date")),
            age: owned(h.value("age")),
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
}
