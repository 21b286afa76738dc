//! Criterion benchmark: `Normalizer::normalize` against a `url::form_urlencoded` baseline.

use std::hint::black_box;

use cachet_query::{Normalizer, QueryConfig};
use criterion::{Criterion, criterion_group, criterion_main};

/// Five parameters, two of them tracking (`utm_source`, `utm_medium`).
const FIVE_WITH_TRACKING: &str =
    "utm_source=newsletter&page=2&utm_medium=email&q=rust+wasm&sort=new";

/// Already normal under the default configuration.
const ALREADY_NORMAL: &str = "id=42&lang=ja&page=2&q=edge+cache&sort=new";

/// Twenty parameters in reverse name order, four of them tracking.
const TWENTY: &str = "z=1&y=2&utm_source=x&x=3&w=4&v=5&fbclid=IwAR0abc&u=6&t=7&s=8&r=9&\
                      gclid=Cj0K&q=10&p=11&o=12&n=13&_ga=2.1.2&m=14&l=15&k=16";

/// The same twenty parameters shuffled (a fixed permutation): the kept ones must really
/// be sorted, where reverse order is undone by reversing.
const TWENTY_SHUFFLED: &str = "p=11&w=4&utm_source=x&m=14&z=1&fbclid=IwAR0abc&s=8&k=16&x=3&\
                               gclid=Cj0K&o=12&t=7&y=2&_ga=2.1.2&r=9&l=15&v=5&n=13&u=6&q=10";

#[path = "peer/url.rs"]
mod url_peer;
use url_peer::UrlPeer;

fn bench(c: &mut Criterion) {
    let n = Normalizer::new(&QueryConfig::default()).expect("default config compiles");
    let url = UrlPeer::default();
    for (label, query) in [
        ("5 params, 2 tracking", FIVE_WITH_TRACKING),
        ("already normal", ALREADY_NORMAL),
        ("20 params", TWENTY),
        ("20 params shuffled", TWENTY_SHUFFLED),
    ] {
        let mut group = c.benchmark_group(label);
        group.bench_function("cachet-query", |b| {
            b.iter(|| n.normalize(black_box(query)).map(|q| q.len()));
        });
        group.bench_function("url form_urlencoded", |b| {
            b.iter(|| url.normalize(black_box(query)).len());
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
