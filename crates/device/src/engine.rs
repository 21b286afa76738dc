//! The compiled classifier: a strided gram filter over the required patterns, rules as
//! bitsets.
//!
//! Compilation deduplicates the patterns of all rules (≤ [`crate::MAX_PATTERNS`]) and
//! splits them in two. Patterns some rule *requires* (`contains`) are *scanned*: the gram
//! filter of [`crate::filter`] finds all of them in one pass, and reports with them the
//! set of rules they make candidates. Patterns that only ever *forbid* (`unless`) are
//! *lazy*: they are searched for (`memchr::memmem`) only when a rule that names them is
//! otherwise satisfied — in the accurate profile, `AppleWebKit`, `Gecko/` and `Presto`
//! are looked for only in UAs that say `Android` and nothing earlier decided.
//!
//! Candidate rules are tried in rule order with two mask tests each
//! (`found ⊇ contains`, `found ∩ unless = ∅`); the first that passes gives the class. A
//! rule with one `contains` pattern and no `unless` (all but one accurate rule) is
//! decided by being the first candidate, without a loop. No heap allocation happens per
//! call.
//!
//! A rule set the filter refuses (too many patterns crowding one gram, see
//! [`crate::filter::MAX_RUN`]) runs on an Aho-Corasick DFA instead, walked by up to four
//! cursors in lock-step over segments of the haystack; each cursor starts
//! `longest pattern − 1` bytes before its segment so a pattern crossing a boundary is
//! still seen whole by one cursor (extra matches in the overlap are harmless: the found
//! set is a union). `docs/device.md` records the measurements behind these choices.

use std::sync::Arc;

use aho_corasick::automaton::{Automaton, StateID};
use aho_corasick::{Anchored, MatchKind, dfa::DFA, nfa::contiguous::NFA};
use memchr::memmem;

use crate::filter::{Found, GramFilter};
use crate::request::{Decision, force_class, hint_class};
use crate::{DeviceClass, DeviceConfig, DeviceError, Profile, Rule};

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
    /// One `contains` pattern and no `unless`: the rule holds as soon as it is a
    /// candidate (a pattern of its `contains` was found).
    simple: bool,
}

/// What finds the scanned patterns: the strided gram filter normally; an Aho-Corasick DFA
/// (walked by lock-step cursors) for rule sets the filter refuses.
#[derive(Debug, Clone)]
enum Engine {
    /// Strided gram filter + verification (`crate::filter`).
    Filter(GramFilter),
    /// Aho-Corasick DFA (one table load per byte) and its unanchored start state.
    Dfa(DFA, StateID),
    /// Aho-Corasick contiguous NFA (follows failure links) and its start state.
    Nfa(NFA, StateID),
    /// Nothing to scan for (or no automaton could be built): nothing is found.
    None,
}

/// Everything compiled from the rules; shared by clones of a [`Classifier`].
#[derive(Debug)]
struct Compiled {
    /// Finds the patterns of `contains` lists (pattern id = bit index).
    engine: Engine,
    /// Longest scanned pattern length minus one: how far a DFA cursor starts before its
    /// segment.
    overlap: usize,
    /// For each pattern id, the set of rules whose `contains` list has it.
    pattern_rules: Box<[u128]>,
    /// The rules, in order (rule index = bit index in `pattern_rules`).
    rules: Box<[CompiledRule]>,
    /// Patterns that occur only in `unless` lists: not scanned, searched for only when a
    /// rule that names them is otherwise satisfied (indexed by pattern id).
    lazy: Box<[Option<memmem::Finder<'static>>]>,
    /// The answer when rule `i` is the first candidate, if that alone decides it (the
    /// rule is simple); index 128 (no candidate at all) holds the default. One table
    /// load replaces two data-dependent branches on the common path.
    decided: Box<[Option<DeviceClass>; 129]>,
    /// The effective rules as configured (for [`Classifier::rule`] and `--explain`).
    source: Box<[Rule]>,
    /// For rule `i` with one `contains` pattern and an `unless` list of lazy patterns
    /// only (the accurate profile's Android-app rule): those patterns (ids) and the
    /// rule's class. When such a rule is the first candidate it holds exactly when none
    /// of them occurs, which [`Classifier::classify`] decides without the general
    /// [`Classifier::evaluate`].
    lazy_rule: Box<[Option<(u128, DeviceClass)>; 129]>,
}

impl Compiled {
    /// `patterns` with the union of their rules (for the automata, which only report
    /// patterns).
    fn with_rules(&self, patterns: u128) -> Found {
        let mut payload = 0u128;
        let mut rest = patterns;
        while rest != 0 {
            let id = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            payload |= self.pattern_rules.get(id).copied().unwrap_or(0);
        }
        Found { patterns, payload }
    }
}

/// A compiled, immutable rule set. `Send + Sync`; cloning shares the compiled tables (an
/// `Arc`), so it is cheap to hand to every request. Build it once per configuration.
///
/// Build it with [`Classifier::new`] (or [`Classifier::from_profile`]) and call
/// [`Classifier::classify`] per request.
#[derive(Debug, Clone)]
pub struct Classifier {
    /// Compiled rules and pattern finder.
    compiled: Arc<Compiled>,
    /// Class when no rule matches.
    default: DeviceClass,
    /// Bytes of the UA that are scanned.
    max_scan_bytes: usize,
    /// Header name carrying the class to the origin.
    header: Box<str>,
    /// Whether `Sec-CH-UA-Mobile` decides before the rules.
    client_hints: bool,
    /// Name of the override cookie (empty: no override).
    force_cookie: Box<[u8]>,
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
        Self::compile_with(config, true)
    }

    /// [`Classifier::compile`], optionally without the gram filter (tests use it to run
    /// the DFA fallback on any rule set).
    fn compile_with(config: &DeviceConfig, allow_filter: bool) -> Self {
        let rules = config.effective_rules();
        // Ids: first every pattern some rule requires (the scanned ones, ids 0..k in
        // first-appearance order, which is also Aho-Corasick's numbering of them), then
        // the patterns only ever forbidden (lazy).
        let mut patterns: Vec<&str> = Vec::new();
        let mut pattern_rules: Vec<u128> = Vec::new();
        let mut all = vec![0u128; rules.len()];
        for (ri, rule) in rules.iter().enumerate() {
            for p in &rule.contains {
                let id = id_of(p, &mut patterns);
                all[ri] |= bit(id);
                if pattern_rules.len() <= id {
                    pattern_rules.resize(id + 1, 0);
                }
                pattern_rules[id] |= bit(ri);
            }
        }
        let scanned: Vec<(usize, &[u8], u128)> = patterns
            .iter()
            .enumerate()
            .map(|(id, p)| (id, p.as_bytes(), pattern_rules[id]))
            .collect();
        let compiled: Vec<CompiledRule> = rules
            .iter()
            .zip(all)
            .map(|(rule, all)| CompiledRule {
                all,
                none: rule
                    .unless
                    .iter()
                    .fold(0, |none, p| none | bit(id_of(p, &mut patterns))),
                class: rule.class,
                simple: all.is_power_of_two() && rule.unless.is_empty(),
            })
            .collect();
        pattern_rules.resize(patterns.len(), 0);
        let lazy = patterns
            .iter()
            .enumerate()
            .map(|(id, p)| (pattern_rules[id] == 0).then(|| memmem::Finder::new(p).into_owned()))
            .collect();
        let mut decided = Box::new([Some(config.default); 129]);
        for (d, r) in decided.iter_mut().zip(&compiled) {
            *d = r.simple.then_some(r.class);
        }
        let scanned_ids = scanned.iter().fold(0u128, |m, p| m | bit(p.0));
        let mut lazy_rule = Box::new([None; 129]);
        for (l, r) in lazy_rule.iter_mut().zip(&compiled) {
            if r.all.is_power_of_two() && r.none != 0 && r.none & scanned_ids == 0 {
                *l = Some((r.none, r.class));
            }
        }
        let engine = build_engine(&scanned, allow_filter);
        let longest = scanned.iter().map(|p| p.1.len()).max().unwrap_or(1);
        Classifier {
            compiled: Arc::new(Compiled {
                engine,
                overlap: longest.saturating_sub(1),
                pattern_rules: pattern_rules.into_boxed_slice(),
                rules: compiled.into_boxed_slice(),
                lazy,
                decided,
                source: rules.into_boxed_slice(),
                lazy_rule,
            }),
            default: config.default,
            max_scan_bytes: config.max_scan_bytes,
            header: config.header.clone().into_boxed_str(),
            client_hints: config.effective_client_hints(),
            force_cookie: config.force_cookie.as_bytes().into(),
        }
    }

    /// The device class of a User-Agent given as raw header bytes (any bytes: non-UTF-8,
    /// empty for a missing header, any length). Only the first `max_scan_bytes` bytes are
    /// looked at. Rules are tried in order and the first match wins; with no match the
    /// configured default applies. Never panics and never allocates.
    pub fn classify(&self, user_agent: &[u8]) -> DeviceClass {
        let c = &*self.compiled;
        let hay = user_agent.get(..self.max_scan_bytes).unwrap_or(user_agent);
        let found = self.find(hay);
        // Fast path: the first candidate rule needs nothing but the pattern that made it
        // a candidate (every accurate rule but the Android-app one).
        let first = found.payload.trailing_zeros() as usize;
        if let Some(Some(class)) = c.decided.get(first) {
            return *class;
        }
        // Next most common: the first candidate needs only that some lazy patterns be
        // absent; if one is present, the next candidate decides when it is simple.
        if let Some(Some((none, class))) = c.lazy_rule.get(first) {
            if !self.any_lazy(hay, *none) {
                return *class;
            }
            let rest = found.payload & !bit(first);
            if let Some(Some(class)) = c.decided.get(rest.trailing_zeros() as usize) {
                return *class;
            }
        }
        self.evaluate(hay, found)
            .and_then(|ri| c.rules.get(ri))
            .map_or(self.default, |r| r.class)
    }

    /// The class of a request from its three inputs, in this order of precedence:
    ///
    /// 1. `cookie` (the raw `Cookie` header value; `None` when absent): the override
    ///    cookie [`DeviceConfig::force_cookie`], when configured, present and naming a
    ///    class ([`crate::force_class`]);
    /// 2. `ch_ua_mobile` (the raw `Sec-CH-UA-Mobile` value; `None` when absent), when
    ///    [`DeviceConfig::client_hints`] is in force and the value is a valid boolean
    ///    (`?1` → smartphone, `?0` → pc; [`crate::hint_class`]);
    /// 3. the User-Agent rules ([`Classifier::classify`]).
    ///
    /// The result is always one of the two classes, so neither header adds cache
    /// variants. Any bytes are accepted; never panics and never allocates.
    pub fn classify_request(
        &self,
        user_agent: &[u8],
        ch_ua_mobile: Option<&[u8]>,
        cookie: Option<&[u8]>,
    ) -> DeviceClass {
        if let Some(class) = self.request_override(ch_ua_mobile, cookie) {
            return class.0;
        }
        self.classify(user_agent)
    }

    /// [`Classifier::classify_request`] together with what decided it (the cookie, the
    /// hint, the index of the rule, or the default). Same precedence and guarantees; a
    /// little slower (it does not take the fast path), for tools and logs.
    pub fn explain_request(
        &self,
        user_agent: &[u8],
        ch_ua_mobile: Option<&[u8]>,
        cookie: Option<&[u8]>,
    ) -> (DeviceClass, Decision) {
        if let Some((class, why)) = self.request_override(ch_ua_mobile, cookie) {
            return (class, why);
        }
        self.explain(user_agent)
    }

    /// [`Classifier::classify`] together with the rule that decided (its index in the
    /// effective rule list, see [`Classifier::rule`]) or [`Decision::Default`]. Never
    /// panics and never allocates.
    pub fn explain(&self, user_agent: &[u8]) -> (DeviceClass, Decision) {
        let c = &*self.compiled;
        let hay = user_agent.get(..self.max_scan_bytes).unwrap_or(user_agent);
        let found = self.find(hay);
        match self.evaluate(hay, found) {
            Some(ri) => match c.rules.get(ri) {
                Some(r) => (r.class, Decision::Rule(ri)),
                None => (self.default, Decision::Default),
            },
            None => (self.default, Decision::Default),
        }
    }

    /// The cookie override, then the client hint, if either decides.
    fn request_override(
        &self,
        ch_ua_mobile: Option<&[u8]>,
        cookie: Option<&[u8]>,
    ) -> Option<(DeviceClass, Decision)> {
        if let Some(class) = cookie.and_then(|c| force_class(c, &self.force_cookie)) {
            return Some((class, Decision::ForceCookie));
        }
        if self.client_hints
            && let Some(class) = ch_ua_mobile.and_then(hint_class)
        {
            return Some((class, Decision::ClientHint));
        }
        None
    }

    /// The rule with index `index` in the effective rule list (the configured `rules`, or
    /// the profile's), as named by [`Decision::Rule`]; `None` past the end.
    pub fn rule(&self, index: usize) -> Option<&Rule> {
        self.compiled.source.get(index)
    }

    /// Whether `Sec-CH-UA-Mobile` decides before the rules ([`DeviceConfig::client_hints`]
    /// or the profile's default).
    pub fn client_hints(&self) -> bool {
        self.client_hints
    }

    /// The override cookie's name ([`DeviceConfig::force_cookie`]; empty when off).
    pub fn force_cookie(&self) -> &[u8] {
        &self.force_cookie
    }

    /// The scanned patterns found in `hay`, with the rules they make candidates.
    #[inline]
    fn find(&self, hay: &[u8]) -> Found {
        let c = &*self.compiled;
        match &c.engine {
            Engine::Filter(f) => f.scan(hay),
            Engine::Dfa(a, start) => c.with_rules(scan(a, *start, hay, c.overlap)),
            Engine::Nfa(a, start) => c.with_rules(scan(a, *start, hay, c.overlap)),
            Engine::None => Found::default(),
        }
    }

    /// The rule evaluation behind [`Classifier::classify`] when the first candidate rule
    /// has more than one `contains` pattern or an `unless` list (and behind
    /// [`Classifier::explain`]): candidates in rule order, with lazy patterns searched
    /// for on demand. Returns the index of the deciding rule, `None` for the default. Kept
    /// out of line so the common path stays small.
    #[inline(never)]
    fn evaluate(&self, hay: &[u8], found: Found) -> Option<usize> {
        let c = &*self.compiled;
        let mut candidates = found.payload;
        let found = found.patterns;
        // Lazy (`unless`-only) patterns already searched for, and those of them present.
        let mut searched = 0u128;
        let mut present = 0u128;
        while candidates != 0 {
            let ri = candidates.trailing_zeros() as usize;
            candidates &= candidates - 1;
            let Some(r) = c.rules.get(ri) else { continue };
            if found & r.all != r.all || found & r.none != 0 {
                continue;
            }
            // Search the rule's lazy patterns not searched yet, stopping at the first one
            // present (it blocks the rule).
            let mut pending = r.none & !searched;
            while pending != 0 && r.none & present == 0 {
                let id = pending.trailing_zeros() as usize;
                pending &= pending - 1;
                searched |= bit(id);
                if let Some(Some(finder)) = c.lazy.get(id)
                    && finder.find(hay).is_some()
                {
                    present |= bit(id);
                }
            }
            if r.none & present == 0 {
                return Some(ri);
            }
        }
        None
    }

    /// Whether any of the lazy patterns `ids` occurs in `hay` (searched in id order,
    /// stopping at the first found).
    fn any_lazy(&self, hay: &[u8], ids: u128) -> bool {
        let mut rest = ids;
        while rest != 0 {
            let id = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            if let Some(Some(finder)) = self.compiled.lazy.get(id)
                && finder.find(hay).is_some()
            {
                return true;
            }
        }
        false
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

/// The set of pattern ids occurring in `hay`, walking 1, 2 or 4 DFA cursors by length.
#[inline(never)]
fn scan<A: Automaton>(a: &A, start: StateID, hay: &[u8], overlap: usize) -> u128 {
    let per = overlap + MIN_SEGMENT_BYTES;
    if hay.len() >= 4 * per {
        scan_lockstep::<A, 4>(a, start, hay, overlap)
    } else if hay.len() >= 2 * per {
        scan_lockstep::<A, 2>(a, start, hay, overlap)
    } else {
        scan_lockstep::<A, 1>(a, start, hay, overlap)
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
pub(crate) fn bit(i: usize) -> u128 {
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

/// Builds the pattern finder for the scanned patterns (`(id, bytes)`): the gram filter
/// when allowed and it accepts the set, else a DFA, else a contiguous NFA. The DFA is
/// bounded by the limits: ≤ 128 patterns of ≤ [`crate::MAX_PATTERN_BYTES`] bytes give ≤
/// 8,193 states.
fn build_engine(patterns: &[(usize, &[u8], u128)], allow_filter: bool) -> Engine {
    if patterns.is_empty() {
        return Engine::None;
    }
    if allow_filter && let Some(f) = GramFilter::build(patterns) {
        return Engine::Filter(f);
    }
    // Aho-Corasick numbers patterns 0.. in the order given; map them back to our ids.
    let bytes: Vec<&[u8]> = patterns.iter().map(|p| p.1).collect();
    let dfa = DFA::builder()
        .match_kind(MatchKind::Standard)
        .prefilter(false)
        .byte_classes(true)
        .build(&bytes);
    if let Ok(dfa) = dfa
        && let Ok(start) = dfa.start_state(Anchored::No)
    {
        return Engine::Dfa(dfa, start);
    }
    match NFA::builder()
        .match_kind(MatchKind::Standard)
        .prefilter(false)
        .build(&bytes)
    {
        Ok(nfa) => match nfa.start_state(Anchored::No) {
            Ok(start) => Engine::Nfa(nfa, start),
            Err(_) => Engine::None,
        },
        Err(_) => Engine::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MAX_PATTERNS, MAX_RULES, MAX_SCAN_BYTES, Rule};
    use proptest::prelude::*;

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
                .compiled
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
        assert_eq!(c.compiled.pattern_rules.len(), 2);
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

    /// Which pattern finder a classifier ended up with.
    fn engine_name(c: &Classifier) -> &'static str {
        match c.compiled.engine {
            Engine::Filter(_) => "filter",
            Engine::Dfa(..) => "dfa",
            Engine::Nfa(..) => "nfa",
            Engine::None => "none",
        }
    }

    /// The naive evaluator: first rule whose `contains` all occur (`memmem`) and whose
    /// `unless` none occur, on the scanned prefix.
    fn naive(
        rules: &[Rule],
        default: DeviceClass,
        ua: &[u8],
        max_scan_bytes: usize,
    ) -> DeviceClass {
        let hay = &ua[..ua.len().min(max_scan_bytes)];
        let has = |p: &String| memmem::find(hay, p.as_bytes()).is_some();
        rules
            .iter()
            .find(|r| r.contains.iter().all(has) && !r.unless.iter().any(has))
            .map_or(default, |r| r.class)
    }

    #[test]
    fn builtin_profiles_use_the_gram_filter() {
        for p in [Profile::Seed, Profile::Accurate] {
            assert_eq!(engine_name(&Classifier::from_profile(p)), "filter", "{p:?}");
        }
    }

    #[test]
    fn crowded_rule_sets_fall_back_to_the_dfa() {
        // 36 three-byte patterns `ab?` share their only window's gram `ab`: its run of
        // checks would overflow.
        let rules: Vec<Rule> = ('0'..='9')
            .chain('A'..='Z')
            .map(|c| rule(&[&format!("ab{c}")], &[], DeviceClass::Smartphone))
            .collect();
        let cfg = DeviceConfig {
            rules: rules.clone(),
            ..DeviceConfig::default()
        };
        let c = Classifier::new(&cfg).unwrap();
        assert_eq!(engine_name(&c), "dfa");
        for ua in [&b"xxab9"[..], b"ab", b"a b7", b"zzabQzz", b"abz", b""] {
            assert_eq!(
                c.classify(ua),
                naive(&rules, DeviceClass::Pc, ua, MAX_SCAN_BYTES)
            );
        }
    }

    #[test]
    fn unless_only_patterns_are_searched_lazily() {
        let cfg = DeviceConfig {
            rules: vec![
                rule(
                    &["Android"],
                    &["AppleWebKit", "Gecko/"],
                    DeviceClass::Smartphone,
                ),
                rule(&["Android"], &[], DeviceClass::Pc),
            ],
            ..DeviceConfig::default()
        };
        let c = Classifier::new(&cfg).unwrap();
        assert!(c.compiled.lazy[1].is_some() && c.compiled.lazy[2].is_some());
        assert!(c.compiled.lazy[0].is_none());
        // Rule 0 takes classify's lazy-rule path (blocked: rule 1, simple, decides).
        assert!(c.compiled.lazy_rule[0].is_some() && c.compiled.lazy_rule[1].is_none());
        assert_eq!(c.classify(b"Dalvik (Android 13)"), DeviceClass::Smartphone);
        assert_eq!(c.classify(b"Android 13 AppleWebKit/5"), DeviceClass::Pc);
        assert_eq!(c.classify(b"Android 13 Gecko/2"), DeviceClass::Pc);
        assert_eq!(c.classify(b"AppleWebKit Gecko/"), DeviceClass::Pc); // default
    }

    /// Tokens for generated rule sets: 1- to 12-byte patterns, shared prefixes, overlaps.
    const TOKENS: &[&str] = &[
        " ",
        ";",
        "M",
        "Mo",
        "Mob",
        "Mobile",
        "obi",
        "bile",
        "iPad",
        "iPa",
        "Pad",
        "HTC",
        "TC",
        "Android",
        "droid",
        "; KF",
        "KF",
        "SM-T",
        "SM-P",
        "SonyEricsson",
        "Ericsson",
        "Windows Phone",
        "ab",
        "aba",
        "abab",
    ];

    fn ua_strategy() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(
            prop_oneof![
                3 => prop::sample::select(TOKENS).prop_map(|t| t.as_bytes().to_vec()),
                1 => prop::collection::vec(any::<u8>(), 0..6),
            ],
            0..150,
        )
        .prop_map(|parts| parts.concat())
    }

    /// 1–12 rules over the tokens at least `shortest` bytes long (`shortest` drawn first,
    /// so every gram length and stride of the filter is exercised).
    fn rules_strategy() -> impl Strategy<Value = Vec<Rule>> {
        (1usize..=5).prop_flat_map(|shortest| {
            let tokens: Vec<&'static str> = TOKENS
                .iter()
                .copied()
                .filter(|t| t.len() >= shortest)
                .collect();
            let class = prop_oneof![Just(DeviceClass::Pc), Just(DeviceClass::Smartphone)];
            prop::collection::vec(
                (
                    prop::collection::vec(prop::sample::select(tokens.clone()), 1..3),
                    prop::collection::vec(prop::sample::select(tokens), 0..3),
                    class,
                ),
                1..12,
            )
            .prop_map(|rows| {
                rows.into_iter()
                    .map(|(c, u, class)| Rule {
                        unless: u
                            .into_iter()
                            .filter(|p| !c.contains(p))
                            .map(str::to_owned)
                            .collect(),
                        contains: c.into_iter().map(str::to_owned).collect(),
                        class,
                    })
                    .collect()
            })
        })
    }

    proptest! {
        /// The gram filter and the DFA fallback agree with the naive evaluator on random
        /// rule sets (any shortest pattern, so every stride and gram length is used),
        /// random windows (across the 512-byte chunks of the stride-2 loop) and UAs up to ~1.5 KB.
        #[test]
        fn filter_and_dfa_match_the_naive_evaluator(
            rules in rules_strategy(),
            ua in ua_strategy(),
            max_scan_bytes in prop_oneof![Just(MAX_SCAN_BYTES), 12usize..200, 500usize..1100],
            default_pc in any::<bool>(),
        ) {
            let default = if default_pc { DeviceClass::Pc } else { DeviceClass::Smartphone };
            let cfg = DeviceConfig { rules: rules.clone(), default, max_scan_bytes, ..DeviceConfig::default() };
            prop_assume!(cfg.validate().is_empty());
            let expected = naive(&rules, default, &ua, max_scan_bytes);
            let filter = Classifier::compile_with(&cfg, true);
            let dfa = Classifier::compile_with(&cfg, false);
            prop_assert_ne!(engine_name(&dfa), "filter");
            prop_assert_eq!(filter.classify(&ua), expected);
            prop_assert_eq!(dfa.classify(&ua), expected);
        }
    }
}
