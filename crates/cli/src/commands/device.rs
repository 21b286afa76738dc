//! `cachet device classify`: the edge's device classification (the Vary dimension) on
//! User-Agent lines.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use cachet_device::{Classifier, Decision, DeviceConfig, Profile};
use clap::{Subcommand, ValueEnum};

use crate::config_file::load;
use crate::stdin_lines::each_line;

// The `cachet device` subcommands.
#[derive(Subcommand)]
pub enum DeviceCommand {
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

// `--profile`: the built-in rule profiles.
#[derive(Clone, Copy, ValueEnum)]
pub enum ProfileArg {
    Seed,
    Accurate,
}

/// Runs `cachet device …`.
pub fn run(command: DeviceCommand) -> ExitCode {
    let DeviceCommand::Classify {
        profile,
        config,
        hints,
        explain,
    } = command;
    super::exit_code(classify(profile, config.as_deref(), hints, explain))
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
