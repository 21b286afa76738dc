//! Crate behaviour: ban-list rules (ordering, dedup, retirement), surrogate-key bans, lurker budgets, scale.

use cachet_ban::{
    BanCache, BanError, BanId, BanList, Eviction, MAX_SURROGATE_KEY_BYTES, Object, Request,
    Verdict, evaluate_scenario,
};

#[test]
fn ban_at_the_same_second_does_not_apply() {
    let mut list = BanList::new();
    let _ = list.add("req.url ~ .", 10.0).unwrap();
    let req = Request::new("/");
    assert!(
        !list
            .check(&Object::new("/", 10.0), &req, BanId::ZERO)
            .is_banned()
    );
    assert!(
        list.check(&Object::new("/", 9.999), &req, BanId::ZERO)
            .is_banned()
    );
}

#[test]
fn time_going_backwards_keeps_the_list_ordered() {
    let mut list = BanList::new();
    let _ = list.add("obj.status == 200", 10.0).unwrap();
    let b = list.add("obj.status == 404", 5.0).unwrap();
    let (_, at, _, _) = list.iter().find(|x| x.0 == b.id).unwrap();
    assert!((at - 10.0).abs() < f64::EPSILON);
    assert!(matches!(
        list.add("obj.status == 1", f64::INFINITY),
        Err(BanError::BadTime(_))
    ));
}

#[test]
fn surrogate_key_bans() {
    let mut list = BanList::new();
    let a = list.add_surrogate_key_ban("author-7", 5.0).unwrap();
    assert!(a.lurker_friendly);
    assert_eq!(list.unindexed(), 0);
    let dot = list.add_surrogate_key_ban("a.b\"c\\d", 5.0).unwrap();
    let req = Request::new("/");
    let obj = |keys: &[&str]| Object::new("/", 0.0).with_surrogate_keys(keys);
    assert_eq!(
        list.check(&obj(&["x", "author-7"]), &req, BanId::ZERO),
        Verdict::Banned { by: a.id }
    );
    assert!(
        !list
            .check(&obj(&["author-70"]), &req, BanId::ZERO)
            .is_banned()
    );
    assert!(
        !list
            .check(&obj(&["axb\"c\\d"]), &req, BanId::ZERO)
            .is_banned()
    );
    assert_eq!(
        list.check(&obj(&["a.b\"c\\d"]), &req, BanId::ZERO),
        Verdict::Banned { by: dot.id }
    );
    for bad in ["", "a b", &"k".repeat(MAX_SURROGATE_KEY_BYTES + 1)] {
        assert!(matches!(
            list.add_surrogate_key_ban(bad, 6.0),
            Err(BanError::BadSurrogateKey { .. })
        ));
    }
    // The same ban written by hand is deduplicated against the API's.
    let c = list
        .add(r#"obj.http.surrogate-key ~ "(^|\s)author\-7(\s|$)""#, 7.0)
        .unwrap();
    assert_eq!(c.replaced, Some(a.id));
}

#[test]
fn req_bans_are_tested_once_per_object_like_varnish() {
    // Varnish moves an object past a req.* ban at its first lookup after the ban, whatever
    // the request; a later, matching request does not ban it.
    let mut cache = BanCache::new();
    let id = cache.insert(Object::new("/a", 0.0));
    let _ = cache.bans_mut().add("req.http.x-debug == 1", 1.0).unwrap();
    let v = cache.lookup(id, &Request::new("/a")).unwrap();
    assert_eq!(
        v,
        Verdict::Kept {
            checked_through: BanId(1)
        }
    );
    let v = cache
        .lookup(id, &Request::new("/a").with_header("X-Debug", "1"))
        .unwrap();
    assert!(!v.is_banned());
}

#[test]
fn lurker_budget_and_progress() {
    let mut cache = BanCache::new().with_lurker_age_s(0.0);
    let ids: Vec<_> = (0..100)
        .map(|i| {
            cache.insert(
                Object::new(format!("/p/{i}"), 0.0)
                    .with_header("x-url", format!("/p/{i}"))
                    .with_status(if i % 10 == 0 { 404 } else { 200 }),
            )
        })
        .collect();
    let _ = cache.bans_mut().add("obj.status == 404", 1.0).unwrap();
    let _ = cache.bans_mut().add("obj.http.x-url ~ ^/p/5", 1.0).unwrap();
    let mut evicted = Vec::new();
    let mut steps = 0;
    loop {
        let p = cache.lurker().step(2.0, 7);
        assert!(p.examined <= 7);
        steps += 1;
        evicted.extend(p.evicted);
        if p.pass_finished {
            assert_eq!(p.completed_bans, 2);
            assert_eq!(p.discarded_bans, 2);
            break;
        }
    }
    assert_eq!(steps, 15);
    // 10 × 404 and /p/5, /p/50..59 minus /p/50 (already a 404).
    assert_eq!(evicted.len(), 10 + 11 - 1);
    assert!(
        evicted
            .iter()
            .all(|(_, why)| matches!(why, Eviction::Banned(_)))
    );
    assert_eq!(cache.len(), 80);
    assert!(cache.bans().is_empty());
    assert!(cache.get(ids[1]).is_some());
    assert!(cache.get(ids[10]).is_none());
}

#[test]
fn many_bans_stay_indexed_and_retire() {
    let mut list = BanList::new();
    let n = 20_000u32;
    for i in 0..n {
        let t = f64::from(i);
        let _ = match i % 4 {
            0 => list.add(&format!("obj.http.x-url == /page/{i}"), t),
            1 => list.add(&format!("req.url ~ ^/blog/user{i}/"), t),
            2 => list.add_surrogate_key_ban(&format!("key{i}"), t),
            _ => list.add(&format!("req.url == /item/{i}"), t),
        }
        .unwrap();
    }
    assert_eq!(list.unindexed(), 0);
    assert_eq!(list.live(), n as usize);
    let old = Object::new("/blog/user5/x", -1.0).with_header("x-url", "/blog/user5/x");
    assert_eq!(
        list.check(&old, &Request::new("/blog/user5/x"), BanId::ZERO),
        Verdict::Banned { by: BanId(6) }
    );
    let miss = Request::new("/blog/bob/x");
    assert!(!list.check(&old, &miss, BanId::ZERO).is_banned());
    assert_eq!(
        list.discard_not_after(f64::from(n - 101)),
        (n - 100) as usize
    );
    assert_eq!(list.len(), 100);
}

#[test]
fn scenario_errors() {
    for bad in [
        "not json",
        r#"{"objects":[{"id":"a","inserted_at":0,"url":"/"},{"id":"a","inserted_at":0,"url":"/"}]}"#,
        r#"{"lookups":[{"object":"nope","at":1}]}"#,
        r#"{"objects":[{"id":"a","inserted_at":5,"url":"/"}],"lookups":[{"object":"a","at":1}]}"#,
        r#"{"objects":[{"id":"a","inserted_at":0,"url":"/","bogus":1}]}"#,
    ] {
        assert!(
            matches!(evaluate_scenario(bad), Err(BanError::Scenario(_))),
            "{bad}"
        );
    }
    let ok = evaluate_scenario(r#"{"bans":[{"at":1,"expr":"obj.ttl > 1h"}]}"#).unwrap();
    assert_eq!(
        serde_json::to_string(&ok).unwrap(),
        r#"{"bans":[{"ok":true,"lurker_friendly":true}],"lookups":[]}"#
    );
}
