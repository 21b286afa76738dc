//! Answering from stored slices: a request no one slice answers (the whole
//! representation, a range across slices; `cachet_policy::plan::Stitch`) is answered by
//! combining the slices it covers, each asked for as a range inside that slice, which the
//! exchange serves from its stored slice or fills as that slice (RFC 9111 §3.4 "Combining
//! Partial Content", issue 30; ATS's `slice` plugin and nginx's `slice` module answer
//! whole requests the same way).
//!
//! Both hosts run the parts one after the other, feed each part's answer to
//! [`Stitcher::take`] and send [`Stitcher::head`] with the parts' bodies in order. Nothing
//! reaches the client before every part has come back, so a part that does not fit (the
//! representation changed between slices, the origin ignored `Range`) falls back to the
//! request's ordinary flow ([`Took::Whole`]) with nothing sent yet.
//!
//! Rules, each from RFC 9110 / 9111:
//! * Parts are combined only when they are the same representation: every part is a
//!   `206` for exactly the bytes asked (`Content-Range`, §14.4), with the same length,
//!   and, when there is more than one part, the same strong `ETag` (§8.8.3; RFC 9111 §3.4
//!   combines only under a strong validator). Anything else is [`Took::Whole`].
//! * The first part's `200` (an origin that ignores `Range`) answers the client as it is
//!   (a `200` is a valid answer to any `GET`, §14.2), and so does any status other than
//!   `206` (an error, a `416` for a range past the end) — except a `416` to a request for
//!   the whole representation (an empty one has no slice): [`Took::Whole`].
//! * The combined answer is a `200` for the whole representation, else a `206` with
//!   `Content-Range: bytes first-last/length` (§14.4); `Content-Length` is the sum of the
//!   parts; `X-Cache` is the least cached part's (`PASS`, then `MISS`, then `STALE`, then
//!   `HIT`); `Age` is the oldest part's (RFC 9111 §5.1: never younger than a part).
//! * A part in a coding other than identity is never spliced ([`Took::Whole`]).

use cachet_policy::plan::Stitch;
use cachet_policy::response::content_range;

use crate::CacheStatus;
use crate::exchange::Fields;
use crate::headers::Headers;

/// What a part's answer means for the combined one ([`Stitcher::take`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Took {
    /// It fits: ask for the next part ([`Stitcher::range`]).
    More,
    /// It fits and was the last: send [`Stitcher::head`] and the parts' bodies.
    Done,
    /// Answer the client with this (first) part as it is.
    AsIs,
    /// Combining does not apply: run the client's request through its ordinary flow.
    Whole,
}

/// Combines the parts of one request ([module docs](self)).
#[derive(Debug, Clone)]
pub struct Stitcher {
    want: Stitch,
    max_bytes: Option<u64>,
    /// First byte of the next part.
    next: u64,
    /// Last byte of the answer (inclusive), once the first part told the length.
    end: Option<u64>,
    total: u64,
    etag: Option<Vec<u8>>,
    head: Option<Fields>,
    cache: CacheStatus,
    age: u64,
    parts: usize,
}

impl Stitcher {
    /// A stitch for `want`. `max_bytes`: the most the combined answer may hold (a host
    /// that holds the whole answer in memory passes its bound, Envoy
    /// `[edge].max_object_bytes`; past it the request takes its ordinary flow), `None`
    /// for a host that streams the parts (Fastly appends body handles).
    pub fn new(want: Stitch, max_bytes: Option<u64>) -> Self {
        Self {
            want,
            max_bytes,
            next: want.first,
            end: None,
            total: 0,
            etag: None,
            head: None,
            cache: CacheStatus::Hit,
            age: 0,
            parts: 0,
        }
    }

    /// The last byte (inclusive) of the part that starts at [`Self::next`]: its slice's
    /// end, or the answer's.
    fn part_last(&self) -> u64 {
        let n = self.want.slice_bytes.max(1);
        let slice_end = (self.next / n).saturating_mul(n).saturating_add(n - 1);
        let end = self.end.or(self.want.last).unwrap_or(u64::MAX);
        slice_end.min(end)
    }

    /// The `Range` value the next part's request carries (`bytes=a-b` inside one slice).
    pub fn range(&self) -> String {
        format!("bytes={}-{}", self.next, self.part_last())
    }

    /// The combined answer's cache status: `PASS` when a part was passed, else `MISS`
    /// when one was fetched, else `STALE` when one was stale, else `HIT`.
    pub fn cache(&self) -> CacheStatus {
        self.cache
    }

    /// How many parts were taken.
    pub fn parts(&self) -> usize {
        self.parts
    }

    /// Takes the answer (`status`, `fields`) to the part asked for by [`Self::range`].
    pub fn take(&mut self, status: u16, fields: &Fields) -> Took {
        let first = self.head.is_none();
        if status != 206 {
            return match (first, status) {
                (true, 416) if self.want.whole => Took::Whole,
                (true, _) => Took::AsIs,
                (false, _) => Took::Whole,
            };
        }
        let cr = fields
            .value("content-range")
            .and_then(|v| String::from_utf8(v).ok());
        let Some((a, b, total)) = cr.as_deref().and_then(content_range) else {
            return Took::Whole;
        };
        let etag = fields.value("etag").filter(|e| !e.starts_with(b"W/"));
        let coded = fields.value("content-encoding").is_some_and(|c| {
            !c.trim_ascii().is_empty() && !c.trim_ascii().eq_ignore_ascii_case(b"identity")
        });
        if coded {
            // Slices are the identity coding; another coding's bytes never splice.
            return Took::Whole;
        }
        if first {
            // The length is known now: the answer ends at the representation's end.
            let last_byte = total.saturating_sub(1);
            let end = self.want.last.map_or(last_byte, |l| l.min(last_byte));
            self.end = Some(end);
            self.total = total;
            let more = end > self.part_last();
            let len = end.saturating_sub(self.want.first).saturating_add(1);
            if (more && etag.is_none()) || self.max_bytes.is_some_and(|m| len > m) {
                return Took::Whole;
            }
            self.etag = etag;
        } else if total != self.total || etag != self.etag {
            return Took::Whole;
        }
        if (a, b) != (self.next, self.part_last()) {
            return Took::Whole;
        }
        let part = match fields.value("x-cache").as_deref() {
            Some(b"HIT") => CacheStatus::Hit,
            Some(b"STALE") => CacheStatus::Stale,
            Some(b"PASS") => CacheStatus::Pass,
            _ => CacheStatus::Miss,
        };
        let rank = |c| match c {
            CacheStatus::Hit => 0,
            CacheStatus::Stale => 1,
            CacheStatus::Miss => 2,
            _ => 3,
        };
        if rank(part) > rank(self.cache) {
            self.cache = part;
        }
        let age = fields
            .value("age")
            .and_then(|v| std::str::from_utf8(&v).ok()?.trim().parse::<u64>().ok())
            .unwrap_or(0);
        self.age = self.age.max(age);
        if first {
            self.head = Some(fields.clone());
        }
        self.parts += 1;
        self.next = b.saturating_add(1);
        if self.end.is_some_and(|e| self.next > e) {
            Took::Done
        } else {
            Took::More
        }
    }

    /// The combined answer's status and fields (after [`Took::Done`]): the first part's
    /// fields with `Content-Range`, `Content-Length`, `X-Cache` and `Age` for the whole.
    pub fn head(&self) -> (u16, Fields) {
        let end = self.end.unwrap_or(0);
        let mut fields: Fields = self
            .head
            .iter()
            .flatten()
            .filter(|(n, _)| {
                !["content-range", "content-length", "x-cache", "age"]
                    .iter()
                    .any(|x| n.eq_ignore_ascii_case(x))
            })
            .cloned()
            .collect();
        let len = end.saturating_sub(self.want.first).saturating_add(1);
        fields.push(("content-length".into(), len.to_string().into_bytes()));
        let status = if self.want.whole {
            200
        } else {
            let cr = format!("bytes {}-{end}/{}", self.want.first, self.total);
            fields.push(("content-range".into(), cr.into_bytes()));
            206
        };
        fields.push(("x-cache".into(), self.cache.as_str().as_bytes().to_vec()));
        fields.push(("age".into(), self.age.to_string().into_bytes()));
        (status, fields)
    }
}

/// The request for one part, as a host sends it back through its own listener (Envoy's
/// `[envoy].slice_cluster`): `GET target` with `range` as its `Range`, and the client's
/// fields but its pseudo-headers (`:authority` stays), its own `Range` and hop-by-hop
/// fields (RFC 9110 §7.6.1), so the part is keyed, normalized and collapsed as any
/// request for that slice.
pub fn part_request<'a>(
    target: &'a str,
    fields: &'a [(String, Vec<u8>)],
    range: &'a str,
) -> Vec<(&'a str, &'a [u8])> {
    let listed = crate::fields::connection_listed(fields);
    let mut h: Vec<(&str, &[u8])> = vec![
        (":method", b"GET"),
        (":path", target.as_bytes()),
        (":scheme", b"http"),
    ];
    h.extend(
        fields
            .iter()
            .filter(|(n, _)| {
                n == ":authority"
                    || !(n.starts_with(':')
                        || n == "range"
                        || crate::fields::hop_by_hop(n, &listed))
            })
            .map(|(n, v)| (n.as_str(), v.as_slice())),
    );
    h.push(("range", range.as_bytes()));
    h
}

/// The lines a host sends with an answer it forwards whole ([`Stitcher::head`]'s, or a
/// part's as it is): `fields` without pseudo-headers, `Content-Length` (the host frames
/// the body it sends) and hop-by-hop fields.
pub fn answer_lines(fields: &[(String, Vec<u8>)]) -> Vec<(&str, &[u8])> {
    let listed = crate::fields::connection_listed(fields);
    fields
        .iter()
        .filter(|(n, _)| {
            !(n.starts_with(':')
                || n.eq_ignore_ascii_case("content-length")
                || crate::fields::hop_by_hop(n, &listed))
        })
        .map(|(n, v)| (n.as_str(), v.as_slice()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole() -> Stitch {
        Stitch {
            slice_bytes: 16,
            first: 0,
            last: None,
            whole: true,
        }
    }

    fn part(cr: &str, etag: &str, cache: &str, age: &str) -> Fields {
        let mut f: Fields = vec![
            ("content-type".into(), b"text/plain".to_vec()),
            ("content-range".into(), cr.as_bytes().to_vec()),
            ("x-cache".into(), cache.as_bytes().to_vec()),
            ("age".into(), age.as_bytes().to_vec()),
        ];
        if !etag.is_empty() {
            f.push(("etag".into(), etag.as_bytes().to_vec()));
        }
        f
    }

    fn get<'a>(f: &'a Fields, name: &str) -> Option<&'a [u8]> {
        f.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_slice())
    }

    #[test]
    fn the_whole_representation_is_combined_from_its_slices_in_order() {
        let mut s = Stitcher::new(whole(), None);
        let answers = [
            ("bytes=0-15", "bytes 0-15/40", "HIT", "7", Took::More),
            ("bytes=16-31", "bytes 16-31/40", "MISS", "0", Took::More),
            ("bytes=32-39", "bytes 32-39/40", "HIT", "30", Took::Done),
        ];
        for (asked, cr, cache, age, took) in answers {
            assert_eq!(s.range(), asked);
            assert_eq!(
                s.take(206, &part(cr, "\"v1\"", cache, age)),
                took,
                "{asked}"
            );
        }
        let (status, head) = s.head();
        assert_eq!(status, 200);
        assert_eq!(get(&head, "content-length"), Some(&b"40"[..]));
        assert_eq!(get(&head, "content-range"), None);
        assert_eq!(
            get(&head, "x-cache"),
            Some(&b"MISS"[..]),
            "one part was fetched"
        );
        assert_eq!(get(&head, "age"), Some(&b"30"[..]), "the oldest part's age");
        assert_eq!(get(&head, "content-type"), Some(&b"text/plain"[..]));
        assert_eq!(s.parts(), 3);
    }

    #[test]
    fn a_range_across_slices_is_a_206_of_exactly_its_bytes_clipped_at_the_end() {
        let want = Stitch {
            slice_bytes: 16,
            first: 14,
            last: Some(99),
            whole: false,
        };
        let mut s = Stitcher::new(want, None);
        assert_eq!(s.range(), "bytes=14-15");
        assert_eq!(
            s.take(206, &part("bytes 14-15/20", "\"v1\"", "HIT", "1")),
            Took::More
        );
        assert_eq!(s.range(), "bytes=16-19", "clipped to the length");
        assert_eq!(
            s.take(206, &part("bytes 16-19/20", "\"v1\"", "HIT", "2")),
            Took::Done
        );
        let (status, head) = s.head();
        assert_eq!(status, 206);
        assert_eq!(get(&head, "content-range"), Some(&b"bytes 14-19/20"[..]));
        assert_eq!(get(&head, "content-length"), Some(&b"6"[..]));
        assert_eq!(get(&head, "x-cache"), Some(&b"HIT"[..]));
        // A stale part makes the whole stale; a fetched one, a miss.
        let mut s = Stitcher::new(whole(), None);
        s.take(206, &part("bytes 0-15/32", "\"v1\"", "STALE", "0"));
        assert_eq!(s.cache(), CacheStatus::Stale);
        s.take(206, &part("bytes 16-31/32", "\"v1\"", "HIT", "0"));
        assert_eq!(s.cache(), CacheStatus::Stale);
    }

    #[test]
    fn parts_of_different_representations_or_without_a_strong_validator_are_never_combined() {
        // A later slice of another version (its ETag or its length changed).
        for (etag, cr) in [("\"v2\"", "bytes 16-31/40"), ("\"v1\"", "bytes 16-31/41")] {
            let mut s = Stitcher::new(whole(), None);
            assert_eq!(
                s.take(206, &part("bytes 0-15/40", "\"v1\"", "HIT", "0")),
                Took::More
            );
            assert_eq!(s.take(206, &part(cr, etag, "HIT", "0")), Took::Whole);
        }
        // No ETag, or a weak one: one part is fine, several are not.
        for etag in ["", "W/\"v1\""] {
            let mut s = Stitcher::new(whole(), None);
            assert_eq!(
                s.take(206, &part("bytes 0-15/40", etag, "HIT", "0")),
                Took::Whole
            );
            let mut one = Stitcher::new(whole(), None);
            assert_eq!(
                one.take(206, &part("bytes 0-9/10", etag, "HIT", "0")),
                Took::Done
            );
            assert_eq!(one.head().0, 200);
        }
        // Other bytes than asked, or no readable Content-Range.
        let mut s = Stitcher::new(whole(), None);
        assert_eq!(
            s.take(206, &part("bytes 1-15/40", "\"v1\"", "HIT", "0")),
            Took::Whole
        );
        let mut s = Stitcher::new(whole(), None);
        assert_eq!(
            s.take(206, &part("bytes */40", "\"v1\"", "HIT", "0")),
            Took::Whole
        );
        // A later part that is not a 206.
        let mut s = Stitcher::new(whole(), None);
        assert_eq!(
            s.take(206, &part("bytes 0-15/40", "\"v1\"", "HIT", "0")),
            Took::More
        );
        assert_eq!(s.take(503, &Vec::new()), Took::Whole);
        // A part in another coding.
        let mut s = Stitcher::new(whole(), None);
        let mut gz = part("bytes 0-15/40", "\"v1\"", "MISS", "0");
        gz.push(("content-encoding".into(), b"gzip".to_vec()));
        assert_eq!(s.take(206, &gz), Took::Whole);
    }

    #[test]
    fn a_first_answer_that_is_not_a_slice_goes_out_as_it_is_and_a_bound_falls_back() {
        let mut s = Stitcher::new(whole(), None);
        assert_eq!(
            s.take(200, &Vec::new()),
            Took::AsIs,
            "the origin ignored Range"
        );
        let mut s = Stitcher::new(whole(), None);
        assert_eq!(s.take(503, &Vec::new()), Took::AsIs);
        let mut s = Stitcher::new(whole(), None);
        assert_eq!(
            s.take(416, &Vec::new()),
            Took::Whole,
            "an empty representation"
        );
        let past = Stitch {
            slice_bytes: 16,
            first: 100,
            last: None,
            whole: false,
        };
        let mut s = Stitcher::new(past, None);
        assert_eq!(s.take(416, &Vec::new()), Took::AsIs, "a range past the end");
        // A host holding the answer in memory: over its bound, the ordinary flow.
        let mut s = Stitcher::new(whole(), Some(32));
        assert_eq!(
            s.take(206, &part("bytes 0-15/40", "\"v1\"", "HIT", "0")),
            Took::Whole
        );
        let mut s = Stitcher::new(whole(), Some(40));
        assert_eq!(
            s.take(206, &part("bytes 0-15/40", "\"v1\"", "HIT", "0")),
            Took::More
        );
    }
}
