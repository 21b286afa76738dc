//! Delivery: answers from stored objects and Cachet's own replies, written to the stream.

#[allow(
    clippy::wildcard_imports,
    reason = "a seam of vm.rs: the parent module's types and imports"
)]
use super::*;
use std::borrow::Cow;

impl Vm {
    /// Sends a stored object to the current stream, with `extra` header lines added (a
    /// per-user 304's own `Set-Cookie`, never stored, as their bytes): the engine
    /// (`cachet_http::deliver`) decides status, headers and bytes; the header values go
    /// through the per-request workspace (cachet-workspace), cleared to its high watermark
    /// right after.
    pub(super) fn respond(
        &self,
        obj: &StoredObject,
        status: CacheStatus,
        client: &Client,
        now: Timestamp,
        extra: &[(&str, &[u8])],
    ) {
        let meta = &obj.h.meta;
        let d = cachet_http::deliver(meta, client, now, status);
        let inflated = match (d.inflate(), obj.identity()) {
            (false, _) => None,
            (true, Some(kept)) => Some(Cow::Borrowed(kept)),
            (true, None) => match object::gunzip(&obj.body) {
                Ok(b) => {
                    // Kept in the in-VM tier: the next identity client skips the inflate.
                    self.cache.borrow_mut().keep_identity(obj, b.clone());
                    self.flush();
                    Some(Cow::Owned(b))
                }
                Err(e) => {
                    send_error(&self.port, &WorkerError::Body(e));
                    return;
                }
            },
        };
        let bytes: &[u8] = inflated.as_deref().unwrap_or(&obj.body);
        let head = d.head(bytes.len() as u64);
        let body = head.body.select(bytes);
        let mut ws = self.ws.borrow_mut();
        // Values computed for this response (Age, Date, lengths) live in the VM's
        // per-request workspace (cachet-workspace), cleared to its high watermark right
        // after; stored fields are borrowed from the object, as the origin's bytes.
        let scratch = ws.as_mut().map(Workspace::scratch);
        let mut h: Vec<(&str, &[u8])> = head
            .headers
            .iter()
            .map(|(n, v)| {
                let v: &[u8] = match v {
                    Cow::Borrowed(b) => b,
                    Cow::Owned(o) => scratch
                        .as_ref()
                        .and_then(|s| s.alloc_copy(o).ok())
                        .map_or(o.as_slice(), |x| &*x),
                };
                (n.as_ref(), v)
            })
            .collect();
        h.extend_from_slice(extra);
        self.port.send(head.status, &h, body);
        drop(h);
        drop(scratch);
        if let Some(w) = ws.as_mut() {
            self.reset_workspace(w);
        }
    }

    /// Clears the per-request workspace to its high watermark (a sampled draw decides
    /// when the watermark moves); the gauge is written when it moves (a host call per hit
    /// otherwise).
    fn reset_workspace(&self, w: &mut Workspace) {
        let m = self.m();
        let draw = u32::try_from(self.cache.borrow_mut().draw() >> 32).unwrap_or(0);
        match w.reset(draw) {
            Ok(r) if r.watermark as u64 != self.watermark.get() => {
                self.watermark.set(r.watermark as u64);
                Metrics::set(&self.port, m.workspace_watermark, r.watermark as u64);
            }
            Ok(_) => {}
            Err(_) => Metrics::inc(&self.port, m.workspace_violations),
        }
    }
}

/// The one place filter errors become HTTP responses (the mapping itself is
/// `cachet_http::reply`'s).
pub(super) fn error_response(e: &WorkerError) -> Reply {
    cachet_http::reply::failure(match e {
        WorkerError::Config(_) => Failure::Config,
        WorkerError::Origin {
            retry_after_secs, ..
        } => Failure::Origin {
            retry_after_secs: *retry_after_secs,
        },
        WorkerError::Body(_) => Failure::Cache {
            retry_after_secs: retry_after_secs(RETRY_AFTER),
        },
    })
}

pub(super) fn send_error(port: &Port, e: &WorkerError) {
    send_reply(port, &error_response(e));
}

pub(super) fn send_synth(port: &Port, s: &Synth) {
    send_reply(port, &cachet_http::reply::synth(s));
}

/// Sends a `cachet_http::Reply` as the stream's local response.
pub(super) fn send_reply(port: &Port, r: &Reply) {
    let h: Vec<(&str, &[u8])> = r.headers.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
    port.send(r.status, &h, Some(&r.body));
}
