//! `cachet simulate --fleet`: the config side replayed over N edge nodes, without and with a consistent-hash shield tier.
//!
//! Each fleet holds two copies of its N edge nodes, fed the same requests: one whose
//! misses go to the origin, one whose misses go to S shield nodes chosen by Envoy's
//! `ring_hash` load balancer on the shard field's value ([`request_hash`]). Every node is
//! the single-node replay's cache ([`ByteLru`]) filled by the same code (`replay::serve`
//! and `replay::fill`, internal), so `Policy::plan`, `Policy::storability`, TTL, grace and
//! keep decide alike on one node and in a fleet. The model is documented in
//! `docs/fleet.md` ("Simulating a fleet").

use cachet_policy::Storability;
use cachet_policy::object::shard_value;
use xxhash_rust::xxh64::xxh64;

use crate::lru::{ByteLru, Lifetime, Lookup};
use crate::replay::{Counters, Fetch, fill, serve};

/// Envoy's `ring_hash` default `minimum_ring_size`: with S equally weighted hosts each gets
/// ⌈1024 / S⌉ ring entries (Envoy `ring_hash_lb.cc`: `scale = ⌈w_min · min_ring_size⌉ /
/// w_min`, then `scale · w` entries per host).
pub const RING_MIN_SIZE: u64 = 1024;

/// Most edge nodes in one fleet (`--fleet`).
pub const MAX_EDGES: usize = 1000;

/// Most fleet sizes in one `--fleet` list.
pub const MAX_FLEETS: usize = 16;

/// Most shield nodes (`--shields`).
pub const MAX_SHIELDS: usize = 256;

/// Simulated seconds between expiry sweeps of a fleet's caches (as the single node).
const SWEEP_SECONDS: i64 = 60;

/// Resident objects a sweep may visit per request replayed since the last one.
const SWEEP_VISITS_PER_REQUEST: u64 = 4;

/// The hash a fill for `cache_key` carries to the shields' ring: xxHash64 (seed 0) of the
/// **shard field's value**, [`cachet_policy::object::shard_value`] of the plan's primary
/// cache key (`cachet-obj-<16 hex>`, the value every fill carries in
/// `[origin].shard_header`, docs/fleet.md), not of the key itself.
///
/// Source: the edge route's and the shield cluster's `hash_policy: [{header: {header_name:
/// x-cachet-shard}}]` in `envoy-filter/fleet/edge.yaml`; Envoy's header hash method
/// (`HashPolicyImpl`, `HeaderHashMethod`) hashes the header's value with
/// `HashUtil::xxHash64` (seed 0), which the ring (`RingHashLoadBalancer`) then places.
///
/// ```
/// use cachet_sim::fleet::{request_hash, shard_hash};
///
/// let key = "blog.example/entry/1|pc";
/// let field = cachet_policy::object::shard_value(key); // "cachet-obj-…", sent by every fill
/// assert_eq!(request_hash(key), shard_hash(&field));
/// ```
pub fn request_hash(cache_key: &str) -> u64 {
    shard_hash(&shard_value(cache_key))
}

/// xxHash64 (seed 0) of a shard field's value, as Envoy's header `hash_policy` hashes a
/// request that carries it (see [`request_hash`]).
pub fn shard_hash(shard_field_value: &str) -> u64 {
    xxh64(shard_field_value.as_bytes(), 0)
}

/// A consistent-hash ring built as Envoy's `ring_hash` load balancer builds it with equal
/// host weights and the xxHash function: host `h` named `name` owns the entries
/// `xxh64("{name}_{i}", 0)` for `i` in `0..per_host`; a request hash goes to the first
/// entry at or after it, wrapping to the first entry (Envoy `RingHashLoadBalancer::Ring`).
#[derive(Debug, Clone)]
pub struct Ring {
    /// (entry hash, host index), sorted.
    entries: Vec<(u64, u32)>,
}

impl Ring {
    /// Envoy's default ring over `names`: ⌈[`RING_MIN_SIZE`] / hosts⌉ entries per host.
    ///
    /// # Panics
    /// When `names` is empty or longer than `u32::MAX`.
    pub fn envoy<S: AsRef<str>>(names: &[S]) -> Self {
        Self::with_entries(names, RING_MIN_SIZE.div_ceil(names.len() as u64))
    }

    /// A ring with `per_host` entries for each of `names` (host index = position).
    ///
    /// # Panics
    /// When `names` is empty, longer than `u32::MAX`, or `per_host` is 0.
    pub fn with_entries<S: AsRef<str>>(names: &[S], per_host: u64) -> Self {
        assert!(!names.is_empty() && per_host > 0, "an empty ring");
        let mut entries = Vec::new();
        for (h, name) in names.iter().enumerate() {
            let h = u32::try_from(h).expect("at most u32::MAX hosts");
            for i in 0..per_host {
                let k = format!("{}_{i}", name.as_ref());
                entries.push((xxh64(k.as_bytes(), 0), h));
            }
        }
        entries.sort_unstable();
        Self { entries }
    }

    /// The host index that owns `hash`.
    pub fn pick(&self, hash: u64) -> usize {
        let i = self.entries.partition_point(|e| e.0 < hash);
        let (_, host) = self.entries.get(i).unwrap_or(&self.entries[0]);
        *host as usize
    }
}

/// Names of the simulated shield hosts: `shield-0` .. `shield-{n-1}` (the names hashed
/// onto the ring, as Envoy hashes a host's address or, with `use_hostname_for_hashing`,
/// its hostname).
pub fn shield_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("shield-{i}")).collect()
}

/// How requests are spread over the edge nodes (`--balance`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Balance {
    /// Request i of the log goes to edge i mod N (Envoy's default `round_robin` with
    /// equal weights, or any L7 balancer without affinity).
    RoundRobin,
    /// Each client address sticks to one edge: Envoy's `ring_hash` over the edges
    /// (`edge-0` …) with a `connection_properties: source_ip` hash policy, xxHash64 of the
    /// address as logged; records without an address go round-robin.
    Client,
}

/// One fleet's settings.
#[derive(Debug, Clone)]
pub struct FleetSettings {
    /// Edge nodes, ≥ 1.
    pub edges: usize,
    /// Shield nodes, ≥ 1.
    pub shields: usize,
    /// Cache bytes of each edge node (`--memory`).
    pub edge_memory: u64,
    /// Cache bytes of each shield node (`--shield-memory`, default `--memory`).
    pub shield_memory: u64,
    /// Endpoints (LRU tags).
    pub endpoints: usize,
    /// How requests reach the edges.
    pub balance: Balance,
}

/// One fleet of N edge nodes, replayed without and with the shield tier.
pub struct Fleet {
    /// The settings.
    pub settings: FleetSettings,
    ring: Ring,
    /// The edges' ring for [`Balance::Client`].
    edge_ring: Option<Ring>,
    /// Edges whose misses go to the origin.
    plain: Vec<ByteLru>,
    /// Edges whose cacheable misses and refreshes go to the shields.
    front: Vec<ByteLru>,
    /// The shield tier.
    shields: Vec<ByteLru>,
    next: usize,
    /// Requests answered by the fleet's edges without a shield tier (`origin_requests`
    /// counts every origin request of that fleet).
    pub without: Counters,
    /// Requests answered by the edges in front of the shield tier (`origin_requests`
    /// counts only the passes, which go to the origin directly; the rest go through
    /// [`Fleet::shield`]).
    pub with_edge: Counters,
    /// The shield tier: `requests` = edge misses and refreshes of cacheable requests;
    /// `origin_requests` = the shields' own fetches.
    pub shield: Counters,
    last_sweep: i64,
    since_sweep: u64,
}

impl Fleet {
    /// An empty fleet.
    ///
    /// # Panics
    /// When `settings.edges` or `settings.shields` is 0 (the CLI refuses both).
    pub fn new(settings: FleetSettings) -> Self {
        assert!(settings.edges > 0 && settings.shields > 0, "an empty fleet");
        let caches = |n: usize, memory: u64| -> Vec<ByteLru> {
            (0..n)
                .map(|_| ByteLru::new(memory, settings.endpoints))
                .collect()
        };
        Self {
            ring: Ring::envoy(&shield_names(settings.shields)),
            edge_ring: (settings.balance == Balance::Client).then(|| {
                let names: Vec<String> = (0..settings.edges).map(|i| format!("edge-{i}")).collect();
                Ring::envoy(&names)
            }),
            plain: caches(settings.edges, settings.edge_memory),
            front: caches(settings.edges, settings.edge_memory),
            shields: caches(settings.shields, settings.shield_memory),
            settings,
            next: 0,
            without: Counters::default(),
            with_edge: Counters::default(),
            shield: Counters::default(),
            last_sweep: i64::MIN,
            since_sweep: 0,
        }
    }

    /// The edge node for a request from `client` ([`Balance`]).
    fn pick_edge(&mut self, client: Option<&[u8]>) -> usize {
        if let (Some(ring), Some(c)) = (&self.edge_ring, client) {
            return ring.pick(xxh64(c, 0));
        }
        let e = self.next;
        self.next = (self.next + 1) % self.settings.edges;
        e
    }

    /// A request the edge does not look up: a pass (`origin`: it goes to the origin
    /// straight from the edge, in both set-ups) or a synthesized answer (never leaves the
    /// edge).
    pub(crate) fn direct(&mut self, client: Option<&[u8]>, origin: bool, bytes: u64, now: i64) {
        let _ = self.pick_edge(client);
        for c in [&mut self.without, &mut self.with_edge] {
            c.requests += 1;
            if origin {
                c.passes += 1;
                c.origin_requests += 1;
                c.origin_bytes += bytes;
            } else {
                c.synth += 1;
            }
        }
        self.maybe_sweep(now);
    }

    /// A cacheable request (`plan.decision == Cache`) from `client` with the cache key's
    /// `ring_hash` and the origin's `bytes`.
    pub(crate) fn cache(
        &mut self,
        client: Option<&[u8]>,
        fetch: &Fetch<'_>,
        ring_hash: u64,
        bytes: u64,
    ) {
        let e = self.pick_edge(client);
        // Without a shield tier: the single node's path, N times over.
        let (found, stored) = serve(&mut self.plain[e], fetch);
        count(&mut self.without, found, stored, bytes);

        // With it: a stale hit or a miss at the edge asks the shield that owns the key.
        let edge = &mut self.front[e];
        let found = edge.lookup(fetch.key, fetch.now);
        self.with_edge.requests += 1;
        match found {
            Lookup::Fresh => self.with_edge.hits += 1,
            Lookup::Stale => self.with_edge.stale_hits += 1,
            Lookup::Miss => self.with_edge.misses += 1,
        }
        if found != Lookup::Fresh {
            let s = self.ring.pick(ring_hash);
            let shield = &mut self.shields[s];
            let before = shield.entry(fetch.key);
            let (shield_found, shield_stored) = serve(shield, fetch);
            count(&mut self.shield, shield_found, shield_stored, bytes);
            // What the shield answers the edge with: its fresh copy, its stale copy (served
            // while it refreshes, unless the refresh removed a now per-user object), or the
            // object it just fetched and stored; each with its own stored time, so the edge
            // keeps it only for the TTL that remains (the upstream `Age`).
            let answer = match shield_found {
                Lookup::Fresh => before,
                Lookup::Stale => before.filter(|_| shield.size_of(fetch.key).is_some()),
                Lookup::Miss => shield_stored.and_then(|_| shield.entry(fetch.key)),
            };
            let edge = &mut self.front[e];
            let stored = match answer {
                Some((size, life, stored_at)) => copy(edge, fetch, size, life, stored_at),
                // Nothing cacheable came back through the shield: the edge decides on the
                // origin's answer as a single node would.
                None => fill(edge, found, fetch),
            };
            match stored {
                Some(b) => self.with_edge.bytes_written += b,
                None => self.with_edge.not_stored += 1,
            }
        }
        self.maybe_sweep(fetch.now);
    }

    /// Origin requests of the fleet with the shield tier: passes from the edges plus the
    /// shields' fetches.
    pub fn origin_with_shield(&self) -> u64 {
        self.with_edge.origin_requests + self.shield.origin_requests
    }

    /// Heap bytes of the fleet's caches' metadata.
    pub fn heap_bytes(&self) -> usize {
        self.all().map(ByteLru::heap_bytes).sum()
    }

    fn all(&self) -> impl Iterator<Item = &ByteLru> {
        self.plain.iter().chain(&self.front).chain(&self.shields)
    }

    fn maybe_sweep(&mut self, now: i64) {
        self.since_sweep += 1;
        if now.saturating_sub(self.last_sweep) >= SWEEP_SECONDS
            && self.since_sweep * SWEEP_VISITS_PER_REQUEST
                >= self.all().map(|c| c.len() as u64).sum::<u64>()
        {
            for c in self
                .plain
                .iter_mut()
                .chain(&mut self.front)
                .chain(&mut self.shields)
            {
                c.sweep(now);
            }
            self.last_sweep = now;
            self.since_sweep = 0;
        }
    }
}

/// Counts one cacheable request at a node whose upstream is the origin.
fn count(c: &mut Counters, found: Lookup, stored: Option<u64>, bytes: u64) {
    if found == Lookup::Fresh {
        c.requests += 1;
        c.hits += 1;
        return;
    }
    c.fetched(found == Lookup::Stale, bytes);
    match stored {
        Some(b) => c.bytes_written += b,
        None => c.not_stored += 1,
    }
}

/// Stores the shield's copy at the edge: same size and lifetime, same stored time (so its
/// age, and the TTL left, carry over). When the log says this request's answer was
/// per-user (`private`, `no-store`), the edge removes its copy and stores nothing instead,
/// as a single node does: the log is the only witness that the object turned private.
fn copy(
    edge: &mut ByteLru,
    fetch: &Fetch<'_>,
    size: u64,
    life: Lifetime,
    stored_at: i64,
) -> Option<u64> {
    if let Storability::DontStore(why) = (fetch.verdict)()
        && why.is_private()
    {
        edge.remove(fetch.key);
        return None;
    }
    edge.insert(fetch.key, size, life, fetch.tag, stored_at)
        .then_some(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> impl Iterator<Item = u64> {
        (0..20_000u32).map(|k| request_hash(&format!("blog.example/blog/x/entry/{k}|pc")))
    }

    /// `shard_value("blog.example/entry/1|pc")` (`cachet_policy::object::shard_value`).
    const PINNED_SHARD_VALUE: &str = "cachet-obj-bd0d9a0617452a2a";
    /// xxHash64 (seed 0) of [`PINNED_SHARD_VALUE`]: what Envoy's ring looks up.
    const PINNED_REQUEST_HASH: u64 = 0x1869_3bd6_5430_d3e6;

    /// The fleet example's edge configuration (docs/fleet.md): the Envoy routes and
    /// clusters that choose a shield.
    const EDGE_YAML: &str = include_str!("../../../envoy-filter/fleet/edge.yaml");

    #[test]
    fn envoy_hashes_the_shard_field_and_nothing_else() {
        // Every `hash_policy` of the example (the route's, for router fills, and the
        // shield cluster's, for callouts) is one header hash on `x-cachet-shard`, the
        // field `request_hash` models; the edge's config names that field.
        let lines: Vec<&str> = EDGE_YAML.lines().map(str::trim).collect();
        let policies: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i] == "hash_policy:")
            .collect();
        assert_eq!(policies.len(), 2, "the route's and the cluster's");
        for i in policies {
            assert_eq!(lines[i + 1], "- header: { header_name: x-cachet-shard }");
            assert!(!lines[i + 2].starts_with('-'), "one hash method only");
        }
        assert!(EDGE_YAML.contains(r#""shard_header": "x-cachet-shard""#));
    }

    #[test]
    fn the_ring_hash_is_the_shard_fields_value_a_fill_carries() {
        use cachet_policy::{Policy, RequestView};
        let policy = Policy::from_toml(
            "[origin]\nurl = \"http://origin.example\"\nshard_header = \"x-cachet-shard\"\n\n\
             [[routes]]\nname = \"blog\"\npath_prefix = \"/\"\nttl = \"60s\"\n",
        )
        .expect("valid config");
        let view = RequestView {
            method: "GET",
            scheme: "https",
            host: Some("blog.example"),
            path_and_query: "/entry/1?utm_source=x",
            ..RequestView::default()
        };
        let plan = policy.plan(&view, std::time::SystemTime::UNIX_EPOCH);
        assert!(!plan.cache_key.is_empty(), "a cacheable request");
        // What the edge really sends to the shields (`cachet_http::fill`), whose value
        // Envoy's header hash policy hashes.
        let fields = cachet_http::fill::request_fields(&policy, &plan, &[], None);
        let sent: Vec<&[u8]> = fields
            .iter()
            .filter(|(n, _)| n == "x-cachet-shard")
            .map(|(_, v)| v.as_slice())
            .collect();
        assert_eq!(sent.len(), 1, "{fields:?}");
        assert_eq!(request_hash(&plan.cache_key), xxh64(sent[0], 0));
        // The value, not the cache key: the two hashes differ (and so do the shields).
        assert_ne!(
            request_hash(&plan.cache_key),
            xxh64(plan.cache_key.as_bytes(), 0)
        );
        // Pinned: the shard value of one key and Envoy's xxHash64 of it (seed 0; the
        // empty input's hash is xxHash64's published test vector).
        assert_eq!(xxh64(b"", 0), 0xef46_db37_51d8_e999);
        let key = "blog.example/entry/1|pc";
        assert_eq!(shard_value(key), PINNED_SHARD_VALUE);
        assert_eq!(request_hash(key), PINNED_REQUEST_HASH);
        assert_eq!(shard_hash(PINNED_SHARD_VALUE), PINNED_REQUEST_HASH);
    }

    #[test]
    fn ring_is_stable_and_balanced() {
        let names = shield_names(3);
        let a = Ring::envoy(&names);
        let b = Ring::envoy(&names);
        let mut load = [0u32; 3];
        for h in keys() {
            assert_eq!(a.pick(h), b.pick(h), "same names, same owner");
            load[a.pick(h)] += 1;
        }
        // 342 entries per host: each host owns a third, give or take a few percent.
        for l in load {
            assert!((5_500..=7_800).contains(&l), "{load:?}");
        }
        assert_eq!(a.entries.len(), 3 * 342);
        // The wrap-around: past the last entry goes to the first entry's host.
        assert_eq!(a.pick(u64::MAX), a.entries[0].1 as usize);
        assert_eq!(a.pick(0), a.entries[0].1 as usize);
    }

    #[test]
    fn only_the_removed_hosts_keys_move() {
        // Same entries per host: removing shield-1 moves its keys and nothing else.
        let three = Ring::with_entries(&["shield-0", "shield-1", "shield-2"], 342);
        let two = Ring::with_entries(&["shield-0", "shield-2"], 342);
        let name = |r: usize, three_hosts: bool| {
            if three_hosts { r } else { [0, 2][r] }
        };
        let mut moved = 0;
        for h in keys() {
            let before = name(three.pick(h), true);
            let after = name(two.pick(h), false);
            if before == 1 {
                assert_ne!(after, 1);
                moved += 1;
            } else {
                assert_eq!(before, after, "a key of a surviving host moved");
            }
        }
        assert!(moved > 5_000);
    }

    #[test]
    fn envoy_rescaling_also_moves_some_survivor_keys() {
        // Envoy rebuilds the ring with ⌈1024 / hosts⌉ entries each: from 3 hosts (342) to
        // 2 (512) the survivors gain entries, so a share of their keys changes hands too.
        let three = Ring::envoy(&["shield-0", "shield-1", "shield-2"]);
        let two = Ring::envoy(&["shield-0", "shield-2"]);
        let (mut survivors, mut shifted) = (0u32, 0u32);
        for h in keys() {
            let before = three.pick(h);
            let after = [0, 2][two.pick(h)];
            if before != 1 {
                survivors += 1;
                shifted += u32::from(before != after);
            }
        }
        let share = f64::from(shifted) / f64::from(survivors);
        assert!(share > 0.0 && share < 0.25, "{share}");
    }
}
