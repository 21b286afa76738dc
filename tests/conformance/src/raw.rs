//! One HTTP/1.1 exchange over a plain socket, for requests the client library will not
//! send as written: a `GET`/`HEAD` with a body in either framing (`Content-Length` or
//! `Transfer-Encoding: chunked`), the "fat GET" of issue 27.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::{ConformanceError, Reply};

/// How a raw request's body is framed (RFC 9112 §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Framing {
    /// `Content-Length: <n>`.
    ContentLength,
    /// `Transfer-Encoding: chunked`, the body as one chunk.
    Chunked,
    /// No body and neither field.
    None,
}

/// Sends `method path` to `base` (`http://host:port`) with `Host: host`, `headers` and
/// `body` framed as `framing`, `Connection: close`, and reads the whole answer.
///
/// # Errors
/// [`ConformanceError::Http`] on a socket error or an answer that is not HTTP/1.1.
pub fn send(
    base: &str,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    framing: Framing,
) -> Result<Reply, ConformanceError> {
    let err =
        |e: &dyn std::fmt::Display| ConformanceError::Http(format!("{method} {path} (raw): {e}"));
    let addr = base
        .strip_prefix("http://")
        .ok_or_else(|| err(&"base URL is not http://"))?;
    let mut s = TcpStream::connect(addr).map_err(|e| err(&e))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| err(&e))?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n");
    for (k, v) in headers {
        let _ = write!(req, "{k}: {v}\r\n");
    }
    let mut out = req.into_bytes();
    match framing {
        Framing::ContentLength => {
            out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
            out.extend_from_slice(body);
        }
        Framing::Chunked => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
            out.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
            out.extend_from_slice(body);
            out.extend_from_slice(b"\r\n0\r\n\r\n");
        }
        Framing::None => out.extend_from_slice(b"\r\n"),
    }
    s.write_all(&out).map_err(|e| err(&e))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| err(&e))?;
    parse(&raw, method).ok_or_else(|| {
        err(&format!(
            "unreadable answer: {:?}",
            String::from_utf8_lossy(&raw)
        ))
    })
}

/// Parses a whole HTTP/1.1 answer read until the connection closed; interim (1xx)
/// answers before it go to [`Reply::interim`].
fn parse(mut raw: &[u8], method: &str) -> Option<Reply> {
    let mut interim = Vec::new();
    loop {
        let (head, rest) = parse_head(raw)?;
        if (100..200).contains(&head.status) {
            interim.push(head);
            raw = rest;
            continue;
        }
        return with_body(head, rest, method, interim);
    }
}

/// One status line and its fields; the bytes after them.
fn parse_head(raw: &[u8]) -> Option<(Reply, &[u8])> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let mut reply = Reply {
        status,
        ..Reply::default()
    };
    for line in lines {
        let (k, v) = line.split_once(':')?;
        let name = k.trim().to_ascii_lowercase();
        reply
            .raw_headers
            .push((name.clone(), v.trim().as_bytes().to_vec()));
        reply
            .headers
            .entry(name)
            .and_modify(|e| {
                e.push_str(", ");
                e.push_str(v.trim());
            })
            .or_insert_with(|| v.trim().to_owned());
    }
    Some((reply, &raw[end + 4..]))
}

/// `reply` with its body read from `rest` per its framing; `None` when the body is
/// shorter than its framing says.
fn with_body(mut reply: Reply, rest: &[u8], method: &str, interim: Vec<Reply>) -> Option<Reply> {
    reply.interim = interim;
    let status = reply.status;
    let chunked = reply
        .headers
        .get("transfer-encoding")
        .is_some_and(|t| t.to_ascii_lowercase().contains("chunked"));
    reply.body = if method == "HEAD" || matches!(status, 204 | 304) {
        Vec::new()
    } else if chunked {
        dechunk(rest)?
    } else if let Some(n) = reply.headers.get("content-length") {
        rest.get(..n.trim().parse::<usize>().ok()?)?.to_vec()
    } else {
        rest.to_vec()
    };
    Some(reply)
}

fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let eol = rest.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&rest[..eol]).ok()?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

/// An origin that writes answers as they are given, byte for byte: framing and interim
/// answers the demo origin's HTTP library would refuse to send (issue 30). Each request
/// gets the answer of the first listed path prefix its target starts with (else `404`),
/// then the connection closes. Runs on a thread for the life of the process.
pub struct RawOrigin {
    /// Where it listens (`127.0.0.1`, a free port).
    pub addr: std::net::SocketAddr,
    targets: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl RawOrigin {
    /// Starts the origin with `answers` (`(path prefix, answer bytes)`).
    ///
    /// # Errors
    /// When no local port can be bound.
    pub fn spawn(answers: Vec<(&'static str, Vec<u8>)>) -> std::io::Result<Self> {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = l.local_addr()?;
        let targets = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = std::sync::Arc::clone(&targets);
        let answers = std::sync::Arc::new(answers);
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(c) = conn else { continue };
                let (seen, answers) = (
                    std::sync::Arc::clone(&seen),
                    std::sync::Arc::clone(&answers),
                );
                std::thread::spawn(move || answer_one(c, &seen, &answers));
            }
        });
        Ok(Self { addr, targets })
    }

    /// How many requests reached the origin with a target starting with `prefix`.
    pub fn requests(&self, prefix: &str) -> usize {
        self.targets
            .lock()
            .map_or(0, |t| t.iter().filter(|p| p.starts_with(prefix)).count())
    }
}

/// Reads one request head from `c`, records its target and writes its answer.
fn answer_one(
    mut c: TcpStream,
    seen: &std::sync::Mutex<Vec<String>>,
    answers: &[(&'static str, Vec<u8>)],
) {
    let _ = c.set_read_timeout(Some(Duration::from_secs(30)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match c.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
        }
    }
    let target = String::from_utf8_lossy(&buf)
        .split(' ')
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    let answer = answers
        .iter()
        .find(|(prefix, _)| target.starts_with(prefix))
        .map_or(
            &b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"[..],
            |(_, a)| a,
        );
    if let Ok(mut t) = seen.lock() {
        t.push(target);
    }
    let _ = c.write_all(answer);
}

/// The [`RawOrigin`] of [`framing_and_interim_cases`].
///
/// # Errors
/// As [`RawOrigin::spawn`].
pub fn framing_origin() -> std::io::Result<RawOrigin> {
    let hints = "HTTP/1.1 103 Early Hints\r\nLink: </hint.css>; rel=preload\r\n\r\n";
    RawOrigin::spawn(vec![
        (
            "/raw/te-and-length",
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 5\r\n\
              Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
                .to_vec(),
        ),
        (
            "/raw/two-cache-control",
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nCache-Control: public\r\n\
              Content-Length: 5\r\nConnection: close\r\n\r\nhello"
                .to_vec(),
        ),
        (
            "/raw/early-hints",
            format!(
                "{hints}HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n\
                 Content-Length: 5\r\nConnection: close\r\n\r\nhello"
            )
            .into_bytes(),
        ),
        (
            "/raw/processing",
            b"HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n\
              Content-Length: 5\r\nConnection: close\r\n\r\nhello"
                .to_vec(),
        ),
    ])
}

/// What every platform must do with the [`framing_origin`]'s answers (issue 30), through
/// the Cachet at `base`; `forwards_interim`: whether the platform passes 1xx answers on
/// (neither does today: docs/http.md). Each URL twice: `MISS`, then `HIT` with the same
/// body, one origin request.
///
/// * Both `Transfer-Encoding: chunked` and `Content-Length`: read by its chunks (RFC 9112
///   §6.3), stored.
/// * Two `Cache-Control` lines: sent as `max-age=60, public` (one line joined with `, `,
///   or the two lines; RFC 9110 §5.3), never with a bare comma.
/// * `103` / `102` before the final answer: the final answer is stored, never an interim
///   one, and the interim fields (`Link`) are not in it (RFC 9110 §15.2); a `HIT` has no
///   interim answer.
///
/// # Errors
/// The first check that fails, with what was received.
pub fn framing_and_interim_cases(
    base: &str,
    origin: &RawOrigin,
    forwards_interim: bool,
) -> Result<(), String> {
    for path in [
        "/raw/te-and-length",
        "/raw/two-cache-control",
        "/raw/early-hints",
        "/raw/processing",
    ] {
        for (i, want) in ["MISS", "HIT"].into_iter().enumerate() {
            let r = send(base, "GET", "raw.example", path, &[], b"", Framing::None)
                .map_err(|e| e.to_string())?;
            let got = |what: &str| format!("{path} answer {i}: {what}: {r:?}");
            if r.status != 200 || r.body != b"hello" {
                return Err(got("want 200 hello"));
            }
            if r.headers.get("x-cache").map(String::as_str) != Some(want) {
                return Err(got(&format!("want X-Cache {want}")));
            }
            if r.headers.contains_key("link") {
                return Err(got("an interim answer's field was stored or merged"));
            }
            let interim_wanted = forwards_interim && i == 0 && path.contains("hints");
            if r.interim.is_empty() == interim_wanted {
                return Err(got(&format!("want interim answers: {interim_wanted}")));
            }
        }
        if origin.requests(path) != 1 {
            return Err(format!(
                "{path}: {} origin requests, want 1",
                origin.requests(path)
            ));
        }
    }
    let r = send(
        base,
        "GET",
        "raw.example",
        "/raw/two-cache-control",
        &[],
        b"",
        Framing::None,
    )
    .map_err(|e| e.to_string())?;
    let cc: Vec<&[u8]> = r
        .raw_headers
        .iter()
        .filter(|(n, _)| n == "cache-control")
        .map(|(_, v)| v.as_slice())
        .collect();
    let joined = cc.join(&b", "[..]);
    if joined != b"max-age=60, public" {
        return Err(format!(
            "two Cache-Control lines came back as {:?}",
            cc.iter()
                .map(|v| String::from_utf8_lossy(v))
                .collect::<Vec<_>>()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_framings_of_an_answer() {
        let r = parse(
            b"HTTP/1.1 200 OK\r\nX-Cache: PASS\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
            "GET",
        )
        .expect("parses");
        assert_eq!((r.status, r.body.as_slice()), (200, &b"abcde"[..]));
        assert_eq!(r.headers.get("x-cache").map(String::as_str), Some("PASS"));
        let r = parse(
            b"HTTP/1.1 404 NF\r\ncontent-length: 2\r\n\r\nokEXTRA",
            "GET",
        )
        .expect("parses");
        assert_eq!((r.status, r.body.as_slice()), (404, &b"ok"[..]));
        assert!(parse(b"garbage", "GET").is_none());
    }
}
