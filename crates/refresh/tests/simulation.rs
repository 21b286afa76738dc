//! Shorter run of the req-shield load-test simulation, asserting the refresh-ahead targets.

#[path = "sim/mod.rs"]
mod sim;

use sim::{Params, Report, run, scenarios};

fn short() -> Params {
    Params {
        duration_ms: 80_000,
        ..Params::default()
    }
}

fn report(name: &str, reports: &[Report]) -> Report {
    reports
        .iter()
        .find(|r| r.name == name)
        .cloned()
        .expect(name)
}

#[test]
fn refresh_ahead_meets_targets() {
    let p = short();
    let reports: Vec<Report> = scenarios().iter().map(|s| run(&p, s)).collect();
    eprintln!("{}", sim::markdown(&reports));

    let none = report("none", &reports);
    let collapse = report("collapse-only", &reports);
    let swr = report("collapse + swr 5 s", &reports);
    let threshold = report("threshold 0.7", &reports);
    assert!(none.max_fetches_per_cycle > 1, "{none:?}");
    assert!(none.waited > 0);
    assert_eq!(collapse.max_fetches_per_cycle, 1);
    assert!(
        collapse.waited > 0,
        "collapsing alone still waits at every expiry"
    );
    assert!(collapse.fetches < none.fetches);
    assert_eq!(swr.waited, 0);
    assert!(swr.served_stale > 0);
    for r in reports
        .iter()
        .filter(|r| r.name.starts_with("threshold") || r.name.starts_with("xfetch"))
    {
        assert!(r.max_fetches_per_cycle <= 1, "{r:?}");
        assert_eq!(r.waited, 0, "{r:?}");
        assert_eq!(r.served_stale, 0, "{r:?}");
        assert_eq!((r.p50_ms, r.p99_ms, r.max_ms), (0, 0, 0), "{r:?}");
    }
    // threshold 0.7: one refresh per 0.7 * TTL + origin latency = 17 s cycle.
    assert!(
        (threshold.fetches_per_key_per_ttl - 20.0 / 17.0).abs() < 0.2,
        "{threshold:?}"
    );
}

#[test]
fn simulation_is_deterministic() {
    let p = Params {
        duration_ms: 40_000,
        ..Params::default()
    };
    for s in scenarios() {
        assert_eq!(run(&p, &s), run(&p, &s));
    }
    let svg = sim::svg(&p, &[run(&p, &scenarios()[0])]);
    assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
}
