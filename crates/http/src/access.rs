//! The edge's access-log record: one JSON line per request, the schema `cachet stat` and `cachet log` read.
//!
//! The edge app fills one [`Access`] per request (with [`Access::planned`] and the
//! exchange notes, `cachet_http::exchange::Notes`) and writes it with `serde_json` to its log endpoint; Viceroy prints
//! log-endpoint lines to stdout as `<endpoint> :: <line>`. The CLI reads the same lines
//! with a tolerant view of this schema (`crates/cli/src/access.rs`, every field optional)
//! and the `refresh` field through [`RefreshOutcome::parse`], the inverse of the
//! [`RefreshOutcome::as_str`] this record is written with (one spelling for both); tests
//! there read records written by this type. Nothing secret is ever in it: no
//! request headers, no admin token, no bodies.

use cachet_policy::Plan;

/// One access-log record, written as a JSON line per request.
#[derive(serde::Serialize, Default, Debug)]
pub struct Access {
    /// When the request arrived: RFC 3339, UTC, milliseconds (`2026-03-01T09:00:00.123Z`,
    /// [`Access::arrived`]); `cachet simulate` and `cachet log` read it.
    pub time: Option<String>,
    /// Request method.
    pub method: String,
    /// The client's `User-Agent` ([`Access::arrived`]): its bytes as UTF-8, an invalid
    /// sequence as U+FFFD, several lines joined with `, ` (RFC 9110 §5.3); absent when the
    /// request had none. `cachet simulate` classifies devices from it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
    /// URL surrogate keys purged because an unsafe method succeeded (RFC 9111 §4.4).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub invalidated: Vec<String>,
    /// Normalized host.
    pub host: String,
    /// Normalized target (path + query) sent to the origin.
    pub url: String,
    /// Matched route (`admin` for the admin API, `-` for none).
    pub route: String,
    /// `HIT`, `MISS`, `PASS`, `STALE`, `SYNTH` or `ERROR`.
    #[serde(serialize_with = "status_label")]
    pub cache: crate::CacheStatus,
    /// Status sent to the client.
    pub status: u16,
    /// Device class.
    pub device: &'static str,
    /// Cache key.
    pub key: String,
    /// Why the request was passed or the response not stored.
    pub pass_reason: Option<&'static str>,
    /// Milliseconds spent waiting for the origin (foreground).
    pub origin_ms: Option<u64>,
    /// Body bytes sent to the client (a streamed body: its `Content-Length`, `None` when
    /// it has none).
    pub body_bytes: Option<u64>,
    /// Milliseconds from the request's arrival to the end of its response (body sent),
    /// origin waits included, the background refresh after it excluded (`refresh_ms`).
    pub total_ms: Option<u64>,
    /// Stored (possibly gzip) body bytes of the object served or stored.
    pub stored_bytes: Option<u64>,
    /// Origin body bytes of that object.
    pub origin_bytes: Option<u64>,
    /// The ban that invalidated the object found (0: stored before the ban log's floor).
    pub banned_by: Option<u64>,
    /// The id of the ban an admin call added (`POST /.cachet/ban`, route `admin`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ban_added: Option<u64>,
    /// The bans could not be read (KV store failing, no copy left) and the object found
    /// was stored before that began: refetched rather than served (fail closed).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub bans_unknown: bool,
    /// What a foreground revalidation or a background refresh did ([`RefreshOutcome`]:
    /// `revalidated-304`, `stale:replaced`, …).
    pub refresh: Option<RefreshOutcome>,
    /// Milliseconds the background refresh took (after the response was sent).
    pub refresh_ms: Option<u64>,
    /// Workspace high watermark of this request, bytes (client + backend halves).
    pub ws_watermark: Option<u64>,
    /// Bytes the workspace reset zeroed.
    pub ws_cleared: Option<u64>,
    /// Whether the workspace overflowed (an allocation failed cleanly).
    pub ws_overflow: Option<bool>,
    /// Sampled verification result: `ok` or `violation`.
    pub ws_verified: Option<&'static str>,
    /// Fastly shielding tier of this instance: `single`, `edge` or `shield`.
    pub tier: &'static str,
    /// Which request of its instance this was (Fastly reusable sandboxes: `1` for the
    /// first request of a fresh instance); absent where instances are not counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_request: Option<u64>,
    /// Error text, when something failed.
    pub error: Option<String>,
    /// On an `ERROR` line, what failed: `origin` (unreachable, no stale copy), `config`
    /// (the configuration does not load), `cache`, `body` or `admin` (a refused admin
    /// call). `cachet stat` counts only `origin` as an origin error. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<&'static str>,
}

impl Access {
    /// A record for a request with this `method` that arrived at `at` (wall clock) with
    /// these header lines (names lowercase or not; values bytes): sets [`Self::time`] and
    /// [`Self::user_agent`]. The cache status starts as `ERROR` until a note says
    /// otherwise.
    pub fn arrived(method: &str, at: std::time::SystemTime, headers: &[(String, Vec<u8>)]) -> Self {
        let agents: Vec<String> = headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("user-agent"))
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .collect();
        Self {
            time: Some(humantime::format_rfc3339_millis(at).to_string()),
            method: method.to_owned(),
            user_agent: (!agents.is_empty()).then(|| agents.join(", ")),
            cache: crate::CacheStatus::Error,
            ..Self::default()
        }
    }

    /// Records what the plan decided: normalized host and target, route, device, key.
    pub fn planned(&mut self, plan: &Plan<'_>) {
        self.host = plan.host.to_string();
        self.url = plan.target.to_string();
        plan.route.clone_into(&mut self.route);
        self.device = plan.device.as_str();
        self.key.clone_from(&plan.cache_key);
    }

    /// Adds a foreground origin wait of `elapsed` to [`Self::origin_ms`].
    pub fn origin_wait(&mut self, elapsed: std::time::Duration) {
        self.origin_ms = Some(self.origin_ms.unwrap_or(0).saturating_add(millis(elapsed)));
    }

    /// Records what an exchange noted ([`crate::exchange::Notes`]): its cache status,
    /// pass reason, foreground revalidation, error and origin wait, each when set.
    pub fn record(&mut self, notes: &crate::exchange::Notes) {
        if let Some(s) = notes.status {
            self.cache = s;
        }
        if let Some(r) = notes.pass_reason {
            self.pass_reason = Some(r);
        }
        if let Some(r) = notes.refresh {
            self.refresh = Some(RefreshOutcome::Foreground(r));
        }
        if let Some(e) = &notes.error {
            self.error = Some(e.clone());
        }
        if let Some(d) = notes.origin_wait {
            self.origin_wait(d);
        }
    }
}

/// Milliseconds in `d`, saturating.
pub fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Serializes a [`crate::CacheStatus`] as its `X-Cache` label.
#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's serialize_with passes a reference"
)]
fn status_label<S: serde::Serializer>(c: &crate::CacheStatus, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.as_str())
}

/// Why a background refresh ran: the part of a [`RefreshOutcome`] before its `:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefreshCause {
    /// The object was served stale within grace (`STALE`): `stale`.
    Stale,
    /// Refresh-ahead fired on a fresh hit (`HIT`): `ahead`.
    Ahead,
}

/// What a foreground revalidation did: the request held the obligation for an object past
/// its grace and asked the origin before answering (its `origin_ms` counts that fetch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revalidation {
    /// A `304` freshened the stored object: `revalidated-304`.
    Revalidated,
    /// A `304` made the response per-user: a hit-for-pass marker replaced the object:
    /// `now-uncacheable`.
    NowUncacheable,
    /// An error answer (5xx, an invalid status): the stored object is kept: `origin-error`.
    OriginError,
}

/// What a background refresh (after the client's answer) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refreshed {
    /// A `304` freshened the stored object: `revalidated-304`.
    Revalidated,
    /// A storable answer replaced it: `replaced`.
    Replaced,
    /// The answer may no longer be stored (or a `304` made it per-user): a hit-for-pass
    /// marker replaced it: `now-uncacheable`.
    NowUncacheable,
    /// An error answer (5xx, 206, 412, an invalid status): the stored object is kept:
    /// `origin-error-kept-stored`.
    OriginError,
    /// The refresh failed (the origin was not reached, or the cache refused the write; the
    /// line's `error` says why): the stored object is kept: `kept-stored`.
    KeptStored,
}

/// The access log's `refresh` field: what the request's revalidation or background
/// refresh did. Written and read with one spelling ([`Self::as_str`], [`Self::parse`]):
/// a foreground outcome alone (`revalidated-304`), a background one as
/// `<cause>:<outcome>` (`stale:revalidated-304`, `ahead:replaced`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefreshOutcome {
    /// The request revalidated the object before answering (past grace).
    Foreground(Revalidation),
    /// A background refresh ran after the answer (stale within grace, or ahead).
    Background(RefreshCause, Refreshed),
}

impl RefreshOutcome {
    /// Every outcome, each once.
    pub const ALL: [Self; 13] = {
        use RefreshCause::{Ahead, Stale};
        use Refreshed as B;
        [
            Self::Foreground(Revalidation::Revalidated),
            Self::Foreground(Revalidation::NowUncacheable),
            Self::Foreground(Revalidation::OriginError),
            Self::Background(Stale, B::Revalidated),
            Self::Background(Stale, B::Replaced),
            Self::Background(Stale, B::NowUncacheable),
            Self::Background(Stale, B::OriginError),
            Self::Background(Stale, B::KeptStored),
            Self::Background(Ahead, B::Revalidated),
            Self::Background(Ahead, B::Replaced),
            Self::Background(Ahead, B::NowUncacheable),
            Self::Background(Ahead, B::OriginError),
            Self::Background(Ahead, B::KeptStored),
        ]
    };

    /// The log's spelling (the only place it is written down).
    pub const fn as_str(self) -> &'static str {
        use RefreshCause::{Ahead, Stale};
        use Refreshed as B;
        match self {
            Self::Foreground(Revalidation::Revalidated) => "revalidated-304",
            Self::Foreground(Revalidation::NowUncacheable) => "now-uncacheable",
            Self::Foreground(Revalidation::OriginError) => "origin-error",
            Self::Background(Stale, B::Revalidated) => "stale:revalidated-304",
            Self::Background(Stale, B::Replaced) => "stale:replaced",
            Self::Background(Stale, B::NowUncacheable) => "stale:now-uncacheable",
            Self::Background(Stale, B::OriginError) => "stale:origin-error-kept-stored",
            Self::Background(Stale, B::KeptStored) => "stale:kept-stored",
            Self::Background(Ahead, B::Revalidated) => "ahead:revalidated-304",
            Self::Background(Ahead, B::Replaced) => "ahead:replaced",
            Self::Background(Ahead, B::NowUncacheable) => "ahead:now-uncacheable",
            Self::Background(Ahead, B::OriginError) => "ahead:origin-error-kept-stored",
            Self::Background(Ahead, B::KeptStored) => "ahead:kept-stored",
        }
    }

    /// The outcome spelled `s` ([`Self::as_str`]), `None` for any other text.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == s)
    }

    /// A background refresh: one origin fetch after the client's answer (a foreground
    /// revalidation's fetch is the line's `origin_ms`).
    pub const fn is_background(self) -> bool {
        matches!(self, Self::Background(..))
    }

    /// A `304` freshened the stored object (in the foreground or the background).
    pub const fn revalidated(self) -> bool {
        matches!(
            self,
            Self::Foreground(Revalidation::Revalidated)
                | Self::Background(_, Refreshed::Revalidated)
        )
    }

    /// The origin answered with an error or could not be reached, and the stored object
    /// was kept.
    pub const fn origin_error(self) -> bool {
        matches!(
            self,
            Self::Foreground(Revalidation::OriginError)
                | Self::Background(_, Refreshed::OriginError | Refreshed::KeptStored)
        )
    }
}

impl std::fmt::Display for RefreshOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for RefreshOutcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for RefreshOutcome {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown refresh outcome {s:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrived_records_the_time_and_the_user_agent_bytes() {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_740_819_600_123);
        let a = Access::arrived("GET", at, &[("host".into(), b"h".to_vec())]);
        assert_eq!(a.time.as_deref(), Some("2025-03-01T09:00:00.123Z"));
        assert_eq!(a.user_agent, None);
        assert_eq!(a.cache, crate::CacheStatus::Error);
        let json = serde_json::to_value(&a).unwrap();
        assert!(json.get("user_agent").is_none(), "{json}");
        let headers = [
            ("User-Agent".into(), b"Mozilla/5.0 (iPhone)".to_vec()),
            ("x".into(), b"y".to_vec()),
            ("user-agent".into(), b"bot\xff1".to_vec()),
        ];
        let a = Access::arrived("HEAD", at, &headers);
        assert_eq!(a.method, "HEAD");
        assert_eq!(
            a.user_agent.as_deref(),
            Some("Mozilla/5.0 (iPhone), bot\u{fffd}1")
        );
    }

    #[test]
    fn every_refresh_outcome_has_one_spelling_that_parses_back() {
        let mut seen = std::collections::HashSet::new();
        for o in RefreshOutcome::ALL {
            assert!(seen.insert(o.as_str()), "{o:?} spelled like another");
            assert_eq!(RefreshOutcome::parse(o.as_str()), Some(o));
            assert_eq!(o.to_string(), o.as_str());
        }
        // Every variant is in ALL: the product of the parts, checked exhaustively.
        let fg = |r: Revalidation| match r {
            Revalidation::Revalidated
            | Revalidation::NowUncacheable
            | Revalidation::OriginError => r,
        };
        let bg = |r: Refreshed| match r {
            Refreshed::Revalidated
            | Refreshed::Replaced
            | Refreshed::NowUncacheable
            | Refreshed::OriginError
            | Refreshed::KeptStored => r,
        };
        let cause = |c: RefreshCause| match c {
            RefreshCause::Stale | RefreshCause::Ahead => c,
        };
        assert_eq!(RefreshOutcome::ALL.len(), 3 + 2 * 5);
        for o in RefreshOutcome::ALL {
            match o {
                RefreshOutcome::Foreground(r) => assert_eq!(fg(r), r),
                RefreshOutcome::Background(c, r) => assert_eq!((cause(c), bg(r)), (c, r)),
            }
        }
        // The spellings the docs and README show stay as they were.
        for s in [
            "stale:revalidated-304",
            "stale:replaced",
            "revalidated-304",
            "stale:kept-stored",
        ] {
            assert!(RefreshOutcome::parse(s).is_some(), "{s}");
        }
        assert_eq!(RefreshOutcome::parse("kept-stored"), None);
        assert_eq!(RefreshOutcome::parse("private"), None);
    }

    #[test]
    fn a_foreground_note_records_a_foreground_outcome() {
        let mut a = Access::default();
        a.record(&crate::exchange::Notes {
            refresh: Some(Revalidation::Revalidated),
            ..crate::exchange::Notes::default()
        });
        assert_eq!(
            a.refresh,
            Some(RefreshOutcome::Foreground(Revalidation::Revalidated))
        );
    }
}
