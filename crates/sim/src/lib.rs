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
//!
//! # Example
//!
//! One combined-log request replayed twice through a config that caches it for a minute:
//! the baseline (raw URL, `Vary: User-Agent`) and the config side both miss, then hit.
//!
//! ```
//! use cachet_policy::Policy;
//! use cachet_sim::logfmt::{self, Format};
//! use cachet_sim::replay::{Engine, Settings};
//! use cachet_sim::report::{InputsSummary, Report};
//!
//! let policy = Policy::from_toml(
//!     "[origin]\nurl = \"http://origin.example\"\n\
//!      [[routes]]\nname = \"all\"\npath_prefix = \"/\"\nttl = \"60s\"\n",
//! )?;
//! let mut engine = Engine::new(
//!     &policy,
//!     Settings {
//!         memory: 64 << 20,
//!         gzip_ratio: 0.36,
//!         object_overhead: 256,
//!         baseline_ttl: None,
//!         baseline_grace: None,
//!         default_host: "blog.example".to_owned(),
//!     },
//! );
//! let line = br#"203.0.113.9 - - [01/Mar/2025:00:00:00 +0000] "GET /a HTTP/1.1" 200 512 "-" "curl/8""#;
//! let record = logfmt::parse_line(Format::Combined, line)?;
//! assert_eq!(record.time, 1_740_787_200);
//! engine.record(&record);
//! engine.record(&record);
//! engine.finish();
//! let inputs = InputsSummary { inputs: Vec::new(), bad_line_examples: Vec::new() };
//! let report = Report::build(&engine, "cachet.toml", inputs, 20);
//! assert_eq!((report.config.requests, report.config.misses, report.config.hits), (2, 1, 1));
//! assert_eq!(report.config.origin_requests, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

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
