//! Property tests: random alloc/reserve/release/frame/snapshot/rollback/reset sequences.
#![cfg(not(target_family = "wasm"))]

use cachet_workspace::{ClearMode, Config, Snapshot, Workspace, WorkspaceError};
use proptest::prelude::*;

const CAP: usize = 2048;

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        len: usize,
        align_log2: u32,
    },
    Reserve {
        max: Option<usize>,
        push: usize,
        expose: usize,
        keep: usize,
    },
    Frame {
        len: usize,
    },
    Snapshot,
    Rollback {
        pick: usize,
    },
    MarkOverflow,
    Reset {
        draw: u32,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..700, 0u32..8).prop_map(|(len, align_log2)| Op::Alloc { len, align_log2 }),
        3 => (proptest::option::of(0usize..900), 0usize..400, 0usize..400, 0usize..500)
            .prop_map(|(max, push, expose, keep)| Op::Reserve { max, push, expose, keep }),
        2 => (0usize..600).prop_map(|len| Op::Frame { len }),
        1 => Just(Op::Snapshot),
        1 => any::<usize>().prop_map(|pick| Op::Rollback { pick }),
        1 => Just(Op::MarkOverflow),
        1 => any::<u32>().prop_map(|draw| Op::Reset { draw }),
    ]
}

fn mode() -> impl Strategy<Value = ClearMode> {
    prop_oneof![
        Just(ClearMode::Watermark),
        Just(ClearMode::Shadow),
        Just(ClearMode::Full)
    ]
}

/// Checks that every slice handed out is zero, then dirties it so leaks would show.
fn take(b: &mut [u8], tag: u8) -> Result<(), TestCaseError> {
    prop_assert!(b.iter().all(|&x| x == 0), "handed-out bytes not zero");
    b.fill(tag | 1);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold(mode in mode(), one_in in 0u32..4, ops in proptest::collection::vec(op(), 1..60)) {
        let mut w = Workspace::new(Config { capacity_bytes: CAP, mode, verify_one_in: one_in }).unwrap();
        let mut snaps: Vec<Snapshot> = Vec::new();
        // Model: furthest byte exposed since the last reset.
        let mut model_wm = 0usize;
        let mut resets = 0u64;
        for (i, op) in ops.into_iter().enumerate() {
            let tag = u8::try_from(i % 251).unwrap();
            match op {
                Op::Alloc { len, align_log2 } => {
                    let s = w.scratch();
                    let before = s.overflowed();
                    match s.alloc(len, 1 << align_log2) {
                        Ok(b) => {
                            prop_assert!(!before);
                            prop_assert_eq!(b.len(), len);
                            take(b, tag)?;
                            model_wm = model_wm.max(s.snapshot().offset());
                        }
                        Err(WorkspaceError::Overflow { .. }) => prop_assert!(s.overflowed() && !before),
                        Err(WorkspaceError::Overflowed) => prop_assert!(before),
                        Err(e) => prop_assert!(false, "unexpected {e:?}"),
                    }
                }
                Op::Reserve { max, push, expose, keep } => {
                    let s = w.scratch();
                    let r = match max { Some(m) => s.reserve(m), None => s.reserve_all() };
                    if let Ok(mut r) = r {
                        let start = s.snapshot().offset(); // reservations start at the top, unaligned
                        let data = vec![tag | 1; push];
                        if r.push(&data).is_ok() {
                            model_wm = model_wm.max(start + r.len());
                        }
                        if let Ok(b) = r.unfilled_mut(expose) {
                            take(b, tag)?;
                            model_wm = model_wm.max(start + r.len() + expose);
                        }
                        r.truncate(keep);
                        let kept = r.release();
                        prop_assert!(kept.len() <= keep.min(push));
                    }
                }
                Op::Frame { len } => {
                    let mut s = w.scratch();
                    let before = s.remaining();
                    {
                        let f = s.frame();
                        if let Ok(b) = f.alloc(len, 1) {
                            take(b, tag)?;
                            model_wm = model_wm.max(f.snapshot().offset());
                        }
                    }
                    prop_assert_eq!(s.remaining(), before, "frame rolled back");
                }
                Op::Snapshot => snaps.push(w.snapshot()),
                Op::Rollback { pick } => {
                    if !snaps.is_empty() {
                        let snap = snaps[pick % snaps.len()];
                        let ok = w.rollback(snap).is_ok();
                        // Held snapshots are all from the current request (cleared on reset).
                        prop_assert_eq!(ok, snap.offset() <= w.used());
                        if ok { prop_assert_eq!(w.used(), snap.offset()); }
                    }
                }
                Op::MarkOverflow => w.mark_overflow(),
                Op::Reset { draw } => {
                    let wm = w.watermark();
                    let cap = w.capacity();
                    let r = w.reset(draw);
                    resets += 1;
                    snaps.clear();
                    model_wm = 0;
                    let r = r.map_err(|e| TestCaseError::fail(format!("violation without corruption: {e:?}")))?;
                    prop_assert_eq!(r.watermark, wm);
                    let expect = if mode == ClearMode::Watermark { wm } else { cap };
                    prop_assert_eq!(r.bytes_cleared, expect);
                    prop_assert!(w.as_bytes_for_verification().iter().all(|&b| b == 0), "not all zero after reset");
                    prop_assert_eq!(w.watermark(), 0);
                    prop_assert!(!w.overflowed());
                }
            }
            // Invariants after every operation.
            let st = w.stats();
            prop_assert!(st.watermark >= st.bytes_used, "watermark {} < used {}", st.watermark, st.bytes_used);
            prop_assert!(st.watermark <= CAP);
            prop_assert!(st.watermark >= model_wm);
            prop_assert_eq!(w.verify(), Ok(()), "bytes beyond the watermark must be zero");
            prop_assert_eq!(st.resets, resets);
            prop_assert_eq!(st.violations, 0);
        }
    }

    #[test]
    fn reset_clears_exactly_the_watermark(len in 0usize..CAP, plant in 0usize..CAP) {
        let mut w = Workspace::new(Config { capacity_bytes: CAP, mode: ClearMode::Watermark, verify_one_in: 0 }).unwrap();
        w.scratch().alloc(len, 1).unwrap().fill(0xFF);
        w.corrupt_for_test(plant, 0x42);
        let r = w.reset(0).unwrap();
        prop_assert_eq!(r.bytes_cleared, len);
        let b = w.as_bytes_for_verification();
        for (i, &x) in b.iter().enumerate() {
            let expect = if i == plant && plant >= len { 0x42 } else { 0 };
            prop_assert_eq!(x, expect, "byte {}", i);
        }
    }

    #[test]
    fn verification_always_finds_a_planted_byte(len in 0usize..CAP, plant in 0usize..CAP, byte in 1u8..) {
        prop_assume!(plant >= len);
        let mut w = Workspace::new(Config { capacity_bytes: CAP, mode: ClearMode::Watermark, verify_one_in: 1 }).unwrap();
        w.scratch().alloc(len, 1).unwrap();
        w.corrupt_for_test(plant, byte);
        prop_assert_eq!(w.reset(9), Err(WorkspaceError::WatermarkViolation { offset: plant, watermark: len }));
        prop_assert!(w.as_bytes_for_verification().iter().all(|&b| b == 0));
    }
}
