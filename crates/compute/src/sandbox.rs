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

use std::cell::OnceCell;
use std::time::Duration;

use cachet_policy::inforce::InForce;
use cachet_policy::{Policy, PolicyError};

use crate::host::Host;
use crate::origin::Origin;
use crate::{CONFIG_STORE, load_policy_text};

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
    policy: Result<InForce<Policy>, PolicyError>,
    /// When the config store was last read (the host's monotonic clock).
    read_at: Duration,
    /// Policies built by this instance (1 + the changes it picked up).
    builds: u64,
    /// Requests begun in this instance.
    served: u64,
    /// The origin tier and backends of the policy in force, made on first use.
    origin: OnceCell<Origin<K>>,
}

impl<K> std::fmt::Debug for Sandbox<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("builds", &self.builds)
            .field("served", &self.served)
            .finish_non_exhaustive()
    }
}

impl<K: Clone> Sandbox<K> {
    /// Starts an instance: reads the config store and builds the policy
    /// ([`crate::load_policy`]'s rules, `builtin` the configuration built into the wasm).
    pub fn start<H: Host<Backend = K>>(host: &H, builtin: &'static str) -> Self {
        let text = host.config(CONFIG_STORE, "config");
        let policy = load_policy_text(host, text.as_deref(), builtin);
        Self {
            builtin,
            text,
            policy,
            read_at: host.monotonic(),
            builds: 1,
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
        let interval = self.policy.as_ref().map_or_else(
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
        self.policy = load_policy_text(host, text.as_deref(), self.builtin);
        self.text = text;
        self.origin = OnceCell::new();
        self.builds += 1;
        true
    }

    /// The policy in force (or why the built-in configuration does not load either).
    ///
    /// # Errors
    /// The built-in configuration's issues.
    pub fn policy(&self) -> Result<&InForce<Policy>, &PolicyError> {
        self.policy.as_ref()
    }

    /// The origin tier of the policy in force (`[edge].shield`, the dynamic backend of
    /// `[origin]`), made once per policy: a reused instance neither asks for its shield
    /// nor registers its backend again.
    pub(crate) fn origin<H: Host<Backend = K>>(&self, host: &H, policy: &Policy) -> &Origin<K> {
        self.origin.get_or_init(|| Origin::new(host, policy))
    }

    /// Policies this instance built so far (1 + the configuration changes it picked up).
    pub fn builds(&self) -> u64 {
        self.builds
    }

    /// How long this instance serves (`[edge].sandbox_*`).
    pub fn bounds(&self) -> Bounds {
        let default = cachet_policy::EdgeConfig::default();
        let edge = self
            .policy
            .as_ref()
            .map_or(&default, |f| &f.policy.config().edge);
        Bounds {
            max_requests: edge.sandbox_max_requests,
            max_lifetime: edge.sandbox_max_lifetime.0,
            idle_timeout: edge.sandbox_idle_timeout.0,
            max_memory_mib: edge.sandbox_max_memory_mib,
        }
    }
}
