//! The self-contained HTML report: inline CSS and SVG charts, no scripts, no network.
#![allow(
    clippy::many_single_char_names,
    reason = "SVG geometry reads best as x, y, w, h"
)]

use std::fmt::Write as _;

use cachet_sim::logfmt::{format_rfc3339, parse_rfc3339};
use cachet_sim::report::{BucketReport, Report, SideReport};

use super::table::{
    approx_note, bytes, duration, endpoint_cells, hit_ratio_label, percent, summary_rows,
    template_config_label, thousands,
};

/// Chart width in SVG user units.
const W: f64 = 860.0;
/// Left margin for axis labels and the rotated y-axis title.
const LEFT: f64 = 64.0;
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
    o.push_str("<h2>Origin requests per minute over time (UTC)</h2>\n");
    origin_chart(&mut o, r);
    o.push_str(
        "<h2>Per endpoint: outcome of each request</h2>\n<p class=\"meta\">Bars: share of \
         the endpoint's requests by outcome; right: its hit ratio.</p>\n",
    );
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
    let _ = writeln!(
        o,
        "<p class=\"meta\" id=\"notes\">Hit ratio = (fresh + stale hits) / (requests − synthesized answers), as cachet stat counts it. Origin \
         offload = 1 − origin requests / requests (synthesized answers never reach the \
         origin). Stored sizes are estimates: logged body bytes, times the gzip ratio where \
         the config compresses, plus the per-object overhead. {}. The model and its limits: \
         <code>docs/simulate.md</code> in the Cachet source tree.</p>\n</body>\n</html>",
        esc(&approx_note())
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
            "<tr data-row=\"{label}\"><td>{label}</td><td class=\"n base\">{bv}</td>\
             <td class=\"n conf\">{cv}</td></tr>"
        );
    }
    o.push_str("</table>\n");
}

/// Round tick intervals for the time axis, seconds: 1, 2, 5, 10, 15, 30 minutes, 1, 2, 3,
/// 6, 12 hours, 1, 2, 7, 14, 28 days.
const TICK_STEPS: [i64; 16] = [
    60, 120, 300, 600, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200, 86_400, 172_800, 604_800,
    1_209_600, 2_419_200,
];

/// Most ticks on a time axis.
const MAX_TICKS: usize = 8;

/// Ticks for a time axis over `[t0, t1]` (seconds since the epoch): the smallest step of
/// [`TICK_STEPS`] that gives at most `max` ticks, and the multiples of that step (UTC,
/// so hours and days fall on round clock times) inside the range. Steps beyond the list
/// double until they fit. Returns `(step, ticks)`; `ticks` is empty only when no multiple
/// of the step falls in the range.
pub fn round_ticks(t0: i64, t1: i64, max: usize) -> (i64, Vec<i64>) {
    let (t0, t1) = (t0.min(t1), t0.max(t1));
    // The first multiple of `step` at or after t0.
    let first_of = |step: i64| t0 + (step - t0.rem_euclid(step)) % step;
    let count = |step: i64| {
        let first = first_of(step);
        if first > t1 {
            0
        } else {
            usize::try_from((t1 - first) / step + 1).unwrap_or(usize::MAX)
        }
    };
    let mut step = TICK_STEPS
        .iter()
        .copied()
        .find(|&s| count(s) <= max.max(1))
        .unwrap_or(TICK_STEPS[TICK_STEPS.len() - 1]);
    while count(step) > max.max(1) {
        step *= 2;
    }
    let first = first_of(step);
    let ticks = std::iter::successors(Some(first), |t| Some(t + step))
        .take_while(|&t| t <= t1)
        .collect();
    (step, ticks)
}

/// A tick's label: `HH:MM` when the axis stays within one UTC day, else `MM-DD HH:MM`
/// (`MM-DD` for whole-day steps).
fn tick_label(t: i64, one_day: bool, step: i64) -> String {
    let full = format_rfc3339(t); // 2025-03-01T12:34:00Z
    if one_day {
        full[11..16].to_owned()
    } else if step % 86_400 == 0 {
        full[5..10].to_owned()
    } else {
        format!("{} {}", &full[5..10], &full[11..16])
    }
}

/// A step as `15 min`, `2 h`, `1 day`.
fn step_label(step: i64) -> String {
    match step {
        s if s % 86_400 == 0 => {
            let d = s / 86_400;
            format!("{d} day{}", if d == 1 { "" } else { "s" })
        }
        s if s % 3600 == 0 => format!("{} h", s / 3600),
        s => format!("{} min", s / 60),
    }
}

/// The timeline's geometry: the interval of log time each bucket covers and the x scale.
struct Axis {
    /// Per bucket: covered `[start, end)`, seconds since the epoch (the log's first and
    /// last records cut the first and last buckets).
    spans: Vec<(i64, i64)>,
    /// Bucket width, seconds.
    width: i64,
    /// The x domain: first record .. one second past the last.
    t0: i64,
    t1: i64,
}

impl Axis {
    fn new(r: &Report) -> Option<Self> {
        let first = parse_rfc3339(r.first_time.as_deref()?)?;
        let end = parse_rfc3339(r.last_time.as_deref()?)? + 1;
        let width = r.timeline.bucket_seconds.max(1);
        let spans = r
            .timeline
            .buckets
            .iter()
            .map(|b| {
                let s = parse_rfc3339(&b.start).unwrap_or(first);
                let (a, z) = (s.max(first), (s + width).min(end));
                (a, z.max(a + 1))
            })
            .collect::<Vec<_>>();
        if spans.is_empty() {
            return None;
        }
        Some(Self {
            spans,
            width,
            t0: first,
            t1: end.max(first + 1),
        })
    }

    /// Whether bucket `i` covers less than a full bucket width (first or last bucket).
    fn partial(&self, i: usize) -> bool {
        let (a, z) = self.spans[i];
        z - a < self.width
    }

    fn x(&self, t: f64) -> f64 {
        #[allow(clippy::cast_precision_loss, reason = "display only")]
        let (t0, t1) = (self.t0 as f64, self.t1 as f64);
        LEFT + (W - LEFT - RIGHT) * (t - t0) / (t1 - t0)
    }

    /// The x of bucket `i`: the middle of the time it covers.
    fn x_of(&self, i: usize) -> f64 {
        let (a, z) = self.spans[i];
        #[allow(clippy::cast_precision_loss, reason = "display only")]
        self.x((a + z) as f64 / 2.0)
    }

    /// Tick marks, labels and the axis caption under a plot whose bottom is at `bottom`.
    fn draw(&self, o: &mut String, top: f64, bottom: f64) {
        let (step, ticks) = round_ticks(self.t0, self.t1 - 1, MAX_TICKS);
        let one_day = self.t0.div_euclid(86_400) == (self.t1 - 1).div_euclid(86_400);
        for &t in &ticks {
            #[allow(clippy::cast_precision_loss, reason = "display only")]
            let x = self.x(t as f64);
            let _ = writeln!(
                o,
                "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{top:.1}\" y2=\"{:.1}\" stroke=\"#eaeef2\"/>\
                 <text class=\"xtick\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                bottom + 4.0,
                bottom + 16.0,
                tick_label(t, one_day, step)
            );
        }
        let day = if one_day {
            format!(", {}", &format_rfc3339(self.t0)[..10])
        } else {
            String::new()
        };
        let _ = writeln!(
            o,
            "<text class=\"xcaption\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">time (UTC{day}); \
             ticks every {}; one point per {} bucket</text>",
            W - RIGHT,
            bottom + 32.0,
            step_label(step),
            duration(u64::try_from(self.width).unwrap_or(0))
        );
    }
}

fn legend(o: &mut String, y: f64, partial_note: Option<&str>) {
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
    if let Some(note) = partial_note {
        let _ = writeln!(
            o,
            "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#57606a\" \
             stroke-width=\"2\" stroke-dasharray=\"4 3\"/><circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" \
             fill=\"#fff\" stroke=\"#57606a\"/><text class=\"partial-note\" x=\"{:.1}\" y=\"{y:.1}\">{}</text>",
            LEFT + 170.0,
            LEFT + 194.0,
            y - 4.0,
            y - 4.0,
            LEFT + 194.0,
            y - 4.0,
            LEFT + 202.0,
            esc(note)
        );
    }
}

/// One series: solid between full buckets, dashed into and out of a partial bucket,
/// whose point is a hollow circle; its `<title>` says how much time it covers, then
/// `notes[i]` when given.
fn series(o: &mut String, axis: &Axis, ys: &[f64], color: &str, notes: Option<&[String]>) {
    let pts: Vec<(f64, f64)> = ys
        .iter()
        .enumerate()
        .map(|(i, &y)| (axis.x_of(i), y))
        .collect();
    let mut run: Vec<(f64, f64)> = Vec::new();
    let flush = |o: &mut String, run: &mut Vec<(f64, f64)>| {
        if run.len() > 1 {
            o.push_str("<polyline fill=\"none\" stroke-width=\"2\" stroke=\"");
            o.push_str(color);
            o.push_str("\" points=\"");
            for (x, y) in run.iter() {
                let _ = write!(o, "{x:.1},{y:.1} ");
            }
            o.push_str("\"/>\n");
        }
        run.clear();
    };
    for (i, &p) in pts.iter().enumerate() {
        if axis.partial(i) {
            flush(o, &mut run);
            for j in [i.wrapping_sub(1), i + 1] {
                if let Some(&(x, y)) = pts.get(j) {
                    let _ = writeln!(
                        o,
                        "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{y:.1}\" stroke=\"{color}\" \
                         stroke-width=\"2\" stroke-dasharray=\"4 3\"/>",
                        p.0, p.1
                    );
                }
            }
            let (a, z) = axis.spans[i];
            let _ = writeln!(
                o,
                "<circle class=\"partial\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"#fff\" stroke=\"{color}\">\
                 <title>partial bucket: {} of {} ({} .. {}){}</title></circle>",
                p.0,
                p.1,
                duration(u64::try_from(z - a).unwrap_or(0)),
                duration(u64::try_from(axis.width).unwrap_or(0)),
                format_rfc3339(a),
                format_rfc3339(z - 1),
                notes
                    .and_then(|n| n.get(i))
                    .map_or_else(String::new, |n| format!("; {}", esc(n)))
            );
        } else {
            run.push(p);
        }
    }
    flush(o, &mut run);
}

/// The chart's `<svg>` start and title.
fn svg_open(o: &mut String, height: f64, title: &str) {
    let _ = writeln!(
        o,
        "<svg viewBox=\"0 0 {W} {height:.0}\" width=\"{W}\" role=\"img\" \
         xmlns=\"http://www.w3.org/2000/svg\"><title>{}</title>",
        esc(title)
    );
}

/// A horizontal grid line at `y` labelled `label` on the left.
fn grid(o: &mut String, y: f64, label: &str) {
    let _ = writeln!(
        o,
        "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#d0d7de\"/>\
         <text class=\"ytick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
        W - RIGHT,
        LEFT - 6.0,
        y + 4.0
    );
}

/// A y-axis title, rotated along the axis.
fn y_title(o: &mut String, top: f64, bottom: f64, text: &str) {
    let _ = writeln!(
        o,
        "<text class=\"ytitle\" transform=\"translate(12 {:.1}) rotate(-90)\" \
         text-anchor=\"middle\">{}</text>",
        f64::midpoint(top, bottom),
        esc(text)
    );
}

/// The legend's note on partial buckets, when the chart has one.
fn partial_note(axis: &Axis, scaled: bool) -> Option<&'static str> {
    (0..axis.spans.len())
        .any(|i| axis.partial(i))
        .then_some(if scaled {
            "partial bucket (less than a full bucket of log), scaled to a per-minute rate"
        } else {
            "partial bucket (less than a full bucket of log)"
        })
}

fn timeline_chart(o: &mut String, r: &Report) {
    let Some(axis) = Axis::new(r) else {
        o.push_str("<p class=\"meta\">No requests.</p>\n");
        return;
    };
    let (top, h) = (28.0, 200.0);
    let bottom = top + h;
    svg_open(o, bottom + 40.0, "Hit ratio per bucket, baseline vs config");
    for pct in [0u32, 25, 50, 75, 100] {
        grid(o, bottom - h * f64::from(pct) / 100.0, &format!("{pct}%"));
    }
    y_title(o, top, bottom, "hit ratio");
    axis.draw(o, top, bottom);
    let ys = |f: fn(&BucketReport) -> f64| -> Vec<f64> {
        r.timeline
            .buckets
            .iter()
            .map(|b| bottom - h * f(b))
            .collect()
    };
    series(
        o,
        &axis,
        &ys(|b| b.baseline_hit_ratio),
        BASELINE_COLOR,
        None,
    );
    series(o, &axis, &ys(|b| b.config_hit_ratio), CONFIG_COLOR, None);
    legend(o, 14.0, partial_note(&axis, false));
    o.push_str("</svg>\n");
}

/// The smallest of 1, 2, 2.5, 5 × 10^k at least `v` (at least 1): a round axis maximum.
pub fn nice_ceiling(v: f64) -> f64 {
    let v = v.max(1.0);
    let mut p = 10f64.powf(v.log10().floor());
    loop {
        for m in [1.0, 2.0, 2.5, 5.0] {
            if m * p >= v * (1.0 - 1e-12) {
                return m * p;
            }
        }
        p *= 10.0;
    }
}

/// Origin requests per minute in each bucket: its count over the log time it covers,
/// so a partial first or last bucket is a rate, not a drop. Per bucket: (baseline,
/// config).
fn origin_rates(r: &Report, axis: &Axis) -> Vec<(f64, f64)> {
    r.timeline
        .buckets
        .iter()
        .zip(&axis.spans)
        .map(|(b, &(a, z))| {
            #[allow(clippy::cast_precision_loss, reason = "display only")]
            let per_min = |n: u64| n as f64 * 60.0 / (z - a) as f64;
            (
                per_min(b.baseline_origin_requests),
                per_min(b.config_origin_requests),
            )
        })
        .collect()
}

fn origin_chart(o: &mut String, r: &Report) {
    let Some(axis) = Axis::new(r) else {
        return;
    };
    let (top, h) = (28.0, 160.0);
    let bottom = top + h;
    let rates = origin_rates(r, &axis);
    let max = nice_ceiling(rates.iter().map(|&(b, c)| b.max(c)).fold(0.0, f64::max));
    svg_open(
        o,
        bottom + 40.0,
        "Origin requests per minute, baseline vs config",
    );
    for k in 0..=4u32 {
        let v = max * f64::from(k) / 4.0;
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "display only, v ≥ 0"
        )]
        let label = if (v - v.round()).abs() < 1e-9 {
            thousands(v.round() as u64)
        } else {
            format!("{v:.1}")
        };
        grid(o, bottom - h * v / max, &label);
    }
    y_title(o, top, bottom, "origin requests per minute");
    axis.draw(o, top, bottom);
    let base: Vec<f64> = rates.iter().map(|&(b, _)| bottom - h * b / max).collect();
    let conf: Vec<f64> = rates.iter().map(|&(_, c)| bottom - h * c / max).collect();
    let notes = |side: &str, f: fn(&BucketReport) -> u64, rate: fn(&(f64, f64)) -> f64| {
        r.timeline
            .buckets
            .iter()
            .zip(&rates)
            .map(|(b, r)| {
                format!(
                    "{side}: {} origin requests = {:.1} per minute",
                    thousands(f(b)),
                    rate(r)
                )
            })
            .collect::<Vec<_>>()
    };
    let base_notes = notes("baseline", |b| b.baseline_origin_requests, |r| r.0);
    let conf_notes = notes("config", |b| b.config_origin_requests, |r| r.1);
    series(o, &axis, &base, BASELINE_COLOR, Some(&base_notes));
    series(o, &axis, &conf, CONFIG_COLOR, Some(&conf_notes));
    legend(o, 14.0, partial_note(&axis, true));
    o.push_str("</svg>\n");
}

fn endpoint_bars(o: &mut String, r: &Report) {
    let label_w = 190.0;
    let bar_w = W - label_w - 70.0;
    let row_h = 18.0;
    let group_h = 2.0 * row_h + 10.0;
    let count = r.endpoints.len();
    #[allow(
        clippy::cast_precision_loss,
        reason = "at most a few hundred endpoints"
    )]
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
    let _ = writeln!(
        o,
        "<text x=\"{:.1}\" y=\"15\" font-weight=\"600\">hit ratio</text>",
        label_w + bar_w + 6.0
    );
    for (k, e) in r.endpoints.iter().enumerate() {
        #[allow(clippy::cast_precision_loss, reason = "small index")]
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
                #[allow(clippy::cast_precision_loss, reason = "display only")]
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
                "<text class=\"ep-hit\" x=\"{:.1}\" y=\"{:.1}\">{}<title>hit ratio</title></text>",
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
         <th class=\"n\">distinct objects<br>baseline</th><th class=\"n\">distinct objects<br>config</th></tr>\n",
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

    /// 2025-03-01T00:00:00Z.
    const T: i64 = 1_740_787_200;

    #[test]
    fn ticks_fall_on_round_times() {
        // Two hours from 00:00:00 to 01:59:27: every 15 minutes, 8 ticks.
        let (step, ticks) = round_ticks(T, T + 7167, MAX_TICKS);
        assert_eq!(step, 900);
        assert_eq!(ticks.len(), 8);
        assert_eq!((ticks[0], ticks[7]), (T, T + 7 * 900));
        // An odd start: the first tick is the next multiple, not the start.
        let (step, ticks) = round_ticks(T + 437, T + 437 + 3 * 3600, MAX_TICKS);
        assert_eq!(step, 1800);
        assert_eq!(ticks[0], T + 1800);
        assert!(ticks.iter().all(|t| t % 1800 == 0));
        // 12 minutes: every 2 minutes.
        assert_eq!(round_ticks(T, T + 725, MAX_TICKS).0, 120);
        // Ten weeks: past the list, the step doubles from 28 days.
        let (step, ticks) = round_ticks(T, T + 70 * 86_400, 2);
        assert!(step >= 2_419_200 && ticks.len() <= 2);
        // Every span, every count bound: round steps, at most `max` ticks, in range.
        for span in [1, 59, 60, 61, 599, 3600, 7167, 86_399, 86_400, 1_000_000] {
            for max in 1..=10 {
                let (step, ticks) = round_ticks(T + 13, T + 13 + span, max);
                assert!(ticks.len() <= max, "{span} {max}");
                assert!(step % 60 == 0);
                assert!(
                    ticks
                        .iter()
                        .all(|t| t % step == 0 && (T + 13..=T + 13 + span).contains(t))
                );
            }
        }
    }

    #[test]
    fn tick_labels_and_steps() {
        assert_eq!(tick_label(T + 5400, true, 900), "01:30");
        assert_eq!(tick_label(T + 5400, false, 900), "03-01 01:30");
        assert_eq!(tick_label(T + 86_400, false, 86_400), "03-02");
        assert_eq!(step_label(900), "15 min");
        assert_eq!(step_label(7200), "2 h");
        assert_eq!(step_label(86_400), "1 day");
        assert_eq!(step_label(172_800), "2 days");
    }

    #[test]
    fn nice_ceilings() {
        assert!((nice_ceiling(0.0) - 1.0).abs() < 1e-9);
        assert!((nice_ceiling(1.3) - 2.0).abs() < 1e-9);
        assert!((nice_ceiling(2.2) - 2.5).abs() < 1e-9);
        assert!((nice_ceiling(1477.0) - 2000.0).abs() < 1e-9);
        assert!((nice_ceiling(2000.0) - 2000.0).abs() < 1e-9);
        assert!((nice_ceiling(7001.0) - 10_000.0).abs() < 1e-9);
    }

    #[test]
    fn escapes() {
        assert_eq!(
            esc("<a href=\"x\">&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
    }
}
