//! The binary ban index answers exactly what the JSON ban log answers, and never panics on bad bytes.

use std::time::Duration;

use cachet_ban::{BanList, Request};
use cachet_policy::banindex::{BanIndex, HEADER_LEN, IndexError, MAGIC, encode};
use cachet_policy::banlog::{BanLog, Kind, NewEntry, purge_expr};
use cachet_policy::object::Meta;
use cachet_refresh::Timestamp;
use proptest::prelude::*;

/// Expressions of every shape the index treats differently: exact, prefix (complete and
/// regex-with-prefix), token (surrogate keys), status-anchored, unanchored regexes,
/// `!=`, durations, request headers.
const SHAPES: &[&str] = &[
    "req.url == /p/{n}",
    "req.url ~ ^/p/{n}",
    "obj.http.x-url ~ ^/blog/{n}/",
    "obj.http.x-url == /blog/{n}/x",
    r#"obj.http.surrogate-key ~ "(^|\s)k{n}(\s|$)""#,
    "obj.status == 200 && req.url ~ ^/p/{n}",
    "obj.status == 404",
    r"req.url ~ /{n}$",
    "obj.ttl > {n}s",
    "obj.age < {n}s && obj.http.x-url ~ ^/p",
    "req.http.x-dev == pc && req.url ~ ^/blog/{n}",
    "obj.http.x-url ~ ^/p/({n}|1)",
    "obj.http.x-url != /p/{n}",
    "obj.http.x-url ~ p/{n}",
    "obj.http.content-type ~ ^text/",
    "obj.http.x-url ~ ^/blog/ && obj.http.surrogate-key ~ k{n}",
    "obj.http.x-url ~ ^/",
    r"req.url ~ ^/p/\d+$",
];

#[derive(Debug, Clone)]
enum Op {
    Ban(usize, u8),
    Purge(u8),
    Soft(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..SHAPES.len(), 0u8..6).prop_map(|(s, n)| Op::Ban(s, n)),
        2 => (0u8..6).prop_map(Op::Purge),
        1 => (0u8..6).prop_map(Op::Soft),
    ]
}

fn build_log(ops: &[(Op, u64)], trim: Option<u64>) -> BanLog {
    let mut log = BanLog::default();
    let mut now = 1_000u64;
    for (op, dt) in ops {
        now += dt;
        let new = match op {
            Op::Ban(s, n) => {
                let text = SHAPES[*s].replace("{n}", &n.to_string());
                let _ = log.add_ban(&text, now, 1_000_000);
                continue;
            }
            Op::Purge(n) => NewEntry {
                kind: Kind::Purge,
                expr: purge_expr(&format!("k{n}")).unwrap_or_default(),
                key: Some(format!("k{n}")),
                lurker_friendly: true,
                at_ms: None,
            },
            Op::Soft(n) => NewEntry {
                kind: Kind::SoftPurge,
                expr: String::new(),
                key: Some(format!("k{n}")),
                lurker_friendly: true,
                at_ms: None,
            },
        };
        let _ = log.append(&[new], 1_000_000, now, None);
    }
    if let Some(t) = trim {
        log.trim_not_after(1_000 + t);
    }
    log
}

fn object(url: &str, stored_ms: u64, keys: &[String], status: u16, ttl_s: u64) -> Meta {
    let mut m = Meta::marker(
        "r",
        Timestamp::from_millis(stored_ms),
        Duration::from_secs(ttl_s),
    );
    m.pass = false;
    m.status = status;
    m.url = url.into();
    m.surrogate_keys = keys.to_vec();
    m.tag = "cachet-obj-0123".into();
    m.headers = vec![("content-type".into(), "text/html".into())];
    m
}

/// Checks `obj` against both and compares; a ban id from the index must be a ban that
/// matches on its own.
fn agree(log: &BanLog, bytes: &[u8], obj: &Meta, req: &Request) -> Result<(), TestCaseError> {
    let index = BanIndex::from_bytes(bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let want = log.check(obj, req);
    let got = index
        .check(bytes, obj, req)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(
        want.is_some(),
        got.is_some(),
        "log {:?} index {:?}",
        want,
        got
    );
    match got {
        Some(0) => prop_assert_eq!(want, Some(0)),
        Some(id) => {
            let e = log.entries.iter().find(|e| e.id == id);
            prop_assert!(e.is_some(), "unknown id {}", id);
            let e = e.unwrap();
            prop_assert!(e.kind != Kind::SoftPurge);
            prop_assert!(e.at_ms > obj.times.stored_at.as_millis());
            let mut one = BanList::new();
            #[allow(clippy::cast_precision_loss, reason = "test times are small")]
            let _ = one.add(&e.expr, e.at_ms as f64 / 1000.0);
            prop_assert!(
                one.check(&obj.ban_view(), req, cachet_ban::BanId::ZERO)
                    .is_banned(),
                "ban {} ({}) does not match on its own",
                id,
                e.expr
            );
        }
        None => {}
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn index_answers_what_the_log_answers(
        ops in proptest::collection::vec((op(), 0u64..50), 0..60),
        trim in proptest::option::of(0u64..400),
        objects in proptest::collection::vec(
            (0u8..8, 0u64..1_800, proptest::collection::vec(0u8..8, 0..3), prop_oneof![Just(200u16), Just(404)], 1u64..10, any::<bool>()),
            1..12,
        ),
    ) {
        let log = build_log(&ops, trim);
        let bytes = encode(&log);
        for (u, stored, keys, status, ttl, dev) in objects {
            let url = match u {
                0..=3 => format!("/p/{u}"),
                4 | 5 => format!("/blog/{}/x", u - 4),
                6 => "/blog/3/y".to_owned(),
                _ => "/".to_owned(),
            };
            let keys: Vec<String> = keys.iter().map(|k| format!("k{k}")).collect();
            let obj = object(&url, 1_000 + stored, &keys, status, ttl);
            let mut req = Request::new(url.clone());
            if dev {
                req = req.with_header("x-dev", "pc");
            }
            agree(&log, &bytes, &obj, &req)?;
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = BanIndex::from_bytes(&bytes);
        if let Ok(ix) = BanIndex::from_head(&bytes) {
            let obj = object("/p/1", 0, &["k1".to_owned()], 200, 5);
            let _ = ix.check(&bytes[..], &obj, &Request::new("/p/1"));
        }
    }

    #[test]
    fn damaged_indexes_never_panic(
        ops in proptest::collection::vec((op(), 0u64..50), 1..30),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let log = build_log(&ops, None);
        let mut bytes = encode(&log);
        for (at, v) in flips {
            let i = at.index(bytes.len());
            bytes[i] = v;
        }
        let obj = object("/p/1", 0, &["k1".to_owned()], 200, 5);
        let req = Request::new("/p/1");
        let _ = BanIndex::from_bytes(&bytes);
        // The head is opened without checksums: a damaged cold part must still not panic.
        if let Ok(ix) = BanIndex::from_head(&bytes) {
            let _ = ix.check(&bytes[..], &obj, &req);
            let short = &bytes[..cut.index(bytes.len())];
            let _ = ix.check(short, &obj, &req);
        }
    }
}

#[test]
fn errors_are_clear() {
    assert!(matches!(
        BanIndex::from_bytes(b"CBIX"),
        Err(IndexError::Truncated { have: 4, need }) if need == HEADER_LEN
    ));
    assert_eq!(
        BanIndex::from_bytes(&[0u8; HEADER_LEN]).unwrap_err(),
        IndexError::Magic
    );
    let mut log = BanLog::default();
    log.add_ban("req.url == /a", 5_000, 10).unwrap();
    let mut bytes = encode(&log);
    assert_eq!(bytes[..4], MAGIC);
    let ix = BanIndex::from_bytes(&bytes).unwrap();
    assert_eq!((ix.header().keys, ix.header().scanned), (1, 0));
    assert_eq!(ix.header().next_id, log.next_id);
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    assert_eq!(
        BanIndex::from_bytes(&bytes).unwrap_err(),
        IndexError::Checksum("cold part")
    );
    bytes[4] = 9;
    assert_eq!(
        BanIndex::from_bytes(&bytes).unwrap_err(),
        IndexError::Version(9)
    );
    assert!(
        IndexError::Version(9).to_string().contains("version 9"),
        "the message names the version"
    );
}

#[test]
fn empty_log_and_floor() {
    let mut log = BanLog::default();
    let bytes = encode(&log);
    let ix = BanIndex::from_bytes(&bytes).unwrap();
    let obj = object("/p/1", 10, &[], 200, 5);
    assert_eq!(ix.check(&bytes[..], &obj, &Request::new("/p/1")), Ok(None));
    log.add_ban("req.url == /p/1", 20, 10).unwrap();
    // Stamped the next millisecond (`banlog::stamp_ms`): retiring at 21 retires it.
    assert_eq!(log.trim_not_after(21), 1);
    let bytes = encode(&log);
    let ix = BanIndex::from_bytes(&bytes).unwrap();
    assert_eq!(
        ix.check(&bytes[..], &obj, &Request::new("/p/1")),
        Ok(Some(0))
    );
}

#[test]
fn many_bans_newer_than_the_object_read_only_what_they_need() {
    use std::cell::Cell;
    struct Counting<'a>(&'a [u8], Cell<usize>);
    impl cachet_policy::banindex::ColdBytes for Counting<'_> {
        fn read(&self, at: usize, len: usize) -> Result<std::borrow::Cow<'_, [u8]>, IndexError> {
            self.1.set(self.1.get() + len);
            self.0.read(at, len)
        }
    }
    let mut log = BanLog::default();
    for i in 0..5_000u64 {
        let expr = match i % 3 {
            0 => format!("req.url == /gone/{i}"),
            1 => format!("obj.http.x-url ~ ^/old/{i}/"),
            _ => purge_expr(&format!("key-{i}")).unwrap(),
        };
        log.add_ban(&expr, 10_000 + i, 100_000).unwrap();
    }
    let bytes = encode(&log);
    let ix = BanIndex::from_bytes(&bytes).unwrap();
    let head = ix.header().head_len;
    let cold = Counting(&bytes, Cell::new(0));
    let obj = object("/blog/1/x", 5_000, &["blog-1".to_owned()], 200, 60);
    assert_eq!(ix.check(&cold, &obj, &Request::new("/blog/1/x")), Ok(None));
    assert!(cold.1.get() < 1_000, "read {} cold bytes", cold.1.get());
    assert!(head < bytes.len() / 4, "head {head} of {}", bytes.len());
    let gone = object("/gone/3", 5_000, &[], 200, 60);
    assert_eq!(
        ix.check(&cold, &gone, &Request::new("/gone/3")),
        Ok(Some(4))
    );
    let keyed = object("/k", 5_000, &["key-2".to_owned()], 200, 60);
    assert_eq!(ix.check(&cold, &keyed, &Request::new("/k")), Ok(Some(3)));
    let prefixed = object("/old/1/page", 5_000, &[], 200, 60);
    assert_eq!(
        ix.check(&cold, &prefixed, &Request::new("/old/1/page")),
        Ok(Some(2))
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn encoding_from_an_earlier_index_gives_the_same_bytes(
        ops in proptest::collection::vec((op(), 0u64..50), 0..40),
        more in proptest::collection::vec((op(), 0u64..50), 0..10),
        trim in proptest::option::of(0u64..400),
    ) {
        let before = build_log(&ops, None);
        let mut all = ops.clone();
        all.extend(more);
        let after = build_log(&all, trim);
        let previous = encode(&before);
        prop_assert_eq!(
            cachet_policy::banindex::encode_with(&after, Some(&previous)),
            encode(&after)
        );
        // An index of another log (same ids, other bans) is not trusted.
        let other = build_log(&all.iter().rev().cloned().collect::<Vec<_>>(), None);
        prop_assert_eq!(
            cachet_policy::banindex::encode_with(&after, Some(&encode(&other))),
            encode(&after)
        );
    }
}
