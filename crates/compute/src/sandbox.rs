//! One Fastly Compute instance serving many requests (reusable sandboxes): what it keeps
//! from one request to the next, and when it builds its policy again.
//!
//! Fastly's SDK can hand one instance request after request (`fastly::http::serve::Serve`,
//! SDK 0.12+, Viceroy 0.22's `next_request`): "if an instance has expensive
//! initialization, reusable instances can provide an efficiency improvement (and a cost
//! improvement!)". Cachet's expensive initialization is its [`Policy`] (TOML parse, routes,
//! globs, device tables) and its two workspaces; a [`Sandbox`] builds the policy once and
//! keeps it while the instance lives, bounded as Fastly recommends by request count,
//! lifetime, idle time and memory (`[edge].sandbox_*`, [`Bounds`]).
//!
//! A configuration change reaches a running instance within `[edge].config_check_interval`:
//! before a request, [`Sandbox::refresh`] re-reads the config store's `config` entry when
//! that long has passed since its last read, and builds the policy again only when the
//! text changed. Per-request state never lives here: the workspace pair is reset to its
//! high watermark after every request (`scratch`), every other value is the request's own.
//!
//! The policy of the configuration built into the wasm is built once per *wasm*, not per
//! instance, when the wasm is pre-initialized at build time ([`prebuild`], called from
//! the edge app's `wizer.initialize` export; `scripts/lib.sh` `build_edge` runs Wizer):
//! an instance with no config-store entry then starts with its policy already in its
//! memory image. Without pre-initialization the first instance builds it at start, as
//! before.

use std::cell::OnceCell;
use std::time::Duration;

use cachet_policy::inforce::{self, InForce};
use cachet_policy::{Policy, PolicyError};

use crate::host::Host;
use crate::origin::Upstream;
use crate::{CONFIG_STORE, CONFIGURED_FROM, load_policy_text};

/// How long an instance serves, from `[edge]` (the defaults when the configuration does
/// not load): the options of `fastly::http::serve::Serve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Most requests per instance (`Serve::with_max_requests`); 1: no reuse.
    pub max_requests: u64,
    /// Longest life of an instance (`Serve::with_max_lifetime`).
    pub max_lifetime: Duration,
    /// Longest wait for the next request (`Serve::with_timeout`).
    pub idle_timeout: Duration,
    /// Heap above which the instance stops after a request, MiB (`Serve::with_max_memory`).
    pub max_memory_mib: u32,
}

/// The policy of one instance and how it came to be in force, and its origin tier
/// (shield or origin backends, registered once), rebuilt when the config store's entry
/// changes. `K`: the platform's backend handle.
pub struct Sandbox<K> {
    builtin: &'static str,
    /// The config store's `config` text the policy was built from (`None`: absent).
    text: Option<String>,
    policy: Loaded,
    /// When the config store was last read (the host's monotonic clock).
    read_at: Duration,
    /// Policies this instance built itself (the prebuilt built-in one is not counted).
    builds: u64,
    /// Requests begun in this instance.
    served: u64,
    /// The origin tier and backends of the policy in force, made on first use.
    origin: OnceCell<Upstream<K>>,
}

impl<K> std::fmt::Debug for Sandbox<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("builds", &self.builds)
            .field("served", &self.served)
            .finish_non_exhaustive()
    }
}

/// The policy in force in one instance: its own, or the built-in configuration's
/// [`prebuild`] made once for the wasm.
enum Loaded {
    Own(Box<Result<InForce<Policy>, PolicyError>>),
    Prebuilt(&'static InForce<Policy>),
}

impl Loaded {
    /// 1 when the instance built this policy itself, 0 for the prebuilt one.
    fn built(&self) -> u64 {
        u64::from(matches!(self, Self::Own(_)))
    }

    fn get(&self) -> Result<&InForce<Policy>, &PolicyError> {
        match self {
            Self::Own(p) => p.as_ref().as_ref(),
            Self::Prebuilt(p) => Ok(p),
        }
    }
}

thread_local! {
    /// The built-in configuration's text and its policy, once built ([`prebuild`]).
    static PREBUILT: OnceCell<(&'static str, &'static InForce<Policy>)> =
        const { OnceCell::new() };
}

/// Builds the policy of `builtin` (the configuration built into the wasm) and keeps it
/// for every instance started from this memory image: called from the edge app's
/// `wizer.initialize` export, so that a pre-initialized wasm (Wizer) carries the built
/// policy in its data segments and an instance without a config-store entry builds
/// nothing. Returns whether it loads; a second call is a no-op. The policy lives as long
/// as the instance (it is leaked once, never freed).
pub fn prebuild(builtin: &'static str) -> bool {
    prebuilt(builtin).is_some()
}

/// The policy [`prebuild`] made for `builtin` (making it now when it was not), `None`
/// when `builtin` does not load or another text was prebuilt.
fn prebuilt(builtin: &'static str) -> Option<&'static InForce<Policy>> {
    PREBUILT.with(|cell| {
        if cell.get().is_none() {
            let chosen =
                inforce::choose(CONFIGURED_FROM, None, None, || Policy::from_toml(builtin)).ok()?;
            let _ = cell.set((builtin, Box::leak(Box::new(chosen))));
        }
        cell.get()
            .filter(|(text, _)| std::ptr::eq(*text, builtin) || *text == builtin)
            .map(|(_, p)| *p)
    })
}

/// The policy for the config store's `text` (`None`: no entry): the prebuilt built-in
/// one when there is no entry, else [`load_policy_text`]'s.
fn load<H: Host>(host: &H, text: Option<&str>, builtin: &'static str) -> Loaded {
    match text.map_or_else(|| prebuilt(builtin), |_| None) {
        Some(p) => Loaded::Prebuilt(p),
        None => Loaded::Own(Box::new(load_policy_text(host, text, builtin))),
    }
}

impl<K: Clone> Sandbox<K> {
    /// Starts an instance: reads the config store and builds the policy
    /// ([`crate::load_policy`]'s rules, `builtin` the configuration built into the wasm).
    pub fn start<H: Host<Backend = K>>(host: &H, builtin: &'static str) -> Self {
        let text = host.config(CONFIG_STORE, "config");
        let policy = load(host, text.as_deref(), builtin);
        Self {
            builtin,
            text,
            builds: policy.built(),
            policy,
            read_at: host.monotonic(),
            served: 0,
            origin: OnceCell::new(),
        }
    }

    /// Begins a request: [`Self::refresh`], then counts it. Returns which request of this
    /// instance it is (1 for the first), for the access record (`instance_request`).
    pub fn begin<H: Host<Backend = K>>(&mut self, host: &H) -> u64 {
        self.refresh(host);
        self.served += 1;
        self.served
    }

    /// Before a request: when `[edge].config_check_interval` has passed since the last
    /// read, reads the config store's `config` entry again and, only when its text
    /// changed, builds the policy again. Returns whether it did.
    pub fn refresh<H: Host<Backend = K>>(&mut self, host: &H) -> bool {
        let interval = self.policy.get().map_or_else(
            |_| cachet_policy::EdgeConfig::default().config_check_interval.0,
            |f| f.policy.config().edge.config_check_interval.0,
        );
        let now = host.monotonic();
        if now.saturating_sub(self.read_at) < interval {
            return false;
        }
        self.read_at = now;
        let text = host.config(CONFIG_STORE, "config");
        if text == self.text {
            return false;
        }
        self.policy = load(host, text.as_deref(), self.builtin);
        self.text = text;
        self.origin = OnceCell::new();
        self.builds += self.policy.built();
        true
    }

    /// The policy in force (or why the built-in configuration does not load either).
    ///
    /// # Errors
    /// The built-in configuration's issues.
    pub fn policy(&self) -> Result<&InForce<Policy>, &PolicyError> {
        self.policy.get()
    }

    /// The origin tier of the policy in force (`[edge].shield`, the dynamic backend of
    /// `[origin]`), made once per policy: a reused instance neither asks for its shield
    /// nor registers its backend again.
    pub(crate) fn origin<H: Host<Backend = K>>(&self, host: &H, policy: &Policy) -> &Upstream<K> {
        self.origin.get_or_init(|| Upstream::new(host, policy))
    }

    /// Policies this instance built itself so far: 0 while it serves the prebuilt
    /// built-in policy ([`prebuild`]), +1 for each config-store text it loaded.
    pub fn builds(&self) -> u64 {
        self.builds
    }

    /// How long this instance serves (`[edge].sandbox_*`).
    pub fn bounds(&self) -> Bounds {
        let default = cachet_policy::EdgeConfig::default();
        let edge = self
            .policy
            .get()
            .map_or(&default, |f| &f.policy.config().edge);
        Bounds {
            max_requests: edge.sandbox_max_requests,
            max_lifetime: edge.sandbox_max_lifetime.0,
            idle_timeout: edge.sandbox_idle_timeout.0,
            max_memory_mib: edge.sandbox_max_memory_mib,
        }
    }
}
