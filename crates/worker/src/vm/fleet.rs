//! Fleet mode (`[envoy].etcd_cluster`, docs/fleet.md): admin writes through etcd, and on the tick the poll of the fleet's ban log and its retirement.
//!
//! Every rule (the bodies, what an answer means, how a poll merges, when to call) is
//! `cachet_store::etcd`, `cachet_store::admin::handle_fleet`, `cachet_store::bans` and
//! `cachet_store::poller`; this module only sends the bodies with `dispatch_http_call` and
//! hands back the answers.

#[allow(
    clippy::wildcard_imports,
    reason = "a seam of vm.rs: the parent module's types and imports"
)]
use super::*;

use cachet_store::poller::{self, Call, EtcdCall};

/// POSTs `body` to etcd's gateway `path` on `cluster`; the callout token, `None` when
/// Envoy refused the call (unknown cluster).
pub(super) fn call(port: &Port, cluster: &str, path: &str, body: &[u8]) -> Option<u32> {
    let h = poller::lines(path, cluster);
    let timeout = Duration::from_millis(poller::ETCD_TIMEOUT_MS);
    port.dispatch(cluster, &h, Some(body), timeout).ok()
}

/// The etcd callout's answer being delivered: `(status, body)`, `None` when it failed
/// (no answer, reset, timeout) or is larger than `poller::MAX_ETCD_ANSWER_BYTES`.
pub(super) fn answer(port: &Port, nh: usize, body_size: usize) -> Option<(u16, Vec<u8>)> {
    OriginResponse::read(port, nh, body_size, 0, poller::MAX_ETCD_ANSWER_BYTES)
        .filter(|r| !r.oversized)
        .map(|r| (r.status, r.body))
}

impl Vm {
    /// On the tick of the lurker-lease holder: the poll when due (`Poller::due`).
    pub(super) fn poll_etcd(&self) {
        let Some(p) = self.policy() else { return };
        let now_ms = self.port.now_ms();
        let due = self
            .poller
            .borrow_mut()
            .due(&*self.port, p.config(), now_ms);
        if let Some(c) = due {
            self.etcd_dispatch(&p, &c);
        }
    }

    fn etcd_dispatch(&self, p: &Policy, c: &Call) {
        if let Some(token) = call(&self.port, &p.config().envoy.etcd_cluster, c.path, &c.body) {
            self.calls
                .borrow_mut()
                .insert(token, RootCall::Etcd(c.what));
        } else {
            self.poller.borrow_mut().refused();
            self.port.log(
                LogLevel::Warn,
                "cachet: fleet ban log: Envoy refused the call to envoy.etcd_cluster",
            );
        }
    }

    /// An etcd call of the root context answered (`None`: it failed).
    pub(super) fn on_etcd(&self, p: &Policy, what: EtcdCall, answer: Option<(u16, &[u8])>) {
        let now_ms = self.port.now_ms();
        let done =
            (self.poller.borrow_mut()).answered(&*self.port, p.config(), what, answer, now_ms);
        if let Some(e) = &done.failure {
            self.port
                .log(LogLevel::Warn, &format!("cachet: fleet ban log: {e}"));
        }
        if done.added > 0 {
            Metrics::inc(&self.port, self.m().feed_updates);
            Metrics::add(&self.port, self.m().bans_added, done.added as u64);
            self.sync_bans();
        }
        if let Some(next) = &done.next {
            self.etcd_dispatch(p, next);
        }
    }
}
