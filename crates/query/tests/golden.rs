//! Golden cases for the default configuration: `tests/fixtures/query/cases.tsv` (`BLESS=1` rewrites it).

use cachet_query::{Normalizer, QueryConfig};

/// The fixture, relative to this crate.
const CASES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/query/cases.tsv"
);

/// What the default normalizer makes of one input: a target when it starts with `/`,
/// else a query; errors as `ERROR: <message>`.
fn run(n: &Normalizer, input: &str) -> String {
    let out = if input.starts_with('/') {
        n.normalize_target(input)
    } else {
        n.normalize(input)
    };
    match out {
        Ok(s) => s.into_owned(),
        Err(e) => format!("ERROR: {e}"),
    }
}

#[test]
fn golden_cases() {
    let n = Normalizer::new(&QueryConfig::default()).unwrap();
    let text = std::fs::read_to_string(CASES).unwrap();
    let bless = std::env::var_os("BLESS").is_some_and(|v| v == "1");
    let mut blessed = String::with_capacity(text.len());
    let mut failures = Vec::new();
    let mut cases = 0;
    for (i, line) in text.lines().enumerate() {
        if line.is_empty() || line.starts_with('#') {
            blessed.push_str(line);
            blessed.push('\n');
            continue;
        }
        let (input, expected) = line.split_once('\t').unwrap_or((line, ""));
        let got = run(&n, input);
        cases += 1;
        if got != expected {
            failures.push(format!(
                "line {}: {input:?}\n  expected {expected:?}\n  got      {got:?}",
                i + 1
            ));
        }
        blessed.push_str(input);
        blessed.push('\t');
        blessed.push_str(&got);
        blessed.push('\n');
    }
    assert!(cases >= 40, "only {cases} cases in {CASES}");
    if bless {
        std::fs::write(CASES, blessed).unwrap();
        return;
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} golden cases differ (rerun with BLESS=1 to accept):\n{}",
        failures.len(),
        failures.join("\n")
    );
}
