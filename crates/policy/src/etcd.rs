//! The fleet's ban log in etcd: request bodies for etcd's v3 JSON gateway and the reading of its answers.
//!
//! A fleet of Envoys (docs/fleet.md) keeps one ban log in etcd. Every ban, hard purge and
//! soft purge accepted by **any** node's admin API is one etcd key, written by a
//! transaction that only creates it (`create_revision == 0`), and answered `201`/`200`
//! only after etcd accepted it. Every node polls the keys modified after the last etcd
//! revision it applied and appends the new entries to its own shared-data log
//! (`cachet_store::bans`), which every worker replays into both tiers. The etcd revision is the
//! entry's fleet-wide id (`BanLog::feed_through` records the last one applied).
//!
//! Keys under the configured prefix `P` (`[envoy].etcd_prefix`, default `/cachet/bans/`):
//!
//! | key | value |
//! |---|---|
//! | `P e/<at_ms, 16 digits>/<16 hex digits>` | one entry: a `LogEntry` as JSON, its `id` 0 (the id is the key's `create_revision`) |
//! | `P floor` | the fleet's floor, ms since the epoch, 16 digits |
//!
//! Entry keys sort by time, so retiring every entry older than the retention is one
//! `DeleteRange`, in the same transaction that raises the floor. A node that missed the
//! retired entries (it was down or partitioned longer than the retention) sees the floor
//! move and counts every object it stored before the floor as banned, as a single node
//! does after retiring entries (`BanLog::retire`). Polls read the current revision
//! (a range with `min_mod_revision`), never an old one, so etcd's compaction cannot fail
//! them: a node that fell behind a compaction just reads what is live.
//!
//! Pure: bodies in, bodies out; the adapter sends them (`dispatch_http_call` in Envoy, an
//! HTTP client in the CLI) and passes the clock and a random suffix. The gateway's JSON
//! carries keys and values as base64 and 64-bit integers as strings (etcd 3.4,
//! `api/etcdserverpb/rpc.proto`; gateway paths `/v3/kv/range`, `/v3/kv/txn`).

use crate::banlog::{LogEntry, NewEntry};
use crate::settings::MAX_ETCD_PREFIX_BYTES;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::Value;

/// Gateway path of a range request (a poll).
pub const RANGE_PATH: &str = "/v3/kv/range";

/// Gateway path of a transaction (a write, a retirement).
pub const TXN_PATH: &str = "/v3/kv/txn";

/// Default key prefix (`[envoy].etcd_prefix`).
pub const DEFAULT_PREFIX: &str = "/cachet/bans/";

/// Most operations etcd accepts in one transaction's `compare`, `success` or `failure`
/// list: the server's `--max-txn-ops`, 128 unless the fleet's etcd was started with
/// another value. [`put_entries`] uses one compare and one put per entry, so a
/// transaction holds at most this many entries ([`batches`]).
pub const MAX_TXN_OPS: usize = 128;

/// Most entries one poll answer may bring (etcd's `limit`); the rest come with the next
/// poll, which starts after the last revision applied.
pub const POLL_LIMIT: u64 = 1000;

/// Why an etcd answer is not what was asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EtcdError {
    /// No answer (connection refused, timeout, no cluster), or a status other than 200.
    #[error("etcd unavailable: {0}")]
    Unavailable(String),
    /// The answer is not the gateway's JSON (its reason).
    #[error("etcd answer unreadable: {0}")]
    Unreadable(String),
    /// The transaction's compare failed: a key to create existed already (a random
    /// suffix collided; retry with another).
    #[error("etcd transaction refused: a key to create exists")]
    Conflict,
}

/// The end of the range of keys starting with `prefix` (etcd's "prefix end": the last
/// byte incremented; `\0` = every key, for a prefix of only `0xff` bytes).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

/// The key of an entry added at `at_ms` with the random `suffix`.
pub fn entry_key(prefix: &str, at_ms: u64, suffix: u64) -> String {
    format!("{prefix}e/{at_ms:016}/{suffix:016x}")
}

/// Checks a key prefix as `[envoy].etcd_prefix` requires it: it starts and ends with `/`
/// and is at most [`MAX_ETCD_PREFIX_BYTES`] bytes.
///
/// # Errors
/// What is wrong with it, in words (the caller names the setting or flag).
pub fn check_prefix(prefix: &str) -> Result<(), String> {
    if prefix.is_empty() {
        return Err("is empty; it must start and end with '/' (default /cachet/bans/)".into());
    }
    if !prefix.starts_with('/') {
        return Err("must start with '/'".into());
    }
    if !prefix.ends_with('/') {
        return Err("must end with '/'".into());
    }
    if prefix.len() > MAX_ETCD_PREFIX_BYTES {
        return Err(format!(
            "is {} bytes; at most {MAX_ETCD_PREFIX_BYTES}",
            prefix.len()
        ));
    }
    Ok(())
}

/// The key of the floor.
pub fn floor_key(prefix: &str) -> String {
    format!("{prefix}floor")
}

// The bodies are written with `format!`: every string in them is base64 (`A-Z a-z 0-9 + /
// =`) or a fixed word, so nothing needs JSON escaping, and the filter's wasm stays small
// (building `serde_json::Value`s cost 20 KB there).

/// `{"key": …, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}`: the key
/// (base64) does not exist.
fn absent(key_b64: &str) -> String {
    format!(r#"{{"key":"{key_b64}","target":"CREATE","result":"EQUAL","create_revision":"0"}}"#)
}

/// `{"request_put": {"key": …, "value": …}}` (both base64).
fn put(key_b64: &str, value_b64: &str) -> String {
    format!(r#"{{"request_put":{{"key":"{key_b64}","value":"{value_b64}"}}}}"#)
}

/// The transaction body that creates one key per entry (all or none: each compare asks
/// the key not to exist), the entries added at `at_ms`; `suffix` makes the keys unique
/// (a random draw of the caller's; entry `i` uses `suffix + i`).
pub fn put_entries(prefix: &str, entries: &[NewEntry], at_ms: u64, suffix: u64) -> Vec<u8> {
    let mut compare = Vec::with_capacity(entries.len());
    let mut success = Vec::with_capacity(entries.len());
    for (i, n) in entries.iter().enumerate() {
        let key = b64(entry_key(prefix, at_ms, suffix.wrapping_add(i as u64)).as_bytes());
        let value = LogEntry {
            id: 0,
            kind: n.kind,
            expr: n.expr.clone(),
            key: n.key.clone(),
            lurker_friendly: n.lurker_friendly,
            at_ms,
        };
        let value = serde_json::to_vec(&value).unwrap_or_default();
        compare.push(absent(&key));
        success.push(put(&key, &b64(&value)));
    }
    format!(
        r#"{{"compare":[{}],"success":[{}]}}"#,
        compare.join(","),
        success.join(",")
    )
    .into_bytes()
}

/// The transactions that write `entries` within etcd's limit of `max_ops` operations per
/// list (at least 1; [`MAX_TXN_OPS`] by default): consecutive runs of at most `max_ops`
/// entries, each with its [`put_entries`] body. Entry `i` of the whole list gets the key
/// suffix `suffix + i` whatever its batch, so the keys are the ones a single transaction
/// would create, distinct across batches, and resending a batch's body creates nothing
/// twice (its compares fail once it committed; [`created`] then finds its revision).
pub fn batches(
    prefix: &str,
    entries: &[NewEntry],
    at_ms: u64,
    suffix: u64,
    max_ops: usize,
) -> Vec<(std::ops::Range<usize>, Vec<u8>)> {
    let size = max_ops.max(1);
    (0..entries.len())
        .step_by(size)
        .map(|start| {
            let end = (start + size).min(entries.len());
            let first = suffix.wrapping_add(start as u64);
            let body = put_entries(prefix, &entries[start..end], at_ms, first);
            (start..end, body)
        })
        .collect()
}

/// The range body that reads the one key `key`, keys only: whether the transaction that
/// creates it committed ([`created_answer`]).
pub fn created(key: &str) -> Vec<u8> {
    format!(r#"{{"key":"{}","keys_only":true}}"#, b64(key.as_bytes())).into_bytes()
}

/// Reads a [`created`] answer: the key's `create_revision` (the revision of the
/// transaction that created it, the id of its entries), `None` when the key is absent.
///
/// # Errors
/// As [`poll_answer`].
pub fn created_answer(status: u16, body: &[u8]) -> Result<Option<u64>, EtcdError> {
    let a = answer(status, body)?;
    match kvs(&a).first() {
        None => Ok(None),
        Some(kv) => int(kv.get("create_revision")).map(Some),
    }
}

/// A range body over `[start, end)`.
fn range(start: &[u8], end: &[u8], order: &str, target: &str, limit: u64, extra: &str) -> Vec<u8> {
    format!(
        r#"{{"key":"{}","range_end":"{}","sort_order":"{order}","sort_target":"{target}","limit":"{limit}"{extra}}}"#,
        b64(start),
        b64(end)
    )
    .into_bytes()
}

/// The range body of a poll: every key under `prefix` modified after revision `after`
/// (all of them for `after == 0`), oldest first, at most [`POLL_LIMIT`].
pub fn poll(prefix: &str, after: u64) -> Vec<u8> {
    let extra = if after > 0 {
        format!(r#","min_mod_revision":"{}""#, after.saturating_add(1))
    } else {
        String::new()
    };
    let p = prefix.as_bytes();
    range(p, &prefix_end(p), "ASCEND", "MOD", POLL_LIMIT, &extra)
}

/// The range body that finds the newest entry added at or before `cutoff_ms` (the
/// retention's cutoff): the entry whose time becomes the floor when the fleet retires
/// ([`retirable_answer`], then [`retire`]), as `BanLog::retire` chooses it.
pub fn retirable(prefix: &str, cutoff_ms: u64) -> Vec<u8> {
    let start = format!("{prefix}e/");
    let end = format!("{prefix}e/{:016}", cutoff_ms.saturating_add(1));
    let keys_only = r#","keys_only":true"#;
    range(
        start.as_bytes(),
        end.as_bytes(),
        "DESCEND",
        "KEY",
        1,
        keys_only,
    )
}

/// The transaction body that retires every entry added at or before `cutoff_ms` (the
/// newest retirable entry's time, [`retirable_answer`]) and raises the floor to it: when
/// the floor key is absent it is created; otherwise only when it is below `cutoff_ms`
/// (a nested transaction), so concurrent retirements by several nodes never lower it.
pub fn retire(prefix: &str, cutoff_ms: u64) -> Vec<u8> {
    let floor = b64(floor_key(prefix).as_bytes());
    let value = b64(format!("{cutoff_ms:016}").as_bytes());
    let start = b64(format!("{prefix}e/").as_bytes());
    let end = b64(format!("{prefix}e/{:016}", cutoff_ms.saturating_add(1)).as_bytes());
    let ops = format!(
        r#"[{{"request_delete_range":{{"key":"{start}","range_end":"{end}"}}}},{}]"#,
        put(&floor, &value)
    );
    let below =
        format!(r#"{{"key":"{floor}","target":"VALUE","result":"LESS","value":"{value}"}}"#);
    format!(
        r#"{{"compare":[{}],"success":{ops},"failure":[{{"request_txn":{{"compare":[{below}],"success":{ops}}}}}]}}"#,
        absent(&floor)
    )
    .into_bytes()
}

/// A 64-bit integer the gateway writes as a decimal string (proto3's JSON mapping); absent
/// = 0 (proto3 omits zero values).
fn int(v: Option<&Value>) -> Result<u64, EtcdError> {
    match v.and_then(Value::as_str) {
        None => Ok(0),
        Some(s) => s
            .parse()
            .map_err(|_| EtcdError::Unreadable(format!("not an integer: {s:?}"))),
    }
}

/// The answer's `header.revision`.
fn revision(v: &Value) -> Result<u64, EtcdError> {
    int(v.get("header").and_then(|h| h.get("revision")))
}

/// A boolean field (absent = false, as proto3 omits it).
fn flag(v: &Value, name: &str) -> bool {
    v.get(name).and_then(Value::as_bool) == Some(true)
}

/// The answer's `kvs` (absent = none).
fn kvs(v: &Value) -> &[Value] {
    v.get("kvs")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// A base64 field of a key-value (absent or not base64 = empty).
fn bytes(kv: &Value, name: &str) -> Vec<u8> {
    kv.get(name)
        .and_then(Value::as_str)
        .and_then(|t| B64.decode(t).ok())
        .unwrap_or_default()
}

/// Reads a gateway answer (status 200 only); the gateway's own error body
/// (`{"error": …, "message": …}`) becomes [`EtcdError::Unavailable`] with its message.
/// Parsed as a `serde_json::Value`: the filter already holds that code, typed structs
/// would add 13 KB to its wasm.
fn answer(status: u16, body: &[u8]) -> Result<Value, EtcdError> {
    let v = serde_json::from_slice::<Value>(body);
    if status != 200 {
        let why = v
            .ok()
            .and_then(|v| {
                let m = v.get("message").or_else(|| v.get("error"))?;
                m.as_str().map(str::to_owned)
            })
            .map_or_else(
                || format!("status {status}"),
                |m| format!("status {status}: {m}"),
            );
        return Err(EtcdError::Unavailable(why));
    }
    v.map_err(|e| EtcdError::Unreadable(e.to_string()))
}

/// Reads a transaction's answer: the revision it committed at.
///
/// # Errors
/// [`EtcdError::Unavailable`] for a status other than 200; [`EtcdError::Conflict`] when
/// the compare failed; [`EtcdError::Unreadable`] for another shape.
pub fn txn_answer(status: u16, body: &[u8]) -> Result<u64, EtcdError> {
    let a = answer(status, body)?;
    if !flag(&a, "succeeded") {
        return Err(EtcdError::Conflict);
    }
    revision(&a)
}

/// Reads a [`retirable`] answer: the time of the newest entry that may retire, if any.
///
/// # Errors
/// As [`poll_answer`].
pub fn retirable_answer(prefix: &str, status: u16, body: &[u8]) -> Result<Option<u64>, EtcdError> {
    let a = answer(status, body)?;
    let at = format!("{prefix}e/");
    Ok(kvs(&a).iter().find_map(|kv| {
        let key = bytes(kv, "key");
        let rest = key.strip_prefix(at.as_bytes())?;
        std::str::from_utf8(rest.get(..16)?).ok()?.parse().ok()
    }))
}

/// Reads a [`retire`] answer: whether the floor moved (created, or raised by the nested
/// transaction). A floor already at or above the cutoff is not an error: another node
/// retired first.
///
/// # Errors
/// As [`poll_answer`].
pub fn retire_answer(status: u16, body: &[u8]) -> Result<bool, EtcdError> {
    let a = answer(status, body)?;
    if flag(&a, "succeeded") {
        return Ok(true);
    }
    let nested = a
        .get("responses")
        .and_then(|r| r.get(0))
        .and_then(|r| r.get("response_txn"))
        .ok_or_else(|| EtcdError::Unreadable("no nested transaction answer".into()))?;
    Ok(flag(nested, "succeeded"))
}

/// What one poll brought.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Polled {
    /// New entries, each with its `create_revision` as id, oldest revision first.
    pub entries: Vec<LogEntry>,
    /// The fleet's floor when the poll saw it change, ms.
    pub floor_ms: Option<u64>,
    /// The revision the poll is complete through: the next poll starts after it.
    pub through: u64,
    /// Keys under the prefix that are neither an entry nor the floor, or whose value does
    /// not read (skipped; the adapter logs them).
    pub skipped: usize,
}

/// Reads a poll's answer for `prefix`. When the answer was cut at [`POLL_LIMIT`]
/// (`more`), it is complete through the last key's `mod_revision`; otherwise through the
/// answer's revision.
///
/// # Errors
/// [`EtcdError::Unavailable`] for a status other than 200; [`EtcdError::Unreadable`] for
/// another shape.
pub fn poll_answer(prefix: &str, status: u16, body: &[u8]) -> Result<Polled, EtcdError> {
    let a = answer(status, body)?;
    let mut out = Polled::default();
    let mut last_mod = 0;
    let floor = floor_key(prefix);
    let entries_at = format!("{prefix}e/");
    for kv in kvs(&a) {
        let (key, value) = (bytes(kv, "key"), bytes(kv, "value"));
        let created = int(kv.get("create_revision"))?;
        last_mod = last_mod.max(int(kv.get("mod_revision"))?);
        if key == floor.as_bytes() {
            let ms = std::str::from_utf8(&value)
                .ok()
                .and_then(|s| s.parse::<u64>().ok());
            match ms {
                Some(ms) => out.floor_ms = Some(out.floor_ms.map_or(ms, |f| f.max(ms))),
                None => out.skipped += 1,
            }
            continue;
        }
        let parsed = key
            .starts_with(entries_at.as_bytes())
            .then(|| serde_json::from_slice::<LogEntry>(&value).ok())
            .flatten();
        match parsed {
            Some(e) => out.entries.push(LogEntry { id: created, ..e }),
            None => out.skipped += 1,
        }
    }
    out.entries.sort_by_key(|e| e.id);
    out.through = if flag(&a, "more") {
        last_mod
    } else {
        revision(&a)?
    };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::banlog::Kind;
    use serde_json::json;

    fn ban(expr: &str) -> NewEntry {
        NewEntry {
            kind: Kind::Ban,
            expr: expr.into(),
            key: None,
            lurker_friendly: true,
            at_ms: None,
        }
    }

    fn dec(s: &Value) -> String {
        String::from_utf8(B64.decode(s.as_str().unwrap()).unwrap()).unwrap()
    }

    #[test]
    fn prefix_end_increments_the_last_byte_that_can_be() {
        assert_eq!(prefix_end(b"/cachet/bans/"), b"/cachet/bans0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }

    #[test]
    fn entry_keys_sort_by_time() {
        let a = entry_key(DEFAULT_PREFIX, 999, u64::MAX);
        let b = entry_key(DEFAULT_PREFIX, 1000, 0);
        assert!(a < b, "{a} < {b}");
        assert_eq!(b, "/cachet/bans/e/0000000000001000/0000000000000000");
    }

    #[test]
    fn a_put_creates_each_key_only_if_absent() {
        let body = put_entries(DEFAULT_PREFIX, &[ban("obj.status == 404"), ban("x")], 7, 1);
        let v: Value = serde_json::from_slice(&body).unwrap();
        let compare = v["compare"].as_array().unwrap();
        let success = v["success"].as_array().unwrap();
        assert_eq!((compare.len(), success.len()), (2, 2));
        assert_eq!(compare[0]["target"], "CREATE");
        assert_eq!(compare[0]["create_revision"], "0");
        assert_eq!(dec(&compare[1]["key"]), entry_key(DEFAULT_PREFIX, 7, 2));
        let put = &success[0]["request_put"];
        assert_eq!(dec(&put["key"]), entry_key(DEFAULT_PREFIX, 7, 1));
        let e: LogEntry = serde_json::from_str(&dec(&put["value"])).unwrap();
        assert_eq!(
            (e.expr.as_str(), e.at_ms, e.kind),
            ("obj.status == 404", 7, Kind::Ban)
        );
    }

    #[test]
    fn batches_stay_within_the_limit_and_number_keys_as_one_transaction_would() {
        let entries: Vec<NewEntry> = (0..300)
            .map(|i| ban(&format!("obj.status == {i}")))
            .collect();
        let b = batches(DEFAULT_PREFIX, &entries, 7, u64::MAX - 1, MAX_TXN_OPS);
        let ranges: Vec<_> = b.iter().map(|(r, _)| r.clone()).collect();
        assert_eq!(ranges, [0..128, 128..256, 256..300]);
        let mut keys = Vec::new();
        for (r, body) in &b {
            let v: Value = serde_json::from_slice(body).unwrap();
            let (compare, success) = (
                v["compare"].as_array().unwrap(),
                v["success"].as_array().unwrap(),
            );
            assert_eq!((compare.len(), success.len()), (r.len(), r.len()));
            assert!(compare.len() <= MAX_TXN_OPS);
            for (i, put) in r.clone().zip(success) {
                let key = dec(&put["request_put"]["key"]);
                // Entry i's key whatever its batch (the suffix wraps around).
                let want = (u64::MAX - 1).wrapping_add(i as u64);
                assert_eq!(key, entry_key(DEFAULT_PREFIX, 7, want));
                let e: LogEntry = serde_json::from_str(&dec(&put["request_put"]["value"])).unwrap();
                assert_eq!(e.expr, format!("obj.status == {i}"));
                keys.push(key);
            }
        }
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), 300, "every entry once, every key distinct");
        assert!(batches(DEFAULT_PREFIX, &[], 7, 0, MAX_TXN_OPS).is_empty());
        assert_eq!(
            batches(DEFAULT_PREFIX, &entries[..3], 7, 0, 0).len(),
            3,
            "at least 1 per batch"
        );
    }

    #[test]
    fn a_created_read_finds_the_revision_that_created_a_key() {
        let key = entry_key(DEFAULT_PREFIX, 7, 3);
        let v: Value = serde_json::from_slice(&created(&key)).unwrap();
        assert_eq!(dec(&v["key"]), key);
        assert!(v.get("range_end").is_none());
        let found = json!({"header": {"revision": "20"},
                           "kvs": [{"key": b64(key.as_bytes()), "create_revision": "17", "mod_revision": "17"}],
                           "count": "1"});
        assert_eq!(
            created_answer(200, found.to_string().as_bytes()),
            Ok(Some(17))
        );
        assert_eq!(
            created_answer(200, br#"{"header":{"revision":"20"}}"#),
            Ok(None)
        );
        assert!(matches!(
            created_answer(503, b""),
            Err(EtcdError::Unavailable(_))
        ));
    }

    #[test]
    fn prefixes_are_checked_with_the_reason() {
        assert_eq!(check_prefix(DEFAULT_PREFIX), Ok(()));
        assert_eq!(check_prefix("/"), Ok(()));
        assert!(check_prefix("").unwrap_err().contains("is empty"));
        assert_eq!(
            check_prefix("cachet/bans/"),
            Err("must start with '/'".into())
        );
        assert_eq!(
            check_prefix("/cachet/bans"),
            Err("must end with '/'".into())
        );
        let long = format!("/{}/", "a".repeat(MAX_ETCD_PREFIX_BYTES));
        assert_eq!(
            check_prefix(&long),
            Err(format!(
                "is {} bytes; at most {MAX_ETCD_PREFIX_BYTES}",
                long.len()
            ))
        );
    }

    #[test]
    fn a_poll_asks_for_keys_modified_after_the_last_revision() {
        let v: Value = serde_json::from_slice(&poll(DEFAULT_PREFIX, 41)).unwrap();
        assert_eq!(dec(&v["key"]), DEFAULT_PREFIX);
        assert_eq!(dec(&v["range_end"]), "/cachet/bans0");
        assert_eq!(v["min_mod_revision"], "42");
        let first: Value = serde_json::from_slice(&poll(DEFAULT_PREFIX, 0)).unwrap();
        assert!(first.get("min_mod_revision").is_none());
    }

    fn kv(key: &str, value: &[u8], created: u64, modified: u64) -> Value {
        json!({"key": b64(key.as_bytes()), "value": b64(value),
               "create_revision": created.to_string(), "mod_revision": modified.to_string()})
    }

    #[test]
    fn a_poll_answer_gives_entries_with_their_revision_as_id_and_the_floor() {
        let e = serde_json::to_vec(&LogEntry {
            id: 0,
            kind: Kind::SoftPurge,
            expr: String::new(),
            key: Some("k".into()),
            lurker_friendly: false,
            at_ms: 5,
        })
        .unwrap();
        let body = json!({
            "header": {"revision": "12"},
            "kvs": [
                kv(&entry_key(DEFAULT_PREFIX, 5, 1), &e, 9, 9),
                kv(&floor_key(DEFAULT_PREFIX), b"0000000000000003", 2, 11),
                kv("/cachet/bans/other", b"?", 10, 10),
                kv(&entry_key(DEFAULT_PREFIX, 6, 1), b"not json", 8, 8),
            ],
            "count": "4"
        })
        .to_string();
        let p = poll_answer(DEFAULT_PREFIX, 200, body.as_bytes()).unwrap();
        assert_eq!(p.through, 12);
        assert_eq!(p.floor_ms, Some(3));
        assert_eq!(p.skipped, 2);
        assert_eq!(p.entries.len(), 1);
        assert_eq!((p.entries[0].id, p.entries[0].kind), (9, Kind::SoftPurge));
        assert_eq!(p.entries[0].key.as_deref(), Some("k"));
    }

    #[test]
    fn a_cut_poll_is_complete_only_through_its_last_key() {
        let e = serde_json::to_vec(&LogEntry {
            id: 0,
            kind: Kind::Ban,
            expr: "obj.status == 404".into(),
            key: None,
            lurker_friendly: true,
            at_ms: 5,
        })
        .unwrap();
        let body = json!({"header": {"revision": "90"}, "more": true,
                          "kvs": [kv(&entry_key(DEFAULT_PREFIX, 5, 1), &e, 30, 30)]})
        .to_string();
        assert_eq!(
            poll_answer(DEFAULT_PREFIX, 200, body.as_bytes())
                .unwrap()
                .through,
            30
        );
    }

    #[test]
    fn an_empty_poll_is_complete_through_the_answer_revision() {
        let p = poll_answer(DEFAULT_PREFIX, 200, br#"{"header":{"revision":"7"}}"#).unwrap();
        assert_eq!((p.through, p.entries.len(), p.floor_ms), (7, 0, None));
    }

    #[test]
    fn transaction_answers() {
        let ok = br#"{"header":{"revision":"3"},"succeeded":true,"responses":[]}"#;
        assert_eq!(txn_answer(200, ok), Ok(3));
        assert_eq!(
            txn_answer(200, br#"{"header":{"revision":"3"}}"#),
            Err(EtcdError::Conflict)
        );
        let err = br#"{"error":"etcdserver: request timed out","code":14,"message":"etcdserver: request timed out"}"#;
        assert_eq!(
            txn_answer(503, err),
            Err(EtcdError::Unavailable(
                "status 503: etcdserver: request timed out".into()
            ))
        );
        assert!(matches!(
            txn_answer(200, b"<html>"),
            Err(EtcdError::Unreadable(_))
        ));
        assert!(matches!(
            poll_answer(DEFAULT_PREFIX, 200, br#"{"header":{"revision":"x"}}"#),
            Err(EtcdError::Unreadable(_))
        ));
    }

    #[test]
    fn retirement_raises_the_floor_only_upwards() {
        let v: Value = serde_json::from_slice(&retire(DEFAULT_PREFIX, 1234)).unwrap();
        assert_eq!(v["compare"][0]["target"], "CREATE");
        let nested = &v["failure"][0]["request_txn"];
        assert_eq!(nested["compare"][0]["result"], "LESS");
        assert_eq!(dec(&nested["compare"][0]["value"]), "0000000000001234");
        let del = &v["success"][0]["request_delete_range"];
        assert_eq!(dec(&del["key"]), "/cachet/bans/e/");
        assert_eq!(dec(&del["range_end"]), "/cachet/bans/e/0000000000001235");
        let r: Value = serde_json::from_slice(&retirable(DEFAULT_PREFIX, 1234)).unwrap();
        assert_eq!(dec(&r["range_end"]), "/cachet/bans/e/0000000000001235");
        let key = entry_key(DEFAULT_PREFIX, 1200, 9);
        let answer = json!({"header": {"revision": "5"}, "kvs": [{"key": b64(key.as_bytes())}]});
        let got = retirable_answer(DEFAULT_PREFIX, 200, answer.to_string().as_bytes());
        assert_eq!(got, Ok(Some(1200)));
        let none = retirable_answer(DEFAULT_PREFIX, 200, br#"{"header":{"revision":"5"}}"#);
        assert_eq!(none, Ok(None));
    }
}
