//! The admin API contract both adapters serve: routes, bearer auth, purge keys, the shared ban log.
//!
//! `POST /.cachet/ban` (body: a Varnish ban expression) → `201 {"id", "lurker_friendly"}`;
//! `GET /.cachet/bans` → the ban log as JSON; `POST /.cachet/purge` with
//! `Surrogate-Key: k1 k2` (and `Fastly-Soft-Purge: 1` for a soft purge) → one result per
//! key. Every call needs `Authorization: Bearer <token>`: `401` without it, `403` with a
//! wrong one. Everything here is pure: the adapters do the I/O (secret store, KV store or
//! shared data, purges) and map [`AdminError`] to a response in one place.
//!
//! The ban log is what the adapters persist and share between instances (Fastly KV store,
//! Envoy shared data and the fleet feed): bans in time order, each with its canonical
//! expression. An object stored before a ban is checked against it at lookup
//! ([`BanLog::check`]); bans older than the retention are retired and raise a *floor*
//! (`trimmed_at_ms`): objects stored before it count as banned (they could match a
//! retired ban), so retiring never resurrects banned content. One log type for both
//! platforms: [`crate::banlog::BanLog`].

use cachet_ban::BanRequest;

pub use crate::banlog::{AddedBan, BanLog};
use crate::response::{MAX_SURROGATE_HEADER_BYTES, MAX_SURROGATE_KEY_BYTES};

/// Path prefix of the admin API. Requests under it never reach the routes or the origin.
pub const ADMIN_PREFIX: &str = "/.cachet/";

/// Most surrogate keys one `POST /.cachet/purge` accepts (the Fastly API's batch limit).
pub const MAX_PURGE_KEYS: usize = 256;

/// Largest ban request body, bytes ([`cachet_ban::MAX_EXPR_BYTES`]).
pub const MAX_BAN_BODY_BYTES: usize = cachet_ban::MAX_EXPR_BYTES;

/// Longest bearer token accepted in configuration or a request, bytes.
pub const MAX_TOKEN_BYTES: usize = 4096;

/// An admin API call, from [`route`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminCall {
    /// `POST /.cachet/ban`.
    AddBan,
    /// `GET /.cachet/bans` (also `HEAD`).
    ListBans,
    /// `POST /.cachet/purge`.
    Purge,
}

/// Why an admin call is refused. [`AdminError::status`] gives the HTTP status and
/// [`AdminError::body`] the JSON body `{"error": "…"}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// No such admin endpoint (`404`).
    #[error("no admin endpoint {0}")]
    NotFound(String),
    /// Known endpoint, wrong method (`405`, with `Allow`).
    #[error("method not allowed; use {allow}")]
    MethodNotAllowed {
        /// Value for the `Allow` header.
        allow: &'static str,
    },
    /// No usable `Authorization: Bearer …` header (`401`, with `WWW-Authenticate: Bearer`).
    #[error("missing bearer token: send Authorization: Bearer <token>")]
    Unauthorized,
    /// A token was sent but is wrong, or no token is configured (`403`).
    #[error("{0}")]
    Forbidden(&'static str),
    /// Malformed input: a ban expression that does not parse, bad keys (`400`).
    #[error("{0}")]
    BadRequest(String),
    /// Body over the limit (`413`).
    #[error("request body is {len} bytes; at most {limit}")]
    PayloadTooLarge {
        /// Bytes received.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The ban log is full (`429`); retire bans or raise `bans.max_bans`.
    #[error("{live} bans are live, the limit is {limit}; retry once older bans retire")]
    TooManyBans {
        /// Bans in the log.
        live: usize,
        /// `bans.max_bans`.
        limit: usize,
    },
    /// The shared ban store failed or changed under us too often (`503`).
    #[error("ban store unavailable: {0}")]
    Store(String),
}

impl AdminError {
    /// HTTP status for the response.
    pub fn status(&self) -> u16 {
        match self {
            Self::NotFound(_) => 404,
            Self::MethodNotAllowed { .. } => 405,
            Self::Unauthorized => 401,
            Self::Forbidden(_) => 403,
            Self::BadRequest(_) => 400,
            Self::PayloadTooLarge { .. } => 413,
            Self::TooManyBans { .. } => 429,
            Self::Store(_) => 503,
        }
    }

    /// JSON body: `{"error": "<message>"}`.
    pub fn body(&self) -> String {
        serde_json::json!({ "error": self.to_string() }).to_string()
    }
}

/// The admin path a request target names, canonical (`/.cachet/ban`), or `None` when it
/// names none. Look-alikes count: percent-encoded bytes are decoded, runs of `/` collapse
/// and ASCII case folds before the prefix test, so `/.CACHET/ban`, `//.cachet/ban` and
/// `/%2ecachet/ban` are admin calls too, and so is every spelling with dot segments
/// (`/x/../.cachet/ban`, `/%2e%2e/.cachet/ban`, `/static/%2e%2e/.cachet/ban`), resolved
/// after decoding (answered, with their bearer token checked, and
/// never proxied to the origin with a token meant for the admin API: hostile-input rule).
/// The query is ignored. Bytes only; never panics.
pub fn admin_path(target: &str) -> Option<String> {
    let path = target.split_once('?').map_or(target, |(p, _)| p).as_bytes();
    let hex = |b: u8| char::from(b).to_digit(16);
    let mut out: Vec<u8> = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        let mut c = path[i];
        i += 1;
        if c == b'%'
            && let (Some(h), Some(l)) = (
                path.get(i).copied().and_then(hex),
                path.get(i + 1).copied().and_then(hex),
            )
        {
            c = u8::try_from(h * 16 + l).unwrap_or(b'%');
            i += 2;
        }
        if c == b'/' && out.last() == Some(&b'/') {
            continue;
        }
        out.push(c.to_ascii_lowercase());
    }
    // Dot segments resolve last (RFC 3986 §5.2.4, as keying and forwarding resolve them):
    // `/x/../.cachet/ban`, `/%2e%2e/.cachet/ban` and `/x/..%2f.cachet/ban` are admin calls,
    // never forwarded with the token (issue 27 item 5).
    let out = String::from_utf8_lossy(&out);
    let out = cachet_query::normalize_path(&out);
    let prefix = ADMIN_PREFIX;
    let named = out.starts_with(prefix) || out == prefix[..prefix.len() - 1];
    named.then(|| out.into_owned())
}

/// Admits an admin call, in the one order both platforms use: the API enabled
/// (`[admin].enabled`, else `404`), then routing (unknown path `404`, wrong method `405`
/// with `Allow`), then the bearer token ([`authorize`]: `401`, `403`). Routing before the
/// token means an unknown admin path is `404` with or without credentials.
///
/// # Errors
/// [`AdminError::NotFound`], [`AdminError::MethodNotAllowed`], [`AdminError::Unauthorized`],
/// [`AdminError::Forbidden`].
pub fn admit(
    enabled: bool,
    method: &str,
    path: &str,
    authorization: Option<&[u8]>,
    token: Option<&[u8]>,
) -> Result<AdminCall, AdminError> {
    if !enabled {
        return Err(AdminError::NotFound("admin API disabled".into()));
    }
    let call = route(method, path)?;
    authorize(authorization, token)?;
    Ok(call)
}

/// Maps an admin request to its call.
///
/// # Errors
/// [`AdminError::NotFound`] for unknown paths; [`AdminError::MethodNotAllowed`] for a
/// known path with another method.
pub fn route(method: &str, path: &str) -> Result<AdminCall, AdminError> {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let (call, allow, ok) = match path.strip_prefix(ADMIN_PREFIX) {
        Some("ban") => (AdminCall::AddBan, "POST", method == "POST"),
        Some("bans") => (
            AdminCall::ListBans,
            "GET, HEAD",
            matches!(method, "GET" | "HEAD"),
        ),
        Some("purge") => (AdminCall::Purge, "POST", method == "POST"),
        _ => return Err(AdminError::NotFound(path.chars().take(200).collect())),
    };
    if ok {
        Ok(call)
    } else {
        Err(AdminError::MethodNotAllowed { allow })
    }
}

/// Checks `Authorization: Bearer <token>` against the configured token, in time that does
/// not depend on where the two differ ([`constant_time_eq`]).
///
/// # Errors
/// [`AdminError::Forbidden`] when no token is configured (fail closed) or the token is
/// wrong; [`AdminError::Unauthorized`] when the header is missing or not a bearer token.
pub fn authorize(
    authorization: Option<&[u8]>,
    configured: Option<&[u8]>,
) -> Result<(), AdminError> {
    let Some(expected) = configured.filter(|t| !t.is_empty()) else {
        return Err(AdminError::Forbidden(
            "admin API disabled: no admin token is configured",
        ));
    };
    let Some(header) = authorization else {
        return Err(AdminError::Unauthorized);
    };
    let header = header.trim_ascii();
    let Some(scheme) = header.get(..7) else {
        return Err(AdminError::Unauthorized);
    };
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return Err(AdminError::Unauthorized);
    }
    let sent = header[7..].trim_ascii();
    if sent.is_empty() {
        return Err(AdminError::Unauthorized);
    }
    if constant_time_eq(sent, expected) {
        Ok(())
    } else {
        Err(AdminError::Forbidden("wrong admin token"))
    }
}

/// Compares a sent token with the configured one in time that does not depend on where
/// they differ (`subtle::ConstantTimeEq`); only a difference in length, which the token
/// does not hide, returns sooner. A sent token over [`MAX_TOKEN_BYTES`] is refused
/// without comparing.
pub fn constant_time_eq(sent: &[u8], expected: &[u8]) -> bool {
    use subtle::ConstantTimeEq as _;
    sent.len() <= MAX_TOKEN_BYTES && bool::from(sent.ct_eq(expected))
}

/// The keys of a purge request's `Surrogate-Key` header (space-separated).
///
/// # Errors
/// [`AdminError::BadRequest`] when the header is missing or empty, longer than 16,384
/// bytes, holds a key over 1,024 bytes (Fastly's limits), a control byte, or more than
/// [`MAX_PURGE_KEYS`] keys.
pub fn purge_keys(header: Option<&str>) -> Result<Vec<&str>, AdminError> {
    let header = header.unwrap_or("");
    if header.len() > MAX_SURROGATE_HEADER_BYTES {
        return Err(AdminError::BadRequest(format!(
            "Surrogate-Key is {} bytes; at most {MAX_SURROGATE_HEADER_BYTES}",
            header.len()
        )));
    }
    let keys: Vec<&str> = header.split_ascii_whitespace().collect();
    if keys.is_empty() {
        return Err(AdminError::BadRequest(
            "send the keys to purge in a Surrogate-Key header, space-separated".into(),
        ));
    }
    if keys.len() > MAX_PURGE_KEYS {
        return Err(AdminError::BadRequest(format!(
            "{} keys; at most {MAX_PURGE_KEYS} per call",
            keys.len()
        )));
    }
    for k in &keys {
        if k.len() > MAX_SURROGATE_KEY_BYTES {
            return Err(AdminError::BadRequest(format!(
                "a key is {} bytes; at most {MAX_SURROGATE_KEY_BYTES}",
                k.len()
            )));
        }
        if k.bytes().any(|b| b.is_ascii_control()) {
            return Err(AdminError::BadRequest(
                "keys must not hold control bytes".into(),
            ));
        }
    }
    Ok(keys)
}

/// Whether a purge request asks for a soft purge (`Fastly-Soft-Purge: 1`, Fastly's API).
pub fn is_soft_purge(header: Option<&str>) -> bool {
    header.is_some_and(|v| v.trim() == "1")
}

/// The ban expression in a `POST /.cachet/ban` body: UTF-8 text, trimmed.
///
/// # Errors
/// [`AdminError::PayloadTooLarge`] over [`MAX_BAN_BODY_BYTES`]; [`AdminError::BadRequest`]
/// for non-UTF-8 or empty bodies.
pub fn ban_body(body: &[u8]) -> Result<&str, AdminError> {
    if body.len() > MAX_BAN_BODY_BYTES {
        return Err(AdminError::PayloadTooLarge {
            len: body.len(),
            limit: MAX_BAN_BODY_BYTES,
        });
    }
    let text = std::str::from_utf8(body)
        .map_err(|e| AdminError::BadRequest(format!("ban expression is not UTF-8: {e}")))?
        .trim();
    if text.is_empty() {
        return Err(AdminError::BadRequest(
            "empty body: send a ban expression such as obj.http.x-url ~ ^/blog/".into(),
        ));
    }
    Ok(text)
}

/// Response body of `POST /.cachet/ban`.
pub fn added_body(added: &AddedBan) -> String {
    serde_json::json!({
        "id": added.id,
        "lurker_friendly": added.lurker_friendly,
        "expr": added.expr,
        "replaced": added.replaced,
    })
    .to_string()
}

/// Response body of `GET /.cachet/bans`, the same on every platform:
/// `{"generation", "trimmed_at_ms", "bans": [{"id", "at_ms", "kind", "expr", "key"?,
/// "lurker_friendly"}]}` (live entries, oldest first; objects stored before
/// `trimmed_at_ms` count as banned).
pub fn list_body(log: &BanLog) -> String {
    serde_json::json!({
        "generation": log.generation,
        "trimmed_at_ms": log.trimmed_at_ms,
        "bans": log.entries,
    })
    .to_string()
}

/// Path of the configuration status call: `GET /.cachet/config` (also `HEAD`) answers
/// which configuration is in force and why the operator's was rejected
/// (`crate::inforce::ConfigStatus::body`, issue 27 item 13).
pub const CONFIG_PATH: &str = "/.cachet/config";

/// Admits `GET /.cachet/config` as [`admit`] admits the other calls, in the same order
/// (the API enabled, the method, then the bearer token); `None` when `path` is another
/// admin path (admit it with [`admit`]). Both adapters ask this first, then answer with
/// `crate::inforce::ConfigStatus::body`.
///
/// # Errors
/// Inside the `Some`: [`AdminError::NotFound`] when the API is disabled,
/// [`AdminError::MethodNotAllowed`] (`Allow: GET, HEAD`), [`AdminError::Unauthorized`],
/// [`AdminError::Forbidden`].
pub fn config_call(
    enabled: bool,
    method: &str,
    path: &str,
    authorization: Option<&[u8]>,
    token: Option<&[u8]>,
) -> Option<Result<(), AdminError>> {
    if path.split_once('?').map_or(path, |(p, _)| p) != CONFIG_PATH {
        return None;
    }
    Some(if !enabled {
        Err(AdminError::NotFound("admin API disabled".into()))
    } else if !matches!(method, "GET" | "HEAD") {
        Err(AdminError::MethodNotAllowed { allow: "GET, HEAD" })
    } else {
        authorize(authorization, token)
    })
}

/// The lookup request as a ban request (Varnish `req.*`): `url` is the normalized target
/// the cache key was built from; headers are read through `header`.
pub struct LookupRequest<'a, F: Fn(&str) -> Option<&'a str>> {
    /// `req.url`.
    pub url: &'a str,
    /// `req.http.<name>`.
    pub header: F,
}

impl<'a, F: Fn(&str) -> Option<&'a str>> BanRequest for LookupRequest<'a, F> {
    fn url(&self) -> &str {
        self.url
    }

    fn header(&self, name: &str) -> Option<&str> {
        (self.header)(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_look_alikes_are_admin_paths() {
        for p in [
            "/.cachet/ban",
            "/.CACHET/ban",
            "//.cachet/ban",
            "/%2ecachet/ban",
            "/%2Ecachet%2Fban?x=1",
            "/.cachet",
            "///.Cachet//purge",
            "/x/../.cachet/ban",
            "/%2e%2e/.cachet/ban",
            "/./.cachet/ban",
            "/static/%2e%2e/.cachet/ban",
            "/x/%2E%2E/.cachet/bans",
            "/x/..%2f.cachet/ban",
            "/x//../.cachet/ban",
            "/.cachet/x/..",
        ] {
            let got = admin_path(p);
            assert!(
                got.as_deref().is_some_and(|g| g.starts_with("/.cachet")),
                "{p} -> {got:?}"
            );
        }
        for p in [
            "/%2ecachet/ban",
            "/x/../.cachet/ban",
            "/static/%2e%2e/.cachet/ban",
        ] {
            assert_eq!(admin_path(p).as_deref(), Some("/.cachet/ban"), "{p}");
        }
        for p in [
            "/blog/.cachet/ban",
            "/.cachetx/ban",
            "/",
            "",
            "/%zz/.cachet/",
            "/%",
            "/.cachet/../blog/x",
            "/x/.%2e.cachet/ban",
        ] {
            assert_eq!(admin_path(p), None, "{p}");
        }
        assert_eq!(
            admin_path("/.cachet/%ff").as_deref(),
            Some("/.cachet/\u{fffd}")
        );
    }

    #[test]
    fn routes_and_methods() {
        assert_eq!(route("POST", "/.cachet/ban"), Ok(AdminCall::AddBan));
        assert_eq!(route("GET", "/.cachet/bans?x=1"), Ok(AdminCall::ListBans));
        assert_eq!(route("POST", "/.cachet/purge"), Ok(AdminCall::Purge));
        assert_eq!(route("GET", "/.cachet/ban").unwrap_err().status(), 405);
        assert_eq!(route("GET", "/.cachet/nope").unwrap_err().status(), 404);
    }

    #[test]
    fn admission_checks_enabled_then_route_then_token() {
        let t = Some(&b"s3cret"[..]);
        let ok = Some(&b"Bearer s3cret"[..]);
        assert_eq!(
            admit(true, "POST", "/.cachet/ban", ok, t),
            Ok(AdminCall::AddBan)
        );
        // Disabled: 404 even with the right token.
        assert!(matches!(
            admit(false, "POST", "/.cachet/ban", ok, t),
            Err(AdminError::NotFound(_))
        ));
        // Routing before the token: an unknown path or method is refused as such without one.
        assert!(matches!(
            admit(true, "POST", "/.cachet/nope", None, t),
            Err(AdminError::NotFound(_))
        ));
        assert_eq!(
            admit(true, "GET", "/.cachet/ban", None, t),
            Err(AdminError::MethodNotAllowed { allow: "POST" })
        );
        assert_eq!(
            admit(true, "GET", "/.cachet/bans", None, t),
            Err(AdminError::Unauthorized)
        );
        assert!(matches!(
            admit(true, "GET", "/.cachet/bans", Some(&b"Bearer nope"[..]), t),
            Err(AdminError::Forbidden(_))
        ));
    }

    #[test]
    fn bearer_tokens() {
        let t = Some(&b"s3cret"[..]);
        assert_eq!(authorize(Some(b"Bearer s3cret"), t), Ok(()));
        assert_eq!(authorize(Some(b"bearer   s3cret "), t), Ok(()));
        assert_eq!(authorize(None, t), Err(AdminError::Unauthorized));
        assert_eq!(
            authorize(Some(b"Basic abc"), t),
            Err(AdminError::Unauthorized)
        );
        assert_eq!(
            authorize(Some(b"Bearer "), t),
            Err(AdminError::Unauthorized)
        );
        assert_eq!(
            authorize(Some(b"Bearer s3cre"), t).unwrap_err().status(),
            403
        );
        assert_eq!(
            authorize(Some(b"Bearer s3cretX"), t).unwrap_err().status(),
            403
        );
        assert_eq!(
            authorize(Some(b"Bearer x"), None).unwrap_err().status(),
            403
        );
        assert_eq!(
            authorize(Some(b"Bearer x"), Some(b""))
                .unwrap_err()
                .status(),
            403
        );
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"", b"a"));
    }

    #[test]
    fn purge_key_limits() {
        assert_eq!(purge_keys(Some(" a  b\tc ")).unwrap(), vec!["a", "b", "c"]);
        assert_eq!(purge_keys(None).unwrap_err().status(), 400);
        assert_eq!(purge_keys(Some("   ")).unwrap_err().status(), 400);
        let many = (0..257)
            .map(|i| format!("k{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(purge_keys(Some(&many)).unwrap_err().status(), 400);
        assert_eq!(
            purge_keys(Some(&"x".repeat(1025))).unwrap_err().status(),
            400
        );
        assert!(purge_keys(Some(&"x".repeat(1024))).is_ok());
        assert!(is_soft_purge(Some("1")) && !is_soft_purge(Some("0")) && !is_soft_purge(None));
    }

    #[test]
    fn ban_bodies() {
        assert_eq!(ban_body(b"  req.url ~ ^/a \n"), Ok("req.url ~ ^/a"));
        assert_eq!(ban_body(b"").unwrap_err().status(), 400);
        assert_eq!(ban_body(&[0xff, 0xfe]).unwrap_err().status(), 400);
        assert_eq!(
            ban_body(&vec![b'a'; MAX_BAN_BODY_BYTES + 1])
                .unwrap_err()
                .status(),
            413
        );
    }
}
