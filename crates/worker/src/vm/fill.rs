//! Origin fetches: a fill sent as a callout.

#[allow(
    clippy::wildcard_imports,
    reason = "a seam of vm.rs: the parent module's types and imports"
)]
use super::*;

impl Vm {
    /// Dispatches a fill of `target` to `envoy.cluster` with exactly `fields` (the
    /// exchange's, `cachet_http::fill::request_fields`) behind the pseudo-headers, values
    /// as their bytes.
    ///
    /// # Errors
    /// The host's refusal (unknown cluster, bad headers; `SerializationFailure` when a
    /// value is one the host's callouts cannot carry exactly: nothing was sent).
    pub(super) fn dispatch(
        &self,
        p: &Policy,
        target: &str,
        fields: &[(String, Vec<u8>)],
    ) -> Result<u32, crate::host::Status> {
        let h = cachet_http::fill::request_lines(target, fields, None);
        self.port.dispatch(
            &p.config().envoy.cluster,
            &h,
            None,
            p.config().origin.first_byte_timeout.0,
        )
    }
}
