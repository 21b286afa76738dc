//! Criterion bench: per-UA classification time of `seed`, `accurate` and woothee's parser.
//!
//! Corpus: the uap-core `test_device.yaml` UAs shipped inside the `woothee` 0.13.0 crate
//! source (found under `$CARGO_HOME/registry/src/*/woothee-0.13.0/`), else our fixture
//! `tests/fixtures/device/ua-labelled.tsv`. Each iteration classifies the next UA of the
//! corpus (cycling), so criterion's time per iteration is the mean time per UA.
//! `baseline/touch-bytes` (XOR of every byte of the next UA) is the loop's floor;
//! `cachet/build-accurate` is the cost of compiling the accurate profile once. woothee runs
//! right after the two cachet groups so the ratio is taken over the shortest interval.

use std::hint::black_box;
use std::path::PathBuf;

use cachet_device::{Classifier, Profile};
use criterion::{Criterion, criterion_group, criterion_main};

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

/// Undoes YAML single-quote escaping (`''` → `'`).
fn unquote(s: &str) -> String {
    let s = s.trim();
    let inner = s
        .strip_prefix('\'')
        .and_then(|r| r.strip_suffix('\''))
        .map(|r| r.replace("''", "'"));
    inner.unwrap_or_else(|| s.trim_matches('"').to_owned())
}

/// (corpus name, UAs).
fn corpus() -> (String, Vec<String>) {
    if let Some(path) = uap_core_file()
        && let Ok(text) = std::fs::read_to_string(&path)
    {
        let uas: Vec<String> = text
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("- user_agent_string:"))
            .map(unquote)
            .collect();
        if !uas.is_empty() {
            return (
                format!("uap-core test_device.yaml ({})", path.display()),
                uas,
            );
        }
    }
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/device/ua-labelled.tsv"
    );
    let text = std::fs::read_to_string(fixture).unwrap_or_default();
    let uas = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('\t').map(|(_, ua)| ua.to_owned()))
        .collect();
    ("ua-labelled.tsv fixture".to_owned(), uas)
}

fn bench(c: &mut Criterion) {
    let (name, uas) = corpus();
    assert!(!uas.is_empty(), "empty corpus");
    let total: usize = uas.iter().map(String::len).sum();
    eprintln!(
        "corpus: {name}: {} UAs, mean {} bytes",
        uas.len(),
        total / uas.len()
    );

    for (label, profile) in [
        ("cachet/seed", Profile::Seed),
        ("cachet/accurate", Profile::Accurate),
    ] {
        let classifier = Classifier::from_profile(profile);
        let mut i = 0usize;
        c.bench_function(label, |b| {
            b.iter(|| {
                let ua = &uas[i];
                i = if i + 1 == uas.len() { 0 } else { i + 1 };
                classifier.classify(black_box(ua.as_bytes()))
            });
        });
    }

    // woothee right after the cachet groups: the ratio compares two measurements taken
    // seconds apart, which matters on a shared machine whose load drifts.
    let parser = woothee::parser::Parser::new();
    let mut i = 0usize;
    c.bench_function("woothee", |b| {
        b.iter(|| {
            let ua = &uas[i];
            i = if i + 1 == uas.len() { 0 } else { i + 1 };
            parser.parse(black_box(ua.as_str())).map(|r| r.category)
        });
    });

    let mut i = 0usize;
    c.bench_function("baseline/touch-bytes", |b| {
        b.iter(|| {
            let ua = &uas[i];
            i = if i + 1 == uas.len() { 0 } else { i + 1 };
            black_box(ua.as_bytes()).iter().fold(0u8, |a, &x| a ^ x)
        });
    });
    // Compile cost (matters where an instance is created per request, e.g. Fastly Compute).
    c.bench_function("cachet/build-accurate", |b| {
        b.iter(|| Classifier::from_profile(black_box(Profile::Accurate)));
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
