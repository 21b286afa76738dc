//! `cachet-demo-origin`: runs the demo blog origin until Ctrl-C or SIGTERM.

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use cachet_demo_origin::{OriginConfig, OriginState, serve};
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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = OriginConfig {
        listen: args.listen,
        delay: Duration::from_millis(args.delay_ms),
        ..OriginConfig::default()
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
