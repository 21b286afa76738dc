//! The `url`-crate peer both speed measurements compare against (`benches/normalize.rs`, `examples/ratio.rs`), written once.

use cachet_query::DEFAULT_REMOVE;

/// The peer: decode with `url::form_urlencoded::parse`, drop the same names and globs,
/// stable-sort by name, re-encode with `form_urlencoded::Serializer`. (It decodes and
/// re-encodes, so its output differs from ours in escaping; the work is comparable.)
///
/// The remove list is split once into `prefix*` patterns and exact names, as a normalizer
/// configured at run time would do (the earlier peer re-split every pattern for every
/// name, ≈ 5–7% of its time); a `match` on literal names would be faster still, but it
/// hard-codes the configuration, which ours takes at run time.
pub struct UrlPeer {
    /// Prefixes of the `prefix*` patterns.
    prefixes: Vec<&'static str>,
    /// The exact names.
    exact: Vec<&'static str>,
}

impl Default for UrlPeer {
    /// The peer configured with `DEFAULT_REMOVE`.
    fn default() -> Self {
        let (mut prefixes, mut exact) = (Vec::new(), Vec::new());
        for p in DEFAULT_REMOVE {
            match p.strip_suffix('*') {
                Some(prefix) => prefixes.push(prefix),
                None => exact.push(*p),
            }
        }
        Self { prefixes, exact }
    }
}

impl UrlPeer {
    /// Whether `name` is dropped.
    pub fn removed(&self, name: &str) -> bool {
        self.prefixes.iter().any(|p| name.starts_with(p)) || self.exact.contains(&name)
    }

    /// The peer's normalized query.
    pub fn normalize(&self, query: &str) -> String {
        let mut pairs: Vec<_> = url::form_urlencoded::parse(query.as_bytes())
            .filter(|(name, _)| !self.removed(name))
            .collect();
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        url::form_urlencoded::Serializer::new(String::with_capacity(query.len()))
            .extend_pairs(pairs)
            .finish()
    }
}
