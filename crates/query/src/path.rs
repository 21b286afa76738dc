//! Path normalization for the cache key, the ban target and the origin request
//! (RFC 3986 §6.2.2, syntax-based normalization).
//!
//! `/blog/%61lice/entry/2`, `/blog/alice/./entry/2` and `/blog/x/../alice/entry/2` name the
//! same resource as `/blog/alice/entry/2`; a cache keyed on the raw path stores them as
//! separate objects, and a ban on `obj.http.x-url ~ ^/blog/alice/` misses the aliases. The
//! path is normalized in the order §6.2.2 gives:
//!
//! 1. percent-encoding normalization (§6.2.2.2): a triplet that encodes an unreserved
//!    character (`A–Z a–z 0–9 - . _ ~`, §2.3) is decoded; the hex digits of every other
//!    triplet are upper-cased (§2.1). Reserved characters stay encoded (`%2F` is not `/`);
//! 2. dot-segment removal (§6.2.2.3 with the algorithm of §5.2.4): `.` and `..`
//!    segments, including those that were percent-encoded, are resolved; `..` never climbs
//!    above the root.
//!
//! Both steps preserve the resource a path identifies (RFC 3986 calls them equivalent), so
//! the origin receives the normalized path too. A `%` that does not start a valid triplet
//! is encoded as `%25` (what browsers send for it; the path decodes to the same bytes), so
//! normalizing is idempotent. Case is not folded (paths are case-sensitive), and `//` is kept (empty
//! segments are significant to many origins).

use std::borrow::Cow;

/// Whether a byte is unreserved (RFC 3986 §2.3).
const fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Whether `path` may need work: a `%`, or a `.` segment.
fn may_change(path: &str) -> bool {
    let b = path.as_bytes();
    b.contains(&b'%')
        || b.split(|&c| c == b'/')
            .any(|seg| seg == b"." || seg == b"..")
}

/// Normalizes an absolute path (it starts with `/`; anything else is returned as it is).
/// Borrowed, without allocating, when the path is already normal (the common case).
///
/// ```
/// use cachet_query::normalize_path;
/// assert_eq!(normalize_path("/blog/%61lice/./x/../entry/%2f2"), "/blog/alice/entry/%2F2");
/// assert_eq!(normalize_path("/blog/alice/entry/2"), "/blog/alice/entry/2");
/// ```
pub fn normalize_path(path: &str) -> Cow<'_, str> {
    if !path.starts_with('/') || !may_change(path) {
        return Cow::Borrowed(path);
    }
    let decoded = decode_unreserved(path);
    let out = remove_dot_segments(&decoded);
    if out == path {
        Cow::Borrowed(path)
    } else {
        Cow::Owned(out)
    }
}

/// Step 1: decodes triplets of unreserved characters, upper-cases the hex of the rest.
fn decode_unreserved(path: &str) -> String {
    let b = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let (Some(h), Some(l)) = (
                b.get(i + 1).copied().and_then(hex),
                b.get(i + 2).copied().and_then(hex),
            )
        {
            let v = h * 16 + l;
            if unreserved(v) {
                out.push(char::from(v));
            } else {
                out.push('%');
                out.push(char::from(b[i + 1].to_ascii_uppercase()));
                out.push(char::from(b[i + 2].to_ascii_uppercase()));
            }
            i += 3;
            continue;
        }
        if b[i] == b'%' {
            // A `%` that starts no valid triplet is encoded (`%25`), as browsers do: left
            // bare, it could meet a decoded character and form a new triplet, and
            // normalizing twice would differ (found by the `target_normalize` fuzz target).
            out.push_str("%25");
            i += 1;
            continue;
        }
        // Copy up to the next `%` (a whole UTF-8 run: `%` is ASCII, so this never splits a
        // character).
        let end = b[i..]
            .iter()
            .position(|&c| c == b'%')
            .map_or(b.len(), |p| i + p);
        out.push_str(&path[i..end]);
        i = end;
    }
    out
}

/// Step 2: RFC 3986 §5.2.4 on an absolute path, segment by segment.
fn remove_dot_segments(path: &str) -> String {
    let mut segs: Vec<&str> = Vec::new();
    let mut parts = path.split('/').skip(1).peekable();
    // A trailing `.` or `..` leaves a directory (the path ends with `/`).
    let mut trailing_slash = false;
    while let Some(seg) = parts.next() {
        let last = parts.peek().is_none();
        match seg {
            "." => trailing_slash = last,
            ".." => {
                segs.pop();
                trailing_slash = last;
            }
            s => {
                segs.push(s);
                trailing_slash = false;
            }
        }
    }
    let mut out = String::with_capacity(path.len());
    for s in &segs {
        out.push('/');
        out.push_str(s);
    }
    if trailing_slash || out.is_empty() {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_of_one_resource_normalize_to_one_path() {
        for alias in [
            "/blog/alice/entry/2",
            "/blog/%61lice/entry/2",
            "/blog/%61%6C%69%63%65/entry/2",
            "/blog/./alice/entry/2",
            "/blog/x/../alice/entry/2",
            "/blog/alice/entry/%2E/2",
            "/blog/bob/%2E%2E/alice/entry/2",
        ] {
            assert_eq!(normalize_path(alias), "/blog/alice/entry/2", "{alias}");
        }
    }

    #[test]
    fn reserved_escapes_stay_encoded_with_upper_case_hex() {
        assert_eq!(normalize_path("/a%2fb%3a%20c"), "/a%2Fb%3A%20c");
        assert_eq!(normalize_path("/caf%c3%a9"), "/caf%C3%A9");
        assert_eq!(normalize_path("/100%"), "/100%25", "a lone % is encoded");
        assert_eq!(normalize_path("/a%zz/%4"), "/a%25zz/%254");
        // Found by fuzzing: a bare `%` before a decoded digit must not form a new triplet.
        let once = normalize_path("/%%34blog");
        assert_eq!(once, "/%254blog");
        assert_eq!(normalize_path(&once), once);
    }

    #[test]
    fn dot_segments_never_climb_above_the_root_and_keep_directories() {
        assert_eq!(normalize_path("/../../etc/passwd"), "/etc/passwd");
        assert_eq!(normalize_path("/a/b/.."), "/a/");
        assert_eq!(normalize_path("/a/."), "/a/");
        assert_eq!(normalize_path("/.."), "/");
        assert_eq!(
            normalize_path("/a/..b/.c"),
            "/a/..b/.c",
            "only whole segments"
        );
        assert_eq!(
            normalize_path("//a//b/"),
            "//a//b/",
            "empty segments are kept"
        );
    }

    #[test]
    fn a_normal_path_is_borrowed() {
        assert!(matches!(
            normalize_path("/blog/alice/entry/2"),
            Cow::Borrowed(_)
        ));
        assert!(matches!(normalize_path("/a%2Fb"), Cow::Borrowed(_)));
        assert!(matches!(normalize_path("*"), Cow::Borrowed(_)));
    }
}
