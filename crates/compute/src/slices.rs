//! The edge's side of `cachet_http::stitch`: a request no one slice answers
//! (`Plan::stitch`) runs as one request per slice, each a range inside its slice through
//! the ordinary cached flow (a stored slice's `HIT`, or its fill as that slice), and the
//! parts' bodies are appended into one response (`Body::append`: the bytes stay in the
//! host, so memory in the instance is one slice's at most). Every rule is the stitcher's.

use cachet_http::stitch::{Stitcher, Took};
use cachet_policy::plan::Stitch;

use crate::{Access, ClientRequest, Ctx, EdgeError, Host, Outcome, Payload, Response};

/// Answers `req` (planned to combine `want`) from its slices, or through its ordinary
/// flow (`whole`) when they cannot be combined.
///
/// # Errors
/// As the parts' flow (`crate::handle`).
pub(crate) fn serve<H: Host>(
    cx: Ctx<'_, H>,
    want: Stitch,
    req: ClientRequest<H::Body>,
    f: &mut Access,
    whole: impl FnOnce(Ctx<'_, H>, ClientRequest<H::Body>, &mut Access) -> Result<Outcome<H>, EdgeError>,
) -> Result<Outcome<H>, EdgeError> {
    let mut s = Stitcher::new(want, None);
    let mut body: Option<H::Body> = None;
    let mut after = Vec::new();
    loop {
        let mut part = req.without_body();
        part.headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case("range"));
        part.headers
            .push(("range".to_owned(), s.range().into_bytes()));
        // A range inside one slice: planned, looked up and filled as that slice.
        let out = crate::handle(cx, part, f)?;
        let took = s.take(out.resp.status, &out.resp.headers);
        if took == Took::AsIs && body.is_none() {
            return Ok(out);
        }
        let bytes = match (took, out.resp.body) {
            (Took::More | Took::Done, Payload::Bytes(b)) => cx.host.body_from(b),
            (Took::More | Took::Done, Payload::Stream(b)) => b,
            (Took::More | Took::Done, Payload::Empty) => cx.host.body_from(Vec::new()),
            // A gzip stream to inflate, or parts that do not combine: the ordinary flow.
            _ => return whole(cx, req, f),
        };
        after.extend(out.after);
        match &mut body {
            Some(b) => cx.host.body_append(b, bytes),
            None => body = Some(bytes),
        }
        if took == Took::Done {
            break;
        }
    }
    let (status, headers) = s.head();
    f.cache = s.cache();
    let body = body.map_or(Payload::Empty, Payload::Stream);
    Ok(Outcome {
        resp: Response {
            status,
            headers,
            body,
        },
        after,
    })
}
