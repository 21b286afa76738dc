//! Cachet's storage protocols over a compare-and-swap key-value store: the shared object
//! tier and the in-VM tier in front of it ([`tier`]), one worker's lookups, fills and
//! lurker over both ([`cache`]), the collapsing locks ([`locks`]) and the shared ban log
//! with each worker's replica ([`bans`]), and the admin API over that log ([`admin`]).
//! Storage only: the flow is `cachet_http::exchange`'s, the plug-in set-up the hosts'.
//!
//! In Envoy the store is proxy-wasm shared data (one per Envoy process, seen by every
//! worker's VM); the filter implements [`SharedData`] over its host calls and nothing
//! else. Pure otherwise: no clock (times are parameters), no I/O but through the trait,
//! so every protocol here runs under `cargo test` with an in-memory store
//! ([`MemoryStore`]), interleavings included.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

pub mod admin;
pub mod bans;
pub mod cache;
/// The fleet ban log's etcd protocol (`cachet_policy::etcd`), which [`bans`] and the
/// worker's admin API speak in fleet mode.
pub use cachet_policy::etcd;
pub mod locks;
pub mod poller;
pub mod tier;

/// A key-value store with per-key compare-and-swap, as proxy-wasm shared data is
/// (`proxy_get_shared_data` / `proxy_set_shared_data`).
pub trait SharedData {
    /// The value of `key` and its CAS token; `(None, None)` when absent.
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>);
    /// Sets `key`; with `Some(cas)` (not 0) the write fails, returning `false`, when the
    /// value changed since `cas` was read. `None` or `Some(0)` writes unconditionally.
    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool;
}

/// Creates `key` with an empty value when it does not exist yet, so every later write can
/// be a real compare-and-swap (proxy-wasm treats a CAS of 0 as "no check", which would let
/// two writers both "create" a missing key). Call once, before any request.
pub fn init(sd: &dyn SharedData, key: &str) {
    if sd.get(key).1.is_none() {
        sd.set(key, &[], None);
    }
}

/// An in-memory [`SharedData`] with Envoy's CAS rules, safe to share across threads
/// (`Send + Sync`): tests and simulations, and the dynamic module's in-process ban log
/// (one per filter configuration, written by every Envoy worker thread).
#[derive(Debug, Default)]
pub struct MemoryStore {
    map: Mutex<HashMap<String, (Vec<u8>, u32)>>,
}

impl SharedData for MemoryStore {
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        match self
            .map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
        {
            Some((v, cas)) => (Some(v.clone()), Some(*cas)),
            None => (None, None),
        }
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let current = map.get(key).map(|(_, c)| *c);
        // As proxy-wasm-cpp-host's `SharedData::set`: CAS 0 or none is unconditional, a
        // token must match the stored one, and a missing key is created whatever the token.
        if let (Some(want), Some(held)) = (cas, current)
            && want != 0
            && want != held
        {
            return false;
        }
        let next = current.unwrap_or(0).wrapping_add(1).max(1);
        map.insert(key.to_owned(), (value.to_vec(), next));
        true
    }
}
