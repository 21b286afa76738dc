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

/// The incompressible gzip body: 24 MiB of `cachet_demo_origin::noise`, so the compressed
/// answer is over the limit too.
const NOISE: usize = 24 * 1024 * 1024;

#[test]
fn an_oversized_gzip_answer_is_inflated_as_it_streams_to_an_identity_client() {
    use std::io::Read;
    let s = Stack::start_with(OriginConfig::ephemeral(), Some(CONFIG));
    let path = format!("/t/noise?chunked={NOISE}&gzip=1&cc=public,max-age%3D60");
    let small = s.get(
        "cdn.example",
        "/t/small?chunked=1000&gzip=1&cc=public,max-age%3D60",
        &[("accept-encoding", "identity")],
    );
    assert_eq!(small.body, cachet_demo_origin::noise(1000), "a stored one");
    let expected = cachet_demo_origin::noise(NOISE);
    let before = s.edge.peak_rss().expect("/proc");
    let plain = s.get("cdn.example", &path, &[("accept-encoding", "identity")]);
    assert_eq!(plain.status, 200);
    assert_ne!(plain.x_cache(), "HIT", "over the limit, never stored");
    assert_eq!(
        plain.header("content-encoding"),
        None,
        "inflated for identity"
    );
    assert_eq!(plain.body.len(), NOISE, "the whole inflated body");
    assert!(
        plain.body == expected,
        "the inflated bytes are the origin's"
    );
    let grew = s.edge.peak_rss().expect("/proc").saturating_sub(before);
    eprintln!("Viceroy peak RSS grew by {grew} bytes inflating a {NOISE}-byte body");
    assert!(
        grew < NOISE as u64 / 3,
        "inflated as it streams, never held whole: peak grew by {grew} bytes"
    );
    let zipped = s.get("cdn.example", &path, &[("accept-encoding", "gzip")]);
    assert_eq!(zipped.header("content-encoding"), Some("gzip"));
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(zipped.body.as_slice())
        .read_to_end(&mut out)
        .expect("gzip as the origin sent it");
    assert!(out == expected, "a gzip client gets the origin's gzip");
}

#[test]
fn a_gzip_answer_corrupt_mid_stream_ends_abandoned_and_logged() {
    let s = Stack::start_with(OriginConfig::ephemeral(), Some(CONFIG));
    let path = format!("/t/bad?chunked={NOISE}&gzip=2&cc=public,max-age%3D60");
    let agent = cachet_e2e::agent();
    let r = cachet_e2e::send(
        &agent,
        s.edge.addr(),
        "GET",
        "cdn.example",
        &path,
        &[("accept-encoding", "identity")],
        Vec::new(),
    );
    // The client sees an incomplete body (a transport error or a short read), never a
    // complete-looking wrong one.
    if let Ok(r) = &r {
        assert!(
            r.body.len() < NOISE,
            "cut short, got {} bytes",
            r.body.len()
        );
        assert!(
            r.body.as_slice() == &cachet_demo_origin::noise(NOISE)[..r.body.len()],
            "what was sent is the origin's bytes"
        );
    }
    let line = s
        .edge
        .wait_for_log(std::time::Duration::from_secs(30), |l| {
            l["url"].as_str().is_some_and(|u| u.starts_with("/t/bad"))
        })
        .expect("access log line");
    let error = line["error"].as_str().unwrap_or_default();
    assert!(error.contains("inflating"), "{line}");
    // The edge keeps serving.
    let ok = s.get("cdn.example", "/t/after?cc=public,max-age%3D60", &[]);
    assert_eq!(ok.status, 200);
}

/// The multi-GiB body: 2 GiB, read by the client as it streams (never held whole).
const HUGE: u64 = 2 * 1024 * 1024 * 1024;

#[test]
fn a_multi_gib_chunked_body_streams_unstored_with_bounded_viceroy_memory() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let s = Stack::start_with(OriginConfig::ephemeral(), Some(CONFIG));
    let rss = || s.edge.proc_status_bytes("VmRSS").expect("/proc");
    let before = rss();
    let url = format!(
        "http://{}/t/huge?chunked={HUGE}&cc=public,max-age%3D60",
        s.edge.addr()
    );
    let done = AtomicBool::new(false);
    let (fetched, peak) = std::thread::scope(|scope| {
        // Viceroy's resident memory sampled while the body streams (its VmHWM is set by
        // the wasm compile at start-up, above what streaming needs).
        let sampler = scope.spawn(|| {
            let mut peak = 0;
            while !done.load(Ordering::Relaxed) {
                peak = peak.max(rss());
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            peak
        });
        let fetched = (|| {
            let mut resp = ureq::get(&url)
                .header("host", "cdn.example")
                .header("accept-encoding", "gzip")
                .call()
                .map_err(|e| e.to_string())?;
            let x_cache = resp.headers().get("x-cache").cloned();
            let n = std::io::copy(&mut resp.body_mut().as_reader(), &mut std::io::sink())
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((resp.status(), x_cache, n))
        })();
        done.store(true, Ordering::Relaxed);
        (fetched, sampler.join().expect("sampler"))
    });
    let (status, x_cache, n) = fetched.expect("the whole response");
    assert_eq!(status, 200);
    assert_eq!(x_cache.as_ref().and_then(|v| v.to_str().ok()), Some("PASS"));
    assert_eq!(n, HUGE, "every byte, streamed");
    let grew = peak.saturating_sub(before);
    eprintln!("Viceroy RSS {before} before, peak {peak} (+{grew}) while streaming {HUGE} bytes");
    assert!(
        grew < 64 * 1024 * 1024,
        "memory bounded by the limit, not the body: RSS grew by {grew} bytes"
    );
}
