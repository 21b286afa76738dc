//! Varnish-compatible bans: expression parser, ban list with indexes that scale, lookup checks and the lurker.
//!
//! A *ban* invalidates every cached object, inserted before it, that matches an
//! expression such as `obj.http.x-url ~ "^/blog/alice/"` (Varnish Users Guide, "Bans";
//! `varnish-cli(7)`, `ban`). This crate reproduces Varnish 7.4's semantics (checked
//! against Varnish 7.1 on this machine, with 7.1's parser bugs fixed as 7.4 did) and
//! removes its scaling limit: Varnish tests an old object against every newer ban, so
//! lookups slow down as the list grows; here common ban shapes are indexed.
//!
//! * [`BanExpr`]: parse and display expressions (`field op arg && …`); [`BanError`] says
//!   where (column) and why.
//! * [`BanList`]: ordered bans, deduplication, [`BanList::check`] (indexed) and
//!   [`BanList::check_linear`] (Varnish's scan), retirement of old bans.
//! * [`BanCache`]: the list plus the objects it guards ([`BanTarget`]);
//!   [`BanCache::lookup`] and the budgeted [`Lurker`] for lurker-friendly bans.
//! * [`evaluate_scenario`]: JSON scenarios for the CLI and the Varnish differential test.
//!
//! ```
//! use cachet_ban::{BanId, BanList, Object, Request};
//!
//! let mut bans = BanList::new();
//! let added = bans.add(r#"req.url ~ "^/blog/alice/" && obj.status == 200"#, 100.0)?;
//! assert!(!added.lurker_friendly);
//! let obj = Object::new("/blog/alice/1", 50.0);
//! let req = Request::new("/blog/alice/1");
//! assert!(bans.check(&obj, &req, BanId::ZERO).is_banned());
//! // Objects inserted after the ban are not affected.
//! assert!(!bans.check(&Object::new("/blog/alice/1", 150.0), &req, BanId::ZERO).is_banned());
//! # Ok::<(), cachet_ban::BanError>(())
//! ```
//!
//! # Semantics (Varnish 7.4)
//!
//! * Fields: `req.url`, `req.http.<name>`, `obj.status`, `obj.http.<name>` (strings:
//!   `==`, `!=`, `~`, `!~`) and `obj.ttl`, `obj.age`, `obj.grace`, `obj.keep`
//!   (durations: `==`, `!=`, `<`, `<=`, `>`, `>=`; see [`BanDuration`]). Conditions are
//!   joined by `&&` only. Header names are case-insensitive, values case-sensitive.
//! * `obj.status` compares as a decimal string: `obj.status == 200` matches a 200,
//!   `obj.status ~ ^5` every 5xx, and `obj.status < 300` is refused.
//! * A missing header: `!=` matches, `==`, `~` and `!~` do not (verified on 7.1).
//! * `obj.ttl` and `obj.age` are fixed at the moment the ban is added: the ban stores its
//!   `added_at_s` and compares [`BanTarget::ttl_s_at`]`(added_at_s)` (remaining TTL then,
//!   negative once expired) and [`BanTarget::age_s_at`]`(added_at_s)`, whenever the test
//!   actually runs. `obj.grace`/`obj.keep` are the object's values.
//! * 7.1 parser bugs not reproduced: `req.urlfoo` (accepted as `req.url` by 7.1) and
//!   `obj.http.` with an empty name (crashes 7.1's worker) are refused.
//!
//! # Regex dialect
//!
//! Varnish uses PCRE2; this crate uses the `regex` crate (linear time, no backtracking).
//! Differences an operator may meet: no backreferences (`\1`), no look-around
//! (`(?=…)`, `(?<!…)`), no possessive quantifiers or atomic groups, no `\Z` (use `\z`),
//! `$` matches only at the very end (PCRE's `$` also matches before a final `\n`), `\s`/`\d`/`\w` are Unicode-aware, and Unicode case folding (`(?i)` on
//! non-ASCII) is refused because the workspace builds `regex` without its case tables.
//! Such patterns are refused with [`BanError::BadRegex`], never misread. Compiled
//! programs are bounded by [`REGEX_SIZE_LIMIT`] and [`REGEX_DFA_SIZE_LIMIT`].
//!
//! # Indexes
//!
//! Recognized shapes are answered without a regex engine and filed in indexes: `==` or
//! `~ "^…$"` (exact value), `~ "^…"` (anchored literal prefix, radix tree; a regex with
//! a literal prefix is filed under the prefix and verified), `~ "(^|\s)KEY(\s|$)"`
//! (whitespace-token membership: the surrogate-key form, see
//! [`BanList::add_surrogate_key_ban`] and [`SURROGATE_KEY_HEADER`]) and a plain literal
//! (substring). Other bans are tested one by one, like Varnish.
#![forbid(unsafe_code)]

mod anchor;
mod cache;
mod duration;
mod error;
mod expr;
mod index;
mod list;
mod matcher;
mod scenario;
mod target;

pub use anchor::{Anchor, AnchorKind, anchor};
pub use cache::{BanCache, DEFAULT_LURKER_AGE_S, Eviction, Lurker, LurkerProgress, ObjectId};
pub use duration::{BanDuration, DurationUnit};
pub use error::BanError;
pub use expr::{BanExpr, Condition, Field, Op, Value};
pub use list::{Added, BanId, BanList, Verdict};
pub use scenario::{
    BanOutcome, LookupOutcome, Scenario, ScenarioBan, ScenarioLookup, ScenarioObject,
    ScenarioReport, ScenarioRequest, evaluate, evaluate_scenario,
};
pub use target::{BanRequest, BanTarget, Object, Request, SURROGATE_KEY_HEADER, derived_header};

/// Longest ban expression accepted, bytes (8 KiB). Varnish's own bound is the CLI line
/// limit (`cli_limit`, 48 KiB by default); real bans are far shorter.
pub const MAX_EXPR_BYTES: usize = 8 * 1024;

/// Most conditions joined by `&&` in one expression.
pub const MAX_CONDITIONS: usize = 32;

/// Longest surrogate key accepted by [`BanList::add_surrogate_key_ban`], bytes (Fastly's
/// per-key limit).
pub const MAX_SURROGATE_KEY_BYTES: usize = 1024;

/// Size limit of one compiled ban regex (`regex::RegexBuilder::size_limit`), bytes.
pub const REGEX_SIZE_LIMIT: usize = 256 * 1024;

/// Lazy-DFA cache limit of one ban regex (`regex::RegexBuilder::dfa_size_limit`), bytes.
pub const REGEX_DFA_SIZE_LIMIT: usize = 256 * 1024;
