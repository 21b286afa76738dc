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
        let h = fill_lines(target, fields);
        self.port.dispatch(
            &p.config().envoy.cluster,
            &h,
            None,
            p.config().origin.first_byte_timeout.0,
        )
    }
}

/// A fill's request lines: the pseudo-headers of a `GET` of `target` (`:authority` from
/// the fill's `host` line), then the fill's other lines as their bytes.
pub(super) fn fill_lines<'a>(
    target: &'a str,
    fields: &'a [(String, Vec<u8>)],
) -> Vec<(&'a str, &'a [u8])> {
    let authority: &[u8] = fields
        .iter()
        .find(|(n, _)| n == "host")
        .map_or(&[], |(_, v)| v.as_slice());
    let mut h: Vec<(&str, &[u8])> = vec![
        (":method", b"GET"),
        (":path", target.as_bytes()),
        (":authority", authority),
        (":scheme", b"http"),
    ];
    h.extend(
        fields
            .iter()
            .filter(|(n, _)| n != "host")
            .map(|(n, v)| (n.as_str(), v.as_slice())),
    );
    h
}
