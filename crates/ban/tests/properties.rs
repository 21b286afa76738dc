//! Property tests: the parser never panics and round-trips; indexed checks, lookups and the lurker agree with Varnish's linear scan.

use cachet_ban::{BanCache, BanExpr, BanId, BanList, Eviction, Object, Request, Verdict};
use proptest::prelude::*;

const VALUES: &[&str] = &[
    "/a", "/a/b", "/a/bc", "/b", "k1", "k2", "k10", "200", "404", "foo", "Foo", "",
];
const STR_FIELDS: &[&str] = &[
    "req.url",
    "req.http.x-r",
    "obj.status",
    "obj.http.x-a",
    "obj.http.X-Url",
    "obj.http.surrogate-key",
    "obj.http.x-missing",
];
const DUR_FIELDS: &[&str] = &["obj.ttl", "obj.age", "obj.grace", "obj.keep"];
const UNITS: &[&str] = &["ms", "s", "m", "h", "d", "w", "y"];

fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A valid condition drawn from shapes that exercise every index and the scan lists.
fn condition() -> impl Strategy<Value = String> {
    let value = prop::sample::select(VALUES);
    let string = (prop::sample::select(STR_FIELDS), 0..9usize, value).prop_map(|(f, shape, v)| {
        let esc = regex::escape(v);
        match shape {
            0 => format!("{f} == {}", quote(v)),
            1 => format!("{f} != {}", quote(v)),
            2 => format!("{f} ~ {}", quote(&format!("^{esc}"))),
            3 => format!("{f} ~ {}", quote(&format!("^{esc}$"))),
            4 => format!("{f} ~ {}", quote(&format!(r"(^|\s){esc}(\s|$)"))),
            5 => format!("{f} ~ {}", quote(&esc)),
            6 => format!("{f} !~ {}", quote(&format!("^{esc}"))),
            7 => format!("{f} ~ {}", quote(&format!("^{esc}.?b"))),
            _ => format!("{f} ~ {}", quote(&format!("(?i){esc}"))),
        }
    });
    let dur = (
        prop::sample::select(DUR_FIELDS),
        prop::sample::select(&["==", "!=", "<", "<=", ">", ">="][..]),
        -5i32..200,
        prop::sample::select(UNITS),
    )
        .prop_map(|(f, op, n, u)| format!("{f} {op} {n}{u}"));
    prop_oneof![3 => string, 1 => dur]
}

fn expr() -> impl Strategy<Value = String> {
    prop::collection::vec(condition(), 1..4).prop_map(|c| c.join(" && "))
}

fn object() -> impl Strategy<Value = (Object, Request)> {
    (
        prop::sample::select(VALUES),
        prop::option::of(prop::sample::select(VALUES)),
        prop::option::of(prop::sample::select(VALUES)),
        prop::sample::select(&[200u16, 404, 500][..]),
        prop::collection::vec(prop::sample::select(&["k1", "k2", "k10", "/a"][..]), 0..3),
        0u32..20,
        prop::sample::select(&[0.0, 30.0, 3600.0, 86_400.0][..]),
        prop::option::of(prop::sample::select(VALUES)),
    )
        .prop_map(|(url, xa, xurl, status, keys, at, life, xr)| {
            let mut o = Object::new(url, f64::from(at))
                .with_status(status)
                .with_lifetimes(life, life / 2.0, life / 3.0)
                .with_age(life / 4.0);
            if let Some(v) = xa {
                o.set_header("x-a", v);
            }
            if let Some(v) = xurl {
                o.set_header("x-url", v);
            }
            if !keys.is_empty() {
                o = o.with_surrogate_keys(keys);
            }
            let mut r = Request::new(url);
            if let Some(v) = xr {
                r.set_header("x-r", v);
            }
            (o, r)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn parser_never_panics_on_arbitrary_input(s in ".{0,200}") {
        let _ = BanExpr::parse(&s);
    }

    #[test]
    fn parser_never_panics_on_token_soup(
        toks in prop::collection::vec(
            prop::sample::select(&[
                "req.url", "obj.http.", "obj.http.x", "req.http.y", "obj.status", "obj.ttl",
                "==", "!=", "~", "!~", "<", ">=", "&&", "\"", "\\", "\"a b\"", "\\x4", "\\777",
                "1h", "-1.5m", ".s", "(", "[a-", "^/a", "(^|\\s)k(\\s|$)", "\"\\q\"", "é",
            ][..]),
            0..12,
        )
    ) {
        let text = toks.join(" ");
        if let Ok(e) = BanExpr::parse(&text) {
            let again = BanExpr::parse(&e.to_string());
            prop_assert_eq!(again.as_ref(), Ok(&e));
        }
    }

    #[test]
    fn display_round_trips(text in expr()) {
        let e = BanExpr::parse(&text).unwrap();
        let shown = e.to_string();
        let again = BanExpr::parse(&shown).unwrap();
        prop_assert_eq!(&again, &e);
        prop_assert_eq!(again.to_string(), shown);
    }

    #[test]
    fn arbitrary_string_values_round_trip(v in "\\PC{0,40}", field in prop::sample::select(STR_FIELDS)) {
        let text = format!("{field} == {}", quote(&v));
        if let Ok(e) = BanExpr::parse(&text) {
            prop_assert_eq!(BanExpr::parse(&e.to_string()).unwrap(), e);
        }
        let text = format!("{field} ~ {}", quote(&regex::escape(&v)));
        let e = BanExpr::parse(&text).unwrap();
        prop_assert_eq!(BanExpr::parse(&e.to_string()).unwrap(), e);
    }

    #[test]
    fn indexed_check_agrees_with_linear_scan(
        bans in prop::collection::vec((expr(), 0u32..3), 1..40),
        objects in prop::collection::vec(object(), 1..12),
        cursor in 0u64..20,
    ) {
        let mut list = BanList::new();
        let mut t = 0.0;
        for (text, dt) in &bans {
            t += f64::from(*dt);
            let _ = list.add(text, t).unwrap();
        }
        for (o, r) in &objects {
            for c in [BanId::ZERO, BanId(cursor)] {
                let fast = list.check(o, r, c);
                let slow = list.check_linear(o, r, c);
                prop_assert_eq!(fast.is_banned(), slow.is_banned(), "{:?} {:?}", o, r);
                if let Verdict::Banned { by } = fast {
                    let (_, at, e, _) = list.iter().find(|b| b.0 == by).unwrap();
                    prop_assert!(e.matches(o, Some(r), at));
                }
            }
        }
    }

    #[test]
    fn lookups_and_lurker_agree_with_linear_scan(
        bans in prop::collection::vec((expr(), 0u32..4), 1..30),
        objects in prop::collection::vec(object(), 1..12),
        budget in 1usize..5,
        lurk_at in 0usize..30,
    ) {
        let mut cache = BanCache::new().with_lurker_age_s(0.0);
        let mut reference = BanList::new();
        let ids: Vec<_> = objects.iter().map(|(o, _)| {
            let mut o = o.clone();
            o.inserted_at_s = -1.0;
            cache.insert(o)
        }).collect();
        let mut expired = Vec::new();
        let mut t = 0.0;
        for (i, (text, dt)) in bans.iter().enumerate() {
            t += f64::from(*dt);
            let _ = cache.bans_mut().add(text, t).unwrap();
            let _ = reference.add(text, t).unwrap();
            if i == lurk_at {
                // A few lurker steps in the middle of the ban stream.
                for _ in 0..3 {
                    let p = cache.lurker().step(t, budget);
                    for (id, why) in p.evicted {
                        let Eviction::Banned(_) = why else {
                            expired.push(id);
                            continue;
                        };
                        let idx = ids.iter().position(|x| *x == id).unwrap();
                        let (mut o, r) = objects[idx].clone();
                        o.inserted_at_s = -1.0;
                        prop_assert!(reference.check_linear(&o, &r, BanId::ZERO).is_banned());
                    }
                }
            }
        }
        for (id, (o, r)) in ids.iter().zip(&objects) {
            let mut o = o.clone();
            o.inserted_at_s = -1.0;
            let want = reference.check_linear(&o, r, BanId::ZERO).is_banned();
            match cache.lookup(*id, r) {
                // Evicted by the lurker: expired, or banned.
                None => prop_assert!(want || expired.contains(id)),
                Some(v) => prop_assert_eq!(v.is_banned(), want),
            }
        }
    }
}
