//! The Slurm executor's configuration: the `[slurm]` table, and each team's account
//! (`slurm_account` in a `[teams.NAME]` table); both are refused with another executor.
//!
//! ```toml
//! executor = "slurm"
//!
//! [slurm]
//! partition = "gpu"           # required: jobs go here; its nodes are the cluster
//! account = "proj"            # optional --account
//! nodes = ["n1", "n2"]        # optional: only these nodes (default: all, from sinfo)
//! poll_s = 2                  # squeue poll period
//! pending_timeout_s = 120     # resubmit a launch pending longer than this
//! sbatch_args = ["--time=24:00:00"]
//! cpus_per_gpu = 4            # optional --cpus-per-task = GPUs per node x this
//! rdzv_port_base = 29500      # multi-node rendezvous ports: base .. base+999
//! command_timeout_s = 30      # longest wait for one Slurm command
//!
//! [teams.vision]
//! slurm_account = "vision"    # its launches' --account
//! ```
//!
//! `torchrun` runs on the compute nodes: it is taken as given, not checked here.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use dlscale_core::placement::ShapeRule;
use serde::Deserialize;

use super::SlurmExecutor;
use crate::config::{duration_s, ConfigFile, ServerConfig};
use crate::executor::{ExecContext, Executor, ExecutorKind, ExecutorSettings, Reports};

/// The Slurm executor's name in the configuration (`executor = "slurm"`).
pub const NAME: &str = "slurm";

/// The Slurm executor's kind, as [`crate::executor::EXECUTORS`] registers it.
pub static KIND: SlurmKind = SlurmKind;

/// The Slurm executor's kind: batch jobs on a Slurm cluster.
#[derive(Debug)]
pub struct SlurmKind;

/// The `[slurm]` table, every key optional except `partition`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmFile {
    /// Partition to submit to.
    pub partition: Option<String>,
    /// Account to charge.
    pub account: Option<String>,
    /// Only these nodes of the partition.
    pub nodes: Option<Vec<String>>,
    /// Seconds between `squeue` polls.
    pub poll_s: Option<f64>,
    /// Seconds a launch may stay pending before it is resubmitted.
    pub pending_timeout_s: Option<f64>,
    /// Extra `sbatch` arguments.
    pub sbatch_args: Option<Vec<String>>,
    /// CPUs per GPU to request.
    pub cpus_per_gpu: Option<u32>,
    /// First port for multi-node rendezvous.
    pub rdzv_port_base: Option<u16>,
    /// Longest wait for one Slurm command, seconds.
    pub command_timeout_s: Option<f64>,
}

/// Settings of the Slurm executor (the `[slurm]` table of the config file).
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmConfig {
    /// Partition jobs are submitted to; its nodes are the cluster dlscale schedules.
    pub partition: String,
    /// Account to charge (`--account`), if any.
    pub account: Option<String>,
    /// Per team, the account its launches are charged to instead (`[teams.NAME]
    /// slurm_account`).
    pub team_accounts: BTreeMap<String, String>,
    /// Only these nodes of the partition (default: all of them, from `sinfo`).
    pub nodes: Option<Vec<String>>,
    /// Seconds between polls of `squeue`.
    pub poll_s: f64,
    /// A launch still pending in Slurm after this many seconds is cancelled and resubmitted
    /// with a fresh decision.
    pub pending_timeout_s: f64,
    /// Extra `sbatch` arguments (`--time=…`, `--qos=…`).
    pub sbatch_args: Vec<String>,
    /// CPUs per GPU to request (`--cpus-per-task = k × cpus_per_gpu`); `None`: Slurm's default.
    pub cpus_per_gpu: Option<u32>,
    /// First port of the range multi-node rendezvous use (1000 ports).
    pub rdzv_port_base: u16,
    /// Longest wait for one Slurm command, seconds.
    pub command_timeout_s: f64,
}

impl Default for SlurmConfig {
    fn default() -> Self {
        SlurmConfig {
            partition: String::new(),
            account: None,
            team_accounts: BTreeMap::new(),
            nodes: None,
            poll_s: 2.0,
            pending_timeout_s: 120.0,
            sbatch_args: Vec::new(),
            cpus_per_gpu: None,
            rdzv_port_base: 29500,
            command_timeout_s: 30.0,
        }
    }
}

impl SlurmConfig {
    /// The settings `file` gives the Slurm executor, checked: its `[slurm]` table (which must
    /// name a partition) and the teams' accounts.
    pub fn resolve(file: &ConfigFile) -> Result<SlurmConfig> {
        let f = file.slurm.clone().unwrap_or_default();
        let d = SlurmConfig::default();
        let partition = f
            .partition
            .filter(|p| !p.trim().is_empty())
            .ok_or_else(|| anyhow!("slurm.partition is required with executor = \"slurm\""))?;
        let poll_s = duration_s("slurm.poll_s", f.poll_s.unwrap_or(d.poll_s))?;
        if poll_s < 0.2 {
            bail!("slurm.poll_s must be at least 0.2, got {poll_s}");
        }
        let command_timeout_s = duration_s(
            "slurm.command_timeout_s",
            f.command_timeout_s.unwrap_or(d.command_timeout_s),
        )?;
        if command_timeout_s < 1.0 {
            bail!("slurm.command_timeout_s must be at least 1, got {command_timeout_s}");
        }
        if let Some(nodes) = &f.nodes {
            if nodes.is_empty() || nodes.iter().any(|n| n.trim().is_empty()) {
                bail!("slurm.nodes must list node names (leave it out to use the whole partition)");
            }
        }
        if f.cpus_per_gpu == Some(0) {
            bail!("slurm.cpus_per_gpu must be at least 1");
        }
        let rdzv_port_base = f.rdzv_port_base.unwrap_or(d.rdzv_port_base);
        if !(1024..=u16::MAX - 1000).contains(&rdzv_port_base) {
            bail!(
                "slurm.rdzv_port_base must be in 1024..={}, got {rdzv_port_base}",
                u16::MAX - 1000
            );
        }
        Ok(SlurmConfig {
            partition,
            account: f.account.filter(|a| !a.trim().is_empty()),
            nodes: f.nodes,
            poll_s,
            pending_timeout_s: duration_s(
                "slurm.pending_timeout_s",
                f.pending_timeout_s.unwrap_or(d.pending_timeout_s),
            )?,
            sbatch_args: f.sbatch_args.unwrap_or_default(),
            team_accounts: file
                .teams
                .iter()
                .flatten()
                .filter_map(|(name, t)| Some((name.clone(), t.slurm_account.clone()?)))
                .collect(),
            cpus_per_gpu: f.cpus_per_gpu,
            rdzv_port_base,
            command_timeout_s,
        })
    }
}

impl ExecutorKind for SlurmKind {
    fn name(&self) -> &'static str {
        NAME
    }

    fn configure(&self, file: &ConfigFile) -> Result<Arc<dyn ExecutorSettings>> {
        Ok(Arc::new(SlurmConfig::resolve(file)?))
    }

    fn stray(&self, file: &ConfigFile, _chosen: &str) -> Option<String> {
        if file.slurm.is_some() {
            return Some("a [slurm] table needs executor = \"slurm\"".into());
        }
        let (team, _) = file
            .teams
            .iter()
            .flatten()
            .find(|(_, t)| t.slurm_account.is_some())?;
        Some(format!(
            "teams.{team}.slurm_account: for executor = \"slurm\" only"
        ))
    }
}

impl ExecutorSettings for SlurmConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    /// All but the teams' accounts, which a running executor takes from a reload.
    fn fixed(&self) -> String {
        let fixed = SlurmConfig {
            team_accounts: BTreeMap::new(),
            ..self.clone()
        };
        format!("{fixed:?}")
    }

    /// Equal GPUs on each node of a job: Slurm's GRES are per node.
    fn shape(&self) -> ShapeRule {
        ShapeRule::EqualPerNode
    }

    /// A launch left pending longer than `pending_timeout_s` is launched afresh.
    fn start_timeout_s(&self) -> Option<f64> {
        Some(self.pending_timeout_s)
    }

    /// On Slurm torchrun runs on the compute nodes: nothing to check here.
    fn torchrun(&self, given: Option<PathBuf>) -> Result<PathBuf> {
        Ok(given.unwrap_or_else(|| PathBuf::from("torchrun")))
    }

    fn build(
        &self,
        _config: &ServerConfig,
        ctx: ExecContext,
        _reports: Reports,
    ) -> Result<Arc<dyn Executor>> {
        Ok(Arc::new(SlurmExecutor::new(self.clone(), ctx)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slurm_table_and_the_teams_accounts() {
        let file: ConfigFile = toml::from_str(
            "executor = \"slurm\"\n[slurm]\npartition = \"gpu\"\nnodes = [\"n1\"]\npoll_s = 0.5\n\
             sbatch_args = [\"--time=1:00:00\"]\n[teams.vision]\nslurm_account = \"proj-vision\"\n",
        )
        .unwrap();
        let s = SlurmConfig::resolve(&file).unwrap();
        assert_eq!(s.partition, "gpu");
        assert_eq!(s.nodes.as_deref(), Some(&["n1".to_string()][..]));
        assert_eq!((s.poll_s, s.pending_timeout_s), (0.5, 120.0));
        assert_eq!(s.sbatch_args, ["--time=1:00:00"]);
        assert_eq!(
            s.team_accounts,
            [("vision".to_string(), "proj-vision".to_string())].into()
        );
        assert_eq!(
            (s.shape(), s.start_timeout_s()),
            (ShapeRule::EqualPerNode, Some(120.0))
        );
    }
}
