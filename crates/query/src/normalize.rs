//! The compiled normalizer: bounds checks, an allocation-free "already normal?" pass, and the rebuild.

use std::borrow::Cow;
use std::cmp::Ordering;

use crate::glob::{PatternSet, key_of};
use crate::{MAX_PARAMS_CAP, QueryConfig, QueryError, SortMode};

/// Parameters kept on the stack while rebuilding; longer queries spill to the heap.
const INLINE_PARAMS: usize = 32;

/// Up to this many parameters, duplicate names are looked for by comparing every pair;
/// above it, by sorting name spans in a stack array.
const PAIRWISE_DUP_CHECK: usize = 16;

/// Up to this many kept parameters, sorting is a plain insertion sort.
const SMALL_SORT: usize = 24;

/// The raw-byte name of a parameter: the bytes before the first `=`, or all of them.
fn name_of(param: &[u8]) -> &[u8] {
    match param.iter().position(|&c| c == b'=') {
        Some(i) => &param[..i],
        None => param,
    }
}

/// One `&`-separated segment of a query, as byte offsets: `start..end` is the whole
/// segment (empty when `start == end`), `start..name_end` its name.
#[derive(Debug, Clone, Copy)]
struct Segment {
    start: usize,
    name_end: usize,
    end: usize,
}

/// Iterator over the segments of a query, empty ones included; allocation-free.
#[derive(Clone)]
struct Segments<'a> {
    bytes: &'a [u8],
    pos: usize,
    done: bool,
}

impl<'a> Segments<'a> {
    fn new(query: &'a str) -> Self {
        Self {
            bytes: query.as_bytes(),
            pos: 0,
            done: false,
        }
    }
}

impl Iterator for Segments<'_> {
    type Item = Segment;

    fn next(&mut self) -> Option<Segment> {
        if self.done {
            return None;
        }
        let start = self.pos;
        let rest = self.bytes.get(start..).unwrap_or_default();
        let len = rest.iter().position(|&c| c == b'&').unwrap_or_else(|| {
            self.done = true;
            rest.len()
        });
        let name_len = name_of(&rest[..len]).len();
        self.pos = start + len + 1;
        Some(Segment {
            start,
            name_end: start + name_len,
            end: start + len,
        })
    }
}

/// One non-empty parameter kept for the output: its segment and a sort key (the
/// [`key_of`] of its name, or of the whole parameter under [`SortMode::Param`]).
#[derive(Debug, Clone, Copy)]
struct Param {
    key: u64,
    seg: Segment,
}

impl Param {
    /// Placeholder for unused inline slots.
    const EMPTY: Self = Self {
        key: 0,
        seg: Segment {
            start: 0,
            name_end: 0,
            end: 0,
        },
    };
}

/// A growable list of parameters that stays on the stack up to [`INLINE_PARAMS`].
struct ParamBuf {
    inline: [Param; INLINE_PARAMS],
    len: usize,
    spill: Vec<Param>,
}

impl ParamBuf {
    fn new() -> Self {
        Self {
            inline: [Param::EMPTY; INLINE_PARAMS],
            len: 0,
            spill: Vec::new(),
        }
    }

    fn push(&mut self, p: Param) {
        if self.spill.is_empty() && self.len < INLINE_PARAMS {
            self.inline[self.len] = p;
            self.len += 1;
        } else {
            if self.spill.is_empty() {
                self.spill.reserve(INLINE_PARAMS * 2);
                self.spill.extend_from_slice(&self.inline);
            }
            self.spill.push(p);
        }
    }

    fn as_mut_slice(&mut self) -> &mut [Param] {
        if self.spill.is_empty() {
            &mut self.inline[..self.len]
        } else {
            &mut self.spill
        }
    }
}

/// Comparisons of parameters of one query.
#[derive(Clone, Copy)]
struct Cmp<'q>(&'q [u8]);

impl<'q> Cmp<'q> {
    fn name(self, p: &Param) -> &'q [u8] {
        &self.0[p.seg.start..p.seg.name_end]
    }

    fn text(self, p: &Param) -> &'q [u8] {
        &self.0[p.seg.start..p.seg.end]
    }

    /// Received order: position in the query.
    fn position(a: &Param, b: &Param) -> Ordering {
        a.seg.start.cmp(&b.seg.start)
    }

    /// Name order (keys hold name prefixes), ties broken by received order: the result
    /// of a stable sort by name, without the scratch buffer a stable sort may allocate.
    fn name_then_position(self, a: &Param, b: &Param) -> Ordering {
        a.key
            .cmp(&b.key)
            .then_with(|| self.name(a).cmp(self.name(b)))
            .then_with(|| Self::position(a, b))
    }

    /// Whole-parameter order (keys hold parameter prefixes); equal parameters are
    /// identical bytes, so the tie-break is only for determinism.
    fn text_order(self, a: &Param, b: &Param) -> Ordering {
        a.key
            .cmp(&b.key)
            .then_with(|| self.text(a).cmp(self.text(b)))
    }

    /// Keeps the first of each run of equal names in `params` (grouped by name);
    /// returns how many remain at the front.
    fn dedup_names(self, params: &mut [Param]) -> usize {
        if params.is_empty() {
            return 0;
        }
        let mut w = 1;
        for r in 1..params.len() {
            if self.name(&params[r]) != self.name(&params[w - 1]) {
                params[w] = params[r];
                w += 1;
            }
        }
        w
    }
}

/// Sorts `v` by `less`: insertion sort up to [`SMALL_SORT`] elements (the common case,
/// inlined, no pivot selection), `sort_unstable_by` above. Allocation-free either way.
fn sort_params(v: &mut [Param], less: impl Fn(&Param, &Param) -> bool) {
    if v.len() > SMALL_SORT {
        v.sort_unstable_by(|a, b| {
            if less(a, b) {
                Ordering::Less
            } else if less(b, a) {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        });
        return;
    }
    for i in 1..v.len() {
        let x = v[i];
        let mut j = i;
        while j > 0 && less(&x, &v[j - 1]) {
            v[j] = v[j - 1];
            j -= 1;
        }
        v[j] = x;
    }
}

/// Whether two parameters of `query` share a name; `count` is the number of non-empty
/// parameters, at most [`MAX_PARAMS_CAP`]. Allocation-free.
fn has_duplicate_names(query: &str, count: usize) -> bool {
    let bytes = query.as_bytes();
    let names = Segments::new(query)
        .filter(|s| s.end > s.start)
        .map(|s| &bytes[s.start..s.name_end]);
    if count <= PAIRWISE_DUP_CHECK {
        return names
            .clone()
            .enumerate()
            .any(|(i, a)| names.clone().skip(i + 1).any(|b| a == b));
    }
    // Name spans (offset, length) in 16 bits: queries are at most MAX_QUERY_BYTES_CAP.
    let mut spans = [(0u16, 0u16); MAX_PARAMS_CAP];
    let mut n = 0;
    for s in Segments::new(query).filter(|s| s.end > s.start) {
        let (Ok(start), Ok(len), Some(slot)) = (
            u16::try_from(s.start),
            u16::try_from(s.name_end - s.start),
            spans.get_mut(n),
        ) else {
            // Outside the validated bounds: let the rebuild decide.
            return true;
        };
        *slot = (start, len);
        n += 1;
    }
    let name = |(s, l): (u16, u16)| &bytes[usize::from(s)..usize::from(s) + usize::from(l)];
    let spans = &mut spans[..n];
    spans.sort_unstable_by(|a, b| name(*a).cmp(name(*b)));
    spans.windows(2).any(|w| name(w[0]) == name(w[1]))
}

/// A compiled [`QueryConfig`]: immutable, `Send + Sync`, shared by every request.
///
/// Normalization, on the raw query bytes and never decoding (as Varnish and
/// vmod-querystring do):
///
/// 1. empty parameters (`&&`, leading or trailing `&`) are dropped;
/// 2. a parameter whose name (bytes before the first `=`) does not match
///    [`QueryConfig::keep`] (when non-empty) or matches [`QueryConfig::remove`] is
///    dropped;
/// 3. the rest are ordered by [`QueryConfig::sort`];
/// 4. with [`QueryConfig::dedupe`], only the first parameter of each name in that order
///    is kept;
/// 5. they are joined with `&`.
///
/// The result is idempotent (normalizing it again returns it borrowed and unchanged).
#[derive(Debug, Clone)]
pub struct Normalizer {
    remove: PatternSet,
    /// Allowlist; ignored when `keep_all`.
    keep: PatternSet,
    /// `keep` is empty: every name not removed is kept.
    keep_all: bool,
    sort: SortMode,
    dedupe: bool,
    max_params: usize,
    max_bytes: usize,
}

impl Normalizer {
    /// Compiles `config`.
    ///
    /// # Errors
    /// The first problem [`QueryConfig::validate`] reports:
    /// [`QueryError::InvalidPattern`], [`QueryError::TooManyPatterns`] or
    /// [`QueryError::InvalidLimit`].
    pub fn new(config: &QueryConfig) -> Result<Self, QueryError> {
        if let Some((_, e)) = config.errors().into_iter().next() {
            return Err(e);
        }
        let keep = PatternSet::new(&config.keep)?;
        Ok(Self {
            remove: PatternSet::new(&config.remove)?,
            keep_all: keep.is_empty(),
            keep,
            sort: config.sort,
            dedupe: config.dedupe,
            max_params: config.max_params,
            max_bytes: config.max_bytes,
        })
    }

    /// Whether a parameter named `name` (raw bytes before the first `=`) survives the
    /// `keep` and `remove` lists. Case-sensitive, no percent-decoding.
    pub fn keeps(&self, name: &str) -> bool {
        self.keeps_name(name.as_bytes(), key_of(name.as_bytes()))
    }

    /// As [`Normalizer::keeps`]; `key` is [`key_of`]`(name)`.
    fn keeps_name(&self, name: &[u8], key: u64) -> bool {
        (self.keep_all || self.keep.matches(name, key)) && !self.remove.matches(name, key)
    }

    /// Normalizes a query string, given without the leading `?`.
    ///
    /// Returns [`Cow::Borrowed`] without allocating when `query` is already normal, and
    /// also borrowed (a slice of `query`) whenever the result is a contiguous run of it,
    /// e.g. when only trailing tracking parameters or stray `&` are dropped. The result
    /// may be empty.
    ///
    /// # Errors
    /// * [`QueryError::TooLong`] when `query` exceeds [`QueryConfig::max_bytes`] bytes;
    /// * [`QueryError::TooManyParams`] when it has more than [`QueryConfig::max_params`]
    ///   non-empty parameters (counted before removal).
    ///
    /// Fail closed: the caller then forwards the request as received, uncached, and logs
    /// one line; it never builds a cache key from a query it could not normalize.
    pub fn normalize<'a>(&self, query: &'a str) -> Result<Cow<'a, str>, QueryError> {
        if query.len() > self.max_bytes {
            return Err(QueryError::TooLong {
                len: query.len(),
                limit: self.max_bytes,
            });
        }
        if self.is_normal(query)? {
            return Ok(Cow::Borrowed(query));
        }
        self.rebuild(query)
    }

    /// Normalizes the query part of a request target `path?query` (or a bare `path`):
    /// the path, up to the first `?`, is returned untouched; a `?` followed by a query
    /// that normalizes to nothing is dropped (`/a?` and `/a?utm_source=x` become `/a`).
    ///
    /// Returns [`Cow::Borrowed`] without allocating when the target is already normal or
    /// when only the `?` and the query are dropped.
    ///
    /// # Errors
    /// As [`Normalizer::normalize`] for the query part (the path is not bounded here).
    pub fn normalize_target<'a>(
        &self,
        path_and_query: &'a str,
    ) -> Result<Cow<'a, str>, QueryError> {
        let Some((path, query)) = path_and_query.split_once('?') else {
            return Ok(Cow::Borrowed(path_and_query));
        };
        let normal = self.normalize(query)?;
        if normal.is_empty() {
            return Ok(Cow::Borrowed(path));
        }
        if matches!(normal, Cow::Borrowed(q) if q.len() == query.len()) {
            return Ok(Cow::Borrowed(path_and_query));
        }
        let mut out = String::with_capacity(path.len() + 1 + normal.len());
        out.push_str(path);
        out.push('?');
        out.push_str(&normal);
        Ok(Cow::Owned(out))
    }

    /// The [`QueryError::TooManyParams`] for `query`, counting all of it.
    fn too_many(&self, query: &str) -> QueryError {
        QueryError::TooManyParams {
            count: Segments::new(query).filter(|s| s.end > s.start).count(),
            limit: self.max_params,
        }
    }

    /// Whether normalizing `query` would return it unchanged, in one allocation-free
    /// pass: no empty parameter, every name kept, already in order, no repeated name
    /// under `dedupe`.
    ///
    /// # Errors
    /// [`QueryError::TooManyParams`] (checked while scanning).
    fn is_normal(&self, query: &str) -> Result<bool, QueryError> {
        if query.is_empty() {
            return Ok(true);
        }
        let bytes = query.as_bytes();
        let mut count = 0usize;
        // (whole parameter, name, key of the name) of the previous parameter
        let mut prev: Option<(&[u8], &[u8], u64)> = None;
        for s in Segments::new(query) {
            if s.end == s.start {
                return Ok(false);
            }
            count += 1;
            if count > self.max_params {
                return Err(self.too_many(query));
            }
            let text = &bytes[s.start..s.end];
            let name = &bytes[s.start..s.name_end];
            let key = key_of(name);
            if !self.keeps_name(name, key) {
                return Ok(false);
            }
            if let Some((prev_text, prev_name, prev_key)) = prev {
                let in_order = match self.sort {
                    SortMode::Name => match prev_key.cmp(&key).then_with(|| prev_name.cmp(name)) {
                        Ordering::Less => true,
                        Ordering::Equal => !self.dedupe,
                        Ordering::Greater => false,
                    },
                    SortMode::Param => prev_text <= text,
                    SortMode::None => true,
                };
                if !in_order {
                    return Ok(false);
                }
            }
            prev = Some((text, name, key));
        }
        // Under name sort equal names are adjacent and were checked above.
        if self.dedupe && self.sort != SortMode::Name && has_duplicate_names(query, count) {
            return Ok(false);
        }
        Ok(true)
    }

    /// Builds the normal form of `query` (known not to be normal already).
    ///
    /// # Errors
    /// [`QueryError::TooManyParams`].
    fn rebuild<'a>(&self, query: &'a str) -> Result<Cow<'a, str>, QueryError> {
        let bytes = query.as_bytes();
        let mut buf = ParamBuf::new();
        let mut count = 0usize;
        for seg in Segments::new(query) {
            if seg.end == seg.start {
                continue;
            }
            count += 1;
            if count > self.max_params {
                return Err(self.too_many(query));
            }
            let name = &bytes[seg.start..seg.name_end];
            let name_key = key_of(name);
            if self.keeps_name(name, name_key) {
                let key = if self.sort == SortMode::Param {
                    key_of(&bytes[seg.start..seg.end])
                } else {
                    name_key
                };
                buf.push(Param { key, seg });
            }
        }
        let params = buf.as_mut_slice();
        let n = self.order(Cmp(bytes), params);
        let params = &params[..n];
        let (Some(first), Some(last)) = (params.first(), params.last()) else {
            return Ok(Cow::Borrowed(&query[..0]));
        };
        // Still in received order and separated by single `&`: a slice of the input.
        if params
            .windows(2)
            .all(|w| w[0].seg.end + 1 == w[1].seg.start)
        {
            return Ok(Cow::Borrowed(&query[first.seg.start..last.seg.end]));
        }
        let mut out = String::with_capacity(query.len());
        for (i, p) in params.iter().enumerate() {
            if i > 0 {
                out.push('&');
            }
            out.push_str(&query[p.seg.start..p.seg.end]);
        }
        Ok(Cow::Owned(out))
    }

    /// Sorts `params` by the configured mode and applies `dedupe`; returns how many
    /// parameters remain at the front. Allocation-free.
    fn order(&self, c: Cmp<'_>, params: &mut [Param]) -> usize {
        match (self.sort, self.dedupe) {
            (SortMode::Name, false) => {
                sort_params(params, |a, b| c.name_then_position(a, b).is_lt());
                params.len()
            }
            (SortMode::Name, true) => {
                sort_params(params, |a, b| c.name_then_position(a, b).is_lt());
                c.dedup_names(params)
            }
            (SortMode::Param, false) => {
                sort_params(params, |a, b| c.text_order(a, b).is_lt());
                params.len()
            }
            (SortMode::Param, true) => {
                // Smallest parameter of each name, then whole-parameter order.
                sort_params(params, |a, b| {
                    c.name(a)
                        .cmp(c.name(b))
                        .then_with(|| c.text_order(a, b))
                        .is_lt()
                });
                let n = c.dedup_names(params);
                sort_params(&mut params[..n], |a, b| c.text_order(a, b).is_lt());
                n
            }
            (SortMode::None, false) => params.len(),
            (SortMode::None, true) => {
                // First received of each name, then back to received order.
                sort_params(params, |a, b| c.name_then_position(a, b).is_lt());
                let n = c.dedup_names(params);
                sort_params(&mut params[..n], |a, b| Cmp::position(a, b).is_lt());
                n
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normalizer(config: &QueryConfig) -> Normalizer {
        Normalizer::new(config).unwrap()
    }

    #[test]
    fn name_is_bytes_before_first_equals() {
        assert_eq!(name_of(b"a=b=c"), b"a");
        assert_eq!(name_of(b"a"), b"a");
        assert_eq!(name_of(b"=v"), b"");
        assert_eq!(name_of(b"a="), b"a");
    }

    #[test]
    fn param_buf_spills_beyond_inline_capacity() {
        let mut b = ParamBuf::new();
        for start in 0..INLINE_PARAMS + 5 {
            b.push(Param {
                key: 0,
                seg: Segment {
                    start,
                    name_end: start,
                    end: start,
                },
            });
        }
        let s = b.as_mut_slice();
        assert_eq!(s.len(), INLINE_PARAMS + 5);
        assert!(s.iter().enumerate().all(|(i, p)| p.seg.start == i));
    }

    #[test]
    fn segments_include_empty_ones() {
        let spans: Vec<(usize, usize, usize)> = Segments::new("&a=1&&bc&")
            .map(|s| (s.start, s.name_end, s.end))
            .collect();
        assert_eq!(
            spans,
            [(0, 0, 0), (1, 2, 4), (5, 5, 5), (6, 8, 8), (9, 9, 9)]
        );
        assert_eq!(Segments::new("").count(), 1);
        for q in [
            "abcdefgh=1&ijklmnopqrstu=2&&v&wxyz=3=4&",
            "=&&==&&&abcdefghijklmnopqrstuvwxyz",
            "a&bcdefghijk",
            "abcdefghijk=",
            "abcdefghijklmnopq&",
        ] {
            let mut want = Vec::new();
            let mut start = 0;
            for seg in q.split('&') {
                let name = seg.split_once('=').map_or(seg, |(n, _)| n);
                want.push((start, start + name.len(), start + seg.len()));
                start += seg.len() + 1;
            }
            let got: Vec<(usize, usize, usize)> = Segments::new(q)
                .map(|s| (s.start, s.name_end, s.end))
                .collect();
            assert_eq!(got, want, "{q}");
        }
    }

    #[test]
    fn duplicate_name_check_small_and_large() {
        assert!(!has_duplicate_names("a=1&b=2&c", 3));
        assert!(has_duplicate_names("a=1&b=2&a", 3));
        assert!(has_duplicate_names("a&a!&a=1", 3));
        let many: Vec<String> = (0..40).map(|i| format!("p{i}=v")).collect();
        let q = many.join("&");
        assert!(!has_duplicate_names(&q, 40));
        let q2 = format!("{q}&p7=w");
        assert!(has_duplicate_names(&q2, 41));
    }

    #[test]
    fn order_modes() {
        let q = "b=2&a=1&b=1&a";
        let cases = [
            (SortMode::Name, false, "a=1&a&b=2&b=1"),
            (SortMode::Name, true, "a=1&b=2"),
            (SortMode::Param, false, "a&a=1&b=1&b=2"),
            (SortMode::Param, true, "a&b=1"),
            (SortMode::None, false, "b=2&a=1&b=1&a"),
            (SortMode::None, true, "b=2&a=1"),
        ];
        for (sort, dedupe, want) in cases {
            let n = normalizer(&QueryConfig {
                sort,
                dedupe,
                ..QueryConfig::default()
            });
            assert_eq!(n.normalize(q).unwrap(), want, "{sort:?} dedupe={dedupe}");
            assert!(
                matches!(n.normalize(want).unwrap(), Cow::Borrowed(_)),
                "{sort:?} dedupe={dedupe}: output not normal"
            );
        }
    }

    #[test]
    fn contiguous_results_are_borrowed_slices() {
        let n = normalizer(&QueryConfig::default());
        for (q, want) in [
            ("a=1&b=2&utm_source=x", "a=1&b=2"),
            ("&a=1&b=2&", "a=1&b=2"),
            ("fbclid=1&a=1", "a=1"),
            ("utm_a=1&&utm_b", ""),
        ] {
            let got = n.normalize(q).unwrap();
            assert!(matches!(got, Cow::Borrowed(_)), "{q}");
            assert_eq!(got, want);
        }
        assert!(matches!(n.normalize("b&a").unwrap(), Cow::Owned(_)));
    }
}
