//! Per-request scratch arena cleared only up to its high watermark, with sampled verification.
//!
//! Every request's temporary data — cache-key assembly, header values, inflate buffers,
//! ban-evaluation scratch — lives in a per-request [`Workspace`]. A long-lived Wasm
//! instance (an Envoy VM serves many requests; Fastly may reuse sandboxes) must never let
//! one request read another's bytes, so the workspace is zeroed between requests.
//!
//! * [`Workspace`]: fixed capacity, allocated once, in the spirit of Varnish's
//!   `cache_ws.c`. [`Workspace::reset`] zeroes exactly `[0, watermark)` in
//!   [`ClearMode::Watermark`], the whole capacity in [`ClearMode::Full`] (Varnish's old
//!   behaviour) and in [`ClearMode::Shadow`] (full clear, watermark tracked and verified:
//!   the roll-out mode).
//! * High watermark: the end of the furthest byte ever handed out since the last reset,
//!   including released reservations and rolled-back regions.
//! * Sampled verification (Fastly on Varnish, 2025: 512 KiB cleared per request → only
//!   the used part, proven safe by checking ~1 in 20,000 operations in shadow mode first):
//!   a reset sampled by the caller's random `draw` checks that every byte at or above the
//!   watermark is zero ([`first_nonzero`], vectorized) and reports a violation as an error
//!   and in [`Stats::violations`], never silently.
//! * [`Scratch`]: allocation with `&self` returning `&'w mut [u8]` tied to the workspace
//!   borrow, so nothing outlives a reset; reservations ([`Reservation`]), nested frames
//!   ([`Scratch::frame`]), snapshots and rollback, a sticky overflow flag. Every slice
//!   handed out is zero-filled.
//! * [`WorkspacePair`]: client and backend halves (Fastly's 2 × 256 KiB).
//!
//! The crate has no `unsafe` (`#![forbid(unsafe_code)]`): the bump allocator splits a
//! `Cell<&mut [u8]>` with `split_at_mut`.
//!
//! ```
//! use cachet_workspace::{ClearMode, Config, Workspace};
//!
//! let mut ws = Workspace::new(Config { capacity_bytes: 4096, mode: ClearMode::Watermark,
//!                                      verify_one_in: 1 })?;
//! {
//!     let s = ws.scratch();
//!     let key = s.alloc_fmt(format_args!("{}{}", "example.com", "/a?b=1"))?;
//!     let secret = s.alloc_copy(b"Set-Cookie: sid=42")?;
//!     assert_eq!(key, "example.com/a?b=1");
//!     assert_eq!(secret.len(), 18);
//! }
//! assert_eq!(ws.watermark(), 35);
//! let report = ws.reset(0)?; // draw 0 % 1 == 0: verified
//! assert_eq!((report.bytes_cleared, report.verified), (35, true));
//! assert!(ws.as_bytes_for_verification().iter().all(|&b| b == 0));
//! # Ok::<(), cachet_workspace::WorkspaceError>(())
//! ```
#![forbid(unsafe_code)]

mod arena;
mod error;
mod pair;
mod scan;
mod scratch;

pub use arena::{ClearMode, Config, ResetReport, Snapshot, Stats, Workspace};
pub use error::WorkspaceError;
pub use pair::{PairReport, WorkspacePair};
pub use scan::{SCAN_BLOCK_BYTES, first_nonzero};
pub use scratch::{Reservation, Scratch};

/// Default capacity of one workspace: 256 KiB, one half of Fastly's 512 KiB per request.
pub const DEFAULT_CAPACITY_BYTES: usize = 256 * 1024;

/// Smallest capacity accepted by [`Workspace::new`], in bytes.
pub const MIN_CAPACITY_BYTES: usize = 1;

/// Largest capacity accepted by [`Workspace::new`]: 64 MiB, far above any real workspace
/// (Varnish defaults to 64–96 KiB, Fastly uses 512 KiB), so a configuration typo cannot
/// allocate gigabytes.
pub const MAX_CAPACITY_BYTES: usize = 64 * 1024 * 1024;

/// Largest alignment [`Scratch::alloc`] accepts, in bytes (one 4 KiB page).
pub const MAX_ALIGN: usize = 4096;

/// Default sampling rate of verification: one reset in 20,000, Fastly's figure.
pub const DEFAULT_VERIFY_ONE_IN: u32 = 20_000;
