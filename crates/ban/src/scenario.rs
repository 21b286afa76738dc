//! Scenario evaluation for `cachet ban check --scenario FILE.json` and the Varnish differential test.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::cache::{BanCache, ObjectId};
use crate::error::BanError;
use crate::target::{Object, Request};

/// A scenario: objects inserted, bans added and lookups made, each at a time in seconds.
/// Unknown fields are refused.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Objects to insert.
    #[serde(default)]
    pub objects: Vec<ScenarioObject>,
    /// Bans to add.
    #[serde(default)]
    pub bans: Vec<ScenarioBan>,
    /// Lookups to make.
    #[serde(default)]
    pub lookups: Vec<ScenarioLookup>,
}

/// One object of a [`Scenario`].
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioObject {
    /// Name used by lookups; unique.
    pub id: String,
    /// Insertion time, seconds.
    pub inserted_at: f64,
    /// URL stored under (the default lookup URL).
    pub url: String,
    /// Host (the default lookup's `Host` header).
    #[serde(default)]
    pub host: Option<String>,
    /// Status code; default 200.
    #[serde(default = "default_status")]
    pub status: u16,
    /// Remaining TTL at insertion, seconds; default 120 (Varnish `default_ttl`).
    #[serde(default = "default_ttl")]
    pub ttl: f64,
    /// Grace, seconds; default 10 (Varnish `default_grace`).
    #[serde(default = "default_grace")]
    pub grace: f64,
    /// Keep, seconds; default 0.
    #[serde(default)]
    pub keep: f64,
    /// Age at insertion (the response's `Age`), seconds; default 0. An extension of the
    /// lead's format, needed to drive `obj.age`.
    #[serde(default)]
    pub age: f64,
    /// Stored response headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Surrogate keys (what `obj.http.surrogate-key` reads; they win over a
    /// `surrogate-key` entry in `headers`).
    #[serde(default)]
    pub surrogate_keys: Option<Vec<String>>,
}

fn default_status() -> u16 {
    200
}
fn default_ttl() -> f64 {
    120.0
}
fn default_grace() -> f64 {
    10.0
}

/// One ban of a [`Scenario`].
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioBan {
    /// Time added, seconds.
    pub at: f64,
    /// The expression ([`BanExpr`](crate::BanExpr) syntax).
    pub expr: String,
}

/// One lookup of a [`Scenario`].
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioLookup {
    /// The object's `id`.
    pub object: String,
    /// Time, seconds; must not precede the object's insertion.
    pub at: f64,
    /// The lookup request; default: the object's URL and `Host`.
    #[serde(default)]
    pub req: Option<ScenarioRequest>,
}

/// The request of a [`ScenarioLookup`].
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioRequest {
    /// URL; default: the object's.
    #[serde(default)]
    pub url: Option<String>,
    /// Headers; `host` defaults to the object's host.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// The result of [`evaluate_scenario`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScenarioReport {
    /// One entry per ban, in input order.
    pub bans: Vec<BanOutcome>,
    /// One entry per lookup, in input order.
    pub lookups: Vec<LookupOutcome>,
}

/// Whether a scenario ban was accepted. Serializes as `{"ok":true,"lurker_friendly":…}`
/// or `{"ok":false,"error":"…"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum BanOutcome {
    /// Accepted.
    Accepted {
        /// Always `true`.
        ok: bool,
        /// Only `obj.*` fields.
        lurker_friendly: bool,
    },
    /// Refused.
    Refused {
        /// Always `false`.
        ok: bool,
        /// The [`BanError`] message.
        error: String,
    },
}

/// The verdict of a scenario lookup: `{"object":"…","verdict":"banned"|"kept"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LookupOutcome {
    /// The object's `id`.
    pub object: String,
    /// `"banned"` (also for an object banned by an earlier lookup) or `"kept"`.
    pub verdict: &'static str,
}

impl ScenarioReport {
    /// Pretty JSON with a trailing newline.
    pub fn to_json_pretty(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

fn build_object(o: &ScenarioObject) -> Object {
    let mut obj = Object::new(o.url.clone(), o.inserted_at)
        .with_status(o.status)
        .with_lifetimes(o.ttl, o.grace, o.keep)
        .with_age(o.age);
    for (k, v) in &o.headers {
        obj.set_header(k, v.clone());
    }
    if let Some(h) = &o.host {
        obj.set_header("host", h.clone());
    }
    if let Some(keys) = &o.surrogate_keys {
        obj = obj.with_surrogate_keys(keys);
    }
    obj
}

fn build_request(l: &ScenarioLookup, obj: &ScenarioObject) -> Request {
    let mut req = Request::new(
        l.req
            .as_ref()
            .and_then(|r| r.url.clone())
            .unwrap_or_else(|| obj.url.clone()),
    );
    if let Some(h) = &obj.host {
        req.set_header("host", h.clone());
    }
    if let Some(r) = &l.req {
        for (k, v) in &r.headers {
            req.set_header(k, v.clone());
        }
    }
    req
}

fn finite(what: &str, v: f64) -> Result<f64, BanError> {
    if v.is_finite() {
        Ok(v)
    } else {
        Err(BanError::Scenario(format!(
            "{what} must be a finite number"
        )))
    }
}

/// Runs a scenario given as JSON (see [`Scenario`]):
///
/// ```text
/// {"objects":[{"id","inserted_at","url","host","status","ttl","grace","keep","age",
///              "headers":{…},"surrogate_keys":[…]}],
///  "bans":[{"at","expr"}],
///  "lookups":[{"object","at","req":{"url","headers":{…}}}]}
/// ```
///
/// Events run in time order; at equal times insertions come first, then bans, then
/// lookups, each group in input order. A lookup is a [`BanCache::lookup`]: `req.*` bans
/// see the lookup's request; a banned object stays banned for later lookups. The
/// lurker does not run (it would evict the same objects). Expiry is ignored: `kept`
/// means "not banned".
///
/// # Errors
/// [`BanError::Scenario`] for malformed JSON, non-finite numbers, duplicate object ids,
/// lookups of unknown objects or before their object's insertion. A ban refused by the
/// parser is not an error: it is reported as `{"ok":false,…}`.
pub fn evaluate_scenario(json: &str) -> Result<ScenarioReport, BanError> {
    let sc: Scenario = serde_json::from_str(json).map_err(|e| BanError::Scenario(e.to_string()))?;
    evaluate(&sc)
}

/// [`evaluate_scenario`] on a parsed scenario.
///
/// # Errors
/// As [`evaluate_scenario`], except for JSON errors.
pub fn evaluate(sc: &Scenario) -> Result<ScenarioReport, BanError> {
    // (time, kind, index): kind 0 insert, 1 ban, 2 lookup.
    let mut events: Vec<(f64, u8, usize)> = Vec::new();
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    for (i, o) in sc.objects.iter().enumerate() {
        events.push((finite("inserted_at", o.inserted_at)?, 0, i));
        for (what, v) in [
            ("ttl", o.ttl),
            ("grace", o.grace),
            ("keep", o.keep),
            ("age", o.age),
        ] {
            finite(what, v)?;
        }
        if by_name.insert(&o.id, i).is_some() {
            return Err(BanError::Scenario(format!(
                "duplicate object id {:?}",
                o.id
            )));
        }
    }
    for (i, b) in sc.bans.iter().enumerate() {
        events.push((finite("ban at", b.at)?, 1, i));
    }
    for (i, l) in sc.lookups.iter().enumerate() {
        let at = finite("lookup at", l.at)?;
        let Some(&o) = by_name.get(l.object.as_str()) else {
            return Err(BanError::Scenario(format!(
                "lookup of unknown object {:?}",
                l.object
            )));
        };
        if at < sc.objects[o].inserted_at {
            return Err(BanError::Scenario(format!(
                "lookup of {:?} at {at} precedes its insertion",
                l.object
            )));
        }
        events.push((at, 2, i));
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));

    let mut cache: BanCache<Object> = BanCache::new();
    let mut ids: Vec<Option<ObjectId>> = vec![None; sc.objects.len()];
    let mut bans = vec![None; sc.bans.len()];
    let mut lookups = vec![None; sc.lookups.len()];
    for (at, kind, i) in events {
        match kind {
            0 => {
                let obj = build_object(&sc.objects[i]);
                ids[i] = Some(cache.insert(obj));
            }
            1 => {
                bans[i] = Some(match cache.bans_mut().add(&sc.bans[i].expr, at) {
                    Ok(a) => BanOutcome::Accepted {
                        ok: true,
                        lurker_friendly: a.lurker_friendly,
                    },
                    Err(e) => BanOutcome::Refused {
                        ok: false,
                        error: e.to_string(),
                    },
                });
            }
            _ => {
                let l = &sc.lookups[i];
                let o = by_name[l.object.as_str()];
                let req = build_request(l, &sc.objects[o]);
                let verdict = match ids[o].and_then(|id| cache.lookup(id, &req)) {
                    Some(v) if !v.is_banned() => "kept",
                    _ => "banned",
                };
                lookups[i] = Some(LookupOutcome {
                    object: l.object.clone(),
                    verdict,
                });
            }
        }
    }
    Ok(ScenarioReport {
        bans: bans.into_iter().flatten().collect(),
        lookups: lookups.into_iter().flatten().collect(),
    })
}
