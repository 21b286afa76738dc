//! Two cache tiers on Fastly with shielding: an edge POP's Cachet in front of the shield
//! POP's Cachet in front of the origin, each a Viceroy; the edge app knows which it is.

use std::time::Duration;

use cachet_e2e::{ADMIN_TOKEN, Edge, OriginConfig, Reply, agent, send, ua};

/// Longest wait for an access-log line (Viceroy writes it after the response is sent).
const LOG_WAIT: Duration = Duration::from_secs(30);

const SHIELD_CONFIG: &str = "[edge]\nshield = \"test-shield\"\nshield_encrypted = false\n";

fn get(edge: &Edge, path: &str) -> Reply {
    send(
        &agent(),
        edge.addr(),
        "GET",
        "blog.example",
        path,
        &[("user-agent", ua::IPHONE), ("accept-encoding", "gzip")],
        Vec::new(),
    )
    .unwrap()
}

/// The built-in configuration with `[edge]` replaced by the shielding settings.
fn config() -> String {
    let builtin =
        std::fs::read_to_string(cachet_e2e::workspace_root().join("edge-app/cachet.toml")).unwrap();
    let start = builtin.find("[edge]").unwrap();
    let end = start + builtin[start..].find("\n\n").unwrap();
    format!("{}{SHIELD_CONFIG}{}", &builtin[..start], &builtin[end..])
}

#[test]
fn the_edge_tier_fetches_through_the_shield_and_keeps_its_surrogate_keys() {
    let mut origin_cfg = OriginConfig::ephemeral();
    origin_cfg.listen = "127.0.0.1:0".parse().unwrap();
    let origin = cachet_demo_origin::spawn(origin_cfg).unwrap();
    let cfg = config();
    let shield = Edge::start_with_manifest(
        origin.addr(),
        Some(&cfg),
        "\n[local_server.shielding_sites]\n\"test-shield\" = \"Local\"\n",
    );
    let edge = Edge::start_with_manifest(
        origin.addr(),
        Some(&cfg),
        &format!(
            "\n[local_server.shielding_sites.\"test-shield\"]\n\
             unencrypted = \"http://{0}\"\nencrypted = \"https://{0}\"\n",
            shield.addr()
        ),
    );
    origin.reset_stats();
    let page = "/blog/alice/entry/1";
    let first = get(&edge, page);
    assert_eq!(
        (first.status, first.x_cache()),
        (200, "MISS"),
        "{}",
        edge.output()
    );
    assert_eq!(
        first.header("surrogate-key"),
        None,
        "clients never see surrogate keys"
    );
    assert_eq!(get(&edge, page).x_cache(), "HIT");
    assert_eq!(origin.stats().count(page), 1);
    // Each instance knows its tier; the shield stored the object too.
    let tier_of = |e: &Edge| {
        e.wait_for_log(LOG_WAIT, |l| l["url"] == page)
            .map(|l| l["tier"].clone())
    };
    assert_eq!(tier_of(&edge), Some("edge".into()));
    assert_eq!(tier_of(&shield), Some("shield".into()));
    assert_eq!(get(&shield, page).x_cache(), "HIT");
    // The edge tier stored the object under the origin's surrogate keys: purging one there
    // drops the edge copy, and the refetch is served by the shield tier, not the origin.
    let purge = send(
        &agent(),
        edge.addr(),
        "POST",
        "blog.example",
        "/.cachet/purge",
        &[
            ("authorization", &format!("Bearer {ADMIN_TOKEN}")),
            ("surrogate-key", "entry-alice-1"),
        ],
        Vec::new(),
    )
    .unwrap();
    assert_eq!(purge.status, 200);
    assert_eq!(get(&edge, page).x_cache(), "MISS");
    assert_eq!(origin.stats().count(page), 1, "the shield tier answered");
    let shield_hits = shield
        .wait_for_logs(LOG_WAIT, 2, |l| l["url"] == page && l["cache"] == "HIT")
        .map_or(0, |hits| hits.len());
    assert_eq!(shield_hits, 2);
}
