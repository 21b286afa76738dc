//! `CacheControl::parse` on arbitrary text (origin `Cache-Control`, `Surrogate-Control`,
//! `CDN-Cache-Control`). Checks: parsing is insensitive to directive-name case and to
//! surrounding whitespace, `no-cache` field names come out lower-case, and
//! `forbids_stale` is exactly the documented disjunction.
#![no_main]

use cachet_fuzz::text;
use cachet_policy::CacheControl;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let v = text(data);
    let cc = CacheControl::parse(&v);
    assert_eq!(
        cc.forbids_stale(),
        cc.must_revalidate || cc.proxy_revalidate || cc.s_maxage.is_some() || cc.no_cache
    );
    assert!(
        cc.no_cache_fields
            .iter()
            .all(|f| !f.is_empty() && *f == f.to_ascii_lowercase())
    );
    // Directive names are case-insensitive and arguments are only digits or field
    // names here, so upper-casing ASCII changes nothing but the no-cache field case,
    // which is lower-cased anyway... unless an argument is a quoted string holding
    // something else; compare only the flags and numbers.
    let upper = CacheControl::parse(&v.to_ascii_uppercase());
    assert_eq!(
        (
            upper.private,
            upper.no_store,
            upper.no_cache,
            upper.must_revalidate,
            upper.proxy_revalidate
        ),
        (
            cc.private,
            cc.no_store,
            cc.no_cache,
            cc.must_revalidate,
            cc.proxy_revalidate
        ),
        "{v:?}"
    );
    assert_eq!(
        (
            upper.max_age,
            upper.s_maxage,
            upper.stale_while_revalidate,
            upper.stale_if_error
        ),
        (
            cc.max_age,
            cc.s_maxage,
            cc.stale_while_revalidate,
            cc.stale_if_error
        ),
        "{v:?}"
    );
    let padded = CacheControl::parse(&format!("  {v}  "));
    assert_eq!(padded, cc, "{v:?}");
});
