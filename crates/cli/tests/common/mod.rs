//! Shared by the CLI's integration tests.

pub mod sim;

use std::io::Write;
use std::process::{Command, Stdio};

/// Runs the `cachet` binary with `args`, feeding `stdin` from a thread (so a large input
/// cannot deadlock against a full stdout pipe); returns (exit code, stdout, stderr).
pub fn cachet(args: &[&str], stdin: &[u8]) -> (i32, Vec<u8>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8(out.stderr).unwrap(),
    )
}
