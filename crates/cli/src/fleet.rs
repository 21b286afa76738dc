//! `cachet ban add` and `cachet purge --etcd/--node`: bans and purges for an Envoy fleet, written to its etcd ban log or sent to any node's admin API.
//!
//! Through etcd (`--etcd URL`): the transactions a node's admin API writes
//! (`cachet_policy::etcd::put_entries`: one create-only key per entry), under the fleet's
//! key prefix (`--etcd-prefix`, or `envoy.etcd_prefix` of the nodes' `--config`; default
//! `/cachet/bans/`), so every node applies them on its next poll (docs/fleet.md). etcd
//! refuses a transaction of more than its `--max-txn-ops` operations (128 by default), so
//! the entries go in batches of [`etcd::MAX_TXN_OPS`] (`etcd::batches`), each its own
//! transaction and revision. Every entry's key is fixed before the first send, and a
//! batch whose answer was lost (transport error, gateway error) is sent again with the
//! same keys: its create-only compares make a second commit impossible, and a refused
//! resend after a lost commit is recognized by reading its first key back
//! (`etcd::created`). So each entry is written at most once, and a batch is reported
//! written only when etcd says so. The first batch that is not written stops the call;
//! the later ones are not sent. The expression and keys are checked here first, exactly
//! as a node checks them. The fleet's `bans.max_bans` is a node setting this command does
//! not know: prefer `--node` when the log may be full.
//!
//! Through a node (`--node URL`): `POST /.cachet/ban` or `/.cachet/purge` with the token
//! from `$CACHET_ADMIN_TOKEN` (never printed); the node answers only after etcd accepted.
//! Purges go in calls of at most [`etcd::MAX_TXN_OPS`] keys, since a node writes one
//! transaction per call.
//!
//! Output: a ban's JSON on stdout (`{"id":…,"expr":…,"lurker_friendly":…}`); for a purge,
//! one line per key (`{"key":"k","ok":true,"id":41}`, `{"key":"k","ok":false,"error":…}`)
//! and a summary on stderr. Exit 0 everything accepted, 1 anything refused, unreachable or
//! not sent, 2 usage errors (nothing sent).

use std::hash::{BuildHasher, Hasher};
use std::io::Write as _;
use std::ops::Range;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cachet_policy::banlog::{Kind, NewEntry, parse_ban, purge_entries};
use cachet_policy::etcd;

/// Environment variable holding a node's admin token (`--node`).
pub const TOKEN_ENV: &str = "CACHET_ADMIN_TOKEN";

/// Timeout of one call, to etcd or to a node.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Waits before the second and third send of an etcd transaction whose answer did not
/// say it was written (three sends in all, with the same keys).
const RESEND_DELAYS: [Duration; 2] = [Duration::from_millis(250), Duration::from_secs(1)];

/// Where a fleet write goes.
#[derive(Debug, Clone)]
pub enum Dest {
    /// etcd's v3 JSON gateway (`http://host:2379`) and the key prefix.
    Etcd {
        /// Base URL.
        url: String,
        /// `[envoy].etcd_prefix` of the fleet.
        prefix: String,
    },
    /// Any node's listener (`http://host:10000`).
    Node(String),
}

/// What to write.
#[derive(Debug, Clone)]
pub enum Write {
    /// A ban expression.
    Ban(String),
    /// Surrogate keys, hard or soft.
    Purge {
        /// The keys.
        keys: Vec<String>,
        /// Soft purge (stale instead of gone).
        soft: bool,
    },
}

/// The fleet's key prefix in etcd, for `--etcd` (flattened into `ban add` and `purge`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct PrefixArgs {
    // (`conflicts_with` node too: clap drops `requires` when a conflicting arg, here
    // `--node`, is present.)
    /// Key prefix of the fleet's ban log in etcd: the nodes' `envoy.etcd_prefix`; it
    /// starts and ends with `/` [default: /cachet/bans/].
    #[arg(
        long,
        value_name = "PREFIX",
        requires = "etcd",
        conflicts_with_all = ["config", "node"]
    )]
    pub etcd_prefix: Option<String>,
    /// The config the fleet's nodes run (TOML, or JSON for `.json`): its
    /// `envoy.etcd_prefix` is the key prefix (its `envoy.etcd_cluster` must be set).
    #[arg(long, value_name = "FILE", requires = "etcd", conflicts_with = "node")]
    pub config: Option<PathBuf>,
}

impl PrefixArgs {
    /// The prefix to write under: `--etcd-prefix` (checked as the config checks
    /// `envoy.etcd_prefix`), the config's, or the default.
    ///
    /// # Errors
    /// Why the flag's prefix or the config is refused (a usage error: exit 2).
    pub fn prefix(&self) -> Result<String, String> {
        if let Some(p) = &self.etcd_prefix {
            etcd::check_prefix(p).map_err(|why| {
                format!(
                    "--etcd-prefix {p:?} {why}: give the fleet's envoy.etcd_prefix, e.g. {}",
                    etcd::DEFAULT_PREFIX
                )
            })?;
            return Ok(p.clone());
        }
        let Some(path) = &self.config else {
            return Ok(etcd::DEFAULT_PREFIX.to_owned());
        };
        let config =
            crate::config_file::load(path).map_err(|e| e.to_string().trim_end().to_owned())?;
        if config.envoy.etcd_cluster.is_empty() {
            return Err(format!(
                "{}: envoy.etcd_cluster is not set: nodes running this config keep their ban \
                 log per Envoy process and never read etcd",
                path.display()
            ));
        }
        Ok(config.envoy.etcd_prefix)
    }
}

/// A call that got no answer: the reason, and whether the request may have reached the
/// server (`false` when the connection was never made: nothing was written).
#[derive(Debug)]
struct NoAnswer {
    why: String,
    maybe_delivered: bool,
}

impl From<NoAnswer> for String {
    fn from(e: NoAnswer) -> Self {
        e.why
    }
}

/// Whether a request that failed with `e` may have reached the server.
fn maybe_delivered(e: &ureq::Error) -> bool {
    use ureq::Timeout;
    !matches!(
        e,
        ureq::Error::HostNotFound
            | ureq::Error::ConnectionFailed
            | ureq::Error::BadUri(_)
            | ureq::Error::Timeout(Timeout::Resolve | Timeout::Connect)
    ) && !matches!(e, ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused)
}

fn post(url: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<(u16, String), NoAnswer> {
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(TIMEOUT))
            .build(),
    );
    let mut req = agent.post(url);
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let mut r = req.send(body).map_err(|e| NoAnswer {
        why: format!("{url}: {e}"),
        maybe_delivered: maybe_delivered(&e),
    })?;
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().map_err(|e| NoAnswer {
        why: format!("{url}: {e}"),
        maybe_delivered: true,
    })?;
    Ok((status, text))
}

/// The entries a write adds, checked as a node checks them.
///
/// # Errors
/// The parser's message (with its column) or the refused key.
pub fn entries(w: &Write) -> Result<Vec<NewEntry>, String> {
    match w {
        Write::Ban(expr) => {
            let (expr, lurker_friendly) = parse_ban(expr)?;
            Ok(vec![NewEntry {
                kind: Kind::Ban,
                expr,
                key: None,
                lurker_friendly,
                at_ms: None,
            }])
        }
        Write::Purge { keys, soft: false } => {
            let e = purge_entries(keys);
            if e.len() == keys.len() {
                Ok(e)
            } else {
                Err("a key is not a valid surrogate key".into())
            }
        }
        Write::Purge { keys, soft: true } => Ok(keys
            .iter()
            .map(|k| NewEntry {
                kind: Kind::SoftPurge,
                expr: String::new(),
                key: Some(k.clone()),
                lurker_friendly: false,
                at_ms: None,
            })
            .collect()),
    }
}

/// What became of one batch of entries (one etcd transaction, or one call to a node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Written, with this id (the etcd revision of its transaction).
    Written(u64),
    /// Not written (the reason): none of its entries is in etcd.
    NotWritten(String),
    /// Neither confirmed nor refused (the reason): look before sending it again.
    Unknown(String),
    /// Not sent: an earlier batch was not written.
    NotSent,
}

impl Outcome {
    /// The reason for a key line's `error` (`None` when written).
    fn error(&self) -> Option<String> {
        match self {
            Self::Written(_) => None,
            Self::NotWritten(why) => Some(format!("not written: {why}")),
            Self::Unknown(why) => Some(format!("unknown whether written: {why}")),
            Self::NotSent => Some("not sent: an earlier transaction was not written".into()),
        }
    }
}

/// The etcd side of a write: where, and the keys every entry gets (fixed before the first
/// send).
struct EtcdWrite<'a> {
    base: &'a str,
    prefix: &'a str,
    at_ms: u64,
    suffix: u64,
}

impl EtcdWrite<'_> {
    /// Whether the batch whose first entry has index `first` committed: the revision that
    /// created its first key (a transaction creates all its keys or none).
    fn created(&self, first: usize) -> Result<Option<u64>, String> {
        let key = etcd::entry_key(
            self.prefix,
            self.at_ms,
            self.suffix.wrapping_add(first as u64),
        );
        let url = format!("{}{}", self.base, etcd::RANGE_PATH);
        let (status, body) = post(&url, &[], &etcd::created(&key)).map_err(String::from)?;
        etcd::created_answer(status, body.as_bytes()).map_err(|e| e.to_string())
    }

    /// Sends one transaction: what etcd said.
    fn send_once(&self, txn: &[u8]) -> Sent {
        let url = format!("{}{}", self.base, etcd::TXN_PATH);
        match post(&url, &[], txn).map(|(s, b)| etcd::txn_answer(s, b.as_bytes())) {
            Ok(Ok(revision)) => Sent::Written(revision),
            Ok(Err(etcd::EtcdError::Conflict)) => Sent::Conflict,
            Ok(Err(e)) => Sent::Failed(e.to_string(), true),
            Err(e) => Sent::Failed(e.why, e.maybe_delivered),
        }
    }

    /// Sends one batch's transaction until etcd says it was written, at most
    /// `delays.len() + 1` times with the same keys, and tells what became of it.
    fn send(&self, range: &Range<usize>, txn: &[u8], delays: &[Duration]) -> Outcome {
        let (mut why, mut delivered) = (String::new(), false);
        for attempt in 0..=delays.len() {
            if attempt > 0 {
                std::thread::sleep(delays[attempt - 1]);
            }
            match self.send_once(txn) {
                Sent::Written(revision) => return Outcome::Written(revision),
                // On the first send, the key is another writer's (the random suffix
                // collided): nothing of ours was written.
                Sent::Conflict if attempt == 0 => {
                    return Outcome::NotWritten(
                        "etcd refused the transaction: a key to create exists (the random key \
                         suffix collided); run the command again"
                            .into(),
                    );
                }
                // On a resend: an earlier send of this very transaction committed.
                Sent::Conflict => {
                    return match self.created(range.start) {
                        Ok(Some(revision)) => Outcome::Written(revision),
                        Ok(None) => Outcome::Unknown(
                            "etcd refused a resend as if an earlier send had been written, \
                             but its first key is absent"
                                .into(),
                        ),
                        Err(e) => Outcome::Unknown(format!(
                            "etcd refused a resend as if an earlier send had been written, \
                             and reading it back failed: {e}"
                        )),
                    };
                }
                Sent::Failed(e, maybe) => (why, delivered) = (e, delivered || maybe),
            }
        }
        let sends = delays.len() + 1;
        if !delivered {
            // No connection was ever made: nothing reached etcd.
            return Outcome::NotWritten(format!("{why} ({sends} sends)"));
        }
        // No send was confirmed, but one whose answer was lost may have committed.
        match self.created(range.start) {
            Ok(Some(revision)) => Outcome::Written(revision),
            Ok(None) => Outcome::NotWritten(format!("{why} ({sends} sends)")),
            Err(e) => Outcome::Unknown(format!(
                "{why} ({sends} sends), and reading back whether one was written failed: {e}"
            )),
        }
    }
}

/// What etcd said to one send of a transaction.
enum Sent {
    Written(u64),
    /// A compare failed: a key to create exists.
    Conflict,
    /// No answer, or an error (the reason), and whether the send may have reached etcd.
    Failed(String, bool),
}

/// Writes `entries` under `prefix` through etcd at `base`, in transactions of at most
/// `max_ops` entries, calling `done` after each batch (its entries' range and outcome);
/// after the first batch not written the rest are [`Outcome::NotSent`].
fn write_etcd(
    base: &str,
    prefix: &str,
    entries: &[NewEntry],
    max_ops: usize,
    delays: &[Duration],
    mut done: impl FnMut(Range<usize>, &Outcome),
) {
    let at_ms = cachet_policy::banlog::stamp_ms(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    );
    let mut suffix = std::collections::hash_map::RandomState::new().build_hasher();
    suffix.write_u64(at_ms);
    let w = EtcdWrite {
        base: base.trim_end_matches('/'),
        prefix,
        at_ms,
        suffix: suffix.finish(),
    };
    let mut stopped = false;
    for (range, txn) in etcd::batches(prefix, entries, at_ms, w.suffix, max_ops) {
        let outcome = if stopped {
            Outcome::NotSent
        } else {
            w.send(&range, &txn, delays)
        };
        stopped |= !matches!(outcome, Outcome::Written(_));
        done(range, &outcome);
    }
}

/// What became of one key of a purge: its stdout line without the key.
#[derive(Debug, Clone, Default, serde::Serialize)]
struct KeyResult {
    ok: bool,
    /// A node's answer says whether the purge was soft.
    #[serde(skip_serializing_if = "Option::is_none")]
    soft: Option<bool>,
    /// The entry's id: the etcd revision of its transaction.
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl KeyResult {
    fn failed(why: impl Into<String>) -> Self {
        Self {
            error: Some(why.into()),
            ..Self::default()
        }
    }

    fn of(o: &Outcome) -> Self {
        match o {
            Outcome::Written(id) => Self {
                ok: true,
                id: Some(*id),
                ..Self::default()
            },
            o => Self::failed(o.error().unwrap_or_default()),
        }
    }

    /// The stdout line: `{"key":…,"ok":…,…}`.
    fn line(&self, key: &str) -> String {
        #[derive(serde::Serialize)]
        struct Line<'a> {
            key: &'a str,
            #[serde(flatten)]
            result: &'a KeyResult,
        }
        serde_json::to_string(&Line { key, result: self }).unwrap_or_default()
    }
}

/// Sends one purge call of `keys` to a node; one result per key, in order.
fn purge_node(base: &str, auth: &str, keys: &[String], soft: bool) -> Vec<KeyResult> {
    let joined = keys.join(" ");
    let mut h = vec![("authorization", auth), ("surrogate-key", joined.as_str())];
    if soft {
        h.push(("fastly-soft-purge", "1"));
    }
    let all = |why: String| vec![KeyResult::failed(why); keys.len()];
    match post(&format!("{base}/.cachet/purge"), &h, b"") {
        Err(e) if e.maybe_delivered => all(format!("unknown whether written: {}", e.why)),
        Err(e) => all(format!("not written: {}", e.why)),
        Ok((status, body)) if !(200..300).contains(&status) => {
            all(format!("not written: {status}: {}", body.trim()))
        }
        Ok((_, body)) => {
            let answer: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            keys.iter()
                .map(|k| {
                    let a = &answer[k.as_str()];
                    if a["ok"] == true {
                        KeyResult {
                            ok: true,
                            soft: a["soft"].as_bool(),
                            id: a["id"].as_u64(),
                            error: None,
                        }
                    } else if let Some(e) = a["error"].as_str() {
                        KeyResult::failed(format!("refused by the node: {e}"))
                    } else {
                        KeyResult::failed("not acknowledged: missing from the node's answer")
                    }
                })
                .collect()
        }
    }
}

/// Stdout, remembering the first write error.
struct Out {
    out: std::io::StdoutLock<'static>,
    error: Option<std::io::Error>,
}

impl Out {
    fn new() -> Self {
        Self {
            out: std::io::stdout().lock(),
            error: None,
        }
    }

    fn line(&mut self, text: &str) {
        if let Err(e) = writeln!(self.out, "{text}").and_then(|()| self.out.flush()) {
            self.error.get_or_insert(e);
        }
    }
}

/// Runs one fleet write: the ban, or a line per purged key, on stdout; the reason and a
/// purge's summary on stderr. Exit 0 all written, 1 otherwise.
pub fn run(dest: &Dest, w: &Write) -> ExitCode {
    let mut out = Out::new();
    let done = match dest {
        Dest::Etcd { url, prefix } => entries(w).and_then(|new| match w {
            Write::Ban(_) => ban_etcd(url, prefix, &new, &mut out),
            Write::Purge { keys, soft } => Ok(purge_etcd(url, prefix, keys, *soft, &new, &mut out)),
        }),
        Dest::Node(base) => node(base.trim_end_matches('/'), w, &mut out),
    };
    if let Some(e) = out.error {
        eprintln!("cachet: writing stdout: {e}");
        return ExitCode::from(1);
    }
    match done {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("cachet: {e}");
            ExitCode::from(1)
        }
    }
}

/// A ban through etcd: its line, or why it was not written.
fn ban_etcd(url: &str, prefix: &str, new: &[NewEntry], out: &mut Out) -> Result<bool, String> {
    let mut result = Outcome::NotSent;
    write_etcd(
        url,
        prefix,
        new,
        etcd::MAX_TXN_OPS,
        &RESEND_DELAYS,
        |_, o| {
            result = o.clone();
        },
    );
    match (result, new.first()) {
        (Outcome::Written(id), Some(n)) => {
            let line =
                serde_json::json!({"id": id, "expr": n.expr, "lurker_friendly": n.lurker_friendly});
            out.line(&line.to_string());
            Ok(true)
        }
        (Outcome::Unknown(why), _) => Err(format!(
            "ban add: unknown whether etcd wrote the ban: {why}; look at a node's \
             GET /.cachet/bans before adding it again"
        )),
        (o, _) => Err(format!("ban add: {}", o.error().unwrap_or_default())),
    }
}

/// A purge through etcd: a line per key after its transaction, the summary; whether every
/// key was written.
fn purge_etcd(
    url: &str,
    prefix: &str,
    keys: &[String],
    soft: bool,
    new: &[NewEntry],
    out: &mut Out,
) -> bool {
    let mut summary = Summary::new(keys.len());
    write_etcd(
        url,
        prefix,
        new,
        etcd::MAX_TXN_OPS,
        &RESEND_DELAYS,
        |range, o| {
            let result = KeyResult::of(o);
            for k in &keys[range.clone()] {
                out.line(&result.line(k));
            }
            summary.add(range, o);
        },
    );
    summary.print(&format!("{}, etcd prefix {prefix}", kind(soft)))
}

fn kind(soft: bool) -> &'static str {
    if soft { "soft purge" } else { "hard purge" }
}

/// A write through a node's admin API: the ban's answer, or a line per key (calls of at
/// most [`etcd::MAX_TXN_OPS`] keys, stopping at the first that fails) and the summary.
fn node(base: &str, w: &Write, out: &mut Out) -> Result<bool, String> {
    let token = std::env::var(TOKEN_ENV)
        .map_err(|_| format!("set ${TOKEN_ENV} to the nodes' admin token"))?;
    let auth = format!("Bearer {token}");
    match w {
        Write::Ban(expr) => {
            let url = format!("{base}/.cachet/ban");
            let (status, body) =
                post(&url, &[("authorization", &auth)], expr.as_bytes()).map_err(String::from)?;
            if !(200..300).contains(&status) {
                return Err(format!("{status}: {}", body.trim()));
            }
            out.line(body.trim());
            Ok(true)
        }
        Write::Purge { keys, soft } => {
            let mut summary = Summary::new(keys.len());
            let mut stopped = false;
            let size = etcd::MAX_TXN_OPS;
            for (i, batch) in keys.chunks(size).enumerate() {
                let results = if stopped {
                    vec![KeyResult::of(&Outcome::NotSent); batch.len()]
                } else {
                    purge_node(base, &auth, batch, *soft)
                };
                for (k, r) in batch.iter().zip(&results) {
                    out.line(&r.line(k));
                }
                summary.add_keys(i * size..i * size + batch.len(), &results, stopped);
                stopped |= results.iter().any(|r| !r.ok);
            }
            Ok(summary.print(&format!("{} through {base}", kind(*soft))))
        }
    }
}

/// A purge's summary: keys written, and what became of the others, batch by batch.
struct Summary {
    total: usize,
    written: usize,
    batches: usize,
    problems: Vec<String>,
}

impl Summary {
    fn new(total: usize) -> Self {
        Self {
            total,
            written: 0,
            batches: 0,
            problems: Vec::new(),
        }
    }

    /// `keys 129-256`, 1-based and inclusive.
    fn keys(r: &Range<usize>) -> String {
        if r.len() == 1 {
            format!("key {}", r.start + 1)
        } else {
            format!("keys {}-{}", r.start + 1, r.end)
        }
    }

    fn add(&mut self, range: Range<usize>, o: &Outcome) {
        self.batches += 1;
        let n = self.batches;
        match o {
            Outcome::Written(_) => self.written += range.len(),
            Outcome::NotSent => self
                .problems
                .push(format!("transaction {n} ({}) not sent", Self::keys(&range))),
            o => self.problems.push(format!(
                "transaction {n} ({}) {}",
                Self::keys(&range),
                o.error().unwrap_or_default()
            )),
        }
    }

    fn add_keys(&mut self, range: Range<usize>, results: &[KeyResult], not_sent: bool) {
        self.batches += 1;
        let n = self.batches;
        let ok = results.iter().filter(|r| r.ok).count();
        self.written += ok;
        if not_sent {
            self.problems
                .push(format!("call {n} ({}) not sent", Self::keys(&range)));
        } else if ok < results.len() {
            let why = results
                .iter()
                .find_map(|r| r.error.as_deref())
                .unwrap_or("refused");
            self.problems.push(format!(
                "call {n} ({}): {} failed: {why}",
                Self::keys(&range),
                results.len() - ok
            ));
        }
    }

    /// Prints the summary on stderr; whether every key was written.
    fn print(&self, how: &str) -> bool {
        let failed = self.total - self.written;
        let what = if self.total == 1 {
            "1 surrogate key".to_owned()
        } else {
            format!("{} surrogate keys", self.total)
        };
        eprintln!(
            "cachet: purge: {what}: {} purged, {failed} failed, in {} batch{} ({how})",
            self.written,
            self.batches,
            if self.batches == 1 { "" } else { "es" }
        );
        for p in &self.problems {
            eprintln!("cachet: purge: {p}");
        }
        failed == 0
    }
}

/// Where a fleet write goes: etcd or a node (exactly one).
#[derive(clap::Args, Debug, Clone)]
#[group(required = true, multiple = false)]
pub struct FleetTarget {
    /// etcd's v3 JSON gateway holding the fleet's ban log, e.g. `http://127.0.0.1:2379`.
    #[arg(long, value_name = "URL")]
    pub etcd: Option<String>,
    /// Any node's listener, e.g. `http://edge-1:10000` (admin API, $CACHET_ADMIN_TOKEN).
    #[arg(long, value_name = "URL")]
    pub node: Option<String>,
}

impl FleetTarget {
    /// The destination, with `prefix` for etcd.
    pub fn dest(&self, prefix: &str) -> Dest {
        match (&self.etcd, &self.node) {
            (Some(url), _) => Dest::Etcd {
                url: url.clone(),
                prefix: prefix.to_owned(),
            },
            (None, Some(n)) => Dest::Node(n.clone()),
            (None, None) => Dest::Node(String::new()),
        }
    }
}
