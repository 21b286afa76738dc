//! The edge's JSON access-log lines (`cachet_http::access::Access`) as they reach a log
//! file: one JSON object per line, optionally prefixed by the log endpoint's name as
//! Viceroy prints it (`cachet_log :: {…}`). `cachet simulate`, `cachet stat` and
//! `cachet log` find the JSON text of a line with one rule, [`split`] / [`split_bytes`].

/// The separator Viceroy prints between a log endpoint's name and its line.
const ENDPOINT_SEPARATOR: &str = " :: ";

/// The JSON text of an access-log line: the line itself when it starts with `{` (after
/// whitespace), or what follows the first `<endpoint> :: ` when that starts with `{`;
/// `None` otherwise. Trailing whitespace (`\r`) is removed.
pub fn split(line: &str) -> Option<&str> {
    let json = split_bytes(line.as_bytes())?;
    // `split_bytes` cuts only at ASCII bytes, so the cut is a char boundary.
    let start = json.as_ptr() as usize - line.as_ptr() as usize;
    line.get(start..start + json.len())
}

/// [`split`] on bytes (`cachet simulate` reads lines that need not be UTF-8): the same rule.
pub fn split_bytes(line: &[u8]) -> Option<&[u8]> {
    let t = line.trim_ascii();
    if t.starts_with(b"{") {
        return Some(t);
    }
    let sep = ENDPOINT_SEPARATOR.as_bytes();
    let at = t.windows(sep.len()).position(|w| w == sep)?;
    let rest = t[at + sep.len()..].trim_ascii_start();
    rest.starts_with(b"{").then_some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_accepts_bare_and_viceroy_prefixed_lines_only() {
        assert_eq!(split("{\"a\":1}\r"), Some("{\"a\":1}"));
        assert_eq!(split("cachet_log :: {\"a\":1}"), Some("{\"a\":1}"));
        assert_eq!(split("  other_ep ::   {}"), Some("{}"));
        assert_eq!(
            split("2026-01-01T00:00:00 INFO Listening on http://127.0.0.1:7676"),
            None
        );
        assert_eq!(split("cachet_log :: not json"), None);
        assert_eq!(split(""), None);
        assert_eq!(split("é :: {\"é\":1} "), Some("{\"é\":1}"));
        assert_eq!(split_bytes(b"ep :: {\xff}"), Some(&b"{\xff}"[..]));
        assert_eq!(split_bytes(b"\xff"), None);
    }
}
