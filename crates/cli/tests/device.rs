//! Behaviour of `cachet device classify`: plain UAs, `--hints` lines and `--explain`.

mod common;

use common::cachet;

const IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1";
/// Chrome on Android with the frozen model (`K`): the UA alone says phone.
const FROZEN: &str = "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Mobile Safari/537.36";
const DESKTOP: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Safari/537.36";

fn lines(out: &[u8]) -> Vec<String> {
    String::from_utf8(out.to_vec())
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn plain_lines_classify_by_user_agent() {
    let input = format!("{IPHONE}\n{DESKTOP}\n\n");
    let (code, out, err) = cachet(&["device", "classify"], input.as_bytes());
    assert_eq!(code, 0, "{err}");
    assert_eq!(lines(&out), ["smartphone", "pc", "pc"]);
}

#[test]
fn hints_column_decides_before_the_rules() {
    // UA<TAB>hint[<TAB>cookie]; an empty hint column is an absent header.
    let input = format!(
        "{FROZEN}\t?0\n{FROZEN}\t\n{DESKTOP}\t?1\n{DESKTOP}\t?1\tX-UA-Device-force=pc\n{FROZEN}\tgarbage\n{IPHONE}\n"
    );
    let (code, out, err) = cachet(&["device", "classify", "--hints"], input.as_bytes());
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        lines(&out),
        [
            "pc",
            "smartphone",
            "smartphone",
            "pc",
            "smartphone",
            "smartphone"
        ]
    );
    // The seed profile ignores the hint (Hatena's rule exactly), unless configured.
    let (_, out, _) = cachet(
        &["device", "classify", "--hints", "--profile", "seed"],
        input.as_bytes(),
    );
    assert_eq!(
        lines(&out),
        [
            "smartphone",
            "smartphone",
            "pc",
            "pc",
            "smartphone",
            "smartphone"
        ]
    );
}

#[test]
fn explain_names_the_deciding_input() {
    let input = format!(
        "{FROZEN}\t?0\n{DESKTOP}\t?0\tX-UA-Device-force=mobile-android\n{IPHONE}\t\n{DESKTOP}\n"
    );
    let (code, out, err) = cachet(
        &["device", "classify", "--hints", "--explain"],
        input.as_bytes(),
    );
    assert_eq!(code, 0, "{err}");
    let got = lines(&out);
    assert_eq!(got[0], "pc\thint Sec-CH-UA-Mobile");
    assert_eq!(got[1], "smartphone\tcookie X-UA-Device-force");
    assert!(
        got[2].starts_with("smartphone\trule ") && got[2].ends_with("-> smartphone"),
        "{}",
        got[2]
    );
    assert_eq!(got[3], "pc\tdefault");
}

#[test]
fn explain_without_hints_reads_whole_lines_as_uas() {
    // Without --hints a TAB is part of the UA, so the "hint" is never read.
    let input = format!("{DESKTOP}\t?1\n");
    let (_, out, _) = cachet(&["device", "classify", "--explain"], input.as_bytes());
    assert_eq!(lines(&out), ["pc\tdefault"]);
}
