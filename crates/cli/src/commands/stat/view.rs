//! What `cachet stat` shows: the rows of a reading, as plain text, as one JSON object, or
//! drawn in the terminal with ratatui. Every function here is pure over a [`View`].

use std::time::Duration;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Cell, Gauge, Paragraph, Row, Table};

use super::rates::Rates;
use super::snapshot::Snapshot;
use crate::commands::simulate::table::{bytes, percent, thousands};

/// Counters in display order; others a source reports follow alphabetically.
const ORDER: &[&str] = &[
    "requests",
    "hits",
    "hits_local",
    "hits_shared",
    "hits_single",
    "hits_edge",
    "hits_shield",
    "misses",
    "passes",
    "stale",
    "synth",
    "errors",
    "collapsed_waiters",
    "collapse_key_full",
    "collapse_keys_full",
    "origin_fetches",
    "origin_errors",
    "refreshes",
    "revalidated",
    "banned",
    "bans_added",
    "purges",
    "feed_updates",
    "lurker_examined",
    "lurker_evicted",
    "lurker_passes",
    "evictions",
    "local_evictions",
    "workspace_overflows",
    "workspace_violations",
    "admin_denied",
    "store_conflicts",
    "bad_lines",
];

/// Gauges holding bytes (shown in binary units in text; raw numbers in JSON).
const BYTE_GAUGES: &[&str] = &["bytes_stored", "local_bytes", "workspace_watermark"];

/// One screenful: a reading, the rates since the previous one, and where it came from.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// `envoy` or `log`.
    pub kind: &'a str,
    /// The admin URL, the file, or `-` for stdin.
    pub input: &'a str,
    /// Since `cachet stat` started.
    pub elapsed: Duration,
    /// The latest reading.
    pub snapshot: &'a Snapshot,
    /// Rates since the previous reading (`None` after the first).
    pub rates: Option<&'a Rates>,
    /// The bound of `bytes_stored` (`envoy.shared_bytes` from `--config`), when known.
    pub bound: Option<u64>,
    /// The last problem or note (a failed read, a rotated file), shown under the table.
    pub status: Option<&'a str>,
    /// The input ended: this is the final summary.
    pub last: bool,
}

/// Counter names in display order.
fn counter_names(s: &Snapshot) -> Vec<&str> {
    let mut names: Vec<&str> = ORDER
        .iter()
        .copied()
        .filter(|n| s.counters.contains_key(*n))
        .collect();
    names.extend(
        s.counters
            .keys()
            .map(String::as_str)
            .filter(|n| !ORDER.contains(n)),
    );
    names
}

/// `(name, total, per second)` for every counter; per second is blank before two readings.
pub fn counter_rows(v: &View<'_>) -> Vec<[String; 3]> {
    counter_names(v.snapshot)
        .into_iter()
        .map(|n| {
            let rate = v
                .rates
                .and_then(|r| r.per_second.get(n))
                .map_or_else(String::new, |r| format!("{r:.1}"));
            [n.to_owned(), thousands(v.snapshot.counter(n)), rate]
        })
        .collect()
}

/// `(name, value)` for every gauge; `bytes_stored` against its bound when known.
pub fn gauge_rows(v: &View<'_>) -> Vec<[String; 2]> {
    v.snapshot
        .gauges
        .iter()
        .map(|(n, &val)| {
            let text = match (n.as_str(), v.bound) {
                ("bytes_stored", Some(b)) => format!("{} of {}", bytes(val), bytes(b)),
                (n, _) if BYTE_GAUGES.contains(&n) => bytes(val),
                _ => thousands(val),
            };
            [n.clone(), text]
        })
        .collect()
}

/// The header line: source, time, hit ratio overall and over the last interval.
pub fn header(v: &View<'_>) -> String {
    let ratio = v.snapshot.hit_ratio().map_or_else(|| "-".into(), percent);
    let recent = v.rates.map_or_else(String::new, |r| {
        format!(
            " (last {:.1}s: {})",
            r.interval_s,
            r.hit_ratio.map_or_else(|| "-".into(), percent)
        )
    });
    let end = if v.last { " · final" } else { "" };
    format!(
        "cachet stat · {} {} · {:.1}s{end} · hit ratio {ratio}{recent}",
        v.kind,
        v.input,
        v.elapsed.as_secs_f64()
    )
}

/// The plain-text form (stdout not a terminal, or `--plain`): header, counters, gauges.
pub fn text(v: &View<'_>) -> String {
    use std::fmt::Write as _;
    let mut o = header(v);
    o.push('\n');
    let _ = writeln!(o, "{:<24}{:>16}{:>12}", "counter", "total", "per s");
    for [n, t, r] in counter_rows(v) {
        let _ = writeln!(o, "{n:<24}{t:>16}{r:>12}");
    }
    for [n, val] in gauge_rows(v) {
        let _ = writeln!(o, "{n:<24}{val:>28}");
    }
    if let Some(s) = v.status {
        let _ = writeln!(o, "note: {s}");
    }
    o
}

/// The `--json` object (field names documented in docs/cli.md).
pub fn json(v: &View<'_>) -> serde_json::Value {
    serde_json::json!({
        "source": v.kind,
        "input": v.input,
        "elapsed_s": v.elapsed.as_secs_f64(),
        "final": v.last,
        "hit_ratio": v.snapshot.hit_ratio(),
        "totals": v.snapshot.counters,
        "gauges": v.snapshot.gauges,
        "bytes_bound": v.bound,
        "rates": v.rates.map(|r| serde_json::json!({
            "interval_s": r.interval_s,
            "hit_ratio": r.hit_ratio,
            "per_second": r.per_second,
        })),
        "note": v.status,
    })
}

/// Draws the live view: header, the bytes-stored gauge, counters and gauges side by side,
/// the last note and the key help.
pub fn draw(f: &mut Frame<'_>, v: &View<'_>) {
    let [head, bar, body, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(3),
        Constraint::Min(4),
        Constraint::Length(1),
    ])
    .areas(f.area());
    f.render_widget(
        Paragraph::new(header(v)).style(Style::new().add_modifier(Modifier::BOLD)),
        head,
    );
    let stored = v.snapshot.gauges.get("bytes_stored").copied();
    let (ratio, label) = match (stored, v.bound) {
        (Some(used), Some(bound)) if bound > 0 => {
            #[allow(clippy::cast_precision_loss, reason = "a display ratio")]
            let share = (used as f64 / bound as f64).clamp(0.0, 1.0);
            (
                share,
                format!("{} of {} ({})", bytes(used), bytes(bound), percent(share)),
            )
        }
        (Some(used), _) => (0.0, format!("{} (bound unknown: --config)", bytes(used))),
        (None, _) => (0.0, "not reported by this source".to_owned()),
    };
    f.render_widget(
        Gauge::default()
            .block(Block::default().borders(Borders::ALL).title("bytes stored"))
            .ratio(ratio)
            .label(label),
        bar,
    );
    let [left, right] =
        Layout::horizontal([Constraint::Percentage(60), Constraint::Percentage(40)]).areas(body);
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let aligned = |t: String| Cell::from(Line::from(t).right_aligned());
    let counters = Table::new(
        counter_rows(v)
            .into_iter()
            .map(|[n, t, r]| Row::new([Cell::from(n), aligned(t), aligned(r)])),
        [
            Constraint::Length(22),
            Constraint::Length(14),
            Constraint::Length(12),
        ],
    )
    .header(
        Row::new([
            Cell::from("counter"),
            aligned("total".into()),
            aligned("per s".into()),
        ])
        .style(bold),
    )
    .block(Block::default().borders(Borders::ALL).title("counters"));
    f.render_widget(counters, left);
    let gauges = Table::new(
        gauge_rows(v)
            .into_iter()
            .map(|r| Row::new(r.map(Cell::from))),
        [Constraint::Length(20), Constraint::Min(10)],
    )
    .header(Row::new(["gauge", "value"]).style(bold))
    .block(Block::default().borders(Borders::ALL).title("gauges"));
    f.render_widget(gauges, right);
    let note = v.status.map_or_else(String::new, |s| format!("{s} · "));
    f.render_widget(Paragraph::new(Line::from(format!("{note}q: quit"))), foot);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::stat::rates::rates;
    use crate::commands::stat::snapshot::from_envoy_stats;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    fn fixture() -> (Snapshot, Snapshot) {
        let a = from_envoy_stats(
            "wasmcustom.cachet.hits_local: 10\nwasmcustom.cachet.misses: 10\n\
             wasmcustom.cachet.bytes_stored: 1048576\n",
        );
        let b = from_envoy_stats(
            "wasmcustom.cachet.hits_local: 40\nwasmcustom.cachet.misses: 20\n\
             wasmcustom.cachet.zeta: 1\nwasmcustom.cachet.bytes_stored: 2097152\n\
             wasmcustom.cachet.objects: 12\n",
        );
        (a, b)
    }

    #[test]
    fn text_and_json_show_totals_rates_and_the_bound() {
        let (before, after) = fixture();
        let r = rates(&before, &after, Duration::from_secs(2)).unwrap();
        let v = View {
            kind: "envoy",
            input: "http://127.0.0.1:9901",
            elapsed: Duration::from_secs(4),
            snapshot: &after,
            rates: Some(&r),
            bound: Some(64 << 20),
            status: None,
            last: false,
        };
        let t = text(&v);
        assert!(t.starts_with("cachet stat · envoy http://127.0.0.1:9901 · 4.0s · hit ratio 66.7% (last 2.0s: 75.0%)\n"), "{t}");
        let rows: Vec<&str> = t.lines().map(str::trim_end).collect();
        assert!(
            rows.contains(&format!("{:<24}{:>16}{:>12}", "hits", "40", "15.0").as_str()),
            "{t}"
        );
        assert!(
            rows.contains(&format!("{:<24}{:>28}", "bytes_stored", "2.0 MiB of 64.0 MiB").as_str()),
            "{t}"
        );
        // Known names in their order, unknown ones after.
        let pos = |n: &str| t.find(&format!("\n{n} ")).unwrap();
        assert!(
            pos("requests") < pos("hits")
                && pos("hits") < pos("misses")
                && pos("misses") < pos("zeta")
        );
        let j = json(&v);
        assert_eq!(j["totals"]["hits_local"], 40);
        assert_eq!(j["gauges"]["bytes_stored"], 2_097_152);
        assert_eq!(j["bytes_bound"], 64 << 20);
        assert_eq!(j["rates"]["per_second"]["misses"], 5.0);
        assert_eq!(j["rates"]["interval_s"], 2.0);
        assert_eq!(j["final"], false);
    }

    #[test]
    fn the_live_view_draws_the_table_and_the_gauge() {
        let (_, b) = fixture();
        let v = View {
            kind: "log",
            input: "-",
            elapsed: Duration::from_secs(1),
            snapshot: &b,
            rates: None,
            bound: Some(4 << 20),
            status: Some("access.log: rotated"),
            last: false,
        };
        let mut term = Terminal::new(TestBackend::new(100, 30)).unwrap();
        term.draw(|f| draw(f, &v)).unwrap();
        let screen: String = term
            .backend()
            .buffer()
            .content()
            .chunks(100)
            .map(|row| {
                row.iter()
                    .map(ratatui::buffer::Cell::symbol)
                    .collect::<String>()
                    + "\n"
            })
            .collect();
        assert!(screen.contains("2.0 MiB of 4.0 MiB (50.0%)"), "{screen}");
        assert!(screen.contains("hits_local"), "{screen}");
        assert!(screen.contains("access.log: rotated · q: quit"), "{screen}");
    }
}
