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
//! ([`BanLog::check`]); bans older than the retention are retired and raise a *floor*:
//! objects stored before the floor count as banned (they could match a retired ban), so
//! retiring never resurrects banned content.

use std::time::Duration;

use cachet_ban::{BanExpr, BanList, BanRequest};
use serde::{Deserialize, Serialize};

use crate::object::Meta;
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
/// not depend on where the two differ (nor on the sent token's length beyond
/// [`MAX_TOKEN_BYTES`]).
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

/// Compares two byte strings reading every byte of both (up to [`MAX_TOKEN_BYTES`]) with
/// no early exit, so the time taken does not reveal the position of the first difference.
pub fn constant_time_eq(sent: &[u8], expected: &[u8]) -> bool {
    let len = sent.len().max(expected.len()).min(MAX_TOKEN_BYTES);
    let mut diff = u8::from(sent.len() != expected.len() || sent.len() > MAX_TOKEN_BYTES);
    for i in 0..len {
        let left = sent.get(i).copied().unwrap_or(0);
        let right = expected.get(i).copied().unwrap_or(0);
        diff |= left ^ right;
    }
    std::hint::black_box(diff) == 0
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

/// One ban in the shared log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BanRecord {
    /// Identifier, increasing with time (unique within the log).
    pub id: u64,
    /// When the ban was added, ms since the epoch.
    pub at_ms: u64,
    /// The canonical expression (`BanExpr`'s `Display`).
    pub expr: String,
    /// Only `obj.*` fields: the Envoy lurker can apply it in the background.
    pub lurker_friendly: bool,
}

/// The ban log persisted in the shared store (JSON). Bans are in `at_ms` order.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BanLog {
    /// Objects stored before this instant (ms since the epoch) count as banned: a retired
    /// ban could have matched them.
    pub floor_ms: u64,
    /// Next ban id.
    pub next_id: u64,
    /// Live bans, oldest first.
    pub bans: Vec<BanRecord>,
}

/// What [`BanLog::add`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AddedBan {
    /// The new ban's id.
    pub id: u64,
    /// Whether it only reads `obj.*` fields.
    pub lurker_friendly: bool,
    /// The canonical expression stored.
    pub expr: String,
    /// Id of an identical older ban it replaced (Varnish marks that one completed).
    pub replaced: Option<u64>,
}

impl BanLog {
    /// Reads a stored log; an absent store value is an empty log.
    ///
    /// # Errors
    /// [`AdminError::Store`] when the bytes are not a ban log (the adapter logs it and
    /// keeps serving: see the adapters' docs).
    pub fn from_json(bytes: &[u8]) -> Result<Self, AdminError> {
        if bytes.is_empty() {
            return Ok(Self::default());
        }
        let mut log: Self = serde_json::from_slice(bytes)
            .map_err(|e| AdminError::Store(format!("ban log unreadable: {e}")))?;
        log.bans.sort_by_key(|b| (b.at_ms, b.id));
        Ok(log)
    }

    /// The stored form.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Adds a ban at `now_ms`. An identical, not time-relative live ban is replaced (the
    /// newer ban covers every object the older one did: Varnish's duplicate-ban rule).
    ///
    /// # Errors
    /// [`AdminError::BadRequest`] with the parser's column and reason;
    /// [`AdminError::TooManyBans`] when `max_bans` are live.
    pub fn add(
        &mut self,
        expr: &str,
        now_ms: u64,
        max_bans: usize,
    ) -> Result<AddedBan, AdminError> {
        let parsed = BanExpr::parse(expr).map_err(|e| AdminError::BadRequest(e.to_string()))?;
        let canonical = parsed.to_string();
        let replaced = if parsed.is_time_relative() {
            None
        } else {
            self.bans
                .iter()
                .position(|b| b.expr == canonical)
                .map(|i| self.bans.remove(i).id)
        };
        if self.bans.len() >= max_bans {
            return Err(AdminError::TooManyBans {
                live: self.bans.len(),
                limit: max_bans,
            });
        }
        let at_ms = self.bans.last().map_or(now_ms, |b| b.at_ms.max(now_ms));
        let id = self.next_id.max(1);
        self.next_id = id + 1;
        let lurker_friendly = parsed.is_lurker_friendly();
        self.bans.push(BanRecord {
            id,
            at_ms,
            expr: canonical.clone(),
            lurker_friendly,
        });
        Ok(AddedBan {
            id,
            lurker_friendly,
            expr: canonical,
            replaced,
        })
    }

    /// Retires bans added before `now_ms - retention`, raising the floor to the newest
    /// retired ban's time. Returns how many were retired.
    pub fn retire(&mut self, now_ms: u64, retention: Duration) -> usize {
        let cutoff =
            now_ms.saturating_sub(u64::try_from(retention.as_millis()).unwrap_or(u64::MAX));
        let keep_from = self.bans.partition_point(|b| b.at_ms < cutoff);
        if keep_from > 0 {
            self.floor_ms = self.floor_ms.max(self.bans[keep_from - 1].at_ms);
        }
        self.bans.drain(..keep_from).count()
    }

    /// The bans an object stored at `stored_at_ms` must be checked against (added after it),
    /// compiled into a [`BanList`]. Records that no longer parse are skipped (they were
    /// validated when added).
    pub fn newer_than(&self, stored_at_ms: u64) -> BanList {
        let from = self.bans.partition_point(|b| b.at_ms <= stored_at_ms);
        let mut list = BanList::new();
        for b in &self.bans[from..] {
            #[allow(
                clippy::cast_precision_loss,
                reason = "ms since the epoch stay below 2^53"
            )]
            let at_s = b.at_ms as f64 / 1000.0;
            let _ = list.add(&b.expr, at_s);
        }
        list
    }

    /// Whether `obj` is banned for a lookup by `req`: it was stored before the floor, or a
    /// newer ban matches it. Returns the id of the matching ban (0 for the floor).
    pub fn check(&self, obj: &Meta, req: &impl BanRequest) -> Option<u64> {
        let stored = obj.times.stored_at.as_millis();
        if stored < self.floor_ms {
            return Some(0);
        }
        if self.bans.last().is_none_or(|b| b.at_ms <= stored) {
            return None;
        }
        let newer: Vec<&BanRecord> = self.bans.iter().filter(|b| b.at_ms > stored).collect();
        let list = self.newer_than(stored);
        match list.check(&obj.ban_view(), req, cachet_ban::BanId::ZERO) {
            cachet_ban::Verdict::Banned { by } => {
                // Map the list's own id back to the log's: the list holds exactly `newer`,
                // in order, minus any the list deduplicated.
                let idx = list
                    .iter()
                    .position(|(id, ..)| id == by)
                    .unwrap_or_default();
                Some(newer.get(idx).map_or(0, |b| b.id))
            }
            cachet_ban::Verdict::Kept { .. } => None,
        }
    }

    /// Whether any live ban reads `req.*` (cannot be applied by a lurker).
    pub fn has_request_bans(&self) -> bool {
        self.bans.iter().any(|b| !b.lurker_friendly)
    }
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

/// Response body of `GET /.cachet/bans`: `{"floor_ms", "bans": [{"id", "at_ms", "expr",
/// "lurker_friendly"}]}`.
pub fn list_body(log: &BanLog) -> String {
    serde_json::to_string(log).unwrap_or_default()
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
    use cachet_refresh::Timestamp;

    fn meta(url: &str, stored_ms: u64) -> Meta {
        let mut m = Meta::marker(
            "r",
            Timestamp::from_millis(stored_ms),
            Duration::from_secs(60),
        );
        m.pass = false;
        m.status = 200;
        m.url = url.into();
        m
    }

    fn req(url: &str) -> cachet_ban::Request {
        cachet_ban::Request::new(url)
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

    #[test]
    fn log_adds_checks_dedupes_and_retires() {
        let mut log = BanLog::default();
        let a = log
            .add("obj.http.x-url ~ ^/blog/alice/", 1_000, 10)
            .unwrap();
        assert!(a.lurker_friendly && a.replaced.is_none());
        let b = log.add("req.url == /x", 2_000, 10).unwrap();
        assert!(!b.lurker_friendly);
        assert!(log.has_request_bans());
        assert_eq!(log.add("req.url ==", 2_000, 10).unwrap_err().status(), 400);
        // Stored before the first ban: banned by it; after both: kept.
        assert_eq!(
            log.check(&meta("/blog/alice/1", 500), &req("/blog/alice/1")),
            Some(a.id)
        );
        assert_eq!(
            log.check(&meta("/blog/alice/1", 1_500), &req("/blog/alice/1")),
            None
        );
        assert_eq!(log.check(&meta("/x", 1_500), &req("/x")), Some(b.id));
        assert_eq!(log.check(&meta("/x", 2_500), &req("/x")), None);
        // Identical ban replaces the older one.
        let c = log
            .add("obj.http.x-url ~ ^/blog/alice/", 3_000, 10)
            .unwrap();
        assert_eq!(c.replaced, Some(a.id));
        assert_eq!(log.bans.len(), 2);
        // Round trip through the store.
        let back = BanLog::from_json(&log.to_json()).unwrap();
        assert_eq!(back, log);
        assert!(BanLog::from_json(b"").unwrap().bans.is_empty());
        assert_eq!(BanLog::from_json(b"{nope").unwrap_err().status(), 503);
        // Retire everything before 2.5 s: the floor bans what was stored before it.
        assert_eq!(log.retire(12_500, Duration::from_secs(10)), 1);
        assert_eq!(log.floor_ms, 2_000);
        assert_eq!(log.check(&meta("/y", 1_999), &req("/y")), Some(0));
        assert_eq!(log.check(&meta("/y", 2_001), &req("/y")), None);
    }

    #[test]
    fn log_is_bounded() {
        let mut log = BanLog::default();
        log.add("req.url == /1", 1, 2).unwrap();
        log.add("req.url == /2", 2, 2).unwrap();
        assert_eq!(log.add("req.url == /3", 3, 2).unwrap_err().status(), 429);
        // A duplicate replaces rather than grows.
        assert!(log.add("req.url == /2", 4, 2).is_ok());
    }
}
