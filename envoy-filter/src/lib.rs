//! Cachet in Envoy: the proxy-wasm binding of `cachet-worker` (its contexts and its host port).
//!
//! One VM per Envoy worker thread runs this module. All of Cachet's work in Envoy (the
//! two-tier cache, collapsing across workers, refreshes, lurker, ban feed, admin API) is
//! `cachet_worker`'s, driven through its `host::Host` port; this crate binds that port to
//! the proxy-wasm hostcalls (`host::ProxyWasm`) and the SDK's contexts to
//! `cachet_worker::Vm` (root) and `cachet_worker::Http` (stream). Design and figures:
//! `docs/envoy.md`.

// Adapters never panic on input (DESIGN.md conventions, 3): on top of the workspace lint table.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod host;

use std::rc::Rc;

use cachet_worker::{Http, Vm};
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};

/// The module entry point (`_initialize`) the host calls once per VM.
mod entry {
    use super::{LogLevel, Rc, Root, RootContext, Vm};

    proxy_wasm::main! {{
        proxy_wasm::set_log_level(LogLevel::Info);
        proxy_wasm::set_root_context(|context_id| -> Box<dyn RootContext> {
            let vm = Vm::new(context_id, Rc::new(crate::host::ProxyWasm));
            Box::new(Root { vm: Rc::new(vm) })
        });
    }}
}

/// The SDK's action for the worker's.
fn action(a: cachet_worker::Action) -> Action {
    match a {
        cachet_worker::Action::Continue => Action::Continue,
        cachet_worker::Action::Pause => Action::Pause,
    }
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
        Some(Box::new(Stream(Http::new(Rc::clone(&self.vm), context_id))))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

/// One HTTP stream's context.
struct Stream(Http);

impl Context for Stream {
    fn on_http_call_response(&mut self, token: u32, nh: usize, body: usize, _nt: usize) {
        self.0.on_fetch_response(token, nh, body);
    }

    fn on_done(&mut self) -> bool {
        self.0.finish();
        true
    }
}

impl HttpContext for Stream {
    fn on_http_request_headers(&mut self, _n: usize, end_of_stream: bool) -> Action {
        action(self.0.on_request_headers(end_of_stream))
    }

    fn on_http_request_body(&mut self, size: usize, end_of_stream: bool) -> Action {
        action(self.0.on_request_body(size, end_of_stream))
    }

    fn on_http_response_headers(&mut self, _n: usize, end_of_stream: bool) -> Action {
        action(self.0.on_response_headers(end_of_stream))
    }

    fn on_http_response_body(&mut self, size: usize, end_of_stream: bool) -> Action {
        action(self.0.on_response_body(size, end_of_stream))
    }
}
