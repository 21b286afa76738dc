//! Bans and purges shared by every worker: a ban log in shared data, replayed into each VM's `BanList`.
//!
//! Shared data:
//!
//! | key | value |
//! |---|---|
//! | `cachet.bans` | [`BanLog`] as JSON: every live ban, hard purge and soft purge, in order |
//! | `cachet.epoch` | `u64` LE, bumped after every change of the log |
//!
//! A request on a cached route reads the 8-byte epoch; when it moved, the VM replays the
//! new log entries into its own [`BanList`] (`cachet-ban`) before looking anything up, so
//! a ban or purge applies to both tiers of every worker from the next request on. A hard
//! purge of surrogate key `k` is the lurker-friendly ban
//! `obj.http.surrogate-key ~ "(^|\s)k(\s|$)"` (`BanList::add_surrogate_key_ban`); a soft
//! purge marks matching objects stored before it stale (served within grace while one
//! request revalidates, as Fastly's soft purge).

use cachet_ban::{BanExpr, BanList, BanRequest, BanTarget, Verdict};
use cachet_refresh::Timestamp;
use serde::{Deserialize, Serialize};

use crate::host;
use crate::store::{LocalTier, StoredObject};

/// Shared-data key of the ban log.
pub const LOG_KEY: &str = "cachet.bans";

/// Shared-data key of the change epoch.
pub const EPOCH_KEY: &str = "cachet.epoch";

/// CAS retries when appending to the log.
const LOG_CAS_RETRIES: usize = 32;

/// What a log entry does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A ban expression from `POST /.cachet/ban` (or the fleet feed).
    Ban,
    /// A hard purge of one surrogate key (stored as its ban expression).
    Purge,
    /// A soft purge of one surrogate key: matching objects become stale.
    SoftPurge,
}

/// One log entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogEntry {
    /// Global id (1, 2, 3, … in log order; never reused).
    pub id: u64,
    /// When it was added, ms since the epoch (non-decreasing along the log).
    pub at_ms: u64,
    /// What it does.
    pub kind: Kind,
    /// The ban expression (canonical form); empty for a soft purge.
    pub expr: String,
    /// The surrogate key of a purge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Whether the lurker can apply it (only `obj.*` fields).
    pub lurker_friendly: bool,
}

/// The shared ban log.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BanLog {
    /// Bumped when entries are removed from the front (replay from scratch).
    pub generation: u64,
    /// Next id.
    pub next_id: u64,
    /// Entries added at or before this time were retired, ms since the epoch.
    pub trimmed_at_ms: u64,
    /// Newest fleet-feed id merged (see `feed.rs`).
    pub feed_through: u64,
    /// Live entries, oldest first.
    pub entries: Vec<LogEntry>,
}

impl BanLog {
    /// The log in shared data and its CAS token.
    pub fn read() -> (Self, Option<u32>) {
        let (v, cas) = host::shared_get(LOG_KEY);
        let log = v
            .and_then(|b| serde_json::from_slice::<Self>(&b).ok())
            .unwrap_or_else(|| Self {
                next_id: 1,
                ..Self::default()
            });
        (log, cas)
    }

    /// Writes the log if nobody else did since `cas`, then bumps the epoch.
    pub fn write(&self, cas: Option<u32>) -> bool {
        let Ok(bytes) = serde_json::to_vec(self) else {
            return false;
        };
        if !host::shared_set(LOG_KEY, &bytes, cas.or(Some(0))) {
            return false;
        }
        bump_epoch();
        true
    }
}

/// Increments the shared epoch (CAS loop).
pub fn bump_epoch() {
    for _ in 0..LOG_CAS_RETRIES {
        let (v, cas) = host::shared_get(EPOCH_KEY);
        let n = read_u64(v.as_deref()).wrapping_add(1);
        if host::shared_set(EPOCH_KEY, &n.to_le_bytes(), cas.or(Some(0))) {
            return;
        }
    }
}

fn read_u64(b: Option<&[u8]>) -> u64 {
    b.and_then(|b| b.get(..8))
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// Why an append failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendError {
    /// `bans.max_bans` live entries already.
    TooMany,
    /// The log kept changing under us.
    Conflict,
}

/// A new entry before it has an id and a time.
#[derive(Debug, Clone)]
pub struct NewEntry {
    /// What it does.
    pub kind: Kind,
    /// Canonical ban expression (empty for a soft purge).
    pub expr: String,
    /// Purged surrogate key.
    pub key: Option<String>,
    /// Only `obj.*` fields.
    pub lurker_friendly: bool,
    /// Time to record, ms (raised to keep the log ordered); `None` = now.
    pub at_ms: Option<u64>,
}

/// Appends entries atomically; returns their ids and times.
///
/// # Errors
/// [`AppendError::TooMany`] when the log would exceed `max`; [`AppendError::Conflict`]
/// after repeated CAS failures.
pub fn append(
    new: &[NewEntry],
    max: usize,
    now_ms: u64,
    feed_through: Option<u64>,
) -> Result<Vec<LogEntry>, AppendError> {
    for _ in 0..LOG_CAS_RETRIES {
        let (mut log, cas) = BanLog::read();
        if log.entries.len() + new.len() > max {
            return Err(AppendError::TooMany);
        }
        let mut added = Vec::with_capacity(new.len());
        for n in new {
            let last = log.entries.last().map_or(0, |e| e.at_ms);
            let e = LogEntry {
                id: log.next_id.max(1),
                at_ms: n.at_ms.unwrap_or(now_ms).max(last),
                kind: n.kind,
                expr: n.expr.clone(),
                key: n.key.clone(),
                lurker_friendly: n.lurker_friendly,
            };
            log.next_id = e.id + 1;
            log.entries.push(e.clone());
            added.push(e);
        }
        if let Some(f) = feed_through {
            log.feed_through = log.feed_through.max(f);
        }
        if log.write(cas) {
            return Ok(added);
        }
    }
    Err(AppendError::Conflict)
}

/// Retires entries added at or before `at_ms` (no object stored after them can match).
/// Returns how many were removed.
pub fn trim_not_after(at_ms: u64) -> usize {
    for _ in 0..LOG_CAS_RETRIES {
        let (mut log, cas) = BanLog::read();
        let before = log.entries.len();
        log.entries.retain(|e| e.at_ms > at_ms);
        let n = before - log.entries.len();
        if n == 0 {
            return 0;
        }
        log.generation += 1;
        log.trimmed_at_ms = log.trimmed_at_ms.max(at_ms);
        if log.write(cas) {
            return n;
        }
    }
    0
}

/// The shared epoch now.
pub fn epoch() -> u64 {
    read_u64(host::shared_get(EPOCH_KEY).0.as_deref())
}

/// What the ban state says about one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// No ban or purge applies.
    Clean,
    /// A ban or hard purge matches: the object must not be served.
    Banned,
    /// A soft purge at this time matches: the object is stale from then on.
    SoftPurged(Timestamp),
}

/// One VM's replica of the ban log.
#[derive(Debug, Default)]
pub struct BanState {
    epoch: Option<u64>,
    generation: u64,
    next_id: u64,
    list: BanList,
    softs: Vec<(String, Timestamp)>,
    live: usize,
}

impl BanState {
    /// Catches up with the shared log when the epoch moved. Returns `true` when it did.
    pub fn sync(&mut self, local: &mut LocalTier) -> bool {
        let e = epoch();
        if self.epoch == Some(e) {
            return false;
        }
        let (log, _) = BanLog::read();
        if log.generation != self.generation || self.epoch.is_none() {
            self.list = BanList::new();
            self.softs.clear();
            self.next_id = 0;
            self.generation = log.generation;
            local.drop_stored_not_after(Timestamp::from_millis(log.trimmed_at_ms));
        }
        let from = self.next_id;
        for entry in log.entries.iter().filter(|x| x.id >= from) {
            #[allow(clippy::cast_precision_loss, reason = "ms since the epoch fit f64")]
            let at_s = entry.at_ms as f64 / 1000.0;
            match entry.kind {
                Kind::SoftPurge => {
                    if let Some(k) = &entry.key {
                        self.softs
                            .push((k.clone(), Timestamp::from_millis(entry.at_ms)));
                    }
                }
                Kind::Ban | Kind::Purge => {
                    // Entries were validated when added; a parse failure here would mean a
                    // foreign writer, and skipping it is the safe choice.
                    let _ = self.list.add(&entry.expr, at_s);
                }
            }
            self.next_id = entry.id + 1;
        }
        self.live = log.entries.len();
        self.epoch = Some(e);
        true
    }

    /// Checks a cached object looked up by `req`.
    pub fn check<R: BanRequest>(&self, obj: &StoredObject, req: &R) -> Check {
        if self
            .list
            .check(&obj.ban_view(), req, cachet_ban::BanId::ZERO)
            .is_banned()
        {
            return Check::Banned;
        }
        self.soft(obj)
    }

    /// Checks against lurker-friendly bans only (no request: the lurker).
    pub fn check_objects_only(&self, obj: &StoredObject) -> bool {
        matches!(
            self.list
                .check_objects_only(&obj.ban_view(), cachet_ban::BanId::ZERO),
            Verdict::Banned { .. }
        )
    }

    fn soft(&self, obj: &StoredObject) -> Check {
        let stored = obj.h.meta.times.stored_at;
        let view = obj.ban_view();
        let keys = view.surrogate_keys().unwrap_or("");
        self.softs
            .iter()
            .filter(|(k, at)| stored < *at && keys.split_ascii_whitespace().any(|x| x == k))
            .map(|(_, at)| *at)
            .min()
            .map_or(Check::Clean, Check::SoftPurged)
    }

    /// Live log entries at the last sync.
    pub fn live(&self) -> usize {
        self.live
    }
}

/// Hard-purges surrogate keys through the ban log (every worker applies it on its next
/// request): the invalidation after an unsafe method (RFC 9111 §4.4,
/// `cachet_http::invalidation_keys`). Returns how many were added.
///
/// # Errors
/// As [`append`]; keys that are not valid surrogate keys are skipped.
pub fn purge_keys(keys: &[String], max: usize, now_ms: u64) -> Result<usize, AppendError> {
    let new: Vec<NewEntry> = keys
        .iter()
        .filter_map(|k| {
            Some(NewEntry {
                kind: Kind::Purge,
                expr: purge_expr(k).ok()?,
                key: Some(k.clone()),
                lurker_friendly: true,
                at_ms: None,
            })
        })
        .collect();
    if new.is_empty() {
        return Ok(0);
    }
    append(&new, max, now_ms, None).map(|a| a.len())
}

/// The canonical expression of a ban on surrogate key `key` (what a hard purge adds).
///
/// # Errors
/// The ban crate's reason when the key is not a valid surrogate key.
pub fn purge_expr(key: &str) -> Result<String, String> {
    let mut tmp = BanList::new();
    let _ = tmp
        .add_surrogate_key_ban(key, 0.0)
        .map_err(|e| e.to_string())?;
    tmp.iter()
        .next()
        .map(|(_, _, e, _)| e.to_string())
        .ok_or_else(|| "no expression".to_owned())
}

/// Parses and canonicalizes a ban expression; `(canonical text, lurker_friendly)`.
///
/// # Errors
/// The parser's message (with its column).
pub fn parse_ban(text: &str) -> Result<(String, bool), String> {
    let e = BanExpr::parse(text.trim()).map_err(|e| e.to_string())?;
    Ok((e.to_string(), e.is_lurker_friendly()))
}

/// The request side of a lookup-time ban check.
#[derive(Debug)]
pub struct Req<'a> {
    /// Normalized target (`req.url`).
    pub url: &'a str,
    /// Request headers, lower-case names.
    pub headers: &'a [(String, Vec<u8>)],
}

impl BanRequest for Req<'_> {
    fn url(&self) -> &str {
        self.url
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }
}
