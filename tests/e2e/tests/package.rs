//! The Fastly package: `fastly compute pack` (npm @fastly/cli) on the release wasm gives a tarball holding exactly that wasm and our manifest, and `fastly compute validate` accepts it.
//!
//! Needs the Fastly CLI: `scripts/test` installs it (`ensure_fastly_cli`) and sets
//! `CACHET_FASTLY_CLI`. Without it the test says so and checks nothing.

use std::io::Read;
use std::path::PathBuf;
use std::process::Command;

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
