//! Speed against woothee that holds up on a busy machine: the minimum time per UA over
//! many passes, per chunk of 1,024 UAs, the three classifiers' passes interleaved.
//!
//! ```sh
//! cargo run --profile bench -p cachet-device --example ratio -- [PASSES]
//! ```
//!
//! Corpus: as `benches/classify.rs` (uap-core `test_device.yaml` from the cargo registry,
//! else `tests/fixtures/device/ua-labelled.tsv`). Each chunk is timed on its own (≈ 0.1 ms for
//! cachet, ≈ 2 ms for woothee: shorter than a scheduler time slice), and the minimum over
//! passes of each chunk is summed, so preemption by other processes drops out even when
//! criterion's means do not. Passes of
//! `cachet/accurate`, `cachet/seed` and `woothee` alternate, so a slow phase of the machine
//! hits all three alike. Prints ns per UA and the ratios; exit status 1 when no corpus is
//! found.

use std::hint::black_box;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use cachet_device::{Classifier, Profile};

/// The uap-core device test file inside the cargo registry, if woothee's source is there.
fn uap_core_file() -> Option<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    let src = home.join("registry").join("src");
    std::fs::read_dir(src).ok()?.flatten().find_map(|index| {
        let p = index
            .path()
            .join("woothee-0.13.0/benches/uap-core/tests/test_device.yaml");
        p.is_file().then_some(p)
    })
}

/// The corpus of `benches/classify.rs`.
fn corpus() -> Vec<String> {
    if let Some(text) = uap_core_file().and_then(|p| std::fs::read_to_string(p).ok()) {
        let uas: Vec<String> = text
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("- user_agent_string:"))
            .map(|s| {
                let s = s.trim();
                s.strip_prefix('\'')
                    .and_then(|r| r.strip_suffix('\''))
                    .map_or_else(|| s.trim_matches('"').to_owned(), |r| r.replace("''", "'"))
            })
            .collect();
        if !uas.is_empty() {
            return uas;
        }
    }
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/device/ua-labelled.tsv"
    );
    std::fs::read_to_string(fixture)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('\t').map(|(_, ua)| ua.to_owned()))
        .collect()
}

/// UAs per timed chunk: ≈ 0.1 ms for cachet, ≈ 2 ms for woothee, both shorter than a
/// scheduler time slice.
const CHUNK: usize = 1024;

/// Nanoseconds of one pass of `f` over each chunk of `uas`, into `times` (one per chunk).
fn pass(uas: &[String], times: &mut [f64], mut f: impl FnMut(&str) -> usize) {
    for (chunk, time) in uas.chunks(CHUNK).zip(times) {
        let t = Instant::now();
        let mut sum = 0usize;
        for ua in chunk {
            sum = sum.wrapping_add(f(black_box(ua)));
        }
        black_box(sum);
        *time = time.min(t.elapsed().as_secs_f64() * 1e9);
    }
}

fn main() -> ExitCode {
    let passes: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let uas = corpus();
    if uas.is_empty() {
        eprintln!("ratio: no corpus (uap-core file or tests/fixtures/device/ua-labelled.tsv)");
        return ExitCode::FAILURE;
    }
    let accurate = Classifier::from_profile(Profile::Accurate);
    let seed = Classifier::from_profile(Profile::Seed);
    let woothee = woothee::parser::Parser::new();
    // Per chunk, the minimum over passes; their sum is the corpus time.
    let chunks = uas.len().div_ceil(CHUNK);
    let mut best = [
        vec![f64::MAX; chunks],
        vec![f64::MAX; chunks],
        vec![f64::MAX; chunks],
    ];
    for _ in 0..passes {
        let [a, s, w] = &mut best;
        pass(&uas, a, |ua| accurate.classify(ua.as_bytes()) as usize);
        pass(&uas, s, |ua| seed.classify(ua.as_bytes()) as usize);
        pass(&uas, w, |ua| {
            woothee.parse(ua).map_or(0, |r| r.category.len())
        });
    }
    #[allow(
        clippy::cast_precision_loss,
        reason = "a corpus has far fewer than 2^52 UAs"
    )]
    let n = uas.len() as f64;
    let per_ua = |t: &[f64]| t.iter().sum::<f64>() / n;
    let [acc, seed, woo] = [per_ua(&best[0]), per_ua(&best[1]), per_ua(&best[2])];
    println!(
        "{} UAs, min of {passes} passes: cachet/accurate {acc:.1} ns, cachet/seed {seed:.1} ns, \
         woothee {woo:.0} ns per UA; accurate {:.1}x, seed {:.1}x",
        uas.len(),
        woo / acc,
        woo / seed
    );
    ExitCode::SUCCESS
}
