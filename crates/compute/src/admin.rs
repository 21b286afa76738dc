//! The admin API on Fastly: `/.cachet/ban`, `/.cachet/bans`, `/.cachet/purge`, `/.cachet/config`, bearer-token protected.
//!
//! The contract (routes, auth, bodies, errors) is `cachet_policy::admin`, shared with the
//! Envoy filter. Here: the token comes from the secret store `[admin].secret_store` under
//! `[admin].token_secret` (never logged); bans go to the KV-backed ban log; purges use
//! Fastly's surrogate-key purge, hard or soft (`Fastly-Soft-Purge: 1`), which on Fastly is
//! service-wide.

use cachet_http::access::Access;
use cachet_policy::admin::{self, AdminCall, AdminError};
use cachet_refresh::Timestamp;

use crate::host::Host;
use crate::{ClientRequest, Ctx, EdgeError, Response, bans};

/// An admin answer (`cachet_http::reply::admin`: the headers both platforms send).
fn json<B>(status: u16, body: String) -> Response<B> {
    cachet_http::reply::admin(status, body).into()
}

/// Serves one admin call to `path` (canonical, `cachet_policy::admin::admin_path`).
///
/// # Errors
/// [`EdgeError::Admin`] with the status and reason (404/405/401/403/400/413/429/503).
pub(crate) fn handle<H: Host>(
    cx: Ctx<'_, H>,
    path: &str,
    mut req: ClientRequest<H::Body>,
    f: &mut Access,
) -> Result<Response<H::Body>, EdgeError> {
    let cfg = &cx.policy.config().admin;
    let token = cx.host.secret(&cfg.secret_store, &cfg.token_secret);
    let authorization = crate::first(&req.headers, "authorization");
    // `GET /.cachet/config`: the configuration in force (`cachet_policy::inforce`).
    if let Some(admitted) = admin::config_call(
        cfg.enabled,
        &req.method,
        path,
        authorization,
        token.as_deref(),
    ) {
        admitted?;
        return Ok(json(200, cx.status.body()));
    }
    let call = admin::admit(
        cfg.enabled,
        &req.method,
        path,
        authorization,
        token.as_deref(),
    )?;
    match call {
        AdminCall::AddBan => add_ban(cx, &mut req, f),
        AdminCall::ListBans => {
            let log = bans::authoritative(cx)?;
            Ok(json(200, admin::list_body(&log)))
        }
        AdminCall::Purge => Ok(purge(cx, &req)?),
    }
}

/// `POST /.cachet/ban`: the body's expression added to the shared ban log (`201`).
fn add_ban<H: Host>(
    cx: Ctx<'_, H>,
    req: &mut ClientRequest<H::Body>,
    f: &mut Access,
) -> Result<Response<H::Body>, EdgeError> {
    let declared = req
        .header_str("content-length")
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    if declared > admin::MAX_BAN_BODY_BYTES {
        return Err(AdminError::PayloadTooLarge {
            len: declared,
            limit: admin::MAX_BAN_BODY_BYTES,
        }
        .into());
    }
    let body = match req.body.as_mut() {
        Some(b) => cx.host.body_read(b, u64::MAX)?,
        None => Vec::new(),
    };
    let expr = admin::ban_body(&body)?;
    let now = Timestamp::from_system_time(cx.host.now()).as_millis();
    let added = bans::add(cx, expr, now)?;
    f.ban_added = Some(added.id);
    Ok(json(201, admin::added_body(&added)))
}

/// `POST /.cachet/purge`: each `Surrogate-Key` purged (soft with `Fastly-Soft-Purge: 1`);
/// `502` when any purge failed, with each key's outcome.
fn purge<H: Host>(
    cx: Ctx<'_, H>,
    req: &ClientRequest<H::Body>,
) -> Result<Response<H::Body>, AdminError> {
    let soft = admin::is_soft_purge(req.header_str("fastly-soft-purge"));
    let keys = admin::purge_keys(req.header_str("surrogate-key"))?;
    let mut results = serde_json::Map::new();
    let mut failed = false;
    for k in keys {
        let entry = match cx.host.purge(k, soft) {
            Ok(()) => serde_json::json!({ "ok": true, "soft": soft }),
            Err(e) => {
                failed = true;
                serde_json::json!({ "ok": false, "error": e })
            }
        };
        results.insert(k.to_owned(), entry);
    }
    let status = if failed { 502 } else { 200 };
    Ok(json(status, serde_json::Value::Object(results).to_string()))
}
