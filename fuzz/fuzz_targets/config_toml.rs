//! `Config::from_toml` on arbitrary text (the edge app's TOML file). An accepted
//! configuration compiles into a `Policy` (validation catches everything compilation
//! would reject), and its JSON serialization is accepted again and equal.
#![no_main]

use cachet_fuzz::text;
use cachet_policy::{Config, Policy};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let src = text(data);
    let Ok(config) = Config::from_toml(&src) else {
        return;
    };
    let json = serde_json::to_string(&config).expect("a config serializes");
    let back = Config::from_json(&json)
        .unwrap_or_else(|e| panic!("serialized config {json} rejected: {e}"));
    assert_eq!(back, config, "{json}");
    if let Err(e) = Policy::new(config) {
        panic!("validated config rejected by Policy::new: {e} ({json})");
    }
});
