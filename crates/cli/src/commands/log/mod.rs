//! `cachet log`: filters and formats the edge's access-log lines, in the spirit of
//! `varnishlog -q` and `varnishncsa -F`. Docs: docs/cli.md, `cachet log`.

pub mod format;
pub mod query;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use crate::access;
use crate::follow::{self, Input, Msg};

/// How many skipped lines are quoted on stderr.
const SHOWN_BAD: u64 = 5;

/// Arguments of `cachet log`.
#[derive(clap::Args)]
pub struct LogArgs {
    /// Access-log files (JSON lines, with or without Viceroy's `cachet_log :: ` prefix),
    /// read in order; none or `-` reads stdin.
    #[arg(value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Keep reading the (single) file as it grows, like `tail -F`.
    #[arg(long, short = 'f')]
    follow: bool,
    /// Only lines matching this query, e.g. `cache == MISS and status >= 500`
    /// (language: docs/cli.md).
    #[arg(long, short = 'q', value_name = "QUERY")]
    query: Option<String>,
    /// Print a combined-like line: `host - - [time] "METHOD url" status bytes`, time being
    /// when the request arrived (the line's `time`; lines without one: when it was read).
    #[arg(long, conflicts_with = "format")]
    ncsa: bool,
    /// Print each line with this format (varnishncsa-like %-escapes: docs/cli.md).
    #[arg(long = "format", short = 'F', value_name = "FORMAT")]
    format: Option<String>,
}

/// Counts for the summary.
#[derive(Default)]
struct Tally {
    lines: u64,
    matched: u64,
    skipped: u64,
}

/// Runs `cachet log`. Exit 0 done (skipped lines are reported, never fatal), 1 an input
/// could not be read to its end or stdout failed, 2 usage, query or format errors and
/// unopenable files.
pub fn run(args: &LogArgs) -> ExitCode {
    let query = match args.query.as_deref().map(query::parse).transpose() {
        Ok(q) => q,
        Err(e) => return usage(&format!("--query: {e}"), args.query.as_deref(), e.column),
    };
    let fmt_text = args.format.as_deref().or(args.ncsa.then_some(format::NCSA));
    let fmt = match fmt_text.map(format::parse).transpose() {
        Ok(f) => f,
        Err(e) => return usage(&format!("--format: {e}"), fmt_text, e.column),
    };
    if args.follow && args.files.len() != 1 {
        eprintln!("cachet: log: --follow takes exactly one FILE");
        return ExitCode::from(2);
    }
    let inputs: Vec<Input> = if args.files.is_empty() {
        vec![Input::Stdin]
    } else {
        args.files
            .iter()
            .map(|p| match p {
                p if p.as_os_str() == "-" => Input::Stdin,
                p if args.follow => Input::Follow(p.clone()),
                p => Input::File(p.clone()),
            })
            .collect()
    };
    // Open every file first, so a missing one stops the command before any output.
    let mut receivers = Vec::new();
    for input in &inputs {
        match follow::spawn(input) {
            Ok(rx) => receivers.push((input.name(), rx)),
            Err(e) => {
                eprintln!("cachet: log: {}: {e}", input.name());
                return ExitCode::from(2);
            }
        }
    }
    let mut tally = Tally::default();
    let mut out = std::io::stdout().lock();
    for (name, rx) in receivers {
        let mut line_no = 0u64;
        for msg in rx {
            let text = match msg {
                Msg::Line(l) => l,
                Msg::Note(n) => {
                    eprintln!("cachet: log: {n}");
                    continue;
                }
                Msg::Eof => break,
                Msg::Failed(e) => {
                    eprintln!("cachet: log: {e}");
                    return ExitCode::from(1);
                }
            };
            line_no += 1;
            tally.lines += 1;
            let Some(printed) = one_line(
                &text,
                query.as_ref(),
                fmt.as_ref(),
                &mut tally,
                &name,
                line_no,
            ) else {
                continue;
            };
            if writeln!(out, "{printed}")
                .and_then(|()| out.flush())
                .is_err()
            {
                // A closed pipe (`| head`) is the reader's choice, not a failure to report.
                return ExitCode::SUCCESS;
            }
        }
    }
    if tally.skipped > 0 {
        eprintln!(
            "cachet: log: {} lines, {} matched, {} skipped (not access-log JSON)",
            tally.lines, tally.matched, tally.skipped
        );
    }
    ExitCode::SUCCESS
}

/// Filters and formats one input line; `None` when it is skipped or does not match.
fn one_line(
    text: &str,
    query: Option<&query::Query>,
    fmt: Option<&format::Format>,
    tally: &mut Tally,
    name: &str,
    line_no: u64,
) -> Option<String> {
    let parsed =
        access::split(text).map(|json| (json, serde_json::from_str::<Map<String, Value>>(json)));
    let (json, obj) = match parsed {
        Some((json, Ok(obj))) => (json, obj),
        other => {
            tally.skipped += 1;
            if tally.skipped <= SHOWN_BAD {
                let why = match other {
                    Some((_, Err(e))) => format!("invalid JSON: {e}"),
                    _ => "not an access-log line".to_owned(),
                };
                eprintln!("cachet: log: {name}:{line_no}: {why}; skipped");
            }
            return None;
        }
    };
    if query.is_some_and(|q| !q.matches(&obj)) {
        return None;
    }
    tally.matched += 1;
    Some(match fmt {
        Some(f) => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
            f.render(&obj, now)
        }
        None => json.to_owned(),
    })
}

/// Prints a usage error with the offending text and a caret under its column; exit 2.
fn usage(message: &str, text: Option<&str>, column: usize) -> ExitCode {
    eprintln!("cachet: log: {message}");
    if let Some(t) = text {
        eprintln!("  {t}");
        eprintln!("  {}^", " ".repeat(column.saturating_sub(1)));
    }
    ExitCode::from(2)
}
