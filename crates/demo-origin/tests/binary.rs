//! The `cachet-demo-origin` binary announces its address on stdout and serves on it.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Command, Stdio};

#[test]
fn binary_prints_listening_line_and_serves() {
    let (mut child, addr) = start(&["--delay-ms", "0"]);
    let response = get(&addr, "/blog/alice/feed");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("x-origin-request: 1"), "{response}");
}

fn start(args: &[&str]) -> (std::process::Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cachet-demo-origin"))
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
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
    (child, addr)
}

fn get(addr: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn blogs_flag_hosts_the_given_public_and_private_blogs() {
    let (mut child, addr) = start(&["--blogs", "dave,erin:private"]);
    let dave = get(&addr, "/css/dave.css");
    let erin = get(&addr, "/css/erin.css");
    let alice = get(&addr, "/css/alice.css");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        dave.starts_with("HTTP/1.1 200") && dave.contains("max-age=86400"),
        "{dave}"
    );
    assert!(
        erin.starts_with("HTTP/1.1 200") && erin.contains("private"),
        "{erin}"
    );
    assert!(alice.starts_with("HTTP/1.1 404"), "not hosted: {alice}");
}

#[test]
fn bad_blogs_flag_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_cachet-demo-origin"))
        .args(["--listen", "127.0.0.1:0", "--blogs", "ok,bad name"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("blog names use ASCII letters"), "{err}");
}
