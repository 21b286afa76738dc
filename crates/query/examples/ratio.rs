//! Speed against the `url`-crate normalizer of `benches/normalize.rs` that holds up on a
//! busy machine: per input, the minimum time per call over many short batches, the two
//! sides' batches interleaved.
//!
//! ```sh
//! cargo run --profile bench -p cachet-query --example ratio -- [BATCHES]
//! ```
//!
//! Inputs and peer are those of the criterion bench. A batch is 2,000 calls (≈ 0.1–2 ms),
//! shorter than a scheduler time slice, so the minimum over batches leaves out preemption
//! by other processes, which criterion's estimates on a loaded host do not. Prints ns per
//! call and the ratio for each input.

use std::hint::black_box;
use std::time::Instant;

use cachet_query::{Normalizer, QueryConfig};

/// Calls per timed batch.
const BATCH: u32 = 2_000;

/// The inputs of `benches/normalize.rs`.
const INPUTS: [(&str, &str); 4] = [
    (
        "5 params, 2 tracking",
        "utm_source=newsletter&page=2&utm_medium=email&q=rust+wasm&sort=new",
    ),
    (
        "already normal",
        "id=42&lang=ja&page=2&q=edge+cache&sort=new",
    ),
    (
        "20 params",
        "z=1&y=2&utm_source=x&x=3&w=4&v=5&fbclid=IwAR0abc&u=6&t=7&s=8&r=9&\
         gclid=Cj0K&q=10&p=11&o=12&n=13&_ga=2.1.2&m=14&l=15&k=16",
    ),
    (
        "20 params shuffled",
        "p=11&w=4&utm_source=x&m=14&z=1&fbclid=IwAR0abc&s=8&k=16&x=3&\
         gclid=Cj0K&o=12&t=7&y=2&_ga=2.1.2&r=9&l=15&v=5&n=13&u=6&q=10",
    ),
];

#[path = "../benches/peer/url.rs"]
mod url_peer;
use url_peer::UrlPeer;

/// Nanoseconds per call of one batch of `f`.
fn batch(mut f: impl FnMut() -> usize) -> f64 {
    let t = Instant::now();
    let mut sum = 0usize;
    for _ in 0..BATCH {
        sum = sum.wrapping_add(f());
    }
    black_box(sum);
    t.elapsed().as_secs_f64() * 1e9 / f64::from(BATCH)
}

fn main() {
    let batches: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let n = Normalizer::new(&QueryConfig::default()).expect("the default config compiles");
    let url = UrlPeer::default();
    // The two sides drop the same parameters of every input.
    for (label, query) in INPUTS {
        for param in query.split('&') {
            let name = param.split('=').next().unwrap_or_default();
            assert_eq!(url.removed(name), !n.keeps(name), "{label}: {name}");
        }
    }
    for (label, query) in INPUTS {
        let (mut ours, mut peer) = (f64::MAX, f64::MAX);
        for _ in 0..batches {
            ours = ours.min(batch(|| {
                n.normalize(black_box(query)).map_or(0, |q| q.len())
            }));
            peer = peer.min(batch(|| url.normalize(black_box(query)).len()));
        }
        println!(
            "{label}: cachet-query {ours:.1} ns, url {peer:.1} ns, {:.2}x (min of {batches} batches)",
            peer / ours
        );
    }
}
