//! The per-request workspace on Fastly: one `cachet-workspace` pair per instance, reset at the end of each request.
//!
//! Fastly on Varnish (2025): each request's scratch memory lives in a workspace that is
//! cleared only up to its high watermark, proven safe by sampled verification in shadow
//! mode first. An instance serves many requests (reusable sandboxes, `crate::sandbox`);
//! the pair is kept in thread-local storage so each request clears exactly what it
//! touched before the next one runs. The client half holds request-side scratch, the
//! backend half the inflate buffers of stored gzip bodies.
//!
//! The pair is allocated on the first request that needs scratch, not when the instance
//! starts: zeroing 2 × 256 KiB of fresh linear memory (the allocator clears it, and every
//! page is faulted in) cost a reused Viceroy instance ≈ 10% of its CPU per HIT, and a
//! HIT for a gzip client never touches it (docs/performance.md, "Edge: the platform's
//! floor").

use std::cell::{Cell, RefCell};

use cachet_http::access::Access;
use cachet_policy::Policy;
use cachet_workspace::WorkspacePair;

use crate::host::Host;

thread_local! {
    static PAIR: RefCell<Option<WorkspacePair>> = const { RefCell::new(None) };
    /// `[workspace]` of the policy in force, for the pair's first use.
    static CONFIG: Cell<Option<cachet_workspace::Config>> = const { Cell::new(None) };
}

/// Notes the instance's `[workspace]` configuration (the defaults when the configuration
/// does not load) for the pair's first use; allocates nothing.
pub(crate) fn begin(policy: Option<&Policy>) {
    let cfg = policy
        .map(|p| p.config().workspace.workspace_config())
        .unwrap_or_default();
    CONFIG.with(|c| c.set(Some(cfg)));
}

/// Runs `f` on the instance's pair, building it first when this is its first use
/// (`None` when the configuration's capacity is out of range).
fn with_pair<T>(f: impl FnOnce(Option<&mut WorkspacePair>) -> T) -> T {
    PAIR.with(|p| {
        let mut p = p.borrow_mut();
        if p.is_none() {
            let cfg = CONFIG.with(Cell::get).unwrap_or_default();
            *p = WorkspacePair::new(cfg).ok();
        }
        f(p.as_mut())
    })
}

/// Resets the workspace (sampled verification with a random draw) and records the
/// request's watermark, cleared bytes, overflow and verification in the access log. The
/// pair stays for the instance's next request. Before its first use there is nothing to
/// clear: the record says watermark 0, 0 bytes cleared.
pub(crate) fn end<H: Host>(host: &H, access: &mut Access) {
    let f = access;
    PAIR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let Some(pair) = slot.as_mut() else {
            (f.ws_watermark, f.ws_cleared, f.ws_overflow) = (Some(0), Some(0), Some(false));
            return;
        };
        let (c, b) = pair.stats();
        f.ws_watermark = Some((c.watermark + b.watermark) as u64);
        f.ws_overflow = Some(pair.overflowed());
        let draw = u32::try_from(host.random_u64() & u64::from(u32::MAX)).unwrap_or(0);
        match pair.reset(draw) {
            Ok(report) => {
                f.ws_cleared =
                    Some((report.client.bytes_cleared + report.backend.bytes_cleared) as u64);
                if report.client.verified || report.backend.verified {
                    f.ws_verified = Some("ok");
                }
            }
            Err(e) => {
                f.ws_verified = Some("violation");
                f.error = Some(format!("workspace: {e}"));
            }
        }
    });
}

/// Inflates a gzip body through the backend half (the inflate buffer lives in the
/// workspace; only the finished body is copied out for the response). Falls back to the
/// heap when there is no workspace or the body does not fit.
///
/// # Errors
/// Corrupt gzip data, or output over `cachet_policy::object::MAX_INFLATED_BYTES`.
pub(crate) fn gunzip(stored: &[u8]) -> std::io::Result<Vec<u8>> {
    let inflated = with_pair(|p| match p {
        Some(pair) => cachet_policy::object::gunzip_into(&pair.backend.scratch(), stored),
        None => Ok(None),
    })?;
    match inflated {
        Some(body) => Ok(body),
        None => cachet_policy::object::gunzip(stored),
    }
}

/// Whether every byte of the instance's workspace pair is zero (nothing of an earlier
/// request left behind), for tests; `None` when the instance has no pair yet.
#[cfg(test)]
pub(crate) fn all_zero() -> Option<bool> {
    PAIR.with(|p| {
        p.borrow().as_ref().map(|pair| {
            [&pair.client, &pair.backend]
                .iter()
                .all(|w| w.as_bytes_for_verification().iter().all(|b| *b == 0))
        })
    })
}

/// Writes `byte` over the first `len` bytes of the backend half, as a request's scratch
/// would, for tests.
#[cfg(test)]
pub(crate) fn scribble(byte: u8, len: usize) {
    with_pair(|p| {
        if let Some(pair) = p
            && let Ok(buf) = pair.backend.scratch().alloc(len, 1)
        {
            buf.fill(byte);
        }
    });
}
