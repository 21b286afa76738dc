//! Refresh-ahead, request collapsing, stale serving, revalidation and origin outages end
//! to end: the edge app in Viceroy in front of the demo origin (with its delay).
//!
//! Stale states are produced deterministically with a soft purge (no waiting for a TTL);
//! background refreshes are observed through the access-log line the edge writes once its
//! after-response work is done. Only the load scenario runs for a fixed wall-clock span,
//! as the scaled-down version of req-shield's load test.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cachet_e2e::{OriginConfig, Stack, ua};

const BLOG: &str = "blog.example";
const LOG_WAIT: Duration = Duration::from_secs(30);

/// The built-in routes with article TTL, grace, keep and early refresh replaced.
fn config(article: &str) -> String {
    format!(
        r#"
[edge]
backend = "origin"

[[routes]]
name = "article"
path_prefix = "/blog/"
vary_device = true
{article}
"#
    )
}

fn desktop(s: &Stack, path: &str) -> cachet_e2e::Reply {
    s.get(BLOG, path, &[("user-agent", ua::DESKTOP)])
}

fn soft_purge(s: &Stack, key: &str) {
    let r = s.admin(
        "POST",
        "/.cachet/purge",
        &[("surrogate-key", key), ("fastly-soft-purge", "1")],
        "",
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

fn refreshes(s: &Stack, prefix: &str) -> Vec<String> {
    s.edge
        .access_log()
        .iter()
        .filter_map(|l| l["refresh"].as_str().map(str::to_owned))
        .filter(|r| r.starts_with(prefix))
        .collect()
}

#[test]
fn concurrent_misses_collapse_to_one_origin_fetch() {
    let origin = OriginConfig {
        delay: Duration::from_millis(400),
        ..OriginConfig::ephemeral()
    };
    let s = Arc::new(Stack::start_with(origin, None));
    let threads: Vec<_> = (0..10)
        .map(|_| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || desktop(&s, "/blog/alice/entry/7"))
        })
        .collect();
    let replies: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(replies.iter().all(|r| r.status == 200));
    assert_eq!(replies.iter().filter(|r| r.x_cache() == "MISS").count(), 1);
    assert_eq!(
        s.origin_count("/blog/alice/entry/7"),
        1,
        "ten misses, one fetch"
    );
}

#[test]
fn origin_outage_serves_stale_within_grace_then_fresh_again() {
    let mut s = Stack::start_with(
        OriginConfig::ephemeral(),
        Some(&config("ttl = \"1h\"\nttl_override = true\ngrace = \"1h\"")),
    );
    let page = "/blog/alice/entry/4";
    assert_eq!(desktop(&s, page).x_cache(), "MISS");
    s.stop_origin();
    soft_purge(&s, "blog-alice");
    for round in 1..=2 {
        let r = desktop(&s, page);
        assert_eq!((r.status, r.x_cache()), (200, "STALE"), "round {round}");
        assert!(r.text().contains("alice"));
        s.edge
            .wait_for_logs(LOG_WAIT, round, |l| {
                l["refresh"] == "stale:kept-stored" && l["error"].as_str().is_some()
            })
            .expect("the failed refresh kept the stored copy");
    }
    assert_eq!(
        refreshes(&s, "stale:kept-stored").len(),
        2,
        "each request retried once"
    );
    s.start_origin();
    assert_eq!(desktop(&s, page).x_cache(), "STALE");
    s.edge
        .wait_for_log(LOG_WAIT, |l| {
            l["refresh"]
                .as_str()
                .is_some_and(|r| r == "stale:revalidated-304" || r == "stale:replaced")
        })
        .expect("the refresh succeeded once the origin was back");
    let fresh = desktop(&s, page);
    assert_eq!((fresh.status, fresh.x_cache()), (200, "HIT"));
}

#[test]
fn origin_outage_without_grace_is_a_clean_503_with_retry_after() {
    let mut s = Stack::start_with(
        OriginConfig::ephemeral(),
        Some(&config("ttl = \"1h\"\nttl_override = true")),
    );
    let page = "/blog/bob/entry/1";
    assert_eq!(desktop(&s, page).x_cache(), "MISS");
    s.stop_origin();
    let r = s.admin(
        "POST",
        "/.cachet/purge",
        &[("surrogate-key", "blog-bob")],
        "",
    );
    assert_eq!(r.status, 200);
    let down = desktop(&s, page);
    assert_eq!(down.status, 503);
    assert!(
        down.header("retry-after")
            .is_some_and(|v| v.parse::<u64>().is_ok_and(|n| n >= 1))
    );
    assert_eq!(down.header("cache-control"), Some("no-store"));
    s.start_origin();
    assert_eq!(desktop(&s, page).x_cache(), "MISS");
    assert_eq!(desktop(&s, page).x_cache(), "HIT");
}

#[test]
fn past_grace_the_keep_window_revalidates_with_validators_in_the_foreground() {
    let s = Stack::start_with(
        OriginConfig::ephemeral(),
        Some(&config("ttl = \"1h\"\nttl_override = true\nkeep = \"1h\"")),
    );
    let page = "/blog/alice/entry/5";
    let first = desktop(&s, page);
    assert_eq!(first.x_cache(), "MISS");
    assert_eq!(first.header("x-origin-request"), Some("1"));
    soft_purge(&s, "blog-alice");
    // No grace: not served stale; revalidated before answering (304 from the origin).
    let r = desktop(&s, page);
    assert_eq!((r.status, r.x_cache()), (200, "MISS"));
    assert_eq!(r.text(), first.text());
    // The 304's fields replace the stored ones (RFC 9111 §3.2): the origin stamps every
    // answer with its request number.
    assert_eq!(r.header("x-origin-request"), Some("2"));
    assert_eq!(r.header("content-type"), first.header("content-type"));
    let log = s
        .edge
        .wait_for_log(LOG_WAIT, |l| l["refresh"] == "revalidated-304")
        .expect("foreground revalidation");
    assert!(log["origin_ms"].as_u64().is_some());
    let hit = desktop(&s, page);
    assert_eq!(hit.x_cache(), "HIT");
    assert_eq!(hit.header("x-origin-request"), Some("2"), "stored updated");
    assert_eq!(s.origin_count(page), 2);
}

#[test]
fn a_304_that_turns_the_page_private_is_never_served_to_anyone_else() {
    let s = Stack::start_with(
        OriginConfig::ephemeral(),
        Some(&config("ttl = \"1h\"\nttl_override = true\nkeep = \"1h\"")),
    );
    let page = "/blog/alice/entry/6";
    let first = desktop(&s, page);
    assert_eq!(first.x_cache(), "MISS");
    soft_purge(&s, "blog-alice");
    // The origin answers the revalidation 304, but `private, no-store` with a cookie.
    s.origin.state().set_private_not_modified(true);
    let r = desktop(&s, page);
    assert_eq!((r.status, r.x_cache()), (200, "PASS"));
    assert_eq!(r.text(), first.text(), "the requester gets the stored body");
    assert_eq!(r.header("cache-control"), Some("private, no-store"));
    assert!(
        r.header("set-cookie")
            .is_some_and(|c| c.starts_with("session=nm-"))
    );
    s.edge
        .wait_for_log(LOG_WAIT, |l| l["refresh"] == "now-uncacheable")
        .expect("marker instead of freshening");
    // Nobody else gets the stored copy: a hit-for-pass marker sends them to the origin.
    let before = s.origin_count(page);
    let next = desktop(&s, page);
    assert_ne!(next.x_cache(), "HIT");
    assert_eq!(s.origin_count(page), before + 1);
}

/// req-shield's load test scaled down in time: 8 clients, 4 keys, TTL 2 s with a
/// threshold refresh at 50%, origin latency 300 ms, 7 seconds. After each key's first
/// miss, no client waits on the origin (no MISS), and the origin sees at most one fetch per
/// key per refresh cycle.
///
/// Viceroy runs on the real clock, so the bounds hold however slow the machine is: the
/// upper bound comes from the time that really passed (a refresh fires no earlier than
/// 1 s after its object was stored, so a key gets at most 1 + elapsed / 1 s fetches), the
/// lower one only asks for one refresh ahead per key.
#[test]
fn refresh_ahead_keeps_clients_off_the_origin_after_warm_up() {
    let origin = OriginConfig {
        delay: Duration::from_millis(300),
        ..OriginConfig::ephemeral()
    };
    let s = Arc::new(Stack::start_with(
        origin,
        Some(&config(
            "ttl = \"2s\"\nttl_override = true\ngrace = \"30s\"\n\
             early_refresh = { policy = \"threshold\", fraction = 0.5 }",
        )),
    ));
    let keys: Vec<String> = (1..=4).map(|i| format!("/blog/alice/entry/{i}")).collect();
    let began = Instant::now();
    for k in &keys {
        assert_eq!(desktop(&s, k).x_cache(), "MISS", "warm-up {k}");
    }
    let run = Duration::from_secs(7);
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..8)
        .map(|c| {
            let (s, keys, stop) = (Arc::clone(&s), keys.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut seen: BTreeMap<String, u32> = BTreeMap::new();
                let mut i = c;
                while !stop.load(Ordering::Relaxed) {
                    let r = desktop(&s, &keys[i % keys.len()]);
                    assert_eq!(r.status, 200);
                    *seen.entry(r.x_cache().to_owned()).or_default() += 1;
                    i += 1;
                }
                seen
            })
        })
        .collect();
    let started = Instant::now();
    while started.elapsed() < run {
        std::thread::park_timeout(run.saturating_sub(started.elapsed()));
    }
    stop.store(true, Ordering::Relaxed);
    let mut total: BTreeMap<String, u32> = BTreeMap::new();
    for c in clients {
        for (k, n) in c.join().unwrap() {
            *total.entry(k).or_default() += n;
        }
    }
    let requests: u32 = total.values().sum();
    assert!(requests > 40, "the clients ran: {total:?}");
    assert_eq!(
        total.get("MISS"),
        None,
        "no client waited on the origin: {total:?}"
    );
    // Refresh lines are written after their responses: wait for the floor asserted below.
    let _ = s.edge.wait_for_logs(LOG_WAIT, 3 * keys.len(), |l| {
        l["refresh"]
            .as_str()
            .is_some_and(|r| r.starts_with("ahead:"))
    });
    let ahead = refreshes(&s, "ahead:").len();
    let fetches: Vec<u64> = keys.iter().map(|k| s.origin_count(k)).collect();
    // Counted after the last refresh could have started: every fetch so far fits in it.
    let elapsed = began.elapsed();
    let most = 1 + elapsed.as_secs();
    eprintln!(
        "responses {total:?}; refresh-ahead jobs {ahead}; origin fetches per key \
         {fetches:?}; at most {most} each in {elapsed:?}"
    );
    // Without refresh-ahead collapsing every hit past the threshold would fetch (hundreds
    // per key); with it, one fetch per cycle of at least 1 s (threshold) + 0.3 s (fetch).
    assert!(
        ahead >= keys.len(),
        "every key was refreshed ahead: {ahead}"
    );
    for (k, n) in keys.iter().zip(&fetches) {
        assert!(
            (2..=most).contains(n),
            "{k}: {n} origin fetches in {elapsed:?}"
        );
    }
}

#[test]
fn a_dynamic_backend_with_pooling_reaches_the_origin_from_the_config() {
    let cfg = "[origin]\nurl = \"http://{origin}\"\nkeepalive = \"15s\"\nmax_connections = 8\n\
               connect_timeout = \"1s\"\nfirst_byte_timeout = \"5s\"\n\
               between_bytes_timeout = \"5s\"\n"
        .to_owned()
        + &config("ttl = \"1h\"");
    let s = Stack::start_with(OriginConfig::ephemeral(), Some(&cfg));
    let r = desktop(&s, "/blog/alice/entry/9");
    assert_eq!((r.status, r.x_cache()), (200, "MISS"), "{}", r.text());
    assert_eq!(desktop(&s, "/blog/alice/entry/9").x_cache(), "HIT");
    assert_eq!(s.origin_count("/blog/alice/entry/9"), 1);
}

#[test]
fn an_unreachable_dynamic_backend_is_a_clean_503() {
    // Port 9 (discard) on loopback: nothing listens there.
    let cfg = "[origin]\nurl = \"http://127.0.0.1:9\"\nconnect_timeout = \"1s\"\n".to_owned()
        + &config("ttl = \"1h\"");
    let s = Stack::start_with(OriginConfig::ephemeral(), Some(&cfg));
    let r = desktop(&s, "/blog/alice/entry/9");
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.header("retry-after").is_some());
    assert_eq!(s.origin.stats().total, 0);
}

/// A configuration with a dynamic backend (whose `between_bytes_timeout` applies) and
/// one route for the demo origin's `/t/` resources, plus `extra`.
fn chaos_config(extra: &str) -> String {
    format!(
        "[edge]\nbackend = \"origin\"\n[origin]\nurl = \"http://{{origin}}\"\n\
         between_bytes_timeout = \"2s\"\nfill_fields = [\"user-agent\", \"x-test-fault\", \"x-test-status\"]\n{extra}\n\
         [[routes]]\nname = \"t\"\npath_prefix = \"/t/\"\nttl = \"0s\"\nkeep = \"1h\"\n\
         vary_device = false\n"
    )
}

/// GETs `path` from a thread after `after`, with `fields`: the reply and how long it
/// took from the start of the test.
fn later(
    s: &Arc<Stack>,
    path: &'static str,
    after: Duration,
    fields: &'static [(&'static str, &'static str)],
    t0: Instant,
) -> std::thread::JoinHandle<(cachet_e2e::Reply, Duration)> {
    let s = Arc::clone(s);
    std::thread::spawn(move || {
        std::thread::sleep(after);
        let r = s.get("t.example", path, fields);
        (r, t0.elapsed())
    })
}

const STALL: &[(&str, &str)] = &[("x-test-fault", "stall")];

#[test]
fn a_fill_that_stalls_mid_body_releases_its_waiters_with_a_503_and_no_fetch_of_their_own() {
    // Issue 28 items 7 and 8: the leader's body stalls past `between_bytes_timeout`
    // (2 s): an origin failure, never an "edge cache error"; the request collapsed
    // behind it gets the same clean 503 at once instead of fetching in turn.
    let s = Arc::new(Stack::start_with(
        OriginConfig::ephemeral(),
        Some(&chaos_config("[collapse]\nmax_wait_ms = 10000\n")),
    ));
    let path = "/t/stall-release?cc=max-age%3D60&delay_ms=100";
    let t0 = Instant::now();
    let leader = later(&s, path, Duration::ZERO, STALL, t0);
    let waiter = later(&s, path, Duration::from_millis(300), &[], t0);
    let (lr, _) = leader.join().unwrap();
    let (wr, _) = waiter.join().unwrap();
    for (who, r) in [("leader", &lr), ("waiter", &wr)] {
        assert_eq!(r.status, 503, "{who}: {}", r.text());
        assert_eq!(r.text(), "origin unavailable\n", "{who}");
        assert_eq!(r.header("retry-after"), Some("5"), "{who}");
        assert_eq!(r.header("cache-control"), Some("no-store"), "{who}");
    }
    assert_eq!(
        s.origin.stats().total,
        1,
        "the waiter never asked the origin"
    );
    // The failure is not cached: the next request fills.
    let r = s.get("t.example", path, &[]);
    assert_eq!((r.status, r.x_cache()), (200, "MISS"));
}

#[test]
fn a_waiter_stops_waiting_for_a_stalled_fill_after_collapse_max_wait() {
    // Issue 28 item 8: `[collapse].max_wait_ms` bounds the platform's wait on the edge
    // too (`TransactionLookupBuilder::timeout`): the waiter is passed after 500 ms,
    // long before the leader's stall ends (2 s).
    let s = Arc::new(Stack::start_with(
        OriginConfig::ephemeral(),
        Some(&chaos_config("[collapse]\nmax_wait_ms = 500\n")),
    ));
    let path = "/t/stall-wait?cc=max-age%3D60&delay_ms=100";
    let t0 = Instant::now();
    let leader = later(&s, path, Duration::ZERO, STALL, t0);
    let waiter = later(&s, path, Duration::from_millis(300), &[], t0);
    let (passed, pass_at) = waiter.join().unwrap();
    let (failure, fail_at) = leader.join().unwrap();
    assert_eq!(
        (passed.status, passed.x_cache()),
        (200, "PASS"),
        "{}",
        passed.text()
    );
    assert_eq!(failure.status, 503);
    assert!(
        pass_at < fail_at,
        "the waiter was passed at max_wait ({pass_at:?}), not held until the leader failed ({fail_at:?})"
    );
    let log = s
        .edge
        .wait_for_log(LOG_WAIT, |l| l["pass_reason"] == "collapse-timeout")
        .expect("the pass is logged collapse-timeout");
    assert_eq!(log["cache"], "PASS");
}

#[test]
fn a_revalidation_whose_body_stalls_serves_stale_if_error() {
    // Issue 28 item 7: a body that breaks after the headers is an origin failure (RFC
    // 5861 §4): the stored copy within stale-if-error, not "edge cache error".
    let s = Stack::start_with(OriginConfig::ephemeral(), Some(&chaos_config("")));
    let path = "/t/stall-sie?cc=max-age%3D1%2C%20stale-if-error%3D60&etag=z1";
    let first = s.get("t.example", path, &[]);
    assert_eq!((first.status, first.x_cache()), (200, "MISS"));
    std::thread::sleep(Duration::from_millis(1100));
    // A new answer (203: not a 304) whose body stalls half way.
    let r = s.get(
        "t.example",
        path,
        &[("x-test-fault", "stall"), ("x-test-status", "203")],
    );
    assert_eq!((r.status, r.x_cache()), (200, "STALE"), "{}", r.text());
    assert_eq!(r.text(), first.text());
}

#[test]
fn an_xfetch_refresh_is_logged_ahead_and_every_other_client_gets_hit() {
    // Issue 28 items 2 and 3, with grace 0: 400 ms before expiry after a 300 ms fetch,
    // each request draws a refresh with probability 77% (beta 5).
    let cfg = "[edge]\nbackend = \"origin\"\n[[routes]]\nname = \"x\"\npath_prefix = \"/t/\"\n\
               ttl = \"0s\"\nkeep = \"1h\"\nvary_device = false\n\
               early_refresh = { policy = \"xfetch\", beta = 5.0 }\n";
    let s = Arc::new(Stack::start_with(OriginConfig::ephemeral(), Some(cfg)));
    let path = "/t/xfetch-log?cc=max-age%3D4&etag=x9&delay_ms=300";
    // The copy's age counts from this request (RFC 9111 §4.2.3): the window is anchored
    // on it, so a slow first fill on a loaded machine does not shift it.
    let sent = Instant::now();
    assert_eq!(s.get("t.example", path, &[]).x_cache(), "MISS");
    std::thread::sleep(
        (sent + Duration::from_millis(3600)).saturating_duration_since(Instant::now()),
    );
    let t0 = Instant::now();
    let all: Vec<_> = (0..8)
        .map(|_| later(&s, path, Duration::ZERO, &[], t0))
        .collect();
    for h in all {
        let (r, _) = h.join().unwrap();
        assert_eq!((r.status, r.x_cache()), (200, "HIT"));
    }
    let line = s
        .edge
        .wait_for_log(LOG_WAIT, |l| {
            l["refresh"]
                .as_str()
                .is_some_and(|r| r.starts_with("ahead:"))
        })
        .expect("the refresh is logged as refresh-ahead");
    assert_eq!(line["refresh"], "ahead:revalidated-304");
    assert!(
        refreshes(&s, "stale:").is_empty(),
        "never logged as a stale refresh"
    );
    assert_eq!(s.origin.stats().total, 2, "one fill, one refresh");
}
