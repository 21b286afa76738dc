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

/// Parses a whole HTTP/1.1 answer read until the connection closed.
fn parse(raw: &[u8], method: &str) -> Option<Reply> {
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
        reply
            .headers
            .entry(k.trim().to_ascii_lowercase())
            .and_modify(|e| {
                e.push_str(", ");
                e.push_str(v.trim());
            })
            .or_insert_with(|| v.trim().to_owned());
    }
    let rest = &raw[end + 4..];
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
