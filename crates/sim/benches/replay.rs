//! Criterion benchmark of the simulator's engine (`cachet-sim`), on a generated sample log
//! (`cachet simulate --generate`, seed 1) and the demo configuration `edge-app/cachet.toml`:
//! parsing lines (combined and JSON), and replaying them on one node and over a fleet of
//! 3 edges and 2 shields. Throughput is in log lines.

use std::hint::black_box;

use cachet_policy::Policy;
use cachet_sim::fleet::{Balance, Fleet, FleetSettings};
use cachet_sim::generate::{self, GenFormat};
use cachet_sim::logfmt::{self, Format};
use cachet_sim::replay::{Engine, Settings};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// Lines of the benchmark's log.
const LINES: u64 = 20_000;

/// The shipped edge configuration.
const CONFIG: &str = include_str!("../../../edge-app/cachet.toml");

/// Memory of each simulated cache (nothing is evicted at this size).
const MEMORY: u64 = 512 << 20;

/// [`LINES`] lines of the sample log in `format`.
fn log(format: GenFormat) -> Vec<u8> {
    let mut out = Vec::new();
    generate::generate(
        &generate::Options {
            lines: LINES,
            seed: 1,
            start: 1_740_787_200,
            rate: 20.0,
            format,
            cache_control: true,
        },
        &mut out,
    )
    .expect("writing to memory");
    out
}

fn settings() -> Settings {
    Settings {
        memory: MEMORY,
        gzip_ratio: 0.36,
        object_overhead: 256,
        baseline_ttl: None,
        baseline_grace: None,
        default_host: "localhost".to_owned(),
    }
}

/// Replays every line of `log` into `engine`; the records replayed.
fn replay(engine: &mut Engine<'_>, log: &[u8]) -> u64 {
    let mut n = 0;
    for line in log.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        if let Ok(r) = logfmt::parse_line(Format::Combined, line) {
            engine.record(&r);
            n += 1;
        }
    }
    engine.finish();
    n
}

fn bench(c: &mut Criterion) {
    let policy = Policy::from_toml(CONFIG).expect("the demo configuration is valid");
    let combined = log(GenFormat::Combined);
    let json = log(GenFormat::Json);
    // Every generated line is a request: the replay below measures what it claims.
    assert_eq!(
        replay(&mut Engine::new(&policy, settings()), &combined),
        LINES
    );

    let mut parse = c.benchmark_group("parse");
    parse.throughput(Throughput::Elements(LINES));
    for (label, log, format) in [
        ("combined", &combined, Format::Combined),
        ("json", &json, Format::Json),
    ] {
        parse.bench_function(label, |b| {
            b.iter(|| {
                log.split(|&b| b == b'\n')
                    .filter(|l| logfmt::parse_line(format, black_box(l)).is_ok())
                    .count()
            });
        });
    }
    parse.finish();

    let mut group = c.benchmark_group("replay");
    group
        .throughput(Throughput::Elements(LINES))
        .sample_size(10);
    group.bench_function("one node", |b| {
        b.iter(|| replay(&mut Engine::new(&policy, settings()), black_box(&combined)));
    });
    group.bench_function("fleet of 3 edges, 2 shields", |b| {
        b.iter(|| {
            let mut engine = Engine::new(&policy, settings());
            let endpoints = engine.endpoints.len();
            engine.fleets.push(Fleet::new(FleetSettings {
                edges: 3,
                shields: 2,
                edge_memory: MEMORY,
                shield_memory: MEMORY,
                endpoints,
                balance: Balance::RoundRobin,
            }));
            replay(&mut engine, black_box(&combined))
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
