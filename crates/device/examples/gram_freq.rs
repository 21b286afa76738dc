//! Prints the `GRAM_FREQ` table of `src/filter.rs`: how common each 2-byte gram is in
//! ordinary User-Agents, measured on labelled public corpora.
//!
//! ```sh
//! scripts/device-corpora          # fetches the corpora into /tmp/cachet-corpora
//! cargo run -p cachet-device --example gram_freq -- \
//!     /tmp/cachet-corpora/woothee-1.11.1/package/woothee/testsets/*.yaml \
//!     tests/fixtures/device/ua-labelled.tsv
//! ```
//!
//! Arguments: woothee testset files (`*.yaml`, a list of `{target, ...}`) and `class<TAB>ua`
//! files (`*.tsv`, `#` comments). The uap-core file the speed benchmark cycles through is
//! deliberately not a source: the table must describe traffic, not the benchmark. Weight of
//! a gram = round(255 × the share of the UAs that contain it at least once); grams of
//! weight below [`MIN_WEIGHT`] are left out (they cost nothing as filter keys). Exit status
//! 1 with a message when a file cannot be read or parsed.

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;

use serde_yaml_ng::Value;

/// Smallest weight printed: 10/255 ≈ 4% of UAs.
const MIN_WEIGHT: u64 = 10;

/// The UAs of one corpus file.
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

fn main() -> ExitCode {
    let mut uas = Vec::new();
    for path in std::env::args().skip(1) {
        match read(&path) {
            Ok(mut v) => uas.append(&mut v),
            Err(e) => {
                eprintln!("gram_freq: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if uas.is_empty() {
        eprintln!("gram_freq: no User-Agents read (give woothee *.yaml and *.tsv files)");
        return ExitCode::FAILURE;
    }
    let mut count: BTreeMap<[u8; 2], u64> = BTreeMap::new();
    for ua in &uas {
        let grams: BTreeSet<[u8; 2]> = ua.windows(2).map(|w| [w[0], w[1]]).collect();
        for g in grams {
            *count.entry(g).or_default() += 1;
        }
    }
    let n = uas.len() as u64;
    let mut rows: Vec<([u8; 2], u64)> = count
        .into_iter()
        .map(|(g, k)| (g, (255 * k + n / 2) / n))
        .filter(|&(_, w)| w >= MIN_WEIGHT)
        .collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    println!(
        "// {} UAs, {} grams of weight >= {MIN_WEIGHT}",
        n,
        rows.len()
    );
    for (g, w) in rows {
        println!("    (*b\"{}\", {w}),", literal(g));
    }
    ExitCode::SUCCESS
}
