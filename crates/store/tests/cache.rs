//! One worker's cache over an in-memory store: fills, lookups across workers, a 304 that
//! arrives after a ban, variants.

use std::time::{Duration, SystemTime};

use cachet_http::store::Origin;
use cachet_policy::{Plan, Policy, RequestView};
use cachet_refresh::{EarlyRefresh, Freshness, Timestamp};
use std::rc::Rc;

use cachet_http::fill::{self, Filled};
use cachet_store::cache::{Cache, Counts, Level, Wanted};
use cachet_store::tier::StoredObject;
use cachet_store::{MemoryStore, bans};

const CONFIG: &str = r#"
[origin]
url = "http://origin.example"

[[routes]]
name = "blog"
path_prefix = "/"
ttl = "60s"
keep = "1h"
"#;

const T0: u64 = 1_700_000_000_000;

/// The process's slot-hash key (every worker of one process shares it).
const KEY: [u64; 2] = [0x0123_4567, 0x89ab_cdef];

fn policy() -> Policy {
    Policy::from_toml(CONFIG).expect("test config is valid")
}

fn plan(p: &Policy) -> Plan<'_> {
    let view = RequestView {
        method: "GET",
        scheme: "https",
        host: Some("blog.example"),
        path_and_query: "/a",
        ..RequestView::default()
    };
    p.plan(&view, SystemTime::UNIX_EPOCH)
}

fn want(cache: &Cache, plan: &Plan<'_>, fields: &[(&str, &[u8])]) -> Wanted {
    Wanted {
        slot: cache.slot_of(&plan.cache_key),
        key: plan.cache_key.clone(),
        target: plan.target.to_string(),
        fields: fields
            .iter()
            .map(|(n, v)| ((*n).to_owned(), v.to_vec()))
            .collect(),
        early: EarlyRefresh::None,
    }
}

fn answer<'a>(status: u16, fields: &'a [(String, Vec<u8>)], body: &'a [u8]) -> Origin<'a> {
    Origin {
        status,
        fields,
        body,
        elapsed: Duration::from_millis(3),
    }
}

/// A fill's answer as the exchange applies it in Envoy: the engine's verdict
/// (`cachet_http::fill::filled`), the object put in both tiers. The stored object, or
/// `None` when nothing was stored.
fn fill(
    w: &mut Cache,
    sd: &MemoryStore,
    p: &Policy,
    plan: &Plan<'_>,
    req: &Wanted,
    answer: Origin<'_>,
    now: Timestamp,
) -> Option<Rc<StoredObject>> {
    match fill::filled(p, plan, &req.key, answer, now, false) {
        Ok(Filled::Stored { meta, body }) => {
            let (obj, stored) = w.put(
                sd,
                p,
                req,
                StoredObject::new(req.key.clone(), *meta, body),
                now,
            );
            stored.then_some(obj)
        }
        _ => None,
    }
}

fn fields(pairs: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
    pairs
        .iter()
        .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
        .collect()
}

#[test]
fn a_fill_is_found_by_this_worker_locally_and_by_another_in_the_shared_tier() {
    let (sd, p) = (MemoryStore::default(), policy());
    let plan = plan(&p);
    let mut w1 = Cache::new(1 << 20, 1 << 20, 1, KEY);
    let mut w2 = Cache::new(1 << 20, 1 << 20, 2, KEY);
    let mut req = want(&w1, &plan, &[]);
    let now = Timestamp::from_millis(T0);
    assert!(w1.find(&sd, &mut req, now).expect("keyable").is_none());
    let h = fields(&[("cache-control", "max-age=60"), ("etag", "\"v1\"")]);
    let stored = fill(&mut w1, &sd, &p, &plan, &req, answer(200, &h, b"body"), now);
    assert!(stored.is_some());
    let later = Timestamp::from_millis(T0 + 1_000);
    let here = w1
        .find(&sd, &mut req, later)
        .expect("keyable")
        .expect("stored");
    assert_eq!((here.level, here.fresh), (Level::Local, Freshness::Fresh));
    let there = w2
        .find(&sd, &mut req, later)
        .expect("keyable")
        .expect("stored");
    assert_eq!(
        (there.level, there.obj.body.as_slice()),
        (Level::Shared, &b"body"[..])
    );
    // The running totals behind the gauges are added on the tick, not per insert.
    assert_eq!(w1.take_counts().objects, None, "not yet reported");
    w1.report_served(&sd);
    let c = w1.take_counts();
    assert_eq!(c.objects, Some(1));
    assert!(c.bytes_stored.is_some_and(|b| b > 4), "{c:?}");
    assert_eq!(w1.take_counts(), Counts::default(), "taken once");
    w1.report_served(&sd);
    assert_eq!(w1.take_counts(), Counts::default(), "nothing new to add");
}

#[test]
fn the_lurkers_removals_reach_the_running_totals_on_the_next_tick() {
    let (sd, p) = (MemoryStore::default(), policy());
    let plan = plan(&p);
    let mut w = Cache::new(1 << 20, 1 << 20, 1, KEY);
    let mut req = want(&w, &plan, &[]);
    let now = Timestamp::from_millis(T0);
    assert!(w.find(&sd, &mut req, now).expect("keyable").is_none());
    let h = fields(&[("cache-control", "max-age=60")]);
    let stored = fill(&mut w, &sd, &p, &plan, &req, answer(200, &h, b"body"), now);
    assert!(stored.is_some());
    w.report_served(&sd);
    assert_eq!(w.take_counts().objects, Some(1));
    // Past TTL and keep (60 s + 1 h): the lurker removes the entry.
    let later = T0 + 2 * 3_600_000;
    let retire = cachet_store::cache::Retirement {
        pass_started_ms: later,
        fetch_bound_ms: 15_000,
        retention: Duration::from_secs(86_400),
    };
    assert_eq!(w.lurk(&sd, 0, 100, later, &retire), 0, "one full pass");
    let c = w.take_counts();
    assert_eq!(
        (c.lurker_evicted, c.objects),
        (1, Some(0)),
        "the pass counts the shards: {c:?}"
    );
    // The running totals (what the next tick reports) learn of the removal on that tick.
    w.report_served(&sd);
    let c = w.take_counts();
    assert_eq!((c.objects, c.bytes_stored), (Some(0), Some(0)), "{c:?}");
}

#[test]
fn a_304_that_arrives_after_a_ban_never_freshens_the_banned_copy() {
    let (sd, p) = (MemoryStore::default(), policy());
    cachet_store::init(&sd, bans::LOG_KEY);
    cachet_store::init(&sd, bans::EPOCH_KEY);
    let plan = plan(&p);
    let mut w = Cache::new(1 << 20, 1 << 20, 1, KEY);
    let req = want(&w, &plan, &[]);
    let h = fields(&[("cache-control", "max-age=60"), ("etag", "\"v1\"")]);
    let now = Timestamp::from_millis(T0);
    let Some(base) = fill(&mut w, &sd, &p, &plan, &req, answer(200, &h, b"x"), now) else {
        panic!("stored")
    };
    // Revalidation goes out; meanwhile a ban on the URL is accepted.
    bans::add_ban(&sd, "obj.http.x-url ~ ^/a", 100, T0 + 10).expect("ban");
    let later = Timestamp::from_millis(T0 + 70_000);
    let fresh_copy = |base: &StoredObject| {
        let mut m = base.h.meta.clone();
        m.times.stored_at = later;
        StoredObject::new(base.h.key.clone(), m, base.body.clone())
    };
    let (_, written) = w.freshen(&sd, &req, &base, fresh_copy(&base), later);
    assert!(!written, "a ban added meanwhile: not freshened");
    // Without a ban the same 304 freshens it, under a new version.
    let (sd, mut w) = (MemoryStore::default(), Cache::new(1 << 20, 1 << 20, 1, KEY));
    let Some(base) = fill(&mut w, &sd, &p, &plan, &req, answer(200, &h, b"x"), now) else {
        panic!("stored")
    };
    let (fresh, written) = w.freshen(&sd, &req, &base, fresh_copy(&base), later);
    assert!(written);
    assert!(fresh.h.version > base.h.version);
    assert_eq!(fresh.body, b"x");
    // Another fill stored a newer object meanwhile: the old copy's 304 is not applied.
    let Some(_newer) = fill(&mut w, &sd, &p, &plan, &req, answer(200, &h, b"y"), later) else {
        panic!("stored")
    };
    let (_, written) = w.freshen(&sd, &req, &fresh, fresh_copy(&fresh), later);
    assert!(!written, "a newer version is stored");
}

#[test]
fn an_origin_vary_stores_variants_behind_a_marker_and_selects_by_the_request() {
    let (sd, p) = (MemoryStore::default(), policy());
    let plan = plan(&p);
    let mut w = Cache::new(1 << 20, 1 << 20, 1, KEY);
    let now = Timestamp::from_millis(T0);
    let h = fields(&[("cache-control", "max-age=60"), ("vary", "Accept-Language")]);
    for (lang, body) in [("en", "hello"), ("fr", "bonjour")] {
        let mut req = want(&w, &plan, &[("accept-language", lang.as_bytes())]);
        assert!(w.find(&sd, &mut req, now).expect("keyable").is_none());
        let s = fill(
            &mut w,
            &sd,
            &p,
            &plan,
            &req,
            answer(200, &h, body.as_bytes()),
            now,
        );
        assert!(s.is_some(), "{lang}");
    }
    for (lang, body) in [("fr", "bonjour"), ("en", "hello")] {
        let mut req = want(&w, &plan, &[("accept-language", lang.as_bytes())]);
        let f = w
            .find(&sd, &mut req, now)
            .expect("keyable")
            .expect("variant stored");
        assert_eq!(f.obj.body, body.as_bytes());
        assert_ne!(req.key, plan.cache_key, "pointed at the variant's key");
    }
}

#[test]
fn a_fill_that_spans_a_ban_is_banned_when_it_arrives() {
    let (sd, p) = (MemoryStore::default(), policy());
    cachet_store::init(&sd, bans::LOG_KEY);
    cachet_store::init(&sd, bans::EPOCH_KEY);
    let plan = plan(&p);
    let mut w = Cache::new(1 << 20, 1 << 20, 1, KEY);
    let mut req = want(&w, &plan, &[]);
    // The fill is sent at T0; the ban is accepted at T0 + 40 ms; the answer arrives at
    // T0 + 100 ms. The object is stamped with T0, so the ban applies to it.
    bans::add_ban(&sd, "obj.http.x-url ~ ^/a", 100, T0 + 40).expect("ban");
    let h = fields(&[("cache-control", "max-age=60")]);
    let arrived = Timestamp::from_millis(T0 + 100);
    let slow = Origin {
        elapsed: Duration::from_millis(100),
        ..answer(200, &h, b"old")
    };
    let stored = fill(&mut w, &sd, &p, &plan, &req, slow, arrived);
    let Some(obj) = stored else { panic!("stored") };
    assert_eq!(obj.h.meta.times.stored_at, Timestamp::from_millis(T0));
    w.sync_bans(&sd);
    assert!(
        w.find(&sd, &mut req, arrived).expect("keyable").is_none(),
        "banned on arrival"
    );
}

#[test]
fn a_steady_purge_stream_keeps_the_log_bounded_while_a_day_long_object_stays() {
    use cachet_store::cache::{LURKER_KEY, Retirement};
    let (sd, p) = (MemoryStore::default(), policy());
    for k in [bans::LOG_KEY, bans::EPOCH_KEY, LURKER_KEY] {
        cachet_store::init(&sd, k);
    }
    let plan = plan(&p);
    let mut w = Cache::new(1 << 20, 1 << 20, 1, KEY);
    let mut req = want(&w, &plan, &[]);
    let h = fields(&[
        ("cache-control", "max-age=86400"),
        ("surrogate-key", "daylong"),
    ]);
    let t0 = Timestamp::from_millis(T0);
    assert!(fill(&mut w, &sd, &p, &plan, &req, answer(200, &h, b"day"), t0).is_some());
    let retire = Retirement {
        pass_started_ms: 0,
        fetch_bound_ms: 15_000,
        retention: Duration::from_secs(24 * 3600),
    };
    // 100,000 hard purges at 10 a second over 10,000 simulated seconds (2 h 47 min), in
    // batches of 100 with the lurker ticking between them; the log stays near
    // rate × (fetch bound + tick), far below its 10,000-entry bound, and no purge is
    // refused.
    let mut longest = 0;
    for s in 1..=1_000u64 {
        let now_ms = T0 + s * 10_000;
        let keys: Vec<String> = (0..100).map(|i| format!("p-{s}-{i}")).collect();
        let added = bans::purge_keys(&sd, &keys, 10_000, now_ms).expect("never refused");
        assert_eq!(added, 100);
        w.sync_bans(&sd);
        w.lurk_if_leased(&sd, 1, now_ms, 10_000, 100, retire);
        longest = longest.max(bans::read_log(&sd).0.entries.len());
    }
    assert!(longest <= 400, "log grew to {longest} entries");
    let end = Timestamp::from_millis(T0 + 10_000 * 1_000);
    let day = w
        .find(&sd, &mut req, end)
        .expect("keyable")
        .expect("still stored");
    assert_eq!(day.obj.body, b"day");
    // A purge of its own key still reaches it.
    bans::purge_keys(&sd, &["daylong".to_owned()], 10_000, end.as_millis() + 1).expect("purge");
    w.sync_bans(&sd);
    let later = Timestamp::from_millis(end.as_millis() + 2);
    assert!(w.find(&sd, &mut req, later).expect("keyable").is_none());
}

/// A `blog.example` plan for `path`.
fn plan_for<'p>(p: &'p Policy, path: &'p str) -> Plan<'p> {
    let view = RequestView {
        method: "GET",
        scheme: "https",
        host: Some("blog.example"),
        path_and_query: path,
        ..RequestView::default()
    };
    p.plan(&view, SystemTime::UNIX_EPOCH)
}

/// Looks `path` up in the shared tier alone; stores a 4 KiB answer on a miss. Whether it
/// was a hit.
fn request(sd: &MemoryStore, p: &Policy, w: &mut Cache, path: &str, now: Timestamp) -> bool {
    let plan = plan_for(p, path);
    let mut req = want(w, &plan, &[]);
    if w.find(sd, &mut req, now).expect("keyable").is_some() {
        return true;
    }
    let h = fields(&[
        ("cache-control", "max-age=3600"),
        ("content-type", "application/octet-stream"),
    ]);
    // Incompressible bytes, so each object costs its 4 KiB.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ path.len() as u64;
    let body: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect();
    fill(w, sd, p, &plan, &req, answer(200, &h, &body), now);
    false
}

#[test]
fn a_hot_set_keeps_its_hits_under_a_flood_of_one_time_urls() {
    let (sd, p) = (MemoryStore::default(), policy());
    cachet_store::init(&sd, bans::EPOCH_KEY);
    // 16 MiB of shared tier (16,384 slots), no in-VM tier: the shared tier's own policy.
    let mut w = Cache::new(16 << 20, 0, 1, KEY);
    let now = Timestamp::from_millis(T0);
    let hot: Vec<String> = (0..1_000).map(|i| format!("/hot/{i}")).collect();
    for path in hot.iter().chain(hot.iter()) {
        request(&sd, &p, &mut w, path, now);
    }
    w.report_served(&sd);
    // 10,000 one-time URLs (43 MB, 2.6 times the bound), each followed by a request for
    // the next hot object; the worker reports what it served every 100 requests (its
    // tick).
    let mut hits = 0;
    for i in 0..10_000 {
        request(&sd, &p, &mut w, &format!("/scan/{i}"), now);
        if request(&sd, &p, &mut w, &hot[i % hot.len()], now) {
            hits += 1;
        }
        if i % 50 == 49 {
            w.report_served(&sd);
        }
    }
    let ratio = f64::from(hits) / 10_000.0;
    eprintln!("hot-set hit ratio under the flood: {ratio:.3}");
    assert!(ratio >= 0.90, "hot-set hit ratio {ratio:.3}");
}

#[test]
fn a_lookup_reads_the_ban_epoch_at_most_once_per_staleness_bound_and_again_after_a_clock_step_back()
{
    let sd = MemoryStore::default();
    let mut w = Cache::new(1 << 20, 1 << 20, 1, KEY);
    let bound = Duration::from_millis(500);
    assert!(
        w.sync_bans_for_lookup(&sd, 10_000, bound),
        "the first lookup reads"
    );
    assert!(
        !w.sync_bans_for_lookup(&sd, 10_499, bound),
        "within the bound: no read"
    );
    assert!(
        w.sync_bans_for_lookup(&sd, 10_500, bound),
        "at the bound: read"
    );
    assert!(
        w.sync_bans_for_lookup(&sd, 9_000, bound),
        "a clock step back: read"
    );
    assert!(
        w.sync_bans_for_lookup(&sd, 9_001, Duration::ZERO),
        "zero: every lookup"
    );
}

/// A [`MemoryStore`] that counts its reads.
#[derive(Default)]
struct Counting {
    inner: MemoryStore,
    gets: std::cell::Cell<u32>,
}

impl cachet_store::SharedData for Counting {
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        self.gets.set(self.gets.get() + 1);
        self.inner.get(key)
    }
    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        self.inner.set(key, value, cas)
    }
}

#[test]
fn past_its_keep_a_copy_is_shown_as_a_miss_from_the_same_read_and_a_banned_one_is_not() {
    let (sd, p) = (Counting::default(), policy());
    let plan = plan(&p);
    let mut w = Cache::new(1 << 20, 1 << 20, 1, KEY);
    let mut req = want(&w, &plan, &[]);
    let now = Timestamp::from_millis(T0);
    let h = fields(&[("cache-control", "max-age=60"), ("etag", "\"v1\"")]);
    let stored = match fill::filled(&p, &plan, &req.key, answer(200, &h, b"body"), now, false) {
        Ok(Filled::Stored { meta, body }) => {
            let obj = StoredObject::new(req.key.clone(), *meta, body);
            w.put(&sd, &p, &req, obj, now).0
        }
        _ => panic!("stored"),
    };
    // Another worker, past TTL (60 s) and keep (1 h): nothing usable, the copy shown.
    let mut other = Cache::new(1 << 20, 1 << 20, 2, KEY);
    let past = Timestamp::from_millis(T0 + 3_661_000);
    let reads = sd.gets.get();
    let shown = other
        .find(&sd, &mut req, past)
        .expect("keyable")
        .expect("the newest copy is shown");
    let reads = sd.gets.get() - reads;
    assert_eq!(shown.fresh, Freshness::Miss);
    assert_eq!(shown.times.stored_at, stored.h.meta.times.stored_at);
    // The copy's read, the vary-marker step's none (the marker would have been in it):
    // the same reads as a lookup that finds nothing.
    let mut empty = want(&other, &plan, &[]);
    empty.key.push_str("-absent");
    let before = sd.gets.get();
    assert!(
        other
            .find(&sd, &mut empty, past)
            .expect("keyable")
            .is_none()
    );
    assert_eq!(reads, sd.gets.get() - before, "no read of its own");
    // A banned copy is of no use at all.
    bans::add_ban(&sd, "obj.http.x-url ~ ^/a", 100, T0 + 10).expect("ban");
    other.sync_bans(&sd);
    assert!(
        other.find(&sd, &mut req, past).expect("keyable").is_none(),
        "a banned copy is not shown"
    );
}
