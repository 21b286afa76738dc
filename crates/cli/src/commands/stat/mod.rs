//! `cachet stat`: Cachet's counters live, in the spirit of `varnishstat`, from an Envoy
//! admin endpoint (`/stats?filter=cachet`) or from access-log lines (stdin, a file, or a
//! file followed as it grows). Docs: docs/cli.md, `cachet stat`.

pub mod rates;
pub mod snapshot;
pub mod view;

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

use crate::access;
use crate::follow::{self, Input, Msg};
use rates::{Rates, rates};
use snapshot::{LogTotals, Snapshot};
use view::View;

/// Arguments of `cachet stat`.
#[derive(clap::Args)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent command-line flags"
)]
pub struct StatArgs {
    /// Envoy admin address (`http://127.0.0.1:9901` or `127.0.0.1:9901`): reads
    /// `/stats?filter=cachet` every interval.
    #[arg(long, value_name = "URL", conflicts_with = "file")]
    envoy: Option<String>,
    /// An access-log file (JSON lines, with or without Viceroy's `cachet_log :: ` prefix),
    /// followed as it grows like `tail -F`; `-` (the default without --envoy) reads stdin
    /// until EOF.
    #[arg(long, short = 'f', value_name = "FILE")]
    file: Option<PathBuf>,
    /// Read the file to its end and stop (with --file), instead of following it.
    #[arg(long)]
    no_follow: bool,
    /// Time between readings (humantime: `1s`, `500ms`).
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    interval: Duration,
    /// Print one reading and exit: Envoy is read twice `--interval` apart (totals of the
    /// second, rates between them); a log is read to its end.
    #[arg(long)]
    once: bool,
    /// One JSON object per reading on stdout (fields: docs/cli.md).
    #[arg(long)]
    json: bool,
    /// Plain refreshing text even when stdout is a terminal.
    #[arg(long)]
    plain: bool,
    /// A Cachet config (TOML, or JSON for `.json`) whose `envoy.shared_bytes` is the bound
    /// shown against `bytes_stored` (no source reports it).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e}"))?;
    if d < Duration::from_millis(10) {
        return Err(format!("{s:?}: the interval must be at least 10ms"));
    }
    Ok(d)
}

/// Where readings come from.
enum Source {
    Envoy {
        url: String,
        agent: ureq::Agent,
        note: Option<String>,
    },
    Log(LogSource),
}

/// Access-log lines arriving from the reader thread, summed as they come.
struct LogSource {
    rx: Receiver<Msg>,
    totals: LogTotals,
    ended: bool,
    failed: Option<String>,
    note: Option<String>,
}

impl LogSource {
    /// Consumes every message received so far.
    fn pump(&mut self) {
        while !self.ended {
            match self.rx.try_recv() {
                Ok(Msg::Line(l)) => match access::split(&l).map(access::parse) {
                    Some(Ok(a)) => self.totals.record(&a),
                    _ => self.totals.bad_line(),
                },
                Ok(Msg::Note(n)) => self.note = Some(n),
                Ok(Msg::Failed(e)) => {
                    self.failed = Some(e);
                    self.ended = true;
                }
                Ok(Msg::Eof) | Err(TryRecvError::Disconnected) => self.ended = true,
                Err(TryRecvError::Empty) => break,
            }
        }
    }
}

impl Source {
    /// Takes a reading. A log source first consumes every line received so far.
    fn read(&mut self) -> Result<Snapshot, String> {
        match self {
            Self::Envoy { url, agent, note } => {
                let mut r = agent
                    .get(url.as_str())
                    .call()
                    .map_err(|e| format!("{url}: {e}"))?;
                if r.status() != 200 {
                    return Err(format!("{url}: HTTP {}", r.status()));
                }
                let body = r
                    .body_mut()
                    .read_to_string()
                    .map_err(|e| format!("{url}: {e}"))?;
                *note = (!body.contains(snapshot::ENVOY_PREFIX)).then(|| {
                    format!(
                        "no {}* metric at {url}: is the Cachet filter loaded in this Envoy?",
                        snapshot::ENVOY_PREFIX
                    )
                });
                Ok(snapshot::from_envoy_stats(&body))
            }
            Self::Log(l) => {
                l.pump();
                match &l.failed {
                    Some(e) => Err(e.clone()),
                    None => Ok(l.totals.snapshot().clone()),
                }
            }
        }
    }

    fn ended(&self) -> bool {
        matches!(self, Self::Log(l) if l.ended)
    }

    /// Blocks until a log input ends (for `--once` on a log); one reading for Envoy.
    fn wait_end(&mut self) -> Result<Snapshot, String> {
        if let Self::Log(l) = self {
            while !l.ended {
                l.pump();
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        self.read()
    }

    fn note(&self) -> Option<&str> {
        match self {
            Self::Log(l) => l.note.as_deref(),
            Self::Envoy { note, .. } => note.as_deref(),
        }
    }
}

/// The Envoy admin URL for `/stats?filter=cachet` from `--envoy`.
fn stats_url(addr: &str) -> String {
    let base = if addr.contains("://") {
        addr.to_owned()
    } else {
        format!("http://{addr}")
    };
    format!("{}/stats?filter=cachet", base.trim_end_matches('/'))
}

/// Runs `cachet stat`. Exit 0 (quit, input ended, or `--once`), 1 when the source failed
/// after it had worked, 2 for usage, `--config` or a first reading that failed.
pub fn run(args: &StatArgs) -> ExitCode {
    let bound = match args.config.as_deref().map(crate::config_file::load) {
        None => None,
        Some(Ok(c)) => Some(c.envoy.shared_bytes),
        Some(Err(e)) => {
            eprint!("cachet: stat: {e}");
            eprintln!();
            return ExitCode::from(2);
        }
    };
    let (mut source, kind, input) = match open(args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cachet: stat: {e}");
            return ExitCode::from(2);
        }
    };
    let mut ui = Ui {
        args,
        kind,
        input: &input,
        bound,
        started: Instant::now(),
    };
    if args.once {
        return ui.once(&mut source);
    }
    let live = !args.json && !args.plain && std::io::stdout().is_terminal();
    if live {
        ui.live(&mut source)
    } else {
        ui.stream(&mut source)
    }
}

fn open(args: &StatArgs) -> Result<(Source, &'static str, String), String> {
    if let Some(addr) = &args.envoy {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .into();
        let url = stats_url(addr);
        return Ok((
            Source::Envoy {
                url: url.clone(),
                agent,
                note: None,
            },
            "envoy",
            url,
        ));
    }
    let input = match args.file.as_deref() {
        None => {
            if std::io::stdin().is_terminal() {
                return Err(
                    "no source: give --envoy URL, --file FILE, or pipe access-log lines on stdin"
                        .into(),
                );
            }
            Input::Stdin
        }
        Some(p) if p.as_os_str() == "-" => Input::Stdin,
        Some(p) if args.no_follow || args.once => Input::File(p.to_owned()),
        Some(p) => Input::Follow(p.to_owned()),
    };
    let rx = follow::spawn(&input).map_err(|e| format!("{}: {e}", input.name()))?;
    let source = Source::Log(LogSource {
        rx,
        totals: LogTotals::new(),
        ended: false,
        failed: None,
        note: None,
    });
    Ok((source, "log", input.name()))
}

/// How readings are shown.
struct Ui<'a> {
    args: &'a StatArgs,
    kind: &'static str,
    input: &'a str,
    bound: Option<u64>,
    started: Instant,
}

impl Ui<'_> {
    fn view<'v>(
        &'v self,
        s: &'v Snapshot,
        r: Option<&'v Rates>,
        status: Option<&'v str>,
        last: bool,
    ) -> View<'v> {
        View {
            kind: self.kind,
            input: self.input,
            elapsed: self.started.elapsed(),
            snapshot: s,
            rates: r,
            bound: self.bound,
            status,
            last,
        }
    }

    /// Prints one reading as JSON or text; false when stdout is gone.
    fn print(&self, v: &View<'_>) -> bool {
        let out = if self.args.json {
            format!("{}\n", view::json(v))
        } else {
            format!("{}\n", view::text(v))
        };
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(out.as_bytes())
            .and_then(|()| stdout.flush())
            .is_ok()
    }

    fn once(&mut self, source: &mut Source) -> ExitCode {
        let first = match source.wait_end() {
            Ok(s) => s,
            Err(e) => return fail(&e, 2),
        };
        let (snap, r) = if matches!(source, Source::Envoy { .. }) {
            let t0 = Instant::now();
            std::thread::sleep(self.args.interval);
            match source.read() {
                Ok(s) => {
                    let r = rates(&first, &s, t0.elapsed());
                    (s, r)
                }
                Err(e) => return fail(&e, 1),
            }
        } else {
            (first, None)
        };
        self.print(&self.view(&snap, r.as_ref(), source.note(), true));
        ExitCode::SUCCESS
    }

    /// Not a terminal (or --json/--plain): one reading per interval until the input ends.
    fn stream(&mut self, source: &mut Source) -> ExitCode {
        let mut prev: Option<(Snapshot, Instant)> = None;
        loop {
            let tick = Instant::now();
            match source.read() {
                Ok(s) => {
                    let r = prev.as_ref().and_then(|(p, at)| rates(p, &s, tick - *at));
                    let last = source.ended();
                    if !self.print(&self.view(&s, r.as_ref(), source.note(), last)) || last {
                        return ExitCode::SUCCESS;
                    }
                    prev = Some((s, tick));
                }
                Err(e) if prev.is_none() => return fail(&e, 2),
                Err(e) if matches!(source, Source::Log(_)) => return fail(&e, 1),
                Err(e) => eprintln!("cachet: stat: {e}"),
            }
            wait_tick(source, tick + self.args.interval);
        }
    }

    /// The terminal view (ratatui), until `q`, Esc or Ctrl-C, or the input ends; then the
    /// final reading is printed as text.
    fn live(&mut self, source: &mut Source) -> ExitCode {
        let mut term = match ratatui::try_init() {
            Ok(t) => t,
            Err(e) => {
                ratatui::restore();
                return fail(
                    &format!("the terminal view could not start ({e}); use --plain"),
                    2,
                );
            }
        };
        let mut prev: Option<(Snapshot, Instant)> = None;
        let mut shown: Option<(Snapshot, Option<Rates>)> = None;
        let mut error: Option<String>;
        let mut next = Instant::now();
        let code = loop {
            if Instant::now() >= next {
                let tick = Instant::now();
                next = tick + self.args.interval;
                error = None;
                match source.read() {
                    Ok(s) => {
                        let r = prev.as_ref().and_then(|(p, at)| rates(p, &s, tick - *at));
                        prev = Some((s.clone(), tick));
                        shown = Some((s, r));
                    }
                    Err(e) if prev.is_none() => break Err((e, 2)),
                    Err(e) if matches!(source, Source::Log(_)) => break Err((e, 1)),
                    Err(e) => error = Some(e),
                }
                if let Some((s, r)) = &shown {
                    let status = error.as_deref().or(source.note());
                    let v = self.view(s, r.as_ref(), status, false);
                    if term.draw(|f| view::draw(f, &v)).is_err() {
                        break Ok(());
                    }
                }
                if source.ended() {
                    break Ok(());
                }
            }
            if let Source::Log(l) = source {
                l.pump();
            }
            let wait = next
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(50));
            if quit_key(wait) {
                break Ok(());
            }
        };
        ratatui::restore();
        match code {
            Ok(()) => {
                if let Some((s, r)) = &shown {
                    self.print(&self.view(s, r.as_ref(), source.note(), true));
                }
                ExitCode::SUCCESS
            }
            Err((e, c)) => fail(&e, c),
        }
    }
}

/// Waits up to `wait` for a key; true for `q`, Esc or Ctrl-C.
fn quit_key(wait: Duration) -> bool {
    if !event::poll(wait).unwrap_or(false) {
        return false;
    }
    match event::read() {
        Ok(Event::Key(k)) if k.kind == KeyEventKind::Press => {
            matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
                || (k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL))
        }
        _ => false,
    }
}

/// Sleeps until `deadline`, returning early when a log input ends (so stdin's final
/// summary is not delayed by a whole interval).
fn wait_tick(source: &mut Source, deadline: Instant) {
    while Instant::now() < deadline {
        if let Source::Log(l) = source {
            l.pump();
            if l.ended {
                return;
            }
        }
        std::thread::sleep(
            deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(20)),
        );
    }
}

fn fail(e: &str, code: u8) -> ExitCode {
    eprintln!("cachet: stat: {e}");
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_url_accepts_an_address_or_a_url() {
        assert_eq!(
            stats_url("127.0.0.1:9901"),
            "http://127.0.0.1:9901/stats?filter=cachet"
        );
        assert_eq!(stats_url("http://h:1/"), "http://h:1/stats?filter=cachet");
        assert!(parse_interval("5ms").is_err());
        assert!(parse_interval("parsecs").is_err());
        assert_eq!(parse_interval("250ms"), Ok(Duration::from_millis(250)));
    }
}
