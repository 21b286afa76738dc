//! What an adapter stores per object: the body (gzip when compressible) and its metadata.
//!
//! Seed: Hatena Blog stored objects gzip-compressed in Varnish and inflated only for the
//! rare client without gzip: ~3x more objects in the same memory.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

/// Largest inflated body served to an identity client, in bytes: a gzip bomb in the cache
/// cannot make the edge allocate without bound.
pub const MAX_INFLATED_BYTES: u64 = 64 * 1024 * 1024;

/// Origin response headers never stored with an object: hop-by-hop (RFC 9110 §7.6.1),
/// per-user, or recomputed at delivery.
const NOT_STORED: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "content-encoding",
    "vary",
    "age",
    "set-cookie",
    "surrogate-key",
    "surrogate-control",
    "date",
];

/// How the stored body is encoded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// Uncompressed.
    Identity,
    /// gzip, compressed by the edge or by the origin.
    Gzip,
    /// Another encoding the origin chose (`br`, `zstd`, …): served only to clients that
    /// accept it.
    Other(String),
}

/// Object metadata, stored as JSON next to the body (Fastly: the core cache's user metadata,
/// which Viceroy implements; Envoy: the shared-data entry).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    /// Schema version of this struct.
    pub v: u8,
    /// A hit-for-pass marker: the key's content is private; requests go to the origin.
    pub pass: bool,
    /// Origin status.
    pub status: u16,
    /// Stored response headers (name, value), in origin order.
    pub headers: Vec<(String, String)>,
    /// The client-facing `Vary`.
    pub vary: String,
    /// Encoding of the stored body.
    pub encoding: Encoding,
    /// Stored body length, bytes.
    pub stored_len: u64,
    /// Length before the edge compressed it (the origin's body length), bytes.
    pub origin_len: u64,
    /// Route that stored it.
    pub route: String,
}

impl Meta {
    /// A hit-for-pass marker for `route`.
    pub fn marker(route: &str) -> Self {
        Self {
            v: 1,
            pass: true,
            status: 0,
            headers: Vec::new(),
            vary: String::new(),
            encoding: Encoding::Identity,
            stored_len: 0,
            origin_len: 0,
            route: route.to_owned(),
        }
    }

    /// Parses stored metadata; `None` if it is not ours (treated as a miss).
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        serde_json::from_slice::<Self>(b).ok().filter(|m| m.v == 1)
    }

    /// Serialized form (JSON).
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serializing plain strings and integers cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// Whether an origin header is kept with the object.
pub fn stored_header(name: &str) -> bool {
    !NOT_STORED.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// gzip-compresses `body` (level 6, the zlib default).
///
/// # Errors
/// I/O errors from the encoder (none expected for an in-memory sink).
pub fn gzip(body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 3 + 64),
        flate2::Compression::default(),
    );
    enc.write_all(body)?;
    enc.finish()
}

/// Inflates a gzip body, refusing to produce more than [`MAX_INFLATED_BYTES`].
///
/// # Errors
/// Corrupt gzip data, or output over the bound.
pub fn gunzip(body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(body.len() * 4);
    let n = flate2::read::GzDecoder::new(body)
        .take(MAX_INFLATED_BYTES + 1)
        .read_to_end(&mut out)?;
    if n as u64 > MAX_INFLATED_BYTES {
        return Err(std::io::Error::other("inflated body exceeds the bound"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_roundtrip() {
        let body = b"<html>hello hello hello hello</html>".repeat(50);
        let z = gzip(&body).unwrap_or_default();
        assert!(z.len() < body.len() / 5);
        assert_eq!(gunzip(&z).unwrap_or_default(), body);
        assert!(gunzip(b"not gzip").is_err());
    }

    #[test]
    fn meta_roundtrip() {
        let m = Meta::marker("css");
        let back = Meta::from_bytes(&m.to_bytes());
        assert!(back.is_some_and(|b| b.pass && b.route == "css"));
        assert!(Meta::from_bytes(b"{}").is_none());
    }
}
