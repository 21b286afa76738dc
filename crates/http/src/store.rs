//! What a fill stores: the object's [`Meta`] and body bytes, built once from the plan, the
//! storage verdict and the origin response, for both adapters.

use std::time::Duration;

use cachet_policy::object::{self, Encoding, Meta};
use cachet_policy::{Plan, Store};
use cachet_refresh::{EntryTimes, Timestamp, Validators};

use crate::headers::{Headers, text};

/// An origin response about to be stored.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    /// Its status.
    pub status: u16,
    /// Every header line, in order (bytes).
    pub fields: &'a [(String, Vec<u8>)],
    /// Its body as received.
    pub body: &'a [u8],
    /// The fetch's round trip (XFetch's `delta`).
    pub elapsed: Duration,
}

/// The object to store for `origin` under `plan` with verdict `store` at `now`: its
/// metadata and its body bytes, gzip-compressed when the verdict says so and the origin
/// sent it unencoded (`object::for_storage`, seed: Hatena). Stored fields follow
/// [`crate::fields::stored_fields`] (hop-by-hop, `Connection`-listed and
/// `no-cache="…"` fields left out); times carry the TTL net of the initial age, grace,
/// keep and the fetch time ([`sent_at`]); validators are the response's `ETag` / `Last-Modified` when
/// they are text.
///
/// # Errors
/// I/O errors from the gzip encoder (none expected for an in-memory sink).
pub fn object(
    plan: &Plan<'_>,
    store: &Store,
    origin: Origin<'_>,
    now: Timestamp,
) -> std::io::Result<(Meta, Vec<u8>)> {
    let fields = origin.fields;
    let owned = |name: &str| {
        fields
            .value(name)
            .and_then(|v| text(&v).map(|s| s.trim().to_owned()))
    };
    let content_encoding = owned("content-encoding");
    let (encoding, stored) = object::for_storage(
        origin.body,
        content_encoding.as_deref(),
        store.compress,
        store.gzip_level,
    )?;
    // The edge compressed it: gzip stored, and the origin's own coding was identity.
    let compressed = encoding == Encoding::Gzip
        && Encoding::from_content_encoding(content_encoding.as_deref()) == Encoding::Identity;
    // Stamped with when the fill's request was sent (RFC 9111 §4.2.3 request_time): a
    // ban or purge added while it was out applies to what it brings back.
    let sent = sent_at(now, origin.elapsed);
    // An upstream Cachet shield says when its copy left the origin: a ban from before
    // that time covers this copy too (issue 27 item 7). Only ever earlier than the fill
    // (fail closed: an earlier time can only bring more bans to bear).
    let content_at_ms = owned(object::CONTENT_AT_FIELD)
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&ms| ms < sent.as_millis());
    let mut headers = crate::fields::stored_fields(fields, &store.no_cache_fields);
    // A stored response keeps the origin's `Date` (hits send it, RFC 9111 §4); one that
    // came without gets the time it was received (RFC 9110 §6.6.1: a recipient with a
    // clock records it on what it caches).
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("date")) {
        headers.push(("date".to_owned(), crate::date::format(now).into_bytes()));
    }
    let times = EntryTimes::new(sent, store.ttl)
        .with_grace(store.grace)
        .with_keep(store.keep)
        .with_delta(origin.elapsed);
    let meta = Meta {
        v: object::META_VERSION,
        pass: false,
        status: origin.status,
        headers,
        vary: store.vary.clone(),
        encoding,
        stored_len: stored.len() as u64,
        origin_len: origin.body.len() as u64,
        route: plan.route.to_owned(),
        host: plan.host.to_string(),
        url: plan.target.to_string(),
        surrogate_keys: store.surrogate_keys.clone(),
        times,
        validators: Validators {
            etag: owned("etag"),
            last_modified: owned("last-modified"),
        },
        tag: object::object_tag(&plan.cache_key),
        initial_age_s: store.initial_age.as_secs(),
        compressed,
        stale_if_error_s: store.stale_if_error.as_secs(),
        vary_fields: store.vary_fields.clone(),
        variants: Vec::new(),
        content_at_ms,
        origin_failed_at_ms: None,
        slice: store.slice,
    };
    Ok((meta, stored))
}

/// When an origin request answered at `now` after `elapsed` was sent: the time stored
/// objects are stamped with (RFC 9111 §4.2.3: ages count from `request_time`, so a
/// stored object is never younger than the origin's answer; issue 13: a ban added while
/// the request was out applies to its answer).
pub fn sent_at(now: Timestamp, elapsed: Duration) -> Timestamp {
    let ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    Timestamp::from_millis(now.as_millis().saturating_sub(ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachet_policy::{Policy, RequestView, Storability};

    #[test]
    #[allow(
        clippy::too_many_lines,
        reason = "one origin answer, every property of the object stored from it"
    )]
    fn builds_the_stored_object_once_for_both_adapters() {
        let policy = Policy::from_toml("[[routes]]\nname = \"all\"\nkeep = \"1h\"\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let req = RequestView {
            method: "GET",
            scheme: "http",
            host: Some("A.example"),
            path_and_query: "/p?utm_source=x",
            ..RequestView::default()
        };
        let plan = policy.plan(&req, std::time::UNIX_EPOCH);
        let fields: Vec<(String, Vec<u8>)> = [
            ("Content-Type", &b"text/html"[..]),
            ("ETag", b"\"v1\""),
            ("Cache-Control", b"max-age=60, no-cache=\"x-secret\""),
            ("X-Secret", b"s"),
            ("Connection", b"x-hop"),
            ("X-Hop", b"1"),
            ("Age", b"10"),
        ]
        .iter()
        .map(|(n, v)| ((*n).to_owned(), v.to_vec()))
        .collect();
        let fields_view = crate::ResponseFields::read(200, fields.as_slice());
        let Storability::Store(store) = policy.storability(&plan, &fields_view.view()) else {
            panic!("storable")
        };
        let body = b"<p>hello hello hello hello hello</p>".repeat(10);
        let origin = Origin {
            status: 200,
            fields: &fields,
            body: &body,
            elapsed: Duration::from_millis(40),
        };
        let now = Timestamp::from_millis(1_000_000);
        let (meta, stored) = object(&plan, &store, origin, now).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (meta.encoding.clone(), meta.compressed),
            (Encoding::Gzip, true)
        );
        assert_eq!(meta.stored_len, stored.len() as u64);
        assert_eq!(meta.origin_len, body.len() as u64);
        assert_eq!(meta.validators.etag.as_deref(), Some("\"v1\""));
        assert_eq!(
            (meta.initial_age_s, meta.times.ttl),
            (10, Duration::from_secs(50))
        );
        assert_eq!((meta.host.as_str(), meta.url.as_str()), ("a.example", "/p"));
        let names: Vec<&str> = meta.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["Content-Type", "ETag", "Cache-Control", "date"]);
        assert_eq!(
            meta.headers.last().map(|(_, v)| v.as_slice()),
            Some(crate::date::format(now).as_bytes()),
            "no Date from the origin: the time it was received (RFC 9110 §6.6.1)"
        );
        let with_date: Vec<(String, Vec<u8>)> = fields
            .iter()
            .cloned()
            .chain([("Date".to_owned(), b"Tue, 01 Jan 2030 00:00:00 GMT".to_vec())])
            .collect();
        let kept = object(
            &plan,
            &store,
            Origin {
                fields: &with_date,
                ..origin
            },
            now,
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .0;
        let dates: Vec<&[u8]> = kept
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("date"))
            .map(|(_, v)| v.as_slice())
            .collect();
        assert_eq!(
            dates,
            [&b"Tue, 01 Jan 2030 00:00:00 GMT"[..]],
            "the origin's Date kept"
        );
        assert_eq!(meta.content_at_ms, None, "no shield said otherwise");
        assert_eq!(meta.ban_at(), Timestamp::from_millis(1_000_000 - 40));
        // Issue 27 item 7: a shield's content time, when earlier, is the ban time; a
        // later or unreadable one is ignored (only ever earlier: fail closed).
        for (value, want) in [
            (&b"900000"[..], Some(900_000)),
            (b"2000000", None),
            (b"soon", None),
        ] {
            let mut f = fields.clone();
            f.push(("X-Cachet-Content-At".into(), value.to_vec()));
            let o = Origin {
                fields: &f,
                ..origin
            };
            let (m, _) = object(&plan, &store, o, now).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(m.content_at_ms, want, "{value:?}");
            assert!(
                m.headers.iter().all(|(n, _)| !n.starts_with("X-Cachet")),
                "reserved fields are never stored"
            );
            if let Some(ms) = want {
                assert_eq!(m.ban_at(), Timestamp::from_millis(ms));
            }
        }
        assert!(
            meta.surrogate_keys
                .iter()
                .any(|k| k.starts_with("cachet-url-"))
        );
    }
}
