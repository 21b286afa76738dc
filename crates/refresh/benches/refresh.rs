//! Criterion bench: per-request decision cost per policy; the collapsing queue vs a naive `Mutex<HashMap>` lock.
//!
//! * `decide/{none,threshold_0.7,xfetch_1.0}`: one [`decide`] call; each iteration takes the
//!   next of 1,024 pre-drawn (entry, now, draw) cases spread over the entry's whole life
//!   (fresh, early-refresh zone, grace, keep, gone), so branches are not perfectly predicted.
//! * `collapse/park_4_take`: [`WaitQueue`] with `String` keys (1,024 distinct cache keys,
//!   cycled): 4 requests parked behind a key's fetch, then taken when it ends (the leader
//!   itself holds the platform's obligation or lease, outside the queue).
//! * Peer `naive_mutex_hashmap/leader_4_waiters_complete`: the simplest correct collapsing
//!   lock one would write by hand (a `Mutex<HashMap<String, Vec<u64>>>`, first request
//!   inserts the key, later ones push a waiter id, completion removes the key and returns
//!   the ids), for the same 5 requests. It has no bound and no deadlines.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Mutex;
use std::time::Duration;

use cachet_refresh::{
    CollapseConfig, Draw, EarlyRefresh, EntryTimes, Timestamp, WaitQueue, decide,
};
use criterion::{Criterion, criterion_group, criterion_main};

const CASES: usize = 1_024;

/// SplitMix64 for reproducible inputs.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn cases() -> Vec<(EntryTimes, Timestamp, Draw)> {
    let mut s = 42;
    (0..CASES)
        .map(|_| {
            let stored = 1_700_000_000_000 + splitmix(&mut s) % 1_000_000;
            let e = EntryTimes::new(Timestamp::from_millis(stored), Duration::from_secs(20))
                .with_grace(Duration::from_secs(5))
                .with_keep(Duration::from_secs(30))
                .with_delta(Duration::from_secs(3));
            let now = Timestamp::from_millis(stored + splitmix(&mut s) % 60_000);
            (e, now, Draw::from_bits(splitmix(&mut s)))
        })
        .collect()
}

fn bench_decide(c: &mut Criterion) {
    let cases = cases();
    let mut g = c.benchmark_group("decide");
    for (name, policy) in [
        ("none", EarlyRefresh::None),
        ("threshold_0.7", EarlyRefresh::Threshold { fraction: 0.7 }),
        ("xfetch_1.0", EarlyRefresh::Xfetch { beta: 1.0 }),
    ] {
        let mut i = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                let (e, now, draw) = &cases[i % CASES];
                i += 1;
                decide(
                    Some(black_box(e)),
                    black_box(*now),
                    black_box(&policy),
                    *draw,
                )
            });
        });
    }
    g.finish();
}

/// The hand-written peer: a mutex around a map from key to waiter ids.
#[derive(Default)]
struct NaiveLock {
    map: Mutex<HashMap<String, Vec<u64>>>,
}

impl NaiveLock {
    /// `Some(true)` leader, `Some(false)` queued as `id`; `None` if the mutex is poisoned.
    fn acquire(&self, key: &str, id: u64) -> Option<bool> {
        let mut map = self.map.lock().ok()?;
        if let Some(waiters) = map.get_mut(key) {
            waiters.push(id);
            Some(false)
        } else {
            map.insert(key.to_owned(), Vec::new());
            Some(true)
        }
    }

    fn complete(&self, key: &str) -> Vec<u64> {
        self.map
            .lock()
            .ok()
            .and_then(|mut m| m.remove(key))
            .unwrap_or_default()
    }
}

fn bench_collapse(c: &mut Criterion) {
    let keys: Vec<String> = (0..CASES)
        .map(|i| format!("GET|example.com|/articles/{i}?page=2|smartphone"))
        .collect();
    let now = Timestamp::from_millis(1_700_000_000_000);
    let mut g = c.benchmark_group("collapse");
    let mut queue = WaitQueue::new(CollapseConfig::default());
    let mut i = 0;
    g.bench_function("park_4_take", |b| {
        b.iter(|| {
            let key = &keys[i % CASES];
            i += 1;
            for id in 1..=4u64 {
                let _ = black_box(queue.park(key.clone(), id, now));
            }
            queue.take(black_box(key)).len()
        });
    });
    g.finish();

    let mut g = c.benchmark_group("naive_mutex_hashmap");
    let naive = NaiveLock::default();
    let mut i = 0;
    g.bench_function("leader_4_waiters_complete", |b| {
        b.iter(|| {
            let key = &keys[i % CASES];
            i += 1;
            let leader = naive.acquire(black_box(key), 0);
            for id in 1..=4 {
                black_box(naive.acquire(key, id));
            }
            (leader, naive.complete(key).len())
        });
    });
    g.finish();
}

criterion_group!(benches, bench_decide, bench_collapse);
criterion_main!(benches);
