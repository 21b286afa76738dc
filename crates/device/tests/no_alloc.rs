//! Behaviour test: `Classifier::classify` performs no heap allocation.
#![allow(
    unsafe_code,
    reason = "a counting `GlobalAlloc` needs `unsafe impl`; it only forwards to `System`."
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use cachet_device::{Classifier, DeviceClass, Profile};

/// Forwards to `System` and counts allocations made by the current thread.
struct Counting;

thread_local! {
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the
// counter is a thread-local `Cell` with a const initializer (no allocation, no re-entry).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> usize {
    ALLOCS.with(Cell::get)
}

#[test]
fn classify_does_not_allocate() {
    let fixture = include_str!("../../../tests/fixtures/device/ua-labelled.tsv");
    let uas: Vec<&[u8]> = fixture
        .lines()
        .filter_map(|l| l.split_once('\t').map(|(_, ua)| ua.as_bytes()))
        .collect();
    let huge = vec![b'M'; 100_000];
    let seed = Classifier::from_profile(Profile::Seed);
    let acc = Classifier::from_profile(Profile::Accurate);
    // The counter works: building a Vec is seen.
    let before = allocs();
    let v: Vec<u8> = Vec::with_capacity(16);
    assert!(allocs() > before);
    drop(v);

    let before = allocs();
    let mut phones = 0usize;
    for ua in uas
        .iter()
        .copied()
        .chain([&huge[..], b"", b"\xff\xfe Mobile"])
    {
        for c in [&seed, &acc] {
            if c.classify(ua) == DeviceClass::Smartphone {
                phones += 1;
            }
            // The request entry points (hint, override cookie, explanation) too.
            for (hint, cookie) in [
                (None, None),
                (
                    Some(&b"?0"[..]),
                    Some(&b"a=b; X-UA-Device-force=mobile-iphone"[..]),
                ),
                (Some(b"?1"), Some(&huge[..])),
                (Some(&huge[..]), Some(b"X-UA-Device-force=\xff")),
            ] {
                let a = c.classify_request(ua, hint, cookie);
                let (b, _) = c.explain_request(ua, hint, cookie);
                assert_eq!(a, b);
            }
        }
    }
    assert_eq!(allocs(), before, "classify allocated");
    assert!(phones > 0);
}
