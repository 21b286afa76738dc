//! [`CacheStatus`]: how a response was produced, as sent in `X-Cache` and logged.

/// How Cachet produced a response (the `X-Cache` header and the access log's `cache`).
///
/// Varnish/Fastly vocabulary: a hit is served from a stored object without contacting the
/// origin; a miss fetched (or revalidated) it; a pass never stores; stale is served after
/// expiry within grace / stale-while-revalidate / stale-if-error (RFC 5861); synth is made
/// by Cachet itself (robots.txt, admin API, 400/416/504 answers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum CacheStatus {
    /// Served from a stored, fresh object.
    Hit,
    /// Fetched from the origin (and stored when allowed), or revalidated with it.
    Miss,
    /// Forwarded to the origin, never stored.
    Pass,
    /// Served from a stored object past its TTL (grace, stale-while-revalidate,
    /// stale-if-error).
    Stale,
    /// Made by Cachet (robots.txt, admin answers, synthetic errors).
    Synth,
    /// An error answer (origin unreachable with nothing servable, configuration).
    #[default]
    Error,
}

impl CacheStatus {
    /// The `X-Cache` value: `HIT`, `MISS`, `PASS`, `STALE`, `SYNTH`, `ERROR`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Hit => "HIT",
            Self::Miss => "MISS",
            Self::Pass => "PASS",
            Self::Stale => "STALE",
            Self::Synth => "SYNTH",
            Self::Error => "ERROR",
        }
    }

    /// Whether the response came from a stored object without an origin round trip.
    pub const fn is_hit(self) -> bool {
        matches!(self, Self::Hit | Self::Stale)
    }
}

impl std::fmt::Display for CacheStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        let all = [
            CacheStatus::Hit,
            CacheStatus::Miss,
            CacheStatus::Pass,
            CacheStatus::Stale,
            CacheStatus::Synth,
            CacheStatus::Error,
        ];
        let labels: Vec<String> = all.iter().map(ToString::to_string).collect();
        assert_eq!(labels, ["HIT", "MISS", "PASS", "STALE", "SYNTH", "ERROR"]);
        assert!(CacheStatus::Stale.is_hit() && !CacheStatus::Miss.is_hit());
    }
}
