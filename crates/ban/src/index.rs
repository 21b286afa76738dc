//! Indexes over the ban list: exact values, anchored prefixes (radix tree), whitespace tokens (surrogate keys).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, DefaultHasher};

use crate::expr::{BanExpr, Field, obj_header, status_str};
use crate::matcher::Hint;
use crate::target::{BanRequest, BanTarget};

/// Deterministic hashing (SipHash with fixed keys): the crate reads no randomness. Keys
/// come from operators' ban expressions, so collision attacks need operator access.
type Map<V> = HashMap<Box<str>, V, BuildHasherDefault<DefaultHasher>>;

/// Ban sequence numbers, ascending, in one bucket.
type Bucket = Vec<u64>;

/// Where a ban can be found. Each ban is filed once, under its most selective condition
/// (its *anchor*); candidates found through an index are then verified in full.
#[derive(Debug, Default)]
pub(crate) struct Index {
    fields: Vec<FieldIndex>,
    /// Bans no index can answer, lurker-friendly ones and `req.*` ones apart.
    scan_obj: Vec<u64>,
    scan_req: Vec<u64>,
}

#[derive(Debug)]
struct FieldIndex {
    field: Field,
    exact: Map<Bucket>,
    tokens: Map<Bucket>,
    prefix: Radix,
}

/// The anchor of `expr`: the condition an index answers best. Priority: exact value or
/// token (a bucket usually holds one ban), then anchored prefix, then `obj.status`
/// equality (few distinct values, so big buckets).
fn anchor(expr: &BanExpr) -> Option<(&Field, Hint<'_>)> {
    let mut best: Option<(u8, &Field, Hint<'_>)> = None;
    for c in expr.conditions() {
        let hint = c.hint();
        let rank = match (&hint, c.field()) {
            (Hint::None, _) => continue,
            (_, Field::ObjStatus) => 1,
            (Hint::Prefix(_), _) => 2,
            (Hint::Exact(_) | Hint::Token(_), _) => 3,
        };
        if best.as_ref().is_none_or(|b| rank > b.0) {
            best = Some((rank, c.field(), hint));
        }
    }
    best.map(|(_, f, h)| (f, h))
}

impl Index {
    /// Files ban `seq` (sequence numbers must be inserted in ascending order).
    pub(crate) fn insert(&mut self, seq: u64, expr: &BanExpr) {
        let Some((field, hint)) = anchor(expr) else {
            if expr.is_lurker_friendly() {
                self.scan_obj.push(seq);
            } else {
                self.scan_req.push(seq);
            }
            return;
        };
        let i = if let Some(i) = self.fields.iter().position(|f| &f.field == field) {
            i
        } else {
            self.fields.push(FieldIndex {
                field: field.clone(),
                exact: Map::default(),
                tokens: Map::default(),
                prefix: Radix::default(),
            });
            self.fields.len() - 1
        };
        let fi = &mut self.fields[i];
        match hint {
            Hint::Exact(k) => fi.exact.entry(k.into()).or_default().push(seq),
            Hint::Token(k) => fi.tokens.entry(k.into()).or_default().push(seq),
            Hint::Prefix(k) => fi.prefix.insert(k.as_bytes(), seq),
            Hint::None => {}
        }
    }

    /// Calls `visit` with every filed ban `>= start` that might match `obj`/`req`
    /// (a superset of the matching ones), newest first within each bucket, until `visit`
    /// returns `true`; returns whether it did. With `req == None` the `req.*` indexes and
    /// the `req.*` scan list are skipped.
    pub(crate) fn candidates<T, R, F>(
        &self,
        obj: &T,
        req: Option<&R>,
        start: u64,
        mut visit: F,
    ) -> bool
    where
        T: BanTarget + ?Sized,
        R: BanRequest + ?Sized,
        F: FnMut(u64) -> bool,
    {
        let mut buf = [0u8; 5];
        for fi in &self.fields {
            let value = match &fi.field {
                Field::ReqUrl => req.map(BanRequest::url),
                Field::ReqHttp(n) => req.and_then(|r| r.header(n)),
                Field::ObjHttp(n) => obj_header(obj, n),
                Field::ObjStatus => Some(status_str(obj.status(), &mut buf)),
                _ => None,
            };
            let Some(v) = value else { continue };
            if let Some(b) = fi.exact.get(v)
                && scan_bucket(b, start, &mut visit)
            {
                return true;
            }
            if !fi.tokens.is_empty() {
                for t in v.split_whitespace() {
                    if let Some(b) = fi.tokens.get(t)
                        && scan_bucket(b, start, &mut visit)
                    {
                        return true;
                    }
                }
            }
            if fi
                .prefix
                .walk(v.as_bytes(), |b| scan_bucket(b, start, &mut visit))
            {
                return true;
            }
        }
        let lists: &[&Vec<u64>] = if req.is_some() {
            &[&self.scan_obj, &self.scan_req]
        } else {
            &[&self.scan_obj]
        };
        for list in lists {
            let from = list.partition_point(|&s| s < start);
            if list[from..].iter().any(|&s| visit(s)) {
                return true;
            }
        }
        false
    }

    /// Number of bans no index answers (tested on every lookup that reaches them).
    pub(crate) fn unindexed(&self) -> usize {
        self.scan_obj.len() + self.scan_req.len()
    }
}

fn scan_bucket<F: FnMut(u64) -> bool>(b: &[u64], start: u64, visit: &mut F) -> bool {
    for &s in b.iter().rev() {
        if s < start {
            break;
        }
        if visit(s) {
            return true;
        }
    }
    false
}

/// A byte radix tree (path-compressed trie) of prefixes; a lookup walks the text once and
/// meets every stored prefix of it, so its cost is bounded by the text's length, not by
/// the number of prefixes.
#[derive(Debug, Default)]
struct Radix {
    nodes: Vec<Node>,
}

#[derive(Debug, Default)]
struct Node {
    label: Box<[u8]>,
    /// Sorted by first byte of the child's label.
    children: Vec<(u8, u32)>,
    bans: Bucket,
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl Radix {
    fn insert(&mut self, key: &[u8], seq: u64) {
        if self.nodes.is_empty() {
            self.nodes.push(Node::default());
        }
        let mut n = 0usize;
        let mut rest = key;
        loop {
            let Some(&first) = rest.first() else {
                self.nodes[n].bans.push(seq);
                return;
            };
            let next = u32::try_from(self.nodes.len()).unwrap_or(u32::MAX);
            match self.nodes[n].children.binary_search_by_key(&first, |c| c.0) {
                Err(pos) => {
                    self.nodes[n].children.insert(pos, (first, next));
                    self.nodes.push(Node {
                        label: rest.into(),
                        children: Vec::new(),
                        bans: vec![seq],
                    });
                    return;
                }
                Ok(pos) => {
                    let c = self.nodes[n].children[pos].1 as usize;
                    let common = common_prefix(&self.nodes[c].label, rest);
                    if common < self.nodes[c].label.len() {
                        // Split c: a new middle node holds the shared part.
                        let label = std::mem::take(&mut self.nodes[c].label);
                        self.nodes[c].label = label[common..].into();
                        self.nodes.push(Node {
                            label: label[..common].into(),
                            children: vec![(label[common], self.nodes[n].children[pos].1)],
                            bans: Vec::new(),
                        });
                        self.nodes[n].children[pos].1 = next;
                        n = next as usize;
                    } else {
                        n = c;
                    }
                    rest = &rest[common..];
                }
            }
        }
    }

    /// Calls `visit` with the bucket of every stored prefix of `text`, shortest first,
    /// until it returns `true`.
    fn walk<F: FnMut(&[u64]) -> bool>(&self, text: &[u8], mut visit: F) -> bool {
        let Some(mut node) = self.nodes.first() else {
            return false;
        };
        let mut rest = text;
        loop {
            if !node.bans.is_empty() && visit(&node.bans) {
                return true;
            }
            let Some(&first) = rest.first() else {
                return false;
            };
            let Ok(pos) = node.children.binary_search_by_key(&first, |c| c.0) else {
                return false;
            };
            let child = &self.nodes[node.children[pos].1 as usize];
            if !rest.starts_with(&child.label) {
                return false;
            }
            rest = &rest[child.label.len()..];
            node = child;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn radix_finds_every_prefix() {
        let keys = [
            "/blog/",
            "/blog/alice/",
            "/blog/al",
            "/b",
            "/blog/bob/",
            "/x",
        ];
        let mut r = Radix::default();
        for (i, k) in keys.iter().enumerate() {
            r.insert(k.as_bytes(), i as u64);
        }
        for text in [
            "/blog/alice/1",
            "/blog/a",
            "/b",
            "/",
            "/blog/bob",
            "/xyz",
            "",
        ] {
            let mut got = Vec::new();
            r.walk(text.as_bytes(), |b| {
                got.extend_from_slice(b);
                false
            });
            got.sort_unstable();
            let want: Vec<u64> = (0..keys.len())
                .filter(|&i| text.starts_with(keys[i]))
                .map(|i| i as u64)
                .collect();
            assert_eq!(got, want, "{text}");
        }
    }
}
