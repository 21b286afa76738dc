//! The admin API (`/.cachet/*`): [`api`] (`cachet_store::admin`) on proxy-wasm shared
//! data, its effects counted in the filter's metrics.

pub use cachet_store::admin as api;

use cachet_http::Reply;
use cachet_policy::Policy;

pub use api::{
    AdminRequest, Effects, Fleet, FleetWrite, MAX_BODY_BYTES, config_call, fleet_answer,
    handle_fleet,
};

use crate::host::Port;
use crate::metrics::Metrics;

/// Handles one admin call at `now_ms` ([`api::handle`]).
pub fn handle(
    port: &Port,
    policy: &Policy,
    m: &Metrics,
    req: &AdminRequest,
    body: &[u8],
    now_ms: u64,
) -> Reply {
    let (reply, fx) = api::handle(port, policy, req, body, now_ms);
    count(port, m, fx);
    reply
}

/// Counts an admin call's effects in the metrics.
pub fn count(port: &Port, m: &Metrics, fx: Effects) {
    if fx.denied {
        Metrics::inc(port, m.admin_denied);
    }
    Metrics::add(port, m.bans_added, fx.bans_added);
    Metrics::add(port, m.purges, fx.purges);
}
