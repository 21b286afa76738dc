//! A do-nothing Compute app serving requests in a reusable sandbox
//! (`fastly::http::serve::Serve`, as the edge app): the floor of the edge benchmark
//! (`scripts/bench-edge`) for an app that reuses its instance.

mod common;

fn main() {
    let _ = fastly::http::serve::Serve::new()
        .with_max_requests(1000)
        .run(|req: fastly::Request| common::answer(&req));
}
