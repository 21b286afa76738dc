//! What an adapter stores per object: the body (gzip when compressible) and its metadata.
//!
//! Seed: Hatena Blog stored objects gzip-compressed in Varnish and inflated only for the
//! rare client without gzip: ~3x more objects in the same memory.

use std::hash::{Hash, Hasher};
use std::io::Read;

use cachet_ban::BanTarget;
use cachet_refresh::{EntryTimes, Timestamp, Validators};
use serde::{Deserialize, Serialize};

/// Version of the stored [`Meta`] layout; objects stored under another version are misses.
pub const META_VERSION: u8 = 3;

/// Prefix of the per-object surrogate key ([`object_tag`]).
pub const OBJECT_TAG_PREFIX: &str = "cachet-obj-";

/// Prefix of the per-URL surrogate key ([`url_tag`]) every variant of a URL carries.
pub const URL_TAG_PREFIX: &str = "cachet-url-";

/// Largest inflated body served to an identity client, in bytes: a gzip bomb in the cache
/// cannot make the edge allocate without bound.
pub const MAX_INFLATED_BYTES: u64 = 64 * 1024 * 1024;

/// Hop-by-hop header fields (RFC 9110 §7.6.1, plus the legacy `Keep-Alive` and
/// `Proxy-Connection`) and `Content-Length`: never copied from one connection to another;
/// adapters recompute them.
pub const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
];

/// Whether `name` is a [`HOP_BY_HOP`] field (ASCII case-insensitive).
pub fn is_hop_by_hop(name: &str) -> bool {
    HOP_BY_HOP.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// Origin response headers never stored with an object besides [`HOP_BY_HOP`]: per-user,
/// or recomputed at delivery.
const NOT_STORED: &[&str] = &[
    "content-encoding",
    "vary",
    "age",
    "set-cookie",
    "surrogate-key",
    "surrogate-control",
    // An upstream cache's status (a shield's `X-Cache`): ours is set at delivery.
    "x-cache",
    // A stored slice's range is `Meta::slice`; delivery computes the one it sends.
    "content-range",
];

/// How the stored body is encoded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// Uncompressed.
    Identity,
    /// gzip, compressed by the edge or by the origin.
    Gzip,
    /// Another encoding the origin chose (`br`, `zstd`, …): served only to clients that
    /// accept it.
    Other(String),
}

/// Object metadata, stored as JSON next to the body (Fastly: the core cache's user metadata,
/// which Viceroy implements; Envoy: the shared-data entry).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Layout version, [`META_VERSION`].
    pub v: u8,
    /// A hit-for-pass marker: the key's content is private; requests go to the origin.
    pub pass: bool,
    /// Origin status.
    pub status: u16,
    /// Stored response headers (name, value bytes), in origin order. Values are bytes as
    /// the origin sent them (obs-text included, RFC 9110 §5.5): a value that is UTF-8 is
    /// stored as a JSON string, any other as the array of its bytes (`field_values`).
    #[serde(with = "field_values")]
    pub headers: Vec<(String, Vec<u8>)>,
    /// The client-facing `Vary`.
    pub vary: String,
    /// Encoding of the stored body.
    pub encoding: Encoding,
    /// Stored body length, bytes.
    pub stored_len: u64,
    /// Length before the edge compressed it (the origin's body length), bytes.
    pub origin_len: u64,
    /// Route that stored it.
    pub route: String,
    /// Lower-cased host the object was stored for.
    #[serde(default)]
    pub host: String,
    /// Request target (path + normalized query) the object was stored for: Varnish's
    /// `req.url` / the conventional `obj.http.x-url` of lurker-friendly bans.
    #[serde(default)]
    pub url: String,
    /// Surrogate keys attached to the object (origin's then route's).
    #[serde(default)]
    pub surrogate_keys: Vec<String>,
    /// Storage time, TTL, grace, keep and the measured fetch time (XFetch's delta).
    pub times: EntryTimes,
    /// `ETag` / `Last-Modified` for conditional revalidation (RFC 9111 §4.3.1).
    #[serde(default)]
    pub validators: Validators,
    /// Per-object surrogate key ([`object_tag`]), so one object can be purged or
    /// soft-purged alone (bans found at lookup, early refresh on Fastly).
    #[serde(default)]
    pub tag: String,
    /// The age the response already had when it was stored (the upstream `Age`, RFC 9111
    /// §4.2.3's `corrected_initial_age`), whole seconds: added to the resident time in the
    /// `Age` sent; [`EntryTimes::ttl`] is already net of it.
    #[serde(default)]
    pub initial_age_s: u64,
    /// The edge gzip-compressed the body (the origin sent it unencoded): the gzip
    /// representation is a different one, so its strong `ETag` is sent weak (as Varnish
    /// does with `http_gzip_support`).
    #[serde(default)]
    pub compressed: bool,
    /// `stale-if-error` (RFC 5861 §4), whole seconds past expiry during which an origin
    /// failure is answered with this object even beyond grace
    /// (`cachet_refresh::on_origin_error`).
    #[serde(default)]
    pub stale_if_error_s: u64,
    /// The request fields this object varies on besides the device class and the encoding
    /// (`Store::vary_fields`). On a **vary marker** ([`Meta::vary_marker`]) they tell a
    /// lookup how to find the variant; on a variant they are informative.
    #[serde(default)]
    pub vary_fields: Vec<String>,
    /// On a vary marker: the variant keys stored under it so far (bounds the variants per
    /// URL, `[edge].max_variants`).
    #[serde(default)]
    pub variants: Vec<String>,
    /// When this copy's content left the origin, ms since the epoch, when an upstream
    /// Cachet shield said so ([`CONTENT_AT_FIELD`]) and it is earlier than the fill: the
    /// time bans compare with ([`Meta::ban_at`]). `None`: the fill's own time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_at_ms: Option<u64>,
    /// When the origin last failed a fill or revalidation of this key, ms since the epoch
    /// (edge only): requests that were waiting for that fetch are answered as it was —
    /// stale within `stale-if-error`, else `503` — instead of asking the origin again one
    /// after another (issue 28 items 5 and 8; RFC 5861 §4). `None`: no failure recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin_failed_at_ms: Option<u64>,
    /// A stored slice (partial content, `RouteConfig::slice_bytes`): this object's body is
    /// bytes `first ..= first + len - 1` of a representation of `total` bytes, from the
    /// origin's `206` (RFC 9111 §3.3). `None`: the whole representation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slice: Option<SlicePart>,
}

/// Where a stored slice sits in its representation ([`Meta::slice`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlicePart {
    /// Offset of the body's first byte in the representation.
    pub first: u64,
    /// The representation's complete length (`Content-Range: bytes a-b/total`).
    pub total: u64,
}

/// The reserved response field a Cachet shield adds when it answers its edge tier from a
/// stored object (`cachet_http::deliver`): the object's [`Meta::ban_at`] in ms. An edge
/// that stores the answer takes it as its copy's ban time when it is earlier than its
/// own fill (`cachet_http::store::object`), so a copy the shield filled before a ban is
/// banned on the edge too, whichever tier applied the ban first (issue 27 item 7). Never
/// stored, never sent to clients ([`stored_header`], `cachet_http::fields::returned`).
pub const CONTENT_AT_FIELD: &str = "x-cachet-content-at";

impl Meta {
    /// A hit-for-pass marker for `route`, stored at `now` for `ttl`.
    pub fn marker(route: &str, now: Timestamp, ttl: std::time::Duration) -> Self {
        Self {
            v: META_VERSION,
            pass: true,
            status: 0,
            headers: Vec::new(),
            vary: String::new(),
            encoding: Encoding::Identity,
            stored_len: 0,
            origin_len: 0,
            route: route.to_owned(),
            host: String::new(),
            url: String::new(),
            surrogate_keys: Vec::new(),
            times: EntryTimes::new(now, ttl),
            validators: Validators::default(),
            tag: String::new(),
            initial_age_s: 0,
            compressed: false,
            stale_if_error_s: 0,
            vary_fields: Vec::new(),
            variants: Vec::new(),
            content_at_ms: None,
            origin_failed_at_ms: None,
            slice: None,
        }
    }

    /// A failure marker for `route`: what an edge fill leaves when the origin failed and
    /// nothing was stored, so the requests collapsed behind it are answered at once
    /// instead of each asking the origin in turn (issue 28 item 8). No content, never
    /// fresh; [`Meta::is_failure_marker`].
    pub fn failure_marker(route: &str, now: Timestamp) -> Self {
        Self {
            pass: false,
            origin_failed_at_ms: Some(now.as_millis()),
            ..Self::marker(route, now, std::time::Duration::ZERO)
        }
    }

    /// Whether this is a [`Meta::failure_marker`] (no content to serve).
    pub fn is_failure_marker(&self) -> bool {
        !self.pass && self.status == 0 && self.origin_failed_at_ms.is_some()
    }

    /// Parses stored metadata; `None` if it is not ours or from another layout version
    /// (treated as a miss).
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        serde_json::from_slice::<Self>(b)
            .ok()
            .filter(|m| m.v == META_VERSION)
    }

    /// Serialized form (JSON).
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serializing plain strings and integers cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The first stored value of header `name` (ASCII case-insensitive) as text: `None`
    /// when absent or not UTF-8 ([`Meta::header_bytes`] has every value).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.header_bytes(name)
            .and_then(|v| std::str::from_utf8(v).ok())
    }

    /// The first stored value of header `name` (ASCII case-insensitive), as stored.
    pub fn header_bytes(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// The object a `304 Not Modified` makes of this one (RFC 9111 §4.3.4): the same body
    /// and keys, `times` and `validators` as `cachet_refresh::on_revalidation` computed
    /// them, and the stored header fields updated from the 304's `fields` (RFC 9111 §3.2):
    /// each field the 304 carries that objects store ([`stored_header`]) replaces every
    /// stored line of that name (ASCII case-insensitive), in the 304's order; the other
    /// stored fields stay. Fields objects never store are ignored (`Content-Length`,
    /// `Content-Encoding` and `Vary` describe the stored body, `Set-Cookie` is per-user,
    /// hop-by-hop fields belong to the connection). Values are bytes, kept as the 304 sent
    /// them. Callers check
    /// [`ResponseView::per_user`](crate::ResponseView::per_user) on the 304 first.
    #[must_use]
    pub fn freshened<N: AsRef<str>, V: AsRef<[u8]>>(
        &self,
        times: EntryTimes,
        validators: Validators,
        fields: impl IntoIterator<Item = (N, V)>,
    ) -> Self {
        let mut content_at_ms = None;
        let updates: Vec<(N, V)> = fields
            .into_iter()
            .filter(|(n, v)| {
                if n.as_ref().eq_ignore_ascii_case(CONTENT_AT_FIELD) {
                    content_at_ms = std::str::from_utf8(v.as_ref())
                        .ok()
                        .and_then(|t| t.trim().parse::<u64>().ok());
                }
                stored_header(n.as_ref())
            })
            .collect();
        let mut fresh = self.clone();
        // The 304 vouches for the content as of its own time: the origin's (none), or an
        // upstream shield's copy's (issue 27 item 7).
        fresh.content_at_ms = content_at_ms.filter(|&ms| ms < times.stored_at.as_millis());
        fresh.times = times;
        fresh.validators = validators;
        // Revalidated: an earlier failure no longer describes it.
        fresh.origin_failed_at_ms = None;
        fresh.headers.retain(|(n, _)| {
            !updates
                .iter()
                .any(|(u, _)| u.as_ref().eq_ignore_ascii_case(n))
        });
        fresh.headers.extend(
            updates
                .into_iter()
                .map(|(n, v)| (n.as_ref().to_owned(), v.as_ref().to_vec())),
        );
        fresh
    }
}

impl Meta {
    /// A vary marker for `route` stored at `now` for `ttl`: held under a URL's primary
    /// cache key when the origin varies on request fields (`fields`), it holds no content
    /// and sends lookups to the variant (`cachet_http::vary::variant_key`). Adapters that
    /// keep variants themselves (Envoy) use it; Fastly's core cache keeps variants natively.
    pub fn vary_marker(
        route: &str,
        now: Timestamp,
        ttl: std::time::Duration,
        fields: Vec<String>,
    ) -> Self {
        let mut m = Self::marker(route, now, ttl);
        m.pass = false;
        m.vary_fields = fields;
        m
    }

    /// Whether this is a vary marker (no content; see [`Meta::vary_marker`]).
    pub fn is_vary_marker(&self) -> bool {
        !self.pass && self.status == 0 && !self.vary_fields.is_empty()
    }

    /// The time bans and purges compare with (Varnish's object time): when the content
    /// left the origin, i.e. the fill's time ([`EntryTimes::stored_at`]), or an upstream
    /// shield's earlier one ([`Meta::content_at_ms`]). A ban or purge added after it
    /// covers the object on every tier (issue 27 item 7).
    pub fn ban_at(&self) -> Timestamp {
        let stored = self.times.stored_at;
        match self.content_at_ms {
            Some(ms) if ms < stored.as_millis() => Timestamp::from_millis(ms),
            _ => stored,
        }
    }

    /// The object's surrogate keys as the `Surrogate-Key` line a ban reads: its keys, then
    /// its per-object tag, space-separated.
    pub fn surrogate_key_line(&self) -> String {
        let mut line = self.surrogate_keys.join(" ");
        if !self.tag.is_empty() {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(&self.tag);
        }
        line
    }

    /// The object as a ban target, its key line computed now
    /// ([`Meta::surrogate_key_line`]).
    pub fn ban_view(&self) -> BanView<'_> {
        BanView {
            meta: self,
            keys: std::borrow::Cow::Owned(self.surrogate_key_line()),
        }
    }
}

/// A stored object as a ban target (Varnish `obj.*`). `obj.http.x-url` and `obj.http.x-host`
/// answer the stored URL and host when the origin sent no such header (the lurker-friendly
/// ban convention of the Varnish Users Guide, "Lurker-Friendly Bans"); `obj.http.surrogate-key`
/// answers the object's surrogate keys and its per-object tag, space-separated, so a ban on
/// a key (or on one object's tag) matches. Times are seconds since the epoch.
#[derive(Debug, Clone)]
pub struct BanView<'a> {
    meta: &'a Meta,
    keys: std::borrow::Cow<'a, str>,
}

impl<'a> BanView<'a> {
    /// The view with a key line the caller already holds (adapters that cache it per
    /// object); it must be [`Meta::surrogate_key_line`]'s value.
    pub fn with_keys(meta: &'a Meta, keys: &'a str) -> Self {
        Self {
            meta,
            keys: std::borrow::Cow::Borrowed(keys),
        }
    }
}

impl BanTarget for BanView<'_> {
    fn inserted_at_s(&self) -> f64 {
        ms_to_s(self.meta.ban_at().as_millis())
    }

    fn url(&self) -> &str {
        &self.meta.url
    }

    fn header(&self, name: &str) -> Option<&str> {
        if name.eq_ignore_ascii_case(cachet_ban::SURROGATE_KEY_HEADER) {
            return (!self.keys.is_empty()).then_some(&*self.keys);
        }
        if let Some(v) = self.meta.header(name) {
            return Some(v);
        }
        cachet_ban::derived_header(name, &self.meta.url, Some(&self.meta.host))
    }

    fn status(&self) -> u16 {
        self.meta.status
    }

    fn ttl_s_at(&self, at_s: f64) -> f64 {
        ms_to_s(self.meta.times.expiry().as_millis()) - at_s
    }

    fn age_s_at(&self, at_s: f64) -> f64 {
        at_s - self.inserted_at_s()
    }

    fn grace_s(&self) -> f64 {
        self.meta.times.grace.as_secs_f64()
    }

    fn keep_s(&self) -> f64 {
        self.meta.times.keep.as_secs_f64()
    }
}

#[allow(
    clippy::cast_precision_loss,
    reason = "ms since the epoch stay below 2^53 for the next 285,000 years"
)]
fn ms_to_s(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// The per-object surrogate key of `cache_key`: [`OBJECT_TAG_PREFIX`] + 16 hex digits of a
/// 64-bit SipHash (fixed keys, so every instance computes the same tag).
pub fn object_tag(cache_key: &str) -> String {
    #[allow(
        deprecated,
        reason = "SipHasher with fixed zero keys is what we want: stable across instances"
    )]
    let mut h = std::hash::SipHasher::new();
    cache_key.hash(&mut h);
    format!("{OBJECT_TAG_PREFIX}{:016x}", h.finish())
}

/// The value of the shard field (`[origin].shard_header`) a fill for `cache_key` carries:
/// the key's [`object_tag`] (`cachet-obj-<16 hex>`, a fixed-key SipHash, so every edge
/// computes the same value for the same key and a hashing load balancer sends the key to
/// the same shield from every edge). The caller passes the plan's primary cache key, so
/// every `Vary` variant of a URL lands on the shield holding its vary marker. Text, never
/// the key itself (the key may hold bytes a header value cannot). Source: issue 15.
pub fn shard_value(cache_key: &str) -> String {
    object_tag(cache_key)
}

/// The per-URL surrogate key of `host` (normalized, lower-case) and `target` (path and
/// normalized query): [`URL_TAG_PREFIX`] + 16 hex digits of a 64-bit SipHash (fixed keys).
/// Every variant stored for the URL (each device class, each `Vary` value) carries it, so
/// one purge invalidates them all (RFC 9111 §4.4 invalidation after unsafe methods).
pub fn url_tag(host: &str, target: &str) -> String {
    #[allow(
        deprecated,
        reason = "SipHasher with fixed zero keys is what we want: stable across instances"
    )]
    let mut h = std::hash::SipHasher::new();
    host.hash(&mut h);
    target.hash(&mut h);
    format!("{URL_TAG_PREFIX}{:016x}", h.finish())
}

/// Whether an origin header is kept with the object (not a pseudo-header such as
/// `:status`, not [`HOP_BY_HOP`], not one of the fields recomputed at delivery or
/// per-user: `Content-Encoding`, `Vary`, `Age`, `Set-Cookie`, `Surrogate-Key`,
/// `Surrogate-Control`, `Date`, an upstream cache's `X-Cache`; not Cachet's reserved
/// `x-cachet-*` fields, such as a shield's [`CONTENT_AT_FIELD`]).
pub fn stored_header(name: &str) -> bool {
    !name.starts_with(':')
        && !is_hop_by_hop(name)
        && !NOT_STORED.iter().any(|n| n.eq_ignore_ascii_case(name))
        && !name
            .get(..crate::RESERVED_FIELD_PREFIX.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(crate::RESERVED_FIELD_PREFIX))
}

impl Encoding {
    /// The encoding an origin's `Content-Encoding` value declares (absent, empty or
    /// `identity` → identity; `gzip` / `x-gzip` → gzip, RFC 9110 §8.4.1.3; anything else
    /// kept lower-cased).
    pub fn from_content_encoding(value: Option<&str>) -> Self {
        match value.map(str::trim) {
            None | Some("") => Self::Identity,
            Some(e) if e.eq_ignore_ascii_case("identity") => Self::Identity,
            Some(e) if e.eq_ignore_ascii_case("gzip") || e.eq_ignore_ascii_case("x-gzip") => {
                Self::Gzip
            }
            Some(e) => Self::Other(e.to_ascii_lowercase()),
        }
    }
}

/// The bytes to store for an origin body and their encoding: gzip-compressed at `level`
/// when `compress` (the policy's `Store::compress` and `Store::gzip_level`) and the
/// origin sent it unencoded, else as the origin sent it (seed: Hatena stored gzip, ~3×
/// more objects per byte).
///
/// # Errors
/// I/O errors from the encoder (none expected for an in-memory sink).
pub fn for_storage(
    body: &[u8],
    content_encoding: Option<&str>,
    compress: bool,
    level: u32,
) -> std::io::Result<(Encoding, Vec<u8>)> {
    let origin = Encoding::from_content_encoding(content_encoding);
    if compress && origin == Encoding::Identity {
        Ok((Encoding::Gzip, gzip_at(body, level)?))
    } else {
        Ok((origin, body.to_vec()))
    }
}

/// gzip-compresses `body` at level 6, the zlib default ([`gzip_at`]).
///
/// # Errors
/// I/O errors from the encoder (none expected for an in-memory sink).
pub fn gzip(body: &[u8]) -> std::io::Result<Vec<u8>> {
    gzip_at(body, crate::config::DEFAULT_GZIP_LEVEL)
}

/// gzip-compresses `body` at `level`: 1 (fastest) to 9 (smallest); a level above 9 is
/// taken as 9 (the configuration refuses it before it gets here).
///
/// The output is byte for byte `flate2::write::GzEncoder`'s (the same deflate stream and
/// the same 10-byte header: no name, no time, `XFL` 2 at level 9 and 4 at level 1 or
/// below, `OS` 255; RFC 1952 §2.3), but the deflate state (~270 KB of window and hash
/// tables) is kept per thread and reset for the next body instead of allocated and zeroed
/// for each: on a miss that was most of the compression's cost (cold memory), in Envoy's
/// worker threads and in a Compute instance alike.
///
/// # Errors
/// Errors from the deflate stream (none expected for an in-memory output).
pub fn gzip_at(body: &[u8], level: u32) -> std::io::Result<Vec<u8>> {
    thread_local! {
        /// The last deflate state of this thread and its level.
        static DEFLATE: std::cell::RefCell<Option<(u32, flate2::Compress)>> =
            const { std::cell::RefCell::new(None) };
    }
    let level = level.min(9);
    let xfl = match level {
        9 => 2,
        0 | 1 => 4,
        _ => 0,
    };
    let mut out = Vec::with_capacity(body.len() / 3 + 64);
    out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, xfl, 255]);
    let fresh = || flate2::Compress::new(flate2::Compression::new(level), false);
    DEFLATE.with(|slot| match slot.try_borrow_mut() {
        Ok(mut slot) => {
            let c = match &mut *slot {
                Some((l, c)) if *l == level => {
                    c.reset();
                    c
                }
                other => &mut other.insert((level, fresh())).1,
            };
            deflate_into(c, body, &mut out)
        }
        // Not reentrant in practice; a nested call gets a state of its own.
        Err(_) => deflate_into(&mut fresh(), body, &mut out),
    })?;
    let mut crc = flate2::Crc::new();
    crc.update(body);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&crc.amount().to_le_bytes());
    Ok(out)
}

/// Runs `c` (fresh or reset) over the whole of `body`, then to the stream's end,
/// appending the raw deflate stream to `out`: the input first without a flush, then the
/// finish, as `GzEncoder`'s `write_all` and `finish` drive it (the same blocks, so the
/// same bytes).
fn deflate_into(c: &mut flate2::Compress, body: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
    loop {
        if out.capacity() - out.len() < 64 {
            out.reserve(body.len() / 4 + 1024);
        }
        let consumed = usize::try_from(c.total_in()).unwrap_or(usize::MAX);
        let (rest, flush) = match body.get(consumed..) {
            Some(rest) if !rest.is_empty() => (rest, flate2::FlushCompress::None),
            _ => (&[][..], flate2::FlushCompress::Finish),
        };
        let status = c
            .compress_vec(rest, out, flush)
            .map_err(std::io::Error::other)?;
        if status == flate2::Status::StreamEnd {
            return Ok(());
        }
    }
}

/// Inflates a gzip body, refusing to produce more than [`MAX_INFLATED_BYTES`].
///
/// # Errors
/// Corrupt gzip data, or output over the bound.
pub fn gunzip(body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(body.len() * 4);
    let n = flate2::read::GzDecoder::new(body)
        .take(MAX_INFLATED_BYTES + 1)
        .read_to_end(&mut out)?;
    if n as u64 > MAX_INFLATED_BYTES {
        return Err(std::io::Error::other("inflated body exceeds the bound"));
    }
    Ok(out)
}

/// Inflates a gzip body into a per-request workspace (`cachet-workspace`): the inflate
/// buffer is the workspace's, only the finished body is copied out. `Ok(None)` when the
/// inflated body does not fit the workspace (the caller then uses [`gunzip`] on the heap);
/// a workspace's own bound keeps the output under [`MAX_INFLATED_BYTES`] in practice.
///
/// # Errors
/// Corrupt gzip data; a workspace failure other than running out of room.
pub fn gunzip_into(
    s: &cachet_workspace::Scratch<'_>,
    stored: &[u8],
) -> std::io::Result<Option<Vec<u8>>> {
    use cachet_workspace::WorkspaceError;
    let Ok(mut r) = s.reserve_all() else {
        return Ok(None);
    };
    let mut dec = flate2::read::GzDecoder::new(stored);
    loop {
        let room = r.remaining();
        if room == 0 {
            return Ok(None);
        }
        let chunk = match r.unfilled_mut(room.min(16 * 1024)) {
            Ok(c) => c,
            Err(WorkspaceError::Overflow { .. } | WorkspaceError::Overflowed) => return Ok(None),
            Err(e) => return Err(std::io::Error::other(e.to_string())),
        };
        let n = dec.read(chunk)?;
        if n == 0 {
            break;
        }
        r.advance(n)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
    }
    Ok(Some(r.release().to_vec()))
}

/// Serde for [`Meta::headers`]: each line is `[name, value]`, the value a JSON string when
/// it is UTF-8 (every layout before values were bytes, so those objects still read) and
/// the array of its bytes otherwise (`[72, 233]`), so a Latin-1 byte survives storage.
mod field_values {
    use std::fmt;

    use serde::de::{self, Deserializer, SeqAccess, Visitor};
    use serde::ser::{SerializeSeq, Serializer};
    use serde::{Deserialize, Serialize};

    /// One value: text when it is UTF-8, else its bytes.
    enum Value<'a> {
        Text(&'a str),
        Bytes(&'a [u8]),
    }

    impl Serialize for Value<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            match self {
                Self::Text(t) => s.serialize_str(t),
                Self::Bytes(b) => s.collect_seq(b.iter()),
            }
        }
    }

    pub(super) fn serialize<S: Serializer>(
        lines: &[(String, Vec<u8>)],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(lines.len()))?;
        for (n, v) in lines {
            let value = std::str::from_utf8(v).map_or(Value::Bytes(v), Value::Text);
            seq.serialize_element(&(n, value))?;
        }
        seq.end()
    }

    /// A value read back: a string or an array of bytes.
    struct Owned(Vec<u8>);

    impl<'de> Deserialize<'de> for Owned {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Owned;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a field value: a string or an array of bytes")
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Owned, E> {
                    Ok(Owned(v.as_bytes().to_vec()))
                }
                fn visit_string<E: de::Error>(self, v: String) -> Result<Owned, E> {
                    Ok(Owned(v.into_bytes()))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Owned, A::Error> {
                    let mut out = Vec::with_capacity(a.size_hint().unwrap_or(0));
                    while let Some(b) = a.next_element::<u8>()? {
                        out.push(b);
                    }
                    Ok(Owned(out))
                }
            }
            d.deserialize_any(V)
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<(String, Vec<u8>)>, D::Error> {
        let lines = Vec::<(String, Owned)>::deserialize(d)?;
        Ok(lines.into_iter().map(|(n, v)| (n, v.0)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// The reused per-thread deflate state gives `GzEncoder`'s bytes exactly, whatever
    /// came before it on the thread (another level, a larger body, an empty one).
    #[test]
    fn gzip_at_is_gz_encoders_output_with_the_state_reused() {
        let reference = |body: &[u8], level: u32| {
            let mut enc =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level.min(9)));
            enc.write_all(body).unwrap_or_default();
            enc.finish().unwrap_or_default()
        };
        let big: Vec<u8> = (0..300_000u32)
            .map(|i| b"abcdefg"[(i.wrapping_mul(2_654_435_761) >> 13) as usize % 7])
            .collect();
        let css = b".a{color:red;margin:0 auto}\n".repeat(160);
        for (body, level) in [
            (&css[..], 6),
            (&css[..], 6),
            (&big[..], 6),
            (&css[..], 6),
            (&b""[..], 6),
            (&css[..], 1),
            (&big[..], 9),
            (&css[..], 0),
            (&css[..], 42),
            (&css[..], 6),
        ] {
            let z = gzip_at(body, level).unwrap_or_default();
            assert_eq!(
                z,
                reference(body, level),
                "level {level}, {} bytes",
                body.len()
            );
            assert_eq!(gunzip(&z).unwrap_or_default(), body);
        }
    }

    #[test]
    fn gunzip_into_a_workspace_or_none_when_it_does_not_fit() {
        use cachet_workspace::{Config, Workspace};
        let body = b"<p>hello workspace</p>".repeat(100);
        let z = gzip(&body).unwrap_or_default();
        let cfg = |capacity_bytes| Config {
            capacity_bytes,
            ..Config::default()
        };
        let mut big = Workspace::new(cfg(64 * 1024)).expect("workspace");
        assert_eq!(
            gunzip_into(&big.scratch(), &z).ok().flatten(),
            Some(body.clone())
        );
        let mut small = Workspace::new(cfg(1024)).expect("workspace");
        assert_eq!(gunzip_into(&small.scratch(), &z).ok(), Some(None));
        assert!(gunzip_into(&big.scratch(), b"not gzip").is_err());
    }

    #[test]
    fn gzip_roundtrip() {
        let body = b"<html>hello hello hello hello</html>".repeat(50);
        let z = gzip(&body).unwrap_or_default();
        assert!(z.len() < body.len() / 5);
        assert_eq!(gunzip(&z).unwrap_or_default(), body);
        assert!(gunzip(b"not gzip").is_err());
    }

    #[test]
    fn the_gzip_level_trades_size_for_speed_and_every_level_round_trips() {
        // Varied text (not one repeated phrase): levels 1 and 6 use different match finders.
        let body: Vec<u8> = (0..4000u32)
            .flat_map(|i| {
                format!(".c{} {{ margin: {}px {}em }}\n", i % 97, i % 13, i % 7).into_bytes()
            })
            .collect();
        let sizes: Vec<usize> = [1, 6, 9]
            .iter()
            .map(|&level| {
                let z = gzip_at(&body, level).unwrap_or_default();
                assert_eq!(gunzip(&z).unwrap_or_default(), body, "level {level}");
                z.len()
            })
            .collect();
        assert!(sizes[0] > sizes[1] && sizes[1] >= sizes[2], "{sizes:?}");
        assert_eq!(
            gzip(&body).unwrap_or_default().len(),
            sizes[1],
            "gzip is level 6"
        );
        // Out of range is clamped, never a panic.
        assert_eq!(gzip_at(&body, 42).unwrap_or_default().len(), sizes[2]);
        let (e, z) = for_storage(&body, None, true, 1).unwrap();
        assert_eq!((e, z.len()), (Encoding::Gzip, sizes[0]));
    }

    #[test]
    fn meta_roundtrip() {
        let m = Meta::marker(
            "css",
            Timestamp::from_millis(5_000),
            std::time::Duration::from_secs(60),
        );
        let back = Meta::from_bytes(&m.to_bytes());
        assert!(back.as_ref().is_some_and(|b| b.pass && b.route == "css"));
        assert_eq!(back.as_ref(), Some(&m));
        assert!(Meta::from_bytes(b"{}").is_none());
        let mut old = m.clone();
        old.v = 1;
        assert!(
            Meta::from_bytes(&old.to_bytes()).is_none(),
            "older layouts are misses"
        );
    }

    /// Issue 27 item 11: a stored value is the origin's bytes, Latin-1 included; UTF-8
    /// values keep the JSON string layout, so objects stored before read the same.
    #[test]
    fn stored_values_are_bytes_and_utf8_ones_keep_the_string_layout() {
        let mut m = Meta::marker(
            "other",
            Timestamp::from_millis(5_000),
            std::time::Duration::from_secs(60),
        );
        m.headers = vec![
            ("Content-Type".into(), "text/plain; charset=utf-8".into()),
            ("X-Field".into(), b"caf\xe9".to_vec()),
            ("X-Utf8".into(), "caf\u{e9}".into()),
            ("X-Empty".into(), Vec::new()),
        ];
        let json = m.to_bytes();
        let text = String::from_utf8_lossy(&json);
        assert!(
            text.contains(r#"["Content-Type","text/plain; charset=utf-8"]"#)
                && text.contains(r#"["X-Field",[99,97,102,233]]"#)
                && text.contains(r#"["X-Empty",""]"#),
            "{text}"
        );
        let back = Meta::from_bytes(&json).expect("reads back");
        assert_eq!(back.headers, m.headers);
        assert_eq!(back.header_bytes("x-field"), Some(&b"caf\xe9"[..]));
        assert_eq!(back.header("x-field"), None, "not text");
        assert_eq!(back.header("x-utf8"), Some("caf\u{e9}"));
        // A value that is neither a string nor bytes is not ours: a miss.
        let bad = text.replace("[99,97,102,233]", "[99,300]");
        assert!(Meta::from_bytes(bad.as_bytes()).is_none());
    }

    #[test]
    fn a_304_updates_stored_fields_but_not_what_the_body_depends_on() {
        let mut m = Meta::marker(
            "article",
            Timestamp::from_millis(1_000),
            std::time::Duration::from_secs(30),
        );
        m.pass = false;
        m.status = 200;
        m.headers = vec![
            ("Content-Type".into(), "text/html".into()),
            ("Cache-Control".into(), "max-age=30".into()),
            ("Link".into(), "</a.css>; rel=preload".into()),
            ("Link".into(), "</b.js>; rel=preload".into()),
            ("ETag".into(), "\"v1\"".into()),
            ("X-Owner".into(), "alice".into()),
        ];
        m.surrogate_keys = vec!["blog-alice".into()];
        let times = EntryTimes::new(
            Timestamp::from_millis(90_000),
            std::time::Duration::from_secs(60),
        );
        let validators = Validators {
            etag: Some("\"v1\"".into()),
            last_modified: None,
        };
        let fresh = m.freshened(
            times,
            validators.clone(),
            [
                ("cache-control", "max-age=60"),
                ("link", "</c.css>; rel=preload"),
                ("Content-Length", "0"),
                ("Content-Encoding", "br"),
                ("Vary", "Cookie"),
                ("Set-Cookie", "sid=1"),
                ("Connection", "close"),
                (":status", "304"),
                ("X-New", "1"),
            ],
        );
        assert_eq!(fresh.times, times);
        assert_eq!(fresh.validators, validators);
        assert_eq!(fresh.header("cache-control"), Some("max-age=60"));
        let links: Vec<&[u8]> = fresh
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("link"))
            .map(|(_, v)| v.as_slice())
            .collect();
        assert_eq!(
            links,
            [b"</c.css>; rel=preload"],
            "all stored lines replaced"
        );
        assert_eq!(fresh.header("x-new"), Some("1"));
        assert_eq!(
            fresh.header("x-owner"),
            Some("alice"),
            "absent from the 304: kept"
        );
        assert_eq!(fresh.header("content-type"), Some("text/html"));
        for never in [
            "content-length",
            "content-encoding",
            "vary",
            "set-cookie",
            "connection",
            ":status",
        ] {
            assert_eq!(fresh.header(never), None, "{never}");
        }
        assert_eq!(
            (fresh.encoding.clone(), fresh.vary.clone()),
            (m.encoding.clone(), m.vary.clone())
        );
        assert_eq!(fresh.surrogate_keys, m.surrogate_keys);
        // Nothing in the 304: only times and validators change.
        let same = m.freshened(times, validators.clone(), Vec::<(String, String)>::new());
        assert_eq!(same.headers, m.headers);
        // A 304's value is taken as its bytes (a Latin-1 field is not lost).
        let latin1 = m.freshened(times, validators, [("x-owner", &b"b\xe9a"[..])]);
        assert_eq!(latin1.header_bytes("x-owner"), Some(&b"b\xe9a"[..]));
    }

    #[test]
    fn meta_is_a_ban_target() {
        let mut m = Meta::marker(
            "article",
            Timestamp::from_millis(100_000),
            std::time::Duration::from_secs(30),
        );
        m.pass = false;
        m.status = 200;
        m.url = "/blog/alice/1".into();
        m.host = "blog.example".into();
        m.headers.push(("X-Owner".into(), "alice".into()));
        m.surrogate_keys = vec!["blog-alice".into(), "css-alice".into()];
        m.tag = object_tag("blog.example/blog/alice/1|pc");
        let v = m.ban_view();
        assert_eq!(v.header("x-owner"), Some("alice"));
        assert_eq!(v.header("X-URL"), Some("/blog/alice/1"));
        assert_eq!(v.header("x-host"), Some("blog.example"));
        assert_eq!(
            v.surrogate_keys(),
            Some(format!("blog-alice css-alice {}", m.tag).as_str())
        );
        assert!((v.inserted_at_s() - 100.0).abs() < 1e-9);
        assert!((v.ttl_s_at(110.0) - 20.0).abs() < 1e-9);
        assert!((v.age_s_at(110.0) - 10.0).abs() < 1e-9);
        let mut bans = cachet_ban::BanList::new();
        let added = bans.add("obj.http.x-url ~ ^/blog/alice/", 120.0).unwrap();
        assert!(added.lurker_friendly);
        let req = cachet_ban::Request::new("/blog/alice/1");
        assert!(bans.check(&v, &req, cachet_ban::BanId::ZERO).is_banned());
        // A ban on a surrogate key, and on the object's own tag, match it.
        let mut keys = cachet_ban::BanList::new();
        let _ = keys.add_surrogate_key_ban("css-alice", 120.0).unwrap();
        assert!(keys.check(&v, &req, cachet_ban::BanId::ZERO).is_banned());
        let mut tag = cachet_ban::BanList::new();
        let _ = tag.add_surrogate_key_ban(&m.tag, 120.0).unwrap();
        assert!(tag.check(&v, &req, cachet_ban::BanId::ZERO).is_banned());
        let mut other = cachet_ban::BanList::new();
        let _ = other.add_surrogate_key_ban("blog-bob", 120.0).unwrap();
        assert!(!other.check(&v, &req, cachet_ban::BanId::ZERO).is_banned());
    }

    #[test]
    fn storage_encoding() {
        assert_eq!(Encoding::from_content_encoding(None), Encoding::Identity);
        assert_eq!(
            Encoding::from_content_encoding(Some(" Identity ")),
            Encoding::Identity
        );
        assert_eq!(
            Encoding::from_content_encoding(Some("X-GZIP")),
            Encoding::Gzip
        );
        assert_eq!(
            Encoding::from_content_encoding(Some("BR")),
            Encoding::Other("br".into())
        );
        let body = b"hello hello hello hello hello".repeat(20);
        let (e, z) = for_storage(&body, None, true, 6).unwrap();
        assert_eq!(e, Encoding::Gzip);
        assert_eq!(gunzip(&z).unwrap_or_default(), body);
        assert_eq!(
            for_storage(&body, Some("br"), true, 6).unwrap(),
            (Encoding::Other("br".into()), body.clone())
        );
        assert_eq!(
            for_storage(&body, None, false, 6).unwrap(),
            (Encoding::Identity, body.clone())
        );
        assert!(is_hop_by_hop("Transfer-Encoding") && !is_hop_by_hop("cache-control"));
        assert!(
            !stored_header("Connection") && !stored_header("set-cookie") && stored_header("etag")
        );
        assert!(
            !stored_header("X-Cache"),
            "an upstream cache's status is not ours"
        );
    }

    #[test]
    fn object_tags_are_stable_and_distinct() {
        assert_eq!(object_tag("a/x|pc"), object_tag("a/x|pc"));
        assert_ne!(object_tag("a/x|pc"), object_tag("a/x|smartphone"));
        assert!(object_tag("k").starts_with(OBJECT_TAG_PREFIX));
        assert_eq!(object_tag("k").len(), OBJECT_TAG_PREFIX.len() + 16);
    }
}
