//! Origin fetches and what their answers become: stored objects, markers, revalidations.

#[allow(
    clippy::wildcard_imports,
    reason = "a seam of vm.rs: the parent module's types and imports"
)]
use super::*;

impl Vm {
    /// Origin fetch headers for `job`; conditional (`If-None-Match` /
    /// `If-Modified-Since`, RFC 9111 §4.3.1) with `cond`.
    pub(super) fn fetch_headers<'a>(
        p: &'a Policy,
        job: &'a Job,
        cond: &'a ConditionalHeaders,
    ) -> Vec<(&'a str, &'a str)> {
        let authority = if p.config().origin.override_host.is_empty() {
            job.host.as_str()
        } else {
            p.config().origin.override_host.as_str()
        };
        let mut h = vec![
            (":method", "GET"),
            (":path", job.target.as_str()),
            (":authority", authority),
            (":scheme", "http"),
            ("accept-encoding", "gzip"),
            (p.device_header(), job.device),
        ];
        for (n, v) in &job.fwd {
            h.push((n.as_str(), v.as_str()));
        }
        if let Some(v) = &cond.if_none_match {
            h.push(("if-none-match", v.as_str()));
        }
        if let Some(v) = &cond.if_modified_since {
            h.push(("if-modified-since", v.as_str()));
        }
        h
    }

    /// Dispatches the origin fetch of `job` to `envoy.cluster`, conditional on `base`'s
    /// validators when it has usable ones.
    ///
    /// # Errors
    /// The host's refusal (unknown cluster, bad headers).
    pub(super) fn dispatch(
        p: &Policy,
        job: &Job,
        base: Option<&StoredObject>,
    ) -> Result<u32, proxy_wasm::types::Status> {
        // Unusable validators (not an entity-tag, control bytes, too long): unconditional.
        let cond = base
            .and_then(|b| conditional_headers(&b.h.meta.validators).ok())
            .unwrap_or_default();
        let h = Self::fetch_headers(p, job, &cond);
        host::dispatch(
            &p.config().envoy.cluster,
            &h,
            None,
            p.config().origin.first_byte_timeout.0,
        )
    }

    /// A content-free hit-for-pass marker for `job` (never a private byte stored).
    pub(super) fn marker(p: &Policy, job: &Job, plan: &Plan<'_>, now: Timestamp) -> StoredObject {
        let mut meta = Meta::marker(plan.route, now, p.config().edge.hit_for_pass.0);
        meta.host = plan.host.to_string();
        meta.url = plan.target.to_string();
        meta.surrogate_keys.clone_from(&plan.surrogate_keys);
        meta.tag = object::object_tag(&job.key);
        StoredObject::new(job.key.clone(), meta, Vec::new())
    }

    /// Turns an origin response into a stored object, or into a hit-for-pass marker when
    /// the content is per-user (private, `no-store`, `Set-Cookie`) or, with `replacing`
    /// (it answers a revalidation of a stored object), whenever it may not be stored: the
    /// old copy must never be served again.
    pub(super) fn store_response(
        &self,
        p: &Policy,
        job: &Job,
        r: &OriginResponse,
        replacing: bool,
    ) -> Fetched {
        let now = host::now();
        let now_ts = Timestamp::from_system_time(now);
        let plan = job.plan(p, now);
        let built = match Self::storable(p, &plan, job, r, now_ts) {
            Ok(obj) => obj,
            Err(private) => {
                if private || replacing {
                    self.insert(Self::marker(p, job, &plan, now_ts), now_ts);
                }
                return Fetched::Pass;
            }
        };
        match self.place_variant(p, job, built, now_ts) {
            Some(obj) => Fetched::Stored(self.insert(obj, now_ts)),
            None => Fetched::Pass,
        }
    }

    /// The object to store for `r` (`Policy::storability`, `[edge].max_object_bytes`,
    /// gzip per `object::for_storage`), or `Err(private)` when it may not be stored.
    pub(super) fn storable(
        p: &Policy,
        plan: &Plan<'_>,
        job: &Job,
        r: &OriginResponse,
        now: Timestamp,
    ) -> Result<StoredObject, bool> {
        let fields = ResponseFields::read(r.status, r.headers.as_slice());
        let mut view = fields.view();
        view.content_length = Some(r.body.len() as u64);
        let store = match p.storability(plan, &view) {
            Storability::Store(s) => s,
            Storability::DontStore(why) => return Err(why.is_private()),
        };
        if r.body.len() as u64 > p.config().edge.max_object_bytes {
            return Err(false);
        }
        let origin = cachet_http::store::Origin {
            status: r.status,
            fields: &r.headers,
            body: &r.body,
            elapsed: r.elapsed,
        };
        let (meta, stored) =
            cachet_http::store::object(plan, &store, origin, now).map_err(|_| false)?;
        Ok(StoredObject::new(job.key.clone(), meta, stored))
    }

    /// Applies the origin's answer `r` (`None`: the callout failed) to a revalidation of
    /// `base`, found for `job` by a request with `headers` (`cachet_refresh::on_revalidation`):
    /// a 304 freshens it in both tiers (new version, so other workers' in-VM copies are
    /// replaced on their next non-fresh lookup), a full response replaces it, a 5xx or a
    /// failed callout keeps it (never replace a good object with a 5xx).
    pub(super) fn revalidate(
        &self,
        p: &Policy,
        job: &Job,
        base: &StoredObject,
        headers: &[(String, Vec<u8>)],
        r: Option<&OriginResponse>,
    ) -> Revalidated {
        let Some(r) = r else {
            Metrics::inc(self.m().origin_errors);
            return Revalidated::Kept;
        };
        let at = host::now();
        let now = Timestamp::from_system_time(at);
        let meta = &base.h.meta;
        let plan = job.plan(p, at);
        let answer = r.not_modified(p, &plan);
        match on_revalidation(&meta.times, &meta.validators, r.status, now, answer) {
            Revalidation::Freshen { times, validators } => {
                // A ban or purge added while the request was out still applies to the
                // stored copy: a 304 must not give it a new insertion time.
                self.sync_bans();
                let req = Req {
                    url: &job.target,
                    headers,
                };
                let banned = self.bans.borrow().check(base, &req) == Check::Banned;
                let current = self.shared.get().get(&job.key);
                if banned || current.is_some_and(|c| c.h.version > base.h.version) {
                    return Revalidated::Unusable;
                }
                let fresh = meta.freshened(
                    times,
                    validators,
                    r.headers
                        .iter()
                        .map(|(n, v)| (n.as_str(), String::from_utf8_lossy(v))),
                );
                Metrics::inc(self.m().revalidated);
                let obj = StoredObject::new(base.h.key.clone(), fresh, base.body.clone());
                Revalidated::Freshened(self.insert(obj, now))
            }
            Revalidation::Uncacheable => {
                self.insert(Self::marker(p, job, &plan, now), now);
                Revalidated::Uncacheable
            }
            Revalidation::Replace => Revalidated::Replaced(self.store_response(p, job, r, true)),
            Revalidation::KeepStored => {
                Metrics::inc(self.m().origin_errors);
                Revalidated::Kept
            }
        }
    }
}
