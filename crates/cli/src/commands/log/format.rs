//! `cachet log` output formats: `-F` strings with varnishncsa-like %-escapes, and the
//! combined-like `--ncsa` line.
//!
//! | Escape | Field |
//! |---|---|
//! | `%h` | `host` |
//! | `%m` | `method` |
//! | `%U` | `url` (path and query, as the edge normalized it) |
//! | `%s` | `status` |
//! | `%b` | `body_bytes`, `-` when absent or 0 (CLF) |
//! | `%B` | `body_bytes`, `0` when absent |
//! | `%t` | `[dd/Mon/yyyy:HH:MM:SS +0000]` (UTC): the line's `time` (when the request arrived); the time `cachet log` read the line for lines without one (edges before issue 31) |
//! | `%{X-Cache}o` | `cache` (the `X-Cache` response header the edge sent) |
//! | `%{Varnish:handling}x` | `cache` in lowercase (`hit`, `miss`, `pass`, `stale`, `synth`, `error`) |
//! | `%{Varnish:hitmiss}x` | `hit` for `HIT`/`STALE`, `miss` otherwise |
//! | `%{FIELD}j` | any access-log field by name (strings as they are, other values as JSON) |
//! | `%%`, `\t`, `\n`, `\\` | `%`, tab, newline, backslash |
//!
//! An absent, `null` or empty field prints `-`, as varnishncsa does.

use serde_json::{Map, Value};

use super::query::{FIELDS, QueryError, text_of};
use cachet_sim::logfmt::format_clf;

/// The `--ncsa` format, NCSA combined: `host - - [time] "METHOD url" status bytes "-"
/// "User-Agent"` (`cachet simulate` reads it back).
pub const NCSA: &str = "%h - - %t \"%m %U\" %s %b \"-\" \"%{User-Agent}i\"";

/// One piece of a format.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Lit(String),
    Field(String),
    /// `%b`.
    BytesClf,
    /// `%B`.
    Bytes,
    Time,
    /// `%{User-Agent}i`: escaped for a quoted field.
    UserAgent,
    Handling,
    HitMiss,
}

/// A parsed `-F` format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format(Vec<Piece>);

/// Parses a format string.
///
/// # Errors
/// [`QueryError`] with the 1-based column of an unknown escape, an unterminated `%{`, or
/// an unknown `%{FIELD}j` field.
pub fn parse(text: &str) -> Result<Format, QueryError> {
    let chars: Vec<char> = text.chars().collect();
    let mut pieces = Vec::new();
    let mut lit = String::new();
    let mut i = 0;
    let err = |column: usize, message: String| Err(QueryError { column, message });
    while i < chars.len() {
        let col = i + 1;
        match (chars[i], chars.get(i + 1).copied()) {
            ('\\', Some(e @ ('t' | 'n' | '\\'))) => {
                lit.push(match e {
                    't' => '\t',
                    'n' => '\n',
                    _ => '\\',
                });
                i += 2;
                continue;
            }
            ('%', Some('%')) => {
                lit.push('%');
                i += 2;
                continue;
            }
            ('%', Some('{')) => {
                let Some(close) = chars[i + 2..].iter().position(|&c| c == '}') else {
                    return err(col, "unterminated \"%{\"".into());
                };
                let name: String = chars[i + 2..i + 2 + close].iter().collect();
                let kind = chars.get(i + 3 + close).copied();
                let piece = match (name.as_str(), kind) {
                    (n, Some('o')) if n.eq_ignore_ascii_case("x-cache") => {
                        Piece::Field("cache".into())
                    }
                    (n, Some('i')) if n.eq_ignore_ascii_case("user-agent") => Piece::UserAgent,
                    ("Varnish:handling", Some('x')) => Piece::Handling,
                    ("Varnish:hitmiss", Some('x')) => Piece::HitMiss,
                    (n, Some('j')) if FIELDS.contains(&n) => Piece::Field(n.to_owned()),
                    (n, Some('j')) => {
                        return err(
                            col,
                            format!(
                                "unknown field {n:?} in %{{…}}j; fields: {}",
                                FIELDS.join(", ")
                            ),
                        );
                    }
                    _ => {
                        return err(
                            col,
                            "unknown %{…} escape: supported are %{X-Cache}o, %{User-Agent}i, %{Varnish:handling}x, %{Varnish:hitmiss}x and %{FIELD}j".into(),
                        );
                    }
                };
                push(&mut pieces, &mut lit, piece);
                i += close + 4;
                continue;
            }
            ('%', next) => {
                let piece = match next {
                    Some('h') => Piece::Field("host".into()),
                    Some('m') => Piece::Field("method".into()),
                    Some('U') => Piece::Field("url".into()),
                    Some('s') => Piece::Field("status".into()),
                    Some('b') => Piece::BytesClf,
                    Some('B') => Piece::Bytes,
                    Some('t') => Piece::Time,
                    Some(c) => {
                        return err(
                            col,
                            format!(
                                "unknown escape \"%{c}\": supported are %h %m %U %s %b %B %t %% and %{{…}}"
                            ),
                        );
                    }
                    None => {
                        return err(
                            col,
                            "\"%\" at the end: write \"%%\" for a percent sign".into(),
                        );
                    }
                };
                push(&mut pieces, &mut lit, piece);
                i += 2;
                continue;
            }
            (c, _) => lit.push(c),
        }
        i += 1;
    }
    if !lit.is_empty() {
        pieces.push(Piece::Lit(lit));
    }
    Ok(Format(pieces))
}

fn push(pieces: &mut Vec<Piece>, lit: &mut String, p: Piece) {
    if !lit.is_empty() {
        pieces.push(Piece::Lit(std::mem::take(lit)));
    }
    pieces.push(p);
}

/// `secs` since the epoch as `[10/Oct/2000:13:55:36 +0000]` (UTC).
pub fn clf_time(secs: i64) -> String {
    format!("[{}]", format_clf(secs))
}

/// Appends `text` for a quoted field of a combined line: `"` and `\` backslash-escaped,
/// control characters as `\xNN` (as varnishncsa and nginx write them), so the field ends
/// at the next unescaped `"`.
fn quote_escaped(o: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                o.push('\\');
                o.push(c);
            }
            c if c.is_control() => {
                use std::fmt::Write as _;
                let _ = write!(o, "\\x{:02x}", u32::from(c) & 0xff);
            }
            c => o.push(c),
        }
    }
}

impl Format {
    /// Formats one access-log object. `%t` shows its `time` field (RFC 3339), or `now`
    /// (seconds since the epoch) when it has none or one that does not read.
    pub fn render(&self, line: &Map<String, Value>, now: i64) -> String {
        let mut o = String::new();
        let get = |f: &str| {
            line.get(f)
                .filter(|v| !v.is_null() && v.as_str() != Some(""))
        };
        for p in &self.0 {
            match p {
                Piece::Lit(s) => o.push_str(s),
                Piece::Field(f) => o.push_str(&get(f).map_or("-".into(), text_of)),
                Piece::BytesClf => match get("body_bytes").and_then(Value::as_u64) {
                    Some(n) if n > 0 => o.push_str(&n.to_string()),
                    _ => o.push('-'),
                },
                Piece::Bytes => {
                    o.push_str(
                        &get("body_bytes")
                            .and_then(Value::as_u64)
                            .unwrap_or(0)
                            .to_string(),
                    );
                }
                Piece::Time => {
                    let at = get("time")
                        .and_then(Value::as_str)
                        .and_then(cachet_sim::logfmt::parse_rfc3339);
                    o.push_str(&clf_time(at.unwrap_or(now)));
                }
                Piece::UserAgent => match get("user_agent").and_then(Value::as_str) {
                    Some(ua) => quote_escaped(&mut o, ua),
                    None => o.push('-'),
                },
                Piece::Handling => match get("cache").and_then(Value::as_str) {
                    Some(c) => o.push_str(&c.to_ascii_lowercase()),
                    None => o.push('-'),
                },
                Piece::HitMiss => o.push_str(match get("cache").and_then(Value::as_str) {
                    Some("HIT" | "STALE") => "hit",
                    _ => "miss",
                }),
            }
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"method":"GET","host":"blog.example","url":"/blog/a?x=1","route":"blog","cache":"STALE","status":200,"device":"pc","body_bytes":1234,"error":null,"tier":"single"}"#;

    fn render(f: &str, json: &str) -> String {
        parse(f)
            .unwrap()
            .render(&serde_json::from_str(json).unwrap(), 971_186_136)
    }

    #[test]
    fn escapes_map_to_fields() {
        assert_eq!(
            render(NCSA, LINE),
            "blog.example - - [10/Oct/2000:13:55:36 +0000] \"GET /blog/a?x=1\" 200 1234 \"-\" \"-\""
        );
        let ua = r#"{"user_agent":"Mozilla/5.0 \"x\" a\\b\u0001"}"#;
        assert_eq!(
            render("%{User-Agent}i", ua),
            r#"Mozilla/5.0 \"x\" a\\b\x01"#
        );
        assert_eq!(
            render(
                r"%s\t%{X-Cache}o %{Varnish:handling}x %{Varnish:hitmiss}x %{device}j %{error}j %B 100%%\n",
                LINE
            ),
            "200\tSTALE stale hit pc - 1234 100%\n"
        );
        assert_eq!(
            render("%b %B %U", r#"{"url":"/x","body_bytes":0}"#),
            "- 0 /x"
        );
        assert_eq!(render("%h %{Varnish:hitmiss}x", "{}"), "- miss");
        assert_eq!(render("%h %U", r#"{"host":"","url":""}"#), "- -");
        assert_eq!(
            render("%{invalidated}j", r#"{"invalidated":["a","b"]}"#),
            r#"["a","b"]"#
        );
        assert_eq!(clf_time(0), "[01/Jan/1970:00:00:00 +0000]");
        // The line's own time, when it has one that reads; the read time otherwise.
        assert_eq!(
            render("%t", r#"{"time":"2025-03-01T09:00:00.123Z"}"#),
            "[01/Mar/2025:09:00:00 +0000]"
        );
        assert_eq!(
            render("%t", r#"{"time":"yesterday"}"#),
            "[10/Oct/2000:13:55:36 +0000]"
        );
    }

    #[test]
    fn bad_formats_name_the_column() {
        let e = |f: &str| parse(f).unwrap_err().to_string();
        assert!(
            e("%s %q").starts_with("column 4: unknown escape \"%q\""),
            "{}",
            e("%s %q")
        );
        assert_eq!(
            e("abc %"),
            "column 5: \"%\" at the end: write \"%%\" for a percent sign"
        );
        assert_eq!(e("%{X-Cache"), "column 1: unterminated \"%{\"");
        assert!(e("x %{nope}j").starts_with("column 3: unknown field \"nope\""));
        assert!(e("%{Referer}i").starts_with("column 1: unknown %{…} escape"));
    }
}
