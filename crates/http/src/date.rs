//! HTTP dates (RFC 9110 §5.6.7) as [`Timestamp`]s, through `httpdate`.

use std::time::{Duration, UNIX_EPOCH};

use cachet_refresh::Timestamp;

/// Parses an HTTP date (IMF-fixdate, and the obsolete RFC 850 and asctime forms a recipient
/// must accept, RFC 9110 §5.6.7; names matched case-insensitively, RFC 9111 §4.2:
/// `cachet_policy::response::parse_http_date`). `None` for anything else, including
/// non-UTF-8 bytes.
pub fn parse(v: &[u8]) -> Option<Timestamp> {
    let s = std::str::from_utf8(v).ok()?;
    cachet_policy::response::parse_http_date(s).map(Timestamp::from_system_time)
}

/// Formats `t` as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), whole seconds.
pub fn format(t: Timestamp) -> String {
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_millis(t.as_millis()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_obsolete_forms() {
        let t = Timestamp::from_millis(784_111_777_000);
        assert_eq!(format(t), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(parse(b"Sun, 06 Nov 1994 08:49:37 GMT"), Some(t));
        assert_eq!(parse(b"Sunday, 06-Nov-94 08:49:37 GMT"), Some(t));
        assert_eq!(parse(b"Sun Nov  6 08:49:37 1994"), Some(t));
        assert_eq!(parse(b"sun, 06 NOV 1994 08:49:37 gmt"), Some(t));
        assert_eq!(parse(b"0"), None);
        assert_eq!(parse(b"Sun, 06 Nov 1994 08:49:37 GMT\xff"), None);
    }
}
