//! `cachet simulate --generate N`: a realistic, deterministic blog access log for the demo.
//!
//! The traffic is the demo platform's (`crates/demo-origin`, `edge-app/cachet.toml`):
//! `blog.example` serves blog tops, entries, feeds, the index, robots.txt, `/account`
//! (private) and `/api/echo` (no-store); `cdn.example` serves public blogs' design CSS and
//! `/static/app.js`; private blogs' CSS comes from `blog.example`, uncached. Popularity is
//! Zipf-like (blogs and entries), the User-Agent mix spans desktop browsers, iPhones,
//! Android phones (including app UAs without `Mobile`), iPads (including desktop mode),
//! crawlers and feed readers, with realistic version spread; a share of page views carry
//! tracking parameters. Response sizes follow the demo origin's real pages. Everything is
//! drawn from one xoshiro256++ stream seeded by `--seed`: the same seed gives the same log.

use std::io::{self, Write};

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

use crate::logfmt::format_clf;

/// Blogs on the generated platform, most popular first.
pub const BLOGS: [&str; 24] = [
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory",
    "niaj", "olivia", "peggy", "quinn", "rupert", "sybil", "trent", "uma", "victor", "walter",
    "xena", "yuri", "zoe",
];

/// Private blogs (their pages answer `private, no-store`; their CSS is served by the
/// blog host, uncached), as `carol` is on the demo origin.
pub const PRIVATE_BLOGS: [&str; 3] = ["carol", "mallory", "xena"];

/// Entry ids per blog (`/blog/{name}/entry/1..=ENTRIES`).
pub const ENTRIES: usize = 120;

/// Body sizes in bytes of the demo origin's pages (checked against the running origin
/// in `tests/simulate.rs`): entry PC / smartphone, blog top PC / smartphone, feed, CSS,
/// index, account, app.js (served gzip-encoded), echo.
pub mod sizes {
    /// Entry page, PC layout.
    pub const ENTRY_PC: u64 = 4850;
    /// Entry page, smartphone layout.
    pub const ENTRY_SP: u64 = 4300;
    /// Blog top, PC layout.
    pub const TOP_PC: u64 = 6160;
    /// Blog top, smartphone layout.
    pub const TOP_SP: u64 = 4460;
    /// RSS feed.
    pub const FEED: u64 = 3990;
    /// Design CSS.
    pub const CSS: u64 = 4160;
    /// Platform index.
    pub const INDEX: u64 = 370;
    /// Account page.
    pub const ACCOUNT: u64 = 253;
    /// `/static/app.js` as sent (gzip-encoded by the origin).
    pub const APP_JS_GZIP: u64 = 1020;
    /// `/api/echo` JSON.
    pub const ECHO: u64 = 420;
    /// `not found\n`.
    pub const NOT_FOUND: u64 = 10;
    /// `moved\n`.
    pub const MOVED: u64 = 6;
    /// `this blog is private\n`.
    pub const PRIVATE_FEED: u64 = 21;
    /// robots.txt as the origin app would have served it.
    pub const ROBOTS: u64 = 96;
}

/// Output format of the generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum GenFormat {
    /// Apache `vhost_combined` (`host:port` first), plus the response `Cache-Control` as a
    /// last quoted field unless `--no-cache-control`.
    Combined,
    /// JSON lines: `time`, `host`, `url`, `method`, `user-agent`, `status`, `bytes`,
    /// `cache_control`.
    Json,
}

/// Generator options.
#[derive(Debug, Clone)]
pub struct Options {
    /// Lines to write.
    pub lines: u64,
    /// PRNG seed.
    pub seed: u64,
    /// Time of the first request, seconds since the epoch.
    pub start: i64,
    /// Mean page views per second (Poisson arrivals; page assets follow in the same second).
    pub rate: f64,
    /// Output format.
    pub format: GenFormat,
    /// Write the response `Cache-Control` (combined: as a last quoted field).
    pub cache_control: bool,
}

/// What [`generate`] wrote, for the closing line of `--generate`.
#[derive(Default)]
pub struct Summary {
    /// Lines written.
    pub lines: u64,
    /// Distinct hosts, in order of first appearance.
    pub hosts: Vec<&'static str>,
    /// Distinct URLs (host + request target), exact up to
    /// [`crate::distinct::EXACT_LIMIT`], then estimated.
    pub urls: crate::distinct::Distinct,
    /// Times of the first and last line, seconds since the epoch.
    pub span: Option<(i64, i64)>,
}

impl Summary {
    fn note(&mut self, t: i64, req: &Req) {
        self.lines += 1;
        if !self.hosts.contains(&req.host) {
            self.hosts.push(req.host);
        }
        self.urls.insert(crate::replay::hash_parts(&[
            req.host.as_bytes(),
            req.target.as_bytes(),
        ]));
        self.span = Some(self.span.map_or((t, t), |(f, _)| (f, t)));
    }
}

/// One generated request.
struct Req {
    host: &'static str,
    method: &'static str,
    target: String,
    status: u16,
    bytes: u64,
    referer: &'static str,
    cache_control: &'static str,
}

/// Cumulative weights for Zipf-like popularity: rank k has weight 1 / k^s.
struct Zipf(Vec<f64>);

impl Zipf {
    fn new(n: usize, s: f64) -> Self {
        let mut acc = 0.0;
        let cdf = (1..=n)
            .map(|k| {
                #[allow(clippy::cast_precision_loss, reason = "small n")]
                let w = 1.0 / (k as f64).powf(s);
                acc += w;
                acc
            })
            .collect();
        Self(cdf)
    }

    /// A rank in `0..n`.
    fn sample(&self, rng: &mut Xoshiro256PlusPlus) -> usize {
        let total = self.0.last().copied().unwrap_or(1.0);
        let u = rng.random::<f64>() * total;
        self.0.partition_point(|&c| c < u).min(self.0.len() - 1)
    }
}

/// Picks from `(weight, value)` pairs.
fn weighted<T: Copy>(rng: &mut Xoshiro256PlusPlus, items: &[(u32, T)]) -> T {
    let total: u32 = items.iter().map(|(w, _)| w).sum();
    let mut x = rng.random_range(0..total);
    for &(w, v) in items {
        if x < w {
            return v;
        }
        x -= w;
    }
    items[items.len() - 1].1
}

/// A client: its User-Agent and whether it renders the smartphone layout.
struct Client {
    ua: String,
    phone: bool,
    crawler: bool,
}

#[derive(Clone, Copy)]
enum Family {
    ChromeWin,
    ChromeMac,
    SafariMac,
    FirefoxWin,
    Edge,
    IphoneSafari,
    IphoneApp,
    AndroidChrome,
    AndroidApp,
    AndroidTablet,
    Ipad,
    IpadDesktop,
    Googlebot,
    GooglebotPhone,
    Bingbot,
    OtherBot,
    FeedReader,
    Tool,
}

/// The general browsing mix (weights per mille), loosely after public browser-share
/// statistics for a Japanese blog audience: phones are the majority.
const GENERAL: [(u32, Family); 17] = [
    (200, Family::ChromeWin),
    (60, Family::ChromeMac),
    (45, Family::SafariMac),
    (35, Family::FirefoxWin),
    (40, Family::Edge),
    (230, Family::IphoneSafari),
    (45, Family::IphoneApp),
    (150, Family::AndroidChrome),
    (25, Family::AndroidApp),
    (10, Family::AndroidTablet),
    (20, Family::Ipad),
    (20, Family::IpadDesktop),
    (40, Family::Googlebot),
    (25, Family::GooglebotPhone),
    (25, Family::Bingbot),
    (20, Family::OtherBot),
    (10, Family::Tool),
];

const APPS: [&str; 5] = [
    "Instagram 334.0.4.32.98",
    "Line/14.6.1",
    "FBAV/466.0.0.48.106",
    "Twitter for iPhone/10.34",
    "Hatena::Bookmark/5.4.0",
];
const ANDROID_MODELS: [&str; 8] = [
    "Pixel 7",
    "Pixel 8a",
    "SM-S911B",
    "SM-A546E",
    "SO-51D",
    "SH-53D",
    "2201116SG",
    "CPH2451",
];
const BOTS: [&str; 4] = [
    "Mozilla/5.0 (compatible; YandexBot/3.0; +http://yandex.com/bots)",
    "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; ClaudeBot/1.0; +claudebot@anthropic.com)",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/13.1.1 Safari/605.1.15 (Applebot/0.1; +http://www.apple.com/go/applebot)",
    "Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)",
];
const FEED_READERS: [&str; 4] = [
    "Feedly/1.0 (+http://www.feedly.com/fetcher.html; {n} subscribers; like FeedFetcher-Google)",
    "Inoreader/1.0 (+http://www.inoreader.com/feed-fetcher; {n} subscribers; )",
    "NetNewsWire (RSS Reader; https://netnewswire.com/)",
    "Tiny Tiny RSS/23.{n} (https://tt-rss.org/)",
];
const TOOLS: [&str; 3] = ["curl/8.5.0", "Wget/1.21.4", "python-requests/2.31.0"];
const REFERERS: [(u32, &str); 6] = [
    (40, "-"),
    (25, "https://www.google.com/"),
    (12, "https://blog.example/"),
    (10, "https://b.hatena.ne.jp/"),
    (8, "https://t.co/"),
    (5, "https://www.facebook.com/"),
];

fn chrome_version(rng: &mut Xoshiro256PlusPlus, reduced: bool) -> String {
    let major = rng.random_range(118..=131);
    if reduced {
        format!("{major}.0.0.0")
    } else {
        format!(
            "{major}.0.{}.{}",
            rng.random_range(5900..=6800),
            rng.random_range(0..=230)
        )
    }
}

fn ios_version(rng: &mut Xoshiro256PlusPlus) -> (u32, u32) {
    (rng.random_range(16..=18), rng.random_range(0..=6))
}

#[allow(
    clippy::too_many_lines,
    reason = "one table of UA families, each a format string"
)]
fn client(rng: &mut Xoshiro256PlusPlus, family: Family) -> Client {
    let (ua, phone, crawler) = match family {
        Family::ChromeWin => {
            let reduced = rng.random_bool(0.85);
            let v = chrome_version(rng, reduced);
            (
                format!(
                    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{v} Safari/537.36"
                ),
                false,
                false,
            )
        }
        Family::ChromeMac => {
            let v = chrome_version(rng, true);
            (
                format!(
                    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{v} Safari/537.36"
                ),
                false,
                false,
            )
        }
        Family::SafariMac | Family::IpadDesktop => {
            // iPadOS 13+ desktop mode sends exactly the Mac Safari UA.
            let (maj, min) = (rng.random_range(16..=18), rng.random_range(0..=6));
            (
                format!(
                    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/{maj}.{min} Safari/605.1.15"
                ),
                false,
                false,
            )
        }
        Family::FirefoxWin => {
            let v = rng.random_range(115..=133);
            (
                format!(
                    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:{v}.0) Gecko/20100101 Firefox/{v}.0"
                ),
                false,
                false,
            )
        }
        Family::Edge => {
            let v = chrome_version(rng, true);
            let major = v.split('.').next().unwrap_or("131").to_owned();
            (
                format!(
                    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{v} Safari/537.36 Edg/{major}.0.{}.{}",
                    rng.random_range(2000..=2900),
                    rng.random_range(0..=120)
                ),
                false,
                false,
            )
        }
        Family::IphoneSafari => {
            let (maj, min) = ios_version(rng);
            (
                format!(
                    "Mozilla/5.0 (iPhone; CPU iPhone OS {maj}_{min} like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/{maj}.{min} Mobile/15E148 Safari/604.1"
                ),
                true,
                false,
            )
        }
        Family::IphoneApp => {
            let (maj, min) = ios_version(rng);
            let app = APPS[rng.random_range(0..APPS.len())];
            let model = rng.random_range(12..=17);
            (
                format!(
                    "Mozilla/5.0 (iPhone; CPU iPhone OS {maj}_{min} like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 {app} (iPhone{model},{}; iOS {maj}_{min}; ja_JP; ja; scale=3.00)",
                    rng.random_range(1..=5)
                ),
                true,
                false,
            )
        }
        Family::AndroidChrome => {
            let reduced = rng.random_bool(0.7);
            let v = chrome_version(rng, reduced);
            let device = if reduced {
                "Android 10; K".to_owned()
            } else {
                format!(
                    "Android {}; {}",
                    rng.random_range(11..=14),
                    ANDROID_MODELS[rng.random_range(0..ANDROID_MODELS.len())]
                )
            };
            (
                format!(
                    "Mozilla/5.0 (Linux; {device}) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{v} Mobile Safari/537.36"
                ),
                true,
                false,
            )
        }
        Family::AndroidApp => {
            // An app's own HTTP stack: no browser engine, no "Mobile".
            let model = ANDROID_MODELS[rng.random_range(0..ANDROID_MODELS.len())];
            (
                format!(
                    "Dalvik/2.1.0 (Linux; U; Android {}; {model} Build/UP1A.{})",
                    rng.random_range(11..=14),
                    rng.random_range(230_000..=240_999)
                ),
                true,
                false,
            )
        }
        Family::AndroidTablet => {
            let v = chrome_version(rng, true);
            (
                format!(
                    "Mozilla/5.0 (Linux; Android 13; SM-X{}) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{v} Safari/537.36",
                    rng.random_range(200..=916)
                ),
                false,
                false,
            )
        }
        Family::Ipad => {
            let (maj, min) = ios_version(rng);
            (
                format!(
                    "Mozilla/5.0 (iPad; CPU OS {maj}_{min} like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/{maj}.{min} Mobile/15E148 Safari/604.1"
                ),
                false,
                false,
            )
        }
        Family::Googlebot => (
            "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)".to_owned(),
            false,
            true,
        ),
        Family::GooglebotPhone => {
            let v = chrome_version(rng, false);
            (
                format!(
                    "Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{v} Mobile Safari/537.36 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
                ),
                true,
                true,
            )
        }
        Family::Bingbot => (
            "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)".to_owned(),
            false,
            true,
        ),
        Family::OtherBot => (
            BOTS[rng.random_range(0..BOTS.len())].to_owned(),
            false,
            true,
        ),
        Family::FeedReader => {
            let t = FEED_READERS[rng.random_range(0..FEED_READERS.len())];
            (
                t.replace("{n}", &rng.random_range(1..=400).to_string()),
                false,
                true,
            )
        }
        Family::Tool => (
            TOOLS[rng.random_range(0..TOOLS.len())].to_owned(),
            false,
            true,
        ),
    };
    Client { ua, phone, crawler }
}

/// What a page view asks for.
#[derive(Clone, Copy)]
enum Kind {
    Entry,
    Top,
    Feed,
    Index,
    Robots,
    Account,
    Api,
    Redirect,
    Probe,
    Css,
    AppJs,
}

/// Page views per mille. CSS and app.js mostly follow page views as assets.
const KINDS: [(u32, Kind); 11] = [
    (560, Kind::Entry),
    (90, Kind::Top),
    (110, Kind::Feed),
    (45, Kind::Index),
    (25, Kind::Robots),
    (40, Kind::Account),
    (30, Kind::Api),
    (10, Kind::Redirect),
    (20, Kind::Probe),
    (40, Kind::Css),
    (30, Kind::AppJs),
];

const PROBES: [&str; 5] = [
    "/wp-login.php",
    "/.env",
    "/xmlrpc.php",
    "/admin/",
    "/blog/nosuchblog/entry/1",
];
const UTM_SOURCES: [&str; 5] = ["twitter", "facebook", "newsletter", "hatena", "line"];
const UTM_MEDIUMS: [&str; 3] = ["social", "email", "referral"];
const UTM_CAMPAIGNS: [&str; 4] = ["spring", "launch", "weekly", "anniversary"];

fn token(rng: &mut Xoshiro256PlusPlus, len: usize) -> String {
    const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";
    (0..len)
        .map(|_| char::from(ALNUM[rng.random_range(0..ALNUM.len())]))
        .collect()
}

/// A tracking query string (without `?`), or empty: 30% of human page views.
fn tracking(rng: &mut Xoshiro256PlusPlus) -> String {
    if !rng.random_bool(0.30) {
        return String::new();
    }
    match rng.random_range(0..5) {
        0 | 1 => format!(
            "utm_source={}&utm_medium={}&utm_campaign={}",
            UTM_SOURCES[rng.random_range(0..UTM_SOURCES.len())],
            UTM_MEDIUMS[rng.random_range(0..UTM_MEDIUMS.len())],
            UTM_CAMPAIGNS[rng.random_range(0..UTM_CAMPAIGNS.len())]
        ),
        2 => format!("fbclid=IwAR{}", token(rng, 40)),
        3 => format!("gclid={}", token(rng, 32)),
        _ => format!(
            "utm_source={}&_ga=2.{}.{}-{}",
            UTM_SOURCES[rng.random_range(0..UTM_SOURCES.len())],
            rng.random_range(100_000_000..999_999_999u32),
            rng.random_range(100_000_000..999_999_999u32),
            rng.random_range(1_600_000_000..1_740_000_000u32)
        ),
    }
}

fn with_query(path: String, query: &str) -> String {
    if query.is_empty() {
        path
    } else {
        format!("{path}?{query}")
    }
}

/// ±8% size jitter, fixed per URL (the same page always has the same size).
fn jitter(base: u64, key: usize) -> u64 {
    let k = u64::try_from(key).unwrap_or(0);
    let h = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56; // 0..=255
    base * (1000 - 80 + h * 160 / 255) / 1000
}

fn is_private(blog: &str) -> bool {
    PRIVATE_BLOGS.contains(&blog)
}

const PUBLIC_CC: &str = "public, max-age=300";
const PRIVATE_CC: &str = "private, no-store";

/// The page view's main request.
#[allow(
    clippy::too_many_lines,
    reason = "one arm per kind of page, each a handful of fields"
)]
fn page(rng: &mut Xoshiro256PlusPlus, kind: Kind, blog_i: usize, entry: usize, c: &Client) -> Req {
    let blog = BLOGS[blog_i];
    let private = is_private(blog);
    let human = !c.crawler;
    let referer = if human { weighted(rng, &REFERERS) } else { "-" };
    let base = |host, target: String, status, bytes, cc| Req {
        host,
        method: "GET",
        target,
        status,
        bytes,
        referer,
        cache_control: cc,
    };
    match kind {
        Kind::Entry => {
            let q = if human { tracking(rng) } else { String::new() };
            let size = if c.phone {
                sizes::ENTRY_SP
            } else {
                sizes::ENTRY_PC
            };
            let revalidated = !private && rng.random_bool(0.03);
            base(
                "blog.example",
                with_query(format!("/blog/{blog}/entry/{entry}"), &q),
                if revalidated { 304 } else { 200 },
                if revalidated {
                    0
                } else {
                    jitter(size, blog_i * 1000 + entry)
                },
                if private { PRIVATE_CC } else { PUBLIC_CC },
            )
        }
        Kind::Top => {
            let mut q = if human { tracking(rng) } else { String::new() };
            if rng.random_bool(0.12) {
                let page = format!("page={}", rng.random_range(2..=5));
                q = if q.is_empty() {
                    page
                } else {
                    format!("{page}&{q}")
                };
            }
            let size = if c.phone {
                sizes::TOP_SP
            } else {
                sizes::TOP_PC
            };
            base(
                "blog.example",
                with_query(format!("/blog/{blog}/"), &q),
                200,
                jitter(size, blog_i),
                if private { PRIVATE_CC } else { PUBLIC_CC },
            )
        }
        Kind::Feed => {
            if private {
                base(
                    "blog.example",
                    format!("/blog/{blog}/feed"),
                    403,
                    sizes::PRIVATE_FEED,
                    PRIVATE_CC,
                )
            } else {
                let revalidated = rng.random_bool(0.05);
                base(
                    "blog.example",
                    format!("/blog/{blog}/feed"),
                    if revalidated { 304 } else { 200 },
                    if revalidated {
                        0
                    } else {
                        jitter(sizes::FEED, blog_i)
                    },
                    PUBLIC_CC,
                )
            }
        }
        Kind::Index => base(
            "blog.example",
            with_query(
                "/".to_owned(),
                &if human { tracking(rng) } else { String::new() },
            ),
            200,
            sizes::INDEX,
            "public, max-age=60",
        ),
        Kind::Robots => base(
            "blog.example",
            "/robots.txt".to_owned(),
            200,
            sizes::ROBOTS,
            "public, max-age=3600",
        ),
        Kind::Account => base(
            "blog.example",
            "/account".to_owned(),
            200,
            sizes::ACCOUNT,
            "private",
        ),
        Kind::Api => {
            let mut r = base(
                "blog.example",
                format!("/api/echo?n={}", rng.random_range(0..1000)),
                200,
                sizes::ECHO,
                "no-store",
            );
            if rng.random_bool(0.5) {
                r.method = "POST";
                "/api/echo".clone_into(&mut r.target);
            }
            r
        }
        Kind::Redirect => base(
            "blog.example",
            format!("/blog/{blog}"),
            301,
            sizes::MOVED,
            PUBLIC_CC,
        ),
        Kind::Probe => base(
            "blog.example",
            PROBES[rng.random_range(0..PROBES.len())].to_owned(),
            404,
            sizes::NOT_FOUND,
            "public, max-age=10",
        ),
        Kind::Css => css(blog_i, referer),
        Kind::AppJs => app_js(referer),
    }
}

/// The design CSS of a blog: public blogs' from the CDN host, private blogs' from the blog
/// host with `private, no-store` (the design-CSS story).
fn css(blog_i: usize, referer: &'static str) -> Req {
    let blog = BLOGS[blog_i];
    let private = is_private(blog);
    Req {
        host: if private {
            "blog.example"
        } else {
            "cdn.example"
        },
        method: "GET",
        target: format!("/css/{blog}.css"),
        status: 200,
        bytes: jitter(sizes::CSS, blog_i),
        referer,
        cache_control: if private {
            PRIVATE_CC
        } else {
            "public, max-age=86400"
        },
    }
}

fn app_js(referer: &'static str) -> Req {
    Req {
        host: "cdn.example",
        method: "GET",
        target: "/static/app.js".to_owned(),
        status: 200,
        bytes: sizes::APP_JS_GZIP,
        referer,
        cache_control: "public, max-age=3600",
    }
}

/// Formats `secs` as the CLF time `01/Mar/2025:00:00:00 +0000`.
fn clf_time(secs: i64) -> String {
    format_clf(secs)
}

fn write_line(
    out: &mut dyn Write,
    opts: &Options,
    time: i64,
    ip: &str,
    client: &Client,
    req: &Req,
) -> io::Result<()> {
    match opts.format {
        GenFormat::Combined => {
            write!(
                out,
                "{}:443 {ip} - - [{}] \"{} {} HTTP/1.1\" {} {} \"{}\" \"{}\"",
                req.host,
                clf_time(time),
                req.method,
                req.target,
                req.status,
                req.bytes,
                req.referer,
                client.ua
            )?;
            if opts.cache_control {
                write!(out, " \"{}\"", req.cache_control)?;
            }
            writeln!(out)
        }
        GenFormat::Json => {
            let mut v = serde_json::json!({
                "time": crate::logfmt::format_rfc3339(time),
                "host": req.host,
                "url": req.target,
                "method": req.method,
                "user-agent": client.ua,
                "status": req.status,
                "bytes": req.bytes,
                "remote_addr": ip,
            });
            if opts.cache_control {
                v["cache_control"] = serde_json::Value::from(req.cache_control);
            }
            writeln!(out, "{v}")
        }
    }
}

/// Writes `o.lines` lines to `out`; returns what was written (lines, hosts, distinct
/// URLs, time span).
///
/// # Errors
/// Write errors.
pub fn generate(o: &Options, out: &mut dyn Write) -> io::Result<Summary> {
    let mut summary = Summary::default();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(o.seed);
    let blogs = Zipf::new(BLOGS.len(), 1.0);
    let entries = Zipf::new(ENTRIES, 1.1);
    let mut clock = 0.0f64; // seconds since start
    let mut written = 0u64;
    while written < o.lines {
        // Poisson arrivals of page views.
        let u: f64 = rng.random::<f64>();
        clock += -(1.0 - u).ln() / o.rate;
        #[allow(
            clippy::cast_possible_truncation,
            reason = "clock stays far below 2^53 s"
        )]
        let t = o.start + clock.floor() as i64;
        let kind = weighted(&mut rng, &KINDS);
        let family = match kind {
            Kind::Feed if rng.random_bool(0.7) => Family::FeedReader,
            Kind::Robots if rng.random_bool(0.85) => weighted(
                &mut rng,
                &[
                    (4, Family::Googlebot),
                    (2, Family::Bingbot),
                    (3, Family::OtherBot),
                ],
            ),
            _ => weighted(&mut rng, &GENERAL),
        };
        let c = client(&mut rng, family);
        let ip = format!(
            "{}.{}",
            ["203.0.113", "198.51.100", "192.0.2"][rng.random_range(0..3)],
            rng.random_range(1..=254)
        );
        let blog_i = blogs.sample(&mut rng);
        let entry = entries.sample(&mut rng) + 1;
        let main = page(&mut rng, kind, blog_i, entry, &c);
        write_line(out, o, t, &ip, &c, &main)?;
        summary.note(t, &main);
        written += 1;
        // A first-time human visit to a blog page also loads the design CSS and app.js.
        let is_page = matches!(kind, Kind::Entry | Kind::Top) && main.status == 200;
        if is_page && !c.crawler && rng.random_bool(0.35) {
            let referer = "https://blog.example/";
            for asset in [css(blog_i, referer), app_js(referer)] {
                if written >= o.lines {
                    break;
                }
                write_line(out, o, t, &ip, &c, &asset)?;
                summary.note(t, &asset);
                written += 1;
            }
        }
    }
    out.flush()?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(seed: u64, n: u64, format: GenFormat) -> String {
        let o = Options {
            lines: n,
            seed,
            start: 1_740_787_200,
            rate: 20.0,
            format,
            cache_control: true,
        };
        let mut out = Vec::new();
        generate(&o, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn deterministic_and_exact_count() {
        let a = run(7, 2000, GenFormat::Combined);
        assert_eq!(a, run(7, 2000, GenFormat::Combined));
        assert_ne!(a, run(8, 2000, GenFormat::Combined));
        assert_eq!(a.lines().count(), 2000);
    }

    #[test]
    fn lines_parse_in_both_formats() {
        for (format, fmt) in [
            (GenFormat::Combined, crate::logfmt::Format::Combined),
            (GenFormat::Json, crate::logfmt::Format::Json),
        ] {
            let text = run(3, 3000, format);
            let first = text.lines().next().unwrap();
            assert_eq!(crate::logfmt::Format::detect(first.as_bytes()), fmt);
            let mut times = Vec::new();
            for line in text.lines() {
                let r = crate::logfmt::parse_line(fmt, line.as_bytes())
                    .unwrap_or_else(|e| panic!("{e}: {line}"));
                assert!(r.host.is_some() && r.user_agent.is_some() && r.cache_control.is_some());
                times.push(r.time);
            }
            assert!(
                times.windows(2).all(|w| w[0] <= w[1]),
                "times never go back"
            );
            assert_eq!(times[0], 1_740_787_200);
        }
    }

    #[test]
    fn mix_has_what_the_demo_needs() {
        let text = run(1, 20_000, GenFormat::Combined);
        let has = |s: &str| text.lines().filter(|l| l.contains(s)).count();
        assert!(
            has("utm_") > 500 && has("fbclid=") > 100 && has("gclid=") > 100 && has("_ga=") > 100
        );
        assert!(has("/blog/alice/feed") > 100);
        assert!(has("cdn.example:443") > 1000 && has("/css/carol.css") > 0);
        assert!(has("GET /account ") > 300 && has("GET /robots.txt ") > 200);
        assert!(has("Dalvik/2.1.0") > 100 && has("(iPad;") > 100 && has("Googlebot") > 500);
        assert!(has("\"POST /api/echo") > 50);
        // Private blogs' CSS never comes from the CDN host.
        assert_eq!(
            has("cdn.example:443 ")
                - text
                    .lines()
                    .filter(|l| l.starts_with("cdn.example")
                        && !l.contains("/css/carol")
                        && !l.contains("/css/mallory")
                        && !l.contains("/css/xena"))
                    .count(),
            0
        );
        let distinct_uas: std::collections::HashSet<&str> =
            text.lines().filter_map(|l| l.split('"').nth(5)).collect();
        assert!(distinct_uas.len() > 1000, "{}", distinct_uas.len());
    }

    #[test]
    fn clf_times() {
        assert_eq!(clf_time(971_211_336), "10/Oct/2000:20:55:36 +0000");
        assert_eq!(
            crate::logfmt::parse_clf_time(clf_time(1_740_787_200).as_bytes()),
            Some(1_740_787_200)
        );
    }
}
