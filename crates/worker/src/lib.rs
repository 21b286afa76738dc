//! One cache worker of a proxy (one Envoy worker thread's VM): streams, request collapsing across workers, background work, over the [`host::Host`] port.
//!
//! Everything the Envoy filter does between its proxy-wasm callbacks lives here, free of
//! the SDK: the request path ([`Http`]: plan, lookup in the two tiers, collapsing onto one
//! origin fetch, revalidation, delivery, admin calls, passes and invalidation) and the
//! root context's work ([`Vm`]: configuration, the tick, background refreshes, the ban
//! lurker, the ban feed and the fleet's etcd log). Every cache decision inside is
//! `cachet-http`'s and every storage protocol `cachet-store`'s; this crate sequences them
//! across callbacks and workers. The filter (`envoy-filter`) only binds the proxy-wasm ABI
//! to [`host::Host`] and its contexts to [`Vm`] and [`Http`].
//!
//! Each VM keeps an in-VM LRU tier in front of the shared-data tier every worker sees,
//! replays the shared ban log, collapses concurrent misses across workers with a CAS lock
//! in shared data and parks the other requests until the object arrives (woken at once in
//! the leader's VM, on the root context's tick elsewhere). Design and figures:
//! `docs/envoy.md`.
// The worker never panics on input (DESIGN.md conventions, 3); the workspace lint table
// (inherited) cannot add these for one crate.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod host;
pub mod metrics;

pub mod admin;
mod plugin;
mod vm;

use cachet_store::{bans, locks, tier as store};

#[cfg(test)]
mod tests;

pub use host::Action;
pub use vm::{Http, Vm, WorkerError};
