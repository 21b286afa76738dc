//! Reading a Cachet configuration file for the commands that take one (`--config`, `cachet
//! config check`): TOML, or JSON when the name ends in `.json`, every problem located.

use std::path::{Path, PathBuf};

use cachet_policy::{Config, PolicyError};

/// Loads and validates a config file, TOML unless it ends in `.json`. Every problem is
/// reported, each with its line, in line order (`cachet_policy::check`).
pub fn load(path: &Path) -> Result<Config, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|e| LoadError::Io(path.to_owned(), e))?;
    let checked = if path.extension().is_some_and(|e| e == "json") {
        cachet_policy::check::check_json(&text)
    } else {
        cachet_policy::check::check_toml(&text)
    };
    checked.map_err(|e| LoadError::Issues(path.to_owned(), e))
}

/// Why a config file was not loaded; its `Display` is the lines printed for it.
#[derive(Debug)]
pub enum LoadError {
    /// The file could not be read.
    Io(PathBuf, std::io::Error),
    /// The policy refused the (valid) configuration.
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
