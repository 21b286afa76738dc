//! Prints the `GRAM_FREQ` table of `src/filter.rs`: how common each 2-byte gram is in
//! User-Agents, measured on public corpora.
//!
//! ```sh
//! scripts/device-corpora          # fetches the corpora into /tmp/cachet-corpora
//! C=/tmp/cachet-corpora
//! cargo run -p cachet-device --example gram_freq -- \
//!     $C/user-agents-2.1.198/package/dist/user-agents.json \
//!     $C/woothee-1.11.1/package/woothee/testsets/*.yaml \
//!     tests/fixtures/device/ua-labelled.tsv
//! ```
//!
//! Two populations, each giving every gram a share:
//!
//! * browser traffic: `user-agents.json` of the `user-agents` npm package (10,000 real
//!   browser UAs, each with its share of traffic as `weight`); the share of a gram is the
//!   total weight of the UAs that contain it;
//! * everything else a cache sees: woothee testsets (`*.yaml`, a list of `{target, ...}`:
//!   crawlers, feature phones, appliances) and `class<TAB>ua` files (`*.tsv`, `#`
//!   comments); the share of a gram is the fraction of these UAs that contain it.
//!
//! Weight of a gram = round(255 × the larger of its two shares): a gram common in either
//! population makes an expensive filter key. Grams of weight below [`MIN_WEIGHT`] are left
//! out. The uap-core file the speed benchmark cycles through is deliberately not a source.
//! Exit status 1 with a message when a file cannot be read or parsed.

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;

use serde_yaml_ng::Value;

/// Smallest weight printed: 10/255 ≈ 4% of UAs.
const MIN_WEIGHT: u64 = 10;

/// The weighted UAs of a `user-agents.json` file (`[{"userAgent", "weight"}, ...]`).
fn read_traffic(path: &str) -> Result<Vec<(Vec<u8>, f64)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    let list = doc
        .as_array()
        .ok_or_else(|| format!("{path}: not a user-agents.json list"))?;
    Ok(list
        .iter()
        .filter_map(|x| {
            let ua = x.get("userAgent")?.as_str()?;
            let weight = x.get("weight")?.as_f64()?;
            Some((ua.as_bytes().to_vec(), weight))
        })
        .collect())
}

/// The UAs of one woothee testset or TSV file.
fn read(path: &str) -> Result<Vec<Vec<u8>>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let tsv = std::path::Path::new(path)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("tsv"));
    if tsv {
        return Ok(text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once('\t'))
            .map(|(_, ua)| ua.as_bytes().to_vec())
            .collect());
    }
    let doc: Value = serde_yaml_ng::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    let seq = doc
        .as_sequence()
        .ok_or_else(|| format!("{path}: not a woothee testset (a YAML list)"))?;
    Ok(seq
        .iter()
        .filter_map(|c| c.get("target").and_then(Value::as_str))
        .filter(|ua| !ua.is_empty())
        .map(|ua| ua.as_bytes().to_vec())
        .collect())
}

/// `b"xy"` as a Rust byte-string literal.
fn literal(g: [u8; 2]) -> String {
    g.iter()
        .map(|&b| match b {
            b'"' | b'\\' => format!("\\{}", char::from(b)),
            0x20..=0x7e => char::from(b).to_string(),
            _ => format!("\\x{b:02x}"),
        })
        .collect()
}

/// Each gram's share: the weight of the UAs containing it over the total weight.
fn shares(uas: &[(Vec<u8>, f64)]) -> BTreeMap<[u8; 2], f64> {
    let total: f64 = uas.iter().map(|u| u.1).sum();
    let mut share: BTreeMap<[u8; 2], f64> = BTreeMap::new();
    for (ua, weight) in uas {
        let grams: BTreeSet<[u8; 2]> = ua.windows(2).map(|w| [w[0], w[1]]).collect();
        for g in grams {
            *share.entry(g).or_default() += weight / total;
        }
    }
    share
}

fn main() -> ExitCode {
    let (mut traffic, mut others) = (Vec::new(), Vec::new());
    for path in std::env::args().skip(1) {
        let got = if path.ends_with("user-agents.json") {
            read_traffic(&path).map(|mut v| traffic.append(&mut v))
        } else {
            read(&path).map(|v| others.extend(v.into_iter().map(|ua| (ua, 1.0))))
        };
        if let Err(e) = got {
            eprintln!("gram_freq: {e}");
            return ExitCode::FAILURE;
        }
    }
    if traffic.is_empty() || others.is_empty() {
        eprintln!("gram_freq: give a user-agents.json and woothee *.yaml / *.tsv files");
        return ExitCode::FAILURE;
    }
    let mut weight: BTreeMap<[u8; 2], u64> = BTreeMap::new();
    for share in [shares(&traffic), shares(&others)] {
        for (g, s) in share {
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "a share is in 0..=1, so the weight is in 0..=255"
            )]
            let w = (255.0 * s).round() as u64;
            let e = weight.entry(g).or_default();
            *e = (*e).max(w);
        }
    }
    let mut rows: Vec<([u8; 2], u64)> = weight
        .into_iter()
        .filter(|&(_, w)| w >= MIN_WEIGHT)
        .collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    println!(
        "// {} traffic UAs, {} others, {} grams of weight >= {MIN_WEIGHT}",
        traffic.len(),
        others.len(),
        rows.len()
    );
    for (g, w) in rows {
        println!("    (*b\"{}\", {w}),", literal(g));
    }
    ExitCode::SUCCESS
}
