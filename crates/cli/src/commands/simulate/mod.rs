//! `cachet simulate`: replay access logs through the pure policy, baseline vs config; generate sample logs.
//!
//! See `docs/simulate.md` for the model (what counts as a hit, sizes, TTLs, memory) and
//! the measured figures.

pub mod html;
pub mod table;

use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use cachet_policy::Policy;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use cachet_sim::input;
use cachet_sim::inputs::{Observer, replay_inputs};
use cachet_sim::logfmt;
use cachet_sim::replay::{Engine, Settings};
use cachet_sim::report::{BadLine, InputReport, InputsSummary, Report};
use cachet_sim::{fleet, generate};

/// Default `--gzip-ratio`: gzip (level 6) size over raw size, summed over the demo
/// origin's cacheable text pages (entry and blog top in both layouts, feed, design CSS,
/// index): 10,112 / 28,287 bytes = 0.357 (re-measured by `tests/simulate.rs`).
pub const DEFAULT_GZIP_RATIO: f64 = 0.36;

/// Default `--object-overhead`: bytes charged per stored object on top of its body, for
/// the stored response headers and cache metadata.
pub const DEFAULT_OBJECT_OVERHEAD: u64 = 256;

/// Default `--host` for records whose log names no host.
pub const DEFAULT_HOST: &str = "localhost";

/// Default `--start` of `--generate`.
pub const DEFAULT_START: &str = "2025-03-01T00:00:00Z";

/// Lines between progress-bar updates of `--generate` (as the replay's,
/// [`cachet_sim::inputs::PROGRESS_EVERY`]).
const PROGRESS_EVERY: u64 = cachet_sim::inputs::PROGRESS_EVERY;

/// `cachet simulate` arguments.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    cachet simulate --generate 200000 --out gen.log.gz\n  \
    cachet simulate --config edge-app/cachet.toml gen.log.gz --html report.html\n  \
    cachet simulate --generate 1000000 | cachet simulate --config edge-app/cachet.toml -")]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent command-line flags"
)]
pub struct SimulateArgs {
    /// The Cachet config to replay (TOML, or JSON when the name ends in `.json`).
    #[arg(long, value_name = "FILE", required_unless_present = "generate")]
    pub config: Option<PathBuf>,
    /// Access logs, replayed in order (`-` = stdin): combined/common or JSON lines, each
    /// detected per file; gzip detected by its magic bytes.
    #[arg(value_name = "LOG", required_unless_present = "generate")]
    pub logs: Vec<PathBuf>,
    /// Cache size of each side (`512MiB`, `2GiB`, `100MB`, bytes).
    #[arg(long, value_name = "SIZE", default_value = "512MiB", value_parser = parse_size)]
    pub memory: u64,
    /// Stored/original size of compressible bodies on routes that compress.
    #[arg(long, value_name = "RATIO", default_value_t = DEFAULT_GZIP_RATIO, value_parser = parse_ratio)]
    pub gzip_ratio: f64,
    /// A fixed baseline TTL (`5m`, `120`); default: the TTL the config uses per request.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub baseline_ttl: Option<Duration>,
    /// A fixed baseline grace; default: the grace the config uses per request.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub baseline_grace: Option<Duration>,
    /// Host for log lines that name none (common/combined logs without a vhost field).
    #[arg(long, value_name = "HOST")]
    pub host: Option<String>,
    /// Bytes charged per stored object besides its body (headers, metadata).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_OBJECT_OVERHEAD)]
    pub object_overhead: u64,
    /// Path templates listed (by requests).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub top: usize,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Tables with every column (per endpoint: also bytes stored and distinct objects),
    /// never wrapped; default: fit 100 columns.
    #[arg(long, conflicts_with = "json")]
    pub wide: bool,
    /// Also write a self-contained HTML report (SVG charts, no scripts) to FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Also replay the config side over fleets of N edge nodes (`3`, or a list such as
    /// `1,3,25`), each without and with a shield tier, and print the fleet table (JSON:
    /// `fleet`) instead of the single-node tables. See docs/fleet.md ("Simulating a fleet").
    #[arg(long, value_name = "N[,N...]", value_parser = parse_fleet, conflicts_with_all = ["html", "wide"])]
    pub fleet: Option<FleetSizes>,
    /// `--fleet`: how requests reach the edge nodes: `round-robin`, or `client` (each
    /// client address, as logged, sticks to one edge; Envoy `ring_hash` on the source IP).
    #[arg(long, value_enum, default_value = "round-robin", requires = "fleet")]
    pub balance: fleet::Balance,
    /// `--fleet`: shield nodes, chosen per cache key by Envoy's `ring_hash`.
    #[arg(long, value_name = "S", default_value_t = 2, value_parser = parse_shields, requires = "fleet")]
    pub shields: usize,
    /// `--fleet`: cache size of each shield node; default `--memory`.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "fleet")]
    pub shield_memory: Option<u64>,
    /// No progress bar and no throughput line on stderr.
    #[arg(long, short)]
    pub quiet: bool,

    /// Instead of replaying, write N lines of a realistic sample blog log.
    #[arg(long, value_name = "N", conflicts_with_all = ["config", "logs", "json", "html", "wide", "fleet"])]
    pub generate: Option<u64>,
    /// `--generate`: PRNG seed (same seed, same log).
    #[arg(long, value_name = "S", default_value_t = 1, conflicts_with = "config")]
    pub seed: u64,
    /// `--generate`: time of the first request (RFC 3339).
    #[arg(long, value_name = "RFC3339", default_value = DEFAULT_START, value_parser = parse_start, conflicts_with = "config")]
    pub start: i64,
    /// `--generate`: mean page views per second.
    #[arg(long, value_name = "PER_SECOND", default_value_t = 20.0, value_parser = parse_rate, conflicts_with = "config")]
    pub rate: f64,
    /// `--generate`: output file (`.gz` → gzip); default stdout.
    #[arg(long, short, value_name = "FILE", conflicts_with = "config")]
    pub out: Option<PathBuf>,
    /// `--generate`: output format.
    #[arg(
        long,
        value_enum,
        default_value = "combined",
        conflicts_with = "config"
    )]
    pub format: generate::GenFormat,
    /// `--generate`: leave out the response Cache-Control (plain combined lines).
    #[arg(long, conflicts_with = "config")]
    pub no_cache_control: bool,
}

/// Parses `512MiB`, `1.5GiB`, `100MB`, `64k`, `1048576`: binary units for `K`/`M`/`G`/`T`
/// and `KiB`…`TiB`, decimal for `KB`…`TB`; case-insensitive; `B` optional.
///
/// # Errors
/// Not a size, or zero.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid size {s:?}: expected e.g. 512MiB, 2GiB, 100MB"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        u => return Err(format!("invalid size {s:?}: unknown unit {u:?}")),
    };
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "finite, positive, checked below 2^63 before the cast"
    )]
    let bytes = {
        let b = n * mult as f64;
        if !b.is_finite() || b >= 9.2e18 {
            return Err(format!("invalid size {s:?}: too large"));
        }
        b as u64
    };
    if bytes == 0 {
        return Err(format!("invalid size {s:?}: must be more than 0"));
    }
    Ok(bytes)
}

/// The edge-node counts of `--fleet`, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetSizes(pub Vec<usize>);

/// Parses `--fleet`: `3` or `1,3,25`, each 1 to [`fleet::MAX_EDGES`], no repeats, at most
/// [`fleet::MAX_FLEETS`] sizes.
///
/// # Errors
/// A message naming the bad item.
pub fn parse_fleet(s: &str) -> Result<FleetSizes, String> {
    let mut sizes = Vec::new();
    for item in s.split(',').map(str::trim) {
        let n: usize = item.parse().map_err(|_| {
            format!(
                "invalid fleet size {item:?}: expected a number of edge nodes, e.g. 3 or 1,3,25"
            )
        })?;
        if !(1..=fleet::MAX_EDGES).contains(&n) {
            return Err(format!(
                "invalid fleet size {n}: a fleet has 1 to {} edge nodes",
                fleet::MAX_EDGES
            ));
        }
        if sizes.contains(&n) {
            return Err(format!("fleet size {n} is given twice"));
        }
        sizes.push(n);
    }
    if sizes.len() > fleet::MAX_FLEETS {
        return Err(format!(
            "{} fleet sizes: at most {} in one run",
            sizes.len(),
            fleet::MAX_FLEETS
        ));
    }
    Ok(FleetSizes(sizes))
}

fn parse_shields(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=fleet::MAX_SHIELDS).contains(&n) => Ok(n),
        _ => Err(format!(
            "invalid shield count {s:?}: expected 1 to {} shield nodes",
            fleet::MAX_SHIELDS
        )),
    }
}

fn parse_ratio(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if r > 0.0 && r <= 1.0 => Ok(r),
        _ => Err(format!("invalid ratio {s:?}: expected a number in (0, 1]")),
    }
}

fn parse_rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if r > 0.0 && r.is_finite() && r <= 1e6 => Ok(r),
        _ => Err(format!(
            "invalid rate {s:?}: expected a number in (0, 1000000]"
        )),
    }
}

/// `5m`, `1h 30m`, `2d` or whole seconds: the config's duration syntax
/// ([`cachet_policy::HumanDuration`]).
fn parse_duration(s: &str) -> Result<Duration, String> {
    use serde::Deserialize as _;
    let de = serde::de::value::StrDeserializer::<serde::de::value::Error>::new(s.trim());
    if let Ok(secs) = s.trim().parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    cachet_policy::HumanDuration::deserialize(de)
        .map(|d| d.0)
        .map_err(|e| e.to_string())
}

fn parse_start(s: &str) -> Result<i64, String> {
    logfmt::parse_rfc3339(s.trim())
        .ok_or_else(|| format!("invalid time {s:?}: expected RFC 3339, e.g. {DEFAULT_START}"))
}

/// Loads the policy and checks the inputs and the HTML output before anything is read:
/// any problem is reported here and ends the command with exit status 2.
fn prepare(
    args: &SimulateArgs,
    config_path: &Path,
) -> Result<(Policy, Option<(PathBuf, File)>), ExitCode> {
    let policy = match crate::config_file::load(config_path).and_then(|c| {
        Policy::new(c).map_err(|e| crate::config_file::LoadError::Policy(config_path.to_owned(), e))
    }) {
        Ok(p) => p,
        Err(e) => {
            // Same lines as `cachet config check`: FILE: path: message.
            let text = e.to_string();
            eprint!("{text}");
            if !text.ends_with('\n') {
                eprintln!();
            }
            eprintln!("cachet: simulate: invalid or unreadable config; nothing replayed");
            return Err(ExitCode::from(2));
        }
    };
    if args.logs.iter().filter(|p| p.as_os_str() == "-").count() > 1 {
        eprintln!("cachet: simulate: stdin (-) can be given only once");
        return Err(ExitCode::from(2));
    }
    for p in &args.logs {
        if p.as_os_str() != "-"
            && let Err(e) = std::fs::metadata(p)
        {
            eprintln!("cachet: simulate: {}: {e}", p.display());
            return Err(ExitCode::from(2));
        }
    }
    let html_file = match &args.html {
        Some(p) => match File::create(p) {
            Ok(f) => Some((p.clone(), f)),
            Err(e) => {
                eprintln!("cachet: simulate: {}: {e}", p.display());
                return Err(ExitCode::from(2));
            }
        },
        None => None,
    };
    Ok((policy, html_file))
}

/// Runs `cachet simulate`.
///
/// Exit status: 0 replayed (bad lines are reported, never fatal); 1 an input could not be
/// read to its end (corrupt gzip, I/O error) or the HTML report could not be written —
/// the report covers what was read; 2 usage, config or unreadable-input errors before the
/// replay started.
pub fn run(args: &SimulateArgs) -> ExitCode {
    if let Some(n) = args.generate {
        return run_generate(args, n);
    }
    let Some(config_path) = args.config.as_deref() else {
        eprintln!("cachet: simulate: --config FILE is required");
        return ExitCode::from(2);
    };
    let (policy, html_file) = match prepare(args, config_path) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let settings = Settings {
        memory: args.memory,
        gzip_ratio: args.gzip_ratio,
        object_overhead: args.object_overhead,
        baseline_ttl: args.baseline_ttl,
        baseline_grace: args.baseline_grace,
        default_host: args.host.clone().unwrap_or_else(|| DEFAULT_HOST.to_owned()),
    };
    let mut engine = Engine::new(&policy, settings);
    if let Some(sizes) = &args.fleet {
        for &edges in &sizes.0 {
            engine.fleets.push(fleet::Fleet::new(fleet::FleetSettings {
                edges,
                shields: args.shields,
                edge_memory: args.memory,
                shield_memory: args.shield_memory.unwrap_or(args.memory),
                endpoints: engine.endpoints.len(),
                balance: args.balance,
            }));
        }
    }
    let started = Instant::now();
    let progress = progress_bar(args);
    let outcome = replay_inputs(&args.logs, &mut engine, &mut Shown(&progress));
    engine.finish();
    progress.finish_and_clear();
    let elapsed = started.elapsed();

    let config_name = config_path.display().to_string();
    let lines = outcome.summary.inputs.iter().map(|i| i.lines).sum::<u64>();
    if let Some(why) = nothing_read(&outcome.summary) {
        eprintln!("cachet: simulate: {why}; nothing replayed, no report");
        if let Some((path, file)) = html_file {
            // Created empty before the replay: not left behind as a report.
            drop(file);
            let _ = std::fs::remove_file(path);
        }
        return ExitCode::from(1);
    }
    let report = Report::build(&engine, &config_name, outcome.summary, args.top);
    let mut code = if outcome.read_failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    };
    if outcome.no_host > 0 && args.host.is_none() {
        eprintln!(
            "cachet: simulate: {} requests named no host; replayed with Host: {DEFAULT_HOST} (set --host)",
            table::thousands(outcome.no_host)
        );
    }
    if report.bad_lines > report.bad_line_examples.len() as u64 {
        eprintln!(
            "cachet: simulate: {} bad lines in all (first {} shown above); they were skipped",
            table::thousands(report.bad_lines),
            report.bad_line_examples.len()
        );
    }
    if !write_outputs(args, &report, html_file) {
        code = ExitCode::from(1);
    }
    if !args.quiet {
        let secs = elapsed.as_secs_f64().max(1e-9);
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "display only"
        )]
        let rate = (lines as f64 / secs) as u64;
        eprintln!(
            "cachet: simulate: {} lines in {secs:.2} s ({} lines/s)",
            table::thousands(lines),
            table::thousands(rate)
        );
    }
    code
}

/// Prints the report (table or JSON) and writes the HTML file; `false` when a write failed.
/// Why a replay read no request at all (`None` when it read one): the inputs were empty,
/// held only Cachet admin calls and events, or every line was bad (the first reason).
fn nothing_read(summary: &InputsSummary) -> Option<String> {
    let sum = |f: fn(&InputReport) -> u64| summary.inputs.iter().map(f).sum::<u64>();
    if sum(|i| i.records) > 0 {
        return None;
    }
    let (lines, bad, not_traffic) = (
        sum(|i| i.lines),
        sum(|i| i.bad_lines),
        sum(|i| i.not_traffic),
    );
    Some(match summary.bad_line_examples.first() {
        _ if lines == 0 => "no request read: the input is empty".to_owned(),
        Some(first) => format!(
            "no request read: {} of {} lines bad, the first ({}:{}) {}",
            table::thousands(bad),
            table::thousands(lines),
            first.file,
            first.line,
            first.reason
        ),
        None if not_traffic > 0 => format!(
            "no request read: {} lines, only Cachet admin calls and events",
            table::thousands(lines)
        ),
        None => format!(
            "no request read: {} lines, all blank or unreadable",
            table::thousands(lines)
        ),
    })
}

fn write_outputs(args: &SimulateArgs, report: &Report, html_file: Option<(PathBuf, File)>) -> bool {
    let mut ok = true;
    let text = if args.json {
        match serde_json::to_string_pretty(report) {
            Ok(mut j) => {
                j.push('\n');
                j
            }
            Err(e) => {
                eprintln!("cachet: simulate: {e}");
                return false;
            }
        }
    } else if report.fleet.is_some() {
        table::fleet_text(report)
    } else {
        table::text(report, args.wide)
    };
    let mut stdout = io::stdout().lock();
    if let Err(e) = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        if e.kind() != io::ErrorKind::BrokenPipe {
            eprintln!("cachet: simulate: writing stdout: {e}");
        }
        ok = false;
    }
    if let Some((path, file)) = html_file {
        let mut w = BufWriter::new(file);
        if let Err(e) = w
            .write_all(html::render(report).as_bytes())
            .and_then(|()| w.flush())
        {
            eprintln!("cachet: simulate: {}: {e}", path.display());
            ok = false;
        } else if !args.quiet {
            eprintln!("cachet: simulate: wrote {}", path.display());
        }
    }
    ok
}

fn progress_bar(args: &SimulateArgs) -> ProgressBar {
    if args.quiet || !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let total: Option<u64> = args.logs.iter().map(|p| input::file_size(p)).sum();
    let (pb, template) = if let Some(t) = total {
        (
            ProgressBar::new(t),
            "{spinner} [{elapsed_precise}] {wide_bar} {binary_bytes}/{binary_total_bytes} (eta {eta}) {msg}",
        )
    } else {
        (
            ProgressBar::new_spinner(),
            "{spinner} [{elapsed_precise}] {msg}",
        )
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        pb.set_style(style);
    }
    pb
}

/// The replay's progress bar (bytes read, lines, bad lines) and its stderr lines (bad-line
/// examples, failed inputs), printed above the bar.
struct Shown<'p>(&'p ProgressBar);

impl Observer for Shown<'_> {
    fn progress(&mut self, bytes_read: u64, lines: u64, bad_lines: u64) {
        self.0.set_position(bytes_read);
        self.0.set_message(format!(
            "{} lines, {} bad",
            table::thousands(lines),
            table::thousands(bad_lines)
        ));
    }

    fn bad_line(&mut self, e: &BadLine) {
        self.0.suspend(|| {
            eprintln!("cachet: simulate: {}:{}: {}", e.file, e.line, e.reason);
        });
    }

    fn input_failed(&mut self, name: &str, error: &str) {
        self.0
            .suspend(|| eprintln!("cachet: simulate: {name}: {error}"));
    }
}

fn run_generate(args: &SimulateArgs, lines: u64) -> ExitCode {
    let opts = generate::Options {
        lines,
        seed: args.seed,
        start: args.start,
        rate: args.rate,
        format: args.format,
        cache_control: !args.no_cache_control,
    };
    let progress = generate_progress(args, lines);
    let result = if let Some(path) = &args.out {
        write_generated(path, &opts, &progress)
    } else {
        let stdout = io::stdout();
        let w = BufWriter::with_capacity(256 * 1024, stdout.lock());
        generate::generate(&opts, &mut LineProgress::new(w, &progress))
    };
    progress.finish_and_clear();
    match result {
        Ok(summary) => {
            if !args.quiet {
                eprintln!("{}", generated_line(&summary, args.out.as_deref()));
            }
            ExitCode::SUCCESS
        }
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            let target = args
                .out
                .as_deref()
                .map_or_else(|| "stdout".to_owned(), |p| p.display().to_string());
            eprintln!("cachet: simulate: writing {target}: {e}");
            ExitCode::from(2)
        }
    }
}

/// The closing line of `--generate` (stderr): `cachet: simulate: wrote 200,000 lines
/// (2 hosts, ≈38,102 distinct URLs, 2025-03-01T00:00:00Z .. 2025-03-01T01:59:27Z) to
/// gen.log.gz (4.2 MiB, gzip)`; `≈` marks an estimated count, the size is the file's.
fn generated_line(s: &generate::Summary, out: Option<&Path>) -> String {
    let urls = if s.urls.is_exact() {
        table::thousands(s.urls.count())
    } else {
        format!("≈{}", table::thousands(s.urls.count()))
    };
    let span = s.span.map_or_else(String::new, |(f, l)| {
        format!(
            ", {} .. {}",
            logfmt::format_rfc3339(f),
            logfmt::format_rfc3339(l)
        )
    });
    let target = out.map_or_else(
        || "stdout".to_owned(),
        |p| {
            let size = std::fs::metadata(p).map_or(0, |m| m.len());
            let gzip = if p.extension().is_some_and(|e| e == "gz") {
                ", gzip"
            } else {
                ""
            };
            format!("{} ({}{gzip})", p.display(), table::bytes(size))
        },
    );
    format!(
        "cachet: simulate: wrote {} lines ({} host{}, {urls} distinct URLs{span}) to {target}",
        table::thousands(s.lines),
        s.hosts.len(),
        if s.hosts.len() == 1 { "" } else { "s" },
    )
}

fn write_generated(
    path: &Path,
    opts: &generate::Options,
    progress: &ProgressBar,
) -> io::Result<generate::Summary> {
    let file = BufWriter::with_capacity(256 * 1024, File::create(path)?);
    if path.extension().is_some_and(|e| e == "gz") {
        let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
        let mut out = LineProgress::new(gz, progress);
        let summary = generate::generate(opts, &mut out)?;
        out.inner.finish()?.flush()?;
        Ok(summary)
    } else {
        generate::generate(opts, &mut LineProgress::new(file, progress))
    }
}

/// The `--generate` progress bar: lines written out of `lines`, on stderr when it is a
/// terminal and `-q` is not given (hidden otherwise: nothing is drawn in pipes and files).
fn generate_progress(args: &SimulateArgs, lines: u64) -> ProgressBar {
    if args.quiet || !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(lines);
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} lines (eta {eta})",
    ) {
        pb.set_style(style);
    }
    pb
}

/// A writer that counts the lines written through it and moves a progress bar every
/// [`PROGRESS_EVERY`] lines.
struct LineProgress<'p, W> {
    inner: W,
    progress: &'p ProgressBar,
    lines: u64,
    shown: u64,
}

impl<'p, W: Write> LineProgress<'p, W> {
    fn new(inner: W, progress: &'p ProgressBar) -> Self {
        Self {
            inner,
            progress,
            lines: 0,
            shown: 0,
        }
    }
}

impl<W: Write> Write for LineProgress<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.lines += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
        if self.lines - self.shown >= PROGRESS_EVERY {
            self.shown = self.lines;
            self.progress.set_position(self.lines);
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generate_progress_moves_every_progress_every_lines() {
        let pb = ProgressBar::hidden();
        let mut w = LineProgress::new(Vec::new(), &pb);
        for _ in 0..PROGRESS_EVERY - 1 {
            w.write_all(b"a line\n").unwrap();
        }
        assert_eq!((w.lines, pb.position()), (PROGRESS_EVERY - 1, 0));
        w.write_all(b"last\nand a half").unwrap();
        assert_eq!(pb.position(), PROGRESS_EVERY);
        assert_eq!(w.inner.len() as u64, 7 * (PROGRESS_EVERY - 1) + 15);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("512mib"), Ok(512 << 20));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("100MB"), Ok(100_000_000));
        assert_eq!(parse_size("64k"), Ok(65_536));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size(" 2 G "), Ok(2 << 30));
        assert!(parse_size("0").is_err());
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("99999999999TiB").is_err());
    }

    #[test]
    fn durations_ratios_starts() {
        assert_eq!(parse_duration("120"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert!(parse_duration("5 parsecs").is_err());
        assert_eq!(parse_ratio("0.36"), Ok(0.36));
        assert!(
            parse_ratio("0").is_err() && parse_ratio("1.5").is_err() && parse_ratio("x").is_err()
        );
        assert_eq!(parse_start(DEFAULT_START), Ok(1_740_787_200));
        assert!(parse_start("yesterday").is_err());
        assert!(parse_rate("0").is_err() && parse_rate("inf").is_err());
    }
}
