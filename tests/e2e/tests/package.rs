//! The Fastly package: `fastly compute pack` (npm @fastly/cli) on the release wasm gives a tarball holding exactly that wasm and our manifest, and `fastly compute validate` accepts it; the manifest's `[setup]` creates what the code uses.
//!
//! The pack test needs the Fastly CLI: `scripts/test` installs it (`ensure_fastly_cli`)
//! and sets `CACHET_FASTLY_CLI`. Without it the test says so and checks nothing (under CI
//! it fails).

use std::io::Read;
use std::path::PathBuf;
use std::process::Command;

/// The fields the Fastly CLI reads in each `[setup]` table (its `manifest.Setup`): the
/// CLI ignores any other key without a word, so a misspelt table would create nothing.
const SETUP_FIELDS: &[(&str, &[&str])] = &[
    ("backends", &["address", "port", "description"]),
    ("config_stores", &["items", "description"]),
    ("log_endpoints", &["provider"]),
    ("kv_stores", &["items", "description"]),
    ("secret_stores", &["entries", "description"]),
];

/// Checks a manifest's `[setup]` against the names the edge app uses (the built-in
/// configuration's backend, log endpoint, ban store and admin secret; the config store
/// `cachet_compute::CONFIG_STORE`) and the CLI's schema.
fn check_setup(manifest: &str) {
    let root = cachet_e2e::workspace_root();
    let builtin = std::fs::read_to_string(root.join("edge-app/cachet.toml")).unwrap();
    let cfg = cachet_policy::Config::from_toml(&builtin).unwrap();
    let doc: toml::Table = toml::from_str(manifest).unwrap();
    let setup = doc
        .get("setup")
        .and_then(toml::Value::as_table)
        .expect("fastly.toml has no [setup]: a first `fastly compute publish` creates nothing");
    for (kind, tables) in setup {
        let fields = SETUP_FIELDS
            .iter()
            .find(|(k, _)| k == kind)
            .unwrap_or_else(|| panic!("[setup.{kind}] is not a table the Fastly CLI reads"))
            .1;
        for (name, table) in tables.as_table().expect("[setup.<kind>] is a table") {
            for key in table
                .as_table()
                .expect("[setup.<kind>.<name>] is a table")
                .keys()
            {
                assert!(
                    fields.contains(&key.as_str()),
                    "[setup.{kind}.{name}].{key}: the Fastly CLI reads only {fields:?}"
                );
            }
        }
    }
    let names = |kind: &str| -> Vec<String> {
        setup
            .get(kind)
            .and_then(toml::Value::as_table)
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default()
    };
    assert_eq!(names("backends"), [cfg.edge.backend.as_str()]);
    assert_eq!(names("log_endpoints"), [cfg.edge.log_endpoint.as_str()]);
    assert_eq!(names("config_stores"), [cachet_compute::CONFIG_STORE]);
    assert_eq!(names("kv_stores"), [cfg.bans.kv_store.as_str()]);
    assert_eq!(names("secret_stores"), [cfg.admin.secret_store.as_str()]);
    let entries = setup["secret_stores"][&cfg.admin.secret_store]
        .get("entries")
        .and_then(toml::Value::as_table)
        .map(|t| t.keys().cloned().collect::<Vec<_>>())
        .unwrap_or_default();
    assert_eq!(entries, [cfg.admin.token_secret.as_str()]);
}

#[test]
fn the_setup_section_creates_every_resource_the_edge_app_uses() {
    let root = cachet_e2e::workspace_root();
    check_setup(&std::fs::read_to_string(root.join("fastly.toml")).unwrap());
}

#[test]
fn compute_pack_contains_the_wasm_and_the_manifest() {
    let Some(cli) = std::env::var_os("CACHET_FASTLY_CLI").map(PathBuf::from) else {
        // Under CI a missing Fastly CLI is a failure, never a silent skip.
        assert!(
            std::env::var_os("CI").is_none(),
            "CACHET_FASTLY_CLI is unset under CI: scripts/test sets it"
        );
        eprintln!("SKIPPED: CACHET_FASTLY_CLI is not set (scripts/test sets it)");
        return;
    };
    let wasm = cachet_e2e::edge_wasm();
    let root = cachet_e2e::workspace_root();
    let dir = tempfile::tempdir().unwrap();
    let manifest = std::fs::read_to_string(root.join("fastly.toml")).unwrap();
    std::fs::write(dir.path().join("fastly.toml"), &manifest).unwrap();
    let out = Command::new(&cli)
        .current_dir(dir.path())
        .args(["compute", "pack", "--non-interactive", "--wasm-binary"])
        .arg(&wasm)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pkg = dir.path().join("pkg/cachet-edge.tar.gz");
    let gz = std::fs::File::open(&pkg).unwrap();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(gz));
    let mut found = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().to_string_lossy().into_owned();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).unwrap();
        match path.as_str() {
            "cachet-edge/bin/main.wasm" => {
                assert_eq!(
                    bytes,
                    std::fs::read(&wasm).unwrap(),
                    "the packed wasm is ours"
                );
                assert_eq!(&bytes[..4], b"\0asm");
                // Issue 29: the shipped wasm is pre-initialized (Wizer removes the
                // initialization export once it has run it into the memory image).
                assert!(
                    !bytes
                        .windows(b"wizer.initialize".len())
                        .any(|w| w == b"wizer.initialize"),
                    "the packed wasm is not pre-initialized (scripts/lib.sh build_edge)"
                );
            }
            "cachet-edge/fastly.toml" => {
                let text = String::from_utf8(bytes).unwrap();
                assert!(text.contains("name = \"cachet-edge\""), "{text}");
                assert!(text.contains("language = \"other\""), "{text}");
                // The CLI decoded [setup] (a wrong type fails `compute pack`) and packed it.
                check_setup(&text);
            }
            _ => {}
        }
        found.push(path);
    }
    for want in ["cachet-edge/bin/main.wasm", "cachet-edge/fastly.toml"] {
        assert!(
            found.iter().any(|p| p == want),
            "{want} missing from {found:?}"
        );
    }
    let validate = Command::new(&cli)
        .current_dir(dir.path())
        .args(["compute", "validate", "--non-interactive", "--package"])
        .arg(&pkg)
        .output()
        .unwrap();
    assert!(
        validate.status.success(),
        "{}",
        String::from_utf8_lossy(&validate.stderr)
    );
}
