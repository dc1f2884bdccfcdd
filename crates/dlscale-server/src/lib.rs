//! dlscale-server: the autoscaler service, a shell around the pure
//! [`dlscale_autoscaler::Autoscaler`].
//!
//! [`serve`] runs it: the HTTP/JSON API ([`api`], its DTOs in [`api::dto`], described by
//! [`api::openapi`]) hands requests to the [`service`]'s driver, the one task that owns the
//! autoscaler; the driver commits each batch of inputs with the records, intents and events it
//! produced to SQLite ([`store`]) before handing the actions to an [`executor`] (local process
//! groups, or Slurm batch jobs), whose answers and level-triggered observations come back as
//! inputs. [`metrics`] renders `/metrics`; [`client`] talks to a running server; [`replay`] feeds
//! a data directory's recorded inputs through the autoscaler again; [`profile`] measures a job at
//! a few (workers, batch) points and fits its throughput model; [`fault`] is the crash injection
//! of the fault soak; [`input_file`] reads a file whole, bounded (the CLI's files too).
//!
//! No lock is held across an external command or an fsync: API reads answer from the last
//! committed view, SQLite calls run on the blocking pool, executor commands in tasks of their own.

// The OpenAPI document is one `serde_json::json!` literal per schema; the job's is deep.
#![recursion_limit = "256"]

pub mod api;
pub mod client;
pub mod clock;
pub mod config;
pub mod error;
pub mod executor;
pub mod fault;
pub mod input_file;
pub mod metrics;
pub mod profile;
pub mod reload;
pub mod replay;
pub mod service;
pub mod spec;
pub mod store;
pub mod teams;
pub mod usage;
pub mod users;

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use clock::{Clock, SystemClock};
pub use config::{ConfigFile, ServerConfig};
use executor::{load_or_create_instance, random_hex, ExecContext, Executor, Reports};
pub use service::Service;
use store::Store;

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

/// The admin token: configured, or read from / generated into `<data_dir>/token` (mode 0600). A
/// token file others can read is refused: any local user could act as the admin.
pub fn load_or_create_token(config: &ServerConfig) -> Result<String> {
    if let Some(t) = &config.token {
        return Ok(t.clone());
    }
    let path = config.data_dir.join("token");
    if let Ok(meta) = std::fs::metadata(&path) {
        check_private(&path, meta.permissions().mode())?;
        let t = input_file::read_input_file(&path, "token file")?;
        let t = t.trim().to_string();
        if !t.is_empty() {
            return Ok(t);
        }
    }
    let token = random_hex(24).context("cannot generate a token")?;
    write_private(&path, &format!("{token}\n"))?;
    tracing::warn!(
        "no token configured: generated one in {} (export DLSCALE_TOKEN=$(cat {}))",
        path.display(),
        path.display()
    );
    Ok(token)
}

/// Writes `text` to `path`, readable by its owner alone (created so: never a moment readable
/// by others).
pub fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .with_context(|| format!("cannot write {}", path.display()))
}

fn check_private(path: &Path, mode: u32) -> Result<()> {
    if mode & 0o077 != 0 {
        bail!(
            "{} can be read by other users (mode {:03o}): anyone who reads it can act as the admin; \
             run `chmod 600 {}` and start again",
            path.display(),
            mode & 0o777,
            path.display()
        );
    }
    Ok(())
}

/// Sets up everything [`serve`] runs: the data directory, the token, the database, the executor
/// (detecting GPUs, or reading the Slurm cluster) and the service with its driver and pollers.
pub async fn start(config: ServerConfig) -> Result<Arc<Service>> {
    start_with(config, Arc::new(SystemClock), executor::build).await
}

/// [`start`] on `clock` (the wall clock, or a test's), with the executor `build` makes from the
/// configuration, the launches' context and where it reports launches that end.
pub async fn start_with(
    config: ServerConfig,
    clock: Arc<dyn Clock>,
    build: impl FnOnce(&ServerConfig, ExecContext, Reports) -> Result<Arc<dyn Executor>>,
) -> Result<Arc<Service>> {
    std::fs::create_dir_all(config.data_dir.join("jobs"))
        .with_context(|| format!("cannot create data dir {}", config.data_dir.display()))?;
    let lock = DataDirLock::take(&config.data_dir)?;
    let token = load_or_create_token(&config)?;
    let ctx = ExecContext {
        data_dir: config.data_dir.clone(),
        torchrun: config.torchrun.clone(),
        api_url: Some(config.api_url.clone()),
        clock,
        instance: load_or_create_instance(&config.data_dir)?,
    };
    let (reports, reports_rx) = service::report_channel();
    let executor = build(&config, ctx, reports)?;
    let store = Store::open(&config.data_dir.join("dlscale.db"))?;
    service::start(config, token, (store, lock), executor, reports_rx).await
}

/// A data directory held by one server: `<data_dir>/server.lock`, locked (`flock`) for as long
/// as the server runs. Two servers on one directory would each take the other's launches for
/// stale and kill them, and write one database by turns. The system releases the lock when the
/// process ends, however it ends (`kill -9` included): nothing is left to clean up.
#[derive(Debug)]
pub struct DataDirLock {
    _file: std::fs::File,
}

impl DataDirLock {
    /// Locks `data_dir`; refused, naming the directory, while another process holds it.
    pub fn take(data_dir: &std::path::Path) -> Result<Self> {
        use std::os::fd::AsRawFd;
        let path = data_dir.join("server.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        // SAFETY: flock on a descriptor this function owns, open for the call's whole length.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::WouldBlock {
                anyhow::bail!(
                    "data dir {} is in use by another dlscale server (it holds {}): stop that \
                     server first, or give this one a data_dir of its own",
                    data_dir.display(),
                    path.display()
                );
            }
            return Err(e).with_context(|| format!("cannot lock {}", path.display()));
        }
        Ok(DataDirLock { _file: file })
    }
}

/// Reads the configuration again, as at the start (the file and the command line's overrides).
pub type Reread = Box<dyn Fn() -> Result<ServerConfig> + Send + Sync>;

/// Runs the service until SIGINT or SIGTERM. Jobs keep running when the server stops; the next
/// start finds them again. On SIGHUP, `reread` reads the configuration again and
/// [`reload::reload`] applies what can change without a restart.
pub async fn serve(config: ServerConfig, reread: Option<Reread>) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let service = start(config).await?;
    let local = listener.local_addr()?;
    let view = service.view();
    tracing::info!(
        "dlscale serving on http://{local} (data dir {}, policy {}, {} executor, {} GPUs on {} node(s))",
        service.config.data_dir.display(),
        service.config.policy,
        service.executor.name(),
        view.topology.total(),
        view.topology.nodes.len()
    );
    if let Some(reread) = reread {
        tokio::spawn(reload_on_hangup(Arc::clone(&service), reread));
    }
    let app = api::router(service).into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("HTTP server failed")?;
    tracing::info!("dlscale stopped; running jobs continue and are found again at the next start");
    Ok(())
}

/// Reloads the configuration at every SIGHUP; what it changed, or why it did not, goes to the
/// log.
async fn reload_on_hangup(service: Arc<Service>, reread: Reread) {
    let Ok(mut hangups) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
    else {
        tracing::error!("cannot listen for SIGHUP: the configuration is read at the start only");
        return;
    };
    while hangups.recv().await.is_some() {
        let outcome = match reread() {
            Ok(config) => reload::reload(&service, config).await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(changes) if changes.is_empty() => {
                tracing::info!("configuration reloaded: nothing changed")
            }
            Ok(changes) => tracing::info!("configuration reloaded: {}", changes.join("; ")),
            Err(e) => tracing::error!("configuration not reloaded: {e:#}"),
        }
    }
}

/// SIGINT (Ctrl-C) or SIGTERM: what asks the process to end.
pub(crate) async fn shutdown_signal() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_others_can_read_is_refused() {
        let err = check_private(Path::new("/d/token"), 0o644)
            .unwrap_err()
            .to_string();
        assert!(err.contains("chmod 600 /d/token"), "{err}");
        assert!(check_private(Path::new("/d/token"), 0o640).is_err());
        assert!(check_private(Path::new("/d/token"), 0o600).is_ok());
        assert!(check_private(Path::new("/d/token"), 0o400).is_ok());
    }
}
