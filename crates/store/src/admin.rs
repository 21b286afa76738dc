//! The admin API (`/.cachet/ban`, `/.cachet/bans`, `/.cachet/purge`) over the shared ban
//! log ([`crate::bans`]): the Envoy filter's, with the edge app's contract.
//!
//! Routing, authorization, limits and refusals are `cachet_policy::admin`'s and
//! `cachet_http::reply`'s, shared with the edge app: unknown path `404`, wrong method `405`
//! with `Allow`, then `Authorization: Bearer <admin.token>` (constant-time comparison; 401
//! without, 403 wrong or when no token is configured; the token is never logged).
//! `POST /.cachet/ban` (body: a Varnish ban expression) → `201 {"id","lurker_friendly"}`,
//! `400 {"error"}` for a bad expression, `429` over `bans.max_bans`; `GET /.cachet/bans` →
//! the live log as a JSON list; `POST /.cachet/purge` with `Surrogate-Key: k1 k2` and
//! optional `Fastly-Soft-Purge: 1` → a JSON object per key.

use cachet_http::Reply;
use cachet_policy::Policy;
use cachet_policy::admin::{self, AdminCall, AdminError};
use serde_json::json;

use crate::SharedData;
use crate::bans::{self, AppendError, Kind, NewEntry};

/// Largest admin request body read, bytes (a ban expression is at most 8 KiB).
pub const MAX_BODY_BYTES: usize = 16 * 1024;

fn answer(status: u16, v: &serde_json::Value) -> Reply {
    cachet_http::reply::admin(status, v.to_string())
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

/// What an admin call did, besides its reply (the adapter's metrics).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Effects {
    /// The call was refused for its credentials (401/403).
    pub denied: bool,
    /// Bans added.
    pub bans_added: u64,
    /// Surrogate keys purged (hard or soft).
    pub purges: u64,
}

/// Handles one admin call at `now_ms` on the ban log in `sd`, with the edge app's contract
/// (`cachet_policy::admin`): routing first (unknown path `404`, wrong method `405` with
/// `Allow`), then the bearer token (`401` with `WWW-Authenticate`, `403`), then the call's
/// own limits; refusals answered by `cachet_http::reply::admin_error`.
pub fn handle(
    sd: &dyn SharedData,
    policy: &Policy,
    req: &AdminRequest,
    body: &[u8],
    now_ms: u64,
) -> (Reply, Effects) {
    let mut fx = Effects::default();
    match call(sd, policy, req, body, now_ms, &mut fx) {
        Ok(r) => (r, fx),
        Err(e) => {
            fx.denied = matches!(e, AdminError::Unauthorized | AdminError::Forbidden(_));
            (cachet_http::reply::admin_error(&e), fx)
        }
    }
}

fn call(
    sd: &dyn SharedData,
    policy: &Policy,
    req: &AdminRequest,
    body: &[u8],
    now_ms: u64,
    fx: &mut Effects,
) -> Result<Reply, AdminError> {
    let cfg = policy.config();
    if !cfg.admin.enabled {
        return Err(AdminError::NotFound("admin API disabled".into()));
    }
    let call = admin::route(&req.method, &req.path)?;
    admin::authorize(
        req.authorization.as_deref().map(str::as_bytes),
        Some(cfg.admin.token.as_bytes()),
    )?;
    let max = cfg.bans.max_bans;
    match call {
        AdminCall::AddBan => {
            let added = bans::add_ban(sd, admin::ban_body(body)?, max, now_ms)?;
            fx.bans_added += 1;
            Ok(cachet_http::reply::admin(201, admin::added_body(&added)))
        }
        AdminCall::ListBans => {
            let (log, _) = bans::read_log(sd);
            Ok(cachet_http::reply::admin(200, admin::list_body(&log)))
        }
        AdminCall::Purge => purge(sd, req, max, now_ms, fx),
    }
}

fn append_error(e: AppendError, max: usize) -> AdminError {
    match e {
        AppendError::TooMany => AdminError::TooManyBans {
            live: max,
            limit: max,
        },
        AppendError::Conflict => AdminError::Store("ban log busy, retry".into()),
    }
}

fn purge(
    sd: &dyn SharedData,
    req: &AdminRequest,
    max: usize,
    now_ms: u64,
    fx: &mut Effects,
) -> Result<Reply, AdminError> {
    let keys = admin::purge_keys(req.surrogate_key.as_deref())?;
    let mut out = serde_json::Map::new();
    let mut new = Vec::new();
    let mut names = Vec::new();
    for k in keys {
        if req.soft {
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
                    out.insert(k.to_owned(), json!({"ok": false, "error": e}));
                }
            }
        }
    }
    if !new.is_empty() {
        let added = bans::append(sd, &new, max, now_ms, None).map_err(|e| append_error(e, max))?;
        fx.purges += added.len() as u64;
        for (k, e) in names.iter().zip(added) {
            out.insert(
                (*k).to_owned(),
                json!({"ok": true, "soft": req.soft, "id": e.id}),
            );
        }
    }
    Ok(answer(200, &serde_json::Value::Object(out)))
}
