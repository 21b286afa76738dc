//! Cachet's HTTP cache engine: what reaches the wire from a stored object, written once.
//!
//! Both adapters (the Fastly edge app and the Envoy filter) drive this crate; it reads
//! header **bytes** through the small [`Headers`] trait and never does I/O, never reads a
//! clock (`now` is a parameter). It owns the decisions that sit between the policy
//! (`cachet-policy`: plan, storability, freshness) and the platform:
//!
//! * [`deliver()`]: the exact status, header set and byte range of every answer built from a
//!   stored object: `304` for a client's conditional request (RFC 9110 §13), `206`/`416`
//!   for a `Range` (RFC 9110 §14), `Age` as the total current age (RFC 9111 §4.2.3),
//!   `Date`, `Vary`, `Content-Encoding` and `Content-Length` for the representation
//!   actually sent (stored gzip as-is or inflated), a strong `ETag` made weak when the edge
//!   compressed the body (as Varnish does).
//! * [`fields`]: hop-by-hop and `Connection`-listed fields (RFC 9110 §7.6.1), never stored
//!   nor forwarded; which client request fields may reach a fill.
//! * [`invalidate`]: the URIs a non-error answer to an unsafe method invalidates
//!   (RFC 9111 §4.4), as per-URL surrogate keys every variant carries.
//! * [`lookup`]: what a request does with what its lookup found (serve, refresh after,
//!   revalidate, fill, pass, purge and look again, `504` for `only-if-cached`).
//! * [`fill`]: what an origin answer to a fill or a revalidation becomes (store, marker,
//!   freshen, keep) and the exact fields a fill sends.
//! * [`exchange`]: the whole flow of a cacheable request as a sans-IO state machine
//!   (events in, actions out) that a host drives with platform I/O only.
//! * [`unstored()`]: an origin answer passed to its client: fields removed and added,
//!   gzip inflated for an identity client of a fill.
//! * [`Inputs`]: the request fields the policy plans from, read once from header bytes.
//! * [`authority`]: the request's `Host` checked before a platform builds a URL from it
//!   (a missing or malformed one is the plan's `400`, never a panic).
//! * [`CacheStatus`]: the typed `X-Cache` value.
//! * [`access`]: the edge's access-log record, the schema the CLI reads.
//!
//! Why a crate of its own: the policy answers "what is this request, may this response be
//! stored, for how long"; this crate answers "which bytes and headers go out". It depends
//! on the policy's stored [`Meta`](cachet_policy::object::Meta), so it sits above it.
#![forbid(unsafe_code)]

pub mod access;
pub mod authority;
pub mod conditional;
pub mod date;
pub mod deliver;
pub mod exchange;
pub mod fields;
pub mod fill;
pub mod headers;
pub mod invalidate;
pub mod lookup;
pub mod range;
pub mod reply;
pub mod request;
pub mod response;
mod status;
pub mod stitch;
pub mod store;
pub mod unstored;
pub mod vary;

pub use conditional::{EntityTag, Precondition};
pub use deliver::{Answer, Client, Delivery, Head, deliver};
pub use fill::{Filled, Revalidated};
pub use headers::Headers;
pub use invalidate::{invalidation_keys, url_key};
pub use range::{ByteRange, RangeRequest};
pub use reply::{Failure, Reply};
pub use request::Inputs;
pub use response::ResponseFields;
pub use status::CacheStatus;
pub use unstored::{Unstored, unstored};
