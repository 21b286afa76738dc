//! The replay's report as terminal tables (`cachet simulate`, `--fleet`) and the number
//! formats the tables and the HTML report share.

use std::fmt::Write as _;

use cachet_sim::fleet::Balance;
use cachet_sim::report::{EndpointReport, Report, SideReport, TemplateReport};

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `0.1234` → `12.3%`.
pub fn percent(r: f64) -> String {
    format!("{:.1}%", r * 100.0)
}

/// A side's hit ratio for tables: `synth` when every request was answered at the edge.
pub fn hit_ratio_label(s: &SideReport) -> String {
    if s.requests > 0 && s.synth == s.requests {
        "synth".to_owned()
    } else {
        percent(s.hit_ratio)
    }
}

/// A template's config hit ratio for tables (`synth` as in [`hit_ratio_label`]).
pub fn template_config_label(t: &TemplateReport) -> String {
    if t.requests > 0 && t.config_synth == t.requests {
        "synth".to_owned()
    } else {
        percent(t.config.hit_ratio)
    }
}

/// Bytes in binary units: `512 B`, `1.5 KiB`, `3.2 MiB`, `1.0 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    #[allow(clippy::cast_precision_loss, reason = "display only")]
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Seconds as `2h 46m 40s` (largest units, zero parts left out).
pub fn duration(secs: u64) -> String {
    if secs == 0 {
        return "0s".into();
    }
    [
        (secs / 86_400, "d"),
        (secs / 3600 % 24, "h"),
        (secs / 60 % 60, "m"),
        (secs % 60, "s"),
    ]
    .iter()
    .filter(|(v, _)| *v > 0)
    .map(|(v, u)| format!("{v}{u}"))
    .collect::<Vec<_>>()
    .join(" ")
}

/// Width of the terminal tables without `--wide`, in columns (display cells).
pub const TABLE_WIDTH: u16 = 100;

/// The explanation of `≈` (no final period), printed under the tables and in the HTML
/// report: a distinct-object count past [`cachet_sim::distinct::EXACT_LIMIT`] is a
/// HyperLogLog estimate ([`cachet_sim::distinct`]).
pub fn approx_note() -> String {
    format!(
        "≈ = estimated: past {} distinct keys, a counter is a HyperLogLog \
         (~0.8% standard error)",
        thousands(cachet_sim::distinct::EXACT_LIMIT as u64)
    )
}

/// A table in the report's style: header row, right-aligned numbers after the first
/// column. Without `wide`, content wraps so that every line fits [`TABLE_WIDTH`] columns;
/// with `wide`, nothing wraps.
fn table(header: &[&str], wide: bool) -> comfy_table::Table {
    use comfy_table::{CellAlignment, ContentArrangement, LineStyle, Table, TableStyle};
    // A rule above and below the table and under the header; no row rules, no vertical
    // lines (comfy-table's UTF8_HORIZONTAL_ONLY without its row separators).
    const STYLE: TableStyle = TableStyle::new()
        .top_border(LineStyle::none().fill('─').junction('─'))
        .header_separator(LineStyle::none().fill('─').junction('─'))
        .bottom_border(LineStyle::none().fill('─').junction('─'));
    let mut t = Table::new();
    t.load_style(STYLE);
    if wide {
        t.set_content_arrangement(ContentArrangement::Disabled);
    } else {
        t.set_content_arrangement(ContentArrangement::Dynamic)
            .set_width(TABLE_WIDTH);
    }
    t.set_header(header.iter().copied());
    for i in 1..header.len() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

/// The report's first lines: inputs, config, log time, and (`single`) the single-node
/// cache settings.
fn header(o: &mut String, r: &Report, single: bool) {
    let names: Vec<&str> = r.inputs.iter().map(|i| i.name.as_str()).collect();
    let not_traffic: u64 = r.inputs.iter().map(|i| i.not_traffic).sum();
    let not_traffic = if not_traffic > 0 {
        format!(", {} admin calls and events", thousands(not_traffic))
    } else {
        String::new()
    };
    let _ = writeln!(
        o,
        "cachet simulate: {} requests from {} ({} lines, {} bad{not_traffic})\nconfig {}",
        thousands(r.records),
        names.join(", "),
        thousands(r.lines),
        thousands(r.bad_lines),
        r.config_file
    );
    if let (Some(f), Some(l)) = (&r.first_time, &r.last_time) {
        let _ = writeln!(o, "log time {f} .. {l} ({})", duration(r.duration_seconds));
    }
    if !single {
        return;
    }
    let _ = writeln!(
        o,
        "cache {} per side, LRU by bytes (+{} B per object); gzip ratio {:.3}\n\
         baseline TTL {}, grace {}",
        bytes(r.settings.memory_bytes),
        r.settings.object_overhead_bytes,
        r.settings.gzip_ratio,
        r.settings
            .baseline_ttl_seconds
            .map_or_else(|| "= config's".to_owned(), |s| format!("{s}s")),
        r.settings
            .baseline_grace_seconds
            .map_or_else(|| "= config's".to_owned(), |s| format!("{s}s")),
    );
}

/// The terminal report: a few lines of context, then the overall, per-endpoint and
/// per-template tables (comfy-table, aligned under their headers). Every line fits
/// [`TABLE_WIDTH`] columns unless `wide`, which adds the per-endpoint bytes stored and
/// distinct objects; `≈` is explained under the tables when it appears.
pub fn text(r: &Report, wide: bool) -> String {
    let mut o = String::new();
    header(&mut o, r, true);
    let mut t = table(&["", "baseline", "config"], wide);
    for (label, bv, cv) in summary_rows(r) {
        t.add_row([label.to_owned(), bv, cv]);
    }
    let _ = writeln!(o, "\n{t}");
    endpoint_text(&mut o, r, wide);
    let _ = writeln!(
        o,
        "\ntop {} path templates of {} (hit ratio = (fresh + stale hits) / (requests − synth))",
        r.templates.len(),
        r.templates_seen
    );
    let mut t = table(
        &[
            "path template",
            "requests",
            "hit ratio\nbaseline",
            "hit ratio\nconfig",
            "origin req.\nbaseline",
            "origin req.\nconfig",
        ],
        wide,
    );
    for tp in &r.templates {
        t.add_row([
            tp.template.clone(),
            thousands(tp.requests),
            percent(tp.baseline.hit_ratio),
            template_config_label(tp),
            thousands(tp.baseline.origin_requests),
            thousands(tp.config.origin_requests),
        ]);
    }
    let _ = writeln!(o, "{t}");
    if !(r.baseline.distinct_exact && r.config.distinct_exact) {
        let _ = writeln!(o, "{}.", approx_note());
    }
    if r.bad_lines > 0 {
        let _ = writeln!(
            o,
            "\nbad lines: {} (first {} below)",
            thousands(r.bad_lines),
            r.bad_line_examples.len()
        );
        for b in &r.bad_line_examples {
            let _ = writeln!(o, "  {}:{}: {}", b.file, b.line, b.reason);
        }
    }
    o
}

/// The `--fleet` terminal report: the first lines, the fleet settings, then one row per
/// fleet size (edge nodes; requests; without the shield tier: edge hit ratio and origin
/// requests; with it: edge hit ratio, shield hit ratio, origin requests; origin requests
/// with / without), fitting [`TABLE_WIDTH`] columns; then the single node's figures for
/// reference.
pub fn fleet_text(r: &Report) -> String {
    let mut o = String::new();
    header(&mut o, r, false);
    let Some(fl) = &r.fleet else {
        return o;
    };
    let _ = writeln!(
        o,
        "fleet: edge nodes with {} cache each, LRU by bytes; requests spread {};\n\
         {} shield node{} ({} cache each) picked per cache key by Envoy's ring_hash \
         (xxHash64)",
        bytes(fl.edge_memory_bytes),
        match fl.balance {
            Balance::RoundRobin => "round-robin",
            Balance::Client => "by client address",
        },
        fl.shields,
        if fl.shields == 1 { "" } else { "s" },
        bytes(fl.shield_memory_bytes),
    );
    let mut t = table(
        &[
            "edge\nnodes",
            "requests",
            "no shield\nedge hits",
            "no shield\norigin req.",
            "shield\nedge hits",
            "shield\nshield hits",
            "shield\norigin req.",
            "origin req.\nshield/none",
        ],
        false,
    );
    for z in &fl.sizes {
        t.add_row([
            z.edges.to_string(),
            thousands(z.requests),
            percent(z.without_shield.edge.hit_ratio),
            thousands(z.without_shield.origin_requests),
            percent(z.with_shield.edge.hit_ratio),
            percent(z.with_shield.shield.hit_ratio),
            thousands(z.with_shield.origin_requests),
            format!("{:.3}", z.origin_ratio),
        ]);
    }
    let _ = writeln!(o, "\n{t}");
    let _ = writeln!(
        o,
        "hits = (fresh + stale hits) / requests not synthesized, at that tier (as cachet stat);\n\
         the shield tier sees the edges' misses and refreshes of cacheable requests; passes go\n\
         to the origin from the edge.\n\
         one node, config side (for reference): hit ratio {}, origin requests {}",
        percent(r.config.hit_ratio),
        thousands(r.config.origin_requests),
    );
    o
}

/// The per-endpoint table of [`text`]: hit ratio and origin requests, plus bytes stored
/// and distinct objects when `wide`.
fn endpoint_text(o: &mut String, r: &Report, wide: bool) {
    let _ = writeln!(
        o,
        "\nper endpoint (config route){}",
        if wide {
            ""
        } else {
            "; --wide adds bytes stored and distinct objects"
        }
    );
    let mut header = vec![
        "endpoint",
        "requests",
        "hit ratio\nbaseline",
        "hit ratio\nconfig",
        "origin req.\nbaseline",
        "origin req.\nconfig",
    ];
    if wide {
        header.extend([
            "bytes stored\nbaseline",
            "bytes stored\nconfig",
            "distinct obj.\nbaseline",
            "distinct obj.\nconfig",
        ]);
    }
    let mut t = table(&header, wide);
    for e in &r.endpoints {
        let cells = endpoint_cells(e);
        let shown = if wide { cells.len() } else { 5 };
        t.add_row(std::iter::once(e.endpoint.clone()).chain(cells.into_iter().take(shown)));
    }
    let _ = writeln!(o, "{t}");
}

/// The overall table's rows (text and HTML): label (sub-rows indented by two spaces),
/// baseline value, config value.
pub(crate) fn summary_rows(r: &Report) -> Vec<(&'static str, String, String)> {
    let (b, c) = (&r.baseline, &r.config);
    vec![
        ("requests", thousands(b.requests), thousands(c.requests)),
        ("hit ratio", percent(b.hit_ratio), percent(c.hit_ratio)),
        ("  fresh hits", thousands(b.hits), thousands(c.hits)),
        (
            "  stale hits (grace)",
            thousands(b.stale_hits),
            thousands(c.stale_hits),
        ),
        ("misses", thousands(b.misses), thousands(c.misses)),
        ("passes", thousands(b.passes), thousands(c.passes)),
        (
            "synthesized at the edge",
            thousands(b.synth),
            thousands(c.synth),
        ),
        (
            "origin requests",
            thousands(b.origin_requests),
            thousands(c.origin_requests),
        ),
        (
            "origin offload",
            percent(b.origin_offload),
            percent(c.origin_offload),
        ),
        ("origin bytes", bytes(b.origin_bytes), bytes(c.origin_bytes)),
        (
            "bytes stored (end)",
            bytes(b.bytes_stored),
            bytes(c.bytes_stored),
        ),
        (
            "bytes stored (peak)",
            bytes(b.peak_bytes_stored.unwrap_or(0)),
            bytes(c.peak_bytes_stored.unwrap_or(0)),
        ),
        (
            "objects stored (end)",
            thousands(b.objects_stored),
            thousands(c.objects_stored),
        ),
        ("distinct objects", distinct(b), distinct(c)),
        ("evictions", thousands(b.evictions), thousands(c.evictions)),
    ]
}

/// One endpoint's cells (text and HTML): requests, then baseline/config pairs of hit
/// ratio, origin requests, bytes stored and distinct objects.
pub(crate) fn endpoint_cells(e: &EndpointReport) -> [String; 9] {
    [
        thousands(e.config.requests),
        percent(e.baseline.hit_ratio),
        hit_ratio_label(&e.config),
        thousands(e.baseline.origin_requests),
        thousands(e.config.origin_requests),
        bytes(e.baseline.bytes_stored),
        bytes(e.config.bytes_stored),
        distinct(&e.baseline),
        distinct(&e.config),
    ]
}

fn distinct(s: &SideReport) -> String {
    if s.distinct_exact {
        thousands(s.distinct_objects)
    } else {
        format!("≈{}", thousands(s.distinct_objects))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(percent(0.5834), "58.3%");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(512 * 1024 * 1024), "512.0 MiB");
        assert_eq!(duration(0), "0s");
        assert_eq!(duration(10_000), "2h 46m 40s");
        assert_eq!(duration(90_061), "1d 1h 1m 1s");
    }
}
