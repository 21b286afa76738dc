//! The root context's work: the tick, admin bodies, refresh callouts, the lurker, the ban feed.

#[allow(
    clippy::wildcard_imports,
    reason = "a seam of vm.rs: the parent module's types and imports"
)]
use super::*;

/// The tick period while a fetch waits for the root context ([`Vm::hurry`]).
const HURRIED: Duration = Duration::from_millis(1);

impl Vm {
    /// Root tick: bans, parked requests, refreshes, lurker, ban feed or fleet ban log.
    /// A hurried tick (`Vm::hurry`) sent before the period is over only sends the root's
    /// fetches and restores the period.
    pub fn tick(&self) {
        let Some(p) = self.policy() else { return };
        let now_ms = self.port.now_ms();
        let period = p.config().envoy.tick.0;
        if self.hurried.replace(false) {
            self.port.set_tick(period);
            let since = Duration::from_millis(now_ms.saturating_sub(self.last_tick_ms.get()));
            if since < period {
                self.root_active.set(true);
                self.dispatch_root_fetches();
                self.run_wakes();
                self.root_active.set(false);
                return;
            }
        }
        self.last_tick_ms.set(now_ms);
        self.root_active.set(true);
        self.sync_bans();
        self.cache.borrow_mut().report_served(&*self.port);
        self.wake(None);
        self.resume_admin_bodies();
        self.dispatch_root_fetches();
        self.dispatch_refreshes();
        self.run_wakes();
        // One worker (the lurker-lease holder) lurks and polls the fleet ban feed.
        if self.lurk() {
            self.poll_feed();
            self.poll_etcd();
        }
        // Every worker adds its own tier's change, so the gauge is the sum over workers
        // (setting it made it whichever worker wrote last).
        let local = self.cache.borrow().local_bytes();
        let before = self.local_reported.replace(local);
        if local != before {
            Metrics::change(&self.port, self.m().local_bytes, local, before);
        }
        self.root_active.set(false);
    }

    /// Asks for a tick within a millisecond: a fetch queued for the root context
    /// ([`Vm::dispatch_root_fetches`]) has a client waiting for it, and the regular
    /// period (`[envoy].tick`, 100 ms by default) would be its latency. One host call per
    /// period at most; the tick after restores the period.
    pub(super) fn hurry(&self) {
        if !self.hurried.replace(true) {
            self.port.set_tick(HURRIED);
        }
    }

    /// An admin call's body arrived (or its stream ended): it no longer waits.
    pub(super) fn admin_body_arrived(&self, ctx: u32) {
        self.admin_waiting.borrow_mut().retain(|(c, _)| *c != ctx);
    }

    /// Resumes admin calls whose body has not reached the filter within a tick: the host
    /// withholds bodies of paused streams (no `allow_on_headers_stop_iteration`).
    pub(super) fn resume_admin_bodies(&self) {
        let Some(p) = self.policy() else { return };
        let now_ms = self.port.now_ms();
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
            if self.port.set_effective_context(ctx) {
                self.port.resume_request();
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
            RootCall::Flow(flow) => {
                self.root_active.set(true);
                self.flow_callout_elsewhere(&flow, nh, body_size);
                self.run_wakes();
                self.root_active.set(false);
            }
            RootCall::Feed => self.apply_feed(
                &p,
                OriginResponse::read(&self.port, nh, body_size, 0, u64::MAX),
            ),
            RootCall::Etcd(what) => {
                let answer = fleet::answer(&self.port, nh, body_size);
                self.on_etcd(&p, what, answer.as_ref().map(|(s, b)| (*s, b.as_slice())));
            }
        }
    }

    /// One lurker step if this VM holds (or takes) the lurker lease
    /// (`cachet_store::cache::Cache::lurk_if_leased`); returns whether it does.
    pub(super) fn lurk(&self) -> bool {
        let Some(p) = self.policy() else { return false };
        let cfg = p.config();
        let lease_ms = u64::try_from(cfg.envoy.tick.0.as_millis())
            .unwrap_or(1000)
            .saturating_mul(10);
        let me = u64::from(self.id.get());
        let retire = cachet_store::cache::Retirement {
            pass_started_ms: 0,
            fetch_bound_ms: u64::try_from(cfg.origin.first_byte_timeout.0.as_millis())
                .unwrap_or(u64::MAX),
            retention: cfg.bans.retention.0,
        };
        let held = self.cache.borrow_mut().lurk_if_leased(
            &*self.port,
            me,
            self.port.now_ms(),
            lease_ms,
            cfg.bans.lurker_budget,
            retire,
        );
        self.flush();
        held
    }

    pub(super) fn poll_feed(&self) {
        let Some(p) = self.policy() else { return };
        let due = self.feed.borrow_mut().due(p.config(), self.port.now_ms());
        let Some((cluster, lines)) = due else { return };
        let h: Vec<(&str, &[u8])> = lines.iter().map(|(n, v)| (*n, v.as_slice())).collect();
        let timeout = Duration::from_millis(cachet_store::poller::FEED_TIMEOUT_MS);
        if let Ok(token) = self.port.dispatch(&cluster, &h, None, timeout) {
            self.calls.borrow_mut().insert(token, RootCall::Feed);
        }
    }

    pub(super) fn apply_feed(&self, p: &Policy, r: Option<OriginResponse>) {
        let Some(r) = r.filter(|r| r.status == 200) else {
            return;
        };
        let max = p.config().bans.max_bans;
        match bans::apply_feed(&*self.port, &r.body, max, self.port.now_ms()) {
            Ok(0) => {}
            Ok(added) => {
                Metrics::inc(&self.port, self.m().feed_updates);
                Metrics::add(&self.port, self.m().bans_added, added as u64);
                self.sync_bans();
            }
            Err(e) => self
                .port
                .log(LogLevel::Warn, &format!("cachet: ban feed: {e}")),
        }
    }
}
