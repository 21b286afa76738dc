//! Whether and how an origin response may be stored: Cache-Control, Set-Cookie, Vary, keys.

use std::time::Duration;

use crate::plan::Plan;

/// Longest surrogate key kept, in bytes (Fastly's documented limit).
pub const MAX_SURROGATE_KEY_BYTES: usize = 1024;

/// Longest `Surrogate-Key` header read, in bytes (Fastly's documented limit). The key that
/// crosses it, and every key after it, is ignored, as Fastly does.
pub const MAX_SURROGATE_HEADER_BYTES: usize = 16 * 1024;

/// A borrowed view of the origin response headers that matter to storage.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResponseView<'a> {
    /// HTTP status code.
    pub status: u16,
    /// `Cache-Control`, all field lines joined with `", "` by the adapter.
    pub cache_control: Option<&'a str>,
    /// `Surrogate-Control` (Fastly/Akamai edge-only freshness; wins over Cache-Control).
    pub surrogate_control: Option<&'a str>,
    /// Whether any `Set-Cookie` is present.
    pub has_set_cookie: bool,
    /// `Vary`, all field lines joined.
    pub vary: Option<&'a str>,
    /// `Content-Encoding`.
    pub content_encoding: Option<&'a str>,
    /// `Content-Type`.
    pub content_type: Option<&'a str>,
    /// `Surrogate-Key`.
    pub surrogate_key: Option<&'a str>,
    /// `Content-Length` when known, in bytes.
    pub content_length: Option<u64>,
}

impl ResponseView<'_> {
    /// Why these headers make the response per-user, if they do: `Cache-Control: private`
    /// (RFC 9111 §5.2.2.7), `no-store` in `Cache-Control` (§5.2.2.5) or
    /// `Surrogate-Control`, or a `Set-Cookie`. The first rules of
    /// [`Policy::storability`](crate::Policy::storability); adapters also ask it of a
    /// `304 Not Modified`, whose fields update the stored response (RFC 9111 §3.2): a 304
    /// that says so turns the stored object into a hit-for-pass marker instead of
    /// freshening it.
    pub fn per_user(&self) -> Option<NoStore> {
        let cc = self
            .cache_control
            .map(CacheControl::parse)
            .unwrap_or_default();
        let sc = self
            .surrogate_control
            .map(CacheControl::parse)
            .unwrap_or_default();
        per_user(&cc, &sc, self.has_set_cookie)
    }
}

/// [`ResponseView::per_user`] on parsed directives.
fn per_user(cc: &CacheControl, sc: &CacheControl, has_set_cookie: bool) -> Option<NoStore> {
    if cc.private {
        Some(NoStore::Private)
    } else if cc.no_store || sc.no_store {
        Some(NoStore::NoStore)
    } else if has_set_cookie {
        Some(NoStore::SetCookie)
    } else {
        None
    }
}

/// Why a response is not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoStore {
    /// `Cache-Control: private` (RFC 9111 §5.2.2.7).
    Private,
    /// `Cache-Control: no-store` (RFC 9111 §5.2.2.5) or `Surrogate-Control: no-store`.
    NoStore,
    /// The response sets a cookie: per-user by nature.
    SetCookie,
    /// Status not cacheable by default (RFC 9110 §15.1 heuristically cacheable list).
    Status,
    /// Zero freshness and zero grace.
    ZeroTtl,
    /// `Vary` names a header the cache key does not carry (e.g. `Cookie`, `*`).
    Vary,
    /// Body larger than `[edge].max_object_bytes`.
    TooLarge,
}

impl NoStore {
    /// Short label for logs and `X-Cachet-Pass`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Private => "private",
            Self::NoStore => "no-store",
            Self::SetCookie => "set-cookie",
            Self::Status => "status",
            Self::ZeroTtl => "zero-ttl",
            Self::Vary => "vary",
            Self::TooLarge => "too-large",
        }
    }

    /// Whether the reason is about the content being per-user (private), as opposed to
    /// merely uncacheable; private keys get a hit-for-pass marker.
    pub fn is_private(self) -> bool {
        matches!(self, Self::Private | Self::NoStore | Self::SetCookie)
    }
}

/// How to store a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Store {
    /// Freshness lifetime.
    pub ttl: Duration,
    /// Stale-while-revalidate window after `ttl`.
    pub grace: Duration,
    /// Keep window after grace (the route's): held only for conditional revalidation.
    pub keep: Duration,
    /// The origin's keys (Fastly limits applied) followed by the route's, deduplicated.
    pub surrogate_keys: Vec<String>,
    /// Whether to gzip the body before storing (unencoded, compressible type, route allows).
    pub compress: bool,
    /// The `Vary` to send to clients: `User-Agent` replaced by the device header when the
    /// route varies by device (dropped otherwise), `Accept-Encoding` always present.
    pub vary: String,
}

/// The verdict on an origin response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Storability {
    /// Store it.
    Store(Store),
    /// Do not store it; serve it to this client only.
    DontStore(NoStore),
}

/// Parsed `Cache-Control` directives that matter to a shared cache (RFC 9111 §5.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheControl {
    /// `private` (with or without a field list: Cachet treats both as private).
    pub private: bool,
    /// `no-store`.
    pub no_store: bool,
    /// `no-cache`: store, but revalidate each time; Cachet stores with zero TTL.
    pub no_cache: bool,
    /// `max-age`, seconds.
    pub max_age: Option<u64>,
    /// `s-maxage`, seconds (shared caches only; wins over `max-age`).
    pub s_maxage: Option<u64>,
    /// `stale-while-revalidate`, seconds (RFC 5861).
    pub stale_while_revalidate: Option<u64>,
}

impl CacheControl {
    /// Parses a `Cache-Control` (or `Surrogate-Control`) value. Unknown directives are
    /// ignored; a malformed or repeated `max-age`/`s-maxage` counts as 0 (RFC 9111 §4.2.1:
    /// invalid or conflicting freshness information is treated as stale).
    pub fn parse(value: &str) -> Self {
        let mut cc = Self::default();
        for part in value.split(',') {
            let part = part.trim();
            let (name, arg) = match part.split_once('=') {
                Some((n, a)) => (n.trim(), Some(a.trim().trim_matches('"'))),
                None => (part, None),
            };
            // Invalid or repeated freshness directives make the response stale (0).
            let secs = || arg.and_then(|a| a.parse::<u64>().ok()).unwrap_or(0);
            if name.eq_ignore_ascii_case("private") {
                cc.private = true;
            } else if name.eq_ignore_ascii_case("no-store") {
                cc.no_store = true;
            } else if name.eq_ignore_ascii_case("no-cache") {
                cc.no_cache = true;
            } else if name.eq_ignore_ascii_case("max-age") {
                cc.max_age = Some(if cc.max_age.is_some() { 0 } else { secs() });
            } else if name.eq_ignore_ascii_case("s-maxage") {
                cc.s_maxage = Some(if cc.s_maxage.is_some() { 0 } else { secs() });
            } else if name.eq_ignore_ascii_case("stale-while-revalidate") {
                cc.stale_while_revalidate = Some(secs());
            }
        }
        cc
    }
}

/// Statuses a shared cache may store without explicit freshness (RFC 9110 §15.1).
fn status_cacheable(status: u16) -> bool {
    matches!(
        status,
        200 | 203 | 204 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// Types worth compressing: text, JSON, XML (RSS/Atom), JavaScript, SVG, WASM.
pub fn compressible(content_type: Option<&str>) -> bool {
    let Some(ct) = content_type else { return false };
    let ct = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    ct.starts_with("text/")
        || ct.ends_with("+json")
        || ct.ends_with("+xml")
        || matches!(
            ct.as_str(),
            "application/json"
                | "application/javascript"
                | "application/xml"
                | "application/xhtml+xml"
                | "application/manifest+json"
                | "image/svg+xml"
                | "application/wasm"
        )
}

/// Splits a `Surrogate-Key` header into keys with Fastly's limits: a key over
/// [`MAX_SURROGATE_KEY_BYTES`], or one ending past [`MAX_SURROGATE_HEADER_BYTES`] of the
/// header, is ignored together with every key after it.
pub fn surrogate_keys(header: &str) -> impl Iterator<Item = &str> {
    let base = header.as_ptr() as usize;
    header.split_ascii_whitespace().take_while(move |k| {
        let end = k.as_ptr() as usize - base + k.len();
        k.len() <= MAX_SURROGATE_KEY_BYTES && end <= MAX_SURROGATE_HEADER_BYTES
    })
}

/// Rewrites an origin `Vary` for the edge: `User-Agent` is replaced by `device_header`
/// when `vary_device` (dropped otherwise, seed: Hatena Blog), `Accept-Encoding` is kept or
/// added. Returns `None` when `Vary` names anything else (`*`, `Cookie`, …), which the
/// cache key does not carry, so the response must not be stored.
pub fn rewrite_vary(vary: Option<&str>, device_header: &str, vary_device: bool) -> Option<String> {
    let mut out = String::new();
    if vary_device {
        out.push_str(device_header);
    }
    for name in vary
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        if name.eq_ignore_ascii_case("user-agent")
            || name.eq_ignore_ascii_case("accept-encoding")
            || name.eq_ignore_ascii_case(device_header)
        {
            continue;
        }
        return None;
    }
    if !out.is_empty() {
        out.push_str(", ");
    }
    out.push_str("Accept-Encoding");
    Some(out)
}

/// The freshness lifetime an origin response gives under `plan`'s route: `no-cache` → 0;
/// the route's TTL when it overrides; else `Surrogate-Control: max-age` → `s-maxage` →
/// `max-age` (Fastly's precedence; RFC 9111 §4.2.1); `None` when the response gives none.
/// Capped at one year.
fn freshness(plan: &Plan<'_>, cc: &CacheControl, sc: &CacheControl) -> Option<Duration> {
    let ttl = if cc.no_cache {
        Some(Duration::ZERO)
    } else if plan.ttl_override {
        Some(plan.ttl)
    } else {
        sc.max_age
            .or(cc.s_maxage)
            .or(cc.max_age)
            .map(Duration::from_secs)
    };
    ttl.map(|t| t.min(crate::config::MAX_DURATION))
}

impl crate::Policy {
    /// The TTL a revalidation answer (a `304 Not Modified`, RFC 9111 §4.3.4) gives the
    /// stored object under `plan`'s route, with the same precedence as
    /// [`Policy::storability`](crate::Policy::storability): the route's TTL when it
    /// overrides, else the answer's `Surrogate-Control` / `Cache-Control`; `None` keeps
    /// the stored TTL.
    pub fn revalidated_ttl(
        &self,
        plan: &Plan<'_>,
        cache_control: Option<&str>,
        surrogate_control: Option<&str>,
    ) -> Option<Duration> {
        let cc = cache_control.map(CacheControl::parse).unwrap_or_default();
        let sc = surrogate_control
            .map(CacheControl::parse)
            .unwrap_or_default();
        freshness(plan, &cc, &sc)
    }

    /// Decides whether the origin response for `plan` is stored, with which TTL, grace,
    /// surrogate keys, compression and client-facing `Vary`.
    ///
    /// Rules, in order: `private` / `no-store` (Surrogate-Control's `no-store` too) and
    /// `Set-Cookie` are never stored (RFC 9111 §3, §5.2.2.5, §5.2.2.7); only statuses in
    /// RFC 9110 §15.1's cacheable list; `Vary` must be expressible by the key; TTL is
    /// `Surrogate-Control: max-age` → `s-maxage` → `max-age` → route `ttl` (Fastly's
    /// precedence), or the route's when `ttl_override`; grace is the longer of the route's
    /// and `stale-while-revalidate`; a zero TTL with zero grace is not stored.
    pub fn storability(&self, plan: &Plan<'_>, resp: &ResponseView<'_>) -> Storability {
        let cc = resp
            .cache_control
            .map(CacheControl::parse)
            .unwrap_or_default();
        let sc = resp
            .surrogate_control
            .map(CacheControl::parse)
            .unwrap_or_default();
        if let Some(why) = per_user(&cc, &sc, resp.has_set_cookie) {
            return Storability::DontStore(why);
        }
        if !status_cacheable(resp.status) {
            return Storability::DontStore(NoStore::Status);
        }
        if resp
            .content_length
            .is_some_and(|n| n > self.config().edge.max_object_bytes)
        {
            return Storability::DontStore(NoStore::TooLarge);
        }
        let Some(vary) = rewrite_vary(resp.vary, plan.device_header, plan.vary_device) else {
            return Storability::DontStore(NoStore::Vary);
        };
        let ttl = freshness(plan, &cc, &sc).unwrap_or(plan.ttl);
        let swr = Duration::from_secs(
            sc.stale_while_revalidate
                .or(cc.stale_while_revalidate)
                .unwrap_or(0),
        );
        let grace = plan.grace.max(swr).min(crate::config::MAX_DURATION);
        if ttl.is_zero() && grace.is_zero() {
            return Storability::DontStore(NoStore::ZeroTtl);
        }
        let mut keys: Vec<String> = Vec::new();
        for k in resp
            .surrogate_key
            .map(surrogate_keys)
            .into_iter()
            .flatten()
            .chain(plan.surrogate_keys.iter().map(String::as_str))
        {
            if !keys.iter().any(|x| x == k) {
                keys.push(k.to_owned());
            }
        }
        let encoded = resp
            .content_encoding
            .is_some_and(|e| !e.trim().is_empty() && !e.trim().eq_ignore_ascii_case("identity"));
        Storability::Store(Store {
            ttl,
            grace,
            keep: plan.keep,
            surrogate_keys: keys,
            compress: plan.compress && !encoded && compressible(resp.content_type),
            vary,
        })
    }
}

/// Whether an `Accept-Encoding` value accepts `coding` (RFC 9110 §12.5.3): listed by name
/// or `*`, with a q-value other than 0. `identity` is acceptable unless refused.
pub fn accepts_encoding(accept_encoding: Option<&str>, coding: &str) -> bool {
    let mut star = None;
    for item in accept_encoding.unwrap_or("").split(',') {
        let mut parts = item.split(';');
        let name = parts.next().unwrap_or("").trim();
        let q_zero = parts.any(|p| {
            p.trim()
                .strip_prefix("q=")
                .or_else(|| p.trim().strip_prefix("Q="))
                .and_then(|q| q.trim().parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        if name.eq_ignore_ascii_case(coding) {
            return !q_zero;
        }
        if name == "*" {
            star = Some(!q_zero);
        }
    }
    star.unwrap_or(coding.eq_ignore_ascii_case("identity"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_user_is_what_storability_refuses_first() {
        let view =
            |cc: Option<&'static str>, sc: Option<&'static str>, cookie: bool| ResponseView {
                status: 304,
                cache_control: cc,
                surrogate_control: sc,
                has_set_cookie: cookie,
                ..ResponseView::default()
            };
        assert_eq!(view(Some("max-age=60"), None, false).per_user(), None);
        assert_eq!(view(None, None, false).per_user(), None);
        assert_eq!(
            view(Some("PRIVATE, max-age=60"), None, false).per_user(),
            Some(NoStore::Private)
        );
        assert_eq!(
            view(Some("no-store"), None, false).per_user(),
            Some(NoStore::NoStore)
        );
        assert_eq!(
            view(None, Some("no-store"), false).per_user(),
            Some(NoStore::NoStore)
        );
        assert_eq!(
            view(Some("public"), None, true).per_user(),
            Some(NoStore::SetCookie)
        );
        assert!(
            view(Some("no-cache"), None, false).per_user().is_none(),
            "no-cache stores"
        );
    }

    #[test]
    fn cache_control_parse() {
        let cc =
            CacheControl::parse("public, max-age=300, s-maxage=\"600\", stale-while-revalidate=30");
        assert_eq!(cc.max_age, Some(300));
        assert_eq!(cc.s_maxage, Some(600));
        assert_eq!(cc.stale_while_revalidate, Some(30));
        assert!(!cc.private && !cc.no_store);
        let cc = CacheControl::parse("Private=\"set-cookie\", NO-STORE");
        assert!(cc.private && cc.no_store);
        // Malformed or repeated max-age is stale (0), never the route's TTL.
        assert_eq!(
            CacheControl::parse("max-age=300, max-age=600").max_age,
            Some(0)
        );
        assert_eq!(CacheControl::parse("max-age=-1").max_age, Some(0));
        assert_eq!(CacheControl::parse("public").max_age, None);
    }

    #[test]
    fn surrogate_key_limits() {
        let keys: Vec<_> = surrogate_keys("  a  b\tc ").collect();
        assert_eq!(keys, ["a", "b", "c"]);
        let long = "k".repeat(MAX_SURROGATE_KEY_BYTES + 1);
        let header = format!("a {long} b");
        assert_eq!(surrogate_keys(&header).collect::<Vec<_>>(), ["a"]);
        let exact = "k".repeat(MAX_SURROGATE_KEY_BYTES);
        let header = format!("{exact} b");
        assert_eq!(surrogate_keys(&header).count(), 2);
        // 17 keys of 1,000 bytes: the one ending past 16,384 bytes and all after it go.
        let header = (0..17)
            .map(|i| format!("{i:0>1000}"))
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(surrogate_keys(&header).count(), 16);
    }

    #[test]
    fn vary_rewrite() {
        assert_eq!(
            rewrite_vary(Some("User-Agent"), "X-Cachet-Device", true).as_deref(),
            Some("X-Cachet-Device, Accept-Encoding")
        );
        assert_eq!(
            rewrite_vary(
                Some("user-agent, accept-encoding"),
                "X-Cachet-Device",
                false
            )
            .as_deref(),
            Some("Accept-Encoding")
        );
        assert_eq!(
            rewrite_vary(None, "X-D", false).as_deref(),
            Some("Accept-Encoding")
        );
        assert_eq!(rewrite_vary(Some("Cookie"), "X-D", true), None);
        assert_eq!(rewrite_vary(Some("*"), "X-D", true), None);
    }

    #[test]
    fn accept_encoding() {
        assert!(accepts_encoding(Some("gzip, deflate, br"), "gzip"));
        assert!(accepts_encoding(Some("br;q=1.0, GZIP;q=0.5"), "gzip"));
        assert!(!accepts_encoding(Some("gzip;q=0"), "gzip"));
        assert!(!accepts_encoding(Some("br"), "gzip"));
        assert!(accepts_encoding(Some("*"), "gzip"));
        assert!(!accepts_encoding(Some("*;q=0"), "gzip"));
        assert!(!accepts_encoding(None, "gzip"));
        assert!(accepts_encoding(None, "identity"));
        assert!(!accepts_encoding(Some("identity;q=0"), "identity"));
    }

    #[test]
    fn compressible_types() {
        assert!(compressible(Some("text/html; charset=utf-8")));
        assert!(compressible(Some("application/rss+xml")));
        assert!(compressible(Some("Application/JSON")));
        assert!(!compressible(Some("image/png")));
        assert!(!compressible(None));
    }
}
