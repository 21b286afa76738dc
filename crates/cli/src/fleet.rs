//! `cachet ban add` and `cachet purge --etcd/--node`: bans and purges for an Envoy fleet, written to its etcd ban log or sent to any node's admin API.
//!
//! Through etcd (`--etcd URL`): the same transaction a node's admin API writes
//! (`cachet_policy::etcd::put_entries`: one create-only key per entry), so every node
//! applies it on its next poll (docs/fleet.md). The expression and keys are checked here
//! first, exactly as a node checks them. The fleet's `bans.max_bans` is a node setting
//! this command does not know: prefer `--node` when the log may be full.
//!
//! Through a node (`--node URL`): `POST /.cachet/ban` or `/.cachet/purge` with the token
//! from `$CACHET_ADMIN_TOKEN` (never printed); the node answers only after etcd accepted.
//!
//! Output: the answer's JSON on stdout (`{"id":…,"expr":…}` for a ban, one entry per key
//! for a purge). Exit 0 accepted, 1 refused or unreachable, 2 usage errors (nothing sent).

use std::hash::{BuildHasher, Hasher};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cachet_policy::banlog::{Kind, NewEntry, parse_ban, purge_entries};
use cachet_policy::etcd;

/// Environment variable holding a node's admin token (`--node`).
pub const TOKEN_ENV: &str = "CACHET_ADMIN_TOKEN";

/// Timeout of one call, to etcd or to a node.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Where a fleet write goes.
#[derive(Debug, Clone)]
pub enum Dest {
    /// etcd's v3 JSON gateway (`http://host:2379`) and the key prefix.
    Etcd {
        /// Base URL.
        url: String,
        /// `[envoy].etcd_prefix` of the fleet.
        prefix: String,
    },
    /// Any node's listener (`http://host:10000`).
    Node(String),
}

/// What to write.
#[derive(Debug, Clone)]
pub enum Write {
    /// A ban expression.
    Ban(String),
    /// Surrogate keys, hard or soft.
    Purge {
        /// The keys.
        keys: Vec<String>,
        /// Soft purge (stale instead of gone).
        soft: bool,
    },
}

fn post(url: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<(u16, String), String> {
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(TIMEOUT))
            .build(),
    );
    let mut req = agent.post(url);
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let mut r = req.send(body).map_err(|e| format!("{url}: {e}"))?;
    let status = r.status().as_u16();
    let text = r
        .body_mut()
        .read_to_string()
        .map_err(|e| format!("{url}: {e}"))?;
    Ok((status, text))
}

/// The entries a write adds, checked as a node checks them.
///
/// # Errors
/// The parser's message (with its column) or the refused key.
pub fn entries(w: &Write) -> Result<Vec<NewEntry>, String> {
    match w {
        Write::Ban(expr) => {
            let (expr, lurker_friendly) = parse_ban(expr)?;
            Ok(vec![NewEntry {
                kind: Kind::Ban,
                expr,
                key: None,
                lurker_friendly,
                at_ms: None,
            }])
        }
        Write::Purge { keys, soft: false } => {
            let e = purge_entries(keys);
            if e.len() == keys.len() {
                Ok(e)
            } else {
                Err("a key is not a valid surrogate key".into())
            }
        }
        Write::Purge { keys, soft: true } => Ok(keys
            .iter()
            .map(|k| NewEntry {
                kind: Kind::SoftPurge,
                expr: String::new(),
                key: Some(k.clone()),
                lurker_friendly: false,
                at_ms: None,
            })
            .collect()),
    }
}

/// Sends `w` to `dest`; the JSON line to print.
///
/// # Errors
/// Why it was refused or not sent.
pub fn send(dest: &Dest, w: &Write) -> Result<String, String> {
    match dest {
        Dest::Etcd { url, prefix } => {
            let new = entries(w)?;
            let now_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            let suffix = std::collections::hash_map::RandomState::new().build_hasher();
            let mut suffix = suffix;
            suffix.write_u64(now_ms);
            let txn = etcd::put_entries(prefix, &new, now_ms, suffix.finish());
            let base = url.trim_end_matches('/');
            let (status, body) = post(&format!("{base}{}", etcd::TXN_PATH), &[], &txn)?;
            let id = etcd::txn_answer(status, body.as_bytes()).map_err(|e| e.to_string())?;
            let line = match w {
                Write::Ban(_) => {
                    serde_json::json!({"id": id, "expr": new[0].expr, "lurker_friendly": new[0].lurker_friendly})
                }
                Write::Purge { keys, soft } => {
                    serde_json::json!({"id": id, "keys": keys, "soft": soft})
                }
            };
            Ok(line.to_string())
        }
        Dest::Node(base) => {
            let token = std::env::var(TOKEN_ENV)
                .map_err(|_| format!("set ${TOKEN_ENV} to the nodes' admin token"))?;
            let auth = format!("Bearer {token}");
            let base = base.trim_end_matches('/');
            let (status, body) = match w {
                Write::Ban(expr) => post(
                    &format!("{base}/.cachet/ban"),
                    &[("authorization", &auth)],
                    expr.as_bytes(),
                )?,
                Write::Purge { keys, soft } => {
                    let joined = keys.join(" ");
                    let mut h = vec![("authorization", auth.as_str()), ("surrogate-key", &joined)];
                    if *soft {
                        h.push(("fastly-soft-purge", "1"));
                    }
                    post(&format!("{base}/.cachet/purge"), &h, b"")?
                }
            };
            if (200..300).contains(&status) {
                Ok(body.trim().to_owned())
            } else {
                Err(format!("{status}: {}", body.trim()))
            }
        }
    }
}

/// Runs one fleet write: the answer on stdout, exit 0; the reason on stderr, exit 1.
pub fn run(dest: &Dest, w: &Write) -> ExitCode {
    match send(dest, w) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cachet: {e}");
            ExitCode::from(1)
        }
    }
}
