//! Request-collapsing locks shared by every worker: one CAS-guarded table in shared data.
//!
//! `cachet.locks` holds the slots whose object is being fetched, each with its owner and
//! lease end. Acquiring and releasing are compare-and-swap writes of that one entry, so
//! exactly one request per slot, across all workers, goes to the origin; a lock whose
//! lease ran out (its holder vanished) is taken over (pingora-cache's lock with
//! drop-to-abandon, across VMs; the requests parked behind it wait in each worker's
//! `cachet_refresh::WaitQueue`). The entry
//! stays small: only in-flight fetches are listed.

use crate::SharedData;

/// Shared-data key of the lock table.
pub const LOCKS_KEY: &str = "cachet.locks";

/// CAS retries before giving up (the caller then fetches uncollapsed).
const RETRIES: usize = 64;

/// Bytes per record: slot u32, owner u64, lease end u64.
const RECORD: usize = 20;

fn decode(b: &[u8]) -> Vec<(u32, u64, u64)> {
    b.chunks_exact(RECORD)
        .filter_map(|c| {
            Some((
                u32::from_le_bytes(c.get(0..4)?.try_into().ok()?),
                u64::from_le_bytes(c.get(4..12)?.try_into().ok()?),
                u64::from_le_bytes(c.get(12..20)?.try_into().ok()?),
            ))
        })
        .collect()
}

fn encode(v: &[(u32, u64, u64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * RECORD);
    for (s, o, l) in v {
        out.extend_from_slice(&s.to_le_bytes());
        out.extend_from_slice(&o.to_le_bytes());
        out.extend_from_slice(&l.to_le_bytes());
    }
    out
}

/// Result of [`acquire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lock {
    /// We hold it until `release` or the lease end.
    Acquired,
    /// Another request holds it.
    Held,
    /// The table kept changing; fetch without collapsing.
    Contended,
}

/// Tries to take the lock of `slot` for `owner` until `lease_end_ms`.
pub fn acquire(sd: &dyn SharedData, slot: u32, owner: u64, now_ms: u64, lease_end_ms: u64) -> Lock {
    for _ in 0..RETRIES {
        let (v, cas) = sd.get(LOCKS_KEY);
        let mut t = decode(v.as_deref().unwrap_or_default());
        t.retain(|&(_, _, l)| l > now_ms);
        if let Some(r) = t.iter_mut().find(|r| r.0 == slot) {
            if r.1 != owner {
                return Lock::Held;
            }
            r.2 = lease_end_ms;
        } else {
            t.push((slot, owner, lease_end_ms));
        }
        if sd.set(LOCKS_KEY, &encode(&t), cas) {
            return Lock::Acquired;
        }
    }
    Lock::Contended
}

/// Releases `slot` if `owner` holds it.
pub fn release(sd: &dyn SharedData, slot: u32, owner: u64) {
    for _ in 0..RETRIES {
        let (v, cas) = sd.get(LOCKS_KEY);
        let mut t = decode(v.as_deref().unwrap_or_default());
        let before = t.len();
        t.retain(|&(s, o, _)| !(s == slot && o == owner));
        if t.len() == before || sd.set(LOCKS_KEY, &encode(&t), cas) {
            return;
        }
    }
}

/// Whether anyone holds a live lock on `slot`.
pub fn is_held(sd: &dyn SharedData, slot: u32, now_ms: u64) -> bool {
    let (v, _) = sd.get(LOCKS_KEY);
    decode(v.as_deref().unwrap_or_default())
        .iter()
        .any(|&(s, _, l)| s == slot && l > now_ms)
}

/// Creates the tables if they do not exist, so later writes are true CAS writes (a
/// proxy-wasm CAS of 0 on a missing key is an unconditional write).
pub fn init(sd: &dyn SharedData) {
    crate::init(sd, LOCKS_KEY);
    crate::init(sd, FAILURES_KEY);
}

/// Shared-data key of the failure table: the slots whose last fetch failed, and when.
pub const FAILURES_KEY: &str = "cachet.failures";

/// Bytes per failure record: slot u32, time u64 (ms since the epoch).
const FAILURE_RECORD: usize = 12;

fn decode_failures(b: &[u8]) -> Vec<(u32, u64)> {
    b.chunks_exact(FAILURE_RECORD)
        .filter_map(|c| {
            Some((
                u32::from_le_bytes(c.get(0..4)?.try_into().ok()?),
                u64::from_le_bytes(c.get(4..12)?.try_into().ok()?),
            ))
        })
        .collect()
}

/// Records that the fetch of `slot` failed at `now_ms` (before its lock is released), so
/// the requests parked behind it on every worker are answered as its own request was —
/// the stored copy within `stale-if-error`, else `503` — instead of each asking the
/// origin in turn (issue 28 items 5 and 8). Records older than `memory_ms` (at least
/// `[collapse].max_wait_ms`: no waiter is parked longer) are dropped on each write, so
/// the table holds only recent failures. Best effort: after 64 conflicting
/// writes the waiters fall back to passing.
pub fn record_failure(sd: &dyn SharedData, slot: u32, now_ms: u64, memory_ms: u64) {
    for _ in 0..RETRIES {
        let (v, cas) = sd.get(FAILURES_KEY);
        let mut t = decode_failures(v.as_deref().unwrap_or_default());
        t.retain(|&(s, at)| s != slot && at.saturating_add(memory_ms) > now_ms);
        t.push((slot, now_ms));
        let mut out = Vec::with_capacity(t.len() * FAILURE_RECORD);
        for (s, at) in &t {
            out.extend_from_slice(&s.to_le_bytes());
            out.extend_from_slice(&at.to_le_bytes());
        }
        if sd.set(FAILURES_KEY, &out, cas) {
            return;
        }
    }
}

/// When the origin last failed a fetch of `slot`, if within the failure's memory (ms;
/// `None`: no failure recorded). A request that parked before it is answered as the
/// failed fetch was (`cachet_http::exchange`, strictly after its start).
pub fn failed_at(sd: &dyn SharedData, slot: u32) -> Option<u64> {
    let (v, _) = sd.get(FAILURES_KEY);
    decode_failures(v.as_deref().unwrap_or_default())
        .iter()
        .filter(|&&(s, _)| s == slot)
        .map(|&(_, at)| at)
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    #[test]
    fn a_failure_is_seen_by_waiters_parked_before_it_and_forgotten_after_its_memory() {
        let sd = MemoryStore::default();
        init(&sd);
        assert_eq!(failed_at(&sd, 7), None);
        record_failure(&sd, 7, 1_000, 10_000);
        assert_eq!(failed_at(&sd, 7), Some(1_000));
        assert_eq!(failed_at(&sd, 8), None, "another slot");
        // A later failure of the slot replaces the record; an old one of another slot is
        // dropped once past its memory.
        record_failure(&sd, 8, 2_000, 10_000);
        record_failure(&sd, 7, 12_500, 10_000);
        let (v, _) = sd.get(FAILURES_KEY);
        let t = decode_failures(v.as_deref().unwrap_or_default());
        assert_eq!(t, vec![(7, 12_500)]);
    }
}
