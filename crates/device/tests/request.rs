//! Behaviour tests: the request entry points (`classify_request`, `explain_request`,
//! `explain`) — override cookie, then `Sec-CH-UA-Mobile`, then the User-Agent rules.

use cachet_device::{Classifier, Decision, DeviceClass, DeviceConfig, Profile};
use proptest::prelude::*;

const FROZEN_PHONE: &[u8] = b"Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Mobile Safari/537.36";
const IPAD: &[u8] = b"Mozilla/5.0 (iPad; CPU OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1";
const DESKTOP: &[u8] = b"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Safari/537.36";

#[test]
fn precedence_is_cookie_then_hint_then_rules() {
    let c = Classifier::from_profile(Profile::Accurate);
    let ck: &[u8] = b"X-UA-Device-force=pc";
    assert_eq!(
        c.explain_request(FROZEN_PHONE, Some(b"?1"), Some(ck)),
        (DeviceClass::Pc, Decision::ForceCookie)
    );
    assert_eq!(
        c.explain_request(FROZEN_PHONE, Some(b"?0"), Some(b"other=1")),
        (DeviceClass::Pc, Decision::ClientHint)
    );
    let (class, why) = c.explain_request(FROZEN_PHONE, None, None);
    assert_eq!(class, DeviceClass::Smartphone);
    let Decision::Rule(i) = why else {
        panic!("{why:?}")
    };
    assert_eq!(c.rule(i).unwrap().contains, ["Mobile"]);
    assert_eq!(
        c.explain_request(DESKTOP, None, None),
        (DeviceClass::Pc, Decision::Default)
    );
    // iPad Safari sends no hints: the first rule keeps it pc.
    assert_eq!(
        c.explain_request(IPAD, None, None),
        (DeviceClass::Pc, Decision::Rule(0))
    );
    assert!(c.rule(10_000).is_none());
}

#[test]
fn options_turn_hint_and_cookie_off() {
    let seed = Classifier::from_profile(Profile::Seed);
    assert!(!seed.client_hints());
    assert_eq!(
        seed.classify_request(FROZEN_PHONE, Some(b"?0"), None),
        DeviceClass::Smartphone
    );
    let off = Classifier::new(&DeviceConfig {
        client_hints: Some(false),
        force_cookie: String::new(),
        ..DeviceConfig::default()
    })
    .unwrap();
    assert!(off.force_cookie().is_empty());
    assert_eq!(
        off.classify_request(FROZEN_PHONE, Some(b"?0"), Some(b"X-UA-Device-force=pc")),
        DeviceClass::Smartphone
    );
    let renamed = Classifier::new(&DeviceConfig {
        force_cookie: "view".into(),
        ..DeviceConfig::default()
    })
    .unwrap();
    assert_eq!(
        renamed.classify_request(FROZEN_PHONE, None, Some(b"view=desktop")),
        DeviceClass::Pc
    );
    assert_eq!(
        renamed.classify_request(FROZEN_PHONE, None, Some(b"X-UA-Device-force=pc")),
        DeviceClass::Smartphone
    );
}

proptest! {
    /// Without hint and cookie the request entry points are exactly `classify`, and
    /// `explain` names a rule of the decided class (or the default).
    #[test]
    fn request_entry_points_agree_with_classify(ua in prop::collection::vec(any::<u8>(), 0..400), seed in any::<bool>()) {
        let c = Classifier::from_profile(if seed { Profile::Seed } else { Profile::Accurate });
        let class = c.classify(&ua);
        prop_assert_eq!(c.classify_request(&ua, None, None), class);
        let (e, why) = c.explain(&ua);
        prop_assert_eq!(e, class);
        match why {
            Decision::Rule(i) => prop_assert_eq!(c.rule(i).unwrap().class, class),
            Decision::Default => prop_assert_eq!(class, c.default_class()),
            other => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn never_panics_on_any_headers(
        ua in prop::collection::vec(any::<u8>(), 0..300),
        hint in prop::option::of(prop::collection::vec(any::<u8>(), 0..40)),
        cookie in prop::option::of(prop::collection::vec(any::<u8>(), 0..400)),
    ) {
        let c = Classifier::from_profile(Profile::Accurate);
        let a = c.classify_request(&ua, hint.as_deref(), cookie.as_deref());
        prop_assert_eq!(c.explain_request(&ua, hint.as_deref(), cookie.as_deref()).0, a);
    }
}

/// Issue 27 item 4: the default fill User-Agents classify as their own class under both
/// built-in profiles, so an origin that sniffs the UA agrees with the key's class; bad
/// values are configuration errors.
#[test]
fn default_fill_user_agents_classify_as_their_class() {
    use cachet_device::FillUserAgents;
    let ua = FillUserAgents::default();
    for profile in [Profile::Seed, Profile::Accurate] {
        let c = Classifier::from_profile(profile);
        for class in [DeviceClass::Pc, DeviceClass::Smartphone] {
            assert_eq!(
                c.classify(ua.of(class).as_bytes()),
                class,
                "{profile:?} {class:?}"
            );
        }
    }
    let bad = DeviceConfig {
        fill_user_agent: FillUserAgents {
            pc: String::new(),
            smartphone: "phone\u{e9}\r\n".into(),
        },
        ..DeviceConfig::default()
    };
    let problems = bad.validate();
    assert_eq!(
        problems.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
        ["fill_user_agent.pc", "fill_user_agent.smartphone"]
    );
    assert!(Classifier::new(&bad).is_err());
}
