//! The fill's compression (`cachet_policy::object::gzip_at`, what every miss of a
//! compressible body pays before it is stored): the demo origin's 4 KiB design CSS
//! (`blog_css("alice")`, the body `scripts/bench-load`'s miss rows fetch) at levels 1, 6
//! (the default) and 9, with the CPU caches kept warm and with 4 MiB of other memory
//! touched between calls (as a worker serving other streams does). docs/envoy.md
//! ("The module's floors") sets this against the plain router's whole cost of a miss.
//!
//! `cargo bench -p cachet-policy --bench gzip`

use std::hint::black_box;
use std::time::{Duration, Instant};

use cachet_policy::object::gzip_at;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let body = cachet_demo_origin::blog_css("alice").into_bytes();
    let mut g = c.benchmark_group("fill_gzip_4k_css");
    g.measurement_time(Duration::from_secs(3));
    for level in [1u32, 6, 9] {
        let size = gzip_at(&body, level).map_or(0, |z| z.len());
        eprintln!("level {level}: {} bytes -> {size} bytes", body.len());
        g.bench_with_input(BenchmarkId::new("warm", level), &level, |b, &level| {
            b.iter(|| gzip_at(black_box(&body), level));
        });
        let mut other = vec![0u8; 4 << 20];
        g.bench_with_input(
            BenchmarkId::new("caches_evicted", level),
            &level,
            |b, &level| {
                b.iter_custom(|iters| {
                    let mut spent = Duration::ZERO;
                    for i in 0..iters {
                        for byte in other.iter_mut().step_by(64) {
                            *byte = byte.wrapping_add(i.to_le_bytes()[0]);
                        }
                        let t = Instant::now();
                        black_box(gzip_at(black_box(&body), level).map(|z| z.len()).ok());
                        spent += t.elapsed();
                    }
                    spent
                });
            },
        );
        black_box(&other);
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
