//! Server configuration: a TOML file (`dlscale.toml`), command-line overrides and `DLSCALE_TOKEN`.
//!
//! ```toml
//! listen = "127.0.0.1:7878"   # address of the HTTP API
//! slots = 4                   # GPU slots when the machine has no GPUs (default: nvidia-smi)
//! data_dir = "/var/lib/dlscale"
//! token = "s3cret"            # bearer token; DLSCALE_TOKEN overrides it
//! policy = "elastic-batch"    # elastic-batch | elastic-gpu | static
//! utility = "speedup"         # speedup | throughput | goodput | fair | fair:P
//! admission = "queue"         # queue | drop
//! backfill = false
//! min_gain = 0.05             # a running job is rescaled only for > 5 % predicted gain
//! restart_cost_s = 0          # Pollux-style restart penalty (0: off)
//! cooldown_s = 60             # no rescale within this many seconds of a (re)start
//! interval_s = 30             # periodic re-optimisation
//! grace_s = 30                # SIGTERM → SIGKILL grace period
//! max_retries = 2             # relaunches after a failure before a job is marked failed
//! torchrun = "/path/to/venv/bin/torchrun"
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{anyhow, bail, Context, Result};
use dlscale_core::{Admission, Policy, RestartAwareness, Settings, Utility};
use serde::Deserialize;

/// The configuration file, every key optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Address to listen on.
    pub listen: Option<SocketAddr>,
    /// Number of slots to schedule when not using detected GPUs.
    pub slots: Option<u32>,
    /// Directory of the database, job logs and checkpoints.
    pub data_dir: Option<PathBuf>,
    /// Bearer token for state-changing routes.
    pub token: Option<String>,
    /// Allocation policy name.
    pub policy: Option<String>,
    /// Utility name.
    pub utility: Option<String>,
    /// Admission: `queue` or `drop`.
    pub admission: Option<String>,
    /// Backfill with queue admission.
    pub backfill: Option<bool>,
    /// Minimum predicted relative gain of a rescale.
    pub min_gain: Option<f64>,
    /// Seconds of progress a restart costs (restart penalty of the optimizer).
    pub restart_cost_s: Option<f64>,
    /// Per-job cooldown after a (re)start, seconds.
    pub cooldown_s: Option<f64>,
    /// Seconds between periodic re-optimisations.
    pub interval_s: Option<f64>,
    /// SIGTERM → SIGKILL grace period, seconds.
    pub grace_s: Option<f64>,
    /// Relaunches of a failed job before it is marked failed.
    pub max_retries: Option<u32>,
    /// The torchrun executable.
    pub torchrun: Option<PathBuf>,
    /// Base URL workers use to reach the API (default `http://<listen>`).
    pub api_url: Option<String>,
}

impl ConfigFile {
    /// Reads a TOML configuration file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config {}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow!("{}: {}", path.display(), e.message()))
    }
}

/// The validated configuration the server runs with.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address of the HTTP API.
    pub listen: SocketAddr,
    /// Explicit slot count (`None`: detect GPUs with nvidia-smi).
    pub slots: Option<u32>,
    /// Directory of `dlscale.db`, `jobs/<id>/` (logs, checkpoints) and the generated token.
    pub data_dir: PathBuf,
    /// Bearer token (`None`: one is generated into `<data_dir>/token`).
    pub token: Option<String>,
    /// Allocation policy.
    pub policy: Policy,
    /// Allocator settings (utility, admission, min gain, restart cost).
    pub settings: Settings,
    /// Cooldown after a (re)start before a job may be rescaled, seconds.
    pub cooldown_s: f64,
    /// Seconds between periodic re-optimisations.
    pub interval_s: f64,
    /// SIGTERM → SIGKILL grace period, seconds.
    pub grace_s: f64,
    /// Relaunches after failures before a job is marked failed.
    pub max_retries: u32,
    /// torchrun executable (a path, or a name looked up in PATH).
    pub torchrun: PathBuf,
    /// Base URL given to workers as `DLSCALE_API`.
    pub api_url: String,
}

/// Default data directory: `$XDG_DATA_HOME/dlscale`, `$HOME/.local/share/dlscale`, or
/// `./dlscale-data`.
pub fn default_data_dir() -> PathBuf {
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join("dlscale");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(home).join(".local/share/dlscale");
    }
    PathBuf::from("dlscale-data")
}

fn non_negative(name: &str, value: f64) -> Result<f64> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        bail!("{name} must be a finite number ≥ 0, got {value}")
    }
}

impl ServerConfig {
    /// Resolves a configuration file (with overrides already applied) into a validated config.
    /// `env_token` (from `DLSCALE_TOKEN`) wins over the file's token.
    pub fn resolve(file: ConfigFile, env_token: Option<String>) -> Result<Self> {
        let listen = file
            .listen
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 7878)));
        let policy = match file.policy.as_deref() {
            Some(p) => Policy::from_str(p).map_err(|e| anyhow!("policy: {e}"))?,
            None => Policy::ElasticBatch,
        };
        let utility = match file.utility.as_deref() {
            Some(u) => Utility::from_str(u).map_err(|e| anyhow!("utility: {e}"))?,
            None => Utility::Speedup,
        };
        let admission = match file.admission.as_deref() {
            Some(a) => Admission::from_str(a).map_err(|e| anyhow!("admission: {e}"))?,
            None => Admission::Queue,
        };
        let settings = Settings {
            utility,
            admission,
            backfill: file.backfill.unwrap_or(false),
            restart: RestartAwareness {
                min_gain: non_negative("min_gain", file.min_gain.unwrap_or(0.05))?,
                cost_s: non_negative("restart_cost_s", file.restart_cost_s.unwrap_or(0.0))?,
            },
            ..Settings::default()
        };
        if file.slots == Some(0) {
            bail!("slots must be at least 1");
        }
        let interval_s = non_negative("interval_s", file.interval_s.unwrap_or(30.0))?;
        if interval_s < 0.1 {
            bail!("interval_s must be at least 0.1, got {interval_s}");
        }
        let token = env_token.or(file.token).filter(|t| !t.is_empty());
        if let Some(t) = &token {
            if t.chars().any(|c| c.is_control() || c.is_whitespace()) {
                bail!("the token must not contain whitespace or control characters");
            }
        }
        let api_url = match file.api_url {
            Some(url) => {
                if !url.starts_with("http://") {
                    bail!("api_url must start with http://, got {url}");
                }
                url.trim_end_matches('/').to_string()
            }
            None => {
                let host = if listen.ip().is_unspecified() {
                    "127.0.0.1".to_string()
                } else if listen.is_ipv6() {
                    format!("[{}]", listen.ip())
                } else {
                    listen.ip().to_string()
                };
                format!("http://{host}:{}", listen.port())
            }
        };
        Ok(ServerConfig {
            listen,
            slots: file.slots,
            data_dir: file.data_dir.unwrap_or_else(default_data_dir),
            token,
            policy,
            settings,
            cooldown_s: non_negative("cooldown_s", file.cooldown_s.unwrap_or(60.0))?,
            interval_s,
            grace_s: non_negative("grace_s", file.grace_s.unwrap_or(30.0))?,
            max_retries: file.max_retries.unwrap_or(2),
            torchrun: file.torchrun.unwrap_or_else(|| PathBuf::from("torchrun")),
            api_url,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let c = ServerConfig::resolve(ConfigFile::default(), None).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:7878");
        assert_eq!(c.api_url, "http://127.0.0.1:7878");
        assert_eq!(c.policy, Policy::ElasticBatch);
        assert_eq!(c.settings.admission, Admission::Queue);
        let file: ConfigFile = toml::from_str(
            "listen = \"0.0.0.0:9000\"\ntoken = \"file\"\npolicy = \"static\"\nmin_gain = 0.2\n",
        )
        .unwrap();
        let c = ServerConfig::resolve(file, Some("env".into())).unwrap();
        assert_eq!(c.api_url, "http://127.0.0.1:9000");
        assert_eq!(c.token.as_deref(), Some("env"));
        assert_eq!(c.policy, Policy::Static);
        assert_eq!(c.settings.restart.min_gain, 0.2);
    }

    #[test]
    fn rejects_bad_values() {
        for (text, expected) in [
            ("policy = \"x\"", "policy: unknown policy"),
            ("min_gain = -1.0", "min_gain must be"),
            ("slots = 0", "slots must be at least 1"),
            ("interval_s = 0.0", "interval_s must be at least"),
        ] {
            let file: ConfigFile = toml::from_str(text).unwrap();
            let err = ServerConfig::resolve(file, None).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
        assert!(toml::from_str::<ConfigFile>("colour = 1").is_err());
    }
}
