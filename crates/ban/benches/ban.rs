//! Ban benchmarks: lookup with 100,000 live bans (indexed vs Varnish-style linear scan), adding 100,000 bans, lurker throughput, memory per ban.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use cachet_ban::{BanCache, BanId, BanList, Object, Request};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};

/// Counts live heap bytes so the memory per ban can be measured, not estimated.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

#[allow(
    unsafe_code,
    reason = "a GlobalAlloc impl is unsafe by definition; it only forwards to System"
)]
// SAFETY: forwards every call to `System` unchanged and only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size().cast_signed(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size().cast_signed(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size.cast_signed() - layout.size().cast_signed(),
            Ordering::Relaxed,
        );
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const N: u32 = 100_000;

/// The ban mix: exact `obj.http.x-url`, anchored `req.url` prefix, surrogate key, exact
/// `req.url` — a quarter each.
fn ban_texts(n: u32) -> Vec<String> {
    (0..n)
        .map(|i| match i % 4 {
            0 => format!("obj.http.x-url == /page/{i}"),
            1 => format!("req.url ~ ^/blog/user{i}/"),
            2 => format!(r#"obj.http.surrogate-key ~ "(^|\s)key{i}(\s|$)""#),
            _ => format!("req.url == /item/{i}"),
        })
        .collect()
}

fn build(texts: &[String]) -> BanList {
    let mut list = BanList::new();
    for (i, t) in (0u32..).zip(texts) {
        let _ = list.add(t, f64::from(i)).unwrap();
    }
    list
}

/// A ban shape for the memory report: name and text of ban number `i`.
type Shape = (&'static str, fn(u32) -> String);

fn report_memory() {
    let shapes: [Shape; 5] = [
        ("obj.http.x-url == /page/N", |i| {
            format!("obj.http.x-url == /page/{i}")
        }),
        ("req.url ~ ^/blog/userN/", |i| {
            format!("req.url ~ ^/blog/user{i}/")
        }),
        ("surrogate-key token", |i| {
            format!(r#"obj.http.surrogate-key ~ "(^|\s)key{i}(\s|$)""#)
        }),
        ("req.url == /item/N", |i| format!("req.url == /item/{i}")),
        ("regex (?i)^/x/N/.*\\.png$ (compiled)", |i| {
            format!(r#"req.url ~ "(?i)^/x/{i}/.*\.png$""#)
        }),
    ];
    for (name, make) in shapes {
        let n = if name.contains("compiled") { 10_000 } else { N };
        let texts: Vec<String> = (0..n).map(make).collect();
        let before = LIVE.load(Ordering::Relaxed);
        let list = build(&texts);
        let after = LIVE.load(Ordering::Relaxed);
        eprintln!(
            "memory: {name}: {} bytes/ban ({} bans)",
            (after - before) / isize::try_from(n).unwrap_or(1),
            list.len()
        );
        drop(list);
    }
    let texts = ban_texts(N);
    let before = LIVE.load(Ordering::Relaxed);
    let list = build(&texts);
    let after = LIVE.load(Ordering::Relaxed);
    eprintln!(
        "memory: bench mix: {} bytes/ban ({} bans, {} unindexed)",
        (after - before) / isize::try_from(N).unwrap_or(1),
        list.len(),
        list.unindexed()
    );
}

/// Wall time of each successive 20,000 adds while building a 100,000-ban list (Varnish
/// 7.1 on this machine: 4.5 s for the first 20,000, 8.0 s for the next).
fn report_add_chunks() {
    let texts = ban_texts(N);
    let mut list = BanList::new();
    let mut chunks = Vec::new();
    for (k, chunk) in texts.chunks(20_000).enumerate() {
        let start = std::time::Instant::now();
        for (j, t) in (0u32..).zip(chunk) {
            let at = f64::from(u32::try_from(k).unwrap_or(0) * 20_000 + j);
            let _ = list.add(t, at).unwrap();
        }
        chunks.push(format!("{:.0} ms", start.elapsed().as_secs_f64() * 1e3));
    }
    eprintln!("add: per 20,000 bans: {}", chunks.join(", "));
}

fn lookup(c: &mut Criterion) {
    report_memory();
    report_add_chunks();
    let list = build(&ban_texts(N));
    // An object older than every ban, matching none of them: the worst case for a scan.
    let obj = Object::new("/blog/bob/post/1", -1.0)
        .with_header("x-url", "/blog/bob/post/1")
        .with_surrogate_keys(["other1", "other2", "blog"]);
    let req = Request::new("/blog/bob/post/1").with_header("host", "blog.example");
    assert!(!list.check(&obj, &req, BanId::ZERO).is_banned());
    assert!(!list.check_linear(&obj, &req, BanId::ZERO).is_banned());
    let hit = Object::new("/blog/user99997/x", -1.0).with_header("x-url", "/blog/user99997/x");
    let hit_req = Request::new("/blog/user99997/x");
    assert!(list.check(&hit, &hit_req, BanId::ZERO).is_banned());

    let mut g = c.benchmark_group("lookup_100k_bans");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    g.bench_function("indexed_kept", |b| {
        b.iter(|| black_box(list.check(black_box(&obj), black_box(&req), BanId::ZERO)));
    });
    g.bench_function("indexed_banned", |b| {
        b.iter(|| black_box(list.check(black_box(&hit), black_box(&hit_req), BanId::ZERO)));
    });
    g.sample_size(10);
    g.bench_function("linear_kept", |b| {
        b.iter(|| black_box(list.check_linear(black_box(&obj), black_box(&req), BanId::ZERO)));
    });
    g.finish();
}

fn add(c: &mut Criterion) {
    let texts = ban_texts(N);
    let mut g = c.benchmark_group("add_100k_bans");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(5));
    g.bench_function("parse_and_index", |b| {
        b.iter_batched(
            || texts.clone(),
            |t| black_box(build(&t)),
            BatchSize::PerIteration,
        );
    });
    g.finish();
}

/// 10,000 objects, 1,000 lurker-friendly bans (none matching): one full lurker pass.
fn lurker(c: &mut Criterion) {
    let setup = || {
        let mut cache = BanCache::new().with_lurker_age_s(0.0);
        for i in 0..10_000 {
            let _ = cache.insert(
                Object::new(format!("/o/{i}"), 0.0)
                    .with_header("x-url", format!("/o/{i}"))
                    .with_surrogate_keys([format!("k{}", i % 500)]),
            );
        }
        for i in 0..1_000 {
            let _ = match i % 3 {
                0 => cache
                    .bans_mut()
                    .add(&format!("obj.http.x-url == /gone/{i}"), 1.0),
                1 => cache
                    .bans_mut()
                    .add(&format!("obj.http.x-url ~ ^/gone/{i}/"), 1.0),
                _ => cache
                    .bans_mut()
                    .add_surrogate_key_ban(&format!("gone{i}"), 1.0),
            }
            .unwrap();
        }
        cache
    };
    let mut g = c.benchmark_group("lurker");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    g.bench_function("pass_10k_objects_1k_bans", |b| {
        b.iter_batched(
            setup,
            |mut cache| {
                let p = cache.lurker().step(2.0, usize::MAX);
                assert!(p.pass_finished && p.tested == 10_000);
                black_box(p)
            },
            BatchSize::PerIteration,
        );
    });
    g.finish();
}

criterion_group!(benches, lookup, add, lurker);
criterion_main!(benches);
