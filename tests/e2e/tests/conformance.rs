//! The shared conformance cases (`tests/conformance/cases.toml`) against the Fastly edge app in Viceroy; the Envoy filter runs the same list.

use cachet_e2e::Stack;

#[test]
fn the_edge_app_passes_the_shared_conformance_cases() {
    let suite = cachet_conformance::Suite::builtin().expect("cases.toml parses");
    // The shipped configuration, with the suite's fill allowlist.
    let fields: Vec<String> = (cachet_conformance::SUITE_FILL_FIELDS.iter())
        .map(|f| format!("{f:?}"))
        .collect();
    let config = format!(
        "{}\n[origin]\nfill_fields = [{}]\n",
        include_str!("../../../edge-app/cachet.toml"),
        fields.join(", ")
    );
    let s = Stack::start_with(cachet_demo_origin::OriginConfig::default(), Some(&config));
    let target =
        cachet_conformance::Target::new(&format!("http://{}", s.edge.addr()), &s.origin.url(""));
    let report = cachet_conformance::run(&suite, &target);
    assert!(report.failures.is_empty(), "{report}");
}
