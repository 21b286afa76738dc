//! `cachet config check`: validates a configuration file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;

use crate::config_file::{LoadError, load};

// The `cachet config` subcommands.
#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Validates a config; prints every error with its path; exit 1 when invalid.
    Check {
        /// The TOML (or `.json`) file.
        file: PathBuf,
    },
}

/// Runs `cachet config …`.
pub fn run(command: ConfigCommand) -> ExitCode {
    match command {
        ConfigCommand::Check { file } => check(&file),
    }
}

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
