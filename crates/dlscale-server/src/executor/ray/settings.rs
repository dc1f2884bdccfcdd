//! The Ray executor's configuration: the `[ray]` table (refused with another executor).
//!
//! ```toml
//! executor = "ray"
//!
//! [ray]
//! address = "http://head:8265"  # required: the Ray dashboard (its Jobs REST API)
//! resource = "GPU"              # what one worker takes one unit of (a custom one on test clusters)
//! python = "python"             # runs a torchrun-launcher job's script on the cluster
//! poll_s = 2                    # job-list poll period
//! pending_timeout_s = 300       # launch afresh a Ray job pending longer than this
//! request_timeout_s = 30        # longest wait for one request to the dashboard
//! ```
//!
//! Launches run on the cluster: `torchrun` is not used.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use dlscale_core::placement::ShapeRule;
use serde::Deserialize;

use super::RayExecutor;
use crate::config::{duration_s, ConfigFile, ServerConfig};
use crate::executor::{ExecContext, Executor, ExecutorKind, ExecutorSettings, Reports};
use crate::spec::Launcher;

/// Why the Ray executor runs no `srun` job.
pub const SRUN_REFUSED: &str = "launcher srun runs on Slurm only; on Ray a job's command is its \
     Ray Train script (launcher torchrun, run with ray.python) or any command (launcher plain)";

/// The Ray executor's name in the configuration (`executor = "ray"`).
pub const NAME: &str = "ray";

/// The Ray executor's kind, as [`crate::executor::EXECUTORS`] registers it.
pub static KIND: RayKind = RayKind;

/// The Ray executor's kind: Ray jobs on a Ray cluster.
#[derive(Debug)]
pub struct RayKind;

/// The `[ray]` table of the config file, every key optional except `address`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RayFile {
    /// The Ray dashboard's address (`http://head:8265`), where the Jobs API is.
    pub address: Option<String>,
    /// The resource one worker takes one unit of (default `GPU`).
    pub resource: Option<String>,
    /// The Python interpreter a `torchrun`-launcher job's script runs with on the cluster.
    pub python: Option<String>,
    /// Seconds between observations of the cluster.
    pub poll_s: Option<f64>,
    /// Seconds a launch may stay pending before it is launched afresh.
    pub pending_timeout_s: Option<f64>,
    /// Longest wait for one request to the dashboard, seconds.
    pub request_timeout_s: Option<f64>,
}

/// Settings of the Ray executor.
#[derive(Debug, Clone, PartialEq)]
pub struct RayConfig {
    /// The dashboard's base URL, without a trailing `/`.
    pub address: String,
    /// The Ray resource one worker takes one unit of: `GPU`, or a custom resource (a test
    /// cluster's `fake_gpu`); the cluster's nodes offer as many workers as they have of it.
    pub resource: String,
    /// The interpreter of a job whose launcher is `torchrun` (a Python script): the entrypoint
    /// is `<python> <script> <args>`.
    pub python: String,
    /// Seconds between observations.
    pub poll_s: f64,
    /// A launch still pending after this many seconds is stopped and launched afresh.
    pub pending_timeout_s: f64,
    /// Longest wait for one request, seconds.
    pub request_timeout_s: f64,
}

impl RayConfig {
    /// The settings `file`'s `[ray]` table gives; errors name the key (`ray.address`).
    pub fn resolve(file: &ConfigFile) -> Result<RayConfig> {
        let f = file.ray.clone().unwrap_or_default();
        let address = f.address.ok_or_else(|| {
            anyhow!("ray.address is required with executor = \"ray\" (the Ray dashboard, http://head:8265)")
        })?;
        let address = address.trim_end_matches('/').to_string();
        if !address.starts_with("http://") || address.len() <= "http://".len() {
            bail!("ray.address must be an http:// URL of the Ray dashboard, got '{address}'");
        }
        address
            .parse::<hyper::Uri>()
            .map_err(|e| anyhow!("ray.address: '{address}' is not a URL: {e}"))?;
        let resource = f.resource.unwrap_or_else(|| "GPU".to_string());
        if resource.is_empty() || resource.chars().any(|c| c.is_whitespace() || c == '"') {
            bail!("ray.resource must be a Ray resource name, got '{resource}'");
        }
        let python = f.python.unwrap_or_else(|| "python".to_string());
        if python.trim().is_empty() {
            bail!("ray.python must name an interpreter, got an empty string");
        }
        let seconds = |key: &str, value: Option<f64>, default: f64, min: f64| -> Result<f64> {
            let name = format!("ray.{key}");
            let v = duration_s(&name, value.unwrap_or(default))?;
            if v < min {
                bail!("{name} must be at least {min}, got {v}");
            }
            Ok(v)
        };
        Ok(RayConfig {
            address,
            resource,
            python,
            poll_s: seconds("poll_s", f.poll_s, 2.0, 0.2)?,
            pending_timeout_s: seconds("pending_timeout_s", f.pending_timeout_s, 300.0, 1.0)?,
            request_timeout_s: seconds("request_timeout_s", f.request_timeout_s, 30.0, 1.0)?,
        })
    }
}

impl ExecutorKind for RayKind {
    fn name(&self) -> &'static str {
        NAME
    }

    fn configure(&self, file: &ConfigFile) -> Result<Arc<dyn ExecutorSettings>> {
        Ok(Arc::new(RayConfig::resolve(file)?))
    }

    fn stray(&self, file: &ConfigFile, _chosen: &str) -> Option<String> {
        file.ray
            .as_ref()
            .map(|_| "a [ray] table needs executor = \"ray\"".to_string())
    }
}

impl ExecutorSettings for RayConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    /// Any split: Ray places the workers itself, wherever the resource is free.
    fn shape(&self) -> ShapeRule {
        ShapeRule::Any
    }

    /// A launch left pending longer than `pending_timeout_s` is launched afresh.
    fn start_timeout_s(&self) -> Option<f64> {
        Some(self.pending_timeout_s)
    }

    /// `srun` is Slurm's: on Ray a job's command is its Ray Train driver or any command.
    fn refuses(&self, launcher: Launcher) -> Option<String> {
        (launcher == Launcher::Srun).then(|| SRUN_REFUSED.to_string())
    }

    /// Ray starts the workers: torchrun is not used, and not checked.
    fn torchrun(&self, given: Option<PathBuf>) -> Result<PathBuf> {
        Ok(given.unwrap_or_else(|| PathBuf::from("torchrun")))
    }

    fn build(
        &self,
        config: &ServerConfig,
        ctx: ExecContext,
        _reports: Reports,
    ) -> Result<Arc<dyn Executor>> {
        Ok(Arc::new(RayExecutor::new(
            self.clone(),
            ctx,
            config.grace_s,
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(text: &str) -> Result<RayConfig> {
        RayConfig::resolve(&ConfigFile::parse(text, "dlscale.toml")?)
    }

    #[test]
    fn the_ray_table_is_checked_key_by_key() {
        let cases = [
            ("executor = \"ray\"", "ray.address is required"),
            (
                "[ray]\naddress = \"head:8265\"",
                "ray.address must be an http:// URL",
            ),
            (
                "[ray]\naddress = \"http://h:8265\"\npoll_s = 0.0",
                "ray.poll_s must be at least 0.2",
            ),
            (
                "[ray]\naddress = \"http://h:8265\"\npoll_s = -1.0",
                "ray.poll_s must be a finite number",
            ),
            (
                "[ray]\naddress = \"http://h:8265\"\nresource = \"a b\"",
                "ray.resource must be a Ray resource name",
            ),
            (
                "[ray]\naddress = \"http://h:8265\"\npython = \" \"",
                "ray.python must name an interpreter",
            ),
            ("[ray]\nadress = \"http://h:8265\"", "adress"),
        ];
        for (text, expected) in cases {
            let err = format!("{:#}", resolve(text).unwrap_err());
            assert!(err.contains(expected), "{text:?}: {err}");
        }
        let cfg =
            resolve("[ray]\naddress = \"http://head:8265/\"\nresource = \"fake_gpu\"").unwrap();
        assert_eq!(
            (
                cfg.address.as_str(),
                cfg.resource.as_str(),
                cfg.python.as_str()
            ),
            ("http://head:8265", "fake_gpu", "python")
        );
        assert_eq!(
            (cfg.shape(), cfg.start_timeout_s(), cfg.poll_s),
            (ShapeRule::Any, Some(300.0), 2.0)
        );
        assert!(cfg.refuses(Launcher::Srun).is_some());
        assert!(
            cfg.refuses(Launcher::Torchrun).is_none() && cfg.refuses(Launcher::Plain).is_none()
        );
    }
}
