//! The edge's access-log record: one JSON line per request, the schema `cachet stat` and `cachet log` read.
//!
//! The edge app fills one [`Access`] per request (with [`Access::planned`] and the
//! `drive` notes) and writes it with `serde_json` to its log endpoint; Viceroy prints
//! log-endpoint lines to stdout as `<endpoint> :: <line>`. The CLI reads the same lines
//! with a tolerant view of this schema (`crates/cli/src/access.rs`, every field optional);
//! a test there reads a record written by this type. Nothing secret is ever in it: no
//! request headers, no admin token, no bodies.

use cachet_policy::Plan;

/// One access-log record, written as a JSON line per request.
#[derive(serde::Serialize, Default, Debug)]
pub struct Access {
    /// Request method.
    pub method: String,
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
    /// Body bytes sent to the client.
    pub body_bytes: Option<u64>,
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
    /// Refresh work: `ahead` (early refresh), `stale` (grace), `revalidated-304`,
    /// `replaced`, `kept-stored` (origin error), `private` (now uncacheable).
    pub refresh: Option<String>,
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
    /// Error text, when something failed.
    pub error: Option<String>,
}

impl Access {
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

    /// Records a `drive` note ([`crate::drive::Note`]).
    pub fn note(&mut self, note: crate::drive::Note) {
        use crate::drive::Note;
        match note {
            Note::Status(s) => self.cache = s,
            Note::PassReason(r) => self.pass_reason = Some(r),
            Note::Refresh(r) => self.refresh = Some(r.into()),
            Note::Error(e) => self.error = Some(e),
            Note::OriginWait(d) => self.origin_wait(d),
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
