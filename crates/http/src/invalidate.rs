//! Invalidation after unsafe methods (RFC 9111 §4.4).
//!
//! A non-error response to any method not known to be safe (`POST`, `PUT`, `DELETE`,
//! `PATCH`, and any extension method such as `M-SEARCH`) invalidates the stored
//! responses for the target URI and for the `Location` and `Content-Location` URIs when
//! they share the target's host. Every variant Cachet stores for a URL (each device
//! class) carries the URL's surrogate key ([`url_key`]), so the adapter purges those keys
//! and every variant, on every worker or POP, goes.

use cachet_policy::Policy;
use cachet_policy::plan::normalize_authority;

use crate::headers::{Headers, text};

/// The per-URL surrogate key of a normalized `host` and `target` (path + normalized
/// query); [`cachet_policy::object::url_tag`].
pub fn url_key(host: &str, target: &str) -> String {
    cachet_policy::object::url_tag(host, target)
}

/// Whether `method` is one whose non-error answer invalidates: every method not known to
/// be safe (RFC 9111 §4.4). The safe methods Cachet knows are `GET`, `HEAD`, `OPTIONS`
/// and `TRACE` (RFC 9110 §9.2.1); methods are case-sensitive, so `get` is an unknown
/// method and invalidates (issue 30).
pub fn invalidates(method: &str) -> bool {
    !matches!(method, "GET" | "HEAD" | "OPTIONS" | "TRACE")
}

/// The surrogate keys to purge after an origin answered `status` to `method` on `host` /
/// `target` (already normalized by the plan), reading `Location` and `Content-Location`
/// from `response`. Empty for safe methods and for error statuses (1xx, 4xx, 5xx: RFC 9111
/// §4.4 says "non-error"; informational responses are not final).
///
/// `Location` / `Content-Location` count when they are a path (`/…`) or an absolute
/// `http`/`https` URI whose host normalizes to `host`; their query is normalized as the
/// policy does for lookups, so the key matches the stored objects'. Anything else (other
/// hosts, unparsable values, non-UTF-8 bytes) is ignored.
pub fn invalidation_keys(
    policy: &Policy,
    method: &str,
    status: u16,
    host: &str,
    target: &str,
    response: &(impl Headers + ?Sized),
) -> Vec<String> {
    if !invalidates(method) || !(200..400).contains(&status) {
        return Vec::new();
    }
    let mut keys = vec![url_key(host, target)];
    for name in ["location", "content-location"] {
        let Some(v) = response.value(name) else {
            continue;
        };
        let Some(path) = text(&v).and_then(|v| same_host_target(v.trim(), host)) else {
            continue;
        };
        if let Ok(t) = policy.normalizer().normalize_target(path) {
            let k = url_key(host, &t);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
    }
    keys
}

/// The path and query of a URI reference on `host`: a path as is, or an absolute
/// `http(s)://host/…` URI whose host normalizes to `host` (fragment dropped).
fn same_host_target<'a>(uri: &'a str, host: &str) -> Option<&'a str> {
    let uri = uri.split('#').next().unwrap_or("");
    if uri.starts_with('/') && !uri.starts_with("//") {
        return Some(uri);
    }
    let (scheme, rest) = uri.split_once("://")?;
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
        return None;
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.contains('@') {
        return None;
    }
    (normalize_authority(authority, scheme)? == host).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_not_known_to_be_safe_invalidates() {
        // RFC 9111 §4.4 (issue 30): unknown methods too; methods are case-sensitive.
        for m in [
            "POST",
            "PUT",
            "DELETE",
            "PATCH",
            "M-SEARCH",
            "PROPPATCH",
            "get",
            "CONNECT",
        ] {
            assert!(invalidates(m), "{m}");
        }
        for m in ["GET", "HEAD", "OPTIONS", "TRACE"] {
            assert!(!invalidates(m), "{m}");
        }
    }

    #[test]
    fn same_host_locations_only() {
        assert_eq!(same_host_target("/a?b", "x.example"), Some("/a?b"));
        assert_eq!(same_host_target("//evil/a", "x.example"), None);
        assert_eq!(
            same_host_target("https://X.Example./p#f", "x.example"),
            Some("/p")
        );
        assert_eq!(same_host_target("http://x.example", "x.example"), Some("/"));
        assert_eq!(same_host_target("http://y.example/p", "x.example"), None);
        assert_eq!(same_host_target("http://u@x.example/p", "x.example"), None);
        assert_eq!(same_host_target("p", "x.example"), None);
        assert_eq!(
            same_host_target("http://x.example:80/p", "x.example"),
            Some("/p")
        );
        assert_eq!(
            same_host_target("HTTPS://x.example:443/p", "x.example"),
            Some("/p")
        );
        assert_eq!(
            same_host_target("https://x.example:80/p", "x.example"),
            None
        );
        assert_eq!(same_host_target("ftp://x.example/p", "x.example"), None);
    }
}
