//! One worker's view of the two-tier cache: lookups through the in-VM tier and the shared
//! tier with bans, soft purges and variants applied; fills and revalidations applied as the
//! HTTP engine decides (`cachet_http::fill`); the lurker. Pure over [`SharedData`]: the
//! Envoy filter drives it with proxy-wasm shared data, the tests with [`crate::MemoryStore`].
//!
//! What it counts (evictions, bytes, conflicts, …) accumulates in [`Counts`] until the
//! adapter takes them ([`Cache::take_counts`]) and writes its metrics, so a hit costs no
//! metric call here.

use std::rc::Rc;

use cachet_http::vary;
use cachet_policy::Policy;
use cachet_policy::object::{self, Meta};
use cachet_refresh::{Draw, EarlyRefresh, EntryTimes, Freshness, Timestamp, decide};

use crate::SharedData;
use crate::bans::{self, BanState, Check, Req};
use crate::tier::{LocalTier, SharedTier, StoredObject, shard_count, slot_count};

/// What one request looks up and fills: its cache key (a variant's key once
/// [`Cache::find`] resolved it), that key's shared-tier slot, the normalized target URL
/// (bans on `obj.http.x-url`), the client's request fields (request-side bans, variant
/// selection) and the route's early refresh.
#[derive(Debug, Clone)]
pub struct Wanted {
    /// Cache key.
    pub key: String,
    /// Shared-tier slot of `key` (the collapsing lock's id too).
    pub slot: u32,
    /// Normalized request target (path and query).
    pub target: String,
    /// The client's request fields (names lower-case, values bytes).
    pub fields: Vec<(String, Vec<u8>)>,
    /// The route's early refresh (`cachet_refresh::decide`).
    pub early: EarlyRefresh,
}

/// Which level of the two-tier cache served a hit (L1: the worker's own, L2: shared by
/// every worker). Named apart from a fleet's edge and shield tiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// The worker's in-VM tier.
    Local,
    /// The shared-data tier.
    Shared,
}

/// An object [`Cache::find`] located, with what this request makes of it.
#[derive(Debug, Clone)]
pub struct Located {
    /// The object (shared with the in-VM tier).
    pub obj: Rc<StoredObject>,
    /// Its state for this request (`Fresh`, `RefreshAhead`, `Stale`, `Expired`).
    pub fresh: Freshness,
    /// Its times (what `fresh` was decided on).
    pub times: EntryTimes,
    /// A soft purge covers it: the object is no longer fresh, whatever its times say;
    /// `fresh` is then `Fresh` for an object its times call fresh (refresh-ahead is moot)
    /// and [`cachet_http::lookup`] serves it stale within its grace, else revalidates it
    /// (the one soft-purge rule of both platforms, issue 27 item 10).
    pub soft_purged: bool,
    /// Where it was found.
    pub level: Level,
}

/// The request's variant cannot be keyed (a varying field's value over the bound,
/// `cachet_http::vary::variant_key`): answer it uncached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unkeyable;

/// What the cache did since the adapter last asked ([`Cache::take_counts`]): counters
/// to add, gauges to set (`None`: unchanged).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Objects evicted from the shared tier.
    pub evictions: u64,
    /// Objects evicted from the in-VM tier.
    pub local_evictions: u64,
    /// Inserts abandoned after repeated directory conflicts.
    pub store_conflicts: u64,
    /// 304s that freshened a stored object.
    pub revalidated: u64,
    /// Revalidations answered with a 5xx or a failed callout.
    pub origin_errors: u64,
    /// Objects the lurker examined.
    pub lurker_examined: u64,
    /// Objects the lurker removed.
    pub lurker_evicted: u64,
    /// Completed lurker passes.
    pub lurker_passes: u64,
    /// Gauge: bytes accounted in the shared tier.
    pub bytes_stored: Option<u64>,
    /// Gauge: objects in the shared tier.
    pub objects: Option<u64>,
    /// Gauge: live ban-log entries.
    pub bans: Option<u64>,
}

/// One worker's cache: its handle on the shared tier, its in-VM tier, its ban replica.
#[derive(Debug)]
pub struct Cache {
    shared: SharedTier,
    local: LocalTier,
    bans: BanState,
    rng: u64,
    counts: Counts,
    /// Objects served since the last [`Cache::report_served`]: `(slot, version)`.
    served: std::collections::HashSet<(u32, u64)>,
    /// When a lookup last read the shared ban epoch, ms ([`Cache::sync_bans_for_lookup`]).
    bans_read_ms: u64,
    /// Changes to the shared tier's running totals (bytes, objects) from this VM's
    /// inserts and lurker removals since the last [`Cache::report_served`], which adds them in one write.
    pending_totals: (i64, i64),
}

/// Most served objects remembered between two reports (the rest are not marked visited).
const MAX_SERVED: usize = 4096;

impl Cache {
    /// A cache with a shared tier bounded by `shared_bytes` and an in-VM tier by
    /// `local_bytes` (0 disables it); `seed` seeds XFetch's draws; `hash_key` is the
    /// process's slot-hash key ([`crate::tier::hash_key`]).
    pub fn new(shared_bytes: u64, local_bytes: u64, seed: u64, hash_key: [u64; 2]) -> Self {
        Self {
            shared: SharedTier {
                slots: slot_count(shared_bytes),
                bound: shared_bytes,
                key: hash_key,
                shards: shard_count(shared_bytes),
            },
            local: LocalTier::new(local_bytes),
            bans: BanState::default(),
            rng: seed | 1,
            counts: Counts::default(),
            served: std::collections::HashSet::new(),
            bans_read_ms: 0,
            pending_totals: (0, 0),
        }
    }

    /// Reports the objects served since the last report to the shared directory (CLOCK's
    /// reference bits: [`SharedTier::mark_visited`], one write per shard), and adds this
    /// VM's inserts and lurker removals since then to the running totals behind the
    /// `bytes_stored` and `objects` gauges (one read and one write, instead of both on every insert: the
    /// gauges lag by at most a tick); the adapter calls it on its tick.
    pub fn report_served(&mut self, sd: &dyn SharedData) {
        let served: Vec<(u32, u64)> = self.served.drain().collect();
        self.shared.mark_visited(sd, &served);
        let (bytes, objects) = std::mem::take(&mut self.pending_totals);
        if (bytes, objects) != (0, 0) {
            let (b, n) = SharedTier::add_totals(sd, bytes, objects);
            self.counts.bytes_stored = Some(b);
            self.counts.objects = Some(n);
        }
    }

    fn note_served(&mut self, slot: u32, obj: &StoredObject) {
        if self.served.len() < MAX_SERVED {
            self.served.insert((slot, obj.h.version));
        }
    }

    /// The shared-tier slot of `key`.
    pub fn slot_of(&self, key: &str) -> u32 {
        self.shared.slot_of(key)
    }

    /// What happened since the last call (and resets it).
    pub fn take_counts(&mut self) -> Counts {
        std::mem::take(&mut self.counts)
    }

    /// Bytes held in the in-VM tier.
    pub fn local_bytes(&self) -> u64 {
        self.local.bytes()
    }

    /// Live ban-log entries at the last sync.
    pub fn live_bans(&self) -> usize {
        self.bans.live()
    }

    /// xorshift64*: XFetch's draws and the workspace's verification sampling.
    pub fn draw(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Catches up with the shared ban log when its epoch moved (one 8-byte read
    /// otherwise).
    pub fn sync_bans(&mut self, sd: &dyn SharedData) {
        if self.bans.sync(sd, &mut self.local) {
            self.counts.bans = Some(self.bans.live() as u64);
        }
    }

    /// [`Self::sync_bans`] for a lookup at `now_ms`, unless this cache read the shared ban
    /// epoch less than `staleness` ago (`[envoy].ban_staleness`; zero: always). Returns
    /// whether it read it. The other syncs (after a local ban, on every tick) read it
    /// regardless, so the replica is never older than `staleness` or the tick period,
    /// whichever is smaller.
    pub fn sync_bans_for_lookup(
        &mut self,
        sd: &dyn SharedData,
        now_ms: u64,
        staleness: std::time::Duration,
    ) -> bool {
        let bound = u64::try_from(staleness.as_millis()).unwrap_or(u64::MAX);
        // A clock that went backwards counts as due: the bound never stretches.
        let since = now_ms.checked_sub(self.bans_read_ms);
        if bound > 0 && since.is_some_and(|d| d < bound) {
            return false;
        }
        self.bans_read_ms = now_ms;
        self.sync_bans(sd);
        true
    }

    /// The object `want` is served from: the primary key's object, or, when the primary
    /// key holds a vary marker, the request's variant (`want` then points at it). The
    /// marker is read only when the primary lookup found nothing servable, so a plain hit
    /// costs one lookup.
    ///
    /// When nothing is usable, the newest copy the lookup read from the shared tier (past
    /// its keep, not a marker, not banned) comes back with `fresh` =
    /// [`Freshness::Miss`]: what a request that waited for a fetch is answered with, even
    /// when the object's TTL ran out during the fetch (objects are dated from their fill's
    /// request, so a TTL shorter than the fetch is over on arrival), and what a request
    /// about to wait saw. It costs no read of its own.
    ///
    /// # Errors
    /// [`Unkeyable`] when the request's variant can't be keyed.
    pub fn find(
        &mut self,
        sd: &dyn SharedData,
        want: &mut Wanted,
        now: Timestamp,
    ) -> Result<Option<Located>, Unkeyable> {
        let mut marker = None;
        let mut newest = None;
        let mut found = self.lookup(sd, want, now, &mut marker, &mut newest);
        if found.is_none() {
            let primary = want.key.clone();
            // `lookup` found nothing, so it read both tiers under the key: a vary marker
            // there is in `marker` (not read from shared data again).
            self.resolve_variant(want, marker.as_deref())?;
            if want.key != primary {
                newest = None;
                found = self.lookup(sd, want, now, &mut None, &mut newest);
            }
        }
        if let Some(f) = &found {
            self.note_served(want.slot, &f.obj);
            return Ok(found);
        }
        Ok(newest.map(|obj| Located {
            times: obj.h.meta.times,
            fresh: Freshness::Miss,
            obj,
            soft_purged: false,
            level: Level::Shared,
        }))
    }

    /// [`classify`] with this cache's ban replica and draw.
    fn classify(
        &mut self,
        obj: &StoredObject,
        want: &Wanted,
        now: Timestamp,
    ) -> Option<(Freshness, EntryTimes, bool)> {
        let req = Req {
            url: &want.target,
            headers: &want.fields,
        };
        let check = self.bans.check(obj, &req);
        let draw = Draw::from_bits(self.draw());
        classify(obj, check, &want.early, now, draw)
    }

    /// Looks `want.key` up in both tiers: a fresh in-VM copy at once; otherwise the
    /// shared tier, whose newer version (another worker refreshed it) wins. When it
    /// returns `None` it has read both tiers, and `marker` holds the vary marker stored
    /// under the key if either tier has one (in-VM first, as [`Self::vary_marker`] reads
    /// them), so the variant step need not read shared data again; `newest` holds the
    /// shared copy when it was of no use only for being past its keep.
    fn lookup(
        &mut self,
        sd: &dyn SharedData,
        want: &Wanted,
        now: Timestamp,
        marker: &mut Option<Rc<StoredObject>>,
        newest: &mut Option<Rc<StoredObject>>,
    ) -> Option<Located> {
        let local = match self.local.get(&want.key) {
            Some(o) if o.h.meta.is_vary_marker() => {
                *marker = Some(o);
                None
            }
            other => other,
        };
        let mut best = None;
        if let Some(obj) = local {
            match self.classify(&obj, want, now) {
                Some((fresh, times, soft_purged)) => {
                    let found = Located {
                        obj,
                        fresh,
                        times,
                        soft_purged,
                        level: Level::Local,
                    };
                    if fresh == Freshness::Fresh && !soft_purged {
                        return Some(found);
                    }
                    best = Some(found);
                }
                None => self.local.remove(&want.key),
            }
        }
        let shared = self.shared.get(sd, &want.key)?;
        if shared.h.meta.is_vary_marker() {
            if marker.is_none() {
                *marker = Some(Rc::new(shared));
            }
            return None;
        }
        if best
            .as_ref()
            .is_some_and(|f| f.obj.h.version >= shared.h.version)
        {
            return best;
        }
        let c = self.classify(&shared, want, now);
        let obj = Rc::new(shared);
        if let Some((fresh, times, soft_purged)) = c {
            self.counts.local_evictions += self.local.put(Rc::clone(&obj));
            return Some(Located {
                obj,
                fresh,
                times,
                soft_purged,
                level: Level::Shared,
            });
        }
        if best.is_none() && !obj.h.meta.pass {
            let req = Req {
                url: &want.target,
                headers: &want.fields,
            };
            if self.bans.check(&obj, &req) != Check::Banned {
                *newest = Some(obj);
            }
        }
        best
    }

    /// The vary marker stored under `key`, if the object there is one (in-VM tier first).
    fn vary_marker(&mut self, sd: &dyn SharedData, key: &str) -> Option<Rc<StoredObject>> {
        let obj = match self.local.get(key) {
            Some(o) => o,
            None => Rc::new(self.shared.get(sd, key)?),
        };
        obj.h.meta.is_vary_marker().then_some(obj)
    }

    /// Points `want` at the variant its request selects when the URL's primary key holds
    /// a vary marker (`marker`, as [`Self::lookup`] found it; [`variant_of`]).
    fn resolve_variant(
        &mut self,
        want: &mut Wanted,
        marker: Option<&StoredObject>,
    ) -> Result<(), Unkeyable> {
        if let Some(k) = variant_of(&want.key, marker, &want.fields)? {
            want.slot = self.shared.slot_of(&k);
            want.key = k;
        }
        Ok(())
    }

    /// [`place`] over both tiers: the vary marker read and written here.
    fn place_variant(
        &mut self,
        sd: &dyn SharedData,
        p: &Policy,
        want: &Wanted,
        obj: StoredObject,
        now: Timestamp,
    ) -> (StoredObject, bool) {
        let (obj, ok, marker) = place(p, want, obj, |k| self.vary_marker(sd, k), now);
        if let Some(m) = marker {
            self.insert(sd, m, now);
        }
        (obj, ok)
    }

    /// Inserts into both tiers; returns the in-VM handle.
    pub fn insert(
        &mut self,
        sd: &dyn SharedData,
        mut obj: StoredObject,
        now: Timestamp,
    ) -> Rc<StoredObject> {
        let r = self.shared.insert(sd, &mut obj, now.as_millis());
        if r.stored {
            self.counts.evictions += r.evicted;
            self.pending_totals.0 += r.bytes_delta;
            self.pending_totals.1 += r.objects_delta;
        } else if r.conflict {
            self.counts.store_conflicts += 1;
        }
        let obj = Rc::new(obj);
        self.counts.local_evictions += self.local.put(Rc::clone(&obj));
        obj
    }

    /// Keeps `inflated` (the object's body decoded for an identity client) with the in-VM
    /// copy of `obj`, so the next identity client skips the inflate
    /// ([`LocalTier::enrich`]).
    pub fn keep_identity(&mut self, obj: &StoredObject, inflated: Vec<u8>) {
        self.counts.local_evictions += self.local.enrich(Rc::new(obj.with_identity(inflated)));
    }

    /// Stores `obj` for `want` in both tiers: an object the engine said to store
    /// (`cachet_http::fill`), under the request's variant key when the origin varies (the
    /// URL's primary key then holds a vary marker listing the variants, RFC 9111 §4.1), or
    /// a hit-for-pass marker under `want.key`. Returns the object and whether it was
    /// stored: `false` when the URL already has `[edge].max_variants` variants or the
    /// request's variant can't be keyed (the answer then goes to this client only).
    pub fn put(
        &mut self,
        sd: &dyn SharedData,
        p: &Policy,
        want: &Wanted,
        obj: StoredObject,
        now: Timestamp,
    ) -> (Rc<StoredObject>, bool) {
        if obj.h.meta.pass {
            return (self.insert(sd, obj, now), true);
        }
        match self.place_variant(sd, p, want, obj, now) {
            (obj, true) => (self.insert(sd, obj, now), true),
            (obj, false) => (Rc::new(obj), false),
        }
    }

    /// Writes `fresh`, a 304's freshened copy of `base` (found for `want`), to both tiers
    /// under a new version (so other workers' in-VM copies are replaced on their next
    /// non-fresh lookup), unless a ban or purge added while the request was out covers
    /// `base` (a 304 must not give it a new insertion time) or another fetch stored a newer
    /// object meanwhile: then nothing is written. Returns the copy and whether it was
    /// written.
    pub fn freshen(
        &mut self,
        sd: &dyn SharedData,
        want: &Wanted,
        base: &StoredObject,
        fresh: StoredObject,
        now: Timestamp,
    ) -> (Rc<StoredObject>, bool) {
        self.sync_bans(sd);
        let req = Req {
            url: &want.target,
            headers: &want.fields,
        };
        let banned = self.bans.check(base, &req) == Check::Banned;
        let current = self.shared.get(sd, &base.h.key);
        if banned || current.is_some_and(|c| c.h.version > base.h.version) {
            return (Rc::new(fresh), false);
        }
        self.counts.revalidated += 1;
        (self.insert(sd, fresh, now), true)
    }

    /// One lurker step over the shared tier (Varnish's ban lurker): examines up to
    /// `budget` directory entries after `cursor` (by version), removing those banned by a
    /// lurker-friendly ban, stored before the ban log's floor, or past their keep window.
    /// Returns the next cursor, 0 after a full pass. A full pass that started at
    /// `retire.pass_started_ms` retires what it completed ([`bans::retire_lurked`]),
    /// entries older than `retire.retention` ([`bans::retire_expired`]) and entries older
    /// than every stored object.
    pub fn lurk(
        &mut self,
        sd: &dyn SharedData,
        cursor: u64,
        budget: usize,
        now_ms: u64,
        retire: &Retirement,
    ) -> u64 {
        // The cursor is (shard << 56) | the last version examined in that shard.
        let shards = self.shared.shards.max(1);
        let (mut shard, mut after) = (
            u32::try_from(cursor >> 56).unwrap_or(0),
            cursor & ((1 << 56) - 1),
        );
        let mut examined = 0;
        while shard < shards {
            let dir = self.shared.dir(sd, shard);
            let from = after;
            for e in dir.entries.iter().filter(|e| e.version > from) {
                if examined >= budget {
                    return (u64::from(shard) << 56) | after;
                }
                examined += 1;
                self.counts.lurker_examined += 1;
                after = e.version;
                let obj = SharedTier::get_slot(sd, e.slot);
                let gone = match &obj {
                    None => true,
                    Some(o) if o.h.version != e.version => true,
                    Some(o) => e.end_ms <= now_ms || self.bans.check_objects_only(o),
                };
                let clear = obj.as_ref().is_some_and(|o| o.h.version == e.version);
                if gone && let Some(size) = self.shared.remove(sd, e.slot, e.version, clear) {
                    self.counts.lurker_evicted += 1;
                    // Added to the running totals on the next tick, as inserts are; the
                    // gauges are set from the shards themselves at the end of the pass.
                    self.pending_totals.0 -= i64::from(size);
                    self.pending_totals.1 -= 1;
                }
            }
            shard += 1;
            after = 0;
        }
        self.counts.lurker_passes += 1;
        let (mut bytes, mut objects, mut oldest) = (0, 0, now_ms);
        for shard in 0..shards {
            let dir = self.shared.dir(sd, shard);
            bytes += dir.bytes;
            objects += dir.entries.len() as u64;
            oldest = dir
                .entries
                .iter()
                .map(|e| e.stored_at_ms)
                .fold(oldest, u64::min);
        }
        self.counts.bytes_stored = Some(bytes);
        self.counts.objects = Some(objects);
        let retired = bans::retire_lurked(
            sd,
            retire.pass_started_ms.saturating_sub(retire.fetch_bound_ms),
        ) + bans::retire_expired(sd, now_ms, retire.retention)
            + bans::trim_not_after(sd, oldest.min(now_ms).saturating_sub(retire.fetch_bound_ms));
        if retired > 0 {
            self.sync_bans(sd);
        }
        0
    }

    /// The lurker, run by one worker at a time: takes (or keeps) the lease in
    /// [`LURKER_KEY`] for `lease_ms` when it is free, expired or already `me`'s, then runs
    /// one [`Self::lurk`] step from the shared cursor (a pass starting at cursor 0 records
    /// its start). Returns whether `me` holds the lease (its other once-per-fleet duties,
    /// such as polling the ban feed, follow it).
    pub fn lurk_if_leased(
        &mut self,
        sd: &dyn SharedData,
        me: u64,
        now_ms: u64,
        lease_ms: u64,
        budget: usize,
        retire: Retirement,
    ) -> bool {
        let (v, cas) = sd.get(LURKER_KEY);
        let v = v.unwrap_or_default();
        let field = |o: usize| -> u64 {
            v.get(o..o + 8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_le_bytes)
        };
        let (owner, lease_end, cursor, started) = (field(0), field(8), field(16), field(24));
        if owner != me && lease_end > now_ms {
            return false;
        }
        let started = if cursor == 0 { now_ms } else { started };
        let retire = Retirement {
            pass_started_ms: started,
            ..retire
        };
        let next = self.lurk(sd, cursor, budget, now_ms, &retire);
        let mut out = Vec::with_capacity(32);
        for f in [me, now_ms + lease_ms, next, started] {
            out.extend_from_slice(&f.to_le_bytes());
        }
        // Losing this CAS means another worker took the lease meanwhile: it lurks next.
        sd.set(LURKER_KEY, &out, cas)
    }
}

/// What the lurker may retire after a full pass ([`Cache::lurk`]).
#[derive(Debug, Clone, Copy)]
pub struct Retirement {
    /// When the completed pass started, ms since the epoch (set by
    /// [`Cache::lurk_if_leased`]).
    pub pass_started_ms: u64,
    /// The longest an origin fetch can be out, ms (`[origin].first_byte_timeout`, which
    /// bounds `dispatch_http_call`): an answer stamped before an entry may still arrive
    /// this long after it.
    pub fetch_bound_ms: u64,
    /// `[bans].retention`: older entries are retired and raise the floor.
    pub retention: std::time::Duration,
}

/// Shared-data key of the lurker lease: owner, lease end (ms), cursor (`u64` LE each).
pub const LURKER_KEY: &str = "cachet.lurker";

/// Freshness of `obj` for a request after the ban verdict `check` (`draw`: XFetch's),
/// the times it was decided on, and whether a soft purge covers it; `None` when the
/// object is of no use (banned, past its keep window, an expired hit-for-pass marker).
/// The one rule of every Envoy storage (the filter's two tiers, the dynamic module's
/// process-wide store).
///
/// A soft purge does not change the object's times: like Fastly's soft-purge bit
/// (Viceroy's `ObjectMeta::is_fresh`), it only ends freshness; the object stays
/// servable stale until its own grace ends (`stored_at + ttl + grace`), then
/// revalidatable within keep. [`cachet_http::lookup::next`] applies the rule for both
/// platforms (issue 27 item 10).
pub fn classify(
    obj: &StoredObject,
    check: Check,
    early: &EarlyRefresh,
    now: Timestamp,
    draw: Draw,
) -> Option<(Freshness, EntryTimes, bool)> {
    let times = obj.h.meta.times;
    let soft_purged = match check {
        Check::Banned => return None,
        Check::SoftPurged(_) => true,
        Check::Clean => false,
    };
    match decide(Some(&times), now, early, draw) {
        Freshness::Fresh | Freshness::RefreshAhead if soft_purged => {
            Some((Freshness::Fresh, times, true))
        }
        f @ (Freshness::Fresh | Freshness::RefreshAhead) => Some((f, times, false)),
        f @ (Freshness::Stale | Freshness::Expired) if !obj.h.meta.pass => {
            Some((f, times, soft_purged))
        }
        _ => None,
    }
}

/// The key of the variant a request for `key` selects (its `fields`, RFC 9111 §4.1) when
/// the URL's primary key holds the vary marker `marker`; `None` when `key` is a variant's
/// already or nothing varies.
///
/// # Errors
/// [`Unkeyable`] when a varying field's value is over the bound
/// (`cachet_http::vary::variant_key`).
pub fn variant_of(
    key: &str,
    marker: Option<&StoredObject>,
    fields: &[(String, Vec<u8>)],
) -> Result<Option<String>, Unkeyable> {
    let Some(marker) = marker.filter(|_| !vary::is_variant_key(key)) else {
        return Ok(None);
    };
    vary::variant_key(key, &marker.h.meta.vary_fields, fields)
        .map(Some)
        .ok_or(Unkeyable)
}

/// Where a fill's object is stored. An object whose origin `Vary` names request fields
/// is one variant of its URL (RFC 9111 §4.1): it goes under its variant key, and the
/// primary key holds a vary marker listing the fields and the variants stored so far
/// (`marker_at` reads the marker stored under a primary key). Returns the object (its key
/// set), whether it may be stored (`false` when the URL already has `[edge].max_variants`
/// variants or the request's variant can't be keyed: answer it uncached), and the new
/// marker to store first, if the variant is new.
pub fn place<M: std::ops::Deref<Target = StoredObject>>(
    p: &Policy,
    want: &Wanted,
    mut obj: StoredObject,
    marker_at: impl FnOnce(&str) -> Option<M>,
    now: Timestamp,
) -> (StoredObject, bool, Option<StoredObject>) {
    let fields = obj.h.meta.vary_fields.clone();
    if fields.is_empty() {
        return (obj, true, None);
    }
    let primary = want
        .key
        .split(vary::VARIANT_SEPARATOR)
        .next()
        .unwrap_or(&want.key)
        .to_owned();
    let key = if vary::is_variant_key(&want.key) {
        want.key.clone()
    } else {
        match vary::variant_key(&primary, &fields, want.fields.as_slice()) {
            Some(k) => k,
            None => return (obj, false, None),
        }
    };
    let mut variants = marker_at(&primary)
        .filter(|m| m.h.meta.vary_fields == fields)
        .map(|m| m.h.meta.variants.clone())
        .unwrap_or_default();
    let mut new_marker = None;
    if !variants.contains(&key) {
        if variants.len() >= p.config().edge.max_variants {
            return (obj, false, None);
        }
        variants.push(key.clone());
        let t = obj.h.meta.times;
        let hold = t.ttl.saturating_add(t.grace).saturating_add(t.keep);
        let mut marker = Meta::vary_marker(&obj.h.meta.route, now, hold, fields);
        marker.host.clone_from(&obj.h.meta.host);
        marker.url.clone_from(&obj.h.meta.url);
        marker.surrogate_keys.clone_from(&obj.h.meta.surrogate_keys);
        marker.tag = object::object_tag(&primary);
        marker.variants = variants;
        new_marker = Some(StoredObject::new(primary, marker, Vec::new()));
    }
    obj.h.key = key;
    (obj, true, new_marker)
}
