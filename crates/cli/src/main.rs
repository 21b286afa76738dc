//! The `cachet` command: classify user agents, normalize queries, check configurations, check bans, purge through the Fastly API, simulate on access logs.

mod access;
mod ban;
mod fastly;
mod fleet;
mod follow;
mod log;
mod purge;
mod simulate;
mod stat;

use std::io::{BufRead, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use cachet_device::{Classifier, Decision, DeviceConfig, Profile};
use cachet_policy::{Config, PolicyError};
use cachet_query::Normalizer;
use clap::{Parser, Subcommand, ValueEnum};

/// Longest input line read, in bytes; longer lines are reported and skipped (or, for
/// `device classify`, classified on their first bytes as the edge would).
const MAX_LINE_BYTES: usize = 1024 * 1024;

#[derive(Parser)]
#[command(name = "cachet", version, about = "Cachet operators' tool", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Device classification (the Vary dimension).
    Device {
        #[command(subcommand)]
        command: DeviceCommand,
    },
    /// Query normalization (the cache key's query part).
    Query {
        #[command(subcommand)]
        command: QueryCommand,
    },
    /// Configuration files.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Ban expressions (Varnish syntax): parse one, or evaluate a scenario offline.
    Ban {
        #[command(subcommand)]
        command: BanCommand,
    },
    /// Purge surrogate keys, URLs or a whole service through the Fastly API.
    ///
    /// Token from $FASTLY_API_TOKEN (never printed). One JSON line per key or URL on
    /// stdout, a summary on stderr. Exit 0 when all succeeded, 1 when any failed, 2 for
    /// usage or configuration errors.
    Purge(purge::PurgeArgs),
    /// Replays access logs through the policy and an in-memory cache, baseline (raw URL,
    /// `Vary: User-Agent`, no compression) vs the config; or generates a sample log.
    ///
    /// Table on stdout (or `--json`), `--html FILE` report, progress and bad lines on
    /// stderr. Exit 0 replayed (bad lines never fatal), 1 an input could not be read to
    /// its end, 2 usage, config or unreadable-input errors.
    Simulate(Box<simulate::SimulateArgs>),
    /// Live counters, like varnishstat: from an Envoy admin endpoint (`--envoy`) or the
    /// edge's access-log lines (`--file`, stdin).
    ///
    /// A terminal view (q quits), plain text when stdout is not a terminal, `--json` one
    /// object per reading, `--once` one reading. Exit 0 quit or input ended, 1 the source
    /// failed after it had worked, 2 usage, `--config` or a first reading that failed.
    Stat(Box<stat::StatArgs>),
    /// Filters and formats access-log lines, like varnishlog -q / varnishncsa -F.
    ///
    /// JSON lines as they are (default), `--ncsa` or `-F FORMAT`. Exit 0 done (skipped lines
    /// reported on stderr), 1 an input failed mid-way, 2 usage, query, format or
    /// unopenable-file errors.
    Log(Box<log::LogArgs>),
}

/// Where a fleet write goes: etcd or a node (exactly one).
#[derive(clap::Args, Debug, Clone)]
#[group(required = true, multiple = false)]
pub struct FleetTarget {
    /// etcd's v3 JSON gateway holding the fleet's ban log, e.g. `http://127.0.0.1:2379`.
    #[arg(long, value_name = "URL")]
    pub etcd: Option<String>,
    /// Any node's listener, e.g. `http://edge-1:10000` (admin API, $CACHET_ADMIN_TOKEN).
    #[arg(long, value_name = "URL")]
    pub node: Option<String>,
}

impl FleetTarget {
    /// The destination, with `prefix` for etcd.
    pub fn dest(&self, prefix: &str) -> fleet::Dest {
        match (&self.etcd, &self.node) {
            (Some(url), _) => fleet::Dest::Etcd {
                url: url.clone(),
                prefix: prefix.to_owned(),
            },
            (None, Some(n)) => fleet::Dest::Node(n.clone()),
            (None, None) => fleet::Dest::Node(String::new()),
        }
    }
}

#[derive(Subcommand)]
enum BanCommand {
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

#[derive(Subcommand)]
enum DeviceCommand {
    /// Reads one User-Agent per stdin line, writes `pc` or `smartphone` per stdout line,
    /// in order, streaming.
    Classify {
        /// Built-in rule profile (overrides the config's `[device].profile`).
        #[arg(long, value_enum)]
        profile: Option<ProfileArg>,
        /// A Cachet config whose `[device]` table is used.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Lines are `UA<TAB>Sec-CH-UA-Mobile[<TAB>Cookie]`: the request's client hint
        /// value (e.g. `?1`) and optionally its `Cookie` header; an empty or missing
        /// column is an absent header.
        #[arg(long)]
        hints: bool,
        /// Append `<TAB>` and what decided each answer: `cookie`, `hint`,
        /// `rule N: <the rule>` or `default`.
        #[arg(long)]
        explain: bool,
    },
}

#[derive(Subcommand)]
enum QueryCommand {
    /// Reads one `path?query` per stdin line, writes the normalized form per stdout line.
    Normalize {
        /// A Cachet config whose `[query]` table is used (a file with only `[query]` is
        /// valid).
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validates a config; prints every error with its path; exit 1 when invalid.
    Check {
        /// The TOML (or `.json`) file.
        file: PathBuf,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum ProfileArg {
    Seed,
    Accurate,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Device {
            command:
                DeviceCommand::Classify {
                    profile,
                    config,
                    hints,
                    explain,
                },
        } => classify(profile, config.as_deref(), hints, explain),
        Command::Query {
            command: QueryCommand::Normalize { config },
        } => normalize(config.as_deref()),
        Command::Config {
            command: ConfigCommand::Check { file },
        } => return check(&file),
        Command::Ban {
            command: BanCommand::Check { scenario },
        } => return ban::check(&scenario),
        Command::Ban {
            command: BanCommand::Parse { expr, json },
        } => return ban::parse(&expr, json),
        Command::Ban {
            command: BanCommand::Add { expr, to, prefix },
        } => {
            let prefix = match prefix.prefix() {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("cachet: ban add: {e}");
                    return ExitCode::from(2);
                }
            };
            return fleet::run(&to.dest(&prefix), &fleet::Write::Ban(expr));
        }
        Command::Purge(args) => return purge::run(&args),
        Command::Simulate(args) => return simulate::run(&args),
        Command::Stat(args) => return stat::run(&args),
        Command::Log(args) => return log::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cachet: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Loads and validates a config file, TOML unless it ends in `.json`. Every problem is
/// reported, each with its line, in line order (`cachet_policy::check`).
fn load(path: &Path) -> Result<Config, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|e| LoadError::Io(path.to_owned(), e))?;
    let checked = if path.extension().is_some_and(|e| e == "json") {
        cachet_policy::check::check_json(&text)
    } else {
        cachet_policy::check::check_toml(&text)
    };
    checked.map_err(|e| LoadError::Issues(path.to_owned(), e))
}

#[derive(Debug)]
enum LoadError {
    Io(PathBuf, std::io::Error),
    Policy(PathBuf, PolicyError),
    /// Every problem of a config file, in line order.
    Issues(PathBuf, Vec<cachet_policy::check::LocatedIssue>),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(p, e) => write!(f, "{}: {e}", p.display()),
            Self::Policy(p, e) => {
                for issue in e.issues() {
                    writeln!(f, "{}: {issue}", p.display())?;
                }
                Ok(())
            }
            // `FILE:LINE: path: message`, as compilers write it (editors jump to it).
            Self::Issues(p, issues) => {
                for i in issues {
                    write!(f, "{}", p.display())?;
                    if let Some(line) = i.line {
                        write!(f, ":{line}")?;
                    }
                    if i.issue.path.is_empty() {
                        writeln!(f, ": {}", i.issue.message)?;
                    } else {
                        writeln!(f, ": {}", i.issue)?;
                    }
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for LoadError {}

fn check(file: &Path) -> ExitCode {
    match load(file) {
        Ok(config) => {
            println!(
                "{}: ok ({} routes, device profile {:?}, query sort {:?})",
                file.display(),
                config.routes.len(),
                config.device.profile,
                config.query.sort
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprint!("{e}");
            if matches!(e, LoadError::Io(..)) {
                eprintln!();
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// Reads stdin line by line as bytes (UAs need not be UTF-8), calling `f` per line. When
/// stdin is a terminal, one line on stderr first says that `command` reads `what` from it
/// and how to end (otherwise a bare `cachet device classify` just waits, silently).
fn each_line(
    command: &str,
    what: &str,
    mut f: impl FnMut(&[u8], &mut dyn Write) -> Result<()>,
) -> Result<()> {
    use std::io::IsTerminal as _;
    let stdin = std::io::stdin();
    let interactive = stdin.is_terminal();
    if interactive {
        eprintln!(
            "cachet: {command}: reading {what} from standard input, one per line; end with Ctrl-D"
        );
    }
    let mut input = stdin.lock();
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut buf = Vec::with_capacity(512);
    loop {
        buf.clear();
        let n = (&mut input)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
            .context("reading stdin")?;
        if n == 0 {
            break;
        }
        if buf.last() != Some(&b'\n') && n > MAX_LINE_BYTES {
            // Over-long line: consume the rest of it so the next line stays aligned.
            let mut rest = Vec::new();
            input
                .read_until(b'\n', &mut rest)
                .context("reading stdin")?;
        }
        while matches!(buf.last(), Some(b'\n' | b'\r')) {
            buf.pop();
        }
        f(&buf, &mut out)?;
        // Streaming: flush when no more input is buffered, so a pipe sees answers promptly;
        // on a terminal after every line (asking whether more is buffered would wait for
        // the next line to be typed).
        if interactive || input.fill_buf().map_or(true, <[u8]>::is_empty) {
            out.flush().context("writing stdout")?;
        }
    }
    out.flush().context("writing stdout")?;
    Ok(())
}

fn classify(
    profile: Option<ProfileArg>,
    config: Option<&Path>,
    hints: bool,
    explain: bool,
) -> Result<ExitCode> {
    let mut device = match config {
        Some(p) => load(p)?.device,
        None => DeviceConfig::default(),
    };
    if let Some(p) = profile {
        device.profile = match p {
            ProfileArg::Seed => Profile::Seed,
            ProfileArg::Accurate => Profile::Accurate,
        };
        device.rules.clear();
    }
    let classifier = Classifier::new(&device).context("device configuration")?;
    let what = if hints {
        "User-Agent<TAB>Sec-CH-UA-Mobile[<TAB>Cookie] lines"
    } else {
        "User-Agent values"
    };
    each_line("device classify", what, |line, out| {
        let (ua, hint, cookie) = if hints {
            split_hints_line(line)
        } else {
            (line, None, None)
        };
        if explain {
            let (class, why) = classifier.explain_request(ua, hint, cookie);
            writeln!(out, "{}\t{}", class.as_str(), explanation(&classifier, why))
        } else {
            writeln!(
                out,
                "{}",
                classifier.classify_request(ua, hint, cookie).as_str()
            )
        }
        .context("writing stdout")
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Splits a `--hints` line `UA<TAB>Sec-CH-UA-Mobile[<TAB>Cookie]` at its first two TABs
/// (a User-Agent never contains one); empty or missing columns are absent headers.
fn split_hints_line(line: &[u8]) -> (&[u8], Option<&[u8]>, Option<&[u8]>) {
    let mut cols = line.splitn(3, |&b| b == b'\t');
    let ua = cols.next().unwrap_or_default();
    let hint = cols.next().filter(|c| !c.is_empty());
    let cookie = cols.next().filter(|c| !c.is_empty());
    (ua, hint, cookie)
}

/// The `--explain` column: what decided, with the rule written as in the config.
fn explanation(classifier: &Classifier, why: Decision) -> String {
    match why {
        Decision::ForceCookie => format!(
            "cookie {}",
            String::from_utf8_lossy(classifier.force_cookie())
        ),
        Decision::ClientHint => "hint Sec-CH-UA-Mobile".to_owned(),
        Decision::Rule(i) => match classifier.rule(i) {
            Some(r) => {
                let list = |v: &[String]| {
                    v.iter()
                        .map(|p| format!("{p:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let unless = if r.unless.is_empty() {
                    String::new()
                } else {
                    format!(" unless [{}]", list(&r.unless))
                };
                format!(
                    "rule {i}: contains [{}]{unless} -> {}",
                    list(&r.contains),
                    r.class
                )
            }
            None => format!("rule {i}"),
        },
        Decision::Default => "default".to_owned(),
        _ => "unknown".to_owned(),
    }
}

fn normalize(config: Option<&Path>) -> Result<ExitCode> {
    let query = match config {
        Some(p) => load(p)?.query,
        None => cachet_query::QueryConfig::default(),
    };
    let normalizer = Normalizer::new(&query).context("query configuration")?;
    let mut failed = 0u64;
    let mut line_no = 0u64;
    each_line("query normalize", "URLs or query strings", |line, out| {
        line_no += 1;
        let Ok(text) = std::str::from_utf8(line) else {
            failed += 1;
            eprintln!("cachet: line {line_no}: not UTF-8; echoed unchanged");
            out.write_all(line)?;
            return writeln!(out).context("writing stdout");
        };
        match normalizer.normalize_target(text) {
            Ok(n) => writeln!(out, "{n}"),
            Err(e) => {
                // Same fail-closed rule as the edge: the target is kept as received.
                failed += 1;
                eprintln!("cachet: line {line_no}: {e}; echoed unchanged (the edge passes such requests uncached)");
                writeln!(out, "{text}")
            }
        }
        .context("writing stdout")
    })?;
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
