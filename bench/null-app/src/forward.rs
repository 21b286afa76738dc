//! A do-nothing Compute app that forwards every request to the `origin` backend and sends
//! its answer back as it is, in a reusable sandbox: the floor of the edge benchmark's
//! `MISS` row (`scripts/bench-edge`).

fn main() {
    let _ = fastly::http::serve::Serve::new()
        .with_max_requests(1000)
        .run(|req: fastly::Request| req.send("origin"));
}
