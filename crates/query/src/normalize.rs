//! The compiled normalizer: bounds checks, one scan that either proves the query normal or collects what is kept, and the rebuild.

use std::borrow::Cow;
use std::cmp::Ordering;

use crate::glob::PatternSet;
use crate::scan::{Segment, Segments, key_at, key_of};
use crate::{MAX_PARAMS_CAP, QueryConfig, QueryError, SortMode};

/// Kept parameters recorded on the stack (16 bytes each) while scanning. Past it the scan
/// stops; the query is then checked for being normal without allocating, and only if it
/// is not is it scanned again, spilling to the heap. (24 rather than 32: zeroing the
/// buffer is paid on every call, and 24 measured faster on the benchmark queries.)
const INLINE_PARAMS: usize = 24;

// The rank sort marks ranks in a `u64`.
const _: () = assert!(INLINE_PARAMS < 64);

/// Up to this many kept parameters, sorting is a plain insertion sort.
const SMALL_SORT: usize = 24;

/// A byte offset into the query. Queries are at most
/// [`MAX_QUERY_BYTES_CAP`](crate::MAX_QUERY_BYTES_CAP) (`u16::MAX`) bytes, checked before
/// any scan, so every offset fits.
fn offset(x: usize) -> u16 {
    debug_assert!(u16::try_from(x).is_ok(), "offset {x} beyond the query cap");
    #[allow(
        clippy::cast_possible_truncation,
        reason = "queries are at most MAX_QUERY_BYTES_CAP = u16::MAX bytes, checked first"
    )]
    let o = x as u16;
    o
}

/// One non-empty parameter kept for the output: its byte offsets (`start..end` the
/// parameter, `start..name_end` its name) and a sort key (the [`key_of`] of its name, or
/// of the whole parameter under [`SortMode::Param`]). 16 bytes.
#[derive(Debug, Clone, Copy)]
struct Param {
    key: u64,
    start: u16,
    name_end: u16,
    end: u16,
}

impl Param {
    /// Placeholder for unused inline slots.
    const EMPTY: Self = Self {
        key: 0,
        start: 0,
        name_end: 0,
        end: 0,
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

    /// Appends `p`; beyond [`INLINE_PARAMS`] only when `spill` allows the heap, else
    /// stores nothing and returns `false`.
    #[inline]
    fn push(&mut self, p: Param, spill: bool) -> bool {
        if let Some(slot) = self.inline.get_mut(self.len) {
            *slot = p;
            self.len += 1;
        } else if spill {
            if self.spill.is_empty() {
                self.spill.reserve(INLINE_PARAMS * 2);
                self.spill.extend_from_slice(&self.inline);
            }
            self.spill.push(p);
        } else {
            return false;
        }
        true
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
        &self.0[usize::from(p.start)..usize::from(p.name_end)]
    }

    fn text(self, p: &Param) -> &'q [u8] {
        &self.0[usize::from(p.start)..usize::from(p.end)]
    }

    /// Received order: position in the query.
    fn position(a: &Param, b: &Param) -> Ordering {
        a.start.cmp(&b.start)
    }

    /// Name order; `key` must be the name's [`key_of`].
    #[inline]
    fn by_name(self, a: &Param, b: &Param) -> Ordering {
        a.key
            .cmp(&b.key)
            .then_with(|| self.name(a).cmp(self.name(b)))
    }

    /// Name order, ties broken by received order: the result of a stable sort by name,
    /// without the scratch buffer a stable sort may allocate.
    fn name_then_position(self, a: &Param, b: &Param) -> Ordering {
        self.by_name(a, b).then_with(|| Self::position(a, b))
    }

    /// Whole-parameter order (`key` must be the parameter's [`key_of`]); equal
    /// parameters are identical bytes, so no tie-break is needed for determinism.
    #[inline]
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

/// Sorts `v` by `cmp`, which must be a total order (equal only for equal elements, or
/// for elements whose order does not matter): insertion sort up to [`SMALL_SORT`]
/// elements, `sort_unstable_by` above. Allocation-free either way.
fn sort_params(v: &mut [Param], cmp: impl Fn(&Param, &Param) -> Ordering) {
    if v.len() > SMALL_SORT {
        v.sort_unstable_by(cmp);
        return;
    }
    for i in 1..v.len() {
        let x = v[i];
        let mut j = i;
        while j > 0 && cmp(&x, &v[j - 1]).is_lt() {
            v[j] = v[j - 1];
            j -= 1;
        }
        v[j] = x;
    }
}

/// `v` sorted by key into `scratch`, when the top 32 bits of the keys (the first 4
/// bytes of what is compared) are all different and `v` fits the inline buffer; `None`
/// otherwise, leaving `v` as it is.
///
/// Branch-free: each element's final place is its rank, the number of smaller keys,
/// counted with n² comparisons of 32-bit values (at most 576, which the compiler turns
/// into vector code); the ranks are a permutation exactly when the keys are distinct;
/// the elements are then scattered to their places. An insertion sort of parameters in
/// received order mispredicts a branch for nearly every element, which cost more than
/// the whole count. Distinct key prefixes make the order total, so the result is the
/// one any stable sort gives. `scratch` is initialized only here, so the paths that do
/// not sort do not pay for it.
fn sort_by_distinct_keys<'b>(
    v: &[Param],
    scratch: &'b mut Option<[Param; INLINE_PARAMS]>,
) -> Option<&'b mut [Param]> {
    let n = v.len();
    if n > INLINE_PARAMS {
        return None;
    }
    let mut heads = [0u32; INLINE_PARAMS];
    for (h, p) in heads.iter_mut().zip(v) {
        *h = key_head(p.key);
    }
    let heads = &heads[..n];
    let mut rank = [0u32; INLINE_PARAMS];
    let mut seen = 0u64;
    for (r, &h) in rank.iter_mut().zip(heads) {
        *r = heads.iter().map(|&k| u32::from(k < h)).sum();
        seen |= 1 << *r;
    }
    // `n <= INLINE_PARAMS < 64`, so the shift cannot overflow.
    if seen != (1 << n) - 1 {
        return None;
    }
    let sorted = scratch.insert([Param::EMPTY; INLINE_PARAMS]);
    for (p, &r) in v.iter().zip(&rank) {
        sorted[r as usize] = *p;
    }
    Some(&mut sorted[..n])
}

/// The top 32 bits of a key.
fn key_head(key: u64) -> u32 {
    #[allow(clippy::cast_possible_truncation, reason = "the shift leaves 32 bits")]
    let h = (key >> 32) as u32;
    h
}

/// Whether two non-empty parameters of `bytes` share a name; `count` is the number of
/// non-empty parameters, at most [`MAX_PARAMS_CAP`]. Allocation-free: sorts the name
/// spans in a 4 KiB stack array. Used only to prove a long query normal under `dedupe`
/// with `param` or `none` sort, where equal names need not be adjacent.
#[cold]
#[inline(never)]
fn has_duplicate_names(bytes: &[u8], count: usize) -> bool {
    debug_assert!(count <= MAX_PARAMS_CAP);
    let mut spans = [(0u16, 0u16); MAX_PARAMS_CAP];
    let mut n = 0;
    for s in Segments::new(bytes).filter(|s| s.end > s.start) {
        let Some(slot) = spans.get_mut(n) else {
            // Outside the validated bounds: let the rebuild decide.
            return true;
        };
        *slot = (offset(s.start), offset(s.name_end));
        n += 1;
    }
    let name = |(s, e): (u16, u16)| &bytes[usize::from(s)..usize::from(e)];
    let spans = &mut spans[..n];
    spans.sort_unstable_by(|a, b| name(*a).cmp(name(*b)));
    spans.windows(2).any(|w| name(w[0]) == name(w[1]))
}

/// What the collecting scan of a query found.
#[derive(Debug, Clone, Copy)]
struct Collected {
    /// `&`-separated segments, empty ones included.
    segments: usize,
    /// Non-empty parameters (counted before removal).
    count: usize,
    /// More than [`QueryConfig::max_params`] non-empty parameters: the scan stopped.
    too_many: bool,
    /// The inline buffer filled up and spilling was not allowed: the scan stopped.
    full: bool,
}

/// How the kept parameters, in received order, stand against the output order.
#[derive(Debug, Clone, Copy)]
struct Order {
    /// Non-decreasing in output order (always under `none`).
    sorted: bool,
    /// Strictly decreasing, so reversing them sorts them (strictly: there are no equal
    /// ones whose stable order could flip).
    descending: bool,
    /// Under name sort, two consecutive ones have the same name.
    adjacent_equal_names: bool,
}

/// A compiled [`QueryConfig`]: immutable, `Send + Sync`, shared by every request.
///
/// Normalization, on the raw query bytes and never decoding (as Varnish and
/// vmod-querystring do):
///
/// 1. empty parameters (`&&`, leading or trailing `&`) and parameters with an empty
///    name (`=x`, `=`) are dropped (as vmod-querystring does);
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
        // Parameters with an empty name are always dropped: the remove set matches it.
        let remove = PatternSet::new(&config.remove)?.matching_empty_name();
        Ok(Self {
            remove,
            keep_all: keep.is_empty(),
            keep,
            sort: config.sort,
            dedupe: config.dedupe,
            max_params: config.max_params,
            max_bytes: config.max_bytes,
        })
    }

    /// Whether a parameter named `name` (raw bytes before the first `=`) survives the
    /// `keep` and `remove` lists. Case-sensitive, no percent-decoding. The empty name
    /// (of `=x` or `=`) never does (vmod-querystring drops such parameters), even when a
    /// pattern such as `*` would match it.
    pub fn keeps(&self, name: &str) -> bool {
        self.keeps_name(name.as_bytes(), key_of(name.as_bytes()))
    }

    /// The non-empty segment `s` of `bytes` as a [`Param`] with its sort key, or `None`
    /// when its name is not kept.
    // With plain `#[inline]` LLVM kept it out of line in `collect`: the 5-parameter
    // bench lost ~40%.
    #[allow(clippy::inline_always, reason = "measured, see above")]
    #[inline(always)]
    fn kept_param(&self, bytes: &[u8], s: &Segment) -> Option<Param> {
        let name_key = key_at(bytes, s.start, s.name_end - s.start);
        if !self.keeps_name(&bytes[s.start..s.name_end], name_key) {
            return None;
        }
        Some(Param {
            key: if self.sort == SortMode::Param {
                key_at(bytes, s.start, s.end - s.start)
            } else {
                name_key
            },
            start: offset(s.start),
            name_end: offset(s.name_end),
            end: offset(s.end),
        })
    }

    /// As [`Normalizer::keeps`]; `key` is [`key_of`]`(name)`. An empty name (`=x`, `=`)
    /// is never kept, whatever the lists say (vmod-querystring drops such parameters):
    /// the compiled `remove` set matches it (see [`Normalizer::new`]), which costs no
    /// extra test on the hot path.
    #[inline]
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
    /// One scan matches each name once and records the kept parameters (on the stack,
    /// up to 24); whether the query is already normal is read off that record. A query
    /// that is not is sorted (unless the kept parameters are already in order, or in
    /// reverse order) and copied once into a `String` of the exact output length.
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
        let bytes = query.as_bytes();
        let mut buf = ParamBuf::new();
        let mut got = self.collect(bytes, &mut buf, false);
        if got.full {
            // More kept parameters than the inline buffer holds: decide "already
            // normal" without allocating, and spill to the heap only if not.
            if self.is_normal(bytes)? {
                return Ok(Cow::Borrowed(query));
            }
            buf = ParamBuf::new();
            got = self.collect(bytes, &mut buf, true);
        }
        if got.too_many {
            return Err(self.too_many(bytes));
        }
        let c = Cmp(bytes);
        let params = buf.as_mut_slice();
        let order = self.received_order(c, params);
        let clean = got.segments == params.len();
        if clean
            && order.sorted
            && !(self.dedupe && (self.sort != SortMode::Name || order.adjacent_equal_names))
        {
            return Ok(Cow::Borrowed(query));
        }
        // (Under `dedupe` with `param` or `none` sort, equal names need not be adjacent:
        // such a query goes through `order`, and `join` then returns it borrowed when
        // nothing changed.)
        let mut scratch = None;
        Ok(join(query, self.order(c, params, &mut scratch, order)))
    }

    /// Normalizes a request target `path?query` (or a bare `path`): the path as
    /// [`crate::normalize_path`] does (RFC 3986 §6.2.2: unreserved escapes decoded, dot
    /// segments removed), the query as [`Normalizer::normalize`]; a `?` followed by a query
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
        let (path, query) = match path_and_query.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path_and_query, None),
        };
        let npath = crate::normalize_path(path);
        let Some(query) = query else {
            return Ok(npath);
        };
        let normal = self.normalize(query)?;
        if normal.is_empty() {
            return Ok(npath);
        }
        if matches!(npath, Cow::Borrowed(_))
            && matches!(normal, Cow::Borrowed(q) if q.len() == query.len())
        {
            return Ok(Cow::Borrowed(path_and_query));
        }
        let mut out = String::with_capacity(npath.len() + 1 + normal.len());
        out.push_str(&npath);
        out.push('?');
        out.push_str(&normal);
        Ok(Cow::Owned(out))
    }

    /// The [`QueryError::TooManyParams`] for `bytes`, counting all of it.
    fn too_many(&self, bytes: &[u8]) -> QueryError {
        QueryError::TooManyParams {
            count: Segments::new(bytes).filter(|s| s.end > s.start).count(),
            limit: self.max_params,
        }
    }

    /// Scans `bytes` once: counts segments and non-empty parameters, matches each name
    /// and records the kept parameters in `buf`. With `spill` false, stops with `full`
    /// when the inline buffer is full; stops with `too_many` past
    /// [`QueryConfig::max_params`].
    #[inline]
    fn collect(&self, bytes: &[u8], buf: &mut ParamBuf, spill: bool) -> Collected {
        let mut got = Collected {
            segments: 0,
            count: 0,
            too_many: false,
            full: false,
        };
        for s in Segments::new(bytes) {
            got.segments += 1;
            if s.end == s.start {
                continue;
            }
            got.count += 1;
            if got.count > self.max_params {
                got.too_many = true;
                break;
            }
            let Some(p) = self.kept_param(bytes, &s) else {
                continue;
            };
            if !buf.push(p, spill) {
                got.full = true;
                break;
            }
        }
        got
    }

    /// How `params` (kept, in received order) stand against the output order.
    fn received_order(&self, c: Cmp<'_>, params: &[Param]) -> Order {
        if self.sort == SortMode::None {
            return Order {
                sorted: true,
                descending: false,
                adjacent_equal_names: false,
            };
        }
        // The keys decide unless two neighbours have equal keys: one branch-free pass.
        let (mut up, mut down, mut tie) = (true, true, false);
        for w in params.windows(2) {
            up &= w[0].key < w[1].key;
            down &= w[0].key > w[1].key;
            tie |= w[0].key == w[1].key;
        }
        if !tie {
            return Order {
                sorted: up,
                descending: down,
                adjacent_equal_names: false,
            };
        }
        let mut order = Order {
            sorted: true,
            descending: true,
            adjacent_equal_names: false,
        };
        for w in params.windows(2) {
            let ord = if self.sort == SortMode::Name {
                let ord = c.by_name(&w[0], &w[1]);
                order.adjacent_equal_names |= ord.is_eq();
                ord
            } else {
                c.text_order(&w[0], &w[1])
            };
            order.sorted &= ord.is_le();
            order.descending &= ord.is_gt();
        }
        order
    }

    /// Whether normalizing `bytes` would return it unchanged, in one allocation-free
    /// pass: no empty parameter, every name kept, already in order, no repeated name
    /// under `dedupe`. Used for queries with more kept parameters than the inline
    /// buffer holds.
    ///
    /// # Errors
    /// [`QueryError::TooManyParams`] (checked while scanning).
    #[cold]
    #[inline(never)]
    fn is_normal(&self, bytes: &[u8]) -> Result<bool, QueryError> {
        let c = Cmp(bytes);
        let mut count = 0usize;
        let mut prev: Option<Param> = None;
        for s in Segments::new(bytes) {
            if s.end == s.start {
                return Ok(false);
            }
            count += 1;
            if count > self.max_params {
                return Err(self.too_many(bytes));
            }
            let Some(p) = self.kept_param(bytes, &s) else {
                return Ok(false);
            };
            if let Some(q) = prev {
                let in_order = match self.sort {
                    SortMode::Name => match c.by_name(&q, &p) {
                        Ordering::Less => true,
                        Ordering::Equal => !self.dedupe,
                        Ordering::Greater => false,
                    },
                    SortMode::Param => c.text_order(&q, &p).is_le(),
                    SortMode::None => true,
                };
                if !in_order {
                    return Ok(false);
                }
            }
            prev = Some(p);
        }
        // Under name sort equal names are adjacent and were checked above.
        Ok(!(self.dedupe && self.sort != SortMode::Name && has_duplicate_names(bytes, count)))
    }

    /// Sorts `params` by the configured mode and applies `dedupe`; returns the result, in
    /// `params` or (after a rank sort) in `scratch`. Skips the sort when they are already
    /// in order and reverses them when they are strictly decreasing. Allocation-free.
    fn order<'b>(
        &self,
        c: Cmp<'_>,
        params: &'b mut [Param],
        scratch: &'b mut Option<[Param; INLINE_PARAMS]>,
        received: Order,
    ) -> &'b [Param] {
        match (self.sort, self.dedupe) {
            (SortMode::Param, true) => {
                // The smallest parameter of each name, then whole-parameter order.
                sort_params(params, |a, b| {
                    c.name(a).cmp(c.name(b)).then_with(|| c.text_order(a, b))
                });
                let n = c.dedup_names(params);
                sort_params(&mut params[..n], |a, b| c.text_order(a, b));
                &params[..n]
            }
            (SortMode::None, false) => params,
            (SortMode::None, true) => {
                // First received of each name, then back to received order.
                sort_params(params, |a, b| c.name_then_position(a, b));
                let n = c.dedup_names(params);
                sort_params(&mut params[..n], Cmp::position);
                &params[..n]
            }
            (SortMode::Name | SortMode::Param, dedupe) => {
                let sorted = if received.sorted {
                    params
                } else if received.descending {
                    params.reverse();
                    params
                } else if let Some(sorted) = sort_by_distinct_keys(params, scratch) {
                    sorted
                } else {
                    if self.sort == SortMode::Name {
                        sort_params(params, |a, b| c.name_then_position(a, b));
                    } else {
                        sort_params(params, |a, b| c.text_order(a, b));
                    }
                    params
                };
                if dedupe {
                    let n = c.dedup_names(sorted);
                    &sorted[..n]
                } else {
                    sorted
                }
            }
        }
    }
}

/// From this many output runs up, [`join`] copies fixed-size words and validates the
/// result once ([`join_words`]) instead of one `memcpy` per run ([`join_copy`]).
const MANY_RUNS: usize = 8;

/// Spare bytes at the end of [`join_words`]'s buffer, so that a whole 8- or 16-byte word
/// can be copied at the last position.
const COPY_SLACK: usize = 16;

/// Joins the ordered `params` of `query` with `&`: borrowed when they are a contiguous
/// run of `query` in received order, else one `String` of exactly the output length.
fn join<'a>(query: &'a str, params: &[Param]) -> Cow<'a, str> {
    let Some((first, rest)) = params.split_first() else {
        return Cow::Borrowed(&query[..0]);
    };
    // Output length, and the number of runs: maximal groups of parameters that follow
    // each other in the input after a single `&` (one run: a slice of the input).
    let (mut len, mut runs, mut prev_end) = (usize::from(first.end - first.start), 1, first.end);
    for p in rest {
        len += 1 + usize::from(p.end - p.start);
        runs += usize::from(usize::from(prev_end) + 1 != usize::from(p.start));
        prev_end = p.end;
    }
    if runs == 1 {
        return Cow::Borrowed(&query[usize::from(first.start)..usize::from(prev_end)]);
    }
    if runs >= MANY_RUNS
        && let Some(out) = join_words(query.as_bytes(), params, len)
    {
        return Cow::Owned(out);
    }
    Cow::Owned(join_copy(query, params, len))
}

/// Calls `f(amp, start, end)` for each run of `params` (see [`join`]) in order. A run
/// is copied from the `&` before it in the input, so runs after the first start one
/// byte early; `amp` is set for the one run that cannot (it starts the input) and needs
/// its `&` written.
#[inline]
fn for_each_run(params: &[Param], mut f: impl FnMut(bool, usize, usize)) {
    let Some((first, rest)) = params.split_first() else {
        return;
    };
    let (mut amp, mut run_start, mut run_end) =
        (false, usize::from(first.start), usize::from(first.end));
    for p in rest {
        let (start, end) = (usize::from(p.start), usize::from(p.end));
        if run_end + 1 != start {
            f(amp, run_start, run_end);
            (amp, run_start) = match start.checked_sub(1) {
                Some(before) => (false, before),
                None => (true, start),
            };
        }
        run_end = end;
    }
    f(amp, run_start, run_end);
}

/// [`join`]'s output with one `push_str` (a `memcpy`) per run.
fn join_copy(query: &str, params: &[Param], len: usize) -> String {
    let mut out = String::with_capacity(len);
    for_each_run(params, |amp, start, end| {
        if amp {
            out.push('&');
        }
        out.push_str(&query[start..end]);
    });
    debug_assert_eq!(out.len(), len);
    out
}

/// [`join`]'s output for many short runs: a run of up to 16 bytes is copied as a whole
/// 8- or 16-byte word when the input has one there (the excess is overwritten by the
/// next run or cut off), which compiles to register moves where a copy of a run-time
/// length is a `memcpy` call; the bytes are then checked once to become a `String`.
/// That check costs about as much as a few calls, so it pays only past [`MANY_RUNS`].
/// `None` if the bytes were not UTF-8, which cannot happen: runs are whole
/// `&`-separated pieces of a `str`.
fn join_words(bytes: &[u8], params: &[Param], len: usize) -> Option<String> {
    let mut out = vec![0u8; len + COPY_SLACK];
    let mut at = 0;
    for_each_run(params, |amp, start, end| {
        if amp {
            out[at] = b'&';
            at += 1;
        }
        let n = end - start;
        let src = bytes.get(start..).unwrap_or_default();
        let dst = out.get_mut(at..).unwrap_or_default();
        if n <= 8
            && let (Some(s), Some(d)) = (src.first_chunk::<8>(), dst.first_chunk_mut::<8>())
        {
            *d = *s;
        } else if n <= 16
            && let (Some(s), Some(d)) = (src.first_chunk::<16>(), dst.first_chunk_mut::<16>())
        {
            *d = *s;
        } else {
            dst[..n].copy_from_slice(&src[..n]);
        }
        at += n;
    });
    debug_assert_eq!(at, len);
    out.truncate(len);
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normalizer(config: &QueryConfig) -> Normalizer {
        Normalizer::new(config).unwrap()
    }

    #[test]
    fn param_buf_spills_beyond_inline_capacity_only_when_allowed() {
        let p = |start: usize| Param {
            key: 0,
            start: offset(start),
            name_end: offset(start),
            end: offset(start),
        };
        let mut b = ParamBuf::new();
        for start in 0..INLINE_PARAMS {
            assert!(b.push(p(start), false));
        }
        assert!(!b.push(p(INLINE_PARAMS), false), "inline part full");
        for start in INLINE_PARAMS..INLINE_PARAMS + 5 {
            assert!(b.push(p(start), true));
        }
        let s = b.as_mut_slice();
        assert_eq!(s.len(), INLINE_PARAMS + 5);
        assert!(s.iter().enumerate().all(|(i, p)| usize::from(p.start) == i));
    }

    #[test]
    fn duplicate_name_check() {
        assert!(!has_duplicate_names(b"a=1&b=2&c", 3));
        assert!(has_duplicate_names(b"a=1&b=2&a", 3));
        assert!(has_duplicate_names(b"a&a!&a=1", 3));
        let many: Vec<String> = (0..40).map(|i| format!("p{i}=v")).collect();
        let q = many.join("&");
        assert!(!has_duplicate_names(q.as_bytes(), 40));
        let q2 = format!("{q}&p7=w");
        assert!(has_duplicate_names(q2.as_bytes(), 41));
    }

    #[test]
    fn long_queries_normal_or_not_past_the_inline_buffer() {
        for sort in [SortMode::Name, SortMode::Param, SortMode::None] {
            for dedupe in [false, true] {
                let n = normalizer(&QueryConfig {
                    sort,
                    dedupe,
                    ..QueryConfig::default()
                });
                let names: Vec<String> = (0..50).map(|i| format!("p{i:02}=v")).collect();
                let normal = names.join("&");
                assert!(
                    matches!(n.normalize(&normal).unwrap(), Cow::Borrowed(q) if q == normal),
                    "{sort:?} {dedupe}"
                );
                // Broken late (after the inline buffer filled): rescanned with spill.
                for tail in ["&utm_source=x", "&p00=w", "&&", "&a=1"] {
                    let q = format!("{normal}{tail}");
                    let got = n.normalize(&q).unwrap();
                    let want = match (tail, sort, dedupe) {
                        ("&p00=w", SortMode::Name | SortMode::Param, false) => {
                            format!("p00=v&p00=w&{}", names[1..].join("&"))
                        }
                        ("&p00=w", SortMode::None, false) | ("&a=1", SortMode::None, _) => {
                            q.clone()
                        }
                        ("&a=1", _, _) => format!("a=1&{normal}"),
                        _ => normal.clone(),
                    };
                    assert_eq!(got, want, "{sort:?} {dedupe} {tail}");
                }
            }
        }
    }

    #[test]
    fn many_runs_are_joined_word_by_word() {
        let n = normalizer(&QueryConfig::default());
        // Ten runs (more than MANY_RUNS), the input's first parameter last in the output
        // (its `&` is written, not copied), multi-byte characters and a 17-byte run.
        let q = "j=é&i=ü&utm_source=x&h=1&g&f=ñ&e=2&d=0123456789abcde&c=4&b=5&a=ö";
        let want = "a=ö&b=5&c=4&d=0123456789abcde&e=2&f=ñ&g&h=1&i=ü&j=é";
        assert_eq!(n.normalize(q).unwrap(), want);
        assert!(matches!(n.normalize(q).unwrap(), Cow::Owned(_)));
        // Same parameters, shuffled: rank-sorted, then joined the same way.
        let q = "d=0123456789abcde&a=ö&h=1&fbclid=y&j=é&c=4&g&e=2&i=ü&b=5&f=ñ";
        assert_eq!(n.normalize(q).unwrap(), want);
        // Fewer runs: one copy per run.
        assert_eq!(n.normalize("c=ü&b&a=é").unwrap(), "a=é&b&c=ü");
    }

    #[test]
    fn reversed_input_is_sorted_by_reversal() {
        let n = normalizer(&QueryConfig::default());
        assert_eq!(n.normalize("c=1&b=2&a=3").unwrap(), "a=3&b=2&c=1");
        // Not strictly decreasing: equal names keep their order.
        assert_eq!(n.normalize("c=1&b=2&b=1&a").unwrap(), "a&b=2&b=1&c=1");
        let p = normalizer(&QueryConfig {
            sort: SortMode::Param,
            ..QueryConfig::default()
        });
        assert_eq!(p.normalize("b=2&b=1&a").unwrap(), "a&b=1&b=2");
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

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn rank_sort_sorts_distinct_heads_and_refuses_ties(
            keys in prop::collection::vec(
                prop_oneof![
                    any::<u64>(),
                    // Few distinct heads, so ties are common.
                    (0u64..4, any::<u32>()).prop_map(|(h, l)| h << 32 | u64::from(l)),
                ],
                0..=INLINE_PARAMS + 2,
            ),
        ) {
            let v: Vec<Param> = keys
                .iter()
                .enumerate()
                .map(|(i, &key)| Param { key, start: offset(i), name_end: offset(i), end: offset(i) })
                .collect();
            let mut heads: Vec<u32> = keys.iter().map(|&k| key_head(k)).collect();
            heads.sort_unstable();
            let distinct = heads.windows(2).all(|w| w[0] != w[1]);
            let mut scratch = None;
            let sorted = sort_by_distinct_keys(&v, &mut scratch).map(|s| s.to_vec());
            prop_assert_eq!(sorted.is_some(), distinct && keys.len() <= INLINE_PARAMS);
            if let Some(sorted) = sorted {
                let mut want = v.clone();
                want.sort_by_key(|p| p.key);
                let got: Vec<u16> = sorted.iter().map(|p| p.start).collect();
                let want: Vec<u16> = want.iter().map(|p| p.start).collect();
                prop_assert_eq!(got, want);
            } else {
                prop_assert!(scratch.is_none());
            }
        }
    }
}
