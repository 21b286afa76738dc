//! The edge's per-request ban step, stored bytes → verdict: the binary index (head read, ranged cold reads) at 0 to 100,000 bans newer than the object, against the JSON log it replaces.

use std::borrow::Cow;
use std::hint::black_box;
use std::time::Duration;

use cachet_ban::Request;
use cachet_policy::banindex::{BanIndex, ColdBytes, IndexError, encode, encode_with};
use cachet_policy::banlog::{BanLog, purge_expr};
use cachet_policy::object::Meta;
use cachet_refresh::Timestamp;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

/// Bans all newer than the objects checked: a third exact URLs, a third URL prefixes,
/// a third surrogate-key purges (the shapes a blog platform's ban stream has), plus
/// `unanchored` regexes no index answers.
fn log_of(n: usize, unanchored: usize) -> BanLog {
    let mut log = BanLog::default();
    for i in 0..n {
        let expr = match i % 3 {
            0 => format!("req.url == /gone/{i}"),
            1 => format!("obj.http.x-url ~ ^/blog/user{i}/"),
            _ => purge_expr(&format!("blog-{i}")).unwrap_or_default(),
        };
        let _ = log.add_ban(&expr, 10_000 + i as u64, usize::MAX);
    }
    for i in 0..unanchored {
        let _ = log.add_ban(
            &format!(r"req.url ~ /{i}/[0-9]+\.png$"),
            20_000_000 + i as u64,
            usize::MAX,
        );
    }
    log
}

fn object(url: &str, keys: &[&str]) -> Meta {
    let mut m = Meta::marker("r", Timestamp::from_millis(5_000), Duration::from_secs(60));
    m.pass = false;
    m.status = 200;
    m.url = url.into();
    m.surrogate_keys = keys.iter().map(|k| (*k).to_owned()).collect();
    m.tag = "cachet-obj-00112233aabbccdd".into();
    m
}

/// What the edge's core-cache copy does: every ranged read copies out of the host.
struct Ranged<'a>(&'a [u8]);

impl ColdBytes for Ranged<'_> {
    fn read(&self, at: usize, len: usize) -> Result<Cow<'_, [u8]>, IndexError> {
        self.0.read(at, len).map(|b| Cow::Owned(b.into_owned()))
    }
}

/// One request's ban step on the edge: the head copied in (one ranged read), opened,
/// the object checked with ranged cold reads.
fn edge_step(bytes: &[u8], head_len: usize, obj: &Meta, req: &Request) -> Option<u64> {
    let head = bytes[..head_len].to_vec();
    let ix = BanIndex::from_head(&head).ok()?;
    ix.check(&Ranged(bytes), obj, req).ok().flatten()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("ban_step");
    g.sample_size(30);
    g.measurement_time(Duration::from_secs(3));
    let clean = object("/blog/alice/entry/1", &["blog-alice", "css"]);
    let clean_req = Request::new("/blog/alice/entry/1");
    let banned = object("/gone/300", &["blog-x"]);
    let banned_req = Request::new("/gone/300");
    for &n in &[0usize, 1_000, 10_000, 100_000] {
        let log = log_of(n, 0);
        let bytes = encode(&log);
        let head_len = BanIndex::from_bytes(&bytes).map_or(0, |ix| ix.header().head_len);
        eprintln!(
            "{n} bans: index {} bytes, head {head_len} bytes",
            bytes.len()
        );
        g.bench_with_input(BenchmarkId::new("index_clean_hit", n), &n, |b, _| {
            b.iter(|| edge_step(black_box(&bytes), head_len, &clean, &clean_req));
        });
        if n >= 1_000 {
            assert_eq!(
                edge_step(&bytes, head_len, &banned, &banned_req),
                Some(301),
                "the exact-URL ban is found"
            );
            g.bench_with_input(BenchmarkId::new("index_banned", n), &n, |b, _| {
                b.iter(|| edge_step(black_box(&bytes), head_len, &banned, &banned_req));
            });
        }
        if n <= 10_000 {
            let json = log.to_json();
            g.bench_with_input(BenchmarkId::new("json_log_clean_hit", n), &n, |b, _| {
                b.iter(|| {
                    BanLog::try_from_json(black_box(&json))
                        .ok()
                        .and_then(|l| l.check(&clean, &clean_req))
                });
            });
        }
    }
    // Bans no index answers: each one newer than the object is parsed and compiled.
    for &u in &[10usize, 100] {
        let bytes = encode(&log_of(10_000, u));
        let head_len = BanIndex::from_bytes(&bytes).map_or(0, |ix| ix.header().head_len);
        g.bench_with_input(
            BenchmarkId::new("index_clean_hit_10000_plus_unanchored", u),
            &u,
            |b, _| b.iter(|| edge_step(black_box(&bytes), head_len, &clean, &clean_req)),
        );
    }
    g.finish();
    let mut g = c.benchmark_group("ban_index_build");
    g.sample_size(10);
    for &n in &[10_000usize, 100_000] {
        let log = log_of(n, 0);
        g.bench_with_input(BenchmarkId::new("encode", n), &n, |b, _| {
            b.iter(|| encode(black_box(&log)));
        });
        // The admin call: one more ban on top of the current index.
        let previous = encode(&log);
        let mut next = log.clone();
        let _ = next.add_ban("req.url == /new", 50_000_000, usize::MAX);
        g.bench_with_input(BenchmarkId::new("encode_with_previous", n), &n, |b, _| {
            b.iter(|| encode_with(black_box(&next), Some(&previous)));
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
