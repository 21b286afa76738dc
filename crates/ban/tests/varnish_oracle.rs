//! Offline check against Varnish 7.1's recorded verdicts (`scripts/varnish-diff --record`): every lookup agrees, ban acceptance differs only where documented.

use std::path::Path;

use serde_json::Value;

#[test]
fn agrees_with_recorded_varnish_verdicts() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/ban/varnish");
    let scenario = std::fs::read_to_string(dir.join("scenario.json")).unwrap();
    let observed: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("observed.json")).unwrap()).unwrap();
    let report = cachet_ban::evaluate_scenario(&scenario).unwrap();

    let bans = observed["bans"].as_array().unwrap();
    assert_eq!(bans.len(), report.bans.len());
    for (want, got) in bans.iter().zip(&report.bans) {
        let got_ok = matches!(got, cachet_ban::BanOutcome::Accepted { .. });
        if want["known"].is_null() {
            assert_eq!(want["ok"].as_bool(), Some(got_ok), "{want} vs {got:?}");
        }
    }

    let lookups = observed["lookups"].as_array().unwrap();
    assert!(lookups.len() >= 200);
    assert_eq!(lookups.len(), report.lookups.len());
    for (want, got) in lookups.iter().zip(&report.lookups) {
        assert_eq!(want["object"].as_str(), Some(got.object.as_str()));
        assert_eq!(
            want["verdict"].as_str(),
            Some(got.verdict),
            "{} after {}",
            got.object,
            want["expr"]
        );
    }
}
