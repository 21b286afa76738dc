//! A blocking client for Fastly's purge API: the three purge calls, retries with backoff, and precise errors.
//!
//! Endpoints (Fastly API reference, "Purging"):
//!
//! | Call | Request | 200 body |
//! |---|---|---|
//! | surrogate keys | `POST /service/{service_id}/purge`, JSON `{"surrogate_keys":[…]}` (≤ 256 keys) | `{"k1":"<purge id>",…}` |
//! | one URL | `POST /purge/{host}/{path}` (the cached URL without its scheme) | `{"status":"ok","id":"…"}` |
//! | everything | `POST /service/{service_id}/purge_all` | `{"status":"ok"}` |
//!
//! Every call carries `Fastly-Key: <token>`; a soft purge (mark stale instead of
//! evicting) adds `Fastly-Soft-Purge: 1`. Errors come as `{"msg":"…","detail":"…"}`.
//! 429 and 5xx responses and transport failures are retried with exponential backoff,
//! honouring `Retry-After` (seconds) or `Fastly-RateLimit-Reset` (Unix time). Purges are
//! idempotent, so a retried call cannot do harm. Redirects are never followed, so the
//! token is only ever sent to the configured API base.

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;

/// The real API's base URL.
pub const DEFAULT_API_BASE: &str = "https://api.fastly.com";

/// Most surrogate keys Fastly accepts in one `POST /service/{id}/purge` call.
pub const MAX_KEYS_PER_CALL: usize = 256;

/// Deadline of one HTTP exchange (connect, send, receive), from the first byte to the
/// last.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest response body read, in bytes (a 256-key answer is about 40 KiB).
pub const MAX_RESPONSE_BYTES: u64 = 4 * 1024 * 1024;

/// Longest excerpt of an unexpected response body quoted in an error, in characters.
const MAX_BODY_EXCERPT_CHARS: usize = 200;

/// When and how often a failed call is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Attempts in all, the first included (at least 1).
    pub max_attempts: u32,
    /// Delay after the first failed attempt; doubled after each further one.
    pub base_delay: Duration,
    /// Upper bound of any one delay, also of one asked for by `Retry-After`.
    pub max_delay: Duration,
}

impl Retry {
    /// The delay after failed attempt `attempt` (1-based): `base_delay · 2^(attempt-1)`,
    /// raised to the server's `hint` (`Retry-After`) when that is longer, then capped at
    /// `max_delay`. Saturates instead of overflowing.
    pub fn delay(&self, attempt: u32, hint: Option<Duration>) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1))
            .unwrap_or(u32::MAX);
        let backoff = self.base_delay.saturating_mul(factor);
        backoff
            .max(hint.unwrap_or(Duration::ZERO))
            .min(self.max_delay)
    }
}

/// How long the server asked us to wait: `Retry-After: <seconds>` (RFC 9110 §10.2.3; the
/// HTTP-date form is not used by Fastly and is ignored), else
/// `Fastly-RateLimit-Reset: <Unix seconds>` minus `now_unix_s`. `None` when neither is
/// present or parseable.
pub fn retry_hint(
    retry_after: Option<&str>,
    rate_limit_reset: Option<&str>,
    now_unix_s: u64,
) -> Option<Duration> {
    if let Some(secs) = retry_after.and_then(|v| v.trim().parse::<u64>().ok()) {
        return Some(Duration::from_secs(secs));
    }
    let reset = rate_limit_reset.and_then(|v| v.trim().parse::<u64>().ok())?;
    Some(Duration::from_secs(reset.saturating_sub(now_unix_s)))
}

/// A purge call that failed for good (after retries, when retryable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The last HTTP status, or `None` for a transport failure.
    pub status: Option<u16>,
    /// One line for people: status, Fastly's `msg`/`detail`, and what to check.
    pub message: String,
}

impl ApiError {
    /// `true` for 401, 403 and 404: the token or the service id is wrong, so every
    /// further call would fail the same way and is not sent.
    pub fn is_fatal(&self) -> bool {
        matches!(self.status, Some(401 | 403 | 404))
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Fastly's error body: `{"msg":"…","detail":"…"}`.
#[derive(Deserialize)]
struct ErrorBody {
    msg: Option<String>,
    detail: Option<String>,
}

/// Fastly's body for single purges: `{"status":"ok","id":"…"}`.
#[derive(Deserialize)]
struct StatusBody {
    status: Option<String>,
    id: Option<String>,
}

/// What a call is, for messages: which scope the token needs and what a 404 means.
#[derive(Clone, Copy)]
enum Call<'a> {
    Keys { service_id: &'a str },
    Url,
    All { service_id: &'a str },
}

/// A client for one API base and token. The token is only ever put in the `Fastly-Key`
/// header; every message this client produces has it redacted.
pub struct Client {
    agent: ureq::Agent,
    base: String,
    token: String,
    retry: Retry,
}

impl Client {
    /// A client for `base` (`https://…`, or `http://` for a loopback test server; a
    /// trailing `/` is ignored).
    pub fn new(base: &str, token: String, retry: Retry) -> Self {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .user_agent(concat!("cachet/", env!("CARGO_PKG_VERSION")))
            .build();
        Client {
            agent: ureq::Agent::new_with_config(config),
            base: base.trim_end_matches('/').to_owned(),
            token,
            retry,
        }
    }

    /// Purges up to [`MAX_KEYS_PER_CALL`] surrogate keys of `service_id` in one call and
    /// returns Fastly's map from key to purge id (a key missing from it was not
    /// acknowledged).
    ///
    /// # Errors
    /// [`ApiError`] when the call fails for good.
    pub fn purge_keys(
        &self,
        service_id: &str,
        keys: &[String],
        soft: bool,
    ) -> Result<HashMap<String, String>, ApiError> {
        let body = serde_json::json!({ "surrogate_keys": keys }).to_string();
        let path = format!("/service/{service_id}/purge");
        let (status, text) = self.post(
            &path,
            Some(body.as_bytes()),
            soft,
            Call::Keys { service_id },
        )?;
        serde_json::from_str::<HashMap<String, String>>(&text)
            .map_err(|_| self.unexpected_body(status, &text))
    }

    /// Purges one cached URL, given without its scheme (`www.example.com/a/b?c`), and
    /// returns the purge id.
    ///
    /// # Errors
    /// [`ApiError`] when the call fails for good.
    pub fn purge_url(&self, cached_url: &str, soft: bool) -> Result<String, ApiError> {
        let path = format!("/purge/{cached_url}");
        let (status, text) = self.post(&path, None, soft, Call::Url)?;
        match serde_json::from_str::<StatusBody>(&text) {
            Ok(StatusBody {
                status: Some(s),
                id: Some(id),
            }) if s == "ok" => Ok(id),
            _ => Err(self.unexpected_body(status, &text)),
        }
    }

    /// Purges everything cached for `service_id` (hard purge only: Fastly has no soft
    /// purge-all).
    ///
    /// # Errors
    /// [`ApiError`] when the call fails for good.
    pub fn purge_all(&self, service_id: &str) -> Result<(), ApiError> {
        let path = format!("/service/{service_id}/purge_all");
        let (status, text) = self.post(&path, None, false, Call::All { service_id })?;
        match serde_json::from_str::<StatusBody>(&text) {
            Ok(StatusBody {
                status: Some(s), ..
            }) if s == "ok" => Ok(()),
            _ => Err(self.unexpected_body(status, &text)),
        }
    }

    /// POSTs to `path` with retries; returns the 2xx status and body.
    fn post(
        &self,
        path: &str,
        body: Option<&[u8]>,
        soft: bool,
        call: Call<'_>,
    ) -> Result<(u16, String), ApiError> {
        let url = format!("{}{path}", self.base);
        let max_attempts = self.retry.max_attempts.max(1);
        let mut attempt = 1;
        loop {
            let (error, hint) = match self.send(&url, body, soft) {
                Ok((status, _, text)) if (200..300).contains(&status) => return Ok((status, text)),
                Ok((status, hint, text)) if status == 429 || status >= 500 => {
                    (self.status_error(status, &text, call), hint)
                }
                Ok((status, _, text)) => return Err(self.status_error(status, &text, call)),
                Err(e) => (
                    ApiError {
                        status: None,
                        message: self.redact(&format!("cannot reach {}: {e}", self.base)),
                    },
                    None,
                ),
            };
            if attempt >= max_attempts {
                let tries = if max_attempts == 1 {
                    "1 attempt".to_owned()
                } else {
                    format!("{max_attempts} attempts")
                };
                return Err(ApiError {
                    message: format!("{} (gave up after {tries})", error.message),
                    ..error
                });
            }
            let delay = self.retry.delay(attempt, hint);
            eprintln!(
                "cachet: POST {path}: {}; retry {attempt} of {} in {:.3} s",
                error.message,
                max_attempts - 1,
                delay.as_secs_f64()
            );
            std::thread::sleep(delay);
            attempt += 1;
        }
    }

    /// One exchange: `(status, retry hint, body)` or a transport error.
    fn send(
        &self,
        url: &str,
        body: Option<&[u8]>,
        soft: bool,
    ) -> Result<(u16, Option<Duration>, String), ureq::Error> {
        let mut req = self
            .agent
            .post(url)
            .header("Fastly-Key", &self.token)
            .header("Accept", "application/json");
        if soft {
            req = req.header("Fastly-Soft-Purge", "1");
        }
        let mut resp = match body {
            Some(b) => req.header("Content-Type", "application/json").send(b)?,
            None => req.send_empty()?,
        };
        let status = resp.status().as_u16();
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let hint = retry_hint(
            header("retry-after").as_deref(),
            header("fastly-ratelimit-reset").as_deref(),
            now,
        );
        let text = resp
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .lossy_utf8(true)
            .read_to_string()?;
        Ok((status, hint, text))
    }

    /// The message for a non-2xx status: `403 Forbidden: <msg> (<detail>) — <what to check>`.
    fn status_error(&self, status: u16, body: &str, call: Call<'_>) -> ApiError {
        let reason = ureq::http::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("");
        let mut message = format!("{status} {reason}").trim_end().to_owned();
        let said = describe_body(body);
        if !said.is_empty() {
            message.push_str(": ");
            message.push_str(&said);
        }
        let scope = match call {
            Call::All { .. } => "purge_all",
            Call::Keys { .. } | Call::Url => "purge_select",
        };
        let advice = match (status, call) {
            (401, _) => Some("check FASTLY_API_TOKEN".to_owned()),
            (403, Call::Keys { service_id } | Call::All { service_id }) => Some(format!(
                "the token needs the {scope} scope and access to service {service_id}"
            )),
            (403, Call::Url) => Some(format!("the token needs the {scope} scope")),
            (404, Call::Keys { service_id } | Call::All { service_id }) => {
                Some(format!("check the service id {service_id:?}"))
            }
            (404, Call::Url) => Some("check the URL's host: no service caches it".to_owned()),
            _ => None,
        };
        if let Some(a) = advice {
            message.push_str(" — ");
            message.push_str(&a);
        }
        ApiError {
            status: Some(status),
            message: self.redact(&message),
        }
    }

    fn unexpected_body(&self, status: u16, body: &str) -> ApiError {
        ApiError {
            status: Some(status),
            message: self.redact(&format!(
                "{status}: unexpected response body {:?}",
                excerpt(body)
            )),
        }
    }

    /// `text` with every occurrence of the token replaced, so no message can leak it.
    fn redact(&self, text: &str) -> String {
        if self.token.is_empty() {
            text.to_owned()
        } else {
            text.replace(&self.token, "<redacted>")
        }
    }
}

/// Fastly's `msg` and `detail` from an error body, else an excerpt of the body.
fn describe_body(body: &str) -> String {
    match serde_json::from_str::<ErrorBody>(body) {
        Ok(ErrorBody { msg, detail }) => match (msg, detail) {
            (Some(m), Some(d)) if !d.is_empty() => format!("{m} ({d})"),
            (Some(m), _) => m,
            (None, Some(d)) => d,
            (None, None) => String::new(),
        },
        Err(_) => excerpt(body),
    }
}

/// The first [`MAX_BODY_EXCERPT_CHARS`] characters of `body`, whitespace collapsed.
fn excerpt(body: &str) -> String {
    let flat = body.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out: String = flat.chars().take(MAX_BODY_EXCERPT_CHARS).collect();
    if flat.chars().count() > MAX_BODY_EXCERPT_CHARS {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const RETRY: Retry = Retry {
        max_attempts: 5,
        base_delay: Duration::from_millis(500),
        max_delay: Duration::from_secs(60),
    };

    #[test]
    fn backoff_doubles_from_the_base() {
        let d: Vec<_> = (1..=4).map(|a| RETRY.delay(a, None)).collect();
        assert_eq!(
            d,
            [500, 1000, 2000, 4000].map(Duration::from_millis).to_vec()
        );
    }

    #[test]
    fn retry_after_wins_when_longer_and_is_capped() {
        assert_eq!(
            RETRY.delay(1, Some(Duration::from_secs(3))),
            Duration::from_secs(3)
        );
        assert_eq!(
            RETRY.delay(4, Some(Duration::from_secs(1))),
            Duration::from_secs(4)
        );
        assert_eq!(
            RETRY.delay(1, Some(Duration::from_secs(3600))),
            Duration::from_secs(60)
        );
        assert_eq!(RETRY.delay(200, None), Duration::from_secs(60));
    }

    #[test]
    fn hints_from_headers() {
        assert_eq!(
            retry_hint(Some(" 7 "), None, 0),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_hint(None, Some("1000"), 990),
            Some(Duration::from_secs(10))
        );
        assert_eq!(retry_hint(None, Some("900"), 990), Some(Duration::ZERO));
        assert_eq!(
            retry_hint(Some("Wed, 21 Oct 2015 07:28:00 GMT"), None, 0),
            None
        );
        assert_eq!(
            retry_hint(Some("2"), Some("5000"), 0),
            Some(Duration::from_secs(2))
        );
        assert_eq!(retry_hint(None, None, 0), None);
    }

    #[test]
    fn error_bodies() {
        assert_eq!(
            describe_body(r#"{"msg":"Record not found"}"#),
            "Record not found"
        );
        assert_eq!(
            describe_body(r#"{"msg":"Bad request","detail":"too many keys"}"#),
            "Bad request (too many keys)"
        );
        assert_eq!(
            describe_body("<html>\n oops </html>"),
            "<html> oops </html>"
        );
        assert_eq!(excerpt(&"x".repeat(300)).chars().count(), 201);
    }

    #[test]
    fn messages_never_hold_the_token() {
        let c = Client::new("http://127.0.0.1:9", "s3cr3t".into(), RETRY);
        let e = c.status_error(400, r#"{"msg":"bad key s3cr3t"}"#, Call::Url);
        assert_eq!(e.message, "400 Bad Request: bad key <redacted>");
        let e = c.status_error(401, "{}", Call::Keys { service_id: "S" });
        assert_eq!(e.message, "401 Unauthorized — check FASTLY_API_TOKEN");
        assert!(e.is_fatal());
    }
}
