//! The self-contained HTML report: inline CSS and SVG charts, no scripts, no network.
#![allow(clippy::many_single_char_names)] // reason: SVG geometry reads best as x, y, w, h

use std::fmt::Write as _;

use super::report::{
    Report, SideReport, bytes, duration, endpoint_cells, hit_ratio_label, percent, summary_rows,
    template_config_label, thousands,
};

/// Chart width in SVG user units.
const W: f64 = 860.0;
/// Left margin for axis labels.
const LEFT: f64 = 48.0;
/// Right margin.
const RIGHT: f64 = 16.0;

const BASELINE_COLOR: &str = "#9a9a9a";
const CONFIG_COLOR: &str = "#1f6feb";

/// A bar segment: label, color, and its count on a side.
type Segment = (&'static str, &'static str, fn(&SideReport) -> u64);

/// Bar segments, in drawing order.
const SEGMENTS: [Segment; 5] = [
    ("fresh hit", "#2da44e", |s| s.hits),
    ("stale hit", "#8ddb9f", |s| s.stale_hits),
    ("miss", "#e16f24", |s| s.misses),
    ("pass", "#b0b7bf", |s| s.passes),
    ("synth", "#8250df", |s| s.synth),
];

/// Escapes text for HTML element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

/// Renders the report as one HTML document.
pub fn render(r: &Report) -> String {
    let mut o = String::with_capacity(64 * 1024);
    let names: Vec<String> = r.inputs.iter().map(|i| esc(&i.name)).collect();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>cachet simulate: {}</title>\n<style>{CSS}</style>\n</head>\n<body>\n\
         <h1>Cachet replay: baseline vs config</h1>\n",
        names.join(", ")
    );
    let _ = write!(
        o,
        "<p class=\"meta\">{} requests from {} ({} lines, {} bad) with config <code>{}</code>",
        thousands(r.records),
        names.join(", "),
        thousands(r.lines),
        thousands(r.bad_lines),
        esc(&r.config_file)
    );
    if let (Some(f), Some(l)) = (&r.first_time, &r.last_time) {
        let _ = write!(
            o,
            "; log time {} .. {} ({})",
            esc(f),
            esc(l),
            duration(r.duration_seconds)
        );
    }
    let _ = writeln!(
        o,
        ".<br>Cache {} per side, LRU by bytes (+{} B per object); gzip ratio {:.3}; baseline: \
         key = host + raw URL + full User-Agent, no compression, TTL {}.</p>",
        bytes(r.settings.memory_bytes),
        r.settings.object_overhead_bytes,
        r.settings.gzip_ratio,
        r.settings
            .baseline_ttl_seconds
            .map_or_else(|| "as the config's".to_owned(), |s| format!("{s} s")),
    );
    summary(&mut o, r);
    o.push_str("<h2>Hit ratio over time (UTC)</h2>\n");
    timeline_chart(&mut o, r);
    o.push_str("<h2>Origin requests over time (UTC)</h2>\n");
    origin_chart(&mut o, r);
    o.push_str("<h2>Per endpoint: hits and misses</h2>\n");
    endpoint_bars(&mut o, r);
    endpoint_table(&mut o, r);
    template_table(&mut o, r);
    if r.bad_lines > 0 {
        let _ = writeln!(
            o,
            "<h2>Bad lines</h2>\n<p>{} lines could not be read (first {} shown); they were \
             skipped.</p>\n<table><tr><th>file</th><th>line</th><th>reason</th></tr>",
            thousands(r.bad_lines),
            r.bad_line_examples.len()
        );
        for b in &r.bad_line_examples {
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
                esc(&b.file),
                b.line,
                esc(&b.reason)
            );
        }
        o.push_str("</table>\n");
    }
    o.push_str(
        "<p class=\"meta\">Hit ratio = (fresh + stale hits) / requests. Origin offload = 1 − \
         origin requests / requests (synthesized answers never reach the origin). Stored \
         sizes are estimates: see docs/simulate.md.</p>\n</body>\n</html>\n",
    );
    o
}

const CSS: &str = "body{font:14px/1.45 -apple-system,BlinkMacSystemFont,'Segoe UI',sans-serif;\
margin:2em auto;max-width:1100px;padding:0 1em;color:#1f2328}h1{font-size:22px}\
h2{font-size:17px;margin-top:2em}table{border-collapse:collapse;margin:.5em 0}\
th,td{padding:3px 10px;border-bottom:1px solid #d0d7de;text-align:left}\
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}.meta{color:#57606a}\
.base{color:#6e7781}.conf{color:#1f6feb;font-weight:600}svg{max-width:100%;height:auto}\
svg text{font:12px sans-serif;fill:#57606a}code{font-size:13px}";

fn summary(o: &mut String, r: &Report) {
    o.push_str(
        "<table><tr><th></th><th class=\"n\">baseline</th><th class=\"n\">config</th></tr>\n",
    );
    for (label, bv, cv) in summary_rows(r) {
        let label = esc(label.trim_start());
        let _ = writeln!(
            o,
            "<tr><td>{label}</td><td class=\"n base\">{bv}</td><td class=\"n conf\">{cv}</td></tr>"
        );
    }
    o.push_str("</table>\n");
}

/// X positions of `n` buckets across the plot.
fn x_of(i: usize, n: usize) -> f64 {
    #[allow(clippy::cast_precision_loss)] // reason: at most a few hundred buckets
    let (i, n) = (i as f64, n.max(2) as f64);
    LEFT + (W - LEFT - RIGHT) * i / (n - 1.0)
}

/// Time-axis labels under a chart of height `h` (plot bottom at `bottom`).
fn time_axis(o: &mut String, r: &Report, bottom: f64) {
    let n = r.timeline.buckets.len();
    if n == 0 {
        return;
    }
    let ticks = 6.min(n);
    for k in 0..ticks {
        let i = if ticks == 1 {
            0
        } else {
            k * (n - 1) / (ticks - 1)
        };
        let label = &r.timeline.buckets[i].start;
        // `2025-03-01T12:34:00Z` → `03-01 12:34` (UTC).
        let short = label
            .get(5..16)
            .map_or_else(|| label.clone(), |s| s.replace('T', " "));
        let anchor = if k == 0 {
            "start"
        } else if k + 1 == ticks {
            "end"
        } else {
            "middle"
        };
        let _ = writeln!(
            o,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{}</text>",
            x_of(i, n),
            bottom + 16.0,
            esc(&short)
        );
    }
}

fn legend(o: &mut String, y: f64) {
    let _ = writeln!(
        o,
        "<rect x=\"{LEFT}\" y=\"{:.1}\" width=\"12\" height=\"3\" fill=\"{BASELINE_COLOR}\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\">baseline</text>\
         <rect x=\"{:.1}\" y=\"{:.1}\" width=\"12\" height=\"3\" fill=\"{CONFIG_COLOR}\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\">config</text>",
        y - 4.0,
        LEFT + 16.0,
        y,
        LEFT + 90.0,
        y - 4.0,
        LEFT + 106.0,
        y
    );
}

fn polyline(o: &mut String, points: &[(f64, f64)], color: &str) {
    o.push_str("<polyline fill=\"none\" stroke-width=\"2\" stroke=\"");
    o.push_str(color);
    o.push_str("\" points=\"");
    for (x, y) in points {
        let _ = write!(o, "{x:.1},{y:.1} ");
    }
    o.push_str("\"/>\n");
}

fn timeline_chart(o: &mut String, r: &Report) {
    let (top, h) = (24.0, 200.0);
    let bottom = top + h;
    let n = r.timeline.buckets.len();
    let _ = writeln!(
        o,
        "<svg viewBox=\"0 0 {W} {:.0}\" width=\"{W}\" role=\"img\" xmlns=\"http://www.w3.org/2000/svg\">\
         <title>Hit ratio per {} bucket, baseline vs config</title>",
        bottom + 26.0,
        duration(u64::try_from(r.timeline.bucket_seconds).unwrap_or(0))
    );
    for pct in [0u32, 25, 50, 75, 100] {
        let y = bottom - h * f64::from(pct) / 100.0;
        let _ = writeln!(
            o,
            "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#d0d7de\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{pct}%</text>",
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0
        );
    }
    let pts = |f: fn(&super::report::BucketReport) -> f64| -> Vec<(f64, f64)> {
        r.timeline
            .buckets
            .iter()
            .enumerate()
            .map(|(i, b)| (x_of(i, n), bottom - h * f(b)))
            .collect()
    };
    polyline(o, &pts(|b| b.baseline_hit_ratio), BASELINE_COLOR);
    polyline(o, &pts(|b| b.config_hit_ratio), CONFIG_COLOR);
    legend(o, 14.0);
    time_axis(o, r, bottom);
    o.push_str("</svg>\n");
}

fn origin_chart(o: &mut String, r: &Report) {
    let (top, h) = (24.0, 160.0);
    let bottom = top + h;
    let n = r.timeline.buckets.len();
    let max = r
        .timeline
        .buckets
        .iter()
        .map(|b| b.baseline_origin_requests.max(b.config_origin_requests))
        .max()
        .unwrap_or(0)
        .max(1);
    let _ = writeln!(
        o,
        "<svg viewBox=\"0 0 {W} {:.0}\" width=\"{W}\" role=\"img\" xmlns=\"http://www.w3.org/2000/svg\">\
         <title>Origin requests per {} bucket, baseline vs config</title>",
        bottom + 26.0,
        duration(u64::try_from(r.timeline.bucket_seconds).unwrap_or(0))
    );
    #[allow(clippy::cast_precision_loss)] // reason: display only
    let scale = |v: u64| bottom - h * v as f64 / max as f64;
    for frac in [0u64, 2, 4] {
        let v = max * frac / 4;
        let y = scale(v);
        let _ = writeln!(
            o,
            "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#d0d7de\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            thousands(v)
        );
    }
    let base: Vec<(f64, f64)> = r
        .timeline
        .buckets
        .iter()
        .enumerate()
        .map(|(i, b)| (x_of(i, n), scale(b.baseline_origin_requests)))
        .collect();
    let conf: Vec<(f64, f64)> = r
        .timeline
        .buckets
        .iter()
        .enumerate()
        .map(|(i, b)| (x_of(i, n), scale(b.config_origin_requests)))
        .collect();
    polyline(o, &base, BASELINE_COLOR);
    polyline(o, &conf, CONFIG_COLOR);
    legend(o, 14.0);
    time_axis(o, r, bottom);
    o.push_str("</svg>\n");
}

fn endpoint_bars(o: &mut String, r: &Report) {
    let label_w = 190.0;
    let bar_w = W - label_w - 70.0;
    let row_h = 18.0;
    let group_h = 2.0 * row_h + 10.0;
    let count = r.endpoints.len();
    #[allow(clippy::cast_precision_loss)] // reason: at most a few hundred endpoints
    let height = 30.0 + group_h * count as f64;
    let _ = writeln!(
        o,
        "<svg viewBox=\"0 0 {W} {height:.0}\" width=\"{W}\" role=\"img\" xmlns=\"http://www.w3.org/2000/svg\">\
         <title>Per endpoint share of fresh hits, stale hits, misses, passes and synthesized answers; baseline above config</title>"
    );
    let mut x = label_w;
    for (name, color, _) in SEGMENTS {
        let _ = write!(
            o,
            "<rect x=\"{x:.1}\" y=\"6\" width=\"10\" height=\"10\" fill=\"{color}\"/>\
             <text x=\"{:.1}\" y=\"15\">{name}</text>",
            x + 14.0
        );
        x += 90.0;
    }
    o.push('\n');
    for (k, e) in r.endpoints.iter().enumerate() {
        #[allow(clippy::cast_precision_loss)] // reason: small index
        let y0 = 30.0 + group_h * k as f64;
        let _ = writeln!(
            o,
            "<text x=\"0\" y=\"{:.1}\">{}</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"10\">base</text>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"10\">config</text>",
            y0 + row_h,
            esc(&e.endpoint),
            label_w - 4.0,
            y0 + 12.0,
            label_w - 4.0,
            y0 + row_h + 12.0
        );
        for (row, side) in [(0.0, &e.baseline), (1.0, &e.config)] {
            let y = y0 + row * row_h;
            let total = side.requests.max(1);
            let mut x = label_w;
            for (name, color, get) in SEGMENTS {
                let v = get(side);
                if v == 0 {
                    continue;
                }
                #[allow(clippy::cast_precision_loss)] // reason: display only
                let w = bar_w * v as f64 / total as f64;
                let _ = write!(
                    o,
                    "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"{color}\">\
                     <title>{}: {name} {} of {}</title></rect>",
                    row_h - 3.0,
                    esc(&e.endpoint),
                    thousands(v),
                    thousands(side.requests)
                );
                x += w;
            }
            let _ = writeln!(
                o,
                "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                label_w + bar_w + 6.0,
                y + 12.0,
                hit_ratio_label(side)
            );
        }
    }
    o.push_str("</svg>\n");
}

fn endpoint_table(o: &mut String, r: &Report) {
    o.push_str(
        "<table><tr><th>endpoint</th><th class=\"n\">requests</th>\
         <th class=\"n\">hit ratio<br>baseline</th><th class=\"n\">hit ratio<br>config</th>\
         <th class=\"n\">origin req.<br>baseline</th><th class=\"n\">origin req.<br>config</th>\
         <th class=\"n\">bytes stored<br>baseline</th><th class=\"n\">bytes stored<br>config</th>\
         <th class=\"n\">objects<br>baseline</th><th class=\"n\">objects<br>config</th></tr>\n",
    );
    for e in &r.endpoints {
        let [req, pairs @ ..] = endpoint_cells(e);
        let _ = write!(
            o,
            "<tr><td>{}</td><td class=\"n\">{req}</td>",
            esc(&e.endpoint)
        );
        for (i, cell) in pairs.iter().enumerate() {
            let side = if i % 2 == 0 { "base" } else { "conf" };
            let _ = write!(o, "<td class=\"n {side}\">{}</td>", esc(cell));
        }
        o.push_str("</tr>\n");
    }
    o.push_str("</table>\n");
}

fn template_table(o: &mut String, r: &Report) {
    let _ = writeln!(
        o,
        "<h2>Top path templates</h2>\n<p class=\"meta\">{} of {} templates (host + first two \
         path segments; id-like segments as <code>{{id}}</code>).</p>\n\
         <table><tr><th>template</th><th class=\"n\">requests</th><th class=\"n\">hit ratio<br>baseline</th>\
         <th class=\"n\">hit ratio<br>config</th><th class=\"n\">origin req.<br>baseline</th>\
         <th class=\"n\">origin req.<br>config</th></tr>",
        r.templates.len(),
        r.templates_seen
    );
    for t in &r.templates {
        let _ = writeln!(
            o,
            "<tr><td><code>{}</code></td><td class=\"n\">{}</td><td class=\"n base\">{}</td>\
             <td class=\"n conf\">{}</td><td class=\"n base\">{}</td><td class=\"n conf\">{}</td></tr>",
            esc(&t.template),
            thousands(t.requests),
            percent(t.baseline.hit_ratio),
            template_config_label(t),
            thousands(t.baseline.origin_requests),
            thousands(t.config.origin_requests),
        );
    }
    o.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        assert_eq!(
            esc("<a href=\"x\">&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
    }
}
