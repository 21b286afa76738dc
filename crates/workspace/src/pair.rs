//! [`WorkspacePair`]: the client and backend halves one request uses (Fastly's 2 × 256 KiB).

use crate::{Config, ResetReport, Stats, Workspace, WorkspaceError};

/// Two independent workspaces, one for the client side of a request and one for the
/// backend side, like Varnish's `workspace_client` / `workspace_backend` and Fastly's
/// 512 KiB split into two 256 KiB halves. Each half has its own watermark, so a request
/// that only touches the client side clears nothing on the backend side.
#[derive(Debug)]
pub struct WorkspacePair {
    /// Client-side half (request headers, cache key, ban evaluation).
    pub client: Workspace,
    /// Backend-side half (backend request/response headers, inflate buffers).
    pub backend: Workspace,
}

/// What [`WorkspacePair::reset`] did to each half.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairReport {
    /// Report of the client half.
    pub client: ResetReport,
    /// Report of the backend half.
    pub backend: ResetReport,
}

impl WorkspacePair {
    /// Builds both halves from `config`; each half gets `config.capacity_bytes`
    /// (use [`crate::DEFAULT_CAPACITY_BYTES`] = 256 KiB for Fastly's split).
    ///
    /// # Errors
    /// [`WorkspaceError::CapacityOutOfRange`] as for [`Workspace::new`].
    pub fn new(config: Config) -> Result<Self, WorkspaceError> {
        Ok(Self {
            client: Workspace::new(config)?,
            backend: Workspace::new(config)?,
        })
    }

    /// Resets both halves with the same `draw` (so both are verified on the same sampled
    /// requests). Both halves are always reset, even when one reports a violation.
    ///
    /// # Errors
    /// The first [`WorkspaceError::WatermarkViolation`] (client half first); both halves
    /// are fully cleared and counted in their [`Stats::violations`].
    pub fn reset(&mut self, draw: u32) -> Result<PairReport, WorkspaceError> {
        let client = self.client.reset(draw);
        let backend = self.backend.reset(draw);
        Ok(PairReport {
            client: client?,
            backend: backend?,
        })
    }

    /// Stats of both halves, `(client, backend)`.
    pub fn stats(&self) -> (Stats, Stats) {
        (self.client.stats(), self.backend.stats())
    }

    /// Whether either half overflowed in the current request.
    pub fn overflowed(&self) -> bool {
        self.client.overflowed() || self.backend.overflowed()
    }
}
