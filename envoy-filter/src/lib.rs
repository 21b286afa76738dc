//! Cachet in Envoy: the proxy-wasm HTTP filter mapping each request onto the pure policy and a two-tier cache.
//!
//! One VM per Envoy worker thread runs this module. Each VM keeps an in-VM LRU tier in
//! front of the shared-data tier every worker sees (`store.rs`), replays the shared ban
//! log (`bans.rs`), collapses concurrent misses across workers with a CAS lock in shared
//! data (`locks.rs`) and parks the other requests until the object arrives (woken at once
//! in the leader's VM, on the root context's tick elsewhere). The root context's tick
//! also runs the ban lurker, background refreshes (refresh-ahead, stale-while-revalidate;
//! conditional on the stored validators, RFC 9111 §4.3) and the optional fleet ban feed.
//! Objects carry the metadata layout the edge app uses (`cachet_policy::object::Meta`).
//! Design and figures: `docs/envoy.md`.

mod admin;
mod host;
mod metrics;
mod vm;

use cachet_store::{bans, locks, tier as store};

#[cfg(test)]
mod tests;

use std::cell::Cell;
use std::rc::Rc;

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};

use crate::vm::{Http, Vm};

/// The module entry point (`_initialize`) the host calls once per VM.
mod entry {
    use super::{LogLevel, Rc, Root, RootContext, Vm};

    proxy_wasm::main! {{
        proxy_wasm::set_log_level(LogLevel::Info);
        proxy_wasm::set_root_context(|context_id| -> Box<dyn RootContext> {
            Box::new(Root { vm: Rc::new(Vm::new(context_id)) })
        });
    }}
}

/// The root context of one VM: configuration, tick work, background callouts.
struct Root {
    vm: Rc<Vm>,
}

impl Context for Root {
    fn on_http_call_response(&mut self, token: u32, nh: usize, body: usize, _nt: usize) {
        self.vm.on_root_callout(token, nh, body);
    }
}

impl RootContext for Root {
    fn on_vm_start(&mut self, _size: usize) -> bool {
        self.vm.init_shared();
        true
    }

    fn on_configure(&mut self, size: usize) -> bool {
        self.vm.configure(size)
    }

    fn on_tick(&mut self) {
        self.vm.tick();
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Http::new(Rc::clone(&self.vm), context_id)))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

impl Context for Http {
    fn on_http_call_response(&mut self, token: u32, nh: usize, body: usize, _nt: usize) {
        self.on_fetch_response(token, nh, body);
    }

    fn on_done(&mut self) -> bool {
        self.finish();
        true
    }
}

impl HttpContext for Http {
    fn on_http_request_headers(&mut self, _n: usize, end_of_stream: bool) -> Action {
        self.on_request_headers(end_of_stream)
    }

    fn on_http_request_body(&mut self, size: usize, end_of_stream: bool) -> Action {
        self.on_request_body(size, end_of_stream)
    }

    fn on_http_response_headers(&mut self, _n: usize, end_of_stream: bool) -> Action {
        self.on_response_headers(end_of_stream)
    }

    fn on_http_response_body(&mut self, size: usize, end_of_stream: bool) -> Action {
        self.on_response_body(size, end_of_stream)
    }
}

/// Whether a waiting request was resumed to the origin (pass) by the root context.
type Flag = Rc<Cell<bool>>;
