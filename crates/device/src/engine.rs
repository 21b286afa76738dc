//! The compiled classifier: one Aho-Corasick DFA over all patterns, rules as bitsets.
//!
//! Compilation deduplicates the patterns of all rules (≤ [`crate::MAX_PATTERNS`]) and
//! builds one Aho-Corasick DFA (`MatchKind::Standard`, so every state knows all patterns
//! ending at it) over them. Classifying walks the DFA over the first `max_scan_bytes`
//! bytes and ORs the ids of the patterns it sees into a 128-bit set; then the candidate
//! rules (rules with a found `contains` pattern) are checked in rule order with two mask
//! tests each (`found ⊇ contains`, `found ∩ unless = ∅`); the first that passes gives the
//! class. No heap allocation happens per call.
//!
//! Speed: a DFA walk is bound by the latency of one dependent table load per byte. To hide
//! it, a long enough haystack is cut into up to four segments walked in lock-step by
//! independent DFA cursors; each cursor starts `longest pattern − 1` bytes before its
//! segment so a pattern crossing a boundary is still seen whole by one cursor (extra
//! matches in the overlap are harmless: the found set is a union). `docs/device.md`
//! records this against the alternatives we measured (aho-corasick's own searches with
//! and without prefilter, Teddy, bigram tables).

use std::sync::Arc;

use aho_corasick::automaton::{Automaton, StateID};
use aho_corasick::{Anchored, MatchKind, dfa::DFA, nfa::contiguous::NFA};

use crate::{DeviceClass, DeviceConfig, DeviceError, Profile};

/// Segments shorter than this many bytes (beyond the overlap) are not worth an extra
/// cursor: below it the set-up costs more than the parallel walk saves.
const MIN_SEGMENT_BYTES: usize = 16;

/// One rule as two masks over the pattern ids.
#[derive(Debug, Clone, Copy)]
struct CompiledRule {
    /// Patterns that must all be found.
    all: u128,
    /// Patterns none of which may be found.
    none: u128,
    /// The class the rule assigns.
    class: DeviceClass,
}

/// The automaton: a DFA normally; a contiguous NFA should the DFA ever be refused.
#[derive(Debug, Clone)]
enum Engine {
    /// Aho-Corasick DFA (one table load per byte).
    Dfa(DFA),
    /// Aho-Corasick contiguous NFA (fallback; follows failure links).
    Nfa(NFA),
    /// No automaton could be built (not reachable within the limits): nothing is found.
    None,
}

/// A compiled, immutable rule set. `Send + Sync`; cloning shares the automaton (an `Arc`),
/// so it is cheap to hand to every request. Build it once per configuration.
///
/// Build it with [`Classifier::new`] (or [`Classifier::from_profile`]) and call
/// [`Classifier::classify`] per request.
#[derive(Debug, Clone)]
pub struct Classifier {
    /// Automaton over the deduplicated patterns; pattern id = bit index.
    engine: Arc<Engine>,
    /// Start state of the unanchored search.
    start: Option<StateID>,
    /// Longest pattern length minus one: how far a cursor starts before its segment.
    overlap: usize,
    /// For each pattern id, the set of rules whose `contains` list has it.
    pattern_rules: Box<[u128]>,
    /// The rules, in order (rule index = bit index in `pattern_rules`).
    rules: Box<[CompiledRule]>,
    /// Class when no rule matches.
    default: DeviceClass,
    /// Bytes of the UA that are scanned.
    max_scan_bytes: usize,
    /// Header name carrying the class to the origin.
    header: Box<str>,
}

impl Classifier {
    /// Validates `config` and compiles its rules (`config.rules` if non-empty, else the
    /// profile's).
    ///
    /// # Errors
    /// The first problem [`DeviceConfig::validate`] would report: an empty or too long
    /// pattern, an empty `contains`, an unsatisfiable rule, more than
    /// [`crate::MAX_RULES`] rules or [`crate::MAX_PATTERNS`] distinct patterns,
    /// `max_scan_bytes` of 0 or above [`crate::MAX_SCAN_BYTES_LIMIT`], or a header name
    /// that is not an HTTP token.
    pub fn new(config: &DeviceConfig) -> Result<Self, DeviceError> {
        if let Some(first) = config.problems().into_iter().next() {
            return Err(first);
        }
        Ok(Self::compile(config))
    }

    /// The classifier for a built-in profile with every other setting at its default
    /// (`default = pc`, [`crate::MAX_SCAN_BYTES`], [`crate::DEFAULT_HEADER`]).
    pub fn from_profile(profile: Profile) -> Self {
        Self::compile(&DeviceConfig {
            profile,
            ..DeviceConfig::default()
        })
    }

    /// Compiles a configuration whose custom rules (if any) passed validation; the
    /// built-in profiles are within every limit by construction (unit tests check it).
    fn compile(config: &DeviceConfig) -> Self {
        let rules = config.effective_rules();
        let mut patterns: Vec<&str> = Vec::new();
        let mut compiled = Vec::with_capacity(rules.len());
        let mut pattern_rules: Vec<u128> = Vec::new();
        for (ri, rule) in rules.iter().enumerate() {
            let mut all = 0u128;
            let mut none = 0u128;
            for p in &rule.contains {
                let id = id_of(p, &mut patterns);
                all |= bit(id);
                if pattern_rules.len() <= id {
                    pattern_rules.resize(id + 1, 0);
                }
                pattern_rules[id] |= bit(ri);
            }
            for p in &rule.unless {
                none |= bit(id_of(p, &mut patterns));
            }
            compiled.push(CompiledRule {
                all,
                none,
                class: rule.class,
            });
        }
        pattern_rules.resize(patterns.len(), 0);
        let engine = Arc::new(build_engine(&patterns));
        let start = match &*engine {
            Engine::Dfa(a) => a.start_state(Anchored::No).ok(),
            Engine::Nfa(a) => a.start_state(Anchored::No).ok(),
            Engine::None => None,
        };
        let longest = patterns.iter().map(|p| p.len()).max().unwrap_or(1);
        Classifier {
            engine,
            start,
            overlap: longest.saturating_sub(1),
            pattern_rules: pattern_rules.into_boxed_slice(),
            rules: compiled.into_boxed_slice(),
            default: config.default,
            max_scan_bytes: config.max_scan_bytes,
            header: config.header.clone().into_boxed_str(),
        }
    }

    /// The device class of a User-Agent given as raw header bytes (any bytes: non-UTF-8,
    /// empty for a missing header, any length). Only the first `max_scan_bytes` bytes are
    /// looked at. Rules are tried in order and the first match wins; with no match the
    /// configured default applies. Never panics and never allocates.
    pub fn classify(&self, user_agent: &[u8]) -> DeviceClass {
        let hay = user_agent.get(..self.max_scan_bytes).unwrap_or(user_agent);
        let found = match (&*self.engine, self.start) {
            (Engine::Dfa(a), Some(start)) => self.scan(a, start, hay),
            (Engine::Nfa(a), Some(start)) => self.scan(a, start, hay),
            _ => 0,
        };
        let mut candidates = 0u128;
        let mut rest = found;
        while rest != 0 {
            let id = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            candidates |= self.pattern_rules.get(id).copied().unwrap_or(0);
        }
        while candidates != 0 {
            let ri = candidates.trailing_zeros() as usize;
            candidates &= candidates - 1;
            if let Some(r) = self.rules.get(ri)
                && found & r.all == r.all
                && found & r.none == 0
            {
                return r.class;
            }
        }
        self.default
    }

    /// The set of pattern ids occurring in `hay`, walking 1, 2 or 4 cursors by length.
    fn scan<A: Automaton>(&self, a: &A, start: StateID, hay: &[u8]) -> u128 {
        let per = self.overlap + MIN_SEGMENT_BYTES;
        if hay.len() >= 4 * per {
            scan_lockstep::<A, 4>(a, start, hay, self.overlap)
        } else if hay.len() >= 2 * per {
            scan_lockstep::<A, 2>(a, start, hay, self.overlap)
        } else {
            scan_lockstep::<A, 1>(a, start, hay, self.overlap)
        }
    }

    /// The request header name in which the edge sends the class to the origin.
    pub fn header(&self) -> &str {
        &self.header
    }

    /// The class used when no rule matches (also for an empty User-Agent).
    pub fn default_class(&self) -> DeviceClass {
        self.default
    }

    /// How many leading User-Agent bytes are scanned.
    pub fn max_scan_bytes(&self) -> usize {
        self.max_scan_bytes
    }
}

/// Walks `K` cursors in lock-step. Segment `j` is `[j·seg, (j+1)·seg)`; its cursor walks
/// the window of `len = seg + overlap` bytes ending at the segment's end (clamped to the
/// haystack start), so every occurrence ending in the segment lies inside the window.
/// All windows have the same length, so they are zipped without bounds checks.
fn scan_lockstep<A: Automaton, const K: usize>(
    a: &A,
    start: StateID,
    hay: &[u8],
    overlap: usize,
) -> u128 {
    let n = hay.len();
    let seg = n.div_ceil(K);
    let len = (seg + overlap).min(n);
    let window = |j: usize| {
        let end = ((j + 1) * seg).min(n);
        let from = end.saturating_sub(len);
        hay.get(from..from + len).unwrap_or(&[])
    };
    let mut found = 0u128;
    let next = |sid: StateID, byte: u8| a.next_state(Anchored::No, sid, byte);
    match K {
        4 => {
            let (w0, w1, w2, w3) = (window(0), window(1), window(2), window(3));
            let (mut s0, mut s1, mut s2, mut s3) = (start, start, start, start);
            for (((&b0, &b1), &b2), &b3) in w0.iter().zip(w1).zip(w2).zip(w3) {
                s0 = next(s0, b0);
                s1 = next(s1, b1);
                s2 = next(s2, b2);
                s3 = next(s3, b3);
                // One predictable branch for the four cursors; match states are rare.
                if a.is_special(s0) | a.is_special(s1) | a.is_special(s2) | a.is_special(s3) {
                    for sid in [s0, s1, s2, s3] {
                        found |= matches_at(a, sid);
                    }
                }
            }
        }
        2 => {
            let (w0, w1) = (window(0), window(1));
            let (mut s0, mut s1) = (start, start);
            for (&b0, &b1) in w0.iter().zip(w1) {
                s0 = next(s0, b0);
                s1 = next(s1, b1);
                if a.is_special(s0) | a.is_special(s1) {
                    found |= matches_at(a, s0) | matches_at(a, s1);
                }
            }
        }
        _ => {
            let mut s0 = start;
            for &b in hay {
                s0 = next(s0, b);
                if a.is_special(s0) {
                    found |= matches_at(a, s0);
                }
            }
        }
    }
    found
}

/// The set of patterns reported by state `sid` (empty unless it is a match state).
#[cold]
fn matches_at<A: Automaton>(a: &A, sid: StateID) -> u128 {
    let mut set = 0u128;
    if a.is_match(sid) {
        for k in 0..a.match_len(sid) {
            set |= bit(a.match_pattern(sid, k).as_usize());
        }
    }
    set
}

/// The bit for index `i` (< 128) of a 128-bit set; indexes past 127 cannot occur (the
/// limits cap patterns and rules at 128) and map to no bit.
fn bit(i: usize) -> u128 {
    1u128
        .checked_shl(u32::try_from(i).unwrap_or(u32::MAX))
        .unwrap_or(0)
}

/// The id of pattern `p`, adding it if new. Rule sets are small (≤ 128 patterns): a
/// linear search keeps ids in first-appearance order without a map.
fn id_of<'a>(p: &'a str, patterns: &mut Vec<&'a str>) -> usize {
    if let Some(i) = patterns.iter().position(|q| *q == p) {
        i
    } else {
        patterns.push(p);
        patterns.len() - 1
    }
}

/// Builds the automaton: a DFA (no prefilter: the lock-step walk replaces it), else a
/// contiguous NFA. The DFA is bounded by the limits: ≤ 128 patterns of ≤
/// [`crate::MAX_PATTERN_BYTES`] bytes give ≤ 8,193 states.
fn build_engine(patterns: &[&str]) -> Engine {
    let dfa = DFA::builder()
        .match_kind(MatchKind::Standard)
        .prefilter(false)
        .byte_classes(true)
        .build(patterns);
    if let Ok(dfa) = dfa {
        return Engine::Dfa(dfa);
    }
    match NFA::builder()
        .match_kind(MatchKind::Standard)
        .prefilter(false)
        .build(patterns)
    {
        Ok(nfa) => Engine::Nfa(nfa),
        Err(_) => Engine::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MAX_PATTERNS, MAX_RULES, Rule};

    fn rule(contains: &[&str], unless: &[&str], class: DeviceClass) -> Rule {
        Rule {
            contains: contains.iter().map(|s| (*s).to_owned()).collect(),
            unless: unless.iter().map(|s| (*s).to_owned()).collect(),
            class,
        }
    }

    #[test]
    fn builtin_profiles_are_valid_configs() {
        for profile in [Profile::Seed, Profile::Accurate] {
            let cfg = DeviceConfig {
                rules: profile.rules(),
                ..DeviceConfig::default()
            };
            assert!(cfg.validate().is_empty(), "{profile:?}");
            assert!(cfg.rules.len() <= MAX_RULES);
        }
        assert!(
            Classifier::from_profile(Profile::Accurate)
                .pattern_rules
                .len()
                <= MAX_PATTERNS
        );
    }

    #[test]
    fn first_match_wins_and_unless_blocks() {
        let cfg = DeviceConfig {
            rules: vec![
                rule(&["Android"], &["Mobile"], DeviceClass::Pc),
                rule(&["Android", "Mobile"], &[], DeviceClass::Smartphone),
                rule(&["Android"], &[], DeviceClass::Pc),
            ],
            default: DeviceClass::Smartphone,
            ..DeviceConfig::default()
        };
        let c = Classifier::new(&cfg).unwrap();
        assert_eq!(c.classify(b"Linux; Android 14"), DeviceClass::Pc);
        assert_eq!(
            c.classify(b"Android 14 Mobile Safari"),
            DeviceClass::Smartphone
        );
        assert_eq!(c.classify(b"Mobile Android"), DeviceClass::Smartphone);
        assert_eq!(c.classify(b"Mobile"), DeviceClass::Smartphone); // default
        assert_eq!(c.classify(b"Windows"), DeviceClass::Smartphone); // default
        assert_eq!(c.classify(b"android mobile"), DeviceClass::Smartphone); // case-sensitive → default
    }

    #[test]
    fn overlapping_patterns_are_all_found() {
        // "Mob" is a prefix of "Mobile", and "bile" overlaps it: a leftmost search would
        // report only one of them.
        let cfg = DeviceConfig {
            rules: vec![rule(
                &["Mob", "Mobile", "bile"],
                &[],
                DeviceClass::Smartphone,
            )],
            ..DeviceConfig::default()
        };
        let c = Classifier::new(&cfg).unwrap();
        assert_eq!(c.classify(b"xMobilex"), DeviceClass::Smartphone);
        assert_eq!(c.classify(b"xMobix"), DeviceClass::Pc);
    }

    #[test]
    fn duplicate_patterns_share_one_id() {
        let cfg = DeviceConfig {
            rules: vec![
                rule(&["A", "B"], &[], DeviceClass::Pc),
                rule(&["B"], &["A"], DeviceClass::Smartphone),
            ],
            ..DeviceConfig::default()
        };
        let c = Classifier::new(&cfg).unwrap();
        assert_eq!(c.pattern_rules.len(), 2);
        assert_eq!(c.classify(b"B"), DeviceClass::Smartphone);
        assert_eq!(c.classify(b"AB"), DeviceClass::Pc);
    }

    #[test]
    fn scan_window_truncates() {
        let cfg = DeviceConfig {
            profile: Profile::Seed,
            max_scan_bytes: 10,
            ..DeviceConfig::default()
        };
        let c = Classifier::new(&cfg).unwrap();
        assert_eq!(c.max_scan_bytes(), 10);
        assert_eq!(c.classify(b"0123Mobile"), DeviceClass::Smartphone);
        assert_eq!(c.classify(b"01234Mobile"), DeviceClass::Pc);
    }

    #[test]
    fn new_returns_the_first_problem() {
        let cfg = DeviceConfig {
            header: String::new(),
            rules: vec![rule(&[""], &[], DeviceClass::Pc)],
            ..DeviceConfig::default()
        };
        let err = Classifier::new(&cfg).unwrap_err();
        assert_eq!(err.path(), Some("header"));
    }

    #[test]
    fn max_patterns_and_rules_fit_the_bitsets() {
        // 128 rules, 128 distinct patterns: the largest accepted rule set still works,
        // including the rule and pattern with bit index 127.
        let rules: Vec<Rule> = (0..MAX_RULES)
            .map(|i| rule(&[&format!("<{i}>")], &[], DeviceClass::Smartphone))
            .collect();
        let cfg = DeviceConfig {
            rules,
            ..DeviceConfig::default()
        };
        let c = Classifier::new(&cfg).unwrap();
        assert_eq!(c.classify(b"..<127>.."), DeviceClass::Smartphone);
        assert_eq!(c.classify(b"..<128>.."), DeviceClass::Pc);
    }

    #[test]
    fn header_and_default_are_exposed() {
        let c = Classifier::from_profile(Profile::Seed);
        assert_eq!(c.header(), crate::DEFAULT_HEADER);
        assert_eq!(c.default_class(), DeviceClass::Pc);
    }

    #[test]
    fn classifier_is_send_sync() {
        fn assert_send_sync<T: Send + Sync + Clone>() {}
        assert_send_sync::<Classifier>();
    }
}
