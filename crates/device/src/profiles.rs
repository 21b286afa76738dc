//! The built-in rule profiles (`seed`, `accurate`) as ordered rule tables.
//!
//! Both profiles are plain data in the same shape as operator-written [`Rule`]s, so they
//! run on the one engine in [`crate::Classifier`]. Rules are tried in order; the first
//! whose `contains` patterns all occur and whose `unless` patterns all do not occur wins.
//! Matching is case-sensitive on raw bytes. When no rule matches, the configured
//! `default` class applies (`pc` unless configured otherwise).

use crate::{DeviceClass, Rule};

/// One row of a built-in table: (`contains`, `unless`, class).
type Row = (
    &'static [&'static str],
    &'static [&'static str],
    DeviceClass,
);

const PC: DeviceClass = DeviceClass::Pc;
const SP: DeviceClass = DeviceClass::Smartphone;

/// The seed rule, exactly as Hatena Blog ran it in Varnish (2020):
/// `iPad` → PC, then `Mobile` → smartphone, else PC (the default).
pub(crate) const SEED: &[Row] = &[(&["iPad"], &[], PC), (&["Mobile"], &[], SP)];

/// Our own compact rule set. Each group says why it exists; see `docs/device.md` for the
/// measured effect on the fixture and public corpora.
pub(crate) const ACCURATE: &[Row] = &[
    // --- 1. Tablets are PC (the seed's first rule), including the ones that send `Mobile`.
    // iPad Safari and iPad apps (`iPad; CPU OS ...`). iPadOS 13+ "desktop mode" sends a
    // Macintosh UA that no substring can tell from a Mac; it falls through to the default
    // (PC), which is what the `iPad` rule wants anyway.
    (&["iPad"], &[], PC),
    // Generic tablet declarations: Firefox for Android tablets (`Android 4.4; Tablet;`),
    // `Opera Tablet`, BlackBerry PlayBook (`RIM Tablet OS`), Windows `Tablet PC`, and the
    // tablet words in Android model names that send `Mobile`: `Tab` (Galaxy Tab, Lenovo
    // Yoga Tab, `Okapi_Tab8`, ...; it also covers `Tablet`), `TAB` (`MAXWEST TAB`), `Pad`
    // (MediaPad, MatePad, Xiaomi/Redmi/OPPO Pad, Tech Pad) and `PAD` (MI PAD, ImPAD).
    (&["Tab"], &[], PC),
    (&["TAB"], &[], PC),
    (&["Pad"], &[], PC),
    (&["PAD"], &[], PC),
    // The Yandex app's tablet build (`YaApp_Android/23.52/apad`), whose UA otherwise
    // copies the phone's `Mobile Safari`.
    (&["/apad"], &[], PC),
    // Amazon Fire tablets: the Silk browser (some versions send `Mobile Safari`) and the
    // `KF..` model codes (KFTT, KFOT, KFMAWI, ...) that also appear in app UAs; the
    // first Kindle Fire's stock browser (`Kindle Fire Build/…`, sends `Mobile Safari`).
    // Kindle e-readers (`Kindle/3.0+`) send neither `Mobile` nor a phone token and fall
    // through to the default. Not a bare `Kindle`: its window would land on `nd`, which
    // every `Android` and `Windows` UA contains (a third of a partial hit per UA).
    (&["Silk/"], &[], PC),
    (&["; KF"], &[], PC),
    (&["Kindle Fire"], &[], PC),
    // Samsung Galaxy Tab / Note tablets. The early Galaxy Tab (GT-P1000) stock browser
    // sends `Mobile Safari`; the model prefixes are tablet-only: GT-P, SM-T, SM-P, SM-X,
    // and the Galaxy Note 8.0 / 10.1 (GT-N51xx, GT-N80xx; the GT-N7xxx are phones).
    (&["GT-P"], &[], PC),
    (&["SM-T"], &[], PC),
    (&["SM-P"], &[], PC),
    (&["SM-X"], &[], PC),
    (&["GT-N5"], &[], PC),
    (&["GT-N8"], &[], PC),
    // Other well-known tablet model names, so that their app (Dalvik) UAs, which carry no
    // browser hint, stay PC too.
    (&["Nexus 7"], &[], PC),
    (&["Nexus 9"], &[], PC),
    (&["Nexus 10"], &[], PC),
    (&["Pixel C"], &[], PC),
    // E-readers and Chromebooks, some of which copy `Mobile Safari`: PocketBook and Barnes
    // & Noble NOOK readers, Chromebooks' Android apps (`Samsung Chromebook Plus`).
    (&["PocketBook"], &[], PC),
    (&["NOOK"], &[], PC),
    (&["Chromebook"], &[], PC),
    // Tablet lines named in the model string: Prestigio MultiPad (`PMT3101_4G`) and Digma
    // Plane (`Plane 7594 3G`).
    (&["PMT"], &[], PC),
    (&["Plane"], &[], PC),
    // Lenovo Tab model codes (`Lenovo TB-X606F`, `TB-8504X`, `Lenovo TB2-X30F`).
    (&["Lenovo TB"], &[], PC),
    (&["TB-"], &[], PC),
    (&["Xoom"], &[], PC),
    // HTC Flyer (7" tablet, 2011): its stock browser sends `Mobile Safari`, and the `HTC`
    // brand rule below would otherwise call it a phone.
    (&["Flyer"], &[], PC),
    (&["FLYER"], &[], PC),
    // Android TV devices and Fire TV (`AFTMM`, `AFTS`, ...): large screens whose app UAs
    // would otherwise hit the "Android app" rule below.
    (&["Android TV"], &[], PC),
    (&["; AFT"], &[], PC),
    (&["BRAVIA"], &[], PC),
    // HbbTV (hybrid broadcast TV) browsers, some of which copy `Mobile Safari` tokens.
    (&["HbbTV"], &[], PC),
    // Consoles and TV apps whose UAs carry phone tokens: Xbox's browser (`Windows Phone
    // 8.0; ... IEMobile/10.0; Xbox; Xbox One`), the New Nintendo 3DS (`like iPhone ...
    // Mobile NintendoBrowser`), tvOS apps (`Apple TV; U; CPU iPhone OS ...`). PlayStation
    // and Chromecast UAs carry no phone token and are pc by default. Not kept, for speed
    // (≈ 1–2 ns per UA for a handful of corpus lines): MAG set-top boxes (`stbapp`) and
    // Samsung Family Hub fridges, which copy `Mobile Safari`.
    (&["Xbox"], &[], PC),
    (&["Nintendo"], &[], PC),
    (&["Apple TV"], &[], PC),
    // --- 2. Phones. `Mobile` (the seed's second rule) covers iPhone Safari, Android phone
    // browsers and WebViews, Firefox OS / KaiOS, IEMobile, Googlebot smartphone, ...
    (&["Mobile"], &[], SP),
    // iPhone / iPod touch app and API-client UAs without `Mobile` (`MyApp/1.0 (iPhone;
    // iOS 17.0; Scale/3.00)`).
    (&["iPhone"], &[], SP),
    (&["iPod"], &[], SP),
    // UC Browser's compact iOS UA (`dv(iPh13,3);pr(UCBrowser/...);ov(15_3_1);...`).
    (&["dv(iPh"], &[], SP),
    // Samsung phones and foldables whose browser sends no `Mobile` (the Galaxy Z Fold's
    // unfolded screen, desktop-mode requests): Samsung tablets (SM-T, SM-P, SM-X) were
    // caught above, so the remaining `SM-` model codes are phones. (Chrome's own UA
    // freezes the model to `K`; there `Sec-CH-UA-Mobile` decides for foldables.)
    (&["SM-"], &[], SP),
    // Android phones outside a browser: app HTTP stacks (`Dalvik/2.1.0 (Linux; U;
    // Android 13; Pixel 7 Build/...)`, `com.google.android.youtube/... (Linux; U;
    // Android 12; ...)`). In browsers, Android without `Mobile` means a tablet (Chrome's
    // convention), so browser engines are excluded; known tablets were caught above.
    (&["Android"], &["AppleWebKit", "Gecko/", "Presto"], SP),
    // Opera Mini (any platform, incl. `Opera/9.80 (J2ME/MIDP; Opera Mini/...)`) and
    // Opera Mobile (`Opera Mobi`; its tablet build says `Opera Tablet`, caught above).
    (&["Opera Mini"], &[], SP),
    (&["Opera Mobi"], &[], SP),
    // Smartphone platforms whose browsers did not always send `Mobile`.
    (&["BlackBerry"], &[], SP),
    (&["Windows Phone"], &[], SP),
    // Windows Phone 8.1+ in "desktop" mode (`...; ARM; Touch; WPDesktop; Lumia 640)`).
    (&["WPDesktop"], &[], SP),
    // Palm OS and webOS handsets (`PalmSource/Palm-TunX`, `Palm OS 5.4.9`).
    (&["Palm"], &[], SP),
    (&["Windows CE"], &[], SP),
    (&["Symbian"], &[], SP),
    // UC Browser's non-Android builds (J2ME, Symbian, Windows Phone: `UCWEB7.9...`,
    // `Nokia5320di/UCWEB8.0...`) and Qualcomm BREW handsets (`BREW 3.1.5`).
    (&["UCWEB"], &[], SP),
    (&["BREW"], &[], SP),
    // Brands whose UA token only ever named handsets: bare model strings such as
    // `Nokia2700c-2/...`, `NOKIA-3100`, `HTC_Desire_C/1.46`, `SonyEricssonK800i/...`,
    // common in app, WAP-gateway and legacy traffic. Their tablets are caught above
    // (Nokia N800/N810 say `Tablet browser`; HTC Flyer, Nexus 9).
    (&["Nokia"], &[], SP),
    (&["NOKIA"], &[], SP),
    (&["HTC"], &[], SP),
    (&["SonyEricsson"], &[], SP),
    // Feature phones: J2ME handsets (`Profile/MIDP-2.0`) and the Japanese carriers'
    // browsers: NTT docomo (`DoCoMo/2.0 ...`, FOMA `(N905imyu_W;FOMA;...)`), au by KDDI
    // (`KDDI-CA3H UP.Browser/...`, also Openwave elsewhere), SoftBank and its former
    // names Vodafone and J-PHONE, WILLCOM and its former name DDIPOCKET.
    (&["MIDP"], &[], SP),
    // WAP browsers (`WAP2.0`, `WAP Browser/MAUI`) and MediaTek MAUI/MRE feature phones
    // (`MAUI/_X2805_ARTEL_X5...`, `Q03C_MAUI_Browser`).
    (&["WAP"], &[], SP),
    (&["MAUI"], &[], SP),
    (&["DoCoMo"], &[], SP),
    (&["FOMA"], &[], SP),
    (&["KDDI-"], &[], SP),
    (&["UP.Browser"], &[], SP),
    (&["SoftBank"], &[], SP),
    (&["Vodafone"], &[], SP),
    (&["J-PHONE"], &[], SP),
    (&["WILLCOM"], &[], SP),
    (&["DDIPOCKET"], &[], SP),
    // Other Japanese handset browsers without the markers above: jig browser (a
    // full-page browser for feature phones), EMOBILE handsets (`emobile/1.0.0 (H11T; ...`),
    // and Google's transcoder for phone browsers (`Google Wireless Transcoder`; matched as
    // `Transcoder`, short enough for one 8-byte word compare plus a 2-byte tail).
    (&["jig browser"], &[], SP),
    (&["emobile/"], &[], SP),
    (&["Transcoder"], &[], SP),
    // Lower-cased User-Agents (some log pipelines and proxies fold case):
    // `... mobile safari/537.36`.
    (&["mobile safari"], &[], SP),
];

/// Turn a built-in table into owned [`Rule`]s (the same shape operators write).
pub(crate) fn to_rules(rows: &[Row]) -> Vec<Rule> {
    rows.iter()
        .map(|(contains, unless, class)| Rule {
            contains: contains.iter().map(|s| (*s).to_owned()).collect(),
            unless: unless.iter().map(|s| (*s).to_owned()).collect(),
            class: *class,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_keep_ipad_first_and_pc() {
        for rows in [SEED, ACCURATE] {
            assert_eq!(rows[0], (&["iPad"][..], &[][..], PC));
        }
    }

    #[test]
    fn seed_is_exactly_the_two_hatena_rules() {
        let rules = to_rules(SEED);
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[1].contains, vec!["Mobile".to_owned()]);
        assert_eq!(rules[1].class, SP);
    }

    #[test]
    fn every_tablet_rule_precedes_every_phone_rule() {
        let first_phone = ACCURATE.iter().position(|r| r.2 == SP).unwrap();
        assert!(ACCURATE[first_phone..].iter().all(|r| r.2 == SP));
        assert!(ACCURATE[..first_phone].iter().all(|r| r.2 == PC));
    }
}
