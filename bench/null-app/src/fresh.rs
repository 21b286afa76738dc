//! A do-nothing Compute app, one fresh instance per request: the floor of the edge
//! benchmark (`scripts/bench-edge`).

mod common;

fn main() {
    let req = fastly::Request::from_client();
    common::answer(&req).send_to_client();
}
