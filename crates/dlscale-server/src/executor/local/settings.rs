//! The local executor's configuration: the top-level keys `slots` and `slot_types` (refused with
//! another executor), and the `torchrun` it checks when the configuration is read, since its
//! launches run on this machine.
//!
//! ```toml
//! executor = "local"                         # the default
//! slots = 4                                  # GPU slots when the machine has no GPUs (default: nvidia-smi)
//! slot_types = ["a100", "a100", "t4", "t4"]  # each slot's GPU type (default: from nvidia-smi)
//! torchrun = "/path/to/venv/bin/torchrun"    # checked now: it must be executable here
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use dlscale_core::cluster::MAX_TOTAL_GPUS;
use dlscale_core::placement::ShapeRule;

use super::LocalExecutor;
use crate::config::{ConfigFile, ServerConfig};
use crate::executor::{
    find_program, ExecContext, Executor, ExecutorKind, ExecutorSettings, Reports,
};

/// The local executor's name in the configuration (`executor = "local"`).
pub const NAME: &str = "local";

/// The local executor's kind, as [`crate::executor::EXECUTORS`] registers it.
pub static KIND: LocalKind = LocalKind;

/// The local executor's kind: process groups on this machine.
#[derive(Debug)]
pub struct LocalKind;

/// Settings of the local executor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalConfig {
    /// Explicit slot count (`None`: detect GPUs with nvidia-smi).
    pub slots: Option<u32>,
    /// The GPU type of each slot, in slot order, lower-case (`None`: the types nvidia-smi's
    /// names give, or none). As many as `slots` when that is set; else checked against the GPUs
    /// found when the executor starts.
    pub slot_types: Option<Vec<String>>,
}

impl LocalConfig {
    /// The settings `file` gives the local executor, checked.
    pub fn resolve(file: &ConfigFile) -> Result<LocalConfig> {
        match file.slots {
            Some(0) => bail!("slots must be at least 1"),
            // As `dlscale optimize` bounds a cluster: past it, building the executor's slots and
            // the allocator's tables would take minutes and gigabytes.
            Some(n) if n > MAX_TOTAL_GPUS => {
                bail!("slots must be at most {MAX_TOTAL_GPUS} (GPUs in one cluster), got {n}")
            }
            _ => {}
        }
        Ok(LocalConfig {
            slots: file.slots,
            slot_types: resolve_slot_types(file.slot_types.as_deref(), file.slots)?,
        })
    }
}

impl ExecutorKind for LocalKind {
    fn name(&self) -> &'static str {
        NAME
    }

    fn configure(&self, file: &ConfigFile) -> Result<Arc<dyn ExecutorSettings>> {
        Ok(Arc::new(LocalConfig::resolve(file)?))
    }

    fn stray(&self, file: &ConfigFile, chosen: &str) -> Option<String> {
        if file.slots.is_some() {
            return Some(format!(
                "slots is for the local executor; executor = \"{chosen}\" finds its GPUs itself"
            ));
        }
        file.slot_types.as_ref().map(|_| {
            format!(
                "slot_types is for the local executor; executor = \"{chosen}\" finds its GPUs' \
                 types itself"
            )
        })
    }
}

impl ExecutorSettings for LocalConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    /// One machine: any split of a job's GPUs over its nodes (GPU types).
    fn shape(&self) -> ShapeRule {
        ShapeRule::Any
    }

    /// A launch starts when its processes are spawned: no wait to bound.
    fn start_timeout_s(&self) -> Option<f64> {
        None
    }

    /// Checked here, where a wrong path is the configuration's to name; unchecked, every
    /// torchrun launch would fail with exit code 127. A relative path is taken from the current
    /// directory, as the user wrote it (launches run in their job's workdir), and a name is
    /// pinned where `PATH` has it now. Unset, `torchrun` is looked up at each launch.
    fn torchrun(&self, given: Option<PathBuf>) -> Result<PathBuf> {
        let Some(path) = given else {
            return Ok(PathBuf::from("torchrun"));
        };
        let cwd = std::env::current_dir().context("cannot read the current directory")?;
        let path = path.to_string_lossy();
        find_program(&path, std::env::var_os("PATH").as_deref(), &cwd)
            .map_err(|e| anyhow!("torchrun: {e}"))
    }

    fn build(
        &self,
        _config: &ServerConfig,
        ctx: ExecContext,
        reports: Reports,
    ) -> Result<Arc<dyn Executor>> {
        Ok(Arc::new(LocalExecutor::from_config(self, ctx, reports)?))
    }
}

/// The `slot_types` list, checked and lower-cased: one GPU type name per slot (as many as
/// `slots`, when that is set), each a name a job's `types` can use.
fn resolve_slot_types(types: Option<&[String]>, slots: Option<u32>) -> Result<Option<Vec<String>>> {
    let Some(types) = types else {
        return Ok(None);
    };
    if types.is_empty() {
        bail!("slot_types must name one GPU type per slot, got an empty list (leave it out for untyped slots)");
    }
    let types: Vec<String> = types
        .iter()
        .enumerate()
        .map(|(i, name)| {
            // Written as nvidia-smi or a vendor writes it (`A100`), named as jobs name it.
            let name = name.trim().to_lowercase();
            if name.is_empty() {
                bail!("slot_types[{i}] must name a GPU type, got an empty name");
            }
            if !dlscale_core::fleet::is_type_name(&name) {
                bail!(
                    "slot_types[{i}]: {name:?} is not a GPU type name (lower-case letters, digits, \
                     '-', '_' and '.', starting with a letter)"
                );
            }
            Ok(name)
        })
        .collect::<Result<_>>()?;
    if let Some(slots) = slots {
        if types.len() != slots as usize {
            bail!(
                "slot_types names {} GPU type(s) but slots is {slots}: one type per slot",
                types.len()
            );
        }
    }
    Ok(Some(types))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_types_are_one_checked_lower_case_name_per_slot() {
        let resolve = |text: &str| {
            let file: ConfigFile = toml::from_str(text).unwrap();
            LocalConfig::resolve(&file).map(|c| c.slot_types)
        };
        assert_eq!(resolve("slots = 2").unwrap(), None, "untyped unless said");
        assert_eq!(
            resolve("slots = 3\nslot_types = [\"A100\", \" a100\", \"t4\"]").unwrap(),
            Some(vec!["a100".into(), "a100".into(), "t4".into()])
        );
        // Without slots they are checked against the GPUs nvidia-smi finds, at the start.
        assert_eq!(
            resolve("slot_types = [\"h100\"]").unwrap(),
            Some(vec!["h100".into()])
        );
        for (text, expected) in [
            (
                "slots = 2\nslot_types = []",
                "slot_types must name one GPU type per slot, got an empty list",
            ),
            (
                "slots = 2\nslot_types = [\"a100\", \" \"]",
                "slot_types[1] must name a GPU type, got an empty name",
            ),
            (
                "slots = 2\nslot_types = [\"a100\", \"rtx 4090\"]",
                "slot_types[1]: \"rtx 4090\" is not a GPU type name",
            ),
            (
                "slots = 4\nslot_types = [\"a100\", \"t4\"]",
                "slot_types names 2 GPU type(s) but slots is 4: one type per slot",
            ),
        ] {
            let err = resolve(text).unwrap_err().to_string();
            assert!(err.starts_with(expected), "{text}: {err}");
        }
    }
}
