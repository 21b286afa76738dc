//! Golden scenarios: `tests/fixtures/ban/*.scenario.json` against `*.expected.json` (`BLESS=1` rewrites them).

use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/ban")
}

#[test]
fn golden_scenarios() {
    let bless = std::env::var_os("BLESS").is_some_and(|v| v == "1");
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".scenario.json"))
        .collect();
    inputs.sort();
    assert!(inputs.len() >= 5, "fixtures missing: {inputs:?}");
    let mut failures = Vec::new();
    for input in inputs {
        let text = std::fs::read_to_string(&input).unwrap();
        let got = cachet_ban::evaluate_scenario(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", input.display()))
            .to_json_pretty();
        let expected_path = PathBuf::from(
            input
                .to_string_lossy()
                .replace(".scenario.json", ".expected.json"),
        );
        if bless {
            std::fs::write(&expected_path, &got).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if got != expected {
            failures.push(format!("{}:\n{got}", expected_path.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "golden mismatch (BLESS=1 to accept):\n{}",
        failures.join("\n")
    );
}
