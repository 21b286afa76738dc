//! Collapsing: requests parked behind a fetch, woken when it ends; background refreshes.

#[allow(
    clippy::wildcard_imports,
    reason = "a seam of vm.rs: the parent module's types and imports"
)]
use super::*;

impl Vm {
    /// Queues a background refresh of `base` (found for `job`) if nobody is fetching it
    /// already.
    pub(super) fn schedule_refresh(&self, job: &Job, base: &Rc<StoredObject>, now_ms: u64) {
        let Some(p) = self.policy() else { return };
        // The lock is re-entrant for its owner (this VM's root context): a refresh of the
        // slot queued or in flight here already covers it.
        let slot = job.want.slot;
        let pending = self
            .refresh_queue
            .borrow()
            .iter()
            .any(|r| r.job.want.slot == slot)
            || self.calls.borrow().values().any(
                |c| matches!(c, RootCall::Refresh { refresh, .. } if refresh.job.want.slot == slot),
            );
        let lease = now_ms + p.config().collapse.lease_ms;
        if !pending
            && locks::acquire(&HostData, slot, self.owner(self.root_id), now_ms, lease)
                == Lock::Acquired
        {
            self.refresh_queue.borrow_mut().push(Refresh {
                job: job.clone(),
                base: Rc::clone(base),
            });
        }
    }

    /// Resolves parked requests of `slot` (all slots when `None`): serves them from the
    /// cache once the object is there, or lets them through to the origin (uncollapsed)
    /// when the fetch ended without a storable object or their wait ran out.
    pub(super) fn wake(&self, slot: Option<u32>) {
        if self.policy().is_none() {
            return;
        }
        let now_ms = host::now_ms();
        let now = Timestamp::from_millis(now_ms);
        let list: Vec<(u32, Parked<Waiter>)> = match slot {
            Some(s) => (self.waiters.borrow_mut().take(&s))
                .into_iter()
                .map(|w| (s, w))
                .collect(),
            None => self.waiters.borrow_mut().take_all(),
        };
        let mut keep = Vec::new();
        for (slot, parked) in list {
            let w = &parked.waiter;
            let mut want = w.job.want.clone();
            let found = self.cache.borrow_mut().find(&HostData, &mut want, now);
            self.flush();
            let found = found.ok().flatten();
            let held = locks::is_held(&HostData, slot, now_ms);
            match found {
                Some(f) if !f.obj.h.meta.pass && f.fresh != Freshness::Expired => {
                    if !host::set_effective_context(w.ctx) {
                        continue;
                    }
                    let label = if f.fresh == Freshness::Stale {
                        Metrics::inc(self.m().stale);
                        CacheStatus::Stale
                    } else {
                        CacheStatus::Hit
                    };
                    self.respond(&f.obj, label, &w.client, host::now());
                }
                _ if !held && let Some(obj) = self.fetched_for(w) => {
                    // The fetch it waited for stored an answer that is already past its
                    // TTL (shorter than the fetch): it is still the answer to this request.
                    if !host::set_effective_context(w.ctx) {
                        continue;
                    }
                    self.respond(&obj, CacheStatus::Miss, &w.client, host::now());
                }
                _ if held && now < parked.deadline => keep.push((slot, parked)),
                found if locks::failed_since(&HostData, slot, w.since_ms) => {
                    // The fetch it waited for failed: answered as that request was, the
                    // stored copy within stale-if-error (RFC 5861 §4), else a 503 — never
                    // a fetch of its own (issue 28 items 5 and 8).
                    if !host::set_effective_context(w.ctx) {
                        continue;
                    }
                    let at = host::now();
                    match found.filter(|f| !f.obj.h.meta.pass) {
                        Some(f) if stream::stale_copy_allowed(&f.obj, &f.times, at) => {
                            Metrics::inc(self.m().stale);
                            self.respond(&f.obj, CacheStatus::Stale, &w.client, at);
                        }
                        _ => send_error(&WorkerError::unavailable(
                            "the origin failed for the request this one waited for",
                        )),
                    }
                }
                _ => {
                    if !host::set_effective_context(w.ctx) {
                        continue;
                    }
                    w.passed.set(true);
                    Metrics::inc(self.m().passes);
                    host::resume_request();
                }
            }
        }
        let mut queue = self.waiters.borrow_mut();
        for (slot, parked) in keep {
            queue.requeue(slot, parked);
        }
    }

    pub(super) fn dispatch_refreshes(&self) {
        let Some(p) = self.policy() else { return };
        let jobs = std::mem::take(&mut *self.refresh_queue.borrow_mut());
        for refresh in jobs {
            let started_ms = host::now_ms();
            if let Ok(token) = Self::dispatch(&p, &refresh.job, Some(&refresh.base)) {
                Metrics::inc(self.m().refreshes);
                self.calls.borrow_mut().insert(
                    token,
                    RootCall::Refresh {
                        refresh: Box::new(refresh),
                        started_ms,
                    },
                );
            } else {
                Metrics::inc(self.m().origin_errors);
                locks::release(&HostData, refresh.job.want.slot, self.owner(self.root_id));
            }
        }
    }

    /// The answer the fetch `w` waited for, if one was stored (the cache's borrow ends
    /// here, before the answer is sent).
    fn fetched_for(&self, w: &Waiter) -> Option<Rc<StoredObject>> {
        self.cache
            .borrow_mut()
            .fetched_for(&HostData, &w.job.want, w.seen)
    }
}
