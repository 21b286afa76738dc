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

/// Creates the table if it does not exist, so later writes are true CAS writes (a
/// proxy-wasm CAS of 0 on a missing key is an unconditional write).
pub fn init(sd: &dyn SharedData) {
    crate::init(sd, LOCKS_KEY);
}
