//! Large origin bodies end to end (issue 13): a chunked body over `[edge].max_object_bytes` streams to its client, is not stored, and Viceroy's memory stays bounded whatever its size.

use cachet_demo_origin::OriginConfig;
use cachet_e2e::Stack;

/// `[edge].max_object_bytes` of this test: 1 MiB.
const LIMIT: u64 = 1024 * 1024;

/// The chunked body: 48 MiB (the test client reads at most 64 MiB), so holding it whole
/// would show in Viceroy's peak memory.
const BODY: u64 = 48 * 1024 * 1024;

const CONFIG: &str = r#"
[edge]
backend = "origin"
max_object_bytes = 1048576

[[routes]]
name = "test"
path_prefix = "/t/"
vary_device = false
"#;

#[test]
fn a_chunked_body_over_the_limit_streams_unstored_with_bounded_memory() {
    let s = Stack::start_with(OriginConfig::ephemeral(), Some(CONFIG));
    let path = format!("/t/big?chunked={BODY}&cc=public,max-age%3D60");
    // Warm-up: a small object through the same path, so the baseline includes a fill.
    let small = s.get(
        "cdn.example",
        "/t/small?chunked=1000&cc=public,max-age%3D60",
        &[],
    );
    assert_eq!((small.status, small.body.len()), (200, 1000));
    let fetched = || -> u64 {
        let stats = s.origin.stats();
        let big = stats
            .by_path
            .iter()
            .filter(|(k, _)| k.starts_with("/t/big"));
        big.map(|(_, n)| n).sum()
    };
    let before = s.edge.peak_rss().expect("/proc");
    for (i, ae) in ["gzip", "identity"].into_iter().enumerate() {
        let r = s.get("cdn.example", &path, &[("accept-encoding", ae)]);
        assert_eq!(r.status, 200, "{ae}");
        assert_eq!(r.body.len() as u64, BODY, "{ae}: the whole body, streamed");
        assert!(r.body.iter().all(|&b| b == b'x'), "{ae}: the body as sent");
        assert_ne!(r.x_cache(), "HIT", "{ae}: over the limit, never stored");
        assert_eq!(fetched(), i as u64 + 1, "{ae}: fetched each time");
    }
    let grew = s.edge.peak_rss().expect("/proc").saturating_sub(before);
    eprintln!("Viceroy peak RSS grew by {grew} bytes for two {BODY}-byte bodies (limit {LIMIT})");
    assert!(
        grew < BODY / 3,
        "memory bounded by the limit, not the body: peak grew by {grew} bytes"
    );
    let line = s
        .edge
        .wait_for_log(std::time::Duration::from_secs(30), |l| {
            l["url"].as_str().is_some_and(|u| u.starts_with("/t/big"))
        })
        .expect("access log line");
    assert_eq!(line["pass_reason"], "too-large", "{line}");
}
