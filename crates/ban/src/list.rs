//! The ban list: ordered bans, deduplication, indexed and linear checks, retirement.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, DefaultHasher};

use crate::error::BanError;
use crate::expr::BanExpr;
use crate::index::Index;
use crate::target::{BanRequest, BanTarget};
use crate::{MAX_SURROGATE_KEY_BYTES, SURROGATE_KEY_HEADER};

/// A ban's sequence number: bans are numbered 1, 2, 3, … in the order they are added, so
/// a larger id is a newer ban. [`BanId::ZERO`] stands "before every ban" and is the
/// checked-through mark of an object that has seen no ban.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BanId(pub u64);

impl BanId {
    /// Before every ban.
    pub const ZERO: BanId = BanId(0);
}

/// What [`BanList::add`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Added {
    /// The new ban.
    pub id: BanId,
    /// Whether it has only `obj.*` fields, so the lurker applies it in the background
    /// (Varnish Users Guide, "Lurker-Friendly Bans").
    pub lurker_friendly: bool,
    /// An older identical ban marked completed because the new one covers it.
    pub replaced: Option<BanId>,
}

/// The outcome of checking one object against the ban list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Verdict {
    /// A ban newer than the object matches it: the object must be dropped (a lookup
    /// treats it as a miss). `by` is one matching ban (not necessarily the newest).
    Banned {
        /// A matching ban.
        by: BanId,
    },
    /// No applicable ban matches. Store `checked_through` with the object and pass it to
    /// the next check so bans up to it are never tested again (Varnish moves the
    /// object's ban pointer the same way).
    Kept {
        /// The newest ban id at the time of the check.
        checked_through: BanId,
    },
}

impl Verdict {
    /// `true` for [`Verdict::Banned`].
    pub fn is_banned(self) -> bool {
        matches!(self, Verdict::Banned { .. })
    }
}

#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) added_at_s: f64,
    pub(crate) expr: BanExpr,
    pub(crate) completed: bool,
    pub(crate) lurker_friendly: bool,
}

/// Varnish's ban list, indexed.
///
/// Rules (Varnish Users Guide, "Bans"; `varnish-cli(7)`, `ban`):
///
/// * A ban applies only to objects inserted **strictly before** it: to object `o` when
///   `o.inserted_at_s() < ban.added_at_s` (an object inserted at the very second of a ban
///   counts as inserted after it). Times added must not go backwards; a smaller `now_s` is
///   raised to the newest ban's time so the list stays ordered.
/// * An object that survives a check records the newest ban id it was checked against
///   ([`Verdict::Kept`]); later checks start after it.
/// * Adding a ban identical to a live older one marks the older one **completed** (never
///   tested again): the new ban covers every object the old one could. Unlike Varnish,
///   bans reading `obj.ttl`/`obj.age` are not deduplicated, because their values are taken
///   at each ban's own time, so two identical texts can mean different things.
/// * Bans no live object can still need are discarded with
///   [`discard_through`](BanList::discard_through) /
///   [`discard_not_after`](BanList::discard_not_after) (the [`BanCache`](crate::BanCache)
///   lurker does this itself).
/// * `obj.ttl` and `obj.age` are read at the ban's `added_at_s`: `obj.ttl > 1h` bans
///   objects whose remaining TTL *when the ban was added* exceeded an hour, whenever the
///   test runs (Varnish stores the ban time and compares against it).
///
/// Scaling beyond Varnish: Varnish tests an old object against every newer ban, so a
/// lookup costs O(bans). Here each ban is filed under one condition an index can answer
/// — exact `==` (or `~ "^…$"`) on any string field, anchored prefix `~ "^/blog/alice/"`,
/// whitespace-token membership `~ "(^|\s)key(\s|$)"` (surrogate keys) — and a check
/// visits only the bans the object's values lead to, plus the bans no index answers.
/// [`check_linear`](BanList::check_linear) is Varnish's O(bans) scan, kept as the
/// reference.
#[derive(Debug)]
pub struct BanList {
    /// Sequence number of `slots[0]`.
    base: u64,
    slots: VecDeque<Slot>,
    index: Index,
    dedup: HashMap<u64, u64, BuildHasherDefault<DefaultHasher>>,
    /// Sequence numbers of `req.*` bans (live or completed), ascending.
    req_bans: VecDeque<u64>,
    live: usize,
    live_lurker: usize,
    /// Bans completed since the index was last built (the index still names them).
    dead_in_index: usize,
}

impl Default for BanList {
    /// Same as [`BanList::new`].
    fn default() -> Self {
        BanList::new()
    }
}

/// Rebuild the index once this many completed bans linger in it beyond the live count.
const REBUILD_SLACK: usize = 1024;

impl BanList {
    /// An empty list.
    pub fn new() -> Self {
        BanList {
            base: 1,
            slots: VecDeque::new(),
            index: Index::default(),
            dedup: HashMap::default(),
            req_bans: VecDeque::new(),
            live: 0,
            live_lurker: 0,
            dead_in_index: 0,
        }
    }

    /// Parses `expr` (see [`BanExpr`]) and adds it at time `now_s` (seconds).
    ///
    /// # Errors
    /// Any parse error of [`BanExpr::parse`]; [`BanError::BadTime`] when `now_s` is not
    /// finite. A refused ban changes nothing.
    pub fn add(&mut self, expr: &str, now_s: f64) -> Result<Added, BanError> {
        let e = BanExpr::parse(expr)?;
        self.add_expr(e, now_s)
    }

    /// Adds a ban on surrogate key `key`: the expression
    /// `obj.http.surrogate-key ~ "(^|\s)KEY(\s|$)"` (KEY regex-escaped), which matches an
    /// object whose [`BanTarget::surrogate_keys`] contain `key` as a whole token, and is
    /// lurker-friendly. Any ban of that shape, however it was added, is answered by the
    /// token index.
    ///
    /// # Errors
    /// [`BanError::BadSurrogateKey`] when `key` is empty, contains whitespace or is longer
    /// than [`MAX_SURROGATE_KEY_BYTES`]; [`BanError::BadTime`].
    pub fn add_surrogate_key_ban(&mut self, key: &str, now_s: f64) -> Result<Added, BanError> {
        let bad = |reason| BanError::BadSurrogateKey {
            key: key.chars().take(64).collect(),
            reason,
        };
        if key.is_empty() {
            return Err(bad("empty"));
        }
        if key.len() > MAX_SURROGATE_KEY_BYTES {
            return Err(bad("too long"));
        }
        if key.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("contains whitespace or a control character"));
        }
        let mut text = format!("obj.http.{SURROGATE_KEY_HEADER} ~ \"(^|\\s)");
        for c in regex::escape(key).chars() {
            if c == '"' || c == '\\' {
                text.push('\\');
            }
            text.push(c);
        }
        text.push_str("(\\s|$)\"");
        self.add(&text, now_s)
    }

    /// Adds a parsed ban at time `now_s` (seconds).
    ///
    /// # Errors
    /// [`BanError::BadTime`] when `now_s` is not finite.
    pub fn add_expr(&mut self, expr: BanExpr, now_s: f64) -> Result<Added, BanError> {
        if !now_s.is_finite() {
            return Err(BanError::BadTime(now_s));
        }
        let added_at_s = self.slots.back().map_or(now_s, |s| now_s.max(s.added_at_s));
        let seq = self.next_seq();
        let lurker_friendly = expr.is_lurker_friendly();
        let mut replaced = None;
        if !expr.is_time_relative() {
            let fp = expr.fingerprint();
            if let Some(&old) = self.dedup.get(&fp)
                && let Some(slot) = self.slot(old)
                && !slot.completed
                && slot.expr == expr
            {
                self.complete(old);
                replaced = Some(BanId(old));
            }
            self.dedup.insert(fp, seq);
        }
        self.index.insert(seq, &expr);
        if !lurker_friendly {
            self.req_bans.push_back(seq);
        }
        self.slots.push_back(Slot {
            added_at_s,
            expr,
            completed: false,
            lurker_friendly,
        });
        self.live += 1;
        if lurker_friendly {
            self.live_lurker += 1;
        }
        if replaced.is_some() {
            self.maybe_rebuild();
        }
        Ok(Added {
            id: BanId(seq),
            lurker_friendly,
            replaced,
        })
    }

    fn next_seq(&self) -> u64 {
        self.base + self.slots.len() as u64
    }

    pub(crate) fn slot(&self, seq: u64) -> Option<&Slot> {
        let i = usize::try_from(seq.checked_sub(self.base)?).ok()?;
        self.slots.get(i)
    }

    /// The newest ban id ever added ([`BanId::ZERO`] when none): the checked-through
    /// mark to store with an object inserted now.
    pub fn head(&self) -> BanId {
        BanId(self.next_seq() - 1)
    }

    /// The id of the newest ban added at or before `at_s` ([`BanId::ZERO`] if none is
    /// kept): the checked-through mark of an object inserted at `at_s`.
    pub fn head_at(&self, at_s: f64) -> BanId {
        let n = self.slots.partition_point(|s| s.added_at_s <= at_s);
        BanId(self.base + n as u64 - 1)
    }

    /// Bans kept in the list (live and completed).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// `true` when the list keeps no ban.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Bans still tested (not completed).
    pub fn live(&self) -> usize {
        self.live
    }

    /// Live bans that are lurker-friendly.
    pub fn live_lurker_friendly(&self) -> usize {
        self.live_lurker
    }

    /// Bans (live or completed) that no index answers: each lookup that reaches them
    /// tests them one by one, as Varnish does for every ban.
    pub fn unindexed(&self) -> usize {
        self.index.unindexed()
    }

    /// The kept bans, oldest first: id, time added (seconds), expression, completed flag.
    pub fn iter(&self) -> impl Iterator<Item = (BanId, f64, &BanExpr, bool)> + '_ {
        self.slots.iter().enumerate().map(|(i, s)| {
            (
                BanId(self.base + i as u64),
                s.added_at_s,
                &s.expr,
                s.completed,
            )
        })
    }

    /// Checks `obj`, looked up by `req`, against the bans that apply to it: those newer
    /// than `checked_through` and added after `obj.inserted_at_s()`. Uses the indexes:
    /// cost grows with the number of *candidate* bans (same exact value, prefixes of the
    /// value, shared surrogate keys, unindexed bans), not with the list's length.
    pub fn check<T, R>(&self, obj: &T, req: &R, checked_through: BanId) -> Verdict
    where
        T: BanTarget + ?Sized,
        R: BanRequest + ?Sized,
    {
        let start = self.start(obj, checked_through);
        match self.find(obj, Some(req), start, start, u64::MAX) {
            Some(by) => Verdict::Banned { by: BanId(by) },
            None => Verdict::Kept {
                checked_through: self.head(),
            },
        }
    }

    /// Checks `obj` against the live lurker-friendly (`obj.*`-only) bans that apply to it,
    /// ignoring `req.*` bans: what a background lurker that has no request can test
    /// (Varnish Users Guide, "Lurker-Friendly Bans"). Used by adapters whose objects live
    /// outside a [`BanCache`](crate::BanCache) (the Envoy filter's shared-data tier).
    pub fn check_objects_only<T>(&self, obj: &T, checked_through: BanId) -> Verdict
    where
        T: BanTarget + ?Sized,
    {
        let start = self.start(obj, checked_through);
        match self.find(
            obj,
            None::<&crate::target::Request>,
            u64::MAX,
            start,
            u64::MAX,
        ) {
            Some(by) => Verdict::Banned { by: BanId(by) },
            None => Verdict::Kept {
                checked_through: self.head(),
            },
        }
    }

    /// Same answer as [`check`](BanList::check), computed the way Varnish does: every
    /// applicable ban, newest first, one by one. O(bans); the reference for tests and
    /// benchmarks.
    pub fn check_linear<T, R>(&self, obj: &T, req: &R, checked_through: BanId) -> Verdict
    where
        T: BanTarget + ?Sized,
        R: BanRequest + ?Sized,
    {
        let start = self.start(obj, checked_through);
        let from = usize::try_from(start.saturating_sub(self.base)).unwrap_or(usize::MAX);
        for (i, s) in self.slots.iter().enumerate().rev() {
            if i < from {
                break;
            }
            if !s.completed && s.expr.matches(obj, Some(req), s.added_at_s) {
                return Verdict::Banned {
                    by: BanId(self.base + i as u64),
                };
            }
        }
        Verdict::Kept {
            checked_through: self.head(),
        }
    }

    /// First sequence number to test for `obj`.
    fn start<T: BanTarget + ?Sized>(&self, obj: &T, checked_through: BanId) -> u64 {
        let by_time = self.head_at(obj.inserted_at_s()).0 + 1;
        (checked_through.0.saturating_add(1))
            .max(by_time)
            .max(self.base)
    }

    /// A live ban matching `obj` among: `req.*` bans in `start_req..`, lurker-friendly
    /// bans in `start_obj..=end_obj`. With `req == None` only lurker-friendly bans.
    pub(crate) fn find<T, R>(
        &self,
        obj: &T,
        req: Option<&R>,
        start_req: u64,
        start_obj: u64,
        end_obj: u64,
    ) -> Option<u64>
    where
        T: BanTarget + ?Sized,
        R: BanRequest + ?Sized,
    {
        let start = if req.is_some() {
            start_req.min(start_obj)
        } else {
            start_obj
        };
        let mut found = None;
        self.index.candidates(obj, req, start, |seq| {
            let Some(s) = self.slot(seq) else {
                return false;
            };
            let applies = if s.lurker_friendly {
                seq >= start_obj && seq <= end_obj
            } else {
                req.is_some() && seq >= start_req
            };
            if applies && !s.completed && s.expr.matches(obj, req, s.added_at_s) {
                found = Some(seq);
                true
            } else {
                false
            }
        });
        found
    }

    /// `true` when a live `req.*` ban lies in `from..=to`.
    pub(crate) fn has_req_ban_in(&self, from: u64, to: u64) -> bool {
        let i = self.req_bans.partition_point(|&s| s < from);
        self.req_bans
            .range(i..)
            .take_while(|&&s| s <= to)
            .any(|&s| self.slot(s).is_some_and(|sl| !sl.completed))
    }

    fn complete(&mut self, seq: u64) {
        let Some(i) = seq
            .checked_sub(self.base)
            .and_then(|i| usize::try_from(i).ok())
        else {
            return;
        };
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        if slot.completed {
            return;
        }
        slot.completed = true;
        self.live -= 1;
        if slot.lurker_friendly {
            self.live_lurker -= 1;
        }
        self.dead_in_index += 1;
    }

    /// Marks every live lurker-friendly ban up to `through` completed: the lurker has
    /// tested all objects that could need them.
    pub(crate) fn complete_lurker_friendly_through(&mut self, through: u64) -> usize {
        let mut n = 0;
        if through < self.base {
            return 0;
        }
        let end = usize::try_from((through - self.base).saturating_add(1))
            .unwrap_or(usize::MAX)
            .min(self.slots.len());
        for i in 0..end {
            let s = &self.slots[i];
            if s.lurker_friendly && !s.completed {
                self.complete(self.base + i as u64);
                n += 1;
            }
        }
        self.maybe_rebuild();
        n
    }

    /// Drops every ban with id `<= through` (live or not): call it when every live object
    /// has been checked through `through`, or was inserted after it. Returns how many
    /// were dropped.
    pub fn discard_through(&mut self, through: BanId) -> usize {
        let mut n = 0;
        while self.base <= through.0 {
            let Some(slot) = self.slots.pop_front() else {
                break;
            };
            if !slot.completed {
                self.live -= 1;
                if slot.lurker_friendly {
                    self.live_lurker -= 1;
                }
            }
            // The index keeps naming it until the next rebuild.
            self.dead_in_index += 1;
            if self.req_bans.front() == Some(&self.base) {
                self.req_bans.pop_front();
            }
            let fp = slot.expr.fingerprint();
            if self.dedup.get(&fp) == Some(&self.base) {
                self.dedup.remove(&fp);
            }
            self.base += 1;
            n += 1;
        }
        self.maybe_rebuild();
        n
    }

    /// Drops every ban added at or before `at_s`: call it with the insertion time of the
    /// oldest live object (such bans cannot apply to any live object, since bans apply
    /// only to objects inserted strictly before them).
    pub fn discard_not_after(&mut self, at_s: f64) -> usize {
        let through = self.head_at(at_s);
        self.discard_through(through)
    }

    /// Rebuilds the index when completed or discarded bans dominate it, so its memory and
    /// the work of skipping dead entries stay proportional to live bans (amortized O(1)
    /// per ban).
    fn maybe_rebuild(&mut self) {
        if self.dead_in_index <= self.live + REBUILD_SLACK {
            return;
        }
        let mut index = Index::default();
        for (i, s) in self.slots.iter().enumerate() {
            if !s.completed {
                index.insert(self.base + i as u64, &s.expr);
            }
        }
        self.index = index;
        self.dead_in_index = 0;
        let base = self.base;
        let slots = &self.slots;
        self.req_bans.retain(|&s| {
            usize::try_from(s.wrapping_sub(base))
                .ok()
                .and_then(|i| slots.get(i))
                .is_some_and(|sl| s >= base && !sl.completed)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::{Object, Request};

    #[test]
    fn check_objects_only_ignores_req_bans() {
        let mut l = BanList::new();
        let _ = l.add(r#"req.url ~ "^/a""#, 10.0);
        let obj = Object::new("/a/1", 5.0).with_header("x-k", "v");
        // A req.* ban can only be tested with a request; without one it never matches.
        assert!(!l.check_objects_only(&obj, BanId::ZERO).is_banned());
        assert!(
            l.check(&obj, &Request::new("/a/1"), BanId::ZERO)
                .is_banned()
        );
        let _ = l.add("obj.http.x-k == v", 20.0);
        assert!(l.check_objects_only(&obj, BanId::ZERO).is_banned());
        // Objects stored after the ban are not affected.
        let newer = Object::new("/a/1", 25.0).with_header("x-k", "v");
        assert!(!l.check_objects_only(&newer, BanId::ZERO).is_banned());
    }

    #[test]
    fn applies_only_to_older_objects() {
        let mut list = BanList::new();
        let old = Object::new("/a", 10.0);
        let new = Object::new("/a", 20.0);
        let req = Request::new("/a");
        let a = list.add("req.url == /a", 20.0).unwrap();
        assert!(list.check(&old, &req, BanId::ZERO).is_banned());
        assert!(!list.check(&new, &req, BanId::ZERO).is_banned());
        assert!(!list.check(&old, &req, a.id).is_banned());
    }

    #[test]
    fn dedup_completes_the_older_ban() {
        let mut list = BanList::new();
        let a = list.add("obj.status == 500", 1.0).unwrap();
        let b = list.add("obj.status   ==  \"500\"", 2.0).unwrap();
        assert_eq!(b.replaced, Some(a.id));
        assert_eq!(list.live(), 1);
        let c = list.add("obj.ttl > 1h", 3.0).unwrap();
        let d = list.add("obj.ttl > 1h", 4.0).unwrap();
        assert_eq!((c.replaced, d.replaced), (None, None));
        let obj = Object::new("/", 0.0).with_status(500);
        assert_eq!(
            list.check(&obj, &Request::new("/"), BanId::ZERO),
            Verdict::Banned { by: b.id }
        );
    }

    #[test]
    fn discard_and_rebuild() {
        let mut list = BanList::new();
        for i in 0..3000 {
            let _ = list.add(&format!("req.url == /{i}"), f64::from(i)).unwrap();
        }
        assert_eq!(list.discard_not_after(1999.0), 2000);
        assert_eq!(list.len(), 1000);
        let obj = Object::new("/", -1.0);
        assert!(
            !list
                .check(&obj, &Request::new("/5"), BanId::ZERO)
                .is_banned()
        );
        assert!(
            list.check(&obj, &Request::new("/2500"), BanId::ZERO)
                .is_banned()
        );
        assert!(list.add("req.url == x", f64::NAN).is_err());
    }
}
