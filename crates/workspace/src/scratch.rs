//! Allocation handles: [`Scratch`] (bump allocation, nested frames) and [`Reservation`].

use std::cell::Cell;
use std::fmt;

use crate::arena::{Cursor, Snapshot};
use crate::{MAX_ALIGN, WorkspaceError};

/// The allocation handle of one request, borrowed from a [`crate::Workspace`].
///
/// Allocation methods take `&self` and return `&'w mut [u8]`: many slices can be alive at
/// once, all disjoint, all tied to the workspace borrow `'w`, so none can outlive a
/// [`crate::Workspace::reset`]. Internally the free region is a `Cell<&'w mut [u8]>` that
/// each allocation splits with `split_at_mut` — the classic safe bump allocator, no
/// `unsafe`. Every slice handed out is zero-filled. Varnish `WS_Alloc`, `WS_Copy`,
/// `WS_Printf`, `WS_ReserveSize`/`WS_ReserveAll`/`WS_Release`.
pub struct Scratch<'w> {
    rest: Cell<&'w mut [u8]>,
    /// Absolute offset of `rest`'s first byte.
    pos: Cell<usize>,
    /// Absolute offset where this handle started (frames roll back to it on drop).
    start: usize,
    frame: bool,
    reserved: Cell<bool>,
    cursor: &'w Cursor,
}

impl fmt::Debug for Scratch<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scratch")
            .field("pos", &self.pos.get())
            .field("start", &self.start)
            .field("frame", &self.frame)
            .field("reserved", &self.reserved.get())
            .finish_non_exhaustive()
    }
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        if self.frame {
            self.cursor.top.set(self.start);
        }
    }
}

fn check_align(align: usize) -> Result<(), WorkspaceError> {
    if align.is_power_of_two() && align <= MAX_ALIGN {
        Ok(())
    } else {
        Err(WorkspaceError::BadAlignment {
            align,
            max: MAX_ALIGN,
        })
    }
}

impl<'w> Scratch<'w> {
    pub(crate) fn root(rest: &'w mut [u8], pos: usize, cursor: &'w Cursor) -> Self {
        Self {
            rest: Cell::new(rest),
            pos: Cell::new(pos),
            start: pos,
            frame: false,
            reserved: Cell::new(false),
            cursor,
        }
    }

    fn ready(&self) -> Result<(), WorkspaceError> {
        if self.reserved.get() {
            Err(WorkspaceError::ReservationOutstanding)
        } else if self.cursor.overflowed.get() {
            Err(WorkspaceError::Overflowed)
        } else {
            Ok(())
        }
    }

    /// Allocates `len` zero-filled bytes whose address is a multiple of `align`.
    ///
    /// # Errors
    /// [`WorkspaceError::BadAlignment`] unless `align` is a power of two `<= MAX_ALIGN`;
    /// [`WorkspaceError::ReservationOutstanding`] while a [`Reservation`] is open;
    /// [`WorkspaceError::Overflowed`] after an earlier overflow in this request;
    /// [`WorkspaceError::Overflow`] when it does not fit (this sets the overflow flag).
    pub fn alloc(&self, len: usize, align: usize) -> Result<&'w mut [u8], WorkspaceError> {
        check_align(align)?;
        self.ready()?;
        let rest = self.rest.take();
        let pad = rest.as_ptr().addr().wrapping_neg() & (align - 1);
        let available = rest.len();
        let need = match pad.checked_add(len) {
            Some(n) if n <= available => n,
            _ => {
                self.rest.set(rest);
                self.cursor.overflowed.set(true);
                return Err(WorkspaceError::Overflow {
                    requested: len.saturating_add(pad),
                    available,
                });
            }
        };
        let (head, tail) = rest.split_at_mut(need);
        self.rest.set(tail);
        let base = self.pos.get();
        self.pos.set(base + need);
        self.cursor.top.set(base + need);
        let (_, out) = head.split_at_mut(pad);
        self.cursor.expose(base + pad, out);
        Ok(out)
    }

    /// Allocates a copy of `bytes` (alignment 1).
    ///
    /// # Errors
    /// As [`Scratch::alloc`].
    pub fn alloc_copy(&self, bytes: &[u8]) -> Result<&'w mut [u8], WorkspaceError> {
        let out = self.alloc(bytes.len(), 1)?;
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// Allocates a copy of `s` as a `&mut str` (alignment 1). The copy is re-validated as
    /// UTF-8 — the price of having no `unsafe` — which is a fast ASCII scan.
    ///
    /// # Errors
    /// As [`Scratch::alloc`].
    pub fn alloc_str(&self, s: &str) -> Result<&'w mut str, WorkspaceError> {
        let out = self.alloc_copy(s.as_bytes())?;
        std::str::from_utf8_mut(out).map_err(|e| WorkspaceError::InvalidUtf8 {
            valid_up_to: e.valid_up_to(),
        })
    }

    /// Formats `args` straight into the workspace (Varnish `WS_Printf`), e.g.
    /// `scratch.alloc_fmt(format_args!("{host}{path}"))` for a cache key. Only the bytes
    /// written count toward the watermark.
    ///
    /// # Errors
    /// As [`Scratch::alloc`]; [`WorkspaceError::Format`] if a `Display` impl fails.
    pub fn alloc_fmt(&self, args: fmt::Arguments<'_>) -> Result<&'w mut str, WorkspaceError> {
        let mut r = self.reserve_all()?;
        if fmt::Write::write_fmt(&mut r, args).is_err() {
            drop(r);
            return Err(if self.cursor.overflowed.get() {
                WorkspaceError::Overflowed
            } else {
                WorkspaceError::Format
            });
        }
        r.release_str()
    }

    /// Opens a reservation of exactly `bytes` bytes for building a value of unknown length
    /// (Varnish `WS_ReserveSize`). Until it is released or dropped, other allocations on
    /// this handle fail with [`WorkspaceError::ReservationOutstanding`]. Nothing counts
    /// toward the watermark until it is written or exposed.
    ///
    /// # Errors
    /// [`WorkspaceError::ReservationOutstanding`], [`WorkspaceError::Overflowed`], or
    /// [`WorkspaceError::Overflow`] (sets the flag) when fewer than `bytes` remain.
    pub fn reserve(&self, bytes: usize) -> Result<Reservation<'_, 'w>, WorkspaceError> {
        self.ready()?;
        let rest = self.rest.take();
        if bytes > rest.len() {
            let available = rest.len();
            self.rest.set(rest);
            self.cursor.overflowed.set(true);
            return Err(WorkspaceError::Overflow {
                requested: bytes,
                available,
            });
        }
        self.reserved.set(true);
        Ok(Reservation {
            scratch: self,
            start: self.pos.get(),
            limit: bytes,
            buf: rest,
            len: 0,
            exposed: 0,
            done: false,
        })
    }

    /// Opens a reservation of all remaining bytes (Varnish `WS_ReserveAll`). Only bytes
    /// actually written or exposed raise the watermark, so reserving everything is cheap.
    ///
    /// # Errors
    /// [`WorkspaceError::ReservationOutstanding`] or [`WorkspaceError::Overflowed`].
    pub fn reserve_all(&self) -> Result<Reservation<'_, 'w>, WorkspaceError> {
        self.ready()?;
        let len = {
            let rest = self.rest.take();
            let n = rest.len();
            self.rest.set(rest);
            n
        };
        self.reserve(len)
    }

    /// Opens a nested frame: allocations made through it are freed when it is dropped
    /// (snapshot + rollback in one scope, checked by the borrow checker: the frame's
    /// slices cannot outlive it). The watermark still includes everything the frame
    /// handed out.
    pub fn frame(&mut self) -> Scratch<'_> {
        let pos = self.pos.get();
        let cursor: &Cursor = self.cursor;
        let rest: &mut [u8] = self.rest.get_mut();
        Scratch {
            rest: Cell::new(rest),
            pos: Cell::new(pos),
            start: pos,
            frame: true,
            reserved: Cell::new(false),
            cursor,
        }
    }

    /// Records the current top, for [`crate::Workspace::rollback`] once this handle (and
    /// every slice from it) is gone.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            offset: self.pos.get(),
            generation: self.cursor.generation,
        }
    }

    /// Bytes left in this handle's free region (before alignment padding); 0 while a
    /// reservation is open.
    pub fn remaining(&self) -> usize {
        let rest = self.rest.take();
        let n = rest.len();
        self.rest.set(rest);
        n
    }

    /// Current high watermark of the workspace, in bytes.
    pub fn watermark(&self) -> usize {
        self.cursor.watermark.get()
    }

    /// Whether the sticky overflow flag is set.
    pub fn overflowed(&self) -> bool {
        self.cursor.overflowed.get()
    }

    /// Sets the sticky overflow flag (Varnish `WS_MarkOverflow`).
    pub fn mark_overflow(&self) {
        self.cursor.overflowed.set(true);
    }
}

/// An open reservation: a growable value built in place at the top of the workspace.
///
/// Shape: `capacity()` bytes are set aside; `len()` of them are filled. Bytes become
/// visible to the caller only through [`Reservation::push`], [`Reservation::unfilled_mut`]
/// or [`Reservation::advance`], and only those raise the watermark. [`Reservation::release`]
/// keeps the filled bytes as a `&'w mut [u8]`; dropping it keeps nothing (Varnish
/// `WS_Release(ws, 0)`). The released tail still counts toward the watermark.
pub struct Reservation<'s, 'w> {
    scratch: &'s Scratch<'w>,
    buf: &'w mut [u8],
    start: usize,
    limit: usize,
    len: usize,
    exposed: usize,
    done: bool,
}

impl fmt::Debug for Reservation<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("start", &self.start)
            .field("capacity", &self.limit)
            .field("len", &self.len)
            .field("exposed", &self.exposed)
            .finish_non_exhaustive()
    }
}

impl Drop for Reservation<'_, '_> {
    fn drop(&mut self) {
        if !self.done {
            self.finish(0);
        }
    }
}

impl<'w> Reservation<'_, 'w> {
    /// Bytes reserved.
    pub fn capacity(&self) -> usize {
        self.limit
    }

    /// Bytes filled so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing has been filled.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes still free in the reservation.
    pub fn remaining(&self) -> usize {
        self.limit - self.len
    }

    /// The filled bytes.
    pub fn filled(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }

    /// The filled bytes, mutable.
    pub fn filled_mut(&mut self) -> &mut [u8] {
        self.buf.get_mut(..self.len).unwrap_or_default()
    }

    /// Makes `[0, upto)` visible: zeroes what lies below the watermark, raises it.
    fn expose_to(&mut self, upto: usize) {
        if upto > self.exposed {
            if let Some(region) = self.buf.get_mut(self.exposed..upto) {
                self.scratch
                    .cursor
                    .expose(self.start + self.exposed, region);
            }
            self.exposed = upto;
        }
    }

    fn room(&self, n: usize) -> Result<usize, WorkspaceError> {
        if self.scratch.cursor.overflowed.get() {
            return Err(WorkspaceError::Overflowed);
        }
        if n > self.remaining() {
            self.scratch.cursor.overflowed.set(true);
            return Err(WorkspaceError::Overflow {
                requested: n,
                available: self.remaining(),
            });
        }
        Ok(self.len + n)
    }

    /// Appends `bytes`.
    ///
    /// # Errors
    /// [`WorkspaceError::Overflowed`] after an earlier overflow;
    /// [`WorkspaceError::Overflow`] (sets the flag, appends nothing) when it does not fit.
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), WorkspaceError> {
        let end = self.room(bytes.len())?;
        self.expose_to(end);
        if let Some(dst) = self.buf.get_mut(self.len..end) {
            dst.copy_from_slice(bytes);
        }
        self.len = end;
        Ok(())
    }

    /// Appends the UTF-8 bytes of `s`.
    ///
    /// # Errors
    /// As [`Reservation::push`].
    pub fn push_str(&mut self, s: &str) -> Result<(), WorkspaceError> {
        self.push(s.as_bytes())
    }

    /// Exposes the next `n` unfilled bytes, zero-filled, for a writer that fills a buffer
    /// itself (an inflater, a header copier); then call [`Reservation::advance`] with the
    /// count it wrote. The exposed bytes count toward the watermark even if not advanced.
    ///
    /// # Errors
    /// As [`Reservation::push`] when fewer than `n` bytes remain.
    pub fn unfilled_mut(&mut self, n: usize) -> Result<&mut [u8], WorkspaceError> {
        let end = self.room(n)?;
        self.expose_to(end);
        let len = self.len;
        Ok(self.buf.get_mut(len..end).unwrap_or_default())
    }

    /// Marks `n` more bytes as filled (after [`Reservation::unfilled_mut`]); bytes never
    /// exposed are exposed zero-filled.
    ///
    /// # Errors
    /// As [`Reservation::push`] when `n` exceeds the remaining bytes.
    pub fn advance(&mut self, n: usize) -> Result<(), WorkspaceError> {
        let end = self.room(n)?;
        self.expose_to(end);
        self.len = end;
        Ok(())
    }

    /// Shrinks the filled length to `len` (no-op when `len >= self.len()`).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    fn finish(&mut self, keep: usize) -> &'w mut [u8] {
        self.done = true;
        let buf = std::mem::take(&mut self.buf);
        let keep = keep.min(buf.len());
        let (kept, back) = buf.split_at_mut(keep);
        let s = self.scratch;
        s.rest.set(back);
        let top = s.pos.get() + keep;
        s.pos.set(top);
        s.cursor.top.set(top);
        s.reserved.set(false);
        kept
    }

    /// Keeps the filled bytes as an allocation and closes the reservation
    /// (Varnish `WS_Release(ws, len)`); the rest returns to the free region.
    pub fn release(mut self) -> &'w mut [u8] {
        let keep = self.len;
        self.finish(keep)
    }

    /// As [`Reservation::release`], as a `&mut str`.
    ///
    /// # Errors
    /// [`WorkspaceError::InvalidUtf8`] when the filled bytes are not UTF-8; then nothing
    /// is kept.
    pub fn release_str(mut self) -> Result<&'w mut str, WorkspaceError> {
        if let Err(e) = std::str::from_utf8(self.filled()) {
            self.finish(0);
            return Err(WorkspaceError::InvalidUtf8 {
                valid_up_to: e.valid_up_to(),
            });
        }
        let keep = self.len;
        std::str::from_utf8_mut(self.finish(keep)).map_err(|e| WorkspaceError::InvalidUtf8 {
            valid_up_to: e.valid_up_to(),
        })
    }
}

impl fmt::Write for Reservation<'_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.push_str(s).map_err(|_| fmt::Error)
    }
}

impl std::io::Write for Reservation<'_, '_> {
    /// Writes as much of `buf` as fits; `Ok(0)` once full (without setting the overflow
    /// flag — an `io::Write` caller sees a short write instead).
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.scratch.cursor.overflowed.get() {
            return Ok(0);
        }
        let n = buf.len().min(self.remaining());
        self.push(buf.get(..n).unwrap_or_default())
            .map_err(std::io::Error::other)?;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
