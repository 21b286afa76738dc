//! Strided gram filter: finds which of a set of byte patterns occur in a haystack.
//!
//! Coverage argument. With gram length `g` and stride `s`, every pattern is at least
//! `g + s − 1` bytes long, so an occurrence of it covers at least `s` consecutive gram
//! start positions; for any fixed *window* of `s` consecutive gram offsets inside the
//! pattern, exactly one of them lands on a multiple of `s` of the haystack. The filter
//! therefore looks up only the grams starting at `0, s, 2s, …`: `n / s` lookups in a
//! 64 Ki-entry byte table indexed by the 2-byte gram read as a little-endian `u16`.
//! A non-zero entry is the index of the first of a run of *checks*: `(pattern, offset)`
//! pairs whose window has that gram at that offset. A check compares the pattern with
//! the haystack at `position − offset` (one masked 8-byte word compare, then the tail of
//! patterns longer than 8 bytes).
//!
//! Stride 2 (the accurate profile: shortest pattern `HTC`, 3 bytes) has a branch-light
//! loop: each 8-byte word gives four lookups whose entries are ORed, one bit per word
//! records "something here", and only the flagged words are revisited. A 108-byte UA
//! costs 54 lookups and about three checks. Each pattern's window is placed where its
//! grams are rare in ordinary UAs ([`GRAM_FREQ`]), so `Mozilla`, `KHTML`, `; ` and friends
//! rarely trigger a check; correctness does not depend on that choice, only speed does.
//!
//! A rule set whose grams crowd onto one key (more than [`MAX_RUN`] checks, e.g. 100
//! patterns `ab0`…`ab99`) would make every lookup of that gram expensive;
//! [`GramFilter::build`] refuses it and the caller falls back to an Aho-Corasick DFA.

/// Largest stride used: beyond it each pattern puts more grams in the table than the
/// shorter walk saves.
pub(crate) const MAX_STRIDE: usize = 4;

/// Most checks one gram may trigger; a denser rule set is refused by
/// [`GramFilter::build`] (it bounds the work per lookup, hence the worst case per UA).
pub(crate) const MAX_RUN: usize = 16;

/// Longest pattern the filter accepts (offsets are stored as `u8`).
const MAX_FILTER_PATTERN_BYTES: usize = 255;

/// Number of entries of the gram table: every 2-byte gram.
const TABLE_LEN: usize = 1 << 16;

/// Most checks in all (table entries are `u8` indexes, `0` meaning "none"). The stride
/// is lowered until `patterns × stride` fits.
const MAX_CHECKS: usize = 255;

/// Bytes scanned per pass of the stride-2 loop: 64 words, one flag bit each.
const CHUNK_BYTES: usize = 512;

/// How common each 2-byte gram is in User-Agents: `(gram, weight)`, weight = round(255 ×
/// the larger of two shares of UAs containing the gram: in browser traffic (the 10,000
/// UAs of the `user-agents` 2.1.198 npm package, weighted by their share of traffic) and
/// in the 482 UAs of the woothee 1.11.1 testsets and `tests/fixtures/device/ua-labelled.tsv`
/// (crawlers, feature phones, apps, appliances)); the 390 grams of weight ≥ 10, printed by
/// `examples/gram_freq.rs`. The uap-core file the speed benchmark cycles through is not a
/// source. A pattern's window is placed on the grams of least total weight: a check on a
/// common gram runs on most requests and nearly always misses. Correctness does not depend
/// on the table, only speed does.
///
/// It replaced a hand-written sample of 8 UA lines, whose counts did not tell a gram
/// every Windows UA has (`s ` of `Windows NT`) from a rare one. Measured with
/// `examples/ratio.rs`-style minimum-of-passes timing (docs/device.md): the same speed on
/// the browser-traffic UAs, 2% faster on the uap-core corpus. Either population alone
/// made the other slower (traffic only: uap-core +6%; the others only: traffic +14%).
const GRAM_FREQ: &[([u8; 2], u8)] = &[
    (*b" (", 255),
    (*b" G", 255),
    (*b") ", 255),
    (*b".0", 255),
    (*b"/5", 255),
    (*b"0 ", 255),
    (*b"5.", 255),
    (*b"; ", 255),
    (*b"Ge", 255),
    (*b"Mo", 255),
    (*b"a/", 255),
    (*b"ck", 255),
    (*b"ec", 255),
    (*b"il", 255),
    (*b"ko", 255),
    (*b"la", 255),
    (*b"ll", 255),
    (*b"oz", 255),
    (*b"zi", 255),
    (*b" A", 253),
    (*b" S", 253),
    (*b" l", 253),
    (*b"(K", 253),
    (*b", ", 253),
    (*b"Ap", 253),
    (*b"HT", 253),
    (*b"KH", 253),
    (*b"Ki", 253),
    (*b"L,", 253),
    (*b"ML", 253),
    (*b"Sa", 253),
    (*b"TM", 253),
    (*b"We", 253),
    (*b"af", 253),
    (*b"ar", 253),
    (*b"bK", 253),
    (*b"e ", 253),
    (*b"eW", 253),
    (*b"eb", 253),
    (*b"fa", 253),
    (*b"i/", 253),
    (*b"ik", 253),
    (*b"it", 253),
    (*b"ke", 253),
    (*b"le", 253),
    (*b"li", 253),
    (*b"o)", 253),
    (*b"pl", 253),
    (*b"pp", 253),
    (*b"ri", 253),
    (*b"t/", 253),
    (*b" C", 248),
    (*b"e/", 248),
    (*b"/1", 236),
    (*b"15", 229),
    (*b" 1", 226),
    (*b" M", 222),
    (*b"OS", 182),
    (*b"S ", 182),
    (*b" O", 181),
    (*b" X", 181),
    (*b"Ma", 181),
    (*b"ac", 181),
    (*b"c ", 181),
    (*b"14", 179),
    (*b"0.", 176),
    (*b"7.", 168),
    (*b"6 ", 158),
    (*b"37", 156),
    (*b"in", 151),
    (*b"Ch", 150),
    (*b"hr", 150),
    (*b"me", 150),
    (*b"om", 150),
    (*b"ro", 150),
    (*b".3", 149),
    (*b"36", 148),
    (*b"53", 148),
    (*b"_7", 144),
    (*b"bi", 143),
    (*b"ob", 143),
    (*b"10", 126),
    (*b".1", 122),
    (*b"1.", 116),
    (*b"4.", 113),
    (*b"5 ", 111),
    (*b"60", 107),
    (*b"on", 107),
    (*b"/6", 106),
    (*b"05", 106),
    (*b"CP", 106),
    (*b"48", 105),
    (*b" i", 102),
    (*b"(i", 102),
    (*b"8 ", 102),
    (*b"PU", 102),
    (*b"Ph", 102),
    (*b"U ", 102),
    (*b"X)", 102),
    (*b"e;", 102),
    (*b"ho", 102),
    (*b"iP", 102),
    (*b"ne", 102),
    (*b"er", 101),
    (*b"04", 99),
    (*b"5E", 98),
    (*b"E1", 98),
    (*b"nd", 93),
    (*b"el", 88),
    (*b"l ", 88),
    (*b"2.", 87),
    (*b"18", 85),
    (*b"_1", 83),
    (*b"8_", 82),
    (*b"0_", 79),
    (*b"5_", 79),
    (*b" I", 78),
    (*b"(M", 78),
    (*b"26", 78),
    (*b"7)", 78),
    (*b"In", 78),
    (*b"X ", 78),
    (*b"ci", 78),
    (*b"h;", 78),
    (*b"nt", 78),
    (*b"os", 78),
    (*b"sh", 78),
    (*b"te", 78),
    (*b"to", 78),
    (*b"6.", 73),
    (*b" V", 72),
    (*b"Ve", 72),
    (*b"io", 72),
    (*b"n/", 72),
    (*b"rs", 72),
    (*b"si", 72),
    (*b"id", 71),
    (*b"/2", 69),
    (*b"7 ", 66),
    (*b"45", 63),
    (*b".2", 62),
    (*b"3.", 60),
    (*b"Li", 58),
    (*b"co", 58),
    (*b"ws", 58),
    (*b"nu", 57),
    (*b"ux", 57),
    (*b"0;", 56),
    (*b"ow", 56),
    (*b"tt", 56),
    (*b".6", 55),
    (*b"00", 55),
    (*b"at", 55),
    (*b"An", 54),
    (*b"dr", 54),
    (*b"oi", 54),
    (*b" U", 53),
    (*b"d ", 53),
    (*b"1 ", 52),
    (*b"en", 51),
    (*b"ti", 51),
    (*b"tp", 51),
    (*b"ht", 50),
    (*b"x;", 50),
    (*b"//", 48),
    (*b":/", 48),
    (*b"U;", 48),
    (*b"(L", 47),
    (*b"p:", 47),
    (*b" B", 46),
    (*b"11", 45),
    (*b"20", 45),
    (*b" N", 44),
    (*b"1;", 42),
    (*b"se", 42),
    (*b"/4", 41),
    (*b"12", 41),
    (*b"bl", 41),
    (*b" P", 39),
    (*b"pa", 39),
    (*b".c", 38),
    (*b".4", 37),
    (*b"do", 37),
    (*b"ib", 37),
    (*b"ra", 37),
    (*b"4;", 36),
    (*b"ld", 36),
    (*b"s ", 36),
    (*b"(c", 35),
    (*b"0)", 35),
    (*b"9.", 35),
    (*b"64", 34),
    (*b"Bu", 34),
    (*b"mp", 34),
    (*b" x", 33),
    (*b".5", 33),
    (*b"/3", 33),
    (*b"Wi", 33),
    (*b"d/", 33),
    (*b"r/", 33),
    (*b"ui", 33),
    (*b"re", 32),
    (*b" W", 31),
    (*b"01", 31),
    (*b"et", 31),
    (*b"o/", 31),
    (*b"(W", 30),
    (*b"4)", 30),
    (*b"8.", 30),
    (*b"NT", 30),
    (*b"T ", 30),
    (*b"m/", 30),
    (*b"n6", 30),
    (*b"x6", 30),
    (*b"ch", 29),
    (*b"oo", 29),
    (*b" T", 28),
    (*b"+h", 28),
    (*b"de", 28),
    (*b"2 ", 26),
    (*b"bo", 26),
    (*b"Cr", 25),
    (*b"ot", 25),
    (*b"S/", 24),
    (*b"iO", 24),
    (*b"13", 23),
    (*b"54", 23),
    (*b"Br", 23),
    (*b"ww", 23),
    (*b" 2", 22),
    (*b".h", 22),
    (*b"2;", 22),
    (*b"jp", 22),
    (*b"k/", 22),
    (*b" r", 21),
    (*b"Co", 21),
    (*b"Pr", 21),
    (*b"ja", 21),
    (*b"tm", 21),
    (*b"us", 21),
    (*b"w.", 21),
    (*b" 6", 20),
    (*b" F", 20),
    (*b"/w", 20),
    (*b"4 ", 20),
    (*b"_6", 20),
    (*b"al", 20),
    (*b"ir", 20),
    (*b"rv", 20),
    (*b"v:", 20),
    (*b" j", 19),
    (*b"3 ", 19),
    (*b"Ne", 19),
    (*b"a ", 19),
    (*b"ea", 19),
    (*b"0/", 18),
    (*b"50", 18),
    (*b"6_", 18),
    (*b" L", 17),
    (*b" e", 17),
    (*b".9", 17),
    (*b"/7", 17),
    (*b"55", 17),
    (*b"es", 17),
    (*b"n-", 17),
    (*b"og", 17),
    (*b"p/", 17),
    (*b"st", 17),
    (*b" +", 16),
    (*b" 4", 16),
    (*b"-1", 16),
    (*b".8", 16),
    (*b"/9", 16),
    (*b"30", 16),
    (*b"33", 16),
    (*b"34", 16),
    (*b"80", 16),
    (*b"IE", 16),
    (*b"an", 16),
    (*b"fo", 16),
    (*b"he", 16),
    (*b"ia", 16),
    (*b"or", 16),
    (*b"pe", 16),
    (*b"ur", 16),
    (*b"16", 15),
    (*b"17", 15),
    (*b"3;", 15),
    (*b"E ", 15),
    (*b"MS", 15),
    (*b"SH", 15),
    (*b"ed", 15),
    (*b"ml", 15),
    (*b"vi", 15),
    (*b" K", 14),
    (*b".j", 14),
    (*b"/C", 14),
    (*b"/M", 14),
    (*b"06", 14),
    (*b"CL", 14),
    (*b"K)", 14),
    (*b"Tr", 14),
    (*b"ig", 14),
    (*b"ox", 14),
    (*b".7", 13),
    (*b"/s", 13),
    (*b"21", 13),
    (*b":1", 13),
    (*b"Da", 13),
    (*b"Go", 13),
    (*b"LD", 13),
    (*b"SI", 13),
    (*b"ef", 13),
    (*b"of", 13),
    (*b"rc", 13),
    (*b"t.", 13),
    (*b"x/", 13),
    (*b" 5", 12),
    (*b" 7", 12),
    (*b"(+", 12),
    (*b"/)", 12),
    (*b"/b", 12),
    (*b"19", 12),
    (*b"24", 12),
    (*b"58", 12),
    (*b"9 ", 12),
    (*b"C-", 12),
    (*b"DP", 12),
    (*b"Fi", 12),
    (*b"Fr", 12),
    (*b"ID", 12),
    (*b"MI", 12),
    (*b"Op", 12),
    (*b"P-", 12),
    (*b"_2", 12),
    (*b"ad", 12),
    (*b"cr", 12),
    (*b"di", 12),
    (*b"e.", 12),
    (*b"fi", 12),
    (*b"gl", 12),
    (*b"go", 12),
    (*b"l)", 12),
    (*b"nf", 12),
    (*b" 8", 11),
    (*b"(h", 11),
    (*b"-2", 11),
    (*b"/h", 11),
    (*b"08", 11),
    (*b"1)", 11),
    (*b"1/", 11),
    (*b"23", 11),
    (*b"49", 11),
    (*b"52", 11),
    (*b"DC", 11),
    (*b"a-", 11),
    (*b"aw", 11),
    (*b"gu", 11),
    (*b"lv", 11),
    (*b"o.", 11),
    (*b"r.", 11),
    (*b"tF", 11),
    (*b" 3", 10),
    (*b" h", 10),
    (*b".g", 10),
    (*b"/0", 10),
    (*b"/8", 10),
    (*b"/S", 10),
    (*b"09", 10),
    (*b"22", 10),
    (*b"27", 10),
    (*b"31", 10),
    (*b"32", 10),
    (*b"35", 10),
    (*b"39", 10),
    (*b"41", 10),
    (*b"43", 10),
    (*b"51", 10),
    (*b"90", 10),
    (*b"Pa", 10),
    (*b"TB", 10),
    (*b"ex", 10),
    (*b"ie", 10),
    (*b"lp", 10),
    (*b"ng", 10),
    (*b"ok", 10),
    (*b"p.", 10),
    (*b"r ", 10),
    (*b"s;", 10),
    (*b"wl", 10),
];

/// Gram length: 1 byte when some pattern is a single byte, else 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gram {
    /// Key = one byte.
    One,
    /// Key = two bytes as a little-endian `u16`.
    Two,
}

impl Gram {
    fn len(self) -> usize {
        match self {
            Gram::One => 1,
            Gram::Two => 2,
        }
    }

    /// The key of the gram at the start of `bytes` (`0` if `bytes` is too short; callers
    /// only pass slices that hold a whole gram).
    fn key(self, bytes: &[u8]) -> usize {
        match (self, bytes) {
            (Gram::One, [a, ..]) => usize::from(*a),
            (Gram::Two, [a, b, ..]) => usize::from(u16::from_le_bytes([*a, *b])),
            _ => 0,
        }
    }
}

/// What a scan found: the patterns (bit = the caller's pattern id) and the union of the
/// payloads the caller attached to them (the classifier attaches "rules that need this
/// pattern").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Found {
    /// Bit `id` is set for every pattern found.
    pub(crate) patterns: u128,
    /// OR of the payloads of the patterns found.
    pub(crate) payload: u128,
}

/// One check: does pattern `pattern` start `offset` bytes before the looked-up gram?
#[derive(Debug, Clone, Copy)]
struct Check {
    /// The pattern's first `min(8, len)` bytes, little-endian.
    head: u64,
    /// Selects the bytes of `head` that belong to the pattern.
    mask: u64,
    /// Offset of the gram inside the pattern.
    offset: u8,
    /// Whether the pattern is longer than 8 bytes (its tail needs a second compare).
    long: bool,
    /// Whether this is the last check of its run.
    last: bool,
    /// Index of the pattern in [`GramFilter::patterns`].
    pattern: u8,
}

/// The compiled filter. Immutable; the classifier shares it through an `Arc`.
#[derive(Clone)]
pub(crate) struct GramFilter {
    /// Gram length.
    gram: Gram,
    /// Distance between looked-up gram positions, `1..=MAX_STRIDE`.
    stride: usize,
    /// Gram key → index in `checks` of the first check of its run (`0` = nothing).
    table: Box<[u8; TABLE_LEN]>,
    /// The checks, in runs; entry 0 is unused.
    checks: Box<[Check]>,
    /// What check `i` adds to a [`Found`]: `yields[2 i]` when it fails (nothing),
    /// `yields[2 i + 1]` when it hits (its pattern's bit and payload). Indexing by the
    /// outcome keeps the data-dependent hit out of the branch predictor: the compiler
    /// turns a select between a loaded value and zero into a branch.
    yields: Box<[Found]>,
    /// The patterns' bytes (for tails and for checks near the haystack's ends).
    patterns: Box<[Box<[u8]>]>,
}

impl std::fmt::Debug for GramFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GramFilter")
            .field("gram", &self.gram)
            .field("stride", &self.stride)
            .field("checks", &self.checks.len().saturating_sub(1))
            .field("patterns", &self.patterns.len())
            .finish_non_exhaustive()
    }
}

impl GramFilter {
    /// Builds the filter for `patterns`: `(id, bytes, payload)` with ids `< 128` and
    /// distinct, non-empty byte strings. `None` when the set is empty, a pattern is longer
    /// than 255 bytes, there are more than 255 patterns, or more than [`MAX_RUN`] checks
    /// would share one gram.
    pub(crate) fn build(patterns: &[(usize, &[u8], u128)]) -> Option<Self> {
        let shortest = patterns.iter().map(|p| p.1.len()).min()?;
        if shortest == 0
            || patterns.len() > MAX_CHECKS
            || patterns
                .iter()
                .any(|p| p.1.len() > MAX_FILTER_PATTERN_BYTES)
        {
            return None;
        }
        let gram = if shortest == 1 { Gram::One } else { Gram::Two };
        // g + s − 1 ≤ shortest, and patterns × s ≤ MAX_CHECKS.
        let stride = (shortest + 1 - gram.len())
            .min(MAX_STRIDE)
            .min(MAX_CHECKS / patterns.len())
            .max(1);

        // The table doubles as the cost scratchpad: the gram's weight in GRAM_FREQ (of
        // its first byte, for one-byte grams), plus one per check already placed on the
        // gram (saturating).
        let mut table: Box<[u8; TABLE_LEN]> =
            vec![0u8; TABLE_LEN].into_boxed_slice().try_into().ok()?;
        for (g, w) in GRAM_FREQ {
            let c = &mut table[gram.key(g)];
            *c = c.saturating_add(*w);
        }
        // (key, pattern index, offset) for every check, placed greedily pattern by pattern
        // on the admissible window of least cost (a window is admissible while each of its
        // grams has room for `stride` more checks in its run).
        let mut placed: Vec<(usize, u8, u8)> = Vec::with_capacity(patterns.len() * stride);
        let mut runs = vec![0u8; TABLE_LEN];
        for (local, (_, bytes, _)) in patterns.iter().enumerate() {
            let key = |off: usize| gram.key(bytes.get(off..).unwrap_or(&[]));
            let cost = |k: usize| -> Option<usize> {
                (k..k + stride)
                    .map(|off| {
                        let key = key(off);
                        (usize::from(runs[key]) + stride <= MAX_RUN)
                            .then(|| usize::from(table[key]))
                    })
                    .sum()
            };
            let last_start = bytes.len() + 1 - gram.len() - stride;
            let best = (0..=last_start)
                .filter_map(|k| cost(k).map(|c| (c, k)))
                .min()?
                .1;
            for off in best..best + stride {
                let key = key(off);
                table[key] = table[key].saturating_add(1);
                runs[key] += 1;
                placed.push((key, u8::try_from(local).ok()?, u8::try_from(off).ok()?));
            }
        }
        // Back to all zeros: only the weighted grams and the placed keys were touched
        // (cheaper than clearing all 64 KiB, which matters where an instance is built
        // per request).
        for (g, _) in GRAM_FREQ {
            table[gram.key(g)] = 0;
        }
        for &(key, _, _) in &placed {
            table[key] = 0;
        }
        debug_assert!(table.iter().all(|&c| c == 0));

        // Runs of checks, one per distinct key.
        placed.sort_by_key(|&(key, _, _)| key);
        let mut checks = Vec::with_capacity(placed.len() + 1);
        let mut yields = vec![Found::default(); 2];
        checks.push(Check {
            head: 1,
            mask: 0,
            offset: 0,
            long: false,
            last: true,
            pattern: 0,
        });
        for run in placed.chunk_by(|a, b| a.0 == b.0) {
            if run.len() > MAX_RUN {
                return None;
            }
            table[run[0].0] = u8::try_from(checks.len()).ok()?;
            for (i, &(_, local, offset)) in run.iter().enumerate() {
                let (id, bytes, payload) = patterns[usize::from(local)];
                let mut head = [0u8; 8];
                let n = bytes.len().min(8);
                head[..n].copy_from_slice(&bytes[..n]);
                checks.push(Check {
                    head: u64::from_le_bytes(head),
                    mask: u64::MAX
                        .checked_shr(u32::try_from(64 - 8 * n).ok()?)
                        .unwrap_or(0),
                    offset,
                    long: bytes.len() > 8,
                    last: i + 1 == run.len(),
                    pattern: local,
                });
                yields.push(Found::default());
                yields.push(Found {
                    patterns: crate::engine::bit(id),
                    payload,
                });
            }
        }
        Some(GramFilter {
            gram,
            stride,
            table,
            checks: checks.into_boxed_slice(),
            yields: yields.into_boxed_slice(),
            patterns: patterns.iter().map(|p| p.1.into()).collect(),
        })
    }

    /// The patterns occurring in `hay`, and the union of their payloads.
    pub(crate) fn scan(&self, hay: &[u8]) -> Found {
        match (self.gram, self.stride) {
            (Gram::Two, 2) => self.scan_words(hay),
            (Gram::Two, 3) => self.scan_strided::<3>(hay),
            (Gram::Two, 4) => self.scan_strided::<4>(hay),
            (gram, _) => self.scan_every(hay, gram),
        }
    }

    /// Stride 1: a lookup at every position.
    fn scan_every(&self, hay: &[u8], gram: Gram) -> Found {
        let mut found = Found::default();
        for (q, w) in hay.windows(gram.len()).enumerate() {
            let first = self.table[gram.key(w)];
            if first != 0 {
                self.check_run(hay, q, first, &mut found);
            }
        }
        found
    }

    /// Stride `S ≥ 2`, gram length 2: a lookup at every multiple of `S`.
    fn scan_strided<const S: usize>(&self, hay: &[u8]) -> Found {
        let mut found = Found::default();
        let chunks = hay.chunks_exact(S);
        let rest = chunks.remainder();
        for (i, c) in chunks.enumerate() {
            if let [a, b, ..] = *c {
                let first = self.table[usize::from(u16::from_le_bytes([a, b]))];
                if first != 0 {
                    self.check_run(hay, i * S, first, &mut found);
                }
            }
        }
        // The remainder starts at a multiple of S; it holds a gram if it has 2 bytes.
        if let [a, b, ..] = *rest {
            let first = self.table[usize::from(u16::from_le_bytes([a, b]))];
            if first != 0 {
                self.check_run(hay, hay.len() - rest.len(), first, &mut found);
            }
        }
        found
    }

    /// Stride 2, gram length 2, eight bytes at a time: the four entries of a word are
    /// ORed and one bit per word remembers a non-zero result, so the loop over the
    /// haystack has no data-dependent branch; flagged words are then revisited.
    fn scan_words(&self, hay: &[u8]) -> Found {
        let t = &*self.table;
        // The table entries of the four grams starting at even offsets of `w` (8 bytes;
        // shorter reads as empty). Two-byte loads: cheaper than shifting a word apart.
        let entries = |w: &[u8]| {
            let g = |o: usize| match w.get(o..o + 2) {
                Some(&[a, b]) => usize::from(u16::from_le_bytes([a, b])),
                _ => 0,
            };
            [t[g(0)], t[g(2)], t[g(4)], t[g(6)]]
        };
        let mut found = Found::default();
        for (c, chunk) in hay.chunks(CHUNK_BYTES).enumerate() {
            let base = c * CHUNK_BYTES;
            let words = chunk.chunks_exact(8);
            let rest = words.remainder();
            let mut flags = 0u64;
            for (j, w) in words.enumerate() {
                let any = entries(w).into_iter().fold(0, |acc, e| acc | e);
                flags |= u64::from(any != 0) << (j % 64);
            }
            while flags != 0 {
                let j = flags.trailing_zeros() as usize;
                flags &= flags - 1;
                let at = 8 * j;
                let firsts = entries(chunk.get(at..at + 8).unwrap_or(&[]));
                let mut pending = u32::from_le_bytes(firsts);
                while pending != 0 {
                    let k = pending.trailing_zeros() as usize / 8;
                    pending &= !(0xFF << (8 * k));
                    let first = firsts.get(k).copied().unwrap_or(0);
                    self.check_run(hay, base + at + 2 * k, first, &mut found);
                }
            }
            let at = chunk.len() - rest.len();
            for (k, pair) in rest.chunks_exact(2).enumerate() {
                let first = self.table[usize::from(u16::from_le_bytes([pair[0], pair[1]]))];
                if first != 0 {
                    self.check_run(hay, base + at + 2 * k, first, &mut found);
                }
            }
        }
        found
    }

    /// Runs the checks starting at index `first` for the gram at `q`, adding what they
    /// confirm to `found`. Selection is branch-free; only a confirmed long pattern and a
    /// compare that would cross the haystack's ends take a branch.
    #[allow(
        clippy::inline_always,
        reason = "measured ~1% faster on the accurate profile; small, called from the scan loops only"
    )]
    #[inline(always)]
    fn check_run(&self, hay: &[u8], q: usize, first: u8, found: &mut Found) {
        let mut i = usize::from(first);
        while let Some(c) = self.checks.get(i) {
            let start = q.wrapping_sub(usize::from(c.offset));
            let hit = match hay.get(start..start.wrapping_add(8)) {
                Some(w) => {
                    let eq = word(w) & c.mask == c.head;
                    if c.long {
                        eq && self.is_at(hay, start, c.pattern)
                    } else {
                        eq
                    }
                }
                None => self.is_at(hay, start, c.pattern),
            };
            // A hit is data-dependent: keep it out of the branch predictor.
            if let Some(y) = self.yields.get(2 * i + usize::from(hit)) {
                found.patterns |= y.patterns;
                found.payload |= y.payload;
            }
            if c.last {
                break;
            }
            i += 1;
        }
    }

    /// Whether pattern `pattern` occurs in `hay` at `start` (the exact, slow compare).
    #[cold]
    fn is_at(&self, hay: &[u8], start: usize, pattern: u8) -> bool {
        match (hay.get(start..), self.patterns.get(usize::from(pattern))) {
            (Some(rest), Some(p)) => rest.starts_with(p),
            _ => false,
        }
    }
}

/// The first 8 bytes of `bytes` as a little-endian word (`0` if there are fewer).
#[inline]
fn word(bytes: &[u8]) -> u64 {
    bytes
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The naive evaluator: `windows().any()` per pattern; payload of pattern `i` is
    /// `1 << (127 - i)` so it is checked independently of the pattern bits.
    fn naive(patterns: &[(usize, &[u8], u128)], hay: &[u8]) -> Found {
        patterns
            .iter()
            .filter(|(_, p, _)| hay.windows(p.len()).any(|w| w == *p))
            .fold(Found::default(), |acc, (id, _, payload)| Found {
                patterns: acc.patterns | crate::engine::bit(*id),
                payload: acc.payload | payload,
            })
    }

    fn owned(pats: &[Vec<u8>]) -> Vec<(usize, &[u8], u128)> {
        pats.iter()
            .enumerate()
            .map(|(i, p)| (i, &p[..], crate::engine::bit(127 - i)))
            .collect()
    }

    #[test]
    fn strides_follow_the_shortest_pattern() {
        let f = |ps: &[&[u8]]| {
            let v: Vec<(usize, &[u8], u128)> =
                ps.iter().enumerate().map(|(i, p)| (i, *p, 0)).collect();
            let g = GramFilter::build(&v).unwrap();
            (g.gram, g.stride)
        };
        assert_eq!(f(&[b"a", b"Mobile"]), (Gram::One, 1));
        assert_eq!(f(&[b"ab", b"Mobile"]), (Gram::Two, 1));
        assert_eq!(f(&[b"HTC", b"Mobile"]), (Gram::Two, 2));
        assert_eq!(f(&[b"iPad", b"Mobile"]), (Gram::Two, 3));
        assert_eq!(f(&[b"Mobile"]), (Gram::Two, MAX_STRIDE));
        // patterns × stride must fit the u8 check indexes.
        let many: Vec<Vec<u8>> = (0..100)
            .map(|i| format!("Mobile{i:03}").into_bytes())
            .collect();
        let many: Vec<&[u8]> = many.iter().map(Vec::as_slice).collect();
        assert_eq!(f(&many), (Gram::Two, 2));
    }

    #[test]
    fn crowded_slots_are_refused() {
        // 36 three-byte patterns `ab?`: each one's only window holds the gram `ab`.
        let pats: Vec<Vec<u8>> = (b'0'..=b'9')
            .chain(b'A'..=b'Z')
            .map(|c| vec![b'a', b'b', c])
            .collect();
        assert!(GramFilter::build(&owned(&pats)).is_none());
        assert!(GramFilter::build(&[]).is_none());
    }

    #[test]
    fn windows_move_off_a_full_run() {
        // `ab10`…`ab99` could all sit on `ab`; once its run is full they move to the
        // grams after it, and the filter still finds every one of them.
        let pats: Vec<Vec<u8>> = (10..100).map(|i| format!("ab{i}").into_bytes()).collect();
        let ps = owned(&pats);
        let f = GramFilter::build(&ps).expect("room on other grams");
        for hay in [&b"xxab99"[..], b"ab10", b"zab5", b"ab", b"a b77 ab42 "] {
            assert_eq!(f.scan(hay), naive(&ps, hay), "{hay:?}");
        }
    }

    #[test]
    fn finds_patterns_at_every_alignment_and_at_the_edges() {
        let pats: Vec<Vec<u8>> = ["HTC", "Mobile", "SonyEricsson", "; KF", "iPad"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        let ps = owned(&pats);
        let f = GramFilter::build(&ps).unwrap();
        for p in &pats {
            for pad in 0..12 {
                for tail in 0..12 {
                    let hay = [vec![b'.'; pad], p.clone(), vec![b'.'; tail]].concat();
                    assert_eq!(f.scan(&hay), naive(&ps, &hay), "{hay:?}");
                }
            }
        }
    }

    /// A set of 1–24 distinct patterns over a small alphabet (so generated haystacks hold
    /// them often), all at least `shortest` bytes long: `shortest` is drawn first so that
    /// every gram length and stride (1 to 4, and the stride-2 word loop) is exercised.
    fn pattern_set(alphabet: &'static [u8]) -> impl Strategy<Value = Vec<Vec<u8>>> {
        (1usize..=6).prop_flat_map(move |shortest| {
            prop::collection::vec(
                prop::collection::vec(prop::sample::select(alphabet), shortest..shortest + 9),
                1..24,
            )
            .prop_map(|mut pats| {
                pats.sort();
                pats.dedup();
                pats
            })
        })
    }

    /// `hay` with some of `pats` inserted at random places, so matches are not rare.
    fn plant(
        mut hay: Vec<u8>,
        pats: &[Vec<u8>],
        at: &[(prop::sample::Index, prop::sample::Index)],
    ) -> Vec<u8> {
        for (which, pos) in at {
            let p = &pats[which.index(pats.len())];
            let pos = pos.index(hay.len() + 1);
            hay.splice(pos..pos, p.iter().copied());
        }
        hay
    }

    proptest! {
        #[test]
        fn matches_a_naive_search(
            pats in pattern_set(b"abAB; /-"),
            hay in prop::collection::vec(prop::sample::select(&b"abAB; /-xyz\xff"[..]), 0..1200),
            at in prop::collection::vec(any::<(prop::sample::Index, prop::sample::Index)>(), 0..8),
        ) {
            let hay = plant(hay, &pats, &at);
            let ps = owned(&pats);
            let f = GramFilter::build(&ps);
            // Small alphabets crowd grams; the filter may refuse, never mis-scan.
            if let Some(f) = f {
                prop_assert_eq!(f.scan(&hay), naive(&ps, &hay));
            }
        }

        #[test]
        fn matches_a_naive_search_on_arbitrary_bytes(
            pats in pattern_set(&[0, 1, 2, 0x41, 0x42, 0x7f, 0x80, 0xfe, 0xff]),
            hay in prop::collection::vec(any::<u8>(), 0..1200),
            at in prop::collection::vec(any::<(prop::sample::Index, prop::sample::Index)>(), 0..8),
        ) {
            let hay = plant(hay, &pats, &at);
            let ps = owned(&pats);
            if let Some(f) = GramFilter::build(&ps) {
                prop_assert_eq!(f.scan(&hay), naive(&ps, &hay));
            }
        }

        /// Realistic pattern sets always build (no crowding) and match the naive search.
        #[test]
        fn ua_like_sets_build_and_match(
            pats in pattern_set(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ;/-"),
            hay in prop::collection::vec(any::<u8>(), 0..1200),
            at in prop::collection::vec(any::<(prop::sample::Index, prop::sample::Index)>(), 1..8),
        ) {
            let hay = plant(hay, &pats, &at);
            let ps = owned(&pats);
            let f = GramFilter::build(&ps);
            prop_assert!(f.is_some());
            if let Some(f) = f {
                prop_assert_eq!(f.scan(&hay), naive(&ps, &hay));
            }
        }
    }
}
