//! Per-request filter cost inside the wasmtime host: a hit from each tier, a miss (a new
//! URL each time: callout answered, stored in both tiers, answered; with and without gzip
//! storage, and a varied 20 KB stylesheet at gzip levels 6 and 1), and robots.txt
//! synthesis (the filter's floor: plan + local reply, no cache) as the peer.
//!
//! `cargo bench -p cachet-envoy-host-tests --bench hit` (builds the release wasm first, or
//! set `CACHET_ENVOY_WASM`). Each iteration is one whole stream: context create, request
//! headers, lookup, local reply, done/log/delete — every hostcall crossing included.
//! `envoy_filter_module/compile_cranelift` times what a wasmtime host pays once per module
//! before any worker starts: validating and compiling the wasm with cranelift (no on-disk
//! cache); `vm_start_instantiate_and_configure` is then the per-worker cost.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::hint::black_box;

use cachet_envoy_host_tests::{Host, Outcome, Response, Vm, filter_wasm, req};
use criterion::{Criterion, criterion_group, criterion_main};

const PATH: &str = "/blog/alice/entry/1";

fn config(local_bytes: u64) -> String {
    config_json(local_bytes).to_string()
}

fn config_json(local_bytes: u64) -> serde_json::Value {
    let text = include_str!("../../../edge-app/cachet.toml");
    let v: toml::Value = toml::from_str(text).expect("cachet.toml");
    let mut json = serde_json::to_value(v).expect("json");
    // Fills by callout (not the router default): the bench answers the callout itself.
    json["envoy"] =
        serde_json::json!({"cluster": "origin", "local_bytes": local_bytes, "fill": "callout"});
    json
}

/// The configuration with every route's `compress` and `gzip_level` set.
fn config_compress(compress: bool, gzip_level: u32) -> String {
    let mut json = config_json(4 * 1024 * 1024);
    for r in json["routes"].as_array_mut().expect("routes") {
        r["compress"] = serde_json::json!(compress);
        r["gzip_level"] = serde_json::json!(gzip_level);
    }
    json.to_string()
}

/// One miss on a URL never asked before: the callout answered with `resp`, the answer
/// stored and sent. Returns the body length sent.
fn miss(vm: &mut Vm, n: &mut u64, resp: &Response) -> usize {
    *n += 1;
    let path = format!("{PATH}?bench={n}");
    let (id, o) = vm
        .request(
            req("GET", "blog.example", &path, &[("accept-encoding", "gzip")]),
            None,
        )
        .expect("req");
    assert_eq!(o, Outcome::Paused, "a miss");
    let c = vm.callouts().remove(0);
    vm.answer(c.token, resp).expect("answer");
    let Outcome::Reply(r) = vm.poll(id) else {
        panic!("the miss is answered")
    };
    vm.finish(id).expect("finish");
    r.body.len()
}

/// A miss row: name, the routes' `compress` and `gzip_level`, and the origin's answer.
type MissRow = (&'static str, bool, u32, fn() -> Response);

/// The miss rows.
const MISS_ROWS: &[MissRow] = &[
    ("miss_gzip_stored", true, 6, origin),
    ("miss_identity_stored", false, 6, origin),
    ("miss_css_gzip_level_6", true, 6, css_origin),
    ("miss_css_gzip_level_1", true, 1, css_origin),
];

/// A varied stylesheet of about 20 KB (no phrase repeats verbatim, unlike [`origin`]'s
/// page, so the gzip level matters as it does for real CSS), cacheable for an hour.
fn css_origin() -> Response {
    let mut body = String::new();
    for i in 0..700u32 {
        let _ = writeln!(body, ".c{} {{ margin: {}px {}em }}", i % 97, i % 13, i % 7);
    }
    Response {
        status: 200,
        headers: vec![
            ("content-type".into(), b"text/css".to_vec()),
            ("cache-control".into(), b"public, max-age=3600".to_vec()),
        ],
        body: body.into_bytes(),
    }
}

fn origin() -> Response {
    Response {
        status: 200,
        headers: vec![
            ("content-type".into(), b"text/html; charset=utf-8".to_vec()),
            ("cache-control".into(), b"public, max-age=3600".to_vec()),
            ("vary".into(), b"User-Agent".to_vec()),
            ("surrogate-key".into(), b"blog-alice entry-alice-1".to_vec()),
        ],
        body: "<p>Lorem ipsum dolor sit amet.</p>\n"
            .repeat(300)
            .into_bytes(),
    }
}

fn primed(host: &Host, local_bytes: u64) -> Vm {
    primed_with(host, &config(local_bytes))
}

/// A VM configured with `cfg` whose object is stored.
fn primed_with(host: &Host, cfg: &str) -> Vm {
    let mut vm = host.vm(cfg).expect("vm");
    let (id, o) = vm
        .request(req("GET", "blog.example", PATH, &[]), None)
        .expect("req");
    assert_eq!(o, Outcome::Paused);
    let c = vm.callouts().remove(0);
    vm.answer(c.token, &origin()).expect("answer");
    vm.finish(id).expect("finish");
    vm
}

fn one(vm: &mut Vm, path: &str, headers: &[(&str, &str)]) -> usize {
    let (id, o) = vm
        .request(req("GET", "blog.example", path, headers), None)
        .expect("req");
    let Outcome::Reply(r) = o else {
        panic!("not answered: {o:?}")
    };
    vm.finish(id).expect("finish");
    r.body.len()
}

/// Host calls one request of this kind makes (printed beside the timings).
fn calls(vm: &mut Vm, name: &str, path: &str, headers: &[(&str, &str)]) {
    one(vm, path, headers);
    let before = vm.host_calls_by_name();
    one(vm, path, headers);
    eprintln!("{name}: {}", call_counts(&before, &vm.host_calls_by_name()));
}

/// "N host calls (name × n, …)" between two [`Vm::host_calls_by_name`] readings.
fn call_counts(before: &BTreeMap<&str, u64>, after: &BTreeMap<&str, u64>) -> String {
    let by_name: Vec<String> = (after.iter())
        .filter_map(|(name, &n)| {
            let d = n - before.get(name).copied().unwrap_or(0);
            (d > 0).then(|| format!("{} x{d}", name.trim_start_matches("proxy_")))
        })
        .collect();
    let total: u64 = after.values().sum::<u64>() - before.values().sum::<u64>();
    format!("{total} host calls ({})", by_name.join(", "))
}

/// Counting mode: with `CACHET_BENCH_COUNT=N` and `CACHET_BENCH_ROW` set to one of the hit
/// rows (`hit_local_tier_gzip_client`, `hit_local_tier_identity_client`,
/// `hit_shared_tier_gzip_client`, `peer_robots_txt_synth`) or of [`MISS_ROWS`], the bench
/// makes N requests of that row (each miss on a new URL) and exits without timing anything. Run under `perf stat -e instructions:u`
/// with N and with 0: the difference over N is the row's instructions per request, which,
/// unlike time, does not move with the machine's load (docs/performance.md, "Size").
fn count_mode(host: &Host) {
    let (Ok(n), Ok(row)) = (
        std::env::var("CACHET_BENCH_COUNT"),
        std::env::var("CACHET_BENCH_ROW"),
    ) else {
        return;
    };
    let n: u64 = n.parse().expect("CACHET_BENCH_COUNT: a number");
    if let Some(&(_, compress, level, body)) = MISS_ROWS.iter().find(|r| r.0 == row) {
        let resp = body();
        let mut vm = host
            .fresh()
            .vm(&config_compress(compress, level))
            .expect("vm");
        let mut k = 0;
        miss(&mut vm, &mut k, &resp);
        for _ in 0..n {
            black_box(miss(&mut vm, &mut k, &resp));
        }
        eprintln!("{row}: {n} requests");
        std::process::exit(0);
    }
    let gzip: &[(&str, &str)] = &[("accept-encoding", "gzip")];
    let (mut vm, path, headers) = match row.as_str() {
        "hit_local_tier_gzip_client" => (primed(&host.fresh(), 4 * 1024 * 1024), PATH, gzip),
        "hit_local_tier_identity_client" => (primed(&host.fresh(), 4 * 1024 * 1024), PATH, &[][..]),
        "hit_shared_tier_gzip_client" => (primed(&host.fresh(), 0), PATH, gzip),
        "peer_robots_txt_synth" => (
            primed(&host.fresh(), 4 * 1024 * 1024),
            "/robots.txt",
            &[][..],
        ),
        other => panic!("CACHET_BENCH_ROW: no row {other:?}"),
    };
    one(&mut vm, path, headers);
    for _ in 0..n {
        black_box(one(&mut vm, path, headers));
    }
    eprintln!("{row}: {n} requests");
    std::process::exit(0);
}

fn bench(c: &mut Criterion) {
    let wasm = filter_wasm().expect("filter wasm");
    let host = Host::new(&wasm).expect("compile");
    count_mode(&host);
    let mut g = c.benchmark_group("envoy_filter_request");
    let mut local = primed(&host.fresh(), 4 * 1024 * 1024);
    let gzip = [("accept-encoding", "gzip")];
    calls(&mut local, "hit_local_tier_gzip_client", PATH, &gzip);
    calls(&mut local, "hit_local_tier_identity_client", PATH, &[]);
    calls(&mut local, "peer_robots_txt_synth", "/robots.txt", &[]);
    g.bench_function("hit_local_tier_gzip_client", |b| {
        b.iter(|| black_box(one(&mut local, PATH, &[("accept-encoding", "gzip")])));
    });
    g.bench_function("hit_local_tier_identity_client", |b| {
        b.iter(|| black_box(one(&mut local, PATH, &[])));
    });
    // `[envoy].ban_staleness`: the hit skips the shared ban-epoch read.
    let mut json = config_json(4 * 1024 * 1024);
    json["envoy"]["ban_staleness"] = serde_json::json!("1s");
    let mut stale_ok = primed_with(&host.fresh(), &json.to_string());
    calls(
        &mut stale_ok,
        "hit_local_tier_gzip_client_ban_staleness_1s",
        PATH,
        &gzip,
    );
    g.bench_function("hit_local_tier_gzip_client_ban_staleness_1s", |b| {
        b.iter(|| black_box(one(&mut stale_ok, PATH, &[("accept-encoding", "gzip")])));
    });
    let mut shared = primed(&host.fresh(), 0);
    calls(&mut shared, "hit_shared_tier_gzip_client", PATH, &gzip);
    g.bench_function("hit_shared_tier_gzip_client", |b| {
        b.iter(|| black_box(one(&mut shared, PATH, &[("accept-encoding", "gzip")])));
    });
    // A worker's VM start: instantiate the compiled module, on_vm_start, on_configure
    // (the policy parsed and validated, the device classifier and ban indexes built).
    let cfg = config(4 * 1024 * 1024);
    let fresh = host.fresh();
    g.bench_function("vm_start_instantiate_and_configure", |b| {
        b.iter(|| black_box(fresh.vm(&cfg).expect("vm")));
    });
    g.bench_function("peer_robots_txt_synth", |b| {
        b.iter(|| black_box(one(&mut local, "/robots.txt", &[])));
    });
    for &(name, compress, level, body) in MISS_ROWS {
        let resp = &body();
        let mut vm = host
            .fresh()
            .vm(&config_compress(compress, level))
            .expect("vm");
        let mut n = 0;
        miss(&mut vm, &mut n, resp);
        let before = vm.host_calls_by_name();
        miss(&mut vm, &mut n, resp);
        eprintln!("{name}: {}", call_counts(&before, &vm.host_calls_by_name()));
        g.bench_function(name, |b| {
            b.iter(|| black_box(miss(&mut vm, &mut n, resp)));
        });
    }
    g.finish();
}

/// Module compile (cranelift, default settings, no cache): bytes in, `Module` out.
fn compile(c: &mut Criterion) {
    let wasm = filter_wasm().expect("filter wasm");
    let bytes = std::fs::read(&wasm).expect("read filter wasm");
    eprintln!("{}: {} bytes", wasm.display(), bytes.len());
    let engine = wasmtime::Engine::default();
    c.benchmark_group("envoy_filter_module")
        .bench_function("compile_cranelift", |b| {
            b.iter(|| black_box(wasmtime::Module::new(&engine, &bytes).expect("compile")));
        });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30);
    targets = bench
}
criterion_group! {
    name = module;
    config = Criterion::default().sample_size(10);
    targets = compile
}
criterion_main!(benches, module);
