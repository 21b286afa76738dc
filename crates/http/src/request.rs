//! [`Inputs`]: the request fields the policy plans from, read once from any header map.

use cachet_policy::RequestView;

use crate::headers::{Headers, text};

/// The client request fields `Policy::plan` reads, owned so an adapter can move its
/// request on (to the origin, into a background job) and re-plan later. Read by
/// [`Inputs::read`] from header bytes; both adapters use it, so the request view is built
/// by one rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    /// Method, e.g. `"GET"`.
    pub method: String,
    /// The request's own scheme (`"http"` / `"https"`: TLS on the client connection).
    pub scheme: String,
    /// `:authority`, else `Host`, when present and text (a non-UTF-8 host is absent and
    /// planned as a `400`).
    pub host: Option<String>,
    /// The request target: path and raw query.
    pub path_and_query: String,
    /// `User-Agent` bytes.
    pub user_agent: Option<Vec<u8>>,
    /// `Authorization` (several fields joined with `", "`), bytes (RFC 9111 §3.5: keys the
    /// request by its credentials, `cachet_policy::plan::credentials_slot`).
    pub authorization: Option<Vec<u8>>,
    /// `X-Forwarded-Proto` when text (the policy honours it only when trusted).
    pub forwarded_proto: Option<String>,
    /// `X-Forwarded-Host` when text (the policy honours it only when trusted).
    pub forwarded_host: Option<String>,
    /// `Sec-CH-UA-Mobile` bytes (the client hint that decides the device class first).
    pub ch_ua_mobile: Option<Vec<u8>>,
    /// Every `Cookie` field joined with `"; "` (read only for `[device] force_cookie`).
    pub cookie: Option<Vec<u8>>,
    /// Whether the request has content (`Transfer-Encoding`, or a `Content-Length` that is
    /// not `0`; an unreadable one counts): a `GET`/`HEAD` with content is passed.
    pub has_body: bool,
    /// `Range` bytes (a route's `slice_bytes` caches one closed range by its slice).
    pub range: Option<Vec<u8>>,
    /// Whether `If-Range` is present.
    pub has_if_range: bool,
}

impl Inputs {
    /// Reads them: `method`, `scheme` and `path_and_query` from the platform's request
    /// line, the rest from `headers` (bytes; values that are not text read as absent).
    pub fn read(
        method: &str,
        scheme: &str,
        path_and_query: &str,
        headers: &(impl Headers + ?Sized),
    ) -> Self {
        let text_of = |name: &str| {
            headers
                .value(name)
                .and_then(|v| text(&v).map(str::to_owned))
        };
        Self {
            method: method.to_owned(),
            scheme: scheme.to_owned(),
            host: text_of(":authority").or_else(|| text_of("host")),
            path_and_query: path_and_query.to_owned(),
            user_agent: headers.value("user-agent"),
            authorization: headers.joined("authorization"),
            forwarded_proto: text_of("x-forwarded-proto"),
            forwarded_host: text_of("x-forwarded-host"),
            ch_ua_mobile: headers.value("sec-ch-ua-mobile"),
            // HTTP/2 splits `Cookie` into several fields (RFC 9113 §8.2.3).
            cookie: headers.joined_with("cookie", b"; "),
            has_body: headers.has("transfer-encoding")
                || headers
                    .joined("content-length")
                    .is_some_and(|v| !v.iter().all(|&b| b == b'0' || b" ,\t".contains(&b))),
            range: headers.value("range"),
            has_if_range: headers.has("if-range"),
        }
    }

    /// The borrowed view `Policy::plan` takes.
    pub fn view(&self) -> RequestView<'_> {
        RequestView {
            method: &self.method,
            scheme: &self.scheme,
            host: self.host.as_deref(),
            path_and_query: &self.path_and_query,
            user_agent: self.user_agent.as_deref(),
            authorization: self.authorization.as_deref(),
            forwarded_proto: self.forwarded_proto.as_deref(),
            forwarded_host: self.forwarded_host.as_deref(),
            ch_ua_mobile: self.ch_ua_mobile.as_deref(),
            cookie: self.cookie.as_deref(),
            has_body: self.has_body,
            range: self.range.as_deref(),
            has_if_range: self.has_if_range,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_authority_first_and_never_assumes_text() {
        let h: Vec<(String, Vec<u8>)> = vec![
            (":authority".into(), b"a.example".to_vec()),
            ("host".into(), b"b.example".to_vec()),
            ("user-agent".into(), b"UA \xff".to_vec()),
            ("x-forwarded-host".into(), b"caf\xe9".to_vec()),
            ("Authorization".into(), b"Bearer x".to_vec()),
            ("sec-ch-ua-mobile".into(), b"?1".to_vec()),
            ("cookie".into(), b"a=1".to_vec()),
            ("Cookie".into(), b"X-UA-Device-force=pc".to_vec()),
        ];
        let i = Inputs::read("GET", "https", "/p?q", h.as_slice());
        assert_eq!(i.host.as_deref(), Some("a.example"));
        assert_eq!(i.user_agent.as_deref(), Some(&b"UA \xff"[..]));
        assert_eq!(i.forwarded_host, None);
        assert_eq!(i.authorization.as_deref(), Some(&b"Bearer x"[..]));
        assert_eq!(i.ch_ua_mobile.as_deref(), Some(&b"?1"[..]));
        assert_eq!(i.cookie.as_deref(), Some(&b"a=1; X-UA-Device-force=pc"[..]));
        let v = i.view();
        assert_eq!((v.method, v.path_and_query), ("GET", "/p?q"));
        let only_host: Vec<(String, Vec<u8>)> = vec![("Host".into(), b"b.example".to_vec())];
        let i = Inputs::read("HEAD", "http", "/", only_host.as_slice());
        assert_eq!(i.host.as_deref(), Some("b.example"));
        assert_eq!(i.authorization, None);
        assert!(!i.has_body);
    }

    #[test]
    fn content_in_either_framing_is_a_body() {
        let body = |pairs: &[(&str, &[u8])]| {
            let h: Vec<(String, Vec<u8>)> = (pairs.iter())
                .map(|(n, v)| ((*n).to_owned(), v.to_vec()))
                .collect();
            Inputs::read("GET", "http", "/", h.as_slice()).has_body
        };
        assert!(body(&[("Content-Length", b"5")]));
        assert!(body(&[("Transfer-Encoding", b"chunked")]));
        assert!(body(&[("content-length", b"x")]), "unreadable counts");
        assert!(!body(&[("Content-Length", b"0")]));
        assert!(!body(&[]));
    }
}
