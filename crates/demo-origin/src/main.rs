//! `cachet-demo-origin`: runs the demo blog origin until Ctrl-C or SIGTERM.

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use cachet_demo_origin::{BlogSeed, OriginConfig, OriginState, serve};
use clap::Parser;

/// Demo blog origin for Cachet (public, private and device-dependent pages).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Delay applied before every counted response, in milliseconds.
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
    /// The blogs to host, comma-separated, `name` or `name:private` (default:
    /// `alice,bob,carol:private`). Names: ASCII letters, digits, `-`, `_`.
    #[arg(long, value_parser = parse_blogs)]
    blogs: Option<Blogs>,
}

/// The parsed `--blogs` list (a newtype so clap takes it as one value).
#[derive(Clone, Debug)]
struct Blogs(Vec<BlogSeed>);

/// Parses `--blogs`.
fn parse_blogs(text: &str) -> Result<Blogs, String> {
    let mut blogs = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, private) = match item.split_once(':') {
            Some((n, "private")) => (n, true),
            Some((n, "public")) => (n, false),
            Some((_, other)) => {
                return Err(format!(
                    "{item:?}: expected :private or :public, got :{other}"
                ));
            }
            None => (item, false),
        };
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "{name:?}: blog names use ASCII letters, digits, '-' and '_'"
            ));
        }
        blogs.push(if private {
            BlogSeed::private(name)
        } else {
            BlogSeed::public(name)
        });
    }
    if blogs.is_empty() {
        return Err("no blogs given".into());
    }
    Ok(Blogs(blogs))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = OriginConfig {
        listen: args.listen,
        delay: Duration::from_millis(args.delay_ms),
        blogs: args
            .blogs
            .map_or_else(|| OriginConfig::default().blogs, |b| b.0),
    };
    let listen = config.listen;
    let state = OriginState::new(config);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let addr = listener.local_addr()?;
    let shutdown = shutdown_signal()?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "cachet-demo-origin listening on http://{addr}")?;
    stdout.flush()?;
    drop(stdout);
    serve(listener, state, shutdown).await.context("serving")?;
    Ok(())
}

/// Installs the Ctrl-C and SIGTERM handlers now (so a signal arriving right after the
/// "listening" line is not lost) and returns a future completing on the first of them.
#[cfg(unix)]
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    let mut terminate = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    })
}

/// Returns a future completing on Ctrl-C.
#[cfg(not(unix))]
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}
