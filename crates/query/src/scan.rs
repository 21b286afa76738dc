//! Splits a query into `&`-separated segments and their names in one forward pass over the bytes.
//!
//! Each byte is looked at once: up to the first `=` or `&` (the name), then up to the
//! next `&` (the value). Word-at-a-time (SWAR) variants were measured on the benchmark
//! queries and were slower, both one that finds the next delimiter 8 bytes at a time and
//! one that turns each 64-byte block into `&`/`=` bit masks: parameters are a few bytes
//! long, so the per-parameter bookkeeping outweighs the saved byte comparisons.

/// One `&`-separated segment of a query, as byte offsets: `start..end` is the whole
/// segment (empty when `start == end`), `start..name_end` its name (the bytes before the
/// first `=`, or the whole segment when it has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segment {
    /// Offset of the first byte.
    pub(crate) start: usize,
    /// Offset just after the name (the first `=`, or `end`).
    pub(crate) name_end: usize,
    /// Offset just after the last byte (the next `&`, or the end of the query).
    pub(crate) end: usize,
}

/// Iterator over the `&`-separated segments of a query, in order, empty ones included
/// (`""` has one empty segment, `"a&"` two). Allocation-free.
#[derive(Debug, Clone)]
pub(crate) struct Segments<'a> {
    bytes: &'a [u8],
    /// Start of the next segment.
    pos: usize,
    /// The last segment has been returned.
    done: bool,
}

impl<'a> Segments<'a> {
    /// The segments of `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self {
            bytes,
            pos: 0,
            done: false,
        }
    }
}

impl Iterator for Segments<'_> {
    type Item = Segment;

    #[inline]
    fn next(&mut self) -> Option<Segment> {
        if self.done {
            return None;
        }
        let b = self.bytes;
        let start = self.pos;
        let mut i = start;
        // The name, two bytes per step (measured faster than one on short names).
        loop {
            if let Some(&[x, y]) = b.get(i..i + 2) {
                if x == b'=' || x == b'&' {
                    break;
                }
                if y == b'=' || y == b'&' {
                    i += 1;
                    break;
                }
                i += 2;
            } else {
                if i < b.len() && b[i] != b'=' && b[i] != b'&' {
                    i += 1;
                }
                break;
            }
        }
        let name_end = i;
        while i < b.len() && b[i] != b'&' {
            i += 1;
        }
        self.done = i >= b.len();
        self.pos = i + 1;
        Some(Segment {
            start,
            name_end,
            end: i,
        })
    }
}

/// The first 8 bytes of `b`, big-endian, zero-padded. `key_of(x) < key_of(y)` implies
/// `x < y` (bytewise), and the first `n ≤ 8` bytes of `x` are the top `n` bytes of the
/// key, so sorting and matching compare one integer before touching the bytes.
pub(crate) fn key_of(b: &[u8]) -> u64 {
    if let Some(head) = b.first_chunk::<8>() {
        return u64::from_be_bytes(*head);
    }
    b.iter()
        .zip((0..8).rev())
        .fold(0, |k, (&c, i)| k | (u64::from(c) << (8 * i)))
}

/// [`key_of`]`(&bytes[start..start + len])` with one 8-byte load: from `start` when 8
/// bytes are left there, else the last 8 bytes of `bytes` shifted into place; only a
/// query shorter than 8 bytes takes the byte loop. `start + len` must be at most
/// `bytes.len()`.
#[inline]
pub(crate) fn key_at(bytes: &[u8], start: usize, len: usize) -> u64 {
    let raw = if let Some(head) = bytes.get(start..).and_then(<[u8]>::first_chunk::<8>) {
        u64::from_be_bytes(*head)
    } else if let Some(last) = bytes.last_chunk::<8>() {
        // `start > bytes.len() - 8`: shift out the bytes before `start` (fewer than 8
        // unless `start == bytes.len()`, when `len` is 0 and the key is 0 anyway).
        let skip = u32::try_from(8 * (start + 8 - bytes.len())).unwrap_or(u32::MAX);
        u64::from_be_bytes(*last).checked_shl(skip).unwrap_or(0)
    } else {
        return key_of(bytes.get(start..start + len).unwrap_or_default());
    };
    if len >= 8 {
        raw
    } else {
        // Keep the top `len` bytes (none when `len` is 0).
        raw & !(u64::MAX >> (8 * len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every segment, the plain way: split on `&`, name up to the first `=`.
    fn reference(q: &[u8]) -> Vec<Segment> {
        let mut out = Vec::new();
        let mut start = 0;
        for seg in q.split(|&b| b == b'&') {
            let name = seg.iter().position(|&b| b == b'=').unwrap_or(seg.len());
            out.push(Segment {
                start,
                name_end: start + name,
                end: start + seg.len(),
            });
            start += seg.len() + 1;
        }
        out
    }

    fn collect(q: &[u8]) -> Vec<Segment> {
        let mut it = Segments::new(q);
        let out: Vec<Segment> = it.by_ref().collect();
        assert_eq!(it.next(), None, "fused");
        out
    }

    #[test]
    fn segments_include_empty_ones() {
        let spans: Vec<(usize, usize, usize)> = collect(b"&a=1&&bc&")
            .iter()
            .map(|s| (s.start, s.name_end, s.end))
            .collect();
        assert_eq!(
            spans,
            [(0, 0, 0), (1, 2, 4), (5, 5, 5), (6, 8, 8), (9, 9, 9)]
        );
        assert_eq!(collect(b"").len(), 1);
    }

    #[test]
    fn segments_of_long_queries() {
        for pad in 55..=70 {
            for q in [
                format!("{}=1&b", "a".repeat(pad)),
                format!("{}&{}=x=y&", "a".repeat(pad), "b".repeat(pad)),
                format!("{}={}&c", "n".repeat(pad), "v".repeat(pad)),
                format!("x={}&{}", "=".repeat(pad), "&".repeat(pad)),
            ] {
                assert_eq!(collect(q.as_bytes()), reference(q.as_bytes()), "{q}");
            }
        }
    }

    #[test]
    fn key_at_matches_key_of_everywhere() {
        for q in [
            &b""[..],
            b"a",
            b"abcdefg",
            b"abcdefgh",
            b"abcdefghijklmnopq",
        ] {
            for start in 0..=q.len() {
                for len in 0..=q.len() - start {
                    assert_eq!(
                        key_at(q, start, len),
                        key_of(&q[start..start + len]),
                        "{q:?} {start} {len}"
                    );
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn segments_match_reference(
            q in prop::collection::vec(
                prop_oneof![Just(b'&'), Just(b'='), Just(b'a'), Just(0u8), any::<u8>()],
                0..300,
            ),
        ) {
            prop_assert_eq!(collect(&q), reference(&q));
        }

        #[test]
        fn key_at_matches_key_of(q in prop::collection::vec(any::<u8>(), 0..40), a in 0usize..40, b in 0usize..40) {
            let start = a.min(q.len());
            let len = b.min(q.len() - start);
            prop_assert_eq!(key_at(&q, start, len), key_of(&q[start..start + len]));
        }
    }
}
