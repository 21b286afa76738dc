//! The `cachet` commands, one module each; `main.rs` parses the command line (clap) and
//! calls the command's `run`, which returns the exit status.

pub mod ban;
pub mod config;
pub mod device;
pub mod log;
pub mod purge;
pub mod query;
pub mod simulate;
pub mod stat;

use std::process::ExitCode;

/// The exit status of a command that reports its usage or configuration errors as an
/// `Err`: printed as `cachet: <error with its causes>` on stderr, exit status 2.
pub(crate) fn exit_code(result: anyhow::Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cachet: {e:#}");
            ExitCode::from(2)
        }
    }
}
