//! What an origin answer to a fill or a revalidation becomes, and the fields a fill sends:
//! decided once for both adapters.
//!
//! A *fill* is an origin fetch whose answer may be stored and shared (a miss under the
//! collapsing obligation, a background refresh, a revalidation). The adapter sends the
//! fields [`request_fields`] lists, reads the answer, and applies what [`filled`] or
//! [`revalidated`] says: insert the object, insert a hit-for-pass marker, keep the stored
//! object, or leave the cache alone.

use cachet_policy::object::{self, Meta};
use cachet_policy::{NoStore, Plan, Policy, Storability};
use cachet_refresh::{
    NotModified, Revalidation, Timestamp, Validators, conditional_headers, on_revalidation,
    should_store_over,
};

use crate::fields::{connection_listed, on_fill};
use crate::headers::{Headers, text};
use crate::response::ResponseFields;
use crate::store::{self, Origin};

/// What a fill's origin answer becomes ([`filled`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Filled {
    /// Store it: the object's metadata and its stored body bytes (gzip when the verdict
    /// said so).
    Stored {
        /// Metadata to insert with the object.
        meta: Box<Meta>,
        /// The stored body.
        body: Vec<u8>,
    },
    /// Insert this content-free hit-for-pass marker under the key (the answer is
    /// per-user, or it answered a revalidation and may not replace the stored object:
    /// the old copy must never be served again). The answer itself goes to this client
    /// only, unstored.
    Marker {
        /// The marker's metadata.
        meta: Box<Meta>,
        /// Why the answer is not stored (access log).
        why: NoStore,
    },
    /// Leave the cache as it is (cancel the obligation); the answer goes to this client
    /// only, unstored, for the reason given.
    Unstored(NoStore),
}

/// The verdict on an origin answer when its status and fields alone decide it (not
/// storable, or a declared `Content-Length` over `[edge].max_object_bytes`), so an adapter
/// can answer the client without reading the body into memory; `None` when the body is
/// needed ([`filled`]). Same rules as [`filled`].
pub fn unstorable(
    policy: &Policy,
    plan: &Plan<'_>,
    key: &str,
    status: u16,
    fields: &[(String, Vec<u8>)],
    now: Timestamp,
    replacing: bool,
) -> Option<Filled> {
    let why = refusal(policy, plan, status, fields, None)?;
    Some(not_stored(policy, plan, key, now, replacing, why))
}

/// Why `Policy::storability` refuses an answer of `status` with `fields` (and, when given,
/// a body of `length` bytes); `None` when it may be stored.
fn refusal(
    policy: &Policy,
    plan: &Plan<'_>,
    status: u16,
    fields: &[(String, Vec<u8>)],
    length: Option<u64>,
) -> Option<NoStore> {
    let read = ResponseFields::read(status, fields);
    let mut view = read.view();
    if length.is_some() {
        view.content_length = length;
    }
    match policy.storability(plan, &view) {
        Storability::Store(_) => None,
        Storability::DontStore(why) => Some(why),
    }
}

/// The verdict on an answer whose body turned out longer than `[edge].max_object_bytes`
/// while it was read (a chunked body declares no length): as [`filled`] for a body one
/// byte over the limit, decided without the body, so the adapter streams the rest to its
/// client instead of holding it.
pub fn oversized(
    policy: &Policy,
    plan: &Plan<'_>,
    key: &str,
    status: u16,
    fields: &[(String, Vec<u8>)],
    now: Timestamp,
    replacing: bool,
) -> Filled {
    let over = policy.config().edge.max_object_bytes.saturating_add(1);
    let why = refusal(policy, plan, status, fields, Some(over)).unwrap_or(NoStore::TooLarge);
    not_stored(policy, plan, key, now, replacing, why)
}

fn not_stored(
    policy: &Policy,
    plan: &Plan<'_>,
    key: &str,
    now: Timestamp,
    replacing: bool,
    why: NoStore,
) -> Filled {
    if why.is_private() || replacing {
        Filled::Marker {
            meta: Box::new(marker(policy, plan, key, now)),
            why,
        }
    } else {
        Filled::Unstored(why)
    }
}

/// The hit-for-pass marker for `key` (the cache key the object would have been stored
/// under, a variant key included) planned as `plan`, held for `[edge].hit_for_pass` from
/// `now`: it carries the plan's URL, host and surrogate keys (so bans and purges reach it)
/// and the key's object tag, never a byte of content.
pub fn marker(policy: &Policy, plan: &Plan<'_>, key: &str, now: Timestamp) -> Meta {
    let mut meta = Meta::marker(plan.route, now, policy.config().edge.hit_for_pass.0);
    meta.host = plan.host.to_string();
    meta.url = plan.target.to_string();
    meta.surrogate_keys.clone_from(&plan.surrogate_keys);
    meta.tag = object::object_tag(key);
    meta
}

/// What the origin answer `origin` to a fill of `key` planned as `plan` becomes at `now`
/// (`Policy::storability` with the body's real length, `[edge].max_object_bytes`,
/// [`store::object`]). With `replacing` (the answer replaces a stored object after a
/// revalidation, RFC 9111 §4.3.3) an answer that may not be stored leaves a marker, so the
/// outdated copy is never served again; otherwise only a per-user answer does (Varnish's
/// hit-for-pass: later requests skip collapsing).
///
/// # Errors
/// I/O errors from the gzip encoder (none expected for an in-memory sink).
pub fn filled(
    policy: &Policy,
    plan: &Plan<'_>,
    key: &str,
    origin: Origin<'_>,
    now: Timestamp,
    replacing: bool,
) -> std::io::Result<Filled> {
    let fields = ResponseFields::read(origin.status, origin.fields);
    let mut view = fields.view();
    view.content_length = Some(origin.body.len() as u64);
    let why = match policy.storability(plan, &view) {
        Storability::Store(verdict) => {
            let (meta, body) = store::object(plan, &verdict, origin, now)?;
            return Ok(Filled::Stored {
                meta: Box::new(meta),
                body,
            });
        }
        Storability::DontStore(why) => why,
    };
    Ok(not_stored(policy, plan, key, now, replacing, why))
}

/// What a revalidation's answer does to the stored object ([`revalidated`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Revalidated {
    /// `304`: the stored object with new times, validators and the 304's fields
    /// (RFC 9111 §4.3.4, `Meta::freshened`); same body.
    Freshen(Box<Meta>),
    /// A `304` whose fields make the response per-user: insert `marker` in place of the
    /// stored object; this client alone gets the stored body described by `theirs` (the
    /// stored object with the 304's fields).
    Uncacheable {
        /// The hit-for-pass marker to insert.
        marker: Box<Meta>,
        /// This client's answer's metadata.
        theirs: Box<Meta>,
    },
    /// A full answer: handle it as a fill with `replacing` ([`filled`]).
    Replace,
    /// A `5xx` or an invalid status: keep the stored object (never replace a good object
    /// with an error, RFC 5861 §4; serve it when `cachet_refresh::on_origin_error` allows).
    Keep,
}

/// What the origin answer `answer` (its body unused) to a revalidation of
/// `stored` under `plan` does at `now` (`cachet_refresh::on_revalidation`). A 304's TTL
/// follows the route like a stored response's (`Policy::revalidated_ttl`:
/// `ttl_override` wins over the 304's own directives); its fields replace the stored ones
/// (RFC 9111 §3.2) except those never stored; a 304 that makes the response per-user
/// cannot freshen a shared object.
pub fn revalidated(
    policy: &Policy,
    plan: &Plan<'_>,
    key: &str,
    stored: &Meta,
    answer: Origin<'_>,
    now: Timestamp,
) -> Revalidated {
    let Origin {
        status,
        fields,
        elapsed,
        ..
    } = answer;
    // A 206 or 412 answers a client's range or precondition, never our unconditional or
    // validator-only fill: keep the good object (hostile-input rule, issue 13). A slice's
    // revalidation asks for its range: its 206 is the new slice, checked as any fill's.
    let foreign_206 = status == 206 && plan.slice.is_none();
    if status != 304 && !should_store_over(true, status) || foreign_206 || status == 412 {
        return Revalidated::Keep;
    }
    let read = ResponseFields::read(status, fields);
    let view = read.view();
    let owned = |name: &str| {
        fields
            .value(name)
            .and_then(|v| text(&v).map(|s| s.trim().to_owned()))
    };
    let not_modified = NotModified {
        ttl: policy.revalidated_ttl(plan, view.cache_control, view.surrogate_control),
        etag: owned("etag"),
        last_modified: owned("last-modified"),
        delta: elapsed,
        per_user: view.per_user().is_some(),
    };
    // The 304's fields as it sent them: bytes, UTF-8 or not (issue 27 item 11).
    let fields_304 = || fields.iter().map(|(n, v)| (n.as_str(), v.as_slice()));
    let sent = crate::store::sent_at(now, elapsed);
    match on_revalidation(
        &stored.times,
        &stored.validators,
        status,
        sent,
        not_modified,
    ) {
        Revalidation::Freshen { times, validators } => {
            Revalidated::Freshen(Box::new(stored.freshened(times, validators, fields_304())))
        }
        Revalidation::Uncacheable => Revalidated::Uncacheable {
            marker: Box::new(marker(policy, plan, key, now)),
            theirs: Box::new(stored.freshened(
                stored.times,
                stored.validators.clone(),
                fields_304(),
            )),
        },
        Revalidation::Replace => Revalidated::Replace,
        Revalidation::KeepStored => Revalidated::Keep,
    }
}

/// The header fields of a fill's origin request, complete (an adapter adds only its
/// platform's pseudo-headers): `Host` = the plan's normalized host (or
/// `[origin].override_host`), `Accept-Encoding: gzip` (the edge stores gzip; `identity`
/// and `Range` = the slice for a slice plan, `Plan::slice`), the device
/// header with the plan's class, the client's fields a fill may carry
/// ([`on_fill`]: those in `[origin].fill_fields` and `stored`'s `Vary` fields, and
/// `Authorization` when the plan is keyed by it, `Plan::authorized`; never
/// preconditions, range, hop-by-hop or reserved fields, nor a client copy of the device
/// header), `User-Agent` as the class's canonical value from `[device.fill_user_agent]`
/// (never the client's) when `user-agent` is in `[origin].fill_fields`, and, when `stored` has usable validators, `If-None-Match` /
/// `If-Modified-Since` (RFC 9111 §4.3.1), and, when `[origin].shard_header` is set, that
/// field with the plan's primary cache key's shard value
/// ([`cachet_policy::object::shard_value`]) so a consistent-hash cluster of shields sends
/// the key to one shield from every edge, plus [`crate::fields::EDGE_TIER_FIELD`] so the
/// shield keeps `Surrogate-Key` for this tier (docs/fleet.md). Values are bytes, passed through
/// as received.
pub fn request_fields(
    policy: &Policy,
    plan: &Plan<'_>,
    client: &[(String, Vec<u8>)],
    stored: Option<&Meta>,
) -> Vec<(String, Vec<u8>)> {
    let override_host = &policy.config().origin.override_host;
    let host = if override_host.is_empty() {
        plan.host.as_ref()
    } else {
        override_host.as_str()
    };
    // A slice is stored as the origin's bytes at their offsets: the identity coding.
    let coding: &[u8] = if plan.slice.is_some() {
        b"identity"
    } else {
        b"gzip"
    };
    let mut out = vec![
        ("host".to_owned(), host.as_bytes().to_vec()),
        ("accept-encoding".to_owned(), coding.to_vec()),
        (
            plan.device_header.to_owned(),
            plan.device.as_str().as_bytes().to_vec(),
        ),
    ];
    let listed = connection_listed(client);
    // The allowlist, plus the fields a stored object's `Vary` names (its revalidation asks
    // for the same variant).
    let mut allow: Vec<&str> = (policy.config().origin.fill_fields.iter())
        .map(String::as_str)
        .collect();
    allow.extend(
        stored
            .iter()
            .flat_map(|m| m.vary_fields.iter().map(String::as_str)),
    );
    // A request keyed by its credentials (RFC 9111 §3.5): the origin answers for them.
    if plan.authorized {
        allow.push("authorization");
    }
    out.extend(
        client
            .iter()
            .filter(|(n, _)| {
                on_fill(n, &listed, &allow)
                    && !n.eq_ignore_ascii_case(plan.device_header)
                    && !n.eq_ignore_ascii_case("user-agent")
            })
            .cloned(),
    );
    // The client's User-Agent never reaches a fill: the object is keyed on the class (or
    // on nothing), so the origin sees the class's canonical User-Agent, a function of the
    // class only (`[device.fill_user_agent]`, issue 27 item 4).
    if allow.iter().any(|a| a.eq_ignore_ascii_case("user-agent")) {
        let ua = policy.config().device.fill_user_agent.of(plan.device);
        out.push(("user-agent".to_owned(), ua.as_bytes().to_vec()));
    }
    // A slice plan asks for exactly its slice (RFC 9110 §14.2); never the client's range.
    if let Some(slice) = plan.slice {
        out.push(("range".to_owned(), slice.range_value().into_bytes()));
    }
    // Unusable validators (not an entity-tag, control bytes, too long): unconditional.
    let cond = stored
        .and_then(|m| conditional_headers(&m.validators).ok())
        .unwrap_or_default();
    if let Some(v) = cond.if_none_match {
        out.push(("if-none-match".to_owned(), v.into_bytes()));
    }
    if let Some(v) = cond.if_modified_since {
        out.push(("if-modified-since".to_owned(), v.into_bytes()));
    }
    let shard = &policy.config().origin.shard_header;
    if !shard.is_empty() {
        // The client's copy never got here: the name is reserved (`on_fill`), validated so.
        out.push((
            shard.to_ascii_lowercase(),
            object::shard_value(&plan.cache_key).into_bytes(),
        ));
        // A fleet's edge: the shield answers it as its edge tier (Surrogate-Key kept).
        out.push((
            crate::fields::EDGE_TIER_FIELD.to_owned(),
            crate::fields::EDGE_TIER_VALUE.to_vec(),
        ));
    }
    out
}

/// What a proxy host makes of its own reply to a fill it sent through its router (no
/// origin answered: Envoy's `503` for a reset or a refused connection, a `504` for a
/// timeout, a `4xx` from a filter after it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyReply {
    /// A `5xx`: the fill failed (`Event::OriginFailed` with this reason), so stale-if-error
    /// and the failure answer apply as for an unreachable origin.
    Failed(String),
    /// Anything else goes on to the client as it is, labelled `X-Cache: ERROR`, and the
    /// exchange ends.
    Forward,
}

/// [`ProxyReply`] for the proxy's own reply with `status` to a router fill.
pub fn proxy_reply(status: u16) -> ProxyReply {
    if status >= 500 {
        ProxyReply::Failed(format!("the proxy answered the fill {status}"))
    } else {
        ProxyReply::Forward
    }
}

/// A fill's request lines for a proxy (Envoy's router or an HTTP callout): the
/// pseudo-headers of a `GET` of `target` (`:authority` from the fill's `host` line), then
/// the fill's other lines ([`request_fields`]) as their bytes.
///
/// `router`: `Some((scheme, client))` when the fill replaces the client's own request on
/// its way through the proxy's router: Envoy routes only a request with
/// `x-forwarded-proto`, which is the scheme the plan used (the connection's, never a
/// client's claim); and an identity client's fill asks for identity, so an answer too
/// large to store reaches the client in a coding it accepts without inflating it (without
/// any field the origin may pick any coding, RFC 9110 §12.5.3).
pub fn request_lines<'a>(
    target: &'a str,
    fields: &'a [(String, Vec<u8>)],
    router: Option<(&'a str, &crate::deliver::Client)>,
) -> Vec<(&'a str, &'a [u8])> {
    let authority: &[u8] = fields
        .iter()
        .find(|(n, _)| n == "host")
        .map_or(&[], |(_, v)| v.as_slice());
    let mut h: Vec<(&str, &[u8])> = vec![
        (":method", b"GET"),
        (":path", target.as_bytes()),
        (":authority", authority),
        (":scheme", b"http"),
    ];
    h.extend(
        fields
            .iter()
            .filter(|(n, _)| n != "host")
            .map(|(n, v)| (n.as_str(), v.as_slice())),
    );
    if let Some((scheme, client)) = router {
        h.push(("x-forwarded-proto", scheme.as_bytes()));
        let gzip_ok = client
            .accept_encoding
            .as_deref()
            .and_then(text)
            .is_some_and(|v| cachet_policy::accepts_encoding(Some(v), "gzip"));
        if !gzip_ok {
            for (n, v) in &mut h {
                if n.eq_ignore_ascii_case("accept-encoding") {
                    *v = b"identity";
                }
            }
        }
    }
    h
}

/// The validators a response carries (`ETag`, `Last-Modified`, RFC 9110 §8.8), when they
/// are text.
pub fn validators(fields: &(impl Headers + ?Sized)) -> Validators {
    let owned = |name: &str| {
        fields
            .value(name)
            .and_then(|v| text(&v).map(|s| s.trim().to_owned()))
    };
    Validators {
        etag: owned("etag"),
        last_modified: owned("last-modified"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachet_policy::RequestView;
    use std::time::{Duration, SystemTime};

    const CONFIG: &str = r#"
[origin]
url = "http://origin.example"

[edge]
max_object_bytes = 64

[[routes]]
name = "blog"
path_prefix = "/"
ttl = "60s"
keep = "1h"
"#;

    fn policy() -> Policy {
        Policy::from_toml(CONFIG).expect("test config is valid")
    }

    fn req() -> RequestView<'static> {
        RequestView {
            method: "GET",
            scheme: "https",
            host: Some("Blog.Example."),
            path_and_query: "/a?x=1",
            user_agent: Some(b"Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) Mobile"),
            ..RequestView::default()
        }
    }

    fn f(pairs: &[(&str, &[u8])]) -> Vec<(String, Vec<u8>)> {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), v.to_vec()))
            .collect()
    }

    fn origin<'a>(status: u16, fields: &'a [(String, Vec<u8>)], body: &'a [u8]) -> Origin<'a> {
        Origin {
            status,
            fields,
            body,
            elapsed: Duration::from_millis(5),
        }
    }

    fn now() -> Timestamp {
        Timestamp::from_millis(1_700_000_000_000)
    }

    #[test]
    fn a_fill_stores_a_public_answer_and_marks_a_private_one() {
        let p = policy();
        let plan = p.plan(&req(), SystemTime::UNIX_EPOCH);
        let public = f(&[("cache-control", b"max-age=60"), ("etag", b"\"v1\"")]);
        let got = filled(
            &p,
            &plan,
            &plan.cache_key,
            origin(200, &public, b"hi"),
            now(),
            false,
        )
        .unwrap();
        let Filled::Stored { meta, body } = got else {
            panic!("expected stored, got {got:?}")
        };
        assert_eq!(body, b"hi");
        assert_eq!(meta.validators.etag.as_deref(), Some("\"v1\""));
        let private = f(&[("cache-control", b"private")]);
        let got = filled(
            &p,
            &plan,
            &plan.cache_key,
            origin(200, &private, b"x"),
            now(),
            false,
        )
        .unwrap();
        let Filled::Marker { meta: m, why } = got else {
            panic!("expected a marker, got {got:?}")
        };
        assert!(m.pass);
        assert!(why.is_private());
        assert_eq!(m.host, "blog.example");
        assert_eq!(m.tag, object::object_tag(&plan.cache_key));
        assert!(m.headers.is_empty(), "a marker holds no content");
    }

    #[test]
    fn an_oversized_or_unstorable_answer_is_unstored_unless_it_replaces_an_object() {
        let p = policy();
        let plan = p.plan(&req(), SystemTime::UNIX_EPOCH);
        let big = vec![b'x'; 65];
        let none: Vec<(String, Vec<u8>)> = Vec::new();
        let key = plan.cache_key.clone();
        assert_eq!(
            filled(&p, &plan, &key, origin(200, &none, &big), now(), false).unwrap(),
            Filled::Unstored(NoStore::TooLarge)
        );
        assert!(matches!(
            filled(&p, &plan, &key, origin(200, &none, &big), now(), true).unwrap(),
            Filled::Marker {
                why: NoStore::TooLarge,
                ..
            }
        ));
        assert_eq!(
            filled(&p, &plan, &key, origin(206, &none, b"x"), now(), false).unwrap(),
            Filled::Unstored(NoStore::Status)
        );
        // Interim answers (103 Early Hints, RFC 8297; RFC 9110 §15.2) are never stored,
        // even with explicit freshness; a 206 neither.
        let fresh = f(&[("cache-control", b"public, max-age=60")]);
        for status in [100, 103, 206] {
            assert_eq!(
                unstorable(&p, &plan, &key, status, &fresh, now(), false),
                Some(Filled::Unstored(NoStore::Status)),
                "{status}"
            );
        }
        let declared = f(&[("content-length", b" 65 ")]);
        assert_eq!(
            unstorable(&p, &plan, &key, 200, &declared, now(), false),
            Some(Filled::Unstored(NoStore::TooLarge))
        );
        let public = f(&[("cache-control", b"max-age=60")]);
        assert_eq!(
            oversized(&p, &plan, &key, 200, &public, now(), false),
            Filled::Unstored(NoStore::TooLarge),
            "a chunked body found over the limit while read"
        );
        assert!(matches!(
            oversized(&p, &plan, &key, 200, &public, now(), true),
            Filled::Marker {
                why: NoStore::TooLarge,
                ..
            }
        ));
        let private = f(&[("cache-control", b"private")]);
        assert!(matches!(
            oversized(&p, &plan, &key, 200, &private, now(), false),
            Filled::Marker { why, .. } if why.is_private()
        ));
        let garbled = f(&[
            ("content-length", b"6\xff"),
            ("cache-control", b"max-age=9"),
        ]);
        assert_eq!(
            unstorable(&p, &plan, &key, 200, &garbled, now(), false),
            None
        );
    }

    #[test]
    fn a_304_freshens_a_5xx_keeps_and_a_private_304_marks() {
        let p = policy();
        let plan = p.plan(&req(), SystemTime::UNIX_EPOCH);
        let key = plan.cache_key.clone();
        let public = f(&[
            ("cache-control", b"max-age=60"),
            ("etag", b"\"v1\""),
            ("content-length", b"2"),
        ]);
        let Filled::Stored { meta, .. } =
            filled(&p, &plan, &key, origin(200, &public, b"hi"), now(), false).unwrap()
        else {
            panic!("stored")
        };
        let later = Timestamp::from_millis(now().as_millis() + 120_000);
        let not_modified = f(&[
            ("etag", b"\"v2\""),
            ("x-new", b"1"),
            ("content-length", b"0"),
        ]);
        let Revalidated::Freshen(fresh) = revalidated(
            &p,
            &plan,
            &key,
            &meta,
            origin(304, &not_modified, b""),
            later,
        ) else {
            panic!("freshen")
        };
        assert_eq!(
            fresh.times.stored_at,
            Timestamp::from_millis(later.as_millis() - 5),
            "stamped when the revalidation was sent (5 ms before it answered)"
        );
        assert_eq!(fresh.validators.etag.as_deref(), Some("\"v2\""));
        assert!(fresh.headers.iter().any(|(n, _)| n == "x-new"));
        assert_eq!(fresh.stored_len, meta.stored_len);
        assert!(
            fresh
                .headers
                .iter()
                .all(|(n, _)| !n.eq_ignore_ascii_case("content-length")),
            "a 304 never changes the stored Content-Length (the body's own length is sent)"
        );
        assert_eq!(
            revalidated(&p, &plan, &key, &meta, origin(503, &[], b""), later),
            Revalidated::Keep
        );
        assert_eq!(
            revalidated(&p, &plan, &key, &meta, origin(200, &[], b""), later),
            Revalidated::Replace
        );
        for odd in [206, 412] {
            assert_eq!(
                revalidated(&p, &plan, &key, &meta, origin(odd, &[], b""), later),
                Revalidated::Keep,
                "{odd} keeps the stored object"
            );
        }
        // A slice's revalidation asks for its range: its 206 is the new slice (stored if it
        // is exactly the slice, as any fill's answer; issue 30).
        let mut sliced = plan.clone();
        sliced.slice = cachet_policy::plan::slice_of(b"bytes=0-3", 16);
        assert!(sliced.slice.is_some());
        assert_eq!(
            revalidated(&p, &sliced, &key, &meta, origin(206, &[], b""), later),
            Revalidated::Replace
        );
        assert_eq!(
            revalidated(&p, &sliced, &key, &meta, origin(412, &[], b""), later),
            Revalidated::Keep
        );
        let private = f(&[("cache-control", b"private")]);
        assert!(matches!(
            revalidated(&p, &plan, &key, &meta, origin(304, &private, b""), later),
            Revalidated::Uncacheable { .. }
        ));
    }

    #[test]
    fn a_fill_sends_the_normalized_host_our_device_and_never_client_preconditions() {
        let p = policy();
        let plan = p.plan(&req(), SystemTime::UNIX_EPOCH);
        let client = f(&[
            ("Host", b"Blog.Example."),
            ("Range", b"bytes=0-1"),
            ("If-Match", b"\"x\""),
            ("X-Cachet-Device", b"pc"),
            ("x-device", b"kept"),
            ("Cookie", b"session=theirs"),
            ("X-Forwarded-Host", b"evil.example"),
            ("Accept-Language", b"ja"),
            ("Connection", b"x-hop"),
            ("x-hop", b"1"),
            ("x-cachet-key", b"evil"),
            (
                "User-Agent",
                b"Mozilla/5.0 (iPhone) Mobile <script>alert(1)</script>",
            ),
        ]);
        let stored = Meta {
            validators: Validators {
                etag: Some("\"v1\"".into()),
                last_modified: None,
            },
            // The stored object varies on x-device: its revalidation sends it.
            vary_fields: vec!["x-device".into()],
            ..Meta::marker("blog", now(), Duration::ZERO)
        };
        let out = request_fields(&p, &plan, &client, Some(&stored));
        let names: Vec<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "host",
                "accept-encoding",
                plan.device_header,
                "x-device",
                "Accept-Language",
                "user-agent",
                "if-none-match"
            ]
        );
        assert_eq!(out[0].1, b"blog.example");
        assert_eq!(out[2].1, b"smartphone");
        assert_eq!(
            out[5].1,
            cachet_policy::DEFAULT_SMARTPHONE_FILL_USER_AGENT.as_bytes(),
            "the class's canonical User-Agent, never the client's"
        );
        assert_eq!(out[6].1, b"\"v1\"");
    }

    #[test]
    fn a_fill_carries_authorization_only_when_the_key_holds_the_credentials() {
        // RFC 9111 §3.5 (issue 30): the origin answers for the credentials the key holds.
        let p = policy();
        let client = f(&[("Authorization", b"Bearer alice")]);
        let mut r = req();
        r.authorization = Some(b"Bearer alice");
        let keyed = p.plan(&r, SystemTime::UNIX_EPOCH);
        assert!(keyed.authorized);
        let out = request_fields(&p, &keyed, &client, None);
        let auth: Vec<&[u8]> = (out.iter())
            .filter(|(n, _)| n.eq_ignore_ascii_case("authorization"))
            .map(|(_, v)| v.as_slice())
            .collect();
        assert_eq!(auth, [&b"Bearer alice"[..]]);
        // An anonymous plan never forwards a client's Authorization onto a shared fill.
        let anon = p.plan(&req(), SystemTime::UNIX_EPOCH);
        assert!(
            request_fields(&p, &anon, &client, None)
                .iter()
                .all(|(n, _)| !n.eq_ignore_ascii_case("authorization"))
        );
    }

    #[test]
    fn a_slice_fill_asks_for_exactly_its_slice_in_the_identity_coding() {
        let p = Policy::from_toml(&CONFIG.replace(
            "[[routes]]",
            "[[routes]]\nname = \"sliced\"\npath_prefix = \"/a\"\nslice_bytes = 32\n\n[[routes]]",
        ))
        .expect("valid");
        let mut r = req();
        r.range = Some(b"bytes=40-50");
        let plan = p.plan(&r, SystemTime::UNIX_EPOCH);
        assert!(plan.slice.is_some(), "{plan:?}");
        let client = f(&[("Range", b"bytes=40-50")]);
        let out = request_fields(&p, &plan, &client, None);
        let get = |n: &str| -> Vec<&[u8]> {
            (out.iter())
                .filter(|(k, _)| k.eq_ignore_ascii_case(n))
                .map(|(_, v)| v.as_slice())
                .collect()
        };
        assert_eq!(
            get("range"),
            [&b"bytes=32-63"[..]],
            "the slice, never the client's"
        );
        assert_eq!(get("accept-encoding"), [&b"identity"[..]]);
    }

    #[test]
    fn every_fill_carries_the_shard_field_of_its_primary_key_and_never_the_clients() {
        let off = policy();
        let plan = off.plan(&req(), SystemTime::UNIX_EPOCH);
        let client = f(&[("X-Cachet-Shard", b"cachet-obj-chosen-by-client")]);
        assert!(
            request_fields(&off, &plan, &client, None)
                .iter()
                .all(|(n, _)| !n.eq_ignore_ascii_case("x-cachet-shard")),
            "off by default, and a client's copy never passes"
        );
        let on = Policy::from_toml(&CONFIG.replace(
            "[origin]\n",
            "[origin]\nshard_header = \"X-Cachet-Shard\"\n",
        ))
        .expect("valid");
        let plan = on.plan(&req(), SystemTime::UNIX_EPOCH);
        let want = object::shard_value(&plan.cache_key).into_bytes();
        assert!(want.starts_with(b"cachet-obj-") && want.len() == 27);
        let stored = Meta {
            validators: Validators {
                etag: Some("\"v1\"".into()),
                last_modified: None,
            },
            ..Meta::marker("blog", now(), Duration::ZERO)
        };
        // A router fill (nothing stored) and a revalidation (validators) alike: one
        // field, the key's value, whatever the client sent.
        for stored in [None, Some(&stored)] {
            let out = request_fields(&on, &plan, &client, stored);
            let shard: Vec<&Vec<u8>> = out
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case("x-cachet-shard"))
                .map(|(_, v)| v)
                .collect();
            assert_eq!(shard, [&want], "{out:?}");
            let tier: Vec<&[u8]> = out
                .iter()
                .filter(|(n, _)| n == crate::fields::EDGE_TIER_FIELD)
                .map(|(_, v)| v.as_slice())
                .collect();
            assert_eq!(tier, [b"edge".as_slice()], "the shield's edge-tier marker");
        }
        // Stable: another request for the same key (another client, another edge) gets
        // the same value; another key gets another.
        let again = on.plan(&req(), SystemTime::UNIX_EPOCH);
        assert_eq!(object::shard_value(&again.cache_key).into_bytes(), want);
        let other = RequestView {
            path_and_query: "/b",
            ..req()
        };
        let other = on.plan(&other, SystemTime::UNIX_EPOCH);
        assert_ne!(object::shard_value(&other.cache_key).into_bytes(), want);
    }
}
