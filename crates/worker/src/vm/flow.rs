//! One cacheable request's flow in Envoy: the request's `cachet_http::exchange` fed from
//! the stream's callbacks, the root context's wakes and callout answers, its actions
//! carried out on the two tiers, the collapsing lock and the stream. Every decision is the
//! exchange's; this module only moves bytes (issue 32).
//!
//! How the exchange's actions map onto Envoy:
//!
//! | action | here |
//! |---|---|
//! | `Lookup` | `Cache::find` over both tiers (synchronous shared-data reads); bans and soft purges are applied there (`CheckBan` is then always clean, `ReadFlag` always absent) |
//! | `Claim` | the shared-data lock of the key's slot (`locks::acquire`): acquired → leader, held by another owner → follower, contended → uncollapsed |
//! | `Park` | the worker's wait queue; woken when a fetch of the slot ends here, or on the tick |
//! | `Fetch` | a callout to `[envoy].cluster`, or, for a plain fill of a `GET` still in its request headers with `[envoy].fill = "router"`, the client's own request rewritten to the fill and sent through the router |
//! | `Done` | the write (both tiers, a marker, a freshen, the failure list), then the answer (a local reply from the stored object, the origin's answer, a pass, a 503/504), then a background refresh queued for the tick |
//!
//! The fill right is a [`Permit`] held in the exchange's handle: dropping it (a write, a
//! cancel, the stream's end) releases the lock.

#[allow(
    clippy::wildcard_imports,
    reason = "a seam of vm.rs: the parent module's types and imports"
)]
use super::*;

use cachet_http::access::{Refreshed, Revalidation};
use cachet_http::exchange::{
    Action as Step, AnswerHead, Background, Claim, Cx, Done, Event, Exchange, MetaFrom, Respond,
    Right, Source, Write, WriteOp,
};

/// The fill right: the collapsing lock of a slot, released when dropped.
#[derive(Debug)]
pub(super) struct Permit {
    port: Rc<Port>,
    slot: u32,
    owner: u64,
}

impl Drop for Permit {
    fn drop(&mut self) {
        locks::release(&*self.port, self.slot, self.owner);
    }
}

/// The exchange's lookup handle in Envoy: the object the lookup found (the base of a
/// freshen) and the fill right once claimed.
#[derive(Debug, Default)]
pub(super) struct Hold {
    found: Option<Rc<StoredObject>>,
    permit: Option<Permit>,
}

type Ex = Exchange<Hold, Rc<StoredObject>, ()>;
type Ev = Event<Hold, Rc<StoredObject>, ()>;
type Act = Step<Hold, Rc<StoredObject>, ()>;

/// Where a flow is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    /// Deciding (inside a callback).
    Deciding,
    /// Parked behind another request's fetch.
    Parked,
    /// Its callout is out.
    Callout,
    /// Its fill goes through the router: the answer comes in the response callbacks.
    Router,
    /// Answered by a local reply.
    Answered,
    /// Passed to the origin: the answer Envoy forwards gets the edge's edits.
    Passed,
    /// Its fill's answer streams on to the client (too large, or not stored).
    Streaming,
}

/// The callback a flow is driven from: what "go on" means there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Via {
    /// The stream's request headers: the request may still be rewritten and continued.
    Request,
    /// Another callback of the stream (a callout's answer, the response).
    Stream,
    /// The root context (a wake, a root callout): the stream is reached by its context id.
    Root,
    /// The stream has ended: only the writes are carried out.
    Gone,
}

/// What the stream's callback returns after driving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Go {
    /// Stay paused (answered, or waiting for an event).
    Paused,
    /// The request goes upstream (continued, or resumed when paused).
    Upstream,
    /// The response goes on to the client.
    Downstream,
}

/// The origin's answer while the exchange decides on it.
#[derive(Debug)]
pub(super) enum Answer {
    /// A callout's: whole, its body read when at most the limit.
    Callout(OriginResponse),
    /// The router's: its fields (respaced), the fields respaced, the declared length and
    /// whether the headers ended the stream.
    Router {
        headers: Vec<(String, Vec<u8>)>,
        respaced: Vec<String>,
        declared: Option<u64>,
        eos: bool,
    },
}

/// One cacheable request's (or background refresh's) flow.
pub(super) struct Flow {
    ex: Ex,
    /// The stream's context id (the root's for a background refresh).
    pub(super) ctx: u32,
    job: Rc<Job>,
    /// What is looked up: the key (a variant's once found), its slot, the request fields.
    pub(super) want: Wanted,
    /// The client fields answers depend on.
    pub(super) client: Client,
    /// When the request was planned (every plan of the flow is made at this time).
    at: SystemTime,
    /// The request's own edits for the upstream (device header, normalized `:path`).
    forward: Forward,
    pub(super) stage: Stage,
    level: Level,
    answer: Option<Answer>,
    /// When its fetch was sent (ms).
    started_ms: u64,
    /// It was counted as collapsed (once, however often it parks).
    collapsed: bool,
    /// Its write was refused by the tiers (a variant over `[edge].max_variants`): the
    /// answer goes to this client only, labelled `PASS`.
    refused: bool,
}

pub(super) type FlowRef = Rc<RefCell<Flow>>;

/// The request's own edits for the upstream: our device header (replacing the client's,
/// which was removed) and the normalized `:path` when it differs. A request answered from
/// cache never goes upstream, so a hit skips these host calls.
#[derive(Debug, Default, Clone)]
pub(super) struct Forward {
    /// `None` until planned (nothing is forwarded before).
    pub(super) device: Option<cachet_policy::DeviceClass>,
    pub(super) path: Option<String>,
}

impl Forward {
    pub(super) fn apply(&self, port: &Port, p: &Policy) {
        if let Some(d) = self.device {
            port.set_header(
                MapType::HttpRequestHeaders,
                p.device_header(),
                Some(d.as_str().as_bytes()),
            );
        }
        if let Some(path) = &self.path {
            port.set_header(MapType::HttpRequestHeaders, ":path", Some(path.as_bytes()));
        }
    }
}

impl Flow {
    /// The flow of stream `ctx`'s request `job`, planned as `plan` at `at`.
    #[allow(
        clippy::too_many_arguments,
        reason = "the request's whole context: stream, policy, plan, lookup, client, edits, clock, seed"
    )]
    pub(super) fn new(
        ctx: u32,
        p: &Policy,
        plan: &Plan<'_>,
        (job, want): (Rc<Job>, Wanted),
        client: Client,
        forward: Forward,
        at: SystemTime,
        seed: u64,
    ) -> Self {
        let now = Timestamp::from_system_time(at);
        let ex = {
            let cx = Cx::new(p, plan, &client, &want.fields);
            // `Cache::find` applies bans and soft purges; a stored object holds its body.
            Exchange::new(cx, now, seed)
                .lookup_applies_bans()
                .found_carries_body()
        };
        Self {
            ex,
            ctx,
            want,
            job,
            client,
            at,
            forward,
            stage: Stage::Deciding,
            level: Level::Local,
            answer: None,
            started_ms: 0,
            collapsed: false,
            refused: false,
        }
    }
}

/// What carrying out an action led to.
enum Next {
    Event(Ev),
    Wait(Go),
}

impl Vm {
    /// Feeds `event` to `flow` (planned as `plan`) and carries out its actions until it
    /// waits; `via` says which callback drives it.
    ///
    /// The clock is read once per callback (`now`): the actions carried out in between
    /// are synchronous (a hit costs no extra clock read).
    #[allow(
        clippy::too_many_arguments,
        reason = "the flow's whole context: policy, plan, flow, event, callback, clock"
    )]
    pub(super) fn drive(
        &self,
        p: &Policy,
        plan: &Plan<'_>,
        flow: &FlowRef,
        event: Ev,
        via: Via,
        now: SystemTime,
    ) -> Go {
        let mut event = event;
        let now = Timestamp::from_system_time(now);
        loop {
            let action = {
                let mut f = flow.borrow_mut();
                let f = &mut *f;
                f.stage = Stage::Deciding;
                let cx = Cx::new(p, plan, &f.client, &f.want.fields);
                f.ex.handle(cx, now, event)
            };
            event = match self.perform(p, flow, action, via, now) {
                Next::Event(e) => e,
                Next::Wait(go) => return go,
            };
        }
    }

    /// [`Self::drive`] from a later callback: the plan is made again from the request, at
    /// the time it was first made (the same plan).
    pub(super) fn drive_later(&self, flow: &FlowRef, event: Ev, via: Via) -> Go {
        let Some(p) = self.policy() else {
            return Go::Paused;
        };
        let (job, at) = {
            let f = flow.borrow();
            (Rc::clone(&f.job), f.at)
        };
        let plan = job.plan(&p, at);
        self.drive(&p, &plan, flow, event, via, self.port.now())
    }

    fn perform(&self, p: &Policy, flow: &FlowRef, action: Act, via: Via, now: Timestamp) -> Next {
        match action {
            Step::Lookup { .. } => Next::Event(self.look(p, flow, now)),
            // `Cache::find` applied bans and soft purges; Envoy keeps no refresh-ahead flag.
            Step::CheckBan => Next::Event(Event::Ban(false)),
            Step::ReadFlag { .. } => Next::Event(Event::Flag(None)),
            Step::ReadStored => Next::Event(Event::Stored(())),
            Step::Claim(hold) => Next::Event(self.claim(p, flow, hold)),
            Step::Park(_) => self.park(flow),
            Step::Fetch { fields } => self.fetch(p, flow, &fields, via),
            Step::ReadBody { limit } => Self::read_body(flow, limit),
            Step::Done(done) => Next::Wait(self.done(p, flow, done, via, now)),
        }
    }

    /// Looks the key up in both tiers (bans synced first, at most `[envoy].ban_staleness`
    /// old).
    fn look(&self, p: &Policy, flow: &FlowRef, now: Timestamp) -> Ev {
        let now_ms = now.as_millis();
        let staleness = p.config().envoy.ban_staleness.0;
        if self
            .cache
            .borrow_mut()
            .sync_bans_for_lookup(&*self.port, now_ms, staleness)
        {
            self.flush();
        }
        let mut f = flow.borrow_mut();
        // Nothing usable: `find` shows the newest copy anyway (`Freshness::Miss`), past
        // its TTL and keep: to a request that waited it is what its leader stored (the
        // exchange serves it as the answer fetched for it); to one about to wait, what it
        // saw before.
        let found = (self.cache.borrow_mut()).find(
            &*self.port,
            &mut f.want,
            Timestamp::from_millis(now_ms),
        );
        self.flush();
        let Ok(found) = found else {
            return Event::Unkeyable;
        };
        // Failures matter only to a request that waited for a fetch (one that began after
        // a failure asks the origin itself): the list is read only then.
        let failed_at = if f.ex.waited() {
            locks::failed_at(&*self.port, f.want.slot).map(Timestamp::from_millis)
        } else {
            None
        };
        if let Some(x) = &found {
            f.level = x.level;
        }
        let hold = Hold {
            found: found.as_ref().map(|x| Rc::clone(&x.obj)),
            permit: None,
        };
        Event::Looked {
            handle: hold,
            right: Right::Ask,
            found: found.map(|x| (x.obj, x.soft_purged)),
            failed_at,
        }
    }

    /// Claims the slot's lock for this flow (its lease: `[collapse].lease_ms`).
    fn claim(&self, p: &Policy, flow: &FlowRef, mut hold: Hold) -> Ev {
        let (slot, owner) = {
            let f = flow.borrow();
            (f.want.slot, self.owner(f.ctx))
        };
        let now_ms = self.port.now_ms();
        let lease = now_ms + p.config().collapse.lease_ms;
        let claim = match locks::acquire(&*self.port, slot, owner, now_ms, lease) {
            Lock::Acquired => {
                hold.permit = Some(Permit {
                    port: Rc::clone(&self.port),
                    slot,
                    owner,
                });
                Claim::Leader
            }
            Lock::Held => Claim::Follower,
            Lock::Contended => Claim::Uncollapsed,
        };
        Event::Claimed(hold, claim)
    }

    /// Parks the flow behind the slot's fetch (`[collapse]` bounds).
    fn park(&self, flow: &FlowRef) -> Next {
        let m = self.m();
        let slot = flow.borrow().want.slot;
        let waiter = Waiter {
            flow: Rc::clone(flow),
        };
        let now = Timestamp::from_millis(self.port.now_ms());
        let parked = self.waiters.borrow_mut().park(slot, waiter, now);
        if let Err((why, _)) = parked {
            // This worker's queue is full (`collapse.max_waiters` for the key,
            // `collapse.max_keys` keys): to the origin uncollapsed rather than grow it
            // without bound.
            Metrics::inc(
                &self.port,
                match why {
                    Refused::KeyFull => m.collapse_key_full,
                    Refused::TooManyKeys => m.collapse_keys_full,
                },
            );
            return Next::Event(Event::Refused);
        }
        let mut f = flow.borrow_mut();
        if !f.collapsed {
            Metrics::inc(&self.port, m.collapsed);
            f.collapsed = true;
        }
        f.stage = Stage::Parked;
        Next::Wait(Go::Paused)
    }

    /// Sends the fill: through the router (a plain fill of a `GET` still in its request
    /// headers, with `[envoy].fill = "router"`), else as a callout to `[envoy].cluster`.
    fn fetch(&self, p: &Policy, flow: &FlowRef, fields: &[(String, Vec<u8>)], via: Via) -> Next {
        let conditional = fields
            .iter()
            .any(|(n, _)| n == "if-none-match" || n == "if-modified-since");
        let mut f = flow.borrow_mut();
        f.started_ms = self.port.now_ms();
        let router = via == Via::Request
            && p.config().envoy.fill == cachet_policy::FillPath::Router
            && f.client.get
            && !conditional;
        if router {
            // The paused request becomes the fill (`cachet_http::fill::request_lines`).
            let router = Some((f.job.inputs.scheme.as_str(), &f.client));
            let lines = cachet_http::fill::request_lines(&f.want.target, fields, router);
            self.port.set_headers(MapType::HttpRequestHeaders, &lines);
            f.stage = Stage::Router;
            Metrics::inc(&self.port, self.m().misses);
            return Next::Wait(Go::Upstream);
        }
        if via == Via::Root && !self.root_active.get() {
            // The host answers a callout to the context whose callback sent it, and a
            // stream's context may be gone before the answer: a flow woken in a stream's
            // callback fetches from the root context, on a tick hurried for it.
            f.stage = Stage::Callout;
            drop(f);
            (self.root_fetches.borrow_mut()).push((Rc::clone(flow), fields.to_vec()));
            self.hurry();
            return Next::Wait(Go::Paused);
        }
        match self.dispatch(p, &f.want.target, fields) {
            Ok(token) => {
                if f.ctx != self.root_id {
                    Metrics::inc(&self.port, self.m().misses);
                }
                f.stage = Stage::Callout;
                if via == Via::Root {
                    // Sent in the root context's callback: answered to the root.
                    drop(f);
                    self.calls
                        .borrow_mut()
                        .insert(token, RootCall::Flow(Rc::clone(flow)));
                }
                Next::Wait(Go::Paused)
            }
            Err(crate::host::Status::SerializationFailure) => Next::Event(Event::CannotCarry),
            Err(e) => {
                Metrics::inc(&self.port, self.m().origin_errors);
                Next::Event(Event::OriginFailed(format!("dispatch refused: {e:?}")))
            }
        }
    }

    /// The body of the answer: a callout's is here already; the router's comes in the
    /// response callbacks (a declared length over the limit, or headers that ended the
    /// stream, decide at once).
    fn read_body(flow: &FlowRef, limit: u64) -> Next {
        let mut f = flow.borrow_mut();
        match f.answer.as_mut() {
            Some(Answer::Callout(r)) if r.oversized => Next::Event(Event::Oversize),
            Some(Answer::Callout(r)) => Next::Event(Event::Body(std::mem::take(&mut r.body))),
            Some(Answer::Router { declared, .. }) if declared.is_some_and(|n| n > limit) => {
                Next::Event(Event::Oversize)
            }
            Some(Answer::Router { eos: true, .. }) => Next::Event(Event::Body(Vec::new())),
            Some(Answer::Router { .. }) => {
                f.stage = Stage::Router;
                Next::Wait(Go::Paused)
            }
            None => Next::Event(Event::BodyBroke("no origin answer".into())),
        }
    }

    /// The exchange's last action: its write, its answer, its background refresh.
    fn done(
        &self,
        p: &Policy,
        flow: &FlowRef,
        done: Done<Hold, Rc<StoredObject>, ()>,
        via: Via,
        now: Timestamp,
    ) -> Go {
        let Done {
            write,
            respond,
            refresh,
        } = done;
        let wrote = write.is_some();
        let kept = matches!(respond, Respond::Refreshed(Refreshed::OriginError))
            || flow.borrow().ex.notes().refresh == Some(Revalidation::OriginError);
        if kept {
            // The origin answered a revalidation with an error: the stored copy is kept.
            Metrics::inc(&self.port, self.m().origin_errors);
        }
        let written = write.and_then(|w| self.write(p, flow, w, now));
        let go = if via == Via::Gone {
            Go::Paused
        } else {
            self.answer(p, flow, respond, written, now)
        };
        if let Some(bg) = refresh {
            self.queue_refresh(p, flow, bg);
        }
        if wrote {
            // Woken once this callback's own host calls are done
            // ([`Vm::run_wakes`]): waking switches the effective context.
            let slot = flow.borrow().want.slot;
            self.pending_wakes.borrow_mut().push(slot);
        }
        go
    }

    /// Carries out a write; returns the object written (or built and refused by the
    /// tiers: the answer is still this client's). The handle (and its lock) goes after.
    fn write(
        &self,
        p: &Policy,
        flow: &FlowRef,
        w: Write<Hold>,
        now: Timestamp,
    ) -> Option<Rc<StoredObject>> {
        let Write { handle, op } = w;
        let f = flow.borrow();
        let mut refused = false;
        let written = match op {
            WriteOp::Insert { meta, body, .. } => {
                let obj = StoredObject::new(f.want.key.clone(), *meta, body);
                let (obj, stored) = self
                    .cache
                    .borrow_mut()
                    .put(&*self.port, p, &f.want, obj, now);
                refused = !stored;
                Some(obj)
            }
            WriteOp::Update { meta, .. } => handle.found.as_ref().map(|base| {
                let fresh = StoredObject::new(base.h.key.clone(), *meta, base.body.clone());
                (self.cache.borrow_mut())
                    .freshen(&*self.port, &f.want, base, fresh, now)
                    .0
            }),
            WriteOp::Failure { .. } => {
                let memory = p.config().collapse.max_wait_ms;
                locks::record_failure(&*self.port, f.want.slot, now.as_millis(), memory);
                None
            }
            WriteOp::Cancel => None,
        };
        drop(f);
        flow.borrow_mut().refused = refused;
        drop(handle);
        self.flush();
        written
    }

    /// The client's answer.
    fn answer(
        &self,
        policy: &Policy,
        flow: &FlowRef,
        respond: Respond<Rc<StoredObject>, ()>,
        written: Option<Rc<StoredObject>>,
        now: Timestamp,
    ) -> Go {
        let reply = match respond {
            Respond::Object {
                status,
                found,
                meta,
                cookies,
            } => {
                let found = found.map(|(s, ())| s);
                return self.answer_object(flow, status, (found, meta, written), &cookies, now);
            }
            Respond::Unstored { body, .. } => return self.answer_unstored(policy, flow, body),
            Respond::Pass => return self.pass(policy, flow),
            Respond::Refreshed(_) => None,
            // RFC 9111 §5.2.1.7: nothing servable is stored, and the origin is off limits.
            Respond::NotCached => Some(cachet_http::reply::failure(Failure::NotCached)),
            Respond::Unavailable(reason) => Some(error_response(&WorkerError::unavailable(reason))),
            Respond::Broken(e) => Some(error_response(&WorkerError::Body(e))),
        };
        flow.borrow_mut().stage = Stage::Answered;
        if let Some(r) = reply {
            send_reply(&self.port, &r);
        }
        Go::Paused
    }

    /// An answer from a stored object: the found one, the one written, or the found body
    /// with a per-user 304's own fields (`Set-Cookie` lines in `cookies`).
    fn answer_object(
        &self,
        flow: &FlowRef,
        status: CacheStatus,
        (found, meta, written): (Option<Rc<StoredObject>>, MetaFrom, Option<Rc<StoredObject>>),
        cookies: &[(String, Vec<u8>)],
        now: Timestamp,
    ) -> Go {
        let obj = match meta.pick(found, written) {
            Some(Source::Stored(s)) => s,
            Some(Source::Own(own, s)) => {
                Rc::new(StoredObject::new(s.h.key.clone(), *own, s.body.clone()))
            }
            None => {
                flow.borrow_mut().stage = Stage::Answered;
                send_error(
                    &self.port,
                    &WorkerError::unavailable("no object to answer from"),
                );
                return Go::Paused;
            }
        };
        let metrics = self.m();
        let mut f = flow.borrow_mut();
        let status = if f.refused { CacheStatus::Pass } else { status };
        // A MISS was counted when its fetch was sent.
        let counted = match (status, f.level) {
            (CacheStatus::Miss, _) => None,
            (CacheStatus::Stale, _) => Some(metrics.stale),
            (CacheStatus::Pass, _) => Some(metrics.passes),
            (_, Level::Local) => Some(metrics.hits_local),
            _ => Some(metrics.hits_shared),
        };
        if let Some(id) = counted {
            Metrics::inc(&self.port, id);
        }
        f.stage = Stage::Answered;
        drop(f);
        let extra: Vec<(&str, &[u8])> = cookies
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_slice()))
            .collect();
        // Only read while the reply goes out: a callback the reply runs may read it too.
        let f = flow.borrow();
        self.respond(&obj, status, &f.client, now, &extra);
        Go::Paused
    }

    /// The origin's answer, not stored: a callout's (or a router answer held whole) as a
    /// local reply; a router answer not read streams on with the edge's edits (the fill
    /// asked for a coding this client accepts: nothing to inflate).
    /// Lets the request go to the origin through the router with its own edits (`PASS`).
    fn pass(&self, policy: &Policy, flow: &FlowRef) -> Go {
        let mut f = flow.borrow_mut();
        f.forward.apply(&self.port, policy);
        f.stage = Stage::Passed;
        Metrics::inc(&self.port, self.m().passes);
        Go::Upstream
    }

    fn answer_unstored(&self, policy: &Policy, flow: &FlowRef, body: Option<Vec<u8>>) -> Go {
        let mut f = flow.borrow_mut();
        let (status, headers, held) = match f.answer.take() {
            Some(Answer::Callout(r)) if r.oversized && body.is_none() => {
                // Too large to copy into the VM: this request goes to the origin through
                // the router, streamed by Envoy (a second fetch; `[envoy].fill = "router"`
                // avoids it).
                drop(f);
                return self.pass(policy, flow);
            }
            Some(Answer::Callout(r)) => (r.status, r.headers, Some(r.body)),
            Some(Answer::Router {
                headers, respaced, ..
            }) => {
                if body.is_none() {
                    Metrics::inc(&self.port, self.m().passes);
                    f.stage = Stage::Streaming;
                    edit_passed_headers(&self.port, &headers, &respaced, &f.client);
                    return Go::Downstream;
                }
                (status_of(&headers).unwrap_or(502), headers, None)
            }
            None => {
                f.stage = Stage::Answered;
                drop(f);
                send_error(&self.port, &WorkerError::unavailable("no origin answer"));
                return Go::Paused;
            }
        };
        Metrics::inc(&self.port, self.m().passes);
        f.stage = Stage::Answered;
        drop(f);
        let body = body.or(held).unwrap_or_default();
        send_origin(&self.port, &flow.borrow().client, status, &headers, &body);
        Go::Paused
    }

    /// Queues `bg` (handed out by `flow`'s exchange) for the next tick, as a flow of the
    /// root context that holds the lock until it ends.
    fn queue_refresh(&self, p: &Policy, flow: &FlowRef, bg: Background<Hold, Rc<StoredObject>>) {
        let f = flow.borrow();
        let plan = f.job.plan(p, f.at);
        let now = Timestamp::from_millis(self.port.now_ms());
        let cx = Cx::new(p, &plan, &f.client, &f.want.fields);
        let refresh = Flow {
            ex: Exchange::refresh(cx, bg, now)
                .lookup_applies_bans()
                .found_carries_body(),
            ctx: self.root_id,
            job: Rc::clone(&f.job),
            want: f.want.clone(),
            client: f.client.clone(),
            at: f.at,
            forward: Forward::default(),
            stage: Stage::Deciding,
            level: Level::Local,
            answer: None,
            started_ms: 0,
            collapsed: false,
            refused: false,
        };
        drop(f);
        self.refresh_queue
            .borrow_mut()
            .push(Rc::new(RefCell::new(refresh)));
    }

    /// Sends, from the root context, the fetches of flows woken in a stream's callback
    /// since the last tick (their answers come to the root).
    pub(super) fn dispatch_root_fetches(&self) {
        let Some(p) = self.policy() else { return };
        let queued = std::mem::take(&mut *self.root_fetches.borrow_mut());
        for (flow, fields) in queued {
            let target = flow.borrow().want.target.clone();
            let event = match self.dispatch(&p, &target, &fields) {
                Ok(token) => {
                    Metrics::inc(&self.port, self.m().misses);
                    flow.borrow_mut().started_ms = self.port.now_ms();
                    self.calls.borrow_mut().insert(token, RootCall::Flow(flow));
                    continue;
                }
                Err(crate::host::Status::SerializationFailure) => Event::CannotCarry,
                Err(e) => {
                    Metrics::inc(&self.port, self.m().origin_errors);
                    Event::OriginFailed(format!("dispatch refused: {e:?}"))
                }
            };
            let ctx = flow.borrow().ctx;
            if ctx != self.root_id && !self.port.set_effective_context(ctx) {
                continue;
            }
            if self.drive_later(&flow, event, Via::Root) == Go::Upstream {
                self.port.resume_request();
            }
        }
    }

    /// Starts the background refreshes queued since the last tick.
    pub(super) fn dispatch_refreshes(&self) {
        let queued = std::mem::take(&mut *self.refresh_queue.borrow_mut());
        for flow in queued {
            Metrics::inc(&self.port, self.m().refreshes);
            self.drive_later(&flow, Event::Start, Via::Root);
        }
    }

    /// A callout answered for `flow` (`nh` headers, `body_size` bytes): its head and body
    /// as the exchange reads them, or the failure.
    pub(super) fn on_flow_callout(
        &self,
        flow: &FlowRef,
        nh: usize,
        body_size: usize,
        via: Via,
    ) -> Go {
        let Some(p) = self.policy() else {
            return Go::Paused;
        };
        let limit = p.config().edge.max_object_bytes;
        let started_ms = flow.borrow().started_ms;
        let event =
            if let Some(r) = OriginResponse::read(&self.port, nh, body_size, started_ms, limit) {
                let head = AnswerHead {
                    status: r.status,
                    fields: r.headers.clone(),
                    elapsed: r.elapsed,
                };
                flow.borrow_mut().answer = Some(Answer::Callout(r));
                Event::Head(head)
            } else {
                Metrics::inc(&self.port, self.m().origin_errors);
                Event::OriginFailed("the callout failed".into())
            };
        self.drive_later(flow, event, via)
    }

    /// The router's answer headers for `flow`'s fill: Envoy's own reply (no upstream) is
    /// a failure of the fill when it is a `5xx`; any other goes on as it is, labelled
    /// `X-Cache: ERROR`, and the flow ends.
    pub(super) fn on_router_headers(&self, flow: &FlowRef, end_of_stream: bool) -> Go {
        if !self.port.via_upstream() {
            Metrics::inc(&self.port, self.m().origin_errors);
            let hs = self.port.headers(MapType::HttpResponseHeaders);
            let status = status_of(&hs).unwrap_or(0);
            return match cachet_http::fill::proxy_reply(status) {
                cachet_http::fill::ProxyReply::Forward => {
                    self.port.set_header(
                        MapType::HttpResponseHeaders,
                        "x-cache",
                        Some(CacheStatus::Error.as_str().as_bytes()),
                    );
                    flow.borrow_mut().stage = Stage::Streaming;
                    Go::Downstream
                }
                cachet_http::fill::ProxyReply::Failed(reason) => {
                    self.drive_later(flow, Event::OriginFailed(reason), Via::Stream)
                }
            };
        }
        let mut hs = self.port.headers(MapType::HttpResponseHeaders);
        // Envoy joined the origin's `Cache-Control` lines with a bare comma: stored and
        // sent as a combining cache sends them (issue 30).
        let respaced = cachet_http::fields::respace_joined_lists(&mut hs);
        let declared = header(&hs, "content-length").and_then(|v| v.trim().parse::<u64>().ok());
        let head = AnswerHead {
            status: status_of(&hs).unwrap_or(502),
            fields: hs.clone(),
            elapsed: Duration::from_millis(
                self.port.now_ms().saturating_sub(flow.borrow().started_ms),
            ),
        };
        flow.borrow_mut().answer = Some(Answer::Router {
            headers: hs,
            respaced,
            declared,
            eos: end_of_stream,
        });
        self.drive_later(flow, Event::Head(head), Via::Stream)
    }

    /// A chunk of the router's answer body (`size` counts all of it so far): the whole
    /// body at its end, or over the limit as soon as it is.
    pub(super) fn on_router_body(&self, flow: &FlowRef, size: usize, end_of_stream: bool) -> Go {
        let limit = self
            .policy()
            .map_or(0, |p| p.config().edge.max_object_bytes);
        if size as u64 > limit {
            return self.drive_later(flow, Event::Oversize, Via::Stream);
        }
        if !end_of_stream {
            return Go::Paused;
        }
        let body = self.port.buffer(BufferType::HttpResponseBody, size);
        self.drive_later(flow, Event::Body(body), Via::Stream)
    }

    /// The flow whose callout `token` is, when a flow sent it from another context's
    /// callback (the host answers a callout to the context whose callback sent it).
    pub(super) fn take_flow_call(&self, token: u32) -> Option<FlowRef> {
        let mut calls = self.calls.borrow_mut();
        if !matches!(calls.get(&token), Some(RootCall::Flow(_))) {
            return None;
        }
        match calls.remove(&token) {
            Some(RootCall::Flow(flow)) => Some(flow),
            _ => None,
        }
    }

    /// A callout answered for `flow` in another context's callback: `flow`'s stream is
    /// reached by its context id.
    pub(super) fn flow_callout_elsewhere(&self, flow: &FlowRef, nh: usize, body_size: usize) {
        let ctx = flow.borrow().ctx;
        if ctx != self.root_id && !self.port.set_effective_context(ctx) {
            return;
        }
        if self.on_flow_callout(flow, nh, body_size, Via::Root) == Go::Upstream {
            self.port.resume_request();
        }
    }

    /// Wakes the flows of the slots whose fetch ended in this callback (and those their
    /// wakes end), after the callback's own host calls: a wake switches the effective
    /// context to each parked stream.
    pub(super) fn run_wakes(&self) {
        loop {
            let Some(slot) = self.pending_wakes.borrow_mut().pop() else {
                return;
            };
            self.wake(Some(slot));
        }
    }

    /// Wakes the flows parked on `slot` (all when `None`: the tick): each looks up again.
    pub(super) fn wake(&self, slot: Option<u32>) {
        let list: Vec<Parked<Waiter>> = match slot {
            Some(s) => self.waiters.borrow_mut().take(&s).into_iter().collect(),
            None => self
                .waiters
                .borrow_mut()
                .take_all()
                .into_iter()
                .map(|(_, w)| w)
                .collect(),
        };
        for parked in list {
            let flow = parked.waiter.flow;
            let ctx = flow.borrow().ctx;
            if !self.port.set_effective_context(ctx) {
                continue;
            }
            if self.drive_later(&flow, Event::Woken, Via::Root) == Go::Upstream {
                self.port.resume_request();
            }
        }
    }

    /// The stream of `flow` ended: a router fill whose origin failed is recorded for the
    /// requests waiting for it; a parked flow leaves the queue; its lock goes with it.
    pub(super) fn flow_ended(&self, flow: &FlowRef, upstream_failed: bool) {
        let (stage, slot, ctx) = {
            let f = flow.borrow();
            (f.stage, f.want.slot, f.ctx)
        };
        if stage == Stage::Router && upstream_failed {
            self.drive_later(
                flow,
                Event::BodyBroke("the origin failed mid-answer".into()),
                Via::Gone,
            );
        }
        if stage == Stage::Parked {
            (self.waiters.borrow_mut()).cancel(&slot, |w| w.flow.borrow().ctx == ctx);
        }
    }
}

/// Sends a fill's origin answer that was not stored (`PASS`) as a local reply
/// (`cachet_http::unstored::origin_reply`).
pub(super) fn send_origin(
    port: &Port,
    client: &Client,
    status: u16,
    headers: &[(String, Vec<u8>)],
    body: &[u8],
) {
    let r = cachet_http::unstored::origin_reply(status, headers, body, client);
    let h: Vec<(&str, &[u8])> = r.lines.iter().map(|(n, v)| (*n, &**v)).collect();
    port.send(r.status, &h, r.body.as_deref());
}

/// The edge's edits to an answer Envoy forwards itself (a pass, an oversized router
/// fill): `cachet_http::unstored::forwarded_edits`.
pub(super) fn edit_passed_headers(
    port: &Port,
    hs: &[(String, Vec<u8>)],
    respaced: &[String],
    client: &Client,
) {
    for (n, v) in cachet_http::unstored::forwarded_edits(hs, respaced, client) {
        port.set_header(MapType::HttpResponseHeaders, &n, v);
    }
}
