//! The per-request workspace on Fastly: one `cachet-workspace` pair per instance, reset at the end of each request.
//!
//! Fastly on Varnish (2025): each request's scratch memory lives in a workspace that is
//! cleared only up to its high watermark, proven safe by sampled verification in shadow
//! mode first. Fastly Compute usually runs one request per instance, but instances can be
//! reused; the pair is kept in thread-local storage so a reused instance clears exactly
//! what the previous request touched. The client half holds request-side scratch (the
//! origin target), the backend half the inflate buffers of stored gzip bodies.

use std::cell::RefCell;

use cachet_http::access::Access;
use cachet_policy::Policy;
use cachet_workspace::WorkspacePair;

use crate::host::Host;

thread_local! {
    static PAIR: RefCell<Option<WorkspacePair>> = const { RefCell::new(None) };
}

/// Builds the instance's workspace pair on first use, from `[workspace]` (the defaults
/// when the configuration does not load).
pub(crate) fn begin(policy: Option<&Policy>) {
    PAIR.with(|p| {
        let mut p = p.borrow_mut();
        if p.is_none() {
            let cfg = policy
                .map(|p| p.config().workspace.workspace_config())
                .unwrap_or_default();
            *p = WorkspacePair::new(cfg).ok();
        }
    });
}

/// Resets the workspace (sampled verification with a random draw) and records the
/// request's watermark, cleared bytes, overflow and verification in the access log. The
/// pair stays for the instance's next request.
pub(crate) fn end<H: Host>(host: &H, access: &mut Access) {
    let f = access;
    PAIR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let Some(pair) = slot.as_mut() else { return };
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
    let inflated = PAIR.with(|p| {
        let mut p = p.borrow_mut();
        match p.as_mut() {
            Some(pair) => cachet_policy::object::gunzip_into(&pair.backend.scratch(), stored),
            None => Ok(None),
        }
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
    PAIR.with(|p| {
        if let Some(pair) = p.borrow_mut().as_mut()
            && let Ok(buf) = pair.backend.scratch().alloc(len, 1)
        {
            buf.fill(byte);
        }
    });
}
