//! `cachet purge`: purge surrogate keys, URLs or a whole service through the Fastly API.
//!
//! Output: one JSON line per key or URL on stdout (`{"key":"k1","ok":true,"id":"…"}`,
//! `{"key":"k2","ok":false,"error":"403 Forbidden: …"}`, `{"url":"…",…}`,
//! `{"all":true,"ok":true}`), a summary on stderr. Exit status: 0 when everything was
//! purged, 1 when anything failed, 2 for usage and configuration errors (nothing sent).

use std::collections::HashSet;
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Args};
use serde::Serialize;

use crate::fastly::{self, ApiError, Client, MAX_KEYS_PER_CALL, Retry};

/// Longest surrogate key Fastly accepts, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// Environment variable holding the API token (sent as `Fastly-Key`, never printed).
pub const TOKEN_ENV: &str = "FASTLY_API_TOKEN";

/// Environment variable holding the service id (after `--service-id`, before
/// `fastly.toml`).
pub const SERVICE_ID_ENV: &str = "FASTLY_SERVICE_ID";

/// Manifest read for `service_id` when `--manifest` is not given (absent is fine).
pub const DEFAULT_MANIFEST: &str = "fastly.toml";

/// Longest URL accepted by `--url`, in bytes (Fastly's request-line limit is 8 KiB).
pub const MAX_URL_BYTES: usize = 8 * 1024;

/// Largest `--keys-from` input read, in bytes (64 MiB).
pub const MAX_KEYS_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Arguments of `cachet purge`.
#[derive(Args, Debug)]
#[command(group(
    ArgGroup::new("target")
        .required(true)
        .args(["key", "keys_from", "url", "all"])
))]
pub struct PurgeArgs {
    /// Surrogate key to purge (repeatable). Sent in batches of 256 per API call.
    #[arg(long, value_name = "KEY")]
    pub key: Vec<String>,
    /// File with one surrogate key per line (`-` for stdin); blank lines are skipped,
    /// surrounding whitespace trimmed.
    #[arg(long, value_name = "FILE")]
    pub keys_from: Option<PathBuf>,
    /// URL to purge, with or without its scheme (repeatable).
    #[arg(long, value_name = "URL")]
    pub url: Vec<String>,
    /// Purge everything cached for the service (hard purge only).
    #[arg(long)]
    pub all: bool,
    /// Soft purge: mark objects stale (still served within stale-while-revalidate or
    /// stale-if-error) instead of evicting them.
    #[arg(long)]
    pub soft: bool,
    /// Purge in an Envoy fleet instead of Fastly: write to its etcd ban log
    /// (docs/fleet.md), e.g. `http://127.0.0.1:2379`, in transactions of at most 128
    /// keys. Keys only.
    #[arg(long, value_name = "URL", conflicts_with_all = ["node", "url", "all"])]
    pub etcd: Option<String>,
    #[command(flatten)]
    pub prefix: crate::fleet::PrefixArgs,
    /// Purge in an Envoy fleet through any node's admin API (token from
    /// $CACHET_ADMIN_TOKEN), e.g. `http://edge-1:10000`, in calls of at most 128 keys.
    /// Keys only.
    #[arg(long, value_name = "URL", conflicts_with_all = ["url", "all"])]
    pub node: Option<String>,
    /// Service id; else $FASTLY_SERVICE_ID; else `service_id` in the manifest.
    #[arg(long, value_name = "ID")]
    pub service_id: Option<String>,
    /// Fastly manifest read for `service_id` [default: ./fastly.toml, when present].
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
    /// API base URL (https; http only for a loopback test server).
    #[arg(long, value_name = "URL", default_value = fastly::DEFAULT_API_BASE)]
    pub api_base: String,
    /// Attempts per API call, the first included; 429, 5xx and transport errors are
    /// retried with exponential backoff.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub max_attempts: u32,
    /// First retry delay in milliseconds, doubled per retry (tests set it near zero).
    #[arg(long, hide = true, default_value_t = 500)]
    pub retry_base_ms: u64,
    /// Cap of any one retry delay in milliseconds, `Retry-After` included.
    #[arg(long, hide = true, default_value_t = 60_000)]
    pub retry_max_delay_ms: u64,
}

/// A usage or configuration error: reported on stderr, exit 2, nothing sent.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn usage(msg: impl Into<String>) -> UsageError {
    UsageError(msg.into())
}

/// One stdout line.
#[derive(Serialize)]
struct Line<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    all: Option<bool>,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

/// What to purge, validated.
enum Target {
    Keys(Vec<String>),
    Urls(Vec<(String, String)>),
    All,
}

/// Runs `cachet purge`.
pub fn run(args: &PurgeArgs) -> ExitCode {
    if args.etcd.is_some() || args.node.is_some() {
        return fleet(args);
    }
    match prepare(args) {
        Ok((client, target, service)) => execute(&client, &target, service.as_ref(), args.soft),
        Err(e) => {
            eprintln!("cachet: purge: {e}");
            ExitCode::from(2)
        }
    }
}

/// Validates everything before any call: target, API base, service id, token.
fn prepare(args: &PurgeArgs) -> Result<(Client, Target, Option<Service>), UsageError> {
    if args.all && args.soft {
        return Err(usage(
            "--soft cannot be used with --all: Fastly's purge_all is always a hard purge \
             (soft-purge the service's surrogate keys instead)",
        ));
    }
    let target = if args.all {
        Target::All
    } else if !args.url.is_empty() {
        Target::Urls(
            args.url
                .iter()
                .map(|u| cached_url(u).map(|c| (u.clone(), c)))
                .collect::<Result<_, _>>()?,
        )
    } else {
        Target::Keys(keys(args)?)
    };
    validate_api_base(&args.api_base)?;
    let service = match target {
        Target::Urls(_) => None,
        _ => Some(resolve_service_id(
            args.service_id.as_deref(),
            std::env::var_os(SERVICE_ID_ENV),
            args.manifest.as_deref(),
        )?),
    };
    let token = read_token(std::env::var_os(TOKEN_ENV))?;
    let retry = Retry {
        max_attempts: args.max_attempts,
        base_delay: Duration::from_millis(args.retry_base_ms),
        max_delay: Duration::from_millis(args.retry_max_delay_ms),
    };
    Ok((Client::new(&args.api_base, token, retry), target, service))
}

/// Writes the stdout lines, remembering the first write error.
struct Emitter {
    out: std::io::StdoutLock<'static>,
    error: Option<std::io::Error>,
}

impl Emitter {
    fn emit(&mut self, line: &Line<'_>) {
        let mut text = serde_json::to_string(line).unwrap_or_default();
        text.push('\n');
        if let Err(e) = self
            .out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush())
        {
            self.error.get_or_insert(e);
        }
    }
}

/// An error standing in for a call not sent after a fatal one.
fn not_sent(fatal: &ApiError) -> ApiError {
    ApiError {
        status: fatal.status,
        message: format!("not sent: an earlier call failed with {}", fatal.message),
    }
}

/// Sends the calls, prints one line per key/URL, the summary, and returns the exit code.
fn execute(client: &Client, target: &Target, service: Option<&Service>, soft: bool) -> ExitCode {
    let mut em = Emitter {
        out: std::io::stdout().lock(),
        error: None,
    };
    let svc = service.map_or("", |s| s.id.as_str());
    let (total, failed) = match target {
        Target::Keys(keys) => (keys.len(), purge_keys(client, svc, keys, soft, &mut em)),
        Target::Urls(urls) => (urls.len(), purge_urls(client, urls, soft, &mut em)),
        Target::All => {
            let result = client.purge_all(svc);
            em.emit(&Line {
                key: None,
                url: None,
                all: Some(true),
                ok: result.is_ok(),
                id: None,
                error: result.as_ref().err().map(|e| e.message.as_str()),
            });
            (1, usize::from(result.is_err()))
        }
    };
    let what = match target {
        Target::Keys(_) => plural(total, "surrogate key"),
        Target::Urls(_) => plural(total, "URL"),
        Target::All => "everything".to_owned(),
    };
    let kind = match (target, soft) {
        (Target::All, _) => "purge all",
        (_, true) => "soft purge",
        (_, false) => "hard purge",
    };
    let svc = service.map_or(String::new(), |s| {
        format!(", service {} from {}", s.id, s.source)
    });
    eprintln!(
        "cachet: purge: {what}: {} purged, {failed} failed ({kind}{svc})",
        total - failed
    );
    if let Some(e) = em.error {
        eprintln!("cachet: purge: writing stdout: {e}");
        return ExitCode::from(2);
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Purges `keys` in batches of [`MAX_KEYS_PER_CALL`]; after a fatal error (401, 403,
/// 404) the remaining batches are not sent. Returns the number of failed keys.
fn purge_keys(
    client: &Client,
    service_id: &str,
    keys: &[String],
    soft: bool,
    em: &mut Emitter,
) -> usize {
    let mut failed = 0;
    let mut fatal: Option<ApiError> = None;
    for batch in keys.chunks(MAX_KEYS_PER_CALL) {
        let result = match &fatal {
            Some(e) => Err(not_sent(e)),
            None => client.purge_keys(service_id, batch, soft),
        };
        match result {
            Ok(ids) => {
                for k in batch {
                    if let Some(id) = ids.get(k) {
                        em.emit(&key_line(k, Ok(id)));
                    } else {
                        failed += 1;
                        em.emit(&key_line(
                            k,
                            Err("not acknowledged: missing from the API's response"),
                        ));
                    }
                }
            }
            Err(e) => {
                failed += batch.len();
                for k in batch {
                    em.emit(&key_line(k, Err(&e.message)));
                }
                if e.is_fatal() && fatal.is_none() {
                    fatal = Some(e);
                }
            }
        }
    }
    failed
}

/// Purges each URL; after a 401 or 403 the rest are not sent (a 404 concerns one URL's
/// host only). Returns the number of failed URLs.
fn purge_urls(client: &Client, urls: &[(String, String)], soft: bool, em: &mut Emitter) -> usize {
    let mut failed = 0;
    let mut fatal: Option<ApiError> = None;
    for (given, cached) in urls {
        let result = match &fatal {
            Some(e) => Err(not_sent(e)),
            None => client.purge_url(cached, soft),
        };
        match result {
            Ok(id) => em.emit(&url_line(given, Ok(&id))),
            Err(e) => {
                failed += 1;
                em.emit(&url_line(given, Err(&e.message)));
                if matches!(e.status, Some(401 | 403)) && fatal.is_none() {
                    fatal = Some(e);
                }
            }
        }
    }
    failed
}

fn key_line<'a>(key: &'a str, result: Result<&'a str, &'a str>) -> Line<'a> {
    Line {
        key: Some(key),
        url: None,
        all: None,
        ok: result.is_ok(),
        id: result.ok(),
        error: result.err(),
    }
}

fn url_line<'a>(url: &'a str, result: Result<&'a str, &'a str>) -> Line<'a> {
    Line {
        key: None,
        url: Some(url),
        ..key_line("", result)
    }
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// Why `key` cannot be a Fastly surrogate key: empty, over [`MAX_KEY_BYTES`], or holding
/// whitespace (the `Surrogate-Key` header separates keys with it) or a control character.
///
/// # Errors
/// A message starting with the quoted key, e.g. `"a b" contains whitespace (U+0020) at
/// byte 1`.
pub fn validate_key(key: &str) -> Result<(), String> {
    let shown = quoted_excerpt(key);
    if key.is_empty() {
        return Err("is empty".to_owned());
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(format!(
            "{shown} is {} bytes, more than Fastly's limit of {MAX_KEY_BYTES}",
            key.len()
        ));
    }
    if let Some((at, c)) = key.char_indices().find(|(_, c)| c.is_whitespace()) {
        return Err(format!(
            "{shown} contains whitespace (U+{:04X}) at byte {at}; surrogate keys are \
             whitespace-separated, so a key cannot hold any",
            u32::from(c)
        ));
    }
    if let Some((at, c)) = key.char_indices().find(|(_, c)| c.is_control()) {
        return Err(format!(
            "{shown} contains a control character (U+{:04X}) at byte {at}",
            u32::from(c)
        ));
    }
    Ok(())
}

/// `s` quoted, cut to 64 characters.
fn quoted_excerpt(s: &str) -> String {
    if s.chars().count() > 64 {
        let head: String = s.chars().take(64).collect();
        format!("{head:?}…")
    } else {
        format!("{s:?}")
    }
}

/// Reads keys from a file or stdin (`-`): one per line, trimmed, blank lines skipped,
/// each validated; errors name `FILE:LINE`.
fn read_keys(path: &Path) -> Result<Vec<String>, UsageError> {
    let name = if path == Path::new("-") {
        "stdin".to_owned()
    } else {
        path.display().to_string()
    };
    let reader: Box<dyn BufRead> = if path == Path::new("-") {
        Box::new(std::io::stdin().lock().take(MAX_KEYS_FILE_BYTES + 1))
    } else {
        let f = std::fs::File::open(path).map_err(|e| usage(format!("{name}: {e}")))?;
        Box::new(std::io::BufReader::new(f.take(MAX_KEYS_FILE_BYTES + 1)))
    };
    let mut keys = Vec::new();
    let mut read = 0u64;
    for (i, line) in reader.split(b'\n').enumerate() {
        let line_no = i + 1;
        let bytes = line.map_err(|e| usage(format!("{name}: {e}")))?;
        read += bytes.len() as u64 + 1;
        if read > MAX_KEYS_FILE_BYTES + 1 {
            return Err(usage(format!(
                "{name}: larger than the limit of {MAX_KEYS_FILE_BYTES} bytes"
            )));
        }
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            usage(format!(
                "{name}:{line_no}: not UTF-8 (invalid byte at offset {})",
                e.valid_up_to()
            ))
        })?;
        let key = text.trim();
        if key.is_empty() {
            continue;
        }
        validate_key(key).map_err(|why| usage(format!("{name}:{line_no}: key {why}")))?;
        keys.push(key.to_owned());
    }
    Ok(keys)
}

/// The cached URL as Fastly's URL purge wants it: host and path without the scheme
/// (`https://www.example.com/a?b` → `www.example.com/a?b`; a bare host gets `/`).
///
/// # Errors
/// Empty, over [`MAX_URL_BYTES`], a scheme other than http/https, no host, whitespace or
/// control characters.
fn cached_url(url: &str) -> Result<String, UsageError> {
    let bad = |why: &str| usage(format!("--url {}: {why}", quoted_excerpt(url)));
    if url.len() > MAX_URL_BYTES {
        return Err(bad(&format!("longer than {MAX_URL_BYTES} bytes")));
    }
    if let Some((at, c)) = url
        .char_indices()
        .find(|(_, c)| c.is_whitespace() || c.is_control())
    {
        return Err(bad(&format!(
            "contains whitespace or a control character (U+{:04X}) at byte {at}",
            u32::from(c)
        )));
    }
    let rest = match url.split_once("://") {
        Some((scheme, rest)) => {
            if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
                return Err(bad("the scheme must be http or https"));
            }
            rest
        }
        None => url,
    };
    let host_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let host = &rest[..host_end];
    if host.is_empty() {
        return Err(bad(
            "no host (expected host/path, e.g. www.example.com/a/b)",
        ));
    }
    if host.contains(['@', '#']) {
        return Err(bad("the host part must not hold '@' or '#'"));
    }
    let path = &rest[host_end..];
    let path = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("/{path}")
    };
    Ok(format!("{}{path}", host.to_ascii_lowercase()))
}

/// Refuses an API base that is not `https://…`, or `http://` on a loopback host (the
/// token must not cross a network in clear text).
fn validate_api_base(base: &str) -> Result<(), UsageError> {
    let lower = base.to_ascii_lowercase();
    if let Some(rest) = lower.strip_prefix("https://") {
        if rest.is_empty() || rest.starts_with('/') {
            return Err(usage(format!("--api-base {base:?}: no host")));
        }
        return Ok(());
    }
    let Some(rest) = lower.strip_prefix("http://") else {
        return Err(usage(format!(
            "--api-base {base:?}: expected an https:// URL"
        )));
    };
    let authority = rest.split('/').next().unwrap_or("");
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        authority.split(':').next().unwrap_or("")
    };
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        Ok(())
    } else {
        Err(usage(format!(
            "--api-base {base:?}: plain http is allowed only for a loopback host; \
             the API token must not cross a network in clear text"
        )))
    }
}

/// The service id and where it came from.
struct Service {
    id: String,
    source: String,
}

/// Service id precedence: `--service-id`, then `$FASTLY_SERVICE_ID`, then top-level
/// `service_id` in the manifest (`--manifest`, else `./fastly.toml` when it exists).
fn resolve_service_id(
    flag: Option<&str>,
    env: Option<std::ffi::OsString>,
    manifest: Option<&Path>,
) -> Result<Service, UsageError> {
    let (id, source) = if let Some(f) = flag {
        (f.to_owned(), "--service-id".to_owned())
    } else if let Some(v) = env.filter(|v| !v.is_empty()) {
        let v = v
            .into_string()
            .map_err(|_| usage(format!("${SERVICE_ID_ENV} is not UTF-8")))?;
        (v, format!("${SERVICE_ID_ENV}"))
    } else {
        let path = manifest.unwrap_or(Path::new(DEFAULT_MANIFEST));
        match read_manifest_service_id(path, manifest.is_some())? {
            Some(id) => (id, path.display().to_string()),
            None => {
                return Err(usage(format!(
                    "no service id: pass --service-id, set ${SERVICE_ID_ENV}, or add \
                     service_id = \"…\" to {}",
                    path.display()
                )));
            }
        }
    };
    let id = id.trim().to_owned();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(usage(format!(
            "service id {} (from {source}) is not a Fastly service id: expected ASCII \
             letters and digits only",
            quoted_excerpt(&id)
        )));
    }
    Ok(Service { id, source })
}

/// Top-level `service_id` of a Fastly manifest. A missing default manifest is `None`; a
/// missing explicit one, unreadable or invalid TOML, or a non-string `service_id` is an
/// error.
fn read_manifest_service_id(path: &Path, explicit: bool) -> Result<Option<String>, UsageError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => return Ok(None),
        Err(e) => return Err(usage(format!("{}: {e}", path.display()))),
    };
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        usage(format!("{}: invalid TOML: {}", path.display(), e.message()))
    })?;
    match table.get("service_id") {
        None => Ok(None),
        Some(toml::Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(usage(format!(
            "{}: service_id must be a string, found {}",
            path.display(),
            other.type_str()
        ))),
    }
}

/// The token from `$FASTLY_API_TOKEN`: present, non-empty, printable ASCII without spaces
/// (it goes in a header). Never echoed.
fn read_token(env: Option<std::ffi::OsString>) -> Result<String, UsageError> {
    let Some(raw) = env.filter(|v| !v.is_empty()) else {
        return Err(usage(format!(
            "${TOKEN_ENV} is not set: export an API token with the purge_select scope \
             (purge_all for --all)"
        )));
    };
    let token = raw
        .into_string()
        .ok()
        .filter(|t| t.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or_else(|| {
            usage(format!(
                "${TOKEN_ENV} holds characters a header cannot carry (expected printable \
                 ASCII without spaces); its value is not shown"
            ))
        })?;
    Ok(token)
}

/// `cachet purge --etcd/--node`: the keys purged in an Envoy fleet (`crate::fleet`).
fn fleet(args: &PurgeArgs) -> ExitCode {
    let keys = match keys(args) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("cachet: purge: {e}");
            return ExitCode::from(2);
        }
    };
    let dest = match (&args.etcd, &args.node) {
        (Some(url), _) => match args.prefix.prefix() {
            Ok(prefix) => crate::fleet::Dest::Etcd {
                url: url.clone(),
                prefix,
            },
            Err(e) => {
                eprintln!("cachet: purge: {e}");
                return ExitCode::from(2);
            }
        },
        (None, node) => crate::fleet::Dest::Node(node.clone().unwrap_or_default()),
    };
    let write = crate::fleet::Write::Purge {
        keys,
        soft: args.soft,
    };
    crate::fleet::run(&dest, &write)
}

/// The validated, deduplicated keys of `--key` and `--keys-from` (duplicates reported on
/// stderr).
fn keys(args: &PurgeArgs) -> Result<Vec<String>, UsageError> {
    let mut keys = Vec::new();
    for (i, k) in args.key.iter().enumerate() {
        validate_key(k).map_err(|why| usage(format!("--key #{}: key {why}", i + 1)))?;
        keys.push(k.clone());
    }
    if let Some(path) = &args.keys_from {
        keys.extend(read_keys(path)?);
    }
    let before = keys.len();
    let mut seen = HashSet::new();
    keys.retain(|k| seen.insert(k.clone()));
    if keys.is_empty() {
        return Err(usage("no surrogate keys to purge"));
    }
    if keys.len() < before {
        eprintln!(
            "cachet: purge: {} duplicate key(s) ignored",
            before - keys.len()
        );
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_validated_precisely() {
        assert!(validate_key("post-42").is_ok());
        assert_eq!(validate_key("").unwrap_err(), "is empty");
        assert!(
            validate_key("a b")
                .unwrap_err()
                .starts_with("\"a b\" contains whitespace (U+0020) at byte 1")
        );
        assert!(
            validate_key("a\u{3000}b")
                .unwrap_err()
                .contains("(U+3000) at byte 1")
        );
        assert!(
            validate_key("a\u{7}")
                .unwrap_err()
                .contains("control character (U+0007)")
        );
        assert!(validate_key(&"k".repeat(1024)).is_ok());
        assert!(
            validate_key(&"k".repeat(1025))
                .unwrap_err()
                .contains("is 1025 bytes, more than Fastly's limit of 1024")
        );
    }

    #[test]
    fn cached_urls_drop_the_scheme() {
        let c = |u: &str| cached_url(u).map_err(|e| e.0);
        assert_eq!(
            c("https://WWW.Example.com/a/B?x=1").unwrap(),
            "www.example.com/a/B?x=1"
        );
        assert_eq!(c("www.example.com").unwrap(), "www.example.com/");
        assert_eq!(c("http://h.example?q").unwrap(), "h.example/?q");
        assert!(c("ftp://h/x").unwrap_err().contains("http or https"));
        assert!(c("https:///x").unwrap_err().contains("no host"));
        assert!(c("h/a b").unwrap_err().contains("at byte 3"));
    }

    #[test]
    fn api_base_must_be_https_or_loopback() {
        assert!(validate_api_base("https://api.fastly.com").is_ok());
        assert!(validate_api_base("http://127.0.0.1:8080").is_ok());
        assert!(validate_api_base("http://localhost:1/").is_ok());
        assert!(validate_api_base("http://[::1]:9").is_ok());
        assert!(validate_api_base("http://api.example.com").is_err());
        assert!(validate_api_base("ftp://x").is_err());
    }

    #[test]
    fn service_id_precedence() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("fastly.toml");
        std::fs::write(
            &manifest,
            "manifest_version = 3\nservice_id = \"FromToml1\"\n",
        )
        .unwrap();
        let r = |flag: Option<&str>, env: Option<&str>| {
            resolve_service_id(flag, env.map(Into::into), Some(&manifest)).map(|s| s.id)
        };
        assert_eq!(r(Some("Flag1"), Some("Env1")).unwrap(), "Flag1");
        assert_eq!(r(None, Some("Env1")).unwrap(), "Env1");
        assert_eq!(r(None, None).unwrap(), "FromToml1");
        assert!(
            r(Some("a/b"), None)
                .unwrap_err()
                .0
                .contains("letters and digits")
        );
        std::fs::write(&manifest, "service_id = 5\n").unwrap();
        assert!(
            r(None, None)
                .unwrap_err()
                .0
                .contains("must be a string, found integer")
        );
        std::fs::write(&manifest, "name = \"x\"\n").unwrap();
        assert!(r(None, None).unwrap_err().0.contains("no service id"));
        let missing = dir.path().join("nope.toml");
        assert!(resolve_service_id(None, None, Some(&missing)).is_err());
    }

    #[test]
    fn tokens_are_checked_and_never_echoed() {
        assert!(
            read_token(None)
                .unwrap_err()
                .0
                .contains("FASTLY_API_TOKEN is not set")
        );
        let e = read_token(Some("has space".into())).unwrap_err().0;
        assert!(!e.contains("has space"));
        assert_eq!(read_token(Some("abc123".into())).unwrap(), "abc123");
    }
}
