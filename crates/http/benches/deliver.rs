//! Criterion benchmark: the engine's work on one cache hit (`Client::read` + `deliver` +
//! `Delivery::head`), natively, to tell its cost from the rest of an adapter's hit path.
//!
//! `cargo bench -p cachet-http --bench deliver`

use std::hint::black_box;
use std::time::Duration;

use cachet_http::{CacheStatus, Client, deliver};
use cachet_policy::object::{Encoding, Meta};
use cachet_refresh::{EntryTimes, Timestamp};
use criterion::{Criterion, criterion_group, criterion_main};

/// A stored 4 KiB CSS object the edge gzipped, with four stored fields.
fn object() -> Meta {
    let stored = Timestamp::from_millis(1_700_000_000_000);
    let mut m = Meta::marker("design-css", stored, Duration::from_secs(86_400));
    m.pass = false;
    m.status = 200;
    m.encoding = Encoding::Gzip;
    m.compressed = true;
    m.vary = "Accept-Encoding".into();
    m.times = EntryTimes::new(stored, Duration::from_secs(86_400));
    m.headers = vec![
        ("Content-Type".into(), "text/css".into()),
        ("ETag".into(), "\"abc\"".into()),
        (
            "Last-Modified".into(),
            "Tue, 14 Nov 2023 20:00:00 GMT".into(),
        ),
        ("Cache-Control".into(), "max-age=86400".into()),
    ];
    m
}

fn bench(c: &mut Criterion) {
    let meta = object();
    let request: Vec<(String, Vec<u8>)> = [
        (":method", &b"GET"[..]),
        (":path", b"/css/alice.css"),
        ("accept-encoding", b"gzip, deflate, br"),
        ("user-agent", b"Mozilla/5.0 (Windows NT 10.0; Win64; x64)"),
        ("accept", b"text/css,*/*;q=0.1"),
    ]
    .iter()
    .map(|(n, v)| ((*n).to_owned(), v.to_vec()))
    .collect();
    let now = Timestamp::from_millis(1_700_000_010_000);
    let mut g = c.benchmark_group("hit");
    g.bench_function("client_deliver_head_gzip_client", |b| {
        b.iter(|| {
            let client = Client::read("GET", black_box(request.as_slice()));
            let d = deliver(black_box(&meta), &client, now, CacheStatus::Hit);
            black_box(d.head(4096).headers.len())
        });
    });
    g.bench_function("date_format", |b| {
        b.iter(|| cachet_http::date::format(black_box(now)));
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
