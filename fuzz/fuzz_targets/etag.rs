//! Entity tags and conditional requests (`cachet_http::conditional`): `tag_list` on an
//! arbitrary `If-None-Match`, `EntityTag::parse`, `evaluate` and `if_range_matches`.
//! Input: `if-none-match \n stored-etag \n if-range`. Checks: every listed tag is
//! well-formed and prints back to a value that parses to itself; a list holding the
//! stored tag (weak comparison) answers 304; `*` always answers 304; a strong stored
//! tag matches itself as `If-Range`, a weak one never does.
#![no_main]

use cachet_fuzz::fields;
use cachet_http::conditional::{EntityTag, Precondition, evaluate, if_range_matches, tag_list};
use cachet_refresh::Timestamp;
use libfuzzer_sys::fuzz_target;

const NOW: Timestamp = Timestamp::from_millis(1_700_100_000_000);
const LM: &[u8] = b"Tue, 14 Nov 2023 22:00:00 GMT";

fn print(t: &EntityTag<'_>) -> Vec<u8> {
    let mut v = if t.weak {
        b"W/\"".to_vec()
    } else {
        b"\"".to_vec()
    };
    v.extend_from_slice(t.opaque);
    v.push(b'"');
    v
}

fuzz_target!(|data: &[u8]| {
    let ([inm, stored], if_range) = fields::<2>(data);
    for t in tag_list(inm) {
        assert!(
            !t.opaque
                .iter()
                .any(|&b| b == b'"' || b <= 0x20 || b == 0x7f)
        );
        let printed = print(&t);
        assert_eq!(EntityTag::parse(&printed), Some(t));
    }
    let result = evaluate(Some(inm), Some(LM), Some(stored), Some(LM), NOW);
    if inm.trim_ascii() == b"*" {
        assert_eq!(result, Precondition::NotModified);
    }
    if let Some(s) = EntityTag::parse(stored) {
        let listed = tag_list(inm).any(|t| t.weak_eq(&s));
        assert_eq!(
            result == Precondition::NotModified,
            listed || inm.trim_ascii() == b"*",
            "{:?}",
            String::from_utf8_lossy(data)
        );
        // The stored tag appended to the list is always found.
        let mut with = inm.to_vec();
        with.extend_from_slice(b", ");
        with.extend_from_slice(&print(&s));
        let closed = tag_list(&with).any(|t| t.weak_eq(&s));
        if closed {
            assert_eq!(
                evaluate(Some(&with), None, Some(stored), None, NOW),
                Precondition::NotModified
            );
        }
        assert_eq!(if_range_matches(stored, Some(stored), None), !s.weak);
    } else {
        assert_eq!(
            result == Precondition::NotModified,
            inm.trim_ascii() == b"*"
        );
    }
    let _ = if_range_matches(if_range, Some(stored), Some(LM));
    let _ = evaluate(None, Some(if_range), Some(stored), Some(LM), NOW);
});
