//! The ban log workers share (Envoy: proxy-wasm shared data) and each worker's replica of
//! it: the log's entries (bans, hard purges, soft purges), appending and retiring them, and
//! replaying them into a `cachet_ban::BanList`. Pure: the adapter reads and writes the
//! bytes (with its platform's compare-and-swap) and passes `now`.
//!
//! A hard purge of surrogate key `k` is the lurker-friendly ban
//! `obj.http.surrogate-key ~ "(^|\s)k(\s|$)"` (`BanList::add_surrogate_key_ban`); a soft
//! purge marks matching objects stored before it stale (served within grace while one
//! request revalidates, as Fastly's soft purge). Varnish semantics: a ban applies to
//! objects inserted before it (Varnish Users Guide, "Bans").

use std::time::Duration;

use cachet_ban::{BanExpr, BanList, BanRequest, Verdict};
use cachet_refresh::Timestamp;
use serde::{Deserialize, Serialize};

use crate::admin::AdminError;

use crate::object::{BanView, Meta};

/// The time, in ms since the epoch, an entry accepted at clock reading `now_ms` is stamped
/// with: the next millisecond. An entry covers objects stored strictly before its stamp
/// (Varnish: a ban tests objects older than it, Varnish Users Guide "Bans"; the lurker's
/// `cachet_ban::BanList` and [`crate::banindex`] compare the same way). The clocks Cachet
/// reads are whole milliseconds, so an object whose fill completed in the millisecond
/// the entry was accepted may predate it: stamping the next millisecond covers it (fail
/// closed; an object stored later in that millisecond costs one extra miss). Every writer
/// stamps through here: local appends ([`BanLog::append`]), fleet writes
/// (`cachet_store::admin::handle_fleet`, `cachet purge --node`). Saturates at `u64::MAX`.
#[must_use]
pub const fn stamp_ms(now_ms: u64) -> u64 {
    now_ms.saturating_add(1)
}

/// What a log entry does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A ban expression from `POST /.cachet/ban` (or the fleet feed).
    #[default]
    Ban,
    /// A hard purge of one surrogate key (stored as its ban expression).
    Purge,
    /// A soft purge of one surrogate key: matching objects become stale.
    SoftPurge,
}

/// One log entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    /// Global id (1, 2, 3, … in log order; never reused).
    pub id: u64,
    /// When it was added, ms since the epoch (non-decreasing along the log).
    pub at_ms: u64,
    /// What it does (absent in the earlier edge layout: a ban).
    #[serde(default)]
    pub kind: Kind,
    /// The ban expression (canonical form); empty for a soft purge.
    pub expr: String,
    /// The surrogate key of a purge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Whether the lurker can apply it (only `obj.*` fields).
    pub lurker_friendly: bool,
}

/// A new entry before it has an id and a time.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// Why an append failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendError {
    /// `bans.max_bans` live entries already.
    TooMany,
    /// The log kept changing under us (the adapter's compare-and-swap gave up).
    Conflict,
}

/// The ban log, one type for every platform: JSON in the Fastly KV store (the authoritative
/// record; lookups query its binary index, [`crate::banindex`], copied into each POP's core
/// cache) and in Envoy's shared data (replayed by every worker), served by
/// `GET /.cachet/bans` ([`crate::admin::list_body`]). Entries are in `at_ms` order.
///
/// Reads the earlier edge layout too (`floor_ms`, `bans` of `{id, at_ms, expr,
/// lurker_friendly}`: every entry a [`Kind::Ban`]), so no accepted ban is lost on upgrade.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BanLog {
    /// Bumped when entries are removed (retired or replaced): replicas replay from scratch.
    pub generation: u64,
    /// Next id.
    pub next_id: u64,
    /// The floor, ms since the epoch: entries added at or before it were retired, and an
    /// object stored before it counts as banned (a retired ban could have matched it).
    #[serde(alias = "floor_ms")]
    pub trimmed_at_ms: u64,
    /// Newest fleet-feed id merged.
    pub feed_through: u64,
    /// Live entries, oldest first.
    #[serde(alias = "bans")]
    pub entries: Vec<LogEntry>,
}

/// What [`BanLog::add_ban`] did (the `201` body of `POST /.cachet/ban`,
/// [`crate::admin::added_body`]).
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

impl Default for BanLog {
    fn default() -> Self {
        Self {
            generation: 0,
            next_id: 1,
            trimmed_at_ms: 0,
            feed_through: 0,
            entries: Vec::new(),
        }
    }
}

impl BanLog {
    /// Reads a stored log; absent or unreadable bytes are an empty log (a foreign writer's
    /// bytes are never applied half-way).
    pub fn from_json(bytes: Option<&[u8]>) -> Self {
        bytes
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or_default()
    }

    /// Appends `new` at `now_ms` (each entry's time raised to keep the log ordered),
    /// recording `feed_through`; returns the entries with their ids and times.
    ///
    /// # Errors
    /// [`AppendError::TooMany`] when the log would hold more than `max` entries.
    pub fn append(
        &mut self,
        new: &[NewEntry],
        max: usize,
        now_ms: u64,
        feed_through: Option<u64>,
    ) -> Result<Vec<LogEntry>, AppendError> {
        let pairs: Vec<(&NewEntry, Option<u64>)> = new.iter().map(|n| (n, None)).collect();
        self.append_with_ids(&pairs, max, now_ms, feed_through)
    }

    /// [`BanLog::append`] for entries polled from a fleet's log, each with its fleet-wide
    /// id (the etcd revision that created it, `crate::etcd::Polled`): the entry keeps that
    /// id, so the `201` of the node that accepted it and `GET /.cachet/bans` on every node
    /// name it alike (docs/fleet.md; issue 27 item 8). Entries of one transaction share
    /// its revision. An id below the log's last one (a log that also holds local entries)
    /// gets the next local id instead, so ids never go down.
    ///
    /// # Errors
    /// [`AppendError::TooMany`] when the log would hold more than `max` entries.
    pub fn append_polled(
        &mut self,
        new: &[(NewEntry, u64)],
        max: usize,
        now_ms: u64,
        feed_through: Option<u64>,
    ) -> Result<Vec<LogEntry>, AppendError> {
        let pairs: Vec<(&NewEntry, Option<u64>)> =
            new.iter().map(|(n, id)| (n, Some(*id))).collect();
        self.append_with_ids(&pairs, max, now_ms, feed_through)
    }

    fn append_with_ids(
        &mut self,
        new: &[(&NewEntry, Option<u64>)],
        max: usize,
        now_ms: u64,
        feed_through: Option<u64>,
    ) -> Result<Vec<LogEntry>, AppendError> {
        if self.entries.len() + new.len() > max {
            return Err(AppendError::TooMany);
        }
        let mut added = Vec::with_capacity(new.len());
        for &(n, fleet_id) in new {
            let last = self.entries.last().map_or(0, |e| e.at_ms);
            let last_id = self.entries.last().map_or(1, |e| e.id);
            let id = fleet_id
                .filter(|&id| id >= last_id)
                .unwrap_or(self.next_id.max(1));
            let e = LogEntry {
                id,
                at_ms: n.at_ms.unwrap_or(stamp_ms(now_ms)).max(last),
                kind: n.kind,
                expr: n.expr.clone(),
                key: n.key.clone(),
                lurker_friendly: n.lurker_friendly,
            };
            self.next_id = self.next_id.max(e.id + 1);
            self.entries.push(e.clone());
            added.push(e);
        }
        if let Some(f) = feed_through {
            self.feed_through = self.feed_through.max(f);
        }
        Ok(added)
    }

    /// Reads a stored log strictly: empty bytes are an empty log; bytes that are not a ban
    /// log are an error (the edge logs it and keeps serving).
    ///
    /// # Errors
    /// [`AdminError::Store`] with serde's reason.
    pub fn try_from_json(bytes: &[u8]) -> Result<Self, AdminError> {
        if bytes.is_empty() {
            return Ok(Self::default());
        }
        let mut log: Self = serde_json::from_slice(bytes)
            .map_err(|e| AdminError::Store(format!("ban log unreadable: {e}")))?;
        log.entries.sort_by_key(|e| (e.at_ms, e.id));
        log.next_id = log
            .next_id
            .max(log.entries.iter().map(|e| e.id + 1).max().unwrap_or(1));
        Ok(log)
    }

    /// The stored form (JSON).
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Adds a ban expression at `now_ms` (`POST /.cachet/ban`). An identical, not
    /// time-relative live ban is replaced (the newer ban covers every object the older one
    /// did: Varnish's duplicate-ban rule), which starts a new generation.
    ///
    /// # Errors
    /// [`AdminError::BadRequest`] with the parser's column and reason;
    /// [`AdminError::TooManyBans`] when `max_bans` entries are live.
    pub fn add_ban(
        &mut self,
        expr: &str,
        now_ms: u64,
        max_bans: usize,
    ) -> Result<AddedBan, AdminError> {
        let parsed =
            BanExpr::parse(expr.trim()).map_err(|e| AdminError::BadRequest(e.to_string()))?;
        let canonical = parsed.to_string();
        let replaced = if parsed.is_time_relative() {
            None
        } else {
            self.entries
                .iter()
                .position(|e| e.kind == Kind::Ban && e.expr == canonical)
                .map(|i| self.entries.remove(i).id)
        };
        if replaced.is_some() {
            self.generation += 1;
        }
        let lurker_friendly = parsed.is_lurker_friendly();
        let new = NewEntry {
            kind: Kind::Ban,
            expr: canonical.clone(),
            key: None,
            lurker_friendly,
            at_ms: None,
        };
        let live = self.entries.len();
        let added = self
            .append(std::slice::from_ref(&new), max_bans, now_ms, None)
            .map_err(|_| AdminError::TooManyBans {
                live,
                limit: max_bans,
            })?;
        Ok(AddedBan {
            id: added.first().map_or(0, |e| e.id),
            lurker_friendly,
            expr: canonical,
            replaced,
        })
    }

    /// Retires entries added before `now_ms - retention`, raising the floor to the newest
    /// retired entry's time. Returns how many were retired.
    pub fn retire(&mut self, now_ms: u64, retention: Duration) -> usize {
        let cutoff =
            now_ms.saturating_sub(u64::try_from(retention.as_millis()).unwrap_or(u64::MAX));
        let keep_from = self.entries.partition_point(|e| e.at_ms < cutoff);
        match keep_from.checked_sub(1).map(|i| self.entries[i].at_ms) {
            Some(newest) => self.trim_not_after(newest),
            None => 0,
        }
    }

    /// The bans and hard purges an object stored at `stored_at_ms` must be checked against
    /// (added after it), compiled into a [`BanList`]; soft purges are left out (they make an
    /// object stale, never banned). Entries that no longer parse are skipped (they were
    /// validated when added).
    pub fn newer_than(&self, stored_at_ms: u64) -> (BanList, Vec<u64>) {
        let from = self.entries.partition_point(|e| e.at_ms <= stored_at_ms);
        let mut list = BanList::new();
        let mut ids = Vec::new();
        for e in self.entries[from..]
            .iter()
            .filter(|e| e.kind != Kind::SoftPurge)
        {
            #[allow(
                clippy::cast_precision_loss,
                reason = "ms since the epoch stay below 2^53"
            )]
            let at_s = e.at_ms as f64 / 1000.0;
            if list.add(&e.expr, at_s).is_ok() {
                ids.push(e.id);
            }
        }
        (list, ids)
    }

    /// Whether `obj` is banned for a lookup by `req` (the edge's lookup-time check): it was
    /// stored before the floor, or a newer ban or hard purge matches it. Returns the id of
    /// the matching entry (0 for the floor).
    pub fn check(&self, obj: &Meta, req: &impl BanRequest) -> Option<u64> {
        let stored = obj.ban_at().as_millis();
        if stored < self.trimmed_at_ms {
            return Some(0);
        }
        if self.entries.last().is_none_or(|e| e.at_ms <= stored) {
            return None;
        }
        let (list, ids) = self.newer_than(stored);
        match list.check(&obj.ban_view(), req, cachet_ban::BanId::ZERO) {
            Verdict::Banned { by } => {
                // The list's ids are its own; map back through insertion order (the list
                // deduplicates identical expressions, keeping the first).
                let idx = list
                    .iter()
                    .position(|(id, ..)| id == by)
                    .unwrap_or_default();
                Some(ids.get(idx).copied().unwrap_or_default())
            }
            Verdict::Kept { .. } => None,
        }
    }

    /// Whether any live entry reads `req.*` (cannot be applied by a lurker).
    pub fn has_request_bans(&self) -> bool {
        self.entries.iter().any(|e| !e.lurker_friendly)
    }

    /// Raises the floor to `at_ms` even when no live entry is that old: a fleet node that
    /// never saw the entries another node retired (etcd's floor, `cachet_store::etcd`)
    /// must still count objects stored before them as banned. Entries at or before
    /// `at_ms` go. Returns whether the floor moved (a new generation).
    pub fn raise_floor(&mut self, at_ms: u64) -> bool {
        if at_ms <= self.trimmed_at_ms {
            return false;
        }
        self.entries.retain(|e| e.at_ms > at_ms);
        self.trimmed_at_ms = at_ms;
        self.generation += 1;
        true
    }

    /// Retires entries added at or before `at_ms` (no object stored after them can
    /// match); returns how many went. A retirement starts a new generation.
    pub fn trim_not_after(&mut self, at_ms: u64) -> usize {
        let before = self.entries.len();
        self.entries.retain(|e| e.at_ms > at_ms);
        let n = before - self.entries.len();
        if n > 0 {
            self.generation += 1;
            self.trimmed_at_ms = self.trimmed_at_ms.max(at_ms);
        }
        n
    }
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

/// Hard purges of `keys` as log entries; keys that are not valid surrogate keys are
/// skipped.
pub fn purge_entries(keys: &[String]) -> Vec<NewEntry> {
    keys.iter()
        .filter_map(|k| {
            Some(NewEntry {
                kind: Kind::Purge,
                expr: purge_expr(k).ok()?,
                key: Some(k.clone()),
                lurker_friendly: true,
                at_ms: None,
            })
        })
        .collect()
}

/// Parses and canonicalizes a ban expression; `(canonical text, lurker_friendly)`.
///
/// # Errors
/// The parser's message (with its column).
pub fn parse_ban(text: &str) -> Result<(String, bool), String> {
    let e = BanExpr::parse(text.trim()).map_err(|e| e.to_string())?;
    Ok((e.to_string(), e.is_lurker_friendly()))
}

/// What the log says about one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// No ban or purge applies.
    Clean,
    /// A ban or hard purge matches: the object must not be served.
    Banned,
    /// A soft purge at this time matches: the object is stale from then on.
    SoftPurged(Timestamp),
}

/// What [`Replica::apply`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// New entries replayed on top of the previous state.
    Incremental,
    /// A new generation: replayed from scratch; objects stored at or before
    /// `trimmed_at_ms` must be dropped (a retired ban could have matched them).
    Reset {
        /// The log's retirement horizon, ms since the epoch.
        trimmed_at_ms: u64,
    },
}

/// One worker's replica of the log: its bans in a `BanList`, its soft purges.
#[derive(Debug, Default)]
pub struct Replica {
    synced: bool,
    generation: u64,
    next_id: u64,
    list: BanList,
    softs: Vec<(String, Timestamp)>,
    live: usize,
}

impl Replica {
    /// Replays the entries of `log` this replica has not seen (all of them after a new
    /// generation). Entries that no longer parse (a foreign writer) are skipped.
    pub fn apply(&mut self, log: &BanLog) -> Applied {
        let mut applied = Applied::Incremental;
        if log.generation != self.generation || !self.synced {
            self.list = BanList::new();
            self.softs.clear();
            self.next_id = 0;
            self.generation = log.generation;
            applied = Applied::Reset {
                trimmed_at_ms: log.trimmed_at_ms,
            };
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
                    let _ = self.list.add(&entry.expr, at_s);
                }
            }
            self.next_id = entry.id + 1;
        }
        self.live = log.entries.len();
        self.synced = true;
        applied
    }

    /// Checks a stored object (`meta`, seen as `view`) looked up by `req`.
    pub fn check<R: BanRequest>(&self, meta: &Meta, view: &BanView<'_>, req: &R) -> Check {
        if self
            .list
            .check(view, req, cachet_ban::BanId::ZERO)
            .is_banned()
        {
            return Check::Banned;
        }
        self.soft(meta, view)
    }

    /// Checks against lurker-friendly bans only (no request: the lurker).
    pub fn check_objects_only(&self, view: &BanView<'_>) -> bool {
        matches!(
            self.list.check_objects_only(view, cachet_ban::BanId::ZERO),
            Verdict::Banned { .. }
        )
    }

    fn soft(&self, meta: &Meta, view: &BanView<'_>) -> Check {
        use cachet_ban::BanTarget;
        let stored = meta.ban_at();
        let keys = view.surrogate_keys().unwrap_or("");
        self.softs
            .iter()
            .filter(|(k, at)| stored < *at && keys.split_ascii_whitespace().any(|x| x == k))
            .map(|(_, at)| *at)
            .min()
            .map_or(Check::Clean, Check::SoftPurged)
    }

    /// Live log entries at the last [`Replica::apply`].
    pub fn live(&self) -> usize {
        self.live
    }
}

/// A lookup request as a ban request (`req.url`, `req.http.*`), over header bytes;
/// a value that is not UTF-8 reads as absent.
#[derive(Debug)]
pub struct HeaderRequest<'a> {
    /// Normalized target (`req.url`).
    pub url: &'a str,
    /// Request headers.
    pub headers: &'a [(String, Vec<u8>)],
}

impl BanRequest for HeaderRequest<'_> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_the_floor_moves_it_only_upwards_even_without_entries() {
        let mut log = BanLog::default();
        assert!(log.raise_floor(100));
        assert_eq!((log.trimmed_at_ms, log.generation), (100, 1));
        assert!(!log.raise_floor(50));
        log.add_ban("obj.status == 404", 150, 10).unwrap();
        log.add_ban("obj.status == 410", 250, 10).unwrap();
        assert!(log.raise_floor(200));
        assert_eq!(log.entries.len(), 1);
        assert_eq!((log.trimmed_at_ms, log.generation), (200, 2));
    }
    use crate::object::Meta;

    fn entry(kind: Kind, expr: &str, key: Option<&str>) -> NewEntry {
        NewEntry {
            kind,
            expr: expr.into(),
            key: key.map(Into::into),
            lurker_friendly: true,
            at_ms: None,
        }
    }

    fn object(stored_ms: u64, keys: &[&str]) -> Meta {
        let mut m = Meta::marker(
            "r",
            Timestamp::from_millis(stored_ms),
            std::time::Duration::from_secs(60),
        );
        m.pass = false;
        m.status = 200;
        m.url = "/blog/a/1".into();
        m.surrogate_keys = keys.iter().map(|k| (*k).to_owned()).collect();
        m
    }

    #[test]
    fn polled_entries_keep_their_fleet_ids_and_ids_never_go_down() {
        let mut log = BanLog::default();
        let purge = purge_expr("k").unwrap_or_default();
        let added = log
            .append_polled(
                &[
                    (entry(Kind::Ban, "obj.http.x-url ~ ^/a", None), 7),
                    (entry(Kind::Purge, &purge, Some("k")), 9),
                    (entry(Kind::SoftPurge, "", Some("k")), 9),
                    (entry(Kind::Ban, "obj.http.x-url ~ ^/b", None), 3),
                ],
                10,
                5_000,
                Some(9),
            )
            .unwrap_or_default();
        assert_eq!(
            added.iter().map(|e| e.id).collect::<Vec<_>>(),
            [7, 9, 9, 10],
            "revisions kept (one transaction's entries share one); a lower one renumbered"
        );
        assert_eq!((log.next_id, log.feed_through), (11, 9));
        let mut r = Replica::default();
        r.apply(&log);
        assert_eq!(r.live(), 4, "every entry replayed, shared ids included");
    }

    #[test]
    fn append_replay_check_and_retire() {
        let mut log = BanLog::default();
        let purge = purge_expr("blog-a").unwrap_or_default();
        let added = log
            .append(
                &[
                    entry(Kind::Ban, "obj.http.x-url ~ ^/blog/b/", None),
                    entry(Kind::Purge, &purge, Some("blog-a")),
                    entry(Kind::SoftPurge, "", Some("css")),
                ],
                10,
                5_000,
                None,
            )
            .unwrap_or_default();
        assert_eq!(added.iter().map(|e| e.id).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(
            log.append(&[entry(Kind::Ban, "x", None)], 3, 6_000, None),
            Err(AppendError::TooMany)
        );
        let mut r = Replica::default();
        assert_eq!(r.apply(&log), Applied::Reset { trimmed_at_ms: 0 });
        assert_eq!(r.live(), 3);
        let req = HeaderRequest {
            url: "/blog/a/1",
            headers: &[],
        };
        let old = object(1_000, &["blog-a"]);
        assert_eq!(r.check(&old, &old.ban_view(), &req), Check::Banned);
        let newer = object(9_000, &["blog-a"]);
        assert_eq!(r.check(&newer, &newer.ban_view(), &req), Check::Clean);
        let css = object(1_000, &["css"]);
        assert_eq!(
            r.check(&css, &css.ban_view(), &req),
            Check::SoftPurged(Timestamp::from_millis(5_001))
        );
        assert!(r.check_objects_only(&old.ban_view()));
        // Incremental replay, then a retirement resets the replica.
        let _ = log.append(&[entry(Kind::SoftPurge, "", Some("x"))], 10, 7_000, Some(4));
        assert_eq!(r.apply(&log), Applied::Incremental);
        assert_eq!((r.live(), log.feed_through), (4, 4));
        assert_eq!(log.trim_not_after(5_001), 3);
        assert_eq!(
            r.apply(&log),
            Applied::Reset {
                trimmed_at_ms: 5_001
            }
        );
        assert_eq!(
            r.check(&old, &old.ban_view(), &req),
            Check::Clean,
            "retired"
        );
        assert_eq!(BanLog::from_json(Some(b"not json")), BanLog::default());
        let back = BanLog::from_json(Some(&serde_json::to_vec(&log).unwrap_or_default()));
        assert_eq!(back, log);
        assert!(parse_ban("obj.http.x ~").is_err());
        assert_eq!(purge_entries(&["ok".into(), String::new()]).len(), 1);
    }

    /// The flake that found it: a module fill completed in the millisecond a purge was
    /// accepted, and the purge (covering objects stored strictly before its time) let the
    /// pre-purge copy through as a HIT. Entries are stamped the next millisecond
    /// ([`stamp_ms`]): every check path covers an object stored in the acceptance's
    /// millisecond, and none covers one stored after the stamp.
    #[test]
    fn an_object_stored_in_the_millisecond_an_entry_is_accepted_is_covered() {
        let mut log = BanLog::default();
        let purge = purge_expr("k").unwrap_or_default();
        let _ = log
            .append(&[entry(Kind::Purge, &purge, Some("k"))], 10, 5_000, None)
            .unwrap_or_default();
        let _ = log
            .append(&[entry(Kind::SoftPurge, "", Some("s"))], 10, 5_000, None)
            .unwrap_or_default();
        assert!(log.entries.iter().all(|e| e.at_ms == 5_001));
        let req = HeaderRequest {
            url: "/a",
            headers: &[],
        };
        let same_ms = object(5_000, &["k"]);
        let after = object(5_001, &["k"]);
        assert_eq!(log.check(&same_ms, &req), Some(1));
        assert_eq!(log.check(&after, &req), None);
        let mut r = Replica::default();
        let _ = r.apply(&log);
        assert_eq!(r.check(&same_ms, &same_ms.ban_view(), &req), Check::Banned);
        assert_eq!(r.check(&after, &after.ban_view(), &req), Check::Clean);
        let soft = object(5_000, &["s"]);
        assert_eq!(
            r.check(&soft, &soft.ban_view(), &req),
            Check::SoftPurged(Timestamp::from_millis(5_001))
        );
        let bytes = crate::banindex::encode(&log);
        let index = crate::banindex::BanIndex::from_bytes(&bytes).expect("index");
        assert_eq!(index.check(&bytes, &same_ms, &req), Ok(Some(1)));
        assert_eq!(index.check(&bytes, &after, &req), Ok(None));
        // A fleet write stamps the same way (`cachet_store::admin::handle_fleet`).
        assert_eq!(stamp_ms(5_000), 5_001);
        assert_eq!(stamp_ms(u64::MAX), u64::MAX);
    }

    fn meta_at(url: &str, stored_ms: u64) -> Meta {
        let mut m = object(stored_ms, &[]);
        m.url = url.into();
        m
    }

    #[test]
    fn log_adds_checks_dedupes_and_retires() {
        let mut log = BanLog::default();
        let a = log
            .add_ban("obj.http.x-url ~ ^/blog/alice/", 1_000, 10)
            .unwrap();
        assert!(a.lurker_friendly && a.replaced.is_none());
        let b = log.add_ban("req.url == /x", 2_000, 10).unwrap();
        assert!(!b.lurker_friendly);
        assert!(log.has_request_bans());
        assert_eq!(
            log.add_ban("req.url ==", 2_000, 10).unwrap_err().status(),
            400
        );
        // Stored before the first ban: banned by it; after both: kept.
        assert_eq!(
            log.check(
                &meta_at("/blog/alice/1", 500),
                &cachet_ban::Request::new("/blog/alice/1")
            ),
            Some(a.id)
        );
        assert_eq!(
            log.check(
                &meta_at("/blog/alice/1", 1_500),
                &cachet_ban::Request::new("/blog/alice/1")
            ),
            None
        );
        assert_eq!(
            log.check(&meta_at("/x", 1_500), &cachet_ban::Request::new("/x")),
            Some(b.id)
        );
        assert_eq!(
            log.check(&meta_at("/x", 2_500), &cachet_ban::Request::new("/x")),
            None
        );
        // Identical ban replaces the older one.
        let c = log
            .add_ban("obj.http.x-url ~ ^/blog/alice/", 3_000, 10)
            .unwrap();
        assert_eq!(c.replaced, Some(a.id));
        assert_eq!(log.entries.len(), 2);
        // Round trip through the store.
        let back = BanLog::try_from_json(&log.to_json()).unwrap();
        assert_eq!(back, log);
        assert!(BanLog::try_from_json(b"").unwrap().entries.is_empty());
        assert_eq!(BanLog::try_from_json(b"{nope").unwrap_err().status(), 503);
        // Retire everything before 2.5 s: the floor bans what was stored before it.
        assert_eq!(log.retire(12_500, Duration::from_secs(10)), 1);
        assert_eq!(log.trimmed_at_ms, 2_001);
        assert_eq!(
            log.check(&meta_at("/y", 2_000), &cachet_ban::Request::new("/y")),
            Some(0)
        );
        assert_eq!(
            log.check(&meta_at("/y", 2_001), &cachet_ban::Request::new("/y")),
            None
        );
    }

    #[test]
    fn log_is_bounded() {
        let mut log = BanLog::default();
        log.add_ban("req.url == /1", 1, 2).unwrap();
        log.add_ban("req.url == /2", 2, 2).unwrap();
        assert_eq!(
            log.add_ban("req.url == /3", 3, 2).unwrap_err().status(),
            429
        );
        // A duplicate replaces rather than grows.
        assert!(log.add_ban("req.url == /2", 4, 2).is_ok());
    }

    #[test]
    fn the_earlier_edge_layout_is_read_without_losing_a_ban() {
        let old = br#"{"floor_ms":5,"next_id":3,"bans":[{"id":2,"at_ms":9,"expr":"req.url == /b","lurker_friendly":false},{"id":1,"at_ms":7,"expr":"obj.http.x-url ~ ^/a","lurker_friendly":true}]}"#;
        let log = BanLog::try_from_json(old).unwrap();
        assert_eq!(log.trimmed_at_ms, 5);
        assert_eq!(log.entries.iter().map(|e| e.id).collect::<Vec<_>>(), [1, 2]);
        assert!(log.entries.iter().all(|e| e.kind == Kind::Ban));
        assert_eq!(log.next_id, 3);
        assert_eq!(
            log.check(&meta_at("/b", 8), &cachet_ban::Request::new("/b")),
            Some(2)
        );
    }

    #[test]
    fn soft_purges_never_ban_at_lookup() {
        let mut log = BanLog::default();
        log.append(&[entry(Kind::SoftPurge, "", Some("k"))], 10, 1_000, None)
            .unwrap();
        assert_eq!(
            log.check(&object(500, &["k"]), &cachet_ban::Request::new("/")),
            None
        );
    }
}
