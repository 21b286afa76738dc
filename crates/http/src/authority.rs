//! The request's authority, checked before a platform builds a URL from it.
//!
//! Rule (RFC 9112 §3.2, issue 27 item 14): a request whose `Host` (or `:authority`) is
//! missing, not text, or not a host the plan accepts is answered `400` with its reason,
//! never with a panic. The plan already answers such a request so
//! ([`cachet_policy::Policy::plan`]); this check applies the same rule
//! ([`cachet_policy::plan::normalize_host`]) *before* anything else reads the request,
//! because Fastly's SDK parses the request URL (built by the platform from `Host`) the
//! first time it is asked for it and panics on one it cannot parse
//! (`Host: blog.example:99999` answered `500` with a backtrace). The edge app calls it
//! first; the Envoy filter's plan gives the same answer (`tests/conformance/cases.toml`).

use cachet_policy::Synth;

use crate::headers::{Headers, text};
use crate::reply::{self, Reply};

/// The reason a missing or malformed authority is refused: the body of the `400`, in the
/// plan's own words (a test pins them equal).
pub const MALFORMED: &str = "missing or malformed Host header";

/// The request's authority as the plan reads it (`:authority`, else `Host`: the first
/// line), as received, when it is present, text, and a host the plan accepts
/// ([`cachet_policy::plan::normalize_host`]: a DNS name, IPv4 address or bracketed IPv6
/// literal, with an optional port of at most 65535).
///
/// # Errors
/// The `400` to answer ([`refused`]) when it is missing, not UTF-8 or malformed.
pub fn authority(headers: &(impl Headers + ?Sized)) -> Result<String, Reply> {
    let value = headers
        .value(":authority")
        .or_else(|| headers.value("host"));
    value
        .as_deref()
        .and_then(text)
        .filter(|h| cachet_policy::plan::normalize_host(h).is_some())
        .map(str::to_owned)
        .ok_or_else(refused)
}

/// The `400` for a missing or malformed authority: [`MALFORMED`] as `text/plain`,
/// `Cache-Control: no-store`, `X-Cache: SYNTH` (the plan's `Synth::BadRequest`
/// answer, byte for byte).
pub fn refused() -> Reply {
    reply::synth(&Synth::BadRequest { reason: MALFORMED })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, reason = "tests fail loudly")]

    use std::time::UNIX_EPOCH;

    use cachet_policy::{Decision, Policy, RequestView};

    use super::*;

    fn fields(pairs: &[(&str, &[u8])]) -> Vec<(String, Vec<u8>)> {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), v.to_vec()))
            .collect()
    }

    #[test]
    fn a_missing_or_malformed_authority_is_the_plans_400_and_never_a_panic() {
        let policy = Policy::new(cachet_policy::Config::default()).expect("defaults load");
        let planned = |host: Option<&str>| {
            let view = RequestView {
                method: "GET",
                scheme: "http",
                host,
                path_and_query: "/",
                ..RequestView::default()
            };
            match policy.plan(&view, UNIX_EPOCH).decision {
                Decision::Synth(s) => Some(reply::synth(&s)),
                _ => None,
            }
        };
        // No authority at all: the same answer as the plan's.
        let none = authority(fields(&[]).as_slice()).expect_err("refused");
        assert_eq!(Some(none.clone()), planned(None));
        assert_eq!((none.status, none.header("x-cache")), (400, Some("SYNTH")));
        assert_eq!(none.body, format!("{MALFORMED}\n").into_bytes());
        for bad in [
            &b""[..],
            b"bad host",
            b"h.example/x",
            b"caf\xe9.example",
            b"user@h.example",
            b"h.example:99999",
            b"h.example:-1",
            b"h.example:80:80",
        ] {
            let got = authority(fields(&[("host", bad)]).as_slice());
            let why = String::from_utf8_lossy(bad);
            let refused = got.expect_err(&why);
            assert_eq!(refused, super::refused(), "{why}");
            if let Ok(h) = std::str::from_utf8(bad) {
                assert_eq!(Some(refused), planned(Some(h)), "{why}");
            }
        }
    }

    #[test]
    fn a_usable_authority_comes_back_as_received() {
        for good in [
            "blog.example",
            "Blog.Example:8080",
            "blog.example.",
            "127.0.0.1:7676",
            "[::1]:443",
        ] {
            let got = authority(fields(&[("Host", good.as_bytes())]).as_slice());
            assert_eq!(got.as_deref(), Ok(good));
        }
        // `:authority` first, as the plan reads it.
        let both = fields(&[(":authority", b"a.example"), ("host", b"bad host")]);
        assert_eq!(authority(both.as_slice()).as_deref(), Ok("a.example"));
    }
}
