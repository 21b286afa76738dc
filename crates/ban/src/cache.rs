//! A ban list with the objects it guards: lookups that remember what they checked, and the background lurker.

use crate::list::{BanId, BanList, Verdict};
use crate::target::{BanRequest, BanTarget, Request};

/// Default [`BanCache::lurker_age_s`]: 60 s, Varnish's `ban_lurker_age` default — the
/// lurker leaves bans younger than this to lookups, so frequently requested objects are
/// checked on the request path and the lurker works on settled bans.
pub const DEFAULT_LURKER_AGE_S: f64 = 60.0;

/// A handle to an object in a [`BanCache`]. Stale handles (the object was removed, banned
/// or expired) are detected, never confused with a later object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjectId {
    index: u32,
    generation: u32,
}

/// Why the lurker removed an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    /// A lurker-friendly ban matched it.
    Banned(BanId),
    /// Its TTL, grace and keep have all run out (`ttl_s_at(now) + grace + keep <= 0`).
    Expired,
}

/// What one [`Lurker::step`] did.
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use]
pub struct LurkerProgress {
    /// Objects visited (at most the step's budget).
    pub examined: usize,
    /// Objects that had lurker-friendly bans to test.
    pub tested: usize,
    /// Objects removed, with the reason; the adapter drops them from its store.
    pub evicted: Vec<(ObjectId, Eviction)>,
    /// Lurker-friendly bans marked completed at the end of a pass (every object that
    /// could need them has been tested).
    pub completed_bans: usize,
    /// Bans discarded at the end of a pass (every live object was checked past them).
    pub discarded_bans: usize,
    /// A pass over all objects ended in this step.
    pub pass_finished: bool,
    /// Nothing to do: the ban list is empty.
    pub idle: bool,
}

#[derive(Debug)]
struct Entry<T> {
    obj: T,
    /// Every ban `<= cursor` is settled for this object.
    cursor: u64,
    /// Every lurker-friendly ban `<= lurk` is settled for this object.
    lurk: u64,
}

#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    entry: Option<Entry<T>>,
}

#[derive(Debug, Clone, Copy)]
struct Pass {
    /// Newest ban old enough to lurk when the pass started.
    target: u64,
    /// Next object slot to visit.
    pos: usize,
    /// Smallest checked-through mark seen (including objects inserted during the pass).
    min_cursor: u64,
    /// An object that may need bans `<= target` was inserted behind `pos`.
    dirty: bool,
}

/// A [`BanList`] together with the metadata of the objects it guards.
///
/// * [`insert`](BanCache::insert) registers an object, checked through the newest ban
///   added at or before its `inserted_at_s` (so bans apply only to older objects).
/// * [`lookup`](BanCache::lookup) is Varnish's lookup-time ban check: it tests the bans
///   the object has not been checked against (through the indexes), removes the object
///   when one matches, and otherwise records the newest ban id.
/// * [`lurker`](BanCache::lurker) is Varnish's ban lurker ("Lurker-Friendly Bans"): in
///   budgeted steps it tests objects against lurker-friendly (`obj.*`-only) bans, evicts
///   the matches, marks bans completed once every object was tested, and discards bans
///   every live object is past, so lookups stop paying for them and the list shrinks.
///
/// Objects must be inserted with `inserted_at_s` no earlier than the newest discarded
/// ban (in practice: insert at `now`).
#[derive(Debug)]
pub struct BanCache<T> {
    list: BanList,
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
    lurker_age_s: f64,
    pass: Option<Pass>,
}

impl<T: BanTarget> Default for BanCache<T> {
    /// Same as [`BanCache::new`].
    fn default() -> Self {
        BanCache::new()
    }
}

impl<T: BanTarget> BanCache<T> {
    /// An empty cache with [`DEFAULT_LURKER_AGE_S`].
    pub fn new() -> Self {
        BanCache {
            list: BanList::new(),
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
            lurker_age_s: DEFAULT_LURKER_AGE_S,
            pass: None,
        }
    }

    /// The lurker leaves bans younger than this many seconds alone (Varnish's
    /// `ban_lurker_age`); non-finite or negative values mean 0.
    #[must_use]
    pub fn with_lurker_age_s(mut self, age_s: f64) -> Self {
        self.lurker_age_s = if age_s.is_finite() {
            age_s.max(0.0)
        } else {
            0.0
        };
        self
    }

    /// The lurker age, seconds.
    pub fn lurker_age_s(&self) -> f64 {
        self.lurker_age_s
    }

    /// The ban list.
    pub fn bans(&self) -> &BanList {
        &self.list
    }

    /// The ban list, to add bans ([`BanList::add`], [`BanList::add_surrogate_key_ban`]).
    pub fn bans_mut(&mut self) -> &mut BanList {
        &mut self.list
    }

    /// Objects held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` when no object is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Registers `obj`.
    ///
    /// # Panics
    /// Never in practice: it would need more than `u32::MAX` object slots.
    pub fn insert(&mut self, obj: T) -> ObjectId {
        let cursor = self.list.head_at(obj.inserted_at_s()).0;
        let entry = Entry {
            obj,
            cursor,
            lurk: cursor,
        };
        let index = if let Some(i) = self.free.pop() {
            i
        } else {
            self.slots.push(Slot {
                generation: 0,
                entry: None,
            });
            u32::try_from(self.slots.len() - 1).expect("more than u32::MAX objects")
        };
        if let Some(p) = self.pass.as_mut() {
            p.min_cursor = p.min_cursor.min(cursor);
            if cursor < p.target && (index as usize) < p.pos {
                p.dirty = true;
            }
        }
        let slot = &mut self.slots[index as usize];
        slot.entry = Some(entry);
        self.len += 1;
        ObjectId {
            index,
            generation: slot.generation,
        }
    }

    /// The object behind `id`, if still held.
    pub fn get(&self, id: ObjectId) -> Option<&T> {
        self.entry(id).map(|e| &e.obj)
    }

    fn entry(&self, id: ObjectId) -> Option<&Entry<T>> {
        let s = self.slots.get(id.index as usize)?;
        (s.generation == id.generation).then_some(s.entry.as_ref()?)
    }

    /// Removes the object behind `id` (the adapter evicted it); `None` if not held.
    pub fn remove(&mut self, id: ObjectId) -> Option<T> {
        self.entry(id)?;
        self.remove_at(id.index as usize)
    }

    fn remove_at(&mut self, index: usize) -> Option<T> {
        let s = self.slots.get_mut(index)?;
        let e = s.entry.take()?;
        s.generation = s.generation.wrapping_add(1);
        self.free.push(u32::try_from(index).unwrap_or(u32::MAX));
        self.len -= 1;
        Some(e.obj)
    }

    /// Lookup-time ban check of the object behind `id`, requested by `req`. Returns
    /// `None` for an unknown id. On [`Verdict::Banned`] the object is removed (the caller
    /// treats the lookup as a miss); on [`Verdict::Kept`] it is marked checked through
    /// the newest ban. Bans the lurker already cleared for it are skipped.
    pub fn lookup<R: BanRequest + ?Sized>(&mut self, id: ObjectId, req: &R) -> Option<Verdict> {
        let head = self.list.head().0;
        let e = self.entry(id)?;
        let start_req = e.cursor + 1;
        let start_obj = e.cursor.max(e.lurk) + 1;
        if let Some(by) = self
            .list
            .find(&e.obj, Some(req), start_req, start_obj, u64::MAX)
        {
            self.remove_at(id.index as usize);
            return Some(Verdict::Banned { by: BanId(by) });
        }
        if let Some(e) = self.slots[id.index as usize].entry.as_mut() {
            e.cursor = head;
            e.lurk = e.lurk.max(head);
        }
        Some(Verdict::Kept {
            checked_through: BanId(head),
        })
    }

    /// The background lurker.
    pub fn lurker(&mut self) -> Lurker<'_, T> {
        Lurker { cache: self }
    }
}

/// Varnish's ban lurker over a [`BanCache`] (Varnish Users Guide, "Lurker-Friendly
/// Bans"), driven by the caller: no thread, no clock.
#[derive(Debug)]
pub struct Lurker<'a, T> {
    cache: &'a mut BanCache<T>,
}

impl<T: BanTarget> Lurker<'_, T> {
    /// Visits up to `budget` objects at time `now_s` (seconds), continuing the current
    /// pass over all objects. Each visited object is evicted when expired or when a
    /// lurker-friendly ban at least [`BanCache::lurker_age_s`] old matches it; otherwise it
    /// is marked as checked against those bans (and, when no `req.*` ban lies in between,
    /// as checked through them). When a pass ends, the bans it covered are completed and
    /// bans every live object is past are discarded.
    ///
    /// Cost: O(`budget`) indexed checks, plus O(bans) once per pass. A non-finite
    /// `now_s` does nothing.
    pub fn step(&mut self, now_s: f64, budget: usize) -> LurkerProgress {
        let c = &mut *self.cache;
        let mut p = LurkerProgress::default();
        if !now_s.is_finite() {
            return p;
        }
        let mut pass = if let Some(pass) = c.pass.take() {
            pass
        } else {
            if c.list.is_empty() {
                p.idle = true;
                return p;
            }
            Pass {
                target: c.list.head_at(now_s - c.lurker_age_s).0,
                pos: 0,
                min_cursor: c.list.head().0,
                dirty: false,
            }
        };
        while p.examined < budget && pass.pos < c.slots.len() {
            let idx = pass.pos;
            pass.pos += 1;
            let generation = c.slots[idx].generation;
            let Some(e) = c.slots[idx].entry.as_mut() else {
                continue;
            };
            p.examined += 1;
            let id = ObjectId {
                index: u32::try_from(idx).unwrap_or(u32::MAX),
                generation,
            };
            if e.obj.ttl_s_at(now_s) + e.obj.grace_s() + e.obj.keep_s() <= 0.0 {
                c.remove_at(idx);
                p.evicted.push((id, Eviction::Expired));
                continue;
            }
            let from = e.cursor.max(e.lurk) + 1;
            if from <= pass.target {
                p.tested += 1;
                if let Some(by) = c
                    .list
                    .find(&e.obj, None::<&Request>, u64::MAX, from, pass.target)
                {
                    c.remove_at(idx);
                    p.evicted.push((id, Eviction::Banned(BanId(by))));
                    continue;
                }
                e.lurk = pass.target;
                if e.cursor < pass.target && !c.list.has_req_ban_in(e.cursor + 1, pass.target) {
                    e.cursor = pass.target;
                }
            }
            pass.min_cursor = pass.min_cursor.min(e.cursor);
        }
        if pass.pos < c.slots.len() {
            c.pass = Some(pass);
            return p;
        }
        if !pass.dirty {
            p.completed_bans = c.list.complete_lurker_friendly_through(pass.target);
        }
        p.discarded_bans = c.list.discard_through(BanId(pass.min_cursor));
        p.pass_finished = true;
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::Object;

    #[test]
    fn lurker_evicts_completes_and_discards() {
        let mut cache = BanCache::new().with_lurker_age_s(0.0);
        let a = cache.insert(Object::new("/a", 0.0).with_header("x-url", "/a"));
        let b = cache.insert(Object::new("/b", 0.0).with_header("x-url", "/b"));
        let _ = cache.bans_mut().add("obj.http.x-url == /a", 1.0).unwrap();
        let _ = cache.bans_mut().add("req.url == /zzz", 1.0).unwrap();
        let p = cache.lurker().step(2.0, 1);
        assert_eq!(p.evicted, vec![(a, Eviction::Banned(BanId(1)))]);
        assert!(!p.pass_finished);
        let p = cache.lurker().step(2.0, 10);
        assert!(p.pass_finished);
        assert_eq!(p.completed_bans, 1);
        // The req.url ban still pins the tail until b is looked up.
        assert_eq!(p.discarded_bans, 0);
        assert_eq!(cache.len(), 1);
        assert!(cache.get(a).is_none());
        let v = cache.lookup(b, &Request::new("/b")).unwrap();
        assert_eq!(
            v,
            Verdict::Kept {
                checked_through: BanId(2)
            }
        );
        let p = cache.lurker().step(3.0, 10);
        assert_eq!(p.discarded_bans, 2);
        assert!(cache.bans().is_empty());
        assert!(cache.lurker().step(4.0, 10).idle);
    }

    #[test]
    fn lurker_respects_age_and_expires() {
        let mut cache = BanCache::new();
        let a = cache.insert(
            Object::new("/a", 0.0)
                .with_status(404)
                .with_lifetimes(100.0, 0.0, 0.0),
        );
        let _ = cache.bans_mut().add("obj.status == 404", 10.0).unwrap();
        let p = cache.lurker().step(20.0, 10);
        assert!(p.evicted.is_empty() && p.pass_finished && p.completed_bans == 0);
        let p = cache.lurker().step(200.0, 10);
        assert_eq!(p.evicted, vec![(a, Eviction::Expired)]);
    }

    #[test]
    fn lookup_removes_banned_objects() {
        let mut cache = BanCache::new();
        let a = cache.insert(Object::new("/a", 0.0));
        let _ = cache.bans_mut().add("req.url ~ ^/a", 1.0).unwrap();
        assert!(cache.lookup(a, &Request::new("/a")).unwrap().is_banned());
        assert!(cache.lookup(a, &Request::new("/a")).is_none());
        let b = cache.insert(Object::new("/a", 2.0));
        assert_ne!(a, b);
        assert!(!cache.lookup(b, &Request::new("/a")).unwrap().is_banned());
    }
}
