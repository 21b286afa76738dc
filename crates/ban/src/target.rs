//! What a ban is tested against: the cached object ([`BanTarget`]) and the lookup request ([`BanRequest`]).

use std::collections::BTreeMap;

/// Header name whose value holds an object's surrogate keys, separated by whitespace
/// (Fastly's `Surrogate-Key` convention). A ban condition on `obj.http.surrogate-key`
/// reads [`BanTarget::surrogate_keys`], not [`BanTarget::header`], so adapters can keep
/// keys apart from the stored headers.
pub const SURROGATE_KEY_HEADER: &str = "surrogate-key";

/// The value of `obj.http.<name>` for an object that stored no header of that name, when
/// the name is one the edge derives: `x-url` is the URL the object was stored under and
/// `x-host` its host (`None` for any other name, or for `x-host` without a host). This is
/// Varnish's ban-lurker idiom (`set beresp.http.x-url = bereq.url;`, Varnish Users Guide,
/// "Bans") made implicit, so `obj.http.x-url ~ …` works without the origin or a scenario
/// spelling the header out; a stored header of that name wins. One rule for the edge's
/// stored objects (`cachet_policy::object::BanView`) and [`Object`] (scenarios, CLI).
pub fn derived_header<'a>(name: &str, url: &'a str, host: Option<&'a str>) -> Option<&'a str> {
    if name.eq_ignore_ascii_case("x-url") {
        Some(url)
    } else if name.eq_ignore_ascii_case("x-host") {
        host
    } else {
        None
    }
}

/// The object side of a ban test: the metadata an adapter keeps about a cached object.
///
/// Varnish tests bans against `obj.*` (the stored object) and `req.*` (the request doing
/// the lookup) — Varnish Users Guide, "Bans". Implement this for your object metadata;
/// [`Object`] is a simple owned implementation.
///
/// Times are seconds since an epoch the caller chooses (the same epoch as the `now_s`
/// given to [`BanList::add`](crate::BanList::add)). Durations are seconds.
pub trait BanTarget {
    /// When the object entered the cache, seconds. A ban applies only to objects inserted
    /// strictly before it ([`BanList`](crate::BanList) documents the tie rule).
    fn inserted_at_s(&self) -> f64;

    /// The URL the object was stored under. Bans never read it (`req.url` is the *lookup*
    /// request's URL, as in Varnish); the scenario evaluator uses it to build the default
    /// lookup request.
    fn url(&self) -> &str;

    /// The stored response header `name`, or `None` when absent. `name` is given in ASCII
    /// lowercase; implementations must match case-insensitively and return the first
    /// occurrence (Varnish's `http_GetHdr`).
    fn header(&self, name: &str) -> Option<&str>;

    /// The stored status code, compared as its decimal string (`obj.status == 200`).
    fn status(&self) -> u16;

    /// Remaining TTL at time `at_s`, seconds; negative once expired (Varnish's
    /// `t_origin + ttl - at`). `obj.ttl` in a ban reads this at the ban's `added_at`.
    fn ttl_s_at(&self, at_s: f64) -> f64;

    /// Age at time `at_s`, seconds (`at - t_origin`, where `t_origin` is the insertion
    /// time minus any `Age` the response arrived with). `obj.age` in a ban reads this at
    /// the ban's `added_at`.
    fn age_s_at(&self, at_s: f64) -> f64;

    /// Grace, seconds (`obj.grace`).
    fn grace_s(&self) -> f64;

    /// Keep, seconds (`obj.keep`).
    fn keep_s(&self) -> f64;

    /// The object's surrogate keys as one whitespace-separated string (like the
    /// `Surrogate-Key` header), or `None` when it has none. This is what a condition on
    /// `obj.http.surrogate-key` reads and what the surrogate-key index splits (on Unicode
    /// whitespace, the same set as the regex `\s`), so both always agree.
    ///
    /// The default returns [`header`](BanTarget::header)`(`[`SURROGATE_KEY_HEADER`]`)`.
    fn surrogate_keys(&self) -> Option<&str> {
        self.header(SURROGATE_KEY_HEADER)
    }
}

/// The request side of a ban test: the request doing the lookup (`req.url`,
/// `req.http.<name>`). Varnish evaluates `req.*` conditions only at lookup, which is why a
/// ban using them is not lurker-friendly (Varnish Users Guide, "Lurker-Friendly Bans").
pub trait BanRequest {
    /// The request URL (path and query, as Varnish's `req.url`).
    fn url(&self) -> &str;

    /// Request header `name` (given in ASCII lowercase; match case-insensitively, first
    /// occurrence), or `None` when absent.
    fn header(&self, name: &str) -> Option<&str>;
}

/// A simple owned [`BanTarget`] for tests, the scenario evaluator and the CLI.
///
/// Header names are stored lowercased. `ttl_s` is the remaining TTL at insertion (what
/// VCL's `beresp.ttl` sets) and `age_s` the age at insertion (the response's `Age`), so
/// `ttl_s_at(t) = inserted_at_s + ttl_s - t` and `age_s_at(t) = t - inserted_at_s + age_s`.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    /// Insertion time, seconds.
    pub inserted_at_s: f64,
    /// URL the object was stored under.
    pub url: String,
    /// Status code.
    pub status: u16,
    /// Remaining TTL at insertion, seconds.
    pub ttl_s: f64,
    /// Age at insertion, seconds.
    pub age_s: f64,
    /// Grace, seconds.
    pub grace_s: f64,
    /// Keep, seconds.
    pub keep_s: f64,
    headers: BTreeMap<String, String>,
    surrogate_keys: Option<String>,
}

impl Object {
    /// A 200 object for `url` inserted at `inserted_at_s`, with Varnish's defaults:
    /// TTL 120 s (`default_ttl`), grace 10 s (`default_grace`), keep 0 s, age 0 s, no
    /// headers.
    pub fn new(url: impl Into<String>, inserted_at_s: f64) -> Self {
        Object {
            inserted_at_s,
            url: url.into(),
            status: 200,
            ttl_s: 120.0,
            age_s: 0.0,
            grace_s: 10.0,
            keep_s: 0.0,
            headers: BTreeMap::new(),
            surrogate_keys: None,
        }
    }

    /// Sets header `name` (case-insensitive; replaces an earlier value).
    #[must_use]
    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.set_header(name, value);
        self
    }

    /// Sets header `name` (case-insensitive; replaces an earlier value).
    pub fn set_header(&mut self, name: &str, value: impl Into<String>) {
        self.headers.insert(name.to_ascii_lowercase(), value.into());
    }

    /// Sets the surrogate keys (joined with single spaces). They take precedence over a
    /// `Surrogate-Key` header set with [`with_header`](Object::with_header).
    #[must_use]
    pub fn with_surrogate_keys<I, S>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut joined = String::new();
        for k in keys {
            if !joined.is_empty() {
                joined.push(' ');
            }
            joined.push_str(k.as_ref());
        }
        self.surrogate_keys = Some(joined);
        self
    }

    /// Sets the status code.
    #[must_use]
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }

    /// Sets TTL, grace and keep, seconds.
    #[must_use]
    pub fn with_lifetimes(mut self, ttl_s: f64, grace_s: f64, keep_s: f64) -> Self {
        self.ttl_s = ttl_s;
        self.grace_s = grace_s;
        self.keep_s = keep_s;
        self
    }

    /// Sets the age at insertion, seconds.
    #[must_use]
    pub fn with_age(mut self, age_s: f64) -> Self {
        self.age_s = age_s;
        self
    }
}

impl BanTarget for Object {
    fn inserted_at_s(&self) -> f64 {
        self.inserted_at_s
    }
    fn url(&self) -> &str {
        &self.url
    }
    /// A stored header, else [`derived_header`] (`x-url`: the URL; `x-host`: the `host`
    /// header).
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str).or_else(|| {
            derived_header(
                name,
                &self.url,
                self.headers.get("host").map(String::as_str),
            )
        })
    }
    fn status(&self) -> u16 {
        self.status
    }
    fn ttl_s_at(&self, at_s: f64) -> f64 {
        self.inserted_at_s + self.ttl_s - at_s
    }
    fn age_s_at(&self, at_s: f64) -> f64 {
        at_s - self.inserted_at_s + self.age_s
    }
    fn grace_s(&self) -> f64 {
        self.grace_s
    }
    fn keep_s(&self) -> f64 {
        self.keep_s
    }
    fn surrogate_keys(&self) -> Option<&str> {
        match &self.surrogate_keys {
            Some(k) => Some(k),
            None => self.header(SURROGATE_KEY_HEADER),
        }
    }
}

/// A simple owned [`BanRequest`]: a URL and headers (names stored lowercased).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    /// The request URL.
    pub url: String,
    headers: BTreeMap<String, String>,
}

impl Request {
    /// A request for `url` without headers.
    pub fn new(url: impl Into<String>) -> Self {
        Request {
            url: url.into(),
            headers: BTreeMap::new(),
        }
    }

    /// Sets header `name` (case-insensitive; replaces an earlier value).
    #[must_use]
    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.set_header(name, value);
        self
    }

    /// Sets header `name` (case-insensitive; replaces an earlier value).
    pub fn set_header(&mut self, name: &str, value: impl Into<String>) {
        self.headers.insert(name.to_ascii_lowercase(), value.into());
    }
}

impl BanRequest for Request {
    fn url(&self) -> &str {
        &self.url
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}
