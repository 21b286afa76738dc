//! One HTTP stream: the request path (plan, cache, fetch), admin calls, passes.

#[allow(
    clippy::wildcard_imports,
    reason = "a seam of vm.rs: the parent module's types and imports"
)]
use super::*;

mod router;

/// Where one HTTP stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Not decided yet / answered locally.
    Local,
    /// Forwarded to the origin uncached.
    Pass,
    /// Waiting for the admin request body.
    AdminBody,
    /// Our origin fetch is in flight (collapsing leader).
    Fetching,
    /// Parked behind another request's fetch.
    Waiting,
    /// Fleet mode: an admin write is waiting for etcd's answer ([`Http::fleet`]).
    AdminEtcd,
    /// Our fill is going through Envoy's router (`[envoy].fill = "router"`, collapsing
    /// leader): its answer is read in the response callbacks.
    RouterFill,
}

/// A request's own edits for the upstream: our device header (replacing the client's,
/// which was removed) and the normalized `:path` when it differs. A request answered from
/// cache never goes upstream, so a hit skips these host calls.
#[derive(Debug, Default)]
struct Forward {
    /// `None` until planned (nothing is forwarded before).
    device: Option<cachet_policy::DeviceClass>,
    path: Option<String>,
}

impl Forward {
    fn apply(&self, p: &Policy) {
        if let Some(d) = self.device {
            host::set_header(
                MapType::HttpRequestHeaders,
                p.device_header(),
                Some(d.as_str().as_bytes()),
            );
        }
        if let Some(path) = &self.path {
            host::set_header(MapType::HttpRequestHeaders, ":path", Some(path.as_bytes()));
        }
    }
}

/// One HTTP stream.
pub struct Http {
    vm: Rc<Vm>,
    ctx: u32,
    phase: Phase,
    passed: Flag,
    client: Client,
    job: Option<Job>,
    /// This request's own edits, written when it goes upstream.
    forward: Forward,
    admin: Option<AdminRequest>,
    body: Vec<u8>,
    started_ms: u64,
    lock_held: bool,
    /// The stored object this stream's fetch revalidates (past grace, within keep) and
    /// the times it was found with.
    base: Option<(Rc<StoredObject>, EntryTimes)>,
    /// A passed unsafe request (`POST`, `PUT`, `DELETE`, `PATCH`): method, normalized host
    /// and target, to invalidate after a non-error answer (RFC 9111 §4.4).
    unsafe_target: Option<(String, String, String)>,
    /// A router fill's answer headers, held while its body is read.
    fill_head: Option<Vec<(String, Vec<u8>)>>,
    /// The fields of `fill_head` respaced from Envoy's joined form
    /// (`cachet_http::fields::respace_joined_lists`), written back if it streams on.
    fill_respaced: Vec<String>,
    /// Fleet mode: the admin write sent to etcd, answered when etcd answers.
    fleet: Option<admin::FleetWrite>,
}

impl Http {
    /// A new stream of `vm`.
    pub fn new(vm: Rc<Vm>, ctx: u32) -> Self {
        Self {
            vm,
            ctx,
            phase: Phase::Local,
            passed: Rc::new(Cell::new(false)),
            client: Client::default(),
            job: None,
            forward: Forward::default(),
            admin: None,
            body: Vec::new(),
            started_ms: 0,
            lock_held: false,
            base: None,
            unsafe_target: None,
            fill_head: None,
            fill_respaced: Vec::new(),
            fleet: None,
        }
    }

    /// `on_http_request_headers`. A hit makes five host calls: the header map, the clock,
    /// the ban epoch, the local reply and the hit counter (`tests.rs` counts them); the
    /// request's own edits (device header, normalized `:path`) are written only when it
    /// goes upstream (`Forward`).
    pub fn on_request_headers(&mut self, end_of_stream: bool) -> crate::host::Action {
        use crate::host::Action;
        let mut headers = host::headers(MapType::HttpRequestHeaders);
        // Read before the reserved fields go: a fleet edge's fill to this shield.
        let edge_tier = self.vm.policy().is_some_and(|p| {
            cachet_http::fields::from_edge_tier(headers.as_slice(), p.config().envoy.shield)
        });
        // Client-supplied x-cachet-* never reach the origin (house rule).
        headers.retain(|(n, _)| {
            if fields::reserved(n) {
                host::set_header(MapType::HttpRequestHeaders, n, None);
                false
            } else {
                true
            }
        });
        let Some(p) = self.vm.policy() else {
            send_error(&WorkerError::Config(PolicyError::Invalid(Vec::new())));
            return Action::Pause;
        };
        // A missing or malformed authority is the plan's `400` before anything else reads
        // the request, admin calls included, as on the edge (`cachet_http::authority`).
        if let Err(refused) = cachet_http::authority::authority(headers.as_slice()) {
            Metrics::inc(self.vm.m().synth);
            send_reply(&refused);
            return Action::Pause;
        }
        let path = header(&headers, ":path").unwrap_or_default().to_owned();
        let method = header(&headers, ":method").unwrap_or_default().to_owned();
        // Admin look-alikes (`/.CACHET/ban`, `/%2ecachet/ban`) are admin calls too: a
        // token meant for the admin API never reaches the origin.
        if let Some(admin_path) = cachet_policy::admin::admin_path(&path) {
            return self.admin_headers(&p, &headers, method, &admin_path, end_of_stream);
        }
        let at = host::now();
        let mut inputs = cachet_http::Inputs::read(&method, "http", &path, headers.as_slice());
        // Envoy may take the body's framing fields off the header map; the stream says
        // whether content follows (a "fat GET" is passed: `PassReason::Body`).
        inputs.has_body |= !end_of_stream;
        let mut plan = p.plan(&inputs.view(), at);
        if matches!(plan.decision, Decision::Synth(_)) && host::downstream_tls() {
            // The scheme only shapes synthesized bodies (robots.txt): the connection's
            // TLS is read for them alone. (Envoy may derive `:scheme` from a client's
            // X-Forwarded-Proto, which counts only when `[edge].trust_forwarded`.)
            drop(plan);
            "https".clone_into(&mut inputs.scheme);
            plan = p.plan(&inputs.view(), at);
        }
        self.client = Client::read(&method, headers.as_slice());
        self.client.keep_surrogate = edge_tier;
        self.forward = Forward {
            device: Some(plan.device),
            path: (plan.target != path).then(|| plan.target.to_string()),
        };
        match &plan.decision {
            Decision::Synth(s) => {
                Metrics::inc(self.vm.m().synth);
                send_synth(s);
                return Action::Pause;
            }
            Decision::Pass(_) => {
                if cachet_http::invalidate::invalidates(&method) {
                    self.unsafe_target = Some((
                        method.clone(),
                        plan.host.to_string(),
                        plan.target.to_string(),
                    ));
                }
                return self.pass(&p);
            }
            Decision::Cache => {}
        }
        let (target, key, early) = (
            plan.target.to_string(),
            plan.cache_key.clone(),
            p.early_refresh(&plan),
        );
        drop(plan);
        let job = Job {
            want: Wanted {
                slot: self.vm.cache.borrow().slot_of(&key),
                key,
                target,
                fields: headers,
                early,
            },
            inputs,
        };
        self.cache(&p, job, at)
    }

    /// Lets the request go to the origin through Envoy's router, uncached (`PASS`).
    fn pass(&mut self, p: &Policy) -> crate::host::Action {
        self.forward.apply(p);
        self.phase = Phase::Pass;
        Metrics::inc(self.vm.m().passes);
        crate::host::Action::Continue
    }

    /// An admin call (`/.cachet/*`): answered at once, or after its body for
    /// `POST /.cachet/ban`.
    fn admin_headers(
        &mut self,
        p: &Policy,
        headers: &[(String, Vec<u8>)],
        method: String,
        path: &str,
        end_of_stream: bool,
    ) -> crate::host::Action {
        use crate::host::Action;
        let get = |n: &str| header(headers, n).map(str::to_owned);
        self.admin = Some(AdminRequest {
            method,
            path: path.split('?').next().unwrap_or("").to_owned(),
            authorization: get("authorization"),
            surrogate_key: get("surrogate-key"),
            soft: get("fastly-soft-purge").is_some_and(|v| v.trim() == "1"),
        });
        // Only `POST /.cachet/ban` reads its body: every other call is answered now,
        // even when a (possibly empty) body follows, so its headers never reach the
        // origin (whose answer could otherwise beat the local reply).
        if end_of_stream || !self.admin.as_ref().is_some_and(AdminRequest::reads_body) {
            self.answer_admin(p);
            return Action::Pause;
        }
        // The ban expression follows; the headers wait for it. With the plugin option
        // `allow_on_headers_stop_iteration` (envoy.yaml) the body reaches
        // on_request_body and the headers never go upstream. Without it Envoy turns
        // the pause into StopAllIterationAndWatermark and withholds the body: the
        // root tick then resumes the stream (`Vm::resume_admin_bodies`), the headers
        // go upstream stripped of the token, and the buffered body reaches this filter
        // in the same dispatch, so the local reply comes before any upstream answer
        // (docs/envoy.md).
        host::set_header(MapType::HttpRequestHeaders, "authorization", None);
        self.phase = Phase::AdminBody;
        self.vm
            .admin_waiting
            .borrow_mut()
            .push((self.ctx, host::now_ms()));
        Action::Pause
    }

    /// A cacheable request: answered from either tier when servable, else
    /// [`Self::collapse`]d onto one origin fetch.
    pub(super) fn cache(
        &mut self,
        p: &Policy,
        mut job: Job,
        at: SystemTime,
    ) -> crate::host::Action {
        use crate::host::Action;
        let vm = Rc::clone(&self.vm);
        let m = vm.m();
        let now = Timestamp::from_system_time(at);
        let now_ms = now.as_millis();
        let staleness = p.config().envoy.ban_staleness.0;
        if vm
            .cache
            .borrow_mut()
            .sync_bans_for_lookup(&HostData, now_ms, staleness)
        {
            vm.flush();
        }
        let found = vm.cache.borrow_mut().find(&HostData, &mut job.want, now);
        vm.flush();
        let Ok(found) = found else {
            // The request's variant can't be keyed (a varying field over the bound).
            return self.pass(p);
        };
        let what = match &found {
            None => Found::Nothing,
            Some(f) if f.obj.h.meta.pass => Found::Marker,
            Some(f) => Found::Object {
                freshness: f.fresh,
                soft_purged: f.soft_purged,
                has_grace: !f.times.grace.is_zero(),
                ahead: false,
            },
        };
        // Collapsing elects one leader across workers after this, so every request may
        // fill; banned copies were dropped by the lookup.
        let rights = Rights {
            fill: true,
            relookup: false,
            only_if_cached: self.client.only_if_cached,
        };
        match (lookup::next(what, rights), found) {
            (Next::Serve { status, refresh }, Some(found)) => {
                if refresh {
                    vm.schedule_refresh(&job, &found.obj, now_ms);
                }
                Metrics::inc(match (status, found.tier) {
                    (CacheStatus::Stale, _) => m.stale,
                    (_, Tier::Local) => m.hits_local,
                    _ => m.hits_shared,
                });
                vm.respond(&found.obj, status, &self.client, at);
                Action::Pause
            }
            (Next::NotCached, _) => {
                // RFC 9111 §5.2.1.7: nothing servable is stored, and the origin is off limits.
                send_reply(&cachet_http::reply::failure(Failure::NotCached));
                Action::Pause
            }
            (Next::Revalidate | Next::Fill, found) => {
                // Not answered from cache: this request may go upstream (resumed after a
                // wait). Past grace, within keep: the leader revalidates the stored copy.
                self.forward.apply(p);
                let base = found.map(|f| (f.obj, f.times));
                self.collapse(p, job, base, now_ms)
            }
            _ => self.pass(p),
        }
    }

    /// Nothing servable: fetch as the collapsing leader (revalidating `base` when it is
    /// set), or park behind another request's fetch of the key, or pass when this
    /// worker's queue is full (`collapse.max_waiters`, `collapse.max_keys`).
    fn collapse(
        &mut self,
        p: &Policy,
        job: Job,
        base: Option<(Rc<StoredObject>, EntryTimes)>,
        now_ms: u64,
    ) -> crate::host::Action {
        use crate::host::Action;
        let vm = Rc::clone(&self.vm);
        let m = vm.m();
        let lease = now_ms + p.config().collapse.lease_ms;
        match locks::acquire(&HostData, job.want.slot, vm.owner(self.ctx), now_ms, lease) {
            Lock::Held => {
                let seen = vm.cache.borrow().version_of(&HostData, &job.want.key);
                let waiter = Waiter {
                    ctx: self.ctx,
                    job: job.clone(),
                    client: self.client.clone(),
                    passed: Rc::clone(&self.passed),
                    seen,
                    since_ms: now_ms,
                };
                let now = Timestamp::from_millis(now_ms);
                let parked = vm.waiters.borrow_mut().park(job.want.slot, waiter, now);
                if let Err((why, _)) = parked {
                    // This worker's queue is full (`collapse.max_waiters` for the key,
                    // `collapse.max_keys` keys): to the origin uncollapsed rather than
                    // grow it without bound.
                    Metrics::inc(match why {
                        Refused::KeyFull => m.collapse_key_full,
                        Refused::TooManyKeys => m.collapse_keys_full,
                    });
                    return self.pass(p);
                }
                Metrics::inc(m.collapsed);
                self.phase = Phase::Waiting;
                self.job = Some(job);
                Action::Pause
            }
            l => {
                self.lock_held = l == Lock::Acquired;
                if self.fills_through_router(p, base.is_some()) {
                    return self.fill_through_router(p, job);
                }
                self.base = base;
                self.fetch(p, job)
            }
        }
    }

    /// Dispatches this stream's origin fetch (conditional when it revalidates a stored
    /// object). `Continue` when the request goes upstream itself instead: a field the
    /// fetch must carry has a value the host's callouts cannot carry exactly
    /// (`Status::SerializationFailure`), so the request is passed with its own bytes,
    /// its answer unstored, rather than filled from a request the origin did not see.
    pub(super) fn fetch(&mut self, p: &Policy, job: Job) -> crate::host::Action {
        use crate::host::Action;
        self.started_ms = host::now_ms();
        let r = Vm::dispatch(p, &job, self.base.as_ref().map(|(b, _)| &**b));
        self.job = Some(job);
        match r {
            Ok(_) => {
                Metrics::inc(self.vm.m().misses);
                self.phase = Phase::Fetching;
            }
            Err(crate::host::Status::SerializationFailure) => {
                self.base = None;
                self.release();
                if let Some(job) = &self.job {
                    self.vm.wake(Some(job.want.slot));
                }
                self.phase = Phase::Pass;
                self.passed.set(true);
                Metrics::inc(self.vm.m().passes);
                return Action::Continue;
            }
            Err(e) => {
                Metrics::inc(self.vm.m().origin_errors);
                self.origin_failed(&format!("dispatch refused: {e:?}"));
                self.release();
                if let Some(job) = &self.job {
                    self.vm.wake(Some(job.want.slot));
                }
            }
        }
        Action::Pause
    }

    pub(super) fn release(&mut self) {
        if self.lock_held {
            self.lock_held = false;
            if let Some(job) = &self.job {
                locks::release(&HostData, job.want.slot, self.vm.owner(self.ctx));
            }
        }
    }

    /// Records that this stream's fetch failed, for the requests parked behind it on
    /// every worker (before its lock is released): they are answered as this one is.
    pub(super) fn record_failure(&self) {
        if let (Some(job), Some(p)) = (&self.job, self.vm.policy()) {
            let memory = p.config().collapse.max_wait_ms;
            locks::record_failure(&HostData, job.want.slot, host::now_ms(), memory);
        }
    }

    /// The origin failed and this stream has nothing fresh: stale within grace or the
    /// object's stale-if-error window (`cachet_refresh::on_origin_error`), else a clean
    /// `503` with `Retry-After` and `Cache-Control: no-store`. The failure is recorded
    /// for the waiters ([`Self::record_failure`]).
    pub(super) fn origin_failed(&mut self, reason: &str) {
        self.record_failure();
        let at = host::now();
        match self.base.take() {
            Some((obj, times)) if stale_copy_allowed(&obj, &times, at) => {
                Metrics::inc(self.vm.m().stale);
                self.vm.respond(&obj, CacheStatus::Stale, &self.client, at);
            }
            _ => send_error(&WorkerError::unavailable(reason)),
        }
    }

    /// Fleet mode: etcd answered this stream's admin write (`None`: it failed); the
    /// client's answer goes out, and this node polls on its next tick.
    fn fleet_answered(&mut self, answer: Option<(u16, &[u8])>) {
        self.phase = Phase::Local;
        let Some(w) = self.fleet.take() else { return };
        let (r, fx) = admin::fleet_answer(&w, answer);
        admin::count(&self.vm.m(), fx);
        send_reply(&r);
        if r.status < 300 {
            bans::request_poll(&HostData, host::now_ms());
        }
    }

    /// A callout of this stream answered: the leader's origin fetch, or in fleet mode an
    /// admin write's etcd transaction.
    pub fn on_fetch_response(&mut self, _token: u32, nh: usize, body_size: usize) {
        if self.phase == Phase::AdminEtcd {
            let answer = fleet::answer(nh, body_size);
            self.fleet_answered(answer.as_ref().map(|(s, b)| (*s, b.as_slice())));
            return;
        }
        let vm = Rc::clone(&self.vm);
        let (Some(p), Some(job)) = (vm.policy(), self.job.clone()) else {
            return;
        };
        let limit = p.config().edge.max_object_bytes;
        let r = OriginResponse::read(nh, body_size, self.started_ms, limit);
        if let Some(r) = r.as_ref().filter(|r| r.oversized) {
            // Too large to store or to copy into the VM: leave a marker when it replaces a
            // stored object, and let this request (and its waiters) through the router to
            // the origin, streamed by Envoy.
            let _ = vm.store_response(&p, &job, r, self.base.is_some());
            self.base = None;
            self.release();
            self.phase = Phase::Pass;
            self.passed.set(true);
            Metrics::inc(vm.m().passes);
            host::resume_request();
            vm.wake(Some(job.want.slot));
            return;
        }
        if !self.answer_fetch(&vm, &p, &job, r.as_ref()) {
            // The 304 does not apply to what is stored now: fetch unconditionally.
            self.base = None;
            if self.fetch(&p, job) == crate::host::Action::Continue {
                host::resume_request();
            }
            return;
        }
        self.base = None;
        self.release();
        self.phase = Phase::Local;
        vm.wake(Some(job.want.slot));
    }

    /// Applies the leader's origin answer `r` (`None`: the callout failed) and answers
    /// this client: the stored or freshened object (`MISS`); the origin's answer when it
    /// was not stored, or when it is an error to a revalidation past grace and
    /// stale-if-error (RFC 9111 §4.3.3); a per-user 304's own answer (the stored body with
    /// the 304's fields and cookies, `PASS`); else stale or `503` ([`Self::origin_failed`]).
    /// The same rules as the edge's (`cachet_http::exchange`). Returns `false` when the
    /// answer is unusable (a 304 for an object changed meanwhile): nothing was sent.
    fn answer_fetch(
        &mut self,
        vm: &Rc<Vm>,
        p: &Policy,
        job: &Job,
        r: Option<&OriginResponse>,
    ) -> bool {
        let at = host::now();
        let fetched = match (r, self.base.clone()) {
            (None, None) => {
                Metrics::inc(vm.m().origin_errors);
                None
            }
            (Some(r), None) => Some(vm.store_response(p, job, r, false)),
            (_, Some((obj, times))) => match vm.revalidate(p, job, &obj, r) {
                Revalidated::Freshened(fresh) => Some(Stored::Object(fresh)),
                Revalidated::Replaced(f) => Some(f),
                Revalidated::Unusable => return false,
                Revalidated::Uncacheable(theirs) => {
                    // This client gets the stored body with the 304's fields and its own
                    // cookies; the marker keeps everybody else off the stored copy.
                    let theirs = StoredObject::new(obj.h.key.clone(), *theirs, obj.body.clone());
                    let cookies: Vec<(&str, &[u8])> = r
                        .map(|r| r.headers.as_slice())
                        .unwrap_or_default()
                        .iter()
                        .filter(|(n, _)| n.eq_ignore_ascii_case("set-cookie"))
                        .map(|(_, v)| ("set-cookie", v.as_slice()))
                        .collect();
                    Metrics::inc(vm.m().passes);
                    vm.respond_with(&theirs, CacheStatus::Pass, &self.client, at, &cookies);
                    return true;
                }
                Revalidated::Kept => match r {
                    Some(r) if !stale_copy_allowed(&obj, &times, at) => {
                        self.record_failure();
                        self.send_origin(r.status, &r.headers, &r.body);
                        return true;
                    }
                    _ => None,
                },
            },
        };
        match (fetched, r) {
            // A freshened or replaced object waited on the origin: MISS.
            (Some(Stored::Object(obj)), _) => vm.respond(&obj, CacheStatus::Miss, &self.client, at),
            (Some(Stored::Pass), Some(r)) => self.send_origin(r.status, &r.headers, &r.body),
            (_, r) => self.origin_failed(&r.map_or_else(
                || "no response".to_owned(),
                |r| format!("status {}", r.status),
            )),
        }
        true
    }

    /// Sends a fill's origin answer that was not stored (`PASS`), as the engine says
    /// (`cachet_http::unstored`: the fill carried our `Accept-Encoding`); the origin's
    /// values go out as their bytes.
    pub(super) fn send_origin(&self, status: u16, headers: &[(String, Vec<u8>)], body: &[u8]) {
        let u = cachet_http::unstored(headers, &self.client, CacheStatus::Pass, true);
        let inflated = if u.inflate {
            object::gunzip(body).ok()
        } else {
            None
        };
        let out: &[u8] = inflated.as_deref().unwrap_or(body);
        let len = out.len().to_string();
        let kept = |n: &str| {
            !n.starts_with(':')
                && !n.eq_ignore_ascii_case("content-length")
                && !n.eq_ignore_ascii_case("transfer-encoding")
                && !(u.remove.iter().any(|r| r.eq_ignore_ascii_case(n))
                    && (inflated.is_some() || !n.eq_ignore_ascii_case("content-encoding")))
        };
        let mut h: Vec<(&str, &[u8])> = headers
            .iter()
            .filter(|(n, _)| kept(n))
            .map(|(n, v)| (n.as_str(), v.as_slice()))
            .collect();
        h.push(("content-length", len.as_bytes()));
        h.extend(u.set.iter().map(|(n, v)| (*n, v.as_bytes())));
        Metrics::inc(self.vm.m().passes);
        host::send(status, &h, u.body.then_some(out));
    }

    /// `on_http_request_body`: only admin calls read bodies.
    pub fn on_request_body(&mut self, size: usize, end_of_stream: bool) -> crate::host::Action {
        use crate::host::Action;
        if self.phase == Phase::AdminEtcd {
            // An admin call waiting for etcd: its (empty) body never goes upstream.
            return Action::Pause;
        }
        if self.phase != Phase::AdminBody {
            return Action::Continue;
        }
        self.vm.admin_body_arrived(self.ctx);
        if size > admin::MAX_BODY_BYTES {
            // The refusal the edge sends for a declared length over the limit.
            send_reply(&cachet_http::reply::admin_error(
                &cachet_policy::admin::AdminError::PayloadTooLarge {
                    len: size,
                    limit: admin::MAX_BODY_BYTES,
                },
            ));
            self.phase = Phase::Local;
            return Action::Pause;
        }
        if !end_of_stream {
            return Action::Pause;
        }
        self.body = host::buffer(BufferType::HttpRequestBody, size);
        if let Some(p) = self.vm.policy() {
            self.answer_admin(&p);
        }
        Action::Pause
    }

    pub(super) fn answer_admin(&mut self, p: &Policy) {
        let Some(req) = self.admin.take() else { return };
        self.phase = Phase::Local;
        Metrics::inc(self.vm.m().synth);
        // `GET /.cachet/config`: the configuration in force (`cachet_policy::inforce`).
        if let Some((r, fx)) = admin::config_call(p, &req, || self.vm.config_body()) {
            admin::count(&self.vm.m(), fx);
            send_reply(&r);
            return;
        }
        let envoy = &p.config().envoy;
        if !envoy.etcd_cluster.is_empty() {
            let now_ms = host::now_ms();
            let (prefix, suffix) = (&envoy.etcd_prefix, random_u64());
            match admin::handle_fleet(&HostData, p, &req, &self.body, now_ms, prefix, suffix) {
                admin::Fleet::Reply(r, fx) => {
                    admin::count(&self.vm.m(), fx);
                    send_reply(&r);
                }
                admin::Fleet::Write(w) => {
                    let path = cachet_store::etcd::TXN_PATH;
                    if fleet::call(&envoy.etcd_cluster, path, &w.txn).is_some() {
                        self.fleet = Some(w);
                        self.phase = Phase::AdminEtcd;
                    } else {
                        self.fleet = Some(w);
                        self.fleet_answered(None);
                    }
                }
            }
            return;
        }
        let a = admin::handle(p, &self.vm.m(), &req, &self.body, host::now_ms());
        send_reply(&a);
        // A ban or purge applies to this VM's next request at once.
        self.vm.sync_bans();
    }

    /// `on_http_response_headers`: responses from the origin through Envoy's router
    /// (passes) get the edge's headers.
    pub fn on_response_headers(&mut self, end_of_stream: bool) -> crate::host::Action {
        if self.phase == Phase::RouterFill {
            return self.router_fill_headers(end_of_stream);
        }
        if self.phase == Phase::Pass || self.passed.get() {
            let mut hs = host::headers(MapType::HttpResponseHeaders);
            let respaced = cachet_http::fields::respace_joined_lists(&mut hs);
            edit_passed_headers(&hs, &respaced, &self.client);
            if let (Some((method, h, target)), Some(p)) =
                (self.unsafe_target.take(), self.vm.policy())
            {
                let status = status_of(&hs).unwrap_or(0);
                let keys =
                    cachet_http::invalidation_keys(&p, &method, status, &h, &target, hs.as_slice());
                if bans::purge_keys(&HostData, &keys, p.config().bans.max_bans, host::now_ms())
                    .is_ok()
                {
                    Metrics::add(self.vm.m().purges, keys.len() as u64);
                    self.vm.sync_bans();
                }
            }
        }
        crate::host::Action::Continue
    }

    /// `on_http_response_body`: only a router fill reads the answer's body.
    pub fn on_response_body(&mut self, size: usize, end_of_stream: bool) -> crate::host::Action {
        if self.phase == Phase::RouterFill {
            return self.router_fill_body(size, end_of_stream);
        }
        crate::host::Action::Continue
    }

    /// The stream ended: give up a lock still held (client went away) and leave the
    /// waiting list.
    pub fn finish(&mut self) {
        // Envoy's `response.code_details`: `upstream_reset_…`, `response_timeout`,
        // `upstream_per_try_timeout`… for an origin that failed; `downstream_…` when the
        // client went away.
        let upstream_failed = || {
            host::response_code_details()
                .is_some_and(|d| d != b"via_upstream" && !d.starts_with(b"downstream_"))
        };
        if self.phase == Phase::RouterFill && self.lock_held && upstream_failed() {
            // The fill's answer never completed because the origin failed (its body broke
            // after the headers, or stalled past the route's timeout, and Envoy answered
            // or reset the client itself): a failure for its waiters. A client that went
            // away is not one: they go on as before.
            self.record_failure();
        }
        self.release();
        self.vm.admin_body_arrived(self.ctx);
        if self.phase == Phase::Waiting {
            let ctx = self.ctx;
            if let Some(job) = &self.job {
                (self.vm.waiters.borrow_mut()).cancel(&job.want.slot, |w| w.ctx == ctx);
            }
        }
        if let Some(job) = &self.job {
            self.vm.wake(Some(job.want.slot));
        }
    }
}

/// The edge's edits to an answer Envoy forwards itself (a pass, an oversized router
/// fill): `cachet_http::unstored`'s removals and settings, and the `respaced` fields of
/// `hs` ([`cachet_http::fields::respace_joined_lists`]) written back. A pass forwarded the
/// client's own `Accept-Encoding`: nothing to inflate.
fn edit_passed_headers(hs: &[(String, Vec<u8>)], respaced: &[String], client: &Client) {
    let u = cachet_http::unstored(hs, client, CacheStatus::Pass, false);
    for n in &u.remove {
        host::set_header(MapType::HttpResponseHeaders, n, None);
    }
    for (n, v) in &u.set {
        host::set_header(MapType::HttpResponseHeaders, n, Some(v.as_bytes()));
    }
    for n in respaced {
        if u.remove.iter().any(|r| r.eq_ignore_ascii_case(n))
            || u.set.iter().any(|(r, _)| r.eq_ignore_ascii_case(n))
        {
            continue;
        }
        if let Some((_, v)) = hs.iter().find(|(h, _)| h == n) {
            host::set_header(MapType::HttpResponseHeaders, n, Some(v));
        }
    }
}

/// Whether an origin failure at `at` may be answered with `obj`, found with `times`
/// (`cachet_http::exchange::stale_if_error`, the edge's rule).
pub(super) fn stale_copy_allowed(obj: &StoredObject, times: &EntryTimes, at: SystemTime) -> bool {
    cachet_http::exchange::stale_if_error(&obj.h.meta, times, Timestamp::from_system_time(at))
}
