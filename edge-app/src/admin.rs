//! The admin API on Fastly: `/.cachet/ban`, `/.cachet/bans`, `/.cachet/purge`, bearer-token protected.
//!
//! The contract (routes, auth, bodies, errors) is `cachet_policy::admin`, shared with the
//! Envoy filter. Here: the token comes from the secret store `[admin].secret_store` under
//! `[admin].token_secret` (never logged); bans go to the KV-backed ban log
//! ([`crate::bans`]); purges use Fastly's surrogate-key purge, hard or soft
//! (`Fastly-Soft-Purge: 1`), which on Fastly is service-wide.

use std::time::SystemTime;

use cachet_policy::Policy;
use cachet_policy::admin::{self, AdminCall, AdminError};
use cachet_refresh::Timestamp;
use fastly::http::header;
use fastly::secret_store::SecretStore;
use fastly::{Request, Response};

use crate::EdgeError;
use crate::bans;
use cachet_http::access::Access;

/// The configured admin token, if the secret store and secret exist.
fn token(policy: &Policy) -> Option<Vec<u8>> {
    let cfg = &policy.config().admin;
    let store = SecretStore::open(&cfg.secret_store).ok()?;
    let secret = store.try_get(&cfg.token_secret).ok()??;
    secret.try_plaintext().ok().map(|b| b.to_vec())
}

/// An admin answer (`cachet_http::reply::admin`: the headers both platforms send).
fn json(status: u16, body: String) -> Response {
    crate::to_response(cachet_http::reply::admin(status, body))
}

/// Serves one admin call to `path` (canonical, `cachet_policy::admin::admin_path`).
///
/// # Errors
/// [`EdgeError::Admin`] with the status and reason (404/405/401/403/400/413/429/503).
pub(crate) fn handle(
    policy: &Policy,
    path: &str,
    mut req: Request,
    f: &mut Access,
) -> Result<Response, EdgeError> {
    let call = admin::admit(
        policy.config().admin.enabled,
        req.get_method_str(),
        path,
        req.get_header(header::AUTHORIZATION)
            .map(fastly::http::HeaderValue::as_bytes),
        token(policy).as_deref(),
    )?;
    match call {
        AdminCall::AddBan => {
            let declared = req
                .get_header_str(header::CONTENT_LENGTH)
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if declared > admin::MAX_BAN_BODY_BYTES {
                return Err(AdminError::PayloadTooLarge {
                    len: declared,
                    limit: admin::MAX_BAN_BODY_BYTES,
                }
                .into());
            }
            let body = req.take_body_bytes();
            let expr = admin::ban_body(&body)?;
            let now = Timestamp::from_system_time(SystemTime::now()).as_millis();
            let added = bans::add(policy, expr, now)?;
            f.ban_added = Some(added.id);
            Ok(json(201, admin::added_body(&added)))
        }
        AdminCall::ListBans => {
            let log = bans::authoritative(policy)?;
            Ok(json(200, admin::list_body(&log)))
        }
        AdminCall::Purge => {
            let soft = admin::is_soft_purge(req.get_header_str("fastly-soft-purge"));
            let keys = admin::purge_keys(req.get_header_str("surrogate-key"))?;
            let mut results = serde_json::Map::new();
            let mut failed = false;
            for k in keys {
                let r = if soft {
                    fastly::http::purge::soft_purge_surrogate_key(k)
                } else {
                    fastly::http::purge::purge_surrogate_key(k)
                };
                let entry = match r {
                    Ok(()) => serde_json::json!({ "ok": true, "soft": soft }),
                    Err(e) => {
                        failed = true;
                        serde_json::json!({ "ok": false, "error": e.to_string() })
                    }
                };
                results.insert(k.to_owned(), entry);
            }
            let status = if failed { 502 } else { 200 };
            Ok(json(status, serde_json::Value::Object(results).to_string()))
        }
    }
}
