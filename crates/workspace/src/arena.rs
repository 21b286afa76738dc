//! The owning [`Workspace`]: capacity, high watermark, reset, verification, stats.

use std::cell::Cell;
use std::fmt;

use crate::scan::first_nonzero;
use crate::scratch::Scratch;
use crate::{
    DEFAULT_CAPACITY_BYTES, DEFAULT_VERIFY_ONE_IN, MAX_ALIGN, MAX_CAPACITY_BYTES,
    MIN_CAPACITY_BYTES, WorkspaceError,
};

/// How [`Workspace::reset`] clears memory between requests.
///
/// The roll-out path is Fastly's (Varnish, 2025): run [`ClearMode::Shadow`] with sampled
/// verification until `violations` stays at zero, then switch to [`ClearMode::Watermark`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClearMode {
    /// Zero exactly `[0, watermark)`. Sampled verification checks `[watermark, capacity)`
    /// first; on a violation the whole capacity is cleared instead (fail safe).
    Watermark,
    /// Zero the whole capacity (the old behaviour) but track the watermark and run sampled
    /// verification before clearing, to prove watermark clearing safe without relying on
    /// it. The default.
    #[default]
    Shadow,
    /// Zero the whole capacity, no verification (Varnish before the change).
    Full,
}

/// Construction parameters for a [`Workspace`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Arena size in bytes, `MIN_CAPACITY_BYTES..=MAX_CAPACITY_BYTES`
    /// (default [`DEFAULT_CAPACITY_BYTES`], one 256 KiB half of Fastly's 512 KiB).
    pub capacity_bytes: usize,
    /// Clearing strategy (default [`ClearMode::Shadow`]).
    pub mode: ClearMode,
    /// Verify one reset in this many (default [`DEFAULT_VERIFY_ONE_IN`] = 20,000);
    /// `1` verifies every reset, `0` never. Ignored in [`ClearMode::Full`].
    pub verify_one_in: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            capacity_bytes: DEFAULT_CAPACITY_BYTES,
            mode: ClearMode::default(),
            verify_one_in: DEFAULT_VERIFY_ONE_IN,
        }
    }
}

/// Counters and gauges of one workspace. Byte figures are bytes; counts are since
/// construction unless marked "current".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Arena size in bytes.
    pub capacity: usize,
    /// Current: bytes below the allocation top (padding included).
    pub bytes_used: usize,
    /// Current: high watermark, the furthest byte handed out since the last reset.
    pub watermark: usize,
    /// Highest watermark any request reached (for sizing the workspace).
    pub peak_watermark: usize,
    /// Current: the sticky overflow flag.
    pub overflowed: bool,
    /// Requests (reset cycles) that overflowed.
    pub overflows: u64,
    /// Resets performed.
    pub resets: u64,
    /// Sampled verifications performed by resets.
    pub verifications: u64,
    /// Verifications that found a non-zero byte at or above the watermark.
    pub violations: u64,
    /// Total bytes written (zeroed) by resets.
    pub bytes_cleared: u64,
}

/// What one [`Workspace::reset`] did. Sizes in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResetReport {
    /// Watermark of the request that just ended.
    pub watermark: usize,
    /// Bytes zeroed by this reset (`watermark` in watermark mode, capacity otherwise).
    pub bytes_cleared: usize,
    /// Whether the request overflowed its workspace.
    pub overflowed: bool,
    /// Whether this reset was sampled for verification (and passed).
    pub verified: bool,
}

/// A position to roll back to ([`Workspace::rollback`]); Varnish `WS_Snapshot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    pub(crate) offset: usize,
    pub(crate) generation: u64,
}

impl Snapshot {
    /// Offset of the allocation top when the snapshot was taken, in bytes.
    pub fn offset(self) -> usize {
        self.offset
    }
}

/// Bookkeeping shared (through `&`) by the workspace and its scratch handles.
#[derive(Debug, Default)]
pub(crate) struct Cursor {
    /// Allocation top of the innermost live scratch handle.
    pub(crate) top: Cell<usize>,
    /// Furthest byte ever exposed since the last reset.
    pub(crate) watermark: Cell<usize>,
    /// Sticky overflow flag.
    pub(crate) overflowed: Cell<bool>,
    /// Number of resets; snapshots from an earlier generation are stale.
    pub(crate) generation: u64,
}

impl Cursor {
    /// Records that `[start, end)` is about to be handed out: zeroes the part of `region`
    /// (which is exactly `[start, end)`) lying below the watermark — bytes this request
    /// already used and rolled back or released — and raises the watermark to `end`.
    /// Bytes at or above the watermark are zero by the reset invariant.
    pub(crate) fn expose(&self, start: usize, region: &mut [u8]) {
        let wm = self.watermark.get();
        let end = start + region.len();
        if start < wm {
            let dirty = (wm - start).min(region.len());
            if let Some(d) = region.get_mut(..dirty) {
                d.fill(0);
            }
        }
        if end > wm {
            self.watermark.set(end);
        }
    }
}

/// A fixed-capacity per-request arena cleared only up to its high watermark.
///
/// Shape: one zero-initialized heap buffer of `capacity` bytes starting on a
/// [`MAX_ALIGN`] boundary (so layouts are the same on every platform), allocated once. A request
/// allocates through a [`Scratch`] handle ([`Workspace::scratch`]); every slice it hands
/// out borrows the workspace, so [`Workspace::reset`] and [`Workspace::rollback`], which
/// take `&mut self`, cannot run while any slice is alive — the borrow checker, not a
/// runtime check, keeps one request from reading another's bytes. The crate has no
/// `unsafe`. Modelled on Varnish's `cache_ws.c`; watermark clearing and sampled
/// verification on Fastly on Varnish (2025).
pub struct Workspace {
    /// `capacity + MAX_ALIGN - 1` bytes; the arena is `[base, base + capacity)`.
    storage: Box<[u8]>,
    /// Offset in `storage` of the first `MAX_ALIGN`-aligned byte.
    base: usize,
    /// Arena size in bytes.
    cap: usize,
    cursor: Cursor,
    mode: ClearMode,
    verify_one_in: u32,
    peak_watermark: usize,
    overflows: u64,
    verifications: u64,
    violations: u64,
    bytes_cleared: u64,
}

impl fmt::Debug for Workspace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the buffer: it holds request data.
        f.debug_struct("Workspace")
            .field("mode", &self.mode)
            .field("verify_one_in", &self.verify_one_in)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Workspace {
    /// The arena, `capacity` bytes.
    fn buf(&self) -> &[u8] {
        self.storage
            .get(self.base..self.base + self.cap)
            .unwrap_or_default()
    }

    /// The arena, mutable.
    fn buf_mut(&mut self) -> &mut [u8] {
        self.storage
            .get_mut(self.base..self.base + self.cap)
            .unwrap_or_default()
    }

    /// Builds a workspace from `config`, allocating `config.capacity_bytes` zeroed bytes.
    ///
    /// # Errors
    /// [`WorkspaceError::CapacityOutOfRange`] unless
    /// `MIN_CAPACITY_BYTES <= capacity_bytes <= MAX_CAPACITY_BYTES`.
    pub fn new(config: Config) -> Result<Self, WorkspaceError> {
        let cap = config.capacity_bytes;
        if !(MIN_CAPACITY_BYTES..=MAX_CAPACITY_BYTES).contains(&cap) {
            return Err(WorkspaceError::CapacityOutOfRange {
                requested: cap,
                min: MIN_CAPACITY_BYTES,
                max: MAX_CAPACITY_BYTES,
            });
        }
        // Over-allocate so the arena starts on a MAX_ALIGN boundary: alignment padding,
        // and therefore overflow points and watermarks, depend only on offsets and are
        // identical on every platform and allocator.
        let storage = vec![0u8; cap + MAX_ALIGN - 1].into_boxed_slice();
        let base = storage.as_ptr().addr().wrapping_neg() & (MAX_ALIGN - 1);
        Ok(Self {
            storage,
            base,
            cap,
            cursor: Cursor::default(),
            mode: config.mode,
            verify_one_in: config.verify_one_in,
            peak_watermark: 0,
            overflows: 0,
            verifications: 0,
            violations: 0,
            bytes_cleared: 0,
        })
    }

    /// Builds a workspace of `capacity_bytes` with the default mode and sampling rate
    /// ([`Config::default`]). Fastly's 2 × 256 KiB split is this called twice (see
    /// [`crate::WorkspacePair`]).
    ///
    /// # Errors
    /// [`WorkspaceError::CapacityOutOfRange`] as for [`Workspace::new`].
    pub fn with_capacity(capacity_bytes: usize) -> Result<Self, WorkspaceError> {
        Self::new(Config {
            capacity_bytes,
            ..Config::default()
        })
    }

    /// Opens the allocation handle for the current request, starting at the current top
    /// (allocations made through earlier, dropped handles stay allocated until
    /// [`Workspace::reset`] or [`Workspace::rollback`]).
    pub fn scratch(&mut self) -> Scratch<'_> {
        let top = self.cursor.top.get();
        let (base, cap) = (self.base, self.cap);
        let rest: &mut [u8] = self
            .storage
            .get_mut(base + top..base + cap)
            .unwrap_or_default();
        Scratch::root(rest, top, &self.cursor)
    }

    /// Ends the request: clears memory according to the [`ClearMode`], runs the sampled
    /// verification, clears the overflow flag, and moves top and watermark back to 0.
    ///
    /// `draw` is a uniformly random `u32` from the adapter (the crate has no randomness);
    /// the reset is verified when `draw.is_multiple_of(verify_one_in)`, i.e. with probability
    /// ≈ `1 / verify_one_in`. Verification checks that `[watermark, capacity)` is all zero
    /// *before* clearing; in [`ClearMode::Watermark`] a violation makes this reset clear
    /// the whole capacity instead of `[0, watermark)`.
    ///
    /// # Errors
    /// [`WorkspaceError::WatermarkViolation`] when verification found a non-zero byte at or
    /// above the watermark. The reset has still completed (whole capacity zeroed) and the
    /// violation is counted in [`Stats::violations`]; the error exists so it is never
    /// silent.
    pub fn reset(&mut self, draw: u32) -> Result<ResetReport, WorkspaceError> {
        let cap = self.cap;
        let wm = self.cursor.watermark.get().min(cap);
        let verified = self.mode != ClearMode::Full
            && self.verify_one_in != 0
            && draw.is_multiple_of(self.verify_one_in);
        let mut violation = None;
        if verified {
            self.verifications += 1;
            if let Some(at) = self.buf().get(wm..).and_then(first_nonzero) {
                self.violations += 1;
                violation = Some(WorkspaceError::WatermarkViolation {
                    offset: wm + at,
                    watermark: wm,
                });
            }
        }
        let cleared = if self.mode == ClearMode::Watermark && violation.is_none() {
            if let Some(used) = self.buf_mut().get_mut(..wm) {
                used.fill(0);
            }
            wm
        } else {
            self.buf_mut().fill(0);
            cap
        };
        let overflowed = self.cursor.overflowed.get();
        if overflowed {
            self.overflows += 1;
        }
        self.peak_watermark = self.peak_watermark.max(wm);
        self.bytes_cleared += cleared as u64;
        self.cursor.top.set(0);
        self.cursor.watermark.set(0);
        self.cursor.overflowed.set(false);
        self.cursor.generation += 1;
        match violation {
            Some(e) => Err(e),
            None => Ok(ResetReport {
                watermark: wm,
                bytes_cleared: cleared,
                overflowed,
                verified,
            }),
        }
    }

    /// Checks now, without clearing or counting, that every byte in
    /// `[watermark, capacity)` is zero.
    ///
    /// # Errors
    /// [`WorkspaceError::WatermarkViolation`] with the first offending offset.
    pub fn verify(&self) -> Result<(), WorkspaceError> {
        let wm = self.watermark();
        match self.buf().get(wm..).and_then(first_nonzero) {
            Some(at) => Err(WorkspaceError::WatermarkViolation {
                offset: wm + at,
                watermark: wm,
            }),
            None => Ok(()),
        }
    }

    /// Records the current allocation top; Varnish `WS_Snapshot`.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            offset: self.cursor.top.get(),
            generation: self.cursor.generation,
        }
    }

    /// Frees everything allocated after `snapshot` (Varnish `WS_Reset(ws, snap)`). The
    /// watermark does not move back (the rolled-back bytes were handed out and will be
    /// cleared at reset), and the overflow flag stays set.
    ///
    /// # Errors
    /// [`WorkspaceError::InvalidSnapshot`] when the snapshot predates the last reset or
    /// lies above the current top.
    pub fn rollback(&mut self, snapshot: Snapshot) -> Result<(), WorkspaceError> {
        let top = self.cursor.top.get();
        if snapshot.generation != self.cursor.generation || snapshot.offset > top {
            return Err(WorkspaceError::InvalidSnapshot {
                offset: snapshot.offset,
                top,
            });
        }
        self.cursor.top.set(snapshot.offset);
        Ok(())
    }

    /// Sets the sticky overflow flag (Varnish `WS_MarkOverflow`), e.g. when a value did not
    /// fit and was truncated by the caller.
    pub fn mark_overflow(&mut self) {
        self.cursor.overflowed.set(true);
    }

    /// Whether the sticky overflow flag is set for the current request.
    pub fn overflowed(&self) -> bool {
        self.cursor.overflowed.get()
    }

    /// Arena size in bytes.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Bytes below the allocation top (alignment padding included).
    pub fn used(&self) -> usize {
        self.cursor.top.get()
    }

    /// Bytes still available above the allocation top (before alignment padding).
    pub fn remaining(&self) -> usize {
        self.cap.saturating_sub(self.used())
    }

    /// High watermark in bytes: the end of the furthest byte ever handed out since the
    /// last reset, including released reservations and rolled-back regions.
    pub fn watermark(&self) -> usize {
        self.cursor.watermark.get()
    }

    /// The clearing mode this workspace was built with.
    pub fn mode(&self) -> ClearMode {
        self.mode
    }

    /// Counters and gauges; cheap (a copy of a few words).
    pub fn stats(&self) -> Stats {
        Stats {
            capacity: self.cap,
            bytes_used: self.used(),
            watermark: self.watermark(),
            peak_watermark: self.peak_watermark.max(self.watermark()),
            overflowed: self.overflowed(),
            overflows: self.overflows,
            resets: self.cursor.generation,
            verifications: self.verifications,
            violations: self.violations,
            bytes_cleared: self.bytes_cleared,
        }
    }

    /// The whole raw buffer, `capacity` bytes, for verification and tests (e.g. to
    /// observe that a reset zeroed exactly `[0, watermark)`). Not reachable while a
    /// [`Scratch`] is alive, since that borrows the workspace mutably.
    pub fn as_bytes_for_verification(&self) -> &[u8] {
        self.buf()
    }

    /// Test hook: writes `byte` at `offset` without moving the top or the watermark,
    /// simulating a write that escaped watermark tracking. Returns `false` (and writes
    /// nothing) when `offset >= capacity`. Never use outside tests.
    #[doc(hidden)]
    pub fn corrupt_for_test(&mut self, offset: usize, byte: u8) -> bool {
        match self.buf_mut().get_mut(offset) {
            Some(b) => {
                *b = byte;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expose_zeroes_only_bytes_below_the_watermark_and_raises_it() {
        let c = Cursor::default();
        c.watermark.set(10);
        // Region [6, 14): bytes 6..10 are dirty (below the watermark), 10..14 are trusted.
        let mut region = [0xEEu8; 8];
        c.expose(6, &mut region);
        assert_eq!(region, [0, 0, 0, 0, 0xEE, 0xEE, 0xEE, 0xEE]);
        assert_eq!(c.watermark.get(), 14);
        // Entirely below the watermark: all zeroed, watermark unchanged.
        let mut low = [1u8; 3];
        c.expose(0, &mut low);
        assert_eq!((low, c.watermark.get()), ([0; 3], 14));
    }

    #[test]
    fn arena_starts_on_a_max_align_boundary() {
        for cap in [1usize, 100, 4096, 5000] {
            let ws = Workspace::with_capacity(cap).unwrap();
            let bytes = ws.as_bytes_for_verification();
            assert_eq!(bytes.len(), cap);
            assert_eq!(bytes.as_ptr().addr() % MAX_ALIGN, 0);
        }
    }
}
