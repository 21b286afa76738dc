//! The crate's one error type, [`RefreshError`], with config-path-style messages.

/// Everything that can go wrong in `cachet-refresh`: invalid configuration values, an
/// invalid random draw, or a stored validator that cannot be sent back in a header.
///
/// Configuration errors carry a dotted path (`fraction`, `collapse.lease_ms`); callers that
/// embed these settings in a larger document prefix it with [`RefreshError::within`], e.g.
/// `routes[2].refresh.fraction: must be in (0, 1], got 1.5`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RefreshError {
    /// A configuration parameter is out of range (e.g. a threshold fraction outside
    /// (0, 1], a non-finite or non-positive XFetch beta, a zero lease).
    #[error("{path}: {reason}")]
    InvalidParameter {
        /// Dotted path of the offending field, e.g. `early_refresh.beta`.
        path: String,
        /// What is wrong and the value found.
        reason: String,
    },
    /// A random draw that is not a finite number in (0, 1] (see [`crate::Draw::new`]).
    #[error("random draw must be a finite number in (0, 1], got {0}")]
    InvalidDraw(f64),
    /// A stored validator (`ETag` or `Last-Modified` value) cannot be used in a conditional
    /// request header (RFC 9110 §8.8: entity-tag syntax; visible ASCII; length limit).
    #[error("{field}: {reason}")]
    InvalidValidator {
        /// `etag` or `last_modified`.
        field: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
}

impl RefreshError {
    /// Prefixes the path of an [`RefreshError::InvalidParameter`] with `prefix` and a dot
    /// (`"routes[2].refresh"` + `"fraction"` → `"routes[2].refresh.fraction"`); other
    /// variants are returned unchanged.
    #[must_use]
    pub fn within(self, prefix: &str) -> Self {
        match self {
            RefreshError::InvalidParameter { path, reason } if !prefix.is_empty() => {
                RefreshError::InvalidParameter {
                    path: format!("{prefix}.{path}"),
                    reason,
                }
            }
            other => other,
        }
    }

    /// The dotted config path for [`RefreshError::InvalidParameter`], else `None`.
    pub fn path(&self) -> Option<&str> {
        match self {
            RefreshError::InvalidParameter { path, .. } => Some(path),
            _ => None,
        }
    }

    pub(crate) fn param(path: &str, reason: String) -> Self {
        RefreshError::InvalidParameter {
            path: path.to_owned(),
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_prefixes_paths_only() {
        let e = RefreshError::param("fraction", "bad".into()).within("routes[2].refresh");
        assert_eq!(e.path(), Some("routes[2].refresh.fraction"));
        assert_eq!(e.to_string(), "routes[2].refresh.fraction: bad");
        assert_eq!(
            RefreshError::InvalidDraw(2.0).within("x"),
            RefreshError::InvalidDraw(2.0)
        );
        assert_eq!(RefreshError::InvalidDraw(2.0).path(), None);
    }
}
