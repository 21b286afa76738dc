//! Answers Cachet makes itself: synthetic responses, error responses and admin errors, one
//! mapping for both adapters (status, the exact header set, body).

use cachet_policy::Synth;
use cachet_policy::admin::AdminError;

use crate::status::CacheStatus;

/// A complete answer made by Cachet: what an adapter writes to the wire as is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Every header field, in order.
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Reply {
    /// The value of `name` in [`Reply::headers`].
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn text(status: u16, cache: CacheStatus, body: String) -> Self {
        Self {
            status,
            headers: vec![
                ("content-type", "text/plain; charset=utf-8".into()),
                ("cache-control", "no-store".into()),
                ("x-cache", cache.as_str().into()),
                ("age", "0".into()),
            ],
            body: body.into_bytes(),
        }
    }
}

/// The answer to a [`Synth`] decision: robots.txt (`200`) or a refused request (`400`
/// with its reason), `text/plain`, never stored (`Cache-Control: no-store`), `X-Cache:
/// SYNTH`.
pub fn synth(s: &Synth) -> Reply {
    match s {
        Synth::Robots { body } => Reply::text(200, CacheStatus::Synth, body.clone()),
        Synth::BadRequest { reason } => Reply::text(400, CacheStatus::Synth, format!("{reason}\n")),
        _ => Reply::text(500, CacheStatus::Error, "unknown synthetic answer\n".into()),
    }
}

/// Why Cachet could not answer a request, as far as the client is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// The configuration does not load (`500`).
    Config,
    /// The origin failed and nothing may be served in its place (`503` with
    /// `Retry-After`, RFC 9110 §15.6.4).
    Origin {
        /// `Retry-After`, whole seconds.
        retry_after_secs: u64,
    },
    /// The platform's cache or a stored body failed (`503` with `Retry-After`).
    Cache {
        /// `Retry-After`, whole seconds.
        retry_after_secs: u64,
    },
    /// `Cache-Control: only-if-cached` and nothing servable is stored (`504`, RFC 9111
    /// §5.2.1.7).
    NotCached,
}

/// The answer to a [`Failure`]: a short reason as `text/plain`, `Cache-Control: no-store`,
/// `X-Cache: ERROR`, `Retry-After` for the 503s. Internal details never reach the client
/// (the adapter logs them).
pub fn failure(f: Failure) -> Reply {
    let (status, reason, retry) = match f {
        Failure::Config => (500, "edge configuration invalid", None),
        Failure::Origin { retry_after_secs } => (503, "origin unavailable", Some(retry_after_secs)),
        Failure::Cache { retry_after_secs } => (503, "edge cache error", Some(retry_after_secs)),
        Failure::NotCached => (504, "not in cache (only-if-cached)", None),
    };
    let mut r = Reply::text(status, CacheStatus::Error, format!("{reason}\n"));
    if let Some(s) = retry {
        r.headers.push(("retry-after", s.to_string()));
    }
    r
}

/// `Retry-After` of an admin call refused because the ban store is busy, seconds.
pub const ADMIN_RETRY_AFTER_SECS: u64 = 5;

/// The answer to a refused admin call: its status (`AdminError::status`), its JSON body,
/// `WWW-Authenticate: Bearer` on `401` (RFC 6750 §3), `Allow` on `405` (RFC 9110
/// §15.5.6), `Retry-After` when the ban store is busy; never stored, `X-Cache: SYNTH`.
pub fn admin_error(e: &AdminError) -> Reply {
    let mut r = admin(e.status(), e.body());
    let headers = &mut r.headers;
    match e {
        AdminError::Unauthorized => headers.push(("www-authenticate", "Bearer".into())),
        AdminError::MethodNotAllowed { allow } => headers.push(("allow", (*allow).into())),
        AdminError::Store(_) => {
            headers.push(("retry-after", ADMIN_RETRY_AFTER_SECS.to_string()));
        }
        _ => {}
    }
    r
}

/// A successful admin answer (`cachet_policy::admin`'s bodies): `status`, JSON `body`,
/// never stored (`Cache-Control: no-store`), `X-Cache: SYNTH`. Errors use
/// [`admin_error`], which shares these headers.
pub fn admin(status: u16, body: String) -> Reply {
    Reply {
        status,
        headers: vec![
            ("content-type", "application/json".into()),
            ("cache-control", "no-store".into()),
            ("x-cache", CacheStatus::Synth.as_str().into()),
            ("age", "0".into()),
        ],
        body: body.into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_and_error_answers() {
        let r = synth(&Synth::BadRequest {
            reason: "missing or malformed Host header",
        });
        assert_eq!((r.status, r.header("x-cache")), (400, Some("SYNTH")));
        assert_eq!(r.body, b"missing or malformed Host header\n");
        let r = synth(&Synth::Robots {
            body: "User-agent: *\n".into(),
        });
        assert_eq!(
            (r.status, r.header("cache-control")),
            (200, Some("no-store"))
        );
        let r = failure(Failure::Origin {
            retry_after_secs: 5,
        });
        assert_eq!((r.status, r.header("retry-after")), (503, Some("5")));
        assert_eq!(r.header("x-cache"), Some("ERROR"));
        assert_eq!(failure(Failure::Config).header("retry-after"), None);
        assert_eq!(failure(Failure::NotCached).status, 504);
        let r = admin_error(&AdminError::MethodNotAllowed { allow: "POST" });
        assert_eq!((r.status, r.header("allow")), (405, Some("POST")));
        let r = admin_error(&AdminError::Unauthorized);
        assert_eq!(
            (r.status, r.header("www-authenticate")),
            (401, Some("Bearer"))
        );
        assert_eq!(
            admin_error(&AdminError::Store("busy".into())).header("retry-after"),
            Some("5")
        );
    }
}
