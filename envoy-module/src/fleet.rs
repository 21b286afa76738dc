//! Fleet mode in the dynamic module (issue 33; docs/fleet.md): the fleet's ban log in
//! etcd, polled from the main thread, and the ban feed.
//!
//! With `[envoy].etcd_cluster` set, an admin write is one etcd transaction sent from its
//! stream (`flow.rs`, `cachet_store::admin::handle_fleet`), answered once etcd accepted
//! it; every node (the accepting one included) applies the fleet's log when it polls.
//! The poll rides the lurker's tick on the main thread (`Shared::lurk`): when it is due
//! (`[envoy].etcd_interval`, or the next tick after this node accepted a write) one call
//! goes out through the configuration's callout, and its answer (`Fleet::answered`)
//! applies the new entries to the log, retiring through etcd at most once a minute. When
//! and what to call is `cachet_store::poller`, the proxy-wasm filter's schedule too.
//!
//! With `[envoy].ban_feed_cluster` set instead, the same tick fetches a peer's ban list
//! (`GET [envoy].ban_feed_path`, every `[envoy].ban_feed_interval`, with the admin
//! token) and applies it (`cachet_store::bans::apply_feed`), as the filter does.
//!
//! The main thread is one thread, so at most one etcd call is out per configuration
//! (`Poller`), and callout ids tell its answers from background refreshes'.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use cachet_policy::Policy;
use cachet_store::poller::{self, Call, EtcdCall, FeedPoller, Poller};

use crate::abi;
use crate::bans::Bans;
use crate::host::{Config, Fields, log};

/// A call of the main thread out to etcd or the ban feed.
#[derive(Debug, Clone, Copy)]
enum RootCall {
    Etcd(EtcdCall),
    Feed,
}

/// The main thread's fleet state of one configuration.
#[derive(Debug, Default)]
pub struct Fleet {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    poller: Poller,
    /// The ban feed's schedule.
    feed: FeedPoller,
    /// Calls out, by callout id.
    calls: HashMap<u64, RootCall>,
}

/// What an answer did (for the counters).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// Entries the answer added to the log.
    pub added: u64,
}

/// `(status, body)` of a callout's answer; `None` without one, or over `max` bytes.
pub fn status_body(answer: Option<&(Fields, Vec<u8>)>, max: u64) -> Option<(u16, &[u8])> {
    let (headers, body) = answer?;
    if body.len() as u64 > max {
        return None;
    }
    let status = headers
        .iter()
        .find(|(n, _)| n == ":status")
        .and_then(|(_, v)| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse().ok())?;
    Some((status, body.as_slice()))
}

impl Fleet {
    /// On the lurker's tick at `now_ms` (main thread): the etcd poll or the ban-feed
    /// fetch when due, sent through `config`.
    pub fn tick(&self, config: Config, bans: &Bans, policy: &Policy, now_ms: u64) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let envoy = &policy.config().envoy;
        if !envoy.etcd_cluster.is_empty() {
            if let Some(call) = bans.poll_due(&mut st.poller, policy, now_ms) {
                st.send(config, policy, &call);
            }
        } else if let Some((cluster, lines)) = st.feed.due(policy.config(), now_ms) {
            let h: Vec<(&str, &[u8])> = lines.iter().map(|(n, v)| (*n, v.as_slice())).collect();
            match config.callout(&cluster, &h, &[], poller::FEED_TIMEOUT_MS) {
                Ok(id) => {
                    st.calls.insert(id, RootCall::Feed);
                }
                Err(e) => warn(&format!(
                    "ban feed: Envoy refused the call to envoy.ban_feed_cluster ({e})"
                )),
            }
        }
    }

    /// A callout of the configuration answered: applied when it is one of this fleet's
    /// calls (returns `None` otherwise: a background refresh's).
    pub fn answered(
        &self,
        config: Config,
        bans: &Bans,
        policy: &Policy,
        id: u64,
        answer: Option<&(Fields, Vec<u8>)>,
        now_ms: u64,
    ) -> Option<Applied> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let call = st.calls.remove(&id)?;
        let mut applied = Applied::default();
        match call {
            RootCall::Etcd(what) => {
                let answer = status_body(answer, poller::MAX_ETCD_ANSWER_BYTES);
                let done = bans.poll_answered(&mut st.poller, policy, what, answer, now_ms);
                if let Some(e) = &done.failure {
                    warn(&format!("fleet ban log: {e}"));
                }
                applied.added = done.added as u64;
                if let Some(next) = &done.next {
                    st.send(config, policy, next);
                }
            }
            RootCall::Feed => match status_body(answer, u64::MAX) {
                Some((200, body)) => match bans.apply_feed(policy, body, now_ms) {
                    Ok(added) => applied.added = added as u64,
                    Err(e) => warn(&format!("ban feed: {e}")),
                },
                Some((status, body)) => warn(&format!(
                    "ban feed: the peer answered {status}: {}",
                    String::from_utf8_lossy(body.get(..200).unwrap_or(body))
                )),
                None => warn("ban feed: no answer"),
            },
        }
        Some(applied)
    }
}

impl State {
    /// Sends one etcd call through `config`; a refusal frees the poller.
    fn send(&mut self, config: Config, policy: &Policy, call: &Call) {
        let cluster = &policy.config().envoy.etcd_cluster;
        let lines = call.lines(cluster);
        match config.callout(cluster, &lines, &call.body, poller::ETCD_TIMEOUT_MS) {
            Ok(id) => {
                self.calls.insert(id, RootCall::Etcd(call.what));
            }
            Err(e) => {
                self.poller.refused();
                warn(&format!(
                    "fleet ban log: Envoy refused the call to envoy.etcd_cluster ({e})"
                ));
            }
        }
    }
}

fn warn(msg: &str) {
    log(abi::LOG_LEVEL_WARN, &format!("cachet: {msg}"));
}
