//! Runs the req-shield load-test simulation (5 min, 100 clients, 10 keys) and prints/plots results.
//!
//! `cargo run -p cachet-refresh --example simulate --release [-- --svg docs/refresh-sim.svg]`
//! prints a Markdown table (docs/refresh.md) and, with `--svg PATH`, writes the chart.

#[path = "../tests/sim/mod.rs"]
mod sim;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let svg_path = args
        .iter()
        .position(|a| a == "--svg")
        .and_then(|i| args.get(i + 1));
    let p = sim::Params::default();
    println!(
        "{} clients, {} keys, TTL {} ms, origin {} ms, think {} ms, {} ms simulated, warm-up {} ms, seed {:#x}\n",
        p.clients, p.keys, p.ttl_ms, p.origin_ms, p.think_ms, p.duration_ms, p.warmup_ms, p.seed
    );
    let reports: Vec<sim::Report> = sim::scenarios().iter().map(|s| sim::run(&p, s)).collect();
    print!("{}", sim::markdown(&reports));
    if let Some(path) = svg_path {
        std::fs::write(path, sim::svg(&p, &reports))?;
        println!("\nwrote {path}");
    }
    Ok(())
}
