//! `BanExpr::parse` on arbitrary text. A parsed expression's canonical form
//! (`Display`) parses back to an equal expression and prints the same; evaluating it
//! against an object and a request never panics, and an object-only expression gives
//! the same answer with and without a request.
#![no_main]

use cachet_ban::{BanExpr, Object, Request};
use cachet_fuzz::text;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let src = text(data);
    let Ok(expr) = BanExpr::parse(&src) else {
        return;
    };
    let canon = expr.to_string();
    let back = BanExpr::parse(&canon)
        .unwrap_or_else(|e| panic!("canonical form {canon:?} of {src:?} does not parse: {e}"));
    assert_eq!(back, expr, "{src:?} -> {canon:?}");
    assert_eq!(back.to_string(), canon);

    let obj = Object::new("/blog/a/entry/1?a=1", 1_000.0)
        .with_header("Content-Type", "text/html; charset=utf-8")
        .with_header("X-Url", "/blog/a/entry/1?a=1")
        .with_surrogate_keys(["article", "blog-a", "entry-1"])
        .with_lifetimes(300.0, 60.0, 10.0)
        .with_age(5.0);
    let req = Request::new("/blog/a/entry/1?a=1").with_header("Host", "blog.example");
    let with_req = expr.matches(&obj, Some(&req), 1_100.0);
    if expr.is_lurker_friendly() {
        assert_eq!(
            expr.matches(&obj, None::<&Request>, 1_100.0),
            with_req,
            "{canon:?}"
        );
    }
});
