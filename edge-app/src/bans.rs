//! The shared ban log on Fastly: persisted in a KV store, copied into the POP's core cache.
//!
//! Fastly Compute gives no memory shared across requests and no way to enumerate cached
//! objects, so Varnish's lurker cannot run here. Instead every ban is evaluated lazily,
//! at lookup, against objects stored before it (Varnish's lookup-time check, made cheap by
//! `cachet-ban`'s indexes and by checking only bans newer than the object). A banned object
//! is hard-purged through its per-object surrogate key, so the next lookup collapses onto
//! one origin fetch.
//!
//! Propagation bound: the admin call writes the KV store (compare-and-swap on the item's
//! generation) and refreshes this POP's copy at once; other POPs (other Viceroy instances
//! share one cache, so there: none) re-read the KV store when their copy expires, after
//! `[bans].sync_interval`. A ban thus takes effect everywhere within `sync_interval` plus
//! the KV store's own global propagation delay.

use std::time::Duration;

use cachet_policy::Policy;
use cachet_policy::admin::{AddedBan, AdminError, BanLog};
use cachet_policy::object::Meta;
use fastly::cache::core::{self, CacheKey};
use fastly::kv_store::{InsertMode, KVStore, KVStoreError};

/// KV item holding the ban log (JSON, `cachet_policy::banlog::BanLog`).
pub(crate) const BAN_LOG_ITEM: &str = "ban-log";

/// Core-cache key of this POP's copy of the ban log. Cache keys of objects always contain
/// a `/` (host + target), this one cannot collide.
const LOCAL_COPY_KEY: &[u8] = b"cachet:ban-log";

/// Attempts at a compare-and-swap write before giving up with `503`.
const MAX_CAS_ATTEMPTS: usize = 8;

fn open(policy: &Policy) -> Result<KVStore, AdminError> {
    let name = &policy.config().bans.kv_store;
    match KVStore::open(name) {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Err(AdminError::Store(format!(
            "KV store {name:?} is not linked to the service"
        ))),
        Err(e) => Err(AdminError::Store(format!("KV store {name:?}: {e}"))),
    }
}

/// Reads the log from the KV store with its generation (`None` when the item is absent).
fn read_kv(store: &KVStore) -> Result<(BanLog, Option<u64>), AdminError> {
    match store.lookup(BAN_LOG_ITEM) {
        Ok(mut item) => {
            let generation = item.current_generation();
            let log = BanLog::try_from_json(&item.take_body_bytes())?;
            Ok((log, Some(generation)))
        }
        Err(KVStoreError::ItemNotFound) => Ok((BanLog::default(), None)),
        Err(e) => Err(AdminError::Store(e.to_string())),
    }
}

/// The authoritative log, straight from the KV store (admin `GET /.cachet/bans`).
///
/// # Errors
/// [`AdminError::Store`] when the store is missing or unreadable.
pub(crate) fn authoritative(policy: &Policy) -> Result<BanLog, AdminError> {
    read_kv(&open(policy)?).map(|(log, _)| log)
}

/// The log as this POP sees it: the core-cache copy, re-read from the KV store when older
/// than `[bans].sync_interval`. A missing or broken store means no bans (logged by the
/// caller through the returned error text).
pub(crate) fn current(policy: &Policy) -> (BanLog, Option<String>) {
    let key = CacheKey::from_static(LOCAL_COPY_KEY);
    if let Ok(Some(found)) = core::lookup(key).execute()
        && let Ok(body) = found.to_stream().map(fastly::Body::into_bytes)
        && let Ok(log) = BanLog::try_from_json(&body)
    {
        return (log, None);
    }
    match open(policy).and_then(|s| read_kv(&s)) {
        Ok((log, _)) => {
            publish_local(policy, &log);
            (log, None)
        }
        Err(e) => (BanLog::default(), Some(e.to_string())),
    }
}

/// Replaces this POP's copy (valid for `sync_interval`).
fn publish_local(policy: &Policy, log: &BanLog) {
    let bytes = log.to_json();
    let ttl: Duration = policy.config().bans.sync_interval.0;
    if let Ok(mut w) = core::insert(CacheKey::from_static(LOCAL_COPY_KEY), ttl)
        .known_length(bytes.len() as u64)
        .execute()
    {
        use std::io::Write;
        if w.write_all(&bytes).is_ok() {
            let _ = w.finish();
        }
    }
}

/// Adds a ban at `now_ms`: read-modify-write of the KV item guarded by its generation,
/// retrying when another instance wrote in between; retires bans past
/// `[bans].retention` in the same write.
///
/// # Errors
/// [`AdminError::BadRequest`] for an expression that does not parse (with the column);
/// [`AdminError::TooManyBans`]; [`AdminError::Store`] when the store fails or keeps
/// changing.
pub(crate) fn add(policy: &Policy, expr: &str, now_ms: u64) -> Result<AddedBan, AdminError> {
    let cfg = &policy.config().bans;
    let store = open(policy)?;
    for _ in 0..MAX_CAS_ATTEMPTS {
        let (mut log, generation) = read_kv(&store)?;
        log.retire(now_ms, cfg.retention.0);
        let added = log.add_ban(expr, now_ms, cfg.max_bans)?;
        let bytes = log.to_json();
        let insert = store.build_insert();
        let insert = match generation {
            Some(g) => insert.if_generation_match(g),
            None => insert.mode(InsertMode::Add),
        };
        match insert.execute(BAN_LOG_ITEM, bytes) {
            Ok(()) => {
                publish_local(policy, &log);
                return Ok(added);
            }
            Err(KVStoreError::ItemPreconditionFailed) => {}
            Err(e) => return Err(AdminError::Store(e.to_string())),
        }
    }
    Err(AdminError::Store(
        "the ban log kept changing; retry".to_owned(),
    ))
}

/// Checks a found object against the bans newer than it. `header` reads the lookup
/// request's headers (`req.http.*`); `url` is the normalized target (`req.url`).
pub(crate) fn check<'a>(
    log: &BanLog,
    meta: &Meta,
    url: &'a str,
    header: impl Fn(&str) -> Option<&'a str>,
) -> Option<u64> {
    log.check(meta, &cachet_policy::admin::LookupRequest { url, header })
}
