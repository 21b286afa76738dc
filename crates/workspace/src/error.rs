//! The crate's one error enum, [`WorkspaceError`].

use thiserror::Error;

/// Everything that can go wrong in a workspace. Sizes and offsets are in bytes.
///
/// No variant carries workspace contents: a violation reports where the stray byte is,
/// never its value, so an error log cannot itself leak a request's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// The requested capacity is outside `[MIN_CAPACITY_BYTES, MAX_CAPACITY_BYTES]`.
    #[error("workspace capacity {requested} bytes is outside {min}..={max}")]
    CapacityOutOfRange {
        /// Capacity asked for, in bytes.
        requested: usize,
        /// Smallest allowed capacity ([`crate::MIN_CAPACITY_BYTES`]).
        min: usize,
        /// Largest allowed capacity ([`crate::MAX_CAPACITY_BYTES`]).
        max: usize,
    },
    /// This request for space did not fit; the sticky overflow flag is now set
    /// (Varnish `WS_MarkOverflow`).
    #[error("workspace overflow: {requested} bytes requested, {available} available")]
    Overflow {
        /// Bytes asked for (plus alignment padding where relevant).
        requested: usize,
        /// Bytes that were left.
        available: usize,
    },
    /// An earlier request overflowed; every allocation fails until the next reset.
    #[error("workspace overflowed earlier in this request; allocations fail until reset")]
    Overflowed,
    /// Alignment is not a power of two or exceeds [`crate::MAX_ALIGN`].
    #[error("alignment {align} is not a power of two in 1..={max}")]
    BadAlignment {
        /// Alignment asked for, in bytes.
        align: usize,
        /// Largest supported alignment ([`crate::MAX_ALIGN`]).
        max: usize,
    },
    /// A reservation is open on this scratch handle; release it before allocating
    /// (Varnish asserts on this; here it is an error).
    #[error("a reservation is outstanding; release it before allocating")]
    ReservationOutstanding,
    /// The snapshot belongs to an earlier request (before a reset) or lies above the
    /// current top, so rolling back to it would be meaningless.
    #[error("snapshot at offset {offset} is stale or above the current top {top}")]
    InvalidSnapshot {
        /// Offset recorded in the snapshot.
        offset: usize,
        /// Current top of the workspace.
        top: usize,
    },
    /// A value built in a reservation was not valid UTF-8; nothing was kept.
    #[error("reserved bytes are not UTF-8 (valid up to byte {valid_up_to})")]
    InvalidUtf8 {
        /// Length of the valid UTF-8 prefix.
        valid_up_to: usize,
    },
    /// A `Display` implementation failed while formatting into the workspace.
    #[error("formatting into the workspace failed")]
    Format,
    /// Verification found a non-zero byte at or above the high watermark: watermark
    /// clearing would have let the next request see it. The workspace has already been
    /// fully cleared when this is returned, so it is safe to keep using.
    #[error("non-zero byte at offset {offset}, at or above the watermark {watermark}")]
    WatermarkViolation {
        /// Offset of the first non-zero byte found.
        offset: usize,
        /// The high watermark at the time of the check.
        watermark: usize,
    },
}
