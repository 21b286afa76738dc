//! Behaviour of answers built from stored objects: 304, 206, 416, HEAD, Age, Date, ETag.

use std::time::Duration;

use cachet_http::{Answer, CacheStatus, Client, deliver};
use cachet_policy::object::{Encoding, Meta};
use cachet_refresh::{EntryTimes, Timestamp};

const STORED: Timestamp = Timestamp::from_millis(1_700_000_000_000); // 2023-11-14T22:13:20Z
const NOW: Timestamp = Timestamp::from_millis(1_700_000_030_000);

fn meta(encoding: Encoding, compressed: bool) -> Meta {
    let mut m = Meta::marker("article", STORED, Duration::from_secs(60));
    m.pass = false;
    m.status = 200;
    m.encoding = encoding;
    m.compressed = compressed;
    m.vary = "Accept-Encoding".into();
    m.times = EntryTimes::new(STORED, Duration::from_secs(60));
    m.headers = vec![
        ("Content-Type".into(), "text/html".into()),
        ("ETag".into(), "\"v1\"".into()),
        (
            "Last-Modified".into(),
            "Tue, 14 Nov 2023 20:00:00 GMT".into(),
        ),
        ("Cache-Control".into(), "max-age=60".into()),
        ("X-Owner".into(), "alice".into()),
    ];
    m
}

fn client(method: &str, h: &[(&str, &str)]) -> Client {
    Client::read(method, h)
}

#[test]
fn if_none_match_from_cache_is_a_304_with_the_required_fields_only() {
    let m = meta(Encoding::Identity, false);
    for inm in ["\"v1\"", "W/\"v1\"", "\"x\", \"v1\"", "*"] {
        let c = client("GET", &[("If-None-Match", inm)]);
        let d = deliver(&m, &c, NOW, CacheStatus::Hit);
        assert!(d.is_not_modified() && !d.inflate(), "{inm}");
        let h = d.head(1000);
        assert_eq!((h.status, h.body), (304, Answer::Empty), "{inm}");
        assert_eq!(h.header("etag"), Some("\"v1\""));
        assert_eq!(h.header("cache-control"), Some("max-age=60"));
        assert_eq!(h.header("vary"), Some("Accept-Encoding"));
        assert_eq!(h.header("age"), Some("30"));
        assert_eq!(h.header("date"), Some("Tue, 14 Nov 2023 22:13:50 GMT"));
        assert_eq!(h.header("x-cache"), Some("HIT"));
        for absent in ["content-type", "content-length", "x-owner", "last-modified"] {
            assert_eq!(h.header(absent), None, "{absent}");
        }
    }
    let h = deliver(
        &m,
        &client("GET", &[("If-None-Match", "\"v2\"")]),
        NOW,
        CacheStatus::Hit,
    )
    .head(1000);
    assert_eq!((h.status, h.header("content-length")), (200, Some("1000")));
}

#[test]
fn if_modified_since_without_last_modified_compares_with_the_stored_date() {
    // Issue 30, RFC 9110 §13.1.3: a stored response without Last-Modified is validated
    // by its Date.
    let mut m = meta(Encoding::Identity, false);
    m.headers.retain(|(n, _)| {
        !n.eq_ignore_ascii_case("last-modified") && !n.eq_ignore_ascii_case("etag")
    });
    m.headers
        .push(("date".into(), "Tue, 14 Nov 2023 20:00:00 GMT".into()));
    let at = |m: &Meta, v: &str| {
        deliver(
            m,
            &client("GET", &[("If-Modified-Since", v)]),
            NOW,
            CacheStatus::Hit,
        )
        .head(1)
        .status
    };
    assert_eq!(at(&m, "Tue, 14 Nov 2023 20:00:00 GMT"), 304);
    assert_eq!(at(&m, "Tue, 14 Nov 2023 21:00:00 GMT"), 304);
    assert_eq!(at(&m, "Tue, 14 Nov 2023 19:59:59 GMT"), 200);
    m.headers.retain(|(n, _)| n != "date");
    assert_eq!(
        at(&m, "Tue, 14 Nov 2023 21:00:00 GMT"),
        200,
        "no date: sent whole"
    );
}

#[test]
fn if_modified_since_counts_only_without_if_none_match_and_head_is_answered_too() {
    let m = meta(Encoding::Identity, false);
    let ims = ("If-Modified-Since", "Tue, 14 Nov 2023 21:00:00 GMT");
    let h = deliver(&m, &client("HEAD", &[ims]), NOW, CacheStatus::Hit).head(1000);
    assert_eq!(h.status, 304);
    let h = deliver(
        &m,
        &client("GET", &[ims, ("If-None-Match", "\"v0\"")]),
        NOW,
        CacheStatus::Hit,
    )
    .head(1000);
    assert_eq!(h.status, 200);
    let old = ("If-Modified-Since", "Tue, 14 Nov 2023 19:00:00 GMT");
    assert_eq!(
        deliver(&m, &client("GET", &[old]), NOW, CacheStatus::Hit)
            .head(1)
            .status,
        200
    );
    // HEAD: the GET's headers, no body.
    let h = deliver(&m, &client("HEAD", &[]), NOW, CacheStatus::Hit).head(1000);
    assert_eq!(
        (h.status, h.body, h.header("content-length")),
        (200, Answer::Empty, Some("1000"))
    );
}

#[test]
fn conditionals_apply_to_stored_2xx_only() {
    let mut m = meta(Encoding::Identity, false);
    m.status = 404;
    let h = deliver(
        &m,
        &client("GET", &[("If-None-Match", "*")]),
        NOW,
        CacheStatus::Hit,
    )
    .head(9);
    assert_eq!(h.status, 404);
    let h = deliver(
        &m,
        &client("GET", &[("Range", "bytes=0-1")]),
        NOW,
        CacheStatus::Hit,
    )
    .head(9);
    assert_eq!((h.status, h.body), (404, Answer::Whole));
}

#[test]
fn ranges_from_cache() {
    let m = meta(Encoding::Identity, false);
    let get = |h: &[(&str, &str)]| deliver(&m, &client("GET", h), NOW, CacheStatus::Hit).head(1000);
    let h = get(&[("Range", "bytes=0-99")]);
    assert_eq!((h.status, h.body), (206, Answer::Slice(0, 100)));
    assert_eq!(h.header("content-range"), Some("bytes 0-99/1000"));
    assert_eq!(h.header("content-length"), Some("100"));
    assert_eq!(h.header("accept-ranges"), Some("bytes"));
    let h = get(&[("Range", "bytes=-10")]);
    assert_eq!((h.status, h.body), (206, Answer::Slice(990, 1000)));
    let h = get(&[("Range", "bytes=900-")]);
    assert_eq!(h.header("content-range"), Some("bytes 900-999/1000"));
    let h = get(&[("Range", "bytes=5000-")]);
    assert_eq!((h.status, h.body), (416, Answer::Empty));
    assert_eq!(h.header("content-range"), Some("bytes */1000"));
    assert_eq!(h.header("content-length"), Some("0"));
    // If-Range: strong match → range; anything else → whole.
    let h = get(&[("Range", "bytes=0-9"), ("If-Range", "\"v1\"")]);
    assert_eq!(h.status, 206);
    let h = get(&[("Range", "bytes=0-9"), ("If-Range", "\"v0\"")]);
    assert_eq!((h.status, h.body), (200, Answer::Whole));
    let h = get(&[
        ("Range", "bytes=0-9"),
        ("If-Range", "Tue, 14 Nov 2023 20:00:00 GMT"),
    ]);
    assert_eq!(h.status, 206);
    // Several ranges: the whole representation (documented choice).
    assert_eq!(get(&[("Range", "bytes=0-1,3-4")]).status, 200);
    // A conditional that matches wins over the range.
    assert_eq!(
        get(&[("Range", "bytes=0-1"), ("If-None-Match", "\"v1\"")]).status,
        304
    );
    // HEAD ignores Range.
    let h = deliver(
        &m,
        &client("HEAD", &[("Range", "bytes=0-1")]),
        NOW,
        CacheStatus::Hit,
    )
    .head(1000);
    assert_eq!(h.status, 200);
}

#[test]
fn ranges_apply_to_the_representation_sent_and_edge_gzip_weakens_the_etag() {
    let m = meta(Encoding::Gzip, true);
    // gzip client: stored bytes as-is, weak ETag, range over the gzip bytes.
    let gz = client(
        "GET",
        &[("Accept-Encoding", "gzip, br"), ("Range", "bytes=0-9")],
    );
    let d = deliver(&m, &gz, NOW, CacheStatus::Hit);
    assert!(!d.inflate());
    let h = d.head(300);
    assert_eq!(
        (h.status, h.header("content-encoding")),
        (206, Some("gzip"))
    );
    assert_eq!(h.header("content-range"), Some("bytes 0-9/300"));
    assert_eq!(h.header("etag"), Some("W/\"v1\""));
    // A strong If-Range can't match the weak gzip ETag: the whole gzip body.
    let gz = client(
        "GET",
        &[
            ("Accept-Encoding", "gzip"),
            ("Range", "bytes=0-9"),
            ("If-Range", "\"v1\""),
        ],
    );
    assert_eq!(
        deliver(&m, &gz, NOW, CacheStatus::Hit).head(300).status,
        200
    );
    // identity client: inflated, the origin's strong ETag, range over the inflated bytes.
    let id = client("GET", &[("Range", "bytes=0-9"), ("If-Range", "\"v1\"")]);
    let d = deliver(&m, &id, NOW, CacheStatus::Stale);
    assert!(d.inflate());
    let h = d.head(1000);
    assert_eq!(h.header("content-encoding"), None);
    assert_eq!(h.header("etag"), Some("\"v1\""));
    assert_eq!(h.header("content-range"), Some("bytes 0-9/1000"));
    assert_eq!(h.header("x-cache"), Some("STALE"));
    // Origin-gzipped bodies keep their strong ETag.
    let m = meta(Encoding::Gzip, false);
    let h = deliver(
        &m,
        &client("GET", &[("Accept-Encoding", "gzip")]),
        NOW,
        CacheStatus::Hit,
    )
    .head(300);
    assert_eq!(h.header("etag"), Some("\"v1\""));
}

#[test]
fn age_adds_the_upstream_age_and_surrogate_keys_stay_for_a_tier() {
    let mut m = meta(Encoding::Identity, false);
    m.initial_age_s = 100;
    m.surrogate_keys = vec!["blog-alice".into()];
    let h = deliver(&m, &client("GET", &[]), NOW, CacheStatus::Hit).head(1);
    assert_eq!(h.header("age"), Some("130"));
    assert_eq!(h.header("surrogate-key"), None);
    let mut c = client("GET", &[]);
    c.keep_surrogate = true;
    let h = deliver(&m, &c, NOW, CacheStatus::Hit).head(1);
    assert_eq!(h.header("surrogate-key"), Some("blog-alice"));
}

#[test]
fn non_utf8_request_bytes_are_ignored_not_fatal() {
    let m = meta(Encoding::Gzip, true);
    let h: Vec<(String, Vec<u8>)> = vec![
        ("accept-encoding".into(), b"gzip\xff".to_vec()),
        ("if-none-match".into(), b"\"v1\xe9\"".to_vec()),
        ("range".into(), b"bytes=0-\xff".to_vec()),
    ];
    let c = Client::read("GET", h.as_slice());
    let d = deliver(&m, &c, NOW, CacheStatus::Hit);
    assert!(
        d.inflate(),
        "an unreadable Accept-Encoding accepts identity only"
    );
    let head = d.head(50);
    assert_eq!((head.status, head.body), (200, Answer::Whole));
}

#[test]
fn only_if_cached_is_read_from_the_request() {
    assert!(client("GET", &[("Cache-Control", "max-stale, ONLY-IF-CACHED")]).only_if_cached);
    assert!(!client("GET", &[("Cache-Control", "no-cache")]).only_if_cached);
    assert!(!client("GET", &[]).only_if_cached);
}

#[test]
fn answer_select_picks_the_bytes_that_go_out() {
    let body = b"0123456789";
    assert_eq!(Answer::Empty.select(body), None);
    assert_eq!(Answer::Whole.select(body), Some(&body[..]));
    assert_eq!(Answer::Slice(2, 5).select(body), Some(&b"234"[..]));
    // Outside the body (never produced for its length): empty, not a panic.
    assert_eq!(Answer::Slice(8, 20).select(body), Some(&b""[..]));
    assert_eq!(Answer::Slice(5, 2).select(body), Some(&b""[..]));
}

#[test]
fn a_stored_upstream_x_cache_is_replaced_by_ours() {
    let mut m = meta(Encoding::Identity, false);
    m.headers.push(("X-Cache".into(), "MISS".into()));
    let h = deliver(&m, &client("GET", &[]), NOW, CacheStatus::Hit).head(1000);
    let x: Vec<_> = h
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("x-cache"))
        .map(|(_, v)| v.as_ref())
        .collect();
    assert_eq!(x, [b"HIT"]);
}

/// Issue 27 item 11: stored values are sent as the origin's bytes, Latin-1 included, on a
/// whole answer and on a `304`; an `ETag` with obs-text (RFC 9110 §8.8.3) still validates
/// and is made weak as bytes.
#[test]
fn stored_latin1_values_go_out_as_their_bytes() {
    let mut m = meta(Encoding::Gzip, true);
    m.headers = vec![
        ("Content-Type".into(), "text/plain".into()),
        (
            "Cache-Control".into(),
            b"max-age=60, ext=\"caf\xe9\"".to_vec(),
        ),
        ("X-Field".into(), b"caf\xe9".to_vec()),
        ("ETag".into(), b"\"v\xe9\"".to_vec()),
    ];
    let gzip = [("Accept-Encoding", &b"gzip"[..])];
    let pairs = |extra: &[(&str, &[u8])]| -> Vec<(String, Vec<u8>)> {
        (gzip.iter().chain(extra))
            .map(|(n, v)| ((*n).to_owned(), v.to_vec()))
            .collect()
    };
    let c = Client::read("GET", pairs(&[]).as_slice());
    let h = deliver(&m, &c, NOW, CacheStatus::Hit).head(50);
    assert_eq!(h.status, 200);
    assert_eq!(h.header_bytes("x-field"), Some(&b"caf\xe9"[..]));
    assert_eq!(h.header("x-field"), None, "not text");
    assert_eq!(
        h.header_bytes("cache-control"),
        Some(&b"max-age=60, ext=\"caf\xe9\""[..])
    );
    assert_eq!(h.header_bytes("etag"), Some(&b"W/\"v\xe9\""[..]));
    // The client revalidates with the weak tag it was given: a 304 with the stored
    // bytes of the fields a 304 carries.
    let c = Client::read(
        "GET",
        pairs(&[("If-None-Match", b"W/\"v\xe9\"")]).as_slice(),
    );
    let h = deliver(&m, &c, NOW, CacheStatus::Hit).head(50);
    assert_eq!(h.status, 304);
    assert_eq!(
        h.header_bytes("cache-control"),
        Some(&b"max-age=60, ext=\"caf\xe9\""[..])
    );
    assert_eq!(h.header_bytes("etag"), Some(&b"W/\"v\xe9\""[..]));
    assert_eq!(h.header_bytes("x-field"), None, "not a 304 field");
}

#[test]
fn a_stored_slice_answers_ranges_inside_it_against_the_whole_length() {
    // Partial content storage (issue 30): bytes 16..=31 of a 100-byte representation.
    let mut m = meta(Encoding::Identity, false);
    m.status = 206;
    m.slice = Some(cachet_policy::object::SlicePart {
        first: 16,
        total: 100,
    });
    let get = |h: &[(&str, &str)]| deliver(&m, &client("GET", h), NOW, CacheStatus::Hit).head(16);
    let h = get(&[("Range", "bytes=18-20")]);
    assert_eq!((h.status, h.body), (206, Answer::Slice(2, 5)));
    assert_eq!(h.header("content-range"), Some("bytes 18-20/100"));
    assert_eq!(h.header("content-length"), Some("3"));
    assert_eq!(h.header("accept-ranges"), Some("bytes"));
    let h = get(&[("Range", "bytes=16-31")]);
    assert_eq!((h.status, h.body), (206, Answer::Slice(0, 16)));
    // A range the slice does not hold (never planned onto it): 416, never other bytes;
    // nor can a slice answer for the whole representation.
    let h = get(&[("Range", "bytes=40-41")]);
    assert_eq!((h.status, h.body), (416, Answer::Empty));
    assert_eq!(h.header("content-range"), Some("bytes */100"));
    assert_eq!(get(&[]).status, 416);
    // A shield answering its edge tier keeps the slice's surrogate keys, as for any object.
    m.surrogate_keys = vec!["video-1".into()];
    let mut tier = client("GET", &[("Range", "bytes=18-20")]);
    tier.keep_surrogate = true;
    let h = deliver(&m, &tier, NOW, CacheStatus::Hit).head(16);
    assert_eq!(
        (h.status, h.header("surrogate-key")),
        (206, Some("video-1"))
    );
    // The last slice of a representation shorter than the slice size: clamped.
    m.slice = Some(cachet_policy::object::SlicePart {
        first: 16,
        total: 20,
    });
    let h = deliver(
        &m,
        &client("GET", &[("Range", "bytes=17-31")]),
        NOW,
        CacheStatus::Hit,
    )
    .head(4);
    assert_eq!((h.status, h.body), (206, Answer::Slice(1, 4)));
    assert_eq!(h.header("content-range"), Some("bytes 17-19/20"));
    // A conditional that matches still wins.
    let h = deliver(
        &m,
        &client(
            "GET",
            &[("Range", "bytes=17-18"), ("If-None-Match", "\"v1\"")],
        ),
        NOW,
        CacheStatus::Hit,
    )
    .head(4);
    assert_eq!(h.status, 304);
}
