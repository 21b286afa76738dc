//! Conditional revalidation (RFC 9111 §4.3): validators → `If-None-Match`/`If-Modified-Since`, 304 → freshened metadata.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::decide::EntryTimes;
use crate::error::RefreshError;
use crate::origin::should_store_over;
use crate::time::Timestamp;

/// Longest validator value accepted, in bytes (entity tags and HTTP-dates are far shorter;
/// this bounds what an origin can make us echo back).
pub const MAX_VALIDATOR_BYTES: usize = 1_024;

/// The validators stored with an object (RFC 9110 §8.8): the response's `ETag` and
/// `Last-Modified` header values, verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Validators {
    /// `ETag` value, e.g. `"abc"` or `W/"abc"`.
    pub etag: Option<String>,
    /// `Last-Modified` value (an HTTP-date, sent back unparsed, RFC 9111 §4.3.1).
    pub last_modified: Option<String>,
}

/// Header values for a conditional request, from [`conditional_headers`]. Both `None`
/// means the object has no validator: fetch unconditionally.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConditionalHeaders {
    /// Value for `If-None-Match`.
    pub if_none_match: Option<String>,
    /// Value for `If-Modified-Since`.
    pub if_modified_since: Option<String>,
}

impl ConditionalHeaders {
    /// Whether at least one header is set.
    pub fn is_conditional(&self) -> bool {
        self.if_none_match.is_some() || self.if_modified_since.is_some()
    }
}

/// Builds the conditional request headers from stored validators (RFC 9111 §4.3.1): the
/// entity tag goes in `If-None-Match`, `Last-Modified` in `If-Modified-Since`. Both are sent
/// when both exist (RFC 9110 §13.1.3: a server that supports `If-None-Match` ignores
/// `If-Modified-Since`; older ones only understand the date).
///
/// # Errors
/// [`RefreshError::InvalidValidator`] when a value is empty, longer than
/// [`MAX_VALIDATOR_BYTES`], contains a byte other than visible ASCII / space / tab (no CR
/// or LF: no header injection), or the ETag is not `"…"` / `W/"…"` with `etagc` characters
/// (RFC 9110 §8.8.3). The adapter should then fetch unconditionally.
pub fn conditional_headers(v: &Validators) -> Result<ConditionalHeaders, RefreshError> {
    let if_none_match = match &v.etag {
        Some(tag) => {
            check_etag(tag)?;
            Some(tag.clone())
        }
        None => None,
    };
    let if_modified_since = match &v.last_modified {
        Some(date) => {
            check_field_value("last_modified", date)?;
            Some(date.clone())
        }
        None => None,
    };
    Ok(ConditionalHeaders {
        if_none_match,
        if_modified_since,
    })
}

fn check_field_value(field: &'static str, value: &str) -> Result<(), RefreshError> {
    let bad = |reason| Err(RefreshError::InvalidValidator { field, reason });
    if value.trim().is_empty() {
        return bad("empty value");
    }
    if value.len() > MAX_VALIDATOR_BYTES {
        return bad("longer than MAX_VALIDATOR_BYTES");
    }
    if !value
        .bytes()
        .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
    {
        return bad("contains a control or non-ASCII byte");
    }
    Ok(())
}

fn check_etag(tag: &str) -> Result<(), RefreshError> {
    check_field_value("etag", tag)?;
    let opaque = tag.strip_prefix("W/").unwrap_or(tag);
    let inner = opaque
        .strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .filter(|_| opaque.len() >= 2);
    // etagc = %x21 / %x23-7E / obs-text (obs-text already refused above).
    match inner {
        Some(inner)
            if inner
                .bytes()
                .all(|b| b == 0x21 || (0x23..=0x7e).contains(&b)) =>
        {
            Ok(())
        }
        _ => Err(RefreshError::InvalidValidator {
            field: "etag",
            reason: "not an entity-tag (\"…\" or W/\"…\")",
        }),
    }
}

/// What the revalidation response said, as read by the adapter: the parts of a 304's (or
/// 200's) headers this crate needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NotModified {
    /// Freshness lifetime from the response's `Cache-Control`/`Expires` (RFC 9111 §4.2.1),
    /// if it gave one; `None` keeps the stored TTL.
    pub ttl: Option<Duration>,
    /// A new `ETag`, if the response carried one.
    pub etag: Option<String>,
    /// A new `Last-Modified`, if the response carried one.
    pub last_modified: Option<String>,
    /// How long this revalidation round trip took (becomes the new XFetch `delta`).
    pub delta: Duration,
    /// Whether the response's fields make it per-user (`private`, `no-store`, a
    /// `Set-Cookie`: the adapter's storage policy decides). A 304 updates the stored
    /// response's fields (RFC 9111 §3.2), so such a 304 cannot freshen a shared object.
    pub per_user: bool,
}

/// What to do with the response to a revalidation, from [`on_revalidation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revalidation {
    /// `304 Not Modified`: keep the stored body and headers, replace the metadata with
    /// these (RFC 9111 §4.3.4 freshening).
    Freshen {
        /// New timing: `stored_at = now`, TTL from the 304 if given, same grace/keep,
        /// `delta` = the measured round trip.
        times: EntryTimes,
        /// Stored validators updated with any the 304 carried.
        validators: Validators,
    },
    /// A full response that replaces the stored object (RFC 9111 §4.3.3: a non-304 final
    /// response is used instead of the stored one); store it as any fresh response.
    Replace,
    /// A `304` whose fields make the response per-user ([`NotModified::per_user`]): the
    /// stored object may no longer be shared; replace it with a hit-for-pass marker. The
    /// requester alone may get the stored body with the 304's fields.
    Uncacheable,
    /// A 5xx (or invalid status): keep the stored object, answer per
    /// [`crate::on_origin_error`] (RFC 5861 §4; [`should_store_over`]).
    KeepStored,
}

/// Handles the response to a conditional request, received at `now`
/// with status `status`, for an object stored with `times` and `validators`.
///
/// * 304 saying it is per-user → [`Revalidation::Uncacheable`];
/// * 304 → [`Revalidation::Freshen`] with `stored_at = now`, `ttl = fresh.ttl` or the old
///   TTL, validators updated (RFC 9111 §4.3.4), `delta = fresh.delta`;
/// * a status [`should_store_over`] accepts over a good object (200–499 except 304) →
///   [`Revalidation::Replace`];
/// * 5xx, 1xx, invalid → [`Revalidation::KeepStored`].
pub fn on_revalidation(
    times: &EntryTimes,
    validators: &Validators,
    status: u16,
    now: Timestamp,
    fresh: NotModified,
) -> Revalidation {
    if status == 304 && fresh.per_user {
        Revalidation::Uncacheable
    } else if status == 304 {
        let NotModified {
            ttl,
            etag,
            last_modified,
            delta,
            per_user: _,
        } = fresh;
        let times = EntryTimes {
            stored_at: now,
            ttl: ttl.unwrap_or(times.ttl),
            delta,
            ..*times
        };
        let validators = Validators {
            etag: etag.or_else(|| validators.etag.clone()),
            last_modified: last_modified.or_else(|| validators.last_modified.clone()),
        };
        Revalidation::Freshen { times, validators }
    } else if should_store_over(true, status) {
        Revalidation::Replace
    } else {
        Revalidation::KeepStored
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(etag: Option<&str>, lm: Option<&str>) -> Validators {
        Validators {
            etag: etag.map(str::to_owned),
            last_modified: lm.map(str::to_owned),
        }
    }

    #[test]
    fn builds_both_headers() {
        let lm = "Wed, 21 Oct 2015 07:28:00 GMT";
        let h = conditional_headers(&v(Some("W/\"x1\""), Some(lm))).unwrap();
        assert_eq!(h.if_none_match.as_deref(), Some("W/\"x1\""));
        assert_eq!(h.if_modified_since.as_deref(), Some(lm));
        assert!(h.is_conditional());
        let none = conditional_headers(&Validators::default()).unwrap();
        assert!(!none.is_conditional());
        assert_eq!(
            conditional_headers(&v(Some("\"\""), None))
                .unwrap()
                .if_none_match
                .as_deref(),
            Some("\"\"")
        );
    }

    #[test]
    fn rejects_bad_validators() {
        for tag in [
            "abc",
            "\"a\"b\"",
            "\"",
            "W/abc",
            "\"a\r\nX: y\"",
            "",
            "\"é\"",
        ] {
            let err = conditional_headers(&v(Some(tag), None)).unwrap_err();
            assert!(
                matches!(err, RefreshError::InvalidValidator { field: "etag", .. }),
                "{tag}"
            );
        }
        let long = "x".repeat(MAX_VALIDATOR_BYTES + 1);
        for lm in ["", "Wed\r\n", long.as_str()] {
            let err = conditional_headers(&v(None, Some(lm))).unwrap_err();
            assert!(matches!(
                err,
                RefreshError::InvalidValidator {
                    field: "last_modified",
                    ..
                }
            ));
        }
    }

    #[test]
    fn not_modified_freshens_metadata() {
        let times = EntryTimes::new(Timestamp::from_millis(1_000), Duration::from_secs(20))
            .with_grace(Duration::from_secs(5))
            .with_delta(Duration::from_secs(3));
        let vals = v(Some("\"a\""), Some("Wed, 21 Oct 2015 07:28:00 GMT"));
        let now = Timestamp::from_millis(40_000);
        let r = on_revalidation(
            &times,
            &vals,
            304,
            now,
            NotModified {
                delta: Duration::from_millis(80),
                ..NotModified::default()
            },
        );
        let Revalidation::Freshen {
            times: t,
            validators,
        } = r
        else {
            panic!("{r:?}")
        };
        assert_eq!(t.stored_at, now);
        assert_eq!(t.ttl, Duration::from_secs(20));
        assert_eq!(t.grace, Duration::from_secs(5));
        assert_eq!(t.delta, Duration::from_millis(80));
        assert_eq!(validators, vals);
        let r = on_revalidation(
            &times,
            &vals,
            304,
            now,
            NotModified {
                ttl: Some(Duration::from_secs(60)),
                etag: Some("\"b\"".into()),
                ..NotModified::default()
            },
        );
        let Revalidation::Freshen {
            times: t,
            validators,
        } = r
        else {
            panic!("{r:?}")
        };
        assert_eq!(t.ttl, Duration::from_secs(60));
        assert_eq!(validators.etag.as_deref(), Some("\"b\""));
        assert_eq!(validators.last_modified, vals.last_modified);
        // A 304 that makes the response per-user never freshens a shared object.
        let private = NotModified {
            per_user: true,
            ..NotModified::default()
        };
        assert_eq!(
            on_revalidation(&times, &vals, 304, now, private.clone()),
            Revalidation::Uncacheable
        );
        // The flag only concerns 304s: a full response is judged by storage rules.
        assert_eq!(
            on_revalidation(&times, &vals, 200, now, private),
            Revalidation::Replace
        );
    }

    #[test]
    fn full_responses_replace_errors_keep() {
        let times = EntryTimes::new(Timestamp::EPOCH, Duration::from_secs(1));
        let vals = Validators::default();
        let r = |s| on_revalidation(&times, &vals, s, Timestamp::EPOCH, NotModified::default());
        assert_eq!(r(200), Revalidation::Replace);
        assert_eq!(r(404), Revalidation::Replace);
        assert_eq!(r(500), Revalidation::KeepStored);
        assert_eq!(r(503), Revalidation::KeepStored);
        assert_eq!(r(0), Revalidation::KeepStored);
    }
}
