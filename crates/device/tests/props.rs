//! Property tests: any bytes never panic, only the scanned prefix matters, `seed` is the
//! literal Hatena rule, and `DeviceConfig` survives TOML and JSON round trips.

use cachet_device::{
    Classifier, DeviceClass, DeviceConfig, MAX_SCAN_BYTES, MAX_SCAN_BYTES_LIMIT, Profile, Rule,
};
use memchr::memmem;
use proptest::prelude::*;

/// Tokens that the built-in profiles react to, plus filler, so generated UAs hit rules.
const TOKENS: &[&str] = &[
    "iPad",
    "Mobile",
    "Mobi",
    "iPhone",
    "Android",
    "AppleWebKit",
    "Gecko/",
    "Tablet",
    "Silk/",
    "; KF",
    "SM-T",
    "DoCoMo",
    "KDDI-",
    "MIDP",
    "Opera Mini",
    "Nokia",
    "HTC",
    "HbbTV",
    " ",
    "(",
    ")",
    ";",
    "Mozilla/5.0",
    "Linux",
    "Windows NT 10.0",
    "\u{e9}",
    "iPa",
    "obile",
];

/// UA-like byte strings: a mix of tokens and arbitrary bytes (incl. non-UTF-8).
fn ua_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            3 => prop::sample::select(TOKENS).prop_map(|t| t.as_bytes().to_vec()),
            1 => prop::collection::vec(any::<u8>(), 0..8),
        ],
        0..40,
    )
    .prop_map(|parts| parts.concat())
}

/// The literal seed rule on the scanned prefix.
fn literal_seed(ua: &[u8]) -> DeviceClass {
    let ua = &ua[..ua.len().min(MAX_SCAN_BYTES)];
    if memmem::find(ua, b"iPad").is_some() {
        DeviceClass::Pc
    } else if memmem::find(ua, b"Mobile").is_some() {
        DeviceClass::Smartphone
    } else {
        DeviceClass::Pc
    }
}

fn class() -> impl Strategy<Value = DeviceClass> {
    prop_oneof![Just(DeviceClass::Pc), Just(DeviceClass::Smartphone)]
}

fn rule() -> impl Strategy<Value = Rule> {
    (
        prop::collection::vec(any::<String>(), 0..4),
        prop::collection::vec(any::<String>(), 0..3),
        class(),
    )
        .prop_map(|(contains, unless, class)| Rule {
            contains,
            unless,
            class,
        })
}

fn config() -> impl Strategy<Value = DeviceConfig> {
    (
        prop_oneof![Just(Profile::Seed), Just(Profile::Accurate)],
        prop::collection::vec(rule(), 0..5),
        class(),
        0usize..=(1 << 32),
        any::<String>(),
        prop::option::of(any::<bool>()),
        prop_oneof![
            Just(String::new()),
            any::<String>(),
            Just("X-UA-Device-force".to_owned())
        ],
    )
        .prop_map(
            |(profile, rules, default, max_scan_bytes, header, client_hints, force_cookie)| {
                DeviceConfig {
                    profile,
                    rules,
                    default,
                    max_scan_bytes,
                    header,
                    client_hints,
                    force_cookie,
                    fill_user_agent: cachet_device::FillUserAgents::default(),
                }
            },
        )
}

proptest! {
    #[test]
    fn any_bytes_never_panic(ua in prop::collection::vec(any::<u8>(), 0..2048), pad in 0usize..20_000) {
        let mut huge = ua.clone();
        huge.resize(ua.len() + pad, b'x');
        for p in [Profile::Seed, Profile::Accurate] {
            let c = Classifier::from_profile(p);
            let _ = c.classify(&ua);
            let _ = c.classify(&huge);
        }
    }

    #[test]
    fn only_the_scanned_prefix_matters(
        head in ua_bytes(),
        tail1 in ua_bytes(),
        tail2 in ua_bytes(),
        n in 1usize..64,
        accurate in any::<bool>(),
    ) {
        let profile = if accurate { Profile::Accurate } else { Profile::Seed };
        // A small window so the generated strings cross it.
        let cfg = DeviceConfig { profile, max_scan_bytes: n, ..DeviceConfig::default() };
        let c = Classifier::new(&cfg).unwrap();
        let mut a = head.clone();
        a.resize(a.len().max(n), b' ');
        let prefix = &a[..n];
        let x = [prefix, &tail1].concat();
        let y = [prefix, &tail2].concat();
        prop_assert_eq!(c.classify(&x), c.classify(&y));
        prop_assert_eq!(c.classify(&x), c.classify(prefix));
        // And with the default window, bytes after MAX_SCAN_BYTES are ignored.
        let d = Classifier::from_profile(profile);
        let mut long = head;
        long.resize(MAX_SCAN_BYTES, b' ');
        prop_assert_eq!(d.classify(&[&long[..], &tail1].concat()), d.classify(&long));
    }

    #[test]
    fn seed_is_the_literal_hatena_rule(ua in ua_bytes(), pad in 0usize..1024, suffix in ua_bytes()) {
        let c = Classifier::from_profile(Profile::Seed);
        prop_assert_eq!(c.classify(&ua), literal_seed(&ua));
        let mut long = ua;
        long.resize(long.len() + pad, b'.');
        long.extend_from_slice(&suffix);
        prop_assert_eq!(c.classify(&long), literal_seed(&long));
    }

    #[test]
    fn custom_rules_match_a_naive_evaluator(
        rules in prop::collection::vec(
            (prop::collection::vec(prop::sample::select(TOKENS), 1..3),
             prop::collection::vec(prop::sample::select(TOKENS), 0..2),
             class()),
            1..8),
        default in class(),
        ua in ua_bytes(),
    ) {
        let rules: Vec<Rule> = rules
            .into_iter()
            .map(|(c, u, class)| Rule {
                contains: c.into_iter().map(str::to_owned).collect(),
                unless: u.into_iter().map(str::to_owned).collect(),
                class,
            })
            .collect();
        let cfg = DeviceConfig { rules: rules.clone(), default, ..DeviceConfig::default() };
        // Generated rules may be unsatisfiable (same token in contains and unless); such a
        // config is refused, which is itself checked.
        match Classifier::new(&cfg) {
            Ok(c) => {
                let has = |p: &String| memmem::find(&ua, p.as_bytes()).is_some();
                let naive = rules
                    .iter()
                    .find(|r| r.contains.iter().all(has) && !r.unless.iter().any(has))
                    .map_or(default, |r| r.class);
                prop_assert_eq!(c.classify(&ua), naive);
            }
            Err(e) => {
                prop_assert!(rules.iter().any(|r| r.contains.iter().any(|p| r.unless.contains(p))), "{}", e);
            }
        }
    }

    #[test]
    fn profiles_match_a_naive_evaluator_on_long_uas(
        parts in prop::collection::vec(ua_bytes(), 1..12),
        accurate in any::<bool>(),
    ) {
        // Long inputs (up to ~2 KB) exercise the 2- and 4-cursor scans, patterns that
        // straddle segment boundaries, and the MAX_SCAN_BYTES cut.
        let profile = if accurate { Profile::Accurate } else { Profile::Seed };
        let ua = parts.concat();
        let scanned = &ua[..ua.len().min(MAX_SCAN_BYTES)];
        let has = |p: &String| memmem::find(scanned, p.as_bytes()).is_some();
        let naive = profile
            .rules()
            .iter()
            .find(|r| r.contains.iter().all(has) && !r.unless.iter().any(has))
            .map_or(DeviceClass::Pc, |r| r.class);
        prop_assert_eq!(Classifier::from_profile(profile).classify(&ua), naive);
    }

    #[test]
    fn config_round_trips_through_toml_and_json(cfg in config()) {
        let json = serde_json::to_string(&cfg).unwrap();
        prop_assert_eq!(&serde_json::from_str::<DeviceConfig>(&json).unwrap(), &cfg);
        let toml_text = toml::to_string(&cfg).unwrap();
        prop_assert_eq!(&toml::from_str::<DeviceConfig>(&toml_text).unwrap(), &cfg, "{}", toml_text);
    }

    #[test]
    fn validate_and_new_agree(cfg in config()) {
        let problems = cfg.validate();
        match Classifier::new(&cfg) {
            Ok(_) => prop_assert!(problems.is_empty()),
            Err(e) => {
                prop_assert!(!problems.is_empty());
                prop_assert_eq!(e.path(), Some(problems[0].0.as_str()));
            }
        }
        if !(1..=MAX_SCAN_BYTES_LIMIT).contains(&cfg.max_scan_bytes) {
            prop_assert!(problems.iter().any(|(p, _)| p == "max_scan_bytes"));
        }
    }
}
