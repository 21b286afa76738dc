//! When a fleet node talks to etcd, and what each answer does to its ban log
//! (`[envoy].etcd_cluster`, docs/fleet.md): the one schedule both Envoy hosts follow.
//!
//! The node polls the fleet's log (`etcd::poll`) every `[envoy].etcd_interval`, or on the
//! next tick after an admin write on this node was accepted ([`bans::request_poll`]), one
//! call at a time. A poll that brought [`etcd::POLL_LIMIT`] entries polls again on the next
//! tick; otherwise, at most every [`RETIRE_EVERY_MS`], it asks for the newest entry the
//! fleet may retire (`[bans].retention`, `etcd::retirable`) and retires up to it
//! (`etcd::retire`). The host only sends each [`Call`] (a POST of JSON to etcd's gateway)
//! and hands back the answer.

use cachet_policy::Config;

use crate::{SharedData, bans, etcd};

/// How often the poller asks etcd for entries the fleet may retire, ms.
pub const RETIRE_EVERY_MS: u64 = 60_000;

/// Timeout of one etcd call, ms.
pub const ETCD_TIMEOUT_MS: u64 = 2_000;

/// Largest etcd answer a host reads, bytes (a poll brings at most [`etcd::POLL_LIMIT`]
/// entries of at most a ban expression's 8 KiB each, base64).
pub const MAX_ETCD_ANSWER_BYTES: u64 = 16 * 1024 * 1024;

/// Timeout of one ban-feed fetch, ms.
pub const FEED_TIMEOUT_MS: u64 = 5_000;

/// A request's header lines, owned: `(name, value bytes)`.
pub type Lines = Vec<(&'static str, Vec<u8>)>;

/// The ban feed's schedule (`[envoy].ban_feed_cluster`): a peer's ban list fetched every
/// `[envoy].ban_feed_interval`, the filter's and the module's alike. Times in ms since
/// the Unix epoch.
#[derive(Debug, Default, Clone)]
pub struct FeedPoller {
    next_ms: u64,
}

impl FeedPoller {
    /// On a tick at `now_ms`: the fetch to send when the node has a feed and it is due,
    /// as `(cluster, header lines)`: `GET [envoy].ban_feed_path` with the admin token
    /// (`Authorization: Bearer …`, the peer's admin API; `:authority` the cluster). The
    /// next one is due an interval later whether or not this one is answered.
    pub fn due(&mut self, cfg: &Config, now_ms: u64) -> Option<(String, Lines)> {
        let envoy = &cfg.envoy;
        if envoy.ban_feed_cluster.is_empty() || now_ms < self.next_ms {
            return None;
        }
        let interval = u64::try_from(envoy.ban_feed_interval.0.as_millis()).unwrap_or(5000);
        self.next_ms = now_ms.saturating_add(interval);
        let lines = vec![
            (":method", b"GET".to_vec()),
            (":path", envoy.ban_feed_path.as_bytes().to_vec()),
            (":authority", envoy.ban_feed_cluster.as_bytes().to_vec()),
            (":scheme", b"http".to_vec()),
            (
                "authorization",
                format!("Bearer {}", cfg.admin.token).into_bytes(),
            ),
        ];
        Some((envoy.ban_feed_cluster.clone(), lines))
    }
}

/// Which etcd call is out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtcdCall {
    /// A poll of the log (`etcd::poll`).
    Poll,
    /// The search for the newest retirable entry (`etcd::retirable`).
    Retirable,
    /// A retirement (`etcd::retire`).
    Retire,
}

/// One call for the host to send: `POST` `body` (JSON) to `path` on `[envoy].etcd_cluster`
/// with `content-type: application/json`, at most [`ETCD_TIMEOUT_MS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// What the call is (hand it back with its answer).
    pub what: EtcdCall,
    /// etcd's gateway path ([`etcd::RANGE_PATH`] or [`etcd::TXN_PATH`]).
    pub path: &'static str,
    /// The JSON body.
    pub body: Vec<u8>,
}

impl Call {
    /// The request's header lines for `cluster` ([`lines`]).
    pub fn lines<'a>(&'a self, cluster: &'a str) -> [(&'a str, &'a [u8]); 5] {
        lines(self.path, cluster)
    }
}

/// The header lines of a `POST` of JSON to etcd's gateway `path` on `cluster`, a poll or
/// an admin write alike (pseudo-headers included; `:authority` names the cluster, once:
/// a second `host` would reach the peer as two authorities).
pub fn lines<'a>(path: &'a str, cluster: &'a str) -> [(&'a str, &'a [u8]); 5] {
    [
        (":method", b"POST"),
        (":path", path.as_bytes()),
        (":authority", cluster.as_bytes()),
        (":scheme", b"http"),
        ("content-type", b"application/json"),
    ]
}

/// What an answer did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Answered {
    /// Entries the poll added to the local log (sync the replica and count them when
    /// not 0).
    pub added: usize,
    /// The next call to send now (the retirement that follows a complete poll).
    pub next: Option<Call>,
    /// What failed, for the host's log (`cachet: fleet ban log: …`).
    pub failure: Option<String>,
}

/// The poll schedule of one node (one per filter configuration; the filter keeps it in
/// the lurker-lease holder's VM). Times are milliseconds since the Unix epoch.
#[derive(Debug, Default, Clone)]
pub struct Poller {
    last_poll_ms: u64,
    next_due_ms: u64,
    next_retire_ms: u64,
    busy: bool,
}

impl Poller {
    /// On a tick at `now_ms`: the poll to send, when the node is in fleet mode, no call is
    /// out, and a poll is due (the interval passed, or an accepted write asked for one).
    /// The log is read from `sd` (its `feed_through` revision).
    pub fn due(&mut self, sd: &dyn SharedData, cfg: &Config, now_ms: u64) -> Option<Call> {
        let envoy = &cfg.envoy;
        if envoy.etcd_cluster.is_empty()
            || self.busy
            || !bans::poll_due(sd, now_ms, self.last_poll_ms, self.next_due_ms)
        {
            return None;
        }
        let interval = u64::try_from(envoy.etcd_interval.0.as_millis()).unwrap_or(1000);
        self.last_poll_ms = now_ms;
        self.next_due_ms = now_ms.saturating_add(interval);
        let (log, _) = bans::read_log(sd);
        self.busy = true;
        Some(Call {
            what: EtcdCall::Poll,
            path: etcd::RANGE_PATH,
            body: etcd::poll(&envoy.etcd_prefix, log.feed_through),
        })
    }

    /// The host could not send the call [`Poller::due`] or [`Answered::next`] gave (Envoy
    /// refused it): no call is out, the next due tick tries again.
    pub fn refused(&mut self) {
        self.busy = false;
    }

    /// The answer to `what` at `now_ms`: `(status, body)`, `None` when there was none
    /// (reset, timeout, too large). Applies a poll to the log in `sd`
    /// (`bans::apply_polled`, at most `[bans].max_bans` entries) and says what comes next.
    pub fn answered(
        &mut self,
        sd: &dyn SharedData,
        cfg: &Config,
        what: EtcdCall,
        answer: Option<(u16, &[u8])>,
        now_ms: u64,
    ) -> Answered {
        self.busy = false;
        let prefix = &cfg.envoy.etcd_prefix;
        let mut done = Answered::default();
        let Some((status, body)) = answer else {
            done.failure = Some("etcd did not answer".to_owned());
            return done;
        };
        match what {
            EtcdCall::Poll => {
                let polled = match etcd::poll_answer(prefix, status, body) {
                    Ok(polled) => polled,
                    Err(e) => {
                        done.failure = Some(e.to_string());
                        return done;
                    }
                };
                match bans::apply_polled(sd, &polled, cfg.bans.max_bans, now_ms) {
                    Ok(added) => done.added = added,
                    Err(e) => done.failure = Some(e.to_string()),
                }
                if polled.entries.len() as u64 >= etcd::POLL_LIMIT {
                    // More are waiting: the next tick polls again.
                    self.next_due_ms = 0;
                } else if now_ms >= self.next_retire_ms {
                    self.next_retire_ms = now_ms.saturating_add(RETIRE_EVERY_MS);
                    let retention =
                        u64::try_from(cfg.bans.retention.0.as_millis()).unwrap_or(u64::MAX);
                    done.next = Some(Call {
                        what: EtcdCall::Retirable,
                        path: etcd::RANGE_PATH,
                        body: etcd::retirable(prefix, now_ms.saturating_sub(retention)),
                    });
                }
            }
            EtcdCall::Retirable => match etcd::retirable_answer(prefix, status, body) {
                Ok(Some(cutoff)) => {
                    done.next = Some(Call {
                        what: EtcdCall::Retire,
                        path: etcd::TXN_PATH,
                        body: etcd::retire(prefix, cutoff),
                    });
                }
                Ok(None) => {}
                Err(e) => done.failure = Some(e.to_string()),
            },
            EtcdCall::Retire => {
                if let Err(e) = etcd::retire_answer(status, body) {
                    done.failure = Some(e.to_string());
                }
            }
        }
        self.busy = done.next.is_some();
        done
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use crate::MemoryStore;

    fn config() -> Config {
        Config::from_json(
            r#"{"envoy": {"etcd_cluster": "etcd", "etcd_interval": "1s"},
                "bans": {"retention": "10m"}}"#,
        )
        .unwrap()
    }

    #[test]
    fn polls_once_per_interval_one_call_at_a_time_and_at_once_when_asked() {
        let (sd, cfg) = (MemoryStore::default(), config());
        let mut p = Poller::default();
        let first = p.due(&sd, &cfg, 10_000).unwrap();
        assert_eq!((first.what, first.path), (EtcdCall::Poll, etcd::RANGE_PATH));
        // Out: nothing more until it is answered, even when due.
        assert_eq!(p.due(&sd, &cfg, 20_000), None);
        p.refused();
        assert!(p.due(&sd, &cfg, 20_000).is_some());
        p.refused();
        // Not due again before the interval...
        assert_eq!(p.due(&sd, &cfg, 20_500), None);
        // ...unless an accepted write asked for it.
        bans::request_poll(&sd, 20_600);
        assert!(p.due(&sd, &cfg, 20_700).is_some());
        p.refused();
        assert_eq!(p.due(&sd, &cfg, 20_800), None);
        assert!(p.due(&sd, &cfg, 21_700).is_some());
    }

    #[test]
    fn the_ban_feed_is_fetched_once_per_interval_with_the_admin_token() {
        let cfg = Config::from_json(
            r#"{"admin": {"token": "0123456789abcdef0123"},
                "envoy": {"ban_feed_cluster": "peer", "ban_feed_interval": "5s"}}"#,
        )
        .unwrap();
        let mut f = FeedPoller::default();
        let (cluster, lines) = f.due(&cfg, 10_000).unwrap();
        assert_eq!(cluster, "peer");
        let get = |n: &str| {
            lines
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.as_slice())
        };
        assert_eq!(get(":method"), Some(&b"GET"[..]));
        assert_eq!(get(":authority"), Some(&b"peer"[..]));
        assert_eq!(
            get("authorization"),
            Some(&b"Bearer 0123456789abcdef0123"[..])
        );
        assert!(get("host").is_none(), "the authority is named once");
        assert!(f.due(&cfg, 14_999).is_none());
        assert!(f.due(&cfg, 15_000).is_some());
        assert!(FeedPoller::default().due(&config(), 1).is_none());
    }

    #[test]
    fn a_node_outside_fleet_mode_never_calls() {
        let sd = MemoryStore::default();
        let cfg = Config::from_json("{}").unwrap();
        assert_eq!(Poller::default().due(&sd, &cfg, 1), None);
    }

    #[test]
    fn no_answer_or_a_bad_one_is_a_failure_that_frees_the_poller() {
        let (sd, cfg) = (MemoryStore::default(), config());
        let mut p = Poller::default();
        p.due(&sd, &cfg, 10_000).unwrap();
        let a = p.answered(&sd, &cfg, EtcdCall::Poll, None, 10_001);
        assert_eq!(a.failure.as_deref(), Some("etcd did not answer"));
        assert_eq!((a.added, a.next), (0, None));
        assert!(p.due(&sd, &cfg, 11_001).is_some());
        let a = p.answered(&sd, &cfg, EtcdCall::Poll, Some((503, b"{}")), 11_002);
        assert!(a.failure.is_some(), "{a:?}");
        assert_eq!(a.added, 0);
    }

    #[test]
    fn an_empty_complete_poll_asks_for_retirement_at_most_once_a_minute() {
        let (sd, cfg) = (MemoryStore::default(), config());
        let mut p = Poller::default();
        let empty = br#"{"header": {"revision": "7"}, "count": "0"}"#;
        p.due(&sd, &cfg, 10_000).unwrap();
        let a = p.answered(&sd, &cfg, EtcdCall::Poll, Some((200, empty)), 10_000);
        assert_eq!(a.failure, None, "{a:?}");
        let next = a.next.unwrap();
        assert_eq!(next.what, EtcdCall::Retirable);
        // The retirement search is out: no poll meanwhile.
        assert_eq!(p.due(&sd, &cfg, 12_000), None);
        let a = p.answered(&sd, &cfg, EtcdCall::Retirable, Some((200, empty)), 12_000);
        assert_eq!((a.failure, a.next), (None, None));
        p.due(&sd, &cfg, 12_000).unwrap();
        let a = p.answered(&sd, &cfg, EtcdCall::Poll, Some((200, empty)), 12_000);
        assert_eq!(a.next, None, "a minute has not passed");
    }
}
