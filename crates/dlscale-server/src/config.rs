//! Server configuration: a TOML file (`dlscale.toml`), command-line overrides and `DLSCALE_TOKEN`.
//!
//! ```toml
//! listen = "127.0.0.1:7878"   # address of the HTTP API
//! data_dir = "/var/lib/dlscale"
//! token = "s3cret"            # bearer token; DLSCALE_TOKEN overrides it
//! policy = "elastic-batch"    # any policy of dlscale_core::REGISTRY
//! utility = "fair"            # fair (p = -1) | fair:P | goodput | speedup | throughput
//! admission = "queue"         # queue | drop
//! backfill = true
//! min_gain = 0.05             # a running job is rescaled only for > 5 % predicted gain
//! restart_cost_s = 30         # Pollux-style restart penalty (0: off)
//! remaining_exponent = 1.5    # shortest remaining first, for jobs declaring a length (0: off)
//! remaining_scale_s = 3600    # seconds left at which remaining time starts to weigh
//! counts = "any"              # GPU counts offered: any | powers-of-two | whole-nodes-beyond-one
//! consolidate = false         # cap a restart that would spread a job at what packs it
//! learn_overlap = true        # learned models may fit compute/all-reduce overlap (γ > 1)
//! cooldown_s = 60             # no rescale within this many seconds of a (re)start
//! interval_s = 30             # periodic re-optimisation
//! on_events = "admit"         # on an arrival or end: wait | admit (start waiting jobs) | reshape
//! grace_s = 30                # SIGTERM → SIGKILL grace period
//! max_retries = 2             # relaunches after a failure before a job is marked failed
//! torchrun = "/path/to/venv/bin/torchrun"
//! executor = "local"          # any executor of crate::executor::EXECUTORS (default: local)
//!
//! [teams.vision]              # a team (jobs name it in `team`); policies: elastic-*, static*
//! guaranteed_gpus = 16        # held whenever its jobs can use them (default 0)
//! max_gpus = 32               # the most its jobs hold, borrowing included (default: no limit)
//! lend_limit = 8              # the most of its idle guarantee lent out (default: all of it)
//! ```
//!
//! Each executor's module reads its own keys and table and says what they mean: the local
//! executor's `slots` and `slot_types` (`executor/local/settings.rs`), the Slurm executor's
//! `[slurm]` table and each team's `slurm_account` (`executor/slurm/settings.rs`), the Ray
//! executor's `[ray]` table (`executor/ray/settings.rs`).
//!
//! With teams, `fair_share_half_life_s = 604800` (top level; the default, Slurm's seven days)
//! sets how fast past usage is forgotten in the fair share between teams; 0 turns it off.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use dlscale_autoscaler::{AutoscalerConfig, OnEvents, MIN_INTERVAL_S};
use dlscale_core::allocator::{FairShare, TeamQuota, Teams, ELASTIC_BATCH};
use dlscale_core::jobfile::{parse_document, FileFormat};
use dlscale_core::{
    policy_info, Admission, CoreError, CountRule, PolicyInfo, PolicyOptions, RestartAwareness,
    Settings, Utility, Weighing,
};
use serde::Deserialize;
use serde::Serialize;

use crate::executor::ray::RayFile;
use crate::executor::slurm::SlurmFile;
use crate::executor::{self, ExecutorSettings};
use crate::users::Users;

/// The configuration file, every key optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Address to listen on.
    pub listen: Option<SocketAddr>,
    /// Number of slots to schedule when not using detected GPUs.
    pub slots: Option<u32>,
    /// The GPU type of each slot, in slot order (local executor).
    pub slot_types: Option<Vec<String>>,
    /// Directory of the database, job logs and checkpoints.
    pub data_dir: Option<PathBuf>,
    /// Bearer token for state-changing routes.
    pub token: Option<String>,
    /// Allocation policy name.
    pub policy: Option<String>,
    /// `tiresias`: GPU-seconds after which a job drops to the low-priority queue.
    pub tiresias_threshold_gpu_s: Option<f64>,
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
    /// Shortest remaining first: the exponent of the remaining-time weight (0: off).
    pub remaining_exponent: Option<f64>,
    /// Shortest remaining first: the seconds left at which remaining time starts to weigh.
    pub remaining_scale_s: Option<f64>,
    /// GPU counts the knapsack policies offer: `any`, `powers-of-two`,
    /// `whole-nodes-beyond-one`.
    pub counts: Option<String>,
    /// Cap a restarting job that would be spread over more nodes than it needs.
    pub consolidate: Option<bool>,
    /// Learned models may fit an overlap of compute and all-reduce.
    pub learn_overlap: Option<bool>,
    /// Per-job cooldown after a (re)start, seconds.
    pub cooldown_s: Option<f64>,
    /// Seconds between periodic re-optimisations.
    pub interval_s: Option<f64>,
    /// What a decision on an event may change: `wait`, `admit` or `reshape`.
    pub on_events: Option<String>,
    /// SIGTERM → SIGKILL grace period, seconds.
    pub grace_s: Option<f64>,
    /// Relaunches of a failed job before it is marked failed.
    pub max_retries: Option<u32>,
    /// The torchrun executable.
    pub torchrun: Option<PathBuf>,
    /// Base URL workers use to reach the API (default `http://<listen>`).
    pub api_url: Option<String>,
    /// Executor: the name of one of [`executor::EXECUTORS`] (default: the first, `local`).
    pub executor: Option<String>,
    /// Who may read `/metrics` without the token: `loopback` (default: clients on this machine),
    /// `anyone`, or `nobody` (the token is always needed).
    pub metrics_without_token: Option<String>,
    /// Defragmenting repack: most running jobs moved per job it consolidates (default 0: off).
    pub defragment_moves: Option<u32>,
    /// Settings of the Slurm executor. Each executor with a table of its own has its field here,
    /// typed by its module, so that a misspelt key is refused naming the key it resembles.
    pub slurm: Option<SlurmFile>,
    /// Settings of the Ray executor.
    pub ray: Option<RayFile>,
    /// The teams sharing the cluster, by name: `[teams.NAME]` tables.
    pub teams: Option<BTreeMap<String, TeamFile>>,
    /// With teams: the half-life of past usage in the fair share between them, seconds (0:
    /// off; default: seven days).
    pub fair_share_half_life_s: Option<f64>,
    /// The users, by name: `[users.NAME]` tables.
    pub users: Option<BTreeMap<String, UserFile>>,
}

/// A `[users.NAME]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserFile {
    /// Their team (default: the default team).
    pub team: Option<String>,
    /// The Argon2 hash of their token (`dlscale token --user NAME` makes both).
    pub token_hash: String,
}

/// A `[teams.NAME]` table: the team's quota, in GPUs.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamFile {
    /// What the team holds whenever its jobs can use it (default 0).
    pub guaranteed_gpus: Option<u32>,
    /// The most its jobs hold together, borrowing included (default: no limit).
    pub max_gpus: Option<u32>,
    /// The most of its idle guarantee lent to other teams (default: all of it).
    pub lend_limit: Option<u32>,
    /// The Slurm account its launches are charged to (`--account`; default: `slurm.account`),
    /// so that Slurm's own accounting agrees with dlscale's.
    pub slurm_account: Option<String>,
}

/// Who may read `/metrics` without the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricsAccess {
    /// Clients on this machine (loopback addresses) that address it by a loopback name or
    /// address (not a web page that rebinds its own name to it).
    Loopback,
    /// Anyone.
    Anyone,
    /// Nobody: the token is always needed.
    Nobody,
}

impl ConfigFile {
    /// Reads a TOML configuration file; errors name the file and the line.
    pub fn load(path: &Path) -> Result<Self> {
        let text = crate::input_file::read_input_file(path, "config")?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses the text of a configuration file; errors name `source_name`, the line and the
    /// key (with the known key it is probably a misspelling of).
    pub fn parse(text: &str, source_name: &str) -> Result<Self> {
        Ok(parse_document(text, FileFormat::Toml, source_name)?)
    }
}

/// The validated configuration the server runs with.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address of the HTTP API.
    pub listen: SocketAddr,
    /// Directory of `dlscale.db`, `jobs/<id>/<uid>/` (logs, checkpoints) and the generated
    /// token; always absolute (a relative one is taken from the server's working directory), as
    /// launches run in their jobs' own working directories.
    pub data_dir: PathBuf,
    /// Bearer token (`None`: one is generated into `<data_dir>/token`).
    pub token: Option<String>,
    /// Allocation policy.
    pub policy: PolicyInfo,
    /// Options of individual policies.
    pub policy_options: PolicyOptions,
    /// Allocator settings (utility, admission, min gain, restart cost).
    pub settings: Settings,
    /// Learned models may fit an overlap of compute and all-reduce.
    pub learn_overlap: bool,
    /// Cooldown after a (re)start before a job may be rescaled, seconds.
    pub cooldown_s: f64,
    /// Seconds between periodic re-optimisations.
    pub interval_s: f64,
    /// What a decision on an arrival or an end may change between periodic ones.
    pub on_events: OnEvents,
    /// SIGTERM → SIGKILL grace period, seconds.
    pub grace_s: f64,
    /// Relaunches after failures before a job is marked failed.
    pub max_retries: u32,
    /// torchrun executable (a path, or a name looked up in PATH).
    pub torchrun: PathBuf,
    /// Base URL given to workers as `DLSCALE_API`.
    pub api_url: String,
    /// The executor's settings (which one, and its own).
    pub executor: Arc<dyn ExecutorSettings>,
    /// Who may read `/metrics` without the token.
    pub metrics_without_token: MetricsAccess,
    /// Defragmenting repack: most running jobs moved per job it consolidates (0: off).
    pub defragment_moves: u32,
    /// The teams and their quotas (`None`: no teams; every job is in the default team). The
    /// guarantees are checked against the cluster when the service starts.
    pub teams: Option<Teams>,
    /// Fair share between the teams (`None`: off, or no teams).
    pub fair_share: Option<FairShare>,
    /// The users and their tokens' hashes (none: only the admin token).
    pub users: Arc<Users>,
}

/// `path` made absolute against the server's working directory; `key` names it in the error.
fn absolute(key: &str, path: PathBuf) -> Result<PathBuf> {
    if path.is_absolute() {
        return Ok(path);
    }
    let here = std::env::current_dir().with_context(|| {
        format!(
            "{key}: cannot resolve {} without a working directory",
            path.display()
        )
    })?;
    Ok(here.join(path))
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

/// `min_gain`: in `[0, RestartAwareness::MAX_MIN_GAIN]`.
fn min_gain(value: f64) -> Result<f64> {
    let most = RestartAwareness::MAX_MIN_GAIN;
    if (0.0..=most).contains(&value) {
        Ok(value)
    } else {
        bail!("min_gain must be a number in [0, {most}], got {value}")
    }
}

/// The longest duration a setting may have, in seconds (about 31 years): larger values would
/// overflow timers (`Duration::from_secs_f64` panics past `u64::MAX` seconds).
pub const MAX_DURATION_S: f64 = 1e9;

/// A duration in seconds: finite, ≥ 0 and at most [`MAX_DURATION_S`]; `name` names it in the
/// error.
pub(crate) fn duration_s(name: &str, value: f64) -> Result<f64> {
    let value = non_negative(name, value)?;
    if value > MAX_DURATION_S {
        bail!("{name} must be at most {MAX_DURATION_S:e} seconds, got {value}");
    }
    Ok(value)
}

impl ServerConfig {
    /// The autoscaler's settings: the executor says how a job's GPUs may be split over nodes
    /// (Slurm: equal GPUs per node, for per-node GRES) and how long a launch may take to start,
    /// and every worker gets the same per-worker batch.
    pub fn autoscaler(&self) -> AutoscalerConfig {
        AutoscalerConfig {
            policy: self.policy,
            policy_options: self.policy_options,
            settings: self.settings,
            shape: self.executor.shape(),
            defragment_moves_per_job: self.defragment_moves,
            interval_s: Some(self.interval_s),
            on_events: self.on_events,
            cooldown_s: self.cooldown_s,
            grace_s: self.grace_s,
            max_retries: self.max_retries,
            start_timeout_s: self.executor.start_timeout_s(),
            restart_cost_s: self.settings.restart.cost_s,
            equal_local_batches: true,
            learn_overlap: self.learn_overlap,
            teams: self.teams.clone(),
            fair_share: self.fair_share,
        }
    }

    /// What a start records of the configuration: the autoscaler's settings (for replays) and
    /// the executor.
    pub fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "autoscaler": self.autoscaler(),
            "executor": self.executor.name(),
        })
    }

    /// Resolves a configuration file (with overrides already applied) into a validated config.
    /// `env_token` (from `DLSCALE_TOKEN`) wins over the file's token.
    pub fn resolve(file: ConfigFile, env_token: Option<String>) -> Result<Self> {
        let listen = file
            .listen
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 7878)));
        let policy = match file.policy.as_deref() {
            Some(p) => *policy_info(p).map_err(|e| anyhow!("policy: {e}"))?,
            None => ELASTIC_BATCH,
        };
        // Unset keys take what the yardstick shows best (`Settings::recommended`).
        let best = Settings::recommended();
        let utility = match file.utility.as_deref() {
            Some(u) => Utility::from_str(u).map_err(|e| anyhow!("utility: {e}"))?,
            None => best.utility,
        };
        let admission = match file.admission.as_deref() {
            Some(a) => Admission::from_str(a).map_err(|e| anyhow!("admission: {e}"))?,
            None => best.admission,
        };
        let settings = Settings {
            utility,
            admission,
            backfill: file.backfill.unwrap_or(best.backfill),
            restart: RestartAwareness {
                min_gain: min_gain(file.min_gain.unwrap_or(best.restart.min_gain))?,
                cost_s: non_negative(
                    "restart_cost_s",
                    file.restart_cost_s.unwrap_or(best.restart.cost_s),
                )?,
            },
            counts: match file.counts.as_deref() {
                Some(c) => CountRule::from_str(c).map_err(|e| anyhow!("counts: {e}"))?,
                None => CountRule::Any,
            },
            consolidate: file.consolidate.unwrap_or(false),
            weighing: Weighing {
                remaining_exponent: non_negative(
                    "remaining_exponent",
                    file.remaining_exponent
                        .unwrap_or(best.weighing.remaining_exponent),
                )?,
                remaining_scale_s: duration_s(
                    "remaining_scale_s",
                    file.remaining_scale_s
                        .unwrap_or(best.weighing.remaining_scale_s),
                )?,
                ..best.weighing
            },
            ..best
        };
        let interval_s = duration_s("interval_s", file.interval_s.unwrap_or(30.0))?;
        if interval_s < MIN_INTERVAL_S {
            bail!("interval_s must be at least {MIN_INTERVAL_S}, got {interval_s}");
        }
        let executor = executor::configure(&file)?;
        let torchrun = executor.torchrun(file.torchrun)?;
        // The environment's wins, and an error in it is named so, not as the file's key.
        let from = if env_token.as_deref().is_some_and(|t| !t.is_empty()) {
            "DLSCALE_TOKEN"
        } else {
            "token"
        };
        let token = env_token.or(file.token).filter(|t| !t.is_empty());
        if let Some(t) = &token {
            if t.chars().any(|c| c.is_control() || c.is_whitespace()) {
                bail!("{from} must not contain whitespace or control characters");
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
        let metrics_without_token = match file.metrics_without_token.as_deref() {
            None | Some("loopback") => MetricsAccess::Loopback,
            Some("anyone") => MetricsAccess::Anyone,
            Some("nobody") => MetricsAccess::Nobody,
            Some(other) => bail!(
                "metrics_without_token: unknown value '{other}' (expected loopback, anyone or nobody)"
            ),
        };
        let teams = resolve_teams(file.teams, policy)?;
        let users = Arc::new(resolve_users(file.users, teams.as_ref())?);
        let half_life_s = duration_s(
            "fair_share_half_life_s",
            file.fair_share_half_life_s
                .unwrap_or(FairShare::DEFAULT_HALF_LIFE_S),
        )?;
        let fair_share = match (&teams, half_life_s > 0.0) {
            (Some(_), true) => Some(FairShare::new(half_life_s, "fair_share_half_life_s")?),
            _ => None,
        };
        Ok(ServerConfig {
            users,
            teams,
            fair_share,
            listen,
            metrics_without_token,
            defragment_moves: file.defragment_moves.unwrap_or(0),
            data_dir: absolute("data_dir", file.data_dir.unwrap_or_else(default_data_dir))?,
            token,
            policy,
            policy_options: PolicyOptions {
                tiresias_threshold_gpu_s: duration_s(
                    "tiresias_threshold_gpu_s",
                    file.tiresias_threshold_gpu_s
                        .unwrap_or(PolicyOptions::default().tiresias_threshold_gpu_s),
                )?,
            },
            settings,
            learn_overlap: file.learn_overlap.unwrap_or(true),
            cooldown_s: duration_s("cooldown_s", file.cooldown_s.unwrap_or(60.0))?,
            interval_s,
            on_events: match file.on_events.as_deref() {
                Some(e) => OnEvents::from_str(e).map_err(|e| anyhow!("on_events: {e}"))?,
                None => OnEvents::Admit,
            },
            grace_s: duration_s("grace_s", file.grace_s.unwrap_or(30.0))?,
            max_retries: file.max_retries.unwrap_or(2),
            torchrun,
            api_url,
            executor,
        })
    }
}

/// The `[teams]` tables, checked (the guarantees against the cluster only at start, when it is
/// known). Quotas are kept by the knapsack policies only: another policy with teams is refused.
fn resolve_teams(
    file: Option<BTreeMap<String, TeamFile>>,
    policy: PolicyInfo,
) -> Result<Option<Teams>> {
    let Some(file) = file.filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    if !policy.keeps_teams {
        bail!(
            "teams: quotas are kept by the policies {}, not {}",
            dlscale_core::allocator::team_policy_names().join(", "),
            policy.name
        );
    }
    let named = file
        .into_iter()
        .map(|(name, t)| {
            let guaranteed_gpus = t.guaranteed_gpus.unwrap_or(0);
            let quota = TeamQuota {
                guaranteed_gpus,
                max_gpus: t.max_gpus.unwrap_or(u32::MAX),
                lend_limit: t.lend_limit,
            };
            (name, quota)
        })
        .collect();
    match Teams::new(named, u32::MAX) {
        Ok(teams) => Ok(Some(teams)),
        Err(CoreError::InvalidCluster { field, reason }) => bail!("{field}: {reason}"),
        Err(other) => Err(other.into()),
    }
}

/// The `[users]` tables, checked: each user's team must be a configured team.
fn resolve_users(file: Option<BTreeMap<String, UserFile>>, teams: Option<&Teams>) -> Result<Users> {
    let mut users = Vec::new();
    for (name, user) in file.unwrap_or_default() {
        if let Some(team) = &user.team {
            let known = teams.is_some_and(|t| t.find(team).is_some());
            if !known {
                let names = teams.map_or_else(
                    || "no teams are configured".to_string(),
                    |t| {
                        let n: Vec<&str> = t.names().iter().map(|n| &**n).collect();
                        format!("known: {}", n.join(", "))
                    },
                );
                bail!("users.{name}.team: unknown team {team:?} ({names})");
            }
        }
        users.push((name, user.team, user.token_hash));
    }
    Users::new(users)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlscale_core::placement::ShapeRule;

    #[test]
    fn a_configured_torchrun_must_be_executable_and_is_pinned_where_it_was_found() {
        let file = |torchrun: &str| ConfigFile {
            torchrun: Some(torchrun.into()),
            ..ConfigFile::default()
        };
        let err = |torchrun: &str| {
            ServerConfig::resolve(file(torchrun), None)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("/nonexistent/bin/torchrun"),
            "torchrun: the program /nonexistent/bin/torchrun could not be executed: No such file \
             or directory"
        );
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("torchrun");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let name = script.display().to_string();
        assert_eq!(
            err(&name),
            format!(
                "torchrun: the program {name} could not be executed: Permission denied (not \
                 executable)"
            )
        );
        assert!(err("no-such-torchrun-anywhere").ends_with("not found in any directory of PATH"));
        // A name on PATH is taken from where PATH has it now.
        let sh = ServerConfig::resolve(file("sh"), None).unwrap().torchrun;
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
        // On Slurm it runs on the compute nodes: not checked here.
        let slurm = ConfigFile {
            executor: Some("slurm".into()),
            slurm: Some(SlurmFile {
                partition: Some("gpu".into()),
                ..SlurmFile::default()
            }),
            ..file("/nodes/only/torchrun")
        };
        let c = ServerConfig::resolve(slurm, None).unwrap();
        assert_eq!(c.torchrun, Path::new("/nodes/only/torchrun"));
    }

    #[test]
    fn defaults_and_overrides() {
        // A relative data directory is taken from where the server runs, not from where each
        // launch runs (its job's workdir).
        let relative = ConfigFile {
            data_dir: Some("data".into()),
            ..ConfigFile::default()
        };
        let c = ServerConfig::resolve(relative, None).unwrap();
        assert_eq!(c.data_dir, std::env::current_dir().unwrap().join("data"));
        let c = ServerConfig::resolve(ConfigFile::default(), None).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:7878");
        assert_eq!(c.api_url, "http://127.0.0.1:7878");
        assert_eq!(c.policy, ELASTIC_BATCH);
        // Unset, the settings are what the yardstick shows best.
        assert_eq!(c.settings, Settings::recommended());
        assert_eq!(c.settings.admission, Admission::Queue);
        let speedup: ConfigFile = toml::from_str("utility = \"speedup\"\n").unwrap();
        let c = ServerConfig::resolve(speedup, None).unwrap();
        assert_eq!(
            c.settings.utility,
            dlscale_core::Utility::Speedup,
            "one setting away"
        );
        let file: ConfigFile = toml::from_str(
            "listen = \"0.0.0.0:9000\"\ntoken = \"file\"\npolicy = \"static\"\nmin_gain = 0.2\n",
        )
        .unwrap();
        let c = ServerConfig::resolve(file, Some("env".into())).unwrap();
        assert_eq!(c.api_url, "http://127.0.0.1:9000");
        assert_eq!(c.token.as_deref(), Some("env"));
        assert_eq!(c.policy.name, "static");
        assert_eq!(c.settings.restart.min_gain, 0.2);
        assert_eq!(
            (c.settings.counts, c.settings.consolidate),
            (CountRule::Any, false)
        );
        // A token with a space is named where it came from: the environment wins over the file.
        for (env, file_token, says) in [
            (
                Some("my secret"),
                Some("ok"),
                "DLSCALE_TOKEN must not contain whitespace",
            ),
            (None, Some("my secret"), "token must not contain whitespace"),
        ] {
            let file = ConfigFile {
                token: file_token.map(String::from),
                ..ConfigFile::default()
            };
            let err = ServerConfig::resolve(file, env.map(String::from)).unwrap_err();
            assert!(err.to_string().starts_with(says), "{err}");
        }
        // A minimum gain so large that values scaled by it overflow is refused, named.
        for (text, says) in [
            (
                "min_gain = 1e303",
                "min_gain must be a number in [0, 10], got 1000",
            ),
            (
                "utility = \"fair:-200\"",
                "fair:P needs an exponent P in [-10, 0), got -200",
            ),
        ] {
            let file: ConfigFile = toml::from_str(text).unwrap();
            let err = format!("{:#}", ServerConfig::resolve(file, None).unwrap_err());
            assert!(err.contains(says), "{text}: {err}");
        }
        let file: ConfigFile =
            toml::from_str("counts = \"powers-of-two\"\nconsolidate = true\n").unwrap();
        let c = ServerConfig::resolve(file, None).unwrap();
        assert_eq!(
            (c.settings.counts, c.settings.consolidate),
            (CountRule::PowersOfTwo, true)
        );
        // Shortest remaining first: on by default, off at exponent 0, at the default scale.
        assert!(c.settings.weighing.shortest_first());
        let off: ConfigFile = toml::from_str("remaining_exponent = 0\n").unwrap();
        let c = ServerConfig::resolve(off, None).unwrap();
        assert!(!c.settings.weighing.shortest_first());
        let file: ConfigFile = toml::from_str("remaining_exponent = 1.5\n").unwrap();
        let c = ServerConfig::resolve(file, None).unwrap();
        assert_eq!(c.settings.weighing, Weighing::shortest_remaining_first(1.5));
        assert_eq!(c.autoscaler().settings.weighing, c.settings.weighing);
    }

    #[test]
    fn rejects_bad_values() {
        for (text, expected) in [
            ("policy = \"x\"", "policy: unknown policy"),
            ("min_gain = -1.0", "min_gain must be"),
            ("slots = 0", "slots must be at least 1"),
            (
                "slots = 1048577",
                "slots must be at most 1048576 (GPUs in one cluster), got 1048577",
            ),
            ("interval_s = 0.0", "interval_s must be at least"),
            ("interval_s = 1e20", "interval_s must be at most"),
            ("grace_s = 1e20", "grace_s must be at most"),
            ("cooldown_s = 1e20", "cooldown_s must be at most"),
            ("counts = \"odd\"", "counts: unknown count rule 'odd'"),
            (
                "on_events = \"always\"",
                "on_events: unknown event setting 'always'",
            ),
            ("remaining_exponent = -1.0", "remaining_exponent must be"),
            (
                "remaining_scale_s = 1e20",
                "remaining_scale_s must be at most",
            ),
            (
                "[teams.a]\nguaranteed_gpus = 4\nmax_gpus = 2",
                "teams.a.max_gpus: 2 is below the team's guaranteed_gpus, 4",
            ),
            (
                "[teams.a]\nguaranteed_gpus = 2\nlend_limit = 3",
                "teams.a.lend_limit: 3 is above the team's guaranteed_gpus, 2",
            ),
            (
                "[teams.\"a b\"]\nguaranteed_gpus = 2",
                "team name \"a b\": letters, digits",
            ),
            (
                "[teams.a]\n[users.u]\nteam = \"b\"\ntoken_hash = \"x\"",
                "users.u.team: unknown team \"b\" (known: a, default)",
            ),
            (
                "[users.u]\ntoken_hash = \"x\"",
                "users.u.token_hash: not a password hash",
            ),
            (
                "[teams.a]\nslurm_account = \"p\"",
                "teams.a.slurm_account: for executor = \"slurm\" only",
            ),
            (
                "policy = \"tiresias\"\n[teams.a]\nguaranteed_gpus = 2",
                "teams: quotas are kept by the policies elastic-batch, type-blind, elastic-gpu, \
                 static, static-partitions, not tiresias",
            ),
        ] {
            let file: ConfigFile = toml::from_str(text).unwrap();
            let err = ServerConfig::resolve(file, None).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
        assert!(toml::from_str::<ConfigFile>("colour = 1").is_err());
        let unknown_key = toml::from_str::<ConfigFile>("[teams.a]\nguaranteed = 1").unwrap_err();
        assert!(
            unknown_key
                .to_string()
                .contains("unknown field `guaranteed`"),
            "{unknown_key}"
        );
    }

    #[test]
    fn teams_with_their_quotas_and_the_default_team() {
        let file: ConfigFile = toml::from_str(
            "[teams.vision]\nguaranteed_gpus = 4\nmax_gpus = 6\nlend_limit = 1\n[teams.nlp]\n",
        )
        .unwrap();
        let teams = ServerConfig::resolve(file, None).unwrap().teams.unwrap();
        let named = teams.named();
        let names: Vec<&str> = named.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["nlp", "vision", "default"]);
        assert_eq!(
            named[1].1,
            TeamQuota {
                guaranteed_gpus: 4,
                max_gpus: 6,
                lend_limit: Some(1)
            }
        );
        assert_eq!(
            named[0].1.guaranteed_gpus, 0,
            "nothing guaranteed unless said"
        );
    }

    #[test]
    fn the_executor_is_chosen_by_name_and_reads_its_own_keys() {
        let file: ConfigFile = toml::from_str(
            "executor = \"slurm\"\n[slurm]\npartition = \"gpu\"\npending_timeout_s = 60\n",
        )
        .unwrap();
        let c = ServerConfig::resolve(file, None).unwrap();
        assert_eq!(c.executor.name(), "slurm");
        let autoscaler = c.autoscaler();
        assert_eq!(
            (autoscaler.shape, autoscaler.start_timeout_s),
            (ShapeRule::EqualPerNode, Some(60.0))
        );
        assert_eq!(c.describe()["executor"], "slurm");
        let c = ServerConfig::resolve(ConfigFile::default(), None).unwrap();
        assert_eq!(c.executor.name(), "local", "the default");
        let autoscaler = c.autoscaler();
        assert_eq!(
            (autoscaler.shape, autoscaler.start_timeout_s),
            (ShapeRule::Any, None)
        );
        for (text, expected) in [
            ("executor = \"slurm\"", "slurm.partition is required"),
            (
                "executor = \"k8s\"",
                "executor: unknown executor 'k8s' (expected local, slurm, ray)",
            ),
            ("[slurm]\npartition = \"gpu\"", "needs executor = \"slurm\""),
            (
                "executor = \"local\"\n[slurm]\npartition = \"gpu\"",
                "a [slurm] table needs executor = \"slurm\"",
            ),
            (
                "executor = \"slurm\"\nslots = 4\n[slurm]\npartition = \"gpu\"",
                "slots is for the local executor",
            ),
            (
                "executor = \"slurm\"\nslot_types = [\"a100\"]\n[slurm]\npartition = \"gpu\"",
                "slot_types is for the local executor",
            ),
            (
                "executor = \"slurm\"\n[slurm]\npartition = \"gpu\"\npoll_s = 0.01",
                "slurm.poll_s must be at least",
            ),
            (
                "executor = \"slurm\"\n[slurm]\npartition = \"gpu\"\npoll_s = 1e20",
                "slurm.poll_s must be at most",
            ),
            (
                "executor = \"slurm\"\n[slurm]\npartition = \"gpu\"\ncommand_timeout_s = 1e20",
                "slurm.command_timeout_s must be at most",
            ),
        ] {
            let file: ConfigFile = toml::from_str(text).unwrap();
            let err = ServerConfig::resolve(file, None).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
        assert!(toml::from_str::<ConfigFile>("[slurm]\nqueue = \"x\"").is_err());
    }
}
