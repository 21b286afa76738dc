//! The Envoy filter's setup from its plugin configuration: the policy and the per-request
//! workspace, or the one message Envoy's log shows when the configuration is refused.

use cachet_policy::{Config, Policy};
use cachet_workspace::Workspace;

/// What a VM runs with, built from its plugin configuration.
#[derive(Debug)]
pub struct Setup {
    /// The compiled policy.
    pub policy: Policy,
    /// The per-request workspace (`[workspace]`).
    pub workspace: Workspace,
}

/// Builds the setup from the plugin configuration bytes Envoy hands the root context
/// (`None` or empty: none given). The configuration is the `cachet_policy::Config` schema
/// as JSON (Envoy's `configuration` value).
///
/// # Errors
/// The message to log when the plugin must be refused: no configuration, bytes that are
/// not UTF-8, a configuration that does not parse or validate (every issue with its path,
/// as `cachet_policy::PolicyError` words them), or a workspace that cannot be built.
pub fn setup(bytes: Option<&[u8]>) -> Result<Setup, String> {
    let Some(bytes) = bytes.filter(|b| !b.is_empty()) else {
        return Err(
            "plugin configuration is empty; give the cachet_policy::Config schema as JSON".into(),
        );
    };
    let text = std::str::from_utf8(bytes)
        .map_err(|e| format!("plugin configuration is not UTF-8: {e}"))?;
    let policy = Config::from_json(text)
        .and_then(Policy::new)
        .map_err(|e| format!("rejecting plugin configuration: {e}"))?;
    let workspace = Workspace::new(policy.config().workspace.workspace_config())
        .map_err(|e| format!("rejecting plugin configuration: workspace: {e}"))?;
    Ok(Setup { policy, workspace })
}

#[cfg(test)]
#[allow(clippy::expect_used, reason = "tests fail loudly")]
mod tests {
    use super::*;

    #[test]
    fn a_refused_configuration_says_why() {
        let err = |b: Option<&[u8]>| setup(b).err().unwrap_or_default();
        assert!(err(None).contains("plugin configuration is empty"));
        assert!(err(Some(b"")).contains("plugin configuration is empty"));
        assert!(err(Some(b"{\"origin\":\xff}")).starts_with("plugin configuration is not UTF-8"));
        let bad = err(Some(
            br#"{"origin": {"url": "http://o.example"}, "routes": 3}"#,
        ));
        assert!(bad.starts_with("rejecting plugin configuration: "), "{bad}");
        assert!(bad.contains("routes"), "{bad}");
        let ws = err(Some(
            br#"{"origin": {"url": "http://o.example"}, "workspace": {"capacity_bytes": 1}}"#,
        ));
        assert!(ws.contains("workspace"), "{ws}");
    }

    #[test]
    fn a_valid_configuration_builds_the_policy_and_workspace() {
        let s = setup(Some(br#"{"origin": {"url": "http://o.example"}}"#))
            .expect("a minimal configuration is valid");
        assert_eq!(s.policy.config().origin.url, "http://o.example");
    }
}
