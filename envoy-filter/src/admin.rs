//! The admin API (`/.cachet/ban`, `/.cachet/bans`, `/.cachet/purge`), the same contract as the edge app.
//!
//! Every call needs `Authorization: Bearer <admin.token>` (constant-time comparison; 401
//! without, 403 wrong or when no token is configured; the token is never logged).
//! `POST /.cachet/ban` (body: a Varnish ban expression) → `201 {"id","lurker_friendly"}`,
//! `400 {"error"}` for a bad expression, `429` over `bans.max_bans`; `GET /.cachet/bans` →
//! the live log as a JSON list; `POST /.cachet/purge` with `Surrogate-Key: k1 k2` and
//! optional `Fastly-Soft-Purge: 1` → a JSON object per key.

use cachet_policy::Policy;
use serde_json::json;

use crate::bans::{self, AppendError, Kind, NewEntry};
use crate::metrics::Metrics;

/// Path prefix of the admin API.
pub const PREFIX: &str = "/.cachet/";

/// Largest admin request body read, bytes (a ban expression is at most 8 KiB).
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// An admin answer: status and JSON body.
#[derive(Debug)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// JSON text.
    pub body: String,
    /// Extra header (`WWW-Authenticate` on 401).
    pub challenge: bool,
}

fn answer(status: u16, v: &serde_json::Value) -> Answer {
    Answer {
        status,
        body: v.to_string(),
        challenge: false,
    }
}

/// Byte-wise comparison whose time does not depend on where the inputs differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().max(b.len());
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..n {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0xff);
    }
    diff == 0
}

/// One admin request.
#[derive(Debug, Default)]
pub struct AdminRequest {
    /// Method.
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// `Authorization`.
    pub authorization: Option<String>,
    /// `Surrogate-Key`.
    pub surrogate_key: Option<String>,
    /// `Fastly-Soft-Purge: 1`.
    pub soft: bool,
}

impl AdminRequest {
    /// Whether the call reads a request body (`POST /.cachet/ban`: the ban expression).
    pub fn reads_body(&self) -> bool {
        self.method == "POST" && self.path == "/.cachet/ban"
    }
}

/// Handles one admin call at `now_ms`.
pub fn handle(
    policy: &Policy,
    m: &Metrics,
    req: &AdminRequest,
    body: &[u8],
    now_ms: u64,
) -> Answer {
    let cfg = policy.config();
    if !cfg.admin.enabled {
        return answer(404, &json!({"error": "admin API disabled"}));
    }
    let Some(auth) = req.authorization.as_deref() else {
        Metrics::inc(m.admin_denied);
        let mut a = answer(401, &json!({"error": "missing bearer token"}));
        a.challenge = true;
        return a;
    };
    let token = auth
        .trim()
        .split_once(' ')
        .filter(|(s, _)| s.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim());
    let Some(token) = token else {
        Metrics::inc(m.admin_denied);
        let mut a = answer(
            401,
            &json!({"error": "expected Authorization: Bearer <token>"}),
        );
        a.challenge = true;
        return a;
    };
    let want = cfg.admin.token.as_bytes();
    if want.is_empty() || !constant_time_eq(token.as_bytes(), want) {
        Metrics::inc(m.admin_denied);
        return answer(403, &json!({"error": "wrong token"}));
    }
    let max = cfg.bans.max_bans;
    match (req.method.as_str(), req.path.as_str()) {
        ("POST", "/.cachet/ban") => ban(m, body, max, now_ms),
        ("GET", "/.cachet/bans") => {
            let (log, _) = bans::BanLog::read();
            answer(200, &serde_json::to_value(&log.entries).unwrap_or_default())
        }
        ("POST", "/.cachet/purge") => purge(m, req, max, now_ms),
        (_, "/.cachet/ban" | "/.cachet/purge" | "/.cachet/bans") => {
            answer(405, &json!({"error": "method not allowed"}))
        }
        _ => answer(404, &json!({"error": "no such admin endpoint"})),
    }
}

fn ban(m: &Metrics, body: &[u8], max: usize, now_ms: u64) -> Answer {
    let Ok(text) = std::str::from_utf8(body) else {
        return answer(400, &json!({"error": "ban expression is not UTF-8"}));
    };
    let (expr, lurker_friendly) = match bans::parse_ban(text) {
        Ok(v) => v,
        Err(e) => return answer(400, &json!({"error": e})),
    };
    let new = NewEntry {
        kind: Kind::Ban,
        expr,
        key: None,
        lurker_friendly,
        at_ms: None,
    };
    match bans::append(&[new], max, now_ms, None) {
        Ok(added) => {
            Metrics::inc(m.bans_added);
            let id = added.first().map_or(0, |e| e.id);
            answer(201, &json!({"id": id, "lurker_friendly": lurker_friendly}))
        }
        Err(e) => append_error(e),
    }
}

fn append_error(e: AppendError) -> Answer {
    match e {
        AppendError::TooMany => answer(
            429,
            &json!({"error": "too many live bans (bans.max_bans); retry when the lurker has retired some"}),
        ),
        AppendError::Conflict => answer(503, &json!({"error": "ban log busy, retry"})),
    }
}

fn purge(m: &Metrics, req: &AdminRequest, max: usize, now_ms: u64) -> Answer {
    let keys: Vec<&str> = req
        .surrogate_key
        .as_deref()
        .unwrap_or("")
        .split_ascii_whitespace()
        .collect();
    if keys.is_empty() {
        return answer(
            400,
            &json!({"error": "Surrogate-Key header with at least one key required"}),
        );
    }
    let mut out = serde_json::Map::new();
    let mut new = Vec::new();
    let mut names = Vec::new();
    for k in keys {
        if req.soft {
            if k.len() > cachet_ban::MAX_SURROGATE_KEY_BYTES {
                out.insert(k.to_owned(), json!({"error": "key too long"}));
                continue;
            }
            new.push(NewEntry {
                kind: Kind::SoftPurge,
                expr: String::new(),
                key: Some(k.to_owned()),
                lurker_friendly: false,
                at_ms: None,
            });
            names.push(k);
        } else {
            match bans::purge_expr(k) {
                Ok(expr) => {
                    new.push(NewEntry {
                        kind: Kind::Purge,
                        expr,
                        key: Some(k.to_owned()),
                        lurker_friendly: true,
                        at_ms: None,
                    });
                    names.push(k);
                }
                Err(e) => {
                    out.insert(k.to_owned(), json!({"error": e}));
                }
            }
        }
    }
    if !new.is_empty() {
        match bans::append(&new, max, now_ms, None) {
            Ok(added) => {
                Metrics::add(m.purges, added.len() as u64);
                for (k, e) in names.iter().zip(added) {
                    out.insert(
                        (*k).to_owned(),
                        json!({"status": "ok", "id": e.id, "soft": req.soft}),
                    );
                }
            }
            Err(e) => return append_error(e),
        }
    }
    answer(200, &serde_json::Value::Object(out))
}
