//! Criterion bench: watermark reset vs full clear (the peer), sampled verification, scan speed.

use std::hint::black_box;
use std::time::{Duration, Instant};

use cachet_workspace::{ClearMode, Config, DEFAULT_CAPACITY_BYTES, WorkspacePair, first_nonzero};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

/// Bytes a request uses across both halves (split evenly between client and backend).
const REQUEST_BYTES: [usize; 3] = [4 * 1024, 20 * 1024, 100 * 1024];

/// Fastly's 1-in-20,000 sampling rate.
const SAMPLE_ONE_IN: u32 = 20_000;

fn pair(mode: ClearMode, verify_one_in: u32) -> WorkspacePair {
    WorkspacePair::new(Config {
        capacity_bytes: DEFAULT_CAPACITY_BYTES,
        mode,
        verify_one_in,
    })
    .expect("256 KiB is a valid capacity")
}

/// One request's work: allocate and write `bytes` spread over both halves, in a few
/// header-sized pieces and one body-sized piece.
fn dirty(p: &mut WorkspacePair, bytes: usize) {
    for (ws, share) in [
        (&mut p.client, bytes / 2),
        (&mut p.backend, bytes - bytes / 2),
    ] {
        let s = ws.scratch();
        let small = share / 8;
        for _ in 0..4 {
            s.alloc(small, 8).expect("fits").fill(0xA5);
        }
        let rest = share - 4 * small;
        s.alloc(rest, 1).expect("fits").fill(0x5A);
    }
}

/// xorshift32: the adapter's random draw, reproduced deterministically for the bench.
fn next_draw(state: &mut u32) -> u32 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    *state = x;
    x
}

fn reset_time(c: &mut Criterion) {
    let mut group = c.benchmark_group("reset_512KiB");
    for &bytes in &REQUEST_BYTES {
        for (name, mode) in [
            ("watermark", ClearMode::Watermark),
            ("full_clear", ClearMode::Full),
        ] {
            let mut ws_pair = pair(mode, 0);
            dirty(&mut ws_pair, bytes);
            let written = ws_pair.reset(1).expect("no violation");
            eprintln!(
                "bytes written by reset: {name:>10} @ {:>3} KiB used: {} B",
                bytes / 1024,
                written.client.bytes_cleared + written.backend.bytes_cleared
            );
            group.bench_function(
                BenchmarkId::new(name, format!("{}KiB", bytes / 1024)),
                |b| {
                    b.iter_custom(|iters| {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            dirty(&mut ws_pair, bytes);
                            let start = Instant::now();
                            let outcome = ws_pair.reset(1);
                            total += start.elapsed();
                            black_box(outcome.is_ok());
                        }
                        total
                    });
                },
            );
        }
    }
    group.finish();
}

fn sampled_verification(c: &mut Criterion) {
    let mut group = c.benchmark_group("request_with_sampling");
    for &bytes in &REQUEST_BYTES {
        for (name, one_in) in [("no_verify", 0), ("verify_1_in_20000", SAMPLE_ONE_IN)] {
            let mut ws_pair = pair(ClearMode::Watermark, one_in);
            let mut state = 0x9E37_79B9_u32;
            group.bench_function(
                BenchmarkId::new(name, format!("{}KiB", bytes / 1024)),
                |b| {
                    b.iter(|| {
                        dirty(&mut ws_pair, bytes);
                        black_box(ws_pair.reset(next_draw(&mut state)).is_ok())
                    });
                },
            );
            let (cl, _) = ws_pair.stats();
            eprintln!(
                "{name} @ {} KiB: {} verifications in {} resets",
                bytes / 1024,
                cl.verifications,
                cl.resets
            );
        }
    }
    group.finish();
}

/// Cost of one verified reset vs an unverified one (both watermark mode), so the
/// amortized 1-in-20,000 overhead can be computed from a difference that is not lost in
/// noise: (verified - unverified) / 20,000 per request.
fn verified_reset(c: &mut Criterion) {
    let mut group = c.benchmark_group("reset_verified_vs_not");
    for &bytes in &REQUEST_BYTES {
        for (name, one_in) in [("unverified", 0), ("verified", 1)] {
            let mut ws_pair = pair(ClearMode::Watermark, one_in);
            group.bench_function(
                BenchmarkId::new(name, format!("{}KiB", bytes / 1024)),
                |b| {
                    b.iter_custom(|iters| {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            dirty(&mut ws_pair, bytes);
                            let start = Instant::now();
                            let outcome = ws_pair.reset(0);
                            total += start.elapsed();
                            black_box(outcome.is_ok());
                        }
                        total
                    });
                },
            );
        }
    }
    group.finish();
}

/// The scan behind verification vs a byte-at-a-time loop (the peer), on 256 KiB of zeros
/// (the worst case: nothing found, everything read).
fn scan(c: &mut Criterion) {
    let zeros = vec![0u8; DEFAULT_CAPACITY_BYTES];
    let mut group = c.benchmark_group("verify_scan_256KiB");
    group.throughput(Throughput::Bytes(zeros.len() as u64));
    group.bench_function("first_nonzero_u64_blocks", |b| {
        b.iter(|| first_nonzero(black_box(&zeros)));
    });
    group.bench_function("bytewise_position", |b| {
        b.iter(|| black_box(&zeros).iter().position(|&x| x != 0));
    });
    let mut ws_pair = pair(ClearMode::Watermark, 1);
    group.bench_function("workspace_verify", |b| {
        b.iter(|| black_box(ws_pair.client.verify().is_ok()));
    });
    black_box(ws_pair.reset(0).is_ok());
    group.finish();
}

criterion_group!(
    benches,
    reset_time,
    sampled_verification,
    verified_reset,
    scan
);
criterion_main!(benches);
