//! Shared by the `cachet simulate` tests: the demo configuration, a temporary directory and one generated log per test binary.
#![allow(dead_code, reason = "each test binary uses the part it needs")]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::cachet;

/// Lines of the shared generated log.
pub const LINES: u64 = 20_000;

/// A desktop Chrome User-Agent (class `pc`).
pub const PC: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";

/// The shipped edge configuration.
pub fn demo_config() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../edge-app/cachet.toml")
}

/// This test binary's temporary directory.
pub fn tmp() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

/// The generated log ([`LINES`] lines, seed 42), written once per test binary.
pub fn generated() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = tmp().join("gen.log");
        let (code, _, err) = cachet(
            &[
                "simulate",
                "--generate",
                &LINES.to_string(),
                "--seed",
                "42",
                "--out",
                path.to_str().unwrap(),
            ],
            b"",
        );
        assert_eq!(code, 0, "{err}");
        path
    })
}
