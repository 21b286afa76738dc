//! The engine of `cachet simulate`: access logs replayed through Cachet's pure policy
//! (`cachet_policy::Policy`) and simulated caches, baseline vs config, on one node or over
//! fleets of edge nodes with a shield tier; and the sample logs of `--generate`.
//!
//! The `cachet` command (`crates/cli`) reads the command line, shows progress and prints
//! the [`report::Report`] as tables, JSON or HTML; everything it prints is computed here:
//!
//! * [`input`] opens logs (files or stdin, gzip by its magic bytes, bounded lines);
//! * [`inputs::replay_inputs`] replays whole inputs into an engine, counting bad lines;
//! * [`logfmt`] reads a line (NCSA common/combined, JSON, Cachet's own access records)
//!   into a [`logfmt::Record`], and reads and writes log times;
//! * [`replay::Engine`] replays records on both sides into byte-bounded LRU caches
//!   ([`lru::ByteLru`]), with distinct-object counts ([`distinct`]) and a timeline;
//! * [`fleet::Fleet`] replays the config side over N edges, without and with S shields
//!   chosen as Envoy's `ring_hash` chooses them on the shard field;
//! * [`report::Report`] is the serializable result (`cachet simulate --json`);
//! * [`hit_ratio`] is the one hit-ratio definition `cachet stat` shares;
//! * [`generate`] writes a deterministic sample blog log.
//!
//! The model (what counts as a hit, sizes, TTLs, memory) is documented in
//! `docs/simulate.md`, the fleet model in `docs/fleet.md` ("Simulating a fleet").

pub mod access_line;
pub mod distinct;
pub mod fleet;
pub mod generate;
pub mod hit_ratio;
pub mod input;
pub mod inputs;
pub mod logfmt;
pub mod lru;
pub mod replay;
pub mod report;
