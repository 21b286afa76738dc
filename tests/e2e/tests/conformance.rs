//! The shared conformance cases (`tests/conformance/cases.toml`) against the Fastly edge app in Viceroy; the Envoy filter runs the same list.

use cachet_e2e::Stack;

#[test]
fn the_edge_app_passes_the_shared_conformance_cases() {
    let suite = cachet_conformance::Suite::builtin().expect("cases.toml parses");
    // The shipped configuration, with the suite's routes and fill allowlist.
    let config =
        cachet_conformance::suite_config_toml(include_str!("../../../edge-app/cachet.toml"))
            .expect("the shipped configuration is TOML");
    let s = Stack::start_with(cachet_demo_origin::OriginConfig::default(), Some(&config));
    let target =
        cachet_conformance::Target::new(&format!("http://{}", s.edge.addr()), &s.origin.url(""));
    let report = cachet_conformance::run(&suite, &target);
    assert!(report.failures.is_empty(), "{report}");
}

#[test]
fn raw_origin_framing_joined_lines_and_interim_answers() {
    // Issue 30, the checks Envoy runs too (`cachet_conformance::raw`): chunks with a
    // Content-Length, two Cache-Control lines, 103 and 102 before a cacheable answer
    // (Compute never sees a backend's 1xx: docs/http.md).
    let origin = cachet_conformance::raw::framing_origin().expect("raw origin");
    let edge = cachet_e2e::Edge::start(origin.addr, None);
    if let Err(why) = cachet_conformance::raw::framing_and_interim_cases(
        &format!("http://{}", edge.addr()),
        &origin,
        false,
    ) {
        panic!("{why}\n{}", edge.output());
    }
}
