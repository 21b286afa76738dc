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
//! new log entries into its replica before looking anything up, so a ban or purge applies
//! to both tiers of every worker from the next request on. The log, its entries and the
//! replay are `cachet_policy::banlog`'s (pure); this module only reads and writes shared
//! data with compare-and-swap.

use cachet_policy::banlog::{Applied, Replica};
use cachet_refresh::Timestamp;

pub use cachet_policy::banlog::{
    AppendError, BanLog, Check, HeaderRequest as Req, Kind, LogEntry, NewEntry, parse_ban,
    purge_expr,
};

use crate::SharedData;
use crate::tier::{LocalTier, StoredObject};

/// Shared-data key of the ban log.
pub const LOG_KEY: &str = "cachet.bans";

/// Shared-data key of the change epoch.
pub const EPOCH_KEY: &str = "cachet.epoch";

/// CAS retries when appending to the log.
const LOG_CAS_RETRIES: usize = 32;

/// The log in shared data and its CAS token.
pub fn read_log(sd: &dyn SharedData) -> (BanLog, Option<u32>) {
    let (v, cas) = sd.get(LOG_KEY);
    (BanLog::from_json(v.as_deref()), cas)
}

/// Writes the log if nobody else did since `cas`, then bumps the epoch.
fn write_log(sd: &dyn SharedData, log: &BanLog, cas: Option<u32>) -> bool {
    let Ok(bytes) = serde_json::to_vec(log) else {
        return false;
    };
    if !sd.set(LOG_KEY, &bytes, cas.or(Some(0))) {
        return false;
    }
    bump_epoch(sd);
    true
}

/// Increments the shared epoch (CAS loop).
pub fn bump_epoch(sd: &dyn SharedData) {
    for _ in 0..LOG_CAS_RETRIES {
        let (v, cas) = sd.get(EPOCH_KEY);
        let n = read_u64(v.as_deref()).wrapping_add(1);
        if sd.set(EPOCH_KEY, &n.to_le_bytes(), cas.or(Some(0))) {
            return;
        }
    }
}

fn read_u64(b: Option<&[u8]>) -> u64 {
    b.and_then(|b| b.get(..8))
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// Appends entries atomically (`BanLog::append` under compare-and-swap); returns their
/// ids and times.
///
/// # Errors
/// [`AppendError::TooMany`] when the log would exceed `max`; [`AppendError::Conflict`]
/// after repeated CAS failures.
pub fn append(
    sd: &dyn SharedData,
    new: &[NewEntry],
    max: usize,
    now_ms: u64,
    feed_through: Option<u64>,
) -> Result<Vec<LogEntry>, AppendError> {
    for _ in 0..LOG_CAS_RETRIES {
        let (mut log, cas) = read_log(sd);
        let added = log.append(new, max, now_ms, feed_through)?;
        if write_log(sd, &log, cas) {
            return Ok(added);
        }
    }
    Err(AppendError::Conflict)
}

/// Appends entries polled from the fleet log, each keeping its fleet-wide id
/// (`BanLog::append_polled` under compare-and-swap).
///
/// # Errors
/// [`AppendError::TooMany`], or [`AppendError::Conflict`] after repeated CAS failures.
fn append_polled(
    sd: &dyn SharedData,
    new: &[(NewEntry, u64)],
    max: usize,
    now_ms: u64,
    feed_through: u64,
) -> Result<Vec<LogEntry>, AppendError> {
    for _ in 0..LOG_CAS_RETRIES {
        let (mut log, cas) = read_log(sd);
        let added = log.append_polled(new, max, now_ms, Some(feed_through))?;
        if write_log(sd, &log, cas) {
            return Ok(added);
        }
    }
    Err(AppendError::Conflict)
}

/// Adds a ban expression (`BanLog::add_ban` under compare-and-swap: the same duplicate
/// and limit rules as on the edge).
///
/// # Errors
/// The log's refusal (bad expression, too many bans), or a busy log after repeated CAS
/// failures.
pub fn add_ban(
    sd: &dyn SharedData,
    expr: &str,
    max: usize,
    now_ms: u64,
) -> Result<cachet_policy::banlog::AddedBan, cachet_policy::admin::AdminError> {
    for _ in 0..LOG_CAS_RETRIES {
        let (mut log, cas) = read_log(sd);
        let added = log.add_ban(expr, now_ms, max)?;
        if write_log(sd, &log, cas) {
            return Ok(added);
        }
    }
    Err(cachet_policy::admin::AdminError::Store(
        "ban log busy, retry".into(),
    ))
}

/// Retires entries added at or before `at_ms` (`BanLog::trim_not_after` under
/// compare-and-swap). Returns how many were removed.
pub fn trim_not_after(sd: &dyn SharedData, at_ms: u64) -> usize {
    for _ in 0..LOG_CAS_RETRIES {
        let (mut log, cas) = read_log(sd);
        let n = log.trim_not_after(at_ms);
        if n == 0 {
            return 0;
        }
        if write_log(sd, &log, cas) {
            return n;
        }
    }
    0
}

/// Retires the lurker-friendly bans and hard purges added before `before_ms` under
/// compare-and-swap (soft purges and `req.*` bans stay). The caller passes the start of a
/// lurker pass that has completed, minus the longest an origin fetch can take: every
/// object stored before those entries has been examined by the lurker and removed if one
/// matched, and no fetch that was out before them can still arrive (Varnish retires bans
/// the lurker has completed the same way). Returns how many went; a retirement starts a
/// new generation (replicas replay from scratch, [`BanState::sync`] first drops the
/// in-VM copies the retired entries match).
pub fn retire_lurked(sd: &dyn SharedData, before_ms: u64) -> usize {
    let lurked =
        |e: &LogEntry| e.lurker_friendly && e.kind != Kind::SoftPurge && e.at_ms < before_ms;
    for _ in 0..LOG_CAS_RETRIES {
        let (mut log, cas) = read_log(sd);
        let before = log.entries.len();
        log.entries.retain(|e| !lurked(e));
        let n = before - log.entries.len();
        if n == 0 {
            return 0;
        }
        log.generation += 1;
        if write_log(sd, &log, cas) {
            return n;
        }
    }
    0
}

/// Retires every entry older than `retention` at `now_ms` (`BanLog::retire` under
/// compare-and-swap), raising the floor: objects stored before it count as banned
/// ([`BanState::check`]), so a retired `req.*` ban or soft purge is never lost. Returns
/// how many went.
pub fn retire_expired(sd: &dyn SharedData, now_ms: u64, retention: std::time::Duration) -> usize {
    for _ in 0..LOG_CAS_RETRIES {
        let (mut log, cas) = read_log(sd);
        let n = log.retire(now_ms, retention);
        if n == 0 {
            return 0;
        }
        if write_log(sd, &log, cas) {
            return n;
        }
    }
    0
}

/// The shared epoch now.
pub fn epoch(sd: &dyn SharedData) -> u64 {
    read_u64(sd.get(EPOCH_KEY).0.as_deref())
}

/// One VM's replica of the ban log, refreshed when the shared epoch moves.
#[derive(Debug, Default)]
pub struct BanState {
    epoch: Option<u64>,
    generation: Option<u64>,
    /// The log's floor: objects stored before it count as banned.
    floor_ms: u64,
    replica: Replica,
}

impl BanState {
    /// Catches up with the shared log when the epoch moved (dropping local objects a
    /// retired ban could have matched). Returns `true` when it did.
    pub fn sync(&mut self, sd: &dyn SharedData, local: &mut LocalTier) -> bool {
        let e = epoch(sd);
        if self.epoch == Some(e) {
            return false;
        }
        let (log, _) = read_log(sd);
        if self.generation.is_some_and(|g| g != log.generation) {
            // Entries may have been retired ([`retire_lurked`]): the lurker removed what
            // they matched from the shared tier, this VM's copies go now.
            local.retain(|o| !self.replica.check_objects_only(&o.ban_view()));
        }
        if let Applied::Reset { trimmed_at_ms } = self.replica.apply(&log) {
            local.drop_stored_not_after(Timestamp::from_millis(trimmed_at_ms));
        }
        self.floor_ms = log.trimmed_at_ms;
        self.generation = Some(log.generation);
        self.epoch = Some(e);
        true
    }

    /// Checks a cached object looked up by `req`: banned when stored before the floor or
    /// matched by a live ban or hard purge; soft-purged when a soft purge names one of its
    /// keys.
    pub fn check<R: cachet_ban::BanRequest>(&self, obj: &StoredObject, req: &R) -> Check {
        if self.below_floor(obj) {
            return Check::Banned;
        }
        self.replica.check(&obj.h.meta, &obj.ban_view(), req)
    }

    /// Checks against lurker-friendly bans and the floor only (no request: the lurker).
    pub fn check_objects_only(&self, obj: &StoredObject) -> bool {
        self.below_floor(obj) || self.replica.check_objects_only(&obj.ban_view())
    }

    /// The log's floor as of the last [`BanState::sync`], milliseconds since the Unix
    /// epoch (0: never raised): objects stored before it count as banned.
    pub fn floor_ms(&self) -> u64 {
        self.floor_ms
    }

    fn below_floor(&self, obj: &StoredObject) -> bool {
        obj.h.meta.ban_at().as_millis() < self.floor_ms
    }

    /// Live log entries at the last sync.
    pub fn live(&self) -> usize {
        self.replica.live()
    }
}

/// Hard-purges surrogate keys through the ban log (every worker applies it on its next
/// request): the invalidation after an unsafe method (RFC 9111 §4.4,
/// `cachet_http::invalidation_keys`). Returns how many were added.
///
/// # Errors
/// As [`append`]; keys that are not valid surrogate keys are skipped.
pub fn purge_keys(
    sd: &dyn SharedData,
    keys: &[String],
    max: usize,
    now_ms: u64,
) -> Result<usize, AppendError> {
    let new = cachet_policy::banlog::purge_entries(keys);
    if new.is_empty() {
        return Ok(0);
    }
    append(sd, &new, max, now_ms, None).map(|a| a.len())
}

/// Why a ban-feed answer was not applied ([`apply_feed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedError {
    /// The body is neither a ban list (`GET /.cachet/bans`) nor a bare list of entries.
    NotAList,
    /// The local log refused the entries (too many, or busy).
    Append(String),
}

impl std::fmt::Display for FeedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotAList => f.write_str("the answer is not a ban list"),
            Self::Append(e) => write!(f, "not applied: {e}"),
        }
    }
}

/// Applies a peer's ban list (the fleet feed: its `GET /.cachet/bans` body, or the bare
/// list of entries of earlier releases) to the local log: entries the feed has not
/// brought yet (by the peer's ids), valid ones only, keeping their times. Returns how many
/// were added (0 when the feed brought nothing new).
///
/// # Errors
/// [`FeedError::NotAList`] for a body of another shape; [`FeedError::Append`] when the log
/// refused them (`max` entries, or busy after repeated CAS conflicts).
pub fn apply_feed(
    sd: &dyn SharedData,
    body: &[u8],
    max: usize,
    now_ms: u64,
) -> Result<usize, FeedError> {
    let entries = BanLog::try_from_json(body)
        .map(|l| l.entries)
        .or_else(|_| serde_json::from_slice::<Vec<LogEntry>>(body))
        .map_err(|_| FeedError::NotAList)?;
    let (log, _) = read_log(sd);
    let mut through = log.feed_through;
    let mut new = Vec::new();
    for e in entries.iter().filter(|e| e.id > log.feed_through) {
        through = through.max(e.id);
        let valid = match e.kind {
            Kind::SoftPurge => e.key.is_some(),
            _ => parse_ban(&e.expr).is_ok(),
        };
        if valid {
            new.push(NewEntry {
                kind: e.kind,
                expr: e.expr.clone(),
                key: e.key.clone(),
                lurker_friendly: e.lurker_friendly,
                at_ms: Some(e.at_ms),
            });
        }
    }
    if through == log.feed_through {
        return Ok(0);
    }
    append(sd, &new, max, now_ms, Some(through))
        .map(|a| a.len())
        .map_err(|e| FeedError::Append(format!("{e:?}")))
}

/// Shared-data key holding the time (ms) an admin call last asked for an immediate etcd
/// poll ([`poll_due`]): an accepted fleet ban applies on the accepting node on its next
/// tick, not after a whole poll interval.
pub const POLL_NOW_KEY: &str = "cachet.etcd.poll";

/// Asks the node's etcd poller to poll on its next tick (an admin call's write was
/// accepted).
pub fn request_poll(sd: &dyn SharedData, now_ms: u64) {
    sd.set(POLL_NOW_KEY, &now_ms.to_le_bytes(), None);
}

/// Whether the poller, which last polled at `last_poll_ms` and is next due at
/// `next_due_ms`, polls at `now_ms`: when due, or when [`request_poll`] asked since.
pub fn poll_due(sd: &dyn SharedData, now_ms: u64, last_poll_ms: u64, next_due_ms: u64) -> bool {
    now_ms >= next_due_ms || read_u64(sd.get(POLL_NOW_KEY).0.as_deref()) > last_poll_ms
}

/// Applies one etcd poll (`crate::etcd::poll_answer`) to the local log: first the fleet's
/// floor when it rose (`BanLog::raise_floor`: objects stored before it count as banned, so
/// a node that missed retired entries loses no ban, and the entries it covers go, making
/// room), then the entries newer than the last revision applied (`BanLog::feed_through`)
/// and than the floor, valid ones only, keeping their times and recording the revision
/// the poll is complete through. Returns how many entries were added.
///
/// # Errors
/// [`FeedError::Append`] when the log refused the entries (`max` entries, or busy after
/// repeated CAS conflicts); the floor is applied all the same, the entries are not
/// recorded, and the next poll brings them again.
pub fn apply_polled(
    sd: &dyn SharedData,
    polled: &crate::etcd::Polled,
    max: usize,
    now_ms: u64,
) -> Result<usize, FeedError> {
    if let Some(floor) = polled.floor_ms {
        for _ in 0..LOG_CAS_RETRIES {
            let (mut log, cas) = read_log(sd);
            if !log.raise_floor(floor) || write_log(sd, &log, cas) {
                break;
            }
        }
    }
    let mut added = 0;
    let (log, _) = read_log(sd);
    if polled.through > log.feed_through {
        let new: Vec<(NewEntry, u64)> = polled
            .entries
            .iter()
            .filter(|e| e.id > log.feed_through && e.at_ms > log.trimmed_at_ms)
            .filter(|e| match e.kind {
                Kind::SoftPurge => e.key.is_some(),
                _ => parse_ban(&e.expr).is_ok(),
            })
            .map(|e| {
                let n = NewEntry {
                    kind: e.kind,
                    expr: e.expr.clone(),
                    key: e.key.clone(),
                    lurker_friendly: e.lurker_friendly,
                    at_ms: Some(e.at_ms),
                };
                (n, e.id)
            })
            .collect();
        added = append_polled(sd, &new, max, now_ms, polled.through)
            .map_err(|e| FeedError::Append(format!("{e:?}")))?
            .len();
    }
    Ok(added)
}
