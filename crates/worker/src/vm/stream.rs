//! One HTTP stream: the request path (plan, cache, fetch), admin calls, passes.

#[allow(
    clippy::wildcard_imports,
    reason = "a seam of vm.rs: the parent module's types and imports"
)]
use super::*;

use super::flow::{Flow, FlowRef, Forward, Go, Stage, Via, edit_passed_headers};
use cachet_http::stitch::Stitcher;

/// Where one HTTP stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Not decided yet / answered locally.
    Local,
    /// Forwarded to the origin uncached.
    Pass,
    /// Waiting for the admin request body.
    AdminBody,
    /// Fleet mode: an admin write is waiting for etcd's answer ([`Http::fleet`]).
    AdminEtcd,
    /// A cacheable request: where it is, is its flow's ([`Flow`]).
    Cached,
    /// A request answered by combining slices: waiting for a part ([`Http::stitch`]).
    Stitching,
}

/// A request answered by combining its slices (`cachet_http::stitch`): each part goes
/// through `[envoy].slice_cluster` back into this Envoy as a range inside one slice.
struct Stitching {
    s: Stitcher,
    /// The client's request lines, for the parts and for its ordinary flow.
    headers: Vec<(String, Vec<u8>)>,
    path: String,
    edge_tier: bool,
    /// The parts' bodies so far (at most `[edge].max_object_bytes`: the stitcher's bound).
    body: Vec<u8>,
}

/// One HTTP stream.
pub struct Http {
    vm: Rc<Vm>,
    ctx: u32,
    phase: Phase,
    client: Client,
    /// This request's own edits, written when it goes upstream.
    forward: Forward,
    /// A cacheable request's flow (shared with the wait queue while it is parked).
    flow: Option<FlowRef>,
    admin: Option<AdminRequest>,
    body: Vec<u8>,
    /// A passed unsafe request (`POST`, `PUT`, `DELETE`, `PATCH`): method, normalized host
    /// and target, to invalidate after a non-error answer (RFC 9111 §4.4).
    unsafe_target: Option<(String, String, String)>,
    /// Fleet mode: the admin write sent to etcd, answered when etcd answers.
    fleet: Option<admin::FleetWrite>,
    /// A request answered by combining slices, while its parts come back.
    stitch: Option<Stitching>,
    /// The slices did not combine: the request takes its ordinary flow.
    unstitched: bool,
}

impl Http {
    /// A new stream of `vm`.
    pub fn new(vm: Rc<Vm>, ctx: u32) -> Self {
        Self {
            vm,
            ctx,
            phase: Phase::Local,
            client: Client::default(),
            forward: Forward::default(),
            flow: None,
            admin: None,
            body: Vec::new(),
            unsafe_target: None,
            fleet: None,
            stitch: None,
            unstitched: false,
        }
    }

    /// `on_http_request_headers`. A hit makes five host calls: the header map, the clock,
    /// the ban epoch, the local reply and the hit counter (`tests.rs` counts them); the
    /// request's own edits (device header, normalized `:path`) are written only when it
    /// goes upstream (`Forward`).
    pub fn on_request_headers(&mut self, end_of_stream: bool) -> crate::host::Action {
        use crate::host::Action;
        let mut headers = self.vm.port.headers(MapType::HttpRequestHeaders);
        // Read before the reserved fields go: a fleet edge's fill to this shield.
        let edge_tier = self.vm.policy().is_some_and(|p| {
            cachet_http::fields::from_edge_tier(headers.as_slice(), p.config().envoy.shield)
        });
        // Client-supplied x-cachet-* never reach the origin (house rule).
        headers.retain(|(n, _)| {
            if fields::reserved(n) {
                self.vm
                    .port
                    .set_header(MapType::HttpRequestHeaders, n, None);
                false
            } else {
                true
            }
        });
        let Some(p) = self.vm.policy() else {
            send_error(
                &self.vm.port,
                &WorkerError::Config(PolicyError::Invalid(Vec::new())),
            );
            return Action::Pause;
        };
        // A missing or malformed authority is the plan's `400` before anything else reads
        // the request, admin calls included, as on the edge (`cachet_http::authority`).
        if let Err(refused) = cachet_http::authority::authority(headers.as_slice()) {
            Metrics::inc(&self.vm.port, self.vm.m().synth);
            send_reply(&self.vm.port, &refused);
            return Action::Pause;
        }
        let path = header(&headers, ":path").unwrap_or_default().to_owned();
        let method = header(&headers, ":method").unwrap_or_default().to_owned();
        // Admin look-alikes (`/.CACHET/ban`, `/%2ecachet/ban`) are admin calls too: a
        // token meant for the admin API never reaches the origin.
        if let Some(admin_path) = cachet_policy::admin::admin_path(&path) {
            return self.admin_headers(&p, &headers, method, &admin_path, end_of_stream);
        }
        self.plan_request(&p, headers, &method, &path, (end_of_stream, edge_tier))
    }

    /// Plans a request that is not an admin call and answers it (synthesized), passes it,
    /// or starts its cacheable flow. `framing`: whether the headers ended the stream, and
    /// whether it comes from a fleet edge to this shield.
    fn plan_request(
        &mut self,
        p: &Policy,
        headers: Vec<(String, Vec<u8>)>,
        method: &str,
        path: &str,
        (end_of_stream, edge_tier): (bool, bool),
    ) -> crate::host::Action {
        use crate::host::Action;
        let at = self.vm.port.now();
        let mut inputs = cachet_http::Inputs::read(method, "http", path, headers.as_slice());
        // Envoy may take the body's framing fields off the header map; the stream says
        // whether content follows (a "fat GET" is passed: `PassReason::Body`).
        inputs.has_body |= !end_of_stream;
        // Shared with the flow from the start, so a `GET`'s plan is made once.
        let mut job = Rc::new(Job { inputs });
        let mut plan = p.plan(&job.inputs.view(), at);
        if matches!(plan.decision, Decision::Synth(_)) && self.vm.port.downstream_tls() {
            // The scheme only shapes synthesized bodies (robots.txt): the connection's
            // TLS is read for them alone. (Envoy may derive `:scheme` from a client's
            // X-Forwarded-Proto, which counts only when `[edge].trust_forwarded`.)
            drop(plan);
            if let Some(j) = Rc::get_mut(&mut job) {
                "https".clone_into(&mut j.inputs.scheme);
            }
            plan = p.plan(&job.inputs.view(), at);
        }
        self.client = Client::read(method, headers.as_slice());
        self.client.keep_surrogate = edge_tier;
        self.forward = Forward {
            device: Some(plan.device),
            path: (plan.target != path).then(|| plan.target.to_string()),
        };
        match &plan.decision {
            Decision::Synth(s) => {
                Metrics::inc(&self.vm.port, self.vm.m().synth);
                send_synth(&self.vm.port, s);
                return Action::Pause;
            }
            Decision::Pass(_) => {
                if cachet_http::invalidate::invalidates(method) {
                    let target = (
                        method.to_owned(),
                        plan.host.to_string(),
                        plan.target.to_string(),
                    );
                    self.unsafe_target = Some(target);
                }
                return self.pass(p);
            }
            Decision::Cache => {}
        }
        let slice_cluster = &p.config().envoy.slice_cluster;
        if let Some(want) = plan
            .stitch
            .filter(|_| !self.unstitched && !slice_cluster.is_empty())
        {
            let max = p.config().edge.max_object_bytes;
            self.stitch = Some(Stitching {
                s: Stitcher::new(want, Some(max)),
                headers,
                path: path.to_owned(),
                edge_tier,
                body: Vec::new(),
            });
            self.phase = Phase::Stitching;
            return self.next_part(p);
        }
        let want = Wanted {
            slot: self.vm.cache.borrow().slot_of(&plan.cache_key),
            key: plan.cache_key.clone(),
            target: plan.target.to_string(),
            fields: headers,
            early: p.early_refresh(&plan),
        };
        if method == "GET" {
            return self.start_flow(p, &plan, (Rc::clone(&job), want), at);
        }
        drop(plan);
        // The fill's plan (a `GET`'s, `Job::plan`), made at the same time: what the
        // exchange reads.
        let fill_plan = job.plan(p, at);
        self.start_flow(p, &fill_plan, (Rc::clone(&job), want), at)
    }

    /// A cacheable request planned as `plan` (a `GET`'s): its flow
    /// (`cachet_http::exchange`) starts here.
    fn start_flow(
        &mut self,
        p: &Policy,
        plan: &Plan<'_>,
        lookup: (Rc<Job>, Wanted),
        at: SystemTime,
    ) -> crate::host::Action {
        let seed = self.vm.cache.borrow_mut().draw();
        let forward = std::mem::take(&mut self.forward);
        // The flow answers this stream from now on: its client fields move there.
        let client = std::mem::take(&mut self.client);
        let flow = Flow::new(self.ctx, p, plan, lookup, client, forward, at, seed);
        let flow = Rc::new(RefCell::new(flow));
        self.flow = Some(Rc::clone(&flow));
        self.phase = Phase::Cached;
        let start = cachet_http::exchange::Event::Start;
        let go = (self.vm).drive(p, plan, &flow, start, Via::Request, at);
        self.vm.run_wakes();
        match go {
            Go::Upstream | Go::Downstream => crate::host::Action::Continue,
            Go::Paused => crate::host::Action::Pause,
        }
    }

    /// Lets the request go to the origin through Envoy's router, uncached (`PASS`).
    fn pass(&mut self, p: &Policy) -> crate::host::Action {
        self.forward.apply(&self.vm.port, p);
        self.phase = Phase::Pass;
        Metrics::inc(&self.vm.port, self.vm.m().passes);
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
        self.admin = Some(AdminRequest::read(method, path, headers));
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
        self.vm
            .port
            .set_header(MapType::HttpRequestHeaders, "authorization", None);
        self.phase = Phase::AdminBody;
        self.vm
            .admin_waiting
            .borrow_mut()
            .push((self.ctx, self.vm.port.now_ms()));
        Action::Pause
    }

    /// Fleet mode: etcd answered this stream's admin write (`None`: it failed); the
    /// client's answer goes out, and this node polls on its next tick.
    fn fleet_answered(&mut self, answer: Option<(u16, &[u8])>) {
        self.phase = Phase::Local;
        let Some(w) = self.fleet.take() else { return };
        let (r, fx) = admin::fleet_answer(&w, answer);
        admin::count(&self.vm.port, &self.vm.m(), fx);
        send_reply(&self.vm.port, &r);
        if r.status < 300 {
            bans::request_poll(&*self.vm.port, self.vm.port.now_ms());
        }
    }

    /// Asks for the next part of a stitched request through `[envoy].slice_cluster`: the
    /// client's lines with `Range` for one slice. Pauses the stream; a refused callout
    /// sends the request down its ordinary flow.
    fn next_part(&mut self, p: &Policy) -> crate::host::Action {
        let Some(st) = &self.stitch else {
            return crate::host::Action::Pause;
        };
        let range = st.s.range();
        let h = cachet_http::stitch::part_request(&st.path, st.headers.as_slice(), &range);
        let cfg = p.config();
        let sent = self.vm.port.dispatch(
            &cfg.envoy.slice_cluster,
            &h,
            None,
            cfg.origin.first_byte_timeout.0,
        );
        if sent.is_err() {
            return self.unstitch(p);
        }
        crate::host::Action::Pause
    }

    /// A part of a stitched request answered (`cachet_http::stitch::Stitcher::take`
    /// decides): ask for the next, send the combined answer or the part as it is, or run
    /// the request's ordinary flow.
    fn part_answered(&mut self, nh: usize, body_size: usize) {
        use cachet_http::stitch::Took;
        let Some(p) = self.vm.policy() else { return };
        let limit = p.config().edge.max_object_bytes;
        let answer =
            OriginResponse::read(&self.vm.port, nh, body_size, 0, limit).filter(|r| !r.oversized);
        let Some(st) = self.stitch.as_mut() else {
            return;
        };
        let Some(r) = answer else {
            self.unstitch(&p);
            return;
        };
        match st.s.take(r.status, &r.headers) {
            Took::More => {
                st.body.extend_from_slice(&r.body);
                self.next_part(&p);
            }
            Took::Done => {
                st.body.extend_from_slice(&r.body);
                let (status, fields) = st.s.head();
                send_fields(&self.vm.port, status, &fields, &st.body);
                self.stitch = None;
                self.phase = Phase::Local;
            }
            Took::AsIs => {
                send_fields(&self.vm.port, r.status, &r.headers, &r.body);
                self.stitch = None;
                self.phase = Phase::Local;
            }
            Took::Whole => {
                self.unstitch(&p);
            }
        }
    }

    /// The slices do not combine: the (paused) request runs its ordinary flow, and goes
    /// on upstream when that flow says so.
    fn unstitch(&mut self, p: &Policy) -> crate::host::Action {
        self.phase = Phase::Local;
        let Some(st) = self.stitch.take() else {
            return crate::host::Action::Pause;
        };
        self.unstitched = true;
        let action = self.plan_request(p, st.headers, "GET", &st.path, (true, st.edge_tier));
        if action == crate::host::Action::Continue {
            self.vm.port.resume_request();
        }
        crate::host::Action::Pause
    }

    /// A callout of this stream answered: its flow's origin fetch, a part of a stitched
    /// request, or in fleet mode an admin write's etcd transaction.
    pub fn on_fetch_response(&mut self, token: u32, nh: usize, body_size: usize) {
        if self.phase == Phase::AdminEtcd {
            let answer = fleet::answer(&self.vm.port, nh, body_size);
            self.fleet_answered(answer.as_ref().map(|(s, b)| (*s, b.as_slice())));
            return;
        }
        // A callout another flow sent while this stream's callback ran (a waiter woken
        // then): the host answers it here.
        if let Some(other) = self.vm.take_flow_call(token) {
            self.vm.flow_callout_elsewhere(&other, nh, body_size);
            self.vm.run_wakes();
            return;
        }
        if self.phase == Phase::Stitching {
            self.part_answered(nh, body_size);
            return;
        }
        let Some(flow) = self.flow.clone() else {
            return;
        };
        if self.vm.on_flow_callout(&flow, nh, body_size, Via::Stream) == Go::Upstream {
            self.vm.port.resume_request();
        }
        self.vm.run_wakes();
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
            send_reply(
                &self.vm.port,
                &cachet_http::reply::admin_error(
                    &cachet_policy::admin::AdminError::PayloadTooLarge {
                        len: size,
                        limit: admin::MAX_BODY_BYTES,
                    },
                ),
            );
            self.phase = Phase::Local;
            return Action::Pause;
        }
        if !end_of_stream {
            return Action::Pause;
        }
        self.body = self.vm.port.buffer(BufferType::HttpRequestBody, size);
        if let Some(p) = self.vm.policy() {
            self.answer_admin(&p);
        }
        Action::Pause
    }

    pub(super) fn answer_admin(&mut self, p: &Policy) {
        let Some(req) = self.admin.take() else { return };
        self.phase = Phase::Local;
        Metrics::inc(&self.vm.port, self.vm.m().synth);
        // `GET /.cachet/config`: the configuration in force (`cachet_policy::inforce`).
        if let Some((r, fx)) = admin::config_call(p, &req, || self.vm.config_body()) {
            admin::count(&self.vm.port, &self.vm.m(), fx);
            send_reply(&self.vm.port, &r);
            return;
        }
        let envoy = &p.config().envoy;
        if !envoy.etcd_cluster.is_empty() {
            let now_ms = self.vm.port.now_ms();
            let (prefix, suffix) = (&envoy.etcd_prefix, self.vm.port.random_u64());
            match admin::handle_fleet(&*self.vm.port, p, &req, &self.body, now_ms, prefix, suffix) {
                admin::Fleet::Reply(r, fx) => {
                    admin::count(&self.vm.port, &self.vm.m(), fx);
                    send_reply(&self.vm.port, &r);
                }
                admin::Fleet::Write(w) => {
                    let path = cachet_store::etcd::TXN_PATH;
                    if fleet::call(&self.vm.port, &envoy.etcd_cluster, path, &w.txn).is_some() {
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
        let a = admin::handle(
            &self.vm.port,
            p,
            &self.vm.m(),
            &req,
            &self.body,
            self.vm.port.now_ms(),
        );
        send_reply(&self.vm.port, &a);
        // A ban or purge applies to this VM's next request at once.
        self.vm.sync_bans();
    }

    /// The stage of this stream's flow, if it has one.
    fn stage(&self) -> Option<Stage> {
        self.flow.as_ref().map(|f| f.borrow().stage)
    }

    /// `on_http_response_headers`: a router fill's answer goes to its flow; responses
    /// from the origin through Envoy's router (passes) get the edge's headers.
    pub fn on_response_headers(&mut self, end_of_stream: bool) -> crate::host::Action {
        use crate::host::Action;
        let stage = self.stage();
        if stage == Some(Stage::Router)
            && let Some(flow) = self.flow.clone()
        {
            let go = self.vm.on_router_headers(&flow, end_of_stream);
            self.vm.run_wakes();
            return match go {
                Go::Paused => Action::Pause,
                Go::Upstream | Go::Downstream => Action::Continue,
            };
        }
        if self.phase == Phase::Pass || stage == Some(Stage::Passed) {
            let mut hs = self.vm.port.headers(MapType::HttpResponseHeaders);
            let respaced = cachet_http::fields::respace_joined_lists(&mut hs);
            match &self.flow {
                Some(f) => edit_passed_headers(&self.vm.port, &hs, &respaced, &f.borrow().client),
                None => edit_passed_headers(&self.vm.port, &hs, &respaced, &self.client),
            }
            if let (Some((method, h, target)), Some(p)) =
                (self.unsafe_target.take(), self.vm.policy())
            {
                let status = status_of(&hs).unwrap_or(0);
                let keys =
                    cachet_http::invalidation_keys(&p, &method, status, &h, &target, hs.as_slice());
                if bans::purge_keys(
                    &*self.vm.port,
                    &keys,
                    p.config().bans.max_bans,
                    self.vm.port.now_ms(),
                )
                .is_ok()
                {
                    Metrics::add(&self.vm.port, self.vm.m().purges, keys.len() as u64);
                    self.vm.sync_bans();
                }
            }
        }
        Action::Continue
    }

    /// `on_http_response_body`: only a router fill reads the answer's body.
    pub fn on_response_body(&mut self, size: usize, end_of_stream: bool) -> crate::host::Action {
        use crate::host::Action;
        if self.stage() == Some(Stage::Router)
            && let Some(flow) = self.flow.clone()
        {
            let go = self.vm.on_router_body(&flow, size, end_of_stream);
            self.vm.run_wakes();
            return match go {
                Go::Paused => Action::Pause,
                Go::Upstream | Go::Downstream => Action::Continue,
            };
        }
        Action::Continue
    }

    /// The stream ended: its flow ends (a router fill whose origin failed is a failure
    /// for its waiters; a parked flow leaves the queue; its lock is released) and the
    /// waiters of its slot look again.
    pub fn finish(&mut self) {
        self.vm.admin_body_arrived(self.ctx);
        let Some(flow) = self.flow.take() else {
            return;
        };
        // Envoy's `response.code_details`: `upstream_reset_…`, `response_timeout`,
        // `upstream_per_try_timeout`… for an origin that failed; `downstream_…` when the
        // client went away. Read only for a router fill (a property read per stream
        // otherwise).
        let upstream_failed = flow.borrow().stage == Stage::Router
            && self
                .vm
                .port
                .response_code_details()
                .is_some_and(|d| d != b"via_upstream" && !d.starts_with(b"downstream_"));
        self.vm.flow_ended(&flow, upstream_failed);
        let slot = flow.borrow().want.slot;
        drop(flow);
        self.vm.pending_wakes.borrow_mut().push(slot);
        self.vm.run_wakes();
    }
}

/// Sends `fields` and `body` as the stream's local response, without the lines Envoy
/// writes itself (pseudo-headers, framing, hop-by-hop).
fn send_fields(port: &Port, status: u16, fields: &[(String, Vec<u8>)], body: &[u8]) {
    port.send(
        status,
        &cachet_http::stitch::answer_lines(fields),
        Some(body),
    );
}
