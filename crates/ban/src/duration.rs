//! Varnish duration literals (`1.5m`, `100ms`, `-1s`): parsing and canonical display.

use std::fmt;

/// The unit of a [`BanDuration`]: Varnish's duration suffixes (`vcl(7)`, "DURATION";
/// the ban CLI reports `expected duration <n.nn>[ms|s|m|h|d|w|y]`). Case-sensitive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DurationUnit {
    /// `ms`: milliseconds, 0.001 s.
    Milliseconds,
    /// `s`: seconds.
    Seconds,
    /// `m`: minutes, 60 s.
    Minutes,
    /// `h`: hours, 3,600 s.
    Hours,
    /// `d`: days, 86,400 s.
    Days,
    /// `w`: weeks, 604,800 s.
    Weeks,
    /// `y`: years of 365 days, 31,536,000 s (Varnish's definition).
    Years,
}

impl DurationUnit {
    /// Seconds in one unit.
    pub fn seconds(self) -> f64 {
        match self {
            DurationUnit::Milliseconds => 0.001,
            DurationUnit::Seconds => 1.0,
            DurationUnit::Minutes => 60.0,
            DurationUnit::Hours => 3_600.0,
            DurationUnit::Days => 86_400.0,
            DurationUnit::Weeks => 604_800.0,
            DurationUnit::Years => 31_536_000.0,
        }
    }

    /// The suffix as written in an expression (`"ms"`, `"s"`, …).
    pub fn suffix(self) -> &'static str {
        match self {
            DurationUnit::Milliseconds => "ms",
            DurationUnit::Seconds => "s",
            DurationUnit::Minutes => "m",
            DurationUnit::Hours => "h",
            DurationUnit::Days => "d",
            DurationUnit::Weeks => "w",
            DurationUnit::Years => "y",
        }
    }

    fn from_suffix(s: &str) -> Option<Self> {
        Some(match s {
            "ms" => DurationUnit::Milliseconds,
            "s" => DurationUnit::Seconds,
            "m" => DurationUnit::Minutes,
            "h" => DurationUnit::Hours,
            "d" => DurationUnit::Days,
            "w" => DurationUnit::Weeks,
            "y" => DurationUnit::Years,
            _ => return None,
        })
    }
}

/// A duration argument of a ban condition on `obj.ttl`, `obj.age`, `obj.grace` or
/// `obj.keep`: a signed decimal number and a unit, kept as written so that
/// [`Display`](fmt::Display) round-trips.
///
/// Grammar (what Varnish 7.1 accepts, checked with `varnishadm ban` on this machine):
/// optional `-` (a `+` is refused), digits with at most one `.` and at least one digit
/// (`.5m` and `5.m` are accepted), then the unit; ASCII whitespace may surround the number
/// and the unit inside a quoted argument. A unit is mandatory (`1` is refused), exponents
/// (`1e3s`), hex and `inf` are refused. Deviation: Varnish also refuses numbers with more
/// than about 15 significant digits; this parser accepts any number whose value is
/// finite.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BanDuration {
    number: f64,
    unit: DurationUnit,
}

impl BanDuration {
    /// A duration of `number` `unit`s.
    ///
    /// # Errors
    /// `None` when `number` is NaN or infinite.
    pub fn new(number: f64, unit: DurationUnit) -> Option<Self> {
        (number.is_finite() && (number * unit.seconds()).is_finite())
            .then_some(BanDuration { number, unit })
    }

    /// Parses Varnish duration syntax (see the type's documentation); `None` when `text`
    /// is not a duration.
    pub fn parse(text: &str) -> Option<Self> {
        let t = text.trim_matches(|c: char| c.is_ascii_whitespace());
        let bytes = t.as_bytes();
        let mut i = 0;
        if bytes.first() == Some(&b'-') {
            i = 1;
        }
        let mut digits = 0usize;
        let mut dots = 0usize;
        while i < bytes.len() {
            match bytes[i] {
                b'0'..=b'9' => digits += 1,
                b'.' => dots += 1,
                _ => break,
            }
            i += 1;
        }
        if digits == 0 || dots > 1 {
            return None;
        }
        let num_text = &t[..i];
        let unit_text = t[i..].trim_start_matches(|c: char| c.is_ascii_whitespace());
        let unit = DurationUnit::from_suffix(unit_text)?;
        // Rust's float parser needs a digit on at least one side of the dot, which holds.
        let number: f64 = num_text.parse().ok()?;
        BanDuration::new(number, unit)
    }

    /// The number as written (`1.5` for `1.5m`).
    pub fn number(self) -> f64 {
        self.number
    }

    /// The unit as written.
    pub fn unit(self) -> DurationUnit {
        self.unit
    }

    /// The duration in seconds (`90.0` for `1.5m`); negative when written with `-`.
    pub fn seconds(self) -> f64 {
        self.number * self.unit.seconds()
    }
}

impl fmt::Display for BanDuration {
    /// Canonical form: the shortest decimal that parses back to the same number (never
    /// an exponent), then the unit, e.g. `1.5m`, `-1s`, `100ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.number, self.unit.suffix())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_what_varnish_accepts() {
        let ok = [
            ("1h", 3600.0),
            ("30s", 30.0),
            ("2d", 172_800.0),
            ("1.5m", 90.0),
            ("100ms", 0.1),
            ("1w", 604_800.0),
            ("1y", 31_536_000.0),
            ("-1s", -1.0),
            (".5m", 30.0),
            ("5.m", 300.0),
            ("00001s", 1.0),
            (" 1h ", 3600.0),
            ("1\th", 3600.0),
            ("-0s", 0.0),
        ];
        for (text, secs) in ok {
            let d = BanDuration::parse(text).unwrap_or_else(|| panic!("{text}"));
            assert!((d.seconds() - secs).abs() < 1e-9, "{text}");
        }
    }

    #[test]
    fn refuses_what_varnish_refuses() {
        for text in [
            "1", "+1s", "1e3s", "1H", "1h5m", "0x10s", "1.2.3s", "inf", "", "s", "-s", ".s",
            "1 hh", "nans", "1sec",
        ] {
            assert!(BanDuration::parse(text).is_none(), "{text}");
        }
    }

    #[test]
    fn display_round_trips() {
        for text in ["1.5m", "-1s", "100ms", "0.000001y", "123456789.125d"] {
            let d = BanDuration::parse(text).unwrap();
            assert_eq!(BanDuration::parse(&d.to_string()), Some(d));
        }
    }
}
