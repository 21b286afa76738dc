//! The admin API (`/.cachet/ban`, `/.cachet/bans`, `/.cachet/purge`, and
//! `/.cachet/config`: [`config_call`]) over the shared ban log ([`crate::bans`]): both
//! Envoy hosts' (the proxy-wasm filter over shared data, the dynamic module over its
//! in-process log), with the edge app's contract. Pure: the host reads the call, passes
//! the time, and sends the reply; in fleet mode it sends the etcd transaction and hands
//! etcd's answer back ([`handle_fleet`], [`fleet_answer`]).
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
use crate::etcd;

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
    /// Reads an admin call from its request: `method`, the request target `path` (its
    /// query is dropped) and the header fields as `(lowercase or any-case name, value
    /// bytes)`. `Authorization` and `Surrogate-Key` count only as UTF-8 (a value that is
    /// not reads as absent: the call is refused, never widened); `Fastly-Soft-Purge` is
    /// `1` after trimming (Fastly's soft purge header). The one reading both Envoy hosts
    /// use.
    pub fn read(method: String, path: &str, headers: &[(String, Vec<u8>)]) -> Self {
        let get = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .and_then(|(_, v)| std::str::from_utf8(v).ok())
        };
        Self {
            method,
            path: path.split('?').next().unwrap_or("").to_owned(),
            authorization: get("authorization").map(str::to_owned),
            surrogate_key: get("surrogate-key").map(str::to_owned),
            soft: get("fastly-soft-purge").is_some_and(|v| v.trim() == "1"),
        }
    }

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
    let call = admit(policy, req)?;
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

/// `GET /.cachet/config` (`cachet_policy::admin::config_call`: the API enabled, the
/// method, then the plugin's token, as every admin call): `None` when `req` is another
/// admin call; else the answer, `body()` (the configuration in force,
/// `cachet_policy::inforce::ConfigStatus::body`) when admitted, and its effects.
pub fn config_call(
    policy: &Policy,
    req: &AdminRequest,
    body: impl FnOnce() -> String,
) -> Option<(Reply, Effects)> {
    let cfg = &policy.config().admin;
    let admitted = admin::config_call(
        cfg.enabled,
        &req.method,
        &req.path,
        req.authorization.as_deref().map(str::as_bytes),
        Some(cfg.token.as_bytes()),
    )?;
    Some(match admitted {
        Ok(()) => (cachet_http::reply::admin(200, body()), Effects::default()),
        Err(e) => {
            let fx = Effects {
                denied: matches!(e, AdminError::Unauthorized | AdminError::Forbidden(_)),
                ..Effects::default()
            };
            (cachet_http::reply::admin_error(&e), fx)
        }
    })
}

/// `cachet_policy::admin::admit` with the plugin's token (`[admin].token`).
fn admit(policy: &Policy, req: &AdminRequest) -> Result<AdminCall, AdminError> {
    let cfg = &policy.config().admin;
    admin::admit(
        cfg.enabled,
        &req.method,
        &req.path,
        req.authorization.as_deref().map(str::as_bytes),
        Some(cfg.token.as_bytes()),
    )
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

/// A purge call's entries, the keys they purge, and the answer's object so far (the
/// refusal of each key that is not a valid surrogate key).
type PurgeEntries = (
    Vec<NewEntry>,
    Vec<String>,
    serde_json::Map<String, serde_json::Value>,
);

/// A purge's entries ([`PurgeEntries`]).
fn purge_entries(req: &AdminRequest) -> Result<PurgeEntries, AdminError> {
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
    Ok((new, names.into_iter().map(str::to_owned).collect(), out))
}

fn purge(
    sd: &dyn SharedData,
    req: &AdminRequest,
    max: usize,
    now_ms: u64,
    fx: &mut Effects,
) -> Result<Reply, AdminError> {
    let (new, names, mut out) = purge_entries(req)?;
    if !new.is_empty() {
        let added = bans::append(sd, &new, max, now_ms, None).map_err(|e| append_error(e, max))?;
        fx.purges += added.len() as u64;
        for (k, e) in names.iter().zip(added) {
            out.insert(k.clone(), json!({"ok": true, "soft": req.soft, "id": e.id}));
        }
    }
    Ok(answer(200, &serde_json::Value::Object(out)))
}

/// An admin write in fleet mode (`[envoy].etcd_cluster`), waiting for etcd: the
/// transaction to send (`cachet_store::etcd::TXN_PATH`) and what answers the client once etcd
/// answered ([`fleet_answer`]). Nothing is accepted before etcd accepted it.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetWrite {
    /// The transaction body (`cachet_store::etcd::put_entries`).
    pub txn: Vec<u8>,
    pending: Pending,
}

#[derive(Debug, Clone, PartialEq)]
enum Pending {
    Ban {
        expr: String,
        lurker_friendly: bool,
    },
    Purge {
        names: Vec<String>,
        soft: bool,
        out: serde_json::Map<String, serde_json::Value>,
    },
}

/// What an admin call does in fleet mode: answered now ([`Fleet::Reply`]: routing,
/// authorization, refusals and `GET /.cachet/bans`, which lists this node's copy of the
/// fleet log), or a write for etcd ([`Fleet::Write`]).
#[derive(Debug)]
pub enum Fleet {
    /// The answer, now.
    Reply(Reply, Effects),
    /// Send [`FleetWrite::txn`] to etcd, then answer with [`fleet_answer`].
    Write(FleetWrite),
}

/// The log entry a fleet node writes for `POST /.cachet/ban`'s `body`, and what it
/// answers once etcd accepted it.
///
/// # Errors
/// The body is not a ban expression (`400`).
fn ban_entry(body: &[u8]) -> Result<(Vec<NewEntry>, Pending), AdminError> {
    let b = admin::ban_body(body)?;
    let (expr, lurker_friendly) = bans::parse_ban(b).map_err(AdminError::BadRequest)?;
    let entry = NewEntry {
        kind: Kind::Ban,
        expr: expr.clone(),
        key: None,
        lurker_friendly,
        at_ms: None,
    };
    let pending = Pending::Ban {
        expr,
        lurker_friendly,
    };
    Ok((vec![entry], pending))
}

/// Handles one admin call in fleet mode at `now_ms`: the same contract as [`handle`]
/// (routing, then the token, then the call's limits; `max_bans` counted on this node's
/// copy of the fleet log), but bans and purges become one etcd transaction under
/// `prefix` (`cachet_store::etcd::put_entries`, keys made unique by the random `suffix`).
pub fn handle_fleet(
    sd: &dyn SharedData,
    policy: &Policy,
    req: &AdminRequest,
    body: &[u8],
    now_ms: u64,
    prefix: &str,
    suffix: u64,
) -> Fleet {
    let refused = |e: AdminError| {
        let fx = Effects {
            denied: matches!(e, AdminError::Unauthorized | AdminError::Forbidden(_)),
            ..Effects::default()
        };
        Fleet::Reply(cachet_http::reply::admin_error(&e), fx)
    };
    let cfg = policy.config();
    let call = match admit(policy, req) {
        Ok(c) => c,
        Err(e) => return refused(e),
    };
    let (log, _) = bans::read_log(sd);
    let max = cfg.bans.max_bans;
    let (new, pending) = match call {
        AdminCall::ListBans => {
            let r = cachet_http::reply::admin(200, admin::list_body(&log));
            return Fleet::Reply(r, Effects::default());
        }
        AdminCall::AddBan => match ban_entry(body) {
            Ok(p) => p,
            Err(e) => return refused(e),
        },
        AdminCall::Purge => match purge_entries(req) {
            Ok((new, _, out)) if new.is_empty() => {
                let r = answer(200, &serde_json::Value::Object(out));
                return Fleet::Reply(r, Effects::default());
            }
            Ok((new, names, out)) => (
                new,
                Pending::Purge {
                    names,
                    soft: req.soft,
                    out,
                },
            ),
            Err(e) => return refused(e),
        },
    };
    // One call is one etcd transaction, and etcd refuses more operations than its
    // `--max-txn-ops` (128 by default): say so before writing, never a 503 after.
    if new.len() > etcd::MAX_TXN_OPS {
        return refused(AdminError::BadRequest(format!(
            "{} surrogate keys in one purge; a fleet node writes at most {} per call \
             (etcd's --max-txn-ops): split the purge (cachet purge --node does)",
            new.len(),
            etcd::MAX_TXN_OPS
        )));
    }
    if log.entries.len() + new.len() > max {
        return refused(AdminError::TooManyBans {
            live: log.entries.len(),
            limit: max,
        });
    }
    Fleet::Write(FleetWrite {
        txn: etcd::put_entries(
            prefix,
            &new,
            cachet_policy::banlog::stamp_ms(now_ms),
            suffix,
        ),
        pending,
    })
}

/// The client's answer once etcd answered a [`FleetWrite`] with `status` and `body`
/// (`None`: no answer at all): `201` with the ban (its id is the etcd revision, the same
/// on every node) or `200` with each purged key, after etcd accepted it; `503` with the
/// reason and `Retry-After` when etcd did not, and then nothing was written.
pub fn fleet_answer(w: &FleetWrite, etcd_answer: Option<(u16, &[u8])>) -> (Reply, Effects) {
    let revision = match etcd_answer {
        None => Err(etcd::EtcdError::Unavailable("no answer".into())),
        Some((status, body)) => etcd::txn_answer(status, body),
    };
    let revision = match revision {
        Ok(r) => r,
        Err(e) => {
            let e = AdminError::Store(e.to_string());
            return (cachet_http::reply::admin_error(&e), Effects::default());
        }
    };
    match &w.pending {
        Pending::Ban {
            expr,
            lurker_friendly,
        } => {
            let added = cachet_policy::banlog::AddedBan {
                id: revision,
                lurker_friendly: *lurker_friendly,
                expr: expr.clone(),
                replaced: None,
            };
            let fx = Effects {
                bans_added: 1,
                ..Effects::default()
            };
            (
                cachet_http::reply::admin(201, admin::added_body(&added)),
                fx,
            )
        }
        Pending::Purge { names, soft, out } => {
            let mut out = out.clone();
            for k in names {
                out.insert(k.clone(), json!({"ok": true, "soft": soft, "id": revision}));
            }
            let fx = Effects {
                purges: names.len() as u64,
                ..Effects::default()
            };
            (answer(200, &serde_json::Value::Object(out)), fx)
        }
    }
}
