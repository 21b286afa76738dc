//! Behaviour tests: watermark accounting, exact clearing, overflow, verification, leaks.

use std::io::Write as _;

use cachet_workspace::{ClearMode, Config, Workspace, WorkspaceError, WorkspacePair};

const CAP: usize = 4096;

fn ws(mode: ClearMode, verify_one_in: u32) -> Workspace {
    Workspace::new(Config {
        capacity_bytes: CAP,
        mode,
        verify_one_in,
    })
    .expect("valid capacity")
}

fn all_zero(b: &[u8]) -> bool {
    b.iter().all(|&x| x == 0)
}

#[test]
fn watermark_includes_released_reservation_tail() {
    let mut w = ws(ClearMode::Watermark, 0);
    {
        let s = w.scratch();
        let mut r = s.reserve_all().unwrap();
        assert_eq!(r.capacity(), CAP);
        r.push(&[0xAB; 100]).unwrap();
        r.unfilled_mut(50).unwrap().fill(0xCD); // exposed, never advanced
        r.truncate(10);
        let kept = r.release();
        assert_eq!(kept, &[0xAB; 10]);
    }
    assert_eq!(w.used(), 10);
    assert_eq!(w.watermark(), 150, "released tail and exposed bytes count");
    let bytes = w.as_bytes_for_verification();
    assert_eq!(bytes[149], 0xCD);
    assert!(all_zero(&bytes[150..]));
    let report = w.reset(0).unwrap();
    assert_eq!(report.bytes_cleared, 150);
    assert!(all_zero(w.as_bytes_for_verification()));
}

#[test]
fn reserving_everything_costs_only_what_is_written() {
    let mut w = ws(ClearMode::Watermark, 1);
    {
        let s = w.scratch();
        let mut r = s.reserve_all().unwrap();
        r.push_str("abc").unwrap();
        drop(r); // WS_Release(ws, 0)
        assert_eq!(s.remaining(), CAP);
    }
    assert_eq!((w.used(), w.watermark()), (0, 3));
}

#[test]
fn watermark_includes_rolled_back_frame_and_snapshot() {
    let mut w = ws(ClearMode::Watermark, 0);
    {
        let mut s = w.scratch();
        s.alloc_copy(b"kept").unwrap();
        {
            let f = s.frame();
            f.alloc(200, 1).unwrap().fill(0x11);
            assert_eq!(f.watermark(), 204);
        }
        // The frame's bytes are free again and handed out zeroed.
        let again = s.alloc(50, 1).unwrap();
        assert!(
            all_zero(again),
            "rolled-back bytes are re-zeroed on hand-out"
        );
    }
    assert_eq!((w.used(), w.watermark()), (54, 204));

    let snap = w.snapshot();
    w.scratch().alloc(1000, 1).unwrap().fill(0x22);
    assert_eq!(w.watermark(), 1054);
    w.rollback(snap).unwrap();
    assert_eq!((w.used(), w.watermark()), (54, 1054));
    let report = w.reset(0).unwrap();
    assert_eq!(report.bytes_cleared, 1054);
    assert!(all_zero(w.as_bytes_for_verification()));
}

#[test]
fn reset_zeroes_exactly_up_to_the_watermark() {
    let mut w = ws(ClearMode::Watermark, 0); // never verify: observe raw behaviour
    w.scratch().alloc(300, 1).unwrap().fill(0xEE);
    assert!(w.corrupt_for_test(300, 0x77)); // just above the watermark
    assert!(w.corrupt_for_test(CAP - 1, 0x78));
    let report = w.reset(12345).unwrap();
    assert_eq!((report.watermark, report.bytes_cleared), (300, 300));
    assert!(!report.verified);
    let b = w.as_bytes_for_verification();
    assert!(all_zero(&b[..300]));
    assert_eq!(
        (b[300], b[CAP - 1]),
        (0x77, 0x78),
        "bytes above the watermark untouched"
    );
    assert!(all_zero(&b[301..CAP - 1]));
    assert_eq!(w.stats().bytes_cleared, 300);
}

#[test]
fn full_clear_mode_zeroes_everything() {
    let mut w = ws(ClearMode::Full, 1);
    w.scratch().alloc(10, 1).unwrap().fill(1);
    w.corrupt_for_test(CAP / 2, 9);
    let report = w.reset(0).unwrap();
    assert_eq!(report.bytes_cleared, CAP);
    assert!(!report.verified, "full mode does not verify");
    assert!(all_zero(w.as_bytes_for_verification()));
}

#[test]
fn overflow_is_sticky_until_reset() {
    let mut w = ws(ClearMode::Watermark, 0);
    {
        let s = w.scratch();
        s.alloc(CAP - 10, 1).unwrap();
        assert_eq!(
            s.alloc(11, 1),
            Err(WorkspaceError::Overflow {
                requested: 11,
                available: 10
            })
        );
        assert!(s.overflowed());
        assert_eq!(s.alloc(1, 1), Err(WorkspaceError::Overflowed));
        assert_eq!(
            s.alloc_copy(b"").map(|_| ()),
            Err(WorkspaceError::Overflowed)
        );
        assert_eq!(s.reserve(1).map(|_| ()), Err(WorkspaceError::Overflowed));
        assert_eq!(
            s.alloc_fmt(format_args!("x")).map(|_| ()),
            Err(WorkspaceError::Overflowed)
        );
    }
    // Still sticky through a new handle and a rollback.
    w.rollback(cachet_workspace::Workspace::snapshot(&w))
        .unwrap();
    assert_eq!(w.scratch().alloc(1, 1), Err(WorkspaceError::Overflowed));
    let report = w.reset(0).unwrap();
    assert!(report.overflowed);
    assert_eq!(w.stats().overflows, 1);
    assert!(!w.overflowed());
    assert_eq!(w.scratch().alloc(CAP, 1).map(|b| b.len()), Ok(CAP));
}

#[test]
fn reservation_overflow_marks_the_flag() {
    let mut w = ws(ClearMode::Watermark, 0);
    let s = w.scratch();
    let mut r = s.reserve(8).unwrap();
    r.push(b"12345").unwrap();
    assert!(matches!(
        r.push(b"6789"),
        Err(WorkspaceError::Overflow {
            requested: 4,
            available: 3
        })
    ));
    assert_eq!(r.filled(), b"12345", "failed push appends nothing");
    assert_eq!(r.push(b"6"), Err(WorkspaceError::Overflowed));
    drop(r);
    assert!(s.overflowed());
    assert!(matches!(
        s.reserve(CAP + 1),
        Err(WorkspaceError::Overflowed)
    ));
}

#[test]
fn alloc_fmt_reports_overflow() {
    let mut w = ws(ClearMode::Watermark, 0);
    let s = w.scratch();
    let big = "x".repeat(CAP + 1);
    assert_eq!(
        s.alloc_fmt(format_args!("{big}")).map(|_| ()),
        Err(WorkspaceError::Overflowed)
    );
}

#[test]
fn sampled_verification_detects_a_planted_violation() {
    let mut w = ws(ClearMode::Watermark, 20_000);
    w.scratch().alloc(64, 1).unwrap().fill(3);
    w.corrupt_for_test(1000, 0x5A);
    // Not sampled: the violation goes unseen and survives (this is what sampling trades).
    let r = w.reset(1).unwrap();
    assert!(!r.verified);
    assert_eq!(w.as_bytes_for_verification()[1000], 0x5A);
    assert_eq!(
        w.verify(),
        Err(WorkspaceError::WatermarkViolation {
            offset: 1000,
            watermark: 0
        })
    );
    // Sampled (40,000 is a multiple of 20,000): reported, counted, and repaired.
    w.scratch().alloc(64, 1).unwrap();
    assert_eq!(
        w.reset(40_000),
        Err(WorkspaceError::WatermarkViolation {
            offset: 1000,
            watermark: 64
        })
    );
    let st = w.stats();
    assert_eq!((st.verifications, st.violations, st.resets), (1, 1, 2));
    assert!(
        all_zero(w.as_bytes_for_verification()),
        "violation forces a full clear"
    );
    assert_eq!(w.verify(), Ok(()));
    assert!(w.reset(0).unwrap().verified);
}

#[test]
fn shadow_mode_clears_fully_and_verifies_before_clearing() {
    let mut w = ws(ClearMode::Shadow, 1);
    w.scratch().alloc(100, 1).unwrap().fill(1);
    let r = w.reset(7).unwrap();
    assert_eq!((r.watermark, r.bytes_cleared, r.verified), (100, CAP, true));
    w.corrupt_for_test(CAP - 1, 1);
    assert!(
        matches!(w.reset(7), Err(WorkspaceError::WatermarkViolation { offset, .. }) if offset == CAP - 1)
    );
    assert!(all_zero(w.as_bytes_for_verification()));
    assert_eq!(w.stats().violations, 1);
}

#[test]
fn no_leak_between_requests_in_any_mode() {
    const BODY: &[u8] = b"<html>private blog of user 4711: diary entry</html>";
    const SECRET: &[u8] = b"Authorization: Bearer s3cr3t-t0k3n";
    for mode in [ClearMode::Watermark, ClearMode::Shadow, ClearMode::Full] {
        let mut work = ws(mode, 0);
        // Request A: private data through every path.
        {
            let mut sc = work.scratch();
            sc.alloc_copy(BODY).unwrap();
            let mut res = sc.reserve_all().unwrap();
            res.push(SECRET).unwrap();
            res.push(BODY).unwrap();
            res.truncate(3);
            res.release();
            {
                let f = sc.frame();
                f.alloc_copy(SECRET).unwrap();
                f.alloc_fmt(format_args!("{}", String::from_utf8_lossy(SECRET)))
                    .unwrap();
            }
            sc.alloc(17, 64).unwrap().copy_from_slice(&SECRET[..17]);
        }
        work.reset(0).unwrap();
        // Request B: every buffer it is handed over the same memory is all zero.
        {
            let sc = work.scratch();
            let body = sc.alloc(BODY.len(), 1).unwrap();
            assert!(all_zero(body), "{mode:?}");
            let hdr = sc.alloc(40, 64).unwrap();
            assert!(all_zero(hdr), "{mode:?}");
            let mut res = sc.reserve_all().unwrap();
            let rest = res.unfilled_mut(res.capacity()).unwrap();
            assert!(all_zero(rest), "{mode:?}");
        }
        let raw = work.as_bytes_for_verification();
        assert!(!raw.windows(SECRET.len()).any(|x| x == SECRET), "{mode:?}");
    }
}

#[test]
fn alignment_is_honoured_deterministically_and_bad_alignment_rejected() {
    let mut w = Workspace::with_capacity(2 * CAP).unwrap();
    let s = w.scratch();
    s.alloc(3, 1).unwrap();
    // The arena starts on a MAX_ALIGN boundary, so offsets are the same everywhere.
    for (align, end) in [
        (1usize, 8usize),
        (2, 13),
        (8, 21),
        (16, 37),
        (64, 69),
        (4096, 4101),
    ] {
        let a = s.alloc(5, align).unwrap();
        assert_eq!(a.as_ptr().addr() % align, 0, "align {align}");
        assert_eq!(s.snapshot().offset(), end, "align {align}");
    }
    assert_eq!(s.watermark(), 4101);
    for bad in [0usize, 3, 8192] {
        assert!(matches!(
            s.alloc(1, bad),
            Err(WorkspaceError::BadAlignment { .. })
        ));
    }
    assert!(!s.overflowed(), "bad alignment is not an overflow");
    // Padding that does not fit is an overflow like any other.
    s.alloc(2 * CAP - 4101 - 10, 1).unwrap();
    assert!(matches!(
        s.alloc(1, 4096),
        Err(WorkspaceError::Overflow { .. })
    ));
}

#[test]
fn open_reservation_blocks_allocation() {
    let mut w = ws(ClearMode::Watermark, 0);
    let s = w.scratch();
    let first = s.alloc_str("before").unwrap();
    let mut r = s.reserve(16).unwrap();
    assert_eq!(s.alloc(1, 1), Err(WorkspaceError::ReservationOutstanding));
    assert!(matches!(
        s.reserve_all(),
        Err(WorkspaceError::ReservationOutstanding)
    ));
    write!(r, "hdr={}", 42).unwrap();
    let v = r.release_str().unwrap();
    let after = s.alloc_str("after").unwrap();
    assert_eq!((&*first, &*v, &*after), ("before", "hdr=42", "after"));
    drop(s);
    assert_eq!(w.used(), 17);
}

#[test]
fn release_str_rejects_invalid_utf8_and_keeps_nothing() {
    let mut w = ws(ClearMode::Watermark, 0);
    let s = w.scratch();
    let mut r = s.reserve_all().unwrap();
    r.push(&[b'a', 0xFF]).unwrap();
    assert_eq!(
        r.release_str(),
        Err(WorkspaceError::InvalidUtf8 { valid_up_to: 1 })
    );
    assert_eq!(s.remaining(), CAP);
    assert_eq!(s.watermark(), 2);
}

#[test]
fn unfilled_then_advance_like_an_inflater() {
    let mut w = ws(ClearMode::Watermark, 0);
    let s = w.scratch();
    let mut r = s.reserve(1024).unwrap();
    let buf = r.unfilled_mut(512).unwrap();
    assert!(all_zero(buf));
    buf[..5].copy_from_slice(b"hello");
    r.advance(5).unwrap();
    assert_eq!(r.filled(), b"hello");
    assert_eq!(r.len(), 5);
    let out = r.release();
    assert_eq!(out, b"hello");
    assert_eq!(s.watermark(), 512);
}

#[test]
fn io_write_makes_short_writes_when_full() {
    let mut w = ws(ClearMode::Watermark, 0);
    let s = w.scratch();
    let mut r = s.reserve(4).unwrap();
    assert_eq!(r.write(b"abcdef").unwrap(), 4);
    assert_eq!(r.write(b"g").unwrap(), 0);
    assert!(r.write_all(b"g").is_err());
    assert_eq!(r.filled(), b"abcd");
}

#[test]
fn snapshots_from_before_a_reset_are_rejected() {
    let mut w = ws(ClearMode::Watermark, 0);
    w.scratch().alloc(10, 1).unwrap();
    let snap = w.snapshot();
    w.reset(0).unwrap();
    w.scratch().alloc(20, 1).unwrap();
    assert_eq!(
        w.rollback(snap),
        Err(WorkspaceError::InvalidSnapshot {
            offset: 10,
            top: 20
        })
    );
    let early = w.snapshot();
    let ahead = {
        let s = w.scratch();
        s.alloc(5, 1).unwrap();
        s.snapshot()
    };
    w.rollback(early).unwrap();
    assert_eq!(
        w.rollback(ahead),
        Err(WorkspaceError::InvalidSnapshot {
            offset: 25,
            top: 20
        })
    );
    assert_eq!(w.used(), 20);
}

#[test]
fn capacity_limits_are_errors() {
    assert!(matches!(
        Workspace::with_capacity(0),
        Err(WorkspaceError::CapacityOutOfRange { .. })
    ));
    assert!(matches!(
        Workspace::with_capacity(cachet_workspace::MAX_CAPACITY_BYTES + 1),
        Err(WorkspaceError::CapacityOutOfRange { .. })
    ));
    let w = Workspace::with_capacity(1).unwrap();
    assert_eq!(w.capacity(), 1);
    assert_eq!(w.mode(), ClearMode::Shadow);
}

#[test]
fn pair_halves_have_independent_watermarks() {
    let mut p = WorkspacePair::new(Config {
        capacity_bytes: 256 * 1024,
        mode: ClearMode::Watermark,
        verify_one_in: 1,
    })
    .unwrap();
    p.client.scratch().alloc(20 * 1024, 8).unwrap().fill(1);
    p.backend.scratch().alloc(100, 8).unwrap().fill(1);
    let r = p.reset(0).unwrap();
    assert_eq!(r.client.bytes_cleared, 20 * 1024);
    assert_eq!(r.backend.bytes_cleared, 100);
    p.backend.corrupt_for_test(5000, 1);
    p.client.scratch().alloc(1, 1).unwrap();
    assert!(matches!(
        p.reset(0),
        Err(WorkspaceError::WatermarkViolation { offset: 5000, .. })
    ));
    let (c, b) = p.stats();
    assert_eq!((c.resets, b.resets, b.violations), (2, 2, 1));
    assert!(!p.overflowed());
}

#[test]
fn debug_output_never_contains_buffer_bytes() {
    let mut w = ws(ClearMode::Watermark, 0);
    w.scratch().alloc_copy(b"TOPSECRET").unwrap();
    let s = format!("{w:?}");
    assert!(!s.contains("84, 79, 80"), "{s}");
    assert!(s.contains("watermark: 9"), "{s}");
}
