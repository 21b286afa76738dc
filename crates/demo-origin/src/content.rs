//! Deterministic sample content: blog pages per device class, RSS feeds, design CSS, app.js.

use std::fmt::Write as _;

/// The device class the origin renders for, taken from the `X-Cachet-Device` request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// Desktop layout with a sidebar (also the default for a missing or unknown header).
    Pc,
    /// Single-column touch layout with a slide-in menu.
    Smartphone,
}

impl Device {
    /// Parses the `X-Cachet-Device` header value: `smartphone` (any case) → [`Device::Smartphone`],
    /// anything else or nothing → [`Device::Pc`].
    pub fn from_header(value: Option<&str>) -> Self {
        match value {
            Some(v) if v.trim().eq_ignore_ascii_case("smartphone") => Device::Smartphone,
            _ => Device::Pc,
        }
    }

    /// The header token for this class (`pc` or `smartphone`).
    pub fn as_str(self) -> &'static str {
        match self {
            Device::Pc => "pc",
            Device::Smartphone => "smartphone",
        }
    }
}

/// Number of entries every blog lists on its top page and in its feed (ids `1..=ENTRY_COUNT`).
/// Any other all-digit id still renders an article, so tests can make up fresh URLs.
pub const ENTRY_COUNT: u64 = 8;

/// 2024-01-01T00:00:00Z; every date in the sample content is an offset from it.
const EPOCH_BASE: u64 = 1_704_067_200;

/// The JavaScript served (gzip-encoded) at `/static/app.js`, uncompressed.
pub const APP_JS: &str = r#"/* cachet demo blog: app.js (served pre-compressed by the origin) */
(function () {
  'use strict';
  var doc = document;
  function qs(sel, root) { return (root || doc).querySelector(sel); }
  function qsa(sel, root) { return Array.prototype.slice.call((root || doc).querySelectorAll(sel)); }

  // Star button: optimistic UI, the count is fetched from the API separately.
  function initStars() {
    qsa('.entry-star-button').forEach(function (button) {
      button.addEventListener('click', function (event) {
        event.preventDefault();
        var counter = qs('.entry-star-count', button.parentNode);
        if (counter) { counter.textContent = String(Number(counter.textContent || '0') + 1); }
        button.classList.add('is-starred');
      });
    });
  }

  // Smartphone menu: toggles the slide-in navigation.
  function initMenu() {
    var toggle = qs('.sp-menu-toggle');
    var menu = qs('.sp-menu');
    if (!toggle || !menu) { return; }
    toggle.addEventListener('click', function () {
      var open = menu.classList.toggle('is-open');
      toggle.setAttribute('aria-expanded', open ? 'true' : 'false');
    });
  }

  // Relative dates ("3 days ago") computed on the client so cached HTML stays fresh.
  function initDates() {
    var now = Date.now();
    qsa('time[datetime]').forEach(function (el) {
      var then = Date.parse(el.getAttribute('datetime'));
      if (isNaN(then)) { return; }
      var days = Math.floor((now - then) / 86400000);
      el.setAttribute('title', el.textContent);
      el.textContent = days <= 0 ? 'today' : days === 1 ? 'yesterday' : days + ' days ago';
    });
  }

  // Lazy images: swap data-src in when the image scrolls into view.
  function initLazyImages() {
    if (!('IntersectionObserver' in window)) { return; }
    var observer = new IntersectionObserver(function (entries) {
      entries.forEach(function (entry) {
        if (!entry.isIntersecting) { return; }
        var img = entry.target;
        img.src = img.getAttribute('data-src');
        observer.unobserve(img);
      });
    });
    qsa('img[data-src]').forEach(function (img) { observer.observe(img); });
  }

  function ready(fn) {
    if (doc.readyState !== 'loading') { fn(); } else { doc.addEventListener('DOMContentLoaded', fn); }
  }

  ready(function () {
    initStars();
    initMenu();
    initDates();
    initLazyImages();
  });
})();
"#;

const TITLES: [&str; 8] = [
    "Moving our cache from Varnish to the edge",
    "Notes from a weekend of sourdough baking",
    "Why the hit ratio was only eight percent",
    "A quiet walk along the Kamo river",
    "Sorting query strings, and other small wins",
    "Reading list for the rainy season",
    "What changed when we stopped varying on User-Agent",
    "Gzip at the edge: storing three times more objects",
];

const PARAGRAPHS: [&str; 6] = [
    "The first thing we noticed after the migration was how quiet the application servers \
     became. Requests that used to fan out to the database were now answered from memory at \
     the edge, and the dashboards that used to glow orange every evening stayed a calm green.",
    "Caching is mostly about deciding what makes two requests the same. A User-Agent header \
     has thousands of spellings, but our templates only ever cared about two layouts, so the \
     cache key only needs to know whether the reader is on a PC or a smartphone.",
    "Tracking parameters are another source of accidental variety. A link shared on social \
     media arrives with utm_source, utm_medium and friends attached, none of which change a \
     single byte of the page, and each of which used to create a fresh cache object.",
    "Compression pays twice: objects stored gzip-encoded take a third of the memory, and \
     most readers accept gzip anyway, so the edge can send the stored bytes as they are and \
     only inflate them for the rare client that cannot handle compressed responses.",
    "Invalidation is where caches usually hurt. Purging by surrogate key lets us drop every \
     page of a blog at once when its owner switches it to private, without scanning the \
     whole cache on the request path or guessing which URLs might have been stored.",
    "None of this needs heroics. A handful of careful rules, measured against real traffic, \
     and a willingness to say no to the header that varies on everything, took the hit ratio \
     from single digits to well over half of all article requests.",
];

const CATEGORIES: [&str; 5] = ["engineering", "cache", "daily-life", "books", "travel"];

/// Title of entry `id` of a blog.
pub fn entry_title(id: u64) -> &'static str {
    TITLES[index(id, TITLES.len())]
}

fn index(id: u64, len: usize) -> usize {
    // `len` is a small constant array length, so both conversions are lossless.
    let len64 = u64::try_from(len).unwrap_or(1);
    usize::try_from(id % len64).unwrap_or(0)
}

/// Small stable hash of a blog name, used to spread dates and colours between blogs.
fn name_seed(name: &str) -> u64 {
    fnv1a(name.as_bytes()) % 3600
}

/// FNV-1a 64-bit hash; used for ETags and content seeds (stable across runs and platforms).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// Strong ETag for a body: its FNV-1a hash in quotes.
pub fn etag_for(body: &[u8]) -> String {
    format!("\"{:016x}\"", fnv1a(body))
}

/// Unix time at which entry `id` of blog `name` was last modified.
pub fn entry_time(name: &str, id: u64) -> u64 {
    EPOCH_BASE
        .saturating_add(id.min(100_000).saturating_mul(86_400))
        .saturating_add(name_seed(name))
}

/// Unix time of the newest listed entry: the blog's top, feed and CSS carry it.
pub fn blog_time(name: &str) -> u64 {
    entry_time(name, ENTRY_COUNT)
}

/// Formats Unix seconds as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`, RFC 9110
/// §5.6.7), with the `httpdate` crate.
pub fn http_date(secs: u64) -> String {
    httpdate::fmt_http_date(unix(secs))
}

/// Formats Unix seconds as RFC 3339 (`2024-01-02T00:10:00Z`), with the `humantime` crate.
fn iso_date(secs: u64) -> String {
    humantime::format_rfc3339_seconds(unix(secs)).to_string()
}

/// Unix seconds as a `SystemTime`.
fn unix(secs: u64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs)
}

fn head(out: &mut String, name: &str, title: &str, device: Device, private: bool) {
    let viewport = match device {
        Device::Pc => "width=1024",
        Device::Smartphone => "width=device-width, initial-scale=1, viewport-fit=cover",
    };
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\" data-blog=\"{name}\" data-device=\"{dev}\">\n<head>\n\
         <meta charset=\"utf-8\">\n\
         <meta name=\"cachet-device\" content=\"{dev}\">\n\
         <meta name=\"viewport\" content=\"{viewport}\">\n\
         <title>{title} - {name}'s blog</title>\n\
         <link rel=\"stylesheet\" href=\"/css/{name}.css\">\n\
         <link rel=\"alternate\" type=\"application/rss+xml\" title=\"{name}'s blog\" href=\"/blog/{name}/feed\">\n",
        dev = device.as_str(),
    );
    if private {
        out.push_str("<meta name=\"robots\" content=\"noindex, nofollow\">\n");
    }
    out.push_str("<script src=\"/static/app.js\" defer></script>\n</head>\n");
}

fn header_bar(out: &mut String, name: &str, device: Device, private: bool) {
    let badge = if private {
        "<span class=\"blog-private-badge\">private</span>"
    } else {
        ""
    };
    match device {
        Device::Pc => {
            let _ = write!(
                out,
                "<body class=\"page layout-pc\">\n<div id=\"globalheader\" class=\"globalheader-pc\">\
                 <a href=\"/\">Cachet Blog</a> <a href=\"/account\">Account</a></div>\n\
                 <div id=\"container\" class=\"container-pc\">\n<header id=\"blog-title\">\
                 <h1><a href=\"/blog/{name}/\">{name}'s blog</a>{badge}</h1>\
                 <p class=\"blog-description\">Notes on caching, cooking and walking.</p></header>\n"
            );
        }
        Device::Smartphone => {
            let _ = write!(
                out,
                "<body class=\"page layout-sp\">\n<header class=\"sp-header\">\
                 <button class=\"sp-menu-toggle\" aria-expanded=\"false\">Menu</button>\
                 <a class=\"sp-blog-title\" href=\"/blog/{name}/\">{name}'s blog</a>{badge}</header>\n\
                 <nav class=\"sp-menu\"><ul><li><a href=\"/\">Cachet Blog</a></li>\
                 <li><a href=\"/blog/{name}/\">Top</a></li><li><a href=\"/blog/{name}/feed\">RSS</a></li>\
                 <li><a href=\"/account\">Account</a></li></ul></nav>\n<div id=\"container\" class=\"container-sp\">\n"
            );
        }
    }
}

fn sidebar_or_footer(out: &mut String, name: &str, device: Device) {
    match device {
        Device::Pc => {
            out.push_str(
                "<aside id=\"sidebar\">\n<section class=\"module module-profile\"><h3>About</h3>",
            );
            let _ = writeln!(
                out,
                "<p>{name} writes about web performance, bread and long walks. \
                 Subscribe to the <a href=\"/blog/{name}/feed\">feed</a>.</p></section>"
            );
            out.push_str("<section class=\"module module-categories\"><h3>Categories</h3><ul>");
            for (i, cat) in CATEGORIES.iter().enumerate() {
                let _ = write!(
                    out,
                    "<li><a href=\"/blog/{name}/?category={cat}\">{cat}</a> ({})</li>",
                    i * 3 + 2
                );
            }
            out.push_str(
                "</ul></section>\n<section class=\"module module-archive\"><h3>Archive</h3><ul>",
            );
            for id in (1..=ENTRY_COUNT).rev() {
                let _ = write!(
                    out,
                    "<li><a href=\"/blog/{name}/entry/{id}\">{}</a></li>",
                    entry_title(id)
                );
            }
            out.push_str("</ul></section>\n</aside>\n");
        }
        Device::Smartphone => {
            let _ = writeln!(
                out,
                "<section class=\"sp-profile\"><h3>About {name}</h3><p>{name} writes about web \
                 performance, bread and long walks.</p><a class=\"sp-subscribe\" \
                 href=\"/blog/{name}/feed\">Subscribe via RSS</a></section>"
            );
            out.push_str("<section class=\"sp-related\"><h3>Recent entries</h3><ol>");
            for id in (1..=ENTRY_COUNT).rev().take(5) {
                let _ = write!(
                    out,
                    "<li class=\"sp-related-item\"><a href=\"/blog/{name}/entry/{id}\">{}</a></li>",
                    entry_title(id)
                );
            }
            out.push_str("</ol></section>\n");
        }
    }
}

fn footer(out: &mut String, device: Device) {
    let class = match device {
        Device::Pc => "footer-pc",
        Device::Smartphone => "footer-sp",
    };
    let _ = write!(
        out,
        "</div>\n<footer class=\"{class}\"><p>Powered by the Cachet demo origin. \
         Rendered for the {} layout.</p></footer>\n</body>\n</html>\n",
        device.as_str()
    );
}

/// HTML of the top page of blog `name`, for `device`.
pub fn blog_top_html(name: &str, device: Device, private: bool) -> String {
    let mut out = String::with_capacity(8192);
    head(&mut out, name, "Top", device, private);
    header_bar(&mut out, name, device, private);
    out.push_str("<main id=\"main\" class=\"archive-entries\">\n");
    for id in (1..=ENTRY_COUNT).rev() {
        let date = iso_date(entry_time(name, id));
        let first = PARAGRAPHS[index(id, PARAGRAPHS.len())];
        match device {
            Device::Pc => {
                let _ = writeln!(
                    out,
                    "<article class=\"archive-entry\"><h2 class=\"entry-title\">\
                     <a href=\"/blog/{name}/entry/{id}\">{}</a></h2>\
                     <time datetime=\"{date}\">{}</time>\
                     <p class=\"entry-description\">{}</p></article>",
                    entry_title(id),
                    &date[..10],
                    first
                );
            }
            Device::Smartphone => {
                let short: String = first.chars().take(90).collect();
                let _ = writeln!(
                    out,
                    "<a class=\"sp-entry-card\" href=\"/blog/{name}/entry/{id}\">\
                     <span class=\"sp-entry-title\">{}</span>\
                     <time datetime=\"{date}\">{}</time>\
                     <span class=\"sp-entry-summary\">{short}…</span></a>",
                    entry_title(id),
                    &date[..10]
                );
            }
        }
    }
    out.push_str("</main>\n");
    sidebar_or_footer(&mut out, name, device);
    footer(&mut out, device);
    out
}

/// HTML of entry `id` of blog `name`, for `device`.
pub fn entry_html(name: &str, id: u64, device: Device, private: bool) -> String {
    let mut out = String::with_capacity(8192);
    let title = entry_title(id);
    head(&mut out, name, title, device, private);
    header_bar(&mut out, name, device, private);
    let date = iso_date(entry_time(name, id));
    let category = CATEGORIES[index(id, CATEGORIES.len())];
    let _ = write!(
        out,
        "<main id=\"main\">\n<article class=\"entry\" data-entry-id=\"{id}\">\n\
         <header class=\"entry-header\"><h1 class=\"entry-title\">{title}</h1>\
         <time datetime=\"{date}\">{}</time> \
         <a class=\"entry-category\" href=\"/blog/{name}/?category={category}\">{category}</a></header>\n\
         <div class=\"entry-content\">\n",
        &date[..10]
    );
    for i in 0..PARAGRAPHS.len() {
        let p = PARAGRAPHS[index(id + i as u64, PARAGRAPHS.len())];
        let _ = writeln!(out, "<p>{p}</p>");
        if i == 1 {
            let _ = writeln!(
                out,
                "<figure><img data-src=\"/images/{name}/{id}.jpg\" alt=\"{title}\" \
                 width=\"{w}\" height=\"{h}\"><figcaption>Figure for entry {id}</figcaption></figure>",
                w = if device == Device::Pc { 640 } else { 320 },
                h = if device == Device::Pc { 360 } else { 180 },
            );
        }
    }
    out.push_str("</div>\n<footer class=\"entry-footer\">");
    match device {
        Device::Pc => {
            let _ = write!(
                out,
                "<div class=\"entry-star\"><a class=\"entry-star-button\" href=\"#\">Add star</a> \
                 <span class=\"entry-star-count\">{}</span></div>\
                 <div class=\"entry-share\"><a href=\"/blog/{name}/entry/{id}?utm_source=share\">Share</a></div>\
                 <section class=\"comment-box\"><h3>Comments</h3><ul class=\"comments\">\
                 <li>Great write-up, thanks!</li><li>We saw the same effect on our site.</li></ul></section>",
                id % 17 + 3
            );
        }
        Device::Smartphone => {
            let _ = write!(
                out,
                "<div class=\"sp-entry-actions\"><a class=\"entry-star-button sp-star\" href=\"#\">★</a>\
                 <span class=\"entry-star-count\">{}</span> \
                 <a class=\"sp-share\" href=\"/blog/{name}/entry/{id}?utm_source=share\">Share</a></div>",
                id % 17 + 3
            );
        }
    }
    out.push_str("</footer>\n");
    let prev = id.saturating_sub(1).max(1);
    let _ = write!(
        out,
        "<nav class=\"pager\"><a rel=\"prev\" href=\"/blog/{name}/entry/{prev}\">Older</a> \
         <a rel=\"next\" href=\"/blog/{name}/entry/{}\">Newer</a></nav>\n</article>\n</main>\n",
        id.saturating_add(1)
    );
    sidebar_or_footer(&mut out, name, device);
    footer(&mut out, device);
    out
}

/// RSS 2.0 feed of blog `name` (identical for every device).
pub fn feed_xml(name: &str) -> String {
    let mut out = String::with_capacity(4096);
    let _ = write!(
        out,
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<rss version=\"2.0\">\n<channel>\n\
         <title>{name}'s blog</title>\n<link>/blog/{name}/</link>\n\
         <description>Notes on caching, cooking and walking.</description>\n\
         <lastBuildDate>{}</lastBuildDate>\n",
        http_date(blog_time(name))
    );
    for id in (1..=ENTRY_COUNT).rev() {
        let _ = write!(
            out,
            "<item>\n<title>{}</title>\n<link>/blog/{name}/entry/{id}</link>\n\
             <guid>/blog/{name}/entry/{id}</guid>\n<pubDate>{}</pubDate>\n\
             <description>{}</description>\n</item>\n",
            entry_title(id),
            http_date(entry_time(name, id)),
            PARAGRAPHS[index(id, PARAGRAPHS.len())]
        );
    }
    out.push_str("</channel>\n</rss>\n");
    out
}

/// Selector → declarations of the design CSS shared by every blog.
const CSS_BLOCKS: [(&str, &str); 36] = [
    (
        "#globalheader",
        "display: flex; gap: 1em; padding: 0.5em 1em; background: #222; color: #fff; font-size: 13px;",
    ),
    (
        "#container.container-pc",
        "display: grid; grid-template-columns: 1fr 300px; gap: 40px; max-width: 1080px; margin: 0 auto; padding: 20px;",
    ),
    (
        "#container.container-sp",
        "display: block; padding: 12px; max-width: 100%;",
    ),
    (
        "#blog-title",
        "grid-column: 1 / 3; padding: 40px 0 20px; border-bottom: 4px solid var(--accent);",
    ),
    (
        "#blog-title h1",
        "margin: 0; font-size: 32px; font-weight: bold; letter-spacing: 0.02em;",
    ),
    (
        ".blog-description",
        "margin: 0.5em 0 0; color: var(--muted); font-size: 14px;",
    ),
    (
        ".blog-private-badge",
        "display: inline-block; margin-left: 0.5em; padding: 0 0.5em; border-radius: 3px; background: #c00; color: #fff; font-size: 12px;",
    ),
    (
        ".archive-entry",
        "margin: 0 0 40px; padding: 0 0 20px; border-bottom: 1px solid #e5e5e5;",
    ),
    (
        ".entry-title",
        "margin: 0 0 0.3em; font-size: 24px; line-height: 1.4;",
    ),
    (".entry-title a", "color: var(--text);"),
    (
        ".entry-description",
        "margin: 0.5em 0; color: var(--muted);",
    ),
    (".entry-content", "font-size: 16px; word-wrap: break-word;"),
    (".entry-content p", "margin: 0 0 1.5em;"),
    (
        ".entry-content figure",
        "margin: 2em 0; text-align: center;",
    ),
    (
        ".entry-content img",
        "max-width: 100%; height: auto; border-radius: 4px;",
    ),
    (
        ".entry-content figcaption",
        "color: var(--muted); font-size: 13px;",
    ),
    (
        ".entry-footer",
        "margin: 2em 0; padding: 1em 0; border-top: 1px solid #e5e5e5;",
    ),
    (
        ".entry-star-button",
        "display: inline-block; padding: 0.2em 0.8em; border: 1px solid var(--accent); border-radius: 2em;",
    ),
    (
        ".entry-star-button.is-starred",
        "background: var(--accent); color: #fff;",
    ),
    (".comment-box", "margin-top: 2em; font-size: 14px;"),
    (
        ".comment-box .comments li",
        "padding: 0.5em 0; border-bottom: 1px dotted #ccc; list-style: none;",
    ),
    (
        ".pager",
        "display: flex; justify-content: space-between; margin: 2em 0;",
    ),
    ("#sidebar", "font-size: 14px;"),
    (
        "#sidebar .module",
        "margin: 0 0 2em; padding: 1em; background: #fff; border: 1px solid #e5e5e5;",
    ),
    (
        "#sidebar .module h3",
        "margin: 0 0 0.5em; font-size: 15px; border-bottom: 2px solid var(--accent);",
    ),
    ("#sidebar ul", "margin: 0; padding: 0 0 0 1.2em;"),
    (
        ".sp-header",
        "position: sticky; top: 0; display: flex; align-items: center; gap: 0.5em; padding: 8px 12px; background: var(--accent); color: #fff;",
    ),
    (
        ".sp-menu-toggle",
        "border: 0; background: transparent; color: inherit; font-size: 16px;",
    ),
    (
        ".sp-menu",
        "display: none; padding: 12px; background: #fff; border-bottom: 1px solid #e5e5e5;",
    ),
    (".sp-menu.is-open", "display: block;"),
    (
        ".sp-entry-card",
        "display: block; margin: 0 0 12px; padding: 12px; background: #fff; border-radius: 8px; box-shadow: 0 1px 3px rgba(0, 0, 0, 0.12); color: var(--text);",
    ),
    (
        ".sp-entry-title",
        "display: block; font-weight: bold; font-size: 17px;",
    ),
    (
        ".sp-entry-summary",
        "display: block; color: var(--muted); font-size: 13px;",
    ),
    (
        ".sp-related",
        "margin: 24px 0; padding: 12px; background: #fff;",
    ),
    (
        ".sp-entry-actions",
        "display: flex; gap: 1em; align-items: center;",
    ),
    (
        "footer.footer-pc, footer.footer-sp",
        "padding: 2em 1em; text-align: center; color: var(--muted); font-size: 12px;",
    ),
];

/// The design CSS of blog `name` (several KiB, very compressible).
pub fn blog_css(name: &str) -> String {
    let seed = fnv1a(name.as_bytes());
    let accent = seed & 0x00ff_ffff;
    let hue = seed % 360;
    let mut out = String::with_capacity(6144);
    let _ = write!(
        out,
        "/* design theme for {name}'s blog (generated by the cachet demo origin) */\n\
         :root {{\n  --accent: #{accent:06x};\n  --accent-hue: {hue};\n  --text: #333333;\n  \
         --muted: #777777;\n  --background: #fafafa;\n  --font: -apple-system, BlinkMacSystemFont, \
         \"Helvetica Neue\", \"Hiragino Sans\", Meiryo, sans-serif;\n}}\n\
         html, body {{ margin: 0; padding: 0; color: var(--text); background: var(--background); \
         font-family: var(--font); line-height: 1.8; }}\n\
         a {{ color: var(--accent); text-decoration: none; }}\na:hover {{ text-decoration: underline; }}\n"
    );
    for (selector, rules) in CSS_BLOCKS {
        out.push_str(selector);
        out.push_str(" {\n");
        for rule in rules.split(';').map(str::trim).filter(|r| !r.is_empty()) {
            let _ = writeln!(out, "  {rule};");
        }
        out.push_str("}\n");
    }
    let _ = write!(
        out,
        "@media (max-width: 768px) {{\n  #container.container-pc {{ grid-template-columns: 1fr; }}\n  \
         #sidebar {{ display: none; }}\n  .entry-title {{ font-size: 20px; }}\n}}\n\
         @media (prefers-color-scheme: dark) {{\n  :root {{ --text: #e0e0e0; --muted: #a0a0a0; \
         --background: #16161a; }}\n  #sidebar .module, .sp-entry-card, .sp-related, .sp-menu \
         {{ background: #202026; border-color: #303036; }}\n}}\n/* end of theme {name} */\n"
    );
    out
}

/// HTML of the platform index listing the given public blogs.
pub fn index_html(public_blogs: &[String]) -> String {
    let mut out = String::with_capacity(2048);
    out.push_str(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>Cachet Blog</title>\n</head>\n<body>\n<h1>Cachet Blog</h1>\n\
         <p>Public blogs on this platform:</p>\n<ul class=\"blogs\">\n",
    );
    for name in public_blogs {
        let _ = writeln!(
            out,
            "<li><a href=\"/blog/{name}/\">{name}'s blog</a> (<a href=\"/blog/{name}/feed\">RSS</a>)</li>"
        );
    }
    out.push_str("</ul>\n</body>\n</html>\n");
    out
}

/// HTML of the always-private account page; `n` is the origin's request counter.
pub fn account_html(n: u64) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>Your account</title>\n</head>\n<body>\n<h1>Your account</h1>\n\
         <p>Signed in. Request number {n}.</p>\n\
         <p class=\"secret\">Your secret account token: {}</p>\n</body>\n</html>\n",
        account_token(n)
    )
}

/// The "secret" account token shown on `/account` for request number `n` (deterministic,
/// so tests can check that one reader's token never reaches another through a cache).
pub fn account_token(n: u64) -> String {
    format!("secret-{:016x}", fnv1a(&n.to_le_bytes()))
}

/// Byte `i` of the demo origin's incompressible test body (`/t/…?chunked=N&gzip=1`):
/// an xorshift64 sequence seeded with 1, eight bytes per step, little-endian. Tests
/// regenerate it to check what a client received.
pub fn noise(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut x: u64 = 1;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Gzip-compresses `bytes` (default level); used once at startup for `/static/app.js`.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing into a Vec cannot fail.
    let _ = encoder.write_all(bytes);
    encoder.finish().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_date_formats_known_instants() {
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(EPOCH_BASE), "Mon, 01 Jan 2024 00:00:00 GMT");
        assert_eq!(http_date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(iso_date(EPOCH_BASE + 86_400 + 61), "2024-01-02T00:01:01Z");
    }

    #[test]
    fn device_header_parsing() {
        assert_eq!(Device::from_header(Some("smartphone")), Device::Smartphone);
        assert_eq!(
            Device::from_header(Some(" SmartPhone ")),
            Device::Smartphone
        );
        assert_eq!(Device::from_header(Some("pc")), Device::Pc);
        assert_eq!(Device::from_header(Some("tablet")), Device::Pc);
        assert_eq!(Device::from_header(None), Device::Pc);
    }

    #[test]
    fn pages_are_realistically_sized() {
        for device in [Device::Pc, Device::Smartphone] {
            for private in [false, true] {
                let top = blog_top_html("alice", device, private).len();
                let entry = entry_html("alice", 3, device, private).len();
                assert!((4096..=8192).contains(&top), "top {device:?} {top}");
                assert!((4096..=8192).contains(&entry), "entry {device:?} {entry}");
            }
        }
        assert!(blog_css("alice").len() > 3000);
        assert!(APP_JS.len() > 2000);
    }
}
