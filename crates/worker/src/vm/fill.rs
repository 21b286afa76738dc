//! Origin fetches and what their answers become: stored objects, markers, revalidations.

#[allow(
    clippy::wildcard_imports,
    reason = "a seam of vm.rs: the parent module's types and imports"
)]
use super::*;

impl Vm {
    /// Dispatches the origin fetch of `job` to `envoy.cluster`: the engine's field set
    /// (`cachet_http::engine_fill::request_fields`, conditional on `base`'s validators when it has
    /// usable ones) behind the pseudo-headers, values as their bytes.
    ///
    /// # Errors
    /// The host's refusal (unknown cluster, bad headers; `SerializationFailure` when a
    /// value is one the host's callouts cannot carry exactly: nothing was sent).
    pub(super) fn dispatch(
        p: &Policy,
        job: &Job,
        base: Option<&StoredObject>,
    ) -> Result<u32, crate::host::Status> {
        let plan = job.plan(p, host::now());
        let fields =
            engine_fill::request_fields(p, &plan, &job.want.fields, base.map(|b| &b.h.meta));
        let authority: &[u8] = fields
            .iter()
            .find(|(n, _)| n == "host")
            .map_or(&[], |(_, v)| v.as_slice());
        let mut h: Vec<(&str, &[u8])> = vec![
            (":method", b"GET"),
            (":path", job.want.target.as_bytes()),
            (":authority", authority),
            (":scheme", b"http"),
        ];
        h.extend(
            fields
                .iter()
                .filter(|(n, _)| n != "host")
                .map(|(n, v)| (n.as_str(), v.as_slice())),
        );
        host::dispatch(
            &p.config().envoy.cluster,
            &h,
            None,
            p.config().origin.first_byte_timeout.0,
        )
    }

    /// Applies a fill's origin answer `r` to the cache (`cachet_store::cache::Cache::store`:
    /// the engine's verdict; `Cache::store_oversized` for a body over
    /// `[edge].max_object_bytes`, never read into the VM). With `replacing` it answers a
    /// revalidation.
    pub(super) fn store_response(
        &self,
        p: &Policy,
        job: &Job,
        r: &OriginResponse,
        replacing: bool,
    ) -> Stored {
        let at = host::now();
        let plan = job.plan(p, at);
        let now = Timestamp::from_system_time(at);
        let mut cache = self.cache.borrow_mut();
        let stored = if r.oversized {
            // Never read into the VM: the verdict from its status and fields alone.
            let (status, fields) = (r.status, &r.headers);
            cache.store_oversized(
                &HostData, p, &plan, &job.want, status, fields, now, replacing,
            )
        } else {
            cache.store(&HostData, p, &plan, &job.want, r.origin(), now, replacing)
        };
        drop(cache);
        self.flush();
        stored
    }

    /// Applies the origin's answer `r` (`None`: the callout failed) to a revalidation of
    /// `base`, found for `job` (`cachet_store::cache::Cache::revalidate`).
    pub(super) fn revalidate(
        &self,
        p: &Policy,
        job: &Job,
        base: &StoredObject,
        r: Option<&OriginResponse>,
    ) -> Revalidated {
        let at = host::now();
        let plan = job.plan(p, at);
        let now = Timestamp::from_system_time(at);
        let answer = r.map(OriginResponse::origin);
        let out = self
            .cache
            .borrow_mut()
            .revalidate(&HostData, p, &plan, &job.want, base, answer, now);
        self.flush();
        out
    }
}
