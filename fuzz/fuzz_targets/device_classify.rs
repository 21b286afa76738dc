//! `Classifier::classify` on arbitrary User-Agent bytes, for both built-in profiles,
//! checked against a plain reference evaluation of the profile's rules (every `contains`
//! found, no `unless` found, in the first `max_scan_bytes` bytes; first matching rule
//! wins, else the default).
#![no_main]

use std::sync::LazyLock;

use cachet_device::{Classifier, DeviceClass, DeviceConfig, Profile, Rule};
use libfuzzer_sys::fuzz_target;

struct Setup {
    classifier: Classifier,
    rules: Vec<Rule>,
    config: DeviceConfig,
}

static SETUPS: LazyLock<Vec<Setup>> = LazyLock::new(|| {
    [Profile::Seed, Profile::Accurate]
        .into_iter()
        .map(|profile| {
            let config = DeviceConfig {
                profile,
                ..DeviceConfig::default()
            };
            Setup {
                classifier: Classifier::new(&config).expect("built-in profile compiles"),
                rules: profile.rules(),
                config,
            }
        })
        .collect()
});

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

fn reference(s: &Setup, ua: &[u8]) -> DeviceClass {
    let hay = &ua[..ua.len().min(s.config.max_scan_bytes)];
    s.rules
        .iter()
        .find(|r| {
            r.contains.iter().all(|p| contains(hay, p))
                && !r.unless.iter().any(|p| contains(hay, p))
        })
        .map_or(s.config.default, |r| r.class)
}

fuzz_target!(|ua: &[u8]| {
    for s in SETUPS.iter() {
        let got = s.classifier.classify(ua);
        assert_eq!(
            got,
            reference(s, ua),
            "{:?} on {:?}",
            s.config.profile,
            String::from_utf8_lossy(ua)
        );
    }
});
