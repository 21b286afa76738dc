//! `cachet ban`: `check` (offline scenario evaluation), `parse` (expression check) and
//! `add` (a ban for an Envoy fleet, through `crate::fleet`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use cachet_ban::{BanError, BanExpr, Scenario};
use clap::Subcommand;
use serde::Serialize;

use crate::fleet::{self, FleetTarget};

// The `cachet ban` subcommands.
#[derive(Subcommand)]
pub enum BanCommand {
    /// Evaluates a JSON scenario (objects, bans, lookups) offline and prints the JSON
    /// report: one entry per ban (accepted, lurker-friendly) and per lookup (banned/kept).
    Check {
        /// The scenario file (`-` for stdin).
        #[arg(long, value_name = "FILE.json")]
        scenario: PathBuf,
    },
    /// Adds a ban to an Envoy fleet (docs/fleet.md): written to its etcd ban log (under
    /// the fleet's key prefix: `--etcd-prefix` or the nodes' `--config`), or sent to any
    /// node's admin API (token from $CACHET_ADMIN_TOKEN). Prints the ban with its
    /// fleet-wide id; exit 1 when refused or unreachable, 2 for usage errors.
    Add {
        /// The expression (Varnish syntax), e.g. `obj.http.x-url ~ ^/blog/bob/`.
        #[arg(value_name = "EXPR", allow_hyphen_values = true)]
        expr: String,
        #[command(flatten)]
        to: FleetTarget,
        #[command(flatten)]
        prefix: fleet::PrefixArgs,
    },
    /// Parses a ban expression: prints its canonical form and whether it is
    /// lurker-friendly, or the error with its column; exit 1 when refused.
    Parse {
        /// The expression, e.g. `obj.http.surrogate-key ~ "(^|\s)post-42(\s|$)"`
        /// (`-` reads it from stdin).
        #[arg(value_name = "EXPR", allow_hyphen_values = true)]
        expr: String,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `cachet ban …`.
pub fn run(command: BanCommand) -> ExitCode {
    match command {
        BanCommand::Check { scenario } => check(&scenario),
        BanCommand::Parse { expr, json } => parse(&expr, json),
        BanCommand::Add { expr, to, prefix } => {
            let prefix = match prefix.prefix() {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("cachet: ban add: {e}");
                    return ExitCode::from(2);
                }
            };
            fleet::run(&to.dest(&prefix), &fleet::Write::Ban(expr))
        }
    }
}

/// Largest scenario file read, in bytes (64 MiB); a bigger file is refused before it is
/// parsed.
pub const MAX_SCENARIO_BYTES: u64 = 64 * 1024 * 1024;

/// Widest expression under which `ban parse` draws a caret at the error column, in
/// characters; longer (or multi-line) expressions get the column number only.
const MAX_CARET_WIDTH: usize = 200;

/// `cachet ban check --scenario FILE`: evaluates the scenario with
/// [`cachet_ban::evaluate`] and prints the pretty JSON report on stdout.
///
/// Exit status: 0 when the scenario was evaluated (a ban refused by the parser is part of
/// the report, `{"ok":false,"error":…}`, not a failure of the command); 2 when the file
/// cannot be read, is not JSON of the scenario shape (the message gives the JSON path,
/// line and column), or is inconsistent (duplicate object ids, a lookup of an unknown
/// object or before its insertion).
pub fn check(scenario: &Path) -> ExitCode {
    let name = display_name(scenario);
    let text = match read_input(scenario) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cachet: {name}: {e}");
            return ExitCode::from(2);
        }
    };
    let parsed: Scenario = match parse_scenario(&text) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cachet: {name}: invalid scenario: {e}");
            return ExitCode::from(2);
        }
    };
    match cachet_ban::evaluate(&parsed) {
        Ok(report) => write_stdout(&report.to_json_pretty()),
        Err(BanError::Scenario(why)) => {
            eprintln!("cachet: {name}: invalid scenario: {why}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("cachet: {name}: {e}");
            ExitCode::from(2)
        }
    }
}

/// Parses scenario JSON, naming the JSON path of a shape error
/// (`objects[1].ttl: invalid type: string "5", expected f64 at line 4 column 14`).
fn parse_scenario(text: &str) -> Result<Scenario, String> {
    let mut de = serde_json::Deserializer::from_str(text);
    let sc: Scenario = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path.is_empty() || path == "." {
            inner.to_string()
        } else {
            format!("{path}: {inner}")
        }
    })?;
    de.end().map_err(|e| e.to_string())?;
    Ok(sc)
}

/// What `ban parse --json` prints for a valid expression.
#[derive(Serialize)]
struct ParsedJson<'a> {
    ok: bool,
    canonical: &'a str,
    lurker_friendly: bool,
    time_relative: bool,
    conditions: usize,
}

/// What `ban parse --json` prints for an invalid expression.
#[derive(Serialize)]
struct RefusedJson<'a> {
    ok: bool,
    error: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    column: Option<usize>,
}

/// `cachet ban parse EXPR` (`-` reads the expression from stdin, one trailing newline
/// removed): prints the canonical form and whether the ban is lurker-friendly, or the
/// parser's error with its column and a caret under it.
///
/// Exit status: 0 valid, 1 refused by the parser, 2 when stdin cannot be read.
pub fn parse(expr: &str, json: bool) -> ExitCode {
    let owned;
    let text = if expr == "-" {
        let mut buf = String::new();
        if let Err(e) = std::io::stdin().read_to_string(&mut buf) {
            eprintln!("cachet: reading the expression from stdin: {e}");
            return ExitCode::from(2);
        }
        if buf.ends_with('\n') {
            buf.pop();
            if buf.ends_with('\r') {
                buf.pop();
            }
        }
        owned = buf;
        owned.as_str()
    } else {
        expr
    };
    match BanExpr::parse(text) {
        Ok(e) => {
            let canonical = e.to_string();
            let out = if json {
                json_line(&ParsedJson {
                    ok: true,
                    canonical: &canonical,
                    lurker_friendly: e.is_lurker_friendly(),
                    time_relative: e.is_time_relative(),
                    conditions: e.conditions().len(),
                })
            } else {
                let lurker = if e.is_lurker_friendly() {
                    "lurker-friendly: yes (only obj.* fields: the lurker applies it in the background)"
                } else {
                    "lurker-friendly: no (reads req.*: tested at lookup, on the request thread)"
                };
                let mut s = format!("{canonical}\n{lurker}\n");
                if e.is_time_relative() {
                    s.push_str(
                        "time-relative: obj.ttl/obj.age are read at the moment the ban is added\n",
                    );
                }
                s
            };
            write_stdout(&out)
        }
        Err(err) => {
            let message = err.to_string();
            let column = error_column(&err);
            if json {
                let code = write_stdout(&json_line(&RefusedJson {
                    ok: false,
                    error: &message,
                    column,
                }));
                if code != ExitCode::SUCCESS {
                    return code;
                }
            } else {
                eprintln!("cachet: invalid ban expression: {message}");
                if let Some(caret) = column.and_then(|c| caret_lines(text, c)) {
                    eprint!("{caret}");
                }
            }
            ExitCode::from(1)
        }
    }
}

/// The 1-based column of a parse error, when the error has one.
fn error_column(e: &BanError) -> Option<usize> {
    match e {
        BanError::TooManyConditions { column, .. }
        | BanError::Syntax { column, .. }
        | BanError::UnknownField { column, .. }
        | BanError::BadHeaderName { column, .. }
        | BanError::BadOperator { column, .. }
        | BanError::BadDuration { column, .. }
        | BanError::BadRegex { column, .. }
        | BanError::BadQuote { column, .. } => Some(*column).filter(|&c| c > 0),
        _ => None,
    }
}

/// The expression and a caret under `column` (1-based, in characters), both indented by
/// two spaces; `None` when the expression is too wide or holds control characters (tabs
/// and newlines would misplace the caret).
fn caret_lines(text: &str, column: usize) -> Option<String> {
    let width = text.chars().count();
    if width > MAX_CARET_WIDTH || text.chars().any(char::is_control) || column > width + 1 {
        return None;
    }
    Some(format!("  {text}\n  {}^\n", " ".repeat(column - 1)))
}

/// One JSON value and a newline.
fn json_line(value: &impl Serialize) -> String {
    let mut s = serde_json::to_string(value).unwrap_or_default();
    s.push('\n');
    s
}

/// Writes `text` to stdout; a closed pipe or other write error is reported, exit 2.
fn write_stdout(text: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cachet: writing stdout: {e}");
            ExitCode::from(2)
        }
    }
}

/// `stdin` for `-`, else the path as given.
fn display_name(path: &Path) -> String {
    if path == Path::new("-") {
        "stdin".to_owned()
    } else {
        path.display().to_string()
    }
}

/// Reads a UTF-8 file (or stdin for `-`) of at most [`MAX_SCENARIO_BYTES`].
fn read_input(path: &Path) -> Result<String, String> {
    let mut bytes = Vec::new();
    let read = if path == Path::new("-") {
        std::io::stdin()
            .lock()
            .take(MAX_SCENARIO_BYTES + 1)
            .read_to_end(&mut bytes)
    } else {
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_SCENARIO_BYTES + 1).read_to_end(&mut bytes))
    };
    read.map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_SCENARIO_BYTES {
        return Err(format!(
            "larger than the limit of {MAX_SCENARIO_BYTES} bytes"
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "not UTF-8 (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caret_under_column() {
        assert_eq!(
            caret_lines("obj.status > 200", 12).as_deref(),
            Some("  obj.status > 200\n             ^\n")
        );
        assert_eq!(caret_lines("a\tb", 2), None);
        assert_eq!(caret_lines("ab", 9), None);
    }

    #[test]
    fn columns_of_errors() {
        let e = BanExpr::parse("obj.status > 200").unwrap_err();
        assert_eq!(error_column(&e), Some(12));
        assert_eq!(error_column(&BanExpr::parse("  ").unwrap_err()), None);
    }

    #[test]
    fn scenario_shape_errors_name_the_path() {
        let e =
            parse_scenario(r#"{"objects":[{"id":"a","inserted_at":"x","url":"/"}]}"#).unwrap_err();
        assert!(e.starts_with("objects[0].inserted_at: invalid type"), "{e}");
        let e = parse_scenario(r#"{"bans":[]} trailing"#).unwrap_err();
        assert!(e.contains("trailing characters"), "{e}");
        let e = parse_scenario(r#"{"objets":[]}"#).unwrap_err();
        assert!(e.contains("unknown field `objets`"), "{e}");
    }
}
