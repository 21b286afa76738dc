//! The hit ratio: one definition for `cachet stat` and `cachet simulate` (issue 31; they
//! disagreed, 82.3% vs 80.8% on the same traffic, because `simulate` counted synthetic
//! answers in the denominator).
//!
//! **hit ratio = (HIT + STALE) / (HIT + STALE + MISS + PASS)**: the requests answered from
//! the cache (fresh, or stale within grace while one refresh runs) over the requests that
//! went through the cache's decision, a lookup or a pass. Left out are the answers the
//! edge makes itself without looking anything up (`SYNTH`: `robots.txt`, refused
//! requests, admin calls) and the edge's own failures (`ERROR`: a configuration it cannot
//! serve, a refused admin call): neither could ever be a hit, and counting them would move
//! the ratio with admin traffic. Passes count, as in Fastly's statistics: a route that
//! passes is traffic the cache did not absorb. (Varnish's `cache_hit / (cache_hit +
//! cache_miss)` leaves passes out; docs/cli.md "cachet stat" says so.)

/// `from_cache / (from_cache + fetched)`, with `from_cache` = HIT + STALE answers and
/// `fetched` = MISS + PASS answers (see the module); `None` when both are 0 (no request
/// went through the cache: no ratio, rather than 0%).
#[allow(clippy::cast_precision_loss, reason = "ratios of request counts")]
pub fn hit_ratio(from_cache: u64, fetched: u64) -> Option<f64> {
    let total = from_cache.saturating_add(fetched);
    (total > 0).then(|| from_cache as f64 / total as f64)
}

/// [`hit_ratio`] from the counts a replay keeps: `requests` in all, `from_cache` of them
/// HIT or STALE, `synth` answered at the edge; the rest were fetched (MISS or PASS).
/// `None` when every request was synthetic (or there was none).
pub fn of_requests(requests: u64, from_cache: u64, synth: u64) -> Option<f64> {
    hit_ratio(
        from_cache,
        requests.saturating_sub(from_cache).saturating_sub(synth),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_answers_and_errors_are_not_in_the_denominator() {
        assert_eq!(hit_ratio(3, 1), Some(0.75));
        assert_eq!(hit_ratio(0, 0), None);
        assert_eq!(hit_ratio(0, 4), Some(0.0));
        // 10 requests: 6 from cache, 2 synthetic: 6 / 8, not 6 / 10.
        assert_eq!(of_requests(10, 6, 2), Some(0.75));
        assert_eq!(of_requests(2, 0, 2), None);
        assert_eq!(of_requests(0, 0, 0), None);
        assert_eq!(of_requests(u64::MAX, u64::MAX, 0), Some(1.0));
    }
}
