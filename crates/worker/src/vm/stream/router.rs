//! Fills through Envoy's router (`[envoy].fill = "router"`): the collapsing leader's own
//! request, rewritten to the fill's fields, goes to the origin through the route; its
//! answer is held in Envoy while it is at most `[edge].max_object_bytes`, then stored and
//! answered from the store as a callout's would be (a local reply sent in place of the
//! held answer: Envoy sends it straight to the client). A longer answer is not stored and
//! streams on to the client as it comes, so nothing holds it whole.

#[allow(
    clippy::wildcard_imports,
    reason = "a seam of stream.rs: the parent module's types and imports"
)]
use super::*;

impl Http {
    /// Whether this stream's fill goes through the router: configured, a plain miss (a
    /// revalidation needs the stored object's validators and answer handling of the
    /// callout), and a `GET` (a `HEAD` fill must still fetch the body to store it).
    pub(super) fn fills_through_router(&self, p: &Policy, base: bool) -> bool {
        p.config().envoy.fill == cachet_policy::FillPath::Router && !base && self.client.get
    }

    /// Rewrites this request into the fill ([`cachet_http::fill::request_fields`]: the
    /// normalized `Host`, our device header, no client preconditions, range or cookie)
    /// and lets it go upstream. An identity client's fill asks for identity: the engine
    /// stores gzip either way, and an answer too large to store then reaches the client
    /// in a coding it accepts without inflating it here.
    pub(super) fn fill_through_router(&mut self, p: &Policy, job: Job) -> crate::host::Action {
        let plan = job.plan(p, host::now());
        let mut fields = engine_fill::request_fields(p, &plan, &job.want.fields, None);
        drop(plan);
        let gzip_ok = self
            .client
            .accept_encoding
            .as_deref()
            .and_then(|v| std::str::from_utf8(v).ok())
            .is_some_and(|v| cachet_policy::accepts_encoding(Some(v), "gzip"));
        if !gzip_ok {
            // `identity`, not no field at all: without one the origin may pick any coding
            // (RFC 9110 §12.5.3).
            for (n, v) in &mut fields {
                if n.eq_ignore_ascii_case("accept-encoding") {
                    *v = b"identity".to_vec();
                }
            }
        }
        let authority: &[u8] = fields
            .iter()
            .find(|(n, _)| n == "host")
            .map_or(&[], |(_, v)| v.as_slice());
        // Envoy routes only a request with `x-forwarded-proto` (it set one at decode): ours
        // is the scheme the plan used (the connection's, never a client's claim).
        let proto = job.inputs.scheme.clone();
        let mut h: Vec<(&str, &[u8])> = vec![
            (":method", b"GET"),
            (":path", job.want.target.as_bytes()),
            (":authority", authority),
            (":scheme", b"http"),
            ("x-forwarded-proto", proto.as_bytes()),
        ];
        h.extend(
            (fields.iter())
                .filter(|(n, _)| n != "host")
                .map(|(n, v)| (n.as_str(), v.as_slice())),
        );
        host::set_headers(MapType::HttpRequestHeaders, &h);
        self.started_ms = host::now_ms();
        self.job = Some(job);
        self.phase = Phase::RouterFill;
        Metrics::inc(self.vm.m().misses);
        crate::host::Action::Continue
    }

    /// The fill's answer headers: held while its body is read (a declared length over
    /// the limit is streamed on at once).
    pub(super) fn router_fill_headers(&mut self, end_of_stream: bool) -> crate::host::Action {
        if !host::via_upstream() {
            // Envoy's own reply (no route, no healthy upstream, timeout): not the origin's
            // answer, never stored; the waiters go on without it.
            return self.router_fill_local_reply();
        }
        let mut hs = host::headers(MapType::HttpResponseHeaders);
        // Envoy joined the origin's `Cache-Control` lines with a bare comma: stored and
        // sent as a combining cache sends them (issue 30).
        let respaced = cachet_http::fields::respace_joined_lists(&mut hs);
        self.fill_respaced = respaced;
        let limit = self
            .vm
            .policy()
            .map_or(0, |p| p.config().edge.max_object_bytes);
        let declared = header(&hs, "content-length").and_then(|v| v.trim().parse::<u64>().ok());
        self.fill_head = Some(hs);
        if declared.is_some_and(|n| n > limit) {
            return self.router_fill_oversized();
        }
        if end_of_stream {
            return self.router_fill_complete(0);
        }
        crate::host::Action::Pause
    }

    /// A chunk of the fill's answer body: buffered (`size` counts all of it so far) until
    /// its end, or streamed on once it is over the limit.
    pub(super) fn router_fill_body(
        &mut self,
        size: usize,
        end_of_stream: bool,
    ) -> crate::host::Action {
        let limit = self
            .vm
            .policy()
            .map_or(0, |p| p.config().edge.max_object_bytes);
        if size as u64 > limit {
            return self.router_fill_oversized();
        }
        if !end_of_stream {
            return crate::host::Action::Pause;
        }
        self.router_fill_complete(size)
    }

    /// The whole answer is here: stored (or not) as a callout's answer is, and answered
    /// with a local reply that replaces the held one.
    fn router_fill_complete(&mut self, size: usize) -> crate::host::Action {
        let vm = Rc::clone(&self.vm);
        let (Some(p), Some(job), Some(headers)) =
            (vm.policy(), self.job.clone(), self.fill_head.take())
        else {
            return crate::host::Action::Continue;
        };
        let r = OriginResponse {
            status: status_of(&headers).unwrap_or(502),
            body: host::buffer(BufferType::HttpResponseBody, size),
            headers,
            oversized: false,
            elapsed: Duration::from_millis(host::now_ms().saturating_sub(self.started_ms)),
        };
        match vm.store_response(&p, &job, &r, false) {
            Stored::Object(obj) => vm.respond(&obj, CacheStatus::Miss, &self.client, host::now()),
            Stored::Pass => self.send_origin(r.status, &r.headers, &r.body),
        }
        self.release();
        self.phase = Phase::Local;
        vm.wake(Some(job.want.slot));
        crate::host::Action::Pause
    }

    /// Envoy answered the fill itself: nothing stored, the lock released, the waiters
    /// woken. An upstream failure (a `5xx` of Envoy's: reset before or after the headers,
    /// connection failure, timeout) is recorded for the waiters (answered as this one)
    /// and this client gets Cachet's own `503` with `Retry-After` and `Cache-Control:
    /// no-store` — the edge's answer — in place of Envoy's (sent directly: no downstream
    /// header has gone out yet; issue 28 item 6). Any other reply of Envoy's (no route)
    /// goes to this client as it is, labelled `X-Cache: ERROR`, and the waiters go on.
    fn router_fill_local_reply(&mut self) -> crate::host::Action {
        Metrics::inc(self.vm.m().origin_errors);
        let hs = host::headers(MapType::HttpResponseHeaders);
        let status = status_of(&hs).unwrap_or(0);
        self.fill_head = None;
        if status < 500 {
            host::set_header(
                MapType::HttpResponseHeaders,
                "x-cache",
                Some(CacheStatus::Error.as_str().as_bytes()),
            );
            self.release();
            if let Some(job) = &self.job {
                self.vm.wake(Some(job.want.slot));
            }
            self.phase = Phase::Local;
            return crate::host::Action::Continue;
        }
        self.origin_failed(&format!("Envoy answered the fill {status}"));
        self.release();
        if let Some(job) = &self.job {
            self.vm.wake(Some(job.want.slot));
        }
        self.phase = Phase::Local;
        crate::host::Action::Pause
    }

    /// The answer is over `[edge].max_object_bytes`: the engine's verdict from its status
    /// and fields alone (a hit-for-pass marker where it says so), the waiters let through,
    /// and the held answer streamed on with the edge's header edits.
    fn router_fill_oversized(&mut self) -> crate::host::Action {
        let vm = Rc::clone(&self.vm);
        let hs = self.fill_head.take().unwrap_or_default();
        if let (Some(p), Some(job)) = (vm.policy(), self.job.clone()) {
            let r = OriginResponse {
                status: status_of(&hs).unwrap_or(502),
                headers: hs.clone(),
                body: Vec::new(),
                oversized: true,
                elapsed: Duration::from_millis(host::now_ms().saturating_sub(self.started_ms)),
            };
            let _ = vm.store_response(&p, &job, &r, false);
            self.release();
            vm.wake(Some(job.want.slot));
        }
        // The fill asked for a coding this client accepts: nothing to inflate.
        edit_passed_headers(&hs, &std::mem::take(&mut self.fill_respaced), &self.client);
        Metrics::inc(vm.m().passes);
        self.phase = Phase::Local;
        crate::host::Action::Continue
    }
}
