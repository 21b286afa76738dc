//! Chooses the configuration built into the wasm: `CACHET_EDGE_CONFIG` (a TOML file's
//! path) when set, else `cachet.toml` beside this file. It is copied to
//! `$OUT_DIR/builtin.toml` for `include_str!`; the pre-initialized wasm (Wizer,
//! `scripts/lib.sh` `build_edge`) carries its policy already built, so an operator who
//! bakes their configuration in this way pays no policy build in any instance
//! (docs/edge.md, "Reusable sandboxes").

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=CACHET_EDGE_CONFIG");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let source = std::env::var_os("CACHET_EDGE_CONFIG")
        .filter(|p| !p.is_empty())
        .map_or_else(|| dir.join("cachet.toml"), PathBuf::from);
    println!("cargo:rerun-if-changed={}", source.display());
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default()).join("builtin.toml");
    if let Err(e) = std::fs::copy(&source, &out) {
        eprintln!("CACHET_EDGE_CONFIG: cannot read {}: {e}", source.display());
        std::process::exit(1);
    }
}
