//! The root context's work: the tick, admin bodies, refresh callouts, the lurker, the ban feed.

#[allow(
    clippy::wildcard_imports,
    reason = "a seam of vm.rs: the parent module's types and imports"
)]
use super::*;

impl Vm {
    /// Root tick: bans, parked requests, refreshes, lurker, ban feed.
    pub fn tick(&self) {
        if self.policy().is_none() {
            return;
        }
        self.sync_bans();
        self.wake(None);
        self.resume_admin_bodies();
        self.dispatch_refreshes();
        // One worker (the lurker-lease holder) lurks and polls the fleet ban feed.
        if self.lurk() {
            self.poll_feed();
        }
        Metrics::set(self.m().local_bytes, self.local.borrow().bytes());
    }

    /// An admin call's body arrived (or its stream ended): it no longer waits.
    pub(super) fn admin_body_arrived(&self, ctx: u32) {
        self.admin_waiting.borrow_mut().retain(|(c, _)| *c != ctx);
    }

    /// Resumes admin calls whose body has not reached the filter within a tick: the host
    /// withholds bodies of paused streams (no `allow_on_headers_stop_iteration`).
    pub(super) fn resume_admin_bodies(&self) {
        let Some(p) = self.policy() else { return };
        let now_ms = host::now_ms();
        let tick_ms = u64::try_from(p.config().envoy.tick.0.as_millis()).unwrap_or(u64::MAX);
        let due: Vec<u32> = {
            let mut waiting = self.admin_waiting.borrow_mut();
            let due = waiting
                .iter()
                .filter(|(_, since)| now_ms.saturating_sub(*since) >= tick_ms)
                .map(|(c, _)| *c)
                .collect();
            waiting.retain(|(_, since)| now_ms.saturating_sub(*since) < tick_ms);
            due
        };
        for ctx in due {
            if host::set_effective_context(ctx) {
                host::resume_request();
            }
        }
    }

    /// A root callout answered (refresh or ban feed).
    pub fn on_root_callout(&self, token: u32, nh: usize, body_size: usize) {
        let Some(call) = self.calls.borrow_mut().remove(&token) else {
            return;
        };
        let Some(p) = self.policy() else { return };
        match call {
            RootCall::Refresh {
                refresh,
                started_ms,
            } => {
                let r = OriginResponse::read(nh, body_size, started_ms);
                let Refresh { job, base } = *refresh;
                // Whatever the answer, the lock goes: after a kept copy (5xx, failed
                // callout, banned meanwhile) the next request schedules a new refresh.
                let _ = self.revalidate(&p, &job, &base, r.as_ref());
                locks::release(&HostData, job.slot, self.owner(self.root_id));
                self.wake(Some(job.slot));
            }
            RootCall::Feed => self.apply_feed(&p, OriginResponse::read(nh, body_size, 0)),
        }
    }

    /// One lurker step if this VM holds (or takes) the lurker lease; returns whether it
    /// does.
    pub(super) fn lurk(&self) -> bool {
        let Some(p) = self.policy() else { return false };
        let cfg = p.config();
        let now_ms = host::now_ms();
        let lease_ms = u64::try_from(cfg.envoy.tick.0.as_millis())
            .unwrap_or(1000)
            .saturating_mul(10);
        let (v, cas) = host::shared_get(LURKER_KEY);
        let v = v.unwrap_or_default();
        let field = |o: usize| -> u64 {
            v.get(o..o + 8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_le_bytes)
        };
        let (owner, lease_end, cursor) = (field(0), field(8), field(16));
        let me = u64::from(self.id.get());
        if owner != me && lease_end > now_ms {
            return false;
        }
        let dir = SharedTier::dir(&HostData);
        let m = self.m();
        let budget = cfg.bans.lurker_budget;
        let mut next = cursor;
        let mut examined = 0usize;
        let mut evicted = 0u64;
        let mut finished = true;
        for e in dir.entries.iter().filter(|e| e.version > cursor) {
            if examined >= budget {
                finished = false;
                break;
            }
            examined += 1;
            next = e.version;
            let obj = SharedTier::get_slot(&HostData, e.slot);
            let gone = match &obj {
                None => true,
                Some(o) if o.h.version != e.version => true,
                Some(o) => e.end_ms <= now_ms || self.bans.borrow().check_objects_only(o),
            };
            if gone {
                let clear = obj.as_ref().is_some_and(|o| o.h.version == e.version);
                if let Some((bytes, objects)) =
                    SharedTier::remove(&HostData, e.slot, e.version, clear)
                {
                    evicted += 1;
                    Metrics::set(m.bytes_stored, bytes);
                    Metrics::set(m.objects, objects);
                }
            }
        }
        Metrics::add(m.lurker_examined, examined as u64);
        Metrics::add(m.lurker_evicted, evicted);
        if finished {
            next = 0;
            Metrics::inc(m.lurker_passes);
            let dir = SharedTier::dir(&HostData);
            Metrics::set(m.bytes_stored, dir.bytes);
            Metrics::set(m.objects, dir.entries.len() as u64);
            let oldest = dir
                .entries
                .iter()
                .map(|e| e.stored_at_ms)
                .min()
                .unwrap_or(now_ms);
            if bans::trim_not_after(&HostData, oldest.min(now_ms)) > 0 {
                self.sync_bans();
            }
        }
        let mut out = Vec::with_capacity(24);
        out.extend_from_slice(&me.to_le_bytes());
        out.extend_from_slice(&(now_ms + lease_ms).to_le_bytes());
        out.extend_from_slice(&next.to_le_bytes());
        // Losing this CAS means another worker took the lease meanwhile: it lurks next.
        host::shared_set(LURKER_KEY, &out, cas)
    }

    pub(super) fn poll_feed(&self) {
        let Some(p) = self.policy() else { return };
        let cfg = &p.config().envoy;
        if cfg.ban_feed_cluster.is_empty() {
            return;
        }
        let now_ms = host::now_ms();
        if now_ms < self.next_feed_ms.get() {
            return;
        }
        let interval = u64::try_from(cfg.ban_feed_interval.0.as_millis()).unwrap_or(5000);
        self.next_feed_ms.set(now_ms + interval);
        let auth = format!("Bearer {}", p.config().admin.token);
        let h = vec![
            (":method", "GET"),
            (":path", cfg.ban_feed_path.as_str()),
            (":authority", cfg.ban_feed_cluster.as_str()),
            (":scheme", "http"),
            ("authorization", auth.as_str()),
        ];
        if let Ok(token) = host::dispatch(&cfg.ban_feed_cluster, &h, None, Duration::from_secs(5)) {
            self.calls.borrow_mut().insert(token, RootCall::Feed);
        }
    }

    pub(super) fn apply_feed(&self, p: &Policy, r: Option<OriginResponse>) {
        let Some(r) = r.filter(|r| r.status == 200) else {
            return;
        };
        // `GET /.cachet/bans` answers `cachet_policy::admin::list_body` (a `BanLog`); peers
        // of earlier releases answer the bare list of entries.
        let parsed = cachet_policy::banlog::BanLog::try_from_json(&r.body)
            .map(|l| l.entries)
            .or_else(|_| serde_json::from_slice::<Vec<bans::LogEntry>>(&r.body));
        let Ok(entries) = parsed else {
            host::log(
                LogLevel::Warn,
                "cachet: ban feed answered a body that is not a ban list",
            );
            return;
        };
        let (log, _) = bans::read_log(&HostData);
        let mut new = Vec::new();
        let mut through = log.feed_through;
        for e in entries.iter().filter(|e| e.id > log.feed_through) {
            through = through.max(e.id);
            let valid = match e.kind {
                bans::Kind::SoftPurge => e.key.is_some(),
                _ => bans::parse_ban(&e.expr).is_ok(),
            };
            if valid {
                new.push(bans::NewEntry {
                    kind: e.kind,
                    expr: e.expr.clone(),
                    key: e.key.clone(),
                    lurker_friendly: e.lurker_friendly,
                    at_ms: Some(e.at_ms),
                });
            }
        }
        if through == log.feed_through {
            return;
        }
        let max = p.config().bans.max_bans;
        if bans::append(&HostData, &new, max, host::now_ms(), Some(through)).is_ok() {
            Metrics::inc(self.m().feed_updates);
            Metrics::add(self.m().bans_added, new.len() as u64);
            self.sync_bans();
        }
    }
}
