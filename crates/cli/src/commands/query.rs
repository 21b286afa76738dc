//! `cachet query normalize`: the edge's query normalization (the cache key's query part)
//! on `path?query` lines.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use cachet_query::Normalizer;
use clap::Subcommand;

use crate::config_file::load;
use crate::stdin_lines::each_line;

// The `cachet query` subcommands.
#[derive(Subcommand)]
pub enum QueryCommand {
    /// Reads one `path?query` per stdin line, writes the normalized form per stdout line.
    Normalize {
        /// A Cachet config whose `[query]` table is used (a file with only `[query]` is
        /// valid).
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

/// Runs `cachet query …`.
pub fn run(command: QueryCommand) -> ExitCode {
    let QueryCommand::Normalize { config } = command;
    super::exit_code(normalize(config.as_deref()))
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
