//! The `cachet-demo-origin` binary announces its address on stdout and serves on it.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Command, Stdio};

#[test]
fn binary_prints_listening_line_and_serves() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cachet-demo-origin"))
        .args(["--listen", "127.0.0.1:0", "--delay-ms", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start binary");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("cachet-demo-origin listening on http://")
        .unwrap_or_else(|| panic!("unexpected line {line:?}"))
        .to_owned();
    let mut stream = TcpStream::connect(&addr).unwrap();
    write!(
        stream,
        "GET /blog/alice/feed HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("x-origin-request: 1"), "{response}");
}
