//! The `cachet` command: classify user agents, normalize queries, check configurations, check bans, purge through the Fastly API, simulate on access logs.
//!
//! This file parses the command line and dispatches; each command is a module of
//! [`commands`].

mod access;
mod commands;
mod config_file;
mod fastly;
mod fleet;
mod follow;
mod stdin_lines;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use commands::{ban, config, device, log, purge, query, simulate, stat};

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
        command: device::DeviceCommand,
    },
    /// Query normalization (the cache key's query part).
    Query {
        #[command(subcommand)]
        command: query::QueryCommand,
    },
    /// Configuration files.
    Config {
        #[command(subcommand)]
        command: config::ConfigCommand,
    },
    /// Ban expressions (Varnish syntax): parse one, or evaluate a scenario offline.
    Ban {
        #[command(subcommand)]
        command: ban::BanCommand,
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

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Device { command } => device::run(command),
        Command::Query { command } => query::run(command),
        Command::Config { command } => config::run(command),
        Command::Ban { command } => ban::run(command),
        Command::Purge(args) => purge::run(&args),
        Command::Simulate(args) => simulate::run(&args),
        Command::Stat(args) => stat::run(&args),
        Command::Log(args) => log::run(&args),
    }
}
