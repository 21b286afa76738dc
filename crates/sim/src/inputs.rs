//! Replaying whole log inputs: each file (or stdin) opened, read line by line, each line
//! parsed in its detected format and replayed, bad lines counted with a few examples.
//!
//! [`replay_inputs`] is what `cachet simulate` runs between opening its inputs and
//! building the [`Report`](crate::report::Report); an [`Observer`] sees progress, bad
//! lines and failed inputs as they happen (the CLI's progress bar and stderr lines).

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::input::{self, Input, Line};
use crate::logfmt::{self, Format};
use crate::replay::Engine;
use crate::report::{BadLine, InputReport, InputsSummary};

/// Bad lines kept as examples with their file and line number (all are counted).
pub const BAD_LINE_EXAMPLES: usize = 5;

/// Lines (all inputs, blank lines aside) between two [`Observer::progress`] calls.
pub const PROGRESS_EVERY: u64 = 16_384;

/// Watches a replay of inputs. Every method has an empty default.
pub trait Observer {
    /// Called every [`PROGRESS_EVERY`] lines: `bytes_read` raw (possibly compressed)
    /// bytes read from all inputs so far, `lines` read, `bad_lines` among them.
    fn progress(&mut self, bytes_read: u64, lines: u64, bad_lines: u64) {
        let _ = (bytes_read, lines, bad_lines);
    }

    /// One of the first [`BAD_LINE_EXAMPLES`] bad lines, as it is found (all are counted in
    /// the inputs' reports).
    fn bad_line(&mut self, example: &BadLine) {
        let _ = example;
    }

    /// Input `name` could not be opened, or failed after `error`'s line (`read error after
    /// line N: …`); what was read of it is replayed, the next input is read.
    fn input_failed(&mut self, name: &str, error: &str) {
        let _ = (name, error);
    }
}

/// An [`Observer`] that ignores everything.
impl Observer for () {}

/// What reading the inputs produced besides the engine's state.
#[derive(Debug)]
pub struct Outcome {
    /// Per input: its name, format, lines, records, bad lines; and the bad-line examples.
    pub summary: InputsSummary,
    /// Whether an input could not be opened or read to its end.
    pub read_failed: bool,
    /// Records that named no host (replayed with the engine's default host).
    pub no_host: u64,
}

/// The counters one replay keeps across its inputs.
struct Replay<'e, 'p, 'o> {
    engine: &'e mut Engine<'p>,
    observer: &'o mut dyn Observer,
    bytes: Rc<Cell<u64>>,
    summary: InputsSummary,
    read_failed: bool,
    no_host: u64,
    all_lines: u64,
    bad_before: u64,
    buf: Vec<u8>,
}

/// Replays `paths` in order (`-` is stdin) into `engine`: each input's format is the first
/// line that reads as one ([`Format::detect_line`]; Viceroy prints messages before its log
/// lines), combined when none does; blank lines are skipped, Cachet's own admin calls and
/// events counted apart ([`logfmt::NOT_TRAFFIC`]), lines over [`input::MAX_LINE_BYTES`]
/// and lines that do not parse counted as bad. Never fails: an input that cannot be opened
/// or read to its end is reported in its [`InputReport::error`] and
/// [`Outcome::read_failed`].
pub fn replay_inputs(
    paths: &[PathBuf],
    engine: &mut Engine<'_>,
    observer: &mut dyn Observer,
) -> Outcome {
    let mut replay = Replay {
        engine,
        observer,
        bytes: Rc::new(Cell::new(0)),
        summary: InputsSummary {
            inputs: Vec::new(),
            bad_line_examples: Vec::new(),
        },
        read_failed: false,
        no_host: 0,
        all_lines: 0,
        bad_before: 0,
        buf: Vec::with_capacity(4096),
    };
    for path in paths {
        let report = replay.input(path);
        replay.bad_before += report.bad_lines;
        replay.summary.inputs.push(report);
    }
    Outcome {
        summary: replay.summary,
        read_failed: replay.read_failed,
        no_host: replay.no_host,
    }
}

impl Replay<'_, '_, '_> {
    /// Replays one input; its report.
    fn input(&mut self, path: &Path) -> InputReport {
        let mut report = InputReport {
            name: if path.as_os_str() == "-" {
                "(stdin)".to_owned()
            } else {
                path.display().to_string()
            },
            format: None,
            gzip: false,
            lines: 0,
            records: 0,
            bad_lines: 0,
            not_traffic: 0,
            error: None,
        };
        let mut inp = match Input::open(path, Rc::clone(&self.bytes)) {
            Ok(i) => i,
            Err(e) => {
                self.fail(&mut report, e.to_string());
                return report;
            }
        };
        report.gzip = inp.gzip;
        loop {
            let mut buf = std::mem::take(&mut self.buf);
            let read = inp.next_line(&mut buf);
            let go_on = match read {
                Ok(None) => false,
                Ok(Some(Line::TooLong)) => {
                    report.lines += 1;
                    let why = format!("line longer than {} bytes", input::MAX_LINE_BYTES);
                    self.bad(&mut report, &why);
                    true
                }
                // Blank lines are counted, not replayed, and move no progress.
                Ok(Some(Line::Ok)) if buf.trim_ascii().is_empty() => {
                    report.lines += 1;
                    self.buf = buf;
                    continue;
                }
                Ok(Some(Line::Ok)) => {
                    report.lines += 1;
                    self.line(&mut report, &buf);
                    true
                }
                Err(e) => {
                    let msg = format!("read error after line {}: {e}", report.lines);
                    self.fail(&mut report, msg);
                    false
                }
            };
            self.buf = buf;
            if !go_on {
                return report;
            }
            self.all_lines += 1;
            if self.all_lines.is_multiple_of(PROGRESS_EVERY) {
                let bad = self.bad_before + report.bad_lines;
                self.observer
                    .progress(self.bytes.get(), self.all_lines, bad);
            }
        }
    }

    /// Parses and replays one non-blank line of `report`'s input.
    fn line(&mut self, report: &mut InputReport, line: &[u8]) {
        let format = match report.format {
            Some(f) => f,
            None => match Format::detect_line(line) {
                Some(f) => *report.format.insert(f),
                None => Format::Combined,
            },
        };
        match logfmt::parse_line(format, line) {
            Ok(rec) => {
                self.no_host += u64::from(rec.host.is_none());
                self.engine.record(&rec);
                report.records += 1;
            }
            Err(logfmt::NOT_TRAFFIC) => report.not_traffic += 1,
            Err(why) => self.bad(report, why),
        }
    }

    /// Counts a bad line of `report` (its current line) and keeps the first few as
    /// examples, shown to the observer as they are found.
    fn bad(&mut self, report: &mut InputReport, reason: &str) {
        report.bad_lines += 1;
        let examples = &mut self.summary.bad_line_examples;
        if examples.len() < BAD_LINE_EXAMPLES {
            let example = BadLine {
                file: report.name.clone(),
                line: report.lines,
                reason: reason.to_owned(),
            };
            self.observer.bad_line(&example);
            examples.push(example);
        }
    }

    /// Records that `report`'s input failed with `error`.
    fn fail(&mut self, report: &mut InputReport, error: String) {
        self.observer.input_failed(&report.name, &error);
        report.error = Some(error);
        self.read_failed = true;
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use cachet_policy::Policy;

    use super::*;
    use crate::replay::Settings;

    /// What the observer saw, in order.
    #[derive(Default)]
    struct Seen(Vec<String>);

    impl Observer for Seen {
        fn bad_line(&mut self, e: &BadLine) {
            self.0.push(format!("{}:{}: {}", e.file, e.line, e.reason));
        }

        fn input_failed(&mut self, name: &str, error: &str) {
            self.0.push(format!("failed {name}: {error}"));
        }
    }

    fn policy() -> Policy {
        Policy::from_toml(
            "[origin]\nurl = \"http://origin.example\"\n\n\
             [[routes]]\nname = \"all\"\npath_prefix = \"/\"\nttl = \"60s\"\n",
        )
        .expect("valid config")
    }

    fn settings() -> Settings {
        Settings {
            memory: 1 << 20,
            gzip_ratio: 0.36,
            object_overhead: 256,
            baseline_ttl: None,
            baseline_grace: None,
            default_host: "localhost".to_owned(),
        }
    }

    #[test]
    fn inputs_are_replayed_in_order_with_bad_lines_and_failures_reported() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("a.log");
        let mut f = std::fs::File::create(&log).unwrap();
        let ok = r#"203.0.113.9 - - [01/Mar/2025:00:00:00 +0000] "GET /a HTTP/1.1" 200 512 "-" "curl/8""#;
        writeln!(f, "{ok}\n\n{ok}\nnot a log line").unwrap();
        writeln!(f, "{}", "x".repeat(input::MAX_LINE_BYTES + 1)).unwrap();
        drop(f);
        let missing = dir.path().join("missing.log");
        let policy = policy();
        let mut engine = Engine::new(&policy, settings());
        let mut seen = Seen::default();
        let out = replay_inputs(&[log.clone(), missing.clone()], &mut engine, &mut seen);

        let [a, m] = &out.summary.inputs[..] else {
            panic!("two input reports: {:?}", out.summary.inputs)
        };
        assert_eq!(a.format, Some(Format::Combined));
        assert_eq!((a.lines, a.records, a.bad_lines), (5, 2, 2));
        assert_eq!(a.error, None);
        assert_eq!(out.no_host, 2, "combined lines name no host");
        assert!(m.error.is_some() && m.lines == 0);
        assert!(out.read_failed);
        let name = log.display();
        assert_eq!(seen.0.len(), 3, "{:?}", seen.0);
        assert!(
            seen.0[0].starts_with(&format!("{name}:4: ")),
            "{:?}",
            seen.0
        );
        assert_eq!(
            seen.0[1],
            format!("{name}:5: line longer than {} bytes", input::MAX_LINE_BYTES)
        );
        assert!(seen.0[2].starts_with(&format!("failed {}: ", missing.display())));
        assert_eq!(out.summary.bad_line_examples.len(), 2);
        assert_eq!(engine.first_time, Some(1_740_787_200));
    }

    #[test]
    fn only_the_first_bad_lines_are_examples() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("bad.log");
        std::fs::write(&log, "bad\n".repeat(BAD_LINE_EXAMPLES + 3)).unwrap();
        let policy = policy();
        let mut engine = Engine::new(&policy, settings());
        let out = replay_inputs(&[log], &mut engine, &mut ());
        assert_eq!(
            out.summary.inputs[0].bad_lines,
            BAD_LINE_EXAMPLES as u64 + 3
        );
        assert_eq!(out.summary.bad_line_examples.len(), BAD_LINE_EXAMPLES);
        assert!(!out.read_failed);
    }
}
