//! Fleet mode (`[envoy].etcd_cluster`, docs/fleet.md): admin writes through etcd, and on the tick the poll of the fleet's ban log and its retirement.
//!
//! Every rule (the bodies, what an answer means, how a poll merges) is `cachet_store::etcd`,
//! `cachet_store::admin::handle_fleet` and `cachet_store::bans::apply_polled`; this module
//! only sends the bodies with `dispatch_http_call` and hands back the answers.

#[allow(
    clippy::wildcard_imports,
    reason = "a seam of vm.rs: the parent module's types and imports"
)]
use super::*;

use cachet_store::etcd;

/// Timeout of one etcd call.
const ETCD_TIMEOUT: Duration = Duration::from_secs(2);

/// How often the poller asks etcd for entries the fleet may retire, ms.
const RETIRE_EVERY_MS: u64 = 60_000;

/// Largest etcd answer read into the VM, bytes (a poll brings at most
/// `etcd::POLL_LIMIT` entries of at most a ban expression's 8 KiB each, base64).
const MAX_ETCD_ANSWER_BYTES: u64 = 16 * 1024 * 1024;

/// An etcd call the root context made.
#[derive(Debug, Clone, Copy)]
pub(super) enum EtcdCall {
    /// A poll of the log (`etcd::poll`).
    Poll,
    /// The search for the newest retirable entry (`etcd::retirable`).
    Retirable,
    /// A retirement (`etcd::retire`).
    Retire,
}

/// POSTs `body` to etcd's gateway `path` on `cluster`; the callout token, `None` when
/// Envoy refused the call (unknown cluster).
pub(super) fn call(port: &Port, cluster: &str, path: &str, body: &[u8]) -> Option<u32> {
    let h: [(&str, &[u8]); 5] = [
        (":method", b"POST"),
        (":path", path.as_bytes()),
        (":authority", cluster.as_bytes()),
        (":scheme", b"http"),
        ("content-type", b"application/json"),
    ];
    port.dispatch(cluster, &h, Some(body), ETCD_TIMEOUT).ok()
}

/// The etcd callout's answer being delivered: `(status, body)`, `None` when it failed
/// (no answer, reset, timeout) or is larger than [`MAX_ETCD_ANSWER_BYTES`].
pub(super) fn answer(port: &Port, nh: usize, body_size: usize) -> Option<(u16, Vec<u8>)> {
    OriginResponse::read(port, nh, body_size, 0, MAX_ETCD_ANSWER_BYTES)
        .filter(|r| !r.oversized)
        .map(|r| (r.status, r.body))
}

impl Vm {
    /// On the tick of the lurker-lease holder: polls etcd when due (`envoy.etcd_interval`)
    /// or when an admin write on this node asked for it (`bans::request_poll`), one call at
    /// a time.
    pub(super) fn poll_etcd(&self) {
        let Some(p) = self.policy() else { return };
        let cfg = &p.config().envoy;
        if cfg.etcd_cluster.is_empty() || self.etcd_busy.get() {
            return;
        }
        let now_ms = self.port.now_ms();
        if !bans::poll_due(
            &*self.port,
            now_ms,
            self.last_poll_ms.get(),
            self.next_feed_ms.get(),
        ) {
            return;
        }
        let interval = u64::try_from(cfg.etcd_interval.0.as_millis()).unwrap_or(1000);
        self.last_poll_ms.set(now_ms);
        self.next_feed_ms.set(now_ms.saturating_add(interval));
        let (log, _) = bans::read_log(&*self.port);
        let body = etcd::poll(&cfg.etcd_prefix, log.feed_through);
        self.etcd_dispatch(&p, etcd::RANGE_PATH, &body, EtcdCall::Poll);
    }

    fn etcd_dispatch(&self, p: &Policy, path: &str, body: &[u8], what: EtcdCall) {
        match call(&self.port, &p.config().envoy.etcd_cluster, path, body) {
            Some(token) => {
                self.etcd_busy.set(true);
                self.calls.borrow_mut().insert(token, RootCall::Etcd(what));
            }
            None => self.port.log(
                LogLevel::Warn,
                "cachet: fleet ban log: Envoy refused the call to envoy.etcd_cluster",
            ),
        }
    }

    /// An etcd call of the root context answered (`None`: it failed).
    pub(super) fn on_etcd(&self, p: &Policy, what: EtcdCall, answer: Option<(u16, Vec<u8>)>) {
        self.etcd_busy.set(false);
        let cfg = p.config();
        let prefix = &cfg.envoy.etcd_prefix;
        let Some((status, body)) = answer else {
            self.port
                .log(LogLevel::Warn, "cachet: fleet ban log: etcd did not answer");
            return;
        };
        let now_ms = self.port.now_ms();
        let failed = |e: &dyn std::fmt::Display| {
            self.port
                .log(LogLevel::Warn, &format!("cachet: fleet ban log: {e}"));
        };
        match what {
            EtcdCall::Poll => {
                let polled = match etcd::poll_answer(prefix, status, &body) {
                    Ok(polled) => polled,
                    Err(e) => return failed(&e),
                };
                match bans::apply_polled(&*self.port, &polled, cfg.bans.max_bans, now_ms) {
                    Ok(added) => {
                        if added > 0 {
                            Metrics::inc(&self.port, self.m().feed_updates);
                            Metrics::add(&self.port, self.m().bans_added, added as u64);
                        }
                        self.sync_bans();
                    }
                    Err(e) => failed(&e),
                }
                if polled.entries.len() as u64 >= etcd::POLL_LIMIT {
                    // More are waiting: the next tick polls again.
                    self.next_feed_ms.set(0);
                } else if now_ms >= self.next_retire_ms.get() {
                    self.next_retire_ms
                        .set(now_ms.saturating_add(RETIRE_EVERY_MS));
                    let retention =
                        u64::try_from(cfg.bans.retention.0.as_millis()).unwrap_or(u64::MAX);
                    let body = etcd::retirable(prefix, now_ms.saturating_sub(retention));
                    self.etcd_dispatch(p, etcd::RANGE_PATH, &body, EtcdCall::Retirable);
                }
            }
            EtcdCall::Retirable => match etcd::retirable_answer(prefix, status, &body) {
                Ok(Some(cutoff)) => {
                    let body = etcd::retire(prefix, cutoff);
                    self.etcd_dispatch(p, etcd::TXN_PATH, &body, EtcdCall::Retire);
                }
                Ok(None) => {}
                Err(e) => failed(&e),
            },
            EtcdCall::Retire => {
                if let Err(e) = etcd::retire_answer(status, &body) {
                    failed(&e);
                }
            }
        }
    }
}
