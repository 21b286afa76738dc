//! `Range: bytes=…` requests against a stored representation (RFC 9110 §14).

/// Most range specs read from one `Range` header; more make the request be answered with
/// the whole representation (a defence against range amplification, RFC 9110 §14.2's
/// "server MAY ignore").
pub const MAX_RANGES: usize = 16;

/// A satisfiable byte range of a representation, inclusive bounds (RFC 9110 §14.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte, 0-based.
    pub first: u64,
    /// Last byte, inclusive; `first <= last < length`.
    pub last: u64,
}

impl ByteRange {
    /// Number of bytes, `last - first + 1`.
    pub const fn len(&self) -> u64 {
        self.last - self.first + 1
    }

    /// Always `false`: a satisfiable range holds at least one byte.
    pub const fn is_empty(&self) -> bool {
        false
    }

    /// The `Content-Range` value for a representation of `length` bytes.
    pub fn content_range(&self, length: u64) -> String {
        format!("bytes {}-{}/{length}", self.first, self.last)
    }
}

/// What a `Range` header asks of a representation of known length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeRequest {
    /// No usable range: send the whole representation with `200`. Also the answer to a
    /// malformed header, a unit other than `bytes` (§14.2: ignored), and to several ranges
    /// (Cachet's documented choice: the full `200` rather than `multipart/byteranges`).
    Full,
    /// One satisfiable range: `206 Partial Content` with `Content-Range`.
    Partial(ByteRange),
    /// No range overlaps the representation: `416 Range Not Satisfiable` with
    /// `Content-Range: bytes */length` (§15.5.17).
    Unsatisfiable,
}

/// Interprets a `Range` header value for a representation of `length` bytes.
///
/// Grammar (§14.1.2): `bytes=` then a comma-separated list of `first-last`, `first-`
/// (to the end) or `-suffix` (the last `suffix` bytes). A `last` beyond the end is
/// clamped. Never panics; never allocates.
pub fn interpret(value: &[u8], length: u64) -> RangeRequest {
    let v = value.trim_ascii();
    let Some((unit, set)) = v.split_first_chunk::<6>() else {
        return RangeRequest::Full;
    };
    if !unit.eq_ignore_ascii_case(b"bytes=") {
        return RangeRequest::Full;
    }
    let mut satisfiable: Option<ByteRange> = None;
    let mut count = 0usize;
    let mut any_satisfiable = 0usize;
    for spec in set.split(|&b| b == b',') {
        let spec = spec.trim_ascii();
        if spec.is_empty() {
            continue;
        }
        count += 1;
        if count > MAX_RANGES {
            return RangeRequest::Full;
        }
        let Some(dash) = spec.iter().position(|&b| b == b'-') else {
            return RangeRequest::Full;
        };
        let (a, b) = (&spec[..dash], &spec[dash + 1..]);
        let r = if a.is_empty() {
            let Some(n) = number(b) else {
                return RangeRequest::Full;
            };
            (n > 0 && length > 0).then(|| ByteRange {
                first: length.saturating_sub(n),
                last: length - 1,
            })
        } else {
            let Some(first) = number(a) else {
                return RangeRequest::Full;
            };
            let last = if b.is_empty() {
                u64::MAX
            } else {
                match number(b) {
                    Some(l) if l >= first => l,
                    _ => return RangeRequest::Full,
                }
            };
            (first < length).then(|| ByteRange {
                first,
                last: last.min(length - 1),
            })
        };
        if let Some(r) = r {
            any_satisfiable += 1;
            satisfiable = Some(r);
        }
    }
    match (count, any_satisfiable) {
        (0, _) => RangeRequest::Full,
        (_, 0) => RangeRequest::Unsatisfiable,
        (1, _) => satisfiable.map_or(RangeRequest::Full, RangeRequest::Partial),
        _ => RangeRequest::Full,
    }
}

/// A decimal number of at most 19 digits (fits `u64`); `None` otherwise.
fn number(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    v.iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(first: u64, last: u64) -> RangeRequest {
        RangeRequest::Partial(ByteRange { first, last })
    }

    #[test]
    fn single_open_and_suffix_ranges() {
        assert_eq!(interpret(b"bytes=0-99", 1000), p(0, 99));
        assert_eq!(interpret(b"bytes=500-", 1000), p(500, 999));
        assert_eq!(interpret(b"bytes=-100", 1000), p(900, 999));
        assert_eq!(interpret(b"bytes=-5000", 1000), p(0, 999));
        assert_eq!(interpret(b"bytes=990-5000", 1000), p(990, 999));
        assert_eq!(
            interpret(b"Bytes = 0-0", 1000),
            RangeRequest::Full,
            "no spaces around ="
        );
        assert_eq!(interpret(b"BYTES=0-0", 1000), p(0, 0));
    }

    #[test]
    fn unsatisfiable_and_ignored() {
        assert_eq!(interpret(b"bytes=1000-", 1000), RangeRequest::Unsatisfiable);
        assert_eq!(interpret(b"bytes=-0", 1000), RangeRequest::Unsatisfiable);
        assert_eq!(interpret(b"bytes=0-", 0), RangeRequest::Unsatisfiable);
        for ignored in [
            &b"items=0-1"[..],
            b"bytes=5-1",
            b"bytes=a-b",
            b"bytes=",
            b"bytes=1",
            b"bytes=99999999999999999999-",
            b"",
            b"bytes=0-1\xff",
        ] {
            assert_eq!(interpret(ignored, 1000), RangeRequest::Full, "{ignored:?}");
        }
        // Several ranges: the whole representation (documented choice).
        assert_eq!(interpret(b"bytes=0-1, 5-9", 1000), RangeRequest::Full);
        // Several, only one satisfiable: that one.
        assert_eq!(interpret(b"bytes=0-1, 5000-", 1000), RangeRequest::Full);
        assert_eq!(
            interpret(b"bytes=2000-, 3000-", 1000),
            RangeRequest::Unsatisfiable
        );
        let many = format!("bytes={}", vec!["0-0"; MAX_RANGES + 1].join(","));
        assert_eq!(interpret(many.as_bytes(), 1000), RangeRequest::Full);
    }

    #[test]
    fn content_range() {
        let r = ByteRange { first: 0, last: 9 };
        assert_eq!(r.content_range(100), "bytes 0-9/100");
        assert_eq!(r.len(), 10);
    }

    proptest::proptest! {
        #[test]
        fn partial_ranges_lie_inside(v in proptest::collection::vec(proptest::num::u8::ANY, 0..40), len in 0u64..5000) {
            let mut h = b"bytes=".to_vec();
            h.extend(v);
            if let RangeRequest::Partial(r) = interpret(&h, len) {
                proptest::prop_assert!(r.first <= r.last && r.last < len);
            }
        }
    }
}
