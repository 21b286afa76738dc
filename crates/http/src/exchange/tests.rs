//! The exchange as tables: events in, actions out (described in words by [`describe`]),
//! no host. Each table is one request's life; rows are `(ms after T0, event, action)`.

use std::time::{Duration, SystemTime};

use cachet_policy::RequestView;

use super::*;

const CONFIG: &str = r#"
[origin]
url = "http://origin.example"

[edge]
max_object_bytes = 64

[[routes]]
name = "blog"
path_prefix = "/"
ttl = "60s"
grace = "30s"
keep = "1h"
"#;

const XFETCH: &str = "[[routes]]\nname = \"blog\"\npath_prefix = \"/\"\nttl = \"60s\"\n\
     early_refresh = { policy = \"xfetch\", beta = 1.0 }\n";

const NONE: &[(&str, &str)] = &[];

const T0: u64 = 1_700_000_000_000;

const PUBLIC: &[(&str, &str)] = &[("cache-control", "max-age=60"), ("etag", "\"v1\"")];

/// The lookup handle of the tables: a number.
/// An exchange with its request's context, as a host keeps them.
struct Ex<'c> {
    ex: Exchange<u8, Box<Meta>, Vec<u8>>,
    cx: Cx<'c>,
}

impl<'c> Ex<'c> {
    fn new(
        p: &'c Policy,
        plan: &'c Plan<'c>,
        client: &'c Client,
        now: Timestamp,
        seed: u64,
    ) -> Self {
        let cx = Cx {
            policy: p,
            plan,
            client,
            request: &[],
        };
        Self {
            ex: Exchange::new(cx, now, seed),
            cx,
        }
    }

    fn handle(&mut self, now: Timestamp, event: Ev) -> Act {
        self.ex.handle(self.cx, now, event)
    }

    fn notes(&self) -> &Notes {
        self.ex.notes()
    }
}
type Act = Action<u8, Box<Meta>, Vec<u8>>;
type Ev = Event<u8, Box<Meta>, Vec<u8>>;

fn policy(toml: &str) -> Policy {
    Policy::from_toml(toml).expect("test config is valid")
}

fn view() -> RequestView<'static> {
    RequestView {
        method: "GET",
        scheme: "https",
        host: Some("blog.example"),
        path_and_query: "/a",
        ..RequestView::default()
    }
}

fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(T0 + ms)
}

fn head(status: u16, fields: &[(&str, &str)]) -> Ev {
    Event::Head(AnswerHead {
        status,
        fields: fields
            .iter()
            .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
            .collect(),
        elapsed: Duration::from_millis(5),
    })
}

fn right(obligated: bool) -> Right {
    if obligated {
        Right::Held
    } else {
        Right::Elsewhere
    }
}

fn looked(obligated: bool, found: Option<&Meta>) -> Ev {
    Event::Looked {
        handle: 1,
        right: right(obligated),
        found: found.map(|m| (Box::new(m.clone()), false)),
        failed_at: None,
    }
}

/// A lookup that leaves the right to be claimed (Envoy), with the failure list's last
/// entry for the key.
fn asks(found: Option<&Meta>, failed_ms: Option<u64>) -> Ev {
    Event::Looked {
        handle: 1,
        right: Right::Ask,
        found: found.map(|m| (Box::new(m.clone()), false)),
        failed_at: failed_ms.map(at),
    }
}

fn soft_purged(obligated: bool, meta: &Meta) -> Ev {
    Event::Looked {
        handle: 1,
        right: right(obligated),
        found: Some((Box::new(meta.clone()), true)),
        failed_at: None,
    }
}

/// An action in words: what a reader of the tables checks.
fn describe(a: &Act) -> String {
    match a {
        Action::Lookup { wait, purge } => {
            let mut s = format!("Lookup {}ms", wait.as_millis());
            if let Some(p) = purge {
                s += if p.soft {
                    " after soft purge"
                } else {
                    " after hard purge"
                };
                if p.flag.is_some() {
                    s += " with flag";
                }
            }
            s
        }
        Action::CheckBan => "CheckBan".into(),
        Action::Claim(_) => "Claim".into(),
        Action::ReadFlag { .. } => "ReadFlag".into(),
        Action::ReadStored => "ReadStored".into(),
        Action::Park(d) => format!("Park {}ms", d.as_millis()),
        Action::Fetch { fields } => {
            let conditional = fields
                .iter()
                .any(|(n, _)| n == "if-none-match" || n == "if-modified-since");
            if conditional {
                "Fetch conditional"
            } else {
                "Fetch"
            }
            .into()
        }
        Action::ReadBody { limit } => format!("ReadBody {limit}"),
        Action::Done(d) => {
            let mut s = String::from("Done");
            match &d.write {
                None => {}
                Some(Write { op, .. }) => {
                    s += match op {
                        WriteOp::Failure { update: false, .. } => " insert failure-marker;",
                        WriteOp::Failure { update: true, .. } => " update failed;",
                        WriteOp::Insert { meta, .. } if meta.pass => " insert marker;",
                        WriteOp::Insert { .. } => " insert;",
                        WriteOp::Update { .. } => " update;",
                        WriteOp::Cancel => " cancel;",
                    }
                }
            }
            let respond = match &d.respond {
                Respond::Object {
                    status,
                    found,
                    meta,
                    ..
                } => format!(
                    " object {}{}",
                    status.as_str(),
                    match (found, meta) {
                        (None, _) => " as written",
                        (Some(_), MetaFrom::Written) => " as updated",
                        (Some(_), MetaFrom::Own(_)) => " with its own fields",
                        (Some(_), MetaFrom::Found) => "",
                    }
                ),
                Respond::Unstored { status, body } => format!(
                    " unstored {}{}",
                    status.as_str(),
                    if body.is_some() { " with body" } else { "" }
                ),
                Respond::Pass => " pass".into(),
                Respond::NotCached => " 504".into(),
                Respond::Unavailable(_) => " 503".into(),
                Respond::Broken(_) => " broken".into(),
                Respond::Refreshed(r) => format!(
                    " refreshed {}",
                    crate::access::RefreshOutcome::Background(RefreshCause::Stale, *r)
                        .as_str()
                        .trim_start_matches("stale:")
                ),
            };
            s += &respond;
            if let Some(b) = &d.refresh {
                s += match b.cause {
                    RefreshCause::Stale => " + refresh stale",
                    RefreshCause::Ahead => " + refresh ahead",
                };
            }
            s
        }
    }
}

/// Runs `rows` through `ex`: each event at its time must give the action described.
/// Returns the last action.
fn table(ex: &mut Ex<'_>, rows: Vec<(u64, Ev, &str)>) -> Act {
    let mut last = None;
    for (i, (ms, event, want)) in rows.into_iter().enumerate() {
        let got = ex.handle(at(ms), event);
        assert_eq!(describe(&got), want, "row {i}");
        last = Some(got);
    }
    last.expect("a table has rows")
}

/// The object a miss at `ms` stores for an origin answer `fields` + `body`.
fn stored(p: &Policy, ms: u64, fields: &[(&str, &str)], body: &[u8]) -> Box<Meta> {
    let plan = p.plan(
        &view(),
        SystemTime::UNIX_EPOCH + Duration::from_millis(T0 + ms),
    );
    let client = Client::read("GET", NONE);
    let mut ex = Ex::new(p, &plan, &client, at(ms), 0);
    let read = format!("ReadBody {}", p.config().edge.max_object_bytes);
    let done = table(
        &mut ex,
        vec![
            (ms, Event::Start, "Lookup 10000ms"),
            (ms, looked(true, None), "Fetch"),
            (ms, head(200, fields), &read),
            (
                ms,
                Event::Body(body.to_vec()),
                "Done insert; object MISS as written",
            ),
        ],
    );
    let Action::Done(d) = done else {
        panic!("done")
    };
    match d.write.map(|w| w.op) {
        Some(WriteOp::Insert { meta, body: b, .. }) => {
            assert_eq!(b, body);
            meta
        }
        other => panic!("an insert, got {other:?}"),
    }
}

/// A client exchange of `p` planned at `ms`, with the client's fields `h`.
macro_rules! exchange {
    ($ex:ident, $p:expr, $ms:expr, $h:expr) => {
        let plan = $p.plan(
            &view(),
            SystemTime::UNIX_EPOCH + Duration::from_millis(T0 + $ms),
        );
        let client = Client::read("GET", $h);
        let mut $ex = Ex::new(&$p, &plan, &client, at($ms), 1);
    };
}

#[test]
fn a_miss_fills_and_stores_and_a_later_lookup_is_a_hit_from_the_stored_body() {
    let p = policy(CONFIG);
    let meta = stored(&p, 0, PUBLIC, b"hello");
    assert_eq!(meta.status, 200);
    exchange!(ex, p, 0, NONE);
    table(
        &mut ex,
        vec![
            (0, Event::Start, "Lookup 10000ms"),
            (0, looked(true, None), "Fetch"),
            (0, head(200, PUBLIC), "ReadBody 64"),
        ],
    );
    ex.handle(at(0), Event::Body(b"hello".to_vec()));
    assert_eq!(ex.notes().status, Some(CacheStatus::Miss));
    assert_eq!(ex.notes().origin_wait, Some(Duration::from_millis(5)));
    exchange!(hit, p, 10_000, NONE);
    let last = table(
        &mut hit,
        vec![
            (10_000, Event::Start, "Lookup 10000ms"),
            (10_000, looked(false, Some(&meta)), "CheckBan"),
            (10_000, Event::Ban(false), "ReadStored"),
            (10_000, Event::Stored(b"hello".to_vec()), "Done object HIT"),
        ],
    );
    let Action::Done(d) = last else { panic!() };
    assert!(matches!(d.respond, Respond::Object { found: Some((_, ref b)), .. } if b == b"hello"));
    // With the right to fill and nothing to refresh, the right goes back.
    exchange!(obligated, p, 10_000, NONE);
    table(
        &mut obligated,
        vec![
            (10_000, Event::Start, "Lookup 10000ms"),
            (10_000, looked(true, Some(&meta)), "CheckBan"),
            (10_000, Event::Ban(false), "ReadStored"),
            (
                10_000,
                Event::Stored(b"hello".to_vec()),
                "Done cancel; object HIT",
            ),
        ],
    );
}

#[test]
fn a_request_behind_another_fill_pauses_doubling_then_passes_at_the_deadline() {
    let p = policy(CONFIG);
    exchange!(ex, p, 0, NONE);
    let mut rows = vec![(0, Event::Start, "Lookup 10000ms")];
    rows.push((0, looked(false, None), "Park 5ms"));
    rows.push((5, Event::Woken, "Lookup 9995ms"));
    rows.push((5, looked(false, None), "Park 10ms"));
    rows.push((15, Event::Woken, "Lookup 9985ms"));
    rows.push((15, looked(false, None), "Park 20ms"));
    rows.push((35, Event::Woken, "Lookup 9965ms"));
    rows.push((35, looked(false, None), "Park 40ms"));
    rows.push((75, Event::Woken, "Lookup 9925ms"));
    rows.push((75, looked(false, None), "Park 50ms"));
    rows.push((9_990, Event::Woken, "Lookup 10ms"));
    rows.push((9_990, looked(false, None), "Park 10ms"));
    rows.push((10_000, Event::Woken, "Lookup 0ms"));
    rows.push((10_000, looked(false, None), "Done pass"));
    table(&mut ex, rows);
    assert_eq!(ex.notes().pass_reason, Some("collapse-timeout"));
    // The platform's own wait ran out.
    exchange!(ex, p, 0, NONE);
    table(
        &mut ex,
        vec![
            (0, Event::Start, "Lookup 10000ms"),
            (10_000, Event::TimedOut, "Done pass"),
        ],
    );
    assert_eq!(ex.notes().pass_reason, Some("collapse-timeout"));
}

#[test]
fn past_grace_the_right_holder_revalidates_and_the_others_wait_for_its_answer() {
    let p = policy(CONFIG);
    let meta = stored(&p, 0, PUBLIC, b"v1");
    // 200 s: past the 60 s TTL and the 30 s grace, within keep.
    exchange!(waiter, p, 200_000, NONE);
    table(
        &mut waiter,
        vec![
            (200_000, Event::Start, "Lookup 10000ms"),
            (200_000, looked(false, Some(&meta)), "CheckBan"),
            (200_000, Event::Ban(false), "Park 5ms"),
        ],
    );
    exchange!(ex, p, 200_000, NONE);
    table(
        &mut ex,
        vec![
            (200_000, Event::Start, "Lookup 10000ms"),
            (200_000, looked(true, Some(&meta)), "CheckBan"),
            (200_000, Event::Ban(false), "ReadStored"),
            (200_000, Event::Stored(b"v1".to_vec()), "Fetch conditional"),
            (
                200_005,
                head(304, &[("cache-control", "max-age=60")]),
                "Done update; object MISS as updated",
            ),
        ],
    );
    assert_eq!(ex.notes().refresh, Some(Revalidation::Revalidated));
    // The waiter's next lookup finds the freshened copy.
    let fresh = stored(&p, 200_005, PUBLIC, b"v1");
    table(
        &mut waiter,
        vec![
            (200_005, Event::Woken, "Lookup 9995ms"),
            (200_005, looked(false, Some(&fresh)), "CheckBan"),
            (200_005, Event::Ban(false), "ReadStored"),
            (200_005, Event::Stored(b"v1".to_vec()), "Done object HIT"),
        ],
    );
}

#[test]
fn a_revalidation_that_fails_records_it_then_serves_stale_if_error_or_a_503() {
    let p = policy(CONFIG);
    for (cc, want) in [
        (
            "max-age=60, stale-if-error=3600",
            "Done update failed; object STALE",
        ),
        ("max-age=60", "Done update failed; 503"),
    ] {
        let meta = stored(&p, 0, &[("cache-control", cc), ("etag", "\"v1\"")], b"v1");
        for failure in [Event::OriginFailed("refused".into()), head(503, &[])] {
            let is_head = matches!(failure, Event::Head(_));
            exchange!(ex, p, 200_000, NONE);
            table(
                &mut ex,
                vec![
                    (200_000, Event::Start, "Lookup 10000ms"),
                    (200_000, looked(true, Some(&meta)), "CheckBan"),
                    (200_000, Event::Ban(false), "ReadStored"),
                    (200_000, Event::Stored(b"v1".to_vec()), "Fetch conditional"),
                    (
                        200_001,
                        failure,
                        // A real 5xx answer past stale-if-error goes out as the origin sent it.
                        if is_head && want.ends_with("503") {
                            "Done update failed; unstored PASS"
                        } else {
                            want
                        },
                    ),
                ],
            );
        }
        // A request that waited for it (began before the failure) is answered the same
        // way without asking the origin; one that began in the failure's millisecond
        // asks again.
        let mut failed = meta.clone();
        failed.origin_failed_at_ms = Some(T0 + 200_001);
        exchange!(w, p, 200_000, NONE);
        let mut rows = vec![
            (200_000, Event::Start, "Lookup 10000ms"),
            (200_002, looked(true, Some(&failed)), "ReadStored"),
            (
                200_002,
                Event::Stored(b"v1".to_vec()),
                "Done cancel; object STALE",
            ),
        ];
        if want.ends_with("503") {
            rows.truncate(1);
            rows.push((200_002, looked(true, Some(&failed)), "Done cancel; 503"));
        }
        table(&mut w, rows);
        exchange!(same, p, 200_001, NONE);
        table(
            &mut same,
            vec![
                (200_001, Event::Start, "Lookup 10000ms"),
                (200_001, looked(true, Some(&failed)), "CheckBan"),
            ],
        );
    }
}

#[test]
fn a_failed_fill_leaves_a_failure_marker_for_its_waiters_and_a_later_request_fills_again() {
    let p = policy(CONFIG);
    for failure in [
        (Event::OriginFailed("refused".into()), false),
        (Event::BodyBroke("connection reset".into()), true),
    ] {
        exchange!(ex, p, 0, NONE);
        let mut rows = vec![
            (0, Event::Start, "Lookup 10000ms"),
            (0, looked(true, None), "Fetch"),
        ];
        if failure.1 {
            rows.push((0, head(200, PUBLIC), "ReadBody 64"));
        }
        rows.push((1, failure.0, "Done insert failure-marker; 503"));
        let Action::Done(d) = table(&mut ex, rows) else {
            panic!()
        };
        let Some(Write {
            op: WriteOp::Failure { meta, entry, .. },
            ..
        }) = d.write
        else {
            panic!()
        };
        assert!(meta.is_failure_marker());
        assert_eq!(
            (entry.ttl, entry.swr),
            (Duration::ZERO, Duration::from_secs(10))
        );
        // A waiter that began before: 503 at once, the right it got goes back.
        exchange!(w, p, 0, NONE);
        table(
            &mut w,
            vec![
                (0, Event::Start, "Lookup 10000ms"),
                (2, looked(true, Some(&meta)), "Done cancel; 503"),
            ],
        );
        // A request after the failure fills again.
        exchange!(next, p, 1_000, NONE);
        table(
            &mut next,
            vec![
                (1_000, Event::Start, "Lookup 10000ms"),
                (1_000, looked(true, Some(&meta)), "Fetch"),
            ],
        );
    }
}

#[test]
fn a_revalidation_whose_replacement_body_breaks_serves_stale_if_error() {
    let p = policy(CONFIG);
    let cc = [
        ("cache-control", "max-age=60, stale-if-error=3600"),
        ("etag", "\"v1\""),
    ];
    let meta = stored(&p, 0, &cc, b"v1");
    exchange!(ex, p, 200_000, NONE);
    table(
        &mut ex,
        vec![
            (200_000, Event::Start, "Lookup 10000ms"),
            (200_000, looked(true, Some(&meta)), "CheckBan"),
            (200_000, Event::Ban(false), "ReadStored"),
            (200_000, Event::Stored(b"v1".to_vec()), "Fetch conditional"),
            (
                200_001,
                head(200, &[("cache-control", "max-age=60"), ("etag", "\"v2\"")]),
                "ReadBody 64",
            ),
            (
                200_002,
                Event::BodyBroke("reset".into()),
                "Done update failed; object STALE",
            ),
        ],
    );
    assert_eq!(ex.notes().error.as_deref(), Some("reset"));
}

#[test]
fn stale_within_grace_is_served_at_once_and_refreshed_after_with_validators() {
    let p = policy(CONFIG);
    let meta = stored(&p, 0, PUBLIC, b"v1");
    exchange!(ex, p, 75_000, NONE);
    let Action::Done(d) = table(
        &mut ex,
        vec![
            (75_000, Event::Start, "Lookup 10000ms"),
            (75_000, looked(true, Some(&meta)), "CheckBan"),
            (75_000, Event::Ban(false), "ReadStored"),
            (
                75_000,
                Event::Stored(b"v1".to_vec()),
                "Done object STALE + refresh stale",
            ),
        ],
    ) else {
        panic!()
    };
    let job = d.refresh.expect("a refresh");
    // The background refresh, its outcomes.
    let plan = p.plan(
        &view(),
        SystemTime::UNIX_EPOCH + Duration::from_millis(T0 + 75_000),
    );
    let client = Client::read("GET", NONE);
    let cases: Vec<(Ev, Option<Ev>, &str)> = vec![
        (
            head(304, &[("cache-control", "max-age=60")]),
            None,
            "Done update; refreshed revalidated-304",
        ),
        (
            head(503, &[]),
            None,
            "Done cancel; refreshed origin-error-kept-stored",
        ),
        (
            Event::OriginFailed("refused".into()),
            None,
            "Done cancel; refreshed kept-stored",
        ),
        (
            head(200, &[("cache-control", "private")]),
            None,
            "Done insert marker; refreshed now-uncacheable",
        ),
        (
            head(200, &[("cache-control", "max-age=60"), ("etag", "\"v2\"")]),
            Some(Event::Body(b"v2".to_vec())),
            "Done insert; refreshed replaced",
        ),
        (
            head(200, &[("cache-control", "max-age=60"), ("etag", "\"v2\"")]),
            Some(Event::BodyBroke("reset".into())),
            "Done cancel; refreshed origin-error-kept-stored",
        ),
    ];
    for (answer, body, want) in cases {
        let job = Background {
            handle: 1,
            found: job.found.clone(),
            cause: job.cause,
        };
        let cx = Cx {
            policy: &p,
            plan: &plan,
            client: &client,
            request: &[],
        };
        let mut r = Ex {
            ex: Exchange::refresh(cx, job, at(75_000)),
            cx,
        };
        let mut rows = vec![(75_001, Event::Start, "Fetch conditional")];
        match body {
            Some(b) => {
                rows.push((75_002, answer, "ReadBody 64"));
                rows.push((75_003, b, want));
            }
            None => rows.push((75_002, answer, want)),
        }
        table(&mut r, rows);
    }
}

#[test]
fn refresh_ahead_soft_purges_with_its_flag_and_everyone_keeps_getting_hits() {
    let p = policy(XFETCH);
    let meta = stored(&p, 0, PUBLIC, b"v1");
    let t = meta.times.stored_at.as_millis() + 60_000 - T0 - 2;
    // 2 ms before expiry, without the right: a seed whose draw fires (most do this close
    // to the expiry: delta is the fill's 5 ms).
    let plan = p.plan(
        &view(),
        SystemTime::UNIX_EPOCH + Duration::from_millis(T0 + t),
    );
    let client = Client::read("GET", NONE);
    let fires = (0..64u64)
        .find(|seed| {
            let mut ex = Ex::new(&p, &plan, &client, at(t), *seed);
            ex.handle(at(t), Event::Start);
            ex.handle(at(t), looked(false, Some(&meta)));
            describe(&ex.handle(at(t), Event::Ban(false))).starts_with("Lookup")
        })
        .expect("some seed's draw fires 2 ms before expiry");
    let mut ex = Ex::new(&p, &plan, &client, at(t), fires);
    table(
        &mut ex,
        vec![
            (t, Event::Start, "Lookup 10000ms"),
            (t, looked(false, Some(&meta)), "CheckBan"),
            (
                t,
                Event::Ban(false),
                "Lookup 10000ms after soft purge with flag",
            ),
            (t, soft_purged(true, &meta), "CheckBan"),
            (t, Event::Ban(false), "ReadFlag"),
            (
                t,
                Event::Flag(Some(
                    meta.times.stored_at.as_millis().to_string().into_bytes(),
                )),
                "ReadStored",
            ),
            (
                t,
                Event::Stored(b"v1".to_vec()),
                "Done object HIT + refresh ahead",
            ),
        ],
    );
    // Another request meanwhile: the copy is soft-purged by refresh-ahead, still a HIT.
    exchange!(other, p, t + 1, NONE);
    table(
        &mut other,
        vec![
            (t + 1, Event::Start, "Lookup 10000ms"),
            (t + 1, soft_purged(false, &meta), "CheckBan"),
            (t + 1, Event::Ban(false), "ReadFlag"),
            (
                t + 1,
                Event::Flag(Some(
                    meta.times.stored_at.as_millis().to_string().into_bytes(),
                )),
                "ReadStored",
            ),
            (t + 1, Event::Stored(b"v1".to_vec()), "Done object HIT"),
        ],
    );
    // An operator's soft purge (no flag for this copy) ends freshness: no grace, so wait
    // for the revalidation.
    exchange!(purged, p, 10_000, NONE);
    table(
        &mut purged,
        vec![
            (10_000, Event::Start, "Lookup 10000ms"),
            (10_000, soft_purged(false, &meta), "CheckBan"),
            (10_000, Event::Ban(false), "ReadFlag"),
            (10_000, Event::Flag(None), "Park 5ms"),
        ],
    );
}

#[test]
fn a_banned_copy_is_purged_by_its_tag_and_looked_up_once_more_then_filled() {
    let p = policy(CONFIG);
    let meta = stored(&p, 0, PUBLIC, b"v1");
    exchange!(ex, p, 1_000, NONE);
    table(
        &mut ex,
        vec![
            (1_000, Event::Start, "Lookup 10000ms"),
            (1_000, looked(false, Some(&meta)), "CheckBan"),
            (1_000, Event::Ban(true), "Lookup 10000ms after hard purge"),
            // The purge did not reach it yet: no third lookup, fetched as missing.
            (1_000, looked(true, Some(&meta)), "CheckBan"),
            (1_000, Event::Ban(true), "Fetch"),
        ],
    );
    let Action::Lookup { .. } = ({
        exchange!(ex, p, 1_000, NONE);
        ex.handle(at(1_000), Event::Start);
        ex.handle(at(1_000), looked(false, Some(&meta)));
        let purge = ex.handle(at(1_000), Event::Ban(true));
        if let Action::Lookup {
            purge: Some(ref pg),
            ..
        } = purge
        {
            assert_eq!(pg.tag, meta.tag, "the copy's own tag");
            assert!(!pg.tag.is_empty());
        }
        purge
    }) else {
        panic!()
    };
}

#[test]
fn a_private_answer_leaves_a_marker_and_later_requests_pass() {
    let p = policy(CONFIG);
    exchange!(ex, p, 0, NONE);
    let Action::Done(d) = table(
        &mut ex,
        vec![
            (0, Event::Start, "Lookup 10000ms"),
            (0, looked(true, None), "Fetch"),
            (
                0,
                head(200, &[("cache-control", "private")]),
                "Done insert marker; unstored PASS",
            ),
        ],
    ) else {
        panic!()
    };
    let Some(Write {
        op: WriteOp::Insert { meta: marker, .. },
        ..
    }) = d.write
    else {
        panic!()
    };
    exchange!(later, p, 1_000, NONE);
    table(
        &mut later,
        vec![
            (1_000, Event::Start, "Lookup 10000ms"),
            (1_000, looked(false, Some(&marker)), "Done cancel; pass"),
        ],
    );
    assert_eq!(later.notes().pass_reason, Some("hit-for-pass"));
}

#[test]
fn an_oversized_answer_goes_out_whole_and_unstored() {
    let p = policy(CONFIG);
    exchange!(ex, p, 0, NONE);
    table(
        &mut ex,
        vec![
            (0, Event::Start, "Lookup 10000ms"),
            (0, looked(true, None), "Fetch"),
            (0, head(200, PUBLIC), "ReadBody 64"),
            (1, Event::Oversize, "Done cancel; unstored PASS"),
        ],
    );
    assert_eq!(ex.notes().pass_reason, Some("too-large"));
    // Declared too large: decided on the head, the body is never read.
    exchange!(ex, p, 0, NONE);
    table(
        &mut ex,
        vec![
            (0, Event::Start, "Lookup 10000ms"),
            (0, looked(true, None), "Fetch"),
            (
                0,
                head(
                    200,
                    &[("cache-control", "max-age=60"), ("content-length", "65")],
                ),
                "Done cancel; unstored PASS",
            ),
        ],
    );
    // An uncacheable answer read whole gives its body back.
    exchange!(ex, p, 0, NONE);
    table(
        &mut ex,
        vec![
            (0, Event::Start, "Lookup 10000ms"),
            (0, looked(true, None), "Fetch"),
            (0, head(200, PUBLIC), "ReadBody 64"),
        ],
    );
}

#[test]
fn only_if_cached_with_nothing_servable_is_a_504_and_gives_the_right_back() {
    let p = policy(CONFIG);
    exchange!(ex, p, 0, &[("cache-control", "only-if-cached")][..]);
    table(
        &mut ex,
        vec![
            (0, Event::Start, "Lookup 10000ms"),
            (0, looked(true, None), "Done cancel; 504"),
        ],
    );
    assert_eq!(ex.notes().status, Some(CacheStatus::Miss));
}

#[test]
fn a_304_that_makes_the_page_private_reaches_only_its_client_with_its_cookie() {
    let p = policy(CONFIG);
    let meta = stored(&p, 0, PUBLIC, b"v1");
    exchange!(ex, p, 200_000, NONE);
    let Action::Done(d) = table(
        &mut ex,
        vec![
            (200_000, Event::Start, "Lookup 10000ms"),
            (200_000, looked(true, Some(&meta)), "CheckBan"),
            (200_000, Event::Ban(false), "ReadStored"),
            (200_000, Event::Stored(b"v1".to_vec()), "Fetch conditional"),
            (
                200_001,
                head(304, &[("cache-control", "private"), ("set-cookie", "s=1")]),
                "Done insert marker; object PASS with its own fields",
            ),
        ],
    ) else {
        panic!()
    };
    let Respond::Object { found, cookies, .. } = d.respond else {
        panic!()
    };
    assert_eq!(found.map(|(_, b)| b).as_deref(), Some(&b"v1"[..]));
    assert_eq!(cookies, vec![("set-cookie".to_owned(), b"s=1".to_vec())]);
    assert_eq!(ex.notes().refresh, Some(Revalidation::NowUncacheable));
}

#[test]
fn an_event_the_exchange_did_not_ask_for_ends_it_with_a_503_not_a_panic() {
    let p = policy(CONFIG);
    exchange!(ex, p, 0, NONE);
    table(
        &mut ex,
        vec![
            (0, Event::Body(Vec::new()), "Done 503"),
            (0, Event::Start, "Done 503"),
        ],
    );
}

#[test]
fn the_core_entry_holds_grace_and_keep_and_the_ttl_too_when_the_route_refreshes_early() {
    let early = policy(
        "[[routes]]\nname = \"css\"\npath_prefix = \"/css/\"\nearly_refresh = { policy = \"xfetch\" }\n\
         [[routes]]\nname = \"blog\"\npath_prefix = \"/\"\n",
    );
    let stored = Timestamp::from_millis(T0);
    let mut meta = Meta::marker("blog", stored, Duration::from_secs(60));
    meta.pass = false;
    meta.status = 200;
    meta.surrogate_keys = vec!["user-1".into()];
    meta.tag = "cachet-obj-0123456789abcdef".into();
    meta.times = EntryTimes::new(stored, Duration::from_secs(60));
    meta.times.grace = Duration::from_secs(30);
    meta.times.keep = Duration::from_secs(3600);
    let now = Timestamp::from_millis(T0 + 500);
    let e = CoreEntry::of(&early, &meta, now);
    assert_eq!(e.ttl, Duration::from_secs(60));
    assert_eq!(e.swr, Duration::from_secs(3630));
    assert_eq!(
        e.age,
        Duration::from_millis(501),
        "issue 28 item 1: the platform's age counts from the fill's request, rounded up"
    );
    assert_eq!(e.keys, ["user-1", "cachet-obj-0123456789abcdef"]);
    meta.route = "css".into();
    assert_eq!(
        CoreEntry::of(&early, &meta, now).swr,
        Duration::from_secs(3690)
    );
    // A copy whose revalidation failed stays stale to the platform, usable as long.
    meta.origin_failed_at_ms = Some(T0 + 500);
    let failed = CoreEntry::of(&early, &meta, now);
    assert_eq!(failed.ttl, Duration::from_millis(501));
    assert_eq!(failed.ttl + failed.swr, Duration::from_secs(60 + 3690));
    meta.origin_failed_at_ms = None;
    meta.pass = true;
    assert_eq!(CoreEntry::of(&early, &meta, now).swr, Duration::ZERO);
}

#[test]
fn a_host_that_elects_the_leader_after_the_lookup_claims_only_when_the_step_needs_the_right() {
    let p = policy(CONFIG);
    let meta = stored(&p, 0, PUBLIC, b"v1");
    // A miss: claimed; the leader fetches, a contended lock fetches uncollapsed.
    for (claim, want) in [(Claim::Leader, "Fetch"), (Claim::Uncollapsed, "Fetch")] {
        exchange!(ex, p, 0, NONE);
        table(
            &mut ex,
            vec![
                (0, Event::Start, "Lookup 10000ms"),
                (0, asks(None, None), "Claim"),
                (0, Event::Claimed(1, claim), want),
            ],
        );
    }
    // A fresh hit needs no right: no claim.
    exchange!(hit, p, 1_000, NONE);
    table(
        &mut hit,
        vec![
            (1_000, Event::Start, "Lookup 10000ms"),
            (1_000, asks(Some(&meta), None), "CheckBan"),
            (1_000, Event::Ban(false), "ReadStored"),
            (1_000, Event::Stored(b"v1".to_vec()), "Done object HIT"),
        ],
    );
    // Stale within grace: the leader refreshes after the answer, a follower only serves.
    for (claim, want) in [
        (Claim::Leader, "Done object STALE + refresh stale"),
        (Claim::Follower, "Done object STALE"),
        (Claim::Uncollapsed, "Done object STALE"),
    ] {
        exchange!(ex, p, 75_000, NONE);
        table(
            &mut ex,
            vec![
                (75_000, Event::Start, "Lookup 10000ms"),
                (75_000, asks(Some(&meta), None), "CheckBan"),
                (75_000, Event::Ban(false), "Claim"),
                (75_000, Event::Claimed(1, claim), "ReadStored"),
                (75_000, Event::Stored(b"v1".to_vec()), want),
            ],
        );
    }
}

#[test]
fn a_follower_parks_until_woken_and_shares_the_leaders_answer_or_its_failure() {
    let p = policy(CONFIG);
    let cc = [
        ("cache-control", "max-age=60, stale-if-error=3600"),
        ("etag", "\"v1\""),
    ];
    let meta = stored(&p, 0, &cc, b"v1");
    // Nothing stored, another request fills: parked, woken, served what it stored.
    exchange!(ex, p, 0, NONE);
    table(
        &mut ex,
        vec![
            (0, Event::Start, "Lookup 10000ms"),
            (0, asks(None, None), "Claim"),
            (0, Event::Claimed(1, Claim::Follower), "Park 5ms"),
            (300, Event::Woken, "Lookup 9700ms"),
            (300, asks(Some(&meta), None), "CheckBan"),
            (300, Event::Ban(false), "ReadStored"),
            (300, Event::Stored(b"v1".to_vec()), "Done object HIT"),
        ],
    );
    // The fill it waited for failed (recorded after it began): 503 at once, no fetch.
    exchange!(ex, p, 0, NONE);
    table(
        &mut ex,
        vec![
            (0, Event::Start, "Lookup 10000ms"),
            (0, asks(None, None), "Claim"),
            (0, Event::Claimed(1, Claim::Follower), "Park 5ms"),
            (300, Event::Woken, "Lookup 9700ms"),
            (300, asks(None, Some(200)), "Done 503"),
        ],
    );
    // A revalidation it waited for failed: the copy within stale-if-error.
    exchange!(ex, p, 200_000, NONE);
    table(
        &mut ex,
        vec![
            (200_000, Event::Start, "Lookup 10000ms"),
            (200_000, asks(Some(&meta), None), "CheckBan"),
            (200_000, Event::Ban(false), "Claim"),
            (200_000, Event::Claimed(1, Claim::Follower), "Park 5ms"),
            (200_300, Event::Woken, "Lookup 9700ms"),
            (200_300, asks(Some(&meta), Some(200_200)), "ReadStored"),
            (200_300, Event::Stored(b"v1".to_vec()), "Done object STALE"),
        ],
    );
    // A failure listed before it waited is not the one it waits for; once parked, one
    // recorded in the very millisecond it began is (it was parked behind that fetch).
    exchange!(ex, p, 0, NONE);
    table(
        &mut ex,
        vec![
            (0, Event::Start, "Lookup 10000ms"),
            (0, asks(None, Some(0)), "Claim"),
            (0, Event::Claimed(1, Claim::Follower), "Park 5ms"),
            (5, Event::Woken, "Lookup 9995ms"),
            (5, asks(None, Some(0)), "Done 503"),
        ],
    );
    // The host's queue is full: passed.
    exchange!(ex, p, 0, NONE);
    table(
        &mut ex,
        vec![
            (0, Event::Start, "Lookup 10000ms"),
            (0, asks(None, None), "Claim"),
            (0, Event::Claimed(1, Claim::Follower), "Park 5ms"),
            (0, Event::Refused, "Done pass"),
        ],
    );
}

#[test]
fn an_unkeyable_variant_and_a_fetch_the_host_cannot_carry_are_passed() {
    let p = policy(CONFIG);
    exchange!(ex, p, 0, NONE);
    table(
        &mut ex,
        vec![
            (0, Event::Start, "Lookup 10000ms"),
            (0, Event::Unkeyable, "Done pass"),
        ],
    );
    exchange!(ex, p, 0, NONE);
    table(
        &mut ex,
        vec![
            (0, Event::Start, "Lookup 10000ms"),
            (0, looked(true, None), "Fetch"),
            (0, Event::CannotCarry, "Done cancel; pass"),
        ],
    );
}

#[test]
fn a_host_whose_lookup_applies_bans_and_carries_the_body_answers_a_hit_in_two_steps() {
    let p = policy(CONFIG);
    let meta = stored(&p, 0, PUBLIC, b"v1");
    let plan = p.plan(
        &view(),
        SystemTime::UNIX_EPOCH + Duration::from_millis(T0 + 1_000),
    );
    let client = Client::read("GET", NONE);
    let cx = Cx {
        policy: &p,
        plan: &plan,
        client: &client,
        request: &[],
    };
    let mut ex = Ex {
        ex: Exchange::new(cx, at(1_000), 1)
            .lookup_applies_bans()
            .found_carries_body(),
        cx,
    };
    let last = table(
        &mut ex,
        vec![
            (1_000, Event::Start, "Lookup 10000ms"),
            (1_000, asks(Some(&meta), None), "Done object HIT"),
        ],
    );
    let Action::Done(d) = last else { panic!() };
    // The body stands in as `B::default()`: the host answers from its found object.
    assert!(matches!(d.respond, Respond::Object { found: Some((_, ref b)), .. } if b.is_empty()));
}

#[test]
fn a_follower_is_served_what_its_leader_stored_even_once_its_ttl_ran_out() {
    // A 1 s TTL and a fetch that outlasts it: the copy is expired when the follower wakes,
    // but it is the answer fetched for it (never a fetch of its own in turn).
    let p = policy(CONFIG);
    let old = stored(&p, 0, PUBLIC, b"v1");
    let fresh = stored(&p, 200_000, &[("cache-control", "max-age=1")], b"v2");
    exchange!(ex, p, 200_000, NONE);
    table(
        &mut ex,
        vec![
            (200_000, Event::Start, "Lookup 10000ms"),
            (200_000, asks(Some(&old), None), "CheckBan"),
            (200_000, Event::Ban(false), "Claim"),
            (200_000, Event::Claimed(1, Claim::Follower), "Park 5ms"),
            (202_000, Event::Woken, "Lookup 8000ms"),
            (202_000, asks(Some(&fresh), None), "CheckBan"),
            (202_000, Event::Ban(false), "ReadStored"),
            (202_000, Event::Stored(b"v2".to_vec()), "Done object MISS"),
        ],
    );
    // The copy it saw as it parked is not an answer: past grace it waits again.
    exchange!(ex, p, 200_000, NONE);
    table(
        &mut ex,
        vec![
            (200_000, Event::Start, "Lookup 10000ms"),
            (200_000, asks(Some(&old), None), "CheckBan"),
            (200_000, Event::Ban(false), "Claim"),
            (200_000, Event::Claimed(1, Claim::Follower), "Park 5ms"),
            (200_005, Event::Woken, "Lookup 9995ms"),
            (200_005, asks(Some(&old), None), "CheckBan"),
            (200_005, Event::Ban(false), "Claim"),
        ],
    );
}

#[test]
fn an_object_is_stamped_with_when_its_fetch_was_sent_however_long_its_body_took() {
    // RFC 9111 §4.2.3 `request_time`: the head came 5 ms after the fetch went out (at
    // 995), the body 800 ms later. Stamped at the body's time less the head's 5 ms
    // (1795), a soft purge or ban added at 1200, while the body was still arriving,
    // would miss what the fetch brought back.
    let p = policy(CONFIG);
    exchange!(ex, p, 990, NONE);
    let read = format!("ReadBody {}", p.config().edge.max_object_bytes);
    let done = table(
        &mut ex,
        vec![
            (990, Event::Start, "Lookup 10000ms"),
            (995, looked(true, None), "Fetch"),
            (1_000, head(200, PUBLIC), &read),
            (
                1_800,
                Event::Body(b"hello".to_vec()),
                "Done insert; object MISS as written",
            ),
        ],
    );
    let Action::Done(d) = done else {
        panic!("done")
    };
    let Some(WriteOp::Insert { meta, .. }) = d.write.map(|w| w.op) else {
        panic!("an insert")
    };
    assert_eq!(meta.times.stored_at, at(995));
    // The age counts the whole fetch, body included (fail closed: never younger).
    assert_eq!(meta.times.delta, Duration::from_millis(805));
}
