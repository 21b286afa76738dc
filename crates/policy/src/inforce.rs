//! The configuration in force: a configuration that does not load never stops the service.
//!
//! Rule (issue 27 item 13): when the operator's configuration (the edge's `cachet` config
//! store, key `config`; Envoy's plugin configuration) is rejected, the adapter keeps
//! serving with the last configuration it loaded successfully, or, when it has none, with
//! its built-in one, logs the rejection loudly, and shows it on the admin call
//! `GET /.cachet/config` ([`crate::admin::config_call`], answered by
//! [`ConfigStatus::body`]). Before this rule a typo (`tll = "5m"`) answered every request
//! `500`, the admin API included, so an operator could neither ban nor purge.
//!
//! Which fallback each platform has:
//!
//! * **Fastly**: every request runs in a fresh instance today (an instance that is
//!   reused keeps the policy it loaded first), so there is no earlier good configuration
//!   to keep: the fallback is the configuration compiled into the app
//!   (`edge-app/cachet.toml`), whose admin section names the secret store that holds the
//!   token, so the admin API keeps working.
//! * **Envoy**: a VM (one worker) keeps the last configuration it loaded; a rejected update
//!   (a new plugin configuration, a new root context in the same VM) keeps serving with
//!   it. A VM that never loaded a good one serves with the built-in default
//!   (`Config::default()`: no routes, so every request passes uncached; an empty admin
//!   token, so the admin API refuses every call: the error is then in the log only).
//!
//! Pure: the adapters read the configuration, keep the last good policy and write the log.

use std::fmt;

/// Where the configuration in force came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The operator's configuration, as given (config store, plugin configuration).
    Configured,
    /// The last configuration this instance loaded successfully: the operator's current
    /// one was rejected.
    LastGood,
    /// The configuration built into the program: none was given, or the one given was
    /// rejected and no earlier one had loaded.
    BuiltIn,
}

impl Source {
    /// The name in `GET /.cachet/config`'s answer and the log: `configured`,
    /// `last-good`, `built-in`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Configured => "configured",
            Self::LastGood => "last-good",
            Self::BuiltIn => "built-in",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which configuration is in force and why: what `GET /.cachet/config` answers and what
/// the adapter logs when the operator's configuration was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigStatus {
    /// Where the operator's configuration is read from, in words (`config store "cachet",
    /// key "config"`; `plugin configuration`).
    pub configured_from: &'static str,
    /// The configuration in force.
    pub in_force: Source,
    /// Why the operator's configuration was rejected (the parser's or the validator's
    /// message, with the path of the offending value); `None` when it was not.
    pub rejected: Option<String>,
}

impl ConfigStatus {
    /// `GET /.cachet/config`'s JSON body: `{"in_force", "configured_from", "ok",
    /// "rejected"}`, `ok` false and `rejected` the error when the operator's configuration
    /// was rejected, `rejected` null otherwise.
    pub fn body(&self) -> String {
        serde_json::json!({
            "in_force": self.in_force.as_str(),
            "configured_from": self.configured_from,
            "ok": self.rejected.is_none(),
            "rejected": self.rejected,
        })
        .to_string()
    }

    /// The loud log line for a rejected configuration (`None` when nothing was
    /// rejected): what was rejected, why, and what is served instead.
    pub fn warning(&self) -> Option<String> {
        let why = self.rejected.as_deref()?;
        let instead = match self.in_force {
            Source::LastGood => "the last configuration that loaded",
            Source::BuiltIn | Source::Configured => "the built-in configuration",
        };
        Some(format!(
            "cachet: CONFIGURATION REJECTED ({}), serving with {instead} ({}); \
             GET /.cachet/config shows this: {why}",
            self.configured_from, self.in_force
        ))
    }
}

/// A policy (or whatever the adapter compiles a configuration into) and how it came to
/// be in force.
#[derive(Debug, Clone)]
pub struct InForce<P> {
    /// What serves requests.
    pub policy: P,
    /// Where it came from and what was rejected.
    pub status: ConfigStatus,
}

/// Chooses the configuration to serve with: the operator's (`configured`) when it loads;
/// when it is rejected, `last_good` (the last one this instance loaded), else `built_in`;
/// when none is given (`configured` is `None`), `built_in` without an error.
///
/// # Errors
/// `built_in`'s error, when it is needed and does not load either (a broken build: the
/// adapters test their built-in configuration).
pub fn choose<P, E: fmt::Display>(
    configured_from: &'static str,
    configured: Option<Result<P, E>>,
    last_good: Option<P>,
    built_in: impl FnOnce() -> Result<P, E>,
) -> Result<InForce<P>, E> {
    let status = |in_force, rejected| ConfigStatus {
        configured_from,
        in_force,
        rejected,
    };
    let rejected = match configured {
        Some(Ok(policy)) => {
            return Ok(InForce {
                policy,
                status: status(Source::Configured, None),
            });
        }
        Some(Err(e)) => Some(e.to_string()),
        None => None,
    };
    if rejected.is_some()
        && let Some(policy) = last_good
    {
        return Ok(InForce {
            policy,
            status: status(Source::LastGood, rejected),
        });
    }
    Ok(InForce {
        policy: built_in()?,
        status: status(Source::BuiltIn, rejected),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FROM: &str = "config store \"cachet\", key \"config\"";

    fn bad() -> Result<&'static str, String> {
        Err("routes[3]: unknown field `tll`".to_owned())
    }

    #[test]
    fn the_operators_configuration_wins_when_it_loads() {
        let f = choose(FROM, Some(Ok::<_, String>("new")), Some("old"), || {
            Ok("built-in")
        })
        .expect("chosen");
        assert_eq!((f.policy, f.status.in_force), ("new", Source::Configured));
        assert_eq!(f.status.rejected, None);
        assert_eq!(f.status.warning(), None);
        let body: serde_json::Value = serde_json::from_str(&f.status.body()).expect("json");
        assert_eq!(body["in_force"], "configured");
        assert_eq!(body["ok"], true);
        assert!(body["rejected"].is_null());
    }

    #[test]
    fn a_rejected_configuration_keeps_the_last_good_one_and_says_why() {
        let f = choose(FROM, Some(bad()), Some("old"), || Ok("built-in")).expect("chosen");
        assert_eq!((f.policy, f.status.in_force), ("old", Source::LastGood));
        let body: serde_json::Value = serde_json::from_str(&f.status.body()).expect("json");
        assert_eq!(body["in_force"], "last-good");
        assert_eq!(body["ok"], false);
        assert_eq!(body["rejected"], "routes[3]: unknown field `tll`");
        assert_eq!(body["configured_from"], FROM);
        let w = f.status.warning().expect("a rejection is logged");
        assert!(w.contains("CONFIGURATION REJECTED"), "{w}");
        assert!(w.contains("the last configuration that loaded"), "{w}");
        assert!(w.contains("unknown field `tll`"), "{w}");
    }

    #[test]
    fn without_a_last_good_one_the_built_in_configuration_serves() {
        let f = choose(FROM, Some(bad()), None, || Ok("built-in")).expect("chosen");
        assert_eq!((f.policy, f.status.in_force), ("built-in", Source::BuiltIn));
        assert!(f.status.rejected.is_some());
        assert!(
            f.status
                .warning()
                .is_some_and(|w| w.contains("the built-in configuration"))
        );
        // None given: the built-in one, and nothing to report.
        let f = choose(FROM, None, Some("old"), || Ok::<_, String>("built-in")).expect("chosen");
        assert_eq!((f.policy, f.status.in_force), ("built-in", Source::BuiltIn));
        assert_eq!(f.status.warning(), None);
    }

    #[test]
    fn only_a_broken_built_in_configuration_is_an_error() {
        let e = choose(
            FROM,
            Some(bad()),
            None,
            || Err("built-in broken".to_owned()),
        );
        assert_eq!(e.err().as_deref(), Some("built-in broken"));
    }

    #[test]
    fn the_config_call_is_admitted_like_every_admin_call() {
        use crate::admin::{AdminError, config_call};
        let token = Some(&b"a-token-of-sixteen-bytes"[..]);
        let bearer = Some(&b"Bearer a-token-of-sixteen-bytes"[..]);
        assert_eq!(
            config_call(true, "GET", "/.cachet/bans", bearer, token),
            None
        );
        assert_eq!(
            config_call(true, "GET", "/.cachet/config", bearer, token),
            Some(Ok(()))
        );
        assert_eq!(
            config_call(true, "HEAD", "/.cachet/config?x", bearer, token),
            Some(Ok(()))
        );
        assert_eq!(
            config_call(true, "GET", "/.cachet/config", None, token),
            Some(Err(AdminError::Unauthorized))
        );
        assert!(matches!(
            config_call(true, "GET", "/.cachet/config", Some(b"Bearer wrong"), token),
            Some(Err(AdminError::Forbidden(_)))
        ));
        // Fail closed without a configured token, as every admin call.
        assert!(matches!(
            config_call(true, "GET", "/.cachet/config", bearer, None),
            Some(Err(AdminError::Forbidden(_)))
        ));
        assert_eq!(
            config_call(true, "POST", "/.cachet/config", bearer, token),
            Some(Err(AdminError::MethodNotAllowed { allow: "GET, HEAD" }))
        );
        assert!(matches!(
            config_call(false, "GET", "/.cachet/config", bearer, token),
            Some(Err(AdminError::NotFound(_)))
        ));
    }

    #[test]
    fn both_adapters_built_in_configurations_load() {
        // The edge's (compiled into the app) and Envoy's (the schema's defaults).
        let edge = include_str!("../../../edge-app/cachet.toml");
        crate::Policy::from_toml(edge).expect("edge-app/cachet.toml loads");
        crate::Policy::new(crate::Config::default()).expect("the default configuration loads");
    }
}
