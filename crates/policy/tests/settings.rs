//! The adapter-wide tables (`[origin]`, `[admin]`, `[bans]`, `[workspace]`, `[envoy]`,
//! `[collapse]`, per-route `early_refresh`/`keep`): defaults, TOML/JSON parity, and every
//! validation error reported with its path.

use std::time::Duration;

use cachet_policy::{Config, PolicyError, WorkspaceMode};
use cachet_refresh::EarlyRefresh;

fn issues(text: &str) -> Vec<(String, String)> {
    match Config::from_toml(text) {
        Ok(_) => Vec::new(),
        Err(e) => e
            .issues()
            .into_iter()
            .map(|i| (i.path, i.message))
            .collect(),
    }
}

fn paths(text: &str) -> Vec<String> {
    issues(text).into_iter().map(|(p, _)| p).collect()
}

#[test]
fn an_empty_file_gets_the_documented_defaults() {
    let c = Config::from_toml("").unwrap();
    assert_eq!(c.origin.keepalive.0, Duration::from_secs(15));
    assert!(c.origin.pooling);
    assert!(c.origin.url.is_empty());
    assert!(c.admin.enabled);
    assert_eq!(c.bans.sync_interval.0, Duration::from_secs(2));
    assert_eq!(c.workspace.capacity_bytes, 256 * 1024);
    assert_eq!(c.workspace.mode, WorkspaceMode::Watermark);
    assert_eq!(c.workspace.verify_one_in, 20_000);
    assert_eq!(c.envoy.cluster, "origin");
    assert!(c.envoy.local_bytes <= c.envoy.shared_bytes);
}

#[test]
fn route_refresh_settings_parse_in_toml_and_json_alike() {
    let toml = r#"
        [[routes]]
        name = "article"
        path_prefix = "/blog/"
        ttl = "20s"
        grace = "1m"
        keep = "1h"
        early_refresh = { policy = "threshold", fraction = 0.7 }

        [[routes]]
        name = "feed"
        path = "/blog/*/feed"
        early_refresh = { policy = "xfetch" }
    "#;
    let c = Config::from_toml(toml).unwrap();
    assert_eq!(c.routes[0].keep.0, Duration::from_secs(3600));
    assert_eq!(
        c.routes[0].early_refresh,
        EarlyRefresh::Threshold { fraction: 0.7 }
    );
    assert_eq!(
        c.routes[1].early_refresh,
        EarlyRefresh::Xfetch { beta: 1.0 }
    );
    let json = serde_json::to_string(&c).unwrap();
    assert_eq!(Config::from_json(&json).unwrap(), c);
}

#[test]
fn out_of_range_values_are_reported_with_their_paths() {
    let text = r#"
        [origin]
        url = "ftp://origin"
        connect_timeout = "0s"
        first_byte_timeout = "1h"
        max_connections = 20000

        [bans]
        sync_interval = "0s"
        max_bans = 0
        lurker_budget = 0

        [workspace]
        capacity_bytes = 10

        [envoy]
        cluster = ""
        local_bytes = 100
        shared_bytes = 10
        tick = "1ms"

        [collapse]
        lease_ms = 0

        [[routes]]
        name = "a"
        keep = "400d"
        early_refresh = { policy = "threshold", fraction = 1.5 }

        [[routes]]
        name = "b"
        early_refresh = { policy = "xfetch", beta = -1 }
        gzip_level = 0

        [[routes]]
        name = "c"
        gzip_level = 10
    "#;
    let got = paths(text);
    for want in [
        "origin.url",
        "origin.connect_timeout",
        "origin.first_byte_timeout",
        "origin.max_connections",
        "bans.sync_interval",
        "bans.max_bans",
        "bans.lurker_budget",
        "workspace.capacity_bytes",
        "envoy.cluster",
        "envoy.local_bytes",
        "envoy.tick",
        "collapse.lease_ms",
        "routes[0].keep",
        "routes[0].early_refresh.fraction",
        "routes[1].early_refresh.beta",
        "routes[1].gzip_level",
        "routes[2].gzip_level",
    ] {
        assert!(got.iter().any(|p| p == want), "missing {want} in {got:?}");
    }
    // Messages carry the reason, not the path twice.
    let all = issues(text);
    let (_, msg) = all
        .iter()
        .find(|(p, _)| p == "routes[0].early_refresh.fraction")
        .unwrap();
    assert!(msg.contains("1.5") && !msg.contains("routes["), "{msg}");
}

#[test]
fn unknown_fields_and_policies_are_parse_errors_with_a_path() {
    let e = Config::from_toml("[origin]\nkeep_alive = \"15s\"\n").unwrap_err();
    assert!(
        matches!(&e, PolicyError::Parse { path, .. } if path.starts_with("origin")),
        "{e}"
    );
    let e =
        Config::from_toml("[[routes]]\nname = \"a\"\nearly_refresh = { policy = \"sometimes\" }\n")
            .unwrap_err();
    assert!(e.to_string().contains("routes[0].early_refresh"), "{e}");
}

#[test]
fn placeholder_and_short_admin_tokens_are_refused_with_how_to_generate_one() {
    for bad in ["change-me", "CHANGEME", "secret", "short-token"] {
        let got = issues(&format!("[admin]\ntoken = \"{bad}\"\n"));
        assert_eq!(got.len(), 1, "{bad}: {got:?}");
        assert_eq!(got[0].0, "admin.token");
        assert!(got[0].1.contains("openssl rand -hex 32"), "{}", got[0].1);
    }
    assert!(
        paths("[admin]\ntoken = \"\"\n").is_empty(),
        "empty: admin refuses all"
    );
    assert!(paths("[admin]\ntoken = \"0123456789abcdef0123\"\n").is_empty());
}

#[test]
fn the_shard_header_is_off_by_default_and_must_be_a_reserved_field_other_than_the_device() {
    assert!(
        Config::from_toml("")
            .unwrap()
            .origin
            .shard_header
            .is_empty()
    );
    let ok = Config::from_toml("[origin]\nshard_header = \"X-Cachet-Shard\"\n").unwrap();
    assert_eq!(ok.origin.shard_header, "X-Cachet-Shard");
    let json = Config::from_json(r#"{"origin":{"shard_header":"x-cachet-shard"}}"#).unwrap();
    assert_eq!(json.origin.shard_header, "x-cachet-shard");
    for (value, needle) in [
        ("x-shard", "must start with \"x-cachet-\""),
        ("bad name", "is not a header field name"),
        ("X-Cachet-Device", "is the device header"),
    ] {
        let got = issues(&format!("[origin]\nshard_header = \"{value}\"\n"));
        assert_eq!(got.len(), 1, "{value}: {got:?}");
        assert_eq!(got[0].0, "origin.shard_header", "{value}");
        assert!(got[0].1.contains(needle), "{value}: {}", got[0].1);
    }
    // A renamed device header frees the old name, and takes the check with it.
    let got = issues(
        "[device]\nheader = \"X-Cachet-Class\"\n[origin]\nshard_header = \"x-cachet-class\"\n",
    );
    assert_eq!(paths_of(&got), ["origin.shard_header"]);
}

fn paths_of(issues: &[(String, String)]) -> Vec<&str> {
    issues.iter().map(|(p, _)| p.as_str()).collect()
}

#[test]
fn the_origin_endpoint_comes_from_the_url_with_the_schemes_default_port() {
    use cachet_policy::{OriginConfig, OriginEndpoint};
    let at = |url: &str| {
        OriginConfig {
            url: url.into(),
            ..OriginConfig::default()
        }
        .endpoint()
    };
    let ep = |tls, host: &str, target: &str| {
        Some(OriginEndpoint {
            tls,
            host: host.into(),
            target: target.into(),
        })
    };
    assert_eq!(at(""), None);
    assert_eq!(
        at("http://127.0.0.1:8080"),
        ep(false, "127.0.0.1", "127.0.0.1:8080")
    );
    assert_eq!(
        at("https://origin.example/app"),
        ep(true, "origin.example", "origin.example:443")
    );
    assert_eq!(
        at("http://origin.example"),
        ep(false, "origin.example", "origin.example:80")
    );
    assert_eq!(
        at("https://o.example:8443/x"),
        ep(true, "o.example", "o.example:8443")
    );
}

#[test]
fn envoy_ban_staleness_is_off_by_default_and_at_most_one_second() {
    let c = Config::from_toml("").expect("defaults");
    assert_eq!(c.envoy.ban_staleness.0, Duration::ZERO);
    assert!(Config::from_toml("[envoy]\nban_staleness = \"250ms\"\n").is_ok());
    let e = Config::from_toml("[envoy]\nban_staleness = \"2s\"\n").expect_err("over 1s");
    assert!(format!("{e}").contains("envoy.ban_staleness"), "{e}");
}

#[test]
fn a_json_value_that_does_not_fit_is_located_by_line_column_and_text_and_traced_by_path() {
    let text = "{\"origin\": {\"url\": \"http://o.example\"},\n \"routes\": [{\"name\": \"a\", \"ttl\": \"5 parsecs\"}]}";
    let e = Config::from_json(text).unwrap_err();
    let PolicyError::Parse { path, message } = &e else {
        panic!("{e}")
    };
    assert!(path.starts_with("line 2 column "), "{path}");
    assert!(path.contains("\"ttl\": \"5 parsecs\""), "{path}");
    assert!(message.contains("parsecs"), "{message}");
    let e = Config::from_json_traced(text).unwrap_err();
    assert!(
        matches!(&e, PolicyError::Parse { path, .. } if path == "routes[0].ttl"),
        "{e}"
    );
    // Syntax errors and multi-byte text near the column never panic.
    let e = Config::from_json("{\"origin\": é{").unwrap_err();
    assert!(e.to_string().contains("line 1 column"), "{e}");
    let e = Config::from_json("").unwrap_err();
    assert!(matches!(e, PolicyError::Parse { .. }), "{e}");
}

#[test]
fn reusable_sandbox_bounds_have_defaults_and_are_checked() {
    // Issue 29: `[edge].sandbox_*` and `config_check_interval` (Fastly only).
    let c = Config::from_toml("").unwrap();
    assert_eq!(c.edge.sandbox_max_requests, 1000);
    assert_eq!(c.edge.sandbox_max_lifetime.0, Duration::from_secs(60));
    assert_eq!(c.edge.sandbox_idle_timeout.0, Duration::from_secs(5));
    assert_eq!(c.edge.sandbox_max_memory_mib, 128);
    assert_eq!(c.edge.config_check_interval.0, Duration::from_secs(1));
    let bad = "[edge]\nsandbox_max_requests = 0\nsandbox_max_lifetime = \"0s\"\n\
               sandbox_idle_timeout = \"0s\"\nsandbox_max_memory_mib = 0\n\
               config_check_interval = \"0s\"\n";
    assert_eq!(
        paths(bad),
        [
            "edge.sandbox_max_requests",
            "edge.sandbox_max_lifetime",
            "edge.sandbox_idle_timeout",
            "edge.config_check_interval",
            "edge.sandbox_max_memory_mib",
        ]
    );
    assert!(
        issues("[edge]\nsandbox_max_requests = 1\n").is_empty(),
        "1: no reuse"
    );
}
