//! Prints how often the `seed` and `accurate` profiles agree with labelled UA corpora.
//!
//! Usage: `cargo run -p cachet-device --example agreement -- [--list N] FILE...`
//!
//! Each FILE is one of:
//! * a woothee testset (`woothee/testsets/*.yaml`: a list of `{target, category, ...}`);
//!   label = `smartphone` for category `smartphone` / `mobilephone`, else `pc`;
//! * a uap-core `test_device.yaml` (`test_cases: [{user_agent_string, family, brand,
//!   model}]`); a label is derived only where brand/model/family make it unambiguous (see
//!   [`uap_label`]), the rest is counted as "not derivable";
//! * a Matomo device-detector fixture file (`*.yml`: a list of `{user_agent, headers?,
//!   device: {type}}`, as shipped in the PyPI `device_detector` package): label =
//!   `smartphone` for types `smartphone`, `phablet`, `feature phone`; `pc` for `desktop`,
//!   `tablet`; with `--matomo-all`, also `pc` for `tv`, `console`, `smart display`,
//!   `car browser`, `peripheral`, `smart speaker`, `camera`; other types (`wearable`,
//!   `portable media player`, none) are not derivable. A `Sec-CH-UA-Mobile` in `headers`
//!   is passed to the classifier;
//! * an npm `user-agents` data file (`user-agents.json`: `[{userAgent, deviceCategory}]`):
//!   label = `smartphone` for `mobile`, `pc` for `desktop` and `tablet`;
//! * our TSV fixture (`class<TAB>ua`, `#` comments).
//!
//! Each kind of file is a corpus: agreement is printed per corpus and profile, counting
//! each distinct (UA, hint) once (the first label wins). Disagreements of each profile
//! are listed (at most `--list N` per corpus and profile, default all).

use std::collections::BTreeMap;
use std::process::ExitCode;

use cachet_device::{Classifier, DeviceClass, Profile};
use serde_yaml_ng::Value;

/// One labelled case: (corpus name, label, UA, `Sec-CH-UA-Mobile` if the corpus has it).
type Case = (String, DeviceClass, String, Option<String>);

fn main() -> ExitCode {
    let mut list_max = usize::MAX;
    let mut files = Vec::new();
    let mut matomo_all = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--matomo-all" {
            matomo_all = true;
        } else if a == "--list" {
            list_max = args
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(usize::MAX);
        } else {
            files.push(a);
        }
    }
    if files.is_empty() {
        eprintln!(
            "usage: agreement [--list N] [--matomo-all] FILE.yaml|FILE.yml|FILE.json|FILE.tsv ..."
        );
        return ExitCode::from(2);
    }
    let (cases, underived) = match load(&files, matomo_all) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    println!("not derivable (skipped): {underived}");
    let mut corpora: BTreeMap<&str, Vec<&Case>> = BTreeMap::new();
    let mut seen = std::collections::HashSet::new();
    for c in &cases {
        if seen.insert((&c.0, &c.2, &c.3)) {
            corpora.entry(c.0.as_str()).or_default().push(c);
        }
    }
    for (corpus, cases) in &corpora {
        report(corpus, cases, list_max);
    }
    ExitCode::SUCCESS
}

/// Prints one corpus's agreement for both profiles, with and without the hints it has.
fn report(corpus: &str, cases: &[&Case], list_max: usize) {
    let n = cases.len();
    let mut by_label: BTreeMap<&str, usize> = BTreeMap::new();
    for c in cases {
        *by_label.entry(c.1.as_str()).or_default() += 1;
    }
    let hinted = cases.iter().filter(|c| c.3.is_some()).count();
    println!(
        "== {corpus}: {n} distinct labelled cases {by_label:?}, {hinted} with Sec-CH-UA-Mobile"
    );
    for profile in [Profile::Seed, Profile::Accurate] {
        let c = Classifier::from_profile(profile);
        let class = |case: &Case| {
            c.classify_request(
                case.2.as_bytes(),
                case.3.as_deref().map(str::as_bytes),
                None,
            )
        };
        let wrong: Vec<&&Case> = cases.iter().filter(|case| class(case) != case.1).collect();
        let ua_only = cases
            .iter()
            .filter(|case| c.classify(case.2.as_bytes()) != case.1)
            .count();
        let name = format!("{profile:?}").to_lowercase();
        let hints = if c.client_hints() { "on" } else { "off" };
        println!(
            "{name:<8} agree {}/{n} = {:.2}%  (disagree {}; client hints {hints}; UA alone {:.2}%)",
            n - wrong.len(),
            pct(n - wrong.len(), n),
            wrong.len(),
            pct(n - ua_only, n),
        );
        for case in wrong.iter().take(list_max) {
            println!(
                "  label={:<10} got={:<10} hint={:<4} {}",
                case.1,
                class(case),
                case.3.as_deref().unwrap_or("-"),
                case.2
            );
        }
    }
}

/// `part / whole` in percent (100% for an empty corpus).
fn pct(part: usize, whole: usize) -> f64 {
    #[allow(clippy::cast_precision_loss, reason = "counts are far below 2^52")]
    if whole == 0 {
        100.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// Reads every file: (labelled cases, number of cases with no derivable label).
fn load(files: &[String], matomo_all: bool) -> Result<(Vec<Case>, usize), String> {
    let mut cases: Vec<Case> = Vec::new();
    let mut underived = 0usize;
    for f in files {
        let text = match std::fs::read_to_string(f) {
            Ok(t) => t,
            Err(e) => {
                return Err(format!("{f}: {e}"));
            }
        };
        let name = std::path::Path::new(f)
            .file_name()
            .map_or_else(|| f.clone(), |n| n.to_string_lossy().into_owned());
        let is_tsv = std::path::Path::new(f)
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("tsv"));
        if is_tsv {
            cases.extend(read_tsv(&name, &text));
            continue;
        }
        let is_json = std::path::Path::new(f)
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        if is_json {
            underived += read_user_agents_json(f, &text, &mut cases)?;
            continue;
        }
        let doc: Value = match serde_yaml_ng::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                return Err(format!("{f}: {e}"));
            }
        };
        if let Some(tc) = doc.get("test_cases").and_then(Value::as_sequence) {
            for c in tc {
                let ua = c
                    .get("user_agent_string")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let field = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("");
                match uap_label(field("family"), field("brand"), field("model")) {
                    Some(label) => cases.push(case("uap-core test_device.yaml", label, ua, None)),
                    None => underived += 1,
                }
            }
        } else if let Some(seq) = doc
            .as_sequence()
            .filter(|s| s.first().is_some_and(|c| c.get("user_agent").is_some()))
        {
            underived += read_matomo(seq, matomo_all, &mut cases);
        } else if let Some(seq) = doc.as_sequence() {
            for c in seq {
                let ua = c.get("target").and_then(Value::as_str).unwrap_or("");
                let cat = c.get("category").and_then(Value::as_str).unwrap_or("");
                let label = if matches!(cat, "smartphone" | "mobilephone") {
                    DeviceClass::Smartphone
                } else {
                    DeviceClass::Pc
                };
                cases.push(case("woothee testsets", label, ua, None));
            }
        } else {
            return Err(format!(
                "{f}: neither a woothee testset nor a uap-core test file"
            ));
        }
    }

    Ok((cases, underived))
}

/// Adds the cases of an npm `user-agents` data file; returns how many had no label.
fn read_user_agents_json(f: &str, text: &str, cases: &mut Vec<Case>) -> Result<usize, String> {
    let doc: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("{f}: {e}"))?;
    let mut underived = 0;
    for c in doc.as_array().map(Vec::as_slice).unwrap_or_default() {
        let ua = c.get("userAgent").and_then(serde_json::Value::as_str);
        let cat = c.get("deviceCategory").and_then(serde_json::Value::as_str);
        let label = match cat {
            Some("mobile") => Some(DeviceClass::Smartphone),
            Some("desktop" | "tablet") => Some(DeviceClass::Pc),
            _ => None,
        };
        match (ua, label) {
            (Some(ua), Some(label)) => cases.push(case("user-agents (npm)", label, ua, None)),
            _ => underived += 1,
        }
    }
    Ok(underived)
}

/// Adds the cases of a Matomo fixture file; returns how many had no derivable label.
fn read_matomo(seq: &[Value], matomo_all: bool, cases: &mut Vec<Case>) -> usize {
    let mut underived = 0;
    for c in seq {
        let ua = c.get("user_agent").and_then(Value::as_str).unwrap_or("");
        let ty = c
            .get("device")
            .and_then(|d| d.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let hint = c
            .get("headers")
            .and_then(|h| h.get("Sec-CH-UA-Mobile"))
            .and_then(Value::as_str);
        let label = match ty {
            "smartphone" | "phablet" | "feature phone" => Some(DeviceClass::Smartphone),
            "desktop" | "tablet" => Some(DeviceClass::Pc),
            "tv" | "console" | "smart display" | "car browser" | "peripheral" | "smart speaker"
            | "camera"
                if matomo_all =>
            {
                Some(DeviceClass::Pc)
            }
            _ => None,
        };
        match label {
            Some(label) => cases.push(case("matomo (PyPI device_detector)", label, ua, hint)),
            None => underived += 1,
        }
    }
    underived
}

/// A case of corpus `corpus`.
fn case(corpus: &str, label: DeviceClass, ua: &str, hint: Option<&str>) -> Case {
    (
        corpus.to_owned(),
        label,
        ua.to_owned(),
        hint.map(str::to_owned),
    )
}

/// Reads our fixture format: `class<TAB>ua[<TAB>Sec-CH-UA-Mobile]`, `#` comments and
/// blank lines skipped.
fn read_tsv(name: &str, text: &str) -> Vec<Case> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let mut cols = l.split('\t');
            let class = cols.next()?.parse().ok()?;
            let ua = cols.next()?;
            let hint = cols.next().filter(|h| !h.is_empty());
            Some(case(name, class, ua, hint))
        })
        .collect()
}

/// A phone/tablet/other label from uap-core's device fields, where it is derivable
/// without looking at the UA itself:
/// * Apple: model `iPhone*` / `iPod*` → smartphone, `iPad*` → pc;
/// * family `Spider` (crawlers): model `Smartphone` / `Feature Phone` → smartphone, any
///   other model → pc;
/// * `Generic Smartphone` / `Generic Feature Phone` → smartphone, `Generic Tablet` → pc;
/// * Amazon `Kindle*`, families `XiaoMi MI PAD`, TV families (`HbbTV`, `NetCast.*`,
///   `Inettv`, brand `Generic_Inettv`) → pc;
/// * brands that (in this corpus) make phones — DoCoMo, SonyEricsson, Nokia, HTC,
///   BlackBerry → smartphone, except their tablets (model containing `Flyer`, `Tab`, `pad`,
///   `PlayBook`, Nokia `N800`/`N810` internet tablets) → pc and HTC `Streaming Player`
///   (not derivable).
///
/// Everything else (Samsung, LG, Motorola, ... whose model codes mix phones and tablets)
/// is not derivable and skipped.
fn uap_label(family: &str, brand: &str, model: &str) -> Option<DeviceClass> {
    use DeviceClass::{Pc, Smartphone};
    let m = model.to_ascii_lowercase();
    match (family, brand) {
        ("Spider", _) => Some(if matches!(model, "Smartphone" | "Feature Phone") {
            Smartphone
        } else {
            Pc
        }),
        ("Generic Smartphone" | "Generic Feature Phone", _) => Some(Smartphone),
        ("Generic Tablet" | "HbbTV" | "NetCast.TV" | "NetCast.Media" | "Inettv", _)
        | (_, "Generic_Inettv") => Some(Pc),
        (f, _) if f.starts_with("XiaoMi MI PAD") => Some(Pc),
        (_, "Apple") if m.starts_with("iphone") || m.starts_with("ipod") => Some(Smartphone),
        (_, "Apple") if m.starts_with("ipad") => Some(Pc),
        (_, "Amazon") if m.starts_with("kindle") => Some(Pc),
        (_, "DoCoMo" | "SonyEricsson" | "Nokia" | "HTC" | "BlackBerry") => {
            if m.contains("streaming player") {
                None
            } else if ["flyer", "tab", "pad", "playbook", "n800", "n810"]
                .iter()
                .any(|t| m.contains(t))
            {
                Some(Pc)
            } else {
                Some(Smartphone)
            }
        }
        _ => None,
    }
}
