//! Safe wrappers over the ABI callbacks the module calls ([`crate::abi`]): every `unsafe`
//! call of the module's stream work is here, each with the condition that makes it sound.
//! Values are bytes both ways (never assumed UTF-8); names are read lower-case.

use crate::abi;

/// Header lines as the module holds them: names lower-case, values bytes.
pub type Fields = Vec<(String, Vec<u8>)>;

/// A stream's filter in Envoy (`envoy_dynamic_module_type_http_filter_envoy_ptr`): valid
/// from `on_http_filter_new` until `on_http_filter_destroy`, and only on the stream's
/// worker thread. Every hook hands it over; the module never keeps one past the hook it
/// came with, nor sends one to another thread.
#[derive(Debug, Clone, Copy)]
pub struct Stream(pub abi::HttpFilterEnvoyPtr);

/// The response body's parts: what Envoy buffered, then what the hook received.
const RESPONSE_BODY: [abi::HttpBodyType; 2] = [
    abi::HTTP_BODY_TYPE_BUFFERED_RESPONSE_BODY,
    abi::HTTP_BODY_TYPE_RECEIVED_RESPONSE_BODY,
];

/// The request body's parts, as [`RESPONSE_BODY`].
const REQUEST_BODY: [abi::HttpBodyType; 2] = [
    abi::HTTP_BODY_TYPE_BUFFERED_REQUEST_BODY,
    abi::HTTP_BODY_TYPE_RECEIVED_REQUEST_BODY,
];

/// A byte slice as the ABI's module buffer (borrowed for the call it is passed to).
pub fn module_buffer(bytes: &[u8]) -> abi::ModuleBuffer {
    abi::ModuleBuffer {
        ptr: bytes.as_ptr().cast(),
        length: bytes.len(),
    }
}

/// The bytes of an Envoy buffer.
///
/// # Safety
/// `b` must come from Envoy in the current hook (its bytes live until the hook returns),
/// and the slice must not outlive it.
pub unsafe fn envoy_bytes<'a>(b: abi::EnvoyBuffer) -> &'a [u8] {
    if b.ptr.is_null() || b.length == 0 {
        return &[];
    }
    // SAFETY: Envoy hands out `length` readable bytes at `ptr`, alive for this hook (the
    // caller's contract).
    unsafe { std::slice::from_raw_parts(b.ptr.cast::<u8>(), b.length) }
}

/// Header lines Envoy handed to a hook (`n` records at `raw`), copied.
///
/// # Safety
/// `raw` must point at `n` records Envoy handed to the current hook (or be null).
pub unsafe fn envoy_fields(raw: *const abi::EnvoyHttpHeader, n: usize) -> Fields {
    if raw.is_null() || n == 0 {
        return Vec::new();
    }
    // SAFETY: `n` initialised records at `raw`, alive for this hook (the caller's contract).
    let raw = unsafe { std::slice::from_raw_parts(raw, n) };
    raw.iter()
        .map(|h| {
            let k = abi::EnvoyBuffer {
                ptr: h.key_ptr,
                length: h.key_length,
            };
            let v = abi::EnvoyBuffer {
                ptr: h.value_ptr,
                length: h.value_length,
            };
            // SAFETY: the record's buffers are Envoy's for this hook, copied at once.
            let (k, v) = unsafe { (envoy_bytes(k), envoy_bytes(v)) };
            (String::from_utf8_lossy(k).to_ascii_lowercase(), v.to_vec())
        })
        .collect()
}

/// The bytes of `n` body chunks Envoy handed to a hook, joined.
///
/// # Safety
/// As [`envoy_fields`], for buffers.
pub unsafe fn envoy_chunks(raw: *const abi::EnvoyBuffer, n: usize) -> Vec<u8> {
    if raw.is_null() || n == 0 {
        return Vec::new();
    }
    // SAFETY: `n` initialised buffers at `raw`, alive for this hook.
    let chunks = unsafe { std::slice::from_raw_parts(raw, n) };
    let mut out = Vec::new();
    for c in chunks {
        // SAFETY: each buffer is Envoy's for this hook, copied at once.
        out.extend_from_slice(unsafe { envoy_bytes(*c) });
    }
    out
}

/// A callout's answer as a hook receives it: `None` unless `result` is success, else its
/// header lines and body, copied.
///
/// # Safety
/// As [`envoy_fields`] and [`envoy_chunks`], for the hook's records and chunks.
pub unsafe fn callout_answer(
    result: abi::HttpCalloutResult,
    headers: *const abi::EnvoyHttpHeader,
    headers_size: usize,
    chunks: *const abi::EnvoyBuffer,
    chunks_size: usize,
) -> Option<(Fields, Vec<u8>)> {
    (result == abi::HTTP_CALLOUT_RESULT_SUCCESS).then(|| {
        // SAFETY: the caller's contract.
        unsafe {
            (
                envoy_fields(headers, headers_size),
                envoy_chunks(chunks, chunks_size),
            )
        }
    })
}

/// Writes a line to Envoy's log.
pub fn log(level: abi::LogLevel, msg: &str) {
    // SAFETY: the message buffer is borrowed for the call; Envoy copies it.
    unsafe { abi::envoy_dynamic_module_callback_log(level, module_buffer(msg.as_bytes())) }
}

fn lines(pairs: &[(&str, &[u8])]) -> Vec<abi::ModuleHttpHeader> {
    pairs
        .iter()
        .map(|(n, v)| abi::ModuleHttpHeader {
            key_ptr: n.as_ptr().cast(),
            key_length: n.len(),
            value_ptr: v.as_ptr().cast(),
            value_length: v.len(),
        })
        .collect()
}

/// Sends a callout with `pairs` through `send` (given the id slot and the header records);
/// its id, or Envoy's refusal.
fn callout(
    pairs: &[(&str, &[u8])],
    send: impl FnOnce(*mut u64, *mut abi::ModuleHttpHeader, usize) -> abi::HttpCalloutInitResult,
) -> Result<u64, u32> {
    let mut h = lines(pairs);
    let mut id = 0u64;
    let r = send(&raw mut id, h.as_mut_ptr(), h.len());
    if r == abi::HTTP_CALLOUT_INIT_RESULT_SUCCESS {
        Ok(id)
    } else {
        Err(r)
    }
}

impl Stream {
    /// Adds `by` to counter `id` (defined on this stream's configuration).
    pub fn count(self, id: usize, by: u64) {
        // SAFETY: the current hook's filter; no labels.
        unsafe {
            abi::envoy_dynamic_module_callback_http_filter_increment_counter(
                self.0,
                id,
                std::ptr::null_mut(),
                0,
                by,
            );
        }
    }

    /// Every line of the `kind` header map (request or response), copied.
    pub fn headers(self, kind: abi::HttpHeaderType) -> Fields {
        // SAFETY: `self.0` is the current hook's filter (the type's contract).
        let n = unsafe { abi::envoy_dynamic_module_callback_http_get_headers_size(self.0, kind) };
        let empty = abi::EnvoyHttpHeader {
            key_ptr: std::ptr::null(),
            key_length: 0,
            value_ptr: std::ptr::null(),
            value_length: 0,
        };
        let mut raw = vec![empty; n];
        // SAFETY: `raw` has room for the `n` records Envoy just counted.
        let ok = unsafe {
            abi::envoy_dynamic_module_callback_http_get_headers(self.0, kind, raw.as_mut_ptr())
        };
        if !ok {
            return Vec::new();
        }
        // SAFETY: Envoy filled the `n` records for this hook.
        unsafe { envoy_fields(raw.as_ptr(), n) }
    }

    /// Sets `name` in the `kind` map to `value` (every earlier value replaced); `None`
    /// removes it.
    pub fn set_header(self, kind: abi::HttpHeaderType, name: &str, value: Option<&[u8]>) {
        let value = value.map_or(
            abi::ModuleBuffer {
                ptr: std::ptr::null(),
                length: 0,
            },
            module_buffer,
        );
        // SAFETY: the current hook's filter; both buffers borrowed for the call (copied).
        unsafe {
            abi::envoy_dynamic_module_callback_http_set_header(
                self.0,
                kind,
                module_buffer(name.as_bytes()),
                value,
            );
        }
    }

    /// Adds one more `name: value` line to the `kind` map.
    pub fn add_header(self, kind: abi::HttpHeaderType, name: &str, value: &[u8]) {
        // SAFETY: as `set_header`.
        unsafe {
            abi::envoy_dynamic_module_callback_http_add_header(
                self.0,
                kind,
                module_buffer(name.as_bytes()),
                module_buffer(value),
            );
        }
    }

    /// Replaces the whole request header map with `pairs` (a repeated name: one line each),
    /// writing only what differs (a field whose one value stays is left alone).
    pub fn replace_request_headers(self, pairs: &[(&str, &[u8])]) {
        let kind = abi::HTTP_HEADER_TYPE_REQUEST_HEADER;
        self.make_headers(kind, &self.headers(kind), pairs);
    }

    /// Makes the `kind` map, which holds `held`, hold `pairs` instead (`:status` and the
    /// request's pseudo-headers among them when given; a held name that `pairs` lacks is
    /// removed). Only what differs is written: a field whose one value stays is left
    /// alone (each write is Envoy header-map work on every miss). A name repeated in
    /// `pairs` is written whole, one line each.
    fn make_headers(self, kind: abi::HttpHeaderType, held: &Fields, pairs: &[(&str, &[u8])]) {
        let count = |list: &mut dyn Iterator<Item = &str>, n: &str| {
            list.filter(|p| p.eq_ignore_ascii_case(n)).count()
        };
        for (n, _) in held {
            if !pairs.iter().any(|(p, _)| p.eq_ignore_ascii_case(n)) {
                self.set_header(kind, n, None);
            }
        }
        for (i, (n, v)) in pairs.iter().enumerate() {
            if pairs[..i].iter().any(|(p, _)| p.eq_ignore_ascii_case(n)) {
                self.add_header(kind, n, v);
                continue;
            }
            let unchanged = count(&mut pairs.iter().map(|(p, _)| *p), n) == 1
                && count(&mut held.iter().map(|(h, _)| h.as_str()), n) == 1
                && held
                    .iter()
                    .any(|(h, hv)| h.eq_ignore_ascii_case(n) && hv == v);
            if !unchanged {
                self.set_header(kind, n, Some(v));
            }
        }
    }

    /// Sends a local response: `status`, `pairs`, `body` (`None`: none, for `HEAD`).
    pub fn send(self, status: u16, pairs: &[(&str, &[u8])], body: Option<&[u8]>) {
        let mut h = lines(pairs);
        // SAFETY: the current hook's filter; the header records and body are borrowed for
        // the call (Envoy copies them into its reply).
        unsafe {
            abi::envoy_dynamic_module_callback_http_send_response(
                self.0,
                u32::from(status),
                h.as_mut_ptr(),
                h.len(),
                module_buffer(body.unwrap_or_default()),
                module_buffer(b"cachet"),
            );
        }
    }

    /// Answers the request from the filter itself: `status` and `pairs` as the response
    /// headers, then `body` (`None`: none, for `HEAD`), the way Envoy's cache filter
    /// answers a hit (`encodeHeaders`/`encodeData`, none of the local-reply machinery).
    /// Only while the request path is stopped and no response has begun; answers in the
    /// response path go through [`Self::send`].
    pub fn encode(self, status: u16, pairs: &[(&str, &[u8])], body: Option<&[u8]>) {
        let code = status.to_string();
        let mut all = Vec::with_capacity(pairs.len() + 1);
        all.push((":status", code.as_bytes()));
        all.extend_from_slice(pairs);
        let mut h = lines(&all);
        let body = body.filter(|b| !b.is_empty());
        // SAFETY: the current hook's filter; the records and body are borrowed for the
        // calls (Envoy copies them into its header map and buffer).
        unsafe {
            abi::envoy_dynamic_module_callback_http_send_response_headers(
                self.0,
                h.as_mut_ptr(),
                h.len(),
                body.is_none(),
            );
            if let Some(b) = body {
                abi::envoy_dynamic_module_callback_http_send_response_data(
                    self.0,
                    module_buffer(b),
                    true,
                );
            }
        }
    }

    /// Whether the response in hand came from the upstream (`response.code_details` is
    /// `via_upstream`, or unset) rather than from Envoy itself (a reset, a refused
    /// connection, a timeout: its own reply).
    pub fn via_upstream(self) -> bool {
        let mut b = abi::EnvoyBuffer {
            ptr: std::ptr::null(),
            length: 0,
        };
        // SAFETY: the current hook's filter; Envoy writes one buffer record into `b`.
        let ok = unsafe {
            abi::envoy_dynamic_module_callback_http_filter_get_attribute_string(
                self.0,
                abi::ATTRIBUTE_ID_RESPONSE_CODE_DETAILS,
                &raw mut b,
            )
        };
        // SAFETY: Envoy's bytes for this hook, compared at once.
        !ok || unsafe { envoy_bytes(b) } == b"via_upstream"
    }

    /// Rewrites the response in flight: its held headers become `status` and `pairs`, its
    /// buffered body `body`. For a filter that stopped the response headers and buffered
    /// the whole body, at the body's last chunk: on `Continue`, Envoy sends these headers
    /// and what the body buffers then (the buffered and the received data, both replaced).
    /// Only what differs is written: a field whose one value stays is left alone, and a
    /// body equal to the one held is not replaced (each write is Envoy header-map or
    /// buffer work on every miss).
    pub fn rewrite_response(self, status: u16, pairs: &[(&str, &[u8])], body: &[u8]) {
        let kind = abi::HTTP_HEADER_TYPE_RESPONSE_HEADER;
        let held = self.headers(kind);
        let status = status.to_string();
        let mut all = Vec::with_capacity(pairs.len() + 1);
        all.push((":status", status.as_bytes()));
        all.extend(pairs.iter().filter(|(n, _)| *n != ":status"));
        self.make_headers(kind, &held, &all);
        if self.response_body_size() == body.len() && self.response_body() == body {
            return;
        }
        for b in [
            abi::HTTP_BODY_TYPE_BUFFERED_RESPONSE_BODY,
            abi::HTTP_BODY_TYPE_RECEIVED_RESPONSE_BODY,
        ] {
            // SAFETY: the current hook's filter; draining more than held drains all.
            unsafe {
                abi::envoy_dynamic_module_callback_http_drain_body(self.0, b, usize::MAX);
            }
        }
        // SAFETY: the current hook's filter; `body` is borrowed for the call (copied).
        unsafe {
            abi::envoy_dynamic_module_callback_http_append_body(
                self.0,
                abi::HTTP_BODY_TYPE_RECEIVED_RESPONSE_BODY,
                module_buffer(body),
            );
        }
    }

    /// Sends a `cachet_http::Reply` as the local response.
    pub fn send_reply(self, r: &cachet_http::Reply) {
        let h: Vec<(&str, &[u8])> = r.headers.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
        self.send(r.status, &h, Some(&r.body));
    }

    /// Bytes of the response body Envoy holds for the filter: what it buffered, then what
    /// this hook received.
    pub fn response_body(self) -> Vec<u8> {
        self.body(RESPONSE_BODY)
    }

    /// Bytes of the response body held so far (buffered and received).
    pub fn response_body_size(self) -> usize {
        self.body_size(RESPONSE_BODY)
    }

    /// Bytes of the request body Envoy holds for the filter (buffered, then received).
    pub fn request_body(self) -> Vec<u8> {
        self.body(REQUEST_BODY)
    }

    /// Bytes of the request body held so far (buffered and received).
    pub fn request_body_size(self) -> usize {
        self.body_size(REQUEST_BODY)
    }

    fn body(self, kinds: [abi::HttpBodyType; 2]) -> Vec<u8> {
        let mut out = Vec::new();
        for kind in kinds {
            // SAFETY: the current hook's filter.
            let n = unsafe {
                abi::envoy_dynamic_module_callback_http_get_body_chunks_size(self.0, kind)
            };
            let mut raw = vec![
                abi::EnvoyBuffer {
                    ptr: std::ptr::null(),
                    length: 0,
                };
                n
            ];
            // SAFETY: `raw` has room for the `n` chunks just counted.
            let ok = unsafe {
                abi::envoy_dynamic_module_callback_http_get_body_chunks(
                    self.0,
                    kind,
                    raw.as_mut_ptr(),
                )
            };
            if ok {
                // SAFETY: Envoy filled the `n` chunks for this hook.
                out.extend(unsafe { envoy_chunks(raw.as_ptr(), n) });
            }
        }
        out
    }

    fn body_size(self, kinds: [abi::HttpBodyType; 2]) -> usize {
        kinds
            .into_iter()
            // SAFETY: the current hook's filter.
            .map(|k| unsafe { abi::envoy_dynamic_module_callback_http_get_body_size(self.0, k) })
            .sum()
    }

    /// Sends a request to `cluster` with `pairs` (pseudo-headers included) and `body`
    /// (empty: none); the answer comes to `on_http_filter_http_callout_done` with the
    /// returned id.
    ///
    /// # Errors
    /// Envoy's refusal (`HTTP_CALLOUT_INIT_RESULT_*`): nothing was sent.
    pub fn callout(
        self,
        cluster: &str,
        pairs: &[(&str, &[u8])],
        body: &[u8],
        timeout_ms: u64,
    ) -> Result<u64, u32> {
        callout(pairs, |id, h, n| {
            // SAFETY: the current hook's filter; `id` is written by Envoy; the records, the
            // cluster name and the body are borrowed for the call (Envoy copies them).
            unsafe {
                abi::envoy_dynamic_module_callback_http_filter_http_callout(
                    self.0,
                    id,
                    module_buffer(cluster.as_bytes()),
                    h,
                    n,
                    module_buffer(body),
                    timeout_ms,
                )
            }
        })
    }

    /// Resumes the request path (a stream the filter stopped in its request headers).
    pub fn continue_decoding(self) {
        // SAFETY: the current hook's filter.
        unsafe { abi::envoy_dynamic_module_callback_http_filter_continue_decoding(self.0) }
    }

    /// Resumes the response path.
    pub fn continue_encoding(self) {
        // SAFETY: the current hook's filter.
        unsafe { abi::envoy_dynamic_module_callback_http_filter_continue_encoding(self.0) }
    }

    /// A scheduler for this stream (events arrive on its worker thread as
    /// `on_http_filter_scheduled`).
    pub fn scheduler(self) -> Scheduler {
        // SAFETY: the current hook's filter; the scheduler is freed by `Scheduler::close`.
        let p = unsafe { abi::envoy_dynamic_module_callback_http_filter_scheduler_new(self.0) };
        Scheduler {
            ptr: std::sync::Mutex::new(Some(SchedulerPtr(p))),
            commit: abi::envoy_dynamic_module_callback_http_filter_scheduler_commit,
            delete: abi::envoy_dynamic_module_callback_http_filter_scheduler_delete,
            event: EVENT_WOKEN,
        }
    }
}

struct SchedulerPtr(*mut core::ffi::c_void);

// SAFETY: the ABI lets any thread commit to a scheduler ("callable from any thread"); the
// pointer is only used under the `Scheduler`'s mutex, and deleted once, by `close`.
unsafe impl Send for SchedulerPtr {}

/// A scheduler (a stream's, or the configuration's), shared with the threads that may
/// wake it ([`crate::store::Wake`]): each wake commits its one event. `close` frees it on
/// its own thread; a wake after that does nothing.
pub struct Scheduler {
    ptr: std::sync::Mutex<Option<SchedulerPtr>>,
    commit: unsafe extern "C" fn(*mut core::ffi::c_void, u64),
    delete: unsafe extern "C" fn(*mut core::ffi::c_void),
    event: u64,
}

/// The event the module schedules to a stream: its parked request may look again.
pub const EVENT_WOKEN: u64 = 1;

/// The event the module schedules to its configuration: queued refreshes are due.
pub const EVENT_REFRESH: u64 = 1;

/// The event the module's ticker schedules to its configuration: a lurker step is due.
pub const EVENT_LURK: u64 = 2;

impl Scheduler {
    /// Frees the scheduler (on its own thread: the stream's, or the main thread).
    pub fn close(&self) {
        let taken = (self.ptr.lock())
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(p) = taken {
            // SAFETY: made by the matching `scheduler_new` and freed once (taken out under
            // the lock, so no commit runs concurrently or after).
            unsafe { (self.delete)(p.0) }
        }
    }
}

impl crate::store::Wake for Scheduler {
    fn wake(&self) {
        let held = (self.ptr.lock()).unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(p) = held.as_ref() {
            // SAFETY: alive until `close` (which takes the same lock); commit is callable
            // from any thread.
            unsafe { (self.commit)(p.0, self.event) };
        }
    }
}

/// A filter configuration in Envoy (`envoy_dynamic_module_type_http_filter_config_envoy_ptr`):
/// valid from `on_http_filter_config_new` until `on_http_filter_config_destroy`; its
/// callouts are made on the main thread only (its scheduler's events arrive there).
#[derive(Debug, Clone, Copy)]
pub struct Config(pub abi::HttpFilterConfigEnvoyPtr);

impl Config {
    /// Defines counter `name` (no labels) on the configuration; its id, or Envoy's refusal.
    /// Only in `config_new`.
    ///
    /// # Errors
    /// Envoy's `METRICS_RESULT_*` (stats creation frozen: after initialization).
    pub fn define_counter(self, name: &str) -> Result<usize, u32> {
        self.define(
            name,
            abi::envoy_dynamic_module_callback_http_filter_config_define_counter,
        )
    }

    /// Defines gauge `name` (no labels), as [`Self::define_counter`].
    ///
    /// # Errors
    /// Envoy's `METRICS_RESULT_*`.
    pub fn define_gauge(self, name: &str) -> Result<usize, u32> {
        self.define(
            name,
            abi::envoy_dynamic_module_callback_http_filter_config_define_gauge,
        )
    }

    fn define(
        self,
        name: &str,
        f: unsafe extern "C" fn(
            abi::HttpFilterConfigEnvoyPtr,
            abi::ModuleBuffer,
            *mut abi::ModuleBuffer,
            usize,
            *mut usize,
        ) -> abi::MetricsResult,
    ) -> Result<usize, u32> {
        let mut id = 0usize;
        // SAFETY: called in `config_new` on the main thread; `id` is written by Envoy; the
        // name is borrowed for the call (Envoy interns it).
        let r = unsafe {
            f(
                self.0,
                module_buffer(name.as_bytes()),
                std::ptr::null_mut(),
                0,
                &raw mut id,
            )
        };
        if r == abi::METRICS_RESULT_SUCCESS {
            Ok(id)
        } else {
            Err(r)
        }
    }

    /// Adds `by` to counter `id` from the main thread.
    pub fn count(self, id: usize, by: u64) {
        // SAFETY: the configuration's hook on the main thread; no labels.
        unsafe {
            abi::envoy_dynamic_module_callback_http_filter_config_increment_counter(
                self.0,
                id,
                std::ptr::null_mut(),
                0,
                by,
            );
        }
    }

    /// Sets gauge `id` to `value` from the main thread.
    pub fn set_gauge(self, id: usize, value: u64) {
        // SAFETY: the configuration's hook on the main thread; no labels.
        unsafe {
            abi::envoy_dynamic_module_callback_http_filter_config_set_gauge(
                self.0,
                id,
                std::ptr::null_mut(),
                0,
                value,
            );
        }
    }

    /// [`Stream::callout`] from the configuration: the answer comes to
    /// `on_http_filter_config_http_callout_done` on the main thread.
    ///
    /// # Errors
    /// Envoy's refusal (`HTTP_CALLOUT_INIT_RESULT_*`): nothing was sent.
    pub fn callout(
        self,
        cluster: &str,
        pairs: &[(&str, &[u8])],
        body: &[u8],
        timeout_ms: u64,
    ) -> Result<u64, u32> {
        callout(pairs, |id, h, n| {
            // SAFETY: called on the main thread from one of the configuration's hooks (the
            // type's contract); `id` is written by Envoy; records, name and body borrowed.
            unsafe {
                abi::envoy_dynamic_module_callback_http_filter_config_http_callout(
                    self.0,
                    id,
                    module_buffer(cluster.as_bytes()),
                    h,
                    n,
                    module_buffer(body),
                    timeout_ms,
                )
            }
        })
    }

    /// A scheduler of the configuration whose wakes commit `event` (events arrive on the
    /// main thread as `on_http_filter_config_scheduled`).
    pub fn scheduler(self, event: u64) -> Scheduler {
        // SAFETY: called in `config_new` on the main thread; freed by `Scheduler::close`.
        let p =
            unsafe { abi::envoy_dynamic_module_callback_http_filter_config_scheduler_new(self.0) };
        Scheduler {
            ptr: std::sync::Mutex::new(Some(SchedulerPtr(p))),
            commit: abi::envoy_dynamic_module_callback_http_filter_config_scheduler_commit,
            delete: abi::envoy_dynamic_module_callback_http_filter_config_scheduler_delete,
            event,
        }
    }
}
