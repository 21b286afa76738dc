//! The replay's report: one serializable structure (`cachet simulate --json`; the CLI
//! prints it as tables or HTML too). Counts are requests or objects, sizes bytes, times
//! RFC 3339 UTC or seconds, ratios in [0, 1].

use serde::Serialize;

use crate::fleet::{Balance, Fleet};
use crate::logfmt::{Format, format_rfc3339};
use crate::replay::{Counters, Engine, Side};

/// Version of the JSON report's schema (`"schema"`), raised on incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

/// One input file.
#[derive(Debug, Clone, Serialize)]
pub struct InputReport {
    /// The name given (`(stdin)` for `-`).
    pub name: String,
    /// Detected format (`None` for an empty file).
    pub format: Option<Format>,
    /// Whether it was gzip-compressed.
    pub gzip: bool,
    /// Lines read (blank lines included).
    pub lines: u64,
    /// Lines replayed as requests.
    pub records: u64,
    /// Lines that could not be read as a request.
    pub bad_lines: u64,
    /// Cachet's own lines that are not traffic: admin calls (`"route":"admin"`) and
    /// events (`"event":…`); neither bad nor replayed.
    pub not_traffic: u64,
    /// A read error that stopped this input early (corrupt gzip, I/O).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A bad line worth showing.
#[derive(Debug, Clone, Serialize)]
pub struct BadLine {
    /// The input's name.
    pub file: String,
    /// 1-based line number in that input (after decompression).
    pub line: u64,
    /// Why it was refused.
    pub reason: String,
}

/// The settings as reported.
#[derive(Debug, Clone, Serialize)]
pub struct SettingsReport {
    /// Cache size per side, bytes.
    pub memory_bytes: u64,
    /// Eviction policy.
    pub eviction: &'static str,
    /// Stored/original size for compressible bodies on the config side.
    pub gzip_ratio: f64,
    /// Bytes charged per stored object besides the body.
    pub object_overhead_bytes: u64,
    /// Fixed baseline TTL in seconds, or `null`: the config's TTL per request.
    pub baseline_ttl_seconds: Option<u64>,
    /// Fixed baseline grace in seconds, or `null`: the config's grace per request.
    pub baseline_grace_seconds: Option<u64>,
    /// Host used when a record names none.
    pub default_host: String,
}

/// One side's figures (overall or for one endpoint).
#[derive(Debug, Clone, Serialize)]
pub struct SideReport {
    /// Requests.
    pub requests: u64,
    /// (Fresh hits + stale hits) / (requests − synthesized answers): the one definition
    /// `cachet stat` shares (`crate::hit_ratio`); 0 when every request was synthesized.
    pub hit_ratio: f64,
    /// Fresh hits.
    pub hits: u64,
    /// Stale hits (served within grace; each triggers one background origin fetch).
    pub stale_hits: u64,
    /// Misses.
    pub misses: u64,
    /// Passes (no lookup).
    pub passes: u64,
    /// Synthesized at the edge (config side only).
    pub synth: u64,
    /// Fetched but not stored.
    pub not_stored: u64,
    /// Requests that reached the origin.
    pub origin_requests: u64,
    /// 1 − origin requests / requests.
    pub origin_offload: f64,
    /// Bytes sent by the origin.
    pub origin_bytes: u64,
    /// Bytes resident in the cache at the end of the replay.
    pub bytes_stored: u64,
    /// Objects resident at the end.
    pub objects_stored: u64,
    /// Most bytes resident at any time (overall only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_bytes_stored: Option<u64>,
    /// Bytes written into the cache.
    pub bytes_written: u64,
    /// Distinct cache keys looked up.
    pub distinct_objects: u64,
    /// Whether `distinct_objects` is exact (else a HyperLogLog estimate, ~0.8% standard
    /// error; see [`crate::distinct`]).
    pub distinct_exact: bool,
    /// Objects evicted by the LRU to make room.
    pub evictions: u64,
    /// Objects removed after TTL + grace + keep.
    pub expired: u64,
}

/// One endpoint: a config route, or one of the synth / no-route groups.
#[derive(Debug, Clone, Serialize)]
pub struct EndpointReport {
    /// Route name, or `(robots.txt, synth)`, `(bad request, synth)`, `(no route)`.
    pub endpoint: String,
    /// Baseline figures for the same requests.
    pub baseline: SideReport,
    /// Config figures.
    pub config: SideReport,
}

/// Figures for one side of a template.
#[derive(Debug, Clone, Serialize)]
pub struct TemplateSide {
    /// Hits (fresh + stale) / (requests − synthesized answers) (`crate::hit_ratio`).
    pub hit_ratio: f64,
    /// Origin requests.
    pub origin_requests: u64,
}

/// One path template (host + first two path segments).
#[derive(Debug, Clone, Serialize)]
pub struct TemplateReport {
    /// E.g. `blog.example/blog/alice/…`.
    pub template: String,
    /// Requests.
    pub requests: u64,
    /// Baseline.
    pub baseline: TemplateSide,
    /// Config.
    pub config: TemplateSide,
    /// Config answers synthesized at the edge.
    pub config_synth: u64,
}

/// One timeline bucket.
#[derive(Debug, Clone, Serialize)]
pub struct BucketReport {
    /// Bucket start, RFC 3339.
    pub start: String,
    /// Requests.
    pub requests: u64,
    /// Baseline hit ratio in the bucket.
    pub baseline_hit_ratio: f64,
    /// Config hit ratio in the bucket.
    pub config_hit_ratio: f64,
    /// Baseline origin requests.
    pub baseline_origin_requests: u64,
    /// Config origin requests.
    pub config_origin_requests: u64,
}

/// Hit ratio over time.
#[derive(Debug, Clone, Serialize)]
pub struct TimelineReport {
    /// Bucket width, seconds.
    pub bucket_seconds: i64,
    /// The buckets.
    pub buckets: Vec<BucketReport>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema: u32,
    /// The config file replayed.
    pub config_file: String,
    /// Inputs in replay order.
    pub inputs: Vec<InputReport>,
    /// Lines read over all inputs.
    pub lines: u64,
    /// Requests replayed.
    pub records: u64,
    /// Bad lines over all inputs.
    pub bad_lines: u64,
    /// The first bad lines (at most 5).
    pub bad_line_examples: Vec<BadLine>,
    /// Earliest record time, RFC 3339.
    pub first_time: Option<String>,
    /// Latest record time, RFC 3339.
    pub last_time: Option<String>,
    /// Seconds between them.
    pub duration_seconds: u64,
    /// Settings.
    pub settings: SettingsReport,
    /// Baseline totals.
    pub baseline: SideReport,
    /// Config totals.
    pub config: SideReport,
    /// Per endpoint, config routes in config order, then the synth/no-route groups; only
    /// endpoints that saw requests.
    pub endpoints: Vec<EndpointReport>,
    /// The top templates by requests.
    pub templates: Vec<TemplateReport>,
    /// Templates seen (before the top-N cut).
    pub templates_seen: usize,
    /// Hit ratio over time.
    pub timeline: TimelineReport,
    /// Heap bytes of the simulator's own cache metadata (both sides' slabs and indexes,
    /// and every fleet node's with `--fleet`) and distinct-key counters at the end: the
    /// replay's memory beyond fixed buffers.
    pub simulator_memory_bytes: usize,
    /// `--fleet`: the config side over fleets of edge nodes, without and with a shield
    /// tier (absent without `--fleet`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetReport>,
}

/// One tier of a fleet (all its nodes together).
#[derive(Debug, Clone, Serialize)]
pub struct TierReport {
    /// Requests that reached the tier.
    pub requests: u64,
    /// (Fresh hits + stale hits) / (requests − synthesized answers) (`crate::hit_ratio`).
    pub hit_ratio: f64,
    /// Fresh hits.
    pub hits: u64,
    /// Stale hits (served within grace; each triggers one background fetch upstream).
    pub stale_hits: u64,
    /// Misses (fetched upstream).
    pub misses: u64,
    /// Passes (edge tier only: straight to the origin).
    pub passes: u64,
    /// Synthesized at the edge (edge tier only).
    pub synth: u64,
    /// Fetched but not stored.
    pub not_stored: u64,
}

fn tier(c: &Counters) -> TierReport {
    TierReport {
        requests: c.requests,
        hit_ratio: hit_ratio(c.requests, c.hits + c.stale_hits, c.synth),
        hits: c.hits,
        stale_hits: c.stale_hits,
        misses: c.misses,
        passes: c.passes,
        synth: c.synth,
        not_stored: c.not_stored,
    }
}

/// A fleet without the shield tier: every edge miss, refresh and pass goes to the origin.
#[derive(Debug, Clone, Serialize)]
pub struct WithoutShieldReport {
    /// The N edge nodes together.
    pub edge: TierReport,
    /// Origin requests: edge misses + stale-hit refreshes + passes.
    pub origin_requests: u64,
    /// 1 − origin requests / requests.
    pub origin_offload: f64,
}

/// A fleet with the shield tier: cacheable edge misses and refreshes go to the shield
/// that owns the key; passes go to the origin.
#[derive(Debug, Clone, Serialize)]
pub struct WithShieldReport {
    /// The N edge nodes together.
    pub edge: TierReport,
    /// The S shield nodes together (`requests` = the edges' misses and refreshes).
    pub shield: TierReport,
    /// Origin requests: shield misses + shield refreshes + the edges' passes.
    pub origin_requests: u64,
    /// 1 − origin requests / requests.
    pub origin_offload: f64,
}

/// One fleet size.
#[derive(Debug, Clone, Serialize)]
pub struct FleetSizeReport {
    /// Edge nodes.
    pub edges: usize,
    /// Requests replayed (all edges together).
    pub requests: u64,
    /// Without the shield tier.
    pub without_shield: WithoutShieldReport,
    /// With the shield tier.
    pub with_shield: WithShieldReport,
    /// Origin requests with the shield tier / without it (0 when there were none).
    pub origin_ratio: f64,
}

/// `--fleet`: settings and one entry per fleet size.
#[derive(Debug, Clone, Serialize)]
pub struct FleetReport {
    /// How requests are spread over the edge nodes: `round-robin` or `client`.
    pub balance: Balance,
    /// How a cache key picks its shield: Envoy's `ring_hash` (xxHash64, ⌈1024 / S⌉
    /// entries per shield).
    pub shield_balance: &'static str,
    /// Shield nodes.
    pub shields: usize,
    /// Cache bytes per edge node.
    pub edge_memory_bytes: u64,
    /// Cache bytes per shield node.
    pub shield_memory_bytes: u64,
    /// Per fleet size, in the order given.
    pub sizes: Vec<FleetSizeReport>,
}

fn offload(origin: u64, requests: u64) -> f64 {
    if requests == 0 {
        0.0
    } else {
        ((1.0 - ratio(origin, requests)) * 1e6).round() / 1e6
    }
}

fn fleet_report(fleets: &[Fleet]) -> Option<FleetReport> {
    let first = fleets.first()?;
    let sizes = fleets
        .iter()
        .map(|f| {
            let requests = f.without.requests;
            let with = f.origin_with_shield();
            FleetSizeReport {
                edges: f.settings.edges,
                requests,
                without_shield: WithoutShieldReport {
                    edge: tier(&f.without),
                    origin_requests: f.without.origin_requests,
                    origin_offload: offload(f.without.origin_requests, requests),
                },
                with_shield: WithShieldReport {
                    edge: tier(&f.with_edge),
                    shield: tier(&f.shield),
                    origin_requests: with,
                    origin_offload: offload(with, requests),
                },
                origin_ratio: ratio(with, f.without.origin_requests),
            }
        })
        .collect();
    Some(FleetReport {
        balance: first.settings.balance,
        shield_balance: "envoy ring_hash (xxHash64 of the cache key)",
        shields: first.settings.shields,
        edge_memory_bytes: first.settings.edge_memory,
        shield_memory_bytes: first.settings.shield_memory,
        sizes,
    })
}

/// The hit ratio of `requests` of which `from_cache` were HIT or STALE and `synth`
/// synthesized ([`crate::hit_ratio::of_requests`], the definition `cachet stat` shares),
/// rounded to 6 decimals; 0 when no request went through the cache.
fn hit_ratio(requests: u64, from_cache: u64, synth: u64) -> f64 {
    crate::hit_ratio::of_requests(requests, from_cache, synth)
        .map_or(0.0, |r| (r * 1e6).round() / 1e6)
}

/// A ratio rounded to 6 decimals (0 when the denominator is 0).
pub fn ratio(num: u64, den: u64) -> f64 {
    if den == 0 {
        return 0.0;
    }
    #[allow(clippy::cast_precision_loss, reason = "counts far below 2^52")]
    let r = num as f64 / den as f64;
    (r * 1e6).round() / 1e6
}

fn side_report(
    c: &Counters,
    stored: (u64, u64),
    distinct: (u64, bool),
    evict: (u64, u64),
) -> SideReport {
    SideReport {
        requests: c.requests,
        hit_ratio: hit_ratio(c.requests, c.hits + c.stale_hits, c.synth),
        hits: c.hits,
        stale_hits: c.stale_hits,
        misses: c.misses,
        passes: c.passes,
        synth: c.synth,
        not_stored: c.not_stored,
        origin_requests: c.origin_requests,
        origin_offload: if c.requests == 0 {
            0.0
        } else {
            ((1.0 - ratio(c.origin_requests, c.requests)) * 1e6).round() / 1e6
        },
        origin_bytes: c.origin_bytes,
        bytes_stored: stored.0,
        objects_stored: stored.1,
        peak_bytes_stored: None,
        bytes_written: c.bytes_written,
        distinct_objects: distinct.0,
        distinct_exact: distinct.1,
        evictions: evict.0,
        expired: evict.1,
    }
}

fn side_total(s: &Side) -> SideReport {
    let tags = s.cache.tags();
    let mut r = side_report(
        &s.total,
        (s.cache.used(), s.cache.len() as u64),
        (s.distinct.count(), s.distinct.is_exact()),
        (
            tags.iter().map(|t| t.evictions).sum(),
            tags.iter().map(|t| t.expired).sum(),
        ),
    );
    r.peak_bytes_stored = Some(s.cache.peak());
    r
}

fn side_endpoint(s: &Side, i: usize) -> SideReport {
    let t = s.cache.tags()[i];
    side_report(
        &s.per[i],
        (t.bytes, t.objects),
        (s.per_distinct[i].count(), s.per_distinct[i].is_exact()),
        (t.evictions, t.expired),
    )
}

/// Inputs' bookkeeping, gathered while reading ([`crate::inputs::replay_inputs`]).
#[derive(Debug, Clone)]
pub struct InputsSummary {
    /// Per input.
    pub inputs: Vec<InputReport>,
    /// First bad lines.
    pub bad_line_examples: Vec<BadLine>,
}

impl Report {
    /// Builds the report of a finished replay; `top` templates are kept.
    pub fn build(
        engine: &Engine<'_>,
        config_file: &str,
        inputs: InputsSummary,
        top: usize,
    ) -> Self {
        let s = engine.settings();
        let endpoints = (0..engine.endpoints.len())
            .filter(|&i| engine.config.per[i].requests > 0)
            .map(|i| EndpointReport {
                endpoint: engine.endpoints[i].clone(),
                baseline: side_endpoint(&engine.baseline, i),
                config: side_endpoint(&engine.config, i),
            })
            .collect();
        let mut order: Vec<usize> = (0..engine.templates.len()).collect();
        order.sort_by(|&a, &b| {
            let (na, ta) = &engine.templates[a];
            let (nb, tb) = &engine.templates[b];
            tb.requests.cmp(&ta.requests).then_with(|| na.cmp(nb))
        });
        let templates = order
            .into_iter()
            .take(top)
            .map(|i| {
                let (name, t) = &engine.templates[i];
                TemplateReport {
                    template: name.clone(),
                    requests: t.requests,
                    baseline: TemplateSide {
                        hit_ratio: hit_ratio(t.requests, t.baseline_hits, 0),
                        origin_requests: t.baseline_origin,
                    },
                    config: TemplateSide {
                        hit_ratio: hit_ratio(t.requests, t.config_hits, t.config_synth),
                        origin_requests: t.config_origin,
                    },
                    config_synth: t.config_synth,
                }
            })
            .collect();
        let tl = &engine.timeline;
        let buckets = tl
            .buckets
            .iter()
            .enumerate()
            .map(|(i, b)| BucketReport {
                start: format_rfc3339(
                    tl.start.unwrap_or(0) + i64::try_from(i).unwrap_or(0) * tl.width,
                ),
                requests: b.requests,
                baseline_hit_ratio: hit_ratio(b.requests, b.baseline_hits, 0),
                config_hit_ratio: hit_ratio(b.requests, b.config_hits, b.config_synth),
                baseline_origin_requests: b.baseline_origin,
                config_origin_requests: b.config_origin,
            })
            .collect();
        let lines = inputs.inputs.iter().map(|i| i.lines).sum();
        let records = inputs.inputs.iter().map(|i| i.records).sum();
        let bad_lines = inputs.inputs.iter().map(|i| i.bad_lines).sum();
        Self {
            schema: SCHEMA_VERSION,
            config_file: config_file.to_owned(),
            inputs: inputs.inputs,
            lines,
            records,
            bad_lines,
            bad_line_examples: inputs.bad_line_examples,
            first_time: engine.first_time.map(format_rfc3339),
            last_time: engine.last_time.map(format_rfc3339),
            duration_seconds: match (engine.first_time, engine.last_time) {
                (Some(f), Some(l)) => u64::try_from(l - f).unwrap_or(0),
                _ => 0,
            },
            settings: SettingsReport {
                memory_bytes: s.memory,
                eviction: "lru-bytes",
                gzip_ratio: s.gzip_ratio,
                object_overhead_bytes: s.object_overhead,
                baseline_ttl_seconds: s.baseline_ttl.map(|d| d.as_secs()),
                baseline_grace_seconds: s.baseline_grace.map(|d| d.as_secs()),
                default_host: s.default_host.clone(),
            },
            baseline: side_total(&engine.baseline),
            config: side_total(&engine.config),
            endpoints,
            templates,
            templates_seen: engine.templates.len(),
            timeline: TimelineReport {
                bucket_seconds: tl.width.max(crate::replay::BUCKET_SECONDS),
                buckets,
            },
            simulator_memory_bytes: [&engine.baseline, &engine.config]
                .iter()
                .map(|s| {
                    s.cache.heap_bytes()
                        + s.distinct.heap_bytes()
                        + s.per_distinct
                            .iter()
                            .map(crate::distinct::Distinct::heap_bytes)
                            .sum::<usize>()
                })
                .sum::<usize>()
                + engine.fleets.iter().map(Fleet::heap_bytes).sum::<usize>(),
            fleet: fleet_report(&engine.fleets),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios() {
        assert!((ratio(1, 3) - 0.333_333).abs() < 1e-12);
        assert!(ratio(1, 0).abs() < 1e-12);
    }
}
