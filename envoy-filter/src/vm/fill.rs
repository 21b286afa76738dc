//! Origin fetches and what their answers become: stored objects, markers, revalidations.

#[allow(
    clippy::wildcard_imports,
    reason = "a seam of vm.rs: the parent module's types and imports"
)]
use super::*;

impl Vm {
    /// Dispatches the origin fetch of `job` to `envoy.cluster`: the engine's field set
    /// (`cachet_http::engine_fill::request_fields`, conditional on `base`'s validators when it has
    /// usable ones) behind the pseudo-headers. Values that are not text are left out (the
    /// host API takes strings).
    ///
    /// # Errors
    /// The host's refusal (unknown cluster, bad headers).
    pub(super) fn dispatch(
        p: &Policy,
        job: &Job,
        base: Option<&StoredObject>,
    ) -> Result<u32, proxy_wasm::types::Status> {
        let plan = job.plan(p, host::now());
        let fields = engine_fill::request_fields(p, &plan, &job.fields, base.map(|b| &b.h.meta));
        let authority = fields
            .iter()
            .find(|(n, _)| n == "host")
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
            .unwrap_or_default();
        let mut h = vec![
            (":method", "GET"),
            (":path", job.target.as_str()),
            (":authority", authority),
            (":scheme", "http"),
        ];
        h.extend(
            fields
                .iter()
                .filter(|(n, _)| n != "host")
                .filter_map(|(n, v)| Some((n.as_str(), std::str::from_utf8(v).ok()?))),
        );
        host::dispatch(
            &p.config().envoy.cluster,
            &h,
            None,
            p.config().origin.first_byte_timeout.0,
        )
    }

    /// Applies the engine's verdict on an origin response to a fill of `job`
    /// (`cachet_http::engine_fill::filled`): stores it in both tiers (as a variant when the origin
    /// varies), or leaves a hit-for-pass marker, or leaves the cache alone. With
    /// `replacing` (it answers a revalidation of a stored object) an answer that may not be
    /// stored leaves a marker: the old copy must never be served again.
    pub(super) fn store_response(
        &self,
        p: &Policy,
        job: &Job,
        r: &OriginResponse,
        replacing: bool,
    ) -> Fetched {
        let at = host::now();
        let now = Timestamp::from_system_time(at);
        let plan = job.plan(p, at);
        let origin = cachet_http::store::Origin {
            status: r.status,
            fields: &r.headers,
            body: &r.body,
            elapsed: r.elapsed,
        };
        match engine_fill::filled(p, &plan, &job.key, origin, now, replacing) {
            Ok(Filled::Stored { meta, body }) => {
                let obj = StoredObject::new(job.key.clone(), *meta, body);
                match self.place_variant(p, job, obj, now) {
                    Some(obj) => Fetched::Stored(self.insert(obj, now)),
                    None => Fetched::Pass,
                }
            }
            Ok(Filled::Marker { meta, .. }) => {
                self.insert(StoredObject::new(job.key.clone(), *meta, Vec::new()), now);
                Fetched::Pass
            }
            Ok(Filled::Unstored(_)) | Err(_) => Fetched::Pass,
        }
    }

    /// Applies the origin's answer `r` (`None`: the callout failed) to a revalidation of
    /// `base`, found for `job` (`cachet_http::engine_fill::revalidated`):
    /// a 304 freshens it in both tiers (new version, so other workers' in-VM copies are
    /// replaced on their next non-fresh lookup), a full response replaces it, a 5xx or a
    /// failed callout keeps it (never replace a good object with a 5xx).
    pub(super) fn revalidate(
        &self,
        p: &Policy,
        job: &Job,
        base: &StoredObject,
        r: Option<&OriginResponse>,
    ) -> Revalidated {
        let Some(r) = r else {
            Metrics::inc(self.m().origin_errors);
            return Revalidated::Kept;
        };
        let at = host::now();
        let now = Timestamp::from_system_time(at);
        let plan = job.plan(p, at);
        let answer = cachet_http::store::Origin {
            status: r.status,
            fields: &r.headers,
            body: &[],
            elapsed: r.elapsed,
        };
        match engine_fill::revalidated(p, &plan, &job.key, &base.h.meta, answer, now) {
            engine_fill::Revalidated::Freshen(fresh) => {
                // A ban or purge added while the request was out still applies to the
                // stored copy: a 304 must not give it a new insertion time.
                self.sync_bans();
                let req = Req {
                    url: &job.target,
                    headers: &job.fields,
                };
                let banned = self.bans.borrow().check(base, &req) == Check::Banned;
                let current = self.shared.get().get(&HostData, &job.key);
                if banned || current.is_some_and(|c| c.h.version > base.h.version) {
                    return Revalidated::Unusable;
                }
                Metrics::inc(self.m().revalidated);
                let obj = StoredObject::new(base.h.key.clone(), *fresh, base.body.clone());
                Revalidated::Freshened(self.insert(obj, now))
            }
            engine_fill::Revalidated::Uncacheable { marker, .. } => {
                self.insert(StoredObject::new(job.key.clone(), *marker, Vec::new()), now);
                Revalidated::Uncacheable
            }
            engine_fill::Revalidated::Replace => {
                Revalidated::Replaced(self.store_response(p, job, r, true))
            }
            engine_fill::Revalidated::Keep => {
                Metrics::inc(self.m().origin_errors);
                Revalidated::Kept
            }
        }
    }
}
