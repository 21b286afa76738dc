//! Prints reset and scan figures; built for wasm32-wasip1 and run under `viceroy run`.
//!
//! The crate itself reads no clock; this measuring program does (`std::time::Instant`,
//! WASI `clock_time_get` under Viceroy/wasmtime). Run on the host or in Wasm:
//!
//! ```text
//! cargo build --release -p cachet-workspace --example wasm_figures --target wasm32-wasip1
//! viceroy run target/wasm32-wasip1/release/examples/wasm_figures.wasm
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use cachet_workspace::{ClearMode, Config, DEFAULT_CAPACITY_BYTES, WorkspacePair, first_nonzero};

const REQUEST_BYTES: [usize; 3] = [4 * 1024, 20 * 1024, 100 * 1024];
const ROUNDS: u32 = 2_000;
const SCAN_ROUNDS: u32 = 2_000;

fn pair(mode: ClearMode, verify_one_in: u32) -> Result<WorkspacePair, Box<dyn std::error::Error>> {
    Ok(WorkspacePair::new(Config {
        capacity_bytes: DEFAULT_CAPACITY_BYTES,
        mode,
        verify_one_in,
    })?)
}

fn dirty(p: &mut WorkspacePair, bytes: usize) -> Result<(), Box<dyn std::error::Error>> {
    for (ws, share) in [
        (&mut p.client, bytes / 2),
        (&mut p.backend, bytes - bytes / 2),
    ] {
        let s = ws.scratch();
        let small = share / 8;
        for _ in 0..4 {
            s.alloc(small, 8)?.fill(0xA5);
        }
        s.alloc(share - 4 * small, 1)?.fill(0x5A);
    }
    Ok(())
}

fn nanos(d: Duration, n: u32) -> f64 {
    d.as_secs_f64() * 1e9 / f64::from(n)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("| used | mode | bytes written by reset | ns per reset |");
    println!("|---|---|---|---|");
    for &bytes in &REQUEST_BYTES {
        for (name, mode) in [
            ("watermark", ClearMode::Watermark),
            ("full_clear", ClearMode::Full),
        ] {
            let mut p = pair(mode, 0)?;
            let mut total = Duration::ZERO;
            let mut written = 0;
            for _ in 0..ROUNDS {
                dirty(&mut p, bytes)?;
                let t0 = Instant::now();
                let r = p.reset(1)?;
                total += t0.elapsed();
                written = r.client.bytes_cleared + r.backend.bytes_cleared;
            }
            println!(
                "| {} KiB | {name} | {written} | {:.0} |",
                bytes / 1024,
                nanos(total, ROUNDS)
            );
        }
    }
    let zeros = vec![0u8; DEFAULT_CAPACITY_BYTES];
    let t0 = Instant::now();
    for _ in 0..SCAN_ROUNDS {
        black_box(first_nonzero(black_box(&zeros)));
    }
    let per = nanos(t0.elapsed(), SCAN_ROUNDS);
    let kib = DEFAULT_CAPACITY_BYTES / 1024;
    println!(
        "scan 256 KiB: {per:.0} ns = {:.1} GB/s ({kib} KiB per scan)",
        262_144.0 / per
    );
    let t0 = Instant::now();
    for _ in 0..SCAN_ROUNDS / 10 {
        black_box(black_box(&zeros).iter().position(|&x| x != 0));
    }
    let per = nanos(t0.elapsed(), SCAN_ROUNDS / 10);
    println!(
        "bytewise peer 256 KiB: {per:.0} ns = {:.1} GB/s",
        262_144.0 / per
    );
    Ok(())
}
