//! The edge's JSON access-log lines (`cachet_http::access::Access`), as `cachet stat` and
//! `cachet log` read them.
//!
//! A line is one JSON object, optionally prefixed by the log endpoint's name as Viceroy
//! prints it (`cachet_log :: {…}`). Other lines (Viceroy's own messages, blank lines) are
//! not access-log lines: [`split`] (`cachet_sim::access_line`) returns `None` for them and the callers count them.

use cachet_http::access::RefreshOutcome;
use serde::Deserialize;

pub use cachet_sim::access_line::split;

/// The fields `cachet stat` counts, from one access-log line. Unknown fields are ignored
/// and every field is optional, so lines of older and newer edges both read.
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct Access {
    /// When the request arrived (RFC 3339; absent in lines of edges before issue 31).
    pub time: Option<String>,
    /// Request method.
    pub method: Option<String>,
    /// The client's `User-Agent` (U+FFFD for bytes that were not UTF-8).
    pub user_agent: Option<String>,
    /// Normalized target (path + query).
    pub url: Option<String>,
    /// Matched route (`admin` for the admin API, `-` for none).
    pub route: Option<String>,
    /// `HIT`, `MISS`, `PASS`, `STALE`, `SYNTH` or `ERROR` (the `X-Cache` label).
    pub cache: Option<String>,
    /// Status sent to the client.
    pub status: Option<u16>,
    /// Milliseconds waited for the origin in the foreground (present when it was asked).
    pub origin_ms: Option<u64>,
    /// Body bytes sent to the client.
    pub body_bytes: Option<u64>,
    /// Milliseconds from arrival to the end of the response.
    pub total_ms: Option<u64>,
    /// What the request's revalidation or background refresh did, read with the edge's
    /// own spelling (`cachet_http::access::RefreshOutcome`); `Err` holds a value this
    /// build does not know (a newer edge's), so the line still reads.
    #[serde(deserialize_with = "refresh")]
    pub refresh: Option<Result<RefreshOutcome, String>>,
    /// The ban that invalidated the object found.
    pub banned_by: Option<u64>,
    /// Workspace high watermark of this request, bytes.
    pub ws_watermark: Option<u64>,
    /// Whether the workspace overflowed.
    pub ws_overflow: Option<bool>,
    /// Sampled workspace verification: `ok` or `violation`.
    pub ws_verified: Option<String>,
    /// Fastly shielding tier: `single`, `edge` or `shield`.
    pub tier: Option<String>,
    /// Error text.
    pub error: Option<String>,
    /// On an `ERROR` line, what failed (`origin`, `config`, `cache`, `body`, `admin`);
    /// absent in lines of edges before issue 31.
    pub failure: Option<String>,
    /// Id of the ban or purge an admin call created (admin lines only).
    pub ban_added: Option<u64>,
}

/// The `refresh` field: absent or `null` is `None`, a known spelling its outcome, any
/// other text `Err(text)`.
fn refresh<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Result<RefreshOutcome, String>>, D::Error> {
    let text = Option::<String>::deserialize(d)?;
    Ok(text.map(|t| RefreshOutcome::parse(&t).ok_or(t)))
}

/// Parses the JSON text of an access-log line (see [`split`]).
///
/// # Errors
/// serde_json's message (with its column) when the text is not a JSON object of this shape.
pub fn parse(json: &str) -> Result<Access, serde_json::Error> {
    serde_json::from_str(json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_reads_known_fields_and_ignores_others() {
        let a = parse(
            r#"{"method":"GET","host":"h","url":"/a","route":"blog","cache":"HIT","status":200,
                "device":"pc","key":"k","ws_watermark":512,"tier":"single","new_field":[1]}"#,
        )
        .unwrap();
        assert_eq!(a.cache.as_deref(), Some("HIT"));
        assert_eq!(a.status, Some(200));
        assert_eq!(a.ws_watermark, Some(512));
        assert_eq!(a.tier.as_deref(), Some("single"));
        assert!(parse(r#"{"status":"x"}"#).is_err());
        let newer = parse(r#"{"refresh":"stale:some-new-outcome"}"#).unwrap();
        assert_eq!(newer.refresh, Some(Err("stale:some-new-outcome".into())));
        assert_eq!(parse(r#"{"refresh":null}"#).unwrap().refresh, None);
        assert!(parse("[1]").is_err());
    }

    #[test]
    fn reads_every_field_the_edge_writes() {
        use cachet_http::CacheStatus;
        use cachet_http::access::{Access as Written, RefreshCause, Refreshed};
        let w = Written {
            time: Some("2025-03-01T09:00:00.123Z".into()),
            method: "GET".into(),
            user_agent: Some("UA".into()),
            body_bytes: Some(5),
            total_ms: Some(30),
            url: "/a?b=1".into(),
            route: "blog".into(),
            cache: CacheStatus::Stale,
            status: 200,
            origin_ms: Some(12),
            refresh: Some(RefreshOutcome::Background(
                RefreshCause::Stale,
                Refreshed::Revalidated,
            )),
            banned_by: Some(7),
            ban_added: Some(9),
            ws_watermark: Some(4096),
            ws_overflow: Some(false),
            ws_verified: Some("ok"),
            tier: "shield",
            error: Some("boom".into()),
            failure: Some("origin"),
            ..Written::default()
        };
        let line = format!("cachet_log :: {}", serde_json::to_string(&w).unwrap());
        let r = parse(split(&line).unwrap()).unwrap();
        assert_eq!(
            r,
            Access {
                time: Some("2025-03-01T09:00:00.123Z".into()),
                method: Some("GET".into()),
                user_agent: Some("UA".into()),
                body_bytes: Some(5),
                total_ms: Some(30),
                url: Some("/a?b=1".into()),
                route: Some("blog".into()),
                cache: Some("STALE".into()),
                status: Some(200),
                origin_ms: Some(12),
                refresh: Some(Ok(RefreshOutcome::Background(
                    RefreshCause::Stale,
                    Refreshed::Revalidated
                ))),
                banned_by: Some(7),
                ws_watermark: Some(4096),
                ws_overflow: Some(false),
                ws_verified: Some("ok".into()),
                tier: Some("shield".into()),
                error: Some("boom".into()),
                failure: Some("origin".into()),
                ban_added: Some(9),
            }
        );
    }
}
