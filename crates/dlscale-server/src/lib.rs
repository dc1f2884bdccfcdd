//! dlscale-server: the autoscaler service.
//!
//! [`serve`] runs it: an HTTP/JSON API ([`api`], described by [`openapi`]) in front of a
//! [`controller::Controller`] that keeps jobs in SQLite ([`store`]), runs the core allocator over
//! the cluster's GPUs, places them on nodes ([`placement`]) and applies its decisions through an
//! [`executor`]: local process groups (torchrun or plain), or Slurm batch jobs. [`client`] talks to a running server; [`profile`] measures
//! a job at a few (workers, batch) points and fits its throughput model.
//!
//! Async boundaries: the API and the controller run on tokio; every SQLite call runs on the
//! blocking pool ([`store::Store::call`]); process spawns and `/proc` scans also run there.

pub mod api;
pub mod client;
pub mod config;
pub mod controller;
pub mod error;
pub mod executor;
pub mod job;
pub mod openapi;
pub mod placement;
pub mod profile;
pub mod spec;
pub mod store;

use anyhow::{Context, Result};

pub use config::{ConfigFile, ServerConfig};
pub use controller::Controller;

/// Logs to stderr at `info` (or the level in `DLSCALE_LOG`: error, warn, info, debug, trace).
pub fn init_logging() {
    let level = std::env::var("DLSCALE_LOG")
        .ok()
        .and_then(|l| l.parse::<tracing::Level>().ok())
        .unwrap_or(tracing::Level::INFO);
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// Runs the service until SIGINT or SIGTERM. Jobs keep running when the server stops; the next
/// start re-attaches to them.
pub async fn serve(config: ServerConfig) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let controller = Controller::start(config).await?;
    let local = listener.local_addr()?;
    let cfg = controller.config();
    let cluster = controller.cluster().await;
    tracing::info!(
        "dlscale serving on http://{local} (data dir {}, policy {}, {} executor, {} GPUs on {} node(s))",
        cfg.data_dir.display(),
        cfg.policy,
        cluster.executor,
        cluster.capacity,
        cluster.nodes.len()
    );
    tokio::spawn(controller.clone().run());
    axum::serve(listener, api::router(controller))
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("HTTP server failed")?;
    tracing::info!("dlscale stopped; running jobs continue and are re-attached at the next start");
    Ok(())
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
