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
//! * our TSV fixture (`class<TAB>ua`, `#` comments).
//!
//! Disagreements of each profile are listed (at most `--list N` per profile, default all).

use std::collections::BTreeMap;
use std::process::ExitCode;

use cachet_device::{Classifier, DeviceClass, Profile};
use serde_yaml_ng::Value;

/// One labelled case: (corpus name, label, UA).
type Case = (String, DeviceClass, String);

fn main() -> ExitCode {
    let mut list_max = usize::MAX;
    let mut files = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--list" {
            list_max = args
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(usize::MAX);
        } else {
            files.push(a);
        }
    }
    if files.is_empty() {
        eprintln!("usage: agreement [--list N] FILE.yaml|FILE.tsv ...");
        return ExitCode::from(2);
    }
    let (cases, underived) = match load(&files) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    let n = cases.len();
    let mut by_label: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &cases {
        *by_label.entry(c.1.as_str()).or_default() += 1;
    }
    println!("labelled cases: {n} {by_label:?}; not derivable (skipped): {underived}");
    for profile in [Profile::Seed, Profile::Accurate] {
        let c = Classifier::from_profile(profile);
        let wrong: Vec<&Case> = cases
            .iter()
            .filter(|(_, label, ua)| c.classify(ua.as_bytes()) != *label)
            .collect();
        let agree = n - wrong.len();
        #[allow(clippy::cast_precision_loss)] // reason: counts are far below 2^52
        let pct = if n == 0 {
            100.0
        } else {
            100.0 * agree as f64 / n as f64
        };
        println!(
            "{:<8} agree {agree}/{n} = {pct:.2}%  (disagree {})",
            format!("{profile:?}").to_lowercase(),
            wrong.len()
        );
        for (file, label, ua) in wrong.iter().take(list_max) {
            println!(
                "  label={label:<10} got={:<10} [{file}] {ua}",
                c.classify(ua.as_bytes())
            );
        }
    }
    ExitCode::SUCCESS
}

/// Reads every file: (labelled cases, number of uap-core cases with no derivable label).
fn load(files: &[String]) -> Result<(Vec<Case>, usize), String> {
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
                    Some(label) => cases.push((name.clone(), label, ua.to_owned())),
                    None => underived += 1,
                }
            }
        } else if let Some(seq) = doc.as_sequence() {
            for c in seq {
                let ua = c.get("target").and_then(Value::as_str).unwrap_or("");
                let cat = c.get("category").and_then(Value::as_str).unwrap_or("");
                let label = if matches!(cat, "smartphone" | "mobilephone") {
                    DeviceClass::Smartphone
                } else {
                    DeviceClass::Pc
                };
                cases.push((name.clone(), label, ua.to_owned()));
            }
        } else {
            return Err(format!(
                "{f}: neither a woothee testset nor a uap-core test file"
            ));
        }
    }

    Ok((cases, underived))
}

/// Reads our fixture format: `class<TAB>ua`, `#` comments and blank lines skipped.
fn read_tsv(name: &str, text: &str) -> Vec<Case> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (class, ua) = l.split_once('\t')?;
            Some((name.to_owned(), class.parse().ok()?, ua.to_owned()))
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
