//! Lookups: the in-VM tier, then the shared tier, and variants (vary markers).

#[allow(
    clippy::wildcard_imports,
    reason = "a seam of vm.rs: the parent module's types and imports"
)]
use super::*;

impl Vm {
    /// The object `job`'s request is served from: the primary key's object, or, when the
    /// primary key holds a vary marker, the request's variant (`job` then points at it).
    /// The marker is read only when the primary lookup found nothing servable, so a plain
    /// hit costs one lookup. `Err(())` when the request's variant can't be keyed (a varying
    /// field over the bound): answer it uncached.
    pub(super) fn find(
        &self,
        p: &Policy,
        job: &mut Job,
        now: Timestamp,
    ) -> Result<Option<Found>, ()> {
        if let Some(found) = self.lookup(p, job, now) {
            return Ok(Some(found));
        }
        let primary = job.key.clone();
        if !self.resolve_variant(job) {
            return Err(());
        }
        Ok(if job.key == primary {
            None
        } else {
            self.lookup(p, job, now)
        })
    }

    /// Freshness of `obj` for this request after bans and soft purges, and the times it
    /// was decided on; `None` when the object is of no use (banned, past its keep window,
    /// an expired hit-for-pass marker).
    pub(super) fn classify(
        &self,
        p: &Policy,
        obj: &StoredObject,
        req: &Req<'_>,
        route_index: usize,
        now: Timestamp,
    ) -> Option<(Freshness, EntryTimes)> {
        let held = obj.h.meta.times;
        let mut times = held;
        match self.bans.borrow().check(obj, req) {
            Check::Banned => return None,
            Check::SoftPurged(at) => {
                times.ttl = times.ttl.min(at.saturating_duration_since(times.stored_at));
            }
            Check::Clean => {}
        }
        let policy = p
            .config()
            .routes
            .get(route_index)
            .map(|r| r.early_refresh)
            .unwrap_or_default();
        let f = match decide(Some(&times), now, &policy, Draw::from_bits(self.draw())) {
            // Soft-purged beyond its grace and keep but still held: revalidate it (the
            // edge app's "soft-purged without grace").
            Freshness::Miss if times != held && now < held.keep_end() => Freshness::Expired,
            f => f,
        };
        match f {
            Freshness::Fresh | Freshness::RefreshAhead => Some((f, times)),
            Freshness::Stale | Freshness::Expired if !obj.h.meta.pass => Some((f, times)),
            _ => None,
        }
    }

    /// Looks `job.key` up in both tiers.
    pub(super) fn lookup(&self, p: &Policy, job: &Job, now: Timestamp) -> Option<Found> {
        let req = Req {
            url: &job.target,
            headers: &job.fields,
        };
        let local = self
            .local
            .borrow_mut()
            .get(&job.key)
            .filter(|o| !o.h.meta.is_vary_marker());
        let mut best = None;
        if let Some(obj) = local {
            match self.classify(p, &obj, &req, job.route_index, now) {
                Some((fresh, times)) => {
                    let found = Found {
                        obj,
                        fresh,
                        times,
                        tier: Tier::Local,
                    };
                    if fresh == Freshness::Fresh {
                        return Some(found);
                    }
                    best = Some(found);
                }
                None => self.local.borrow_mut().remove(&job.key),
            }
        }
        // Not fresh locally: the shared tier may hold a newer version (another worker
        // refreshed it).
        let shared = self
            .shared
            .get()
            .get(&HostData, &job.key)
            .filter(|o| !o.h.meta.is_vary_marker())?;
        if best
            .as_ref()
            .is_some_and(|f| f.obj.h.version >= shared.h.version)
        {
            return best;
        }
        let c = self.classify(p, &shared, &req, job.route_index, now);
        let obj = Rc::new(shared);
        if let Some((fresh, times)) = c {
            let ev = self.local.borrow_mut().put(Rc::clone(&obj));
            Metrics::add(self.m().local_evictions, ev);
            return Some(Found {
                obj,
                fresh,
                times,
                tier: Tier::Shared,
            });
        }
        best
    }

    /// The vary marker stored under `key`, if the object there is one (local tier first).
    pub(super) fn vary_marker(&self, key: &str) -> Option<Rc<StoredObject>> {
        let local = self.local.borrow_mut().get(key);
        let obj = match local {
            Some(o) => o,
            None => Rc::new(self.shared.get().get(&HostData, key)?),
        };
        obj.h.meta.is_vary_marker().then_some(obj)
    }

    /// Points `job` at the variant its request selects when the URL's primary key holds a
    /// vary marker (`cachet_http::vary::variant_key`). `false` when the request's variant
    /// cannot be keyed (a varying field's value over the bound): answer it uncached.
    pub(super) fn resolve_variant(&self, job: &mut Job) -> bool {
        if vary::is_variant_key(&job.key) {
            return true;
        }
        let Some(marker) = self.vary_marker(&job.key) else {
            return true;
        };
        match vary::variant_key(&job.key, &marker.h.meta.vary_fields, job.fields.as_slice()) {
            Some(k) => {
                job.slot = self.shared.get().slot_of(&k);
                job.key = k;
                true
            }
            None => false,
        }
    }

    /// An object whose origin `Vary` names request fields is one variant of its URL
    /// (RFC 9111 §4.1): it is stored under its variant key, and the primary key holds a
    /// vary marker listing the fields and the variants stored so far. `None` when the URL
    /// already has `[edge].max_variants` variants or the request's variant can't be keyed:
    /// answer it uncached.
    pub(super) fn place_variant(
        &self,
        p: &Policy,
        job: &Job,
        mut obj: StoredObject,
        now: Timestamp,
    ) -> Option<StoredObject> {
        let fields = obj.h.meta.vary_fields.clone();
        if fields.is_empty() {
            return Some(obj);
        }
        let primary = job
            .key
            .split(vary::VARIANT_SEPARATOR)
            .next()
            .unwrap_or(&job.key)
            .to_owned();
        let key = if vary::is_variant_key(&job.key) {
            job.key.clone()
        } else {
            vary::variant_key(&primary, &fields, job.fields.as_slice())?
        };
        let mut variants = self
            .vary_marker(&primary)
            .filter(|m| m.h.meta.vary_fields == fields)
            .map(|m| m.h.meta.variants.clone())
            .unwrap_or_default();
        if !variants.contains(&key) {
            if variants.len() >= p.config().edge.max_variants {
                return None;
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
            self.insert(StoredObject::new(primary, marker, Vec::new()), now);
        }
        obj.h.key = key;
        Some(obj)
    }
}
